"""The generator's less travelled paths: observations, late throw/close, odd inputs."""

from __future__ import annotations

import datetime
import decimal
import enum
import uuid
from typing import Any

import pytest

from agentloop import (
    AssistantMessage,
    ModelRequest,
    State,
    TextBlock,
    ToolCall,
    ToolResultMessage,
    UserMessage,
    agent_loop,
)
from tests.helpers import ADD, call, chunks, finish, response

USER = UserMessage("u1", "hi")


# --------------------------------------------------------------------------- observations


def test_transcript_view_compares_with_sequences_only() -> None:
    loop = agent_loop([USER], tools=[ADD])
    request = next(loop)
    assert type(request) is ModelRequest
    view = request.messages
    assert view == [USER] and view == (USER,)
    assert view != [USER, USER] and view != [UserMessage("u1", "bye")]
    # Not sequences of messages: never equal (and no TypeError).
    assert view != "hi" and view != b"hi" and view != 1 and view != {"u1": USER}
    assert repr(view) == "TranscriptView([UserMessage(id='u1', content='hi')])"
    loop.close()


def test_loop_repr_and_tools() -> None:
    loop = agent_loop([USER], tools=[ADD])
    assert repr(loop) == "<AgentLoop state=IDLE step=0 events=0>"
    assert loop.tools == (ADD,)
    next(loop)
    assert repr(loop) == "<AgentLoop state=PLANNING step=1 events=3>"
    loop.close()


# --------------------------------------------------------------------------- late throw / close


def test_throw_and_close_after_the_run_finished_change_nothing() -> None:
    loop = agent_loop([USER], tools=[ADD])
    result = finish(loop, [response("request-001", "r1", "hello")])
    events = list(loop.log)
    with pytest.raises(ValueError, match="late"):
        loop.throw(ValueError("late"))
    loop.close()
    assert list(loop.log) == events and loop.result == result


INVALID = [ToolResultMessage("t1", "c9", "add", "3")]  # a result without a call


def test_throw_before_priming_runs_nothing_and_raises() -> None:
    loop = agent_loop(INVALID, tools=[ADD])
    with pytest.raises(KeyError):
        loop.throw(KeyError("stop"))
    assert loop.result is None and len(loop.log) == 0  # as for any unstarted generator
    with pytest.raises(StopIteration):
        next(loop)


def test_close_before_priming_records_nothing() -> None:
    loop = agent_loop(INVALID, tools=[ADD])
    loop.close()
    assert loop.result is None and len(loop.log) == 0
    with pytest.raises(StopIteration):
        next(loop)


# --------------------------------------------------------------------------- initial messages

# Messages whose fields have the wrong Python type take the checked path. Nothing
# is converted on the way in (a list of blocks is already a sequence of blocks, so
# it becomes the tuple the IR keeps); any other type names the field it is in.
CONVERTED = {
    "assistant content as a list": (
        [USER, AssistantMessage("a1", [TextBlock("x")])],
        AssistantMessage("a1", (TextBlock("x"),)),
    ),
}


class Colour(enum.Enum):
    RED = "red"


class Word(str, enum.Enum):
    HELLO = "hello"


