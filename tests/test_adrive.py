"""``arun``/``adrive``/``arun_stream``: the asyncio drivers over the same generator."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator, Coroutine
from typing import Any, TypeVar

import pytest

import replay
from agentloop import (
    AsyncModel,
    Cancel,
    CancelToken,
    EventLog,
    FunctionModel,
    Inbox,
    ModelChunk,
    ModelFailure,
    ModelRequest,
    ModelResponse,
    Pause,
    Resume,
    ScriptedModel,
    ScriptedResponse,
    TextBlock,
    Tool,
    ToolCall,
    ToolCallEvent,
    ToolResultMessage,
    Usage,
    adrive,
    agent_loop,
    arun,
    arun_stream,
    tool,
)

from .helpers import ADD_CALL, USER, Ticker, add, encoded, reference, script

T = TypeVar("T")


def go(coroutine: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coroutine)


@tool(name="add")
async def async_add(left: int, right: int) -> dict[str, int]:
    """Add two integers."""
    await asyncio.sleep(0)
    return {"sum": left + right}


def answer(request: ModelRequest) -> ScriptedResponse:
    last = request.messages[-1]
    if type(last) is ToolResultMessage:
        return ScriptedResponse.text("r2", "20 + 22 = 42", usage=Usage(20, 7))
    return ScriptedResponse.tool_calls("r1", ADD_CALL, text="Let me add.", usage=Usage(10, 5))


async def async_answer(request: ModelRequest) -> ScriptedResponse:
    await asyncio.sleep(0)
    return answer(request)


# --------------------------------------------------------------------------- same log as run


@pytest.mark.parametrize(
    ("model", "tools"),
    [
        pytest.param(lambda: ScriptedModel(script()), [add], id="scripted, sync tool"),
        pytest.param(lambda: ScriptedModel(script()), [async_add], id="scripted, async tool"),
        pytest.param(lambda: FunctionModel(answer), [add], id="function"),
        pytest.param(lambda: FunctionModel(async_answer), [async_add], id="async function"),
    ],
)
def test_arun_writes_the_log_run_writes(model, tools):
    expected, expected_log = reference()
    log = EventLog()
    result = go(arun([USER], model=model(), tools=tools, log=log, clock=Ticker()))
    assert result == expected
    assert encoded(log) == encoded(expected_log)
    replay.replay(log)


def test_scripted_and_function_models_are_both_kinds():
    assert isinstance(ScriptedModel([]), AsyncModel)
    assert isinstance(FunctionModel(answer), AsyncModel)
    assert FunctionModel(answer).asynchronous is None
    assert FunctionModel(async_answer).asynchronous is True


def test_a_sync_tool_runs_in_a_worker_thread():
    threads: list[int] = []

    @tool
    def where() -> str:
        threads.append(threading.get_ident())
        return "here"

    model = ScriptedModel(
        [
            ScriptedResponse.tool_calls("r1", ToolCall("c1", "where", {})),
            ScriptedResponse.text("r2", "ok"),
        ]
    )
    go(arun([USER], model=model, tools=[where]))
    assert threads and threads[0] != threading.get_ident()


def test_async_tool_errors_and_bad_arguments_are_results():
    @tool
    async def boom(n: int) -> str:
        raise ValueError(f"no {n}")

    model = ScriptedModel(
        [
            ScriptedResponse.tool_calls(
                "r1", ToolCall("c1", "boom", {"n": 1}), ToolCall("c2", "boom", {"n": "x"})
            ),
            ScriptedResponse.text("r2", "ok"),
        ]
    )
    result = go(arun([USER], model=model, tools=[boom]))
    assert [m.content for m in result.messages[2:4]] == [
        "ValueError: no 1",
        "invalid arguments: Expected `int`, got `str` - at `$.n`",
    ]
    with pytest.raises(TypeError, match="await its aexecute"):
        boom.execute(ToolCall("c1", "boom", {"n": 1}))


def test_adrive_continues_a_resumed_loop():
    expected, full = reference()
    upto = next(e.sequence for e in full if type(e) is ToolCallEvent)
    loop, _ = replay.resume(list(full)[: upto + 1])
    result = go(
        adrive(loop, model=ScriptedModel(script()[1:]), tools=[add], clock=Ticker(100.0 + upto))
    )
    assert result == expected
    replay.replay(loop.log)


# --------------------------------------------------------------------------- models


class Items:
    """An async model built from a list of items per request (or an exception)."""

    def __init__(self, *items: Any, awaitable: bool = False) -> None:
        self.items = items
        self.awaitable = awaitable
        self.closed = 0

    def astream(self, request: ModelRequest) -> Any:
        if self.awaitable:
            return self._later(request)
        return self._gen(request)

    async def _later(self, request: ModelRequest) -> AsyncIterator[Any]:
        return self._gen(request)

    async def _gen(self, request: ModelRequest) -> AsyncIterator[Any]:
        try:
            for item in self.items:
                if isinstance(item, BaseException):
                    raise item
                yield item(request) if callable(item) else item
        finally:
            self.closed += 1


def chunk(text: str) -> Any:
    return lambda request: ModelChunk(request.id, TextBlock(text))


def response(text: str) -> Any:
    return lambda request: ModelResponse(request.id, "r1", (TextBlock(text),), "stop")


@pytest.mark.parametrize("awaitable", [False, True])
def test_an_async_model_streams_chunks_then_the_response(awaitable):
    model = Items(chunk("Hel"), chunk("lo"), response("Hello"), awaitable=awaitable)
    log = EventLog()
    result = go(arun([USER], model=model, tools=[], log=log))
    assert result.final_text == "Hello"
    assert [e.type for e in log].count("model.chunk") == 2
    assert model.closed == 1


@pytest.mark.parametrize(
    ("model", "code", "message"),
    [
        (Items(chunk("a")), "MODEL_ERROR", "model stream ended without a response"),
        (Items(chunk("a"), ValueError("down")), "MODEL_ERROR", "ValueError: down"),
        (Items("not an item"), "MODEL_PROTOCOL_ERROR", "yielded str"),
        (Items(lambda r: ModelFailure(r.id, "quota")), "MODEL_ERROR", "quota"),
    ],
)
def test_async_model_failures_end_the_run_failed(model, code, message):
    result = go(arun([USER], model=model, tools=[]))
    assert result.status == "failed" and result.error.code == code
    assert message in result.error.message
    assert model.closed == 1


def test_an_astream_that_raises_at_once_is_a_failure():
    class Broken:
        def astream(self, request: ModelRequest) -> Any:
            raise ConnectionError("no route")

    result = go(arun([USER], model=Broken(), tools=[]))
    assert result.error.message.endswith("model call failed: ConnectionError: no route")


def test_arun_refuses_a_sync_only_model():
    class Sync:
        def stream(self, request: ModelRequest) -> Any:
            raise AssertionError

    with pytest.raises(TypeError, match=r"has no astream\(request\), so arun/adrive"):
        go(arun([USER], model=Sync(), tools=[]))

    class SyncOnly(ScriptedModel):
        asynchronous = False

    with pytest.raises(TypeError, match=r"openai\.AsyncOpenAI"):
        go(arun([USER], model=SyncOnly([]), tools=[]))


# --------------------------------------------------------------------------- pauses, cancel


APPROVED = Tool(add.fn, requires_approval=True)


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_on_pause_may_be_async(kind):
    async def async_on_pause(pause: Pause) -> Resume:
        await asyncio.sleep(0)
        return Resume({"approved": True})

    on_pause = async_on_pause if kind == "async" else (lambda pause: Resume({"approved": True}))
    result = go(
        arun(
            [USER],
            model=ScriptedModel(script()),
            tools=[APPROVED],
            on_pause=on_pause,
        )
    )
    assert result.final_text == "20 + 22 = 42"


def test_a_pause_without_on_pause_cancels():
    result = go(arun([USER], model=ScriptedModel(script()), tools=[APPROVED]))
    assert result.status == "cancelled"
    assert result.reason.startswith("approval needed for tool 'add' (call c1) and no on_pause")


def test_cancel_token_and_inbox_work_under_arun():
    token = CancelToken()
    token.cancel("stop")
    result = go(arun([USER], model=ScriptedModel(script()), tools=[add], signal=token))
    assert result.reason == "stop"
    inbox = Inbox()

    async def later(request: ModelRequest) -> ScriptedResponse:
        inbox.cancel("from the inbox")
        return answer(request)

    result = go(arun([USER], model=FunctionModel(later), tools=[add], inbox=inbox))
    assert result.reason == "from the inbox"


def test_cancelling_the_task_records_the_cancel_then_raises():
    started = asyncio.Event

    async def main() -> EventLog:
        running = started()

        @tool
        async def wait_forever() -> str:
            running.set()
            await asyncio.Event().wait()
            return "never"

        model = ScriptedModel(
            [ScriptedResponse.tool_calls("r1", ToolCall("c1", "wait_forever", {}))]
        )
        log = EventLog()
        task = asyncio.create_task(arun([USER], model=model, tools=[wait_forever], log=log))
        await running.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return log

    log = go(main())
    assert log[-1].type == "run.finished" and log[-1].status == "cancelled"
    assert log[-1].reason == "task cancelled" and log[-2].reply.at is not None
    replay.replay(log)


def test_a_timeout_cancels_a_slow_model_stream():
    class Slow:
        closed = False

        async def astream(self, request: ModelRequest) -> AsyncIterator[Any]:
            try:
                yield ModelChunk(request.id, TextBlock("Hel"))
                await asyncio.sleep(60)
            finally:
                Slow.closed = True

    log = EventLog()

    async def main() -> None:
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(arun([USER], model=Slow(), tools=[], log=log), 0.05)

    go(main())
    assert log[-1].reason == "task cancelled" and Slow.closed
    assert [e.type for e in log].count("model.chunk") == 1


def test_another_exception_is_recorded_like_run_does():
    async def on_pause(pause: Pause) -> Resume:
        raise KeyboardInterrupt

    log = EventLog()
    with pytest.raises(KeyboardInterrupt):
        go(
            arun(
                [USER],
                model=ScriptedModel(script()),
                tools=[APPROVED],
                on_pause=on_pause,
                log=log,
            )
        )
    assert log[-1].reason == "KeyboardInterrupt: "


# --------------------------------------------------------------------------- streaming


def test_arun_stream_yields_the_events_then_the_result():
    expected, expected_log = reference()

    async def main() -> list[Any]:
        items = arun_stream([USER], model=ScriptedModel(script()), tools=[add], clock=Ticker())
        return [item async for item in items]

    items = go(main())
    assert items[-1] == expected
    assert encoded(items[:-1]) == encoded(expected_log)


def test_leaving_arun_stream_early_cancels_the_run():
    log = EventLog()

    async def main() -> None:
        items = arun_stream([USER], model=ScriptedModel(script()), tools=[add], log=log)
        async with contextlib.aclosing(items):
            async for item in items:
                if item.type == "tool.call":
                    break

    go(main())
    assert log[-1].status == "cancelled" and log[-1].reason == "closed"


def test_arun_stream_checks_options_at_once():
    with pytest.raises(TypeError, match="on_event must be callable"):
        arun_stream([USER], model=ScriptedModel([]), tools=[], on_event=1)  # type: ignore[arg-type]


def test_on_event_under_arun():
    seen: list[Any] = []
    log = EventLog()
    go(arun([USER], model=ScriptedModel(script()), tools=[add], log=log, on_event=seen.append))
    assert seen == list(log)


def test_adrive_on_a_finished_loop_and_on_an_invalid_transcript():
    loop = agent_loop([ToolResultMessage("t1", "c9", "add", "x")], tools=[])
    assert go(adrive(loop, model=ScriptedModel([]), tools=[])).error.code == "INVALID_TRANSCRIPT"
    assert go(adrive(loop, model=ScriptedModel([]), tools=[])).status == "failed"
    assert Cancel("x") != Cancel("y")


def test_a_cancel_before_an_async_tool_skips_it():
    token = CancelToken()

    def on_event(event: Any) -> None:
        if event.type == "tool.call":
            token.cancel("not now")

    called: list[str] = []

    @tool(name="add")
    async def counting_add(left: int, right: int) -> int:
        called.append("add")
        return left + right

    result = go(
        arun(
            [USER],
            model=ScriptedModel(script()),
            tools=[counting_add],
            signal=token,
            on_event=on_event,
        )
    )
    assert result.reason == "not now" and called == []


@pytest.mark.parametrize("model", [ScriptedModel(script()), FunctionModel(async_answer)])
def test_astream_can_be_read_to_its_end(model):
    async def main() -> list[Any]:
        request = ModelRequest("request-001", 1, (USER,), (), None)
        return [item async for item in model.astream(request)]

    items = go(main())
    assert type(items[-1]) is ModelResponse and items[-1].request_id == "request-001"
