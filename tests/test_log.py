"""Log files: header, round trips, LogWriter, torn lines, wrong headers and versions."""

from __future__ import annotations

import json
import os
import re
import stat
from pathlib import Path
from typing import Any

import msgspec
import pytest

from agentloop import (
    ModelResponse,
    StepEndEvent,
    TextBlock,
    ToolResult,
    ToolSpec,
    Usage,
    UserMessage,
    __version__,
    agent_loop,
    encode_event,
)
from replay import (
    LOG_FORMAT,
    LOG_FORMAT_VERSION,
    LogError,
    LogFormatError,
    LogVersionError,
    LogWriter,
    TornLogError,
    read_log,
    replay,
    write_log,
)

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
FIXTURE_PATHS = sorted(FIXTURES.glob("**/*.jsonl"))
HEADER = {"format": LOG_FORMAT, "version": LOG_FORMAT_VERSION, "library": __version__}
TOOL_CALLS_EVENTS = read_log(FIXTURES / "tool_calls.jsonl")


def _ids(path: Path) -> str:
    return str(path.relative_to(FIXTURES))


def test_fixtures_exist() -> None:
    names = {p.stem for p in FIXTURE_PATHS}
    for required in (
        "plain_answer",
        "tool_calls",
        "tool_error",
        "budget_pause_resume",
        "approval",
        "cancel_mid_tool",
        "protocol_failure",
    ):
        assert required in names
    assert any(p.parent.name == "v1" for p in FIXTURE_PATHS), "frozen v1 fixtures are missing"


# --------------------------------------------------------------------------- round trips


@pytest.mark.parametrize("path", FIXTURE_PATHS, ids=_ids)
def test_read_write_round_trip_is_byte_exact(path: Path, tmp_path: Path) -> None:
    events = read_log(path)
    lines = path.read_bytes().splitlines()
    assert json.loads(lines[0])["format"] == LOG_FORMAT
    assert [encode_event(e) for e in events] == lines[1:]
    copy = tmp_path / "copy.jsonl"
    write_log(copy, events)
    assert read_log(copy) == events or [encode_event(e) for e in read_log(copy)] == lines[1:]
    assert copy.read_bytes().splitlines()[1:] == lines[1:]
    assert json.loads(copy.read_bytes().splitlines()[0]) == HEADER


def test_write_log_replaces_atomically(tmp_path: Path) -> None:
    path = tmp_path / "log.jsonl"
    path.write_text("old contents\n")
    write_log(path, [StepEndEvent(sequence=0, step=1)])
    assert read_log(path) == [StepEndEvent(sequence=0, step=1)]
    assert [p.name for p in tmp_path.iterdir()] == ["log.jsonl"]


def test_write_log_accepts_str_paths_and_empty_logs(tmp_path: Path) -> None:
    path = str(tmp_path / "empty.jsonl")
    write_log(path, [])
    assert read_log(path) == []


# --------------------------------------------------------------------------- LogWriter


def _run(writer: LogWriter) -> None:
    loop = agent_loop([UserMessage("u1", "hi")], tools=[ToolSpec("add")], started_at=5.0)
    unsubscribe = loop.log.subscribe(writer.write)
    try:
        request = next(loop)
        with pytest.raises(StopIteration):
            loop.send(ModelResponse(request.id, "r1", (TextBlock("hello"),), "stop", at=6.0))
    finally:
        unsubscribe()
    return None


