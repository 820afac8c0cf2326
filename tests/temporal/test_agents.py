"""Agent tools under Temporal (DESIGN §26, issue 23 item 5), on a real dev server.

A call to an agent tool runs the child session as a child workflow with id
``<parent>/<call id>`` and its own agentloop log; the parent's log records the
child's answer and ``ChildRun`` as :func:`agentloop.run` records them; usage and
tool calls roll up; cancelling the parent cancels the child.
"""

from __future__ import annotations

import asyncio
from typing import Any

import msgspec
import pytest
from temporalio.client import WorkflowFailureError
from temporalio.service import RPCError

from agentloop import (
    EventLog,
    FunctionModel,
    Limits,
    ModelRequest,
    Pause,
    Resume,
    RunFinishedEvent,
    ScriptedResponse,
    SessionStartEvent,
    ToolCall,
    ToolErrorEvent,
    ToolResultEvent,
    ToolResultMessage,
    Usage,
    UserMessage,
    agent_tool,
    idempotency_session,
    run,
    tool,
)
from agentloop.temporal import get_session, start_session

from .app import AgentsWorkflow, Finding, add, hooks
from .conftest import Temporal
from .helpers import drive_by_hand, encoded, serving, session_id, wait_for


def child_answer(request: ModelRequest) -> ScriptedResponse:
    """Adds once, then reports the sum; ``approve`` first asks for ``guarded``."""
    usage = Usage(input_tokens=10, output_tokens=2)
    results = [m for m in request.messages if type(m) is ToolResultMessage]
    task = request.messages[0].content
    if task == "approve" and not results:
        return ScriptedResponse.tool_calls("c0", ToolCall("g1", "guarded", {}), usage=usage)
    if not results:
        return ScriptedResponse.tool_calls(
            "c1", ToolCall("a1", "add", {"left": 40, "right": 2}), usage=usage
        )
    return ScriptedResponse.text("c2", f"found {results[-1].content} for {task}", usage=usage)


@tool(requires_approval=True)
def guarded() -> str:
    """Something a human approves first."""
    return "done"


RESEARCHER = agent_tool(
    "researcher",
    "Research a question.",
    model=FunctionModel(child_answer),
    tools=[add, guarded],
    system="You research.",
)


def parent_answer(request: ModelRequest) -> ScriptedResponse:
    """Asks the researcher (the task is the user's message), then repeats its answer."""
    usage = Usage(input_tokens=100, output_tokens=5)
    last = request.messages[-1]
    if type(last) is UserMessage and last.content == "bad arguments":
        call = ToolCall("r1", "researcher", {"task": 5})
        return ScriptedResponse.tool_calls("p1", call, usage=usage)
    if type(last) is UserMessage:
        call = ToolCall("r1", "researcher", {"task": last.content})
        return ScriptedResponse.tool_calls("p1", call, usage=usage)
    return ScriptedResponse.text("p2", f"Done: {last.content}", usage=usage)


PARENT = FunctionModel(parent_answer)


def untimed(events: Any) -> list[Any]:
    """The events as plain data without their times (every ``at``, nested too)."""

    def strip(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: strip(v) for k, v in value.items() if k != "at"}
        if isinstance(value, list):
            return [strip(v) for v in value]
        return value

    return [strip(msgspec.to_builtins(event)) for event in events]


def test_an_agent_tool_runs_as_a_child_workflow_with_its_own_log(temporal: Temporal) -> None:
    async def scenario() -> Any:
        async with serving(temporal, model=PARENT, tools=[add, RESEARCHER]) as start:
            session = await start([UserMessage("u1", "the sum")])
            result = await session.result()
            child = get_session(temporal.client, f"{session.id}/r1")
            return session.id, result, await session.log(), await child.result(), await child.log()

    parent_id, result, log, child_result, child_log = temporal.run(scenario())
    assert result.status == "completed"
    assert result.final_text == 'Done: found {"sum":42} for the sum'
    # The child's own log: its session.start names its parent.
    start = child_log[0]
    assert type(start) is SessionStartEvent and start.parent is not None
    assert (start.parent.session, start.parent.call_id, start.parent.depth) == (parent_id, "r1", 1)
    assert child_result.status == "completed"
    assert drive_by_hand(child_log) == encoded(child_log)
    assert drive_by_hand(log) == encoded(log)
    # The parent's tool result: the child's answer and ChildRun, rolled up.
    (recorded,) = [e.reply for e in log if type(e) is ToolResultEvent and e.reply.child]
    assert recorded.child.session == f"{parent_id}/r1"
    assert recorded.child.tool_calls == 1
    assert recorded.child.usage == Usage(input_tokens=20, output_tokens=4)
    assert result.usage.input_tokens == 220 and result.usage.output_tokens == 14
    # As agentloop.run records it, the same session named the same way (times aside:
    # the workflow stamps workflow.now(), run its clock).
    in_process_log = EventLog()
    with idempotency_session(parent_id):
        in_process = run(
            [UserMessage("u1", "the sum")],
            model=PARENT,
            tools=[add, RESEARCHER],
            log=in_process_log,
            started_at=log[0].at,
        )
    assert in_process.usage == result.usage
    assert untimed(in_process_log) == untimed(log)
    assert untimed(RESEARCHER.logs[f"{parent_id}/r1"]) == untimed(child_log)


