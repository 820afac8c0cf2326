"""``python -m replay``, run as a user would: in a subprocess."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import msgspec
import pytest

from agentloop import (
    ModelAttempt,
    ModelChunk,
    ModelResponse,
    RunFinishedEvent,
    StepEndEvent,
    TextBlock,
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


def test_diff_identical_and_different(tampered: Path, tmp_path: Path) -> None:
    # A format-1 log and its format-2 rewrite hold the same events.
    v1 = FIXTURES / "v1" / "tool_calls.jsonl"
    write_log(tmp_path / "rewritten.jsonl", read_log(v1))
    same = cli("diff", tmp_path / "rewritten.jsonl", v1)
    assert same.returncode == 0
    assert "logs are identical (22 events)" in same.stdout
    # The same run recorded today follows the engine's newer rules revision.
    newer = cli("diff", FIXTURES / "tool_calls.jsonl", v1)
    assert newer.returncode == 1
    assert "logs differ at event #0" in newer.stdout and "rules: 3 -> 0" in newer.stdout
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
    future.write_text('{"format":"agentloop-log","version":4,"library":"9.0"}\n')
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


def test_stats_show_cache_and_reasoning_tokens(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    failed = ModelAttempt(model="primary", error="overloaded", usage=Usage(5, 0))
    refused = ModelAttempt(model="secondary", error="down")  # reported nothing
    usage = Usage(100, 40, cache_read_tokens=80, reasoning_tokens=30)
    loop = agent_loop([UserMessage("u1", "hi")], tools=[ToolSpec("add")], started_at=1.0)
    request = next(loop)
    call = ToolCall("c1", "add", {"a": 1, "b": 2})
    response = ModelResponse(request.id, "r1", (call,), "tool_call", usage, 2.0)
    loop.send(msgspec.structs.replace(response, attempts=(failed, refused)))
    path = tmp_path / "unfinished.jsonl"
    write_log(path, loop.log)  # waits for the tool: what the model calls reported so far
    stats = json.loads(_main(capsys, "stats", "--json", path)[1])
    assert [stats[k] for k in ("input_tokens", "output_tokens", "cache_read_tokens")] == [
        105,
        40,
        80,
    ]
    assert (stats["cache_write_tokens"], stats["reasoning_tokens"]) == (0, 30)
    loop.send(ToolResult("c1", "3", at=3.0))
    with pytest.raises(StopIteration):
        loop.send(ModelResponse("request-002", "r2", (TextBlock("3"),), "stop", Usage(1, 1)))
    write_log(path, loop.log)
    assert _main(capsys, "stats", path)[1].splitlines()[7] == (
        "tokens        106 in / 41 out (80 cache read, 30 reasoning)"
    )


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


# --------------------------------------------------------------------------- --version, --help


def test_version_and_exit_codes_in_help(capsys: pytest.CaptureFixture[str]) -> None:
    from agentloop import __version__
    from replay.__main__ import main

    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out == (
        f"replay (agentloop {__version__}): writes log format 3, reads formats 1 to 3\n"
    )
    done = cli("--help")
    assert done.returncode == 0
    assert "exit codes:\n  0  ok" in done.stdout and "  2  a usage error" in done.stdout
    for name in ("show", "check", "diff", "stats", "verify"):
        assert name in done.stdout
    assert "exit codes:" in cli("verify", "--help").stdout


def test_a_command_is_added_by_registering_it(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # How the otel and view commands plug in.
    import argparse

    from replay import __main__ as cli_module

    monkeypatch.setattr(cli_module, "COMMANDS", dict(cli_module.COMMANDS))

    def arguments(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("log")

    @cli_module.command("hello", "say hello to a log", arguments)
    def hello(args: argparse.Namespace) -> int:
        print(f"hello {args.log}")
        return 0

    assert _main(capsys, "hello", "x.jsonl") == (0, "hello x.jsonl\n", "")


# --------------------------------------------------------------------------- verify


def test_verify_a_format_2_log() -> None:
    done = cli("verify", FIXTURES / "tool_calls.jsonl")
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout.startswith(f"{FIXTURES / 'tool_calls.jsonl'}: verified: log format 3, 22 ")
    assert "hash chain intact (last link " in done.stdout
    assert done.stdout.endswith("; complete (ends with run.finished)\n")
    waiting = cli("verify", "--json", FIXTURES / "waiting_on_tool.jsonl")
    assert waiting.returncode == 0
    report = json.loads(waiting.stdout)
    assert report == {
        "path": str(FIXTURES / "waiting_on_tool.jsonl"),
        "session": None,
        "ok": True,
        "format_version": 3,
        "events": 7,
        "chain": "intact",
        "complete": False,
        "last_link": report["last_link"],
        "problem": None,
    }
    assert (
        (FIXTURES / "waiting_on_tool.jsonl")
        .read_text()
        .endswith(f'"#":"{report["last_link"]}"}}\n')
    )


def test_verify_names_the_first_edited_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "edited.jsonl"
    path.write_bytes((FIXTURES / "tool_calls.jsonl").read_bytes().replace(b'"42"', b'"41"'))
    code, out, err = _main(capsys, "verify", path)
    assert (code, err) == (1, "")
    assert out == (
        f"{path}: NOT verified: line 11: the hash chain is broken here: this line was edited, "
        "or lines were removed, inserted or reordered before it, or it comes from another log\n"
    )
    code, out, _ = _main(capsys, "verify", "--json", path)
    report = json.loads(out)
    assert (code, report["ok"], report["chain"], report["events"]) == (1, False, "broken", 9)
    assert report["problem"]["line"] == 11 and report["last_link"] is None
    # Two logs joined: refused at the second header.
    path.write_bytes((FIXTURES / "plain_answer.jsonl").read_bytes() * 2)
    code, out, _ = _main(capsys, "verify", path)
    assert code == 1 and "line 13: a second log header" in out
    # The header itself edited.
    data = (FIXTURES / "plain_answer.jsonl").read_bytes()
    path.write_bytes(data.replace(b'"library":"', b'"library":"x', 1))
    code, out, _ = _main(capsys, "verify", path)
    assert code == 1 and "NOT verified: line 1: the hash chain is broken" in out


def test_verify_a_torn_a_format_1_and_an_empty_log(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "torn.jsonl"
    path.write_bytes((FIXTURES / "plain_answer.jsonl").read_bytes()[:-30])
    code, out, _ = _main(capsys, "verify", path)
    assert code == 1
    assert out == (
        f"{path}: NOT verified: line 12 is torn (incomplete last line; the writer was "
        "interrupted); the 10 events before it are intact\n"
    )
    code, out, _ = _main(capsys, "verify", FIXTURES / "v1" / "plain_answer.jsonl")
    assert code == 1
    assert "not verified: log format 1 has no hash chain (11 events, every line canonical)" in out
    code, out, _ = _main(capsys, "verify", "--json", FIXTURES / "v1" / "plain_answer.jsonl")
    report = json.loads(out)
    assert (report["ok"], report["chain"], report["format_version"]) == (False, "absent", 1)
    write_log(path, [])
    code, out, _ = _main(capsys, "verify", path)
    assert code == 0
    assert re.search(
        r"verified: log format 3, 0 events, hash chain intact \(last link [0-9a-f]{16}\); "
        r"no events\n$",
        out,
    )


def test_verify_errors_that_are_not_about_a_log(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    notes = tmp_path / "notes.txt"
    notes.write_text("hello\n")
    code, out, err = _main(capsys, "verify", notes)
    assert (code, out) == (2, "")
    assert "not an agentloop log" in err
    code, out, err = _main(capsys, "verify", "--json", tmp_path / "missing.jsonl")
    assert code == 2
    assert json.loads(out) == {
        "error": {
            "message": f"{tmp_path / 'missing.jsonl'}: cannot read: No such file or directory",
            "path": str(tmp_path / "missing.jsonl"),
            "line": None,
        }
    }
    assert err.startswith("replay: error: ")
    future = tmp_path / "future.jsonl"
    future.write_text('{"format":"agentloop-log","version":4}\n')
    assert _main(capsys, "verify", future)[0] == 2


@pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="needs /dev/zero")
def test_dev_zero_is_a_one_line_error(capsys: pytest.CaptureFixture[str]) -> None:
    # Defect 16: no unbounded read, no "internal error".
    expected = (
        'replay: error: /dev/zero: not an agentloop log (line 1 is not an {"format": '
        '"agentloop-log", ...} header); nor a session store (a store is an SQLite file)'
    )
    assert _one_line_error(cli("check", "/dev/zero")) == expected
    for command in ("verify", "show", "stats"):
        assert _main(capsys, command, "/dev/zero") == (2, "", expected + "\n")


# --------------------------------------------------------------------------- --json


def test_check_json(tampered: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _main(capsys, "check", "--json", FIXTURES / "waiting_on_tool.jsonl")
    assert code == 0
    assert json.loads(out) == {
        "path": str(FIXTURES / "waiting_on_tool.jsonl"),
        "session": None,
        "ok": True,
        "events": 7,
        "result": None,
        "pending": "ToolRequest",
        "divergence": None,
    }
    code, out, _ = _main(capsys, "check", "--json", FIXTURES / "plain_answer.jsonl")
    assert json.loads(out)["result"] == {"status": "completed", "reason": "goal_met", "steps": 1}
    code, out, _ = _main(capsys, "check", "--json", tampered)
    report = json.loads(out)
    assert (code, report["ok"]) == (1, False)
    divergence = report["divergence"]
    assert divergence["sequence"] == 21
    assert divergence["recorded"]["type"] == divergence["regenerated"]["type"] == "run.finished"
    assert divergence["differences"][0].startswith("final_text: 'It is sunny.' -> '20 + 22")
    assert set(divergence) == {
        "sequence",
        "reason",
        "recorded",
        "regenerated",
        "differences",
        "hint",
    }
    # A log that goes on after its run finished: nothing regenerated there.
    events = read_log(FIXTURES / "plain_answer.jsonl")
    extra = tmp_path / "extra.jsonl"
    write_log(extra, [*events, StepEndEvent(sequence=len(events), step=1)])
    code, out, _ = _main(capsys, "check", "--json", extra)
    divergence = json.loads(out)["divergence"]
    assert code == 1 and divergence["regenerated"] is None
    assert divergence["recorded"] == {
        "sequence": 11,
        "type": "step.end",
        "step": 1,
        "summary": "",
    }
    empty = tmp_path / "empty.jsonl"
    write_log(empty, [])
    code, out, _ = _main(capsys, "check", "--json", empty)
    assert (code, json.loads(out)["ok"], json.loads(out)["events"]) == (1, False, 0)


def test_diff_json(tampered: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    same = (tmp_path / "rewritten.jsonl", FIXTURES / "v1" / "tool_calls.jsonl")
    write_log(same[0], read_log(same[1]))
    code, out, _ = _main(capsys, "diff", "--json", *same)
    assert (code, json.loads(out)) == (
        0,
        {
            "a": str(same[0]),
            "b": str(same[1]),
            "sessions": {"a": None, "b": None},
            "identical": True,
            "events": {"a": 22, "b": 22},
            "first_difference": None,
        },
    )
    code, out, _ = _main(capsys, "diff", "--json", FIXTURES / "tool_calls.jsonl", tampered)
    first = json.loads(out)["first_difference"]
    assert code == 1
    assert first["index"] == 21 and first["a"]["type"] == "run.finished"
    assert first["differences"][0].startswith("final_text: '20 + 22")
    short = tmp_path / "short.jsonl"
    write_log(short, read_log(FIXTURES / "plain_answer.jsonl")[:5])
    for a, b, side in (
        (short, FIXTURES / "plain_answer.jsonl", "b"),
        (FIXTURES / "plain_answer.jsonl", short, "a"),
    ):
        code, out, _ = _main(capsys, "diff", "--json", a, b)
        first = json.loads(out)["first_difference"]
        assert code == 1 and first["index"] == 5 and first["differences"] == []
        assert first[side]["type"] == "model.chunk"
        assert first["b" if side == "a" else "a"] is None


def test_json_errors_and_usage_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "blank.jsonl"
    path.write_bytes((FIXTURES / "plain_answer.jsonl").read_bytes() + b"\n")
    code, out, err = _main(capsys, "stats", "--json", path)
    assert code == 2
    assert json.loads(out) == {
        "error": {
            "message": f"{path}: line 13: an empty line (a log has none; was the file edited?)",
            "path": str(path),
            "line": 13,
        }
    }
    assert err.count("\n") == 1
    code, out, err = _main(capsys, "stats", "--jsn", path)
    assert (code, out) == (2, "")  # a usage error: no JSON (it was not asked for yet)


# --------------------------------------------------------------------------- hostile text


def _hostile_log(path: Path) -> None:
    loop = agent_loop(
        [UserMessage("u\x1b[31m1", "hi \x1b]0;owned\x07 \u202e")],
        tools=[ToolSpec("add")],
        started_at=1.0,
    )
    request = next(loop)
    call = ToolCall("c\x1b[2J", "add\x9b", {"\x1b": "\x1b[5m"})
    content = (TextBlock("\x1b[5mblink"), call)
    with pytest.raises(StopIteration):  # a tool call with stop reason "stop": it fails
        loop.send(ModelResponse(request.id, "r\x1b1", content, "stop", at=2.0))
    write_log(path, loop.log)


@pytest.mark.parametrize(
    "args",
    [
        ("show", "--no-color", "{log}"),
        ("check", "{log}"),
        ("stats", "{log}"),
        ("diff", "{log}", "{other}"),
        ("verify", "{log}"),
        ("check", "--json", "{log}"),
        ("diff", "--json", "{log}", "{other}"),
        ("stats", "--json", "{log}"),
    ],
)
def test_control_characters_never_reach_the_terminal(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: tuple[str, ...]
) -> None:
    log, other = tmp_path / "hostile\x1b.jsonl", tmp_path / "other.jsonl"
    _hostile_log(log)
    write_log(other, read_log(FIXTURES / "plain_answer.jsonl"))
    code, out, err = _main(capsys, *(a.format(log=log, other=other) for a in args))
    assert code in (0, 1)
    for text in (out, err):
        assert not any(c in text for c in "\x1b\x07\x9b\u202e"), text
    if args[0] == "show":
        assert "u\\x1b[31m1" in out and "\\u202e" in out and "add\\x9b(" in out
    if "--json" in args:
        json.loads(out)  # still JSON


def test_errors_are_escaped_too(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _main(capsys, "check", tmp_path / "no\x1b[2Jsuch.jsonl")
    assert code == 2 and "\x1b" not in err and "no\\x1b[2Jsuch.jsonl" in err


# --------------------------------------------------------------------------- deep values


def _deep(depth: int, leaf: Any = 1) -> Any:
    value = leaf
    for _ in range(depth):
        value = [value]
    return value


def test_show_diff_and_check_on_a_log_with_500_deep_values(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Defect 3: check said ok, show and diff raised RecursionError.
    def session(leaf: int) -> list[Any]:
        loop = agent_loop([UserMessage("u1", "deep")], tools=[ToolSpec("add")], started_at=1.0)
        request = next(loop)
        call = ToolCall("c1", "add", {"a": _deep(500, leaf)})
        with pytest.raises(StopIteration):
            loop.send(ModelResponse(request.id, "r1", (call,), "tool_call", at=2.0))
        return list(loop.log)

    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    write_log(a, session(1))
    write_log(b, session(2))
    assert _main(capsys, "check", a)[0] == 0
    code, out, _ = _main(capsys, "show", a)
    assert code == 0 and 'call c1 add({"a":[[[[' in out
    code, out, _ = _main(capsys, "diff", a, b)
    assert code == 1
    assert "    reply.content[0].arguments.a[0]…(+493 levels)…[0][0][0][0][0][0]: 1 -> 2\n" in out


def test_output_piped_into_head_ends_quietly(tmp_path: Path) -> None:
    # More lines than a pipe holds; the reader stops after the first one.
    loop = agent_loop([UserMessage("u1", "x" * 60)], tools=[ToolSpec("add")], started_at=1.0)
    effect: Any = next(loop)
    for _ in range(1000):
        effect = loop.send(ModelChunk(effect.id, TextBlock("y" * 60), at=2.0))
    path = tmp_path / "long.jsonl"
    write_log(path, loop.log)
    loop.close()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    child = subprocess.Popen(
        [sys.executable, "-m", "replay", "show", str(path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    assert child.stdout is not None and child.stderr is not None
    assert b"session.start" in child.stdout.readline()
    child.stdout.close()
    assert child.wait(timeout=60) == 0
    assert child.stderr.read() == b""
    child.stderr.close()


def test_a_bug_is_still_one_line(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from replay import __main__ as cli_module

    def broken(args: Any) -> int:
        raise KeyError("oops")

    monkeypatch.setitem(
        cli_module.COMMANDS, "stats", cli_module.COMMANDS["stats"]._replace(run=broken)
    )
    code, out, err = _main(capsys, "stats", FIXTURES / "plain_answer.jsonl")
    assert (code, out, err) == (2, "", "replay: internal error: KeyError: 'oops'\n")
