"""The budget envelope: soft limits that pause, resume and cancel (DESIGN §6, §10).

Driven by hand (``next``/``send``) so every pause point, effect and event can be
checked; the same three scenarios (one per limit) feed several tests.
"""

from __future__ import annotations

import functools
import itertools
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentloop import (
    HOOK_TOPICS,
    AgentLoop,
    Budget,
    BudgetUsage,
    Cancel,
    Effect,
    EventLog,
    HookRegistry,
    ModelChunk,
    ModelRequest,
    Pause,
    Reply,
    Resume,
    RunResult,
    ScriptedModel,
    ScriptedResponse,
    State,
    TextBlock,
    ToolCall,
    ToolRequest,
    ToolResult,
    ToolResultMessage,
    UserMessage,
    agent_loop,
    close_dangling_calls,
    run,
    tool,
    validate_transcript,
)
from tests.helpers import ADD, ECHO, call, check_log, drive, examples, response

USER = UserMessage("u1", "Sum some numbers.")


TOOLS = [ADD, ECHO]


def traced_loop(budget: Budget | None, **options: Any) -> tuple[AgentLoop, list[str]]:
    """A loop whose hooks (as ``[topic]``) and events (by type) land in one trace."""
    trace: list[str] = []
    hooks = HookRegistry()
    for topic in HOOK_TOPICS:
        hooks.on(topic, functools.partial(lambda topic, payload: trace.append(f"[{topic}]"), topic))
    log = EventLog()
    log.subscribe(lambda event: trace.append(event.type))
    options.setdefault("max_steps", 8)
    loop = agent_loop([USER], tools=TOOLS, budget=budget, hooks=hooks, log=log, **options)
    return loop, trace


def send_all(loop: AgentLoop, replies: list[Reply]) -> Effect:
    """Prime ``loop`` and send ``replies``; return the effect pending after the last."""
    effect = next(loop)
    for reply in replies:
        effect = loop.send(reply)
    return effect


def add(call_id: str) -> ToolCall:
    return call("add", call_id, left=1, right=2)


def result_of(call_id: str, at: float | None = None) -> ToolResult:
    return ToolResult(call_id, "3", at=at)


class Scenario(msgspec.Struct):
    """A run that reaches a budget pause, and what must happen around it."""

    budget: Budget
    options: dict[str, Any]
    before: list[Reply]  # the replies that lead to the pause
    limit: str
    usage: BudgetUsage  # at the pause
    trace_before: list[str]  # the trace entries just before the pause's own
    resumed: tuple[Any, ...]  # the effect right after Resume(), as effect_key() gives it
    state_after: State  # the loop's state after Resume()
    trace_after: list[str]  # the trace entries right after the pause's own
    rest: list[Reply]  # replies that finish the run after the resume


PAUSE_TRACE = ["[on_budget_exceeded]", "budget.warn", "session.pause", "[on_pause]"]

SCENARIOS = {
    # Two steps allowed: the third step pauses before it starts.
    "turns": Scenario(
        budget=Budget(max_turns=2),
        options={},
        before=[
            response("request-001", "r1", add("c1")),
            result_of("c1"),
            response("request-002", "r2", add("c2")),
            result_of("c2"),
        ],
        limit="turns",
        usage=BudgetUsage(turns=2, tool_calls=2, wall_seconds=0.0),
        trace_before=["tool.result", "step.end", "[after_step]"],
        resumed=("model", "request-003", 3),
        state_after=State.PLANNING,
        trace_after=["session.resume", "[before_step]", "step.start", "[before_plan]"],
        rest=[response("request-003", "r3", "done")],
    ),
    # Two calls allowed: the third call of the batch pauses before it starts.
    "tool_calls": Scenario(
        budget=Budget(max_tool_calls=2),
        options={},
        before=[
            response("request-001", "r1", add("c1"), add("c2"), add("c3")),
            result_of("c1"),
            result_of("c2"),
        ],
        limit="tool_calls",
        usage=BudgetUsage(turns=1, tool_calls=2, wall_seconds=0.0),
        trace_before=["tool.call", "[after_tool_call]", "tool.result"],
        resumed=("tool", add("c3"), 1),
        state_after=State.AWAITING_TOOL,
        trace_after=["session.resume", "[before_tool_call]", "tool.call"],
        rest=[result_of("c3"), response("request-002", "r2", "done")],
    ),
    # Ten seconds from started_at=100: the result stamped 111 pauses the batch.
    "wall_clock": Scenario(
        budget=Budget(max_wall_seconds=10),
        options={"started_at": 100},
        before=[
            response("request-001", "r1", add("c1"), add("c2"), at=101),
            result_of("c1", at=111),
        ],
        limit="wall_clock",
        usage=BudgetUsage(turns=1, tool_calls=1, wall_seconds=11.0),
        trace_before=["tool.call", "[after_tool_call]", "tool.result"],
        resumed=("tool", add("c2"), 1),
        state_after=State.AWAITING_TOOL,
        trace_after=["session.resume", "[before_tool_call]", "tool.call"],
        rest=[result_of("c2", at=115), response("request-002", "r2", "done", at=116)],
    ),
}

