"""One run's mutable state, and how a run ends (the engine's shared parts).

:class:`Run` holds everything a reply can change -- the lifecycle state, the step,
the transcript and its ids, usage and budget counters, the pending effect, the
queued messages, the lifecycle flags and the sticky error -- in one object with
``__slots__``. :class:`~agentloop.AgentLoop` and its delegates (``_calls``,
``_pauses``) read and write it; nothing else does. :meth:`Run.set` is the only
place the state changes (the table in ``_state``); :meth:`Run.queue` and
:meth:`Run.deliver` keep the steering and follow-up messages.

Errors are sticky (as in h11): once :attr:`Run.error` is set, every later
``send()`` raises it again and nothing more is recorded.

Control flow inside the generator uses three private exceptions: :class:`_Finish`
(the run ends: completed, max_steps, failed), :class:`_Cancelled` (a ``Cancel`` or
``close()``) and :class:`_Misuse` (the caller broke the protocol). The hook runners
(:func:`run_hooks`, :func:`observe`) turn a hook's failure into a :class:`_Finish`.
"""

from __future__ import annotations

import contextlib
from typing import Any

from ._budget import Budget
from ._errors import HOOK_ABORT, HOOK_ERROR, CallerProtocolError
from ._events import EventLog, MessageAcceptedEvent, MessageQueuedEvent
from ._hooks import SKIP, HookAbort, PauseRequest
from ._messages import Message
from ._protocol import Cancel, Effect, FollowUp, Reply, RunError, RunResult, Steer, Usage
from ._state import TRANSITIONS, IllegalTransition, Input, State
from ._text import abort_reason, exception_text, wrong_reply
from ._validation import reserved_id_problem

__all__ = [
    "Run",
    "aborted",
    "failed",
    "misuse",
    "observe",
    "observe_quietly",
    "run_hooks",
]


class Run:
    """The mutable state of one run (see the module docstring)."""

    __slots__ = (
        "arguments_ok",
        "budget",
        "call_ids",
        "checked",
        "checked_arguments_ok",
        "closing",
        "compacting",
        "error",
        "message_ids",
        "now",
        "output_json",
        "output_retries",
        "output_value",
        "pause_reason",
        "pending",
        "queued",
        "result",
        "started",
        "state",
        "steering",
        "step",
        "tool_calls",
        "transcript",
        "turns",
        "unrecorded",
        "usage",
        "usage_mark",
        "wall_start",
    )

    def __init__(
        self,
        transcript: list[Message],
        message_ids: set[str],
        call_ids: set[str],
        budget: Budget | None,
        started_at: float | None,
    ) -> None:
        #: The lifecycle state (:class:`State`); changed only by :meth:`set`.
        self.state = State.IDLE
        #: The current step number (0 before the first step).
        self.step = 0
        #: The transcript so far (complete messages only), appended to in place.
        self.transcript = transcript
        #: The ids of the messages so far (and of queued ones: reserved).
        self.message_ids = message_ids
        #: The ids of the tool calls so far.
        self.call_ids = call_ids
        #: Whether a compaction policy makes ids too (set by ``_context.Context``).
        self.compacting = False
        #: Token usage summed over the responses so far.
        self.usage = Usage()
        #: The budget in force (a ``Resume`` may replace it).
        self.budget = budget
        #: The caller's clock: the last reply's ``at`` (or ``started_at``).
        self.now = started_at
        #: Where the wall-clock budget counts from.
        self.wall_start = started_at
        #: Budget counters since the start or the last budget pause.
        self.turns = 0
        self.tool_calls = 0
        self.usage_mark = self.usage  # token budgets count from here
        #: The effect waiting for a reply, or ``None``.
        self.pending: Effect | None = None
        #: The reason of the pause in force (a Cancel during it may use it).
        self.pause_reason: str | None = None
        #: Steering and follow-up messages received, not yet delivered.
        self.queued: list[Steer | FollowUp] = []
        #: A ``Steer`` is among them.
        self.steering = False
        #: Structured output: answers sent back so far, and the decoded answer.
        self.output_retries = 0
        self.output_value: Any = None
        self.output_json: Any = None
        #: The :class:`RunResult` once the run has finished.
        self.result: RunResult | None = None
        #: A reply that arrived but is not recorded yet (a ToolResult while
        #: after_tool_call runs): if the run ends there, run.finished records it.
        self.unrecorded: Reply | None = None
        #: Lifecycle flags: primed with ``next()``; being closed by ``close()``.
        self.started = False
        self.closing = False
        #: The sticky error: once set, every later ``send()`` raises.
        self.error: CallerProtocolError | None = None
        #: The reply a driver checked (``AgentLoop.checked_by_driver``), and whether
        #: its tool-call arguments are plain; whether the last reply's are.
        self.checked: Reply | None = None
        self.checked_arguments_ok = False
        self.arguments_ok = False

    def set(self, event: Input) -> None:
        """The only place the state changes; an illegal transition raises."""
        try:
            self.state = TRANSITIONS[self.state, event]
        except KeyError:  # pragma: no cover - would be a bug in the engine
            raise IllegalTransition(
                f"no transition from {self.state.name} on {event.value}"
            ) from None

    # Steering and follow-ups: a Steer or FollowUp may come at any yield (see
    # AgentLoop._ask); it is queued and recorded at once, and its message enters
    # the transcript at the next boundary (a steer before the next step, a
    # follow-up after a final answer).

    def queue(self, reply: Steer | FollowUp, log: EventLog, loop_ids_reserved: bool) -> None:
        """Queue ``reply`` (its message id reserved) and record message.queued.

        With ``loop_ids_reserved`` (rules revision 3 on), an id in a namespace the
        loop makes ids in is caller misuse (:func:`reserved_id_problem`; with a
        compaction policy, ``summary-`` and ``compaction-`` too)."""
        message = reply.message
        if message.id in self.message_ids:
            raise _Misuse(
                f"{type(reply).__name__}.message id {message.id!r} is already used in the run",
                reply,
            )
        reserved = reserved_id_problem(message.id, self.compacting) if loop_ids_reserved else None
        if reserved is not None:
            raise _Misuse(f"{type(reply).__name__}.{reserved}", reply)
        self.message_ids.add(message.id)  # reserved: no later message may take it
        self.queued.append(reply)
        steer = type(reply) is Steer
        self.steering = self.steering or steer
        log.append(
            MessageQueuedEvent(
                sequence=log.next_sequence(),
                at=self.now,
                step=self.step,
                mode="steer" if steer else "follow_up",
                reply=reply,
            )
        )

    def deliver(self, log: EventLog, *, follow_ups: bool) -> bool:
        """Append the queued steering messages (and, with ``follow_ups``, the
        follow-ups too), in the order they came; say whether any was appended."""
        delivered = False
        waiting: list[Steer | FollowUp] = []
        for reply in self.queued:
            if follow_ups or type(reply) is Steer:
                self.transcript.append(reply.message)
                log.append(
                    MessageAcceptedEvent(
                        sequence=log.next_sequence(),
                        at=self.now,
                        step=self.step,
                        message=reply.message,
                    )
                )
                delivered = True
            else:
                waiting.append(reply)
        self.queued = waiting
        self.steering = False
        return delivered


