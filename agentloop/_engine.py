"""The agent loop: a synchronous generator that owns the rules and none of the I/O.

Theory of operation
-------------------
:func:`agent_loop` checks its options *eagerly* (a bad option raises before any
generator exists), snapshots the transcript and the tool specs, and returns an
:class:`AgentLoop`: a ``Generator[Effect, Reply, RunResult]``. Driving it is a
conversation::

    loop = agent_loop([UserMessage("u1", "What is 20 + 22?")], tools=[add])
    effect = next(loop)                      # ModelRequest("request-001", ...)
    effect = loop.send(ModelChunk(...))      # the same ModelRequest again
    effect = loop.send(ModelResponse(...))   # ToolRequest(call=ToolCall(...))
    effect = loop.send(ToolResult(...))      # ModelRequest("request-002", ...)
    loop.send(ModelResponse(...))            # raises StopIteration(RunResult)

The caller performs every side effect (model, tools, clock, humans); the loop only
validates, decides and records. Everything that enters it -- every reply, valid or
not -- is written to the :class:`~agentloop.EventLog` before the loop yields again
or finishes. With no clock, randomness or I/O inside, the same replies always give
the same events, byte for byte: that is what makes a log replayable.

The lifecycle is the table in ``_state.py``; ``_set`` is the only place here that
changes state. Control flow inside the generator uses three private exceptions:
``_Finish`` (the run ends: completed, max_steps, failed), ``_Cancelled`` (a
``Cancel`` or ``close()``) and ``_Misuse`` (the caller broke the protocol; after the
failed ``run.finished`` is logged, ``CallerProtocolError`` leaves ``send()``).

Per step the cost is O(new content): ``ModelRequest.messages`` is a view of the
append-only transcript (fixed length, no copy), ids are checked against sets kept
up to date incrementally, and events hold only what is new.

This module holds the rules; the mechanics live next to it: the eager option
checks in ``_options``, the transcript snapshot and view in ``_transcript``, the
checks of what enters in ``_validation``, copies in ``_copy``, the stream/final
comparison in ``_stream``, error wording in ``_text``. Each phase of
:class:`AgentLoop` (start, steps, plan, validate, tool calls, pauses and budget,
finish) opens with a short note on how it works.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Generator, Iterable, Mapping, Sequence
from typing import Any, NoReturn

import msgspec

from ._budget import Budget, BudgetUsage
from ._copy import copy_block, copy_call, copy_json
from ._errors import (
    CALLER_PROTOCOL_ERROR,
    HOOK_ABORT,
    HOOK_ERROR,
    INVALID_TRANSCRIPT,
    MODEL_ERROR,
    MODEL_PROTOCOL_ERROR,
    MODEL_REFUSED,
    OUTPUT_INVALID,
    CallerProtocolError,
)
from ._events import (
    BudgetWarnEvent,
    EventLog,
    MessageAcceptedEvent,
    MessageQueuedEvent,
    ModelChunkEvent,
    PlanCommitEvent,
    PlanDraftEvent,
    RunFinishedEvent,
    SessionCompleteEvent,
    SessionPauseEvent,
    SessionResumeEvent,
    SessionStartEvent,
    StepEndEvent,
    StepStartEvent,
    ToolCallEvent,
    ToolErrorEvent,
    ToolResultEvent,
)
from ._hooks import SKIP, HookAbort, HookRegistry, PauseRequest
from ._json import surrogate_problem
from ._limits import DEFAULT_LIMITS, Limits, limit_name
from ._messages import (
    AssistantMessage,
    Block,
    Message,
    ProviderBlock,
    TextBlock,
    ThinkingBlock,
    ToolCall,
    ToolResultMessage,
    UserMessage,
    text_from_assistant,
)
from ._options import check_options, tool_specs
from ._output import OutputCheck, output_check
from ._protocol import (
    STOP_REASONS,
    Cancel,
    Effect,
    FollowUp,
    ModelChunk,
    ModelFailure,
    ModelRequest,
    ModelResponse,
    Pause,
    Reply,
    Resume,
    RunError,
    RunResult,
    Steer,
    ToolBatch,
    ToolRequest,
    ToolResult,
    UnrecognizedReply,
    Usage,
)
from ._rules import REPLY_IN_COMPLETE, RESERVED_MESSAGE_IDS, RULES_REVISION, USAGE_WHEN_RECORDED
from ._state import RESUME_INPUT, TRANSITIONS, IllegalTransition, Input, State
from ._stream import stream_mismatch
from ._text import abort_reason, call_ids, decision_problem, exception_text, wrong_reply
from ._toolspec import ToolSpec
from ._transcript import TranscriptView, snapshot_transcript
from ._validation import (
    accept,
    arguments_ok,
    arguments_problems,
    json_problem,
    reply_problem,
    reserved_id_problem,
)

__all__ = ["AgentLoop", "TranscriptView", "agent_loop"]

_MESSAGE_TYPES = (UserMessage, AssistantMessage, ToolResultMessage)
_FAILING_STOPS = ("error", "refusal")
_FAILURE_CODES = (MODEL_ERROR, MODEL_PROTOCOL_ERROR)
_CLOSED = Cancel(reason="closed")
_QUEUED = frozenset((Steer, FollowUp))  # replies queued for delivery, at any yield


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


def _failed(code: str, message: str, reply: Reply | None = None) -> _Finish:
    return _Finish("failed", code, error=RunError(code, message), reply=reply)


def _aborted(topic: str, exc: BaseException) -> _Finish:
    return _failed(HOOK_ABORT, f"{topic} hook aborted: {abort_reason(exc)}")


class _Cancelled(Exception):
    def __init__(self, cancel: Cancel) -> None:
        self.cancel = cancel


class _Misuse(Exception):
    def __init__(self, message: str, reply: Reply | None) -> None:
        self.message = message
        self.reply = reply


def agent_loop(
    messages: Iterable[Message | Mapping[str, Any]],
    *,
    tools: Any,
    system: str | None = None,
    max_steps: int = 8,
    budget: Budget | None = None,
    hooks: HookRegistry | None = None,
    request_sequence_start: int = 0,
    log: EventLog | None = None,
    started_at: float | None = None,
    rules: int = RULES_REVISION,
    parallel_tools: bool = False,
    limits: Limits | None = None,
    output: Any = None,
    output_retries: int = 2,
) -> AgentLoop:
    """Create the agent loop for one run.

    Args:
        messages: the initial transcript (Message structs, or dicts of the same shape).
            Snapshotted now: changing the caller's list later changes nothing. An
            invalid transcript is not an exception: the run fails with
            ``INVALID_TRANSCRIPT`` as its only event, and the model is never asked.
        tools: a ``ToolRegistry`` or a list/tuple of ``ToolSpec``/``Tool``; snapshotted.
        system: the system prompt sent with every model request.
        max_steps: hard ceiling on model requests, 1..``MAX_AGENT_STEPS``.
        budget: soft limits that pause the run (see :class:`Budget`).
        hooks: the operator's hooks; their subscribers are snapshotted.
        request_sequence_start: request numbers start after this
            (``request-{start + 1:03d}``); the whole range must stay within 64.
        log: an empty :class:`EventLog` to record into (a new one by default).
        started_at: the caller's clock at the start (for ``max_wall_seconds``).
        rules: the engine's rules revision to follow (recorded in ``session.start``):
            the newest, :data:`RULES_REVISION`, unless a replay of an older log
            asks for the one the log records.
        parallel_tools: yield the calls of a step that may run together as one
            :class:`ToolBatch` (results in any order, recorded as they arrive,
            appended in the model's order) instead of one ``ToolRequest`` at a
            time; a ``ToolSpec(sequential=True)`` call still runs alone, in its place.
        limits: the run's ceilings (:class:`Limits`; ``None``: the ``MAX_*``
            defaults). Recorded in ``session.start`` when they are not the defaults.
        output: a type the final answer must decode to (JSON in its text): a msgspec
            Struct, dataclass, TypedDict or any type msgspec decodes, or a pydantic
            model. ``RunResult.output`` holds the value.
        output_retries: how many times an answer that does not decode goes back to
            the model (as a user message) before the run fails ``OUTPUT_INVALID``.

    Returns:
        An :class:`AgentLoop`; prime it with ``next()``.

    Raises:
        ValueError, TypeError: an option is invalid (before any generator exists).
    """
    checked_limits = check_options(
        max_steps=max_steps,
        request_sequence_start=request_sequence_start,
        system=system,
        budget=budget,
        hooks=hooks,
        log=log,
        started_at=started_at,
        rules=rules,
        limits=limits,
    )
    if type(parallel_tools) is not bool:
        raise TypeError(f"parallel_tools must be a bool, got {parallel_tools!r}")
    checked_output = output_check(output, output_retries)
    specs = tool_specs(tools)
    snapshot = snapshot_transcript(messages, checked_limits)
    return AgentLoop(
        transcript=snapshot.messages,
        invalid=snapshot.problem,
        message_ids=snapshot.message_ids,
        call_ids=snapshot.call_ids,
        specs=specs,
        system=system,
        max_steps=max_steps,
        budget=budget,
        hooks=hooks.snapshot() if hooks is not None else {},
        request_sequence_start=request_sequence_start,
        log=log if log is not None else EventLog(),
        started_at=None if started_at is None else float(started_at),
        rules=rules,
        parallel_tools=parallel_tools,
        limits=checked_limits,
        output=checked_output,
    )


# --------------------------------------------------------------------------- the loop


class AgentLoop(Generator[Effect, Reply | None, RunResult]):
    """One run of the agent loop, driven with ``next()`` / ``send()``.

    Create it with :func:`agent_loop`. Besides the generator protocol it exposes
    read-only observations (what a debugger, ``replay.state_at`` or a UI reads):
    :attr:`state`, :attr:`step`, :attr:`messages`, :attr:`usage`,
    :attr:`budget_usage`, :attr:`pending`, :attr:`log` and :attr:`result`. Only
    replies change them.
    """

    def __init__(
        self,
        *,
        transcript: list[Message],
        invalid: str | None,
        message_ids: set[str],
        call_ids: set[str],
        specs: tuple[ToolSpec, ...],
        system: str | None,
        max_steps: int,
        budget: Budget | None,
        hooks: dict[str, tuple[Any, ...]],
        request_sequence_start: int,
        log: EventLog,
        started_at: float | None,
        rules: int = RULES_REVISION,
        parallel_tools: bool = False,
        limits: Limits = DEFAULT_LIMITS,
        output: OutputCheck | None = None,
    ) -> None:
        self._transcript = transcript
        self._limits = limits
        self._output = output
        self._output_retries = 0  # answers sent back so far
        self._output_value: Any = None
        self._output_json: Any = None
        self._invalid = invalid
        self._specs = specs
        self._spec_by_name = {spec.name: spec for spec in specs}
        self._system = system
        self._max_steps = max_steps
        self._budget = budget
        self._hooks = hooks
        self._rss = request_sequence_start
        self._log = log
        self._events = log._events
        self._started_at = started_at
        self._rules = rules
        self._parallel = parallel_tools

        self._state = State.IDLE
        self._step = 0
        self._usage = Usage()
        self._now = started_at
        self._wall_start = started_at
        self._turns = 0
        self._tool_calls = 0
        self._usage_mark = self._usage  # token budgets count from here
        self._pending: Effect | None = None
        self._pause_reason: str | None = None
        self._queued: list[Steer | FollowUp] = []  # received, not yet delivered
        self._steering = False  # a Steer is among them
        self._message_ids = message_ids
        self._call_ids = call_ids  # of the tool calls so far
        self._result: RunResult | None = None
        # A reply that arrived but is not recorded yet (a ToolResult while
        # after_tool_call runs): if the run ends there, run.finished records it.
        self._unrecorded: Reply | None = None
        self._started = False
        self._closing = False
        self._dead: CallerProtocolError | None = None
        # The reply a driver checked (see _checked_by_driver), and whether the last
        # reply's tool-call arguments are known to be plain and within the limits.
        self._checked: Reply | None = None
        self._checked_arguments_ok = False
        self._arguments_ok = False
        self._gen = self._main()

    # ------------------------------------------------------------------ observations

    @property
    def state(self) -> State:
        """The lifecycle state (see :class:`State`)."""
        return self._state

    @property
    def step(self) -> int:
        """The current step number (0 before the first step)."""
        return self._step

    @property
    def messages(self) -> TranscriptView:
        """The transcript so far (complete messages only), as a read-only view."""
        return TranscriptView(self._transcript, len(self._transcript))

    @property
    def usage(self) -> Usage:
        """Token usage summed over the responses so far."""
        return self._usage

    @property
    def budget(self) -> Budget | None:
        """The budget in force (a ``Resume`` may replace it)."""
        return self._budget

    @property
    def budget_usage(self) -> BudgetUsage:
        """What the run used since it started or was last resumed from a budget pause."""
        wall = 0.0
        if self._now is not None and self._wall_start is not None:
            wall = self._now - self._wall_start
        budget = self._budget
        if budget is None or not budget.limits_tokens:
            return BudgetUsage(turns=self._turns, tool_calls=self._tool_calls, wall_seconds=wall)
        used, mark = self._usage, self._usage_mark
        return BudgetUsage(
            turns=self._turns,
            tool_calls=self._tool_calls,
            wall_seconds=wall,
            input_tokens=used.input_tokens - mark.input_tokens,
            output_tokens=used.output_tokens - mark.output_tokens,
        )

    @property
    def pending(self) -> Effect | None:
        """The effect waiting for a reply, or ``None``."""
        return self._pending

    @property
    def log(self) -> EventLog:
        """The run's event log."""
        return self._log

    @property
    def result(self) -> RunResult | None:
        """The :class:`RunResult` once the run has finished."""
        return self._result

    @property
    def limits(self) -> Limits:
        """The ceilings the run follows (:class:`Limits`)."""
        return self._limits

    @property
    def tools(self) -> tuple[ToolSpec, ...]:
        """The tool specs the run snapshotted."""
        return self._specs

    def __repr__(self) -> str:
        return f"<AgentLoop state={self._state.name} step={self._step} events={len(self._events)}>"

    # ------------------------------------------------------------------ generator protocol
    #
    # send/throw/close wrap the private generator (_gen) and catch misuse at the
    # boundary: a reply before priming, after the end, or after the run died raises
    # CallerProtocolError and records nothing more. Inside, every reply enters
    # through _ask, once: accept() checks and copies it (or it is the very object
    # this package's driver checked, see _checked_by_driver), its ``at`` moves the
    # loop's clock, a Cancel unwinds to _finish, and a Steer or FollowUp is queued
    # (message.queued) while the same effect is yielded again; _deliver appends
    # the queued messages at the next boundary. _set is the only place the state
    # changes, _emit the only place an event is recorded.

    def send(self, value: Reply | None) -> Effect:
        """Send a reply to the pending effect; return the next effect.

        Raises:
            StopIteration: the run finished; ``.value`` is the :class:`RunResult`.
            CallerProtocolError: the reply does not fit the pending effect (the run
                is now dead: a failed ``run.finished`` was logged), the run died
                earlier that way, or it already finished (nothing is logged then).
        """
        if self._dead is not None:
            raise CallerProtocolError(f"the run already failed: {self._dead}")
        if self._result is not None and value is not None:
            # next() after the end raises StopIteration, as for any generator; a
            # reply after the end answers nothing and is a bug in the driver.
            raise CallerProtocolError(
                f"send() got {type(value).__name__} after the run finished "
                f"({self._result.status}); there is nothing to reply to"
            )
        if not self._started:
            if value is not None:
                raise CallerProtocolError(
                    "prime the loop with next() before sending a reply: nothing is pending yet"
                )
            self._started = True
        try:
            return self._gen.send(value)
        except CallerProtocolError as exc:
            self._dead = exc
            raise
        except StopIteration:
            raise
        except BaseException as exc:
            if self._result is None:  # the generator died without finishing its log
                self._dead = CallerProtocolError(f"the run stopped on {exception_text(exc)}")
            raise

    def throw(
        self,
        typ: type[BaseException] | BaseException,
        val: object = None,
        tb: object = None,
    ) -> NoReturn:
        """Cancel the run because of ``typ`` (recorded as ``Cancel("<Type>: <msg>")``), then
        raise it. Before the loop was primed, nothing ran and nothing is recorded (as for
        any generator)."""
        exc = typ if isinstance(typ, BaseException) else typ(*(() if val is None else (val,)))
        if not self._started:
            self.close()
        elif self._result is None and self._dead is None:
            with contextlib.suppress(StopIteration):
                self._gen.send(Cancel(reason=exception_text(exc)))
        raise exc

    def close(self) -> None:
        """Cancel the run (reason ``closed``) if it is still going; never raises for that.

        Before the loop was primed nothing has run: as for any generator, closing it
        records nothing (no session started) and ``next()`` then raises StopIteration.
        """
        if self._result is not None or self._dead is not None:
            return
        if not self._started:
            self._started = True
            self._gen.close()  # an unstarted generator: its body never runs
            return
        self._closing = True
        self._gen.close()

    def _set(self, event: Input) -> None:
        """The only place the state changes; an illegal transition raises."""
        try:
            self._state = TRANSITIONS[self._state, event]
        except KeyError:  # pragma: no cover - would be a bug in this module
            raise IllegalTransition(
                f"no transition from {self._state.name} on {event.value}"
            ) from None

    def _emit(self, event: Any) -> None:
        self._events.append(event)
        for fn in self._log._subscribers:  # replaced, never edited, by (un)subscribe
            fn(event)

    def _ask(self, effect: Effect) -> Generator[Effect, Any, Reply]:
        """Yield ``effect``; check, take over and record the time of what comes back.

        A ``Steer`` or ``FollowUp`` is queued (and recorded), and ``effect`` is
        yielded again: the caller may send one at any yield. Sets
        :attr:`_arguments_ok` for the reply returned (see :func:`accept`).
        """
        while True:
            self._pending = effect
            try:
                reply = yield effect
            except GeneratorExit:
                if not self._closing:
                    # Garbage collection finalizing an abandoned loop: record nothing, so
                    # a paused session's log stays resumable.
                    raise
                reply = _CLOSED
            self._pending = None
            kind = type(reply)
            if reply is self._checked and reply is not None:
                self._arguments_ok = self._checked_arguments_ok  # checked by our driver
            else:
                if kind is ModelResponse and type(reply.content) is list:
                    reply = msgspec.structs.replace(reply, content=tuple(reply.content))
                # Mutating the caller's dicts later changes nothing here: we keep copies.
                reply, problem, self._arguments_ok = accept(reply, self._limits)
                if problem is not None:
                    at = getattr(reply, "at", None)
                    raise _Misuse(
                        problem,
                        UnrecognizedReply(
                            description=problem, at=at if type(at) is float else None
                        ),
                    )
                if kind is UnrecognizedReply:  # a replayed log's stand-in for a malformed reply
                    raise _Misuse(reply.description, reply)
            self._checked = None
            at = reply.at
            if at is not None:
                if type(at) is int:
                    reply = msgspec.structs.replace(reply, at=float(at))
                    at = reply.at
                if not math.isfinite(at):
                    raise _Misuse(f"{kind.__name__}.at must be finite, got {at!r}", reply)
                self._now = at
                if self._wall_start is None:
                    self._wall_start = at
            if kind is Cancel:
                raise _Cancelled(reply)
            if kind not in _QUEUED:
                return reply  # type: ignore[no-any-return]
            self._queue(reply)

    def _checked_by_driver(self, reply: Reply, arguments_ok: bool) -> None:
        """For this package's drivers: ``reply``, about to be sent, was made by the
        driver and checked on its way in (``accept`` against :attr:`limits`, which
        says ``arguments_ok``), so the loop takes it as it is instead of checking it
        again. Only that very object is trusted, once; anything else sent to the
        loop (by any caller) is checked as always. Its ``at`` is checked anyway."""
        self._checked = reply
        self._checked_arguments_ok = arguments_ok

    def _queue(self, reply: Steer | FollowUp) -> None:
        message = reply.message
        if message.id in self._message_ids:
            raise _Misuse(
                f"{type(reply).__name__}.message id {message.id!r} is already used in the run",
                reply,
            )
        reserved = reserved_id_problem(message.id) if self._rules >= RESERVED_MESSAGE_IDS else None
        if reserved is not None:
            raise _Misuse(f"{type(reply).__name__}.{reserved}", reply)
        self._message_ids.add(message.id)  # reserved: no later message may take it
        self._queued.append(reply)
        steer = type(reply) is Steer
        self._steering = self._steering or steer
        self._emit(
            MessageQueuedEvent(
                sequence=len(self._events),
                at=self._now,
                step=self._step,
                mode="steer" if steer else "follow_up",
                reply=reply,
            )
        )

    def _deliver(self, *, follow_ups: bool) -> bool:
        """Append the queued steering messages (and, with ``follow_ups``, the
        follow-ups too), in the order they came; say whether any was appended."""
        delivered = False
        waiting: list[Steer | FollowUp] = []
        for reply in self._queued:
            if follow_ups or type(reply) is Steer:
                self._transcript.append(reply.message)
                self._emit(
                    MessageAcceptedEvent(
                        sequence=len(self._events),
                        at=self._now,
                        step=self._step,
                        message=reply.message,
                    )
                )
                delivered = True
            else:
                waiting.append(reply)
        self._queued = waiting
        self._steering = False
        return delivered

    @staticmethod
    def _misuse(reply: Reply, effect: Effect, expected: str) -> _Misuse:
        return _Misuse(wrong_reply(reply, effect, expected), reply)

    # ------------------------------------------------------------------ hooks

    def _hook(self, topic: str, payload: dict[str, Any]) -> object:
        """Run ``topic``'s subscribers in order; return the first SKIP/PauseRequest.

        ``HookAbort`` propagates (its meaning depends on the topic); any other
        exception fails the run with ``HOOK_ERROR``.
        """
        for fn in self._hooks.get(topic, ()):
            try:
                outcome = fn(payload)
            except HookAbort:
                raise
            except (Exception, GeneratorExit) as exc:
                # GeneratorExit too: raised by a hook it is a bug like any other
                # (left alone it would end the generator without run.finished).
                raise _failed(HOOK_ERROR, f"{topic} hook raised {exception_text(exc)}") from exc
            if outcome is SKIP or type(outcome) is PauseRequest:
                return outcome
        return None

    def _observe(self, topic: str, payload: dict[str, Any]) -> None:
        """Run an observer topic: it may not skip, pause or abort."""
        try:
            outcome = self._hook(topic, payload)
        except HookAbort as exc:
            raise _aborted(topic, exc) from exc
        if outcome is not None:
            raise _failed(HOOK_ERROR, f"{topic} hook returned {outcome!r}, which it may not")

    # ------------------------------------------------------------------ start
    #
    # The generator body. A transcript that failed its checks in agent_loop() ends
    # here with one event (a failed run.finished, INVALID_TRANSCRIPT) and no state
    # but DONE. Otherwise session.start records the configuration and one
    # message.accepted per initial message records the transcript: together they
    # are what replay rebuilds the loop from. Then the steps run until one of the
    # three private exceptions says how the run ends; every ending goes through
    # _finish, so run.finished is always the last event and appears once.

    def _main(self) -> Generator[Effect, Any, RunResult]:
        if self._invalid is not None:
            return self._finish_invalid(self._invalid)
        misuse: _Misuse | None = None
        try:
            self._start()
            yield from self._steps()
        except _Finish as finish:
            outcome = finish
        except _Cancelled as cancelled:
            reply = cancelled.cancel
            reason = reply.reason or self._pause_reason or "cancelled"
            outcome = _Finish("cancelled", reason, reply=reply)
        except _Misuse as exc:
            misuse = exc
            outcome = _failed(CALLER_PROTOCOL_ERROR, exc.message, exc.reply)
        except BaseException as exc:
            if isinstance(exc, (Exception, GeneratorExit)):
                # A subscriber's bug (it would fail again on run.finished), or the
                # garbage collector finalizing an abandoned loop: nothing to record.
                raise
            # KeyboardInterrupt and the like, raised by a hook (or a subscriber):
            # end the run like ``throw()`` does (run.finished last), then go on.
            # The cancel is recorded, unless a reply that arrived is not yet: then
            # that reply is (replay re-raises the interrupt where it happened).
            cancel = Cancel(reason=exception_text(exc))
            self._finish(
                _Finish(
                    "cancelled",
                    cancel.reason,
                    reply=self._unrecorded if self._unrecorded is not None else cancel,
                )
            )
            raise
        if self._unrecorded is not None and outcome.reply is None:
            outcome.reply = self._unrecorded  # e.g. a ToolResult after_tool_call failed on
        result = self._finish(outcome)
        if misuse is not None:
            raise CallerProtocolError(misuse.message)
        return result

    # ------------------------------------------------------------------ finish
    #
    # DONE is entered once. The observer hooks run first (on_error for failures,
    # then on_complete); the first failure wins, so a failing observer can only
    # turn a successful run into a failed one. session.complete and run.finished
    # are then emitted unconditionally: a KeyboardInterrupt in an observer is held
    # back until the log is finished. run.finished carries the RunResult without
    # its messages (they are derivable from the log) and the reply that ended the
    # run when no earlier event recorded it.

    def _start(self) -> None:
        self._emit(
            SessionStartEvent(
                sequence=0,
                at=self._now,
                system=self._system,
                tools=self._specs,
                max_steps=self._max_steps,
                budget=self._budget,
                request_sequence_start=self._rss,
                rules=self._rules,
                parallel_tools=self._parallel,
                limits=None if self._limits is DEFAULT_LIMITS else self._limits,
                output=None if self._output is None else self._output.spec,
            )
        )
        for message in self._transcript:
            self._emit(
                MessageAcceptedEvent(sequence=len(self._events), at=self._now, message=message)
            )

    def _finish_invalid(self, problem: str) -> RunResult:
        self._set(Input.FINISH)
        error = RunError(INVALID_TRANSCRIPT, f"invalid transcript: {problem}")
        result = RunResult(
            status="failed",
            final_text=None,
            messages=(),
            steps=0,
            max_steps=self._max_steps,
            error=error,
            reason=INVALID_TRANSCRIPT,
        )
        self._result = result
        self._emit(
            RunFinishedEvent(
                sequence=0,
                at=self._now,
                status="failed",
                max_steps=self._max_steps,
                error=error,
                reason=INVALID_TRANSCRIPT,
            )
        )
        return result

    def _finish(self, outcome: _Finish) -> RunResult:
        self._set(Input.FINISH)
        self._pending = None
        status, reason, error = outcome.status, outcome.reason, outcome.error
        interrupt: BaseException | None = None
        hooks = self._hooks
        try:
            if error is not None and "on_error" in hooks:
                self._observe_quietly("on_error", {"code": error.code, "message": error.message})
            try:
                if "on_complete" in hooks:
                    self._observe(
                        "on_complete",
                        {
                            "status": status,
                            "reason": reason,
                            "final_text": outcome.final_text,
                            "steps": self._step,
                        },
                    )
            except _Finish as late:
                if error is None:  # the first failure wins
                    status, reason, error = late.status, late.reason, late.error
                    assert error is not None
                    self._observe_quietly(
                        "on_error", {"code": error.code, "message": error.message}
                    )
        except (KeyboardInterrupt, SystemExit) as exc:
            interrupt = exc  # finish the log first, then let it go on
        step = self._step
        sequence = len(self._events)
        # The reply that ended the run (when no earlier event recorded it) goes in
        # session.complete, so a crash that loses run.finished does not lose it
        # (rules 0 and 1: in run.finished).
        reply, late_reply = outcome.reply, None
        if self._rules < REPLY_IN_COMPLETE:
            reply, late_reply = None, reply
        self._emit(
            SessionCompleteEvent(
                sequence=sequence,
                at=self._now,
                step=step,
                status=status,
                reason=reason,
                reply=reply,
            )
        )
        final_text = outcome.final_text if status == "completed" else None
        result = RunResult(
            status=status,
            final_text=final_text,
            messages=tuple(self._transcript),
            steps=step,
            max_steps=self._max_steps,
            error=error,
            usage=self._usage,
            reason=reason,
            output=self._output_value if status == "completed" else None,
        )
        self._result = result
        self._emit(
            RunFinishedEvent(
                sequence=sequence + 1,
                at=self._now,
                step=step,
                status=status,
                final_text=final_text,
                steps=step,
                max_steps=self._max_steps,
                error=error,
                usage=self._usage,
                reason=reason,
                reply=late_reply,
                output=self._output_json if status == "completed" else None,
            )
        )
        if interrupt is not None:
            raise interrupt
        return result

    def _observe_quietly(self, topic: str, payload: dict[str, Any]) -> None:
        # The run already failed; a failing on_error hook cannot make it fail more.
        with contextlib.suppress(_Finish):
            self._observe(topic, payload)

    # ------------------------------------------------------------------ steps
    #
    # A step is one model request plus every tool call it asked for. Before it:
    # the turn budget (a pause, not an end) and before_step (SKIP completes the
    # run). Then step.start, the request (before_plan may rewrite what the model
    # is sent, never the transcript), planning, and the assistant message appended
    # with plan.commit. A response without tool calls completes the run; otherwise
    # the calls run in order and step.end closes the batch. max_steps is checked
    # only after a whole batch, so a step never leaves a call unanswered.

    def _steps(self) -> Generator[Effect, Any, None]:
        hooks = self._hooks
        while True:
            budget = self._budget
            if (
                budget is not None
                and budget.max_turns is not None
                and self._turns >= budget.max_turns
            ):
                yield from self._budget_pause("turns")
            if budget is not None and budget.limits_tokens:
                limit = self._tokens_limit(budget)
                if limit is not None:
                    yield from self._budget_pause(limit)
            if self._steering:
                self._deliver(follow_ups=False)
            step = self._step + 1
            if "before_step" in hooks:
                try:
                    outcome = self._hook("before_step", {"step": step})
                except HookAbort as exc:
                    raise _aborted("before_step", exc) from exc
                if outcome is SKIP:
                    raise _Finish("completed", "skipped_by_hook")
                if outcome is not None:
                    raise _failed(HOOK_ERROR, f"before_step hook returned {outcome!r}")
            self._step = step
            self._turns += 1
            self._set(Input.START_STEP)
            request_id = f"request-{self._rss + step:03d}"
            self._emit(
                StepStartEvent(
                    sequence=len(self._events), at=self._now, step=step, request_id=request_id
                )
            )
            request = self._make_request(request_id, step)
            response = yield from self._plan(request)
            content, stop_reason = response.content, response.stop_reason
            if "after_plan" in hooks:
                content, stop_reason = self._after_plan(request, response)
            message = AssistantMessage(f"message-{response.id}", content)
            self._transcript.append(message)
            self._message_ids.add(message.id)
            calls: list[ToolCall] = []
            for block in content:
                if type(block) is ToolCall:
                    calls.append(block)
                    self._call_ids.add(block.id)
            if self._rules < USAGE_WHEN_RECORDED and response.usage is not None:
                self._usage = self._usage + response.usage  # (rules 0: counted when committed)
            self._emit(
                PlanCommitEvent(
                    sequence=len(self._events), at=self._now, step=step, message=message
                )
            )
            if not calls:  # stop, or a text-only length response
                self._end_step(step)
                final_text = text_from_assistant(message)
                if (self._queued and self._deliver(follow_ups=True)) or (
                    self._output is not None and not self._output_ok(final_text, response.id, step)
                ):
                    # Steering, a follow-up or an answer sent back: one more step.
                    if step >= self._max_steps:
                        raise _Finish("max_steps", "no_more_steps")
                    self._set(Input.CONTINUE)
                    continue
                raise _Finish(
                    "completed",
                    "goal_met" if stop_reason == "stop" else "length",
                    final_text=final_text,
                )
            self._set(Input.COMMIT_TOOLS)
            if self._wall_spent():
                yield from self._budget_pause("wall_clock")
            truncated = stop_reason == "length"
            if self._parallel and not truncated:
                yield from self._run_batched(calls, step)
            else:
                for call in calls:
                    yield from self._run_call(call, step, truncated)
            self._set(Input.END_BATCH)
            self._end_step(step)
            if step >= self._max_steps:
                if self._steering:  # kept in the transcript for whoever continues it
                    self._deliver(follow_ups=False)
                raise _Finish("max_steps", "no_more_steps")

    def _output_ok(self, text: str, response_id: str, step: int) -> bool:
        """Decode the final answer; if it does not, send it back (a user message) or,
        with the retries used up, fail the run ``OUTPUT_INVALID``."""
        check = self._output
        assert check is not None
        value, as_json, error = check.check(text)
        if error is None:
            self._output_value, self._output_json = value, as_json
            return True
        if self._output_retries >= check.spec.retries:
            raise _failed(OUTPUT_INVALID, f"step {step}: {check.failure_text(error)}")
        self._output_retries += 1
        message_id = f"output-retry-{response_id}"
        while message_id in self._message_ids:
            message_id += "-"
        message = UserMessage(message_id, check.retry_text(error))
        self._transcript.append(message)
        self._message_ids.add(message_id)
        self._emit(
            MessageAcceptedEvent(
                sequence=len(self._events), at=self._now, step=step, message=message
            )
        )
        return False

    def _end_step(self, step: int) -> None:
        self._emit(StepEndEvent(sequence=len(self._events), at=self._now, step=step))
        if "after_step" in self._hooks:
            self._observe("after_step", {"step": step})

    def _make_request(self, request_id: str, step: int) -> ModelRequest:
        messages: Sequence[Message] = TranscriptView(self._transcript, len(self._transcript))
        system = self._system
        if "before_plan" in self._hooks:
            payload: dict[str, Any] = {
                "step": step,
                "request_id": request_id,
                "messages": messages,
                "system": system,
            }
            try:
                outcome = self._hook("before_plan", payload)
            except HookAbort as exc:
                raise _aborted("before_plan", exc) from exc
            if outcome is not None:
                raise _failed(HOOK_ERROR, f"before_plan hook returned {outcome!r}")
            if payload["messages"] is not messages:
                rewritten = payload["messages"]
                if not isinstance(rewritten, (list, tuple, TranscriptView)) or not all(
                    type(m) in _MESSAGE_TYPES for m in rewritten
                ):
                    raise _failed(
                        HOOK_ERROR,
                        "before_plan hook set 'messages' to something not a "
                        "list of UserMessage/AssistantMessage/ToolResultMessage",
                    )
                messages = tuple(rewritten)
            system = payload["system"]
            if system is not None and type(system) is not str:
                raise _failed(HOOK_ERROR, "before_plan hook set 'system' to a non-str")
        output = None if self._output is None else self._output.spec
        return ModelRequest(request_id, step, messages, self._specs, system, output)

    # ------------------------------------------------------------------ plan
    #
    # The model answers one request with chunks then a response (or a failure).
    # Each chunk is checked as it arrives (request id, chunk and text limits,
    # tool-call arguments) and recorded in model.chunk; the same request is
    # yielded again. The response or failure is recorded in plan.draft *before*
    # it is judged, so a rejected answer is in the log exactly as received.

    def _plan(self, request: ModelRequest) -> Generator[Effect, Any, ModelResponse]:
        """Collect chunks and the final response for ``request``; validate them."""
        step = request.step
        limits = self._limits
        max_chunks, max_text = limits.chunks_per_step, limits.step_text_code_points
        chunks = 0
        text_points = 0
        streamed: list[str | Block] = []  # text deltas merged; other blocks as boundaries
        parts: list[str] = []  # the text run being merged
        while True:
            reply = yield from self._ask(request)
            if type(reply) is ModelChunk:
                # (Messages are worded only when they are needed: this runs per chunk.)
                if reply.request_id != request.id:
                    raise _failed(
                        MODEL_PROTOCOL_ERROR,
                        f"step {step}, chunk {chunks + 1}: chunk names request "
                        f"{reply.request_id!r}, but the active request is {request.id!r}",
                        reply,
                    )
                chunks += 1
                if chunks > max_chunks:
                    name = limit_name(limits, "chunks_per_step")
                    raise _failed(
                        MODEL_PROTOCOL_ERROR,
                        f"step {step}, chunk {chunks}: more than {name} chunks",
                        reply,
                    )
                block = reply.block
                if type(block) is TextBlock:
                    text_points += len(block.text)
                    if block.text:  # an empty delta adds nothing (the final may omit it)
                        parts.append(block.text)
                else:
                    if parts:
                        streamed.append("".join(parts))
                        parts = []
                    if type(block) is ThinkingBlock:
                        text_points += len(block.text)
                    elif type(block) is ToolCall and not self._arguments_ok:
                        _, semantic = arguments_problems(block.arguments, limits)
                        if semantic is not None:
                            raise _failed(
                                MODEL_PROTOCOL_ERROR,
                                f"step {step}, chunk {chunks}: tool call {block.id!r} "
                                f"arguments: {semantic}",
                                reply,
                            )
                    streamed.append(block)
                if text_points > max_text:
                    name = limit_name(limits, "step_text_code_points")
                    raise _failed(
                        MODEL_PROTOCOL_ERROR,
                        f"step {step}, chunk {chunks}: streamed text exceeds {name}",
                        reply,
                    )
                self._emit(
                    ModelChunkEvent(
                        sequence=len(self._events), at=self._now, step=step, chunk=reply
                    )
                )
            elif type(reply) is ModelResponse or type(reply) is ModelFailure:
                self._emit(
                    PlanDraftEvent(sequence=len(self._events), at=self._now, step=step, reply=reply)
                )
                if self._rules >= USAGE_WHEN_RECORDED:
                    for attempt in reply.attempts:  # models a FallbackModel tried first
                        if attempt.usage is not None:
                            self._usage = self._usage + attempt.usage
                    if reply.usage is not None:  # billed, whatever happens next
                        self._usage = self._usage + reply.usage
                if reply.request_id != request.id:
                    raise _failed(
                        MODEL_PROTOCOL_ERROR,
                        f"step {step}: {type(reply).__name__} names request {reply.request_id!r}, "
                        f"but the active request is {request.id!r}",
                    )
                if type(reply) is ModelFailure:
                    code = reply.code if reply.code in _FAILURE_CODES else MODEL_ERROR
                    raise _failed(code, f"step {step}: model call failed: {reply.message}")
                assert type(reply) is ModelResponse
                problem = self._response_problem(reply)
                if problem is None and chunks:
                    if parts:
                        streamed.append("".join(parts))
                    problem = stream_mismatch(streamed, reply.content)
                if problem is not None:
                    raise _failed(MODEL_PROTOCOL_ERROR, f"step {step}: {problem}")
                if reply.stop_reason in _FAILING_STOPS:
                    raise _stopped(step, reply)
                return reply
            else:
                raise self._misuse(
                    reply, request, "ModelChunk, ModelResponse, ModelFailure or Cancel"
                )

    # ------------------------------------------------------------------ validate
    #
    # What a response must satisfy before it becomes a message (DESIGN §8): a
    # known stop reason that agrees with the content, new ids (they become
    # message-<id> and tool-result-<call id>), the block and text limits, and
    # plain-JSON arguments within the argument limits. When chunks were streamed,
    # the merged stream must equal the merged final content. after_plan may edit
    # the draft; an edit is held to the same rules, a failing one is the hook's
    # fault (HOOK_ERROR), not the model's.

    def _response_problem(self, response: ModelResponse) -> str | None:
        if response.stop_reason not in STOP_REASONS:
            return f"unknown stop reason {response.stop_reason!r}; expected one of {STOP_REASONS}"
        if not response.id:
            return "response id is empty"
        if f"message-{response.id}" in self._message_ids:
            return f"response id {response.id!r} was already used (message-{response.id})"
        return self._content_problem(response.content, response.stop_reason, self._arguments_ok)

    def _content_problem(
        self, content: tuple[Block, ...], stop_reason: str, checked: bool = False
    ) -> str | None:
        """The first rule ``content`` breaks, or ``None``. ``checked``: its tool calls'
        arguments are known to be plain and within the limits (see ``accept``)."""
        limits = self._limits
        if len(content) > limits.assistant_blocks:
            name = limit_name(limits, "assistant_blocks")
            return f"{len(content)} blocks exceed {name}"
        text_points = 0
        seen: set[str] = set()
        taken, used = self._message_ids, self._call_ids
        for index, block in enumerate(content):
            kind = type(block)
            if kind is ToolCall:
                call_id = block.id  # type: ignore[union-attr]
                if (
                    not call_id
                    or not block.name  # type: ignore[union-attr]
                    or call_id in seen
                    or call_id in used
                    or f"tool-result-{call_id}" in taken
                    or not (checked or arguments_ok(block.arguments, limits))  # type: ignore[union-attr]
                ):
                    return self._call_problem(index, block, seen)  # type: ignore[arg-type]
                seen.add(call_id)
            elif kind is not ProviderBlock:  # opaque data: checked as JSON, not as text
                text_points += len(block.text)  # type: ignore[union-attr]
        if text_points > limits.step_text_code_points:
            name = limit_name(limits, "step_text_code_points")
            return f"text exceeds {name}"
        if stop_reason == "stop" and seen:
            return "stop reason 'stop' but the response contains tool calls"
        if stop_reason == "tool_call" and not seen:
            return "stop reason 'tool_call' but the response contains no tool call"
        return None

    def _call_problem(self, index: int, call: ToolCall, seen: set[str]) -> str:
        """What is wrong with ``content[index]``, a tool call (the words, once
        :meth:`_content_problem` found that something is)."""
        if not call.id:
            return f"content[{index}]: tool call id is empty"
        where = f"content[{index}] (tool call {call.id!r})"
        if not call.name:
            return f"{where}: tool name is empty"
        if call.id in seen or call.id in self._call_ids:
            return f"{where}: tool call id is not unique"
        if f"tool-result-{call.id}" in self._message_ids:
            return f"{where}: its result id tool-result-{call.id} is already taken"
        # (Structural problems were refused on the way in: the limits are left.)
        structural, semantic = arguments_problems(call.arguments, self._limits)
        return f"{where} arguments: {semantic or structural}"

    def _after_plan(
        self, request: ModelRequest, response: ModelResponse
    ) -> tuple[tuple[Block, ...], str]:
        payload: dict[str, Any] = {
            "step": request.step,
            "request_id": request.id,
            "response_id": response.id,
            "content": [copy_block(block) for block in response.content],
            "stop_reason": response.stop_reason,
        }
        try:
            outcome = self._hook("after_plan", payload)
        except HookAbort as exc:
            raise _aborted("after_plan", exc) from exc
        if outcome is not None:
            raise _failed(HOOK_ERROR, f"after_plan hook returned {outcome!r}")
        content, stop_reason = payload["content"], payload["stop_reason"]
        if not isinstance(content, (list, tuple)):
            raise _failed(HOOK_ERROR, "after_plan hook set 'content' to a non-list")
        content = tuple(content)
        if content == response.content and stop_reason == response.stop_reason:
            return response.content, response.stop_reason
        problem = reply_problem(ModelResponse(request.id, response.id, content, stop_reason))
        if problem is None:
            if stop_reason not in STOP_REASONS or stop_reason in _FAILING_STOPS:
                problem = f"stop reason {stop_reason!r} is not stop, tool_call or length"
            else:
                problem = self._content_problem(content, stop_reason)
        if problem is not None:
            raise _failed(HOOK_ERROR, f"after_plan hook produced an invalid plan: {problem}")
        return tuple(copy_block(block) for block in content), stop_reason

    # ------------------------------------------------------------------ tool calls
    #
    # Each call: the tool-call budget, then the loop's own verdicts (a truncated
    # response, an unknown tool), before_tool_call (edit, abort, skip, pause) and
    # approval, then tool.call for every call, made-up error results included.
    # Only a call that survived all of that is yielded as a ToolRequest; the
    # caller's ToolResult passes after_tool_call and is appended, recorded in
    # tool.result or tool.error with the reply as received. Loop-made results have
    # no reply. Hooks and tools get copies of the arguments, never the loop's own.

    def _run_call(self, call: ToolCall, step: int, truncated: bool) -> Generator[Effect, Any, None]:
        if not self._steering and self._tool_budget_spent():
            yield from self._budget_pause("tool_calls")
        loop_error, gated = self._open_call(call, truncated)
        if gated:
            call, loop_error = yield from self._gate(call, step)
        self._emit_call(call, step)
        reply: ToolResult | None = None
        if loop_error is not None:
            content, is_error = loop_error, True
        else:
            self._set(Input.REQUEST_TOOL)
            effect = ToolRequest(copy_call(call), step)  # the tool may mutate its copy
            answer = yield from self._ask(effect)
            if type(answer) is not ToolResult:
                raise self._misuse(answer, effect, f"ToolResult(call_id={call.id!r}) or Cancel")
            reply = answer
            if reply.call_id != call.id:
                raise _Misuse(
                    f"send() got ToolResult for call {reply.call_id!r} while the ToolRequest "
                    f"for call {call.id!r} was pending",
                    reply,
                )
            self._set(Input.RECEIVE_RESULT)
            content, is_error = reply.content, reply.is_error
        message = self._result_message(call, step, content, is_error, reply)
        self._transcript.append(message)
        self._message_ids.add(message.id)
        self._emit_result(message, step, reply)
        if reply is not None and self._wall_spent():
            yield from self._budget_pause("wall_clock")

    def _tool_budget_spent(self) -> bool:
        budget = self._budget
        return (
            budget is not None
            and budget.max_tool_calls is not None
            and self._tool_calls >= budget.max_tool_calls
        )

    def _open_call(self, call: ToolCall, truncated: bool) -> tuple[str | None, bool]:
        """Count the call and give the loop's own verdict on it, before any hook.

        Returns the loop-made error that replaces running it, if any (a ``Steer``
        came, a truncated response, an unknown tool), and whether
        ``before_tool_call`` or approval must still decide (:meth:`_gate`). Once a
        ``Steer`` came (even during a budget pause just before), the calls left are
        skipped, not run and not counted. ``tool.call`` follows (:meth:`_emit_call`).
        """
        if self._steering:
            return "skipped: steered", False
        self._tool_calls += 1
        if truncated:
            return "truncated; re-issue the call", False
        spec = self._spec_by_name.get(call.name)
        if spec is None:
            known = ", ".join(sorted(self._spec_by_name)) or "none"
            return f"unknown tool {call.name!r}; available tools: {known}", False
        return None, spec.requires_approval or "before_tool_call" in self._hooks

    def _gate(
        self, call: ToolCall, step: int
    ) -> Generator[Effect, Any, tuple[ToolCall, str | None]]:
        """Run ``before_tool_call``, then approval; return the call as it will run
        (hooks may edit its arguments) and the error that replaces running it, if any."""
        loop_error: str | None = None
        if "before_tool_call" in self._hooks:
            call, loop_error = yield from self._before_tool_call(call, step)
        if loop_error is None and self._spec_by_name[call.name].requires_approval:
            call, loop_error = yield from self._approval(call, "approval", None)
        return call, loop_error

    def _emit_call(self, call: ToolCall, step: int) -> None:
        self._emit(ToolCallEvent(sequence=len(self._events), at=self._now, step=step, call=call))

    def _result_message(
        self, call: ToolCall, step: int, content: str, is_error: bool, reply: ToolResult | None
    ) -> ToolResultMessage:
        """Run ``after_tool_call`` on a result; return its message. Should the hook
        fail, the run's end records ``reply`` (every reply is recorded)."""
        if "after_tool_call" in self._hooks:
            self._unrecorded = reply
            content, is_error = self._after_tool_call(call, step, content, is_error)
            self._unrecorded = None
        return ToolResultMessage(f"tool-result-{call.id}", call.id, call.name, content, is_error)

    def _emit_result(self, message: ToolResultMessage, step: int, reply: ToolResult | None) -> None:
        event_type = ToolErrorEvent if message.is_error else ToolResultEvent
        self._emit(
            event_type(
                sequence=len(self._events), at=self._now, step=step, message=message, reply=reply
            )
        )

    # ------------------------------------------------------------------ parallel tool batches

    def _run_batched(self, calls: list[ToolCall], step: int) -> Generator[Effect, Any, None]:
        """``parallel_tools``: the step's calls in batches (DESIGN §18).

        Calls are opened in source order (budget, ``before_tool_call``, approval
        pauses, ``tool.call``) and gathered into a batch; the batch goes out when a
        sequential tool comes (which then runs alone), when the tool-call budget is
        spent (the pause follows the batch, where the sequential loop pauses), or
        after the last call. Results -- the caller's, in the order they arrive, and
        the loop's own errors -- are recorded at once and enter the transcript in
        source order when their batch is complete, or when the run stops (only the
        results received are kept; none is invented).
        """
        batch: list[tuple[int, ToolCall]] = []
        done: list[tuple[int, ToolResultMessage]] = []
        try:
            for index, call in enumerate(calls):
                spec = self._spec_by_name.get(call.name)
                if spec is not None and spec.sequential:
                    yield from self._run_batch(batch, done, step)
                    yield from self._run_call(call, step, False)
                    continue
                if not self._steering and self._tool_budget_spent():
                    yield from self._run_batch(batch, done, step)
                    yield from self._budget_pause("tool_calls")
                loop_error, gated = self._open_call(call, False)
                if gated:
                    call, loop_error = yield from self._gate(call, step)
                self._emit_call(call, step)
                if loop_error is None:
                    batch.append((index, call))
                else:
                    message = self._result_message(call, step, loop_error, True, None)
                    done.append((index, message))
                    self._emit_result(message, step, None)
            yield from self._run_batch(batch, done, step)
        finally:
            self._append_results(done)

    def _run_batch(
        self,
        batch: list[tuple[int, ToolCall]],
        done: list[tuple[int, ToolResultMessage]],
        step: int,
    ) -> Generator[Effect, Any, None]:
        """Yield ``batch`` (if any) until each call has its result; then append ``done``."""
        if not batch:
            self._append_results(done)
            return
        self._set(Input.REQUEST_BATCH)
        effect = ToolBatch(tuple(ToolRequest(copy_call(call), step) for _, call in batch), step)
        waiting = {call.id: (index, call) for index, call in batch}
        batch.clear()
        while waiting:
            reply = yield from self._ask(effect)
            if type(reply) is not ToolResult:
                raise self._misuse(reply, effect, "a ToolResult for one of its calls, or Cancel")
            entry = waiting.pop(reply.call_id, None)
            if entry is None:
                raise _Misuse(_stray_result(reply, effect, waiting), reply)
            self._set(Input.RECEIVE_BATCH_RESULT if waiting else Input.COMPLETE_BATCH)
            index, call = entry
            message = self._result_message(call, step, reply.content, reply.is_error, reply)
            done.append((index, message))
            self._emit_result(message, step, reply)
        self._append_results(done)
        if self._wall_spent():
            yield from self._budget_pause("wall_clock")

    def _append_results(self, done: list[tuple[int, ToolResultMessage]]) -> None:
        done.sort(key=_first)
        for _, message in done:
            self._transcript.append(message)
            self._message_ids.add(message.id)
        done.clear()

    def _before_tool_call(
        self, call: ToolCall, step: int
    ) -> Generator[Effect, Any, tuple[ToolCall, str | None]]:
        arguments = copy_json(call.arguments)
        payload: dict[str, Any] = {
            "step": step,
            "tool_call_id": call.id,
            "tool_name": call.name,
            "arguments": arguments,
        }
        try:
            outcome = self._hook("before_tool_call", payload)
        except HookAbort as exc:
            return call, f"hook_abort:{abort_reason(exc)}"
        if outcome is SKIP:
            return call, "skipped"
        edited = payload["arguments"]
        if edited is not arguments or edited != call.arguments:
            structural, semantic = arguments_problems(edited, self._limits)
            if structural or semantic:
                raise _failed(
                    HOOK_ERROR,
                    f"before_tool_call hook set invalid arguments for call {call.id!r}: "
                    f"{structural or semantic}",
                )
            call = ToolCall(call.id, call.name, copy_json(edited))
        if type(outcome) is PauseRequest:
            if type(outcome.reason) is not str:
                raise _failed(HOOK_ERROR, "before_tool_call PauseRequest.reason is not a str")
            problem = surrogate_problem(outcome.reason, "before_tool_call PauseRequest.reason")
            if problem is not None:
                raise _failed(HOOK_ERROR, problem)
            problem = json_problem(outcome.payload, "PauseRequest.payload")
            if problem is not None:
                raise _failed(HOOK_ERROR, f"before_tool_call {problem}")
            return (yield from self._approval(call, outcome.reason, outcome.payload))
        return call, None

    def _approval(
        self, call: ToolCall, reason: str, extra: Any
    ) -> Generator[Effect, Any, tuple[ToolCall, str | None]]:
        """Pause before ``call`` and act on the decision in ``Resume.payload``."""
        payload: dict[str, Any] = {}
        if isinstance(extra, dict):
            payload.update(extra)
        elif extra is not None:
            payload["detail"] = extra
        payload["call"] = {
            "id": call.id,
            "name": call.name,
            "arguments": copy_json(call.arguments),
        }
        resume = yield from self._pause(reason, payload, decision=True)
        decision = resume.payload
        if not decision["approved"]:
            message = decision.get("message")
            return call, message if type(message) is str and message else "denied"
        if "arguments" in decision:
            structural, semantic = arguments_problems(decision["arguments"], self._limits)
            if structural or semantic:
                return call, f"invalid edited arguments: {structural or semantic}"
            call = ToolCall(call.id, call.name, copy_json(decision["arguments"]))
        return call, None

    def _after_tool_call(
        self, call: ToolCall, step: int, content: str, is_error: bool
    ) -> tuple[str, bool]:
        payload: dict[str, Any] = {
            "step": step,
            "tool_call_id": call.id,
            "tool_name": call.name,
            "arguments": copy_json(call.arguments),
            "content": content,
            "is_error": is_error,
        }
        self._observe("after_tool_call", payload)
        content, is_error = payload["content"], payload["is_error"]
        if type(content) is not str or type(is_error) is not bool:
            raise _failed(
                HOOK_ERROR,
                "after_tool_call hook set 'content' to a non-str or 'is_error' to a non-bool",
            )
        problem = surrogate_problem(content, "after_tool_call hook's 'content'")
        if problem is not None:
            raise _failed(HOOK_ERROR, problem)
        return content, is_error

    # ------------------------------------------------------------------ pauses and budget
    #
    # A pause moves the machine to IDLE and yields Pause; only Resume (or Cancel)
    # answers it. Budget limits are soft: reaching one emits budget.warn and
    # pauses with reason budget_exceeded:<limit>; resuming resets the counters
    # (and may bring a new Budget). The wall clock is the caller's: it only moves
    # with replies' ``at``, so it is checked after each reply that can advance it.
    # session.resume is recorded after the resume was applied, so state_at() at
    # that event shows the resumed loop.

    def _wall_spent(self) -> bool:
        """Whether the wall-clock budget is used up (then: ``_budget_pause("wall_clock")``).

        A plain test, not a generator, so that the common case (no budget) costs a
        call, not a generator's creation, wherever the clock may have moved.
        """
        budget = self._budget
        return (
            budget is not None
            and budget.max_wall_seconds is not None
            and self._now is not None
            and self._wall_start is not None
            and self._now - self._wall_start >= budget.max_wall_seconds
        )

    def _tokens_limit(self, budget: Budget) -> str | None:
        """The token limit the run has reached (``input_tokens``, ...), or ``None``."""
        usage = self.budget_usage
        total = usage.input_tokens + usage.output_tokens
        if budget.max_input_tokens is not None and usage.input_tokens >= budget.max_input_tokens:
            return "input_tokens"
        if budget.max_output_tokens is not None and usage.output_tokens >= budget.max_output_tokens:
            return "output_tokens"
        if budget.max_total_tokens is not None and total >= budget.max_total_tokens:
            return "total_tokens"
        return None

    def _budget_pause(self, limit: str) -> Generator[Effect, Any, None]:
        budget = self._budget
        assert budget is not None
        usage = self.budget_usage
        used = msgspec.structs.asdict(usage)
        if not budget.limits_tokens:  # the payload logs have always held
            del used["input_tokens"], used["output_tokens"]
        if "on_budget_exceeded" in self._hooks:
            self._observe(
                "on_budget_exceeded",
                {"limit": limit, "usage": dict(used), "budget": msgspec.structs.asdict(budget)},
            )
        self._emit(
            BudgetWarnEvent(
                sequence=len(self._events),
                at=self._now,
                step=self._step,
                limit=limit,
                usage=usage,
                budget=budget,
            )
        )
        yield from self._pause(
            f"budget_exceeded:{limit}",
            {"limit": limit, "usage": used},
            reset_counters=True,
        )

    def _pause(
        self, reason: str, payload: Any, *, reset_counters: bool = False, decision: bool = False
    ) -> Generator[Effect, Any, Resume]:
        """Yield ``Pause``; on ``Resume`` apply it, then record it in ``session.resume``.

        Resuming from a budget pause resets the counters (turns, tool calls, the
        wall-clock start); a ``Resume.budget`` replaces the limits either way. With
        ``decision`` (an approval), the payload must say ``approved``: a Resume that
        does not is misuse, recorded once, in run.finished (never in session.resume).
        """
        self._emit(
            SessionPauseEvent(
                sequence=len(self._events),
                at=self._now,
                step=self._step,
                reason=reason,
                payload=payload,
            )
        )
        if "on_pause" in self._hooks:
            self._observe("on_pause", {"reason": reason, "payload": copy_json(payload)})
        resume_to = self._state
        self._set(Input.PAUSE)
        self._pause_reason = reason
        effect = Pause(reason, copy_json(payload))  # the caller may edit its copy
        reply = yield from self._ask(effect)
        if type(reply) is not Resume:
            raise self._misuse(reply, effect, "Resume or Cancel")
        if decision:
            problem = decision_problem(reason, reply.payload)
            if problem is not None:
                raise _Misuse(problem, reply)
        self._pause_reason = None
        if reply.budget is not None:
            self._budget = reply.budget
        if reset_counters:
            self._turns = 0
            self._tool_calls = 0
            self._usage_mark = self._usage
            self._wall_start = self._now
        self._set(RESUME_INPUT[resume_to])
        self._emit(
            SessionResumeEvent(
                sequence=len(self._events), at=self._now, step=self._step, reply=reply
            )
        )
        return reply


