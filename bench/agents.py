"""Agents that call agents on this machine: the per-call overhead of ``agent_tool``.

Run from a checkout::

    python bench/agents.py          # about 10 s
    python bench/agents.py --quick  # smoke run (numbers mean nothing)

Prints, never asserts (timing is not a test):

- G1 per call: a parent session of 20 steps, each calling one tool whose work is a
  one-step child session (``ScriptedModel``), then the answer. Once with the child
  as an ``agent_tool`` (a child session with its own log, its parent link, the
  roll-up), once with a plain ``@tool`` that calls the child's ``run()`` directly
  and returns its text. µs per call of each and the difference: what
  ``agent_tool`` costs per call on top of running the child.

Each timing is the best of several rounds of CPU time (the garbage collector runs
before each): the machine may be shared.
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout

from agentloop import (
    ScriptedModel,
    ScriptedResponse,
    ToolCall,
    UserMessage,
    agent_tool,
    run,
    tool,
)

CALLS = 20
USER = [UserMessage("u1", "Delegate.")]
CHILD = [ScriptedResponse.text("a1", "the child's answer")]


def parent_script() -> list[ScriptedResponse]:
    calls = [
        ScriptedResponse.tool_calls(f"r{n}", ToolCall(f"c{n}", "child", {"task": f"job {n}"}))
        for n in range(1, CALLS + 1)
    ]
    return [*calls, ScriptedResponse.text("done", "done")]


def best_per_call(session: Callable[[], Any], rounds: int) -> float:
    best = float("inf")
    for _ in range(rounds):
        gc.collect()
        start = time.process_time_ns()
        session()
        best = min(best, (time.process_time_ns() - start) / 1000 / CALLS)
    return best


def per_call(rounds: int) -> dict[str, float]:
    script = parent_script()

    @tool(name="child")
    def direct(task: str) -> str:
        """Run the child."""
        return (
            run([UserMessage("task", task)], model=ScriptedModel(CHILD), tools=[]).final_text or ""
        )

    def with_direct() -> None:
        result = run(USER, model=ScriptedModel(script), tools=[direct], max_steps=CALLS + 1)
        assert result.final_text == "done"

    child = agent_tool("child", "Run the child.", model=_Fresh(), tools=[])

    def with_agent_tool() -> None:
        child.logs.clear()
        result = run(USER, model=ScriptedModel(script), tools=[child], max_steps=CALLS + 1)
        assert result.final_text == "done" and len(child.logs) == CALLS

    sessions = {"child run() in a plain tool": with_direct, "agent_tool": with_agent_tool}
    for session in sessions.values():  # warm up
        session()
    return {name: best_per_call(session, rounds) for name, session in sessions.items()}


class _Fresh:
    """The child's model: a new ``ScriptedModel`` per child, as the direct tool makes."""

    def stream(self, request: Any) -> Any:
        return ScriptedModel(CHILD).stream(request)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="smoke run: few rounds")
    parser.add_argument("--json", metavar="PATH", help="also write the numbers as JSON")
    options = parser.parse_args(argv)
    rounds = 2 if options.quick else 30

    costs = per_call(rounds)
    base = costs["child run() in a plain tool"]
    overhead = costs["agent_tool"] - base
    print(f"G1 per call, {CALLS} calls of a one-step child (best of {rounds}):")
    for name, cost in costs.items():
        print(f"  {name:<30} {cost:8.1f} µs/call  {cost / base:5.2f}x")
    print(f"  agent_tool overhead per call: {overhead:.1f} µs")
    if options.json:
        data = {"G1": {"us_per_call": costs, "overhead_us": overhead}}
        Path(options.json).write_text(json.dumps(data, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
