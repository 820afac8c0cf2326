"""replay.Worker / replay.work / replay.submit and ``python -m replay worker``
(DESIGN §29): thread workers on the scripted model. The crash test with real worker
processes SIGKILLed is tests/test_worker_crash.py."""

from __future__ import annotations

import collections
import json
import logging
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from typing import Any

import pytest

import replay
from agentloop import (
    FunctionModel,
    ModelError,
    ModelRequest,
    ModelResponse,
    Resume,
    ScriptedResponse,
    TextBlock,
    ToolCall,
    Usage,
    UserMessage,
    tool,
)
from replay import RateLimit, SessionSetup, SQLiteStore, Worker, WorkerError, WorkerStats
from replay import _store as store_module
from replay import _worker as worker_module
from replay.__main__ import main
from replay._process import this_process

from . import worker_factory as sessions
from .helpers import ROOT, subprocess_env


@pytest.fixture
def store(tmp_path):
    with SQLiteStore(tmp_path / "fleet.db") as store:
        yield store


def test_a_worker_runs_every_submitted_session_once(store):
    ids = sessions.submit_sessions(store, 40)
    assert sorted(store.runnable()) == sorted(ids)
    progress: list[WorkerStats] = []
    stats = replay.work(
        store, sessions.factory, threads=4, on_progress=progress.append, progress=1e-6
    )
    assert stats.finished == {"completed": 40}
    assert (stats.advanced, stats.parked, stats.stopped, stats.skipped, stats.failed) == (
        40,
        0,
        0,
        0,
        0,
    )
    assert stats.seconds > 0 and stats.per_second == 40 / stats.seconds
    assert progress and all(type(p) is WorkerStats for p in progress)
    reference = replay.replay(store.events(ids[0])).result
    for session_id in ids:
        info = store.session(session_id)
        assert (info.status, info.steps, info.lease_owner) == ("completed", 4, None)
        result = replay.replay(store.events(session_id)).result
        assert result is not None and result.final_text == "done"
        assert len(result.messages) == len(reference.messages)  # type: ignore[union-attr]
    assert store.runnable() == []
    assert replay.work(store, sessions.factory).advanced == 0  # nothing left


def test_the_stats_line_and_json():
    stats = WorkerStats(finished={"completed": 3, "failed": 1}, parked=2, skipped=1, seconds=2.0)
    assert stats.line() == (
        "6 sessions (3 completed, 1 failed; 2 parked), 0 stopped, 1 skipped, 0 failed, 2.0 s, 3/s"
    )
    assert stats.to_dict() == {
        "finished": {"completed": 3, "failed": 1},
        "parked": 2,
        "stopped": 0,
        "skipped": 1,
        "failed": 0,
        "seconds": 2.0,
        "advanced": 6,
        "per_second": 3.0,
    }
    assert WorkerStats().line().startswith("0 sessions (none finished; 0 parked)")
    assert WorkerStats().per_second == 0.0


@tool(requires_approval=True)
def approve_me(note: str) -> str:
    """Something a human approves first."""
    return f"done: {note}"


def approving(request: ModelRequest) -> ScriptedResponse:
    if request.step == 1:
        return ScriptedResponse.tool_calls("r1", ToolCall("c1", "approve_me", {"note": "x"}))
    return ScriptedResponse.text("r2", "approved")


def approval_factory(info: replay.SessionInfo) -> SessionSetup:
    return SessionSetup(model=FunctionModel(approving), tools=[approve_me])


def test_parked_sessions_wait_for_their_answer_then_a_worker_finishes_them(store):
    replay.submit(store, "p", [UserMessage("u", "Ask first.")], tools=[approve_me])
    stats = Worker(store, approval_factory).run()
    assert (stats.parked, stats.finished) == (1, {})
    assert store.session("p").status == "paused" and store.runnable() == []
    replay.answer(store, "p", Resume({"approved": True}))
    assert store.runnable() == ["p"]
    stats = Worker(store, approval_factory).run()
    assert stats.finished == {"completed": 1}
    assert replay.replay(store.events("p")).result.final_text == "approved"  # type: ignore[union-attr]


def test_a_parked_session_whose_answer_went_before_its_claim_stays_parked(tmp_path):
    class Listing(SQLiteStore):
        def _runnable(self) -> dict[str, str | None]:
            listed = super()._runnable()
            if listed:  # the answer is withdrawn right after the listing
                assert self._db is not None
                self._db.execute("DELETE FROM answers")
            return listed

    with Listing(tmp_path / "parked.db") as store:
        replay.submit(store, "p", [UserMessage("u", "Ask first.")], tools=[approve_me])
        assert Worker(store, approval_factory).run().parked == 1
        replay.answer(store, "p", Resume({"approved": True}))
        stats = Worker(store, approval_factory).run()
        assert (stats.skipped, stats.advanced) == (1, 0)
        info = store.session("p")
        assert (info.status, info.lease_owner) == ("paused", None)


