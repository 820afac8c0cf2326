"""Values of any depth: the loop refuses them as it should, and the log of the run
still encodes, writes, reads and replays (DESIGN §7: every log replays).

msgspec encodes and decodes recursively and gives up about a thousand levels down;
the codec then writes and reads the same bytes iteratively (agentloop/_deep.py).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

pytest.importorskip("openai")

import httpx2
import openai

from agentloop import (
    CALLER_PROTOCOL_ERROR,
    MAX_ARGUMENT_DEPTH,
    MODEL_PROTOCOL_ERROR,
    Budget,
    CallerProtocolError,
    Event,
    EventLog,
    ModelChunk,
    ModelRequest,
    ModelResponse,
    PauseRequest,
    PlanDraftEvent,
    ProviderBlock,
    Resume,
    RunFinishedEvent,
    SessionCompleteEvent,
    SessionResumeEvent,
    TextBlock,
    ToolCall,
    ToolResult,
    ToolSpec,
    Usage,
    UserMessage,
    _codec,
    agent_loop,
    decode_event,
    encode_event,
    run,
)
from agentloop._deep import encode, parse
from agentloop._json import json_equal
from agentloop.models.openai import OpenAIChatModel
from replay import LogWriter, read_log, replay, write_log
from tests.helpers import ECHO, check_log, nested, response

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
USER = UserMessage("u1", "hi")


def _too_deep(*args: object, **kwargs: object) -> Any:
    raise RecursionError("as msgspec raises it a thousand levels down")


@pytest.fixture
def msgspec_gives_up(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make msgspec 'fail' on every event, so the iterative path does all the work."""
    monkeypatch.setattr(_codec, "_encode", _too_deep)
    monkeypatch.setattr(_codec, "_decode", _too_deep)
    monkeypatch.setattr(_codec, "_decode_any", _too_deep)


# --------------------------------------------------------------------------- end to end


def _deep_arguments_stream(depth: int) -> bytes:
    """An OpenAI chat stream whose one tool call has ``depth``-deep arguments."""
    arguments = '{"a":' * (depth - 1) + "{}" + "}" * (depth - 1)
    base: dict[str, Any] = {"id": "chatcmpl-deep", "object": "chat.completion.chunk"}
    base.update(created=1, model="gpt-4.1-mini")
    call: dict[str, Any] = {"index": 0, "id": "call_deep", "type": "function"}
    call["function"] = {"name": "echo", "arguments": arguments}
    chunks: list[dict[str, Any]] = [
        {"delta": {"role": "assistant", "content": None}, "finish_reason": None},
        {"delta": {"tool_calls": [call]}, "finish_reason": None},
        {"delta": {}, "finish_reason": "tool_calls"},
    ]
    lines = [
        b"data: " + json.dumps({**base, "choices": [{"index": 0, **c}]}).encode() for c in chunks
    ]
    return b"\n\n".join([*lines, b"data: [DONE]"]) + b"\n\n"


