"""The engine's rules revision: logs of older rules replay as they were written.

``fixtures/rules-0/`` holds logs written under revision 0 (a format-1 log by
agentloop 0.1, a format-2 log before revision 1): a run that fails on a response
reporting usage, which revision 0 did not count and revision 1 does.
``fixtures/rules-1/`` holds logs written under revision 1: runs ended by a reply
no earlier event records, which revision 1 recorded in ``run.finished`` and
revision 2 records in ``session.complete``.
"""

from __future__ import annotations

import math
import shutil
from pathlib import Path
from typing import Any

import msgspec
import pytest

import replay
from agentloop import (
    RULES_REVISION,
    AgentLoop,
    CallerProtocolError,
    FunctionModel,
    HookAbort,
    HookRegistry,
    ModelAttempt,
    ModelChunk,
    ModelFailure,
    ModelResponse,
    RunFinishedEvent,
    SessionCompleteEvent,
    SessionStartEvent,
    TextBlock,
    ToolCall,
    ToolResult,
    Usage,
    UserMessage,
    agent_loop,
    decode_event,
    encode_event,
)
from replay import ReplayDivergence, SQLiteStore, read_log, recorded_replies, write_log
from replay.__main__ import main
from replay.pytest_plugin import AgentCassette

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
RULES_0 = sorted((FIXTURES / "rules-0").glob("*.jsonl"))
RULES_1 = sorted((FIXTURES / "rules-1").glob("*.jsonl"))
QUESTION = [UserMessage("u1", "What is the weather in Oslo?")]


def _weather_tool() -> Any:
    """The tool the rules-0 logs were recorded with (fixtures/rules-0/make_logs.py)."""
    namespace: dict[str, object] = {}
    source = (FIXTURES / "rules-0" / "make_logs.py").read_text(encoding="utf-8")
    exec(compile(source, "make_logs.py", "exec"), namespace)
    return namespace["weather"]


def _fed(events: list[object], **options: object) -> AgentLoop:
    """A fresh loop for the log's start, fed the log's recorded replies."""
    start = events[0]
    assert type(start) is SessionStartEvent
    loop = agent_loop(QUESTION, tools=start.tools, started_at=start.at, **options)  # type: ignore[arg-type]
    next(loop)
    for _, reply in recorded_replies(events):  # type: ignore[arg-type]
        try:
            loop.send(reply)
        except StopIteration:
            break
    return loop


def test_there_are_logs_of_rules_0_in_both_formats() -> None:
    assert [p.name for p in RULES_0] == [
        "error_stop_with_usage.v1.jsonl",
        "error_stop_with_usage.v2.jsonl",
    ]
    assert [read_log(p)[0].rules for p in RULES_0] == [0, 0]  # type: ignore[attr-defined]
    assert b'"rules"' not in (FIXTURES / "rules-0" / "error_stop_with_usage.v2.jsonl").read_bytes()


