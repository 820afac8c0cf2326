"""The contract every provider adapter keeps, checked on each of them.

Each test runs for the four adapters (OpenAI Chat Completions, OpenAI Responses,
Anthropic Messages, Gemini) and, where a client is involved, with the SDK's sync
client (``stream``, ``run``) and its async one (``astream``, ``arun``): the same
traffic must give the same replies, usage, errors and retries through either. The
tables below say, per adapter, which body of ``fixtures/providers/`` shows the
case and what the adapter must make of it: text streamed delta by delta, tool calls
assembled from their fragments, usage with cache and reasoning tokens, the stop
reasons (``length`` and ``refusal`` included), reasoning as ``ThinkingBlock``s,
provider errors as typed ``ModelError``s (with the wait a 429 asks for), retries,
the request options, the client pairing, structured output and whole tool loops
that replay without the model. What only one provider has is in its own file.
"""

from __future__ import annotations

import base64
import itertools
import json
import logging
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import anthropic
import httpx2
import msgspec
import openai
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentloop import (
    MAX_CHUNKS_PER_STEP,
    MODEL_ERROR,
    MODEL_PROTOCOL_ERROR,
    MODEL_REFUSED,
    AssistantMessage,
    ModelChunk,
    ModelChunkEvent,
    ModelFailure,
    ModelRequest,
    ModelResponse,
    OutputSpec,
    PlanDraftEvent,
    ProviderBlock,
    TextBlock,
    ThinkingBlock,
    ToolCall,
    ToolResultMessage,
    Usage,
    UserMessage,
    arun,
    run,
)
from agentloop.models import ModelSpecError, RetryAttempt, RetryPolicy, model_from_spec
from agentloop.models.anthropic import AnthropicModel
from agentloop.models.gemini import GeminiModel
from agentloop.models.openai import OpenAIChatModel, OpenAIResponsesModel
from tests.helpers import examples

from .serve import (
    KINDS,
    MODEL_NAMES,
    PROVIDER,
    TIME,
    WEATHER,
    Adapter,
    Body,
    Server,
    body,
    chunk_lines,
    client,
    data_sse,
    error_fields,
    events,
    failure,
    final,
    fixtures,
    get_time,
    get_weather,
    make,
    outcome,
    read,
    replays,
    replies,
    request,
    responses_turns,
    session,
    weather,
)

ALL = pytest.mark.parametrize("kind", KINDS)

G_TEXT = "gemini/recorded/google-text.chunks.txt"
G_TOOL = "gemini/recorded/google-tool-call-gemini3.chunks.txt"
G_STREAMED = "gemini/recorded/google-stream-tool-call-arguments.chunks.txt"
A_TEXT = "anthropic/recorded/anthropic-text.chunks.txt"
A_REFUSAL = "anthropic/recorded/anthropic-refusal.chunks.txt"
A_REASONING = "anthropic/recorded/anthropic-claude-sonnet-5-reasoning-generic.chunks.txt"
C_DEEPSEEK = "openai/recorded/deepseek-tool-call.chunks.txt"
R_TOOL = "openai/recorded/issue-19493-gpt-5.1-tool-call.chunks.txt"
R_PHASE = "openai/recorded/openai-phase.1.chunks.txt"
R_REASONING = "openai/recorded/openai-reasoning-encrypted-content.1.chunks.txt"


def chunk(block: Any) -> ModelChunk:
    return ModelChunk("request-001", block)


def response(response_id: str, content: tuple[Any, ...], stop: str, usage: Usage | None) -> Any:
    return ModelResponse("request-001", response_id, content, stop, usage)


def signature(value: str, part: str = "function_call") -> ProviderBlock:
    return ProviderBlock("gemini", "thought_signature", {"thought_signature": value, "part": part})


def gemini_signature(path: str, line: int, part: int = 0) -> str:
    """The ``thoughtSignature`` of a part of a recorded Gemini line (as the adapter
    keeps it: standard base64)."""
    raw = json.loads(chunk_lines(path)[line])["candidates"][0]["content"]["parts"][part]
    return base64.b64encode(base64.b64decode(raw["thoughtSignature"])).decode()


def cases(table: dict[str, list[Any]]) -> list[Any]:
    """``(kind, case)`` parameters of a per-adapter table, named ``kind:case``."""
    return [
        pytest.param(kind, case, id=f"{kind}:{case.name}")
        for kind, entries in table.items()
        for case in entries
    ]


@dataclass(frozen=True)
class Stream:
    """A body, and what the adapter makes of it."""

    name: str
    body: Callable[[], bytes]
    items: list[Any]
    tools: tuple[Any, ...] = ()
    system: str | None = "Be brief."
    options: dict[str, Any] = field(default_factory=dict)


def path(name: str) -> Callable[[], bytes]:
    return lambda: body(name)


# =========================================================================== text

TEXT_DELTAS = [chunk(TextBlock(t)) for t in ("Hello", " there", "!")]
STRAWBERRY = TextBlock('There are **3** "r"s in strawberry.\n\nst**r**awbe**rr**y')
G_TEXT_SIGNATURE = signature(gemini_signature(G_TEXT, 2), "empty")

TEXT: dict[str, Stream] = {
    "chat": Stream(
        "chat_text",
        path("openai/chat_text.sse"),
        [
            *TEXT_DELTAS,
            response("chatcmpl-AgentloopText01", (TextBlock("Hello there!"),), "stop", Usage(9, 3)),
        ],
    ),
    "responses": Stream(
        "responses_text",
        path("openai/responses_text.sse"),
        [
            *TEXT_DELTAS,
            response("resp_agentloop_text01", (TextBlock("Hello there!"),), "stop", Usage(9, 3)),
        ],
    ),
    "anthropic": Stream(
        "text",
        path("anthropic/text.sse"),
        [
            *TEXT_DELTAS,
            response(
                "msg_01AgentloopText0000000001", (TextBlock("Hello there!"),), "stop", Usage(12, 6)
            ),
        ],
    ),
    "gemini": Stream(
        "recorded google-text",
        path(G_TEXT),
        [
            chunk(TextBlock("There are **3**")),
            chunk(TextBlock(' "r"s in strawberry.\n\nst**r**awbe**rr**y')),
            chunk(G_TEXT_SIGNATURE),
            response(
                "bH6LaZW8Fp_3nsEPqtaSwQ4",
                (STRAWBERRY, G_TEXT_SIGNATURE),
                "stop",
                Usage(9, 23 + 185, reasoning_tokens=185),
            ),
        ],
    ),
}

#: The request for ``request()`` (no tools, system "Be brief."), as each API gets it.
SENT: dict[str, tuple[str, dict[str, Any]]] = {
    "chat": (
        "/v1/chat/completions",
        {
            "model": "gpt-test",
            "messages": [
                {"role": "system", "content": "Be brief."},
                {"role": "user", "content": "Weather in Paris?"},
            ],
            "stream": True,
            "stream_options": {"include_usage": True},
        },
    ),
    "responses": (
        "/v1/responses",
        {
            "model": "gpt-test",
            "input": [{"type": "message", "role": "user", "content": "Weather in Paris?"}],
            "instructions": "Be brief.",
            "stream": True,
        },
    ),
    "anthropic": (
        "/v1/messages",
        {
            "model": "claude-test",
            "max_tokens": 1024,
            "messages": [{"role": "user", "content": "Weather in Paris?"}],
            "system": "Be brief.",
            "stream": True,
        },
    ),
    "gemini": (
        # (the API version in the path is the SDK's: v1beta in google-genai 2, v1 in 3)
        "/models/gemini-test:streamGenerateContent",
        {
            "contents": [{"role": "user", "parts": [{"text": "Weather in Paris?"}]}],
            "systemInstruction": {"parts": [{"text": "Be brief."}], "role": "user"},
            "generationConfig": {},
        },
    ),
}


@ALL
def test_text_is_streamed_delta_by_delta_and_the_request_is_the_apis(
    kind: str, adapter: Adapter
) -> None:
    case = TEXT[kind]
    assert replies(adapter(case.body()), request()) == case.items
    url_path, sent = SENT[kind]
    assert adapter.server.requests[0].url.path.endswith(url_path)
    assert adapter.server.body() == sent
    if kind == "anthropic":
        assert "anthropic-version" in adapter.server.requests[0].headers


#: In each adapter's text stream: what marks a text delta, and the first one's text.
DELTA: dict[str, tuple[Callable[[bytes], bool], bytes]] = {
    "chat": (lambda event: b'"delta":{"content":"' in event, b"Hello"),
    "responses": (lambda event: b"response.output_text.delta" in event, b"Hello"),
    "anthropic": (lambda event: b"text_delta" in event, b"Hello"),
    "gemini": (
        lambda event: b'[{"text":"' in event and b'[{"text":"",' not in event,
        b"There are **3**",
    ),
}


def many_deltas(kind: str, pieces: list[str]) -> bytes:
    """``kind``'s text stream with one delta per piece instead of its own."""
    parts = events(TEXT[kind].body())
    is_delta, first = DELTA[kind]
    at = [i for i, part in enumerate(parts) if is_delta(part)]
    deltas = [parts[at[0]].replace(first, piece.encode()) for piece in pieces]
    return b"".join([*parts[: at[0]], *deltas, *parts[at[-1] + 1 :]])


