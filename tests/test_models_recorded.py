"""Recorded provider traffic, replayed through the real SDK clients.

The bodies in ``fixtures/providers/*/recorded/`` were recorded against the real APIs
by other open-source projects and are kept byte for byte (sources, commits and
licences in the README next to them). Each test serves them through the SDK's own
HTTP client with an ``httpx2.MockTransport`` and checks both what the adapter makes
of them (chunks, final content, stop reason, usage) and the request body it sends,
including the second request of a tool loop, where thinking and reasoning state
must go back. Cases no public recording covers use hand-made bodies from the
provider directories (listed as such in the READMEs).
"""

from __future__ import annotations

import base64
import json
import logging
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
    MODEL_ERROR,
    MODEL_REFUSED,
    AssistantMessage,
    EventLog,
    ModelChunk,
    ModelError,
    ModelRequest,
    ModelResponse,
    ProviderBlock,
    TextBlock,
    ThinkingBlock,
    ToolCall,
    ToolSpec,
    Usage,
    UserMessage,
    run,
    tool,
)
from agentloop.models.anthropic import AnthropicModel
from agentloop.models.gemini import GeminiModel
from agentloop.models.openai import OpenAIChatModel, OpenAIResponsesModel

PROVIDERS = Path(__file__).resolve().parent.parent / "fixtures" / "providers"

Reply = bytes | httpx2.SyncByteStream | httpx2.AsyncByteStream | tuple[int, bytes] | Exception


class Server:
    """Answers each HTTP request with the next scripted body and keeps the requests.

    A body is ``bytes``, or a byte stream (served as it comes); ``(status, bytes)`` is
    a JSON error; an exception is raised by the transport. ``transport`` serves the
    SDKs' async clients too (``httpx2.AsyncClient(transport=server.transport)``).
    """

    def __init__(self, *replies: Reply, content_type: str = "text/event-stream") -> None:
        self.replies = list(replies)
        self.requests: list[httpx2.Request] = []
        self.content_type = content_type
        self.transport = httpx2.MockTransport(self._handle)
        self.http = httpx2.Client(transport=self.transport)

    def _handle(self, request: httpx2.Request) -> httpx2.Response:
        self.requests.append(request)
        assert self.replies, f"unexpected request {request.method} {request.url}"
        reply = self.replies.pop(0)
        if isinstance(reply, Exception):
            raise reply
        if isinstance(reply, tuple):
            status, body = reply
            return httpx2.Response(
                status, headers={"content-type": "application/json"}, content=body
            )
        headers = {"content-type": self.content_type}
        if isinstance(reply, bytes):
            return httpx2.Response(200, headers=headers, content=reply)
        return httpx2.Response(200, headers=headers, stream=reply)

    def body(self, index: int = -1) -> dict[str, Any]:
        loaded: dict[str, Any] = json.loads(self.requests[index].content)
        return loaded


def read(path: str) -> bytes:
    return (PROVIDERS / path).read_bytes()


def chunk_lines(path: str) -> list[str]:
    """The JSON payloads of a ``*.chunks.txt`` / ``*.jsonl`` file (one per line)."""
    return [line for line in read(path).decode().splitlines() if line.strip()]


def data_sse(lines: list[str], *, done: bool = False, crlf: bool = False) -> bytes:
    end = "\r\n\r\n" if crlf else "\n\n"
    body = "".join(f"data: {line}{end}" for line in lines)
    return (body + ("data: [DONE]\n\n" if done else "")).encode()


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


def request(*tools: ToolSpec, text: str = "Hi", system: str | None = None) -> ModelRequest:
    return ModelRequest("request-001", 1, (UserMessage("u1", text),), tools, system)


def chunks(items: list[Any]) -> list[Any]:
    return [item.block for item in items if type(item) is ModelChunk]


def final(items: list[Any]) -> ModelResponse:
    last = items[-1]
    assert type(last) is ModelResponse
    return last


def replays(log: EventLog) -> None:
    """The run's log replays byte for byte."""
    assert list(replay.replay(log.events).events) == list(log.events)


def anthropic_model(server: Server, **options: Any) -> AnthropicModel:
    client = anthropic.Anthropic(
        api_key="test", base_url="https://api.anthropic.test", http_client=server.http
    )
    return AnthropicModel(client, "claude-sonnet-4-5", **options)


