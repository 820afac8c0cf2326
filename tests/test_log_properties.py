"""Properties of the log reader and writer (hypothesis).

- Any byte-level edit of a valid format-2 log is either refused (a ``LogFormatError``:
  a broken chain, a torn or malformed line, ...) or reads as the very same events
  (e.g. ``\\r\\n`` line ends). Nothing else escapes, and nothing else is accepted.
- Random sessions and random hand-built events round-trip through a file, written
  at once or event by event, byte for byte.
"""

from __future__ import annotations

import math
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from unittest import mock

import msgspec
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from agentloop import (
    AssistantMessage,
    Event,
    ModelFailure,
    ModelResponse,
    PlanCommitEvent,
    PlanDraftEvent,
    RunFinishedEvent,
    SessionStartEvent,
    StepEndEvent,
    TextBlock,
    ToolCall,
    ToolCallEvent,
    ToolErrorEvent,
    ToolResult,
    ToolResultEvent,
    ToolResultMessage,
    Usage,
    encode_event,
)
from replay import LogFormatError, LogWriter, diff_events, read_log, write_log
from replay._diff import short
from tests.helpers import examples
from tests.logfiles import FIXTURES
from tests.test_replay import _generated_session

LOGS = {path.stem: path.read_bytes() for path in sorted(FIXTURES.glob("*.jsonl"))}
ORIGINAL = {name: [encode_event(e) for e in read_log(FIXTURES / f"{name}.jsonl")] for name in LOGS}


# One scratch folder for every example (a folder per example costs more than the test).
SCRATCH = Path(tempfile.mkdtemp(prefix="agentloop-log-properties-"))


@pytest.fixture(scope="module", autouse=True)
def _scratch() -> Iterator[None]:
    # Properties of the bytes, not of durability: no fsync per example.
    with mock.patch("os.fsync"):
        yield
    shutil.rmtree(SCRATCH, ignore_errors=True)


def _read(data: bytes) -> list[Event] | None:
    """The events of ``data`` as a file, or ``None`` when the reader refuses it."""
    path = SCRATCH / "edited.jsonl"
    path.write_bytes(data)
    try:
        return read_log(path)
    except LogFormatError:
        return None


@st.composite
def _edited(draw: st.DrawFn) -> tuple[str, bytes]:
    name = draw(st.sampled_from(sorted(LOGS)))
    data = LOGS[name]
    lines = data.splitlines(keepends=True)
    kind = draw(st.sampled_from(["byte", "insert", "delete", "truncate", "lines", "line-ends"]))
    if kind == "byte":
        at = draw(st.integers(0, len(data) - 1))
        value = draw(st.integers(0, 255).filter(lambda b: b != data[at]))
        return name, data[:at] + bytes([value]) + data[at + 1 :]
    if kind == "insert":
        at = draw(st.integers(0, len(data)))
        return name, data[:at] + draw(st.binary(min_size=1, max_size=8)) + data[at:]
    if kind == "delete":
        at = draw(st.integers(0, len(data) - 1))
        size = draw(st.integers(1, 40))
        return name, data[:at] + data[at + size :]
    if kind == "truncate":
        return name, data[: draw(st.integers(0, len(data) - 1))]
    if kind == "lines":  # lines dropped, repeated, moved
        order = draw(st.lists(st.integers(0, len(lines) - 1), min_size=1, max_size=len(lines) + 2))
        return name, b"".join(lines[i] for i in order)
    # line ends: "\n" or "\r\n", either way, as a checkout may leave them
    ends = draw(st.lists(st.booleans(), min_size=len(lines), max_size=len(lines)))
    return name, b"".join(
        line[:-1] + b"\r\n" if crlf else line for line, crlf in zip(lines, ends, strict=True)
    )


@settings(max_examples=examples(400), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_edited())
@example(("tool_calls", LOGS["tool_calls"].replace(b'"42"', b'"43"')))
@example(("tool_calls", LOGS["tool_calls"].replace(b"\n", b"\r\n")))
@example(("plain_answer", LOGS["plain_answer"] + LOGS["plain_answer"]))
def test_an_edited_log_is_refused_or_reads_the_same(case: tuple[str, bytes]) -> None:
    name, data = case
    events = _read(data)
    if events is None:
        return
    encoded = [encode_event(e) for e in events]
    original = ORIGINAL[name]
    # A cut at a line end reads as a crash leaves it: a prefix (the chain cannot
    # tell); anything else that reads is the same log.
    assert encoded == original[: len(encoded)]
    if len(encoded) < len(original):
        assert data.count(b"\n") == len(encoded) + 1


