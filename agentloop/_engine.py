"""PLACEHOLDER: the engine is being written (agent_loop, AgentLoop)."""

from __future__ import annotations

from typing import Any

__all__ = ["AgentLoop", "agent_loop"]


class AgentLoop:
    pass


def agent_loop(messages: Any, **kwargs: Any) -> AgentLoop:
    raise NotImplementedError
