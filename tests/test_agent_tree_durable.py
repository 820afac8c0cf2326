"""The durable session tree (DESIGN §26): under ``run_durable`` each agent tool's
child is a stored session of its own, linked to its parent; parent and child park
together, one ``replay.answer`` continues both, and a finished child never runs
again when its parent resumes.
"""

from __future__ import annotations

import asyncio
import collections
import tempfile
from collections.abc import Callable
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import agentloop as al
import replay
from agentloop import (
    Cancel,
    ChildRun,
    FunctionModel,
    ModelRequest,
    ParentLink,
    Pause,
    Resume,
    ScriptedResponse,
    ToolCall,
    Usage,
    UserMessage,
    encode_event,
)
from replay import Parked, SQLiteStore, StoreError

from .helpers import Ticker

R = ScriptedResponse
TASK = [UserMessage("u1", "research cats")]
APPROVE = Resume({"approved": True})


@al.tool
def search(query: str) -> str:
    """Search the web."""
    return f"results for {query}"


@al.tool(requires_approval=True)
def publish(text: str) -> str:
    """Publish a text (a human approves first)."""
    return f"published {text!r}"


class Counting:
    """A function model that counts its calls (a finished child is never re-run)."""

    def __init__(self, fn: Callable[[ModelRequest], R]) -> None:
        self.calls = 0
        self.fn = fn

    def __call__(self, request: ModelRequest) -> R:
        self.calls += 1
        return self.fn(request)


def searching(request: ModelRequest) -> R:
    if request.step == 1:
        return R.tool_calls("s1", ToolCall("k1", "search", {"query": "cats"}), usage=Usage(3, 1))
    return R.text("s2", "cats purr", usage=Usage(5, 2))


def publishing(request: ModelRequest) -> R:
    if request.step == 1:
        return R.tool_calls("w1", ToolCall("k1", "publish", {"text": "cats"}), usage=Usage(4, 1))
    return R.text("w2", "published", usage=Usage(6, 2))


def delegating(*names: str) -> Any:
    def fn(request: ModelRequest) -> R:
        if request.step <= len(names):
            name = names[request.step - 1]
            call = ToolCall(f"c{request.step}", name, {"task": f"task for {name}"})
            return R.tool_calls(f"p{request.step}", call, usage=Usage(10, 1))
        return R.text("p9", "all done", usage=Usage(20, 2))

    return fn


def tools(search_model: Counting, write_model: Counting) -> list[al.AgentTool]:
    return [
        al.agent_tool("searcher", "Searches.", model=FunctionModel(search_model), tools=[search]),
        al.agent_tool("writer", "Writes.", model=FunctionModel(write_model), tools=[publish]),
    ]


def run_tree(
    store: SQLiteStore, parent: Counting, search_model: Counting, write_model: Counting, **kw: Any
) -> RunResultOrParked:
    return replay.run_durable(
        store,
        "research",
        TASK,
        model=FunctionModel(parent),
        tools=tools(search_model, write_model),
        clock=Ticker(),
        **kw,
    )


RunResultOrParked = Any


def replays(events: list[Any]) -> None:
    regenerated = replay.replay(events).events
    assert [encode_event(e) for e in regenerated] == [encode_event(e) for e in events]


