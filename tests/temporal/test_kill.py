"""Kill the worker in the middle of a session; another worker process finishes it.

A real worker process runs a session whose tool call is slow: the tool writes
its side effect (a file named after its idempotency key), then sleeps. The test
waits for the file, SIGKILLs the worker, and starts a second worker process.
Everything runs with the library's defaults (``worker()`` and ``ActivityOptions()``,
as docs/durable.md shows them): Temporal notices the lost tool activity (no
heartbeat for 2 s), runs it again on the second worker -- where the tool finds its
key and does not write again -- and moves the workflow there once the dead
worker's sticky queue times out (1 s); the session completes. How long that
takes is measured by ``bench/temporal_kill.py``, not asserted here.

The second test kills a worker during a model call, with the second worker already
up (a fleet). The retried call lands on a worker that does not hold the session's
transcript, so it asks the workflow (query ``pending``) before it calls the model.
The first test runs again with the tool call as a local activity
(``ActivityOptions(local=True)``): the lost call is noticed when the workflow
task times out, and the second worker runs the workflow task, and the call, again.
In all, the final log is the one the loop makes from its recorded replies, and it
replays.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

import replay
from agentloop import ToolCallEvent, ToolResultEvent, UserMessage
from agentloop.temporal import ActivityOptions, start_session

from .app import NOTES_DIR, TOOLS
from .conftest import Temporal
from .helpers import drive_by_hand, encoded, queue, session_id

ROOT = Path(__file__).resolve().parents[2]


def spawn(temporal: Temporal, task_queue: str, notes: Path) -> subprocess.Popen[str]:
    env = {**os.environ, NOTES_DIR: str(notes), "AGENTLOOP_TEST_NOTE_SECONDS": "120"}
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.temporal.worker_process", temporal.target, task_queue],
        cwd=ROOT,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    line = process.stdout.readline()
    if line != "ready\n":
        process.kill()
        raise AssertionError(f"the worker did not start: {line!r} {process.communicate()[1]}")
    return process


def wait_for_file(path: Path) -> None:
    for _ in range(600):
        if path.exists():
            return
        time.sleep(0.05)
    raise AssertionError(f"{path} never appeared")


@pytest.mark.parametrize("local", [False, True], ids=["activity", "local activity"])
def test_a_worker_killed_during_a_tool_call_is_replaced(
    temporal: Temporal, tmp_path, local: bool
) -> None:
    # A local tool call is noticed lost when the workflow task times out (2 s here:
    # the worker heartbeats its workflow task while the local activity runs).
    options: dict[str, Any] = (
        {"tool_activity": ActivityOptions(local=True), "task_timeout": timedelta(seconds=2)}
        if local
        else {}
    )
    task_queue = queue()
    first = spawn(temporal, task_queue, tmp_path)
    second = None
    try:
        session = temporal.run(
            start_session(
                temporal.client,
                session_id(),
                [UserMessage("u1", "remember the milk")],
                task_queue=task_queue,
                tools=TOOLS,
                system="note",
                **options,
            )
        )
        wait_for_file(tmp_path / "started")
        first.send_signal(signal.SIGKILL)
        first.communicate(timeout=30)
        assert first.returncode == -signal.SIGKILL
        second = spawn(temporal, task_queue, tmp_path)
        result = temporal.run(session.result())
        log = temporal.run(session.log())
        _, errors = second.communicate(timeout=60)  # closes its stdin: it stops
        assert second.returncode == 0, errors
    finally:
        for process in (first, second):
            if process is not None and process.returncode is None:
                process.kill()
                process.communicate()

    assert result.status == "completed"
    notes = sorted(tmp_path.glob("*.done"))
    assert len(notes) == 1  # the side effect happened once
    assert notes[0].read_text() == f"remember the milk (pid {first.pid})"
    assert result.final_text == f"Done: already noted: remember the milk (pid {first.pid})"
    assert [type(e) for e in log].count(ToolCallEvent) == 1
    assert [type(e) for e in log].count(ToolResultEvent) == 1
    assert drive_by_hand(log) == encoded(log)
    assert replay.replay(log).result == result


def test_a_worker_killed_during_a_model_call_is_replaced_by_one_already_up(
    temporal: Temporal, tmp_path
) -> None:
    task_queue = queue()
    first = spawn(temporal, task_queue, tmp_path)
    second = None
    try:
        session = temporal.run(
            start_session(
                temporal.client,
                session_id(),
                [UserMessage("u1", "hello")],
                task_queue=task_queue,
                tools=TOOLS,
                system="slow-model",
            )
        )
        wait_for_file(tmp_path / "started")
        second = spawn(temporal, task_queue, tmp_path)
        first.send_signal(signal.SIGKILL)
        first.communicate(timeout=30)
        result = temporal.run(session.result())
        log = temporal.run(session.log())
        _, errors = second.communicate(timeout=60)
        assert second.returncode == 0, errors
    finally:
        for process in (first, second):
            if process is not None and process.returncode is None:
                process.kill()
                process.communicate()

    assert result.status == "completed", result.error
    assert result.final_text == "Done: answered"
    assert drive_by_hand(log) == encoded(log)
    assert replay.replay(log).result == result
