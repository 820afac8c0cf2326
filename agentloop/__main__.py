"""``python -m agentloop demo``: a scripted multi-step session with real local tools.

The demo runs :func:`agentloop.run` with a :class:`~agentloop.ScriptedModel` and
three deterministic tools, prints each event as the loop emits it, then the
``RunResult``, and writes the event log as JSONL (replay it with ``replay``).
The clock is simulated (a fixed start, +0.125 s per reading), so the log is
byte-for-byte the same on every run and machine.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable, Sequence
from typing import IO

from replay import summarize  # the same one-line summaries as `python -m replay show`

from . import (
    Event,
    EventLog,
    Model,
    RunResult,
    ScriptedModel,
    ScriptedResponse,
    ThinkingBlock,
    ToolCall,
    Usage,
    UserMessage,
    __version__,
    run,
    tool,
)

__all__ = ["main"]

DEFAULT_LOG = "agentloop-demo.jsonl"
#: 2026-01-01T00:00:00Z; the simulated clock starts here.
DEMO_EPOCH = 1_767_225_600.0
#: Seconds the simulated clock moves per reading (exact in binary floating point).
DEMO_TICK = 0.125


# --------------------------------------------------------------------------- tools


@tool
def add(left: int, right: int) -> dict[str, int]:
    """Add two integers and return their sum."""
    return {"sum": left + right}


@tool
def divide(numerator: float, denominator: float) -> float:
    """Divide numerator by denominator."""
    return numerator / denominator


@tool
def word_count(text: str) -> dict[str, int]:
    """Count the words (runs of non-space characters) in a text."""
    return {"words": len(text.split())}


NOTE = "sans-IO loops are easy to test and replay"
QUESTION = (
    f"What is 20 + 22? Split it evenly between 4 people, and count the words in my note: {NOTE!r}"
)


def demo_script() -> list[ScriptedResponse]:
    """The model's side of the demo: four steps, one mistake it recovers from."""
    return [
        # Step 1: the model passes "22" as a string; the tool boundary rejects it.
        ScriptedResponse.tool_calls(
            "resp-1",
            ToolCall("call-1", "add", {"left": 20, "right": "22"}),
            text="I'll add the numbers first.",
            usage=Usage(120, 18),
        ),
        # Step 2: it reads the error, retries with an int, and counts words too.
        ScriptedResponse(
            "resp-2",
            (
                ThinkingBlock("The add tool wants integers; retry with 22 as a number."),
                ToolCall("call-2", "add", {"left": 20, "right": 22}),
                ToolCall("call-3", "word_count", {"text": NOTE}),
            ),
            "tool_call",
            Usage(171, 34),
        ),
        # Step 3: divide the sum.
        ScriptedResponse.tool_calls(
            "resp-3",
            ToolCall("call-4", "divide", {"numerator": 42, "denominator": 4}),
            usage=Usage(230, 15),
        ),
        # Step 4: the answer.
        ScriptedResponse.text(
            "resp-4",
            "20 + 22 = 42; split between 4 people that is 10.5 each. Your note has 8 words.",
            usage=Usage(262, 25),
        ),
    ]


# --------------------------------------------------------------------------- output


class _Style:
    """ANSI styling, on only for a terminal without ``NO_COLOR`` (no-color.org)."""

    def __init__(self, stream: IO[str]) -> None:
        self.enabled = stream.isatty() and not os.environ.get("NO_COLOR")

    def __call__(self, text: str, code: str) -> str:
        return f"\x1b[{code}m{text}\x1b[0m" if self.enabled and code else text


_COLORS = {
    "session.start": "1;35",
    "session.complete": "1;35",
    "session.pause": "35",
    "session.resume": "35",
    "message.accepted": "36",
    "step.start": "1;34",
    "step.end": "34",
    "model.chunk": "2",
    "plan.draft": "36",
    "plan.commit": "36",
    "tool.call": "33",
    "tool.result": "32",
    "tool.error": "31",
    "budget.warn": "33",
}


class Timeline:
    """An EventLog subscriber printing one line per event as it happens."""

    def __init__(self, stream: IO[str], started_at: float) -> None:
        self._stream = stream
        self._style = _Style(stream)
        self._started_at = started_at

    def header(self) -> None:
        line = f"{'seq':>4}  {'time':>7}  {'step':>4}  {'event':<17} details"
        print(self._style(line, "1"), file=self._stream)

    def __call__(self, event: Event) -> None:
        at = event.at if event.at is not None else self._started_at
        code = _COLORS.get(event.type, "")
        if event.type == "run.finished":
            code = "1;32" if event.status == "completed" else "1;31"  # type: ignore[union-attr]
        line = (
            f"{event.sequence:>4}  {at - self._started_at:>+6.3f}s  {event.step:>4}  "
            f"{self._style(f'{event.type:<17}', code)} {summarize(event)}"
        )
        print(line, file=self._stream, flush=True)


