"""Readable one-line summaries of events and field-level diffs between two events."""

from __future__ import annotations

import math
import sys
from typing import Any

import msgspec

from agentloop import (
    AssistantMessage,
    BudgetWarnEvent,
    Cancel,
    Event,
    MessageAcceptedEvent,
    ModelChunk,
    ModelChunkEvent,
    ModelFailure,
    ModelResponse,
    PlanCommitEvent,
    PlanDraftEvent,
    ProviderBlock,
    Resume,
    RunFinishedEvent,
    SessionCompleteEvent,
    SessionPauseEvent,
    SessionResumeEvent,
    SessionStartEvent,
    StepStartEvent,
    TextBlock,
    ThinkingBlock,
    ToolCall,
    ToolCallEvent,
    ToolErrorEvent,
    ToolResult,
    ToolResultEvent,
    ToolResultMessage,
    UnrecognizedReply,
    UserMessage,
)

__all__ = ["diff_events", "short", "summarize"]


def short(value: Any, width: int = 60) -> str:
    """A compact, truncated rendering of a value (strings quoted)."""
    if isinstance(value, str):
        text = repr(value)
    elif isinstance(value, (dict, list)):
        try:
            text = msgspec.json.encode(value).decode()
        except (TypeError, OverflowError):  # pragma: no cover - non-JSON values
            text = repr(value)
        if _has_non_finite(value):
            text = repr(value)
    else:
        text = repr(value)
    if len(text) > width:
        text = text[: width - 3] + "..."
    return text


def _has_non_finite(value: Any) -> bool:
    if isinstance(value, float):
        return not math.isfinite(value)
    if isinstance(value, dict):
        return any(_has_non_finite(v) for v in value.values())
    if isinstance(value, list):
        return any(_has_non_finite(v) for v in value)
    return False


def _block(block: Any) -> str:
    if type(block) is TextBlock:
        return f"text {short(block.text, 40)}"
    if type(block) is ThinkingBlock:
        return f"thinking {short(block.text, 30)}"
    if type(block) is ToolCall:
        return f"call {block.id} {block.name}({short(block.arguments, 40)})"
    if type(block) is ProviderBlock:
        return f"{block.provider} {block.kind}"
    return type(block).__name__  # pragma: no cover - the Block union is closed


def _blocks(blocks: tuple[Any, ...]) -> str:
    if not blocks:
        return "(empty)"
    return ", ".join(_block(b) for b in blocks[:3]) + (
        f", +{len(blocks) - 3} more" if len(blocks) > 3 else ""
    )


def _reply(reply: Any) -> str:
    kind = type(reply)
    if kind is ModelChunk:
        return f"chunk for {reply.request_id}: {_block(reply.block)}"
    if kind is ModelResponse:
        usage = ""
        if reply.usage is not None:
            usage = f" usage={reply.usage.input_tokens}/{reply.usage.output_tokens}"
        return f"response {reply.id} stop={reply.stop_reason}{usage}: {_blocks(reply.content)}"
    if kind is ModelFailure:
        return f"failure {reply.code}: {short(reply.message, 50)}"
    if kind is ToolResult:
        error = " (error)" if reply.is_error else ""
        return f"result for {reply.call_id}{error}: {short(reply.content, 40)}"
    if kind is Resume:
        budget = " +budget" if reply.budget is not None else ""
        return f"resume {short(reply.payload, 40)}{budget}"
    if kind is Cancel:
        return f"cancel {short(reply.reason, 40)}"
    if kind is UnrecognizedReply:
        return f"unrecognized reply: {short(reply.description, 50)}"
    return type(reply).__name__  # pragma: no cover - the Reply union is closed


