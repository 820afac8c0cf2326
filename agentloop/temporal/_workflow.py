"""The workflow: the agent loop runs inside Temporal, its effects run as activities.

Theory of operation
-------------------
:class:`AgentLoopWorkflow` builds ``agent_loop(...)`` from its input and drives it
to the end. The generator is deterministic (DESIGN §2: no clock, no I/O, no
randomness), so it can run *inside* the workflow: when a worker restarts or the
workflow is evicted from its cache, Temporal runs the workflow code again over the
recorded history, every activity returns its recorded result, and the loop is
rebuilt to exactly where it was, log included. Nothing is persisted but Temporal's
history; the agentloop log is derived from it, and is the same every time.

Each effect becomes something Temporal records:

- ``ModelRequest`` -> one ``agentloop.model`` activity that streams the whole
  answer (every chunk, then the response or a failure; heartbeating while it
  streams) and returns it; the workflow then sends the items to the loop one by
  one. A retried attempt starts the stream over, so a half-streamed answer is
  never seen by the loop. The activity receives only the messages that are new
  since the previous request (``_wire.ModelCall``): history grows linearly.
- ``ToolRequest`` -> one ``agentloop.tool`` activity (idempotency key
  ``<workflow id>:<call id>``, see :func:`agentloop.idempotency_key`).
- ``ToolBatch`` (the session's ``parallel_tools``) -> one ``agentloop.tool``
  activity per call, all scheduled in the same workflow task, so they run at
  once on whichever workers take them. Each result goes to the loop as its
  activity completes; results that arrive in the same workflow task go in the
  order of the batch. Temporal's history records the order, so a replay sends
  them in the same order.
- ``Pause`` -> wait for the ``resume`` update (or signal).

Steering: the ``steer`` and ``follow_up`` updates (and signals) send ``Steer`` /
``FollowUp`` to the loop from the handler itself, stamped ``workflow.now()``. That
is safe because the driver only ever waits with the loop at a yield (an activity,
an answer), never between the ``send()``s of one model call's items; a message
that comes before the loop's first yield waits for it. The loop records it and
waits at the same effect; it is delivered at the next boundary (DESIGN §19).

Time: the engine reads no clock; every reply that enters the loop is stamped with
``workflow.now()`` when the workflow sends it (the way :func:`agentloop.run` stamps
replies with its clock). ``workflow.now()`` is part of the history, so a replay
stamps the same values. All the chunks of one model call carry the same time: the
time the workflow received the activity's result.

Cancellation: the ``cancel`` signal (or update) cancels the task driving the loop.
Whatever it awaits -- a model call, a tool call, an answer to a pause -- is
cancelled (an activity gets Temporal's cancellation request) and the loop receives
``Cancel(reason)``: the run ends ``cancelled`` and the workflow completes with that
``RunResult``. A tool call interrupted this way gets no invented result (DESIGN
§11). Cancelling the *workflow* (``handle.cancel()``) does the same with the reason
``"workflow cancelled"``, then the workflow ends as cancelled in Temporal.

The driver
----------
``_adrive`` is a small private async driver, shaped the way agentloop's async
driver (DESIGN §17, ``adrive(loop, model=..., tools=...)``) is specified: it calls
``model.astream(request)`` and ``await tools.aexecute(call)`` on objects that
happen to be backed by activities (:class:`ActivityModel`, :class:`ActivityTools`),
an async ``on_pause``, and a clock (``workflow.now()``). When ``agentloop.adrive``
lands, ``AgentLoopWorkflow._drive`` calls it with the same objects and ``_adrive``
goes; what else changes is written next to ``_drive``.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import timedelta
from typing import Any, Final, Protocol

import msgspec
from temporalio import workflow
from temporalio.common import RawValue, RetryPolicy
from temporalio.exceptions import (
    ActivityError,
    ApplicationError,
    CancelledError,
    ChildWorkflowError,
)

from agentloop import (
    CALLER_PROTOCOL_ERROR,
    MAX_CHUNKS_PER_STEP,
    MODEL_ERROR,
    MODEL_PROTOCOL_ERROR,
    AgentLoop,
    AgentLoopError,
    CallerProtocolError,
    Cancel,
    ChildRun,
    Content,
    FollowUp,
    HookRegistry,
    Limits,
    Message,
    ModelChunk,
    ModelFailure,
    ModelRequest,
    ModelResponse,
    OutputSpec,
    ParentLink,
    Pause,
    Resume,
    RunResult,
    Steer,
    ToolBatch,
    ToolCall,
    ToolCallEvent,
    ToolErrorEvent,
    ToolRequest,
    ToolResult,
    ToolResultEvent,
    Usage,
    UserMessage,
    agent_loop,
)
from agentloop._spi import output_check, parts_problem

from ._wire import (
    MAX_PAYLOAD_BYTES,
    ActivityOptions,
    AgentConfig,
    Answer,
    ChildOutcome,
    ChildPause,
    ModelCall,
    ModelConfig,
    ModelOutput,
    PendingBatch,
    PendingModel,
    PendingPause,
    PendingTool,
    SessionInput,
    ToolInput,
    ToolOutput,
    UserInput,
    chain_digest,
    config_digest,
    decode,
    encode,
    log_page,
    oversized,
    raw,
)

__all__ = [
    "MODEL_ACTIVITY",
    "TOOL_ACTIVITY",
    "WORKFLOW_NAME",
    "ActivityModel",
    "ActivityTools",
    "AgentLoopWorkflow",
]

#: The workflow type name :class:`AgentLoopWorkflow` is registered under.
WORKFLOW_NAME: Final = "agentloop"
#: The activity that answers one model request.
MODEL_ACTIVITY: Final = "agentloop.model"
#: The activity that runs one tool call.
TOOL_ACTIVITY: Final = "agentloop.tool"
#: The query the model activity asks when it does not hold the transcript prefix.
PENDING_QUERY: Final = "pending"

_WORKFLOW_CANCELLED: Final = "workflow cancelled"
_POSITIONAL: Final = (
    inspect.Parameter.POSITIONAL_ONLY,
    inspect.Parameter.POSITIONAL_OR_KEYWORD,
)

ModelReply = ModelChunk | ModelResponse | ModelFailure


def _now() -> float:
    return workflow.now().timestamp()


def _describe(error: ActivityError) -> str:
    """What went wrong in an activity that failed for good, in one line.

    Raises:
        asyncio.CancelledError: the activity was cancelled (by us: the driver's
            task was cancelled); the driver must see that, not a failure.
    """
    cause = error.cause
    if isinstance(cause, CancelledError):
        raise asyncio.CancelledError() from error
    if isinstance(cause, ApplicationError):
        return cause.message
    return f"{type(cause).__name__}: {cause}"


def _run(options: ActivityOptions, activity: str, argument: bytes, activity_id: str) -> Any:
    retry = RetryPolicy(
        initial_interval=timedelta(seconds=options.initial_interval_seconds),
        backoff_coefficient=options.backoff_coefficient,
        maximum_interval=timedelta(seconds=options.max_interval_seconds),
        maximum_attempts=options.max_attempts,
    )
    if options.local:
        return workflow.execute_local_activity(
            activity,
            raw(argument),
            result_type=RawValue,
            activity_id=activity_id,
            start_to_close_timeout=timedelta(seconds=options.start_to_close_seconds),
            retry_policy=retry,
        )
    return workflow.execute_activity(
        activity,
        raw(argument),
        result_type=RawValue,
        activity_id=activity_id,
        task_queue=options.task_queue,
        start_to_close_timeout=timedelta(seconds=options.start_to_close_seconds),
        heartbeat_timeout=(
            None
            if options.heartbeat_seconds is None
            else timedelta(seconds=options.heartbeat_seconds)
        ),
        retry_policy=retry,
    )


# --------------------------------------------------------------------------- effects as activities


class ActivityModel:
    """The model as an async driver sees it; each request is one model activity.

    Keeps what the previous request sent (messages and their digest chain) so the
    next activity receives only the new messages (see ``_wire.ModelCall``).
    """

    def __init__(
        self,
        session: str,
        run_id: str,
        options: ActivityOptions,
        chunks_per_step: int = MAX_CHUNKS_PER_STEP,
        agent: str | None = None,
        by_reference: int | None = None,
    ) -> None:
        self._agent = agent
        self._by_reference = by_reference
        self._session = session
        self._run_id = run_id
        self._options = options
        self._chunks_per_step = chunks_per_step
        self._config: ModelConfig | None = None
        self._sent: list[Message] = []
        #: ``_digests[k]``: the digest of the config and ``_sent[:k]``.
        self._digests: list[str] = []

    def call_for(self, request: ModelRequest) -> ModelCall:
        """The activity input for ``request``: the delta from the previous one."""
        config = ModelConfig(request.tools, request.system, request.output)
        send_config = None
        if config != self._config or self._options.local:
            # A local activity gets the whole request: its input is not recorded,
            # and it must not ask its own workflow (the query would wait for it).
            # The first request, or a before_plan hook changed the system prompt.
            self._config = send_config = config
            self._sent = []
            self._digests = [config_digest(config)]
        sent, messages = self._sent, request.messages
        base, limit = 0, min(len(sent), len(messages))
        # Identity first: without a before_plan hook, every message is the same
        # object as in the previous request (the transcript only grows).
        while base < limit and (sent[base] is messages[base] or sent[base] == messages[base]):
            base += 1
        digests = self._digests
        del digests[base + 1 :]
        new = tuple(messages[base:])
        digest = digests[base]
        for message in new:
            digest = chain_digest(digest, message)
            digests.append(digest)
        self._sent = list(messages)
        return ModelCall(
            session=self._session,
            run_id=self._run_id,
            request_id=request.id,
            step=request.step,
            base=base,
            digest=digests[base],
            messages=new,
            config=send_config,
            chunks_per_step=self._chunks_per_step,
            purpose=request.purpose,
            agent=self._agent,
        )

    async def astream(self, request: ModelRequest) -> AsyncIterator[ModelReply]:
        """The chunks, then the response (or a failure), of one model activity.

        A model activity that fails for good (its retries exhausted, or an error
        that is not retried) ends the stream with a ``ModelFailure`` carrying the
        error's message: the run ends ``failed``, as :func:`agentloop.run` ends it
        when a model raises.
        """
        argument = encode(self.call_for(request))
        items: tuple[ModelReply, ...]
        too_large = oversized(argument, "the model request (its new messages)", self._by_reference)
        try:
            if too_large is not None:
                # (Scheduling it would fail the workflow task on the server.)
                raise _NotSent(too_large)
            result = await _run(self._options, MODEL_ACTIVITY, argument, f"model/{request.id}")
        except _NotSent as error:
            items = (ModelFailure(request.id, str(error), code=MODEL_ERROR),)
        except ActivityError as error:
            message, cause = _describe(error), error.cause
            code = (
                MODEL_PROTOCOL_ERROR
                if isinstance(cause, ApplicationError) and cause.type == MODEL_PROTOCOL_ERROR
                else MODEL_ERROR
            )
            items = (ModelFailure(request.id, message, code=code),)
        else:
            items = decode(result, ModelOutput, "model activity result").items
        # The last item ends the request (a response, a failure, or the chunk the
        # loop fails the step on): the driver reads no further.
        *chunks, last = items
        for chunk in chunks:
            yield chunk
        yield last


class _NotSent(Exception):
    """A model request too large to send as an activity input."""


class _Task(msgspec.Struct, forbid_unknown_fields=True):
    """An agent tool's arguments."""

    task: str


