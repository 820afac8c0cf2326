"""The asyncio driver on this machine: ``arun`` vs ``run``, and many sessions at once.

Run from a checkout::

    python bench/drivers.py          # about 20 s
    python bench/drivers.py --quick  # smoke run (numbers mean nothing)

Prints, never asserts (timing is not a test):

- A1 per-step cost: a 50-step session (49 ``add`` calls one after the other, then
  the answer; ``ScriptedModel``) with ``run`` and with ``arun`` (one
  ``asyncio.run`` per session, the tool a sync function run in a worker thread, as
  ``arun`` runs sync tools; the same with ``asyncio.to_thread`` in place of
  agentloop's reused worker threads, for comparison; and with the tool an ``async
  def``), µs per step and the ratio to ``run`` (goals: at most 2x with an async
  tool, at most 1.5x with a sync one), wall and CPU time (all threads).
- A2 concurrency: 1,000 ``arun`` sessions in one event loop, each a tool call then
  the answer, with a scripted model that awaits 10 ms per call: total wall time
  (ideal: about 20 ms, two model calls) and peak RSS of the process; with the tool
  an ``async def``, then a sync function (worker threads, then ``asyncio.to_thread``).
- A3 an adapter over a recorded stream: µs per model step of ``OpenAIChatModel``
  answering from a recorded Chat Completions stream (DeepSeek, thinking and a tool
  call: ``fixtures/providers/openai/recorded/``) served by an ``httpx2.MockTransport``,
  with ``openai.OpenAI`` (``stream``) and with ``openai.AsyncOpenAI`` (``astream``,
  in one event loop): SDK, HTTP client and adapter together.

Each timing is the best of several rounds (the garbage collector runs before each).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import resource
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout

import agentloop._tools
from agentloop import (
    ModelChunk,
    ModelRequest,
    ModelResponse,
    ScriptedModel,
    ScriptedResponse,
    ToolCall,
    UserMessage,
    arun,
    run,
    tool,
)

STEPS = 50


@tool
def add(left: int, right: int) -> dict[str, int]:
    """Add two integers."""
    return {"sum": left + right}


@tool(name="add")
async def async_add(left: int, right: int) -> dict[str, int]:
    """Add two integers."""
    return {"sum": left + right}


def script(steps: int) -> list[ScriptedResponse]:
    calls = [
        ScriptedResponse.tool_calls(f"r{n}", ToolCall(f"c{n}", "add", {"left": n, "right": 1}))
        for n in range(1, steps)
    ]
    return [*calls, ScriptedResponse.text(f"r{steps}", "done")]


USER = [UserMessage("u1", "Count.")]


@contextlib.contextmanager
def with_to_thread() -> Iterator[None]:
    """Sync tools run with ``asyncio.to_thread`` inside the block (as before agentloop
    had its own worker threads): the comparison's other side."""
    tools = vars(agentloop._tools)  # the name Tool.aexecute calls
    offload = tools["offload"]
    tools["offload"] = asyncio.to_thread
    try:
        yield
    finally:
        tools["offload"] = offload


def best_per_step(session: Callable[[], Any], rounds: int, steps: int) -> float:
    """Best mean µs per step of ``session()`` over ``rounds`` rounds."""
    return best_per_step_cpu(session, rounds, steps)[0]


def best_per_step_cpu(session: Callable[[], Any], rounds: int, steps: int) -> tuple[float, float]:
    """Best mean µs per step of ``session()`` over ``rounds`` rounds: wall, and CPU
    time of the process (all its threads: what a busy machine blurs least)."""
    best = cpu = float("inf")
    for _ in range(rounds):
        gc.collect()
        start, start_cpu = time.perf_counter_ns(), time.process_time_ns()
        session()
        best = min(best, (time.perf_counter_ns() - start) / 1000 / steps)
        cpu = min(cpu, (time.process_time_ns() - start_cpu) / 1000 / steps)
    return best, cpu


def per_step(rounds: int) -> dict[str, tuple[float, float]]:
    responses = script(STEPS)

    def sync() -> None:
        result = run(USER, model=ScriptedModel(responses), tools=[add], max_steps=STEPS)
        assert result.steps == STEPS

    def asynchronous(tools: list[Any], to_thread: bool = False) -> Callable[[], None]:
        def session() -> None:
            coroutine = arun(USER, model=ScriptedModel(responses), tools=tools, max_steps=STEPS)
            with with_to_thread() if to_thread else contextlib.nullcontext():
                assert asyncio.run(coroutine).steps == STEPS

        return session

    sessions = {
        "run": sync,
        "arun (sync tool)": asynchronous([add]),
        "arun (sync tool, asyncio.to_thread)": asynchronous([add], to_thread=True),
        "arun (async tool)": asynchronous([async_add]),
    }
    for session in sessions.values():  # warm up
        session()
    return {name: best_per_step_cpu(session, rounds, STEPS) for name, session in sessions.items()}


class SlowScripted:
    """An async model that awaits ``delay`` seconds per call, then streams its answer."""

    def __init__(self, responses: Sequence[ScriptedResponse], delay: float) -> None:
        self.model = ScriptedModel(responses)
        self.delay = delay

    async def astream(self, request: ModelRequest) -> AsyncIterator[ModelChunk | ModelResponse]:
        await asyncio.sleep(self.delay)
        for item in self.model.stream(request):
            yield item


