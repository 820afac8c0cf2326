"""Hooks: the operator's seams into the loop (DESIGN §9).

A :class:`HookRegistry` maps each of the ten topics in :data:`HOOK_TOPICS` to
subscribers, called in registration order with one mutable payload dict. What a
subscriber may do depends on the topic (the table is in ``docs/harness.md``):

- mutate the payload (``before_plan``: ``messages``/``system`` sent to the model;
  ``after_plan``: ``content``/``stop_reason`` of the draft; ``before_tool_call``:
  ``arguments``; ``after_tool_call``: ``content``/``is_error``);
- raise :class:`HookAbort` (``before_tool_call``: that call gets the error result
  ``hook_abort:<reason>`` and the run goes on; elsewhere the run fails ``HOOK_ABORT``);
- return :data:`SKIP` (``before_tool_call``: error result ``skipped``;
  ``before_step``: no more steps, the run completes);
- return :class:`PauseRequest` (``before_tool_call`` only: the loop yields ``Pause``).

Any other exception fails the run with ``HOOK_ERROR``. Hooks run inside the
generator and run again on replay, so they must be deterministic.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final

import msgspec

from ._errors import AgentLoopError

__all__ = ["HOOK_TOPICS", "SKIP", "HookAbort", "HookRegistry", "PauseRequest"]

#: The ten hook topics, in lifecycle order.
HOOK_TOPICS: Final = (
    "before_step",
    "before_plan",
    "after_plan",
    "before_tool_call",
    "after_tool_call",
    "after_step",
    "on_error",
    "on_pause",
    "on_budget_exceeded",
    "on_complete",
)

Hook = Callable[[dict[str, Any]], object]


class _Skip:
    __slots__ = ()

    def __repr__(self) -> str:
        return "SKIP"

    def __reduce__(self) -> str:
        return "SKIP"


#: Return this from ``before_tool_call`` (skip the call) or ``before_step`` (stop).
SKIP: Final = _Skip()


class PauseRequest(msgspec.Struct, frozen=True):
    """Return this from ``before_tool_call`` to pause the run before that call.

    The loop yields ``Pause(reason, payload)``; the caller's ``Resume.payload``
    decides like an approval: ``{"approved": True}`` runs the call,
    ``{"approved": True, "arguments": {...}}`` runs it with edited arguments,
    ``{"approved": False, "message": "..."}`` gives it that error result.
    ``payload`` must be plain JSON; the loop adds the call under ``"call"``.
    """

    reason: str
    payload: Any = None


class HookAbort(AgentLoopError):
    """Raise from a hook to abort: the tool call (``before_tool_call``) or the run."""

    def __init__(self, reason: str = "") -> None:
        super().__init__(reason)
        self.reason = reason


class HookRegistry:
    """Subscribers per topic, called in registration order.

    >>> hooks = HookRegistry()
    >>> hooks.on("before_step", lambda payload: None)
    >>> hooks.count("before_step")
    1
    """

    __slots__ = ("_topics",)

    def __init__(self, hooks: Mapping[str, Hook | list[Hook]] | None = None) -> None:
        self._topics: dict[str, list[Hook]] = {}
        for topic, fns in (hooks or {}).items():
            for fn in fns if isinstance(fns, list) else [fns]:
                self.on(topic, fn)

    def on(self, topic: str, fn: Hook) -> None:
        """Subscribe ``fn`` to ``topic``.

        Raises:
            ValueError: ``topic`` is not one of :data:`HOOK_TOPICS`.
            TypeError: ``fn`` is not callable.
        """
        if topic not in HOOK_TOPICS:
            raise ValueError(f"unknown hook topic {topic!r}; expected one of {HOOK_TOPICS}")
        if not callable(fn):
            raise TypeError(f"hook for {topic!r} must be callable, got {fn!r}")
        self._topics.setdefault(topic, []).append(fn)

    def count(self, topic: str) -> int:
        """How many subscribers ``topic`` has."""
        return len(self._topics.get(topic, ()))

    def snapshot(self) -> dict[str, tuple[Hook, ...]]:
        """The subscribers per topic, frozen (a run keeps this; later ``on`` calls
        don't change a running loop)."""
        return {topic: tuple(fns) for topic, fns in self._topics.items() if fns}