def test_a_factory_can_pass_run_durable_options(store):
    replay.submit(store, "p", [UserMessage("u", "Ask first.")], tools=[approve_me])

    def factory(info: replay.SessionInfo) -> SessionSetup:
        setup = approval_factory(info)
        return SessionSetup(
            model=setup.model,
            tools=setup.tools,
            options={"on_pause": lambda pause: Resume({"approved": True})},
        )

    assert Worker(store, factory).run().finished == {"completed": 1}


def test_submit_stores_the_session_up_to_its_first_model_call(store):
    replay.submit(store, "s", [UserMessage("u", "Hi")], tools=sessions.TOOLS, system="Be brief.")
    info = store.session("s")
    assert (info.status, info.steps, info.lease_owner) == ("running", 1, None)
    assert info.config["system"] == "Be brief." and info.config["tools"] == ["effect"]
    assert [e.type for e in store.events("s")] == [
        "session.start",
        "message.accepted",
        "step.start",
    ]
    with pytest.raises(replay.StoreConflict):
        replay.submit(store, "s", [UserMessage("u", "Hi")], tools=sessions.TOOLS)
    # A transcript the loop refuses: the run failed at once, and is stored so.
    replay.submit(store, "bad", [UserMessage("u", "a"), UserMessage("u", "b")], tools=[])
    assert store.session("bad").status == "failed" and store.runnable() == ["s"]
    with pytest.raises(ValueError, match="session_id must be a non-empty str"):
        replay.submit(store, "", [UserMessage("u", "Hi")], tools=[])
    with pytest.raises(TypeError, match="unexpected keyword argument 'model'"):
        replay.submit(store, "x", [UserMessage("u", "Hi")], tools=[], model=None)  # type: ignore[call-arg]


def test_sessions_leased_elsewhere_are_skipped_and_failures_are_counted(store, caplog):
    sessions.submit_sessions(store, 3)

    def factory(info: replay.SessionInfo) -> Any:
        if info.id == "s0":
            store.acquire("s1", "someone-else", 600)  # another worker claims s1 first
            raise RuntimeError("no model for you")
        if info.id == "s2":
            return "not a setup"
        return sessions.factory(info)

    with caplog.at_level(logging.ERROR, logger="replay"):
        stats = Worker(store, factory, threads=1).run()
    assert (stats.skipped, stats.failed, stats.advanced) == (1, 2, 0)  # each tried once
    messages = [record.getMessage() for record in caplog.records]
    assert "worker: session 's0' failed" in messages
    assert "not a replay.SessionSetup" in caplog.text
    assert store.session("s0").status == "running" and store.session("s0").lease_owner is None
    assert store.session("s1").lease_owner == "someone-else"  # passed over, never claimed


def test_a_session_claimed_by_a_worker_is_refused_to_another_until_it_is_done(store):
    # The claim leases the session before the factory is called: another worker
    # (here run_durable with its own owner, from the factory) cannot run it.
    sessions.submit_sessions(store, 1)
    refused: list[str] = []

    def factory(info: replay.SessionInfo) -> SessionSetup:
        assert info.lease_owner is not None and info.lease_owner.endswith(":0")
        with pytest.raises(replay.SessionLeased):
            replay.run_durable(store, info.id, **sessions.options())  # another worker
        refused.append(info.id)
        return sessions.factory(info)

    stats = Worker(store, factory, threads=1).run()
    assert refused == ["s0"] and (stats.skipped, stats.finished) == (0, {"completed": 1})


