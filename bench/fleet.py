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
  threads of one process share its interpreter lock). Goal (issue 26): at least
  2,000 sessions per second with 4 workers; printed as met or missed for the best
  4-worker figure.
- F2 what one session costs in one thread: ``run_durable`` of the same sessions one
  after the other, no worker (the floor the worker's threads divide).

The machine is shared: each figure is one run; repeat to see the noise.
"""

from __future__ import annotations

import argparse
import json
import os
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

GOAL = 2000.0


@tool
def effect(n: int) -> dict[str, int]:
    """A side effect."""
    return {"n": n}


def answer(request: ModelRequest) -> ScriptedResponse:
    step = request.step
    if step <= 3:
        return ScriptedResponse.tool_calls(f"r{step}", ToolCall(f"c{step}", "effect", {"n": step}))
    return ScriptedResponse.text("r4", "done")


def factory(info: replay.SessionInfo) -> replay.SessionSetup:
    """The worker's factory (``--factory fleet:factory`` with bench/ on the path)."""
    return replay.SessionSetup(model=FunctionModel(answer), tools=[effect])


def fresh_store(path: Path, count: int) -> None:
    with replay.SQLiteStore(path) as store:
        for index in range(count):
            replay.submit(store, f"s{index}", [UserMessage(f"u{index}", "Do it.")], tools=[effect])


def threads_rate(directory: Path, count: int, threads: int) -> float:
    path = directory / f"threads-{threads}.db"
    fresh_store(path, count)
    with replay.SQLiteStore(path) as store:
        stats = replay.work(store, factory, threads=threads)
    assert stats.finished == {"completed": count}, stats
    return stats.per_second


def processes_rate(directory: Path, count: int, processes: int) -> float:
    path = directory / f"processes-{processes}.db"
    fresh_store(path, count)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), str(HERE.parent)])}
    command = [sys.executable, "-m", "replay", "worker", str(path), "--factory", "fleet:factory"]
    done = subprocess.run(
        [*command, "--processes", str(processes), "--threads", "1", "--quiet", "--json"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    stats = json.loads(done.stdout)
    assert stats["finished"] == {"completed": count}, stats
    return float(stats["per_second"])


def serial_rate(directory: Path, count: int) -> float:
    path = directory / "serial.db"
    fresh_store(path, count)
    with replay.SQLiteStore(path) as store:
        started = time.perf_counter()
        for index in range(count):
            replay.run_durable(store, f"s{index}", model=FunctionModel(answer), tools=[effect])
        return count / (time.perf_counter() - started)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="smoke run, few sessions")
    parser.add_argument("--sessions", type=int, default=2000, help="sessions per run")
    parser.add_argument("--json", metavar="PATH", help="also write the numbers as JSON")
    args = parser.parse_args(argv)
    count = 40 if args.quick else args.sessions
    results: dict[str, Any] = {"sessions": count, "goal_per_second_4_workers": GOAL}
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        print(f"F1 {count} scripted 4-step sessions through replay.Worker (sessions/s)")
        for threads in (1, 4, 16):
            rate = threads_rate(directory, count, threads)
            results[f"threads_{threads}"] = rate
            print(f"  {threads:>2} threads, 1 process     {rate:>9.0f}/s")
        rate = processes_rate(directory, count, 4)
        results["processes_4"] = rate
        print(f"   4 processes, 1 thread each {rate:>8.0f}/s")
        best = max(results["threads_4"], results["processes_4"])
        verdict = "met" if best >= GOAL else "missed"
        results["goal_met"] = best >= GOAL
        print(f"  goal >= {GOAL:,.0f}/s with 4 workers: {best:,.0f}/s  {verdict}")
        rate = serial_rate(directory, count)
        results["serial_run_durable"] = rate
        print(f"F2 run_durable one after the other, no worker: {rate:.0f}/s")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
