"""Smoke test of ``bench/drivers.py``: the quick mode runs and reports every number
(no timing assertions: timing is not a test)."""

from __future__ import annotations

import json
from pathlib import Path

from .helpers import quick_bench


def test_quick_run_prints_and_writes_every_number(tmp_path: Path) -> None:
    out = tmp_path / "drivers.json"
    done = quick_bench("drivers.py", out, timeout=300)
    assert done.returncode == 0, done.stderr
    for needle in (
        "A1 per step",
        "arun vs run (sync tools), goal <= 1.5x",
        "the same, the tool a sync function",
        "A2 50 concurrent",
        "A3 OpenAIChatModel over a recorded stream",
    ):
        assert needle in done.stdout, done.stdout
    data = json.loads(out.read_text())
    assert set(data["A1"]["us_per_step"]) == {
        "run",
        "arun (sync tool)",
        "arun (sync tool, asyncio.to_thread)",
        "arun (async tool)",
    }
    assert set(data["A2"]["wall_ms_by_tool"]) == {
        "async tool",
        "sync tool",
        "sync tool, asyncio.to_thread",
    }
    assert data["A2"]["sessions"] == 50 and data["A2"]["peak_rss_mib"] > 0
    assert set(data["A3"]["us_per_step"]) == {
        "OpenAI client (stream)",
        "AsyncOpenAI client (astream)",
    }
