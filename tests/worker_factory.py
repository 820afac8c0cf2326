"""The sessions the worker tests and ``bench/fleet.py`` run: scripted 4-step sessions.

- steps 1-3: one call of ``effect`` each (``n`` = the step), step 4: the final text;
- ``effect`` is idempotent by its key: it inserts ``(idempotency key)`` into the
  ``effects`` table of the SQLite file ``$WORKER_EFFECTS`` (when set) unless the key
  is there, and counts every attempt in ``attempts``: a side effect that happens
  at most once per key, however often a crash makes the call run again.

``factory`` is what ``python -m replay worker DB --factory tests.worker_factory:factory``
loads; ``submit_sessions(store, n)`` stores ``n`` new sessions for it.
"""

from __future__ import annotations

import os
import sqlite3
import threading
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


def answer(request: ModelRequest) -> ScriptedResponse:
    step = request.step
    if step <= 3:
        return ScriptedResponse.tool_calls(f"r{step}", ToolCall(f"c{step}", "effect", {"n": step}))
    return ScriptedResponse.text("r4", "done")


def factory(info: replay.SessionInfo) -> replay.SessionSetup:
    return replay.SessionSetup(model=FunctionModel(answer), tools=TOOLS, provider="scripted")


def submit_sessions(store: replay.SQLiteStore, count: int, prefix: str = "s") -> list[str]:
    ids = [f"{prefix}{index}" for index in range(count)]
    for session_id in ids:
        replay.submit(store, session_id, [UserMessage(f"u-{session_id}", "Do it.")], tools=TOOLS)
    return ids


def expected_effects(ids: list[str]) -> set[str]:
    return {f"{session_id}:c{step}" for session_id in ids for step in (1, 2, 3)}


def options() -> dict[str, Any]:
    return {"model": FunctionModel(answer), "tools": TOOLS}
