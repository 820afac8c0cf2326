"""``python -m replay``: look at, check, compare, verify and measure agentloop logs.

Commands::

    python -m replay show LOG [--color | --no-color]   a timeline, one event a line
    python -m replay check LOG [--json]                 replay it; ok or the divergence
    python -m replay diff A B [--json]                  the first differing event
    python -m replay stats LOG [--json]                 steps, tools, tokens, errors, time
    python -m replay view LOG [-o FILE] [--check | --diff B]   one self-contained HTML page
    python -m replay otel LOG [-o FILE]                 OpenTelemetry spans, OTLP/JSON
    python -m replay verify LOG [--json]                the hash chain and every line
    python -m replay sessions DB [--status S] [--json]  the sessions of a store
    python -m replay export DB --session ID -o FILE     a stored session as a log file
    python -m replay repair LOG                         drop a torn last line, keep the rest
    python -m replay worker DB --factory MOD:FN [--json]   run the store's runnable sessions
    python -m replay --version

``show``, ``check``, ``stats``, ``verify``, ``view`` and ``otel`` read a session of a store
(:class:`replay.SQLiteStore`) as well as a log file: ``LOG`` is then the store and
``--session ID`` names the session (``python -m replay show sessions.db --session
ticket-42``). ``diff`` compares two sessions (``diff DB --session A --session B``,
or two stores), or a session and a file (``diff DB run.jsonl --session A``): each
store among its arguments takes the next ``--session``, in order. A store is
recognized by its content (the SQLite header), not by its name.

Exit codes: 0 ok (logs identical, replay matched, log verified); 1 a divergence, a
difference, a log that does not verify (or a format-1 log, which has no chain to
verify), or a log with no events to check; 2 a usage error or a file that cannot
be read as a log (or a store or session that cannot be read: no such session, a
store of a newer schema). Errors are one line on stderr, never a traceback.

Everything printed for people has its control characters escaped (``\\x1b``
becomes the four characters ``\\x1b``): a log holds what a model sent, and a
model-made id must not drive the terminal.

``--json`` prints one JSON object on stdout instead (control characters escaped
as ``\\uXXXX``), with the same exit code. Its shape is stable: fields may be added,
none is removed or changes meaning. See ``docs/log-format.md`` for each command's
object. When the file cannot be read (exit 2) the object is
``{"error": {"message": ..., "path": ..., "line": ...}}``.

A log with a header and no events (a writer created it, then its process died
before the first event) is a valid log with nothing in it: ``show`` prints
``(no events)``, ``stats`` reports the status ``empty``, ``diff`` compares it like
any other, and ``check`` prints ``no events: nothing to replay`` and exits 1 (it
proves nothing, so it is not ok).

Adding a command: write ``arguments(parser)`` and ``run(args) -> exit code``, and
register them with :func:`command` (see the commands below).
"""

from __future__ import annotations

import argparse
import difflib
import os
import sys
import tempfile
from collections.abc import Callable, Iterator, Sequence
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, NamedTuple, NoReturn, TextIO

import msgspec

from agentloop import (
    Event,
    ModelChunkEvent,
    ModelFailure,
    ModelResponse,
    PlanDraftEvent,
    RunFinishedEvent,
    SessionPauseEvent,
    StepStartEvent,
    ToolCallEvent,
    ToolErrorEvent,
    Usage,
    __version__,
    encode_event,
)

from . import _otel, _view
from ._diff import diff_events, summarize
from ._log import (
    LOG_FORMAT_VERSION,
    MAX_LINE_BYTES,
    LogError,
    LogIntegrityError,
    LogVersionError,
    TornLogError,
    _open_and_scan,
    _Scan,
    _Torn,
    read_log,
    write_log,
)
from ._replay import ReplayDivergence, replay
from ._store import SESSION_STATUSES, SessionNotFound, SQLiteStore, StoreError, StoreVersionError
from ._tree import Child, child_log_path, subtree

__all__ = ["COMMANDS", "Command", "command", "main"]

EXIT_OK = 0
EXIT_DIFFERENT = 1
EXIT_ERROR = 2

_EPILOG = """\
exit codes:
  0  ok: the replay matched, the logs are identical, the log verified
  1  not ok: a divergence, a difference, a log that does not verify (or has
     no hash chain: format 1), a log with no events to check
  2  a usage error, a file that cannot be read as an agentloop log, or a store
     or session that cannot be read (no such session, a newer schema)

LOG is a log file, or a session store with --session ID.
--json prints one JSON object (a stable shape; see docs/log-format.md)."""

# ``show`` prints a timeline for people only: its help does not offer --json.
_SHOW_EPILOG = _EPILOG.rpartition("\n--json")[0]

#: The positional LOG's help, on every command that reads a log.
LOG_HELP = "the log file (or a session store, with --session ID)"

if TYPE_CHECKING:
    from ._worker import WorkerStats


class _Fail(Exception):
    """One line for stderr, and an exit code."""

    def __init__(
        self, message: str, code: int = EXIT_ERROR, *, path: str = "", line: int | None = None
    ) -> None:
        super().__init__(message)
        self.code = code
        self.path = path
        self.line = line


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise _Fail(f"{message} (see python -m replay --help)")


class Command(NamedTuple):
    """A subcommand: its one-line help, how it adds its arguments, what it runs, and
    for its ``--help`` a description (default: the help) and an epilog (default:
    the exit codes and ``--json`` of the log commands; ``None`` for none)."""

    help: str
    arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]
    description: str = ""
    epilog: str | None = _EPILOG


