"""Plain JSON values: what the loop accepts as tool arguments, payloads and schemas.

Every walk here is iterative (an explicit stack, never recursion), so a value
nested 100,000 levels deep is checked, copied and described like any other; a
value that contains itself (``d = {}; d["a"] = d``) is refused instead of walked
forever; and a value whose shared containers would make it enormous once written
out (``x = [x, x]`` sixty times) is refused after :data:`MAX_RECORDED_VALUES`
values instead of exhausting memory. Paths (``$.a[2].b``) are built only for the
value a message names.
"""

from __future__ import annotations

import math
import re
from typing import Any, Final

__all__ = [
    "CONTAINERS",
    "INT_END",
    "INT_MIN",
    "MAX_ANSWER_DEPTH",
    "MAX_FLOAT_INT",
    "MAX_RECORDED_VALUES",
    "SURROGATE",
    "Scan",
    "answer_problem",
    "clean_text",
    "copy_json",
    "finite_number",
    "int_text",
    "json_equal",
    "json_problem",
    "non_finite_path",
    "path_text",
    "scan",
    "surrogate_problem",
    "value_text",
]

#: msgspec encodes int64 and uint64: integers must lie in ``INT_MIN <= n < INT_END``.
INT_MIN = -(2**63)
INT_END = 2**64
#: How deep an answer's payload may nest (the root counts 1) where it leaves the
#: process (a durable store, a Temporal update): far more than an approval needs,
#: far less than msgspec's recursion reaches, so it decodes on any stack.
MAX_ANSWER_DEPTH: Final = 256
#: Ints within this bound (either sign) convert to a finite float.
MAX_FLOAT_INT: Final = 2**1023

#: Most values a JSON value may hold once written out, shared containers counted
#: each time they appear. Beyond that it could not be written to the log in
#: reasonable time and space (a few shared lists nest into 2**60 values).
MAX_RECORDED_VALUES: Final = 2**18

#: The container types of plain JSON data as the loop receives it.
CONTAINERS = frozenset({dict, list, tuple})

SURROGATE = re.compile("[\ud800-\udfff]")

_LEAVE: Final = object()  # stack marker: the walk leaves a container

# Paths longer than this many steps are shown with their middle left out.
_PATH_HEAD: Final = 24
_PATH_TAIL: Final = 16


def _first_surrogate(text: str) -> int:
    """The index of the first lone surrogate in ``text``, or -1.

    UTF-16 has no encoding for a surrogate code point standing alone in a ``str``,
    and CPython's encoder finds one at C speed (10-20 times faster than searching
    with :data:`SURROGATE`): the encoding is the search, its error the answer.
    """
    if text.isascii():  # O(1): CPython knows it from how the str is stored
        return -1
    try:
        text.encode("utf-16-le")
    except UnicodeEncodeError as exc:
        return exc.start
    return -1


def clean_text(text: str) -> bool:
    """Whether ``text`` holds no lone surrogate (it can be written as UTF-8 JSON).

    Hot paths test ``text.isascii() or clean_text(text)``: most text is ASCII.
    """
    return _first_surrogate(text) < 0


def surrogate_problem(text: str, where: str) -> str | None:
    """Why ``text`` cannot be written as UTF-8 JSON (a lone surrogate), or ``None``.

    Such strings come from bytes decoded with ``errors="surrogateescape"`` (file
    names from ``os.listdir``, say) or from JSON escapes like ``"\\ud800"``. The
    log could not hold them, so the loop refuses them where they enter.
    """
    index = _first_surrogate(text)
    if index < 0:
        return None
    return (
        f"{where} is not valid Unicode: lone surrogate {text[index]!r} at index "
        f"{index} (encode it first, e.g. with errors='backslashreplace')"
    )


def finite_number(value: object) -> bool:
    """An ``int`` or ``float`` (not a bool) that ``float()`` makes a finite float.

    ``math.isfinite(10**400)`` raises ``OverflowError``; this says ``False``.
    """
    kind = type(value)
    if kind is float:
        return math.isfinite(value)  # type: ignore[arg-type]
    return kind is int and -MAX_FLOAT_INT <= value <= MAX_FLOAT_INT  # type: ignore[operator]


def int_text(value: int) -> str:
    """``value`` in decimal, or its size when it is too long to print (or to convert:
    Python refuses ``str()`` of ints over 4300 digits)."""
    if value.bit_length() <= 128:
        return str(value)
    return f"{'-' if value < 0 else ''}(an int of {value.bit_length()} bits)"


