"""Parameter descriptions from a docstring's ``Args:`` (Google) or ``Parameters``
(NumPy) section, for the JSON Schema ``@tool`` builds.

Only what a schema needs: each parameter's name and the text describing it.
Anything this parser does not recognize gives no description, never an error.

>>> parameter_descriptions('''Add.
...
... Args:
...     left (int): the first number.
...     right: the second,
...         on two lines.
... ''')
{'left': 'the first number.', 'right': 'the second, on two lines.'}
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable
from typing import Final

__all__ = ["parameter_descriptions"]

_GOOGLE_HEADERS: Final = frozenset(
    ("args:", "arguments:", "parameters:", "params:", "keyword args:", "keyword arguments:")
)
_NUMPY_HEADERS: Final = frozenset(("parameters", "other parameters"))
_GOOGLE_ENTRY: Final = re.compile(r"^\*{0,2}(\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$")
_NUMPY_ENTRY: Final = re.compile(r"^(\w+)\s*(?::.*)?$")
_UNDERLINE: Final = re.compile(r"^-{3,}\s*$")


def parameter_descriptions(docstring: str | None) -> dict[str, str]:
    """``{parameter name: description}`` from ``docstring`` (may be empty)."""
    if not docstring:
        return {}
    lines = inspect.cleandoc(docstring).splitlines()
    found: dict[str, str] = {}
    index = 0
    while index < len(lines):
        header = lines[index].strip().lower()
        if header in _GOOGLE_HEADERS and not _indent(lines[index]):
            index = _google(lines, index + 1, found)
        elif (
            header in _NUMPY_HEADERS
            and index + 1 < len(lines)
            and _UNDERLINE.match(lines[index + 1].strip())
        ):
            index = _numpy(lines, index + 2, found)
        else:
            index += 1
    return found


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def _google(lines: list[str], index: int, found: dict[str, str]) -> int:
    """Read the entries of an ``Args:`` section from ``index``; return where it ends."""
    first = next((line for line in lines[index:] if line.strip()), "")
    entry_indent = _indent(first)

    def entry(line: str) -> tuple[str | None, str] | None:
        if _indent(line) > entry_indent:
            return None  # a continuation line
        match = _GOOGLE_ENTRY.match(line.strip())
        return (match.group(1), match.group(2)) if match else (None, "")

    # The section ends at the next line at the left margin (a header, or prose).
    return _section(lines, index, found, entry, lambda at: _indent(lines[at]) == 0)


def _numpy(lines: list[str], index: int, found: dict[str, str]) -> int:
    """Read a NumPy ``Parameters`` section (entries at the margin, text indented)."""

    def entry(line: str) -> tuple[str | None, str] | None:
        if _indent(line):
            return None
        match = _NUMPY_ENTRY.match(line.strip())
        return (match.group(1), "") if match else (None, "")

    def ends(at: int) -> bool:  # the next section's header (underlined)
        return at + 1 < len(lines) and _UNDERLINE.match(lines[at + 1].strip()) is not None

    return _section(lines, index, found, entry, ends)


def _section(
    lines: list[str],
    index: int,
    found: dict[str, str],
    entry: Callable[[str], tuple[str | None, str] | None],
    ends: Callable[[int], bool],
) -> int:
    """Collect ``name: text`` entries from ``index`` until ``ends(line index)``;
    ``entry(line)`` says whether a line starts an entry (its name and first text)."""
    name: str | None = None
    parts: list[str] = []
    while index < len(lines):
        line = lines[index]
        if line.strip():
            if ends(index):
                break
            started = entry(line)
            if started is None:
                parts.append(line.strip())
            else:
                _store(found, name, parts)
                name, parts = started[0], [started[1]]
        index += 1
    _store(found, name, parts)
    return index


def _store(found: dict[str, str], name: str | None, parts: list[str]) -> None:
    text = " ".join(part for part in parts if part)
    if name is not None and text:
        found.setdefault(name, text)
