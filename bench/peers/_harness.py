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
import gc
import importlib.util
import json
import math
import os
import platform
import resource
import subprocess
import sys
import time
import tracemalloc
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
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

    @classmethod
    def make(cls, quick: bool, repeat: int | None = None) -> Settings:
        if quick:
            return cls(quick=True, repeat=repeat or 1, batch_ns=0, warmup_ns=0, replays=100)
        return cls(
            quick=False,
            repeat=repeat or 15,
            batch_ns=20_000_000,
            warmup_ns=50_000_000,
            replays=1000,
        )


@dataclass(frozen=True)
class Job:
    """Something to time: ``fn()`` as a whole, or (``sampled``) the ns it returns."""

    fn: Callable[[], object]
    sampled: bool = False

    def once(self) -> int:
        if self.sampled:
            elapsed = self.fn()
            assert isinstance(elapsed, int)
            return max(elapsed, 1)
        start = time.perf_counter_ns()
        self.fn()
        return max(time.perf_counter_ns() - start, 1)

    def batch(self, number: int) -> int:
        fn = self.fn
        if self.sampled:
            sample = cast(Callable[[], int], fn)
            total = 0
            for _ in range(number):
                total += sample()
            return total
        start = time.perf_counter_ns()
        for _ in range(number):
            fn()
        return time.perf_counter_ns() - start


def measure_all(jobs: Mapping[str, Job], settings: Settings) -> dict[str, float]:
    """Nanoseconds per call of each job: its best batch mean over ``settings.repeat`` rounds.

    Each job is warmed up first (at least one call, at least ``warmup_ns``) and
    given a batch size that lasts ``batch_ns``. Then each round runs one batch of
    every job in turn (``gc.collect()`` before each batch), so a burst of load from
    elsewhere on the machine spoils one batch of several jobs, not every batch of
    one job.
    """
    numbers: dict[str, int] = {}
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


def time_variant(label: str, make: RunFactory, settings: Settings) -> dict[str, Any]:
    """Time S1, S2 and S3 for one variant (interleaved); nanoseconds per run."""
    plan = {"S1": (0, S1_STEPS), "S3": (0, S3_STEPS)}
    plan.update({f"S2:{size}": (size - 1, S1_STEPS) for size in S2_SIZES})
    jobs: dict[str, Job] = {}
    for key, (history, steps) in plan.items():
        run = make(history, steps)
        _check(f"{label} {key}", run)
        jobs[key] = Job(run)
    ns = measure_all(jobs, settings)
    return {
        "S1": {"ns_per_run": ns["S1"], "steps": S1_STEPS},
        "S2": {str(size): {"ns_per_run": ns[f"S2:{size}"], "steps": S1_STEPS} for size in S2_SIZES},
        "S3": {"ns_per_run": ns["S3"], "steps": S3_STEPS},
    }


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
    argv: Sequence[str] | None = None,
) -> int:
    """The entry point of a framework's module: time it, print JSON on the last line."""
    parser = argparse.ArgumentParser(description=f"bench worker for {framework}")
    parser.add_argument("--quick", action="store_true", help="few iterations (smoke run)")
    parser.add_argument("--repeat", type=int, default=None, help="batches per measurement")
    parser.add_argument("--memory", type=int, metavar="VARIANT", default=None)
    parser.add_argument("--memory-extra", action="store_true")
    args = parser.parse_args(argv)
    settings = Settings.make(args.quick, args.repeat)
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