def test_cancelling_the_parent_cancels_the_child(temporal: Temporal) -> None:
    async def scenario() -> Any:
        async with serving(temporal, model=PARENT, tools=[add, RESEARCHER]) as start:
            session = await start([UserMessage("u1", "approve")])
            child = get_session(temporal.client, f"{session.id}/r1")
            for _ in range(600):  # the child workflow exists once the parent started it
                try:
                    await wait_for(child, Pause)
                    break
                except RPCError:
                    await asyncio.sleep(0.05)
            await session.cancel("stop")
            result = await session.result()
            with pytest.raises(WorkflowFailureError):  # cancelled in Temporal too
                await child.result()
            return result, await session.log(), await child.log()

    result, log, child_log = temporal.run(scenario())
    assert result.status == "cancelled"
    finished = child_log[-1]
    assert type(finished) is RunFinishedEvent and finished.status == "cancelled"
    assert drive_by_hand(log) == encoded(log)
    assert drive_by_hand(child_log) == encoded(child_log)


def test_two_agent_tools_of_one_name_are_refused(temporal: Temporal) -> None:
    twin = agent_tool("researcher", "another", model=PARENT, tools=[], system="other")
    outer = agent_tool("outer", "nests the twin", model=PARENT, tools=[twin])

    async def scenario() -> None:
        with pytest.raises(ValueError, match="two agent tools are named 'researcher'"):
            await start_session(
                temporal.client, session_id(), [], task_queue="q", tools=[RESEARCHER, outer]
            )

    temporal.run(scenario())


def analyst_answer(request: ModelRequest) -> ScriptedResponse:
    """Adds once, then answers a ``Finding`` about its task as it sees it (step 2:
    the child's ``before_plan`` hook has rewritten it)."""
    results = [m for m in request.messages if type(m) is ToolResultMessage]
    if not results:
        return ScriptedResponse.tool_calls("a1", ToolCall("s1", "add", {"left": 40, "right": 2}))
    finding = {"sum": 42, "task": request.messages[0].content}
    return ScriptedResponse.text("a2", msgspec.json.encode(finding).decode())


ANALYST = agent_tool(
    "analyst",
    "Analyse a question.",
    model=FunctionModel(analyst_answer),
    tools=[add],
    system="You analyse.",
    output=Finding,
    hooks=hooks(),
)


def ask_analyst(request: ModelRequest) -> ScriptedResponse:
    last = request.messages[-1]
    if type(last) is UserMessage:
        return ScriptedResponse.tool_calls("p1", ToolCall("n1", "analyst", {"task": last.content}))
    return ScriptedResponse.text("p2", f"Done: {last.content}")


def test_an_agent_tool_with_hooks_and_an_output_type_runs_as_in_process(
    temporal: Temporal,
) -> None:
    model, tools = FunctionModel(ask_analyst), [add, ANALYST]

    async def scenario() -> Any:
        async with serving(temporal, model=model, tools=tools, workflows=[AgentsWorkflow]) as start:
            session = await start([UserMessage("u1", "the sum")], workflow="agentloop-agents")
            result = await session.result()
            child = get_session(temporal.client, f"{session.id}/n1")
            return session.id, result, await session.log(), await child.log()

    parent_id, result, log, child_log = temporal.run(scenario())
    assert result.status == "completed"
    # The child's hook rewrote its task; its output reached the parent as JSON.
    assert result.final_text == 'Done: {"sum":42,"task":"the sum (rewritten)"}'
    finished = child_log[-1]
    assert type(finished) is RunFinishedEvent and finished.output == {
        "sum": 42,
        "task": "the sum (rewritten)",
    }
    assert drive_by_hand(child_log, hooks=hooks(), output=Finding) == encoded(child_log)
    assert drive_by_hand(log) == encoded(log)
    in_process_log = EventLog()
    with idempotency_session(parent_id):
        run(
            [UserMessage("u1", "the sum")],
            model=model,
            tools=tools,
            log=in_process_log,
            started_at=log[0].at,
        )
    assert untimed(in_process_log) == untimed(log)
    assert untimed(ANALYST.logs[f"{parent_id}/n1"]) == untimed(child_log)