#: The subcommands, by name, in the order ``--help`` lists them.
COMMANDS: dict[str, Command] = {}


def command(
    name: str,
    help: str,
    arguments: Callable[[argparse.ArgumentParser], None],
    *,
    description: str = "",
    epilog: str | None = _EPILOG,
) -> Callable[[Callable[[argparse.Namespace], int]], Callable[[argparse.Namespace], int]]:
    """Register ``run`` (the decorated function) as the subcommand ``name`` (see
    :class:`Command` for the rest)."""

    def register(run: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
        COMMANDS[name] = Command(help, arguments, run, description, epilog)
        return run

    return register


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="python -m replay",
        description="Look at, check, compare, verify and measure agentloop event logs.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--version",
        action="version",
        version=(
            f"replay (agentloop {__version__}): writes log format {LOG_FORMAT_VERSION}, "
            f"reads formats 1 to {LOG_FORMAT_VERSION}"
        ),
    )
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for name, spec in COMMANDS.items():
        sub = commands.add_parser(
            name,
            help=spec.help,
            description=spec.description or spec.help,
            epilog=spec.epilog,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        spec.arguments(sub)
    return parser


def _json_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print one JSON object")


# --------------------------------------------------------------------------- output

# C0 and C1 controls and DEL as \xNN; the characters that reorder or break lines
# (bidirectional controls, line and paragraph separators) as \uNNNN.
_BIDI = (*range(0x200E, 0x2010), *range(0x202A, 0x202F), *range(0x2066, 0x206A), 0x2028, 0x2029)
_ESCAPES: dict[int, str] = {
    **{c: f"\\x{c:02x}" for c in (*range(0x20), *range(0x7F, 0xA0))},
    **{c: f"\\u{c:04x}" for c in _BIDI},
}
# In JSON, msgspec already escapes C0; the others become \uNNNN (still JSON).
_JSON_ESCAPES: dict[int, str] = {c: f"\\u{c:04x}" for c in (*range(0x7F, 0xA0), *_BIDI)}


def _safe(text: str) -> str:
    """``text`` with every character that could drive a terminal escaped."""
    return text.translate(_ESCAPES)


def _say(text: str = "", out: TextIO | None = None) -> None:
    """Print ``text`` for a person: each of its lines escaped."""
    stream = sys.stdout if out is None else out
    stream.write("".join(_safe(line) + "\n" for line in text.split("\n")))


def _print_json(value: Any) -> None:
    sys.stdout.write(msgspec.json.encode(value).decode().translate(_JSON_ESCAPES) + "\n")


def _answer(args: argparse.Namespace, report: dict[str, Any], text: str, ok: bool) -> int:
    """Print a command's answer, ``report`` (``--json``) or ``text``; its exit code."""
    if args.json:
        _print_json(report)
    else:
        _say(text)
    return EXIT_OK if ok else EXIT_DIFFERENT


def _log_error(exc: LogError, path: str) -> _Fail:
    message = str(exc)
    if isinstance(exc, TornLogError):
        message = _view.torn_message(exc, path)
    elif "not an agentloop log" in message and exc.line == 1:
        message += "; nor a session store (a store is an SQLite file)"
    return _Fail(message, path=path, line=exc.line)


def _read(path: str) -> list[Event]:
    try:
        return read_log(path)
    except LogError as exc:
        raise _log_error(exc, path) from None
    except OSError as exc:
        raise _Fail(f"{path}: cannot read: {exc.strerror or exc}", path=path) from None


# --------------------------------------------------------------------------- stores

_SQLITE_HEADER = b"SQLite format 3\x00"


def _is_store(path: str) -> bool:
    """Whether ``path`` is an SQLite file (by its header; a store or not, its name
    does not matter). An unreadable path is not: reading it as a log says why."""
    try:
        with open(path, "rb") as file:
            return file.read(len(_SQLITE_HEADER)) == _SQLITE_HEADER
    except OSError:
        return False


def _session_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--session", metavar="ID", help="LOG is a session store: read this session of it"
    )


def _label(path: str, session: str | None) -> str:
    return path if session is None else f"{path}, session {session!r}"


def _open_store(path: str) -> SQLiteStore:
    try:
        return SQLiteStore(path)
    except StoreError as exc:
        raise _Fail(str(exc), path=path) from None


def _missing(path: str, store: SQLiteStore, session: str) -> _Fail:
    """No ``session`` in the store: name the closest ids (or some ids)."""
    ids = [info.id for info in store.sessions()]
    if not ids:
        hint = "the store holds no sessions"
    else:
        close = difflib.get_close_matches(session, ids, n=5, cutoff=0.6)
        if close:
            hint = "closest: " + ", ".join(map(repr, close))
        else:
            more = f", ... ({len(ids)} in all)" if len(ids) > 5 else ""
            hint = "its sessions: " + ", ".join(map(repr, ids[:5])) + more
    return _Fail(f"{path}: no session {session!r} in the store; {hint}", path=path)


def _no_session(path: str) -> _Fail:
    with _open_store(path) as store:
        count = len(store.sessions())
    return _Fail(
        f"{path} is a session store ({count} sessions): name one with --session ID "
        f"(python -m replay sessions {path} lists them)",
        path=path,
    )


def _events(path: str, session: str | None) -> list[Event]:
    """The events of the log file ``path``, or of ``session`` in the store ``path``."""
    if not _is_store(path):
        if session is not None and os.path.isfile(path):
            raise _Fail(
                f"{path} is not a session store (no SQLite header): --session {session!r} "
                "names a session of a store; drop it to read the file as a log",
                path=path,
            )
        return _read(path)
    if session is None:
        raise _no_session(path)
    with _open_store(path) as store:
        try:
            return store.events(session)
        except SessionNotFound:
            raise _missing(path, store, session) from None
        except StoreError as exc:
            raise _Fail(str(exc), path=path) from None