@ALL
def test_long_streams_stay_within_the_chunk_limit(kind: str) -> None:
    # 3072 text deltas: the first half of the chunk budget streams one delta per
    # chunk, the rest is held back and sent as one chunk before the response.
    # (the sync client only: the limit is the assembler's, which both clients share)
    pieces = [f"w{i} " for i in range(3 * MAX_CHUNKS_PER_STEP)]
    model = make(kind, Server(many_deltas(kind, pieces)))
    result, log = session([UserMessage("u1", "Talk.")], model)
    assert result.status == "completed"
    assert result.final_text == "".join(pieces)
    streamed = [e.chunk.block for e in log.events if type(e) is ModelChunkEvent]
    texts = [block for block in streamed if type(block) is TextBlock]
    assert len(texts) == MAX_CHUNKS_PER_STEP // 2 + 1
    assert texts[-1] == TextBlock("".join(pieces[MAX_CHUNKS_PER_STEP // 2 :]))
    replays(log)


# =========================================================================== tool calls

C1 = ToolCall("call_W3atherParis01", "get_weather", {"city": "Paris"})
PARIS = ToolCall("call_W3atherParis02", "get_weather", {"city": "Paris"})
CLOCK = ToolCall("call_Cl0ckParis02", "get_time", {"timezone": "Europe/Paris"})
BEIJING = ToolCall("call_2FQdm3Br7Qb35YUBSkDR7kue", "get_weather", {"city": "Beijing"})
A_PARIS = ToolCall("toolu_01WeatherParis00000002", "get_weather", {"city": "Paris"})
A_PARIS3 = ToolCall("toolu_01WeatherParis00000003", "get_weather", {"city": "Paris"})
A_CLOCK3 = ToolCall("toolu_01ClockParis0000000003", "get_time", {"timezone": "Europe/Paris"})
G_SF = ToolCall("QHiLaa6LBrb8vdIPoNztsAg-1", "weather", {"location": "San Francisco"})
G_SF_SIGNATURE = signature(gemini_signature(G_TOOL, 0))
G_BOSTON = ToolCall("dqHOab6xGLzWodAPkPuViA4-1", "getWeather", {"location": "Boston"})
G_FRISCO = ToolCall("dqHOab6xGLzWodAPkPuViA4-2", "getWeather", {"location": "San Francisco"})
G_STREAMED_SIGNATURE = signature(gemini_signature(G_STREAMED, 0))
G_THINKING = ThinkingBlock("**Planning** I need both cities.")
G_PARIS = ToolCall("AgentloopGeminiParallel1-1", "get_weather", {"city": "Paris"})
G_TOKYO = ToolCall(
    "AgentloopGeminiParallel1-2",
    "get_weather",
    {"city": "Tokyo", "options": {"units": "metric", "days": [1, 2]}},
)
G_PARALLEL_SIGNATURE = signature("aGFuZC1tYWRlIHRob3VnaHQgc2lnbmF0dXJlICMx")


def vertex_streamed_arguments() -> dict[str, Any]:
    """Vertex AI, asked to stream function-call arguments."""
    from google.genai import types

    calling = types.FunctionCallingConfig(stream_function_call_arguments=True)
    return {"vertex": True, "tool_config": types.ToolConfig(function_calling_config=calling)}


CALLS: dict[str, list[Stream]] = {
    "chat": [
        Stream(
            "one call from fragments",
            path("openai/chat_tool_call.sse"),
            [
                chunk(C1),
                response("chatcmpl-AgentloopTool01", (C1,), "tool_call", Usage(61, 15)),
            ],
            tools=(WEATHER,),
        ),
        Stream(
            "text and parallel calls",
            path("openai/chat_tool_calls_parallel.sse"),
            [
                chunk(TextBlock("Checking")),
                chunk(TextBlock(" both.")),
                chunk(PARIS),
                chunk(CLOCK),
                response(
                    "chatcmpl-AgentloopTools02",
                    (TextBlock("Checking both."), PARIS, CLOCK),
                    "tool_call",
                    Usage(75, 40),
                ),
            ],
            tools=(WEATHER, TIME),
        ),
    ],
    "responses": [
        Stream(
            "recorded function call",
            path(R_TOOL),
            [
                chunk(BEIJING),
                response(
                    "resp_0775572d10a16b66006a8d85285ef487d2ae865d3657af7276",
                    (BEIJING,),
                    "tool_call",
                    Usage(45, 25),
                ),
            ],
            tools=(WEATHER,),
        ),
        Stream(
            "text and parallel calls",
            path("openai/responses_tool_calls.sse"),
            [
                chunk(TextBlock("Checking")),
                chunk(TextBlock(" both.")),
                chunk(PARIS),
                chunk(CLOCK),
                response(
                    "resp_agentloop_tools02",
                    (TextBlock("Checking both."), PARIS, CLOCK),
                    "tool_call",
                    Usage(75, 40),
                ),
            ],
            tools=(WEATHER, TIME),
            system=None,
        ),
    ],
    "anthropic": [
        Stream(
            "text then a call from input_json_deltas",
            path("anthropic/tool_use.sse"),
            [
                chunk(TextBlock("I'll check")),
                chunk(TextBlock(" the weather in Paris.")),
                chunk(A_PARIS),
                response(
                    "msg_01AgentloopTool0000000002",
                    (TextBlock("I'll check the weather in Paris."), A_PARIS),
                    "tool_call",
                    Usage(377, 65),
                ),
            ],
            tools=(WEATHER,),
            system=None,
            options={"max_tokens": 300},
        ),
        Stream(
            "text and parallel calls",
            path("anthropic/tool_use_parallel.sse"),
            [
                chunk(TextBlock("Checking")),
                chunk(TextBlock(" both.")),
                chunk(A_PARIS3),
                chunk(A_CLOCK3),
                response(
                    "msg_01AgentloopTools000000003",
                    (TextBlock("Checking both."), A_PARIS3, A_CLOCK3),
                    "tool_call",
                    # input + cache creation + cache read
                    Usage(410 + 20 + 100, 96, cache_read_tokens=100, cache_write_tokens=20),
                ),
            ],
            tools=(WEATHER, TIME),
        ),
    ],
    "gemini": [
        Stream(
            "recorded call with its signature",
            path(G_TOOL),
            [
                chunk(G_SF),
                chunk(G_SF_SIGNATURE),
                response(
                    "QHiLaa6LBrb8vdIPoNztsAg",
                    (G_SF, G_SF_SIGNATURE),
                    "tool_call",
                    Usage(29, 15 + 804, reasoning_tokens=804),
                ),
            ],
            tools=(WEATHER,),
        ),
        Stream(
            # Vertex AI's stream_function_call_arguments: partial_args fragments
            "recorded Vertex calls from streamed arguments",
            path(G_STREAMED),
            [
                chunk(G_BOSTON),
                chunk(G_STREAMED_SIGNATURE),
                chunk(G_FRISCO),
                response(
                    "dqHOab6xGLzWodAPkPuViA4",
                    (G_BOSTON, G_STREAMED_SIGNATURE, G_FRISCO),
                    "tool_call",
                    Usage(26, 23 + 132, reasoning_tokens=132),
                ),
            ],
            tools=(WEATHER,),
            options=vertex_streamed_arguments(),
        ),
        Stream(
            "thought and parallel calls",
            path("gemini/thought_parallel_calls.chunks.txt"),
            [
                chunk(G_THINKING),
                chunk(G_PARIS),
                chunk(G_PARALLEL_SIGNATURE),
                chunk(G_TOKYO),
                response(
                    "AgentloopGeminiParallel1",
                    (G_THINKING, G_PARIS, G_PARALLEL_SIGNATURE, G_TOKYO),
                    "tool_call",
                    Usage(120, 24 + 30, cache_read_tokens=96, reasoning_tokens=30),
                ),
            ],
            tools=(WEATHER,),
        ),
    ],
}

#: How each API is told about the tools: the ``tools`` of the request body.
TOOLS_SENT: dict[str, Callable[[tuple[Any, ...]], Any]] = {
    "chat": lambda specs: [
        {
            "type": "function",
            "function": {
                "name": s.name,
                "description": s.description,
                "parameters": s.parameters,
            },
        }
        for s in specs
    ],
    "responses": lambda specs: [
        {
            "type": "function",
            "name": s.name,
            "description": s.description,
            "parameters": s.parameters,
            "strict": False,
        }
        for s in specs
    ],
    "anthropic": lambda specs: [
        {"name": s.name, "description": s.description, "input_schema": s.parameters} for s in specs
    ],
    "gemini": lambda specs: [
        {
            "functionDeclarations": [
                # (google-genai writes this one field's name as it is spelt in Python)
                {
                    "name": s.name,
                    "description": s.description,
                    "parameters_json_schema": s.parameters,
                }
                for s in specs
            ]
        }
    ],
}


@pytest.mark.parametrize(("kind", "case"), cases(CALLS))
def test_tool_calls_are_assembled_and_sent_as_complete_blocks(
    case: Stream, adapter: Adapter
) -> None:
    model = adapter(case.body(), **case.options)
    assert replies(model, request(*case.tools, system=case.system)) == case.items
    sent = adapter.server.body()
    assert sent["tools"] == TOOLS_SENT[adapter.kind](case.tools)
    if adapter.kind == "anthropic":
        assert sent["max_tokens"] == case.options.get("max_tokens", 1024)
    system = {"chat": None, "responses": "instructions", "anthropic": "system"}
    field_ = system.get(adapter.kind, "systemInstruction")
    if case.system is None and field_ is not None:
        assert field_ not in sent
    assert "include" not in sent  # (Responses: only with store=False)


# =========================================================================== usage


@dataclass(frozen=True)
class Counted:
    """A body and the usage of its response (the step's, and the run's if it is
    the only step)."""

    name: str
    body: Callable[[], bytes]
    usage: Usage


USAGE: dict[str, list[Counted]] = {
    "chat": [
        Counted("plain", path("openai/chat_text.sse"), Usage(9, 3)),
        Counted(
            "recorded DeepSeek: cached and reasoning tokens",
            path(C_DEEPSEEK),
            Usage(374, 61, cache_read_tokens=256, reasoning_tokens=17),
        ),
        Counted(
            "cached tokens",
            path("openai/chat_refusal.sse"),
            Usage(1534, 11, cache_read_tokens=1280),
        ),
        Counted(
            "Hugging Face router: a top-level cached_tokens",
            path("openai/chat_hf_router_cached_tokens.sse"),
            Usage(1040, 6, cache_read_tokens=768),
        ),
    ],
    "responses": [
        Counted("plain", path("openai/responses_text.sse"), Usage(9, 3)),
        Counted(
            "recorded: cached and reasoning tokens",
            path(R_PHASE),
            Usage(7112, 463, cache_read_tokens=3072, reasoning_tokens=64),
        ),
    ],
    "anthropic": [
        Counted("plain", path("anthropic/text.sse"), Usage(12, 6)),
        Counted(
            "cache reads and writes",
            path("anthropic/thinking_tool_use.sse"),
            Usage(210 + 1200 + 3400, 87, cache_read_tokens=3400, cache_write_tokens=1200),
        ),
        Counted(
            "message_delta's cumulative usage",
            path("anthropic/unmapped_blocks.sse"),
            Usage(60 + 40, 30, cache_read_tokens=40),
        ),
        Counted(
            "recorded: output_tokens_details.thinking_tokens",
            path(A_REASONING),
            Usage(47, 496, reasoning_tokens=62),
        ),
        Counted(
            "recorded, summarized thinking: thinking_tokens",
            path("anthropic/recorded/anthropic-claude-sonnet-5-reasoning-summarized.chunks.txt"),
            Usage(47, 373, reasoning_tokens=62),
        ),
    ],
    "gemini": [
        Counted("plain", path("gemini/max_tokens.chunks.txt"), Usage(8, 4)),
        Counted(
            "recorded: thoughts tokens",
            path(G_TEXT),
            Usage(9, 23 + 185, reasoning_tokens=185),
        ),
        Counted(
            "cached content tokens",
            path("gemini/thought_parallel_calls.chunks.txt"),
            Usage(120, 24 + 30, cache_read_tokens=96, reasoning_tokens=30),
        ),
    ],
}


@pytest.mark.parametrize(("kind", "case"), cases(USAGE))
def test_usage_counts_cache_and_reasoning_tokens(case: Counted, adapter: Adapter) -> None:
    # (docs/providers.md: input counts every input token, cached or not; output
    # every output token, reasoning_tokens the part of it spent reasoning)
    assert final(replies(adapter(case.body()), request(WEATHER))).usage == case.usage
    result, log = session([UserMessage("u1", "Hi")], adapter(case.body()), max_steps=1)
    assert result.usage == case.usage
    replays(log)


# =========================================================================== stop reasons


@dataclass(frozen=True)
class Stop:
    """A body, its stop reason, the provider's words kept for it, and its usage."""

    name: str
    body: Callable[[], bytes]
    stop: str
    message: str | None = None
    usage: Usage | None = None
    #: What the run's error says after its code's words, when not ``message``.
    explained: str | None = None
    #: The response's id and content, where the case pins them.
    answer: tuple[str, tuple[Any, ...]] | None = None


def edited(name: str, old: bytes, new: bytes) -> Callable[[], bytes]:
    """A fixture with one thing changed (checked to be there)."""

    def make_body() -> bytes:
        data = body(name)
        assert old in data, (name, old)
        return data.replace(old, new)

    return make_body


STOPS: dict[str, list[Stop]] = {
    "chat": [
        Stop("stop", path("openai/chat_text.sse"), "stop", usage=Usage(9, 3)),
        Stop("tool_calls", path("openai/chat_tool_call.sse"), "tool_call", usage=Usage(61, 15)),
        Stop("length", path("openai/chat_length.sse"), "length"),
        Stop(
            "content_filter",
            path("openai/chat_content_filter.sse"),
            "error",
            "finish_reason 'content_filter'",
            Usage(12, 2),
        ),
        Stop(
            "unknown finish_reason",
            edited("openai/chat_text.sse", b'"finish_reason":"stop"', b'"finish_reason":"x"'),
            "error",
            "finish_reason 'x'",
        ),
        Stop(
            "refusal",
            path("openai/chat_refusal.sse"),
            "refusal",
            "I'm sorry, I can't help with that.",
            Usage(1534, 11, cache_read_tokens=1280),
        ),
    ],
    "responses": [
        Stop("completed", path("openai/responses_text.sse"), "stop", usage=Usage(9, 3)),
        Stop(
            "completed with calls",
            path("openai/responses_tool_calls.sse"),
            "tool_call",
            usage=Usage(75, 40),
        ),
        Stop(
            "incomplete: max_output_tokens",
            path("openai/responses_incomplete.sse"),
            "length",
            usage=Usage(12, 4),
        ),
        Stop(
            "incomplete: content_filter",
            path("openai/responses_content_filter.sse"),
            "error",
            "incomplete: content_filter",
            Usage(12, 2),
        ),
        Stop(
            "refusal",
            path("openai/responses_refusal.sse"),
            "refusal",
            "I can't help with that.",
            Usage(40, 7),
        ),
    ],
    "anthropic": [
        *[
            Stop(
                reason,
                edited(
                    "anthropic/text.sse",
                    b'"stop_reason":"end_turn"',
                    f'"stop_reason":"{reason}"'.encode(),
                ),
                stop,
                f"stop_reason '{reason}'" if stop == "error" else None,
                Usage(12, 6),
            )
            for reason, stop in [
                ("end_turn", "stop"),
                ("stop_sequence", "stop"),
                ("max_tokens", "length"),
                ("model_context_window_exceeded", "length"),
                ("pause_turn", "error"),
            ]
        ],
        Stop("tool_use", path("anthropic/tool_use.sse"), "tool_call", usage=Usage(377, 65)),
        Stop(
            "max_tokens",
            path("anthropic/max_tokens.sse"),
            "length",
            usage=Usage(12, 4),
            answer=("msg_01AgentloopLength0000005", (TextBlock("Once upon a time"),)),
        ),
        Stop(
            "recorded refusal with stop_details",
            path(A_REFUSAL),
            "refusal",
            "This request triggered restrictions on violative cyber content and was blocked "
            "under Anthropic's Usage Policy.",
            Usage(18, 5),
        ),
        Stop(
            "refusal without stop_details",
            edited("anthropic/text.sse", b'"stop_reason":"end_turn"', b'"stop_reason":"refusal"'),
            "refusal",
            None,
            Usage(12, 6),
            explained="Hello there!",  # (the loop falls back on the response's text)
        ),
    ],
    "gemini": [
        Stop("STOP", path(G_TEXT), "stop", usage=Usage(9, 208, reasoning_tokens=185)),
        Stop(
            "STOP with calls",
            path(G_TOOL),
            "tool_call",
            usage=Usage(29, 15 + 804, reasoning_tokens=804),
        ),
        Stop(
            "MAX_TOKENS",
            path("gemini/max_tokens.chunks.txt"),
            "length",
            usage=Usage(8, 4),
            answer=("AgentloopGeminiLength2", (TextBlock("Once upon a time"),)),
        ),
        Stop(
            "SAFETY",
            path("gemini/safety.chunks.txt"),
            "error",
            "finish_reason SAFETY",
            Usage(15, 0),
        ),
        Stop(
            "RECITATION",
            edited("gemini/max_tokens.chunks.txt", b'"MAX_TOKENS"', b'"RECITATION"'),
            "error",
            "finish_reason RECITATION",
            Usage(8, 4),
        ),
        # (Gemini has no refusal: a blocked answer is SAFETY, above)
    ],
}

#: What a run that ends on each stop reason says (the explanation follows).
RUN_ERRORS = {
    "error": (MODEL_ERROR, "the model stopped with reason 'error': "),
    "refusal": (MODEL_REFUSED, "the model refused: "),
}


@pytest.mark.parametrize(("kind", "case"), cases(STOPS))
def test_stop_reasons_map_to_the_common_ones_and_keep_the_providers_words(
    case: Stop, adapter: Adapter
) -> None:
    answer = final(replies(adapter(case.body()), request(WEATHER)))
    assert (answer.stop_reason, answer.stop_message) == (case.stop, case.message)
    if case.usage is not None:
        assert answer.usage == case.usage
    if case.answer is not None:
        assert (answer.id, answer.content) == case.answer
    if case.stop not in RUN_ERRORS:
        return
    # A refusal fails the run with MODEL_REFUSED, any other provider stop with
    # MODEL_ERROR; the provider's words end the message; the tokens count.
    result, log = session([UserMessage("u1", "...")], adapter(case.body()))
    code, words = RUN_ERRORS[case.stop]
    assert result.status == "failed"
    assert result.error is not None
    assert result.error.code == code
    assert result.error.message == f"step 1: {words}{case.explained or case.message}"
    assert result.usage == answer.usage
    replays(log)


# =========================================================================== reasoning

R_SUMMARY = (
    "**Calculating step-by-step using calculator**\n\nI'll compute 12 plus 7, then "
    "multiply the result by 3, and finally multiply that by 10, reporting the final "
    "product."
)
R_ENCRYPTED = next(  # (the finished reasoning item's)
    event["item"]["encrypted_content"]
    for event in map(json.loads, chunk_lines(R_REASONING))
    if event["type"] == "response.output_item.done" and event["item"]["type"] == "reasoning"
)

REASONING: dict[str, Stream] = {
    "chat": Stream(
        "recorded DeepSeek reasoning_content",
        path(C_DEEPSEEK),
        [
            chunk(
                ThinkingBlock(
                    "The user asks about the weather in San Francisco. "
                    "I should use the weather tool."
                )
            ),
            chunk(
                ToolCall(
                    "call_00_IhCAliIHtM9gKpgfqbBV9873", "weather", {"location": "San Francisco"}
                )
            ),
        ],
    ),
    "responses": Stream(
        "recorded reasoning item with its summary",
        lambda: responses_turns(R_REASONING)[0],
        [
            chunk(ThinkingBlock(R_SUMMARY)),
            chunk(
                ProviderBlock(
                    "openai",
                    "reasoning",
                    {
                        "id": "rs_01830d662ab3856501693c321405c88190be3ab04d5782d5f9",
                        "summary": [{"type": "summary_text", "text": R_SUMMARY}],
                        "encrypted_content": R_ENCRYPTED,
                    },
                )
            ),
            chunk(
                ToolCall(
                    "call_AB6AaRZ1FYZB2RwS6A5vbdqn", "calculator", {"a": 12, "b": 7, "op": "add"}
                )
            ),
        ],
        options={"store": False},
    ),
    "anthropic": Stream(
        "thinking then its signature",
        path("anthropic/thinking.sse"),
        [
            chunk(ThinkingBlock("The user greets me; greet back.")),
            chunk(
                ProviderBlock(
                    "anthropic",
                    "thinking_signature",
                    {"signature": "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds"},
                )
            ),
            chunk(TextBlock("Hello!")),
        ],
    ),
    "gemini": Stream(
        "thought part, then text",
        lambda: data_sse(
            [
                '{"candidates":[{"content":{"parts":[{"text":"Think.","thought":true,'
                '"thoughtSignature":"AAEC"}],"role":"model"},"index":0}],"responseId":"t1"}',
                '{"candidates":[{"content":{"parts":[{"text":"Done."}],"role":"model"},'
                '"finishReason":"STOP","index":0}]}',
            ]
        ),
        [
            chunk(ThinkingBlock("Think.")),
            chunk(signature("AAEC", "thought")),
            chunk(TextBlock("Done.")),
        ],
    ),
}


#: The response that ends each of those streams: its id, stop reason and usage.
REASONED: dict[str, tuple[str, str, Usage | None]] = {
    "chat": (
        "6e77be01-935b-42f6-8b05-d6c763528589",
        "tool_call",
        Usage(374, 61, cache_read_tokens=256, reasoning_tokens=17),
    ),
    "responses": (
        "resp_01830d662ab3856501693c321345c88190b0de00f3b9975691",
        "tool_call",
        Usage(134, 28),
    ),
    "anthropic": ("msg_01AgentloopThink00000010", "stop", Usage(40, 20)),
    "gemini": ("t1", "stop", None),
}


@ALL
def test_reasoning_is_one_thinking_block_before_what_follows(kind: str, adapter: Adapter) -> None:
    case = REASONING[kind]
    items = replies(adapter(case.body(), **case.options), request())
    blocks = tuple(item.block for item in case.items)
    assert items == [*case.items, response(*REASONED[kind][:1], blocks, *REASONED[kind][1:])]
    # The run keeps it in the transcript, first in the assistant message.
    model = adapter(case.body(), **case.options)
    result, log = session([UserMessage("u1", "Hi")], model, max_steps=1)
    assistant = result.messages[1]
    assert type(assistant) is AssistantMessage
    assert assistant.content == blocks
    if REASONED[kind][1] == "stop":
        assert result.status == "completed"
        assert result.final_text == "".join(b.text for b in blocks if type(b) is TextBlock)
    replays(log)


# =========================================================================== cut off


def gemini_cut_off() -> bytes:
    """The recorded Vertex stream of streamed arguments, stopped by the token
    limit in the middle of the first call's arguments."""
    lines = chunk_lines(G_STREAMED)
    last = json.loads(lines[-1])
    last["candidates"][0]["content"]["parts"] = []
    last["candidates"][0]["finishReason"] = "MAX_TOKENS"
    return data_sse([*lines[:2], json.dumps(last)], crlf=True)


CUT = ToolCall("call_Cut0ff06", "get_weather", {})
A_CUT = ToolCall("toolu_01Cut0ff0000000000006", "get_weather", {})
G_CUT = ToolCall("dqHOab6xGLzWodAPkPuViA4-1", "getWeather", {})

#: A response stopped by the token limit in the middle of a tool call's
#: arguments: the call is kept without them (the loop never runs it).
CUT_OFF: dict[str, Stream] = {
    "chat": Stream(
        "length in a tool call",
        path("openai/chat_length_in_tool_call.sse"),
        [chunk(CUT), response("chatcmpl-AgentloopLength06", (CUT,), "length", Usage(61, 8))],
    ),
    "responses": Stream(
        "incomplete in a function call",
        path("openai/responses_incomplete_in_tool_call.sse"),
        [chunk(CUT), response("resp_agentloop_cut06", (CUT,), "length", Usage(61, 8))],
    ),
    "anthropic": Stream(
        "max_tokens in a tool_use",
        path("anthropic/max_tokens_in_tool_use.sse"),
        [
            chunk(A_CUT),
            response("msg_01AgentloopCut00000000006", (A_CUT,), "length", Usage(377, 8)),
        ],
    ),
    "gemini": Stream(
        "MAX_TOKENS in streamed arguments",
        gemini_cut_off,
        [
            chunk(G_CUT),
            chunk(G_STREAMED_SIGNATURE),
            response(
                "dqHOab6xGLzWodAPkPuViA4",
                (G_CUT, G_STREAMED_SIGNATURE),
                "length",
                Usage(26, 23 + 132, reasoning_tokens=132),
            ),
        ],
        options=vertex_streamed_arguments(),
    ),
}

#: A final answer, for the step after.
ANSWER = {
    "chat": path("openai/chat_final_answer.sse"),
    "responses": path("openai/responses_final_answer.sse"),
    "anthropic": path("anthropic/final_answer.sse"),
    "gemini": path(G_TEXT),
}

#: The id of the tool result in a request body.
RESULT_ID: dict[str, Callable[[dict[str, Any]], str]] = {
    "chat": lambda sent: next(m for m in sent["messages"] if m["role"] == "tool")["tool_call_id"],
    "responses": lambda sent: next(i for i in sent["input"] if i["type"] == "function_call_output")[
        "call_id"
    ],
    "anthropic": lambda sent: sent["messages"][2]["content"][0]["tool_use_id"],
    "gemini": lambda sent: sent["contents"][-1]["parts"][0]["functionResponse"]["id"],
}


@ALL
def test_a_call_cut_off_by_the_token_limit_is_kept_without_arguments(
    kind: str, adapter: Adapter
) -> None:
    case = CUT_OFF[kind]
    assert replies(adapter(case.body(), **case.options), request(WEATHER)) == case.items
    # The loop answers it with an error result and goes on.
    model = adapter(case.body(), ANSWER[kind](), **case.options)
    result, log = session([UserMessage("u1", "Weather?")], model, tools=[get_weather])
    assert result.status == "completed"
    truncated = result.messages[2]
    assert type(truncated) is ToolResultMessage
    assert truncated.is_error
    call = case.items[0].block
    assert truncated.tool_call_id == call.id
    assert RESULT_ID[kind](adapter.server.body(1)) == call.id
    replays(log)


# =========================================================================== malformed


@dataclass(frozen=True)
class Malformed:
    name: str
    body: Callable[[], bytes]
    problem: str
    where: str
    options: dict[str, Any] = field(default_factory=dict)


MALFORMED: dict[str, list[Malformed]] = {
    "chat": [
        Malformed(
            "not JSON",
            path("openai/chat_malformed_arguments.sse"),
            "the arguments are not valid JSON",
            "tool call 0 ('get_weather', id 'call_",
        ),
        Malformed(
            "not an object",
            path("openai/chat_non_object_arguments.sse"),
            "must be a JSON object, got an array",
            "tool call 0 ('get_weather', id 'call_",
        ),
    ],
    "responses": [
        Malformed(
            "not JSON",
            path("openai/responses_malformed_arguments.sse"),
            "not valid JSON",
            "output item 0 ('get_weather', id 'call_BadJson07')",
        ),
    ],
    "anthropic": [
        Malformed(
            "not JSON",
            path("anthropic/malformed_tool_input.sse"),
            "the arguments are not valid JSON",
            "content block 0 (tool_use 'get_weather', id 'toolu_01",
        ),
        Malformed(
            "not an object",
            path("anthropic/non_object_tool_input.sse"),
            "must be a JSON object, got an array",
            "content block 0 (tool_use 'get_weather', id 'toolu_01",
        ),
    ],
    "gemini": [
        Malformed(
            "a streamed argument's path that is not a JSON path",
            edited(G_STREAMED, b'"jsonPath":"$.location"', b'"jsonPath":"location"'),
            "the argument path 'location' does not start with $",
            "gemini response 'dqHOab6xGLzWodAPkPuViA4', function call 1 ('getWeather')",
            options=vertex_streamed_arguments(),
        ),
    ],
}


@pytest.mark.parametrize(("kind", "case"), cases(MALFORMED))
def test_malformed_arguments_are_a_protocol_failure_naming_the_call(
    case: Malformed, adapter: Adapter
) -> None:
    items = replies(adapter(case.body(), **case.options), request(WEATHER))
    assert len(items) == 1
    failed = items[0]
    assert type(failed) is ModelFailure
    assert failed.code == MODEL_PROTOCOL_ERROR
    assert case.problem in failed.message
    assert case.where in failed.message
    result, log = session(
        [UserMessage("u1", "Weather in Paris?")],
        adapter(case.body(), **case.options),
        tools=[get_weather],
    )
    assert result.status == "failed"
    assert result.error is not None
    assert result.error.code == MODEL_PROTOCOL_ERROR
    assert case.problem in result.error.message
    replays(log)


# =========================================================================== errors


@dataclass(frozen=True)
class Failed:
    """An HTTP error: its status, body, ``ModelError.kind`` and words kept."""

    status: int
    body: str
    kind: str
    text: str

    @property
    def name(self) -> str:
        return str(self.status)


HTTP_ERRORS: dict[str, list[Failed]] = {
    **{
        kind: [
            Failed(
                429, "openai/error_429.json", "rate_limit", "Rate limit reached for gpt-4.1-mini"
            ),
            Failed(401, "openai/error_401.json", "auth", "Incorrect API key provided"),
            Failed(500, "openai/error_500.json", "server", "The server had an error"),
            Failed(
                400,
                "openai/error_400.json",
                "bad_request",
                "Invalid 'messages[1].tool_calls[0].id'",
            ),
        ]
        for kind in ("chat", "responses")
    },
    "anthropic": [
        Failed(
            429,
            "anthropic/error_429.json",
            "rate_limit",
            "would exceed the rate limit for your organization",
        ),
        Failed(401, "anthropic/error_401.json", "auth", "invalid x-api-key [authentication_error]"),
        Failed(500, "anthropic/error_500.json", "server", "Internal server error [api_error]"),
        Failed(529, "anthropic/error_529.json", "server", "Overloaded [overloaded_error]"),
        Failed(400, "anthropic/error_400.json", "bad_request", "String should match pattern"),
    ],
    "gemini": [
        Failed(400, "gemini/error_400.json", "bad_request", "Invalid JSON payload received."),
        Failed(401, "gemini/error_401.json", "auth", "API key not valid."),
        Failed(429, "gemini/error_429.json", "rate_limit", "Resource has been exhausted"),
        Failed(500, "gemini/error_500.json", "server", "An internal error has occurred."),
    ],
}


@pytest.mark.parametrize(("kind", "case"), cases(HTTP_ERRORS))
def test_http_errors_become_typed_model_errors(case: Failed, adapter: Adapter) -> None:
    items, error = failure(adapter((case.status, read(case.body))))
    assert items == []
    assert (error.provider, error.status_code, error.kind) == (
        adapter.provider,
        case.status,
        case.kind,
    )
    assert error.message.startswith(f"{adapter.provider} HTTP {case.status}: ")
    assert case.text in error.message
    assert error.usage is None
    assert error.retry_after is None  # (no header said when to come back)
    assert len(adapter.server.requests) == 1  # the SDK did not retry behind our back


#: A 429 that says when to come back: each adapter's error body and the headers.
ASKS: dict[str, list[tuple[str, bytes, dict[str, str], float | None]]] = {
    **{
        kind: [
            ("retry-after", read("openai/error_429.json"), {"retry-after": "20"}, 20.0),
            (
                "retry-after-ms wins",
                read("openai/error_429.json"),
                {"retry-after-ms": "1500", "retry-after": "2"},
                1.5,
            ),
            (
                "retry-after, an HTTP date past",
                read("openai/error_429.json"),
                {"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"},
                0.0,
            ),
            ("nonsense", read("openai/error_429.json"), {"retry-after": "soon"}, None),
        ]
        for kind in ("chat", "responses")
    },
    "anthropic": [
        ("retry-after", read("anthropic/error_429.json"), {"retry-after": "20"}, 20.0),
        ("retry-after-ms", read("anthropic/error_429.json"), {"retry-after-ms": "250"}, 0.25),
    ],
    "gemini": [
        (
            "recorded google.rpc.RetryInfo",
            read("gemini/recorded/google-429-retry-info.json"),
            {},
            34.4,
        ),
        ("retry-after", read("gemini/error_429.json"), {"retry-after": "20"}, 20.0),
    ],
}


def asks(table: dict[str, list[Any]]) -> list[Any]:
    return [
        pytest.param(kind, case, id=f"{kind}:{case[0]}")
        for kind, entries in table.items()
        for case in entries
    ]


@pytest.mark.parametrize(("kind", "ask"), asks(ASKS))
def test_a_429_says_when_to_come_back_and_the_retry_waits_that_long(
    ask: tuple[str, bytes, dict[str, str], float | None], adapter: Adapter
) -> None:
    _, content, headers, seconds = ask
    _, error = failure(adapter((429, content, headers)))
    assert (error.kind, error.status_code, error.retry_after) == ("rate_limit", 429, seconds)
    # A policy waits what the provider asked, not its own backoff (0.5 s).
    sleeps = adapter.sleeps()
    model = adapter(
        (429, content, headers), TEXT[adapter.kind].body(), retry=RetryPolicy(3, 0.5), sleep=sleeps
    )
    assert final(replies(model)).stop_reason == "stop"
    assert sleeps.delays == [0.5 if seconds is None else seconds]
    first = model.attempts[0]
    assert (first.retried, first.delay_seconds, first.retry_after) == (
        True,
        0.5 if seconds is None else seconds,
        seconds,
    )


@ALL
def test_a_wait_longer_than_the_policy_allows_is_not_retried(
    kind: str, adapter: Adapter, caplog: pytest.LogCaptureFixture
) -> None:
    """Retrying before the provider's time would only fail again: the error is
    raised at once, its ``retry_after`` saying when to come back."""
    _, content, headers, seconds = ASKS[kind][0]
    assert seconds is not None
    sleeps = adapter.sleeps()
    policy = RetryPolicy(3, 0.5, max_retry_after_seconds=seconds - 1)
    model = adapter((429, content, headers), TEXT[kind].body(), retry=policy, sleep=sleeps)
    with caplog.at_level(logging.WARNING, logger="agentloop.models"):
        _, error = failure(model)
    assert error.retry_after == seconds
    assert sleeps.delays == []
    assert len(adapter.server.requests) == 1
    assert list(model.attempts) == [
        RetryAttempt(
            request_id="request-001",
            number=1,
            error=error.message,
            kind="rate_limit",
            status_code=429,
            retry_after=seconds,
        )
    ]
    assert f"not retrying: the provider asks to wait {seconds:.3g}s, more than " in caplog.text
    # With room for the wait, the same answer is retried.
    roomy = RetryPolicy(3, 0.5, max_retry_after_seconds=seconds)
    model = adapter((429, content, headers), TEXT[kind].body(), retry=roomy, sleep=adapter.sleeps())
    assert final(replies(model)).stop_reason == "stop"


def refused(kind: str, failure_: Exception) -> str:
    """What a refused connection is called: the SDK's own words, asked of the SDK
    itself on the same failing server (the words change between SDK versions:
    anthropic 2.17 names the host and the reason, earlier ones said "Connection
    error."); google-genai passes httpx's on."""
    if kind == "gemini":
        return str(failure_)
    sdk = client(kind, Server(failure_)).with_options(max_retries=0)
    message = [{"role": "user", "content": "Hi"}]
    try:
        if kind == "anthropic":
            sdk.messages.create(model="m", max_tokens=1, messages=message)
        else:
            sdk.chat.completions.create(model="m", messages=message)
    except (openai.APIConnectionError, anthropic.APIConnectionError) as exc:
        return str(exc)
    raise AssertionError(f"the {kind} SDK did not fail")


@ALL
@pytest.mark.parametrize(
    "failure_",
    [httpx2.ConnectError("[Errno 111] Connection refused"), httpx2.ReadTimeout("timed out")],
    ids=["connect", "timeout"],
)
def test_transport_errors_are_connection_errors(
    kind: str, adapter: Adapter, failure_: Exception
) -> None:
    _, error = failure(adapter(failure_))
    assert (error.provider, error.kind, error.status_code) == (adapter.provider, "connection", None)
    timeout = isinstance(failure_, httpx2.ReadTimeout)
    detail = "request timed out" if timeout else refused(kind, failure_)
    assert error.message == f"{adapter.provider} connection: {detail}"
    assert len(adapter.server.requests) == 1


@dataclass(frozen=True)
class MidStream:
    """An error reported inside a 200 stream, after what came before it."""

    name: str
    body: Callable[[], bytes]
    kind: str
    message: str
    usage: Usage | None
    status: int | None = None
    before: tuple[Any, ...] = ()


MID_STREAM: dict[str, list[MidStream]] = {
    "chat": [
        MidStream(
            "error chunk",
            path("openai/chat_midstream_error.sse"),
            "server",
            "openai stream error: The server had an error while processing your request. "
            "Sorry about that! [server_error]",
            None,
        ),
        MidStream(
            "recorded OpenRouter error chunk with the usage",
            path("openai/recorded/test_openrouter_stream_error.yaml"),
            "bad_request",
            "openai stream error: Token limit reached [400]",
            Usage(43, 10, reasoning_tokens=11),
        ),
    ],
    "responses": [
        MidStream(
            "response.failed",
            path("openai/responses_failed.sse"),
            "server",
            "openai stream error: The model failed to generate a response. [server_error]",
            None,
        ),
        MidStream(
            "error event",
            path("openai/responses_error_event.sse"),
            "rate_limit",
            "openai stream error: Rate limit reached for gpt-4.1-mini. Please try again in 2s. "
            "[rate_limit_exceeded]",
            None,
        ),
    ],
    "anthropic": [
        MidStream(
            "error event after message_start",
            path("anthropic/overloaded_midstream.sse"),
            "server",
            "anthropic server: Overloaded [overloaded_error]",
            Usage(12, 1),  # message_start's input tokens were billed
        ),
    ],
    "gemini": [
        MidStream(
            "error object after a chunk",
            path("gemini/midstream_error.chunks.txt"),
            "server",
            "gemini HTTP 503: The model is overloaded. Please try again later. [UNAVAILABLE]",
            Usage(30, 1),
            status=503,
            before=(TextBlock("Partial"),),
        ),
    ],
}


@pytest.mark.parametrize(("kind", "case"), cases(MID_STREAM))
def test_an_error_inside_the_stream_is_a_model_error_with_the_usage_so_far(
    case: MidStream, adapter: Adapter
) -> None:
    items, error = failure(adapter(case.body()))
    assert [item.block for item in items][: len(case.before)] == list(case.before)
    assert (error.provider, error.kind, error.status_code) == (
        adapter.provider,
        case.kind,
        case.status,
    )
    assert error.message == case.message
    assert error.usage == case.usage
    # The run fails with the provider's words, and the billed tokens count.
    result, log = session([UserMessage("u1", "Hi")], adapter(case.body()))
    assert result.status == "failed"
    assert result.error is not None
    assert result.error.code == MODEL_ERROR
    assert result.error.message == f"step 1: model call failed: {case.message}"
    assert result.usage == (case.usage or Usage())
    replays(log)


@ALL
def test_an_error_without_a_json_body_keeps_its_status(kind: str, adapter: Adapter) -> None:
    _, error = failure(adapter((502, b"<html><body>Bad gateway</body></html>")))
    assert (error.kind, error.status_code) == ("server", 502)
    assert error.message.startswith(f"{adapter.provider} HTTP 502: ")


@pytest.mark.parametrize(
    ("module", "exception", "message"),
    [
        ("openai", openai.OpenAIError("no api key"), "openai unknown: OpenAIError: no api key"),
        (
            "anthropic",
            anthropic.AnthropicError("no credentials"),
            "anthropic unknown: AnthropicError: no credentials",
        ),
    ],
)
def test_other_sdk_errors_are_of_unknown_kind(
    module: str, exception: Exception, message: str
) -> None:
    import importlib

    error = importlib.import_module(f"agentloop.models.{module}")._model_error(exception)
    assert (error.kind, error.status_code, error.message) == ("unknown", None, message)


OPENAI_429 = (
    "openai HTTP 429: Rate limit reached for gpt-4.1-mini in organization org-agentloop on "
    "requests per min (RPM): Limit 3, Used 3, Requested 1. Please try again in 20s. "
    "[rate_limit_exceeded]"
)
RUN_ERROR = {
    "chat": (429, "openai/error_429.json", OPENAI_429, "rate_limit_exceeded"),
    "responses": (429, "openai/error_429.json", OPENAI_429, "rate_limit_exceeded"),
    "anthropic": (
        401,
        "anthropic/error_401.json",
        "anthropic HTTP 401: invalid x-api-key [authentication_error]",
        "authentication_error",
    ),
    "gemini": (
        429,
        "gemini/error_429.json",
        "gemini HTTP 429: Resource has been exhausted (e.g. check quota). [RESOURCE_EXHAUSTED]",
        "RESOURCE_EXHAUSTED",
    ),
}


@ALL
def test_a_run_records_the_provider_error(kind: str, adapter: Adapter) -> None:
    status, name, words, code = RUN_ERROR[kind]
    result, log = session([UserMessage("u1", "Hi")], adapter((status, read(name))))
    assert result.status == "failed"
    assert result.error is not None
    assert result.error.code == MODEL_ERROR
    assert result.error.message == f"step 1: model call failed: {words}"
    drafts = [e for e in log.events if type(e) is PlanDraftEvent]
    assert type(drafts[0].reply) is ModelFailure
    assert code in drafts[0].reply.message
    replays(log)


# =========================================================================== retries


def error_reply(kind: str, status: int) -> tuple[int, bytes]:
    return status, read(f"{PROVIDER[kind]}/error_{status}.json")


@ALL
def test_retries_before_the_first_chunk_and_records_each_attempt(
    kind: str, adapter: Adapter
) -> None:
    sleeps = adapter.sleeps()
    model = adapter(
        error_reply(kind, 429),
        error_reply(kind, 500),
        TEXT[kind].body(),
        retry=RetryPolicy(3, 0.5),
        sleep=sleeps,
    )
    assert replies(model) == TEXT[kind].items
    assert sleeps.delays == [0.5, 1.0]
    assert len(adapter.server.requests) == 3
    assert [(a.number, a.kind, a.status_code, a.retried) for a in model.attempts] == [
        (1, "rate_limit", 429, True),
        (2, "server", 500, True),
        (3, None, None, False),
    ]
    assert [a.delay_seconds for a in model.attempts] == [0.5, 1.0, 0.0]
    assert model.attempts[2] == RetryAttempt(request_id="request-001", number=3)


@ALL
def test_gives_up_after_the_last_attempt(kind: str, adapter: Adapter) -> None:
    sleeps = adapter.sleeps()
    model = adapter(
        error_reply(kind, 429), error_reply(kind, 500), retry=RetryPolicy(2, 1.0), sleep=sleeps
    )
    items, error = failure(model)
    assert items == [] and error.status_code == 500
    assert sleeps.delays == [1.0]
    assert [(a.number, a.retried) for a in model.attempts] == [(1, True), (2, False)]


@ALL
def test_does_not_retry_auth_errors(kind: str, adapter: Adapter) -> None:
    model = adapter(
        error_reply(kind, 401), TEXT[kind].body(), retry=RetryPolicy(3), sleep=pytest.fail
    )
    _, error = failure(model)
    assert error.kind == "auth"
    assert len(adapter.server.requests) == 1
    assert list(model.attempts) == [
        RetryAttempt(
            request_id="request-001", number=1, error=error.message, kind="auth", status_code=401
        )
    ]


@ALL
def test_no_policy_means_no_retry(kind: str, adapter: Adapter) -> None:
    model = adapter(error_reply(kind, 500), TEXT[kind].body())
    failure(model)
    assert len(adapter.server.requests) == 1
    assert [a.kind for a in model.attempts] == ["server"]


def head(kind: str) -> bytes:
    """The start of ``kind``'s text stream, up to its first text delta."""
    parts = events(TEXT[kind].body())
    is_delta = DELTA[kind][0]
    at = next(i for i, part in enumerate(parts) if is_delta(part))
    return b"".join(parts[: at + 1])


FIRST_CHUNK = {kind: TEXT[kind].items[0] for kind in KINDS}


@ALL
def test_a_connection_dropped_after_a_chunk_is_not_retried(kind: str, adapter: Adapter) -> None:
    # (a stream that already produced chunks cannot be taken back)
    dropped = Body(head(kind), error=httpx2.ReadError("connection reset by peer"))
    model = adapter(dropped, TEXT[kind].body(), retry=RetryPolicy(3, 1.0), sleep=pytest.fail)
    items, error = failure(model)
    assert items == [FIRST_CHUNK[kind]]
    assert error.kind == "connection"
    assert len(adapter.server.requests) == 1
    assert [a.retried for a in model.attempts] == [False]


#: Each adapter's own error event after a first chunk: the chunk, the error's kind.
ERROR_AFTER_A_CHUNK: dict[str, tuple[Callable[[], bytes], Any, str]] = {
    "chat": (
        lambda: head("chat") + events(body("openai/chat_midstream_error.sse"))[-1],
        FIRST_CHUNK["chat"],
        "server",
    ),
    "responses": (
        lambda: head("responses") + events(body("openai/responses_error_event.sse"))[-1],
        FIRST_CHUNK["responses"],
        "rate_limit",
    ),
    "anthropic": (
        lambda: head("anthropic") + events(body("anthropic/overloaded_midstream.sse"))[-1],
        FIRST_CHUNK["anthropic"],
        "server",
    ),
    "gemini": (
        path("gemini/midstream_error.chunks.txt"),
        chunk(TextBlock("Partial")),
        "server",
    ),
}


@ALL
def test_an_error_event_after_a_chunk_is_not_retried(kind: str, adapter: Adapter) -> None:
    # (errors of kinds worth retrying, had nothing come before them)
    data, first, error_kind = ERROR_AFTER_A_CHUNK[kind]
    model = adapter(data(), TEXT[kind].body(), retry=RetryPolicy(3), sleep=pytest.fail)
    items, error = failure(model)
    assert items == [first]
    assert error.kind == error_kind
    assert len(adapter.server.requests) == 1
    assert [a.retried for a in model.attempts] == [False]


# =========================================================================== the adapter


@ALL
def test_each_client_serves_its_own_drivers_and_the_other_pairing_names_the_fix(
    kind: str,
) -> None:
    import asyncio

    server = Server()
    sync_model, async_model = make(kind, server, False), make(kind, server, True)
    assert (sync_model.asynchronous, async_model.asynchronous) == (False, True)
    with pytest.raises(TypeError, match=r"was given a sync .*: use stream\(request\) ") as caught:
        sync_model.astream(request())
    assert str(caught.value).endswith(f"give it {ASYNC_CLIENT[kind]}")
    with pytest.raises(TypeError, match=r"was given .*async.*: use astream\(request\) "):
        async_model.stream(request())
    hi = [UserMessage("u1", "Hi")]
    with pytest.raises(TypeError, match="pass the SDK's async client"):
        asyncio.run(arun(hi, model=sync_model, tools=[]))
    with pytest.raises(TypeError, match="is asynchronous"):
        run(hi, model=async_model, tools=[])
    assert server.requests == []


ASYNC_CLIENT = {
    "chat": "an async openai.AsyncOpenAI client",
    "responses": "an async openai.AsyncOpenAI client",
    "anthropic": "an async anthropic.AsyncAnthropic client",
    "gemini": "the async client (a google.genai.Client's .aio)",
}


@ALL
def test_the_adapters_options_are_checked(kind: str) -> None:
    import asyncio

    server = Server()
    with pytest.raises(TypeError, match="retry must be a RetryPolicy"):
        make(kind, server, retry=3)
    with pytest.raises(TypeError, match="sleep must be callable"):
        make(kind, server, sleep=1.0)
    with pytest.raises(TypeError, match="is an async function, but the client is sync"):
        make(kind, server, retry=RetryPolicy(2), sleep=asyncio.sleep)
    with pytest.raises(ValueError, match="non-empty model name"):
        make(kind, server, model="")


#: The request fields each adapter sets itself (refused as options).
RESERVED = {
    "chat": ["messages", "tools", "stream"],
    "responses": ["input", "instructions", "tools", "stream"],
    "anthropic": ["messages", "system", "tools", "stream"],
    "gemini": ["system_instruction", "tools"],
}


@pytest.mark.parametrize(
    ("kind", "option"), [(kind, option) for kind, names in RESERVED.items() for option in names]
)
def test_options_the_adapter_owns_are_refused(kind: str, option: str) -> None:
    with pytest.raises(ValueError, match=f"{option} are set by the adapter"):
        make(kind, Server(), **{option: "x"})


#: Options passed through to every call, and where the request body has them.
OPTIONS: dict[str, tuple[dict[str, Any], Callable[[dict[str, Any]], Any], Any]] = {
    "chat": (
        {"temperature": 0, "stream_options": {"include_usage": False}},
        lambda sent: (sent["temperature"], sent["stream_options"]),
        (0, {"include_usage": False}),
    ),
    "responses": (
        {"temperature": 0, "max_output_tokens": 50},
        lambda sent: (sent["temperature"], sent["max_output_tokens"]),
        (0, 50),
    ),
    "anthropic": (
        {"metadata": {"user_id": "u-1"}, "stop_sequences": ["###"]},
        lambda sent: (sent["metadata"], sent["stop_sequences"]),
        ({"user_id": "u-1"}, ["###"]),
    ),
    "gemini": (
        {"temperature": 0.25, "max_output_tokens": 50},
        lambda sent: sent["generationConfig"],
        {"temperature": 0.25, "maxOutputTokens": 50},
    ),
}

REPR = {
    "chat": "OpenAIChatModel(model='gpt-test')",
    "responses": "OpenAIResponsesModel(model='gpt-test')",
    "anthropic": "AnthropicModel(model='claude-test', max_tokens=1024)",
    "gemini": "GeminiModel(model='gemini-test')",
}


@ALL
def test_request_options_are_sent_and_the_users_client_is_not_changed(
    kind: str, adapter: Adapter
) -> None:
    options, sent, expected = OPTIONS[kind]
    model = adapter(TEXT[kind].body(), **options)
    replies(model)
    assert sent(adapter.server.body()) == expected
    assert repr(model) == REPR[kind]
    yours = client(kind, Server(), adapter.asynchronous)
    adapter_class: Any = type(model)
    theirs = adapter_class(yours, MODEL_NAMES[kind])
    if kind == "gemini":
        # (google-genai retries only when its client was built with retry_options)
        assert theirs.client is yours
        return
    # A copy of your client, without the SDK's own retries.
    sdk: Any = openai if kind in ("chat", "responses") else anthropic
    assert yours.max_retries == sdk.DEFAULT_MAX_RETRIES
    assert theirs.client.max_retries == 0


# =========================================================================== --model spec


@dataclass(frozen=True)
class Spec:
    spec: str
    environ: dict[str, str]
    adapter: type
    model: str
    missing_key: dict[str, str]
    key_hint: str
    module: str
    install_hint: str


SPECS = {
    "chat": Spec(
        "openai:gpt-4.1-mini",
        {"OPENAI_API_KEY": "sk-test"},
        OpenAIChatModel,
        "gpt-4.1-mini",
        {},
        "set OPENAI_API_KEY in the environment",
        "openai",
        r"pip install 'agentloop-replay\[openai\]'",
    ),
    "responses": Spec(
        "openai-responses:gpt-4.1-mini",
        {"OPENAI_API_KEY": "sk-test"},
        OpenAIResponsesModel,
        "gpt-4.1-mini",
        {},
        "set OPENAI_API_KEY in the environment",
        "openai",
        r"pip install 'agentloop-replay\[openai\]'",
    ),
    "anthropic": Spec(
        "anthropic:claude-sonnet-4-5",
        {"ANTHROPIC_API_KEY": "sk-ant-test"},
        AnthropicModel,
        "claude-sonnet-4-5",
        {"ANTHROPIC_API_KEY": " "},
        "set ANTHROPIC_API_KEY in the environment",
        "anthropic",
        r"pip install 'agentloop-replay\[anthropic\]'",
    ),
    "gemini": Spec(
        "gemini:gemini-2.5-flash",
        {"GOOGLE_API_KEY": "g-key"},
        GeminiModel,
        "gemini-2.5-flash",
        {},
        "set GEMINI_API_KEY in the environment",
        "google.genai",
        r"install the google-genai SDK .*agentloop-replay\[gemini\]",
    ),
}


@ALL
def test_model_from_spec_builds_the_adapter_and_says_what_is_missing(
    kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = SPECS[kind]
    model: Any = model_from_spec(spec.spec, environ=spec.environ)
    assert type(model) is spec.adapter
    assert model.model == spec.model
    if kind != "gemini":
        assert model.client.api_key == next(iter(spec.environ.values()))
    with pytest.raises(ModelSpecError, match=spec.key_hint):
        model_from_spec(spec.spec, environ=spec.missing_key)
    monkeypatch.setitem(sys.modules, spec.module, None)
    with pytest.raises(ModelSpecError, match=spec.install_hint):
        model_from_spec(spec.spec, environ=spec.environ)


# =========================================================================== tool loops


@dataclass(frozen=True)
class Loop:
    """A two-step tool loop: the bodies, the tools, and what the run must give."""

    bodies: Callable[[], list[bytes]]
    tools: list[Any]
    final_text: str
    usage: Usage
    messages: list[str]
    #: The part of the second request that carries the call and its result.
    second: Callable[[dict[str, Any]], Any]
    sent: Any


G_SF_SENT = base64.urlsafe_b64encode(base64.b64decode(G_SF_SIGNATURE.data["thought_signature"]))

LOOPS: dict[str, Loop] = {
    "chat": Loop(
        lambda: [body("openai/chat_tool_call.sse"), body("openai/chat_final_answer.sse")],
        [get_weather, get_time],
        "It is 18°C in Paris.",
        Usage(61, 15) + Usage(98, 9),
        [
            "u1",
            "message-chatcmpl-AgentloopTool01",
            "tool-result-call_W3atherParis01",
            "message-chatcmpl-AgentloopFinal03",
        ],
        lambda sent: sent["messages"],
        [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Weather in Paris?"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_W3atherParis01",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'},
                    }
                ],
            },
            {
                "role": "tool",
                "tool_call_id": "call_W3atherParis01",
                "content": "18°C and sunny in Paris",
            },
        ],
    ),
    "responses": Loop(
        lambda: [
            body("openai/responses_tool_calls.sse"),
            body("openai/responses_final_answer.sse"),
        ],
        [get_weather, get_time],
        "It is 18°C in Paris.",
        Usage(75, 40) + Usage(98, 9),
        [
            "u1",
            "message-resp_agentloop_tools02",
            "tool-result-call_W3atherParis02",
            "tool-result-call_Cl0ckParis02",
            "message-resp_agentloop_final03",
        ],
        lambda sent: sent["input"],
        [
            {"type": "message", "role": "user", "content": "Weather in Paris?"},
            {"type": "message", "role": "assistant", "content": "Checking both."},
            {
                "type": "function_call",
                "call_id": "call_W3atherParis02",
                "name": "get_weather",
                "arguments": '{"city":"Paris"}',
            },
            {
                "type": "function_call",
                "call_id": "call_Cl0ckParis02",
                "name": "get_time",
                "arguments": '{"timezone":"Europe/Paris"}',
            },
            {
                "type": "function_call_output",
                "call_id": "call_W3atherParis02",
                "output": "18°C and sunny in Paris",
            },
            {
                "type": "function_call_output",
                "call_id": "call_Cl0ckParis02",
                "output": "20:15 in Europe/Paris",
            },
        ],
    ),
    "anthropic": Loop(
        lambda: [body("anthropic/tool_use.sse"), body("anthropic/final_answer.sse")],
        [get_weather],
        "It is 18°C in Paris.",
        Usage(377 + 480, 65 + 14),
        [
            "u1",
            "message-msg_01AgentloopTool0000000002",
            "tool-result-toolu_01WeatherParis00000002",
            "message-msg_01AgentloopFinal00000004",
        ],
        lambda sent: sent["messages"],
        [
            {"role": "user", "content": "Weather in Paris?"},
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": "I'll check the weather in Paris."},
                    {
                        "type": "tool_use",
                        "id": "toolu_01WeatherParis00000002",
                        "name": "get_weather",
                        "input": {"city": "Paris"},
                    },
                ],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_01WeatherParis00000002",
                        "content": "18°C and sunny in Paris",
                        "is_error": False,
                    }
                ],
            },
        ],
    ),
    "gemini": Loop(
        lambda: [body(G_TOOL), body(G_TEXT)],
        [weather],
        STRAWBERRY.text,
        Usage(29 + 9, 15 + 804 + 23 + 185, reasoning_tokens=804 + 185),
        [
            "u1",
            "message-QHiLaa6LBrb8vdIPoNztsAg",
            "tool-result-QHiLaa6LBrb8vdIPoNztsAg-1",
            "message-bH6LaZW8Fp_3nsEPqtaSwQ4",
        ],
        lambda sent: sent["contents"],
        [
            {"role": "user", "parts": [{"text": "Weather in Paris?"}]},
            {
                "role": "model",
                "parts": [
                    {
                        "functionCall": {
                            "id": "QHiLaa6LBrb8vdIPoNztsAg-1",
                            "name": "weather",
                            "args": {"location": "San Francisco"},
                        },
                        # (the SDK writes bytes as URL-safe base64: the bytes received)
                        "thoughtSignature": G_SF_SENT.decode(),
                    }
                ],
            },
            {
                "role": "user",
                "parts": [
                    {
                        "functionResponse": {
                            "id": "QHiLaa6LBrb8vdIPoNztsAg-1",
                            "name": "weather",
                            "response": {"result": "foggy"},
                        }
                    }
                ],
            },
        ],
    ),
}


