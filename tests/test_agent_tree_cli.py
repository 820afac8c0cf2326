"""``python -m replay show/check`` walk a session tree (DESIGN §26): a store's
children, or a log file's next to it (``replay.write_tree``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import agentloop as al
import replay
from agentloop import FunctionModel, ModelRequest, ScriptedResponse, ToolCall, UserMessage
from replay import SQLiteStore
from replay.__main__ import main

from .helpers import Ticker

R = ScriptedResponse
TASK = [UserMessage("u1", "research cats")]


@al.tool
def search(query: str) -> str:
    """Search the web."""
    return f"results for {query}"


def searching(request: ModelRequest) -> R:
    if request.step == 1:
        return R.tool_calls("s1", ToolCall("k1", "search", {"query": "cats"}))
    return R.text("s2", "cats purr")


def delegating(*calls: tuple[str, str]) -> Any:
    def fn(request: ModelRequest) -> R:
        if request.step == 1:
            return R.tool_calls("p1", *(ToolCall(cid, name, {"task": "go"}) for cid, name in calls))
        return R.text("p2", "all done")

    return fn


def tools() -> list[al.AgentTool]:
    searcher = al.agent_tool(
        "searcher", "Searches.", model=FunctionModel(searching), tools=[search]
    )
    editor = al.agent_tool(
        "editor",
        "Edits.",
        model=FunctionModel(delegating(("g1", "searcher"))),
        tools=[searcher],
    )
    return [searcher, editor]


def tree_on_disk(tmp_path: Path, *calls: tuple[str, str]) -> Path:
    log = al.EventLog()
    agent_tools = tools()
    al.run(
        TASK,
        model=FunctionModel(delegating(*calls)),
        tools=agent_tools,
        log=log,
        clock=Ticker(),
    )
    path = tmp_path / "run.jsonl"
    written = replay.write_tree(path, log, agent_tools)
    assert written[0] == str(path)
    return path


def run_cli(capsys: pytest.CaptureFixture[str], *args: Any) -> tuple[int, str]:
    code = main([str(a) for a in args])
    return code, capsys.readouterr().out


def test_child_log_path_names_the_file_next_to_its_parent(tmp_path: Path) -> None:
    assert replay.child_log_path(tmp_path / "run.jsonl", "c1") == str(tmp_path / "run.c1.jsonl")
    assert replay.child_log_path("run.log", "c1") == "run.log.c1.jsonl"
    # A model-made call id names no other directory.
    hostile = replay.child_log_path(tmp_path / "run.jsonl", "../x/y")
    assert Path(hostile).parent == tmp_path
    assert Path(hostile).name == "run...%2Fx%2Fy.jsonl"


def test_write_tree_writes_each_child_next_to_its_parent(tmp_path: Path) -> None:
    path = tree_on_disk(tmp_path, ("c1", "searcher"), ("c2", "editor"))
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["run.c1.jsonl", "run.c2.g1.jsonl", "run.c2.jsonl", "run.jsonl"]
    grandchild = replay.read_log(tmp_path / "run.c2.g1.jsonl")
    assert grandchild[0].parent == al.ParentLink(session="root/c2", call_id="g1", depth=2)  # type: ignore[union-attr]
    for file in tmp_path.iterdir():
        events = replay.read_log(file)
        assert replay.replay(events).result is not None
    del path


def test_show_nests_each_child_under_its_call(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tree_on_disk(tmp_path, ("c1", "searcher"), ("c2", "editor"))
    code, out = run_cli(capsys, "show", path, "--no-color")
    assert code == 0
    lines = out.splitlines()
    calls = [
        i for i, line in enumerate(lines) if "tool.call" in line and not line.startswith(" " * 6)
    ]
    first = lines.index(f"    child session {tmp_path / 'run.c1.jsonl'}")
    assert first == calls[0] + 1
    grandchild = lines.index(f"        child session {tmp_path / 'run.c2.g1.jsonl'}")
    assert lines[grandchild + 1].startswith(" " * 8 + "    0 ")
    assert "session.start" in lines[grandchild + 1]
    code, flat = run_cli(capsys, "show", path, "--no-color", "--no-tree")
    assert code == 0
    assert "child session" not in flat
    assert len(flat.splitlines()) < len(lines)


def test_check_walks_the_tree(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tree_on_disk(tmp_path, ("c1", "searcher"), ("c2", "editor"))
    code, out = run_cli(capsys, "check", path)
    assert code == 0
    assert len(out.splitlines()) == 4
    assert out.splitlines()[3].startswith(f"    {tmp_path / 'run.c2.g1.jsonl'}: ok")
    code, out = run_cli(capsys, "check", path, "--json")
    report = json.loads(out)
    assert report["ok"] is True
    assert [c["call_id"] for c in report["children"]] == ["c1", "c2"]
    assert report["children"][1]["children"][0]["path"] == str(tmp_path / "run.c2.g1.jsonl")
    # A child that does not replay fails the tree's check (not the parent's alone).
    child = tmp_path / "run.c2.g1.jsonl"
    events = replay.read_log(child)
    finished = events[-1]
    assert type(finished) is al.RunFinishedEvent
    replay.write_log(
        child,
        [
            *events[:-1],
            al.RunFinishedEvent(
                sequence=finished.sequence,
                at=finished.at,
                step=finished.step,
                status="cancelled",
                reason="tampered",
            ),
        ],
    )
    code, out = run_cli(capsys, "check", path)
    assert code == 1
    assert "run.c2.g1.jsonl: DIVERGED" in out
    code, out = run_cli(capsys, "check", path, "--no-tree")
    assert code == 0


def test_a_file_named_for_a_call_but_not_its_child_is_left_out(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tree_on_disk(tmp_path, ("c1", "searcher"), ("c2", "searcher"))
    # The two children's files swapped: each one's link names the other call.
    (tmp_path / "run.c1.jsonl").rename(tmp_path / "swap")
    (tmp_path / "run.c2.jsonl").rename(tmp_path / "run.c1.jsonl")
    (tmp_path / "swap").rename(tmp_path / "run.c2.jsonl")
    assert replay._tree.subtree(replay.read_log(path), path=path) == []
    code, out = run_cli(capsys, "show", path, "--no-color")
    assert code == 0
    assert "child session" not in out


def test_an_unreadable_child_file_is_an_error_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tree_on_disk(tmp_path, ("c1", "searcher"))
    (tmp_path / "run.c1.jsonl").write_text("not a log\n")
    code = main(["show", str(path), "--no-color"])
    assert code == 2
    assert "run.c1.jsonl" in capsys.readouterr().err


def test_show_and_check_walk_a_stores_tree(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "s.db"
    with SQLiteStore(db) as store:
        result = replay.run_durable(
            store,
            "research",
            TASK,
            model=FunctionModel(delegating(("c1", "searcher"), ("c2", "editor"))),
            tools=tools(),
            clock=Ticker(),
        )
        assert result.status == "completed"  # type: ignore[union-attr]
    code, out = run_cli(capsys, "show", db, "--session", "research", "--no-color")
    assert code == 0
    assert f"    child session {db}, session 'research/c1'" in out.splitlines()
    assert f"        child session {db}, session 'research/c2/g1'" in out.splitlines()
    code, out = run_cli(capsys, "check", db, "--session", "research", "--json")
    assert code == 0
    report = json.loads(out)
    assert [c["session"] for c in report["children"]] == ["research/c1", "research/c2"]
    assert report["children"][1]["children"][0]["session"] == "research/c2/g1"


def test_a_damaged_child_in_a_store_is_an_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "s.db"
    with SQLiteStore(db) as store:
        replay.run_durable(
            store,
            "research",
            TASK,
            model=FunctionModel(delegating(("c1", "searcher"))),
            tools=tools(),
        )
        store._db.execute(
            "DELETE FROM events WHERE sequence = 3 "
            "AND event_key >> 32 = (SELECT number FROM sessions WHERE id = 'research/c1')"
        )
    code = main(["show", str(db), "--session", "research", "--no-color"])
    assert code == 2
    assert "research/c1" in capsys.readouterr().err


class Crash(BaseException):
    """A crash inside the child: nothing answers its call."""


def test_a_tree_whose_child_crashed_is_written_and_shown(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def crashing(request: ModelRequest) -> R:
        raise Crash

    crasher = al.agent_tool("crasher", "Crashes.", model=FunctionModel(crashing), tools=[])

    def parent(request: ModelRequest) -> R:
        return R.tool_calls(
            "p1",
            ToolCall("k0", "search", {"query": "q"}),
            ToolCall("c1", "crasher", {"task": "go"}),
        )

    log = al.EventLog()
    with pytest.raises(Crash):
        al.run(TASK, model=FunctionModel(parent), tools=[search, crasher], log=log)
    path = tmp_path / "run.jsonl"
    events = [e for e in log if e.type not in ("run.finished", "tool.error")]  # the crash's end
    written = replay.write_tree(path, events, [search, crasher])
    assert written == [str(path), str(tmp_path / "run.c1.jsonl")]
    code, out = run_cli(capsys, "show", path, "--no-color")
    assert code == 0
    assert out.count("child session") == 1


def test_a_tree_without_children_is_one_file(tmp_path: Path) -> None:
    log = al.EventLog()
    al.run(TASK, model=FunctionModel(lambda r: R.text("r", "hi")), tools=tools(), log=log)
    assert replay.write_tree(tmp_path / "run.jsonl", log, tools()) == [str(tmp_path / "run.jsonl")]


def test_an_empty_file_named_for_a_call_is_no_child(tmp_path: Path) -> None:
    path = tree_on_disk(tmp_path, ("c1", "searcher"))
    replay.write_log(tmp_path / "run.c1.jsonl", [])
    assert replay._tree.subtree(replay.read_log(path), path=path) == []


# --------------------------------------------------------------------------- OTel


def test_otel_nests_each_child_invoke_agent_under_its_execute_tool(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("opentelemetry.sdk")
    path = tree_on_disk(tmp_path, ("c1", "searcher"), ("c2", "editor"))
    code, out = run_cli(capsys, "otel", path, "--agent-name", "research")
    assert code == 0
    (resource,) = json.loads(out)["resourceSpans"]
    spans = [span for scope in resource["scopeSpans"] for span in scope["spans"]]
    by_id = {span["spanId"]: span for span in spans}
    assert len({span["traceId"] for span in spans}) == 1  # one trace for the tree

    def parent_of(span: dict[str, Any]) -> dict[str, Any]:
        found: dict[str, Any] = by_id[span["parentSpanId"]]
        return found

    agents = [span for span in spans if span["name"].startswith("invoke_agent")]
    assert len(agents) == 4  # the root, c1, c2 and c2's g1
    root = next(span for span in agents if "parentSpanId" not in span)
    nested = [span for span in agents if span is not root]
    for span in nested:
        assert parent_of(span)["name"].startswith("execute_tool")
    calls = {
        next(
            a["value"]["stringValue"]
            for a in parent_of(span)["attributes"]
            if a["key"] == "gen_ai.tool.call.id"
        )
        for span in nested
    }
    assert calls == {"c1", "c2", "g1"}
    # g1's agent runs under c2's agent (under its execute_tool), not the root's.
    deeper = [span for span in nested if parent_of(parent_of(span)) is not root]
    assert len(deeper) == 1
    assert parent_of(parent_of(deeper[0])) in nested
    # The same tree gives the same bytes; --no-tree gives the root's spans only.
    assert run_cli(capsys, "otel", path, "--agent-name", "research")[1] == out
    code, flat = run_cli(capsys, "otel", path, "--no-tree")
    flat_spans = [
        s for sc in json.loads(flat)["resourceSpans"][0]["scopeSpans"] for s in sc["spans"]
    ]
    assert sum(s["name"].startswith("invoke_agent") for s in flat_spans) == 1


def test_otel_walks_a_stores_tree(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("opentelemetry.sdk")
    db = tmp_path / "s.db"
    with SQLiteStore(db) as store:
        replay.run_durable(
            store,
            "research",
            TASK,
            model=FunctionModel(delegating(("c1", "searcher"), ("k9", "nothing"))),
            tools=tools(),
            clock=Ticker(),
        )
    code, out = run_cli(capsys, "otel", db, "--session", "research")
    assert code == 0
    spans = [s for sc in json.loads(out)["resourceSpans"][0]["scopeSpans"] for s in sc["spans"]]
    assert sum(s["name"].startswith("invoke_agent") for s in spans) == 2


# --------------------------------------------------------------------------- verify


def test_verify_walks_a_files_tree(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tree_on_disk(tmp_path, ("c1", "searcher"), ("c2", "editor"))
    code, out = run_cli(capsys, "verify", path)
    assert code == 0
    lines = out.splitlines()
    assert len(lines) == 4
    assert lines[3].startswith(f"    {tmp_path / 'run.c2.g1.jsonl'}: verified")
    code, out = run_cli(capsys, "verify", path, "--json")
    report = json.loads(out)
    assert report["ok"] is True
    assert [c["call_id"] for c in report["children"]] == ["c1", "c2"]
    assert report["children"][1]["children"][0]["path"] == str(tmp_path / "run.c2.g1.jsonl")
    # A grandchild whose chain is broken fails the whole tree.
    grandchild = tmp_path / "run.c2.g1.jsonl"
    grandchild.write_text(grandchild.read_text().replace("cats purr", "dogs bark"))
    code, out = run_cli(capsys, "verify", path)
    assert code == 1
    assert "run.c2.g1.jsonl: NOT verified" in out
    assert run_cli(capsys, "verify", path, "--no-tree")[0] == 0


def test_verify_walks_a_stores_tree(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "s.db"
    with SQLiteStore(db) as store:
        replay.run_durable(
            store,
            "research",
            TASK,
            model=FunctionModel(delegating(("c1", "searcher"), ("c2", "editor"))),
            tools=tools(),
        )
    code, out = run_cli(capsys, "verify", db, "--session", "research", "--json")
    assert code == 0
    report = json.loads(out)
    assert [c["session"] for c in report["children"]] == ["research/c1", "research/c2"]
    assert report["children"][1]["children"][0]["session"] == "research/c2/g1"
    assert report["children"][1]["children"][0]["path"] == str(db)
