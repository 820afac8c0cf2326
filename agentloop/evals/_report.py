"""The report of an evaluation: per case, per evaluator; as a table, JSON and HTML.

The JSON form (``report.json``) is the contract for CI and for ``compare``: a
:class:`Report` encoded by msgspec, with ``format`` = :data:`REPORT_FORMAT` and
``version`` = :data:`REPORT_VERSION`. Fields may be added (with defaults); none is
removed or changes meaning without a new version. Paths in it (``log``,
``judge_logs``) are relative to the report's folder, so the folder can move.
"""

from __future__ import annotations

import html
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

import msgspec

from agentloop import Usage

from ._errors import EvalError
from ._evaluators import Score

__all__ = [
    "REPORT_FORMAT",
    "REPORT_VERSION",
    "CaseReport",
    "Report",
    "Totals",
    "load_report",
    "render_session_page",
]

#: ``format`` of ``report.json``.
REPORT_FORMAT: Final = "agentloop-eval-report"
#: ``version`` of ``report.json`` this agentloop writes (and the newest it reads).
REPORT_VERSION: Final = 1


class CaseReport(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """One case's line of the report.

    Attributes:
        id: the case id.
        passed: every evaluator passed and nothing crashed.
        score: the mean of the evaluators' scores (0 when the agent crashed; 1 for
            a case with no evaluators whose agent did not crash).
        status, reason: the run's status and reason (``None``: no run result).
        final_text: the session's final text (cut to 4,000 characters).
        steps, tool_calls, usage: from the session.
        cost: from the agent's pricing (``None``: no pricing).
        seconds: the session's wall-clock duration.
        error: the agent's crash (an exception out of ``arun``), if any.
        log: the session's log file, relative to the report.
        judge_logs: the judge sessions' log files (``<case>.judge-<n>.jsonl`` for
            the case's n-th judge; a judge that could not run has none).
        scores: one per evaluator, in the case's order.
        metadata: the case's metadata.
    """

    id: str
    passed: bool
    score: float
    status: str | None = None
    reason: str = ""
    final_text: str | None = None
    steps: int = 0
    tool_calls: int = 0
    usage: Usage = msgspec.field(default_factory=Usage)
    cost: float | None = None
    seconds: float | None = None
    error: str | None = None
    log: str | None = None
    judge_logs: tuple[str, ...] = ()
    scores: tuple[Score, ...] = ()
    metadata: dict[str, Any] = msgspec.field(default_factory=dict)


class Totals(msgspec.Struct, frozen=True, kw_only=True):
    """Sums over the cases."""

    cases: int
    passed: int
    failed: int
    errors: int
    score: float
    input_tokens: int
    output_tokens: int
    cost: float | None
    seconds: float


class Report(msgspec.Struct, frozen=True, kw_only=True):
    """An evaluation's outcome (see the module docstring for the JSON contract).

    Attributes:
        dataset: the dataset's name.
        agent: the agent's name (its ``module:function`` spec from the CLI).
        cases: one :class:`CaseReport` per case, in the dataset's order.
        totals: the sums.
        path: where the report was written (not in the JSON; set by
            :func:`load_report` and the runner).
    """

    format: str = REPORT_FORMAT
    version: int = REPORT_VERSION
    dataset: str = ""
    agent: str = ""
    cases: tuple[CaseReport, ...] = ()
    totals: Totals | None = None

    @property
    def pass_rate(self) -> float:
        """Passed cases / cases (1.0 for no cases)."""
        return sum(c.passed for c in self.cases) / len(self.cases) if self.cases else 1.0

    def case(self, case_id: str) -> CaseReport:
        for case in self.cases:
            if case.id == case_id:
                return case
        raise KeyError(case_id)

    def to_json(self) -> bytes:
        return msgspec.json.format(msgspec.json.encode(self), indent=2) + b"\n"

    def table(self, *, width: int = 100) -> str:
        """The terminal table: one line per case, one indented line per failed or
        erroring evaluator, then the totals."""
        return _table(self, width)


def totals(cases: Sequence[CaseReport]) -> Totals:
    costs = [c.cost for c in cases if c.cost is not None]
    return Totals(
        cases=len(cases),
        passed=sum(c.passed for c in cases),
        failed=sum(not c.passed for c in cases),
        errors=sum(c.error is not None or any(s.error for s in c.scores) for c in cases),
        score=sum(c.score for c in cases) / len(cases) if cases else 1.0,
        input_tokens=sum(c.usage.input_tokens for c in cases),
        output_tokens=sum(c.usage.output_tokens for c in cases),
        cost=sum(costs) if costs else None,
        seconds=sum(c.seconds or 0.0 for c in cases),
    )


_decode_report = msgspec.json.Decoder(Report).decode


def load_report(path: str | os.PathLike[str]) -> tuple[Report, Path]:
    """Read ``report.json`` (or the folder holding it).

    Returns:
        ``(report, folder)``: the report and the folder its paths are relative to.

    Raises:
        EvalError: no such file, not a report, or a newer version.
    """
    file = Path(path)
    if file.is_dir():
        file = file / "report.json"
    try:
        data = file.read_bytes()
    except OSError as exc:
        raise EvalError(f"{file}: cannot read the report: {exc.strerror or exc}") from None
    try:
        head = msgspec.json.decode(data)
    except msgspec.DecodeError as exc:
        raise EvalError(f"{file}: not a report (not JSON: {exc})") from None
    if not isinstance(head, dict) or head.get("format") != REPORT_FORMAT:
        raise EvalError(f"{file}: not an agentloop eval report (no format {REPORT_FORMAT!r})")
    version = head.get("version")
    if not isinstance(version, int) or version > REPORT_VERSION:
        raise EvalError(
            f"{file}: report version {version!r}; this agentloop reads up to {REPORT_VERSION}"
        )
    try:
        return _decode_report(data), file.parent
    except msgspec.ValidationError as exc:
        raise EvalError(f"{file}: a malformed report: {exc}") from None


# --------------------------------------------------------------------------- the table


def _money(value: float | None) -> str:
    return "-" if value is None else f"${value:.4f}"


def _safe(text: str) -> str:
    """One line, no control characters (what a model wrote must not drive the terminal)."""
    return "".join(c if c.isprintable() else f"\\x{ord(c):02x}" for c in text[:500])


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: max(width - 1, 0)] + "…"