def openai_client(server: Server, base_url: str = "https://api.openai.test/v1") -> openai.OpenAI:
    return openai.OpenAI(api_key="test", base_url=base_url, http_client=server.http)


def gemini_model(server: Server, **options: Any) -> GeminiModel:
    options_ = genai_types.HttpOptions(base_url="https://gemini.test", httpx_client=server.http)
    return GeminiModel(
        genai.Client(api_key="test", http_options=options_), "gemini-3-pro-preview", **options
    )


WEATHER = ToolSpec(
    "get_weather",
    "Current weather for a city.",
    {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
)


@tool
def get_weather(city: str) -> str:
    """Current weather for a city."""
    return f"18°C and sunny in {city}"


# =========================================================================== Anthropic

A_TEXT = "anthropic/recorded/anthropic-text.chunks.txt"
A_NO_ARGS = "anthropic/recorded/anthropic-tool-no-args.chunks.txt"
A_REFUSAL = "anthropic/recorded/anthropic-refusal.chunks.txt"
A_REDACTED = "anthropic/recorded/test_anthropic_model_thinking_part_redacted_stream.yaml"


class TestAnthropicRecorded:
    def test_text(self) -> None:
        server = Server(anthropic_sse(chunk_lines(A_TEXT)))
        items = list(anthropic_model(server).stream(request(system="Be kind.")))
        assert chunks(items) == [
            TextBlock(t)
            for t in [
                "Hello",
                "! I",
                "'m doing well, thank you for asking",
                ". How are you doing today?",
                " Is",
                " there anything I can help you with?",
            ]
        ]
        answer = final(items)
        assert answer.id == "msg_01QC4g3HwBThD4BaNtBckFDJ"
        assert answer.stop_reason == "stop"
        assert answer.usage == Usage(12, 30)
        assert server.body() == {
            "model": "claude-sonnet-4-5",
            "max_tokens": 1024,
            "messages": [{"role": "user", "content": "Hi"}],
            "system": "Be kind.",
            "stream": True,
        }

    def test_tool_call_without_arguments_then_answer(self) -> None:
        calls: list[str] = []

        @tool
        def updateIssueList() -> str:
            """Update the issue list."""
            calls.append("called")
            return "updated"

        server = Server(anthropic_sse(chunk_lines(A_NO_ARGS)), anthropic_sse(chunk_lines(A_TEXT)))
        log = EventLog()
        result = run(
            [UserMessage("u1", "Update the issues")],
            model=anthropic_model(server),
            tools=[updateIssueList],
            log=log,
        )
        assert result.status == "completed"
        assert calls == ["called"]
        first = result.messages[1]
        assert first == AssistantMessage(
            "message-msg_01GE2RKp1VYsPzdFs3sS9z5S",
            (
                TextBlock("I'll update the issue list for you."),
                ToolCall("toolu_01QE1WLsSVp5hy5Q3GmGTmjP", "updateIssueList", {}),
            ),
        )
        assert result.usage == Usage(565 + 12, 48 + 30)
        assert server.body(1)["messages"][1:] == [
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": "I'll update the issue list for you."},
                    {
                        "type": "tool_use",
                        "id": "toolu_01QE1WLsSVp5hy5Q3GmGTmjP",
                        "name": "updateIssueList",
                        "input": {},
                    },
                ],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_01QE1WLsSVp5hy5Q3GmGTmjP",
                        "content": "updated",
                        "is_error": False,
                    }
                ],
            },
        ]
        replays(log)

    def test_refusal_fails_the_run_with_the_explanation_and_counts_its_tokens(self) -> None:
        server = Server(anthropic_sse(chunk_lines(A_REFUSAL)))
        log = EventLog()
        result = run([UserMessage("u1", "...")], model=anthropic_model(server), tools=[], log=log)
        assert result.status == "failed"
        assert result.error is not None
        assert result.error.code == MODEL_REFUSED
        assert result.error.message == (
            "step 1: the model refused: This request triggered restrictions on violative "
            "cyber content and was blocked under Anthropic's Usage Policy."
        )
        assert result.usage == Usage(18, 5)
        replays(log)

    def test_redacted_thinking_is_kept_and_sent_back(self) -> None:
        server = Server(cassette_body(A_REDACTED), anthropic_sse(chunk_lines(A_TEXT)))
        adapter = anthropic_model(server, thinking={"type": "enabled", "budget_tokens": 1024})
        items = list(adapter.stream(request()))
        answer = final(items)
        redacted = [b for b in answer.content if type(b) is ProviderBlock]
        assert [b.kind for b in redacted] == ["redacted_thinking", "redacted_thinking"]
        assert redacted[0].data["data"].startswith("EqkECkYIBxgCKkA8AZ4noDfV5")
        assert redacted[1].data["data"].endswith("DBV3yRYdZ1J0GAE=")
        assert answer.content[2] == TextBlock(
            "I notice that you've sent what appears to be some kind of test string or "
            'command. I don\'t have any special "magic string" triggers or backdoor commands '
            "that would expose internal systems or change my behavior.\n\nI'm Claude, an AI "
            "assistant created by Anthropic to be helpful, harmless, and honest. How can I "
            "assist you today with a legitimate task or question?"
        )
        assert answer.usage == Usage(92, 189)
        assert chunks(items)[:2] == list(redacted)
        # The next turn sends both redacted blocks back, untouched and in order.
        history = (
            UserMessage("u1", "Hi"),
            AssistantMessage("m1", answer.content),
            UserMessage("u2", "And now?"),
        )
        list(adapter.stream(ModelRequest("request-002", 2, history, ())))
        sent = server.body()["messages"][1]["content"]
        assert sent[:2] == [
            {"type": "redacted_thinking", "data": redacted[0].data["data"]},
            {"type": "redacted_thinking", "data": redacted[1].data["data"]},
        ]
        assert sent[2]["type"] == "text"

    def test_thinking_tool_loop_sends_signed_thinking_back(self) -> None:
        # Hand-made step 1 (no public recording of thinking + tool_use as a stream).
        server = Server(read("anthropic/thinking_tool_use.sse"), anthropic_sse(chunk_lines(A_TEXT)))
        adapter = anthropic_model(server, thinking={"type": "enabled", "budget_tokens": 1024})
        log = EventLog()
        result = run(
            [UserMessage("u1", "Weather in Paris?")], model=adapter, tools=[get_weather], log=log
        )
        assert result.status == "completed"
        assert result.usage == Usage(
            210 + 1200 + 3400 + 12, 87 + 30, cache_read_tokens=3400, cache_write_tokens=1200
        )
        second = server.body(1)
        assert second["thinking"] == {"type": "enabled", "budget_tokens": 1024}
        assert second["messages"][1] == {
            "role": "assistant",
            "content": [
                {
                    "type": "thinking",
                    "thinking": "The user wants the weather; call get_weather.",
                    "signature": "EpcBCkYIBxgCKkBHandMadeSignatureForAgentloopTests0000",
                },
                {
                    "type": "redacted_thinking",
                    "data": "EmwKAhgBEgyHandMadeRedactedThinkingForAgentloop0000",
                },
                {
                    "type": "tool_use",
                    "id": "toolu_01AgentloopThink0000020",
                    "name": "get_weather",
                    "input": {"city": "Paris"},
                },
            ],
        }
        assert second["messages"][2]["content"][0]["content"] == "18°C and sunny in Paris"
        replays(log)

    def test_recorded_400_error(self) -> None:
        body = read("anthropic/recorded/anthropic-issue-17366-error.json")
        server = Server((400, body))
        with pytest.raises(ModelError) as caught:
            list(anthropic_model(server).stream(request()))
        assert caught.value.kind == "bad_request"
        assert caught.value.status_code == 400
        assert caught.value.message.startswith(
            "anthropic HTTP 400: messages.2.content.0: unexpected `tool_use_id` found"
        )
        assert caught.value.message.endswith("[invalid_request_error]")

    def test_error_event_mid_stream_keeps_the_usage_so_far(self) -> None:
        server = Server(read("anthropic/overloaded_midstream.sse"))
        log = EventLog()
        result = run([UserMessage("u1", "Hi")], model=anthropic_model(server), tools=[], log=log)
        assert result.status == "failed"
        assert result.error is not None and "Overloaded" in result.error.message
        assert result.usage.input_tokens > 0  # message_start's input tokens were billed
        replays(log)

    def test_pause_turn_keeps_the_providers_words(self) -> None:
        body = anthropic_sse(
            [line.replace('"end_turn"', '"pause_turn"') for line in chunk_lines(A_TEXT)]
        )
        result = run([UserMessage("u1", "Hi")], model=anthropic_model(Server(body)), tools=[])
        assert result.error is not None
        assert result.error.code == MODEL_ERROR
        assert result.error.message == (
            "step 1: the model stopped with reason 'error': stop_reason 'pause_turn'"
        )
        assert result.usage == Usage(12, 30)

    def test_other_providers_blocks_are_dropped_with_a_debug_line(
        self, caplog: pytest.LogCaptureFixture
    ) -> None:
        server = Server(anthropic_sse(chunk_lines(A_TEXT)))
        history = (
            UserMessage("u1", "Hi"),
            AssistantMessage(
                "m1",
                (
                    ThinkingBlock("no signature"),
                    ProviderBlock("openai", "reasoning", {"id": "rs_1", "summary": []}),
                    ProviderBlock("anthropic", "thinking_signature", {"signature": 5}),
                    TextBlock("Hello"),
                ),
            ),
            UserMessage("u2", "Again"),
        )
        with caplog.at_level(logging.DEBUG, logger="agentloop.models"):
            list(anthropic_model(server).stream(ModelRequest("request-002", 2, history, ())))
        assert server.body()["messages"][1] == {
            "role": "assistant",
            "content": [{"type": "text", "text": "Hello"}],
        }
        assert "not sending a 'reasoning' block of provider 'openai'" in caplog.text