def test_a_session_another_worker_finishes_while_this_one_claims_it_never_keeps_a_lease(
    tmp_path,
):
    # The fleet crash test's race: worker B sees "s0" running; worker A (its own
    # connection) finishes it just before B's first write; B must not leave the
    # finished session leased at any moment, since a SIGKILL may strike between
    # any two of B's transactions and nobody ever runs a finished session again.
    path = tmp_path / "race.db"
    with SQLiteStore(path) as setup:
        sessions.submit_sessions(setup, 1)
    observer = sqlite3.connect(path, check_same_thread=False)
    seen: list[tuple[str, str, str | None]] = []
    finished_by_a = threading.Event()

    def between_transactions(statement: str) -> None:
        # (Called by B's connection before each statement it runs; sqlite3 would
        # swallow an exception raised here.)
        try:
            check(statement)
        except BaseException as exc:  # (reported below)
            seen.append((statement, "error", repr(exc)))

    def check(statement: str) -> None:
        if not statement.startswith("BEGIN"):
            return
        if statement == "BEGIN IMMEDIATE" and not finished_by_a.is_set():
            finished_by_a.set()  # A, in another thread, ends the session right now
            other = threading.Thread(target=run_a)
            other.start()
            other.join()
        row = observer.execute(
            "SELECT status, lease_owner FROM sessions WHERE id = 's0'"
        ).fetchone()
        seen.append((statement, row[0], row[1]))

    def run_a() -> None:
        with SQLiteStore(path) as a:
            replay.run_durable(a, "s0", **sessions.options(), owner="worker-a")

    try:
        with SQLiteStore(path) as b:
            assert b._db is not None
            b._db.set_trace_callback(between_transactions)
            stats = Worker(b, sessions.factory, threads=1).run()
            b._db.set_trace_callback(None)
            info = b.session("s0")
    finally:
        observer.close()
    assert finished_by_a.is_set() and (stats.skipped, stats.advanced) == (1, 0)
    assert (info.status, info.lease_owner) == ("completed", None)
    leased = [(statement, owner) for statement, status, owner in seen if owner is not None]
    assert leased == [], f"a completed session was leased between B's transactions: {seen}"


def test_sessions_finished_after_they_were_listed_are_skipped_without_a_factory_call(tmp_path):
    # Another worker (process) finished them between this worker's listing and
    # its turn: skipped at the cost of one read, no factory, no lease.
    class Listing(SQLiteStore):
        def _runnable(self) -> dict[str, str | None]:
            listed = super()._runnable()
            for session_id in listed:  # the other worker, right after the listing
                replay.run_durable(self, session_id, **sessions.options())
            return listed

    called: list[str] = []

    def factory(info: replay.SessionInfo) -> SessionSetup:
        called.append(info.id)
        return sessions.factory(info)

    with Listing(tmp_path / "listed.db") as store:
        sessions.submit_sessions(store, 3)
        stats = Worker(store, factory, threads=1).run()
        assert all(info.lease_owner is None for info in store.sessions())
    assert (stats.skipped, stats.advanced, called) == (3, 0, [])


def gated_factory(gate: threading.Event, entered: threading.Event) -> Any:
    @tool(name="effect")
    def effect(n: int) -> dict[str, int]:
        """A side effect, done at most once per idempotency key."""
        entered.set()
        assert gate.wait(30)
        return {"n": n}

    def factory(info: replay.SessionInfo) -> SessionSetup:
        return SessionSetup(model=FunctionModel(sessions.answer), tools=[effect])

    return factory


def test_stop_drains_sessions_in_progress_at_their_next_boundary(store):
    sessions.submit_sessions(store, 3)
    gate, entered = threading.Event(), threading.Event()
    worker = Worker(store, gated_factory(gate, entered), threads=2)
    result: list[WorkerStats] = []
    thread = threading.Thread(target=lambda: result.append(worker.run()))
    thread.start()
    assert entered.wait(30)
    worker.stop()
    assert worker.stopping
    gate.set()  # the tool in flight finishes; its result is committed, then it stops
    thread.join(30)
    stats = result[0]
    assert stats.stopped >= 1 and stats.advanced == 0
    for info in store.sessions():
        assert (info.status, info.lease_owner) == ("running", None)  # resumable, unleased
        events = store.events(info.id)
        assert events[-1].type in ("step.start", "tool.result", "tool.call")
    # Another worker finishes them all, each tool call's result recorded once.
    assert replay.work(store, sessions.factory).finished == {"completed": 3}
    for info in store.sessions():
        calls = [e for e in store.events(info.id) if e.type == "tool.result"]
        assert len(calls) == 3


