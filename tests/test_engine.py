"""The generator protocol, lifecycle, events and validation (DESIGN §5-§8, §11)."""

from __future__ import annotations

import math
from typing import Any

import msgspec
import pytest

from agentloop import (
    MAX_AGENT_STEPS,
    MAX_ARGUMENT_DEPTH,
    MAX_ARGUMENT_STRING_CODE_POINTS,
    MAX_ARGUMENT_VALUES,
    MAX_ASSISTANT_BLOCKS,
    MAX_CHUNKS_PER_STEP,
    MAX_INITIAL_MESSAGES,
    MAX_STEP_TEXT_CODE_POINTS,
    AssistantMessage,
    Budget,
    CallerProtocolError,
    Cancel,
    EventLog,
    HookRegistry,
    ModelChunk,
    ModelFailure,
    ModelRequest,
    ModelResponse,
    Pause,
    Resume,
    RunFinishedEvent,
    SessionCompleteEvent,
    State,
    TextBlock,
    ThinkingBlock,
    ToolCall,
    ToolRequest,
    ToolResult,
    ToolResultMessage,
    ToolSpec,
    UnrecognizedReply,
    Usage,
    UserMessage,
    agent_loop,
    validate_transcript,
)
from tests.helpers import ADD, ECHO, call, check_log, chunks, drive, finish, response, types

USER = UserMessage("user-001", "What is 20 + 22?")


def add_loop(**options: Any) -> Any:
    options.setdefault("max_steps", 2)
    return agent_loop([USER], tools=[ADD], **options)


# --------------------------------------------------------------------------- the add example


def test_add_tool_example_links_call_and_result_before_second_request() -> None:
    add_call = call("add", "call-add-001", left=20, right=22)
    loop = add_loop()
    effects, result = drive(
        loop,
        [
            *chunks("request-001", add_call),
            response("request-001", "response-tool-001", add_call),
            ToolResult("call-add-001", '{"sum":42}'),
            *chunks("request-002", "The sum ", "is 42."),
            response("request-002", "response-tool-002", "The sum is 42."),
        ],
    )
    requests = [e for e in effects if type(e) is ModelRequest]
    assert sorted({r.id for r in requests}) == ["request-001", "request-002"]
    second = next(r for r in requests if r.id == "request-002")
    assert list(second.messages) == [
        USER,
        AssistantMessage("message-response-tool-001", (add_call,)),
        ToolResultMessage(
            "tool-result-call-add-001", "call-add-001", "add", '{"sum":42}', is_error=False
        ),
    ]
    assert [e for e in effects if type(e) is ToolRequest] == [ToolRequest(add_call, 1)]
    assert result.status == "completed"
    assert result.final_text == "The sum is 42."
    assert result.reason == "goal_met"
    assert result.steps == 2
    validate_transcript(result.messages)
    assert types(loop) == [
        "session.start",
        "message.accepted",
        "step.start",
        "model.chunk",
        "plan.draft",
        "plan.commit",
        "tool.call",
        "tool.result",
        "step.end",
        "step.start",
        "model.chunk",
        "model.chunk",
        "plan.draft",
        "plan.commit",
        "step.end",
        "session.complete",
        "run.finished",
    ]


def test_event_log_snapshot(snapshot: Any) -> None:
    add_call = call("add", "call-add-001", left=20, right=22)
    loop = add_loop(started_at=100)
    finish(
        loop,
        [
            ModelChunk("request-001", add_call, at=101),
            response("request-001", "r1", add_call, at=102, usage=Usage(10, 5)),
            ToolResult("call-add-001", '{"sum":42}', at=103),
            response("request-002", "r2", "The sum is 42.", at=104, usage=Usage(20, 6)),
        ],
    )
    assert [msgspec.json.encode(e).decode() for e in loop.log] == snapshot


def test_request_messages_is_a_frozen_view_not_a_copy() -> None:
    loop = add_loop()
    first = next(loop)
    assert type(first) is ModelRequest
    add_call = call("add", "c1", left=1, right=2)
    loop.send(response("request-001", "r1", add_call))
    second = loop.send(ToolResult("c1", "3"))
    assert len(first.messages) == 1 and list(first.messages) == [USER]
    assert len(second.messages) == 3
    assert first.messages[-1] == USER
    with pytest.raises(IndexError):
        first.messages[1]
    assert second.messages[1:] == second.messages[1:3]
    assert first.messages == [USER]
    assert first.messages._items is second.messages._items  # type: ignore[attr-defined]


def test_request_sequence_start_shifts_request_ids() -> None:
    loop = agent_loop([USER], tools=[], max_steps=2, request_sequence_start=10)
    request = next(loop)
    assert type(request) is ModelRequest and request.id == "request-011"
    assert loop.log[2].request_id == "request-011"  # type: ignore[union-attr]


def test_observations_follow_the_run() -> None:
    loop = add_loop(started_at=5.0)
    assert loop.state is State.IDLE and loop.pending is None and loop.step == 0
    request = next(loop)
    assert loop.state is State.PLANNING and loop.pending is request and loop.step == 1
    add_call = call("add", "c1", left=1, right=2)
    tool_request = loop.send(response("request-001", "r1", add_call, usage=Usage(3, 4), at=7))
    assert loop.state is State.AWAITING_TOOL and loop.pending is tool_request
    assert loop.usage == Usage(3, 4)
    assert loop.budget_usage.turns == 1 and loop.budget_usage.tool_calls == 1
    assert loop.budget_usage.wall_seconds == 2.0
    assert len(loop.messages) == 2
    loop.send(ToolResult("c1", "3"))
    with pytest.raises(StopIteration):
        loop.send(response("request-002", "r2", "3"))
    assert loop.state is State.DONE and loop.pending is None
    assert loop.result is not None and loop.result.final_text == "3"