@ALL
def test_a_tool_loop_sends_the_calls_and_results_back_and_replays_without_the_model(
    kind: str, adapter: Adapter
) -> None:
    loop = LOOPS[kind]
    model = adapter(*loop.bodies())
    result, log = session(
        [UserMessage("u1", "Weather in Paris?")], model, tools=loop.tools, system="Be brief."
    )
    assert result.status == "completed"
    assert result.final_text == loop.final_text
    assert result.steps == 2
    assert [m.id for m in result.messages] == loop.messages
    assert result.usage == loop.usage
    assert loop.second(adapter.server.body(1)) == loop.sent
    # The log replays without the model: no further HTTP request is made.
    requests_made = len(adapter.server.requests)
    replays(log)
    assert len(adapter.server.requests) == requests_made == 2


# =========================================================================== either client


def both(kind: str, *replies_: Any, **options: Any) -> tuple[Any, Any]:
    """What the sync and the async client make of the same replies (and check that
    both sent the same requests)."""
    sync_server, async_server = Server(*replies_), Server(*replies_)
    items, error = outcome(make(kind, sync_server, False, **options))
    expected = (items, error_fields(error))
    items, error = outcome(make(kind, async_server, True, **options))
    assert async_server.sent() == sync_server.sent()
    return expected, (items, error_fields(error))