def value_text(value: object) -> str:
    """``repr(value)`` for a message, ints too long to print shown by their size."""
    return int_text(value) if type(value) is int else repr(value)


# A path is a chain of (parent, key) pairs, the root being None: O(1) per step,
# formatted only when a message needs it.
_Node = tuple[Any, "str | int"] | None


def path_text(root: str, node: _Node) -> str:
    """The path of ``node`` below ``root``: ``$.a[2].b`` (middle left out when long)."""
    keys: list[str | int] = []
    while node is not None:
        node, key = node
        keys.append(key)
    keys.reverse()
    if len(keys) > _PATH_HEAD + _PATH_TAIL:
        left_out = len(keys) - _PATH_HEAD - _PATH_TAIL
        return (
            root
            + _steps(keys[:_PATH_HEAD])
            + f"…({left_out:,} levels)…"
            + _steps(keys[-_PATH_TAIL:])
        )
    return root + _steps(keys)


def _steps(keys: list[str | int]) -> str:
    return "".join(f"[{key}]" if type(key) is int else f".{key}" for key in keys)


class Scan:
    """What :func:`scan` found: the first problem of each kind and the value's size."""

    __slots__ = ("code_points", "deepest", "deepest_node", "entries", "semantic", "structural")

    def __init__(self) -> None:
        self.structural: str | None = None
        self.semantic: str | None = None
        self.code_points = 0
        self.entries = 0
        self.deepest = 0
        self.deepest_node: _Node = None  # where the deepest container is (path_text)


def scan(value: object, root: str, *, numbers_are_structural: bool) -> Scan:
    """Walk ``value`` once, iteratively; report problems in walk order, and its size.

    Structural problems stop the walk: a type JSON has no form for, a non-string
    object key, a lone surrogate, a container that contains itself, more than
    :data:`MAX_RECORDED_VALUES` values. Non-finite floats and integers outside the
    64-bit range are structural too when ``numbers_are_structural``; otherwise the
    first one is ``semantic`` and the walk goes on (a structural problem further
    on still wins). Sizes count nested objects/arrays on the deepest path (the root
    counts 1), object fields plus array elements, and code points of keys and
    strings; ``values == entries + 1``.
    """
    found = Scan()
    entries = code_points = deepest = 0
    deepest_node: _Node = None
    on_path: set[int] = set()  # ids of the containers above the current item
    stack: list[tuple[Any, int, _Node]] = [(value, 1, None)]
    pop, push = stack.pop, stack.append
    while stack:
        item, depth, node = pop()
        if item is _LEAVE:
            on_path.discard(depth)  # the container's id travels in the depth slot
            continue
        kind = type(item)
        if kind is str:
            if not item.isascii():
                problem = surrogate_problem(item, path_text(root, node))
                if problem is not None:
                    found.structural = problem
                    return found
            code_points += len(item)
        elif kind is dict or kind is list or kind is tuple:
            ident = id(item)
            if ident in on_path:
                found.structural = (
                    f"{path_text(root, node)}: cyclic reference (a container that "
                    "contains itself cannot be written as JSON)"
                )
                return found
            if entries + len(item) >= MAX_RECORDED_VALUES:  # values == entries + 1
                found.structural = (
                    f"{path_text(root, node)}: more than {MAX_RECORDED_VALUES:,} values "
                    "(shared containers counted each time they appear): too large to record"
                )
                return found
            on_path.add(ident)
            push((_LEAVE, ident, None))  # popped after the children: leaving it
            if depth > deepest:
                deepest, deepest_node = depth, node
            entries += len(item)
            if kind is dict:
                for key, sub in item.items():
                    if type(key) is not str:
                        found.structural = (
                            f"{path_text(root, node)}: object key {key!r} is not a string"
                        )
                        return found
                    if not key.isascii():
                        problem = surrogate_problem(
                            key, f"{path_text(root, node)}: object key {key!r}"
                        )
                        if problem is not None:
                            found.structural = problem
                            return found
                    code_points += len(key)
                    push((sub, depth + 1, (node, key)))
            else:
                for index, sub in enumerate(item):
                    push((sub, depth + 1, (node, index)))
        elif kind is float:
            if not math.isfinite(item) and (numbers_are_structural or found.semantic is None):
                problem = f"{path_text(root, node)}: {item!r} is not a finite number"
                if numbers_are_structural:
                    found.structural = problem
                    return found
                found.semantic = problem
        elif kind is int:
            if not INT_MIN <= item < INT_END and (numbers_are_structural or found.semantic is None):
                problem = (
                    f"{path_text(root, node)}: integer {int_text(item)} is outside the 64-bit range"
                )
                if numbers_are_structural:
                    found.structural = problem
                    return found
                found.semantic = problem
        elif kind is not bool and item is not None:
            found.structural = f"{path_text(root, node)}: {kind.__name__} is not a JSON value"
            return found
    found.code_points = code_points
    found.entries = entries
    found.deepest = deepest
    found.deepest_node = deepest_node
    return found