# --------------------------------------------------------------------------- max_steps


def test_max_steps_one_finishes_the_whole_batch_and_opens_no_request() -> None:
    calls = [call("echo", f"call-echo-00{i}", text=str(i)) for i in (1, 2, 3)]
    loop = agent_loop([UserMessage("u", "Echo three values.")], tools=[ECHO], max_steps=1)
    effects, result = drive(
        loop,
        [
            response("request-001", "response-budget-001", *calls),
            *[ToolResult(c.id, c.arguments["text"]) for c in calls],
        ],
    )
    executed = [e.call.id for e in effects if type(e) is ToolRequest]
    assert executed == ["call-echo-001", "call-echo-002", "call-echo-003"]
    assert sum(type(e) is ModelRequest for e in effects) == 1
    assert result.status == "max_steps" and result.max_steps == 1
    assert result.reason == "no_more_steps"
    last = loop.log[-1]
    assert type(last) is RunFinishedEvent
    assert last.sequence == len(loop.log) - 1
    assert (last.status, last.max_steps) == ("max_steps", 1)


def test_max_steps_two_lets_the_follow_up_run() -> None:
    calls = [call("echo", f"c{i}", text=str(i)) for i in (1, 2, 3)]
    loop = agent_loop([USER], tools=[ECHO], max_steps=2)
    result = finish(
        loop,
        [
            response("request-001", "r1", *calls),
            *[ToolResult(c.id, "ok") for c in calls],
            response("request-002", "r2", "must not run"),
        ],
    )
    assert result.status == "completed" and result.final_text == "must not run"


def test_sixty_four_steps_exactly() -> None:
    loop = agent_loop([USER], tools=[ECHO], max_steps=MAX_AGENT_STEPS)
    replies: list[Any] = []
    for step in range(1, MAX_AGENT_STEPS + 1):
        c = call("echo", f"c{step}", text="x")
        replies += [response(f"request-{step:03d}", f"r{step}", c), ToolResult(c.id, "x")]
    effects, result = drive(loop, replies)
    assert result.status == "max_steps" and result.steps == 64
    requests = [e for e in effects if type(e) is ModelRequest]
    assert requests[-1].id == "request-064"
    validate_transcript(result.messages)


# --------------------------------------------------------------------------- options


STEPS = "max_steps must be an int from 1 to MAX_AGENT_STEPS (64), got "
START = "request_sequence_start must be a non-negative int, got "
PAST = "go past MAX_AGENT_STEPS (64); lower max_steps or request_sequence_start"
STARTED_AT = "started_at must be a finite number or None, got "


@pytest.mark.parametrize(
    ("options", "error", "message"),
    [
        # max_steps: not a positive int <= 64
        ({"max_steps": 0}, ValueError, STEPS + "0"),
        ({"max_steps": -1}, ValueError, STEPS + "-1"),
        ({"max_steps": 65}, ValueError, STEPS + "65"),
        ({"max_steps": 1.0}, ValueError, STEPS + "1.0"),
        ({"max_steps": 2.5}, ValueError, STEPS + "2.5"),
        ({"max_steps": True}, ValueError, STEPS + "True"),
        ({"max_steps": None}, ValueError, STEPS + "None"),
        ({"max_steps": "8"}, ValueError, STEPS + "'8'"),
        # request_sequence_start: the whole range must stay within 64
        (
            {"max_steps": 5, "request_sequence_start": 60},
            ValueError,
            f"request numbers 61..65 {PAST}",
        ),
        (
            {"max_steps": 64, "request_sequence_start": 1},
            ValueError,
            f"request numbers 2..65 {PAST}",
        ),
        ({"request_sequence_start": -1}, ValueError, START + "-1"),
        ({"request_sequence_start": 1.0}, ValueError, START + "1.0"),
        ({"request_sequence_start": False}, ValueError, START + "False"),
        # shapes
        ({"system": 42}, TypeError, "system must be a str or None, got int"),
        ({"budget": {"max_turns": 1}}, TypeError, "budget must be a Budget or None, got dict"),
        (
            {"hooks": {"before_step": print}},
            TypeError,
            "hooks must be a HookRegistry or None, got dict",
        ),
        ({"log": []}, TypeError, "log must be an EventLog or None, got list"),
        ({"started_at": math.nan}, ValueError, STARTED_AT + "nan"),
        ({"started_at": "now"}, ValueError, STARTED_AT + "'now'"),
    ],
)
def test_invalid_options_raise_before_any_generator_exists(
    options: dict[str, Any], error: type[Exception], message: str
) -> None:
    with pytest.raises(error) as raised:
        agent_loop([USER], tools=[], **options)
    assert str(raised.value) == message


def test_range_at_the_ceiling_is_accepted() -> None:
    loop = agent_loop([USER], tools=[], max_steps=8, request_sequence_start=56)
    request = next(loop)
    assert type(request) is ModelRequest and request.id == "request-057"


TOOLS_SHAPE = "tools must be a ToolRegistry or a list/tuple of ToolSpec or Tool, got "


@pytest.mark.parametrize(
    ("tools", "error", "message"),
    [
        ({"add": ADD}, TypeError, TOOLS_SHAPE + "dict"),
        ("add", TypeError, TOOLS_SHAPE + "str"),
        ([ADD, ADD], ValueError, "tools: duplicate tool name 'add'"),
        ([42], TypeError, "tools[0] is not a ToolSpec or Tool: 42"),
        (None, TypeError, TOOLS_SHAPE + "NoneType"),
    ],
)
def test_invalid_tools_raise(tools: Any, error: type[Exception], message: str) -> None:
    with pytest.raises(error) as raised:
        agent_loop([USER], tools=tools)
    assert str(raised.value) == message