STREAMS: list[tuple[str, str]] = [
    *[("chat", p) for p in fixtures("openai", "chat_*.sse")],
    *[
        ("chat", f"openai/recorded/{name}")
        for name in (
            "deepseek-tool-call.chunks.txt",
            "issue-20203-empty-tool-calls.chunks.txt",
            "test_openrouter_stream_error.yaml",
        )
    ],
    *[("responses", p) for p in fixtures("openai", "responses_*.sse")],
    *[
        ("responses", f"openai/recorded/{name}")
        for name in (
            "issue-19493-gpt-5.1-tool-call.chunks.txt",
            "openai-error.1.chunks.txt",
            "openai-phase.1.chunks.txt",
        )
    ],
    *[("anthropic", p) for p in fixtures("anthropic", "*.sse")],
    *[("anthropic", p) for p in fixtures("anthropic", "recorded/*.chunks.txt")],
    # (the recorded multimodal requests, test_media.py, are not streams)
    *[("anthropic", p) for p in fixtures("anthropic", "recorded/test_anthropic_*.yaml")],
    *[("gemini", p) for p in fixtures("gemini", "*.chunks.txt")],
    *[("gemini", p) for p in fixtures("gemini", "recorded/*.chunks.txt")],
]

ERRORS: list[tuple[str, str]] = [
    *[(kind, p) for kind in ("chat", "responses") for p in fixtures("openai", "*.json")],
    *[("anthropic", p) for p in fixtures("anthropic", "*.json")],
    *[("gemini", p) for p in fixtures("gemini", "*.json")],
    ("anthropic", "anthropic/recorded/anthropic-issue-17366-error.json"),
    ("gemini", "gemini/recorded/google-429-retry-info.json"),
]


