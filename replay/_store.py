"""The embedded durable store: sessions and their event logs in one SQLite file.

Theory of operation
-------------------
A session is its log (DESIGN §2): the store keeps, per session, the lines of its
log file, one row per event, plus a little bookkeeping that makes the log easy to
serve from several processes:

- ``sessions``: one row per session: ``status`` (``running``, ``paused``, or the
  finished run's status: ``completed``, ``cancelled``, ``max_steps``, ``failed``),
  ``steps``, ``next_sequence`` (how many events it holds), ``created``/``updated``
  (the store's clock), the *lease* (``lease_owner``, ``lease_expires``) and
  ``config`` (the recorded ``session.start`` configuration, as JSON, for listings),
  ``log_format``: the log format version its events are encoded in, and
  ``log_header``: the header of its log (format 2; schema 2), whose link starts
  the session's hash chain.
- ``events``: the session and ``sequence`` → ``event``, the event's line of the log
  file without its link (format 2: defaults left out, ``"="`` for content stored
  on an earlier line; a JSON object, stored as TEXT, so ``sqlite3 FILE "SELECT
  event FROM events"`` reads it), and ``link``, the line's hash chain link. So a
  stored session is tamper-evident like a file: reading it checks every link and
  names the first row that was edited, removed or moved, and
  :meth:`SQLiteStore.export` writes exactly the file :class:`replay.LogWriter`
  would have written (the same links; ``python -m replay verify`` checks it).
  From schema 6 the rows are keyed by one integer, ``event_key``: the session's
  ``number`` (a unique column of ``sessions``: 1, 2, ... in the order they were
  created) times 2**32 plus the event's ``sequence`` (a column too), and there is
  no ``session_id`` column; schemas 1 to 5 had a ``WITHOUT ROWID`` table keyed by
  ``(session_id, sequence)``, where an append wrote about two pages more.
  Sessions stored in log format 1 (schema 1) are read by format 1's canonical
  form (no links) and rewritten as format 2, in the same transaction, when they
  are next appended to.
- ``answers``: the answer (``Resume`` or ``Cancel``) recorded for a parked session,
  waiting for the next :func:`replay.run_durable`.
- ``queued`` (schema 3): messages sent to a session with :func:`replay.answer`
  (``Steer``, ``FollowUp``), in the order they came, until a worker delivers them
  to the loop at the session's next side-effect boundary and commits their
  ``message.queued`` events (deleting the rows in the same transaction).
- ``schema_version``: one row per schema version applied, so a store written by
  an older library is migrated when it is opened (and one written by a newer
  library is refused, never misread).

Writes follow two rules:

- **Optimistic append.** :meth:`SQLiteStore.append` names the sequence number the
  session is expected to continue at; if another writer got there first, nothing
  is written and :class:`StoreConflict` says which session and which sequences. So
  two writers can never both extend a session, whatever their leases say.
- **Group commit.** A batch of events is one transaction: the durable runner
  commits at *side-effect boundaries* (before a model call, before a tool call, on
  a pause, at the end), never per event. See :mod:`replay._durable`.

The file is in WAL mode (readers never block the writer), ``synchronous=NORMAL``
by default: a commit survives the process being killed at any point, and the
database is never corrupted; after a power loss or an OS crash the last few
commits may be rolled back (the effects after them then run again, as after any
crash). ``SQLiteStore(path, synchronous="FULL")`` syncs every commit to the disk
too (survives power loss, costs one fsync per commit).

One :class:`SQLiteStore` object may be used from several threads (calls are
serialized by a lock); several processes may open the same file.
"""

from __future__ import annotations

import collections
import contextlib
import hashlib
import math
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from types import TracebackType
from typing import Any, Final, Literal

import msgspec

import agentloop
from agentloop import (
    AgentLoopError,
    Budget,
    Cancel,
    Event,
    FollowUp,
    MessageQueuedEvent,
    Resume,
    Steer,
)
from agentloop._spi import MAX_ANSWER_DEPTH, answer_problem, clean_text, reserved_id_problem

from ._log import (
    _LINK_KEY,
    LOG_FORMAT_VERSION,
    LogFormatError,
    _BlobLine,
    _encode,
    _Format2,
    _header_body,
    _link,
    _read_v1,
    _Where,
    _write_lines,
    write_log,
)
from ._process import gone, this_process

__all__ = [
    "MAX_ANSWER_DEPTH",
    "SCHEMA_VERSION",
    "SESSION_STATUSES",
    "SQLiteStore",
    "SessionInfo",
    "SessionLeased",
    "SessionNotFound",
    "StoreConflict",
    "StoreError",
    "StoreVersionError",
]

#: ``SessionInfo.status`` values: in progress, parked on a pause, or finished
#: (the ``RunResult.status``).
SESSION_STATUSES: Final = ("running", "paused", *agentloop.STATUSES)
_FINISHED: Final = frozenset(agentloop.STATUSES)
# A session in these holds no lease: its worker is done with it (finished, or
# parked until an answer comes). The commit that moves it there releases the lease.
_UNLEASED: Final = _FINISHED | {"paused"}

#: ``PRAGMA application_id`` of an agentloop store ("ALS1" in ASCII): tells a store
#: from any other SQLite database.
APPLICATION_ID: Final = 0x414C5331

# --------------------------------------------------------------------------- schema
#
# Migrations: MIGRATIONS[n] brings a store from schema version n to n + 1. Each is
# a list of statements run in one transaction with the version bump, so a store is
# always at a version, never between two. Never edit a released migration; append
# a new one (SCHEMA_VERSION follows). Statements are run one by one: sqlite3's
# executescript() would commit the transaction half-way.

_SCHEMA_1: Final = (
    """CREATE TABLE sessions (
        id TEXT PRIMARY KEY,
        status TEXT NOT NULL,
        steps INTEGER NOT NULL,
        next_sequence INTEGER NOT NULL,
        created REAL NOT NULL,
        updated REAL NOT NULL,
        lease_owner TEXT,
        lease_expires REAL,
        config TEXT NOT NULL,
        log_format INTEGER NOT NULL
    ) WITHOUT ROWID""",
    "CREATE INDEX sessions_by_status ON sessions (status)",
    """CREATE TABLE events (
        session_id TEXT NOT NULL REFERENCES sessions (id),
        sequence INTEGER NOT NULL,
        event TEXT NOT NULL,
        link TEXT,
        PRIMARY KEY (session_id, sequence)
    ) WITHOUT ROWID""",
    """CREATE TABLE answers (
        session_id TEXT PRIMARY KEY REFERENCES sessions (id),
        sequence INTEGER NOT NULL,
        reply TEXT NOT NULL,
        created REAL NOT NULL
    ) WITHOUT ROWID""",
)

# Schema 2 (log format 2): a session's log header, where its hash chain starts
# (NULL for the sessions stored in format 1, until they are next appended to).
_SCHEMA_2: Final = ("ALTER TABLE sessions ADD COLUMN log_header TEXT",)

# Schema 3: steering and follow-up messages waiting for delivery (``id`` only grows:
# a worker remembers the last one it delivered, and deletes up to it).
_SCHEMA_3: Final = (
    """CREATE TABLE queued (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        session_id TEXT NOT NULL REFERENCES sessions (id),
        reply TEXT NOT NULL,
        created REAL NOT NULL
    )""",
    "CREATE INDEX queued_by_session ON queued (session_id, id)",
)

# Schema 4 (log format 3): the media bytes of a session's events, once per session
# (content-addressed: ``hash`` is their SHA-256 in hex). Each row is a blob line of
# the session's log: it comes before event ``sequence`` (``position``: in which
# order, when several do), and ``link`` is its hash chain link.
_SCHEMA_4: Final = (
    """CREATE TABLE blobs (
        session_id TEXT NOT NULL REFERENCES sessions (id),
        hash TEXT NOT NULL,
        sequence INTEGER NOT NULL,
        position INTEGER NOT NULL,
        media_type TEXT NOT NULL,
        data BLOB NOT NULL,
        link TEXT NOT NULL,
        UNIQUE (session_id, hash)
    )""",
    "CREATE INDEX blobs_by_session ON blobs (session_id, sequence, position)",
)

# Schema 5: the lease holder's process (host, pid, start time: see
# ``replay._process``), so a worker on the same host takes over the lease of a
# dead one at once (DESIGN §29). NULL for a lease written by an older library
# (it lasts until it expires, as it did then).
_SCHEMA_5: Final = (
    "ALTER TABLE sessions ADD COLUMN lease_host TEXT",
    "ALTER TABLE sessions ADD COLUMN lease_pid INTEGER",
    "ALTER TABLE sessions ADD COLUMN lease_start TEXT",
)

# Schema 6: each session has a ``number`` (1, 2, ... in the order they were
# created; unique), and the events are keyed by one integer, ``event_key``: the
# session's number times 2**32 plus the event's sequence (the table's rowid, no
# other index). An append writes the session's row and the end of its range of
# keys (for the newest sessions, the end of the table), not a leaf in the middle of
# a (session_id, sequence) key order and an index: fewer pages per commit. Every
# stored event is copied as it is (``sequence`` stays, the session is the key's high
# bits). The column ``session_id`` is gone: an older agentloop still running on the
# file (opened before the migration) fails to write an event (its INSERT names the
# column) instead of storing a row without a key, which SQLite would number after
# the last row, in another session's range.
_EVENTS_6: Final = """CREATE TABLE events_6 (
        event_key INTEGER PRIMARY KEY,
        sequence INTEGER NOT NULL,
        event TEXT NOT NULL,
        link TEXT
    )"""


def _schema_6(db: sqlite3.Connection) -> None:
    db.execute("ALTER TABLE sessions ADD COLUMN number INTEGER")
    ids = db.execute("SELECT id FROM sessions ORDER BY created, id").fetchall()
    db.executemany(
        "UPDATE sessions SET number = ? WHERE id = ?",
        [(number, session_id) for number, (session_id,) in enumerate(ids, 1)],
    )
    db.execute("CREATE UNIQUE INDEX sessions_by_number ON sessions (number)")
    db.execute(_EVENTS_6)
    db.execute(
        "INSERT INTO events_6 (event_key, sequence, event, link) "
        "SELECT (number << 32) + sequence, sequence, event, link "
        "FROM events JOIN sessions ON sessions.id = events.session_id ORDER BY 1"
    )
    db.execute("DROP TABLE events")
    db.execute("ALTER TABLE events_6 RENAME TO events")


