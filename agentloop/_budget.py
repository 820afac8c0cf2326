"""The budget envelope (DESIGN §10): soft limits that pause the run instead of ending it."""

from __future__ import annotations

import math
from typing import Final

import msgspec

from ._json import finite_number, value_text

__all__ = ["BUDGET_LIMITS", "Budget", "BudgetUsage"]

#: The names used in ``Pause.reason == "budget_exceeded:<name>"``.
BUDGET_LIMITS = (
    "turns",
    "tool_calls",
    "wall_clock",
    "input_tokens",
    "output_tokens",
    "total_tokens",
)


class Budget(msgspec.Struct, frozen=True, omit_defaults=True, kw_only=True):
    """Soft limits for a session; ``None`` means unlimited.

    Attributes:
        max_turns: steps (model requests) before the loop pauses.
        max_tool_calls: tool calls before the loop pauses.
        max_wall_seconds: seconds of the caller's clock (the replies' ``at``) before
            the loop pauses. The engine never reads a clock itself.
        max_input_tokens, max_output_tokens, max_total_tokens: tokens (input,
            output, both) before the loop pauses, counted from the ``usage`` of the
            model's replies (a model that reports none uses none).

    When a limit is reached the loop yields ``Pause(reason="budget_exceeded:<limit>")``;
    ``Resume(budget=...)`` resets the counters (optionally with new limits) and the run
    continues exactly where it stopped. ``max_steps`` stays the hard ceiling.
    """

    max_turns: int | None = None
    max_tool_calls: int | None = None
    max_wall_seconds: float | None = None
    max_input_tokens: int | None = None
    max_output_tokens: int | None = None
    max_total_tokens: int | None = None

    @property
    def limits_tokens(self) -> bool:
        """Whether any token limit is set."""
        return (
            self.max_input_tokens is not None
            or self.max_output_tokens is not None
            or self.max_total_tokens is not None
        )

    def __post_init__(self) -> None:
        for name in (
            "max_turns",
            "max_tool_calls",
            "max_input_tokens",
            "max_output_tokens",
            "max_total_tokens",
        ):
            value = getattr(self, name)
            if value is not None and (type(value) is not int or not 1 <= value < 2**63):
                raise ValueError(
                    f"Budget.{name} must be a positive int or None, got {value_text(value)}"
                )
        wall = self.max_wall_seconds
        if wall is not None:
            if not finite_number(wall) or wall <= 0:
                raise ValueError(
                    "Budget.max_wall_seconds must be a positive finite number or None, "
                    f"got {value_text(wall)}"
                )
            if type(wall) is int:
                # Stored as float so a JSON round trip gives back the same value.
                msgspec.structs.force_setattr(self, "max_wall_seconds", float(wall))


_ZERO_SECONDS: Final = 0.0


class BudgetUsage(msgspec.Struct, frozen=True, omit_defaults=True, kw_only=True):
    """What the session used since it started or was last resumed.

    The token counts are reported while the budget limits tokens (else ``0``, so a
    log of a budget without token limits reads as it always has).
    """

    turns: int = 0
    tool_calls: int = 0
    wall_seconds: float = _ZERO_SECONDS
    input_tokens: int = 0
    output_tokens: int = 0

    def __post_init__(self) -> None:
        # A log leaves a default out, and msgspec knows a default by identity: +0.0
        # becomes the default object itself, however it was made or decoded, so
        # equal usages always encode the same (see agentloop/_events.py).
        wall = self.wall_seconds
        if wall.__class__ is float and wall == 0.0 and math.copysign(1.0, wall) > 0:
            msgspec.structs.force_setattr(self, "wall_seconds", _ZERO_SECONDS)
