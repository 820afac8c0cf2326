"""The fleet on this machine: sessions per second through ``replay.Worker``.

Run from a checkout::

    python bench/fleet.py          # a few minutes
    python bench/fleet.py --quick  # smoke run (numbers mean nothing)

Prints, never asserts (timing is not a test):

- F1 sessions per second: ``SESSIONS`` scripted 4-step sessions (three tool calls
  one after the other, then the answer; the model is a ``FunctionModel``) stored
  with ``replay.submit`` in a fresh store file (``synchronous=NORMAL``), then run
  by one ``replay.Worker`` with 1, 4 and 16 threads; and by
  ``python -m replay worker --processes 4 --threads 1`` (four processes: the
  threads of one process share its interpreter lock). Then with ``tasks=16``
  (each thread runs 16 sessions at once on an event loop, their commits grouped;
  ``afactory``: the same sessions, the tool ``async def``): one thread, 4
  processes, and (for comparison, not a 4-worker figure) 2 processes of 32 tasks,
  one per CPU of this machine. Goal (issue 26): at least 2,000 sessions per
  second with 4 workers; printed as met or missed for the best 4-worker figure.
  With each, the CPU time per session (on a shared machine, the
  steadier figure): this process's for threads; for processes, every process of
  the command's, their start-up included (printed apart: the same command on an
  empty store), while the sessions per second count from the workers' start.
- F2 what one session costs in one thread: ``run_durable`` of the same sessions one
  after the other, no worker (the floor the worker's threads divide).
- F3 the SQLite floor: the write transactions a worker makes for one session (its
  claim, then one commit per side-effect boundary: seven for these sessions), with
  the same statements and the same stored rows (those F2 wrote), on a fresh store
  file, and nothing else: no loop, no encoding. SQLite takes one writer at a time
  (per file), so this bounds the fleet's sessions per second on this machine
  whatever the number of workers.

- F4 the write lock's share: one thread's worker run with the time spent inside
  its write transactions (from ``BEGIN IMMEDIATE`` to ``COMMIT``: the statements
  and the Python between them, e.g. the events' encoding) summed. One writer at a
  time holds that lock (per file), so one over it bounds the sessions per second
  of any number of workers, threads or processes (Amdahl's serial part).

``--crash N`` runs the issue's crash test at full size instead (``--crash 10000``):
N sessions, 4 worker processes, one SIGKILLed every second until every session is
finished; then it checks that none was lost or duplicated (tests/worker_factory.py
``check_fleet``: every session completed with no lease left, one run each, each tool
call recorded once, every log verifies and replays, each side effect exactly once)
and prints the kills, the seconds and the verdict. The CI test
(tests/test_worker_crash.py) is the same at 200 sessions.

The machine is shared: each figure is one run; repeat to see the noise.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # run from a checkout

import replay  # noqa: E402
from agentloop import (  # noqa: E402
    FunctionModel,
    ModelRequest,
    ScriptedResponse,
    ToolCall,
    UserMessage,
    tool,
)
from replay import _store  # noqa: E402

GOAL = 2000.0
TASKS = 16  # sessions at once per thread in the grouped rows (``tasks=``)


@tool
def effect(n: int) -> dict[str, int]:
    """A side effect."""
    return {"n": n}


@tool(name="effect", description="A side effect.")
async def aeffect(n: int) -> dict[str, int]:
    return {"n": n}


def answer(request: ModelRequest) -> ScriptedResponse:
    step = request.step
    if step <= 3:
        return ScriptedResponse.tool_calls(f"r{step}", ToolCall(f"c{step}", "effect", {"n": step}))
    return ScriptedResponse.text("r4", "done")


def factory(info: replay.SessionInfo) -> replay.SessionSetup:
    """The worker's factory (``--factory fleet:factory`` with bench/ on the path)."""
    return replay.SessionSetup(model=FunctionModel(answer), tools=[effect])


def afactory(info: replay.SessionInfo) -> replay.SessionSetup:
    """The same sessions for a worker's ``tasks`` (``--factory fleet:afactory``): the
    tool ``async def`` (a sync one would run in a pool thread)."""
    return replay.SessionSetup(model=FunctionModel(answer), tools=[aeffect])


def fresh_store(path: Path, count: int) -> None:
    with replay.SQLiteStore(path) as store:
        for index in range(count):
            replay.submit(store, f"s{index}", [UserMessage(f"u{index}", "Do it.")], tools=[effect])


