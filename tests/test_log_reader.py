"""read_log's fast lines: the common line is checked at C speed (decoded, encoded
again and compared) and must accept and refuse exactly what the general path does."""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentloop import (
    AssistantMessage,
    ModelChunk,
    ModelChunkEvent,
    ModelResponse,
    PlanCommitEvent,
    PlanDraftEvent,
    SessionStartEvent,
    StepEndEvent,
    TextBlock,
    ToolCall,
    ToolCallEvent,
    ToolResult,
    ToolResultEvent,
    ToolResultMessage,
    encode_event,
)
from replay import LogFormatError, _log, read_log, write_log
from tests.logfiles import bodies, chain

_TEXT = st.text(st.characters(codec="utf-8"), max_size=40) | st.sampled_from(
    ["", "plain", "привет", "日本語", "\u202e", "\U0001f600", 'a\\b"c\n', "x" * 1500]
)


@st.composite
def _session(draw: st.DrawFn) -> list[Any]:
    events: list[Any] = [SessionStartEvent(sequence=0, max_steps=8)]
    for step in range(1, draw(st.integers(1, 4)) + 1):
        text = draw(_TEXT)
        arguments = {"q": draw(_TEXT), "n": draw(st.sampled_from([1, -1, 2**62, 2**64 - 1]))}
        call = ToolCall(f"call-{step}", "look", arguments)
        response = ModelResponse(f"r{step}", f"m{step}", (TextBlock(text), call), "tool_call")
        result = draw(_TEXT)
        events += [
            ModelChunkEvent(sequence=0, step=step, chunk=ModelChunk(f"r{step}", TextBlock(text))),
            PlanDraftEvent(sequence=0, step=step, reply=response),
            PlanCommitEvent(
                sequence=0,
                step=step,
                message=AssistantMessage(f"message-m{step}", response.content),
            ),
            ToolCallEvent(sequence=0, step=step, call=call),
            ToolResultEvent(
                sequence=0,
                step=step,
                message=ToolResultMessage(f"tool-result-{call.id}", call.id, "look", result),
                reply=ToolResult(call.id, result),
            ),
            StepEndEvent(sequence=0, step=step),
        ]
    return [msgspec.structs.replace(event, sequence=n) for n, event in enumerate(events)]


def _general(path: Path) -> list[Any]:
    """The events of a format-3 file, each line read by the general path alone."""
    data = path.read_bytes().split(b"\n")[:-1]
    format2 = _log._Format2(version=3)
    where = _log._Where(str(path))
    format2.check_link(data[0], len(data[0]), where)
    events = []
    for number, line in enumerate(data[1:], start=2):
        where.number = number
        body_end = format2.check_link(line, len(line), where)
        events.append(format2._read_event(line, len(line), body_end, where))
    return events


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(events=_session(), data=st.data())
def test_fast_and_general_paths_agree_on_random_lines_and_their_edits(
    events: list[Any], data: st.DataObject
) -> None:
    with tempfile.TemporaryDirectory() as folder:
        _agree(events, data, Path(folder) / "log.jsonl")


def _agree(events: list[Any], data: st.DataObject, path: Path) -> None:
    write_log(path, events)
    assert read_log(path) == events == _general(path)
    # Edit one line's body and link it again: only the line's own checks (JSON,
    # event, canonical form) can refuse it, and both paths refuse it alike.
    parts = bodies(path.read_bytes())
    index = data.draw(st.integers(1, len(parts) - 1))
    body = parts[index]
    edit = data.draw(
        st.sampled_from(
            [
                lambda b: b.replace(b":", b": ", 1),
                lambda b: b.replace(b'"step":', b'"step":0', 1),
                lambda b: b.replace(b"1", b"1.0", 1),
                lambda b: b + b',"extra":1',
                lambda b: b.replace(b"\\u202e", "\u202e".encode()),
                lambda b: b.replace("\u202e".encode(), b"\\u202e"),
                lambda b: b.replace(b"18446744073709551615", b"18446744073709551616"),
            ]
        )
    )
    parts[index] = edit(body)
    path.write_bytes(chain(parts))
    try:
        fast: Any = read_log(path)
    except LogFormatError as exc:
        fast = str(exc)
    try:
        general: Any = _general(path)
    except LogFormatError as exc:
        general = str(exc)
    assert fast == general


