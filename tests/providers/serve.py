"""Serve the provider fixtures to the real SDK clients, sync or async.

The bodies in ``fixtures/providers/*/recorded/`` were recorded against the real APIs
by other open-source projects and are kept byte for byte (sources, commits and
licences in the README next to them); the other bodies there are hand-made in the
documented wire format (listed as such in the same READMEs). :class:`Server`
answers the SDK's HTTP requests with them through an ``httpx2.MockTransport``, for
the SDK's sync client and its async one alike; :func:`make` builds an adapter on
it; :func:`outcome` reads what the adapter makes of them, with :meth:`stream` or
:meth:`astream` as its client requires.
"""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("openai")
pytest.importorskip("anthropic")
pytest.importorskip("google.genai")

import anthropic
import httpx2
import openai
import yaml  # type: ignore[import-untyped]
from google import genai
from google.genai import types as genai_types

import replay
from agentloop import (
    EventLog,
    ModelChunk,
    ModelError,
    ModelRequest,
    ModelResponse,
    RunResult,
    ToolSpec,
    UserMessage,
    arun,
    run,
    tool,
)
from agentloop.models._common import ModelReply, StreamingModel
from agentloop.models.anthropic import AnthropicModel
from agentloop.models.gemini import GeminiModel
from agentloop.models.openai import OpenAIChatModel, OpenAIResponsesModel

PROVIDERS = Path(__file__).resolve().parent.parent.parent / "fixtures" / "providers"

#: The adapters: OpenAI Chat Completions, OpenAI Responses, Anthropic, Gemini.
KINDS = ("chat", "responses", "anthropic", "gemini")
#: Where each adapter's fixtures are, and what its errors say they come from.
PROVIDER = {"chat": "openai", "responses": "openai", "anthropic": "anthropic", "gemini": "gemini"}

# --------------------------------------------------------------------------- bodies


def read(path: str) -> bytes:
    return (PROVIDERS / path).read_bytes()


def chunk_lines(path: str) -> list[str]:
    """The JSON payloads of a ``*.chunks.txt`` file (one per line)."""
    return [line for line in read(path).decode().splitlines() if line.strip()]


def data_sse(lines: list[str], *, done: bool = False, crlf: bool = False) -> bytes:
    end = "\r\n\r\n" if crlf else "\n\n"
    text = "".join(f"data: {line}{end}" for line in lines)
    return (text + ("data: [DONE]\n\n" if done else "")).encode()


def anthropic_sse(lines: list[str]) -> bytes:
    """Anthropic's wire format names each event after the payload's ``type``."""
    return "".join(
        f"event: {json.loads(line)['type']}\ndata: {line}\n\n" for line in lines
    ).encode()


def cassette_body(path: str) -> bytes:
    """The response body of the single interaction of a VCR cassette."""
    interaction = yaml.safe_load(read(path))["interactions"][0]["response"]["body"]
    text = interaction["content"] if "content" in interaction else interaction["string"]
    return str(text).encode()


def body(path: str) -> bytes:
    """A fixture as its provider's wire format (SSE as each one streams it)."""
    if path.endswith(".yaml"):
        return cassette_body(path)
    if path.endswith((".sse", ".json")):
        return read(path)
    lines = chunk_lines(path)
    if path.startswith("anthropic/"):
        return anthropic_sse(lines)
    return data_sse(lines, crlf=path.startswith("gemini/"))


def responses_turns(path: str) -> list[bytes]:
    """A multi-response Responses recording split into one SSE body per request."""
    turns: list[list[str]] = []
    for line in chunk_lines(path):
        if json.loads(line)["type"] == "response.created":
            turns.append([])
        turns[-1].append(line)
    return [data_sse(turn) for turn in turns]


def events(data: bytes) -> list[bytes]:
    """The SSE events of a body, each with the blank line that ends it
    (``b"".join`` of any of them is a body again)."""
    separator = b"\r\n\r\n" if b"\r\n\r\n" in data else b"\n\n"
    return [event + separator for event in data.split(separator) if event.strip()]


def fixtures(provider: str, pattern: str) -> list[str]:
    """The fixture paths of ``provider`` matching ``pattern``, sorted."""
    found = sorted(p.relative_to(PROVIDERS) for p in (PROVIDERS / provider).glob(pattern))
    assert found, f"no fixture matches {provider}/{pattern}"
    return [str(path) for path in found]


# --------------------------------------------------------------------------- serving

