"""Gemini adapter through the real ``google-genai`` client, on hand-made bodies.

The recorded Gemini streams are replayed in ``test_models_recorded.py``; the cases
no public recording covers (thought parts, parallel calls, cached tokens, stop
reasons, errors) use the hand-made bodies in ``fixtures/providers/gemini/``.
"""

from __future__ import annotations

import base64
import subprocess
import sys
from typing import Any

import pytest

pytest.importorskip("google.genai")

import httpx2

from agentloop import (
    MODEL_ERROR,
    AssistantMessage,
    ModelError,
    ModelRequest,
    ProviderBlock,
    TextBlock,
    ThinkingBlock,
    ToolCall,
    ToolResultMessage,
    Usage,
    UserMessage,
    run,
)
from agentloop.models import ModelSpecError, RetryPolicy, model_from_spec
from agentloop.models.gemini import GeminiModel

from .test_models_recorded import (
    WEATHER,
    Server,
    chunk_lines,
    chunks,
    data_sse,
    final,
    gemini_model,
    read,
    request,
)


def body(name: str) -> bytes:
    return data_sse(chunk_lines(f"gemini/{name}"), crlf=True)


def error(status: int) -> tuple[int, bytes]:
    return status, read(f"gemini/error_{status}.json")


class TestStream:
    def test_thought_parallel_calls_and_cached_tokens(self) -> None:
        server = Server(body("thought_parallel_calls.chunks.txt"))
        items = list(gemini_model(server).stream(request(WEATHER)))
        thinking = ThinkingBlock("**Planning** I need both cities.")
        paris = ToolCall("AgentloopGeminiParallel1-1", "get_weather", {"city": "Paris"})
        signature = ProviderBlock(
            "gemini",
            "thought_signature",
            {
                "thought_signature": "aGFuZC1tYWRlIHRob3VnaHQgc2lnbmF0dXJlICMx",
                "part": "function_call",
            },
        )
        tokyo = ToolCall(
            "AgentloopGeminiParallel1-2",
            "get_weather",
            {"city": "Tokyo", "options": {"units": "metric", "days": [1, 2]}},
        )
        assert chunks(items) == [thinking, paris, signature, tokyo]
        answer = final(items)
        assert answer.content == (thinking, paris, signature, tokyo)
        assert answer.stop_reason == "tool_call"
        assert answer.usage == Usage(120, 24 + 30, cache_read_tokens=96, reasoning_tokens=30)

    def test_max_tokens_is_length(self) -> None:
        answer = final(list(gemini_model(Server(body("max_tokens.chunks.txt"))).stream(request())))
        assert answer.content == (TextBlock("Once upon a time"),)
        assert answer.stop_reason == "length"
        assert answer.usage == Usage(8, 4)

    def test_safety_stop_keeps_googles_words(self) -> None:
        result = run(
            [UserMessage("u1", "...")],
            model=gemini_model(Server(body("safety.chunks.txt"))),
            tools=[],
        )
        assert result.error is not None
        assert result.error.code == MODEL_ERROR
        # (the SDK drops the Gemini API's finishMessage; Vertex AI's is kept, see below)
        assert result.error.message == (
            "step 1: the model stopped with reason 'error': finish_reason SAFETY"
        )
        assert result.usage == Usage(15, 0)

    def test_finish_message_is_kept_when_the_sdk_has_it(self) -> None:
        from google.genai import types

        from agentloop.models._common import END, Feed
        from agentloop.models.gemini import _replies, _Usage

        chunk = types.GenerateContentResponse.model_validate_json(read("gemini/safety.chunks.txt"))
        feed = Feed(_replies(request(), _Usage()), "request-001")
        answer = final([*feed.send(chunk), *feed.send(END)])
        assert answer.stop_message == (
            "finish_reason SAFETY: The response was blocked by the safety filters."
        )

    def test_blocked_prompt(self) -> None:
        answer = final(
            list(gemini_model(Server(body("prompt_blocked.chunks.txt"))).stream(request()))
        )
        assert answer.stop_reason == "error"
        assert answer.stop_message == "prompt blocked: PROHIBITED_CONTENT (The prompt was blocked.)"
        assert answer.id == "AgentloopGeminiBlocked4"

    def test_blocked_prompt_without_a_message(self) -> None:
        line = '{"promptFeedback":{"blockReason":"SAFETY"},"responseId":"b1"}'
        answer = final(list(gemini_model(Server(data_sse([line]))).stream(request())))
        assert answer.stop_message == "prompt blocked: SAFETY"

    def test_stream_without_finish_reason_or_id(self) -> None:
        line = '{"candidates":[{"content":{"parts":[{"text":"Hi"}],"role":"model"},"index":0}]}'
        answer = final(list(gemini_model(Server(data_sse([line]))).stream(request())))
        assert (answer.id, answer.stop_reason, answer.usage) == ("request-001", "stop", None)

    def test_candidate_without_content_and_other_finish_reasons(self) -> None:
        lines = [
            '{"candidates":[{"index":0}],"responseId":"e1"}',
            '{"candidates":[{"content":{"role":"model"},"finishReason":"RECITATION","index":0}]}',
        ]
        answer = final(list(gemini_model(Server(data_sse(lines))).stream(request())))
        assert answer.stop_message == "finish_reason RECITATION"

    def test_thought_then_text_then_signature_on_a_thought(self) -> None:
        lines = [
            '{"candidates":[{"content":{"parts":[{"text":"Think.","thought":true,'
            '"thoughtSignature":"AAEC"}],"role":"model"},"index":0}],"responseId":"t1"}',
            '{"candidates":[{"content":{"parts":[{"text":"Done."}],"role":"model"},'
            '"finishReason":"STOP","index":0}]}',
        ]
        answer = final(list(gemini_model(Server(data_sse(lines))).stream(request())))
        assert answer.content == (
            ThinkingBlock("Think."),
            ProviderBlock(
                "gemini", "thought_signature", {"thought_signature": "AAEC", "part": "thought"}
            ),
            TextBlock("Done."),
        )