def test_non_empty_log_is_rejected() -> None:
    log = EventLog()
    finish(agent_loop([USER], tools=[], log=log), [response("request-001", "r", "hi")])
    with pytest.raises(ValueError, match="empty"):
        agent_loop([USER], tools=[], log=log)


def test_messages_must_be_a_sequence() -> None:
    with pytest.raises(TypeError, match=r"^messages must be a sequence of messages, got str$"):
        agent_loop("hello", tools=[])  # type: ignore[arg-type]


# --------------------------------------------------------------------------- snapshots


def test_mutating_the_callers_list_or_registry_changes_nothing() -> None:
    from agentloop import ToolRegistry

    messages: list[Any] = [USER]
    registry = ToolRegistry([ADD])
    loop = agent_loop(messages, tools=registry)
    messages.append(UserMessage("user-002", "injected"))
    messages[0] = UserMessage("user-003", "replaced")
    registry.register(ECHO)
    request = next(loop)
    assert type(request) is ModelRequest
    assert list(request.messages) == [USER]
    assert [spec.name for spec in request.tools] == ["add"]


def test_mutating_arguments_of_an_input_message_changes_nothing() -> None:
    arguments: dict[str, Any] = {"left": 1}
    history = [
        USER,
        AssistantMessage("a1", (ToolCall("c1", "add", arguments),)),
        ToolResultMessage("t1", "c1", "add", "1"),
    ]
    loop = agent_loop(history, tools=[ADD])
    arguments["left"] = 999
    request = next(loop)
    assert request.messages[1].content[0].arguments == {"left": 1}  # type: ignore[union-attr]


def test_dict_messages_are_rebuilt_through_the_ir() -> None:
    loop = agent_loop([{"role": "user", "id": "u1", "content": "hi"}], tools=[])
    request = next(loop)
    assert type(request) is ModelRequest
    assert request.messages[0] == UserMessage("u1", "hi")


# --------------------------------------------------------------------------- invalid transcript

BAD_TRANSCRIPTS = {
    "duplicate id": [USER, UserMessage("user-001", "again")],
    "orphan result": [USER, ToolResultMessage("t1", "c1", "add", "3")],
    "dangling call": [USER, AssistantMessage("a1", (ToolCall("c1", "add", {}),))],
    "wrong tool name": [
        USER,
        AssistantMessage("a1", (ToolCall("c1", "add", {}),)),
        ToolResultMessage("t1", "c1", "echo", "3"),
    ],
    "not a message": [USER, "hello"],
    "bad field type": [UserMessage("u1", 42)],  # type: ignore[arg-type]
    "non-finite argument": [
        USER,
        AssistantMessage("a1", (ToolCall("c1", "add", {"x": math.inf}),)),
        ToolResultMessage("t1", "c1", "add", "3"),
    ],
    "too many messages": [UserMessage(f"u{i}", "hi") for i in range(MAX_INITIAL_MESSAGES + 1)],
}


@pytest.mark.parametrize("messages", BAD_TRANSCRIPTS.values(), ids=BAD_TRANSCRIPTS.keys())
def test_invalid_transcript_is_one_failed_event_and_no_model_call(messages: Any) -> None:
    loop = agent_loop(messages, tools=[ADD])
    with pytest.raises(StopIteration) as stop:
        next(loop)
    result = stop.value.value
    assert result.status == "failed" and result.error.code == "INVALID_TRANSCRIPT"
    assert types(loop) == ["run.finished"]
    check_log(loop.log.events)


def test_largest_transcript_is_accepted() -> None:
    history = [UserMessage(f"u{i}", "hi") for i in range(MAX_INITIAL_MESSAGES)]
    loop = agent_loop(history, tools=[])
    request = next(loop)
    assert type(request) is ModelRequest and len(request.messages) == MAX_INITIAL_MESSAGES


# --------------------------------------------------------------------------- tool results


def test_recoverable_tool_error_reaches_the_next_request() -> None:
    bad = call("add", "c1", left="x", right=2)
    loop = add_loop()
    effects, result = drive(
        loop,
        [
            response("request-001", "r1", bad),
            ToolResult("c1", "invalid arguments: left must be an int", is_error=True),
            response("request-002", "r2", "Sorry, let me fix that."),
        ],
    )
    second = effects[-1] if type(effects[-1]) is ModelRequest else None
    requests = [e for e in effects if type(e) is ModelRequest]
    second = requests[-1]
    assert second.messages[-1] == ToolResultMessage(
        "tool-result-c1", "c1", "add", "invalid arguments: left must be an int", is_error=True
    )
    assert "tool.error" in types(loop)
    assert result.status == "completed"


def test_unknown_tool_gets_an_error_result_without_a_tool_request() -> None:
    loop = add_loop()
    effects, result = drive(
        loop,
        [
            response("request-001", "r1", call("nope", "c1")),
            response("request-002", "r2", "ok"),
        ],
    )
    assert not any(type(e) is ToolRequest for e in effects)
    error = result.messages[2]
    assert type(error) is ToolResultMessage and error.is_error
    assert "unknown tool 'nope'" in error.content
    event = loop.log[types(loop).index("tool.error")]
    assert event.reply is None  # type: ignore[union-attr]


# --------------------------------------------------------------------------- stop reasons