def run_worker(framework: Framework, *options: str) -> dict[str, Any]:
    """Run one worker in a fresh process; its JSON result (or ``{"error": ...}``)."""
    missing = _missing(framework)
    if missing:
        return {"framework": framework.name, "error": f"not installed: {', '.join(missing)}"}
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env.setdefault("OPENAI_AGENTS_DISABLE_TRACING", "1")
    env.setdefault("LANGSMITH_TRACING", "false")
    proc = subprocess.run(
        [sys.executable, "-m", f"bench.peers.{framework.module}", *options],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
        return {"framework": framework.name, "error": f"exit {proc.returncode}: {tail}"}
    data: dict[str, Any] = json.loads(lines[-1])
    return data


def collect(
    frameworks: Sequence[Framework],
    settings: Settings,
    *,
    memory: bool = True,
    progress: Callable[[str], None] | None = None,
) -> list[dict[str, Any]]:
    """Time every framework (one process each), then measure memory (one process each)."""
    options = ("--quick",) if settings.quick else ()
    quick = (*options, "--repeat", str(settings.repeat))
    results = []
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


def _labels(results: Sequence[Mapping[str, Any]]) -> list[tuple[str, Mapping[str, Any]]]:
    out: list[tuple[str, Mapping[str, Any]]] = []
    for data in results:
        for label, variant in data.get("variants", {}).items():
            out.append((f"{data['framework']}: {label}", variant))
    return out


def format_report(results: Sequence[Mapping[str, Any]], settings: Settings) -> str:
    """The whole report: versions, the comparison table, agentloop-only rows, targets."""
    lines: list[str] = []
    say = lines.append
    say(f"machine: {machine()}")
    if settings.quick:
        timing = "quick smoke run (one batch of one call, no warm-up): the numbers mean nothing"
    else:
        timing = (
            f"best of {settings.repeat} interleaved batches of >= {settings.batch_ns / 1e6:g} ms"
        )
    say(
        f"timing: {timing}; time.perf_counter_ns, one fresh process per framework, "
        "scripted models, no network"
    )
    for data in results:
        versions = ", ".join(f"{k} {v}" for k, v in data.get("versions", {}).items())
        status = f"  SKIPPED ({data['error']})" if "error" in data else ""
        say(f"{data['framework']}: {versions}{status}")
    say("")
    variants = _labels(results)
    base = dict(variants)
    raw = base.get("agentloop: raw generator")
    driven = base.get("agentloop: run() + ScriptedModel")
    name_w = max([len(name) for name, _ in variants] + [9])
    scen_w = max(len(title) for _, title in ROWS)
    header = (
        f"{'scenario':<{scen_w}}  {'framework':<{name_w}}  {'µs/run':>9}  {'µs/step':>8}  "
        f"{'vs raw':>7}  {'vs run()':>8}  note"
    )
    say(header)
    say("-" * len(header))
    for key, title in ROWS:
        for index, (name, variant) in enumerate(variants):
            ns, steps = _row_ns(variant, key)
            raw_ns = _row_ns(raw, key)[0] if raw else None
            run_ns = _row_ns(driven, key)[0] if driven else None
            note = ""
            if key == f"S2:{S2_SIZES[-1]}":
                growth = growth_per_message(variant)
                if growth is not None:
                    note = f"{growth / 1000:+.3f} µs per extra message"
            say(
                f"{title if index == 0 else '':<{scen_w}}  {name:<{name_w}}  {_us(ns):>9}  "
                f"{_us(None if ns is None else ns / steps):>8}  {_ratio(ns, raw_ns):>7}  "
                f"{_ratio(ns, run_ns):>8}  {note}"
            )
    memory = format_memory(results)
    if memory:
        say("")
        lines.extend(memory)
    agentloop = next((d for d in results if d.get("framework") == "agentloop"), None)
    if agentloop is not None:
        say("")
        lines.extend(format_agentloop(agentloop))
        say("")
        lines.extend(format_targets(results, settings))
    return "\n".join(lines)


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
        )
    s5 = extras.get("S5")
    if s5:
        say(
            f"  S5 event log ({s5['events']} events): encode {s5['encode_events_per_s']:,.0f}"
            f" events/s, decode {s5['decode_events_per_s']:,.0f} events/s, encode+decode "
            f"{s5['roundtrip_events_per_s']:,.0f} events/s; {s5['bytes_per_step']:,.0f} bytes "
            f"per step ({s5['bytes_per_event']:,.0f} per event)"
        )
        if "file_bytes_per_step" in s5:
            say(
                f"  S5 log file: {s5['file_bytes_per_step']:,.0f} bytes per step; read_log "
                f"{s5['read_log_events_per_s']:,.0f} events/s, write_log "
                f"{s5['write_log_events_per_s']:,.0f} events/s"
            )
    extra = data.get("memory_extra")
    if extra and "checkpoints" in extra:
        marks = ", ".join(
            f"after {n}: peak {m['peak_mib']:.1f} / current {m['current_mib'] or 0:.1f} MiB"
            for n, m in extra["checkpoints"].items()
        )
        say(f"  memory, {extra['sessions']} replays of a {extra['steps']}-step session: {marks}")
    return lines


