"""Shared pieces of the Temporal tests: ids, waiting, and the in-process twins."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Iterable
from typing import Any

import replay
from agentloop import (
    CallerProtocolError,
    EventLog,
    HookRegistry,
    MessageAcceptedEvent,
    RunResult,
    SessionStartEvent,
    StepStartEvent,
    UserMessage,
    agent_loop,
    encode_event,
    run,
)
from agentloop.temporal import AgentSession, start_session, worker

from .app import MODEL, TOOLS
from .conftest import Temporal

#: The question every session starts with, unless a test says otherwise.
QUESTION = [UserMessage("u1", "add things")]


def queue() -> str:
    """A fresh task queue: every test gets its own workers."""
    return f"queue-{uuid.uuid4().hex[:12]}"


def session_id() -> str:
    return f"session-{uuid.uuid4().hex[:12]}"


class Starter:
    """Starts sessions on one worker's task queue (``start(messages, **options)``),
    offering the worker's tools unless told otherwise."""

    def __init__(self, temporal: Temporal, task_queue: str, tools: Any) -> None:
        self.temporal = temporal
        self.task_queue = task_queue
        self.tools = tools

    async def __call__(self, messages: Any = QUESTION, **options: Any) -> AgentSession:
        options.setdefault("tools", self.tools)
        return await start_session(
            self.temporal.client, session_id(), messages, task_queue=self.task_queue, **options
        )


@contextlib.asynccontextmanager
async def serving(
    temporal: Temporal, *, model: Any = MODEL, tools: Any = TOOLS, **worker_options: Any
) -> AsyncIterator[Starter]:
    """A worker (the app's model and tools by default) on a fresh task queue."""
    task_queue = queue()
    async with worker(
        temporal.client, task_queue=task_queue, model=model, tools=tools, **worker_options
    ):
        yield Starter(temporal, task_queue, tools)


async def wait_for(session: AgentSession, kind: type) -> Any:
    """Poll the ``pending`` query until the session waits on a ``kind`` effect."""
    for _ in range(600):
        pending = await session.pending()
        if isinstance(pending, kind):
            return pending
        await asyncio.sleep(0.05)
    raise AssertionError(f"the session never waited on a {kind.__name__}")


def encoded(events: Iterable[Any]) -> list[bytes]:
    return [encode_event(event) for event in events]


def _config(events: list[Any]) -> tuple[SessionStartEvent, list[Any]]:
    start = events[0]
    assert type(start) is SessionStartEvent
    messages = []
    for event in events[1:]:
        if type(event) is StepStartEvent:
            break
        if type(event) is MessageAcceptedEvent:
            messages.append(event.message)
    return start, messages


def drive_by_hand(
    events: list[Any],
    hooks: HookRegistry | None = None,
    output: Any = None,
    compaction: Any = None,
) -> list[bytes]:
    """``agent_loop(...)`` driven with ``send()`` and the replies ``events`` record
    (the limits the session recorded; ``output``: its structured-output type)."""
    start, messages = _config(events)
    log = EventLog()
    loop = agent_loop(
        messages,
        tools=start.tools,
        system=start.system,
        max_steps=start.max_steps,
        budget=start.budget,
        hooks=hooks,
        log=log,
        started_at=start.at,
        limits=start.limits,
        output=output,
        output_retries=2 if start.output is None else start.output.retries,
        parallel_tools=start.parallel_tools,
        compaction=start.compaction if compaction is None else compaction,
        parent=start.parent,
    )
    next(loop)
    for _, reply in replay.recorded_replies(events):
        try:
            loop.send(reply)
        except (StopIteration, CallerProtocolError):  # the run ended (misused, or not)
            break
    return encoded(log)


def run_in_process(
    events: list[Any],
    *,
    model: Any,
    tools: Any,
    hooks: HookRegistry | None = None,
    on_pause: Any = None,
    output: Any = None,
    compaction: Any = None,
) -> tuple[RunResult, list[bytes]]:
    """:func:`agentloop.run` with the same model and tools, its clock reading the
    times the Temporal run stamped on its replies, in order."""
    start, messages = _config(events)
    times = iter([float(reply.at or 0) for _, reply in replay.recorded_replies(events)])
    log = EventLog()
    result = run(
        messages,
        model=model,
        tools=tools,
        system=start.system,
        max_steps=start.max_steps,
        budget=start.budget,
        hooks=hooks,
        log=log,
        clock=lambda: next(times),
        started_at=start.at,
        on_pause=on_pause,
        limits=start.limits,
        output=output,
        output_retries=2 if start.output is None else start.output.retries,
        compaction=start.compaction if compaction is None else compaction,
    )
    return result, encoded(log)
