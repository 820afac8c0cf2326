"""What send() checks: each malformed reply is caller misuse that says what and where;
bad but well-formed tool arguments are the model's fault (DESIGN §5, §8)."""

from __future__ import annotations

import math
from typing import Any

import msgspec
import pytest

from agentloop import (
    MAX_ARGUMENT_VALUES,
    CallerProtocolError,
    ModelChunk,
    ModelFailure,
    ModelResponse,
    Resume,
    RunFinishedEvent,
    TextBlock,
    ThinkingBlock,
    ToolCall,
    ToolResult,
    ToolSpec,
    UnrecognizedReply,
    Usage,
    UserMessage,
    agent_loop,
)
from tests.helpers import ADD, call, check_log, finish, response

GUARDED = ToolSpec("guarded", "Needs a human's approval.", requires_approval=True)
REQUEST = "request-001"
# Replies that bring the loop to a tool request / an approval pause first.
TO_TOOL = [response(REQUEST, "r1", call("add", "c1", left=1, right=2))]
TO_PAUSE = [response(REQUEST, "r1", call("guarded", "c1"))]


def _text(text: Any) -> ModelResponse:
    return ModelResponse(REQUEST, "r1", (TextBlock(text),), "stop")


# case -> (replies before, the malformed reply, the error message)
MALFORMED: dict[str, tuple[list[Any], Any, str]] = {
    # ModelChunk blocks
    "chunk text not a str": (
        [],
        ModelChunk(REQUEST, TextBlock(b"hi")),
        "ModelChunk.block.text must be a str",
    ),
    "chunk tool call id not a str": (
        [],
        ModelChunk(REQUEST, ToolCall(1, "add", {})),
        "ModelChunk.block: ToolCall.id and .name must be str",
    ),
    "chunk tool call name not a str": (
        [],
        ModelChunk(REQUEST, ToolCall("c1", None, {})),
        "ModelChunk.block: ToolCall.id and .name must be str",
    ),
    "chunk thinking text not a str": (
        [],
        ModelChunk(REQUEST, ThinkingBlock(None)),
        "ModelChunk.block: ThinkingBlock.text must be a str and .signature a str or None",
    ),
    "chunk thinking signature not a str": (
        [],
        ModelChunk(REQUEST, ThinkingBlock("hmm", signature=b"sig")),
        "ModelChunk.block: ThinkingBlock.text must be a str and .signature a str or None",
    ),
    "chunk block a message": (
        [],
        ModelChunk(REQUEST, UserMessage("u2", "hi")),
        "ModelChunk.block must be a TextBlock, ThinkingBlock, ToolCall, ProviderBlock or "
        "ImageBlock, got UserMessage",
    ),
    "chunk at too large for a float": (
        [],
        ModelChunk(REQUEST, TextBlock("hi"), at=2**1024),
        "ModelChunk.at is an integer too large for a float",
    ),
    # ModelResponse fields
    "response id not a str": (
        [],
        ModelResponse(REQUEST, 7, (TextBlock("hi"),), "stop", usage=Usage(-1, 0)),
        "ModelResponse.id must be a str, got int",  # the first problem, not the usage
    ),
    "response content a str": (
        [],
        ModelResponse(REQUEST, "r1", "hi", "stop"),
        "ModelResponse.content must be a tuple, got str",
    ),
    "response block text not a str": (
        [],
        _text(3),
        "ModelResponse.content[0].text must be a str",
    ),
    "first response block malformed, the next valid": (
        [],
        ModelResponse(REQUEST, "r1", (TextBlock(b"x"), TextBlock("ok")), "stop"),
        "ModelResponse.content[0].text must be a str",
    ),
    "first response block not a block, the next valid": (
        [],
        ModelResponse(REQUEST, "r1", ("x", TextBlock("ok")), "stop"),
        "ModelResponse.content[0] must be a TextBlock, ThinkingBlock, ToolCall, ProviderBlock "
        "or ImageBlock, got str",
    ),
    "second response block malformed": (
        [],
        ModelResponse(REQUEST, "r1", (TextBlock("a"), ThinkingBlock(1)), "stop"),
        "ModelResponse.content[1]: ThinkingBlock.text must be a str and .signature a str or None",
    ),
    "tool call key not a str": (
        [],
        ModelResponse(REQUEST, "r1", (ToolCall("c1", "add", {"a": {}, "b": {1: 2}}),), "tool_call"),
        "ModelResponse.content[0]: ToolCall 'c1' $.b: object key 1 is not a string",
    ),
    "tool call arguments a list": (
        [],
        ModelResponse(REQUEST, "r1", (ToolCall("c1", "add", [1, 2]),), "tool_call"),
        "ModelResponse.content[0]: ToolCall 'c1' arguments must be a JSON object (dict), got list",
    ),
    "negative usage": (
        [],
        ModelResponse(REQUEST, "r1", (TextBlock("hi"),), "stop", usage=Usage(-1, 0)),
        "ModelResponse.usage must be None or a Usage of non-negative ints",
    ),
    "usage a tuple": (
        [],
        ModelResponse(REQUEST, "r1", (TextBlock("hi"),), "stop", usage=(1, 2)),
        "ModelResponse.usage must be None or a Usage of non-negative ints",
    ),
    "usage of floats": (
        [],
        ModelResponse(REQUEST, "r1", (TextBlock("hi"),), "stop", usage=Usage(1.0, 2)),
        "ModelResponse.usage must be None or a Usage of non-negative ints",
    ),
    # ModelFailure
    "failure message not a str": (
        [],
        ModelFailure(REQUEST, ValueError("boom")),
        "ModelFailure.message must be a str, got ValueError",
    ),
    # ToolResult
    "tool result is_error an int": (
        TO_TOOL,
        ToolResult("c1", "3", is_error=1),
        "ToolResult.is_error must be a bool",
    ),
    "tool result content not a str": (
        TO_TOOL,
        ToolResult("c1", {"sum": 3}),
        "ToolResult.content must be a str or a tuple of parts, got dict",
    ),
    # Resume
    "resume budget a dict": (
        TO_PAUSE,
        Resume(payload={"approved": True}, budget={"max_turns": 3}),
        "Resume.budget must be a Budget or None, got dict",
    ),
    "resume payload not JSON": (
        TO_PAUSE,
        Resume(payload={"approved": {True}}),
        "Resume.payload.approved: set is not a JSON value",
    ),
    "resume at a str": (
        TO_PAUSE,
        Resume(payload={"approved": True}, at="noon"),
        "Resume.at must be a number or None, got str",
    ),
    # UnrecognizedReply sent live
    "unrecognized description not a str": (
        [],
        UnrecognizedReply(7),
        "UnrecognizedReply.description must be a str, got int",
    ),
}