def _table(report: Report, width: int) -> str:
    id_width = min(max([len("case"), *(len(_safe(c.id)) for c in report.cases)]), 32)
    head = (
        f"{'case':<{id_width}}  {'result':<6}  {'score':>5}  {'steps':>5}  {'tokens':>11}  status"
    )
    lines = [head, "-" * min(len(head) + 12, width)]
    for case in report.cases:
        result = "ERROR" if case.error is not None else ("pass" if case.passed else "FAIL")
        tokens = f"{case.usage.input_tokens}/{case.usage.output_tokens}"
        status = "-" if case.status is None else case.status
        lines.append(
            _cut(
                f"{_cut(_safe(case.id), id_width):<{id_width}}  {result:<6}  {case.score:>5.2f}  "
                f"{case.steps:>5}  {tokens:>11}  {status}",
                width,
            )
        )
        if case.error is not None:
            lines.append(_cut(f"    crashed: {_safe(case.error)}", width))
        for score in case.scores:
            if score.passed and score.error is None:
                mark, why = "ok  ", ""
            elif score.error is not None:
                mark, why = "ERR ", score.error
            else:
                mark, why = "fail", score.reason
            line = f"    {mark} {score.score:.2f}  {_safe(score.evaluator)}"
            if why:
                line += f": {_safe(why)}"
            lines.append(_cut(line, width))
    total = report.totals
    if total is not None:
        lines.append("-" * min(len(head) + 12, width))
        lines.append(
            f"{total.passed}/{total.cases} passed ({total.failed} failed, {total.errors} with "
            f"errors)  mean score {total.score:.2f}  tokens {total.input_tokens} in / "
            f"{total.output_tokens} out  cost {_money(total.cost)}"
        )
    return "\n".join(lines)


