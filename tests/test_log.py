"""Log files: format 2 (hash chain, content stored once), format 1, LogWriter, torn
lines, wrong headers and versions, bounded lines, one session per file."""

from __future__ import annotations

import json
import math
import os
import re
import stat
from pathlib import Path
from typing import Any

import msgspec
import pytest

from agentloop import (
    RULES_REVISION,
    AssistantMessage,
    ModelResponse,
    PlanCommitEvent,
    PlanDraftEvent,
    RunFinishedEvent,
    SessionStartEvent,
    StepEndEvent,
    StepStartEvent,
    TextBlock,
    ToolCall,
    ToolCallEvent,
    ToolErrorEvent,
    ToolResult,
    ToolResultEvent,
    ToolResultMessage,
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
    LogIntegrityError,
    LogVersionError,
    LogWriter,
    TornLogError,
    read_log,
    replay,
    write_log,
)
from replay._log import _V1_FIELDS, _v1_line
from tests.logfiles import FIXTURES, bodies, chain, fixture, link, relinked, under_rules

V2_PATHS = sorted(FIXTURES.glob("*.jsonl"))
V1_PATHS = sorted((FIXTURES / "v1").glob("*.jsonl"))
#: Fixtures recorded after format 2 was released: no format-1 copy exists.
SINCE_FORMAT_2 = {"compacted_session", "handoff_session", "media_session"}
HEADER = {"format": LOG_FORMAT, "version": LOG_FORMAT_VERSION, "library": __version__}
TOOL_CALLS_EVENTS = read_log(FIXTURES / "tool_calls.jsonl")


def _encoded(events: Any) -> list[bytes]:
    return [encode_event(event) for event in events]


def test_fixtures_exist() -> None:
    names = {p.stem for p in V2_PATHS}
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
    # Every fixture of format 1's time has its frozen format-1 copy; the ones made
    # since record events format 1 never had (context.compacted: DESIGN §27;
    # agent.handoff: §26).
    assert {p.stem for p in V1_PATHS} == names - SINCE_FORMAT_2


# --------------------------------------------------------------------------- round trips


@pytest.mark.parametrize("path", V2_PATHS, ids=lambda p: p.stem)
def test_format_2_round_trip_is_byte_exact(path: Path, tmp_path: Path) -> None:
    events = read_log(path)
    header = json.loads(path.read_bytes().partition(b"\n")[0])
    assert header.pop("#") and header == HEADER
    copy = tmp_path / "copy.jsonl"
    write_log(copy, events)
    assert copy.read_bytes() == path.read_bytes()
    # Written as it happens, event by event: the same bytes.
    streamed = tmp_path / "streamed.jsonl"
    with LogWriter(streamed) as writer:
        for event in events:
            writer.write(event)
    assert streamed.read_bytes() == path.read_bytes()


@pytest.mark.parametrize("path", V1_PATHS, ids=lambda p: p.stem)
def test_format_1_logs_read_replay_and_rewrite_as_format_2(path: Path, tmp_path: Path) -> None:
    data = path.read_bytes()
    assert json.loads(data.partition(b"\n")[0])["version"] == 1
    events = read_log(path)
    # Every line is format 1's canonical form of its event: all fields written.
    assert [_v1_line(event) for event in events] == data.splitlines()[1:]
    # The same events as the format-2 fixture (which records the newest rules
    # revision; format 1 knew only revision 0), which replay the same way.
    current = read_log(FIXTURES / path.name)
    assert _encoded(events) == _encoded(under_rules(current, 0))
    assert _encoded(under_rules(events, RULES_REVISION)) == _encoded(current)
    if events[0].type == "session.start":
        assert _encoded(replay(events).events) == _encoded(events)
    copy = tmp_path / "copy.jsonl"
    write_log(copy, events)
    assert read_log(copy) == events
    if events[0].type != "session.start":  # nothing to tell the rules apart
        assert copy.read_bytes() == (FIXTURES / path.name).read_bytes()


def test_format_2_is_smaller() -> None:
    v1 = sum(p.stat().st_size for p in V1_PATHS)
    v2 = sum(p.stat().st_size for p in V2_PATHS if p.stem not in SINCE_FORMAT_2)
    assert v2 < v1


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


def test_write_log_refuses_a_second_session_and_keeps_the_old_file(tmp_path: Path) -> None:
    path = tmp_path / "log.jsonl"
    write_log(path, TOOL_CALLS_EVENTS)
    before = path.read_bytes()
    with pytest.raises(ValueError, match=r"events\[22\] is a second session.start"):
        write_log(path, [*TOOL_CALLS_EVENTS, TOOL_CALLS_EVENTS[0]])
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["log.jsonl"]


# --------------------------------------------------------------------------- content stored once


def test_results_and_commits_are_stored_once() -> None:
    data = fixture("tool_calls")
    # The tool result's content is on its line once (in the reply), the committed
    # message refers to the draft, the final text to the committed message.
    answer = "20 + 22 = 42, and it is -3 °C and snowing in Oslo.".encode()
    assert fixture("tool_calls", 1).count(answer) == 3  # draft, commit, final text
    assert data.count(answer) == 1  # the draft
    assert fixture("tool_calls", 1).count(b'\\"snow\\"') == 2
    assert data.count(b'\\"snow\\"') == 1  # the tool result
    lines = data.splitlines()
    assert lines[8].startswith(
        b'{"type":"plan.commit","sequence":7,"at":1001.0,"step":1,"=":"message"'
    )
    assert b'"=":"message"' in lines[10] and b'"message"' not in lines[10].replace(
        b'"=":"message"', b""
    )
    assert b'"=":"final_text"' in lines[-1] and b'"final_text":' not in lines[-1]
    # In memory, the events are what the loop made.
    events = read_log(FIXTURES / "tool_calls.jsonl")
    commit, result = events[7], events[9]
    assert type(commit) is PlanCommitEvent and type(result) is ToolResultEvent
    assert commit.message.id == "message-resp-1" and len(commit.message.content) == 3
    assert result.message == ToolResultMessage("tool-result-call-1", "call-1", "add", "42")
    draft = events[6]
    assert type(draft) is PlanDraftEvent
    assert commit.message.content is draft.reply.content  # shared, not copied