def print_result(result: RunResult, stream: IO[str]) -> None:
    """The RunResult, without the transcript (the timeline showed it)."""
    style = _Style(stream)
    color = "1;32" if result.status == "completed" else "1;31"
    usage = result.usage
    lines = [
        "",
        style(f"status:     {result.status} ({result.reason})", color),
        f"steps:      {result.steps} of max {result.max_steps}",
        f"messages:   {len(result.messages)}",
        f"usage:      {usage.input_tokens} in, {usage.output_tokens} out",
    ]
    if result.error is not None:
        lines.append(f"error:      {result.error.code}: {result.error.message}")
    lines.append(f"final text: {result.final_text!r}")
    print("\n".join(lines), file=stream)


# --------------------------------------------------------------------------- log file


def _open_log_writer(path: str) -> tuple[Callable[[Event], None], Callable[[], None]]:
    """A subscriber appending each event to ``path`` and a function closing the file.

    ``replay.LogWriter`` owns the format (header, version, one flushed line per
    event). It appends to an existing log, which is how a resumed session continues
    its file; the demo records a new session, so it starts from an empty file.
    """
    from replay import LogWriter  # here: replay imports agentloop

    with open(path, "wb"):
        pass
    writer = LogWriter(path)
    return writer.write, writer.close


# --------------------------------------------------------------------------- commands


class _SimulatedClock:
    def __init__(self) -> None:
        self.now = DEMO_EPOCH

    def __call__(self) -> float:
        self.now += DEMO_TICK
        return self.now


def demo(log_path: str, *, quiet: bool, stream: IO[str], model: Model | None = None) -> RunResult:
    """Run the demo session; return its result.

    With ``model=None`` the embedded scripted model answers on a simulated clock, so
    the log is the same on every run. With a real model the wall clock is used.
    """
    log = EventLog()
    scripted = model is None
    clock: Callable[[], float] = _SimulatedClock() if scripted else time.time
    started_at = DEMO_EPOCH if scripted else clock()
    write, close = _open_log_writer(log_path)
    log.subscribe(write)
    timeline = Timeline(stream, started_at)
    if not quiet:
        tools = "add, divide, word_count"
        which = "a scripted model" if scripted else type(model).__name__
        print(f"agentloop {__version__} demo: {which} with tools {tools}", file=stream)
        print(f"user: {QUESTION}", file=stream)
        print(file=stream)
        timeline.header()
        log.subscribe(timeline)
    chosen: Model = ScriptedModel(demo_script()) if model is None else model
    try:
        result = run(
            [UserMessage("user-1", QUESTION)],
            model=chosen,
            tools=[add, divide, word_count],
            system="You are a careful assistant. Use the tools for arithmetic and counting.",
            max_steps=8,
            log=log,
            clock=clock,
            started_at=started_at,
        )
    finally:
        close()
    if isinstance(chosen, ScriptedModel):
        chosen.assert_complete()
    if quiet:
        print(f"{result.status}: {result.final_text}", file=stream)
    else:
        print_result(result, stream)
    print(f"log:        {log_path} ({len(log)} events)", file=stream)
    return result


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m agentloop",
        description="agentloop: a sans-IO, replayable agent loop.",
    )
    parser.add_argument("--version", action="store_true", help="print the version and exit")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    demo_parser = commands.add_parser(
        "demo",
        help="run a scripted multi-step session and write its event log",
        description="Run a scripted multi-step session with local tools, print each "
        "event as it happens, and write the event log as JSONL.",
    )
    demo_parser.add_argument(
        "--log",
        metavar="PATH",
        default=DEFAULT_LOG,
        help=f"where to write the event log (default: ./{DEFAULT_LOG})",
    )
    demo_parser.add_argument(
        "--quiet", action="store_true", help="print only the outcome, not the timeline"
    )
    demo_parser.add_argument(
        "--model",
        metavar="PROVIDER:NAME",
        default=None,
        help="use a real model instead of the scripted one: openai:<name>, "
        "openai-responses:<name> or anthropic:<name> (API key from the environment)",
    )
    return parser


def main(argv: Sequence[str] | None = None, stream: IO[str] | None = None) -> int:
    """Entry point of ``python -m agentloop``.

    Returns:
        0 when the demo completed, 1 when it did not, 2 on bad usage.
    """
    out = sys.stdout if stream is None else stream
    parser = _parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse exits 2 on bad usage, 0 for --help
        return exc.code if isinstance(exc.code, int) else 2
    if args.version:
        print(f"agentloop {__version__}", file=out)
        return 0
    if args.command is None:
        parser.print_help(out)
        return 2
    model: Model | None = None
    if args.model is not None:
        from .models import ModelSpecError, model_from_spec

        try:
            model = model_from_spec(args.model)
        except ModelSpecError as exc:
            print(f"python -m agentloop demo: {exc}", file=sys.stderr)
            return 2
    try:
        result = demo(args.log, quiet=args.quiet, stream=out, model=model)
    except OSError as exc:
        print(f"python -m agentloop demo: cannot write the log: {exc}", file=sys.stderr)
        return 1
    return 0 if result.status == "completed" else 1


if __name__ == "__main__":  # pragma: no cover - tested through a subprocess
    sys.exit(main())
