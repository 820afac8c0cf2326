"""replay.SQLiteStore: schema and migrations, optimistic append, leases, answers, reads.

The runner on top (``run_durable``) is tested in ``test_durable.py``, crashes with
real processes in ``test_durable_crash.py``.
"""

from __future__ import annotations

import importlib.util
import os
import socket
import sqlite3
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import agentloop
import replay
from agentloop import (
    RULES_REVISION,
    Budget,
    Cancel,
    Event,
    FunctionModel,
    Resume,
    ToolResult,
    UserMessage,
    agent_loop,
    run,
)
from replay import (
    SCHEMA_VERSION,
    SessionInfo,
    SessionLeased,
    SessionNotFound,
    SQLiteStore,
    StoreConflict,
    StoreError,
    StoreVersionError,
)
from replay import __main__ as replay_cli
from replay import _store as store_module
from tests.helpers import examples, nested
from tests.logfiles import link, under_rules
from tests.test_log_properties import _events as hand_built_events

ROOT = Path(__file__).resolve().parent.parent
FIXTURE_SCRIPT = ROOT / "fixtures" / "make_store_fixture.py"


class FakeClock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def events_of(text: str = "hi", session: str = "s") -> list[Event]:
    """A finished session's events (the model answers at once)."""
    from agentloop import EventLog

    log = EventLog()
    run(
        [UserMessage(f"u-{session}", text)],
        model=FunctionModel(lambda request: f"echo {text}"),
        tools=[],
        log=log,
        clock=lambda: 5.0,
    )
    return list(log)


def paused_of() -> tuple[list[Event], int]:
    """A finished session that paused once for an approval, and the number of its
    events up to that pause (a parked session's log)."""
    from agentloop import EventLog, ScriptedResponse, ToolCall, tool

    @tool(requires_approval=True)
    def act() -> str:
        """Act."""
        return "done"

    def model_fn(request: Any) -> Any:
        if request.step == 1:
            return ScriptedResponse.tool_calls("r1", ToolCall("c1", "act", {}))
        return "acted"

    log = EventLog()
    run(
        [UserMessage("u-s", "act")],
        model=FunctionModel(model_fn),
        tools=[act],
        log=log,
        clock=lambda: 5.0,
        on_pause=lambda pause: Resume({"approved": True}),
    )
    events = list(log)
    return events, 1 + next(i for i, e in enumerate(events) if e.type == "session.pause")


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def store(tmp_path: Path, clock: FakeClock) -> Iterator[SQLiteStore]:
    with SQLiteStore(tmp_path / "s.db", clock=clock) as opened:
        yield opened


# --------------------------------------------------------------------------- opening


def _writer_holding_a_lock(path: Path) -> sqlite3.Connection:
    """A connection to a new file in the middle of a write transaction (what a
    second worker opening the same new store does at that moment)."""
    db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    db.execute("BEGIN IMMEDIATE")
    return db


def test_opening_waits_for_another_connection_to_let_go_of_a_new_file(tmp_path):
    # SQLite does not call the busy handler for PRAGMA journal_mode=WAL while
    # another connection holds the write lock (it could deadlock): two workers
    # opening a new store at the same moment made one fail at once with "database
    # is locked" (seen in CI). The store waits, up to its timeout.
    path = tmp_path / "new.db"
    writer = _writer_holding_a_lock(path)
    probe = sqlite3.connect(path, timeout=30.0)
    with pytest.raises(sqlite3.OperationalError, match="locked"):
        probe.execute("PRAGMA journal_mode=WAL")  # at once, despite the timeout
    probe.close()
    release = threading.Timer(0.2, lambda: writer.execute("ROLLBACK"))
    release.start()
    try:
        with SQLiteStore(path, timeout=30.0) as store:
            assert store.schema_version == SCHEMA_VERSION
    finally:
        release.join()
        writer.close()
    db = sqlite3.connect(path)
    assert db.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    db.close()


def test_opening_gives_up_after_the_timeout(tmp_path):
    path = tmp_path / "new.db"
    writer = _writer_holding_a_lock(path)
    try:
        with pytest.raises(StoreError, match=r"cannot open the store: database is locked"):
            SQLiteStore(path, timeout=0.05)
    finally:
        writer.close()


def test_entering_wal_mode_does_not_retry_other_errors():
    class Failing:
        calls = 0

        def execute(self, sql: str) -> None:
            self.calls += 1
            raise sqlite3.OperationalError("disk I/O error")

    db = Failing()
    with pytest.raises(sqlite3.OperationalError, match="disk I/O error"):
        store_module._enter_wal(db, 30.0)  # type: ignore[arg-type]
    assert db.calls == 1


def test_a_new_store_has_the_schema_in_wal_mode(tmp_path):
    path = tmp_path / "new.db"
    with SQLiteStore(path) as store:
        assert store.schema_version == SCHEMA_VERSION == 6
        assert store.sessions() == []
        assert repr(store) == f"<SQLiteStore {str(path)!r} schema 6>"
    db = sqlite3.connect(path)
    assert db.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    assert db.execute("PRAGMA application_id").fetchone() == (store_module.APPLICATION_ID,)
    assert db.execute("SELECT version, library FROM schema_version").fetchall() == [
        (1, agentloop.__version__),
        (2, agentloop.__version__),
        (3, agentloop.__version__),
        (4, agentloop.__version__),
        (5, agentloop.__version__),
        (6, agentloop.__version__),
    ]
    db.close()


def test_synchronous_full_and_bad_options(tmp_path):
    with SQLiteStore(tmp_path / "full.db", synchronous="FULL") as store:
        assert store._db.execute("PRAGMA synchronous").fetchone() == (2,)
    with SQLiteStore(tmp_path / "normal.db") as store:
        assert store._db.execute("PRAGMA synchronous").fetchone() == (1,)
    with pytest.raises(ValueError, match="synchronous must be 'NORMAL' or 'FULL'"):
        SQLiteStore(tmp_path / "x.db", synchronous="OFF")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="clock must be callable"):
        SQLiteStore(tmp_path / "x.db", clock=1.0)  # type: ignore[arg-type]


@pytest.mark.parametrize("timeout", [-1, -0.001, float("nan"), float("inf"), "5", None, True])
def test_a_timeout_that_is_not_a_finite_number_of_seconds_is_refused(tmp_path, timeout):
    with pytest.raises(ValueError, match=r"timeout must be a finite number of seconds, 0 or more"):
        SQLiteStore(tmp_path / "x.db", timeout=timeout)
    assert not (tmp_path / "x.db").exists()  # refused before the file is made


@pytest.mark.parametrize("timeout", [0, 0.5, 30])
def test_a_timeout_of_0_or_more_seconds_is_taken(tmp_path, timeout):
    SQLiteStore(tmp_path / f"{timeout}.db", timeout=timeout).close()


def test_reopening_keeps_everything(tmp_path, clock):
    path = tmp_path / "again.db"
    events = events_of()
    with SQLiteStore(path, clock=clock) as store:
        store.create("s", events, status="completed", steps=1)
    with SQLiteStore(path) as store:
        assert store.schema_version == SCHEMA_VERSION
        assert store.events("s") == events


def test_a_batch_of_more_events_than_one_insert_holds_is_stored_whole(tmp_path, clock):
    # A batch's rows go in by INSERTs of up to _ROWS_PER_INSERT rows each: a session
    # created with 150 initial messages, and one that gets them in one append.
    from agentloop import EventLog

    log = EventLog()
    messages = [UserMessage(f"u-{index}", f"message {index}") for index in range(150)]
    run(messages, model=FunctionModel(lambda request: "ok"), tools=[], log=log, clock=lambda: 5.0)
    events = list(log)
    assert len(events) > 2 * store_module._ROWS_PER_INSERT
    path = tmp_path / "big.db"
    with SQLiteStore(path, clock=clock) as store:
        store.create("created", events, status="completed", steps=1)
        store.create("appended", events[:1], status="running", steps=0)
        store.append("appended", events[1:], expected=1, status="completed", steps=1)
        assert store.commits == 3
    with SQLiteStore(path) as store:  # (read afresh: every row and link checked)
        assert store.events("created") == store.events("appended") == events
        store.export("appended", tmp_path / "appended.jsonl")
    assert replay.read_log(tmp_path / "appended.jsonl") == events