class ActivityTools:
    """The tools as an async driver sees them; each call is one tool activity, or,
    for an agent tool, one child workflow (see :meth:`_child`)."""

    def __init__(self, session: str, spec: SessionInput, limits: Limits) -> None:
        self._session = session
        self._spec = spec
        self._options = spec.tool_activity
        self._limits = limits
        #: The ``ChildRun`` of each agent tool call answered, until the driver takes it.
        self._children: dict[str, ChildRun] = {}
        #: The pauses of running children, by child session (see the workflow's
        #: ``child_paused`` signal); a child's entry goes when the child ends.
        self.child_pauses: dict[str, PendingPause] = {}

    def child(self, call_id: str) -> ChildRun | None:
        """The ``ChildRun`` of call ``call_id``'s result, if an agent tool answered it."""
        return self._children.pop(call_id, None)

    async def aexecute(self, call: ToolCall) -> tuple[Content, bool]:
        """``(content, is_error)`` for ``call``, like ``ToolRegistry.execute``.

        A tool activity that fails for good (timeouts, a worker lost on every
        attempt) is an error result the model can read, as a tool that raises is.
        A tool's blocks are checked against the session's limits as
        :func:`agentloop.run`'s driver checks them: one that breaks them is a
        tool error naming it.
        """
        agent = self._spec.agents.get(call.name)
        if agent is not None:
            return await self._child(call, agent)
        argument = encode(ToolInput(self._session, call, self._spec.agent))
        try:
            result = await _run(self._options, TOOL_ACTIVITY, argument, f"tool/{call.id}")
        except ActivityError as error:
            return f"the tool call failed: {_describe(error)}", True
        output = decode(result, ToolOutput, "tool activity result")
        content = output.content
        if type(content) is tuple:
            problem, _ = parts_problem(content, "the tool's result", self._limits)
            if problem is not None:
                return f"the tool's result was refused: {problem}", True
        return content, output.is_error

    async def _child(self, call: ToolCall, agent: AgentConfig) -> tuple[Content, bool]:
        """Run agent tool ``call`` as a child workflow, as :class:`agentloop.AgentTool`
        runs its child in process: the same session id (``<parent>/<call id>``), the
        same ``ParentLink``, the same answer and ``ChildRun`` (DESIGN §26). The child
        is this workflow's type, on this workflow's task queue; cancelling this
        session cancels it."""
        name, spec = call.name, self._spec
        try:  # checked as the agent tool checks them in process
            task = msgspec.convert(call.arguments, type=_Task).task
        except msgspec.ValidationError as exc:
            return f"invalid arguments: {exc}", True
        parent_depth = 0 if spec.parent is None else spec.parent.depth
        depth, bound = parent_depth + 1, self._limits.agent_depth
        if depth > bound:
            return (
                f"agent {name!r} not started: it would run {depth} agents deep, "
                f"past Limits.agent_depth ({bound}) of session {self._session!r}"
            ), True
        link = ParentLink(session=self._session, call_id=call.id, depth=depth)
        session = f"{self._session}/{call.id}"
        child = SessionInput(
            messages=(UserMessage("task", task),),
            tools=agent.tools,
            system=agent.system,
            max_steps=agent.max_steps,
            budget=agent.budget,
            started_at=_now(),
            model_activity=spec.model_activity,
            tool_activity=spec.tool_activity,
            limits=agent.limits,
            output_retries=agent.output_retries,
            parallel_tools=agent.parallel_tools,
            agents=spec.agents,
            agent=name,
            parent=link,
            by_reference=spec.by_reference,
        )
        try:
            value = await workflow.execute_child_workflow(
                workflow.info().workflow_type,
                raw(encode(child)),
                id=session,
                result_type=RawValue,
            )
        except ChildWorkflowError as error:
            self.child_pauses.pop(session, None)
            cause = error.cause
            why = cause.message if isinstance(cause, ApplicationError) else str(cause)
            return f"agent {name!r} (session {session!r}) failed: {why}", True
        self.child_pauses.pop(session, None)
        outcome = decode(value, ChildOutcome, "child session result")
        result = outcome.result
        self._children[call.id] = ChildRun(
            session=session,
            status=result.status,
            usage=None if result.usage == Usage() else result.usage,
            tool_calls=outcome.tool_calls,
        )
        if result.status == "completed":
            if agent.output is not None:  # the output as JSON, as the agent tool answers
                return encode(result.output).decode(), False
            return result.final_text or "", False
        if result.error is not None:
            why = f"{result.error.code}: {result.error.message}"
        else:
            why = result.reason or result.status
        return f"agent {name!r} (session {session!r}) ended {result.status}: {why}", True


