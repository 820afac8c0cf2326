"""Smoke test of ``bench/durable.py``: the quick mode runs and reports every number.

No timing assertions (timing is not a test); commits per step are counted, not
timed, so they are checked: group commit gives exactly 2 per step here.
"""

from __future__ import annotations

import json

from .helpers import quick_bench


def test_quick_run_prints_and_writes_every_number(tmp_path):
    out = tmp_path / "durable.json"
    done = quick_bench("durable.py", out, timeout=300)
    assert done.returncode == 0, done.stderr
    for needle in ("D1 per step", "D2 20 short durable sessions", "D3 bytes per step", "D4 resume"):
        assert needle in done.stdout, done.stdout
    assert "<= 2 commits per step: 2.00  met" in done.stdout
    data = json.loads(out.read_text())
    assert data["D1"]["NORMAL"]["commits_per_step"] == data["D1"]["FULL"]["commits_per_step"] == 2
    assert data["D1"]["async_NORMAL"]["commits_per_step"] == 2
    assert "arun_durable, SQLite synchronous=NORMAL" in done.stdout
    assert data["D2"]["commits_per_session"] == 4
    assert data["D3"]["event_bytes_per_step"] > 0 and data["D4"]["stored_events"] > 300
    # LogWriter(fsync=True): the header and its directory, before each of the 50 model
    # calls and 49 tool calls, at the end; none without fsync.
    assert data["D5"]["fsync"]["fsyncs_per_step"] == (2 + 50 + 49 + 1) / 50
    assert data["D5"]["flush"]["fsyncs_per_step"] == 0
    assert data["D5"]["per_line_fsyncs_per_step"] > 7
    assert "D5 file tier" in done.stdout


def test_the_floor_script_prints_the_sqlite_floor(tmp_path):
    out = tmp_path / "floor.json"
    done = quick_bench("durable_floor.py", out, timeout=300)
    assert done.returncode == 0, done.stderr
    for needle in ("run_durable:", "overhead:", "F1 bare commits:", "F2 the store's statements:"):
        assert needle in done.stdout, done.stdout
    data = json.loads(out.read_text())
    # The appends of S3 after the session's creation (the first commit): counted.
    assert data["commits_per_step"] == 99 / 50
    assert set(data["cpu_us_per_step"]) == {"run()", "run_durable", "F1", "F2"}