def test_forever_polls_until_stopped(store):
    seen = threading.Event()

    def progress(stats: WorkerStats) -> None:
        if stats.advanced == 2:
            seen.set()

    worker = Worker(
        store, sessions.factory, forever=True, poll=0.01, on_progress=progress, progress=1e-3
    )
    result: list[WorkerStats] = []
    thread = threading.Thread(target=lambda: result.append(worker.run()))
    thread.start()
    sessions.submit_sessions(store, 2)  # submitted while it polls
    assert seen.wait(30)
    worker.stop()
    thread.join(30)
    assert result[0].finished == {"completed": 2}


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"store": "fleet.db"}, "store must be a replay.SQLiteStore"),
        ({"factory": 1}, "factory must be callable"),
        ({"threads": 0}, "threads must be a positive int"),
        ({"threads": 2.0}, "threads must be a positive int"),
        ({"poll": 0}, "poll must be a positive number"),
        ({"progress": float("nan")}, "progress must be a positive number"),
        ({"limits": {"x": {"rpm": 1}}}, r"limits\['x'\] must be a RateLimit"),
        ({"lease_seconds": -1}, "lease_seconds must be a positive number"),
    ],
)
def test_bad_worker_options(store, options, message):
    arguments: dict[str, Any] = {"store": store, "factory": sessions.factory, **options}
    with pytest.raises((WorkerError, ValueError), match=message):
        Worker(arguments.pop("store"), arguments.pop("factory"), **arguments)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"requests_per_minute": 0}, "requests_per_minute must be a positive number"),
        ({"tokens_per_minute": float("inf")}, "tokens_per_minute must be a positive number"),
        ({"tokens_per_minute": "1"}, "tokens_per_minute must be a positive number"),
        ({"concurrent": 0}, "concurrent must be a positive int"),
        ({"retries": -1}, "retries must be an int, 0 or more"),
    ],
)
def test_bad_rate_limits(fields, message):
    with pytest.raises(WorkerError, match=message):
        RateLimit(**fields)
    assert isinstance(WorkerError("x"), replay.StoreError.__mro__[1])  # an AgentLoopError


# --------------------------------------------------------------------------- rate limits


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class SleepingStop(threading.Event):
    """A stop event whose ``wait`` advances the fake clock instead of sleeping."""

    def __init__(self, clock: FakeClock, stop_after: float = float("inf")) -> None:
        super().__init__()
        self.clock = clock
        self.slept: list[float] = []
        self.stop_after = stop_after

    def wait(self, timeout: float | None = None) -> bool:
        assert timeout is not None
        self.slept.append(timeout)
        self.clock.now += timeout
        if self.clock.now >= self.stop_after:
            self.set()
        return self.is_set()


def limiter(limit: RateLimit, stop_after: float = float("inf")) -> Any:
    clock = FakeClock()
    stop = SleepingStop(clock, stop_after)
    return worker_module._Limiter(limit, stop, clock), clock, stop


def test_requests_per_minute_space_the_calls():
    limit, clock, stop = limiter(RateLimit(requests_per_minute=60))
    for _ in range(60):  # a full bucket: a minute's worth at once
        limit.begin()
        limit.end(None)
    assert stop.slept == []
    limit.begin()  # then one a second
    assert clock.now == pytest.approx(1.0)
    limit.end(None)


def test_tokens_per_minute_charge_a_call_at_its_end():
    limit, clock, _ = limiter(RateLimit(tokens_per_minute=600))
    limit.begin()
    response = ModelResponse("q", "r", (TextBlock("x"),), "stop", Usage(1000, 200))
    limit.end(response)  # 1,200 tokens: 600 in debt, 10 tokens a second
    limit.begin()
    assert clock.now == pytest.approx(60.0)
    limit.end(ModelResponse("q", "r", (TextBlock("x"),), "stop"))  # no usage: nothing charged
    limit.begin()
    assert clock.now == pytest.approx(60.0)
    limit.end(None)


def test_a_concurrency_cap_and_a_drain_while_waiting():
    limit, _, stop = limiter(RateLimit(concurrent=1))
    limit.begin()
    stop.set()
    with pytest.raises(worker_module._Draining):
        limit.begin()  # no slot, and the worker stops: the call is not made
    limit.end(None)
    limit.begin()  # the slot is free again
    limit.end(None)


def test_a_drain_while_waiting_for_the_bucket_frees_the_slot():
    limit, _, _ = limiter(RateLimit(requests_per_minute=1, concurrent=1), stop_after=5)
    limit.begin()
    limit.end(None)
    with pytest.raises(worker_module._Draining):
        limit.begin()
    assert limit.slots.acquire(blocking=False)  # released on the way out


class FlakyModel:
    """Fails ``failures`` times with a retry_after, then streams a text answer;
    ``mid_stream``: fails after its first chunk instead."""

    def __init__(self, failures: int, retry_after: float | None = 2.0, mid_stream: bool = False):
        self.failures = failures
        self.retry_after = retry_after
        self.mid_stream = mid_stream
        self.calls = 0

    def stream(self, request: ModelRequest) -> Any:
        self.calls += 1
        items = list(FunctionModel(lambda r: ScriptedResponse.text("r", "ok")).stream(request))
        if self.calls <= self.failures:
            if self.mid_stream:
                yield items[0]
            raise ModelError("slow down", kind="rate_limit", retry_after=self.retry_after)
        yield from items


