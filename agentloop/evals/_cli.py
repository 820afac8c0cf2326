"""``python -m agentloop eval``: run a dataset, compare two runs, what-if replay.

Commands::

    python -m agentloop eval run DATASET --agent SPEC [--out DIR] [--concurrency N]
                                 [--threshold X] [--json] [--no-html]
    python -m agentloop eval compare A B [--json]
    python -m agentloop eval rescore DIR --dataset DATASET [--agent SPEC] [--json]
    python -m agentloop eval what-if LOG... [--max-steps N] [--max-turns N]
                                 [--max-tool-calls N] [--max-total-tokens N]
                                 [--approve ID|TOOL] [--deny ID|TOOL] [--json]

``SPEC`` names a function returning an :class:`~agentloop.evals.Agent`:
``path/to/agent.py:make`` or ``package.module:make``.

Exit codes: 0 ok (``run``/``rescore``: the pass rate reached ``--threshold``,
default 1.0; ``compare``: no case changed outcome; ``what-if``: no session
changed outcome); 1 not ok; 2 a usage error, or a file that cannot be read.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

from agentloop import Budget

from ._compare import compare
from ._dataset import Dataset
from ._errors import EvalError
from ._evaluators import load_function
from ._report import CaseReport, load_report
from ._run import Agent, rescore, run_eval
from ._whatif import UNCHANGED, what_if_logs

__all__ = ["main"]

EXIT_OK, EXIT_NOT_OK, EXIT_ERROR = 0, 1, 2

_EPILOG = """\
exit codes:
  0  ok: the pass rate reached --threshold (run, rescore), no case changed
     outcome (compare), no session changed outcome (what-if)
  1  not ok
  2  a usage error, or a file that cannot be read"""


class _Fail(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise _Fail(f"{message} (see python -m agentloop eval --help)")


def load_agent(spec: str) -> Agent:
    """The :class:`Agent` a ``path.py:function`` / ``module:function`` spec makes."""
    try:
        make = load_function(spec)
    except (ValueError, ImportError, OSError) as exc:
        raise _Fail(f"--agent {spec}: {exc}") from None
    try:
        agent = make()
    except Exception as exc:
        raise _Fail(f"--agent {spec}: it raised {type(exc).__name__}: {exc}") from None
    if not isinstance(agent, Agent):
        raise _Fail(
            f"--agent {spec}: returned {type(agent).__name__}, not an agentloop.evals.Agent"
        )
    if not agent.name:
        agent.name = spec
    return agent


def _dataset(path: str) -> Dataset:
    try:
        return Dataset.load(path)
    except EvalError as exc:
        raise _Fail(str(exc)) from None


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="python -m agentloop eval",
        description="Evaluate an agent on a dataset; compare two runs; what-if replay.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    run = commands.add_parser("run", help="run every case, score it, write the reports")
    run.add_argument("dataset", help="a .jsonl or .yaml dataset")
    run.add_argument(
        "--agent", required=True, metavar="SPEC", help="path.py:function or module:function"
    )
    run.add_argument("--out", metavar="DIR", help="where to write (default: eval-<dataset>)")
    run.add_argument("--concurrency", type=int, default=4, metavar="N")
    run.add_argument("--threshold", type=float, default=1.0, metavar="X", help="pass rate to reach")
    run.add_argument("--json", action="store_true", help="print report.json instead of the table")
    run.add_argument("--no-html", action="store_true", help="write no HTML pages")
    run.add_argument("--quiet", action="store_true", help="no progress lines")
    comp = commands.add_parser("compare", help="compare two runs, case by case")
    comp.add_argument("a", help="a report.json or its folder")
    comp.add_argument("b")
    comp.add_argument("--json", action="store_true")
    again = commands.add_parser("rescore", help="score a run again from its logs, no model")
    again.add_argument("report", help="a report.json or its folder")
    again.add_argument("--dataset", required=True)
    again.add_argument("--agent", metavar="SPEC", help="for its hooks and output type")
    again.add_argument("--threshold", type=float, default=1.0, metavar="X")
    again.add_argument("--json", action="store_true")
    what = commands.add_parser("what-if", help="replay sessions under other limits, no model")
    what.add_argument("logs", nargs="+", metavar="LOG")
    what.add_argument("--max-steps", type=int)
    what.add_argument("--max-turns", type=int)
    what.add_argument("--max-tool-calls", type=int)
    what.add_argument("--max-total-tokens", type=int)
    what.add_argument("--approve", action="append", default=[], metavar="ID|TOOL")
    what.add_argument("--deny", action="append", default=[], metavar="ID|TOOL")
    what.add_argument("--json", action="store_true")
    for sub in (run, comp, again, what):
        sub.epilog = _EPILOG
        sub.formatter_class = argparse.RawDescriptionHelpFormatter
    return parser


def _progress(done: int, total: int, case: CaseReport) -> None:
    verdict = "ERROR" if case.error else ("pass" if case.passed else "FAIL")
    print(f"[{done}/{total}] {case.id}: {verdict}", file=sys.stderr, flush=True)


def _run(args: argparse.Namespace) -> int:
    dataset = _dataset(args.dataset)
    agent = load_agent(args.agent)
    out = Path(args.out or f"eval-{dataset.name}")
    try:
        report = run_eval(
            dataset,
            agent,
            out=out,
            concurrency=args.concurrency,
            on_progress=None if args.quiet or args.json else _progress,
            pages=not args.no_html,
        )
    except ValueError as exc:
        raise _Fail(str(exc)) from None
    return _show(args, report, out)


def _show(args: argparse.Namespace, report: Any, out: Path) -> int:
    if args.json:
        sys.stdout.write(report.to_json().decode())
    else:
        print(report.table())
        print(
            f"\nreport: {out / 'report.json'}"
            + ("" if getattr(args, "no_html", False) else f", {out / 'report.html'}")
        )
    return EXIT_OK if report.pass_rate >= args.threshold else EXIT_NOT_OK


def _compare(args: argparse.Namespace) -> int:
    try:
        comparison = compare(args.a, args.b)
    except EvalError as exc:
        raise _Fail(str(exc)) from None
    if args.json:
        sys.stdout.write(comparison.to_json().decode())
    else:
        print(comparison.text())
    return EXIT_NOT_OK if comparison.group("changed") else EXIT_OK


def _rescore(args: argparse.Namespace) -> int:
    try:
        report, folder = load_report(args.report)
    except EvalError as exc:
        raise _Fail(str(exc)) from None
    dataset = _dataset(args.dataset)
    hooks = output = None
    if args.agent is not None:
        agent = load_agent(args.agent)
        hooks, output = agent.options.get("hooks"), agent.options.get("output")
    again = rescore(report, folder, dataset, hooks=hooks, output=output)
    if args.json:
        sys.stdout.write(again.to_json().decode())
    else:
        print(again.table())
    return EXIT_OK if again.pass_rate >= args.threshold else EXIT_NOT_OK


def _what_if(args: argparse.Namespace) -> int:
    budget: Any = UNCHANGED
    limits = {
        "max_turns": args.max_turns,
        "max_tool_calls": args.max_tool_calls,
        "max_total_tokens": args.max_total_tokens,
    }
    approvals: dict[str, Any] = {key: True for key in args.approve}
    approvals.update({key: False for key in args.deny})
    try:
        if any(value is not None for value in limits.values()):
            budget = Budget(**{key: value for key, value in limits.items() if value is not None})
        answers = what_if_logs(
            args.logs,
            max_steps=UNCHANGED if args.max_steps is None else args.max_steps,
            budget=budget,
            approvals=approvals,
        )
    except (ValueError, TypeError) as exc:
        raise _Fail(str(exc)) from None
    if args.json:
        import msgspec

        sys.stdout.write(msgspec.json.encode({"sessions": answers}).decode() + "\n")
    else:
        for answer in answers:
            print(answer.line())
    return EXIT_NOT_OK if any(answer.changed for answer in answers) else EXIT_OK


_COMMANDS = {"run": _run, "compare": _compare, "rescore": _rescore, "what-if": _what_if}


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m agentloop eval ...``; returns the exit code."""
    try:
        args = _parser().parse_args(argv)
        return _COMMANDS[args.command](args)
    except _Fail as fail:
        print(f"agentloop eval: error: {fail}", file=sys.stderr)
        return EXIT_ERROR
    except SystemExit as exit:  # --help
        return exit.code if isinstance(exit.code, int) else EXIT_ERROR
