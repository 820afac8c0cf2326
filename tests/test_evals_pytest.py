"""The agent_eval fixture: an evaluation as a test, offline through cassettes."""

from __future__ import annotations

import pytest

AGENT = """
from agentloop import FunctionModel
from agentloop.evals import Agent, Case, Contains, Dataset, Judge

pytest_plugins = ["agentloop.evals.pytest_plugin"]

DATA = Dataset(
    [
        Case(id="hi", prompt="Say hi", expect=(Contains(text="hi"),)),
        Case(id="judged", prompt="Be kind", expect=(Judge(rubric="kind", threshold=0.5),)),
    ],
    name="smoke",
)


def judge(request):
    if JUDGE_CALLS is not None:
        JUDGE_CALLS.append(request)
    return '{"score": 0.8, "reason": "kind"}'


JUDGE_CALLS = []


def agent(answer):
    return Agent(FunctionModel(lambda r: answer), judge=FunctionModel(judge), name="t")
"""


def write(pytester: pytest.Pytester, answer: str, marker: str = "") -> None:
    pytester.makeconftest(AGENT)
    pytester.makepyfile(
        test_eval=f"""
import pytest
import conftest

{marker}
def test_smoke(agent_eval):
    report = agent_eval.run(conftest.DATA, conftest.agent({answer!r}))
    assert report.case("judged").scores[0].score == 0.8
"""
    )


def test_record_then_replay_without_any_model(pytester: pytest.Pytester) -> None:
    write(pytester, "hi there")
    pytester.runpytest("--agentloop-record=once").assert_outcomes(passed=1)
    cassettes = sorted(p.name for p in (pytester.path / "cassettes" / "test_eval").iterdir())
    assert cassettes == ["test_smoke.2.jsonl", "test_smoke.3.jsonl", "test_smoke.jsonl"]
    # Replay: the judge (and the model) would raise if called.
    pytester.makeconftest(
        AGENT.replace("JUDGE_CALLS = []", "JUDGE_CALLS = None").replace(
            "    if JUDGE_CALLS is not None:\n        JUDGE_CALLS.append(request)\n",
            "    raise AssertionError('the judge was called')\n",
        )
    )
    pytester.runpytest().assert_outcomes(passed=1)


def test_below_the_threshold_the_test_fails_with_the_report(pytester: pytest.Pytester) -> None:
    write(pytester, "nope")
    result = pytester.runpytest("--agentloop-record=once")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*agentloop eval: pass rate 0.50 is below 1.00*",
            "*hi*FAIL*",
            "*fail 0.00  contains 'hi'*",
        ]
    )


def test_the_marker_sets_the_threshold(pytester: pytest.Pytester) -> None:
    write(pytester, "nope", "@pytest.mark.agent_eval(threshold=0.5)")
    pytester.runpytest("--agentloop-record=once").assert_outcomes(passed=1)
    write(pytester, "nope", "@pytest.mark.agent_eval(0.9)")
    pytester.runpytest().assert_outcomes(failed=1)


def test_a_missing_cassette_fails_the_test_saying_how_to_record(pytester: pytest.Pytester) -> None:
    write(pytester, "hi")
    result = pytester.runpytest()
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        ["agentloop: no cassette for this session: cassettes/test_eval/test_smoke.jsonl"]
    )


def test_a_judge_without_a_model_when_recording(pytester: pytest.Pytester) -> None:
    write(pytester, "hi")
    pytester.makepyfile(
        test_eval="""
import conftest
from agentloop import FunctionModel
from agentloop.evals import Agent

def test_smoke(agent_eval):
    report = agent_eval.run(conftest.DATA, Agent(FunctionModel(lambda r: "hi")), threshold=0.5)
    assert "needs a judge model" in report.case("judged").scores[0].error
"""
    )
    pytester.runpytest("--agentloop-record=once").assert_outcomes(passed=1)


def test_an_agent_that_crashes_is_a_per_case_error(pytester: pytest.Pytester) -> None:
    write(pytester, "hi")
    pytester.makepyfile(
        test_eval="""
import conftest
from agentloop.evals import Agent

def broken(case):
    raise RuntimeError("no model")

def test_smoke(agent_eval):
    report = agent_eval.run(conftest.DATA, Agent(broken), threshold=0.0)
    assert report.case("hi").error == "RuntimeError: no model"
"""
    )
    pytester.runpytest("--agentloop-record=once").assert_outcomes(passed=1)