class TestRequest:
    def test_history_becomes_contents(self) -> None:
        server = Server(body("max_tokens.chunks.txt"))
        signature = base64.b64encode(b"sig").decode()
        history = (
            UserMessage("u1", "Weather?"),
            AssistantMessage(
                "m1",
                (
                    ThinkingBlock("hidden"),
                    TextBlock("Checking."),
                    ProviderBlock(
                        "gemini",
                        "thought_signature",
                        {"thought_signature": signature, "part": "text"},
                    ),
                    ToolCall("c1", "get_weather", {"city": "Paris"}),
                    ToolCall("c2", "get_weather", {"city": "Oslo"}),
                    ProviderBlock(
                        "gemini",
                        "thought_signature",
                        {"thought_signature": signature, "part": "empty"},
                    ),
                    ProviderBlock(
                        "gemini", "thought_signature", {"thought_signature": "!!", "part": "text"}
                    ),
                    ProviderBlock("gemini", "thought_signature", {"part": "text"}),
                    ProviderBlock("anthropic", "redacted_thinking", {"data": "x"}),
                    TextBlock(""),
                ),
            ),
            ToolResultMessage("r1", "c1", "get_weather", "sunny"),
            ToolResultMessage("r2", "c2", "get_weather", "no such city", is_error=True),
            AssistantMessage("m2", (ThinkingBlock("only thinking"),)),
            UserMessage("u2", "Thanks"),
        )
        list(gemini_model(server).stream(ModelRequest("request-002", 2, history, ())))
        url_safe = base64.urlsafe_b64encode(b"sig").decode()
        assert server.body()["contents"] == [
            {"role": "user", "parts": [{"text": "Weather?"}]},
            {
                "role": "model",
                "parts": [
                    {"text": "Checking.", "thoughtSignature": url_safe},
                    {
                        "functionCall": {
                            "id": "c1",
                            "name": "get_weather",
                            "args": {"city": "Paris"},
                        }
                    },
                    {"functionCall": {"id": "c2", "name": "get_weather", "args": {"city": "Oslo"}}},
                    {"text": "", "thoughtSignature": url_safe},
                ],
            },
            {
                "role": "user",
                "parts": [
                    {
                        "functionResponse": {
                            "id": "c1",
                            "name": "get_weather",
                            "response": {"result": "sunny"},
                        }
                    },
                    {
                        "functionResponse": {
                            "id": "c2",
                            "name": "get_weather",
                            "response": {"error": "no such city"},
                        }
                    },
                ],
            },
            {"role": "user", "parts": [{"text": "Thanks"}]},
        ]

    def test_trailing_tool_results_and_config_options(self) -> None:
        server = Server(body("max_tokens.chunks.txt"))
        history = (
            UserMessage("u1", "Weather?"),
            AssistantMessage("m1", (ToolCall("c1", "get_weather", {"city": "Paris"}),)),
            ToolResultMessage("r1", "c1", "get_weather", "sunny"),
        )
        adapter = gemini_model(server, temperature=0.25, max_output_tokens=50)
        list(adapter.stream(ModelRequest("request-002", 2, history, ())))
        sent = server.body()
        assert sent["contents"][-1]["role"] == "user"
        assert sent["generationConfig"] == {"temperature": 0.25, "maxOutputTokens": 50}
        assert "tools" not in sent

    def test_reserved_options_and_bad_model(self) -> None:
        server = Server()
        with pytest.raises(ValueError, match="system_instruction are set by the adapter"):
            gemini_model(server, system_instruction="x")
        with pytest.raises(ValueError, match="non-empty model name"):
            GeminiModel(gemini_model(server).client, "")
        assert repr(gemini_model(server)) == "GeminiModel(model='gemini-3-pro-preview')"


