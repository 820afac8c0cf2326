"""``drive(loop, ...)``: continue any loop (fresh, resumed, forked); ``run_stream``,
``on_event`` and the ``Inbox``."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest

import replay
from agentloop import (
    ANYTIME_REPLIES,
    Cancel,
    CancelToken,
    EventLog,
    FunctionModel,
    Inbox,
    ModelChunk,
    ModelChunkEvent,
    ModelRequest,
    ModelResponse,
    Pause,
    PlanDraftEvent,
    Resume,
    ScriptedModel,
    ScriptedResponse,
    SessionPauseEvent,
    TextBlock,
    Tool,
    ToolCall,
    ToolCallEvent,
    ToolRegistry,
    ToolResult,
    ToolResultMessage,
    ToolSpec,
    agent_loop,
    drive,
    encode_event,
    run,
    run_stream,
    tool,
)
from agentloop._driver import execute_tool

from .helpers import ADD_CALL, USER, Ticker, add, encoded, reference, script


def answer_from_transcript(request: ModelRequest) -> ScriptedResponse:
    """A model that answers from what it is sent (as a real one does)."""
    last = request.messages[-1]
    if type(last) is ToolResultMessage:
        return ScriptedResponse.text(f"r-{request.id}", f"The sum is {last.content}.")
    return ScriptedResponse.tool_calls(f"r-{request.id}", ADD_CALL)


# --------------------------------------------------------------------------- any loop


def test_run_is_drive_of_a_fresh_loop():
    expected, expected_log = reference()
    log = EventLog()
    loop = agent_loop([USER], tools=[add], log=log, started_at=100.0)
    result = drive(loop, model=ScriptedModel(script()), tools=[add], clock=Ticker(101.0))
    assert result == expected
    assert encoded(log) == encoded(expected_log)


def test_drive_continues_a_loop_driven_by_hand():
    loop = agent_loop([USER], tools=[add])
    effect = next(loop)
    assert type(effect) is ModelRequest
    loop.send(ModelResponse(effect.id, "r1", (ADD_CALL,), "tool_call"))  # now a ToolRequest
    result = drive(loop, model=FunctionModel(answer_from_transcript), tools=[add])
    assert result.final_text == 'The sum is {"sum":42}.'


@pytest.mark.parametrize("cut", ["after the tool call", "on the pause"])
def test_drive_finishes_a_resumed_log_like_the_uninterrupted_run(cut):
    on_pause = (lambda pause: Resume({"approved": True})) if cut == "on the pause" else None
    approved = ToolRegistry([Tool(add.fn, requires_approval=cut == "on the pause")])
    full = EventLog()
    expected = run(
        [USER],
        model=ScriptedModel(script()),
        tools=approved,
        log=full,
        clock=Ticker(),
        on_pause=on_pause,
    )
    # The first process died while waiting for the tool (or the approval).
    kind = ToolCallEvent if cut == "after the tool call" else SessionPauseEvent
    upto = next(e.sequence for e in full if type(e) is kind)
    loop, effect = replay.resume(list(full)[: upto + 1])
    assert effect == loop.pending
    result = drive(
        loop,
        model=ScriptedModel(script()[1:]),
        tools=approved,
        clock=Ticker(100.0 + upto),
        on_pause=on_pause,
    )
    assert result == expected
    replay.replay(loop.log)  # the continued log replays


def test_drive_a_fork_answers_differently():
    _, log = reference()
    draft = next(e.sequence for e in log if type(e) is PlanDraftEvent)
    step_start = (
        draft - 1 - sum(1 for e in log if type(e) is ModelChunkEvent and e.sequence < draft)
    )
    loop, effect = replay.fork(list(log), step_start)
    assert type(effect) is ModelRequest
    result = drive(loop, model=FunctionModel(lambda request: "No tools today."), tools=[add])
    assert result.final_text == "No tools today."


def test_drive_a_finished_loop_returns_its_result_and_asks_nothing():
    expected, _ = reference()
    loop = agent_loop([USER], tools=[add])
    for _ in range(2):
        drive(loop, model=ScriptedModel(script()), tools=[add])
    model = ScriptedModel([])
    result = drive(loop, model=model, tools=[add])
    assert result.status == expected.status and model.call_count == 0


def test_drive_an_invalid_transcript_returns_the_failed_result():
    loop = agent_loop([ToolResultMessage("t1", "c9", "add", "orphan")], tools=[add])
    result = drive(loop, model=ScriptedModel([]), tools=[add])
    assert result.status == "failed" and result.error.code == "INVALID_TRANSCRIPT"


def test_drive_refuses_a_loop_left_mid_stream_and_says_where_to_fork():
    _, log = reference()
    first_chunk = next(e.sequence for e in log if type(e) is ModelChunkEvent)
    loop, _ = replay.resume(list(log)[: first_chunk + 2])  # two chunks of request-001
    with pytest.raises(ValueError, match=r"middle of request-001's stream \(2 chunks") as info:
        drive(loop, model=ScriptedModel(script()), tools=[add])
    assert f"replay.fork(events, {first_chunk - 1})" in str(info.value)
    loop, _ = replay.fork(list(log), first_chunk - 1)
    assert drive(loop, model=ScriptedModel(script()), tools=[add]).final_text == "20 + 22 = 42"


# --------------------------------------------------------------------------- tool check


@tool
def other_add(left: int, right: str) -> str:
    """Add, differently."""
    return f"{left}{right}"


@pytest.mark.parametrize(
    ("tools", "message"),
    [
        ([], "the loop offers tool 'add', and the tools given have none"),
        (
            [Tool(other_add.fn, name="add")],
            r"tool 'add' takes other parameters than the loop recorded",
        ),
        ([add, other_add], r"tool 'other_add' is not one of the loop's tools \('add'\)"),
    ],
)
def test_drive_checks_the_tools_against_the_loops(tools, message):
    loop = agent_loop([USER], tools=[add])
    with pytest.raises(ValueError, match=message):
        drive(loop, model=ScriptedModel(script()), tools=tools)
    assert len(loop.log) == 0  # nothing ran


def test_drive_accepts_other_descriptions_and_bare_specs():
    loop = agent_loop([USER], tools=[add])
    bare = ToolSpec("add", "adds", add.spec.parameters)
    result = drive(loop, model=FunctionModel(answer_from_transcript), tools=[bare])
    assert result.messages[2].content == "tool 'add' has no implementation"


def test_an_extra_tool_on_a_loop_without_tools_lists_none():
    loop = agent_loop([USER], tools=[])
    with pytest.raises(ValueError, match=r"not one of the loop's tools \(none\)"):
        drive(loop, model=ScriptedModel([]), tools=[add])


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"loop": "not a loop"}, "loop must be an AgentLoop"),
        ({"on_event": 3}, "on_event must be callable"),
        ({"inbox": CancelToken()}, "inbox must be an Inbox"),
        ({"model": object()}, r"model must have a stream\(request\) method"),
    ],
)
def test_drive_checks_its_options(options, message):
    arguments: dict[str, Any] = {
        "loop": agent_loop([USER], tools=[add]),
        "model": ScriptedModel([]),
        "tools": [add],
        **options,
    }
    loop = arguments.pop("loop")
    with pytest.raises(TypeError, match=message):
        drive(loop, **arguments)


async def async_add(left: int, right: int) -> int:
    return left + right


def test_run_refuses_an_async_tool():
    with pytest.raises(TypeError, match="tool 'async_add' is an async function: run it with"):
        run([USER], model=ScriptedModel([]), tools=[tool(async_add)])


def test_run_refuses_an_async_only_model():
    class Async:
        def astream(self, request: ModelRequest) -> Any:
            raise AssertionError

    with pytest.raises(TypeError, match=r"is asynchronous .* agentloop.arun/adrive"):
        run([USER], model=Async(), tools=[])
    with pytest.raises(TypeError, match="is an async function; drive this model"):
        FunctionModel(async_add).stream(ModelRequest("request-001", 1, (), (), None))


def test_run_accepts_a_tools_iterator_once():
    result = run([USER], model=ScriptedModel(script()), tools=iter([add]))
    assert result.final_text == "20 + 22 = 42"


def test_execute_tool_is_the_registry_run():
    assert execute_tool(ToolRegistry([add]), ADD_CALL) == ('{"sum":42}', False)


# --------------------------------------------------------------------------- events


def test_on_event_sees_every_event_as_it_is_recorded():
    seen: list[Any] = []
    log = EventLog()
    run([USER], model=ScriptedModel(script()), tools=[add], log=log, on_event=seen.append)
    assert seen == list(log)
    assert len(log.since(0)) == len(seen)


def test_on_event_of_drive_sees_only_what_comes_next():
    _, full = reference()
    upto = next(e.sequence for e in full if type(e) is ToolCallEvent)
    loop, _ = replay.resume(list(full)[: upto + 1])
    seen: list[Any] = []
    drive(loop, model=ScriptedModel(script()[1:]), tools=[add], on_event=seen.append)
    assert seen == list(loop.log)[upto + 1 :]


def test_run_stream_yields_the_events_then_the_result():
    expected, expected_log = reference()
    items = list(run_stream([USER], model=ScriptedModel(script()), tools=[add], clock=Ticker()))
    assert items[-1] == expected
    assert [encode_event(e) for e in items[:-1]] == encoded(expected_log)
    deltas = [
        e.chunk.block.text
        for e in items[:-1]
        if e.type == "model.chunk" and type(e.chunk.block) is TextBlock
    ]
    assert "".join(deltas) == "Let me add.20 + 22 = 42"


def test_run_stream_checks_options_before_the_first_item():
    with pytest.raises(TypeError, match="inbox must be an Inbox"):
        run_stream([USER], model=ScriptedModel([]), tools=[], inbox=3)  # type: ignore[arg-type]


def test_leaving_run_stream_early_cancels_the_run_and_finishes_the_log():
    log = EventLog()
    items = run_stream([USER], model=ScriptedModel(script()), tools=[add], log=log)
    for item in items:
        if item.type == "tool.call":
            break
    items.close()
    assert log[-1].type == "run.finished" and log[-1].status == "cancelled"
    assert log[-1].reason == "closed"


def test_run_stream_of_an_invalid_transcript_yields_its_one_event():
    items = list(
        run_stream([ToolResultMessage("t1", "c9", "add", "x")], model=ScriptedModel([]), tools=[])
    )
    assert [type(item).__name__ for item in items] == ["RunFinishedEvent", "RunResult"]


def test_an_exception_leaving_run_stream_still_finishes_the_log():
    @tool
    def interrupt() -> str:
        raise KeyboardInterrupt

    log = EventLog()
    model = ScriptedModel([ScriptedResponse.tool_calls("r1", ToolCall("c1", "interrupt", {}))])
    with pytest.raises(KeyboardInterrupt):
        list(run_stream([USER], model=model, tools=[interrupt], log=log))
    assert log[-1].reason == "KeyboardInterrupt: "


# --------------------------------------------------------------------------- the inbox


def test_inbox_cancel_from_another_thread_while_a_tool_runs():
    inbox = Inbox()
    started = threading.Event()

    @tool
    def slow() -> str:
        started.set()
        threading.Event().wait(0.05)
        return "done"

    def cancel_once_started() -> None:
        started.wait(5)
        inbox.cancel("stop")

    canceller = threading.Thread(target=cancel_once_started)
    canceller.start()
    model = ScriptedModel(
        [
            ScriptedResponse.tool_calls("r1", ToolCall("c1", "slow", {})),
            ScriptedResponse.text("r2", "never"),
        ]
    )
    result = run([USER], model=model, tools=[slow], inbox=inbox)
    canceller.join()
    assert result.status == "cancelled" and result.reason == "stop"
    assert result.messages[-1].content == "done"  # the tool's result is kept
    assert model.call_count == 1 and len(inbox) == 0


def test_inbox_replies_go_first_in_order_and_keep_their_time():
    inbox = Inbox()
    inbox.send(Cancel("first", at=7.0))
    inbox.cancel("second")
    assert repr(inbox) == "<Inbox 2 waiting>"
    log = EventLog()
    result = run([USER], model=ScriptedModel([]), tools=[], log=log, inbox=inbox)
    assert result.reason == "first" and log[-2].reply == Cancel("first", at=7.0)
    assert len(inbox) == 1  # left for whoever looks


def test_inbox_stamps_a_reply_without_time():
    inbox = Inbox()
    inbox.cancel()
    log = EventLog()
    run([USER], model=ScriptedModel([]), tools=[], log=log, inbox=inbox, clock=lambda: 5.0)
    assert log[-2].reply == Cancel("cancelled", at=5.0)


def test_inbox_takes_only_replies_accepted_at_any_yield():
    assert Cancel in ANYTIME_REPLIES
    with pytest.raises(
        TypeError, match="an Inbox carries Cancel, Steer, FollowUp replies, got ToolResult"
    ):
        Inbox().send(ToolResult("c1", "x"))  # type: ignore[arg-type]
    assert Inbox().take() is None


def test_inbox_reply_mid_stream_closes_the_stream():
    closed: list[str] = []

    class Streaming:
        def stream(self, request: ModelRequest) -> Iterator[Any]:
            try:
                yield ModelChunk(request.id, TextBlock("Hel"))
                inbox.cancel("enough")
                yield ModelChunk(request.id, TextBlock("lo"))
            finally:
                closed.append(request.id)

    inbox = Inbox()
    result = run([USER], model=Streaming(), tools=[], inbox=inbox)
    assert result.status == "cancelled" and closed == ["request-001"]


def test_a_cancel_sent_while_on_pause_answers_comes_before_the_tool():
    inbox = Inbox()
    approved = Tool(add.fn, requires_approval=True)

    def on_pause(pause: Pause) -> Resume:
        inbox.cancel("changed my mind")
        return Resume({"approved": True})

    result = run(
        [USER],
        model=ScriptedModel(script()),
        tools=[approved],
        on_pause=on_pause,
        inbox=inbox,
    )
    assert result.reason == "changed my mind"
    assert result.messages[-1].id == "message-r1"  # approved, but cancelled before it ran