def non_finite_path(value: object) -> str | None:
    """The path of the first non-finite float in builtins ``value`` (walk order), or
    ``None``. The value must not contain itself."""
    stack: list[tuple[Any, _Node]] = [(value, None)]
    while stack:
        item, node = stack.pop()
        kind = type(item)
        if kind is float:
            if not math.isfinite(item):
                return f"{path_text('$', node)}: {item!r}"
        elif kind is dict:
            stack.extend((sub, (node, key)) for key, sub in item.items())
        elif kind is list or kind is tuple:
            stack.extend((sub, (node, index)) for index, sub in enumerate(item))
    return None


def answer_problem(payload: object) -> str | None:
    """Why an answer's payload cannot leave the process (for a durable store or a
    Temporal update), or ``None``: not plain, finite JSON (a cycle included), or
    nested deeper than :data:`MAX_ANSWER_DEPTH`. Walked without recursion, as
    msgspec would raise ``RecursionError`` on a cycle or a very deep value."""
    found = scan(payload, "payload", numbers_are_structural=True)
    if found.structural is not None:
        return f"it is not plain JSON: {found.structural}"
    if found.deepest > MAX_ANSWER_DEPTH:
        return (
            f"its payload nests {found.deepest} levels deep, more than MAX_ANSWER_DEPTH "
            f"({MAX_ANSWER_DEPTH})"
        )
    return None


def json_problem(value: object, path: str = "$") -> str | None:
    """Why ``value`` is not plain, finite JSON the log can hold (or ``None`` when it is)."""
    return scan(value, path, numbers_are_structural=True).structural


def json_equal(a: Any, b: Any) -> bool:
    """``a == b`` for plain JSON values (already checked: no cycles), without recursion.

    Python's own ``==`` recurses in C and raises ``RecursionError`` about a
    thousand levels down; this walks with a stack and answers as ``==`` does: dicts
    by keys and values whatever their order, lists and tuples item by item (a list
    never equals a tuple), numbers by value (``1 == 1.0``).
    """
    stack: list[tuple[Any, Any]] = [(a, b)]
    while stack:
        x, y = stack.pop()
        if x is y:
            continue
        kind = type(x)
        if kind is dict:
            if type(y) is not dict or x.keys() != y.keys():
                return False
            stack.extend((value, y[key]) for key, value in x.items())
        elif kind is list or kind is tuple:
            if type(y) is not kind or len(x) != len(y):
                return False
            stack.extend(zip(x, y, strict=True))
        elif type(y) in CONTAINERS or x != y:
            return False
    return True


def copy_json(value: Any) -> Any:
    """A deep copy of plain JSON data (hooks never alias the loop's own data).

    Iterative, so arbitrarily deep input cannot exhaust the stack; tuples become
    lists, as in JSON. Only for values already checked (a cycle would not end).
    """
    kind = type(value)
    if kind is dict:
        for item in value.values():
            if type(item) in CONTAINERS:
                break
        else:
            return value.copy()  # flat: the common case, at C speed
    elif kind is not list and kind is not tuple:
        return value
    root: list[Any] = [None]
    stack: list[tuple[Any, Any, Any]] = [(value, root, 0)]  # (source, target, key)
    while stack:
        source, target, key = stack.pop()
        if type(source) is dict:
            copy: Any = {}
            for k, item in source.items():
                copy[k] = item
                if type(item) in CONTAINERS:
                    stack.append((item, copy, k))
        else:  # a list or a tuple: only containers are pushed
            copy = list(source)
            for index, item in enumerate(copy):
                if type(item) in CONTAINERS:
                    stack.append((item, copy, index))
        target[key] = copy
    return root[0]
