"""``parallel_tools``: the calls of a batch run as concurrent tool activities.

The tool of the first test only returns once *both* calls of its step have
entered it (a barrier): run one after the other, the first call would wait for
the second until the barrier gives up and the tool fails. So a session that
completes with both results proves the two activities ran at the same time,
without timing anything. The session's log is the loop's own, fed the same
replies, and Temporal's replayer runs the workflow over its history again
without a nondeterminism error (results that complete together are sent in the
batch's order).
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from temporalio.api.enums.v1 import EventType
from temporalio.worker import Replayer

import replay
from agentloop import ToolBatch, ToolCallEvent, ToolResultEvent, ToolResultMessage, tool
from agentloop.temporal import AgentLoopWorkflow, sandbox_runner

from .conftest import Temporal
from .helpers import drive_by_hand, encoded, serving


def barrier_add() -> Any:
    barrier = threading.Barrier(2, timeout=20)

    @tool
    def add(left: int, right: int) -> dict[str, int]:
        """Add two integers, once the other call of the step is here too."""
        barrier.wait()
        return {"sum": left + right}

    return add


def test_the_calls_of_a_batch_run_as_concurrent_activities(temporal: Temporal) -> None:
    async def scenario() -> Any:
        async with serving(temporal, tools=[barrier_add()]) as start:
            session = await start(system="pair 2", parallel_tools=True)
            result = await session.result()
            history = await session.handle.fetch_history()
            await Replayer(
                workflows=[AgentLoopWorkflow], workflow_runner=sandbox_runner()
            ).replay_workflow(history)
            return result, await session.log(), history

    result, log, history = temporal.run(scenario())
    assert result.status == "completed", result.error
    results = [m for m in result.messages if type(m) is ToolResultMessage]
    assert [m.content for m in results] == [
        '{"sum":40}',
        '{"sum":41}',
        '{"sum":42}',
        '{"sum":43}',
    ]
    assert not any(m.is_error for m in results)
    assert [type(e) for e in log].count(ToolCallEvent) == 4
    assert [type(e) for e in log].count(ToolResultEvent) == 4
    # Each step's two tool activities are scheduled in one workflow task.
    kinds = [
        e.event_type
        for e in history.events
        if e.event_type
        in (
            EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED,
            EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED,
        )
    ]
    scheduled, completed = (
        EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED,
        EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED,
    )
    # model; tool, tool; model; tool, tool; model (each scheduled, then completed)
    assert kinds[:2] == [scheduled, completed]
    assert kinds[2:4] == [scheduled, scheduled]
    assert drive_by_hand(log) == encoded(log)
    assert replay.replay(log).result == result


def test_a_running_batch_is_pending_and_a_cancel_stops_every_call(temporal: Temporal) -> None:
    entered = threading.Barrier(3, timeout=20)  # both calls and the test
    opened = threading.Event()

    @tool
    def add(left: int, right: int) -> dict[str, int]:
        """Add, slowly."""
        entered.wait()
        opened.wait(30)
        return {"sum": left + right}

    async def scenario() -> Any:
        async with serving(temporal, tools=[add]) as start:
            session = await start(system="pair 1", parallel_tools=True)
            await asyncio.to_thread(entered.wait)
            pending = await session.pending()
            await session.cancel("enough")
            result = await session.result()
            opened.set()
            return pending, result, await session.log()

    try:
        pending, result, log = temporal.run(scenario())
    finally:
        opened.set()
    assert type(pending) is ToolBatch
    assert [r.call.name for r in pending.requests] == ["add", "add"]
    assert {r.step for r in pending.requests} == {pending.step}
    assert result.status == "cancelled"
    assert result.reason == "enough"
    assert [type(e) for e in log].count(ToolCallEvent) == 2
    assert not [m for m in result.messages if type(m) is ToolResultMessage]
    assert drive_by_hand(log) == encoded(log)
    replay.replay(log)