def _session(*middle: Any) -> list[Any]:
    start = SessionStartEvent(sequence=0, max_steps=8)
    events = [start, *middle]
    return [msgspec.structs.replace(e, sequence=i) for i, e in enumerate(events)]


CALL = ToolCall("c1", "add", {"a": 1})
DRAFT = PlanDraftEvent(
    sequence=0, step=1, reply=ModelResponse("request-001", "r1", (CALL,), "tool_call")
)
RESULT_MESSAGE = ToolResultMessage("tool-result-c1", "c1", "add", "2")


@pytest.mark.parametrize(
    "events",
    [
        # Written in full, because what the earlier lines give is not the same:
        # a hook edited the committed message, or the result.
        _session(
            DRAFT, PlanCommitEvent(sequence=0, step=1, message=AssistantMessage("message-r1", ()))
        ),
        _session(
            DRAFT,
            PlanCommitEvent(
                sequence=0,
                step=1,
                message=AssistantMessage("message-r1", (ToolCall("c1", "add", {"a": True}),)),
            ),
        ),
        _session(DRAFT, PlanCommitEvent(sequence=0, message=AssistantMessage("m-other", (CALL,)))),
        _session(PlanCommitEvent(sequence=0, message=AssistantMessage("message-r1", (CALL,)))),
        _session(
            ToolCallEvent(sequence=0, call=CALL),
            ToolResultEvent(
                sequence=0,
                message=msgspec.structs.replace(RESULT_MESSAGE, content="edited"),
                reply=ToolResult("c1", "2"),
            ),
        ),
        _session(
            ToolCallEvent(sequence=0, call=CALL),
            ToolErrorEvent(
                sequence=0,
                message=msgspec.structs.replace(RESULT_MESSAGE, is_error=True),
                reply=ToolResult("c1", "2"),
            ),
        ),
        _session(
            ToolCallEvent(sequence=0, call=ToolCall("c2", "add", {})),
            ToolResultEvent(sequence=0, message=RESULT_MESSAGE, reply=ToolResult("c1", "2")),
        ),
        _session(ToolResultEvent(sequence=0, message=RESULT_MESSAGE, reply=ToolResult("c1", "2"))),
        _session(
            ToolCallEvent(sequence=0, call=CALL),
            ToolResultEvent(sequence=0, message=RESULT_MESSAGE, reply=None),
        ),
        _session(RunFinishedEvent(sequence=0, status="completed", final_text="")),
        # Stored once.
        _session(
            DRAFT, PlanCommitEvent(sequence=0, message=AssistantMessage("message-r1", (CALL,)))
        ),
        _session(
            ToolCallEvent(sequence=0, call=CALL),
            ToolErrorEvent(
                sequence=0,
                message=msgspec.structs.replace(RESULT_MESSAGE, is_error=True),
                reply=ToolResult("c1", "2", is_error=True),
            ),
        ),
        _session(
            PlanCommitEvent(sequence=0, message=AssistantMessage("m", (TextBlock("a"),))),
            RunFinishedEvent(sequence=0, status="completed", final_text="a"),
        ),
    ],
)
def test_hand_built_events_round_trip_exactly(tmp_path: Path, events: list[Any]) -> None:
    path = tmp_path / "log.jsonl"
    write_log(path, events)
    assert _encoded(read_log(path)) == _encoded(events)


def test_a_reference_to_what_the_log_lacks_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "log.jsonl"
    for body, what in [
        (b'{"type":"plan.commit","sequence":1,"=":"message"', "a plan.draft response"),
        (
            b'{"type":"tool.result","sequence":1,"reply":{"kind":"tool_result",'
            b'"call_id":"c1","content":"2"},"=":"message"',
            "a tool.call",
        ),
        (
            b'{"type":"run.finished","sequence":1,"status":"completed","=":"final_text"',
            "a plan.commit",
        ),
    ]:
        start = bodies(fixture("plain_answer"))[:2]
        path.write_bytes(chain([*start, body]))
        with pytest.raises(LogFormatError, match=f"line 3: its .* refers to {what}"):
            read_log(path)


# --------------------------------------------------------------------------- the hash chain


def _lines(name: str = "tool_calls") -> list[bytes]:
    return fixture(name).splitlines(keepends=True)


@pytest.mark.parametrize("number", range(1, 24))
def test_an_edited_byte_on_any_line_breaks_the_chain_there(tmp_path: Path, number: int) -> None:
    lines = _lines()
    line = bytearray(lines[number - 1])
    index = len(line) // 2
    line[index] = ord("X") if line[index] != ord("X") else ord("Y")
    lines[number - 1] = bytes(line)
    path = tmp_path / "edited.jsonl"
    path.write_bytes(b"".join(lines))
    with pytest.raises(LogIntegrityError) as info:
        read_log(path)
    assert info.value.line == number
    assert str(info.value).startswith(f"{path}: line {number}: the hash chain is broken here")


def test_a_consistently_edited_tool_result_is_detected(tmp_path: Path) -> None:
    path = tmp_path / "edited.jsonl"
    path.write_bytes(fixture("tool_calls").replace(b'"content":"42"', b'"content":"43"'))
    with pytest.raises(LogIntegrityError, match="line 11: the hash chain is broken"):
        read_log(path)
    # Format 1 held it twice; edited in both places, the file reads (format 1 has
    # no chain: only replay could tell, by running the tool again).
    path.write_bytes(fixture("tool_calls", 1).replace(b'"content":"42"', b'"content":"43"'))
    assert read_log(path)[9].message.content == "43"


