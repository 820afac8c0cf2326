"""``python -m agentloop demo --store DB``: a durable demo, interrupted and continued."""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import agentloop.__main__ as demo_module
import replay
from agentloop import FunctionModel
from agentloop.__main__ import main

from .helpers import subprocess_env

ROOT = Path(__file__).resolve().parent.parent


def file_demo(tmp_path: Path) -> list[Any]:
    path = tmp_path / "file-demo.jsonl"
    assert main(["demo", "--quiet", "--log", str(path)], io.StringIO()) == 0
    return replay.read_log(path)


def _default_sigint() -> None:
    # A background job of a non-interactive shell (a CI step started with ``&``)
    # runs with SIGINT ignored, and children inherit that: Python then installs no
    # KeyboardInterrupt handler. The child gets the default back, as in a terminal.
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.skipif(os.name != "posix", reason="SIGINT to a child process")
def test_ctrl_c_stops_the_demo_and_the_same_command_finishes_it(tmp_path):
    db = tmp_path / "demo.db"
    command = [sys.executable, "-m", "agentloop", "demo", "--store", str(db)]
    # Every model call waits 1 s: the window for the Ctrl-C below.
    worker = subprocess.Popen(
        [*command, "--delay", "1"],
        cwd=tmp_path,
        env=subprocess_env(NO_COLOR="1"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=_default_sigint,
    )
    assert worker.stdout is not None
    shown = []
    for line in worker.stdout:
        shown.append(line)
        if "step.start" in line and "request-002" in line:
            break  # the second model call (1 s) is about to start: Ctrl-C
    worker.send_signal(signal.SIGINT)
    _, err = worker.communicate(timeout=60)
    assert worker.returncode == 130, err
    assert "interrupted: " in err and "run the same command again to continue" in err
    assert "Traceback" not in err
    with replay.SQLiteStore(db) as store:
        info = store.session("demo")
        assert info.status == "running" and info.lease_owner is None
        stopped_at = info.events
        assert f"{stopped_at} events of session 'demo' are stored" in err
        # The live timeline also showed the cancel the interrupted run made in
        # memory; the message says those lines are not in the store.
        assert f"the lines from #{stopped_at} on above were not stored" in err
        assert replay.replay(store.events("demo")).result is None  # it waits for a reply

    again = subprocess.run(
        [*command, "--delay", "0"],
        cwd=tmp_path,
        env=subprocess_env(NO_COLOR="1"),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert again.returncode == 0, again.stderr
    assert f"resuming session 'demo' from {db}: {stopped_at} events stored" in again.stdout
    assert "status:     completed (goal_met)" in again.stdout
    expected = file_demo(tmp_path)
    with replay.SQLiteStore(db) as store:
        events = store.events("demo")
        result = replay.replay(events).result
    assert result.final_text == expected[-1].final_text
    assert [e.type for e in events] == [e.type for e in expected]

    # And once more: it is finished, nothing runs.
    done = subprocess.run(
        command,
        cwd=tmp_path,
        env=subprocess_env(NO_COLOR="1"),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0
    assert "session 'demo' in" in done.stdout and "finished (completed)" in done.stdout


def test_an_uninterrupted_durable_demo_stores_the_demo_log_byte_for_byte(tmp_path):
    db = tmp_path / "demo.db"
    out = io.StringIO()
    assert main(["demo", "--store", str(db), "--delay", "0"], out) == 0
    text = out.getvalue()
    assert "durable demo: a scripted model; new session 'demo' in" in text
    assert f"store:      {db} (session 'demo', 39 events)" in text
    timeline = [line for line in text.splitlines() if line[:4].strip().isdigit()]
    assert len(timeline) == 39
    with replay.SQLiteStore(db) as store:
        assert store.events("demo") == file_demo(tmp_path)


def test_quiet_and_finished(tmp_path):
    db = str(tmp_path / "q.db")
    out = io.StringIO()
    assert main(["demo", "--store", db, "--delay", "0", "--quiet"], out) == 0
    assert out.getvalue().splitlines()[0].startswith("completed: 20 + 22 = 42")
    out = io.StringIO()
    assert main(["demo", "--store", db, "--quiet"], out) == 0  # finished: no delay, no run
    assert out.getvalue().splitlines()[0].startswith("completed: 20 + 22 = 42")


def test_an_interrupt_in_process_leaves_the_session_to_continue(tmp_path, monkeypatch, capsys):
    # KeyboardInterrupt in the third model call's wait (the default 0.5 s delay).
    calls = []

    def sleep(seconds: float) -> None:
        calls.append(seconds)
        if len(calls) == 3:
            raise KeyboardInterrupt

    monkeypatch.setattr(demo_module.time, "sleep", sleep)
    db = str(tmp_path / "i.db")
    assert main(["demo", "--store", db, "--quiet"], io.StringIO()) == 130
    assert calls == [0.5, 0.5, 0.5]
    err = capsys.readouterr().err
    with replay.SQLiteStore(db) as store:
        info = store.session("demo")
    assert f"interrupted: {info.events} events of session 'demo' are stored in {db}" in err
    assert info.steps == 3 and info.status == "running"
    assert main(["demo", "--store", db, "--quiet"], io.StringIO()) == 0


def test_a_store_that_cannot_be_used_is_reported(tmp_path, capsys):
    bad = tmp_path / "not-a-store.db"
    bad.write_text("plain text, not SQLite " * 50)
    assert main(["demo", "--store", str(bad)], io.StringIO()) == 1
    assert "cannot open the store" in capsys.readouterr().err
    # In a directory that does not exist: an error line too, not a traceback.
    missing = tmp_path / "missing" / "demo.db"
    assert main(["demo", "--store", str(missing)], io.StringIO()) == 1
    assert "cannot open the store: unable to open database file" in capsys.readouterr().err


def test_a_durable_demo_with_another_model_uses_the_wall_clock(tmp_path):
    model = FunctionModel(lambda request: "No tools needed: 42.")
    db = str(tmp_path / "m.db")
    out = io.StringIO()
    result = demo_module.demo_durable(db, quiet=False, stream=out, model=model, delay=0.001)
    assert (result.status, result.final_text) == ("completed", "No tools needed: 42.")
    assert "durable demo: _Slow" not in out.getvalue()
    assert "durable demo: FunctionModel;" in out.getvalue()
    with replay.SQLiteStore(db) as store:
        started = store.events("demo")[0].at
    assert started is not None and started > 1e9  # time.time(), not the demo epoch


def test_store_and_log_together_are_refused_not_half_ignored(tmp_path, capsys):
    # --store used to win silently: the session went to the store and --log was
    # never written. The pair is refused, before anything runs.
    db, log = tmp_path / "demo.db", tmp_path / "demo.jsonl"
    assert main(["demo", "--store", str(db), "--log", str(log), "--delay", "0"]) == 2
    err = capsys.readouterr().err
    assert "--log and --store do not go together" in err
    assert f"python -m replay export {db} --session demo -o {log}" in err
    assert not db.exists()
    assert not log.exists()