def threads_rate(
    directory: Path, count: int, threads: int, tasks: int | None = None
) -> tuple[float, float]:
    """Sessions per second, and CPU milliseconds per session (this process's)."""
    path = directory / f"threads-{threads}-{tasks}.db"
    fresh_store(path, count)
    with replay.SQLiteStore(path) as store:
        cpu = time.process_time()
        how = factory if tasks is None else afactory
        stats = replay.work(store, how, threads=threads, tasks=tasks)
        cpu = time.process_time() - cpu
    assert stats.finished == {"completed": count}, stats
    return stats.per_second, cpu / count * 1000


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def processes_rate(
    directory: Path, count: int, processes: int, tasks: int | None = None
) -> tuple[float, float, float]:
    """Sessions per second (over the workers' runs: their start-up is not timed),
    CPU milliseconds per session of every process of the command, and the CPU
    seconds of the same command on an empty store (the processes' start-up)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), str(HERE.parent)])}

    def worker(path: Path) -> dict[str, Any]:
        command = [sys.executable, "-m", "replay", "worker", str(path), "--factory"]
        options = ["--processes", str(processes), "--threads", "1", "--quiet", "--json"]
        if tasks is not None:
            options += ["--tasks", str(tasks)]
        done = subprocess.run(
            [*command, "fleet:factory" if tasks is None else "fleet:afactory", *options],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        )
        return dict(json.loads(done.stdout))

    empty = directory / f"processes-{processes}-{tasks}-empty.db"
    fresh_store(empty, 0)
    cpu = children_cpu()
    worker(empty)
    start_up = children_cpu() - cpu
    path = directory / f"processes-{processes}-{tasks}.db"
    fresh_store(path, count)
    cpu = children_cpu()
    stats = worker(path)
    cpu = children_cpu() - cpu
    assert stats["finished"] == {"completed": count}, stats
    return float(stats["per_second"]), cpu / count * 1000, start_up


def serial_rate(directory: Path, count: int) -> float:
    path = directory / "serial.db"
    fresh_store(path, count)
    with replay.SQLiteStore(path) as store:
        started = time.perf_counter()
        for index in range(count):
            replay.run_durable(store, f"s{index}", model=FunctionModel(answer), tools=[effect])
        return count / (time.perf_counter() - started)


class _Timed:
    """The store's connection, its ``execute`` timed (see :func:`write_lock`)."""

    def __init__(self, db: sqlite3.Connection, execute: Any) -> None:
        self.__dict__.update(_db=db, execute=execute)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._db, name)


def write_lock(directory: Path, count: int, tasks: int | None = None) -> tuple[float, float, float]:
    """F4: one thread's worker run with the time inside its write transactions
    (``BEGIN IMMEDIATE`` returned to ``COMMIT`` returned) summed: CPU microseconds
    per session in all, and inside the write lock (CPU, wall). The store's
    statements are timed through its connection and its cursor (private
    attributes: a bench's look inside)."""
    inside = [0.0, 0.0]
    began = [0.0, 0.0]

    def timed(execute: Any) -> Any:
        def run(sql: str, *args: Any) -> Any:
            result = execute(sql, *args)
            if sql == "BEGIN IMMEDIATE":
                began[:] = time.thread_time(), time.perf_counter()
            elif sql in ("COMMIT", "ROLLBACK") and began[1]:
                inside[0] += time.thread_time() - began[0]
                inside[1] += time.perf_counter() - began[1]
                began[1] = 0.0
            return result

        return run

    path = directory / f"write-lock-{tasks}.db"
    fresh_store(path, count)
    with replay.SQLiteStore(path) as store:
        db = store._db
        assert db is not None
        store._execute = timed(store._execute)
        store._db = _Timed(db, timed(db.execute))  # type: ignore[assignment]
        cpu = time.process_time()
        how = factory if tasks is None else afactory
        stats = replay.work(store, how, threads=1, tasks=tasks)
        cpu = time.process_time() - cpu
        store._db = db
    assert stats.finished == {"completed": count}, stats
    return cpu / count * 1e6, inside[0] / count * 1e6, inside[1] / count * 1e6


