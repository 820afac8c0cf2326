"""Smoke test of the benchmark suite (bench/peers): the quick core mode runs and reports.

No peers and no timing assertions: timing is not a test. The suite is loaded with
``importlib`` (``bench`` is a directory of scripts, not an installed package).
"""

from __future__ import annotations

import asyncio
import importlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import agentloop

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def harness() -> Any:
    sys.path.insert(0, str(ROOT))
    try:
        yield importlib.import_module("bench.peers._harness")
    finally:
        sys.path.remove(str(ROOT))


@pytest.fixture(scope="module")
def core(harness: Any) -> Any:
    return importlib.import_module("bench.peers.agentloop_bench")


@pytest.mark.parametrize("size", [0, 1, 2, 3, 4, 9, 999, 4095])
def test_history_plan_has_the_asked_size_and_is_a_valid_transcript(core, size):
    messages = core.transcript(size)
    assert len(messages) == size + 1
    assert messages[-1].content == core.USER_TEXT
    agentloop.validate_transcript(messages)


@pytest.mark.parametrize(
    "variant",
    [
        "raw generator",
        "run() + ScriptedModel",
        "run() + ScriptedModel, no streaming",
        "floor (no engine)",
    ],
)
@pytest.mark.parametrize(("history", "steps"), [(0, 2), (9, 2), (0, 50), (4095, 2)])
def test_core_variants_complete_every_scenario(core, variant, history, steps):
    run = core.variants()[variant](history, steps)
    assert run() == core.FINAL_TEXT
    assert run() == core.FINAL_TEXT  # each call is a fresh run


@pytest.mark.parametrize(("history", "steps"), [(0, 2), (9, 2), (0, 50)])
def test_the_floor_records_the_engines_events_one_for_one(core, history, steps):
    floor_events: list[Any] = []
    floor = core.floor_loop(core.transcript(history), steps, floor_events)
    floor_result = core.drive(floor, next(floor), core.replies_for(steps))
    loop = agentloop.agent_loop(
        core.transcript(history), tools=(core.ADD_SPEC,), max_steps=steps, started_at=0.0
    )
    result = core.drive(loop, next(loop), core.replies_for(steps))
    assert floor_events == list(loop.log)
    assert floor_result == result


def test_the_async_variant_and_the_streamed_scenario_complete(core):
    assert asyncio.run(core.make_arun(0, 2)()) == core.FINAL_TEXT
    assert core.make_streamed(core.CHUNK_WORDS)() == core.FINAL_TEXT
    assert core.make_large_results("é" * 10)().steps == core.LARGE_STEPS


def test_recorded_session_replays_and_round_trips(core):
    events = core.record_session()
    assert events[-1].type == "run.finished"
    result = importlib.import_module("replay").replay(events).result
    assert result is not None and result.steps == core.MEMORY_STEPS
    encoded = [agentloop.encode_event(event) for event in events]
    assert [agentloop.decode_event(data) for data in encoded] == events


def test_the_floors_do_the_work_they_stand_for(core, tmp_path):
    events = core.record_session()
    core.bare_codec(events)()
    path = tmp_path / "session.jsonl"
    importlib.import_module("replay").write_log(path, events)
    core.reader_floor(path, events)()  # every event encodes as recorded, or it raises


