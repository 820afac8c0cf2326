"""Helpers for tests that edit log files.

Format 2 chains its lines (``"#"``: 16 hex digits of SHA-256 over the previous
link and the line up to ``,"#":``), so an edited line is refused for its broken
link before anything else is looked at. To reach the checks behind the chain,
these helpers relink a file as a forger would, computed from the format's
description, not with the library's code.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import msgspec

from agentloop import RunFinishedEvent, SessionCompleteEvent, SessionStartEvent
from agentloop._rules import REPLY_IN_COMPLETE

LINK_TAIL = len(b',"#":"') + 16 + len(b'"}')
FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"


def link(previous: bytes, body: bytes) -> bytes:
    return hashlib.sha256(previous + body).hexdigest()[:16].encode()


def bodies(data: bytes) -> list[bytes]:
    """The lines of a complete format-2 file, each without its link and line end."""
    lines = data.split(b"\n")
    assert lines.pop() == b"", "a complete log ends with a line end"
    for line in lines:
        assert line[-LINK_TAIL:-18] == b',"#":"', line
    return [line[:-LINK_TAIL] for line in lines]


def chain(parts: Iterable[bytes]) -> bytes:
    """A file of these line bodies, each with the link a writer gives it."""
    previous = b""
    out: list[bytes] = []
    for body in parts:
        previous = link(previous, body)
        out.append(body + b',"#":"' + previous + b'"}\n')
    return b"".join(out)


def relinked(data: bytes, edit: Callable[[list[bytes]], list[bytes]]) -> bytes:
    """``data`` with its line bodies edited, every link recomputed."""
    return chain(edit(bodies(data)))


def fixture(name: str, version: int = 2) -> bytes:
    folder = FIXTURES if version == 2 else FIXTURES / f"v{version}"
    return (folder / f"{name}.jsonl").read_bytes()


def under_rules(events: Iterable[Any], rules: int) -> list[Any]:
    """``events`` as the engine's rules revision ``rules`` records the same run: a
    format-1 fixture is the run of its format-2 copy under revision 0.

    ``session.start`` records the revision; before revision 2 the reply that ended
    the run was recorded in ``run.finished``, from 2 on in ``session.complete`` (no
    other event differs in these fixtures).
    """
    out = [
        msgspec.structs.replace(e, rules=rules) if type(e) is SessionStartEvent else e
        for e in events
    ]
    complete, finished = out[-2:] if len(out) > 1 else (None, None)
    if type(complete) is SessionCompleteEvent and type(finished) is RunFinishedEvent:
        ending = complete.reply if complete.reply is not None else finished.reply
        early = rules >= REPLY_IN_COMPLETE
        out[-2] = msgspec.structs.replace(complete, reply=ending if early else None)
        out[-1] = msgspec.structs.replace(finished, reply=None if early else ending)
    return out