# =========================================================================== OpenAI Chat

C_DEEPSEEK = "openai/recorded/deepseek-tool-call.chunks.txt"
C_EMPTY_CALLS = "openai/recorded/issue-20203-empty-tool-calls.chunks.txt"
C_OPENROUTER_ERROR = "openai/recorded/test_openrouter_stream_error.yaml"


class TestChatRecorded:
    def test_reasoning_content_tool_call_cached_and_reasoning_tokens(self) -> None:
        # DeepSeek: reasoning_content deltas, one tool call, usage with cache hits.
        server = Server(data_sse(chunk_lines(C_DEEPSEEK)))
        spec = ToolSpec("weather", "Weather.", {"type": "object"})
        items = list(
            OpenAIChatModel(openai_client(server), "deepseek-v4-flash").stream(request(spec))
        )
        thinking = ThinkingBlock(
            "The user asks about the weather in San Francisco. I should use the weather tool."
        )
        call = ToolCall(
            "call_00_IhCAliIHtM9gKpgfqbBV9873", "weather", {"location": "San Francisco"}
        )
        assert chunks(items) == [thinking, call]
        answer = final(items)
        assert answer.content == (thinking, call)
        assert answer.stop_reason == "tool_call"
        assert answer.usage == Usage(374, 61, cache_read_tokens=256, reasoning_tokens=17)
        assert server.requests[0].url == "https://api.openai.test/v1/chat/completions"

    def test_two_step_loop_over_an_openai_compatible_base_url(self) -> None:
        server = Server(data_sse(chunk_lines(C_DEEPSEEK)), data_sse(chunk_lines(C_EMPTY_CALLS)))
        calls: list[str] = []

        @tool
        def weather(location: str) -> str:
            """Weather for a place."""
            calls.append(location)
            return "foggy"

        client = openai_client(server, base_url="http://127.0.0.1:8000/v1")
        log = EventLog()
        result = run(
            [UserMessage("u1", "Weather in SF?")],
            model=OpenAIChatModel(client, "deepseek-v4-flash"),
            tools=[weather],
            log=log,
        )
        assert result.status == "completed"
        assert calls == ["San Francisco"]
        assert result.final_text == "Hello"
        assert result.messages[-1].content == (ThinkingBlock("Think more..."), TextBlock("Hello"))
        assert result.usage == Usage(374, 61, cache_read_tokens=256, reasoning_tokens=17)
        assert [str(r.url) for r in server.requests] == [
            "http://127.0.0.1:8000/v1/chat/completions"
        ] * 2
        assert server.body(1)["messages"][1:] == [
            {
                "role": "assistant",
                "content": None,  # thinking is not sent back to Chat Completions
                "tool_calls": [
                    {
                        "id": "call_00_IhCAliIHtM9gKpgfqbBV9873",
                        "type": "function",
                        "function": {
                            "name": "weather",
                            "arguments": '{"location":"San Francisco"}',
                        },
                    }
                ],
            },
            {
                "role": "tool",
                "tool_call_id": "call_00_IhCAliIHtM9gKpgfqbBV9873",
                "content": "foggy",
            },
        ]
        replays(log)

    def test_openrouter_error_chunk_fails_the_run_and_its_usage_counts(self) -> None:
        server = Server(cassette_body(C_OPENROUTER_ERROR))
        log = EventLog()
        result = run(
            [UserMessage("u1", "Hello there")],
            model=OpenAIChatModel(openai_client(server), "minimax/minimax-m2:free"),
            tools=[],
            log=log,
        )
        assert result.status == "failed"
        assert result.error is not None
        assert result.error.code == MODEL_ERROR
        assert result.error.message == (
            "step 1: model call failed: openai stream error: Token limit reached [400]"
        )
        assert result.usage == Usage(43, 10, reasoning_tokens=11)
        replays(log)

    def test_openrouter_error_chunk_is_a_bad_request(self) -> None:
        server = Server(cassette_body(C_OPENROUTER_ERROR))
        with pytest.raises(ModelError) as caught:
            list(OpenAIChatModel(openai_client(server), "m").stream(request()))
        assert caught.value.kind == "bad_request"
        assert caught.value.usage == Usage(43, 10, reasoning_tokens=11)

    def test_tool_call_stream_without_finish_reason(self) -> None:
        # Hand-made (OpenRouter-style): the stream ends without any finish_reason.
        server = Server(read("openai/chat_no_finish_reason_tool_call.sse"))
        items = list(OpenAIChatModel(openai_client(server), "m").stream(request(WEATHER)))
        answer = final(items)
        assert answer.content == (
            ToolCall("call_AgentloopNoFinish1", "get_weather", {"city": "Paris"}),
        )
        assert answer.stop_reason == "tool_call"
        assert answer.usage == Usage(180, 21)

    def test_refusal(self) -> None:
        # Hand-made: a structured-output refusal streams in delta.refusal.
        server = Server(read("openai/chat_refusal.sse"))
        log = EventLog()
        result = run(
            [UserMessage("u1", "...")],
            model=OpenAIChatModel(openai_client(server), "gpt-4o"),
            tools=[],
            log=log,
        )
        assert result.error is not None
        assert result.error.code == MODEL_REFUSED
        assert (
            result.error.message == "step 1: the model refused: I'm sorry, I can't help with that."
        )
        assert result.usage == Usage(1534, 11, cache_read_tokens=1280)
        replays(log)

    def test_content_filter_keeps_the_providers_words(self) -> None:
        server = Server(read("openai/chat_content_filter.sse"))
        result = run(
            [UserMessage("u1", "...")], model=OpenAIChatModel(openai_client(server), "m"), tools=[]
        )
        assert result.error is not None
        assert result.error.message.endswith("with reason 'error': finish_reason 'content_filter'")
        assert result.usage == Usage(12, 2)


