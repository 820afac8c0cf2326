"""The canonical event encoding: fast path, tagged non-JSON values, round trips."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from agentloop import (
    Cancel,
    ModelAttempt,
    ModelChunk,
    ModelFailure,
    ModelResponse,
    PlanDraftEvent,
    Resume,
    RunError,
    RunFinishedEvent,
    StepEndEvent,
    TextBlock,
    ToolCall,
    ToolCallEvent,
    ToolResult,
    UnrecognizedReply,
    Usage,
    decode_event,
    encode_event,
)
from replay import read_log
from tests.helpers import examples

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
FIXTURE_EVENTS = [event for path in sorted(FIXTURES.glob("**/*.jsonl")) for event in read_log(path)]


def _norm(value: Any) -> Any:
    """A comparable form that tells NaN, ints, floats and bools apart."""
    if isinstance(value, msgspec.Struct):
        return (type(value).__name__, _norm(msgspec.structs.asdict(value)))
    if isinstance(value, dict):
        return {k: _norm(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_norm(v) for v in value]
    if isinstance(value, float) and math.isnan(value):
        return ("float", "nan")
    return (type(value).__name__, value)


def _draft(arguments: dict[str, Any], **reply: Any) -> PlanDraftEvent:
    response = ModelResponse(
        "request-001", "r1", (ToolCall("c1", "add", arguments),), "tool_call", **reply
    )
    return PlanDraftEvent(sequence=3, at=1.5, step=1, reply=response)


def _finished(reply: Any) -> RunFinishedEvent:
    return RunFinishedEvent(
        sequence=9,
        at=2.0,
        step=1,
        status="failed",
        steps=1,
        max_steps=8,
        error=RunError("MODEL_PROTOCOL_ERROR", "bad"),
        reason="MODEL_PROTOCOL_ERROR",
        reply=reply,
    )


def _round_trip(event: Any) -> Any:
    data = encode_event(event)
    back = decode_event(data)
    assert type(back) is type(event)
    assert encode_event(back) == data, "encoding is not canonical"
    assert _norm(decode_event(data.decode())) == _norm(back)
    assert _norm(back) == _norm(event)
    return back


# --------------------------------------------------------------------------- fast path


@pytest.mark.parametrize("event", FIXTURE_EVENTS, ids=lambda e: f"{e.type}#{e.sequence}")
def test_every_fixture_event_encodes_canonically(event: Any) -> None:
    data = encode_event(event)
    back = decode_event(data)
    assert encode_event(back) == data
    assert _norm(back) == _norm(event)


def test_ordinary_events_are_plain_msgspec_json() -> None:
    event = ToolCallEvent(sequence=4, at=None, step=1, call=ToolCall("c1", "add", {"a": 1}))
    assert encode_event(event) == msgspec.json.encode(event)
    assert decode_event(encode_event(event)) == event
    step_end = StepEndEvent(sequence=3, at=2.5, step=2)
    assert encode_event(step_end) == b'{"type":"step.end","sequence":3,"at":2.5,"step":2}'
    # Fields that hold their default are left out.
    assert encode_event(StepEndEvent(sequence=3)) == b'{"type":"step.end","sequence":3}'


def test_decode_accepts_str() -> None:
    assert decode_event('{"type":"step.end","sequence":3,"at":null,"step":1}') == StepEndEvent(
        sequence=3, at=None, step=1
    )


def test_finite_draft_takes_the_fast_path() -> None:
    event = _draft({"a": 1, "b": [1.5, "x", None, True]}, usage=Usage(3, 4), at=1.5)
    assert encode_event(event) == msgspec.json.encode(event)
    _round_trip(event)


# --------------------------------------------------------------------------- tagged values

# Grouped by where the value sits; every one must come back exactly.
TAGGED = {
    "nan": math.nan,
    "inf": math.inf,
    "-inf": -math.inf,
    "int above uint64": 2**64,
    "int below int64": -(2**63) - 1,
    "huge int": 10**40,
    "huge negative int": -(10**40),
}


@pytest.mark.parametrize("value", list(TAGGED.values()), ids=list(TAGGED))
def test_plan_draft_arguments_keep_non_json_values(value: Any) -> None:
    event = _draft({"x": value, "nested": [{"y": value}]})
    data = encode_event(event)
    assert b"$" in data
    back = _round_trip(event)
    got = back.reply.content[0].arguments["x"]
    if isinstance(value, float) and math.isnan(value):
        assert math.isnan(got)
    else:
        assert got == value and type(got) is type(value)


def test_uint64_and_int64_edges_stay_plain() -> None:
    event = _draft({"hi": 2**64 - 1, "lo": -(2**63)})
    assert b"$" not in encode_event(event)
    _round_trip(event)


@pytest.mark.parametrize(
    "reply",
    [
        ModelChunk("request-001", ToolCall("c1", "add", {"x": math.nan}), at=1.0),
        ModelChunk("request-001", TextBlock("hi"), at=math.inf),
        ToolResult("c1", "ok", at=-math.inf),
        Resume(payload=None, at=math.nan),
        Cancel("stop", at=math.nan),
        ModelResponse("request-001", "r1", (TextBlock("x"),), "stop", Usage(2**70, 1)),
        ModelFailure("request-001", "boom", at=math.inf),
        UnrecognizedReply("a set", at=None),
    ],
    ids=lambda r: type(r).__name__,
)
def test_run_finished_reply_keeps_non_json_values(reply: Any) -> None:
    _round_trip(_finished(reply))


def test_run_finished_usage_and_draft_usage_huge_ints() -> None:
    event = msgspec.structs.replace(_finished(None), usage=Usage(2**65, 0))
    _round_trip(event)
    _round_trip(_draft({}, usage=Usage(0, 2**90), at=math.nan))
    # Every Usage field, and the attempts a FallbackModel records, are looked at.
    for name in ("cache_read_tokens", "cache_write_tokens", "reasoning_tokens"):
        draft = _draft({}, usage=Usage(1, 2, **{name: 2**70}))
        assert b'{"$int":"1180591620717411303424"}' in encode_event(draft)
        _round_trip(draft)
    huge = ModelAttempt(model="m", error="e", status_code=2**70, usage=Usage(-(2**64), 0))
    draft = _draft({}, attempts=(huge,))
    assert encode_event(draft).count(b'{"$int":') == 2
    _round_trip(draft)
    _round_trip(_draft({}, attempts=(ModelAttempt(model="m", error="e"),)))


# A model may really send objects that look like tags: they come back as sent.
LOOKALIKES = [
    {"$float": "nan"},
    {"$int": "12"},
    {"$dict": {"$float": "inf"}},
    {"$float": 1.5},
    {"$dict": 3},
]


@pytest.mark.parametrize("value", LOOKALIKES, ids=str)
def test_tag_lookalikes_round_trip_literally(value: dict[str, Any]) -> None:
    for event in (
        _draft({"v": value}),
        _draft(value),
        _draft({"v": value, "n": math.nan}),
        _finished(ModelChunk("request-001", ToolCall("c1", "add", {"v": value}))),
    ):
        back = _round_trip(event)
        assert _norm(back) == _norm(event)


@pytest.mark.parametrize("value", LOOKALIKES, ids=str)
def test_tag_lookalikes_in_ordinary_events_are_plain(value: dict[str, Any]) -> None:
    event = ToolCallEvent(sequence=4, step=1, call=ToolCall("c1", "add", {"v": value}))
    assert encode_event(event) == msgspec.json.encode(event)
    assert decode_event(encode_event(event)) == event


# --------------------------------------------------------------------------- errors


@pytest.mark.parametrize(
    ("data", "error"),
    [
        (b"not json", msgspec.DecodeError),
        (b'{"type":"no.such.event","sequence":0}', msgspec.ValidationError),
        (b'{"type":"step.end"}', msgspec.ValidationError),
        (b'{"type":"step.end","sequence":"x"}', msgspec.ValidationError),
        (b'{"type":"step.end","sequence":1,"at":{"$float":"nan"}}', msgspec.ValidationError),
        (b"[1, 2]", msgspec.ValidationError),
    ],
)
def test_decode_errors(data: bytes, error: type[Exception]) -> None:
    with pytest.raises(error):
        decode_event(data)


@pytest.mark.parametrize(
    "tag",
    [b'{"$float":"bogus"}', b'{"$float":1}', b'{"$int":"1x"}', b'{"$int":""}', b'{"$dict":1}'],
)
def test_malformed_tags_in_tagged_events_are_rejected(tag: bytes) -> None:
    line = (
        b'{"type":"plan.draft","sequence":3,"at":null,"step":1,"reply":{"kind":"model_response",'
        b'"request_id":"request-001","id":"r1","content":[{"type":"tool_call","id":"c1",'
        b'"name":"add","arguments":{"x":' + tag + b'}}],"stop_reason":"tool_call","usage":null,'
        b'"at":null}}'
    )
    with pytest.raises(msgspec.ValidationError):
        decode_event(line)


def test_unencodable_event_raises_type_error() -> None:
    event = ToolCallEvent(sequence=4, step=1, call=ToolCall("c1", "add", {"x": object()}))
    with pytest.raises(TypeError, match=r"^Encoding objects of type object is unsupported$"):
        encode_event(event)


# --------------------------------------------------------------------------- property

_keys = st.one_of(st.text(max_size=6), st.sampled_from(["$float", "$int", "$dict", "$", "a"]))
_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.sampled_from([2**63, 2**64 - 1, 2**64, -(2**63), -(2**63) - 1, 10**30]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=8),
    st.sampled_from(["nan", "inf", "-inf", "$float", '{"$']),
)
_json = st.recursive(
    _scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(_keys, inner, max_size=4)),
    max_leaves=20,
)
_arguments = st.dictionaries(_keys, _json, max_size=5)
_at = st.one_of(st.none(), st.floats(allow_nan=True, allow_infinity=True))


@settings(max_examples=examples(300), deadline=None)
@given(arguments=_arguments, at=_at, tokens=st.integers(min_value=0))
@example(arguments={"x": math.nan, "y": math.inf, "z": -math.inf}, at=None, tokens=0)
@example(arguments={"$float": "nan"}, at=math.nan, tokens=2**64)
@example(arguments={"$dict": {"$int": "1"}}, at=None, tokens=0)
@example(arguments={"k": [{"$int": 2**80}]}, at=1.0, tokens=10**25)
def test_round_trip_property(arguments: dict[str, Any], at: float | None, tokens: int) -> None:
    _round_trip(_draft(arguments, usage=Usage(tokens, 1), at=at))
    chunk = ModelChunk("request-001", ToolCall("c1", "add", arguments), at=at)
    _round_trip(_finished(chunk))
    _round_trip(ToolCallEvent(sequence=1, step=1, call=ToolCall("c1", "add", _finite(arguments))))


def _finite(value: Any) -> Any:
    """What the loop lets into ordinary events: finite floats, 64-bit ints."""
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return 0.0
    if isinstance(value, int) and not isinstance(value, bool):
        return value if -(2**63) <= value < 2**64 else 0
    return value