#: The recorded error bodies' statuses (the hand-made ones say it in their name).
RECORDED_STATUS = {"anthropic-issue-17366-error.json": 400, "google-429-retry-info.json": 429}


def status_of(name: str) -> int:
    base = name.rsplit("/", 1)[1]
    return RECORDED_STATUS.get(base) or int(base.rsplit("_", 1)[1].split(".")[0])


@pytest.mark.parametrize(("kind", "name"), STREAMS, ids=[f"{k}:{p}" for k, p in STREAMS])
def test_every_body_gives_the_same_replies_with_either_client(kind: str, name: str) -> None:
    expected, got = both(kind, body(name))
    assert got == expected
    items, error = expected
    assert error is not None or type(items[-1]) is not ModelChunk  # it ended, one way or another


@pytest.mark.parametrize(("kind", "name"), ERRORS, ids=[f"{k}:{p}" for k, p in ERRORS])
def test_every_http_error_is_the_same_model_error_with_either_client(kind: str, name: str) -> None:
    expected, got = both(kind, (status_of(name), read(name)))
    assert got == expected
    assert expected[1] is not None and expected[1][3] == status_of(name)


def test_every_turn_of_a_recorded_reasoning_loop_is_the_same() -> None:
    for turn in responses_turns(R_REASONING):
        expected, got = both("responses", turn, store=False)
        assert got == expected
        assert type(expected[0][-1]) is ModelResponse


