"""``python -m replay`` on session stores: ``sessions``, ``export``, and ``show``/
``check``/``diff``/``stats``/``verify`` with ``DB --session ID``."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

import replay
from agentloop import (
    FunctionModel,
    ModelRequest,
    Resume,
    ScriptedResponse,
    ToolCall,
    UserMessage,
    tool,
)
from replay import LogWriter, SQLiteStore
from replay.__main__ import main

from .helpers import add
from .test_replay_cli import cli


@tool(requires_approval=True)
def publish(text: str) -> str:
    """Publish (a human approves first)."""
    return f"published {text}"


def answer(request: ModelRequest) -> ScriptedResponse:
    if request.step == 1:
        return ScriptedResponse.tool_calls("r1", ToolCall("c1", "add", {"left": 20, "right": 22}))
    return ScriptedResponse.text("r2", "20 + 22 = 42.")


def publishing(request: ModelRequest) -> ScriptedResponse:
    if request.step == 1:
        return ScriptedResponse.tool_calls("r1", ToolCall("c1", "publish", {"text": "hi"}))
    return ScriptedResponse.text("r2", "Done.")


@pytest.fixture
def db(tmp_path: Path) -> Path:
    """A store with two finished sessions (``ticket-42`` written beside a log file,
    ``beside.jsonl``, in the same run) and a parked, answered one."""
    path = tmp_path / "sessions.db"
    with SQLiteStore(path) as store, LogWriter(tmp_path / "beside.jsonl") as writer:
        for name, question in (("ticket-42", "20 + 22?"), ("ticket-43", "And again?")):
            replay.run_durable(
                store,
                name,
                [UserMessage("u1", question)],
                model=FunctionModel(answer),
                tools=[add],
                on_event=writer.write if name == "ticket-42" else None,
            )
        replay.run_durable(
            store,
            "case-9",
            [UserMessage("u1", "Publish hi")],
            model=FunctionModel(publishing),
            tools=[publish],
        )
        replay.answer(store, "case-9", Resume({"approved": True}))
    return path


def run_cli(capsys: pytest.CaptureFixture[str], *args: Any) -> tuple[int, str, str]:
    code = main([str(arg) for arg in args])
    out, err = capsys.readouterr()
    return code, out, err


def error_of(capsys: pytest.CaptureFixture[str], *args: Any, code: int = 2) -> str:
    got, out, err = run_cli(capsys, *args)
    assert got == code, (out, err)
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("replay: error: "), err
    return lines[0].removeprefix("replay: error: ")


# --------------------------------------------------------------------------- sessions


def test_sessions_lists_id_status_steps_events_updated(db, capsys):
    code, out, _ = run_cli(capsys, "sessions", db)
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split() == ["ID", "STATUS", "STEPS", "EVENTS", "UPDATED"]
    rows = [line.split() for line in lines[1:]]
    assert [row[:4] for row in rows] == [
        ["ticket-42", "completed", "2", "18"],
        ["ticket-43", "completed", "2", "18"],
        ["case-9", "paused", "(answered)", "1"],
    ]
    assert all(row[-1].endswith("Z") for row in rows)

    code, out, _ = run_cli(capsys, "sessions", db, "--status", "paused", "--json")
    report = json.loads(out)
    assert code == 0 and report["path"] == str(db)
    [row] = report["sessions"]
    assert (row["id"], row["status"], row["steps"], row["answered"]) == (
        "case-9",
        "paused",
        1,
        True,
    )
    assert set(row) >= {"events", "created", "updated", "lease_owner", "lease_expires"}


def test_sessions_of_an_empty_store_and_odd_times(tmp_path, capsys):
    path = tmp_path / "empty.db"
    SQLiteStore(path).close()
    assert run_cli(capsys, "sessions", path)[1] == "(no sessions)\n"
    with SQLiteStore(path, clock=lambda: 1e300) as store:  # a clock no calendar holds
        replay.run_durable(
            store, "\x1bodd", [UserMessage("u1", "q")], model=FunctionModel(answer), tools=[add]
        )
    code, out, _ = run_cli(capsys, "sessions", path)
    assert code == 0
    assert "\\x1bodd" in out and "\x1b" not in out and "1e+300" in out


def test_sessions_and_export_refuse_what_is_not_a_store(tmp_path, db, capsys):
    log = tmp_path / "beside.jsonl"
    for command in (["sessions", log], ["export", log, "--session", "x", "-o", tmp_path / "o"]):
        message = error_of(capsys, *command)
        assert message.startswith(f"{log}: not a session store (no SQLite header)")
    assert (
        error_of(capsys, "sessions", tmp_path / "nope.db")
        == f"{tmp_path / 'nope.db'}: no such file"
    )


def test_a_store_is_recognized_by_content_not_by_name(tmp_path, db, capsys):
    renamed = tmp_path / "sessions.jsonl"
    renamed.write_bytes(db.read_bytes())
    code, out, _ = run_cli(capsys, "check", renamed, "--session", "ticket-42")
    assert code == 0 and "ok, 18 events replayed" in out


# --------------------------------------------------------------------------- export


def test_export_writes_what_logwriter_wrote_in_the_same_run(tmp_path, db, capsys):
    out_file = tmp_path / "exported.jsonl"
    code, out, _ = run_cli(capsys, "export", db, "--session", "ticket-42", "-o", out_file)
    assert code == 0
    assert out == f"{out_file}: 18 events of session 'ticket-42' ({db})\n"
    assert out_file.read_bytes() == (tmp_path / "beside.jsonl").read_bytes()
    done = cli("verify", out_file)  # as a user would: a separate process
    assert done.returncode == 0, done
    assert "verified: log format 3, 18 events, hash chain intact" in done.stdout


def test_export_errors(tmp_path, db, capsys):
    message = error_of(capsys, "export", db, "--session", "ticket-44", "-o", tmp_path / "x")
    assert (
        message == f"{db}: no session 'ticket-44' in the store; closest: 'ticket-43', 'ticket-42'"
    )
    target = tmp_path / "no" / "such" / "dir" / "x.jsonl"
    message = error_of(capsys, "export", db, "--session", "ticket-42", "-o", target)
    assert message.startswith(f"{target}: cannot write: ")
    damage(db, "ticket-42", 3)
    message = error_of(capsys, "export", db, "--session", "ticket-42", "-o", tmp_path / "x")
    assert "session 'ticket-42', event #3" in message
    assert "--session" in error_of(capsys, "export", db, "-o", tmp_path / "x")  # required
    assert "exit codes:" in cli("export", "--help").stdout


def damage(db: Path, session: str, sequence: int) -> None:
    """Edit one stored event behind the store's back."""
    with sqlite3.connect(db) as connection:
        connection.execute(
            "UPDATE events SET event = replace(event, '\"step\":1', '\"step\":7') "
            "WHERE event_key >> 32 = (SELECT number FROM sessions WHERE id = ?) AND sequence = ?",
            (session, sequence),
        )
    connection.close()


