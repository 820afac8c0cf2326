"""Copies of plain JSON data and of the blocks that hold it.

The loop snapshots what it is given and never hands its own data away: hooks,
tools and callers get copies of tool-call arguments and pause payloads, so
mutating them changes neither the transcript nor the log (DESIGN §9).
"""

from __future__ import annotations

from typing import Any

import msgspec

from ._messages import Block, ToolCall
from ._protocol import ModelChunk, ModelResponse, Resume

__all__ = ["CONTAINERS", "copy_block", "copy_call", "copy_json", "own_reply"]

#: The container types of plain JSON data as the loop receives it.
CONTAINERS = frozenset({dict, list, tuple})


def copy_call(call: ToolCall) -> ToolCall:
    return ToolCall(call.id, call.name, copy_json(call.arguments))


def copy_block(block: Block) -> Block:
    return copy_call(block) if type(block) is ToolCall else block


def copy_json(value: Any) -> Any:
    """A deep copy of plain JSON data (hooks never alias the loop's own data).

    Iterative, so arbitrarily deep input (which validation rejects later) cannot
    exhaust the stack; tuples become lists, as in JSON.
    """
    kind = type(value)
    if kind is dict:
        for item in value.values():
            if type(item) in CONTAINERS:
                break
        else:
            return value.copy()  # flat: the common case, at C speed
    elif kind is not list and kind is not tuple:
        return value
    root: list[Any] = [None]
    stack: list[tuple[Any, Any, Any]] = [(value, root, 0)]  # (source, target, key)
    while stack:
        source, target, key = stack.pop()
        kind = type(source)
        if kind is dict:
            copy: Any = {}
            for k, item in source.items():
                copy[k] = item
                if type(item) in CONTAINERS:
                    stack.append((item, copy, k))
        elif kind is list or kind is tuple:
            copy = list(source)
            for index, item in enumerate(copy):
                if type(item) in CONTAINERS:
                    stack.append((item, copy, index))
        else:  # pragma: no cover - only containers are pushed
            copy = source
        target[key] = copy
    return root[0]


def own_reply(reply: Any) -> Any:
    """``reply`` with its own copies of the caller's argument dicts and payloads.

    The caller may keep mutating what it sent; the loop's copy (and the log) must
    not change with it. Replies without mutable parts are returned as they are.
    """
    kind = type(reply)
    if kind is ModelChunk and type(reply.block) is ToolCall:
        return msgspec.structs.replace(reply, block=copy_call(reply.block))
    if kind is Resume and type(reply.payload) in CONTAINERS:
        return msgspec.structs.replace(reply, payload=copy_json(reply.payload))
    if kind is ModelResponse and any(type(b) is ToolCall for b in reply.content):
        return msgspec.structs.replace(
            reply, content=tuple(copy_block(block) for block in reply.content)
        )
    return reply