scenarios = pytest.mark.parametrize("scenario", SCENARIOS.values(), ids=list(SCENARIOS))


def effect_key(effect: Effect) -> tuple[Any, ...]:
    if type(effect) is ModelRequest:
        return ("model", effect.id, effect.step)
    if type(effect) is ToolRequest:
        return ("tool", effect.call, effect.step)
    return ("pause", effect.reason)


def paused(scenario: Scenario) -> tuple[AgentLoop, list[str], Effect]:
    loop, trace = traced_loop(scenario.budget, **scenario.options)
    return loop, trace, send_all(loop, scenario.before)


# --------------------------------------------------------------------------- the pause


@scenarios
def test_each_limit_pauses_at_the_right_point(scenario: Scenario) -> None:
    loop, trace, effect = paused(scenario)
    reason = f"budget_exceeded:{scenario.limit}"
    usage = msgspec.structs.asdict(scenario.usage)
    del usage["input_tokens"], usage["output_tokens"]  # a budget without token limits
    assert effect == Pause(reason, {"limit": scenario.limit, "usage": usage})
    assert loop.state is State.IDLE
    assert loop.pending == effect
    assert loop.budget_usage == scenario.usage
    n = len(scenario.trace_before)
    assert trace[-n - len(PAUSE_TRACE) :] == [*scenario.trace_before, *PAUSE_TRACE]
    warn, pause = loop.log[-2], loop.log[-1]
    assert (warn.type, warn.limit, warn.usage, warn.budget) == (
        "budget.warn",
        scenario.limit,
        scenario.usage,
        scenario.budget,
    )
    assert (pause.type, pause.reason, pause.payload) == ("session.pause", reason, effect.payload)


@scenarios
def test_resume_continues_exactly_where_it_stopped(scenario: Scenario) -> None:
    loop, trace, _ = paused(scenario)
    paused_at = len(trace)
    resume = Resume()
    effect = loop.send(resume)
    assert effect_key(effect) == scenario.resumed
    assert loop.state is scenario.state_after
    assert trace[paused_at:] == scenario.trace_after
    resumed_event = next(e for e in loop.log if e.type == "session.resume")
    assert resumed_event.reply == resume
    # the counters restart from zero; the unit resumed into is already counted
    assert loop.budget_usage == BudgetUsage(
        turns=int(scenario.resumed[0] == "model"),
        tool_calls=int(scenario.resumed[0] == "tool"),
        wall_seconds=0.0,
    )
    assert loop.budget == scenario.budget
    for reply in scenario.rest[:-1]:
        loop.send(reply)
    with pytest.raises(StopIteration) as stop:
        loop.send(scenario.rest[-1])
    result: RunResult = stop.value.value
    assert (result.status, result.reason) == ("completed", "goal_met")
    validate_transcript(result.messages)
    check_log(loop.log.events)
    assert [e.type for e in loop.log].count("session.pause") == 1