@pytest.mark.parametrize("value", [2**64, -(2**63) - 1, 10**30])
def test_a_draft_with_an_untagged_big_int_is_refused(tmp_path: Path, value: int) -> None:
    # encode_event tags an int outside int64/uint64; msgspec alone writes digits.
    # A line holding the digits decodes and encodes back alike under msgspec, yet
    # it is not what the writer writes: refused, not read as a plain draft.
    call = ToolCall("c", "f", {"n": value})
    draft = PlanDraftEvent(sequence=1, step=1, reply=ModelResponse("r", "m", (call,), "tool_call"))
    path = tmp_path / "log.jsonl"
    write_log(path, [SessionStartEvent(sequence=0, max_steps=8), draft])
    assert read_log(path)[1] == draft
    parts = bodies(path.read_bytes())
    assert b'{"$int":' in parts[2]
    parts[2] = msgspec.json.encode(msgspec.json.decode(encode_event(draft)))[:-1]
    parts[2] = parts[2].replace(msgspec.json.encode({"$int": str(value)}), str(value).encode())
    path.write_bytes(chain(parts))
    with pytest.raises(LogFormatError, match="line 3: not in canonical form"):
        read_log(path)


def _fresh(text: str) -> int:
    """The size of a ``str`` equal to ``text`` that was never encoded."""
    return sys.getsizeof(text.encode().decode())


@pytest.mark.parametrize("text", ["привет мир " * 10, "日本語" * 1000, "é" + "x" * 3000])
def test_non_ascii_text_is_read_without_a_utf8_copy_inside(tmp_path: Path, text: str) -> None:
    # Encoding a str to check a line leaves a UTF-8 copy inside the object; the
    # events read must not carry one (it would double their text's memory).
    call = ToolCall("c", "f", {})
    events = [
        SessionStartEvent(sequence=0, max_steps=8),
        ModelChunkEvent(sequence=1, step=1, chunk=ModelChunk("r", TextBlock(text))),
        ToolCallEvent(sequence=2, step=1, call=call),
        ToolResultEvent(
            sequence=3,
            step=1,
            message=ToolResultMessage("tool-result-c", "c", "f", text),
            reply=ToolResult("c", text),
        ),
    ]
    path = tmp_path / "log.jsonl"
    write_log(path, events)
    back = read_log(path)
    assert back == events
    chunk, result = back[1].chunk.block.text, back[3].reply.content
    assert back[3].message.content is result  # rebuilt from the reply: shared
    assert sys.getsizeof(chunk) == _fresh(text)
    assert sys.getsizeof(result) == _fresh(text)


def _two_steps(tmp_path: Path) -> Path:
    call = ToolCall("c", "f", {})
    events = [
        SessionStartEvent(sequence=0, max_steps=8),
        ToolCallEvent(sequence=1, step=1, call=call),
        ToolResultEvent(
            sequence=2,
            step=1,
            message=ToolResultMessage("tool-result-c", "c", "f", "ok"),
            reply=ToolResult("c", "ok"),
        ),
    ]
    path = tmp_path / "log.jsonl"
    write_log(path, events)
    return path


def test_a_line_that_leaves_its_message_out_is_checked_for_its_canonical_form(
    tmp_path: Path,
) -> None:
    path = _two_steps(tmp_path)
    parts = bodies(path.read_bytes())
    assert parts[3].endswith(b',"=":"message"')
    parts[3] = parts[3].replace(b'"step":1', b'"step": 1')
    path.write_bytes(chain(parts))
    with pytest.raises(LogFormatError, match="line 4: not in canonical form"):
        read_log(path)


def test_a_line_leaving_its_message_out_that_does_not_decode_is_refused_as_the_general_path_does(
    tmp_path: Path,
) -> None:
    path = _two_steps(tmp_path)
    parts = bodies(path.read_bytes())
    assert parts[3].endswith(b',"=":"message"')
    parts[3] = parts[3].replace(b'"step":1', b'"step":"1"')  # a field of the wrong type
    path.write_bytes(chain(parts))
    with pytest.raises(LogFormatError, match="line 4") as fast:
        read_log(path)
    with pytest.raises(LogFormatError) as general:
        _general(path)
    assert str(fast.value) == str(general.value)


def test_a_second_session_is_refused_whatever_the_line_ends(tmp_path: Path) -> None:
    path = _two_steps(tmp_path)
    parts = bodies(path.read_bytes())
    data = chain(parts + parts[1:]).replace(b"\n", b"\r\n")
    path.write_bytes(data)
    with pytest.raises(LogFormatError, match=r"line 5: a second session\.start"):
        read_log(path)


def test_an_empty_line_in_a_format_1_log_is_refused(tmp_path: Path) -> None:
    lines = (Path(__file__).parent.parent / "fixtures/v1/tool_calls.jsonl").read_bytes()
    path = tmp_path / "v1.jsonl"
    head, _, rest = lines.partition(b"\n")
    path.write_bytes(head + b"\n\n" + rest)
    with pytest.raises(LogFormatError, match="line 2: an empty line"):
        read_log(path)
