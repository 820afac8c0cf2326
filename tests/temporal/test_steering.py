"""agentloop.temporal against a real Temporal dev server: steering, follow-ups,
limits and structured output.

As everywhere in these tests, the log a session keeps in its workflow is the log
of the same loop driven by hand with the replies it records (the ``Steer`` and
``FollowUp`` replies included), and every log replays.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import msgspec
import pytest
from temporalio.client import (
    WithStartWorkflowOperation,
    WorkflowUpdateFailedError,
)
from temporalio.common import RawValue, WorkflowIDConflictPolicy
from temporalio.service import RPCError

import replay
from agentloop import (
    Limits,
    MessageQueuedEvent,
    Pause,
    ToolRequest,
    ToolResultMessage,
    UserMessage,
    tool,
)
from agentloop.temporal import AgentSession, SessionInput
from agentloop.temporal._wire import UserInput, encode, raw

from .app import MODEL, TOOLS, OutputWorkflow, Total
from .conftest import Temporal
from .helpers import drive_by_hand, encoded, run_in_process, serving, session_id, wait_for

STEER = UserMessage("u-steer", "Stop adding, please.")
MORE = UserMessage("u-more", "One more thing.")


def message(user: UserMessage) -> Any:
    return raw(encode(UserInput(message=user)))


def test_steering_while_a_tool_runs(temporal: Temporal) -> None:
    entered, opened = threading.Event(), threading.Event()

    @tool
    def add(left: int, right: int) -> dict[str, int]:
        """Add two integers."""
        if left == 0:
            entered.set()
            opened.wait(30)
        return {"sum": left + right}

    async def scenario() -> Any:
        async with serving(temporal, tools=[add, *TOOLS[1:]]) as start:
            session = await start(system="add 3")
            await asyncio.to_thread(entered.wait, 30)
            pending = await session.pending()
            await session.steer(STEER)  # returns once the loop recorded it
            queued = [e for e in await session.log() if type(e) is MessageQueuedEvent]
            opened.set()
            return pending, queued, await session.result(), await session.log()

    try:
        pending, queued, result, log = temporal.run(scenario())
    finally:
        opened.set()
    assert type(pending) is ToolRequest
    assert [(e.mode, e.reply.message) for e in queued] == [("steer", STEER)]
    # Delivered after the tool call that was running: the model then sees it last.
    ids = [m.id for m in result.messages]
    assert ids.index("u-steer") == ids.index("tool-result-call-1") + 1
    assert result.status == "completed"
    assert drive_by_hand(log) == encoded(log)
    assert replay.replay(log).result == result


def test_a_follow_up_at_a_pause(temporal: Temporal) -> None:
    async def scenario() -> Any:
        async with serving(temporal) as start:
            session = await start(system="approve")
            await wait_for(session, Pause)
            await session.follow_up(MORE)
            await session.resume({"approved": True})
            # The follow-up turns the run's end into one more step, whose call
            # (the script asks for it after a user message) needs approval again.
            await wait_for(session, Pause)
            await session.resume({"approved": False, "message": "once is enough"})
            return await session.result(), await session.log()

    result, log = temporal.run(scenario(), timeout=60)
    assert (result.status, result.steps) == ("completed", 4)
    assert result.final_text == "Done: once is enough"
    ids = [m.id for m in result.messages]
    assert ids.index("u-more") == ids.index("message-r3") + 1
    assert drive_by_hand(log) == encoded(log)
    replay.replay(log)


def test_a_steer_sent_with_the_start_waits_for_the_first_yield(temporal: Temporal) -> None:
    async def scenario() -> Any:
        async with serving(temporal) as start:
            session = await start(
                system="add 1", start_signal="steer", start_signal_args=[message(STEER)]
            )
            return await session.result(), await session.log()

    result, log = temporal.run(scenario(), timeout=60)
    queued = [e for e in log if type(e) is MessageQueuedEvent]
    assert [(e.sequence, e.reply.message) for e in queued] == [(3, STEER)]
    assert result.status == "completed"
    assert drive_by_hand(log) == encoded(log)
    replay.replay(log)


def test_steering_a_finished_session_or_with_a_used_id_is_refused(temporal: Temporal) -> None:
    async def scenario() -> Any:
        async with serving(temporal) as start:
            session = await start(system="approve")
            await wait_for(session, Pause)
            with pytest.raises(WorkflowUpdateFailedError) as malformed:
                await session.handle.execute_update("steer", raw(b'{"message": 3}'))
            await session.handle.signal("steer", raw(b'{"message": 3}'))  # ignored
            with pytest.raises(WorkflowUpdateFailedError) as used:
                await session.steer(UserMessage("u1", "the first message's id"))
            result = await session.result()
            with pytest.raises(RPCError, match="already completed"):
                await session.follow_up(MORE)
            return malformed.value, used.value, result, await session.log()

    malformed, used, result, log = temporal.run(scenario())
    assert "invalid steer message" in str(malformed.cause)
    assert result.status == "failed"
    assert result.error.code == "CALLER_PROTOCOL_ERROR"
    assert "already used" in result.error.message
    assert (
        used.cause.message
        == result.error.message
        == ("Steer.message id 'u1' is already used in the run")
    )
    assert drive_by_hand(log) == encoded(log)


def test_a_message_signal_with_a_used_id_fails_the_run_too(temporal: Temporal) -> None:
    async def scenario() -> Any:
        async with serving(temporal) as start:
            session = await start(system="approve")
            await wait_for(session, Pause)
            await session.handle.signal("follow_up", message(UserMessage("u1", "again")))
            return await session.result(), await session.log()

    result, log = temporal.run(scenario())
    assert (result.status, result.error.code) == ("failed", "CALLER_PROTOCOL_ERROR")
    assert result.error.message == "FollowUp.message id 'u1' is already used in the run"
    assert drive_by_hand(log) == encoded(log)


def test_messages_for_a_run_that_ends_before_its_first_yield(temporal: Temporal) -> None:
    """Sent with the start, they wait for the loop's first yield; an invalid
    transcript ends the run without one: the signal is ignored, the update fails."""
    invalid = [UserMessage("u1", "hi"), ToolResultMessage("t1", "call-x", "add", "{}")]

    async def scenario() -> Any:
        async with serving(temporal) as start:
            signalled = await start(
                invalid, start_signal="follow_up", start_signal_args=[message(MORE)]
            )
            operation: WithStartWorkflowOperation[Any, Any] = WithStartWorkflowOperation(
                "agentloop",
                raw(encode(SessionInput(messages=tuple(invalid)))),
                id=session_id(),
                task_queue=start.task_queue,
                id_conflict_policy=WorkflowIDConflictPolicy.FAIL,
                result_type=RawValue,
            )
            with pytest.raises(WorkflowUpdateFailedError) as refused:
                await temporal.client.execute_update_with_start_workflow(
                    "steer", message(STEER), start_workflow_operation=operation
                )
            updated = AgentSession(await operation.workflow_handle())
            return await signalled.result(), await updated.result(), refused.value

    signalled, updated, refused = temporal.run(scenario())
    assert signalled.error.code == updated.error.code == "INVALID_TRANSCRIPT"
    assert "the session has finished: there is no run left to take a steer message" in str(
        refused.cause
    )


def test_the_session_s_limits_are_kept_by_the_workflow_and_the_model_activity(
    temporal: Temporal,
) -> None:
    """More than 64 steps are allowed (agent_steps), and the model activity stops
    reading at the chunk the loop fails the step on (chunks_per_step), as in
    process."""
    limits = Limits(agent_steps=100, chunks_per_step=3)
    read: list[int] = []

    class Counting:
        def stream(self, request):
            for item in MODEL.stream(request):
                read.append(1)
                yield item

    async def scenario() -> Any:
        async with serving(temporal, model=Counting()) as start:
            session = await start(system="add 1", max_steps=80, limits=limits)
            return await session.result(), await session.log()

    result, log = temporal.run(scenario())
    assert log[0].limits == limits and log[0].max_steps == 80
    assert (result.status, result.error.code) == ("failed", "MODEL_PROTOCOL_ERROR")
    assert "more than Limits.chunks_per_step (3) chunks" in result.error.message
    assert len(read) == 4  # three chunks, and the fourth that fails the step
    in_process, logged = run_in_process(log, model=MODEL, tools=TOOLS)
    assert logged == encoded(log) and in_process == result


class Other(msgspec.Struct):
    name: str


def test_structured_output_comes_from_the_workflow_class(temporal: Temporal) -> None:
    async def scenario() -> Any:
        async with serving(temporal, workflows=[OutputWorkflow]) as start:
            session = await start(system="json", workflow="agentloop-output", output_retries=1)
            with pytest.raises(ValueError) as wrong:
                await session.result(output=Other)
            return (
                await session.result(),
                await session.result(output=Total),
                wrong.value,
                await session.log(),
            )

    plain, typed, wrong, log = temporal.run(scenario())
    assert plain.output == {"total": 3} and typed.output == Total(3)
    assert str(wrong).startswith("the session's output does not decode to Other: ")
    assert log[0].output.name == "Total" and log[0].output.retries == 1
    assert run_in_process(log, model=MODEL, tools=TOOLS, output=Total)[1] == encoded(log)
    assert replay.replay(log, output=Total).result == typed
