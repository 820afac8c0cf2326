"""The common harness: scenario definitions, timing, the worker and the report.

Theory of operation
-------------------
Each framework has one module here (``agentloop_bench``, ``pydantic_ai_bench``,
...). Run as ``python -m bench.peers.<module>`` it is a *worker*: it builds the
framework's agent once over a scripted model (the framework's own test double),
times every scenario and prints one JSON object on its last line of output. The
*orchestrator* (:func:`main`, ``python -m bench.peers``) starts one fresh worker
process per framework, one after the other, on the same machine in the same run,
then one more per framework for memory (peak RSS is a high-water mark, so it
must be read in a process that did nothing else), and prints one table.

The shared scenarios (every framework runs them the same way):

- S1: one user message, the model asks for ``add(20, 22)``, the tool returns
  ``{"sum": 42}``, the model answers ``20 + 22 = 42``: 2 model requests.
- S2: S1 when the user message is the last of N initial messages (N-1 earlier
  messages, in rounds of user / tool call / tool result / answer).
- S3: 50 model requests: 49 ``add`` calls, one after the other, then the answer.

A *variant* is a factory ``make(history, steps)`` that sets up everything a run
needs except the run itself (the agent, the history in the framework's own
message types) and returns ``run() -> final text``. The harness checks the final
text once, then times ``run`` with :func:`measure_all`.

agentloop's worker adds the agentloop-only scenarios (S2 steps-only, S4 replay,
S5 encode/decode, memory while replaying) through ``extras``/``memory`` hooks.

Numbers are printed, never asserted: timing is not a test.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import importlib.util
import io
import json
import math
import operator
import os
import platform
import resource
import subprocess
import sys
import tarfile
import tempfile
import time
import tracemalloc
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any, cast

# --------------------------------------------------------------------------- scenarios

USER_TEXT = "What is 20 + 22?"
FINAL_TEXT = "20 + 22 = 42"
ADD_ARGS: dict[str, int] = {"left": 20, "right": 22}
S1_STEPS = 2
S2_SIZES = (10, 1000, 4096)  # initial messages, the S1 user message included
S3_STEPS = 50
MEMORY_STEPS = 64

#: ``make(history, steps) -> run``: ``history`` earlier messages, ``steps`` model requests.
RunFactory = Callable[[int, int], Callable[[], str]]


def add(left: int, right: int) -> dict[str, int]:
    """Add two integers (the one tool of every scenario)."""
    return {"sum": left + right}


def call_id(step: int) -> str:
    """The id of the tool call the model makes at ``step`` (1-based)."""
    return f"call-{step}"


def history_plan(size: int) -> list[tuple[str, int]]:
    """The shape of ``size`` earlier messages, as ``(kind, round)`` pairs.

    Kinds: ``user`` (``question i``), ``call`` (the assistant calls ``add(i, 1)``
    with id ``old-i``), ``result`` (``{"sum": i + 1}``), ``answer`` (``answer i``).
    Full rounds of four while they fit, then ``user``/``answer`` pairs, then one
    ``user`` if ``size`` is odd (the S1 question follows it). Every framework
    builds its history from this plan, so the transcripts match message for message.
    """
    plan: list[tuple[str, int]] = []
    i = 0
    while size - len(plan) >= 4:
        plan += [("user", i), ("call", i), ("result", i), ("answer", i)]
        i += 1
    while size - len(plan) >= 2:
        plan += [("user", i), ("answer", i)]
        i += 1
    if size - len(plan) == 1:
        plan.append(("user", i))
    return plan


# --------------------------------------------------------------------------- timing


@dataclass(frozen=True)
class Settings:
    """How hard to measure: ``repeat`` rounds of one batch of >= ``batch_ns`` per job."""

    quick: bool
    repeat: int
    batch_ns: int
    warmup_ns: int
    replays: int  # sessions replayed back to back for the memory check
    cpu: bool = False  # time the process's CPU time instead of the wall clock

    @classmethod
    def make(cls, quick: bool, repeat: int | None = None, cpu: bool = False) -> Settings:
        if quick:
            return cls(
                quick=True, repeat=repeat or 1, batch_ns=0, warmup_ns=0, replays=100, cpu=cpu
            )
        return cls(
            quick=False,
            repeat=repeat or 15,
            batch_ns=20_000_000,
            warmup_ns=50_000_000,
            replays=1000,
            cpu=cpu,
        )

    @property
    def clock(self) -> Callable[[], int]:
        """``time.process_time_ns`` with ``cpu`` (on a busy machine it moves less: time
        spent waiting for a CPU does not count), else ``time.perf_counter_ns``."""
        return time.process_time_ns if self.cpu else time.perf_counter_ns


@dataclass(frozen=True)
class Job:
    """Something to time: ``fn()`` as a whole, or (``sampled``) the ns it returns."""

    fn: Callable[[], object]
    sampled: bool = False
    clock: Callable[[], int] = time.perf_counter_ns

    def once(self) -> int:
        if self.sampled:
            elapsed = self.fn()
            assert isinstance(elapsed, int)
            return max(elapsed, 1)
        clock = self.clock
        start = clock()
        self.fn()
        return max(clock() - start, 1)

    def batch(self, number: int) -> int:
        fn = self.fn
        if self.sampled:
            sample = cast(Callable[[], int], fn)
            total = 0
            for _ in range(number):
                total += sample()
            return total
        clock = self.clock
        start = clock()
        for _ in range(number):
            fn()
        return clock() - start


def measure_all(jobs: Mapping[str, Job], settings: Settings) -> dict[str, float]:
    """Nanoseconds per call of each job: its best batch mean over ``settings.repeat`` rounds.

    Each job is warmed up first (at least one call, at least ``warmup_ns``) and
    given a batch size that lasts ``batch_ns``. Then each round runs one batch of
    every job in turn (``gc.collect()`` before each batch), so a burst of load from
    elsewhere on the machine spoils one batch of several jobs, not every batch of
    one job.
    """
    numbers: dict[str, int] = {}
    if settings.cpu:
        jobs = {name: replace(job, clock=settings.clock) for name, job in jobs.items()}
    for name, job in jobs.items():
        once = job.once()
        warmed = once
        while warmed < settings.warmup_ns:
            once = job.once()
            warmed += once
        numbers[name] = max(1, math.ceil(settings.batch_ns / once))
    best = dict.fromkeys(jobs, math.inf)
    for _ in range(settings.repeat):
        for name, job in jobs.items():
            gc.collect()
            best[name] = min(best[name], job.batch(numbers[name]) / numbers[name])
    return best


def rss_mib() -> dict[str, float | None]:
    """Peak RSS so far (``ru_maxrss``) and, on Linux, the current RSS, in MiB."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    peak_mib = peak / (1024 * 1024) if sys.platform == "darwin" else peak / 1024
    current: float | None = None
    try:
        with open("/proc/self/statm") as statm:
            pages = int(statm.read().split()[1])
        current = pages * os.sysconf("SC_PAGE_SIZE") / (1024 * 1024)
    except (OSError, ValueError, IndexError):
        pass
    return {"peak_mib": round(peak_mib, 2), "current_mib": current and round(current, 2)}