def test_a_child_whose_workflow_class_lacks_its_hooks_or_output_type_fails(
    temporal: Temporal,
) -> None:
    class Other(msgspec.Struct):
        sum: int

    child = FunctionModel(analyst_answer)
    hooked = agent_tool("analyst", "x", model=child, tools=[add], hooks=hooks())
    other = agent_tool("analyst", "x", model=child, tools=[add], output=Other)
    model = FunctionModel(ask_analyst)

    async def scenario() -> list[str | None]:
        answers = []
        for tools, options in (
            ([ANALYST], {}),  # the default workflow class gives no hooks
            ([other], {"workflows": [AgentsWorkflow]}),  # another output type
        ):
            async with serving(temporal, model=model, tools=tools, **options) as start:
                workflow = "agentloop-agents" if options else "agentloop"
                session = await start([UserMessage("u1", "the sum")], workflow=workflow)
                answers.append((await session.result()).final_text)
        async with serving(temporal, model=model, tools=[hooked]) as start:
            session = await start([UserMessage("u1", "the sum")])
            answers.append((await session.result()).final_text)
        return answers

    no_hooks, wrong_type, hooks_only = temporal.run(scenario())
    for answer in (no_hooks, hooks_only):
        assert answer.startswith("Done: agent 'analyst' (session ")
        assert answer.endswith(
            "failed: agent tool 'analyst' has hooks, and this workflow class gives none: "
            "override AgentLoopWorkflow.agent_hooks() to return them"
        )
    assert wrong_type.endswith(
        "failed: agent tool 'analyst''s output type is 'Other', and this workflow class's "
        "agent_output() gives 'Finding': override AgentsWorkflow.agent_output() to return "
        "the same type"
    )


OUTER = agent_tool(
    "outer",
    "Delegates to the researcher, one level down.",
    model=PARENT,
    tools=[RESEARCHER],
    limits=Limits(agent_depth=1),
)


def outer_answer(request: ModelRequest) -> ScriptedResponse:
    last = request.messages[-1]
    if type(last) is UserMessage:
        return ScriptedResponse.tool_calls("o1", ToolCall("x1", "outer", {"task": last.content}))
    return ScriptedResponse.text("o2", f"Top: {last.content}")


@pytest.mark.parametrize(
    ("model", "tools", "question"),
    [
        (FunctionModel(outer_answer), [OUTER], "the sum"),  # too deep, two levels down
        (PARENT, [RESEARCHER], "bad arguments"),
    ],
    ids=["depth", "arguments"],
)
def test_a_call_that_starts_no_child_answers_as_in_process(
    temporal: Temporal, model: Any, tools: Any, question: str
) -> None:
    async def scenario() -> Any:
        async with serving(temporal, model=model, tools=tools) as start:
            session = await start([UserMessage("u1", question)])
            return session.id, await session.result(), await session.log()

    parent_id, result, log = temporal.run(scenario())
    assert result.status == "completed"
    assert drive_by_hand(log) == encoded(log)
    in_process_log = EventLog()
    with idempotency_session(parent_id):
        run(
            [UserMessage("u1", question)],
            model=model,
            tools=tools,
            log=in_process_log,
            started_at=log[0].at,
        )
    assert untimed(in_process_log) == untimed(log)
    assert "not started" in result.final_text or "invalid arguments" in result.final_text


def test_a_child_that_fails_or_whose_worker_lacks_its_agent_is_an_error_result(
    temporal: Temporal,
) -> None:
    async def scenario() -> Any:
        # The workers were not given the agent tool: its model cannot be found.
        async with serving(temporal, model=PARENT, tools=[add]) as start:
            session = await start([UserMessage("u1", "the sum")], tools=[add, RESEARCHER])
            unknown = await session.result()
        # The child workflow itself ends failed in Temporal (terminated here).
        async with serving(temporal, model=PARENT, tools=[add, RESEARCHER]) as start:
            session = await start([UserMessage("u1", "approve")])
            child = get_session(temporal.client, f"{session.id}/r1")
            for _ in range(600):
                try:
                    await wait_for(child, Pause)
                    break
                except RPCError:
                    await asyncio.sleep(0.05)
            await child.handle.terminate("operator")
            terminated = await session.result()
        return unknown, terminated, session.id

    unknown, terminated, parent_id = temporal.run(scenario())
    assert "this worker has no agent tool 'researcher'" in unknown.final_text
    assert "ended failed: MODEL_ERROR" in unknown.final_text
    assert terminated.final_text == (
        f"Done: agent 'researcher' (session '{parent_id}/r1') failed: Terminated"
    )


