"""``python -m replay view``: a log as one self-contained HTML page.

The page is the template ``_view.html`` with the style sheet ``_view.css``, the
script ``_view.js`` and the log's events put inline: it fetches nothing (no CDN, no
fonts, no network), so it opens offline, from an e-mail or a CI artifact, and
looks the same in ten years.

Theory of operation
-------------------
The events are embedded once, as data: the JSON array of every event, whole (every
field written, defaults too: a log file leaves them out, the script reads them),
inside a ``<script type="application/json">`` element, and the page's script
builds the DOM from it in the browser. Rendering HTML here instead would make the file
several times the size of the log and draw every one of 10,000 events before the
first is seen; the script draws a step only when it is opened (a large log opens
with its steps collapsed), searches the data instead of the DOM, and can show any
event whole.

Escaping happens in two places, and nowhere else:

- here, the embedded JSON has every ``<``, ``>``, ``&``, U+2028 and U+2029
  written as a ``\\uXXXX`` escape (legal anywhere in a JSON string, where alone
  those characters can be), so no value can end the ``<script>`` element or open a
  comment in it;
- in the script, values reach the page only as text (``Node.append`` of a string,
  ``textContent``, attribute values), never as markup: ``_view.js`` uses no
  ``innerHTML`` and no ``eval`` (a test checks the source).

On top of that the page carries a Content-Security-Policy that allows exactly its
own style sheet and script (by their SHA-256) and no network loads at all, so
even a mistake in the above could not load or run anything.

A divergence renders too: ``view LOG --check`` replays the log and shows ok or the
first divergence (recorded and regenerated event, field differences) above the
timeline, with the diverging event marked in it; ``view A --diff B`` does the same
for the first event where log ``B`` differs from log ``A`` (the timeline is A's).

A session tree (DESIGN §26) renders as one page: each child session's events
follow the parent's in the embedded array (depth first), and ``sessions`` says
where each one starts and ends and which ``tool.call`` ran it; the script nests a
child's timeline (collapsible, its own children in it) under that call. The
children are a log file's next to it (:func:`replay.child_log_path`) or a store
session's (``store.children``); the escaping above is the same for every event.
"""

from __future__ import annotations

import argparse
import base64
import functools
import hashlib
import html
import os
import re
import shlex
import sys
from collections.abc import Iterable, Sequence
from importlib import resources
from typing import Any, NamedTuple

import msgspec

from agentloop import AgentLoopError, Event, ToolCallEvent, __version__, encode_event

from ._diff import diff_events
from ._log import (
    LogError,
    TornLogError,
    _blob_ref,
    _media_fields,
    _swap_media,
    _whole_line,
    read_log,
)
from ._replay import ReplayDivergence, ReplayError, _line, replay
from ._tree import subtree

__all__ = [
    "DESCRIPTION",
    "Report",
    "Session",
    "ViewError",
    "arguments",
    "check_report",
    "diff_report",
    "render_html",
    "run",
    "torn_message",
    "view",
    "view_html",
]

EXIT_OK = 0
EXIT_DIFFERENT = 1
EXIT_ERROR = 2


class ViewError(AgentLoopError):
    """One line for stderr, and an exit code (the CLI prints ``replay: error: ...``)."""

    def __init__(self, message: str, code: int = EXIT_ERROR) -> None:
        super().__init__(message)
        self.code = code


class Report(msgspec.Struct, frozen=True, kw_only=True):
    """A replay check or a comparison of two logs, as the page shows it.

    ``index`` is the position of the event to mark in the timeline (``None``: none
    of its events). ``left``/``right`` are the two events compared there, encoded
    as in the log (``None`` where one side has no event); ``labels`` name the sides.
    """

    kind: str
    ok: bool
    title: str
    text: str = ""
    index: int | None = None
    labels: tuple[str, str] = ("", "")
    left: msgspec.Raw | None = None
    right: msgspec.Raw | None = None
    left_summary: str = ""
    right_summary: str = ""
    differences: tuple[str, ...] = ()
    hint: str = ""


def _every_field(cls: type[msgspec.Struct]) -> tuple[str, ...]:
    return cls.__struct_fields__


def _whole(event: Event) -> msgspec.Raw:
    """``event`` as JSON with every field, defaults too (what the script reads)."""
    return msgspec.Raw(_whole_line(event, _every_field))