# --------------------------------------------------------------------------- worker

Extras = Callable[[Settings], dict[str, Any]]
Memory = Callable[[Settings], dict[str, Any]]


def _check(label: str, run: Callable[[], str]) -> None:
    text = run()
    if text != FINAL_TEXT:
        raise AssertionError(f"{label}: final text {text!r}, expected {FINAL_TEXT!r}")


def time_variant(
    label: str, make: RunFactory, settings: Settings, scenarios: Sequence[str] | None = None
) -> dict[str, Any]:
    """Time S1, S2 and S3 (or only ``scenarios``) for one variant, interleaved;
    nanoseconds per run."""
    plan = {"S1": (0, S1_STEPS), "S3": (0, S3_STEPS)}
    plan.update({f"S2:{size}": (size - 1, S1_STEPS) for size in S2_SIZES})
    if scenarios is not None:
        plan = {key: plan[key] for key in scenarios}
    jobs: dict[str, Job] = {}
    for key, (history, steps) in plan.items():
        run = make(history, steps)
        _check(f"{label} {key}", run)
        jobs[key] = Job(run)
    ns = measure_all(jobs, settings)
    result: dict[str, Any] = {
        key: {"ns_per_run": ns[key], "steps": plan[key][1]} for key in ("S1", "S3") if key in ns
    }
    sizes = {str(size): f"S2:{size}" for size in S2_SIZES if f"S2:{size}" in ns}
    if sizes:
        result["S2"] = {
            size: {"ns_per_run": ns[key], "steps": S1_STEPS} for size, key in sizes.items()
        }
    return result


#: The scenarios the async variants are timed on (per run and per step).
ASYNC_SCENARIOS = ("S1", "S3")


def on_one_event_loop(
    make: Callable[[int, int], Callable[[], Awaitable[str]]],
) -> RunFactory:
    """An async variant as the harness times it: ``make(history, steps)`` returns a
    coroutine function, each run of which is awaited on one event loop made once
    for the worker (as a server's is), so no framework pays for a new loop per run."""
    loop = asyncio.new_event_loop()

    def factory(history: int, steps: int) -> Callable[[], str]:
        arun = make(history, steps)
        return lambda: loop.run_until_complete(arun())

    return factory


def memory_variant(make: RunFactory) -> dict[str, Any]:
    """Peak RSS of one ``MEMORY_STEPS``-step run in this (fresh) process.

    Also the peak of Python allocations during a second run (``tracemalloc``;
    memory a C extension allocates itself is not seen), which is finer than RSS.
    """
    run = make(0, MEMORY_STEPS)
    gc.collect()
    before = rss_mib()
    _check("memory", run)
    after = rss_mib()
    gc.collect()
    tracemalloc.start()
    _check("memory", run)
    traced_peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return {
        "steps": MEMORY_STEPS,
        "before": before,
        "after": after,
        "traced_peak_kib": round(traced_peak / 1024, 1),
    }


def worker_main(
    framework: str,
    versions: Callable[[], dict[str, str]],
    variants: Callable[[], dict[str, RunFactory]],
    *,
    extras: Extras | None = None,
    memory: Memory | None = None,
    async_variants: Callable[[], dict[str, RunFactory]] | None = None,
    argv: Sequence[str] | None = None,
) -> int:
    """The entry point of a framework's module: time it, print JSON on the last line.

    ``async_variants`` (each run awaited on one event loop, see
    :func:`on_one_event_loop`) are timed on :data:`ASYNC_SCENARIOS` only.
    """
    parser = argparse.ArgumentParser(description=f"bench worker for {framework}")
    parser.add_argument("--quick", action="store_true", help="few iterations (smoke run)")
    parser.add_argument("--repeat", type=int, default=None, help="batches per measurement")
    parser.add_argument("--cpu-time", action="store_true", help="time CPU, not the wall clock")
    parser.add_argument("--memory", type=int, metavar="VARIANT", default=None)
    parser.add_argument("--memory-extra", action="store_true")
    args = parser.parse_args(argv)
    settings = Settings.make(args.quick, args.repeat, args.cpu_time)
    result: dict[str, Any] = {"framework": framework, "versions": versions()}
    table = variants()
    if args.memory is not None:
        label = list(table)[args.memory]
        result["memory"] = {label: memory_variant(table[label])}
    elif args.memory_extra:
        if memory is None:
            raise SystemExit(f"{framework} has no extra memory scenario")
        result["memory_extra"] = memory(settings)
    else:
        result["variants"] = {
            label: time_variant(label, make, settings) for label, make in table.items()
        }
        if async_variants is not None:
            result["async_variants"] = {
                label: time_variant(label, make, settings, ASYNC_SCENARIOS)
                for label, make in async_variants().items()
            }
        if extras is not None:
            result["extras"] = extras(settings)
    print(json.dumps(result))
    return 0


# --------------------------------------------------------------------------- orchestrator

ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Framework:
    name: str
    module: str  # in bench.peers
    requires: tuple[str, ...]  # import names that must be installed
    memory_variants: tuple[int, ...] = (0,)
    memory_extra: bool = False


