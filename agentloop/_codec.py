"""The canonical byte encoding of events: one compact msgspec JSON object per event.

:func:`encode_event` / :func:`decode_event` are what the log files of the ``replay``
package are made of, and what replay compares (byte for byte) to decide whether a
regenerated event is the recorded one. One reused :class:`msgspec.json.Encoder` and
one typed :class:`msgspec.json.Decoder` for the :data:`~agentloop.Event` union do
all the work on the fast path.

Every Struct an event holds is declared with ``omit_defaults=True``, so a field
that holds its default is left out (``"at": null``, ``"step": 0``, ``"is_error":
false`` never appear): adding a field with a default to any of them changes no
encoding. Decoding fills left-out fields with their defaults.

Values JSON cannot hold
-----------------------
JSON has no NaN or infinities, and JSON readers disagree about integers outside
the 64-bit range (``-2**63 <= n < 2**64``: int64 and uint64, what msgspec and the
loop accept). The loop validates every value it *makes* or *accepts*, so
such values can only reach the log inside a reply recorded as received: the tool
arguments, usage or ``at`` of a ``plan.draft`` reply (a model response the loop is
about to reject) and the reply that ended a failed run, recorded in
``session.complete`` (``run.finished`` under rules revisions 0 and 1): an invalid
chunk or a misused reply. The log must still hold them exactly, or it could not
replay its own failure (DESIGN §7). So, for those three event types only, the
encoder walks the event and, if it finds such a value, writes a tagged object in
its place::

    NaN            -> {"$float": "nan"}
    +inf / -inf    -> {"$float": "inf"} / {"$float": "-inf"}
    2**70          -> {"$int": "1180591620717411303424"}
    10**4300       -> {"$int": "0x1b5e..."}   (past 4,300 digits, which Python
                                               will not print in decimal)

and a dict that would read as a tag (exactly one key, one of ``$float``, ``$int``,
``$dict``) is escaped as ``{"$dict": {...}}`` so a model that really sent
``{"$int": "1"}`` as arguments gets exactly that back. Decoding undoes this only
for those three event types and only when the line contains ``{"$`` (the start of
an object whose first key begins with ``$``), so ordinary events never pay for it.
Every other event is encoded as msgspec encodes it.

Values of any depth
-------------------
msgspec encodes and decodes recursively and raises ``RecursionError`` about a
thousand levels down. A recorded reply can be deeper (tool arguments 100,000
levels deep fail the run, and are recorded as received first), so on that error
both functions fall back to the iterative ones of ``_deep.py``, which write and
read exactly the bytes msgspec would: deep values are plain JSON in the log, and
no line shows which path wrote it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, Final

import msgspec

from ._deep import TAGS as _TAGS
from ._deep import encode, parse
from ._deep import needs_tags as _needs_tags
from ._deep import tag as _tag
from ._deep import untag as _untag
from ._events import Event, PlanDraftEvent, RunFinishedEvent, SessionCompleteEvent
from ._messages import ToolCall
from ._protocol import ModelResponse, Usage

__all__ = ["decode_event", "encode_event"]

_INT_MIN: Final = -(2**63)
_INT_END: Final = 2**64  # msgspec (and the loop) accept int64 and uint64
_MARK_BYTES: Final = b'{"$'
_MARK_STR: Final = '{"$'
_isfinite = math.isfinite
_TAGGED_TYPES: Final = frozenset(
    (PlanDraftEvent.type, SessionCompleteEvent.type, RunFinishedEvent.type)
)
_USAGE_FIELDS: Final = Usage.__struct_fields__
# Past this many containers the fast checks stop looking and take the tagged path,
# which writes the same bytes when nothing needs a tag (see _plain_walk).
_PLAIN_CONTAINERS: Final = 4096

_encoder = msgspec.json.Encoder()
_encode = _encoder.encode


def _first_decode(data: bytes | str) -> Event:
    """Build the typed decoder on first use, then decode with it from now on.

    (Making the decoder for the event union costs a few milliseconds, which
    ``import agentloop`` need not pay: the loop itself only encodes.)
    """
    global _decode
    _decode = msgspec.json.Decoder(Event).decode
    return _decode(data)


_decode: Callable[[bytes | str], Event] = _first_decode
_decode_any = msgspec.json.decode


def encode_event(event: Event) -> bytes:
    """Encode one event as compact JSON (no trailing newline).

    The result is canonical: encoding the decoded event gives the same bytes.

    Raises:
        TypeError: ``event`` holds a value msgspec cannot encode (a bug in
            whatever built the event; events made by the loop always encode).

    >>> from agentloop import StepEndEvent
    >>> encode_event(StepEndEvent(sequence=3, at=None, step=1))
    b'{"type":"step.end","sequence":3,"step":1}'
    """
    cls = event.__class__
    if cls is PlanDraftEvent:
        tagged = _draft_needs_tags(event)  # type: ignore[arg-type]
    else:
        tagged = (cls is RunFinishedEvent or cls is SessionCompleteEvent) and _needs_tags(
            event, give_up_after=_PLAIN_CONTAINERS
        )
    try:
        return _encode(_tag(msgspec.to_builtins(event))) if tagged else _encode(event)
    except RecursionError:
        # Too deep for msgspec's recursive encoder: the same bytes, iteratively.
        return encode(event, tagged=tagged)


def decode_event(data: bytes | str) -> Event:
    """Decode one event encoded by :func:`encode_event`.

    Raises:
        msgspec.DecodeError: ``data`` is not JSON.
        msgspec.ValidationError: ``data`` is JSON but not a known event (unknown
            ``type``, a missing field, a field of the wrong type, a bad tag).

    >>> decode_event(b'{"type":"step.end","sequence":3,"step":1}')
    StepEndEvent(sequence=3, at=None, step=1)
    """
    # Decode first: for every event type but two, that is all there is to do.
    # (Searching the line first would cost more than the decode of a small event.)
    try:
        event = _decode(data)
    except msgspec.ValidationError:
        if _marked(data):  # e.g. a tagged ``at``, which a float field refuses
            return _decode_marked(data)
        raise
    except RecursionError:
        return _decode_deep(data)
    cls = event.__class__
    if (
        cls is PlanDraftEvent or cls is SessionCompleteEvent or cls is RunFinishedEvent
    ) and _marked(data):
        return _decode_marked(data)
    return event


def _marked(data: bytes | str) -> bool:
    if isinstance(data, str):
        return data.find(_MARK_STR) >= 0
    return data.find(_MARK_BYTES) >= 0


def _decode_marked(data: bytes | str) -> Event:
    try:
        raw = _decode_any(data)
    except RecursionError:
        return _decode_deep(data)
    if type(raw) is dict and raw.get("type") in _TAGGED_TYPES:
        event: Event = msgspec.convert(_untag(raw), Event)
        return event
    return _decode(data)


# --------------------------------------------------------------------------- walking


def _draft_needs_tags(event: PlanDraftEvent) -> bool:
    """:func:`_needs_tags` for a ``plan.draft``, knowing where such values can be.

    The loop checked the reply's structure before recording it (strings are
    strings, arguments are plain JSON), so only numbers and tag-like keys need a
    look. Anything unusual answers ``True``: the slow path then decides exactly.
    """
    reply = event.reply
    if reply.__class__ is not ModelResponse:
        return _needs_tags(reply)
    at = reply.at
    if at is not None and (at.__class__ is not float or not _isfinite(at)):
        return True
    usage = reply.usage
    if usage is not None:
        for name in _USAGE_FIELDS:
            count = getattr(usage, name)
            if count.__class__ is not int or not _INT_MIN <= count < _INT_END:
                return True
    if reply.attempts:  # (FallbackModel's failed attempts: rare, the slow path decides)
        return True
    for block in reply.content:
        if block.__class__ is ToolCall and not _plain(block.arguments):
            return True
    return False


def _plain(arguments: dict[str, Any]) -> bool:
    """Fast: ``True`` when nothing in ``arguments`` needs a tag."""
    # Flat arguments of strings and small numbers are the common case: one pass,
    # no stack. Anything else takes the iterative walk below.
    for value in arguments.values():
        cls = value.__class__
        if cls is str or cls is bool or value is None:
            continue
        if cls is int:
            if not _INT_MIN <= value < _INT_END:
                return False
        elif cls is not float or not _isfinite(value):
            return _plain_walk(arguments)
    return len(arguments) != 1 or next(iter(arguments)) not in _TAGS


def _plain_walk(arguments: dict[str, Any]) -> bool:
    """Iterative: ``True`` when nothing in nested ``arguments`` needs a tag.

    Answers ``False`` (let the exact path decide) past ``_PLAIN_CONTAINERS``
    containers: such arguments (shared, cyclic or far too big) are unusual.
    """
    stack: list[Any] = [arguments]
    pop, push = stack.pop, stack.append
    budget = _PLAIN_CONTAINERS
    while stack:
        budget -= 1
        if not budget:
            return False
        container = pop()
        if container.__class__ is dict:
            if len(container) == 1 and next(iter(container)) in _TAGS:
                return False
            items = container.values()
        else:
            items = container
        for value in items:
            cls = value.__class__
            if cls is str or cls is bool or value is None:
                continue
            if cls is int:
                if not _INT_MIN <= value < _INT_END:
                    return False
            elif cls is float:
                if not _isfinite(value):
                    return False
            elif cls is dict or cls is list or cls is tuple:
                push(value)
            else:
                return False
    return True


# --------------------------------------------------------------------------- any depth
#
# msgspec recurses in C and gives up (RecursionError) about a thousand levels down.
# Past that, the same bytes are written and read by the iterative functions of
# _deep.py, so a line never shows which path wrote it (see that module).


def decode_deep(data: bytes | str, into: Any = Event) -> Any:
    """:func:`decode_event` (or ``msgspec.json.decode(data, type=into)``) without
    recursion, whatever the depth: for callers that know a line is deep."""
    raw = parse(data)
    if into is Event and type(raw) is dict and raw.get("type") in _TAGGED_TYPES and _marked(data):
        raw = _untag(raw)
    return msgspec.convert(raw, into)


def _decode_deep(data: bytes | str) -> Event:
    event: Event = decode_deep(data)
    return event