def request() -> ModelRequest:
    return ModelRequest(id="request-001", step=1, messages=(UserMessage("u", "Hi"),), tools=())


@pytest.mark.parametrize(
    ("model", "retries", "calls", "raised"),
    [
        (FlakyModel(2), 3, 3, False),  # waited twice, then answered
        (FlakyModel(5), 3, 4, True),  # gave up after 3 retries
        (FlakyModel(1, retry_after=None), 3, 1, True),  # the provider said nothing
        (FlakyModel(1, mid_stream=True), 3, 1, True),  # chunks already went to the loop
    ],
)
def test_a_retry_after_pauses_the_provider_then_the_call_is_made_again(
    model, retries, calls, raised
):
    limit, _, stop = limiter(RateLimit(requests_per_minute=1000, retries=retries))
    limited = worker_module._LimitedModel(model, limit)
    if raised:
        with pytest.raises(ModelError):
            list(limited.stream(request()))
    else:
        items = list(limited.stream(request()))
        assert type(items[-1]) is ModelResponse
        assert sum(stop.slept) == pytest.approx(4.0)  # twice retry_after
    assert model.calls == calls


def test_a_worker_with_a_rate_limit_runs_its_provider_s_sessions_through_it(store):
    sessions.submit_sessions(store, 3)
    limits = {"scripted": RateLimit(requests_per_minute=1e6, concurrent=2)}
    assert replay.work(store, sessions.factory, limits=limits).finished == {"completed": 3}


def test_a_drain_while_a_call_waits_for_its_rate_limit_leaves_the_session_resumable(store):
    sessions.submit_sessions(store, 1)
    worker: list[Worker] = []

    def factory(info: replay.SessionInfo) -> SessionSetup:
        worker[0].stop()  # the stop comes while the call waits for its slot
        worker[0]._limiters["scripted"].slots.acquire()
        return sessions.factory(info)

    worker.append(Worker(store, factory, limits={"scripted": RateLimit(concurrent=1)}))
    stats = worker[0].run()
    assert (stats.stopped, stats.advanced) == (1, 0)
    assert store.runnable() == ["s0"]


# --------------------------------------------------------------------------- the CLI


def test_the_cli_runs_the_store_and_prints_json(tmp_path, capsys):
    path = tmp_path / "cli.db"
    with SQLiteStore(path) as store:
        sessions.submit_sessions(store, 5)
    code = main(
        [
            "worker",
            str(path),
            "--factory",
            "tests.worker_factory:factory",
            "--threads",
            "2",
            "--limit",
            "scripted:rpm=100000,tpm=1e9,concurrent=2,retries=1",
            "--json",
            "--progress",
            "0.000001",
        ]
    )
    out, err = capsys.readouterr()
    assert code == 0
    stats = json.loads(out)
    assert stats["finished"] == {"completed": 5} and stats["advanced"] == 5
    assert "replay worker: " in err
    with SQLiteStore(path) as store:
        sessions.submit_sessions(store, 1, prefix="t")
    assert main(["worker", str(path), "--factory", "tests.worker_factory:factory", "--quiet"]) == 0
    out, err = capsys.readouterr()
    assert out.startswith("replay worker: 1 sessions (1 completed; 0 parked)") and err == ""
    with SQLiteStore(path) as store:
        sessions.submit_sessions(store, 3, prefix="a")
    afactory = ["--factory", "tests.worker_factory:afactory"]
    assert main(["worker", str(path), *afactory, "--tasks", "8", "--quiet"]) == 0
    assert capsys.readouterr().out.startswith("replay worker: 3 sessions (3 completed")


