"""replay.arun_durable: run_durable's twin on the asyncio driver.

In-process tests; the SIGKILL crash tests of async workers (and of async and sync
workers taking turns on one session) are in ``test_durable_crash.py``.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

import agentloop
import replay
from agentloop import (
    Cancel,
    CancelToken,
    FunctionModel,
    ModelRequest,
    Resume,
    RunResult,
    Steer,
    UserMessage,
    encode_event,
    tool,
)
from replay import Parked, SessionLeased, SQLiteStore

from .helpers import add as sync_add
from .test_durable import APPROVE, QUESTION, answer, publishing


@tool
async def add(left: int, right: int) -> dict[str, int]:
    """Add two integers."""
    await asyncio.sleep(0)
    return {"sum": left + right}


@tool(requires_approval=True)
async def publish(text: str) -> str:
    """Publish a text (a human approves first)."""
    return f"published {text!r}"


def arun(store: SQLiteStore, session_id: str, messages: Any = None, **options: Any) -> Any:
    options.setdefault("model", FunctionModel(answer))
    options.setdefault("tools", [add])
    return asyncio.run(replay.arun_durable(store, session_id, messages, **options))


class Ticks:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        self.now += 1.0
        return self.now


# --------------------------------------------------------------------------- like run_durable


def test_it_writes_the_log_run_durable_writes_with_the_same_commits(tmp_path):
    with SQLiteStore(tmp_path / "a.db") as a, SQLiteStore(tmp_path / "s.db") as s:
        got = arun(a, "x", QUESTION, clock=Ticks())
        expected = replay.run_durable(
            s, "x", QUESTION, model=FunctionModel(answer), tools=[sync_add], clock=Ticks()
        )
        assert got == expected and got.status == "completed"
        assert [encode_event(e) for e in a.events("x")] == [encode_event(e) for e in s.events("x")]
        assert a.commits == s.commits == 6
        assert a.session("x").lease_owner is None


def test_the_write_ahead_rule_holds_and_the_store_is_used_from_other_threads(tmp_path):
    loop_threads: set[int] = set()
    store_threads: set[int] = set()
    seen: list[str] = []

    class Watched(SQLiteStore):
        def append(self, *args: Any, **kwargs: Any) -> Any:
            store_threads.add(threading.get_ident())
            return super().append(*args, **kwargs)

    with Watched(tmp_path / "w.db") as store:

        @tool(name="add")
        async def watched_add(left: int, right: int) -> dict[str, int]:
            """Add two integers."""
            loop_threads.add(threading.get_ident())
            last = store.events("s")[-1]
            seen.append(f"{agentloop.idempotency_key()} after {last.type} {last.call.id}")
            return {"sum": left + right}

        result = arun(store, "s", QUESTION, tools=[watched_add])
    assert result.status == "completed"
    assert seen == ["s:c1 after tool.call c1", "s:c2 after tool.call c2"]
    assert store_threads and not store_threads & loop_threads  # never on the event loop


def test_sync_tools_run_in_threads_and_read_their_key(store):
    keys: list[Any] = []

    @tool(name="add")
    def keyed_add(left: int, right: int) -> dict[str, int]:
        """Add two integers."""
        keys.append(agentloop.idempotency_key())
        return {"sum": left + right}

    arun(store, "order-7", QUESTION, tools=[keyed_add])
    assert keys == ["order-7:c1", "order-7:c2"]


def test_a_finished_session_gives_its_result_and_an_async_model_is_required(store):
    first = arun(store, "s", QUESTION)
    model = FunctionModel(answer)
    assert arun(store, "s", model=model) == first
    assert model.call_count == 0

    class SyncOnly:
        def stream(self, request: ModelRequest) -> Any:
            return FunctionModel(answer).stream(request)

    with pytest.raises(TypeError, match="has no astream"):
        arun(store, "t", QUESTION, model=SyncOnly())
    assert store.find("t") is None


def test_sessions_move_between_the_sync_and_the_async_runner(store):
    # Parked by the async runner, answered, finished by the sync one; and back.
    options: dict[str, Any] = {"model": FunctionModel(publishing), "tools": [publish]}
    parked = arun(store, "s", QUESTION, **options)
    assert type(parked) is Parked and parked.pause.reason == "approval"
    assert arun(store, "s", **options) == parked  # still parked: nothing runs
    replay.answer(store, "s", APPROVE)

    @tool(name="publish", requires_approval=True)
    def sync_publish(text: str) -> str:
        """Publish a text (a human approves first)."""
        return f"published {text!r}"

    result = replay.run_durable(store, "s", model=FunctionModel(publishing), tools=[sync_publish])
    assert result.status == "completed"
    assert arun(store, "s", **options) == result


# --------------------------------------------------------------------------- parking and answers


def test_parking_answers_and_steering(store):
    options: dict[str, Any] = {"model": FunctionModel(publishing), "tools": [publish]}
    parked = arun(store, "s", QUESTION, **options)
    assert type(parked) is Parked
    replay.answer(store, "s", Steer(UserMessage("u2", "Sign it.")))
    replay.answer(store, "s", APPROVE)
    result = arun(store, "s", clock=lambda: 9.0, **options)
    assert result.status == "completed"
    # Delivered after the tool call now running (the approved one): after its result.
    assert result.messages[2:4] == (
        agentloop.ToolResultMessage("tool-result-c1", "c1", "publish", "published 'hello'"),
        UserMessage("u2", "Sign it."),
    )
    types = [e.type for e in store.events("s")]
    assert types.index("message.queued") < types.index("session.resume")
    info = store.session("s")
    assert (info.answered, info.queued) == (False, 0)


def test_an_async_on_pause_answers_and_a_cancel_token_cancels(store):
    async def approve(pause: Any) -> Resume:
        await asyncio.sleep(0)
        return APPROVE

    options: dict[str, Any] = {"model": FunctionModel(publishing), "tools": [publish]}
    assert arun(store, "a", QUESTION, on_pause=approve, **options).status == "completed"
    token = CancelToken()
    token.cancel("closing time")
    result = arun(store, "b", QUESTION, signal=token, **options)
    assert (result.status, result.reason) == ("cancelled", "closing time")
    assert store.session("b").status == "cancelled"


def test_a_refused_answer_fails_the_run_and_is_stored(store):
    options: dict[str, Any] = {"model": FunctionModel(publishing), "tools": [publish]}
    arun(store, "s", QUESTION, **options)
    replay.answer(store, "s", Resume({"approved": "maybe"}))
    with pytest.raises(agentloop.CallerProtocolError):
        arun(store, "s", **options)
    info = store.session("s")
    assert (info.status, info.answered, info.lease_owner) == ("failed", False, None)


# --------------------------------------------------------------------------- crashes


class Interrupted(BaseException):
    pass


def test_an_exception_out_of_an_async_tool_is_not_committed(store):
    crash = [True]

    @tool(name="add")
    async def fragile_add(left: int, right: int) -> dict[str, int]:
        """Add two integers."""
        if left == 42 and crash and crash.pop():
            raise Interrupted
        return {"sum": left + right}

    with pytest.raises(Interrupted):
        arun(store, "s", QUESTION, tools=[fragile_add])
    info = store.session("s")
    assert (info.status, info.lease_owner) == ("running", None)
    assert store.events("s")[-1].type == "tool.call"
    result = arun(store, "s", tools=[fragile_add])
    assert result == replay.run_durable(
        store, "other", QUESTION, model=FunctionModel(answer), tools=[sync_add]
    )


def test_a_cancelled_task_is_a_crash_not_a_cancel(store):
    started = threading.Event()

    @tool(name="add")
    async def slow_add(left: int, right: int) -> dict[str, int]:
        """Add two integers."""
        started.set()
        await asyncio.sleep(3600)
        return {"sum": left + right}  # pragma: no cover - cancelled first

    async def scenario() -> None:
        task = asyncio.ensure_future(
            replay.arun_durable(store, "s", QUESTION, model=FunctionModel(answer), tools=[slow_add])
        )
        while not started.is_set():
            await asyncio.sleep(0.001)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(scenario())
    info = store.session("s")
    assert (info.status, info.lease_owner) == ("running", None)
    assert store.events("s")[-1].type == "tool.call"  # no cancel was committed
    assert arun(store, "s").status == "completed"


# --------------------------------------------------------------------------- leases


def test_leases_are_taken_and_renewed(store):
    options: dict[str, Any] = {"model": FunctionModel(publishing), "tools": [publish]}
    arun(store, "s", QUESTION, **options)
    replay.answer(store, "s", APPROVE)
    store.acquire("s", "other-worker", 60)
    with pytest.raises(SessionLeased, match="leased by 'other-worker'"):
        arun(store, "s", owner="me", **options)
    store.release("s", "other-worker")

    renewed: list[bool] = []

    @tool(name="publish", requires_approval=True)
    async def slow_publish(text: str) -> str:
        """Publish a text (a human approves first)."""
        first = store.session("s").lease_expires
        for _ in range(3000):
            if store.session("s").lease_expires != first:
                renewed.append(True)
                break
            await asyncio.sleep(0.005)
        return "published"

    result = arun(
        store, "s", model=FunctionModel(publishing), tools=[slow_publish], lease_seconds=0.03
    )
    assert renewed == [True] and result.status == "completed"
    assert store.session("s").lease_owner is None


def test_a_cancel_answer_and_bad_options(store):
    options: dict[str, Any] = {"model": FunctionModel(publishing), "tools": [publish]}
    arun(store, "s", QUESTION, **options)
    replay.answer(store, "s", Cancel("no"))
    result: RunResult = arun(store, "s", **options)
    assert (result.status, result.reason) == ("cancelled", "no")
    with pytest.raises(ValueError, match="lease_seconds must be a positive number"):
        arun(store, "t", QUESTION, lease_seconds=-1, **options)


def test_parallel_tools_run_as_one_batch_and_the_stored_log_replays(store):
    def two_calls(request: ModelRequest) -> Any:
        from agentloop import ScriptedResponse, ToolCall

        if len(request.messages) == 1:
            return ScriptedResponse.tool_calls(
                "r1",
                ToolCall("c1", "add", {"left": 1, "right": 2}),
                ToolCall("c2", "add", {"left": 3, "right": 4}),
            )
        return ScriptedResponse.text("r2", "3 and 7")

    result = arun(
        store,
        "batch",
        QUESTION,
        model=FunctionModel(two_calls),
        parallel_tools=True,
        tool_workers=2,
    )
    assert result.status == "completed" and result.final_text == "3 and 7"
    events = list(store.events("batch"))
    assert events[0].parallel_tools is True
    assert [e.type for e in events].count("tool.result") == 2
    regenerated = replay.replay(events)
    assert [encode_event(e) for e in regenerated.events] == [encode_event(e) for e in events]