@settings(max_examples=examples(60), deadline=None)
@given(case=st.sampled_from(STREAMS), data=st.data())
def test_how_the_bytes_arrive_changes_nothing(case: tuple[str, str], data: st.DataObject) -> None:
    """The body cut into arbitrary pieces: the same replies as in one piece, from
    either client."""
    kind, name = case
    whole = body(name)
    cuts = sorted(data.draw(st.sets(st.integers(1, len(whole) - 1), max_size=12), label="cuts"))
    pieces = [whole[start:end] for start, end in itertools.pairwise([0, *cuts, len(whole)])]
    expected, got = both(kind, Body(*pieces))
    assert got == expected
    items, error = outcome(make(kind, Server(whole), True))
    assert (items, error_fields(error)) == got


# =========================================================================== structured output


class Forecast(msgspec.Struct):
    city: str
    celsius: int


FORECAST = OutputSpec(name="Forecast", schema=msgspec.json.schema(Forecast))
SCHEMA_TEXT = msgspec.json.encode(FORECAST.schema).decode()
INSTRUCTION = f"Answer with only a JSON value matching this JSON Schema: {SCHEMA_TEXT}"


#: A request with a tool and a system prompt.
KIND_REQUEST = request(WEATHER, system="Be kind.", text="Hi")