def _raw(event: Event | None) -> msgspec.Raw | None:
    return None if event is None else _whole(event)


def check_report(events: Sequence[Event]) -> Report:
    """Replay ``events`` and report ok or the first divergence."""
    try:
        outcome = replay(events)
    except ReplayDivergence as d:
        return Report(
            kind="check",
            ok=False,
            title=f"Replay diverged at event #{d.sequence}",
            text=d.reason,
            index=d.sequence if d.sequence < len(events) else None,
            labels=("recorded", "regenerated"),
            left=_raw(d.expected),
            right=_raw(d.actual),
            left_summary=_line(d.expected),
            right_summary=_line(d.actual),
            differences=tuple(d.differences),
            hint=d.hint,
        )
    except ReplayError as exc:
        return Report(kind="check", ok=False, title="Nothing replayed", text=str(exc))
    result = outcome.result
    if result is None:
        waits = type(outcome.pending).__name__ if outcome.pending is not None else "nothing"
        end = f"the run is unfinished (it waits for a {waits})"
    else:
        end = f"the run {result.status} ({result.reason}) after {result.steps} step(s)"
    return Report(
        kind="check",
        ok=True,
        title="Replay matched",
        text=f"All {len(events)} events were regenerated byte for byte; {end}.",
    )


def diff_report(a: Sequence[Event], b: Sequence[Event], names: tuple[str, str]) -> Report:
    """Compare logs ``a`` and ``b`` event by event; report the first difference."""
    labels = (f"A  {names[0]}", f"B  {names[1]}")
    for index, (x, y) in enumerate(zip(a, b, strict=False)):
        if encode_event(x) != encode_event(y):
            return Report(
                kind="diff",
                ok=False,
                title=f"The logs differ at event #{index}",
                text=f"The timeline below is A's. A is {names[0]}; B is {names[1]}.",
                index=index,
                labels=labels,
                left=_raw(x),
                right=_raw(y),
                left_summary=_line(x),
                right_summary=_line(y),
                differences=tuple(diff_events(x, y, labels=("A", "B"))),
            )
    if len(a) == len(b):
        return Report(
            kind="diff",
            ok=True,
            title="The logs are identical",
            text=f"{len(a)} events, byte for byte: {names[0]} and {names[1]}.",
        )
    shorter = min(len(a), len(b))
    name, longer = ("A", a) if len(a) > len(b) else ("B", b)
    extra = longer[shorter]
    return Report(
        kind="diff",
        ok=False,
        title=f"The logs agree on their first {shorter} events",
        text=(
            f"{name} goes on with {len(longer) - shorter} more, from #{extra.sequence} "
            f"{extra.type}. The timeline below is A's."
        ),
        index=shorter if name == "A" else None,
        labels=labels,
        left=_raw(a[shorter] if name == "A" else None),
        right=_raw(b[shorter] if name == "B" else None),
        left_summary=_line(a[shorter] if name == "A" else None),
        right_summary=_line(b[shorter] if name == "B" else None),
    )


# --------------------------------------------------------------------------- the tree


class Session(NamedTuple):
    """A child session as the page nests it under the call that ran it.

    Attributes:
        call_id: the parent's ``tool.call`` that ran it.
        source: its log file, or its session id in a store.
        events: its events.
        children: its own children, in the order of their calls.
    """

    call_id: str
    source: str
    events: Sequence[Event]
    children: Sequence[Session] = ()


def file_tree(events: Sequence[Event], path: str) -> list[Session]:
    """The children of the log file ``path`` (``events``), found next to it
    (:func:`replay.child_log_path`), with theirs, and so on."""
    return [
        Session(kid.call_id, kid.source, kid.events, file_tree(kid.events, kid.source))
        for kid in subtree(events, path=path)
    ]


