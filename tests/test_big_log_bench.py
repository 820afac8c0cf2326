"""Smoke test of ``bench/peers/big_log.py`` (the numbers are printed, never asserted)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parent.parent / "bench" / "peers" / "big_log.py"


def test_the_big_log_bench_runs_and_reports() -> None:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--mb", "1", "--steps", "3", "--json"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    results = json.loads(done.stdout)
    assert set(results) == {"large", "small"}
    for result in results.values():
        assert result["format_version"] == 3
        assert result["events"] > 0 and result["peak_over_file_size"] > 0
        assert result["kept_over_file_size"] > 0


def test_the_blob_memory_bench_runs_and_reports() -> None:
    script = SCRIPT.parent.parent / "blob_memory.py"
    done = subprocess.run(
        [sys.executable, str(script), "--mb", "1.5", "--copies", "3"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("image 1.4 MiB in 3 messages")
    assert [line.split()[0] for line in lines[1:]] == ["write", "read"]
    assert all("the text-only log's peak" in line for line in lines[1:])