def summarize(event: Event) -> str:
    """A short description of an event's payload, for timelines and divergences."""
    if isinstance(event, SessionStartEvent):
        names = ", ".join(t.name for t in event.tools) or "no tools"
        parts = [f"max_steps={event.max_steps}", f"tools: {names}"]
        if event.budget is not None:
            parts.append(f"budget={msgspec.json.encode(event.budget).decode()}")
        if event.system is not None:
            parts.append(f"system={short(event.system, 40)}")
        return "  ".join(parts)
    if isinstance(event, MessageAcceptedEvent):
        message = event.message
        if type(message) is UserMessage:
            return f"user {message.id}: {short(message.content, 50)}"
        if type(message) is AssistantMessage:
            return f"assistant {message.id}: {_blocks(message.content)}"
        assert type(message) is ToolResultMessage
        error = " (error)" if message.is_error else ""
        return f"tool result {message.tool_call_id}{error}: {short(message.content, 40)}"
    if isinstance(event, StepStartEvent):
        return event.request_id
    if isinstance(event, ModelChunkEvent):
        return _block(event.chunk.block)
    if isinstance(event, PlanDraftEvent):
        return _reply(event.reply)
    if isinstance(event, PlanCommitEvent):
        return f"{event.message.id}: {_blocks(event.message.content)}"
    if isinstance(event, ToolCallEvent):
        return _block(event.call)
    if isinstance(event, (ToolResultEvent, ToolErrorEvent)):
        who = "" if event.reply is not None else " (made by the loop)"
        return f"{event.message.tool_call_id} {event.message.tool_name}{who}: " + short(
            event.message.content, 50
        )
    if isinstance(event, BudgetWarnEvent):
        usage = event.usage
        return (
            f"{event.limit} limit reached (turns={usage.turns} tool_calls={usage.tool_calls} "
            f"wall={usage.wall_seconds:g}s)"
        )
    if isinstance(event, SessionPauseEvent):
        return f"{event.reason} {short(event.payload, 50)}"
    if isinstance(event, SessionResumeEvent):
        return _reply(event.reply)
    if isinstance(event, SessionCompleteEvent):
        return f"{event.status} ({event.reason})" if event.reason else event.status
    if isinstance(event, RunFinishedEvent):
        parts = [event.status]
        if event.reason:
            parts.append(f"({event.reason})")
        if event.final_text is not None:
            parts.append(short(event.final_text, 40))
        if event.error is not None:
            parts.append(f"{event.error.code}: {short(event.error.message, 60)}")
        if event.reply is not None:
            parts.append(f"[{_reply(event.reply)}]")
        return " ".join(parts)
    return ""  # step.end


def diff_events(
    expected: Event,
    actual: Event,
    *,
    labels: tuple[str, str] = ("recorded", "regenerated"),
    limit: int = 20,
) -> list[str]:
    """The differing fields of two events, one line each: ``path: A -> B``.

    Paths use attribute and index syntax (``reply.content[0].arguments.x``). Values
    equal in Python but not in the log (``1`` and ``1.0``, ``1`` and ``True``) count
    as different and show their types. At most ``limit`` differences are listed;
    when there are more, a last line says how many: ``(+N more differences)``.
    """
    out = _Lines(limit)
    _diff(msgspec.to_builtins(expected), msgspec.to_builtins(actual), "", out, labels)
    lines = out.lines
    if out.more:
        lines.append(f"(+{out.more} more difference{'s' if out.more > 1 else ''})")
    return lines


class _Lines:
    """The difference lines so far, and how many more were found past the limit
    (counted, not formatted)."""

    __slots__ = ("limit", "lines", "more")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.lines: list[str] = []
        self.more = 0

    def full(self) -> bool:
        if len(self.lines) < self.limit:
            return False
        self.more += 1
        return True


def _same(a: Any, b: Any) -> bool:
    if type(a) is not type(b):
        return False
    if isinstance(a, float) and math.isnan(a):
        return math.isnan(b)
    return bool(a == b)


def _clip(text: str, width: int = 60) -> str:
    return text if len(text) <= width else text[: width - 3] + "..."


def _show(a: Any, b: Any) -> tuple[str, str]:
    sa, sb = short(a), short(b)
    if sa != sb:
        return sa, sb
    full_a, full_b = short(a, sys.maxsize), short(b, sys.maxsize)
    if full_a != full_b:
        # Long values that differ past the cut: show both from just before the
        # first difference.
        first = next(
            (i for i, (x, y) in enumerate(zip(full_a, full_b, strict=False)) if x != y),
            min(len(full_a), len(full_b)),
        )
        start = max(0, first - 20)
        return _clip("…" + full_a[start:]), _clip("…" + full_b[start:])
    # Same text, different values: name the types. (Not seen with decoded events.)
    return f"{sa} ({type(a).__name__})", f"{sb} ({type(b).__name__})"  # pragma: no cover


def _diff(a: Any, b: Any, path: str, out: _Lines, labels: tuple[str, str]) -> None:
    if type(a) is dict and type(b) is dict:
        for key in [*a, *(k for k in b if k not in a)]:
            sub = f"{path}.{key}" if path else str(key)
            if key not in b:
                if not out.full():
                    out.lines.append(f"{sub}: only in {labels[0]}: {short(a[key])}")
            elif key not in a:
                if not out.full():
                    out.lines.append(f"{sub}: only in {labels[1]}: {short(b[key])}")
            else:
                _diff(a[key], b[key], sub, out, labels)
        return
    if type(a) in (list, tuple) and type(b) in (list, tuple):
        for index, (x, y) in enumerate(zip(a, b, strict=False)):
            _diff(x, y, f"{path}[{index}]", out, labels)
        if len(a) != len(b) and not out.full():
            out.lines.append(f"{path or '.'}: {len(a)} items -> {len(b)} items")
        return
    if not _same(a, b) and not out.full():
        sa, sb = _show(a, b)
        out.lines.append(f"{path or '.'}: {sa} -> {sb}")
