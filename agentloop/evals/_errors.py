"""Exceptions of :mod:`agentloop.evals`.

The tree::

    agentloop.AgentLoopError       (the library's root)
    └── EvalError                  an evaluation cannot go on as asked
        └── DatasetError           a dataset file or a case is malformed
                                   (names the file, the line or case)

Problems *inside* a case (its agent crashed, an evaluator raised, the judge
answered garbage) are not exceptions: they are per-case errors in the report.
"""

from __future__ import annotations

from agentloop import AgentLoopError

__all__ = ["DatasetError", "EvalError"]


class EvalError(AgentLoopError):
    """An evaluation cannot go on as asked (a bad agent spec, an unreadable report,
    a log that is not there)."""


class DatasetError(EvalError):
    """A dataset file or a case is malformed.

    Attributes:
        path: the file (``""`` for a dataset built in Python).
        line: the 1-based line (JSON Lines) or ``None``.
    """

    def __init__(self, message: str, *, path: str = "", line: int | None = None) -> None:
        where = path + (f":{line}" if line is not None else "")
        super().__init__(f"{where}: {message}" if where else message)
        self.path = path
        self.line = line
