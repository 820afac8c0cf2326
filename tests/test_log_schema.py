"""The rules that make adding a field with a default cost nothing (replay/_log.py,
"Evolution policy"), checked over every Struct an event can hold."""

from __future__ import annotations

import typing
from typing import Any

import msgspec
import pytest

from agentloop import Event, decode_event, encode_event

# Defaults CPython always gives as the very same object, so msgspec's
# omit_defaults (which knows a default by identity) leaves them out however the
# value was made or decoded.
_SINGLETONS = (None, True, False, "", ())


def _structs() -> list[type[msgspec.Struct]]:
    """Every Struct class an event can hold, events included."""
    seen: list[type[msgspec.Struct]] = []
    todo: list[Any] = list(typing.get_args(Event))
    while todo:
        kind = todo.pop()
        if isinstance(kind, type) and issubclass(kind, msgspec.Struct):
            if kind not in seen:
                seen.append(kind)
                todo.extend(field.type for field in msgspec.structs.fields(kind))
        else:
            todo.extend(typing.get_args(kind))
    return seen


STRUCTS = _structs()


def test_the_walk_finds_the_structs_inside_events() -> None:
    names = {cls.__name__ for cls in STRUCTS}
    assert {"Usage", "ToolCall", "ModelResponse", "Budget", "ToolSpec", "RunError"} <= names
    assert len(STRUCTS) >= 33


@pytest.mark.parametrize("cls", STRUCTS, ids=lambda cls: cls.__name__)
def test_every_logged_struct_omits_its_defaults(cls: type[msgspec.Struct]) -> None:
    assert cls.__struct_config__.omit_defaults, (
        f"{cls.__name__} can be in a log: declare it with omit_defaults=True, so that a "
        "field added to it later (with a default) changes no line of existing logs"
    )


def _odd_defaults() -> list[tuple[type[msgspec.Struct], str, Any]]:
    odd = []
    for cls in STRUCTS:
        for field in msgspec.structs.fields(cls):
            default = field.default
            if field.required or field.default_factory is not msgspec.NODEFAULT:
                continue  # a factory's value is always written (or an empty list/dict)
            if any(default is value for value in _SINGLETONS):
                continue
            if type(default) is int and -5 <= default <= 256:
                continue  # CPython's small ints
            odd.append((cls, field.name, default))
    return odd


ODD = _odd_defaults()


def test_the_defaults_that_are_not_always_one_object_are_known() -> None:
    assert {(cls.__name__, name) for cls, name, _ in ODD} == {
        ("RunFinishedEvent", "usage"),
        ("BudgetUsage", "wall_seconds"),
        ("ModelFailure", "code"),
        ("ModelAttempt", "kind"),
        ("Limits", "initial_messages"),
        ("Limits", "chunks_per_step"),
        ("Limits", "step_text_code_points"),
        ("Limits", "assistant_blocks"),
        ("Limits", "argument_values"),
        ("Limits", "argument_string_code_points"),
        ("Limits", "blob_bytes"),
    }


@pytest.mark.parametrize(("cls", "name", "default"), ODD, ids=lambda x: getattr(x, "__name__", x))
def test_a_default_equal_value_becomes_the_default_object(
    cls: type[msgspec.Struct], name: str, default: Any
) -> None:
    # Decoded or built, an equal value must be the default object itself (the
    # Struct's __post_init__ makes it so), or equal events would encode apart.
    encoded = msgspec.json.encode(default)
    copy = msgspec.json.decode(encoded, type=type(default))
    assert copy == default and copy is not default
    fields = {
        field.name: _example(field.type) for field in msgspec.structs.fields(cls) if field.required
    }
    built = cls(**fields, **{name: copy})
    assert getattr(built, name) is default, f"{cls.__name__}.{name}"
    decoded = msgspec.convert(msgspec.to_builtins(built) | {name: default}, cls)
    assert getattr(decoded, name) is default


def _example(kind: Any) -> Any:
    return {str: "x", int: 1}[kind]


def test_an_added_field_with_a_default_changes_no_line() -> None:
    # What a provider adding e.g. cache tokens to Usage does: lines without it are
    # byte for byte the same, and read as the default.
    from agentloop import Usage

    extended = msgspec.defstruct(
        "Usage",
        [
            ("input_tokens", int, 0),
            ("output_tokens", int, 0),
            ("cache_read_tokens", int, 0),
        ],
        omit_defaults=True,
        frozen=True,
    )
    assert msgspec.json.encode(extended(3, 4)) == msgspec.json.encode(Usage(3, 4))
    assert msgspec.json.decode(msgspec.json.encode(Usage(3, 4)), type=extended) == extended(3, 4)


def test_encode_event_leaves_defaults_out() -> None:
    from agentloop import RunFinishedEvent, Usage

    event = RunFinishedEvent(sequence=3, status="completed", usage=Usage(0, 0))
    assert encode_event(event) == b'{"type":"run.finished","sequence":3,"status":"completed"}'
    assert decode_event(encode_event(event)) == event
