"""Readable one-line summaries of events and field-level diffs between two events.

Nothing here recurses over the values an event holds: a value nested 100,000
levels deep is rendered (cut to a width) and compared with explicit stacks.
"""

from __future__ import annotations

import hashlib
import math
import sys
from collections.abc import Iterator
from typing import Any, Final

import msgspec

from agentloop import (
    AssistantMessage,
    AudioBlock,
    BudgetWarnEvent,
    Cancel,
    ContextCompactedEvent,
    DocumentBlock,
    Event,
    HandoffEvent,
    ImageBlock,
    MessageAcceptedEvent,
    MessageQueuedEvent,
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
    Usage,
    UserMessage,
)

__all__ = ["blob_text", "diff_events", "short", "summarize"]

_encode = msgspec.json.Encoder().encode


# --------------------------------------------------------------------------- rendering


def _items(value: msgspec.Struct) -> Iterator[tuple[str, Any]]:
    """A Struct as the log names its parts: its tag, then every field (defaults
    too, so a difference in one field is shown as that field)."""
    cls = value.__class__
    config = cls.__struct_config__
    if config.tag_field is not None:
        yield config.tag_field, config.tag
    for name in cls.__struct_fields__:
        yield name, getattr(value, name)


def blob_text(data: bytes) -> str:
    """``<72 bytes sha256:1f2e3d4c5b6a>``: a media block's bytes as every rendering
    here shows them (a diff, a summary, a snapshot): by size and the start of their
    SHA-256, never the bytes themselves."""
    return f"<{len(data)} bytes sha256:{hashlib.sha256(data).hexdigest()[:12]}>"


def _scalar(value: Any) -> str:
    """A value that is not a container, as JSON writes it (numbers JSON cannot
    hold as Python writes them: ``nan``, ``inf``, a huge int's digits; bytes by
    :func:`blob_text`)."""
    if value.__class__ is bytes:
        return blob_text(value)
    if isinstance(value, float):
        return _encode(value).decode() if math.isfinite(value) else repr(float(value))
    if isinstance(value, int) and not isinstance(value, bool):
        return _digits(value)
    try:
        return _encode(value).decode()
    except (TypeError, ValueError, OverflowError):  # hand-built events may hold anything
        return repr(value)


def _digits(value: int) -> str:
    try:
        return str(int(value))
    except ValueError:  # beyond the interpreter's int-to-str limit (4300 digits)
        return f"<int of {value.bit_length()} bits>"


def _render(value: Any, width: int) -> str:
    """``value`` as compact JSON (Structs with all their fields), without
    recursion; stops once more than ``width`` characters are written."""
    out: list[str] = []
    size = 0
    # Each entry is text to write, or a value to render (marked by a tuple).
    stack: list[Any] = [(value,)]
    pop, push = stack.pop, stack.append
    while stack and size <= width:
        item = pop()
        if item.__class__ is str:
            out.append(item)
            size += len(item)
            continue
        (node,) = item
        if isinstance(node, msgspec.Struct):
            pairs: Any = _items(node)
        elif isinstance(node, dict):
            pairs = node.items()
        elif isinstance(node, (list, tuple)):
            push("]")
            for index in range(len(node) - 1, -1, -1):
                push((node[index],))
                if index:
                    push(",")
            push("[")
            continue
        else:
            text = _string(node, width - size) if isinstance(node, str) else _scalar(node)
            out.append(text)
            size += len(text)
            continue
        entries = list(pairs)
        push("}")
        for index in range(len(entries) - 1, -1, -1):
            key, child = entries[index]
            push((child,))
            push(_string(key, width) + ":" if isinstance(key, str) else f'"{_scalar(key)}":')
            if index:
                push(",")
        push("{")
    return "".join(out)


def _string(text: str, width: int) -> str:
    """``text`` as a JSON string; only its first ``width`` characters when longer
    (escaping does not depend on what follows, so that prefix is exact)."""
    if len(text) > width + 1:
        return _encode(text[: width + 1]).decode()[:-1]
    return _encode(text).decode()


def short(value: Any, width: int = 60) -> str:
    """A compact, truncated rendering of a value (strings quoted)."""
    if isinstance(value, str):
        # (A very long string: only what can be shown of it.)
        text = repr(value if len(value) <= 4 * width + 16 else value[: 4 * width])
    elif isinstance(value, (dict, list, tuple, msgspec.Struct)):
        text = _render(value, width)
    elif isinstance(value, int) and not isinstance(value, bool):
        text = _digits(value)
    elif value.__class__ is bytes:
        return blob_text(value)  # (whole: its hash is what tells two blobs apart)
    else:
        text = repr(value)
    if len(text) > width:
        text = text[: width - 3] + "..."
    return text