def test_the_cli_exits_1_when_a_session_failed(tmp_path, capsys):
    path = tmp_path / "cli.db"
    with SQLiteStore(path) as store:
        replay.submit(store, "p", [UserMessage("u", "Ask first.")], tools=[approve_me])
    # The scripted factory's tools lack approve_me: the session cannot run.
    code = main(["worker", str(path), "--factory", "tests.worker_factory:factory", "--quiet"])
    assert code == 1
    assert "1 failed" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--factory", "tests.no_such_module:f"], "cannot load it (ModuleNotFoundError"),
        (["--factory", "tests.worker_factory:nothing"], "cannot load it (AttributeError"),
        (["--factory", "tests.worker_factory"], "expected MODULE:FUNCTION"),
        (["--limit", "scripted:rps=1"], "--limit 'scripted:rps=1': expected PROVIDER:KEY=N"),
        (["--limit", "scripted:rpm=x"], "expected PROVIDER:KEY=N"),
        (["--limit", "scripted:rpm=0"], "requests_per_minute must be a positive number"),
        (["--limit", ":rpm=1"], "name the provider"),
        (["--threads", "0"], "threads must be a positive int"),
        (["--tasks", "0"], "tasks must be a positive int or None"),
        (["--processes", "0"], "--processes must be 1 or more"),
    ],
)
def test_cli_usage_errors(tmp_path, capsys, arguments, message):
    path = tmp_path / "cli.db"
    SQLiteStore(path).close()
    factory = [] if "--factory" in arguments else ["--factory", "tests.worker_factory:factory"]
    assert main(["worker", str(path), *factory, *arguments]) == 2
    assert message in capsys.readouterr().err


def run_cli(*arguments: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "replay", "worker", *arguments],
        cwd=ROOT,
        env=subprocess_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_processes_share_the_store_and_their_stats_are_summed(tmp_path):
    path = tmp_path / "cli.db"
    with SQLiteStore(path) as store:
        sessions.submit_sessions(store, 8)
    factory = ["--factory", "tests.worker_factory:factory"]
    done = run_cli(str(path), *factory, "--processes", "2", "--threads", "1", "--json")
    out, err = done.communicate(timeout=300)
    assert done.returncode == 0, err
    stats = json.loads(out)
    assert (stats["finished"], stats["processes"], stats["failed"]) == ({"completed": 8}, 2, 0)
    with SQLiteStore(path) as store:
        assert {info.status for info in store.sessions()} == {"completed"}
        sessions.submit_sessions(store, 8, prefix="t")
    # Each process's thread running 4 sessions at once (their commits grouped).
    afactory = ["--factory", "tests.worker_factory:afactory", "--tasks", "4"]
    done = run_cli(str(path), *afactory, "--processes", "2", "--threads", "1", "--json")
    out, err = done.communicate(timeout=300)
    assert done.returncode == 0, err
    assert json.loads(out)["finished"] == {"completed": 8}
    # Children that cannot load the factory: each one counts as failed.
    done = run_cli(str(path), "--factory", "tests.nope:f", "--processes", "2", "--limit=x:rpm=1")
    out, err = done.communicate(timeout=300)
    assert done.returncode == 1
    assert out.startswith("replay worker: 0 sessions") and "2 failed" in out
    assert err.count("cannot load it") == 2


def test_sigterm_drains_every_process(tmp_path):
    path = tmp_path / "cli.db"
    with SQLiteStore(path) as store:
        sessions.submit_sessions(store, 4)
    worker = run_cli(
        str(path),
        "--factory",
        "tests.worker_factory:factory",
        "--processes",
        "2",
        "--forever",
        "--poll",
        "0.05",
        "--quiet",
    )
    with SQLiteStore(path) as store:
        while any(not info.finished for info in store.sessions()):
            time.sleep(0.05)
    worker.send_signal(signal.SIGTERM)
    out, err = worker.communicate(timeout=300)
    assert worker.returncode == 0, err
    assert out.startswith("replay worker: 4 sessions (4 completed; 0 parked)")
    assert out.rstrip().endswith("(2 processes)")


class FakeSlots:
    """A concurrency slot that is busy ``busy`` times (then free); ``on_busy`` runs
    each time."""

    def __init__(self, busy: int, on_busy: Any = None) -> None:
        self.busy = busy
        self.on_busy = on_busy
        self.released = 0

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        if self.busy:
            self.busy -= 1
            if self.on_busy is not None:
                self.on_busy()
            return False
        return True

    def release(self) -> None:
        self.released += 1


def test_a_call_waits_for_a_slot_until_one_is_free():
    limit, _, _ = limiter(RateLimit(concurrent=1))
    limit.slots = FakeSlots(busy=2)
    limit.begin()  # busy, busy, free
    limit.end(None)
    assert limit.slots.released == 1


def test_a_stop_while_a_call_waits_for_its_slot_makes_no_call(store):
    sessions.submit_sessions(store, 1)
    worker = Worker(store, sessions.factory, limits={"scripted": RateLimit(concurrent=1)})
    worker._limiters["scripted"].slots = FakeSlots(busy=1, on_busy=worker.stop)  # type: ignore[assignment]
    stats = worker.run()
    assert (stats.stopped, stats.advanced) == (1, 0)
    info = store.session("s0")
    assert (info.status, info.events, info.lease_owner) == ("running", 3, None)