# --------------------------------------------------------------------------- reading a session


def test_show_check_stats_verify_read_a_session(db, capsys):
    code, out, _ = run_cli(capsys, "show", db, "--session", "ticket-42", "--no-color")
    assert code == 0 and len(out.splitlines()) == 18 and "run.finished" in out

    code, out, _ = run_cli(capsys, "check", db, "--session", "case-9")
    assert code == 0
    assert out == f"{db}, session 'case-9': ok, 7 events replayed; unfinished (waits for a Pause)\n"
    code, out, _ = run_cli(capsys, "check", db, "--session", "ticket-42", "--json")
    report = json.loads(out)
    assert (code, report["path"], report["session"], report["ok"]) == (
        0,
        str(db),
        "ticket-42",
        True,
    )

    code, out, _ = run_cli(capsys, "stats", db, "--session", "ticket-42")
    assert code == 0 and out.startswith(f"log           {db}, session 'ticket-42'\n")
    assert (
        json.loads(run_cli(capsys, "stats", db, "--session", "ticket-42", "--json")[1])["steps"]
        == 2
    )

    code, out, _ = run_cli(capsys, "verify", db, "--session", "ticket-42", "--json")
    report = json.loads(out)
    assert code == 0
    assert (report["ok"], report["chain"], report["complete"], report["events"]) == (
        True,
        "intact",
        True,
        18,
    )
    assert (report["path"], report["session"]) == (str(db), "ticket-42")
    code, out, _ = run_cli(capsys, "verify", db, "--session", "case-9")
    assert code == 0 and "unfinished (ends at #6 session.pause)" in out


def test_a_damaged_session_does_not_verify_or_read(db, capsys):
    damage(db, "ticket-43", 5)
    code, out, _ = run_cli(capsys, "verify", db, "--session", "ticket-43")
    assert code == 1
    assert out.startswith(f"{db}, session 'ticket-43': NOT verified: ")
    assert "event #5" in out
    code, out, _ = run_cli(capsys, "verify", db, "--session", "ticket-43", "--json")
    report = json.loads(out)
    assert (code, report["ok"], report["chain"]) == (1, False, "broken")
    assert "event #5" in report["problem"]["message"]
    assert "event #5" in error_of(capsys, "check", db, "--session", "ticket-43")
    assert run_cli(capsys, "verify", db, "--session", "ticket-42")[0] == 0  # the others are fine


def test_diff_two_sessions_a_session_and_a_file(tmp_path, db, capsys):
    beside = tmp_path / "beside.jsonl"
    code, out, _ = run_cli(capsys, "diff", db, beside, "--session", "ticket-42")
    assert (code, out) == (0, "logs are identical (18 events)\n")
    code, out, _ = run_cli(capsys, "diff", beside, db, "--session", "ticket-42", "--json")
    report = json.loads(out)
    assert (code, report["identical"], report["sessions"]) == (
        0,
        True,
        {"a": None, "b": "ticket-42"},
    )
    code, out, _ = run_cli(capsys, "diff", db, "--session", "ticket-42", "--session", "ticket-43")
    assert code == 1 and out.startswith("logs differ at event #")
    other = tmp_path / "other.db"
    other.write_bytes(db.read_bytes())
    code, out, _ = run_cli(
        capsys, "diff", db, other, "--session", "ticket-42", "--session", "ticket-42"
    )
    assert (code, out) == (0, "logs are identical (18 events)\n")


