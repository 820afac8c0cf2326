"""Session trees on disk and in a store (DESIGN §26): where a parent's children are.

An agent tool (:func:`agentloop.agent_tool`) runs a child session per call; the
child's ``session.start`` names its parent and the call (``ParentLink``). This
module finds a session's children:

- in a :class:`~replay.SQLiteStore`, :meth:`~replay.SQLiteStore.children` lists
  them (``run_durable`` stores each child as its own session);
- next to a log *file*, by a naming convention: the child of call ``c1`` of
  ``run.jsonl`` is ``run.c1.jsonl`` (:func:`child_log_path`; the call id is
  percent-encoded, so a model-made id cannot name another directory), its own
  children ``run.c1.<call>.jsonl``, and so on. :func:`write_tree` writes a parent's
  log and its children's (kept by its agent tools, :attr:`AgentTool.logs`) so.

:func:`subtree` gives the children of a session in the order their calls were
made, each with its events: what ``python -m replay show/check`` walk.
"""

from __future__ import annotations

import os
import urllib.parse
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, NamedTuple

from agentloop import (
    AgentTool,
    Event,
    SessionStartEvent,
    ToolCallEvent,
    ToolErrorEvent,
    ToolResultEvent,
)
from agentloop._spi import child_session_id

from ._log import StrPath, read_log, write_log
from ._store import SQLiteStore

__all__ = ["Child", "child_log_path", "subtree", "write_tree"]

_SUFFIX = ".jsonl"
#: A root session's id when nothing names it (as ``agentloop`` names it then).
ROOT = "root"


def child_log_path(path: StrPath, call_id: str) -> str:
    """The log file of the child session that call ``call_id`` of the log ``path``
    ran: ``<dir>/<name without .jsonl>.<call id, percent-encoded>.jsonl``."""
    path = os.fspath(path)
    directory, name = os.path.split(path)
    stem = name.removesuffix(_SUFFIX)
    return os.path.join(directory, f"{stem}.{urllib.parse.quote(call_id, safe='')}{_SUFFIX}")


class Child(NamedTuple):
    """One child of a session: the call it answers, where it is, and its events.

    Attributes:
        call_id: the parent's tool call.
        source: the child's log file, or its session id in the store.
        events: the child's events.
    """

    call_id: str
    source: str
    events: list[Event]


def subtree(
    events: Sequence[Event],
    *,
    path: StrPath | None = None,
    store: SQLiteStore | None = None,
    session: str | None = None,
) -> list[Child]:
    """The children of a session (``events``) in the order of their calls: the
    store's (``store`` and ``session``) or the files next to ``path``.

    A file is a child when it is named for one of the session's ``tool.call``
    events and its ``session.start`` names that call; others are not read further.
    """
    calls = [event.call.id for event in events if type(event) is ToolCallEvent]
    found: dict[str, tuple[str, list[Event]]] = {}
    if store is not None:
        assert session is not None
        for child in store.children(session):  # (each one's session.start links it)
            child_events = store.events(child)
            found[str(_link(child_events))] = (child, child_events)
    else:
        assert path is not None
        for call_id in calls:
            candidate = child_log_path(path, call_id)
            if os.path.isfile(candidate):
                child_events = read_log(candidate)
                if _link(child_events) == call_id:
                    found[call_id] = (candidate, child_events)
    return [Child(call_id, *found[call_id]) for call_id in calls if call_id in found]


def _link(events: Sequence[Event]) -> str | None:
    """The call id a child log names in its ``session.start``, if any."""
    start = events[0] if events else None
    if type(start) is SessionStartEvent and start.parent is not None:
        return start.parent.call_id
    return None


def write_tree(path: StrPath, events: Iterable[Event], tools: Iterable[Any]) -> list[str]:
    """Write a session's log to ``path`` and its children's next to it
    (:func:`child_log_path`), their children's next to theirs, and so on.

    ``tools``: the session's tools; the children's logs are those its agent tools
    kept (:attr:`AgentTool.logs`, with the logs of their own agent tools' children).

    Returns:
        The files written, the parent's first.
    """
    logs: dict[str, Any] = {}
    for tool in _agent_tools(tools):
        logs.update(tool.logs)
    written: list[str] = []
    _write(os.fspath(path), list(events), logs, written)
    return written


def _write(path: str, events: list[Event], logs: dict[str, Any], written: list[str]) -> None:
    write_log(path, events)
    written.append(path)
    session = _session_of(events, logs)
    for event in events:
        if type(event) is ToolCallEvent:
            child = logs.get(f"{session}/{event.call.id}")
            if child is not None:
                _write(child_log_path(path, event.call.id), list(child), logs, written)


def _session_of(events: Sequence[Event], logs: dict[str, Any]) -> str:
    """A log's session id as its children's links name it: a child's follows from
    its own link; a root's from the children its results name (else from the
    links of the children that ran under a root, else ``"root"``)."""
    start = events[0] if events else None
    if type(start) is SessionStartEvent and start.parent is not None:
        return child_session_id(start.parent)
    for event in events:
        if type(event) is ToolResultEvent or type(event) is ToolErrorEvent:
            reply = event.reply
            if reply is not None and reply.child is not None:
                return reply.child.session.removesuffix(f"/{reply.call_id}")
    roots = {
        log[0].parent.session
        for log in logs.values()
        if type(log[0]) is SessionStartEvent
        and log[0].parent is not None
        and log[0].parent.depth == 1
    }
    return roots.pop() if len(roots) == 1 else ROOT


def _agent_tools(tools: Iterable[Any]) -> Iterator[AgentTool]:
    """The agent tools among ``tools``, and theirs, depth first."""
    seen: set[int] = set()
    stack = list(tools)
    while stack:
        tool = stack.pop()
        if isinstance(tool, AgentTool) and id(tool) not in seen:
            seen.add(id(tool))
            yield tool
            stack.extend(tool.tools)