def _sessions(
    events: Sequence[Event], children: Sequence[Session]
) -> tuple[list[Event], list[dict[str, Any]]]:
    """Every event of the tree, depth first, and where each session is in them:
    ``start``/``end``, its ``parent`` session and the index of the ``call`` that
    ran it (a child whose call is not in its parent's events is left out)."""
    everything: list[Event] = []
    sessions: list[dict[str, Any]] = []

    def add(
        session_events: Sequence[Event],
        kids: Sequence[Session],
        info: dict[str, Any],
    ) -> None:
        number = len(sessions)
        start = len(everything)
        sessions.append({**info, "start": start, "end": start + len(session_events)})
        everything.extend(session_events)
        calls: dict[str, int] = {}
        for index, event in enumerate(session_events):
            if type(event) is ToolCallEvent:
                calls.setdefault(event.call.id, start + index)
        for kid in kids:
            if kid.call_id in calls:
                link = {"source": kid.source, "call_id": kid.call_id, "parent": number}
                add(kid.events, kid.children, {**link, "call": calls[kid.call_id]})

    add(events, children, {"source": "", "call_id": None, "parent": None, "call": None})
    return everything, sessions


# --------------------------------------------------------------------------- the page

_MARKER = re.compile(r"@@([A-Z_]+)@@")
# A number JavaScript would print otherwise than the log has it: a float with an
# integral value (1.0), one with an exponent (1e-07, 1e+16) or an integer past 2**53
# (16 digits or more). Matches inside strings only make the page a little slower.
_INEXACT_NUMBER = re.compile(rb"[0-9]\.0[,}\]]|[0-9][eE][-+]?[0-9]|[0-9]{16}")
# JSON may hold these only inside strings, where a \uXXXX escape means the same.
# The bidirectional controls are escaped too, so the page's source never reorders
# what an editor or `view-source:` shows (the script shows them as <U+XXXX>).
_BIDI_CONTROLS = (0x061C, 0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A))
_JSON_ESCAPES = (
    (b"<", b"\\u003c"),
    (b">", b"\\u003e"),
    (b"&", b"\\u0026"),
    ("\u2028".encode(), b"\\u2028"),
    ("\u2029".encode(), b"\\u2029"),
    *((chr(c).encode(), f"\\u{c:04x}".encode()) for c in _BIDI_CONTROLS),
)


@functools.cache
def _asset(name: str) -> str:
    return (resources.files(__package__) / name).read_text(encoding="utf-8")


def _csp_hash(text: str) -> str:
    digest = hashlib.sha256(text.encode("utf-8")).digest()
    return "sha256-" + base64.b64encode(digest).decode("ascii")


def embed_json(data: bytes) -> str:
    """``data`` (JSON) made safe to put inside a ``<script>`` element."""
    for raw, escaped in _JSON_ESCAPES:
        data = data.replace(raw, escaped)
    return data.decode("utf-8")


def render_html(
    events: Sequence[Event],
    *,
    source: str = "",
    report: Report | None = None,
    torn: str = "",
    children: Sequence[Session] = (),
) -> str:
    """The page for ``events``.

    Args:
        events: the log's events (any event type: those this viewer does not know
            render generically).
        source: where the log came from (the page's title and header).
        report: a replay check or a comparison, shown above the timeline.
        torn: a warning shown above everything (e.g. the log's last line is torn).
        children: the session's child sessions (DESIGN §26), each nested under the
            ``tool.call`` that ran it.
    """
    name = os.path.basename(source) or "log"
    generator = f"agentloop {__version__} · python -m replay view"
    meta = {
        "title": f"{name} · agentloop session",
        "source": source,
        "generator": generator,
        "torn": torn,
    }
    # Media bytes once per page, by SHA-256, as in a log file: a block's data is
    # its blob's hash (see _view.js, mediaBlock).
    blobs: dict[str, dict[str, object]] = {}

    def deflate(block: Any) -> Any:
        data = block.data
        digest = hashlib.sha256(data).hexdigest()
        if digest not in blobs:
            blobs[digest] = {"media_type": block.media_type, "size": len(data), "data": data}
        return msgspec.structs.replace(block, data=_blob_ref(digest))

    everything, sessions = _sessions(events, children)
    sessions[0]["source"] = source
    data = msgspec.json.encode(
        {
            "meta": meta,
            "events": [
                _whole(_swap_media(event, deflate) if _media_fields(event.__class__) else event)
                for event in everything
            ],
            "sessions": sessions,
            "report": report,
            "blobs": blobs,
        }
    )
    script, style = _asset("_view.js"), _asset("_view.css")
    values = {
        "SCRIPT_HASH": _csp_hash(script),
        "STYLE_HASH": _csp_hash(style),
        "GENERATOR": html.escape(generator),
        "NUMBERS": "exact" if _INEXACT_NUMBER.search(data) else "plain",
        "STYLE": style,
        "DATA": embed_json(data),
        "SCRIPT": script,
    }
    # One pass: what is put in is never searched for markers again.
    return _MARKER.sub(lambda m: values[m.group(1)], _asset("_view.html"))


