"""A durable session tree killed at every point (DESIGN §26), with real processes.

``tests/tree_worker.py`` runs a research agent that delegates to a search agent and
then to a writer agent (whose tool waits for an approval: the tree parks, and the
test answers the *parent*). For each kill point of an uninterrupted run, a worker
is SIGKILLed there; fresh workers then finish the tree. Then:

- the tree ends as the uninterrupted run did (the answer, the usage of the whole
  tree);
- every stored log (the parent's and each child's) replays byte for byte;
- the kill repeats at most the one model call it interrupted: a finished child is
  never run again (its two model calls would count twice), nor is any other;
- each tool's side effect happened once, but the one a kill interrupted.
"""

from __future__ import annotations

import collections
import os
import subprocess
import sys
from pathlib import Path

import pytest

import replay
from agentloop import Resume, encode_event

from .helpers import subprocess_env

WORKER = Path(__file__).resolve().parent / "tree_worker.py"
pytestmark = pytest.mark.skipif(os.name != "posix", reason="SIGKILL is POSIX")
SESSIONS = ("research", "research/c1", "research/c2")


def finish(db: Path, state: Path, kill_at: int) -> tuple[str, int]:
    """Run workers until the tree completes (answering its pause); the outcome and
    how many workers were killed."""
    killed = 0
    for _ in range(8):
        done = subprocess.run(
            [sys.executable, str(WORKER), str(db), str(state), str(kill_at)],
            capture_output=True,
            text=True,
            env=subprocess_env(),
            timeout=120,
            check=False,
        )
        if done.returncode == -9:
            killed += 1
            continue
        assert done.returncode == 0, done.stderr
        if done.stdout.startswith("parked"):
            with replay.SQLiteStore(db) as store:
                replay.answer(store, "research", Resume({"approved": True}))
            continue
        return done.stdout.strip(), killed
    raise AssertionError("the tree did not finish")


def lines(path: Path) -> collections.Counter[str]:
    return collections.Counter(path.read_text().splitlines() if path.exists() else [])


def test_a_tree_killed_at_any_point_finishes_as_it_would_have(tmp_path: Path) -> None:
    base = tmp_path / "base"
    base.mkdir()
    expected, killed = finish(base / "s.db", base, 0)
    # The whole tree's usage: the parent's, the searcher's and the writer's.
    tokens = (10 + 12 + 20 + 3 + 5 + 4 + 6, 1 + 1 + 2 + 1 + 2 + 1 + 2)
    assert (killed, expected) == (0, "completed done {} {}".format(*tokens))
    baseline_calls = lines(base / "calls")
    assert sum(baseline_calls.values()) == 7
    points = int((base / "points").read_text())
    for kill_at in range(1, points + 1):
        state = tmp_path / str(kill_at)
        state.mkdir()
        outcome, killed = finish(state / "s.db", state, kill_at)
        assert (outcome, killed) == (expected, 1), kill_at
        calls = lines(state / "calls")
        repeated = calls - baseline_calls
        assert sum(repeated.values()) <= 1, (kill_at, repeated)
        assert calls >= baseline_calls
        effects = lines(state / "effects")
        assert sum((effects - lines(base / "effects")).values()) <= 1, (kill_at, effects)
        with replay.SQLiteStore(state / "s.db") as store:
            assert store.children("research") == ["research/c1", "research/c2"]
            for session in SESSIONS:
                events = store.events(session)
                assert store.session(session).status == "completed"
                regenerated = replay.replay(events).events
                assert [encode_event(e) for e in regenerated] == [encode_event(e) for e in events]
