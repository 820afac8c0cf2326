"""``python -m replay``, run as a user would: in a subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import msgspec
import pytest

from agentloop import (
    ModelResponse,
    RunFinishedEvent,
    ToolCall,
    ToolRequest,
    ToolResult,
    ToolSpec,
    Usage,
    UserMessage,
    agent_loop,
)
from replay import read_log, write_log

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"


def cli(*args: str | Path) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    env.pop("NO_COLOR", None)
    return subprocess.run(
        [sys.executable, "-m", "replay", *map(str, args)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=60,
    )


def _one_line_error(done: subprocess.CompletedProcess[str], code: int = 2) -> str:
    assert done.returncode == code, done
    assert "Traceback" not in done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("replay: error: ")
    return lines[0]


@pytest.fixture(scope="module")
def tampered(tmp_path_factory: pytest.TempPathFactory) -> Path:
    events = read_log(FIXTURES / "tool_calls.jsonl")
    last = events[-1]
    assert type(last) is RunFinishedEvent
    events[-1] = msgspec.structs.replace(last, final_text="It is sunny.")
    path = tmp_path_factory.mktemp("logs") / "tampered.jsonl"
    write_log(path, events)
    return path


def test_show_prints_a_timeline() -> None:
    done = cli("show", FIXTURES / "tool_calls.jsonl")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == len(read_log(FIXTURES / "tool_calls.jsonl"))
    assert "\x1b[" not in done.stdout  # not a terminal: no color
    assert lines[0].split()[:4] == ["0", "+0.000s", "step", "0"]
    assert "session.start" in lines[0] and "tools: add, weather" in lines[0]
    assert "tool.call" in done.stdout and "call call-1 add(" in done.stdout
    assert lines[-1].split()[4:6] == ["run.finished", "completed"]


def test_show_color_on_request() -> None:
    done = cli("show", "--color", FIXTURES / "tool_error.jsonl")
    assert done.returncode == 0
    assert "\x1b[1;31mtool.error" in done.stdout


def test_check_ok() -> None:
    done = cli("check", FIXTURES / "approval.jsonl")
    assert done.returncode == 0, done.stderr
    assert "ok, 26 events replayed; run completed (goal_met)" in done.stdout


def test_check_unfinished_log() -> None:
    done = cli("check", FIXTURES / "waiting_on_tool.jsonl")
    assert done.returncode == 0
    assert "unfinished (waits for a ToolRequest)" in done.stdout


def test_check_reports_the_divergence(tampered: Path) -> None:
    done = cli("check", tampered)
    assert done.returncode == 1
    assert "DIVERGED" in done.stdout
    assert "replay diverged at event #21" in done.stdout
    assert "final_text: 'It is sunny.' -> '20 + 22 = 42" in done.stdout
    assert done.stderr == ""


def test_diff_identical_and_different(tampered: Path) -> None:
    same = cli("diff", FIXTURES / "tool_calls.jsonl", FIXTURES / "v1" / "tool_calls.jsonl")
    assert same.returncode == 0
    assert "logs are identical (22 events)" in same.stdout
    different = cli("diff", FIXTURES / "tool_calls.jsonl", tampered)
    assert different.returncode == 1
    assert "logs differ at event #21" in different.stdout
    assert "final_text: '20 + 22" in different.stdout and "-> 'It is sunny.'" in different.stdout


def test_diff_prefix() -> None:
    done = cli("diff", FIXTURES / "waiting_on_tool.jsonl", FIXTURES / "waiting_on_approval.jsonl")
    assert done.returncode == 1
    assert "logs differ at event #0" in done.stdout


def test_diff_one_log_longer(tmp_path: Path) -> None:
    events = read_log(FIXTURES / "plain_answer.jsonl")
    short = tmp_path / "short.jsonl"
    write_log(short, events[:5])
    done = cli("diff", FIXTURES / "plain_answer.jsonl", short)
    assert done.returncode == 1
    assert (
        "agree on their first 5 events; A goes on with 6 more, from #5 model.chunk" in done.stdout
    )


def test_stats() -> None:
    done = cli("stats", FIXTURES / "tool_error.jsonl")
    assert done.returncode == 0
    text = done.stdout
    assert "status        completed (goal_met)" in text
    assert "tool calls    2 (2 errors, 1 made by the loop)" in text
    assert "duration      " in text
    as_json = cli("stats", "--json", FIXTURES / "protocol_failure.jsonl")
    stats = json.loads(as_json.stdout)
    assert stats["status"] == "failed"
    assert stats["error"]["code"] == "MODEL_PROTOCOL_ERROR"
    assert stats["steps"] == 1


def test_bad_paths_and_files_are_one_line_errors(tmp_path: Path) -> None:
    line = _one_line_error(cli("check", tmp_path / "missing.jsonl"))
    assert "missing.jsonl: cannot read: No such file or directory" in line
    _one_line_error(cli("show", tmp_path))  # a directory
    notes = tmp_path / "notes.txt"
    notes.write_text("hello\n")
    for command in ("show", "check", "stats"):
        assert "not an agentloop log" in _one_line_error(cli(command, notes))
    future = tmp_path / "future.jsonl"
    future.write_text('{"format":"agentloop-log","version":3,"library":"9.0"}\n')
    assert "newer" in _one_line_error(cli("check", future))
    assert "newer" in _one_line_error(cli("diff", future, FIXTURES / "plain_answer.jsonl"))


def test_torn_log(tmp_path: Path) -> None:
    torn = tmp_path / "torn.jsonl"
    torn.write_bytes((FIXTURES / "plain_answer.jsonl").read_bytes()[:-30])
    assert "torn" in _one_line_error(cli("check", torn))
    shown = cli("show", torn)  # the intact prefix, then the error
    assert len(shown.stdout.splitlines()) == 10
    assert "torn" in _one_line_error(shown)


def test_usage_errors() -> None:
    _one_line_error(cli())
    _one_line_error(cli("frobnicate", "x"))
    _one_line_error(cli("diff", "only-one"))
    assert cli("--help").returncode == 0


# --------------------------------------------------------------------------- in process
# The same entry point called directly: fast, for the less common paths.


def _main(capsys: pytest.CaptureFixture[str], *args: str | Path) -> tuple[int, str, str]:
    from replay.__main__ import main

    code = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


USAGE = Usage(10, 3)


def _timeless_unfinished_log(path: Path) -> None:
    """A run without any clock, waiting on its second tool call after two reported usages
    (the log as a process that died there left it)."""
    loop = agent_loop([UserMessage("u1", "Add twice.")], tools=[ToolSpec("add")], max_steps=4)
    next(loop)
    loop.send(ModelResponse("request-001", "r1", (ToolCall("c1", "add", {}),), "tool_call", USAGE))
    loop.send(ToolResult("c1", "ok"))
    effect = loop.send(
        ModelResponse("request-002", "r2", (ToolCall("c2", "add", {}),), "tool_call", USAGE)
    )
    assert type(effect) is ToolRequest and effect.call.id == "c2"
    write_log(path, loop.log)
    loop.close()
    assert all(e.at is None for e in read_log(path))


def test_show_colors_a_run_that_did_not_complete_red(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _main(capsys, "show", "--color", FIXTURES / "cancel_mid_tool.jsonl")
    assert code == 0
    assert "\x1b[1;31mrun.finished" in out
    code, out, _ = _main(capsys, "show", "--color", FIXTURES / "plain_answer.jsonl")
    assert "\x1b[1;32mrun.finished" in out


def test_show_a_log_without_times_has_no_clock_column(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "timeless.jsonl"
    _timeless_unfinished_log(path)
    code, out, _ = _main(capsys, "show", "--no-color", path)
    assert code == 0
    lines = out.splitlines()
    assert len(lines) == len(read_log(path))
    assert lines[0].split()[:4] == ["0", "step", "0", "session.start"]
    assert "+" not in "".join(line[:18] for line in lines)


def test_stats_of_an_unfinished_log_sums_the_drafts_usage(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "timeless.jsonl"
    _timeless_unfinished_log(path)
    code, out, _ = _main(capsys, "stats", path)
    assert code == 0
    assert "status        unfinished\n" in out
    assert "steps         2\n" in out  # no "of max": the log does not say
    assert "tokens        20 in / 6 out\n" in out
    assert "duration      unknown (no times)\n" in out
    code, out, _ = _main(capsys, "stats", "--json", path)
    stats = json.loads(out)
    assert (stats["status"], stats["max_steps"], stats["input_tokens"]) == ("unfinished", None, 20)
    assert stats["duration_seconds"] is None


def test_a_header_only_log_is_a_log_with_no_events(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # What a LogWriter leaves when its process dies before the first event.
    path = tmp_path / "empty.jsonl"
    write_log(path, [])
    assert _main(capsys, "show", path) == (0, "(no events)\n", "")
    code, out, err = _main(capsys, "stats", path)
    assert (code, err) == (0, "")
    assert "events        0\n" in out
    assert "status        empty (the log has no events)\n" in out
    code, out, _ = _main(capsys, "stats", "--json", path)
    assert (code, json.loads(out)["status"], json.loads(out)["events"]) == (0, "empty", 0)
    # check: nothing was replayed, so it is not ok (exit 1), but not an error either.
    assert _main(capsys, "check", path) == (1, f"{path}: no events: nothing to replay\n", "")
    assert _main(capsys, "diff", path, path) == (0, "logs are identical (0 events)\n", "")


def test_a_torn_log_with_no_intact_event_shows_no_events(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "torn.jsonl"
    write_log(path, [])
    with path.open("ab") as file:
        file.write(b'{"type":"session.st')
    code, out, err = _main(capsys, "show", path)
    assert (code, out) == (2, "(no events)\n")
    assert "line 2 is torn" in err


def test_a_trailing_empty_line_is_reported_as_such(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "blank.jsonl"
    path.write_bytes((FIXTURES / "plain_answer.jsonl").read_bytes() + b"\n")
    for command in ("show", "check", "stats"):
        code, out, err = _main(capsys, command, path)
        assert (code, out) == (2, "")
        assert err == (
            f"replay: error: {path}: line 13: an empty line (a log has none; was the file "
            "edited?)\n"
        )


def test_check_refuses_a_line_not_in_canonical_form(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "edited.jsonl"
    data = (FIXTURES / "v1" / "plain_answer.jsonl").read_bytes()  # no hash chain
    path.write_bytes(
        data.replace(b'"request_id":"request-001"}', b'"request_id":"request-001"} ', 1)
    )
    code, out, err = _main(capsys, "check", path)
    assert (code, out) == (2, "")
    assert err.startswith(f"replay: error: {path}: line 4: not in canonical form (at column 83: ")