# --------------------------------------------------------------------------- the Python API


def _page(
    events: Sequence[Event],
    source: str,
    *,
    check: bool,
    other: tuple[Sequence[Event], str] | None,
    torn: str = "",
    children: Sequence[Session] = (),
) -> tuple[str, Report | None]:
    """The page, and the report on it (``--check``/``--diff``), if any."""
    report = None
    if check:
        report = check_report(events)
    elif other is not None:
        report = diff_report(events, other[0], (source, other[1]))
    page = render_html(events, source=source, report=report, torn=torn, children=children)
    return page, report


def _load(log: Iterable[Event] | str | os.PathLike[str], what: str) -> tuple[list[Event], str]:
    if isinstance(log, (str, os.PathLike)):
        return read_log(log), os.fspath(log)
    if isinstance(log, bytes):
        raise TypeError(f"{what} must be events or a path (str or os.PathLike), got bytes")
    events = list(log)
    for index, event in enumerate(events):
        if not isinstance(event, Event):
            raise TypeError(f"{what}: item {index} is not an agentloop event: {event!r:.200}")
    return events, ""


def view_html(
    log: Iterable[Event] | str | os.PathLike[str],
    *,
    check: bool = False,
    diff: Iterable[Event] | str | os.PathLike[str] | None = None,
    source: str | None = None,
    tree: bool = True,
) -> str:
    """The self-contained HTML page of a log (what ``python -m replay view`` writes).

    Args:
        log: the events (``read_log``'s, an ``EventLog``'s, a store's) or the path of
            a log file.
        check: replay the log and show ok or the first divergence above the timeline.
        diff: another log (events or a path): show the first event where it differs.
        source: where the log came from, for the page's title (default: the path).
        tree: for a path, nest the child sessions' logs found next to it
            (:func:`replay.child_log_path`) under the calls that ran them.

    Raises:
        LogError: a path that is not a readable log (a torn one included:
            :class:`TornLogError` holds its intact events, which render).
        OSError: the file cannot be read.
        TypeError: ``log`` or ``diff`` is neither events nor a path.
    """
    if check and diff is not None:
        raise ValueError("check and diff are exclusive: the page shows one report")
    events, path = _load(log, "log")
    other = None
    if diff is not None:
        other_events, other_path = _load(diff, "diff")
        other = (other_events, other_path or "B")
    name = path if source is None else source
    children = file_tree(events, path) if tree and path else []
    return _page(events, name, check=check, other=other, children=children)[0]


def view(
    log: Iterable[Event] | str | os.PathLike[str],
    output: str | os.PathLike[str] | None = None,
    *,
    check: bool = False,
    diff: Iterable[Event] | str | os.PathLike[str] | None = None,
    source: str | None = None,
    tree: bool = True,
) -> str:
    """Write the page of a log (:func:`view_html`) to ``output``; returns its path.

    ``output`` defaults to the log's path with the suffix ``.html`` (required when
    ``log`` is events). A log file is never overwritten (``ValueError``).
    """
    if output is None:
        if not isinstance(log, (str, os.PathLike)):
            raise TypeError("view(events) needs output=: the path of the page to write")
        output = os.path.splitext(os.fspath(log))[0] + ".html"
    target = os.fspath(output)
    for other in (log, diff):
        if isinstance(other, (str, os.PathLike)) and _same_file(target, os.fspath(other)):
            raise ValueError(f"{target}: that is a log, not overwritten; choose another output")
    page = view_html(log, check=check, diff=diff, source=source, tree=tree)
    with open(target, "w", encoding="utf-8") as file:
        file.write(page)
    return target


# --------------------------------------------------------------------------- the command


#: ``python -m replay view --help``'s description.
DESCRIPTION = """\
Write LOG as one HTML file that opens offline in any browser: steps, model text and
thinking, tool calls and results, pauses, errors, usage.

Exit codes: 0 written; 1 written, and --check or --diff found a divergence; 2 a
usage error or a log that cannot be read (a torn log is still written, with its
intact events)."""


