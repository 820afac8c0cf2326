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

Readers also require every event line to be *canonical*: byte for byte what
``encode_event`` writes for the event it decodes to. A line with an unknown or
duplicated field, extra whitespace or another spelling of the same values is
refused (:class:`LogFormatError`), so what a log says is exactly what replays and
what ``show`` prints. One thing is tolerated, as the JSON Lines convention allows:
a line may end with ``\\r\\n`` instead of ``\\n`` (a checkout through git's
``autocrlf`` rewrites a committed log that way). An empty line, anywhere, is an
error (a writer never writes one), and a last line without its ``\\n`` is torn.
The header line is only checked for its ``format`` and ``version``.

Evolution: a reader accepts every format version up to :data:`LOG_FORMAT_VERSION`
and refuses newer ones (fail closed). Event fields follow msgspec's schema
evolution rules (new fields get defaults, fields never change type, tags are never
reused). Because readers require canonical lines, though, any change to what
``encode_event`` writes (a new field, even one with a default, appears on every
line) is a change of the format: it comes with a version bump and a migration here
that reads the older versions by their own canonical form.

``read_log`` checks the *file* (header, version, JSON, event types), not the
*story*: missing, extra or reordered events are found by :func:`replay.replay`.
"""

from __future__ import annotations

import os
import secrets
import stat
from collections.abc import Callable, Iterable
from types import TracebackType
from typing import IO, Any, Final

import msgspec

from agentloop import (
    Event,
    EventLog,
    PlanDraftEvent,
    RunFinishedEvent,
    __version__,
    decode_event,
    encode_event,
)

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

_POSIX: Final = os.name == "posix"

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
    except (msgspec.DecodeError, RecursionError):
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


# The canonical check, fast. msgspec's own encoding of every event at once is
# compared with the file's bytes in one go. ``encode_event`` writes just that for
# every event, except that in two event types it writes a tagged object for a value
# JSON cannot hold (agentloop._codec): a non-finite float (msgspec writes ``null``,
# which cannot have decoded to one, so the comparison fails anyway), an integer
# outside int64/uint64 (19 digits or more) or a dict with a single "$..." key. Only
# when the bytes hold a "$" or such a number are those two types checked one by one
# with ``encode_event``; when the comparison fails, every line is (which also finds
# the line to name).
_encode_lines = msgspec.json.Encoder().encode_lines
_MAY_BE_TAGGED: Final = (PlanDraftEvent, RunFinishedEvent)
_DIGITS_TO_ZERO: Final = bytes(0x30 if 0x30 <= b <= 0x39 else 0x20 for b in range(256))
_LONG_NUMBER: Final = b"0" * 19


def _may_hold_tags(body: bytes) -> bool:
    return b"$" in body or _LONG_NUMBER in body.translate(_DIGITS_TO_ZERO)


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
        LogFormatError: anything else wrong with the file (no header, an empty
            line, a line that is not JSON, not a known event, or not in the
            canonical form ``encode_event`` writes).
    """
    name = os.fspath(path)
    with open(name, "rb") as file:
        data = file.read()
    if not data:
        raise LogFormatError(f"{name}: empty file, not an agentloop log", path=name, line=1)
    if b"\r" in data:
        # "\r\n" line ends are tolerated. (A raw "\r" cannot be inside a JSON string,
        # so this only touches line ends; any other "\r" stays and is refused.)
        data = data.replace(b"\r\n", b"\n")
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
    header = lines[0]
    _check_header(header, name)
    del lines[0]
    events: list[Event] = []
    append = events.append
    decode = decode_event
    number = 1
    try:
        for number, line in enumerate(lines, start=2):  # noqa: B007
            append(decode(line))
    except msgspec.MsgspecError as exc:
        if not lines[number - 2]:
            problem = "an empty line (a log has none; was the file edited?)"
        else:
            problem = f"not a valid agentloop event ({exc})"
        raise LogFormatError(f"{name}: line {number}: {problem}", path=name, line=number) from None
    body = data[len(header) + 1 : len(data) - len(tail)]
    try:
        same = _encode_lines(events) == body
    except RecursionError:  # values too deep for msgspec: encode_event, line by line
        same = False
    if not same:
        _check_canonical(name, lines, events, None)
    elif _may_hold_tags(body):
        _check_canonical(name, lines, events, _MAY_BE_TAGGED)
    if tail:
        number = len(lines) + 2
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


