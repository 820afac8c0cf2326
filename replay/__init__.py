"""replay: read and write agentloop event logs, replay them without a model.

- :func:`read_log` / :func:`write_log` / :class:`LogWriter`: JSONL log files with a
  versioned header (torn last lines are detected, never accepted as data).
- :func:`replay`: run a log through the loop again and check every event, byte
  for byte; the first difference raises :class:`ReplayDivergence`.
- :func:`state_at`, :func:`resume`, :func:`fork`: inspect a run at any event,
  continue it in another process, or branch it.
- ``python -m replay show|check|diff|stats LOG``: the same from a shell.

Uses only :mod:`agentloop`'s public API.
"""

from ._diff import diff_events, summarize
from ._log import (
    LOG_FORMAT,
    LOG_FORMAT_VERSION,
    LogError,
    LogFormatError,
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

__all__ = [
    "LOG_FORMAT",
    "LOG_FORMAT_VERSION",
    "LogError",
    "LogFormatError",
    "LogVersionError",
    "LogWriter",
    "LoopSnapshot",
    "ReplayDivergence",
    "ReplayError",
    "ReplayResult",
    "TornLogError",
    "diff_events",
    "fork",
    "read_log",
    "recorded_replies",
    "replay",
    "resume",
    "state_at",
    "summarize",
    "write_log",
]
