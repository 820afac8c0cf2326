"""``arun(..., parallel_tools=True)``: tool batches as asyncio tasks (DESIGN §18).

Completion orders are forced with events (a call finishes when the result before
it in the chosen order was recorded), never with timing.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable, Sequence
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentloop import (
    Budget,
    CancelToken,
    EventLog,
    HookRegistry,
    Inbox,
    Pause,
    PauseRequest,
    Resume,
    RunResult,
    Tool,
    adrive,
    agent_loop,
    arun,
    arun_stream,
    run,
    tool,
)
from replay import replay
from tests.helpers import examples

from .test_adrive import Ticker, encoded, go
from .test_batches_run import PATIENCE, USER, arrival, results, script


def replays(log: EventLog, hooks: HookRegistry | None = None) -> None:
    """The log replays byte for byte (the recorded order is fed back)."""
    assert encoded(replay(log.events, hooks=hooks).events) == encoded(log)


async def until_cancelled(key: str, cancelled: list[str]) -> str:
    """Wait until the task is cancelled, then add ``key`` to ``cancelled``."""
    try:
        await asyncio.Event().wait()
    except asyncio.CancelledError:
        cancelled.append(key)
        raise
    raise AssertionError("the event is never set")


def left_behind() -> set[asyncio.Task[Any]]:
    """The tasks of the running event loop other than the current one."""
    return asyncio.all_tasks() - {asyncio.current_task()}  # type: ignore[operator]


class InOrder:
    """Async tool calls that finish in a chosen order of keys.

    Every call first waits until all ``together`` calls have started (they run at
    the same time), then for its turn: the first key's at once, each next one's
    when the result before it was recorded (``after_tool_call``, which runs as a
    result arrives).
    """

    def __init__(self, order: Sequence[str], together: int | None = None) -> None:
        self.order = list(order)
        self.together = len(order) if together is None else together
        self.started: list[str] = []
        self.all_started = asyncio.Event()
        self.turns = {key: asyncio.Event() for key in order}
        self.turns[self.order[0]].set()
        self.hooks = HookRegistry({"after_tool_call": self.after})

    def after(self, payload: dict[str, Any]) -> None:
        key = payload["content"]
        position = self.order.index(key) + 1
        if position < len(self.order):
            self.turns[self.order[position]].set()

    async def __call__(self, key: str) -> str:
        self.started.append(key)
        if len(self.started) == self.together:
            self.all_started.set()
        await self.all_started.wait()
        await self.turns[key].wait()
        return key

    def tool(self, name: str = "lookup") -> Tool:
        async def lookup(key: str) -> str:
            """Look a key up."""
            return await self(key)

        return Tool(lookup, name=name)


def arun_in_order(
    order: Sequence[str], together: int | None = None, **options: Any
) -> tuple[RunResult, EventLog, InOrder]:
    """``arun`` of a step asking for a ``lookup`` per key, the calls finishing in
    ``order`` (see :class:`InOrder`); checks that no task is left behind."""

    async def main() -> tuple[RunResult, EventLog, InOrder]:
        calls = InOrder(order, together)
        log = EventLog()
        result = await arun(
            [USER],
            model=script(*["lookup"] * len(order)),
            tools=[calls.tool()],
            hooks=calls.hooks,
            parallel_tools=True,
            log=log,
            **options,
        )
        assert left_behind() == set()
        return result, log, calls

    return go(main())


# --------------------------------------------------------------------------- order


def test_results_are_sent_in_completion_order_and_kept_in_source_order() -> None:
    result, log, calls = arun_in_order(["k3", "k1", "k2"], clock=Ticker())
    assert result.status == "completed" and result.final_text == "done"
    assert calls.started == ["k1", "k2", "k3"]  # all three ran at the same time
    assert arrival(log) == ["c3", "c1", "c2"]
    assert results(result.messages) == [
        ("c1", "k1", False),
        ("c2", "k2", False),
        ("c3", "k3", False),
    ]
    stamps = [e.at for e in log if e.type == "tool.result"]
    assert None not in stamps  # stamped by the driver's clock as they are sent
    assert stamps == sorted(at for at in stamps if at is not None)
    replays(log, calls.hooks)


@settings(max_examples=examples(40), deadline=None)
@given(st.integers(1, 5).flatmap(lambda n: st.permutations([f"k{i}" for i in range(1, n + 1)])))
def test_any_completion_order_keeps_the_models_order_and_replays(order: list[str]) -> None:
    result, log, calls = arun_in_order(order)
    ids = [f"c{key[1:]}" for key in order]
    assert arrival(log) == ids
    assert [call_id for call_id, _, _ in results(result.messages)] == sorted(ids)
    replayed = replay(log.events, hooks=calls.hooks)
    assert encoded(replayed.events) == encoded(log) and replayed.result == result


def test_arun_writes_the_log_run_writes_for_the_same_completion_order() -> None:
    order = ["k2", "k3", "k1"]
    turns = {key: threading.Event() for key in order}

    def after(payload: dict[str, Any]) -> None:
        position = order.index(payload["content"]) + 1
        if position < len(order):
            turns[order[position]].set()

    @tool
    def lookup(key: str) -> str:
        """Look a key up."""
        assert turns[key].wait(PATIENCE)
        return key

    def session() -> dict[str, Any]:
        for turn in turns.values():
            turn.clear()
        turns[order[0]].set()
        return {
            "model": script("lookup", "lookup", "lookup"),
            "tools": [lookup],
            "hooks": HookRegistry({"after_tool_call": after}),
            "parallel_tools": True,
            "clock": Ticker(),
            "log": EventLog(),
        }

    options = session()
    expected = run([USER], **options)
    sync_log = options["log"]
    options = session()
    result = go(arun([USER], **options))
    assert result == expected
    assert arrival(sync_log) == ["c2", "c3", "c1"]
    assert encoded(options["log"]) == encoded(sync_log)
    assert sync_log[0].parallel_tools is True  # recorded in session.start


def test_async_and_sync_tools_run_together_in_one_batch() -> None:
    # Each waits for the other: only a concurrent run gets through.
    in_thread = threading.Event()

    async def main() -> RunResult:
        in_loop = asyncio.Event()
        loop = asyncio.get_running_loop()

        @tool
        def sync_lookup(key: str) -> str:
            """In a worker thread."""
            loop.call_soon_threadsafe(in_loop.set)
            assert in_thread.wait(PATIENCE)
            return key.upper()

        @tool
        async def async_lookup(key: str) -> str:
            """In the event loop."""
            in_thread.set()
            await in_loop.wait()
            return key

        return await arun(
            [USER],
            model=script("sync_lookup", "async_lookup"),
            tools=[sync_lookup, async_lookup],
            parallel_tools=True,
        )

    result = go(main())
    assert results(result.messages) == [("c1", "K1", False), ("c2", "k2", False)]


# --------------------------------------------------------------------------- batch shapes


def test_a_sequential_tool_runs_alone_between_batches() -> None:
    running: list[str] = []
    seen: list[list[str]] = []

    async def main() -> RunResult:
        pair = asyncio.Event()

        async def enter(key: str) -> None:
            running.append(key)
            seen.append(sorted(running))
            await asyncio.sleep(0)

        @tool
        async def lookup(key: str) -> str:
            """Runs in batches."""
            await enter(key)
            if key != "k1":  # c3 and c4 run together
                if len(running) == 2:
                    pair.set()
                await pair.wait()
            running.remove(key)
            return key

        @tool(sequential=True)
        def write(key: str) -> str:
            """Runs alone (in a worker thread)."""
            running.append(key)
            seen.append(sorted(running))
            running.remove(key)
            return key

        return await arun(
            [USER],
            model=script("lookup", "write", "lookup", "lookup"),
            tools=[lookup, write],
            parallel_tools=True,
        )

    result = go(main())
    assert result.status == "completed"
    assert [m[0] for m in results(result.messages)] == ["c1", "c2", "c3", "c4"]
    assert seen == [["k1"], ["k2"], ["k3"], ["k3", "k4"]]


def test_tool_workers_caps_the_calls_running_at_once() -> None:
    running = 0
    most = 0

    @tool
    async def lookup(key: str) -> str:
        """A few event-loop turns long."""
        nonlocal running, most
        running += 1
        most = max(most, running)
        for _ in range(3):
            await asyncio.sleep(0)
        running -= 1
        return key

    model = script(*["lookup"] * 5)
    result = go(arun([USER], model=model, tools=[lookup], parallel_tools=True, tool_workers=2))
    assert result.status == "completed" and most == 2
    most = 0
    go(arun([USER], model=script(*["lookup"] * 5), tools=[lookup], parallel_tools=True))
    assert most == 5  # no cap by default


def test_the_budget_cuts_a_batch_where_the_sequential_loop_pauses() -> None:
    result, log, calls = arun_in_order(
        ["k2", "k1", "k3"],  # c1 and c2 run together, then c3
        together=2,
        budget=Budget(max_tool_calls=2),
        on_pause=lambda pause: Resume(),
    )
    assert result.status == "completed"
    shape = [
        e.type + (f" {e.call.id}" if e.type == "tool.call" else "")
        for e in log
        if e.type.startswith(("tool.", "session.pause", "session.resume"))
    ]
    assert shape == [
        "tool.call c1",
        "tool.call c2",
        "tool.result",
        "tool.result",
        "session.pause",
        "session.resume",
        "tool.call c3",
        "tool.result",
    ]
    assert arrival(log) == ["c2", "c1", "c3"]
    assert [m[0] for m in results(result.messages)] == ["c1", "c2", "c3"]
    replays(log, calls.hooks)


def test_approval_pauses_come_one_by_one_before_the_batch() -> None:
    started: list[str] = []
    asked: list[tuple[str, list[str]]] = []

    @tool
    async def lookup(key: str) -> str:
        """Needs approval."""
        started.append(key)
        await asyncio.sleep(0)
        return key

    def before(payload: dict[str, Any]) -> PauseRequest:
        return PauseRequest("approval")

    async def on_pause(pause: Pause) -> Resume:
        asked.append((pause.payload["call"]["id"], list(started)))
        await asyncio.sleep(0)
        return Resume({"approved": pause.payload["call"]["id"] != "c2"})

    log = EventLog()
    hooks = HookRegistry({"before_tool_call": before})
    result = go(
        arun(
            [USER],
            model=script("lookup", "lookup", "lookup"),
            tools=[lookup],
            hooks=hooks,
            on_pause=on_pause,
            parallel_tools=True,
            log=log,
        )
    )
    assert asked == [("c1", []), ("c2", []), ("c3", [])]  # before any call started
    assert sorted(started) == ["k1", "k3"]
    got = results(result.messages)
    assert [m[0] for m in got] == ["c1", "c2", "c3"] and got[1][2]  # c2 denied: an error
    replays(log, hooks)


def test_adrive_runs_the_batches_of_a_parallel_loop() -> None:
    async def main() -> RunResult:
        calls = InOrder(["k1", "k2"], together=1)
        loop = agent_loop([USER], tools=[calls.tool()], hooks=calls.hooks, parallel_tools=True)
        return await adrive(
            loop, model=script("lookup", "lookup"), tools=[calls.tool()], tool_workers=1
        )

    result = go(main())
    assert results(result.messages) == [("c1", "k1", False), ("c2", "k2", False)]


def test_arun_stream_yields_a_batchs_results_as_they_arrive() -> None:
    async def main() -> list[Any]:
        calls = InOrder(["k2", "k1"])
        items = arun_stream(
            [USER],
            model=script("lookup", "lookup"),
            tools=[calls.tool()],
            hooks=calls.hooks,
            parallel_tools=True,
            tool_workers=2,
        )
        async with contextlib.aclosing(items):
            return [item async for item in items]

    items = go(main())
    assert [e.message.tool_call_id for e in items[:-1] if e.type == "tool.result"] == ["c2", "c1"]
    assert type(items[-1]) is RunResult and items[-1].final_text == "done"


def test_leaving_arun_stream_mid_batch_cancels_the_calls_still_running() -> None:
    cancelled: list[str] = []

    async def main() -> EventLog:
        @tool
        async def lookup(key: str) -> str:
            """k1 finishes at once; k2 waits until cancelled."""
            if key == "k1":
                return key
            return await until_cancelled(key, cancelled)

        log = EventLog()
        items = arun_stream(
            [USER], model=script("lookup", "lookup"), tools=[lookup], parallel_tools=True, log=log
        )
        async with contextlib.aclosing(items):
            async for item in items:
                if item.type == "tool.result":  # type: ignore[union-attr]
                    break
        assert left_behind() == set()
        return log

    log = go(main())
    assert cancelled == ["k2"] and arrival(log) == ["c1"]
    assert log[-1].type == "run.finished" and log[-1].reason == "closed"


# --------------------------------------------------------------------------- errors


def test_an_async_tool_raising_in_a_batch_is_an_error_result_for_that_call_only() -> None:
    @tool
    async def lookup(key: str) -> str:
        """Fails for k2."""
        await asyncio.sleep(0)
        if key == "k2":
            raise LookupError("no such key")
        return key

    @tool
    async def count(key: int) -> int:
        """Takes an int, and the model sends a string."""
        return key  # never called

    model = script("lookup", "lookup", "count")
    log = EventLog()
    result = go(arun([USER], model=model, tools=[lookup, count], parallel_tools=True, log=log))
    assert result.status == "completed"
    got = results(result.messages)
    assert got[0] == ("c1", "k1", False)
    assert got[1] == ("c2", "LookupError: no such key", True)
    assert got[2][0] == "c3" and got[2][2] and got[2][1].startswith("invalid arguments")
    replays(log)


class Halt(BaseException):
    pass


async def interrupted(key: str) -> str:
    raise KeyboardInterrupt("stop it")


def halted(key: str) -> str:
    raise Halt("stop it")


@pytest.mark.parametrize(("fn", "reason"), [(interrupted, "KeyboardInterrupt"), (halted, "Halt")])
def test_a_base_exception_from_a_batch_tool_is_recorded_then_raised(
    fn: Callable[[str], Any], reason: str
) -> None:
    cancelled: list[str] = []

    async def main() -> EventLog:
        @tool
        async def lookup(key: str) -> str:
            """Waits until cancelled."""
            return await until_cancelled(key, cancelled)

        log = EventLog()
        with pytest.raises((KeyboardInterrupt, Halt)) as raised:
            await arun(
                [USER],
                model=script("lookup", "halt"),
                tools=[lookup, Tool(fn, name="halt")],
                parallel_tools=True,
                log=log,
            )
        assert type(raised.value).__name__ == reason
        assert left_behind() == set()
        return log

    log = go(main())
    finished = log[-1]
    assert finished.type == "run.finished" and finished.status == "cancelled"
    assert finished.reason == f"{reason}: stop it"
    assert cancelled == ["k1"]  # the other call was cancelled, not left running
    replays(log)


# --------------------------------------------------------------------------- cancel


def test_a_cancel_lets_the_calls_running_finish_and_a_waiting_one_never_starts() -> None:
    signal = CancelToken()
    started: list[str] = []

    async def main() -> tuple[RunResult, EventLog]:
        second_started = asyncio.Event()
        second_may_finish = asyncio.Event()

        @tool
        async def lookup(key: str) -> str:
            """c1 cancels the run while c2 runs; c3 waits for a worker."""
            started.append(key)
            if key == "k1":
                await second_started.wait()
                signal.cancel("enough")
            else:
                second_started.set()
                await second_may_finish.wait()
            return key

        def after(payload: dict[str, Any]) -> None:
            second_may_finish.set()  # c1's result is recorded: c2 finishes after it

        log = EventLog()
        result = await arun(
            [USER],
            model=script("lookup", "lookup", "lookup"),
            tools=[lookup],
            hooks=HookRegistry({"after_tool_call": after}),
            signal=signal,
            parallel_tools=True,
            tool_workers=2,
            log=log,
        )
        assert left_behind() == set()
        return result, log

    result, log = go(main())
    assert (result.status, result.reason) == ("cancelled", "enough")
    assert started == ["k1", "k2"]  # c3 never started
    assert results(result.messages) == [("c1", "k1", False), ("c2", "k2", False)]
    assert arrival(log) == ["c1", "c2"]
    assert [e.call.id for e in log if e.type == "tool.call"] == ["c1", "c2", "c3"]
    assert replay(log.events).result == result


def test_cancelling_the_task_mid_batch_cancels_the_calls_then_raises() -> None:
    cancelled: list[str] = []
    release = threading.Event()  # a thread cannot be interrupted: the test lets it go

    async def main() -> tuple[EventLog, set[asyncio.Task[Any]]]:
        running = asyncio.Event()
        loop = asyncio.get_running_loop()

        @tool
        async def lookup(key: str) -> str:
            """k1 finishes at once; the others wait until cancelled."""
            if key == "k1":
                return key
            return await until_cancelled(key, cancelled)

        @tool
        def blocking(key: str) -> str:
            """In a worker thread, until released."""
            loop.call_soon_threadsafe(running.set)
            release.wait(PATIENCE)
            return key

        log = EventLog()
        task = asyncio.create_task(
            arun(
                [USER],
                model=script("lookup", "lookup", "blocking"),
                tools=[lookup, blocking],
                parallel_tools=True,
                log=log,
            )
        )
        await running.wait()
        while not arrival(log):  # c1's result is in
            await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        behind = left_behind()
        release.set()
        return log, behind

    log, behind = go(main())
    assert behind == set()  # no tool task outlives the run
    assert cancelled == ["k2"]
    finished = log[-1]
    assert finished.type == "run.finished" and finished.reason == "task cancelled"
    replayed = replay(log.events)
    assert encoded(replayed.events) == encoded(log)
    assert results(replayed.result.messages) == [("c1", "k1", False)]  # kept, none invented


def test_an_inbox_cancel_mid_batch_cancels_the_calls_still_running() -> None:
    cancelled: list[str] = []

    async def main() -> RunResult:
        inbox = Inbox()

        @tool
        async def lookup(key: str) -> str:
            """k1 asks to stop; k2 waits until cancelled."""
            if key == "k1":
                inbox.cancel("stop")
                return key
            return await until_cancelled(key, cancelled)

        result = await arun(
            [USER],
            model=script("lookup", "lookup"),
            tools=[lookup],
            inbox=inbox,
            parallel_tools=True,
        )
        assert left_behind() == set()
        return result

    result = go(main())
    assert (result.status, result.reason) == ("cancelled", "stop")
    assert results(result.messages) == [("c1", "k1", False)] and cancelled == ["k2"]


# --------------------------------------------------------------------------- options


def test_options_are_checked_as_run_checks_them() -> None:
    loop = agent_loop([USER], tools=[], parallel_tools=True)
    model = script()
    for bad in (0, -1, 1.5, True):
        message = "tool_workers must be a positive int or None"
        with pytest.raises(ValueError, match=message):
            go(arun([USER], model=model, tools=[], tool_workers=bad))  # type: ignore[arg-type]
        with pytest.raises(ValueError, match=message):
            arun_stream([USER], model=model, tools=[], tool_workers=bad)  # type: ignore[arg-type]
        with pytest.raises(ValueError, match=message):
            go(adrive(loop, model=model, tools=[], tool_workers=bad))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="parallel_tools must be a bool") as raised:
        go(arun([USER], model=model, tools=[], parallel_tools="yes"))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=str(raised.value)):
        run([USER], model=model, tools=[], parallel_tools="yes")  # type: ignore[arg-type]
