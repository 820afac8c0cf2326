"""Long sessions in a bounded window (DESIGN §27): a step's cost vs the history's length.

Run from a checkout::

    python bench/context.py              # about 10 seconds
    python bench/context.py --quick      # smoke run (numbers mean nothing)
    python bench/context.py --cpu-time   # CPU time, steadier on a busy machine

The scenario: the raw generator (no driver, no threads) of a session where each
step asks for one tool call whose result is about 1,200 characters (~300 tokens),
answered at once; ``Limits(context_tokens=20_000)`` with ``SummarizeOlder()``, so
the model's view is summarised whenever the request passes 75% of the window (a
compaction step costs one more model call, answered at once too). The engine's
µs per step is measured over the steps 51-150 (a history of ~100-300 messages)
and over the last 100 steps of a 1,000-step session (~1,800-2,000 messages), in
the same process; the ratio of the two is the growth. Beside it, the same session
without a window (the plain engine: no estimate, no view) and with a window and
no policy (the estimate alone; it fails CONTEXT_OVERFLOW at step ~60, so only its
first block is measured).

Goal: the per-step cost with a policy does not grow with the history (ratio
within 1.2 of the short history's). Prints, never asserts (timing is not a test).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout

from agentloop import (
    Limits,
    ModelRequest,
    ModelResponse,
    SummarizeOlder,
    TextBlock,
    ToolCall,
    ToolRequest,
    ToolResult,
    ToolSpec,
    UserMessage,
    agent_loop,
)

STEPS = 1000
WINDOW = 20_000
GOAL = 1.2
SPEC = ToolSpec("fetch", "Fetch a document.", {"type": "object"})
CONTENT = "a line of a document, fairly long. " * 34  # ~1,200 characters


def session(steps: int, window: int | None, policy: Any, clock: Callable[[], float]) -> list[float]:
    """Seconds spent in the engine for each step (from its request to the next)."""
    loop = agent_loop(
        [UserMessage("u1", "read")],
        tools=[SPEC],
        max_steps=steps,
        limits=Limits(agent_steps=steps, context_tokens=window),
        compaction=policy,
    )
    times: list[float] = []
    started = clock()
    effect: Any = next(loop)
    try:
        while True:
            if type(effect) is ModelRequest:
                if effect.purpose == "compaction":
                    reply: Any = ModelResponse(
                        effect.id, f"s{effect.step}", (TextBlock("earlier: read"),), "stop"
                    )
                else:
                    now = clock()
                    times.append(now - started)
                    started = now
                    n = effect.step
                    call = ToolCall(f"c{n}", "fetch", {"n": n})
                    if n == steps:
                        reply = ModelResponse(effect.id, f"r{n}", (TextBlock("done"),), "stop")
                    else:
                        reply = ModelResponse(effect.id, f"r{n}", (call,), "tool_call")
            else:
                assert type(effect) is ToolRequest
                reply = ToolResult(effect.call.id, CONTENT)
            effect = loop.send(reply)
    except StopIteration as stop:
        if stop.value.status != "completed":
            assert stop.value.error is not None and stop.value.error.code == "CONTEXT_OVERFLOW"
    return times[1:]  # the first entry is the start, not a step


def per_step_us(times: Sequence[float], first: int, last: int) -> float:
    """Mean µs per step over steps ``first``..``last`` (those the session reached)."""
    block = times[first - 1 : last]
    return sum(block) / len(block) * 1e6 if block else float("nan")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="smoke run: few steps")
    parser.add_argument("--cpu-time", action="store_true", help="time CPU, not the wall clock")
    parser.add_argument("--json", type=Path, help="also write the numbers here")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    clock = time.process_time if args.cpu_time else time.perf_counter
    steps, rounds = (300, 1) if args.quick else (STEPS, args.rounds)
    short, long_ = (51, 150), (steps - 99, steps)
    rows: dict[str, dict[str, float]] = {}
    cases = {
        "no window": (None, None),
        "window, no policy": (WINDOW, None),
        "window + SummarizeOlder()": (WINDOW, SummarizeOlder()),
    }
    for name, (window, policy) in cases.items():
        best_short = best_long = float("inf")
        for _ in range(rounds if policy is not None or window is None else 0):
            times = session(steps, window, policy, clock)
            best_short = min(best_short, per_step_us(times, *short))
            best_long = min(best_long, per_step_us(times, *long_))
        if policy is None and window is not None:  # it overflows near step 60
            best_short = min(
                per_step_us(session(steps, window, None, clock), 11, 50) for _ in range(rounds)
            )
            best_long = float("nan")
        rows[name] = {"short_us": best_short, "long_us": best_long, "ratio": best_long / best_short}
    how = "CPU" if args.cpu_time else "wall"
    print(f"C1 µs per step ({how} time), best of {rounds}; raw generator, replies made at once")
    print(
        f"   steps {short[0]}-{short[1]} vs steps {long_[0]}-{long_[1]} of a {steps}-step session"
    )
    for name, row in rows.items():
        if row["long_us"] != row["long_us"]:  # NaN: no such steps
            long_text, ratio = "n/a: CONTEXT_OVERFLOW at step ~60 (steps 11-50 shown)", ""
        else:
            long_text, ratio = f"{row['long_us']:8.1f}", f"  x{row['ratio']:.2f}"
        print(f"   {name:28} {row['short_us']:8.1f} -> {long_text}{ratio}")
    bounded = rows["window + SummarizeOlder()"]["ratio"]
    print(f"   goal: with a policy, within x{GOAL} at the longer history: ", end="")
    print("met" if bounded <= GOAL else "MISSED")
    if args.json is not None:
        args.json.write_text(json.dumps({"C1": rows, "steps": steps}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