Migration = Sequence[str] | Callable[[sqlite3.Connection], None]

#: The migrations, in order; ``len(MIGRATIONS)`` is :data:`SCHEMA_VERSION`.
MIGRATIONS: Final[list[Migration]] = [
    _SCHEMA_1,
    _SCHEMA_2,
    _SCHEMA_3,
    _SCHEMA_4,
    _SCHEMA_5,
    _schema_6,
]
#: The schema version this library writes (and the newest it opens).
SCHEMA_VERSION: Final = len(MIGRATIONS)


# --------------------------------------------------------------------------- errors


class StoreError(AgentLoopError):
    """Root of the store's errors; the message says what and where."""


class StoreVersionError(StoreError):
    """The file is not an agentloop store, its schema is newer than this library
    opens, or a session's events are in a log format it does not read
    (``version`` is the offending version when there is one)."""

    def __init__(self, message: str, *, version: int | None = None) -> None:
        super().__init__(message)
        self.version = version


class SessionNotFound(StoreError, KeyError):
    """No session with that id in the store."""

    def __init__(self, session_id: str, detail: str = "") -> None:
        self.session_id = session_id
        self.message = f"no session {session_id!r} in the store{detail}"
        super().__init__(self.message)

    def __str__(self) -> str:  # KeyError would repr() the message
        return self.message


class StoreConflict(StoreError):
    """Another writer advanced the session first (optimistic append lost).

    Attributes:
        session_id: the session.
        expected: the sequence number this writer expected the session to continue at.
        actual: where the stored session continues now.
    """

    def __init__(self, session_id: str, expected: int, actual: int, detail: str = "") -> None:
        self.session_id = session_id
        self.expected = expected
        self.actual = actual
        super().__init__(
            f"session {session_id!r}: expected to append at sequence {expected}, but the "
            f"store holds {actual} events (another writer advanced the session){detail}; "
            "nothing was written"
        )


class SessionLeased(StoreError):
    """Another worker holds the session's lease (or took it over from this one), or
    this worker lost its lease and nobody holds it now.

    Attributes:
        session_id: the session.
        owner: the lease's holder (``None``: nobody holds it now, e.g. another run
            with the same owner id released it).
        expires: when that lease expires (the store's clock, seconds since the
            epoch), or ``None``.
        expires_in: how many more seconds the lease lasts (``0.0`` when nobody
            holds it): how long to wait before trying again.
        host, pid: the holder's process (its host name and process id), when the
            lease records it (leases taken by agentloop before schema 5 do not).
    """

    def __init__(
        self,
        session_id: str,
        owner: str | None,
        expires: float | None,
        detail: str = "",
        *,
        now: float | None = None,
        host: str | None = None,
        pid: int | None = None,
    ) -> None:
        self.session_id = session_id
        self.owner = owner
        self.expires = expires
        self.host = host
        self.pid = pid
        if owner is None or expires is None:
            self.expires_in = 0.0
            message = f"session {session_id!r}: nobody holds its lease{detail}"
        else:
            self.expires_in = max(0.0, expires - (time.time() if now is None else now))
            process = "" if host is None else f" (process {pid} on host {host!r})"
            message = (
                f"session {session_id!r} is leased by {owner!r}{process} for "
                f"{self.expires_in:.1f} more seconds (until {expires:.3f} on the store's "
                f"clock){detail}"
            )
        super().__init__(message)


# --------------------------------------------------------------------------- data


class SessionInfo(msgspec.Struct, frozen=True, kw_only=True):
    """One row of :meth:`SQLiteStore.sessions`.

    Attributes:
        id: the session id.
        status: ``running``, ``paused`` (parked on a pause, waiting for
            :func:`replay.answer`), or how the run ended (``completed``,
            ``cancelled``, ``max_steps``, ``failed``).
        steps: the step number reached (model requests made).
        events: how many events are stored (the next sequence number).
        created: when the session was stored (the store's clock).
        updated: the last commit.
        lease_owner: the worker holding the lease, or ``None``.
        lease_expires: when that lease expires, or ``None``.
        answered: an answer waits to be applied (a parked session).
        queued: messages (``Steer``, ``FollowUp``) recorded with
            :func:`replay.answer` and not delivered yet. A finished session
            keeps those that came after its last boundary (too late for the run).
        config: the configuration recorded in ``session.start`` (``system``,
            ``max_steps``, ``budget``, ``tools``: names, ``request_sequence_start``);
            empty for a run that failed before it started (``INVALID_TRANSCRIPT``).
    """

    id: str
    status: str
    steps: int
    events: int
    created: float
    updated: float
    lease_owner: str | None = None
    lease_expires: float | None = None
    answered: bool = False
    config: dict[str, Any] = msgspec.field(default_factory=dict)
    queued: int = 0

    @property
    def finished(self) -> bool:
        """Whether the run ended (nothing more will be appended)."""
        return self.status in _FINISHED


def _session_config(start: Event) -> dict[str, Any]:
    """The JSON ``config`` of a session, from its first event."""
    if type(start) is not agentloop.SessionStartEvent:
        return {}
    config: dict[str, Any] = {
        "system": start.system,
        "max_steps": start.max_steps,
        # Every field, as listed before log format 2 left defaults out.
        "budget": None
        if start.budget is None
        else {name: getattr(start.budget, name) for name in Budget.__struct_fields__},
        "tools": [spec.name for spec in start.tools],
        "request_sequence_start": start.request_sequence_start,
    }
    if start.handoffs:  # its agents (DESIGN §26): what a worker's factory must serve
        config["agent"] = start.agent
        config["handoffs"] = {spec.name: [t.name for t in spec.tools] for spec in start.handoffs}
    if start.parent is not None:  # a child session (DESIGN §26): SQLiteStore.children
        link = start.parent
        config["parent"] = {"session": link.session, "call_id": link.call_id, "depth": link.depth}
    return config


_answer_decoder: Final = msgspec.json.Decoder(Resume | Cancel)
_queued_decoder: Final = msgspec.json.Decoder(Steer | FollowUp)
_config_decoder: Final = msgspec.json.Decoder(dict[str, Any])

_SESSION_COLUMNS: Final = (
    "id, status, steps, next_sequence, created, updated, lease_owner, lease_expires, config, "
    "EXISTS (SELECT 1 FROM answers WHERE answers.session_id = sessions.id), "
    "(SELECT count(*) FROM queued WHERE queued.session_id = sessions.id)"
)


# The row a durable run reads: the listing's columns, the log's format and header,
# and the lease holder's process.
_LOAD_SESSION: Final = (
    f"SELECT {_SESSION_COLUMNS}, log_format, log_header, lease_host, lease_pid, lease_start, "
    "number FROM sessions WHERE id = ?"
)
# Where the session's number (schema 6: its events' keys) is in that row.
_NUMBER: Final = 16


#: What :meth:`SQLiteStore._claim_in` read: the session's row, its event rows and blob
#: rows, whether it leased the session, and when.
_Claim = tuple[Any, list[Any], list[Any], bool, float]


def _info(row: tuple[Any, ...]) -> SessionInfo:
    return SessionInfo(
        id=row[0],
        status=row[1],
        steps=row[2],
        events=row[3],
        created=row[4],
        updated=row[5],
        lease_owner=row[6],
        lease_expires=row[7],
        config=_config_decoder.decode(row[8]),
        answered=bool(row[9]),
        queued=row[10],
    )


def _encode_answer(
    reply: Resume | Cancel | Steer | FollowUp, decoder: msgspec.json.Decoder[Any] = _answer_decoder
) -> bytes:
    """The stored form of an answer (or of a queued message, with ``decoder``);
    refuses what would not come back the same.

    Raises:
        ValueError: it holds values JSON cannot hold exactly (NaN, ±inf, tuples,
            non-string keys, lone surrogates, objects), a container that contains
            itself, or a payload nested deeper than :data:`MAX_ANSWER_DEPTH`.
    """
    if type(reply) is Resume:
        problem = answer_problem(reply.payload)
        if problem is not None:
            raise ValueError(f"the answer cannot be stored: {problem}")
    try:
        data = msgspec.json.encode(reply)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"the answer cannot be stored as JSON: {exc}") from None
    try:
        same = decoder.decode(data) == reply
    except msgspec.ValidationError:  # e.g. a message that is not a UserMessage
        same = False
    if not same:
        raise ValueError(
            f"the answer does not survive a JSON round trip unchanged ({reply!r}): use "
            "plain JSON values (dicts with str keys, lists, str, finite numbers, bools, None)"
        )
    return data


# --------------------------------------------------------------------------- the store


StrPath = str | os.PathLike[str]


