"""Log files: JSONL, one header line, then one event per line.

Format version 2
----------------
::

    {"format":"agentloop-log","version":2,"library":"0.1.0","#":"5a0c9e3f1b2d7c48"}
    {"type":"session.start","sequence":0,"at":1000.0,"max_steps":8,"#":"e1f0..."}
    {"type":"message.accepted","sequence":1,"at":1000.0,"message":{...},"#":"..."}
    ...
    {"type":"plan.commit","sequence":7,"at":1001.0,"step":1,"=":"message","#":"..."}
    {"type":"tool.result","sequence":9,"at":1001.25,"step":1,"reply":{...},"=":"message","#":"..."}

Every line is one JSON object and ends with ``\\n``. An event line is the event as
:func:`agentloop.encode_event` writes it, with two members added at its end:

- ``"#"``, always last: the *hash chain link*, the first 16 hex digits of the
  SHA-256 of the previous line's link followed by this line's bytes up to (not
  including) ``,"#":``. The header's link hashes the header alone. A reader checks
  every link, so an edited, deleted, inserted, reordered or appended line (another
  session's, say) breaks the chain at the first line it touches, and the reader
  names that line (:class:`LogIntegrityError`). The chain has no secret: it shows
  accidents and naive edits, not a forger who recomputes every link; and a cut at
  the end of the file is what a crash leaves (``replay`` then finds the run
  unfinished).
- ``"="``, on some lines: the name of a field that is not written because it
  follows from earlier lines, so that content is stored once:

  ==========================  ==========  ========================================
  event                       ``"="``     the field is rebuilt as
  ==========================  ==========  ========================================
  ``plan.commit``             message     ``AssistantMessage("message-<id>",
                                          content)`` of the last ``plan.draft``'s
                                          response
  ``tool.result``/``.error``  message     ``ToolResultMessage("tool-result-<call
                                          id>", call id, tool name, reply.content,
                                          is_error)`` from the last ``tool.call``
                                          and this line's ``reply``
  ``run.finished``            final_text  the text of the last ``plan.commit``
  ==========================  ==========  ========================================

  A writer leaves the field out exactly when the rebuilt value is the event's own
  (equal, and encoded the same); otherwise the line holds it. So the in-memory
  events are the same as ever; only the file is smaller.

A field that holds its default is not written at all (every Struct in an event is
declared with msgspec's ``omit_defaults``).

Reading
-------
:func:`read_log` streams the file line by line (peak memory: the events plus one
line; a long blob line is read a piece at a time, see Format version 3) and
fails closed. It refuses, naming the line: a broken chain link; a line
that is not JSON or not a known event; a line that is not *canonical*, i.e. not
byte for byte what this module writes for the event it decodes to (a line with an
unknown or repeated field, extra whitespace or another spelling of the same
values); an empty line; a line longer than ``max_line_bytes`` (256 MiB); a second
header, or a second ``session.start``: one file holds one session. A line may end
with ``\\r\\n`` (a checkout through git's ``autocrlf`` rewrites a committed log that
way). A last line without its ``\\n`` is *torn*: the writer died while writing it.
:class:`TornLogError` carries the intact prefix; a reader never accepts a partial
line as data and never repairs a file on its own. The header is checked for its
``format``, its ``version`` and (format 2) its link.

Values of any depth are read (a log holds whatever the loop recorded: a model's
100,000-level tool arguments, say). A line nested deeper than 512 levels is
decoded, and checked for its canonical form, without recursion (the iterative
walks of ``agentloop/_deep.py``), whatever the interpreter's recursion limit, so
every interpreter reads the same lines the same way.

The common line (an event line ending with its link and ``\\n``, short or shallow
enough for msgspec to decode, that stores nothing elsewhere or leaves out only its
``message``) is checked with as few steps as the rules allow: its link (one
SHA-256), one decode, one encode of what it decoded, and one comparison of the
bytes. A line with non-ASCII text is decoded once more for the encode, so that
the events kept hold no UTF-8 copy of their strings (encoding a ``str`` leaves
one inside it). Every other line, and any line those steps refuse, takes the
general path, which words the error.

``read_log`` checks the *file*, not the *story*: missing, extra or reordered events
that a writer wrote that way are found by :func:`replay.replay`.

Format version 3
----------------
Format 2 plus *blob lines*: the bytes of a media block (``ImageBlock``,
``AudioBlock``, ``DocumentBlock`` with ``data``) are stored once per log::

    {"blob":"<sha-256, 64 hex>","media_type":"image/png","size":70,"data":"<base64>","#":"..."}

written before the first event line that refers to them, chained like every line.
In an event line a media block's ``data`` is the blob's SHA-256 in hex (64 hex
digits are valid base64: the line decodes as any event, and is canonical by the
same rule); the reader checks each blob's hash, refuses a reference to a blob no
earlier line holds, and puts the bytes back, so the events in memory are those the
loop recorded. A blob line is never held whole: the writers write its base64 a
piece at a time from the bytes, and the reader reads a long one (from a file it
can seek) a piece at a time, hashing, checking and decoding each piece into one
``bytes`` of the blob's size; a line those steps do not accept is read whole and
its problem worded as before. Whether a line may hold media is known from its event's type
(:func:`_media_fields`, computed once per type); a line with no
``"media_type":`` in a log with no blob yet costs one search. A header of
version 2 reads as format 2 (no blob lines; media bytes, if any, inline), and
:class:`LogWriter` appends to such a file in format 2.

Format version 1
----------------
Version 1 (agentloop 0.1) had no chain and no ``"="``, and wrote every field, its
defaults too. It is still read, by its own canonical form: every line must be
byte for byte the encoding of its event with exactly the fields format 1 knew
(:data:`_V1_FIELDS`, frozen), all of them written. Fields added since then read as
their defaults. :func:`write_log` writes version 3; :class:`LogWriter` appends to
versions 2 and 3 only; ``write_log(path, read_log(path))`` rewrites a version-1 or
version-2 log as version 3 (atomically, same events).

Evolution policy
----------------
- Adding a field *with a default* to any Struct a log holds (an event, ``Usage``,
  a block, a reply, ...), a new event type, a new block or reply variant: **not** a
  format change. Lines that do not use it stay byte for byte the same, and older
  logs read as before (the field reads as its default). A reader that does not
  know the field or the type refuses a line that uses it (not canonical, or not a
  known event), saying which agentloop wrote the log: fail closed, never drop data.
- Changing the type or the default of a field, removing or renaming a field,
  reusing a tag, or changing the line layout above: a format change. It bumps
  :data:`LOG_FORMAT_VERSION`, keeps reading every older version by its own
  canonical form (a frozen field list, like :data:`_V1_FIELDS`), and freezes the
  old fixtures (``fixtures/v<N>/``, replayed by the tests forever).
- A reader refuses a version newer than :data:`LOG_FORMAT_VERSION`
  (:class:`LogVersionError`).
- A change in what the *engine* does with the same replies is not a format change
  but a new rules revision (``agentloop/_rules.py``): ``session.start`` records the
  revision, and a replay follows the one its log records.
"""

from __future__ import annotations

import array
import base64
import binascii
import contextlib
import hashlib
import io
import itertools
import math
import operator
import os
import re
import secrets
import stat
from collections.abc import Callable, Iterable, Iterator, Sequence
from types import TracebackType
from typing import IO, Any, Final, get_args

import msgspec
import msgspec.inspect

from agentloop import (
    AgentLoopError,
    AssistantMessage,
    AudioBlock,
    Budget,
    BudgetUsage,
    BudgetWarnEvent,
    Cancel,
    DocumentBlock,
    Event,
    EventLog,
    ImageBlock,
    MessageAcceptedEvent,
    ModelChunk,
    ModelChunkEvent,
    ModelFailure,
    ModelResponse,
    PlanCommitEvent,
    PlanDraftEvent,
    Resume,
    RunError,
    RunFinishedEvent,
    SessionCompleteEvent,
    SessionPauseEvent,
    SessionResumeEvent,
    SessionStartEvent,
    StepEndEvent,
    StepStartEvent,
    TextBlock,
    ThinkingBlock,
    ToolCall,
    ToolCallEvent,
    ToolErrorEvent,
    ToolResult,
    ToolResultEvent,
    ToolResultMessage,
    ToolSpec,
    UnrecognizedReply,
    Usage,
    UserMessage,
    __version__,
    decode_event,
    encode_event,
    text_from_assistant,
)
from agentloop._spi import decode_deep, deep_encode, deep_parse

__all__ = [
    "LOG_FORMAT",
    "LOG_FORMAT_VERSION",
    "MAX_LINE_BYTES",
    "LogError",
    "LogFormatError",
    "LogIntegrityError",
    "LogVersionError",
    "LogWriter",
    "TornLogError",
    "read_log",
    "write_log",
]

#: The ``format`` field of the header line.
LOG_FORMAT: Final = "agentloop-log"
#: The newest log format version this library reads, and the one it writes.
LOG_FORMAT_VERSION: Final = 3
#: The longest line :func:`read_log` reads by default (bytes, line end included).
MAX_LINE_BYTES: Final = 256 * 1024 * 1024

_POSIX: Final = os.name == "posix"
# A header line is small; a file whose first 64 KiB hold no line end is no log.
_MAX_HEADER_BYTES: Final = 64 * 1024
# Past this nesting of JSON objects and arrays a line is decoded without recursion
# (msgspec decodes by recursion: 3.11 gives up near 1,000 levels, 3.13 near 10,000).
# A fixed number, so that every interpreter takes the same path for the same line.
_MAX_DEPTH: Final = 512
_CHUNK: Final = 1024 * 1024

StrPath = str | os.PathLike[str]


class LogError(AgentLoopError):
    """Root of the log-file errors. ``path`` is the file; ``line`` the 1-based line
    number the problem is on, when there is one."""

    def __init__(self, message: str, *, path: str = "", line: int | None = None) -> None:
        super().__init__(message)
        self.path = path
        self.line = line