def floor_rate(directory: Path) -> tuple[float, float]:
    """F3: the sessions F2 stored (serial.db), written again the way a worker writes
    them, with bare SQL: sessions per second of SQLite work alone (wall clock, and
    per CPU second of this process)."""
    sessions: list[tuple[str, list[list[tuple[int, str, str]]]]] = []
    source = sqlite3.connect(directory / "serial.db")
    try:
        for (session_id,) in source.execute("SELECT id FROM sessions ORDER BY id").fetchall():
            # (A session's rows, read as the store reads them.)
            rows = source.execute(_store._SELECT_ROWS, (session_id, session_id)).fetchall()
            # One batch per commit: up to each step.start and tool.call (the
            # effects' boundaries), the rest at the end; the first one is submit's.
            batches: list[list[tuple[int, str, str]]] = [[]]
            for row in rows:
                batches[-1].append(row)
                if row[1].startswith(('{"type":"step.start"', '{"type":"tool.call"')):
                    batches.append([])
            sessions.append((session_id, [batch for batch in batches if batch]))
    finally:
        source.close()
    path = directory / "floor.db"
    replay.SQLiteStore(path).close()  # the schema
    db = sqlite3.connect(path, isolation_level=None)
    try:
        db.execute("PRAGMA synchronous=NORMAL")
        insert = "INSERT INTO events (event_key, sequence, event, link) VALUES (?, ?, ?, ?)"
        numbers = {session_id: number for number, (session_id, _) in enumerate(sessions, 1)}

        def keyed(session_id: str, batch: list[tuple[int, str, str]]) -> list[tuple[Any, ...]]:
            base = numbers[session_id] << 32  # (the store's event keys: schema 6)
            return [(base + row[0], *row) for row in batch]

        for session_id, batches in sessions:  # what submit stores (not timed)
            db.execute(
                "INSERT INTO sessions (id, status, steps, next_sequence, created, updated, "
                "config, log_format, number) VALUES (?, 'running', 1, ?, 0, 0, '{}', 3, ?)",
                (session_id, len(batches[0]), numbers[session_id]),
            )
            db.executemany(insert, keyed(session_id, batches[0]))
        started, cpu = time.perf_counter(), time.process_time()
        for session_id, batches in sessions:
            db.execute("BEGIN IMMEDIATE")  # the claim: the row, the lease, the events
            db.execute("SELECT * FROM sessions WHERE id = ?", (session_id,)).fetchone()
            db.execute(
                "UPDATE sessions SET lease_owner = 'w', lease_expires = 1e12 WHERE id = ?",
                (session_id,),
            )
            db.execute(
                "SELECT * FROM events WHERE event_key >= ? AND event_key < ?",
                (numbers[session_id] << 32, (numbers[session_id] + 1) << 32),
            ).fetchall()
            db.execute("COMMIT")
            sequence = len(batches[0])
            for batch in batches[1:]:
                db.execute("BEGIN IMMEDIATE")
                sequence += len(batch)
                db.execute(
                    "UPDATE sessions SET next_sequence = ?, steps = steps + 1, updated = ? "
                    "WHERE id = ?",
                    (sequence, time.time(), session_id),
                )
                db.executemany(insert, keyed(session_id, batch))
                db.execute("COMMIT")
        wall, cpu = time.perf_counter() - started, time.process_time() - cpu
        return len(sessions) / wall, len(sessions) / cpu
    finally:
        db.close()