def test_length_with_tool_calls_truncates_them_and_goes_on() -> None:
    loop = add_loop()
    effects, result = drive(
        loop,
        [
            response("request-001", "r1", call("add", "c1", left=1), stop="length"),
            response("request-002", "r2", "done"),
        ],
    )
    assert not any(type(e) is ToolRequest for e in effects)
    truncated = result.messages[2]
    assert type(truncated) is ToolResultMessage
    assert (truncated.content, truncated.is_error) == ("truncated; re-issue the call", True)
    assert result.status == "completed"


def test_text_only_length_completes_with_reason_length() -> None:
    result = finish(add_loop(), [response("request-001", "r1", "partial", stop="length")])
    assert (result.status, result.reason, result.final_text) == ("completed", "length", "partial")


def test_stop_reason_error_fails_with_model_error() -> None:
    loop = add_loop()
    result = finish(loop, [response("request-001", "r1", "oops", stop="error")])
    assert result.status == "failed" and result.error is not None
    assert result.error.code == "MODEL_ERROR"
    assert len(result.messages) == 1


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        ("MODEL_ERROR", "MODEL_ERROR"),
        ("MODEL_PROTOCOL_ERROR", "MODEL_PROTOCOL_ERROR"),
        ("SOMETHING_ELSE", "MODEL_ERROR"),
    ],
)
def test_model_failure_ends_failed_with_its_code(code: str, expected: str) -> None:
    loop = add_loop()
    result = finish(loop, [ModelFailure("request-001", "rate limited", code)])
    assert result.status == "failed" and result.error is not None
    assert result.error.code == expected and "rate limited" in result.error.message
    assert "plan.draft" in types(loop)


# --------------------------------------------------------------------------- protocol errors


def protocol_error(replies: list[Any], **options: Any) -> tuple[Any, Any]:
    loop = add_loop(**options)
    effects, result = drive(loop, replies)
    assert result.status == "failed", result
    assert result.error.code == "MODEL_PROTOCOL_ERROR", result.error
    last_request = max(i for i, e in enumerate(effects) if type(e) is ModelRequest)
    assert not any(type(e) is ToolRequest for e in effects[last_request:])
    return loop, result


def test_stop_with_a_tool_call_is_a_protocol_error() -> None:
    _, result = protocol_error([response("request-001", "r1", call("add", "c1"), stop="stop")])
    assert "stop reason 'stop'" in result.error.message


def test_tool_call_stop_without_calls_is_a_protocol_error() -> None:
    protocol_error([response("request-001", "r1", "hi", stop="tool_call")])


def test_unknown_stop_reason_is_a_protocol_error() -> None:
    protocol_error([response("request-001", "r1", "hi", stop="done")])


def test_chunk_naming_another_request_is_a_protocol_error_and_is_recorded() -> None:
    bad = ModelChunk("request-999", TextBlock("hi"))
    loop, result = protocol_error([bad])
    assert "request-999" in result.error.message
    assert loop.log[-2].reply == bad
    assert "model.chunk" not in types(loop)


def test_response_naming_another_request_is_a_protocol_error() -> None:
    loop, _ = protocol_error([response("request-002", "r1", "hi")])
    assert "plan.draft" in types(loop)


@pytest.mark.parametrize(
    "content",
    [
        ["Hello", ", world"],  # two final text blocks merge too
        ["Hello, world"],
    ],
)
def test_split_text_deltas_match_the_final_message(content: list[str]) -> None:
    result = finish(
        add_loop(),
        [
            *chunks("request-001", "Hel", "lo, ", "wor", "ld"),
            response("request-001", "r1", *content),
        ],
    )
    assert result.status == "completed" and result.final_text == "Hello, world"


def test_tool_calls_are_boundaries_between_text_groups() -> None:
    c = call("add", "c1", left=1, right=2)
    result = finish(
        add_loop(max_steps=1),
        [
            *chunks("request-001", "a", "b", c, "c"),
            response("request-001", "r1", "ab", c, "c"),
            ToolResult("c1", "3"),
        ],
    )
    assert result.status == "max_steps"


@pytest.mark.parametrize(
    ("streamed", "final"),
    [
        (["Hello"], ["Goodbye"]),
        (["Hello", " world"], ["Hello"]),
        (["a", call("add", "c1"), "b"], ["ab", call("add", "c1")]),
        ([call("add", "c1")], [call("add", "c2")]),
        ([ThinkingBlock("hmm"), "hi"], ["hi"]),
    ],
)
def test_different_content_in_chunks_and_final_is_rejected(
    streamed: list[Any], final: list[Any]
) -> None:
    _, result = protocol_error(
        [*chunks("request-001", *streamed), response("request-001", "r1", *final)]
    )
    assert "stream" in result.error.message


def test_reused_response_or_call_id_is_a_protocol_error() -> None:
    c = call("add", "c1", left=1, right=2)
    _, result = protocol_error(
        [
            response("request-001", "r1", c),
            ToolResult("c1", "3"),
            response("request-002", "r2", call("add", "c1", left=1, right=2)),
        ]
    )
    assert "not unique" in result.error.message
    _, result = protocol_error(
        [
            response("request-001", "r1", c),
            ToolResult("c1", "3"),
            response("request-002", "r1", "x"),
        ]
    )
    assert "already used" in result.error.message


# --------------------------------------------------------------------------- limits


def nested(depth: int) -> dict[str, Any]:
    value: dict[str, Any] = {}
    for _ in range(depth - 1):
        value = {"a": value}
    return value


