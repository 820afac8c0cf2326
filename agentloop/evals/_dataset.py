"""Cases and datasets: what an evaluation runs, as data files.

A dataset is a list of :class:`Case`. Its files are JSON Lines (one case per line,
always available) or YAML (a list of cases, or ``{"cases": [...]}``; needs
``pyyaml``, the ``evals`` extra). Both decode through the same msgspec types, so a
case means the same in either, and an error names the file, the line (JSON Lines)
or the case, and the field.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeAlias

import msgspec

from agentloop import Message, UserMessage

from ._errors import DatasetError
from ._evaluators import (
    Bounds,
    Contains,
    Custom,
    Equals,
    Exact,
    JsonSchema,
    Judge,
    Regex,
    Trajectory,
)

__all__ = ["Case", "Dataset", "Expectation"]

#: What a case may expect: one of the evaluators, tagged by ``kind``.
Expectation: TypeAlias = (
    Exact | Contains | Regex | Equals | JsonSchema | Trajectory | Bounds | Custom | Judge
)


class Case(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """One thing the agent is asked, and what is expected of its answer.

    Attributes:
        id: unique within its dataset; names the case's session log.
        prompt: the user's message (the session starts with it), or
        messages: a whole initial transcript instead (not both).
        tools: the names of the agent's tools this case offers (``None``: all).
        expect: the evaluators (see :mod:`agentloop.evals`).
        metadata: anything else (tags, sources); kept in the report.
    """

    id: str
    prompt: str | None = None
    messages: tuple[Message, ...] = ()
    tools: tuple[str, ...] | None = None
    expect: tuple[Expectation, ...] = ()
    metadata: dict[str, Any] = msgspec.field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.id or not self.id.strip():
            raise ValueError("a case needs a non-empty id")
        if (self.prompt is None) == (not self.messages):
            raise ValueError(f"case {self.id!r}: give a prompt or messages (exactly one)")

    def initial_messages(self) -> tuple[Message, ...]:
        """The session's initial transcript."""
        if self.prompt is not None:
            return (UserMessage("user-1", self.prompt),)
        return self.messages


_decode_case = msgspec.json.Decoder(Case).decode
_encode = msgspec.json.Encoder().encode


def _problem(exc: Exception) -> str:
    return str(exc).replace("Object missing required field", "missing field")


class Dataset:
    """An ordered list of cases with unique ids.

    >>> from agentloop.evals import Case, Contains, Dataset
    >>> data = Dataset([Case(id="sum", prompt="20 + 22?", expect=(Contains(text="42"),))])
    >>> [case.id for case in data]
    ['sum']
    """

    def __init__(self, cases: Iterable[Case], *, name: str = "dataset") -> None:
        self.cases: tuple[Case, ...] = tuple(cases)
        self.name = name
        seen: set[str] = set()
        for case in self.cases:
            if type(case) is not Case:
                raise DatasetError(f"a dataset holds Case objects, got {case!r}"[:200])
            if case.id in seen:
                raise DatasetError(f"two cases have the id {case.id!r}")
            seen.add(case.id)

    def __iter__(self) -> Iterator[Case]:
        return iter(self.cases)

    def __len__(self) -> int:
        return len(self.cases)

    def __getitem__(self, case_id: str) -> Case:
        for case in self.cases:
            if case.id == case_id:
                return case
        raise KeyError(case_id)

    def __repr__(self) -> str:
        return f"<Dataset {self.name!r} ({len(self.cases)} cases)>"

    # ------------------------------------------------------------------ files

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Dataset:
        """Read a dataset: ``.jsonl`` (JSON Lines), ``.yaml``/``.yml`` (YAML).

        Raises:
            DatasetError: the file cannot be read or a case is malformed (the
                message names the file, line or case, and the field).
        """
        file = Path(path)
        name = file.stem
        try:
            data = file.read_bytes()
        except OSError as exc:
            raise DatasetError(f"cannot read: {exc.strerror or exc}", path=str(path)) from None
        if file.suffix in (".yaml", ".yml"):
            return cls(_from_yaml(data, str(path)), name=name)
        return cls(_from_jsonl(data, str(path)), name=name)

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the dataset (``.yaml``/``.yml`` as YAML, anything else as JSON Lines)."""
        file = Path(path)
        if file.suffix in (".yaml", ".yml"):
            yaml = _yaml(str(path))
            rows = [msgspec.to_builtins(case) for case in self.cases]
            text = yaml.safe_dump(rows, sort_keys=False, allow_unicode=True)
            if yaml.safe_load(text) != rows:  # pyyaml writes some characters (NEL) raw
                text = yaml.safe_dump(rows, sort_keys=False, allow_unicode=False)
            file.write_text(text, "utf-8")
            return
        file.write_bytes(b"".join(_encode(case) + b"\n" for case in self.cases))


def _from_jsonl(data: bytes, path: str) -> Iterator[Case]:
    for number, line in enumerate(data.splitlines(), 1):
        if not line.strip() or line.lstrip().startswith(b"#"):
            continue
        try:
            yield _decode_case(line)
        except (msgspec.DecodeError, ValueError) as exc:
            raise DatasetError(_problem(exc), path=path, line=number) from None
        except RecursionError:
            raise DatasetError("a value is nested too deeply", path=path, line=number) from None


def _yaml(path: str) -> Any:
    try:
        import yaml  # type: ignore[import-untyped]
    except ImportError:
        raise DatasetError(
            "YAML datasets need pyyaml: pip install 'agentloop-replay[evals]' (or use "
            "JSON Lines, .jsonl)",
            path=path,
        ) from None
    return yaml


def _from_yaml(data: bytes, path: str) -> Sequence[Case]:
    yaml = _yaml(path)
    try:
        rows = yaml.safe_load(data)
    except (yaml.YAMLError, RecursionError) as exc:
        raise DatasetError(f"not YAML: {exc}", path=path) from None
    if isinstance(rows, dict) and "cases" in rows:
        rows = rows["cases"]
    if rows is None:
        rows = []
    if not isinstance(rows, list):
        raise DatasetError("a YAML dataset is a list of cases (or {cases: [...]})", path=path)
    cases = []
    for index, row in enumerate(rows):
        label = row.get("id") if isinstance(row, dict) else None
        where = f"case {index + 1}" + (f" ({label!r})" if isinstance(label, str) else "")
        try:
            cases.append(msgspec.convert(row, Case))
        except (msgspec.ValidationError, ValueError, TypeError) as exc:
            raise DatasetError(f"{where}: {_problem(exc)}", path=path) from None
    return cases
