"""Plain JSON values: what the loop accepts as tool arguments, payloads and schemas."""

from __future__ import annotations

import math
import re
from typing import Any

__all__ = ["INT_END", "INT_MIN", "SURROGATE", "json_problem", "surrogate_problem"]

#: msgspec encodes int64 and uint64: integers must lie in ``INT_MIN <= n < INT_END``.
INT_MIN = -(2**63)
INT_END = 2**64

SURROGATE = re.compile("[\ud800-\udfff]")


def surrogate_problem(text: str, where: str) -> str | None:
    """Why ``text`` cannot be written as UTF-8 JSON (a lone surrogate), or ``None``.

    Such strings come from bytes decoded with ``errors="surrogateescape"`` (file
    names from ``os.listdir``, say) or from JSON escapes like ``"\\ud800"``. The
    log could not hold them, so the loop refuses them where they enter.
    """
    if text.isascii():
        return None
    match = SURROGATE.search(text)
    if match is None:
        return None
    return (
        f"{where} is not valid Unicode: lone surrogate {match.group()!r} at index "
        f"{match.start()} (encode it first, e.g. with errors='backslashreplace')"
    )


def json_problem(value: object, path: str = "$") -> str | None:
    """Why ``value`` is not plain, finite JSON (or ``None`` when it is)."""
    stack: list[tuple[Any, str]] = [(value, path)]
    while stack:
        item, where = stack.pop()
        kind = type(item)
        if kind is dict:
            for key, sub in item.items():
                if type(key) is not str:
                    return f"{where}: object key {key!r} is not a string"
                problem = surrogate_problem(key, f"{where}: object key {key!r}")
                if problem is not None:
                    return problem
                stack.append((sub, f"{where}.{key}"))
        elif kind is list or kind is tuple:
            stack.extend((sub, f"{where}[{i}]") for i, sub in enumerate(item))
        elif kind is float:
            if not math.isfinite(item):
                return f"{where}: {item!r} is not a finite number"
        elif kind is int:
            if not INT_MIN <= item < INT_END:
                return f"{where}: integer {item} is outside the 64-bit range"
        elif kind is str:
            problem = surrogate_problem(item, where)
            if problem is not None:
                return problem
        elif kind is not bool and item is not None:
            return f"{where}: {kind.__name__} is not a JSON value"
    return None
