"""Standard-library logging (DESIGN §22): loggers, levels, laziness, cost when off."""

from __future__ import annotations

import logging
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

import agentloop._logging
import replay
from agentloop import (
    Cancel,
    EventLog,
    ModelError,
    ModelRequest,
    ScriptedModel,
    ScriptedResponse,
    ToolCall,
    ToolResult,
    Usage,
    UserMessage,
    agent_loop,
    encode_event,
    run,
    tool,
)

from .helpers import add_int as add

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"


def scripted() -> ScriptedModel:
    return ScriptedModel(
        [
            ScriptedResponse.tool_calls(
                "resp-1", ToolCall("call-1", "add", {"left": 20, "right": 22}), usage=Usage(10, 3)
            ),
            ScriptedResponse.text("resp-2", "42", usage=Usage(20, 1)),
        ]
    )


def session(log: EventLog | None = None) -> agentloop.RunResult:
    return run([UserMessage("u1", "20 + 22?")], model=scripted(), tools=[add], log=log)


def records(caplog: pytest.LogCaptureFixture, name: str, level: int) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == name and r.levelno == level]


class Collect(logging.Handler):
    """Keeps records without formatting them."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


# --------------------------------------------------------------------------- set-up


@pytest.mark.parametrize("name", ["agentloop", "replay"])
def test_each_library_logger_has_a_null_handler(name: str) -> None:
    handlers = logging.getLogger(name).handlers
    assert any(type(h) is logging.NullHandler for h in handlers)


def test_an_unconfigured_application_prints_nothing(tmp_path: Path) -> None:
    # Without the NullHandlers, logging's last-resort handler would print warnings.
    code = (
        "import logging, agentloop, replay\n"
        "for name in ('agentloop', 'agentloop.models', 'replay'):\n"
        "    logging.getLogger(name).warning('retrying')\n"
    )
    completed = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=tmp_path
    )
    assert (completed.stdout, completed.stderr) == ("", "")


# --------------------------------------------------------------------------- DEBUG


def test_debug_logs_every_event_in_order_as_its_json_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="agentloop")
    log = EventLog()
    session(log)
    debug = records(caplog, "agentloop", logging.DEBUG)
    assert [r.agentloop_event for r in debug] == list(log)
    assert all(r.agentloop_event is event for r, event in zip(debug, log, strict=True))
    for record, event in zip(debug, log, strict=True):
        assert record.getMessage() == (
            f"#{event.sequence} {event.type}: {encode_event(event).decode()}"
        )


def test_the_json_line_is_built_only_when_a_handler_formats_the_record(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    encoded: list[object] = []

    def counting_encode(event: agentloop.Event) -> bytes:
        encoded.append(event)
        return encode_event(event)

    monkeypatch.setattr(agentloop._logging, "encode_event", counting_encode)
    # A logger outside the hierarchy: pytest's capture handlers (which format every
    # record) cannot reach it.
    isolated = logging.Logger("isolated", logging.DEBUG)
    collect = Collect()
    isolated.addHandler(collect)
    log = EventLog()
    assert agentloop._logging.follow(log, isolated) is not None
    session(log)
    assert len(collect.records) == len(log) == 17 and encoded == []
    assert collect.records[5].getMessage().startswith('#5 plan.commit: {"type":"plan.commit"')
    assert encoded == [log[5]]


@pytest.mark.parametrize("level", [logging.INFO, logging.WARNING])
def test_with_debug_off_nothing_is_subscribed(
    level: int, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    caplog.set_level(level, logger="agentloop")
    subscribed: list[object] = []
    subscribe = EventLog.subscribe

    def spy(self: EventLog, fn: Callable[[agentloop.Event], object]) -> Callable[[], None]:
        subscribed.append(fn)
        return subscribe(self, fn)

    monkeypatch.setattr(EventLog, "subscribe", spy)
    log = EventLog()
    session(log)
    assert subscribed == [] and log._subscribers == []
    assert records(caplog, "agentloop", logging.DEBUG) == []


def test_debug_turned_on_during_a_run_starts_with_the_next_run(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="agentloop")  # restored after the test
    logging.getLogger("agentloop").setLevel(logging.INFO)

    @tool
    def add(left: int, right: int) -> int:
        """Add two integers, and turn DEBUG on."""
        logging.getLogger("agentloop").setLevel(logging.DEBUG)
        return left + right

    run([UserMessage("u1", "20 + 22?")], model=scripted(), tools=[add])
    assert records(caplog, "agentloop", logging.DEBUG) == []
    session()
    assert len(records(caplog, "agentloop", logging.DEBUG)) == 17


def test_the_raw_generator_does_not_log(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    loop = agent_loop([UserMessage("u1", "hi")], tools=[])
    request = next(loop)
    assert type(request) is ModelRequest
    with pytest.raises(StopIteration):
        loop.send(Cancel("enough"))
    assert caplog.records == []


# --------------------------------------------------------------------------- INFO


def test_info_logs_each_run_end_with_status_steps_and_usage(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="agentloop")
    result = session()
    (info,) = records(caplog, "agentloop", logging.INFO)
    assert info.getMessage() == "run completed (goal_met): 2 of 8 steps, 30 input + 4 output tokens"
    assert info.agentloop_result is result
    assert records(caplog, "agentloop", logging.DEBUG) == []


def test_a_failed_run_logs_its_error(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="agentloop")

    class Down:
        def stream(self, request: ModelRequest) -> list[object]:
            raise ModelError("503 Service Unavailable")

    result = run([UserMessage("u1", "hi")], model=Down(), tools=[], max_steps=3)
    (info,) = records(caplog, "agentloop", logging.INFO)
    assert result.status == "failed"
    assert result.error is not None and "503 Service Unavailable" in result.error.message
    assert info.getMessage() == (
        f"run failed ({result.reason}): 1 of 3 steps, 0 input + 0 output tokens; "
        f"MODEL_ERROR: {result.error.message}"
    )


def test_a_run_that_raises_still_logs_its_end(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="agentloop")

    @tool
    def add(left: int, right: int) -> int:
        """Add two integers (or get interrupted)."""
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run([UserMessage("u1", "20 + 22?")], model=scripted(), tools=[add])
    (info,) = records(caplog, "agentloop", logging.INFO)
    assert info.getMessage().startswith("run cancelled")
    assert info.agentloop_result.status == "cancelled"


def test_a_run_that_never_finished_logs_no_end(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="agentloop")
    log = EventLog()

    def broken_subscriber(event: agentloop.Event) -> None:
        if event.type == "step.start":
            raise RuntimeError("subscriber bug")

    log.subscribe(broken_subscriber)
    with pytest.raises(RuntimeError, match="subscriber bug"):
        session(log)
    assert records(caplog, "agentloop", logging.INFO) == []


# --------------------------------------------------------------------------- replay


def test_replay_logs_each_regenerated_event_and_its_outcome(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="replay")
    events = replay.read_log(FIXTURES / "tool_calls.jsonl")
    replay.replay(events)
    debug = records(caplog, "replay", logging.DEBUG)
    assert [encode_event(r.agentloop_event) for r in debug] == [encode_event(e) for e in events]
    (info,) = records(caplog, "replay", logging.INFO)
    assert info.getMessage() == f"replayed {len(events)} events: completed"
    assert [r for r in caplog.records if r.name == "agentloop"] == []


def test_replay_of_a_log_that_waits_says_what_for(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="replay")
    events = replay.read_log(FIXTURES / "waiting_on_tool.jsonl")
    pending = replay.replay(events).pending
    assert isinstance(pending, agentloop.ToolRequest)
    (info,) = records(caplog, "replay", logging.INFO)
    assert info.getMessage() == (
        f"replayed {len(events)} events: waits for ToolRequest {pending.call.id} "
        f"({pending.call.name})"
    )


def test_replay_of_an_invalid_transcript_log(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="replay")
    replay.replay(replay.read_log(FIXTURES / "invalid_transcript.jsonl"))
    (info,) = records(caplog, "replay", logging.INFO)
    assert info.getMessage() == "replayed 1 event: failed (INVALID_TRANSCRIPT)"


def test_a_resumed_loop_is_the_callers_and_logs_no_more_to_replay(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="replay")
    events = replay.read_log(FIXTURES / "waiting_on_tool.jsonl")
    loop, effect = replay.resume(events)
    assert isinstance(effect, agentloop.ToolRequest)
    infos = records(caplog, "replay", logging.INFO)
    assert [r.getMessage() for r in infos] == [
        f"resumed after {len(events)} events: waits for ToolRequest {effect.call.id} "
        f"({effect.call.name})"
    ]
    replayed = len(records(caplog, "replay", logging.DEBUG))
    assert replayed == len(events)
    loop.send(ToolResult(effect.call.id, "done", at=effect_time(events)))
    assert len(loop.log) > len(events)
    assert len(records(caplog, "replay", logging.DEBUG)) == replayed
    loop.close()


def test_fork_logs_where_it_branched(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="replay")
    events = replay.read_log(FIXTURES / "tool_calls.jsonl")
    sequence = next(e.sequence for e in events if e.type == "tool.call")
    loop, effect = replay.fork(events, sequence)
    (info,) = records(caplog, "replay", logging.INFO)
    assert isinstance(effect, agentloop.ToolRequest)
    assert info.getMessage() == (
        f"forked after event #{sequence}: waits for ToolRequest {effect.call.id} "
        f"({effect.call.name})"
    )
    loop.close()


def effect_time(events: list[agentloop.Event]) -> float | None:
    return events[-1].at
