"""What only the Gemini adapter has: Vertex AI's streamed function-call arguments,
blocked prompts and finish messages, thought signatures on the way back, and
``google.rpc.RetryInfo``. The contract it shares with the other adapters is in
``test_conformance.py``."""

from __future__ import annotations

import base64
import json
import re
from typing import Any

import httpx2
import msgspec
import pytest
from google.genai import errors, types
from hypothesis import given, settings
from hypothesis import strategies as st

from agentloop import (
    MODEL_PROTOCOL_ERROR,
    AssistantMessage,
    ModelFailure,
    ModelRequest,
    ProviderBlock,
    TextBlock,
    ThinkingBlock,
    ToolCall,
    ToolResultMessage,
    UserMessage,
    tool,
)
from agentloop.models._common import END, Feed
from agentloop.models.gemini import _model_error, _replies, _retry_info, _Usage
from tests.helpers import examples

from .serve import (
    WEATHER,
    Server,
    body,
    chunk_lines,
    data_sse,
    failure,
    final,
    make,
    read,
    replays,
    replies,
    request,
    session,
)

STREAMED = "gemini/recorded/google-stream-tool-call-arguments.chunks.txt"
NESTED = "gemini/recorded/google-vertex-stream-tool-call-arguments-nested.1.chunks.txt"
NO_TERMINAL = (
    "gemini/recorded/google-stream-tool-call-array-arguments-missing-terminal-function-call"
    ".chunks.txt"
)
SEVERAL = "gemini/recorded/google-stream-no-args-tool-call.chunks.txt"


def vertex(*replies_: Any, streamed: bool = True, **options: Any) -> Any:
    """The adapter on Vertex AI (express mode), asked to stream call arguments."""
    if streamed:
        calling = types.FunctionCallingConfig(stream_function_call_arguments=True)
        options["tool_config"] = types.ToolConfig(function_calling_config=calling)
    return make("gemini", Server(*replies_), vertex=True, **options)


def gemini(*replies_: Any, **options: Any) -> Any:
    return make("gemini", Server(*replies_), **options)


def calls(items: list[Any]) -> list[tuple[str, dict[str, Any]]]:
    return [(b.name, b.arguments) for b in final(items).content if type(b) is ToolCall]


# =========================================================================== streamed arguments