def _event(event: Event | None) -> dict[str, Any] | None:
    if event is None:
        return None
    return {
        "sequence": event.sequence,
        "type": event.type,
        "step": event.step,
        "summary": summarize(event),
    }


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


def _timeline(
    events: Sequence[Event],
    out: TextIO,
    color: bool,
    indent: str = "",
    nested: Callable[[str, str], None] | None = None,
) -> None:
    """One line per event; with ``nested``, called after each ``tool.call`` with its
    call id and ``indent``, to print the child session the call ran."""
    if not events:
        out.write(f"{indent}(no events)\n")
        return
    start = next((e.at for e in events if e.at is not None), None)
    for event in events:
        clock = ""
        if event.at is not None and start is not None:
            clock = f"+{event.at - start:.3f}s"
        name = _safe(f"{event.type:<17}")
        if color:
            name = f"{_color_of(event)}{name}{_RESET}"
        summary = _safe(summarize(event))
        if len(summary) > _SUMMARY_WIDTH:
            summary = summary[: _SUMMARY_WIDTH - 3] + "..."
        line = f"{event.sequence:>5}  {clock:>10}  step {event.step:<3} {name} {summary}"
        out.write(indent + line.rstrip() + "\n")
        if nested is not None and type(event) is ToolCallEvent:
            nested(event.call.id, indent)


def _show_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("log", help=LOG_HELP)
    _session_argument(parser)
    color = parser.add_mutually_exclusive_group()
    color.add_argument(
        "--color",
        dest="color",
        action="store_true",
        default=None,
        help="color the event types (default: when stdout is a terminal and NO_COLOR is unset)",
    )
    color.add_argument("--no-color", dest="color", action="store_false", help="never color")
    _tree_flag(parser)


def _tree_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--no-tree",
        dest="tree",
        action="store_false",
        help="this session only (default: its child sessions too, DESIGN §26: a store's "
        "children, or a file's next to it, named <log>.<call id>.jsonl)",
    )


def _kids(
    path: str, session: str | None, events: Sequence[Event]
) -> list[tuple[Child, str, str | None]]:
    """The child sessions of a session: ``(child, its path, its session)``."""
    try:
        if session is not None:
            with _open_store(path) as store:
                return [
                    (kid, path, kid.source) for kid in subtree(events, store=store, session=session)
                ]
        return [(kid, kid.source, None) for kid in subtree(events, path=path)]
    except LogError as exc:
        raise _log_error(exc, exc.path or path) from None
    except StoreError as exc:
        raise _Fail(str(exc), path=path) from None


def _tree_timeline(
    path: str,
    session: str | None,
    events: Sequence[Event],
    out: TextIO,
    color: bool,
    indent: str = "",
) -> None:
    """:func:`_timeline`, each child session's nested under the call that ran it."""
    kids = {kid.call_id: (kid, at, name) for kid, at, name in _kids(path, session, events)}

    def nested(call_id: str, indent: str) -> None:
        found = kids.get(call_id)
        if found is not None:
            kid, at, name = found
            inner = indent + "    "
            out.write(_safe(f"{inner}child session {_label(at, name)}") + "\n")
            _tree_timeline(at, name, kid.events, out, color, inner)

    _timeline(events, out, color, indent, nested if kids else None)


@command("show", "a readable timeline of a log", _show_arguments, epilog=_SHOW_EPILOG)
def _show(args: argparse.Namespace) -> int:
    path, color = args.log, args.color
    if color is None:
        color = sys.stdout.isatty() and not os.environ.get("NO_COLOR")
    if args.session is not None or _is_store(path):
        events = _events(path, args.session)
    else:
        try:
            events = read_log(path)
        except TornLogError as exc:
            _timeline(exc.events, sys.stdout, color)
            raise _log_error(exc, path) from None
        except (LogError, OSError):
            events = _read(path)  # re-raise as one line
    if args.tree:
        _tree_timeline(path, args.session, events, sys.stdout, color)
    else:
        _timeline(events, sys.stdout, color)
    return EXIT_OK


# --------------------------------------------------------------------------- check


def _log_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("log", help=LOG_HELP)
    _session_argument(parser)
    _json_flag(parser)


def _check_arguments(parser: argparse.ArgumentParser) -> None:
    _log_argument(parser)
    _tree_flag(parser)


@command("check", "replay a log and report ok or the divergence", _check_arguments)
def _check(args: argparse.Namespace) -> int:
    events = _events(args.log, args.session)
    report, text = _check_tree(args.log, args.session, events, args.tree, "")
    return _answer(args, report, "\n".join(text), report["ok"])


def _check_tree(
    path: str, session: str | None, events: list[Event], tree: bool, indent: str
) -> tuple[dict[str, Any], list[str]]:
    """``check``'s report and lines for a session (and, with ``tree``, its children's
    under ``children``: it is ok when they all are)."""
    report, text = _check_one(path, session, events)
    text = [indent + line for line in text]
    if tree:
        children = []
        for kid, at, name in _kids(path, session, events):
            child, lines = _check_tree(at, name, kid.events, tree, indent + "  ")
            children.append({"call_id": kid.call_id, **child})
            text += lines
            report["ok"] = report["ok"] and child["ok"]
        if children:
            report["children"] = children
    return report, text


