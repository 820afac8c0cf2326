"""ToolSpec checks its own fields: each bad field is named, with the value it got."""

from __future__ import annotations

import re
from typing import Any

import pytest

from agentloop import ToolSpec

# field -> (bad value, exception, message)
BAD_FIELDS = {
    # name
    "empty name": ({"name": ""}, ValueError, "ToolSpec.name must be 1-64 characters"),
    "name not a str": ({"name": 7}, ValueError, "of A-Z a-z 0-9 _ -, got 7"),
    # description
    "description None": (
        {"description": None},
        TypeError,
        "ToolSpec.description must be a str, got None",
    ),
    "description bytes": ({"description": b"x"}, TypeError, "must be a str, got b'x'"),
    # parameters: the container
    "parameters a list": (
        {"parameters": [{"type": "object"}]},
        TypeError,
        "ToolSpec.parameters must be a JSON Schema dict, got [{'type': 'object'}]",
    ),
    "parameters a JSON string": (
        {"parameters": '{"type": "object"}'},
        TypeError,
        'must be a JSON Schema dict, got \'{"type": "object"}\'',
    ),
    # parameters: plain JSON inside, with the path of the culprit
    "non-string key": (
        {"parameters": {"type": "object", "properties": {1: {"type": "string"}}}},
        TypeError,
        "ToolSpec 'lookup': parameters must be plain JSON: "
        "parameters.properties: object key 1 is not a string",
    ),
    "integer beyond 64 bits": (
        {"parameters": {"type": "object", "properties": {"n": {"maximum": 2**64}}}},
        TypeError,
        f"parameters.properties.n.maximum: integer {2**64} is outside the 64-bit range",
    ),
    "negative integer beyond 64 bits": (
        {"parameters": {"type": "object", "enum": [0, -(2**63) - 1]}},
        TypeError,
        f"parameters.enum[1]: integer {-(2**63) - 1} is outside the 64-bit range",
    ),
    "NaN": (
        {"parameters": {"type": "object", "default": float("nan")}},
        TypeError,
        "parameters.default: nan is not a finite number",
    ),
    "object value": (
        {"parameters": {"type": "object", "default": object}},
        TypeError,
        "parameters.default: type is not a JSON value",
    ),
    # requires_approval
    "requires_approval an int": (
        {"requires_approval": 1},
        TypeError,
        "ToolSpec.requires_approval must be a bool, got 1",
    ),
    "requires_approval a str": (
        {"requires_approval": "yes"},
        TypeError,
        "ToolSpec.requires_approval must be a bool, got 'yes'",
    ),
}


@pytest.mark.parametrize(("fields", "error", "message"), BAD_FIELDS.values(), ids=BAD_FIELDS.keys())
def test_bad_fields_are_refused_by_name(
    fields: dict[str, Any], error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=re.escape(message)):
        ToolSpec(**{"name": "lookup", **fields})


def test_good_specs_keep_their_fields() -> None:
    spec = ToolSpec(
        "lookup-v2_0",
        "Look a word up.",
        {"type": "object", "properties": {"word": {"type": "string"}}, "maximum": 2**64 - 1},
        requires_approval=True,
    )
    assert spec.name == "lookup-v2_0" and spec.requires_approval is True
    assert spec.parameters["maximum"] == 2**64 - 1
    assert ToolSpec("x" * 64).parameters == {"type": "object", "properties": {}}


def test_tuples_in_a_schema_are_accepted_and_stored_as_json_arrays() -> None:
    spec = ToolSpec("pick", parameters={"type": "object", "enum": ("a", "b")})
    assert spec.parameters == {"type": "object", "enum": ["a", "b"]}