# --------------------------------------------------------------------------- HTML

_STYLE: Final = """
body{font:14px/1.45 system-ui,sans-serif;margin:2rem;color:#1b1f24;background:#fff}
h1{font-size:1.4rem}table{border-collapse:collapse;width:100%}
th,td{text-align:left;padding:.3rem .6rem;border-bottom:1px solid #d8dee4;vertical-align:top}
th{background:#f6f8fa}.pass{color:#1a7f37;font-weight:600}.fail{color:#cf222e;font-weight:600}
.err{color:#9a6700;font-weight:600}.num{text-align:right;font-variant-numeric:tabular-nums}
ul{margin:.2rem 0;padding-left:1.2rem}.muted{color:#57606a}
"""


def render_session_page(events: Sequence[Any], *, source: str) -> str:
    """One session's page: the log viewer's (``replay.view_html``, what
    ``python -m replay view`` writes)."""
    from replay import view_html

    return view_html(events, source=source)


def render_report_page(report: Report) -> str:
    """The report as one self-contained HTML page (no script, no network): totals,
    then one row per case with its evaluators, each case's id linking to its
    session page (``sessions/<id>.html``) and its judges'."""
    escape = html.escape
    rows = []
    for case in report.cases:
        if case.error is not None:
            verdict = '<span class="err">ERROR</span>'
        else:
            verdict = (
                '<span class="pass">pass</span>'
                if case.passed
                else '<span class="fail">FAIL</span>'
            )
        name = escape(case.id)
        if case.log is not None:
            page = os.path.splitext(case.log)[0] + ".html"
            name = f'<a href="{escape(page, quote=True)}">{name}</a>'
        items = []
        if case.error is not None:
            items.append(f'<li class="err">crashed: {escape(case.error)}</li>')
        for score in case.scores:
            cls = "pass" if score.passed else ("err" if score.error else "fail")
            why = score.error or score.reason
            text = f'<span class="{cls}">{score.score:.2f}</span> {escape(score.evaluator)}'
            if why:
                text += f' <span class="muted">{escape(why)}</span>'
            items.append(f"<li>{text}</li>")
        for judge in case.judge_logs:
            page = os.path.splitext(judge)[0] + ".html"
            items.append(f'<li><a href="{escape(page, quote=True)}">judge session</a></li>')
        tokens = f"{case.usage.input_tokens} / {case.usage.output_tokens}"
        final = escape(_cut(case.final_text or "", 300))
        rows.append(
            f"<tr><td>{name}</td><td>{verdict}</td><td class=num>{case.score:.2f}</td>"
            f"<td>{escape(case.status or '-')}</td><td class=num>{case.steps}</td>"
            f"<td class=num>{tokens}</td><td class=num>{escape(_money(case.cost))}</td>"
            f"<td><ul>{''.join(items)}</ul><div class=muted>{final}</div></td></tr>"
        )
    total = report.totals
    summary = ""
    if total is not None:
        summary = (
            f"<p><b>{total.passed}/{total.cases} passed</b> ({total.failed} failed, "
            f"{total.errors} with errors) · mean score {total.score:.2f} · tokens "
            f"{total.input_tokens} in / {total.output_tokens} out · cost "
            f"{escape(_money(total.cost))}</p>"
        )
    title = escape(f"{report.dataset} · {report.agent}")
    return (
        "<!doctype html><html lang=en><head><meta charset=utf-8>"
        '<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; '
        "style-src 'unsafe-inline'\">"
        f"<title>{title} · agentloop eval</title><style>{_STYLE}</style></head><body>"
        f"<h1>{title}</h1>{summary}"
        "<table><thead><tr><th>case</th><th>result</th><th>score</th><th>status</th>"
        "<th>steps</th><th>tokens in / out</th><th>cost</th><th>evaluators</th></tr></thead>"
        f"<tbody>{''.join(rows)}</tbody></table></body></html>\n"
    )