class SQLiteStore:
    """Durable sessions in one SQLite file (stdlib ``sqlite3``, WAL mode, zero config).

    >>> store = SQLiteStore(":memory:")
    >>> store.sessions()
    []
    >>> store.close()

    Args:
        path: the database file (created with the schema if missing), or
            ``":memory:"`` for a private in-memory store (tests).
        synchronous: ``"NORMAL"`` (default: commits survive a killed process; the
            last ones may roll back after a power loss) or ``"FULL"`` (every
            commit is synced to disk).
        timeout: seconds to wait for another process's write transaction (a
            finite number, 0 or more).
        clock: the store's clock for ``created``/``updated`` and leases (default
            ``time.time``; shared by every process using the file).

    Raises:
        ValueError, TypeError: a bad option (``synchronous``, ``timeout``, ``clock``).
        StoreVersionError: the file is another kind of database, or a store with a
            newer schema than this library opens.
        StoreError: the file cannot be opened as a database.

    Attributes:
        path: the file.
        commits: how many batches of events this object committed
            (:meth:`create` and :meth:`append`; lease and answer writes are not
            counted): what group commit keeps low.
    """

    def __init__(
        self,
        path: StrPath,
        *,
        synchronous: Literal["NORMAL", "FULL"] = "NORMAL",
        timeout: float = 30.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if synchronous not in ("NORMAL", "FULL"):
            raise ValueError(f"synchronous must be 'NORMAL' or 'FULL', got {synchronous!r}")
        if not callable(clock):
            raise TypeError(f"clock must be callable, got {clock!r}")
        if type(timeout) not in (int, float) or not 0 <= timeout < math.inf:
            raise ValueError(
                "timeout must be a finite number of seconds, 0 or more (how long to wait "
                f"for another process's write transaction), got {timeout!r}"
            )
        self.path = os.fspath(path)
        self.commits = 0
        self._timeout = float(timeout)
        self._busy_timeout = f"PRAGMA busy_timeout = {round(timeout * 1000)}"
        self._clock = clock
        self._lock = threading.RLock()
        self._db: sqlite3.Connection | None = None
        # Where the chains of recently read or written sessions end (see _continue).
        self._chains: dict[str, tuple[int, _Format2, str, int]] = {}
        try:
            db = sqlite3.connect(
                self.path, timeout=timeout, isolation_level=None, check_same_thread=False
            )
        except sqlite3.Error as exc:  # e.g. its directory does not exist
            raise StoreError(f"{self.path}: cannot open the store: {exc}") from None
        try:
            _enter_wal(db, timeout)
            db.execute(f"PRAGMA synchronous={synchronous}")
            db.execute("PRAGMA foreign_keys=ON")
            _migrate(db, self.path, MIGRATIONS, float(clock()))
        except sqlite3.DatabaseError as exc:
            db.close()
            raise StoreError(f"{self.path}: cannot open the store: {exc}") from None
        except BaseException:
            db.close()
            raise
        self._db = db
        # The append's statements go through one cursor (Connection.execute makes a
        # new one for every statement).
        self._execute = db.cursor().execute

    # ------------------------------------------------------------------ plumbing

    def _connection(self) -> sqlite3.Connection:
        """The connection, with no transaction open (call it holding the lock)."""
        db = self._db
        if db is None:
            raise StoreError(f"{self.path}: the store is closed")
        if db.in_transaction:
            # Left open by a call that a KeyboardInterrupt stopped between two
            # statements (e.g. just after BEGIN): nothing of it was committed.
            _rollback(db)
        return db

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """One write transaction (``BEGIN IMMEDIATE``: the write lock up front, so a
        concurrent writer waits instead of failing half-way; see :meth:`_begin`)."""
        with self._lock:
            db = self._connection()
            self._begin(db.execute)
            try:
                yield db
                db.execute("COMMIT")
            except BaseException:
                _rollback(db)
                raise

    def _begin(self, execute: Callable[[str], Any]) -> None:
        """``BEGIN IMMEDIATE``, waiting for another connection's write transaction
        in short naps (50 µs, doubled up to 0.5 ms) until the store's ``timeout``.
        SQLite's own wait sleeps 1, 2, 5, 10, 15, 20, 25 ms... between its tries:
        a lock held for a millisecond kept its waiters asleep for several, and with
        several worker processes on one file that sleep was CPU left idle
        (bench/fleet.py, 4 processes of 16 tasks: about 10% fewer sessions per
        second). ``append`` (one session's commit, the common write of a single
        run) keeps SQLite's wait: it saves the two pragmas this takes."""
        execute("PRAGMA busy_timeout = 0")
        try:
            _until_unlocked(execute, "BEGIN IMMEDIATE", self._timeout, 0.00005, 0.0005)
        finally:
            execute(self._busy_timeout)

    @contextmanager
    def _read(self) -> Iterator[sqlite3.Connection]:
        """A consistent snapshot for several reads."""
        with self._lock:
            db = self._connection()
            db.execute("BEGIN")
            try:
                yield db
            finally:
                db.execute("COMMIT")

    def now(self) -> float:
        """The store's clock."""
        return float(self._clock())

    @property
    def schema_version(self) -> int:
        """The schema version of the file (:data:`SCHEMA_VERSION` once opened)."""
        with self._lock:
            row = self._connection().execute("SELECT max(version) FROM schema_version").fetchone()
        return int(row[0])

    def close(self) -> None:
        """Close the connection (idempotent); later calls raise :class:`StoreError`."""
        with self._lock:
            db, self._db = self._db, None
            if db is not None:
                db.close()

    def __enter__(self) -> SQLiteStore:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._db is None else f"schema {self.schema_version}"
        return f"<SQLiteStore {self.path!r} {state}>"

    # ------------------------------------------------------------------ reading

    def sessions(self, *, status: str | None = None) -> list[SessionInfo]:
        """Every session (or those with ``status``), oldest first.

        This is what ``python -m replay sessions DB`` lists (id, status, steps,
        updated).
        """
        query = f"SELECT {_SESSION_COLUMNS} FROM sessions"
        parameters: tuple[str, ...] = ()
        if status is not None:
            if status not in SESSION_STATUSES:
                raise ValueError(f"status must be one of {SESSION_STATUSES}, got {status!r}")
            query += " WHERE status = ?"
            parameters = (status,)
        with self._lock:
            rows = self._connection().execute(query + " ORDER BY created, id", parameters)
            return [_info(row) for row in rows.fetchall()]

    def find(self, session_id: str) -> SessionInfo | None:
        """The session's row, or ``None``."""
        with self._lock:
            row = (
                self._connection()
                .execute(f"SELECT {_SESSION_COLUMNS} FROM sessions WHERE id = ?", (session_id,))
                .fetchone()
            )
        return None if row is None else _info(row)

    def session(self, session_id: str) -> SessionInfo:
        """The session's row.

        Raises:
            SessionNotFound: no such session.
        """
        info = self.find(session_id)
        if info is None:
            raise SessionNotFound(session_id)
        return info

    def children(self, session_id: str) -> list[str]:
        """The ids of the child sessions of ``session_id`` (its agent tools' runs,
        DESIGN §26), oldest first: the sessions whose ``session.start`` names it as
        their parent. Empty for a session without children, or none stored."""
        # A child's id is "<parent>/<call id>": a range of the primary key holds
        # them all ("0" follows "/"), and the recorded link tells a child from a
        # session whose own id merely starts so.
        with self._lock:
            rows = (
                self._connection()
                .execute(
                    "SELECT id, config FROM sessions WHERE id >= ? AND id < ? ORDER BY created, id",
                    (session_id + "/", session_id + "0"),
                )
                .fetchall()
            )
        return [
            row[0]
            for row in rows
            if _config_decoder.decode(row[1]).get("parent", {}).get("session") == session_id
        ]

    def events(self, session_id: str) -> list[Event]:
        """The session's events, in order (what ``show DB --session ID`` reads).

        Each stored event is checked as :func:`replay.read_log` checks a line: its
        hash chain link, that it decodes, that it is byte for byte what the writer
        writes for it (format 1's canonical form for a session stored in format 1),
        and that its sequence number is its row's. (The story is checked by
        :func:`replay.replay`, as for a file.)

        The session's row is checked against its rows too: as many events as it
        counts (none deleted from the end, none added), and a status that agrees
        with how the log ends.

        Raises:
            SessionNotFound: no such session.
            StoreError: a stored event is damaged (names the session and sequence),
                or the row disagrees with the rows (names what is missing or wrong).
        """
        return self.load(session_id)[1]

    def load(self, session_id: str) -> tuple[SessionInfo, list[Event]]:
        """The session's row and its events, read together (one snapshot).

        Raises:
            SessionNotFound, StoreError: as for :meth:`events`.
        """
        info, events, _, _, _ = self._load(session_id)
        return info, events

    def _load(self, session_id: str) -> tuple[SessionInfo, list[Event], Any, list[Any], list[Any]]:
        """:meth:`load`, and the session's log header, rows and blob rows as stored."""
        with self._read() as db:
            try:
                row = db.execute(_LOAD_SESSION, (session_id,)).fetchone()
                rows = db.execute(_SELECT_ROWS, (session_id, session_id)).fetchall()
                blobs = db.execute(_SELECT_BLOBS, (session_id,)).fetchall()
            except sqlite3.Error as exc:  # e.g. a row that is not valid UTF-8
                raise _damaged(db, self.path, session_id, exc) from None
        if row is None:
            raise SessionNotFound(session_id)
        events = self._events_of(session_id, row, rows, blobs)
        return _info(row), events, row[12], rows, blobs

    def _events_of(
        self, session_id: str, row: Any, rows: list[Any], blobs: list[Any]
    ) -> list[Event]:
        """The session's events from its rows, checked (``row``: its
        :data:`_LOAD_COLUMNS`)."""
        log_format, header = row[11], row[12]
        self._check_format(session_id, log_format)
        events, format2 = _read_rows(session_id, log_format, header, rows, blobs)
        _check_log(session_id, row[1], row[3], events)
        if format2 is not None:
            self._remember(session_id, len(events), format2, row[1], row[_NUMBER])
        return events

    def _claim(
        self, session_id: str, owner: str, lease_seconds: float, *, paused: bool
    ) -> tuple[SessionInfo, list[Event], bool]:
        """Read the session and lease it to ``owner``, in one transaction (what a
        durable run does first): the row, the events, and whether it is leased.

        It is leased (as :meth:`acquire` does) unless it is finished, or parked
        on a pause with no answer waiting and not ``paused`` (nothing of this
        run would answer it). The caller releases the lease should the events
        not do.

        Raises:
            SessionNotFound: no such session.
            SessionLeased: another owner holds a live lease.
            StoreError: as for :meth:`events` (nothing was leased).
        """
        _check_lease(owner, lease_seconds)
        with self._write() as db:
            claim = self._claim_in(db, session_id, owner, lease_seconds, paused, None)
        return self._claimed(session_id, owner, lease_seconds, claim)

    def _claim_in(
        self,
        db: sqlite3.Connection,
        session_id: str,
        owner: str,
        lease_seconds: float,
        paused: bool,
        row: Any,
    ) -> _Claim:
        """:meth:`_claim`'s reads and lease, in the open write transaction (``row``:
        the session's :data:`_LOAD_SESSION` row when already read)."""
        now = 0.0
        try:
            if row is None:
                row = db.execute(_LOAD_SESSION, (session_id,)).fetchone()
                if row is None:
                    raise SessionNotFound(session_id)
            status = row[1]
            lease = status not in _FINISHED and (status != "paused" or row[9] or paused)
            if lease:
                now = self.now()
                self._lease(db, session_id, owner, lease_seconds, now, *row[6:8], *row[13:16])
            rows = db.execute(_SELECT_ROWS, (session_id, session_id)).fetchall()
            blobs = db.execute(_SELECT_BLOBS, (session_id,)).fetchall()
        except sqlite3.Error as exc:  # e.g. a row that is not valid UTF-8
            raise _damaged(db, self.path, session_id, exc) from None
        return row, rows, blobs, lease, now

    def _claimed(
        self, session_id: str, owner: str, lease_seconds: float, claim: _Claim
    ) -> tuple[SessionInfo, list[Event], bool]:
        """What :meth:`_claim` returns, from what :meth:`_claim_in` read (the events
        decoded and checked outside the transaction; the lease released should
        they not do)."""
        row, rows, blobs, lease, now = claim
        try:
            events = self._events_of(session_id, row, rows, blobs)
        except BaseException:
            if lease:
                self.release(session_id, owner)
            raise
        info = _info(row)
        if lease:
            info = msgspec.structs.replace(
                info, lease_owner=owner, lease_expires=now + lease_seconds
            )
        return info, events, lease

    def _claim_some(
        self,
        candidates: collections.deque[str],
        owner: str,
        lease_seconds: float,
        listed: Mapping[str, str | None] | None,
        count: int,
    ) -> tuple[list[tuple[str, _Claim | None]], int, bool]:
        """A worker's claim (DESIGN §29): the first ``count`` of ``candidates``
        (listed by :meth:`runnable`, taken from the left as they are looked at) that
        are still runnable, read and leased to ``owner`` in one write transaction,
        as :meth:`_claim` does (a thread claims one at a time, an event loop for
        its free tasks at once); those leased by another live owner, finished, or
        gone since they were listed are passed over inside that transaction (a
        read each: no exception, no events read, nothing written).

        ``listed``: the lease owner each candidate had when it was listed
        (:meth:`_runnable`). A candidate whose live lease is another owner's now
        -- another worker claimed it after the listing -- is passed over without
        looking whether that owner's process is gone (a read of ``/proc`` per
        candidate, inside the write transaction: several per claim when several
        worker processes walk the same list); should it be, the next listing
        lists it with that owner, and the claim then takes it over (so a worker
        lists again before it ends when a claim passed one over unlooked).

        Returns:
            ``(claims, passed over, unlooked)``: ``claims`` are ``(session_id,
            claim)``, ``claim`` for :meth:`_claimed` (not leased: a parked tree's
            root whose run leases it itself), or ``None`` when the session's rows
            cannot be read (nothing was leased: its run says what is wrong; a
            session after the first ends the batch so, a savepoint undoing its
            lease, those before it claimed); ``[]`` when none of the candidates
            was left. ``passed over`` counts those another worker took or finished
            first, not those whose live lease the listing already showed (a look
            at each relisting, not a race lost: they would count again at every
            listing); ``unlooked``: one passed over was leased since the listing
            (its holder not looked at).
        """
        skipped = 0
        unlooked = False
        claims: list[tuple[str, _Claim | None]] = []
        session_id: str | None = None
        try:
            with self._write() as db:
                now = self.now()
                while candidates and len(claims) < count:
                    session_id = candidates.popleft()
                    row = db.execute(_LOAD_SESSION, (session_id,)).fetchone()
                    if row is None or row[1] in _FINISHED:
                        skipped += 1
                        continue
                    holder, expires = row[6:8]
                    if _leased(owner, now, holder, expires):
                        seen = holder if listed is None else listed.get(session_id, holder)
                        if seen not in (holder, ""):  # (leased since the listing)
                            skipped += 1
                            unlooked = True
                            continue
                        if not gone(*row[13:16]):
                            # (Leased already when listed: a look, not a race lost.)
                            if listed is None or listed.get(session_id) != holder:
                                skipped += 1
                            continue
                    if not claims:
                        claims.append(
                            (
                                session_id,
                                self._claim_in(db, session_id, owner, lease_seconds, False, row),
                            )
                        )
                        continue
                    db.execute("SAVEPOINT claim")
                    try:
                        claim = self._claim_in(db, session_id, owner, lease_seconds, False, row)
                    except (sqlite3.Error, StoreError):
                        db.execute("ROLLBACK TO claim")
                        claims.append((session_id, None))
                        break
                    finally:
                        db.execute("RELEASE claim")
                    claims.append((session_id, claim))
        except (sqlite3.Error, StoreError):
            if session_id is None:  # (no candidate was looked at: e.g. BEGIN failed)
                raise
            # Its row or rows cannot be read (its lease, if any, was rolled back; so
            # were those of the batch: they are listed again later).
            return [(session_id, None)], skipped, unlooked
        return claims, skipped, unlooked

    def _check_format(self, session_id: str, log_format: int) -> None:
        if log_format > LOG_FORMAT_VERSION:
            raise StoreVersionError(
                f"{self.path}: session {session_id!r} is stored in log format version "
                f"{log_format}, newer than this agentloop ({agentloop.__version__}) reads "
                f"(up to {LOG_FORMAT_VERSION}); upgrade agentloop",
                version=log_format,
            )

    def export(self, session_id: str, path: StrPath) -> int:
        """Write the session's log to a JSONL log file, atomically (as
        :func:`replay.write_log` does).

        The file holds the stored lines and links as they are (checked first): the
        log file :class:`replay.LogWriter` would have written for the run, which
        ``python -m replay verify`` verifies. A session still stored in log
        format 1 is written in format 2.

        Returns:
            How many events were written.

        Raises:
            SessionNotFound, StoreError: as for :meth:`events`.
        """
        _, events, header, rows, blobs = self._load(session_id)
        if header is None:  # format 1: no chain to copy
            write_log(path, events)
        else:
            start = _start(header).link.decode()
            _write_lines(path, [_file_line(header, start), *_lines_of(rows, blobs)])
        return len(events)

    def answer_for(self, session_id: str) -> Resume | Cancel | None:
        """The answer waiting for a parked session, or ``None``."""
        with self._lock:
            row = (
                self._connection()
                .execute("SELECT reply FROM answers WHERE session_id = ?", (session_id,))
                .fetchone()
            )
        return None if row is None else _answer_decoder.decode(row[0])

    def queued_for(self, session_id: str, *, after: int = 0) -> list[tuple[int, Steer | FollowUp]]:
        """The messages waiting for the session (:meth:`queue`), oldest first, as
        ``(number, reply)``; only those numbered above ``after``."""
        with self._lock:
            return self._queued(self._connection(), session_id, after)

    def runnable(self) -> list[str]:
        """Sessions a worker could advance now, oldest update first: ``running``
        ones whose lease is free, expired, or held by a process of this host that
        is gone (their worker died), and parked ones with an answer waiting.

        A child session of an agent tree (DESIGN §26) is never listed: its root
        is, in its place (when the root's lease is free as well), since the
        child's run belongs inside its parent's call."""
        return list(self._runnable())

    def _runnable(self) -> dict[str, str | None]:
        """:meth:`runnable`, each with the lease owner the listing saw (``None``:
        free; a root listed in a child's place: ``""``, unknown). A worker's claim
        passes over a session leased to another owner since, without looking
        whether that owner's process is gone (see :meth:`_claim_some`)."""
        now = self.now()
        host = this_process()[0]
        with self._lock:
            db = self._connection()
            found = db.execute(
                "SELECT id, lease_owner IS NULL OR lease_expires <= ?, lease_host, lease_pid, "
                "lease_start, lease_owner FROM sessions WHERE (lease_owner IS NULL OR "
                "lease_expires <= ? OR lease_host = ?) AND (status = 'running' OR (status = "
                "'paused' AND id IN (SELECT session_id FROM answers))) ORDER BY updated, id",
                (now, now, host),
            ).fetchall()
            listed: dict[str, str | None] = {}
            for session_id, free, lease_host, pid, start, holder in found:
                if not (free or gone(lease_host, pid, start)):
                    continue
                if "/" in session_id:  # perhaps a child: "<parent>/<call id>"
                    root = self._root_of(db, session_id, now, host)
                    if root is None:
                        continue
                    if root != session_id:
                        listed[root] = ""
                        continue
                listed.setdefault(session_id, holder)
        return listed

    def _root_of(
        self, db: sqlite3.Connection, session_id: str, now: float, host: str
    ) -> str | None:
        """The root of the tree ``session_id`` is in (itself when it has no parent),
        or ``None`` when that root is finished or leased by a live worker."""
        root, seen = session_id, {session_id}
        link = self._parent_of(db, session_id)
        while link is not None and link not in seen:  # (a hand-edited cycle ends)
            root = link
            seen.add(link)
            link = self._parent_of(db, link)
        if root == session_id:
            return root
        row = db.execute(
            "SELECT status, lease_owner IS NULL OR lease_expires <= ?, lease_host, lease_pid, "
            "lease_start FROM sessions WHERE id = ?",
            (now, root),
        ).fetchone()
        if row is None or row[0] not in ("running", "paused"):
            return None
        return root if row[1] or gone(*row[2:]) else None

    @staticmethod
    def _parent_of(db: sqlite3.Connection, session_id: str) -> str | None:
        """The parent session a stored child links to (its ``config``), or ``None``."""
        row = db.execute("SELECT config FROM sessions WHERE id = ?", (session_id,)).fetchone()
        if row is None:
            return None
        parent = _config_decoder.decode(row[0]).get("parent")
        return parent.get("session") if isinstance(parent, dict) else None

    # ------------------------------------------------------------------ writing

    def create(
        self,
        session_id: str,
        events: Sequence[Event],
        *,
        status: str,
        steps: int,
        owner: str | None = None,
        lease_seconds: float = 0.0,
    ) -> None:
        """Store a new session with its first events (one transaction).

        With ``owner``, the new session is leased to it for ``lease_seconds``
        (unless ``status`` is ``paused`` or a finished one: such a session holds no
        lease).

        Raises:
            StoreConflict: a session with that id exists already (another writer
                created it first); nothing was written.
            ValueError: bad arguments (no events, events not numbered from 0, an
                unknown status, or one that disagrees with how the events end:
                see :func:`_status_problem`).
        """
        _check_status(status)
        if not events:
            raise ValueError(f"session {session_id!r}: a new session needs its first events")
        _check_batch(session_id, 0, events)
        _check_batch_status(session_id, status, events)
        header = (_header_body() + b"}").decode()
        format2 = _start(header)
        blobs: list[tuple[Any, ...]] = []
        count = len(events)
        config = msgspec.json.encode(_session_config(events[0])).decode()
        now = self.now()
        if status in _UNLEASED:
            owner = None
        expires = None if owner is None else now + lease_seconds
        host, pid, start = (None, None, None) if owner is None else this_process()
        with self._write() as db:
            found = db.execute(
                "SELECT next_sequence FROM sessions WHERE id = ?", (session_id,)
            ).fetchone()
            if found is not None:
                raise StoreConflict(session_id, 0, found[0], " (it was created by another writer)")
            number = db.execute("SELECT coalesce(max(number), 0) + 1 FROM sessions").fetchone()[0]
            db.execute(
                "INSERT INTO sessions (id, status, steps, next_sequence, created, updated, "
                "lease_owner, lease_expires, config, log_format, log_header, lease_host, "
                "lease_pid, lease_start, number) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    session_id,
                    status,
                    steps,
                    count,
                    now,
                    now,
                    owner,
                    expires,
                    config,
                    LOG_FORMAT_VERSION,
                    header,
                    host,
                    pid,
                    start,
                    number,
                ),
            )
            _insert_values(
                db.execute, _stored_values(session_id, number << 32, events, format2, blobs)
            )
            if blobs:
                db.executemany(_INSERT_BLOBS, blobs)
        self.commits += 1
        self._remember(session_id, count, format2, status, number)

    def append(
        self,
        session_id: str,
        events: Sequence[Event],
        *,
        expected: int,
        status: str,
        steps: int,
        owner: str | None = None,
        lease_seconds: float = 0.0,
        consume_answer: bool = False,
        consume_queued: int = 0,
        poll_queued: int | None = None,
    ) -> list[tuple[int, Steer | FollowUp]]:
        """Append a batch of events to a session, atomically (group commit).

        Args:
            events: the new events; the first must have sequence ``expected``.
            expected: where the caller believes the session continues (its number
                of stored events). If another writer appended meanwhile, nothing is
                written.
            status, steps: the session's status and step after these events.
            owner: the lease holder making the append; it must still hold the
                lease (its expiry is renewed by ``lease_seconds`` from now).
                ``None`` skips the lease check. When ``status`` is ``paused`` (the
                session parks) or a finished one, the lease is released in the same
                transaction: such a session holds no lease, even if its worker dies
                right after.
            consume_answer: also delete the session's recorded answer (it was
                applied: these events record it).
            consume_queued: also delete the session's queued messages numbered up
                to this (:meth:`queued_for`; they were delivered: these events
                record them).
            poll_queued: look first for queued messages numbered above this (as
                :meth:`queued_for` ``after=``), in the same transaction: if there
                are any, nothing is written and they are returned (the durable
                runner delivers them before the effect it was about to commit
                for). ``None``: do not look.

        Returns:
            The queued messages found by ``poll_queued`` (nothing was written), or
            ``[]`` (the batch was written).

        Raises:
            SessionNotFound: no such session.
            StoreConflict: the session does not continue at ``expected``.
            SessionLeased: ``owner`` does not hold the lease (any more).
            ValueError: the events are not numbered from ``expected`` on, or an
                unknown status (or one that disagrees with how the batch ends).
        """
        _check_status(status)
        _check_batch(session_id, expected, events)
        if events:
            _check_batch_status(session_id, status, events)
        now = self.now()
        with self._lock:
            db = self._connection()
            execute = self._execute
            execute("BEGIN IMMEDIATE")
            try:
                done = self._append_in(
                    db,
                    session_id,
                    events,
                    expected,
                    status,
                    steps,
                    owner,
                    None if owner is None else now + lease_seconds,
                    now,
                    consume_answer,
                    consume_queued,
                    poll_queued,
                )
                execute("COMMIT")
            except BaseException:
                _rollback(db)
                raise
            if type(done) is list:
                return done
            self.commits += 1
            self._keep(session_id, *done)
        return []

    def _append_in(
        self,
        db: sqlite3.Connection,
        session_id: str,
        events: Sequence[Event],
        expected: int,
        status: str,
        steps: int,
        owner: str | None,
        lease: float | None,
        now: float,
        consume_answer: bool,
        consume_queued: int,
        poll_queued: int | None,
        rows: list[Any] | None = None,
        encoded: _Encoded | None = None,
    ) -> list[tuple[int, Steer | FollowUp]] | tuple[int, _Format2, str, int]:
        """:meth:`append`'s work in the open write transaction (its arguments
        checked): the queued messages ``poll_queued`` found (nothing was written),
        or what to :meth:`_keep` of the session's chain once the transaction
        commits. With ``rows``, the values of the events' rows (see
        :func:`_stored_values`) are added to it instead of inserted (the caller
        inserts them, in the same transaction). ``encoded``:
        the events encoded beforehand from the chain this object remembered (see
        :func:`_encoded`), used if the session still continues that chain."""
        execute = self._execute
        unleased = status in _UNLEASED
        # One statement checks and moves the session on in the common case
        # (the chain's end as remembered, no message waiting, the status
        # unchanged: the status index is left alone); when it matches
        # nothing, the next ones find out why.
        chain, same_status, number = None, False, -1
        remembered = self._chains.get(session_id)
        if remembered is not None:
            number = remembered[3]
            if remembered[0] == expected:
                chain, same_status = remembered[1], remembered[2] == status
        if chain is not None and same_status and not unleased:
            moved = execute(
                _APPEND_SAME_STATUS,
                (
                    expected + len(events),
                    steps,
                    now,
                    lease,
                    session_id,
                    expected,
                    status,
                    owner,
                    owner,
                    poll_queued,
                    session_id,
                    poll_queued,
                    (number << 32) + expected - 1,
                    chain.link.decode(),
                ),
            ).rowcount
        else:
            moved = 0
        if chain is None or moved != 1:
            if poll_queued is not None:
                waiting = self._queued(db, session_id, poll_queued)
                if waiting:
                    return waiting  # (nothing was written)
            moved = execute(
                _APPEND,
                (
                    expected + len(events),
                    status,
                    steps,
                    now,
                    unleased,
                    unleased,
                    lease,
                    unleased,
                    unleased,
                    unleased,
                    session_id,
                    expected,
                    owner,
                    owner,
                ),
            ).rowcount
            if moved != 1:
                actual, holder, expires = _row(
                    db, session_id, "next_sequence, lease_owner, lease_expires"
                )
                if actual != expected:
                    raise StoreConflict(session_id, expected, actual)
                raise _lease_lost(session_id, str(owner), holder, expires, now)
            if number < 0:  # (not remembered)
                number = _row(db, session_id, "number")[0]
            continued = self._continue(db, session_id, expected, chain, number)
        else:
            continued = chain
        if continued is not chain:  # (the chain as read from the rows)
            format2, stored = continued, None
        elif encoded is not None and encoded[0] is chain:  # (encoded before the transaction)
            _, format2, stored, blobs = encoded
        else:
            format2, stored = continued.copy(), None
        if stored is None:
            blobs = []
            stored = _stored_values(session_id, number << 32, events, format2, blobs)
        if rows is None:
            _insert_values(execute, stored)
        else:
            rows += stored
        if blobs:
            db.executemany(_INSERT_BLOBS, blobs)
        if consume_answer:
            execute("DELETE FROM answers WHERE session_id = ?", (session_id,))
        if consume_queued:
            execute(
                "DELETE FROM queued WHERE session_id = ? AND id <= ?",
                (session_id, consume_queued),
            )
        return expected + len(events), format2, status, number

    def _append_group(
        self, batches: Sequence[tuple[str, Sequence[Event], Mapping[str, Any]]]
    ) -> list[list[tuple[int, Steer | FollowUp]] | Exception]:
        """Several sessions' appends (``(session_id, events, append's options)``
        each) in one write transaction: one ``BEGIN``/``COMMIT`` for all (a worker's
        group commit, DESIGN §29). Each gives what :meth:`append` would return, or
        the exception it would raise, its session unchanged: the transaction is
        rolled back and made again without it (no savepoint per session: refusals
        are rare, statements are not); the others are written all the same. A
        failure of the store itself (``sqlite3.Error``) writes none and is raised.
        The events of all are inserted together (one ``INSERT`` per 64 rows); so a
        session has at most one batch in a group (a second is refused)."""
        results: list[list[tuple[int, Steer | FollowUp]] | Exception] = []
        grouped: set[str] = set()
        for session_id, events, options in batches:
            try:
                if session_id in grouped:
                    raise ValueError(f"session {session_id!r}: a second batch in one group")
                grouped.add(session_id)
                _check_status(options["status"])
                _check_batch(session_id, options["expected"], events)
                if events:
                    _check_batch_status(session_id, options["status"], events)
            except ValueError as exc:
                results.append(exc)
                continue
            results.append([])
        # The events encoded (and hashed) before the write lock is taken, from the
        # chains as remembered: the common case; the others are encoded inside.
        chains = self._chains
        encoded = [
            None
            if isinstance(result, Exception)
            else _encoded(chains.get(session_id), session_id, events, options["expected"])
            for (session_id, events, options), result in zip(batches, results, strict=True)
        ]
        now = self.now()
        with self._lock:
            db = self._connection()
            execute = self._execute
            while True:
                kept: list[tuple[str, tuple[int, _Format2, str, int]]] = []
                rows: list[Any] = []  # (the values of the INSERT of every session's events)
                refused = False
                self._begin(execute)
                try:
                    for index, (session_id, events, options) in enumerate(batches):
                        if isinstance(results[index], Exception):
                            continue
                        owner = options.get("owner")
                        try:
                            done = self._append_in(
                                db,
                                session_id,
                                events,
                                options["expected"],
                                options["status"],
                                options["steps"],
                                owner,
                                None if owner is None else now + options.get("lease_seconds", 0.0),
                                now,
                                options.get("consume_answer", False),
                                options.get("consume_queued", 0),
                                options.get("poll_queued"),
                                rows,
                                encoded[index],
                            )
                        except sqlite3.Error:
                            raise  # (the store's own failure: all of it goes back)
                        except Exception as exc:  # (e.g. an event that cannot be encoded)
                            results[index] = exc
                            refused = True
                            break
                        if isinstance(done, list):
                            results[index] = done
                        else:
                            kept.append((session_id, done))
                    if refused:  # (what it or the others wrote goes back: again without it)
                        _rollback(db)
                        continue
                    _insert_values(execute, rows)
                    execute("COMMIT")
                except BaseException:
                    _rollback(db)
                    raise
                break
            self.commits += len(kept)
            for session_id, done in kept:
                self._keep(session_id, *done)
        return results

    # ------------------------------------------------------------------ the chain

    def _remember(
        self, session_id: str, count: int, format2: _Format2, status: str, number: int
    ) -> None:
        """Keep where the session's chain ends after ``count`` events, and its
        status (for the next append: the durable runner reads a session, then
        appends to it)."""
        with self._lock:
            self._keep(session_id, count, format2, status, number)

    def _keep(
        self, session_id: str, count: int, format2: _Format2, status: str, number: int
    ) -> None:
        """:meth:`_remember`, the lock held (an append's last step)."""
        chains = self._chains
        chains.pop(session_id, None)
        chains[session_id] = (count, format2, status, number)
        if len(chains) > _CHAINS_KEPT:
            del chains[next(iter(chains))]  # the least recently used

    def _continue(
        self,
        db: sqlite3.Connection,
        session_id: str,
        count: int,
        chain: _Format2 | None,
        number: int,
    ) -> _Format2:
        """The state that the session's next line continues, its ``count`` events
        stored (in the open write transaction).

        The remembered state (``chain``: where the chain ended when this object
        last read or wrote ``count`` events) serves when the stored link of event
        ``count - 1`` is its link (the chain then vouches for every row before):
        it is returned itself (copy it before writing with it).
        Otherwise the rows are read and checked; a session stored in format 1 is
        rewritten as format 2 (the same events) in this transaction.
        """
        if chain is not None:
            found = db.execute(_LAST_LINK, ((number << 32) + count - 1,)).fetchone()
            if found is not None and found[0] == chain.link.decode():
                return chain
        log_format, header = _row(db, session_id, "log_format, log_header")
        self._check_format(session_id, log_format)
        try:
            rows = db.execute(_SELECT_ROWS, (session_id, session_id)).fetchall()
            blobs = db.execute(_SELECT_BLOBS, (session_id,)).fetchall()
        except sqlite3.Error as exc:
            raise _damaged(db, self.path, session_id, exc) from None
        events, format2 = _read_rows(session_id, log_format, header, rows, blobs)
        _check_log(session_id, None, count, events)
        if format2 is None:
            header = (_header_body() + b"}").decode()
            format2 = _start(header)
            db.executemany(
                "UPDATE events SET event = ?, link = ? WHERE event_key = ?",
                [
                    (event, link, key)
                    for key, _, event, link in _stored_rows(
                        session_id,
                        number << 32,
                        events,
                        format2,
                        [],  # (format 1 holds no media)
                    )
                ],
            )
            db.execute(
                "UPDATE sessions SET log_format = ?, log_header = ? WHERE id = ?",
                (LOG_FORMAT_VERSION, header, session_id),
            )
        return format2

    @staticmethod
    def _queued(
        db: sqlite3.Connection, session_id: str, after: int
    ) -> list[tuple[int, Steer | FollowUp]]:
        rows = db.execute(_SELECT_QUEUED, (session_id, after)).fetchall()
        return [(row[0], _queued_decoder.decode(row[1])) for row in rows]

    def acquire(self, session_id: str, owner: str, lease_seconds: float) -> SessionInfo:
        """Lease the session to ``owner`` for ``lease_seconds`` (or renew its lease).

        The lease records this process (host, pid, start time). A lease is taken
        over when it expired (its worker died or stalled, on any host), or at once
        when its holder is a process of this host that is gone (killed, crashed:
        no process has its pid any more, or another one does; see
        ``replay._process``).

        A finished session is never leased (its row is returned as it is): the
        worker that finished it released its lease in the commit that finished
        it, and nothing would release one taken now should this worker die before
        it sees that the session is finished (nobody runs a finished session).

        Returns:
            The session's row, now leased to ``owner`` (unless it is finished).

        Raises:
            SessionNotFound: no such session.
            SessionLeased: another owner holds a live lease.
        """
        _check_lease(owner, lease_seconds)
        now = self.now()
        with self._write() as db:
            status, *holder = _row(
                db,
                session_id,
                "status, lease_owner, lease_expires, lease_host, lease_pid, lease_start",
            )
            if status not in _FINISHED:  # (else another worker finished it meanwhile)
                self._lease(db, session_id, owner, lease_seconds, now, *holder)
        return self.session(session_id)

    @staticmethod
    def _lease(
        db: sqlite3.Connection,
        session_id: str,
        owner: str,
        lease_seconds: float,
        now: float,
        holder: str | None,
        expires: float | None,
        holder_host: str | None,
        holder_pid: int | None,
        holder_start: str | None,
    ) -> None:
        """Lease the session to ``owner`` (in the open write transaction), unless
        another owner holds a live lease (:class:`SessionLeased`)."""
        if _held(owner, now, holder, expires, holder_host, holder_pid, holder_start):
            assert holder is not None and expires is not None  # (what _held checked)
            raise SessionLeased(
                session_id,
                holder,
                expires,
                _leased_detail(session_id, holder, holder_host),
                now=now,
                host=holder_host,
                pid=holder_pid,
            )
        host, pid, start = this_process()
        db.execute(
            "UPDATE sessions SET lease_owner = ?, lease_expires = ?, lease_host = ?, "
            "lease_pid = ?, lease_start = ? WHERE id = ?",
            (owner, now + lease_seconds, host, pid, start, session_id),
        )

    def renew(self, session_id: str, owner: str, lease_seconds: float) -> bool:
        """Extend ``owner``'s lease to ``lease_seconds`` from now.

        Returns:
            ``False`` when ``owner`` does not hold the lease any more (nothing changed).
        """
        _check_lease(owner, lease_seconds)
        now = self.now()
        with self._write() as db:
            cursor = db.execute(
                "UPDATE sessions SET lease_expires = ? WHERE id = ? AND lease_owner = ?",
                (now + lease_seconds, session_id, owner),
            )
            return cursor.rowcount == 1

    def release(self, session_id: str, owner: str) -> bool:
        """Give up ``owner``'s lease (another worker may take the session at once).

        Returns:
            ``False`` when ``owner`` did not hold it.
        """
        with self._write() as db:
            cursor = db.execute(
                "UPDATE sessions SET lease_owner = NULL, lease_expires = NULL, lease_host = NULL, "
                "lease_pid = NULL, lease_start = NULL WHERE id = ? AND lease_owner = ?",
                (session_id, owner),
            )
            return cursor.rowcount == 1

    def put_answer(self, session_id: str, reply: Resume | Cancel) -> None:
        """Record the answer to a parked session's pause (see :func:`replay.answer`).

        Raises:
            TypeError: ``reply`` is not a ``Resume`` or a ``Cancel``.
            ValueError: see :func:`_encode_answer`.
            SessionNotFound: no such session.
            StoreError: the session is not parked (``paused``), or it already has
                an answer waiting.
        """
        if type(reply) is not Resume and type(reply) is not Cancel:
            raise TypeError(f"an answer is a Resume or a Cancel, got {reply!r}")
        data = _encode_answer(reply).decode()
        now = self.now()
        with self._write() as db:
            status, sequence = _row(db, session_id, "status, next_sequence")
            if status != "paused":
                raise StoreError(
                    f"session {session_id!r} is not parked on a pause (status {status!r}); "
                    "only a paused session takes an answer"
                )
            taken = db.execute(
                "SELECT reply FROM answers WHERE session_id = ?", (session_id,)
            ).fetchone()
            if taken is not None:
                raise StoreError(
                    f"session {session_id!r} already has an answer waiting "
                    f"({taken[0]}); the first answer wins"
                )
            db.execute(
                "INSERT INTO answers (session_id, sequence, reply, created) VALUES (?, ?, ?, ?)",
                (session_id, sequence, data, now),
            )

    def queue(self, session_id: str, reply: Steer | FollowUp) -> int:
        """Queue a message for the session (see :func:`replay.answer`): the worker
        advancing it delivers it at its next side-effect boundary.

        Returns:
            The message's number (they only grow).

        Raises:
            TypeError: ``reply`` is not a ``Steer`` or a ``FollowUp``.
            ValueError: see :func:`_encode_answer`; or its message id is already
                taken by another queued message, or is in a namespace the loop
                makes ids in (``message-``, ``tool-result-``, ``output-retry-``).
            SessionNotFound: no such session.
            StoreError: the session has finished.
        """
        if type(reply) is not Steer and type(reply) is not FollowUp:
            raise TypeError(f"a queued message is a Steer or a FollowUp, got {reply!r}")
        data = _encode_answer(reply, _queued_decoder).decode()
        reserved = reserved_id_problem(reply.message.id)
        if reserved is not None:
            raise ValueError(f"session {session_id!r}: {type(reply).__name__}.{reserved}")
        now = self.now()
        with self._write() as db:
            (status,) = _row(db, session_id, "status")
            if status in _FINISHED:
                raise StoreError(
                    f"session {session_id!r} has finished ({status}): there is no run left "
                    f"to take a {type(reply).__name__}"
                )
            rows = db.execute("SELECT reply FROM queued WHERE session_id = ?", (session_id,))
            for (text,) in rows.fetchall():
                if _queued_decoder.decode(text).message.id == reply.message.id:
                    raise ValueError(
                        f"session {session_id!r}: message id {reply.message.id!r} is already "
                        "taken by a queued message"
                    )
            cursor = db.execute(
                "INSERT INTO queued (session_id, reply, created) VALUES (?, ?, ?)",
                (session_id, data, now),
            )
            number = cursor.lastrowid
        assert number is not None
        return number