# --------------------------------------------------------------------------- the private driver


class _AsyncModel(Protocol):
    def astream(self, request: ModelRequest) -> AsyncIterator[ModelReply]: ...


class _AsyncTools(Protocol):
    async def aexecute(self, call: ToolCall) -> tuple[Content, bool]: ...

    def child(self, call_id: str) -> ChildRun | None: ...


class _ContinueAsNew(Exception):
    """The driver stopped at a step's start: the workflow continues as new."""


class _Batch:
    """The calls of a ``ToolBatch``, each one task (one tool activity).

    The loop yields the same batch again after each result, until the last:
    calls already answered are skipped (their ids stay in ``_answered``; call ids
    are unique in a run).
    """

    def __init__(self, tools: _AsyncTools) -> None:
        self._tools = tools
        self._tasks: dict[str, asyncio.Task[tuple[Content, bool]]] = {}
        self._answered: set[str] = set()

    async def next_result(self, batch: ToolBatch) -> ToolResult:
        """The result of the batch's next call to complete; its calls not yet
        running are started first (all of them, the first time)."""
        tasks = self._tasks
        waiting = [r for r in batch.requests if r.call.id not in self._answered]
        for request in waiting:
            call = request.call
            if call.id not in tasks:
                tasks[call.id] = asyncio.ensure_future(self._tools.aexecute(call))
        await asyncio.wait([tasks[r.call.id] for r in waiting], return_when=asyncio.FIRST_COMPLETED)
        # Of those done, the first in the batch's order: deterministic on replay.
        call_id = next(r.call.id for r in waiting if tasks[r.call.id].done())
        content, is_error = tasks.pop(call_id).result()
        self._answered.add(call_id)
        return ToolResult(call_id, content, is_error, child=self._tools.child(call_id))

    def cancel(self) -> None:
        """Cancel the calls still running (their activities get Temporal's cancel)."""
        for task in self._tasks.values():
            task.cancel()
        self._tasks.clear()


