"""A syrupy extension that snapshots agentloop event logs as readable text.

syrupy's default (amber) serializer prints a msgspec Struct as one ``repr`` line,
which is neither stable nor readable in a diff. :class:`EventLogExtension` writes
one text file per snapshot instead, one block per event::

    # agentloop events (serializer 2; masked: at, wall_seconds)
    #0 session.start step=0
      system: "Be brief."
      tools:
        - {"name":"add","description":"Add two integers.",...}
      max_steps: 8
      rules: 3
    #3 model.chunk step=1
      chunk: {"kind":"model_chunk","request_id":"request-001","block":{...}}

- The block header is ``#<sequence> <type> step=<step>`` (and ``at=`` when ``at``
  is not masked); then one line per remaining field, in the Struct's declaration
  order (the order of the log file). A non-empty list field is written one item
  per line.
- A field that holds its default is left out, at every level, as the log files
  leave it out (serializer 2): a field added to an event, a reply or ``Usage``
  later (with a default) changes no snapshot.
- Values are ``msgspec.to_builtins`` of the fields, written as compact JSON (so a
  string stays on one line, with ``\\n`` escaped). Dict keys keep their recorded
  order. Floats JSON cannot hold are written as the log files write them
  (``{"$float":"nan"}``), so nothing is lost.
- A media block's bytes (an image's ``data``) are written as their SHA-256 and
  size, ``"sha256:1f2e... (72 bytes)"``, never as the bytes: a snapshot of a
  session with a 10 MB image stays readable, and changes when the image does.
- Volatile fields are masked: left out, wherever they appear (a Struct field or
  a dict key), except inside tool-call ``arguments`` and tool ``parameters``
  schemas, which are data. By default :data:`DEFAULT_MASK` (``at`` and the
  ``wall_seconds`` duration). Choose others with :meth:`EventLogExtension.with_options`
  or a subclass that sets ``mask``.

The first line names :data:`SERIALIZER_VERSION`; it is bumped whenever the output
changes, so snapshots written by an older format fail loudly (re-run with
``--snapshot-update``) rather than comparing apples with pears.

Use it per assertion or as the default for a test module::

    from replay.syrupy import EventLogExtension

    def test_session(snapshot):
        log = EventLog()
        run(..., log=log)
        assert log == snapshot(extension_class=EventLogExtension)

    @pytest.fixture
    def snapshot(snapshot):
        return snapshot.use_extension(EventLogExtension.with_options(mask=("at",)))
"""

from __future__ import annotations

import functools
import hashlib
import math
from collections.abc import Iterable, Sequence
from typing import Any, ClassVar, Final

import msgspec
from syrupy.extensions.single_file import SingleFileSnapshotExtension, WriteMode
from syrupy.types import PropertyFilter, PropertyMatcher, SerializableData, SerializedData

from agentloop import EventLog, RunResult, ToolCall, ToolSpec

__all__ = ["DEFAULT_MASK", "SERIALIZER_VERSION", "EventLogExtension", "to_text"]

#: Version of the text format. Bump it whenever the output of :func:`to_text`
#: changes for any input (existing snapshots then fail until updated).
SERIALIZER_VERSION: Final = 2
#: Fields masked by default: the caller's clock, and a duration computed from it.
DEFAULT_MASK: Final[tuple[str, ...]] = ("at", "wall_seconds")

_INDENT: Final = "  "
_INT_MIN: Final = -(2**63)
_INT_END: Final = 2**64
# Struct fields whose values are data the model sees: never masked inside.
_DATA_FIELDS: Final = frozenset(((ToolCall, "arguments"), (ToolSpec, "parameters")))
_TAGS: Final = frozenset(("$float", "$int", "$dict"))
_json_encode = msgspec.json.Encoder().encode


