"""Anthropic adapter through the real SDK client, served by an httpx2 MockTransport.

Every body comes from ``fixtures/providers/anthropic/`` (SSE streams and JSON error
bodies in the documented wire format); no test touches the network.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("anthropic")

import anthropic
import httpx2

import replay
from agentloop import (
    MODEL_ERROR,
    MODEL_PROTOCOL_ERROR,
    AssistantMessage,
    EventLog,
    ModelChunk,
    ModelError,
    ModelFailure,
    ModelRequest,
    ModelResponse,
    ProviderBlock,
    TextBlock,
    ThinkingBlock,
    ToolCall,
    ToolResultMessage,
    ToolSpec,
    Usage,
    UserMessage,
    run,
    tool,
)
from agentloop.models import ModelSpecError, RetryPolicy, model_from_spec
from agentloop.models.anthropic import AnthropicModel

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "providers" / "anthropic"

WEATHER = ToolSpec(
    "get_weather",
    "Current weather for a city.",
    {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
)


@tool
def get_weather(city: str) -> str:
    """Current weather for a city."""
    return f"18°C and sunny in {city}"


REDACTED_DATA = (
    "EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIwxtE3rAFBa8cr3qpPkNRj2YfWXGmKDxH4m"
    "PnZ5sQ7vB5URj4pxSaDnlEG"
)


def fixture(name: str) -> bytes:
    return (FIXTURES / name).read_bytes()


class FakeAnthropic:
    """Answers each HTTP request with the next scripted reply and records the request.

    A reply is a fixture name (status 200), ``(status, fixture name)``, raw
    ``bytes`` (an SSE body), or an exception to raise from the transport.
    """

    def __init__(self, *replies: str | tuple[int, str | bytes] | bytes | Exception) -> None:
        self.replies = list(replies)
        self.requests: list[httpx2.Request] = []
        transport = httpx2.MockTransport(self._handle)
        self.client = anthropic.Anthropic(
            api_key="test",
            base_url="https://api.anthropic.test",
            http_client=httpx2.Client(transport=transport),
        )

    def _handle(self, request: httpx2.Request) -> httpx2.Response:
        self.requests.append(request)
        assert self.replies, f"unexpected request {request.method} {request.url}"
        reply = self.replies.pop(0)
        if isinstance(reply, Exception):
            raise reply
        if isinstance(reply, bytes):
            return httpx2.Response(
                200, headers={"content-type": "text/event-stream"}, content=reply
            )
        status, name = (200, reply) if isinstance(reply, str) else reply
        if isinstance(name, bytes):
            return httpx2.Response(status, headers={"content-type": "text/html"}, content=name)
        kind = "text/event-stream" if name.endswith(".sse") else "application/json"
        return httpx2.Response(status, headers={"content-type": kind}, content=fixture(name))

    def body(self, index: int = -1) -> dict[str, Any]:
        loaded: dict[str, Any] = json.loads(self.requests[index].content)
        return loaded


def events(name: str) -> list[bytes]:
    """The SSE events of a fixture, without the blank lines between them."""
    return [e for e in fixture(name).split(b"\n\n") if e]


def sse(*parts: bytes) -> bytes:
    return b"".join(part + b"\n\n" for part in parts)


def request(*tools: ToolSpec, system: str | None = "Be brief.") -> ModelRequest:
    return ModelRequest("request-000", 0, (UserMessage("u1", "Weather in Paris?"),), tools, system)


def model(fake: FakeAnthropic, **options: Any) -> AnthropicModel:
    return AnthropicModel(fake.client, "claude-test", **options)


def chunk(block: TextBlock | ToolCall | ThinkingBlock) -> ModelChunk:
    return ModelChunk("request-000", block)


PARIS = ToolCall("toolu_01WeatherParis00000003", "get_weather", {"city": "Paris"})
CLOCK = ToolCall("toolu_01ClockParis0000000003", "get_time", {"timezone": "Europe/Paris"})


# =========================================================================== stream


class TestStream:
    def test_plain_text(self) -> None:
        fake = FakeAnthropic("text.sse")
        items = list(model(fake).stream(request()))
        assert items == [
            chunk(TextBlock("Hello")),
            chunk(TextBlock(" there")),
            chunk(TextBlock("!")),
            ModelResponse(
                "request-000",
                "msg_01AgentloopText0000000001",
                (TextBlock("Hello there!"),),
                "stop",
                Usage(12, 6),
            ),
        ]
        sent = fake.requests[0]
        assert sent.url.path == "/v1/messages"
        assert "anthropic-version" in sent.headers
        assert fake.body() == {
            "model": "claude-test",
            "max_tokens": 1024,
            "messages": [{"role": "user", "content": "Weather in Paris?"}],
            "system": "Be brief.",
            "stream": True,
        }

    def test_one_tool_call_assembled_from_input_json_deltas(self) -> None:
        fake = FakeAnthropic("tool_use.sse")
        items = list(model(fake, max_tokens=300).stream(request(WEATHER, system=None)))
        call = ToolCall("toolu_01WeatherParis00000002", "get_weather", {"city": "Paris"})
        assert items == [
            chunk(TextBlock("I'll check")),
            chunk(TextBlock(" the weather in Paris.")),
            chunk(call),
            ModelResponse(
                "request-000",
                "msg_01AgentloopTool0000000002",
                (TextBlock("I'll check the weather in Paris."), call),
                "tool_call",
                Usage(377, 65),
            ),
        ]
        sent = fake.body()
        assert sent["max_tokens"] == 300
        assert "system" not in sent
        assert sent["tools"] == [
            {
                "name": "get_weather",
                "description": "Current weather for a city.",
                "input_schema": WEATHER.parameters,
            }
        ]

    def test_several_tool_calls_and_cache_tokens_in_usage(self) -> None:
        items = list(model(FakeAnthropic("tool_use_parallel.sse")).stream(request(WEATHER)))
        assert items == [
            chunk(TextBlock("Checking")),
            chunk(TextBlock(" both.")),
            chunk(PARIS),
            chunk(CLOCK),
            ModelResponse(
                "request-000",
                "msg_01AgentloopTools000000003",
                (TextBlock("Checking both."), PARIS, CLOCK),
                "tool_call",
                # input + cache creation + cache read
                Usage(410 + 20 + 100, 96, cache_read_tokens=100, cache_write_tokens=20),
            ),
        ]

    def test_tool_use_without_input_deltas_has_empty_arguments(self) -> None:
        items = list(model(FakeAnthropic("no_input_tool_use.sse")).stream(request()))
        assert items[0] == chunk(ToolCall("toolu_01NoInput00000000009", "get_time", {}))

    def test_thinking_block_is_one_chunk_then_its_signature(self) -> None:
        items = list(model(FakeAnthropic("thinking.sse")).stream(request()))
        thinking = ThinkingBlock("The user greets me; greet back.")
        signature = ProviderBlock(
            "anthropic",
            "thinking_signature",
            {"signature": "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds"},
        )
        assert items == [
            chunk(thinking),
            chunk(signature),
            chunk(TextBlock("Hello!")),
            ModelResponse(
                "request-000",
                "msg_01AgentloopThink00000010",
                (thinking, signature, TextBlock("Hello!")),
                "stop",
                Usage(40, 20),
            ),
        ]

    # ------------------------------------------------------------ stop reasons

    @pytest.mark.parametrize(
        ("stop_reason", "expected"),
        [
            ("end_turn", "stop"),
            ("stop_sequence", "stop"),
            ("max_tokens", "length"),
            ("model_context_window_exceeded", "length"),
            ("refusal", "refusal"),
            ("pause_turn", "error"),
        ],
    )
    def test_stop_reason_mapping(self, stop_reason: str, expected: str) -> None:
        body = fixture("text.sse").replace(
            b'"stop_reason":"end_turn"', f'"stop_reason":"{stop_reason}"'.encode()
        )
        final = list(model(FakeAnthropic(body)).stream(request()))[-1]
        assert type(final) is ModelResponse
        assert final.stop_reason == expected

    def test_tool_use_stop_reason(self) -> None:
        final = list(model(FakeAnthropic("tool_use.sse")).stream(request(WEATHER)))[-1]
        assert type(final) is ModelResponse
        assert final.stop_reason == "tool_call"

    def test_max_tokens_recorded_fixture(self) -> None:
        final = list(model(FakeAnthropic("max_tokens.sse")).stream(request()))[-1]
        assert final == ModelResponse(
            "request-000",
            "msg_01AgentloopLength0000005",
            (TextBlock("Once upon a time"),),
            "length",
            Usage(12, 4),
        )

    def test_max_tokens_in_a_tool_call_keeps_the_call_without_arguments(self) -> None:
        items = list(model(FakeAnthropic("max_tokens_in_tool_use.sse")).stream(request(WEATHER)))
        call = ToolCall("toolu_01Cut0ff0000000000006", "get_weather", {})
        assert items == [
            chunk(call),
            ModelResponse(
                "request-000", "msg_01AgentloopCut00000000006", (call,), "length", Usage(377, 8)
            ),
        ]

    # ------------------------------------------------------------ malformed output

    @pytest.mark.parametrize(
        ("name", "problem"),
        [
            ("malformed_tool_input.sse", "the arguments are not valid JSON"),
            ("non_object_tool_input.sse", "must be a JSON object, got an array"),
        ],
    )
    def test_bad_tool_input_is_a_protocol_failure(self, name: str, problem: str) -> None:
        items = list(model(FakeAnthropic(name)).stream(request(WEATHER)))
        assert len(items) == 1
        failure = items[0]
        assert type(failure) is ModelFailure
        assert failure.code == MODEL_PROTOCOL_ERROR
        assert problem in failure.message
        assert "content block 0 (tool_use 'get_weather', id 'toolu_01" in failure.message

    def test_stream_without_stop_reason_is_a_protocol_failure(self) -> None:
        items = list(model(FakeAnthropic("no_stop_reason.sse")).stream(request()))
        assert items == [
            chunk(TextBlock("Hel")),
            ModelFailure(
                "request-000",
                "anthropic message 'msg_01AgentloopCut00000000012': "
                "the stream ended without a stop_reason",
                MODEL_PROTOCOL_ERROR,
            ),
        ]

    # ------------------------------------------------------------ options

    @pytest.mark.parametrize("option", ["messages", "system", "tools", "stream"])
    def test_options_the_adapter_owns_are_rejected(self, option: str) -> None:
        with pytest.raises(ValueError, match=option):
            model(FakeAnthropic(), **{option: "x"})

    @pytest.mark.parametrize("max_tokens", [0, -1, 1.5, True])
    def test_max_tokens_must_be_a_positive_int(self, max_tokens: Any) -> None:
        with pytest.raises(ValueError, match="max_tokens"):
            model(FakeAnthropic(), max_tokens=max_tokens)

    def test_request_options_are_sent_and_the_users_client_is_not_changed(self) -> None:
        fake = FakeAnthropic("text.sse")
        adapter = model(fake, metadata={"user_id": "u-1"}, stop_sequences=["###"])
        list(adapter.stream(request()))
        assert fake.body()["metadata"] == {"user_id": "u-1"}
        assert fake.body()["stop_sequences"] == ["###"]
        assert fake.client.max_retries == anthropic.DEFAULT_MAX_RETRIES
        assert adapter.client.max_retries == 0
        assert repr(adapter) == "AnthropicModel(model='claude-test', max_tokens=1024)"


class TestEdgeCases:
    def test_unmapped_blocks_are_skipped_and_redacted_thinking_is_kept(self) -> None:
        items = list(model(FakeAnthropic("unmapped_blocks.sse")).stream(request()))
        redacted = ProviderBlock("anthropic", "redacted_thinking", {"data": REDACTED_DATA})
        assert items == [
            chunk(redacted),
            chunk(TextBlock("Sunny, 18°C.")),
            ModelResponse(
                "request-000",
                "msg_01AgentloopUnmapped000013",
                (redacted, TextBlock("Sunny, 18°C.")),
                "stop",
                Usage(60 + 40, 30, cache_read_tokens=40),  # message_delta's cumulative usage
            ),
        ]

    def test_malformed_input_followed_by_more_content_fails(self) -> None:
        bad = events("malformed_tool_input.sse")
        text = events("text.sse")[1:-2]  # a text block at index 0 ...
        text = [e.replace(b'"index":0', b'"index":1') for e in text]  # ... moved to index 1
        body = sse(*bad[:-2], *text, *bad[-2:])
        items = list(model(FakeAnthropic(body)).stream(request()))
        assert len(items) == 1
        assert type(items[0]) is ModelFailure
        assert "not valid JSON" in items[0].message

    def test_unclosed_tool_use_at_max_tokens_is_kept_without_arguments(self) -> None:
        body = sse(*[e for e in events("max_tokens_in_tool_use.sse") if b"block_stop" not in e])
        items = list(model(FakeAnthropic(body)).stream(request()))
        assert items[0] == chunk(ToolCall("toolu_01Cut0ff0000000000006", "get_weather", {}))
        assert type(items[1]) is ModelResponse
        assert items[1].stop_reason == "length"

    def test_unclosed_tool_use_otherwise_fails(self) -> None:
        body = sse(
            *[e for e in events("tool_use.sse") if b'"content_block_stop","index":1' not in e]
        )
        items = list(model(FakeAnthropic(body)).stream(request()))
        assert type(items[-1]) is ModelFailure
        assert items[-1].message == (
            "anthropic message 'msg_01AgentloopTool0000000002', content block 1: "
            "the message ended before the block stopped"
        )

    def test_tool_use_without_id_fails(self) -> None:
        body = fixture("tool_use.sse").replace(b'"toolu_01WeatherParis00000002"', b'""')
        items = list(model(FakeAnthropic(body)).stream(request()))
        assert type(items[-1]) is ModelFailure
        assert items[-1].message.endswith("content block 1: the tool_use block has no id")

    def test_error_without_a_json_body(self) -> None:
        fake = FakeAnthropic((502, b"<html><body>Bad gateway</body></html>"))
        with pytest.raises(ModelError) as caught:
            list(model(fake).stream(request()))
        assert (caught.value.kind, caught.value.status_code) == ("server", 502)
        assert "Bad gateway" in caught.value.message

    def test_other_sdk_errors_are_unknown(self) -> None:
        from agentloop.models.anthropic import _model_error

        error = _model_error(anthropic.AnthropicError("no credentials"))
        assert (error.kind, error.status_code) == ("unknown", None)
        assert error.message == "anthropic unknown: AnthropicError: no credentials"

    def test_model_name_is_required(self) -> None:
        with pytest.raises(ValueError, match="model name"):
            AnthropicModel(FakeAnthropic().client, "")


class TestRequestConversion:
    def test_transcript_with_tool_use_results_and_thinking(self) -> None:
        fake = FakeAnthropic("final_answer.sse")
        messages = (
            UserMessage("u1", "Weather and time in Paris?"),
            AssistantMessage(
                "a1",
                (
                    ThinkingBlock("plan", "sig-1"),
                    ThinkingBlock("unsigned: not sent"),
                    TextBlock("Checking"),
                    TextBlock(" \n"),  # the API rejects whitespace-only text blocks
                    PARIS,
                    CLOCK,
                ),
            ),
            ToolResultMessage("t1", PARIS.id, "get_weather", "18°C"),
            ToolResultMessage("t2", CLOCK.id, "get_time", "no clock", is_error=True),
            UserMessage("u2", "And tomorrow?"),
            AssistantMessage("a2", (TextBlock(""),)),
        )
        list(model(fake).stream(ModelRequest("request-001", 1, messages, (), None)))
        assert fake.body()["messages"] == [
            {"role": "user", "content": "Weather and time in Paris?"},
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "plan", "signature": "sig-1"},
                    {"type": "text", "text": "Checking"},
                    {
                        "type": "tool_use",
                        "id": "toolu_01WeatherParis00000003",
                        "name": "get_weather",
                        "input": {"city": "Paris"},
                    },
                    {
                        "type": "tool_use",
                        "id": "toolu_01ClockParis0000000003",
                        "name": "get_time",
                        "input": {"timezone": "Europe/Paris"},
                    },
                ],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_01WeatherParis00000003",
                        "content": "18°C",
                        "is_error": False,
                    },
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_01ClockParis0000000003",
                        "content": "no clock",
                        "is_error": True,
                    },
                ],
            },
            {"role": "user", "content": "And tomorrow?"},
        ]


# =========================================================================== errors


@pytest.mark.parametrize(
    ("status", "name", "kind", "text"),
    [
        (429, "error_429.json", "rate_limit", "would exceed the rate limit for your organization"),
        (401, "error_401.json", "auth", "invalid x-api-key [authentication_error]"),
        (500, "error_500.json", "server", "Internal server error [api_error]"),
        (529, "error_529.json", "server", "Overloaded [overloaded_error]"),
        (400, "error_400.json", "bad_request", "String should match pattern"),
    ],
)
def test_http_errors_become_typed_model_errors(
    status: int, name: str, kind: str, text: str
) -> None:
    fake = FakeAnthropic((status, name))
    with pytest.raises(ModelError) as caught:
        list(model(fake).stream(request()))
    error = caught.value
    assert (error.provider, error.status_code, error.kind) == ("anthropic", status, kind)
    assert error.message.startswith(f"anthropic HTTP {status}: ")
    assert text in error.message
    assert len(fake.requests) == 1  # the SDK did not retry behind our back


def test_connection_error() -> None:
    fake = FakeAnthropic(httpx2.ConnectError("[Errno 111] Connection refused"))
    with pytest.raises(ModelError) as caught:
        list(model(fake).stream(request()))
    assert (caught.value.kind, caught.value.status_code) == ("connection", None)


def test_error_event_inside_the_stream() -> None:
    with pytest.raises(ModelError) as caught:
        list(model(FakeAnthropic("overloaded_midstream.sse")).stream(request()))
    assert (caught.value.kind, caught.value.status_code) == ("server", None)
    assert caught.value.message == "anthropic server: Overloaded [overloaded_error]"


def test_run_records_a_provider_error() -> None:
    result = run(
        [UserMessage("u1", "Hi")], model=model(FakeAnthropic((401, "error_401.json"))), tools=[]
    )
    assert result.status == "failed"
    assert result.error is not None
    assert result.error.code == MODEL_ERROR
    assert result.error.message.endswith(
        "anthropic HTTP 401: invalid x-api-key [authentication_error]"
    )


def test_retry_policy_retries_overloaded_then_succeeds() -> None:
    fake = FakeAnthropic((529, "error_529.json"), "overloaded_midstream.sse", "text.sse")
    slept: list[float] = []
    adapter = model(fake, retry=RetryPolicy(3, 2.0), sleep=slept.append)
    final = list(adapter.stream(request()))[-1]
    assert type(final) is ModelResponse
    assert slept == [2.0, 4.0]
    assert [(a.kind, a.status_code, a.retried) for a in adapter.attempts] == [
        ("server", 529, True),
        ("server", None, True),
        (None, None, False),
    ]


# =========================================================================== full runs


def test_two_step_run_round_trips_the_tool_result_and_replays() -> None:
    fake = FakeAnthropic("tool_use.sse", "final_answer.sse")
    log = EventLog()
    result = run(
        [UserMessage("u1", "Weather in Paris?")],
        model=model(fake),
        tools=[get_weather],
        system="Be brief.",
        log=log,
        clock=iter(range(100, 200)).__next__,
    )
    assert result.status == "completed"
    assert result.final_text == "It is 18°C in Paris."
    assert result.usage == Usage(377 + 480, 65 + 14)
    assert [m.id for m in result.messages] == [
        "u1",
        "message-msg_01AgentloopTool0000000002",
        "tool-result-toolu_01WeatherParis00000002",
        "message-msg_01AgentloopFinal00000004",
    ]
    # The second request carries the assistant tool_use and the tool_result.
    assert fake.body(1)["messages"] == [
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
    ]
    # The log replays without the model: no further HTTP request is made.
    replayed = replay.replay(log.events)
    assert replayed.result == result
    assert len(fake.requests) == 2


def test_run_keeps_thinking_blocks_in_the_transcript() -> None:
    result = run([UserMessage("u1", "Hi")], model=model(FakeAnthropic("thinking.sse")), tools=[])
    assert result.status == "completed"
    assert result.final_text == "Hello!"
    assert type(result.messages[1]) is AssistantMessage
    assert type(result.messages[1].content[0]) is ThinkingBlock


def test_run_answers_cut_off_tool_calls_with_an_error_and_goes_on() -> None:
    fake = FakeAnthropic("max_tokens_in_tool_use.sse", "final_answer.sse")
    result = run([UserMessage("u1", "Weather?")], model=model(fake), tools=[get_weather])
    assert result.status == "completed"
    truncated = result.messages[2]
    assert type(truncated) is ToolResultMessage
    assert truncated.is_error
    assert fake.body(1)["messages"][2]["content"][0]["tool_use_id"] == (
        "toolu_01Cut0ff0000000000006"
    )


# =========================================================================== --model spec


class TestModelFromSpec:
    def test_anthropic(self) -> None:
        spec = "anthropic:claude-sonnet-4-5"
        adapter = model_from_spec(spec, environ={"ANTHROPIC_API_KEY": "sk-ant-test"})
        assert type(adapter) is AnthropicModel
        assert adapter.model == "claude-sonnet-4-5"
        assert adapter.client.api_key == "sk-ant-test"

    def test_missing_key_says_what_to_set(self) -> None:
        with pytest.raises(ModelSpecError, match=r"set ANTHROPIC_API_KEY in the environment"):
            model_from_spec("anthropic:claude-sonnet-4-5", environ={"ANTHROPIC_API_KEY": " "})

    def test_missing_sdk_says_what_to_install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setitem(sys.modules, "anthropic", None)
        with pytest.raises(ModelSpecError, match=r"pip install 'agentloop-replay\[anthropic\]'"):
            model_from_spec("anthropic:claude-sonnet-4-5", environ={"ANTHROPIC_API_KEY": "k"})