def _check_one(
    path: str, session: str | None, events: list[Event]
) -> tuple[dict[str, Any], list[str]]:
    label = _label(path, session)
    report: dict[str, Any] = {
        "path": path,
        "session": session,
        "ok": False,
        "events": len(events),
        "result": None,
        "pending": None,
        "divergence": None,
    }
    text: list[str] = []
    if not events:
        text.append(f"{label}: no events: nothing to replay")
    else:
        try:
            outcome = replay(events)
        except ReplayDivergence as divergence:
            text += [f"{label}: DIVERGED", str(divergence)]
            report["divergence"] = {
                "sequence": divergence.sequence,
                "reason": divergence.reason,
                "recorded": _event(divergence.expected),
                "regenerated": _event(divergence.actual),
                "differences": divergence.differences,
                "hint": divergence.hint,
            }
        else:
            report["ok"] = True
            result = outcome.result
            if result is None:
                pending = type(outcome.pending).__name__
                report["pending"] = pending
                text.append(
                    f"{label}: ok, {len(events)} events replayed; "
                    f"unfinished (waits for a {pending})"
                )
            else:
                report["result"] = {
                    "status": result.status,
                    "reason": result.reason,
                    "steps": result.steps,
                }
                text.append(
                    f"{label}: ok, {len(events)} events replayed; run {result.status} "
                    f"({result.reason}) after {result.steps} step(s)"
                )
    return report, text


# --------------------------------------------------------------------------- diff


def _diff_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("a", help="a log file (or a session store, with --session ID)")
    parser.add_argument("b", nargs="?", help="(omit it for two sessions of the store A)")
    parser.add_argument(
        "--session",
        metavar="ID",
        action="append",
        default=[],
        help="the session of the next store among A and B (give two for DB alone)",
    )
    _json_flag(parser)


def _diff_sources(args: argparse.Namespace) -> list[tuple[str, str | None]]:
    """``[(path, session), (path, session)]``: what ``diff`` compares."""
    sessions: list[str] = args.session
    if args.b is None:
        if _is_store(args.a) and len(sessions) == 2:
            return [(args.a, sessions[0]), (args.a, sessions[1])]
        raise _Fail(
            "diff compares two logs: A B, or two sessions of one store: DB --session ID "
            "--session ID (see python -m replay diff --help)"
        )
    paths = [args.a, args.b]
    stores = [path for path in paths if _is_store(path)]
    if len(sessions) != len(stores):
        which = f"the store(s) {', '.join(stores)}" if stores else "no store"
        raise _Fail(
            f"diff: A and B include {which}; give one --session ID per store, in the "
            f"order of A and B ({len(sessions)} given)"
        )
    given = iter(sessions)
    return [(path, next(given) if path in stores else None) for path in paths]


@command("diff", "the first differing event of two logs or sessions", _diff_arguments)
def _diff(args: argparse.Namespace) -> int:
    (path_a, session_a), (path_b, session_b) = _diff_sources(args)
    a, b = _events(path_a, session_a), _events(path_b, session_b)
    report: dict[str, Any] = {
        "a": path_a,
        "b": path_b,
        "sessions": {"a": session_a, "b": session_b},
        "identical": False,
        "events": {"a": len(a), "b": len(b)},
        "first_difference": None,
    }
    text: list[str] = []
    index = next(
        (
            i
            for i, (x, y) in enumerate(zip(a, b, strict=False))
            if encode_event(x) != encode_event(y)
        ),
        None,
    )
    if index is not None:
        x, y = a[index], b[index]
        differences = diff_events(x, y, labels=("A", "B"))
        report["first_difference"] = {
            "index": index,
            "a": _event(x),
            "b": _event(y),
            "differences": differences,
        }
        text += [
            f"logs differ at event #{index}",
            f"  A: #{x.sequence} {x.type} step {x.step}  {summarize(x)}".rstrip(),
            f"  B: #{y.sequence} {y.type} step {y.step}  {summarize(y)}".rstrip(),
            "  differences (A -> B):",
            *(f"    {line}" for line in differences),
        ]
    elif len(a) == len(b):
        report["identical"] = True
        text.append(f"logs are identical ({len(a)} events)")
    else:
        longer, name, shorter = (a, "A", len(b)) if len(a) > len(b) else (b, "B", len(a))
        extra = longer[shorter]
        report["first_difference"] = {
            "index": shorter,
            "a": _event(extra) if name == "A" else None,
            "b": _event(extra) if name == "B" else None,
            "differences": [],
        }
        text.append(
            f"logs agree on their first {shorter} events; {name} goes on with "
            f"{len(longer) - shorter} more, from #{extra.sequence} {extra.type}"
        )
    return _answer(args, report, "\n".join(text), report["identical"])


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
    else:  # what the model calls reported so far
        usage = Usage()
        for e in events:
            reply = e.reply if isinstance(e, PlanDraftEvent) else None
            if isinstance(reply, (ModelResponse, ModelFailure)):
                for reported in (*(a.usage for a in reply.attempts), reply.usage):
                    if reported is not None:
                        usage = usage + reported
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
        "cache_read_tokens": usage.cache_read_tokens,
        "cache_write_tokens": usage.cache_write_tokens,
        "reasoning_tokens": usage.reasoning_tokens,
        "error": None,
        "duration_seconds": (max(times) - min(times)) if times else None,
    }
    if finished is not None and finished.error is not None:
        stats["error"] = {"code": finished.error.code, "message": finished.error.message}
    return stats


