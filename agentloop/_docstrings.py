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
    entry_indent: int | None = None
    name: str | None = None
    parts: list[str] = []
    while index < len(lines):
        line = lines[index]
        if not line.strip():
            index += 1
            continue
        indent = _indent(line)
        if indent == 0:
            break  # the next section (or prose) at the left margin
        if entry_indent is None:
            entry_indent = indent
        if indent <= entry_indent:
            _store(found, name, parts)
            match = _GOOGLE_ENTRY.match(line.strip())
            name, parts = (match.group(1), [match.group(2)]) if match else (None, [])
        else:
            parts.append(line.strip())
        index += 1
    _store(found, name, parts)
    return index


def _numpy(lines: list[str], index: int, found: dict[str, str]) -> int:
    """Read a NumPy ``Parameters`` section (entries at the margin, text indented)."""
    name: str | None = None
    parts: list[str] = []
    while index < len(lines):
        line = lines[index]
        if not line.strip():
            index += 1
            continue
        if index + 1 < len(lines) and _UNDERLINE.match(lines[index + 1].strip()):
            break  # the next section's header
        if _indent(line) == 0:
            _store(found, name, parts)
            match = _NUMPY_ENTRY.match(line.strip())
            name, parts = (match.group(1), []) if match else (None, [])
        else:
            parts.append(line.strip())
        index += 1
    _store(found, name, parts)
    return index


def _store(found: dict[str, str], name: str | None, parts: list[str]) -> None:
    text = " ".join(part for part in parts if part)
    if name is not None and text:
        found.setdefault(name, text)