CORE = Framework(
    "agentloop", "agentloop_bench", ("agentloop", "msgspec"), (0, 1), memory_extra=True
)
PEERS = (
    Framework("pydantic-ai", "pydantic_ai_bench", ("pydantic_ai",)),
    Framework("openai-agents", "openai_agents_bench", ("agents",)),
    Framework("langgraph", "langgraph_bench", ("langgraph", "langchain_core")),
)


def _missing(framework: Framework) -> list[str]:
    return [name for name in framework.requires if importlib.util.find_spec(name) is None]


def run_worker(
    framework: Framework, *options: str, root: Path = ROOT, name: str | None = None
) -> dict[str, Any]:
    """Run one worker in a fresh process; its JSON result (or ``{"error": ...}``).

    ``root`` is the checkout whose ``bench.peers`` (and, for agentloop, whose
    ``agentloop``/``replay``) the worker runs: another revision for a baseline.
    """
    label = name or framework.name
    missing = _missing(framework)
    if missing:
        return {"framework": label, "error": f"not installed: {', '.join(missing)}"}
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(root), env.get("PYTHONPATH")]))
    env.setdefault("OPENAI_AGENTS_DISABLE_TRACING", "1")
    env.setdefault("LANGSMITH_TRACING", "false")
    proc = subprocess.run(
        [sys.executable, "-m", f"bench.peers.{framework.module}", *options],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
        return {"framework": label, "error": f"exit {proc.returncode}: {tail}"}
    data: dict[str, Any] = json.loads(lines[-1])
    data["framework"] = label
    return data


def checkout(revision: str, into: Path) -> Path:
    """The files of ``revision`` of this repository (``git archive``), under ``into``."""
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", "--format=tar", revision],
        capture_output=True,
        check=False,
    )
    if archive.returncode != 0:
        raise SystemExit(f"cannot check out {revision!r}: {archive.stderr.decode().strip()}")
    target = into / revision.replace("/", "_")
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        tar.extractall(target, filter="data")
    return target


def collect(
    frameworks: Sequence[Framework],
    settings: Settings,
    *,
    memory: bool = True,
    progress: Callable[[str], None] | None = None,
    baselines: Sequence[str] = (),
) -> list[dict[str, Any]]:
    """Time every framework (one process each), then measure memory (one process each).

    Each of ``baselines`` (git revisions) runs agentloop's worker of that revision
    right after agentloop's own, as framework ``agentloop@<revision>``: the same
    scenarios, the same machine, the same run (no memory checks).
    """
    options: tuple[str, ...] = ("--quick",) if settings.quick else ()
    if settings.cpu:
        options += ("--cpu-time",)
    quick = (*options, "--repeat", str(settings.repeat))
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for framework in frameworks:
            if progress is not None:
                progress(f"timing {framework.name} ...")
            data = run_worker(framework, *quick)
            if memory and "error" not in data:
                data["memory"] = {}
                for index in framework.memory_variants:
                    if progress is not None:
                        progress(f"memory {framework.name} (variant {index}) ...")
                    mem = run_worker(framework, *quick, "--memory", str(index))
                    data["memory"].update(mem.get("memory", {"error": mem.get("error")}))
                if framework.memory_extra:
                    if progress is not None:
                        progress(f"memory {framework.name} (replays) ...")
                    mem = run_worker(framework, *quick, "--memory-extra")
                    data["memory_extra"] = mem.get("memory_extra", {"error": mem.get("error")})
            results.append(data)
            if framework is CORE:
                for revision in baselines:
                    if progress is not None:
                        progress(f"timing agentloop@{revision} ...")
                    root = checkout(revision, Path(tmp))
                    name = f"agentloop@{revision}"
                    results.append(run_worker(CORE, *quick, root=root, name=name))
    return results


# --------------------------------------------------------------------------- report


def machine() -> str:
    """One line about this machine: CPU model, cores, OS, Python."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as info:
            for line in info:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return (
        f"{cpu}, {os.cpu_count()} CPUs, {platform.system()} {platform.release()}, "
        f"{platform.python_implementation()} {platform.python_version()}"
    )


def _us(ns: float | None) -> str:
    if ns is None:
        return "-"
    us = ns / 1000
    return f"{us:,.1f}" if us < 10_000 else f"{us:,.0f}"


def _ratio(ns: float | None, base: float | None) -> str:
    if ns is None or not base:
        return "-"
    ratio = ns / base
    return f"{ratio:,.2f}x" if ratio < 10 else f"{ratio:,.0f}x"


def _row_ns(variant: Mapping[str, Any], key: str) -> tuple[float | None, int]:
    cell = variant.get("S2", {}).get(key[3:]) if key.startswith("S2:") else variant.get(key)
    if not cell:
        return None, 1
    return float(cell["ns_per_run"]), int(cell["steps"])


ROWS = (
    ("S1", "S1 one tool call, answer"),
    *((f"S2:{size}", f"S2 S1 after {size - 1} earlier msgs") for size in S2_SIZES),
    ("S3", f"S3 {S3_STEPS} sequential tool steps"),
)


def growth_per_message(variant: Mapping[str, Any]) -> float | None:
    """Extra nanoseconds per run for each extra initial message (S2, first to last size)."""
    first, _ = _row_ns(variant, f"S2:{S2_SIZES[0]}")
    last, _ = _row_ns(variant, f"S2:{S2_SIZES[-1]}")
    if first is None or last is None:
        return None
    return (last - first) / (S2_SIZES[-1] - S2_SIZES[0])


def _labels(
    results: Sequence[Mapping[str, Any]], kind: str = "variants"
) -> list[tuple[str, Mapping[str, Any]]]:
    out: list[tuple[str, Mapping[str, Any]]] = []
    for data in results:
        for label, variant in data.get(kind, {}).items():
            out.append((f"{data['framework']}: {label}", variant))
    return out


RAW = "agentloop: raw generator"
DRIVEN = "agentloop: run() + ScriptedModel"
UNSTREAMED = "agentloop: run() + ScriptedModel, no streaming"
FLOOR = "agentloop: floor (no engine)"
ARUN = "agentloop: arun() + ScriptedModel"


def _header(results: Sequence[Mapping[str, Any]], settings: Settings) -> list[str]:
    """The machine, how it was timed, and each framework's versions (or why skipped)."""
    lines: list[str] = []
    say = lines.append
    say(f"machine: {machine()}; load average {_load()}")
    if settings.quick:
        timing = "quick smoke run (one batch of one call, no warm-up): the numbers mean nothing"
    else:
        timing = (
            f"best of {settings.repeat} interleaved batches of >= {settings.batch_ns / 1e6:g} ms"
        )
    clock = "time.process_time_ns (CPU time)" if settings.cpu else "time.perf_counter_ns"
    say(f"timing: {timing}; {clock}, one fresh process per framework, scripted models, no network")
    for data in results:
        versions = ", ".join(f"{k} {v}" for k, v in data.get("versions", {}).items())
        status = f"  SKIPPED ({data['error']})" if "error" in data else ""
        say(f"{data['framework']}: {versions}{status}")
    return lines