@pytest.mark.parametrize("path", RULES_0, ids=lambda p: p.name)
def test_a_log_of_rules_0_replays_as_it_was_written(
    path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    events = read_log(path)
    finished = events[-1]
    assert type(finished) is RunFinishedEvent
    assert finished.usage == Usage(120, 20)  # not the failed response's 150 + 4
    result = replay.replay(events).result
    assert result is not None and result.usage == Usage(120, 20)
    assert main(["check", str(path)]) == 0
    assert "ok" in capsys.readouterr().out


def test_the_same_replies_under_the_newest_rules_count_the_failed_response() -> None:
    events = read_log(RULES_0[1])
    old = _fed(events, rules=0)
    assert [encode_event(e) for e in old.log] == [encode_event(e) for e in events]
    new = _fed(events)
    assert new.result is not None and new.result.usage == Usage(270, 24)
    assert new.log[0].rules == RULES_REVISION == 3  # type: ignore[union-attr]
    assert b'"rules":3' in encode_event(new.log[0])


def test_rules_0_counts_a_response_when_it_is_committed() -> None:
    # A response the after_plan hook then aborts is not committed: revision 0 does
    # not count it, revision 1 does (it was billed). Failures and attempts count
    # from revision 1 on (revision 0 had neither).
    def abort(*args: object) -> None:
        raise HookAbort("no")

    hooks = HookRegistry()
    hooks.on("after_plan", abort)

    tried = ModelAttempt(model="primary", error="overloaded", usage=Usage(3, 0))
    for rules, expected in ((0, Usage()), (1, Usage(8, 2))):
        loop = agent_loop(QUESTION, tools=[], hooks=hooks, rules=rules)
        request = next(loop)
        response = ModelResponse(request.id, "r1", (TextBlock("hi"),), "stop", Usage(5, 2))
        with pytest.raises(StopIteration):
            loop.send(msgspec.structs.replace(response, attempts=(tried,)))
        assert loop.usage == expected, rules
    for rules, expected in ((0, Usage()), (1, Usage(7, 1))):
        loop = agent_loop(QUESTION, tools=[], rules=rules)
        request = next(loop)
        with pytest.raises(StopIteration):
            loop.send(ModelFailure(request.id, "down", usage=Usage(7, 1)))
        assert loop.usage == expected, rules


@pytest.mark.parametrize(
    ("rules", "message"),
    [
        (-1, r"rules must be a rules revision \(an int from 0\), got -1"),
        (True, "got True"),
        ("1", "got '1'"),
        (None, "got None"),
        (4, "rules revision 4 is newer than this agentloop follows \\(up to 3\\)"),
    ],
)
def test_a_rules_revision_that_is_not_one_is_refused(rules: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        agent_loop(QUESTION, tools=[], rules=rules)  # type: ignore[arg-type]


def test_a_log_of_a_newer_revision_does_not_replay(tmp_path: Path) -> None:
    events = read_log(RULES_0[1])
    newer = [msgspec.structs.replace(events[0], rules=4), *events[1:]]  # type: ignore[type-var]
    write_log(tmp_path / "newer.jsonl", newer)
    with pytest.raises(ReplayDivergence, match="rules revision 4 is newer than this agentloop"):
        replay.replay(read_log(tmp_path / "newer.jsonl"))


@pytest.mark.parametrize("path", RULES_0, ids=lambda p: p.name)
def test_a_stored_session_of_rules_0_continues_under_its_rules(path: Path, tmp_path: Path) -> None:
    # The session's start, given again, is compared under the rules it was stored with.
    events = read_log(path)
    with SQLiteStore(tmp_path / "s.db") as store:
        store.create("old", events, status="failed", steps=2)
        result = replay.run_durable(
            store,
            "old",
            QUESTION,
            model=FunctionModel(lambda request: "unused"),
            tools=[_weather_tool()],
        )
        assert result.status == "failed"  # type: ignore[union-attr]
        assert result.usage == Usage(120, 20)  # type: ignore[union-attr]


@pytest.mark.parametrize("path", RULES_0, ids=lambda p: p.name)
def test_a_cassette_of_rules_0_replays(path: Path, tmp_path: Path) -> None:
    shutil.copyfile(path, tmp_path / "session.jsonl")
    cassette = AgentCassette(directory=tmp_path, name="session", mode="none", rootpath=tmp_path)
    result = cassette.run(QUESTION, model=None, tools=[_weather_tool()])
    assert (result.status, result.usage) == ("failed", Usage(120, 20))
    assert list(cassette.events) == read_log(path)


def test_the_newest_rules_are_recorded_and_replayed(tmp_path: Path) -> None:
    with SQLiteStore(tmp_path / "s.db") as store:
        model = FunctionModel(lambda request: "Rain.")
        result = replay.run_durable(store, "new", QUESTION, model=model, tools=[])
        events = store.events("new")
    assert result.status == "completed"  # type: ignore[union-attr]
    assert events[0].rules == RULES_REVISION  # type: ignore[union-attr]
    assert replay.replay(events).result == result


# --------------------------------------------------------------------------- revision 2


def test_there_are_logs_of_rules_1() -> None:
    assert [p.name for p in RULES_1] == ["caller_misuse.jsonl", "cancel_mid_tool.jsonl"]
    for path in RULES_1:
        events = read_log(path)
        assert events[0].rules == 1  # type: ignore[union-attr]
        assert type(events[-2]) is SessionCompleteEvent and events[-2].reply is None
        assert type(events[-1]) is RunFinishedEvent and events[-1].reply is not None


@pytest.mark.parametrize("path", RULES_1, ids=lambda p: p.name)
def test_a_log_of_rules_1_replays_as_it_was_written(
    path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    events = read_log(path)
    replayed = replay.replay(events)
    assert [encode_event(e) for e in replayed.events] == [encode_event(e) for e in events]
    assert main(["check", str(path)]) == 0
    assert "ok" in capsys.readouterr().out


def _misused(rules: int) -> AgentLoop:
    loop = agent_loop(QUESTION, tools=[], rules=rules)
    request = next(loop)
    with pytest.raises(CallerProtocolError):
        loop.send(ToolResult("c1", "not asked for"))
    assert request.id == "request-001"
    return loop


def test_rules_2_records_the_reply_that_ended_the_run_in_session_complete() -> None:
    misused = ToolResult("c1", "not asked for")
    old, new = _misused(1), _misused(2)
    assert (old.log[-2].reply, old.log[-1].reply) == (None, misused)  # type: ignore[union-attr]
    assert (new.log[-2].reply, new.log[-1].reply) == (misused, None)  # type: ignore[union-attr]
    assert old.result == new.result
    # Written once (a reply is recorded by exactly one event), and read back.
    assert recorded_replies(new.log) == [(len(new.log) - 2, misused)]
    line = encode_event(new.log[-2])
    assert line.startswith(b'{"type":"session.complete"') and b'"reply":{' in line
    assert b'"reply"' not in encode_event(new.log[-1])


def test_values_json_cannot_hold_in_session_complete_are_tagged() -> None:
    # An invalid chunk that ends the run is recorded as received, NaN and all.
    loop = agent_loop(QUESTION, tools=[])
    request = next(loop)
    chunk = ModelChunk(request.id, ToolCall("c1", "add", {"x": math.nan, "y": 2**70}))
    with pytest.raises(StopIteration):
        loop.send(chunk)
    complete = loop.log[-2]
    assert type(complete) is SessionCompleteEvent and complete.reply is not None
    line = encode_event(complete)
    assert b'{"$float":"nan"}' in line and b'{"$int":"1180591620717411303424"}' in line
    decoded = decode_event(line)
    assert encode_event(decoded) == line
    assert decoded.reply.block.arguments["y"] == 2**70  # type: ignore[union-attr]
    assert replay.replay(loop.log).result == loop.result
    resumed, effect = replay.resume(list(loop.log)[:-1])
    assert effect is None and resumed.result == loop.result


@pytest.mark.parametrize("rules", [1, 2])
def test_a_log_cut_after_session_complete_resumes_when_rules_2_recorded_the_reply(
    rules: int,
) -> None:
    loop = _misused(rules)
    full = list(loop.log)
    cut = full[:-1]  # run.finished lost
    if rules == 1:
        with pytest.raises(replay.ReplayError, match="the run cannot be rebuilt from this log"):
            replay.resume(cut)
        return
    resumed, effect = replay.resume(cut)
    assert effect is None and resumed.result == loop.result
    assert [encode_event(e) for e in resumed.log] == [encode_event(e) for e in full]


def test_a_rules_1_log_forked_at_session_complete_has_nothing_to_fork() -> None:
    # The reply that ended the run is recorded after session.complete (in
    # run.finished): fork feeds it to reach session.complete, and the run is over.
    events = read_log(FIXTURES / "rules-1" / "caller_misuse.jsonl")
    with pytest.raises(replay.ReplayError, match="nothing to fork"):
        replay.fork(events, len(events) - 2)