def test_an_event_too_deep_for_msgspecs_encoder_is_stored_as_write_log_writes_it(tmp_path):
    # The store writes a line in one call (_Format2.row); an event nested deeper than
    # msgspec's recursive encoder goes takes encode_event's iterative way, as a log
    # file's line does: the same bytes, the same chain.
    call = agentloop.ToolCall("c1", "add", {"deep": nested(3000)})
    events = [
        agentloop.SessionStartEvent(sequence=0, max_steps=1),
        agentloop.ToolCallEvent(sequence=1, at=1.5, step=1, call=call),
    ]
    with SQLiteStore(tmp_path / "deep.db") as store:
        store.create("s", events[:1], status="running", steps=1)
        store.append("s", events[1:], expected=1, status="running", steps=1)
        store.export("s", tmp_path / "stored.jsonl")
    with SQLiteStore(tmp_path / "deep.db") as store:  # (read afresh: every link checked)
        assert [event.type for event in store.events("s")] == ["session.start", "tool.call"]
    replay.write_log(tmp_path / "written.jsonl", events)
    stored, written = (
        (tmp_path / "stored.jsonl").read_bytes(),
        (tmp_path / "written.jsonl").read_bytes(),
    )
    assert stored.split(b"\n")[1:] == written.split(b"\n")[1:]  # (headers name no library version)


def test_another_sqlite_database_is_refused(tmp_path):
    path = tmp_path / "other.db"
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE things (x)")
    db.commit()
    db.close()
    with pytest.raises(StoreVersionError, match=r"not an agentloop store .*\['things'\]"):
        SQLiteStore(path)
    # Nothing was added to it.
    db = sqlite3.connect(path)
    assert db.execute("SELECT name FROM sqlite_master").fetchall() == [("things",)]
    db.close()


def test_a_file_that_is_not_a_database_is_refused(tmp_path):
    path = tmp_path / "text.db"
    path.write_text("hello, I am not SQLite " * 100)
    with pytest.raises(StoreError, match="cannot open the store: file is not a database"):
        SQLiteStore(path)


def test_a_store_that_cannot_be_created_is_a_store_error(tmp_path):
    # (sqlite3.OperationalError escaped the constructor, and `python -m agentloop
    # demo --store` printed a traceback.)
    path = tmp_path / "no such directory" / "x.db"
    with pytest.raises(StoreError, match="cannot open the store: unable to open database file"):
        SQLiteStore(path)
    assert not path.parent.exists()


def test_a_store_of_a_newer_schema_is_refused(tmp_path):
    path = tmp_path / "future.db"
    SQLiteStore(path).close()
    db = sqlite3.connect(path)
    db.execute("INSERT INTO schema_version VALUES (?, 0, '9.0')", (SCHEMA_VERSION + 1,))
    db.commit()
    db.close()
    newer = SCHEMA_VERSION + 1
    with pytest.raises(StoreVersionError, match=f"schema version {newer} is newer") as caught:
        SQLiteStore(path)
    assert caught.value.version == newer


def test_closed_store(tmp_path):
    store = SQLiteStore(tmp_path / "c.db")
    store.close()
    store.close()  # idempotent
    assert repr(store).endswith(" closed>")
    with pytest.raises(StoreError, match="the store is closed"):
        store.sessions()


# --------------------------------------------------------------------------- migrations