class LogFormatError(LogError):
    """The file is not a (well-formed) agentloop log: no or wrong header, a line
    that is not JSON, or an event of an unknown type or shape."""


class LogIntegrityError(LogFormatError):
    """The hash chain is broken at ``line``: that line was edited, or lines were
    removed, inserted or reordered before it (or it was appended from another log)."""


class LogVersionError(LogFormatError):
    """The log was written in a format version this library does not read
    (``version`` is what the header says)."""

    def __init__(self, message: str, *, path: str = "", version: object = None) -> None:
        super().__init__(message, path=path, line=1)
        self.version = version


class TornLogError(LogFormatError):
    """The last line is incomplete: the writer died in the middle of writing it.

    Nothing is accepted silently. ``events`` is the intact prefix (every complete
    line before the torn one); to recover explicitly, e.g.::

        try:
            events = read_log(path)
        except TornLogError as exc:
            events = exc.events
            write_log(path, events)  # rewrites the file without the torn line
    """

    def __init__(self, message: str, *, path: str, line: int, events: list[Event]) -> None:
        super().__init__(message, path=path, line=line)
        self.events = events


# --------------------------------------------------------------------------- the header


class _Header(msgspec.Struct, frozen=True):
    format: str
    version: int
    library: str = ""


_header_decoder = msgspec.json.Decoder(dict[str, Any])
_encode = msgspec.json.Encoder().encode


def _header_body() -> bytes:
    """The header line of a new log, up to its link member."""
    return _encode(_Header(LOG_FORMAT, LOG_FORMAT_VERSION, __version__))[:-1]


_HEADER_START: Final = b'{"format":'  # how a header line starts
_EVENT_START: Final = b'{"type":"'  # how an event line starts


# --------------------------------------------------------------------------- format 2

_LINK_KEY: Final = b',"#":"'
_LINK_TAIL: Final = len(_LINK_KEY) + 16 + 2  # ,"#":"<16 hex>"}
_DERIVED: Final = {name: b',"=":"' + name.encode() + b'"' for name in ("message", "final_text")}


_SHA256: Final = hashlib.sha256()  # copied: cheaper than making a new one each time


def _link(previous: bytes, body: bytes | memoryview) -> bytes:
    """The chain link of a line whose bytes up to ``,"#":`` are ``body``."""
    digest = _SHA256.copy()
    digest.update(previous)
    digest.update(body)
    return digest.digest()[:8].hex().encode()


def _without(cls: type[msgspec.Struct], name: str) -> type[msgspec.Struct]:
    """A Struct like ``cls`` (same tag, same fields, same defaults) without ``name``:
    how a line that leaves ``name`` out is decoded and encoded. Its fields may be
    given by position, in order (cheaper than by keyword: see _Format2.body)."""
    fields: list[Any] = []
    for field in msgspec.structs.fields(cls):
        if field.name == name:
            continue
        if field.required:
            fields.append((field.name, field.type))
        elif field.default_factory is not msgspec.NODEFAULT:
            fields.append(
                (field.name, field.type, msgspec.field(default_factory=field.default_factory))
            )
        else:
            fields.append((field.name, field.type, field.default))
    config = cls.__struct_config__
    return msgspec.defstruct(
        f"{cls.__name__}Stored",
        fields,
        tag_field=config.tag_field,
        tag=config.tag,
        frozen=True,
        omit_defaults=True,
        module=__name__,
    )


# A line this short cannot nest deeper than _MAX_DEPTH, nor be anything but valid
# or invalid JSON for the decoder: its errors are the only thing to word.
_SAFE_LENGTH: Final = 2 * _MAX_DEPTH
# The events whose line the writer may shorten (see _Format2.body).
_WHOLE: Final = frozenset((PlanCommitEvent, ToolResultEvent, ToolErrorEvent, RunFinishedEvent))

# The events whose ``message`` a line may leave out, as a line holds them.
_STORED: Final[dict[type[Any], type[msgspec.Struct]]] = {
    cls: _without(cls, "message") for cls in (PlanCommitEvent, ToolResultEvent, ToolErrorEvent)
}
_stored_decoders: Final = {stored: msgspec.json.Decoder(stored) for stored in _STORED.values()}
# The values of an event's fields that its stored Struct holds, in their order.
_STORED_VALUES: Final = {
    cls: operator.attrgetter(*stored.__struct_fields__) for cls, stored in _STORED.items()
}
_STORED_DECODERS: Final = {
    b'{"type":"' + cls.type.encode() + b'",': (cls, stored) for cls, stored in _STORED.items()
}


def _encode_any(value: Any) -> bytes:
    """``msgspec.json.encode(value)``, the same bytes at any depth."""
    try:
        return _encode(value)
    except RecursionError:  # too deep for msgspec's recursive encoder
        return deep_encode(value)


def _same_message(
    message: AssistantMessage | ToolResultMessage, rebuilt: AssistantMessage | ToolResultMessage
) -> bool:
    """Whether ``message`` is ``rebuilt``: equal, and written the same."""
    if message.__class__ is not rebuilt.__class__ or message.id != rebuilt.id:
        return False
    if rebuilt.__class__ is AssistantMessage:
        content, blocks = message.content, rebuilt.content
        if content is blocks:
            return True
        # Equal values written the same (1, 1.0 and True are equal, not the same;
        # NaN is not equal to itself).
        try:
            return bool(content == blocks) and _encode(content) == _encode(blocks)
        except RecursionError:
            # Too deep to compare by recursion: the same when written the same
            # (tags tell NaN from null and big ints apart) and of the same types
            # all the way down (which a written form shows but for list/tuple:
            # both are rebuilt as tuples of blocks holding lists).
            try:
                return deep_encode(content, tagged=True) == deep_encode(blocks, tagged=True)
            except (TypeError, ValueError, OverflowError):
                return False
        except (TypeError, ValueError, OverflowError):
            return False
    return (
        message.tool_call_id == rebuilt.tool_call_id  # type: ignore[union-attr]
        and message.tool_name == rebuilt.tool_name  # type: ignore[union-attr]
        and message.content == rebuilt.content
        and message.is_error is rebuilt.is_error  # type: ignore[union-attr]
    )


# --------------------------------------------------------------------------- blobs (format 3)

_BLOB_START: Final = b'{"blob":"'  # how a blob line starts
_MEDIA: Final = frozenset((ImageBlock, AudioBlock, DocumentBlock))
# The field names of each Struct class that may hold a media block, at any depth
# of Structs and tuples (plain data, ``dict``/``list``/``Any``, never holds one).
_MEDIA_FIELDS: Final[dict[type[Any], tuple[str, ...]]] = {}


def _reaches_media(info: Any) -> bool:
    if isinstance(info, msgspec.inspect.StructType):
        return info.cls in _MEDIA or bool(_media_fields(info.cls))
    if isinstance(info, msgspec.inspect.UnionType):
        return any(_reaches_media(member) for member in info.types)
    if isinstance(info, msgspec.inspect.VarTupleType):
        return _reaches_media(info.item_type)
    return False


def _media_fields(cls: type[Any]) -> tuple[str, ...]:
    """The fields of Struct class ``cls`` that may hold a media block (cached)."""
    names = _MEDIA_FIELDS.get(cls)
    if names is None:
        _MEDIA_FIELDS[cls] = ()  # (no Struct holds itself; a guard all the same)
        info = msgspec.inspect.type_info(cls)
        names = tuple(
            field.name
            for field in info.fields  # type: ignore[attr-defined]
            if _reaches_media(field.type)
        )
        _MEDIA_FIELDS[cls] = names
    return names


def _article(word: str) -> str:
    return f"{'an' if word[0] in 'aeiou' else 'a'} {word}"


def _blob_ref(digest: str) -> bytes:
    """What a format-3 event line's ``data`` holds for the blob ``digest``: the
    bytes whose base64 is the 64 hex digits, so that the line reads
    ``"data":"<sha-256 in hex>"`` and decodes as any event does."""
    return base64.b64decode(digest)


def _plain(content: Any) -> bool:
    """Whether message content (a ``str`` or a tuple of blocks) holds no media."""
    return content.__class__ is str or _MEDIA.isdisjoint(map(type, content))


def _result_plain(event: Any) -> bool:
    content, reply = event.message.content, event.reply
    return (content.__class__ is str or _MEDIA.isdisjoint(map(type, content))) and (
        reply is None or reply.content.__class__ is str or _plain(reply.content)
    )


# Whether an event holds no media block, by its class, answered without a walk of
# its fields for the events that hold media most often (most hold text only);
# ``None`` for the classes that never hold one (see _media_check).
_NO_MEDIA: Final[dict[type[Any], Callable[[Any], bool] | None]] = {
    ModelChunkEvent: lambda event: event.chunk.block.__class__ not in _MEDIA,
    PlanDraftEvent: lambda event: (
        event.reply.__class__ is not ModelResponse or _plain(event.reply.content)
    ),
    PlanCommitEvent: lambda event: _plain(event.message.content),
    MessageAcceptedEvent: lambda event: _plain(event.message.content),
    ToolResultEvent: _result_plain,
    ToolErrorEvent: _result_plain,
    # (Every run ends with these two; their reply, the only field that may hold
    # media, is None but when a reply ended the run: then its fields are walked.)
    SessionCompleteEvent: lambda event: event.reply is None,
    RunFinishedEvent: lambda event: event.reply is None,
}


def _never(event: Any) -> bool:
    return False


def _media_check(cls: type[Any]) -> Callable[[Any], bool] | None:
    """``_NO_MEDIA[cls]``, computed for a class it does not name yet: ``None`` if
    ``cls`` holds no media, else a check that always says "walk its fields"."""
    check = _NO_MEDIA[cls] = _never if _media_fields(cls) else None
    return check