ARGUMENT_BOUNDS = {
    "depth": (nested(MAX_ARGUMENT_DEPTH), nested(MAX_ARGUMENT_DEPTH + 1)),
    "depth in arrays": (
        {"a": [[{"b": nested(MAX_ARGUMENT_DEPTH - 4)}]], "c": [0]},
        {"a": [[{"b": nested(MAX_ARGUMENT_DEPTH - 3)}]], "c": [0]},
    ),
    "values and entries": (
        {f"k{i}": 0 for i in range(MAX_ARGUMENT_VALUES - 1)},
        {f"k{i}": 0 for i in range(MAX_ARGUMENT_VALUES)},
    ),
    "entries in arrays": (
        {"a": list(range(MAX_ARGUMENT_VALUES - 2))},
        {"a": list(range(MAX_ARGUMENT_VALUES - 1))},
    ),
    "code points": (
        {"k": "x" * (MAX_ARGUMENT_STRING_CODE_POINTS - 1)},
        {"k": "x" * MAX_ARGUMENT_STRING_CODE_POINTS},
    ),
    "code points not utf-16 units": (
        {"k": "\N{GRINNING FACE}" * (MAX_ARGUMENT_STRING_CODE_POINTS - 1)},
        {"kk": "\N{GRINNING FACE}" * (MAX_ARGUMENT_STRING_CODE_POINTS - 1)},
    ),
    "non-finite": ({"x": 1.5}, {"x": math.nan}),
    "infinite": ({"x": -1e308}, {"x": -math.inf}),
    "integer range": ({"x": 2**63 - 1, "y": -(2**63)}, {"x": 2**64}),
}


@pytest.mark.parametrize(("ok", "bad"), ARGUMENT_BOUNDS.values(), ids=list(ARGUMENT_BOUNDS.keys()))
@pytest.mark.parametrize("streamed", [False, True], ids=["final", "chunk"])
def test_argument_bound_at_the_limit_passes_and_one_past_fails(
    ok: dict[str, Any], bad: dict[str, Any], streamed: bool
) -> None:
    good_call = ToolCall("c1", "add", ok)
    effects, _ = drive(
        add_loop(max_steps=1),
        [
            *(chunks("request-001", good_call) if streamed else []),
            response("request-001", "r1", good_call),
            ToolResult("c1", "ok"),
        ],
    )
    assert [e.call for e in effects if type(e) is ToolRequest] == [good_call]

    bad_call = ToolCall("c1", "add", bad)
    loop, result = protocol_error(
        [
            *(chunks("request-001", bad_call) if streamed else []),
            response("request-001", "r1", bad_call),
        ]
    )
    assert "arguments" in result.error.message
    if streamed:
        assert loop.log[-2].reply.block == bad_call


def test_chunk_limit() -> None:
    ok = ["x"] * MAX_CHUNKS_PER_STEP
    result = finish(
        add_loop(), [*chunks("request-001", *ok), response("request-001", "r1", "".join(ok))]
    )
    assert result.status == "completed"
    loop, result = protocol_error(chunks("request-001", *ok, "x"))
    assert "MAX_CHUNKS_PER_STEP" in result.error.message
    assert types(loop).count("model.chunk") == MAX_CHUNKS_PER_STEP


def test_text_limit_streamed_and_final() -> None:
    text = "y" * MAX_STEP_TEXT_CODE_POINTS
    result = finish(
        add_loop(),
        [*chunks("request-001", text[:10], text[10:]), response("request-001", "r1", text)],
    )
    assert result.status == "completed"
    _, result = protocol_error([*chunks("request-001", text, "y")])
    assert "MAX_STEP_TEXT_CODE_POINTS" in result.error.message
    _, result = protocol_error([response("request-001", "r1", text + "y")])
    assert "MAX_STEP_TEXT_CODE_POINTS" in result.error.message


def test_block_limit() -> None:
    ok = [TextBlock("a")] * MAX_ASSISTANT_BLOCKS
    assert finish(add_loop(), [response("request-001", "r1", *ok)]).status == "completed"
    _, result = protocol_error([response("request-001", "r1", *ok, TextBlock("a"))])
    assert "MAX_ASSISTANT_BLOCKS" in result.error.message


# --------------------------------------------------------------------------- cancellation


def test_cancel_before_the_first_request() -> None:
    loop = add_loop()
    result = finish(loop, [Cancel("user left")])
    assert (result.status, result.reason, result.steps) == ("cancelled", "user left", 1)
    assert result.messages == (USER,)
    assert types(loop)[-3:] == ["step.start", "session.complete", "run.finished"]
    assert loop.log[-2].reply == Cancel("user left")


def test_cancel_during_streaming_keeps_no_partial_message() -> None:
    loop = add_loop()
    result = finish(loop, [*chunks("request-001", "The sum", " is"), Cancel()])
    assert result.status == "cancelled" and result.reason == "cancelled"
    assert result.messages == (USER,)
    assert types(loop).count("model.chunk") == 2


def test_cancel_while_a_tool_runs_invents_no_result() -> None:
    c = call("add", "c1", left=1, right=2)
    loop = add_loop()
    result = finish(loop, [response("request-001", "r1", c), Cancel("timeout")])
    assert result.status == "cancelled"
    assert result.messages == (USER, AssistantMessage("message-r1", (c,)))
    assert "tool.call" in types(loop) and "tool.result" not in types(loop)
    with pytest.raises(ValueError, match="without a result"):
        validate_transcript(result.messages)


def test_close_counts_as_a_cancel() -> None:
    loop = add_loop()
    next(loop)
    loop.close()
    assert loop.result is not None and loop.result.reason == "closed"
    assert loop.log[-2].reply == Cancel("closed")
    loop.close()  # idempotent
    with pytest.raises(StopIteration):
        next(loop)


def test_close_before_start_runs_nothing() -> None:
    hooks = HookRegistry()
    calls: list[str] = []
    hooks.on("before_step", lambda payload: calls.append("before_step"))
    loop = add_loop(hooks=hooks)
    loop.close()
    assert loop.result is None and len(loop.log) == 0 and calls == []
    with pytest.raises(StopIteration):
        next(loop)