async def _adrive(
    loop: AgentLoop,
    *,
    model: _AsyncModel,
    tools: _AsyncTools,
    on_pause: Callable[[Pause], Awaitable[Resume]],
    clock: Callable[[], float],
    cancelled: Callable[[], str | None],
    record: Callable[[Any], None] = lambda reply: None,
    continue_as_new: Callable[[int], bool] = lambda started: False,
) -> RunResult:
    """Drive ``loop`` to the end; a stand-in for agentloop's async driver.

    ``cancelled()`` returns the reason of a cancel asked for before the driver got
    to await anything; a cancel while it awaits arrives as ``CancelledError``:
    the loop receives ``Cancel`` (the log is finished), then the error goes on.
    Every stamped reply sent goes to ``record``. Before each model request,
    ``continue_as_new(requests started so far)`` may stop the driver with
    :class:`_ContinueAsNew` (the loop waits at that request). A loop already
    primed (fed the replies of earlier runs) starts at its pending effect.
    """
    stream: AsyncIterator[ModelReply] | None = None
    batch = _Batch(tools)
    started = 0
    try:
        effect = next(loop) if loop.pending is None else loop.pending
        while True:
            reason = cancelled()
            reply: Any
            try:
                if reason is not None:
                    reply = Cancel(reason)
                elif isinstance(effect, ModelRequest):
                    if stream is None:
                        if continue_as_new(started):
                            raise _ContinueAsNew()
                        started += 1
                        stream = model.astream(effect)
                    # The loop yields the same request after each chunk; the same
                    # stream goes on until the response or failure.
                    reply = await anext(stream)
                    if type(reply) is not ModelChunk:
                        stream = None
                elif isinstance(effect, ToolRequest):
                    call_id = effect.call.id
                    content, is_error = await tools.aexecute(effect.call)
                    reply = ToolResult(call_id, content, is_error, child=tools.child(call_id))
                elif isinstance(effect, ToolBatch):
                    reply = await batch.next_result(effect)
                else:
                    reply = await on_pause(effect)
            except asyncio.CancelledError:
                batch.cancel()
                reason = cancelled()
                with contextlib.suppress(StopIteration):
                    loop.send(Cancel(_WORKFLOW_CANCELLED if reason is None else reason, clock()))
                raise
            reply = msgspec.structs.replace(reply, at=clock())
            record(reply)
            effect = loop.send(reply)
    except StopIteration as stop:
        result: RunResult = stop.value
        loop.close()
        return result
    except _ContinueAsNew:
        raise  # the loop stays open: queries read it until the run continues
    except BaseException:
        loop.close()
        raise


# --------------------------------------------------------------------------- the workflow


