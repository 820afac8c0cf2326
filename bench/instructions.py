"""Instructions per run, counted by valgrind: an A/B comparison a busy machine cannot blur.

Timings on a shared machine move by 10-30% from one run to the next; the number of
machine instructions a scenario executes does not (garbage collection is off while
counting). This script counts them with valgrind's cachegrind (no cache simulation)
for agentloop as checked out and, with ``--baseline REV``, as of another git
revision, in the same way, and prints the ratio. Instructions are not time (memory
stalls and branch misses are not counted), so use it to check that a change does no
more work, and ``bench/run.py --cpu-time`` on a quiet machine for the time itself.

    python bench/instructions.py --baseline 7fd755b
    python bench/instructions.py --baseline 7fd755b --scenario replay-64

Each scenario runs in a fresh process N times and 0 times; the difference over N is
the count per run. Needs ``valgrind`` (Debian: ``apt-get install valgrind``).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: name -> (iterations, what it runs), the scenarios of bench/README.md.
SCENARIOS = {
    "S1-raw": (200, "the raw generator, S1 (2 steps: one tool call, then the answer)"),
    "S3-raw": (20, "the raw generator, S3 (50 steps: 49 tool calls, then the answer)"),
    "S3-run": (10, "run() + ScriptedModel, S3"),
    "replay-64": (10, "replay.replay of a recorded 64-step run() session"),
    "read-log-64": (10, "replay.read_log of that session's log file (written by write_log)"),
    "replay-file-64": (10, "replay.replay(replay.read_log(path)) of that file"),
    "write-log-64": (10, "replay.write_log of that session"),
    "S3-durable": (10, "replay.run_durable + ScriptedModel, S3, on a store file (NORMAL)"),
    "worker-4step": (100, "one scripted 4-step session submitted, then run by a worker thread"),
}

WORKER = r'''
import gc, os, sys
import agentloop

def add(left: int, right: int) -> dict:
    """Add two integers."""
    return {"sum": left + right}

ADD = agentloop.tool(add)
USER = agentloop.UserMessage("user-question", "What is 20 + 22?")

def script(steps):
    out = [
        agentloop.ScriptedResponse.tool_calls(
            f"resp-{s}", agentloop.ToolCall(f"call-{s}", "add", {"left": 20, "right": 22})
        )
        for s in range(1, steps)
    ]
    out.append(agentloop.ScriptedResponse.text(f"resp-{steps}", "20 + 22 = 42"))
    return out

def replies(steps):
    out = {}
    for step in range(1, steps + 1):
        request = f"request-{step:03d}"
        if step < steps:
            call = agentloop.ToolCall(f"call-{step}", "add", {"left": 20, "right": 22})
            out[request] = agentloop.ModelResponse(request, f"resp-{step}", (call,), "tool_call")
            out[call.id] = agentloop.ToolResult(call.id, '{"sum":42}')
        else:
            text = (agentloop.TextBlock("20 + 22 = 42"),)
            out[request] = agentloop.ModelResponse(request, f"resp-{step}", text, "stop")
    return out

def raw(steps):
    answers, tools = replies(steps), (ADD.spec,)
    def run():
        loop = agentloop.agent_loop([USER], tools=tools, max_steps=steps, started_at=0.0)
        effect, send = next(loop), loop.send
        try:
            while True:
                key = effect.id if type(effect) is agentloop.ModelRequest else effect.call.id
                effect = send(answers[key])
        except StopIteration:
            pass
    return run

def driven(steps):
    lines = script(steps)
    return lambda: agentloop.run(
        [USER], model=agentloop.ScriptedModel(lines), tools=[ADD], max_steps=steps
    )

def recorded():
    log, ticks = agentloop.EventLog(), iter(range(10**9))
    agentloop.run(
        [USER], model=agentloop.ScriptedModel(script(64)), tools=[ADD], max_steps=64,
        log=log, clock=lambda: 1.7e9 + next(ticks) / 1000,
    )
    return list(log)

def replayer():
    import replay
    events = recorded()
    return lambda: replay.replay(events)

def log_file(action):
    import replay, tempfile
    events = recorded()
    path = os.path.join(tempfile.mkdtemp(), "session.jsonl")
    replay.write_log(path, events)
    if action == "write":
        return lambda: replay.write_log(path, events)
    if action == "read":
        return lambda: replay.read_log(path)
    return lambda: replay.replay(replay.read_log(path))

def durable(steps):
    import itertools, tempfile, replay
    store = replay.SQLiteStore(tempfile.mkdtemp() + "/durable.db")
    lines, ids = script(steps), itertools.count()
    return lambda: replay.run_durable(
        store, f"s{next(ids)}", [USER], model=agentloop.ScriptedModel(lines), tools=[ADD],
        max_steps=steps,
    )

def worker():
    # One session at a time (the submit included): the work a session costs a
    # worker thread, without the waits of a pool.
    import itertools, tempfile, replay
    store = replay.SQLiteStore(tempfile.mkdtemp() + "/fleet.db")
    lines, ids = script(4), itertools.count()
    def setup(info):
        return replay.SessionSetup(model=agentloop.ScriptedModel(lines), tools=[ADD])
    def run():
        replay.submit(store, f"s{next(ids)}", [USER], tools=[ADD])
        replay.Worker(store, setup, threads=1).run()
    return run

name, count = sys.argv[1], int(sys.argv[2])
make = {"S1-raw": lambda: raw(2), "S3-raw": lambda: raw(50), "S3-run": lambda: driven(50),
        "replay-64": replayer, "read-log-64": lambda: log_file("read"),
        "replay-file-64": lambda: log_file("replay"),
        "write-log-64": lambda: log_file("write"),
        "S3-durable": lambda: durable(50), "worker-4step": worker}[name]
fn = make()
fn()
gc.disable()
for _ in range(count):
    fn()
'''


def count(source: Path, name: str, iterations: int) -> int:
    """Instructions of ``iterations`` runs of ``name`` with agentloop from ``source``."""
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as worker:
        worker.write(WORKER)
    env = {**os.environ, "PYTHONPATH": str(source), "PYTHONHASHSEED": "0"}
    try:
        done = subprocess.run(
            [
                "valgrind",
                "--tool=cachegrind",
                "--cache-sim=no",
                "--cachegrind-out-file=/dev/null",
                sys.executable,
                worker.name,
                name,
                str(iterations),
            ],
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
    finally:
        os.unlink(worker.name)
    out = done.stderr
    if done.returncode != 0:
        raise SystemExit(f"{name} failed under valgrind (exit {done.returncode}):\n{out}")
    found = re.search(r"I\s+refs:\s+([\d,]+)", out)
    if found is None:
        raise SystemExit(f"valgrind printed no instruction count:\n{out}")
    return int(found.group(1).replace(",", ""))


def per_run(source: Path, name: str) -> float:
    iterations = SCENARIOS[name][0]
    return (count(source, name, iterations) - count(source, name, 0)) / iterations


def checkout(revision: str, into: Path) -> Path:
    """agentloop/ and replay/ as of ``revision``, in ``into``."""
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", revision, "agentloop", "replay"],
        capture_output=True,
        check=True,
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").partition("\n")[0])
    parser.add_argument("--baseline", metavar="REV", help="also count agentloop as of REV")
    parser.add_argument(
        "--scenario", choices=sorted(SCENARIOS), action="append", help="(repeatable)"
    )
    args = parser.parse_args(argv)
    if shutil.which("valgrind") is None:
        print("valgrind is not installed (Debian: apt-get install valgrind)", file=sys.stderr)
        return 2
    names = args.scenario or list(SCENARIOS)
    with tempfile.TemporaryDirectory() as folder:
        base = None if args.baseline is None else checkout(args.baseline, Path(folder))
        print("instructions per run (valgrind cachegrind; garbage collection off)")
        for name in names:
            here = per_run(ROOT, name)
            line = f"  {name:10} {here:>14,.0f}  {SCENARIOS[name][1]}"
            if base is not None:
                there = per_run(base, name)
                line += f"\n  {'':10} {there:>14,.0f}  as of {args.baseline}: "
                line += f"this checkout does {here / there:.3f}x its work"
            print(line, flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
