"""The engine's rules revision: logs of older rules replay as they were written."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentloop import RunFinishedEvent, Usage
from replay import read_log, replay
from replay.__main__ import main

RULES_0 = sorted((Path(__file__).resolve().parent.parent / "fixtures" / "rules-0").glob("*.jsonl"))


def test_there_are_logs_of_rules_0_in_both_formats() -> None:
    assert [p.name for p in RULES_0] == [
        "error_stop_with_usage.v1.jsonl",
        "error_stop_with_usage.v2.jsonl",
    ]


@pytest.mark.parametrize("path", RULES_0, ids=lambda p: p.name)
def test_a_log_of_rules_0_replays_as_it_was_written(
    path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    events = read_log(path)
    finished = events[-1]
    assert type(finished) is RunFinishedEvent
    assert finished.usage == Usage(120, 20)  # not the failed response's 150 + 4
    result = replay(events).result
    assert result is not None and result.usage == Usage(120, 20)
    assert main(["check", str(path)]) == 0
    assert "ok" in capsys.readouterr().out
