"""Log files: JSONL, one header line, then one event per line.

Format (version 1)::

    {"format":"agentloop-log","version":1,"library":"0.1.0"}
    {"type":"session.start","sequence":0,...}
    {"type":"message.accepted","sequence":1,...}
    ...

Each event line is exactly :func:`agentloop.encode_event` of the event, followed by
``\\n``. Writers append one whole line per event and flush it (optionally
``fsync``) before the loop goes on, so after a crash the file holds every event
but possibly a *torn* last line: a partial write with no newline. Readers detect
that and raise :class:`TornLogError`, which carries the intact prefix; they never
accept a partial line as data and never repair a file on their own.

Evolution: a reader accepts every format version up to :data:`LOG_FORMAT_VERSION`
and refuses newer ones (fail closed). Event fields follow msgspec's schema
evolution rules (new fields get defaults, fields never change type, tags are never
reused), so old logs keep decoding; a version bump is for changes that cannot be
expressed that way, and then comes with a migration of the older versions here.

``read_log`` checks the *file* (header, version, JSON, event types), not the
*story*: missing, extra or reordered events are found by :func:`replay.replay`.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Iterable
from types import TracebackType
from typing import IO, Any, Final

import msgspec

from agentloop import Event, EventLog, __version__, decode_event, encode_event

__all__ = [
    "LOG_FORMAT",
    "LOG_FORMAT_VERSION",
    "LogError",
    "LogFormatError",
    "LogVersionError",
    "LogWriter",
    "TornLogError",
    "read_log",
    "write_log",
]

#: The ``format`` field of the header line.
LOG_FORMAT: Final = "agentloop-log"
#: The newest log format version this library reads and the one it writes.
LOG_FORMAT_VERSION: Final = 1

StrPath = str | os.PathLike[str]


class LogError(Exception):
    """Root of the log-file errors. ``path`` is the file; ``line`` the 1-based line
    number the problem is on, when there is one."""

    def __init__(self, message: str, *, path: str = "", line: int | None = None) -> None:
        super().__init__(message)
        self.path = path
        self.line = line


class LogFormatError(LogError):
    """The file is not a (well-formed) agentloop log: no or wrong header, a line
    that is not JSON, or an event of an unknown type or shape."""


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


class _Header(msgspec.Struct, frozen=True):
    format: str
    version: int
    library: str = ""


_header_decoder = msgspec.json.Decoder(dict[str, Any])


def _header_line() -> bytes:
    return msgspec.json.encode(_Header(LOG_FORMAT, LOG_FORMAT_VERSION, __version__)) + b"\n"


def _check_header(line: bytes, path: str) -> None:
    try:
        header = _header_decoder.decode(line)
    except msgspec.DecodeError:
        header = None
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
    if version > LOG_FORMAT_VERSION:
        library = header.get("library")
        by = f" (written by agentloop {library})" if isinstance(library, str) and library else ""
        raise LogVersionError(
            f"{path}: log format version {version}{by} is newer than this agentloop "
            f"({__version__}) reads (up to {LOG_FORMAT_VERSION}); upgrade agentloop",
            path=path,
            version=version,
        )


def read_log(path: StrPath) -> list[Event]:
    """Read every event of a log file.

    Returns:
        The events in file order (not checked for gaps or order; see
        :func:`replay.replay`).

    Raises:
        OSError: the file cannot be read (e.g. ``FileNotFoundError``).
        TornLogError: the last line is incomplete (``.events`` is the intact prefix).
        LogVersionError: the header names a format version newer than
            :data:`LOG_FORMAT_VERSION` (or an invalid one).
        LogFormatError: anything else wrong with the file (no header, a line that
            is not JSON or not a known event).
    """
    name = os.fspath(path)
    with open(name, "rb") as file:
        data = file.read()
    if not data:
        raise LogFormatError(f"{name}: empty file, not an agentloop log", path=name, line=1)
    lines = data.split(b"\n")
    # A complete file ends with "\n", so the split leaves an empty last item; a
    # non-empty one is a last line the writer never finished.
    tail = lines.pop()
    if not lines:
        raise LogFormatError(
            f"{name}: the header line is incomplete (torn or not an agentloop log)",
            path=name,
            line=1,
        )
    _check_header(lines[0], name)
    events: list[Event] = []
    append = events.append
    decode = decode_event
    number = 1
    try:
        for number, line in enumerate(lines[1:], start=2):  # noqa: B007
            append(decode(line))
    except msgspec.MsgspecError as exc:
        raise LogFormatError(
            f"{name}: line {number}: not a valid agentloop event ({exc})", path=name, line=number
        ) from None
    if tail:
        number = len(lines) + 1
        try:
            decode(tail)
        except msgspec.MsgspecError:
            raise TornLogError(
                f"{name}: line {number} is torn (incomplete last line; the writer was "
                f"interrupted); the {len(events)} events before it are intact "
                "(TornLogError.events)",
                path=name,
                line=number,
                events=events,
            ) from None
        # Complete JSON whose newline is missing: the writer finished the event
        # but not the line. Still torn: a reader never guesses.
        raise TornLogError(
            f"{name}: line {number} has no final newline (the writer was interrupted); "
            f"the {len(events)} events before it are intact (TornLogError.events)",
            path=name,
            line=number,
            events=events,
        )
    return events


def write_log(path: StrPath, events: Iterable[Event]) -> None:
    """Write a whole log file (header + events), replacing ``path`` atomically.

    The file is written next to ``path`` under a temporary name, flushed, fsynced
    and renamed over ``path``, so readers see the old file or the new one, never a
    mix. Use :class:`LogWriter` to record a run as it happens.
    """
    name = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(name))
    fd, tmp = tempfile.mkstemp(prefix=".agentloop-log-", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "wb") as file:
            file.write(_header_line())
            encode = encode_event
            file.writelines(encode(event) + b"\n" for event in events)
            file.flush()
            os.fsync(file.fileno())
        os.replace(tmp, name)
    except BaseException:
        os.unlink(tmp)
        raise


class LogWriter:
    """Append events to a log file as they happen: one line per event, flushed.

    Args:
        path: the log file. A missing or empty file gets the header first; an
            existing log is read (``read_log``) and appended to, which is how a
            resumed session continues the same file. A torn existing log raises
            :class:`TornLogError`: repair it explicitly first.
        fsync: also ``os.fsync`` after every event (durable against power loss,
            much slower). Flushing alone survives a killed process.

    Use it as an :class:`~agentloop.EventLog` subscriber and as a context manager::

        with LogWriter("session.jsonl") as writer:
            loop = agent_loop(messages, tools=tools)
            loop.log.subscribe(writer.write)
            ...

    Events must arrive in sequence order, continuing the file (``write`` raises
    ``ValueError`` otherwise: one file records one run). :meth:`follow` writes the
    events of a log that the file does not have yet, then subscribes.
    """

    def __init__(self, path: StrPath, *, fsync: bool = False) -> None:
        name = os.fspath(path)
        self.path = name
        self._fsync = fsync
        fresh = not os.path.exists(name) or os.path.getsize(name) == 0
        self._next = 0 if fresh else len(read_log(name))
        self._file: IO[bytes] | None = open(name, "ab", buffering=0)  # noqa: SIM115
        if fresh:
            self._write_line(_header_line())

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
        if event.sequence != self._next:
            raise ValueError(
                f"{self.path}: event {event.type} has sequence {event.sequence}, but the "
                f"log continues at {self._next} (one log file records one run, in order)"
            )
        self._write_line(encode_event(event) + b"\n")
        self._next += 1

    def follow(self, log: EventLog) -> Callable[[], None]:
        """Write ``log``'s events from :attr:`next_sequence` on, then subscribe to it.

        After :func:`replay.resume` this appends whatever the resumed loop
        regenerated past the end of the file (nothing, unless the previous process
        died between two events) and every event it records from then on.
        Returns the unsubscribe function.
        """
        for event in log.since(self._next):
            self.write(event)
        return log.subscribe(self.write)

    def _write_line(self, line: bytes) -> None:
        file = self._file
        if file is None:
            raise ValueError(f"{self.path}: LogWriter is closed")
        view = memoryview(line)
        while view:
            written = file.write(view)
            view = view[written or 0 :]
        if self._fsync:
            os.fsync(file.fileno())

    def close(self) -> None:
        """Close the file (idempotent)."""
        if self._file is not None:
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
