"""encode_event on hand-built events: values of builtin subclasses and other types.

The loop only records plain JSON types, but ``encode_event`` is public and accepts
any event. Subclasses of the builtins must get the same tags as the builtins (or a
tag look-alike inside a dict subclass would decode as a tag), and values JSON has a
form for must encode exactly as msgspec encodes them.
"""

from __future__ import annotations

import datetime
import decimal
import enum
import math
from typing import Any

import msgspec
import pytest

from agentloop import (
    ModelChunk,
    ModelResponse,
    PlanDraftEvent,
    RunError,
    RunFinishedEvent,
    TextBlock,
    ToolCall,
    Usage,
    decode_event,
    encode_event,
)


class Big(enum.IntEnum):
    ONE = 1
    HUGE = 2**70


class Floaty(float):
    pass


class Items(list[Any]):
    pass


class Mapping(dict[str, Any]):
    pass


def _draft(arguments: dict[str, Any]) -> PlanDraftEvent:
    call = ToolCall("c1", "add", arguments)
    reply = ModelResponse("request-001", "r1", (call,), "tool_call")
    return PlanDraftEvent(sequence=3, at=1.5, step=1, reply=reply)


def _finished(arguments: dict[str, Any]) -> RunFinishedEvent:
    return RunFinishedEvent(
        sequence=9,
        at=2.0,
        step=1,
        status="failed",
        steps=1,
        max_steps=8,
        error=RunError("MODEL_PROTOCOL_ERROR", "bad"),
        reason="MODEL_PROTOCOL_ERROR",
        reply=ModelChunk("request-001", ToolCall("c1", "add", arguments)),
    )


def _arguments(event: Any) -> Any:
    reply = event.reply
    block = reply.block if type(reply) is ModelChunk else reply.content[0]
    return block.arguments


BOTH = pytest.mark.parametrize("make", [_draft, _finished], ids=["plan.draft", "run.finished"])

# value -> what decoding gives back (the builtin equivalent, exactly)
SUBCLASSES_NEEDING_TAGS = {
    "IntEnum beyond 64 bits": (Big.HUGE, 2**70),
    "list subclass holding inf": (Items([1, math.inf]), [1, math.inf]),
    "dict subclass looking like a tag": (Mapping({"$int": "1"}), {"$int": "1"}),
    "dict subclass holding a huge int": (Mapping(n=-(2**64)), {"n": -(2**64)}),
    "tuple holding a huge int": ((1, 2**64), [1, 2**64]),
}


@BOTH
@pytest.mark.parametrize(
    ("value", "back"), SUBCLASSES_NEEDING_TAGS.values(), ids=SUBCLASSES_NEEDING_TAGS.keys()
)
def test_builtin_subclasses_are_tagged_like_the_builtins(make: Any, value: Any, back: Any) -> None:
    data = encode_event(make({"x": value}))
    assert b'{"$' in data
    decoded = decode_event(data)
    assert _arguments(decoded) == {"x": back}
    assert encode_event(decoded) == data  # canonical from here on


# values JSON has a form for, without tags: msgspec's own encoding, byte for byte
PLAIN_OTHERS = {
    "small IntEnum": (Big.ONE, 1),
    "list subclass": (Items([1, "a"]), [1, "a"]),
    "dict subclass": (Mapping(a=1), {"a": 1}),
    "Decimal": (decimal.Decimal("1.50"), "1.50"),
    "date": (datetime.date(2026, 1, 2), "2026-01-02"),
}


@BOTH
@pytest.mark.parametrize(("value", "back"), PLAIN_OTHERS.values(), ids=PLAIN_OTHERS.keys())
def test_other_values_encode_as_msgspec_does(make: Any, value: Any, back: Any) -> None:
    event = make({"x": value})
    data = encode_event(event)
    assert data == msgspec.json.encode(event)
    assert _arguments(decode_event(data)) == {"x": back}


@BOTH
@pytest.mark.parametrize("value", [Floaty(1.5), Floaty("nan")], ids=["finite", "nan"])
def test_float_subclasses_cannot_be_encoded(make: Any, value: Any) -> None:
    # As msgspec itself: a TypeError naming the type (documented on encode_event).
    with pytest.raises(TypeError, match="Floaty"):
        encode_event(make({"x": value}))


@pytest.mark.parametrize(
    "usage", [Usage(2**64, 1), Usage(1, -(2**63) - 1)], ids=["input", "output"]
)
def test_a_draft_with_usage_beyond_64_bits_is_tagged(usage: Usage) -> None:
    # Only the usage needs a tag here (finite at, plain arguments).
    reply = ModelResponse("request-001", "r1", (TextBlock("hi"),), "stop", usage, at=2.5)
    event = PlanDraftEvent(sequence=3, at=2.5, step=1, reply=reply)
    data = encode_event(event)
    assert b'{"$int":' in data and b'"at":2.5' in data
    assert decode_event(data) == event
