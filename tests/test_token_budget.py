"""Token budgets (DESIGN §19): pause like the other budget limits, counted from usage."""

from __future__ import annotations

import pytest

from agentloop import (
    BUDGET_LIMITS,
    Budget,
    BudgetUsage,
    BudgetWarnEvent,
    ModelFailure,
    ModelRequest,
    Pause,
    Resume,
    RunResult,
    ToolResult,
    Usage,
    UserMessage,
    agent_loop,
    encode_event,
)
from replay import replay, resume

from .helpers import ECHO, call, response


def _loop(budget: Budget) -> object:
    loop = agent_loop([UserMessage("u1", "hi")], tools=[ECHO], budget=budget, started_at=1.0)
    next(loop)
    return loop


def _tool_step(loop: object, n: int, usage: Usage) -> object:
    loop.send(response(f"request-{n:03d}", f"r{n}", call("echo", f"c{n}"), usage=usage))  # type: ignore[attr-defined]
    return loop.send(ToolResult(f"c{n}", "ok"))  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("budget", "limit"),
    [
        (Budget(max_input_tokens=150), "input_tokens"),
        (Budget(max_output_tokens=15), "output_tokens"),
        (Budget(max_total_tokens=160), "total_tokens"),
    ],
)
def test_a_token_limit_pauses_before_the_next_request(budget: Budget, limit: str) -> None:
    assert limit in BUDGET_LIMITS
    loop = _loop(budget)
    effect = _tool_step(loop, 1, Usage(100, 10))
    assert type(effect) is ModelRequest  # 100 in, 10 out: under every limit
    effect = _tool_step(loop, 2, Usage(100, 10))
    assert effect == Pause(
        f"budget_exceeded:{limit}",
        {
            "limit": limit,
            "usage": {
                "turns": 2,
                "tool_calls": 2,
                "wall_seconds": 0.0,
                "input_tokens": 200,
                "output_tokens": 20,
            },
        },
    )
    warn = [e for e in loop.log if type(e) is BudgetWarnEvent][-1]  # type: ignore[attr-defined]
    assert warn.usage == BudgetUsage(turns=2, tool_calls=2, input_tokens=200, output_tokens=20)
    # Resume resets the count; a new budget may raise the limit.
    request = loop.send(Resume())  # type: ignore[attr-defined]
    assert type(request) is ModelRequest and request.id == "request-003"
    assert loop.budget_usage.input_tokens == 0  # type: ignore[attr-defined]
    with pytest.raises(StopIteration) as stop:
        loop.send(response("request-003", "r3", "done", usage=Usage(5, 1)))  # type: ignore[attr-defined]
    result: RunResult = stop.value.value
    assert result.status == "completed" and result.usage == Usage(205, 21)
    assert replay(loop.log).result == result  # type: ignore[attr-defined]


def test_a_model_without_usage_uses_no_tokens() -> None:
    loop = _loop(Budget(max_total_tokens=1))
    for n in range(1, 4):
        assert type(_tool_step(loop, n, None)) is ModelRequest  # type: ignore[arg-type]


def test_resume_with_a_new_budget_and_resume_from_the_log() -> None:
    loop = _loop(Budget(max_output_tokens=5))
    pause = _tool_step(loop, 1, Usage(1, 9))
    assert type(pause) is Pause and pause.reason == "budget_exceeded:output_tokens"
    live, effect = resume(loop.log)  # type: ignore[attr-defined]
    assert effect == pause
    request = live.send(Resume(budget=Budget(max_output_tokens=100)))
    assert type(request) is ModelRequest and live.budget == Budget(max_output_tokens=100)


def test_failed_attempts_count() -> None:
    loop = _loop(Budget(max_input_tokens=10))
    with pytest.raises(StopIteration):
        loop.send(ModelFailure("request-001", "down", usage=Usage(50, 0)))  # type: ignore[attr-defined]
    assert loop.budget_usage.input_tokens == 50  # type: ignore[attr-defined]


def test_a_budget_without_token_limits_reports_no_tokens() -> None:
    loop = _loop(Budget(max_turns=1))
    pause = _tool_step(loop, 1, Usage(100, 10))
    assert pause == Pause(
        "budget_exceeded:turns",
        {"limit": "turns", "usage": {"turns": 1, "tool_calls": 1, "wall_seconds": 0.0}},
    )
    warn = [e for e in loop.log if type(e) is BudgetWarnEvent][-1]  # type: ignore[attr-defined]
    assert b"tokens" not in encode_event(warn)


@pytest.mark.parametrize("name", ["max_input_tokens", "max_output_tokens", "max_total_tokens"])
@pytest.mark.parametrize("value", [0, -1, 1.5, True, "1"])
def test_token_limits_are_positive_ints(name: str, value: object) -> None:
    with pytest.raises(ValueError, match=rf"Budget\.{name} must be a positive int or None"):
        Budget(**{name: value})  # type: ignore[arg-type]