def format_report(
    results: Sequence[Mapping[str, Any]],
    settings: Settings,
    big_log: Mapping[str, Any] | None = None,
    *,
    goals: bool = False,
) -> str:
    """The report a user reads (:func:`format_summary`); with ``goals``, the
    maintainers' report: every scenario by its number (S1-S5) against the floor, the
    agentloop-only rows, and each goal with met / MISSED (:func:`format_goals`)."""
    if not goals:
        return "\n".join(format_summary(results, settings))
    lines = _header(results, settings)
    say = lines.append
    say("")
    variants = _labels(results)
    base = dict(variants)
    raw, driven, floor = base.get(RAW), base.get(DRIVEN), base.get(FLOOR)
    name_w = max([len(name) for name, _ in variants] + [9])
    scen_w = max(len(title) for _, title in ROWS)
    header = (
        f"{'scenario':<{scen_w}}  {'framework':<{name_w}}  {'µs/run':>9}  {'µs/step':>8}  "
        f"{'vs floor':>8}  {'vs raw':>7}  {'vs run()':>8}  note"
    )
    say(header)
    say("-" * len(header))
    for key, title in ROWS:
        for index, (name, variant) in enumerate(variants):
            ns, steps = _row_ns(variant, key)
            floor_ns = _row_ns(floor, key)[0] if floor else None
            raw_ns = _row_ns(raw, key)[0] if raw else None
            run_ns = _row_ns(driven, key)[0] if driven else None
            note = ""
            if key == f"S2:{S2_SIZES[-1]}":
                growth = growth_per_message(variant)
                if growth is not None:
                    note = f"{growth / 1000:+.3f} µs per extra message"
            say(
                f"{title if index == 0 else '':<{scen_w}}  {name:<{name_w}}  {_us(ns):>9}  "
                f"{_us(None if ns is None else ns / steps):>8}  {_ratio(ns, floor_ns):>8}  "
                f"{_ratio(ns, raw_ns):>7}  {_ratio(ns, run_ns):>8}  {note}"
            )
    asynchronous = _labels(results, "async_variants")
    if asynchronous:
        say("")
        lines.extend(format_async(asynchronous))
    memory = format_memory(results)
    if memory:
        say("")
        lines.extend(memory)
    agentloop = next((d for d in results if d.get("framework") == "agentloop"), None)
    if agentloop is not None:
        say("")
        lines.extend(format_agentloop(agentloop))
        say("")
        lines.extend(format_goals(results, settings, big_log))
    return "\n".join(lines)


#: The scenarios as a user reads them, the per-step figure first: ``(key, name)``.
SUMMARY_ROWS = (
    ("S3", f"{S3_STEPS} steps: {S3_STEPS - 1} tool calls, then the answer"),
    ("S1", "2 steps: one tool call, then the answer"),
)


def _table(
    title: str,
    variants: Sequence[tuple[str, Mapping[str, Any]]],
    rows: Sequence[tuple[str, str]],
    against: tuple[str, Mapping[str, Any]] | None,
) -> list[str]:
    """µs per step then per run of each variant in each of ``rows``; with ``against``,
    how many times as long as that variant each one takes."""
    name_w = max(len(name) for name, _ in variants)
    scen_w = max(len(name) for _, name in rows)
    versus = f"x {against[0]}" if against else ""
    header = f"{'scenario':<{scen_w}}  {'framework':<{name_w}}  {'µs/step':>9}  {'µs/run':>9}"
    if against:
        header += f"  {versus}"
    lines = [title, header, "-" * len(header)]
    for key, scenario in rows:
        for index, (name, variant) in enumerate(variants):
            ns, steps = _row_ns(variant, key)
            line = (
                f"{scenario if index == 0 else '':<{scen_w}}  {name:<{name_w}}  "
                f"{_us(None if ns is None else ns / steps):>9}  {_us(ns):>9}"
            )
            if against:
                line += f"  {_ratio(ns, _row_ns(against[1], key)[0]):>{len(versus)}}"
            lines.append(line)
    return lines


def _slope(cells: Mapping[str, float]) -> float | None:
    """Nanoseconds per extra message, from the first to the last transcript size."""
    first, last = cells.get(str(S2_SIZES[0])), cells.get(str(S2_SIZES[-1]))
    if first is None or last is None:
        return None
    return (last - first) / (S2_SIZES[-1] - S2_SIZES[0])


