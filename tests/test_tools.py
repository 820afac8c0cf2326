"""``@tool``, ``Tool`` and ``ToolRegistry``: specs from signatures, the tool boundary."""

from __future__ import annotations

import json
from typing import Annotated, Any

import msgspec
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from agentloop import Tool, ToolCall, ToolRegistry, ToolSpec, tool


# Not tests.helpers.add: the spec tests read this docstring's second paragraph.
@tool
def add(left: int, right: int) -> dict[str, int]:
    """Add two integers.

    Returns the sum under "sum".
    """
    return {"sum": left + right}


class Point(msgspec.Struct):
    x: float
    y: float


def call(name: str = "add", **arguments: Any) -> ToolCall:
    return ToolCall("call-1", name, arguments)


# --------------------------------------------------------------------------- specs


def test_spec_from_signature_and_docstring():
    assert add.spec == ToolSpec(
        name="add",
        description='Add two integers.\n\nReturns the sum under "sum".',
        parameters={
            "type": "object",
            "properties": {"left": {"type": "integer"}, "right": {"type": "integer"}},
            "required": ["left", "right"],
            "additionalProperties": False,
        },
    )
    assert isinstance(add, Tool)
    assert add.name == "add"


def test_decorator_with_options():
    @tool(name="sum-two", description="Sum.", requires_approval=True)
    def anything(a: int) -> int:
        """Ignored docstring."""
        return a

    assert anything.spec.name == "sum-two"
    assert anything.spec.description == "Sum."
    assert anything.spec.requires_approval is True


def test_decorator_called_without_options_is_like_bare():
    @tool()
    def noop() -> str:
        return "ok"

    assert noop.spec == ToolSpec(
        "noop",
        "",
        {"type": "object", "properties": {}, "required": [], "additionalProperties": False},
    )
    assert noop.execute(call("noop")) == ("ok", False)


def test_defaults_metadata_and_nested_types_in_schema():
    @tool
    def plot(
        point: Point,
        scale: Annotated[float, msgspec.Meta(gt=0, description="zoom factor")] = 1.0,
        labels: list[str] | None = None,
    ) -> str:
        return f"{point.x},{point.y}x{scale}:{labels}"

    schema = plot.spec.parameters
    assert schema["required"] == ["point"]
    assert schema["properties"]["point"] == {"$ref": "#/$defs/Point"}
    assert schema["$defs"]["Point"]["required"] == ["x", "y"]
    assert schema["properties"]["scale"] == {
        "description": "zoom factor",
        "type": "number",
        "exclusiveMinimum": 0,
        "default": 1.0,
    }
    assert "title" not in schema
    json.dumps(schema)  # plain JSON
    assert plot.execute(call("plot", point={"x": 1, "y": 2})) == ("1.0,2.0x1.0:None", False)
    content, is_error = plot.execute(call("plot", point={"x": 1, "y": 2}, scale=0))
    assert is_error
    assert content == "invalid arguments: Expected `float` > 0.0 - at `$.scale`"


def test_tool_is_still_callable_directly():
    assert add(1, 2) == {"sum": 3}
    assert repr(add) == "<Tool 'add' -> add>"


@pytest.mark.parametrize(
    ("source", "message"),
    [
        # Signatures that cannot become a JSON object of named, typed fields.
        ("def f(*args: int) -> None: ...", r"\*args is not supported"),
        ("def f(**kwargs: int) -> None: ...", r"\*\*kwargs is not supported"),
        ("def f(a, b: int) -> None: ...", "parameter 'a' has no type annotation"),
        ("def f(a: 'Undefined') -> None: ...", "cannot resolve its annotations"),
        # Types and defaults msgspec cannot describe.
        ("def f(a: object = object()) -> None: ...", "cannot describe its parameters"),
        ("async def f(a: int):\n    yield a", "async generator functions are not supported"),
    ],
)
def test_bad_functions_raise_type_error_at_decoration(source, message):
    namespace: dict[str, Any] = {}
    exec(source, namespace)
    with pytest.raises(TypeError, match=message):
        tool(namespace["f"])


def test_not_a_function_raises_type_error():
    with pytest.raises(TypeError, match="needs a function"):
        tool(42)  # type: ignore[call-overload]


def test_invalid_name_raises_value_error():
    with pytest.raises(ValueError, match=r"ToolSpec\.name"):
        tool(name="has space")(lambda: None)
    with pytest.raises(ValueError, match=r"ToolSpec\.name"):
        tool(name="")(lambda: None)


def test_builtin_without_signature_raises_type_error():
    with pytest.raises(TypeError, match="cannot read its signature"):
        tool(max)


# --------------------------------------------------------------------------- execute


def test_execute_add_success_is_compact_json():
    assert add.execute(ToolCall("c", "add", {"left": 20, "right": 22})) == ('{"sum":42}', False)


@pytest.mark.parametrize(
    ("arguments", "problem"),
    [
        # Wrong types (strict: no "22" -> 22, no 1.5 -> 1, no True -> 1).
        ({"left": 20, "right": "22"}, "Expected `int`, got `str` - at `$.right`"),
        ({"left": 1.5, "right": 2}, "Expected `int`, got `float` - at `$.left`"),
        ({"left": True, "right": 2}, "Expected `int`, got `bool` - at `$.left`"),
        # Missing and unknown fields.
        ({"left": 20}, "Object missing required field `right`"),
        ({"left": 1, "right": 2, "extra": 3}, "Object contains unknown field `extra`"),
    ],
)
def test_execute_add_bad_arguments_name_the_problem(arguments, problem):
    assert add.execute(ToolCall("c", "add", arguments)) == (f"invalid arguments: {problem}", True)


