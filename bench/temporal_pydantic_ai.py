"""pydantic-ai's Temporal integration, the session ``bench/temporal.py`` times.

Imported only by ``python bench/temporal.py --peers`` (the ``bench`` extra installs
``pydantic-ai-slim[temporal]``). The agent is pydantic-ai's documented setup: an
``Agent`` with the ``TemporalDurability`` capability, its model and tool calls
run as activities, a workflow that awaits ``agent.run(prompt)``, a client and a
worker with ``PydanticAIPlugin`` / ``AgentPlugin``. The model is pydantic-ai's own
test double (``FunctionModel``) asking for ``add`` as many times as the prompt
says, then answering, like ``bench/temporal.py``'s ``answer``: one model activity
and one tool activity per tool step, as in agentloop's session. Both functions
are ``async def`` (pydantic-ai runs a sync one in a thread), and the script is a
function of the messages (the model activity may run on any worker).

This module must be importable by name (Temporal's sandbox re-imports the
workflow's module): run the bench from the checkout root, which puts ``bench/``
on ``sys.path``.
"""

from __future__ import annotations

import uuid
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
)
from pydantic_ai.durable_exec.temporal import AgentPlugin, PydanticAIPlugin, TemporalDurability
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.usage import UsageLimits
from temporalio import workflow
from temporalio.client import Client
from temporalio.worker import Worker

__all__ = ["AGENT", "AddWorkflow", "connect", "pydantic_ai_worker", "run_session", "versions"]

USAGE = RequestUsage(input_tokens=1, output_tokens=1)


async def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """``add`` as many times as the first user prompt says, then the last result."""
    wanted = int(str(messages[0].parts[-1].content))  # type: ignore[union-attr]
    returns = [
        part
        for message in messages
        if isinstance(message, ModelRequest)
        for part in message.parts
        if isinstance(part, ToolReturnPart)
    ]
    done = len(returns)
    if done < wanted:
        call = ToolCallPart("add", {"left": done, "right": 40}, tool_call_id=f"call-{done}")
        return ModelResponse(parts=[TextPart(f"Step {done + 1}."), call], usage=USAGE)
    last = returns[-1].content if returns else "nothing"
    return ModelResponse(parts=[TextPart(f"Done: {last}")], usage=USAGE)


AGENT = Agent(
    FunctionModel(respond),
    name="bench_add",
    capabilities=[TemporalDurability()],
)


@AGENT.tool_plain(name="add")
async def add_tool(left: int, right: int) -> dict[str, int]:
    """Add two integers."""
    return {"sum": left + right}


@workflow.defn(name="bench-pydantic-ai")
class AddWorkflow:
    @workflow.run
    async def run(self, prompt: str) -> str:
        result = await AGENT.run(prompt, usage_limits=UsageLimits(request_limit=None))
        return result.output


async def connect(target: str) -> Client:
    """A client with pydantic-ai's plugin (its payload converter)."""
    return await Client.connect(target, plugins=[PydanticAIPlugin()])


def pydantic_ai_worker(client: Client, task_queue: str) -> Worker:
    return Worker(
        client, task_queue=task_queue, workflows=[AddWorkflow], plugins=[AgentPlugin(AGENT)]
    )


async def run_session(client: Client, task_queue: str, tool_steps: int) -> str:
    """One session of ``tool_steps`` tool steps (``tool_steps + 1`` model requests)."""
    return await client.execute_workflow(
        AddWorkflow.run,
        str(tool_steps),
        id=f"bench-pai-{uuid.uuid4().hex}",
        task_queue=task_queue,
    )


def versions() -> str:
    return f"pydantic-ai-slim {version('pydantic-ai-slim')}"
