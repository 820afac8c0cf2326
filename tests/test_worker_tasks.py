"""A worker's ``tasks``: each thread runs several sessions at once on an asyncio
event loop, their commits grouped into one write transaction per turn of the loop
(DESIGN §29). The same sessions, outcomes and logs as the thread worker's; the
crash test (tests/test_worker_crash.py) runs half its workers this way."""

from __future__ import annotations

import asyncio
import collections
import logging
import sqlite3
from typing import Any

import msgspec
import pytest

import replay
from agentloop import (
    FollowUp,
    FunctionModel,
    ModelError,
    ModelRequest,
    ModelResponse,
    Resume,
    ScriptedResponse,
    Steer,
    ToolCall,
    UserMessage,
    idempotency_key,
    tool,
)
from replay import RateLimit, SessionSetup, SQLiteStore, Worker, WorkerStats
from replay import _store as store_module
from replay import _worker as worker_module
from replay._store import SessionLeased, StoreConflict

from . import worker_factory as sessions
from .test_worker import FakeClock, FlakyModel, approval_factory, approve_me, limiter, request


@pytest.fixture
def store(tmp_path):
    with SQLiteStore(tmp_path / "tasks.db") as store:
        yield store


class Spy:
    """Counts the sessions of each group commit."""

    def __init__(self, store: SQLiteStore) -> None:
        self.sizes: list[int] = []
        self.original = store._append_group
        store._append_group = self  # type: ignore[method-assign]

    def __call__(self, batches: Any) -> Any:
        self.sizes.append(len(batches))
        return self.original(batches)


def test_tasks_run_every_session_and_group_their_commits(tmp_path):
    with SQLiteStore(tmp_path / "threads.db") as threads, SQLiteStore(tmp_path / "t.db") as tasks:
        ids = sessions.submit_sessions(threads, 24)
        sessions.submit_sessions(tasks, 24)
        assert replay.work(threads, sessions.factory, threads=1).finished == {"completed": 24}
        spy = Spy(tasks)
        progress: list[WorkerStats] = []
        stats = replay.work(
            tasks,
            sessions.afactory,
            threads=2,
            tasks=8,
            on_progress=progress.append,
            progress=1e-6,
        )
        assert stats.finished == {"completed": 24}
        assert (stats.parked, stats.stopped, stats.skipped, stats.failed) == (0, 0, 0, 0)
        # 24 sessions x 7 commits after the claim, in far fewer transactions.
        assert sum(spy.sizes) == 24 * 7 and max(spy.sizes) > 1
        assert len(spy.sizes) < 24 * 7 / 2
        for session_id in ids:
            info = tasks.session(session_id)
            assert (info.status, info.steps, info.lease_owner) == ("completed", 4, None)
            grouped, alone = tasks.events(session_id), threads.events(session_id)
            # The same log but for the clock's stamps and the owner's name.
            assert [(e.type, e.sequence) for e in grouped] == [(e.type, e.sequence) for e in alone]
            assert replay.replay(grouped).result.final_text == "done"  # type: ignore[union-attr]
        # (store.events checks every link of each chain.)
        path = tmp_path / "one.jsonl"
        tasks.export(ids[-1], path)
        assert replay.read_log(path) == tasks.events(ids[-1])
        assert tasks.runnable() == []


def test_a_session_that_parks_and_is_answered_in_tasks(store):
    replay.submit(store, "p", [UserMessage("u", "Ask first.")], tools=[approve_me])
    sessions.submit_sessions(store, 3)

    def factory(info: replay.SessionInfo) -> SessionSetup:
        return approval_factory(info) if info.id == "p" else sessions.afactory(info)

    stats = Worker(store, factory, threads=1, tasks=4).run()
    assert (stats.parked, stats.finished) == (1, {"completed": 3})
    replay.answer(store, "p", Resume({"approved": True}))
    stats = Worker(store, factory, threads=1, tasks=4).run()
    assert stats.finished == {"completed": 1}
    assert replay.replay(store.events("p")).result.final_text == "approved"  # type: ignore[union-attr]


