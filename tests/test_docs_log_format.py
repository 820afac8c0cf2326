"""``docs/log-format.md`` tells the truth: its example is a real log, its code runs,
its JSON shapes are what ``python -m replay --json`` prints."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import msgspec
import pytest

import replay.__main__ as cli
from agentloop import FunctionModel, RunFinishedEvent, ScriptedResponse, UserMessage
from replay import SQLiteStore, read_log, run_durable, write_log

ROOT = Path(__file__).resolve().parent.parent
PAGE = (ROOT / "docs" / "log-format.md").read_text(encoding="utf-8")
FENCE = re.compile(r"^```(\w*)\n(.*?)^```\n", re.MULTILINE | re.DOTALL)
BLOCKS = FENCE.findall(PAGE)


def _blocks(language: str) -> list[str]:
    return [body for found, body in BLOCKS if found == language]


def test_the_example_is_the_fixture() -> None:
    (example,) = _blocks("jsonl")
    assert example == (ROOT / "fixtures" / "plain_answer.jsonl").read_text(encoding="utf-8")


def test_the_commands_are_the_cli_s() -> None:
    (commands,) = _blocks("text")
    assert cli.__doc__ is not None
    for line in commands.splitlines():
        assert line in cli.__doc__
    assert {
        line.split()[3]
        for line in commands.splitlines()
        if "LOG" in line or "A B" in line or "DB" in line
    } == (set(cli.COMMANDS))


def _shape(value: Any) -> Any:
    """The keys of a JSON value, all the way down (lists by their first item)."""
    if isinstance(value, dict):
        return {key: _shape(item) for key, item in value.items()}
    if isinstance(value, list) and value and isinstance(value[0], dict):
        return [_shape(value[0])]
    return None


def _run(capsys: pytest.CaptureFixture[str], *args: str | Path) -> Any:
    cli.main([str(a) for a in args])
    return json.loads(capsys.readouterr().out)


def test_the_json_shapes_are_what_the_cli_prints(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fixtures = ROOT / "fixtures"
    events = read_log(fixtures / "tool_calls.jsonl")
    last = events[-1]
    assert type(last) is RunFinishedEvent
    tampered = tmp_path / "tampered.jsonl"
    write_log(tampered, [*events[:-1], msgspec.structs.replace(last, final_text="It is sunny.")])
    printed = [
        _run(capsys, "check", "--json", tampered),
        _run(capsys, "diff", "--json", fixtures / "tool_calls.jsonl", tampered),
        _run(capsys, "stats", "--json", fixtures / "tool_calls.jsonl"),
        _run(capsys, "verify", "--json", fixtures / "tool_calls.jsonl"),
        _run(capsys, "sessions", "--json", _store(tmp_path / "s.db")),
        _run(capsys, "check", "--json", tmp_path / "x.jsonl"),
    ]
    documented = [json.loads(block) for block in _blocks("json")]
    assert [_shape(d) for d in documented] == [_shape(p) for p in printed]
    # The stats and verify examples are that fixture's, exactly.
    assert documented[2] == printed[2]
    assert documented[3] == {**printed[3], "path": "s.jsonl"}
    assert os.path.basename(printed[5]["error"]["path"]) == "x.jsonl"


def _store(path: Path) -> Path:
    """A store with one finished session."""
    with SQLiteStore(path) as store:
        model = FunctionModel(lambda request: ScriptedResponse.text("r1", "Hi."))
        run_durable(store, "ticket-42", [UserMessage("u1", "Hello?")], model=model, tools=[])
    return path
