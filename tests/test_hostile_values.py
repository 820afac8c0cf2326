"""Hostile values at every entry point: cycles, shared containers that blow up,
huge integers, endless iterables. Each is refused with the typed error documented
for where it entered, and the log of the run still encodes and replays."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from agentloop import (
    CALLER_PROTOCOL_ERROR,
    HOOK_ERROR,
    INVALID_TRANSCRIPT,
    MAX_ARGUMENT_DEPTH,
    MAX_INITIAL_MESSAGES,
    MODEL_PROTOCOL_ERROR,
    AgentLoop,
    AssistantMessage,
    Budget,
    CallerProtocolError,
    HookRegistry,
    ModelChunk,
    PauseRequest,
    Resume,
    RunResult,
    ScriptedModel,
    ScriptedResponse,
    ToolCall,
    ToolResult,
    ToolResultMessage,
    ToolSpec,
    UnrecognizedReply,
    UserMessage,
    agent_loop,
    decode_event,
    encode_event,
    run,
)
from agentloop._validation import arguments_ok, arguments_problems
from replay import replay
from tests.helpers import ECHO, check_log, response

USER = UserMessage("u1", "hi")
GUARDED = ToolSpec("echo", "Echo, once a human said yes.", requires_approval=True)


def cyclic() -> dict[str, Any]:
    value: dict[str, Any] = {"x": 1}
    value["self"] = value
    return value


def exploding(levels: int = 64) -> list[Any]:
    """Shared lists: ``levels`` deep, 2**levels values once written out."""
    value: list[Any] = [0]
    for _ in range(levels):
        value = [value, value]
    return value


def _finish(loop: AgentLoop, replies: list[Any]) -> tuple[RunResult | None, BaseException | None]:
    """Send ``replies``; the result, or the exception ``send()`` raised."""
    try:
        next(loop)
        for reply in replies:
            loop.send(reply)
    except StopIteration as stop:
        return stop.value, None
    except CallerProtocolError as exc:
        return loop.result, exc
    raise AssertionError("the run did not end")  # pragma: no cover - only when a test fails


def _log_roundtrips(loop: AgentLoop, hooks: HookRegistry | None = None) -> None:
    events = list(loop.log)
    check_log(events)
    assert [decode_event(encode_event(e)) for e in events] == events
    if events[0].type == "session.start":
        assert replay(events, hooks=hooks).result == loop.result


def _hook(topic: str, fn: Callable[[dict[str, Any]], object]) -> HookRegistry:
    hooks = HookRegistry()
    hooks.on(topic, fn)
    return hooks


def _edit_arguments(payload: dict[str, Any]) -> None:
    payload["arguments"]["loop"] = payload["arguments"]


def _cyclic_plan(payload: dict[str, Any]) -> None:
    payload["content"] = [ToolCall("c1", "echo", cyclic())]


CYCLE = "cyclic reference (a container that contains itself cannot be written as JSON)"

# entry point -> (tools, hooks, replies, error code, message)
CYCLES: dict[str, tuple[list[ToolSpec], HookRegistry | None, list[Any], str, str]] = {
    "tool arguments in a response": (
        [ECHO],
        None,
        [response("request-001", "r1", ToolCall("c1", "echo", cyclic()))],
        CALLER_PROTOCOL_ERROR,
        f"ModelResponse.content[0]: ToolCall 'c1' $.self: {CYCLE}",
    ),
    "tool arguments in a chunk": (
        [ECHO],
        None,
        [ModelChunk("request-001", ToolCall("c1", "echo", cyclic()))],
        CALLER_PROTOCOL_ERROR,
        f"ModelChunk.block: ToolCall 'c1' $.self: {CYCLE}",
    ),
    "a Resume payload": (
        [ECHO],
        None,
        [
            response("request-001", "r1", ToolCall("c1", "echo", {})),
            ToolResult("c1", "hi"),
            Resume(cyclic()),
        ],
        CALLER_PROTOCOL_ERROR,
        f"Resume.payload.self: {CYCLE}",
    ),
    "approval-edited arguments": (
        [GUARDED],
        None,
        [
            response("request-001", "r1", ToolCall("c1", "echo", {})),
            Resume({"approved": True, "arguments": cyclic()}),
        ],
        CALLER_PROTOCOL_ERROR,
        f"Resume.payload.arguments.self: {CYCLE}",
    ),
    "before_tool_call edited arguments": (
        [ECHO],
        _hook("before_tool_call", _edit_arguments),
        [response("request-001", "r1", ToolCall("c1", "echo", {}))],
        HOOK_ERROR,
        f"before_tool_call hook set invalid arguments for call 'c1': $.loop: {CYCLE}",
    ),
    "a PauseRequest payload": (
        [ECHO],
        _hook("before_tool_call", lambda payload: PauseRequest("review", cyclic())),
        [response("request-001", "r1", ToolCall("c1", "echo", {}))],
        HOOK_ERROR,
        f"before_tool_call PauseRequest.payload.self: {CYCLE}",
    ),
    "after_plan edited content": (
        [ECHO],
        _hook("after_plan", _cyclic_plan),
        [response("request-001", "r1", ToolCall("c1", "echo", {}))],
        HOOK_ERROR,
        "after_plan hook produced an invalid plan: ModelResponse.content[0]: ToolCall 'c1' "
        f"$.self: {CYCLE}",
    ),
}


@pytest.mark.parametrize(
    ("tools", "hooks", "replies", "code", "message"), CYCLES.values(), ids=CYCLES.keys()
)
def test_a_cyclic_value_is_refused_where_it_enters(
    tools: list[ToolSpec],
    hooks: HookRegistry | None,
    replies: list[Any],
    code: str,
    message: str,
) -> None:
    budget = Budget(max_turns=1)  # so the "Resume payload" case reaches a budget pause
    loop = agent_loop([USER], tools=tools, hooks=hooks, budget=budget)
    result, raised = _finish(loop, replies)
    assert result is not None and result.error is not None
    assert (result.error.code, result.error.message) == (code, message)
    if code == CALLER_PROTOCOL_ERROR:
        assert str(raised) == message
        assert loop.log[-2].reply == UnrecognizedReply(message)  # type: ignore[union-attr]
    _log_roundtrips(loop, hooks)


@pytest.mark.parametrize(
    "message",
    [
        AssistantMessage("a1", (ToolCall("c1", "echo", cyclic()),)),
        {
            "role": "assistant",
            "id": "a1",
            "content": [{"type": "tool_call", "id": "c1", "name": "echo", "arguments": cyclic()}],
        },
    ],
    ids=["Struct", "dict"],
)
def test_a_cyclic_initial_transcript_is_invalid(message: Any) -> None:
    answer = ToolResultMessage("t1", "c1", "echo", "hi")
    loop = agent_loop([USER, message, answer], tools=[ECHO])
    result, _ = _finish(loop, [])
    assert result is not None and result.error is not None
    assert result.error.code == INVALID_TRANSCRIPT
    assert result.error.message.startswith("invalid transcript: messages[1].content[0]: ToolCall")
    assert result.error.message.endswith(CYCLE)
    _log_roundtrips(loop)


def test_cyclic_tool_parameters_are_refused() -> None:
    with pytest.raises(TypeError) as raised:
        ToolSpec("lookup", parameters={"type": "object", "properties": cyclic()})
    assert str(raised.value) == (
        f"ToolSpec 'lookup': parameters must be plain JSON: parameters.properties.self: {CYCLE}"
    )


def test_run_fails_a_model_that_answers_with_a_cyclic_value() -> None:
    answer = ScriptedResponse("r1", (ToolCall("c1", "echo", cyclic()),), "tool_call")
    model = ScriptedModel([answer])
    result = run([USER], model=model, tools=[ECHO])
    assert result.status == "failed" and result.error is not None
    assert result.error.code == MODEL_PROTOCOL_ERROR
    assert result.error.message.endswith(f"ToolCall 'c1' $.self: {CYCLE}")


def test_shared_containers_that_would_explode_when_written_are_refused() -> None:
    # 2**64 values once written out: not walked (or written) value by value.
    loop = agent_loop([USER], tools=[ECHO])
    result, raised = _finish(
        loop, [response("request-001", "r1", ToolCall("c1", "echo", {"x": exploding()}))]
    )
    assert result is not None and raised is not None
    assert str(raised).endswith(
        "more than 262,144 values (shared containers counted each time they appear): "
        "too large to record"
    )
    _log_roundtrips(loop)


def test_shared_containers_that_stay_small_are_plain_json() -> None:
    shared = [1, 2]
    loop = agent_loop([USER], tools=[ECHO], max_steps=1)
    next(loop)
    arguments = {"a": shared, "b": shared}
    effect = loop.send(response("request-001", "r1", ToolCall("c1", "echo", arguments)))
    assert effect.call.arguments == {"a": [1, 2], "b": [1, 2]}  # type: ignore[union-attr]
    loop.close()


# --------------------------------------------------------------------------- the argument rules

# Two walks implement the argument rules: arguments_ok() on the fast path, and
# arguments_problems() that says what is wrong. They must agree on every value.
json_leaf = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**65), max_value=2**65),
    st.sampled_from([-(2**63), 2**64 - 1, -(2**63) - 1, 2**64]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=6),
    st.sampled_from(["\ud800", "x" * 2000, b"bytes", {1, 2}, (1, 2)]),
    st.integers(min_value=250, max_value=260).map(lambda n: list(range(n))),
)
keys = st.one_of(st.text(max_size=4), st.sampled_from([1, None, "\udce9", "k" * 1500]))
json_values = st.recursive(
    json_leaf,
    lambda inner: st.lists(inner, max_size=6) | st.dictionaries(keys, inner, max_size=5),
    max_leaves=40,
)


def _nested(depth: int) -> dict[str, Any]:
    value: dict[str, Any] = {}
    for _ in range(depth - 1):
        value = {"a": value}
    return value


@given(st.dictionaries(keys, json_values, max_size=6) | json_values)
@example({1: 2})  # a non-string key: the fast path must not call str methods on it
@example({"n": -(2**63)})  # the lowest int64 is in range
@example({"n": -(2**63), "deep": _nested(MAX_ARGUMENT_DEPTH)})
@example(_nested(MAX_ARGUMENT_DEPTH))
@example(_nested(MAX_ARGUMENT_DEPTH + 1))
@example({"xs": list(range(256))})
@example({"s": "x" * 4096})
@example({"s": "x" * 4097})
def test_arguments_ok_agrees_with_arguments_problems(arguments: Any) -> None:
    assert arguments_ok(arguments) == (arguments_problems(arguments) == (None, None))


def test_a_non_string_key_is_structural() -> None:
    assert arguments_problems({1: 2}) == ("$: object key 1 is not a string", None)


def test_the_lowest_int64_is_not_blamed_when_another_limit_fails() -> None:
    structural, semantic = arguments_problems({"n": -(2**63), "deep": _nested(MAX_ARGUMENT_DEPTH)})
    assert structural is None
    assert semantic == (
        f"nesting depth {MAX_ARGUMENT_DEPTH + 1} at $.deep{'.a' * (MAX_ARGUMENT_DEPTH - 1)} "
        f"exceeds MAX_ARGUMENT_DEPTH ({MAX_ARGUMENT_DEPTH})"
    )
    _, semantic = arguments_problems({"n": -(2**63) - 1, "deep": _nested(40)})
    assert semantic == f"$.n: integer {-(2**63) - 1} is outside the 64-bit range"


def test_an_integer_too_long_to_print_is_described_by_its_size() -> None:
    _, semantic = arguments_problems({"n": 10**5000})
    assert semantic == "$.n: integer (an int of 16610 bits) is outside the 64-bit range"


def test_a_very_long_path_is_shortened_in_the_middle() -> None:
    _, semantic = arguments_problems(_nested(1000))
    assert semantic == (
        f"nesting depth 1000 at ${'.a' * 24}…(959 levels)…{'.a' * 16} "
        f"exceeds MAX_ARGUMENT_DEPTH ({MAX_ARGUMENT_DEPTH})"
    )


# --------------------------------------------------------------------------- sizes


def test_an_endless_iterable_of_messages_fails_the_limit_without_eating_memory() -> None:
    endless = (UserMessage(f"u{i}", "hi") for i in itertools.count())
    loop = agent_loop(endless, tools=[ECHO])
    result, _ = _finish(loop, [])
    assert result is not None and result.error is not None
    assert result.error.message == (
        "invalid transcript: more than initial messages exceed MAX_INITIAL_MESSAGES "
        f"({MAX_INITIAL_MESSAGES})"
    )
    assert next(endless).id == f"u{MAX_INITIAL_MESSAGES + 1}"  # read no further


HUGE_OPTIONS: dict[str, tuple[Callable[[], object], str]] = {
    "started_at": (
        lambda: agent_loop([USER], tools=[], started_at=10**400),
        "started_at must be a finite number or None, got (an int of 1329 bits)",
    ),
    "run(started_at=...)": (
        lambda: run([USER], model=ScriptedModel([]), tools=[], started_at=-(10**400)),
        "started_at must be a finite number or None, got -(an int of 1329 bits)",
    ),
    "max_wall_seconds": (
        lambda: Budget(max_wall_seconds=10**400),
        "Budget.max_wall_seconds must be a positive finite number or None, "
        "got (an int of 1329 bits)",
    ),
    "max_turns": (
        lambda: Budget(max_turns=10**5000),
        "Budget.max_turns must be a positive int or None, got (an int of 16610 bits)",
    ),
    "max_steps": (
        lambda: agent_loop([USER], tools=[], max_steps=10**5000),
        "max_steps must be an int from 1 to MAX_AGENT_STEPS (64), got (an int of 16610 bits)",
    ),
    "request_sequence_start": (
        lambda: agent_loop([USER], tools=[], request_sequence_start=10**5000),
        "request numbers (an int of 16610 bits)..(an int of 16610 bits) go past "
        "MAX_AGENT_STEPS (64); lower max_steps or request_sequence_start",
    ),
}


@pytest.mark.parametrize(("make", "message"), HUGE_OPTIONS.values(), ids=HUGE_OPTIONS.keys())
def test_huge_int_options_are_value_errors(make: Callable[[], object], message: str) -> None:
    with pytest.raises(ValueError) as raised:
        make()
    assert str(raised.value) == message


def test_the_largest_ints_a_float_can_hold_are_fine_options() -> None:
    assert Budget(max_wall_seconds=2**1023).max_wall_seconds == math.ldexp(1, 1023)
    loop = agent_loop([USER], tools=[], started_at=-(2**1023))
    assert next(loop).id == "request-001"  # type: ignore[union-attr]
    loop.close()
