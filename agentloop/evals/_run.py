"""Running a dataset: every case a session through ``arun``, every log kept.

Theory of operation
-------------------
:func:`arun_eval` starts one task per case, at most ``concurrency`` at once (an
``asyncio.Semaphore``). A case's session runs through :func:`agentloop.arun` with
the agent's model, tools and options, its events written as they happen to
``<out>/sessions/<case>.jsonl`` by ``replay.LogWriter``. Then its evaluators score
the :class:`Outcome`: each in its own ``try``, so one that raises is that
evaluator's error, never the run's. A :class:`Judge` is a session too: the agent's
``judge`` model answers one user message holding the rubric, the case and the
answer, with structured output (:class:`Verdict`), and its log is kept as
``<case>.judge-<n>.jsonl``. An exception out of ``arun`` itself (a bad option, a
model factory that raises) is the case's ``error``; the other cases go on.

:func:`rescore` is the same scoring with no model at all: each case's session and
each judge's session are replayed from their logs (``replay.replay``), so a
judged report is re-scored (say, after editing a non-judge evaluator) without
calling the judge. A judge with no recorded session is an error for that case.
"""

from __future__ import annotations

import asyncio
import glob
import hashlib
import inspect
import math
import os
import re
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from pathlib import Path
from typing import Annotated, Any, Final

import msgspec

import replay
from agentloop import (
    Event,
    EventLog,
    Message,
    RunResult,
    Tool,
    ToolRegistry,
    ToolSpec,
    Usage,
    UserMessage,
    arun,
)

from ._dataset import Case, Dataset
from ._errors import EvalError
from ._evaluators import Judge, Outcome, Score, verdict
from ._report import CaseReport, Report, render_report_page, render_session_page, totals

__all__ = [
    "JUDGE_SYSTEM",
    "Agent",
    "Pricing",
    "Verdict",
    "arun_eval",
    "rescore",
    "run_eval",
    "write_pages",
]

#: The judge's system prompt.
JUDGE_SYSTEM: Final = (
    "You grade an AI assistant's answer against a rubric. Reply with only a JSON "
    'object {"score": <number from 0 to 1>, "reason": "<one sentence>"}.'
)


class Verdict(msgspec.Struct, frozen=True):
    """The judge's structured answer."""

    score: Annotated[float, msgspec.Meta(ge=0, le=1)]
    reason: str = ""


class Pricing(msgspec.Struct, frozen=True, kw_only=True):
    """Prices per million tokens, to report cost (``None`` anywhere: no cost)."""

    input: float
    output: float
    cache_read: float | None = None

    def cost(self, usage: Usage) -> float:
        cached = usage.cache_read_tokens if self.cache_read is not None else 0
        read = (self.cache_read or 0.0) * cached
        return (
            self.input * (usage.input_tokens - cached) + read + self.output * usage.output_tokens
        ) / 1e6


class Agent:
    """What :func:`arun_eval` runs each case with.

    Args:
        model: the model (with ``astream``: ``ScriptedModel``, ``FunctionModel``,
            an adapter given an async SDK client), or a function of the
            :class:`Case` returning one (a fresh ``ScriptedModel`` per case, say).
        tools: the tools (a case may offer only some, by name).
        system: the system prompt.
        judge: the model (or a function of the case) that answers :class:`Judge`
            evaluators.
        pricing: prices, to report cost.
        name: shown in the report.
        options: any other keyword of :func:`agentloop.arun` (``max_steps``,
            ``budget``, ``hooks``, ``limits``, ``output``, ``parallel_tools``, ...).
    """

    def __init__(
        self,
        model: Any,
        *,
        tools: ToolRegistry | Iterable[Tool | ToolSpec] = (),
        system: str | None = None,
        judge: Any = None,
        pricing: Pricing | None = None,
        name: str = "",
        **options: Any,
    ) -> None:
        for key in ("log", "messages", "model", "tools", "system"):
            if key in options:
                raise TypeError(f"Agent() takes no option {key!r} (the runner sets it)")
        self.model = model
        self.tools = ToolRegistry(tools)
        self.system = system
        self.judge = judge
        self.pricing = pricing
        self.name = name
        self.options = options

    def model_for(self, case: Case, which: Any = None) -> Any:
        model = self.model if which is None else which
        if hasattr(model, "astream") or hasattr(model, "stream"):
            return model
        if callable(model):
            return model(case)
        raise TypeError(
            f"the agent's model must be a model or a function of the case, got {model!r}"
        )

    def tools_for(self, case: Case) -> ToolRegistry:
        if case.tools is None:
            return self.tools
        known = {spec.name for spec in self.tools.specs()}
        unknown = [name for name in case.tools if name not in known]
        if unknown:
            raise EvalError(
                f"case {case.id!r} offers the tool {unknown[0]!r}, which the agent does not "
                f"have (it has: {', '.join(sorted(known)) or 'none'})"
            )
        return ToolRegistry(self.tools.get(name) for name in case.tools)  # type: ignore[misc]

    def __repr__(self) -> str:
        return f"<Agent {self.name or type(self.model).__name__}>"


