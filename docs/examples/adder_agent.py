"""The agent of docs/examples/resume_session.py: one tool and a model that answers
from the transcript it is sent (as a real model does), so any process can continue it."""

from __future__ import annotations

import os
import time

from agentloop import (
    FunctionModel,
    ModelRequest,
    ScriptedResponse,
    ToolCall,
    ToolResultMessage,
    tool,
)


@tool
def add(left: int, right: int) -> int:
    """Add two integers."""
    time.sleep(float(os.environ.get("ADD_SECONDS", "0")))  # a slow tool, to crash in
    return left + right


def answer(request: ModelRequest) -> ScriptedResponse:
    """Add 1 + 2, then add 3 to that, then say the sum."""
    sums = [int(m.content) for m in request.messages if type(m) is ToolResultMessage]
    step = f"r{len(sums) + 1}"
    if not sums:
        return ScriptedResponse.tool_calls(step, ToolCall("c1", "add", {"left": 1, "right": 2}))
    if len(sums) == 1:
        return ScriptedResponse.tool_calls(
            step, ToolCall("c2", "add", {"left": sums[0], "right": 3})
        )
    return ScriptedResponse.text(step, f"1 + 2 + 3 = {sums[-1]}")


model = FunctionModel(answer)
tools = [add]
