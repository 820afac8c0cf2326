"""Continue-as-new: a long session runs as a chain of workflow runs.

With ``steps_per_run=2`` a six-step session continues as new twice. Each run's
history holds only its own steps (bounded), the next run gets every reply of the
runs before and rebuilds the loop from them, and the session's log -- read from
the last run -- is byte for byte the loop's own fed the same replies, and the log
``agentloop.run`` writes in process with the same model and tools. Temporal's
replayer replays every run's history without a nondeterminism error.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHistory
from temporalio.worker import Replayer

import replay
from agentloop import MessageQueuedEvent, Pause, SessionResumeEvent, UserMessage
from agentloop.temporal import AgentLoopWorkflow, sandbox_runner, start_session
from agentloop.temporal._wire import UserInput, encode, raw

from .app import MODEL, TOOLS
from .conftest import Temporal
from .helpers import (
    QUESTION,
    drive_by_hand,
    encoded,
    run_in_process,
    serving,
    session_id,
    wait_for,
)

CONTINUED = EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW


async def runs_of(temporal: Temporal, workflow_id: str, first: str) -> list[WorkflowHistory]:
    """The histories of every run of the chain that starts with run ``first``."""
    histories = []
    run_id: str | None = first
    while run_id is not None:
        handle = temporal.client.get_workflow_handle(workflow_id, run_id=run_id)
        history = await handle.fetch_history()
        histories.append(history)
        last = history.events[-1]
        run_id = None
        if last.event_type == CONTINUED:
            run_id = last.workflow_execution_continued_as_new_event_attributes.new_execution_run_id
    return histories


def test_a_long_session_continues_as_new_and_keeps_its_log(temporal: Temporal) -> None:
    async def scenario() -> Any:
        async with serving(temporal) as start:
            whole = await start(system="add 5")
            chained = await start(system="add 5", steps_per_run=2)
            results = (await whole.result(), await chained.result())
            logs = (await whole.log(), await chained.log())
            first = chained.handle.first_execution_run_id
            assert first is not None
            runs = await runs_of(temporal, chained.id, first)
            single = await whole.handle.fetch_history()
            replayer = Replayer(workflows=[AgentLoopWorkflow], workflow_runner=sandbox_runner())
            for history in runs:
                await replayer.replay_workflow(history)
            return results, logs, runs, single

    (whole, chained), (whole_log, log), runs, single = temporal.run(scenario())
    assert chained.status == whole.status == "completed"
    assert chained.final_text == whole.final_text == 'Done: {"sum":48}'
    assert chained.steps == 6
    assert len(runs) == 3  # 2 + 2 + 2 model requests
    assert all(len(run.events) < len(single.events) / 2 for run in runs)
    assert [type(e) for e in log] == [type(e) for e in whole_log]
    assert drive_by_hand(log) == encoded(log)
    result, in_process = run_in_process(log, model=MODEL, tools=TOOLS)
    assert in_process == encoded(log)
    assert result == chained
    assert replay.replay(log).result == chained


def test_steps_per_run_is_checked() -> None:
    client = object.__new__(Client)  # never used: the check comes first
    for bad in (0, -1, True, 1.5):
        with pytest.raises(ValueError, match="steps_per_run must be an int >= 1 or None"):
            asyncio.run(
                start_session(client, session_id(), QUESTION, task_queue="q", steps_per_run=bad)
            )


def test_steering_and_answers_are_carried_into_the_next_runs(temporal: Temporal) -> None:
    """A follow-up sent with the start and an approval's answer are replies too:
    the runs after the one that got them are fed them, and the log stays whole."""
    more = UserMessage("u-more", "One more thing.")

    async def scenario() -> Any:
        async with serving(temporal) as start:
            followed = await start(
                system="add 2",
                steps_per_run=1,
                start_signal="follow_up",
                start_signal_args=[raw(encode(UserInput(message=more)))],
            )
            approved = await start(system="approve", steps_per_run=1)
            await wait_for(approved, Pause)
            await approved.resume({"approved": True})
            sessions = (followed, approved)
            return [(await s.result(), await s.log()) for s in sessions]

    sessions = temporal.run(scenario())
    for result, log in sessions:
        assert result.status == "completed", result.error
        assert drive_by_hand(log) == encoded(log)
        assert replay.replay(log).result == result
    (followed, followed_log), (approved, approved_log) = sessions
    assert "u-more" in [m.id for m in followed.messages]
    assert any(type(e) is MessageQueuedEvent for e in followed_log)
    assert any(type(e) is SessionResumeEvent for e in approved_log)
    assert approved.final_text == "Done: done to prod"
