"""One idempotency key mechanism in every tier: ``agentloop.idempotency_key()``.

The SQLite tier is tested in ``test_durable.py`` and ``test_durable_crash.py``,
Temporal in ``tests/temporal/``; here the core and the file tier, with a worker
process SIGKILLed at chosen points (``tests/file_tier_worker.py``).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

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


# --------------------------------------------------------------------------- unambiguous keys


def _key_in_a_tool(session_id: str, call_id: str) -> str | None:
    """The key a tool running call ``call_id`` of session ``session_id`` reads."""
    keys: list[str | None] = []

    @tool
    def probe() -> str:
        """Read the key."""
        keys.append(agentloop.idempotency_key())
        return ""

    with agentloop.idempotency_session(session_id):
        probe.execute(ToolCall(call_id, "probe", {}))
    return keys[0]


def _split_key(key: str) -> tuple[str, str]:
    """The (session id, call id) of a key: what docs/durable.md says it encodes."""
    match = re.fullmatch(r"((?:[^\\:]|\\.)*):(.*)", key, re.DOTALL)
    assert match is not None, key
    return re.sub(r"\\(.)", r"\1", match[1], flags=re.DOTALL), match[2]


_IDS = st.text(alphabet=st.sampled_from(["a", "1", ":", "\\", "é", "\n"]), min_size=1, max_size=8)


@given(first=st.tuples(_IDS, st.text(max_size=8)), second=st.tuples(_IDS, st.text(max_size=8)))
def test_distinct_session_and_call_pairs_never_share_a_key(first, second):
    keys = (_key_in_a_tool(*first), _key_in_a_tool(*second))
    assert _split_key(keys[0]) == first and _split_key(keys[1]) == second  # type: ignore[arg-type]
    assert (keys[0] == keys[1]) == (first == second)


@pytest.mark.parametrize(
    ("session_id", "call_id", "key"),
    [
        ("mail-7", "c1", "mail-7:c1"),  # no ':' or '\\' in the session id: as before
        ("mail-7", "a:b", "mail-7:a:b"),
        ("shop:1", "c", "shop\\:1:c"),
        ("shop", "1:c", "shop:1:c"),
        ("a\\", "c", "a\\\\:c"),
        ("a\\:", "c", "a\\\\\\::c"),
    ],
)
def test_the_key_escapes_the_session_id(session_id, call_id, key):
    assert _key_in_a_tool(session_id, call_id) == key


def test_the_ledger_pattern_of_the_docs_pays_two_sessions_whose_old_keys_collided(tmp_path):
    # Session "shop:1" call "c" and session "shop" call "1:c" had the same key
    # ("shop:1:c"), so the second payment was skipped as a repeat of the first.
    paid: dict[str, str] = {}

    @tool
    def pay(amount: int) -> str:
        """Pay once per call, whatever the retries (the docs' ledger pattern)."""
        key = agentloop.idempotency_key()
        assert key is not None
        if key in paid:
            return f"already paid ({key})"
        paid[key] = str(amount)
        return f"paid {amount}"

    with replay.SQLiteStore(tmp_path / "shop.db") as store:
        for session_id, call_id, amount in (("shop:1", "c", 10), ("shop", "1:c", 20)):

            def model_fn(request, call_id=call_id, amount=amount):  # type: ignore[no-untyped-def]
                if request.step == 1:
                    return ScriptedResponse.tool_calls(
                        "r1", ToolCall(call_id, "pay", {"amount": amount})
                    )
                return ScriptedResponse.text("r2", request.messages[-1].content)

            result = replay.run_durable(
                store,
                session_id,
                [UserMessage("u1", "pay")],
                model=FunctionModel(model_fn),
                tools=[pay],
            )
            assert result.final_text == f"paid {amount}"
    assert sorted(paid.values()) == ["10", "20"]
