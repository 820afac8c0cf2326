"""JSON at any depth: the codec's walks, without recursion (DESIGN §7).

msgspec encodes and decodes in C, recursively: a value nested about a thousand
levels deep (fewer when the Python stack is already deep) raises
``RecursionError``. A log must still hold whatever the loop recorded, however deep
(a model's 100,000-level tool arguments, recorded as received before the run
fails), so the codec falls back to the functions here when msgspec gives up:

- :func:`encode` writes exactly the bytes msgspec would write, at any depth:
  containers are walked with an explicit stack; every scalar, and the shell of
  every Struct (its tag, field names and order, omitted defaults), is still
  encoded by msgspec, with the already-encoded fields spliced in as
  :class:`msgspec.Raw`. No new syntax: a deep value is plain JSON on disk, and
  which path wrote a line never shows.
- :func:`parse` reads JSON text into builtins with an explicit stack, strings and
  numbers decoded by msgspec itself, so it accepts and returns what
  ``msgspec.json.decode`` would.
- :func:`needs_tags`, :func:`tag` and :func:`untag` are the codec's tagging walks
  (NaN, infinities, integers outside 64 bits, dicts that look like tags; see
  ``_codec.py``), iterative.

Cycles cannot be written as JSON: :func:`encode` raises ``TypeError`` on one, as
the walks here never loop forever.
"""

from __future__ import annotations

import copy
import math
import re
from typing import Any, Final

import msgspec

__all__ = ["TAGS", "encode", "needs_tags", "parse", "tag", "untag"]

INT_MIN: Final = -(2**63)
INT_END: Final = 2**64  # msgspec (and the loop) accept int64 and uint64
TAG_FLOAT: Final = "$float"
TAG_INT: Final = "$int"
TAG_DICT: Final = "$dict"
TAGS: Final = frozenset((TAG_FLOAT, TAG_INT, TAG_DICT))
_FLOAT_NAMES: Final = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}
# Python refuses str()/int() of ints longer than 4300 decimal digits: bigger ones
# are tagged in hexadecimal (exact, any length).
_DECIMAL_END: Final = 10**4300
_HEX = re.compile(r"-?0x[0-9a-f]+")

_encode = msgspec.json.encode
_decode = msgspec.json.decode  # strings and numbers, one token at a time


# --------------------------------------------------------------------------- tags


def _float_tag(value: float) -> dict[str, str]:
    return {TAG_FLOAT: "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")}


def _int_tag(value: int) -> dict[str, str]:
    value = int(value)
    if -_DECIMAL_END < value < _DECIMAL_END:
        return {TAG_INT: str(value)}
    return {TAG_INT: hex(value)}


def _scalar_needs_tag(value: Any) -> bool:
    if isinstance(value, float):
        return not math.isfinite(value)
    return isinstance(value, int) and not isinstance(value, bool) and not INT_MIN <= value < INT_END


def _is_tag_like(value: Any) -> bool:
    return isinstance(value, dict) and len(value) == 1 and next(iter(value)) in TAGS


def needs_tags(value: Any, *, give_up_after: int | None = None) -> bool:
    """Whether ``value`` (Structs, builtins, any depth) holds anything :func:`tag`
    would rewrite: a non-finite float, an int outside 64 bits, a tag-like dict.

    With ``give_up_after``, a value with more containers than that answers
    ``True`` unlooked (tagging a value that needs no tag changes nothing).
    """
    stack = [value]
    seen: set[int] = set()  # containers already looked into (shared or cyclic)
    while stack:
        if give_up_after is not None and len(seen) > give_up_after:
            return True
        item = stack.pop()
        if _scalar_needs_tag(item) or _is_tag_like(item):
            return True
        if isinstance(item, (dict, list, tuple)) or hasattr(item, "__struct_fields__"):
            ident = id(item)
            if ident in seen:
                continue
            seen.add(ident)
            if isinstance(item, dict):
                stack.extend(item.values())
            elif isinstance(item, (list, tuple)):
                stack.extend(item)
            else:
                stack.extend(getattr(item, name) for name in item.__struct_fields__)
    return False


