"""The options of :func:`agentloop.agent_loop`, checked eagerly (DESIGN §5).

A bad option raises ``ValueError``/``TypeError`` before any generator exists.
"""

from __future__ import annotations

from collections.abc import Iterable

from ._budget import Budget
from ._events import EventLog
from ._hooks import HookRegistry
from ._json import finite_number, int_text, surrogate_problem, value_text
from ._limits import DEFAULT_LIMITS, Limits, limit_name
from ._rules import rules_problem
from ._toolspec import ToolSpec

__all__ = ["check_options", "tool_specs"]


def check_options(
    *,
    max_steps: object,
    request_sequence_start: object,
    system: object,
    budget: object,
    hooks: object,
    log: object,
    started_at: object,
    rules: object,
    limits: object,
) -> Limits:
    """Check ``agent_loop``'s options; return the run's :class:`Limits` (the
    defaults' own object when they equal the defaults: the run records none)."""
    problem = rules_problem(rules)
    if problem is not None:
        raise ValueError(problem)
    if limits is None:
        limits = DEFAULT_LIMITS
    elif type(limits) is not Limits:
        raise TypeError(f"limits must be a Limits or None, got {type(limits).__name__}")
    elif limits == DEFAULT_LIMITS:
        limits = DEFAULT_LIMITS  # the run records no limits: compared by identity
    steps_cap = limits.agent_steps
    if type(max_steps) is not int or not 1 <= max_steps <= steps_cap:
        raise ValueError(
            f"max_steps must be an int from 1 to {limit_name(limits, 'agent_steps')}, "
            f"got {value_text(max_steps)}"
        )
    if type(request_sequence_start) is not int or request_sequence_start < 0:
        raise ValueError(
            "request_sequence_start must be a non-negative int, "
            f"got {value_text(request_sequence_start)}"
        )
    if request_sequence_start + max_steps > steps_cap:
        first, last = request_sequence_start + 1, request_sequence_start + max_steps
        raise ValueError(
            f"request numbers {int_text(first)}..{int_text(last)} go past "
            f"{limit_name(limits, 'agent_steps')}; lower max_steps or request_sequence_start"
        )
    if system is not None:
        if type(system) is not str:
            raise TypeError(f"system must be a str or None, got {type(system).__name__}")
        problem = surrogate_problem(system, "system")
        if problem is not None:
            raise ValueError(problem)
    if budget is not None and type(budget) is not Budget:
        raise TypeError(f"budget must be a Budget or None, got {type(budget).__name__}")
    if hooks is not None and not isinstance(hooks, HookRegistry):
        raise TypeError(f"hooks must be a HookRegistry or None, got {type(hooks).__name__}")
    if log is not None:
        if not isinstance(log, EventLog):
            raise TypeError(f"log must be an EventLog or None, got {type(log).__name__}")
        if len(log):
            raise ValueError("log must be empty: one EventLog records one run")
    if started_at is not None and not finite_number(started_at):
        raise ValueError(
            f"started_at must be a finite number or None, got {value_text(started_at)}"
        )
    return limits


def tool_specs(tools: object) -> tuple[ToolSpec, ...]:
    specs_method = getattr(tools, "specs", None)
    if callable(specs_method):
        items: Iterable[object] = specs_method()
    elif isinstance(tools, (list, tuple)):
        items = tools
    else:
        raise TypeError(
            "tools must be a ToolRegistry or a list/tuple of ToolSpec or Tool, "
            f"got {type(tools).__name__}"
        )
    specs: list[ToolSpec] = []
    names: set[str] = set()
    for index, item in enumerate(items):
        spec = item if type(item) is ToolSpec else getattr(item, "spec", None)
        if type(spec) is not ToolSpec:
            raise TypeError(f"tools[{index}] is not a ToolSpec or Tool: {item!r}")
        if spec.name in names:
            raise ValueError(f"tools: duplicate tool name {spec.name!r}")
        names.add(spec.name)
        specs.append(spec)  # frozen, and owns a copy of its schema: shared as it is
    return tuple(specs)
