"""One idempotency key mechanism in every tier: ``agentloop.idempotency_key()``.

The SQLite tier is tested in ``test_durable.py`` and ``test_durable_crash.py``,
Temporal in ``tests/temporal/``; here the core and the file tier, with a worker
process SIGKILLed at chosen points (``tests/file_tier_worker.py``).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import agentloop
import replay
from agentloop import FunctionModel, ScriptedResponse, ToolCall, UserMessage, run, tool

from . import durable_scenario as scenario
from .helpers import subprocess_env

ROOT = Path(__file__).resolve().parent.parent


def test_the_key_is_the_session_and_the_call_inside_a_named_session():
    keys: list[str | None] = []

    @tool
    def note(text: str) -> str:
        """Note a text."""
        keys.append(agentloop.idempotency_key())
        return text

    call = ToolCall("c7", "note", {"text": "hi"})
    assert note.execute(call) == ("hi", False)
    with agentloop.idempotency_session("s-1"):
        assert agentloop.idempotency_key() is None  # outside a tool call
        assert note.execute(call) == ("hi", False)
        with agentloop.idempotency_session("inner"):
            note.execute(call)
        note.execute(ToolCall("c8", "note", {"text": "x"}))
    assert keys == [None, "s-1:c7", "inner:c7", "s-1:c8"]
    assert agentloop.idempotency_key() is None


def test_agentloop_run_inside_a_named_session_gives_tools_their_keys():
    keys: list[str | None] = []

    @tool
    def note(text: str) -> str:
        """Note a text."""
        keys.append(agentloop.idempotency_key())
        raise RuntimeError("the key is reset after a tool that raises too")

    def model_fn(request):
        if request.step == 1:
            return ScriptedResponse.tool_calls("r1", ToolCall("c1", "note", {"text": "a"}))
        return ScriptedResponse.text("r2", "ok")

    with agentloop.idempotency_session("ticket-9"):
        result = run([UserMessage("u1", "q")], model=FunctionModel(model_fn), tools=[note])
    assert result.status == "completed" and keys == ["ticket-9:c1"]


@pytest.mark.parametrize("bad", ["", None, 7])
def test_a_session_id_is_a_non_empty_str(bad):
    session = agentloop.idempotency_session(bad)
    with pytest.raises(ValueError, match="session_id must be a non-empty str"):
        session.__enter__()


# --------------------------------------------------------------------------- the file tier


def _worker(log: Path, markers: Path, *kill: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tests.file_tier_worker", str(log), str(markers), *kill],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=subprocess_env(),
        timeout=120,
    )


@pytest.mark.skipif(os.name != "posix", reason="SIGKILL is POSIX")
@pytest.mark.parametrize(
    "kills",
    [
        [("model:call", 1)],
        [("model:chunk", 2)],
        [("tool:before:raw", 1), ("tool:after:keyed", 1)],
        [("tool:after:raw", 1), ("tool:after:approved", 1), ("model:chunk", 3)],
        [("tool:after:keyed", 1), ("tool:after:keyed", 1), ("model:call", 3)],
    ],
)
def test_a_file_tier_session_killed_at_any_point_finishes_like_an_uninterrupted_run(
    tmp_path, kills
):
    log, markers = tmp_path / "session.jsonl", tmp_path / "markers"
    markers.touch()
    for label, nth in kills:
        done = _worker(log, markers, "--kill", label, "--nth", str(nth))
        assert done.returncode == -signal.SIGKILL, done.stderr
    done = _worker(log, markers)
    assert done.returncode == 0 and done.stdout == "done\n", done.stderr

    scenario.PATHS.update(markers=os.devnull)
    expected = run(
        scenario.messages("file-1"),
        model=FunctionModel(scenario.answer_for),
        tools=scenario.TOOLS,
        on_pause=lambda pause: scenario.APPROVE,
    )
    events = replay.read_log(log)
    assert expected.status == "completed"
    assert replay.replay(events).result == expected
    verified = subprocess.run(
        [sys.executable, "-m", "replay", "verify", str(log)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=subprocess_env(),
        timeout=60,
    )
    assert verified.returncode == 0, verified.stdout + verified.stderr
    lines = markers.read_text().splitlines()
    # The idempotent tool ran its effect exactly once, with the file session's key;
    # the others at least once (a kill after the effect repeats it).
    assert lines.count("keyed_effect\tfile-1:c2") == 1
    for name, call in scenario_effects():
        assert 1 <= lines.count(f"{name}\tfile-1:{call}") <= 1 + len(kills)
    assert all(line.split("\t")[1].startswith("file-1:") for line in lines)


def scenario_effects() -> list[tuple[str, str]]:
    return [("raw_effect", "c1"), ("approved_effect", "c3"), ("raw_effect", "c4")]