@scenarios
def test_cancel_at_the_pause_ends_cancelled_with_the_pause_reason(scenario: Scenario) -> None:
    loop, trace, _ = paused(scenario)
    cancel = Cancel()
    with pytest.raises(StopIteration) as stop:
        loop.send(cancel)
    result: RunResult = stop.value.value
    assert (result.status, result.reason, result.final_text, result.error) == (
        "cancelled",
        f"budget_exceeded:{scenario.limit}",
        None,
        None,
    )
    assert trace[-3:] == ["[on_complete]", "session.complete", "run.finished"]
    assert loop.log[-2].reply == cancel
    assert loop.state is State.DONE
    # Only complete messages: calls of the batch that never started get no result
    # (DESIGN §11); the next run may close them on purpose.
    validate_transcript(close_dangling_calls(result.messages))
    started = [e.call.id for e in loop.log if e.type == "tool.call"]
    answered = [m.tool_call_id for m in result.messages if type(m) is ToolResultMessage]
    assert started == answered
    check_log(loop.log.events)


@scenarios
def test_a_cancel_with_its_own_reason_keeps_it(scenario: Scenario) -> None:
    loop, _, _ = paused(scenario)
    with pytest.raises(StopIteration) as stop:
        loop.send(Cancel("the user went home"))
    assert stop.value.value.reason == "the user went home"


@scenarios
def test_resume_with_a_new_budget_replaces_the_limits_and_resets_the_counters(
    scenario: Scenario,
) -> None:
    loop, _, _ = paused(scenario)
    bigger = Budget(max_turns=50, max_tool_calls=50, max_wall_seconds=1000)
    resume = Resume(payload={"note": "more"}, budget=bigger)
    assert effect_key(loop.send(resume)) == scenario.resumed
    assert loop.budget == bigger
    assert next(e for e in loop.log if e.type == "session.resume").reply == resume
    usage = loop.budget_usage
    # the counters restart from zero; the unit resumed into is already counted
    assert usage == BudgetUsage(
        turns=int(scenario.resumed[0] == "model"),
        tool_calls=int(scenario.resumed[0] == "tool"),
        wall_seconds=0.0,
    )
    for reply in scenario.rest[:-1]:
        loop.send(reply)
    with pytest.raises(StopIteration):
        loop.send(scenario.rest[-1])
    assert [e.type for e in loop.log].count("session.pause") == 1


@scenarios
def test_the_driver_without_on_pause_cancels_with_the_pause_reason(scenario: Scenario) -> None:
    # A ToolSpec has no implementation: the driver runs @tool functions.
    @tool
    def add(left: int, right: int) -> int:
        """Add."""
        return left + right

    script = [
        ScriptedResponse(r.id, r.content, r.stop_reason)
        for r in scenario.before + scenario.rest
        if type(r) is not ToolResult
    ]
    ticks = itertools.count(0.0, 6.0)  # every reply 6 s after the previous one
    result = run(
        [USER],
        model=ScriptedModel(script),
        tools=[add, ECHO],
        budget=scenario.budget,
        clock=lambda: next(ticks),
    )
    assert result.status == "cancelled"
    assert result.reason == (
        f"budget_exceeded:{scenario.limit}: the {scenario.limit} budget was used up and no "
        "on_pause was given: pass on_pause=... to answer it, or use run_durable to park the "
        "session"
    )


# --------------------------------------------------------------------------- counting


def test_resume_without_a_budget_keeps_the_limits_and_pauses_again() -> None:
    loop, _ = traced_loop(Budget(max_tool_calls=1))
    pause = send_all(loop, [response("request-001", "r1", add("c1"), add("c2"), add("c3"))])
    assert type(pause) is ToolRequest  # the first call is within the budget
    effects = [loop.send(result_of("c1"))]
    effects.append(loop.send(Resume()))
    effects.append(loop.send(result_of("c2")))
    effects.append(loop.send(Resume()))
    assert effects == [
        Pause("budget_exceeded:tool_calls", {"limit": "tool_calls", "usage": usage(1, 1)}),
        ToolRequest(add("c2"), 1),
        Pause("budget_exceeded:tool_calls", {"limit": "tool_calls", "usage": usage(0, 1)}),
        ToolRequest(add("c3"), 1),
    ]


def usage(turns: int, tool_calls: int, wall: float = 0.0) -> dict[str, Any]:
    return {"turns": turns, "tool_calls": tool_calls, "wall_seconds": wall}