def _swap_media(value: Any, swap: Callable[[Any], Any]) -> Any:
    """``value`` with every media block that holds bytes replaced by ``swap(block)``
    (a copy of the path to it; ``value`` itself when there is none)."""
    cls = value.__class__
    if cls in _MEDIA:
        return value if value.data is None else swap(value)
    if cls is tuple:
        items = [_swap_media(item, swap) for item in value]
        return value if all(a is b for a, b in zip(items, value, strict=True)) else tuple(items)
    if not isinstance(value, msgspec.Struct):
        return value
    changes = {}
    for name in _media_fields(cls):
        field = getattr(value, name)
        new = _swap_media(field, swap)
        if new is not field:
            changes[name] = new
    return msgspec.structs.replace(value, **changes) if changes else value


class _BlobLine(msgspec.Struct, frozen=True, omit_defaults=True, forbid_unknown_fields=True):
    """A format-3 blob line: the SHA-256 (hex) of ``data``, the media type of the
    first block that held it, its size in bytes, and the bytes (base64); ``link``
    is the chain link member (``"#"``), read with the rest."""

    blob: str
    media_type: str
    size: int
    data: bytes
    link: str = msgspec.field(default="", name="#")


class _BlobHead(msgspec.Struct, frozen=True):
    blob: str
    media_type: str
    size: int


_blob_decoder: Final = msgspec.json.Decoder(_BlobLine)
# A blob's bytes are written (and read) as base64 this many bytes at a time (a
# multiple of 3: the pieces' base64 joined is the whole's), so that a big blob
# is never in memory twice.
_BLOB_PIECE: Final = 3 * 64 * 1024
_DATA_KEY: Final = b',"data":"'
_BLOB_TEXT: Final = _BLOB_PIECE // 3 * 4  # a piece's base64
_blob_head_decoder: Final = msgspec.json.Decoder(_BlobHead)


def _blob_head(digest: str, media_type: str, size: int) -> bytes:
    """A blob line up to its base64 (``...,"data":"``)."""
    return _encode(_BlobHead(digest, media_type, size))[:-1] + _DATA_KEY


def _base64_pieces(data: bytes) -> Iterator[bytes]:
    """``base64.b64encode(data)``, as pieces of at most 1 MiB."""
    view = memoryview(data)
    for start in range(0, len(data), _BLOB_PIECE):
        yield binascii.b2a_base64(view[start : start + _BLOB_PIECE], newline=False)


def _blob_link(previous: bytes, head: bytes, data: bytes) -> bytes:
    """The chain link of the blob line ``head`` + base64 of ``data`` + ``"``, the
    base64 made piece by piece."""
    digest = _SHA256.copy()
    digest.update(previous)
    digest.update(head)
    for piece in _base64_pieces(data):
        digest.update(piece)
    digest.update(b'"')
    return digest.digest()[:8].hex().encode()


def _pieces(parts: Iterable[tuple[bytes, bytes, _BlobLine | None]]) -> Iterator[bytes]:
    """The bytes of the lines :meth:`_Format2.parts` describes, a blob's base64 in
    pieces (a blob line is never one ``bytes``)."""
    for body, link, blob in parts:
        if blob is None:
            yield body + _LINK_KEY + link + b'"}\n'
        else:
            yield body
            yield from _base64_pieces(blob.data)
            yield b'"' + _LINK_KEY + link + b'"}\n'


# Every media block a line holds writes its media type (how a line without one
# is known at once to refer to no blob).
_MEDIA_MARK: Final = b'"media_type":'


def _first_decode(data: bytes) -> Event:
    """``msgspec.json.Decoder(Event).decode`` (``decode_event`` without its special
    cases), made on first use (building it takes longer than importing this)."""
    global _decode_event
    _decode_event = msgspec.json.Decoder(Event).decode
    return _decode_event(data)


_decode_event: Callable[[bytes], Event] = _first_decode
_EVENT_TYPES: Final = frozenset(get_args(Event))
# The events whose lines _Format2._read_plain reads: every one but those that may
# leave a field out (_WHOLE) and one that encode_event may write with tags (the
# other, plan.draft, when its line holds no tag).
_PLAIN_EVENTS: Final = _EVENT_TYPES - _WHOLE - {SessionCompleteEvent}
_TAG_MARK: Final = b'{"$'  # how a tagged value starts (see agentloop/_codec.py)
# A plan.draft without tags is written as msgspec writes it unless it holds an int
# outside int64 and uint64 (encode_event tags those): 19 digits or more, found as
# a run of 19 zeros once every digit is a zero (two passes at C speed).
_ZEROS: Final = bytes.maketrans(b"123456789", b"000000000")
_LONG_NUMBER: Final = b"0" * 19


# The events whose line _Format2.body shortens or encode_event may tag: any other
# event's line is msgspec's encoding of it (see _Format2.rows).
_SHAPED: Final = _WHOLE | {PlanDraftEvent, SessionCompleteEvent}
# The events whose class _Format2.advance looks for.
_ADVANCING: Final = frozenset((ToolCallEvent, PlanDraftEvent, PlanCommitEvent))


# The events whose lines may leave their message out, by type: class and decoder
# (see _Format2._read_stored).
def _builder(cls: type[Any], stored: type[msgspec.Struct]) -> Callable[[Any, Any], Event]:
    """``lambda fields, message: cls(**asdict(fields), message=message)``, with the
    keywords spelled out (no dict made per line: about 2.5x faster)."""
    keywords = "".join(f"{name}=fields.{name}, " for name in stored.__struct_fields__)
    build: Callable[[Any, Any], Event] = eval(  # (field names only: no input)
        f"lambda fields, message: cls({keywords}message=message)", {"cls": cls}
    )
    return build


_STORED_TYPES: Final = {
    cls.type.encode(): (cls, _stored_decoders[stored].decode, _builder(cls, stored))
    for cls, stored in _STORED.items()
}
# The events that may hold a media block.
_MEDIA_EVENTS: Final = frozenset(cls for cls in _EVENT_TYPES if _media_fields(cls))