def torn_message(exc: TornLogError, path: str) -> str:
    """What a command-line user reads about a torn log: what to run to repair it."""
    message = str(exc).replace(" (TornLogError.events)", "")
    return (
        f"{message}; python -m replay repair {shlex.quote(path)} keeps them and drops the torn line"
    )


def arguments(view: argparse.ArgumentParser) -> None:
    """Add ``view``'s arguments to its subparser (``python -m replay view``)."""
    view.add_argument("log", help="the log file (or a session store, with --session ID)")
    view.add_argument(
        "--session", metavar="ID", help="LOG is a session store: show this session of it"
    )
    view.add_argument(
        "-o",
        "--output",
        metavar="FILE",
        help=(
            "the page to write (default: LOG with the suffix .html, for a session "
            "DB.ID.html; - for stdout)"
        ),
    )
    against = view.add_mutually_exclusive_group()
    against.add_argument(
        "--check", action="store_true", help="replay LOG and show ok or the divergence"
    )
    against.add_argument(
        "--diff", metavar="B", help="compare LOG with log B and show the first difference"
    )
    view.add_argument(
        "--no-tree",
        dest="tree",
        action="store_false",
        help="this session only (default: its child sessions too, DESIGN §26, each nested "
        "under the call that ran it: a store's children, or a file's next to it, named "
        "<log>.<call id>.jsonl)",
    )


def _read(path: str, *, allow_torn: bool) -> tuple[list[Event], str]:
    try:
        return read_log(path), ""
    except TornLogError as exc:
        if not allow_torn:
            raise ViewError(torn_message(exc, path)) from None
        return exc.events, str(exc).replace(" (TornLogError.events)", "")
    except LogError as exc:
        raise ViewError(str(exc)) from None
    except OSError as exc:
        raise ViewError(f"{path}: cannot read: {exc.strerror or exc}") from None


def _output_path(log: str, output: str | None, session: str | None) -> str | None:
    """Where to write (``None``: stdout); never over one of the logs."""
    if output == "-":
        return None
    if output is None:
        stem = os.path.splitext(log)[0]
        if session is not None:  # DB.ID.html, the id kept to characters safe in a name
            stem += "." + (re.sub(r"[^A-Za-z0-9_.-]", "_", session).lstrip(".") or "_")
        output = stem + ".html"
    return output


def _same_file(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def run(
    args: argparse.Namespace,
    *,
    events: Sequence[Event] | None = None,
    children: Sequence[Session] | None = None,
) -> int:
    """``python -m replay view``; returns the exit code or raises :class:`ViewError`.

    ``events`` are the log's when the caller read them (a session of a store,
    ``--session``), and ``children`` its child sessions; otherwise ``args.log`` is
    read as a log file, and (unless ``--no-tree``) its children next to it.
    """
    session = getattr(args, "session", None)
    source = args.log if session is None else f"{args.log}, session {session!r}"
    torn = ""
    if events is None:
        events, torn = _read(args.log, allow_torn=True)
        if children is None and args.tree:
            try:
                children = file_tree(events, args.log)
            except LogError as exc:  # (a child's log, named in the message)
                raise ViewError(str(exc)) from None
    other = None
    if args.diff is not None:
        other = (_read(args.diff, allow_torn=False)[0], args.diff)
    output = _output_path(args.log, args.output, session)
    for log in (args.log, args.diff):
        if output is not None and log is not None and _same_file(output, log):
            raise ViewError(f"{output}: that is a log, not overwritten; choose another -o FILE")
    text, report = _page(
        events, source, check=args.check, other=other, torn=torn, children=children or ()
    )
    page = text.encode("utf-8")
    if output is None:
        sys.stdout.buffer.write(page)
        sys.stdout.flush()
        said = sys.stderr
    else:
        try:
            with open(output, "wb") as file:
                file.write(page)
        except OSError as exc:
            raise ViewError(f"{output}: cannot write: {exc.strerror or exc}") from None
        said = sys.stdout
        print(f"wrote {output} ({len(events)} events, {len(page):,} bytes)", file=said)
    if report is not None:
        print(f"{report.title}: {report.text}" if report.text else report.title, file=said)
    if torn:
        raise ViewError(f"{torn}; the page shows them")
    return EXIT_OK if report is None or report.ok else EXIT_DIFFERENT