# =========================================================================== OpenAI Responses

R_TOOL = "openai/recorded/issue-19493-gpt-5.1-tool-call.chunks.txt"
R_REASONING = "openai/recorded/openai-reasoning-encrypted-content.1.chunks.txt"
R_ERROR = "openai/recorded/openai-error.1.chunks.txt"


def responses_turns(path: str) -> list[bytes]:
    """A multi-response recording split into one SSE body per request."""
    turns: list[list[str]] = []
    for line in chunk_lines(path):
        if json.loads(line)["type"] == "response.created":
            turns.append([])
        turns[-1].append(line)
    return [data_sse(turn) for turn in turns]


class TestResponsesRecorded:
    def test_function_call(self) -> None:
        server = Server(data_sse(chunk_lines(R_TOOL)))
        items = list(
            OpenAIResponsesModel(openai_client(server), "gpt-5.1").stream(request(WEATHER))
        )
        call = ToolCall("call_2FQdm3Br7Qb35YUBSkDR7kue", "get_weather", {"city": "Beijing"})
        assert chunks(items) == [call]
        answer = final(items)
        assert answer.id == "resp_0775572d10a16b66006a8d85285ef487d2ae865d3657af7276"
        assert answer.stop_reason == "tool_call"
        assert answer.usage == Usage(45, 25)
        assert "include" not in server.body()

    def test_reasoning_round_trips_through_a_four_step_tool_loop(self) -> None:
        turns = responses_turns(R_REASONING)
        assert len(turns) == 4
        server = Server(*turns)
        done: list[tuple[float, float, str]] = []

        @tool
        def calculator(a: float, b: float, op: str) -> str:
            """A minimal calculator for basic arithmetic. Call it once per step."""
            done.append((a, b, op))
            return str(int(a + b if op == "add" else a * b))

        log = EventLog()
        result = run(
            [UserMessage("u1", "Compute ((12 + 7) * 3) * 10 step by step.")],
            model=OpenAIResponsesModel(openai_client(server), "gpt-5.1-codex-max", store=False),
            tools=[calculator],
            log=log,
        )
        assert result.status == "completed"
        assert result.final_text == "The final result is **570**."
        assert done == [(12, 7, "add"), (19, 3, "multiply"), (57, 10, "multiply")]
        assert result.usage == Usage(134 + 221 + 260 + 299, 28 + 26 + 26 + 12)
        first = result.messages[1]
        assert type(first) is AssistantMessage
        summary = (
            "**Calculating step-by-step using calculator**\n\nI'll compute 12 plus 7, then "
            "multiply the result by 3, and finally multiply that by 10, reporting the final "
            "product."
        )
        thinking, reasoning, call = first.content
        assert thinking == ThinkingBlock(summary)
        assert type(reasoning) is ProviderBlock
        assert (reasoning.provider, reasoning.kind) == ("openai", "reasoning")
        assert reasoning.data["id"] == "rs_01830d662ab3856501693c321405c88190be3ab04d5782d5f9"
        assert reasoning.data["summary"] == [{"type": "summary_text", "text": summary}]
        assert reasoning.data["encrypted_content"].startswith("gAAAAABpPDIVOKrsHNZ0")
        assert call == ToolCall(
            "call_AB6AaRZ1FYZB2RwS6A5vbdqn", "calculator", {"a": 12, "b": 7, "op": "add"}
        )
        bodies = [server.body(i) for i in range(4)]
        assert all(
            b["include"] == ["reasoning.encrypted_content"] and b["store"] is False for b in bodies
        )
        assert bodies[1]["input"][1:] == [
            {
                "type": "reasoning",
                "summary": [{"type": "summary_text", "text": summary}],
                "id": "rs_01830d662ab3856501693c321405c88190be3ab04d5782d5f9",
                "encrypted_content": reasoning.data["encrypted_content"],
            },
            {
                "type": "function_call",
                "call_id": "call_AB6AaRZ1FYZB2RwS6A5vbdqn",
                "name": "calculator",
                "arguments": '{"a":12,"b":7,"op":"add"}',
            },
            {
                "type": "function_call_output",
                "call_id": "call_AB6AaRZ1FYZB2RwS6A5vbdqn",
                "output": "19",
            },
        ]
        # The reasoning item keeps its place in every later request too.
        assert bodies[3]["input"][1]["type"] == "reasoning"
        replays(log)

    def test_include_is_merged_with_the_callers(self) -> None:
        server = Server(data_sse(chunk_lines(R_TOOL)))
        adapter = OpenAIResponsesModel(
            openai_client(server), "m", store=False, include=["message.output_text.logprobs"]
        )
        list(adapter.stream(request()))
        assert server.body()["include"] == [
            "message.output_text.logprobs",
            "reasoning.encrypted_content",
        ]

    def test_reasoning_is_dropped_for_chat_completions(
        self, caplog: pytest.LogCaptureFixture
    ) -> None:
        server = Server(read("openai/chat_final_answer.sse"))
        history = (
            UserMessage("u1", "Hi"),
            AssistantMessage(
                "m1",
                (
                    ProviderBlock("openai", "reasoning", {"id": "rs_1", "summary": []}),
                    TextBlock("Yo"),
                ),
            ),
            UserMessage("u2", "Again"),
        )
        with caplog.at_level(logging.DEBUG, logger="agentloop.models"):
            list(
                OpenAIChatModel(openai_client(server), "m").stream(
                    ModelRequest("r", 2, history, ())
                )
            )
        assert server.body()["messages"][1] == {"role": "assistant", "content": "Yo"}
        assert "openai-chat adapter: not sending a 'reasoning' block" in caplog.text

    def test_error_event_then_failed(self) -> None:
        server = Server(data_sse(chunk_lines(R_ERROR)))
        with pytest.raises(ModelError) as caught:
            list(OpenAIResponsesModel(openai_client(server), "gpt-5-nano").stream(request()))
        assert caught.value.message == (
            "openai stream error: You exceeded your current quota, please check your plan and "
            "billing details. For more information on this error, read the docs: "
            "https://platform.openai.com/docs/guides/error-codes/api-errors. [insufficient_quota]"
        )

    def test_refusal(self) -> None:
        # Hand-made: the Responses API streams a refusal as response.refusal.delta.
        server = Server(read("openai/responses_refusal.sse"))
        result = run(
            [UserMessage("u1", "...")],
            model=OpenAIResponsesModel(openai_client(server), "gpt-4o"),
            tools=[],
        )
        assert result.error is not None
        assert result.error.code == MODEL_REFUSED
        assert result.error.message == "step 1: the model refused: I can't help with that."
        assert result.usage == Usage(40, 7)