def test_every_call_counts_including_loop_made_results() -> None:
    # Engine decision: unknown tools (and truncated calls) count as tool calls.
    loop, _ = traced_loop(Budget(max_tool_calls=1))
    effect = send_all(
        loop, [response("request-001", "r1", call("nope", "c1"), add("c2"), add("c3"))]
    )
    assert effect == Pause(
        "budget_exceeded:tool_calls", {"limit": "tool_calls", "usage": usage(1, 1)}
    )
    assert [e.type for e in loop.log][-4:-2] == ["tool.call", "tool.error"]


def test_a_step_that_ends_the_run_is_not_paused() -> None:
    loop, _ = traced_loop(Budget(max_turns=1, max_tool_calls=1))
    _, result = drive(loop, [response("request-001", "r1", "done")])
    assert (result.status, result.reason) == ("completed", "goal_met")
    assert "budget.warn" not in [e.type for e in loop.log]


def test_max_steps_is_the_hard_ceiling_and_wins_over_the_budget() -> None:
    loop, _ = traced_loop(Budget(max_turns=2), max_steps=2)
    _, result = drive(
        loop,
        [
            response("request-001", "r1", add("c1")),
            result_of("c1"),
            response("request-002", "r2", add("c2")),
            result_of("c2"),
        ],
    )
    assert (result.status, result.reason) == ("max_steps", "no_more_steps")
    assert "session.pause" not in [e.type for e in loop.log]


def test_counters_reset_only_at_budget_pauses() -> None:
    # Engine decision: an approval pause leaves the counters alone; a Resume there
    # may still replace the limits.
    spec = msgspec.structs.replace(ECHO, requires_approval=True)
    loop = agent_loop([USER], tools=[spec], budget=Budget(max_tool_calls=3))
    pause = send_all(loop, [response("request-001", "r1", call("echo", "c1"), call("echo", "c2"))])
    assert type(pause) is Pause and pause.reason == "approval"
    assert loop.budget_usage.tool_calls == 1
    loop.send(Resume({"approved": True}, budget=Budget(max_tool_calls=2)))
    assert loop.budget == Budget(max_tool_calls=2)
    assert loop.budget_usage.tool_calls == 1
    loop.send(ToolResult("c1", "x"))
    assert loop.send(Resume({"approved": True})) == ToolRequest(call("echo", "c2"), 1)
    assert loop.budget_usage.tool_calls == 2


# --------------------------------------------------------------------------- the wall clock


def wall_replies(times: list[float | None]) -> list[Reply]:
    """A one-step plan of len(times) calls whose results are stamped ``times``."""
    ids = [f"c{n}" for n in range(1, len(times) + 1)]
    return [
        response("request-001", "r1", *(add(i) for i in ids)),
        *(result_of(i, at=t) for i, t in zip(ids, times, strict=True)),
    ]


def drive_resuming(loop: AgentLoop, replies: list[Reply]) -> list[int]:
    """Send ``replies``, answering every budget pause with ``Resume()``; return how
    many tool results had been received at each pause."""
    pauses: list[int] = []
    effect = next(loop)
    received = 0
    for reply in replies:
        effect = loop.send(reply)
        received += type(reply) is ToolResult
        while type(effect) is Pause:
            pauses.append(received)
            effect = loop.send(Resume())
    return pauses


def test_without_timestamps_the_wall_clock_never_moves() -> None:
    loop = agent_loop([USER], tools=TOOLS, budget=Budget(max_wall_seconds=1e-9))
    assert drive_resuming(loop, wall_replies([None, None, None])) == []
    assert loop.budget_usage.wall_seconds == 0.0


def test_started_at_starts_the_clock_and_a_slow_plan_pauses_before_its_first_call() -> None:
    loop, trace = traced_loop(Budget(max_wall_seconds=10), started_at=0)
    assert len(loop.log) == 0 and next(loop).id == "request-001"
    assert loop.log[0].at == 0.0  # session.start is stamped with started_at
    effect = loop.send(response("request-001", "r1", add("c1"), at=50))
    assert effect == Pause(
        "budget_exceeded:wall_clock", {"limit": "wall_clock", "usage": usage(1, 0, 50.0)}
    )
    assert trace[-5:] == ["plan.commit", *PAUSE_TRACE]
    assert loop.send(Resume(at=60)) == ToolRequest(add("c1"), 1)
    assert loop.budget_usage.wall_seconds == 0.0  # restarted at the resume's time