def _tokens(stats: dict[str, Any]) -> str:
    """``120 in / 40 out``, and the parts of those the model reported, if any."""
    text = f"{stats['input_tokens']} in / {stats['output_tokens']} out"
    parts = [
        f"{stats[key]} {name}"
        for key, name in (
            ("cache_read_tokens", "cache read"),
            ("cache_write_tokens", "cache write"),
            ("reasoning_tokens", "reasoning"),
        )
        if stats[key]
    ]
    return f"{text} ({', '.join(parts)})" if parts else text


@command("stats", "steps, tool calls, tokens, errors, duration", _log_argument)
def _print_stats(args: argparse.Namespace) -> int:
    path = _label(args.log, args.session)
    stats = _stats(_events(args.log, args.session))
    if args.json:
        _print_json(stats)
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
        ("tokens", _tokens(stats)),
        ("error", "none" if error is None else f"{error['code']}: {error['message']}"),
        ("duration", "unknown (no times)" if duration is None else f"{duration:.3f} s"),
    ]
    _say("\n".join(f"{key:<13} {value}" for key, value in rows))
    return EXIT_OK


# --------------------------------------------------------------------------- verify


def _scan(path: str, scan: _Scan) -> Iterator[Event]:
    """The events of ``path``, one at a time (``scan`` gathers the rest)."""
    try:
        yield from _open_and_scan(path, scan, MAX_LINE_BYTES)
    except OSError as exc:
        raise _Fail(f"{path}: cannot read: {exc.strerror or exc}", path=path) from None


def _verify_arguments(parser: argparse.ArgumentParser) -> None:
    _log_argument(parser)
    _tree_flag(parser)


@command("verify", "check the hash chain and every line of a log", _verify_arguments)
def _verify(args: argparse.Namespace) -> int:
    path, session = args.log, args.session
    if session is None and _is_store(path):
        raise _no_session(path)
    if session is not None and not _is_store(path):
        _events(path, session)  # raises: not a store
    report, lines = _verify_tree(args.tree, path, session, "")
    return _answer(args, report, "\n".join(lines), report["ok"])


def _verify_tree(
    tree: bool, path: str, session: str | None, indent: str
) -> tuple[dict[str, Any], list[str]]:
    """``verify``'s report and lines for a session, and with ``tree`` its children's
    (under ``children``: ok when every one is): a store's, or the files named for
    its calls next to it (:func:`replay.child_log_path`)."""
    if session is None:
        report, text, calls = _verify_file(path, path)
    else:
        report, text, calls = _verify_stored(path, session)
    lines = [indent + line for line in text.splitlines()]
    if not tree:
        return report, lines
    kids: list[tuple[str, str, str | None]] = []
    if session is not None:
        with _open_store(path) as store:
            for kid in store.children(session):
                kids.append((store.session(kid).config["parent"]["call_id"], path, kid))
    else:
        for call_id in calls:
            candidate = child_log_path(path, call_id)
            if os.path.isfile(candidate):
                kids.append((call_id, candidate, None))
    children = []
    for call_id, at, name in kids:
        nested, more = _verify_tree(tree, at, name, indent + "  ")
        children.append({"call_id": call_id, **nested})
        lines += more
        report["ok"] = report["ok"] and nested["ok"]
    if children:
        report["children"] = children
    return report, lines


def _verify_stored(path: str, session: str) -> tuple[dict[str, Any], str, list[str]]:
    """:func:`_verify_file` for a stored session: checked as the file it exports to
    (the same lines and links)."""
    with _open_store(path) as store, tempfile.TemporaryDirectory() as directory:
        exported = os.path.join(directory, "session.jsonl")
        try:
            store.export(session, exported)
        except SessionNotFound:
            raise _missing(path, store, session) from None
        except StoreVersionError as exc:
            raise _Fail(str(exc), path=path) from None
        except StoreError as exc:  # a damaged row: its chain does not hold
            report: dict[str, Any] = {
                "path": path,
                "session": session,
                "ok": False,
                "format_version": None,
                "events": None,
                "chain": "broken",
                "complete": False,
                "last_link": None,
                "problem": {"line": None, "message": str(exc)},
            }
            return report, f"{_label(path, session)}: NOT verified: {exc}", []
        return _verify_file(exported, _label(path, session), shown=path, session=session)


def _verify_file(
    path: str, label: str, *, shown: str | None = None, session: str | None = None
) -> tuple[dict[str, Any], str, list[str]]:
    """``verify`` the log file ``path``, reported as ``label`` (and ``shown`` as its
    path): the report, the text, and the ids of the calls it records."""
    scan = _Scan()
    last: Event | None = None
    problem: dict[str, Any] | None = None
    calls: list[str] = []
    try:
        for last in _scan(path, scan):
            if type(last) is ToolCallEvent:
                calls.append(last.call.id)
    except _Torn as torn:
        problem = {
            "line": torn.line,
            "message": f"{torn}; the {scan.count} events before it are intact",
        }
    except LogError as exc:
        if isinstance(exc, LogVersionError) or not (
            isinstance(exc, LogIntegrityError) or (exc.line or 1) > 1
        ):
            raise _log_error(exc, path) from None  # not a log at all
        problem = {"line": exc.line, "message": str(exc)}
    chain = scan.version >= 2
    report: dict[str, Any] = {
        "path": path if shown is None else shown,
        "session": session,
        "ok": problem is None and chain,
        "format_version": scan.version,
        "events": scan.count,
        "chain": "absent" if not chain else ("broken" if problem else "intact"),
        "complete": problem is None and type(last) is RunFinishedEvent,
        "last_link": None,
        "problem": problem,
    }
    if scan.format2 is not None and problem is None:
        report["last_link"] = scan.format2.link.decode()
    if problem is not None:
        text = f"{label}: NOT verified: {problem['message'].removeprefix(f'{path}: ')}"
    elif not chain:
        text = (
            f"{label}: not verified: log format {scan.version} has no hash chain ({scan.count} "
            "events, every line canonical); rewrite it as format 3 to protect it: "
            "replay.write_log(path, replay.read_log(path))"
        )
    else:
        if report["complete"]:
            end = "complete (ends with run.finished)"
        elif last is None:
            end = "no events"
        else:
            end = f"unfinished (ends at #{last.sequence} {last.type})"
        text = (
            f"{label}: verified: log format {scan.version}, {scan.count} events, hash chain "
            f"intact (last link {report['last_link']}); {end}"
        )
    return report, text, calls


