"""fixtures/make_fixtures.py: ``--check`` compares the fixtures' events, not their header."""

from __future__ import annotations

import importlib.util
import shutil
import sys
from pathlib import Path
from types import ModuleType

import pytest

SCRIPT = Path(__file__).resolve().parent.parent / "fixtures" / "make_fixtures.py"


@pytest.fixture
def make_fixtures(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """The script, writing to a copy of the fixtures in ``tmp_path``."""
    spec = importlib.util.spec_from_file_location("make_fixtures_under_test", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setattr(sys, "path", list(sys.path))  # the script inserts the root
    spec.loader.exec_module(module)
    for path in SCRIPT.parent.glob("*.jsonl"):
        shutil.copyfile(path, tmp_path / path.name)
    monkeypatch.setattr(module, "HERE", tmp_path)
    return module


def _set_library(path: Path, version: str) -> None:
    header, _, events = path.read_bytes().partition(b"\n")
    header = header.replace(b'"library":"', f'"library":"{version}'.encode() + b"-was-")
    path.write_bytes(header + b"\n" + events)


def test_check_ignores_the_library_version_in_the_header(
    make_fixtures: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert make_fixtures.main(["--check"]) == 0
    fixture = tmp_path / "plain_answer.jsonl"
    _set_library(fixture, "9.9.9")
    written = fixture.read_bytes()
    assert make_fixtures.main(["--check"]) == 0
    # Nor does a plain run rewrite a fixture whose events are the same.
    assert make_fixtures.main([]) == 0
    assert fixture.read_bytes() == written
    assert capsys.readouterr().out.splitlines()[-1].endswith("fixtures, 0 changed")


def test_check_fails_when_an_event_changes(
    make_fixtures: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fixture = tmp_path / "plain_answer.jsonl"
    fixture.write_bytes(fixture.read_bytes().replace(b"Paris", b"Lyon"))
    assert make_fixtures.main(["--check"]) == 1
    assert "fixtures out of date: plain_answer.jsonl" in capsys.readouterr().err
    assert make_fixtures.main([]) == 0
    assert fixture.read_bytes() == (SCRIPT.parent / "plain_answer.jsonl").read_bytes()
    (tmp_path / "tool_calls.jsonl").unlink()  # a missing fixture is written
    assert make_fixtures.main(["--check"]) == 1