#: A scripted answer: an SSE body (status 200), a byte stream (served as it comes),
#: ``(status, body)`` or ``(status, body, headers)`` (an error: JSON, or HTML when
#: it does not look like JSON), a whole response, or an exception the transport raises.
Reply = (
    bytes
    | httpx2.SyncByteStream
    | httpx2.AsyncByteStream
    | tuple[int, bytes]
    | tuple[int, bytes, dict[str, str]]
    | httpx2.Response
    | Exception
)


class Server:
    """Answers each HTTP request with the next scripted reply and keeps the requests.

    ``transport`` serves the SDKs' sync and async clients alike.
    """

    def __init__(self, *replies: Reply) -> None:
        self.replies = list(replies)
        self.requests: list[httpx2.Request] = []
        self.transport = httpx2.MockTransport(self._handle)

    def _handle(self, request: httpx2.Request) -> httpx2.Response:
        self.requests.append(request)
        assert self.replies, f"unexpected request {request.method} {request.url}"
        reply = self.replies.pop(0)
        if isinstance(reply, Exception):
            raise reply
        if isinstance(reply, httpx2.Response):
            return reply
        if isinstance(reply, tuple):
            status, content, *more = reply
            kind = "application/json" if content.lstrip()[:1] in (b"{", b"[") else "text/html"
            headers = {"content-type": kind, **(more[0] if more else {})}
            return httpx2.Response(status, headers=headers, content=content)
        headers = {"content-type": "text/event-stream"}
        if isinstance(reply, bytes):
            return httpx2.Response(200, headers=headers, content=reply)
        return httpx2.Response(200, headers=headers, stream=reply)

    def body(self, index: int = -1) -> dict[str, Any]:
        loaded: dict[str, Any] = json.loads(self.requests[index].content)
        return loaded

    def sent(self) -> list[tuple[str, bytes]]:
        return [(str(r.url), r.content) for r in self.requests]


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


#: The model name each adapter is built with by :func:`make`.
MODEL_NAMES = {
    "chat": "gpt-test",
    "responses": "gpt-test",
    "anthropic": "claude-test",
    "gemini": "gemini-test",
}


def client(kind: str, server: Server, asynchronous: bool = False, *, vertex: bool = False) -> Any:
    """The SDK client of ``kind``'s adapter, on ``server``."""
    http: httpx2.Client | httpx2.AsyncClient
    http = (
        httpx2.AsyncClient(transport=server.transport)
        if asynchronous
        else httpx2.Client(transport=server.transport)
    )
    if kind in ("chat", "responses"):
        openai_class = openai.AsyncOpenAI if asynchronous else openai.OpenAI
        return openai_class(
            api_key="test",
            base_url="https://api.openai.test/v1",
            http_client=http,  # type: ignore[arg-type]
        )
    if kind == "anthropic":
        anthropic_class = anthropic.AsyncAnthropic if asynchronous else anthropic.Anthropic
        return anthropic_class(
            api_key="test",
            base_url="https://api.anthropic.test",
            http_client=http,  # type: ignore[arg-type]
        )
    key = "httpx_async_client" if asynchronous else "httpx_client"
    base_url = "https://vertex.test" if vertex else "https://gemini.test"
    http_options = genai_types.HttpOptions(base_url=base_url, **{key: http})
    # (Vertex AI in express mode: an API key, no Google Cloud credentials)
    gemini = genai.Client(vertexai=vertex or None, api_key="test", http_options=http_options)
    return gemini.aio if asynchronous else gemini


def make(
    kind: str,
    server: Server,
    asynchronous: bool = False,
    *,
    model: str | None = None,
    vertex: bool = False,
    **options: Any,
) -> StreamingModel:
    """The ``kind`` adapter on ``server``, with the SDK's async or sync client."""
    sdk = client(kind, server, asynchronous, vertex=vertex)
    name = MODEL_NAMES[kind] if model is None else model
    if kind == "chat":
        return OpenAIChatModel(sdk, name, **options)
    if kind == "responses":
        return OpenAIResponsesModel(sdk, name, **options)
    if kind == "anthropic":
        return AnthropicModel(sdk, name, **options)
    return GeminiModel(sdk, name, **options)