# --------------------------------------------------------------------------- sessions, export


def _sessions_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("db", metavar="DB", help="the session store (an SQLite file)")
    parser.add_argument("--status", choices=SESSION_STATUSES, help="only sessions with it")
    _json_flag(parser)


_STORE_EPILOG = """\
exit codes:
  0  ok
  2  a usage error, or a file that is not a session store (or a store of a
     newer schema; no such session)"""


def _when(seconds: float) -> str:
    """A time of the store's clock, readable (UTC)."""
    try:
        return datetime.fromtimestamp(seconds, timezone.utc).strftime("%Y-%m-%d %H:%M:%SZ")
    except (OverflowError, OSError, ValueError):  # a test's clock, say
        return repr(seconds)


def _store_at(path: str) -> SQLiteStore:
    """The store at ``path`` (which must exist and be one)."""
    if not _is_store(path):
        if not os.path.exists(path):
            raise _Fail(f"{path}: no such file", path=path)
        raise _Fail(
            f"{path}: not a session store (no SQLite header); a log file is read by "
            "show, check, stats, verify and diff",
            path=path,
        )
    return _open_store(path)


@command(
    "sessions",
    "the sessions of a store: id, status, steps, events, updated",
    _sessions_arguments,
    epilog=_STORE_EPILOG,
)
def _sessions(args: argparse.Namespace) -> int:
    with _store_at(args.db) as store:
        infos = store.sessions(status=args.status)
    if args.json:
        rows = [
            {
                "id": info.id,
                "status": info.status,
                "steps": info.steps,
                "events": info.events,
                "created": info.created,
                "updated": info.updated,
                "answered": info.answered,
                "lease_owner": info.lease_owner,
                "lease_expires": info.lease_expires,
            }
            for info in infos
        ]
        _print_json({"path": args.db, "sessions": rows})
        return EXIT_OK
    if not infos:
        _say("(no sessions)")
        return EXIT_OK
    width = max(len("ID"), *(len(_safe(info.id)) for info in infos))
    lines = [f"{'ID':<{width}}  {'STATUS':<18} {'STEPS':>5} {'EVENTS':>6}  UPDATED"]
    for info in infos:
        status = _safe(info.status) + (" (answered)" if info.answered else "")
        lines.append(
            f"{_safe(info.id):<{width}}  {status:<18} {info.steps:>5} {info.events:>6}  "
            f"{_when(info.updated)}"
        )
    sys.stdout.write("\n".join(lines) + "\n")
    return EXIT_OK


def _export_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("db", metavar="DB", help="the session store (an SQLite file)")
    parser.add_argument("--session", metavar="ID", required=True, help="the session to export")
    parser.add_argument("-o", "--output", metavar="FILE", required=True, help="the log file")


@command(
    "export",
    "write a stored session to a JSONL log file (what LogWriter writes)",
    _export_arguments,
    epilog=_STORE_EPILOG,
)
def _export(args: argparse.Namespace) -> int:
    with _store_at(args.db) as store:
        try:
            count = store.export(args.session, args.output)
        except SessionNotFound:
            raise _missing(args.db, store, args.session) from None
        except StoreError as exc:
            raise _Fail(str(exc), path=args.db) from None
        except OSError as exc:
            raise _Fail(
                f"{args.output}: cannot write: {exc.strerror or exc}", path=args.output
            ) from None
    _say(f"{args.output}: {count} events of session {args.session!r} ({args.db})")
    return EXIT_OK


# --------------------------------------------------------------------------- repair


def _repair_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("log", help="the log file whose last line is torn")


_REPAIR_EPILOG = """\
exit codes:
  0  repaired, or nothing to repair (the log is whole)
  2  a usage error, or a file that is not a log (or is damaged otherwise than
     by a torn last line: that is never dropped silently)"""


@command(
    "repair",
    "rewrite a torn log without its torn last line; the intact events stay",
    _repair_arguments,
    description=(
        "A writer that died in the middle of a line leaves it torn, and every command "
        "refuses the log until it is repaired. This rewrites LOG (atomically) with the "
        "events before the torn line: what replay.write_log(path, err.events) does "
        "with the TornLogError of replay.read_log."
    ),
    epilog=_REPAIR_EPILOG,
)
def _repair(args: argparse.Namespace) -> int:
    path = args.log
    if _is_store(path):
        raise _Fail(f"{path} is a session store, not a log file: repair rewrites a log file")
    try:
        read_log(path)
    except TornLogError as exc:
        try:
            write_log(path, exc.events)
        except OSError as err:
            raise _Fail(f"{path}: cannot write: {err.strerror or err}", path=path) from None
        kept = len(exc.events)
        _say(f"{path}: dropped the torn line {exc.line}; kept the {kept} events before it")
        return EXIT_OK
    except (LogError, OSError):
        _read(path)  # raises it as one line
    _say(f"{path}: the log is whole; nothing to repair")
    return EXIT_OK


