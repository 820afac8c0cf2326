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

What lives where
----------------
:class:`AgentLoop` (this module) keeps the main line, top to bottom: the generator
protocol (``send``/``throw``/``close``), ``_ask`` (the one door every reply comes
in by), start, the steps, planning (a model's chunks and response), and finish.
It delegates the rest, the way h11's ``Connection`` delegates to
``ConnectionState``:

- ``_run``: :class:`~agentloop._run.Run`, the run's mutable state and lifecycle
  flags in one object (state, step, transcript and ids, usage and budget
  counters, pending effect, queued messages, the sticky error); ``Run.set`` is the
  only place the state changes (the table in ``_state``); ``Run.queue`` and
  ``Run.deliver`` keep the steering and follow-up messages. Also the private
  control-flow exceptions -- ``_Finish`` (the run ends: completed, max_steps,
  failed), ``_Cancelled`` (a ``Cancel`` or ``close()``), ``_Misuse`` (the caller
  broke the protocol; after the failed ``run.finished`` is logged,
  ``CallerProtocolError`` leaves ``send()``) -- and the hook runners.
- ``_calls``: :class:`~agentloop._calls.ToolCalls`, a step's tool calls, one at a
  time or in parallel batches, with their hooks and approvals.
- ``_pauses``: :class:`~agentloop._pauses.Pauses`, pauses and the budget.
- ``_context``: :class:`~agentloop._context.Context`, the context window (DESIGN
  §27), with ``Limits.context_tokens`` only: before a step's request,
  ``Context.prepare`` compacts the model's view if the policy says so (a summary
  is a request made through ``_plan``) and refuses a request over the window
  (``CONTEXT_OVERFLOW``); after the response, ``Context.answered`` keeps its
  input tokens. The transcript itself is never changed.
- ``_handoffs``: :class:`~agentloop._handoffs.Handoffs`, the agents of a run with
  ``handoffs=`` (DESIGN §26): ``ToolCalls`` hands it the ``transfer_to_*`` calls;
  at the end of a step that transferred, ``_hand_off`` records ``agent.handoff``
  and takes the new agent's system prompt, tools, model name and output; before
  each request its input filter's view replaces the transcript (without a
  context window).
- ``_validation``: what a valid reply is, as pure functions (structure, tool
  arguments, a response and its content, streamed chunks, failing stops).
- ``_events``: :meth:`EventLog.append <agentloop.EventLog.append>` records an event
  and calls the subscribers; every event goes through it.

And the mechanics next to them: the eager option checks in ``_options``, the
transcript snapshot and view in ``_transcript``, copies in ``_copy``, the
stream/final comparison in ``_stream``, error wording in ``_text``.

Per step the cost is O(new content): ``ModelRequest.messages`` is a view of the
append-only transcript (fixed length, no copy), ids are checked against sets kept
up to date incrementally, and events hold only what is new. On the hot path the
methods bind the :class:`Run` and the log to locals once.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Generator, Iterable, Mapping, Sequence
from typing import Any, NoReturn

import msgspec

