"""Parallel tool batches on this machine: ``parallel_tools=True`` vs sequential.

Run from a checkout::

    python bench/batches.py          # a few seconds
    python bench/batches.py --quick  # smoke run (numbers mean nothing)

The scenario: one model response asks for 5 calls of a tool that waits 50 ms (an
I/O-bound lookup), then the model answers. ``ScriptedModel``, no network. Wall
time of the whole session, best of several rounds, with ``parallel_tools=True``
and without (one call after the other), and of the same session asking for one
call only:

- B1 ``run(...)``: a sync tool (``time.sleep``); the batch on ``run``'s thread pool.
- B2 ``await arun(...)``: an ``async def`` tool (``asyncio.sleep``); each call of
  the batch an asyncio task. Timed inside the event loop.

Goal: the parallel session within 1.3x of one call (about 65 ms), against about
250 ms sequential.

Prints, never asserts (timing is not a test).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout

from agentloop import (
    RunResult,
    ScriptedModel,
    ScriptedResponse,
    TextBlock,
    ToolCall,
    UserMessage,
    arun,
    run,
    tool,
)

CALLS = 5
SLEEP = 0.050  # seconds per call
GOAL = 1.3  # times one call
USER = [UserMessage("u1", "look them up")]


@tool
def lookup(key: str) -> str:
    """Look a key up (50 ms of waiting)."""
    time.sleep(SLEEP)
    return key


@tool(name="lookup")
async def async_lookup(key: str) -> str:
    """Look a key up (50 ms of waiting)."""
    await asyncio.sleep(SLEEP)
    return key


def model(calls: int) -> ScriptedModel:
    asked = tuple(ToolCall(f"c{i}", "lookup", {"key": f"k{i}"}) for i in range(calls))
    return ScriptedModel(
        [
            ScriptedResponse("r1", asked, "tool_call"),
            ScriptedResponse("r2", (TextBlock("done"),), "stop"),
        ]
    )


def run_wall(calls: int, parallel: bool) -> float:
    """Seconds for one ``run`` of the scenario."""
    start = time.perf_counter()
    result = run(USER, model=model(calls), tools=[lookup], parallel_tools=parallel)
    return checked(result, time.perf_counter() - start)


def arun_wall(calls: int, parallel: bool) -> float:
    """Seconds for one ``arun`` of the scenario (in a fresh event loop)."""

    async def session() -> float:
        start = time.perf_counter()
        result = await arun(USER, model=model(calls), tools=[async_lookup], parallel_tools=parallel)
        return checked(result, time.perf_counter() - start)

    return asyncio.run(session())


def checked(result: RunResult, elapsed: float) -> float:
    assert result.status == "completed", result
    return elapsed


def measure(wall: Callable[[int, bool], float], rounds: int) -> dict[str, Any]:
    """The best wall times of ``wall`` (ms), interleaved so all see the same machine."""
    best = {"sequential": float("inf"), "parallel": float("inf"), "one_call": float("inf")}
    for _ in range(rounds):
        best["sequential"] = min(best["sequential"], wall(CALLS, False))
        best["parallel"] = min(best["parallel"], wall(CALLS, True))
        best["one_call"] = min(best["one_call"], wall(1, True))
    call_ms = SLEEP * 1000
    parallel_ms = best["parallel"] * 1000
    return {
        "calls": CALLS,
        "call_ms": call_ms,
        "sequential_ms": best["sequential"] * 1000,
        "parallel_ms": parallel_ms,
        "one_call_ms": best["one_call"] * 1000,
        "speedup": best["sequential"] / best["parallel"],
        "parallel_vs_one_call": parallel_ms / call_ms,
        "parallel_vs_one_call_session": best["parallel"] / best["one_call"],
        "goal_met": parallel_ms <= GOAL * call_ms,
    }


def report(name: str, driver: str, numbers: dict[str, Any]) -> str:
    lines = [
        f"{name} {numbers['calls']} tool calls of {numbers['call_ms']:.0f} ms each,"
        f" wall time of {driver}:",
        f"  sequential                 {numbers['sequential_ms']:8.1f} ms",
        f"  parallel_tools=True        {numbers['parallel_ms']:8.1f} ms"
        f"   ({numbers['speedup']:.1f}x faster)",
        f"  one call                   {numbers['one_call_ms']:8.1f} ms"
        f"   (parallel: {numbers['parallel_vs_one_call_session']:.2f}x of it)",
        f"  parallel / one call        {numbers['parallel_vs_one_call']:8.2f}x"
        f"   goal <= {GOAL}x: {'met' if numbers['goal_met'] else 'NOT met'}",
    ]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="smoke run: 1 round")
    parser.add_argument("--rounds", type=int, default=7, help="rounds (best kept; default 7)")
    parser.add_argument("--json", type=Path, help="also write the numbers to this file")
    options = parser.parse_args(argv)
    rounds = 1 if options.quick else options.rounds
    numbers = {"B1": measure(run_wall, rounds), "B2": measure(arun_wall, rounds)}
    print(report("B1", "run()", numbers["B1"]))
    print(report("B2", "arun()", numbers["B2"]))
    if options.json is not None:
        options.json.write_text(json.dumps(numbers, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