def sent_body(
    kind: str, asynchronous: bool, output: OutputSpec | None, **options: Any
) -> dict[str, Any]:
    """The request body the ``kind`` adapter sends for ``KIND_REQUEST`` with ``output``."""
    server = Server(TEXT[kind].body())
    model = make(kind, server, asynchronous, **options)
    replies(model, msgspec.structs.replace(KIND_REQUEST, output=output))
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


@ALL
def test_output_is_sent_as_the_providers_response_format(kind: str, asynchronous: bool) -> None:
    field, value = NATIVE[kind]
    with_output = sent_body(kind, asynchronous, FORECAST)
    without = sent_body(kind, asynchronous, None)
    assert with_output[field] == value
    assert {k: v for k, v in with_output.items() if k != field} == {
        k: v for k, v in without.items() if k != field
    }
    assert without.get(field) == WITHOUT[kind]


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
    # (Anthropic has no response format: the instruction is the whole system prompt)
    server = Server(TEXT["anthropic"].body())
    req = ModelRequest("request-001", 1, (UserMessage("u1", "Hi"),), (), None, output=FORECAST)
    replies(make("anthropic", server), req)
    assert server.body()["system"] == INSTRUCTION


def json_answer(kind: str) -> bytes:
    """``kind``'s text stream, its text deltas replaced by a Forecast as JSON."""
    data = TEXT[kind].body()
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


@ALL
def test_a_run_with_output_decodes_the_providers_json_answer(kind: str, asynchronous: bool) -> None:
    server = Server(json_answer(kind))
    model = make(kind, server, asynchronous)
    messages = [UserMessage("u1", "Weather in Paris?")]
    result, log = session(messages, model, tools=[], output=Forecast)
    assert result.status == "completed"
    assert result.output == Forecast("Paris", 18)
    field, value = NATIVE[kind]
    if kind == "anthropic":
        assert server.body()["system"] == INSTRUCTION
    else:
        assert server.body()[field] == value
    replays(log)
