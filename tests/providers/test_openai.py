"""What only the OpenAI adapters have: Chat Completions and Responses request
mapping, their stream edge cases, OpenAI-compatible servers (DeepSeek, OpenRouter,
the Hugging Face router) and stateless reasoning. The contract they share with the
other adapters is in ``test_conformance.py``."""

from __future__ import annotations

import json
import logging
from typing import Any

import httpx2
import openai
import pytest

from agentloop import (
    MODEL_ERROR,
    MODEL_PROTOCOL_ERROR,
    AssistantMessage,
    ModelFailure,
    ModelRequest,
    ModelResponse,
    ProviderBlock,
    TextBlock,
    ThinkingBlock,
    ToolCall,
    ToolResultMessage,
    Usage,
    UserMessage,
    tool,
)
from agentloop.models import ModelSpecError, model_from_spec
from agentloop.models.openai import OpenAIChatModel, _upstream

from .serve import (
    WEATHER,
    Server,
    body,
    chunk_lines,
    chunks,
    data_sse,
    events,
    failure,
    final,
    make,
    read,
    replays,
    replies,
    request,
    responses_turns,
    session,
)

C_DEEPSEEK = "openai/recorded/deepseek-tool-call.chunks.txt"
C_EMPTY_CALLS = "openai/recorded/issue-20203-empty-tool-calls.chunks.txt"
R_TOOL = "openai/recorded/issue-19493-gpt-5.1-tool-call.chunks.txt"
R_REASONING = "openai/recorded/openai-reasoning-encrypted-content.1.chunks.txt"
R_ERROR = "openai/recorded/openai-error.1.chunks.txt"

PARIS = ToolCall("call_W3atherParis02", "get_weather", {"city": "Paris"})
CLOCK = ToolCall("call_Cl0ckParis02", "get_time", {"timezone": "Europe/Paris"})


def chat(*replies_: Any, **options: Any) -> Any:
    return make("chat", Server(*replies_), **options)


def responses(*replies_: Any, **options: Any) -> Any:
    return make("responses", Server(*replies_), **options)


def edited(name: str, old: bytes, new: bytes) -> bytes:
    data = body(name)
    assert old in data, (name, old)
    return data.replace(old, new)


# =========================================================================== chat


class TestChatStream:
    def test_stop_with_tool_calls_is_a_tool_call_response(self) -> None:
        # A forced tool_choice makes OpenAI finish with "stop" although it called a tool.
        data = edited(
            "openai/chat_tool_call.sse",
            b'"finish_reason":"tool_calls"',
            b'"finish_reason":"stop"',
        )
        assert final(replies(chat(data), request(WEATHER))).stop_reason == "tool_call"

    def test_stream_without_finish_reason_is_accepted_as_stop(self) -> None:
        # OpenAI-compatible servers may end a stream without any finish_reason.
        items = replies(chat(body("openai/chat_no_finish_reason.sse")))
        assert chunks(items) == [TextBlock("Hel")]
        assert final(items) == ModelResponse(
            "request-001", "chatcmpl-AgentloopCut09", (TextBlock("Hel"),), "stop"
        )

    def test_tool_call_stream_without_finish_reason(self) -> None:
        # Hand-made (OpenRouter-style): the stream ends without any finish_reason.
        answer = final(replies(chat(body("openai/chat_no_finish_reason_tool_call.sse"))))
        assert answer.content == (
            ToolCall("call_AgentloopNoFinish1", "get_weather", {"city": "Paris"}),
        )
        assert answer.stop_reason == "tool_call"
        assert answer.usage == Usage(180, 21)

    def test_only_choice_0_is_read(self) -> None:
        parts = events(body("openai/chat_text.sse"))
        other = parts[1].replace(b'"index":0', b'"index":1').replace(b"Hello", b"Bonjour")
        answer = final(replies(chat(b"".join([parts[0], other, *parts[1:]]))))
        assert answer.content == (TextBlock("Hello there!"),)

    def test_a_tool_call_without_id_fails(self) -> None:
        data = edited("openai/chat_tool_call.sse", b'"id":"call_W3atherParis01",', b"")
        assert replies(chat(data)) == [
            ModelFailure(
                "request-001",
                "openai chat completion 'chatcmpl-AgentloopTool01', tool call 0: "
                "the tool call has no id",
                MODEL_PROTOCOL_ERROR,
            )
        ]

    def test_a_tool_call_without_arguments_has_empty_arguments(self) -> None:
        data = b"".join(
            e
            for e in events(body("openai/chat_tool_call.sse"))
            if b'"function":{"arguments"' not in e  # drop every argument fragment
        )
        assert chunks(replies(chat(data)))[0] == ToolCall("call_W3atherParis01", "get_weather", {})

    def test_a_fragment_without_function_is_harmless(self) -> None:
        parts = events(body("openai/chat_tool_call.sse"))
        bare = parts[1].replace(
            b'"id":"call_W3atherParis01","type":"function","function":'
            b'{"name":"get_weather","arguments":""}',
            b'"type":"function"',
        )
        assert bare != parts[1]
        items = replies(chat(b"".join([parts[0], bare, *parts[1:]])))
        assert chunks(items)[0] == ToolCall("call_W3atherParis01", "get_weather", {"city": "Paris"})

    def test_an_error_that_is_not_an_object(self) -> None:
        data = data_sse(
            ['{"id":"c1","object":"chat.completion.chunk","choices":[],"error":"boom"}']
        )
        _, error = failure(chat(data))
        assert error.message == "openai stream error: boom"