def test_without_started_at_the_first_timestamp_starts_the_clock() -> None:
    loop = agent_loop([USER], tools=TOOLS, budget=Budget(max_wall_seconds=10))
    next(loop)
    assert loop.send(response("request-001", "r1", add("c1"), at=50)) == ToolRequest(add("c1"), 1)
    assert loop.budget_usage.wall_seconds == 0.0
    assert type(loop.send(result_of("c1", at=60))) is Pause


def test_a_late_final_answer_completes_and_chunks_never_pause() -> None:
    loop = agent_loop([USER], tools=TOOLS, budget=Budget(max_wall_seconds=10), started_at=0)
    request = next(loop)
    assert loop.send(ModelChunk(request.id, TextBlock("done"), at=100)) == request
    with pytest.raises(StopIteration) as stop:
        loop.send(response(request.id, "r1", "done", at=200))
    assert stop.value.value.status == "completed"


def test_same_replies_give_the_same_pauses_and_the_same_log() -> None:
    times: list[float | None] = [3, 9, None, 12, 30, 31]

    def once() -> bytes:
        loop = agent_loop([USER], tools=TOOLS, budget=Budget(max_wall_seconds=8), started_at=1)
        pauses = drive_resuming(loop, wall_replies(times))
        assert pauses == [2, 5]  # 9 - 1 >= 8, then 30 - 9 >= 8 (31 - 30 < 8)
        return msgspec.json.encode(list(loop.log))

    assert once() == once()


def expected_pauses(start: float, limit: float, times: list[float | None]) -> list[int]:
    """The model of DESIGN §10: a pause after each result whose time is ``limit`` or
    more past the start; the resume (no timestamp) restarts the clock there."""
    pauses = []
    now = start
    for index, at in enumerate(times, start=1):
        if at is not None:
            now = at
            if now - start >= limit:
                pauses.append(index)
                start = now
    return pauses


@settings(max_examples=examples(100), deadline=None)
@given(
    start=st.floats(min_value=0, max_value=1000, allow_nan=False),
    limit=st.floats(min_value=0.5, max_value=20, allow_nan=False),
    steps=st.lists(st.one_of(st.none(), st.floats(min_value=0, max_value=15)), max_size=8),
)
def test_wall_clock_pauses_depend_only_on_reply_timestamps(
    start: float, limit: float, steps: list[float | None]
) -> None:
    times: list[float | None] = []
    now = start
    for delta in steps:
        if delta is not None:
            now += delta
        times.append(None if delta is None else now)
    budget = Budget(max_wall_seconds=limit)
    logs = []
    for _ in range(2):
        loop = agent_loop([USER], tools=TOOLS, budget=budget, started_at=start)
        if not times:
            return
        pauses = drive_resuming(loop, wall_replies(times))
        assert pauses == expected_pauses(start, limit, times)
        logs.append(msgspec.json.encode(list(loop.log)))
    assert logs[0] == logs[1]


# --------------------------------------------------------------------------- the Budget struct


@pytest.mark.parametrize(
    "fields",
    [
        {"max_turns": 0},
        {"max_turns": 1.5},
        {"max_turns": True},
        {"max_tool_calls": -1},
        {"max_wall_seconds": 0},
        {"max_wall_seconds": float("inf")},
        {"max_wall_seconds": float("nan")},
        {"max_wall_seconds": "10"},
    ],
)
def test_budget_rejects_non_positive_or_odd_limits(fields: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match=r"Budget\.max_"):
        Budget(**fields)


def test_budget_defaults_to_unlimited_and_stores_seconds_as_float() -> None:
    assert Budget() == Budget(max_turns=None, max_tool_calls=None, max_wall_seconds=None)
    seconds = Budget(max_wall_seconds=5).max_wall_seconds
    assert seconds == 5.0 and type(seconds) is float
    with pytest.raises(TypeError, match=r"^Extra positional arguments provided$"):
        Budget(5)  # type: ignore[misc]