def load_fixture_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("make_store_fixture", FIXTURE_SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    saved = list(sys.path)
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path[:] = saved
    return module


@pytest.fixture(scope="module")
def fixture_script() -> ModuleType:
    return load_fixture_script()


def schema_dumps() -> list[Path]:
    return sorted((ROOT / "fixtures" / "store").glob("schema-*.sql"))


def test_there_is_a_golden_store_of_every_schema_version():
    assert [p.name for p in schema_dumps()] == [
        f"schema-{n}.sql" for n in range(1, SCHEMA_VERSION + 1)
    ]


def test_the_fixture_script_does_not_rewrite_a_released_store(fixture_script, capsys):
    assert fixture_script.main() == 0
    assert "released stores are never rewritten" in capsys.readouterr().out


def test_the_fixture_script_writes_the_store_it_describes(fixture_script, tmp_path, monkeypatch):
    # Recording it again gives the same sessions and events (only the library
    # version in schema_version may differ, and the rules revision the sessions
    # record: the golden store keeps the one it was recorded under).
    monkeypatch.setattr(fixture_script, "HERE", tmp_path)
    assert fixture_script.main() == 0
    fresh, golden = tmp_path / "fresh.db", tmp_path / "golden.db"
    name = f"schema-{SCHEMA_VERSION}.sql"
    fixture_script.restore((tmp_path / "store" / name).read_text(), fresh)
    fixture_script.restore((ROOT / "fixtures" / "store" / name).read_text(), golden)
    with SQLiteStore(fresh) as a, SQLiteStore(golden) as b:
        assert a.sessions() == b.sessions()
        for info in a.sessions():
            assert a.events(info.id) == under_rules(b.events(info.id), RULES_REVISION)


@pytest.mark.parametrize("dump", schema_dumps(), ids=lambda p: p.name)
def test_every_golden_store_opens_and_its_sessions_continue(dump, fixture_script, tmp_path):
    path = tmp_path / "golden.db"
    fixture_script.restore(dump.read_text(), path)
    check_golden_store(path, fixture_script)


def check_golden_store(path: Path, script: ModuleType) -> None:
    """The sessions of fixtures/make_store_fixture.py, continued to their end (four,
    and from schema 3 on a fifth, ``steered``)."""
    with SQLiteStore(path) as store:
        assert store.schema_version == len(store_module.MIGRATIONS)
        statuses = {info.id: info.status for info in store.sessions()}
        steered = statuses.pop("steered", None)
        assert statuses == {
            "finished": "completed",
            "parked": "paused",
            "answered": "paused",
            "crashed": "running",
        }
        assert sorted(store.runnable()) == ["answered", "crashed"]  # the lease expired long ago
        for info in store.sessions():
            replay.replay(store.events(info.id))  # every stored log replays
        expected = run(
            script.messages("finished"),
            model=FunctionModel(script.answer),
            tools=script.TOOLS,
            system=script.SYSTEM,
            on_pause=lambda pause: Resume({"approved": True}),
        )
        options = {"model": FunctionModel(script.answer), "tools": script.TOOLS}
        finished = replay.run_durable(store, "finished", **options)
        assert finished == expected
        parked = replay.run_durable(store, "parked", **options)
        assert type(parked) is replay.Parked and parked.pause.reason == "approval"
        replay.answer(store, "parked", Resume({"approved": True}))
        for session_id in ("parked", "answered", "crashed"):
            result = replay.run_durable(store, session_id, **options)
            if type(result) is replay.Parked:  # "crashed" goes on to its approval
                assert session_id == "crashed"
                replay.answer(store, session_id, Resume({"approved": True}))
                result = replay.run_durable(store, session_id, **options)
            assert result.status == "completed"
            assert result.final_text == expected.final_text
            assert len(result.messages) == len(expected.messages)
            assert replay.replay(store.events(session_id)).result == result
        if steered is not None:
            info = store.session("steered")
            assert (steered, info.answered, info.queued) == ("paused", False, 1)
            assert store.queued_for("steered")[0][1] == script.STEER
            assert type(replay.run_durable(store, "steered", **options)) is replay.Parked
            replay.answer(store, "steered", Resume({"approved": True}))
            result = replay.run_durable(store, "steered", **options)
            assert (result.status, result.final_text) == ("completed", expected.final_text)
            # The steering message was delivered (at the pause, before the answer) and
            # appended after the approved tool's result.
            assert script.STEER.message in result.messages
            assert len(result.messages) == len(expected.messages) + 1
            assert store.session("steered").queued == 0
            assert replay.replay(store.events("steered")).result == result


def test_a_store_of_schema_1_is_migrated_by_a_later_schema(fixture_script, tmp_path, monkeypatch):
    # Schemas 2 to 6 and a real step 7 (a column and an index), as a later release
    # would add it: a store written by schema 1 is migrated when opened, keeps every
    # row, and its sessions continue.
    path = tmp_path / "old.db"
    fixture_script.restore((ROOT / "fixtures" / "store" / "schema-1.sql").read_text(), path)
    step_5 = (
        "ALTER TABLE sessions ADD COLUMN labels TEXT NOT NULL DEFAULT '[]'",
        "CREATE INDEX sessions_by_update ON sessions (updated)",
    )
    monkeypatch.setattr(store_module, "MIGRATIONS", [*store_module.MIGRATIONS, step_5])
    with SQLiteStore(path, clock=FakeClock(2e9)) as store:
        assert store.schema_version == 7
        rows = store._db.execute("SELECT version, applied FROM schema_version").fetchall()
        assert rows == [(1, 1767225600.25), *[(version, 2e9) for version in range(2, 8)]]
        assert store._db.execute("SELECT DISTINCT labels FROM sessions").fetchall() == [("[]",)]
        assert len(store.sessions()) == 4
    check_golden_store(path, fixture_script)  # (opened again: nothing more to migrate)


def test_a_migration_may_be_a_function_and_a_failed_one_changes_nothing(tmp_path, monkeypatch):
    path = tmp_path / "m.db"
    SQLiteStore(path).close()

    def broken(db: sqlite3.Connection) -> None:
        db.execute("ALTER TABLE sessions ADD COLUMN half_done TEXT")
        raise RuntimeError("step 2 failed")

    monkeypatch.setattr(store_module, "MIGRATIONS", [*store_module.MIGRATIONS, broken])
    with pytest.raises(RuntimeError, match="step 2 failed"):
        SQLiteStore(path)
    monkeypatch.undo()
    with SQLiteStore(path) as store:  # still the schema, and the column was rolled back
        assert store.schema_version == SCHEMA_VERSION
        columns = [row[1] for row in store._db.execute("PRAGMA table_info(sessions)")]
        assert "half_done" not in columns

    def fine(db: sqlite3.Connection) -> None:
        db.execute("ALTER TABLE sessions ADD COLUMN done TEXT")

    monkeypatch.setattr(store_module, "MIGRATIONS", [*store_module.MIGRATIONS, fine])
    with SQLiteStore(path) as store:
        assert store.schema_version == SCHEMA_VERSION + 1


def _raw(path: Path, sql: str) -> list[Any]:
    db = sqlite3.connect(path)
    try:
        return db.execute(sql).fetchall()
    finally:
        db.close()


_ALL_EVENTS = "SELECT session_id, sequence, event, link FROM events ORDER BY session_id, sequence"
# (From schema 6 an event's session is its key's high bits, the session's number.)
_ALL_EVENTS_6 = (
    "SELECT id, sequence, event, link FROM events JOIN sessions ON event_key >> 32 = number "
    "ORDER BY id, sequence"
)
_EVENTS_TABLE = (
    "SELECT type, name, sql FROM sqlite_master WHERE tbl_name LIKE 'events%' "
    "OR name = 'sessions_by_number'"
)


def _files_of_rows(path: Path) -> dict[str, bytes]:
    """The log file of each session of a store, built from its rows read by hand
    (whatever the schema: what export writes, the stored lines and links as they are)."""
    db = sqlite3.connect(path)
    try:
        files = {}
        for session_id, header in db.execute("SELECT id, log_header FROM sessions").fetchall():
            rows = db.execute(
                "SELECT sequence, event, link FROM events WHERE session_id = ? ORDER BY sequence",
                (session_id,),
            ).fetchall()
            blobs = db.execute(store_module._SELECT_BLOBS, (session_id,)).fetchall()
            start = store_module._start(header).link.decode()
            lines = [store_module._file_line(header, start), *store_module._lines_of(rows, blobs)]
            files[session_id] = b"".join(lines)
        return files
    finally:
        db.close()


def _exports(path: Path, folder: Path) -> dict[str, bytes]:
    folder.mkdir()
    with SQLiteStore(path) as store:
        for info in store.sessions():
            store.export(info.id, folder / f"{info.id}.jsonl")
    return {file.stem: file.read_bytes() for file in folder.iterdir()}


def test_schema_6_keys_the_events_by_one_integer_byte_for_byte(fixture_script, tmp_path):
    # Schema 6 numbers the sessions (in the order they were created) and copies
    # every event of a schema-5 store into a table keyed by the session's number
    # times 2**32 plus the sequence: the same rows, byte for byte, so every session
    # exports the same log file as before, and continues.
    path = tmp_path / "old.db"
    fixture_script.restore((ROOT / "fixtures" / "store" / "schema-5.sql").read_text(), path)
    rows = _raw(path, _ALL_EVENTS)
    assert len(rows) > 50
    before = _files_of_rows(path)
    assert _raw(path, "SELECT max(version) FROM schema_version") == [(5,)]
    after = _exports(path, tmp_path / "after")  # (migrated)
    assert _raw(path, "SELECT max(version) FROM schema_version") == [(6,)]
    assert after == before and len(after) == 5
    assert _raw(path, _ALL_EVENTS_6) == rows
    tables = {name: sql for _, name, sql in _raw(path, _EVENTS_TABLE)}
    assert sorted(tables) == ["events", "sessions_by_number"]
    assert "event_key INTEGER PRIMARY KEY" in tables["events"]
    assert tables["sessions_by_number"].startswith("CREATE UNIQUE INDEX")
    numbers = _raw(path, "SELECT number, id FROM sessions ORDER BY number")
    assert numbers == [
        (1, "finished"),
        (2, "parked"),
        (3, "answered"),
        (4, "steered"),
        (5, "crashed"),
    ]
    keys = _raw(path, "SELECT event_key, sequence FROM events")
    assert all(key & 0xFFFFFFFF == sequence for key, sequence in keys)
    assert len(keys) == len(rows)
    # An older agentloop still running on the file cannot write an event into it
    # (its INSERT names the session_id column, which is gone): it fails, rather
    # than store a row that SQLite would key after the last one.
    db = sqlite3.connect(path)
    with pytest.raises(sqlite3.OperationalError, match="has no column named session_id"):
        db.execute(
            "INSERT INTO events (session_id, sequence, event, link) VALUES (?, ?, ?, ?)",
            ("crashed", 99, "{}", "0000000000000000"),
        )
    db.close()
    check_golden_store(path, fixture_script)


def test_a_failed_schema_6_migration_leaves_the_schema_5_store_as_it_was(
    fixture_script, tmp_path, monkeypatch
):
    # The copy runs in the migration's transaction: a store whose migration stops
    # half-way (here right after its last statement: the copy and the rename done)
    # is still the schema-5 store, every event in its old table.
    path = tmp_path / "old.db"
    fixture_script.restore((ROOT / "fixtures" / "store" / "schema-5.sql").read_text(), path)
    rows, tables = _raw(path, _ALL_EVENTS), _raw(path, _EVENTS_TABLE)
    columns = _raw(path, "PRAGMA table_info(sessions)")

    def broken(db: sqlite3.Connection) -> None:
        store_module._schema_6(db)
        db.execute("SELECT * FROM missing")

    monkeypatch.setattr(store_module, "MIGRATIONS", [*store_module.MIGRATIONS[:5], broken])
    with pytest.raises(StoreError, match="cannot open the store: no such table: missing"):
        SQLiteStore(path)
    assert _raw(path, "SELECT max(version) FROM schema_version") == [(5,)]
    assert _raw(path, _EVENTS_TABLE) == tables
    assert "WITHOUT ROWID" in tables[0][2]
    assert _raw(path, "PRAGMA table_info(sessions)") == columns
    assert _raw(path, _ALL_EVENTS) == rows
    monkeypatch.undo()
    with SQLiteStore(path) as store:
        assert store.schema_version == 6
    assert _raw(path, _ALL_EVENTS_6) == rows


# --------------------------------------------------------------------------- writing and reading


def file_of(events: list[Event], tmp_path: Path) -> bytes:
    """The log file LogWriter writes for ``events``."""
    path = tmp_path / "written.jsonl"
    with replay.LogWriter(path) as writer:
        for event in events:
            writer.write(event)
    data = path.read_bytes()
    path.unlink()
    return data


def test_an_append_renews_the_lease_until_the_session_parks_or_finishes(store, clock):
    events = events_of()
    store.create("s", events[:3], status="running", steps=1, owner="w", lease_seconds=10)
    clock.now = 1004.0
    store.append(
        "s", events[3:5], expected=3, status="running", steps=1, owner="w", lease_seconds=10
    )
    info = store.session("s")
    assert (info.lease_owner, info.lease_expires) == ("w", 1014.0)
    # Parking releases the lease with the events that park: an answered session is
    # runnable at once, even if its worker died before calling release().
    events, at = paused_of()
    store.create("p", events[:3], status="running", steps=1, owner="w", lease_seconds=10)
    store.append(
        "p", events[3:at], expected=3, status="paused", steps=1, owner="w", lease_seconds=10
    )
    info = store.session("p")
    assert (info.status, info.lease_owner, info.lease_expires) == ("paused", None, None)
    store.put_answer("p", Resume())
    assert store.runnable() == ["p"]


def test_a_session_created_finished_holds_no_lease(store):
    events = events_of()
    store.create("s", events, status="completed", steps=1, owner="w", lease_seconds=10)
    info = store.session("s")
    assert (info.status, info.lease_owner, info.lease_expires) == ("completed", None, None)
    assert store.release("s", "w") is False  # nothing left to give up


def test_create_append_and_read_back(store, clock, tmp_path):
    events = events_of()
    store.create("s", events[:3], status="running", steps=1, owner="w", lease_seconds=10)
    info = store.session("s")
    assert info == SessionInfo(
        id="s",
        status="running",
        steps=1,
        events=3,
        created=1000.0,
        updated=1000.0,
        lease_owner="w",
        lease_expires=1010.0,
        answered=False,
        config={
            "system": None,
            "max_steps": 8,
            "budget": None,
            "tools": [],
            "request_sequence_start": 0,
        },
    )
    assert not info.finished
    clock.now = 1005.0
    store.append(
        "s", events[3:], expected=3, status="completed", steps=1, owner="w", lease_seconds=10
    )
    info = store.session("s")
    # A finished session holds no lease: released with its last events, in the same
    # transaction (a worker killed right after leaves no lease behind).
    assert (info.status, info.events, info.updated, info.lease_owner, info.lease_expires) == (
        "completed",
        len(events),
        1005.0,
        None,
        None,
    )
    assert info.finished
    assert store.events("s") == events
    assert store.load("s") == (info, events)
    assert store.commits == 2
    # Stored as the lines of the log file (format 2), each without its link member,
    # and the link: the file LogWriter writes for the run, row by row.
    rows = store._db.execute("SELECT event, link FROM events ORDER BY sequence").fetchall()
    header, *lines = file_of(events, tmp_path).splitlines()
    assert [f'{event[:-1]},"#":"{link}"}}'.encode() for event, link in rows] == lines
    stored_header = store._db.execute("SELECT log_header FROM sessions").fetchone()[0]
    assert stored_header.encode()[:-1] == header[: -len(',"#":"0123456789abcdef"}')]


def test_append_without_an_owner_skips_the_lease(store):
    events = events_of()
    store.create("s", events[:2], status="running", steps=0)
    store.append("s", events[2:], expected=2, status="completed", steps=1)
    assert store.session("s").lease_owner is None
    assert store.events("s") == events


def test_the_config_of_an_invalid_transcript_is_empty(store):
    loop = agent_loop([{"role": "nobody"}], tools=[])
    with pytest.raises(StopIteration):
        next(loop)
    store.create("bad", list(loop.log), status="failed", steps=0)
    assert store.session("bad").config == {}


def test_the_config_holds_the_budget(store):
    loop = agent_loop([UserMessage("u", "x")], tools=[], budget=Budget(max_turns=2))
    next(loop)
    store.create("b", list(loop.log), status="running", steps=1)
    assert store.session("b").config["budget"] == {
        "max_turns": 2,
        "max_tool_calls": None,
        "max_wall_seconds": None,
        "max_input_tokens": None,
        "max_output_tokens": None,
        "max_total_tokens": None,
    }


def test_sessions_are_listed_oldest_first_and_by_status(store, clock):
    for n, session_id in enumerate(("b", "a", "c")):
        clock.now = 1000.0 + n
        status = "completed" if session_id == "c" else "running"
        events = events_of(session=session_id)
        store.create(
            session_id, events if status == "completed" else events[:3], status=status, steps=1
        )
    assert [info.id for info in store.sessions()] == ["b", "a", "c"]
    assert [info.id for info in store.sessions(status="completed")] == ["c"]
    assert store.sessions(status="paused") == []
    with pytest.raises(ValueError, match="status must be one of"):
        store.sessions(status="done")


def test_a_second_writer_gets_a_conflict_naming_session_and_sequences(tmp_path):
    # Two connections (two workers) both believe the session continues at 3.
    path = tmp_path / "two.db"
    events = events_of()
    with SQLiteStore(path) as first, SQLiteStore(path) as second:
        first.create("s", events[:3], status="running", steps=1)
        first.append("s", events[3:5], expected=3, status="running", steps=1)
        with pytest.raises(StoreConflict) as caught:
            second.append("s", events[3:5], expected=3, status="running", steps=1)
        assert (caught.value.session_id, caught.value.expected, caught.value.actual) == ("s", 3, 5)
        assert str(caught.value) == (
            "session 's': expected to append at sequence 3, but the store holds 5 events "
            "(another writer advanced the session); nothing was written"
        )
        assert second.commits == 0
        assert second.events("s") == events[:5]


def test_creating_an_existing_session_is_a_conflict(store):
    events = events_of()
    store.create("s", events, status="completed", steps=1)
    with pytest.raises(StoreConflict, match=r"holds \d+ events .*created by another writer"):
        store.create("s", events, status="completed", steps=1)


def test_bad_batches_are_refused(store):
    events = events_of()
    store.create("s", events[:1], status="running", steps=0)
    with pytest.raises(ValueError, match=r"has sequence 0, expected 1 \(a batch continues the"):
        store.append("s", events[0:2], expected=1, status="running", steps=0)
    with pytest.raises(ValueError, match="status must be one of"):
        store.append("s", events[1:2], expected=1, status="finished", steps=0)
    with pytest.raises(ValueError, match="a new session needs its first events"):
        store.create("t", [], status="running", steps=0)
    # (An event's key is its session's number times 2**32 plus its sequence.)
    last = msgspec.structs.replace(events[1], sequence=2**32)
    with pytest.raises(ValueError, match=r"at most 4294967296 events \(2\*\*32: .* to 4294967297"):
        store.append("s", [last], expected=2**32, status="running", steps=0)
    assert store.events("s") == events[:1]


def test_unknown_sessions(store):
    calls: list[Callable[[], object]] = [
        lambda: store.session("nope"),
        lambda: store.events("nope"),
        lambda: store.append("nope", [], expected=0, status="running", steps=0),
        lambda: store.acquire("nope", "w", 1.0),
        lambda: store.put_answer("nope", Resume()),
    ]
    for call in calls:
        with pytest.raises(SessionNotFound) as caught:
            call()
        assert str(caught.value) == "no session 'nope' in the store"
        assert isinstance(caught.value, KeyError) and caught.value.session_id == "nope"
    assert store.find("nope") is None
    assert store.answer_for("nope") is None


def test_export_writes_a_log_file(store, tmp_path):
    events = events_of()
    store.create("s", events, status="completed", steps=1)
    path = tmp_path / "s.jsonl"
    assert store.export("s", path) == len(events)
    assert replay.read_log(path) == events


def test_export_writes_the_stored_lines_and_links(store, tmp_path, capsys):
    events = events_of()
    store.create("s", events[:3], status="running", steps=1)
    store.append("s", events[3:], expected=3, status="completed", steps=1)
    path = tmp_path / "s.jsonl"
    assert store.export("s", path) == len(events)
    assert path.read_bytes() == file_of(events, tmp_path)
    assert replay_cli.main(["verify", str(path)]) == 0
    assert "hash chain intact" in capsys.readouterr().out


def test_export_of_a_session_written_by_another_agentloop_keeps_its_header(store, tmp_path):
    # Its chain starts at its own header: the file is the stored lines, not a new log.
    store.create("s", events_of(), status="completed", steps=1)
    header = store._db.execute("SELECT log_header FROM sessions").fetchone()[0]
    older = header.replace(agentloop.__version__, "0.0.9")
    relink(store, "s", header=older)
    store.export("s", tmp_path / "s.jsonl")
    data = (tmp_path / "s.jsonl").read_bytes()
    assert data.startswith(older.encode()[:-1] + b',"#":"')
    assert data != file_of(events_of(), tmp_path)
    assert replay.read_log(tmp_path / "s.jsonl") == events_of()


def relink(store: SQLiteStore, session_id: str, *, header: str | None = None) -> None:
    """Recompute every link of a stored session (what a forger does; optionally
    with another header)."""
    db = store._db
    if header is not None:
        db.execute("UPDATE sessions SET log_header = ? WHERE id = ?", (header, session_id))
    header = db.execute("SELECT log_header FROM sessions WHERE id = ?", (session_id,)).fetchone()[0]
    previous = link(b"", header.encode()[:-1])
    rows = db.execute(
        "SELECT sequence, event FROM events "
        "WHERE event_key >> 32 = (SELECT number FROM sessions WHERE id = ?) ORDER BY sequence",
        (session_id,),
    ).fetchall()
    for sequence, event in rows:
        previous = link(previous, event.encode()[:-1])
        db.execute(
            "UPDATE events SET link = ? "
            "WHERE event_key >> 32 = (SELECT number FROM sessions WHERE id = ?) AND sequence = ?",
            (previous.decode(), session_id, sequence),
        )


@settings(max_examples=examples(50), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_sessions_appended_in_any_interleaving_each_read_back_as_their_log(data):
    # Schema 6 keys an event by its session's number and its sequence: sessions
    # appended in turns (one's rows between another's in the file, by store objects
    # that remember the chains or new ones) each read back and export as their own
    # log file, whatever the order.
    count = data.draw(st.integers(2, 4))
    logs = {f"s{index}": events_of(f"text {index}", f"s{index}") for index in range(count)}
    batches: dict[str, list[slice]] = {}
    for session_id, events in logs.items():
        ends = sorted(set(data.draw(st.lists(st.integers(1, len(events)), max_size=4))))
        batches[session_id] = [
            slice(a, b) for a, b in zip([0, *ends], [*ends, len(events)], strict=True) if b > a
        ]
    turns = [session_id for session_id, todo in batches.items() for _ in todo]
    order = data.draw(st.permutations(turns))
    with tempfile.TemporaryDirectory() as tmp:
        store = SQLiteStore(Path(tmp) / "s.db")
        try:
            for session_id in order:
                batch, events = batches[session_id].pop(0), logs[session_id]
                status = "completed" if batch.stop == len(events) else "running"
                if data.draw(st.booleans()):  # another worker continues
                    store.close()
                    store = SQLiteStore(Path(tmp) / "s.db")
                if batch.start == 0:
                    store.create(session_id, events[batch], status=status, steps=1)
                else:
                    store.append(
                        session_id, events[batch], expected=batch.start, status=status, steps=1
                    )
            for session_id, events in logs.items():
                assert store.events(session_id) == events
                store.export(session_id, Path(tmp) / "export.jsonl")
                assert (Path(tmp) / "export.jsonl").read_bytes() == file_of(events, Path(tmp))
        finally:
            store.close()


@settings(max_examples=examples(100), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(events=hand_built_events(), data=st.data())
def test_any_session_in_any_batches_is_stored_as_its_log_file(events, data):
    # Stored in batches (group commits) split anywhere, by a store object that
    # remembers the chain or by new ones that read it back: the rows are the lines
    # of the log file, in the store as in the export.
    ends = sorted(set(data.draw(st.lists(st.integers(1, len(events)), max_size=4))))
    batches = [slice(a, b) for a, b in zip([0, *ends], [*ends, len(events)], strict=True) if b > a]
    with tempfile.TemporaryDirectory() as tmp:
        path, file = Path(tmp) / "s.db", Path(tmp) / "s.jsonl"
        replay.write_log(file, events)
        store = SQLiteStore(path)
        try:

            def status(batch: slice) -> str:  # what the session's status is after it
                last = events[batch][-1]
                return last.status if type(last) is agentloop.RunFinishedEvent else "running"

            store.create("s", events[batches[0]], status=status(batches[0]), steps=0)
            for batch in batches[1:]:
                if data.draw(st.booleans()):  # another worker continues it
                    store.close()
                    store = SQLiteStore(path)
                store.append(
                    "s", events[batch], expected=batch.start, status=status(batch), steps=0
                )
            assert [agentloop.encode_event(e) for e in store.events("s")] == [
                agentloop.encode_event(e) for e in replay.read_log(file)
            ]
            store.export("s", Path(tmp) / "export.jsonl")
            assert (Path(tmp) / "export.jsonl").read_bytes() == file.read_bytes()
        finally:
            store.close()


BROKEN = "the hash chain is broken here"


@pytest.mark.parametrize(
    ("sql", "message"),
    [
        ("UPDATE events SET sequence = 99 WHERE sequence = 2", "event #99: the stored events have"),
        (  # (moved: the rows are read in the order of their keys)
            "UPDATE events SET event_key = event_key + 97 WHERE sequence = 2",
            "event #3: the stored events have a gap",
        ),
        ("DELETE FROM events WHERE sequence = 2", "event #3: the stored events have a gap"),
        ("UPDATE events SET event = replace(event, 'echo', 'ECHO')", f"event #6: {BROKEN}"),
        ("UPDATE events SET event = 'nope' WHERE sequence = 1", f"event #1: {BROKEN}"),
        ("UPDATE events SET link = NULL WHERE sequence = 4", "event #4: has no hash chain link"),
        (
            "UPDATE events SET link = (SELECT link FROM events WHERE sequence = 1) "
            "WHERE sequence = 2",
            f"event #2: {BROKEN}",
        ),
        ("UPDATE sessions SET log_header = replace(log_header, '3', '2')", f"event #0: {BROKEN}"),
        ("UPDATE sessions SET log_header = NULL", "its log header is missing"),
        (
            "UPDATE events SET event = CAST(event AS BLOB) WHERE sequence = 1",
            "event #1: the stored event is not text",
        ),
    ],
)
def test_a_stored_session_is_tamper_evident(store, sql, message):
    store.create("s", events_of(), status="completed", steps=1)
    store._db.execute(sql)
    with pytest.raises(StoreError, match=f"session 's'(, |: ){message}"):
        store.events("s")


@pytest.mark.parametrize(
    ("sql", "message"),
    [
        ("UPDATE events SET event = 'nope}' WHERE sequence = 1", "not a valid agentloop event"),
        (
            "UPDATE events SET event = replace(event, '\"sequence\":1', '\"sequence\":7') "
            "WHERE sequence = 1",
            "the stored event says sequence 7",
        ),
        (
            "UPDATE events SET event = replace(event, '{\"type\"', '{ \"type\"') "
            "WHERE sequence = 1",
            "not in canonical form",
        ),
        (
            'UPDATE events SET event = replace(event, \'"step":1\', \'"step":1,"x":2\') '
            "WHERE sequence = 2",
            "unknown field 'x'",
        ),
        (
            'UPDATE events SET event = replace(event, \'"=":"final_text"\', '
            '\'"final_text":"echo hi"\') '
            "WHERE sequence = 10",
            "not in canonical form",
        ),
    ],
)
def test_forged_links_do_not_hide_a_line_that_is_not_canonical(store, sql, message):
    # Every line is checked as read_log checks one, the chain aside.
    store.create("s", events_of(), status="completed", steps=1)
    store._db.execute(sql)
    relink(store, "s")
    with pytest.raises(StoreError, match=f"session 's', event #\\d+: .*{message}"):
        store.events("s")


def test_an_append_to_a_tampered_session(store):
    # An append checks the stored rows unless this store object wrote or read the
    # session's chain up to there (it then checks the last link only); a read
    # always checks every row.
    events = events_of()
    store.create("s", events[:4], status="running", steps=1)
    store._db.execute("UPDATE events SET event = replace(event, 'u-s', 'u-x')")
    with SQLiteStore(store.path) as other, pytest.raises(StoreError, match=f"#1: {BROKEN}"):
        other.append("s", events[4:6], expected=4, status="running", steps=1)
    assert store.session("s").events == 4  # nothing was written
    store.append("s", events[4:6], expected=4, status="running", steps=1)
    with pytest.raises(StoreError, match=f"#1: {BROKEN}"):
        store.events("s")
    store._db.execute("UPDATE events SET link = 'ffffffffffffffff' WHERE sequence = 5")
    with pytest.raises(StoreError, match=f"#1: {BROKEN}"):  # the end changed: all read again
        store.append("s", events[6:], expected=6, status="completed", steps=1)


def test_an_append_continues_a_chain_another_writer_extended(tmp_path):
    # The chain's end is remembered per store object; another object (another
    # process) appending in between is noticed, and the rows are read again.
    path = tmp_path / "two.db"
    events = events_of()
    with SQLiteStore(path) as first, SQLiteStore(path) as second:
        first.create("s", events[:2], status="running", steps=0)
        second.append("s", events[2:4], expected=2, status="running", steps=1)
        first.append("s", events[4:], expected=4, status="completed", steps=1)
        assert first.events("s") == second.events("s") == events
    with SQLiteStore(path) as third:  # nothing remembered: read and checked first
        third.export("s", tmp_path / "s.jsonl")
    assert (tmp_path / "s.jsonl").read_bytes() == file_of(events, tmp_path)


def test_a_store_object_remembers_a_bounded_number_of_chains(store, monkeypatch):
    monkeypatch.setattr(store_module, "_CHAINS_KEPT", 2)
    events = events_of()
    for session_id in ("a", "b", "c"):
        store.create(session_id, events[:3], status="running", steps=1)
    assert list(store._chains) == ["b", "c"]
    store.append("a", events[3:], expected=3, status="completed", steps=1)
    assert list(store._chains) == ["c", "a"]
    assert store.events("a") == events


def test_a_session_of_log_format_1_is_read_and_rewritten_as_format_2_when_appended(
    fixture_script, tmp_path
):
    path = tmp_path / "golden.db"
    fixture_script.restore((ROOT / "fixtures" / "store" / "schema-1.sql").read_text(), path)
    with SQLiteStore(path) as store:
        log_format = "SELECT log_format, log_header FROM sessions WHERE id = 'parked'"
        assert store._db.execute(log_format).fetchone() == (1, None)
        before = store.events("parked")
        assert store._chains == {}  # no chain to remember
        replay.answer(store, "parked", Resume({"approved": True}))
        options = {"model": FunctionModel(fixture_script.answer), "tools": fixture_script.TOOLS}
        assert replay.run_durable(store, "parked", **options).status == "completed"
        assert store._db.execute(log_format).fetchone()[0] == 3
        after = store.events("parked")
        assert after[: len(before)] == before  # the same events, now in format 3
        store.export("parked", tmp_path / "parked.jsonl")
        assert (tmp_path / "parked.jsonl").read_bytes() == file_of(after, tmp_path)
        # A session still in format 1 exports as format 2 too.
        store.export("finished", tmp_path / "finished.jsonl")
        assert replay.read_log(tmp_path / "finished.jsonl") == store.events("finished")


def test_a_damaged_format_1_session_is_reported_like_a_file(fixture_script, tmp_path):
    path = tmp_path / "golden.db"
    fixture_script.restore((ROOT / "fixtures" / "store" / "schema-1.sql").read_text(), path)
    with SQLiteStore(path) as store:
        store._db.execute(
            "UPDATE events SET event = replace(event, ',\"budget\":null', '') "
            "WHERE event_key >> 32 = (SELECT number FROM sessions WHERE id = 'crashed') "
            "AND sequence = 14"
        )
        store._db.execute(
            "UPDATE events SET event = replace(event, '\"step\":1,', '\"step\": 1,') "
            "WHERE event_key >> 32 = (SELECT number FROM sessions WHERE id = 'crashed') "
            "AND sequence = 2"
        )
        with pytest.raises(StoreError, match=r"'crashed', event #2: not in canonical form"):
            store.events("crashed")
        with pytest.raises(StoreError, match=r"'crashed', event #2: not in canonical form"):
            store.append("crashed", [], expected=7, status="running", steps=1)


def test_a_session_in_a_newer_log_format_is_refused(store, tmp_path):
    store.create("s", events_of()[:3], status="running", steps=1)
    store._db.execute("UPDATE sessions SET log_format = 99")
    with pytest.raises(StoreVersionError, match="log format version 99, newer") as caught:
        store.events("s")
    assert caught.value.version == 99
    with SQLiteStore(store.path) as other, pytest.raises(StoreVersionError, match="99, newer"):
        other.append("s", events_of()[3:], expected=3, status="completed", steps=1)


def test_a_transaction_an_interrupt_left_open_is_rolled_back_by_the_next_call(store):
    # A KeyboardInterrupt may stop a call between BEGIN and its try block (or leave
    # a context manager's __enter__ after its generator began the transaction).
    events = events_of()
    store.create("s", events[:3], status="running", steps=1)
    store._db.execute("BEGIN IMMEDIATE")
    store._db.execute("UPDATE sessions SET status = 'paused'")  # half a call
    assert store.session("s").status == "running"
    store._db.execute("BEGIN IMMEDIATE")
    store.append("s", events[3:], expected=3, status="completed", steps=1)
    assert store.session("s").status == "completed"


# --------------------------------------------------------------------------- leases


def test_leases(store, clock):
    store.create("s", events_of()[:3], status="running", steps=1, owner="a", lease_seconds=10)
    with pytest.raises(SessionLeased) as caught:
        store.acquire("s", "b", 10)
    host, pid = socket.gethostname(), os.getpid()
    leased = caught.value
    assert (leased.owner, leased.expires, leased.expires_in, leased.host, leased.pid) == (
        "a",
        1010.0,
        10.0,
        host,
        pid,
    )
    assert str(leased) == (
        f"session 's' is leased by 'a' (process {pid} on host {host!r}) for 10.0 more "
        "seconds (until 1010.000 on the store's clock): another worker is running it (its "
        "process is alive, on this host). Wait for it to finish, or until the lease "
        "expires, and call again; should that process be killed, the next call takes the "
        "session over at once; or free the session at once with store.release('s', 'a'); "
        "a worker restarted with owner='a' takes it back at once"
    )
    assert store.acquire("s", "a", 20).lease_expires == 1020.0  # its own: renewed
    assert store.renew("s", "a", 30) and store.session("s").lease_expires == 1030.0
    assert not store.renew("s", "b", 30)
    clock.now = 1030.0  # expired: b takes it over
    assert store.acquire("s", "b", 10).lease_owner == "b"
    assert not store.release("s", "a")
    assert store.release("s", "b")
    info = store.session("s")
    assert (info.lease_owner, info.lease_expires) == (None, None)


def test_a_finished_session_is_never_leased(store):
    # Its worker released the lease with its last events; one taken now would
    # stay if this worker died before it saw the session finished (nobody runs a
    # finished session again to release it).
    events = events_of()
    store.create("s", events[:3], status="running", steps=1, owner="a", lease_seconds=10)
    store.append("s", events[3:], expected=3, status="completed", steps=1, owner="a")
    info = store.acquire("s", "b", 10)
    assert (info.status, info.lease_owner, info.lease_expires) == ("completed", None, None)
    assert store.session("s").lease_owner is None and not store.release("s", "b")


@pytest.mark.parametrize(
    ("owner", "seconds", "message"),
    [
        ("", 1.0, "a lease owner is a non-empty str"),
        (None, 1.0, "a lease owner is a non-empty str"),
        ("w", 0, "lease_seconds must be a positive number"),
        ("w", float("inf"), "lease_seconds must be a positive number"),
        ("w", "1", "lease_seconds must be a positive number"),
    ],
)
def test_bad_leases(store, owner, seconds, message):
    store.create("s", events_of()[:3], status="running", steps=1)
    with pytest.raises(ValueError, match=message):
        store.acquire("s", owner, seconds)
    with pytest.raises(ValueError, match=message):
        store.renew("s", owner, seconds)


def test_an_append_by_a_worker_that_lost_its_lease_is_refused(store, clock):
    events = events_of()
    store.create("s", events[:3], status="running", steps=1, owner="a", lease_seconds=10)
    clock.now = 1011.0
    store.acquire("s", "b", 10)
    with pytest.raises(SessionLeased, match=r"'a' lost it .* and wrote nothing"):
        store.append("s", events[3:], expected=3, status="completed", steps=1, owner="a")
    # Released (e.g. by another run with the same owner id): a SessionLeased too,
    # what the documented serve loop catches (it was a plain StoreError).
    store.release("s", "b")
    with pytest.raises(SessionLeased, match=r"nobody holds its lease; 'a' lost it") as caught:
        store.append("s", events[3:], expected=3, status="completed", steps=1, owner="a")
    assert (caught.value.owner, caught.value.expires, caught.value.expires_in) == (None, None, 0.0)
    assert "concurrent runs need different ones" in str(caught.value)
    assert len(store.events("s")) == 3


def test_runnable_sessions(store, clock):
    events = events_of()
    store.create("free", events[:3], status="running", steps=1)
    store.create("leased", events[:3], status="running", steps=1, owner="w", lease_seconds=10)
    store.create("expired", events[:3], status="running", steps=1, owner="w", lease_seconds=1)
    store.create("done", events, status="completed", steps=1)
    paused, at = paused_of()
    store.create("parked", paused[:at], status="paused", steps=1)
    store.create("answered", paused[:at], status="paused", steps=1)
    store.put_answer("answered", Resume())
    clock.now = 1005.0
    assert store.runnable() == ["answered", "expired", "free"]


# --------------------------------------------------------------------------- answers


def test_answers(store):
    events, at = paused_of()
    store.create("s", events[:at], status="paused", steps=1)
    store.put_answer("s", Resume({"approved": True}, Budget(max_turns=3)))
    assert store.session("s").answered
    assert store.answer_for("s") == Resume({"approved": True}, Budget(max_turns=3))
    with pytest.raises(StoreError, match=r"already has an answer waiting \(\{\"kind\":\"resume\""):
        store.put_answer("s", Cancel("no"))
    store.append(
        "s", events[at : at + 1], expected=at, status="running", steps=1, consume_answer=True
    )
    assert store.answer_for("s") is None and not store.session("s").answered
    with pytest.raises(StoreError, match=r"is not parked on a pause \(status 'running'\)"):
        store.put_answer("s", Cancel("no"))


_CYCLIC: dict[str, Any] = {}
_CYCLIC["a"] = _CYCLIC


def test_an_answer_as_deep_as_the_limit_is_stored_and_read_back(store):
    events, at = paused_of()
    store.create("s", events[:at], status="paused", steps=1)
    store.put_answer("s", Resume(nested(replay.MAX_ANSWER_DEPTH)))
    assert store.answer_for("s") == Resume(nested(replay.MAX_ANSWER_DEPTH))


@pytest.mark.parametrize(
    ("reply", "error", "message"),
    [
        (ToolResult("c", "x"), TypeError, "an answer is a Resume or a Cancel"),
        (Resume({"x": float("nan")}), ValueError, "payload.x: nan is not a finite number"),
        (Resume({1: "one"}), ValueError, "payload: object key 1 is not a string"),
        (Resume(("a", "tuple")), ValueError, "does not survive a JSON round trip"),
        (Resume({"text": "\udce9"}), ValueError, "cannot be stored: it is not plain JSON"),
        (Resume({"what": object()}), ValueError, "payload.what: object is not a JSON value"),
        # msgspec raised RecursionError on these two (out of replay.answer too).
        (
            Resume(_CYCLIC),
            ValueError,
            "cannot be stored: it is not plain JSON: payload.a: cyclic reference",
        ),
        (
            Resume(nested(5000)),
            ValueError,
            "nests 5000 levels deep, more than MAX_ANSWER_DEPTH \\(256\\)",
        ),
    ],
)
def test_answers_that_would_not_come_back_the_same_are_refused(store, reply, error, message):
    events, at = paused_of()
    store.create("s", events[:at], status="paused", steps=1)
    with pytest.raises(error, match=message):
        store.put_answer("s", reply)
    assert store.answer_for("s") is None


# --------------------------------------------------------------------------- threads


def test_one_store_object_serves_several_threads(tmp_path):
    # Each thread appends its own sessions through the same store object.
    with SQLiteStore(tmp_path / "threads.db") as store:
        errors: list[BaseException] = []

        def work(n: int) -> None:
            try:
                for k in range(5):
                    events = events_of(session=f"{n}-{k}")
                    store.create(f"{n}-{k}", events[:2], status="running", steps=0)
                    store.append(f"{n}-{k}", events[2:], expected=2, status="completed", steps=1)
            except BaseException as exc:  # pragma: no cover - reported below
                errors.append(exc)

        threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert errors == []
        assert len(store.sessions(status="completed")) == 20
        assert store.commits == 40


# --------------------------------------------------------------------------- row and rows agree


def _finished_session(store: SQLiteStore, session_id: str = "s") -> int:
    """A session run to its end by run_durable (a tool call, then text); its event count."""
    from agentloop import ScriptedResponse, ToolCall

    from .helpers import add

    def model_fn(request: Any) -> Any:
        if request.step == 1:
            return ScriptedResponse.tool_calls("r1", ToolCall("c1", "add", {"left": 1, "right": 2}))
        return ScriptedResponse.text("r2", "3")

    replay.run_durable(
        store, session_id, [UserMessage("u1", "1 + 2?")], model=FunctionModel(model_fn), tools=[add]
    )
    return store.session(session_id).events


def _every_read(
    store: SQLiteStore, tmp_path: Path, session_id: str = "s"
) -> list[Callable[[], Any]]:
    """Every way to read a stored session's log, run_durable's included."""
    return [
        lambda: store.events(session_id),
        lambda: store.load(session_id),
        lambda: store.export(session_id, tmp_path / "out.jsonl"),
        lambda: replay.run_durable(store, session_id, model=FunctionModel(lambda r: "x"), tools=[]),
    ]


@pytest.mark.parametrize(
    ("deleted", "missing"),
    [(1, "event #{last} is missing"), (2, "events #{first} to #{last} are missing")],
)
def test_rows_deleted_from_the_end_of_a_session_are_noticed(store, tmp_path, deleted, missing):
    count = _finished_session(store)
    store._db.execute(f"DELETE FROM events WHERE sequence >= {count - deleted}")
    assert store.session("s").events == count  # the row still says so
    message = missing.format(first=count - deleted, last=count - 1)
    for read in _every_read(store, tmp_path):
        with pytest.raises(
            StoreError,
            match=f"session 's': the session row counts {count} "
            f"events but only {count - deleted} are stored: {message} "
            r"\(deleted or lost\)",
        ):
            read()
    assert not (tmp_path / "out.jsonl").exists()


def test_rows_added_behind_the_stores_back_are_noticed(store):
    events = events_of()
    store.create("s", events[:3], status="running", steps=1)
    store._db.execute("UPDATE sessions SET next_sequence = 2")
    with pytest.raises(StoreError, match="counts 2 events but 3 are stored: events #2 to #2"):
        store.events("s")


def test_an_append_to_a_session_whose_last_rows_were_deleted_is_refused(store, tmp_path):
    events = events_of()
    store.create("s", events[:4], status="running", steps=1)
    store._db.execute("DELETE FROM events WHERE sequence = 3")
    with (
        SQLiteStore(store.path) as other,  # (nothing remembered: the rows are read)
        pytest.raises(StoreError, match="counts 4 events but only 3 are stored"),
    ):
        other.append("s", events[4:6], expected=4, status="running", steps=1)
    assert store.session("s").events == 4  # nothing was written


def test_verify_reports_a_session_whose_last_rows_were_deleted(store, capsys):
    count = _finished_session(store, "x")
    store._db.execute(
        "DELETE FROM events WHERE event_key >> 32 = (SELECT number FROM sessions WHERE id = 'x') "
        f"AND sequence >= {count - 2}"
    )
    assert replay_cli.main(["verify", store.path, "--session", "x"]) == 1
    out = capsys.readouterr().out
    assert "NOT verified" in out and f"only {count - 2} are stored" in out


_NOT_UTF8 = "CAST(X'7B2274797065223A22FF227D' AS TEXT)"  # {"type":"\xff"}


@pytest.mark.parametrize(
    ("sql", "message"),
    [
        (f"UPDATE events SET event = {_NOT_UTF8} WHERE sequence = 3", "event #3: the stored event"),
        (
            "UPDATE events SET link = CAST(X'61FE62' AS TEXT) WHERE sequence = 5",
            "event #5: the stored link",
        ),
        ("UPDATE sessions SET config = CAST(X'7BFF7D' AS TEXT)", "the session row's config"),
        (
            "UPDATE sessions SET log_header = CAST(X'7BFF7D' AS TEXT)",
            "the session row's log_header",
        ),
    ],
)
def test_a_row_that_is_not_valid_utf8_is_a_store_error_naming_it(store, tmp_path, sql, message):
    _finished_session(store)
    store._db.execute(sql)
    for read in _every_read(store, tmp_path):
        with pytest.raises(
            StoreError, match=f"session 's'(, |: ){message} is damaged: not valid UTF-8"
        ):
            read()


def test_a_damaged_row_is_a_one_line_error_in_the_cli(store, capsys):
    _finished_session(store)
    store._db.execute(f"UPDATE events SET event = {_NOT_UTF8} WHERE sequence = 3")
    for command in ("show", "verify", "check"):
        code = replay_cli.main([command, store.path, "--session", "s"])
        captured = capsys.readouterr()
        assert code != 0, command
        assert "internal error" not in captured.err, command
        assert "event #3: the stored event is damaged" in captured.out + captured.err, command


def test_a_read_that_sqlite_fails_for_another_reason_is_a_store_error(store, monkeypatch):
    _finished_session(store)
    monkeypatch.setattr(store_module, "_SELECT_ROWS", "SELECT nonsense FROM nowhere")
    with pytest.raises(StoreError, match=r"s\.db: session 's': the store cannot be read: no such"):
        store.events("s")


@pytest.mark.parametrize(
    ("status", "cut", "problem"),
    [
        ("completed", 5, "status 'completed' says the run finished, but the log ends with"),
        ("failed", None, "status 'failed' disagrees with the log's run.finished \\('completed'\\)"),
        (
            "running",
            None,
            "status 'running' says the run goes on, but the log ends with run.finished",
        ),
        ("paused", 5, "status 'paused' says the run waits at a pause, but the log ends with"),
    ],
)
def test_a_status_that_disagrees_with_the_log_is_refused_and_reported(
    store, tmp_path, status, cut, problem
):
    events = events_of()[:cut]
    with pytest.raises(ValueError, match=f"session 's': {problem}"):
        store.create("s", events, status=status, steps=1)
    assert store.find("s") is None
    store.create("s", events[:3], status="running", steps=1)
    with pytest.raises(ValueError, match=f"session 's': {problem}"):
        store.append("s", events[3:], expected=3, status=status, steps=1)
    assert store.session("s").events == 3
    # Written behind the store's back, it is a StoreError on every read (run_durable
    # ended with a bare AssertionError).
    store.append("s", events[3:], expected=3, status="running" if cut else "completed", steps=1)
    store._db.execute(f"UPDATE sessions SET status = '{status}'")
    for read in _every_read(store, tmp_path):
        with pytest.raises(StoreError, match=f"session 's': the session row's {problem}"):
            read()


def test_a_parked_log_may_end_with_messages_delivered_at_its_pause(store):
    events, at = paused_of()
    queued = agentloop.MessageQueuedEvent(
        sequence=at,
        step=events[at - 1].step,
        mode="steer",
        reply=agentloop.Steer(UserMessage("m", "hurry")),
    )
    store.create("s", [*events[:at], queued], status="paused", steps=1)
    assert store.events("s")[-1] == queued


def test_a_session_row_that_counts_no_events_is_reported(store):
    store.create("s", events_of()[:3], status="running", steps=1)
    store._db.execute("DELETE FROM events")
    store._db.execute("UPDATE sessions SET next_sequence = 0")
    with pytest.raises(StoreError, match="session 's': the session row counts no events"):
        store.events("s")


def test_an_append_to_a_session_with_a_row_that_is_not_valid_utf8_is_refused(store):
    events = events_of()
    store.create("s", events[:4], status="running", steps=1)
    store._db.execute(f"UPDATE events SET event = {_NOT_UTF8} WHERE sequence = 1")
    with (
        SQLiteStore(store.path) as other,  # (nothing remembered: the rows are read)
        pytest.raises(StoreError, match="session 's', event #1: the stored event is damaged"),
    ):
        other.append("s", events[4:6], expected=4, status="running", steps=1)
    assert store.session("s").events == 4
