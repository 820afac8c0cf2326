"""The session tree's recorded links (DESIGN §26): what the engine knows of agents
that call agents.

An agent tool (:func:`agentloop.agent_tool`) runs a *child* session for one tool
call of its *parent*. Two recorded values tie the two logs together, and they are
all the engine knows of the tree:

- the child's ``session.start`` holds a :class:`ParentLink`: the parent's session
  id, the call id, and the child's depth (1 under a root session). The child's own
  session id follows from it (:func:`child_session_id`), so a child log names its
  place in the tree by itself;
- the parent's ``tool.result`` holds the child's :class:`ChildRun` in its reply
  (``ToolResult.child``): the child's session id, how it ended, the tokens it and
  its own children used, and the tool calls they made. When the loop records such
  a result it adds them to the parent's ``usage`` and tool-call count
  (:func:`roll_up`), so the parent's ``RunResult.usage`` and budget count the
  whole subtree -- and a replay of the parent, fed the recorded reply, counts the
  same without any child model.

Both are ordinary fields with defaults: a log without agent tools has neither,
and reads and replays as before.
"""

from __future__ import annotations

from typing import Final

import msgspec

from ._protocol import STATUSES, ChildRun, Usage

__all__ = [
    "ChildRun",
    "ParentLink",
    "child_problem",
    "child_session_id",
    "parent_problem",
    "roll_up",
]

#: The separator between a parent's session id and a call id in a child's id.
SEPARATOR: Final = "/"


class ParentLink(msgspec.Struct, frozen=True, omit_defaults=True, kw_only=True):
    """Where a child session sits in the tree (its ``session.start`` records it).

    Attributes:
        session: the parent's session id.
        call_id: the parent's tool call the child answers.
        depth: how deep the child is: 1 under a root session, 2 under a child, ...
    """

    session: str
    call_id: str
    depth: int = 1


def child_session_id(link: ParentLink) -> str:
    """The session id of the child ``link`` describes: ``"<parent>/<call id>"``."""
    return f"{link.session}{SEPARATOR}{link.call_id}"


def parent_problem(parent: object) -> str | None:
    """Why ``parent`` is not an ``agent_loop(parent=...)`` value, or ``None``."""
    if parent is None:
        return None
    if type(parent) is not ParentLink:
        return f"parent must be a ParentLink or None, got {type(parent).__name__}"
    if type(parent.session) is not str or not parent.session:
        return "ParentLink.session must be a non-empty str"
    if type(parent.call_id) is not str or not parent.call_id:
        return "ParentLink.call_id must be a non-empty str"
    if type(parent.depth) is not int or parent.depth < 1:
        return f"ParentLink.depth must be an int from 1, got {parent.depth!r}"
    return None


def child_problem(child: object) -> str | None:
    """Why ``child`` is not a ``ToolResult.child`` value, or ``None``."""
    if child is None:
        return None
    if type(child) is not ChildRun:
        return f"ToolResult.child must be a ChildRun or None, got {type(child).__name__}"
    if type(child.session) is not str or not child.session:
        return "ToolResult.child.session must be a non-empty str"
    if child.status not in STATUSES:
        return f"ToolResult.child.status must be one of {', '.join(STATUSES)}"
    usage = child.usage
    if usage is not None and (
        type(usage) is not Usage
        or not all(type(v) is int and v >= 0 for v in msgspec.structs.astuple(usage))
    ):
        return "ToolResult.child.usage must be None or a Usage of non-negative ints"
    if type(child.tool_calls) is not int or child.tool_calls < 0:
        return "ToolResult.child.tool_calls must be a non-negative int"
    return None


def roll_up(usage: Usage, tool_calls: int, child: ChildRun) -> tuple[Usage, int]:
    """A parent run's usage and tool-call count once ``child`` is counted in."""
    if child.usage is not None:
        usage = usage + child.usage
    return usage, tool_calls + child.tool_calls
