"""Copies of plain JSON data and of the blocks that hold it.

The loop snapshots what it is given and never hands its own data away: hooks,
tools and callers get copies of tool-call arguments and pause payloads, so
mutating them changes neither the transcript nor the log (DESIGN §9).
"""

from __future__ import annotations

from typing import Any

import msgspec

from ._json import CONTAINERS, copy_json
from ._messages import Block, ProviderBlock, ToolCall
from ._protocol import ModelChunk, ModelResponse, Resume

__all__ = ["CONTAINERS", "copy_block", "copy_call", "copy_json", "own_reply"]

_MUTABLE_BLOCKS = (ToolCall, ProviderBlock)  # blocks holding dicts the caller could mutate


def copy_call(call: ToolCall) -> ToolCall:
    return ToolCall(call.id, call.name, copy_json(call.arguments))


def copy_block(block: Block) -> Block:
    if type(block) is ToolCall:
        return copy_call(block)
    if type(block) is ProviderBlock:
        return ProviderBlock(block.provider, block.kind, copy_json(block.data))
    return block


def own_reply(reply: Any) -> Any:
    """``reply`` with its own copies of the caller's argument dicts and payloads.

    The caller may keep mutating what it sent; the loop's copy (and the log) must
    not change with it. Replies without mutable parts are returned as they are.
    """
    kind = type(reply)
    if kind is ModelChunk and type(reply.block) in _MUTABLE_BLOCKS:
        return msgspec.structs.replace(reply, block=copy_block(reply.block))
    if kind is Resume and type(reply.payload) in CONTAINERS:
        return msgspec.structs.replace(reply, payload=copy_json(reply.payload))
    if kind is ModelResponse and any(type(b) in _MUTABLE_BLOCKS for b in reply.content):
        return msgspec.structs.replace(
            reply, content=tuple(copy_block(block) for block in reply.content)
        )
    return reply
