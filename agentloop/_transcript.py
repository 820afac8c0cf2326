"""The run's transcript: the caller's initial messages snapshotted, and a view of it.

:func:`snapshot_transcript` copies the initial messages through the IR (rebuilding
dicts and suspicious values with the IR constructors, keeping well-typed messages
as they are) and reports the first problem; :class:`TranscriptView` is the O(1),
fixed-length, read-only view that every ``ModelRequest.messages`` is.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator, Mapping, Sequence, Sized
from typing import NamedTuple, overload

import msgspec

from ._copy import copy_block
from ._json import clean_text
from ._limits import DEFAULT_LIMITS, Limits, limit_name
from ._messages import (
    AssistantMessage,
    Block,
    ImageBlock,
    Message,
    ToolCall,
    ToolResultMessage,
    UserMessage,
    transcript_ids,
)
from ._validation import (
    arguments_problems,
    block_problem,
    message_problem,
    parts_problem,
    plain_call,
)

__all__ = ["TranscriptView", "snapshot_transcript"]


class TranscriptView(Sequence[Message]):
    """A read-only, fixed-length view of the run's append-only transcript.

    Creating one is O(1): it shares the loop's list and remembers its length, so a
    request made at step 3 keeps showing the transcript as it was at step 3 even
    after the loop appends more. Slicing returns a tuple. Compares equal to any
    sequence with the same messages.
    """

    __slots__ = ("_items", "_length")

    def __init__(self, items: list[Message], length: int) -> None:
        self._items = items
        self._length = length

    @overload
    def __getitem__(self, index: int) -> Message: ...
    @overload
    def __getitem__(self, index: slice) -> tuple[Message, ...]: ...
    def __getitem__(self, index: int | slice) -> Message | tuple[Message, ...]:
        if isinstance(index, slice):
            items = self._items
            return tuple(items[i] for i in range(self._length)[index])
        length = self._length
        if index < 0:
            index += length
        if not 0 <= index < length:
            raise IndexError("transcript index out of range")
        return self._items[index]

    def __len__(self) -> int:
        return self._length

    def __iter__(self) -> Iterator[Message]:
        return itertools.islice(self._items, self._length)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Sequence) or isinstance(other, (str, bytes)):
            return NotImplemented
        return len(other) == self._length and all(a == b for a, b in zip(self, other, strict=False))

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"TranscriptView({list(self)!r})"


class Snapshot(NamedTuple):
    """The initial transcript as a run keeps it (see :func:`snapshot_transcript`)."""

    messages: list[Message]
    problem: str | None  # the first problem; then the lists and sets are empty
    message_ids: set[str]
    call_ids: set[str]


def snapshot_transcript(messages: object, limits: Limits = DEFAULT_LIMITS) -> Snapshot:
    """Copy the caller's messages through the IR; return them, the first problem, and
    the ids they use.

    Messages must be the IR's Structs or dicts of the same shape, with fields of
    exactly the IR's types: nothing is converted on the way in (bytes are not
    text, a datetime is not a string), so the transcript the loop records is the
    one the caller gave. At most ``limits.initial_messages + 1`` items are taken
    from ``messages``, so an endless iterable fails the limit instead of filling
    memory.
    """
    if isinstance(messages, (str, bytes, Mapping)) or not isinstance(messages, Iterable):
        raise TypeError(f"messages must be a sequence of messages, got {type(messages).__name__}")
    most = limits.initial_messages
    items = list(itertools.islice(messages, most + 1))
    if len(items) > most:
        count = f"{len(messages)}" if isinstance(messages, Sized) else "more than"
        return _invalid(f"{count} initial messages exceed {limit_name(limits, 'initial_messages')}")
    rebuilt: list[Message] = []
    for index, item in enumerate(items):
        message = _reuse(item, limits)
        if message is None:
            message, problem = _checked(index, item, limits)
            if problem is not None:
                return _invalid(problem)
        rebuilt.append(message)  # type: ignore[arg-type]
    try:
        message_ids, call_ids = transcript_ids(rebuilt)
    except ValueError as exc:
        return _invalid(str(exc))
    return Snapshot(rebuilt, None, message_ids, call_ids)


def _invalid(problem: str) -> Snapshot:
    return Snapshot([], problem, set(), set())


def _checked(index: int, item: object, limits: Limits) -> tuple[Message | None, str | None]:
    """The checked path of the snapshot: the message rebuilt, or the first problem
    worded (``messages[2].content must be a str``, ...)."""
    where = f"messages[{index}]"
    kind = type(item)
    if kind is UserMessage or kind is ToolResultMessage or kind is AssistantMessage:
        problem = message_problem(item, where)  # type: ignore[arg-type]
        if problem is not None:
            return None, problem
        if kind is AssistantMessage:
            # Its content a list, or a block the fast path did not take: rebuilt
            # with a tuple of copies.
            message: Message = AssistantMessage(
                item.id,  # type: ignore[attr-defined]
                tuple(copy_block(block) for block in item.content),  # type: ignore[attr-defined]
            )
        else:  # a user message or tool result of parts (immutable: kept)
            message = item  # type: ignore[assignment]
    elif isinstance(item, dict):
        try:
            message = msgspec.convert(item, Message)
        except (msgspec.ValidationError, TypeError) as exc:
            return None, f"{where}: {exc}"
        problem = message_problem(message, where)
        if problem is not None:
            return None, problem
    else:
        return None, (
            f"{where} must be a UserMessage, AssistantMessage or ToolResultMessage "
            f"(or a dict of the same shape), got {kind.__name__}"
        )
    if type(message) is AssistantMessage:
        for block in message.content:
            if type(block) is ToolCall:
                structural, semantic = arguments_problems(block.arguments, limits)
                if structural or semantic:
                    return None, f"{where}: tool call {block.id!r}: {structural or semantic}"
        problem, _ = parts_problem(message.content, f"{where}.content", limits)
    elif type(message.content) is tuple:
        problem, _ = parts_problem(message.content, f"{where}.content", limits)
    if problem is not None:
        return None, problem
    return message, None


def _reuse(item: object, limits: Limits) -> Message | None:
    """The fast path of the snapshot: a well-typed message kept or cheaply rebuilt.

    Messages are frozen and their fields immutable, except tool-call argument dicts,
    which are checked (within ``limits``) and copied in one walk. Anything else
    returns ``None`` and takes the checked path.
    """
    kind = type(item)
    if kind is UserMessage:
        if _plain_str(item.id) and _plain_str(item.content):  # type: ignore[attr-defined]
            return item  # type: ignore[return-value]
    elif kind is ToolResultMessage:
        if (
            _plain_str(item.id)  # type: ignore[attr-defined]
            and _plain_str(item.tool_call_id)  # type: ignore[attr-defined]
            and _plain_str(item.tool_name)  # type: ignore[attr-defined]
            and _plain_str(item.content)  # type: ignore[attr-defined]
            and type(item.is_error) is bool  # type: ignore[attr-defined]
        ):
            return item  # type: ignore[return-value]
    elif kind is AssistantMessage:
        content = item.content  # type: ignore[attr-defined]
        if not _plain_str(item.id) or type(content) is not tuple:  # type: ignore[attr-defined]
            return None
        blocks: list[Block] = []
        for block in content:
            if type(block) is ToolCall:
                block = plain_call(block, limits)
                if block is None:
                    return None
            elif type(block) is not ImageBlock and block_problem(block, "") is None:
                block = copy_block(block)
            else:
                return None
            blocks.append(block)
        return AssistantMessage(item.id, tuple(blocks))  # type: ignore[attr-defined]
    return None


def _plain_str(value: object) -> bool:
    """A ``str`` the log can hold (no lone surrogates); ASCII answers at C speed."""
    return type(value) is str and (value.isascii() or clean_text(value))
