"""``python -m replay`` as a new user meets it: every argument explained, ``--help``
offering only what a command takes, ``view``/``otel`` on a session of a store, and a
torn log met with the command that repairs it."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from replay import SQLiteStore, read_log
from replay.__main__ import COMMANDS, _parser, main

from .test_replay_cli_store import db, error_of, run_cli  # noqa: F401 - db is a fixture

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"


def subparsers() -> dict[str, argparse.ArgumentParser]:
    action = next(a for a in _parser()._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


# --------------------------------------------------------------------------- help


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_every_argument_has_help(name: str) -> None:
    parser = subparsers()[name]
    for action in parser._actions:
        assert action.help, f"{name}: {action.dest} has no help"


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_help_offers_json_exactly_where_the_command_takes_it(name: str) -> None:
    parser = subparsers()[name]
    takes = any("--json" in action.option_strings for action in parser._actions)
    assert ("--json" in parser.format_help()) == takes


def test_show_help_explains_color(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["show", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--color color the event types (default: when stdout is a terminal" in text
    assert "--no-color never color" in text
    assert "log the log file (or a session store, with --session ID)" in text
    assert "--json" not in text


# --------------------------------------------------------------------------- view, otel on a store


def test_view_and_otel_read_a_session_of_a_store(db, capsys):  # noqa: F811
    with SQLiteStore(db) as store:
        events = store.events("ticket-42")
    code, out, _ = run_cli(capsys, "view", db, "--session", "ticket-42")
    page = db.parent / "sessions.ticket-42.html"
    assert code == 0 and out.startswith(f"wrote {page} ({len(events)} events")
    text = page.read_text(encoding="utf-8")
    assert f"{db}, session 'ticket-42'" in text
    code, out, _ = run_cli(capsys, "view", db, "--session", "a/b", "-o", "-")
    assert code == 2

    from agentloop.otel import otlp_json

    code, out, err = run_cli(capsys, "otel", db, "--session", "ticket-42")
    assert (code, err) == (0, "")
    assert json.loads(out) == json.loads(otlp_json(events))


@pytest.mark.parametrize("command", ["view", "otel"])
def test_a_store_without_session_says_how_to_name_one(db, capsys, command):  # noqa: F811
    assert error_of(capsys, command, db) == (
        f"{db} is a session store (3 sessions): name one with --session ID "
        f"(python -m replay sessions {db} lists them)"
    )
    assert "no session 'nope'" in error_of(capsys, command, db, "--session", "nope")


def test_a_session_of_a_log_file_is_refused(capsys):
    log = FIXTURES / "plain_answer.jsonl"
    for command in ("view", "otel"):
        assert "is not a session store" in error_of(capsys, command, log, "--session", "x")


# --------------------------------------------------------------------------- torn logs


def test_a_torn_log_names_the_command_that_repairs_it(tmp_path, capsys):
    torn = tmp_path / "torn log.jsonl"
    whole = (FIXTURES / "plain_answer.jsonl").read_bytes()
    torn.write_bytes(whole[:-30])
    for command in ("check", "stats", "show"):
        message = error_of(capsys, command, torn)
        assert "TornLogError" not in message
        assert message.endswith(
            f"python -m replay repair '{torn}' keeps them and drops the torn line"
        )
    code, out, err = run_cli(capsys, "repair", torn)
    assert (code, err) == (0, "")
    assert out == f"{torn}: dropped the torn line 12; kept the 10 events before it\n"
    assert read_log(torn) == read_log(FIXTURES / "plain_answer.jsonl")[:10]
    code, out, err = run_cli(capsys, "check", torn)  # readable again (cut mid-step)
    assert code == 1 and out.startswith(f"{torn}: DIVERGED") and err == ""
    code, out, _ = run_cli(capsys, "repair", torn)
    assert (code, out) == (0, f"{torn}: the log is whole; nothing to repair\n")


def test_repair_refuses_what_it_cannot_repair(tmp_path, db, capsys, monkeypatch):  # noqa: F811
    assert "is a session store, not a log file" in error_of(capsys, "repair", db)
    assert "not an agentloop log" in error_of(capsys, "repair", ROOT / "README.md")
    edited = tmp_path / "edited.jsonl"
    lines = (FIXTURES / "plain_answer.jsonl").read_bytes().split(b"\n")
    lines[3] = lines[3].replace(b'"at":', b'"at": ')
    edited.write_bytes(b"\n".join(lines))
    before = edited.read_bytes()
    error_of(capsys, "repair", edited)
    assert edited.read_bytes() == before  # never rewritten
    torn = tmp_path / "torn.jsonl"
    torn.write_bytes((FIXTURES / "plain_answer.jsonl").read_bytes()[:-30])

    def full(path: object, events: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("replay.__main__.write_log", full)
    assert error_of(capsys, "repair", torn) == f"{torn}: cannot write: No space left on device"