# --------------------------------------------------------------------------- view, otel


def _worker_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("db", metavar="DB", help="the session store (an SQLite file)")
    parser.add_argument(
        "--factory",
        required=True,
        metavar="MODULE:FUNCTION",
        help="factory(info) -> replay.SessionSetup: each session's model and tools",
    )
    parser.add_argument("--threads", type=int, default=4, help="sessions at once (default 4)")
    parser.add_argument(
        "--tasks",
        type=int,
        metavar="N",
        help=(
            "run N sessions at once in each thread on an asyncio loop, their commits "
            "grouped (models need astream)"
        ),
    )
    parser.add_argument(
        "--processes", type=int, default=1, help="worker processes, each with --threads"
    )
    parser.add_argument(
        "--limit",
        action="append",
        default=[],
        metavar="PROVIDER:KEY=N,...",
        help="a provider's rate limit: rpm, tpm, concurrent, retries (repeatable)",
    )
    parser.add_argument("--lease", type=float, default=30.0, help="lease seconds (default 30)")
    parser.add_argument(
        "--forever", action="store_true", help="keep polling when no session is runnable"
    )
    parser.add_argument("--poll", type=float, default=0.5, help="seconds between polls")
    parser.add_argument(
        "--progress", type=float, default=1.0, help="seconds between progress lines (stderr)"
    )
    parser.add_argument("--quiet", action="store_true", help="no progress lines")
    _json_flag(parser)


_LIMIT_KEYS = {
    "rpm": "requests_per_minute",
    "tpm": "tokens_per_minute",
    "concurrent": "concurrent",
    "retries": "retries",
}


def _limits(specs: Sequence[str]) -> dict[str, Any]:
    """``--limit openai:rpm=500,tpm=200000`` as ``{provider: RateLimit}``."""
    from ._worker import RateLimit, WorkerError

    limits: dict[str, Any] = {}
    for spec in specs:
        provider, _, items = spec.partition(":")
        fields: dict[str, Any] = {}
        try:
            for item in items.split(","):
                key, _, value = item.partition("=")
                name = _LIMIT_KEYS[key.strip()]
                number = float(value)
                fields[name] = int(number) if name in ("concurrent", "retries") else number
            limits[provider] = RateLimit(**fields)
        except (KeyError, ValueError, WorkerError) as exc:
            raise _Fail(
                f"--limit {spec!r}: expected PROVIDER:KEY=N,... with keys "
                f"{', '.join(_LIMIT_KEYS)} ({exc})"
            ) from None
        if not provider:
            raise _Fail(f"--limit {spec!r}: name the provider (PROVIDER:KEY=N,...)")
    return limits


def _factory(spec: str) -> Any:
    import importlib

    module_name, _, name = spec.partition(":")
    try:
        factory = getattr(importlib.import_module(module_name), name)
    except (ImportError, AttributeError, ValueError) as exc:
        raise _Fail(
            f"--factory {spec!r}: cannot load it ({type(exc).__name__}: {exc}); expected "
            "MODULE:FUNCTION, importable from here"
        ) from None
    return factory


@command(
    "worker",
    "run every runnable session of a store (threads, processes, rate limits)",
    _worker_arguments,
    description=(
        "Run every runnable session of a store (new ones stored by replay.submit, ones "
        "whose worker died, parked ones with an answer) until none is left (or, with "
        "--forever, until SIGTERM or Ctrl-C, which drain: sessions in progress stop at "
        "their next side-effect boundary, committed and resumable)."
    ),
    epilog=_STORE_EPILOG,
)
def _worker(args: argparse.Namespace) -> int:
    import signal

    from ._worker import Worker, WorkerError

    if args.processes < 1:
        raise _Fail(f"--processes must be 1 or more, got {args.processes}")
    if args.processes > 1:
        return _worker_processes(args)
    limits = _limits(args.limit)
    factory = _factory(args.factory)
    with _store_at(args.db) as store:

        def progress(stats: WorkerStats) -> None:
            _say(f"replay worker: {stats.line()}", sys.stderr)

        try:
            worker = Worker(
                store,
                factory,
                threads=args.threads,
                tasks=args.tasks,
                limits=limits,
                lease_seconds=args.lease,
                forever=args.forever,
                poll=args.poll,
                progress=args.progress,
                on_progress=None if args.quiet else progress,
            )
        except (WorkerError, ValueError) as exc:
            raise _Fail(str(exc), path=args.db) from None
        handlers = {
            number: signal.signal(number, lambda *_: worker.stop())
            for number in (signal.SIGTERM, signal.SIGINT)
        }
        try:
            stats = worker.run()
        finally:
            for number, handler in handlers.items():
                signal.signal(number, handler)
    if args.json:
        _print_json(stats.to_dict())
    else:
        _say(f"replay worker: {stats.line()}")
    return EXIT_OK if not stats.failed else EXIT_DIFFERENT


