"""Benchmarks of the agent loop on this machine, alone or side by side with its peers.

Run from a checkout::

    python bench/run.py           # core suite: agentloop only (under a minute)
    python bench/run.py --peers   # + pydantic-ai, openai-agents, LangGraph (the bench extra)
    python bench/run.py --quick   # smoke run, few iterations (CI)
    python bench/run.py --micro   # only the in-process micro-benchmarks below

The suite (``bench/peers``, see ``bench/README.md``) runs scenarios S1-S5 and the
memory checks in one fresh process per framework and prints one table. ``--micro``
keeps this script's original in-process table:

The core numbers drive the raw generator with pre-built replies, so they measure
the loop itself (validation, events, state), not a model or a tool. ``run()`` with
``ScriptedModel`` is reported for S1 as the cost a typical test pays.

The "after N initial messages" rows time only the steps, after the loop has
accepted the transcript: with an O(1) transcript view per request, the cost of a
step should not grow with N (DESIGN §2, linear cost). Setup (validating and
recording N messages) is O(N) and reported separately.

Numbers are printed, never asserted: timing is not a test.
"""

from __future__ import annotations

import argparse
import platform
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

try:
    import agentloop
except ImportError:  # running from a checkout without installing it
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    import agentloop

import msgspec

sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench/peers as ``peers``
from peers import add_arguments, run_suite

ADD = agentloop.ToolSpec(
    "add",
    "Add two integers.",
    {
        "type": "object",
        "properties": {"left": {"type": "integer"}, "right": {"type": "integer"}},
        "required": ["left", "right"],
    },
)
USER = agentloop.UserMessage("u1", "What is 20 + 22?")


@agentloop.tool
def add(left: int, right: int) -> dict[str, int]:
    """Add two integers."""
    return {"sum": left + right}


# --------------------------------------------------------------------------- scripts

Replies = dict[str, Any]  # request id or call id -> the reply to send


def tool_steps(steps: int, start: int = 0) -> Replies:
    """Replies for ``steps`` model requests: add() calls, then a final answer."""
    replies: Replies = {}
    for step in range(1, steps + 1):
        request_id = f"request-{start + step:03d}"
        if step < steps:
            call = agentloop.ToolCall(f"call-{step}", "add", {"left": 20, "right": step})
            replies[request_id] = agentloop.ModelResponse(
                request_id, f"resp-{step}", (call,), "tool_call"
            )
            replies[call.id] = agentloop.ToolResult(call.id, f'{{"sum":{20 + step}}}')
        else:
            replies[request_id] = agentloop.ModelResponse(
                request_id, f"resp-{step}", (agentloop.TextBlock("done"),), "stop"
            )
    return replies


def transcript(size: int) -> list[agentloop.Message]:
    """A valid transcript of ``size`` messages: user / tool call / result / answer rounds."""
    messages: list[agentloop.Message] = []
    i = 0
    while len(messages) < size:
        left = size - len(messages)
        messages.append(agentloop.UserMessage(f"u{i}", f"question {i}"))
        if left >= 4:
            call = agentloop.ToolCall(f"old-{i}", "add", {"left": i, "right": 1})
            messages += [
                agentloop.AssistantMessage(f"a{i}", (call,)),
                agentloop.ToolResultMessage(f"t{i}", call.id, "add", f'{{"sum":{i + 1}}}'),
                agentloop.AssistantMessage(f"b{i}", (agentloop.TextBlock(f"answer {i}"),)),
            ]
        elif left >= 2:
            messages.append(agentloop.AssistantMessage(f"a{i}", (agentloop.TextBlock("ok"),)))
        i += 1
    return messages


def drive(loop: agentloop.AgentLoop, effect: Any, replies: Replies) -> agentloop.RunResult:
    """Answer every effect from ``replies`` until the run ends."""
    model_request, send = agentloop.ModelRequest, loop.send
    try:
        while True:
            if type(effect) is model_request:
                effect = send(replies[effect.id])
            else:
                effect = send(replies[effect.call.id])
    except StopIteration as stop:
        result: agentloop.RunResult = stop.value
        return result


# --------------------------------------------------------------------------- timing


def best_of(sample: Callable[[], int], *, number: int, repeat: int, warmup: int) -> float:
    """Nanoseconds per call of ``sample`` (which returns the nanoseconds it measured):
    the best average over ``repeat`` batches of ``number`` calls, after a warm-up."""
    for _ in range(warmup):
        sample()
    best = float("inf")
    for _ in range(repeat):
        total = 0
        for _ in range(number):
            total += sample()
        best = min(best, total / number)
    return best