def test_100000_deep_arguments_fail_the_run_and_the_log_still_writes_reads_replays(
    tmp_path: Path,
) -> None:
    depth = 100_000
    body = _deep_arguments_stream(depth)

    def answer(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(200, headers={"content-type": "text/event-stream"}, content=body)

    client = openai.OpenAI(
        api_key="test",
        base_url="https://api.openai.test/v1",
        http_client=httpx2.Client(transport=httpx2.MockTransport(answer)),
    )
    model = OpenAIChatModel(client, "gpt-4.1-mini")
    path = tmp_path / "deep.jsonl"
    log = EventLog()
    ticks = iter(range(1000))
    with LogWriter(path) as writer:
        writer.follow(log)
        result = run([USER], model=model, tools=[ECHO], log=log, clock=lambda: next(ticks))

    # The run fails the way any too-deep arguments fail it: the model's fault.
    assert result.status == "failed" and result.error is not None
    assert result.error.code == MODEL_PROTOCOL_ERROR
    assert result.error.message == (
        f"step 1, chunk 1: tool call 'call_deep' arguments: nesting depth {depth} at "
        f"${'.a' * 24}…({depth - 41:,} levels)…{'.a' * 16} exceeds MAX_ARGUMENT_DEPTH "
        f"({MAX_ARGUMENT_DEPTH})"
    )
    # The chunk was recorded as received, at full depth; the file holds every event.
    events = read_log(path)
    check_log(events)
    assert [encode_event(e) for e in events] == [encode_event(e) for e in log]
    complete = events[-2]
    assert type(complete) is SessionCompleteEvent and type(complete.reply) is ModelChunk
    call = complete.reply.block
    assert type(call) is ToolCall
    value, levels = call.arguments, 1
    while value:
        value, levels = value["a"], levels + 1
    assert levels == depth
    # It replays, and writes back byte for byte.
    assert replay(events).result == result
    copy = tmp_path / "copy.jsonl"
    write_log(copy, events)
    assert copy.read_bytes() == path.read_bytes()


# Depths around where msgspec gives up, and far past it.
DEPTHS = [MAX_ARGUMENT_DEPTH + 1, 900, 1000, 3000, 20_000]


@pytest.mark.parametrize("depth", DEPTHS)
def test_deep_values_wherever_the_loop_records_them(depth: int) -> None:
    deep = nested(depth)
    deep_list: list[Any] = []
    for _ in range(depth - 1):
        deep_list = [deep_list]
    recorded = [
        # In plan.draft, with a value that needs a tag deep down.
        PlanDraftEvent(
            sequence=3,
            step=1,
            reply=ModelResponse(
                "request-001",
                "r1",
                (ToolCall("c1", "echo", {"deep": deep, "list": deep_list, "nan": math.nan}),),
                "tool_call",
                usage=Usage(2**70, 1),
            ),
        ),
        # A tagged time: the typed decode refuses it before it meets the deep value.
        PlanDraftEvent(
            sequence=3,
            at=math.inf,
            step=1,
            reply=ModelResponse(
                "request-001", "r1", (ToolCall("c1", "echo", {"d": deep, "n": math.nan}),), "stop"
            ),
        ),
        # In run.finished (an invalid chunk), and in a resume (a plain event type).
        RunFinishedEvent(
            sequence=9,
            status="failed",
            reply=ModelChunk("request-001", ToolCall("c1", "echo", {"d": deep, "$int": 1})),
        ),
        SessionResumeEvent(sequence=5, reply=Resume({"approved": True, "deep": deep_list})),
    ]
    for event in recorded:
        line = encode_event(event)
        assert encode_event(decode_event(line)) == line
        assert encode_event(decode_event(line.decode())) == line  # (deep ==: recursive)


def test_a_deep_resume_payload_and_pause_payload_are_recorded_and_replay() -> None:
    hooks_payload = {"note": nested(5000)}
    from agentloop import HookRegistry

    hooks = HookRegistry()
    hooks.on("before_tool_call", lambda payload: PauseRequest("review", hooks_payload))
    loop = agent_loop([USER], tools=[ECHO], hooks=hooks, budget=Budget(max_turns=5))
    next(loop)
    effect = loop.send(response("request-001", "r1", ToolCall("c1", "echo", {})))
    assert effect.reason == "review"  # type: ignore[union-attr]
    effect = loop.send(Resume({"approved": True, "why": nested(5000)}))
    effect = loop.send(ToolResult("c1", "ok"))
    try:
        loop.send(response("request-002", "r2", "done"))
    except StopIteration as stop:
        result = stop.value
    events = [decode_event(encode_event(e)) for e in loop.log]
    assert [encode_event(e) for e in events] == [encode_event(e) for e in loop.log]
    assert replay(events, hooks=hooks).result == result


def test_wide_arguments_past_the_fast_check_encode_as_msgspec_does() -> None:
    arguments = {"xs": [{"i": i} for i in range(5000)], "n": 2**64}  # 5,001 containers
    event = PlanDraftEvent(
        sequence=3,
        step=1,
        reply=ModelResponse("request-001", "r1", (ToolCall("c1", "echo", arguments),), "stop"),
    )
    line = encode_event(event)
    assert line == msgspec.json.encode(_codec._tag(msgspec.to_builtins(event)))
    assert decode_event(line) == event


def test_a_deep_misused_reply_is_recorded_in_session_complete() -> None:
    loop = agent_loop([USER], tools=[ECHO])
    next(loop)
    with pytest.raises(CallerProtocolError):
        loop.send(Resume({"deep": nested(5000)}))  # a Resume while a ModelRequest waits
    last = loop.log[-1]
    assert type(last) is RunFinishedEvent and last.error is not None
    assert last.error.code == CALLER_PROTOCOL_ERROR
    assert type(loop.log[-2].reply) is Resume  # type: ignore[union-attr]
    events = [decode_event(encode_event(e)) for e in loop.log]
    assert replay(events).result == loop.result


def test_deep_tool_parameters_are_kept_and_recorded() -> None:
    spec = ToolSpec("deep", parameters={"type": "object", "x": nested(5000)})
    loop = agent_loop([USER], tools=[spec])
    next(loop)
    line = encode_event(loop.log[0])
    assert encode_event(decode_event(line)) == line
    loop.close()


# --------------------------------------------------------------------------- the codec's two paths


def _all_fixture_events() -> list[Event]:
    events: list[Event] = []
    for path in sorted(FIXTURES.glob("**/*.jsonl")):
        events.extend(read_log(path))
    return events


TAGGED = [
    PlanDraftEvent(
        sequence=3,
        at=math.nan,
        step=1,
        reply=ModelResponse(
            "r",
            "x",
            (ToolCall("c", "n", {"a": math.inf, "b": 2**70, "c": {"$int": "1"}, "d": [-(2**64)]}),),
            "tool_call",
            usage=Usage(2**65, 1),
            at=-math.inf,
        ),
    ),
    RunFinishedEvent(
        sequence=9,
        status="failed",
        reply=ModelChunk("r", ToolCall("c", "n", {"x": 10**5000, "y": -(10**4299)}), at=1.0),
        usage=Usage(2**70, 0),
    ),
    RunFinishedEvent(sequence=9, status="failed", reply=Resume({"$dict": {}}, budget=Budget())),
    SessionResumeEvent(sequence=2, reply=Resume({"$float": "nan", "k": ['é"\\\n', -0.0, 1e300]})),
]


@pytest.mark.usefixtures("msgspec_gives_up")
def test_the_iterative_path_writes_and_reads_the_same_bytes() -> None:
    # Every event of every fixture log, and events with tags: with msgspec "giving
    # up" on each of them, encode_event and decode_event still write and read
    # exactly what msgspec writes and reads.
    for event in _all_fixture_events() + TAGGED:
        tagged = type(event) in (PlanDraftEvent, RunFinishedEvent) and _codec._needs_tags(event)
        expected = (
            msgspec.json.encode(_codec._tag(msgspec.to_builtins(event)))
            if tagged
            else msgspec.json.encode(event)
        )
        assert encode_event(event) == expected
        back = decode_event(expected)
        assert encode_event(back) == expected
        if not tagged:
            assert back == msgspec.json.decode(expected, type=Event)


def test_a_cyclic_hand_built_event_is_a_type_error() -> None:
    payload: dict[str, Any] = {}
    payload["self"] = payload
    with pytest.raises(TypeError, match="cannot encode a value that contains itself"):
        encode_event(SessionResumeEvent(sequence=1, reply=Resume(payload)))
    with pytest.raises(TypeError, match="cannot encode a value that contains itself"):
        encode_event(RunFinishedEvent(sequence=1, status="failed", reply=Resume(payload)))


# --------------------------------------------------------------------------- huge ints


@pytest.mark.parametrize(
    ("number", "tag"),
    [
        (10**4299, str(10**4299)),  # 4,300 digits: the most Python converts to decimal
        (-(10**4299), str(-(10**4299))),
        (10**4300, hex(10**4300)),  # 4,301 digits: hexadecimal, exact at any length
        (-(10**6000), hex(-(10**6000))),
    ],
    ids=["4300 digits", "-4300 digits", "4301 digits", "-6001 digits"],
)
def test_huge_ints_are_written_and_read_back(number: int, tag: str) -> None:
    event = RunFinishedEvent(
        sequence=1, status="failed", reply=ModelChunk("r", ToolCall("c", "n", {"n": number}))
    )
    line = encode_event(event)
    assert b'{"$int":"' + tag.encode() + b'"}' in line
    assert decode_event(line) == event


INT_TAGS = {
    "small hex": b'"0x10"',
    "small negative hex": b'"-0x1"',
    "4301 digits": b'"' + b"1" * 4301 + b'"',
    "bare 0x": b'"0x"',
    "plus": b'"+1"',
    "exponent": b'"1e3"',
    "0X": b'"0X10"',
    "a number": b"5",
    "null": b"null",
    "an array": b"[]",
}


@pytest.mark.parametrize("inner", INT_TAGS.values(), ids=INT_TAGS.keys())
def test_an_int_tag_in_any_other_spelling_is_refused(inner: bytes) -> None:
    line = (
        b'{"type":"run.finished","sequence":1,"at":null,"step":0,"status":"failed",'
        b'"final_text":null,"steps":0,"max_steps":0,"error":null,'
        b'"usage":{"input_tokens":{"$int":' + inner + b'},"output_tokens":0},'
        b'"reason":"","reply":null}'
    )
    with pytest.raises(msgspec.ValidationError, match=r"invalid \$int tag"):
        decode_event(line)


# --------------------------------------------------------------------------- the parts


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)


