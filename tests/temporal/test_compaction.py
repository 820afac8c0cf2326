"""Compaction under Temporal (DESIGN §27, issue 24), on a real dev server.

A session with ``limits=Limits(context_tokens=...)`` and a built-in policy
(``start_session(compaction=...)``, its ``spec()`` in the session's input) compacts
as :func:`agentloop.run` does: a summary is a model activity whose request says
``purpose="compaction"``, trimming happens in the workflow, and the log is byte
for byte ``run``'s and the loop's driven by hand. A policy of one's own comes from
the workflow class (:meth:`AgentLoopWorkflow.compaction`).
"""

from __future__ import annotations

from typing import Any

import pytest

from agentloop import (
    ContextCompactedEvent,
    FunctionModel,
    Limits,
    ModelRequest,
    ScriptedResponse,
    SessionStartEvent,
    SummarizeOlder,
    ToolCall,
    TrimToolResults,
    UserMessage,
    estimate_request,
    tool,
)
from agentloop.temporal import start_session

from .app import CompactingWorkflow, EveryFewMessages
from .conftest import Temporal
from .helpers import drive_by_hand, encoded, run_in_process, serving, session_id

STEPS = 14
WINDOW = 3000
LIMITS = Limits(context_tokens=WINDOW)


@tool
def fetch(n: int) -> str:
    """Fetch document n."""
    return f"doc {n} " + "x" * 1200


def answer(request: ModelRequest) -> Any:
    """Calls ``fetch`` each step until ``STEPS``; summarises when asked."""
    tokens = estimate_request(request.messages, request.system, request.tools)
    if request.purpose == "compaction":
        return ScriptedResponse.text(f"s{request.step}", "earlier: docs read")
    if request.step >= STEPS:
        return ScriptedResponse.text(f"r{request.step}", f"done at {tokens}")
    call = ToolCall(f"c{request.step}", "fetch", {"n": request.step})
    return ScriptedResponse.tool_calls(f"r{request.step}", call)


@pytest.mark.parametrize(
    "policy", [SummarizeOlder(), TrimToolResults(keep_last=2, head=50, tail=50)], ids=repr
)
def test_a_compacting_session_runs_as_in_process(temporal: Temporal, policy: Any) -> None:
    model = FunctionModel(answer)

    async def scenario() -> Any:
        async with serving(temporal, model=model, tools=[fetch]) as start:
            session = await start(
                [UserMessage("u1", "read")],
                max_steps=STEPS,
                limits=LIMITS,
                compaction=policy,
            )
            return await session.result(), await session.log()

    result, log = temporal.run(scenario())
    assert result.status == "completed" and result.steps == STEPS
    start = log[0]
    assert type(start) is SessionStartEvent and start.compaction == policy.spec()
    compactions = [e for e in log if type(e) is ContextCompactedEvent]
    assert compactions
    summaries = [r for r in model.requests if r.purpose == "compaction"]
    if type(policy) is SummarizeOlder:
        assert len(summaries) == len(compactions)
        assert all(r.id == f"compaction-{r.step:03d}" for r in summaries)
    else:
        assert not summaries and all(e.how == "trim" for e in compactions)
    # Every request the activities sent fits the window.
    assert all(estimate_request(r.messages, r.system, r.tools) <= WINDOW for r in model.requests)
    assert drive_by_hand(log) == encoded(log)
    in_process_result, in_process = run_in_process(log, model=FunctionModel(answer), tools=[fetch])
    assert in_process == encoded(log)
    assert in_process_result == result


def test_a_policy_of_ones_own_comes_from_the_workflow_class(temporal: Temporal) -> None:
    model = FunctionModel(answer)

    async def scenario() -> Any:
        async with serving(
            temporal, model=model, tools=[fetch], workflows=[CompactingWorkflow]
        ) as start:
            session = await start(
                [UserMessage("u1", "read")],
                max_steps=STEPS,
                limits=LIMITS,
                workflow="agentloop-compacting",
            )
            return await session.result(), await session.log()

    result, log = temporal.run(scenario())
    assert result.status == "completed"
    assert log[0].compaction == {"policy": "every_few_messages"}
    summaries = [r for r in model.requests if r.purpose == "compaction"]
    assert summaries and all(r.messages[-1].content == "summarise" for r in summaries)
    assert drive_by_hand(log, compaction=EveryFewMessages()) == encoded(log)
    in_process_result, in_process = run_in_process(
        log, model=FunctionModel(answer), tools=[fetch], compaction=EveryFewMessages()
    )
    assert in_process == encoded(log)
    assert in_process_result == result


def test_a_policy_that_cannot_travel_is_refused_before_starting(temporal: Temporal) -> None:
    async def scenario() -> None:
        messages = [UserMessage("u1", "read")]
        with pytest.raises(ValueError, match="needs a context window"):
            await start_session(
                temporal.client, session_id(), messages, task_queue="q", compaction=SummarizeOlder()
            )
        with pytest.raises(ValueError, match="not a built-in one"):
            await start_session(
                temporal.client,
                session_id(),
                messages,
                task_queue="q",
                limits=LIMITS,
                compaction=EveryFewMessages(),
            )

    temporal.run(scenario())
