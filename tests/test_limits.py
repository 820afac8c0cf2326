"""Limits are options (DESIGN §16): every ceiling set per run, recorded, replayed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentloop import (
    LIMITS_HARD_CAPS,
    MAX_AGENT_STEPS,
    AgentLoop,
    EventLog,
    Limits,
    ModelRequest,
    ScriptedModel,
    ScriptedResponse,
    SessionStartEvent,
    ToolCall,
    UserMessage,
    agent_loop,
    encode_event,
    run,
    tool,
)
from agentloop._validation import arguments_problems
from replay import fork, read_log, replay, resume, write_log

from .helpers import ECHO, call, chunks, drive, response

FIELDS = tuple(LIMITS_HARD_CAPS)


def test_the_defaults_are_the_constants() -> None:
    assert Limits().agent_steps == MAX_AGENT_STEPS
    assert msgspec.json.encode(Limits()) == b"{}"
    assert msgspec.json.encode(Limits(agent_steps=65)) == b'{"agent_steps":65}'


@pytest.mark.parametrize("name", FIELDS)
@pytest.mark.parametrize("value", [0, -1, True, 1.0, "3", None])
def test_each_field_is_a_positive_int(name: str, value: Any) -> None:
    with pytest.raises(ValueError, match=rf"^Limits\.{name} must be an int from 1 to \d+, got "):
        Limits(**{name: value})


@pytest.mark.parametrize("name", FIELDS)
def test_each_field_has_a_hard_cap(name: str) -> None:
    cap = LIMITS_HARD_CAPS[name]
    assert getattr(Limits(**{name: cap}), name) == cap
    with pytest.raises(ValueError, match=rf"Limits\.{name} must be an int from 1 to {cap}"):
        Limits(**{name: cap + 1})


def test_depth_is_capped_below_the_log_depth() -> None:
    assert LIMITS_HARD_CAPS["argument_depth"] == 256


@given(st.dictionaries(st.sampled_from(FIELDS), st.integers(1, 2**31 - 1)))
def test_a_limits_round_trips_and_encodes_like_an_equal_one(fields: dict[str, int]) -> None:
    fields = {k: min(v, LIMITS_HARD_CAPS[k]) for k, v in fields.items()}
    limits = Limits(**fields)
    encoded = msgspec.json.encode(limits)
    decoded = msgspec.json.decode(encoded, type=Limits)
    assert decoded == limits
    assert msgspec.json.encode(decoded) == encoded


def test_a_decoded_limits_is_validated() -> None:
    with pytest.raises(msgspec.ValidationError, match=r"Limits\.chunks_per_step"):
        msgspec.json.decode(b'{"chunks_per_step":0}', type=Limits)


def test_agent_loop_checks_the_limits_option() -> None:
    with pytest.raises(TypeError, match="limits must be a Limits or None, got dict"):
        agent_loop([UserMessage("u1", "hi")], tools=[], limits={"agent_steps": 3})  # type: ignore[arg-type]


def test_max_steps_may_go_up_to_the_agent_steps_limit() -> None:
    with pytest.raises(ValueError, match=r"from 1 to MAX_AGENT_STEPS \(64\), got 65"):
        agent_loop([UserMessage("u1", "hi")], tools=[], max_steps=65)
    with pytest.raises(ValueError, match=r"from 1 to Limits.agent_steps \(100\), got 101"):
        agent_loop(
            [UserMessage("u1", "hi")], tools=[], max_steps=101, limits=Limits(agent_steps=100)
        )
    with pytest.raises(ValueError, match=r"request numbers 51..150 go past Limits.agent_steps"):
        agent_loop(
            [UserMessage("u1", "hi")],
            tools=[],
            max_steps=100,
            request_sequence_start=50,
            limits=Limits(agent_steps=100),
        )
    loop = agent_loop(
        [UserMessage("u1", "hi")], tools=[], max_steps=100, limits=Limits(agent_steps=100)
    )
    assert loop.limits == Limits(agent_steps=100)


def _start(loop: AgentLoop) -> SessionStartEvent:
    next(loop)
    start = loop.log[0]
    assert type(start) is SessionStartEvent
    return start


def test_default_limits_are_not_recorded() -> None:
    plain = _start(agent_loop([UserMessage("u1", "hi")], tools=[], started_at=1.0))
    same = _start(agent_loop([UserMessage("u1", "hi")], tools=[], started_at=1.0, limits=Limits()))
    assert plain.limits is None and same.limits is None
    assert encode_event(plain) == encode_event(same)
    assert b"limits" not in encode_event(plain)


def test_other_limits_are_recorded() -> None:
    start = _start(
        agent_loop([UserMessage("u1", "hi")], tools=[], limits=Limits(chunks_per_step=5))
    )
    assert start.limits == Limits(chunks_per_step=5)
    assert b'"limits":{"chunks_per_step":5}' in encode_event(start)


# --------------------------------------------------------------------------- each limit


def _fails(limits: Limits, *replies: Any, messages: Any = None) -> str:
    loop = agent_loop(messages or [UserMessage("u1", "hi")], tools=[ECHO], limits=limits)
    _, result = drive(loop, replies)
    assert result.status == "failed"
    assert result.error is not None
    replay(loop.log)  # and the failure replays
    return result.error.message


def test_initial_messages() -> None:
    messages = [UserMessage(f"u{i}", "hi") for i in range(3)]
    loop = agent_loop(messages, tools=[], limits=Limits(initial_messages=2))
    with pytest.raises(StopIteration) as stop:
        next(loop)
    assert stop.value.value.error.message == (
        "invalid transcript: 3 initial messages exceed Limits.initial_messages (2)"
    )
    assert replay(loop.log).result == stop.value.value
    assert agent_loop(messages, tools=[], limits=Limits(initial_messages=3)).send(None)


def test_chunks_per_step() -> None:
    message = _fails(Limits(chunks_per_step=2), *chunks("request-001", "a", "b", "c"))
    assert message == "step 1, chunk 3: more than Limits.chunks_per_step (2) chunks"


def test_step_text() -> None:
    message = _fails(Limits(step_text_code_points=3), *chunks("request-001", "abcd"))
    assert message == "step 1, chunk 1: streamed text exceeds Limits.step_text_code_points (3)"
    message = _fails(Limits(step_text_code_points=3), response("request-001", "r1", "abcd"))
    assert message == "step 1: text exceeds Limits.step_text_code_points (3)"


def test_assistant_blocks() -> None:
    message = _fails(
        Limits(assistant_blocks=1), response("request-001", "r1", "a", call("echo", "c1"))
    )
    assert message == "step 1: 2 blocks exceed Limits.assistant_blocks (1)"


def test_argument_limits() -> None:
    deep = Limits(argument_depth=2)
    assert arguments_problems({"a": {"b": {}}}, deep) == (
        None,
        "nesting depth 3 at $.a.b exceeds Limits.argument_depth (2)",
    )
    assert arguments_problems({"a": [1, 2]}, Limits(argument_values=3)) == (
        None,
        "4 values exceed Limits.argument_values (3, root included): "
        "3 object fields and array elements within MAX_ARGUMENT_ENTRIES (256)",
    )
    assert arguments_problems({"a": [1, 2]}, Limits(argument_entries=2)) == (
        None,
        "3 object fields and array elements exceed Limits.argument_entries (2)",
    )
    assert arguments_problems({"ab": "cd"}, Limits(argument_string_code_points=3)) == (
        None,
        "4 code points in keys and strings exceed Limits.argument_string_code_points (3)",
    )
    wide = Limits(argument_depth=64, argument_values=10_000, argument_entries=10_000)
    nested: dict[str, Any] = {}
    inner = nested
    for _ in range(62):
        inner["a"] = {}
        inner = inner["a"]
    assert arguments_problems(nested, wide) == (None, None)
    assert arguments_problems(nested)[1] is not None  # the defaults still hold
    message = _fails(deep, response("request-001", "r1", call("echo", "c1", a={"b": {}})))
    assert "Limits.argument_depth (2)" in message


def test_the_default_messages_are_the_ones_old_logs_hold() -> None:
    assert arguments_problems({"a": list(range(300))})[1] == (
        "302 values exceed MAX_ARGUMENT_VALUES (257, root included): "
        "301 object fields and array elements exceed MAX_ARGUMENT_ENTRIES (256)"
    )


# --------------------------------------------------------------------------- a big run

BIG = Limits(
    agent_steps=300,
    step_text_code_points=250_000,
    argument_string_code_points=250_000,
)


@tool
def write_file(path: str, content: str) -> str:
    """Write a file (here: say how much would be written)."""
    return f"wrote {len(content)} code points to {path}"


def _big_script() -> list[ScriptedResponse]:
    script = [
        ScriptedResponse.tool_calls(
            "r1", ToolCall("c1", "write_file", {"path": "big.txt", "content": "x" * 200_000})
        )
    ]
    for step in range(2, 300):
        script.append(
            ScriptedResponse.tool_calls(
                f"r{step}", ToolCall(f"c{step}", "write_file", {"path": "a", "content": "y"})
            )
        )
    script.append(ScriptedResponse.text("r300", "é" * 200_000))
    return script


def test_a_300_step_run_with_big_arguments_and_a_big_answer(tmp_path: Path) -> None:
    log = EventLog()
    model = ScriptedModel(_big_script())
    result = run(
        [UserMessage("u1", "write it")],
        model=model,
        tools=[write_file],
        max_steps=300,
        limits=BIG,
        log=log,
        clock=lambda: 5.0,
    )
    model.assert_complete()
    assert result.status == "completed", result.error
    assert result.steps == 300
    assert result.final_text == "é" * 200_000
    assert result.messages[2].content == "wrote 200000 code points to big.txt"  # type: ignore[union-attr]
    assert model.requests[-1].id == "request-300"
    assert all(type(r) is ModelRequest for r in model.requests)
    # ... and replays, from memory and from its log file.
    assert replay(log).result == result
    path = tmp_path / "big.jsonl"
    write_log(path, log)
    events = read_log(path)
    start = events[0]
    assert type(start) is SessionStartEvent and start.limits == BIG
    assert replay(events).result == result


def test_without_the_limits_the_same_run_fails() -> None:
    result = run(
        [UserMessage("u1", "write it")],
        model=ScriptedModel(_big_script()[:1]),
        tools=[write_file],
        clock=lambda: 5.0,
    )
    assert result.status == "failed"
    assert result.error is not None
    assert "MAX_ARGUMENT_STRING_CODE_POINTS (4096)" in result.error.message


def test_resume_and_fork_follow_the_recorded_limits() -> None:
    limits = Limits(agent_steps=70, chunks_per_step=2)
    loop = agent_loop([UserMessage("u1", "hi")], tools=[ECHO], max_steps=70, limits=limits)
    next(loop)
    loop.send(response("request-001", "r1", call("echo", "c1")))
    live, effect = resume(loop.log)
    assert live.limits == limits
    assert type(effect).__name__ == "ToolRequest"
    forked, effect = fork(loop.log, 2)
    assert forked.limits == limits
    forked.send(chunks("request-001", "a")[0])
    forked.send(chunks("request-001", "b")[0])
    with pytest.raises(StopIteration) as stop:
        forked.send(chunks("request-001", "c")[0])
    assert "Limits.chunks_per_step (2)" in stop.value.value.error.message