@given(json_values)
@example({"é\u2028\x00": ['"\\/\b\f\n\r\t', -0.0, 1e-7, 1e16, 2**64 - 1]})
@example({"": [[], {}, [[]], {"": {}}]})
def test_encode_writes_what_msgspec_writes(value: Any) -> None:
    assert encode(value) == msgspec.json.encode(value)


def test_encode_writes_deep_values() -> None:  # (msgspec gives up on 3.10-3.12)
    assert encode(nested(5000)) == b'{"a":' * 4999 + b"{}" + b"}" * 4999
    deep: list[Any] = [1.5]
    for _ in range(4999):
        deep = [deep, "x"]
    assert encode(deep) == b"[" * 5000 + b"1.5]" + b',"x"]' * 4999


def test_parse_reads_deep_values() -> None:
    text = b'{"a":' * 4999 + b"{}" + b"}" * 4999  # (msgspec gives up on 3.10-3.12)
    value = parse(text)
    assert encode(value) == text  # (== on the values themselves would recurse)
    assert parse(b"[" * 5000 + b"1.5]" + b',"x"]' * 4999)[1] == "x"


@given(json_values)
def test_parse_reads_what_msgspec_reads(value: Any) -> None:
    data = encode(value)
    assert parse(data) == value
    assert parse(b" \n" + data + b"\t\r ") == value


