"""A worker in its own process, for the kill test::

    python -m tests.temporal.worker_process TARGET TASK_QUEUE

It serves the app's model and tools (and the workflows) on ``TASK_QUEUE`` with
``worker()``'s defaults, prints
``ready`` once it polls, and stops cleanly when its standard input closes. With
``AGENTLOOP_TEST_BLOBS`` set, its client has a blob store in that directory.

Once the worker has shut down, the process runs its exit handlers (coverage's data
file among them) and ends with ``os._exit(0)``, without the interpreter's
finalization: the Temporal client's Rust bridge keeps threads that
can outlive the event loop, and tearing the interpreter down under them crashes it
now and then (a SIGSEGV seen once in CI on Python 3.12 after a clean shutdown; the
same failure is known elsewhere as "PyGILState_Release ... finalizing"). A crash
before that point still shows: the tests check the exit status, and the fault
handler prints every thread's stack to standard error.
"""

from __future__ import annotations

import asyncio
import atexit
import faulthandler
import os
import sys
from typing import Any

from temporalio.client import Client

from agentloop.temporal import BlobDirectory, blob_converter, worker

from .app import MODEL, TOOLS

#: A blob directory: the worker's client stores large media blocks there.
BLOBS_DIR = "AGENTLOOP_TEST_BLOBS"


class ThreadedModel:
    """The app's model with ``stream`` only: the activity reads it in a worker
    thread, so a slow answer (``slow-model``) does not block the worker's event
    loop, and the activity keeps heartbeating. (``FunctionModel`` also has
    ``astream``, which calls the function on the event loop.)"""

    def stream(self, request: Any) -> Any:
        return MODEL.stream(request)


async def main(target: str, task_queue: str) -> None:
    blobs = os.environ.get(BLOBS_DIR)
    if blobs is None:
        client = await Client.connect(target)
    else:  # media blocks by reference, in that directory
        client = await Client.connect(target, data_converter=blob_converter(BlobDirectory(blobs)))
    async with worker(
        client,
        task_queue=task_queue,
        model=ThreadedModel(),
        tools=TOOLS,  # and the library's defaults, as documented
    ):
        print("ready", flush=True)
        await asyncio.to_thread(sys.stdin.read)


if __name__ == "__main__":
    faulthandler.enable()
    asyncio.run(main(*sys.argv[1:]))
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
