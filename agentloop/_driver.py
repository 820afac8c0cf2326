"""PLACEHOLDER (owned by the tools/driver helper): run, CancelToken, Model."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Protocol, Union

from ._protocol import ModelChunk, ModelRequest, ModelResponse, RunResult

__all__ = ["CancelToken", "Model", "run"]


class Model(Protocol):
    def stream(self, request: ModelRequest) -> Iterable[Union[ModelChunk, ModelResponse]]: ...


class CancelToken:
    def __init__(self) -> None:
        self.cancelled = False
        self.reason = ""

    def cancel(self, reason: str = "cancelled") -> None:
        self.cancelled = True
        self.reason = reason


def run(messages: Any, **kwargs: Any) -> RunResult:
    raise NotImplementedError