class TestErrors:
    @pytest.mark.parametrize(
        ("status", "kind", "text"),
        [
            (400, "bad_request", "Invalid JSON payload received."),
            (401, "auth", "API key not valid."),
            (429, "rate_limit", "Resource has been exhausted"),
            (500, "server", "An internal error has occurred."),
        ],
    )
    def test_http_errors(self, status: int, kind: str, text: str) -> None:
        with pytest.raises(ModelError) as caught:
            list(gemini_model(Server(error(status))).stream(request()))
        assert caught.value.provider == "gemini"
        assert caught.value.status_code == status
        assert caught.value.kind == kind
        assert caught.value.message.startswith(f"gemini HTTP {status}: {text}")

    def test_error_inside_the_stream_keeps_the_usage_so_far(self) -> None:
        result = run(
            [UserMessage("u1", "Hi")],
            model=gemini_model(Server(body("midstream_error.chunks.txt"))),
            tools=[],
        )
        assert result.error is not None
        assert (
            "The model is overloaded. Please try again later. [UNAVAILABLE]" in result.error.message
        )
        assert result.usage == Usage(30, 1)

    @pytest.mark.parametrize(
        ("exc", "detail"),
        [
            (httpx2.ConnectError("connection refused"), "connection refused"),
            (httpx2.ReadTimeout("slow"), "request timed out"),
            (httpx2.ConnectError(""), "ConnectError"),
        ],
    )
    def test_transport_errors(self, exc: Exception, detail: str) -> None:
        with pytest.raises(ModelError) as caught:
            list(gemini_model(Server(exc)).stream(request()))
        assert caught.value.kind == "connection"
        assert caught.value.message == f"gemini connection: {detail}"

    def test_retry_then_success(self) -> None:
        server = Server(error(500), body("max_tokens.chunks.txt"))
        adapter = gemini_model(server, retry=RetryPolicy(2, 0.0))
        assert final(list(adapter.stream(request()))).stop_reason == "length"
        assert [a.error is None for a in adapter.attempts] == [False, True]

    def test_error_without_a_status_code(self) -> None:
        from google.genai import errors

        from agentloop.models.gemini import _model_error

        made = _model_error(errors.APIError(0, {"error": {"message": ""}}), None)
        assert made.status_code is None
        assert made.message.startswith("gemini stream error: ")


class TestSpec:
    def test_gemini(self) -> None:
        adapter = model_from_spec("gemini:gemini-2.5-flash", environ={"GOOGLE_API_KEY": "g-key"})
        assert type(adapter) is GeminiModel
        assert adapter.model == "gemini-2.5-flash"

    def test_missing_key(self) -> None:
        with pytest.raises(ModelSpecError, match="set GEMINI_API_KEY in the environment"):
            model_from_spec("gemini:gemini-2.5-flash", environ={})

    def test_missing_sdk(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setitem(sys.modules, "google.genai", None)
        with pytest.raises(
            ModelSpecError, match=r"install the google-genai SDK .*agentloop-replay\[gemini\]"
        ):
            model_from_spec("gemini:gemini-2.5-flash", environ={"GEMINI_API_KEY": "k"})

    def test_openai_compatible(self) -> None:
        spec = "openai-compatible:llama3.2:3b@http://127.0.0.1:11434/v1"
        adapter: Any = model_from_spec(spec, environ={})
        assert adapter.model == "llama3.2:3b"
        assert str(adapter.client.base_url) == "http://127.0.0.1:11434/v1/"
        assert adapter.client.api_key == "unused"
        keyed: Any = model_from_spec(spec, environ={"OPENAI_COMPATIBLE_API_KEY": "k1"})
        assert keyed.client.api_key == "k1"

    @pytest.mark.parametrize(
        ("spec", "problem"),
        [
            ("openai-compatible:llama3.2", "names no base URL"),
            ("openai-compatible:@http://x", "names no model"),
            ("nope:model", "openai-compatible:<model>@<base_url>"),
        ],
    )
    def test_bad_openai_compatible_specs(self, spec: str, problem: str) -> None:
        with pytest.raises(ModelSpecError, match=problem):
            model_from_spec(spec, environ={})


def test_import_agentloop_imports_no_provider_sdk() -> None:
    code = (
        "import sys, agentloop, agentloop.models\n"
        "sdks = [m for m in sys.modules if m.split('.')[0] in ('openai', 'anthropic', 'google')]\n"
        "assert not sdks, sdks\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_config_passes_through() -> None:
    from google.genai import types

    server = Server(body("max_tokens.chunks.txt"))
    adapter = gemini_model(server, thinking_config=types.ThinkingConfig(thinking_budget=128))
    list(adapter.stream(request()))
    assert 128 in server.body()["generationConfig"]["thinkingConfig"].values()