class Adapter:
    """One adapter with one of its SDK's clients: builds the adapter on a fresh
    :class:`Server` and reads its replies the way that client requires."""

    def __init__(self, kind: str, asynchronous: bool) -> None:
        self.kind = kind
        self.asynchronous = asynchronous
        self.provider = PROVIDER[kind]
        self.server = Server()

    def __repr__(self) -> str:
        return f"Adapter({self.kind!r}, asynchronous={self.asynchronous})"

    def __call__(self, *replies: Reply, **options: Any) -> StreamingModel:
        """The adapter, on a server answering with ``replies`` (now ``self.server``)."""
        self.server = Server(*replies)
        return make(self.kind, self.server, self.asynchronous, **options)

    def sleeps(self) -> Sleeps:
        """A sleep to inject (async for an async client) that only remembers."""
        return AsyncSleeps() if self.asynchronous else Sleeps()


# --------------------------------------------------------------------------- reading

Outcome = tuple[list[ModelReply], ModelError | None]


def request(
    *tools: ToolSpec, system: str | None = "Be brief.", text: str = "Weather in Paris?"
) -> ModelRequest:
    return ModelRequest("request-001", 1, (UserMessage("u1", text),), tools, system)


def outcome(model: Any, req: ModelRequest | None = None) -> Outcome:
    """What ``model`` answers to ``req``: its replies, and the error that ended them."""
    req = request() if req is None else req
    if model.asynchronous:
        return asyncio.run(_aoutcome(model, req))
    items: list[ModelReply] = []
    try:
        for item in model.stream(req):
            items.append(item)
    except ModelError as error:
        return items, error
    return items, None


async def _aoutcome(model: Any, req: ModelRequest) -> Outcome:
    items: list[ModelReply] = []
    try:
        async for item in model.astream(req):
            items.append(item)
    except ModelError as error:
        return items, error
    return items, None


def replies(model: Any, req: ModelRequest | None = None) -> list[ModelReply]:
    """What ``model`` answers to ``req``; a ``ModelError`` is raised."""
    items, error = outcome(model, req)
    if error is not None:
        raise error
    return items


def failure(model: Any, req: ModelRequest | None = None) -> tuple[list[ModelReply], ModelError]:
    """The replies before the ``ModelError`` that ``model`` must end with."""
    items, error = outcome(model, req)
    assert error is not None, f"{model!r} answered without an error: {items[-1:]}"
    return items, error


def error_fields(error: ModelError | None) -> tuple[Any, ...] | None:
    """What makes two ``ModelError``s the same error."""
    if error is None:
        return None
    return (
        error.message,
        error.provider,
        error.kind,
        error.status_code,
        error.usage,
        error.retry_after,
    )


def chunks(items: list[Any]) -> list[Any]:
    return [item.block for item in items if type(item) is ModelChunk]


def final(items: list[Any]) -> ModelResponse:
    last = items[-1]
    assert type(last) is ModelResponse, last
    return last


def session(messages: list[Any], model: Any, **options: Any) -> tuple[RunResult, EventLog]:
    """``run`` (sync-client adapter) or ``arun`` (async-client adapter), on a fixed
    clock; the result and the log."""
    log = EventLog()
    clock = itertools.count(1_700_000_000.0, 0.25).__next__
    options.setdefault("tools", [])
    options.update(log=log, clock=clock, started_at=1_699_999_999.0)
    if model.asynchronous:
        return asyncio.run(arun(messages, model=model, **options)), log
    return run(messages, model=model, **options), log


def replays(log: EventLog) -> None:
    """The run's log replays byte for byte."""
    assert list(replay.replay(log.events).events) == list(log.events)


class Sleeps:
    """An injected sleep: remembers the delays, returns at once."""

    def __init__(self) -> None:
        self.delays: list[float] = []

    def __call__(self, seconds: float) -> None:
        self.delays.append(seconds)


class AsyncSleeps(Sleeps):
    """:class:`Sleeps` as an async function (for an async client)."""

    async def __call__(self, seconds: float) -> None:  # type: ignore[override]
        self.delays.append(seconds)


# --------------------------------------------------------------------------- tools

WEATHER = ToolSpec(
    "get_weather",
    "Current weather for a city.",
    {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
)
TIME = ToolSpec(
    "get_time",
    "Current time in a timezone.",
    {"type": "object", "properties": {"timezone": {"type": "string"}}, "required": ["timezone"]},
)


@tool
def get_weather(city: str) -> str:
    """Current weather for a city."""
    return f"18°C and sunny in {city}"


@tool
def get_time(timezone: str) -> str:
    """Current time in a timezone."""
    return f"20:15 in {timezone}"


@tool
def weather(location: str) -> str:
    """Weather for a place."""
    return "foggy"