def test_a_stop_while_sessions_are_handed_out_hands_out_no_more(store):
    sessions.submit_sessions(store, 6)
    worker: list[Worker] = []

    def factory(info: replay.SessionInfo) -> SessionSetup:
        worker[0].stop()
        return sessions.factory(info)

    worker.append(Worker(store, factory, threads=1))
    stats = worker[0].run()
    assert (stats.advanced, stats.stopped) == (0, 1)  # the one claimed, none after
    assert len(store.runnable()) == 6  # every one still there, resumable


def test_the_processes_stats_sum_what_each_printed():
    from replay.__main__ import _summed_stats

    line = json.dumps(
        {"finished": {"completed": 3}, "parked": 1, "stopped": 0, "skipped": 2, "failed": 0}
        | {"seconds": 1.5}
    )
    other = json.dumps(
        {"finished": {"completed": 1, "failed": 1}, "parked": 0, "stopped": 1, "skipped": 0}
        | {"failed": 1, "seconds": 2.5}
    )
    summed = _summed_stats(
        [
            (0, f"progress\n{line}\n"),
            (1, other),  # EXIT_DIFFERENT: a session failed; its stats still count
            (-signal.SIGTERM, ""),  # stopped before its handler was set: ran nothing
            (-signal.SIGKILL, ""),  # died: counted as a failed session
        ]
    )
    assert summed.finished == {"completed": 4, "failed": 1}
    assert (summed.parked, summed.stopped, summed.skipped, summed.failed) == (1, 1, 2, 2)
    assert summed.seconds == 2.5


def test_a_session_whose_rows_cannot_be_read_fails_and_the_others_run(store):
    sessions.submit_sessions(store, 3)
    assert store._db is not None
    store._db.execute(
        "UPDATE events SET event = CAST(x'ff' AS TEXT) "
        "WHERE event_key >> 32 = (SELECT number FROM sessions WHERE id = 's1') AND sequence = 1"
    )
    stats = Worker(store, sessions.factory, threads=1).run()
    assert (stats.finished, stats.failed) == ({"completed": 2}, 1)
    info = store.session("s1")
    assert (info.status, info.lease_owner) == ("running", None)  # nothing leased


def test_a_store_that_fails_stops_every_thread_and_run_raises_it(tmp_path):
    class Broken(SQLiteStore):
        def _runnable(self) -> dict[str, str | None]:
            raise replay.StoreError("the disk is gone")

    with Broken(tmp_path / "broken.db") as store:
        sessions.submit_sessions(store, 2)
        with pytest.raises(replay.StoreError, match="the disk is gone"):
            Worker(store, sessions.factory, threads=3).run()


def test_a_claim_that_cannot_begin_is_raised(tmp_path):
    path = tmp_path / "locked.db"
    with SQLiteStore(path) as setup:
        sessions.submit_sessions(setup, 1)
    other = sqlite3.connect(path, isolation_level=None)
    try:
        with SQLiteStore(path, timeout=0) as store:
            other.execute("BEGIN IMMEDIATE")  # another process writes, and goes on writing
            with pytest.raises(sqlite3.OperationalError, match="locked"):
                Worker(store, sessions.factory, threads=1).run()
            other.execute("ROLLBACK")
    finally:
        other.close()


def test_a_progress_callback_that_raises_stops_the_worker(store):
    sessions.submit_sessions(store, 2)
    called = threading.Event()

    def factory(info: replay.SessionInfo) -> SessionSetup:
        assert called.wait(30)
        return sessions.factory(info)

    def progress(stats: WorkerStats) -> None:
        called.set()
        raise RuntimeError("no screen")

    worker = Worker(store, factory, threads=1, on_progress=progress, progress=1e-3)
    before = store.session("s1")
    with pytest.raises(RuntimeError, match="no screen"):
        worker.run()
    # No other session began; the one claimed when the callback raised finished, or
    # (the stop reached its thread before its first step) was released untouched.
    assert store.session("s1") == before
    first = store.session("s0")
    assert first.lease_owner is None
    assert first.status == "completed" or (first.steps, first.events) == (
        before.steps,
        before.events,
    )


def test_a_stop_during_a_claim_releases_the_session(tmp_path):
    worker: list[Worker] = []

    class Stopping(SQLiteStore):
        def _claim_some(self, *args: Any) -> Any:
            claimed = super()._claim_some(*args)
            worker[0].stop()  # (SIGTERM, right after the claim's commit)
            return claimed

    with Stopping(tmp_path / "stop.db") as store:
        sessions.submit_sessions(store, 2)
        worker.append(Worker(store, sessions.factory, threads=1))
        stats = worker[0].run()
        assert (stats.stopped, stats.advanced) == (1, 0)
        assert all(info.lease_owner is None for info in store.sessions())
        assert len(store.runnable()) == 2


