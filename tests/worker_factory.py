"""The sessions the worker tests and ``bench/fleet.py`` run: scripted 4-step sessions.

- steps 1-3: one call of ``effect`` each (``n`` = the step), step 4: the final text;
- ``effect`` is idempotent by its key: it inserts ``(idempotency key)`` into the
  ``effects`` table of the SQLite file ``$WORKER_EFFECTS`` (when set) unless the key
  is there, and counts every attempt in ``attempts``: a side effect that happens
  at most once per key, however often a crash makes the call run again.

``factory`` is what ``python -m replay worker DB --factory tests.worker_factory:factory``
loads; ``submit_sessions(store, n)`` stores ``n`` new sessions for it.
``under_fire`` runs the fleet with worker processes SIGKILLed at a pace and
``check_fleet`` checks what must hold after it (tests/test_worker_crash.py at CI
size, ``bench/fleet.py --crash N`` at full size).
"""

from __future__ import annotations

import collections
import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import replay
from agentloop import (
    FunctionModel,
    ModelRequest,
    ScriptedResponse,
    ToolCall,
    UserMessage,
    idempotency_key,
    tool,
)

_local = threading.local()


def _effects() -> sqlite3.Connection | None:
    path = os.environ.get("WORKER_EFFECTS")
    if not path:
        return None
    db: sqlite3.Connection | None = getattr(_local, "db", None)
    if db is None:
        db = _local.db = sqlite3.connect(path, timeout=60, isolation_level=None)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("CREATE TABLE IF NOT EXISTS effects (key TEXT PRIMARY KEY)")
        db.execute("CREATE TABLE IF NOT EXISTS attempts (key TEXT, pid INTEGER)")
    return db


@tool
def effect(n: int) -> dict[str, int]:
    """A side effect, done at most once per idempotency key."""
    db = _effects()
    if db is not None:
        key = idempotency_key()
        db.execute("INSERT INTO attempts VALUES (?, ?)", (key, os.getpid()))
        db.execute("INSERT OR IGNORE INTO effects VALUES (?)", (key,))
    return {"n": n}


TOOLS = [effect]


@tool(name="effect", description="A side effect, done at most once per idempotency key.")
async def aeffect(n: int) -> dict[str, int]:
    return effect.fn(n)  # type: ignore[no-any-return]


def answer(request: ModelRequest) -> ScriptedResponse:
    step = request.step
    if step <= 3:
        return ScriptedResponse.tool_calls(f"r{step}", ToolCall(f"c{step}", "effect", {"n": step}))
    return ScriptedResponse.text("r4", "done")


def factory(info: replay.SessionInfo) -> replay.SessionSetup:
    return replay.SessionSetup(model=FunctionModel(answer), tools=TOOLS, provider="scripted")


def afactory(info: replay.SessionInfo) -> replay.SessionSetup:
    """``factory`` for a worker's ``tasks`` (an event loop's sessions): the same
    sessions, the tool ``async def``."""
    return replay.SessionSetup(model=FunctionModel(answer), tools=[aeffect], provider="scripted")


def submit_sessions(store: replay.SQLiteStore, count: int, prefix: str = "s") -> list[str]:
    ids = [f"{prefix}{index}" for index in range(count)]
    for session_id in ids:
        replay.submit(store, session_id, [UserMessage(f"u-{session_id}", "Do it.")], tools=TOOLS)
    return ids


def expected_effects(ids: list[str]) -> set[str]:
    return {f"{session_id}:c{step}" for session_id in ids for step in (1, 2, 3)}


def options() -> dict[str, Any]:
    return {"model": FunctionModel(answer), "tools": TOOLS}


def _start(db: Path, effects: Path, root: Path, tasks: bool) -> subprocess.Popen[str]:
    """A worker process: two threads of one session each, or (``tasks``) one
    thread running 8 sessions at once, their commits grouped."""
    path = os.pathsep.join(p for p in (str(root), os.environ.get("PYTHONPATH", "")) if p)
    env = {**os.environ, "WORKER_EFFECTS": str(effects), "PYTHONPATH": path}
    how = ["afactory", "--threads", "1", "--tasks", "8"] if tasks else ["factory", "--threads", "2"]
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "replay",
            "worker",
            str(db),
            "--factory",
            f"tests.worker_factory:{how[0]}",
            *how[1:],
            "--lease",
            "600",
            "--forever",
            "--poll",
            "0.05",
            "--quiet",
            "--json",
        ],
        cwd=root,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _unfinished(db: Path) -> int:
    with replay.SQLiteStore(db) as store:
        return sum(1 for info in store.sessions() if not info.finished)


