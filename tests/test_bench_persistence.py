"""Smoke test of ``python bench/run.py --persistence`` (``bench/peers/persistence.py``).

The quick mode runs without the peers installed (the dev environment has none of
the ``bench`` extra): each peer is listed as skipped with what is missing, and
agentloop's row and the fleet's rates are reported. No timing assertions (timing
is not a test); the report's verdicts are checked on numbers made up here.
"""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def persistence() -> Any:
    sys.path.insert(0, str(ROOT))
    try:
        yield importlib.import_module("bench.peers.persistence")
    finally:
        sys.path.remove(str(ROOT))


def test_quick_run_without_the_peers_skips_them_and_reports_agentloop(tmp_path):
    out = tmp_path / "persistence.json"
    command = [sys.executable, str(ROOT / "bench" / "run.py"), "--persistence", "--quick"]
    done = subprocess.run(
        [*command, "--json", str(out)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    data = json.loads(out.read_text())
    ours, *peers = data["P1"]
    assert ours["framework"] == "agentloop"
    (row,) = ours["rows"].values()
    assert row["journal_mode"] == "wal" and row["synchronous"] == "NORMAL"
    assert row["rows_per_step"] > 0 and row["durable_us_per_step"] > 0
    assert [peer["framework"] for peer in peers] == [
        "langgraph",
        "openai-agents",
        "pydantic-ai + DBOS",
    ]
    for peer in peers:  # skipped cleanly when missing, measured when installed
        assert "error" not in peer, peer
        assert peer.get("skipped", "not installed: ").startswith("not installed: ") or peer["rows"]
    for key in ("threads_1", "threads_4", "threads_16", "processes_4", "processes_4_tasks"):
        assert data["P2"][key] > 0
    assert data["P3"] is None  # no --temporal
    assert "P1 persistence overhead per step, 50-step sessions" in done.stdout
    assert "replay worker >= 2,000 sessions/s with 4 workers: " in done.stdout
    if all("skipped" in peer for peer in peers):
        assert "not measured (no peer installed)" in done.stdout


def test_temporal_goes_with_persistence():
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "run.py"), "--temporal"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert "--temporal goes with --persistence" in done.stderr


def _row(overhead: float, cpu: float) -> dict[str, float]:
    return {
        "plain_us_per_step": 100.0,
        "durable_us_per_step": 100.0 + overhead,
        "overhead_us_per_step": overhead,
        "cpu_plain_us_per_step": 50.0,
        "cpu_durable_us_per_step": 50.0 + cpu,
        "cpu_overhead_us_per_step": cpu,
        "rows_per_step": 2.0,
    }


@pytest.mark.parametrize(
    ("ours", "theirs", "verdicts"),
    [
        # (wall, CPU) overheads per step: the goal is met at 5x and beyond, on each clock.
        ((100.0, 50.0), [(500.0, 250.0), (900.0, 900.0)], ["5.0x  met", "5.0x  met"]),
        ((100.0, 50.0), [(499.0, 1000.0)], ["5.0x  MISSED", "20.0x  met"]),
        # A noisy wall clock can give a negative overhead: the ratio says so, missed.
        ((100.0, 50.0), [(-20.0, 400.0)], ["-0.2x  MISSED", "8.0x  met"]),
        ((0.0, 50.0), [(1.0, 100.0)], ["infx  met", "2.0x  MISSED"]),
    ],
)
def test_the_goal_compares_agentloop_with_the_fastest_peer_row(persistence, ours, theirs, verdicts):
    results = [
        {"framework": "agentloop", "rows": {"run_durable": _row(*ours)}},
        {"framework": "peer", "rows": {f"row {i}": _row(*pair) for i, pair in enumerate(theirs)}},
        {"framework": "missing", "skipped": "not installed: x"},
    ]
    wall, cpu = persistence.goal_lines(results)
    assert wall.startswith(
        "  agentloop's overhead per step >= 5x less than the fastest peer's (wall"
    )
    assert wall.endswith(verdicts[0]) and cpu.endswith(verdicts[1])
    assert "(CPU; peer: row" in cpu


def test_the_report_lists_skipped_and_failed_peers_and_the_fleet(persistence):
    results = [
        {"framework": "agentloop", "error": "exit 1: boom"},
        {"framework": "peer", "skipped": "not installed: peer"},
    ]
    fleet = {"error": "bench/fleet.py: exit 1: boom"}
    lines = persistence.format_report(results, fleet)
    text = "\n".join(lines)
    assert "agentloop" in text and "exit 1: boom" in text and "not installed: peer" in text
    assert "bench/fleet.py: exit 1: boom" in text
    assert "not measured (agentloop failed)" in text
    assert "replay worker >=" not in text
    rates = {"sessions": 10, "serial_run_durable": 5.0}
    rates |= {"threads_1": 1.0, "threads_4": 2500.0, "threads_16": 3.0, "processes_4": 4.0}
    rates |= {"tasks_1": 6.0, "processes_4_tasks": 7.0, "best_4_workers": 2500.0}
    text = "\n".join(persistence.format_report(results, rates))
    assert "replay worker >= 2,000 sessions/s with 4 workers: 2,500/s  met" in text


def test_temporal_part_is_skipped_when_its_tools_are_missing(persistence, monkeypatch):
    monkeypatch.setattr(persistence, "_missing", lambda names: ["temporalio"])
    assert persistence.run_temporal(True) == (0, "skipped: not installed: temporalio")
    monkeypatch.setattr(persistence, "_missing", lambda names: [])
    monkeypatch.setattr(persistence.shutil, "which", lambda name, path=None: None)
    status, text = persistence.run_temporal(True)
    assert status == 0 and text.startswith("skipped: no `temporal` CLI on PATH")


def test_missing_names_distributions_not_import_names(persistence):
    # bench/agents.py is importable as `agents` where bench/ is on the path: the check
    # asks for openai-agents' distribution, which the dev environment lacks.
    assert persistence._missing(["msgspec", "no-such-distribution-x"]) == ["no-such-distribution-x"]


def test_quick_run_of_agentloop_at_a_revision_uses_that_revisions_library(persistence):
    data = persistence.run_at("HEAD", quick=True)
    assert data["framework"] == "agentloop@HEAD", data
    (row,) = data["rows"].values()
    assert row["rows_per_step"] > 0
    assert not data["versions"]["path"].startswith(str(ROOT))  # the archive's, not ours