def test_a_message_queued_while_the_session_runs_is_delivered_at_a_grouped_boundary(store):
    sessions.submit_sessions(store, 2)

    @tool(name="effect")
    async def effect(n: int) -> dict[str, int]:
        """A side effect, done at most once per idempotency key."""
        if n == 1:
            for session_id in ("s0", "s1"):
                number = store.queue(session_id, Steer(UserMessage(f"u-{session_id}-{n}", "Stop.")))
                if session_id == "s1":
                    store.queue(session_id, FollowUp(UserMessage(f"u-{number}-more", "More?")))
        return {"n": n}

    def answer(request: ModelRequest) -> ScriptedResponse:
        if request.step == 1:
            return ScriptedResponse.tool_calls("r1", ToolCall("c1", "effect", {"n": 1}))
        return ScriptedResponse.text(f"r{request.step}", "stopped")

    def factory(info: replay.SessionInfo) -> SessionSetup:
        return SessionSetup(model=FunctionModel(answer), tools=[effect])

    stats = Worker(store, factory, threads=1, tasks=2).run()
    assert stats.finished == {"completed": 2}
    for session_id, queued in (("s0", 1), ("s1", 2)):
        events = store.events(session_id)
        assert sum(e.type == "message.queued" for e in events) == queued
        assert replay.replay(events).result is not None
    assert store.queued_for("s0") == [] and store.queued_for("s1") == []


def test_the_group_commit_writes_each_session_or_says_why_not(store):
    sessions.submit_sessions(store, 6)
    owner = "me"
    claimed = {
        s: store._claim(s, owner, 60.0, paused=False) for s in ("s0", "s1", "s2", "s4", "s5")
    }
    counts = {s: len(events) for s, (_, events, _) in claimed.items()}
    store.acquire("s3", "someone-else", 60.0)
    number = store.queue("s4", Steer(UserMessage("u-late", "Late.")))
    tail = store.events("s0")[-1]  # (not numbered where s0 continues)
    # s5's last row goes missing, and its chain is not remembered: its append
    # moves its row on, then finds the log damaged (undone with the transaction).
    assert store._db is not None
    store._db.execute(
        "DELETE FROM events WHERE event_key = (SELECT max(event_key) FROM events "
        "WHERE event_key >> 32 = (SELECT number FROM sessions WHERE id = 's5'))"
    )
    del store._chains["s5"]

    def batch(session_id: str, **changes: Any) -> tuple[str, list[Any], dict[str, Any]]:
        options = {
            "expected": counts.get(session_id, 3),
            "status": "running",
            "steps": 1,
            "owner": owner,
            "lease_seconds": 60.0,
            "poll_queued": None,
        }
        return session_id, [], {**options, **changes}

    results = store._append_group(
        [
            batch("s0", steps=2),  # written
            batch("s1", expected=1),  # another writer advanced it
            batch("s2", status="nonsense"),  # refused before the transaction
            batch("s3"),  # leased by someone else
            batch("s4", poll_queued=0),  # a message waits: nothing written
            ("s0", [tail], batch("s0")[2]),  # a batch that does not continue
            batch("s5", steps=7),  # damaged
            batch("s0", steps=9),  # a second batch of s0 in the group
        ]
    )
    assert results[0] == []
    assert type(results[1]) is StoreConflict
    assert type(results[2]) is ValueError and "nonsense" in str(results[2])
    assert type(results[3]) is SessionLeased
    assert results[4] == [(number, Steer(UserMessage("u-late", "Late.")))]
    assert type(results[5]) is ValueError
    assert type(results[6]) is replay.StoreError and "missing" in str(results[6])
    assert type(results[7]) is ValueError and "a second batch in one group" in str(results[7])
    info = store.session("s5")
    assert (info.steps, info.events) == (1, counts["s5"])  # its row as it was
    assert store.session("s0").steps == 2 and store.session("s1").steps == 1
    assert store.session("s3").lease_owner == "someone-else"


