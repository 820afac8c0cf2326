"""``python -m replay view`` of a session tree (DESIGN §26): one page, each child
session's events after its parent's, nested under the call that ran it (the page
without a browser; ``test_view_browser.py`` opens it in Chromium)."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest

import replay
from agentloop import FunctionModel, ToolCallEvent, UserMessage
from replay import SQLiteStore, read_log
from replay.__main__ import main
from replay._view import Session, render_html

from .helpers import Ticker
from .test_view import TEMPLATE_TAGS, Page, as_json
from .view_logs import HOSTILE, SPOOF_CHILD, delegating, tree_on_disk, tree_tools

CALLS = (("c1", "searcher"), ("c2", "editor"))


def sessions(page: str) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = Page(page).data()["sessions"]
    return found


def test_a_tree_on_disk_is_one_page(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    files = tree_on_disk(path, *CALLS)
    assert [Path(f).name for f in files] == [
        "run.jsonl",
        "run.c1.jsonl",
        "run.c2.jsonl",
        "run.c2.g1.jsonl",
    ]
    page = replay.view_html(path)
    data = Page(page).data()
    logs = [read_log(f) for f in files]
    # Every session's events, depth first: the parent, c1, c2, then c2's child g1.
    assert data["events"] == [as_json(e) for log in logs for e in log]
    found = data["sessions"]
    assert [(s["source"], s["call_id"], s["parent"]) for s in found] == [
        (str(path), None, None),
        (files[1], "c1", 0),
        (files[2], "c2", 0),
        (files[3], "g1", 2),
    ]
    starts = [0, *(sum(map(len, logs[: n + 1])) for n in range(len(logs)))]
    assert [(s["start"], s["end"]) for s in found] == list(itertools.pairwise(starts))
    # Each child's call is the tool.call event of its parent that ran it.
    events = [e for log in logs for e in log]
    for s in found[1:]:
        call = events[s["call"]]
        assert type(call) is ToolCallEvent and call.call.id == s["call_id"]
        parent = found[s["parent"]]
        assert parent["start"] <= s["call"] < parent["end"]
    # tree=False, or events (not a path): the one session.
    assert len(sessions(replay.view_html(path, tree=False))) == 1
    assert len(sessions(replay.view_html(logs[0]))) == 1
    out = tmp_path / "flat.html"
    replay.view(path, out, tree=False)
    assert len(sessions(out.read_text(encoding="utf-8"))) == 1


def test_the_command_nests_the_tree_and_no_tree_keeps_to_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "run.jsonl"
    tree_on_disk(path, *CALLS)
    assert main(["view", str(path)]) == 0
    assert "wrote" in capsys.readouterr().out
    page = (tmp_path / "run.html").read_text(encoding="utf-8")
    assert page == replay.view_html(path)
    assert main(["view", str(path), "--no-tree", "-o", str(tmp_path / "flat.html")]) == 0
    flat = (tmp_path / "flat.html").read_text(encoding="utf-8")
    assert len(sessions(flat)) == 1
    # --check replays the parent: its report is the same, the children nested or not.
    assert main(["view", str(path), "--check", "-o", "-"]) == 0
    assert len(sessions(capsys.readouterr().out)) == 4


def test_an_unreadable_child_log_is_an_error_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "run.jsonl"
    tree_on_disk(path, *CALLS)
    (tmp_path / "run.c2.g1.jsonl").write_text("not a log\n")
    assert main(["view", str(path), "-o", str(tmp_path / "x.html")]) == 2
    assert "run.c2.g1.jsonl" in capsys.readouterr().err
    assert not (tmp_path / "x.html").exists()
    assert main(["view", str(path), "--no-tree", "-o", str(tmp_path / "x.html")]) == 0


def test_a_stores_tree(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "s.db"
    with SQLiteStore(db) as store:
        replay.run_durable(
            store,
            "research",
            [UserMessage("u1", "research cats")],
            model=FunctionModel(delegating(*CALLS)),
            tools=tree_tools(),
            clock=Ticker(),
        )
        logs = [store.events(s) for s in ("research", "research/c1", "research/c2")]
        logs.append(store.events("research/c2/g1"))
    out = tmp_path / "page.html"
    assert main(["view", str(db), "--session", "research", "-o", str(out)]) == 0
    data = Page(out.read_text(encoding="utf-8")).data()
    assert [s["source"] for s in data["sessions"]] == [
        f"{db}, session 'research'",
        "research/c1",
        "research/c2",
        "research/c2/g1",
    ]
    assert data["events"] == [as_json(e) for log in logs for e in log]
    assert main(["view", str(db), "--session", "research", "--no-tree", "-o", str(out)]) == 0
    assert len(sessions(out.read_text(encoding="utf-8"))) == 1
    capsys.readouterr()


def test_a_child_whose_call_is_not_in_its_parent_is_left_out(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    files = tree_on_disk(path, ("c1", "searcher"))
    parent, child = read_log(files[0]), read_log(files[1])
    page = render_html(parent, children=[Session("nope", "x.jsonl", child)])
    assert len(sessions(page)) == 1
    assert Page(page).data()["events"] == [as_json(e) for e in parent]


def test_hostile_children_stay_data(tmp_path: Path) -> None:
    """A child's events, its source (a call id the model made) and its own children
    are escaped as the parent's are: nothing can end the script element or reorder
    the page's source."""
    path = tmp_path / "run.jsonl"
    hostile_id = "c<1>\u202e&"
    files = tree_on_disk(
        path, (hostile_id, "searcher"), ("c2", "editor"), text=HOSTILE + SPOOF_CHILD
    )
    assert len(files) == 4
    text = replay.view_html(path)
    page = Page(text)
    assert page.tags == TEMPLATE_TAGS
    data_text = page.raw["script"][0]
    for raw in ("<", ">", "&", "\u2028", "\u2029", "\u202e"):  # (zero-width: the script)
        assert raw not in data_text
    assert HOSTILE not in text
    found = page.data()["sessions"]
    assert [s["call_id"] for s in found] == [None, hostile_id, "c2", "g1"]
    assert page.data()["events"] == [as_json(e) for f in files for e in read_log(f)]