# --------------------------------------------------------------------------- summaries


def _block(block: Any) -> str:
    if type(block) is TextBlock:
        return f"text {short(block.text, 40)}"
    if type(block) is ThinkingBlock:
        return f"thinking {short(block.text, 30)}"
    if type(block) is ToolCall:
        return f"call {block.id} {block.name}({short(block.arguments, 40)})"
    if type(block) is ProviderBlock:
        return f"{block.provider} {block.kind}"
    kind = _MEDIA.get(type(block))
    if kind is not None:
        return media_text(block, kind)
    return type(block).__name__


_MEDIA: Final[dict[type, str]] = {
    ImageBlock: "image",
    AudioBlock: "audio",
    DocumentBlock: "document",
}


def media_text(block: Any, kind: str) -> str:
    """``image image/png <72 bytes sha256:1f2e3d4c5b6a> chart.png``: one line for a
    media block (a URL is cut to a width; the bytes are never shown)."""
    where = blob_text(block.data) if block.data.__class__ is bytes else short(block.url, 50)
    name = "" if block.name is None else f" {short(block.name, 30)}"
    return f"{kind} {_clip(str(block.media_type), 40)} {where}{name}"


def _content(content: Any, width: int) -> str:
    """A user message's or tool result's content: a str cut to ``width``, parts one
    by one (:func:`_blocks`)."""
    if content.__class__ is tuple:
        return _blocks(content)
    return short(content, width)


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
        return f"result for {reply.call_id}{error}: {_content(reply.content, 40)}"
    if kind is Resume:
        budget = " +budget" if reply.budget is not None else ""
        return f"resume {short(reply.payload, 40)}{budget}"
    if kind is Cancel:
        return f"cancel {short(reply.reason, 40)}"
    if kind is UnrecognizedReply:
        return f"unrecognized reply: {short(reply.description, 50)}"
    return type(reply).__name__


