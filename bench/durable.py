"""Durable sessions on this machine: ``replay.run_durable`` on SQLite vs plain ``run``.

Run from a checkout::

    python bench/durable.py          # about a minute
    python bench/durable.py --quick  # smoke run (numbers mean nothing)

Prints, never asserts (timing is not a test):

- D1 per-step overhead: a 50-step session (49 ``add`` calls one after the other,
  then the answer; the model streams through ``FunctionModel``) with ``run`` and
  with ``run_durable`` on a store file, ``synchronous=NORMAL`` (the default) and
  ``FULL``; µs per step, the difference per step, and commits per step (group
  commit: the goal is at most 2 and at most 1 ms of overhead per step); and the
  async twin: ``replay.arun_durable`` (``NORMAL``) against plain ``agentloop.arun``
  (each round's sessions awaited in one event loop; the store's commits run in a
  worker thread).
- D2 sessions per second: 1,000 short durable sessions (one tool call, then the
  answer: 2 steps) one after the other in one store, vs the same with ``run``.
- D3 bytes stored per step: the store file (after a WAL checkpoint) per step of
  the D1 sessions, next to the event bytes themselves and the same log as a JSONL
  file (the file tier).
- D4 resume: ``run_durable`` of a stored 50-step session stopped before its last
  model call (replays the log, then one step).
- D5 the file tier: the D1 session with ``run`` and a ``LogWriter`` following its
  log, without and with ``fsync=True``: µs per step, the overhead over ``run``, and
  fsyncs per step (counted by wrapping ``os.fsync``), next to what syncing every
  line (the rule before side-effect boundaries) would cost: one per line.

Each timing is the best of several rounds (the garbage collector runs before each).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout

import agentloop
import replay
from agentloop import (
    FunctionModel,
    ModelRequest,
    ScriptedResponse,
    ToolCall,
    UserMessage,
)

STEPS = 50
QUESTION = [UserMessage("u1", "Add one, 49 times.")]


@agentloop.tool
def add(left: int, right: int) -> dict[str, int]:
    """Add two integers."""
    return {"sum": left + right}


def answer(steps: int) -> Callable[[ModelRequest], ScriptedResponse]:
    def fn(request: ModelRequest) -> ScriptedResponse:
        if request.step < steps:
            call = ToolCall(f"c{request.step}", "add", {"left": request.step, "right": 1})
            return ScriptedResponse.tool_calls(f"r{request.step}", call)
        return ScriptedResponse.text(f"r{request.step}", "Done adding.")

    return fn


def best_ns(fn: Callable[[], Any], rounds: int) -> tuple[float, float]:
    """The best of ``rounds`` timings of ``fn()``: (wall, CPU of this process), in ns.

    The CPU time (user + system, ``time.process_time``) is what the code costs
    whatever else the machine does; on a busy machine the wall time is longer.
    """
    wall = cpu = float("inf")
    for _ in range(rounds):
        gc.collect()
        start, start_cpu = time.perf_counter_ns(), time.process_time_ns()
        fn()
        wall = min(wall, time.perf_counter_ns() - start)
        cpu = min(cpu, time.process_time_ns() - start_cpu)
    return wall, cpu


class Counter:
    """Fresh session ids."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.n = 0

    def __call__(self) -> str:
        self.n += 1
        return f"{self.prefix}-{self.n}"