def format_transcript(
    variants: Sequence[tuple[str, Mapping[str, Any]]], extras: Mapping[str, Any], cpu: bool
) -> list[str]:
    """Long transcripts: the cost of a step (flat), then the one-time cost of reading
    the transcript (linear), then whole runs, where the two add up."""
    lines = ["long transcripts: the same run after N earlier messages"]
    steps_only = extras.get("S2_steps_only", {})
    earlier = " / ".join(f"{int(size) - 1:,}" for size in steps_only)
    if steps_only:
        step = {size: cell["ns_per_step"] for size, cell in steps_only.items()}
        first, last = step.get(str(S2_SIZES[0])), step.get(str(S2_SIZES[-1]))
        flat = first is not None and last is not None and last <= 1.3 * first
        verdict = (
            "does not grow with the transcript"
            if flat
            else "grew with the transcript in this run (on a busy machine, run it again"
            + (")" if cpu else " or try --cpu-time)")
        )
        slope = _slope(step)
        lines.append(
            f"  the cost per step {verdict}: "
            f"{'-' if slope is None else f'{slope:+,.2f}'} µs per 1,000 messages "
            f"(raw generator, µs per step after {earlier} earlier messages: "
            f"{' / '.join(_us(ns) for ns in step.values())})"
        )
        setup = {size: cell["setup_ns"] for size, cell in steps_only.items() if "setup_ns" in cell}
        if setup:
            slope = _slope(setup)
            lines.append(
                f"  reading the transcript, once per run (agent_loop() validates and records "
                f"it): {'-' if slope is None else f'{slope / 1000:,.2f}'} µs per message "
                f"({' / '.join(_us(ns) for ns in setup.values())} µs)"
            )
    rows = [(name, variant) for name, variant in variants if variant.get("S2")]
    if rows:
        label = "µs per run, reading included"
        name_w = max([len(name) for name, _ in rows] + [len(label)])
        header = f"  {label:<{name_w}}" + "".join(
            f"  {f'after {size - 1:,}':>12}" for size in S2_SIZES
        )
        lines.append(header)
        for name, variant in rows:
            lines.append(
                f"  {name:<{name_w}}"
                + "".join(f"  {_us(_row_ns(variant, f'S2:{size}')[0]):>12}" for size in S2_SIZES)
            )
    return lines


def format_log(data: Mapping[str, Any]) -> list[str]:
    """agentloop's own figures, by what a user does: replay, logs, streaming, import."""
    extras = data.get("extras", {})
    lines = ["agentloop only"]
    say = lines.append
    s4, s5 = extras.get("S4"), extras.get("S5")
    if s4:
        say(
            f"  replay a recorded {s4['steps']}-step session ({s4['events']} events): "
            f"{s4['events_per_s']:,.0f} events/s ({_us(s4['ns_per_replay'])} µs a session); "
            f"from a file (read_log + replay): {s4['file_events_per_s']:,.0f} events/s"
        )
    if s5:
        say(
            f"  encode + decode events: {s5['roundtrip_events_per_s']:,.0f} events/s; "
            f"{s5['bytes_per_step']:,.0f} bytes per step"
            + (
                f"; a log file: {s5['file_bytes_per_step']:,.0f} bytes per step, read_log "
                f"{s5['read_log_events_per_s']:,.0f} events/s, write_log "
                f"{s5['write_log_events_per_s']:,.0f} events/s"
                if "file_bytes_per_step" in s5
                else ""
            )
        )
    chunks = extras.get("chunks")
    if chunks:
        say(
            f"  streamed text through run(): {_us(chunks['ns_per_chunk'])} µs per chunk "
            f"(one answer in {chunks['chunks']:,} chunks)"
        )
    text = extras.get("non_ascii")
    if text:
        say(
            f"  1 MB tool results through run() with a LogWriter: {_us(text['ascii_log'])} µs "
            f"per step (ASCII), {_us(text['non_ascii_log'])} µs (non-ASCII)"
        )
    cold = extras.get("cold_start")
    if cold:
        say(
            f"  import agentloop: {cold['bytecode_ms']:.1f} ms after import msgspec "
            f"({cold['no_bytecode_ms']:.1f} ms the first time, without bytecode)"
        )
    extra = data.get("memory_extra")
    if extra and "checkpoints" in extra:
        last, mem = list(extra["checkpoints"].items())[-1]
        say(
            f"  memory while replaying a {extra['steps']}-step session {int(last):,} times: "
            f"peak {mem['peak_mib']:.1f} MiB, {mem['current_mib'] or 0:.1f} MiB at the end"
        )
    return lines if len(lines) > 1 else []


def format_summary(results: Sequence[Mapping[str, Any]], settings: Settings) -> list[str]:
    """The report a user reads: µs per step first, scenarios named by what they do.

    No scenario numbers, no floor, no goals: those are the maintainers' report
    (``--goals``, :func:`format_report`). Peers are compared with agentloop's
    ``run()`` + ``ScriptedModel``, the like-for-like driver.
    """
    lines = _header(results, settings)
    say = lines.append
    variants = [(name, variant) for name, variant in _labels(results) if name != FLOOR]
    driven = dict(variants).get(DRIVEN)
    peers = any(not name.startswith("agentloop") for name, _ in variants)
    against = (DRIVEN, driven) if peers and driven is not None else None
    if variants:
        say("")
        lines.extend(
            _table(
                "µs per step, then per run (a step: one model request and the tool calls it "
                "asks for)",
                variants,
                SUMMARY_ROWS,
                against,
            )
        )
    agentloop = next((d for d in results if d.get("framework") == "agentloop"), None)
    extras = agentloop.get("extras", {}) if agentloop else {}
    if variants:
        say("")
        lines.extend(format_transcript(variants, extras, settings.cpu))
    asynchronous = _labels(results, "async_variants")
    if asynchronous:
        base = dict(asynchronous).get(ARUN)
        say("")
        lines.extend(
            _table(
                "async: each run awaited on one event loop",
                asynchronous,
                SUMMARY_ROWS,
                (ARUN, base) if peers and base is not None else None,
            )
        )
    memory = format_memory(results)
    if memory:
        say("")
        lines.extend(memory)
    if agentloop is not None:
        log = format_log(agentloop)
        if log:
            say("")
            lines.extend(log)
    return lines


def _load() -> str:
    try:
        return ", ".join(f"{value:.2f}" for value in os.getloadavg())
    except OSError:  # pragma: no cover - not on this platform
        return "unknown"


def format_async(variants: Sequence[tuple[str, Mapping[str, Any]]]) -> list[str]:
    """The async runs (``arun`` and the peers' async APIs), each awaited on one loop."""
    base = dict(variants).get(ARUN)
    name_w = max(len(name) for name, _ in variants)
    lines = [
        "async runs, each awaited on one event loop per process (S1 and S3 only)",
        f"{'scenario':<30}  {'framework':<{name_w}}  {'µs/run':>9}  {'µs/step':>8}  "
        f"{'vs arun()':>9}",
    ]
    for key, title in ROWS:
        if key not in ASYNC_SCENARIOS:
            continue
        for index, (name, variant) in enumerate(variants):
            ns, steps = _row_ns(variant, key)
            arun_ns = _row_ns(base, key)[0] if base else None
            lines.append(
                f"{title if index == 0 else '':<30}  {name:<{name_w}}  {_us(ns):>9}  "
                f"{_us(None if ns is None else ns / steps):>8}  {_ratio(ns, arun_ns):>9}"
            )
    return lines