def test_diff_says_how_to_name_sessions(tmp_path, db, capsys):
    beside = tmp_path / "beside.jsonl"
    assert error_of(capsys, "diff", db, beside).startswith(
        f"diff: A and B include the store(s) {db}; give one --session ID per store"
    )
    assert "(0 given)" in error_of(capsys, "diff", db, beside)
    assert "no store; give one --session" in error_of(
        capsys, "diff", beside, beside, "--session", "x"
    )
    assert error_of(capsys, "diff", db, "--session", "ticket-42").startswith(
        "diff compares two logs: A B, or two sessions of one store"
    )
    assert error_of(capsys, "diff", beside).startswith("diff compares two logs")


# --------------------------------------------------------------------------- errors


def test_a_store_without_session_names_how_to_list_them(db, capsys):
    for command in ("show", "check", "stats", "verify"):
        assert error_of(capsys, command, db) == (
            f"{db} is a session store (3 sessions): name one with --session ID "
            f"(python -m replay sessions {db} lists them)"
        )


def test_no_such_session_lists_the_closest_ids(tmp_path, db, capsys):
    assert error_of(capsys, "show", db, "--session", "tikcet-42") == (
        f"{db}: no session 'tikcet-42' in the store; closest: 'ticket-42', 'ticket-43'"
    )
    assert error_of(capsys, "verify", db, "--session", "case9") == (
        f"{db}: no session 'case9' in the store; closest: 'case-9'"
    )
    assert error_of(capsys, "stats", db, "--session", "zzz") == (
        f"{db}: no session 'zzz' in the store; its sessions: 'ticket-42', 'ticket-43', 'case-9'"
    )
    many = tmp_path / "many.db"
    with SQLiteStore(many) as store:
        for n in range(7):
            replay.run_durable(
                store,
                f"s{n}",
                [UserMessage("u1", "q")],
                model=FunctionModel(answer),
                tools=[add],
            )
    assert error_of(capsys, "check", many, "--session", "zzz") == (
        f"{many}: no session 'zzz' in the store; its sessions: 's0', 's1', 's2', 's3', 's4', "
        "... (7 in all)"
    )
    empty = tmp_path / "empty.db"
    SQLiteStore(empty).close()
    assert error_of(capsys, "check", empty, "--session", "x") == (
        f"{empty}: no session 'x' in the store; the store holds no sessions"
    )


def test_session_of_a_log_file_and_a_file_that_is_neither(tmp_path, db, capsys):
    beside = tmp_path / "beside.jsonl"
    for command in ("show", "verify"):
        assert error_of(capsys, command, beside, "--session", "x").startswith(
            f"{beside} is not a session store (no SQLite header): --session 'x'"
        )
    missing = tmp_path / "missing.db"
    assert "cannot read" in error_of(capsys, "check", missing, "--session", "x")
    text = tmp_path / "notes.txt"
    text.write_text("hello\n")
    assert error_of(capsys, "check", text).endswith(
        "not an agentloop log (line 1 is not an "
        '{"format": "agentloop-log", ...} header); nor a session store (a store is an SQLite file)'
    )


def test_other_databases_and_newer_stores_are_refused(tmp_path, db, capsys):
    other = tmp_path / "other.sqlite"
    with sqlite3.connect(other) as connection:
        connection.execute("CREATE TABLE things (x)")
    connection.close()
    assert "not an agentloop store" in error_of(capsys, "sessions", other)
    assert "not an agentloop store" in error_of(capsys, "show", other, "--session", "x")

    with sqlite3.connect(db) as connection:
        connection.execute("UPDATE sessions SET log_format = 99 WHERE id = 'ticket-43'")
    connection.close()
    for command in ("check", "verify"):
        message = error_of(capsys, command, db, "--session", "ticket-43")
        assert "is stored in log format version 99, newer than this agentloop" in message

    with sqlite3.connect(db) as connection:
        connection.execute("INSERT INTO schema_version VALUES (99, 0, 'future')")
    connection.close()
    message = error_of(capsys, "sessions", db)
    assert message.startswith(f"{db}: the store's schema version 99 is newer than this agentloop")
    assert message.endswith("upgrade agentloop")


def test_help_lists_the_store_commands_and_exit_codes():
    done = cli("--help")
    assert done.returncode == 0
    assert "sessions" in done.stdout and "export" in done.stdout
    assert "a store\n     or session that cannot be read" in done.stdout
    assert "--session ID" in cli("check", "--help").stdout