def test_children_are_stored_sessions_linked_to_their_parent(store: SQLiteStore) -> None:
    parent, searcher, writer = (
        Counting(delegating("searcher")),
        Counting(searching),
        Counting(publishing),
    )
    result = run_tree(store, parent, searcher, writer)
    assert result.status == "completed"
    assert store.children("research") == ["research/c1"]
    assert store.children("research/c1") == []
    assert store.children("nobody") == []
    child = store.events("research/c1")
    assert child[0].parent == ParentLink(session="research", call_id="c1", depth=1)  # type: ignore[union-attr]
    assert store.session("research/c1").config["parent"] == {
        "session": "research",
        "call_id": "c1",
        "depth": 1,
    }
    assert store.session("research/c1").status == "completed"
    reply = store.events("research")[7].reply  # type: ignore[union-attr]
    assert reply.child == ChildRun(
        session="research/c1", status="completed", usage=Usage(8, 3), tool_calls=1
    )
    assert result.usage == Usage(10 + 20 + 3 + 5, 1 + 2 + 1 + 2)
    # The same tree in memory records the same parent log, byte for byte.
    memory = al.EventLog()
    with al.idempotency_session("research"):
        al.run(
            TASK,
            model=FunctionModel(delegating("searcher")),
            tools=tools(Counting(searching), Counting(publishing)),
            clock=Ticker(),
            log=memory,
        )
    assert [encode_event(e) for e in memory] == [encode_event(e) for e in store.events("research")]
    replays(store.events("research"))
    replays(store.events("research/c1"))
    # A finished tree gives back its result: nothing runs again.
    again = run_tree(store, parent, searcher, writer)
    assert again == result
    assert (parent.calls, searcher.calls) == (2, 2)


def test_a_session_merely_named_like_a_child_is_not_one(store: SQLiteStore) -> None:
    replay.run_durable(
        store, "research/x", TASK, model=FunctionModel(lambda r: R.text("r", "hi")), tools=[]
    )
    assert store.children("research") == []


@pytest.mark.parametrize("answer_to", ["research", "research/c1"])
def test_a_parked_child_parks_its_parent_and_one_answer_continues_both(
    store: SQLiteStore, answer_to: str
) -> None:
    parent, searcher, writer = (
        Counting(delegating("writer")),
        Counting(searching),
        Counting(publishing),
    )
    parked = run_tree(store, parent, searcher, writer)
    assert type(parked) is Parked
    assert parked.session_id == "research"
    assert parked.pause.reason == "approval"
    assert parked.pause.path == ("research/c1",)
    assert store.session("research").status == "paused"
    assert store.session("research/c1").status == "paused"
    assert store.events("research")[-1].type == "tool.call"
    # Still parked: asking again runs nothing.
    assert run_tree(store, parent, searcher, writer) == parked
    assert (parent.calls, writer.calls) == (1, 1)
    replay.answer(store, answer_to, APPROVE)
    assert store.session("research/c1").answered
    result = run_tree(store, parent, searcher, writer)
    assert result.status == "completed"
    assert result.final_text == "all done"
    assert (parent.calls, writer.calls) == (2, 2)
    child = store.events("research/c1")
    assert [e.type for e in child if e.type.startswith("session.")] == [
        "session.start",
        "session.pause",
        "session.resume",
        "session.complete",
    ]
    replays(store.events("research"))
    replays(child)


def test_a_cancel_answer_cancels_the_child_and_the_parent_reads_it(store: SQLiteStore) -> None:
    parent, searcher, writer = (
        Counting(delegating("writer")),
        Counting(searching),
        Counting(publishing),
    )
    run_tree(store, parent, searcher, writer)
    replay.answer(store, "research", Cancel("no"))
    result = run_tree(store, parent, searcher, writer)
    assert result.status == "completed"
    assert store.session("research/c1").status == "cancelled"
    message = result.messages[2]
    assert message.is_error  # type: ignore[union-attr]
    assert "ended cancelled" in message.content  # type: ignore[union-attr]


def test_the_parent_on_pause_answers_a_durable_child(store: SQLiteStore) -> None:
    seen: list[Pause] = []

    def on_pause(pause: Pause) -> Resume:
        seen.append(pause)
        return APPROVE

    parent, searcher, writer = (
        Counting(delegating("writer")),
        Counting(searching),
        Counting(publishing),
    )
    result = run_tree(store, parent, searcher, writer, on_pause=on_pause)
    assert result.status == "completed"
    assert [p.path for p in seen] == [("research/c1",)]


