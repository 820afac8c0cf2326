"""What only the SDKs' async clients have: the async sleep between retries,
cancellation (the SDK stream and its HTTP response closed on the way out), whole
``arun`` sessions whose log is, byte for byte, the log ``run`` writes with the sync
client, and ``FallbackModel`` over async adapters. (Everything both clients share
is checked with each of them in ``test_conformance.py``.)"""

from __future__ import annotations

import asyncio
import contextlib
import gc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anthropic
import httpx2
import openai
import pytest

import replay
from agentloop import (
    EventLog,
    ModelChunk,
    ModelChunkEvent,
    ModelError,
    ModelRequest,
    ModelResponse,
    PlanDraftEvent,
    RunFinishedEvent,
    RunResult,
    UserMessage,
    arun,
    arun_stream,
    encode_event,
    run,
    tool,
)
from agentloop.models import FallbackModel, RetryPolicy
from agentloop.models.anthropic import AnthropicModel
from agentloop.models.openai import OpenAIChatModel

from .serve import (
    KINDS,
    PROVIDER,
    Body,
    Server,
    body,
    make,
    outcome,
    read,
    replays,
    request,
    responses_turns,
    session,
    weather,
)
from .test_conformance import TEXT, head

REQUEST = request()
A_TEXT = "anthropic/recorded/anthropic-text.chunks.txt"
A_NO_ARGS = "anthropic/recorded/anthropic-tool-no-args.chunks.txt"
C_DEEPSEEK = "openai/recorded/deepseek-tool-call.chunks.txt"
C_EMPTY_CALLS = "openai/recorded/issue-20203-empty-tool-calls.chunks.txt"
G_TEXT = "gemini/recorded/google-text.chunks.txt"
G_TOOL = "gemini/recorded/google-tool-call-gemini3.chunks.txt"
R_REASONING = "openai/recorded/openai-reasoning-encrypted-content.1.chunks.txt"


def error_reply(kind: str, status: int) -> tuple[int, bytes]:
    return status, read(f"{PROVIDER[kind]}/error_{status}.json")


def test_the_default_async_sleep_is_asyncio_sleep() -> None:
    model = make(
        "anthropic",
        Server(error_reply("anthropic", 529), TEXT["anthropic"].body()),
        True,
        retry=RetryPolicy(2, 0.0),
    )
    items, error = outcome(model)
    assert error is None and type(items[-1]) is ModelResponse
    assert [a.retried for a in model.attempts] == [True, False]


def test_a_plain_sleep_function_is_called_with_an_async_client() -> None:
    slept: list[float] = []
    model = make(
        "gemini",
        Server(error_reply("gemini", 429), TEXT["gemini"].body()),
        True,
        retry=RetryPolicy(2, 0.25),
        sleep=slept.append,
    )
    assert outcome(model)[1] is None
    assert slept == [0.25]


def test_the_async_cloud_clients_are_async_too() -> None:
    bedrock = anthropic.AsyncAnthropicBedrock(
        aws_region="us-east-1", aws_access_key="k", aws_secret_key="s"
    )
    assert AnthropicModel(bedrock, "anthropic.claude-test").asynchronous
    azure = openai.AsyncAzureOpenAI(
        api_key="k", api_version="2025-01-01", azure_endpoint="https://x.test"
    )
    assert OpenAIChatModel(azure, "gpt-test").asynchronous


# =========================================================================== cancellation


@pytest.mark.parametrize("kind", KINDS)
def test_cancelling_the_awaiting_task_closes_the_sdk_stream(kind: str) -> None:
    waiting = Body(head(kind), hang=True)  # the model never finishes
    model = make(kind, Server(waiting), True)
    log = EventLog()

    async def main() -> None:
        first_delta = asyncio.Event()

        def on_event(event: Any) -> None:
            if type(event) is ModelChunkEvent:
                first_delta.set()

        task = asyncio.create_task(
            arun([UserMessage("u1", "Hi")], model=model, tools=[], log=log, on_event=on_event)
        )
        await first_delta.wait()
        assert not waiting.closed
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        # Closed on the way out, not later by the event loop's clean-up of abandoned
        # async generators (asyncio.run's end would close it too).
        assert waiting.closed

    asyncio.run(main())
    finished = log.events[-1]
    assert type(finished) is RunFinishedEvent
    assert (finished.status, finished.reason) == ("cancelled", "task cancelled")
    replays(log)