# --------------------------------------------------------------------------- control flow


class _Finish(Exception):
    """The run ends (completed, max_steps or failed)."""

    def __init__(
        self,
        status: str,
        reason: str,
        *,
        error: RunError | None = None,
        final_text: str | None = None,
        reply: Reply | None = None,
    ) -> None:
        self.status = status
        self.reason = reason
        self.error = error
        self.final_text = final_text
        self.reply = reply


def failed(code: str, message: str, reply: Reply | None = None) -> _Finish:
    """The :class:`_Finish` of a failed run (``code``, ``message``)."""
    return _Finish("failed", code, error=RunError(code, message), reply=reply)


def aborted(topic: str, exc: BaseException) -> _Finish:
    """The :class:`_Finish` of a run a ``topic`` hook aborted."""
    return failed(HOOK_ABORT, f"{topic} hook aborted: {abort_reason(exc)}")


class _Cancelled(Exception):
    """A ``Cancel`` came (or ``close()``)."""

    def __init__(self, cancel: Cancel) -> None:
        self.cancel = cancel


class _Misuse(Exception):
    """The caller broke the protocol; ``reply`` is what it sent."""

    def __init__(self, message: str, reply: Reply | None) -> None:
        self.message = message
        self.reply = reply


def misuse(reply: Reply, effect: Effect, expected: str) -> _Misuse:
    """The :class:`_Misuse` of a reply that does not answer ``effect``."""
    return _Misuse(wrong_reply(reply, effect, expected), reply)


# --------------------------------------------------------------------------- hooks


def run_hooks(hooks: dict[str, tuple[Any, ...]], topic: str, payload: dict[str, Any]) -> object:
    """Run ``topic``'s subscribers in order; return the first SKIP/PauseRequest.

    ``HookAbort`` propagates (its meaning depends on the topic); any other
    exception fails the run with ``HOOK_ERROR``.
    """
    for fn in hooks.get(topic, ()):
        try:
            outcome = fn(payload)
        except HookAbort:
            raise
        except (Exception, GeneratorExit) as exc:
            # GeneratorExit too: raised by a hook it is a bug like any other
            # (left alone it would end the generator without run.finished).
            raise failed(HOOK_ERROR, f"{topic} hook raised {exception_text(exc)}") from exc
        if outcome is SKIP or type(outcome) is PauseRequest:
            return outcome
    return None


def observe(hooks: dict[str, tuple[Any, ...]], topic: str, payload: dict[str, Any]) -> None:
    """Run an observer topic: it may not skip, pause or abort."""
    try:
        outcome = run_hooks(hooks, topic, payload)
    except HookAbort as exc:
        raise aborted(topic, exc) from exc
    if outcome is not None:
        raise failed(HOOK_ERROR, f"{topic} hook returned {outcome!r}, which it may not")


def observe_quietly(hooks: dict[str, tuple[Any, ...]], topic: str, payload: dict[str, Any]) -> None:
    """:func:`observe` once the run already failed: a failing hook cannot make it
    fail more."""
    with contextlib.suppress(_Finish):
        observe(hooks, topic, payload)
