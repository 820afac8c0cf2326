"""Formatting what the loop says in its errors: short, exact, and always writable."""

from __future__ import annotations

from ._messages import Block, ToolCall
from ._protocol import Effect, ModelRequest, Reply, ToolRequest

__all__ = ["short", "wrong_reply"]


def short(item: str | Block) -> str:
    """A short description of a normalized stream item (text or a block)."""
    if type(item) is str:
        text = item if len(item) <= 40 else item[:37] + "..."
        return f"text {text!r}"
    if type(item) is ToolCall:
        return f"tool call {item.id!r} ({item.name})"
    return type(item).__name__


def wrong_reply(reply: Reply, effect: Effect, expected: str) -> str:
    """The message for a reply of the wrong kind sent while ``effect`` was pending."""
    if type(effect) is ModelRequest:
        pending = f"ModelRequest {effect.id}"
    elif type(effect) is ToolRequest:
        pending = f"the ToolRequest for call {effect.call.id!r}"
    else:
        pending = f"Pause ({effect.reason})"  # type: ignore[union-attr]
    return f"send() got {type(reply).__name__} while {pending} was pending; expected {expected}"
