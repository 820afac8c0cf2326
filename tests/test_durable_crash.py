"""Crash tests with real processes: workers SIGKILLed at chosen and random points.

Each test runs ``tests/durable_worker.py`` processes over one store file and kills
them: at a kill point picked by a seed (inside a model call, inside a tool before
or after its side effect, around a parked pause, inside a store transaction), or
from outside at a random moment. Then a fresh worker finishes the sessions, and:

- every session ends ``completed`` with the same ``RunResult`` as an uninterrupted
  ``agentloop.run`` of it, and ``run_durable`` on the finished session gives that
  result back;
- the stored log replays (``replay.replay``) to that result;
- every tool side effect happened once, except that each kill may repeat the one
  effect it interrupted (started after the killed worker's last commit); the
  idempotent tool (which checks its idempotency key) happened exactly once.

Also: two workers racing over the same sessions (each session advanced by exactly
one of them at a time, every effect exactly once), and a worker stalled past its
lease (SIGSTOP) whose sessions another worker takes over: the staller's next
commit is refused.

Every scenario runs with sync workers (``replay.run_durable``), async workers
(``replay.arun_durable``: the model's ``astream``, ``async def`` tools, the store
used from worker threads), and workers of both kinds taking turns on the same
sessions (``mixed``).
"""

from __future__ import annotations

import collections
import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import pytest

import replay
from agentloop import (
    RunResult,
    ScriptedModel,
    ScriptedResponse,
    ToolCall,
    UserMessage,
    run,
    tool,
)

from . import durable_scenario as scenario
from .helpers import subprocess_env

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.skipif(os.name != "posix", reason="SIGKILL/SIGSTOP are POSIX")

#: Kill points by category (a worker dies at the n-th point whose label starts so).
CATEGORIES: dict[str, tuple[str, ...]] = {
    "model": ("model:call", "model:chunk"),
    "tool": (
        "tool:before:raw_effect",
        "tool:after:raw_effect",
        "tool:before:keyed_effect",
        "tool:after:keyed_effect",
        "tool:before:approved_effect",
        "tool:after:approved_effect",
    ),
    "pause": ("pause:parked", "pause:answered"),
    "commit": (
        "sql:BEGIN IMMEDIATE",
        "sql:INSERT INTO events",
        "sql:UPDATE sessions SET",
        "sql:DELETE FROM answers",
        "sql:INSERT INTO answers",
        "sql:COMMIT",
    ),
}
EFFECTS = (
    ("raw_effect", "c1"),
    ("keyed_effect", "c2"),
    ("approved_effect", "c3"),
    ("raw_effect", "c4"),
)


MODES = ("sync", "async", "mixed")