class EventLogExtension(SingleFileSnapshotExtension):
    """Snapshot an event log, or a ``RunResult``, as one readable text file.

    Accepts a sequence of events (``read_log(path)``, ``loop.log.events``), an
    :class:`~agentloop.EventLog`, anything with an ``events`` sequence (a
    :class:`replay.ReplayResult`, the ``agent_cassette`` fixture) or a
    :class:`~agentloop.RunResult`. Snapshots are stored as
    ``__snapshots__/<test module>/<test name>.eventlog``.

    Attributes:
        mask: names of the fields left out of the snapshot (default
            :data:`DEFAULT_MASK`). Override in a subclass or use
            :meth:`with_options`.
    """

    file_extension = "eventlog"
    # syrupy before 5 reads the private name (syrupy 4.0 would write ``.raw`` files).
    _file_extension = "eventlog"
    _write_mode = WriteMode.TEXT
    mask: ClassVar[tuple[str, ...]] = DEFAULT_MASK

    @classmethod
    def with_options(cls, *, mask: Iterable[str] | None = None) -> type[EventLogExtension]:
        """A subclass with other options (syrupy takes extension *classes*).

        Args:
            mask: field names to leave out instead of :attr:`mask`; ``()`` keeps
                every field.

        >>> EventLogExtension.with_options(mask=["at"]).mask
        ('at',)
        """
        names = cls.mask if mask is None else _mask_names(mask)
        return _configured(cls, names)

    def serialize(
        self,
        data: SerializableData,
        *,
        exclude: PropertyFilter | None = None,
        include: PropertyFilter | None = None,
        matcher: PropertyMatcher | None = None,
    ) -> SerializedData:
        """The text of ``data`` (see :func:`to_text`).

        syrupy's property filters do not apply: choose the fields with ``mask``.
        (syrupy always passes a ``matcher``; it is not used.)

        Raises:
            TypeError: ``data`` is not an event log or a ``RunResult``, or
                syrupy's ``exclude``/``include`` was given.
        """
        if exclude is not None or include is not None:
            raise TypeError(
                "EventLogExtension does not support exclude/include; "
                "leave fields out with EventLogExtension.with_options(mask=(...))"
            )
        return to_text(data, mask=self.mask)


@functools.cache
def _configured(cls: type[EventLogExtension], mask: tuple[str, ...]) -> type[EventLogExtension]:
    # Cached so repeated with_options() calls reuse one class (syrupy walks the
    # subclasses of SingleFileSnapshotExtension).
    return type(cls.__name__, (cls,), {"mask": mask, "__module__": cls.__module__})


def _mask_names(mask: Iterable[str]) -> tuple[str, ...]:
    if isinstance(mask, str):
        raise TypeError(f"mask must be an iterable of field names, not a string: {mask!r}")
    names = tuple(mask)
    for name in names:
        if type(name) is not str or not name:
            raise TypeError(f"mask must hold non-empty field names, got {name!r}")
    return names


def to_text(data: Any, *, mask: Iterable[str] = DEFAULT_MASK) -> str:
    """Render an event log or a ``RunResult`` as the snapshot text.

    Args:
        data: a sequence of events, an :class:`~agentloop.EventLog`, an object
            with an ``events`` sequence, or a :class:`~agentloop.RunResult`.
        mask: field names to leave out, wherever they appear (except inside
            tool-call arguments and tool parameter schemas).

    Returns:
        The text, ending with a newline.

    Raises:
        TypeError: ``data`` is none of those.
    """
    names = frozenset(_mask_names(mask))
    shown = ", ".join(sorted(names)) if names else "nothing"
    if type(data) is RunResult:
        lines = [f"# agentloop run result (serializer {SERIALIZER_VERSION}; masked: {shown})"]
        lines.extend(_fields("result", _plain(data, names), names, skip=()))
        return "\n".join(lines) + "\n"
    events = _events_of(data)
    lines = [f"# agentloop events (serializer {SERIALIZER_VERSION}; masked: {shown})"]
    for event in events:
        lines.extend(_event_lines(event, names))
    return "\n".join(lines) + "\n"


