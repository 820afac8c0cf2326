"""openai-agents' worker: ``Runner.run_sync`` over a scripted ``Model`` subclass.

The model is a minimal :class:`agents.models.interface.Model` that returns
scripted ``ModelResponse`` objects built with the SDK's own test helpers
(``agents.testing.function_call`` / ``assistant_message``). It is lighter than
``agents.testing.ScriptedModel``, which deep-copies the whole input on every
call (that would bill the SDK for its test double's O(transcript) copy).

Set up to be as fast as the SDK allows: tracing disabled, an ``async def`` tool
(a sync ``function_tool`` runs in ``asyncio.to_thread``), ``max_turns=100`` (the
default, 10, stops the 50- and 64-step runs).
"""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from importlib.metadata import version
from typing import Any

from agents import (
    Agent,
    AgentOutputSchemaBase,
    Handoff,
    ModelResponse,
    ModelSettings,
    ModelTracing,
    Runner,
    Tool,
    TResponseInputItem,
    Usage,
    function_tool,
    set_tracing_disabled,
)
from agents.models.interface import Model
from agents.testing import assistant_message, function_call

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

FRAMEWORK = "openai-agents"
ARGUMENTS = json.dumps(ADD_ARGS, separators=(",", ":"))

set_tracing_disabled(True)


class ScriptedModel(Model):
    """Answers each request with the next scripted response: add() calls, then text."""

    def __init__(self) -> None:
        self.steps = 2
        self.step = 0

    def reset(self, steps: int) -> None:
        self.steps, self.step = steps, 0

    async def get_response(
        self,
        system_instructions: str | None,
        input: str | list[TResponseInputItem],
        model_settings: ModelSettings,
        tools: list[Tool],
        output_schema: AgentOutputSchemaBase | None,
        handoffs: list[Handoff],
        tracing: ModelTracing,
        *,
        previous_response_id: str | None,
        conversation_id: str | None,
        prompt: Any | None,
    ) -> ModelResponse:
        self.step += 1
        if self.step < self.steps:
            output = [function_call("add", ARGUMENTS, call_id=call_id(self.step))]
        else:
            output = [assistant_message(FINAL_TEXT)]
        return ModelResponse(output=output, usage=Usage(requests=1), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        raise NotImplementedError("the benchmark uses Runner.run_sync, not streaming")


@function_tool(name_override="add")
async def add_tool(left: int, right: int) -> dict[str, int]:
    """Add two integers."""
    return add(left, right)


MODEL = ScriptedModel()
AGENT: Agent[Any] = Agent(name="bench", model=MODEL, tools=[add_tool])


def versions() -> dict[str, str]:
    return {"openai-agents": version("openai-agents"), "openai": version("openai")}


def history(size: int) -> list[TResponseInputItem]:
    """``size`` earlier messages as Responses-API input items."""
    items: list[Any] = []
    for kind, i in history_plan(size):
        if kind == "user":
            items.append({"role": "user", "content": f"question {i}"})
        elif kind == "call":
            arguments = f'{{"left":{i},"right":1}}'
            items.append(
                {
                    "type": "function_call",
                    "call_id": f"old-{i}",
                    "name": "add",
                    "arguments": arguments,
                }
            )
        elif kind == "result":
            items.append(
                {
                    "type": "function_call_output",
                    "call_id": f"old-{i}",
                    "output": f'{{"sum":{i + 1}}}',
                }
            )
        else:
            items.append({"role": "assistant", "content": f"answer {i}"})
    return items


def make(size: int, steps: int) -> Callable[[], str]:
    earlier = history(size)

    def run() -> str:
        MODEL.reset(steps)
        given: str | list[TResponseInputItem] = USER_TEXT
        if earlier:
            given = [*earlier, {"role": "user", "content": USER_TEXT}]
        result = Runner.run_sync(AGENT, given, max_turns=100)
        output: str = result.final_output
        return output

    return run


def make_async(size: int, steps: int) -> Callable[[], Awaitable[str]]:
    earlier = history(size)

    async def run() -> str:
        MODEL.reset(steps)
        given: str | list[TResponseInputItem] = USER_TEXT
        if earlier:
            given = [*earlier, {"role": "user", "content": USER_TEXT}]
        result = await Runner.run(AGENT, given, max_turns=100)
        output: str = result.final_output
        return output

    return run


def variants() -> dict[str, RunFactory]:
    return {"Runner.run_sync + scripted Model": make}


def async_variants() -> dict[str, RunFactory]:
    return {"await Runner.run + scripted Model": on_one_event_loop(make_async)}


def main(argv: Sequence[str] | None = None) -> int:
    return worker_main(FRAMEWORK, versions, variants, async_variants=async_variants, argv=argv)


if __name__ == "__main__":
    sys.exit(main())