OUTER2 = agent_tool(
    "outer2", "Delegates to the researcher.", model=PARENT, tools=[RESEARCHER], system="outer"
)
SHORT = agent_tool(
    "short", "Runs out of steps.", model=FunctionModel(child_answer), tools=[add], max_steps=1
)


def delegate(request: ModelRequest) -> ScriptedResponse:
    """Calls the tool the system prompt names, then repeats its answer."""
    last = request.messages[-1]
    if type(last) is UserMessage:
        call = ToolCall("d1", request.system or "", {"task": last.content})
        return ScriptedResponse.tool_calls("t1", call)
    return ScriptedResponse.text("t2", f"Top: {last.content}")


@pytest.mark.parametrize("name", ["outer2", "short"])
def test_grandchildren_roll_up_and_a_child_out_of_steps_says_so(
    temporal: Temporal, name: str
) -> None:
    model, tools = FunctionModel(delegate), [OUTER2, SHORT]

    async def scenario() -> Any:
        async with serving(temporal, model=model, tools=tools) as start:
            session = await start([UserMessage("u1", "the sum")], system=name)
            return session.id, await session.result(), await session.log()

    parent_id, result, log = temporal.run(scenario())
    (recorded,) = [e.reply for e in log if type(e) in (ToolResultEvent, ToolErrorEvent)]
    if name == "outer2":
        assert result.final_text == 'Top: Done: found {"sum":42} for the sum'
        assert recorded.child.tool_calls == 2  # outer2's call of researcher, and its add
    else:
        assert result.final_text == (
            f"Top: agent 'short' (session '{parent_id}/d1') ended max_steps: no_more_steps"
        )
    in_process_log = EventLog()
    with idempotency_session(parent_id):
        run(
            [UserMessage("u1", "the sum")],
            model=model,
            tools=tools,
            system=name,
            log=in_process_log,
            started_at=log[0].at,
        )
    assert untimed(in_process_log) == untimed(log)


def test_a_childs_pause_is_the_parents_to_answer(temporal: Temporal) -> None:
    async def scenario() -> Any:
        async with serving(temporal, model=PARENT, tools=[add, RESEARCHER]) as start:
            session = await start([UserMessage("u1", "approve")])
            pause = await wait_for(session, Pause)
            await session.resume({"approved": True})
            result = await session.result()
            child = get_session(temporal.client, f"{session.id}/r1")
            return session.id, pause, result, await session.log(), await child.log()

    parent_id, pause, result, log, child_log = temporal.run(scenario())
    assert pause.reason == "approval" and pause.path == (f"{parent_id}/r1",)
    assert result.final_text == "Done: found done for approve"
    assert drive_by_hand(child_log) == encoded(child_log)
    # As in process, where the child's pause reaches the parent's on_pause.
    seen: list[Pause] = []

    def on_pause(pause: Pause) -> Any:
        seen.append(pause)
        return Resume({"approved": True})

    in_process_log = EventLog()
    with idempotency_session(parent_id):
        run(
            [UserMessage("u1", "approve")],
            model=PARENT,
            tools=[add, RESEARCHER],
            on_pause=on_pause,
            log=in_process_log,
            started_at=log[0].at,
        )
    assert [(p.reason, p.path) for p in seen] == [(pause.reason, pause.path)]
    assert untimed(in_process_log) == untimed(log)
    assert untimed(RESEARCHER.logs[f"{parent_id}/r1"]) == untimed(child_log)


def test_a_grandchilds_pause_goes_up_the_tree_and_a_signal_answers_it(
    temporal: Temporal,
) -> None:
    from agentloop.temporal._wire import encode, raw

    model = FunctionModel(delegate)

    async def scenario() -> Any:
        async with serving(temporal, model=model, tools=[OUTER2]) as start:
            session = await start([UserMessage("u1", "approve")], system="outer2")
            pause = await wait_for(session, Pause)
            await session.handle.signal("resume", raw(encode({"payload": {"approved": True}})))
            return session.id, pause, await session.result(), await session.log()

    parent_id, pause, result, log = temporal.run(scenario())
    child = f"{parent_id}/d1"
    assert pause.path == (child, f"{child}/r1")
    assert result.final_text == "Top: Done: found done for approve"
    assert drive_by_hand(log) == encoded(log)
