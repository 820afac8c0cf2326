"""Log files: header, round trips, LogWriter, torn lines, wrong headers and versions."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentloop import (
    ModelResponse,
    StepEndEvent,
    TextBlock,
    ToolResult,
    ToolSpec,
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
        (_header() + BODY + b"\n", LogFormatError, "not a valid agentloop event"),
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