def test_a_store_failing_in_a_group_commit_fails_its_sessions_and_leaves_them_resumable(
    store, caplog
):
    sessions.submit_sessions(store, 3)
    original = store._append_group
    failures = [0]

    def failing(batches: Any) -> Any:
        if failures[0] < 1:
            failures[0] += 1
            raise sqlite3.OperationalError("disk I/O error")
        return original(batches)

    store._append_group = failing  # type: ignore[method-assign]
    with caplog.at_level(logging.ERROR, logger="replay"):
        stats = Worker(store, sessions.afactory, threads=1, tasks=4).run()
    assert stats.failed >= 1 and "disk I/O error" in caplog.text
    store._append_group = original  # type: ignore[method-assign]
    assert replay.work(store, sessions.afactory, tasks=4).finished == {"completed": stats.failed}
    assert all(info.status == "completed" for info in store.sessions())


def test_failures_in_tasks_and_a_session_leased_elsewhere_left_alone(store, caplog):
    sessions.submit_sessions(store, 4)

    store.acquire("s1", "someone-else", 600)  # another worker holds s1

    def factory(info: replay.SessionInfo) -> Any:
        if info.id == "s0":
            raise RuntimeError("no model for you")
        if info.id == "s2":
            return SessionSetup(model=FlakyModel(0), tools=[sessions.aeffect])  # sync only
        return sessions.afactory(info)

    with caplog.at_level(logging.ERROR, logger="replay"):
        stats = Worker(store, factory, threads=1, tasks=4).run()
    assert (stats.failed, stats.finished, stats.skipped) == (2, {"completed": 1}, 0)
    assert store.session("s1").lease_owner == "someone-else"
    assert "no model for you" in caplog.text and "astream" in caplog.text


def test_a_session_advanced_by_another_writer_is_skipped_and_its_group_is_written(store):
    sessions.submit_sessions(store, 3)

    @tool(name="effect")
    async def effect(n: int) -> dict[str, int]:
        """A side effect, done at most once per idempotency key."""
        if n == 2:  # someone moves s1's log on behind its worker's back
            assert store._db is not None
            store._db.execute(
                "UPDATE sessions SET next_sequence = next_sequence + 1 WHERE id = 's1'"
            )
        return {"n": n}

    def factory(info: replay.SessionInfo) -> SessionSetup:
        tools = [effect] if info.id == "s1" else [sessions.aeffect]
        return SessionSetup(model=FunctionModel(sessions.answer), tools=tools)

    spy = Spy(store)
    stats = Worker(store, factory, threads=1, tasks=3).run()
    # Skipped at its conflict; then listed again, its log is found damaged.
    assert (stats.finished, stats.skipped, stats.failed) == ({"completed": 2}, 1, 1)
    assert max(spy.sizes) == 3  # s1's conflict came in a group with the others
    assert store.session("s1").lease_owner is None  # (released)
    for session_id in ("s0", "s2"):
        assert store.session(session_id).status == "completed"


def test_stop_drains_the_tasks_at_their_next_boundary(store):
    sessions.submit_sessions(store, 3)
    worker: list[Worker] = []

    @tool(name="effect")
    async def effect(n: int) -> dict[str, int]:
        """A side effect, done at most once per idempotency key."""
        worker[0].stop()
        return {"n": n}

    def factory(info: replay.SessionInfo) -> SessionSetup:
        return SessionSetup(model=FunctionModel(sessions.answer), tools=[effect])

    worker.append(Worker(store, factory, threads=1, tasks=3))
    stats = worker[0].run()
    assert stats.stopped == 3 and stats.advanced == 0
    for info in store.sessions():
        assert (info.status, info.lease_owner) == ("running", None)
    assert replay.work(store, sessions.afactory, tasks=2).finished == {"completed": 3}
    for info in store.sessions():
        assert sum(e.type == "tool.result" for e in store.events(info.id)) == 3


