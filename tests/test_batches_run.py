"""``run(..., parallel_tools=True)``: tool batches on a thread pool (DESIGN §18).

The tests of behaviour both drivers share run under ``arun`` too (its batches are
asyncio tasks; these sync tools run in worker threads); ``test_abatches.py`` has
the asyncio-only ones."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any

import pytest

from agentloop import (
    CancelToken,
    EventLog,
    HookRegistry,
    ModelResponse,
    RunResult,
    ScriptedModel,
    ScriptedResponse,
    TextBlock,
    ToolCall,
    ToolResult,
    ToolResultMessage,
    UserMessage,
    adrive,
    agent_loop,
    arun,
    content_text,
    drive,
    encode_event,
    run,
    tool,
)
from replay import replay, resume

USER = UserMessage("u1", "go")
#: Generous: a test only waits this long when the code under test is broken.
PATIENCE = 10.0


def script(*names: str) -> ScriptedModel:
    calls = tuple(ToolCall(f"c{i}", name, {"key": f"k{i}"}) for i, name in enumerate(names, 1))
    return ScriptedModel(
        [
            ScriptedResponse("r1", calls, "tool_call"),
            ScriptedResponse("r2", (TextBlock("done"),), "stop"),
        ]
    )


def results(messages: Any) -> list[tuple[str, str, bool]]:
    return [
        (m.tool_call_id, content_text(m.content), m.is_error)
        for m in messages
        if type(m) is ToolResultMessage
    ]


def arrival(log: EventLog) -> list[str]:
    return [e.message.tool_call_id for e in log if e.type in ("tool.result", "tool.error")]


def arun_to_end(messages: Any, **options: Any) -> RunResult:
    return asyncio.run(arun(messages, **options))


Driver = Callable[..., RunResult]
#: Both drivers, for the tests of what they share.
DRIVERS = pytest.mark.parametrize("driver", [run, arun_to_end], ids=["run", "arun"])


def adrive_to_end(loop: Any, **options: Any) -> RunResult:
    return asyncio.run(adrive(loop, **options))


def ticking() -> Any:
    now = iter(range(1000))
    return lambda: float(next(now))


def test_the_calls_of_a_batch_run_at_the_same_time() -> None:
    # Three calls that each wait for the other two: only concurrent runs get through.
    barrier = threading.Barrier(3, timeout=PATIENCE)

    @tool
    def lookup(key: str) -> str:
        barrier.wait()
        return key.upper()

    result = run([USER], model=script(*["lookup"] * 3), tools=[lookup], parallel_tools=True)
    assert result.status == "completed"
    assert results(result.messages) == [
        ("c1", "K1", False),
        ("c2", "K2", False),
        ("c3", "K3", False),
    ]


def test_results_are_sent_in_completion_order_and_kept_in_source_order() -> None:
    # c3 finishes first, then c1, then c2: each call waits for the one before it.
    order = ["k3", "k1", "k2"]
    finished = {key: threading.Event() for key in order}

    @tool
    def lookup(key: str) -> str:
        position = order.index(key)
        if position:
            assert finished[order[position - 1]].wait(PATIENCE)
        return key

    log = EventLog()

    def after(payload: dict[str, Any]) -> None:
        finished[payload["content"]].set()  # runs as the result arrives, in order

    hooks = HookRegistry({"after_tool_call": after})
    result = run(
        [USER],
        model=script(*["lookup"] * 3),
        tools=[lookup],
        parallel_tools=True,
        hooks=hooks,
        log=log,
        clock=ticking(),
    )
    assert arrival(log) == ["c3", "c1", "c2"]
    assert [m[0] for m in results(result.messages)] == ["c1", "c2", "c3"]
    stamps = [e.at for e in log if e.type == "tool.result"]
    assert None not in stamps and stamps == sorted(at for at in stamps if at is not None)
    replayed = replay(log.events, hooks=hooks)
    assert [encode_event(e) for e in replayed.events] == [encode_event(e) for e in log]


@DRIVERS
def test_a_tool_raising_in_a_batch_is_an_error_result_for_that_call_only(driver: Driver) -> None:
    @tool
    def lookup(key: str) -> str:
        if key == "k2":
            raise LookupError("no such key")
        return key

    result = driver([USER], model=script(*["lookup"] * 3), tools=[lookup], parallel_tools=True)
    assert result.status == "completed"
    got = results(result.messages)
    assert got[0] == ("c1", "k1", False) and got[2] == ("c3", "k3", False)
    assert got[1][0] == "c2" and got[1][2] and "no such key" in got[1][1]


def test_a_sequential_tool_runs_alone_between_batches() -> None:
    running = 0
    most = 0
    lock = threading.Lock()
    seen: list[tuple[str, int]] = []
    barrier = threading.Barrier(2, timeout=PATIENCE)

    def enter(name: str) -> None:
        nonlocal running, most
        with lock:
            running += 1
            most = max(most, running)
            seen.append((name, running))

    def leave() -> None:
        nonlocal running
        with lock:
            running -= 1

    @tool
    def lookup(key: str) -> str:
        enter("lookup")
        if key != "k1":
            barrier.wait()  # c3 and c4 run together
        leave()
        return key

    @tool(sequential=True)
    def write(key: str) -> str:
        enter("write")
        leave()
        return key

    result = run(
        [USER],
        model=script("lookup", "write", "lookup", "lookup"),
        tools=[lookup, write],
        parallel_tools=True,
    )
    assert result.status == "completed"
    assert [m[0] for m in results(result.messages)] == ["c1", "c2", "c3", "c4"]
    assert ("write", 1) in seen and most == 2


@DRIVERS
def test_a_cancel_lets_running_calls_finish_and_starts_no_more(driver: Driver) -> None:
    signal = CancelToken()
    started: list[str] = []

    @tool
    def lookup(key: str) -> str:
        started.append(key)
        signal.cancel("enough")
        return key

    log = EventLog()
    result = driver(
        [USER],
        model=script(*["lookup"] * 3),
        tools=[lookup],
        parallel_tools=True,
        tool_workers=1,
        signal=signal,
        log=log,
    )
    assert (result.status, result.reason) == ("cancelled", "enough")
    assert started == ["k1"]
    assert results(result.messages) == [("c1", "k1", False)]  # none invented for c2, c3
    assert [e.call.id for e in log if e.type == "tool.call"] == ["c1", "c2", "c3"]
    assert replay(log.events).result == result


@DRIVERS
def test_a_cancel_before_the_batch_starts_runs_no_call(driver: Driver) -> None:
    signal = CancelToken()
    started: list[str] = []

    @tool
    def lookup(key: str) -> str:
        started.append(key)
        return key

    def before(payload: dict[str, Any]) -> None:
        signal.cancel("changed my mind")

    result = driver(
        [USER],
        model=script("lookup", "lookup"),
        tools=[lookup],
        parallel_tools=True,
        signal=signal,
        hooks=HookRegistry({"before_tool_call": before}),
    )
    assert (result.status, result.reason) == ("cancelled", "changed my mind")
    assert started == [] and results(result.messages) == []


@DRIVERS
def test_an_interrupt_in_a_batch_tool_is_recorded_then_raised(driver: Driver) -> None:
    @tool
    def lookup(key: str) -> str:
        if key == "k2":
            raise KeyboardInterrupt("stop it")
        return key

    log = EventLog()
    with pytest.raises(KeyboardInterrupt):
        driver(
            [USER], model=script("lookup", "lookup"), tools=[lookup], parallel_tools=True, log=log
        )
    finished = log[-1]
    assert finished.type == "run.finished" and finished.status == "cancelled"
    assert finished.reason == "KeyboardInterrupt: stop it"


@DRIVERS
def test_tool_workers_must_be_a_positive_int(driver: Driver) -> None:
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="tool_workers must be a positive int or None"):
            driver([USER], model=script("x"), tools=[], tool_workers=bad)


@pytest.mark.parametrize("driver", [drive, adrive_to_end], ids=["drive", "adrive"])
def test_a_loop_resumed_inside_a_batch_runs_only_the_calls_not_answered(driver: Driver) -> None:
    ran: list[str] = []

    @tool
    def lookup(key: str) -> str:
        ran.append(key)
        return key

    @tool(sequential=True)
    def write(key: str) -> str:
        ran.append(key)
        return key

    loop = agent_loop([USER], tools=[lookup, write], parallel_tools=True)
    request = next(loop)
    names = ("lookup", "write", "lookup", "lookup")
    calls = tuple(ToolCall(f"c{i}", name, {"key": f"k{i}"}) for i, name in enumerate(names, 1))
    loop.send(ModelResponse(request.id, "r1", calls, "tool_call"))
    for call_id in ("c1", "c2", "c4"):  # batch(c1), write(c2), batch(c3, c4)
        loop.send(ToolResult(call_id, f"k{call_id[1:]}"))
    events = list(loop.log.events)  # the process died here, inside the last batch
    loop.close()

    live, _ = resume(events)
    model = ScriptedModel([ScriptedResponse("r2", (TextBlock("done"),), "stop")])
    result = driver(live, model=model, tools=[lookup, write])
    assert ran == ["k3"]  # c4 does not run twice
    assert [m[0] for m in results(result.messages)] == ["c1", "c2", "c3", "c4"]
    assert replay(live.log.events).result == result