@pytest.mark.parametrize(
    "text",
    [
        b"",
        b"[",
        b'{"a"',
        b'{"a":',
        b'{"a":1',
        b"[1,]",
        b"[1 2]",
        b'{"a":1,}',
        b'{"a" 1}',
        b"{1:2}",
        b'["a":1]',
        b'{"a",1}',
        b"]",
        b"[}",
        b"[1]]",
        b"[1] x",
        b'[1,"a":2]',
        b"tru",
        b"01",
        b'"\\q"',
        b'"\x01"',
        b"\xff",
        b"[" * 5000,
        b"[" * 5000 + b"]" * 4999 + b"}",
    ],
)
def test_parse_refuses_what_msgspec_refuses(text: bytes) -> None:
    try:
        msgspec.json.decode(text)
    except RecursionError:  # too deep for msgspec to find the mistake
        pass
    except msgspec.DecodeError:
        pass
    else:  # pragma: no cover - only when a case is valid JSON
        raise AssertionError(f"{text!r} is valid JSON")
    with pytest.raises(msgspec.DecodeError):
        parse(text)
    with pytest.raises(msgspec.DecodeError):
        decode_event(text)


def test_parse_reads_text_as_well_as_bytes() -> None:
    assert parse('{"a":[1,"x"]}') == {"a": [1, "x"]}


@pytest.mark.parametrize(
    "text",
    [b"[[1] ]", b'{"a" : [ {} , [ ] ] }', b'\n[ "x" ,\t{"k":\r"v"} ]\n', b'"\\u00e9\\n"'],
)
def test_parse_reads_json_with_whitespace_anywhere(text: bytes) -> None:
    assert parse(text) == msgspec.json.decode(text)


# --------------------------------------------------------------------------- encode: any value


class WithDefaults(msgspec.Struct, omit_defaults=True):
    required: list[int]
    plain: int = 0
    items: tuple[int, ...] = ()
    mapping: dict[str, int] = msgspec.field(default_factory=dict)


