"""The adapters with the SDKs' async clients, through the real SDKs, on recorded HTTP.

Every case is served twice from the same bodies -- the fixtures of the sync tests
(``fixtures/providers/*``: recorded streams kept byte for byte, sources and licences
in the READMEs next to them, and the hand-made ones listed there) -- once through the
SDK's sync client and once through its async client (``openai.AsyncOpenAI``,
``anthropic.AsyncAnthropic``, a ``google-genai`` client's ``.aio``), both on an
``httpx2.MockTransport``. What ``astream`` yields must be what ``stream`` yields:
the same chunks and response, the same usage, the same errors (message, kind,
status, usage), the same retries and the same request bodies. Then what only the
async path has: the async sleep between retries, cancellation (the SDK stream and
its HTTP response are closed), and whole ``arun`` sessions whose log is, byte for
byte, the log ``run`` writes with the sync client.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import itertools
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("openai")
pytest.importorskip("anthropic")
pytest.importorskip("google.genai")

import anthropic
import httpx2
import msgspec
import openai
from google import genai
from google.genai import types as genai_types
from hypothesis import given, settings
from hypothesis import strategies as st

import replay
from agentloop import (
    EventLog,
    ModelChunk,
    ModelChunkEvent,
    ModelError,
    ModelRequest,
    ModelResponse,
    OutputSpec,
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
from agentloop.models import FallbackModel, RetryAttempt, RetryPolicy
from agentloop.models._common import ModelReply, StreamingModel, output_system, schema_name
from agentloop.models.anthropic import AnthropicModel
from agentloop.models.gemini import GeminiModel
from agentloop.models.openai import OpenAIChatModel, OpenAIResponsesModel

from . import test_models_recorded as recorded
from .test_models_recorded import (
    A_NO_ARGS,
    A_REDACTED,
    A_REFUSAL,
    A_TEXT,
    C_DEEPSEEK,
    C_EMPTY_CALLS,
    C_OPENROUTER_ERROR,
    G_TEXT,
    G_TOOL,
    PROVIDERS,
    R_ERROR,
    R_REASONING,
    R_TOOL,
    WEATHER,
    anthropic_sse,
    cassette_body,
    chunk_lines,
    data_sse,
    read,
    replays,
    responses_turns,
)

KINDS = ("chat", "responses", "anthropic", "gemini")


# =========================================================================== serving


class Body(httpx2.SyncByteStream, httpx2.AsyncByteStream):
    """A response body served in ``pieces``, for either client.

    After the pieces it raises ``error`` (a dropped connection), or with ``hang``
    waits forever (async only: a model still thinking). ``closed`` tells whether
    the client closed the response.
    """

    def __init__(self, *pieces: bytes, error: Exception | None = None, hang: bool = False) -> None:
        self.pieces = pieces
        self.error = error
        self.hang = hang
        self.closed = False

    def __iter__(self) -> Iterator[bytes]:
        yield from self.pieces
        if self.error is not None:
            raise self.error

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for piece in self.pieces:
            yield piece
        if self.error is not None:
            raise self.error
        if self.hang:
            await asyncio.Event().wait()

    def close(self) -> None:
        self.closed = True

    async def aclose(self) -> None:
        self.closed = True


class Server(recorded.Server):
    """:class:`tests.test_models_recorded.Server`, for either client."""

    def sent(self) -> list[tuple[str, bytes]]:
        return [(str(r.url), r.content) for r in self.requests]


def make(kind: str, server: Server, asynchronous: bool, **options: Any) -> StreamingModel:
    """The ``kind`` adapter on ``server``, with the SDK's async or sync client."""
    http: httpx2.Client | httpx2.AsyncClient
    http = (
        httpx2.AsyncClient(transport=server.transport)
        if asynchronous
        else httpx2.Client(transport=server.transport)
    )
    if kind in ("chat", "responses"):
        client_class = openai.AsyncOpenAI if asynchronous else openai.OpenAI
        client = client_class(
            api_key="test",
            base_url="https://api.openai.test/v1",
            http_client=http,  # type: ignore[arg-type]
        )
        adapter = OpenAIChatModel if kind == "chat" else OpenAIResponsesModel
        return adapter(client, "gpt-test", **options)
    if kind == "anthropic":
        anthropic_class = anthropic.AsyncAnthropic if asynchronous else anthropic.Anthropic
        messages_client = anthropic_class(
            api_key="test",
            base_url="https://api.anthropic.test",
            http_client=http,  # type: ignore[arg-type]
        )
        return AnthropicModel(messages_client, "claude-test", **options)
    key = "httpx_async_client" if asynchronous else "httpx_client"
    http_options = genai_types.HttpOptions(base_url="https://gemini.test", **{key: http})
    gemini = genai.Client(api_key="test", http_options=http_options)
    return GeminiModel(gemini.aio if asynchronous else gemini, "gemini-test", **options)


