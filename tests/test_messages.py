"""The message IR helpers: validate_transcript, close_dangling_calls, text_from_assistant."""

from __future__ import annotations

from typing import Any

import pytest

from agentloop import (
    AssistantMessage,
    RunResult,
    TextBlock,
    ThinkingBlock,
    ToolCall,
    ToolResultMessage,
    UserMessage,
    close_dangling_calls,
    text_from_assistant,
    validate_transcript,
)

USER = UserMessage("u1", "Add 1 and 2, then echo it.")


def _asks(message_id: str, *call_ids: str, name: str = "add") -> AssistantMessage:
    return AssistantMessage(message_id, tuple(ToolCall(c, name, {}) for c in call_ids))


def _answer(call_id: str, name: str = "add", content: str = "3") -> ToolResultMessage:
    return ToolResultMessage(f"r-{call_id}", call_id, name, content)


# --------------------------------------------------------------------------- validate_transcript

# Each broken rule, with the error message it must give (index and culprit included).
INVALID = {
    # Not a message at all
    "a str": ([USER, "hello"], "messages[1]: expected UserMessage, AssistantMessage or "),
    "a dict": ([{"role": "user", "id": "u", "content": "x"}], "got dict"),
    # Ids
    "duplicate message id": (
        [USER, UserMessage("u1", "again")],
        "messages[1]: duplicate message id 'u1'",
    ),
    "duplicate call id in one message": (
        [USER, _asks("a1", "c1", "c1")],
        "messages[1]: duplicate tool call id 'c1'",
    ),
    "call id reused after its answer": (
        [USER, _asks("a1", "c1"), _answer("c1"), _asks("a2", "c1")],
        "messages[3]: duplicate tool call id 'c1'",
    ),
    # Results
    "orphan result": (
        [USER, _answer("c9")],
        "messages[1]: tool result for 'c9' has no earlier call",
    ),
    "result before its call": (
        [USER, _answer("c1"), _asks("a1", "c1")],
        "messages[1]: tool result for 'c1' has no earlier call",
    ),
    "answered twice": (
        [USER, _asks("a1", "c1"), _answer("c1"), ToolResultMessage("r2", "c1", "add", "3")],
        "messages[3]: tool result for 'c1' is answered twice",
    ),
    "wrong tool name": (
        [USER, _asks("a1", "c1"), _answer("c1", name="echo")],
        "messages[2]: tool result for 'c1' names tool 'echo', but the call was to 'add'",
    ),
    "unanswered calls": (
        [USER, _asks("a1", "c1", "c2")],
        "tool call(s) without a result: 'c1', 'c2'",
    ),
}


@pytest.mark.parametrize(("messages", "message"), INVALID.values(), ids=INVALID.keys())
def test_validate_transcript_names_the_rule_and_the_index(messages: Any, message: str) -> None:
    with pytest.raises(ValueError) as info:
        validate_transcript(messages)
    assert message in str(info.value)


def test_validate_transcript_accepts_complete_transcripts() -> None:
    validate_transcript([])
    validate_transcript(
        [
            USER,
            AssistantMessage(
                "a1", (ThinkingBlock("plan"), TextBlock("ok"), ToolCall("c1", "add", {}))
            ),
            _answer("c1"),
            _asks("a2", "c2", "c3", name="echo"),
            _answer("c3", name="echo"),
            _answer("c2", name="echo"),  # a batch may be answered in any order
            AssistantMessage("a3", (TextBlock("3"),)),
        ]
    )
    validate_transcript(iter([USER]))  # any iterable


# --------------------------------------------------------------------------- close_dangling_calls


def test_close_dangling_calls_puts_each_owed_result_right_after_its_batch() -> None:
    messages = [
        USER,
        _asks("a1", "c1", "c2"),
        _answer("c1"),  # c2 was interrupted
        UserMessage("u2", "never mind"),
        _asks("a2", "c3"),  # interrupted too, at the very end
    ]
    closed = close_dangling_calls(messages, content="cancelled by user")
    assert closed == (
        USER,
        messages[1],
        messages[2],
        ToolResultMessage("tool-result-c2", "c2", "add", "cancelled by user", is_error=True),
        messages[3],
        messages[4],
        ToolResultMessage("tool-result-c3", "c3", "add", "cancelled by user", is_error=True),
    )
    validate_transcript(closed)
    assert close_dangling_calls(closed) == closed  # nothing left to close
    assert messages[1] is closed[1]  # existing messages are kept, not copied


def test_close_dangling_calls_default_content_is_interrupted() -> None:
    assert close_dangling_calls([USER, _asks("a1", "c1")])[-1] == ToolResultMessage(
        "tool-result-c1", "c1", "add", "interrupted", is_error=True
    )


# --------------------------------------------------------------------------- text


def test_text_from_assistant_joins_text_blocks_only() -> None:
    message = AssistantMessage(
        "a1",
        (ThinkingBlock("hmm"), TextBlock("It is "), ToolCall("c1", "add", {}), TextBlock("3.")),
    )
    assert text_from_assistant(message) == "It is 3."


def test_run_result_last_assistant_is_the_latest_assistant_message() -> None:
    first, last = _asks("a1", "c1"), AssistantMessage("a2", (TextBlock("3"),))

    def result(*messages: Any) -> RunResult:
        return RunResult(
            status="completed", final_text="3", messages=messages, steps=1, max_steps=8
        )

    assert result(USER, first, _answer("c1"), last).last_assistant is last
    assert result(USER, first, _answer("c1")).last_assistant is first
    assert result(USER).last_assistant is None


def test_content_text_names_each_media_block_in_one_line() -> None:
    from agentloop import AudioBlock, DocumentBlock, ImageBlock, content_text

    assert content_text("plain") == "plain"
    parts = (
        TextBlock("see "),
        ImageBlock("image/png", data=b"x" * 108),
        AudioBlock("audio/wav", url="https://example.com/a.wav"),
        DocumentBlock("application/pdf", data=b""),
    )
    assert content_text(parts) == (
        "see [image image/png, 108 bytes][audio audio/wav: https://example.com/a.wav]"
        "[document application/pdf, 0 bytes]"
    )