@pytest.mark.parametrize("unstarted", [True, False])
def test_a_thread_whose_claim_fails_cancels_its_tasks_and_run_raises(tmp_path, unstarted):
    # unstarted: the failing claim comes right after one that claimed fewer than
    # asked, its session's task not started yet; else: after s0 ended, while s1's
    # task waits in its tool (cancelled as at a crash).
    class Failing(SQLiteStore):
        claims = 0

        def _claim_some(
            self, candidates: Any, owner: str, lease_seconds: float, listed: Any, count: int
        ) -> Any:
            Failing.claims += 1
            if Failing.claims == 2:
                raise sqlite3.OperationalError("database disk image is malformed")
            count = 1 if unstarted else count
            return super()._claim_some(candidates, owner, lease_seconds, listed, count)

    @tool(name="effect")
    async def effect(n: int) -> dict[str, int]:
        """A side effect, done at most once per idempotency key."""
        await asyncio.sleep(30 if idempotency_key().startswith("s1:") else 0.01)
        return {"n": n}

    def factory(info: replay.SessionInfo) -> SessionSetup:
        return SessionSetup(model=FunctionModel(sessions.answer), tools=[effect])

    with Failing(tmp_path / "failing.db") as store:
        sessions.submit_sessions(store, 3)
        with pytest.raises(sqlite3.OperationalError, match="malformed"):
            Worker(store, factory, threads=1, tasks=2).run()
        assert all(info.lease_owner is None for info in store.sessions())
        # Each stays resumable from its last commit.
        replay.work(store, sessions.afactory, tasks=4)
        assert all(info.status == "completed" for info in store.sessions())


def test_a_session_claimed_before_a_stop_is_released_unrun(store):
    sessions.submit_sessions(store, 2)
    worker: list[Worker] = []
    made: list[str] = []

    def factory(info: replay.SessionInfo) -> SessionSetup:
        made.append(info.id)
        worker[0].stop()  # both were claimed already: the second never starts
        return sessions.afactory(info)

    worker.append(Worker(store, factory, threads=1, tasks=2))
    stats = worker[0].run()
    assert (stats.stopped, stats.advanced, made) == (2, 0, ["s0"])
    assert all(info.lease_owner is None for info in store.sessions())


def test_a_group_commit_encodes_before_its_transaction_what_it_can(store):
    sessions.submit_sessions(store, 3)
    counts = {s: len(store._claim(s, "me", 60.0, paused=False)[1]) for s in ("s0", "s1", "s2")}
    step = store.events("s0")[-1]  # a step.start: one more with the next number
    good = msgspec.structs.replace(step, sequence=counts["s0"], step=2)
    bad = msgspec.structs.replace(step, sequence=counts["s1"], step=object())  # unencodable
    moved = msgspec.structs.replace(step, sequence=counts["s2"], step=2)

    class Moved(SQLiteStore):
        def _connection(self) -> sqlite3.Connection:  # (the lock taken: after encoding)
            count, chain, status, number = self._chains["s2"]
            self._chains["s2"] = (count, chain.copy(), status, number)  # an equal chain
            return super()._connection()

    store.__class__ = Moved
    options = {"status": "running", "owner": "me", "lease_seconds": 60.0}
    results = store._append_group(
        [
            ("s0", [good], {**options, "expected": counts["s0"], "steps": 2}),
            ("s1", [bad], {**options, "expected": counts["s1"], "steps": 2}),
            ("s2", [moved], {**options, "expected": counts["s2"], "steps": 2}),
        ]
    )
    assert results[0] == [] and results[2] == []
    assert type(results[1]) is TypeError  # this session's error, the others written
    assert store.events("s0")[-1] == good and store.events("s2")[-1] == moved
    assert store.session("s1").events == counts["s1"]


def test_a_group_commit_whose_transaction_fails_writes_none_of_it(store, monkeypatch):
    sessions.submit_sessions(store, 2)
    counts = {}
    for session_id in ("s0", "s1"):
        counts[session_id] = len(store._claim(session_id, "me", 60.0, paused=False)[1])
    original = store._append_in
    calls: list[str] = []

    def failing(db: Any, session_id: str, *args: Any) -> Any:
        calls.append(session_id)
        if session_id == "s1":
            raise sqlite3.OperationalError("disk I/O error")
        return original(db, session_id, *args)

    monkeypatch.setattr(store, "_append_in", failing)
    commits = store.commits
    options = {"status": "running", "steps": 3, "owner": "me", "lease_seconds": 60.0}
    with pytest.raises(sqlite3.OperationalError, match="disk I/O"):
        store._append_group([(s, [], {**options, "expected": counts[s]}) for s in ("s0", "s1")])
    assert calls == ["s0", "s1"]
    assert store.session("s0").steps == 1  # s0's write went back with the rest
    assert store.commits == commits


