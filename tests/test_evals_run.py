"""agentloop.evals runs: the example end to end, per-case errors, judges replayed,
reports, compare and the CLI (DESIGN §28)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import msgspec
import pytest

import replay
from agentloop import FunctionModel, ModelRequest, ScriptedModel, ScriptedResponse
from agentloop.__main__ import main as agentloop_main
from agentloop.evals import (
    REPORT_FORMAT,
    REPORT_VERSION,
    Agent,
    Case,
    Contains,
    Custom,
    Dataset,
    EvalError,
    Exact,
    Judge,
    Outcome,
    Pricing,
    Report,
    Score,
    compare,
    load_report,
    rescore,
    run_eval,
)
from agentloop.evals._cli import main
from agentloop.evals._evaluators import load_function
from agentloop.evals._run import log_name

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "docs" / "examples" / "evals"
DATASET = EXAMPLE / "dataset.jsonl"
AGENT = EXAMPLE / "agent.py"


def example_agent(name: str) -> Agent:
    agent = load_function(f"{AGENT}:{name}")()
    assert isinstance(agent, Agent)
    return agent


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("runs")
    for name in ("careful", "hasty"):
        run_eval(Dataset.load(DATASET), example_agent(name), out=base / name, concurrency=2)
    return {"careful": base / "careful", "hasty": base / "hasty"}


# --------------------------------------------------------------------------- the example


def test_the_example_run_writes_every_report(runs: dict[str, Path]) -> None:
    folder = runs["careful"]
    report, base = load_report(folder)
    assert base == folder
    assert (report.format, report.version, report.agent) == (
        REPORT_FORMAT,
        REPORT_VERSION,
        "careful",
    )
    assert [case.id for case in report.cases] == [
        "sum",
        "weather-oslo",
        "weather-json",
        "greeting",
        "sky",
    ]
    assert all(case.passed for case in report.cases)
    assert report.totals is not None and report.totals.passed == 5
    assert report.totals.cost is not None and report.totals.cost > 0
    for case in report.cases:
        assert case.log is not None
        events = replay.read_log(folder / case.log)
        assert replay.replay(events).result is not None  # every kept log replays
        assert (folder / case.log).with_suffix(".html").exists()
    sky = report.case("sky")
    assert sky.judge_logs == ("sessions/sky.judge-1.jsonl",)
    assert (folder / "sessions" / "sky.judge-1.html").exists()
    page = (folder / "report.html").read_text()
    assert 'href="sessions/sum.html"' in page and 'href="sessions/sky.judge-1.html"' in page
    assert "http" not in page.split("<body>", 1)[1]  # nothing fetched: no links out


def test_the_table(runs: dict[str, Path]) -> None:
    report, _ = load_report(runs["hasty"])
    table = report.table()
    assert "sum           FAIL     0.67      1        70/12  completed" in table
    assert "    fail 0.00  trajectory in_order [add]: 0 of 1 matched; calls made: []" in table
    assert table.splitlines()[-1].startswith(
        "2/5 passed (3 failed, 0 with errors)  mean score 0.55"
    )


def test_compare_groups_cases_and_shows_where_they_diverge(runs: dict[str, Path]) -> None:
    comparison = compare(runs["careful"], runs["hasty"])
    groups = {case.id: case.group for case in comparison.cases}
    assert groups == {
        "sum": "changed",
        "weather-json": "changed",
        "sky": "changed",
        "weather-oslo": "same_outcome",
        "greeting": "unchanged",
    }
    oslo = next(case for case in comparison.cases if case.id == "weather-oslo")
    assert oslo.divergence is not None and oslo.divergence.index == 3
    assert oslo.divergence.differences[0] == "chunk.block.type: 'tool_call' -> 'text'"
    # The same first difference replay diff finds, given the same logs without times.
    text = comparison.text()
    assert "same outcome by another path (1)" in text
    assert "  sum  score 1.00 -> 0.67 (-0.33)  pass -> FAIL" in text
    assert "    verdict changed: trajectory in_order [add]" in text
    assert "unchanged behaviour (1)\n  greeting  score 1.00 -> 1.00" in text
    data = json.loads(comparison.to_json())
    assert {case["group"] for case in data["cases"]} == {"changed", "same_outcome", "unchanged"}


def test_compare_a_run_with_itself_is_unchanged(runs: dict[str, Path]) -> None:
    report, folder = load_report(runs["careful"])
    comparison = compare(report, runs["careful"], folder_a=folder)
    assert {case.group for case in comparison.cases} == {"unchanged"}
    assert comparison.a == "careful"


def test_compare_cases_in_one_report_only_and_missing_logs(
    runs: dict[str, Path], tmp_path: Path
) -> None:
    report, folder = load_report(runs["careful"])
    fewer = msgspec.structs.replace(report, cases=report.cases[1:])
    lost = msgspec.structs.replace(report.cases[1], log="sessions/gone.jsonl")
    other = msgspec.structs.replace(report, cases=(lost, *report.cases[2:], report.cases[0]))
    comparison = compare(fewer, other, folder_a=folder, folder_b=folder)
    assert [(c.id, c.group) for c in comparison.cases if c.group.startswith("only")] == [
        ("sum", "only_b")
    ]
    comparison = compare(report, fewer, folder_a=folder, folder_b=folder)
    assert next((c.id, c.group) for c in comparison.cases) == ("sum", "only_a")
    comparison = compare(fewer, report, folder_a=folder, folder_b=folder)
    assert comparison.cases[-1].group == "only_b" and comparison.cases[-1].delta is None
    comparison = compare(report, other, folder_a=folder, folder_b=folder)
    oslo = next(c for c in comparison.cases if c.id == "weather-oslo")
    assert oslo.divergence is not None and "gone.jsonl" in oslo.divergence.error
    assert "cannot compare the sessions" in comparison.text()
    nolog = msgspec.structs.replace(report.cases[0], log=None)
    comparison = compare(
        msgspec.structs.replace(report, cases=(nolog,)), report, folder_a=folder, folder_b=folder
    )
    assert "has no session log" in comparison.cases[0].divergence.error


def test_a_longer_session_diverges_where_the_shorter_ends() -> None:
    from agentloop.evals._compare import divergence

    long = list(
        replay.read_log(
            ROOT / "fixtures" / next(p.name for p in (ROOT / "fixtures").glob("*.jsonl"))
        )
    )
    assert divergence(long, long) is None
    found = divergence(long, long[:-1])
    assert found is not None and found.index == len(long) - 1 and found.b == "" and found.a
    found = divergence(long[:-1], long)
    assert found is not None and found.a == ""


# --------------------------------------------------------------------------- judged runs replay


def test_rescore_replays_every_session_and_never_calls_the_judge(runs: dict[str, Path]) -> None:
    report, folder = load_report(runs["hasty"])

    def judge_that_must_not_be_called(request: ModelRequest) -> str:
        raise AssertionError("the judge was called during a rescore")

    again = rescore(report, folder, Dataset.load(DATASET))
    assert [(c.id, c.passed, c.score) for c in again.cases] == [
        (c.id, c.passed, c.score) for c in report.cases
    ]
    assert again.case("sky").scores == report.case("sky").scores
    assert again.case("sky").scores[0].reason == "no scattering; the ocean is not why"
    del judge_that_must_not_be_called


def test_rescore_with_a_judge_that_raises_if_called(tmp_path: Path) -> None:
    calls = []

    def judge(request: ModelRequest) -> str:
        calls.append(request)
        return '{"score": 0.9, "reason": "fine"}'

    dataset = Dataset([Case(id="a", prompt="hi", expect=(Judge(rubric="polite"),))])
    agent = Agent(FunctionModel(lambda r: "Hello."), judge=FunctionModel(judge))
    live = run_eval(dataset, agent, out=tmp_path, pages=False)
    assert len(calls) == 1 and live.case("a").scores[0].score == 0.9

    def exploding(request: ModelRequest) -> str:
        raise AssertionError("called")

    # A rescore needs no agent at all; give it one whose judge would explode anyway.
    again = rescore(live, tmp_path, dataset)
    assert again.case("a").scores == live.case("a").scores
    assert len(calls) == 1
    del exploding
    # A new judge evaluator, never recorded, is an error for that case (no model asked).
    more = Dataset(
        [Case(id="a", prompt="hi", expect=(Judge(rubric="polite"), Judge(rubric="brief")))]
    )
    again = rescore(live, tmp_path, more)
    assert again.case("a").scores[1].error == (
        "EvalError: no recorded judge session for this judge; run the case live to judge it"
    )


@pytest.mark.parametrize(
    ("answer", "error"),
    [
        ("not json at all", "the judge gave no verdict (failed)"),
        ('{"score": 7}', "the judge gave no verdict (failed)"),
    ],
)
def test_a_judge_that_answers_garbage_is_a_per_case_error(
    tmp_path: Path, answer: str, error: str
) -> None:
    dataset = Dataset(
        [Case(id="a", prompt="hi", expect=(Judge(rubric="r"), Contains(text="Hello")))]
    )
    agent = Agent(FunctionModel(lambda r: "Hello."), judge=FunctionModel(lambda r: answer))
    report = run_eval(dataset, agent, out=tmp_path, pages=False)
    judged, contains = report.case("a").scores
    assert judged.error is not None and judged.error.startswith(error) and not judged.passed
    assert contains.passed
    assert report.totals is not None and report.totals.errors == 1
    assert "ERR  0.00  judge 'r': the judge gave no verdict" in report.table()
    # The judge's failed session is kept and replays too.
    again = rescore(report, tmp_path, dataset)
    assert again.case("a").scores == report.case("a").scores


def test_a_judge_without_a_model(tmp_path: Path) -> None:
    dataset = Dataset([Case(id="a", prompt="hi", expect=(Judge(rubric="r"),))])
    report = run_eval(dataset, Agent(FunctionModel(lambda r: "x")), out=tmp_path, pages=False)
    assert "needs a judge model" in (report.case("a").scores[0].error or "")


# --------------------------------------------------------------------------- errors per case


def raises(outcome: Outcome) -> bool:
    raise RuntimeError("evaluator bug")


def bad_score(outcome: Outcome) -> Score:
    return Score(evaluator="x", passed=True, score=float("nan"))


def test_crashes_and_raising_evaluators_are_per_case_errors(tmp_path: Path) -> None:
    def factory(case: Case) -> Any:
        if case.id == "crash":
            raise RuntimeError("no model for you")
        return ScriptedModel([ScriptedResponse.text("r1", "fine")])

    dataset = Dataset(
        [
            Case(id="crash", prompt="x", expect=(Contains(text="fine"),)),
            Case(
                id="raise",
                prompt="x",
                expect=(Custom(function="tests.test_evals_run:raises"), Exact(text="fine")),
            ),
            Case(id="nan", prompt="x", expect=(Custom(function="tests.test_evals_run:bad_score"),)),
            Case(id="tool", prompt="x", tools=("nope",)),
            Case(id="ok/weird id", prompt="x"),
        ]
    )
    seen: list[tuple[int, int, str]] = []
    report = run_eval(
        dataset,
        Agent(factory, pricing=Pricing(input=1.0, output=2.0, cache_read=0.1)),
        out=tmp_path,
        concurrency=1,
        on_progress=lambda done, total, case: seen.append((done, total, case.id)),
    )
    assert seen == [
        (1, 5, "crash"),
        (2, 5, "raise"),
        (3, 5, "nan"),
        (4, 5, "tool"),
        (5, 5, "ok/weird id"),
    ]
    crash = report.case("crash")
    assert crash.error == "RuntimeError: no model for you" and not crash.passed and crash.score == 0
    assert crash.scores[0].error == "not evaluated: the agent crashed"
    raised = report.case("raise")
    assert raised.scores[0].error == "RuntimeError: evaluator bug" and raised.scores[1].passed
    assert report.case("nan").scores[0].error == "ValueError: score nan is not from 0 to 1"
    assert "offers the tool 'nope', which the agent does not have (it has: none)" in (
        report.case("tool").error or ""
    )
    ok = report.case("ok/weird id")
    assert ok.passed and ok.score == 1.0 and ok.log == f"sessions/{log_name('ok/weird id')}.jsonl"
    assert ok.cost == 0.0
    table = report.table()
    assert "crashed: RuntimeError: no model for you" in table
    html = (tmp_path / "report.html").read_text()
    assert "crashed: RuntimeError: no model for you" in html
    # a crashed case's log is kept as far as it got (here: nothing ran, no page)
    assert report.totals is not None and report.totals.errors == 4


def test_extra_evaluators_and_async_ones(tmp_path: Path) -> None:
    async def later(outcome: Outcome) -> float:
        return 0.25

    dataset = Dataset([Case(id="a", prompt="x")])
    report = run_eval(
        dataset,
        Agent(FunctionModel(lambda r: "fine")),
        out=tmp_path,
        evaluators=[lambda outcome: outcome.final_text == "fine", later],
        pages=False,
    )
    names = [score.evaluator for score in report.case("a").scores]
    assert names == ["custom <lambda>", "custom later"]
    assert report.case("a").score == pytest.approx(0.625)


def test_log_names_are_safe_and_distinct() -> None:
    assert log_name("sum") == "sum"
    names = {log_name(x) for x in ("a/b", "a_b", "a?b", ".hidden", "x" * 200)}
    assert len(names) == 5 and all("/" not in n and not n.startswith(".") for n in names)


def test_agent_options_are_checked() -> None:
    with pytest.raises(TypeError, match="takes no option 'log'"):
        Agent(FunctionModel(lambda r: "x"), log=None)
    with pytest.raises(TypeError, match="must be a model or a function"):
        Agent(3).model_for(Case(id="a", prompt="x"))
    assert repr(Agent(FunctionModel(lambda r: "x"))) == "<Agent FunctionModel>"
    with pytest.raises(ValueError, match="concurrency"):
        run_eval(Dataset([]), Agent(FunctionModel(lambda r: "x")), out="unused", concurrency=0)


def test_rescore_with_missing_or_bad_logs(runs: dict[str, Path], tmp_path: Path) -> None:
    report, folder = load_report(runs["careful"])
    broken = tmp_path / "broken.jsonl"
    broken.write_text("not a log\n")
    cases = (
        msgspec.structs.replace(report.cases[0], log=None),
        msgspec.structs.replace(report.cases[1], log=str(broken)),
        msgspec.structs.replace(report.cases[2], id="not-in-the-dataset"),
    )
    again = rescore(msgspec.structs.replace(report, cases=cases), folder, Dataset.load(DATASET))
    assert [c.id for c in again.cases] == ["sum", "weather-oslo"]
    assert again.cases[0].error == "no session log"
    assert "does not replay" in (again.cases[1].error or "")


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "cannot read the report"),
        (b"{", "not a report (not JSON"),
        (b"[]", "not an agentloop eval report"),
        (b'{"format": "agentloop-eval-report", "version": 99}', "report version 99"),
        (b'{"format": "agentloop-eval-report", "version": 1, "cases": 3}', "a malformed report"),
    ],
)
def test_load_report_errors(tmp_path: Path, content: bytes | None, message: str) -> None:
    path = tmp_path / "report.json"
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(EvalError, match=re.escape(message)):
        load_report(path)


def test_a_report_round_trips_and_knows_its_rate() -> None:
    assert Report().pass_rate == 1.0
    with pytest.raises(KeyError):
        Report().case("x")


# --------------------------------------------------------------------------- the CLI


def test_cli_run_compare_rescore(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    assert (
        agentloop_main(
            ["eval", "run", str(DATASET), "--agent", f"{AGENT}:careful", "--out", str(a)]
        )
        == 0
    )
    out, err = capsys.readouterr()
    assert "5/5 passed" in out and f"report: {a / 'report.json'}, {a / 'report.html'}" in out
    assert "[5/5]" in err
    assert (
        main(
            [
                "run",
                str(DATASET),
                "--agent",
                f"{AGENT}:hasty",
                "--out",
                str(b),
                "--json",
                "--no-html",
            ]
        )
        == 1
    )
    out, err = capsys.readouterr()
    assert json.loads(out)["totals"]["passed"] == 2 and err == ""
    assert not (b / "report.html").exists()
    assert (
        main(
            [
                "run",
                str(DATASET),
                "--agent",
                f"{AGENT}:hasty",
                "--out",
                str(b),
                "--threshold",
                "0.4",
                "--quiet",
            ]
        )
        == 0
    )
    capsys.readouterr()
    assert main(["compare", str(a), str(b)]) == 1
    assert "changed outcome (3)" in capsys.readouterr().out
    assert main(["compare", str(a), str(a), "--json"]) == 0
    assert {c["group"] for c in json.loads(capsys.readouterr().out)["cases"]} == {"unchanged"}
    assert main(["rescore", str(b), "--dataset", str(DATASET), "--agent", f"{AGENT}:hasty"]) == 1
    assert "2/5 passed" in capsys.readouterr().out
    assert main(["rescore", str(b), "--dataset", str(DATASET), "--json", "--threshold", "0"]) == 0
    assert json.loads(capsys.readouterr().out)["totals"]["passed"] == 2


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["run", str(DATASET), "--agent", "nocolon"],
            "--agent nocolon: 'nocolon' is not 'module:function'",
        ),
        (
            ["run", str(DATASET), "--agent", "os:getcwd"],
            "returned str, not an agentloop.evals.Agent",
        ),
        (["run", str(DATASET), "--agent", "json:dumps"], "it raised TypeError: dumps()"),
        (["run", "/no/such.jsonl", "--agent", f"{AGENT}:careful"], "cannot read"),
        (
            ["run", str(DATASET), "--agent", f"{AGENT}:careful", "--concurrency", "0"],
            "concurrency must be",
        ),
        (["compare", "/no/a", "/no/b"], "cannot read the report"),
        (["rescore", "/no/a", "--dataset", str(DATASET)], "cannot read the report"),
        (["frobnicate"], "invalid choice"),
        (["what-if", "x", "--max-steps", "0"], "max_steps"),
        (["what-if", "x", "--max-tool-calls", "0"], "Budget.max_tool_calls must be a positive int"),
    ],
)
def test_cli_errors_are_one_line(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    if argv[0] == "what-if":
        log = tmp_path / "x.jsonl"
        replay.write_log(log, replay.read_log(next((ROOT / "fixtures").glob("*.jsonl"))))
        argv = ["what-if", str(log), *argv[2:]]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("agentloop eval: error: ") and message in err


def test_cli_help(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == 0
    assert "exit codes" in capsys.readouterr().out
    assert agentloop_main(["--help"]) == 0
    assert "eval" in capsys.readouterr().out


def test_the_example_is_one_command_from_a_shell(tmp_path: Path) -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "agentloop",
            "eval",
            "run",
            str(DATASET),
            "--agent",
            f"{AGENT}:careful",
            "--out",
            str(tmp_path / "run"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert "5/5 passed (0 failed, 0 with errors)" in done.stdout


# --------------------------------------------------------------------------- edges


def test_comparison_text_names_status_changes_and_one_sided_cases() -> None:
    from agentloop.evals import CaseDiff, Comparison

    comparison = Comparison(
        a="A",
        b="B",
        cases=(
            CaseDiff(
                id="x",
                group="changed",
                score_a=1.0,
                score_b=1.0,
                passed_a=True,
                passed_b=True,
                status_a="completed",
                status_b="failed",
            ),
            CaseDiff(id="y", group="only_a", score_a=1.0),
            CaseDiff(id="z", group="only_b", score_b=0.5),
        ),
    )
    text = comparison.text()
    assert "  x  score 1.00 -> 1.00\n    status completed -> failed" in text
    assert "only in A (A) (1)\n  y" in text and "only in B (B) (1)\n  z" in text


def test_timeless_leaves_data_alone_and_removes_times() -> None:
    from agentloop import Budget, BudgetUsage, BudgetWarnEvent, ToolCall, ToolCallEvent
    from agentloop.evals import timeless

    warn = BudgetWarnEvent(
        sequence=3,
        at=5.0,
        step=1,
        limit="wall_clock",
        usage=BudgetUsage(turns=1, wall_seconds=2.5),
        budget=Budget(max_wall_seconds=1.0),
    )
    bare = timeless(warn)
    assert bare.at is None and bare.usage == BudgetUsage(turns=1)
    assert bare.budget == warn.budget
    call = ToolCallEvent(
        sequence=0, step=1, call=ToolCall("c", "t", {"at": 1.0, "wall_seconds": 2})
    )
    assert timeless(call) is call  # no times; tool arguments are data, never touched


def test_a_judge_session_that_did_not_finish() -> None:
    from agentloop.evals._run import _judged

    assert _judged(Judge(rubric="r"), None).error == "the judge session did not finish"


def test_pages_for_reports_without_logs_or_totals(tmp_path: Path) -> None:
    from agentloop.evals import CaseReport
    from agentloop.evals._report import render_report_page
    from agentloop.evals._run import write_pages

    broken = tmp_path / "broken.jsonl"
    broken.write_text("nope\n")
    report = Report(
        cases=(
            CaseReport(id="a", passed=True, score=1.0),
            CaseReport(id="b", passed=False, score=0.0, log="broken.jsonl"),
        )
    )
    assert report.table().splitlines()[-1].startswith("b ")
    page = render_report_page(report)
    assert "passed</b>" not in page and '<a href="broken.html">' in page
    write_pages(report, tmp_path)
    assert (tmp_path / "report.html").exists() and not (tmp_path / "broken.html").exists()


def test_a_second_run_into_the_same_folder_replaces_its_logs(tmp_path: Path) -> None:
    dataset = Dataset([Case(id="a", prompt="x", expect=(Judge(rubric="r"),))])
    agent = Agent(FunctionModel(lambda r: "x"), judge=FunctionModel(lambda r: '{"score": 1}'))
    for _ in range(2):
        report = run_eval(dataset, agent, out=tmp_path)
        assert report.case("a").passed
    assert sorted(p.name for p in (tmp_path / "sessions").iterdir()) == [
        "a.html",
        "a.jsonl",
        "a.judge-1.html",
        "a.judge-1.jsonl",
    ]


def test_an_agent_spec_without_a_name_is_named_by_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec_file = tmp_path / "plain_agent.py"
    spec_file.write_text(
        "from agentloop import FunctionModel\nfrom agentloop.evals import Agent\n\n"
        "def make():\n    return Agent(FunctionModel(lambda r: 'Hello!'))\n"
    )
    data = tmp_path / "d.jsonl"
    data.write_text(
        '{"id": "a", "prompt": "hi", "expect": [{"kind": "exact", "text": "Hello!"}]}\n'
    )
    assert (
        main(
            [
                "run",
                str(data),
                "--agent",
                f"{spec_file}:make",
                "--out",
                str(tmp_path / "o"),
                "--json",
            ]
        )
        == 0
    )
    assert json.loads(capsys.readouterr().out)["agent"] == f"{spec_file}:make"


def test_evals_exports_what_it_lists() -> None:
    import agentloop.evals as evals

    public = {name for name in dir(evals) if not name.startswith("_")}
    modules = {"pytest_plugin"}
    assert set(evals.__all__) == public - modules