def format_memory(results: Sequence[Mapping[str, Any]]) -> list[str]:
    """Peak RSS of one run per framework, each in a fresh process."""
    rows = []
    for data in results:
        for label, mem in data.get("memory", {}).items():
            if mem and "after" in mem:
                rows.append((f"{data['framework']}: {label}", mem))
    if not rows:
        return []
    width = max(len(name) for name, _ in rows)
    steps = rows[0][1]["steps"]
    lines = [
        f"memory, one {steps}-step run in a fresh process: peak RSS (ru_maxrss) after import "
        "and setup, after the run; peak of Python allocations during a second run (tracemalloc)"
    ]
    for name, mem in rows:
        lines.append(
            f"  {name:<{width}}  {mem['before']['peak_mib']:7.1f} MiB  "
            f"{mem['after']['peak_mib']:7.1f} MiB  {mem['traced_peak_kib']:9,.0f} KiB"
        )
    return lines


def format_agentloop(data: Mapping[str, Any]) -> list[str]:
    """The agentloop-only rows: S2 steps only, S4, S5, memory."""
    lines: list[str] = []
    extras = data.get("extras", {})
    say = lines.append
    say("agentloop only")
    steps_only = extras.get("S2_steps_only", {})
    if steps_only:
        per = {size: cell["ns_per_step"] for size, cell in steps_only.items()}
        first, last = per.get(str(S2_SIZES[0])), per.get(str(S2_SIZES[-1]))
        cells = ", ".join(
            f"{size}: {_us(cell['ns_per_step'])} (setup {_us(cell.get('setup_ns'))})"
            for size, cell in steps_only.items()
        )
        ratio = f" ({_ratio(last, first)} of {S2_SIZES[0]})" if first and last else ""
        steps = next(iter(steps_only.values()))["steps"]
        say(
            f"  S2 steps only, µs per step of {steps} steps after N initial messages "
            f"(raw generator; setup µs = agent_loop() + first next()): {cells}{ratio}"
        )
    s4 = extras.get("S4")
    if s4:
        say(
            f"  S4 replay of a {s4['steps']}-step session ({s4['events']} events): "
            f"{_us(s4['ns_per_replay'])} µs per replay, {s4['events_per_s']:,.0f} events/s; "
            f"from a file (read_log + replay): {s4['file_events_per_s']:,.0f} events/s"
            + (
                f" (floor, no engine nor Python logic: {s4['floor_events_per_s']:,.0f})"
                if "floor_events_per_s" in s4
                else ""
            )
        )
    s5 = extras.get("S5")
    if s5:
        say(
            f"  S5 event log ({s5['events']} events): encode {s5['encode_events_per_s']:,.0f}"
            f" events/s, decode {s5['decode_events_per_s']:,.0f} events/s, encode+decode "
            f"{s5['roundtrip_events_per_s']:,.0f} events/s; {s5['bytes_per_step']:,.0f} bytes "
            f"per step ({s5['bytes_per_event']:,.0f} per event)"
            + (
                f"; bare msgspec encode+decode {s5['bare_events_per_s']:,.0f} events/s"
                if "bare_events_per_s" in s5
                else ""
            )
        )
        if "file_bytes_per_step" in s5:
            say(
                f"  S5 log file: {s5['file_bytes_per_step']:,.0f} bytes per step; read_log "
                f"{s5['read_log_events_per_s']:,.0f} events/s"
                + (
                    f" (floor, the C calls alone: {s5['read_floor_events_per_s']:,.0f})"
                    if "read_floor_events_per_s" in s5
                    else ""
                )
                + f", write_log {s5['write_log_events_per_s']:,.0f} events/s"
            )
    chunks = extras.get("chunks")
    if chunks:
        say(
            f"  streamed chunks: run() of one step answering in {chunks['chunks']:,} text chunks "
            f"{_us(chunks['ns_streamed'])} µs, in one {_us(chunks['ns_one'])} µs: "
            f"{_us(chunks['ns_per_chunk'])} µs per chunk"
        )
    text = extras.get("non_ascii")
    if text:
        say(
            f"  1 MB tool results ({text['steps']} steps, run() + ScriptedModel), µs per step: "
            f"with a LogWriter, ASCII {_us(text['ascii_log'])}, non-ASCII "
            f"{_us(text['non_ascii_log'])} ({_ratio(text['non_ascii_log'], text['ascii_log'])}); "
            f"without a log, ASCII {_us(text['ascii'])}, non-ASCII {_us(text['non_ascii'])} "
            f"({_ratio(text['non_ascii'], text['ascii'])})"
        )
    cold = extras.get("cold_start")
    if cold:
        say(
            f"  cold start (median of {cold['runs']} fresh processes): import msgspec "
            f"{cold['msgspec_ms']:.1f} ms, then import agentloop adds {cold['bytecode_ms']:.1f} "
            f"ms; without bytecode (nothing cached, nothing written) it adds "
            f"{cold['no_bytecode_ms']:.1f} ms, of which compiling agentloop/_engine.py "
            f"({cold['engine_lines']:,} lines) takes {cold['engine_compile_ms']:.1f} ms"
        )
    extra = data.get("memory_extra")
    if extra and "checkpoints" in extra:
        marks = ", ".join(
            f"after {n}: peak {m['peak_mib']:.1f} / current {m['current_mib'] or 0:.1f} MiB"
            for n, m in extra["checkpoints"].items()
        )
        say(f"  memory, {extra['sessions']} replays of a {extra['steps']}-step session: {marks}")
    return lines


