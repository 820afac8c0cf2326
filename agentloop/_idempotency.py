"""Idempotency keys: one per tool call of a session, the same in every tier.

A durable session runs the tool call that was in flight at a crash again (at least
once). A tool with a side effect tells a repeat from a new call by its key,
``"<session id>:<call id>"``, read with :func:`idempotency_key`. In the session id,
``\\`` and ``:`` are escaped (``\\\\``, ``\\:``), so the first unescaped ``:``
ends it and two different (session, call) pairs never share a key (before, session
``shop:1`` call ``c`` and session ``shop`` call ``1:c`` did). :func:`_key` is the
one place the key is made, for every tier (``agentloop.temporal`` included). Whoever runs the
session names it with :func:`idempotency_session` (``replay.run_durable`` and
``agentloop.temporal`` do it themselves; with a log file, wrap your driving code),
and :meth:`agentloop.Tool.execute` sets the key while the tool's function runs.
Both are context variables: they follow the call into ``contextvars.copy_context()``,
``asyncio.to_thread`` and the async drivers' worker threads (``_offload``).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from contextvars import ContextVar
from typing import Final

__all__ = ["idempotency_key", "idempotency_session"]

_SESSION: Final[ContextVar[str | None]] = ContextVar("agentloop_session", default=None)
_SESSION_ID: Final[ContextVar[str | None]] = ContextVar("agentloop_session_id", default=None)
_KEY: Final[ContextVar[str | None]] = ContextVar("agentloop_idempotency_key", default=None)


def idempotency_key() -> str | None:
    """The idempotency key of the tool call running now, ``"<session id>:<call id>"``.

    The same for every attempt of that call (after a crash, the call in flight runs
    again with the same key), different for every other call of every session: a
    ``\\`` or ``:`` in the session id is escaped with a backslash (session
    ``shop:1``, call ``c``: ``shop\\:1:c``); an id without either is as is. Call
    it from inside a tool; it is ``None`` outside a tool call, or when no session
    is named (see :func:`idempotency_session`)::

        @tool
        def send_invoice(customer: str, amount: int) -> str:
            key = idempotency_key()  # e.g. "order-42:call_7"
            return billing.create(customer, amount, idempotency_key=key)
    """
    return _KEY.get()


@contextmanager
def idempotency_session(session_id: str) -> Iterator[None]:
    """Tool calls run inside the block get keys ``"<session_id>:<call id>"``.

    ``replay.run_durable`` and the ``agentloop.temporal`` workers do this for you
    (with the session id, the workflow id). With a log file, name the session
    yourself::

        with idempotency_session("ticket-42"):
            result = agentloop.run(messages, model=model, tools=tools, log=log)

    Raises:
        ValueError: ``session_id`` is not a non-empty str.
    """
    if type(session_id) is not str or not session_id:
        raise ValueError(f"session_id must be a non-empty str, got {session_id!r}")
    token = _SESSION.set(_key(session_id, ""))  # the keys' common prefix
    named = _SESSION_ID.set(session_id)
    try:
        yield
    finally:
        _SESSION_ID.reset(named)
        _SESSION.reset(token)


def named_session() -> str | None:
    """The session id :func:`idempotency_session` names now, if any (an agent tool's
    children are named after it, DESIGN §26)."""
    return _SESSION_ID.get()


def _keyed(call_id: str) -> AbstractContextManager[None]:
    """Set the key of call ``call_id`` while a tool runs (if a session is named)."""
    session = _SESSION.get()
    if session is None:
        return _UNKEYED  # the common case: nothing to set, and no generator to run
    return _KeySet(session + call_id)


def _key(session_id: str, call_id: str) -> str:
    """The idempotency key of call ``call_id`` of session ``session_id``: the session
    id with ``\\`` and ``:`` escaped, ``:``, the call id (unambiguous: the first
    unescaped ``:`` ends the session id)."""
    if "\\" in session_id or ":" in session_id:
        session_id = session_id.replace("\\", "\\\\").replace(":", "\\:")
    return f"{session_id}:{call_id}"


_UNKEYED: Final = nullcontext()


class _KeySet:
    """Sets ``key`` while the block runs: a tool call's key. (A class: once per tool
    call of a session, cheaper than a generator's context manager.)"""

    __slots__ = ("_key", "_token")

    def __init__(self, key: str) -> None:
        self._key = key

    def __enter__(self) -> None:
        self._token = _KEY.set(self._key)

    def __exit__(self, *exc_info: object) -> None:
        _KEY.reset(self._token)
