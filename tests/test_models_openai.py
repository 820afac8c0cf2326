"""OpenAI adapters through the real SDK client, served by an httpx2 MockTransport.

Every body comes from ``fixtures/providers/openai/`` (SSE streams and JSON error
bodies in the documented wire format); no test touches the network.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("openai")

import httpx2
import openai

import replay
from agentloop import (
    MAX_CHUNKS_PER_STEP,
    MODEL_ERROR,
    MODEL_PROTOCOL_ERROR,
    AssistantMessage,
    EventLog,
    ModelChunk,
    ModelChunkEvent,
    ModelError,
    ModelFailure,
    ModelRequest,
    ModelResponse,
    PlanDraftEvent,
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
from agentloop.models import ModelSpecError, RetryAttempt, RetryPolicy, model_from_spec
from agentloop.models._common import MalformedOutput, decode_arguments, kind_from_status
from agentloop.models.openai import OpenAIChatModel, OpenAIResponsesModel

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "providers" / "openai"

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


def fixture(name: str) -> bytes:
    return (FIXTURES / name).read_bytes()


class FakeOpenAI:
    """Answers each HTTP request with the next scripted reply and records the request.

    A reply is a fixture name (status 200), ``(status, fixture name)``, raw
    ``bytes`` (an SSE body), or an exception to raise from the transport.
    """

    def __init__(
        self, *replies: str | tuple[int, str | bytes] | bytes | httpx2.Response | Exception
    ) -> None:
        self.replies = list(replies)
        self.requests: list[httpx2.Request] = []
        transport = httpx2.MockTransport(self._handle)
        self.client = openai.OpenAI(
            api_key="test",
            base_url="https://api.openai.test/v1",
            http_client=httpx2.Client(transport=transport),
        )

    def _handle(self, request: httpx2.Request) -> httpx2.Response:
        self.requests.append(request)
        assert self.replies, f"unexpected request {request.method} {request.url}"
        reply = self.replies.pop(0)
        if isinstance(reply, Exception):
            raise reply
        if isinstance(reply, httpx2.Response):
            return reply
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


class DroppedStream(httpx2.SyncByteStream):
    """A response body that breaks off with a network error after some bytes."""

    def __init__(self, head: bytes) -> None:
        self.head = head

    def __iter__(self) -> Iterator[bytes]:
        yield self.head
        raise httpx2.ReadError("connection reset by peer")


def request(*tools: ToolSpec, system: str | None = "Be brief.") -> ModelRequest:
    return ModelRequest("request-000", 0, (UserMessage("u1", "Weather in Paris?"),), tools, system)


def chat(fake: FakeOpenAI, **options: Any) -> OpenAIChatModel:
    return OpenAIChatModel(fake.client, "gpt-4.1-mini", **options)


def responses(fake: FakeOpenAI, **options: Any) -> OpenAIResponsesModel:
    return OpenAIResponsesModel(fake.client, "gpt-4.1-mini", **options)


def chunk(block: TextBlock | ToolCall | ThinkingBlock) -> ModelChunk:
    return ModelChunk("request-000", block)


PARIS = ToolCall("call_W3atherParis02", "get_weather", {"city": "Paris"})
CLOCK = ToolCall("call_Cl0ckParis02", "get_time", {"timezone": "Europe/Paris"})


# =========================================================================== chat


class TestChatStream:
    def test_plain_text(self) -> None:
        fake = FakeOpenAI("chat_text.sse")
        items = list(chat(fake).stream(request()))
        assert items == [
            chunk(TextBlock("Hello")),
            chunk(TextBlock(" there")),
            chunk(TextBlock("!")),
            ModelResponse(
                "request-000",
                "chatcmpl-AgentloopText01",
                (TextBlock("Hello there!"),),
                "stop",
                Usage(9, 3),
            ),
        ]
        sent = fake.body()
        assert sent == {
            "model": "gpt-4.1-mini",
            "messages": [
                {"role": "system", "content": "Be brief."},
                {"role": "user", "content": "Weather in Paris?"},
            ],
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        assert fake.requests[0].url.path == "/v1/chat/completions"

    def test_one_tool_call_assembled_from_fragments(self) -> None:
        fake = FakeOpenAI("chat_tool_call.sse")
        items = list(chat(fake).stream(request(WEATHER)))
        call = ToolCall("call_W3atherParis01", "get_weather", {"city": "Paris"})
        assert items == [
            chunk(call),
            ModelResponse(
                "request-000", "chatcmpl-AgentloopTool01", (call,), "tool_call", Usage(61, 15)
            ),
        ]
        assert fake.body()["tools"] == [
            {
                "type": "function",
                "function": {
                    "name": "get_weather",
                    "description": "Current weather for a city.",
                    "parameters": WEATHER.parameters,
                },
            }
        ]

    def test_several_tool_calls_in_one_response(self) -> None:
        items = list(chat(FakeOpenAI("chat_tool_calls_parallel.sse")).stream(request(WEATHER)))
        assert items == [
            chunk(TextBlock("Checking")),
            chunk(TextBlock(" both.")),
            chunk(PARIS),
            chunk(CLOCK),
            ModelResponse(
                "request-000",
                "chatcmpl-AgentloopTools02",
                (TextBlock("Checking both."), PARIS, CLOCK),
                "tool_call",
                Usage(75, 40),
            ),
        ]

    # ------------------------------------------------------------ stop reasons

    @pytest.mark.parametrize(
        ("name", "stop_reason"),
        [
            ("chat_text.sse", "stop"),
            ("chat_tool_call.sse", "tool_call"),
            ("chat_length.sse", "length"),
            ("chat_content_filter.sse", "error"),
        ],
    )
    def test_finish_reason_mapping(self, name: str, stop_reason: str) -> None:
        final = list(chat(FakeOpenAI(name)).stream(request(WEATHER)))[-1]
        assert type(final) is ModelResponse
        assert final.stop_reason == stop_reason

    def test_stop_with_tool_calls_is_a_tool_call_response(self) -> None:
        # A forced tool_choice makes OpenAI finish with "stop" although it called a tool.
        body = fixture("chat_tool_call.sse").replace(
            b'"finish_reason":"tool_calls"', b'"finish_reason":"stop"'
        )
        final = list(chat(FakeOpenAI(body)).stream(request(WEATHER)))[-1]
        assert type(final) is ModelResponse
        assert final.stop_reason == "tool_call"

    def test_unknown_finish_reason_is_error(self) -> None:
        body = fixture("chat_text.sse").replace(b'"finish_reason":"stop"', b'"finish_reason":"x"')
        final = list(chat(FakeOpenAI(body)).stream(request()))[-1]
        assert type(final) is ModelResponse
        assert final.stop_reason == "error"

    def test_length_in_a_tool_call_keeps_the_call_without_arguments(self) -> None:
        items = list(chat(FakeOpenAI("chat_length_in_tool_call.sse")).stream(request(WEATHER)))
        call = ToolCall("call_Cut0ff06", "get_weather", {})
        assert items == [
            chunk(call),
            ModelResponse(
                "request-000", "chatcmpl-AgentloopLength06", (call,), "length", Usage(61, 8)
            ),
        ]

    # ------------------------------------------------------------ malformed output

    @pytest.mark.parametrize(
        ("name", "problem"),
        [
            ("chat_malformed_arguments.sse", "the arguments are not valid JSON"),
            ("chat_non_object_arguments.sse", "must be a JSON object, got an array"),
        ],
    )
    def test_bad_tool_arguments_are_a_protocol_failure(self, name: str, problem: str) -> None:
        items = list(chat(FakeOpenAI(name)).stream(request(WEATHER)))
        assert len(items) == 1
        failure = items[0]
        assert type(failure) is ModelFailure
        assert failure.code == MODEL_PROTOCOL_ERROR
        assert problem in failure.message
        assert "tool call 0 ('get_weather', id 'call_" in failure.message

    def test_stream_without_finish_reason_is_accepted_as_stop(self) -> None:
        # OpenAI-compatible servers may end a stream without any finish_reason.
        items = list(chat(FakeOpenAI("chat_no_finish_reason.sse")).stream(request()))
        assert items == [
            chunk(TextBlock("Hel")),
            ModelResponse("request-000", "chatcmpl-AgentloopCut09", (TextBlock("Hel"),), "stop"),
        ]

    # ------------------------------------------------------------ request options

    def test_request_options_are_sent(self) -> None:
        fake = FakeOpenAI("chat_text.sse")
        model = chat(fake, temperature=0, stream_options={"include_usage": False})
        list(model.stream(request()))
        assert fake.body()["temperature"] == 0
        assert fake.body()["stream_options"] == {"include_usage": False}

    @pytest.mark.parametrize("option", ["messages", "tools", "stream"])
    def test_options_the_adapter_owns_are_rejected(self, option: str) -> None:
        with pytest.raises(ValueError, match=option):
            chat(FakeOpenAI(), **{option: "x"})

    def test_the_users_client_is_not_changed(self) -> None:
        fake = FakeOpenAI()
        model = chat(fake)
        assert fake.client.max_retries == openai.DEFAULT_MAX_RETRIES
        assert model.client.max_retries == 0
        assert repr(model) == "OpenAIChatModel(model='gpt-4.1-mini')"


class TestChatRequestConversion:
    def test_transcript_with_tool_calls_and_results(self) -> None:
        fake = FakeOpenAI("chat_text.sse")
        messages = (
            UserMessage("u1", "Weather and time in Paris?"),
            AssistantMessage(
                "a1", (ThinkingBlock("hmm", "sig"), TextBlock("Checking"), PARIS, CLOCK)
            ),
            ToolResultMessage("t1", PARIS.id, "get_weather", "18°C"),
            ToolResultMessage("t2", CLOCK.id, "get_time", "no clock", is_error=True),
            AssistantMessage("a2", (TextBlock("Done."),)),
        )
        list(chat(fake).stream(ModelRequest("request-001", 1, messages, (WEATHER,), None)))
        assert fake.body()["messages"] == [
            {"role": "user", "content": "Weather and time in Paris?"},
            {
                "role": "assistant",
                "content": "Checking",
                "tool_calls": [
                    {
                        "id": "call_W3atherParis02",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'},
                    },
                    {
                        "id": "call_Cl0ckParis02",
                        "type": "function",
                        "function": {
                            "name": "get_time",
                            "arguments": '{"timezone":"Europe/Paris"}',
                        },
                    },
                ],
            },
            {"role": "tool", "tool_call_id": "call_W3atherParis02", "content": "18°C"},
            {"role": "tool", "tool_call_id": "call_Cl0ckParis02", "content": "no clock"},
            {"role": "assistant", "content": "Done."},
        ]

    def test_tool_calls_without_text_send_null_content(self) -> None:
        fake = FakeOpenAI("chat_text.sse")
        messages = (
            UserMessage("u1", "?"),
            AssistantMessage("a1", (PARIS,)),
            ToolResultMessage("t1", PARIS.id, "get_weather", "18°C"),
        )
        list(chat(fake).stream(ModelRequest("request-001", 1, messages, (), None)))
        assert fake.body()["messages"][1]["content"] is None


# =========================================================================== responses


class TestResponsesStream:
    def test_plain_text(self) -> None:
        fake = FakeOpenAI("responses_text.sse")
        items = list(responses(fake).stream(request()))
        assert items == [
            chunk(TextBlock("Hello")),
            chunk(TextBlock(" there")),
            chunk(TextBlock("!")),
            ModelResponse(
                "request-000",
                "resp_agentloop_text01",
                (TextBlock("Hello there!"),),
                "stop",
                Usage(9, 3),
            ),
        ]
        assert fake.requests[0].url.path == "/v1/responses"
        assert fake.body() == {
            "model": "gpt-4.1-mini",
            "input": [{"type": "message", "role": "user", "content": "Weather in Paris?"}],
            "instructions": "Be brief.",
            "stream": True,
        }

    def test_several_tool_calls(self) -> None:
        fake = FakeOpenAI("responses_tool_calls.sse")
        items = list(responses(fake).stream(request(WEATHER, TIME, system=None)))
        assert items == [
            chunk(TextBlock("Checking")),
            chunk(TextBlock(" both.")),
            chunk(PARIS),
            chunk(CLOCK),
            ModelResponse(
                "request-000",
                "resp_agentloop_tools02",
                (TextBlock("Checking both."), PARIS, CLOCK),
                "tool_call",
                Usage(75, 40),
            ),
        ]
        sent = fake.body()
        assert "instructions" not in sent
        assert sent["tools"] == [
            {
                "type": "function",
                "name": "get_weather",
                "description": "Current weather for a city.",
                "parameters": WEATHER.parameters,
                "strict": False,
            },
            {
                "type": "function",
                "name": "get_time",
                "description": "Current time in a timezone.",
                "parameters": TIME.parameters,
                "strict": False,
            },
        ]

    @pytest.mark.parametrize(
        ("name", "stop_reason", "usage"),
        [
            ("responses_text.sse", "stop", Usage(9, 3)),
            ("responses_tool_calls.sse", "tool_call", Usage(75, 40)),
            ("responses_incomplete.sse", "length", Usage(12, 4)),
            ("responses_content_filter.sse", "error", Usage(12, 2)),
        ],
    )
    def test_status_mapping_and_usage(self, name: str, stop_reason: str, usage: Usage) -> None:
        final = list(responses(FakeOpenAI(name)).stream(request(WEATHER)))[-1]
        assert type(final) is ModelResponse
        assert (final.stop_reason, final.usage) == (stop_reason, usage)

    def test_incomplete_in_a_tool_call_keeps_the_call_without_arguments(self) -> None:
        items = list(
            responses(FakeOpenAI("responses_incomplete_in_tool_call.sse")).stream(request())
        )
        call = ToolCall("call_Cut0ff06", "get_weather", {})
        assert items == [
            chunk(call),
            ModelResponse("request-000", "resp_agentloop_cut06", (call,), "length", Usage(61, 8)),
        ]

    def test_malformed_arguments_are_a_protocol_failure(self) -> None:
        items = list(responses(FakeOpenAI("responses_malformed_arguments.sse")).stream(request()))
        assert len(items) == 1
        assert type(items[0]) is ModelFailure
        assert items[0].code == MODEL_PROTOCOL_ERROR
        assert "output item 0 ('get_weather', id 'call_BadJson07')" in items[0].message
        assert "not valid JSON" in items[0].message

    def test_response_failed_raises_model_error(self) -> None:
        with pytest.raises(ModelError) as caught:
            list(responses(FakeOpenAI("responses_failed.sse")).stream(request()))
        assert caught.value.kind == "server"
        assert caught.value.provider == "openai"
        assert "The model failed to generate a response." in caught.value.message

    def test_error_event_raises_model_error(self) -> None:
        with pytest.raises(ModelError) as caught:
            list(responses(FakeOpenAI("responses_error_event.sse")).stream(request()))
        assert caught.value.kind == "rate_limit"
        assert "Rate limit reached" in caught.value.message

    def test_stream_without_terminal_event_is_a_protocol_failure(self) -> None:
        body = fixture("responses_text.sse")
        body = body[: body.index(b"event: response.completed")]
        items = list(responses(FakeOpenAI(body)).stream(request()))
        assert type(items[-1]) is ModelFailure
        assert "the stream ended without response.completed" in items[-1].message

    def test_transcript_becomes_input_items(self) -> None:
        fake = FakeOpenAI("responses_final_answer.sse")
        messages = (
            UserMessage("u1", "Weather and time in Paris?"),
            AssistantMessage("a1", (TextBlock("Checking"), PARIS, TextBlock("and"), CLOCK)),
            ToolResultMessage("t1", PARIS.id, "get_weather", "18°C"),
            ToolResultMessage("t2", CLOCK.id, "get_time", "20:15"),
            AssistantMessage("a2", (ThinkingBlock("not sent"), TextBlock("Sunny"), TextBlock("."))),
        )
        list(responses(fake).stream(ModelRequest("request-001", 1, messages, (), None)))
        assert fake.body()["input"] == [
            {"type": "message", "role": "user", "content": "Weather and time in Paris?"},
            {"type": "message", "role": "assistant", "content": "Checking"},
            {
                "type": "function_call",
                "call_id": "call_W3atherParis02",
                "name": "get_weather",
                "arguments": '{"city":"Paris"}',
            },
            {"type": "message", "role": "assistant", "content": "and"},
            {
                "type": "function_call",
                "call_id": "call_Cl0ckParis02",
                "name": "get_time",
                "arguments": '{"timezone":"Europe/Paris"}',
            },
            {"type": "function_call_output", "call_id": "call_W3atherParis02", "output": "18°C"},
            {"type": "function_call_output", "call_id": "call_Cl0ckParis02", "output": "20:15"},
            {"type": "message", "role": "assistant", "content": "Sunny."},
        ]


class TestEdgeCases:
    def test_only_choice_0_is_read(self) -> None:
        parts = events("chat_text.sse")
        other = parts[1].replace(b'"index":0', b'"index":1').replace(b"Hello", b"Bonjour")
        items = list(chat(FakeOpenAI(sse(parts[0], other, *parts[1:]))).stream(request()))
        assert items[-1].content == (TextBlock("Hello there!"),)  # type: ignore[union-attr]

    def test_chat_tool_call_without_id_fails(self) -> None:
        body = fixture("chat_tool_call.sse").replace(b'"id":"call_W3atherParis01",', b"")
        items = list(chat(FakeOpenAI(body)).stream(request()))
        assert items == [
            ModelFailure(
                "request-000",
                "openai chat completion 'chatcmpl-AgentloopTool01', tool call 0: "
                "the tool call has no id",
                MODEL_PROTOCOL_ERROR,
            )
        ]

    def test_chat_tool_call_with_empty_arguments(self) -> None:
        body = sse(
            *[
                e
                for e in events("chat_tool_call.sse")
                if b'"function":{"arguments"' not in e  # drop every argument fragment
            ]
        )
        items = list(chat(FakeOpenAI(body)).stream(request()))
        assert items[0] == chunk(ToolCall("call_W3atherParis01", "get_weather", {}))

    def test_chat_fragment_without_function_is_harmless(self) -> None:
        parts = events("chat_tool_call.sse")
        bare = parts[1].replace(
            b'"id":"call_W3atherParis01","type":"function","function":'
            b'{"name":"get_weather","arguments":""}',
            b'"type":"function"',
        )
        assert bare != parts[1]
        items = list(chat(FakeOpenAI(sse(parts[0], bare, *parts[1:]))).stream(request()))
        assert items[0] == chunk(ToolCall("call_W3atherParis01", "get_weather", {"city": "Paris"}))

    def test_responses_done_item_without_arguments_uses_the_fragments(self) -> None:
        parts = events("responses_tool_calls.sse")
        parts = [
            e.replace(b'"arguments":"{\\"city\\":\\"Paris\\"}"', b'"arguments":""')
            if b"response.output_item.done" in e
            else e
            for e in parts
        ]
        items = list(responses(FakeOpenAI(sse(*parts))).stream(request()))
        assert PARIS in items[-1].content  # type: ignore[union-attr]

    def test_responses_malformed_call_followed_by_another_item_fails(self) -> None:
        body = fixture("responses_tool_calls.sse").replace(
            b'"arguments":"{\\"city\\":\\"Paris\\"}"', b'"arguments":"{\\"city"'
        )
        items = list(responses(FakeOpenAI(body)).stream(request()))
        assert type(items[-1]) is ModelFailure
        assert "output item 1 ('get_weather', id 'call_W3atherParis02')" in items[-1].message

    def test_responses_malformed_call_cut_off_by_the_limit_is_kept(self) -> None:
        body = (
            fixture("responses_malformed_arguments.sse")
            .replace(b"response.completed", b"response.incomplete")
            .replace(
                b'"incomplete_details":null', b'"incomplete_details":{"reason":"max_output_tokens"}'
            )
        )
        items = list(responses(FakeOpenAI(body)).stream(request()))
        assert items[0] == chunk(ToolCall("call_BadJson07", "get_weather", {}))
        assert type(items[1]) is ModelResponse
        assert items[1].stop_reason == "length"

    def test_responses_completed_with_an_unfinished_call_fails(self) -> None:
        body = fixture("responses_incomplete_in_tool_call.sse").replace(
            b"response.incomplete", b"response.completed"
        )
        items = list(responses(FakeOpenAI(body)).stream(request()))
        assert items == [
            ModelFailure(
                "request-000",
                "openai response 'resp_agentloop_cut06', function call item "
                "'fc_agentloop_cut06': the response ended before the call was done",
                MODEL_PROTOCOL_ERROR,
            )
        ]

    @pytest.mark.parametrize(
        ("code", "kind"),
        [(b'"invalid_prompt"', "bad_request"), (b'"server_error"', "server"), (b"null", "unknown")],
    )
    def test_responses_error_event_kinds(self, code: bytes, kind: str) -> None:
        body = fixture("responses_error_event.sse").replace(b'"rate_limit_exceeded"', code)
        with pytest.raises(ModelError) as caught:
            list(responses(FakeOpenAI(body)).stream(request()))
        assert caught.value.kind == kind

    @pytest.mark.parametrize(
        ("adapter", "name"),
        [(chat, "chat_text.sse"), (responses, "responses_text.sse")],
        ids=["chat", "responses"],
    )
    def test_connection_dropped_mid_stream_is_not_retried(self, adapter: Any, name: str) -> None:
        parts = events(name)
        first_text = next(i for i, e in enumerate(parts) if b"Hello" in e)
        dropped = httpx2.Response(
            200,
            headers={"content-type": "text/event-stream"},
            stream=DroppedStream(sse(*parts[: first_text + 1])),
        )
        fake = FakeOpenAI(dropped, name)
        model = adapter(fake, retry=RetryPolicy(3, 1.0), sleep=pytest.fail)
        seen: list[object] = []
        with pytest.raises(ModelError) as caught:
            for item in model.stream(request()):
                seen.append(item)
        assert seen == [chunk(TextBlock("Hello"))]
        assert caught.value.kind == "connection"
        assert len(fake.requests) == 1

    def test_timeout(self) -> None:
        with pytest.raises(ModelError) as caught:
            list(responses(FakeOpenAI(httpx2.ReadTimeout("timed out"))).stream(request()))
        assert caught.value.message == "openai connection: request timed out"

    def test_error_without_a_json_body(self) -> None:
        fake = FakeOpenAI((502, b"<html><body>Bad gateway</body></html>"))
        with pytest.raises(ModelError) as caught:
            list(chat(fake).stream(request()))
        assert (caught.value.kind, caught.value.status_code) == ("server", 502)

    def test_other_sdk_errors_are_unknown(self) -> None:
        from agentloop.models.openai import _model_error

        error = _model_error(openai.OpenAIError("no api key"))
        assert (error.kind, error.status_code) == ("unknown", None)
        assert error.message == "openai unknown: OpenAIError: no api key"

    def test_model_name_is_required(self) -> None:
        with pytest.raises(ValueError, match="model name"):
            OpenAIChatModel(FakeOpenAI().client, "")


class TestCommon:
    @pytest.mark.parametrize(
        ("raw", "kind"),
        [("null", "null"), ("true", "a boolean"), ("1.5", "a number"), ('"x"', "a string")],
    )
    def test_arguments_must_be_an_object(self, raw: str, kind: str) -> None:
        with pytest.raises(MalformedOutput, match=f"must be a JSON object, got {kind}"):
            decode_arguments(raw, "here")

    def test_blank_arguments_mean_none(self) -> None:
        assert decode_arguments("  ", "here") == {}

    @pytest.mark.parametrize(
        ("status", "kind"),
        [(None, "unknown"), (302, "unknown"), (403, "auth"), (404, "bad_request"), (503, "server")],
    )
    def test_kind_from_status(self, status: int | None, kind: str) -> None:
        assert kind_from_status(status) == kind

    def test_adapter_options_are_checked(self) -> None:
        client = FakeOpenAI().client
        with pytest.raises(TypeError, match="retry must be a RetryPolicy"):
            OpenAIChatModel(client, "m", retry=3)  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="sleep must be callable"):
            OpenAIChatModel(client, "m", sleep=1.0)  # type: ignore[arg-type]


# =========================================================================== errors

HTTP_ERRORS = [
    (429, "error_429.json", "rate_limit", "Rate limit reached for gpt-4.1-mini"),
    (401, "error_401.json", "auth", "Incorrect API key provided"),
    (500, "error_500.json", "server", "The server had an error"),
    (400, "error_400.json", "bad_request", "Invalid 'messages[1].tool_calls[0].id'"),
]


@pytest.mark.parametrize("adapter", [chat, responses], ids=["chat", "responses"])
@pytest.mark.parametrize(("status", "name", "kind", "text"), HTTP_ERRORS)
def test_http_errors_become_typed_model_errors(
    adapter: Any, status: int, name: str, kind: str, text: str
) -> None:
    fake = FakeOpenAI((status, name))
    with pytest.raises(ModelError) as caught:
        list(adapter(fake).stream(request()))
    error = caught.value
    assert (error.provider, error.status_code, error.kind) == ("openai", status, kind)
    assert error.message.startswith(f"openai HTTP {status}: ")
    assert text in error.message
    assert len(fake.requests) == 1  # the SDK did not retry behind our back


def test_connection_error() -> None:
    fake = FakeOpenAI(httpx2.ConnectError("[Errno 111] Connection refused"))
    with pytest.raises(ModelError) as caught:
        list(chat(fake).stream(request()))
    assert (caught.value.kind, caught.value.status_code) == ("connection", None)
    assert len(fake.requests) == 1


def test_error_inside_a_chat_stream() -> None:
    with pytest.raises(ModelError) as caught:
        list(chat(FakeOpenAI("chat_midstream_error.sse")).stream(request()))
    assert caught.value.kind == "server"
    assert caught.value.status_code is None
    assert "The server had an error while processing your request" in caught.value.message


def test_run_records_a_provider_error() -> None:
    log = EventLog()
    result = run(
        [UserMessage("u1", "Hi")],
        model=chat(FakeOpenAI((429, "error_429.json"))),
        tools=[],
        log=log,
    )
    assert result.status == "failed"
    assert result.error is not None
    assert result.error.code == MODEL_ERROR
    assert "openai HTTP 429: Rate limit reached" in result.error.message
    drafts = [e for e in log.events if type(e) is PlanDraftEvent]
    assert type(drafts[0].reply) is ModelFailure
    assert "rate_limit_exceeded" in drafts[0].reply.message


def test_run_reports_malformed_arguments_as_a_protocol_error() -> None:
    result = run(
        [UserMessage("u1", "Weather in Paris?")],
        model=chat(FakeOpenAI("chat_malformed_arguments.sse")),
        tools=[get_weather],
    )
    assert result.status == "failed"
    assert result.error is not None
    assert result.error.code == MODEL_PROTOCOL_ERROR
    assert "not valid JSON" in result.error.message


# =========================================================================== retries


class TestRetry:
    def test_retries_before_the_first_chunk_and_records_each_attempt(self) -> None:
        fake = FakeOpenAI((429, "error_429.json"), (500, "error_500.json"), "chat_text.sse")
        slept: list[float] = []
        model = chat(fake, retry=RetryPolicy(3, 0.5), sleep=slept.append)
        items = list(model.stream(request()))
        assert type(items[-1]) is ModelResponse
        assert slept == [0.5, 1.0]
        assert len(fake.requests) == 3
        assert [(a.number, a.kind, a.status_code, a.retried) for a in model.attempts] == [
            (1, "rate_limit", 429, True),
            (2, "server", 500, True),
            (3, None, None, False),
        ]
        assert model.attempts[0].delay_seconds == 0.5
        assert model.attempts[2] == RetryAttempt(request_id="request-000", number=3)

    def test_gives_up_after_the_last_attempt(self) -> None:
        fake = FakeOpenAI(*[(429, "error_429.json")] * 2)
        slept: list[float] = []
        model = chat(fake, retry=RetryPolicy(2, 1.0), sleep=slept.append)
        with pytest.raises(ModelError, match="429"):
            list(model.stream(request()))
        assert slept == [1.0]
        assert [a.retried for a in model.attempts] == [True, False]

    def test_does_not_retry_auth_errors(self) -> None:
        fake = FakeOpenAI((401, "error_401.json"), "chat_text.sse")
        model = chat(fake, retry=RetryPolicy(3, 1.0), sleep=pytest.fail)
        with pytest.raises(ModelError, match="Incorrect API key"):
            list(model.stream(request()))
        assert len(fake.requests) == 1

    def test_never_retries_after_a_chunk_was_yielded(self) -> None:
        head = fixture("chat_text.sse").split(b"\n\n")[:2]
        error = fixture("chat_midstream_error.sse").split(b"\n\n")[-2]
        fake = FakeOpenAI(b"\n\n".join([*head, error, b""]), "chat_text.sse")
        model = chat(fake, retry=RetryPolicy(3, 1.0), sleep=pytest.fail)
        seen: list[object] = []
        with pytest.raises(ModelError, match="server_error"):
            for item in model.stream(request()):
                seen.append(item)
        assert seen == [chunk(TextBlock("Hello"))]
        assert len(fake.requests) == 1
        assert [a.retried for a in model.attempts] == [False]

    def test_no_policy_means_no_retry(self) -> None:
        fake = FakeOpenAI((500, "error_500.json"), "chat_text.sse")
        model = chat(fake)
        with pytest.raises(ModelError):
            list(model.stream(request()))
        assert len(fake.requests) == 1
        assert [a.kind for a in model.attempts] == ["server"]

    @pytest.mark.parametrize(
        "bad",
        [
            {"attempts": 0},
            {"backoff_seconds": -1},
            {"multiplier": 0.5},
            {"max_backoff_seconds": True},
            {"multiplier": "2"},
        ],
    )
    def test_policy_validation(self, bad: dict[str, Any]) -> None:
        with pytest.raises(ValueError):
            RetryPolicy(**bad)

    def test_backoff_is_capped(self) -> None:
        policy = RetryPolicy(10, 1.0, multiplier=10.0, max_backoff_seconds=5.0)
        assert [policy.delay(n) for n in (1, 2, 3)] == [1.0, 5.0, 5.0]


# =========================================================================== full runs


@pytest.mark.parametrize(
    ("adapter", "first", "last", "response_ids"),
    [
        (
            chat,
            "chat_tool_call.sse",
            "chat_final_answer.sse",
            ["chatcmpl-AgentloopTool01", "chatcmpl-AgentloopFinal03"],
        ),
        (
            responses,
            "responses_tool_calls.sse",
            "responses_final_answer.sse",
            ["resp_agentloop_tools02", "resp_agentloop_final03"],
        ),
    ],
    ids=["chat", "responses"],
)
def test_two_step_run_and_replay(
    adapter: Any, first: str, last: str, response_ids: list[str]
) -> None:
    fake = FakeOpenAI(first, last)
    log = EventLog()

    @tool
    def get_time(timezone: str) -> str:
        """Current time in a timezone."""
        return f"20:15 in {timezone}"

    result = run(
        [UserMessage("u1", "Weather in Paris?")],
        model=adapter(fake),
        tools=[get_weather, get_time],
        system="Be brief.",
        log=log,
        clock=iter(range(100, 200)).__next__,
    )
    assert result.status == "completed"
    assert result.final_text == "It is 18°C in Paris."
    assert result.steps == 2
    assert [m.id for m in result.messages if type(m) is AssistantMessage] == [
        f"message-{rid}" for rid in response_ids
    ]
    first_usage = Usage(61, 15) if adapter is chat else Usage(75, 40)
    assert result.usage == first_usage + Usage(98, 9)

    # The second request carries the assistant tool call(s) and the result(s).
    second = fake.body(1)
    calls = [b for b in result.messages[1].content if type(b) is ToolCall]  # type: ignore[union-attr]
    if adapter is chat:
        assert second["messages"][2:] == [
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
        ]
    else:
        assert [item["type"] for item in second["input"]] == [
            "message",
            "message",
            "function_call",
            "function_call",
            "function_call_output",
            "function_call_output",
        ]
        assert second["input"][4:] == [
            {
                "type": "function_call_output",
                "call_id": call.id,
                "output": content,
            }
            for call, content in zip(
                calls, ["18°C and sunny in Paris", "20:15 in Europe/Paris"], strict=True
            )
        ]

    # The log replays without the model: no further HTTP request is made.
    requests_made = len(fake.requests)
    replayed = replay.replay(log.events)
    assert replayed.result == result
    assert len(fake.requests) == requests_made


def test_long_streams_stay_within_the_chunk_limit() -> None:
    # 3072 text deltas: the first half of the chunk budget streams one delta per
    # chunk, the rest is held back and sent as one chunk before the response.
    pieces = [f"w{i} " for i in range(3 * MAX_CHUNKS_PER_STEP)]
    events = fixture("chat_text.sse").split(b"\n\n")
    head, hello, tail = events[0], events[1], events[-4:]  # tail: finish, usage, [DONE], ""
    deltas = [hello.replace(b'"content":"Hello"', f'"content":"{p}"'.encode()) for p in pieces]
    log = EventLog()
    result = run(
        [UserMessage("u1", "Talk.")],
        model=chat(FakeOpenAI(b"\n\n".join([head, *deltas, *tail]))),
        tools=[],
        log=log,
    )
    assert result.status == "completed"
    assert result.final_text == "".join(pieces)
    streamed = [e for e in log.events if type(e) is ModelChunkEvent]
    assert len(streamed) == MAX_CHUNKS_PER_STEP // 2 + 1
    assert streamed[-1].chunk.block == TextBlock("".join(pieces[MAX_CHUNKS_PER_STEP // 2 :]))


# =========================================================================== --model spec


class TestModelFromSpec:
    def test_openai_chat(self) -> None:
        model = model_from_spec("openai:gpt-4.1-mini", environ={"OPENAI_API_KEY": "sk-test"})
        assert type(model) is OpenAIChatModel
        assert model.model == "gpt-4.1-mini"
        assert model.client.api_key == "sk-test"

    def test_openai_responses(self) -> None:
        spec = "openai-responses:gpt-4.1-mini"
        model = model_from_spec(spec, environ={"OPENAI_API_KEY": "sk-test"})
        assert type(model) is OpenAIResponsesModel

    def test_missing_key_says_what_to_set(self) -> None:
        with pytest.raises(ModelSpecError, match=r"set OPENAI_API_KEY in the environment"):
            model_from_spec("openai:gpt-4.1-mini", environ={})

    def test_missing_sdk_says_what_to_install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setitem(sys.modules, "openai", None)
        with pytest.raises(ModelSpecError, match=r"pip install 'agentloop-replay\[openai\]'"):
            model_from_spec("openai:gpt-4.1-mini", environ={"OPENAI_API_KEY": "sk-test"})

    @pytest.mark.parametrize("spec", ["gpt-4.1-mini", "mistral:large", "openai:", "openai: "])
    def test_bad_specs(self, spec: str) -> None:
        with pytest.raises(ModelSpecError, match="openai:<model>"):
            model_from_spec(spec, environ={"OPENAI_API_KEY": "sk-test"})
