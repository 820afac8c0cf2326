"""``worker(...)``: a Temporal worker running agent sessions, model calls, tool calls."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import timedelta
from types import MappingProxyType
from typing import Any, Final

from temporalio.client import Client
from temporalio.worker import Worker
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

from agentloop import Tool, ToolRegistry, ToolSpec

from ._activities import SessionActivities
from ._blobs import by_reference
from ._workflow import AgentLoopWorkflow

__all__ = ["PASSTHROUGH_MODULES", "RECOVERY_OPTIONS", "sandbox_runner", "worker"]

#: Modules the workflow sandbox must share with the worker instead of re-importing
#: them: the loop dispatches on exact types (``type(reply) is ModelChunk``), so the
#: workflow and the activities' results must use the very same classes.
PASSTHROUGH_MODULES = ("agentloop", "msgspec")


#: What :func:`worker` passes to :class:`temporalio.worker.Worker` unless told
#: otherwise, so that a session whose worker died goes on elsewhere within seconds
#: (Temporal's own defaults are 10 s and 60 s; see docs/durable.md, "When a worker
#: dies"):
#:
#: - ``sticky_queue_schedule_to_start_timeout``: a workflow task waits this long on
#:   the queue of the worker that ran the session last (which has the session in
#:   its cache) before any worker may take it. After a crash, every session of the
#:   dead worker waits this long once.
#: - ``max_heartbeat_throttle_interval``: a running activity's heartbeats reach the
#:   server at least this often (Temporal sends at most one per 0.8 heartbeat
#:   timeouts, and never more often than this): the last heartbeat of a worker
#:   that dies is at most this old.
RECOVERY_OPTIONS: Final[Mapping[str, Any]] = MappingProxyType(
    {
        "sticky_queue_schedule_to_start_timeout": timedelta(seconds=1),
        "max_heartbeat_throttle_interval": timedelta(seconds=1),
    }
)


def sandbox_runner() -> SandboxedWorkflowRunner:
    """Temporal's workflow sandbox with :data:`PASSTHROUGH_MODULES` passed through."""
    return SandboxedWorkflowRunner(
        restrictions=SandboxRestrictions.default.with_passthrough_modules(*PASSTHROUGH_MODULES)
    )


def worker(
    client: Client,
    *,
    task_queue: str,
    model: Any = None,
    tools: ToolRegistry | Iterable[Tool | ToolSpec] | None = None,
    workflows: Sequence[type] = (AgentLoopWorkflow,),
    transcript_cache: int = 256,
    **options: Any,
) -> Worker:
    """A Temporal worker for agent sessions on ``task_queue``.

    One process can run all three parts, or each part can run on its own
    machines (see docs/durable.md, "Many workers"):

    - the workflows (``workflows``; pass ``()`` for an activity-only worker),
    - the model activity, when ``model`` is given,
    - the tool activity, when ``tools`` is given.

    Args:
        client: a connected :class:`temporalio.client.Client` (no special data
            converter is needed; for media blocks by reference, its data
            converter is :func:`~agentloop.temporal.blob_converter`'s, as every
            client's of the sessions).
        task_queue: the queue this worker polls.
        model: answers model requests: ``stream(request)`` like any agentloop
            model (read in a worker thread), or ``astream(request)``.
        tools: the tools the sessions may call (a registry or tools/specs).
        workflows: workflow classes to run (subclasses of
            :class:`AgentLoopWorkflow` that add hooks, for instance).
        transcript_cache: sessions whose transcript the model activity keeps, so
            each request only carries its new messages.
        options: passed to :class:`temporalio.worker.Worker` (``max_concurrent_activities``,
            ``workflow_runner``, ...). By default workflows run in Temporal's
            sandbox with :data:`PASSTHROUGH_MODULES` passed through, and
            :data:`RECOVERY_OPTIONS` apply.

    Returns:
        The worker; run it with ``async with`` or ``await worker.run()``.

    Raises:
        ValueError: the worker would run nothing, or ``transcript_cache`` is negative.
        TypeError: ``model`` has neither ``stream`` nor ``astream``.
    """
    if not workflows and model is None and tools is None:
        raise ValueError("worker() needs workflows, a model or tools: it would run nothing")
    activities = SessionActivities(model=model, tools=tools, transcript_cache=transcript_cache)
    activities.by_reference = by_reference(client)
    options.setdefault("workflow_runner", sandbox_runner())
    for name, value in RECOVERY_OPTIONS.items():
        options.setdefault(name, value)
    return Worker(
        client,
        task_queue=task_queue,
        workflows=list(workflows),
        activities=activities.activities(),
        **options,
    )
