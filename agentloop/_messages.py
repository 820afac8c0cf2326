"""The message IR: frozen, tagged msgspec Structs shared by the loop, the log and adapters.

A transcript is a sequence of :data:`Message` values. Assistant messages hold
:data:`Block` values; a :class:`ToolCall` block is answered later in the transcript by
exactly one :class:`ToolResultMessage` with the same ``tool_call_id`` and
``tool_name``. :func:`validate_transcript` checks exactly that.

These classes are final: don't subclass them (the loop dispatches on exact type).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, TypeAlias

import msgspec

__all__ = [
    "AssistantMessage",
    "AudioBlock",
    "Block",
    "Content",
    "DocumentBlock",
    "ImageBlock",
    "MediaBlock",
    "Message",
    "Part",
    "ProviderBlock",
    "TextBlock",
    "ThinkingBlock",
    "ToolCall",
    "ToolResultMessage",
    "UserMessage",
    "close_dangling_calls",
    "content_text",
    "text_from_assistant",
    "transcript_ids",
    "validate_transcript",
]


class TextBlock(msgspec.Struct, frozen=True, omit_defaults=True, tag_field="type", tag="text"):
    """Visible text from the assistant."""

    text: str


class ThinkingBlock(
    msgspec.Struct, frozen=True, omit_defaults=True, tag_field="type", tag="thinking"
):
    """Reasoning text a model exposes; ``signature`` is the provider's opaque token."""

    text: str
    signature: str | None = None


class ToolCall(msgspec.Struct, frozen=True, omit_defaults=True, tag_field="type", tag="tool_call"):
    """The assistant asks for tool ``name`` with JSON-object ``arguments``.

    ``arguments`` is a plain dict for convenience; treat it as read-only. The loop
    hands hooks deep copies and never relies on a dict it gave away.
    """

    id: str
    name: str
    arguments: dict[str, Any]


class ProviderBlock(
    msgspec.Struct, frozen=True, omit_defaults=True, tag_field="type", tag="provider"
):
    """Opaque state a provider needs back on the next request, kept in the transcript.

    ``provider`` names who made it (``"anthropic"``, ``"openai"``, ``"gemini"``),
    ``kind`` what it is (``"redacted_thinking"``, ``"thinking_signature"``,
    ``"reasoning"``, ``"thought_signature"``) and ``data`` holds the provider's own
    fields as plain JSON. An adapter sends back the blocks of its own provider and
    drops the others (see ``docs/providers.md``); the loop never reads ``data``.
    """

    provider: str
    kind: str
    data: dict[str, Any]


class ImageBlock(msgspec.Struct, frozen=True, omit_defaults=True, tag_field="type", tag="image"):
    """An image: inline bytes (``data`` and ``media_type``) or a reference (``url``).

    Exactly one of ``data`` and ``url`` is set (the loop checks it, with the limits
    of :class:`~agentloop.Limits`: ``blob_bytes``, ``blobs_per_step``). ``media_type``
    says what the bytes are (``"image/png"``); the loop never decodes them. A log
    stores inline bytes once, by their SHA-256 (log format v3), however many
    messages refer to them. ``name`` is an optional label (a file name).
    """

    media_type: str
    data: bytes | None = None
    url: str | None = None
    name: str | None = None


class AudioBlock(msgspec.Struct, frozen=True, omit_defaults=True, tag_field="type", tag="audio"):
    """A sound recording (``"audio/wav"``, ``"audio/mpeg"``): as :class:`ImageBlock`."""

    media_type: str
    data: bytes | None = None
    url: str | None = None
    name: str | None = None


class DocumentBlock(
    msgspec.Struct, frozen=True, omit_defaults=True, tag_field="type", tag="document"
):
    """A document (``"application/pdf"``, ``"text/plain"``, ...): as :class:`ImageBlock`."""

    media_type: str
    data: bytes | None = None
    url: str | None = None
    name: str | None = None


#: The blocks that carry bytes (inline or by URL).
MediaBlock: TypeAlias = ImageBlock | AudioBlock | DocumentBlock

#: What a user message or a tool result may hold besides a plain ``str``.
Part: TypeAlias = TextBlock | ImageBlock | AudioBlock | DocumentBlock

#: A user message's or a tool result's content: a plain ``str`` (the common case),
#: or a tuple of :data:`Part` values in order.
Content: TypeAlias = str | tuple[Part, ...]

Block: TypeAlias = TextBlock | ThinkingBlock | ToolCall | ProviderBlock | ImageBlock


class UserMessage(msgspec.Struct, frozen=True, omit_defaults=True, tag_field="role", tag="user"):
    """A message from the user (or the application speaking for them).

    ``content`` is a plain ``str``, or a tuple of :data:`Part` values (text, images,
    audio, documents) in order.
    """

    id: str
    content: Content


class AssistantMessage(
    msgspec.Struct, frozen=True, omit_defaults=True, tag_field="role", tag="assistant"
):
    """A complete assistant message: text, thinking, tool-call, provider and image blocks,
    in order."""

    id: str
    content: tuple[Block, ...]


class ToolResultMessage(
    msgspec.Struct, frozen=True, omit_defaults=True, tag_field="role", tag="tool_result"
):
    """The result of one tool call; ``is_error`` marks a recoverable error.

    ``content`` is a plain ``str`` (a tool's JSON or text result), or a tuple of
    :data:`Part` values when the tool returned blocks (a chart, a page of a PDF).
    """

    id: str
    tool_call_id: str
    tool_name: str
    content: Content
    is_error: bool = False