class _Goals:
    """The goal lines of the report: each measured value with its verdict."""

    def __init__(self, settings: Settings) -> None:
        self.lines: list[str] = []
        self.quick = settings.quick

    def heading(self, text: str) -> None:
        self.lines.append(f"  {text}")

    def add(
        self, text: str, value: float | None, ok: Callable[[float], bool], note: str = ""
    ) -> None:
        if value is None:
            verdict = "n/a"
        elif self.quick:
            verdict = "n/a (quick run)"
        else:
            verdict = "met" if ok(value) else "MISSED"
        self.lines.append(f"    {text}  {verdict}{f'  ({note})' if note else ''}")


def _per_step(variant: Mapping[str, Any] | None, key: str) -> float | None:
    if variant is None:
        return None
    ns, steps = _row_ns(variant, key)
    return None if ns is None else ns / steps


def _x(value: float | None) -> str:
    return "-" if value is None else f"{value:,.2f}x" if value < 10 else f"{value:,.0f}x"


def _div(a: float | None, b: float | None) -> float | None:
    return None if a is None or not b else a / b


def format_goals(
    results: Sequence[Mapping[str, Any]],
    settings: Settings,
    big_log: Mapping[str, Any] | None = None,
) -> list[str]:
    """Each goal of issues 16, 12 and 7 with the value measured in this run (ratios
    within the run), and met / MISSED. Measured, never asserted."""
    goals = _Goals(settings)
    head = "goals (measured, not asserted; ratios within this run)"
    if settings.quick:
        head += ": a quick run is not warmed up, its verdicts mean nothing"
    variants = dict(_labels(results))
    agentloop = next(d for d in results if d.get("framework") == "agentloop")
    extras = agentloop.get("extras", {})
    raw, driven = variants.get(RAW), variants.get(DRIVEN)
    floor, unstreamed = variants.get(FLOOR), variants.get(UNSTREAMED)
    peers = [
        (ns, name)
        for name, variant in variants.items()
        if not name.startswith("agentloop") and (ns := _row_ns(variant, "S1")[0]) is not None
    ]
    fastest, fastest_name = min(peers) if peers else (None, "")

    goals.heading("issue 16: close to the floor")
    for label, variant, most in (("raw generator", raw, 3), ("run() + ScriptedModel", driven, 6)):
        ratio = _div(_per_step(variant, "S3"), _per_step(floor, "S3"))
        s1 = _div(_per_step(variant, "S1"), _per_step(floor, "S1"))
        goals.add(
            f"{label} step <= {most}x the floor (S3): {_x(ratio)}",
            ratio,
            partial(operator.ge, most),
            f"S1: {_x(s1)}",
        )
    chunk = extras.get("chunks", {}).get("ns_per_chunk")
    goals.add(
        f"a streamed chunk through run() <= 3 µs: {_us(chunk)} µs",
        chunk,
        lambda v: v <= 3_000,
    )
    s1_run = _row_ns(driven, "S1")[0] if driven else None
    s1_flat = _row_ns(unstreamed, "S1")[0] if unstreamed else None
    s1_raw = _row_ns(raw, "S1")[0] if raw else None
    speedup = _div(fastest, s1_run)
    goals.add(
        f"S1 run() + ScriptedModel (streaming) >= 60x faster than the fastest peer"
        f"{f' ({fastest_name})' if peers else ' (run with --peers)'}: {_x(speedup)}",
        speedup,
        lambda v: v >= 60,
        f"not streaming: {_x(_div(fastest, s1_flat))}; raw generator: {_x(_div(fastest, s1_raw))}",
    )
    s5 = extras.get("S5", {}).get("roundtrip_events_per_s")
    bare = extras.get("S5", {}).get("bare_events_per_s")
    goals.add(
        f"S5 encode+decode >= 1,500,000 events/s: {s5 or 0:,.0f}",
        s5,
        lambda v: v >= 1_500_000,
        f"bare msgspec, the floor: {bare or 0:,.0f}",
    )
    from_file = extras.get("S4", {}).get("file_events_per_s")
    floor_file = extras.get("S4", {}).get("floor_events_per_s")
    goals.add(
        f"read_log + replay from a file >= 300,000 events/s: {from_file or 0:,.0f}",
        from_file,
        lambda v: v >= 300_000,
        f"the C work alone (read, hash, decode, encode; no engine): {floor_file or 0:,.0f}",
    )
    large = (big_log or {}).get("large")
    peak = large["peak_over_file_size"] if large else None
    size = f"a {large['file_mib']:.0f} MiB log" if large else "run with --big-log"
    goals.add(f"read_log peak RSS <= 2x the file size ({size}): {_x(peak)}", peak, lambda v: v <= 2)
    text = extras.get("non_ascii", {})
    ratio = _div(text.get("non_ascii_log"), text.get("ascii_log"))
    goals.add(
        f"1 MB non-ASCII tool result within 2x of an ASCII one per step (with a LogWriter): "
        f"{_x(ratio)}",
        ratio,
        lambda v: v <= 2,
        f"without a log: {_x(_div(text.get('non_ascii'), text.get('ascii')))}",
    )
    cold = extras.get("cold_start", {})
    adds = cold.get("bytecode_ms")
    goals.add(
        f"import agentloop adds <= 25 ms over import msgspec: "
        f"{'-' if adds is None else f'{adds:.1f}'} ms",
        adds,
        lambda v: v <= 25,
        "without bytecode: "
        + (
            "-"
            if adds is None
            else f"{cold['no_bytecode_ms']:.0f} ms, the engine compiles in "
            f"{cold['engine_compile_ms']:.1f} ms"
        ),
    )
    for data in results:
        name = str(data.get("framework", ""))
        if name.startswith("agentloop@") and "error" not in data:
            worst, where = _worst_regression(agentloop, data)
            goals.add(
                f"no Part I scenario more than 5% slower than {name}: worst {_x(worst)} ({where})",
                worst,
                lambda v: v <= 1.05,
            )

    goals.heading("issue 12: async drivers")
    asynchronous = dict(_labels(results, "async_variants"))
    arun_step = _per_step(asynchronous.get(ARUN), "S3")
    async_peers = [
        (ns, name)
        for name, variant in asynchronous.items()
        if not name.startswith("agentloop") and (ns := _per_step(variant, "S3")) is not None
    ]
    if async_peers and arun_step:
        fastest_async, name = min(async_peers)
        goals.add(
            f"arun() step >= 30x faster than the fastest peer's async run ({name}, S3): "
            f"{_x(fastest_async / arun_step)}",
            fastest_async / arun_step,
            lambda v: v >= 30,
            f"arun() {_us(arun_step)} µs per step",
        )
    else:
        goals.add(
            "arun() step >= 30x faster than the fastest peer's async run",
            None,
            bool,
            "run with --peers",
        )

    goals.heading("issue 7: the first targets")
    goals.add(f"S1 <= 50 µs per run: {_us(s1_raw)} µs", s1_raw, lambda v: v <= 50_000)
    goals.add(
        f"S1 >= 50x faster than the fastest peer: {_x(_div(fastest, s1_raw))}",
        _div(fastest, s1_raw),
        lambda v: v >= 50,
        "raw generator",
    )
    s3 = _per_step(raw, "S3")
    goals.add(f"S3 <= 20 µs per step: {_us(s3)} µs", s3, lambda v: v <= 20_000)
    steps_only = extras.get("S2_steps_only", {})
    first = steps_only.get(str(S2_SIZES[0]), {}).get("ns_per_step")
    last = steps_only.get(str(S2_SIZES[-1]), {}).get("ns_per_step")
    goals.add(
        f"S2 per-step cost at {S2_SIZES[-1]} within 1.3x of {S2_SIZES[0]}: {_x(_div(last, first))}",
        _div(last, first),
        lambda v: v <= 1.3,
    )
    s4 = extras.get("S4", {}).get("events_per_s")
    goals.add(f"S4 >= 200,000 events/s replayed: {s4 or 0:,.0f}", s4, lambda v: v >= 200_000)
    goals.add(
        f"S5 encode+decode >= 1,000,000 events/s: {s5 or 0:,.0f}", s5, lambda v: v >= 1_000_000
    )
    return [head, *goals.lines]


