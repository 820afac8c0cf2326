"""A worker in its own process, for the kill test::

    python -m tests.temporal.worker_process TARGET TASK_QUEUE

It serves the app's model and tools (and the workflows) on ``TASK_QUEUE`` with
``worker()``'s defaults, prints
``ready`` once it polls, and stops cleanly when its standard input closes.
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

from temporalio.client import Client

from agentloop.temporal import worker

from .app import MODEL, TOOLS


class ThreadedModel:
    """The app's model with ``stream`` only: the activity reads it in a worker
    thread, so a slow answer (``slow-model``) does not block the worker's event
    loop, and the activity keeps heartbeating. (``FunctionModel`` also has
    ``astream``, which calls the function on the event loop.)"""

    def stream(self, request: Any) -> Any:
        return MODEL.stream(request)


async def main(target: str, task_queue: str) -> None:
    client = await Client.connect(target)
    async with worker(
        client,
        task_queue=task_queue,
        model=ThreadedModel(),
        tools=TOOLS,  # and the library's defaults, as documented
    ):
        print("ready", flush=True)
        await asyncio.to_thread(sys.stdin.read)


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:]))
