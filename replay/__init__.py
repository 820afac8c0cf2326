"""replay: read and write agentloop event logs, replay them without a model.

- :func:`read_log` / :func:`write_log` / :class:`LogWriter`: JSONL log files with a
  versioned header and a hash chain over the lines (edits, torn last lines and
  joined sessions are detected, never accepted as data).
- :func:`replay`: run a log through the loop again and check every event, byte
  for byte; the first difference raises :class:`ReplayDivergence`.
- :func:`state_at`, :func:`resume`, :func:`fork`: inspect a run at any event,
  continue it in another process, or branch it.
- :class:`SQLiteStore`, :func:`run_durable` (:func:`arun_durable`), :func:`answer`:
  durable sessions in an embedded SQLite store (crash-safe, parked pauses,
  steering, several workers).
- :class:`Worker` (:func:`work`, :func:`submit`): run every runnable session of a
  store with a pool of threads, rate-limited per provider (``python -m replay worker``).
- :func:`view` / :func:`view_html`: a log as one self-contained HTML page.
- ``python -m replay show|check|diff|stats|verify|view|otel LOG``: the same from a shell.

Uses :mod:`agentloop`'s public API and, beyond it, only the internal interface
``agentloop._spi`` declares (DESIGN §24; ``tests/test_architecture.py`` enforces
it). Its exceptions derive from ``agentloop.AgentLoopError``. Logs to
``logging.getLogger("replay")`` (a ``NullHandler``; see docs/observability.md).
"""

import logging as _logging
import typing as _typing

_logging.getLogger(__name__).addHandler(_logging.NullHandler())

if _typing.TYPE_CHECKING:  # pragma: no cover - for type checkers; at run time see __getattr__
    from ._diff import diff_events, summarize
    from ._durable import Parked, answer, arun_durable, run_durable, submit
    from ._log import (
        LOG_FORMAT,
        LOG_FORMAT_VERSION,
        MAX_LINE_BYTES,
        LogError,
        LogFormatError,
        LogIntegrityError,
        LogVersionError,
        LogWriter,
        TornLogError,
        read_log,
        write_log,
    )
    from ._replay import (
        LoopSnapshot,
        ReplayDivergence,
        ReplayError,
        ReplayResult,
        fork,
        recorded_replies,
        replay,
        resume,
        state_at,
    )
    from ._store import (
        MAX_ANSWER_DEPTH,
        SCHEMA_VERSION,
        SessionInfo,
        SessionLeased,
        SessionNotFound,
        SQLiteStore,
        StoreConflict,
        StoreError,
        StoreVersionError,
    )
    from ._tree import child_log_path, write_tree
    from ._view import view, view_html
    from ._worker import RateLimit, SessionSetup, Worker, WorkerError, WorkerStats, work

# Names are imported on first use, so that loading the pytest plugin (an entry point
# of this package) costs nothing in test sessions that never use it.
_LAZY = {
    "diff_events": "._diff",
    "summarize": "._diff",
    **dict.fromkeys(
        (
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
        ),
        "._log",
    ),
    **dict.fromkeys(
        (
            "LoopSnapshot",
            "ReplayDivergence",
            "ReplayError",
            "ReplayResult",
            "fork",
            "recorded_replies",
            "replay",
            "resume",
            "state_at",
        ),
        "._replay",
    ),
    **dict.fromkeys(("Parked", "answer", "arun_durable", "run_durable", "submit"), "._durable"),
    **dict.fromkeys(
        ("RateLimit", "SessionSetup", "Worker", "WorkerError", "WorkerStats", "work"), "._worker"
    ),
    **dict.fromkeys(("view", "view_html"), "._view"),
    **dict.fromkeys(("child_log_path", "write_tree"), "._tree"),
    **dict.fromkeys(
        (
            "MAX_ANSWER_DEPTH",
            "SCHEMA_VERSION",
            "SQLiteStore",
            "SessionInfo",
            "SessionLeased",
            "SessionNotFound",
            "StoreConflict",
            "StoreError",
            "StoreVersionError",
        ),
        "._store",
    ),
}


def __getattr__(name: str) -> _typing.Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'replay' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


__all__ = [
    "LOG_FORMAT",
    "LOG_FORMAT_VERSION",
    "MAX_ANSWER_DEPTH",
    "MAX_LINE_BYTES",
    "SCHEMA_VERSION",
    "LogError",
    "LogFormatError",
    "LogIntegrityError",
    "LogVersionError",
    "LogWriter",
    "LoopSnapshot",
    "Parked",
    "RateLimit",
    "ReplayDivergence",
    "ReplayError",
    "ReplayResult",
    "SQLiteStore",
    "SessionInfo",
    "SessionLeased",
    "SessionNotFound",
    "SessionSetup",
    "StoreConflict",
    "StoreError",
    "StoreVersionError",
    "TornLogError",
    "Worker",
    "WorkerError",
    "WorkerStats",
    "answer",
    "arun_durable",
    "child_log_path",
    "diff_events",
    "fork",
    "read_log",
    "recorded_replies",
    "replay",
    "resume",
    "run_durable",
    "state_at",
    "submit",
    "summarize",
    "view",
    "view_html",
    "work",
    "write_log",
    "write_tree",
]