# --------------------------------------------------------------------------- helpers


def _migrate(
    db: sqlite3.Connection, path: str, migrations: Sequence[Migration], now: float
) -> None:
    """Bring the file to the newest schema, in one transaction (or refuse it)."""
    db.execute("BEGIN IMMEDIATE")
    try:
        application_id = db.execute("PRAGMA application_id").fetchone()[0]
        tables = {
            row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
        }
        if application_id != APPLICATION_ID and (application_id != 0 or tables):
            raise StoreVersionError(
                f"{path}: not an agentloop store (a SQLite database of another kind: "
                f"application_id {application_id:#x}, tables {sorted(tables)})"
            )
        current = 0
        if tables:
            current = db.execute("SELECT max(version) FROM schema_version").fetchone()[0]
        if current > len(migrations):
            raise StoreVersionError(
                f"{path}: the store's schema version {current} is newer than this agentloop "
                f"({agentloop.__version__}) opens (up to {len(migrations)}); upgrade agentloop",
                version=current,
            )
        if current == 0:
            db.execute(f"PRAGMA application_id = {APPLICATION_ID}")
            db.execute(
                "CREATE TABLE schema_version (version INTEGER PRIMARY KEY, "
                "applied REAL NOT NULL, library TEXT NOT NULL)"
            )
        for version in range(current + 1, len(migrations) + 1):
            step = migrations[version - 1]
            if callable(step):
                step(db)
            else:
                for statement in step:
                    db.execute(statement)
            db.execute(
                "INSERT INTO schema_version (version, applied, library) VALUES (?, ?, ?)",
                (version, now, agentloop.__version__),
            )
        db.execute("COMMIT")
    except BaseException:
        _rollback(db)
        raise