#: The agentloop-only rows a baseline is compared on (higher is better for these).
_THROUGHPUTS = (
    ("S4", "events_per_s"),
    ("S4", "file_events_per_s"),
    ("S5", "roundtrip_events_per_s"),
)


def _worst_regression(
    now: Mapping[str, Any], before: Mapping[str, Any]
) -> tuple[float | None, str]:
    """The largest ``now / before`` cost ratio over the Part I scenarios (S1, S2, S3
    of both variants; S4, S5 throughputs), and which scenario it is."""
    worst: tuple[float, str] | None = None
    old_variants = before.get("variants", {})
    for label, variant in now.get("variants", {}).items():
        old = old_variants.get(label)
        if old is None:
            continue
        for key, _ in ROWS:
            ratio = _div(_row_ns(variant, key)[0], _row_ns(old, key)[0])
            if ratio is not None and (worst is None or ratio > worst[0]):
                worst = (ratio, f"{label}, {key}")
    for section, field in _THROUGHPUTS:
        ratio = _div(
            before.get("extras", {}).get(section, {}).get(field),
            now.get("extras", {}).get(section, {}).get(field),
        )
        if ratio is not None and (worst is None or ratio > worst[0]):
            worst = (ratio, f"{section} {field}")
    return (None, "nothing to compare") if worst is None else worst


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The suite's command-line options (shared with ``bench/run.py``)."""
    parser.add_argument(
        "--peers", action="store_true", help="also time pydantic-ai, openai-agents, langgraph"
    )
    parser.add_argument("--quick", action="store_true", help="few iterations (smoke run)")
    parser.add_argument("--repeat", type=int, default=None, help="batches per measurement")
    parser.add_argument("--no-memory", action="store_true", help="skip the RSS measurements")
    parser.add_argument("--json", metavar="FILE", help="also write the raw results as JSON")
    parser.add_argument(
        "--big-log",
        action="store_true",
        help="also read a 100 MB log: peak memory against its size (big_log.py); "
        "--quick reads a 2 MB one anyway",
    )
    parser.add_argument(
        "--baseline",
        action="append",
        default=[],
        metavar="REV",
        help="also time agentloop as of this git revision, in the same run (repeatable)",
    )
    parser.add_argument(
        "--goals",
        action="store_true",
        help="the maintainers' report: scenarios S1-S5 against the floor (no engine), "
        "every agentloop-only figure, and each goal with met / MISSED",
    )
    parser.add_argument(
        "--cpu-time",
        action="store_true",
        help="time the CPU time of each worker instead of the wall clock (steadier on a "
        "busy machine)",
    )


def run_suite(args: argparse.Namespace) -> int:
    """Run the suite as ``args`` (from :func:`add_arguments`) say; print the report.

    Returns 1 when agentloop's worker failed, else 0 (a peer that is not
    installed or fails is reported as skipped).
    """
    settings = Settings.make(args.quick, args.repeat, getattr(args, "cpu_time", False))
    frameworks = [CORE, *PEERS] if args.peers else [CORE]

    def progress(text: str) -> None:
        print(text, file=sys.stderr, flush=True)

    results = collect(
        frameworks,
        settings,
        memory=not args.no_memory,
        progress=progress,
        baselines=getattr(args, "baseline", ()),
    )
    big: dict[str, Any] | None = None
    if getattr(args, "big_log", False) or args.quick:
        progress("reading a big log ...")
        script = Path(__file__).resolve().parent / "big_log.py"
        mb = ["--mb", "2"] if args.quick else []
        done = subprocess.run(
            [sys.executable, str(script), "--json", *mb],
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            print(done.stderr, file=sys.stderr)
            return 1
        big = json.loads(done.stdout.splitlines()[-1])
    print(format_report(results, settings, big, goals=getattr(args, "goals", False)))
    if big is not None:
        from .big_log import report

        print()
        print(report(big))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n")
    return 1 if any("error" in d for d in results if d["framework"] == "agentloop") else 0


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m bench.peers [--peers] [--quick] [--goals] [--repeat N] [--no-memory]
    [--json FILE]``."""
    parser = argparse.ArgumentParser(
        prog="python -m bench.peers",
        description="agentloop side by side with the agent frameworks users would otherwise "
        "pick, over scripted models, one process per framework.",
    )
    add_arguments(parser)
    return run_suite(parser.parse_args(argv))