def tag(value: Any) -> Any:
    """Builtins (as ``msgspec.to_builtins`` makes them) with tags in place of the
    values JSON cannot hold; tag-like dicts wrapped in ``$dict``. A new tree."""
    root: list[Any] = [None]
    stack: list[tuple[Any, Any, Any]] = [(value, root, 0)]  # (source, target, key)
    while stack:
        source, target, key = stack.pop()
        if isinstance(source, float):
            out: Any = source if math.isfinite(source) else _float_tag(source)
        elif isinstance(source, int) and not isinstance(source, bool):
            out = source if INT_MIN <= source < INT_END else _int_tag(source)
        elif isinstance(source, dict):
            out = {}
            for k, item in source.items():
                out[k] = None
                stack.append((item, out, k))
            if len(source) == 1 and next(iter(source)) in TAGS:
                out = {TAG_DICT: out}
        elif isinstance(source, (list, tuple)):
            out = [None] * len(source)
            for index, item in enumerate(source):
                stack.append((item, out, index))
        else:
            out = source
        target[key] = out
    return root[0]


def untag(value: Any) -> Any:
    """Undo :func:`tag` on decoded JSON (in place where it can).

    Raises:
        msgspec.ValidationError: a malformed tag.
    """
    root: list[Any] = [value]
    stack: list[tuple[Any, Any]] = [(root, 0)]  # (container, key) of a value to look at
    while stack:
        container, key = stack.pop()
        item = container[key]
        kind = type(item)
        if kind is dict:
            if len(item) == 1:
                name, inner = next(iter(item.items()))
                if name == TAG_FLOAT:
                    if type(inner) is str and inner in _FLOAT_NAMES:
                        container[key] = _FLOAT_NAMES[inner]
                        continue
                    raise msgspec.ValidationError(f"invalid {TAG_FLOAT} tag: {inner!r}")
                if name == TAG_INT:
                    number = _int_from_tag(inner)
                    if number is None:
                        raise msgspec.ValidationError(f"invalid {TAG_INT} tag: {_short(inner)}")
                    container[key] = number
                    continue
                if name == TAG_DICT:
                    if type(inner) is not dict:
                        raise msgspec.ValidationError(f"invalid {TAG_DICT} tag: {_short(inner)}")
                    container[key] = item = inner  # its items are untagged, not itself
            stack.extend((item, k) for k in item)
        elif kind is list:
            stack.extend((item, index) for index in range(len(item)))
    return root[0]


def _int_from_tag(inner: object) -> int | None:
    if type(inner) is not str:
        return None
    if _HEX.fullmatch(inner):
        number = int(inner, 16)
        # Only what _int_tag writes: hex for ints beyond 4300 decimal digits.
        return number if not -_DECIMAL_END < number < _DECIMAL_END else None
    digits = inner[1:] if inner[:1] == "-" else inner
    if 0 < len(digits) <= 4300 and digits.isascii() and digits.isdigit():
        return int(inner)
    return None


def _short(value: object) -> str:
    text = repr(value) if not isinstance(value, (dict, list)) else type(value).__name__
    return text if len(text) <= 60 else text[:57] + "..."


# --------------------------------------------------------------------------- encode


class _Value:
    """Stack wrapper for a value that is itself ``bytes`` (plain bytes are output)."""

    __slots__ = ("value",)

    def __init__(self, value: bytes) -> None:
        self.value = value


_LEAVE: Final = object()  # stack marker, above a container's id: the walk leaves it
_DICT_TAG: Final = b'{"' + TAG_DICT.encode() + b'":'


