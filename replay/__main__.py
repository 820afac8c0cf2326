"""``python -m replay``: look at, check, compare and measure agentloop logs.

Commands::

    python -m replay show LOG [--color | --no-color]   a timeline, one event a line
    python -m replay check LOG                          replay it; ok or the divergence
    python -m replay diff A B                           the first differing event
    python -m replay stats LOG [--json]                 steps, tools, tokens, errors, time
    python -m replay view LOG [-o FILE] [--check | --diff B]   one self-contained HTML page
    python -m replay otel LOG [-o FILE]                 OpenTelemetry spans, OTLP/JSON

Exit codes: 0 ok (logs identical, replay matched); 1 a divergence or a difference;
2 a usage error or a file that cannot be read as a log. Errors are one line on
stderr, never a traceback.

A log with a header and no events (a writer created it, then its process died
before the first event) is a valid log with nothing in it: ``show`` prints
``(no events)``, ``stats`` reports the status ``empty``, ``diff`` compares it like
any other, and ``check`` prints ``no events: nothing to replay`` and exits 1 (it
proves nothing, so it is not ok).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import Any, NoReturn, TextIO

import msgspec

from agentloop import (
    Event,
    ModelChunkEvent,
    ModelResponse,
    PlanDraftEvent,
    RunFinishedEvent,
    SessionPauseEvent,
    StepStartEvent,
    ToolCallEvent,
    ToolErrorEvent,
    Usage,
    encode_event,
)

from . import _otel, _view
from ._diff import diff_events, summarize
from ._log import LogError, TornLogError, read_log
from ._replay import ReplayDivergence, replay

__all__ = ["main"]

EXIT_OK = 0
EXIT_DIFFERENT = 1
EXIT_ERROR = 2


class _Fail(Exception):
    """One line for stderr, and an exit code."""

    def __init__(self, message: str, code: int = EXIT_ERROR) -> None:
        super().__init__(message)
        self.code = code


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise _Fail(f"{message} (see python -m replay --help)")


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="python -m replay",
        description="Look at, check, compare and measure agentloop event logs.",
    )
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    show = commands.add_parser("show", help="a readable timeline of a log")
    show.add_argument("log")
    color = show.add_mutually_exclusive_group()
    color.add_argument("--color", dest="color", action="store_true", default=None)
    color.add_argument("--no-color", dest="color", action="store_false")
    check = commands.add_parser("check", help="replay a log and report ok or the divergence")
    check.add_argument("log")
    diff = commands.add_parser("diff", help="the first differing event of two logs")
    diff.add_argument("a")
    diff.add_argument("b")
    stats = commands.add_parser("stats", help="steps, tool calls, tokens, errors, duration")
    stats.add_argument("log")
    stats.add_argument("--json", action="store_true", help="print one JSON object")
    _view.add_parser(commands)
    _otel.add_parser(commands)
    return parser


def _read(path: str) -> list[Event]:
    try:
        return read_log(path)
    except LogError as exc:
        raise _Fail(str(exc)) from None
    except OSError as exc:
        reason = exc.strerror or str(exc)
        raise _Fail(f"{path}: cannot read: {reason}") from None


# --------------------------------------------------------------------------- show

_RESET = "\x1b[0m"
_COLORS = {
    "session": "\x1b[1;34m",  # bold blue
    "message": "\x1b[34m",
    "step": "\x1b[2m",  # dim
    "model": "\x1b[36m",  # cyan
    "plan": "\x1b[36;1m",
    "tool": "\x1b[33m",  # yellow
    "budget": "\x1b[35m",  # magenta
    "run": "\x1b[1;32m",  # bold green
}
_RED = "\x1b[1;31m"
_SUMMARY_WIDTH = 110


def _color_of(event: Event) -> str:
    if type(event) is ToolErrorEvent:
        return _RED
    if type(event) is RunFinishedEvent and event.status != "completed":
        return _RED
    return _COLORS.get(event.type.split(".", 1)[0], "")


def _timeline(events: Sequence[Event], out: TextIO, color: bool) -> None:
    if not events:
        out.write("(no events)\n")
        return
    start = next((e.at for e in events if e.at is not None), None)
    for event in events:
        clock = ""
        if event.at is not None and start is not None:
            clock = f"+{event.at - start:.3f}s"
        name = f"{event.type:<17}"
        if color:
            name = f"{_color_of(event)}{name}{_RESET}"
        summary = summarize(event)
        if len(summary) > _SUMMARY_WIDTH:
            summary = summary[: _SUMMARY_WIDTH - 3] + "..."
        line = f"{event.sequence:>5}  {clock:>10}  step {event.step:<3} {name} {summary}"
        out.write(line.rstrip() + "\n")


def _show(path: str, color: bool | None) -> int:
    if color is None:
        color = sys.stdout.isatty() and not os.environ.get("NO_COLOR")
    try:
        events = read_log(path)
    except TornLogError as exc:
        _timeline(exc.events, sys.stdout, color)
        raise _Fail(str(exc)) from None
    except LogError as exc:
        raise _Fail(str(exc)) from None
    except OSError:
        events = _read(path)  # re-raise as one line
    _timeline(events, sys.stdout, color)
    return EXIT_OK


# --------------------------------------------------------------------------- check


def _check(path: str) -> int:
    events = _read(path)
    if not events:
        print(f"{path}: no events: nothing to replay")
        return EXIT_DIFFERENT
    try:
        outcome = replay(events)
    except ReplayDivergence as divergence:
        print(f"{path}: DIVERGED")
        print(divergence)
        return EXIT_DIFFERENT
    if outcome.result is None:
        pending = type(outcome.pending).__name__ if outcome.pending is not None else "nothing"
        print(f"{path}: ok, {len(events)} events replayed; unfinished (waits for a {pending})")
    else:
        result = outcome.result
        print(
            f"{path}: ok, {len(events)} events replayed; run {result.status} "
            f"({result.reason}) after {result.steps} step(s)"
        )
    return EXIT_OK


# --------------------------------------------------------------------------- diff


def _diff(path_a: str, path_b: str) -> int:
    a, b = _read(path_a), _read(path_b)
    for index, (x, y) in enumerate(zip(a, b, strict=False)):
        if encode_event(x) != encode_event(y):
            print(f"logs differ at event #{index}")
            print(f"  A: #{x.sequence} {x.type} step {x.step}  {summarize(x)}".rstrip())
            print(f"  B: #{y.sequence} {y.type} step {y.step}  {summarize(y)}".rstrip())
            print("  differences (A -> B):")
            for line in diff_events(x, y, labels=("A", "B")):
                print(f"    {line}")
            return EXIT_DIFFERENT
    if len(a) == len(b):
        print(f"logs are identical ({len(a)} events)")
        return EXIT_OK
    longer, name, shorter = (a, "A", len(b)) if len(a) > len(b) else (b, "B", len(a))
    extra = longer[shorter]
    print(
        f"logs agree on their first {shorter} events; {name} goes on with "
        f"{len(longer) - shorter} more, from #{extra.sequence} {extra.type}"
    )
    return EXIT_DIFFERENT


# --------------------------------------------------------------------------- stats


def _stats(events: Sequence[Event]) -> dict[str, Any]:
    steps = sum(1 for e in events if type(e) is StepStartEvent)
    calls = sum(1 for e in events if type(e) is ToolCallEvent)
    tool_errors = [e for e in events if type(e) is ToolErrorEvent]
    chunks = sum(1 for e in events if type(e) is ModelChunkEvent)
    pauses = sum(1 for e in events if type(e) is SessionPauseEvent)
    finished = events[-1] if events and type(events[-1]) is RunFinishedEvent else None
    if finished is not None:
        usage = finished.usage
    else:
        usage = Usage()
        for e in events:
            reply = e.reply if isinstance(e, PlanDraftEvent) else None
            if isinstance(reply, ModelResponse) and reply.usage is not None:
                usage = usage + reply.usage
    times = [e.at for e in events if e.at is not None]
    status = "empty" if not events else "unfinished"
    stats: dict[str, Any] = {
        "events": len(events),
        "status": finished.status if finished is not None else status,
        "reason": finished.reason if finished is not None else "",
        "steps": steps,
        "max_steps": finished.max_steps if finished is not None else None,
        "tool_calls": calls,
        "tool_errors": len(tool_errors),
        "loop_made_tool_errors": sum(1 for e in tool_errors if e.reply is None),
        "model_chunks": chunks,
        "pauses": pauses,
        "input_tokens": usage.input_tokens,
        "output_tokens": usage.output_tokens,
        "error": None,
        "duration_seconds": (max(times) - min(times)) if times else None,
    }
    if finished is not None and finished.error is not None:
        stats["error"] = {"code": finished.error.code, "message": finished.error.message}
    return stats


def _print_stats(path: str, as_json: bool) -> int:
    stats = _stats(_read(path))
    if as_json:
        print(msgspec.json.encode(stats).decode())
        return EXIT_OK
    status = stats["status"] + (f" ({stats['reason']})" if stats["reason"] else "")
    if not stats["events"]:
        status += " (the log has no events)"
    steps = str(stats["steps"])
    if stats["max_steps"] is not None:
        steps += f" of max {stats['max_steps']}"
    error = stats["error"]
    duration = stats["duration_seconds"]
    rows = [
        ("log", path),
        ("events", str(stats["events"])),
        ("status", status),
        ("steps", steps),
        (
            "tool calls",
            f"{stats['tool_calls']} ({stats['tool_errors']} errors, "
            f"{stats['loop_made_tool_errors']} made by the loop)",
        ),
        ("model chunks", str(stats["model_chunks"])),
        ("pauses", str(stats["pauses"])),
        ("tokens", f"{stats['input_tokens']} in / {stats['output_tokens']} out"),
        ("error", "none" if error is None else f"{error['code']}: {error['message']}"),
        ("duration", "unknown (no times)" if duration is None else f"{duration:.3f} s"),
    ]
    for key, value in rows:
        print(f"{key:<13} {value}")
    return EXIT_OK


# --------------------------------------------------------------------------- main


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit code."""
    try:
        args = _parser().parse_args(argv)
        if args.command == "show":
            return _show(args.log, args.color)
        if args.command == "check":
            return _check(args.log)
        if args.command == "diff":
            return _diff(args.a, args.b)
        if args.command == "view":
            return _view.run(args)
        if args.command == "otel":
            try:
                return _otel.command(args, _read(args.log))
            except _otel.OTelCommandError as exc:
                raise _Fail(str(exc)) from None
        return _print_stats(args.log, args.json)
    except (_Fail, _view.ViewError) as fail:
        print(f"replay: error: {fail}", file=sys.stderr)
        return fail.code
    except BrokenPipeError:  # pragma: no cover - e.g. piped into head
        return EXIT_OK
    except Exception as exc:  # pragma: no cover - a bug; still one line
        print(f"replay: internal error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return EXIT_ERROR


if __name__ == "__main__":
    sys.exit(main())