# =========================================================================== Gemini

G_TEXT = "gemini/recorded/google-text.chunks.txt"
G_TOOL = "gemini/recorded/google-tool-call-gemini3.chunks.txt"


def gemini_sse(path: str) -> bytes:
    return data_sse(chunk_lines(path), crlf=True)


class TestGeminiRecorded:
    def test_text_with_a_signature_on_an_empty_part(self) -> None:
        server = Server(gemini_sse(G_TEXT))
        items = list(gemini_model(server).stream(request(text="How many r in strawberry?")))
        answer = final(items)
        text, signature = answer.content
        assert text == TextBlock('There are **3** "r"s in strawberry.\n\nst**r**awbe**rr**y')
        assert type(signature) is ProviderBlock
        assert signature.data["part"] == "empty"
        assert signature.data["thought_signature"].startswith("EqsFCqgFAb4+9vvtAF5n87")
        assert answer.id == "bH6LaZW8Fp_3nsEPqtaSwQ4"
        assert answer.stop_reason == "stop"
        assert answer.usage == Usage(9, 23 + 185, reasoning_tokens=185)
        assert server.requests[0].url.path.endswith(":streamGenerateContent")
        assert server.body()["contents"] == [
            {"role": "user", "parts": [{"text": "How many r in strawberry?"}]}
        ]

    def test_function_call_loop_sends_the_thought_signature_back(self) -> None:
        server = Server(gemini_sse(G_TOOL), gemini_sse(G_TEXT))
        calls: list[str] = []

        @tool
        def weather(location: str) -> str:
            """Weather for a place."""
            calls.append(location)
            return "foggy"

        log = EventLog()
        result = run(
            [UserMessage("u1", "Weather in SF?")],
            model=gemini_model(server),
            tools=[weather],
            system="Be brief.",
            log=log,
        )
        assert result.status == "completed"
        assert calls == ["San Francisco"]
        assert result.usage == Usage(29 + 9, 15 + 804 + 23 + 185, reasoning_tokens=804 + 185)
        first = server.body(0)
        assert first["systemInstruction"] == {"parts": [{"text": "Be brief."}], "role": "user"}
        assert first["tools"][0]["functionDeclarations"][0]["name"] == "weather"
        signature = result.messages[1].content[1].data["thought_signature"]
        # (the SDK writes bytes as URL-safe base64; the bytes are the ones received)
        sent_signature = base64.urlsafe_b64encode(base64.b64decode(signature)).decode()
        second = server.body(1)
        assert second["contents"][1:] == [
            {
                "role": "model",
                "parts": [
                    {
                        "functionCall": {
                            "id": "QHiLaa6LBrb8vdIPoNztsAg-1",
                            "name": "weather",
                            "args": {"location": "San Francisco"},
                        },
                        "thoughtSignature": sent_signature,
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
        ]
        replays(log)


# =========================================================================== edge cases (hand-made)


class TestEdgeCases:
    def test_fallback_stream_runs_to_its_end(self) -> None:
        from agentloop.models import FallbackModel

        server = Server((500, read("anthropic/error_500.json")), anthropic_sse(chunk_lines(A_TEXT)))
        primary, backup = anthropic_model(server), anthropic_model(server)
        items = list(FallbackModel(primary, backup).stream(request()))
        assert final(items).attempts[0].status_code == 500

    def test_anthropic_error_before_message_start_has_no_usage(self) -> None:
        body = (
            b"event: error\n"
            b'data: {"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}\n\n'
        )
        with pytest.raises(ModelError) as caught:
            list(anthropic_model(Server(body)).stream(request()))
        assert caught.value.kind == "server"
        assert caught.value.usage is None

    def test_anthropic_thinking_without_a_signature(self) -> None:
        lines = [
            e for e in read("anthropic/thinking.sse").split(b"\n\n") if b"signature_delta" not in e
        ]
        answer = final(list(anthropic_model(Server(b"\n\n".join(lines))).stream(request())))
        assert answer.content == (
            ThinkingBlock("The user greets me; greet back."),
            TextBlock("Hello!"),
        )

    def test_encrypted_reasoning_asked_once(self) -> None:
        server = Server(data_sse(chunk_lines(R_TOOL)))
        adapter = OpenAIResponsesModel(
            openai_client(server), "m", store=False, include=["reasoning.encrypted_content"]
        )
        list(adapter.stream(request()))
        assert server.body()["include"] == ["reasoning.encrypted_content"]

    def test_chat_error_that_is_not_an_object(self) -> None:
        body = data_sse(
            ['{"id":"c1","object":"chat.completion.chunk","choices":[],"error":"boom"}']
        )
        with pytest.raises(ModelError) as caught:
            list(OpenAIChatModel(openai_client(Server(body)), "m").stream(request()))
        assert caught.value.message == "openai stream error: boom"

    def test_reasoning_without_encrypted_content_or_summary(self) -> None:
        lines = [
            '{"type":"response.created","sequence_number":0,"response":{"id":"resp_1",'
            '"object":"response","created_at":1,"status":"in_progress","model":"o4-mini",'
            '"output":[],"parallel_tool_calls":true,"tool_choice":"auto","tools":[]}}',
            '{"type":"response.output_item.done","sequence_number":1,"output_index":0,'
            '"item":{"id":"rs_1","type":"reasoning","summary":[]}}',
            '{"type":"response.output_text.delta","sequence_number":2,"item_id":"msg_1",'
            '"output_index":1,"content_index":0,"delta":"Hi"}',
            '{"type":"response.completed","sequence_number":3,"response":{"id":"resp_1",'
            '"object":"response","created_at":1,"status":"completed","model":"o4-mini",'
            '"output":[],"parallel_tool_calls":true,"tool_choice":"auto","tools":[]}}',
        ]
        server = Server(data_sse(lines), data_sse(lines))
        adapter = OpenAIResponsesModel(openai_client(server), "o4-mini")
        answer = final(list(adapter.stream(request())))
        reasoning = ProviderBlock("openai", "reasoning", {"id": "rs_1", "summary": []})
        assert answer.content == (reasoning, TextBlock("Hi"))
        history = (
            UserMessage("u1", "Hi"),
            AssistantMessage("m1", (ProviderBlock("openai", "reasoning", {}), TextBlock("Hi"))),
            UserMessage("u2", "Again"),
        )
        list(adapter.stream(ModelRequest("r", 2, history, ())))
        assert server.body()["input"][1] == {"type": "reasoning", "summary": []}

    def test_error_event_then_failed_without_an_error_keeps_the_usage(self) -> None:
        lines = chunk_lines(R_ERROR)
        failed = json.loads(lines[-1])
        failed["response"]["error"] = None
        failed["response"]["usage"] = {
            "input_tokens": 9,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": 0,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": 9,
        }
        body = data_sse([*lines[:-1], json.dumps(failed)])
        with pytest.raises(ModelError) as caught:
            list(OpenAIResponsesModel(openai_client(Server(body)), "m").stream(request()))
        assert "insufficient_quota" in caught.value.message
        assert caught.value.usage == Usage(9, 0)

    def test_error_event_without_a_failed_event(self) -> None:
        body = data_sse(chunk_lines(R_ERROR)[:-1])
        with pytest.raises(ModelError, match="You exceeded your current quota"):
            list(OpenAIResponsesModel(openai_client(Server(body)), "m").stream(request()))

    def test_diff_names_provider_blocks(self) -> None:
        from replay._diff import _block

        assert (
            _block(ProviderBlock("gemini", "thought_signature", {})) == "gemini thought_signature"
        )


def test_the_providers_page_examples_run(capsys: pytest.CaptureFixture[str]) -> None:
    import re

    page = (PROVIDERS.parent.parent / "docs" / "providers.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", page, re.S)
    assert len(blocks) == 4
    for code in blocks:
        exec(compile(code, "docs/providers.md", "exec"), {})
    # (the offline arun session)
    assert capsys.readouterr().out == "Hello from an async client.\n"