def test_tasks_with_a_rate_limit(store):
    sessions.submit_sessions(store, 6)
    limits = {"scripted": RateLimit(requests_per_minute=1e6, concurrent=2)}
    stats = replay.work(store, sessions.afactory, threads=1, tasks=4, limits=limits)
    assert stats.finished == {"completed": 6}
    # A sync model with a rate limit: refused before it is wrapped.
    sessions.submit_sessions(store, 1, prefix="sync")
    stats = replay.work(
        store,
        lambda info: SessionSetup(
            model=FlakyModel(0), tools=[sessions.aeffect], provider="scripted"
        ),
        threads=1,
        tasks=4,
        limits=limits,
    )
    assert stats.failed == 1


def test_a_drain_while_a_task_waits_for_its_slot_leaves_the_session_resumable(store):
    sessions.submit_sessions(store, 1)
    worker: list[Worker] = []

    def factory(info: replay.SessionInfo) -> SessionSetup:
        worker[0]._limiters["scripted"].slots.acquire()  # every slot taken
        worker[0].stop()
        return sessions.afactory(info)

    worker.append(Worker(store, factory, tasks=2, limits={"scripted": RateLimit(concurrent=1)}))
    stats = worker[0].run()
    assert (stats.stopped, stats.advanced) == (1, 0)
    assert store.runnable() == ["s0"]


@pytest.fixture
def fake_sleep(monkeypatch):
    """``asyncio.sleep`` advancing a fake clock (the limiter's waits)."""
    slept: list[float] = []
    clocks: list[FakeClock] = []
    hooks: list[Any] = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)
        for clock in clocks:
            clock.now += seconds
        while hooks:
            hooks.pop()()

    monkeypatch.setattr(asyncio, "sleep", sleep)
    return slept, clocks, hooks


def test_an_event_loop_waits_for_the_buckets_and_slots_without_blocking(fake_sleep):
    slept, clocks, hooks = fake_sleep
    limit, clock, stop = limiter(RateLimit(requests_per_minute=60, concurrent=1))
    clocks.append(clock)

    async def calls() -> None:
        for _ in range(60):
            await limit.abegin()
            limit.end(None)
        assert slept == []
        await limit.abegin()  # then one a second
        assert clock.now == pytest.approx(1.0)
        hooks.append(lambda: limit.end(None))  # the call ends while the next waits
        await limit.abegin()  # for its slot (then for the bucket)
        assert slept[:2] == [1.0, 0.01]
        stop.set()
        with pytest.raises(worker_module._Draining):
            await limit.abegin()  # no slot, and the worker stops

    asyncio.run(calls())


def test_a_drain_while_a_task_waits_for_the_bucket(fake_sleep):
    _, clocks, _ = fake_sleep
    limit, clock, stop = limiter(RateLimit(requests_per_minute=1))
    clocks.append(clock)

    async def calls() -> None:
        await limit.abegin()
        limit.end(None)
        stop.set()
        with pytest.raises(worker_module._Draining):
            await limit.abegin()  # drained while it waits

    asyncio.run(calls())
    stop.clear()

    async def drained_on_the_way() -> None:
        clock.now += 60  # the bucket is full again, but the worker stops
        stop.set()
        with pytest.raises(worker_module._Draining):
            await limit.abegin()

    asyncio.run(drained_on_the_way())


class AsyncFlaky(FlakyModel):
    async def astream(self, request: ModelRequest) -> Any:
        for item in self.stream(request):
            yield item


@pytest.mark.parametrize(
    ("model", "calls", "raised"),
    [(AsyncFlaky(2), 3, False), (AsyncFlaky(1, retry_after=None), 1, True)],
)
def test_a_retry_after_in_an_event_loop(fake_sleep, model, calls, raised):
    _, clocks, _ = fake_sleep
    limit, clock, _ = limiter(RateLimit(requests_per_minute=1000, retries=3))
    clocks.append(clock)
    limited = worker_module._LimitedModel(model, limit)

    async def collect() -> list[Any]:
        return [item async for item in limited.astream(request())]

    if raised:
        with pytest.raises(ModelError):
            asyncio.run(collect())
    else:
        items = asyncio.run(collect())
        assert type(items[-1]) is ModelResponse
        assert clock.now == pytest.approx(4.0)  # twice retry_after
    assert model.calls == calls