# --------------------------------------------------------------------------- files

_UNSAFE: Final = re.compile(r"[^A-Za-z0-9._-]")


def log_name(case_id: str) -> str:
    """A file name for a case id: the id when it is safe, else a safe version of it
    with a hash of the whole id (two ids never share a file)."""
    safe = _UNSAFE.sub("_", case_id)[:80]
    if safe == case_id and not safe.startswith("."):
        return safe
    digest = hashlib.sha256(case_id.encode("utf-8", "surrogatepass")).hexdigest()[:10]
    return f"{safe.lstrip('.')}-{digest}"


# --------------------------------------------------------------------------- scoring

JudgeSession = Callable[[int, Judge, Sequence[Message]], Awaitable[tuple[RunResult | None, str]]]
"""``(index, judge, messages) -> (result, log path)``: runs (or replays) one judge session."""


def judge_messages(judge: Judge, case: Case, outcome: Outcome) -> tuple[Message, ...]:
    """The judge's one user message: rubric, question, answer."""
    question = "\n".join(
        str(message.content) for message in case.initial_messages() if type(message) is UserMessage
    )
    answer = outcome.final_text
    shown = "(no answer)" if answer is None else answer[:20_000]
    text = (
        f"Rubric:\n{judge.rubric}\n\nQuestion:\n{question[:20_000]}\n\nAnswer:\n{shown}\n\n"
        'Reply with only {"score": <0..1>, "reason": "..."}.'
    )
    return (UserMessage("judge-1", text),)


def _judged(judge: Judge, result: RunResult | None) -> Score:
    name = judge.describe()
    if result is None:
        return Score(
            evaluator=name, passed=False, score=0.0, error="the judge session did not finish"
        )
    value = result.output
    if result.status != "completed" or not isinstance(value, Verdict):
        error = result.error.message if result.error is not None else result.status
        return Score(
            evaluator=name,
            passed=False,
            score=0.0,
            error=f"the judge gave no verdict ({result.status}): {error}"[:500],
        )
    return Score(
        evaluator=name,
        passed=value.score >= judge.threshold,
        score=float(value.score),
        reason=value.reason[:500],
    )


async def score_case(
    case: Case,
    outcome: Outcome,
    judge_session: JudgeSession,
    extra: Sequence[Callable[[Outcome], Any]] = (),
) -> tuple[Score, ...]:
    """Every evaluator of ``case`` (then ``extra`` functions) on ``outcome``; each
    failure to evaluate is that evaluator's error."""
    scores: list[Score] = []
    judges = 0
    evaluators: list[Any] = [*case.expect, *extra]
    for evaluator in evaluators:
        if isinstance(evaluator, Judge):
            judges += 1
        name = _name(evaluator)
        if outcome.result is None:
            scores.append(
                Score(
                    evaluator=name,
                    passed=False,
                    score=0.0,
                    error="not evaluated: the agent crashed",
                )
            )
            continue
        try:
            if isinstance(evaluator, Judge):
                messages = judge_messages(evaluator, case, outcome)
                result, _ = await judge_session(judges, evaluator, messages)
                score = _judged(evaluator, result)
            elif hasattr(evaluator, "evaluate"):
                score = evaluator.evaluate(outcome)
            else:
                answer = evaluator(outcome)
                if inspect.isawaitable(answer):
                    answer = await answer
                score = verdict(name, answer)
            if not math.isfinite(score.score) or not 0 <= score.score <= 1:
                raise ValueError(f"score {score.score!r} is not from 0 to 1")
        except Exception as exc:
            score = Score(
                evaluator=name,
                passed=False,
                score=0.0,
                error=f"{type(exc).__name__}: {exc}"[:1000],
            )
        scores.append(score)
    return tuple(scores)


def _name(evaluator: Any) -> str:
    if hasattr(evaluator, "describe"):
        return str(evaluator.describe())
    return f"custom {getattr(evaluator, '__name__', None) or type(evaluator).__name__}"