REFUSED = {
    "assistant text an int": (
        [USER, AssistantMessage("a1", (TextBlock(3),))],
        "messages[1].content[0].text must be a str",
    ),
    "assistant id an int": (
        [USER, AssistantMessage(5, (TextBlock("x"),))],
        "messages[1].id must be a str, got int",
    ),
    "assistant content a str": (
        [USER, AssistantMessage("a1", "x")],
        "messages[1].content must be a tuple of blocks, got str",
    ),
    "tool result content an int": (
        [
            USER,
            AssistantMessage("a1", (call("add", "c1"),)),
            ToolResultMessage("t1", "c1", "add", 3),
        ],
        "messages[2].content must be a str or a tuple of parts, got int",
    ),
    "tool result is_error an int": (
        [
            USER,
            AssistantMessage("a1", (call("add", "c1"),)),
            ToolResultMessage("t1", "c1", "add", "3", is_error=1),
        ],
        "messages[2].is_error must be a bool, got int",
    ),
    # Values msgspec.to_builtins would have turned into strings or lists: refused.
    "user content bytes": (
        [UserMessage("u1", b"hi")],
        "messages[0].content must be a str or a tuple of parts, got bytes",
    ),
    "user content a datetime": (
        [UserMessage("u1", datetime.datetime(2024, 1, 2, 3, 4, 5))],
        "messages[0].content must be a str or a tuple of parts, got datetime",
    ),
    "user id a Decimal": (
        [UserMessage(decimal.Decimal("1.5"), "hi")],
        "messages[0].id must be a str, got Decimal",
    ),
    "user id a UUID": (
        [UserMessage(uuid.UUID(int=1), "hi")],
        "messages[0].id must be a str, got UUID",
    ),
    "user content an Enum": (
        [UserMessage("u1", Colour.RED)],
        "messages[0].content must be a str or a tuple of parts, got Colour",
    ),
    "user content a str Enum": (
        [UserMessage("u1", Word.HELLO)],
        "messages[0].content must be a str or a tuple of parts, got Word",
    ),
    "assistant content a set": (
        [USER, AssistantMessage("a1", {TextBlock("x")})],
        "messages[1].content must be a tuple of blocks, got set",
    ),
    "tool arguments a set inside": (
        [
            USER,
            AssistantMessage("a1", (ToolCall("c1", "add", {"xs": {1, 2}}),)),
            ToolResultMessage("t1", "c1", "add", "3"),
        ],
        "messages[1].content[0]: ToolCall 'c1' $.xs: set is not a JSON value",
    ),
    "tool arguments a datetime inside": (
        [
            USER,
            AssistantMessage("a1", (ToolCall("c1", "add", {"at": datetime.date(2024, 1, 2)}),)),
            ToolResultMessage("t1", "c1", "add", "3"),
        ],
        "messages[1].content[0]: ToolCall 'c1' $.at: date is not a JSON value",
    ),
    "dict with bytes content": (
        [{"role": "user", "id": "u1", "content": b"hi"}],
        "messages[0]: Expected `str | array`, got `bytes` - at `$.content`",
    ),
    "dict with a str Enum content": (
        [{"role": "user", "id": "u1", "content": Word.HELLO}],
        "messages[0].content must be a str or a tuple of parts, got Word",
    ),
    "not a message": (
        [USER, ("assistant", "a1", "hello")],
        "messages[1] must be a UserMessage, AssistantMessage or ToolResultMessage (or a "
        "dict of the same shape), got tuple",
    ),
}


@pytest.mark.parametrize(("messages", "kept"), CONVERTED.values(), ids=CONVERTED.keys())
def test_convertible_initial_messages_are_converted(messages: list[Any], kept: Any) -> None:
    loop = agent_loop(messages, tools=[ADD])
    request = next(loop)
    assert request.messages[-1] == kept and type(request.messages[-1].content) is tuple
    loop.close()


@pytest.mark.parametrize(("messages", "message"), REFUSED.values(), ids=REFUSED.keys())
def test_mistyped_initial_messages_are_an_invalid_transcript(
    messages: list[Any], message: str
) -> None:
    loop = agent_loop(messages, tools=[ADD])
    with pytest.raises(StopIteration) as stop:
        next(loop)
    result = stop.value.value
    assert result.error.code == "INVALID_TRANSCRIPT"
    assert result.error.message == f"invalid transcript: {message}"
    # The run is over: DONE, like any finished run (not IDLE, as if never started).
    assert loop.state is State.DONE and loop.result == result and loop.pending is None


# --------------------------------------------------------------------------- tool call ids


def test_an_empty_tool_call_id_is_a_protocol_error() -> None:
    loop = agent_loop([USER], tools=[ADD])
    result = finish(loop, [response("request-001", "r1", ToolCall("", "add", {}))])
    assert result.error is not None and result.error.code == "MODEL_PROTOCOL_ERROR"
    assert result.error.message == "step 1: content[0]: tool call id is empty"


