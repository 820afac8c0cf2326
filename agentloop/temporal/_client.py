"""The client side: start a session, answer its pauses, steer it, read its log and result."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import msgspec
from temporalio.client import Client, WorkflowHandle
from temporalio.common import RawValue

from agentloop import (
    AgentTool,
    Budget,
    Effect,
    Event,
    Limits,
    Pause,
    RunResult,
    Tool,
    ToolBatch,
    ToolRegistry,
    ToolRequest,
    ToolSpec,
    UserMessage,
    agent_loop,
    decode_event,
)
from agentloop._spi import answer_problem, output_check

from ._blobs import by_reference
from ._wire import (
    DEFAULT_MODEL_ACTIVITY,
    DEFAULT_TOOL_ACTIVITY,
    ActivityOptions,
    AgentConfig,
    Answer,
    ChildOutcome,
    PendingBatch,
    PendingModel,
    PendingTool,
    SessionInput,
    UserInput,
    decode,
    decode_pending,
    encode,
    inflate,
    oversized,
    payload_data,
    raw,
)
from ._workflow import PENDING_QUERY, WORKFLOW_NAME

__all__ = ["AgentSession", "get_session", "start_session"]

_raws = msgspec.json.Decoder(list[msgspec.Raw])


class AgentSession:
    """A handle on one agent session (a workflow run), with typed payloads.

    Attributes:
        handle: the underlying :class:`temporalio.client.WorkflowHandle`.
        by_reference: the ``min_bytes`` of the client's
            :class:`~agentloop.temporal.BlobCodec` (steered media blocks that
            large travel by reference), or ``None``.
    """

    def __init__(self, handle: WorkflowHandle[Any, Any], by_reference: int | None = None) -> None:
        self.handle = handle
        self.by_reference = by_reference

    @property
    def id(self) -> str:
        """The session id (the workflow id)."""
        return self.handle.id

    async def result(self, *, output: Any = None) -> RunResult:
        """Wait for the session to end; its ``RunResult``.

        Args:
            output: the session's structured-output type (its workflow's
                :meth:`AgentLoopWorkflow.output`): ``RunResult.output`` is then
                decoded to it; without it, it is the JSON value.

        Raises:
            temporalio.client.WorkflowFailureError: the workflow failed (a bad
                input) or was cancelled (``handle.cancel()``).
            ValueError: the output does not decode to ``output``.
        """
        value = await self.handle.result()
        if value.payload.data.startswith(b'{"result":'):  # a child session (agent tool)
            result = decode(value, ChildOutcome, "child session result").result
        else:
            result = decode(value, RunResult, "session result")
        check = output_check(output, 0)
        if check is None or result.output is None:
            return result
        typed, _, error = check.check(encode(result.output).decode())
        if error is not None:
            raise ValueError(f"the session's output does not decode to {check.spec.name}: {error}")
        return msgspec.structs.replace(result, output=typed)

    async def pending(self) -> Effect | None:
        """The effect the session waits on now (``None`` once it has finished).

        A ``ModelRequest`` comes with its whole transcript (queries are not
        recorded, so that costs nothing in history).
        """
        value = decode_pending(await self.handle.query(PENDING_QUERY, result_type=RawValue))
        if value is None:
            return None
        if isinstance(value, PendingModel):
            return value.request()
        if isinstance(value, PendingTool):
            return ToolRequest(value.call, value.step)
        if isinstance(value, PendingBatch):
            return ToolBatch(tuple(ToolRequest(c, value.step) for c in value.calls), value.step)
        return Pause(value.reason, value.payload, value.path)

    async def log(self, since: int = 0) -> list[Event]:
        """The session's events so far, from sequence ``since`` on (read in pages of
        at most one Temporal payload each: query ``log``)."""
        events: list[Event] = []
        blobs: dict[str, bytes] = {}
        while True:
            value = await self.handle.query("log", since + len(events), result_type=RawValue)
            page = [bytes(item) for item in _raws.decode(payload_data(value))]
            if not page:
                return events
            events += inflate(page, blobs, decode_event)

    async def resume(self, payload: Any = None, *, budget: Budget | None = None) -> None:
        """Answer the pending ``Pause`` (update ``resume``); returns once the loop
        has taken the answer.

        Raises:
            ValueError: ``payload`` is not plain JSON (a value JSON has no form for,
                a non-string key, a container that contains itself) or nests deeper
                than ``MAX_ANSWER_DEPTH`` (256) levels; nothing was sent.
            temporalio.client.WorkflowUpdateFailedError: no pause is pending, or
                the answer is not ``{"payload": ..., "budget": ...}``.
            temporalio.service.RPCError: the session has finished.
        """
        problem = answer_problem(payload)
        if problem is not None:
            raise ValueError(f"the answer cannot be sent: {problem}")
        answer = Answer(payload=payload, budget=budget)
        await self.handle.execute_update("resume", raw(encode(answer)))

    async def steer(self, message: UserMessage) -> None:
        """Send ``Steer(message)`` (update ``steer``): delivered at the next
        boundary (after the tool call now running, the others of that assistant
        message are skipped; DESIGN §19). Returns once the loop recorded it.

        Raises:
            ValueError: the message (its media blocks, which travel inline) is
                larger than one Temporal payload may hold
                (:data:`~agentloop.temporal.MAX_PAYLOAD_BYTES`); nothing was sent.
            temporalio.client.WorkflowUpdateFailedError: the session has finished,
                or the loop refused the message (its id is already used, or is
                one the loop makes, such as ``tool-result-...``: the run then ends
                ``failed``).
            temporalio.service.RPCError: the workflow has completed.
        """
        await self.handle.execute_update("steer", _message(message, "steer", self.by_reference))

    async def follow_up(self, message: UserMessage) -> None:
        """Send ``FollowUp(message)`` (update ``follow_up``): when the run would
        complete, it takes one more step with ``message`` instead. Returns once the
        loop recorded it.

        Raises:
            As for :meth:`steer`.
        """
        data = _message(message, "follow_up", self.by_reference)
        await self.handle.execute_update("follow_up", data)

    async def cancel(self, reason: str = "") -> None:
        """End the session ``cancelled`` (update ``cancel``); returns once its log
        is finished.

        Raises:
            temporalio.service.RPCError: the session has finished.
        """
        await self.handle.execute_update("cancel", reason)


def _agents(registry: ToolRegistry, agents: dict[str, AgentConfig]) -> None:
    """Every agent tool in ``registry`` and in its children's tools, as it travels
    (its hooks and output type as the workflow class must give them back:
    whether it has hooks, its output's ``OutputSpec``).

    Raises:
        ValueError: two agent tools share a name.
    """
    for entry in registry:
        if not isinstance(entry, AgentTool):
            continue
        name, options = entry.name, entry.options
        check = output_check(options.get("output"), options["output_retries"])
        config = AgentConfig(
            tools=entry.tools.specs(),
            system=options["system"],
            max_steps=options["max_steps"],
            budget=options["budget"],
            limits=options["limits"],
            parallel_tools=options["parallel_tools"],
            output_retries=options["output_retries"],
            output=None if check is None else check.spec,
            hooks=options["hooks"] is not None,
        )
        if agents.setdefault(name, config) != config:
            raise ValueError(f"two agent tools are named {name!r}: agent tool names must differ")
        _agents(entry.tools, agents)


def _message(message: UserMessage, name: str, by_reference: int | None) -> RawValue:
    data = encode(UserInput(message=message))
    problem = oversized(data, f"the {name} message", by_reference)
    if problem is not None:
        raise ValueError(f"{problem}; nothing was sent")
    return raw(data)


def get_session(client: Client, session_id: str, *, run_id: str | None = None) -> AgentSession:
    """The session with id ``session_id`` (its latest run, or ``run_id``)."""
    handle = client.get_workflow_handle(session_id, run_id=run_id, result_type=RawValue)
    return AgentSession(handle, by_reference(client))


async def start_session(
    client: Client,
    session_id: str,
    messages: Sequence[Any],
    *,
    task_queue: str,
    tools: ToolRegistry | Iterable[Tool | ToolSpec] = (),
    system: str | None = None,
    max_steps: int = 8,
    budget: Budget | None = None,
    started_at: float | None = None,
    limits: Limits | None = None,
    output_retries: int = 2,
    parallel_tools: bool = False,
    steps_per_run: int | None = None,
    compaction: Any = None,
    model_activity: ActivityOptions | None = None,
    tool_activity: ActivityOptions | None = None,
    workflow: str = WORKFLOW_NAME,
    **options: Any,
) -> AgentSession:
    """Start an agent session as a workflow with id ``session_id``.

    Args:
        client: a connected Temporal client.
        session_id: the workflow id; also the first half of every tool call's
            idempotency key.
        messages: the initial transcript (Message structs or dicts of that shape).
        task_queue: the queue of the workers that run the workflow.
        tools: the tools the model is shown; only their specs travel (the workers
            hold the implementations). An agent tool (:func:`agentloop.agent_tool`)
            runs its child as a child workflow (session ``<session_id>/<call id>``)
            whose model and tools are the agent tool's on the workers (give the
            same agent tool to :func:`worker`); its hooks and output type come
            from the workflow class (:meth:`AgentLoopWorkflow.agent_hooks`,
            :meth:`AgentLoopWorkflow.agent_output`), which the child checks.
        system, max_steps, budget, limits, output_retries: as for
            :func:`agentloop.agent_loop` (the structured-output type comes from
            the workflow class: :meth:`AgentLoopWorkflow.output`).
        started_at: the session's start time (default: the workflow's start).
        steps_per_run: continue as new after this many model requests in one
            workflow run (default: when Temporal suggests it); the log carries
            over byte for byte (see :class:`SessionInput`).
        compaction: a built-in compaction policy (:class:`agentloop.SummarizeOlder`,
            :class:`agentloop.TrimToolResults`, or the ``spec()`` dict one
            recorded), as for :func:`agentloop.agent_loop`: it needs
            ``limits=Limits(context_tokens=...)``. Only its ``spec()`` travels;
            a policy of your own comes from the workflow class
            (:meth:`AgentLoopWorkflow.compaction`). Summary requests are model
            activities with ``ModelRequest.purpose == "compaction"``.
        parallel_tools: run the calls of a step that may run together as
            concurrent tool activities (as :func:`agentloop.agent_loop`'s option
            of that name; each result is recorded as its activity completes).
        model_activity, tool_activity: timeouts, retries and task queues of the
            model and tool activities (defaults: see :class:`ActivityOptions`).
        workflow: the workflow type to start (a subclass registered under another
            name, for instance).
        options: passed to :meth:`temporalio.client.Client.start_workflow`
            (``id_reuse_policy``, ``execution_timeout``, ``start_signal``, ...).

    Raises:
        TypeError: a message or tool cannot be encoded as JSON.
        ValueError: two agent tools share a name; ``compaction`` is not a
            built-in policy or needs a window ``limits`` does not give;
            ``steps_per_run`` is not an int >= 1 (or ``None``); or the
            session's input (its messages' media blocks travel inline) is larger
            than one Temporal payload may hold
            (:data:`~agentloop.temporal.MAX_PAYLOAD_BYTES`); nothing was started.
    """
    registry = ToolRegistry(tools)
    agents: dict[str, AgentConfig] = {}
    _agents(registry, agents)
    spec = None
    if compaction is not None:
        spec = compaction if type(compaction) is dict else compaction.spec()
        # The workflow would refuse it the same way: say so before starting.
        agent_loop((), tools=(), limits=limits, compaction=spec)
    session = SessionInput(
        messages=tuple(messages),
        tools=registry.specs(),
        agents=agents,
        system=system,
        max_steps=max_steps,
        budget=budget,
        started_at=started_at,
        limits=limits,
        output_retries=output_retries,
        parallel_tools=parallel_tools,
        steps_per_run=steps_per_run,
        compaction=spec,
        model_activity=DEFAULT_MODEL_ACTIVITY if model_activity is None else model_activity,
        tool_activity=DEFAULT_TOOL_ACTIVITY if tool_activity is None else tool_activity,
    )
    blobs = by_reference(client)  # (the checks above come first)
    if blobs is not None:
        session = msgspec.structs.replace(session, by_reference=blobs)
    data = encode(session)
    problem = oversized(data, "the session's input", blobs)
    if problem is not None:
        raise ValueError(f"{problem}; nothing was started")
    handle = await client.start_workflow(
        workflow,
        raw(data),
        id=session_id,
        task_queue=task_queue,
        result_type=RawValue,
        **options,
    )
    # Queries, updates and signals go to the session's latest run (it continues
    # as new when it is long), never past this start's chain of runs.
    return AgentSession(
        WorkflowHandle(
            client,
            handle.id,
            result_run_id=handle.result_run_id,
            first_execution_run_id=handle.first_execution_run_id,
            result_type=RawValue,
        ),
        blobs,
    )