REQUEST = ModelRequest("request-001", 1, (UserMessage("u1", "Hi"),), (WEATHER,), "Be kind.")

Outcome = tuple[list[ModelReply], tuple[Any, ...] | None]


def error_fields(error: ModelError) -> tuple[Any, ...]:
    return (error.message, error.provider, error.kind, error.status_code, error.usage)


def collect(model: StreamingModel, request: ModelRequest = REQUEST) -> Outcome:
    items: list[ModelReply] = []
    try:
        for item in model.stream(request):
            items.append(item)
    except ModelError as error:
        return items, error_fields(error)
    return items, None


def acollect(model: StreamingModel, request: ModelRequest = REQUEST) -> Outcome:
    async def main() -> Outcome:
        items: list[ModelReply] = []
        try:
            async for item in model.astream(request):
                items.append(item)
        except ModelError as error:
            return items, error_fields(error)
        return items, None

    return asyncio.run(main())


def both(kind: str, *replies: recorded.Reply, **options: Any) -> tuple[Outcome, Outcome]:
    """What the sync and the async client make of the same replies (and check that
    both sent the same requests)."""
    sync_server, async_server = Server(*replies), Server(*replies)
    expected = collect(make(kind, sync_server, False, **options))
    got = acollect(make(kind, async_server, True, **options))
    assert async_server.sent() == sync_server.sent()
    return expected, got


# =========================================================================== the bodies


def body(path: str) -> bytes:
    """A fixture as the provider's wire format."""
    if path.endswith(".yaml"):
        return cassette_body(path)
    if path.endswith(".sse"):
        return read(path)
    lines = chunk_lines(path)
    if path.startswith("anthropic/"):
        return anthropic_sse(lines)
    return data_sse(lines, crlf=path.startswith("gemini/"))


def fixtures(provider: str, pattern: str) -> list[str]:
    found = sorted(p.relative_to(PROVIDERS) for p in (PROVIDERS / provider).glob(pattern))
    assert found, f"no fixture matches {provider}/{pattern}"
    return [str(path) for path in found]


STREAMS: list[tuple[str, str]] = [
    *[("chat", path) for path in fixtures("openai", "chat_*.sse")],
    ("chat", C_DEEPSEEK),
    ("chat", C_EMPTY_CALLS),
    ("chat", C_OPENROUTER_ERROR),
    *[("responses", path) for path in fixtures("openai", "responses_*.sse")],
    ("responses", R_TOOL),
    ("responses", R_ERROR),
    *[("anthropic", path) for path in fixtures("anthropic", "*.sse")],
    ("anthropic", A_TEXT),
    ("anthropic", A_NO_ARGS),
    ("anthropic", A_REFUSAL),
    ("anthropic", A_REDACTED),
    *[("gemini", path) for path in fixtures("gemini", "*.chunks.txt")],
    ("gemini", G_TEXT),
    ("gemini", G_TOOL),
]

ERROR_BODIES = {
    "chat": "openai",
    "responses": "openai",
    "anthropic": "anthropic",
    "gemini": "gemini",
}
ERRORS: list[tuple[str, str]] = [
    (kind, path) for kind, provider in ERROR_BODIES.items() for path in fixtures(provider, "*.json")
]

#: One text stream per kind (the first text delta comes before the end).
TEXT = {
    "chat": "openai/chat_text.sse",
    "responses": "openai/responses_text.sse",
    "anthropic": "anthropic/text.sse",
    "gemini": G_TEXT,
}
#: What marks the first text delta in each kind's stream.
TEXT_MARK = {
    "chat": b'"content":"Hello"',
    "responses": b"response.output_text.delta",
    "anthropic": b"text_delta",
    "gemini": b'"text":',
}


def status_of(path: str) -> int:
    return int(path.rsplit("_", 1)[1].split(".")[0])


def events(data: bytes) -> list[bytes]:
    separator = b"\r\n\r\n" if b"\r\n\r\n" in data else b"\n\n"
    return [event + separator for event in data.split(separator) if event.strip()]


def head(kind: str) -> bytes:
    """The start of ``kind``'s text stream, up to its first text delta."""
    out = []
    for event in events(body(TEXT[kind])):
        out.append(event)
        if TEXT_MARK[kind] in event:
            return b"".join(out)
    raise AssertionError(f"no text delta in {TEXT[kind]}")


# =========================================================================== same replies