def test_a_grandchild_parks_the_whole_path(store: SQLiteStore) -> None:
    writer = al.agent_tool("writer", "Writes.", model=FunctionModel(publishing), tools=[publish])

    def editing(request: ModelRequest) -> R:
        if request.step == 1:
            return R.tool_calls("e1", ToolCall("g1", "writer", {"task": "write"}))
        return R.text("e2", "edited")

    editor = al.agent_tool("editor", "Edits.", model=FunctionModel(editing), tools=[writer])
    parked = replay.run_durable(
        store, "root", TASK, model=FunctionModel(delegating("editor")), tools=[editor]
    )
    assert type(parked) is Parked
    assert parked.pause.path == ("root/c1", "root/c1/g1")
    assert [store.session(s).status for s in ("root", "root/c1", "root/c1/g1")] == ["paused"] * 3
    assert store.children("root") == ["root/c1"]
    assert store.children("root/c1") == ["root/c1/g1"]
    replay.answer(store, "root", APPROVE)
    assert store.session("root/c1/g1").answered
    result = replay.run_durable(
        store, "root", model=FunctionModel(delegating("editor")), tools=[editor]
    )
    assert result.status == "completed"
    assert result.messages[2].content == "edited"  # type: ignore[union-attr]


def test_an_answer_to_a_parent_whose_children_are_not_parked_says_so(
    store: SQLiteStore,
) -> None:
    parent, searcher, writer = (
        Counting(delegating("writer")),
        Counting(searching),
        Counting(publishing),
    )
    run_tree(store, parent, searcher, writer)
    # Behind the run's back, the child is no longer parked.
    store._db.execute("UPDATE sessions SET status = 'running' WHERE id = 'research/c1'")
    with pytest.raises(StoreError, match=r"tool\.call #6 on a child session, but none"):
        replay.answer(store, "research", APPROVE)
    # Run again, it makes the call again (the child resumes) and parks again.
    assert type(run_tree(store, parent, searcher, writer)) is Parked


class Crash(BaseException):
    """A crash (like a SIGKILL, nothing after it is committed)."""


def test_a_parent_that_crashed_after_its_child_finished_does_not_run_it_again(
    store: SQLiteStore,
) -> None:
    parent, searcher, writer = (
        Counting(delegating("searcher", "writer")),
        Counting(searching),
        Counting(publishing),
    )
    crashed = False

    def crash_in_second_child(request: ModelRequest) -> R:
        nonlocal crashed
        if not crashed:
            crashed = True
            raise Crash
        return publishing(request)

    with pytest.raises(Crash):
        run_tree(store, parent, searcher, Counting(crash_in_second_child))
    assert store.session("research/c1").status == "completed"
    assert searcher.calls == 2
    # The parent's log holds the first call's result; the second child started.
    assert store.children("research") == ["research/c1", "research/c2"]
    result = run_tree(store, parent, searcher, writer, on_pause=lambda p: APPROVE)
    assert result.status == "completed"
    assert searcher.calls == 2  # never re-run


def test_a_parent_that_crashed_before_recording_its_finished_child_reads_the_stored_answer(
    store: SQLiteStore,
) -> None:
    parent, searcher, writer = (
        Counting(delegating("searcher")),
        Counting(searching),
        Counting(publishing),
    )

    def crash_at_the_result(event: Any) -> None:
        if event.type == "tool.result":
            raise Crash

    with pytest.raises(Crash):
        run_tree(store, parent, searcher, writer, on_event=crash_at_the_result)
    # The child finished; the parent's stored log ends at the call (the result,
    # recorded in memory, was never committed).
    assert store.session("research/c1").status == "completed"
    assert store.events("research")[-1].type == "tool.call"
    assert searcher.calls == 2
    result = run_tree(store, parent, searcher, writer)
    assert result.status == "completed"
    assert searcher.calls == 2  # the child's stored answer is the recorded reply
    assert result.messages[2].content == "cats purr"  # type: ignore[union-attr]
    assert result.usage == Usage(10 + 20 + 3 + 5, 1 + 2 + 1 + 2)
    replays(store.events("research"))