Message: TypeAlias = UserMessage | AssistantMessage | ToolResultMessage


def text_from_assistant(message: AssistantMessage) -> str:
    """Join the text blocks of an assistant message (thinking and tool calls are skipped).

    >>> text_from_assistant(AssistantMessage("m1", (TextBlock("Hello, "), TextBlock("world"))))
    'Hello, world'
    """
    return "".join(b.text for b in message.content if type(b) is TextBlock)


def content_text(content: Content) -> str:
    """The text of a user message's or tool result's ``content``.

    A ``str`` is returned as it is; in a tuple of parts, text blocks are joined and
    each media block stands as a short placeholder naming it, e.g.
    ``[image image/png, 108 bytes]`` or ``[document application/pdf: https://...]``.

    >>> content_text((TextBlock("see "), ImageBlock("image/png", data=b"x" * 108)))
    'see [image image/png, 108 bytes]'
    """
    if type(content) is str:
        return content
    return "".join(
        part.text if type(part) is TextBlock else media_placeholder(part)  # type: ignore[arg-type]
        for part in content
    )


def media_placeholder(block: MediaBlock) -> str:
    """``[image image/png, 108 bytes]``: a media block named in one line of text."""
    kind = _MEDIA_KINDS[type(block)]
    if block.data is not None:
        return f"[{kind} {block.media_type}, {len(block.data)} bytes]"
    return f"[{kind} {block.media_type}: {block.url}]"


_MEDIA_KINDS: dict[type, str] = {
    ImageBlock: "image",
    AudioBlock: "audio",
    DocumentBlock: "document",
}


def validate_transcript(messages: Iterable[Message]) -> None:
    """Check that a transcript is complete and consistently linked.

    Rules: message ids are unique; every tool call id is unique; every tool call is
    answered by exactly one *later* tool result with the same id and tool name; no
    tool result answers a call that does not precede it.

    Raises:
        ValueError: naming the first rule broken and the message index.
    """
    transcript_ids(messages)


def transcript_ids(messages: Iterable[Message]) -> tuple[set[str], set[str]]:
    """:func:`validate_transcript`'s checks; returns the transcript's message ids and
    tool call ids (which the loop keeps, to check the ids that come later).

    Raises:
        ValueError: as :func:`validate_transcript`.
    """
    seen_ids: set[str] = set()
    open_calls: dict[str, str] = {}
    answered: set[str] = set()
    for index, message in enumerate(messages):
        kind = type(message)
        if kind not in _MESSAGE_TYPES:
            raise ValueError(
                f"messages[{index}]: expected UserMessage, AssistantMessage or "
                f"ToolResultMessage, got {kind.__name__}"
            )
        if message.id in seen_ids:
            raise ValueError(f"messages[{index}]: duplicate message id {message.id!r}")
        seen_ids.add(message.id)
        if kind is AssistantMessage:
            for block in message.content:
                if type(block) is ToolCall:
                    if block.id in open_calls or block.id in answered:
                        raise ValueError(f"messages[{index}]: duplicate tool call id {block.id!r}")
                    open_calls[block.id] = block.name
        elif kind is ToolResultMessage:
            call_id = message.tool_call_id  # type: ignore[union-attr]
            name = open_calls.pop(call_id, None)
            if name is None:
                why = "is answered twice" if call_id in answered else "has no earlier call"
                raise ValueError(f"messages[{index}]: tool result for {call_id!r} {why}")
            if name != message.tool_name:  # type: ignore[union-attr]
                raise ValueError(
                    f"messages[{index}]: tool result for {call_id!r} names tool "
                    f"{message.tool_name!r}, but the call was to {name!r}"  # type: ignore[union-attr]
                )
            answered.add(call_id)
    if open_calls:
        missing = ", ".join(repr(c) for c in open_calls)
        raise ValueError(f"tool call(s) without a result: {missing}")
    return seen_ids, answered  # (every call is answered)


def close_dangling_calls(
    messages: Sequence[Message], *, content: str = "interrupted"
) -> tuple[Message, ...]:
    """Answer every unanswered tool call with an explicit error result.

    A cancelled run keeps the assistant message whose tool call was interrupted but
    invents no result for it. Before sending such a transcript to the next run,
    call this to add ``ToolResultMessage(..., content="interrupted", is_error=True)``
    for each such call, after the results its batch did get, on purpose and visibly.
    """
    answered = {m.tool_call_id for m in messages if type(m) is ToolResultMessage}
    out: list[Message] = []
    owed: list[ToolResultMessage] = []  # results owed by the last assistant message
    for message in messages:
        if owed and type(message) is not ToolResultMessage:
            out.extend(owed)
            owed = []
        out.append(message)
        if type(message) is AssistantMessage:
            owed = [
                ToolResultMessage(
                    id=f"tool-result-{block.id}",
                    tool_call_id=block.id,
                    tool_name=block.name,
                    content=content,
                    is_error=True,
                )
                for block in message.content
                if type(block) is ToolCall and block.id not in answered
            ]
    out.extend(owed)
    return tuple(out)


_MESSAGE_TYPES = (UserMessage, AssistantMessage, ToolResultMessage)
