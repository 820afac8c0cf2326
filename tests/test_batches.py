"""Parallel tool batches in the engine (DESIGN §18): ``agent_loop(..., parallel_tools=True)``."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentloop import (
    SKIP,
    AssistantMessage,
    Budget,
    CallerProtocolError,
    Cancel,
    HookRegistry,
    ModelRequest,
    Pause,
    PauseRequest,
    Resume,
    State,
    ToolBatch,
    ToolCall,
    ToolRequest,
    ToolResult,
    ToolResultMessage,
    ToolSpec,
    UserMessage,
    agent_loop,
    encode_event,
    tool,
    validate_transcript,
)
from replay import replay, resume
from tests.helpers import check_log, examples, response, types

LOOKUP = ToolSpec("lookup", "Look a word up.", {"type": "object"})
WRITE = ToolSpec("write", "Write a file.", {"type": "object"}, sequential=True)
DELETE = ToolSpec("delete", "Delete a file.", {"type": "object"}, requires_approval=True)
TOOLS = [LOOKUP, WRITE, DELETE]
USER = UserMessage("u1", "go")


def calls(*names: str) -> tuple[ToolCall, ...]:
    return tuple(ToolCall(f"c{i}", name, {"n": i}) for i, name in enumerate(names, 1))


def start(*names: str, **options: Any) -> tuple[Any, Any]:
    """A parallel loop whose first response asks for ``names``; returns (loop, effect)."""
    options.setdefault("parallel_tools", True)
    loop = agent_loop([USER], tools=TOOLS, **options)
    request = next(loop)
    effect = loop.send(response(request.id, "r1", *calls(*names), at=1.0))
    return loop, effect


def result(call_id: str, content: str | None = None, **options: Any) -> ToolResult:
    return ToolResult(call_id, content if content is not None else f"done {call_id}", **options)


def finish_run(loop: Any) -> Any:
    """Answer the final model request with a text; return the RunResult."""
    effect = loop.pending
    assert type(effect) is ModelRequest
    with pytest.raises(StopIteration) as stop:
        loop.send(response(effect.id, "r-final", "all done"))
    check_log(loop.log.events)
    return stop.value.value


def tool_results(messages: Any) -> list[str]:
    return [m.tool_call_id for m in messages if type(m) is ToolResultMessage]


# --------------------------------------------------------------------------- the batch


def test_calls_go_out_as_one_batch_and_results_come_back_in_any_order() -> None:
    loop, batch = start("lookup", "lookup", "lookup")
    assert type(batch) is ToolBatch and batch.step == 1
    assert [r.call.id for r in batch.requests] == ["c1", "c2", "c3"]
    assert all(type(r) is ToolRequest and r.step == 1 for r in batch.requests)
    assert loop.state is State.AWAITING_BATCH and loop.pending is batch
    assert loop.send(result("c3", at=2.0)) is batch  # the same batch until the last
    assert loop.state is State.AWAITING_BATCH
    assert loop.send(result("c1", at=3.0)) is batch
    request = loop.send(result("c2", at=4.0))
    assert type(request) is ModelRequest
    # the transcript is in source order, whatever the arrival order
    assert tool_results(request.messages) == ["c1", "c2", "c3"]
    # ... while the log records each result on arrival
    events = loop.log.events
    recorded = [(e.type, e.message.tool_call_id) for e in events if e.type == "tool.result"]
    assert recorded == [("tool.result", "c3"), ("tool.result", "c1"), ("tool.result", "c2")]
    assert types(loop)[-8:] == [
        "tool.call",
        "tool.call",
        "tool.call",
        "tool.result",
        "tool.result",
        "tool.result",
        "step.end",
        "step.start",
    ]
    run = finish_run(loop)
    assert run.status == "completed"
    validate_transcript(run.messages)


def test_the_batch_holds_copies_of_the_calls() -> None:
    loop, batch = start("lookup")
    batch.requests[0].call.arguments["n"] = "changed by the tool"
    loop.send(result("c1"))
    assert loop.messages[1].content[0].arguments == {"n": 1}


def test_parallel_tools_is_recorded_only_when_set() -> None:
    loop, _ = start("lookup", parallel_tools=False)
    assert b"parallel_tools" not in encode_event(loop.log[0])
    loop, _ = start("lookup")
    assert b'"parallel_tools":true' in encode_event(loop.log[0])


def test_parallel_tools_must_be_a_bool() -> None:
    with pytest.raises(TypeError, match="parallel_tools must be a bool, got 1"):
        agent_loop([USER], tools=TOOLS, parallel_tools=1)  # type: ignore[arg-type]


def test_sequential_must_be_a_bool_and_tool_takes_it() -> None:
    with pytest.raises(TypeError, match=r"ToolSpec\.sequential must be a bool"):
        ToolSpec("x", sequential="yes")  # type: ignore[arg-type]

    @tool(sequential=True)
    def save(text: str) -> str:
        """Save it."""
        return text

    assert save.spec.sequential and not save.spec.requires_approval
    assert b"sequential" not in msgspec.json.encode(LOOKUP)


def test_without_parallel_tools_the_protocol_is_one_request_at_a_time() -> None:
    _loop, effect = start("lookup", "lookup", parallel_tools=False)
    assert type(effect) is ToolRequest and effect.call.id == "c1"


# --------------------------------------------------------------------------- sequential tools


def test_a_sequential_tool_runs_alone_in_its_place() -> None:
    loop, effect = start("lookup", "write", "lookup", "lookup")
    seen: list[Any] = []
    while type(effect) is not ModelRequest:
        seen.append(effect)
        if type(effect) is ToolRequest:
            effect = loop.send(result(effect.call.id))
        else:
            for request in reversed(effect.requests):
                effect = loop.send(result(request.call.id))
    shapes = [
        (type(e).__name__, [r.call.id for r in e.requests] if type(e) is ToolBatch else e.call.id)
        for e in seen
    ]
    assert shapes == [("ToolBatch", ["c1"]), ("ToolRequest", "c2"), ("ToolBatch", ["c3", "c4"])]
    assert tool_results(effect.messages) == ["c1", "c2", "c3", "c4"]
    # the first batch is complete (and in the transcript) before the sequential call
    tool_calls = [e.call.id for e in loop.log if e.type == "tool.call"]
    assert tool_calls == ["c1", "c2", "c3", "c4"]


# --------------------------------------------------------------------------- loop-made results


def test_loop_made_errors_are_recorded_at_once_and_kept_in_source_order() -> None:
    loop, batch = start("lookup", "nope", "lookup")
    assert [r.call.id for r in batch.requests] == ["c1", "c3"]
    before = types(loop)
    assert before[-4:] == ["tool.call", "tool.call", "tool.error", "tool.call"]
    loop.send(result("c3"))
    request = loop.send(result("c1"))
    assert tool_results(request.messages) == ["c1", "c2", "c3"]
    assert request.messages[3].is_error and "unknown tool 'nope'" in request.messages[3].content


def test_a_step_of_loop_made_errors_yields_no_batch() -> None:
    _loop, effect = start("nope", "nope")
    assert type(effect) is ModelRequest
    assert tool_results(effect.messages) == ["c1", "c2"]


def test_truncated_calls_get_errors_as_in_the_sequential_loop() -> None:
    loop = agent_loop([USER], tools=TOOLS, parallel_tools=True)
    request = next(loop)
    effect = loop.send(response(request.id, "r1", *calls("lookup", "lookup"), stop="length"))
    assert type(effect) is ModelRequest
    assert [m.content for m in effect.messages[2:]] == ["truncated; re-issue the call"] * 2


# --------------------------------------------------------------------------- approval and hooks


def test_approval_pauses_come_one_by_one_before_the_batch() -> None:
    loop, effect = start("lookup", "delete", "delete", "lookup")
    assert type(effect) is Pause and effect.payload["call"]["id"] == "c2"
    assert loop.state is State.IDLE
    effect = loop.send(Resume({"approved": True}))
    assert type(effect) is Pause and effect.payload["call"]["id"] == "c3"
    batch = loop.send(Resume({"approved": False, "message": "not that one"}))
    assert type(batch) is ToolBatch
    assert [r.call.id for r in batch.requests] == ["c1", "c2", "c4"]
    for call_id in ("c4", "c2", "c1"):
        effect = loop.send(result(call_id))
    assert type(effect) is ModelRequest
    assert tool_results(effect.messages) == ["c1", "c2", "c3", "c4"]
    assert effect.messages[4].content == "not that one"


def test_hooks_run_before_in_source_order_and_after_on_arrival() -> None:
    seen: list[tuple[str, str]] = []

    def before(payload: dict[str, Any]) -> object:
        seen.append(("before", payload["tool_call_id"]))
        return SKIP if payload["tool_call_id"] == "c2" else None

    def after(payload: dict[str, Any]) -> None:
        seen.append(("after", payload["tool_call_id"]))
        payload["content"] = payload["content"].upper()

    hooks = HookRegistry({"before_tool_call": before, "after_tool_call": after})
    loop, batch = start("lookup", "lookup", "lookup", hooks=hooks)
    assert [r.call.id for r in batch.requests] == ["c1", "c3"]
    loop.send(result("c3"))
    request = loop.send(result("c1"))
    assert seen == [
        ("before", "c1"),
        ("before", "c2"),
        ("after", "c2"),  # the loop's own result ("skipped") is recorded at once
        ("before", "c3"),
        ("after", "c3"),
        ("after", "c1"),
    ]
    assert [m.content for m in request.messages[2:]] == ["DONE C1", "SKIPPED", "DONE C3"]


def test_a_hook_pause_before_the_batch_keeps_earlier_loop_made_results() -> None:
    def before(payload: dict[str, Any]) -> object:
        return PauseRequest("review") if payload["tool_call_id"] == "c3" else None

    hooks = HookRegistry({"before_tool_call": before})
    loop, effect = start("nope", "lookup", "lookup", hooks=hooks)
    assert type(effect) is Pause and effect.reason == "review"
    with pytest.raises(StopIteration) as stop:
        loop.send(Cancel("stop"))
    run = stop.value.value
    assert run.status == "cancelled"
    assert tool_results(run.messages) == ["c1"]  # the loop's own error; no invented result
    assert [e.call.id for e in loop.log if e.type == "tool.call"] == ["c1", "c2"]


def test_a_failing_after_hook_in_a_batch_fails_the_run() -> None:
    def after(payload: dict[str, Any]) -> None:
        if payload["tool_call_id"] == "c2":
            raise RuntimeError("broken hook")

    loop, _batch = start("lookup", "lookup", hooks=HookRegistry({"after_tool_call": after}))
    loop.send(result("c1"))
    with pytest.raises(StopIteration) as stop:
        loop.send(result("c2"))
    run = stop.value.value
    assert run.status == "failed" and run.error.code == "HOOK_ERROR"
    assert tool_results(run.messages) == ["c1"]


# --------------------------------------------------------------------------- budget


def walk(loop: Any, effect: Any) -> list[str]:
    """Answer everything (results last-first, resumes approving); name each effect."""
    names = []
    while type(effect) is not ModelRequest:
        if type(effect) is ToolBatch:
            names.append("batch(" + ",".join(r.call.id for r in effect.requests) + ")")
            for request in reversed(effect.requests):
                effect = loop.send(result(request.call.id))
        elif type(effect) is ToolRequest:
            names.append(f"request({effect.call.id})")
            effect = loop.send(result(effect.call.id))
        else:
            names.append(f"pause({effect.reason})")
            effect = loop.send(Resume({"approved": True}))
    return names


def test_the_tool_call_budget_cuts_a_batch_where_the_sequential_loop_pauses() -> None:
    budget = Budget(max_tool_calls=2)
    loop, effect = start("lookup", "lookup", "lookup", "lookup", "lookup", budget=budget)
    assert walk(loop, effect) == [
        "batch(c1,c2)",
        "pause(budget_exceeded:tool_calls)",
        "batch(c3,c4)",
        "pause(budget_exceeded:tool_calls)",
        "batch(c5)",
    ]
    sequential, effect = start(*["lookup"] * 5, budget=budget, parallel_tools=False)
    walk(sequential, effect)

    def shape(events: Any) -> list[str]:
        return [e.type for e in events if e.type not in ("tool.call", "tool.result")]

    # the pauses come at the same places between the results
    assert shape(loop.log) == shape(sequential.log)
    assert loop.messages == sequential.messages


def test_a_budget_pause_after_a_batch_keeps_its_results_on_cancel() -> None:
    loop, _batch = start("lookup", "lookup", "lookup", budget=Budget(max_tool_calls=2))
    loop.send(result("c2"))
    pause = loop.send(result("c1"))
    assert type(pause) is Pause
    assert tool_results(loop.messages) == ["c1", "c2"]
    with pytest.raises(StopIteration) as stop:
        loop.send(Cancel())
    assert tool_results(stop.value.value.messages) == ["c1", "c2"]


def test_the_wall_clock_is_checked_when_the_batch_is_complete() -> None:
    loop, batch = start("lookup", "lookup", budget=Budget(max_wall_seconds=5), started_at=0)
    assert loop.send(result("c1", at=10.0)) is batch  # no pause while a batch is out
    pause = loop.send(result("c2", at=11.0))
    assert type(pause) is Pause and pause.reason == "budget_exceeded:wall_clock"


# --------------------------------------------------------------------------- cancel and misuse


def test_cancel_mid_batch_keeps_the_results_so_far_in_source_order() -> None:
    loop, _batch = start("lookup", "lookup", "lookup", "lookup")
    loop.send(result("c4"))
    loop.send(result("c2"))
    with pytest.raises(StopIteration) as stop:
        loop.send(Cancel("user stop"))
    run = stop.value.value
    assert (run.status, run.reason) == ("cancelled", "user stop")
    assert type(run.messages[1]) is AssistantMessage
    assert tool_results(run.messages) == ["c2", "c4"]  # none invented for c1, c3
    check_log(loop.log.events)
    assert replay(loop.log.events).result == run


def test_close_mid_batch_is_a_cancel() -> None:
    loop, _batch = start("lookup", "lookup")
    loop.send(result("c2"))
    loop.close()
    assert loop.result.reason == "closed"
    assert tool_results(loop.result.messages) == ["c2"]


@pytest.mark.parametrize(
    ("reply", "message"),
    [
        (result("c1"), "a second ToolResult for call 'c1' of the pending ToolBatch; "),
        (result("c9"), "ToolResult for call 'c9', which is not in the pending ToolBatch "),
        (Resume(), "got Resume while the ToolBatch of calls 'c1', 'c2', 'c3' was pending"),
    ],
)
def test_a_result_that_does_not_fit_the_batch_is_caller_misuse(reply: Any, message: str) -> None:
    loop, _batch = start("lookup", "lookup", "lookup")
    loop.send(result("c1"))
    with pytest.raises(CallerProtocolError, match=r"still awaits calls 'c2', 'c3'|was pending"):
        loop.send(reply)
    run = loop.result
    assert run.error.code == "CALLER_PROTOCOL_ERROR" and message in run.error.message
    assert tool_results(run.messages) == ["c1"]
    assert replay(loop.log.events).result == run


# --------------------------------------------------------------------------- replay


def batch_run(order: list[int], n: int = 4, **options: Any) -> Any:
    """Answer an n-call batch in ``order`` (stamped), then finish; return the loop."""
    loop, batch = start(*["lookup"] * n, started_at=0.0, **options)
    for at, index in enumerate(order, 2):
        loop.send(result(batch.requests[index].call.id, f"r{index}", at=float(at)))
    finish_run(loop)
    return loop


@settings(max_examples=examples(60), deadline=None)
@given(order=st.permutations(range(4)))
def test_any_arrival_order_gives_the_same_transcript_and_replays_byte_for_byte(
    order: list[int],
) -> None:
    loop = batch_run(order)
    reference = batch_run([0, 1, 2, 3])
    assert loop.result.messages == reference.result.messages
    replayed = replay(loop.log.events)
    assert [encode_event(e) for e in replayed.events] == [encode_event(e) for e in loop.log]
    assert replayed.result == loop.result


def test_resume_mid_batch_waits_for_the_calls_not_yet_answered() -> None:
    loop, batch = start("lookup", "lookup", "lookup")
    loop.send(result("c2"))
    events = list(loop.log.events)  # the process died here
    loop.close()
    live, effect = resume(events)
    assert effect == batch and live.state is State.AWAITING_BATCH
    answered = {e.message.tool_call_id for e in live.log if e.type == "tool.result"}
    assert answered == {"c2"}
    live.send(result("c3"))
    request = live.send(result("c1"))
    assert tool_results(request.messages) == ["c1", "c2", "c3"]
    run = finish_run(live)
    assert replay(live.log.events).result == run


def test_replay_reports_a_log_that_stops_while_a_batch_waits() -> None:
    from replay import ReplayDivergence

    loop = batch_run([1, 0], n=2)
    events = list(loop.log.events)
    cut = next(i for i, e in enumerate(events) if e.type == "tool.result")
    # drop the second result: the loop still waits for c1 where the log goes on
    broken = [*events[: cut + 1], *events[cut + 2 :]]
    with pytest.raises(ReplayDivergence):
        replay(broken)
    waiting = replay(events[: cut + 1])
    assert type(waiting.pending) is ToolBatch and waiting.result is None
