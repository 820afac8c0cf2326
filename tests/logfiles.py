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

from agentloop import SessionStartEvent

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
    """``events`` with the rules revision their ``session.start`` records set to
    ``rules``: a format-1 fixture is the run of its format-2 copy as the engine's
    rules revision 0 recorded it (no other event differs in these fixtures)."""
    return [
        msgspec.structs.replace(e, rules=rules) if type(e) is SessionStartEvent else e
        for e in events
    ]