from ._budget import Budget, BudgetUsage
from ._calls import ToolCalls
from ._context import Context, check_compaction
from ._copy import copy_block
from ._errors import (
    CALLER_PROTOCOL_ERROR,
    HOOK_ERROR,
    INVALID_TRANSCRIPT,
    MODEL_ERROR,
    MODEL_PROTOCOL_ERROR,
    OUTPUT_INVALID,
    CallerProtocolError,
)
from ._events import (
    EventLog,
    MessageAcceptedEvent,
    ModelChunkEvent,
    PlanCommitEvent,
    PlanDraftEvent,
    RunFinishedEvent,
    SessionCompleteEvent,
    SessionStartEvent,
    StepEndEvent,
    StepStartEvent,
)
from ._handoffs import Handoffs, check_handoffs
from ._hooks import SKIP, HookAbort, HookRegistry
from ._limits import DEFAULT_LIMITS, Limits
from ._messages import (
    AssistantMessage,
    Block,
    ImageBlock,
    Message,
    TextBlock,
    ThinkingBlock,
    ToolCall,
    ToolResultMessage,
    UserMessage,
    text_from_assistant,
)
from ._options import check_options, tool_specs
from ._output import OutputCheck, output_check
from ._pauses import Pauses, budget_usage
from ._protocol import (
    Cancel,
    Effect,
    FollowUp,
    ModelChunk,
    ModelFailure,
    ModelRequest,
    ModelResponse,
    Reply,
    RunError,
    RunResult,
    Steer,
    UnrecognizedReply,
    Usage,
)
from ._rules import REPLY_IN_COMPLETE, RESERVED_MESSAGE_IDS, RULES_REVISION, USAGE_WHEN_RECORDED
from ._run import (
    Run,
    _Cancelled,
    _Finish,
    _Misuse,
    aborted,
    failed,
    misuse,
    observe,
    observe_quietly,
    run_hooks,
)
from ._state import Input, State
from ._stream import stream_mismatch
from ._text import exception_text
from ._toolspec import ToolSpec
from ._transcript import TranscriptView, snapshot_transcript
from ._tree import ParentLink, parent_problem
from ._validation import (
    FAILING_STOPS,
    accept,
    chunk_call_problem,
    chunk_limit_problem,
    chunk_request_problem,
    edited_plan_problem,
    final_request_problem,
    media_problem,
    response_problem,
    stop_failure,
)

__all__ = ["AgentLoop", "TranscriptView", "agent_loop"]