class TestStreamedArguments:
    """Vertex AI with ``stream_function_call_arguments``: a call is a part
    ``{name, will_continue}``, parts of ``partial_args`` (a JSON path and a value;
    a string in pieces) and a last part without ``will_continue``. Each fragment
    used to become a call of its own (``('', {})``) and the run failed with "tool
    name is empty". Recorded by vercel/ai against Vertex AI."""

    def test_a_recorded_run_calls_each_tool_once_with_its_arguments(self) -> None:
        asked: list[str] = []

        @tool
        def getWeather(location: str) -> str:
            """Weather for a place."""
            asked.append(location)
            return "foggy"

        server = Server(body(STREAMED), body("gemini/recorded/google-text.chunks.txt"))
        calling = types.FunctionCallingConfig(stream_function_call_arguments=True)
        model = make(
            "gemini",
            server,
            vertex=True,
            tool_config=types.ToolConfig(function_calling_config=calling),
        )
        result, log = session([UserMessage("u1", "Weather?")], model, tools=[getWeather])
        assert result.status == "completed", result.error
        assert asked == ["Boston", "San Francisco"]
        assert "/publishers/google/models/gemini-test:streamGenerateContent" in str(
            server.requests[0].url
        )
        sent = server.body(0)["toolConfig"]["functionCallingConfig"]
        assert sent == {"stream_function_call_arguments": True}
        # The calls go back whole, the first one with its part's signature.
        model_turn = server.body(1)["contents"][1]
        assert [part["functionCall"]["args"] for part in model_turn["parts"]] == [
            {"location": "Boston"},
            {"location": "San Francisco"},
        ]
        assert "thoughtSignature" in model_turn["parts"][0]
        assert "thoughtSignature" not in model_turn["parts"][1]
        replays(log)

    def test_recorded_nested_objects_and_arrays(self) -> None:
        [(name, arguments)] = calls(replies(vertex(body(NESTED))))
        assert name == "cookRecipe"
        recipe = arguments["recipe"]
        assert recipe["name"] == "Lasagna"
        assert recipe["ingredients"][0] == {"amount": "16 oz", "name": "Lasagna noodles"}
        assert recipe["ingredients"][9] == {"amount": "1/2 tsp", "name": "Pepper"}
        assert len(recipe["ingredients"]) == 10
        # strings that came in pieces
        assert recipe["steps"][1] == (
            "Cook lasagna noodles according to package directions, drain and set aside."
        )
        assert recipe["steps"][4] == "In a 9x13 baking dish, spread a thin layer of meat sauce."
        assert len(recipe["steps"]) == 10

    def test_a_recorded_last_fragment_without_will_continue_ends_the_call(self) -> None:
        assert calls(replies(vertex(body(NO_TERMINAL)))) == [
            (
                "writeItems",
                {
                    "operations": [
                        {
                            "action": "add",
                            "description": "Fresh red apple",
                            "itemid": "apple_001",
                            "price": 0.5,
                        },
                        {
                            "action": "add",
                            "description": "Ripe yellow banana",
                            "itemid": "banana_001",
                            "price": 0.3,
                        },
                    ]
                },
            )
        ]

    def test_recorded_whole_and_streamed_calls_in_one_response(self) -> None:
        items = replies(vertex(body(SEVERAL)))
        assert calls(items) == [
            ("read_theme", {}),
            ("read_screen", {"id": "A"}),
            ("read_screen", {"id": "B"}),
            ("read_screen", {"id": "C"}),
        ]
        ids = [b.id for b in final(items).content if type(b) is ToolCall]
        assert ids == [f"_vr4aYiWEJnYodAPkujX0QM-{n}" for n in (1, 2, 3, 4)]
        assert type(final(items).content[0]) is ThinkingBlock

    def test_numbers_booleans_nulls_and_quoted_names(self) -> None:
        def part(*partial: dict[str, Any], more: bool = True, **call: Any) -> str:
            function_call: dict[str, Any] = dict(call)
            if partial:
                function_call["partialArgs"] = list(partial)
            if more:
                function_call["willContinue"] = True
            content = {"parts": [{"functionCall": function_call}], "role": "model"}
            return json.dumps(
                {"candidates": [{"content": content, "index": 0}], "responseId": "v1"}
            )

        lines = [
            part(name="f", args={"given": 1}),
            part({"jsonPath": "$.count", "numberValue": 3}),
            part({"jsonPath": "$.ratio", "numberValue": 0.25}),
            part({"jsonPath": "$.big", "numberValue": 1e300}),
            part({"jsonPath": "$.on", "boolValue": False}),
            part({"jsonPath": "$.none", "nullValue": "NULL_VALUE"}),
            part({"jsonPath": '$[\'odd key\']["x\\"y"]', "stringValue": "a"}),
            part({"jsonPath": "$['it\\'s']", "stringValue": "b", "willContinue": True}),
            part({"jsonPath": "$['it\\'s']", "stringValue": "c"}),
            part({"jsonPath": "$.nothing"}),
            part({"jsonPath": "$.list[2]", "stringValue": "third"}, more=False),
        ]
        [(name, arguments)] = calls(replies(vertex(data_sse(lines))))
        assert name == "f"
        assert arguments == {
            "given": 1,
            "count": 3,
            "ratio": 0.25,
            "big": 1e300,
            "on": False,
            "none": None,
            "odd key": {'x"y': "a"},
            "it's": "bc",
            "list": [None, None, "third"],
        }
        assert type(arguments["count"]) is int and type(arguments["big"]) is float

    @pytest.mark.parametrize(
        ("path", "problem"),
        [
            ("location", "the argument path 'location' does not start with $"),
            ("$", "the argument path '$' names no argument"),
            ("$.a..b", "cannot read the argument path '$.a..b'"),
            ("$['unclosed", 'cannot read the argument path "$[\'unclosed"'),
            ('$["\\x"]', "cannot read the argument path '$[\"\\\\x\"]'"),
            ("$.location[0]", "argument path '$.location[0]': no array for [0]"),
            ("$.location.city", "argument path '$.location.city': no object for 'city'"),
            ("$.l[100001]", "argument path '$.l[100001]': no array for [100001]"),
        ],
    )
    def test_a_path_that_cannot_be_followed_is_a_protocol_failure(
        self, path: str, problem: str
    ) -> None:
        lines = chunk_lines(STREAMED)
        extra = json.loads(lines[2])
        extra["candidates"][0]["content"]["parts"][0]["functionCall"]["partialArgs"] = [
            {"jsonPath": path, "stringValue": "x"}
        ]
        items = replies(vertex(data_sse([*lines[:2], json.dumps(extra), *lines[2:]])))
        assert len(items) == 1
        assert type(items[0]) is ModelFailure
        assert items[0].code == MODEL_PROTOCOL_ERROR
        assert items[0].message == (
            f"gemini response 'dqHOab6xGLzWodAPkPuViA4', function call 1 ('getWeather'): {problem}"
        )

    def test_a_stream_that_ends_in_the_middle_of_a_call_is_a_protocol_failure(self) -> None:
        lines = chunk_lines(STREAMED)[:2]
        assert replies(vertex(data_sse(lines))) == [
            ModelFailure(
                "request-001",
                "gemini response 'dqHOab6xGLzWodAPkPuViA4', function call 1 ('getWeather'): "
                "the stream ended before the call did",
                MODEL_PROTOCOL_ERROR,
            )
        ]

    def test_text_in_the_middle_of_a_call_is_a_protocol_failure(self) -> None:
        lines = chunk_lines(STREAMED)
        text = '{"candidates":[{"content":{"parts":[{"text":"Oops"}],"role":"model"},"index":0}]}'
        last = replies(vertex(data_sse([*lines[:2], text, *lines[2:]])))[-1]
        assert type(last) is ModelFailure
        assert last.message.endswith("('getWeather'): a part of another kind came first")

    def test_a_new_call_ends_the_one_still_open(self) -> None:
        # (the terminal fragment of the first call missing)
        lines = [line for i, line in enumerate(chunk_lines(STREAMED)) if i != 3]
        assert calls(replies(vertex(data_sse(lines)))) == [
            ("getWeather", {"location": "Boston"}),
            ("getWeather", {"location": "San Francisco"}),
        ]

    def test_an_empty_part_in_the_middle_of_a_call_is_ignored(self) -> None:
        lines = chunk_lines(STREAMED)
        empty = '{"candidates":[{"content":{"parts":[{"text":""}],"role":"model"},"index":0}]}'
        items = replies(vertex(data_sse([*lines[:2], empty, *lines[2:]])))
        assert calls(items)[0] == ("getWeather", {"location": "Boston"})

    def test_automatic_function_calling_is_off_unless_you_say(self) -> None:
        # google-genai refuses streamed arguments with its automatic function
        # calling on: the adapter turns it off (above, requests without tools
        # stream); turned on by the caller, the SDK says so.
        calling = types.AutomaticFunctionCallingConfig(disable=False)
        with pytest.raises(ValueError, match="not compatible with automatic function calling"):
            replies(vertex(body(STREAMED), automatic_function_calling=calling))

    @settings(max_examples=examples(80), deadline=None)
    @given(
        arguments=st.dictionaries(
            st.text(min_size=1, max_size=8),
            st.recursive(
                st.none()
                | st.booleans()
                | st.integers(-(2**53), 2**53)
                | st.floats(allow_nan=False, allow_infinity=False).filter(
                    lambda x: not x.is_integer()
                )
                | st.text(max_size=20),
                lambda inner: (
                    st.lists(inner, min_size=1, max_size=3)
                    | st.dictionaries(
                        st.text(min_size=1, max_size=8), inner, min_size=1, max_size=3
                    )
                ),
                max_leaves=12,
            ),
            min_size=1,
            max_size=5,
        ),
        data=st.data(),
    )
    def test_any_arguments_streamed_as_partial_args_come_back_whole(
        self, arguments: dict[str, Any], data: st.DataObject
    ) -> None:
        """Every leaf of the arguments as Vertex streams it (a JSON path, the value;
        strings cut in pieces, ``will_continue`` on all but the last), in any split
        into fragments: the same arguments."""
        partials: list[dict[str, Any]] = []
        for path, value in leaves(arguments, "$"):
            if isinstance(value, str):
                cuts = sorted(data.draw(st.sets(st.integers(0, len(value)), max_size=3)))
                pieces = [value[a:b] for a, b in zip([0, *cuts], [*cuts, len(value)], strict=True)]
                for index, piece in enumerate(pieces):
                    last = index == len(pieces) - 1
                    partials.append(
                        {
                            "jsonPath": path,
                            "stringValue": piece,
                            **({} if last else {"willContinue": True}),
                        }
                    )
            elif value is None:
                partials.append({"jsonPath": path, "nullValue": "NULL_VALUE"})
            elif isinstance(value, bool):
                partials.append({"jsonPath": path, "boolValue": value})
            else:
                partials.append({"jsonPath": path, "numberValue": value})
        per_part = data.draw(st.integers(1, 4), label="partial args per part")
        groups = [partials[i : i + per_part] for i in range(0, len(partials), per_part)]
        parts = [{"functionCall": {"name": "f", "willContinue": True}}]
        parts += [{"functionCall": {"partialArgs": g, "willContinue": True}} for g in groups]
        parts.append({"functionCall": {}})
        # (the parser on its own: the SDK's types read each line as it does on the wire)
        feed = Feed(_replies(request(), _Usage()), "request-001")
        items: list[Any] = []
        for part in parts:
            line = {"candidates": [{"content": {"parts": [part], "role": "model"}}]}
            items += feed.send(types.GenerateContentResponse.model_validate(line))
        items += feed.send(END)
        assert calls(items) == [("f", arguments)]