@pytest.mark.parametrize(("kind", "path"), STREAMS, ids=[f"{k}:{p}" for k, p in STREAMS])
def test_a_stream_gives_the_same_replies_with_either_client(kind: str, path: str) -> None:
    expected, got = both(kind, body(path))
    assert got == expected
    items, error = expected
    assert error is not None or type(items[-1]) is not ModelChunk  # it ended, one way or another


@pytest.mark.parametrize(("kind", "path"), ERRORS, ids=[f"{k}:{p}" for k, p in ERRORS])
def test_an_http_error_is_the_same_model_error_with_either_client(kind: str, path: str) -> None:
    expected, got = both(kind, (status_of(path), read(path)))
    assert got == expected
    assert expected[1] is not None and expected[1][3] == status_of(path)


def test_every_turn_of_a_recorded_reasoning_loop_is_the_same() -> None:
    for turn in responses_turns(R_REASONING):
        expected, got = both("responses", turn, store=False)
        assert got == expected
        assert type(expected[0][-1]) is ModelResponse


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(
    "failure",
    [httpx2.ConnectError("connection refused"), httpx2.ReadTimeout("timed out")],
    ids=["connect", "timeout"],
)
def test_a_transport_error_is_the_same_connection_error(kind: str, failure: Exception) -> None:
    expected, got = both(kind, failure)
    assert got == expected
    assert expected[1] is not None and expected[1][2] == "connection"


@pytest.mark.parametrize("kind", KINDS)
def test_a_connection_dropped_mid_stream_is_the_same_error_after_the_same_chunks(
    kind: str,
) -> None:
    dropped = Body(head(kind), error=httpx2.ReadError("connection reset by peer"))
    expected, got = both(kind, dropped, retry=RetryPolicy(3, 1.0), sleep=pytest.fail)
    assert got == expected
    items, error = expected
    assert [type(item) for item in items][-1:] == [ModelChunk]
    assert error is not None and error[2] == "connection"


@settings(max_examples=60, deadline=None)
@given(case=st.sampled_from(STREAMS), data=st.data())
def test_how_the_bytes_arrive_changes_nothing(case: tuple[str, str], data: st.DataObject) -> None:
    """The body cut into arbitrary pieces: the same replies as in one piece, from
    either client."""
    kind, path = case
    whole = body(path)
    cuts = sorted(data.draw(st.sets(st.integers(1, len(whole) - 1), max_size=12), label="cuts"))
    pieces = [whole[start:end] for start, end in itertools.pairwise([0, *cuts, len(whole)])]
    expected, got = both(kind, Body(*pieces))
    assert got == expected
    assert acollect(make(kind, Server(whole), True)) == got


# =========================================================================== retries


def error_reply(kind: str, status: int) -> tuple[int, bytes]:
    return status, read(f"{ERROR_BODIES[kind]}/error_{status}.json")


class Sleeps:
    """An injected async sleep: remembers the delays, returns at once."""

    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.delays.append(seconds)


@pytest.mark.parametrize("kind", KINDS)
def test_retries_wait_with_the_async_sleep_and_are_recorded_as_with_the_sync_client(
    kind: str,
) -> None:
    replies = (error_reply(kind, 429), error_reply(kind, 500), body(TEXT[kind]))
    sync_slept: list[float] = []
    sync_model = make(
        kind, Server(*replies), False, retry=RetryPolicy(3, 0.5), sleep=sync_slept.append
    )
    expected = collect(sync_model)
    sleeps = Sleeps()
    async_model = make(kind, Server(*replies), True, retry=RetryPolicy(3, 0.5), sleep=sleeps)
    assert acollect(async_model) == expected
    assert type(expected[0][-1]) is ModelResponse
    assert sleeps.delays == sync_slept == [0.5, 1.0]
    assert list(async_model.attempts) == list(sync_model.attempts)
    assert [(a.number, a.kind, a.retried) for a in async_model.attempts] == [
        (1, "rate_limit", True),
        (2, "server", True),
        (3, None, False),
    ]


@pytest.mark.parametrize("kind", KINDS)
def test_the_last_failed_attempt_is_raised(kind: str) -> None:
    sleeps = Sleeps()
    model = make(
        kind,
        Server(error_reply(kind, 500), error_reply(kind, 500)),
        True,
        retry=RetryPolicy(2, 1.0),
        sleep=sleeps,
    )
    items, error = acollect(model)
    assert items == [] and error is not None and error[3] == 500
    assert sleeps.delays == [1.0]
    assert [(a.number, a.retried) for a in model.attempts] == [(1, True), (2, False)]