_MESSAGE_TYPES = (UserMessage, AssistantMessage, ToolResultMessage)
_FAILURE_CODES = (MODEL_ERROR, MODEL_PROTOCOL_ERROR)
_CLOSED = Cancel(reason="closed")
_QUEUED = frozenset((Steer, FollowUp))  # replies queued for delivery, at any yield


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
    parent: ParentLink | None = None,
    compaction: Any = None,
    handoffs: Sequence[Any] | None = None,
    agent_name: str | None = None,
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
        parent: where this run sits in a session tree when it is a child session
            (:func:`agentloop.agent_tool` sets it; recorded in ``session.start``).
        compaction: a :class:`CompactionPolicy` (:class:`SummarizeOlder`,
            :class:`TrimToolResults`) that compacts the model's view of the
            transcript to fit ``Limits.context_tokens`` (which it needs). The log
            and ``RunResult.messages`` keep the full history (DESIGN §27). A dict is
            a built-in policy's ``spec()``, as ``session.start`` records it.
        handoffs: the agents (:class:`Handoff`) the model may transfer the
            conversation to, each offered as a ``transfer_to_<name>`` tool the loop
            runs itself (DESIGN §26; ``agentloop/_handoffs.py``).
        agent_name: the starting agent's name (default ``"main"``; with ``handoffs``).

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
    problem = parent_problem(parent)
    if problem is not None:
        raise TypeError(problem) if type(parent) is not ParentLink else ValueError(problem)
    policy = check_compaction(compaction, checked_limits.context_tokens)
    specs = tool_specs(tools)
    agents = (
        None
        if handoffs is None and agent_name is None
        else check_handoffs(
            handoffs,
            agent_name,
            system=system,
            specs=specs,
            output=checked_output,
            output_retries=output_retries,
            context_tokens=checked_limits.context_tokens,
        )
    )
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
        parent=parent,
        compaction=policy,
        handoffs=agents,
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
        parent: ParentLink | None = None,
        compaction: Any = None,
        handoffs: Handoffs | None = None,
    ) -> None:
        # The configuration: fixed for the run.
        self._limits = limits
        self._output = output
        self._invalid = invalid
        self._specs = specs
        self._system = system
        self._max_steps = max_steps
        self._hooks = hooks
        self._rss = request_sequence_start
        self._log = log
        self._rules = rules
        self._parallel = parallel_tools
        self._parent = parent
        # What replies change, in one object; and the delegates that share it.
        self._run = run = Run(transcript, message_ids, call_ids, budget, started_at)
        self._pauses = Pauses(run, log, hooks, self._ask)
        self._calls = ToolCalls(run, log, hooks, specs, limits, self._ask, self._pauses)
        self._compaction = compaction
        self._handoffs = handoffs  # the agents (DESIGN §26, _handoffs)
        self._offered = specs if handoffs is None else handoffs.current.offered
        self._model: str | None = None
        if handoffs is not None:
            self._calls.handoffs = handoffs
        self._context = (  # the model's view and the window (DESIGN §27)
            None
            if limits.context_tokens is None
            else Context(run, log, limits.context_tokens, compaction, system, self._offered)
        )
        self._gen = self._main()

    # ------------------------------------------------------------------ observations

    @property
    def state(self) -> State:
        """The lifecycle state (see :class:`State`)."""
        return self._run.state

    @property
    def step(self) -> int:
        """The current step number (0 before the first step)."""
        return self._run.step

    @property
    def messages(self) -> TranscriptView:
        """The transcript so far (complete messages only), as a read-only view."""
        transcript = self._run.transcript
        return TranscriptView(transcript, len(transcript))

    @property
    def usage(self) -> Usage:
        """Token usage summed over the responses so far."""
        return self._run.usage

    @property
    def budget(self) -> Budget | None:
        """The budget in force (a ``Resume`` may replace it)."""
        return self._run.budget

    @property
    def budget_usage(self) -> BudgetUsage:
        """What the run used since it started or was last resumed from a budget pause."""
        return budget_usage(self._run)

    @property
    def pending(self) -> Effect | None:
        """The effect waiting for a reply, or ``None``."""
        return self._run.pending

    @property
    def log(self) -> EventLog:
        """The run's event log."""
        return self._log

    @property
    def result(self) -> RunResult | None:
        """The :class:`RunResult` once the run has finished."""
        return self._run.result

    @property
    def limits(self) -> Limits:
        """The ceilings the run follows (:class:`Limits`)."""
        return self._limits

    @property
    def parent(self) -> ParentLink | None:
        """Where this run sits in a session tree (``None``: a root session)."""
        return self._parent

    @property
    def tools(self) -> tuple[ToolSpec, ...]:
        """The tool specs the run snapshotted (with handoffs: every agent's tools)."""
        return self._specs if self._handoffs is None else self._handoffs.tools

    @property
    def agent(self) -> str | None:
        """The current agent's name (``None``: a run without handoffs)."""
        return None if self._handoffs is None else self._handoffs.current.name

    def __repr__(self) -> str:
        run = self._run
        return f"<AgentLoop state={run.state.name} step={run.step} events={len(self._log)}>"

    # ------------------------------------------------------------------ generator protocol
    #
    # send/throw/close wrap the private generator (_gen) and catch misuse at the
    # boundary: a reply before priming, after the end, or after the run died raises
    # CallerProtocolError and records nothing more (the error is sticky: Run.error).
    # Inside, every reply enters through _ask, once: accept() checks and copies it
    # (or it is the very object this package's driver checked, see
    # checked_by_driver), its ``at`` moves the loop's clock, a Cancel unwinds to
    # _finish, and a Steer or FollowUp is queued (message.queued) while the same
    # effect is yielded again; Run.deliver appends the queued messages at the next
    # boundary. Run.set is the only place the state changes, EventLog.append the
    # only place an event is recorded.

    def send(self, value: Reply | None) -> Effect:
        """Send a reply to the pending effect; return the next effect.

        Raises:
            StopIteration: the run finished; ``.value`` is the :class:`RunResult`.
            CallerProtocolError: the reply does not fit the pending effect (the run
                is now dead: a failed ``run.finished`` was logged), the run died
                earlier that way, or it already finished (nothing is logged then).
        """
        run = self._run
        if run.error is not None:
            raise CallerProtocolError(f"the run already failed: {run.error}")
        if run.result is not None and value is not None:
            # next() after the end raises StopIteration, as for any generator; a
            # reply after the end answers nothing and is a bug in the driver.
            raise CallerProtocolError(
                f"send() got {type(value).__name__} after the run finished "
                f"({run.result.status}); there is nothing to reply to"
            )
        if not run.started:
            if value is not None:
                raise CallerProtocolError(
                    "prime the loop with next() before sending a reply: nothing is pending yet"
                )
            run.started = True
        try:
            return self._gen.send(value)
        except CallerProtocolError as exc:
            run.error = exc
            raise
        except StopIteration:
            raise
        except BaseException as exc:
            if run.result is None:  # the generator died without finishing its log
                run.error = CallerProtocolError(f"the run stopped on {exception_text(exc)}")
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
        run = self._run
        if not run.started:
            self.close()
        elif run.result is None and run.error is None:
            with contextlib.suppress(StopIteration):
                self._gen.send(Cancel(reason=exception_text(exc)))
        raise exc

    def close(self) -> None:
        """Cancel the run (reason ``closed``) if it is still going; never raises for that.

        Before the loop was primed nothing has run: as for any generator, closing it
        records nothing (no session started) and ``next()`` then raises StopIteration.
        """
        run = self._run
        if run.result is not None or run.error is not None:
            return
        if not run.started:
            run.started = True
            self._gen.close()  # an unstarted generator: its body never runs
            return
        run.closing = True
        self._gen.close()

    def checked_by_driver(self, reply: Reply, arguments_ok: bool) -> None:
        """For this package's drivers (not part of the public API): ``reply``, about
        to be sent, was made by the driver and checked on its way in (``accept``
        against :attr:`limits`, which says ``arguments_ok``), so the loop takes it as
        it is instead of checking it again. Only that very object is trusted, once;
        anything else sent to the loop (by any caller) is checked as always. Its
        ``at`` is checked anyway."""
        run = self._run
        run.checked = reply
        run.checked_arguments_ok = arguments_ok

    def _ask(self, effect: Effect) -> Generator[Effect, Any, Reply]:
        """Yield ``effect``; check, take over and record the time of what comes back.

        A ``Steer`` or ``FollowUp`` is queued (and recorded), and ``effect`` is
        yielded again: the caller may send one at any yield. Sets
        ``Run.arguments_ok`` for the reply returned (see :func:`accept`).
        """
        run = self._run
        while True:
            run.pending = effect
            try:
                reply = yield effect
            except GeneratorExit:
                if not run.closing:
                    # Garbage collection finalizing an abandoned loop: record nothing, so
                    # a paused session's log stays resumable.
                    raise
                reply = _CLOSED
            run.pending = None
            kind = type(reply)
            if reply is run.checked and reply is not None:
                run.arguments_ok = run.checked_arguments_ok  # checked by our driver
            else:
                if kind is ModelResponse and type(reply.content) is list:
                    reply = msgspec.structs.replace(reply, content=tuple(reply.content))
                # Mutating the caller's dicts later changes nothing here: we keep copies.
                reply, problem, run.arguments_ok = accept(reply, self._limits)
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
            run.checked = None
            at = reply.at
            if at is not None:
                if type(at) is int:
                    reply = msgspec.structs.replace(reply, at=float(at))
                    at = reply.at
                if not math.isfinite(at):
                    raise _Misuse(f"{kind.__name__}.at must be finite, got {at!r}", reply)
                run.now = at
                if run.wall_start is None:
                    run.wall_start = at
            if kind is Cancel:
                raise _Cancelled(reply)
            if kind not in _QUEUED:
                return reply  # type: ignore[no-any-return]
            run.queue(reply, self._log, self._rules >= RESERVED_MESSAGE_IDS)

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
        run = self._run
        misuse: _Misuse | None = None
        try:
            self._start()
            yield from self._steps()
        except _Finish as finish:
            outcome = finish
        except _Cancelled as cancelled:
            reply = cancelled.cancel
            reason = reply.reason or run.pause_reason or "cancelled"
            outcome = _Finish("cancelled", reason, reply=reply)
        except _Misuse as exc:
            misuse = exc
            outcome = failed(CALLER_PROTOCOL_ERROR, exc.message, exc.reply)
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
                    reply=run.unrecorded if run.unrecorded is not None else cancel,
                )
            )
            raise
        if run.unrecorded is not None and outcome.reply is None:
            outcome.reply = run.unrecorded  # e.g. a ToolResult after_tool_call failed on
        result = self._finish(outcome)
        if misuse is not None:
            raise CallerProtocolError(misuse.message)
        return result

    def _start(self) -> None:
        run, log = self._run, self._log
        log.append(
            SessionStartEvent(
                sequence=0,
                at=run.now,
                system=self._system,
                tools=self._specs,
                max_steps=self._max_steps,
                budget=run.budget,
                request_sequence_start=self._rss,
                rules=self._rules,
                parallel_tools=self._parallel,
                limits=None if self._limits is DEFAULT_LIMITS else self._limits,
                output=None if self._output is None else self._output.spec,
                parent=self._parent,
                compaction=None if self._compaction is None else self._compaction.spec(),
                agent=None if self._handoffs is None else self._handoffs.start_name,
                handoffs=() if self._handoffs is None else self._handoffs.specs,
            )
        )
        for message in run.transcript:
            log.append(
                MessageAcceptedEvent(sequence=log.next_sequence(), at=run.now, message=message)
            )

    # ------------------------------------------------------------------ finish
    #
    # DONE is entered once. The observer hooks run first (on_error for failures,
    # then on_complete); the first failure wins, so a failing observer can only
    # turn a successful run into a failed one. session.complete and run.finished
    # are then emitted unconditionally: a KeyboardInterrupt in an observer is held
    # back until the log is finished. run.finished carries the RunResult without
    # its messages (they are derivable from the log) and the reply that ended the
    # run when no earlier event recorded it.

    def _finish_invalid(self, problem: str) -> RunResult:
        run = self._run
        run.set(Input.FINISH)
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
        run.result = result
        self._log.append(
            RunFinishedEvent(
                sequence=0,
                at=run.now,
                status="failed",
                max_steps=self._max_steps,
                error=error,
                reason=INVALID_TRANSCRIPT,
            )
        )
        return result

    def _finish(self, outcome: _Finish) -> RunResult:
        run = self._run
        run.set(Input.FINISH)
        run.pending = None
        status, reason, error = outcome.status, outcome.reason, outcome.error
        interrupt: BaseException | None = None
        hooks = self._hooks
        try:
            if error is not None and "on_error" in hooks:
                observe_quietly(hooks, "on_error", {"code": error.code, "message": error.message})
            try:
                if "on_complete" in hooks:
                    observe(
                        hooks,
                        "on_complete",
                        {
                            "status": status,
                            "reason": reason,
                            "final_text": outcome.final_text,
                            "steps": run.step,
                        },
                    )
            except _Finish as late:
                if error is None:  # the first failure wins
                    status, reason, error = late.status, late.reason, late.error
                    assert error is not None
                    observe_quietly(
                        hooks, "on_error", {"code": error.code, "message": error.message}
                    )
        except (KeyboardInterrupt, SystemExit) as exc:
            interrupt = exc  # finish the log first, then let it go on
        step = run.step
        log = self._log
        sequence = log.next_sequence()
        # The reply that ended the run (when no earlier event recorded it) goes in
        # session.complete, so a crash that loses run.finished does not lose it
        # (rules 0 and 1: in run.finished).
        reply, late_reply = outcome.reply, None
        if self._rules < REPLY_IN_COMPLETE:
            reply, late_reply = None, reply
        log.append(
            SessionCompleteEvent(
                sequence=sequence,
                at=run.now,
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
            messages=tuple(run.transcript),
            steps=step,
            max_steps=self._max_steps,
            error=error,
            usage=run.usage,
            reason=reason,
            output=run.output_value if status == "completed" else None,
        )
        run.result = result
        log.append(
            RunFinishedEvent(
                sequence=sequence + 1,
                at=run.now,
                step=step,
                status=status,
                final_text=final_text,
                steps=step,
                max_steps=self._max_steps,
                error=error,
                usage=run.usage,
                reason=reason,
                reply=late_reply,
                output=run.output_json if status == "completed" else None,
            )
        )
        if interrupt is not None:
            raise interrupt
        return result

    # ------------------------------------------------------------------ steps
    #
    # A step is one model request plus every tool call it asked for. Before it:
    # the turn budget (a pause, not an end) and before_step (SKIP completes the
    # run). Then step.start, the request (before_plan may rewrite what the model
    # is sent, never the transcript), planning, and the assistant message appended
    # with plan.commit. A response without tool calls completes the run; otherwise
    # the calls run in order (ToolCalls) and step.end closes the batch. max_steps
    # is checked only after a whole batch, so a step never leaves a call unanswered.

    def _steps(self) -> Generator[Effect, Any, None]:
        hooks, run, log, pauses = self._hooks, self._run, self._log, self._pauses
        handoffs = self._handoffs
        while True:
            budget = run.budget
            if (
                budget is not None
                and budget.max_turns is not None
                and run.turns >= budget.max_turns
            ):
                yield from pauses.budget_pause("turns")
            if budget is not None and budget.limits_tokens:
                limit = pauses.tokens_limit(budget)
                if limit is not None:
                    yield from pauses.budget_pause(limit)
            if run.steering:
                run.deliver(self._log, follow_ups=False)
            step = run.step + 1
            if "before_step" in hooks:
                try:
                    outcome = run_hooks(hooks, "before_step", {"step": step})
                except HookAbort as exc:
                    raise aborted("before_step", exc) from exc
                if outcome is SKIP:
                    raise _Finish("completed", "skipped_by_hook")
                if outcome is not None:
                    raise failed(HOOK_ERROR, f"before_step hook returned {outcome!r}")
            run.step = step
            run.turns += 1
            run.set(Input.START_STEP)
            request_id = f"request-{self._rss + step:03d}"
            log.append(
                StepStartEvent(
                    sequence=log.next_sequence(), at=run.now, step=step, request_id=request_id
                )
            )
            context = self._context
            view: Sequence[Message] | None = None
            if context is not None:  # the window: compaction, CONTEXT_OVERFLOW (_context)
                view = yield from context.prepare(step, request_id, self._plan)
            elif handoffs is not None:  # an input filter's view (_handoffs)
                view = handoffs.view(run.transcript)
            request = self._make_request(request_id, step, view)
            response = yield from self._plan(request)
            if context is not None:
                context.answered(request, response.usage)
            content, stop_reason = response.content, response.stop_reason
            if "after_plan" in hooks:
                content, stop_reason = self._after_plan(request, response)
            message = AssistantMessage(f"message-{response.id}", content)
            run.transcript.append(message)
            run.message_ids.add(message.id)
            calls: list[ToolCall] = []
            for block in content:
                if type(block) is ToolCall:
                    calls.append(block)
                    run.call_ids.add(block.id)
            if self._rules < USAGE_WHEN_RECORDED and response.usage is not None:
                run.usage = run.usage + response.usage  # (rules 0: counted when committed)
            log.append(
                PlanCommitEvent(
                    sequence=log.next_sequence(), at=run.now, step=step, message=message
                )
            )
            if not calls:  # stop, or a text-only length response
                self._end_step(step)
                final_text = text_from_assistant(message)
                if (run.queued and run.deliver(self._log, follow_ups=True)) or (
                    self._output is not None and not self._output_ok(final_text, response.id, step)
                ):
                    # Steering, a follow-up or an answer sent back: one more step.
                    if step >= self._max_steps:
                        raise _Finish("max_steps", "no_more_steps")
                    run.set(Input.CONTINUE)
                    continue
                raise _Finish(
                    "completed",
                    "goal_met" if stop_reason == "stop" else "length",
                    final_text=final_text,
                )
            run.set(Input.COMMIT_TOOLS)
            if pauses.wall_spent():
                yield from pauses.budget_pause("wall_clock")
            truncated = stop_reason == "length"
            if self._parallel and not truncated:
                yield from self._calls.run_batched(calls, step)
            else:
                run_call = self._calls.run_call
                for call in calls:
                    yield from run_call(call, step, truncated)
            run.set(Input.END_BATCH)
            if handoffs is not None and handoffs.pending is not None:
                self._hand_off(step)
            self._end_step(step)
            if step >= self._max_steps:
                if run.steering:  # kept in the transcript for whoever continues it
                    run.deliver(self._log, follow_ups=False)
                raise _Finish("max_steps", "no_more_steps")

    def _hand_off(self, step: int) -> None:
        """The step transferred the conversation: the next request is the new agent's."""
        handoffs = self._handoffs
        assert handoffs is not None
        run = self._run
        problem = handoffs.switch(run.transcript, self._log, run.now, step)
        if problem:
            raise _Misuse(problem, None)
        agent = handoffs.current
        self._system, self._offered, self._output = agent.system, agent.offered, agent.output
        self._model = agent.model
        self._calls.use_tools(agent.specs)
        if self._context is not None:  # the window's estimate: the new agent's prompt
            self._context.use(agent.system, agent.offered)

    def _output_ok(self, text: str, response_id: str, step: int) -> bool:
        """Decode the final answer; if it does not, send it back (a user message) or,
        with the retries used up, fail the run ``OUTPUT_INVALID``."""
        check = self._output
        assert check is not None
        run = self._run
        value, as_json, error = check.check(text)
        if error is None:
            run.output_value, run.output_json = value, as_json
            return True
        if run.output_retries >= check.spec.retries:
            raise failed(OUTPUT_INVALID, f"step {step}: {check.failure_text(error)}")
        run.output_retries += 1
        message_id = f"output-retry-{response_id}"
        while message_id in run.message_ids:
            message_id += "-"
        message = UserMessage(message_id, check.retry_text(error))
        run.transcript.append(message)
        run.message_ids.add(message_id)
        log = self._log
        log.append(
            MessageAcceptedEvent(
                sequence=log.next_sequence(), at=run.now, step=step, message=message
            )
        )
        return False

    def _end_step(self, step: int) -> None:
        log = self._log
        log.append(StepEndEvent(sequence=log.next_sequence(), at=self._run.now, step=step))
        if "after_step" in self._hooks:
            observe(self._hooks, "after_step", {"step": step})

    def _make_request(
        self, request_id: str, step: int, view: Sequence[Message] | None = None
    ) -> ModelRequest:
        transcript = self._run.transcript
        messages: Sequence[Message] = (
            TranscriptView(transcript, len(transcript)) if view is None else view
        )
        system = self._system
        if "before_plan" in self._hooks:
            payload: dict[str, Any] = {
                "step": step,
                "request_id": request_id,
                "messages": messages,
                "system": system,
            }
            try:
                outcome = run_hooks(self._hooks, "before_plan", payload)
            except HookAbort as exc:
                raise aborted("before_plan", exc) from exc
            if outcome is not None:
                raise failed(HOOK_ERROR, f"before_plan hook returned {outcome!r}")
            if payload["messages"] is not messages:
                rewritten = payload["messages"]
                if not isinstance(rewritten, (list, tuple, TranscriptView)) or not all(
                    type(m) in _MESSAGE_TYPES for m in rewritten
                ):
                    raise failed(
                        HOOK_ERROR,
                        "before_plan hook set 'messages' to something not a "
                        "list of UserMessage/AssistantMessage/ToolResultMessage",
                    )
                messages = tuple(rewritten)
            system = payload["system"]
            if system is not None and type(system) is not str:
                raise failed(HOOK_ERROR, "before_plan hook set 'system' to a non-str")
        output = None if self._output is None else self._output.spec
        return ModelRequest(
            request_id, step, messages, self._offered, system, output, "step", self._model
        )

    # ------------------------------------------------------------------ plan
    #
    # The model answers one request with chunks then a response (or a failure).
    # Each chunk is checked as it arrives (request id, chunk and text limits,
    # tool-call arguments) and recorded in model.chunk; the same request is
    # yielded again. The response or failure is recorded in plan.draft *before*
    # it is judged (by _validation.response_problem), so a rejected answer is in
    # the log exactly as received. after_plan may edit the draft; an edit is held
    # to the same rules, a failing one is the hook's fault (HOOK_ERROR), not the
    # model's.

    def _plan(self, request: ModelRequest) -> Generator[Effect, Any, ModelResponse]:
        """Collect chunks and the final response for ``request``; validate them."""
        run, log, ask = self._run, self._log, self._ask
        step = request.step
        limits = self._limits
        max_chunks, max_text = limits.chunks_per_step, limits.step_text_code_points
        chunks = 0
        text_points = 0
        streamed: list[str | Block] = []  # text deltas merged; other blocks as boundaries
        parts: list[str] = []  # the text run being merged
        problem: str | None
        while True:
            reply = yield from ask(request)
            if type(reply) is ModelChunk:
                # (Messages are worded only when they are needed: this runs per chunk.)
                if reply.request_id != request.id:
                    problem = chunk_request_problem(step, chunks + 1, reply.request_id, request.id)
                    raise failed(MODEL_PROTOCOL_ERROR, problem, reply)
                chunks += 1
                if chunks > max_chunks:
                    problem = chunk_limit_problem(step, chunks, limits, "chunks_per_step")
                    raise failed(MODEL_PROTOCOL_ERROR, problem, reply)
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
                    elif type(block) is ImageBlock:
                        problem = media_problem(block, f"step {step}, chunk {chunks}", limits)
                        if problem is not None:
                            raise failed(MODEL_PROTOCOL_ERROR, problem, reply)
                    elif type(block) is ToolCall and not run.arguments_ok:
                        problem = chunk_call_problem(step, chunks, block, limits)
                        if problem is not None:
                            raise failed(MODEL_PROTOCOL_ERROR, problem, reply)
                    streamed.append(block)
                if text_points > max_text:
                    problem = chunk_limit_problem(step, chunks, limits, "step_text_code_points")
                    raise failed(MODEL_PROTOCOL_ERROR, problem, reply)
                log.append(
                    ModelChunkEvent(
                        sequence=log.next_sequence(), at=run.now, step=step, chunk=reply
                    )
                )
            elif type(reply) is ModelResponse or type(reply) is ModelFailure:
                log.append(
                    PlanDraftEvent(sequence=log.next_sequence(), at=run.now, step=step, reply=reply)
                )
                if self._rules >= USAGE_WHEN_RECORDED:
                    for attempt in reply.attempts:  # models a FallbackModel tried first
                        if attempt.usage is not None:
                            run.usage = run.usage + attempt.usage
                    if reply.usage is not None:  # billed, whatever happens next
                        run.usage = run.usage + reply.usage
                if reply.request_id != request.id:
                    raise failed(
                        MODEL_PROTOCOL_ERROR, final_request_problem(step, reply, request.id)
                    )
                if type(reply) is ModelFailure:
                    code = reply.code if reply.code in _FAILURE_CODES else MODEL_ERROR
                    raise failed(code, f"step {step}: model call failed: {reply.message}")
                assert type(reply) is ModelResponse
                problem = response_problem(
                    reply, run.message_ids, run.call_ids, limits, run.arguments_ok
                )
                if problem is None and chunks:
                    if parts:
                        streamed.append("".join(parts))
                    problem = stream_mismatch(streamed, reply.content)
                if problem is not None:
                    raise failed(MODEL_PROTOCOL_ERROR, f"step {step}: {problem}")
                if reply.stop_reason in FAILING_STOPS:
                    raise failed(*stop_failure(step, reply))
                return reply
            else:
                raise misuse(reply, request, "ModelChunk, ModelResponse, ModelFailure or Cancel")

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
            outcome = run_hooks(self._hooks, "after_plan", payload)
        except HookAbort as exc:
            raise aborted("after_plan", exc) from exc
        if outcome is not None:
            raise failed(HOOK_ERROR, f"after_plan hook returned {outcome!r}")
        content, stop_reason = payload["content"], payload["stop_reason"]
        if not isinstance(content, (list, tuple)):
            raise failed(HOOK_ERROR, "after_plan hook set 'content' to a non-list")
        content = tuple(content)
        if content == response.content and stop_reason == response.stop_reason:
            return response.content, response.stop_reason
        run = self._run
        edited = ModelResponse(request.id, response.id, content, stop_reason)
        problem = edited_plan_problem(edited, run.message_ids, run.call_ids, self._limits)
        if problem is not None:
            raise failed(HOOK_ERROR, f"after_plan hook produced an invalid plan: {problem}")
        return tuple(copy_block(block) for block in content), stop_reason