@pytest.mark.parametrize(
    "value",
    [
        {"bytes": b"\x00\xff", "list": [b"x"]},
        b"raw",
        {1: "int key", 2.5: "float key"},
        WithDefaults([1]),
        WithDefaults([], plain=1, items=(1,), mapping={"a": 1}),
        [WithDefaults([2], items=())],
    ],
    ids=["bytes inside", "bytes", "non-str keys", "defaults omitted", "set fields", "in a list"],
)
def test_encode_writes_any_value_as_msgspec_does(value: Any) -> None:
    assert encode(value) == msgspec.json.encode(value)


class Mapping(dict[str, Any]):
    pass


class Sequence(list[Any]):
    pass


def test_encode_tagged_treats_builtin_subclasses_as_builtins() -> None:
    value = [Mapping({"$int": 1}), Sequence([math.nan, Mapping(a=2**70)])]
    expected = msgspec.json.encode(_codec._tag(msgspec.to_builtins(value)))
    assert encode(value, tagged=True) == expected


# --------------------------------------------------------------------------- opaque provider data


class _ProviderModel:
    """Streams a ProviderBlock holding ``streamed`` (``data`` by default) and a text,
    then answers with a ProviderBlock holding ``data`` and the same text."""

    def __init__(self, data: dict[str, Any], streamed: dict[str, Any] | None = None) -> None:
        self.data, self.streamed = data, data if streamed is None else streamed

    def stream(self, request: ModelRequest) -> Iterator[ModelChunk | ModelResponse]:
        kind = "redacted_thinking"
        yield ModelChunk(request.id, ProviderBlock("anthropic", kind, self.streamed))
        yield ModelChunk(request.id, TextBlock("done"))
        block = ProviderBlock("anthropic", kind, self.data)
        yield ModelResponse(request.id, "r1", (block, TextBlock("done")), "stop")


def test_deep_provider_data_streamed_and_answered_completes_and_replays(tmp_path: Path) -> None:
    # The stream check compared the streamed ProviderBlock with the final one with
    # Python's ==, which raised RecursionError out of run() at this depth.
    log = EventLog()
    path = tmp_path / "deep.jsonl"
    with LogWriter(path) as writer:
        writer.follow(log)
        result = run([USER], model=_ProviderModel(nested(5000)), tools=[], log=log)
    assert (result.status, result.final_text) == ("completed", "done")
    check_log(list(log))
    assert [encode_event(e) for e in replay(read_log(path)).events] == [
        encode_event(e) for e in log
    ]


def test_deep_provider_data_that_differs_deep_down_is_a_stream_mismatch() -> None:
    final = nested(5000)
    streamed = nested(5000)
    innermost = streamed
    while innermost:
        innermost = innermost["a"]
    innermost["b"] = 1
    result = run([USER], model=_ProviderModel(final, streamed), tools=[], log=EventLog())
    assert result.status == "failed" and result.error is not None
    assert result.error.code == MODEL_PROTOCOL_ERROR
    assert "streamed chunks disagree with the final response at normalized block 0" in (
        result.error.message
    )
    assert "ProviderBlock" in result.error.message


_json = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-3, 3)
    | st.sampled_from([0.0, 1.0, 2.5])
    | st.text("ab", max_size=2),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.lists(inner, max_size=3).map(tuple)
        | st.dictionaries(st.text("ab", max_size=2), inner, max_size=3)
    ),
    max_leaves=12,
)


@given(_json, _json)
@example({"a": 1, "b": [1]}, {"b": [1.0], "a": True})  # order and numbers as == sees them
@example([1], (1,))  # a list never equals a tuple
@example({"a": []}, {"a": {}})
def test_json_equal_answers_as_python_does(a: Any, b: Any) -> None:
    assert json_equal(a, b) is (a == b)
    assert json_equal(a, a) and json_equal(b, b)


def test_json_equal_at_any_depth() -> None:
    assert json_equal(nested(100_000), nested(100_000))
    assert not json_equal(nested(100_000), nested(99_999))
    deep_list: list[Any] = [0]
    other: list[Any] = [0.0]
    for _ in range(100_000):
        deep_list, other = [deep_list], [other]
    assert json_equal(deep_list, other)  # 0 == 0.0, as for ==
