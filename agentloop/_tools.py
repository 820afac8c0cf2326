"""PLACEHOLDER (owned by the tools/driver helper): Tool, tool, ToolRegistry."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ._messages import ToolCall
from ._toolspec import ToolSpec

__all__ = ["Tool", "ToolRegistry", "tool"]


class Tool:
    spec: ToolSpec

    def execute(self, call: ToolCall) -> tuple[str, bool]:
        raise NotImplementedError


def tool(fn: Any = None, **options: Any) -> Any:
    raise NotImplementedError


class ToolRegistry:
    def __init__(self, tools: Iterable[Tool | ToolSpec] = ()) -> None:
        self._tools: dict[str, Tool | ToolSpec] = {}
        for t in tools:
            self.register(t)

    def register(self, tool: Tool | ToolSpec) -> None:
        spec = tool if isinstance(tool, ToolSpec) else tool.spec
        if spec.name in self._tools:
            raise ValueError(f"tool {spec.name!r} is already registered")
        self._tools[spec.name] = tool

    def specs(self) -> tuple[ToolSpec, ...]:
        return tuple(t if isinstance(t, ToolSpec) else t.spec for t in self._tools.values())

    def get(self, name: str) -> Tool | ToolSpec | None:
        return self._tools.get(name)
