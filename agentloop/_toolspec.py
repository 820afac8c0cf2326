"""``ToolSpec``: what the model is told about a tool (name, description, JSON Schema)."""

from __future__ import annotations

import re
from typing import Any

import msgspec

from ._json import copy_json, json_problem, surrogate_problem

__all__ = ["ToolSpec"]

_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")


class ToolSpec(msgspec.Struct, frozen=True, omit_defaults=True):
    """A tool as the model sees it.

    Attributes:
        name: 1-64 characters of ``A-Z a-z 0-9 _ -`` (what every provider accepts).
        description: shown to the model.
        parameters: a JSON Schema for the arguments object (plain JSON; the spec
            keeps a copy, so treat ``spec.parameters`` as read-only).
        requires_approval: the loop pauses (reason ``approval``) before each call and
            acts on the ``Resume`` payload.
        sequential: never run in a parallel batch (``agent_loop(...,
            parallel_tools=True)``): each call runs alone, in its place among the
            step's calls (for tools with side effects other calls must not race).
    """

    name: str
    description: str = ""
    parameters: dict[str, Any] = msgspec.field(
        default_factory=lambda: {"type": "object", "properties": {}}
    )
    requires_approval: bool = False
    sequential: bool = False

    def __post_init__(self) -> None:
        if type(self.name) is not str or not _NAME.fullmatch(self.name):
            raise ValueError(
                f"ToolSpec.name must be 1-64 characters of A-Z a-z 0-9 _ -, got {self.name!r}"
            )
        if type(self.description) is not str:
            raise TypeError(f"ToolSpec.description must be a str, got {self.description!r}")
        problem = surrogate_problem(self.description, f"ToolSpec {self.name!r} description")
        if problem is not None:
            raise ValueError(problem)
        if not isinstance(self.parameters, dict):
            raise TypeError(
                f"ToolSpec.parameters must be a JSON Schema dict, got {self.parameters!r}"
            )
        problem = json_problem(self.parameters, "parameters")
        if problem is not None:
            raise TypeError(f"ToolSpec {self.name!r}: parameters must be plain JSON: {problem}")
        # The spec keeps its own copy of the schema: it is frozen, and later edits of
        # the caller's dict change nothing (runs can then share the spec as it is).
        msgspec.structs.force_setattr(self, "parameters", copy_json(self.parameters))
        if type(self.requires_approval) is not bool:
            raise TypeError(
                f"ToolSpec.requires_approval must be a bool, got {self.requires_approval!r}"
            )
        if type(self.sequential) is not bool:
            raise TypeError(f"ToolSpec.sequential must be a bool, got {self.sequential!r}")