def test_throw_cancels_then_raises() -> None:
    loop = add_loop()
    next(loop)
    with pytest.raises(KeyboardInterrupt):
        loop.throw(KeyboardInterrupt("stop"))
    assert loop.result is not None and loop.result.reason == "KeyboardInterrupt: stop"
    check_log(loop.log.events)


# --------------------------------------------------------------------------- caller misuse


MISUSE = {
    "tool result while model pending": [ToolResult("c1", "x")],
    "resume while model pending": [Resume()],
    "not a reply": [42],
    "reply with wrong field types": [ModelChunk(7, TextBlock("x"))],  # type: ignore[arg-type]
    "non-json arguments": [ModelChunk("request-001", ToolCall("c1", "add", {"s": {1, 2}}))],
    "non-finite at": [ModelChunk("request-001", TextBlock("x"), at=math.nan)],
    "bool at": [ModelChunk("request-001", TextBlock("x"), at=True)],  # type: ignore[arg-type]
    "wrong call id": [response("request-001", "r1", call("add", "c1")), ToolResult("c2", "x")],
    "model reply while tool pending": [
        response("request-001", "r1", call("add", "c1")),
        response("request-001", "r2", "x"),
    ],
}


@pytest.mark.parametrize("replies", MISUSE.values(), ids=MISUSE.keys())
def test_caller_misuse_raises_after_logging_a_failed_run(replies: list[Any]) -> None:
    loop = add_loop()
    next(loop)
    for reply in replies[:-1]:
        loop.send(reply)
    with pytest.raises(CallerProtocolError) as raised:
        loop.send(replies[-1])
    last = loop.log[-1]
    assert type(last) is RunFinishedEvent
    assert last.error is not None and last.error.code == "CALLER_PROTOCOL_ERROR"
    assert last.error.message == str(raised.value)
    complete = loop.log[-2]
    assert type(complete) is SessionCompleteEvent and complete.reply is not None
    assert last.reply is None  # recorded once, in session.complete
    check_log(loop.log.events)
    msgspec.json.encode(complete)  # the log can always hold what ended the run
    # sticky: the run is dead
    with pytest.raises(CallerProtocolError):
        loop.send(Cancel())


def test_malformed_reply_is_recorded_as_unrecognized() -> None:
    loop = add_loop()
    next(loop)
    with pytest.raises(CallerProtocolError, match="int"):
        loop.send(42)  # type: ignore[arg-type]
    assert type(loop.log[-2].reply) is UnrecognizedReply  # type: ignore[union-attr]


def test_send_before_priming_is_misuse_without_events() -> None:
    loop = add_loop()
    with pytest.raises(CallerProtocolError, match="next"):
        loop.send(Cancel())
    assert len(loop.log) == 0


def test_reply_timestamps_are_floats_and_stamp_events() -> None:
    loop = add_loop(started_at=1)
    finish(
        loop,
        [ModelChunk("request-001", TextBlock("a"), at=2), response("request-001", "r", "a", at=3)],
    )
    assert loop.log[0].at == 1.0 and type(loop.log[0].at) is float
    chunk_event = loop.log[3]
    assert chunk_event.chunk.at == 2.0 and type(chunk_event.chunk.at) is float  # type: ignore[union-attr]
    assert loop.log[-1].at == 3.0


def test_list_content_is_accepted_as_tuple() -> None:
    result = finish(
        add_loop(),
        [ModelResponse("request-001", "r", [TextBlock("hi")], "stop")],  # type: ignore[arg-type]
    )
    assert result.final_text == "hi"
    assert type(result.messages[-1].content) is tuple  # type: ignore[union-attr]


def test_subscribers_see_every_event_in_order() -> None:
    log = EventLog()
    seen: list[int] = []
    log.subscribe(lambda event: seen.append(event.sequence))
    finish(add_loop(log=log), [response("request-001", "r", "hi")])
    assert seen == list(range(len(log)))
    assert log.since(3) == list(log)[3:]


def test_pause_without_budget_is_never_yielded_in_a_plain_run() -> None:
    effects, _ = drive(add_loop(), [response("request-001", "r", "hi")])
    assert not any(type(e) is Pause for e in effects)


def test_budget_and_hooks_are_recorded_in_session_start() -> None:
    hooks = HookRegistry()
    loop = agent_loop([USER], tools=[ADD], budget=Budget(max_turns=3), hooks=hooks, system="sys")
    next(loop)
    start = loop.log[0]
    assert start.type == "session.start"
    assert start.budget == Budget(max_turns=3)  # type: ignore[union-attr]
    assert start.system == "sys" and start.tools == (ADD,)  # type: ignore[union-attr]


def test_toolspec_validates_its_name() -> None:
    with pytest.raises(ValueError, match=r"characters of A-Z a-z 0-9 _ -, got 'has space'$"):
        ToolSpec("has space")
    with pytest.raises(ValueError, match=r"^ToolSpec.name must be 1-64 characters"):
        ToolSpec("x" * 65)


def test_keyboard_interrupt_in_a_hook_still_finishes_the_log() -> None:
    def interrupt(payload: dict[str, Any]) -> None:
        raise KeyboardInterrupt("ctrl-c")

    hooks = HookRegistry()
    hooks.on("before_tool_call", interrupt)
    loop = agent_loop([USER], tools=[ADD], hooks=hooks)
    next(loop)
    with pytest.raises(KeyboardInterrupt):
        loop.send(response("request-001", "r1", call("add", "c1", left=1, right=2)))
    assert loop.result is not None and loop.result.status == "cancelled"
    assert loop.result.reason == "KeyboardInterrupt: ctrl-c"
    assert loop.state is State.DONE
    check_log(loop.log.events)