@pytest.mark.parametrize("kind", KINDS)
def test_leaving_arun_stream_early_closes_the_sdk_stream(kind: str) -> None:
    waiting = Body(head(kind), hang=True)
    model = make(kind, Server(waiting), True)

    async def main() -> list[Any]:
        seen: list[Any] = []
        items = arun_stream([UserMessage("u1", "Hi")], model=model, tools=[])
        async with contextlib.aclosing(items):
            async for item in items:
                seen.append(item)
                if type(item) is ModelChunkEvent:
                    break
        if kind == "gemini":
            # The adapter closed the SDK's stream at once, but google-genai's is a
            # chain of async generators, one of them in a reference cycle
            # (HttpResponse.segment_iterator): the response is closed when the
            # garbage collector breaks the cycle and the event loop finalizes them.
            assert not waiting.closed
            for turn in range(200):  # (one generator of the chain per turn or two)
                if waiting.closed:
                    break
                if turn % 20 == 19:
                    gc.collect()
                await asyncio.sleep(0)
        assert waiting.closed  # at once (Gemini: see above)
        return seen

    seen = asyncio.run(main())
    assert type(seen[-1]) is ModelChunkEvent


# =========================================================================== whole sessions


@tool
def updateIssueList() -> str:
    """Update the issue list."""
    return "updated"


@tool
def calculator(a: float, b: float, op: str) -> str:
    """A minimal calculator for basic arithmetic. Call it once per step."""
    return str(int(a + b if op == "add" else a * b))


SESSIONS: dict[str, tuple[Callable[[], list[bytes]], list[Any], dict[str, Any]]] = {
    "chat": (lambda: [body(C_DEEPSEEK), body(C_EMPTY_CALLS)], [weather], {}),
    "responses": (lambda: responses_turns(R_REASONING), [calculator], {"store": False}),
    "anthropic": (lambda: [body(A_NO_ARGS), body(A_TEXT)], [updateIssueList], {}),
    "gemini": (lambda: [body(G_TOOL), body(G_TEXT)], [weather], {}),
}


@pytest.mark.parametrize("kind", KINDS)
def test_an_arun_session_writes_the_log_run_writes_byte_for_byte(kind: str, tmp_path: Path) -> None:
    bodies, tools, options = SESSIONS[kind]
    messages = [UserMessage("u1", "Go on.")]
    sync_model = make(kind, Server(*bodies()), False, **options)
    expected, sync_log = session(messages, sync_model, tools=tools, system="Be brief.")
    async_model = make(kind, Server(*bodies()), True, **options)
    got, async_log = session(messages, async_model, tools=tools, system="Be brief.")
    assert type(got) is RunResult and got == expected
    assert got.status == "completed" and got.steps >= 2
    assert [encode_event(e) for e in async_log] == [encode_event(e) for e in sync_log]
    replay.write_log(tmp_path / "sync.jsonl", sync_log.events)
    replay.write_log(tmp_path / "async.jsonl", async_log.events)
    assert (tmp_path / "async.jsonl").read_bytes() == (tmp_path / "sync.jsonl").read_bytes()
    replays(async_log)


# =========================================================================== FallbackModel