def crash(count: int) -> int:
    """``--crash N``: the fleet under fire at full size (see the module's docs)."""
    from tests import worker_factory

    with tempfile.TemporaryDirectory() as tmp:
        print(f"{count} sessions, 4 worker processes, one SIGKILLed every second", flush=True)
        run = worker_factory.under_fire(
            Path(tmp),
            sessions=count,
            processes=4,
            kill_every=1.0,
            kills=count,  # (until every session is finished)
            give_up=max(3600.0, count),
        )
        seconds = run["seconds"]
        print(f"  {run['kills']} kills, {seconds:.0f} s, {count / seconds:.0f} sessions/s")
        try:
            worker_factory.check_fleet(run["db"], run["effects"], run["ids"])
        except AssertionError as exc:
            print(f"  FAILED: {exc!r}")
            return 1
        print("  0 lost, 0 duplicated: every session completed once, every effect once")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="smoke run, few sessions")
    parser.add_argument("--sessions", type=int, default=2000, help="sessions per run")
    parser.add_argument("--json", metavar="PATH", help="also write the numbers as JSON")
    parser.add_argument(
        "--crash", type=int, metavar="N", help="the crash test with N sessions instead"
    )
    args = parser.parse_args(argv)
    if args.crash is not None:
        return crash(args.crash)
    count = 40 if args.quick else args.sessions
    results: dict[str, Any] = {"sessions": count, "goal_per_second_4_workers": GOAL}
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        print(f"F1 {count} scripted 4-step sessions through replay.Worker")
        print("                               sessions/s  CPU ms/session")
        for threads in (1, 4, 16):
            rate, cpu = threads_rate(directory, count, threads)
            results[f"threads_{threads}"] = rate
            results[f"threads_{threads}_cpu_ms"] = cpu
            print(f"  {threads:>2} threads, 1 process     {rate:>9.0f}/s {cpu:>10.2f}")
        rate, cpu, start_up = processes_rate(directory, count, 4)
        results["processes_4"] = rate
        results["processes_4_cpu_ms"] = cpu
        results["processes_4_start_up_cpu_s"] = start_up
        run_cpu = cpu - start_up * 1000 / count
        results["processes_4_run_cpu_ms"] = run_cpu
        print(
            f"   4 processes, 1 thread each {rate:>8.0f}/s {cpu:>10.2f} "
            f"(with the 5 interpreters' start-up: {start_up:.2f} s of CPU on an empty store; "
            f"{run_cpu:.2f} without it)"
        )
        rate, cpu = threads_rate(directory, count, 1, TASKS)
        results["tasks_1"], results["tasks_1_cpu_ms"] = rate, cpu
        print(f"   1 thread, {TASKS} tasks (grouped)  {rate:>5.0f}/s {cpu:>10.2f}")
        rate, cpu, start_up = processes_rate(directory, count, 4, TASKS)
        results["processes_4_tasks"], results["processes_4_tasks_cpu_ms"] = rate, cpu
        run_cpu = cpu - start_up * 1000 / count
        results["processes_4_tasks_run_cpu_ms"] = run_cpu
        print(
            f"   4 processes, {TASKS} tasks each {rate:>7.0f}/s {cpu:>10.2f} ({run_cpu:.2f} "
            "without the start-up)"
        )
        rate, cpu, start_up = processes_rate(directory, count, 2, 2 * TASKS)
        results["processes_2_tasks"], results["processes_2_tasks_cpu_ms"] = rate, cpu
        print(
            f"   2 processes, {2 * TASKS} tasks each {rate:>7.0f}/s {cpu:>10.2f} (one per CPU "
            "here; not 4 workers)"
        )
        best = max(results["threads_4"], results["processes_4"], results["processes_4_tasks"])
        results["best_4_workers"] = best
        verdict = "met" if best >= GOAL else "missed"
        results["goal_met"] = best >= GOAL
        print(f"  goal >= {GOAL:,.0f}/s with 4 workers: {best:,.0f}/s  {verdict}")
        rate = serial_rate(directory, count)
        results["serial_run_durable"] = rate
        print(f"F2 run_durable one after the other, no worker: {rate:.0f}/s")
        rate, per_cpu = floor_rate(directory)
        results["sqlite_floor"], results["sqlite_floor_per_cpu_second"] = rate, per_cpu
        print(
            f"F3 the SQLite floor (a worker's write transactions alone): {rate:.0f}/s "
            f"({per_cpu:.0f} per CPU second)"
        )
        cpu, locked, locked_wall = write_lock(directory, count)
        results["write_lock_cpu_us"], results["write_lock_wall_us"] = locked, locked_wall
        results["write_lock_session_cpu_us"] = cpu
        print(
            f"F4 inside the write lock (1 thread): {locked:.0f} µs of CPU per session "
            f"({locked_wall:.0f} µs wall) of {cpu:.0f} µs in all: at most "
            f"{1e6 / locked:,.0f} sessions/s whatever the number of workers"
        )
        cpu, locked, locked_wall = write_lock(directory, count, TASKS)
        results["write_lock_tasks_cpu_us"] = locked
        results["write_lock_tasks_wall_us"] = locked_wall
        results["write_lock_tasks_session_cpu_us"] = cpu
        print(
            f"   with {TASKS} tasks (grouped commits): {locked:.0f} µs of CPU per session "
            f"({locked_wall:.0f} µs wall) of {cpu:.0f} µs: at most {1e6 / locked:,.0f}/s"
        )
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
