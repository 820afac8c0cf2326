"""@tool: pydantic models as arguments, and parameter descriptions from docstrings."""

from __future__ import annotations

import pydantic

from agentloop import ToolCall, tool
from agentloop._docstrings import parameter_descriptions


class Address(pydantic.BaseModel):
    street: str
    city: str


class Order(pydantic.BaseModel):
    item: str
    quantity: int = pydantic.Field(gt=0, description="How many.")
    ship_to: Address


@tool
def place(order: Order, note: str = "") -> str:
    """Place an order.

    Args:
        order: the order to place.
        note (str): a note for the shop,
            printed on the slip.
    """
    return f"{order.quantity} x {order.item} to {order.ship_to.city}{note}"


def test_the_model_schema_is_the_parameter_schema() -> None:
    parameters = place.spec.parameters
    order = parameters["properties"]["order"]
    assert order["properties"]["quantity"]["exclusiveMinimum"] == 0
    assert order["properties"]["ship_to"] == {"$ref": "#/$defs/Address"}
    assert parameters["$defs"]["Address"]["required"] == ["street", "city"]
    assert order["description"] == "the order to place."
    assert parameters["properties"]["note"]["description"] == (
        "a note for the shop, printed on the slip."
    )
    assert parameters["required"] == ["order"]


def test_arguments_are_validated_by_pydantic() -> None:
    arguments = {"item": "tea", "quantity": 2, "ship_to": {"street": "1 Main", "city": "Oslo"}}
    assert place.execute(ToolCall("c1", "place", {"order": arguments})) == (
        "2 x tea to Oslo",
        False,
    )
    bad = {**arguments, "quantity": 0}
    content, is_error = place.execute(ToolCall("c1", "place", {"order": bad}))
    assert is_error
    assert content == "invalid arguments: order: quantity: Input should be greater than 0"
    content, is_error = place.execute(ToolCall("c1", "place", {"order": "tea"}))
    assert is_error and content.startswith("invalid arguments: Expected `object`, got `str`")


def test_numpy_docstrings() -> None:
    @tool
    def scale(value: float, factor: float = 2.0) -> float:
        """Scale a value.

        Parameters
        ----------
        value : float
            The value.
        factor : float
            The factor,
            two by default.

        Returns
        -------
        float
        """
        return value * factor

    properties = scale.spec.parameters["properties"]
    assert properties["value"]["description"] == "The value."
    assert properties["factor"]["description"] == "The factor, two by default."


def test_what_the_parser_ignores() -> None:
    assert parameter_descriptions(None) == {}
    assert parameter_descriptions("No sections.") == {}
    assert parameter_descriptions("Args:\n    x:\n    (not an entry)\n\ny: prose") == {}
    assert parameter_descriptions("Args:\n\n    x: the x.\nReturns:\n    y: no") == {"x": "the x."}
    assert parameter_descriptions("Parameters\n----------\n?bad\n    text\nx\n    X.") == {
        "x": "X."
    }

    # Descriptions for parameters the function does not have are left out.
    @tool
    def f(a: int) -> int:
        """F.

        Args:
            a: the a.
            b: no such parameter.
        """
        return a

    assert set(f.spec.parameters["properties"]) == {"a"}