class TestChatRequest:
    def test_transcript_with_tool_calls_and_results(self) -> None:
        server = Server(body("openai/chat_text.sse"))
        messages = (
            UserMessage("u1", "Weather and time in Paris?"),
            AssistantMessage(
                "a1", (ThinkingBlock("hmm", "sig"), TextBlock("Checking"), PARIS, CLOCK)
            ),
            ToolResultMessage("t1", PARIS.id, "get_weather", "18°C"),
            ToolResultMessage("t2", CLOCK.id, "get_time", "no clock", is_error=True),
            AssistantMessage("a2", (TextBlock("Done."),)),
        )
        replies(make("chat", server), ModelRequest("request-001", 1, messages, (WEATHER,), None))
        assert server.body()["messages"] == [
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
        server = Server(body("openai/chat_text.sse"))
        messages = (
            UserMessage("u1", "?"),
            AssistantMessage("a1", (PARIS,)),
            ToolResultMessage("t1", PARIS.id, "get_weather", "18°C"),
        )
        replies(make("chat", server), ModelRequest("request-001", 1, messages, (), None))
        assert server.body()["messages"][1]["content"] is None

    def test_reasoning_is_not_sent_to_chat_completions(
        self, caplog: pytest.LogCaptureFixture
    ) -> None:
        server = Server(body("openai/chat_final_answer.sse"))
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
            replies(make("chat", server), ModelRequest("r", 2, history, ()))
        assert server.body()["messages"][1] == {"role": "assistant", "content": "Yo"}
        assert "openai-chat adapter: not sending a 'reasoning' block" in caplog.text


# =========================================================================== compatible servers


class Opaque:
    """A value JSON has no word for."""

    def __repr__(self) -> str:
        return "<opaque>"


class TestCompatibleServers:
    def test_recorded_deepseek_reasoning_content_and_a_tool_call(self) -> None:
        # DeepSeek: reasoning_content deltas, one tool call, usage with cache hits.
        server = Server(body(C_DEEPSEEK))
        items = replies(make("chat", server, model="deepseek-v4-flash"), request(WEATHER))
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
        assert server.requests[0].url == "https://api.openai.test/v1/chat/completions"

    def test_a_recorded_two_step_loop_over_an_openai_compatible_base_url(self) -> None:
        server = Server(body(C_DEEPSEEK), body(C_EMPTY_CALLS))
        calls: list[str] = []

        @tool
        def weather(location: str) -> str:
            """Weather for a place."""
            calls.append(location)
            return "foggy"

        client = openai.OpenAI(
            api_key="test",
            base_url="http://127.0.0.1:8000/v1",
            http_client=httpx2.Client(transport=server.transport),
        )
        result, log = session(
            [UserMessage("u1", "Weather in SF?")],
            OpenAIChatModel(client, "deepseek-v4-flash"),
            tools=[weather],
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

    def test_openrouter_keeps_the_upstream_reason_of_an_http_error(self) -> None:
        """OpenRouter wraps an upstream failure as "Provider returned error"; the
        reason is only in ``error.metadata.raw`` (and who said it in
        ``provider_name``). Hand-made body, in OpenRouter's documented shape."""
        wrapped = (429, read("openai/openrouter_error_429.json"), {"retry-after": "7"})
        _, error = failure(chat(wrapped))
        assert error.message == (
            "openai HTTP 429: Provider returned error [429]; upstream Chutes: "
            "qwen/qwen3-235b-a22b:free is temporarily rate-limited upstream. Please retry "
            "shortly, or add your own key to accumulate your rate limits: "
            "https://openrouter.ai/settings/integrations"
        )
        assert (error.kind, error.status_code, error.retry_after) == ("rate_limit", 429, 7.0)

    def test_openrouter_keeps_the_upstream_reason_of_an_error_inside_the_stream(self) -> None:
        # Hand-made: the upstream's own error body, as an object, in metadata.raw.
        data = body("openai/chat_openrouter_midstream_error.sse")
        result, log = session([UserMessage("u1", "Hi")], chat(data))
        assert result.error is not None
        assert result.error.code == MODEL_ERROR
        assert result.error.message == (
            "step 1: model call failed: openai stream error: Provider returned error [502]; "
            'upstream Google: {"error":{"code":503,"message":"The model is overloaded. Please '
            'try again later.","status":"UNAVAILABLE"}}'
        )
        assert result.usage == Usage(12, 1)
        replays(log)

    @pytest.mark.parametrize(
        ("error", "suffix"),
        [
            ({"message": "x"}, ""),
            ({"metadata": "not an object"}, ""),
            ({"metadata": {"raw": ""}}, ""),
            ({"metadata": {"raw": "boom"}}, "; upstream: boom"),
            ({"metadata": {"raw": "boom", "provider_name": ""}}, "; upstream: boom"),
            (
                {"metadata": {"raw": [1, {"a": None}], "provider_name": "X"}},
                '; upstream X: [1,{"a":null}]',
            ),
            ({"metadata": {"raw": Opaque()}}, '; upstream: "<opaque>"'),
        ],
    )
    def test_the_upstream_reason_is_what_there_is(self, error: Any, suffix: str) -> None:
        assert _upstream(error) == suffix

    def test_the_openrouter_code_of_a_chunk_error_without_a_number(self) -> None:
        chunk = {
            "id": "gen-1",
            "object": "chat.completion.chunk",
            "choices": [],
            "error": {
                "message": "Provider returned error",
                "code": "provider_error",
                "metadata": {"raw": "upstream timed out", "provider_name": "Groq"},
            },
        }
        _, error = failure(chat(data_sse([json.dumps(chunk)])))
        assert error.message == (
            "openai stream error: Provider returned error; upstream Groq: upstream timed out "
            "[provider_error]"
        )

    def test_the_hugging_face_routers_top_level_cached_tokens_are_cache_reads(self) -> None:
        # Hand-made, in the shape of the router's recorded streams (pydantic-ai's
        # cassettes through router.huggingface.co: `"usage": {..., "cached_tokens": 0}`).
        usage = final(replies(chat(body("openai/chat_hf_router_cached_tokens.sse")))).usage
        assert usage == Usage(1040, 6, cache_read_tokens=768)
        # prompt_tokens_details, when it has a count, is what counts
        both = edited(
            "openai/chat_hf_router_cached_tokens.sse",
            b'"cached_tokens":768}',
            b'"cached_tokens":768,"prompt_tokens_details":{"cached_tokens":512}}',
        )
        assert final(replies(chat(both))).usage == Usage(1040, 6, cache_read_tokens=512)


# =========================================================================== responses


class TestResponses:
    def test_a_stream_without_a_terminal_event_is_a_protocol_failure(self) -> None:
        data = body("openai/responses_text.sse")
        data = data[: data.index(b"event: response.completed")]
        last = replies(responses(data))[-1]
        assert type(last) is ModelFailure
        assert "the stream ended without response.completed" in last.message

    def test_transcript_becomes_input_items(self) -> None:
        server = Server(body("openai/responses_final_answer.sse"))
        messages = (
            UserMessage("u1", "Weather and time in Paris?"),
            AssistantMessage("a1", (TextBlock("Checking"), PARIS, TextBlock("and"), CLOCK)),
            ToolResultMessage("t1", PARIS.id, "get_weather", "18°C"),
            ToolResultMessage("t2", CLOCK.id, "get_time", "20:15"),
            AssistantMessage("a2", (ThinkingBlock("not sent"), TextBlock("Sunny"), TextBlock("."))),
        )
        replies(make("responses", server), ModelRequest("request-001", 1, messages, (), None))
        assert server.body()["input"] == [
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

    def test_a_done_item_without_arguments_uses_the_fragments(self) -> None:
        parts = [
            e.replace(b'"arguments":"{\\"city\\":\\"Paris\\"}"', b'"arguments":""')
            if b"response.output_item.done" in e
            else e
            for e in events(body("openai/responses_tool_calls.sse"))
        ]
        assert PARIS in final(replies(responses(b"".join(parts)))).content

    def test_a_malformed_call_followed_by_another_item_fails(self) -> None:
        data = edited(
            "openai/responses_tool_calls.sse",
            b'"arguments":"{\\"city\\":\\"Paris\\"}"',
            b'"arguments":"{\\"city"',
        )
        last = replies(responses(data))[-1]
        assert type(last) is ModelFailure
        assert "output item 1 ('get_weather', id 'call_W3atherParis02')" in last.message

    def test_a_malformed_call_cut_off_by_the_limit_is_kept(self) -> None:
        data = (
            body("openai/responses_malformed_arguments.sse")
            .replace(b"response.completed", b"response.incomplete")
            .replace(
                b'"incomplete_details":null', b'"incomplete_details":{"reason":"max_output_tokens"}'
            )
        )
        items = replies(responses(data))
        assert chunks(items) == [ToolCall("call_BadJson07", "get_weather", {})]
        assert final(items).stop_reason == "length"

    def test_completed_with_an_unfinished_call_fails(self) -> None:
        data = edited(
            "openai/responses_incomplete_in_tool_call.sse",
            b"response.incomplete",
            b"response.completed",
        )
        assert replies(responses(data)) == [
            ModelFailure(
                "request-001",
                "openai response 'resp_agentloop_cut06', function call item "
                "'fc_agentloop_cut06': the response ended before the call was done",
                MODEL_PROTOCOL_ERROR,
            )
        ]

    @pytest.mark.parametrize(
        ("code", "kind"),
        [(b'"invalid_prompt"', "bad_request"), (b'"server_error"', "server"), (b"null", "unknown")],
    )
    def test_error_event_kinds(self, code: bytes, kind: str) -> None:
        data = edited("openai/responses_error_event.sse", b'"rate_limit_exceeded"', code)
        assert failure(responses(data))[1].kind == kind

    def test_recorded_error_event_then_failed(self) -> None:
        _, error = failure(responses(body(R_ERROR), model="gpt-5-nano"))
        assert error.message == (
            "openai stream error: You exceeded your current quota, please check your plan and "
            "billing details. For more information on this error, read the docs: "
            "https://platform.openai.com/docs/guides/error-codes/api-errors. [insufficient_quota]"
        )

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
        _, error = failure(responses(data_sse([*lines[:-1], json.dumps(failed)])))
        assert "insufficient_quota" in error.message
        assert error.usage == Usage(9, 0)

    def test_error_event_without_a_failed_event(self) -> None:
        _, error = failure(responses(data_sse(chunk_lines(R_ERROR)[:-1])))
        assert "You exceeded your current quota" in error.message


class TestStatelessReasoning:
    def test_reasoning_round_trips_through_a_recorded_four_step_tool_loop(self) -> None:
        turns = responses_turns(R_REASONING)
        assert len(turns) == 4
        server = Server(*turns)
        done: list[tuple[float, float, str]] = []

        @tool
        def calculator(a: float, b: float, op: str) -> str:
            """A minimal calculator for basic arithmetic. Call it once per step."""
            done.append((a, b, op))
            return str(int(a + b if op == "add" else a * b))

        result, log = session(
            [UserMessage("u1", "Compute ((12 + 7) * 3) * 10 step by step.")],
            make("responses", server, model="gpt-5.1-codex-max", store=False),
            tools=[calculator],
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
        server = Server(body(R_TOOL))
        model = make("responses", server, store=False, include=["message.output_text.logprobs"])
        replies(model)
        assert server.body()["include"] == [
            "message.output_text.logprobs",
            "reasoning.encrypted_content",
        ]

    def test_encrypted_reasoning_is_asked_once(self) -> None:
        server = Server(body(R_TOOL))
        replies(make("responses", server, store=False, include=["reasoning.encrypted_content"]))
        assert server.body()["include"] == ["reasoning.encrypted_content"]

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
        model = make("responses", server, model="o4-mini")
        reasoning = ProviderBlock("openai", "reasoning", {"id": "rs_1", "summary": []})
        assert final(replies(model)).content == (reasoning, TextBlock("Hi"))
        history = (
            UserMessage("u1", "Hi"),
            AssistantMessage("m1", (ProviderBlock("openai", "reasoning", {}), TextBlock("Hi"))),
            UserMessage("u2", "Again"),
        )
        replies(model, ModelRequest("r", 2, history, ()))
        assert server.body()["input"][1] == {"type": "reasoning", "summary": []}


# =========================================================================== --model spec


class TestModelFromSpec:
    @pytest.mark.parametrize("spec", ["gpt-4.1-mini", "mistral:large", "openai:", "openai: "])
    def test_bad_specs(self, spec: str) -> None:
        with pytest.raises(ModelSpecError, match="openai:<model>"):
            model_from_spec(spec, environ={"OPENAI_API_KEY": "sk-test"})

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
