"""Behaviour diff: two reports of one dataset, case by case.

For each case in both reports: the score change, and the first event where the
two sessions diverge -- found the way ``python -m replay diff`` finds it (the
first pair of events whose encodings differ) and described with the same
functions (``replay.summarize``, ``replay.diff_events``), except that times are
left out of the comparison: ``at`` on events and replies and the
``wall_seconds`` of budget usage differ between any two live runs and say
nothing about behaviour.

Groups:

- ``unchanged``: the two sessions are the same event for event (times aside);
- ``same_outcome``: they diverge, but every evaluator gives the same verdict and
  the run ends with the same status: the same outcome by another path;
- ``changed``: an evaluator's verdict or the run's status changed;
- ``only_a`` / ``only_b``: a case in one report only.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final, Literal

import msgspec

import replay
from agentloop import Event, encode_event

from ._report import CaseReport, Report, load_report

__all__ = ["GROUPS", "CaseDiff", "Comparison", "Divergence", "compare", "timeless"]

#: The groups of a comparison, in the order it lists them.
GROUPS: Final = ("changed", "same_outcome", "unchanged", "only_a", "only_b")


class Divergence(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """Where two sessions first differ.

    Attributes:
        index: the position of the first differing event (or of the first event
            one session has and the other has not).
        a, b: that event of each session, summarized as ``replay show`` does
            (``""``: that session has no event there).
        differences: field-level differences (``path: A -> B``), from
            ``replay.diff_events``.
        error: a log could not be read (then nothing else is set).
    """

    index: int = -1
    a: str = ""
    b: str = ""
    differences: tuple[str, ...] = ()
    error: str = ""


class CaseDiff(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """One case in a comparison."""

    id: str
    group: Literal["changed", "same_outcome", "unchanged", "only_a", "only_b"]
    score_a: float | None = None
    score_b: float | None = None
    passed_a: bool | None = None
    passed_b: bool | None = None
    status_a: str | None = None
    status_b: str | None = None
    changed_evaluators: tuple[str, ...] = ()
    divergence: Divergence | None = None

    @property
    def delta(self) -> float | None:
        if self.score_a is None or self.score_b is None:
            return None
        return self.score_b - self.score_a


class Comparison(msgspec.Struct, frozen=True, kw_only=True):
    """What :func:`compare` returns (``to_json`` for CI, ``text()`` for people)."""

    a: str
    b: str
    cases: tuple[CaseDiff, ...]

    def group(self, name: str) -> list[CaseDiff]:
        return [case for case in self.cases if case.group == name]

    def to_json(self) -> bytes:
        return msgspec.json.format(msgspec.json.encode(self), indent=2) + b"\n"

    def text(self) -> str:
        """The comparison for a terminal: one section per non-empty group."""
        titles = {
            "changed": "changed outcome",
            "same_outcome": "same outcome by another path",
            "unchanged": "unchanged behaviour",
            "only_a": f"only in A ({self.a})",
            "only_b": f"only in B ({self.b})",
        }
        lines = [f"A: {self.a}", f"B: {self.b}"]
        for name in GROUPS:
            members = self.group(name)
            if not members:
                continue
            lines.append("")
            lines.append(f"{titles[name]} ({len(members)})")
            for case in members:
                lines.extend(_case_lines(case))
        return "\n".join(_safe(line) for line in lines)


def _safe(text: str) -> str:
    return "".join(c if c.isprintable() else f"\\x{ord(c):02x}" for c in text)


def _score(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _case_lines(case: CaseDiff) -> list[str]:
    head = f"  {case.id}"
    if case.group in ("only_a", "only_b"):
        return [head]
    delta = case.delta
    change = f"{_score(case.score_a)} -> {_score(case.score_b)}"
    if delta:
        change += f" ({delta:+.2f})"
    verdicts = ""
    if case.passed_a != case.passed_b:
        verdicts = (
            f"  {'pass' if case.passed_a else 'FAIL'} -> {'pass' if case.passed_b else 'FAIL'}"
        )
    lines = [f"{head}  score {change}{verdicts}"]
    if case.status_a != case.status_b:
        lines.append(f"    status {case.status_a} -> {case.status_b}")
    for name in case.changed_evaluators:
        lines.append(f"    verdict changed: {name}")
    divergence = case.divergence
    if divergence is not None:
        if divergence.error:
            lines.append(f"    cannot compare the sessions: {divergence.error}")
        else:
            lines.append(f"    sessions diverge at event #{divergence.index}")
            lines.append(f"      A: {divergence.a or '(no event)'}")
            lines.append(f"      B: {divergence.b or '(no event)'}")
            lines.extend(f"      {line}" for line in divergence.differences)
    return lines


# --------------------------------------------------------------------------- time left out


def timeless(event: Event) -> Event:
    """``event`` with its times removed: its ``at`` and that of the reply it holds,
    and the ``wall_seconds`` of a budget usage (only these; values the model or a
    tool wrote are never touched)."""
    changes: dict[str, Any] = {}
    if event.at is not None:
        changes["at"] = None
    for name in event.__struct_fields__:
        value = getattr(event, name)
        if not isinstance(value, msgspec.Struct):
            continue
        inner: dict[str, Any] = {}
        if getattr(value, "at", None) is not None:
            inner["at"] = None
        if getattr(value, "wall_seconds", 0.0):
            inner["wall_seconds"] = 0.0
        if inner:
            changes[name] = msgspec.structs.replace(value, **inner)
    return msgspec.structs.replace(event, **changes) if changes else event


def _line(event: Event) -> str:
    summary = replay.summarize(event)
    return f"#{event.sequence} {event.type} step {event.step}  {summary}".rstrip()


def divergence(a: Sequence[Event], b: Sequence[Event]) -> Divergence | None:
    """The first place the sessions ``a`` and ``b`` differ (times aside), or ``None``."""
    x = [timeless(event) for event in a]
    y = [timeless(event) for event in b]
    for index, (one, other) in enumerate(zip(x, y, strict=False)):
        if encode_event(one) != encode_event(other):
            return Divergence(
                index=index,
                a=_line(one),
                b=_line(other),
                differences=tuple(replay.diff_events(one, other, labels=("A", "B"))),
            )
    if len(x) == len(y):
        return None
    shorter = min(len(x), len(y))
    return Divergence(
        index=shorter,
        a=_line(x[shorter]) if len(x) > shorter else "",
        b=_line(y[shorter]) if len(y) > shorter else "",
    )


def _events(folder: Path, case: CaseReport) -> list[Event]:
    if case.log is None:
        raise replay.LogError(f"case {case.id!r} has no session log")
    return replay.read_log(folder / case.log)


def compare(
    report_a: Report | str | os.PathLike[str],
    report_b: Report | str | os.PathLike[str],
    *,
    folder_a: str | os.PathLike[str] | None = None,
    folder_b: str | os.PathLike[str] | None = None,
) -> Comparison:
    """Compare two reports of the same dataset, case by case (see the module
    docstring for the groups).

    Args:
        report_a, report_b: a :class:`Report`, or the path of its ``report.json``
            (or of the folder holding it).
        folder_a, folder_b: the folder a :class:`Report` object's log paths are
            relative to (a loaded report knows its own).

    Raises:
        EvalError: a report cannot be read.
    """
    a, base_a, name_a = _loaded(report_a, folder_a)
    b, base_b, name_b = _loaded(report_b, folder_b)
    by_id = {case.id: case for case in b.cases}
    diffs: list[CaseDiff] = []
    for case in a.cases:
        other = by_id.pop(case.id, None)
        if other is None:
            diffs.append(CaseDiff(id=case.id, group="only_a", score_a=case.score))
            continue
        diffs.append(_diff(case, other, base_a, base_b))
    diffs.extend(
        CaseDiff(id=case.id, group="only_b", score_b=case.score) for case in by_id.values()
    )
    return Comparison(a=name_a, b=name_b, cases=tuple(diffs))


def _loaded(
    report: Report | str | os.PathLike[str], folder: str | os.PathLike[str] | None
) -> tuple[Report, Path, str]:
    if isinstance(report, Report):
        base = Path(folder) if folder is not None else Path(".")
        return report, base, report.agent or str(base)
    loaded, base = load_report(report)
    return loaded, base, str(report)


def _diff(a: CaseReport, b: CaseReport, base_a: Path, base_b: Path) -> CaseDiff:
    try:
        found = divergence(_events(base_a, a), _events(base_b, b))
    except (replay.LogError, OSError) as exc:
        found = Divergence(error=str(exc)[:500])
    verdicts_a = {s.evaluator: s.passed for s in a.scores}
    verdicts_b = {s.evaluator: s.passed for s in b.scores}
    changed = tuple(
        sorted(
            name
            for name in verdicts_a.keys() | verdicts_b.keys()
            if verdicts_a.get(name) != verdicts_b.get(name)
        )
    )
    same_outcome = not changed and a.status == b.status and a.passed == b.passed
    if found is None and same_outcome:
        group: Any = "unchanged"
    elif same_outcome:
        group = "same_outcome"
    else:
        group = "changed"
    return CaseDiff(
        id=a.id,
        group=group,
        score_a=a.score,
        score_b=b.score,
        passed_a=a.passed,
        passed_b=b.passed,
        status_a=a.status,
        status_b=b.status,
        changed_evaluators=changed,
        divergence=found,
    )
