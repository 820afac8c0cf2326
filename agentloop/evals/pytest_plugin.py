"""pytest integration: an evaluation is a test, offline through cassettes.

The fixture ``agent_eval`` runs a dataset through the ``agent_cassette`` fixture of
``replay.pytest_plugin``: each case's session (and each judge's) is one cassette,
recorded with ``--agentloop-record=once|all`` and replayed by a plain ``pytest``,
with no model and no network. The test fails, showing the report's table, when
the pass rate is below the threshold::

    @pytest.mark.agent_eval(threshold=0.8)
    def test_weather_agent(agent_eval):
        report = agent_eval.run(Dataset.load("cases.jsonl"), make_agent())
        assert report.case("sum").passed

The plugin is opt-in, so that test sessions that do not evaluate pay nothing for
it (``import agentloop`` included): enable it in a ``conftest.py`` with
``pytest_plugins = ["agentloop.evals.pytest_plugin"]`` (or ``-p
agentloop.evals.pytest_plugin``). It needs the cassette plugin, which the
``pytest`` extra registers.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import pytest

__all__ = ["AgentEval", "agent_eval"]


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "agent_eval(threshold=1.0): the pass rate agent_eval.run() must reach (agentloop.evals)",
    )


class AgentEval:
    """What the ``agent_eval`` fixture gives: :meth:`run` a dataset as a test."""

    def __init__(self, cassette: Any, threshold: float) -> None:
        self.cassette = cassette
        self.threshold = threshold

    def run(self, dataset: Any, agent: Any, *, threshold: float | None = None) -> Any:
        """Run (record or replay) every case, in order; fail the test below the threshold.

        Returns:
            The :class:`agentloop.evals.Report` (its ``log`` paths are the cassettes).
        """
        from agentloop.evals._report import Report
        from agentloop.evals._report import totals as sum_up

        cases = [asyncio.run(self._case(case, agent)) for case in dataset]
        report = Report(
            dataset=dataset.name, agent=agent.name, cases=tuple(cases), totals=sum_up(cases)
        )
        wanted = self.threshold if threshold is None else threshold
        if report.pass_rate < wanted:
            pytest.fail(
                f"agentloop eval: pass rate {report.pass_rate:.2f} is below {wanted:.2f}\n"
                f"{report.table()}",
                pytrace=False,
            )
        return report

    async def _case(self, case: Any, agent: Any) -> Any:
        from agentloop import RunResult
        from agentloop.evals._evaluators import Judge, Outcome
        from agentloop.evals._run import JUDGE_SYSTEM, Verdict, case_report, score_case

        cassette = self.cassette
        live = cassette.recording
        result: RunResult | None = None
        error: str | None = None
        log: str | None = None
        try:
            result = cassette.run(
                case.initial_messages(),
                model=agent.model_for(case) if live else None,
                tools=agent.tools_for(case),
                system=agent.system,
                **agent.options,
            )
            log = str(cassette.paths[-1])
        except Exception as exc:
            error = f"{type(exc).__name__}: {exc}"[:2000]
        events = tuple(cassette.events) if error is None else ()
        outcome = Outcome(case_id=case.id, result=result, events=events, error=error)
        judge_logs: list[str] = []

        async def judge_session(
            index: int, judge: Judge, messages: Sequence[Any]
        ) -> tuple[RunResult | None, str]:
            if agent.judge is None and cassette.recording:
                raise ValueError("a judge evaluator needs a judge model: Agent(..., judge=model)")
            verdict = cassette.run(
                messages,
                model=agent.model_for(case, agent.judge) if cassette.recording else None,
                tools=[],
                system=JUDGE_SYSTEM,
                output=Verdict,
                max_steps=3,
            )
            judge_logs.append(str(cassette.paths[-1]))
            return verdict, judge_logs[-1]

        scores = await score_case(case, outcome, judge_session)
        return case_report(case, outcome, scores, log, judge_logs)


@pytest.fixture
def agent_eval(request: pytest.FixtureRequest, agent_cassette: Any) -> AgentEval:
    """Run an agentloop.evals dataset as this test (see :class:`AgentEval`)."""
    marker = request.node.get_closest_marker("agent_eval")
    threshold = 1.0
    if marker is not None:
        threshold = float(marker.kwargs.get("threshold", marker.args[0] if marker.args else 1.0))
    return AgentEval(agent_cassette, threshold)
