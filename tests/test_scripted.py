"""``ScriptedModel`` / ``ScriptedResponse``: deterministic streaming for tests."""

from __future__ import annotations

import pytest

from agentloop import (
    MAX_CHUNKS_PER_STEP,
    Model,
    ModelChunk,
    ModelRequest,
    ModelResponse,
    ScriptedModel,
    ScriptedResponse,
    TextBlock,
    ThinkingBlock,
    ToolCall,
    Usage,
    UserMessage,
)


def request(number: int = 1) -> ModelRequest:
    return ModelRequest(f"request-{number:03d}", number, (UserMessage("u1", "hi"),), ())


ADD = ToolCall("c1", "add", {"left": 1, "right": 2})


def test_constructors():
    assert ScriptedResponse.text("r1", "hello", Usage(3, 4)) == ScriptedResponse(
        "r1", (TextBlock("hello"),), "stop", Usage(3, 4)
    )
    assert ScriptedResponse.tool_calls("r2", ADD) == ScriptedResponse("r2", (ADD,), "tool_call")
    assert ScriptedResponse.tool_calls("r3", ADD, ADD, text="calling", usage=Usage(1, 1)) == (
        ScriptedResponse("r3", (TextBlock("calling"), ADD, ADD), "tool_call", Usage(1, 1))
    )


def test_content_list_is_frozen_to_a_tuple():
    response = ScriptedResponse("r1", [TextBlock("a")], "stop")  # type: ignore[arg-type]
    assert response.content == (TextBlock("a"),)
    hash(response)


def test_streams_text_in_up_to_three_chunks_then_the_response():
    model = ScriptedModel([ScriptedResponse.text("r1", "Hello, world", Usage(5, 2))])
    assert isinstance(model, Model)
    items = list(model.stream(request()))
    assert items == [
        ModelChunk("request-001", TextBlock("Hell")),
        ModelChunk("request-001", TextBlock("o, w")),
        ModelChunk("request-001", TextBlock("orld")),
        ModelResponse("request-001", "r1", (TextBlock("Hello, world"),), "stop", Usage(5, 2)),
    ]
    assert all(item.at is None for item in items)


@pytest.mark.parametrize(
    ("text", "pieces"),
    [
        ("", [""]),
        ("a", ["a"]),
        ("ab", ["a", "b"]),
        ("abcd", ["ab", "c", "d"]),
        ("héllo wörld ✓", ["héllo", " wör", "ld ✓"]),
    ],
)
def test_text_split_is_exact_and_deterministic(text, pieces):
    items = list(ScriptedModel([ScriptedResponse.text("r1", text)]).stream(request()))
    assert [item.block.text for item in items[:-1]] == pieces
    assert "".join(pieces) == text


def test_tool_calls_and_thinking_are_one_chunk_each():
    thinking = ThinkingBlock("hmm", signature="sig")
    response = ScriptedResponse("r1", (thinking, TextBlock("ok"), ADD), "tool_call")
    items = list(ScriptedModel([response]).stream(request()))
    assert [item.block for item in items[:-1]] == [thinking, TextBlock("o"), TextBlock("k"), ADD]
    assert items[-1] == ModelResponse("request-001", "r1", response.content, "tool_call")


def test_chunk_count_never_exceeds_the_limit():
    # Many text blocks: split only while the total stays within the limit.
    many = tuple(
        block for i in range(400) for block in (TextBlock(f"text {i}"), ToolCall(f"c{i}", "t", {}))
    )
    items = list(ScriptedModel([ScriptedResponse("r1", many, "tool_call")]).stream(request()))
    assert len(items) - 1 == 800 <= MAX_CHUNKS_PER_STEP
    # More blocks than chunks allowed: stream none; the response alone is judged.
    too_many = tuple(ToolCall(f"c{i}", "t", {}) for i in range(MAX_CHUNKS_PER_STEP + 1))
    items = list(ScriptedModel([ScriptedResponse("r1", too_many, "tool_call")]).stream(request()))
    assert len(items) == 1 and type(items[0]) is ModelResponse


def test_records_requests_and_counts_calls():
    model = ScriptedModel([ScriptedResponse.text("r1", "one"), ScriptedResponse.text("r2", "two")])
    first, second = request(1), request(2)
    stream = model.stream(first)  # recorded on the call, not lazily
    assert model.requests == [first] and model.call_count == 1
    assert list(stream)[-1].id == "r1"
    assert list(model.stream(second))[-1] == ModelResponse(
        "request-002", "r2", (TextBlock("two"),), "stop"
    )
    assert model.requests == [first, second] and model.call_count == 2
    model.assert_complete()
    assert repr(model) == "<ScriptedModel 2/2 used>"


def test_running_out_raises_assertion_error():
    model = ScriptedModel([ScriptedResponse.text("r1", "only")])
    list(model.stream(request(1)))
    with pytest.raises(AssertionError, match=r"no scripted response left for request-002 \(all 1"):
        model.stream(request(2))
    assert model.call_count == 2


def test_assert_complete_reports_unused_responses():
    model = ScriptedModel(
        [
            ScriptedResponse.text("r1", "a"),
            ScriptedResponse.text("r2", "b"),
            ScriptedResponse.text("r3", "c"),
        ]
    )
    list(model.stream(request()))
    assert model.remaining == 2
    with pytest.raises(
        AssertionError, match=r"2 of 3 scripted responses were not used \(next: 'r2'\)"
    ):
        model.assert_complete()


def test_rejects_non_responses():
    with pytest.raises(TypeError, match=r"responses\[1\]: expected ScriptedResponse"):
        ScriptedModel([ScriptedResponse.text("r1", "a"), "b"])  # type: ignore[list-item]


def test_a_fresh_script_skips_the_responses_a_resumed_transcript_holds():
    from agentloop import AssistantMessage, ModelRequest, TextBlock, UserMessage

    script = [ScriptedResponse.text("r1", "one"), ScriptedResponse.text("r2", "two")]
    held = (UserMessage("u1", "hi"), AssistantMessage("message-r1", (TextBlock("one"),)))
    model = ScriptedModel(script)
    *_, response = model.stream(ModelRequest("request-002", 2, held, ()))
    assert (response.id, model.skipped, model.remaining) == ("r2", 1, 0)
    model.assert_complete()
    # Only as the first request, and only the same message: the same id with other
    # content is the script's own answer (the loop then refuses the id, as before).
    other = (UserMessage("u1", "hi"), AssistantMessage("message-r1", (TextBlock("uno"),)))
    model = ScriptedModel(script)
    *_, response = model.stream(ModelRequest("request-002", 2, other, ()))
    assert (response.id, model.skipped) == ("r1", 0)
    *_, response = model.stream(ModelRequest("request-003", 3, held, ()))
    assert (response.id, model.skipped) == ("r2", 0)


def test_a_script_the_transcript_holds_entirely_has_nothing_left():
    from agentloop import AssistantMessage, ModelRequest, TextBlock, UserMessage

    held = (UserMessage("u1", "hi"), AssistantMessage("message-r1", (TextBlock("one"),)))
    model = ScriptedModel([ScriptedResponse.text("r1", "one")])
    with pytest.raises(AssertionError, match="no scripted response left"):
        model.stream(ModelRequest("request-002", 2, held, ()))
    assert model.skipped == 1