@pytest.mark.parametrize(("before", "reply", "message"), MALFORMED.values(), ids=MALFORMED.keys())
def test_malformed_replies_are_misuse_that_says_what_and_where(
    before: list[Any], reply: Any, message: str
) -> None:
    loop = agent_loop([UserMessage("u1", "Add 1 and 2.")], tools=[ADD, GUARDED])
    next(loop)
    for good in before:
        loop.send(good)
    with pytest.raises(CallerProtocolError) as raised:
        loop.send(reply)
    assert str(raised.value) == message
    last = loop.log[-1]
    assert type(last) is RunFinishedEvent and last.status == "failed"
    assert last.error is not None and last.error.code == "CALLER_PROTOCOL_ERROR"
    # The log cannot hold the malformed reply itself: it holds what was wrong with it.
    complete = loop.log[-2]
    assert complete.reply == UnrecognizedReply(message)  # type: ignore[union-attr]
    msgspec.json.encode(complete)
    check_log(loop.log.events)


def test_an_unrecognized_reply_sent_live_is_misuse_in_its_own_words() -> None:
    loop = agent_loop([UserMessage("u1", "hi")], tools=[ADD])
    next(loop)
    with pytest.raises(CallerProtocolError, match=r"^a set, not a reply$"):
        loop.send(UnrecognizedReply("a set, not a reply", at=4.0))
    assert loop.log[-2].reply == UnrecognizedReply("a set, not a reply", at=4.0)


# --------------------------------------------------------------------------- model's fault

# Well-formed (plain JSON) but out of bounds: the run fails, nothing is raised, and the
# message names the rule and the path.
SEMANTIC = {
    "non-finite among containers": (
        {"a": {"x": True}, "b": {"y": None}, "c": [None, False], "n": -math.inf},
        "$.n: -inf is not a finite number",
    ),
    "first of two bad numbers in walk order": (
        {"big": 2**64, "nan": math.nan},
        "$.nan: nan is not a finite number",
    ),
    "huge negative int": (
        {"xs": [1, -(2**63) - 1]},
        f"$.xs[1]: integer {-(2**63) - 1} is outside the 64-bit range",
    ),
    "too many values": (
        {"xs": list(range(MAX_ARGUMENT_VALUES - 1))},
        f"{MAX_ARGUMENT_VALUES + 1} values exceed MAX_ARGUMENT_VALUES ({MAX_ARGUMENT_VALUES}, "
        f"root included): {MAX_ARGUMENT_VALUES} object fields and array elements exceed "
        "MAX_ARGUMENT_ENTRIES (256)",
    ),
}


@pytest.mark.parametrize(("arguments", "message"), SEMANTIC.values(), ids=SEMANTIC.keys())
def test_out_of_bounds_arguments_fail_the_run_naming_rule_and_path(
    arguments: dict[str, Any], message: str
) -> None:
    loop = agent_loop([UserMessage("u1", "Add.")], tools=[ADD])
    result = finish(loop, [response(REQUEST, "r1", ToolCall("c1", "add", arguments))])
    assert result.status == "failed" and result.error is not None
    assert result.error.code == "MODEL_PROTOCOL_ERROR"
    assert result.error.message == f"step 1: content[0] (tool call 'c1') arguments: {message}"
    assert [m.id for m in result.messages] == ["u1"]  # nothing half-made is kept


def test_arguments_of_every_json_type_are_accepted_as_sent() -> None:
    arguments = {"s": "x", "i": -1, "f": 1.5, "b": False, "n": None, "l": [True, None], "d": {}}
    loop = agent_loop([UserMessage("u1", "Add.")], tools=[ADD], max_steps=1)
    next(loop)
    effect = loop.send(response(REQUEST, "r1", ToolCall("c1", "add", arguments)))
    assert effect.call.arguments == arguments
    loop.close()


def test_arguments_at_the_limits_are_accepted() -> None:
    # root + "xs" + its items + "big" + "low" = MAX_ARGUMENT_VALUES values
    arguments = {"xs": list(range(MAX_ARGUMENT_VALUES - 4)), "big": 2**64 - 1, "low": -(2**63)}
    loop = agent_loop([UserMessage("u1", "Add.")], tools=[ADD], max_steps=1)
    effects = [next(loop), loop.send(response(REQUEST, "r1", ToolCall("c1", "add", arguments)))]
    assert effects[-1].call.arguments == arguments
    loop.close()
