"""Regression tests for engine and driver defects of issue 21.

Each test fails (or, under asyncio, would hang: a timeout guards it) on the code
before its fix.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

import replay
from agentloop import (
    Budget,
    EventLog,
    FunctionModel,
    HookRegistry,
    ModelRequest,
    Pause,
    PauseRequest,
    RunFinishedEvent,
    ScriptedModel,
    ScriptedResponse,
    ToolCall,
    ToolResultMessage,
    UserMessage,
    arun,
    arun_stream,
    content_text,
    run,
    run_stream,
    tool,
)
from agentloop._text import exception_text, unanswered_pause
from replay import SQLiteStore

T = TypeVar("T")

#: Seconds a run that should end at once may take before the test calls it hung.
HANG_GUARD = 30.0


def finish(coroutine: Coroutine[Any, Any, T]) -> T:
    """Run ``coroutine``; a hang (the defect) fails the test instead of blocking it."""

    async def guarded() -> T:
        return await asyncio.wait_for(coroutine, HANG_GUARD)

    return asyncio.run(guarded())


# --------------------------------------------------------------- StopIteration in arun


@tool(name="pick")
def sync_stops(n: int) -> str:
    """Raises StopIteration, as next() on an empty iterator does."""
    raise StopIteration("nothing left")


@tool(name="pick")
async def async_stops(n: int) -> str:
    """Raises StopIteration inside a coroutine (PEP 479 makes it a RuntimeError)."""
    raise StopIteration("nothing left")


def _calling_model() -> ScriptedModel:
    return ScriptedModel(
        [
            ScriptedResponse.tool_calls("r1", ToolCall("c1", "pick", {"n": 1})),
            ScriptedResponse.text("r2", "done"),
        ]
    )


def _tool_content(result: Any) -> tuple[str, bool]:
    (message,) = (m for m in result.messages if isinstance(m, ToolResultMessage))
    return content_text(message.content), message.is_error


@pytest.mark.parametrize("parallel", [False, True], ids=["sequential", "parallel"])
def test_arun_sync_tool_raising_stop_iteration_is_a_tool_error_as_under_run(
    parallel: bool,
) -> None:
    messages = [UserMessage("u1", "pick one")]
    expected = run(messages, model=_calling_model(), tools=[sync_stops], parallel_tools=parallel)
    assert expected.status == "completed"
    assert _tool_content(expected) == ("StopIteration: nothing left", True)

    result = finish(
        arun(messages, model=_calling_model(), tools=[sync_stops], parallel_tools=parallel)
    )

    assert result.status == "completed"
    assert _tool_content(result) == _tool_content(expected)


@pytest.mark.parametrize("parallel", [False, True], ids=["sequential", "parallel"])
def test_arun_async_tool_raising_stop_iteration_is_a_tool_error(parallel: bool) -> None:
    result = finish(
        arun(
            [UserMessage("u1", "pick one")],
            model=_calling_model(),
            tools=[async_stops],
            parallel_tools=parallel,
        )
    )

    assert result.status == "completed"
    assert _tool_content(result) == ("RuntimeError: coroutine raised StopIteration", True)


class _StoppingStream:
    """An async model whose stream raises StopIteration (a sync ``astream`` or its
    ``__anext__``)."""

    def __init__(self, where: str) -> None:
        self.where = where

    def astream(self, request: ModelRequest) -> AsyncIterator[Any]:
        if self.where == "astream":
            raise StopIteration("no stream")
        return self._items()

    async def _items(self) -> AsyncIterator[Any]:
        raise StopIteration("no item")
        yield  # pragma: no cover - makes this an async generator


class _SyncStoppingModel:
    """A model whose sync ``stream`` raises StopIteration (for run())."""

    def stream(self, request: ModelRequest) -> Iterator[Any]:
        raise StopIteration("no stream")


@pytest.mark.parametrize(
    ("where", "error"),
    [
        ("astream", "StopIteration: no stream"),
        ("anext", "RuntimeError: async generator raised StopIteration"),
    ],
)
def test_arun_model_raising_stop_iteration_fails_the_run(where: str, error: str) -> None:
    result = finish(arun([UserMessage("u1", "hi")], model=_StoppingStream(where), tools=[]))

    assert result.status == "failed"
    assert result.error is not None
    assert result.error.message == f"step 1: model call failed: {error}"


def test_run_model_raising_stop_iteration_fails_the_run_as_under_arun() -> None:
    result = run([UserMessage("u1", "hi")], model=_SyncStoppingModel(), tools=[])

    assert result.status == "failed"
    assert result.error is not None
    assert result.error.message == "step 1: model call failed: StopIteration: no stream"


# --------------------------------------------------------------- a pause and no on_pause


@tool(name="pay", requires_approval=True)
def pay(amount: int) -> str:
    """Pay (needs approval)."""
    return f"paid {amount}"


@tool(name="pay")
def pay_freely(amount: int) -> str:
    """Pay (no approval)."""
    return f"paid {amount}"


def _ask_a_human(payload: dict[str, Any]) -> PauseRequest:
    return PauseRequest("a human")


HINT = (
    "and no on_pause was given: pass on_pause=... to answer it, or use run_durable to "
    "park the session"
)


def _paying_model() -> ScriptedModel:
    return ScriptedModel(
        [
            ScriptedResponse.tool_calls("r1", ToolCall("c1", "pay", {"amount": 5})),
            ScriptedResponse.tool_calls("r2", ToolCall("c2", "pay", {"amount": 6})),
            ScriptedResponse.text("r3", "done"),
        ]
    )


def _drive(driver: str, log: EventLog, **options: Any) -> Any:
    messages = [UserMessage("u1", "pay")]
    if driver == "run":
        return run(messages, model=_paying_model(), log=log, **options)
    return finish(arun(messages, model=_paying_model(), log=log, **options))


@pytest.mark.parametrize("driver", ["run", "arun"])
@pytest.mark.parametrize(
    ("options", "reason"),
    [
        ({"tools": [pay]}, f"approval needed for tool 'pay' (call c1) {HINT}"),
        (
            {"tools": [pay_freely], "budget": Budget(max_tool_calls=1)},
            f"budget_exceeded:tool_calls: the tool_calls budget was used up {HINT}",
        ),
        (
            {"tools": [pay_freely], "hooks": HookRegistry({"before_tool_call": _ask_a_human})},
            f"a human: a hook paused before tool 'pay' (call c1) {HINT}",
        ),
    ],
    ids=["approval", "budget", "hook"],
)
def test_a_pause_without_on_pause_cancels_naming_the_missing_on_pause(
    driver: str, options: dict[str, Any], reason: str, caplog: pytest.LogCaptureFixture
) -> None:
    log = EventLog()
    with caplog.at_level(logging.WARNING, logger="agentloop"):
        result = _drive(driver, log, **options)

    assert (result.status, result.reason) == ("cancelled", reason)
    finished = log[-1]
    assert type(finished) is RunFinishedEvent
    assert (finished.status, finished.reason) == ("cancelled", reason)
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert [(r.name, r.levelno, r.getMessage()) for r in warnings] == [
        ("agentloop", logging.WARNING, f"run cancelled: {reason}")
    ]
    # The reason is a recorded reply (the Cancel): the log replays as written.
    replayed = replay.replay(list(log), hooks=options.get("hooks"))
    assert replayed.events == tuple(log)
    assert replayed.result == result


# --------------------------------------------------------------- on_event raising


class Boom(Exception):
    pass


def _adding_model() -> ScriptedModel:
    return ScriptedModel(
        [
            ScriptedResponse.tool_calls("r1", ToolCall("c1", "pick", {"n": 1})),
            ScriptedResponse.text("r2", "done"),
        ]
    )


@tool(name="pick")
def pick(n: int) -> str:
    """Pick."""
    return str(n)


def _drive_all(driver: str, log: EventLog, on_event: Any) -> Any:
    """Drive a run to its end with each driver; what it raises propagates."""
    options: dict[str, Any] = {
        "model": _adding_model(),
        "tools": [pick],
        "log": log,
        "on_event": on_event,
    }
    messages = [UserMessage("u1", "pick")]
    if driver == "run":
        return run(messages, **options)
    if driver == "run_stream":
        return list(run_stream(messages, **options))[-1]
    if driver == "arun":
        return finish(arun(messages, **options))

    async def stream() -> Any:
        return [item async for item in arun_stream(messages, **options)][-1]

    return finish(stream())


@pytest.mark.parametrize("driver", ["run", "run_stream", "arun", "arun_stream"])
@pytest.mark.parametrize("at", ["session.start", "tool.call", "tool.result", "run.finished"])
@pytest.mark.parametrize("error", [Boom("bad view"), KeyboardInterrupt()], ids=["Boom", "KI"])
def test_an_on_event_that_raises_finishes_the_log_then_propagates(
    driver: str, at: str, error: BaseException
) -> None:
    told: list[str] = []

    def on_event(event: Any) -> None:
        told.append(event.type)
        if event.type == at:
            raise error

    log = EventLog()
    with pytest.raises(type(error)) as raised:
        _drive_all(driver, log, on_event)

    assert raised.value is error
    types = [event.type for event in log]
    assert types[-1] == "run.finished" and types.count("run.finished") == 1
    assert told == types[: types.index(at) + 1]  # not called again once it raised
    finished = log[-1]
    assert type(finished) is RunFinishedEvent
    if at == "run.finished":  # the run had ended: it keeps its outcome
        assert (finished.status, finished.reason) == ("completed", "goal_met")
    else:  # ended at the driver's next step, as when on_pause raises
        assert finished.status == "cancelled"
        assert finished.reason == exception_text(error)
    replayed = replay.replay(list(log))
    assert replayed.events == tuple(log)


def test_an_on_event_raising_stop_iteration_is_a_runtime_error() -> None:
    def on_event(event: Any) -> None:
        if event.type == "tool.call":
            raise StopIteration("not the end")

    log = EventLog()
    with pytest.raises(RuntimeError, match=r"^on_event raised StopIteration$") as raised:
        _drive_all("run", log, on_event)
    assert type(raised.value.__cause__) is StopIteration
    last = log[-1]
    assert type(last) is RunFinishedEvent
    assert last.reason == "RuntimeError: on_event raised StopIteration"


@pytest.mark.parametrize(
    ("pause", "what"),
    [
        (
            Pause("approval", {"call": {"id": "c9", "name": "pay"}}),
            "approval needed for tool 'pay' (call c9)",
        ),
        (
            Pause("review", {"call": {"id": "c9", "name": "pay"}}),
            "review: a hook paused before tool 'pay' (call c9)",
        ),
        (
            Pause("budget_exceeded:turns", {"limit": "turns"}),
            "budget_exceeded:turns: the turns budget was used up",
        ),
        (Pause("review", {"call": {"id": 9, "name": "pay"}}), "review: the loop paused"),
        (Pause("review", {"call": "c9"}), "review: the loop paused"),
        (Pause("review", ["not", "a", "dict"]), "review: the loop paused"),
        (Pause("review"), "review: the loop paused"),
    ],
)
def test_the_reason_of_an_unanswered_pause_starts_with_the_pause_s(pause: Pause, what: str) -> None:
    reason = unanswered_pause(pause)
    assert reason == f"{what} {HINT}"
    assert reason.startswith(pause.reason)


def test_run_durable_with_an_on_event_that_raises_commits_nothing_more(tmp_path: Path) -> None:
    # As for an on_pause that raises: the exception propagates, the session stays
    # resumable from its last commit, and the next call finishes it.
    def on_event(event: Any) -> None:
        if event.type == "tool.result":
            raise Boom("bad view")

    def model(request: ModelRequest) -> ScriptedResponse:  # positioned by step
        if request.step == 1:
            return ScriptedResponse.tool_calls("r1", ToolCall("c1", "pick", {"n": 1}))
        return ScriptedResponse.text(f"r{request.step}", "done")

    options: dict[str, Any] = {"model": FunctionModel(model), "tools": [pick]}
    with SQLiteStore(tmp_path / "s.db") as store:
        with pytest.raises(Boom):
            replay.run_durable(
                store, "s", [UserMessage("u1", "pick")], on_event=on_event, **options
            )
        info = store.session("s")
        assert not info.finished
        assert "run.finished" not in [event.type for event in store.events("s")]
        result = replay.run_durable(store, "s", **options)
        assert result.status == "completed", result.error