def test_a_crashed_child_resumes_from_its_own_log(store: SQLiteStore) -> None:
    parent, writer = Counting(delegating("searcher")), Counting(publishing)
    calls = 0

    def crash_at_second_step(request: ModelRequest) -> R:
        nonlocal calls
        calls += 1
        if request.step == 2 and calls == 2:
            raise Crash
        return searching(request)

    searcher = Counting(crash_at_second_step)
    with pytest.raises(Crash):
        run_tree(store, parent, searcher, writer)
    assert store.session("research/c1").status == "running"
    assert store.session("research").status == "running"
    result = run_tree(store, parent, searcher, writer)
    assert result.status == "completed"
    # The child resumed at its second model call (its first is stored).
    assert searcher.calls == 3
    assert parent.calls == 2
    child = store.events("research/c1")
    replays(child)
    replays(store.events("research"))


def test_the_async_twin_parks_and_continues_the_tree(store: SQLiteStore) -> None:
    def tree() -> list[al.AgentTool]:
        return [
            al.agent_tool("writer", "Writes.", model=FunctionModel(publishing), tools=[publish])
        ]

    async def go() -> Any:
        return await replay.arun_durable(
            store,
            "a",
            TASK,
            model=FunctionModel(delegating("writer")),
            tools=tree(),
            clock=Ticker(),
        )

    parked = asyncio.run(go())
    assert type(parked) is Parked
    assert parked.pause.path == ("a/c1",)
    replay.answer(store, "a", APPROVE)
    result = asyncio.run(go())
    assert result.status == "completed"
    assert store.session("a/c1").status == "completed"
    replays(store.events("a"))


def test_a_cancelled_parent_cancels_its_durable_child(store: SQLiteStore) -> None:
    signal = al.CancelToken()

    def cancelling(request: ModelRequest) -> R:
        signal.cancel("enough")
        return searching(request)

    parent = Counting(delegating("searcher"))
    result = run_tree(store, parent, Counting(cancelling), Counting(publishing), signal=signal)
    assert result.status == "cancelled"
    assert store.session("research/c1").status == "cancelled"
    reply = store.events("research")[7].reply  # type: ignore[union-attr]
    assert reply.child.status == "cancelled"


def test_a_parked_path_broken_below_the_child_parks_nothing_deeper(store: SQLiteStore) -> None:
    writer = al.agent_tool("writer", "Writes.", model=FunctionModel(publishing), tools=[publish])

    def editing(request: ModelRequest) -> R:
        return R.tool_calls("e1", ToolCall("g1", "writer", {"task": "write"}))

    editor = al.agent_tool("editor", "Edits.", model=FunctionModel(editing), tools=[writer])
    replay.run_durable(
        store, "root", TASK, model=FunctionModel(delegating("editor")), tools=[editor]
    )
    store._db.execute("UPDATE sessions SET status = 'running' WHERE id = 'root/c1/g1'")
    assert replay._durable.parked_leaf(store, "root") is None


# --------------------------------------------------------------------------- property: trees


class Node(msgspec.Struct, frozen=True):
    """One agent of a random durable tree: its tokens per response, its children,
    whether its tool asks for an approval, and whether its process crashes at its
    second model call (once)."""

    tokens: int
    children: tuple[Node, ...]
    approval: bool
    crash: bool


nodes = st.recursive(
    st.builds(Node, st.integers(0, 50), st.just(()), st.booleans(), st.booleans()),
    lambda kids: st.builds(
        Node,
        st.integers(0, 50),
        st.lists(kids, max_size=2).map(tuple),
        st.booleans(),
        st.booleans(),
    ),
    max_leaves=5,
)


