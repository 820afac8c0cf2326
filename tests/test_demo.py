"""``python -m agentloop demo``: runs, prints a timeline, writes a replayable JSONL log."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import agentloop
from agentloop import Event
from agentloop.__main__ import main, print_result
from replay import LOG_FORMAT_VERSION, read_log, summarize

ROOT = Path(__file__).resolve().parent.parent
HEADER = {
    "format": "agentloop-log",
    "version": LOG_FORMAT_VERSION,
    "library": agentloop.__version__,
}


def read_events(path: Path) -> tuple[dict[str, object], list[Event]]:
    header = json.loads(path.read_bytes().partition(b"\n")[0])
    del header["#"]  # the hash chain link
    return header, read_log(path)


def test_demo_subprocess(tmp_path):
    log = tmp_path / "demo.jsonl"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "NO_COLOR": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "agentloop", "demo", "--log", str(log)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    assert log.exists()
    header, events = read_events(log)
    assert header == HEADER
    assert events[-1].type == "run.finished"
    assert events[-1].status == "completed"  # type: ignore[union-attr]
    assert [e.sequence for e in events] == list(range(len(events)))
    assert "tool.error" in proc.stdout and "run.finished" in proc.stdout
    assert "\x1b[" not in proc.stdout  # not a TTY: no colors


def test_demo_log_replays(tmp_path):
    import replay

    path = tmp_path / "demo.jsonl"
    assert main(["demo", "--quiet", "--log", str(path)], io.StringIO()) == 0
    events = replay.read_log(path)
    assert replay.replay(events).result.status == "completed"
    # Running again overwrites the file: one file, one session.
    assert main(["demo", "--quiet", "--log", str(path)], io.StringIO()) == 0
    assert replay.read_log(path) == events


def test_demo_in_process_is_deterministic(tmp_path):
    first, second = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    out = io.StringIO()
    assert main(["demo", "--log", str(first)], out) == 0
    assert main(["demo", "--log", str(second), "--quiet"], io.StringIO()) == 0
    assert first.read_bytes() == second.read_bytes()  # simulated clock: same bytes

    header, events = read_events(first)
    assert header == HEADER
    kinds = [e.type for e in events]
    assert kinds.count("step.start") == 4
    assert kinds.count("tool.error") == 1  # the model's bad argument, then recovery
    text = out.getvalue()
    lines = text.splitlines()
    # One timeline line per event, in order.
    timeline = [line for line in lines if line[:4].strip().isdigit()]
    assert [int(line.split()[0]) for line in timeline] == list(range(len(events)))
    assert "call-1 add: 'invalid arguments: Expected `int`, got `str`" in text
    assert "status:     completed (goal_met)" in text
    assert f"log:        {first} ({len(events)} events)" in text


def test_demo_quiet_prints_only_the_outcome(tmp_path):
    out = io.StringIO()
    assert main(["demo", "--quiet", "--log", str(tmp_path / "q.jsonl")], out) == 0
    lines = out.getvalue().splitlines()
    assert len(lines) == 2
    assert lines[0].startswith("completed: 20 + 22 = 42")


def test_default_log_path_is_in_the_working_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["demo", "--quiet"], io.StringIO()) == 0
    assert (tmp_path / "agentloop-demo.jsonl").exists()


def test_colors_only_on_a_tty_without_no_color(tmp_path, monkeypatch):
    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    monkeypatch.delenv("NO_COLOR", raising=False)
    out = Tty()
    assert main(["demo", "--log", str(tmp_path / "c.jsonl")], out) == 0
    assert "\x1b[1;32m" in out.getvalue()

    monkeypatch.setenv("NO_COLOR", "1")
    out = Tty()
    assert main(["demo", "--log", str(tmp_path / "c.jsonl")], out) == 0
    assert "\x1b[" not in out.getvalue()


def test_no_arguments_prints_usage():
    out = io.StringIO()
    assert main([], out) == 2
    assert out.getvalue().startswith("usage: python -m agentloop")
    assert "demo" in out.getvalue()


def test_bad_usage_exits_2(capsys):
    assert main(["bogus"]) == 2
    assert main(["demo", "--nope"]) == 2
    assert "usage:" in capsys.readouterr().err


def test_help_exits_0(capsys):
    assert main(["--help"]) == 0
    assert "demo" in capsys.readouterr().out


def test_unwritable_log_path(tmp_path, capsys):
    assert main(["demo", "--log", str(tmp_path / "missing" / "x.jsonl")], io.StringIO()) == 1
    assert "cannot write the log" in capsys.readouterr().err


def test_every_demo_event_has_a_summary(tmp_path):
    assert main(["demo", "--quiet", "--log", str(tmp_path / "s.jsonl")], io.StringIO()) == 0
    _, events = read_events(tmp_path / "s.jsonl")
    assert all(summarize(e) or e.type == "step.end" for e in events)


def test_print_result_of_a_failed_run():
    result = agentloop.RunResult(
        status="failed",
        final_text=None,
        messages=(),
        steps=1,
        max_steps=8,
        error=agentloop.RunError("MODEL_ERROR", "step 1: model call failed: boom"),
        reason="MODEL_ERROR",
    )
    out = io.StringIO()
    print_result(result, out)
    assert "status:     failed (MODEL_ERROR)" in out.getvalue()
    assert "error:      MODEL_ERROR: step 1: model call failed: boom" in out.getvalue()


def test_demo_with_a_real_model_but_no_key_says_what_to_set(tmp_path: Path) -> None:
    pytest.importorskip("openai")
    env = {k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"}
    done = subprocess.run(
        [sys.executable, "-m", "agentloop", "demo", "--model", "openai:gpt-4.1-mini"],
        cwd=tmp_path,
        env={**env, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 2
    assert "OPENAI_API_KEY" in done.stderr
    assert "Traceback" not in done.stderr


def test_demo_with_another_model_uses_it_on_the_wall_clock(tmp_path):
    # Any Model will do (here a FunctionModel answering at once); the log stays replayable.
    import replay
    from agentloop import FunctionModel
    from agentloop.__main__ import demo

    model = FunctionModel(lambda request: "No tools needed: 42.")
    out = io.StringIO()
    path = tmp_path / "other.jsonl"
    result = demo(str(path), quiet=False, stream=out, model=model)
    assert (result.status, result.final_text, model.call_count) == (
        "completed",
        "No tools needed: 42.",
        1,
    )
    assert out.getvalue().startswith(
        f"agentloop {agentloop.__version__} demo: FunctionModel with tools"
    )
    events = replay.read_log(path)
    assert events[0].at is not None and events[0].at > 1e9  # time.time(), not the demo epoch
    assert replay.replay(events).result == result


@pytest.mark.parametrize(
    ("argv0", "prog"),
    [
        ("/venv/bin/agentloop", "agentloop"),  # the console script
        ("/src/agentloop/__main__.py", "python -m agentloop"),  # python -m agentloop
    ],
)
def test_usage_names_the_command_the_user_ran(monkeypatch, argv0, prog, capsys):
    monkeypatch.setattr(sys, "argv", [argv0])
    out = io.StringIO()
    assert main([], out) == 2
    assert out.getvalue().startswith(f"usage: {prog} ")
    assert main(["demo", "--model", "nope"]) == 2
    assert capsys.readouterr().err.startswith(f"{prog} demo: ")
