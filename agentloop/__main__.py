"""``python -m agentloop demo``: a scripted multi-step session with real local tools.

The demo runs :func:`agentloop.run` with a :class:`~agentloop.ScriptedModel` and
three deterministic tools, prints each event as the loop emits it, then the
``RunResult``, and writes the event log as JSONL (replay it with ``replay``).
The clock is simulated (a fixed start, +0.125 s per reading), so the log is
byte-for-byte the same on every run and machine.

With ``--store PATH`` the session is durable instead (``replay.run_durable`` in a
SQLite store): interrupt it with Ctrl-C and run the same command again, and it
continues where it stopped. ``--store`` and ``--log`` do not go together (the
store holds the log; ``python -m replay export DB --session demo -o FILE`` writes
it to a file): the command refuses the pair rather than ignore one.

This module is the top floor of the package (DESIGN §24; the floors table is in
``tests/test_architecture.py``): the one part of ``agentloop`` that imports
``replay``. ``import agentloop`` never imports it.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import IO

from replay import summarize  # the same one-line summaries as `python -m replay show`

from . import (
    Event,
    EventLog,
    FunctionModel,
    Model,
    ModelChunk,
    ModelFailure,
    ModelRequest,
    ModelResponse,
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


SYSTEM = "You are a careful assistant. Use the tools for arithmetic and counting."
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
    "context.compacted": "35",
    "agent.handoff": "1;35",
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
    def __init__(self, start: float = DEMO_EPOCH) -> None:
        self.now = start

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
            system=SYSTEM,
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


# --------------------------------------------------------------------------- --store

#: The session id of the durable demo.
DEMO_SESSION = "demo"


class _Slow:
    """A model whose every call takes ``delay`` seconds first (time to press Ctrl-C)."""

    def __init__(self, model: Model, delay: float) -> None:
        self._model = model
        self._delay = delay

    def stream(self, request: ModelRequest) -> Iterable[ModelChunk | ModelResponse | ModelFailure]:
        time.sleep(self._delay)
        return self._model.stream(request)


def demo_durable(
    store_path: str,
    *,
    quiet: bool,
    stream: IO[str],
    model: Model | None = None,
    delay: float = 0.0,
) -> RunResult:
    """Run (or continue) the demo session durably in a SQLite store; return its result.

    The scripted model answers by step (so a new process continues the script where
    the stored session stopped), and the simulated clock goes on from the last
    stored event. ``KeyboardInterrupt`` leaves the session resumable.
    """
    from replay import Parked, SQLiteStore, run_durable  # here: replay imports agentloop

    with SQLiteStore(store_path) as store:
        info = store.find(DEMO_SESSION)
        scripted = model is None
        started_at = resume_at = DEMO_EPOCH
        if info is None:
            intro = f"new session {DEMO_SESSION!r} in {store_path}"
        else:
            events = store.events(DEMO_SESSION)
            started_at = events[0].at or DEMO_EPOCH
            resume_at = events[-1].at or DEMO_EPOCH
            intro = (
                f"session {DEMO_SESSION!r} in {store_path} finished ({info.status})"
                if info.finished
                else f"resuming session {DEMO_SESSION!r} from {store_path}: "
                f"{info.events} events stored, step {info.steps}"
            )
        clock: Callable[[], float] = time.time
        if scripted:
            clock = _SimulatedClock(resume_at)
        script = demo_script()
        chosen: Model = (
            FunctionModel(lambda request: script[request.step - 1]) if model is None else model
        )
        if delay > 0:
            chosen = _Slow(chosen, delay)
        timeline = Timeline(stream, started_at)
        if not quiet:
            which = "a scripted model" if scripted else type(model).__name__
            print(f"agentloop {__version__} durable demo: {which}; {intro}", file=stream)
            if info is None or not info.finished:
                print(
                    "(press Ctrl-C to stop it; run the same command again to continue)",
                    file=stream,
                )
                print(file=stream)
                timeline.header()
        outcome = run_durable(
            store,
            DEMO_SESSION,
            [UserMessage("user-1", QUESTION)],
            model=chosen,
            tools=[add, divide, word_count],
            system=SYSTEM,
            max_steps=8,
            clock=clock,
            started_at=started_at if scripted else None,
            on_event=None if quiet else timeline,
            owner="agentloop-demo",
        )
        assert not isinstance(outcome, Parked)  # the demo has nothing that pauses
        stored = store.session(DEMO_SESSION).events
    if quiet:
        print(f"{outcome.status}: {outcome.final_text}", file=stream)
    else:
        print_result(outcome, stream)
    print(f"store:      {store_path} (session {DEMO_SESSION!r}, {stored} events)", file=stream)
    return outcome


def program() -> str:
    """The command's name as the user ran it: ``agentloop`` (the console script) or
    ``python -m agentloop``."""
    return "agentloop" if Path(sys.argv[0]).stem == "agentloop" else "python -m agentloop"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=program(),
        description="agentloop: a sans-IO, replayable agent loop.",
    )
    parser.add_argument("--version", action="store_true", help="print the version and exit")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    commands.add_parser(
        "eval", help="evaluate an agent on a dataset (python -m agentloop eval --help)"
    )
    demo_parser = commands.add_parser(
        "demo",
        help="run a scripted multi-step session and write its event log",
        description="Run a scripted multi-step session with local tools, print each "
        "event as it happens, and write the event log as JSONL.",
    )
    demo_parser.add_argument(
        "--log",
        metavar="PATH",
        default=None,
        help=f"where to write the event log (default: ./{DEFAULT_LOG}; not with --store)",
    )
    demo_parser.add_argument(
        "--quiet", action="store_true", help="print only the outcome, not the timeline"
    )
    demo_parser.add_argument(
        "--model",
        metavar="PROVIDER:NAME",
        default=None,
        help="use a real model instead of the scripted one: openai:<name>, "
        "openai-responses:<name>, anthropic:<name>, gemini:<name> or "
        "openai-compatible:<name>@<base_url> (API key from the environment)",
    )
    demo_parser.add_argument(
        "--store",
        metavar="DB",
        default=None,
        help="run the session durably in this SQLite store instead of writing a log "
        "file (not with --log: export the stored session with `python -m replay "
        "export DB --session demo -o FILE`): stop it with Ctrl-C, run the same "
        "command again to continue it",
    )
    demo_parser.add_argument(
        "--delay",
        metavar="SECONDS",
        type=float,
        default=None,
        help="wait this long in every model call (default: 0.5 with --store, so there "
        "is time to press Ctrl-C; else 0)",
    )
    return parser


def main(argv: Sequence[str] | None = None, stream: IO[str] | None = None) -> int:
    """Entry point of ``agentloop`` (``python -m agentloop``).

    Returns:
        0 when the demo completed, 1 when it did not, 2 on bad usage.
    """
    out = sys.stdout if stream is None else stream
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["eval"]:  # agentloop.evals (DESIGN §28): its own CLI, imported only here
        from .evals._cli import main as eval_main

        return eval_main(argv[1:])
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
    prog = parser.prog
    if args.store is not None and args.log is not None:
        print(
            f"{prog} demo: --log and --store do not go together: the store holds the "
            f"session's log (write it to a file with `python -m replay export "
            f"{args.store} --session {DEMO_SESSION} -o {args.log}`)",
            file=sys.stderr,
        )
        return 2
    model: Model | None = None
    if args.model is not None:
        from .models import ModelSpecError, model_from_spec

        try:
            model = model_from_spec(args.model)
        except ModelSpecError as exc:
            print(f"{prog} demo: {exc}", file=sys.stderr)
            return 2
    if args.store is not None:
        return _demo_store(args, out, model, prog)
    log = DEFAULT_LOG if args.log is None else args.log
    try:
        result = demo(log, quiet=args.quiet, stream=out, model=model)
    except OSError as exc:
        print(f"{prog} demo: cannot write the log: {exc}", file=sys.stderr)
        return 1
    return 0 if result.status == "completed" else 1


def _demo_store(args: argparse.Namespace, out: IO[str], model: Model | None, prog: str) -> int:
    from replay import SQLiteStore, StoreError

    delay = 0.5 if args.delay is None else args.delay
    try:
        result = demo_durable(args.store, quiet=args.quiet, stream=out, model=model, delay=delay)
    except KeyboardInterrupt:
        # Events shown after the last commit (the timeline is live) were not
        # stored; the next run starts again from the stored ones.
        with SQLiteStore(args.store) as store:
            saved = sum(info.events for info in store.sessions() if info.id == DEMO_SESSION)
        unstored = f"; the lines from #{saved} on above were not stored" if saved else ""
        print(
            f"\ninterrupted: {saved} events of session {DEMO_SESSION!r} are stored in "
            f"{args.store}{unstored}; run the same command again to continue",
            file=sys.stderr,
        )
        return 130
    except (StoreError, OSError) as exc:
        print(f"{prog} demo: {exc}", file=sys.stderr)
        return 1
    return 0 if result.status == "completed" else 1


if __name__ == "__main__":  # pragma: no cover - tested through a subprocess
    sys.exit(main())