def build_tree(node: Node, path: str, calls: collections.Counter[str], crashed: set[str]) -> Any:
    """The model and tools of the agent ``node`` describes (``path``: its session id
    under the root ``t``); its model calls are counted in ``calls``."""

    @al.tool(name="work", requires_approval=node.approval)
    def work(what: str) -> str:
        return f"did {what}"

    tools: list[Any] = [work]
    requests = [ToolCall("w", "work", {"what": "x"})]
    for index, kid in enumerate(node.children):
        model, kid_tools = build_tree(kid, f"{path}/c{index}", calls, crashed)
        tools.append(al.agent_tool(f"agent{index}", "A child.", model=model, tools=kid_tools))
        requests.append(ToolCall(f"c{index}", f"agent{index}", {"task": "go"}))
    usage = Usage(node.tokens, node.tokens + 1)

    def answer(request: ModelRequest) -> Any:
        calls[path] += 1
        if request.step == 1:
            return R.tool_calls("r1", *requests, usage=usage)
        if node.crash and path not in crashed:
            crashed.add(path)
            raise Crash
        return R.text("r2", f"done at {request.step}", usage=usage)

    return FunctionModel(answer), tools


def sessions_of(store: SQLiteStore, session: str) -> list[str]:
    return [session, *(s for child in store.children(session) for s in sessions_of(store, child))]


@settings(max_examples=25)
@given(tree=nodes, answers=st.lists(st.sampled_from(["yes", "no", "cancel"]), min_size=8))
def test_random_durable_trees_park_crash_resume_replay_and_roll_up(
    tree: Node, answers: list[str]
) -> None:
    calls: collections.Counter[str] = collections.Counter()
    crashed: set[str] = set()
    model, tools = build_tree(tree, "t", calls, crashed)
    replies = {"yes": APPROVE, "no": Resume({"approved": False}), "cancel": Cancel("no")}
    with tempfile.TemporaryDirectory() as folder, SQLiteStore(f"{folder}/s.db") as store:
        outcome: Any = None
        for _ in range(40):
            try:
                outcome = replay.run_durable(store, "t", TASK, model=model, tools=tools)
            except Crash:
                continue
            if type(outcome) is not Parked:
                break
            replay.answer(store, "t", replies[answers.pop() if answers else "yes"])
        assert type(outcome) is al.RunResult
        total = Usage()
        stored = sessions_of(store, "t")
        assert set(calls) <= set(stored)  # every agent that ran is a stored session
        for session in stored:
            events = store.events(session)
            replays(events)
            drafts = sum(type(e) is al.PlanDraftEvent for e in events)
            total = total + sum(
                (e.reply.usage for e in events if type(e) is al.PlanDraftEvent and e.reply.usage),
                Usage(),
            )
            # Each model call made is recorded, but the one each crash interrupted:
            # no session (a finished child above all) ran again.
            assert calls[session] == drafts + (session in crashed), session
        assert outcome.usage == total  # every token of the tree counts in the root, once


def test_a_worker_is_offered_the_root_of_a_tree_never_a_child_alone(store: SQLiteStore) -> None:
    # A parked tree whose child has its answer: the parent runs it, inside its call.
    parent, searcher, writer = (
        Counting(delegating("writer")),
        Counting(searching),
        Counting(publishing),
    )
    assert type(run_tree(store, parent, searcher, writer)) is Parked
    assert store.runnable() == []
    replay.answer(store, "research/c1", APPROVE)
    assert store.runnable() == ["research"]
    # Leased by a live worker, the root is not offered, nor is its child.
    store.acquire("research", "another-worker", 600)
    assert store.runnable() == []
    store.release("research", "another-worker")
    assert store.runnable() == ["research"]
    assert run_tree(store, parent, searcher, writer).status == "completed"
    assert store.runnable() == []


def test_a_session_merely_named_like_a_child_is_offered_itself(store: SQLiteStore) -> None:
    replay.submit(store, "team/ticket-1", TASK, tools=[])
    assert store.runnable() == ["team/ticket-1"]


def test_a_child_whose_parent_is_not_stored_is_not_offered(store: SQLiteStore) -> None:
    loop = al.agent_loop(TASK, tools=[], parent=ParentLink(session="ghost", call_id="c1", depth=1))
    next(loop)
    store.create("ghost/c1", list(loop.log), status="running", steps=1)
    assert store.runnable() == []