class Bench:
    """One store file, the markers file, and the journals of the workers run on it.

    ``mode``: the workers' kind: ``sync``, ``async``, or ``mixed`` (they alternate).
    """

    def __init__(self, directory: Path, mode: str = "sync") -> None:
        self.mode = mode
        self.directory = directory
        self.db = directory / "sessions.db"
        self.markers = directory / "markers.txt"
        self.markers.touch()
        self.journals: list[Path] = []
        self.killed: list[Path] = []  # journals of workers that died
        self.sessions: list[str] = []

    def command(self, sessions: Sequence[str], *options: str) -> list[str]:
        journal = self.directory / f"journal-{len(self.journals)}.txt"
        journal.touch()
        asynchronous = self.mode == "async" or (
            self.mode == "mixed" and len(self.journals) % 2 == 1
        )
        self.journals.append(journal)
        if asynchronous:
            options = ("--async", *options)
        return [
            sys.executable,
            "-m",
            "tests.durable_worker",
            str(self.db),
            str(self.markers),
            str(journal),
            "--sessions",
            ",".join(sessions),
            *options,
        ]

    def run(
        self, *options: str, sessions: Sequence[str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            self.command(self.sessions if sessions is None else sessions, *options),
            cwd=ROOT,
            env=subprocess_env(),
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        if done.returncode == -signal.SIGKILL:
            self.killed.append(self.journals[-1])
        return done

    def start(self, *options: str, sessions: Sequence[str] | None = None) -> subprocess.Popen[str]:
        return subprocess.Popen(
            self.command(self.sessions if sessions is None else sessions, *options),
            cwd=ROOT,
            env=subprocess_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def finish(self) -> None:
        done = self.run()
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == "done"

    def verify(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """Every session finished like an uninterrupted run; effects as promised."""
        with replay.SQLiteStore(self.db) as store:
            for session_id in self.sessions:
                expected = reference(session_id, monkeypatch, self.directory)
                info = store.session(session_id)
                assert (info.status, info.steps, info.lease_owner) == ("completed", 4, None)
                assert not info.answered
                events = store.events(session_id)
                assert replay.replay(events).result == expected
                again = replay.run_durable(
                    store,
                    session_id,
                    model=scenario.PointedModel(),
                    tools=scenario.TOOLS,
                )
                assert again == expected
        allowed = collections.Counter[str]()
        for journal in self.killed:
            allowed.update(in_flight(journal))
        lines = self.markers.read_text().splitlines()
        counts = collections.Counter(lines)
        expected_lines = {
            f"{tool}\t{session_id}:{call}" for session_id in self.sessions for tool, call in EFFECTS
        }
        assert set(counts) == expected_lines
        for line, count in counts.items():
            key = line.split("\t")[1]
            if line.startswith("keyed_effect"):
                assert count == 1, line
            else:
                assert count - 1 <= allowed[key], (line, count, allowed)
        assert sum(counts.values()) - len(counts) <= len(self.killed)


def in_flight(journal: Path) -> set[str]:
    """The keys a worker started after its last commit (what its death may repeat)."""
    flying: set[str] = set()
    for line in journal.read_text().splitlines():
        if line == "commit":
            flying.clear()
        else:
            flying.add(line.split("\t")[1])
    return flying


def stop_outside_a_transaction(process: subprocess.Popen[str], db: Path) -> None:
    """SIGSTOP ``process`` at a moment it holds no write lock on ``db`` (else the
    other worker would wait for it)."""
    for _attempt in range(200):
        process.send_signal(signal.SIGSTOP)
        probe = sqlite3.connect(db, timeout=0.05, isolation_level=None)
        try:
            probe.execute("BEGIN IMMEDIATE")
            probe.execute("ROLLBACK")
            return
        except sqlite3.OperationalError:
            process.send_signal(signal.SIGCONT)
            time.sleep(0.01)
        finally:
            probe.close()
    raise AssertionError("the worker never left its write transactions")


_REFERENCE: dict[str, RunResult] = {}


def reference(session_id: str, monkeypatch: pytest.MonkeyPatch, directory: Path) -> RunResult:
    """The session run uninterrupted by ``agentloop.run`` (no store at all)."""
    if session_id not in _REFERENCE:
        with monkeypatch.context() as patch:
            scratch = directory / "reference-markers.txt"
            scratch.touch()
            patch.setitem(scenario.PATHS, "markers", str(scratch))
            patch.setitem(scenario.PATHS, "journal", os.devnull)
            _REFERENCE[session_id] = run(
                scenario.messages(session_id),
                model=scenario.PointedModel(),
                tools=scenario.TOOLS,
                system=scenario.SYSTEM,
                on_pause=lambda pause: scenario.APPROVE,
            )
    return _REFERENCE[session_id]


# --------------------------------------------------------------------------- kills at chosen points


SEEDED = [("sync", seed) for seed in range(8)] + [
    (mode, seed) for mode in ("async", "mixed") for seed in range(8, 12)
]


@pytest.mark.parametrize(("mode", "seed"), SEEDED)
def test_workers_killed_at_seeded_points_finish_like_uninterrupted_runs(
    tmp_path, monkeypatch, mode, seed
):
    # Each seed kills 4 workers, one per category (model call, tool call, pause,
    # commit), in a seeded order, at a seeded label and occurrence: 32 kills in all
    # for sync workers, 16 for async ones and 16 for both taking turns.
    rng = random.Random(seed)
    order = list(CATEGORIES)
    rng.shuffle(order)
    bench = Bench(tmp_path, mode)
    bench.sessions = [f"seed{seed}-{n}" for n in range(3)]
    died_at: list[str] = []
    for _attempt in range(30):
        if len(died_at) == len(order):
            break
        category = order[len(died_at)]
        label = rng.choice(CATEGORIES[category])
        done = bench.run("--kill", label, "--nth", str(rng.randint(1, 3)))
        if done.returncode == -signal.SIGKILL:
            line = done.stderr.strip().splitlines()[-1]
            assert line.startswith(f"killed at {label}"), done.stderr
            died_at.append(category)
        else:
            # The worker finished every session before reaching the point: give
            # the next one new sessions to die in.
            assert done.returncode == 0, done.stderr
            bench.sessions += [f"seed{seed}-{len(bench.sessions) + n}" for n in range(2)]
    assert died_at == order
    bench.finish()
    bench.verify(monkeypatch)


@pytest.mark.parametrize("mode", MODES)
def test_workers_killed_at_random_moments_finish_like_uninterrupted_runs(
    tmp_path, monkeypatch, mode
):
    # Kills from outside, at a random moment once the worker has started working
    # (tools and model calls are slowed a little, so the moments fall everywhere).
    rng = random.Random(20260101)
    bench = Bench(tmp_path, mode)
    bench.sessions = [f"random-{n}" for n in range(3)]
    kills = 0
    for _attempt in range(40):
        if kills == 6:
            break
        worker = bench.start("--slow", "0.01")
        journal = bench.journals[-1]
        while worker.poll() is None and not journal.read_text():
            time.sleep(0.005)
        time.sleep(rng.uniform(0.0, 0.15))
        if worker.poll() is None:
            worker.send_signal(signal.SIGKILL)
        _, err = worker.communicate(timeout=60)
        if worker.returncode == -signal.SIGKILL:
            bench.killed.append(journal)
            kills += 1
        else:
            assert worker.returncode == 0, err
            bench.sessions += [f"random-{len(bench.sessions) + n}" for n in range(2)]
    assert kills == 6
    bench.finish()
    bench.verify(monkeypatch)


# --------------------------------------------------------------------------- several workers


@pytest.mark.parametrize("mode", MODES)
def test_two_workers_racing_on_one_store_advance_each_session_once(tmp_path, monkeypatch, mode):
    bench = Bench(tmp_path, mode)
    bench.sessions = [f"race-{n}" for n in range(8)]
    # Opposite orders, so that they meet on every session.
    workers = [
        bench.start("--race", "--owner", "worker-a"),
        bench.start("--race", "--owner", "worker-b", sessions=bench.sessions[::-1]),
    ]
    for worker in workers:
        out, err = worker.communicate(timeout=120)
        assert worker.returncode == 0, err
        assert out.strip() == "done"
    bench.verify(monkeypatch)  # nobody was killed: every effect exactly once
    lines = bench.markers.read_text().splitlines()
    assert len(lines) == len(set(lines)) == 4 * len(bench.sessions)


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_stalled_worker_loses_its_lease_and_cannot_commit(tmp_path, monkeypatch, mode):
    bench = Bench(tmp_path, mode)
    bench.sessions = ["stalled"]
    # Worker A sleeps in its first model call; it is stopped there, past its lease.
    stalled = bench.start("--owner", "worker-a", "--lease", "0.5", "--slow", "0.3")
    journal_a = bench.journals[-1]
    with replay.SQLiteStore(bench.db) as store:
        while store.find("stalled") is None:
            time.sleep(0.005)
        stop_outside_a_transaction(stalled, bench.db)
        try:
            info = store.session("stalled")
            assert info.lease_owner == "worker-a"
            while store.session("stalled").lease_expires > store.now():  # type: ignore[operator]
                time.sleep(0.05)
            # Worker B takes the session over (A's lease expired) and finishes it.
            done = bench.run("--owner", "worker-b")
            assert done.returncode == 0, done.stderr
        finally:
            stalled.send_signal(signal.SIGCONT)
        _, err = stalled.communicate(timeout=60)
        assert stalled.returncode == 1
        assert "StoreConflict" in err and "another writer advanced the session" in err
        assert store.session("stalled").status == "completed"
    # A's model call was in flight; if it got as far as a tool, that effect may repeat.
    bench.killed.append(journal_a)
    bench.verify(monkeypatch)


# --------------------------------------------------------------------------- format 1 sessions

_REWRITE_AND_DIE = """
import os, signal, sys
sys.path.insert(0, sys.argv[2])
import replay
from make_store_fixture import TOOLS, answer
from agentloop import FunctionModel

store = replay.SQLiteStore(sys.argv[1])
seen = []

def trace(sql):
    if sql.startswith("UPDATE events SET event"):
        seen.append(sql)
        if len(seen) == int(sys.argv[3]):
            os.kill(os.getpid(), signal.SIGKILL)  # in the middle of the rewrite

store._db.set_trace_callback(trace)
replay.run_durable(store, "crashed", model=FunctionModel(answer), tools=TOOLS, owner="dead-worker")
"""


@pytest.mark.skipif(os.name != "posix", reason="SIGKILL")
@pytest.mark.parametrize("nth", [1, 4])
def test_a_format_1_session_killed_while_it_is_rewritten_stays_format_1(tmp_path, nth):
    # The rewrite of a format-1 session as format 2 is one transaction with the
    # append that needs it: a worker killed in the middle leaves the session as it was.
    from .test_store import load_fixture_script

    fixtures = Path(__file__).resolve().parent.parent / "fixtures"
    script = load_fixture_script()
    db = tmp_path / "golden.db"
    script.restore((fixtures / "store" / "schema-1.sql").read_text(), db)
    with replay.SQLiteStore(db) as store:
        before = store.events("crashed")
    worker = subprocess.run(
        [sys.executable, "-c", _REWRITE_AND_DIE, str(db), str(fixtures), str(nth)],
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert worker.returncode == -signal.SIGKILL, worker.stderr
    with replay.SQLiteStore(db) as store:
        row = "SELECT log_format, log_header FROM sessions WHERE id = 'crashed'"
        assert store._db.execute(row).fetchone() == (1, None)
        assert store.events("crashed") == before
        store.release("crashed", "dead-worker")
        options = {"model": script.FunctionModel(script.answer), "tools": script.TOOLS}
        parked = replay.run_durable(store, "crashed", **options)
        assert type(parked) is replay.Parked  # on to its approval, now in format 3
        assert store._db.execute(row).fetchone()[0] == 3
        assert store.events("crashed")[: len(before)] == before


# --------------------------------------------------------------------------- a SIGKILL: at once


@pytest.mark.parametrize(
    ("mode", "kill_at", "nth"),
    [
        ("sync", "tool:before:raw_effect", 1),
        ("async", "tool:before:raw_effect", 1),
        ("sync", "model:call", 2),
        ("async", "sql:COMMIT", 3),
    ],
)
def test_the_same_call_right_after_a_sigkill_finishes_the_session(
    tmp_path, monkeypatch, mode, kill_at, nth
):
    # What the README promises: a worker SIGKILLed mid-session, then the same call
    # (another process, another owner id) at once finishes it. The dead worker's
    # lease lasts 600 s: the call can only have gone on because it saw that the
    # lease's process is gone, not because the lease expired.
    bench = Bench(tmp_path, mode)
    bench.sessions = ["s1"]
    done = bench.run(
        "--kill", kill_at, "--nth", str(nth), "--owner", "dead-worker", "--lease", "600"
    )
    assert done.returncode == -signal.SIGKILL, done.stderr
    monkeypatch.setitem(scenario.PATHS, "markers", str(bench.markers))
    with replay.SQLiteStore(bench.db) as store:
        info = store.session("s1")
        assert info.lease_owner == "dead-worker"  # still held, for about 600 more seconds
        assert info.lease_expires is not None and info.lease_expires > store.now() + 500
        assert store.runnable() == ["s1"]  # its holder is gone: a worker may take it
        result = scenario.run_session(
            store, "s1", owner="next-worker", lease_seconds=600, asynchronous=mode == "async"
        )
        assert result.status == "completed"
    bench.verify(monkeypatch)


def test_a_lease_held_on_another_host_stands_until_it_expires(tmp_path, monkeypatch):
    # Across machines nothing is known of the holder's process (DESIGN §20): the
    # lease stands, and SessionLeased says whose it is, for how long, and what to do.
    bench = Bench(tmp_path)
    bench.sessions = ["s1"]
    done = bench.run("--kill", "tool:before:raw_effect", "--nth", "1", "--owner", "dead-worker")
    assert done.returncode == -signal.SIGKILL, done.stderr
    monkeypatch.setitem(scenario.PATHS, "markers", str(bench.markers))
    with replay.SQLiteStore(bench.db) as store:
        store._db.execute("UPDATE sessions SET lease_host = 'elsewhere' WHERE id = 's1'")
        assert store.runnable() == []
        with pytest.raises(replay.SessionLeased) as caught:
            scenario.run_session(store, "s1", owner="next-worker")
        leased = caught.value
        assert (leased.session_id, leased.owner, leased.host) == ("s1", "dead-worker", "elsewhere")
        assert 0 < leased.expires_in <= 30.0
        assert leased.expires == store.session("s1").lease_expires
        message = str(leased)
        assert f"is leased by 'dead-worker' (process {leased.pid} on host 'elsewhere') for " in (
            message
        )
        assert " more seconds" in message and "on another host" in message
        assert "store.release('s1', 'dead-worker')" in message
        assert "owner='dead-worker'" in message
        assert store.release("s1", leased.owner)
        assert scenario.run_session(store, "s1", owner="next-worker").status == "completed"
    bench.verify(monkeypatch)


_SAME_OWNER_WORKER = """
import pathlib, sys, time
import replay
from agentloop import FunctionModel, ScriptedResponse, ToolCall, UserMessage, tool

db, ready, go = sys.argv[1:]


@tool
def wait() -> str:
    '''Wait for the test's go.'''
    pathlib.Path(ready).touch()
    while not pathlib.Path(go).exists():
        time.sleep(0.01)
    return "waited"


def model_fn(request):
    if request.step == 1:
        return ScriptedResponse.tool_calls("r1", ToolCall("c1", "wait", {}))
    return ScriptedResponse.text("r2", "done")


with replay.SQLiteStore(db) as store:
    try:  # the documented serve loop's catch
        replay.run_durable(
            store, "s", [UserMessage("u1", "go")], model=FunctionModel(model_fn),
            tools=[wait], owner="w",
        )
    except (replay.SessionLeased, replay.StoreConflict) as exc:
        print("skipped:", type(exc).__name__, exc)
"""


def test_a_worker_whose_lease_another_run_of_its_owner_released_gets_session_leased(tmp_path):
    # Another run with the same owner id ends (releasing the lease) while this
    # worker's tool runs: the worker's commit is refused with the documented
    # SessionLeased, which the serve loop catches (it was a plain StoreError).
    db, ready, go = tmp_path / "s.db", tmp_path / "ready", tmp_path / "go"
    worker = subprocess.Popen(
        [sys.executable, "-c", _SAME_OWNER_WORKER, str(db), str(ready), str(go)],
        cwd=ROOT,
        env=subprocess_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        for _ in range(6000):
            if ready.exists() or worker.poll() is not None:
                break
            time.sleep(0.01)
        assert ready.exists(), worker.communicate()
        with replay.SQLiteStore(db) as store:
            assert store.release("s", "w")
        go.touch()
        out, err = worker.communicate(timeout=60)
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
    assert worker.returncode == 0, err
    assert out.startswith("skipped: SessionLeased session 's': nobody holds its lease; 'w' lost it")
    with replay.SQLiteStore(db) as store:
        assert [e.type for e in store.events("s")][-1] == "tool.call"  # nothing more written


_SCRIPTED_WORKER = """
import os, signal, sys
import replay
from tests.test_durable_crash import SCRIPT, scripted_tools

db = sys.argv[1]
with replay.SQLiteStore(db) as store:
    replay.run_durable(
        store, "s", SCRIPT.messages, model=SCRIPT.model(), tools=scripted_tools(kill=True),
        owner="w",
    )
"""


class SCRIPT:
    """A ScriptedModel session: three tool steps, then the answer."""

    messages = (UserMessage("u1", "Count to three."),)
    responses = (
        *(
            ScriptedResponse.tool_calls(f"r{n}", ToolCall(f"c{n}", "count", {"n": n}), text=f"{n}.")
            for n in (1, 2, 3)
        ),
        ScriptedResponse.text("r4", "Counted to three."),
    )

    @classmethod
    def model(cls) -> ScriptedModel:
        return ScriptedModel(cls.responses)


def scripted_tools(*, kill: bool = False) -> list[object]:
    @tool
    def count(n: int) -> str:
        """Count."""
        if kill and n == 3:
            os.kill(os.getpid(), signal.SIGKILL)
        return f"counted {n}"

    return [count]


@pytest.mark.parametrize("asynchronous", [False, True])
def test_a_fresh_scripted_model_continues_a_session_killed_mid_run(tmp_path, asynchronous):
    # The new process's ScriptedModel starts its list again; it skips the
    # responses the stored transcript holds (the session ended failed for good:
    # "response id 'r1' was already used").
    db = tmp_path / "s.db"
    done = subprocess.run(
        [sys.executable, "-c", _SCRIPTED_WORKER, str(db)],
        cwd=ROOT,
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == -signal.SIGKILL, done.stderr
    model = SCRIPT.model()
    with replay.SQLiteStore(db) as store:
        assert store.session("s").steps == 3
        options = {"model": model, "tools": scripted_tools(), "owner": "w"}
        if asynchronous:
            import asyncio

            result = asyncio.run(replay.arun_durable(store, "s", SCRIPT.messages, **options))
        else:
            result = replay.run_durable(store, "s", SCRIPT.messages, **options)
        assert replay.replay(store.events("s")).result == result
    assert result == run(SCRIPT.messages, model=SCRIPT.model(), tools=scripted_tools())
    assert (result.status, model.skipped, model.call_count) == ("completed", 3, 1)
    model.assert_complete()
