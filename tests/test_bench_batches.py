"""Smoke test of ``bench/batches.py``: the quick mode runs and reports every number.

No timing assertions (timing is not a test).
"""

from __future__ import annotations

import json
from pathlib import Path

from .helpers import quick_bench


def test_quick_run_prints_and_writes_every_number(tmp_path: Path) -> None:
    out = tmp_path / "batches.json"
    done = quick_bench("batches.py", out, timeout=120)
    assert done.returncode == 0, done.stderr
    for needle in (
        "B1 5 tool calls of 50 ms each, wall time of run()",
        "B2 5 tool calls of 50 ms each, wall time of arun()",
        "sequential",
        "parallel_tools=True",
        "one call",
        "goal",
    ):
        assert needle in done.stdout, done.stdout
    for case in ("B1", "B2"):
        numbers = json.loads(out.read_text())[case]
        assert numbers["calls"] == 5
        assert numbers["sequential_ms"] > 0 and numbers["parallel_ms"] > 0
        assert numbers["one_call_ms"] > 0