def _check_canonical(
    name: str, lines: list[bytes], events: list[Event], only: tuple[type, ...] | None
) -> None:
    """Raise :class:`LogFormatError` for the first line that is not ``encode_event``
    of its event (among the events of the types ``only``, if given)."""
    encode = encode_event
    for index, event in enumerate(events):
        if only is not None and event.__class__ not in only:
            continue
        canonical = encode(event)
        line = lines[index]
        if canonical != line:
            number = index + 2
            difference = _first_difference(line, canonical)
            raise LogFormatError(
                f"{name}: line {number}: not in canonical form ({difference}; a log line is "
                "byte for byte what encode_event writes: no unknown or repeated fields, no "
                "extra spaces)",
                path=name,
                line=number,
            )


def _first_difference(line: bytes, canonical: bytes) -> str:
    at = next(
        (i for i, (x, y) in enumerate(zip(line, canonical, strict=False)) if x != y),
        min(len(line), len(canonical)),
    )
    start = max(0, at - 20)

    def excerpt(data: bytes) -> str:  # never empty: neither line is
        text = data[start : at + 20].decode("utf-8", "replace")
        return repr(("…" if start else "") + text + ("…" if at + 20 < len(data) else ""))

    return f"at column {at + 1}: {excerpt(line)} where encode_event writes {excerpt(canonical)}"


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


def write_log(path: StrPath, events: Iterable[Event]) -> None:
    """Write a whole log file (header + events), replacing ``path`` atomically.

    The file is written next to ``path`` under a temporary name, flushed, fsynced
    and renamed over ``path``, so readers see the old file or the new one, never a
    mix; on POSIX the directory is fsynced too, so the rename survives a power
    loss. A replaced file keeps its permission bits; a new one gets those a
    plain ``open(path, "w")`` gives (``0o666`` less the umask). Use
    :class:`LogWriter` to record a run as it happens.
    """
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
            file.write(_header_line())
            encode = encode_event
            file.writelines(encode(event) + b"\n" for event in events)
            file.flush()
            os.fsync(file.fileno())
        os.replace(tmp, name)
    except BaseException:
        os.unlink(tmp)
        raise
    _fsync_directory(directory)


class LogWriter:
    """Append events to a log file as they happen: one line per event, flushed.

    Args:
        path: the log file. A missing or empty file gets the header first; an
            existing log is read (``read_log``) and appended to, which is how a
            resumed session continues the same file. A torn existing log raises
            :class:`TornLogError`: repair it explicitly first.
        fsync: also ``os.fsync`` after every event (durable against power loss,
            much slower). Flushing alone survives a killed process.

    Use it as a context manager, and let it :meth:`follow` the loop's log::

        with LogWriter("session.jsonl") as writer:
            loop = agent_loop(messages, tools=tools)
            writer.follow(loop.log)
            ...

    Events must arrive in sequence order, continuing the file (``write`` raises
    ``ValueError`` otherwise: one file records one run). :meth:`follow` writes the
    events of a log that the file does not have yet, then subscribes; :meth:`close`
    (the end of the ``with`` block) unsubscribes again, so a loop that outlives the
    writer (or that the garbage collector closes later) keeps its further events in
    ``loop.log`` instead of failing on a closed file. ``write`` can also be
    subscribed by hand (``loop.log.subscribe(writer.write)``); then unsubscribe it
    by hand before the writer closes.
    """

    def __init__(self, path: StrPath, *, fsync: bool = False) -> None:
        name = os.fspath(path)
        self.path = name
        self._fsync = fsync
        self._subscriptions: list[Callable[[], None]] = []
        created = not os.path.exists(name)
        fresh = created or os.path.getsize(name) == 0
        self._next = 0 if fresh else len(read_log(name))
        self._file: IO[bytes] | None = open(name, "ab", buffering=0)  # noqa: SIM115
        if fresh:
            self._write_line(_header_line())
        if created and fsync:
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
        died between two events) and every event it records from then on, until
        :meth:`close` (or the returned function) unsubscribes.

        Returns:
            The unsubscribe function (calling it more than once is harmless).

        Raises:
            ValueError: the writer is closed, or ``log`` does not continue the file.
        """
        if self._file is None:
            raise ValueError(f"{self.path}: LogWriter is closed")
        for event in log.since(self._next):
            self.write(event)
        unsubscribe = log.subscribe(self.write)
        self._subscriptions.append(unsubscribe)
        return unsubscribe

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
        """Unsubscribe from the logs :meth:`follow` subscribed to and close the file
        (idempotent)."""
        subscriptions, self._subscriptions = self._subscriptions, []
        for unsubscribe in subscriptions:
            unsubscribe()
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