def test_quick_core_run_prints_the_table_and_writes_json(harness, tmp_path):
    out = tmp_path / "bench.json"
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
    )
    proc = subprocess.run(
        [sys.executable, "-m", "bench.peers", "--quick", "--goals", "--json", str(out)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    report = proc.stdout
    for needle in ("S1 one tool call", "S3 50 sequential", "S4 replay", "S5 event log", "targets"):
        assert needle in report, report
    assert "agentloop: raw generator" in report
    assert "agentloop: run() + ScriptedModel" in report
    for needle in ("floor (no engine)", "streamed chunks", "cold start", "goals", "big log"):
        assert needle in report, report
    (data,) = json.loads(out.read_text())
    assert data["framework"] == "agentloop"
    assert set(data["variants"]) == {
        "raw generator",
        "run() + ScriptedModel",
        "run() + ScriptedModel, no streaming",
        "floor (no engine)",
    }
    for variant in data["variants"].values():
        assert set(variant["S2"]) == {"10", "1000", "4096"}
        assert variant["S1"]["ns_per_run"] > 0
    (arun,) = data["async_variants"].values()
    assert set(arun) == {"S1", "S3"}
    extras = data["extras"]
    assert extras["S5"]["bytes_per_step"] > 0
    # The floors the S4/S5 goals are printed against.
    assert extras["S5"]["bare_events_per_s"] > 0
    assert extras["S4"]["floor_events_per_s"] > 0
    assert "bare msgspec, the floor:" in report and "the C work alone" in report
    assert extras["chunks"]["ns_streamed"] > 0
    assert extras["non_ascii"]["non_ascii_log"] > 0
    assert extras["cold_start"]["bytecode_ms"] > 0
    checkpoints = data["memory_extra"]["checkpoints"]
    assert "100" in checkpoints and checkpoints["100"]["peak_mib"] > 0
    # The same results as a user reads them (the default, without --goals).
    summary = harness.format_report([data], harness.Settings.make(quick=True))
    assert_user_facing(summary)
    for needle in ("does not grow", "grew with the transcript in this run"):
        if needle in summary:
            break
    else:
        raise AssertionError(summary)
    for needle in ("reading the transcript", "replay a recorded", "import agentloop", "memory"):
        assert needle in summary, summary


def assert_user_facing(report: str) -> None:
    """The default report: the per-step figure first, scenarios named by what they do,
    no issue numbers, no goals, no floor, no scenario numbers."""
    lowered = report.lower()
    for word in ("issue", "goal", "missed", "floor", "vs raw", "per extra message"):
        assert word not in lowered, report
    for number in ("S1", "S2", "S3", "S4", "S5"):
        assert number not in report, report
    header = next(line for line in report.splitlines() if line.startswith("scenario"))
    assert header.index("µs/step") < header.index("µs/run"), header
    assert "50 steps: 49 tool calls, then the answer" in report
    assert "2 steps: one tool call, then the answer" in report


def test_report_compares_peers_with_agentloop(harness):
    def variant(ns: float) -> dict[str, Any]:
        cell = {"ns_per_run": ns, "steps": 2}
        return {
            "S1": cell,
            "S2": {str(size): {"ns_per_run": ns + size, "steps": 2} for size in (10, 1000, 4096)},
            "S3": {"ns_per_run": ns * 25, "steps": 50},
        }

    results = [
        {
            "framework": "agentloop",
            "versions": {"agentloop": "0"},
            "variants": {"raw generator": variant(1000), "run() + ScriptedModel": variant(2000)},
        },
        {"framework": "peer", "versions": {"peer": "9"}, "variants": {"run": variant(100_000)}},
        {"framework": "absent", "error": "not installed: absent"},
    ]
    report = harness.format_report(results, harness.Settings.make(quick=True), goals=True)
    assert "peer: run" in report
    assert "100x" in report and "50x" in report  # vs raw, vs run()
    assert "SKIPPED (not installed: absent)" in report
    assert "+0.001 µs per extra message" in report


def test_default_report_compares_peers_with_run_per_step_first(harness):
    def variant(ns: float) -> dict[str, Any]:
        return {
            "S1": {"ns_per_run": ns, "steps": 2},
            "S2": {str(size): {"ns_per_run": ns + size, "steps": 2} for size in (10, 1000, 4096)},
            "S3": {"ns_per_run": ns * 25, "steps": 50},
        }

    steps_only = {
        str(size): {"ns_per_step": 17_000 + size, "steps": 50, "setup_ns": 1_000 * size}
        for size in (10, 1000, 4096)
    }
    results = [
        {
            "framework": "agentloop",
            "versions": {"agentloop": "0"},
            "variants": {
                "raw generator": variant(1000),
                "run() + ScriptedModel": variant(2000),
                "floor (no engine)": variant(100),
            },
            "extras": {"S2_steps_only": steps_only},
        },
        {"framework": "peer", "versions": {"peer": "9"}, "variants": {"run": variant(100_000)}},
        {"framework": "absent", "error": "not installed: absent"},
    ]
    report = harness.format_report(results, harness.Settings.make(quick=True))
    assert_user_facing(report)
    assert "x agentloop: run() + ScriptedModel" in report
    row = next(line for line in report.splitlines() if "peer: run" in line)
    assert row.split()[-3:] == ["50.0", "2,500.0", "50x"]  # S3: µs/step, µs/run, vs run()
    assert "SKIPPED (not installed: absent)" in report
    # 17.01 µs -> 21.096 µs per step over 4,086 more messages: +1.00 per 1,000.
    assert "does not grow with the transcript: +1.00 µs per 1,000 messages" in report
    assert "validates and records it): 1.00 µs per message" in report


@pytest.mark.parametrize(
    ("cpu", "hint"), [(False, "run it again or try --cpu-time)"), (True, "run it again)")]
)
def test_a_step_that_grew_with_the_transcript_is_reported_as_such(harness, cpu, hint):
    steps_only = {
        str(size): {"ns_per_step": 17_000 + 10 * size, "steps": 50} for size in (10, 1000, 4096)
    }
    (line,) = harness.format_transcript([], {"S2_steps_only": steps_only}, cpu)[1:]
    assert "the cost per step grew with the transcript in this run" in line
    assert line.endswith(
        "(raw generator, µs per step after 9 / 999 / 4,095 earlier messages: 17.1 / 27.0 / 58.0)"
    )
    assert hint in line and "+10.00 µs per 1,000 messages" in line