def format_targets(results: Sequence[Mapping[str, Any]], settings: Settings) -> list[str]:
    """Each issue-7 target with the measured value (measured, not asserted)."""
    lines = ["targets (measured, not asserted)"]
    if settings.quick:
        lines[0] += ": a quick run is not warmed up, its verdicts mean nothing"
    variants = dict(_labels(results))
    raw = variants.get("agentloop: raw generator")
    agentloop = next(d for d in results if d.get("framework") == "agentloop")
    extras = agentloop.get("extras", {})

    def verdict(value: float | None, ok: Callable[[float], bool]) -> str:
        if value is None or settings.quick:
            return "n/a"
        return "met" if ok(value) else "MISSED"

    s1 = _row_ns(raw, "S1")[0] if raw else None
    driven = variants.get("agentloop: run() + ScriptedModel")
    s1_run = _row_ns(driven, "S1")[0] if driven else None
    lines.append(f"  S1 <= 50 µs per run: {_us(s1)} µs  {verdict(s1, lambda v: v <= 50_000)}")
    peers = [
        (ns, name)
        for name, variant in variants.items()
        if not name.startswith("agentloop") and (ns := _row_ns(variant, "S1")[0]) is not None
    ]
    if peers and s1:
        fastest, name = min(peers)
        also = f"; run() + ScriptedModel: {fastest / s1_run:,.0f}x" if s1_run else ""
        lines.append(
            f"  S1 >= 50x faster than the fastest peer ({name}): {fastest / s1:,.0f}x  "
            f"{verdict(fastest / s1, lambda v: v >= 50)}  (raw generator{also})"
        )
    else:
        lines.append("  S1 >= 50x faster than the fastest peer: n/a (run with --peers)")
    s3, steps = _row_ns(raw, "S3") if raw else (None, 1)
    s3_step = None if s3 is None else s3 / steps
    lines.append(
        f"  S3 <= 20 µs per step: {_us(s3_step)} µs  {verdict(s3_step, lambda v: v <= 20_000)}"
    )
    steps_only = extras.get("S2_steps_only", {})
    first = steps_only.get(str(S2_SIZES[0]), {}).get("ns_per_step")
    last = steps_only.get(str(S2_SIZES[-1]), {}).get("ns_per_step")
    ratio = last / first if first and last else None
    lines.append(
        f"  S2 per-step cost at {S2_SIZES[-1]} within 1.3x of {S2_SIZES[0]}: "
        f"{'-' if ratio is None else f'{ratio:.2f}x'}  {verdict(ratio, lambda v: v <= 1.3)}"
    )
    s4 = extras.get("S4", {}).get("events_per_s")
    lines.append(
        f"  S4 >= 200,000 events/s replayed: {s4 or 0:,.0f}  {verdict(s4, lambda v: v >= 200_000)}"
    )
    s5 = extras.get("S5", {}).get("roundtrip_events_per_s")
    lines.append(
        f"  S5 encode+decode >= 1,000,000 events/s: {s5 or 0:,.0f}  "
        f"{verdict(s5, lambda v: v >= 1_000_000)}"
    )
    return lines


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
        help="also read a 100 MB log: peak memory against its size (big_log.py)",
    )


def run_suite(args: argparse.Namespace) -> int:
    """Run the suite as ``args`` (from :func:`add_arguments`) say; print the report.

    Returns 1 when agentloop's worker failed, else 0 (a peer that is not
    installed or fails is reported as skipped).
    """
    settings = Settings.make(args.quick, args.repeat)
    frameworks = [CORE, *PEERS] if args.peers else [CORE]
    results = collect(
        frameworks,
        settings,
        memory=not args.no_memory,
        progress=lambda text: print(text, file=sys.stderr, flush=True),
    )
    print(format_report(results, settings))
    if getattr(args, "big_log", False):
        script = Path(__file__).resolve().parent / "big_log.py"
        mb = ["--mb", "5"] if args.quick else []
        print()
        done = subprocess.run([sys.executable, str(script), *mb], check=False)
        if done.returncode != 0:
            return 1
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n")
    return 1 if any("error" in d for d in results if d["framework"] == "agentloop") else 0


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m bench.peers [--peers] [--quick] [--repeat N] [--no-memory] [--json FILE]``."""
    parser = argparse.ArgumentParser(
        prog="python -m bench.peers",
        description="agentloop side by side with the agent frameworks users would otherwise "
        "pick, over scripted models, one process per framework.",
    )
    add_arguments(parser)
    return run_suite(parser.parse_args(argv))
