"""Smoke test of ``bench/fleet.py``: the quick mode runs and reports every number
(no timing assertions: timing is not a test)."""

from __future__ import annotations

import json
import subprocess
import sys

from .helpers import ROOT, quick_bench


def test_quick_run_prints_and_writes_every_number(tmp_path):
    out = tmp_path / "fleet.json"
    done = quick_bench("fleet.py", out, timeout=600)
    assert done.returncode == 0, done.stderr
    for needle in ("F1 40 scripted 4-step sessions", "16 threads", "4 processes", "F2 ", "F3 "):
        assert needle in done.stdout, done.stdout
    for needle in ("CPU ms/session", "interpreters' start-up", "F4 inside the write lock"):
        assert needle in done.stdout, done.stdout
    for needle in ("16 tasks (grouped)", "16 tasks each", "with 16 tasks (grouped commits)"):
        assert needle in done.stdout, done.stdout
    assert "goal >= 2,000/s with 4 workers: " in done.stdout
    data = json.loads(out.read_text())
    for key in (
        "threads_1",
        "threads_4",
        "threads_16",
        "processes_4",
        "serial_run_durable",
        "sqlite_floor",
        "sqlite_floor_per_cpu_second",
        "threads_1_cpu_ms",
        "threads_4_cpu_ms",
        "threads_16_cpu_ms",
        "processes_4_cpu_ms",
        "processes_4_start_up_cpu_s",
        "write_lock_cpu_us",
        "write_lock_wall_us",
        "write_lock_session_cpu_us",
        "tasks_1",
        "tasks_1_cpu_ms",
        "processes_4_tasks",
        "processes_4_tasks_cpu_ms",
        "write_lock_tasks_cpu_us",
        "write_lock_tasks_session_cpu_us",
        "best_4_workers",
        "processes_2_tasks",
    ):
        assert data[key] > 0
    assert "processes_4_run_cpu_ms" in data  # (start-up subtracted: noise may make it small)
    assert type(data["goal_met"]) is bool


def test_the_crash_mode_runs_and_checks_the_fleet(tmp_path):
    # (--crash 10000 is the full size; a dozen sessions here.)
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "fleet.py"), "--crash", "12"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "12 sessions, 4 worker processes, one SIGKILLed every second" in done.stdout
    assert "0 lost, 0 duplicated" in done.stdout