def test_str_result_is_content_as_is():
    @tool
    def echo(text: str) -> str:
        return text

    assert echo.execute(call("echo", text='{"not": "re-encoded"}')) == (
        '{"not": "re-encoded"}',
        False,
    )


@pytest.mark.parametrize(
    ("value", "content"),
    [
        (None, "null"),
        (10.5, "10.5"),
        ([1, "a", None], '[1,"a",null]'),
        (Point(1.0, 2.0), '{"x":1.0,"y":2.0}'),
    ],
)
def test_other_results_are_compact_json(value, content):
    @tool
    def give() -> Any:
        return value

    assert give.execute(call("give")) == (content, False)


def test_unencodable_result_is_an_error():
    @tool
    def give() -> object:
        return object()

    content, is_error = give.execute(call("give"))
    assert is_error
    assert content.startswith("cannot encode the result as JSON: TypeError: ")


def test_exception_becomes_error_result():
    @tool
    def divide(numerator: float, denominator: float) -> float:
        return numerator / denominator

    assert divide.execute(call("divide", numerator=1, denominator=0)) == (
        "ZeroDivisionError: float division by zero",
        True,
    )


def test_base_exceptions_propagate():
    @tool
    def interrupt() -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        interrupt.execute(call("interrupt"))


def test_defaults_and_keyword_and_positional_only_parameters():
    @tool
    def mix(a: int, /, b: int = 2, *, c: int, d: list[int] = [7]) -> list[int]:  # noqa: B006
        d.append(a)
        return [a, b, c, *d]

    assert mix.spec.parameters["required"] == ["a", "c"]
    # The mutable default is fresh for every call: no state leaks between calls.
    assert mix.execute(call("mix", a=1, c=3)) == ("[1,2,3,7,1]", False)
    assert mix.execute(call("mix", a=1, c=3)) == ("[1,2,3,7,1]", False)
    assert mix.execute(call("mix", a=1, b=5, c=3, d=[])) == ("[1,5,3,1]", False)


def test_converted_types_reach_the_function():
    seen: list[Any] = []

    @tool
    def take(point: Point, ids: tuple[int, ...], ratio: float) -> str:
        seen.extend([point, ids, ratio])
        return "ok"

    assert take.execute(call("take", point={"x": 1, "y": 2.5}, ids=[1, 2], ratio=3)) == (
        "ok",
        False,
    )
    assert seen == [Point(1.0, 2.5), (1, 2), 3.0]
    assert type(seen[2]) is float


@given(left=st.integers(), right=st.integers())
@example(left=0, right=0)
@example(left=2**63, right=-(2**70))
def test_property_integers_always_add(left, right):
    content, is_error = add.execute(ToolCall("c", "add", {"left": left, "right": right}))
    assert not is_error
    assert json.loads(content) == {"sum": left + right}


_non_int = st.one_of(st.none(), st.booleans(), st.floats(), st.text(), st.lists(st.integers()))


@given(value=_non_int)
@example(value="42")
def test_property_non_integers_are_rejected_naming_the_field(value):
    content, is_error = add.execute(ToolCall("c", "add", {"left": value, "right": 1}))
    assert is_error
    assert content.startswith("invalid arguments: Expected `int`, got ")
    assert content.endswith(" - at `$.left`")


# --------------------------------------------------------------------------- registry


def test_registry_register_get_specs_execute():
    bare = ToolSpec("remote", "Runs elsewhere.")
    registry = ToolRegistry([add, bare])
    assert len(registry) == 2
    assert registry.specs() == (add.spec, bare)
    assert registry.get("add") is add
    assert registry.get("remote") is bare
    assert registry.get("missing") is None
    assert list(registry) == [add, bare]
    assert "add" in registry and add in registry and bare in registry
    assert "missing" not in registry and 42 not in registry
    assert repr(registry) == "<ToolRegistry ['add', 'remote']>"

    assert registry.execute(call(left=1, right=2)) == ('{"sum":3}', False)
    assert registry.execute(call("remote")) == ("tool 'remote' has no implementation", True)
    assert registry.execute(call("missing")) == ("unknown tool 'missing'", True)


def test_registry_wraps_plain_functions():
    def shout(text: str) -> str:
        return text.upper()

    registry = ToolRegistry()
    registered = registry.register(shout)
    assert isinstance(registered, Tool)
    assert registry.execute(call("shout", text="hi")) == ("HI", False)


def test_registry_rejects_duplicates_and_junk():
    registry = ToolRegistry([add])
    with pytest.raises(ValueError, match="'add' is already registered"):
        registry.register(ToolSpec("add"))
    with pytest.raises(TypeError, match="expected a Tool, a ToolSpec or a function"):
        registry.register(42)  # type: ignore[arg-type]


def test_registry_specs_is_a_snapshot():
    registry = ToolRegistry([add])
    specs = registry.specs()
    registry.register(ToolSpec("later"))
    assert specs == (add.spec,)
    assert [s.name for s in registry.specs()] == ["add", "later"]
    copy = ToolRegistry(registry)
    assert list(copy) == list(registry)