def test_fallback_over_async_adapters_writes_the_log_of_the_sync_ones(tmp_path: Path) -> None:
    replies = (error_reply("anthropic", 529), body(A_TEXT))

    def fallback(asynchronous: bool) -> FallbackModel:
        server = Server(*replies)
        return FallbackModel(
            make("anthropic", server, asynchronous), make("anthropic", server, asynchronous)
        )

    sync_model, async_model = fallback(False), fallback(True)
    assert (sync_model.asynchronous, async_model.asynchronous) == (False, True)
    hi = [UserMessage("u1", "Hi")]
    expected, sync_log = session(hi, sync_model, tools=[])
    got, async_log = session(hi, async_model, tools=[])
    assert got == expected and got.status == "completed"
    assert [encode_event(e) for e in async_log] == [encode_event(e) for e in sync_log]
    response = next(e.reply for e in async_log if type(e) is PlanDraftEvent)
    assert [(a.kind, a.status_code) for a in response.attempts] == [("server", 529)]
    replays(async_log)


def test_fallback_when_every_async_model_fails() -> None:
    server = Server(error_reply("chat", 500), error_reply("chat", 429))
    model = FallbackModel(make("chat", server, True), make("chat", server, True))

    async def main() -> list[Any]:
        return [item async for item in model.astream(REQUEST)]

    with pytest.raises(ModelError, match=r"^all 2 models failed: ") as caught:
        asyncio.run(main())
    assert [a.status_code for a in caught.value.attempts] == [500, 429]


def test_fallback_does_not_switch_after_the_first_chunk() -> None:
    dropped = Body(head("gemini"), error=httpx2.ReadError("connection reset by peer"))
    server = Server(dropped)
    model = FallbackModel(make("gemini", server, True), make("gemini", server, True))
    items, error = outcome(model)
    assert [type(item) for item in items] == [ModelChunk]
    assert error is not None and error.kind == "connection"
    assert len(server.requests) == 1


class Awaited:
    """An async model whose ``astream`` is an ``async def`` returning a plain async
    iterator (no ``aclose``)."""

    asynchronous = True

    def __init__(self, *items: Any) -> None:
        self.items = items

    def __repr__(self) -> str:
        return "Awaited()"

    async def astream(self, request: ModelRequest) -> Any:
        items = iter(self.items)

        class Replies:
            def __aiter__(self) -> Any:
                return self

            async def __anext__(self) -> Any:
                item = next(items, None)
                if item is None:
                    raise StopAsyncIteration
                if isinstance(item, Exception):
                    raise item
                return item

        return Replies()


def test_fallback_awaits_an_astream_that_is_an_async_def() -> None:
    failing = Awaited(ModelError("HTTP 503", kind="server", status_code=503))
    answering = Awaited(ModelResponse(REQUEST.id, "r1", (), "stop"))
    items, error = outcome(FallbackModel(failing, answering))
    assert error is None
    assert [a.status_code for a in items[-1].attempts] == [503]


def test_fallback_refuses_to_mix_sync_and_async_models() -> None:
    with pytest.raises(TypeError, match="mix sync and async"):
        FallbackModel(make("chat", Server(), False), make("chat", Server(), True))
    with pytest.raises(TypeError, match=r"model 1 must have a stream\(request\) or astream"):
        FallbackModel(Awaited(), object())


def test_fallback_of_async_models_is_refused_by_run_and_can_not_stream() -> None:
    model = FallbackModel(Awaited(), make("chat", Server(), True))
    with pytest.raises(TypeError, match="is asynchronous"):
        run([UserMessage("u1", "Hi")], model=model, tools=[])
    with pytest.raises(TypeError, match="is asynchronous"):
        list(model.stream(REQUEST))


def test_leaving_early_closes_the_fallback_models_stream() -> None:
    waiting = Body(head("chat"), hang=True)
    server = Server(waiting)
    model = FallbackModel(make("chat", server, True), make("chat", server, True))

    async def main() -> None:
        replies = model.astream(REQUEST)
        assert type(await anext(replies)) is ModelChunk
        await replies.aclose()
        assert waiting.closed

    asyncio.run(main())


# =========================================================================== structured output