def _worker_processes(args: argparse.Namespace) -> int:
    """``--processes N``: N workers (this command again, each with ``--threads``);
    SIGTERM and Ctrl-C are passed on to them; their stats are summed."""
    import signal
    import subprocess

    command_line = [
        sys.executable,
        "-m",
        "replay",
        "worker",
        args.db,
        "--factory",
        args.factory,
        "--threads",
        str(args.threads),
        *([] if args.tasks is None else ["--tasks", str(args.tasks)]),
        *(f"--limit={spec}" for spec in args.limit),
        "--lease",
        str(args.lease),
        "--poll",
        str(args.poll),
        "--progress",
        str(args.progress),
        *(["--forever"] if args.forever else []),
        *(["--quiet"] if args.quiet else []),
        "--json",
    ]
    children = [
        subprocess.Popen(command_line, stdout=subprocess.PIPE, text=True)
        for _ in range(args.processes)
    ]

    def forward(number: int, frame: Any) -> None:
        for child in children:
            child.send_signal(number)

    handlers = {
        number: signal.signal(number, forward) for number in (signal.SIGTERM, signal.SIGINT)
    }
    try:
        outputs = [child.communicate()[0] for child in children]
    finally:
        for number, handler in handlers.items():
            signal.signal(number, handler)
    summed = _summed_stats(
        [(child.returncode, output) for child, output in zip(children, outputs, strict=True)]
    )
    if args.json:
        _print_json({**summed.to_dict(), "processes": args.processes})
    else:
        _say(f"replay worker: {summed.line()} ({args.processes} processes)")
    return EXIT_OK if not summed.failed else EXIT_DIFFERENT


def _summed_stats(results: list[tuple[int, str]]) -> WorkerStats:
    """The stats of ``--processes`` workers summed from each one's ``(exit status,
    --json output)``: one that exited with an error counts as a failed session; one
    stopped by SIGTERM before its handler was set (it ran nothing) counts as nothing."""
    import signal

    import msgspec

    from ._worker import WorkerStats

    total: dict[str, Any] = {"finished": {}, "parked": 0, "stopped": 0, "skipped": 0, "failed": 0}
    seconds = 0.0
    for returncode, output in results:
        if returncode == -signal.SIGTERM and not output:
            continue  # stopped while it started, before its handler: it ran nothing
        if returncode not in (EXIT_OK, EXIT_DIFFERENT):
            total["failed"] += 1  # (its error went to stderr)
            continue
        stats = msgspec.json.decode(output.strip().splitlines()[-1])
        for status, count in stats["finished"].items():
            total["finished"][status] = total["finished"].get(status, 0) + count
        for key in ("parked", "stopped", "skipped", "failed"):
            total[key] += stats[key]
        seconds = max(seconds, stats["seconds"])
    return WorkerStats(**total, seconds=seconds)


@command(
    "view",
    "write a log as one self-contained HTML page",
    _view.arguments,
    description=_view.DESCRIPTION,
    epilog=None,
)
def _view_page(args: argparse.Namespace) -> int:
    events = children = None
    if args.session is not None or _is_store(args.log):
        events = _events(args.log, args.session)
        children = _session_tree(args.log, args.session, events) if args.tree else []
    try:
        return _view.run(args, events=events, children=children)
    except _view.ViewError as exc:
        raise _Fail(str(exc)) from None


def _session_tree(path: str, session: str | None, events: Sequence[Event]) -> list[_view.Session]:
    """The child sessions of a store's session, with theirs, for the page."""
    return [
        _view.Session(kid.call_id, kid.source, kid.events, _session_tree(at, name, kid.events))
        for kid, at, name in _kids(path, session, events)
    ]


@command(
    "otel",
    "the log as OpenTelemetry spans, OTLP/JSON (needs the otel extra)",
    _otel.arguments,
    description=_otel.DESCRIPTION,
    epilog=None,
)
def _otel_spans(args: argparse.Namespace) -> int:
    events = _events(args.log, args.session)
    try:
        return _otel.command(
            args, events, _tree_of(args.log, args.session, events) if args.tree and events else None
        )
    except _otel.OTelCommandError as exc:
        raise _Fail(str(exc)) from None


def _tree_of(
    path: str, session: str | None, events: list[Event]
) -> Callable[[Sequence[Event], str], Sequence[Event] | None]:
    """The session tree under ``events`` (``agentloop.otel.record_log``'s
    ``children``): each session's children are read once, when first asked for.
    (A session is known by its first event: the recorder may copy the list.)"""
    where: dict[int, tuple[str, str | None]] = {id(events[0]): (path, session)}
    found: dict[int, dict[str, list[Event]]] = {}

    def children(of: Sequence[Event], call_id: str) -> Sequence[Event] | None:
        key = id(of[0])  # (it has a tool.call: not empty)
        kids = found.get(key)
        if kids is None:
            at, name = where[key]
            kids = found[key] = {}
            for kid, kid_path, kid_session in _kids(at, name, of):
                kids[kid.call_id] = kid.events
                where[id(kid.events[0])] = (kid_path, kid_session)
        return kids.get(call_id)

    return children


# --------------------------------------------------------------------------- main


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit code."""
    args: argparse.Namespace | None = None
    try:
        args = _parser().parse_args(argv)
        return COMMANDS[args.command].run(args)
    except _Fail as fail:
        if args is not None and getattr(args, "json", False):
            _print_json({"error": {"message": str(fail), "path": fail.path, "line": fail.line}})
        _say(f"replay: error: {fail}", sys.stderr)
        return fail.code
    except BrokenPipeError:  # e.g. piped into head: the reader has seen enough
        # Python's own recipe: nothing more reaches the closed pipe, not even the
        # flush at exit.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OK
    except Exception as exc:  # a bug; still one line
        _say(f"replay: internal error: {type(exc).__name__}: {exc}", sys.stderr)
        return EXIT_ERROR


if __name__ == "__main__":
    sys.exit(main())
