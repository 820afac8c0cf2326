"""The client side: start a session, answer its pauses, steer it, read its log and result."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import msgspec
from temporalio.client import Client, WorkflowHandle
from temporalio.common import RawValue

from agentloop import (
    Budget,
    Effect,
    Event,
    Limits,
    ModelRequest,
    Pause,
    RunResult,
    Tool,
    ToolBatch,
    ToolRegistry,
    ToolRequest,
    ToolSpec,
    UserMessage,
    decode_event,
)
from agentloop._spi import answer_problem, output_check

from ._wire import (
    DEFAULT_MODEL_ACTIVITY,
    DEFAULT_TOOL_ACTIVITY,
    ActivityOptions,
    Answer,
    PendingBatch,
    PendingModel,
    PendingTool,
    SessionInput,
    UserInput,
    decode,
    decode_pending,
    encode,
    raw,
)
from ._workflow import PENDING_QUERY, WORKFLOW_NAME

__all__ = ["AgentSession", "get_session", "start_session"]

_raws = msgspec.json.Decoder(list[msgspec.Raw])


class AgentSession:
    """A handle on one agent session (a workflow run), with typed payloads.

    Attributes:
        handle: the underlying :class:`temporalio.client.WorkflowHandle`.
    """

    def __init__(self, handle: WorkflowHandle[Any, Any]) -> None:
        self.handle = handle

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
            return ModelRequest(value.id, value.step, value.messages, value.tools, value.system)
        if isinstance(value, PendingTool):
            return ToolRequest(value.call, value.step)
        if isinstance(value, PendingBatch):
            return ToolBatch(tuple(ToolRequest(c, value.step) for c in value.calls), value.step)
        return Pause(value.reason, value.payload)

    async def log(self, since: int = 0) -> list[Event]:
        """The session's events so far, from sequence ``since`` on."""
        value = await self.handle.query("log", since, result_type=RawValue)
        return [decode_event(bytes(item)) for item in _raws.decode(value.payload.data)]

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
            temporalio.client.WorkflowUpdateFailedError: the session has finished,
                or the loop refused the message (its id is already used, or is
                one the loop makes, such as ``tool-result-...``: the run then ends
                ``failed``).
            temporalio.service.RPCError: the workflow has completed.
        """
        await self.handle.execute_update("steer", raw(encode(UserInput(message=message))))

    async def follow_up(self, message: UserMessage) -> None:
        """Send ``FollowUp(message)`` (update ``follow_up``): when the run would
        complete, it takes one more step with ``message`` instead. Returns once the
        loop recorded it.

        Raises:
            As for :meth:`steer`.
        """
        await self.handle.execute_update("follow_up", raw(encode(UserInput(message=message))))

    async def cancel(self, reason: str = "") -> None:
        """End the session ``cancelled`` (update ``cancel``); returns once its log
        is finished.

        Raises:
            temporalio.service.RPCError: the session has finished.
        """
        await self.handle.execute_update("cancel", reason)


def get_session(client: Client, session_id: str, *, run_id: str | None = None) -> AgentSession:
    """The session with id ``session_id`` (its latest run, or ``run_id``)."""
    return AgentSession(client.get_workflow_handle(session_id, run_id=run_id, result_type=RawValue))


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
            hold the implementations).
        system, max_steps, budget, limits, output_retries: as for
            :func:`agentloop.agent_loop` (the structured-output type comes from
            the workflow class: :meth:`AgentLoopWorkflow.output`).
        started_at: the session's start time (default: the workflow's start).
        steps_per_run: continue as new after this many model requests in one
            workflow run (default: when Temporal suggests it); the log carries
            over byte for byte (see :class:`SessionInput`).
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
        ValueError: ``steps_per_run`` is not an int >= 1 (or ``None``).
    """
    session = SessionInput(
        messages=tuple(messages),
        tools=ToolRegistry(tools).specs(),
        system=system,
        max_steps=max_steps,
        budget=budget,
        started_at=started_at,
        limits=limits,
        output_retries=output_retries,
        parallel_tools=parallel_tools,
        steps_per_run=steps_per_run,
        model_activity=DEFAULT_MODEL_ACTIVITY if model_activity is None else model_activity,
        tool_activity=DEFAULT_TOOL_ACTIVITY if tool_activity is None else tool_activity,
    )
    handle = await client.start_workflow(
        workflow,
        raw(encode(session)),
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
        )
    )
