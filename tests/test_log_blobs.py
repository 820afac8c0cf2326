"""Log format 3: media bytes stored once per log, as blob lines in the hash chain."""

from __future__ import annotations

import base64
import hashlib
import importlib.util
import json
import random
import shutil
import tempfile
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentloop import (
    AssistantMessage,
    AudioBlock,
    DocumentBlock,
    EventLog,
    ImageBlock,
    MessageAcceptedEvent,
    ModelChunk,
    ModelChunkEvent,
    ModelResponse,
    PlanCommitEvent,
    PlanDraftEvent,
    TextBlock,
    ToolCall,
    ToolErrorEvent,
    ToolResult,
    ToolResultEvent,
    ToolResultMessage,
    UserMessage,
    encode_event,
)
from replay import (
    LogFormatError,
    LogIntegrityError,
    LogWriter,
    TornLogError,
    _log,
    read_log,
    write_log,
)
from tests.helpers import examples
from tests.logfiles import FIXTURES, bodies, chain

MEDIA = FIXTURES / "media" / "image_twice.jsonl"


def _make_logs() -> Any:
    spec = importlib.util.spec_from_file_location("media_make_logs", MEDIA.parent / "make_logs.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


MEDIA_EVENTS = _make_logs().events()
PNG = _make_logs().PNG


def _encoded(events: Any) -> list[bytes]:
    return [encode_event(event) for event in events]


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_the_fixture_reads_as_its_events_and_is_written_byte_for_byte(tmp_path: Path) -> None:
    events = read_log(MEDIA)
    assert events == MEDIA_EVENTS
    assert _encoded(events) == _encoded(MEDIA_EVENTS)
    copy = tmp_path / "copy.jsonl"
    write_log(copy, events)
    assert copy.read_bytes() == MEDIA.read_bytes()
    streamed = tmp_path / "streamed.jsonl"
    with LogWriter(streamed) as writer:
        for event in events:
            writer.write(event)
    assert streamed.read_bytes() == MEDIA.read_bytes()


def test_each_byte_string_is_in_the_file_once_before_its_first_use() -> None:
    data = MEDIA.read_bytes()
    lines = data.splitlines()
    assert json.loads(lines[0])["version"] == 3
    assert data.count(base64.b64encode(PNG)) == 1
    blobs = [json.loads(line) for line in lines if line.startswith(b'{"blob":')]
    assert [(b["media_type"], b["size"]) for b in blobs] == [
        ("image/png", len(PNG)),
        ("audio/wav", 0),
        ("image/gif", 6),
    ]
    for blob in blobs:
        assert blob["blob"] == _sha(base64.b64decode(blob["data"]))
        first_use = next(i for i, line in enumerate(lines) if blob["blob"].encode() in line)
        assert lines[first_use].startswith(b'{"blob":')
    # The committed message is the draft's content, shared: its bytes are the blob's.
    events = read_log(MEDIA)
    draft, commit = (e for e in events if type(e) in (PlanDraftEvent, PlanCommitEvent))
    assert commit.message.content[1].data is draft.reply.content[1].data  # type: ignore[union-attr]


def test_an_image_in_many_messages_is_stored_once(tmp_path: Path) -> None:
    image = ImageBlock("image/png", data=bytes(range(256)) * 400)  # 100 KiB
    start = MEDIA_EVENTS[0]
    events = [start] + [
        MessageAcceptedEvent(
            sequence=n, message=UserMessage(f"u{n}", (TextBlock(f"look {n}"), image))
        )
        for n in range(1, 21)
    ]
    path = tmp_path / "twenty.jsonl"
    write_log(path, events)
    assert path.stat().st_size < len(image.data) * 4 // 3 + 20 * 400  # type: ignore[arg-type]
    assert read_log(path) == events


def _relinked(data: bytes, edit: Any) -> bytes:
    return chain(edit(bodies(data)))


def _blob_index(parts: list[bytes], n: int = 0) -> int:
    return [i for i, part in enumerate(parts) if part.startswith(b'{"blob":')][n]


def _write(tmp_path: Path, data: bytes) -> Path:
    path = tmp_path / "edited.jsonl"
    path.write_bytes(data)
    return path


def _damage_bytes(parts: list[bytes]) -> list[bytes]:
    i = _blob_index(parts)
    blob = json.loads(parts[i] + b"}")
    blob["data"] = base64.b64encode(b"\x00" + base64.b64decode(blob["data"])[1:]).decode()
    parts[i] = msgspec.json.encode(blob)[:-1]
    return parts


def _drop_blob(parts: list[bytes]) -> list[bytes]:
    del parts[_blob_index(parts)]
    return parts


def _move_blob_after_use(parts: list[bytes]) -> list[bytes]:
    i = _blob_index(parts, 2)  # the gif, first used by the plan.draft right after it
    parts[i], parts[i + 1] = parts[i + 1], parts[i]
    return parts


def _duplicate_blob(parts: list[bytes]) -> list[bytes]:
    i = _blob_index(parts)
    parts.insert(i, parts[i])
    return parts


def _edit(old: bytes, new: bytes, n: int = 0) -> Any:
    def edit(parts: list[bytes]) -> list[bytes]:
        i = _blob_index(parts, n)
        assert old in parts[i]
        parts[i] = parts[i].replace(old, new, 1)
        return parts

    return edit


def _inline(parts: list[bytes]) -> list[bytes]:
    i = next(i for i, part in enumerate(parts) if b"message.accepted" in part)
    parts[i] = parts[i].replace(_sha(b"").encode(), b"AAAA")
    return parts


ref = _sha(PNG)
CORRUPTIONS = [
    (_damage_bytes, LogIntegrityError, f"blob '{ref}' is damaged: its bytes hash to "),
    (_drop_blob, LogFormatError, f"refers to blob {ref}, which the log does not hold"),
    (_move_blob_after_use, LogFormatError, "which the log does not hold"),
    (_duplicate_blob, LogFormatError, f"blob {ref} again (a log holds each blob once)"),
    (_edit(b'"size":70', b'"size":71'), LogFormatError, "the blob's size is 71, its data 70 bytes"),
    (_edit(b'"size":70', b'"size": 70'), LogFormatError, "not in canonical form"),
    (_edit(b"ggg==", b"ggh=="), LogFormatError, "not in canonical form"),  # padding bits
    (_edit(b'{"blob":"', b'{"blob":"x'), LogIntegrityError, "blob 'xa9646cb11"),
    (_edit(b'"size":70', b'"size":70,"x":1'), LogFormatError, "not a valid blob line"),
    (_edit(b'"size":70', b'"size":"70"'), LogFormatError, "not a valid blob line"),
    (_inline, LogFormatError, "an audio block holds 3 bytes inline"),
]


@pytest.mark.parametrize(
    ("edit", "error", "message"), CORRUPTIONS, ids=[c[2][:30] for c in CORRUPTIONS]
)
def test_a_damaged_blob_or_reference_is_refused_naming_it(
    tmp_path: Path, edit: Any, error: type[Exception], message: str
) -> None:
    path = _write(tmp_path, _relinked(MEDIA.read_bytes(), edit))
    with pytest.raises(error) as raised:
        read_log(path)
    assert message in str(raised.value)
    assert raised.value.line is not None  # type: ignore[attr-defined]
    # Without the relinking, the chain catches the edit first.
    unlinked = bodies(MEDIA.read_bytes())
    assert edit(unlinked) is not None


def test_a_blob_line_is_in_the_chain(tmp_path: Path) -> None:
    data = MEDIA.read_bytes()
    lines = data.splitlines(keepends=True)
    index = next(i for i, line in enumerate(lines) if line.startswith(b'{"blob":'))
    for edited in (
        lines[:index] + lines[index + 1 :],  # removed
        [*lines[:index], lines[index].replace(b"AAAA", b"AAAB", 1), *lines[index + 1 :]],
    ):
        with pytest.raises(LogIntegrityError, match=f"line {index + 1}: the hash chain"):
            read_log(_write(tmp_path, b"".join(edited)))


def test_a_log_torn_in_a_blob_line_keeps_the_events_before(tmp_path: Path) -> None:
    data = MEDIA.read_bytes()
    cut = data.index(b'{"blob":') + 40
    with pytest.raises(TornLogError) as torn:
        read_log(_write(tmp_path, data[:cut]))
    assert torn.value.events == MEDIA_EVENTS[:1]
    # A blob line complete but for its line end: torn too, the blob not used.
    end = data.index(b"\n", cut)
    with pytest.raises(TornLogError, match="has no final newline"):
        read_log(_write(tmp_path, data[:end]))
    # Cut after the blob lines, before the event: a valid prefix.
    start = data.index(b'{"type":"message.accepted"')
    assert read_log(_write(tmp_path, data[:start])) == MEDIA_EVENTS[:1]


def test_a_writer_appends_to_a_log_with_blobs(tmp_path: Path) -> None:
    path = tmp_path / "log.jsonl"
    write_log(path, MEDIA_EVENTS[:5])
    with LogWriter(path) as writer:
        for event in MEDIA_EVENTS[5:]:
            writer.write(event)  # the gif is new, the png known from the file
    assert path.read_bytes() == MEDIA.read_bytes()


def test_a_format_2_log_is_appended_to_as_format_2(tmp_path: Path) -> None:
    path = tmp_path / "v2.jsonl"
    shutil.copyfile(FIXTURES / "v2" / "plain_answer.jsonl", path)
    v2 = read_log(path)
    extra = MessageAcceptedEvent(
        sequence=len(v2), message=UserMessage("u9", (ImageBlock("image/png", data=PNG),))
    )
    with LogWriter(path) as writer:
        writer.write(extra)
    data = path.read_bytes()
    assert b'"version":2' in data.partition(b"\n")[0]
    assert base64.b64encode(PNG) in data and b'{"blob":' not in data  # inline, as format 2
    assert read_log(path) == [*v2, extra]
    # Following the run again: the file's events are recognised as format 2 wrote them.
    log = EventLog()
    for event in [*v2, extra]:
        log.append(event)
    with LogWriter(path) as writer:
        writer.follow(log)
        assert writer.next_sequence == len(v2) + 1
    # A blob line is no format-2 line.
    parts = bodies(data)
    blob = bodies(MEDIA.read_bytes())[2]
    with pytest.raises(LogFormatError, match="not a valid agentloop event"):
        read_log(_write(tmp_path, chain([*parts, blob])))


def test_an_event_that_does_not_encode_leaves_the_chain_and_blobs_as_they_were(
    tmp_path: Path,
) -> None:
    path = tmp_path / "log.jsonl"
    gif = ImageBlock("image/gif", data=b"GIF89a")
    bad = MessageAcceptedEvent(
        sequence=1,
        message=AssistantMessage("m", (gif, ToolCall("c", "f", {"x": object()}))),
    )
    with LogWriter(path) as writer:
        writer.write(MEDIA_EVENTS[0])
        with pytest.raises(TypeError):
            writer.write(bad)
        good = MessageAcceptedEvent(sequence=1, message=UserMessage("u", (gif,)))
        writer.write(good)
    assert read_log(path) == [MEDIA_EVENTS[0], good]
    assert path.read_bytes().count(b'{"blob":') == 1


def test_media_by_url_and_text_only_lines_hold_no_blob(tmp_path: Path) -> None:
    path = tmp_path / "log.jsonl"
    url = DocumentBlock("application/pdf", url="https://example.com/a.pdf")
    events = [
        MEDIA_EVENTS[0],
        MessageAcceptedEvent(sequence=1, message=UserMessage("u", (TextBlock("a"), url))),
    ]
    write_log(path, events)
    assert b'{"blob":' not in path.read_bytes()
    assert read_log(path) == events


def _holding(part: Any, where: str) -> list[Any]:
    """One event of each kind the writer checks for media without a walk (and
    one it walks), holding ``part`` (text, an image by URL, or bytes) in ``where``."""
    blocks = (TextBlock("a"), part)
    text_or: Any = lambda here: blocks if where == here else "text"  # noqa: E731
    response = ModelResponse("r", "m", blocks, "stop")
    return [
        MessageAcceptedEvent(sequence=0, message=UserMessage("u", blocks)),
        MessageAcceptedEvent(sequence=0, message=AssistantMessage("a", blocks)),
        ModelChunkEvent(sequence=0, chunk=ModelChunk("r", part)),
        PlanDraftEvent(sequence=0, reply=response),
        PlanCommitEvent(sequence=0, message=AssistantMessage("a", blocks)),
        *(
            cls(
                sequence=0,
                message=ToolResultMessage("t", "c", "f", text_or("message")),
                reply=ToolResult("c", text_or("reply")),
            )
            for cls in (ToolResultEvent, ToolErrorEvent)
        ),
        ToolResultEvent(sequence=0, message=ToolResultMessage("t", "c", "f", text_or("message"))),
    ]


@pytest.mark.parametrize("where", ["message", "reply"])
def test_the_writer_finds_media_bytes_wherever_an_event_holds_them(where: str) -> None:
    # The writer answers "no media" for the common events without walking their
    # fields; bytes anywhere still become a blob line, a URL or text never does.
    image = ImageBlock("image/png", data=PNG)
    for part, blob in (
        (TextBlock("b"), False),
        (ImageBlock("image/png", url="https://a"), False),
        (image, True),
    ):
        for event in _holding(part, where):
            holds = blob and (
                not isinstance(event, (ToolResultEvent, ToolErrorEvent))
                or where == "message"
                or event.reply is not None
            )
            line = _line(event)
            assert line.startswith(b'{"blob":') is holds, (event, line[:60])
            assert _line(_log._swap_media(event, lambda block: block)) == line


def _line(event: Any) -> bytes:
    """What a fresh log writes for ``event``: its blob lines, then its line."""
    return b"".join(_log._pieces(_log._Format2().parts(event)))


# --------------------------------------------------------------------------- properties

_MEDIA_TYPES = st.sampled_from(["image/png", "audio/wav", "application/pdf", 'x"<>\u202e'])
_BYTES = st.sampled_from([b"", b"a", b"ab", b"abc", PNG, bytes(range(256))]) | st.binary(
    max_size=50
)


@st.composite
def _media_events(draw: st.DrawFn) -> list[Any]:
    events: list[Any] = [MEDIA_EVENTS[0]]
    for n in range(1, draw(st.integers(1, 6))):
        parts: list[Any] = []
        for _ in range(draw(st.integers(0, 4))):
            cls = draw(st.sampled_from([ImageBlock, AudioBlock, DocumentBlock, TextBlock]))
            if cls is TextBlock:
                parts.append(TextBlock(draw(st.text(max_size=5))))
            else:
                parts.append(cls(draw(_MEDIA_TYPES), data=draw(_BYTES)))
        content: Any = tuple(parts) if parts or draw(st.booleans()) else "plain"
        events.append(MessageAcceptedEvent(sequence=n, message=UserMessage(f"u{n}", content)))
    return events


@settings(max_examples=examples(100))
@given(_media_events(), st.data())
def test_random_logs_with_blobs_round_trip_and_corruptions_are_detected(
    events: list[Any], data: st.DataObject
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "log.jsonl"
        write_log(path, events)
        back = read_log(path)
        assert back == events
        assert _encoded(back) == _encoded(events)
        raw = path.read_bytes()
        distinct = {
            part.data
            for event in events[1:]
            if type(event.message.content) is tuple
            for part in event.message.content
            if type(part) is not TextBlock
        }
        assert raw.count(b'{"blob":') == len(distinct)
        # Flip one byte of a blob line: refused (chain, canonical form or hash).
        starts = [i for i in range(len(raw)) if raw.startswith(b'{"blob":', i)]
        if starts:
            start = data.draw(st.sampled_from(starts))
            end = raw.index(b"\n", start)
            at = data.draw(st.integers(start, end - 1))
            flipped = raw[:at] + bytes([raw[at] ^ data.draw(st.integers(1, 255))]) + raw[at + 1 :]
            path.write_bytes(flipped)
            with pytest.raises(LogFormatError):
                read_log(path)
            # Recomputing the chain over a damaged blob's bytes does not hide it.
            parts = bodies(raw)
            index = parts.index(raw[start : raw.index(b',"#":', start)])
            blob = json.loads(parts[index] + b"}")
            if blob["size"]:
                payload = bytearray(base64.b64decode(blob["data"]))
                payload[0] ^= 1
                blob["data"] = base64.b64encode(bytes(payload)).decode()
                parts[index] = msgspec.json.encode(blob)[:-1]
                path.write_bytes(chain(parts))
                with pytest.raises(LogIntegrityError, match="is damaged"):
                    read_log(path)


def test_a_long_line_reads_from_a_pipe_too(tmp_path: Path) -> None:
    import os
    import threading

    big = ImageBlock("image/png", data=bytes(range(256)) * 8192)  # 2 MiB: several chunks
    events = [
        MEDIA_EVENTS[0],
        MessageAcceptedEvent(sequence=1, message=UserMessage("u", (big,))),
    ]
    source = tmp_path / "log.jsonl"
    write_log(source, events)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)

    def feed() -> None:
        with open(fifo, "wb") as pipe:
            pipe.write(source.read_bytes())

    thread = threading.Thread(target=feed)
    thread.start()
    try:
        assert read_log(fifo) == events
    finally:
        thread.join()


def test_a_boundary_writes_big_lines_one_by_one_and_keeps_what_failed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from agentloop import StepEndEvent

    big = ImageBlock("image/png", data=bytes(range(256)) * 8192)
    path = tmp_path / "log.jsonl"
    writer = LogWriter(path)
    writer.write(MEDIA_EVENTS[0])
    writer.write(MessageAcceptedEvent(sequence=1, message=UserMessage("u", (big,))))
    writer.write(StepEndEvent(sequence=2, step=1))
    written: list[int] = []
    real = writer._write_line

    def second_fails(lines: bytes) -> None:
        if written:
            raise OSError(28, "No space left on device")
        written.append(len(lines))
        real(lines)

    monkeypatch.setattr(writer, "_write_line", second_fails)
    with pytest.raises(OSError, match="No space"):
        writer.flush()
    monkeypatch.setattr(writer, "_write_line", real)
    writer.close()
    assert [e.sequence for e in read_log(path)] == [0, 1, 2]


def test_flush_and_sync_of_a_closed_writer_do_nothing(tmp_path: Path) -> None:
    path = tmp_path / "log.jsonl"
    writer = LogWriter(path)
    writer.write(MEDIA_EVENTS[0])
    writer.close()
    data = path.read_bytes()
    writer.flush()
    writer.sync()
    assert path.read_bytes() == data and read_log(path) == MEDIA_EVENTS[:1]


# A blob line longer than the reader's chunk (1 MiB) is read a piece at a time.
BIG = ImageBlock("image/png", data=random.Random(7).randbytes(3_000_001))  # 3k + 1 bytes
BIG_EVENTS = [
    MEDIA_EVENTS[0],
    MessageAcceptedEvent(sequence=1, message=UserMessage("u1", (TextBlock("look"), BIG))),
    MessageAcceptedEvent(sequence=2, message=UserMessage("u2", (BIG,))),
]


def _big_log(tmp_path: Path) -> bytes:
    path = tmp_path / "big.jsonl"
    write_log(path, BIG_EVENTS)
    return path.read_bytes()


def test_a_big_blob_line_is_read_a_piece_at_a_time(tmp_path: Path) -> None:
    import tracemalloc

    data = _big_log(tmp_path)
    assert len(data.splitlines()[2]) > _log._CHUNK
    path = _write(tmp_path, data)
    read_log(path)  # (the decoders, made on first use)
    tracemalloc.start()
    try:
        events = read_log(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert events == BIG_EVENTS
    first, second = events[1].message.content[1], events[2].message.content[0]  # type: ignore[union-attr]
    assert first.data is second.data  # type: ignore[union-attr]
    # The bytes once, the line's first chunk and pieces: not the line (4/3 of the
    # bytes) and the bytes besides.
    assert peak < len(BIG.data) + 2 * _log._CHUNK  # type: ignore[arg-type]
    # CRLF line ends (git's autocrlf) read the same.
    assert read_log(_write(tmp_path, data.replace(b"\n", b"\r\n"))) == BIG_EVENTS


def _big_edit(old: bytes, new: bytes, at: int = 0) -> Any:
    def edit(parts: list[bytes]) -> list[bytes]:
        i = _blob_index(parts)
        start = parts[i].index(old, at)
        parts[i] = parts[i][:start] + new + parts[i][start + len(old) :]
        return parts

    return edit


def _big_damage(parts: list[bytes]) -> list[bytes]:
    i = _blob_index(parts)
    middle = len(parts[i]) // 2
    flipped = b"B" if parts[i][middle : middle + 1] == b"A" else b"A"
    parts[i] = parts[i][:middle] + flipped + parts[i][middle + 1 :]
    return parts


big_ref = _sha(BIG.data)  # type: ignore[arg-type]
BIG_CORRUPTIONS = [
    (_big_damage, LogIntegrityError, f"blob '{big_ref}' is damaged: its bytes hash to "),
    (_big_edit(b"A", b"!", 1_000_000), LogFormatError, "not a valid blob line"),
    (_big_edit(b"A", b"=", 1_000_000), LogFormatError, "not a valid blob line"),
    (
        _big_edit(b'"size":3000001', b'"size":3000002'),
        LogFormatError,
        "the blob's size is 3000002, its data 3000001 bytes",
    ),
    (
        _big_edit(b'"size":3000001', b'"size":3000009'),
        LogFormatError,
        "the blob's size is 3000009, its data 3000001 bytes",
    ),
    (_big_edit(b'"size":', b'"size": '), LogFormatError, "not in canonical form"),
    (_duplicate_blob, LogFormatError, f"blob {big_ref} again (a log holds each blob once)"),
    (
        _big_edit(b'"image/png"', b'"image/' + b"p" * (_log._CHUNK + 9) + b'"'),
        None,
        "",
    ),
]


@pytest.mark.parametrize(
    ("edit", "error", "message"), BIG_CORRUPTIONS, ids=[c[2][:30] for c in BIG_CORRUPTIONS]
)
def test_a_damaged_big_blob_line_is_refused_naming_it(
    tmp_path: Path, edit: Any, error: type[Exception] | None, message: str
) -> None:
    path = _write(tmp_path, _relinked(_big_log(tmp_path), edit))
    if error is None:  # (a valid line the pieces do not read: read whole)
        assert read_log(path) == BIG_EVENTS
        return
    with pytest.raises(error) as raised:
        read_log(path)
    assert message in str(raised.value)
    assert raised.value.line == (4 if edit is _duplicate_blob else 3)  # type: ignore[attr-defined]


def test_a_big_blob_line_is_in_the_chain_and_may_be_torn(tmp_path: Path) -> None:
    data = _big_log(tmp_path)
    start = data.index(b'{"blob":')
    middle = start + 1_000_000
    flipped = data[:middle] + (b"B" if data[middle] == 0x41 else b"A") + data[middle + 1 :]
    with pytest.raises(LogIntegrityError, match="line 3: the hash chain is broken"):
        read_log(_write(tmp_path, flipped))
    with pytest.raises(TornLogError, match="line 3 is torn") as torn:
        read_log(_write(tmp_path, data[:middle]))
    assert torn.value.events == BIG_EVENTS[:1]
    end = data.index(b"\n", middle)
    with pytest.raises(TornLogError, match="line 3 has no final newline"):
        read_log(_write(tmp_path, data[:end]))
    with pytest.raises(LogFormatError, match="longer than 3,600,000 bytes"):
        read_log(_write(tmp_path, data), max_line_bytes=3_600_000)
