"""replay.SQLiteStore: schema and migrations, optimistic append, leases, answers, reads.

The runner on top (``run_durable``) is tested in ``test_durable.py``, crashes with
real processes in ``test_durable_crash.py``.
"""

from __future__ import annotations

import importlib.util
import sqlite3
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType

import pytest

import agentloop
import replay
from agentloop import (
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
from replay import _store as store_module

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


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def store(tmp_path: Path, clock: FakeClock) -> Iterator[SQLiteStore]:
    with SQLiteStore(tmp_path / "s.db", clock=clock) as opened:
        yield opened


# --------------------------------------------------------------------------- opening


def test_a_new_store_has_the_schema_in_wal_mode(tmp_path):
    path = tmp_path / "new.db"
    with SQLiteStore(path) as store:
        assert store.schema_version == SCHEMA_VERSION == 1
        assert store.sessions() == []
        assert repr(store) == f"<SQLiteStore {str(path)!r} schema 1>"
    db = sqlite3.connect(path)
    assert db.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    assert db.execute("PRAGMA application_id").fetchone() == (store_module.APPLICATION_ID,)
    assert db.execute("SELECT version, library FROM schema_version").fetchall() == [
        (1, agentloop.__version__)
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


def test_reopening_keeps_everything(tmp_path, clock):
    path = tmp_path / "again.db"
    events = events_of()
    with SQLiteStore(path, clock=clock) as store:
        store.create("s", events, status="completed", steps=1)
    with SQLiteStore(path) as store:
        assert store.schema_version == 1
        assert store.events("s") == events


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


def test_a_store_of_a_newer_schema_is_refused(tmp_path):
    path = tmp_path / "future.db"
    SQLiteStore(path).close()
    db = sqlite3.connect(path)
    db.execute("INSERT INTO schema_version VALUES (2, 0, '9.0')")
    db.commit()
    db.close()
    with pytest.raises(StoreVersionError, match="schema version 2 is newer") as caught:
        SQLiteStore(path)
    assert caught.value.version == 2


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
    # version in schema_version may differ).
    monkeypatch.setattr(fixture_script, "HERE", tmp_path)
    assert fixture_script.main() == 0
    fresh, golden = tmp_path / "fresh.db", tmp_path / "golden.db"
    fixture_script.restore((tmp_path / "store" / "schema-1.sql").read_text(), fresh)
    fixture_script.restore((ROOT / "fixtures" / "store" / "schema-1.sql").read_text(), golden)
    with SQLiteStore(fresh) as a, SQLiteStore(golden) as b:
        assert a.sessions() == b.sessions()
        for info in a.sessions():
            assert a.events(info.id) == b.events(info.id)


@pytest.mark.parametrize("dump", schema_dumps(), ids=lambda p: p.name)
def test_every_golden_store_opens_and_its_sessions_continue(dump, fixture_script, tmp_path):
    path = tmp_path / "golden.db"
    fixture_script.restore(dump.read_text(), path)
    check_golden_store(path, fixture_script)


def check_golden_store(path: Path, script: ModuleType) -> None:
    """The four sessions of fixtures/make_store_fixture.py, continued to their end."""
    with SQLiteStore(path) as store:
        assert store.schema_version == len(store_module.MIGRATIONS)
        assert {info.id: info.status for info in store.sessions()} == {
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


def test_a_store_of_schema_1_is_migrated_by_a_later_schema(fixture_script, tmp_path, monkeypatch):
    # A real step 2 (a column and an index), as a later release would add it: a
    # store written by schema 1 is migrated when opened, keeps every row, and its
    # sessions continue.
    path = tmp_path / "old.db"
    fixture_script.restore((ROOT / "fixtures" / "store" / "schema-1.sql").read_text(), path)
    step_2 = (
        "ALTER TABLE sessions ADD COLUMN labels TEXT NOT NULL DEFAULT '[]'",
        "CREATE INDEX sessions_by_update ON sessions (updated)",
    )
    monkeypatch.setattr(store_module, "MIGRATIONS", [*store_module.MIGRATIONS, step_2])
    with SQLiteStore(path, clock=FakeClock(2e9)) as store:
        assert store.schema_version == 2
        rows = store._db.execute("SELECT version, applied FROM schema_version").fetchall()
        assert rows == [(1, 1767225600.25), (2, 2e9)]
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
    with SQLiteStore(path) as store:  # still schema 1, and the column was rolled back
        assert store.schema_version == 1
        columns = [row[1] for row in store._db.execute("PRAGMA table_info(sessions)")]
        assert "half_done" not in columns

    def fine(db: sqlite3.Connection) -> None:
        db.execute("ALTER TABLE sessions ADD COLUMN done TEXT")

    monkeypatch.setattr(store_module, "MIGRATIONS", [*store_module.MIGRATIONS, fine])
    with SQLiteStore(path) as store:
        assert store.schema_version == 2


# --------------------------------------------------------------------------- writing and reading


def test_create_append_and_read_back(store, clock):
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
    assert (info.status, info.events, info.updated, info.lease_expires) == (
        "completed",
        len(events),
        1005.0,
        1015.0,
    )
    assert info.finished
    assert store.events("s") == events
    assert store.load("s") == (info, events)
    assert store.commits == 2
    # Stored as the exact text encode_event writes.
    texts = [row[0] for row in store._db.execute("SELECT event FROM events ORDER BY sequence")]
    assert texts == [agentloop.encode_event(e).decode() for e in events]


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
    }


def test_sessions_are_listed_oldest_first_and_by_status(store, clock):
    for n, session_id in enumerate(("b", "a", "c")):
        clock.now = 1000.0 + n
        status = "completed" if session_id == "c" else "running"
        store.create(session_id, events_of(session=session_id), status=status, steps=1)
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


@pytest.mark.parametrize(
    ("sql", "message"),
    [
        (
            "UPDATE events SET sequence = 99 WHERE sequence = 2",
            "event #3: the stored events have a gap",
        ),
        (
            "UPDATE events SET event = 'nope' WHERE sequence = 1",
            "event #1: the stored event does not decode",
        ),
        (
            "UPDATE events SET event = replace(event, '\"sequence\":1', '\"sequence\":7') "
            "WHERE sequence = 1",
            "event #1: the stored event says sequence 7",
        ),
        (
            "UPDATE events SET event = replace(event, '{\"type\"', '{ \"type\"') "
            "WHERE sequence = 1",
            "event #1: the stored event is not in the canonical form",
        ),
        ("UPDATE events SET event = CAST(event AS BLOB) WHERE sequence = 1", "is not text"),
    ],
)
def test_damaged_events_are_reported_with_session_and_sequence(store, sql, message):
    store.create("s", events_of(), status="completed", steps=1)
    store._db.execute(sql)
    with pytest.raises(StoreError, match=f"session 's', {message}" if "#" in message else message):
        store.events("s")


def test_a_session_in_a_newer_log_format_is_refused(store):
    store.create("s", events_of(), status="completed", steps=1)
    store._db.execute("UPDATE sessions SET log_format = 99")
    with pytest.raises(StoreVersionError, match="log format version 99, newer") as caught:
        store.events("s")
    assert caught.value.version == 99


# --------------------------------------------------------------------------- leases


def test_leases(store, clock):
    store.create("s", events_of(), status="running", steps=1, owner="a", lease_seconds=10)
    with pytest.raises(SessionLeased) as caught:
        store.acquire("s", "b", 10)
    assert (caught.value.owner, caught.value.expires) == ("a", 1010.0)
    assert str(caught.value) == "session 's' is leased by 'a' until 1010.000 (the store's clock)"
    assert store.acquire("s", "a", 20).lease_expires == 1020.0  # its own: renewed
    assert store.renew("s", "a", 30) and store.session("s").lease_expires == 1030.0
    assert not store.renew("s", "b", 30)
    clock.now = 1030.0  # expired: b takes it over
    assert store.acquire("s", "b", 10).lease_owner == "b"
    assert not store.release("s", "a")
    assert store.release("s", "b")
    info = store.session("s")
    assert (info.lease_owner, info.lease_expires) == (None, None)


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
    store.create("s", events_of(), status="running", steps=1)
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
    store.release("s", "b")
    with pytest.raises(StoreError, match=r"'a' does not hold its lease \(nobody does\)"):
        store.append("s", events[3:], expected=3, status="completed", steps=1, owner="a")
    assert len(store.events("s")) == 3


def test_runnable_sessions(store, clock):
    events = events_of()
    store.create("free", events[:3], status="running", steps=1)
    store.create("leased", events[:3], status="running", steps=1, owner="w", lease_seconds=10)
    store.create("expired", events[:3], status="running", steps=1, owner="w", lease_seconds=1)
    store.create("done", events, status="completed", steps=1)
    store.create("parked", events[:3], status="paused", steps=1)
    store.create("answered", events[:3], status="paused", steps=1)
    store.put_answer("answered", Resume())
    clock.now = 1005.0
    assert store.runnable() == ["answered", "expired", "free"]


# --------------------------------------------------------------------------- answers


def test_answers(store):
    events = events_of()
    store.create("s", events[:3], status="paused", steps=1)
    store.put_answer("s", Resume({"approved": True}, Budget(max_turns=3)))
    assert store.session("s").answered
    assert store.answer_for("s") == Resume({"approved": True}, Budget(max_turns=3))
    with pytest.raises(StoreError, match=r"already has an answer waiting \(\{\"kind\":\"resume\""):
        store.put_answer("s", Cancel("no"))
    store.append("s", events[3:4], expected=3, status="running", steps=1, consume_answer=True)
    assert store.answer_for("s") is None and not store.session("s").answered
    with pytest.raises(StoreError, match=r"is not parked on a pause \(status 'running'\)"):
        store.put_answer("s", Cancel("no"))


@pytest.mark.parametrize(
    ("reply", "error", "message"),
    [
        (ToolResult("c", "x"), TypeError, "an answer is a Resume or a Cancel"),
        (Resume({"x": float("nan")}), ValueError, "does not survive a JSON round trip"),
        (Resume({1: "one"}), ValueError, "does not survive a JSON round trip"),
        (Resume(("a", "tuple")), ValueError, "does not survive a JSON round trip"),
        (Resume({"text": "\udce9"}), ValueError, "cannot be stored as JSON"),
        (Resume({"what": object()}), ValueError, "cannot be stored as JSON"),
    ],
)
def test_answers_that_would_not_come_back_the_same_are_refused(store, reply, error, message):
    store.create("s", events_of()[:3], status="paused", steps=1)
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