def under_fire(
    directory: Path,
    *,
    sessions: int,
    processes: int,
    kill_every: float,
    kills: int,
    give_up: float,
    old_enough: float = 1.0,
    seed: int = 26,
) -> dict[str, Any]:
    """Store ``sessions`` sessions in ``directory/fleet.db``, run them with
    ``processes`` worker processes and SIGKILL one (that lived ``old_enough``
    seconds: a worker killed while Python starts proves nothing) every
    ``kill_every`` seconds, ``kills`` times; then the fleet finishes undisturbed
    and is drained with SIGTERM. Every other worker runs its sessions on an event
    loop with grouped commits (``--tasks``), the others on threads. Returns the
    paths, ids, kills, each worker's exit and stats, and the seconds it took."""
    root = Path(__file__).resolve().parent.parent
    db, effects = directory / "fleet.db", directory / "effects.db"
    with replay.SQLiteStore(db) as store:
        ids = submit_sessions(store, sessions)
    chooser = random.Random(seed)
    started = time.monotonic()
    workers = [_start(db, effects, root, index % 2 == 1) for index in range(processes)]
    born = [time.monotonic()] * processes
    killed = 0
    deadline = time.monotonic() + give_up
    try:
        while _unfinished(db):
            left = _unfinished(db)
            assert time.monotonic() < deadline, f"{left} sessions left after {give_up} s"
            time.sleep(kill_every)
            grown = [i for i in range(processes) if time.monotonic() - born[i] >= old_enough]
            if killed >= kills or not grown:
                continue
            victim = chooser.choice(grown)
            workers[victim].kill()
            workers[victim].communicate()
            killed += 1
            workers[victim] = _start(db, effects, root, victim % 2 == 1)
            born[victim] = time.monotonic()
    finally:
        for worker in workers:
            worker.send_signal(signal.SIGTERM)  # drain: nothing is left to run
        outputs = [worker.communicate(timeout=120) for worker in workers]
    seconds = time.monotonic() - started
    exits = []
    for worker, (out, err) in zip(workers, outputs, strict=True):
        if worker.returncode == -signal.SIGTERM and not out:
            continue  # started a moment ago: the SIGTERM came before its handler
        assert worker.returncode == 0, err
        exits.append(json.loads(out))
    return {
        "db": db,
        "effects": effects,
        "ids": ids,
        "kills": killed,
        "drained": exits,
        "seconds": seconds,
    }


def check_fleet(db: Path, effects: Path, ids: list[str]) -> None:
    """What must hold after :func:`under_fire`, whatever the kills: no session
    lost (every one completed, no lease left), none duplicated (one run each, each
    tool call recorded once), every log verifies and replays, and each side effect
    happened exactly once (at least once attempted). Raises AssertionError."""
    with replay.SQLiteStore(db) as store:
        for session_id in ids:
            info = store.session(session_id)
            got = (info.status, info.steps, info.lease_owner)
            assert got == ("completed", 4, None), (session_id, got)
            events = store.events(session_id)  # checks every link of the chain
            types = collections.Counter(event.type for event in events)
            assert types["run.finished"] == 1 and types["session.start"] == 1, session_id
            calls = [e.call.id for e in events if e.type == "tool.call"]  # type: ignore[union-attr]
            assert calls == ["c1", "c2", "c3"], session_id  # each call recorded once
            assert types["tool.result"] == 3, session_id
            result = replay.replay(events).result
            assert result is not None and result.final_text == "done", session_id
        path = db.parent / "one.jsonl"
        store.export(ids[-1], path)
        assert replay.read_log(path) == store.events(ids[-1])
    db_effects = sqlite3.connect(effects)
    try:
        keys = [row[0] for row in db_effects.execute("SELECT key FROM effects")]
        attempts = db_effects.execute("SELECT count(*) FROM attempts").fetchone()[0]
    finally:
        db_effects.close()
    assert sorted(keys) == sorted(expected_effects(ids))  # each effect exactly once
    assert attempts >= len(keys)  # (a call in flight at a kill ran again: at least once)