@pytest.mark.parametrize(
    ("edit", "number"),
    [
        (lambda lines: lines[:5] + lines[6:], 6),  # a line deleted
        (lambda lines: [*lines[:5], lines[6], lines[5], *lines[7:]], 6),  # two swapped
        (lambda lines: [*lines, lines[3]], 24),  # a line appended again
        (lambda lines: [*lines, _lines("plain_answer")[4]], 24),  # another log's line
        (lambda lines: [*lines[:4], lines[4], *lines[4:]], 6),  # a line repeated
        (lambda lines: [lines[0].replace(b"0.1.0", b"0.1.1"), *lines[1:]], 1),  # the header
        (lambda lines: [*lines[:-1], lines[-1].replace(b'"#":"', b'"#":"0', 1)], 23),
    ],
    ids=["deleted", "swapped", "appended-again", "appended-other", "repeated", "header", "link"],
)
def test_deleted_reordered_and_appended_lines_break_the_chain(
    tmp_path: Path, edit: Any, number: int
) -> None:
    path = tmp_path / "edited.jsonl"
    path.write_bytes(b"".join(edit(_lines())))
    with pytest.raises(LogIntegrityError) as info:
        read_log(path)
    assert info.value.line == number


def test_a_line_without_a_link_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "unlinked.jsonl"
    lines = _lines("plain_answer")
    path.write_bytes(b"".join([*lines[:3], b'{"type":"step.end","sequence":3}\n']))
    with pytest.raises(LogIntegrityError, match=r"line 4: has no hash chain link"):
        read_log(path)
    path.write_bytes(b'{"format":"agentloop-log","version":2}\n')
    with pytest.raises(LogIntegrityError, match=r"line 1: has no hash chain link"):
        read_log(path)


def test_a_cut_at_the_end_reads_as_a_crash_would_leave_it(tmp_path: Path) -> None:
    # The chain cannot tell a cut from a crash; replay finds the run unfinished.
    path = tmp_path / "cut.jsonl"
    path.write_bytes(b"".join(_lines()[:-2]))
    events = read_log(path)
    assert events == TOOL_CALLS_EVENTS[:-2]


# --------------------------------------------------------------------------- one session per file


def test_two_logs_joined_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "joined.jsonl"
    path.write_bytes(fixture("plain_answer") + fixture("tool_calls"))
    with pytest.raises(LogFormatError, match="line 13: a second log header: the file holds two"):
        read_log(path)
    path.write_bytes(fixture("plain_answer", 1) + fixture("tool_calls", 1))
    with pytest.raises(LogFormatError, match="line 13: a second log header"):
        read_log(path)


@pytest.mark.parametrize("version", [1, 2])
def test_a_second_session_start_is_refused(tmp_path: Path, version: int) -> None:
    path = tmp_path / "two.jsonl"
    if version == 1:
        lines = fixture("plain_answer", 1).splitlines(keepends=True)
        path.write_bytes(b"".join([*lines, *lines[1:]]))
    else:
        path.write_bytes(relinked(fixture("plain_answer"), lambda b: [*b, *b[1:]]))
    with pytest.raises(LogFormatError) as info:
        read_log(path)
    assert str(info.value) == (
        f"{path}: line 13: a second session.start: the file holds two sessions (one file "
        "records one session)"
    )
    assert type(info.value) is LogFormatError


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


def _header_of(path: Path) -> dict[str, Any]:
    header: dict[str, Any] = json.loads(path.read_bytes().partition(b"\n")[0])
    assert re.fullmatch("[0-9a-f]{16}", header.pop("#"))
    return header