def encode(value: Any, *, tagged: bool = False) -> bytes:
    """``msgspec.json.encode(value)`` at any depth, byte for byte.

    With ``tagged``, the bytes are those of ``msgspec.json.encode(tag(
    msgspec.to_builtins(value)))``: the codec's form for the events that may hold
    values JSON cannot.

    Raises:
        TypeError: ``value`` contains itself, or holds something msgspec cannot
            encode.
    """
    out: list[bytes] = []
    emit = out.append
    on_path: set[int] = set()
    keys: dict[Any, bytes] = {}  # key -> its encoding with the colon: keys repeat
    # Plain ``bytes`` on the stack are output, written as they are; anything else
    # is a value to encode (a value that is bytes travels wrapped in _Value).
    stack: list[Any] = [_Value(value) if value.__class__ is bytes else value]
    pop, push = stack.pop, stack.append
    while stack:
        item = pop()
        cls = item.__class__
        if cls is bytes:
            emit(item)
        elif item is _LEAVE:
            on_path.discard(pop())
        elif cls is dict or cls is list or cls is tuple:
            if not item:
                emit(b"{}" if cls is dict else b"[]")
                continue
            ident = id(item)
            if ident in on_path:
                raise TypeError("cannot encode a value that contains itself")
            on_path.add(ident)
            push(ident)
            push(_LEAVE)
            if cls is dict:
                escape = tagged and len(item) == 1 and next(iter(item)) in TAGS
                push(b"}}" if escape else b"}")
                entries = list(item.items())
                index = len(entries)
                while index:
                    index -= 1
                    key, sub = entries[index]
                    push(_Value(sub) if sub.__class__ is bytes else sub)
                    chunk = keys.get(key)
                    if chunk is None:
                        chunk = keys[key] = _key(key) + b":"
                    if index:
                        push(chunk)
                        push(b",")
                    else:
                        emit(_DICT_TAG + b"{" if escape else b"{")
                        emit(chunk)
            else:
                push(b"]")
                index = len(item)
                while index:
                    index -= 1
                    sub = item[index]
                    push(_Value(sub) if sub.__class__ is bytes else sub)
                    if index:
                        push(b",")
                emit(b"[")
        elif cls is _Value:
            emit(_encode(item.value))
        elif hasattr(cls, "__struct_fields__"):
            emit(_struct(item, tagged))
        elif tagged and _scalar_needs_tag(item):
            emit(_encode(_float_tag(item) if isinstance(item, float) else _int_tag(item)))
        elif tagged and isinstance(item, (dict, list, tuple)):  # subclasses: as builtins
            push(dict(item) if isinstance(item, dict) else list(item))
        else:
            emit(_encode(item))
    return b"".join(out)


def _key(key: object) -> bytes:
    if key.__class__ is str:
        return _encode(key)
    # Whatever msgspec writes for such a key (an int becomes a string, ...).
    pair = _encode({key: None})
    return pair[1 : len(pair) - len(b":null}")]


def _struct(obj: Any, tagged: bool) -> bytes:
    """A Struct through msgspec, its nested values written by :func:`encode`."""
    cls = obj.__class__
    omit_defaults = cls.__struct_config__.omit_defaults
    shell = None
    for field in msgspec.structs.fields(cls):
        value = getattr(obj, field.name)
        if not _nested(value) and not (tagged and _scalar_needs_tag(value)):
            continue
        if omit_defaults and _is_default(value, field):
            continue  # msgspec leaves it out
        if shell is None:
            shell = copy.copy(obj)
        msgspec.structs.force_setattr(shell, field.name, msgspec.Raw(encode(value, tagged=tagged)))
    return _encode(obj if shell is None else shell)


def _nested(value: Any) -> bool:
    return isinstance(value, (dict, list, tuple)) or hasattr(value, "__struct_fields__")


def _is_default(value: Any, field: msgspec.structs.FieldInfo) -> bool:
    if field.default is not msgspec.NODEFAULT:
        default = field.default
    elif field.default_factory is not msgspec.NODEFAULT:
        default = field.default_factory()
    else:
        return False
    # Defaults are small (None, (), Usage()): comparing stops at their depth.
    return type(value) is type(default) and bool(value == default)


# --------------------------------------------------------------------------- parse