# --------------------------------------------------------------------------- helpers


def _first(pair: tuple[int, Any]) -> int:
    return pair[0]


def _stray_result(reply: ToolResult, batch: ToolBatch, waiting: Mapping[str, Any]) -> str:
    """Why a ``ToolResult`` does not answer the pending batch."""
    awaiting = ", ".join(repr(call_id) for call_id in waiting)
    if any(request.call.id == reply.call_id for request in batch.requests):
        return (
            f"send() got a second ToolResult for call {reply.call_id!r} of the pending "
            f"ToolBatch; it still awaits calls {awaiting}"
        )
    return (
        f"send() got ToolResult for call {reply.call_id!r}, which is not in the pending "
        f"ToolBatch of calls {call_ids(batch)}; it still awaits calls {awaiting}"
    )


def _stopped(step: int, response: ModelResponse) -> _Finish:
    """The failure for a response that stopped for ``error`` or ``refusal``."""
    words = response.stop_message
    if response.stop_reason == "refusal":
        why = words or "".join(b.text for b in response.content if type(b) is TextBlock)
        return _failed(
            MODEL_REFUSED, f"step {step}: the model refused: {why or 'it gave no explanation'}"
        )
    said = f": {words}" if words else ""
    return _failed(MODEL_ERROR, f"step {step}: the model stopped with reason 'error'{said}")
