"""The exception tree: an abstract root, then who is at fault."""

from __future__ import annotations

import pytest

from agentloop import AgentLoopError, CallerProtocolError, ModelError


def test_the_root_is_abstract() -> None:
    with pytest.raises(TypeError, match="AgentLoopError is abstract; raise a subclass"):
        AgentLoopError("boom")


def test_subclasses_are_ordinary_exceptions() -> None:
    error = CallerProtocolError("sent a ToolResult while a model request is pending")
    assert isinstance(error, AgentLoopError)
    assert str(error) == "sent a ToolResult while a model request is pending"
    with pytest.raises(AgentLoopError):
        raise error


def test_model_error_carries_hints_code_can_read() -> None:
    error = ModelError("rate limited", provider="openai", status_code=429, kind="rate_limit")
    assert isinstance(error, AgentLoopError)
    assert (error.message, error.provider, error.status_code, error.kind) == (
        "rate limited",
        "openai",
        429,
        "rate_limit",
    )
    assert str(error) == "rate limited"
    bare = ModelError("down")
    assert (bare.provider, bare.status_code, bare.kind) == (None, None, "unknown")