def test_toolspec_owns_a_copy_of_its_schema_and_refuses_non_json() -> None:
    schema: dict[str, Any] = {"type": "object", "properties": {}}
    spec = ToolSpec("t", "", schema)
    schema["properties"]["x"] = {"type": "string"}
    assert spec.parameters == {"type": "object", "properties": {}}
    with pytest.raises(TypeError, match="not a finite number"):
        ToolSpec("t", "", {"type": "object", "maximum": math.inf})
    with pytest.raises(TypeError, match="not a JSON value"):
        ToolSpec("t", "", {"type": "object", "enum": {1, 2}})


# --------------------------------------------------------------------------- aliasing, robustness


def test_a_tool_mutating_its_arguments_changes_neither_transcript_nor_log() -> None:
    loop = add_loop()
    next(loop)
    tool_request = loop.send(response("request-001", "r1", call("add", "c1", left=1, right=2)))
    tool_request.call.arguments["left"] = "MUTATED"
    loop.send(ToolResult("c1", "3"))
    assert loop.messages[1].content[0].arguments == {"left": 1, "right": 2}
    assert all("MUTATED" not in msgspec.json.encode(e).decode() for e in loop.log)


def test_pause_and_resume_payloads_are_not_shared_with_the_log() -> None:
    approve = ToolSpec("send", "", {"type": "object"}, requires_approval=True)
    loop = agent_loop([USER], tools=[approve])
    next(loop)
    pause = loop.send(response("request-001", "r1", call("send", "c1", to="a@example.com")))
    assert type(pause) is Pause
    pause.payload["call"]["arguments"]["to"] = "edited in place"
    decision: dict[str, Any] = {"approved": True}
    loop.send(Resume(decision))
    decision["approved"] = False
    paused = next(e for e in loop.log if e.type == "session.pause")
    resumed = next(e for e in loop.log if e.type == "session.resume")
    assert paused.payload["call"]["arguments"] == {"to": "a@example.com"}
    assert resumed.reply.payload == {"approved": True}


def test_deeply_nested_arguments_fail_the_run_instead_of_the_stack() -> None:
    deep: dict[str, Any] = {}
    for _ in range(3000):
        deep = {"a": deep}
    loop = add_loop()
    next(loop)
    with pytest.raises(StopIteration) as stop:
        loop.send(ModelChunk("request-001", ToolCall("c1", "add", deep)))
    assert stop.value.value.error.code == "MODEL_PROTOCOL_ERROR"
    assert "MAX_ARGUMENT_DEPTH" in stop.value.value.error.message


def test_a_subscriber_unsubscribing_itself_does_not_hide_an_event_from_the_next() -> None:
    log = EventLog()
    seen: list[int] = []

    def once(event: Any) -> None:
        if event.type == "step.start":
            unsubscribe()

    unsubscribe = log.subscribe(once)
    log.subscribe(lambda event: seen.append(event.sequence))
    finish(add_loop(log=log), [response("request-001", "r", "hi")])
    assert seen == list(range(len(log)))


def test_a_subscriber_error_kills_the_run_loudly() -> None:
    log = EventLog()

    def broken(event: Any) -> None:
        if event.type == "plan.draft":
            raise OSError("disk full")

    log.subscribe(broken)
    loop = add_loop(log=log)
    next(loop)
    with pytest.raises(OSError, match="disk full"):
        loop.send(response("request-001", "r", "hi"))
    with pytest.raises(CallerProtocolError, match="disk full"):
        loop.send(Cancel())


def test_pause_request_reason_must_be_a_string() -> None:
    from agentloop import PauseRequest

    hooks = HookRegistry()
    hooks.on("before_tool_call", lambda payload: PauseRequest(("review", 1)))  # type: ignore[arg-type]
    result = finish(
        agent_loop([USER], tools=[ADD], hooks=hooks),
        [response("request-001", "r", call("add", "c1", left=1, right=2))],
    )
    assert result.error is not None and result.error.code == "HOOK_ERROR"


def test_interrupt_in_on_complete_still_finishes_the_log() -> None:
    def interrupt(payload: dict[str, Any]) -> None:
        raise KeyboardInterrupt

    hooks = HookRegistry()
    hooks.on("on_complete", interrupt)
    loop = agent_loop([USER], tools=[ADD], hooks=hooks)
    next(loop)
    with pytest.raises(KeyboardInterrupt):
        loop.send(response("request-001", "r", "hi"))
    check_log(loop.log.events)
    assert loop.result is not None and loop.result.status == "completed"


def test_empty_text_deltas_are_ignored() -> None:
    c = call("add", "c1", left=1, right=2)
    effects, _ = drive(
        add_loop(max_steps=1),
        [
            *chunks("request-001", "", c),
            response("request-001", "r1", c),
            ToolResult("c1", "3"),
        ],
    )
    assert any(type(e) is ToolRequest for e in effects)


def test_slicing_a_view_reads_only_the_slice() -> None:
    from agentloop import TranscriptView

    items: list[Any] = [UserMessage(f"u{i}", "x") for i in range(10)]
    view = TranscriptView(items, 8)
    items.append(UserMessage("later", "x"))
    assert view[-3:] == tuple(items[5:8])
    assert view[::4] == (items[0], items[4])
    assert view[20:] == ()


# --------------------------------------------------------------------------- lone surrogates


LONE = "caf\udce9.txt"  # what os.listdir gives for a non-UTF-8 file name