def test_a_run_that_loses_its_lease_is_skipped(store):
    sessions.submit_sessions(store, 1)

    def factory(info: replay.SessionInfo) -> SessionSetup:
        assert store._db is not None  # another worker takes the lease over (it expired)
        store._db.execute(
            "UPDATE sessions SET lease_owner = 'other', lease_expires = ?, lease_host = NULL "
            "WHERE id = ?",
            (time.time() + 600, info.id),
        )
        return sessions.factory(info)

    stats = Worker(store, factory, threads=1).run()
    assert (stats.skipped, stats.advanced) == (1, 0)
    assert store.session("s0").lease_owner == "other"


def test_a_session_leased_after_the_listing_is_passed_over_without_a_look_at_its_holder(
    tmp_path, monkeypatch
):
    # Two other worker processes claimed both sessions right after this worker's
    # listing: its claims pass over them without reading /proc for their holders
    # (alive: they just claimed them). One of them died since: the worker lists
    # again before it ends, that listing lists the session with its dead holder,
    # and the claim looks at that holder (gone) and takes the session over.
    in_claim: list[bool] = []
    looked: list[int | None] = []
    real_gone = store_module.gone

    def gone(host: str | None, pid: int | None, start: str | None) -> bool:
        if in_claim:
            looked.append(pid)
        return real_gone(host, pid, start)

    monkeypatch.setattr(store_module, "gone", gone)
    host, pid, start = this_process()
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    dead = child.pid

    class Listing(SQLiteStore):
        listings = 0

        def _runnable(self) -> dict[str, str | None]:
            listed = super()._runnable()
            Listing.listings += 1
            if Listing.listings == 1:
                assert self._db is not None
                for session_id, holder_pid in (("s0", pid), ("s1", dead)):
                    lease = (f"other-{session_id}", time.time() + 600, host, holder_pid, start)
                    self._db.execute(
                        "UPDATE sessions SET lease_owner = ?, lease_expires = ?, "
                        "lease_host = ?, lease_pid = ?, lease_start = ? WHERE id = ?",
                        (*lease, session_id),
                    )
            return listed

        def _claim_some(self, *args: Any) -> Any:
            in_claim.append(True)
            try:
                return super()._claim_some(*args)
            finally:
                in_claim.pop()

    with Listing(tmp_path / "listed.db") as store:
        sessions.submit_sessions(store, 2)
        stats = Worker(store, sessions.factory, threads=1).run()
        assert (stats.skipped, stats.finished) == (2, {"completed": 1})
        assert Listing.listings == 3  # (the third one: nothing left)
        assert store.session("s0").lease_owner == "other-s0"
        info = store.session("s1")
        assert (info.status, info.lease_owner) == ("completed", None)
    assert looked == [dead, dead]  # (s1's second claim: the candidate, then its lease)


@pytest.mark.parametrize(
    ("listed", "unlooked"),
    [
        (None, False),  # (no listing given: every holder is looked at)
        ({"s0": "other"}, False),  # listed with this holder (it was gone then)
        ({"s0": ""}, False),  # a root listed in its child's place: holder unknown
        ({}, False),  # not listed
        ({"s0": None}, True),  # free when listed: leased since
    ],
)
def test_a_claim_passes_over_a_session_a_live_holder_leased(store, listed, unlooked):
    sessions.submit_sessions(store, 1)
    store.acquire("s0", "other", 600.0)  # (this process: alive)
    candidates = collections.deque(["s0"])
    # (Not counted when the listing showed this lease: a look, not a race lost.)
    counted = 0 if listed == {"s0": "other"} else 1
    assert store._claim_some(candidates, "me", 30.0, listed, 1) == ([], counted, unlooked)
    assert store.session("s0").lease_owner == "other"


def test_a_claim_takes_a_session_whose_lease_has_no_expiry(store):
    # (A hand-edited row: an owner without an expiry holds nothing.)
    sessions.submit_sessions(store, 1)
    assert store._db is not None
    store._db.execute("UPDATE sessions SET lease_owner = 'other' WHERE id = 's0'")
    candidates = collections.deque(["s0"])
    [(session_id, claim)], skipped, unlooked = store._claim_some(
        candidates, "me", 30.0, {"s0": None}, 1
    )
    assert (session_id, skipped, unlooked) == ("s0", 0, False) and claim is not None
    assert store.session("s0").lease_owner == "me"