def test_an_auth_error_is_not_retried() -> None:
    model = make("chat", Server(error_reply("chat", 401)), True, retry=RetryPolicy(3))
    items, error = acollect(model)
    assert items == [] and error is not None and error[2] == "auth"
    assert model.attempts[-1] == RetryAttempt(
        request_id="request-001", number=1, error=error[0], kind="auth", status_code=401
    )


def test_the_default_async_sleep_is_asyncio_sleep() -> None:
    model = make(
        "anthropic",
        Server(error_reply("anthropic", 529), body(TEXT["anthropic"])),
        True,
        retry=RetryPolicy(2, 0.0),
    )
    items, error = acollect(model)
    assert error is None and type(items[-1]) is ModelResponse
    assert [a.retried for a in model.attempts] == [True, False]


def test_a_plain_sleep_function_is_called_with_an_async_client() -> None:
    slept: list[float] = []
    model = make(
        "gemini",
        Server(error_reply("gemini", 429), body(TEXT["gemini"])),
        True,
        retry=RetryPolicy(2, 0.25),
        sleep=slept.append,
    )
    assert acollect(model)[1] is None
    assert slept == [0.25]


def test_an_async_sleep_is_refused_with_a_sync_client() -> None:
    with pytest.raises(TypeError, match="is an async function, but the client is sync"):
        make("chat", Server(), False, retry=RetryPolicy(2), sleep=asyncio.sleep)


# =========================================================================== which driver


@pytest.mark.parametrize("kind", KINDS)
def test_each_client_serves_its_own_drivers_and_the_other_pairing_names_the_fix(
    kind: str,
) -> None:
    server = Server()
    sync_model, async_model = make(kind, server, False), make(kind, server, True)
    assert (sync_model.asynchronous, async_model.asynchronous) == (False, True)
    with pytest.raises(TypeError, match=r"was given a sync .*: use stream\(request\) "):
        sync_model.astream(REQUEST)
    with pytest.raises(TypeError, match=r"was given .*async.*: use astream\(request\) "):
        async_model.stream(REQUEST)
    hi = [UserMessage("u1", "Hi")]
    with pytest.raises(TypeError, match="pass the SDK's async client"):
        asyncio.run(arun(hi, model=sync_model, tools=[]))
    with pytest.raises(TypeError, match="is asynchronous"):
        run(hi, model=async_model, tools=[])
    assert server.requests == []


@pytest.mark.parametrize(
    ("kind", "fix"),
    [
        ("chat", "give it an async openai.AsyncOpenAI client"),
        ("anthropic", "give it an async anthropic.AsyncAnthropic client"),
        ("gemini", "give it the async client (a google.genai.Client's .aio)"),
    ],
)
def test_the_mismatch_message_names_the_sdk_client(kind: str, fix: str) -> None:
    with pytest.raises(TypeError) as caught:
        make(kind, Server(), False).astream(REQUEST)
    assert str(caught.value).endswith(fix)


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
def weather(location: str) -> str:
    """Weather for a place."""
    return "foggy"


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


def session(messages: list[Any], model: Any, **options: Any) -> tuple[RunResult, EventLog]:
    """``run`` (sync-client adapter) or ``arun`` (async-client adapter), on a fixed
    clock; the result and the log."""
    log = EventLog()
    clock = itertools.count(1_700_000_000.0, 0.25).__next__
    options.update(log=log, clock=clock, started_at=1_699_999_999.0)
    if model.asynchronous:
        return asyncio.run(arun(messages, model=model, **options)), log
    return run(messages, model=model, **options), log


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
    items, error = acollect(model)  # type: ignore[arg-type]
    assert [type(item) for item in items] == [ModelChunk]
    assert error is not None and error[2] == "connection"
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
    items, error = acollect(FallbackModel(failing, answering))  # type: ignore[arg-type]
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


class Forecast(msgspec.Struct):
    city: str
    celsius: int


FORECAST = OutputSpec(name="Forecast", schema=msgspec.json.schema(Forecast))
SCHEMA_TEXT = msgspec.json.encode(FORECAST.schema).decode()
INSTRUCTION = f"Answer with only a JSON value matching this JSON Schema: {SCHEMA_TEXT}"


def sent_body(
    kind: str, asynchronous: bool, output: OutputSpec | None, **options: Any
) -> dict[str, Any]:
    """The request body the ``kind`` adapter sends for ``REQUEST`` with ``output``."""
    server = Server(body(TEXT[kind]))
    model = make(kind, server, asynchronous, **options)
    request = msgspec.structs.replace(REQUEST, output=output)
    outcome = acollect(model, request) if asynchronous else collect(model, request)
    assert outcome[1] is None
    return server.body()


