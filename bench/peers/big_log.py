"""A big log: the peak memory of ``replay.read_log`` against the file's size, and events/s.

Run from a checkout (``python bench/run.py --big-log`` runs it too)::

    python bench/peers/big_log.py                  # a 100 MB session, and a small-events one
    python bench/peers/big_log.py --mb 20 --json   # smaller; one JSON object

Each log is one real session, driven through ``agent_loop`` and written with
``LogWriter`` as it happens, in a child process:

- ``large``: an agent that reads files: each of its steps calls a ``read_file`` tool
  24 times and gets 64 KiB of text back each time, for as many steps as ``--mb``
  megabytes of results take (at most 64, the most a run may take: 100 MB is 64
  steps); the same session whatever the log format, so formats compare;
- ``small``: the same number of steps, each a streamed answer in 1,000 small chunks
  (the most events per byte a session can have; about 11 MB);
- ``non-ascii`` (``--kind non-ascii``, not run by default): ``large`` with
  Cyrillic comments in every line of the files (text a reader must not keep a
  UTF-8 copy of).

Then a fresh child process imports ``replay``, notes its resident memory, reads the
log with ``read_log`` (timed) and reports the peak resident memory (``ru_maxrss``)
above that baseline, against the file's size. Only ``agent_loop``, ``LogWriter`` and
``read_log`` are used, so the same script measures an older agentloop too
(``PYTHONPATH=<its checkout> python bench/peers/big_log.py``).

Numbers are printed, never asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from typing import Any

STEPS = 64
CALLS_PER_STEP = 24
RESULT_BYTES = 64 * 1024
CHUNKS_PER_STEP = 1000


def _rss_mib() -> float:
    with open("/proc/self/statm") as file:
        pages = int(file.read().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


def _reset_peak() -> None:
    """Start the high-water mark of resident memory afresh (Linux), so that the
    imports before do not count."""
    try:
        with open("/proc/self/clear_refs", "w") as file:
            file.write("5")
    except OSError:  # not Linux: ru_maxrss, which the imports may have set higher
        pass


def _peak_mib() -> float:
    try:
        with open("/proc/self/status") as file:
            for line in file:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 2**20 if sys.platform == "darwin" else peak / 1024


def _file_text(name: str, non_ascii: bool = False) -> str:
    """About RESULT_BYTES (UTF-8) of source-like text, different for every file;
    ``non_ascii``: with Cyrillic comments and names (2 bytes a letter in UTF-8)."""
    lines = []
    size = 0
    n = 0
    comment = "строка номер" if non_ascii else "line"
    while size < RESULT_BYTES:
        line = f"def {name.replace('/', '_')}_{n}(value: int) -> int:  # {comment} {n}\n"
        lines.append(line)
        size += len(line.encode())
        n += 1
    return "".join(lines)


def generate(path: str, kind: str, megabytes: int, steps: int = STEPS) -> None:
    """Record one session of ``kind`` into ``path`` as it happens."""
    from agentloop import (
        ModelChunk,
        ModelRequest,
        ModelResponse,
        TextBlock,
        ToolCall,
        ToolRequest,
        ToolResult,
        ToolSpec,
        UserMessage,
        agent_loop,
    )
    from replay import LogWriter

    large = kind in ("large", "non-ascii")
    if large:
        per_step = CALLS_PER_STEP * RESULT_BYTES
        steps = min(steps, max(1, -(-megabytes * 2**20 // per_step)))
    spec = ToolSpec(
        "read_file",
        "Read a file of the repository.",
        {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
    )
    loop = agent_loop(
        [UserMessage("user-1", "Read the repository and summarize it.")],
        tools=[spec],
        max_steps=steps,
        started_at=0.0,
    )
    clock = 0.0
    step = 0
    with LogWriter(path) as writer:
        writer.follow(loop.log)
        effect: Any = next(loop)
        while True:
            clock += 0.001
            if type(effect) is ToolRequest:
                call = effect.call
                path_arg = call.arguments["path"]
                content = _file_text(path_arg, kind == "non-ascii") if large else "ok"
                effect = loop.send(ToolResult(call.id, content, at=clock))
                continue
            assert type(effect) is ModelRequest
            step += 1
            last = step == steps
            if kind == "small":
                text, pieces = "x" * CHUNKS_PER_STEP, CHUNKS_PER_STEP
            else:
                text, pieces = f"Step {step}: reading {CALLS_PER_STEP} more files.", 4
            size = -(-len(text) // pieces)
            for i in range(0, len(text), size):
                effect = loop.send(ModelChunk(effect.id, TextBlock(text[i : i + size]), at=clock))
            if last:
                final = ModelResponse(effect.id, f"r{step}", (TextBlock(text),), "stop", at=clock)
                try:
                    loop.send(final)
                except StopIteration:
                    return
            count = CALLS_PER_STEP if large else 1
            calls = [
                ToolCall(f"call-{step}-{i}", "read_file", {"path": f"src/m{step}_{i}.py"})
                for i in range(count)
            ]
            for call in calls:
                effect = loop.send(ModelChunk(effect.id, call, at=clock))
            blocks: tuple[Any, ...] = (TextBlock(text), *calls)
            effect = loop.send(ModelResponse(effect.id, f"r{step}", blocks, "tool_call", at=clock))


def measure_allocations(path: str) -> dict[str, Any]:
    """In this (fresh) process: the peak of Python's allocations while reading
    ``path`` (tracemalloc: exact, without the allocator's overhead, slower)."""
    import tracemalloc

    import replay

    read_log = replay.read_log
    tracemalloc.start()
    events = read_log(path)
    kept, peak = (value / 2**20 for value in tracemalloc.get_traced_memory())
    tracemalloc.stop()
    size = os.path.getsize(path) / 2**20
    assert events
    # ``kept``: what the events themselves take once read (the floor of any
    # reader that returns them: text with one non-ASCII character takes 2 bytes a
    # character in a Python str, its ASCII too).
    return {
        "peak_allocated_mib": peak,
        "allocated_over_file_size": peak / size,
        "kept_mib": kept,
        "kept_over_file_size": kept / size,
    }


def measure(path: str) -> dict[str, Any]:
    """In this (fresh) process: read ``path`` once, timed, and report memory."""
    import replay

    read_log = replay.read_log  # imports the package's modules (lazily loaded)
    _reset_peak()
    baseline = _rss_mib()
    start = time.perf_counter()
    events = read_log(path)
    seconds = time.perf_counter() - start
    size = os.path.getsize(path)
    peak = _peak_mib() - baseline
    with open(path, "rb") as file:
        version = json.loads(file.readline())["version"]
    steps = sum(1 for event in events if event.type == "step.start")
    return {
        "file_mib": size / 2**20,
        "format_version": version,
        "events": len(events),
        "steps": steps,
        "bytes_per_step": size / steps,
        "bytes_per_event": size / len(events),
        "seconds": seconds,
        "events_per_s": len(events) / seconds,
        "mib_per_s": size / 2**20 / seconds,
        "peak_rss_above_baseline_mib": peak,
        "peak_over_file_size": peak / (size / 2**20),
    }


def _child(*args: str) -> str:
    done = subprocess.run(
        [sys.executable, os.path.abspath(__file__), *args],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"big_log {args[0]} failed:\n{done.stderr}")
    return done.stdout


def run(megabytes: int, kinds: Sequence[str], steps: int = STEPS) -> dict[str, Any]:
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for kind in kinds:
            path = os.path.join(tmp, f"{kind}.jsonl")
            size = ["--mb", str(megabytes), "--steps", str(steps)]
            _child("--generate", path, "--kind", kind, *size)
            results[kind] = json.loads(_child("--measure", path).splitlines()[-1])
            results[kind].update(json.loads(_child("--allocations", path).splitlines()[-1]))
            os.unlink(path)
    return results


def report(results: dict[str, Any]) -> str:
    lines = [
        "read_log of a big log: peak resident memory above the baseline after imports, "
        "and peak of Python's allocations (tracemalloc), against the file's size"
    ]
    for kind, r in results.items():
        lines.append(
            f"  {kind:<9} {r['file_mib']:7.1f} MiB, format {r['format_version']}, "
            f"{r['events']:,} events, {r['steps']} steps ({r['bytes_per_step']:,.0f} B each): "
            f"{r['seconds']:.2f} s, {r['events_per_s']:,.0f} events/s, "
            f"{r['mib_per_s']:.0f} MiB/s; peak RSS +{r['peak_rss_above_baseline_mib']:.1f} MiB "
            f"= {r['peak_over_file_size']:.2f}x the file, peak allocated "
            f"{r['peak_allocated_mib']:.1f} MiB = {r['allocated_over_file_size']:.2f}x"
            + (
                f" (the events read: {r['kept_mib']:.1f} MiB = {r['kept_over_file_size']:.2f}x)"
                if "kept_mib" in r
                else ""
            )
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--mb", type=int, default=100, help="size of the large log (MiB)")
    parser.add_argument(
        "--kind",
        choices=("large", "small", "non-ascii"),
        action="append",
        help="large, small (the default: both) or non-ascii (large, with Cyrillic text)",
    )
    parser.add_argument("--steps", type=int, default=STEPS, help="at most this many steps")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--generate", metavar="PATH", help=argparse.SUPPRESS)
    parser.add_argument("--measure", metavar="PATH", help=argparse.SUPPRESS)
    parser.add_argument("--allocations", metavar="PATH", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.generate:
        generate(args.generate, args.kind[0], args.mb, args.steps)
        return 0
    if args.measure:
        print(json.dumps(measure(args.measure)))
        return 0
    if args.allocations:
        print(json.dumps(measure_allocations(args.allocations)))
        return 0
    results = run(args.mb, args.kind or ["large", "small"], args.steps)
    print(json.dumps(results) if args.json else report(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