_STRING: Final = r'"(?:[^"\\\x00-\x1f]|\\.)*"'
_WS: Final = r"[ \t\n\r]*"
# One token per step; an object's opening brace comes with its first key, a comma
# in an object with the next key, and a run of closing brackets is one token.
_TOKEN = re.compile(
    rf"""{_WS}(?:
        (?P<open_key>\{{{_WS}(?P<first>{_STRING}){_WS}:)
      | (?P<next_key>,{_WS}(?P<key>{_STRING}){_WS}:)
      | (?P<empty>\{{{_WS}\}}|\[{_WS}\])
      | (?P<open_list>\[)
      | (?P<comma>,)
      | (?P<close>[}}\]](?:{_WS}[}}\]])*)
      | (?P<string>{_STRING})
      | (?P<number>-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?)
      | (?P<word>true|false|null)
    )""",
    re.VERBOSE,
)
_WORDS: Final = {"true": True, "false": False, "null": None}
_SPACE = re.compile(_WS)
_CLOSERS: Final = {"}": dict, "]": list}


def _text(token: str) -> str:
    """A JSON string token's value (msgspec decodes the ones with escapes)."""
    if "\\" in token:
        value: str = _decode(token)
        return value
    return token[1:-1]


def parse(data: bytes | str) -> Any:
    """``msgspec.json.decode(data)`` at any depth (into builtins).

    Raises:
        msgspec.DecodeError: ``data`` is not one JSON value.
    """
    if isinstance(data, (bytes, bytearray, memoryview)):
        try:
            text = bytes(data).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise msgspec.DecodeError(f"invalid UTF-8: {exc.reason}") from None
    else:
        text = data
    match = _TOKEN.match
    end = len(text)
    # The containers being filled, innermost last, and for each object the key
    # whose value comes next.
    containers: list[Any] = []
    keys: list[Any] = []
    position = 0
    value: Any = None
    want_value = True  # a value comes next (else a comma or closing brackets)
    while True:
        token = match(text, position)
        if token is None:
            at = _SPACE.match(text, position).end()  # type: ignore[union-attr]
            if at == end:
                raise msgspec.DecodeError("Input data was truncated")
            raise _malformed("unexpected character", at)
        position = token.end()
        kind = token.lastgroup  # the outer group of a key token: open_key, next_key
        if want_value:
            if kind == "open_key":
                containers.append({})
                keys.append(_text(token.group("first")))
                continue
            if kind == "open_list":
                containers.append([])
                keys.append(None)
                continue
            if kind == "string":
                value = _text(token.group("string"))
            elif kind == "number":
                value = _decode(token.group("number"))
            elif kind == "word":
                value = _WORDS[token.group("word")]
            elif kind == "empty":
                value = {} if token.group("empty")[0] == "{" else []
            else:
                raise _malformed(f"unexpected {token.group(kind)!r}", token.start(kind))  # type: ignore[arg-type]
        else:  # (inside a container: a complete top-level value returned already)
            if kind == "next_key":
                if type(containers[-1]) is not dict:
                    raise _malformed("unexpected object key in an array", token.start(kind))
                keys[-1] = _text(token.group("key"))
                want_value = True
                continue
            if kind == "comma":
                if type(containers[-1]) is not list:
                    raise _malformed("expected an object key", token.end(kind))
                want_value = True
                continue
            if kind != "close":
                raise _malformed("expected ',' or a closing bracket", token.start(kind))  # type: ignore[arg-type]
            closers = token.group("close")
            value = None
            for closer in closers:
                if closer not in _CLOSERS:
                    continue  # whitespace between brackets
                if not containers or type(containers[-1]) is not _CLOSERS[closer]:
                    raise _malformed(f"unexpected {closer!r}", token.start("close"))
                value = containers.pop()
                keys.pop()
                if containers:
                    _store(containers[-1], keys[-1], value)
            if not containers:
                return _end(text, position, value)
            continue
        # A complete scalar or empty container.
        if not containers:
            return _end(text, position, value)
        _store(containers[-1], keys[-1], value)
        want_value = False


def _store(container: Any, key: Any, value: Any) -> None:
    if key is None:
        container.append(value)
    else:
        container[key] = value


def _end(text: str, position: int, value: Any) -> Any:
    rest = _SPACE.match(text, position).end()  # type: ignore[union-attr]
    if rest != len(text):
        raise _malformed("trailing characters", rest)
    return value


def _malformed(what: str, at: int) -> msgspec.DecodeError:
    return msgspec.DecodeError(f"JSON is malformed: {what} (character {at})")