def _enter_wal(db: sqlite3.Connection, timeout: float) -> None:
    """``PRAGMA journal_mode=WAL``, waiting up to ``timeout`` for other connections.

    SQLite does not call the busy handler for this pragma: when another process
    holds a lock on the file (two workers opening a new store at the same moment),
    it fails at once with "database is locked". So wait here as the busy handler
    would, with a short backoff, until the timeout.
    """
    _until_unlocked(db.execute, "PRAGMA journal_mode=WAL", timeout, 0.001, 0.05)


def _until_unlocked(
    execute: Callable[[str], Any], sql: str, timeout: float, nap: float, longest: float
) -> None:
    """``execute(sql)`` again while it fails with "database is locked" (another
    connection holds the lock it needs), sleeping ``nap`` seconds, doubled each
    time up to ``longest``, between tries, until ``timeout`` seconds have passed."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            execute(sql)
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() >= deadline:
                raise
        time.sleep(nap)
        nap = min(nap * 2, longest)


def _rollback(db: sqlite3.Connection) -> None:
    # (A failed COMMIT may have ended the transaction already.)
    with contextlib.suppress(sqlite3.Error):
        db.execute("ROLLBACK")


def _row(db: sqlite3.Connection, session_id: str, columns: str) -> tuple[Any, ...]:
    """These columns of the session's row (in the open transaction).

    Raises:
        SessionNotFound: no such session.
    """
    found = db.execute(f"SELECT {columns} FROM sessions WHERE id = ?", (session_id,)).fetchone()
    if found is None:
        raise SessionNotFound(session_id)
    return tuple(found)


def _check_status(status: str) -> None:
    if status not in SESSION_STATUSES:
        raise ValueError(f"status must be one of {SESSION_STATUSES}, got {status!r}")


def _check_lease(owner: str, lease_seconds: float) -> None:
    if type(owner) is not str or not owner or not (owner.isascii() or clean_text(owner)):
        raise ValueError(f"a lease owner is a non-empty str (valid Unicode), got {owner!r}")
    if (
        type(lease_seconds) not in (int, float)
        or not math.isfinite(lease_seconds)
        or lease_seconds <= 0
    ):
        raise ValueError(f"lease_seconds must be a positive number, got {lease_seconds!r}")


def _leased_detail(session_id: str, holder: str, host: str | None) -> str:
    """What to do about a live lease (in :class:`SessionLeased`'s message)."""
    free = (
        f"free the session at once with store.release({session_id!r}, {holder!r}); "
        f"a worker restarted with owner={holder!r} takes it back at once"
    )
    if host == this_process()[0]:
        return (
            ": another worker is running it (its process is alive, on this host). Wait "
            "for it to finish, or until the lease expires, and call again; should that "
            f"process be killed, the next call takes the session over at once; or {free}"
        )
    where = "on another host" if host is not None else "from a process that is not recorded"
    return (
        f": another worker is running it ({where}, which this process cannot see). Wait "
        "until the lease expires and call again; if that worker is known to be dead "
        f"(its process was killed), {free}"
    )


def _lease_lost(
    session_id: str, owner: str, holder: str | None, expires: float | None, now: float
) -> SessionLeased:
    if holder is None:
        detail = (
            f"; {owner!r} lost it (it was released: by another run with the same owner id, "
            "or after it expired and was taken over) and wrote nothing; run the session "
            "again to continue it (an owner id names one worker: concurrent runs need "
            "different ones)"
        )
    else:
        detail = f"; {owner!r} lost it (its lease expired) and wrote nothing"
    return SessionLeased(session_id, holder, expires, detail, now=now)


def _status_problem(status: str, events: Sequence[Event]) -> str | None:
    """How a session status disagrees with the log it is the status of, or ``None``.

    A finished session's log ends with its ``run.finished`` (of that status); a
    parked one's with the ``session.pause`` it waits at (messages delivered there,
    ``message.queued``, may follow); a running one's is not finished.
    """
    last = events[-1]
    if status in _FINISHED:
        if type(last) is not agentloop.RunFinishedEvent:
            return f"status {status!r} says the run finished, but the log ends with {last.type}"
        if last.status != status:
            return f"status {status!r} disagrees with the log's run.finished ({last.status!r})"
        return None
    if type(last) is agentloop.RunFinishedEvent:
        return f"status {status!r} says the run goes on, but the log ends with run.finished"
    if status == "paused":
        waiting = next(
            (event for event in reversed(events) if type(event) is not MessageQueuedEvent), last
        )
        # (A parent waits at its tool.call while the child session it runs is
        # parked: DESIGN §26.)
        if (
            type(waiting) is not agentloop.SessionPauseEvent
            and type(waiting) is not agentloop.ToolCallEvent
        ):
            return (
                f"status 'paused' says the run waits at a pause, but the log ends with {last.type}"
            )
    return None


def _check_batch_status(session_id: str, status: str, events: Sequence[Event]) -> None:
    problem = _status_problem(status, events)
    if problem is not None:
        raise ValueError(f"session {session_id!r}: {problem} (the status must agree with the log)")


def _check_log(session_id: str, status: str | None, count: int, events: Sequence[Event]) -> None:
    """The session row agrees with its rows: as many events as it counts (none lost
    from the end, none added), and (``status``, when given) its status with the log.

    Raises:
        StoreError: naming the session and what is missing or wrong.
    """
    stored = len(events)
    if not count:
        raise StoreError(f"session {session_id!r}: the session row counts no events")
    if stored < count:
        missing = (
            f"event #{stored} is"
            if count - stored == 1
            else f"events #{stored} to #{count - 1} are"
        )
        raise StoreError(
            f"session {session_id!r}: the session row counts {count} events but only {stored} "
            f"are stored: {missing} missing (deleted or lost); the stored log is not the "
            "whole session"
        )
    if stored > count:
        raise StoreError(
            f"session {session_id!r}: the session row counts {count} events but {stored} are "
            f"stored: events #{count} to #{stored - 1} were added behind the store's back"
        )
    if status is not None:
        problem = _status_problem(status, events)
        if problem is not None:
            raise StoreError(f"session {session_id!r}: the session row's {problem}")


def _damaged(db: sqlite3.Connection, path: str, session_id: str, exc: sqlite3.Error) -> StoreError:
    """The error for a session whose rows SQLite could not read: names the row and
    column that is not valid UTF-8 when that is the cause (bit rot, an edit)."""
    where = f"session {session_id!r}"
    with contextlib.suppress(sqlite3.Error):
        found = db.execute(
            "SELECT CAST(status AS BLOB), CAST(config AS BLOB), CAST(log_header AS BLOB), "
            "CAST(lease_owner AS BLOB) FROM sessions WHERE id = ?",
            (session_id,),
        ).fetchone()
        for column, data in zip(
            ("status", "config", "log_header", "lease_owner"), found or (), strict=False
        ):
            problem = _not_utf8(data)
            if problem is not None:
                return StoreError(f"{where}: the session row's {column} is damaged: {problem}")
        rows = db.execute(
            "SELECT sequence, CAST(event AS BLOB), CAST(link AS BLOB) FROM events "
            f"WHERE {_OF_SESSION} ORDER BY event_key",
            (session_id, session_id),
        )
        for sequence, event, link in rows:
            for column, data in (("event", event), ("link", link)):
                problem = _not_utf8(data)
                if problem is not None:
                    return StoreError(
                        f"{where}, event #{sequence}: the stored {column} is damaged: {problem}"
                    )
    return StoreError(f"{path}: {where}: the store cannot be read: {exc}")


def _not_utf8(data: bytes | None) -> str | None:
    if data is None:
        return None
    try:
        data.decode()
    except UnicodeDecodeError as exc:
        return f"not valid UTF-8 ({exc.reason} at byte {exc.start})"
    return None


# --------------------------------------------------------------------------- stored lines

# A session's events are keyed by its number times 2**32 plus their sequence.
_MAX_EVENTS: Final = 1 << 32
# A session's range of event keys (its number times 2**32, and up), by its id (the
# first two parameters, both the id: numbered ones, ``?1``, bound from a sequence
# are deprecated on Python 3.12).
_OF_SESSION: Final = (
    "event_key >= (SELECT number << 32 FROM sessions WHERE id = ?) "
    "AND event_key < (SELECT (number + 1) << 32 FROM sessions WHERE id = ?)"
)
_SELECT_ROWS: Final = (
    f"SELECT sequence, event, link FROM events WHERE {_OF_SESSION} ORDER BY event_key"
)
_SELECT_BLOBS: Final = (
    "SELECT sequence, hash, media_type, data, link FROM blobs WHERE session_id = ? "
    "ORDER BY sequence, position"
)
_INSERT_BLOBS: Final = (
    "INSERT INTO blobs (session_id, hash, sequence, position, media_type, data, link) "
    "VALUES (?, ?, ?, ?, ?, ?, ?)"
)
# Sessions whose chain's end a store object remembers (each: a link and three events).
_CHAINS_KEPT: Final = 256

_SELECT_QUEUED: Final = "SELECT id, reply FROM queued WHERE session_id = ? AND id > ? ORDER BY id"
_LAST_LINK: Final = "SELECT link FROM events WHERE event_key = ?"

# An append (see SQLiteStore.append): the session's row moves on if it continues at
# the expected sequence and the lease is the appender's; the status columns and
# the lease's release are set as the status says.
_APPEND: Final = (
    "UPDATE sessions SET next_sequence = ?, status = ?, steps = ?, updated = ?, "
    "lease_owner = CASE WHEN ? THEN NULL ELSE lease_owner END, "
    "lease_expires = CASE WHEN ? THEN NULL ELSE coalesce(?, lease_expires) END, "
    "lease_host = CASE WHEN ? THEN NULL ELSE lease_host END, "
    "lease_pid = CASE WHEN ? THEN NULL ELSE lease_pid END, "
    "lease_start = CASE WHEN ? THEN NULL ELSE lease_start END "
    "WHERE id = ? AND next_sequence = ? AND (? IS NULL OR lease_owner = ?)"
)
# The common append, in one statement: the same status (its index untouched), the
# lease kept, no message waiting (when asked), and the chain's end as remembered
# (the stored link of the last event): then the remembered chain state continues.
_APPEND_SAME_STATUS: Final = (
    "UPDATE sessions SET next_sequence = ?, steps = ?, updated = ?, "
    "lease_expires = coalesce(?, lease_expires) "
    "WHERE id = ? AND next_sequence = ? AND status = ? AND (? IS NULL OR lease_owner = ?) "
    "AND (? IS NULL OR NOT EXISTS (SELECT 1 FROM queued WHERE session_id = ? AND id > ?)) "
    "AND (SELECT link FROM events WHERE event_key = ?) = ?"
)


def _start(header: str) -> _Format2:
    """The format-2/3 state before a session's first event: its header's link."""
    version = 2 if '"version":2,' in header else LOG_FORMAT_VERSION
    return _Format2(_link(b"", header.encode()[:-1]), version)


def _blob_line(hash: Any, media_type: Any, data: Any, link: Any) -> bytes:
    """A stored blob as its line of the log file (line end included)."""
    body = _encode(_BlobLine(hash, media_type, len(data), data))[:-1]
    return body + _LINK_KEY + str(link).encode() + b'"}\n'


def _lines_of(rows: Sequence[Any], blobs: Sequence[Any]) -> Iterator[bytes]:
    """The lines of the log file of a session's (checked) rows and blob rows."""
    pending = iter(blobs)
    blob = next(pending, None)
    for sequence, text, link in rows:
        while blob is not None and blob[0] == sequence:
            yield _blob_line(*blob[1:])
            blob = next(pending, None)
        yield _file_line(text, link)


def _file_line(text: str, link: str) -> bytes:
    """A stored line (a JSON object without its link member) as the log file has it."""
    return text.encode()[:-1] + _LINK_KEY + link.encode() + b'"}\n'


# An INSERT of n event rows in one statement, n up to _ROWS_PER_INSERT (one run of
# the statement instead of n: cheaper than executemany).
_ROWS_PER_INSERT: Final = 64
_INSERTS: Final = {
    count: "INSERT INTO events (event_key, sequence, event, link) VALUES "
    + ", ".join(["(?, ?, ?, ?)"] * count)
    for count in range(1, _ROWS_PER_INSERT + 1)
}


def _insert_values(execute: Callable[[str, Sequence[Any]], Any], values: list[Any]) -> None:
    """Insert event rows with ``execute`` (a connection's or a cursor's), given as
    their values, four a row (see :func:`_stored_values`)."""
    count = len(values) >> 2
    if 0 < count <= _ROWS_PER_INSERT:  # (the common case: one INSERT, no slice)
        execute(_INSERTS[count], values)
        return
    for first in range(0, len(values), 4 * _ROWS_PER_INSERT):
        chunk = values[first : first + 4 * _ROWS_PER_INSERT]
        execute(_INSERTS[len(chunk) >> 2], chunk)


def _held(
    owner: str,
    now: float,
    holder: str | None,
    expires: float | None,
    host: str | None,
    pid: int | None,
    start: str | None,
) -> bool:
    """Whether another owner than ``owner`` holds a live lease: not expired at
    ``now``, its process not known to be gone (same-machine takeover, DESIGN §29)."""
    return _leased(owner, now, holder, expires) and not gone(host, pid, start)


def _leased(owner: str, now: float, holder: str | None, expires: float | None) -> bool:
    """Whether another owner than ``owner`` has a lease not expired at ``now`` (its
    process not looked at: see :func:`_held`)."""
    return holder is not None and holder != owner and expires is not None and expires > now


def _check_batch(session_id: str, start: int, events: Sequence[Event]) -> None:
    if start + len(events) > _MAX_EVENTS:
        raise ValueError(
            f"session {session_id!r}: a session holds at most {_MAX_EVENTS} events (2**32: "
            f"its events' keys), this batch would take it to {start + len(events)}"
        )
    for offset, event in enumerate(events):
        if event.sequence != start + offset:
            raise ValueError(
                f"session {session_id!r}: event {event.type} has sequence {event.sequence}, "
                f"expected {start + offset} (a batch continues the session, in order)"
            )


#: Events encoded before their write transaction: the chain they continue (as
#: remembered), the state after them, their rows' values (see :func:`_stored_values`)
#: and media rows.
_Encoded = tuple["_Format2", "_Format2", list[Any], list[tuple[Any, ...]]]


def _encoded(
    remembered: tuple[int, _Format2, str, int] | None,
    session_id: str,
    events: Sequence[Event],
    expected: int,
) -> _Encoded | None:
    """``events`` encoded to continue the remembered chain (``SQLiteStore._chains``'
    entry), if it ends where they start; else ``None``. (A remembered state is
    never changed once kept: this may run without the store's lock.)"""
    if remembered is None or remembered[0] != expected or not events:
        return None
    chain = remembered[1]
    format2 = chain.copy()
    blobs: list[tuple[Any, ...]] = []
    try:
        values = _stored_values(session_id, remembered[3] << 32, events, format2, blobs)
    except Exception:  # (inside the transaction, it fails again: for this session alone)
        return None
    return chain, format2, values, blobs


def _stored_values(
    session_id: str,
    base: int,
    events: Sequence[Event],
    format2: _Format2,
    blobs: list[tuple[Any, ...]],
) -> list[Any]:
    """The rows of ``events`` (numbered as the session continues: see
    :func:`_check_batch`) as the values of their ``INSERT``, four a row: the
    event's key (``base``, the session's number times 2**32, plus its sequence),
    the sequence, the event's log line without its link, and the link; advances
    ``format2``. The blob lines before each event (format 3) are added to
    ``blobs``, as their rows."""
    values: list[Any] = []
    done = format2.rows(events, 0, base, values)  # (the common case: all of them)
    while done < len(events):  # events[done] holds media bytes: blob lines first
        sequence = events[done].sequence
        for position, (body, link, blob) in enumerate(format2.parts(events[done])):
            if blob is None:
                values += (base + sequence, sequence, bytes(body).decode() + "}", link.decode())
            else:
                blobs.append(
                    (
                        session_id,
                        blob.blob,
                        sequence,
                        position,
                        blob.media_type,
                        blob.data,
                        link.decode(),
                    )
                )
        done = format2.rows(events, done + 1, base, values)
    return values


def _stored_rows(
    session_id: str,
    base: int,
    events: Sequence[Event],
    format2: _Format2,
    blobs: list[tuple[Any, ...]],
) -> list[tuple[int, int, str, str]]:
    """:func:`_stored_values`, a tuple a row."""
    values = _stored_values(session_id, base, events, format2, blobs)
    return list(zip(values[0::4], values[1::4], values[2::4], values[3::4], strict=True))


def _read_blob_row(session_id: str, format2: _Format2, row: Any, where: _Where) -> None:
    """Check a stored blob (a blob line of the session's log) and keep its bytes."""
    _, hash, media_type, data, link = row
    if type(data) is not bytes or type(hash) is not str or type(media_type) is not str:
        raise StoreError(where.text(f"blob {hash!r:.80}: the stored row is damaged (not bytes)"))
    actual = hashlib.sha256(data).hexdigest()
    if actual != hash:  # (before the chain, which the rebuilt line breaks too)
        raise StoreError(
            where.text(f"blob {hash!r:.80} is damaged: its bytes hash to {actual} (SHA-256)")
        )
    line = _blob_line(hash, media_type, data, link)
    try:
        format2.read(line, len(line) - 1, where)
    except LogFormatError as exc:
        raise StoreError(str(exc)) from None


class _RowWhere(_Where):
    """Words a stored line's problem as the store does: the session and the event."""

    __slots__ = ()

    def text(self, problem: str) -> str:
        return f"{self.path}, event #{self.number}: {problem}"


def _read_rows(
    session_id: str,
    log_format: int,
    header: Any,
    rows: Sequence[Any],
    blobs: Sequence[Any] = (),
) -> tuple[list[Event], _Format2 | None]:
    """The events of a session's rows, each checked as :func:`replay.read_log`
    checks a line of its format; and the format-2 state after the last (``None``
    for format 1)."""
    where = _RowWhere(f"session {session_id!r}")
    format2: _Format2 | None = None
    read: Callable[[bytes, int, _Where], Event | None] = _read_v1
    if log_format != 1:
        if type(header) is not str:
            raise StoreError(f"session {session_id!r}: its log header is missing")
        format2 = _start(header)
        read = format2.read
    events: list[Event] = []
    pending = iter(blobs)
    blob = next(pending, None)
    for position, (sequence, data, link) in enumerate(rows):
        where.number = sequence
        while blob is not None and blob[0] == sequence and format2 is not None:
            _read_blob_row(session_id, format2, blob, where)
            blob = next(pending, None)
        if sequence != position:
            raise StoreError(where.text(f"the stored events have a gap (expected #{position})"))
        if type(data) is not str:
            raise StoreError(where.text(f"the stored event is not text ({type(data).__name__})"))
        line = data.encode()
        if format2 is not None:
            line = line[:-1] + _LINK_KEY + (link if type(link) is str else "").encode() + b'"}'
        try:
            event = read(line, len(line), where)
        except LogFormatError as exc:
            raise StoreError(str(exc)) from None
        if event is None:
            raise StoreError(where.text("the stored event is a blob line"))
        if event.sequence != sequence:
            raise StoreError(where.text(f"the stored event says sequence {event.sequence}"))
        events.append(event)
    return events, format2