@pytest.mark.parametrize(
    ("reply", "message"),
    [
        (response("request-001", "", "hello"), "response id is empty"),
        (
            response("request-001", "r1", ToolCall("c1", "", {})),
            "content[0] (tool call 'c1'): tool name is empty",
        ),
    ],
    ids=["response id", "tool name"],
)
def test_empty_ids_and_names_are_protocol_errors(reply: Any, message: str) -> None:
    result = finish(agent_loop([USER], tools=[ADD]), [reply])
    assert result.error is not None and result.error.code == "MODEL_PROTOCOL_ERROR"
    assert result.error.message == f"step 1: {message}"


def test_a_call_whose_result_id_is_taken_is_a_protocol_error() -> None:
    # The result message would be "tool-result-c1": that id is an initial message's.
    loop = agent_loop([UserMessage("tool-result-c1", "hi")], tools=[ADD])
    result = finish(loop, [response("request-001", "r1", call("add", "c1"))])
    assert result.error is not None and result.error.code == "MODEL_PROTOCOL_ERROR"
    assert result.error.message == (
        "step 1: content[0] (tool call 'c1'): its result id tool-result-c1 is already taken"
    )


# --------------------------------------------------------------------------- chunks vs final

ADD_CALL = call("add", "c1", left=1, right=2)  # not tests.helpers.ADD_CALL: other arguments
# The streamed chunks and the final response must tell the same story once adjacent
# text is merged; the first difference is named.
MISMATCHES = {
    "final goes on after the stream": (
        ["Let me ", "add."],
        ["Let me add.", ADD_CALL],
        "streamed chunks make 1 normalized blocks, the final response 2",
    ),
    "stream goes on after the final": (
        ["Let me ", ADD_CALL],
        ["Let me "],
        "streamed chunks make 2 normalized blocks, the final response 1",
    ),
    "different text": (
        ["Let me ", "add!"],
        ["Let me add."],
        "streamed chunks disagree with the final response at normalized block 0: "
        "streamed text 'Let me add!', final text 'Let me add.'",
    ),
}


@pytest.mark.parametrize(("streamed", "final", "message"), MISMATCHES.values(), ids=MISMATCHES)
def test_chunks_that_disagree_with_the_final_response_fail_the_run(
    streamed: list[Any], final: list[Any], message: str
) -> None:
    loop = agent_loop([USER], tools=[ADD])
    result = finish(
        loop, [*chunks("request-001", *streamed), response("request-001", "r1", *final)]
    )
    assert result.error is not None and result.error.code == "MODEL_PROTOCOL_ERROR"
    assert result.error.message == f"step 1: {message}"
    assert result.messages == (USER,)


def test_text_split_differently_in_chunks_and_final_is_the_same_story() -> None:
    loop = agent_loop([USER], tools=[ADD])
    final = response("request-001", "r1", TextBlock("Let "), TextBlock("me add."))
    result = finish(loop, [*chunks("request-001", "Let me ", "add."), final])
    assert (result.status, result.final_text) == ("completed", "Let me add.")


# ------------------------------------------------------------------- the snapshot's slow path


@pytest.mark.parametrize(
    "message",
    [
        # content a list: rebuilt as a tuple of copies
        AssistantMessage("a1", [ToolCall("c1", "add", {"left": 1, "right": 2})]),  # type: ignore[arg-type]
        # a non-ASCII call id: the fast path takes ASCII ids only
        AssistantMessage("a1", (ToolCall("cé1", "add", {"left": 1, "right": 2}),)),
    ],
)
def test_an_initial_tool_call_the_fast_path_leaves_is_checked_and_kept(message: Any) -> None:
    call_id = message.content[0].id
    result = ToolResultMessage(f"t-{call_id}", call_id, "add", '{"sum":3}')
    loop = agent_loop([UserMessage("u1", "1 + 2?"), message, result], tools=[ADD])
    next(loop)
    kept = loop.messages[1]
    assert type(kept.content) is tuple and kept.content == tuple(message.content)
    assert kept.content[0].arguments is not message.content[0].arguments  # a copy
    loop.close()