def leaves(value: Any, path: str) -> list[tuple[str, Any]]:
    """The JSON paths and values of ``value``'s leaves (names quoted when they are
    not identifiers, as RFC 9535 writes them)."""
    if isinstance(value, dict):
        found: list[tuple[str, Any]] = []
        for key, item in value.items():
            plain = re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key)
            step = f".{key}" if plain else f"[{json.dumps(key)}]"
            found += leaves(item, path + step)
        return found
    if isinstance(value, list):
        return [leaf for i, item in enumerate(value) for leaf in leaves(item, f"{path}[{i}]")]
    return [(path, value)]


# =========================================================================== retry info


class TestRetryInfo:
    def test_the_recorded_retry_delay(self) -> None:
        _, error = failure(gemini((429, read("gemini/recorded/google-429-retry-info.json"))))
        assert (error.kind, error.retry_after) == ("rate_limit", 34.4)
        assert error.message == (
            "gemini HTTP 429: You exceeded your current quota, please check your plan. "
            "[RESOURCE_EXHAUSTED]"
        )

    @pytest.mark.parametrize(
        ("details", "seconds"),
        [
            ([{"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "20s"}], 20.0),
            ([{"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "0.5s"}], 0.5),
            ([{"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "-1s"}], None),
            ([{"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "1m"}], None),
            ([{"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": 20}], None),
            ([{"@type": "type.googleapis.com/google.rpc.QuotaFailure"}, "junk"], None),
            ("not a list", None),
        ],
    )
    def test_a_retry_delay_is_a_duration_in_seconds(
        self, details: Any, seconds: float | None
    ) -> None:
        assert _retry_info({"error": {"code": 429, "details": details}}) == seconds

    def test_a_body_that_is_not_an_object_has_none(self) -> None:
        assert _retry_info(["not", "an", "object"]) is None
        assert _model_error(errors.APIError(429, ["x", "y"]), None).retry_after is None


# =========================================================================== stream


class TestStream:
    def test_finish_message_is_kept_when_the_sdk_has_it(self) -> None:
        chunk = types.GenerateContentResponse.model_validate_json(read("gemini/safety.chunks.txt"))
        feed = Feed(_replies(request(), _Usage()), "request-001")
        answer = final([*feed.send(chunk), *feed.send(END)])
        assert answer.stop_message == (
            "finish_reason SAFETY: The response was blocked by the safety filters."
        )

    def test_a_blocked_prompt(self) -> None:
        answer = final(replies(gemini(body("gemini/prompt_blocked.chunks.txt"))))
        assert answer.stop_reason == "error"
        assert answer.stop_message == "prompt blocked: PROHIBITED_CONTENT (The prompt was blocked.)"
        assert answer.id == "AgentloopGeminiBlocked4"

    def test_a_blocked_prompt_without_a_message(self) -> None:
        line = '{"promptFeedback":{"blockReason":"SAFETY"},"responseId":"b1"}'
        answer = final(replies(gemini(data_sse([line]))))
        assert answer.stop_message == "prompt blocked: SAFETY"

    def test_a_stream_without_finish_reason_or_id(self) -> None:
        line = '{"candidates":[{"content":{"parts":[{"text":"Hi"}],"role":"model"},"index":0}]}'
        answer = final(replies(gemini(data_sse([line]))))
        assert (answer.id, answer.stop_reason, answer.usage) == ("request-001", "stop", None)

    def test_a_candidate_without_content_and_other_finish_reasons(self) -> None:
        lines = [
            '{"candidates":[{"index":0}],"responseId":"e1"}',
            '{"candidates":[{"content":{"role":"model"},"finishReason":"RECITATION","index":0}]}',
        ]
        answer = final(replies(gemini(data_sse(lines))))
        assert answer.stop_message == "finish_reason RECITATION"

    def test_a_whole_call_stopped_by_max_tokens_is_length(self) -> None:
        # (the loop never runs the calls of a length response)
        data = body("gemini/thought_parallel_calls.chunks.txt").replace(b'"STOP"', b'"MAX_TOKENS"')
        assert final(replies(gemini(data))).stop_reason == "length"

    def test_a_recorded_signature_on_an_empty_part(self) -> None:
        answer = final(replies(gemini(body("gemini/recorded/google-text.chunks.txt"))))
        signature = answer.content[1]
        assert type(signature) is ProviderBlock
        assert signature.data["part"] == "empty"
        assert signature.data["thought_signature"].startswith("EqsFCqgFAb4+9vvtAF5n87")


# =========================================================================== request


class TestRequest:
    def test_history_becomes_contents(self) -> None:
        server = Server(body("gemini/max_tokens.chunks.txt"))
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
        replies(make("gemini", server), ModelRequest("request-002", 2, history, ()))
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

    def test_trailing_tool_results_and_no_tools(self) -> None:
        server = Server(body("gemini/max_tokens.chunks.txt"))
        history = (
            UserMessage("u1", "Weather?"),
            AssistantMessage("m1", (ToolCall("c1", "get_weather", {"city": "Paris"}),)),
            ToolResultMessage("r1", "c1", "get_weather", "sunny"),
        )
        replies(make("gemini", server), ModelRequest("request-002", 2, history, ()))
        sent = server.body()
        assert sent["contents"][-1]["role"] == "user"
        assert "tools" not in sent

    def test_config_passes_through(self) -> None:
        server = Server(body("gemini/max_tokens.chunks.txt"))
        config = types.ThinkingConfig(thinking_budget=128)
        replies(make("gemini", server, thinking_config=config), request(WEATHER))
        assert 128 in server.body()["generationConfig"]["thinkingConfig"].values()


# =========================================================================== errors


class TestErrors:
    def test_a_transport_error_without_words_is_named(self) -> None:
        _, error = failure(gemini(httpx2.ConnectError("")))
        assert error.message == "gemini connection: ConnectError"

    def test_an_error_without_a_status_code(self) -> None:
        made = _model_error(errors.APIError(0, {"error": {"message": ""}}), None)
        assert made.status_code is None
        assert made.message.startswith("gemini stream error: ")

    def test_headers_of_a_response_that_has_none_are_no_ask(self) -> None:
        class Bare:
            headers = None

        error = errors.APIError(429, {"error": {"code": 429, "message": "slow down"}}, Bare())  # type: ignore[arg-type]
        assert _model_error(error, None).retry_after is None

    def test_json_is_what_msgspec_reads(self) -> None:
        # (the recorded RetryInfo body parses as the SDK's APIError gets it)
        parsed = msgspec.json.decode(read("gemini/recorded/google-429-retry-info.json"))
        assert _retry_info(parsed) == 34.4