class _Format2:
    """The format-2 lines of one log: the chain link so far and what the fields a
    line may leave out are rebuilt from (the last ``tool.call``, ``plan.draft``
    response and ``plan.commit`` message). Writers and readers share it, so what
    is written is exactly what is read back."""

    __slots__ = ("blobs", "call", "committed", "draft", "link", "request_id", "version")

    def __init__(self, link: bytes = b"", version: int = LOG_FORMAT_VERSION) -> None:
        self.link = link
        self.version = version  # 2 or 3: format 3 stores media bytes as blobs
        self.call: ToolCall | None = None
        self.draft: ModelResponse | None = None
        self.committed: AssistantMessage | None = None
        self.request_id = ""  # the last chunk's (see _share)
        # The blobs so far, by SHA-256 (hex): the bytes, as events in memory hold them.
        self.blobs: dict[str, bytes] = {}

    def copy(self) -> _Format2:
        other = _Format2(self.link, self.version)
        other.call, other.draft, other.committed = self.call, self.draft, self.committed
        other.blobs = dict(self.blobs)
        return other

    def advance(self, event: Event) -> None:
        cls = event.__class__
        if cls is ToolCallEvent:
            self.call = event.call  # type: ignore[union-attr]
        elif cls is PlanDraftEvent:
            reply = event.reply  # type: ignore[union-attr]
            self.draft = reply if reply.__class__ is ModelResponse else None
        elif cls is PlanCommitEvent:
            self.committed = event.message  # type: ignore[assignment,union-attr]

    # -- rebuilding a field that a line leaves out

    def _message(self, cls: type[Any], stored: Any) -> AssistantMessage | ToolResultMessage | None:
        if cls is PlanCommitEvent:
            draft = self.draft
            if draft is None:
                return None
            return AssistantMessage(f"message-{draft.id}", draft.content)
        call, reply = self.call, stored.reply
        if call is None or reply is None or reply.call_id != call.id:
            return None
        return ToolResultMessage(
            f"tool-result-{call.id}", call.id, call.name, reply.content, cls is ToolErrorEvent
        )

    def _final_text(self) -> str | None:
        committed = self.committed
        return None if committed is None else text_from_assistant(committed)

    # -- writing

    def body(self, event: Event) -> bytes:
        """The line for ``event`` up to its link member."""
        cls = event.__class__
        if cls in _STORED:
            rebuilt = self._message(cls, event)
            if rebuilt is not None and _same_message(event.message, rebuilt):  # type: ignore[arg-type,union-attr]
                stored = _STORED[cls](*_STORED_VALUES[cls](event))
                return _encode_any(stored)[:-1] + _DERIVED["message"]
        elif cls is RunFinishedEvent:
            final_text = event.final_text  # type: ignore[union-attr]
            if final_text is not None and final_text == self._final_text():
                plain = msgspec.structs.replace(event, final_text=None)
                return encode_event(plain)[:-1] + _DERIVED["final_text"]
        return encode_event(event)[:-1]

    def rows(self, events: Sequence[Event], start: int, base: int, values: list[Any]) -> int:
        """:meth:`text` for ``events[start:]`` as a store's rows hold them: adds to
        ``values`` each event's key (``base`` plus its sequence), its sequence, its
        line up to the link member, closed (``}``), and the link, both as text (an
        ``INSERT``'s values, in a row); stops at the first event that a blob line
        comes before (nothing done for it, as :meth:`text`) and returns its index
        (``len(events)`` when none does). The common case in one call: a durable
        step stores about 7 lines."""
        version3 = self.version >= 3
        for index in range(start, len(events)):
            event = events[index]
            cls = event.__class__
            no_media = _NO_MEDIA[cls] if cls in _NO_MEDIA else _media_check(cls)
            if no_media is not None and version3 and not no_media(event):
                return index
            if cls in _SHAPED:
                body = self.body(event)
                line = body.decode() + "}"
            else:  # (body's line for these: encode_event's, which is msgspec's)
                try:
                    whole = _encode(event)
                except RecursionError:
                    whole = encode_event(event)
                body = whole[:-1]
                line = whole.decode()
            digest = _SHA256.copy()
            digest.update(self.link)
            digest.update(body)
            link = digest.hexdigest()[:16]  # (_link's, as text)
            self.link = link.encode()
            if cls in _ADVANCING:
                self.advance(event)
            sequence = event.sequence
            values += (base + sequence, sequence, line, link)
        return len(events)

    def parts(self, event: Event) -> list[tuple[bytes, bytes, _BlobLine | None]]:
        """The lines for ``event`` as ``(body, link, blob)``: ``body`` up to the link
        member, and for a blob line the blob it holds and as ``body`` only the
        line's head, up to its base64 (see :func:`_pieces`)."""
        parts: list[tuple[bytes, bytes, _BlobLine | None]] = []
        link = self.link
        try:
            self._parts(event, parts)
        except BaseException:  # (an event that does not encode): nothing happened
            self.link = link
            for _, _, blob in parts:
                del self.blobs[blob.blob]  # type: ignore[union-attr]
            raise
        return parts

    def text(self, event: Event) -> bytes | None:
        """The line for ``event`` up to its link member, when no blob line comes
        before it (it holds no media bytes, or the log is format 2), and advances
        the chain; otherwise ``None``, and nothing is done (see :meth:`parts`).
        The common case of :meth:`parts`, without its lists."""
        cls = event.__class__
        no_media = _NO_MEDIA[cls] if cls in _NO_MEDIA else _media_check(cls)
        if no_media is not None and self.version >= 3 and not no_media(event):
            return None
        body = self.body(event)
        self.link = _link(self.link, body)
        self.advance(event)
        return body

    def _parts(self, event: Event, parts: list[tuple[bytes, bytes, _BlobLine | None]]) -> None:
        cls = event.__class__
        no_media = _NO_MEDIA[cls] if cls in _NO_MEDIA else _media_check(cls)
        if no_media is not None and self.version >= 3 and not no_media(event):
            blobs = self.blobs

            def deflate(block: Any) -> Any:
                data = block.data
                digest = hashlib.sha256(data).hexdigest()
                if digest not in blobs:
                    blob = _BlobLine(digest, block.media_type, len(data), data)
                    head = _blob_head(digest, block.media_type, len(data))
                    self.link = _blob_link(self.link, head, data)
                    parts.append((head, self.link, blob))
                    blobs[digest] = data
                return msgspec.structs.replace(block, data=_blob_ref(digest))

            event = _swap_media(event, deflate)
        body = self.body(event)
        self.link = _link(self.link, body)
        self.advance(event)
        parts.append((body, self.link, None))

    # -- reading

    def read(self, line: bytes, end: int, where: _Where) -> Event | None:
        """Check and decode one line (``line[:end]``: its line end cut off); ``None``
        for a blob line (format 3), whose bytes the events after it refer to."""
        body_end = end - _LINK_TAIL
        if body_end < 1 or line[end - 2 : end] != b'"}' or not line.startswith(_LINK_KEY, body_end):
            self.check_link(line, end, where)  # raises, saying what is wrong
        link = line[end - 18 : end - 2]
        digest = _SHA256.copy()
        digest.update(self.link)
        # (A short line's bytes are copied: cheaper than a view, and as cheap to hash.)
        digest.update(line[:body_end] if end <= _SAFE_LENGTH else memoryview(line)[:body_end])
        if digest.digest()[:8].hex().encode() != link:
            self.check_link(line, end, where)
        self.link = link
        if self.version >= 3 and line.startswith(_BLOB_START):
            self._read_blob(line, body_end, where)
            return None
        event: Event | None = None
        # The common lines at C speed (see _read_plain); any other line, or one
        # that is not right, is read (and its problem worded) by _read_event.
        if end <= _SAFE_LENGTH or line.count(b"[") + line.count(b"{") <= _MAX_DEPTH:
            if line.endswith(_DERIVED["message"], 0, body_end):
                event = self._read_stored(line, body_end)
            elif not line.endswith(_DERIVED["final_text"], 0, body_end):
                event = self._read_plain(line, body_end)
        if event is None:
            event = self._read_event(line, end, body_end, where)
        if (
            self.version >= 3
            and event.__class__ in _MEDIA_EVENTS
            and (self.blobs or _MEDIA_MARK in line)
        ):
            event = self.inflate(event, where)
        return event

    def inflate(self, event: Event, where: _Where) -> Event:
        """``event`` (as a format-3 line holds it: its blocks refer to blobs, or
        leaves out a message rebuilt from such blocks) with its blobs' bytes."""
        return _swap_media(event, lambda block: self._inflate(block, where))  # type: ignore[no-any-return]

    def _read_plain(self, line: bytes, body_end: int) -> Event | None:
        """Read the common line at C speed, a line nested no deeper than msgspec
        decodes, of an event that leaves nothing out (no ``"="``) and holds no
        tagged value; ``None`` for any other line, or one that is not what the
        writer writes (:meth:`_read_event` then says why).

        The canonical check encodes the decoded event and compares the bytes. A
        line with non-ASCII text is decoded a second time for that: encoding a
        ``str`` leaves a UTF-8 copy of it inside the object, which the events kept
        must not carry (it would double the memory their text takes)."""
        try:
            event = _decode_event(line)
        except msgspec.MsgspecError:
            return None
        cls = event.__class__
        if cls not in _PLAIN_EVENTS:
            return None
        if cls is PlanDraftEvent and (_TAG_MARK in line or _LONG_NUMBER in line.translate(_ZEROS)):
            # A tag (which decode_event reads), or a number that may be an int
            # encode_event tags: let encode_event decide.
            return None
        encoded = _encode(event if line.isascii() else _decode_event(line))
        if len(encoded) - 1 != body_end or not line.startswith(encoded[:-1]):
            return None
        if cls is ModelChunkEvent:
            self._share(event)  # type: ignore[arg-type]
        elif cls is ToolCallEvent:
            self.call = event.call  # type: ignore[union-attr]
        elif cls is PlanDraftEvent:
            reply = event.reply  # type: ignore[union-attr]
            self.draft = reply if reply.__class__ is ModelResponse else None
        return event

    def _read_stored(self, line: bytes, body_end: int) -> Event | None:
        """Read a line that leaves its message out (``"=":"message"``) at C speed,
        as :meth:`_read_plain` reads the others."""
        end = line.find(b'"', 9)
        known = _STORED_TYPES.get(line[9:end]) if line.startswith(b'{"type":"') else None
        if known is None:
            return None
        cls, decode, build = known
        try:
            fields = decode(line)
        except msgspec.MsgspecError:
            return None
        message = self._message(cls, fields)
        if message is None:
            return None
        encoded = _encode(fields if line.isascii() else decode(line))
        if len(encoded) - 1 + len(_DERIVED["message"]) != body_end or not line.startswith(
            encoded[:-1]
        ):
            return None
        event = build(fields, message)
        if cls is PlanCommitEvent:
            self.committed = message  # type: ignore[assignment]
        return event

    def _read_blob(self, line: bytes, body_end: int, where: _Where) -> None:
        """Check a blob line (``line[:body_end]``: up to its link) and keep its bytes."""
        try:
            blob = _blob_decoder.decode(line)
        except msgspec.MsgspecError as exc:
            raise where.error(f"not a valid blob line ({exc}){where.written_by()}") from None
        digest, data, size = blob.blob, blob.data, blob.size
        head = _encode(_BlobHead(digest, blob.media_type, size))[:-1] + b',"data":"'
        tail = size % 3 or (3 if size else 0)  # the last base64 quantum
        if (
            size != len(data)
            or body_end != len(head) + 4 * ((size + 2) // 3) + 1
            or not line.startswith(head)
            or line[body_end - 1] != 0x22
            or (tail and line[body_end - 5 : body_end - 1] != base64.b64encode(data[-tail:]))
        ):
            problem = (
                f"the blob's size is {size}, its data {len(data)} bytes"
                if size != len(data)
                else "not in canonical form (a blob line is "
                '{"blob":"<sha-256>","media_type":...,"size":<bytes>,"data":"<base64>","#":...})'
            )
            raise where.error(f"blob {digest[:80]!r}: {problem}{where.written_by()}")
        actual = hashlib.sha256(data).hexdigest()
        if actual != digest:
            raise LogIntegrityError(
                where.text(
                    f"blob {digest[:80]!r} is damaged: its bytes hash to {actual} (SHA-256)"
                ),
                path=where.path,
                line=where.number,
            )
        if digest in self.blobs:
            raise where.error(f"blob {digest} again (a log holds each blob once)")
        self.blobs[digest] = data

    def read_blob_from(self, file: IO[bytes], first: bytes, limit: int) -> bool:
        """Read a blob line from ``file`` without holding it whole: ``first`` is its
        first ``readline`` piece (the file is just past it); the base64 is read,
        hashed into the chain, checked and decoded a piece at a time, into one
        ``bytes`` of the blob's size (made once, never copied). ``False``, with the
        file back where it was, for a line that is not a right, complete blob line
        of a format-3 log: :meth:`read` then reads it whole and says what is wrong."""
        resume = file.tell()
        try:
            if self._read_blob_from(file, first, resume, limit):
                return True
        except (msgspec.MsgspecError, ValueError):  # (binascii.Error is a ValueError)
            pass
        file.seek(resume)
        return False

    def _read_blob_from(self, file: IO[bytes], first: bytes, resume: int, limit: int) -> bool:
        key = first.find(_DATA_KEY)
        if key < 0:
            return False
        head = first[: key + len(_DATA_KEY)]
        info = _blob_head_decoder.decode(first[:key] + b"}")
        digest, size = info.blob, info.size
        left = 4 * ((size + 2) // 3)
        if (
            size <= 0  # (a line this long holds bytes, or a long media type: read whole)
            or len(head) + left + _LINK_TAIL + 2 > limit
            or _blob_head(digest, info.media_type, size) != head
            or digest in self.blobs
        ):
            return False
        file.seek(resume - len(first) + len(head))
        chain = _SHA256.copy()
        chain.update(self.link)
        chain.update(head)
        blob = hashlib.sha256()
        out = io.BytesIO()
        out.seek(size - 1)  # (the one bytes object, its final size: getvalue() keeps it)
        out.write(b"\0")
        out.seek(0)
        while left:
            text = file.read(min(left, _BLOB_TEXT))
            data = binascii.a2b_base64(text)
            if (
                len(text) != min(left, _BLOB_TEXT)
                or binascii.b2a_base64(data, newline=False) != text
            ):
                return False  # (the file ends, or not canonical base64)
            chain.update(text)
            blob.update(data)
            out.write(data)
            left -= len(text)
        rest = file.readline(_LINK_TAIL + 3)
        end = len(rest) - (2 if rest.endswith(b"\r\n") else 1)
        link = rest[7:23]
        chain.update(b'"')
        if (
            out.tell() != size
            or end != _LINK_TAIL + 1
            or not rest.endswith(b"\n")
            or rest[:7] != b'"' + _LINK_KEY
            or rest[23:end] != b'"}'
            or chain.digest()[:8].hex().encode() != link
            or blob.hexdigest() != digest
        ):
            return False
        self.link = link
        self.blobs[digest] = out.getvalue()
        return True

    def _inflate(self, block: Any, where: _Where) -> Any:
        """``block`` (as a format-3 line holds it) with its blob's bytes."""
        ref = block.data
        if len(ref) != 48:
            raise where.error(
                f"{_article(block.__struct_config__.tag)} block holds {len(ref)} bytes inline; a "
                "format-3 event "
                "line refers to a blob by its SHA-256 (64 hex digits)"
            )
        digest = base64.b64encode(ref).decode()
        data = self.blobs.get(digest)
        if data is None:
            raise where.error(
                f"refers to blob {digest}, which the log does not hold (a blob line comes "
                "before the first event line that refers to it)"
            )
        return msgspec.structs.replace(block, data=data)

    def _read_event(self, line: bytes, end: int, body_end: int, where: _Where) -> Event:
        """Check and decode an event line, its link checked (as the line has it)."""
        event: Event
        body: bytes | None = None  # what the writer writes for the event, once known
        if line[body_end - 1] != 0x22:  # does not end with a string: no "=" member
            try:
                event = decode_event(line) if end <= _SAFE_LENGTH else _decode(line, where)
            except msgspec.MsgspecError:
                event = _decode(line, where)  # raises, worded
            cls = event.__class__
            if cls not in _WHOLE:
                encoded = encode_event(event)
                if len(encoded) - 1 != body_end or not line.startswith(encoded[:-1]):
                    raise where.not_canonical(
                        line[:body_end] + b"}", encoded, "this agentloop writes", event
                    )
                if cls is ModelChunkEvent:
                    self._share(event)  # type: ignore[arg-type]
                elif cls is ToolCallEvent:
                    self.call = event.call  # type: ignore[union-attr]
                elif cls is PlanDraftEvent:
                    reply = event.reply  # type: ignore[union-attr]
                    self.draft = reply if reply.__class__ is ModelResponse else None
                return event
        else:
            event, body = self._read_derived(line, body_end, where)
        if body is None:
            body = self.body(event)
        if len(body) != body_end or not line.startswith(body):
            raise where.not_canonical(
                line[:body_end] + b"}", body + b"}", "this agentloop writes", event
            )
        self.advance(event)
        return event

    def _read_derived(
        self, line: bytes, body_end: int, where: _Where
    ) -> tuple[Event, bytes | None]:
        """Decode a line that may leave a field out (``"="``), rebuilding the field.

        Returns the event and, for a line that leaves its message out, the body the
        writer writes for it (the line's own fields, encoded: the message it leaves
        out is the one rebuilt, by construction), else ``None`` (ask :meth:`body`).
        """
        derived: str | None = None
        for name, marker in _DERIVED.items():
            if line.endswith(marker, 0, body_end):
                derived = name
        if derived == "message":
            for prefix, (cls, stored) in _STORED_DECODERS.items():
                if line.startswith(prefix):
                    fields = _decode(line, where, stored)
                    message = self._message(cls, fields)
                    if message is None:
                        what = "plan.draft response" if cls is PlanCommitEvent else "tool.call"
                        raise where.error(f"its message refers to a {what} the log does not have")
                    event: Event = cls(**msgspec.structs.asdict(fields), message=message)
                    return event, _encode_any(fields)[:-1] + _DERIVED["message"]
        event = _decode(line, where)
        if derived == "final_text" and event.__class__ is RunFinishedEvent:
            final_text = self._final_text()
            if final_text is None:
                raise where.error("its final_text refers to a plan.commit the log does not have")
            if event.final_text is None:
                event = msgspec.structs.replace(event, final_text=final_text)
        return event, None

    def _share(self, event: ModelChunkEvent) -> None:
        """Let a streamed chunk hold its step's request id and its event's time as
        the objects the log already holds, not copies (the values are the same): a
        long stream of small chunks then takes much less memory."""
        chunk = event.chunk
        request_id, at = chunk.request_id, chunk.at
        if request_id == self.request_id:
            msgspec.structs.force_setattr(chunk, "request_id", self.request_id)
        else:
            self.request_id = request_id
        if at is not None and at == event.at and at != 0.0:  # (not 0.0: it may be -0.0)
            msgspec.structs.force_setattr(chunk, "at", event.at)

    def check_link(self, line: bytes, end: int, where: _Where) -> int:
        """Check the link member of ``line[:end]``; returns where the body ends."""
        body_end = end - _LINK_TAIL
        if body_end < 1 or line[end - 2 : end] != b'"}' or line[body_end : end - 18] != _LINK_KEY:
            raise LogIntegrityError(
                where.text(
                    'has no hash chain link (a format-2 line ends with \',"#":"<16 hex digits>"}\')'
                ),
                path=where.path,
                line=where.number,
            )
        link = line[end - 18 : end - 2]
        if link != _link(self.link, memoryview(line)[:body_end]):
            raise LogIntegrityError(
                where.text(
                    "the hash chain is broken here: this line was edited, or lines were "
                    "removed, inserted or reordered before it, or it comes from another log"
                ),
                path=where.path,
                line=where.number,
            )
        self.link = link
        return body_end


# --------------------------------------------------------------------------- format 1

# Format 1 wrote every field, in this order, of these Structs (and no others): frozen
# with format 1. Never edit this table; a field added since reads as its default.
_V1_FIELDS: Final[dict[type[Any], tuple[str, ...]]] = {
    SessionStartEvent: (
        "sequence",
        "at",
        "step",
        "system",
        "tools",
        "max_steps",
        "budget",
        "request_sequence_start",
    ),
    MessageAcceptedEvent: ("sequence", "at", "step", "message"),
    StepStartEvent: ("sequence", "at", "step", "request_id"),
    ModelChunkEvent: ("sequence", "at", "step", "chunk"),
    PlanDraftEvent: ("sequence", "at", "step", "reply"),
    PlanCommitEvent: ("sequence", "at", "step", "message"),
    ToolCallEvent: ("sequence", "at", "step", "call"),
    ToolResultEvent: ("sequence", "at", "step", "message", "reply"),
    ToolErrorEvent: ("sequence", "at", "step", "message", "reply"),
    StepEndEvent: ("sequence", "at", "step"),
    BudgetWarnEvent: ("sequence", "at", "step", "limit", "usage", "budget"),
    SessionPauseEvent: ("sequence", "at", "step", "reason", "payload"),
    SessionResumeEvent: ("sequence", "at", "step", "reply"),
    SessionCompleteEvent: ("sequence", "at", "step", "status", "reason"),
    RunFinishedEvent: (
        "sequence",
        "at",
        "step",
        "status",
        "final_text",
        "steps",
        "max_steps",
        "error",
        "usage",
        "reason",
        "reply",
    ),
    ToolSpec: ("name", "description", "parameters", "requires_approval"),
    Budget: ("max_turns", "max_tool_calls", "max_wall_seconds"),
    BudgetUsage: ("turns", "tool_calls", "wall_seconds"),
    Usage: ("input_tokens", "output_tokens"),
    RunError: ("code", "message"),
    UserMessage: ("id", "content"),
    AssistantMessage: ("id", "content"),
    ToolResultMessage: ("id", "tool_call_id", "tool_name", "content", "is_error"),
    TextBlock: ("text",),
    ThinkingBlock: ("text", "signature"),
    ToolCall: ("id", "name", "arguments"),
    ModelChunk: ("request_id", "block", "at"),
    ModelResponse: ("request_id", "id", "content", "stop_reason", "usage", "at"),
    ModelFailure: ("request_id", "message", "code", "at"),
    ToolResult: ("call_id", "content", "is_error", "at"),
    Resume: ("payload", "budget", "at"),
    Cancel: ("reason", "at"),
    UnrecognizedReply: ("description", "at"),
}
# Format 1 wrote values JSON cannot hold as tags in these two event types only.
_V1_TAGGED: Final = (PlanDraftEvent, RunFinishedEvent)
_V1_TAGS: Final = frozenset(("$float", "$int", "$dict"))
_INT_MIN: Final = -(2**63)
_INT_END: Final = 2**64


class _NotV1(Exception):
    """A value format 1 could not hold (a Struct it did not have)."""


Fields = Callable[[type[Any]], "tuple[str, ...] | None"]


def _builtins(value: Any, fields: Fields) -> dict[str, Any]:
    """A Struct with these fields written, defaults too: its tag, then ``fields(its
    class)`` (``None``: a Struct that may not be there, :class:`_NotV1`).

    Recursive over Structs only (their nesting is fixed by the schema: an event, a
    reply, a message, a block); the values inside are passed on as they are.
    """
    cls = value.__class__
    names = fields(cls)
    if names is None:
        raise _NotV1(cls.__name__)
    config = cls.__struct_config__
    out: dict[str, Any] = {} if config.tag_field is None else {config.tag_field: config.tag}
    for name in names:
        field = getattr(value, name)
        if isinstance(field, msgspec.Struct):
            field = _builtins(field, fields)
        elif field.__class__ is tuple:
            field = [_builtins(x, fields) if isinstance(x, msgspec.Struct) else x for x in field]
        out[name] = field
    return out


def _v1_tag(root: Any) -> Any:
    """Format 1's tags for the values JSON cannot hold, without recursion."""
    result: list[Any] = [None]
    stack: list[tuple[Any, Any, Any]] = [(result, 0, root)]
    pop, push = stack.pop, stack.append
    while stack:
        target, key, value = pop()
        cls = value.__class__
        if cls is dict:
            out: dict[str, Any] = {}
            escaped = len(value) == 1 and next(iter(value)) in _V1_TAGS
            target[key] = {"$dict": out} if escaped else out
            for name, item in value.items():
                out[name] = None  # keeps the order
                push((out, name, item))
        elif cls is list:
            items: list[Any] = [None] * len(value)
            target[key] = items
            for index, item in enumerate(value):
                push((items, index, item))
        elif cls is float and not math.isfinite(value):
            target[key] = {
                "$float": "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
            }
        elif cls is int and not _INT_MIN <= value < _INT_END:
            target[key] = {"$int": str(value)}
        else:
            target[key] = value
    return result[0]


def _whole_line(event: Event, fields: Fields) -> bytes:
    """``event`` as JSON with these fields (see :func:`_builtins`) written, defaults
    too, and values JSON cannot hold tagged as format 1 (and ``encode_event``) tag
    them."""
    builtins = _builtins(event, fields)
    if event.__class__ in _V1_TAGGED:
        return _encode_any(_v1_tag(builtins))
    return _encode_any(builtins)


def _v1_line(event: Event) -> bytes:
    """``event`` as format 1 wrote it (no line end)."""
    return _whole_line(event, _V1_FIELDS.get)


def _read_v1(line: bytes, end: int, where: _Where) -> Event:
    event: Event = _decode(line, where)
    try:
        canonical = _v1_line(event)
    except _NotV1 as exc:
        raise where.error(f"{exc} is not part of log format 1") from None
    if len(canonical) != end or not line.startswith(canonical):
        raise where.not_canonical(line[:end], canonical, "format 1 writes", event)
    return event


# --------------------------------------------------------------------------- reading


class _Where:
    """Where a reader is (file, line, who wrote the file), to word its errors."""

    __slots__ = ("library", "number", "path")

    def __init__(self, path: str) -> None:
        self.path = path
        self.number = 1
        self.library = ""

    def text(self, problem: str) -> str:
        return f"{self.path}: line {self.number}: {problem}"

    def error(self, problem: str) -> LogFormatError:
        return LogFormatError(self.text(problem), path=self.path, line=self.number)

    def written_by(self) -> str:
        """A hint when another agentloop wrote the file (it may know more fields)."""
        library = self.library
        if not library or library == __version__:
            return ""
        return (
            f"; the log was written by agentloop {library}, this is agentloop "
            f"{__version__}: a newer agentloop may write fields or events this one "
            "does not know"
        )

    def not_canonical(
        self, line: bytes, canonical: bytes, writer: str, event: Any
    ) -> LogFormatError:
        """``line`` (a JSON text, decoded to ``event``) is not ``canonical``: name
        an unknown field, or show where the two differ."""
        unknown = _unknown_field(line, event)
        if unknown is not None:
            problem = f"unknown field {unknown!r}"
        else:
            problem = (
                f"not in canonical form ({_first_difference(line, canonical, writer)}; a log "
                "line is byte for byte what the writer writes for its event: no unknown or "
                "repeated fields, no extra spaces)"
            )
        return self.error(problem + self.written_by())


def _decode(line: bytes, where: _Where, into: Any = None) -> Any:
    """The event (or the ``into`` Struct) ``line`` holds, its errors as
    :class:`LogFormatError` naming the line. At any depth: a line nested deeper
    than ``_MAX_DEPTH`` is decoded without recursion."""
    try:
        # (Nesting deeper than _MAX_DEPTH takes more than twice as many bytes.)
        if (
            len(line) > 2 * _MAX_DEPTH
            and line.count(b"[") + line.count(b"{") > _MAX_DEPTH
            and _depth(line) > _MAX_DEPTH
        ):
            return decode_deep(line) if into is None else decode_deep(line, into)
        if into is None:
            return decode_event(line)
        return _stored_decoders[into].decode(line)
    except msgspec.MsgspecError as exc:
        raise where.error(f"not a valid agentloop event ({exc}){where.written_by()}") from None


_JSON_STRING: Final = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_NOT_BRACKETS: Final = bytes(b for b in range(256) if b not in b"[]{}")
# Opening brackets become +1, closing ones -1 (as signed bytes).
_SIGNS: Final = bytes.maketrans(b"[{]}", b"\x01\x01\xff\xff")


def _depth(line: bytes) -> int:
    """How deep the objects and arrays of ``line`` nest: the highest running sum of
    its brackets outside strings, all at C speed (no recursion, no loop per byte)."""
    brackets = _JSON_STRING.sub(b"", line).translate(None, _NOT_BRACKETS)
    return max(itertools.accumulate(array.array("b", brackets.translate(_SIGNS))), default=0)


def _unknown_field(line: bytes, event: Any) -> str | None:
    """The first key of ``line`` (a dotted path) that names no field of the Struct
    it decoded to (plain data, like tool arguments, may hold any key)."""
    try:
        data = msgspec.json.decode(line)
    except RecursionError:
        data = deep_parse(line)
    stack: list[tuple[str, Any, Any]] = [("", data, event)]
    while stack:
        path, data, value = stack.pop()
        if isinstance(value, msgspec.Struct) and data.__class__ is dict:
            cls = value.__class__
            known = {*cls.__struct_fields__, cls.__struct_config__.tag_field}
            if not path:
                known.add("=")
            pending = []
            for key, item in data.items():
                where = f"{path}.{key}" if path else key
                if key not in known:
                    return where
                if key in cls.__struct_fields__:
                    pending.append((where, item, getattr(value, key)))
            stack.extend(reversed(pending))
        elif value.__class__ is tuple and data.__class__ is list and len(value) == len(data):
            stack.extend((f"{path}[{i}]", data[i], value[i]) for i in reversed(range(len(data))))
    return None


def _first_difference(line: bytes, canonical: bytes, writer: str) -> str:
    at = next(
        (i for i, (x, y) in enumerate(zip(line, canonical, strict=False)) if x != y),
        min(len(line), len(canonical)),
    )
    start = max(0, at - 20)

    def excerpt(data: bytes) -> str:
        text = data[start : at + 20].decode("utf-8", "replace")
        return repr(("…" if start else "") + text + ("…" if at + 20 < len(data) else ""))

    return f"at column {at + 1}: {excerpt(line)} where {writer} {excerpt(canonical)}"


_CONTROL: Final = re.compile(rb"[\x00-\x09\x0b\x0c\x0e-\x1f]")


def _next_line(file: IO[bytes], line: bytes, where: _Where, limit: int) -> tuple[bytes, int, bool]:
    """The rest of the line ``line`` starts (one ``readline`` of the file): its
    bytes (line end included), where its content ends, and whether it is complete
    (ends with ``\\n``). ``b""`` at the end of the file.

    Reads at most about ``limit`` bytes for one line, and stops after the first
    megabyte of a line that holds bytes no log line holds (so ``/dev/zero`` after a
    header is refused at once, in bounded memory).
    """
    step = min(limit, _CHUNK) + 1
    if len(line) == step and not line.endswith(b"\n"):
        # A long line (a blob, a big tool result): found chunk by chunk, then, from
        # a file that can seek, read again in one piece, so that its bytes are in
        # memory once (not as chunks and their join).
        seekable = file.seekable()
        start = file.tell() - step if seekable else 0
        parts = [line]
        last = line
        size = step
        while size <= limit:
            if _CONTROL.search(last) is not None:
                raise where.error(
                    "holds control bytes that no log line holds (is this an agentloop log?)"
                )
            last = file.readline(step)
            if not last:
                break
            if not seekable:
                parts.append(last)
            size += len(last)
            if last.endswith(b"\n"):
                break
        if size > limit:
            raise where.error(f"longer than {limit:,} bytes (max_line_bytes); not read further")
        if seekable:
            del parts, last
            file.seek(start)
            line = file.read(size)
        else:
            line = b"".join(parts)
    elif len(line) > limit:
        raise where.error(f"longer than {limit:,} bytes (max_line_bytes); not read further")
    if line.endswith(b"\n"):
        return line, len(line) - (2 if line.endswith(b"\r\n") else 1), True
    return line, len(line) - (1 if line.endswith(b"\r") else 0), False


class _Scan:
    """What reading a log found besides its events."""

    __slots__ = ("count", "format2", "library", "start", "version")

    def __init__(self) -> None:
        self.version = 0
        self.library = ""
        self.start = b""  # the header's link (format 2)
        self.format2: _Format2 | None = None
        self.count = 0


class _Torn(Exception):
    def __init__(self, message: str, line: int) -> None:
        super().__init__(message)
        self.line = line


def _read_header(file: IO[bytes], where: _Where, scan: _Scan) -> None:
    path = where.path
    line = file.readline(_MAX_HEADER_BYTES + 1)
    if not line:
        raise LogFormatError(f"{path}: empty file, not an agentloop log", path=path, line=1)
    if not line.endswith(b"\n") and len(line) <= _MAX_HEADER_BYTES:
        raise LogFormatError(
            f"{path}: the header line is incomplete (torn or not an agentloop log)",
            path=path,
            line=1,
        )
    header: Any = None
    if line.endswith(b"\n"):
        with contextlib.suppress(msgspec.DecodeError, RecursionError):
            header = _header_decoder.decode(line)
    if header is None or header.get("format") != LOG_FORMAT:
        raise LogFormatError(
            f"{path}: not an agentloop log (line 1 is not an "
            f'{{"format": "{LOG_FORMAT}", ...}} header)',
            path=path,
            line=1,
        )
    version = header.get("version")
    if type(version) is not int or version < 1:
        raise LogVersionError(
            f"{path}: invalid log format version {version!r} in the header",
            path=path,
            version=version,
        )
    library = header.get("library")
    scan.library = where.library = library if isinstance(library, str) else ""
    if version > LOG_FORMAT_VERSION:
        by = f" (written by agentloop {library})" if scan.library else ""
        raise LogVersionError(
            f"{path}: log format version {version}{by} is newer than this agentloop "
            f"({__version__}) reads (up to {LOG_FORMAT_VERSION}); upgrade agentloop",
            path=path,
            version=version,
        )
    scan.version = version
    if version >= 2:
        format2 = _Format2(version=version)
        end = len(line) - (2 if line.endswith(b"\r\n") else 1)
        format2.check_link(line, end, where)
        scan.start = format2.link
        scan.format2 = format2


def _events(file: IO[bytes], path: str, scan: _Scan, limit: int) -> Iterator[Event]:
    """Check and yield the events of an open log file, one line at a time.

    Raises ``_Torn`` for a torn last line (after every intact event), and the
    :class:`LogError` subclasses for everything else.
    """
    where = _Where(path)
    _read_header(file, where, scan)
    format2 = scan.format2
    if format2 is not None:
        yield from _events2(file, where, scan, limit, format2)
        return
    readline = file.readline
    step = min(limit, _CHUNK) + 1
    number = 1
    while True:
        number += 1
        where.number = number
        line = readline(step)
        if line.endswith(b"\n") and len(line) <= limit and not line.endswith(b"\r\n"):
            end = len(line) - 1  # the common case, without a call
        else:
            line, end, complete = _next_line(file, line, where, limit)
            if not line:
                return
            if not complete:
                _torn(line, end, where, format2)
        if end == 0:
            raise where.error("an empty line (a log has none; was the file edited?)")
        if line.startswith(_HEADER_START):
            raise where.error(
                "a second log header: the file holds two logs (one file records one "
                "session; were two files joined?)"
            )
        event = _read_v1(line, end, where)
        if event.__class__ is SessionStartEvent and scan.count:
            raise where.error(
                "a second session.start: the file holds two sessions (one file records one session)"
            )
        scan.count += 1
        yield event


def _events2(
    file: IO[bytes], where: _Where, scan: _Scan, limit: int, format2: _Format2
) -> Iterator[Event]:
    """:func:`_events` of a format-2 or format-3 log.

    The common line (an event line ending with ``\\n``, nested no deeper than
    msgspec decodes, whose link is right) is checked here and read by
    :meth:`_Format2._read_plain` or :meth:`_Format2._read_stored`, at C speed; any
    other line, or one they do not accept, by :meth:`_Format2.read`, which says
    what is wrong with it."""
    readline = file.readline
    step = min(limit, _CHUNK) + 1
    number = 1
    sha256 = hashlib.sha256
    read_plain, read_stored, read = format2._read_plain, format2._read_stored, format2.read
    media = _MEDIA_EVENTS if format2.version >= 3 else frozenset()
    message, final_text = _DERIVED["message"], _DERIVED["final_text"]
    stored_from, text_from = -len(message) - 25, -len(final_text) - 25
    # (Slices and ==, not startswith/endswith with bounds: those parse their
    # arguments, which costs more than the slice.)
    while True:
        number += 1
        line = readline(step)
        size = len(line)
        tail = line[-25:]  # ,"#":"<16 hex>"}\n
        if (
            tail[:6] == _LINK_KEY
            and tail[22:] == b'"}\n'
            and line[:9] == _EVENT_START
            and size <= limit
            and (size <= _SAFE_LENGTH or line.count(b"[") + line.count(b"{") <= _MAX_DEPTH)
        ):
            link = tail[6:22]
            if size <= _SAFE_LENGTH:
                digest = sha256(format2.link + line[:-25])
            else:  # (not copied)
                digest = sha256(format2.link)
                digest.update(memoryview(line)[:-25])
            if digest.digest()[:8].hex().encode() == link:
                if line[stored_from:-25] == message:
                    event = read_stored(line, size - 25)
                elif line[text_from:-25] == final_text:
                    event = None
                else:
                    event = read_plain(line, size - 25)
                if event is not None:
                    format2.link = link
                    cls = event.__class__
                    if cls in media and (format2.blobs or _MEDIA_MARK in line):
                        where.number = number
                        event = format2.inflate(event, where)
                    elif cls is SessionStartEvent and scan.count:
                        where.number = number
                        raise where.error(
                            "a second session.start: the file holds two sessions (one file "
                            "records one session)"
                        )
                    scan.count += 1
                    yield event
                    continue
        where.number = number
        if line.endswith(b"\n") and size <= limit and not line.endswith(b"\r\n"):
            end = size - 1
        else:
            if (
                size == step
                and line[:9] == _BLOB_START
                and format2.version >= 3
                and file.seekable()
                and format2.read_blob_from(file, line, limit)
            ):
                continue  # a long blob line, read a piece at a time
            line, end, complete = _next_line(file, line, where, limit)
            if not line:
                return
            if not complete:
                _torn(line, end, where, format2)
        if end == 0:
            raise where.error("an empty line (a log has none; was the file edited?)")
        if line.startswith(_HEADER_START):
            raise where.error(
                "a second log header: the file holds two logs (one file records one "
                "session; were two files joined?)"
            )
        event = read(line, end, where)
        if event is None:  # a blob line
            continue
        if event.__class__ is SessionStartEvent and scan.count:
            raise where.error(
                "a second session.start: the file holds two sessions (one file records one session)"
            )
        scan.count += 1
        yield event


def _torn(line: bytes, end: int, where: _Where, format2: _Format2 | None) -> None:
    """Raise ``_Torn`` for the last line, which has no ``\\n``."""
    try:
        if format2 is not None:
            format2.copy().read(line, end, where)
        else:
            _read_v1(line, end, where)
    except LogFormatError:
        problem = "is torn (incomplete last line; the writer was interrupted)"
    else:
        # A complete event whose newline is missing: the writer finished the event
        # but not the line. Still torn: a reader never guesses.
        problem = "has no final newline (the writer was interrupted)"
    raise _Torn(f"{where.path}: line {where.number} {problem}", where.number)


def _open_and_scan(name: str, scan: _Scan, limit: int) -> Iterator[Event]:
    with open(name, "rb") as file:
        yield from _events(file, name, scan, limit)


def read_log(path: StrPath, *, max_line_bytes: int = MAX_LINE_BYTES) -> list[Event]:
    """Read every event of a log file (format 1 or 2), checking every line.

    The file is read one line at a time: peak memory is about the events plus one
    line, and no line longer than ``max_line_bytes`` is read.

    Returns:
        The events in file order (not checked for gaps or order; see
        :func:`replay.replay`).

    Raises:
        OSError: the file cannot be read (e.g. ``FileNotFoundError``).
        TornLogError: the last line is incomplete (``.events`` is the intact prefix).
        LogVersionError: the header names a format version newer than
            :data:`LOG_FORMAT_VERSION` (or an invalid one).
        LogIntegrityError: the hash chain is broken (format 2): a line was edited,
            removed, inserted, reordered or appended; ``.line`` is the first one.
        LogFormatError: anything else wrong with the file (no header, an empty
            line, a line that is not JSON, not a known event, not in canonical
            form, too long or too deep, or a second session).
    """
    name = os.fspath(path)
    events: list[Event] = []
    append = events.append
    try:
        with open(name, "rb") as file:
            for event in _events(file, name, _Scan(), max_line_bytes):
                append(event)
    except _Torn as torn:
        raise TornLogError(
            f"{torn}; the {len(events)} events before it are intact (TornLogError.events)",
            path=name,
            line=torn.line,
            events=events,
        ) from None
    return events


# --------------------------------------------------------------------------- writing


def _fsync_directory(directory: str) -> None:
    """Make a rename or a new file in ``directory`` durable (POSIX; best effort)."""
    if not _POSIX:
        return  # Windows cannot open a directory; NTFS journals the metadata
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return  # e.g. a directory we may write but not read
    try:
        os.fsync(fd)
    except OSError:
        pass  # some file systems do not sync directories
    finally:
        os.close(fd)


def _header_line(format2: _Format2) -> bytes:
    body = _header_body()
    format2.link = _link(b"", body)
    return body + _LINK_KEY + format2.link + b'"}\n'


def _lines(events: Iterable[Event]) -> Iterator[bytes]:
    """The lines of a new format-2 log holding ``events``."""
    format2 = _Format2()
    yield _header_line(format2)
    for index, event in enumerate(events):
        if index and event.__class__ is SessionStartEvent:
            raise ValueError(
                f"events[{index}] is a second session.start (one log file records one session)"
            )
        yield from _pieces(format2.parts(event))


def write_log(path: StrPath, events: Iterable[Event]) -> None:
    """Write a whole log file (header + events, format 2), replacing ``path``
    atomically.

    The file is written next to ``path`` under a temporary name, flushed, fsynced
    and renamed over ``path``, so readers see the old file or the new one, never a
    mix; on POSIX the directory is fsynced too, so the rename survives a power
    loss. A replaced file keeps its permission bits; a new one gets those a
    plain ``open(path, "w")`` gives (``0o666`` less the umask). Use
    :class:`LogWriter` to record a run as it happens.

    Raises:
        ValueError: ``events`` hold a second ``session.start`` (one file, one
            session); ``path`` is left as it was.
    """
    _write_lines(path, _lines(events))


def _write_lines(path: StrPath, lines: Iterable[bytes]) -> None:
    """Write ``lines`` (a whole log, line ends included) to ``path`` atomically, as
    :func:`write_log` describes."""
    name = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(name))
    try:
        mode: int | None = stat.S_IMODE(os.stat(name).st_mode)
    except FileNotFoundError:
        mode = None
    # Created by hand rather than with mkstemp (always 0o600): os.open applies the
    # umask to 0o666 the way open() does.
    tmp = os.path.join(directory, f".agentloop-log-{secrets.token_hex(8)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o666)
    try:
        with os.fdopen(fd, "wb") as file:
            if mode is not None:
                os.chmod(tmp, mode)
            file.writelines(lines)
            file.flush()
            os.fsync(file.fileno())
        os.replace(tmp, name)
    except BaseException:
        os.unlink(tmp)
        raise
    _fsync_directory(directory)


#: The events after which ``LogWriter(fsync=True)`` syncs: the last event before
#: the loop asks for an effect (a model call, a tool call, a pause's answer), and
#: the run's end.
_SYNC_AFTER: Final = frozenset({"step.start", "tool.call", "session.pause", "run.finished"})


class LogWriter:
    """Append events to a log file as they happen: one line per event (and a blob
    line for media bytes the file does not hold yet), written at each side-effect
    boundary.

    The lines of the events since the last boundary are kept in memory and written
    together (one ``write``) after the event that precedes an effect
    (``step.start`` before a model call, ``tool.call`` before a tool call,
    ``session.pause``) and after ``run.finished``, and by :meth:`flush`,
    :meth:`sync` and :meth:`close`. So an effect's events are in the file before it
    runs, and a process killed at any point leaves a valid log ending at a
    boundary (or a torn last line, if it died inside that one ``write``).

    Args:
        path: the log file. A missing or empty file gets the header first; an
            existing log is read (checked like :func:`read_log`, one line at a time)
            and appended to, which is how a resumed session continues the same
            file. A torn existing log raises :class:`TornLogError`: repair it
            explicitly first. A format-1 log is not appended to (``ValueError``):
            rewrite it as format 2 first with ``write_log(path, read_log(path))``.
        overwrite: start the file over instead: whatever ``path`` holds (a log of
            another run, a torn one, any file) is truncated, and the header written
            first. Default ``False``: an existing log is appended to, never lost.
        fsync: also ``os.fsync`` the file at each *side-effect boundary*, the
            store's write-ahead rule (durable against power loss too): after the
            event that precedes an effect (``step.start`` before a model call,
            ``tool.call`` before a tool call, ``session.pause``) and after
            ``run.finished``, so an effect's events are on disk before it runs and
            a reply's before the next effect; the chunks of a stream are not synced
            one by one. :meth:`sync` syncs at any other point, and :meth:`close`
            syncs what is left. Without it, what is written at a boundary survives
            a killed process (not a power loss).

    Use it as a context manager, and let it :meth:`follow` the loop's log::

        with LogWriter("session.jsonl") as writer:
            loop = agent_loop(messages, tools=tools)
            writer.follow(loop.log)
            ...

    Events must arrive in sequence order, continuing the file (``write`` raises
    ``ValueError`` otherwise: one file records one run). :meth:`follow` checks that
    the log it follows *is* the run the file records (its first events are the
    file's), writes the events the file does not have yet, then subscribes;
    :meth:`close` (the end of the ``with`` block) unsubscribes again, so a loop
    that outlives the writer (or that the garbage collector closes later) keeps its
    further events in ``loop.log`` instead of failing on a closed file. ``write``
    can also be subscribed by hand (``loop.log.subscribe(writer.write)``); then
    unsubscribe it by hand before the writer closes.
    """

    def __init__(self, path: StrPath, *, fsync: bool = False, overwrite: bool = False) -> None:
        if type(overwrite) is not bool:
            raise TypeError(f"overwrite must be a bool, got {overwrite!r:.100}")
        name = os.fspath(path)
        self.path = name
        self._fsync = fsync
        self._subscriptions: list[Callable[[], None]] = []
        created = not os.path.exists(name)
        fresh = created or overwrite or os.path.getsize(name) == 0
        self._format2 = _Format2()
        self._next = 0
        if not fresh:
            scan = _Scan()
            try:
                for _ in _open_and_scan(name, scan, MAX_LINE_BYTES):
                    pass
            except _Torn:
                read_log(name)  # raises the TornLogError, with the intact events
                raise LogFormatError(  # the file was completed in between: no guessing
                    f"{name}: the log changed while LogWriter was opening it",
                    path=name,
                ) from None
            if scan.format2 is None:
                raise ValueError(
                    f"{name}: a format-{scan.version} log; LogWriter appends to format "
                    f"2 and {LOG_FORMAT_VERSION} logs only. Rewrite it first (same events, "
                    "atomic, now format 3): "
                    "replay.write_log(path, replay.read_log(path))"
                )
            self._format2 = scan.format2
            self._next = scan.count
        mode = "wb" if overwrite else "ab"
        self._file: IO[bytes] | None = open(name, mode, buffering=0)  # noqa: SIM115
        self._unsynced = False
        # The lines since the last side-effect boundary, written together there.
        # An event with blob lines is kept as its parts (see _Format2.parts): those
        # lines are written from the blob's bytes, never held whole.
        self._buffer: list[bytes | list[tuple[bytes, bytes, _BlobLine | None]]] = []
        self._blobs = False  # whether the buffer holds such an event
        if fresh:
            self._write_line(_header_line(self._format2))
        # The header's link: where the chain of the file's events starts.
        self._start = self._format2.link if self._next == 0 else scan.start
        if created and fsync:
            self.sync()  # the header, then the name that leads to it
            _fsync_directory(os.path.dirname(os.path.abspath(name)))

    @property
    def next_sequence(self) -> int:
        """The sequence number the next written event must have."""
        return self._next

    @property
    def closed(self) -> bool:
        return self._file is None

    def write(self, event: Event) -> None:
        """Append one event (and flush it; fsync when asked).

        Raises:
            ValueError: the writer is closed, or ``event.sequence`` is not
                :attr:`next_sequence`.
        """
        if self._file is None:
            raise ValueError(f"{self.path}: LogWriter is closed")
        if event.sequence != self._next:
            raise ValueError(
                f"{self.path}: event {event.type} has sequence {event.sequence}, but the "
                f"log continues at {self._next} (one log file records one run, in order)"
            )
        format2 = self._format2
        body = format2.text(event)  # (the common case: no blob line before it)
        if body is None:
            parts = format2.parts(event)
            if len(parts) == 1:  # (its blobs are in the log already)
                body = parts[0][0]
            else:  # blob lines first: written from the blob's bytes when flushed
                self._buffer.append(parts)
                self._blobs = True
        if body is not None:
            self._buffer.append(body + _LINK_KEY + format2.link + b'"}\n')
        self._next += 1
        if event.type in _SYNC_AFTER:
            self._flush()
            if self._fsync:
                self.sync()

    def flush(self) -> None:
        """Write the lines buffered since the last side-effect boundary now (the
        writer does this itself at each boundary, and when it closes)."""
        if self._file is not None:
            self._flush()

    def _flush(self) -> None:
        buffer = self._buffer
        if buffer:
            if self._blobs or len(buffer) == 1 or sum(map(len, buffer)) > _CHUNK:
                for index, lines in enumerate(buffer):  # (big lines: not copied to join)
                    try:
                        if lines.__class__ is bytes:
                            self._write_line(lines)
                        else:  # an event's blob lines and its line, piece by piece
                            for piece in _pieces(lines):  # type: ignore[arg-type]
                                self._write_line(piece)
                    except BaseException:
                        del buffer[:index]  # the rest: for a later flush
                        raise
            else:
                self._write_line(b"".join(buffer))  # type: ignore[arg-type]
            buffer.clear()  # (kept when the write failed: a later flush writes them)
            self._blobs = False

    def sync(self) -> None:
        """Write the buffered lines and ``os.fsync`` what was written since the last
        sync (with ``fsync=True``, the writer does this itself at side-effect
        boundaries)."""
        if self._file is not None:
            self._flush()
        if self._file is not None and self._unsynced:
            os.fsync(self._file.fileno())
            self._unsynced = False

    def follow(self, log: EventLog) -> Callable[[], None]:
        """Write ``log``'s events from :attr:`next_sequence` on, then subscribe to it.

        After :func:`replay.resume` this appends whatever the resumed loop
        regenerated past the end of the file (nothing, unless the previous process
        died between two events) and every event it records from then on, until
        :meth:`close` (or the returned function) unsubscribes.

        Returns:
            The unsubscribe function (calling it more than once is harmless).

        Raises:
            ValueError: the writer is closed, or ``log`` is not the run the file
                records (its first :attr:`next_sequence` events are not the file's).
        """
        if self._file is None:
            raise ValueError(f"{self.path}: LogWriter is closed")
        written = self._next
        if written:
            probe = _Format2(self._start, self._format2.version)
            for event in log[:written]:
                probe.parts(event)
            if len(log) < written or probe.link != self._format2.link:
                raise ValueError(
                    f"{self.path}: the log to follow is not the run this file records (the "
                    f"file holds {written} events, and the log's first {written} are not "
                    "those); one file records one run: use a new file, or continue this "
                    "one's run with replay.resume(read_log(path))"
                )
        for event in log.since(written):
            self.write(event)
        unsubscribe = log.subscribe(self.write)
        self._subscriptions.append(unsubscribe)
        return unsubscribe

    def _write_line(self, line: bytes) -> None:
        file = self._file
        assert file is not None
        view = memoryview(line)
        while view:
            written = file.write(view)
            view = view[written or 0 :]
        self._unsynced = True

    def close(self) -> None:
        """Unsubscribe from the logs :meth:`follow` subscribed to and close the file
        (idempotent)."""
        subscriptions, self._subscriptions = self._subscriptions, []
        for unsubscribe in subscriptions:
            unsubscribe()
        if self._file is not None:
            try:
                self._flush()
                if self._fsync:
                    self.sync()
            finally:
                self._file.close()
                self._file = None

    def __enter__(self) -> LogWriter:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._file is None else f"next_sequence={self._next}"
        return f"<LogWriter {self.path!r} {state}>"