def summarize(event: Event) -> str:
    """A short description of an event's payload, for timelines and divergences.

    It holds what the model and the caller sent (ids, names, text) as they sent
    it; a terminal program escapes control characters before printing it (as
    ``python -m replay`` does).
    """
    if isinstance(event, SessionStartEvent):
        names = ", ".join(t.name for t in event.tools) or "no tools"
        parts = [f"max_steps={event.max_steps}", f"tools: {names}"]
        if event.handoffs:  # agents the model may transfer to (DESIGN §26)
            names = ", ".join(short(spec.name, 30) for spec in event.handoffs)
            parts.append(f"agent {short(event.agent, 30)}, handoffs: {names}")
        if event.budget is not None:
            parts.append(f"budget={_render(event.budget, sys.maxsize)}")
        if event.system is not None:
            parts.append(f"system={short(event.system, 40)}")
        if event.parent is not None:  # a child session (DESIGN §26)
            link = event.parent
            parts.append(
                f"child of {short(link.session, 40)} call {short(link.call_id, 30)} "
                f"(depth {link.depth})"
            )
        return "  ".join(parts)
    if isinstance(event, MessageQueuedEvent):
        queued = event.reply.message
        return f"{event.mode} {queued.id}: {_content(queued.content, 50)}"
    if isinstance(event, MessageAcceptedEvent):
        message = event.message
        if type(message) is UserMessage:
            return f"user {message.id}: {_content(message.content, 50)}"
        if type(message) is AssistantMessage:
            return f"assistant {message.id}: {_blocks(message.content)}"
        assert type(message) is ToolResultMessage
        error = " (error)" if message.is_error else ""
        return f"tool result {message.tool_call_id}{error}: {_content(message.content, 40)}"
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
        child = None if event.reply is None else event.reply.child
        if child is not None:  # the call ran a child session (DESIGN §26)
            tokens = child.usage or Usage()
            who = (
                f" (child {short(child.session, 40)} {child.status}, "
                f"usage={tokens.input_tokens}/{tokens.output_tokens}, "
                f"tool_calls={child.tool_calls})"
            )
        text = f"{event.message.tool_call_id} {event.message.tool_name}{who}: " + _content(
            event.message.content, 50
        )
        return text
    if isinstance(event, BudgetWarnEvent):
        usage = event.usage
        return (
            f"{event.limit} limit reached (turns={usage.turns} tool_calls={usage.tool_calls} "
            f"wall={usage.wall_seconds:g}s)"
        )
    if isinstance(event, ContextCompactedEvent):
        if event.summary is not None:
            what = f"summary from message {event.start}: {short(event.summary.content, 40)}"
        else:
            what = f"tool results trimmed before message {event.trimmed_before}"
        return f"{what} (~{event.tokens_before} -> ~{event.tokens_after} tokens)"
    if isinstance(event, HandoffEvent):
        seen = "" if event.kept is None else f", sees {len(event.kept)} earlier message(s)"
        return (
            f"{short(event.from_agent, 30)} -> {short(event.to_agent, 30)} "
            f"(call {short(event.call_id, 30)}{seen})"
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
    return ""  # step.end, and event types this version does not summarize


# --------------------------------------------------------------------------- diffs

_PATH_EDGE: Final = 6  # a path deeper than twice this shows its ends only


def _spell(segments: list[str]) -> str:
    if len(segments) > 2 * _PATH_EDGE + 1:
        hidden = len(segments) - 2 * _PATH_EDGE
        segments = [*segments[:_PATH_EDGE], f"…(+{hidden:,} levels)…", *segments[-_PATH_EDGE:]]
    # A field of the event itself has no dot before it.
    return "".join(segments).removeprefix(".") or "."


def _key(key: Any) -> str:
    return f".{key}" if isinstance(key, str) else f".{_scalar(key)}"


def _mapping(value: Any) -> dict[Any, Any] | None:
    if isinstance(value, msgspec.Struct):
        return dict(_items(value))
    if isinstance(value, dict):
        return value
    return None  # a leaf, or a list or tuple next to something else


# What diff_events has to do next: compare two values, or say that a key is on one
# side only, or that two sequences differ in length. Each item carries its depth
# and its path segment: the walk is depth first, so the path of the item at hand is
# the segments list cut to its depth, plus its own.
_COMPARE, _ONLY_A, _ONLY_B, _LENGTHS = range(4)


def diff_events(
    expected: Event,
    actual: Event,
    *,
    labels: tuple[str, str] = ("recorded", "regenerated"),
    limit: int = 20,
) -> list[str]:
    """The differing fields of two events, one line each: ``path: A -> B``.

    Paths use attribute and index syntax (``reply.content[0].arguments.x``); a
    very deep one shows its first and last levels. Values equal in Python but not
    in the log (``1`` and ``1.0``, ``1`` and ``True``) count as different and show
    their types. At most ``limit`` differences are listed; when there are more, a
    last line says how many: ``(+N more differences)``.
    """
    lines: list[str] = []
    more = 0
    segments: list[str] = []
    stack: list[tuple[int, int, str, Any, Any]] = [(_COMPARE, 0, "", expected, actual)]
    pop, push = stack.pop, stack.append
    while stack:
        what, depth, segment, a, b = pop()
        del segments[depth:]
        if segment:
            segments.append(segment)
        if what == _COMPARE:
            kind_a, kind_b = a.__class__, b.__class__
            if (kind_a is list or kind_a is tuple) and (kind_b is list or kind_b is tuple):
                count, below = len(a), len(segments)
                if count != len(b):
                    push((_LENGTHS, below, "", count, len(b)))
                    count = min(count, len(b))
                for index in range(count - 1, -1, -1):
                    push((_COMPARE, below, f"[{index}]", a[index], b[index]))
                continue
            map_a = a if kind_a is dict else _mapping(a)
            map_b = b if kind_b is dict else _mapping(b)
            if map_a is not None and map_b is not None:
                below = len(segments)
                if map_a.keys() != map_b.keys():
                    extra = [key for key in map_b if key not in map_a]
                    for key in reversed(extra):
                        push((_ONLY_B, below, _key(key), None, map_b[key]))
                for key in reversed(map_a):
                    name = f".{key}" if key.__class__ is str else _key(key)
                    if key in map_b:
                        push((_COMPARE, below, name, map_a[key], map_b[key]))
                    else:
                        push((_ONLY_A, below, name, map_a[key], None))
                continue
            if _same(a, b):
                continue
        if len(lines) >= limit:
            more += 1
            continue
        path = _spell(segments)
        if what == _COMPARE:
            shown_a, shown_b = _show(a, b)
            lines.append(f"{path}: {shown_a} -> {shown_b}")
        elif what == _ONLY_A:
            lines.append(f"{path}: only in {labels[0]}: {short(a)}")
        elif what == _ONLY_B:
            lines.append(f"{path}: only in {labels[1]}: {short(b)}")
        else:
            lines.append(f"{path}: {a} items -> {b} items")
    if more:
        lines.append(f"(+{more} more difference{'s' if more > 1 else ''})")
    return lines


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
    # Same text, different values: name the types.
    return f"{sa} ({type(a).__name__})", f"{sb} ({type(b).__name__})"
