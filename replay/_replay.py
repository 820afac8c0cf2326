"""Replay a log through the real loop, without a model; inspect, resume or fork it.

Theory of operation
-------------------
A log holds everything needed to rebuild its run (DESIGN §2, "the log is the
state"): ``session.start`` holds the configuration, the ``message.accepted``
events right after it hold the initial transcript, and every reply that entered
the loop is recorded, in the order it entered, by exactly one event:

========================  ==========================================
event                     recorded reply
========================  ==========================================
``model.chunk``           ``chunk``
``plan.draft``            ``reply`` (``ModelResponse``/``ModelFailure``)
``tool.result``/``.error``  ``reply`` unless ``None`` (loop-made result)
``session.resume``        ``reply`` (``Resume``)
``session.complete``      ``reply`` unless ``None`` (a cancel, an invalid
                          chunk, a misused reply; rules revision 2 on)
``run.finished``          ``reply`` unless ``None`` (the same, rules 0 and 1)
========================  ==========================================

A replay builds ``agent_loop(...)`` from that configuration (with the recorded
``started_at``, and the caller's hooks, which run again), primes it with
``next()`` and sends the recorded replies in order. The loop is deterministic, so
it must emit the recorded events again; each regenerated event is compared with
the recorded one by its canonical encoding (:func:`agentloop.encode_event`), byte
for byte. The first difference raises :class:`ReplayDivergence`. The loop ending
while recorded replies remain, the loop waiting for a reply the log does not have
while the log goes on, and the loop emitting more events than the log holds are
divergences too.

A ``send()`` that raises :class:`agentloop.CallerProtocolError` is part of the
story when the recorded run ended that way (its ``run.finished`` failed with
``CALLER_PROTOCOL_ERROR`` and holds the misused reply); the regenerated
``run.finished`` is compared like any other event.

A ``KeyboardInterrupt`` (or any ``BaseException`` but ``GeneratorExit``) raised
inside the loop, by a hook or a log subscriber, ends the run there: the loop
records it as a cancel (``"<Type>: <message>"``) in ``run.finished``. A replay
does not get that interrupt again, so when a log ends with such a cancel and the
first try goes past the point where it happened, the replay is tried once more
with the interrupt raised at that point (see ``_Plan``).

Crashes: a log cut at any event boundary (its process killed) is a prefix of its
run. :func:`resume` continues it: the loop regenerates the events the crash lost
up to its next pull point, or to the end of the run (the effect is then
``None``). The reply that ended the run is in ``session.complete`` (rules
revision 2 on), so a log cut right after it resumes to the same ``run.finished``.
Under rules 0 and 1 that reply was recorded only in ``run.finished``: a cancel
lost with it is rebuilt from ``session.complete``; a misused reply or an invalid
chunk cannot be, and such a log is refused. A log cut inside its initial transcript cannot
tell whether every initial message was recorded: it is refused unless the run's
initial messages are given (``messages=``).

A log whose only event is a failed ``run.finished`` (``INVALID_TRANSCRIPT``) has
nothing to replay: the loop never started, and the invalid transcript is not in
the log. Its one event is checked for the shape the loop gives it (sequence 0,
failed, no steps, no usage, no reply, ...); then :func:`replay` returns it as it
is, with an empty transcript.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Final, TypeVar, get_args

import msgspec

from agentloop import (
    INVALID_TRANSCRIPT,
    OUTPUT_INVALID,
    AgentLoop,
    AgentLoopError,
    BudgetUsage,
    CallerProtocolError,
    Cancel,
    Effect,
    Event,
    Handoff,
    HookRegistry,
    Message,
    MessageAcceptedEvent,
    MessageQueuedEvent,
    ModelChunkEvent,
    ModelRequest,
    Pause,
    PlanDraftEvent,
    Reply,
    RunError,
    RunFinishedEvent,
    RunResult,
    SessionCompleteEvent,
    SessionResumeEvent,
    SessionStartEvent,
    State,
    ToolBatch,
    ToolErrorEvent,
    ToolRequest,
    ToolResultEvent,
    Usage,
    UserMessage,
    agent_loop,
    content_text,
    encode_event,
)
from agentloop._spi import RecordedOutput, compaction_problem, follow, recorded_handoffs

from ._diff import diff_events, summarize

__all__ = [
    "LoopSnapshot",
    "ReplayDivergence",
    "ReplayError",
    "ReplayResult",
    "fork",
    "recorded_replies",
    "replay",
    "resume",
    "state_at",
]


logger: Final = logging.getLogger("replay")


class ReplayError(AgentLoopError):
    """A log cannot be replayed, resumed or forked as asked (see the message).

    :class:`ReplayDivergence` is the subclass for "the loop does not tell the
    story the log tells".
    """


class ReplayDivergence(ReplayError):
    """The regenerated events differ from the recorded ones.

    Attributes:
        sequence: the position (sequence number) of the first difference.
        expected: the recorded event there, or ``None`` when the loop emitted
            more events than the log holds.
        actual: the regenerated event there, or ``None`` when the loop emitted
            nothing there (it finished, or waits for a reply the log lacks).
        reason: what went wrong, in words.
        differences: field-level differences (``path: recorded -> regenerated``)
            when both events exist.
        hint: where else the regenerated event appears in the log, if it does
            (a missing, extra or moved event), else ``""``.
    """

    def __init__(
        self,
        sequence: int,
        expected: Event | None,
        actual: Event | None,
        *,
        reason: str = "",
        hint: str = "",
    ) -> None:
        self.sequence = sequence
        self.expected = expected
        self.actual = actual
        if not reason:
            reason = "the regenerated event differs from the recorded one"
        self.reason = reason
        self.hint = hint
        self.differences: list[str] = []
        if isinstance(expected, Event) and isinstance(actual, Event):
            try:
                self.differences = diff_events(expected, actual)
            except Exception:  # an event made by hand with values no log holds
                self.differences = []
        super().__init__(sequence, expected, actual)

    def __str__(self) -> str:
        # Never fails, whatever the attributes hold (a message that cannot be
        # printed would hide the divergence it reports).
        lines = [f"replay diverged at event #{_text(self.sequence)}: {_text(self.reason)}"]
        lines.append(f"  recorded:    {_line(self.expected)}")
        lines.append(f"  regenerated: {_line(self.actual)}")
        differences = self.differences if isinstance(self.differences, list) else []
        if differences:
            lines.append("  differences (recorded -> regenerated):")
            lines.extend(f"    {_text(line)}" for line in differences)
        if self.hint:
            lines.append(f"  hint: {_text(self.hint)}")
        return "\n".join(lines)


_MAX_TEXT: Final = 2000
_EVENT_CLASSES: Final = frozenset(get_args(Event))


def _text(value: object) -> str:
    """``value`` as text for a message, whatever it is (never raises)."""
    if type(value) is str or type(value) is int:
        return str(value)
    return _repr(value)


def _repr(value: object) -> str:
    """``repr(value)``, cut to a readable length; never raises."""
    try:
        text = repr(value)  # a __repr__ returning a non-str is a TypeError here
    except Exception:  # a repr that raises, or recurses past the limit
        return f"<{type(value).__name__} object that cannot be printed>"
    if len(text) > _MAX_TEXT:
        text = f"{text[: _MAX_TEXT - 3]}..."
    return text


def _line(event: Event | None) -> str:
    if event is None:
        return "(nothing)"
    if not isinstance(event, Event):
        return f"not an event: {_repr(event)}"
    try:
        text = f"#{event.sequence} {event.type} step {event.step}"
        detail = summarize(event)
    except Exception:  # an event made by hand with values no log holds
        return _repr(event)
    return f"{text}  {detail}" if detail else text


class ReplayResult(msgspec.Struct, frozen=True):
    """What :func:`replay` gives back.

    Attributes:
        result: the regenerated :class:`~agentloop.RunResult`, or ``None`` when the
            log ends at a pull point (the run was paused or its process died while
            waiting; continue it with :func:`resume`).
        events: the regenerated events (byte-for-byte equal to the log's).
        pending: the effect the loop waits for when ``result`` is ``None``.
    """

    result: RunResult | None
    events: tuple[Event, ...]
    pending: Effect | None = None


class LoopSnapshot(msgspec.Struct, frozen=True, kw_only=True):
    """The loop as it was just after one event (see :func:`state_at`).

    Attributes:
        sequence: the event's sequence number; ``event`` is the event itself.
        state: the lifecycle state.
        step: the step number.
        messages: the transcript (complete messages only; the initial messages
            are all in it from ``session.start`` on).
        usage: token usage so far.
        budget_usage: what the run used since it started or last resumed.
        pending: the effect the loop yields right after this event, or ``None``
            when the loop emits more events before it asks for anything.
        result: the run's result when this event is its ``run.finished``.
    """

    sequence: int
    event: Event
    state: State
    step: int
    messages: tuple[Message, ...]
    usage: Usage
    budget_usage: BudgetUsage
    pending: Effect | None = None
    result: RunResult | None = None


_REPLY_EVENTS: Final = (
    ModelChunkEvent,
    PlanDraftEvent,
    ToolResultEvent,
    ToolErrorEvent,
    SessionResumeEvent,
    SessionCompleteEvent,
    RunFinishedEvent,
    MessageQueuedEvent,
)


def recorded_replies(events: Iterable[Event]) -> list[tuple[int, Reply]]:
    """The replies a log records, in the order they entered the loop.

    Returns:
        ``(position, reply)`` pairs: the index of the recording event, the reply.
    """
    out: list[tuple[int, Reply]] = []
    for index, event in enumerate(events):
        cls = event.__class__
        if cls is ModelChunkEvent:
            out.append((index, event.chunk))  # type: ignore[union-attr]
        elif cls in _REPLY_EVENTS:
            reply = event.reply  # type: ignore[union-attr]
            if reply is not None:
                out.append((index, reply))
    return out


# --------------------------------------------------------------------------- interrupts


class _Interrupt(BaseException):
    """A recorded interrupt, raised again by replay where it happened (see _Plan)."""


_INTERRUPT_TYPES: dict[str, type[_Interrupt]] = {}


def _interrupt_type(name: str) -> type[_Interrupt]:
    # The loop records an interrupt as Cancel("<Type>: <message>"): an exception of a
    # class with the same name and message gives the same text back.
    cls = _INTERRUPT_TYPES.get(name)
    if cls is None:
        cls = _INTERRUPT_TYPES[name] = type(name, (_Interrupt,), {"__module__": __name__})
    return cls


class _Plan(msgspec.Struct, frozen=True):
    """How to replay a run that a ``KeyboardInterrupt`` (or the like) ended inside
    the loop: in a hook or a log subscriber, not at a pull point.

    The loop records such an interrupt as a cancel in ``run.finished`` (or, when a
    ``ToolResult`` had arrived but was not recorded yet, that result), just after
    the last event it had emitted. A replayed one-off interrupt does not happen
    again, so the loop would go on; replay raises it again instead, at the same
    place: right after event ``position - 1`` once every other reply is in (from a
    log subscriber), or in the first hook called after that.
    """

    position: int  # of the recorded session.complete
    name: str
    message: str
    consumes_last_reply: bool  # the recorded Cancel stands for the interrupt itself

    def exception(self) -> _Interrupt:
        return _interrupt_type(self.name)(self.message)


def _interrupt_plan(events: Sequence[Event]) -> _Plan | None:
    """The interrupt a log may end with (a cancelled session.complete whose reason
    reads ``"<Type>: <message>"``), or ``None``."""
    last = events[-1]
    finished = last if type(last) is RunFinishedEvent else None
    position = len(events) - (2 if finished is not None else 1)
    complete = events[position] if position > 0 else None
    if type(complete) is not SessionCompleteEvent or complete.status != "cancelled":
        return None
    name, separator, message = complete.reason.partition(": ")
    if not separator or not name.isidentifier():
        return None
    # Where the reply that ended the run is (rules 2: session.complete; before:
    # run.finished, and lost with it).
    reply = complete.reply if finished is None or complete.reply is not None else finished.reply
    consumes = type(reply) is Cancel and reply.reason == complete.reason
    return _Plan(position, name, message, consumes)


# --------------------------------------------------------------------------- the driver


class _Session:
    """One replay in progress: a loop rebuilt from a log, fed its recorded replies."""

    def __init__(
        self,
        events: Sequence[Event],
        hooks: HookRegistry | None,
        *,
        past_end: bool = False,
        interrupt: _Plan | None = None,
        messages: Sequence[Message] | None = None,
        output: Any = None,
        handoffs: Sequence[Handoff] | None = None,
        compaction: Any = None,
    ) -> None:
        self.events = events
        self.past_end = past_end  # regenerated events beyond the log are allowed
        start = events[0]
        if type(start) is not SessionStartEvent:
            raise ReplayDivergence(
                0,
                start,
                None,
                reason="a log starts with session.start (or is a single failed run.finished "
                "with INVALID_TRANSCRIPT)",
            )
        recorded: list[Message] = []
        for event in events[1:]:
            if type(event) is not MessageAcceptedEvent:
                break
            recorded.append(event.message)
        self.cut_in_transcript = len(recorded) == len(events) - 1  # nothing after it
        initial = recorded if messages is None else _initial_messages(recorded, messages, self)
        problem = compaction_problem(start.compaction, compaction)
        if problem is not None:
            raise ReplayDivergence(0, start, None, reason=problem)
        self.replies = recorded_replies(events)
        self.next_reply = 0
        self.interrupt = interrupt
        self.tripped = False
        if interrupt is not None:
            if interrupt.consumes_last_reply:
                del self.replies[-1]
            hooks = self._tripwired(hooks)
        checked_output = _output(start, events, output)
        try:
            self.loop: AgentLoop = agent_loop(
                initial,
                tools=start.tools,
                system=start.system,
                max_steps=start.max_steps,
                budget=start.budget,
                hooks=hooks,
                request_sequence_start=start.request_sequence_start,
                started_at=start.at,
                rules=start.rules,
                parallel_tools=start.parallel_tools,
                limits=start.limits,
                output=checked_output,
                output_retries=_retries(start),
                parent=start.parent,
                handoffs=_handoffs(start, events, handoffs, checked_output),
                agent_name=start.agent,
                compaction=start.compaction if compaction is None else compaction,
            )
        except (ValueError, TypeError) as exc:
            raise ReplayDivergence(
                0, start, None, reason=f"the recorded configuration is rejected: {exc}"
            ) from None
        self.checked = 0
        self.effect: Effect | None = None
        self.result: RunResult | None = None
        self.finished = False
        # DEBUG: each regenerated event, to the "replay" logger (if enabled now).
        self._unfollow: Callable[[], None] | None = follow(self.loop.log, logger)

    # ------------------------------------------------------------------ interrupts

    def _trip(self) -> None:
        plan = self.interrupt
        assert plan is not None
        if (
            not self.tripped
            and len(self.loop.log) == plan.position
            and self.next_reply == len(self.replies)
        ):
            self.tripped = True
            raise plan.exception()

    def _on_event(self, event: Event) -> None:
        if event.sequence == self.interrupt.position - 1:  # type: ignore[union-attr]
            self._trip()

    def _tripwired(self, hooks: HookRegistry | None) -> HookRegistry | None:
        """The caller's hooks, each first checking whether the interrupt is due (an
        interrupt in ``after_tool_call`` comes after the result's reply)."""
        if hooks is None:
            return None

        def wrap(fn: Any) -> Any:
            def tripwired(payload: dict[str, Any]) -> object:
                self._trip()
                return fn(payload)

            return tripwired

        return HookRegistry(
            {topic: [wrap(fn) for fn in fns] for topic, fns in hooks.snapshot().items()}
        )

    # ------------------------------------------------------------------ checking

    def _check(self) -> None:
        """Compare every event regenerated since the last check with the log."""
        fresh = self.loop.log.since(self.checked)
        if not fresh:
            return
        events = self.events
        recorded = len(events)
        encode = encode_event
        for actual in fresh:
            position = actual.sequence
            if position >= recorded:
                if self.past_end:
                    continue
                # (A log with its run.finished cannot end before the loop does.)
                reason = (
                    f"the loop emitted more events than the log holds ({recorded}): the "
                    "log ends between two events, as when its process died (resume() "
                    "continues it)"
                )
                raise ReplayDivergence(
                    position, None, actual, reason=reason, hint=self._hint(actual)
                )
            expected = events[position]
            if encode(actual) != encode(expected):
                raise ReplayDivergence(position, expected, actual, hint=self._hint(actual))
        self.checked += len(fresh)

    def _hint(self, actual: Event) -> str:
        want = encode_event(actual)
        for index, event in enumerate(self.events):
            if index == actual.sequence or type(event) is not type(actual):
                continue
            renumbered = msgspec.structs.replace(event, sequence=actual.sequence)
            if encode_event(renumbered) == want:
                return (
                    f"the regenerated event is recorded event #{index} (renumbered): "
                    "an event was deleted, inserted or moved"
                )
        return ""

    # ------------------------------------------------------------------ driving

    def start(self) -> None:
        if self.interrupt is not None:
            # Subscribed last: observers of the caller (state_at) see the event first.
            self.loop.log.subscribe(self._on_event)
        try:
            self.effect = next(self.loop)
        except StopIteration as stop:
            self._finished(stop.value)
        except _Interrupt:
            self._finished(self.loop.result)
        self._check()

    def feed(self) -> None:
        """Send the next recorded reply."""
        position, reply = self.replies[self.next_reply]
        self.send(reply, position)

    def send(self, reply: Reply, position: int) -> None:
        """Send ``reply`` (recorded in event ``position``) and check what follows."""
        if self.finished:
            self._check()
            end = len(self.loop.log)
            raise ReplayDivergence(
                end,
                self.events[end] if end < len(self.events) else None,
                None,
                reason=f"the regenerated run finished ({self._status()}) but the log goes on "
                f"(an unused reply is recorded in event #{position})",
            )
        self.next_reply += 1
        try:
            self.effect = self.loop.send(reply)
        except StopIteration as stop:
            self._finished(stop.value)
        except (CallerProtocolError, _Interrupt):
            # The loop logged its run.finished first (a misused reply recorded in
            # it, or the interrupt); it is compared below like any other event.
            self._finished(self.loop.result)
        self._check()

    def close(self) -> None:
        """Cancel the rebuilt loop if it is still suspended (its events are not
        compared any more). A suspended generator must not be left to the garbage
        collector, which would close it at some arbitrary later moment."""
        if not self.finished:
            self.loop.close()

    def hand_over(self) -> tuple[AgentLoop, Effect | None]:
        """The live loop and the effect it waits for (``None`` once it finished), for
        the caller to drive: its later events are the caller's, not the replay's, so
        they are not logged here."""
        if self._unfollow is not None:
            self._unfollow()
        return self.loop, self.effect

    def _finished(self, result: RunResult | None) -> None:
        self.finished = True
        self.effect = None
        self.result = result

    def _status(self) -> str:
        result = self.result
        return "?" if result is None else result.status

    def feed_all(self) -> None:
        while self.next_reply < len(self.replies):
            self.feed()

    def feed_through(self, position: int) -> None:
        """Send every reply recorded at or before ``position``."""
        replies = self.replies
        while self.next_reply < len(replies) and replies[self.next_reply][0] <= position:
            self.feed()

    def check_complete(self) -> None:
        """After every reply was sent: the log must hold nothing more."""
        end = len(self.loop.log)
        if end < len(self.events):
            if self.finished:
                reason = f"the regenerated run finished ({self._status()}) but the log goes on"
            else:
                reason = (
                    f"the loop waits for a reply to {_describe(self.effect)}, but the log "
                    "records no further reply"
                )
            raise ReplayDivergence(end, self.events[end], None, reason=reason)

    def refuse_a_cut_transcript(self) -> None:
        """A live loop must not go on from a log cut inside its initial transcript."""
        if self.cut_in_transcript:
            count = len(self.events) - 1
            raise ReplayError(
                f"the log ends in the run's initial transcript (after {count} "
                "message.accepted event(s)): its process died before the first step, and "
                "the log cannot tell whether every initial message was recorded; pass the "
                "run's initial messages (resume(events, messages=...)) or start it again"
            )

    def finish_a_lost_cancel(self) -> None:
        """The log ends with a session.complete whose run.finished (holding the
        reply that ended the run) was lost: rebuild that reply when it can be.

        A cancel can: ``session.complete`` says its reason, and its time is the
        event's ``at``. A misused reply or an invalid chunk cannot.
        """
        end = len(self.loop.log)
        last = self.events[-1]
        if self.finished or end != len(self.events) - 1 or type(last) is not SessionCompleteEvent:
            return
        if last.status != "cancelled":
            raise ReplayError(
                f"the log ends with session.complete ({last.status}, {last.reason}) but not "
                "the run.finished after it, which recorded the reply that ended the run: "
                "the run cannot be rebuilt from this log"
            )
        self.send(Cancel(reason=last.reason, at=last.at), end)


def _initial_messages(
    recorded: list[Message], messages: Sequence[Message], session: _Session
) -> list[Message]:
    """The initial transcript for a resume given ``messages=``: it must begin with
    the recorded one (and be it, when the log recorded it whole)."""
    given = list(messages)
    whole = not session.cut_in_transcript
    if given[: len(recorded)] != recorded or (whole and len(given) != len(recorded)):
        raise ReplayError(
            f"messages= does not match the log's initial transcript ({len(recorded)} "
            f"message.accepted event(s){'' if whole else ', maybe cut off'}; "
            f"{len(given)} messages given)"
        )
    return given


def _retries(start: SessionStartEvent) -> int:
    """The run's ``output_retries``, as the log records it (with any output spec)."""
    for spec in (start.output, *(handoff.output for handoff in start.handoffs)):
        if spec is not None:
            return spec.retries
    return 2


def _handoffs(
    start: SessionStartEvent,
    events: Sequence[Event],
    given: Sequence[Handoff] | None,
    output: Any,
) -> Sequence[Handoff] | None:
    """The ``handoffs`` option for a replay: those given, else the ones the log
    records, following its recorded filters and output verdicts."""
    if given is not None or not start.handoffs:
        return given
    verdicts = output if type(output) is RecordedOutput else None
    if verdicts is None and any(spec.output is not None for spec in start.handoffs):
        if output is not None:
            raise ReplayError(
                "the log's handoffs check structured output too: with output= give "
                "handoffs= (with their output types)"
            )
        verdicts = _verdicts(start.handoffs[0].output, events)  # the handoffs' only
    return recorded_handoffs(start.handoffs, events, verdicts)


def _output(start: SessionStartEvent, events: Sequence[Event], output: Any) -> Any:
    """The ``output`` option for a replay: the type given, else (the log records an
    ``output``) the verdicts the log records, else none."""
    if output is not None or start.output is None:
        return output
    return _verdicts(start.output, events)


def _verdicts(spec: Any, events: Sequence[Event]) -> RecordedOutput:
    """The output verdicts a log records, in order."""
    verdicts: list[str | None] = []
    value: Any = None
    for event in events:
        cls = event.__class__
        if cls is MessageAcceptedEvent:
            message = event.message  # type: ignore[union-attr]
            if type(message) is UserMessage and message.id.startswith("output-retry-"):
                verdicts.append(content_text(message.content))
        elif cls is RunFinishedEvent:
            error = event.error  # type: ignore[union-attr]
            if error is not None and error.code == OUTPUT_INVALID:
                verdicts.append(error.message.partition(": ")[2])
            elif event.status == "completed":  # type: ignore[union-attr]
                verdicts.append(None)
                value = event.output  # type: ignore[union-attr]
    return RecordedOutput(spec, verdicts, value)


def _describe(effect: Effect | None) -> str:
    if type(effect) is ModelRequest:
        return f"ModelRequest {effect.id}"
    if type(effect) is ToolRequest:
        return f"ToolRequest {effect.call.id} ({effect.call.name})"
    if type(effect) is ToolBatch:
        calls = ", ".join(f"{r.call.id} ({r.call.name})" for r in effect.requests)
        return f"ToolBatch {calls}"
    if type(effect) is Pause:
        return f"Pause ({effect.reason})"
    return "nothing"  # pragma: no cover - only a finished run has no effect, checked first


def _events(events: Iterable[Event], function: str) -> list[Event]:
    """The events of a log, checked to be events (a path is the usual mistake)."""
    if isinstance(events, (str, bytes, os.PathLike)):
        raise TypeError(
            f"replay.{function}() takes the events of a log, not a path: read the file "
            f"first, replay.{function}(replay.read_log({_repr(events)}))"
        )
    try:
        out = list(events)
    except TypeError:
        raise TypeError(
            f"replay.{function}() takes the events of a log (from replay.read_log(path) "
            f"or an EventLog), got {_repr(events)}"
        ) from None
    for index, event in enumerate(out):
        # The exact classes first: isinstance against the Event union tries each
        # of its classes in turn (11% of a replay's time, measured).
        if type(event) not in _EVENT_CLASSES and not isinstance(event, Event):
            raise TypeError(
                f"replay.{function}(): item {index} of the events is not an agentloop "
                f"event: {_repr(event)} (read a log file with replay.read_log(path))"
            )
    if not out:
        raise ReplayError("the log has no events")
    return out


def _invalid_transcript(events: list[Event]) -> RunResult | None:
    """The result of a log that is one failed ``run.finished`` (nothing to replay).

    Such a log is checked as far as it can be: the loop writes that event with
    sequence 0 and step 0, status ``failed``, reason and error code
    ``INVALID_TRANSCRIPT``, no steps, no final text, no usage and no reply (only
    ``at``, ``max_steps`` and the error message vary).
    """
    first = events[0]
    if type(first) is not RunFinishedEvent:
        return None
    error = first.error
    expected = RunFinishedEvent(
        sequence=0,
        at=first.at,
        step=0,
        status="failed",
        final_text=None,
        steps=0,
        max_steps=first.max_steps,
        error=RunError(INVALID_TRANSCRIPT, error.message if error is not None else ""),
        usage=Usage(),
        reason=INVALID_TRANSCRIPT,
        reply=None,
    )
    if encode_event(first) != encode_event(expected):
        raise ReplayDivergence(
            0,
            first,
            expected,
            reason="a log that starts with run.finished is the failed run of an invalid "
            "transcript (sequence 0, step 0, failed, INVALID_TRANSCRIPT, no steps, no "
            "final text, no usage, no reply), and this one is not",
        )
    if len(events) > 1:
        raise ReplayDivergence(1, events[1], None, reason="the log goes on after its run.finished")
    return RunResult(
        status=first.status,
        final_text=first.final_text,
        messages=(),
        steps=first.steps,
        max_steps=first.max_steps,
        error=first.error,
        usage=first.usage,
        reason=first.reason,
    )


# --------------------------------------------------------------------------- public API

_T = TypeVar("_T")


def _replayed(
    items: list[Event],
    hooks: HookRegistry | None,
    body: Callable[[_Session], _T],
    **options: Any,
) -> _T:
    """``body`` of a session over ``items``; again with the recorded interrupt raised
    where it happened, when the log ends with one the first try went past."""
    try:
        return body(_Session(items, hooks, **options))
    except ReplayDivergence as divergence:
        plan = _interrupt_plan(items)
        if plan is None or divergence.sequence != plan.position:
            raise
        try:
            return body(_Session(items, hooks, interrupt=plan, **options))
        except ReplayDivergence:
            raise divergence from None


def replay(
    events: Iterable[Event],
    *,
    hooks: HookRegistry | None = None,
    output: Any = None,
    handoffs: Sequence[Handoff] | None = None,
    compaction: Any = None,
) -> ReplayResult:
    """Replay a log through the loop, without a model, checking every event.

    Args:
        events: the log (from :func:`read_log`, or an ``EventLog``'s events).
        hooks: the hooks the run had (they run again and must be deterministic).
        output: the run's structured-output type, to decode its answers again
            (``result.output`` is then that type); without it, a log that records
            an ``output`` is replayed by the verdicts it records (``result.output``
            is the value's JSON form).
        handoffs: the run's handoffs (``agent_loop(handoffs=...)``), to run their
            input filters and output checks again; without them, a log that records
            handoffs is replayed by what it records (their specs, what each filter
            kept, the output verdicts). Handoffs that are not the recorded ones
            diverge at ``session.start`` (naming ``handoffs``); a filter that keeps
            other messages diverges at its ``agent.handoff``.
        compaction: the run's compaction policy, when it was not a built-in one
            (``session.start`` records its ``spec()``, which must match; a built-in
            policy is rebuilt from it).

    Returns:
        :class:`ReplayResult`: the regenerated result and events. For a log that
        ends at a pull point (no ``run.finished``), ``result`` is ``None`` and
        ``pending`` is the effect the loop waits for. A log that is only a failed
        ``run.finished`` (``INVALID_TRANSCRIPT``) is returned as it is. A run that
        a ``KeyboardInterrupt`` (or the like) ended inside a hook replays with the
        interrupt raised again where it happened.

    Raises:
        ReplayDivergence: the first difference between the log and the loop.
        ReplayError: the log is empty.
        TypeError: ``events`` is not events (a path: read it with
            :func:`read_log` first).
    """
    items = _events(events, "replay")
    invalid = _invalid_transcript(items)
    if invalid is not None:
        logger.info("replayed 1 event: failed (%s)", INVALID_TRANSCRIPT)
        return ReplayResult(invalid, tuple(items))

    def body(session: _Session) -> ReplayResult:
        try:
            session.start()
            session.feed_all()
            session.check_complete()
            result = ReplayResult(session.result, tuple(session.loop.log), session.effect)
        finally:
            session.close()
        logger.info(
            "replayed %d events: %s",
            len(result.events),
            session._status() if session.finished else f"waits for {_describe(session.effect)}",
        )
        return result

    return _replayed(items, hooks, body, output=output, handoffs=handoffs, compaction=compaction)


def state_at(
    events: Iterable[Event],
    sequence: int,
    *,
    hooks: HookRegistry | None = None,
    compaction: Any = None,
) -> LoopSnapshot:
    """The loop just after event ``sequence``: state, transcript, step, usage, pending.

    The log is replayed up to that event (and checked on the way). Values are read
    from the loop as that event is recorded; when the loop asks for a reply right
    after it (the event is the last before a pull point, or the run's last event),
    they are read at that point, so ``pending`` is the effect it waits for. (The
    loop applies a ``Resume`` -- state, budget, counters -- before it records
    ``session.resume``, so the snapshot at ``session.resume`` already shows the
    resumed state and budget usage; the one at ``session.pause`` shows the paused
    loop, ``Pause`` pending.) ``compaction``: as for :func:`replay`.

    Raises:
        ValueError: ``sequence`` is not the position of an event of the log.
        ReplayDivergence: the log diverges before or at that event.
    """
    items = _events(events, "state_at")
    _check_position(sequence, items)
    invalid = _invalid_transcript(items)
    if invalid is not None:
        return LoopSnapshot(
            sequence=0,
            event=items[0],
            state=State.DONE,
            step=0,
            messages=(),
            usage=invalid.usage,
            budget_usage=BudgetUsage(),
            result=invalid,
        )

    def body(session: _Session) -> LoopSnapshot:
        loop = session.loop
        captured: list[LoopSnapshot] = []

        def capture(event: Event) -> None:
            if event.sequence == sequence:
                captured.append(_snapshot(loop, event, None, None))

        unsubscribe = loop.log.subscribe(capture)
        try:
            session.start()
            while len(loop.log) <= sequence and session.next_reply < len(session.replies):
                session.feed()
            if len(loop.log) <= sequence:
                session.check_complete()
            if len(loop.log) == sequence + 1:
                # Nothing more happens until the next reply: read the loop as it waits.
                return _snapshot(loop, loop.log[sequence], session.effect, session.result)
            return captured[0]
        finally:
            unsubscribe()
            session.close()

    return _replayed(items, hooks, body, past_end=True, compaction=compaction)


def _snapshot(
    loop: AgentLoop, event: Event, pending: Effect | None, result: RunResult | None
) -> LoopSnapshot:
    return LoopSnapshot(
        sequence=event.sequence,
        event=event,
        state=loop.state,
        step=loop.step,
        messages=tuple(loop.messages),
        usage=loop.usage,
        budget_usage=loop.budget_usage,
        pending=pending,
        result=result,
    )


def resume(
    events: Iterable[Event],
    *,
    hooks: HookRegistry | None = None,
    messages: Sequence[Message] | None = None,
    output: Any = None,
    handoffs: Sequence[Handoff] | None = None,
    compaction: Any = None,
) -> tuple[AgentLoop, Effect | None]:
    """Continue a run from its log: a live loop at the log's last pull point.

    For a log that ends while the loop waits for a reply (paused, or its process
    died while waiting for the model or a tool). Every recorded reply is fed
    again (and checked); the returned loop waits for the returned effect, and
    its ``log`` continues the same sequence numbers, so append its new events to
    the same file (``LogWriter(path).follow(loop.log)``).

    If the previous process died between two events (after recording a reply but
    before the loop asked for the next one), the loop regenerates the missing
    events; they are in ``loop.log`` after the given ones (``follow`` writes them).
    When those events end the run (the process died after the last reply, before
    ``run.finished`` was written), the run completes here: the effect is ``None``
    and ``loop.result`` is the :class:`~agentloop.RunResult`. A cancel recorded
    only in the lost ``run.finished`` is rebuilt from ``session.complete``.

    Args:
        events: the log.
        hooks: the hooks the run had.
        messages: the run's initial messages, only needed (and then required)
            when the log was cut off inside its initial transcript: such a log
            cannot tell whether every initial message was recorded. They must
            begin with the recorded ones.

    A run with structured output (``agent_loop(..., output=T)``) needs ``output=T``
    again to check the answers still to come; a run with handoffs whose filters or
    output checks run again needs ``handoffs=`` (see :func:`replay`); one with a
    compaction policy of its own (not a built-in one) needs ``compaction=policy``
    again.

    Returns:
        ``(loop, effect)``: send the reply to ``effect`` next; or ``(loop, None)``
        when the run finished while the missing events were regenerated.

    Raises:
        ReplayError: the run already finished (nothing to resume); the log was cut
            off inside its initial transcript and no ``messages`` were given (or
            they do not match); or the reply that ended the run was recorded only
            in the lost ``run.finished`` and cannot be rebuilt (a misused reply,
            an invalid chunk).
        ReplayDivergence: the log does not replay, or goes on past the point where
            the loop waits (events the loop does not regenerate, as :func:`replay`
            finds them).
    """
    items = _events(events, "resume")
    if _invalid_transcript(items) is not None or type(items[-1]) is RunFinishedEvent:
        raise ReplayError(
            "the run already finished (the log ends with run.finished); nothing to resume "
            "(fork() continues from an earlier event)"
        )

    def body(session: _Session) -> tuple[AgentLoop, Effect | None]:
        try:
            if messages is None:
                session.refuse_a_cut_transcript()
            session.start()
            session.feed_all()
            session.finish_a_lost_cancel()
            # The log must end where the loop now waits (or before, if the process
            # died between two events): recorded events the loop does not
            # regenerate are a divergence, as in replay().
            session.check_complete()
        except BaseException:
            session.close()
            raise
        if session.effect is None:
            logger.info("resumed after %d events: %s", len(session.loop.log), session._status())
        else:
            logger.info(
                "resumed after %d events: waits for %s",
                len(session.loop.log),
                _describe(session.effect),
            )
        return session.hand_over()

    return _replayed(
        items,
        hooks,
        body,
        past_end=True,
        messages=messages,
        output=output,
        handoffs=handoffs,
        compaction=compaction,
    )


def fork(
    events: Iterable[Event],
    sequence: int,
    *,
    hooks: HookRegistry | None = None,
    output: Any = None,
    handoffs: Sequence[Handoff] | None = None,
    compaction: Any = None,
) -> tuple[AgentLoop, Effect]:
    """A live loop branched from a log just after event ``sequence``.

    Feeds the replies recorded at or before ``sequence`` (checking the events
    they regenerate), and more if event ``sequence`` needs them, then stops at
    the loop's next pull point: the returned effect is what the loop asks next,
    and any reply may be sent to it ("what if the model had answered
    differently"). Events the loop emits before that pull point are already in
    ``loop.log``. ``output``, ``handoffs``, ``compaction``: as for :func:`resume`.

    Raises:
        ValueError: ``sequence`` is not the position of an event of the log.
        ReplayError: the run finishes after that event without asking for any
            further reply (nothing to branch), or the log was cut off inside its
            initial transcript (it may lack initial messages).
        ReplayDivergence: the log does not replay up to there.
    """
    items = _events(events, "fork")
    _check_position(sequence, items)
    if _invalid_transcript(items) is not None:
        raise ReplayError("the log is a failed run.finished (INVALID_TRANSCRIPT); nothing to fork")

    def body(session: _Session) -> tuple[AgentLoop, Effect]:
        try:
            session.refuse_a_cut_transcript()
            session.start()
            session.feed_through(sequence)
            while len(session.loop.log) <= sequence and session.next_reply < len(session.replies):
                # Event ``sequence`` comes from a reply recorded after it (a cancel or
                # a misused reply ends the run with session.complete, then
                # run.finished).
                session.feed()
            if session.finished or session.effect is None:
                raise ReplayError(
                    f"the run finishes ({session._status()}) after event #{sequence} without "
                    "asking for another reply; nothing to fork"
                )
        except BaseException:
            session.close()
            raise
        logger.info("forked after event #%d: waits for %s", sequence, _describe(session.effect))
        loop, effect = session.hand_over()
        assert effect is not None  # checked above
        return loop, effect

    return _replayed(
        items,
        hooks,
        body,
        past_end=True,
        output=output,
        handoffs=handoffs,
        compaction=compaction,
    )


def _check_position(sequence: int, events: list[Event]) -> None:
    if type(sequence) is not int or not 0 <= sequence < len(events):
        raise ValueError(
            f"sequence must be an int from 0 to {len(events) - 1} (the log's events), "
            f"got {sequence!r}"
        )