def d1_per_step(directory: Path, rounds: int, sessions: int) -> dict[str, Any]:
    model = FunctionModel(answer(STEPS))
    per_step = sessions * STEPS * 1000  # ns per run of fn() -> µs per step
    plain_wall, plain_cpu = best_ns(
        lambda: [
            agentloop.run(QUESTION, model=model, tools=[add], max_steps=STEPS)
            for _ in range(sessions)
        ],
        rounds,
    )
    out: dict[str, Any] = {
        "plain": {"us_per_step": plain_wall / per_step, "cpu_us_per_step": plain_cpu / per_step}
    }
    for mode in ("NORMAL", "FULL"):
        path = directory / f"d1-{mode.lower()}.db"
        with replay.SQLiteStore(path, synchronous=mode) as store:
            ids = Counter(mode)

            def durable(store: replay.SQLiteStore = store, ids: Counter = ids) -> None:
                for _ in range(sessions):
                    replay.run_durable(
                        store, ids(), QUESTION, model=model, tools=[add], max_steps=STEPS
                    )

            wall, cpu = best_ns(durable, rounds)
            out[mode] = {
                "us_per_step": wall / per_step,
                "cpu_us_per_step": cpu / per_step,
                "overhead_us_per_step": (wall - plain_wall) / per_step,
                "cpu_overhead_us_per_step": (cpu - plain_cpu) / per_step,
                "commits_per_step": store.commits / (rounds * sessions * STEPS),
            }

    async def arun_all() -> None:
        for _ in range(sessions):
            await agentloop.arun(QUESTION, model=model, tools=[add], max_steps=STEPS)

    aplain_wall, aplain_cpu = best_ns(lambda: asyncio.run(arun_all()), rounds)
    out["async_plain"] = {
        "us_per_step": aplain_wall / per_step,
        "cpu_us_per_step": aplain_cpu / per_step,
    }
    with replay.SQLiteStore(directory / "d1-async.db") as store:
        ids = Counter("async")

        async def adurable_all() -> None:
            for _ in range(sessions):
                await replay.arun_durable(
                    store, ids(), QUESTION, model=model, tools=[add], max_steps=STEPS
                )

        wall, cpu = best_ns(lambda: asyncio.run(adurable_all()), rounds)
        out["async_NORMAL"] = {
            "us_per_step": wall / per_step,
            "cpu_us_per_step": cpu / per_step,
            "overhead_us_per_step": (wall - aplain_wall) / per_step,
            "cpu_overhead_us_per_step": (cpu - aplain_cpu) / per_step,
            "commits_per_step": store.commits / (rounds * sessions * STEPS),
        }
    return out


def d2_sessions_per_second(directory: Path, count: int) -> dict[str, Any]:
    model = FunctionModel(answer(2))
    plain_wall, plain_cpu = best_ns(
        lambda: [agentloop.run(QUESTION, model=model, tools=[add]) for _ in range(count)], 1
    )
    with replay.SQLiteStore(directory / "d2.db") as store:
        ids = Counter("short")
        wall, cpu = best_ns(
            lambda: [
                replay.run_durable(store, ids(), QUESTION, model=model, tools=[add])
                for _ in range(count)
            ],
            1,
        )
        commits = store.commits
    return {
        "sessions": count,
        "durable_per_second": count / (wall / 1e9),
        "durable_per_cpu_second": count / (cpu / 1e9),
        "plain_per_second": count / (plain_wall / 1e9),
        "plain_per_cpu_second": count / (plain_cpu / 1e9),
        "commits_per_session": commits / count,
    }


def d3_bytes_per_step(directory: Path) -> dict[str, Any]:
    path = directory / "d1-normal.db"
    db = replay.SQLiteStore(path)
    try:
        infos = db.sessions()
        steps = sum(info.steps for info in infos)
        events = db.events(infos[0].id)
        db._connection().execute("PRAGMA wal_checkpoint(TRUNCATE)")
        jsonl = directory / "one.jsonl"
        replay.write_log(jsonl, events)
    finally:
        db.close()
    event_bytes = sum(len(agentloop.encode_event(event)) for event in events)
    return {
        "store_bytes_per_step": os.path.getsize(path) / steps,
        "event_bytes_per_step": event_bytes / infos[0].steps,
        "jsonl_bytes_per_step": os.path.getsize(jsonl) / infos[0].steps,
        "sessions": len(infos),
    }