@pytest.mark.parametrize("tasks", [0, -1, 1.5, True])
def test_bad_tasks(store, tasks):
    with pytest.raises(replay.WorkerError, match="tasks must be a positive int or None"):
        Worker(store, sessions.afactory, tasks=tasks)


@pytest.mark.parametrize("bad", ["s0", "s1"])
def test_a_session_whose_rows_cannot_be_read_in_a_batch_claim_fails_alone(store, bad):
    # s0: the batch's first claim (the transaction goes back); s1: a later one (a
    # savepoint takes its lease back, s0 stays claimed and runs).
    sessions.submit_sessions(store, 3)
    assert store._db is not None
    store._db.execute(
        "UPDATE events SET event = CAST(x'ff' AS TEXT) "
        f"WHERE event_key >> 32 = (SELECT number FROM sessions WHERE id = '{bad}') "
        "AND sequence = 1"
    )
    stats = Worker(store, sessions.afactory, threads=1, tasks=4).run()
    assert (stats.finished, stats.failed) == ({"completed": 2}, 1)
    info = store.session(bad)
    assert (info.status, info.lease_owner) == ("running", None)  # nothing leased


def test_a_later_claim_of_a_batch_that_fails_is_taken_back_alone(store):
    sessions.submit_sessions(store, 3)
    original = store._claim_in

    def failing(db: Any, session_id: str, *args: Any) -> Any:
        claim = original(db, session_id, *args)  # (its lease written)
        if session_id == "s1":
            raise sqlite3.OperationalError("disk I/O error")
        return claim

    store._claim_in = failing  # type: ignore[method-assign]
    pending = collections.deque(["s0", "s1", "s2"])
    claims, skipped, unlooked = store._claim_some(pending, "me", 60.0, None, 3)
    assert [session_id for session_id, _ in claims] == ["s0", "s1"]
    assert claims[0][1] is not None and claims[1][1] is None
    assert (skipped, unlooked, list(pending)) == (0, False, ["s2"])
    assert store.session("s0").lease_owner == "me" and store.session("s1").lease_owner is None


def test_a_batch_claim_whose_transaction_fails_takes_back_every_claim(store):
    sessions.submit_sessions(store, 3)
    db = store._db
    assert db is not None
    looks: list[str] = []

    class Failing:
        def __getattr__(self, name: str) -> Any:
            return getattr(db, name)

        def execute(self, sql: str, *args: Any) -> Any:
            if sql == store_module._LOAD_SESSION:
                looks.append(args[0][0])
                if len(looks) == 2:  # the second session's look fails
                    raise sqlite3.OperationalError("disk I/O error")
            return db.execute(sql, *args)

    store._db = Failing()  # type: ignore[assignment]
    try:
        pending = collections.deque(["s0", "s1", "s2"])
        claims, _, _ = store._claim_some(pending, "me", 60.0, None, 3)
    finally:
        store._db = db
    assert claims == [("s1", None)]  # its run will say what is wrong
    assert all(info.lease_owner is None for info in store.sessions())  # s0's went back too


def test_a_write_waits_for_another_connection_s_transaction_in_short_naps(tmp_path, monkeypatch):
    path = tmp_path / "naps.db"
    with SQLiteStore(path) as setup:
        sessions.submit_sessions(setup, 1)
    other = sqlite3.connect(path, isolation_level=None)
    naps: list[float] = []

    def sleep(seconds: float) -> None:  # the other writer commits during the third nap
        naps.append(seconds)
        if len(naps) == 3:
            other.execute("COMMIT")

    monkeypatch.setattr(store_module.time, "sleep", sleep)
    try:
        with SQLiteStore(path, timeout=7.5) as store:
            other.execute("BEGIN IMMEDIATE")
            assert store.release("s0", "nobody") is False  # (a write transaction)
            assert naps == [0.00005, 0.0001, 0.0002]
            assert store._db is not None
            assert store._db.execute("PRAGMA busy_timeout").fetchone()[0] == 7500
    finally:
        other.close()