#: What each adapter sends for ``output=Forecast``: (field, value) of the body.
NATIVE: dict[str, tuple[str, Any]] = {
    "chat": (
        "response_format",
        {
            "type": "json_schema",
            "json_schema": {"name": "Forecast", "schema": FORECAST.schema},
        },
    ),
    "responses": (
        "text",
        {"format": {"type": "json_schema", "name": "Forecast", "schema": FORECAST.schema}},
    ),
    "anthropic": ("system", f"Be kind.\n\n{INSTRUCTION}"),
    "gemini": (
        "generationConfig",
        {"responseMimeType": "application/json", "responseJsonSchema": FORECAST.schema},
    ),
}


#: That field without ``output`` (``None``: not sent).
WITHOUT: dict[str, Any] = {"chat": None, "responses": None, "anthropic": "Be kind.", "gemini": {}}


@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize("kind", KINDS)
def test_output_is_sent_as_the_providers_response_format(kind: str, asynchronous: bool) -> None:
    field, value = NATIVE[kind]
    with_output = sent_body(kind, asynchronous, FORECAST)
    without = sent_body(kind, asynchronous, None)
    assert with_output[field] == value
    assert {k: v for k, v in with_output.items() if k != field} == {
        k: v for k, v in without.items() if k != field
    }
    assert without.get(field) == WITHOUT[kind]


@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
def test_a_callers_own_response_format_wins(asynchronous: bool) -> None:
    json_object = {"type": "json_object"}
    sent = sent_body("chat", asynchronous, FORECAST, response_format=json_object)
    assert sent["response_format"] == json_object
    plain = {"format": {"type": "text"}}
    assert sent_body("responses", asynchronous, FORECAST, text=plain)["text"] == plain
    merged = sent_body("responses", asynchronous, FORECAST, text={"verbosity": "low"})
    assert merged["text"] == {"verbosity": "low", **NATIVE["responses"][1]}
    for option, value in [
        ("response_mime_type", "text/x.enum"),
        ("response_schema", {"type": "STRING"}),
        ("response_json_schema", {"type": "string"}),
    ]:
        config = sent_body("gemini", asynchronous, FORECAST, **{option: value})["generationConfig"]
        assert "responseJsonSchema" not in config or config["responseJsonSchema"] == value
        assert config.get("responseMimeType") != "application/json"


def test_the_instruction_without_a_system_prompt() -> None:
    request = ModelRequest("request-001", 1, (UserMessage("u1", "Hi"),), (), None, output=FORECAST)
    server = Server(body(TEXT["anthropic"]))
    assert collect(make("anthropic", server, False), request)[1] is None
    assert server.body()["system"] == INSTRUCTION
    assert output_system("", FORECAST) == INSTRUCTION
    assert output_system("Be kind.", None) == "Be kind."
    assert output_system(None, None) is None


@pytest.mark.parametrize(
    ("name", "sent"),
    [
        ("Forecast", "Forecast"),
        ("list[Forecast]", "list_Forecast_"),
        ("dict[str, my-type]", "dict_str__my-type_"),
        ("x" * 100, "x" * 64),
        ("", "output"),
    ],
)
def test_the_schema_name_is_what_openai_accepts(name: str, sent: str) -> None:
    assert schema_name(OutputSpec(name=name)) == sent


def json_answer(kind: str) -> bytes:
    """``kind``'s text stream, its text deltas replaced by a Forecast as JSON."""
    data = body(TEXT[kind])
    if kind == "gemini":
        pieces = [(b'"There are **3**"', b'"{\\"city\\":\\"Paris\\","')]
        pieces.append((rb'" \"r\"s in strawberry.\n\nst**r**awbe**rr**y"', b'"\\"celsius\\":18}"'))
    else:
        pieces = [
            (b'"Hello"', b'"{\\"city\\":"'),
            (b'" there"', b'"\\"Paris\\","'),
            (b'"!"', b'"\\"celsius\\":18}"'),
        ]
    for old, new in pieces:
        assert old in data, (kind, old)
        data = data.replace(old, new)
    return data


@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize("kind", KINDS)
def test_a_run_with_output_decodes_the_providers_json_answer(kind: str, asynchronous: bool) -> None:
    server = Server(json_answer(kind))
    model = make(kind, server, asynchronous)
    messages = [UserMessage("u1", "Weather in Paris?")]
    result, _ = session(messages, model, tools=[], output=Forecast)
    assert result.status == "completed"
    assert result.output == Forecast("Paris", 18)
    field, value = NATIVE[kind]
    if kind == "anthropic":
        assert server.body()["system"] == INSTRUCTION
    else:
        assert server.body()[field] == value
