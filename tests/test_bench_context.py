"""Smoke test of ``bench/context.py``: the quick mode runs and reports every number.

No timing assertions (timing is not a test).
"""

from __future__ import annotations

import json
from pathlib import Path

from .helpers import quick_bench


def test_quick_run_prints_and_writes_every_number(tmp_path: Path) -> None:
    out = tmp_path / "context.json"
    done = quick_bench("context.py", out, timeout=300)
    assert done.returncode == 0, done.stderr
    for needle in ("C1 µs per step", "no window", "window, no policy", "SummarizeOlder()", "goal"):
        assert needle in done.stdout, done.stdout
    numbers = json.loads(out.read_text())
    assert numbers["steps"] == 300
    rows = numbers["C1"]
    assert rows["no window"]["short_us"] > 0 and rows["no window"]["long_us"] > 0
    assert rows["window + SummarizeOlder()"]["long_us"] > 0
    assert rows["window, no policy"]["short_us"] > 0
