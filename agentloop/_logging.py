"""Standard-library logging for the drivers (DESIGN §22).

The library logs to ``logging.getLogger("agentloop")`` (and its children, e.g.
``agentloop.models`` for retries) and ``logging.getLogger("replay")``; each has a
``NullHandler``, so nothing is printed unless the application configures logging.

- DEBUG: one record per event, formatted lazily (the event's JSON line, as a log
  file holds it, is only built if a handler formats the record).
- INFO: one record per run end (status, reason, steps, usage).
- WARNING: retries and fallbacks (``agentloop.models``).

The engine never logs (it does no I/O). A driver asks :func:`follow` once per run,
before the first event: if the logger is enabled for DEBUG at that moment, it
subscribes one function to the run's :class:`~agentloop.EventLog`; otherwise
nothing is subscribed and a step costs exactly what it cost without logging.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Final

from ._codec import encode_event
from ._events import Event, EventLog
from ._protocol import RunResult

__all__ = ["follow", "logger", "run_finished"]

logger: Final = logging.getLogger("agentloop")
logger.addHandler(logging.NullHandler())


class _EventLine:
    """The event's JSON line, built when a handler formats the record."""

    __slots__ = ("event",)

    def __init__(self, event: Event) -> None:
        self.event = event

    def __str__(self) -> str:
        return encode_event(self.event).decode()


def follow(log: EventLog, to: logging.Logger = logger) -> Callable[[], None] | None:
    """Log each later event of ``log`` at DEBUG to ``to``, if DEBUG is enabled now.

    Returns the function that stops it, or ``None`` when nothing was subscribed.
    Each record has the event itself as its ``agentloop_event`` attribute.
    """
    if not to.isEnabledFor(logging.DEBUG):
        return None
    debug = to.debug

    def on_event(event: Event) -> None:
        debug(
            "#%d %s: %s",
            event.sequence,
            event.type,
            _EventLine(event),
            extra={"agentloop_event": event},
        )

    return log.subscribe(on_event)


def run_finished(result: RunResult | None, to: logging.Logger = logger) -> None:
    """Log a finished run at INFO: status, reason, steps and usage.

    The record has the :class:`~agentloop.RunResult` as its ``agentloop_result``
    attribute. ``None`` (the run did not finish) logs nothing.
    """
    if result is None or not to.isEnabledFor(logging.INFO):
        return
    usage = result.usage
    reason = f" ({result.reason})" if result.reason else ""
    error = f"; {result.error.code}: {result.error.message}" if result.error is not None else ""
    to.info(
        "run %s%s: %d of %d steps, %d input + %d output tokens%s",
        result.status,
        reason,
        result.steps,
        result.max_steps,
        usage.input_tokens,
        usage.output_tokens,
        error,
        extra={"agentloop_result": result},
    )