def case_report(
    case: Case,
    outcome: Outcome,
    scores: tuple[Score, ...],
    log: str | None,
    judge_logs: Sequence[str],
) -> CaseReport:
    result = outcome.result
    if outcome.error is not None:
        score = 0.0
    elif scores:
        score = sum(s.score for s in scores) / len(scores)
    else:
        score = 1.0
    text = None if result is None else result.final_text
    return CaseReport(
        id=case.id,
        passed=outcome.error is None and all(s.passed for s in scores),
        score=score,
        status=None if result is None else result.status,
        reason="" if result is None else result.reason,
        final_text=None if text is None else text[:4000],
        steps=0 if result is None else result.steps,
        tool_calls=len(outcome.tool_calls),
        usage=Usage() if result is None else result.usage,
        cost=outcome.cost,
        seconds=outcome.seconds,
        error=outcome.error,
        log=log,
        judge_logs=tuple(judge_logs),
        scores=scores,
        metadata=case.metadata,
    )


# --------------------------------------------------------------------------- live runs


async def arun_eval(
    dataset: Dataset,
    agent: Agent,
    *,
    out: str | os.PathLike[str],
    concurrency: int = 4,
    on_progress: Callable[[int, int, CaseReport], None] | None = None,
    evaluators: Sequence[Callable[[Outcome], Any]] = (),
    pages: bool = True,
) -> Report:
    """Run every case of ``dataset`` with ``agent``, score it, write the report.

    Args:
        dataset: the cases.
        agent: the :class:`Agent`.
        out: the folder for ``report.json``, ``report.html`` and ``sessions/``
            (each case's log ``<case>.jsonl``, its judges' logs, and a page per log).
        concurrency: at most this many cases at once.
        on_progress: called after each case with ``(done, total, case report)``.
        evaluators: functions of the :class:`Outcome` applied to every case, after
            its own (see :class:`Custom` for what they return).
        pages: write the HTML pages too.

    Returns:
        The :class:`Report` (also written as ``out/report.json``).

    Raises:
        ValueError: ``concurrency`` is not a positive int.
        OSError: ``out`` cannot be written.
    """
    if type(concurrency) is not int or concurrency < 1:
        raise ValueError(f"concurrency must be a positive int, got {concurrency!r}")
    folder = Path(out)
    sessions = folder / "sessions"
    sessions.mkdir(parents=True, exist_ok=True)
    gate = asyncio.Semaphore(concurrency)
    done = 0

    async def one(case: Case) -> CaseReport:
        nonlocal done
        async with gate:
            report = await _run_case(case, agent, sessions, evaluators)
        done += 1
        if on_progress is not None:
            on_progress(done, len(dataset), report)
        return report

    cases = await asyncio.gather(*(one(case) for case in dataset))
    report = Report(
        dataset=dataset.name,
        agent=agent.name,
        cases=tuple(cases),
        totals=totals(cases),
    )
    write_report(report, folder, pages=pages)
    return report


def run_eval(dataset: Dataset, agent: Agent, **options: Any) -> Report:
    """:func:`arun_eval` from sync code (``asyncio.run``)."""
    return asyncio.run(arun_eval(dataset, agent, **options))


async def _run_case(
    case: Case, agent: Agent, sessions: Path, extra: Sequence[Callable[[Outcome], Any]]
) -> CaseReport:
    name = log_name(case.id)
    path = sessions / f"{name}.jsonl"
    for old in sessions.glob(f"{glob.escape(name)}.*"):  # an earlier run's, into this folder
        if old.name == f"{name}.jsonl" or old.name.startswith(f"{name}.judge-"):
            old.unlink()
    log = EventLog()
    started = time.perf_counter()
    result: RunResult | None = None
    error: str | None = None
    try:
        with replay.LogWriter(path) as writer:
            writer.follow(log)
            result = await arun(
                case.initial_messages(),
                model=agent.model_for(case),
                tools=agent.tools_for(case),
                system=agent.system,
                log=log,
                **agent.options,
            )
    except Exception as exc:
        error = f"{type(exc).__name__}: {exc}"[:2000]
    seconds = time.perf_counter() - started
    cost = None
    if result is not None and agent.pricing is not None:
        cost = agent.pricing.cost(result.usage)
    outcome = Outcome(
        case_id=case.id, result=result, events=tuple(log), seconds=seconds, cost=cost, error=error
    )
    judge_logs: list[str] = []

    async def judge_session(
        index: int, judge: Judge, messages: Sequence[Message]
    ) -> tuple[RunResult | None, str]:
        if agent.judge is None:
            raise EvalError("a judge evaluator needs a judge model: Agent(..., judge=model)")
        judge_path = sessions / f"{name}.judge-{index}.jsonl"
        judge_log = EventLog()
        with replay.LogWriter(judge_path) as writer:
            writer.follow(judge_log)
            verdict = await arun(
                messages,
                model=agent.model_for(case, agent.judge),
                tools=[],
                system=JUDGE_SYSTEM,
                log=judge_log,
                output=Verdict,
                max_steps=3,
            )
        judge_logs.append(judge_path.relative_to(sessions.parent).as_posix())
        return verdict, judge_path.as_posix()

    scores = await score_case(case, outcome, judge_session, extra)
    relative = path.relative_to(sessions.parent).as_posix() if path.exists() else None
    return case_report(case, outcome, scores, relative, judge_logs)