def _events_of(data: Any) -> Sequence[Any]:
    events: Any = data
    if not isinstance(events, (EventLog, Sequence)) or isinstance(events, (str, bytes)):
        events = getattr(data, "events", None)
    if isinstance(events, EventLog):
        events = events.events
    if not isinstance(events, Sequence) or isinstance(events, (str, bytes)):
        raise TypeError(
            "EventLogExtension snapshots a sequence of events, an EventLog, an object "
            f"with an events sequence, or a RunResult; got {type(data).__name__}"
        )
    for index, event in enumerate(events):
        if not isinstance(event, msgspec.Struct) or not isinstance(
            getattr(type(event), "type", None), str
        ):
            raise TypeError(f"item {index} is not an agentloop event: {event!r}")
    return events


def _event_lines(event: Any, mask: frozenset[str]) -> list[str]:
    header = f"#{event.sequence} {event.type} step={event.step}"
    if "at" not in mask:
        header += f" at={_json(_plain(event.at, mask))}"
    fields = _plain(event, mask)
    return _fields(header, fields, mask, skip=("type", "sequence", "step", "at"))


def _fields(
    header: str, fields: dict[str, Any], mask: frozenset[str], skip: tuple[str, ...]
) -> list[str]:
    lines = [header]
    for name, value in fields.items():
        if name in skip or name in mask:
            continue
        if type(value) is list and value:
            lines.append(f"{_INDENT}{name}:")
            lines.extend(f"{_INDENT * 2}- {_json(item)}" for item in value)
        else:
            lines.append(f"{_INDENT}{name}: {_json(value)}")
    return lines


def _json(value: Any) -> str:
    return _json_encode(value).decode()


@functools.cache
def _defaults(cls: type[msgspec.Struct]) -> tuple[tuple[str, Any], ...]:
    """Each field of ``cls`` and its default (``msgspec.NODEFAULT`` when it has none
    or a factory's: such a field is always written)."""
    return tuple(
        (
            field.name,
            field.default if field.default_factory is msgspec.NODEFAULT else msgspec.NODEFAULT,
        )
        for field in msgspec.structs.fields(cls)
    )


def _plain(value: Any, mask: frozenset[str]) -> Any:
    """``msgspec.to_builtins`` of ``value``, with masked names left out and values
    JSON cannot hold written as tagged objects (as the log files do)."""
    if isinstance(value, msgspec.Struct):
        cls = type(value)
        out: dict[str, Any] = {}
        config = cls.__struct_config__
        if config.tag_field is not None:
            out[config.tag_field] = config.tag
        for name, default in _defaults(cls):
            if name in mask:
                continue
            field = getattr(value, name)
            if (
                field.__class__ is default.__class__
                and field == default
                and repr(field) == repr(default)  # (-0.0 is not 0.0)
            ):
                continue
            if (cls, name) in _DATA_FIELDS:
                out[name] = _plain(field, frozenset())
            else:
                out[name] = _plain(field, mask)
        return out
    if isinstance(value, dict):
        out = {key: _plain(item, mask) for key, item in value.items() if key not in mask}
        if len(out) == 1 and next(iter(out)) in _TAGS:
            return {"$dict": out}  # a dict that would read as a tag, escaped like the log
        return out
    if isinstance(value, (list, tuple)):
        return [_plain(item, mask) for item in value]
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, float):
        if math.isfinite(value):
            return float(value)
        return {"$float": "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")}
    if isinstance(value, int):
        if _INT_MIN <= value < _INT_END:
            return int(value)
        return {"$int": str(int(value))}
    if value.__class__ is bytes:
        # A media block's bytes: by hash and size, never the bytes (its media type
        # is the field next to it). Two snapshots differ when the bytes do.
        return f"sha256:{hashlib.sha256(value).hexdigest()} ({len(value)} bytes)"
    if isinstance(value, Sequence) and not isinstance(value, (bytes, bytearray)):
        return [_plain(item, mask) for item in value]
    return _plain(msgspec.to_builtins(value), mask)