@settings(
    max_examples=examples(40),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(data=st.data())
def test_random_sessions_round_trip_written_at_once_or_as_they_happen(
    data: st.DataObject,
) -> None:
    loop = _generated_session(data)
    events = list(loop.log)
    whole, streamed = SCRATCH / "whole.jsonl", SCRATCH / "streamed.jsonl"
    streamed.unlink(missing_ok=True)
    write_log(whole, events)
    with LogWriter(streamed) as writer:
        for event in events:
            writer.write(event)
    assert streamed.read_bytes() == whole.read_bytes()
    assert [encode_event(e) for e in read_log(whole)] == [encode_event(e) for e in events]


# --------------------------------------------------------------------------- hand-built events

_ids = st.sampled_from(["c1", "c2", "r1", "r2", "message-r1", "tool-result-c1"])
_text = st.sampled_from(["", "a", "2", "ok", "é", "$int", '{"$float":"nan"}'])
_value = st.one_of(
    st.sampled_from([0, 1, 1.0, True, False, None, -0.0, 2**70, "1"]),
    st.floats(allow_nan=False, allow_infinity=False),
    _text,
)
_arguments = st.dictionaries(_text, st.one_of(_value, st.lists(_value, max_size=2)), max_size=2)
_call = st.builds(ToolCall, _ids, st.sampled_from(["add", "echo"]), _arguments)
_blocks = st.lists(st.one_of(st.builds(TextBlock, _text), _call), max_size=3).map(tuple)


@st.composite
def _event(draw: st.DrawFn, previous: list[Any]) -> Any:
    """An event that may (or may not) be what earlier ones make it: the cases a
    line can store once, and the near misses it must write in full."""
    drafts = [e.reply for e in previous if type(e) is PlanDraftEvent]
    calls = [e.call for e in previous if type(e) is ToolCallEvent]
    commits = [e.message for e in previous if type(e) is PlanCommitEvent]
    kind = draw(st.sampled_from(["draft", "commit", "call", "result", "finished", "step"]))
    step = draw(st.integers(0, 2))
    if kind == "draft":
        draft: Any = ModelFailure("request-001", draw(_text))
        if draw(st.integers(0, 3)):
            blocks = draw(_blocks)
            if draw(st.booleans()):  # values JSON cannot hold, as a model may send them
                arguments = {"x": draw(st.sampled_from([math.nan, math.inf, 2**70, 1]))}
                blocks = (*blocks, ToolCall("c9", "add", arguments))
            usage = draw(st.none() | st.builds(Usage, st.integers(0, 3), st.integers(0, 3)))
            draft = ModelResponse("request-001", draw(_ids), blocks, "tool_call", usage)
        return PlanDraftEvent(sequence=0, step=step, reply=draft)
    if kind == "commit":
        if drafts and type(drafts[-1]) is ModelResponse and draw(st.integers(0, 3)):
            last = drafts[-1]
            content = draw(
                st.sampled_from([last.content, tuple(last.content)]) | _blocks  # same, equal
            )
            message_id = draw(st.sampled_from([f"message-{last.id}", f"message-{last.id}", "m"]))
        else:
            content, message_id = draw(_blocks), draw(_ids)
        return PlanCommitEvent(sequence=0, step=step, message=AssistantMessage(message_id, content))
    if kind == "call":
        return ToolCallEvent(sequence=0, step=step, call=draw(_call))
    if kind == "result":
        call = calls[-1] if calls and draw(st.booleans()) else draw(_call)
        is_error, content = draw(st.booleans()), draw(_text)
        fields: dict[str, Any] = {
            "id": f"tool-result-{call.id}",
            "tool_call_id": call.id,
            "tool_name": call.name,
            "content": content,
        }
        reply: Any = ToolResult(call.id, content, is_error)
        # As the loop makes it, or with one thing that a hook (or a hand) changed.
        change = draw(st.sampled_from(["none", "none", "none", *fields, "reply", "error", "kind"]))
        if change in fields:
            fields[change] = "changed"
        elif change == "reply":
            reply = draw(st.none() | st.just(ToolResult("zz", content, is_error)))
        elif change == "error":
            reply = ToolResult(call.id, content, not is_error)
        cls = ToolErrorEvent if is_error != (change == "kind") else ToolResultEvent
        message = ToolResultMessage(**fields, is_error=is_error)
        return cls(sequence=0, step=step, message=message, reply=reply)
    if kind == "finished":
        texts = [text_of(commits[-1])] if commits else []
        final_text = draw(st.sampled_from([None, "x", *texts]))
        return RunFinishedEvent(sequence=0, step=step, status="completed", final_text=final_text)
    return StepEndEvent(sequence=0, step=step)


def text_of(message: AssistantMessage) -> str:
    return "".join(b.text for b in message.content if type(b) is TextBlock)


@st.composite
def _events(draw: st.DrawFn) -> list[Any]:
    events: list[Any] = [SessionStartEvent(sequence=0, max_steps=8)]
    for _ in range(draw(st.integers(0, 12))):
        events.append(draw(_event(events)))
    return [msgspec.structs.replace(e, sequence=i) for i, e in enumerate(events)]


@settings(max_examples=examples(200), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_events())
def test_hand_built_events_round_trip(events: list[Any]) -> None:
    path = SCRATCH / "log.jsonl"
    write_log(path, events)
    back = read_log(path)
    # Written by a writer that appends to a file holding the first events: the same.
    again = SCRATCH / "again.jsonl"
    write_log(again, events[:3])
    with LogWriter(again) as writer:
        for event in events[3:]:
            writer.write(event)
    assert again.read_bytes() == path.read_bytes()
    assert [encode_event(e) for e in back] == [encode_event(e) for e in events]
    for before, after in zip(events, back, strict=True):
        # Not only encoded alike: the same values (NaN is NaN, 1 is not True).
        assert type(before) is type(after)
        if type(before) is not PlanCommitEvent or not _lossy(before):
            assert diff_events(before, after) == []


def _lossy(event: PlanCommitEvent) -> bool:
    """A commit holding a value its own encoding cannot hold (NaN, inf): the loop
    never commits one, and only a draft's reply keeps such values exactly."""
    return "nan" in short(event.message, 10**9) or "inf" in short(event.message, 10**9)
