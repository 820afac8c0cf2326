"""Agents that call agents: ``agent_tool`` (DESIGN §26).

A child session per call, its log linked to its parent's; the parent's recorded
result carries the child's answer and its usage, so both logs replay alone.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import agentloop as al
import replay
from agentloop import (
    CancelToken,
    ChildRun,
    EventLog,
    FunctionModel,
    Limits,
    ModelRequest,
    ParentLink,
    Pause,
    Resume,
    ScriptedModel,
    ScriptedResponse,
    ToolCall,
    ToolResult,
    ToolResultMessage,
    Usage,
    UserMessage,
    decode_event,
    encode_event,
)
from agentloop._agent_tool import subtree_tool_calls
from tests.helpers import examples

from .helpers import Ticker

R = ScriptedResponse
TASK = [UserMessage("u1", "research cats")]


@al.tool
def search(query: str) -> str:
    """Search the web."""
    return f"results for {query}"


def searcher_model() -> ScriptedModel:
    return ScriptedModel(
        [
            R.tool_calls("s1", ToolCall("k1", "search", {"query": "cats"}), usage=Usage(3, 1)),
            R.text("s2", "cats purr", usage=Usage(5, 2)),
        ]
    )


def parent_model(*calls: ToolCall) -> ScriptedModel:
    return ScriptedModel(
        [R.tool_calls("p1", *calls, usage=Usage(10, 1)), R.text("p2", "done", usage=Usage(20, 2))]
    )


def searcher(**options: Any) -> al.AgentTool:
    return al.agent_tool("searcher", "Searches.", model=searcher_model(), tools=[search], **options)


def ask(call_id: str = "c1", task: str = "find cats", name: str = "searcher") -> ToolCall:
    return ToolCall(call_id, name, {"task": task})


def replays(log: EventLog) -> None:
    """The log, through JSON, replays byte for byte (no model, no tools)."""
    events = [decode_event(encode_event(event)) for event in log]
    regenerated = replay.replay(events).events
    assert [encode_event(e) for e in regenerated] == [encode_event(e) for e in log]


# --------------------------------------------------------------------------- the basics


def test_the_child_answers_the_call_and_both_logs_replay_alone() -> None:
    tool = searcher()
    log = EventLog()
    result = al.run(TASK, model=parent_model(ask()), tools=[tool], log=log, clock=Ticker())
    assert result.status == "completed"
    message = result.messages[2]
    assert type(message) is ToolResultMessage
    assert (message.content, message.is_error) == ("cats purr", False)
    reply = log[7].reply  # type: ignore[union-attr]
    assert reply.child == ChildRun(
        session="root/c1", status="completed", usage=Usage(8, 3), tool_calls=1
    )
    # The child's usage counts in the parent's, exactly.
    assert result.usage == Usage(10 + 20 + 3 + 5, 1 + 2 + 1 + 2)
    (child_id,) = tool.logs
    child = tool.logs[child_id]
    start = child[0]
    assert type(start) is al.SessionStartEvent
    assert start.parent == ParentLink(session="root", call_id="c1", depth=1)
    assert child[1].message == UserMessage("task", "find cats")  # type: ignore[union-attr]
    replays(log)  # no child model needed: the child's answer is a recorded reply
    replays(child)


def test_structured_output_answers_as_json() -> None:
    class Found(msgspec.Struct):
        animal: str
        count: int

    child_model = ScriptedModel([R.text("s1", '{"animal": "cat", "count": 3}')])
    tool = al.agent_tool("counter", "Counts.", model=child_model, tools=[], output=Found)
    result = al.run(TASK, model=parent_model(ask(name="counter")), tools=[tool])
    assert result.messages[2].content == '{"animal":"cat","count":3}'  # type: ignore[union-attr]


def test_a_failed_child_is_an_error_result_saying_how_it_ended() -> None:
    tool = al.agent_tool(
        "broken",
        "Fails.",
        model=FunctionModel(lambda request: al.ModelFailure("", "rate limited")),
        tools=[],
    )
    log = EventLog()
    result = al.run(TASK, model=parent_model(ask(name="broken")), tools=[tool], log=log)
    message = result.messages[2]
    assert message.is_error  # type: ignore[union-attr]
    assert message.content == (  # type: ignore[union-attr]
        "agent 'broken' (session 'root/c1') ended failed: "
        "MODEL_ERROR: step 1: model call failed: rate limited"
    )
    assert log[7].reply.child.status == "failed"  # type: ignore[union-attr]
    replays(log)


@pytest.mark.parametrize("asynchronous", [False, True])
def test_bad_arguments_start_no_child(asynchronous: bool) -> None:
    tool = searcher()
    model = parent_model(ToolCall("c1", "searcher", {"task": 3}))
    if asynchronous:
        result = asyncio.run(al.arun(TASK, model=model, tools=[tool]))
    else:
        result = al.run(TASK, model=model, tools=[tool])
    assert result.messages[2].content.startswith("invalid arguments:")  # type: ignore[union-attr]
    assert tool.logs == {}


def test_outside_a_driver_the_tool_runs_as_a_roots_child() -> None:
    tool = searcher()
    assert tool.execute(ask()) == ("cats purr", False)
    assert list(tool.logs) == ["root/c1"]
    assert repr(tool) == "<AgentTool 'searcher'>"
    assert searcher()("find cats") == "cats purr"
    assert not tool.is_async


def test_agent_tool_checks_its_options_now() -> None:
    with pytest.raises(TypeError, match="model must have stream"):
        al.agent_tool("x", "y", model=object(), tools=[])
    with pytest.raises(ValueError, match="max_steps"):
        al.agent_tool("x", "y", model=searcher_model(), tools=[], max_steps=0)


# --------------------------------------------------------------------------- depth


def test_a_recursive_agent_stops_at_the_depth_bound() -> None:
    def model_fn(request: ModelRequest) -> Any:
        last = request.messages[-1]
        if type(last) is ToolResultMessage:
            return f"saw: {last.content}"
        return R.tool_calls(f"r{request.step}", ToolCall("again", "deeper", {"task": "go"}))

    tool = al.agent_tool("deeper", "Recurses.", model=FunctionModel(model_fn), tools=[])
    tool.tools.register(tool)  # the child may call the very tool that started it
    log = EventLog()
    result = al.run(TASK, model=FunctionModel(model_fn), tools=[tool], log=log, clock=Ticker())
    assert list(tool.logs) == [
        "root/again",
        "root/again/again",
        "root/again/again/again",
        "root/again/again/again/again",
    ]
    deepest = tool.logs["root/again/again/again/again"]
    assert deepest[-1].final_text == (  # type: ignore[union-attr]
        "saw: agent 'deeper' not started: it would run 5 agents deep, past "
        "Limits.agent_depth (4) of session 'root/again/again/again/again'"
    )
    assert result.status == "completed"
    for child in tool.logs.values():
        replays(child)
    replays(log)


def test_the_depth_bound_is_the_calling_runs_limit() -> None:
    tool = searcher()
    result = al.run(TASK, model=parent_model(ask()), tools=[tool], limits=Limits(agent_depth=1))
    assert result.messages[2].content == "cats purr"  # type: ignore[union-attr]
    with pytest.raises(ValueError, match=r"Limits.agent_depth must be an int from 1 to 64"):
        Limits(agent_depth=65)


# --------------------------------------------------------------------------- pauses


def recording(into: list[Any], what: Callable[[Pause], Any]) -> Callable[[Pause], Resume]:
    """An ``on_pause`` that approves every pause and keeps ``what(pause)``."""

    def on_pause(pause: Pause) -> Resume:
        into.append(what(pause))
        return Resume({"approved": True})

    return on_pause


@al.tool(requires_approval=True)
def publish(text: str) -> str:
    """Publish the text."""
    return f"published {text}"


def writer(model_answer: str = "written") -> al.AgentTool:
    model = ScriptedModel(
        [
            R.tool_calls("w1", ToolCall("pub", "publish", {"text": "cats"}), usage=Usage(2, 2)),
            R.text("w2", model_answer, usage=Usage(1, 1)),
        ]
    )
    return al.agent_tool("writer", "Writes.", model=model, tools=[publish])


def test_a_pause_in_the_child_reaches_the_parents_on_pause_with_its_path() -> None:
    seen: list[Pause] = []

    def on_pause(pause: Pause) -> Resume:
        seen.append(pause)
        return Resume({"approved": True})

    tool = writer()
    log = EventLog()
    result = al.run(
        TASK, model=parent_model(ask(name="writer")), tools=[tool], log=log, on_pause=on_pause
    )
    assert [(p.reason, p.path) for p in seen] == [("approval", ("root/c1",))]
    assert result.messages[2].content == "written"  # type: ignore[union-attr]
    child = tool.logs["root/c1"]
    assert any(type(e) is al.SessionResumeEvent for e in child)
    replays(log)
    replays(child)


def test_a_grandchilds_pause_names_both_children() -> None:
    seen: list[tuple[str, ...]] = []
    inner = writer()
    middle = al.agent_tool(
        "middle",
        "Delegates.",
        model=ScriptedModel([R.tool_calls("m1", ask("d1", name="writer")), R.text("m2", "ok")]),
        tools=[inner],
    )
    result = al.run(
        TASK,
        model=parent_model(ask(name="middle")),
        tools=[middle],
        on_pause=recording(seen, lambda pause: pause.path),
    )
    assert seen == [("root/c1", "root/c1/d1")]
    assert result.status == "completed"


def test_without_on_pause_a_pause_cancels_the_child_and_the_parent_reads_why() -> None:
    tool = writer()
    result = al.run(TASK, model=parent_model(ask(name="writer")), tools=[tool])
    message = result.messages[2]
    assert message.is_error  # type: ignore[union-attr]
    assert message.content.startswith(  # type: ignore[union-attr]
        "agent 'writer' (session 'root/c1') ended cancelled: approval"
    )
    assert result.status == "completed"


def test_an_async_parent_relays_to_an_async_on_pause() -> None:
    seen: list[tuple[str, ...]] = []

    async def on_pause(pause: Pause) -> Resume:
        seen.append(pause.path)
        return Resume({"approved": True})

    result = asyncio.run(
        al.arun(TASK, model=parent_model(ask(name="writer")), tools=[writer()], on_pause=on_pause)
    )
    assert seen == [("root/c1",)]
    assert result.messages[2].content == "written"  # type: ignore[union-attr]


def test_an_async_parent_relays_to_a_plain_on_pause() -> None:
    result = asyncio.run(
        al.arun(
            TASK,
            model=parent_model(ask(name="writer")),
            tools=[writer()],
            on_pause=lambda pause: Resume({"approved": True}),
        )
    )
    assert result.messages[2].content == "written"  # type: ignore[union-attr]


# --------------------------------------------------------------------------- budgets, cancels


def test_the_childs_tool_calls_count_in_the_parents_tool_budget() -> None:
    pauses: list[str] = []
    model = ScriptedModel(
        [
            R.tool_calls("p1", ask("c1")),
            R.tool_calls("p2", ToolCall("c2", "search", {"query": "dogs"})),
            R.text("p3", "done"),
        ]
    )
    result = al.run(
        TASK,
        model=model,
        tools=[searcher(), search],
        budget=al.Budget(max_tool_calls=2),
        on_pause=recording(pauses, lambda pause: pause.reason),
    )
    # c1 and the child's k1: two calls, so c2 waits for a budget pause.
    assert pauses == ["budget_exceeded:tool_calls"]
    assert result.status == "completed"


def test_cancelling_the_parent_cancels_the_child() -> None:
    signal = CancelToken()

    @al.tool
    def stop(query: str) -> str:
        """Cancels the whole tree."""
        signal.cancel("user stopped")
        return "stopping"

    child_model = ScriptedModel(
        [R.tool_calls("s1", ToolCall("k1", "stop", {"query": "x"})), R.text("s2", "never")]
    )
    tool = al.agent_tool("stopper", "Stops.", model=child_model, tools=[stop])
    log = EventLog()
    result = al.run(
        TASK, model=parent_model(ask(name="stopper")), tools=[tool], log=log, signal=signal
    )
    child = tool.logs["root/c1"]
    assert child[-1].status == "cancelled"  # type: ignore[union-attr]
    assert result.status == "cancelled"
    assert result.reason == "user stopped"
    # The child's outcome is recorded in the parent before the parent stops.
    assert log[7].reply.child.status == "cancelled"  # type: ignore[union-attr]
    replays(log)
    replays(child)


# --------------------------------------------------------------------------- drivers


def test_arun_runs_children_with_parallel_tools() -> None:
    child_model = ScriptedModel(
        [
            R.tool_calls(
                "s1",
                ToolCall("k1", "search", {"query": "a"}),
                ToolCall("k2", "search", {"query": "b"}),
                usage=Usage(1, 1),
            ),
            R.text("s2", "both", usage=Usage(1, 1)),
        ]
    )
    tool = al.agent_tool(
        "searcher", "Searches.", model=child_model, tools=[search], parallel_tools=True
    )
    log = EventLog()
    result = asyncio.run(al.arun(TASK, model=parent_model(ask()), tools=[tool], log=log))
    assert result.messages[2].content == "both"  # type: ignore[union-attr]
    assert result.usage == Usage(32, 5)
    assert any(type(e) is al.ToolCallEvent for e in tool.logs["root/c1"])
    replays(log)
    replays(tool.logs["root/c1"])


@pytest.mark.parametrize("asynchronous", [False, True])
def test_two_children_in_one_parallel_batch(asynchronous: bool) -> None:
    first, second = (
        searcher(),
        al.agent_tool("other", "Also searches.", model=searcher_model(), tools=[search]),
    )
    model = parent_model(ask("c1"), ask("c2", name="other"))
    log = EventLog()
    options: dict[str, Any] = {"tools": [first, second], "log": log, "parallel_tools": True}
    if asynchronous:
        result = asyncio.run(al.arun(TASK, model=model, **options))
    else:
        result = al.run(TASK, model=model, **options)
    assert [m.content for m in result.messages[2:4]] == ["cats purr", "cats purr"]  # type: ignore[union-attr]
    assert result.usage == Usage(30 + 16, 3 + 6)
    assert list(first.logs) == ["root/c1"] and list(second.logs) == ["root/c2"]
    replays(log)


def test_a_child_of_a_resumed_child_gets_its_place_from_the_loop() -> None:
    # A loop rebuilt from a child's log (replay.resume) drives its own agent tools
    # as that child: the ids continue the tree.
    inner = searcher()
    loop = al.agent_loop(
        [UserMessage("task", "go")],
        tools=[inner],
        parent=ParentLink(session="root", call_id="c9", depth=1),
    )
    result = al.drive(loop, model=parent_model(ask("c1")), tools=[inner])
    assert result.status == "completed"
    assert list(inner.logs) == ["root/c9/c1"]
    assert inner.logs["root/c9/c1"][0].parent.depth == 2  # type: ignore[union-attr]


# --------------------------------------------------------------------------- bad values


@pytest.mark.parametrize(
    ("parent", "error", "words"),
    [
        ("root", TypeError, "parent must be a ParentLink or None, got str"),
        (ParentLink(session="", call_id="c"), ValueError, "ParentLink.session must be"),
        (ParentLink(session="s", call_id=""), ValueError, "ParentLink.call_id must be"),
        (ParentLink(session="s", call_id="c", depth=0), ValueError, "ParentLink.depth must be"),
    ],
)
def test_agent_loop_refuses_a_bad_parent(parent: Any, error: type[Exception], words: str) -> None:
    with pytest.raises(error, match=words):
        al.agent_loop(TASK, tools=[], parent=parent)


@pytest.mark.parametrize(
    ("child", "words"),
    [
        ("root/c1", "ToolResult.child must be a ChildRun or None, got str"),
        (ChildRun(session="", status="completed"), "ToolResult.child.session must be"),
        (ChildRun(session="s", status="done"), "ToolResult.child.status must be one of"),
        (
            ChildRun(session="s", status="completed", usage=Usage(-1)),
            "ToolResult.child.usage must be",
        ),
        (ChildRun(session="s", status="completed", usage="x"), "ToolResult.child.usage must be"),  # type: ignore[arg-type]
        (ChildRun(session="s", status="completed", tool_calls=-1), "ToolResult.child.tool_calls"),
    ],
)
def test_a_tool_result_with_a_bad_child_is_caller_misuse(child: Any, words: str) -> None:
    loop = al.agent_loop(TASK, tools=[search])
    next(loop)
    loop.send(
        al.ModelResponse(
            "request-001", "p1", (ToolCall("c1", "search", {"query": "q"}),), "tool_call"
        )
    )
    with pytest.raises(al.CallerProtocolError, match=words):
        loop.send(ToolResult("c1", "x", child=child))
    assert loop.result is not None and loop.result.status == "failed"


def test_a_result_without_a_child_checked_the_slow_way() -> None:
    loop = al.agent_loop(TASK, tools=[search])
    next(loop)
    call = ToolCall("ç1", "search", {"query": "q"})  # a non-ASCII id: the slow path
    loop.send(al.ModelResponse("request-001", "p1", (call,), "tool_call"))
    assert type(loop.send(ToolResult("ç1", "x"))) is ModelRequest


def test_a_hand_made_child_result_rolls_up_and_replays() -> None:
    loop = al.agent_loop(TASK, tools=[search])
    next(loop)
    loop.send(
        al.ModelResponse(
            "request-001", "p1", (ToolCall("c1", "search", {"query": "q"}),), "tool_call"
        )
    )
    child = ChildRun(session="elsewhere", status="completed", usage=Usage(4, 4), tool_calls=3)
    loop.send(ToolResult("c1", "x", child=child))
    with pytest.raises(StopIteration):
        loop.send(al.ModelResponse("request-002", "p2", (al.TextBlock("ok"),), "stop"))
    assert loop.result is not None and loop.result.usage == Usage(4, 4)
    assert loop.budget_usage.tool_calls == 4
    replays(loop.log)


def test_subtree_tool_calls_counts_childrens_calls() -> None:
    tool = searcher()
    log = EventLog()
    al.run(TASK, model=parent_model(ask()), tools=[tool], log=log)
    assert subtree_tool_calls(log) == 2  # c1, and the child's k1


def test_old_logs_hold_no_tree_fields() -> None:
    log = EventLog()
    al.run(
        TASK, model=parent_model(ToolCall("c1", "search", {"query": "q"})), tools=[search], log=log
    )
    lines = b"".join(encode_event(e) for e in log)
    assert b"parent" not in lines and b"child" not in lines


# --------------------------------------------------------------------------- property: trees


class Node(msgspec.Struct, frozen=True):
    """One agent of a random tree: its tokens per response, its children, and what
    its own tool does (nothing, ask approval, or cancel the whole tree)."""

    tokens: int
    children: tuple[Node, ...]
    action: str


nodes = st.recursive(
    st.builds(
        Node, st.integers(0, 50), st.just(()), st.sampled_from(["none", "approval", "cancel"])
    ),
    lambda kids: st.builds(
        Node,
        st.integers(0, 50),
        st.lists(kids, max_size=2).map(tuple),
        st.sampled_from(["none", "approval", "cancel"]),
    ),
    max_leaves=6,
)


def build(node: Node, signal: CancelToken, tools_made: list[al.AgentTool]) -> tuple[Any, list[Any]]:
    """The model and tools of the agent ``node`` describes."""

    @al.tool(name="work", requires_approval=node.action == "approval")
    def work(what: str) -> str:
        if node.action == "cancel":
            signal.cancel("stopped in the tree")
        return f"did {what}"

    tools: list[Any] = [work]
    calls = [ToolCall("w", "work", {"what": "x"})]
    for index, kid in enumerate(node.children):
        model, kid_tools = build(kid, signal, tools_made)
        agent = al.agent_tool(f"agent{index}", "A child.", model=model, tools=kid_tools)
        tools_made.append(agent)
        tools.append(agent)
        calls.append(ToolCall(f"c{index}", f"agent{index}", {"task": "go"}))
    usage = Usage(node.tokens, node.tokens + 1)

    def answer(request: ModelRequest) -> Any:
        if request.step == 1:
            return R.tool_calls("r1", *calls, usage=usage)
        return R.text("r2", f"done at {request.step}", usage=usage)

    return FunctionModel(answer), tools


def drafted(log: EventLog) -> Usage:
    total = Usage()
    for event in log:
        if type(event) is al.PlanDraftEvent and event.reply.usage is not None:
            total = total + event.reply.usage
    return total


@settings(max_examples=examples(60))
@given(tree=nodes, approve=st.booleans(), asynchronous=st.booleans())
def test_random_trees_replay_and_roll_up_exactly(
    tree: Node, approve: bool, asynchronous: bool
) -> None:
    signal = CancelToken()
    made: list[al.AgentTool] = []
    model, tools = build(tree, signal, made)
    log = EventLog()
    options: dict[str, Any] = {
        "model": model,
        "tools": tools,
        "log": log,
        "signal": signal,
        "clock": Ticker(),
        "on_pause": lambda pause: Resume({"approved": approve}),
    }
    result = asyncio.run(al.arun(TASK, **options)) if asynchronous else al.run(TASK, **options)
    logs = [log] + [child for agent in made for child in agent.logs.values()]
    total = Usage()
    for each in logs:
        replays(each)
        total = total + drafted(each)
    # Every token any agent of the tree was billed counts in the root, once.
    assert result.usage == total
    # And each child's recorded roll-up is what its own log says.
    children = {session: child for agent in made for session, child in agent.logs.items()}
    for each in logs:
        for event in each:
            reply = getattr(event, "reply", None)
            if type(reply) is ToolResult and reply.child is not None:
                record = reply.child
                finished = children[record.session][-1]
                assert (record.usage or Usage()) == finished.usage  # type: ignore[union-attr]
                assert record.tool_calls == subtree_tool_calls(children[record.session])


# --------------------------------------------------------------------------- the CLI


def test_replay_show_and_check_name_the_tree(
    tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    from replay.__main__ import main

    tool = al.agent_tool(
        "empty", "Answers nothing.", model=ScriptedModel([R.text("e1", "")]), tools=[]
    )
    log = EventLog()
    al.run(
        TASK, model=parent_model(ask(), ask("c2", name="empty")), tools=[searcher(), tool], log=log
    )
    parent, child = tmp_path / "parent.jsonl", tmp_path / "child.jsonl"
    replay.write_log(parent, log)
    replay.write_log(child, tool.logs["root/c2"])
    assert main(["show", str(parent)]) == 0
    shown = capsys.readouterr().out
    assert "c1 searcher (child 'root/c1' completed, usage=8/3, tool_calls=1): 'cats purr'" in shown
    assert "c2 empty (child 'root/c2' completed, usage=0/0, tool_calls=0): ''" in shown
    assert main(["show", str(child)]) == 0
    assert "child of 'root' call 'c2' (depth 1)" in capsys.readouterr().out
    assert main(["check", str(child)]) == 0
    assert main(["check", str(parent)]) == 0


# --------------------------------------------------------------------------- named sessions


def test_a_named_root_names_its_children_and_their_keys() -> None:
    keys: list[str | None] = []

    @al.tool(name="search")
    def keyed_search(query: str) -> str:
        keys.append(al.idempotency_key())
        return "found"

    child = al.agent_tool(
        "searcher",
        "Searches.",
        model=ScriptedModel(
            [R.tool_calls("s1", ToolCall("c1", "search", {"query": "q"})), R.text("s2", "ok")]
        ),
        tools=[keyed_search],
    )
    with al.idempotency_session("ticket:42"):
        result = al.run(TASK, model=parent_model(ask("c1")), tools=[child])
    assert result.status == "completed"
    assert list(child.logs) == ["ticket:42/c1"]
    # The child's call c1 has its own key, never its parent's call c1's.
    assert keys == ["ticket\\:42/c1:c1"]


def test_an_unnamed_root_gives_its_childrens_tools_no_keys() -> None:
    keys: list[str | None] = []

    @al.tool(name="search")
    def keyed_search(query: str) -> str:
        keys.append(al.idempotency_key())
        return "found"

    child = al.agent_tool(
        "searcher",
        "Searches.",
        model=ScriptedModel(
            [R.tool_calls("s1", ToolCall("k1", "search", {"query": "q"})), R.text("s2", "ok")]
        ),
        tools=[keyed_search],
    )
    asyncio.run(al.arun(TASK, model=parent_model(ask("c1")), tools=[child]))
    assert keys == [None]


def test_run_durable_names_the_children_after_the_stored_session(tmp_path: Any) -> None:
    tool = searcher()
    with replay.SQLiteStore(tmp_path / "s.db") as store:
        result = replay.run_durable(
            store, "research-7", TASK, model=parent_model(ask()), tools=[tool]
        )
        assert isinstance(result, al.RunResult) and result.status == "completed"
        stored = store.events("research-7")
        # The child is a stored session (tests/test_agent_tree_durable.py), not
        # one of the tool's in-memory logs.
        assert store.children("research-7") == ["research-7/c1"]
        child = store.events("research-7/c1")
    assert tool.logs == {}
    assert child[0].parent.session == "research-7"  # type: ignore[union-attr]
    assert [encode_event(e) for e in replay.replay(list(stored)).events] == [
        encode_event(e) for e in stored
    ]