def test_log_writer_as_subscriber_and_context_manager(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    with LogWriter(path) as writer:
        assert _header_of(path) == HEADER  # the header is there at once
        _run(writer)
        assert writer.next_sequence == len(read_log(path))  # flushed per event
    assert writer.closed
    events = read_log(path)
    assert events[-1].type == "run.finished"
    assert replay(events).result is not None


def test_log_writer_writes_at_side_effect_boundaries(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "run.jsonl"
    syncs: list[int] = []
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        syncs.append(fd)
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    writer = LogWriter(path, fsync=True)
    try:
        synced = len(syncs)
        for sequence in range(3):  # no effect follows a step.end: buffered
            writer.write(StepEndEvent(sequence=sequence, step=1))
            assert read_log(path) == []
        assert len(syncs) == synced
        # A step.start precedes a model call: everything so far is written, synced once.
        writer.write(StepStartEvent(sequence=3, step=2, request_id="r"))
        assert [e.sequence for e in read_log(path)] == [0, 1, 2, 3]
        assert len(syncs) == synced + 1
        writer.write(StepEndEvent(sequence=4, step=2))
        writer.flush()  # on demand
        assert len(read_log(path)) == 5
        assert len(syncs) == synced + 1
    finally:
        writer.close()
    assert len(read_log(path)) == 5
    writer.close()  # idempotent
    assert "closed" in repr(writer)


def test_log_writer_appends_to_an_existing_log(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    write_log(path, TOOL_CALLS_EVENTS[:9])  # up to a tool call: the context carries over
    with LogWriter(path) as writer:
        assert writer.next_sequence == 9
        assert "next_sequence=9" in repr(writer)
        for event in TOOL_CALLS_EVENTS[9:]:
            writer.write(event)
    assert path.read_bytes() == fixture("tool_calls")
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
    with pytest.raises(TornLogError) as info:
        LogWriter(torn)
    assert info.value.events == [StepEndEvent(sequence=0, step=1)]
    foreign = tmp_path / "notes.txt"
    foreign.write_text("shopping list\n")
    with pytest.raises(LogFormatError):
        LogWriter(foreign)
    assert foreign.read_text() == "shopping list\n"


def test_log_writer_does_not_guess_when_a_torn_log_changes_while_it_opens(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from replay import _log

    torn = tmp_path / "torn.jsonl"
    torn.write_bytes(fixture("plain_answer")[:-5])
    # Another process completes the file between LogWriter's two reads.
    monkeypatch.setattr(_log, "read_log", lambda path: [])
    with pytest.raises(LogFormatError, match="the log changed while LogWriter was opening it"):
        LogWriter(torn)


def test_log_writer_does_not_append_to_format_1(tmp_path: Path) -> None:
    path = tmp_path / "old.jsonl"
    path.write_bytes(fixture("waiting_on_tool", 1))
    with pytest.raises(
        ValueError, match=re.escape("a format-1 log; LogWriter appends to format 2")
    ):
        LogWriter(path)
    assert path.read_bytes() == fixture("waiting_on_tool", 1)
    # The recipe the message gives: the same events, as format 2.
    write_log(path, read_log(path))
    with LogWriter(path) as writer:
        assert writer.next_sequence == len(read_log(FIXTURES / "waiting_on_tool.jsonl"))


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
    assert _encoded(read_log(path)) == _encoded(loop.log)


def _started(text: str) -> Any:
    loop = agent_loop([UserMessage("u1", text)], tools=[], started_at=1.0)
    next(loop)
    return loop


def test_follow_refuses_to_splice_another_run_onto_a_file(tmp_path: Path) -> None:
    # Defect 17: a second run followed onto an existing file.
    path = tmp_path / "run.jsonl"
    with LogWriter(path) as writer:
        writer.follow(_started("first").log)
    before = path.read_bytes()
    for other in (_started("second"), agent_loop([UserMessage("u1", "x")], tools=[])):
        with (
            LogWriter(path) as writer,
            pytest.raises(ValueError, match="the log to follow is not the run this file records"),
        ):
            writer.follow(other.log)
        assert path.read_bytes() == before
    # The same run, resumed from the file: followed, nothing written twice.
    from replay import resume

    loop, _ = resume(read_log(path))
    with LogWriter(path) as writer:
        writer.follow(loop.log)
    assert path.read_bytes() == before


# --------------------------------------------------------------------------- torn lines


def test_every_cut_of_the_last_line_is_reported_as_torn(tmp_path: Path) -> None:
    lines = _lines()
    intact = TOOL_CALLS_EVENTS[:-1]
    last = lines[-1]
    path = tmp_path / "torn.jsonl"
    for cut in range(1, len(last)):  # every partial write, including a missing "\n"
        path.write_bytes(b"".join(lines[:-1]) + last[:cut])
        with pytest.raises(TornLogError) as info:
            read_log(path)
        error = info.value
        assert error.events == intact
        assert error.line == len(lines)
        expected = "has no final newline" if cut == len(last) - 1 else "is torn"
        assert f"line {len(lines)} {expected}" in str(error)
        assert str(path) in str(error)


def test_torn_log_recovery_is_explicit(tmp_path: Path) -> None:
    path = tmp_path / "torn.jsonl"
    path.write_bytes(fixture("tool_calls")[:-40])
    with pytest.raises(TornLogError) as info:
        read_log(path)
    write_log(path, info.value.events)
    assert read_log(path) == info.value.events


def test_garbage_after_a_crash_is_torn_not_data(tmp_path: Path) -> None:
    path = tmp_path / "torn.jsonl"
    path.write_bytes(fixture("tool_calls") + b"\x00\x00\x00")
    with pytest.raises(TornLogError):
        read_log(path)


@pytest.mark.parametrize("version", [1, 2])
def test_a_torn_format_1_or_2_line(tmp_path: Path, version: int) -> None:
    path = tmp_path / "torn.jsonl"
    data = fixture("plain_answer", version)
    path.write_bytes(data[:-1])
    with pytest.raises(TornLogError, match="line 12 has no final newline"):
        read_log(path)
    path.write_bytes(data[:-9])
    with pytest.raises(TornLogError, match="line 12 is torn"):
        read_log(path)


# --------------------------------------------------------------------------- bad files


def _header(**fields: object) -> bytes:
    """A header line, linked."""
    body = json.dumps({**HEADER, **fields}, separators=(",", ":")).encode()[:-1]
    return chain([body])


BODY = b"".join(_lines("plain_answer")[1:])


@pytest.mark.parametrize(
    ("data", "error", "match"),
    [
        # no header at all
        (b"", LogFormatError, "empty file"),
        (BODY, LogFormatError, "not an agentloop log"),
        (b"hello world\n", LogFormatError, "not an agentloop log"),
        (b'{"format":"agentloop-log"', LogFormatError, "header line is incomplete"),
        (b"[1, 2, 3]\n", LogFormatError, "not an agentloop log"),
        (b"{" * 70_000 + b"\n", LogFormatError, "not an agentloop log"),
        (b"x" * 70_000, LogFormatError, "not an agentloop log"),
        # another format
        (_header(format="vcr-cassette") + BODY, LogFormatError, "not an agentloop log"),
        # versions
        (_header(version=LOG_FORMAT_VERSION + 1) + BODY, LogVersionError, "newer"),
        (_header(version=99, library="9.9.9") + BODY, LogVersionError, "agentloop 9.9.9"),
        (_header(version=0) + BODY, LogVersionError, "invalid log format version"),
        (_header(version="1") + BODY, LogVersionError, "invalid log format version"),
        (_header(version=True) + BODY, LogVersionError, "invalid log format version"),
        # another header, another chain
        (_header(library="0.0.9") + BODY, LogIntegrityError, "line 2: the hash chain is"),
        (fixture("plain_answer") + b"\n", LogFormatError, "line 13: an empty line"),
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


@pytest.mark.parametrize(
    ("line", "match"),
    [
        (b"not json", r"line 4: not a valid agentloop event \(JSON is malformed"),
        (b'{"type":"no.such","sequence":3', "line 4: not a valid agentloop event"),
        (b'{"type":"step.end"', "line 4: not a valid agentloop event"),
        (b"\xff\xfe", "line 4: not a valid agentloop event"),
        (b'{"type":"plan.commit","sequence":3,"=":"message"', "line 4: its message refers to"),
    ],
)
def test_bad_lines_behind_a_valid_chain_name_their_line(
    tmp_path: Path, line: bytes, match: str
) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_bytes(relinked(fixture("plain_answer"), lambda b: [*b[:3], line, *b[3:]]))
    with pytest.raises(LogFormatError, match=match) as info:
        read_log(path)
    assert info.value.line == 4


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
    event = TOOL_CALLS_EVENTS[11]
    assert isinstance(getattr(event, "reply", None), ToolResult)
    write_log(path, [event])
    assert read_log(path) == [event]


# --------------------------------------------------------------------------- bounded lines


@pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="needs /dev/zero")
def test_dev_zero_is_refused_at_once() -> None:
    # Defect 16: the first 64 KiB hold no line end, so it is no log.
    with pytest.raises(LogFormatError) as info:
        read_log("/dev/zero")
    assert str(info.value).startswith("/dev/zero: not an agentloop log")


def test_control_bytes_in_a_long_line_stop_the_reader(tmp_path: Path) -> None:
    path = tmp_path / "zeros.jsonl"
    path.write_bytes(_lines("plain_answer")[0] + b"\x00" * (3 * 1024 * 1024))
    with pytest.raises(LogFormatError, match="line 2: holds control bytes that no log line holds"):
        read_log(path)


def test_lines_longer_than_the_limit_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "long.jsonl"
    path.write_bytes(_lines("plain_answer")[0] + b"a" * (2 * 1024 * 1024 + 5) + b"\n")
    with pytest.raises(LogFormatError, match=r"line 2: longer than 1,048,576 bytes"):
        read_log(path, max_line_bytes=1024 * 1024)
    data = fixture("plain_answer")
    longest = max(len(line) for line in data.splitlines(keepends=True))
    path.write_bytes(data)
    for limit in (50, longest - 1):
        with pytest.raises(LogFormatError, match=f"longer than {limit} bytes"):
            read_log(path, max_line_bytes=limit)
    assert read_log(path, max_line_bytes=longest) == read_log(FIXTURES / "plain_answer.jsonl")
    # A long line at the end, with no line end: over the limit all the same.
    path.write_bytes(_lines("plain_answer")[0] + b"a" * (2 * 1024 * 1024 + 5))
    with pytest.raises(LogFormatError, match="longer than"):
        read_log(path, max_line_bytes=2 * 1024 * 1024)
    # Under the limit, it is torn.
    with pytest.raises(TornLogError, match="line 2 is torn"):
        read_log(path)


def test_a_long_valid_line_reads(tmp_path: Path) -> None:
    path = tmp_path / "big.jsonl"
    text = "x" * (3 * 1024 * 1024)
    events = _session(
        ToolCallEvent(sequence=0, call=CALL),
        ToolResultEvent(
            sequence=0,
            message=msgspec.structs.replace(RESULT_MESSAGE, content=text),
            reply=ToolResult("c1", text),
        ),
    )
    write_log(path, events)
    assert read_log(path) == events
    assert path.stat().st_size < len(text) + 1000  # stored once


# --------------------------------------------------------------------------- canonical lines

STEP_START = b'{"type":"step.start","sequence":2,"at":1000.0,"step":1,"request_id":"request-001"'


@pytest.mark.parametrize("version", [1, 2])
@pytest.mark.parametrize(
    ("line", "message"),
    [
        # a duplicate key (the last one wins when decoding)
        (
            STEP_START.replace(b'"sequence"', b'"request_id":"EVIL","sequence"'),
            "not in canonical form (at column 23: ",
        ),
        # whitespace, before, inside or after
        (STEP_START + b" ", "not in canonical form (at column 82: "),
        (b" " + STEP_START, "not in canonical form (at column 1: "),
        (STEP_START.replace(b'"step":1', b'"step": 1'), "not in canonical form (at column 54: "),
        # the same values, spelled otherwise
        (STEP_START.replace(b"1000.0", b"1000.00"), "not in canonical form (at column 46: "),
        (STEP_START.replace(b"1000.0", b"1e3"), "not in canonical form (at column 41: "),
        (
            STEP_START.replace(b"request-001", b"\\u0072equest-001"),
            "not in canonical form (at column 70: ",
        ),
        # the same fields, in another order
        (
            b'{"type":"step.start","at":1000.0,"sequence":2,"step":1,"request_id":"request-001"',
            "not in canonical form (at column 23: ",
        ),
        # a field the event does not have
        (STEP_START + b',"injected":"rm -rf /"', "unknown field 'injected'"),
    ],
    ids=[
        "duplicate-key",
        "trailing-space",
        "leading-space",
        "inner-space",
        "float-spelling",
        "exponent",
        "escaped-char",
        "field-order",
        "unknown-field",
    ],
)
def test_lines_not_in_canonical_form_are_refused(
    tmp_path: Path, line: bytes, message: str, version: int
) -> None:
    path = tmp_path / "edited.jsonl"
    if version == 1:
        lines = fixture("plain_answer", 1).split(b"\n")
        assert lines[3] == STEP_START + b"}"
        lines[3] = line + b"}"
        path.write_bytes(b"\n".join(lines))
    else:
        assert bodies(fixture("plain_answer"))[3] == STEP_START
        path.write_bytes(relinked(fixture("plain_answer"), lambda b: [*b[:3], line, *b[4:]]))
    with pytest.raises(LogFormatError) as info:
        read_log(path)
    error = info.value
    assert type(error) is LogFormatError
    assert (error.path, error.line) == (str(path), 4)
    assert str(error).startswith(f"{path}: line 4: {message}")
    assert "\n" not in str(error)
    if "canonical" in message:
        writer = "format 1 writes" if version == 1 else "this agentloop writes"
        assert f"where {writer} " in str(error)


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        # defaults are left out in format 2: written, they are another spelling
        (lambda b: b.replace(b'"max_steps":8', b'"max_steps":8,"budget":null'), '"budget":null'),
        (lambda b: b.replace(b'"at":1000.0,"max', b'"at":1000.0,"step":0,"max'), '"step":0'),
        # a field that follows from an earlier line, written out anyway
        (
            lambda b: b.replace(
                b'"=":"final_text"', b'"final_text":"The capital of France is Paris."'
            ),
            '"final_text":"The',
        ),
        # a reference where there is nothing to refer to
        (
            lambda b: b.replace(b'"step":1,"status"', b'"step":1,"=":"message","status"'),
            '"=":"message"',
        ),
        (
            lambda b: b + b',"=":"message"' if b.startswith(b'{"type":"step.end"') else b,
            '"=":"message"',
        ),
        # both: the field, and the reference to where it comes from
        (
            lambda b: b.replace(b'"=":"final_text"', b'"final_text":"Lyon","=":"final_text"'),
            '"final_text":"Lyon"',
        ),
    ],
)
def test_format_2_lines_leave_out_what_they_may(tmp_path: Path, edit: Any, message: str) -> None:
    path = tmp_path / "edited.jsonl"
    path.write_bytes(relinked(fixture("plain_answer"), lambda b: [edit(x) for x in b]))
    with pytest.raises(LogFormatError, match="not in canonical form") as info:
        read_log(path)
    assert message in str(info.value)


def test_a_nested_unknown_field_is_named_with_who_wrote_the_log(tmp_path: Path) -> None:
    def edit(parts: list[bytes]) -> list[bytes]:
        parts[0] = parts[0].replace(b'"library":"0.1.0"', b'"library":"9.9.9"')
        parts[7] = parts[7].replace(b'"output_tokens":9', b'"output_tokens":9,"cache_tokens":3')
        return parts

    path = tmp_path / "newer.jsonl"
    path.write_bytes(relinked(fixture("plain_answer"), edit))
    with pytest.raises(LogFormatError) as info:
        read_log(path)
    assert str(info.value) == (
        f"{path}: line 8: unknown field 'reply.usage.cache_tokens'; the log was written by "
        f"agentloop 9.9.9, this is agentloop {__version__}: a newer agentloop may write "
        "fields or events this one does not know"
    )
    # An event type this agentloop does not know, likewise.
    path.write_bytes(
        relinked(
            fixture("plain_answer"),
            lambda b: [
                b[0].replace(b"0.1.0", b"9.9.9"),
                *b[1:8],
                b'{"type":"message.queued","sequence":7',
            ],
        )
    )
    with pytest.raises(
        LogFormatError, match=r"line 9: not a valid agentloop event .*agentloop 9\.9\.9"
    ):
        read_log(path)


def test_the_canonical_difference_is_shown_around_where_it_is(tmp_path: Path) -> None:
    path = tmp_path / "edited.jsonl"
    path.write_bytes(relinked(fixture("plain_answer"), lambda b: [*b[:3], b" " + b[3], *b[4:]]))
    with pytest.raises(
        LogFormatError,
        match=re.escape(
            """(at column 1: ' {"type":"step.start…' where this agentloop writes """
            """'{"type":"step.start"…'; """
        ),
    ):
        read_log(path)


def test_an_edited_line_holding_tagged_values_is_still_checked(tmp_path: Path) -> None:
    data = fixture("non_finite_arguments")
    assert b'{"$float"' in data
    path = tmp_path / "edited.jsonl"
    path.write_bytes(
        relinked(data, lambda b: [x.replace(b'{"$float":"nan"}', b'{"$float": "nan"}') for x in b])
    )
    with pytest.raises(LogFormatError, match="line 5: not in canonical form"):
        read_log(path)


def test_a_huge_integer_written_untagged_is_not_canonical(tmp_path: Path) -> None:
    # A plan.draft's arguments may hold an integer outside int64/uint64; the log
    # writes it tagged, so the bare number is another spelling of the same event.
    path = tmp_path / "big.jsonl"
    big = b'"arguments":{"a":2' + b"0" * 20 + b","
    path.write_bytes(
        relinked(
            fixture("tool_calls"),
            lambda b: [*b[:7], b[7].replace(b'"arguments":{"a":20,', big), *b[8:]],
        )
    )
    with pytest.raises(LogFormatError, match="line 8: not in canonical form") as info:
        read_log(path)
    assert '{"$int":"2' in str(info.value)
    # Tagged, as the log writes it, it reads (and is the value it was).
    events = list(TOOL_CALLS_EVENTS)
    draft: Any = events[6]
    call: Any = draft.reply.content[1]
    huge = msgspec.structs.replace(call, arguments={**call.arguments, "a": 2 * 10**20})
    content = (draft.reply.content[0], huge, *draft.reply.content[2:])
    events[6] = msgspec.structs.replace(
        draft, reply=msgspec.structs.replace(draft.reply, content=content)
    )
    write_log(path, events[:7])
    assert read_log(path)[6].reply.content[1].arguments["a"] == 2 * 10**20


@pytest.mark.parametrize(
    "text", ["It costs $5.", "id 12345678901234567890", "$float", "$ 1234567890123456789"]
)
def test_dollars_and_long_digit_runs_in_canonical_logs_read(tmp_path: Path, text: str) -> None:
    loop = agent_loop([UserMessage("u1", text)], tools=[], started_at=1.0)
    request = next(loop)
    with pytest.raises(StopIteration):
        loop.send(ModelResponse(request.id, "r1", (TextBlock(text),), "stop", Usage(1, 2)))
    path = tmp_path / "dollars.jsonl"
    write_log(path, loop.log)
    assert read_log(path) == list(loop.log)


@pytest.mark.parametrize("version", [1, 2])
def test_crlf_line_ends_are_tolerated(tmp_path: Path, version: int) -> None:
    # As JSON Lines allows: e.g. a log committed to git and checked out with autocrlf.
    path = tmp_path / "crlf.jsonl"
    for name in ("tool_calls", "non_finite_arguments"):
        data = fixture(name, version)
        path.write_bytes(data.replace(b"\n", b"\r\n"))
        assert read_log(path) == read_log(
            FIXTURES / ("v1" if version == 1 else "") / f"{name}.jsonl"
        )
    # Mixed, as after LogWriter appended to such a file.
    path.write_bytes(data.replace(b"\n", b"\r\n", 3))
    assert read_log(path) == read_log(
        FIXTURES / ("v1" if version == 1 else "") / "non_finite_arguments.jsonl"
    )


@pytest.mark.parametrize(
    ("data", "error", "match"),
    [
        # a "\r" that is not part of a line end
        (
            b"".join(_lines()[:2]) + _lines()[2][:-1] + b"\r\r\n",
            LogIntegrityError,
            "line 3: has no hash chain link",
        ),
        (
            b"".join(_lines()[:2]) + _lines()[2][:-1] + b" \r\n",
            LogIntegrityError,
            "line 3: has no hash chain link",
        ),
        # a last line whose "\n" is missing is torn, "\r" or not
        (fixture("tool_calls")[:-1] + b"\r", TornLogError, "line 23 has no final newline"),
        (fixture("tool_calls")[:-1] + b"\r\n\r", TornLogError, "line 24 is torn"),
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
    lines = fixture("plain_answer").split(b"\n")  # 12 lines, then ""
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


@pytest.mark.parametrize("depth", [600, 3000, 100_000])
def test_deeply_nested_json_is_read_at_any_depth(tmp_path: Path, depth: int) -> None:
    # Values too deep for msgspec's recursive decoder are read all the same (a log
    # holds what the loop recorded, however deep), the same way on every
    # interpreter: here the edit is only found by replay, as any other edit of a value.
    deep = b"[" * depth + b"]" * depth
    path = tmp_path / "deep.jsonl"
    path.write_bytes(
        relinked(
            fixture("tool_calls"),
            lambda b: [x.replace(b'"arguments":{"a":20', b'"arguments":{"a":' + deep) for x in b],
        )
    )
    events = read_log(path)
    value = events[6].reply.content[1].arguments["a"]  # type: ignore[union-attr]
    levels = 1
    while value:
        value, levels = value[0], levels + 1
    assert levels == depth
    # In the header: not an agentloop log.
    path.write_bytes(deep + b"\n" + BODY)
    with pytest.raises(LogFormatError, match="not an agentloop log"):
        read_log(path)
    # As a torn last line: torn, like any other.
    path.write_bytes(fixture("tool_calls") + b'{"type":"step.end","x":' + deep)
    with pytest.raises(TornLogError, match="line 24 is torn"):
        read_log(path)


def test_values_nested_up_to_the_limit_read_and_brackets_in_strings_do_not_count(
    tmp_path: Path,
) -> None:
    deep: Any = 1
    for _ in range(505):  # + event, reply, content, block, arguments: 510 levels
        deep = [deep]
    text = "[{" * 2000  # brackets in strings are text, not nesting
    events = _session(
        PlanDraftEvent(
            sequence=0,
            step=1,
            reply=ModelResponse(
                "request-001", "r1", (ToolCall("c1", text, {"a": deep}),), "tool_call"
            ),
        )
    )
    path = tmp_path / "deep.jsonl"
    write_log(path, events)
    assert _encoded(read_log(path)) == _encoded(events)


def test_malformed_brackets_are_left_to_the_decoder(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    line = b'{"type":"step.end","sequence":3,"x":' + b"[}" * 600
    path.write_bytes(relinked(fixture("plain_answer"), lambda b: [*b[:3], line]))
    with pytest.raises(LogFormatError, match=r"line 4: not a valid agentloop event \(JSON is"):
        read_log(path)


# --------------------------------------------------------------------------- format 1


def test_format_1_fields_are_frozen_and_new_fields_need_defaults() -> None:
    # The evolution rule that makes format 1 readable forever: its fields stay (in
    # their order), and every field added since has a default.
    for cls, names in _V1_FIELDS.items():
        fields = cls.__struct_fields__
        assert [name for name in fields if name in names] == list(names), cls
        for field in msgspec.structs.fields(cls):
            if field.name not in names:
                assert not field.required, f"{cls.__name__}.{field.name} needs a default"


def test_a_format_1_line_is_checked_with_the_fields_format_1_had(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # As if session.start had gained request_sequence_start after format 1: a
    # format-1 line without it reads (as the default), one with it is refused.
    from replay import _log

    expected = read_log(FIXTURES / "v1" / "plain_answer.jsonl")
    fields = _V1_FIELDS[SessionStartEvent]
    fields_v1: dict[Any, Any] = _log._V1_FIELDS
    monkeypatch.setitem(
        fields_v1,
        SessionStartEvent,
        tuple(f for f in fields if f != "request_sequence_start"),
    )
    path = tmp_path / "old.jsonl"
    data = fixture("plain_answer", 1)
    path.write_bytes(data.replace(b',"request_sequence_start":0', b""))
    assert read_log(path) == expected
    path.write_bytes(data)
    with pytest.raises(LogFormatError, match=r"line 2: not in canonical form .*request_seq"):
        read_log(path)
    # A Struct format 1 did not have.
    monkeypatch.delitem(fields_v1, ToolSpec)
    path.write_bytes(fixture("tool_calls", 1))
    with pytest.raises(LogFormatError, match="line 2: ToolSpec is not part of log format 1"):
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
    assert synced == ["file", "dir", "file"]  # the header, the new name, the rest at close
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


def test_a_failed_write_leaves_the_chain_where_the_file_is(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "run.jsonl"
    with LogWriter(path) as writer:
        writer.write(StepEndEvent(sequence=0, step=1))
        real = writer._write_line

        def full_disk(line: bytes) -> None:
            raise OSError(28, "No space left on device")

        monkeypatch.setattr(writer, "_write_line", full_disk)
        writer.write(StepEndEvent(sequence=1, step=1))  # buffered
        with pytest.raises(OSError, match="No space"):
            writer.flush()
        monkeypatch.setattr(writer, "_write_line", real)
        writer.write(StepEndEvent(sequence=2, step=1))
    assert [e.sequence for e in read_log(path)] == [0, 1, 2]


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


def test_link_helper_matches_the_files() -> None:
    # tests/logfiles.py computes links from the format's description.
    data = fixture("plain_answer")
    assert chain(bodies(data)) == data
    header = bodies(data)[0]
    assert data.startswith(header + b',"#":"' + link(b"", header))


def test_the_stored_form_of_an_event_keeps_every_other_field() -> None:
    from replay._log import _without

    # Field by field, defaults and default factories included: what a line that
    # leaves one field out is read and written with.
    stored = _without(ToolSpec, "name")
    assert stored.__struct_fields__ == (
        "description",
        "parameters",
        "requires_approval",
        "sequential",
    )
    assert msgspec.json.encode(stored()) == b'{"parameters":{"type":"object","properties":{}}}'
    commit = _without(PlanCommitEvent, "message")
    assert commit.__struct_fields__ == ("sequence", "at", "step")
    assert msgspec.json.encode(commit(sequence=1)) == b'{"type":"plan.commit","sequence":1}'


def test_messages_too_deep_to_compare_by_recursion_are_compared_as_written() -> None:
    from replay._log import _same_message

    def deep(leaf: Any) -> Any:
        value: Any = leaf
        for _ in range(100_000):
            value = [value]
        return value

    def message(arguments: dict[str, Any]) -> AssistantMessage:
        return AssistantMessage("m", (ToolCall("c1", "add", arguments),))

    a = message({"a": deep(1)})
    assert _same_message(a, message({"a": deep(1)}))  # so the line can say "="
    assert _same_message(a, a)
    assert not _same_message(a, message({"a": deep(2)}))
    assert not _same_message(a, message({"a": deep(1.0)}))  # equal, not written the same
    assert not _same_message(a, message({"a": deep(math.nan)}))
    cyclic: list[Any] = []
    cyclic.append(cyclic)  # (never recorded: the loop refuses cycles)
    assert not _same_message(message({"a": deep(cyclic)}), message({"a": deep(cyclic)}))
    unwritable = object()  # equal (the same object), but no log can hold it
    assert not _same_message(message({"a": unwritable}), message({"a": unwritable}))


# --------------------------------------------------------------------------- deep sessions


def _deep(depth: int, leaf: Any = None) -> Any:
    value: Any = {} if leaf is None else leaf
    for _ in range(depth - 1):
        value = {"a": value}
    return value


def test_a_session_with_5000_deep_tool_arguments_writes_reads_verifies_replays_diffs_shows(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from agentloop import ModelResponse, ToolCall, UserMessage, agent_loop
    from replay.__main__ import main
    from tests.helpers import ECHO

    loop = agent_loop([UserMessage("u1", "hi")], tools=[ECHO], started_at=1000.0)
    path = tmp_path / "deep.jsonl"
    with LogWriter(path) as writer:
        writer.follow(loop.log)
        request = next(loop)
        call = ToolCall("c1", "echo", _deep(5000))
        with pytest.raises(StopIteration):
            loop.send(ModelResponse(request.id, "r1", (call,), "tool_call", at=1001.0))
    assert loop.result is not None and loop.result.status == "failed"  # too deep for the loop
    events = read_log(path)
    assert [encode_event(e) for e in events] == [encode_event(e) for e in loop.log]
    assert replay(events).result == loop.result
    copy = tmp_path / "copy.jsonl"
    write_log(copy, events)
    assert copy.read_bytes() == path.read_bytes()
    for argv in (
        ["verify", str(path)],
        ["check", str(path)],
        ["diff", str(path), str(copy)],
        ["show", str(path)],
    ):
        assert main(argv) == 0, argv
    out = capsys.readouterr().out
    assert "plan.draft" in out
    # The chain covers the deep line: an edit deep down is found.
    edited = tmp_path / "edited.jsonl"
    edited.write_bytes(path.read_bytes().replace(b"{}}", b'{"b":1}}', 1))
    with pytest.raises(LogIntegrityError):
        read_log(edited)


def test_deep_messages_are_stored_once_and_read_back(tmp_path: Path) -> None:
    # A plan.commit whose message is the draft's, however deep: the line says "=".
    from agentloop import AssistantMessage, ModelResponse, PlanCommitEvent, PlanDraftEvent, ToolCall

    content = (ToolCall("c1", "echo", _deep(5000)),)
    draft = PlanDraftEvent(
        sequence=0, step=1, reply=ModelResponse("request-001", "r1", content, "tool_call")
    )
    commit = PlanCommitEvent(
        sequence=1,
        step=1,
        message=AssistantMessage("message-r1", (ToolCall("c1", "echo", _deep(5000)),)),
    )
    path = tmp_path / "deep.jsonl"
    write_log(path, [draft, commit])
    lines = bodies(path.read_bytes())
    assert lines[2] == b'{"type":"plan.commit","sequence":1,"step":1,"=":"message"'
    events = read_log(path)
    assert [encode_event(e) for e in events] == [encode_event(e) for e in (draft, commit)]


def test_a_deep_format_1_line_reads_and_is_checked_as_format_1_writes_it(tmp_path: Path) -> None:
    from agentloop import ModelResponse, PlanDraftEvent, ToolCall

    draft = PlanDraftEvent(
        sequence=0,
        step=1,
        reply=ModelResponse("request-001", "r1", (ToolCall("c1", "echo", _deep(3000)),), "stop"),
    )
    header = fixture("plain_answer", version=1).split(b"\n", 1)[0]
    path = tmp_path / "v1.jsonl"
    path.write_bytes(header + b"\n" + _v1_line(draft) + b"\n")
    assert [encode_event(e) for e in read_log(path)] == [encode_event(draft)]
    path.write_bytes(header + b"\n" + _v1_line(draft).replace(b'"step":1', b'"step": 1') + b"\n")
    with pytest.raises(LogFormatError, match="line 2: not in canonical form"):
        read_log(path)


def test_a_deep_unknown_field_on_a_line_that_leaves_its_message_out_is_named(
    tmp_path: Path,
) -> None:
    deep = b"[" * 3000 + b"]" * 3000
    path = tmp_path / "deep.jsonl"
    path.write_bytes(
        relinked(
            fixture("plain_answer"),
            lambda b: [
                x.replace(b',"=":"message"', b',"x":' + deep + b',"=":"message"') for x in b
            ],
        )
    )
    with pytest.raises(LogFormatError, match="line 9: unknown field 'x'"):
        read_log(path)