async def concurrent(sessions: int, delay: float, tool: Any = async_add) -> float:
    responses = script(2)
    start = time.perf_counter()
    results = await asyncio.gather(
        *(arun(USER, model=SlowScripted(responses, delay), tools=[tool]) for _ in range(sessions))
    )
    wall = time.perf_counter() - start
    assert all(result.final_text == "done" for result in results)
    return wall


RECORDED = (
    Path(__file__).resolve().parent.parent
    / "fixtures/providers/openai/recorded/deepseek-tool-call.chunks.txt"
)


def adapter_per_step(rounds: int, requests: int) -> dict[str, float]:
    """µs per request of the OpenAI Chat adapter over a recorded stream, sync vs async."""
    import httpx2
    import openai

    from agentloop.models.openai import OpenAIChatModel

    lines = [line for line in RECORDED.read_text().splitlines() if line.strip()]
    body = "".join(f"data: {line}\n\n" for line in lines).encode()

    def api(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(200, headers={"content-type": "text/event-stream"}, content=body)

    transport = httpx2.MockTransport(api)
    options: dict[str, Any] = {"api_key": "bench", "base_url": "https://api.openai.test/v1"}
    sync_model = OpenAIChatModel(
        openai.OpenAI(http_client=httpx2.Client(transport=transport), **options), "deepseek"
    )
    async_model = OpenAIChatModel(
        openai.AsyncOpenAI(http_client=httpx2.AsyncClient(transport=transport), **options),
        "deepseek",
    )
    request = ModelRequest("request-001", 1, (UserMessage("u1", "Weather in SF?"),), ())

    def sync() -> None:
        for _ in range(requests):
            assert type(list(sync_model.stream(request))[-1]) is ModelResponse

    def asynchronous() -> None:
        async def session() -> None:
            for _ in range(requests):
                assert type([item async for item in async_model.astream(request)][-1]) is (
                    ModelResponse
                )

        asyncio.run(session())

    sessions = {"OpenAI client (stream)": sync, "AsyncOpenAI client (astream)": asynchronous}
    for session in sessions.values():  # warm up
        session()
    return {name: best_per_step(session, rounds, requests) for name, session in sessions.items()}


def peak_rss_mib() -> float:
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / (1024 * 1024) if sys.platform == "darwin" else peak / 1024


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="smoke run: few rounds")
    parser.add_argument("--json", metavar="PATH", help="also write the numbers as JSON")
    options = parser.parse_args(argv)
    rounds = 2 if options.quick else 15
    sessions = 50 if options.quick else 1000

    measured = per_step(rounds)
    costs = {name: wall for name, (wall, _) in measured.items()}
    cpu = {name: cpu for name, (_, cpu) in measured.items()}
    base = costs["run"]
    print(f"A1 per step, {STEPS}-step session (best of {rounds}; wall, then CPU of all threads):")
    for name, cost in costs.items():
        print(
            f"  {name:<36} {cost:7.1f} µs/step  {cost / base:5.2f}x run"
            f"   CPU {cpu[name]:7.1f} µs/step  {cpu[name] / cpu['run']:5.2f}x"
        )
    ratio = costs["arun (sync tool)"] / base
    verdict = "met" if ratio <= 1.5 else "NOT met"
    print(f"  arun vs run (sync tools), goal <= 1.5x: {ratio:.2f}x  {verdict}")
    ratio_async = costs["arun (async tool)"] / base
    verdict = "met" if ratio_async <= 2 else "NOT met"
    print(f"  arun vs run (async tools), goal <= 2x: {ratio_async:.2f}x  {verdict}")

    repeats = 1 if options.quick else 3
    before = peak_rss_mib()
    wall = min(asyncio.run(concurrent(sessions, 0.010)) for _ in range(repeats))
    after = peak_rss_mib()
    print(
        f"A2 {sessions} concurrent arun sessions (model awaits 10 ms per call, 2 calls each): "
        f"{wall * 1000:.0f} ms wall, peak RSS {after:.1f} MiB (before: {before:.1f} MiB)"
    )
    walls = {"async tool": wall}
    for name, to_thread in (("sync tool", False), ("sync tool, asyncio.to_thread", True)):
        with with_to_thread() if to_thread else contextlib.nullcontext():
            walls[name] = min(asyncio.run(concurrent(sessions, 0.010, add)) for _ in range(repeats))
    print(
        f"  the same, the tool a sync function: {walls['sync tool'] * 1000:.0f} ms wall "
        f"(with asyncio.to_thread: {walls['sync tool, asyncio.to_thread'] * 1000:.0f} ms)"
    )
    adapter = adapter_per_step(rounds, 5 if options.quick else 50)
    (sync_name, sync_cost), (async_name, async_cost) = adapter.items()
    print(
        f"A3 OpenAIChatModel over a recorded stream (best of {rounds}): {sync_name} "
        f"{sync_cost:.0f} µs/step, {async_name} {async_cost:.0f} µs/step "
        f"({async_cost / sync_cost:.2f}x)"
    )
    if options.json:
        data = {
            "A1": {
                "us_per_step": costs,
                "cpu_us_per_step": cpu,
                "ratio": ratio,
                "ratio_async_tool": ratio_async,
            },
            "A2": {
                "sessions": sessions,
                "wall_ms": wall * 1000,
                "peak_rss_mib": after,
                "wall_ms_by_tool": {name: value * 1000 for name, value in walls.items()},
            },
            "A3": {"us_per_step": adapter, "ratio": async_cost / sync_cost},
        }
        Path(options.json).write_text(json.dumps(data, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