@pytest.mark.parametrize(
    "reply",
    [
        ModelChunk("request-001", TextBlock(LONE)),
        ModelChunk("request-001", ToolCall("c1", "add", {"path": LONE})),
        ModelChunk("request-001", ToolCall("c1", "add", {LONE: 1})),
        ModelFailure("request-001", LONE),
        Cancel(LONE),
    ],
    ids=["text", "argument value", "argument key", "failure message", "cancel reason"],
)
def test_a_lone_surrogate_is_refused_where_it_enters_and_the_log_stays_encodable(
    reply: Any,
) -> None:
    from agentloop import encode_event

    loop = add_loop()
    next(loop)
    with pytest.raises(CallerProtocolError, match="not valid Unicode: lone surrogate"):
        loop.send(reply)
    assert type(loop.log[-2].reply) is UnrecognizedReply
    for event in loop.log:
        encode_event(event)


def test_a_lone_surrogate_in_a_tool_result_is_escaped_by_run() -> None:
    from agentloop import ScriptedModel, ScriptedResponse, encode_event, run, tool

    @tool
    def listdir() -> str:
        """List the folder."""
        return LONE

    model = ScriptedModel(
        [
            ScriptedResponse.tool_calls("r1", ToolCall("c1", "listdir", {})),
            ScriptedResponse.text("r2", "done"),
        ]
    )
    log = EventLog()
    result = run([USER], model=model, tools=[listdir], log=log)
    assert result.status == "completed"
    assert result.messages[2].content == "caf\\udce9.txt"
    for event in log:
        encode_event(event)


def test_lone_surrogates_in_the_transcript_or_system_are_refused_up_front() -> None:
    loop = agent_loop([UserMessage("u1", LONE)], tools=[])
    with pytest.raises(StopIteration) as stop:
        next(loop)
    assert stop.value.value.error.code == "INVALID_TRANSCRIPT"
    assert "lone surrogate" in stop.value.value.error.message
    with pytest.raises(ValueError, match="lone surrogate"):
        agent_loop([USER], tools=[], system=LONE)
    with pytest.raises(ValueError, match="lone surrogate"):
        ToolSpec("t", LONE)


def test_malformed_model_output_is_a_failed_run_under_run() -> None:
    from agentloop import ScriptedModel, ScriptedResponse, run

    model = ScriptedModel(
        [ScriptedResponse("r1", (ToolCall("c1", "add", [1, 2]),), "tool_call")]  # type: ignore[arg-type]
    )
    result = run([USER], model=model, tools=[ADD])
    assert result.status == "failed" and result.error is not None
    assert result.error.code == "MODEL_PROTOCOL_ERROR"
    assert "must be a JSON object" in result.error.message


@pytest.mark.parametrize(
    "reply",
    [
        Resume({LONE: 1}),
        Resume([LONE]),
    ],
    ids=["payload key", "payload string"],
)
def test_a_lone_surrogate_in_a_resume_payload_is_refused(reply: Any) -> None:
    approve = ToolSpec("send", "", {"type": "object"}, requires_approval=True)
    loop = agent_loop([USER], tools=[approve])
    next(loop)
    loop.send(response("request-001", "r1", call("send", "c1")))
    with pytest.raises(CallerProtocolError, match="lone surrogate"):
        loop.send(reply)


def test_a_lone_surrogate_in_a_tool_call_id_is_refused() -> None:
    loop = add_loop()
    next(loop)
    with pytest.raises(CallerProtocolError, match=r"ModelChunk.block.id is not valid Unicode"):
        loop.send(ModelChunk("request-001", ToolCall(LONE, "add", {})))


def test_a_lone_surrogate_in_an_initial_assistant_message_is_refused() -> None:
    history = [USER, AssistantMessage("a1", (TextBlock(LONE),))]
    with pytest.raises(StopIteration) as stop:
        next(agent_loop(history, tools=[]))
    assert "messages[1].content[0].text is not valid Unicode" in stop.value.value.error.message


@pytest.mark.parametrize("topic", ["before_tool_call", "after_tool_call"])
def test_a_hook_may_not_introduce_a_lone_surrogate(topic: str) -> None:
    from agentloop import PauseRequest

    def hook(payload: dict[str, Any]) -> Any:
        if topic == "before_tool_call":
            return PauseRequest(LONE)
        payload["content"] = LONE
        return None

    hooks = HookRegistry()
    hooks.on(topic, hook)
    replies: list[Any] = [response("request-001", "r1", call("add", "c1", left=1, right=2))]
    if topic == "after_tool_call":
        replies.append(ToolResult("c1", "3"))
    result = finish(agent_loop([USER], tools=[ADD], hooks=hooks), replies)
    assert result.error is not None and result.error.code == "HOOK_ERROR"
    assert "lone surrogate" in result.error.message


def test_copy_json_copies_every_container_and_keeps_scalars() -> None:
    from agentloop._copy import copy_json as _copy_json

    assert _copy_json(5) == 5 and _copy_json("s") == "s"
    source: dict[str, Any] = {"a": ({"b": [1, (2, 3)]},)}
    copy = _copy_json(source)
    assert copy == {"a": [{"b": [1, [2, 3]]}]}
    assert copy["a"][0] is not source["a"][0]


def test_a_lone_surrogate_in_a_dict_tool_result_message_is_refused() -> None:
    history: list[Any] = [
        USER,
        AssistantMessage("a1", (ToolCall("c1", "add", {}),)),
        {
            "role": "tool_result",
            "id": "t1",
            "tool_call_id": "c1",
            "tool_name": "add",
            "content": LONE,
        },
    ]
    with pytest.raises(StopIteration) as stop:
        next(agent_loop(history, tools=[]))
    assert "messages[2].content is not valid Unicode" in stop.value.value.error.message
