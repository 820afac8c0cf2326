"""Pauses and the budget (DESIGN §10): the loop's part that waits for ``Resume``.

A pause moves the machine to IDLE and yields ``Pause``; only ``Resume`` (or
``Cancel``) answers it. Budget limits are soft: reaching one emits budget.warn and
pauses with reason ``budget_exceeded:<limit>``; resuming resets the counters (and
may bring a new :class:`~agentloop.Budget`). The wall clock is the caller's: it
only moves with replies' ``at``, so it is checked after each reply that can
advance it. session.resume is recorded after the resume was applied, so
``state_at()`` at that event shows the resumed loop.

:class:`Pauses` is one of :class:`~agentloop.AgentLoop`'s delegates: it shares the
loop's :class:`~agentloop._run.Run` and asks through the loop's ``_ask``.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import Any

import msgspec

from ._budget import Budget, BudgetUsage
from ._copy import copy_json
from ._events import BudgetWarnEvent, EventLog, SessionPauseEvent, SessionResumeEvent
from ._protocol import Effect, Pause, Reply, Resume
from ._run import Run, _Misuse, misuse, observe
from ._state import RESUME_INPUT, Input
from ._text import decision_problem

__all__ = ["Pauses", "budget_usage"]

#: ``AgentLoop._ask``: yield an effect, return the checked reply.
Ask = Callable[[Effect], Generator[Effect, Any, Reply]]


def budget_usage(run: Run) -> BudgetUsage:
    """What ``run`` used since it started or was last resumed from a budget pause."""
    wall = 0.0
    if run.now is not None and run.wall_start is not None:
        wall = run.now - run.wall_start
    budget = run.budget
    if budget is None or not budget.limits_tokens:
        return BudgetUsage(turns=run.turns, tool_calls=run.tool_calls, wall_seconds=wall)
    used, mark = run.usage, run.usage_mark
    return BudgetUsage(
        turns=run.turns,
        tool_calls=run.tool_calls,
        wall_seconds=wall,
        input_tokens=used.input_tokens - mark.input_tokens,
        output_tokens=used.output_tokens - mark.output_tokens,
    )


class Pauses:
    """Pause the run (approval, hook, budget) and apply the ``Resume``."""

    __slots__ = ("_ask", "_hooks", "_log", "_run")

    def __init__(
        self, run: Run, log: EventLog, hooks: dict[str, tuple[Any, ...]], ask: Ask
    ) -> None:
        self._run = run
        self._log = log
        self._hooks = hooks
        self._ask = ask

    def wall_spent(self) -> bool:
        """Whether the wall-clock budget is used up (then: ``budget_pause("wall_clock")``).

        A plain test, not a generator, so that the common case (no budget) costs a
        call, not a generator's creation, wherever the clock may have moved.
        """
        run = self._run
        budget = run.budget
        return (
            budget is not None
            and budget.max_wall_seconds is not None
            and run.now is not None
            and run.wall_start is not None
            and run.now - run.wall_start >= budget.max_wall_seconds
        )

    def tool_budget_spent(self) -> bool:
        """Whether the tool-call budget is used up (then: ``budget_pause("tool_calls")``)."""
        run = self._run
        budget = run.budget
        return (
            budget is not None
            and budget.max_tool_calls is not None
            and run.tool_calls >= budget.max_tool_calls
        )

    def tokens_limit(self, budget: Budget) -> str | None:
        """The token limit the run has reached (``input_tokens``, ...), or ``None``."""
        usage = budget_usage(self._run)
        total = usage.input_tokens + usage.output_tokens
        if budget.max_input_tokens is not None and usage.input_tokens >= budget.max_input_tokens:
            return "input_tokens"
        if budget.max_output_tokens is not None and usage.output_tokens >= budget.max_output_tokens:
            return "output_tokens"
        if budget.max_total_tokens is not None and total >= budget.max_total_tokens:
            return "total_tokens"
        return None

    def budget_pause(self, limit: str) -> Generator[Effect, Any, None]:
        """Warn (``on_budget_exceeded``, budget.warn) and pause for ``limit``."""
        run = self._run
        budget = run.budget
        assert budget is not None
        usage = budget_usage(run)
        used = msgspec.structs.asdict(usage)
        if not budget.limits_tokens:  # the payload logs have always held
            del used["input_tokens"], used["output_tokens"]
        if "on_budget_exceeded" in self._hooks:
            observe(
                self._hooks,
                "on_budget_exceeded",
                {"limit": limit, "usage": dict(used), "budget": msgspec.structs.asdict(budget)},
            )
        log = self._log
        log.append(
            BudgetWarnEvent(
                sequence=log.next_sequence(),
                at=run.now,
                step=run.step,
                limit=limit,
                usage=usage,
                budget=budget,
            )
        )
        yield from self.pause(
            f"budget_exceeded:{limit}",
            {"limit": limit, "usage": used},
            reset_counters=True,
        )

    def pause(
        self, reason: str, payload: Any, *, reset_counters: bool = False, decision: bool = False
    ) -> Generator[Effect, Any, Resume]:
        """Yield ``Pause``; on ``Resume`` apply it, then record it in ``session.resume``.

        Resuming from a budget pause resets the counters (turns, tool calls, the
        wall-clock start); a ``Resume.budget`` replaces the limits either way. With
        ``decision`` (an approval), the payload must say ``approved``: a Resume that
        does not is misuse, recorded once, in run.finished (never in session.resume).
        """
        run, log = self._run, self._log
        log.append(
            SessionPauseEvent(
                sequence=log.next_sequence(),
                at=run.now,
                step=run.step,
                reason=reason,
                payload=payload,
            )
        )
        if "on_pause" in self._hooks:
            observe(self._hooks, "on_pause", {"reason": reason, "payload": copy_json(payload)})
        resume_to = run.state
        run.set(Input.PAUSE)
        run.pause_reason = reason
        effect = Pause(reason, copy_json(payload))  # the caller may edit its copy
        reply = yield from self._ask(effect)
        if type(reply) is not Resume:
            raise misuse(reply, effect, "Resume or Cancel")
        if decision:
            problem = decision_problem(reason, reply.payload)
            if problem is not None:
                raise _Misuse(problem, reply)
        run.pause_reason = None
        if reply.budget is not None:
            run.budget = reply.budget
        if reset_counters:
            run.turns = 0
            run.tool_calls = 0
            run.usage_mark = run.usage
            run.wall_start = run.now
        run.set(RESUME_INPUT[resume_to])
        log.append(
            SessionResumeEvent(sequence=log.next_sequence(), at=run.now, step=run.step, reply=reply)
        )
        return reply
