"""Content beyond text (DESIGN §25): media blocks checked where they enter the loop,
the blob limits, tools that return blocks, and sessions with blocks replaying."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentloop import (
    LIMITS_HARD_CAPS,
    MAX_BLOB_BYTES,
    MAX_BLOBS_PER_STEP,
    AssistantMessage,
    AudioBlock,
    CallerProtocolError,
    DocumentBlock,
    EventLog,
    FollowUp,
    HookRegistry,
    ImageBlock,
    Limits,
    ModelChunk,
    ScriptedModel,
    ScriptedResponse,
    Steer,
    TextBlock,
    ToolResult,
    ToolResultMessage,
    UserMessage,
    agent_loop,
    content_text,
    encode_event,
    run,
    tool,
)
from agentloop._validation import (
    content_structure_problem,
    media_label,
    parts_problem,
)
from replay import fork, replay, state_at

from .helpers import ECHO, call, check_log, chunks, response

PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(64))
IMAGE = ImageBlock("image/png", data=PNG, name="chart.png")
PDF = DocumentBlock("application/pdf", url="https://example.com/report.pdf")
SMALL = Limits(blob_bytes=100, blobs_per_step=2)


def _encoded(log: Any) -> list[bytes]:
    return [encode_event(event) for event in log]


def finish(loop: Any, replies: list[Any]) -> Any:
    """Send ``replies`` to a started loop; the result it ends with."""
    for reply in replies:
        try:
            loop.send(reply)
        except StopIteration as stop:
            return stop.value
    raise AssertionError("the loop did not finish")


def _replays(loop: Any, hooks: HookRegistry | None = None) -> None:
    """The session replays byte for byte (every run here does)."""
    check_log(loop.log.events)
    assert _encoded(replay(loop.log, hooks=hooks).events) == _encoded(loop.log)


# --------------------------------------------------------------------------- the rules

RULES: dict[str, tuple[Any, str | None]] = {
    "inline image": (IMAGE, None),
    "image by https url": (ImageBlock("image/jpeg", url="https://example.com/a.jpg"), None),
    "image by data url": (ImageBlock("image/png", url="data:image/png;base64,iVBO"), None),
    "media type with parameters": (
        DocumentBlock("text/plain; charset=utf-8", data=b"hello"),
        None,
    ),
    "document of any type": (DocumentBlock("application/vnd.ms-excel", data=b"x"), None),
    "audio": (AudioBlock("audio/wav", data=b"RIFF"), None),
    "upper-case scheme and type": (ImageBlock("IMAGE/PNG", url="HTTPS://example.com/a"), None),
    "both data and url": (
        ImageBlock("image/png", data=PNG, url="https://example.com/a.png"),
        "x[0] (ImageBlock 'image/png'): exactly one of data and url must be set, got both",
    ),
    "neither data nor url": (
        ImageBlock("image/png"),
        "x[0] (ImageBlock 'image/png'): exactly one of data and url must be set, got neither",
    ),
    "empty media type": (
        ImageBlock("", data=PNG),
        "x[0] (ImageBlock ''): media_type '' is not a type/subtype media type",
    ),
    "media type without subtype": (
        ImageBlock("png", data=PNG),
        "x[0] (ImageBlock 'png'): media_type 'png' is not a type/subtype media type",
    ),
    "media type with a newline": (
        DocumentBlock("text/plain\nX-Evil: 1", data=b"x"),
        "x[0] (DocumentBlock 'text/plain\\nX-Evil: 1'): media_type 'text/plain\\nX-Evil: 1' "
        "is not a type/subtype media type",
    ),
    "image that says it is a pdf": (
        ImageBlock("application/pdf", data=PNG),
        "x[0] (ImageBlock 'application/pdf'): an ImageBlock's media_type must be image/*",
    ),
    "audio that says it is an image": (
        AudioBlock("image/png", data=PNG),
        "x[0] (AudioBlock 'image/png'): an AudioBlock's media_type must be audio/*",
    ),
    "empty data": (
        ImageBlock("image/png", data=b""),
        "x[0] (ImageBlock 'image/png'): data is empty (0 bytes)",
    ),
    "data over the limit": (
        ImageBlock("image/png", data=bytes(101)),
        "x[0] (ImageBlock 'image/png'): 101 bytes exceed Limits.blob_bytes (100)",
    ),
    "data url over the limit": (
        ImageBlock("image/png", url="data:," + "A" * 95),
        "x[0] (ImageBlock 'image/png'): a url of 101 characters exceeds Limits.blob_bytes (100)",
    ),
    "javascript url": (
        ImageBlock("image/png", url="javascript:alert(1)"),
        "x[0] (ImageBlock 'image/png'): url scheme 'javascript' is not one of http, https, data",
    ),
    "file url": (
        DocumentBlock("application/pdf", url="file:///etc/passwd"),
        "x[0] (DocumentBlock 'application/pdf'): url scheme 'file' is not one of http, https, data",
    ),
    "url without a scheme": (
        ImageBlock("image/png", url="example.com/a.png"),
        "x[0] (ImageBlock 'image/png'): url 'example.com/a.png' has no scheme "
        "(http, https or data)",
    ),
    "url with a space": (
        ImageBlock("image/png", url="https://example.com/a b.png"),
        "x[0] (ImageBlock 'image/png'): url holds whitespace or control characters",
    ),
    "data url without a comma": (
        ImageBlock("image/png", url="data:image/png;base64"),
        "x[0] (ImageBlock 'image/png'): data: url has no ',' before its data",
    ),
    "http url without a host": (
        ImageBlock("image/png", url="https:///a.png"),
        "x[0] (ImageBlock 'image/png'): url 'https:///a.png' has no host",
    ),
    "http url that is only a scheme": (
        ImageBlock("image/png", url="https://"),
        "x[0] (ImageBlock 'image/png'): url 'https://' has no host",
    ),
    "http url without slashes": (
        ImageBlock("image/png", url="http:example.com"),
        "x[0] (ImageBlock 'image/png'): url 'http:example.com' has no host",
    ),
}


@pytest.mark.parametrize(("block", "problem"), RULES.values(), ids=RULES.keys())
def test_each_rule_of_a_media_block_names_the_block(block: Any, problem: str | None) -> None:
    assert parts_problem((block,), "x", SMALL if "Limits." in str(problem) else Limits()) == (
        problem,
        1,
    )


def test_the_count_runs_over_a_step_and_names_the_block_past_it() -> None:
    content = (TextBlock("a"), IMAGE, TextBlock("b"), PDF)
    assert parts_problem(content, "x", SMALL) == (None, 2)
    assert parts_problem(content, "x", SMALL, 1) == (
        "x[3] (DocumentBlock 'application/pdf'): more than Limits.blobs_per_step (2) media "
        "blocks in one step",
        3,
    )


def test_a_long_media_type_is_left_out_of_the_label() -> None:
    block = ImageBlock("image/" + "x" * 200, data=PNG)
    assert media_label(block, "x") == "x (ImageBlock)"
    assert media_label(ImageBlock(7, data=PNG), "x") == "x (ImageBlock)"  # type: ignore[arg-type]


STRUCTURE: dict[str, tuple[Any, str | None]] = {
    "a str": ("hi", None),
    "a str with a lone surrogate": ("\ud800", "c is not valid Unicode"),
    "a list": ([TextBlock("a")], "c must be a str or a tuple of parts, got list"),
    "a message among the parts": (
        (UserMessage("u", "x"),),
        "c[0] must be a TextBlock, ImageBlock, AudioBlock or DocumentBlock, got UserMessage",
    ),
    "text of the wrong type": ((TextBlock(3),), "c[0].text must be a str"),  # type: ignore[arg-type]
    "data a str": (
        (ImageBlock("image/png", data="iVBO"),),  # type: ignore[arg-type]
        "c[0] (ImageBlock 'image/png'): data must be bytes or None, got str",
    ),
    "data a bytearray": (
        (ImageBlock("image/png", data=bytearray(b"x")),),  # type: ignore[arg-type]
        "c[0] (ImageBlock 'image/png'): data must be bytes or None, got bytearray",
    ),
    "media type not a str": (
        (ImageBlock(b"image/png", data=PNG),),  # type: ignore[arg-type]
        "c[0] (ImageBlock): media_type must be a str, got bytes",
    ),
    "url not a str": (
        (ImageBlock("image/png", url=3),),  # type: ignore[arg-type]
        "c[0] (ImageBlock 'image/png'): url must be a str or None, got int",
    ),
    "name not a str": (
        (ImageBlock("image/png", data=PNG, name=["a"]),),  # type: ignore[arg-type]
        "c[0] (ImageBlock 'image/png'): name must be a str or None, got list",
    ),
    "name with a lone surrogate": (
        (ImageBlock("image/png", data=PNG, name="a\udcff"),),
        "c[0] (ImageBlock 'image/png').name is not valid Unicode",
    ),
    "a non-ascii name": ((ImageBlock("image/png", data=PNG, name="graphique é"),), None),
}


@pytest.mark.parametrize(("content", "problem"), STRUCTURE.values(), ids=STRUCTURE.keys())
def test_structure_problems_name_the_field(content: Any, problem: str | None) -> None:
    found = content_structure_problem(content, "c")
    if problem is None:
        assert found is None
    else:
        assert found is not None and found.startswith(problem)


@given(
    kind=st.sampled_from([ImageBlock, AudioBlock, DocumentBlock]),
    media_type=st.text(max_size=30) | st.sampled_from(["image/png", "audio/wav", "a/b"]),
    data=st.none() | st.binary(max_size=40),
    url=st.none()
    | st.text(max_size=40)
    | st.builds(
        lambda s, r: s + r, st.sampled_from(["http://", "data:", "javascript:"]), st.text()
    ),
)
def test_any_block_gets_an_answer_and_an_accepted_one_keeps_the_rules(
    kind: Any, media_type: str, data: bytes | None, url: str | None
) -> None:
    block = kind(media_type, data=data, url=url)
    structural = content_structure_problem((block,), "c")
    if structural is not None:
        assert structural.startswith("c[0]")
        return
    problem, count = parts_problem((block,), "c", SMALL)
    assert count == 1
    if problem is not None:
        assert problem.startswith("c[0] (")
        return
    assert (data is None) != (url is None)
    assert "/" in media_type
    if data is not None:
        assert 0 < len(data) <= 100
    else:
        assert url is not None and url.lower().startswith(("http://", "https://", "data:"))


def test_the_limits_have_defaults_and_hard_caps() -> None:
    assert Limits().blob_bytes == MAX_BLOB_BYTES == 20 * 1024 * 1024
    assert Limits().blobs_per_step == MAX_BLOBS_PER_STEP == 32
    assert LIMITS_HARD_CAPS["blob_bytes"] == 2**30
    with pytest.raises(ValueError, match=r"Limits.blob_bytes must be an int from 1 to 1073741824"):
        Limits(blob_bytes=2**30 + 1)
    with pytest.raises(ValueError, match=r"Limits.blobs_per_step must be an int from 1 to 4096"):
        Limits(blobs_per_step=0)
    # At their defaults they are left out of session.start, as every limit is.
    loop = agent_loop([UserMessage("u1", "hi")], tools=[], limits=Limits(blob_bytes=MAX_BLOB_BYTES))
    next(loop)
    assert b"limits" not in encode_event(loop.log[0])


# --------------------------------------------------------------------------- the caller's blocks


def test_a_user_message_with_an_image_and_a_pdf_runs_and_replays() -> None:
    user = UserMessage("u1", (TextBlock("What is in these?"), IMAGE, PDF))
    loop = agent_loop([user], tools=[], started_at=1.0)
    request = next(loop)
    assert request.messages[0] is user  # kept as it is: frozen, its bytes immutable
    finish(loop, [response(request.id, "r1", "A chart and a report.")])
    _replays(loop)
    assert content_text(loop.log[1].message.content) == (
        "What is in these?[image image/png, 72 bytes]"
        "[document application/pdf: https://example.com/report.pdf]"
    )


INVALID: dict[str, tuple[Any, str]] = {
    "javascript url in a user message": (
        UserMessage("u1", (ImageBlock("image/png", url="javascript:alert(1)"),)),
        "messages[0].content[0] (ImageBlock 'image/png'): url scheme 'javascript' is not "
        "one of http, https, data",
    ),
    "too large in a tool result": (
        ToolResultMessage("t1", "c1", "echo", (ImageBlock("image/png", data=bytes(101)),)),
        "messages[1].content[0] (ImageBlock 'image/png'): 101 bytes exceed Limits.blob_bytes (100)",
    ),
    "too many in one message": (
        UserMessage("u1", (IMAGE, IMAGE, IMAGE)),
        "messages[0].content[2] (ImageBlock 'image/png'): more than Limits.blobs_per_step (2) "
        "media blocks in one step",
    ),
    "data not bytes, as a dict": (
        {"role": "user", "id": "u1", "content": [{"type": "image", "media_type": "image/png"}]},
        "messages[0].content[0] (ImageBlock 'image/png'): exactly one of data and url must be "
        "set, got neither",
    ),
    "an assistant image over the limit": (
        AssistantMessage("m1", (TextBlock("here"), ImageBlock("image/png", data=bytes(101)))),
        "messages[1].content[1] (ImageBlock 'image/png'): 101 bytes exceed Limits.blob_bytes (100)",
    ),
    "an assistant image of the wrong type": (
        AssistantMessage("m1", (ImageBlock("image/png", data="x"),)),  # type: ignore[arg-type]
        "messages[1].content[0] (ImageBlock 'image/png'): data must be bytes or None, got str",
    ),
    "audio in an assistant message": (
        AssistantMessage("m1", (AudioBlock("audio/wav", data=b"x"),)),  # type: ignore[arg-type]
        "messages[1].content[0] must be a TextBlock, ThinkingBlock, ToolCall, ProviderBlock "
        "or ImageBlock, got AudioBlock",
    ),
}


@pytest.mark.parametrize(("message", "problem"), INVALID.values(), ids=INVALID.keys())
def test_the_callers_bad_blocks_are_an_invalid_transcript(message: Any, problem: str) -> None:
    messages: list[Any] = [message]
    if type(message) is ToolResultMessage:
        messages = [
            UserMessage("u0", "go"),
            AssistantMessage("m0", (call("echo", "c1"),)),
            message,
        ]
        problem = problem.replace("messages[1]", "messages[2]")
    elif type(message) is AssistantMessage:
        messages = [UserMessage("u0", "go"), message]
    loop = agent_loop(messages, tools=[], limits=SMALL)
    with pytest.raises(StopIteration) as stop:
        next(loop)
    error = stop.value.value.error
    assert error.code == "INVALID_TRANSCRIPT"
    assert error.message == f"invalid transcript: {problem}"


def test_a_transcript_with_blocks_everywhere_is_kept() -> None:
    messages = [
        UserMessage("u0", (IMAGE,)),
        AssistantMessage("m0", (TextBlock("drawing"), IMAGE, call("echo", "c1"))),
        ToolResultMessage("t1", "c1", "echo", (TextBlock("done: "), PDF)),
    ]
    loop = agent_loop(messages, tools=[ECHO])
    request = next(loop)
    assert list(request.messages) == messages
    finish(loop, [response(request.id, "r1", "ok")])
    _replays(loop)


@pytest.mark.parametrize("kind", [Steer, FollowUp])
def test_a_queued_message_with_blocks_is_delivered(kind: Any) -> None:
    loop = agent_loop([UserMessage("u1", "hi")], tools=[], started_at=1.0)
    request = next(loop)
    loop.send(kind(UserMessage("s1", (TextBlock("and this:"), IMAGE))))
    request = loop.send(response(request.id, "r1", "ok"))
    assert request.messages[-1] == UserMessage("s1", (TextBlock("and this:"), IMAGE))
    finish(loop, [response(request.id, "r2", "seen")])
    _replays(loop)


@pytest.mark.parametrize("kind", [Steer, FollowUp])
@pytest.mark.parametrize(
    ("block", "problem"),
    [
        (
            ImageBlock("image/png", data=bytes(101)),
            "content[1] (ImageBlock 'image/png'): 101 bytes exceed Limits.blob_bytes (100)",
        ),
        (
            ImageBlock("image/png", data="iVBO"),  # type: ignore[arg-type]
            "content[1] (ImageBlock 'image/png'): data must be bytes or None, got str",
        ),
    ],
    ids=["too large", "data a str"],
)
def test_a_queued_message_with_a_bad_block_is_caller_misuse(
    kind: Any, block: Any, problem: str
) -> None:
    loop = agent_loop([UserMessage("u1", "hi")], tools=[], started_at=1.0, limits=SMALL)
    next(loop)
    with pytest.raises(CallerProtocolError) as raised:
        loop.send(kind(UserMessage("s1", (TextBlock("see"), block))))
    assert str(raised.value) == f"{kind.__name__}.message.{problem}"
    recorded = loop.log[-2].reply  # session.complete: a description, not the bytes
    assert type(recorded).__name__ == "UnrecognizedReply"
    assert b"AAAA" not in encode_event(loop.log[-2])
    _replays(loop)


# --------------------------------------------------------------------------- tools' blocks


def _tool_step(limits: Limits = SMALL, **options: Any) -> tuple[Any, Any]:
    loop = agent_loop([UserMessage("u1", "draw")], tools=[ECHO], limits=limits, **options)
    request = next(loop)
    effect = loop.send(
        response(request.id, "r1", call("echo", "c1"), call("echo", "c2"), call("echo", "c3"))
    )
    return loop, effect


def test_a_tool_result_of_parts_reaches_the_model_as_parts() -> None:
    loop, _ = _tool_step()
    parts = (TextBlock("the chart:"), IMAGE)
    loop.send(ToolResult("c1", parts))
    loop.send(ToolResult("c2", "plain"))
    request = loop.send(ToolResult("c3", (PDF,), is_error=True))
    assert request.messages[2].content == parts
    assert request.messages[4] == ToolResultMessage("tool-result-c3", "c3", "echo", (PDF,), True)
    finish(loop, [response(request.id, "r2", "drawn")])
    _replays(loop)


@pytest.mark.parametrize("parallel", [False, True], ids=["one at a time", "batched"])
def test_too_large_or_too_many_blocks_from_a_tool_are_an_error_the_model_sees(
    parallel: bool,
) -> None:
    loop, effect = _tool_step(parallel_tools=parallel)
    if parallel:
        assert type(effect).__name__ == "ToolBatch"
    loop.send(ToolResult("c1", (ImageBlock("image/png", data=bytes(101)),)))
    loop.send(ToolResult("c2", (IMAGE, IMAGE)))
    request = loop.send(ToolResult("c3", (IMAGE,)))  # the step's third block
    results = [m for m in request.messages if type(m) is ToolResultMessage]
    assert [r.is_error for r in results] == [True, False, True]
    assert results[0].content == (
        "the tool's result was refused: ToolResult.content[0] (ImageBlock 'image/png'): "
        "101 bytes exceed Limits.blob_bytes (100)"
    )
    assert results[2].content == (
        "the tool's result was refused: ToolResult.content[0] (ImageBlock 'image/png'): "
        "more than Limits.blobs_per_step (2) media blocks in one step"
    )
    # The count starts again in the next step.
    request = loop.send(response(request.id, "r2", call("echo", "c4")))
    request = loop.send(ToolResult("c4", (IMAGE, IMAGE)))
    assert request.messages[-1].is_error is False
    finish(loop, [response(request.id, "r3", "ok")])
    _replays(loop)


def test_a_tool_result_with_a_malformed_block_is_caller_misuse() -> None:
    loop, _ = _tool_step()
    with pytest.raises(CallerProtocolError, match=r"data must be bytes or None, got str"):
        loop.send(ToolResult("c1", (ImageBlock("image/png", data="iVBO"),)))  # type: ignore[arg-type]
    _replays(loop)


def _after(edit: Any, seen: list[Any] | None = None) -> HookRegistry:
    hooks = HookRegistry()

    def after_tool_call(payload: dict[str, Any]) -> None:
        if seen is not None:
            seen.append(payload["content"])
        edit(payload)

    hooks.on("after_tool_call", after_tool_call)
    return hooks


@pytest.mark.parametrize(
    ("edit", "expected"),
    [
        (lambda p: None, (TextBlock("x"), IMAGE)),
        (lambda p: p.update(content=[TextBlock("swapped")]), (TextBlock("swapped"),)),
        (lambda p: p.update(content="redacted"), "redacted"),
    ],
    ids=["kept", "a list of parts", "a str"],
)
def test_after_tool_call_sees_the_parts_and_may_replace_them(edit: Any, expected: Any) -> None:
    seen: list[Any] = []
    hooks = _after(edit, seen)
    loop = agent_loop([UserMessage("u1", "draw")], tools=[ECHO], hooks=hooks)
    request = next(loop)
    loop.send(response(request.id, "r1", call("echo", "c1")))
    request = loop.send(ToolResult("c1", (TextBlock("x"), IMAGE)))
    assert seen == [(TextBlock("x"), IMAGE)]
    assert request.messages[-1].content == expected
    finish(loop, [response(request.id, "r2", "ok")])
    _replays(loop, hooks)


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (7, "after_tool_call hook set 'content' to a non-str or 'is_error' to a non-bool"),
        ("\ud800", "after_tool_call hook's 'content' is not valid Unicode"),
        ((7,), "after_tool_call hook's 'content'[0] must be a TextBlock"),
        (
            (ImageBlock("image/png", url="javascript:x"),),
            "after_tool_call hook's 'content'[0] (ImageBlock 'image/png'): url scheme",
        ),
    ],
    ids=["an int", "a lone surrogate", "not a part", "a javascript url"],
)
def test_after_tool_call_setting_bad_content_is_a_hook_error(content: Any, problem: str) -> None:
    loop = agent_loop(
        [UserMessage("u1", "draw")],
        tools=[ECHO],
        hooks=_after(lambda p: p.update(content=content)),
    )
    request = next(loop)
    loop.send(response(request.id, "r1", call("echo", "c1")))
    with pytest.raises(StopIteration) as stop:
        loop.send(ToolResult("c1", "fine"))
    error = stop.value.value.error
    assert error.code == "HOOK_ERROR" and error.message.startswith(problem)


@tool
def chart(kind: str) -> Any:
    """Draw a chart."""
    if kind == "one":
        return IMAGE
    if kind == "many":
        return [TextBlock("a chart:"), IMAGE]
    if kind == "mixed":
        return [IMAGE, {"not": "a block"}]
    if kind == "empty":
        return []
    if kind == "huge":
        return ImageBlock("image/png", data=bytes(101))
    if kind == "bad":
        return ImageBlock("image/png", data="iVBO")
    return (TextBlock("\ud800"),)


@pytest.mark.parametrize(
    ("kind", "content", "is_error"),
    [
        ("one", (IMAGE,), False),
        ("many", (TextBlock("a chart:"), IMAGE), False),
        (
            "mixed",
            "the tool returned a list mixing blocks with other values: item [1] is a dict "
            "(return only blocks, with TextBlock for text, or only JSON values)",
            True,
        ),
        ("empty", "[]", False),
        (
            "huge",
            "the tool's result was refused: the tool's result[0] (ImageBlock 'image/png'): "
            "101 bytes exceed Limits.blob_bytes (100)",
            True,
        ),
        (
            "bad",
            "the tool's result was refused: the tool's result[0] (ImageBlock 'image/png'): "
            "data must be bytes or None, got str",
            True,
        ),
        (
            "surrogate",
            "the tool's result was refused: the tool's result[0].text is not valid Unicode: "
            "lone surrogate '\\ud800' at index 0 (encode it first, e.g. with "
            "errors='backslashreplace')",
            True,
        ),
    ],
)
def test_run_turns_what_a_tool_returns_into_content(
    kind: str, content: Any, is_error: bool
) -> None:
    model = ScriptedModel(
        [
            ScriptedResponse.tool_calls("r1", call("chart", "c1", kind=kind)),
            ScriptedResponse.text("r2", "done"),
        ]
    )
    log = EventLog()
    result = run([UserMessage("u1", "draw")], model=model, tools=[chart], log=log, limits=SMALL)
    assert result.status == "completed"
    message = result.messages[2]
    assert (message.content, message.is_error) == (content, is_error)
    assert b"AAAAAAAAAAAA" not in b"".join(_encoded(log))  # the refused bytes are not recorded
    assert _encoded(replay(log).events) == _encoded(log)


def test_arun_turns_a_tools_blocks_into_content() -> None:
    import asyncio

    from agentloop import arun

    model = ScriptedModel(
        [
            ScriptedResponse.tool_calls("r1", call("chart", "c1", kind="many")),
            ScriptedResponse.text("r2", "done"),
        ]
    )
    result = asyncio.run(arun([UserMessage("u1", "draw")], model=model, tools=[chart]))
    assert result.messages[2].content == (TextBlock("a chart:"), IMAGE)


def test_run_batches_turn_a_tools_blocks_into_content() -> None:
    model = ScriptedModel(
        [
            ScriptedResponse.tool_calls(
                "r1", call("chart", "c1", kind="one"), call("chart", "c2", kind="many")
            ),
            ScriptedResponse.text("r2", "done"),
        ]
    )
    result = run([UserMessage("u1", "draw")], model=model, tools=[chart], parallel_tools=True)
    assert [m.content for m in result.messages[2:4]] == [(IMAGE,), (TextBlock("a chart:"), IMAGE)]


# --------------------------------------------------------------------------- the model's blocks


def test_a_model_may_answer_with_an_image_streamed_or_not() -> None:
    loop = agent_loop([UserMessage("u1", "draw a cat")], tools=[])
    request = next(loop)
    for chunk in chunks(request.id, "Here:", IMAGE):
        loop.send(chunk)
    result = finish(loop, [response(request.id, "r1", "Here:", IMAGE)])
    assert result.messages[-1].content == (TextBlock("Here:"), IMAGE)
    _replays(loop)


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (
            (ImageBlock("image/png", data=bytes(101)),),
            "step 1: content[0] (ImageBlock 'image/png'): 101 bytes exceed Limits.blob_bytes (100)",
        ),
        (
            (IMAGE, IMAGE, IMAGE),
            "step 1: content[2] (ImageBlock 'image/png'): more than Limits.blobs_per_step (2) "
            "media blocks in one step",
        ),
    ],
    ids=["too large", "too many"],
)
def test_a_models_bad_image_is_a_protocol_error(content: Any, problem: str) -> None:
    loop = agent_loop([UserMessage("u1", "draw")], tools=[], limits=SMALL)
    request = next(loop)
    result = finish(loop, [response(request.id, "r1", *content)])
    assert (result.error.code, result.error.message) == ("MODEL_PROTOCOL_ERROR", problem)
    _replays(loop)


def test_a_streamed_bad_image_is_a_protocol_error_at_its_chunk() -> None:
    loop = agent_loop([UserMessage("u1", "draw")], tools=[], limits=SMALL)
    request = next(loop)
    result = finish(loop, [ModelChunk(request.id, ImageBlock("image/png", url="javascript:x"))])
    assert result.error.code == "MODEL_PROTOCOL_ERROR"
    assert result.error.message == (
        "step 1, chunk 1 (ImageBlock 'image/png'): url scheme 'javascript' is not one of "
        "http, https, data"
    )
    _replays(loop)


def test_audio_from_a_model_is_a_protocol_error_through_run() -> None:
    from agentloop import FunctionModel
    from agentloop._protocol import ModelResponse

    def answer(request: Any) -> Any:
        return ModelResponse(request.id, "r1", (AudioBlock("audio/wav", data=b"x"),), "stop")

    result = run([UserMessage("u1", "sing")], model=FunctionModel(answer), tools=[])
    assert result.error is not None and result.error.code == "MODEL_PROTOCOL_ERROR"
    assert "got AudioBlock" in result.error.message


# --------------------------------------------------------------------------- replay tools


def test_fork_and_state_at_work_on_a_session_with_blocks() -> None:
    loop, _ = _tool_step(limits=Limits())
    loop.send(ToolResult("c1", (IMAGE,)))
    loop.send(ToolResult("c2", (PDF,)))
    request = loop.send(ToolResult("c3", "x"))
    finish(loop, [response(request.id, "r2", "ok")])
    events = list(loop.log)
    at = next(i for i, e in enumerate(events) if e.type == "tool.result")
    state = state_at(events, at)
    assert state.event.message.content == (IMAGE,)
    forked, effect = fork(events, at)
    assert type(effect).__name__ == "ToolRequest" and effect.call.id == "c2"
    request = forked.send(ToolResult("c2", (IMAGE, IMAGE)))
    request = forked.send(ToolResult("c3", "x"))
    assert request.messages[2].content == (IMAGE,)
    assert request.messages[3].content == (IMAGE, IMAGE)
    assert msgspec.json.decode(encode_event(events[at]))["message"]["content"][0]["type"] == "image"


# ----------------------------------------------------------------------- how replay shows blocks


def _session_with_blocks() -> EventLog:
    model = ScriptedModel(
        [
            ScriptedResponse.tool_calls("r1", call("chart", "c1", kind="many")),
            ScriptedResponse.text("r2", "done"),
        ]
    )
    log = EventLog()
    run([UserMessage("u1", (TextBlock("see"), IMAGE, PDF))], model=model, tools=[chart], log=log)
    return log


def test_summaries_name_a_block_by_kind_type_hash_and_size_never_its_bytes() -> None:
    from replay._diff import blob_text, summarize

    log = _session_with_blocks()
    summaries = [summarize(event) for event in log]
    blob = blob_text(PNG)
    assert blob == f"<72 bytes sha256:{hashlib.sha256(PNG).hexdigest()[:12]}>"
    assert summaries[1] == (
        f"user u1: text 'see', image image/png {blob} 'chart.png', "
        "document application/pdf 'https://example.com/report.pdf'"
    )
    result = next(s for e, s in zip(log, summaries, strict=True) if e.type == "tool.result")
    assert result == f"c1 chart: text 'a chart:', image image/png {blob} 'chart.png'"
    draft = next(s for e, s in zip(log, summaries, strict=True) if e.type == "plan.draft")
    assert "response r1" in draft
    shown = "\n".join(summaries)
    assert "iVBOR" not in shown and "\\x89PNG" not in shown


def test_other_summaries_of_blocks() -> None:
    from agentloop import MessageQueuedEvent, ModelChunkEvent
    from replay._diff import _reply, short, summarize

    audio = AudioBlock("audio/wav", data=b"RIFF", name=None)
    chunk = ModelChunkEvent(sequence=3, at=None, step=1, chunk=ModelChunk("q", IMAGE))
    assert summarize(chunk).startswith("image image/png <72 bytes")
    queued = MessageQueuedEvent(
        sequence=3, at=None, step=1, mode="steer", reply=Steer(UserMessage("s1", (audio,)))
    )
    assert summarize(queued) == "steer s1: audio audio/wav <4 bytes sha256:" + (
        hashlib.sha256(b"RIFF").hexdigest()[:12] + ">"
    )
    assert _reply(ToolResult("c1", (PDF,), is_error=True)) == (
        "result for c1 (error): document application/pdf 'https://example.com/report.pdf'"
    )
    assert short(PNG) == f"<72 bytes sha256:{hashlib.sha256(PNG).hexdigest()[:12]}>"
    loop = agent_loop(
        [
            UserMessage("u0", "plain text"),
            AssistantMessage("m0", (call("echo", "c1"),)),
            ToolResultMessage("t1", "c1", "echo", (PDF,), is_error=True),
        ],
        tools=[ECHO],
    )
    next(loop)
    assert [summarize(event) for event in loop.log[1:4:2]] == [
        "user u0: 'plain text'",
        "tool result c1 (error): document application/pdf 'https://example.com/report.pdf'",
    ]
    assert "sha256:" in short((IMAGE,), 500)


def test_a_divergence_shows_a_differing_blob_by_hash_and_size() -> None:
    from replay import ReplayDivergence

    events = list(_session_with_blocks())
    at = next(i for i, e in enumerate(events) if e.type == "tool.result")
    other = ImageBlock("image/png", data=PNG[:-1] + b"!", name="chart.png")
    message = msgspec.structs.replace(events[at].message, content=(TextBlock("a chart:"), other))
    events[at] = msgspec.structs.replace(events[at], message=message)
    with pytest.raises(ReplayDivergence) as raised:
        replay(events)
    report = str(raised.value)
    old, new = (hashlib.sha256(data).hexdigest()[:12] for data in (other.data, PNG))
    assert f"<72 bytes sha256:{old}> -> <72 bytes sha256:{new}>" in report
    assert "\\x89" not in report and "iVBOR" not in report


def test_a_snapshot_writes_a_blob_as_its_hash_and_size() -> None:
    from replay.syrupy import to_text

    text = to_text(_session_with_blocks())
    digest = hashlib.sha256(PNG).hexdigest()
    assert f'"data":"sha256:{digest} (72 bytes)"' in text
    assert '"media_type":"image/png"' in text
    assert "iVBOR" not in text


def test_replay_show_prints_one_line_per_block_message(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from replay import write_log
    from replay.__main__ import main

    path = tmp_path / "blocks.jsonl"
    write_log(path, _session_with_blocks())
    assert main(["show", "--no-color", str(path)]) == 0
    out = capsys.readouterr().out
    user = next(line for line in out.splitlines() if "message.accepted" in line)
    assert user.endswith(
        "user u1: text 'see', image image/png "
        f"<72 bytes sha256:{hashlib.sha256(PNG).hexdigest()[:12]}> 'chart.png', "
        "document application/pdf '..."
    )


def test_the_image_example_runs_offline_and_prints_what_it_says() -> None:
    import subprocess
    import sys

    example = Path(__file__).resolve().parent.parent / "docs" / "examples" / "image_agent.py"
    done = subprocess.run(
        [sys.executable, str(example)], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "I drew it: chart: Q3[image image/png, 72 bytes]"
    assert lines[1].startswith("message.accepted user u1: text 'Chart Q3 from these.', image")
    assert "'screenshot.png', document application/pdf <15 bytes sha256:" in lines[1]
    assert lines[2].startswith("tool.result c1 chart: text 'chart: Q3', image image/png <72")