# --------------------------------------------------------------------------- files and pages


def write_report(report: Report, folder: Path, *, pages: bool = True) -> None:
    """``report.json`` (and, with ``pages``, ``report.html`` and a page per log)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "report.json").write_bytes(report.to_json())
    if pages:
        write_pages(report, folder)


def write_pages(report: Report, folder: Path) -> None:
    """``report.html`` and, next to each session log, its page (the log viewer's)."""
    for case in report.cases:
        for log in (case.log, *case.judge_logs):
            if log is None:
                continue
            path = folder / log
            try:
                events = replay.read_log(path)
            except (replay.LogError, OSError):
                continue  # the report still links it; the page says nothing more
            page = render_session_page(events, source=log)
            path.with_suffix(".html").write_text(page, encoding="utf-8")
    (folder / "report.html").write_text(render_report_page(report), encoding="utf-8")


# --------------------------------------------------------------------------- replayed


def rescore(
    report: Report,
    folder: str | os.PathLike[str],
    dataset: Dataset,
    *,
    hooks: Any = None,
    output: Any = None,
    evaluators: Sequence[Callable[[Outcome], Any]] = (),
) -> Report:
    """Score the sessions of ``report`` again, from their logs, with no model.

    Each case's log is replayed (``replay.replay``, checked byte for byte) and the
    case's evaluators in ``dataset`` run on it; a :class:`Judge` replays its
    recorded session instead of calling the judge. ``seconds`` and ``cost`` are
    the recorded ones. Cases of the report that are not in the dataset are left
    out; a log that is missing or does not replay is that case's error.

    Args:
        hooks, output: the agent's ``hooks`` and ``output`` options, if it had any
            (a replay runs the hooks again and decodes the output).
    """
    base = Path(folder)
    cases: list[CaseReport] = []
    for recorded in report.cases:
        try:
            case = dataset[recorded.id]
        except KeyError:
            continue
        cases.append(asyncio.run(_rescore_case(case, recorded, base, hooks, output, evaluators)))
    return Report(
        dataset=report.dataset, agent=report.agent, cases=tuple(cases), totals=totals(cases)
    )


async def _rescore_case(
    case: Case,
    recorded: CaseReport,
    base: Path,
    hooks: Any,
    output: Any,
    extra: Sequence[Callable[[Outcome], Any]],
) -> CaseReport:
    result: RunResult | None = None
    events: tuple[Event, ...] = ()
    error = recorded.error
    if recorded.log is None:
        error = error or "no session log"
    else:
        try:
            replayed = replay.replay(
                replay.read_log(base / recorded.log), hooks=hooks, output=output
            )
            result, events = replayed.result, replayed.events
        except (replay.ReplayError, replay.LogError, OSError) as exc:
            error = f"{recorded.log} does not replay: {exc}"[:2000]
    outcome = Outcome(
        case_id=case.id,
        result=result if error is None else None,
        events=events,
        seconds=recorded.seconds,
        cost=recorded.cost,
        error=error,
    )
    judge_logs = list(recorded.judge_logs)

    async def judge_session(
        index: int, judge: Judge, messages: Sequence[Message]
    ) -> tuple[RunResult | None, str]:
        suffix = f".judge-{index}.jsonl"
        recorded_log = next((log for log in judge_logs if log.endswith(suffix)), None)
        if recorded_log is None:
            raise EvalError(
                "no recorded judge session for this judge; run the case live to judge it"
            )
        path = base / recorded_log
        replayed = replay.replay(replay.read_log(path), output=Verdict)
        return replayed.result, path.as_posix()

    scores = await score_case(case, outcome, judge_session, extra)
    return case_report(case, outcome, scores, recorded.log, judge_logs)
