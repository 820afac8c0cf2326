"""``drive``/``adrive``'s ``before_effect``: the hook a durable driver is built on.

It is called once per side effect, just before it (a model stream opened, a tool
call, a batch, a pause answered), never for a reply from the inbox; it may return
a reply to send instead (stamped by the driver's clock), and an exception from it
leaves the loop where it was, nothing recorded.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from agentloop import (
    Cancel,
    Effect,
    FunctionModel,
    Inbox,
    ModelRequest,
    Pause,
    Resume,
    ScriptedResponse,
    Steer,
    ToolBatch,
    ToolCall,
    ToolRequest,
    UserMessage,
    adrive,
    agent_loop,
    drive,
    run,
)

from .test_durable import APPROVE, add, publish

QUESTION = [UserMessage("u1", "Add, twice at once, then publish.")]


def answer(request: ModelRequest) -> ScriptedResponse:
    if request.step == 1:
        return ScriptedResponse.tool_calls(
            "r1",
            ToolCall("c1", "add", {"left": 1, "right": 2}),
            ToolCall("c2", "add", {"left": 3, "right": 4}),
            text="Adding twice.",
        )
    if request.step == 2:
        return ScriptedResponse.tool_calls("r2", ToolCall("c3", "publish", {"text": "7"}))
    return ScriptedResponse.text("r3", "All done, and quite a long answer it is: " * 3)


def describe(effect: Effect) -> str:
    if type(effect) is ModelRequest:
        return f"model {effect.id}"
    if type(effect) is ToolRequest:
        return f"tool {effect.call.id}"
    if type(effect) is ToolBatch:
        return "batch " + ",".join(request.call.id for request in effect.requests)
    assert type(effect) is Pause
    return f"pause {effect.reason}"


def loop_for(**options: Any) -> Any:
    return agent_loop(QUESTION, tools=[add, publish], started_at=0.0, **options)


@pytest.mark.parametrize("parallel_tools", [False, True])
def test_it_is_called_once_per_side_effect_just_before_it(parallel_tools):
    seen: list[str] = []
    loop = loop_for(parallel_tools=parallel_tools)

    def before_effect(effect: Effect) -> None:
        # Just before: what the loop recorded last is the effect's own event.
        seen.append(f"{describe(effect)} after {loop.log[-1].type}")

    result = drive(
        loop,
        model=FunctionModel(answer),
        tools=[add, publish],
        on_pause=lambda pause: APPROVE,
        before_effect=before_effect,
    )
    assert result.status == "completed"
    tools = (
        ["batch c1,c2 after tool.call"]
        if parallel_tools
        else ["tool c1 after tool.call", "tool c2 after tool.call"]
    )
    assert seen == [
        "model request-001 after step.start",  # not once per chunk: the stream is one call
        *tools,
        "model request-002 after step.start",
        "pause approval after session.pause",
        f"{'batch' if parallel_tools else 'tool'} c3 after tool.call",
        "model request-003 after step.start",
    ]


def test_a_reply_it_returns_is_sent_instead_and_stamped():
    seen: list[str] = []
    loop = loop_for()
    steer = Steer(UserMessage("u2", "Publish nothing."))

    def before_effect(effect: Effect) -> Any:
        seen.append(describe(effect))
        if type(effect) is Pause:
            return APPROVE  # (what a durable driver stored for the pause)
        if seen == ["model request-001"]:
            return steer  # the loop records it and waits again: asked again
        return None

    result = drive(
        loop,
        model=FunctionModel(answer),
        tools=[add, publish],
        clock=lambda: 5.0,
        before_effect=before_effect,  # no on_pause: the pause would cancel the run
    )
    assert result.status == "completed"
    assert seen == [
        "model request-001",
        "model request-001",  # (step 1's calls are then skipped: steered)
        "model request-002",
        "pause approval",
        "tool c3",
        "model request-003",
    ]
    queued = [e for e in loop.log if e.type == "message.queued"]
    assert [e.reply for e in queued] == [Steer(steer.message, at=5.0)]
    resumed = [e for e in loop.log if e.type == "session.resume"]
    assert resumed[0].reply == Resume({"approved": True}, at=5.0)


def test_a_reply_with_a_time_keeps_it():
    loop = loop_for()
    drive(
        loop,
        model=FunctionModel(answer),
        tools=[add, publish],
        clock=lambda: 5.0,
        before_effect=lambda e: Resume({"approved": True}, at=1.0) if type(e) is Pause else None,
    )
    (resumed,) = [e for e in loop.log if e.type == "session.resume"]
    assert resumed.reply.at == 1.0


def test_it_is_not_asked_for_a_reply_from_the_inbox():
    seen: list[str] = []
    inbox = Inbox()
    inbox.cancel("stop")
    result = run(
        QUESTION, model=FunctionModel(answer), tools=[add], inbox=inbox
    )  # (reference: the cancel comes first)
    assert result.status == "cancelled"
    inbox.cancel("stop")
    loop = loop_for()
    result = drive(
        loop,
        model=FunctionModel(answer),
        tools=[add, publish],
        inbox=inbox,
        before_effect=lambda effect: seen.append(describe(effect)),
    )
    assert (result.status, result.reason, seen) == ("cancelled", "stop", [])


class Stop(BaseException):
    pass


def test_an_exception_leaves_the_loop_waiting_and_unrecorded_and_drive_goes_on_later():
    loop = loop_for()
    stops = iter([True])

    def before_effect(effect: Effect) -> None:
        if type(effect) is Pause and next(stops, False):
            raise Stop

    options: dict[str, Any] = {"model": FunctionModel(answer), "tools": [add, publish]}
    with pytest.raises(Stop):
        drive(loop, before_effect=before_effect, **options)
    assert loop.result is None and type(loop.pending) is Pause
    assert loop.log[-1].type == "session.pause"  # no cancel recorded
    result = drive(loop, on_pause=lambda pause: APPROVE, before_effect=before_effect, **options)
    assert result == run(QUESTION, on_pause=lambda pause: APPROVE, started_at=0.0, **options)


def test_a_stop_iteration_from_it_is_a_runtime_error():
    def before_effect(effect: Effect) -> None:
        raise StopIteration

    loop = loop_for()
    with pytest.raises(RuntimeError, match="before_effect raised StopIteration"):
        drive(loop, model=FunctionModel(answer), tools=[add, publish], before_effect=before_effect)
    assert loop.result is None

    with pytest.raises(RuntimeError, match="before_effect raised StopIteration"):
        asyncio.run(
            adrive(
                loop_for(),
                model=FunctionModel(answer),
                tools=[add, publish],
                before_effect=before_effect,
            )
        )


def test_it_must_be_callable():
    with pytest.raises(TypeError, match="before_effect must be callable or None, got 3"):
        drive(loop_for(), model=FunctionModel(answer), tools=[add, publish], before_effect=3)


# --------------------------------------------------------------------------- adrive


def test_adrive_awaits_an_async_before_effect_and_sends_what_it_returns():
    seen: list[str] = []

    async def before_effect(effect: Effect) -> Any:
        await asyncio.sleep(0)
        seen.append(describe(effect))
        return APPROVE if type(effect) is Pause else None

    loop = loop_for()
    result = asyncio.run(
        adrive(
            loop,
            model=FunctionModel(answer),
            tools=[add, publish],
            clock=lambda: 5.0,
            before_effect=before_effect,
        )
    )
    assert result.status == "completed"
    assert seen == [
        "model request-001",
        "tool c1",
        "tool c2",
        "model request-002",
        "pause approval",
        "tool c3",
        "model request-003",
    ]
    (resumed,) = [e for e in loop.log if e.type == "session.resume"]
    assert resumed.reply == Resume({"approved": True}, at=5.0)


def test_adrive_leaves_the_loop_waiting_when_it_raises_or_the_task_is_cancelled():
    async def scenario() -> Any:
        loop = loop_for()
        started = asyncio.Event()

        async def blocking(effect: Effect) -> None:
            if type(effect) is Pause:
                started.set()
                await asyncio.sleep(3600)

        task = asyncio.ensure_future(
            adrive(loop, model=FunctionModel(answer), tools=[add, publish], before_effect=blocking)
        )
        await started.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert loop.result is None and loop.log[-1].type == "session.pause"

        def sync_raising(effect: Effect) -> None:
            raise Stop

        with pytest.raises(Stop):
            await adrive(
                loop, model=FunctionModel(answer), tools=[add, publish], before_effect=sync_raising
            )
        assert loop.result is None
        return await adrive(
            loop,
            model=FunctionModel(answer),
            tools=[add, publish],
            before_effect=lambda e: Cancel("enough"),
        )

    result = asyncio.run(scenario())
    assert (result.status, result.reason) == ("cancelled", "enough")
