"""Smoke test of ``bench/agents.py``: the quick mode runs and reports every number
(no timing assertions: timing is not a test)."""

from __future__ import annotations

import json
from pathlib import Path

from .helpers import quick_bench


def test_quick_run_prints_and_writes_every_number(tmp_path: Path) -> None:
    out = tmp_path / "agents.json"
    done = quick_bench("agents.py", out, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "G1 per call" in done.stdout and "agent_tool overhead per call" in done.stdout
    data = json.loads(out.read_text())
    assert set(data["G1"]["us_per_call"]) == {"child run() in a plain tool", "agent_tool"}
