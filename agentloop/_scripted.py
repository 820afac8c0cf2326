"""PLACEHOLDER (owned by the tools/driver helper): ScriptedModel, ScriptedResponse."""

from __future__ import annotations

__all__ = ["ScriptedModel", "ScriptedResponse"]


class ScriptedResponse:
    pass


class ScriptedModel:
    pass
