"""What only the Anthropic adapter has: thinking with signatures and redacted
thinking sent back, the Messages request mapping, its stream edge cases and the
thinking tokens of ``output_tokens_details``. The contract it shares with the other
adapters is in ``test_conformance.py``."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest

from agentloop import (
    MODEL_PROTOCOL_ERROR,
    AssistantMessage,
    ModelChunk,
    ModelFailure,
    ModelRequest,
    ProviderBlock,
    TextBlock,
    ThinkingBlock,
    ToolCall,
    ToolResultMessage,
    Usage,
    UserMessage,
    tool,
)
from agentloop.models import FallbackModel, RetryPolicy

from .serve import (
    Server,
    anthropic_sse,
    body,
    chunk_lines,
    chunks,
    events,
    failure,
    final,
    get_weather,
    make,
    read,
    replays,
    replies,
    request,
    session,
)

A_TEXT = "anthropic/recorded/anthropic-text.chunks.txt"
A_NO_ARGS = "anthropic/recorded/anthropic-tool-no-args.chunks.txt"
A_REDACTED = "anthropic/recorded/test_anthropic_model_thinking_part_redacted_stream.yaml"
A_REASONING = "anthropic/recorded/anthropic-claude-sonnet-5-reasoning-generic.chunks.txt"
A_SUMMARIZED = "anthropic/recorded/anthropic-claude-sonnet-5-reasoning-summarized.chunks.txt"

REDACTED_DATA = (
    "EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIwxtE3rAFBa8cr3qpPkNRj2YfWXGmKDxH4m"
    "PnZ5sQ7vB5URj4pxSaDnlEG"
)
PARIS = ToolCall("toolu_01WeatherParis00000003", "get_weather", {"city": "Paris"})
CLOCK = ToolCall("toolu_01ClockParis0000000003", "get_time", {"timezone": "Europe/Paris"})


def model(*replies_: Any, **options: Any) -> Any:
    return make("anthropic", Server(*replies_), **options)


# =========================================================================== thinking tokens


class TestThinkingTokens:
    """``usage.output_tokens_details.thinking_tokens`` (message_delta's, cumulative) is
    ``Usage.reasoning_tokens``: the part of ``output_tokens`` spent thinking, as
    docs/providers.md defines it for every adapter. Recorded by vercel/ai."""

    @pytest.mark.parametrize(
        ("name", "output"), [(A_REASONING, 496), (A_SUMMARIZED, 373)], ids=["generic", "summarized"]
    )
    def test_the_steps_usage_has_them(self, name: str, output: int) -> None:
        items = replies(model(body(name)))
        assert final(items).usage == Usage(47, output, reasoning_tokens=62)
        assert [type(b).__name__ for b in final(items).content] == [
            "ThinkingBlock",
            "ProviderBlock",
            "TextBlock",
        ]

    def test_the_run_total_counts_every_steps(self) -> None:
        # A thinking tool call (hand-made: no thinking_tokens), then the recorded answer.
        server = Server(body("anthropic/thinking_tool_use.sse"), body(A_REASONING))
        result, log = session(
            [UserMessage("u1", "Weather in Paris?")],
            make("anthropic", server, thinking={"type": "enabled", "budget_tokens": 1024}),
            tools=[get_weather],
        )
        assert result.status == "completed"
        assert result.usage == Usage(
            210 + 1200 + 3400 + 47,
            87 + 496,
            cache_read_tokens=3400,
            cache_write_tokens=1200,
            reasoning_tokens=62,
        )
        replays(log)

    def test_an_error_after_them_keeps_them(self) -> None:
        lines = chunk_lines(A_REASONING)
        delta = json.loads(lines[-2])
        assert delta["type"] == "message_delta"
        delta["delta"] = {"stop_reason": None}  # the usage so far, no stop yet
        error = '{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}'
        _, failed = failure(model(anthropic_sse([*lines[:-2], json.dumps(delta), error])))
        assert failed.usage == Usage(47, 496, reasoning_tokens=62)


# =========================================================================== stream


class TestStream:
    def test_recorded_text(self) -> None:
        server = Server(body(A_TEXT))
        items = replies(make("anthropic", server), request(system="Be kind.", text="Hi"))
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
            "model": "claude-test",
            "max_tokens": 1024,
            "messages": [{"role": "user", "content": "Hi"}],
            "system": "Be kind.",
            "stream": True,
        }

    def test_tool_use_without_input_deltas_has_empty_arguments(self) -> None:
        items = replies(model(body("anthropic/no_input_tool_use.sse")))
        assert chunks(items)[0] == ToolCall("toolu_01NoInput00000000009", "get_time", {})

    def test_a_stream_without_stop_reason_is_a_protocol_failure(self) -> None:
        assert replies(model(body("anthropic/no_stop_reason.sse"))) == [
            ModelChunk("request-001", TextBlock("Hel")),
            ModelFailure(
                "request-001",
                "anthropic message 'msg_01AgentloopCut00000000012': "
                "the stream ended without a stop_reason",
                MODEL_PROTOCOL_ERROR,
            ),
        ]

    def test_unmapped_blocks_are_skipped_and_redacted_thinking_is_kept(self) -> None:
        items = replies(model(body("anthropic/unmapped_blocks.sse")))
        redacted = ProviderBlock("anthropic", "redacted_thinking", {"data": REDACTED_DATA})
        assert chunks(items) == [redacted, TextBlock("Sunny, 18°C.")]
        answer = final(items)
        assert (answer.id, answer.content) == (
            "msg_01AgentloopUnmapped000013",
            (redacted, TextBlock("Sunny, 18°C.")),
        )

    def test_malformed_input_followed_by_more_content_fails(self) -> None:
        bad = events(body("anthropic/malformed_tool_input.sse"))
        text = events(body("anthropic/text.sse"))[1:-2]  # a text block at index 0 ...
        text = [e.replace(b'"index":0', b'"index":1') for e in text]  # ... moved to index 1
        items = replies(model(b"".join([*bad[:-2], *text, *bad[-2:]])))
        assert len(items) == 1
        assert type(items[0]) is ModelFailure
        assert "not valid JSON" in items[0].message

    def test_an_unclosed_tool_use_at_max_tokens_is_kept_without_arguments(self) -> None:
        parts = events(body("anthropic/max_tokens_in_tool_use.sse"))
        items = replies(model(b"".join(e for e in parts if b"block_stop" not in e)))
        assert chunks(items) == [ToolCall("toolu_01Cut0ff0000000000006", "get_weather", {})]
        assert final(items).stop_reason == "length"

    def test_an_unclosed_tool_use_otherwise_fails(self) -> None:
        parts = events(body("anthropic/tool_use.sse"))
        data = b"".join(e for e in parts if b'"content_block_stop","index":1' not in e)
        last = replies(model(data))[-1]
        assert type(last) is ModelFailure
        assert last.message == (
            "anthropic message 'msg_01AgentloopTool0000000002', content block 1: "
            "the message ended before the block stopped"
        )

    def test_a_tool_use_without_id_fails(self) -> None:
        data = body("anthropic/tool_use.sse").replace(b'"toolu_01WeatherParis00000002"', b'""')
        last = replies(model(data))[-1]
        assert type(last) is ModelFailure
        assert last.message.endswith("content block 1: the tool_use block has no id")

    def test_an_unknown_event_type_is_skipped(self) -> None:
        # An event type the Messages API adds later reaches the adapter through the
        # SDK (which yields any event it does not know as a generic object).
        text = events(body("anthropic/text.sse"))
        future = (
            b"event: content_block_future\n"
            b'data: {"type":"content_block_future","index":0,"note":"added later"}\n\n'
        )
        expected = replies(model(b"".join(text)))
        assert replies(model(b"".join([*text[:2], future, *text[2:]]))) == expected
        assert len(expected) >= 2  # chunks, then the response

    def test_thinking_without_a_signature(self) -> None:
        parts = events(body("anthropic/thinking.sse"))
        data = b"".join(e for e in parts if b"signature_delta" not in e)
        assert final(replies(model(data))).content == (
            ThinkingBlock("The user greets me; greet back."),
            TextBlock("Hello!"),
        )

    @pytest.mark.parametrize("max_tokens", [0, -1, 1.5, True])
    def test_max_tokens_must_be_a_positive_int(self, max_tokens: Any) -> None:
        with pytest.raises(ValueError, match="max_tokens"):
            model(max_tokens=max_tokens)


# =========================================================================== request


class TestRequest:
    def test_transcript_with_tool_use_results_and_thinking(self) -> None:
        server = Server(body("anthropic/final_answer.sse"))
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
        replies(make("anthropic", server), ModelRequest("request-001", 1, messages, (), None))
        assert server.body()["messages"] == [
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

    def test_other_providers_blocks_are_dropped_with_a_debug_line(
        self, caplog: pytest.LogCaptureFixture
    ) -> None:
        server = Server(body(A_TEXT))
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
            replies(make("anthropic", server), ModelRequest("request-002", 2, history, ()))
        assert server.body()["messages"][1] == {
            "role": "assistant",
            "content": [{"type": "text", "text": "Hello"}],
        }
        assert "not sending a 'reasoning' block of provider 'openai'" in caplog.text


# =========================================================================== recorded loops


class TestRecordedLoops:
    def test_a_tool_call_without_arguments_then_the_answer(self) -> None:
        calls: list[str] = []

        @tool
        def updateIssueList() -> str:
            """Update the issue list."""
            calls.append("called")
            return "updated"

        server = Server(body(A_NO_ARGS), body(A_TEXT))
        result, log = session(
            [UserMessage("u1", "Update the issues")],
            make("anthropic", server),
            tools=[updateIssueList],
        )
        assert result.status == "completed"
        assert calls == ["called"]
        assert result.messages[1] == AssistantMessage(
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

    def test_redacted_thinking_is_kept_and_sent_back(self) -> None:
        server = Server(body(A_REDACTED), body(A_TEXT))
        adapter = make("anthropic", server, thinking={"type": "enabled", "budget_tokens": 1024})
        items = replies(adapter, request(text="Hi", system=None))
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
        replies(adapter, ModelRequest("request-002", 2, history, ()))
        sent = server.body()["messages"][1]["content"]
        assert sent[:2] == [
            {"type": "redacted_thinking", "data": redacted[0].data["data"]},
            {"type": "redacted_thinking", "data": redacted[1].data["data"]},
        ]
        assert sent[2]["type"] == "text"

    def test_a_thinking_tool_loop_sends_signed_thinking_back(self) -> None:
        # Hand-made step 1 (no public recording of thinking + tool_use as a stream).
        server = Server(body("anthropic/thinking_tool_use.sse"), body(A_TEXT))
        adapter = make("anthropic", server, thinking={"type": "enabled", "budget_tokens": 1024})
        result, log = session(
            [UserMessage("u1", "Weather in Paris?")], adapter, tools=[get_weather]
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


# =========================================================================== errors


class TestErrors:
    def test_a_recorded_400(self) -> None:
        _, error = failure(
            model((400, read("anthropic/recorded/anthropic-issue-17366-error.json")))
        )
        assert (error.kind, error.status_code) == ("bad_request", 400)
        assert error.message.startswith(
            "anthropic HTTP 400: messages.2.content.0: unexpected `tool_use_id` found"
        )
        assert error.message.endswith("[invalid_request_error]")

    def test_an_error_without_a_json_body_keeps_the_text(self) -> None:
        _, error = failure(model((502, b"<html><body>Bad gateway</body></html>")))
        assert "Bad gateway" in error.message

    def test_an_error_before_message_start_has_no_usage(self) -> None:
        data = (
            b"event: error\n"
            b'data: {"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}\n\n'
        )
        _, error = failure(model(data))
        assert error.kind == "server"
        assert error.usage is None

    def test_overloaded_and_an_error_event_before_any_content_are_retried(self) -> None:
        slept: list[float] = []
        adapter = model(
            (529, read("anthropic/error_529.json")),
            body("anthropic/overloaded_midstream.sse"),
            body("anthropic/text.sse"),
            retry=RetryPolicy(3, 2.0),
            sleep=slept.append,
        )
        assert final(replies(adapter)).stop_reason == "stop"
        assert slept == [2.0, 4.0]
        assert [(a.kind, a.status_code, a.retried) for a in adapter.attempts] == [
            ("server", 529, True),
            ("server", None, True),
            (None, None, False),
        ]

    def test_a_fallback_stream_runs_to_its_end(self) -> None:
        server = Server((500, read("anthropic/error_500.json")), body(A_TEXT))
        primary, backup = make("anthropic", server), make("anthropic", server)
        assert final(replies(FallbackModel(primary, backup))).attempts[0].status_code == 500


# =========================================================================== compaction

A_COMPACTION = "anthropic/recorded/anthropic-compaction.1.chunks.txt"


def _compaction_events() -> list[dict[str, Any]]:
    return [json.loads(line) for line in chunk_lines(A_COMPACTION)]


class TestProviderCompaction:
    """The server compacted the context (``compact_20260112``): the ``compaction``
    block round-trips as ``ProviderBlock("anthropic", "compaction")`` and the
    compaction's own usage (``usage.iterations``) counts. Recorded by vercel/ai."""

    def test_the_recorded_block_is_kept_verbatim_and_its_usage_counted(self) -> None:
        events_ = _compaction_events()
        summary = "".join(
            e["delta"]["content"]
            for e in events_
            if e["type"] == "content_block_delta" and e["delta"]["type"] == "compaction_delta"
        )
        iterations = events_[-2]["usage"]["iterations"]
        assert [i["type"] for i in iterations] == ["compaction", "message"]
        answer = final(replies(model(body(A_COMPACTION))))
        assert answer.content[0] == ProviderBlock("anthropic", "compaction", {"content": summary})
        assert summary.startswith("## Summary of Conversation")
        assert type(answer.content[1]) is TextBlock
        assert answer.content[1].text.startswith("Based on the conversation history")
        assert len(answer.content) == 2  # the summary is not text the caller sees
        # top level (612 in, 2819 out) + the compaction's call (60385 in, 522 out)
        assert answer.usage == Usage(612 + 60385, 2819 + 522)

    def test_the_block_is_sent_back_in_place_and_the_session_replays(self) -> None:
        server = Server(body(A_COMPACTION), body(A_TEXT))
        adapter = make("anthropic", server)
        first, log = session([UserMessage("u1", "Summarise the algorithms.")], adapter)
        assert first.status == "completed"
        block = first.messages[1].content[0]
        assert type(block) is ProviderBlock and block.kind == "compaction"
        replays(log)
        history = [*first.messages, UserMessage("u2", "And graphs?")]
        second, log2 = session(history, adapter)
        assert second.status == "completed"
        sent = server.body(1)["messages"]
        assert [m["role"] for m in sent] == ["user", "assistant", "user"]
        assert sent[1]["content"][0] == {"type": "compaction", **block.data}
        assert sent[1]["content"][1]["type"] == "text"
        assert first.usage == Usage(612 + 60385, 2819 + 522)
        replays(log2)

    @pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
    def test_fragments_signature_and_null_content(self, asynchronous: bool) -> None:
        # Hand-made in the SDK's beta types' fields (BetaCompactionBlock,
        # BetaCompactionContentBlockDelta): no public recording streams an
        # encrypted_content in pieces, a signature or a failed (null) summary.
        lines = [
            {
                "type": "message_start",
                "message": {
                    "id": "msg_AgentloopCompaction01",
                    "type": "message",
                    "role": "assistant",
                    "model": "claude-agentloop",
                    "content": [],
                    "usage": {"input_tokens": 50, "output_tokens": 1},
                },
            },
            {
                "type": "content_block_start",
                "index": 0,
                "content_block": {"type": "compaction", "content": None, "signature": "sig-"},
            },
            {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "compaction_delta", "encrypted_content": "AAA"},
            },
            {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "compaction_delta", "encrypted_content": "BBB"},
            },
            {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "signature_delta", "signature": "Agentloop"},
            },
            {"type": "content_block_stop", "index": 0},
            {
                "type": "content_block_start",
                "index": 1,
                "content_block": {"type": "compaction", "content": None},
            },
            {"type": "content_block_stop", "index": 1},
            {
                "type": "content_block_delta",
                "index": 7,
                "delta": {"type": "compaction_delta", "content": "(no open block)"},
            },
            {
                "type": "message_delta",
                "delta": {"stop_reason": "compaction"},
                "usage": {
                    "output_tokens": 9,
                    "iterations": [
                        {
                            "type": "compaction",
                            "input_tokens": 40,
                            "output_tokens": 8,
                            "cache_read_input_tokens": 5,
                            "cache_creation_input_tokens": None,
                        }
                    ],
                },
            },
            {"type": "message_stop"},
        ]
        sse = anthropic_sse([json.dumps(line) for line in lines])
        adapter = make("anthropic", Server(sse), asynchronous)
        answer = final(replies(adapter))
        assert answer.content == (
            ProviderBlock(
                "anthropic",
                "compaction",
                {"content": None, "signature": "sig-Agentloop", "encrypted_content": "AAABBB"},
            ),
            ProviderBlock("anthropic", "compaction", {"content": None}),
        )
        # pause_after_compaction's stop: not a turn the loop can continue from
        assert answer.stop_reason == "error"
        assert answer.stop_message == "stop_reason 'compaction'"
        assert answer.usage == Usage(50 + 45, 9 + 8, cache_read_tokens=5)

    def test_iterations_as_the_sdks_beta_models(self) -> None:
        from anthropic.types.beta import BetaMessageDeltaUsage

        from agentloop.models.anthropic import _Usage

        usage = BetaMessageDeltaUsage.model_validate(
            {
                "input_tokens": 10,
                "output_tokens": 3,
                "cache_creation_input_tokens": 0,
                "cache_read_input_tokens": 0,
                "iterations": [
                    {
                        "type": "compaction",
                        "input_tokens": 100,
                        "output_tokens": 7,
                        "cache_read_input_tokens": 0,
                        "cache_creation_input_tokens": 20,
                    },
                    {
                        "type": "message",
                        "input_tokens": 10,
                        "output_tokens": 3,
                        "cache_read_input_tokens": 0,
                        "cache_creation_input_tokens": 0,
                    },
                ],
            }
        )
        counted = _Usage()
        counted.update(usage)
        assert counted.value() == Usage(130, 10, cache_write_tokens=20)
