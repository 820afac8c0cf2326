"""pydantic-ai's worker: ``Agent.run_sync`` over ``FunctionModel`` (its own test double).

Set up to be as fast as pydantic-ai allows, so the comparison is fair to it:

- the model function and the tool are ``async def``: pydantic-ai runs a sync
  function in a worker thread (``run_in_executor``) on every call;
- each scripted response carries its usage, so ``FunctionModel`` skips estimating
  token counts over the whole transcript on every request;
- ``UsageLimits(request_limit=None)``: the default stops a run at 50 requests.

The agent is built once; each run resets the script and calls ``run_sync``.
"""

from __future__ import annotations

import sys
from collections.abc import Awaitable, Callable, Sequence
from importlib.metadata import version

from pydantic_ai import (
    Agent,
    ModelMessage,
    ModelRequest,
    ModelResponse,
    RequestUsage,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.usage import UsageLimits

from ._harness import (
    ADD_ARGS,
    FINAL_TEXT,
    USER_TEXT,
    RunFactory,
    add,
    call_id,
    history_plan,
    on_one_event_loop,
    worker_main,
)

FRAMEWORK = "pydantic-ai"
USAGE = RequestUsage(input_tokens=1, output_tokens=1)
NO_LIMITS = UsageLimits(request_limit=None)


class Script:
    """The scripted conversation: ``steps - 1`` add() calls, then the answer."""

    def __init__(self) -> None:
        self.steps = 2
        self.step = 0

    def reset(self, steps: int) -> None:
        self.steps, self.step = steps, 0

    async def respond(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        self.step += 1
        if self.step < self.steps:
            part = ToolCallPart("add", dict(ADD_ARGS), tool_call_id=call_id(self.step))
            return ModelResponse(parts=[part], usage=USAGE)
        return ModelResponse(parts=[TextPart(FINAL_TEXT)], usage=USAGE)


SCRIPT = Script()
AGENT = Agent(FunctionModel(SCRIPT.respond))


@AGENT.tool_plain(name="add")
async def add_tool(left: int, right: int) -> dict[str, int]:
    """Add two integers."""
    return add(left, right)


def versions() -> dict[str, str]:
    return {"pydantic-ai-slim": version("pydantic-ai-slim")}


def history(size: int) -> list[ModelMessage]:
    """``size`` earlier messages in pydantic-ai's types (one part per message)."""
    messages: list[ModelMessage] = []
    for kind, i in history_plan(size):
        if kind == "user":
            messages.append(ModelRequest(parts=[UserPromptPart(f"question {i}")]))
        elif kind == "call":
            call = ToolCallPart("add", {"left": i, "right": 1}, tool_call_id=f"old-{i}")
            messages.append(ModelResponse(parts=[call]))
        elif kind == "result":
            result = ToolReturnPart("add", f'{{"sum":{i + 1}}}', tool_call_id=f"old-{i}")
            messages.append(ModelRequest(parts=[result]))
        else:
            messages.append(ModelResponse(parts=[TextPart(f"answer {i}")]))
    return messages


def make(size: int, steps: int) -> Callable[[], str]:
    earlier = history(size) if size else None

    def run() -> str:
        SCRIPT.reset(steps)
        result = AGENT.run_sync(USER_TEXT, message_history=earlier, usage_limits=NO_LIMITS)
        return result.output

    return run


def make_async(size: int, steps: int) -> Callable[[], Awaitable[str]]:
    earlier = history(size) if size else None

    async def run() -> str:
        SCRIPT.reset(steps)
        result = await AGENT.run(USER_TEXT, message_history=earlier, usage_limits=NO_LIMITS)
        return result.output

    return run


def variants() -> dict[str, RunFactory]:
    return {"Agent.run_sync + FunctionModel": make}


def async_variants() -> dict[str, RunFactory]:
    return {"await Agent.run + FunctionModel": on_one_event_loop(make_async)}


def main(argv: Sequence[str] | None = None) -> int:
    return worker_main(FRAMEWORK, versions, variants, async_variants=async_variants, argv=argv)


if __name__ == "__main__":
    sys.exit(main())