def timed(fn: Callable[[], object]) -> Callable[[], int]:
    def sample() -> int:
        start = time.perf_counter_ns()
        fn()
        return time.perf_counter_ns() - start

    return sample


def s1_raw() -> None:
    replies = S1_REPLIES
    loop = agentloop.agent_loop([USER], tools=(ADD,), started_at=0.0)
    result = drive(loop, next(loop), replies)
    assert result.status == "completed", result


S1_REPLIES = tool_steps(2)


def s1_run() -> None:
    model = agentloop.ScriptedModel(
        [
            agentloop.ScriptedResponse.tool_calls(
                "resp-1", agentloop.ToolCall("call-1", "add", {"left": 20, "right": 22})
            ),
            agentloop.ScriptedResponse.text("resp-2", "20 + 22 = 42"),
        ]
    )
    result = agentloop.run([USER], model=model, tools=[add])
    assert result.status == "completed", result


def steps_after(
    messages: Sequence[agentloop.Message], steps: int
) -> tuple[Callable[[], int], Callable[[], int]]:
    """Samplers for (setup: agent_loop + first request) and (the ``steps`` steps)."""
    replies = tool_steps(steps)

    def setup() -> int:
        start = time.perf_counter_ns()
        loop = agentloop.agent_loop(messages, tools=(ADD,), max_steps=steps, started_at=0.0)
        next(loop)
        elapsed = time.perf_counter_ns() - start
        loop.close()
        return elapsed

    def run_steps() -> int:
        loop = agentloop.agent_loop(messages, tools=(ADD,), max_steps=steps, started_at=0.0)
        effect = next(loop)
        start = time.perf_counter_ns()
        result = drive(loop, effect, replies)
        elapsed = time.perf_counter_ns() - start
        assert result.status == "completed" and result.steps == steps, result
        return elapsed

    return setup, run_steps


# --------------------------------------------------------------------------- main


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    add_arguments(parser)
    parser.add_argument(
        "--micro", action="store_true", help="only the in-process micro-benchmarks (no suite)"
    )
    args = parser.parse_args(argv)
    if not args.micro:
        return run_suite(args)
    return micro(args.quick, args.repeat)


def micro(quick: bool, repeat_option: int | None) -> int:
    """The in-process micro-benchmark table (``--micro``)."""
    repeat = repeat_option or (2 if quick else 7)
    scale = 1 if quick else 20  # iterations per batch, relative
    warmup = 1 if quick else 5

    print(
        f"agentloop {agentloop.__version__} bench: Python {platform.python_version()}, "
        f"msgspec {msgspec.__version__}, {platform.machine()}; best of {repeat}"
        + (" (quick)" if quick else "")
    )
    rows: list[tuple[str, float, str, str]] = []

    def add_row(name: str, ns: float, unit: str, note: str = "") -> None:
        rows.append((name, ns / 1000, unit, note))

    ns = best_of(timed(s1_raw), number=10 * scale, repeat=repeat, warmup=warmup)
    add_row("S1 one tool call then answer (raw generator)", ns, "run", "2 steps")
    ns = best_of(timed(s1_run), number=10 * scale, repeat=repeat, warmup=warmup)
    add_row("S1 via run() + ScriptedModel", ns, "run", "2 steps, streamed")

    replies = tool_steps(50)

    def fifty() -> None:
        loop = agentloop.agent_loop([USER], tools=(ADD,), max_steps=50, started_at=0.0)
        result = drive(loop, next(loop), replies)
        assert result.steps == 50, result

    ns = best_of(timed(fifty), number=max(1, scale // 2), repeat=repeat, warmup=warmup)
    add_row("50-step run (raw generator)", ns / 50, "step", f"{ns / 1000:,.0f} µs per run")

    steps = 32
    for size in (10, 1000, agentloop.MAX_INITIAL_MESSAGES):
        messages = transcript(size)
        setup, run_steps = steps_after(messages, steps)
        number = max(1, scale // 2 if size > 100 else scale)
        setup_ns = best_of(setup, number=number, repeat=repeat, warmup=warmup)
        ns = best_of(run_steps, number=number, repeat=repeat, warmup=warmup)
        add_row(
            f"per step after {size} initial messages",
            ns / steps,
            "step",
            f"setup {setup_ns / 1000:,.0f} µs",
        )

    width = max(len(row[0]) for row in rows)
    print(f"{'scenario':<{width}}  {'µs':>9}  {'per':<4}  note")
    for name, us, unit, note in rows:
        print(f"{name:<{width}}  {us:>9.1f}  {unit:<4}  {note}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