def d4_resume(directory: Path, rounds: int) -> dict[str, Any]:
    """A 50-step session whose worker stopped before its last model call."""

    class Stop(BaseException):
        pass

    def stopping(request: ModelRequest) -> ScriptedResponse:
        if request.step == STEPS:
            raise Stop
        return answer(STEPS)(request)

    path = directory / "d4.db"
    ids = Counter("resume")
    with replay.SQLiteStore(path) as store:

        def one() -> None:
            session_id = ids()
            with contextlib.suppress(Stop):
                replay.run_durable(
                    store,
                    session_id,
                    QUESTION,
                    model=FunctionModel(stopping),
                    tools=[add],
                    max_steps=STEPS,
                )

        for _ in range(rounds):
            one()
        model = FunctionModel(answer(STEPS))
        stopped = iter([f"resume-{n + 1}" for n in range(rounds)])
        events = len(store.events("resume-1"))
        wall, cpu = best_ns(
            lambda: replay.run_durable(store, next(stopped), model=model, tools=[add]), rounds
        )
    return {"stored_events": events, "ms": wall / 1e6, "cpu_ms": cpu / 1e6}


def d5_file_tier(directory: Path, rounds: int, sessions: int, plain_ns: float) -> dict[str, Any]:
    """``run`` + ``LogWriter`` (the file tier), with and without ``fsync=True``."""
    model = FunctionModel(answer(STEPS))
    per_step = sessions * STEPS * 1000
    names = Counter("d5")
    real_fsync = os.fsync
    fsyncs = [0]

    def counting(fd: Any) -> None:
        fsyncs[0] += 1
        real_fsync(fd)

    out: dict[str, Any] = {}
    for fsync in (False, True):

        def logged(fsync: bool = fsync) -> None:
            for _ in range(sessions):
                log = agentloop.EventLog()
                with replay.LogWriter(directory / f"{names()}.jsonl", fsync=fsync) as writer:
                    writer.follow(log)
                    agentloop.run(QUESTION, model=model, tools=[add], max_steps=STEPS, log=log)

        fsyncs[0] = 0
        os.fsync = counting
        try:
            wall, cpu = best_ns(logged, rounds)
        finally:
            os.fsync = real_fsync
        out["fsync" if fsync else "flush"] = {
            "us_per_step": wall / per_step,
            "cpu_us_per_step": cpu / per_step,
            "overhead_us_per_step": (wall - plain_ns) / per_step,
            "fsyncs_per_step": fsyncs[0] / (rounds * sessions * STEPS),
        }
    lines = len(replay.read_log(directory / "d5-1.jsonl")) + 1  # and the header
    # Before: one fsync per line written, and the new file's directory once.
    out["per_line_fsyncs_per_step"] = (lines + 1) / STEPS
    out["lines_per_step"] = lines / STEPS
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="smoke run, few iterations")
    parser.add_argument("--json", metavar="PATH", help="also write the numbers as JSON")
    args = parser.parse_args(argv)
    rounds, sessions, count = (2, 1, 20) if args.quick else (7, 4, 1000)
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        d1 = d1_per_step(directory, rounds, sessions)
        d2 = d2_sessions_per_second(directory, count)
        d3 = d3_bytes_per_step(directory)
        d4 = d4_resume(directory, 3 if args.quick else 5)
        plain_ns = d1["plain"]["us_per_step"] * sessions * STEPS * 1000
        d5 = d5_file_tier(directory, rounds, sessions, plain_ns)
    print(f"durable sessions: agentloop {agentloop.__version__}, SQLite {_sqlite_version()}")
    print(f"D1 per step, {STEPS}-step session (49 tool calls, then the answer), wall (CPU):")
    plain = d1["plain"]
    print(
        f"  run()                                  {plain['us_per_step']:8.1f} "
        f"({plain['cpu_us_per_step']:6.1f}) µs/step"
    )
    for mode in ("NORMAL", "FULL"):
        row = d1[mode]
        print(
            f"  run_durable, SQLite synchronous={mode:<6} {row['us_per_step']:8.1f} "
            f"({row['cpu_us_per_step']:6.1f}) µs/step, overhead "
            f"{row['overhead_us_per_step']:8.1f} ({row['cpu_overhead_us_per_step']:6.1f}) µs/step, "
            f"{row['commits_per_step']:.2f} commits/step"
        )
    aplain = d1["async_plain"]
    print(
        f"  arun()                                 {aplain['us_per_step']:8.1f} "
        f"({aplain['cpu_us_per_step']:6.1f}) µs/step"
    )
    row = d1["async_NORMAL"]
    print(
        f"  arun_durable, SQLite synchronous=NORMAL {row['us_per_step']:7.1f} "
        f"({row['cpu_us_per_step']:6.1f}) µs/step, overhead "
        f"{row['overhead_us_per_step']:8.1f} ({row['cpu_overhead_us_per_step']:6.1f}) µs/step, "
        f"{row['commits_per_step']:.2f} commits/step"
    )
    print(
        f"D2 {d2['sessions']:,} short durable sessions (2 steps each): "
        f"{d2['durable_per_second']:,.0f} sessions/s ({d2['durable_per_cpu_second']:,.0f} per "
        f"CPU second); run(): {d2['plain_per_second']:,.0f}/s "
        f"({d2['plain_per_cpu_second']:,.0f}); {d2['commits_per_session']:.1f} commits/session"
    )
    print(
        f"D3 bytes per step: store file {d3['store_bytes_per_step']:,.0f} "
        f"(events alone {d3['event_bytes_per_step']:,.0f}, JSONL file "
        f"{d3['jsonl_bytes_per_step']:,.0f}), over {d3['sessions']} sessions"
    )
    print(
        f"D4 resume of a stored session ({d4['stored_events']} events) + its last step: "
        f"{d4['ms']:.2f} ({d4['cpu_ms']:.2f}) ms"
    )
    print("D5 file tier, run() + LogWriter, same session, wall (CPU):")
    for key, label in (("flush", "flush per event    "), ("fsync", "fsync=True         ")):
        row = d5[key]
        print(
            f"  LogWriter, {label}           {row['us_per_step']:8.1f} "
            f"({row['cpu_us_per_step']:6.1f}) µs/step, overhead "
            f"{row['overhead_us_per_step']:8.1f} µs/step, {row['fsyncs_per_step']:.2f} fsyncs/step"
        )
    print(
        f"  fsyncs per step at side-effect boundaries: {d5['fsync']['fsyncs_per_step']:.2f}; "
        f"one per line (the rule before): {d5['per_line_fsyncs_per_step']:.2f} "
        f"({d5['lines_per_step']:.2f} lines/step)"
    )
    normal = d1["NORMAL"]
    print("targets (measured, not asserted)")
    for label, value, met in (
        (
            "overhead <= 1 ms per step (NORMAL, wall)",
            f"{normal['overhead_us_per_step'] / 1000:.3f} ms",
            normal["overhead_us_per_step"] <= 1000,
        ),
        (
            "<= 2 commits per step",
            f"{normal['commits_per_step']:.2f}",
            normal["commits_per_step"] <= 2,
        ),
        (
            "arun_durable: overhead <= 1 ms per step (NORMAL, wall)",
            f"{d1['async_NORMAL']['overhead_us_per_step'] / 1000:.3f} ms",
            d1["async_NORMAL"]["overhead_us_per_step"] <= 1000,
        ),
    ):
        print(f"  {label}: {value}  {'met' if met else 'MISSED'}")
    if args.json:
        Path(args.json).write_text(
            json.dumps({"D1": d1, "D2": d2, "D3": d3, "D4": d4, "D5": d5}, indent=2)
        )
    return 0


def _sqlite_version() -> str:
    import sqlite3

    return sqlite3.sqlite_version


if __name__ == "__main__":
    sys.exit(main())
