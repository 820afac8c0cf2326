"""Parallel tool batches on this machine: ``run(parallel_tools=True)`` vs sequential.

Run from a checkout::

    python bench/batches.py          # a few seconds
    python bench/batches.py --quick  # smoke run (numbers mean nothing)

The scenario: one model response asks for 5 calls of a tool that sleeps 50 ms
(an I/O-bound lookup), then the model answers. ``ScriptedModel``, no network.
Wall time of the whole ``run(...)``, best of several rounds, with
``parallel_tools=True`` (the calls on ``run``'s thread pool) and without (one
after the other). Goal: the parallel run within 1.3x of one call (about 65 ms),
against about 250 ms sequential.

Prints, never asserts (timing is not a test).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout

from agentloop import ScriptedModel, ScriptedResponse, TextBlock, ToolCall, UserMessage, run, tool

CALLS = 5
SLEEP = 0.050  # seconds per call
GOAL = 1.3  # times one call


@tool
def lookup(key: str) -> str:
    """Look a key up (50 ms of waiting)."""
    time.sleep(SLEEP)
    return key


def model() -> ScriptedModel:
    calls = tuple(ToolCall(f"c{i}", "lookup", {"key": f"k{i}"}) for i in range(CALLS))
    return ScriptedModel(
        [
            ScriptedResponse("r1", calls, "tool_call"),
            ScriptedResponse("r2", (TextBlock("done"),), "stop"),
        ]
    )


def wall(parallel: bool, **options: Any) -> float:
    """Seconds for one run of the scenario."""
    start = time.perf_counter()
    result = run(
        [UserMessage("u1", "look them up")],
        model=model(),
        tools=[lookup],
        parallel_tools=parallel,
        **options,
    )
    elapsed = time.perf_counter() - start
    assert result.status == "completed", result
    return elapsed


def measure(rounds: int) -> dict[str, Any]:
    best = {"sequential": float("inf"), "parallel": float("inf")}
    for _ in range(rounds):  # interleaved, so both see the same machine
        best["sequential"] = min(best["sequential"], wall(False))
        best["parallel"] = min(best["parallel"], wall(True))
    one_call_ms = SLEEP * 1000
    parallel_ms = best["parallel"] * 1000
    return {
        "calls": CALLS,
        "call_ms": one_call_ms,
        "sequential_ms": best["sequential"] * 1000,
        "parallel_ms": parallel_ms,
        "speedup": best["sequential"] / best["parallel"],
        "parallel_vs_one_call": parallel_ms / one_call_ms,
        "goal_met": parallel_ms <= GOAL * one_call_ms,
    }


def report(numbers: dict[str, Any]) -> str:
    lines = [
        f"B1 {numbers['calls']} tool calls of {numbers['call_ms']:.0f} ms each,"
        " wall time of run():",
        f"  sequential                 {numbers['sequential_ms']:8.1f} ms",
        f"  parallel_tools=True        {numbers['parallel_ms']:8.1f} ms"
        f"   ({numbers['speedup']:.1f}x faster)",
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
    numbers = measure(1 if options.quick else options.rounds)
    print(report(numbers))
    if options.json is not None:
        options.json.write_text(json.dumps({"B1": numbers}, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