def test_log_writer_as_subscriber_and_context_manager(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    with LogWriter(path) as writer:
        assert json.loads(path.read_bytes()) == HEADER  # the header is there at once
        _run(writer)
        assert writer.next_sequence == len(read_log(path))  # flushed per event
    assert writer.closed
    events = read_log(path)
    assert events[-1].type == "run.finished"
    assert replay(events).result is not None


def test_log_writer_flushes_every_event(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    writer = LogWriter(path, fsync=True)
    try:
        for sequence in range(3):
            writer.write(StepEndEvent(sequence=sequence, step=1))
            assert len(read_log(path)) == sequence + 1
    finally:
        writer.close()
    writer.close()  # idempotent
    assert "closed" in repr(writer)


def test_log_writer_appends_to_an_existing_log(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    write_log(path, [StepEndEvent(sequence=0, step=1)])
    with LogWriter(path) as writer:
        assert writer.next_sequence == 1
        writer.write(StepEndEvent(sequence=1, step=1))
    assert [e.sequence for e in read_log(path)] == [0, 1]
    assert path.read_bytes().count(b'"format"') == 1


def test_log_writer_refuses_out_of_order_events(tmp_path: Path) -> None:
    with LogWriter(tmp_path / "run.jsonl") as writer:
        writer.write(StepEndEvent(sequence=0, step=1))
        with pytest.raises(ValueError, match="continues at 1"):
            writer.write(StepEndEvent(sequence=0, step=1))
        with pytest.raises(ValueError, match="continues at 1"):
            writer.write(StepEndEvent(sequence=2, step=1))


def test_log_writer_after_close_raises(tmp_path: Path) -> None:
    writer = LogWriter(tmp_path / "run.jsonl")
    writer.close()
    with pytest.raises(ValueError, match="closed"):
        writer.write(StepEndEvent(sequence=0, step=1))


def test_log_writer_refuses_a_torn_or_foreign_file(tmp_path: Path) -> None:
    torn = tmp_path / "torn.jsonl"
    write_log(torn, [StepEndEvent(sequence=0, step=1)])
    with torn.open("ab") as file:
        file.write(b'{"type":"step.e')
    with pytest.raises(TornLogError):
        LogWriter(torn)
    foreign = tmp_path / "notes.txt"
    foreign.write_text("shopping list\n")
    with pytest.raises(LogFormatError):
        LogWriter(foreign)
    assert foreign.read_text() == "shopping list\n"


def test_log_writer_follow_writes_the_backlog_then_subscribes(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    loop = agent_loop([UserMessage("u1", "hi")], tools=[], started_at=1.0)
    request = next(loop)
    with LogWriter(path) as writer:
        unsubscribe = writer.follow(loop.log)
        assert len(read_log(path)) == len(loop.log)
        with pytest.raises(StopIteration):
            loop.send(ModelResponse(request.id, "r1", (TextBlock("ok"),), "stop"))
        unsubscribe()
    assert [encode_event(e) for e in read_log(path)] == [encode_event(e) for e in loop.log]


# --------------------------------------------------------------------------- torn lines


def _fixture_bytes(name: str = "tool_calls") -> bytes:
    return (FIXTURES / f"{name}.jsonl").read_bytes()


def test_every_cut_of_the_last_line_is_reported_as_torn(tmp_path: Path) -> None:
    data = _fixture_bytes()
    lines = data.splitlines(keepends=True)
    intact = read_log(FIXTURES / "tool_calls.jsonl")[:-1]
    last = lines[-1]
    path = tmp_path / "torn.jsonl"
    for cut in range(1, len(last)):  # every partial write, including a missing "\n"
        path.write_bytes(b"".join(lines[:-1]) + last[:cut])
        with pytest.raises(TornLogError) as info:
            read_log(path)
        error = info.value
        assert error.events == intact
        assert error.line == len(lines)
        assert "torn" in str(error) or "no final newline" in str(error)
        assert str(path) in str(error)


def test_torn_log_recovery_is_explicit(tmp_path: Path) -> None:
    path = tmp_path / "torn.jsonl"
    path.write_bytes(_fixture_bytes()[:-40])
    with pytest.raises(TornLogError) as info:
        read_log(path)
    write_log(path, info.value.events)
    assert read_log(path) == info.value.events


def test_garbage_after_a_crash_is_torn_not_data(tmp_path: Path) -> None:
    path = tmp_path / "torn.jsonl"
    path.write_bytes(_fixture_bytes() + b"\x00\x00\x00")
    with pytest.raises(TornLogError):
        read_log(path)


# --------------------------------------------------------------------------- bad files


def _header(**fields: object) -> bytes:
    return json.dumps({**HEADER, **fields}).encode() + b"\n"


BODY = b"".join(_fixture_bytes("plain_answer").splitlines(keepends=True)[1:])


@pytest.mark.parametrize(
    ("data", "error", "match"),
    [
        # no header at all
        (b"", LogFormatError, "empty file"),
        (BODY, LogFormatError, "not an agentloop log"),
        (b"hello world\n", LogFormatError, "not an agentloop log"),
        (b'{"format":"agentloop-log"', LogFormatError, "header line is incomplete"),
        (b"[1, 2, 3]\n", LogFormatError, "not an agentloop log"),
        # another format
        (_header(format="vcr-cassette") + BODY, LogFormatError, "not an agentloop log"),
        # versions
        (_header(version=LOG_FORMAT_VERSION + 1) + BODY, LogVersionError, "newer"),
        (_header(version=99, library="9.9.9") + BODY, LogVersionError, "agentloop 9.9.9"),
        (_header(version=0) + BODY, LogVersionError, "invalid log format version"),
        (_header(version="1") + BODY, LogVersionError, "invalid log format version"),
        # bad lines in the middle
        (_header() + b"not json\n" + BODY, LogFormatError, "line 2: not a valid"),
        (_header() + BODY + b"\n", LogFormatError, "line 13: an empty line"),
        (_header() + b'{"type":"no.such","sequence":0}\n', LogFormatError, "line 2"),
        (_header() + b'{"type":"step.end"}\n', LogFormatError, "line 2"),
        (_header() + b"\xff\xfe\n", LogFormatError, "line 2"),
    ],
)
def test_bad_files_fail_closed(
    tmp_path: Path, data: bytes, error: type[LogError], match: str
) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_bytes(data)
    with pytest.raises(error, match=match) as info:
        read_log(path)
    assert info.type is error
    assert isinstance(info.value, LogError)
    assert "\n" not in str(info.value)


def test_future_version_error_carries_the_version(tmp_path: Path) -> None:
    path = tmp_path / "future.jsonl"
    path.write_bytes(_header(version=7) + BODY)
    with pytest.raises(LogVersionError) as info:
        read_log(path)
    assert info.value.version == 7
    assert info.value.line == 1


def test_missing_file_is_an_os_error(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        read_log(tmp_path / "nope.jsonl")


def test_tool_result_values_survive(tmp_path: Path) -> None:
    # Sanity: a reply's exact floats and strings come back (no float formatting loss).
    path = tmp_path / "r.jsonl"
    event = read_log(FIXTURES / "tool_calls.jsonl")[11]
    assert isinstance(getattr(event, "reply", None), ToolResult)
    write_log(path, [event])
    assert read_log(path) == [event]


# --------------------------------------------------------------------------- canonical lines


def _with_line(number: int, transform: Any, name: str = "plain_answer") -> bytes:
    """The fixture with its line ``number`` (1-based) passed through ``transform``."""
    lines = _fixture_bytes(name).split(b"\n")
    lines[number - 1] = transform(lines[number - 1])
    return b"\n".join(lines)


STEP_START = b'{"type":"step.start","sequence":2,"at":1000.0,"step":1,"request_id":"request-001"}'


@pytest.mark.parametrize(
    ("line", "column"),
    [
        # an unknown field (msgspec ignores it when decoding)
        (STEP_START[:-1] + b',"injected":"rm -rf /"}', 82),
        # a duplicate key (the last one wins when decoding)
        (STEP_START.replace(b'"sequence"', b'"request_id":"EVIL","sequence"'), 23),
        # whitespace, before, inside or after
        (STEP_START + b" ", 83),
        (b" " + STEP_START, 1),
        (STEP_START.replace(b'"step":1', b'"step": 1'), 54),
        # the same values, spelled otherwise
        (STEP_START.replace(b"1000.0", b"1000.00"), 46),
        (STEP_START.replace(b"1000.0", b"1e3"), 41),
        (STEP_START.replace(b"request-001", b"\\u0072equest-001"), 70),
        # the same fields, in another order
        (
            b'{"type":"step.start","at":1000.0,"sequence":2,"step":1,"request_id":"request-001"}',
            23,
        ),
    ],
    ids=[
        "unknown-field",
        "duplicate-key",
        "trailing-space",
        "leading-space",
        "inner-space",
        "float-spelling",
        "exponent",
        "escaped-char",
        "field-order",
    ],
)
def test_lines_not_in_canonical_form_are_refused(tmp_path: Path, line: bytes, column: int) -> None:
    assert _fixture_bytes("plain_answer").split(b"\n")[3] == STEP_START
    path = tmp_path / "edited.jsonl"
    path.write_bytes(_with_line(4, lambda _: line))
    with pytest.raises(LogFormatError) as info:
        read_log(path)
    error = info.value
    assert type(error) is LogFormatError
    assert (error.path, error.line) == (str(path), 4)
    message = str(error)
    assert message.startswith(f"{path}: line 4: not in canonical form (at column {column}: ")
    assert "where encode_event writes" in message and "\n" not in message


def test_the_canonical_difference_is_shown_around_where_it_is(tmp_path: Path) -> None:
    path = tmp_path / "edited.jsonl"
    path.write_bytes(_with_line(4, lambda line: line[:-1] + b',"x":1}'))
    with pytest.raises(
        LogFormatError,
        match=re.escape(
            """(at column 82: '…st_id":"request-001","x":1}' where encode_event writes """
            """'…st_id":"request-001"}'; """
        ),
    ):
        read_log(path)
    path.write_bytes(_with_line(4, lambda line: b" " + line))
    with pytest.raises(
        LogFormatError,
        match=re.escape(
            """(at column 1: ' {"type":"step.start…' where encode_event writes """
            """'{"type":"step.start"…'; """
        ),
    ):
        read_log(path)


def test_an_edited_line_holding_tagged_values_is_still_checked(tmp_path: Path) -> None:
    # non_finite_arguments holds {"$float": ...} tags: msgspec's own encoding of
    # the events differs from the file, so every line is checked by encode_event.
    data = _fixture_bytes("non_finite_arguments")
    assert b'{"$float"' in data
    path = tmp_path / "edited.jsonl"
    path.write_bytes(data.replace(b'{"$float":"nan"}', b'{"$float": "nan"}', 1))
    with pytest.raises(LogFormatError, match="not in canonical form"):
        read_log(path)


def test_a_huge_integer_written_untagged_is_not_canonical(tmp_path: Path) -> None:
    # A plan.draft's arguments may hold an integer outside int64/uint64; the log
    # writes it tagged, so the bare number is another spelling of the same event.
    path = tmp_path / "big.jsonl"
    big = b'"arguments":{"a":2' + b"0" * 20 + b","
    path.write_bytes(
        _with_line(8, lambda line: line.replace(b'"arguments":{"a":20,', big), "tool_calls")
    )
    with pytest.raises(LogFormatError, match="line 8: not in canonical form") as info:
        read_log(path)
    assert '{"$int":"2' in str(info.value)
    # Tagged, as the log writes it, it reads (and is the value it was).
    events = read_log(FIXTURES / "tool_calls.jsonl")
    draft: Any = events[6]
    assert draft.type == "plan.draft"
    call: Any = draft.reply.content[1]
    huge = msgspec.structs.replace(call, arguments={**call.arguments, "a": 2 * 10**20})
    content = (draft.reply.content[0], huge, *draft.reply.content[2:])
    events[6] = msgspec.structs.replace(
        draft, reply=msgspec.structs.replace(draft.reply, content=content)
    )
    write_log(path, events)
    assert read_log(path)[6].reply.content[1].arguments["a"] == 2 * 10**20


@pytest.mark.parametrize(
    "text", ["It costs $5.", "id 12345678901234567890", "$float", "$ 1234567890123456789"]
)
def test_dollars_and_long_digit_runs_in_canonical_logs_read(tmp_path: Path, text: str) -> None:
    # What makes read_log check the events that may hold tags one by one.
    loop = agent_loop([UserMessage("u1", text)], tools=[], started_at=1.0)
    request = next(loop)
    with pytest.raises(StopIteration):
        loop.send(ModelResponse(request.id, "r1", (TextBlock(text),), "stop", Usage(1, 2)))
    path = tmp_path / "dollars.jsonl"
    write_log(path, loop.log)
    assert read_log(path) == list(loop.log)


def test_crlf_line_ends_are_tolerated(tmp_path: Path) -> None:
    # As JSON Lines allows: e.g. a log committed to git and checked out with autocrlf.
    path = tmp_path / "crlf.jsonl"
    for name in ("tool_calls", "non_finite_arguments"):
        data = _fixture_bytes(name)
        path.write_bytes(data.replace(b"\n", b"\r\n"))
        assert read_log(path) == read_log(FIXTURES / f"{name}.jsonl")
    # Mixed, as after LogWriter appended to such a file.
    path.write_bytes(data.replace(b"\n", b"\r\n", 3))
    assert read_log(path) == read_log(FIXTURES / "non_finite_arguments.jsonl")


@pytest.mark.parametrize(
    ("data", "error", "match"),
    [
        # a "\r" that is not part of a line end
        (
            _with_line(3, lambda line: line + b"\r\r", "tool_calls"),
            LogFormatError,
            "line 3: not in",
        ),
        (_with_line(3, lambda line: line + b" \r", "tool_calls"), LogFormatError, "line 3: not in"),
        # a last line whose "\n" is missing is torn, "\r" or not
        (_fixture_bytes()[:-1] + b"\r", TornLogError, "line 23 has no final newline"),
        (_fixture_bytes()[:-1] + b"\r\n\r", TornLogError, "line 24 is torn"),
    ],
)
def test_other_carriage_returns_are_refused(
    tmp_path: Path, data: bytes, error: type[LogError], match: str
) -> None:
    path = tmp_path / "cr.jsonl"
    path.write_bytes(data)
    with pytest.raises(error, match=match) as info:
        read_log(path)
    assert type(info.value) is error


@pytest.mark.parametrize(("where", "number"), [(2, 2), (5, 5), (12, 12)])
def test_empty_lines_are_refused_by_number(tmp_path: Path, where: int, number: int) -> None:
    lines = _fixture_bytes("plain_answer").split(b"\n")  # 12 lines, then ""
    lines.insert(where - 1, b"")
    path = tmp_path / "blank.jsonl"
    path.write_bytes(b"\n".join(lines))
    with pytest.raises(LogFormatError) as info:
        read_log(path)
    assert (
        str(info.value)
        == f"{path}: line {number}: an empty line (a log has none; was the file edited?)"
    )
    assert info.value.line == number


# --------------------------------------------------------------------------- deep nesting


def test_deeply_nested_json_is_read_at_any_depth(tmp_path: Path) -> None:
    # Values too deep for msgspec's recursive decoder are read all the same (a log
    # holds what the loop recorded, however deep): here the edit is only found
    # by replay, as any other edit of a value.
    deep = b"[" * 3000 + b"]" * 3000
    path = tmp_path / "deep.jsonl"
    path.write_bytes(
        _with_line(
            8,
            lambda line: line.replace(b'"arguments":{"a":20', b'"arguments":{"a":' + deep),
            "tool_calls",
        )
    )
    events = read_log(path)
    value = events[6].reply.content[1].arguments["a"]  # type: ignore[union-attr]
    depth = 1
    while value:
        value, depth = value[0], depth + 1
    assert depth == 3000
    # In the header: not an agentloop log.
    path.write_bytes(deep + b"\n" + BODY)
    with pytest.raises(LogFormatError, match="not an agentloop log"):
        read_log(path)
    # As a torn last line: torn, like any other.
    path.write_bytes(_fixture_bytes() + b'{"type":"step.end","x":' + deep)
    with pytest.raises(TornLogError, match="line 24 is torn"):
        read_log(path)


# --------------------------------------------------------------------------- file modes, fsync


@pytest.fixture
def umask() -> Any:
    def set_umask(mask: int) -> None:
        os.umask(mask)

    old = os.umask(0o022)
    try:
        yield set_umask
    finally:
        os.umask(old)


@pytest.mark.skipif(os.name != "posix", reason="POSIX permission bits")
@pytest.mark.parametrize("mask", [0o022, 0o077, 0o002])
def test_write_log_gives_a_new_file_the_umask_mode(tmp_path: Path, umask: Any, mask: int) -> None:
    umask(mask)
    path = tmp_path / "new.jsonl"
    write_log(path, TOOL_CALLS_EVENTS)
    assert stat.S_IMODE(path.stat().st_mode) == 0o666 & ~mask


@pytest.mark.skipif(os.name != "posix", reason="POSIX permission bits")
@pytest.mark.parametrize("mode", [0o644, 0o640, 0o600, 0o444])
def test_write_log_keeps_the_mode_of_the_file_it_replaces(
    tmp_path: Path, umask: Any, mode: int
) -> None:
    umask(0o077)
    path = tmp_path / "old.jsonl"
    path.write_text("old\n")
    path.chmod(mode)
    write_log(path, TOOL_CALLS_EVENTS)
    assert stat.S_IMODE(path.stat().st_mode) == mode
    assert read_log(path) == TOOL_CALLS_EVENTS


def _record_fsyncs(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    synced: list[str] = []
    real = os.fsync

    def fsync(fd: int) -> None:
        synced.append("dir" if stat.S_ISDIR(os.fstat(fd).st_mode) else "file")
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    return synced


@pytest.mark.skipif(os.name != "posix", reason="directories are fsynced on POSIX")
def test_write_log_fsyncs_the_file_then_the_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    synced = _record_fsyncs(monkeypatch)
    write_log(tmp_path / "run.jsonl", TOOL_CALLS_EVENTS)
    assert synced == ["file", "dir"]


@pytest.mark.skipif(os.name != "posix", reason="directories are fsynced on POSIX")
def test_log_writer_with_fsync_fsyncs_the_directory_of_a_file_it_creates(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    synced = _record_fsyncs(monkeypatch)
    path = tmp_path / "run.jsonl"
    with LogWriter(path, fsync=True) as writer:
        writer.write(StepEndEvent(sequence=0, step=1))
    assert synced == ["file", "dir", "file"]  # the header, the new name, the event
    synced.clear()
    with LogWriter(path, fsync=True) as writer:  # an existing file: its name is durable
        writer.write(StepEndEvent(sequence=1, step=1))
    assert synced == ["file"]
    synced.clear()
    with LogWriter(tmp_path / "other.jsonl") as writer:  # no fsync asked: none at all
        writer.write(StepEndEvent(sequence=0, step=1))
    assert synced == []


def test_directory_fsync_is_best_effort(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from replay import _log

    # A directory that cannot be opened (here: gone), or not synced: no error.
    _log._fsync_directory(str(tmp_path / "missing"))
    closed: list[int] = []
    real_close = os.close

    def failing_fsync(fd: int) -> None:
        raise OSError(22, "Invalid argument")

    def close(fd: int) -> None:
        closed.append(fd)
        real_close(fd)

    monkeypatch.setattr(os, "fsync", failing_fsync)
    monkeypatch.setattr(os, "close", close)
    _log._fsync_directory(str(tmp_path))
    assert len(closed) == 1
    # Not on POSIX (Windows cannot open a directory): not tried.
    monkeypatch.setattr(_log, "_POSIX", False)
    monkeypatch.setattr(os, "open", lambda *args: pytest.fail("opened"))
    _log._fsync_directory(str(tmp_path))


# --------------------------------------------------------------------------- follow and close


def test_close_unsubscribes_what_follow_subscribed(tmp_path: Path) -> None:
    # The docstring's pattern: the loop outlives the with block.
    path = tmp_path / "run.jsonl"
    loop = agent_loop([UserMessage("u1", "hi")], tools=[], started_at=1.0)
    with LogWriter(path) as writer:
        writer.follow(loop.log)
        request = next(loop)
    written = len(read_log(path))
    assert written == len(loop.log) == 3
    with pytest.raises(StopIteration) as stop:  # no "LogWriter is closed"
        loop.send(ModelResponse(request.id, "r1", (TextBlock("ok"),), "stop"))
    assert stop.value.value.status == "completed"
    assert loop.log[-1].type == "run.finished"
    assert len(read_log(path)) == written  # the file is as the writer left it


def test_follow_unsubscribe_is_idempotent_and_follow_needs_an_open_writer(tmp_path: Path) -> None:
    loop = agent_loop([UserMessage("u1", "hi")], tools=[], started_at=1.0)
    next(loop)
    writer = LogWriter(tmp_path / "run.jsonl")
    unsubscribe = writer.follow(loop.log)
    unsubscribe()
    writer.close()
    unsubscribe()
    with pytest.raises(ValueError, match="LogWriter is closed"):
        writer.follow(loop.log)