@workflow.defn(name=WORKFLOW_NAME, failure_exception_types=[AgentLoopError])
class AgentLoopWorkflow:
    """One agent session: ``agent_loop(...)`` driven to its ``RunResult``.

    Input: a ``SessionInput`` as JSON (:func:`agentloop.temporal.start_session`
    builds it). Result: the ``RunResult`` as JSON.

    - update ``resume`` (and signal ``resume``): answer the pending ``Pause`` with
      ``{"payload": ..., "budget": ...}``. The update is refused when no pause is
      pending; the signal is then ignored (and logged). An answer the loop
      refuses (an approval payload without ``approved``) ends the run ``failed``
      with ``CALLER_PROTOCOL_ERROR``, as in process; the update then fails with
      the loop's message.
    - signal ``cancel`` (and update ``cancel``, which returns once the log is
      finished): end the run ``cancelled`` with the given reason.
    - update ``steer`` / ``follow_up`` (and signals of those names):
      ``{"message": <user message>}``: send ``Steer``/``FollowUp`` to the loop; the
      update returns once the loop has recorded it (``message.queued``), and is
      refused when the run has finished. A message the loop refuses (its id is
      already used, or starts with ``message-``, ``tool-result-`` or
      ``output-retry-``, DESIGN §19) ends the run ``failed`` with ``CALLER_PROTOCOL_ERROR``, as in
      process; the update then fails with the loop's message.
    - query ``pending``: the effect the loop waits on (``null`` when finished).
    - query ``log``: the events so far (or from sequence ``since``), each encoded
      by :func:`agentloop.encode_event`, as a JSON array.

    Hooks run inside the workflow, so they must be deterministic (as they must
    be for replay anyway). To give sessions hooks, subclass at module level,
    override :meth:`hooks`, and register the subclass under its own name (see
    docs/durable.md). Structured output works the same way: override
    :meth:`output` (a type cannot travel in the session's input).
    """

    @workflow.init
    def __init__(self, session: RawValue) -> None:
        info = workflow.info()
        #: Every stamped reply the loop got, in this run and the runs before it.
        self._replies: list[Any] = []
        spec, self._loop, self._problem = self._start(session)
        self._spec = spec
        self._model = ActivityModel(
            info.workflow_id,
            info.run_id,
            spec.model_activity,
            self._loop.limits.chunks_per_step,
            spec.agent,
            spec.by_reference,
        )
        self._tools = ActivityTools(info.workflow_id, spec, self._loop.limits)
        self._answer: Resume | None = None
        #: The pauses of this session's children (agent tools), by child session.
        self._child_pauses = self._tools.child_pauses
        self._cancel_reason: str | None = None
        self._driver: asyncio.Task[RunResult] | None = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """Give a subclass that writes its own ``run`` an ``__init__`` that takes
        exactly what that ``run`` takes.

        Temporal requires the ``@workflow.init`` method's parameters to be those of
        the ``@workflow.run`` method, annotations included, compared as written
        (``inspect.signature``, unevaluated): ``session: RawValue`` in a module
        without ``from __future__ import annotations`` is the class, with it the
        string ``"RawValue"``, and the ``__init__`` above has the string (this
        module has the import). No single annotation here matches both, so each
        subclass gets an ``__init__`` that calls this one and whose signature is
        its own ``run``'s, however that ``run`` spells its annotation. A subclass
        that writes its own ``__init__``, or whose ``run`` does not take exactly
        the one session argument, is left alone (Temporal then says what does not
        match).
        """
        super().__init_subclass__(**kwargs)
        run = cls.__dict__.get("run")
        if "__init__" in cls.__dict__ or not callable(run):
            return
        signature = inspect.signature(run)
        parameters = list(signature.parameters.values())
        if len(parameters) != 2 or any(
            parameter.kind not in _POSITIONAL or parameter.default is not parameter.empty
            for parameter in parameters
        ):
            return
        inherited = cls.__init__

        def __init__(self: AgentLoopWorkflow, session: RawValue) -> None:
            inherited(self, session)

        __init__.__qualname__ = f"{cls.__qualname__}.__init__"
        __init__.__doc__ = inherited.__doc__
        # Temporal's check reads the signature: the subclass's own run's, as written.
        setattr(__init__, "__signature__", signature.replace(return_annotation=None))  # noqa: B010
        setattr(cls, "__init__", workflow.init(__init__))  # noqa: B010

    def _start(self, session: RawValue) -> tuple[SessionInput, AgentLoop, ApplicationError | None]:
        """The session's input and its loop, or why the input is refused.

        ``run`` raises the refusal (raising here would leave Temporal's run
        coroutine never awaited); meanwhile the queries see a loop that never
        started: no pending effect, no events.
        """
        try:
            spec = decode(session, SessionInput, "session input")
            if spec.started_at is None:
                spec = msgspec.structs.replace(spec, started_at=_now())
            policy = self.compaction()
            hooks, output = self._code(spec)
            loop = agent_loop(
                spec.messages,
                tools=spec.tools,
                system=spec.system,
                max_steps=spec.max_steps,
                budget=spec.budget,
                hooks=hooks,
                started_at=spec.started_at,
                limits=spec.limits,
                output=output,
                output_retries=spec.output_retries,
                parallel_tools=spec.parallel_tools,
                compaction=spec.compaction if policy is None else policy,
                parent=spec.parent,
            )
            if spec.replies:
                # A run continued as new: feed a fresh loop every reply of the
                # runs before; it rebuilds the log byte for byte and waits at the
                # step the last run stopped at.
                next(loop)
                for reply in spec.replies:
                    loop.send(reply)
                self._replies.extend(spec.replies)
        except ApplicationError as exc:
            problem = exc
        except (TypeError, ValueError) as exc:
            problem = ApplicationError(
                f"invalid session input: {exc}", type="InvalidPayload", non_retryable=True
            )
        else:
            return spec, loop, None
        return SessionInput(messages=()), agent_loop((), tools=()), problem

    def _code(self, spec: SessionInput) -> tuple[HookRegistry | None, Any]:
        """The session's hooks and output type: the class's own for a session
        started by a client; for an agent tool's child, the class's for that agent
        tool, checked against what its parent's client said it has.

        Raises:
            ApplicationError: (non-retryable, ``InvalidPayload``) a child's hooks
                or output type are not what its agent tool has.
        """
        if spec.agent is None:
            return self.hooks(), self.output()
        name = spec.agent
        config = spec.agents.get(name, AgentConfig())
        hooks, output = self.agent_hooks(name), self.agent_output(name)
        if config.hooks and hooks is None:
            raise ApplicationError(
                f"agent tool {name!r} has hooks, and this workflow class gives none: "
                f"override {type(self).__name__}.agent_hooks() to return them",
                type="InvalidPayload",
                non_retryable=True,
            )
        check = output_check(output, spec.output_retries)
        mine = None if check is None else check.spec
        if mine != config.output:
            raise ApplicationError(
                f"agent tool {name!r}'s output type is {_named(config.output)}, and "
                f"this workflow class's agent_output() gives {_named(mine)}: "
                f"override {type(self).__name__}.agent_output() to return the same type",
                type="InvalidPayload",
                non_retryable=True,
            )
        return hooks, output

    def hooks(self) -> HookRegistry | None:
        """The hooks every session of this workflow type runs with (none here);
        an agent tool's child runs with :meth:`agent_hooks` instead."""
        return None

    def agent_hooks(self, agent: str) -> HookRegistry | None:
        """The hooks of agent tool ``agent``'s child sessions (none here). Hooks
        are code: an agent tool's hooks cannot travel, so a workflow class whose
        sessions call an agent tool with hooks returns them here (the same
        ``HookRegistry`` the agent tool has; deterministic, as any hook). A child
        whose agent tool has hooks, run by a class that gives none, fails."""
        return None

    def agent_output(self, agent: str) -> Any:
        """The structured-output type of agent tool ``agent``'s child sessions
        (none here): the type given to ``agent_tool(..., output=...)``. Its
        ``OutputSpec`` (name, schema) travels and the child checks it against
        this one; the parent receives the decoded output as JSON, as in process."""
        return None

    def output(self) -> Any:
        """The structured-output type of every session of this workflow type
        (``agent_loop(..., output=...)``; none here). The session's result then
        holds the decoded value as JSON: read it typed with
        ``AgentSession.result(output=...)``."""
        return None

    def compaction(self) -> Any:
        """The compaction policy of every session of this workflow type
        (``agent_loop(..., compaction=...)``, DESIGN §27; none here, and then the
        session's own built-in policy, ``start_session(compaction=...)``, applies).
        Override it for a policy of your own: like hooks, it runs inside the
        workflow and must be deterministic (a pure function of its argument)."""
        return None

    @workflow.run
    async def run(self, session: RawValue) -> RawValue:
        """Drive the session to the end and return its ``RunResult`` as JSON."""
        if self._problem is not None:
            raise self._problem
        self._driver = driver = asyncio.ensure_future(self._drive())
        try:
            result = await driver
        except _ContinueAsNew:
            # Let the handlers finish (a steer waits for the loop's yield: it is
            # sent and recorded now), then go on in a new run with every reply.
            await workflow.wait_condition(workflow.all_handlers_finished)
            carried = msgspec.structs.replace(self._spec, replies=tuple(self._replies))
            workflow.continue_as_new(raw(encode(carried)))
        except asyncio.CancelledError:
            if self._cancel_reason is None:
                raise  # the workflow itself was cancelled: the log is finished
            result = self._finished()
        except CallerProtocolError:
            # The loop refused an answer (e.g. an approval without "approved"): the
            # run failed and its log says why; the session's result says so too.
            result = self._finished()
        # Let the update handlers report (they wait for the loop) before completing.
        await workflow.wait_condition(workflow.all_handlers_finished)
        if self._spec.parent is None:
            data = encode(result)
        else:  # a child session: its parent reads the ChildOutcome
            data = encode(ChildOutcome(result, _tool_calls(self._loop.log)))
        problem = oversized(data, "the session's result (its RunResult)", self._spec.by_reference)
        if problem is not None:
            # The server would refuse it; the log stays readable (query ``log``).
            raise ApplicationError(
                f"{problem}; the session ran to its end: read its log (query 'log')",
                type="PayloadTooLarge",
                non_retryable=True,
            )
        return raw(data)

    def _finished(self) -> RunResult:
        result = self._loop.result
        assert result is not None
        return result

    async def _drive(self) -> RunResult:
        # When agentloop's async driver lands, this becomes
        #     return await adrive(self._loop, model=self._model, tools=self._tools,
        #                         on_pause=self._wait_for_answer, clock=_now)
        # and _adrive (with its two Protocols) is deleted. Also:
        # - cancellation: _adrive records Cancel(<the cancel signal's reason>, or
        #   "workflow cancelled") when its task is cancelled, and Cancel(reason) for
        #   a cancel that came before it started. adrive records Cancel("task
        #   cancelled"); to keep the reasons, pass them to adrive (a reason
        #   callable or a cancel token it checks before each effect), or accept
        #   "task cancelled" in the logs.
        # - tools: ActivityTools offers aexecute(call) -> (content, is_error), the
        #   shape of ToolRegistry.execute; give it whatever adrive calls on tools
        #   (and specs() returning the session's specs, if adrive compares them
        #   with loop.tools).
        # - models: adrive reads astream() up to the response or failure (the
        #   activity already made malformed output a ModelFailure) and stamps
        #   replies with clock, as _adrive does: the logs do not change.
        return await _adrive(
            self._loop,
            model=self._model,
            tools=self._tools,
            on_pause=self._wait_for_answer,
            clock=_now,
            cancelled=lambda: self._cancel_reason,
            record=self._replies.append,
            continue_as_new=self._continue_as_new,
        )

    def _continue_as_new(self, started: int) -> bool:
        """Whether to continue as new before the next model request, this run
        having started ``started`` of them (see ``SessionInput.steps_per_run``)."""
        if started == 0:
            return False  # every run takes at least one step
        limit = self._spec.steps_per_run
        if limit is None:
            return workflow.info().is_continue_as_new_suggested()
        return started >= limit

    async def _wait_for_answer(self, pause: Pause) -> Resume:
        # A child session tells its parent, which shows the pause (with this
        # session in its path) and forwards the answer: as in process, where a
        # child's pause reaches the parent's on_pause.
        mine = PendingPause(pause.reason, pause.payload, pause.path)
        await self._tell_parent("child_paused", ChildPause(workflow.info().workflow_id, mine))
        await workflow.wait_condition(lambda: self._answer is not None)
        answer, self._answer = self._answer, None
        assert answer is not None
        await self._tell_parent("child_resumed", workflow.info().workflow_id)
        return answer

    async def _tell_parent(self, signal: str, value: Any) -> None:
        parent = self._spec.parent
        if parent is not None:
            handle = workflow.get_external_workflow_handle(parent.session)
            await handle.signal(signal, raw(encode(value)))

    @workflow.signal(name="child_paused")
    async def child_paused(self, value: RawValue) -> None:
        """A child session (an agent tool's) waits for an answer: show it in
        ``pending`` (and tell this session's own parent)."""
        note = decode(value, ChildPause, "child pause")
        path = (note.session, *note.pause.path)
        self._child_pauses[note.session] = msgspec.structs.replace(note.pause, path=path)
        await self._tell_parent(
            "child_paused",
            ChildPause(workflow.info().workflow_id, self._child_pauses[note.session]),
        )

    @workflow.signal(name="child_resumed")
    async def child_resumed(self, value: RawValue) -> None:
        """A child session took its answer."""
        self._child_pauses.pop(decode(value, str, "child session"), None)
        await self._tell_parent("child_resumed", workflow.info().workflow_id)

    # ------------------------------------------------------------------ resume

    @workflow.update(name="resume")
    async def resume(self, answer: RawValue) -> None:
        """Answer the pending pause; returns once the loop has taken the answer (a
        child's pause: once the answer is sent to the child)."""
        if await self._forward(answer):
            return
        self._accept(answer)
        await workflow.wait_condition(lambda: self._answer is None or self._loop.result is not None)
        result = self._loop.result
        error = None if result is None else result.error
        if error is not None and error.code == CALLER_PROTOCOL_ERROR:
            raise ApplicationError(error.message, type=CALLER_PROTOCOL_ERROR)

    async def _forward(self, answer: RawValue) -> bool:
        """Send ``answer`` to the paused child, when the pause is a child's."""
        if type(self._loop.pending) is Pause or not self._child_pauses:
            return False
        child = next(iter(self._child_pauses))
        del self._child_pauses[child]
        await workflow.get_external_workflow_handle(child).signal("resume", answer)
        return True

    @resume.validator
    def _check_resume(self, answer: RawValue) -> None:
        if self._child_pauses and type(self._loop.pending) is not Pause:
            decode(answer, Answer, "resume answer")
            return
        if type(self._loop.pending) is not Pause or self._answer is not None:
            raise ApplicationError(
                "the session is not waiting for an answer (no pause is pending)",
                type="NotPaused",
            )
        decode(answer, Answer, "resume answer")

    @workflow.signal(name="resume")
    async def resume_signal(self, answer: RawValue) -> None:
        """Answer the pending pause; ignored (and logged) when none is pending."""
        try:
            self._check_resume(answer)
        except ApplicationError as exc:
            workflow.logger.warning("resume signal ignored: %s", exc.message)
            return
        if not await self._forward(answer):
            self._accept(answer)

    def _accept(self, answer: RawValue) -> None:
        value = decode(answer, Answer, "resume answer")
        self._answer = Resume(payload=value.payload, budget=value.budget)

    # ------------------------------------------------------------------ cancel

    @workflow.signal(name="cancel")
    def cancel(self, reason: str = "") -> None:
        """End the run ``cancelled`` with ``reason`` (once the run has finished,
        nothing changes; a second cancel before the loop took the first one
        replaces its reason)."""
        self._cancel_reason = str(reason)
        if self._driver is not None:
            self._driver.cancel()

    @workflow.update(name="cancel")
    async def cancel_update(self, reason: str = "") -> None:
        """Like the ``cancel`` signal; returns once the log is finished."""
        self.cancel(reason)
        await workflow.wait_condition(lambda: self._loop.result is not None)

    # ------------------------------------------------------------------ steer, follow_up

    @workflow.update(name="steer")
    async def steer(self, message: RawValue) -> None:
        """Send ``Steer(message)`` to the loop; returns once the loop recorded it."""
        await self._queue(Steer, message, update=True)

    @steer.validator
    def _check_steer(self, message: RawValue) -> None:
        self._check_message("steer", message)

    @workflow.signal(name="steer")
    async def steer_signal(self, message: RawValue) -> None:
        """Send ``Steer(message)`` to the loop; ignored (and logged) when the run
        has finished or the message does not decode."""
        await self._queue(Steer, message, update=False)

    @workflow.update(name="follow_up")
    async def follow_up(self, message: RawValue) -> None:
        """Send ``FollowUp(message)`` to the loop; returns once the loop recorded it."""
        await self._queue(FollowUp, message, update=True)

    @follow_up.validator
    def _check_follow_up(self, message: RawValue) -> None:
        self._check_message("follow_up", message)

    @workflow.signal(name="follow_up")
    async def follow_up_signal(self, message: RawValue) -> None:
        """Send ``FollowUp(message)`` to the loop; ignored (and logged) when the run
        has finished or the message does not decode."""
        await self._queue(FollowUp, message, update=False)

    def _check_message(self, name: str, message: RawValue) -> UserMessage:
        return decode(message, UserInput, f"{name} message").message

    async def _queue(
        self, kind: type[Steer | FollowUp], message: RawValue, *, update: bool
    ) -> None:
        """Send ``kind(message)`` once the loop waits at a yield (it is primed)."""
        name = "steer" if kind is Steer else "follow_up"
        try:
            user = self._check_message(name, message)  # (an update's validator did)
        except ApplicationError as exc:
            workflow.logger.warning("%s signal ignored: %s", name, exc.message)
            return
        loop = self._loop
        await workflow.wait_condition(lambda: loop.pending is not None or loop.result is not None)
        if loop.result is not None:
            self._refuse(
                update,
                name,
                ApplicationError(
                    f"the session has finished: there is no run left to take a {name} message",
                    type="Finished",
                ),
            )
            return
        reply = kind(user, at=_now())
        try:
            loop.send(reply)  # yields the pending effect again
        except CallerProtocolError as exc:
            # The loop refused it and logged the failed run.finished: stop whatever
            # the driver awaits (its activity), so the workflow completes.
            assert self._driver is not None  # (it primed the loop)
            self._driver.cancel()
            self._refuse(update, name, ApplicationError(str(exc), type=CALLER_PROTOCOL_ERROR))
        else:
            self._replies.append(reply)

    @staticmethod
    def _refuse(update: bool, name: str, error: ApplicationError) -> None:
        """An update fails with ``error``; a signal is ignored (and logged)."""
        if update:
            raise error
        workflow.logger.warning("%s signal ignored: %s", name, error.message)

    # ------------------------------------------------------------------ queries

    @workflow.query(name=PENDING_QUERY)
    def pending(self) -> RawValue:
        """The effect the loop waits on, as JSON (``null`` when finished)."""
        effect = self._loop.pending
        value: Any = None
        if type(effect) is ModelRequest:
            value = PendingModel(
                effect.id,
                effect.step,
                tuple(effect.messages),
                effect.tools,
                effect.system,
                effect.output,
                effect.purpose,
            )
        elif type(effect) is ToolRequest:
            value = PendingTool(effect.call, effect.step)
        elif type(effect) is ToolBatch:
            value = PendingBatch(tuple(r.call for r in effect.requests), effect.step)
        elif type(effect) is Pause:
            value = PendingPause(effect.reason, effect.payload)
        if type(effect) is not Pause and self._child_pauses:
            value = next(iter(self._child_pauses.values()))  # an agent tool's child waits
        return raw(encode(value))

    @workflow.query(name="log")
    def log(self, since: int = 0, max_bytes: int = MAX_PAYLOAD_BYTES) -> RawValue:
        """The events from sequence ``since`` on, as a JSON array of encoded events:
        as many as fit in ``max_bytes`` (always at least one; Temporal refuses a
        query answer above 2 MiB), each media block's bytes once, by hash (see
        ``_wire.log_page``). :meth:`AgentSession.log` reads page after page."""
        pages = log_page(self._loop.log.since(since), max_bytes, self._spec.by_reference)
        return raw(pages)


def _named(spec: OutputSpec | None) -> str:
    return "none" if spec is None else repr(spec.name)


def _tool_calls(log: Any) -> int:
    """The tool calls a session's log records, its children's included (as
    ``agentloop``'s agent tool counts them for ``ChildRun.tool_calls``)."""
    count = 0
    for event in log:
        kind = type(event)
        if kind is ToolCallEvent:
            count += 1
        elif kind is ToolResultEvent or kind is ToolErrorEvent:
            reply = event.reply
            if reply is not None and reply.child is not None:
                count += reply.child.tool_calls
    return count
