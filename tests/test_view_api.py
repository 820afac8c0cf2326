"""The Python API of the viewer (``replay.view``, ``replay.view_html``) and
``LogWriter(overwrite=True)``."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

import replay
from replay import LogWriter, read_log, write_log

ROOT = Path(__file__).resolve().parent.parent
LOG = ROOT / "fixtures" / "tool_calls.jsonl"


def data(page: str) -> dict[str, object]:
    found = re.search(r'id="agentloop-data"[^>]*>(.*?)</script>', page, re.DOTALL)
    assert found is not None
    value: dict[str, object] = json.loads(found.group(1))
    return value


def test_view_html_of_events_and_of_a_path_is_the_cli_s_page(tmp_path: Path) -> None:
    events = read_log(LOG)
    by_path = replay.view_html(LOG)
    assert by_path == replay.view_html(events, source=str(LOG))
    page = tmp_path / "cli.html"
    from replay.__main__ import main

    assert main(["view", str(LOG), "-o", str(page)]) == 0
    assert page.read_text(encoding="utf-8") == by_path
    checked = data(replay.view_html(events, check=True))
    assert checked["report"]["ok"] is True  # type: ignore[index]
    differ = data(replay.view_html(events, diff=events[:5]))
    assert differ["report"]["title"] == "The logs agree on their first 5 events"  # type: ignore[index]


def test_view_writes_the_page(tmp_path: Path) -> None:
    log = tmp_path / "run.jsonl"
    write_log(log, read_log(LOG))
    assert replay.view(log) == str(tmp_path / "run.html")
    assert (tmp_path / "run.html").read_text(encoding="utf-8").startswith("<!DOCTYPE html>")
    out = tmp_path / "events.html"
    assert replay.view(read_log(LOG), out, check=True) == str(out)
    with pytest.raises(ValueError, match="that is a log, not overwritten"):
        replay.view(log, log)
    assert read_log(log) == read_log(LOG)


def test_view_refuses_what_it_cannot_show(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match="needs output="):
        replay.view(read_log(LOG))
    with pytest.raises(TypeError, match="item 1 is not an agentloop event"):
        replay.view_html([read_log(LOG)[0], "x"])  # type: ignore[list-item]
    with pytest.raises(TypeError, match="got bytes"):
        replay.view_html(bytes(LOG))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="exclusive"):
        replay.view_html(LOG, check=True, diff=LOG)
    with pytest.raises(replay.LogError):
        replay.view_html(ROOT / "README.md")


def test_logwriter_overwrite_starts_the_file_over(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    write_log(path, read_log(LOG))
    # Appends by default: the file holds a run.
    with pytest.raises(ValueError, match="continues at 22"), LogWriter(path) as writer:
        writer.write(read_log(LOG)[0])
    path.write_bytes(path.read_bytes()[:-5])  # torn: only overwrite opens it
    with pytest.raises(replay.TornLogError):
        LogWriter(path)
    events = read_log(ROOT / "fixtures" / "plain_answer.jsonl")
    with LogWriter(path, overwrite=True) as writer:
        for event in events:
            writer.write(event)
    assert read_log(path) == events
    with pytest.raises(TypeError, match="overwrite must be a bool"):
        LogWriter(path, overwrite="yes")  # type: ignore[arg-type]
