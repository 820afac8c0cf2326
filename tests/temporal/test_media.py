"""Media blocks through Temporal (DESIGN §25, issue 22), on a real dev server.

A tool's blocks (a chart), a user's image, and a model's generated image travel
inline in the activity payloads; the workflow's log is byte for byte the log
:func:`agentloop.run` writes with the same model and tools, and the log of the
loop driven by hand with the recorded replies. The history holds a block about
twice (where it came in, and the next model request), never once per step; a
block too large for one Temporal payload is refused where it comes in, with a
message naming its size.
"""

from __future__ import annotations

import base64
import hashlib
from typing import Any

import pytest

from agentloop import (
    AudioBlock,
    DocumentBlock,
    FunctionModel,
    ImageBlock,
    Limits,
    ModelRequest,
    Pause,
    ScriptedResponse,
    TextBlock,
    ToolCall,
    ToolResultMessage,
    UserMessage,
    tool,
)
from agentloop.temporal import MAX_PAYLOAD_BYTES, start_session
from agentloop.temporal._activities import _tool_output
from agentloop.temporal._wire import ToolOutput, oversized

from .conftest import Temporal
from .helpers import drive_by_hand, encoded, run_in_process, serving, session_id, wait_for


def noise(size: int, seed: str = "chart") -> bytes:
    """``size`` bytes that do not compress (so sizes are what they say)."""
    out = bytearray()
    block = seed.encode()
    while len(out) < size:
        block = hashlib.sha256(block).digest()
        out += block
    return bytes(out[:size])


PNG = b"\x89PNG\r\n\x1a\n" + noise(40_000)


def describe(content: Any) -> str:
    """What a model "sees" in a message's content: text, and each block by hash."""
    if type(content) is str:
        return content
    seen = []
    for part in content:
        if type(part) is TextBlock:
            seen.append(part.text)
        elif part.data is None:
            seen.append(f"{type(part).__name__}({part.url})")
        else:
            digest = hashlib.sha256(part.data).hexdigest()[:12]
            seen.append(f"{type(part).__name__}({part.media_type}, {len(part.data)}, {digest})")
    return " + ".join(seen)


def answer(request: ModelRequest) -> ScriptedResponse:
    """``chart N``: ask for ``chart`` once, then ``add`` N times, then say what it saw;
    ``draw``: answer with an image; otherwise describe the last message."""
    script = (request.system or "look").split()
    count = len(request.messages)
    last = request.messages[-1]
    results = [m for m in request.messages if type(m) is ToolResultMessage]
    if script[0] == "chart" and not results:
        return ScriptedResponse.tool_calls(f"r{count}", ToolCall("c-chart", "chart", {"n": 3}))
    if script[0] == "chart" and len(results) <= int(script[1]):
        call = ToolCall(f"c{count}", "add", {"left": count, "right": 1})
        return ScriptedResponse.tool_calls(f"r{count}", call)
    if script[0] == "draw":
        image = ImageBlock("image/png", data=PNG, name="drawn.png")
        return ScriptedResponse(f"r{count}", (TextBlock("here:"), image), "stop")
    if script[0] == "guard" and not results:
        return ScriptedResponse.tool_calls(f"r{count}", ToolCall("c-guard", "guarded", {}))
    if script[0] == "guard":
        return ScriptedResponse.text(f"r{count}", f"saw {describe(last.content)}")
    seen = describe(results[0].content if results else last.content)
    return ScriptedResponse.text(f"r{count}", f"saw {seen}")


MODEL = FunctionModel(answer)


@tool
def chart(n: int) -> Any:
    """Draw a chart of ``n`` bars."""
    return [TextBlock(f"{n} bars"), ImageBlock("image/png", data=PNG, name="chart.png")]


@tool
def add(left: int, right: int) -> int:
    """Add two integers."""
    return left + right


@tool
def big(size: int) -> Any:
    """An image of ``size`` bytes."""
    return ImageBlock("image/png", data=noise(size, "big"))


@tool(requires_approval=True)
def guarded() -> str:
    """Something a human approves first."""
    return "done"


TOOLS = [chart, add, big, guarded]


async def finish(start: Any, messages: Any, **options: Any) -> tuple[Any, list[Any], Any]:
    session = await start(messages, **options)
    result = await session.result()
    return result, await session.log(), session


def test_a_tools_blocks_pass_through_and_the_log_is_runs(temporal: Temporal) -> None:
    async def scenario() -> Any:
        async with serving(temporal, model=MODEL, tools=TOOLS) as start:
            result, log, session = await finish(
                start, [UserMessage("u1", "plot it")], system="chart 3"
            )
            history = await session.handle.fetch_history()
            return result, log, history

    result, log, history = temporal.run(scenario())
    assert result.status == "completed"
    digest = hashlib.sha256(PNG).hexdigest()[:12]
    assert result.final_text == f"saw 3 bars + ImageBlock(image/png, {len(PNG)}, {digest})"
    (first, *_) = [m for m in result.messages if type(m) is ToolResultMessage]
    assert first.content == tuple(chart.fn(3))
    assert drive_by_hand(log) == encoded(log)
    in_process_result, in_process = run_in_process(log, model=MODEL, tools=TOOLS)
    assert in_process == encoded(log)
    assert in_process_result == result
    # By its base64 (the JSON of every payload holds it so): in the tool activity's
    # result, the next model activity's input, and the workflow's result; the
    # three model requests after the first carry only their new messages.
    inline = base64.b64encode(PNG)
    assert sum(event.SerializeToString().count(inline) for event in history.events) == 3


def test_a_users_image_and_document_and_a_models_image(temporal: Temporal) -> None:
    pdf = DocumentBlock("application/pdf", data=b"%PDF-1.7 " + noise(3_000, "pdf"), name="a.pdf")
    wav = AudioBlock("audio/wav", data=b"RIFF" + noise(500, "wav"))
    photo = ImageBlock("image/jpeg", data=b"\xff\xd8\xff" + noise(2_000, "jpg"))
    url = ImageBlock("image/png", url="https://example.com/a.png")
    question = [UserMessage("u1", (TextBlock("what is this?"), photo, pdf, wav, url))]

    async def scenario() -> Any:
        async with serving(temporal, model=MODEL, tools=TOOLS) as start:
            looked = await finish(start, question, system="look")
            drawn = await finish(start, question, system="draw")
            return looked, drawn

    (looked, looked_log, _), (drawn, drawn_log, _) = temporal.run(scenario())
    assert looked.final_text.startswith("saw what is this? + ImageBlock(image/jpeg, 2003, ")
    assert looked.final_text.endswith(" + ImageBlock(https://example.com/a.png)")
    assert drawn.messages[-1].content[1] == ImageBlock("image/png", data=PNG, name="drawn.png")
    for result, log in ((looked, looked_log), (drawn, drawn_log)):
        assert result.status == "completed"
        assert drive_by_hand(log) == encoded(log)
        in_process_result, in_process = run_in_process(log, model=MODEL, tools=TOOLS)
        assert in_process == encoded(log)
        assert in_process_result == result


def test_a_steered_image_reaches_the_model(temporal: Temporal) -> None:
    photo = ImageBlock("image/png", data=PNG)
    message = UserMessage("u2", (TextBlock("and this"), photo))

    async def scenario() -> Any:
        async with serving(temporal, model=MODEL, tools=TOOLS) as start:
            session = await start([UserMessage("u1", "check it")], system="guard")
            await wait_for(session, Pause)
            await session.steer(message)
            huge = UserMessage("u3", (ImageBlock("image/png", data=noise(MAX_PAYLOAD_BYTES)),))
            with pytest.raises(ValueError, match=r"the steer message is .* nothing was sent"):
                await session.steer(huge)
            with pytest.raises(ValueError, match=r"the follow_up message is .* nothing was sent"):
                await session.follow_up(huge)
            await session.resume({"approved": True})
            result = await session.result()
            return result, await session.log()

    result, log = temporal.run(scenario())
    digest = hashlib.sha256(PNG).hexdigest()[:12]
    assert result.final_text == f"saw and this + ImageBlock(image/png, {len(PNG)}, {digest})"
    assert drive_by_hand(log) == encoded(log)


def test_a_tools_blocks_break_the_sessions_limits_as_in_process(temporal: Temporal) -> None:
    async def scenario() -> Any:
        async with serving(temporal, model=MODEL, tools=TOOLS) as start:
            return await finish(
                start, [UserMessage("u1", "plot")], system="chart 0", limits=Limits(blob_bytes=1000)
            )

    result, log, _ = temporal.run(scenario())
    (refused,) = [m for m in result.messages if type(m) is ToolResultMessage]
    assert refused.is_error
    assert refused.content.startswith("the tool's result was refused: ")
    assert "1000" in refused.content.replace(",", "")
    in_process_result, in_process = run_in_process(log, model=MODEL, tools=TOOLS)
    assert in_process == encoded(log)
    assert in_process_result == result


def test_media_up_to_one_payload_pass_and_larger_are_refused_where_they_come_in(
    temporal: Temporal,
) -> None:
    fits = MAX_PAYLOAD_BYTES * 3 // 4 - 10_000  # base64: 4/3 of it, and the JSON around
    too_big = MAX_PAYLOAD_BYTES * 3 // 4 + 10_000

    def model(request: ModelRequest) -> ScriptedResponse:
        if len(request.messages) == 1:
            size = fits if request.system == "fits" else too_big
            return ScriptedResponse.tool_calls("r1", ToolCall("c1", "big", {"size": size}))
        last = request.messages[-1]
        return ScriptedResponse.text("r2", describe(last.content)[:200])

    async def scenario() -> Any:
        async with serving(temporal, model=FunctionModel(model), tools=TOOLS) as start:
            small = await finish(start, [UserMessage("u1", "go")], system="fits")
            large = await finish(start, [UserMessage("u1", "go")], system="large")
            huge = [UserMessage("u1", (ImageBlock("image/png", data=noise(too_big)),))]
            with pytest.raises(ValueError, match=r"the session's input is .* nothing was started"):
                await start_session(temporal.client, session_id(), huge, task_queue="unused")
            return small, large

    (small, _, _), (large, large_log, _) = temporal.run(scenario(), timeout=300)
    assert small.status == "completed"
    assert small.final_text.startswith(f"ImageBlock(image/png, {fits}, ")
    assert large.status == "completed"
    (refused,) = [m for m in large.messages if type(m) is ToolResultMessage]
    assert refused.is_error
    assert refused.content.startswith("the tool's result was refused: the tool's result is ")
    assert "pass large media by url= instead of data=" in refused.content
    assert drive_by_hand(large_log) == encoded(large_log)


# --------------------------------------------------------------------------- in process


def test_the_tool_activitys_result_is_checked_as_the_driver_checks_it() -> None:
    image = ImageBlock("image/png", data=PNG)
    assert ToolOutput((image,), False) == _decode(_tool_output((image,), False))
    assert _decode(_tool_output("caf\udce9", False)) == ToolOutput("caf\\udce9", False)
    refused = _decode(_tool_output(("not a part",), False))  # type: ignore[arg-type]
    assert refused.is_error
    assert refused.content.startswith("the tool's result was refused: the tool's result[0] must")
    assert oversized(b"x" * MAX_PAYLOAD_BYTES, "it") is None
    message = oversized(b"x" * (MAX_PAYLOAD_BYTES + 1), "it")
    assert message is not None and message.startswith("it is 2,000,001 bytes as JSON")


def _decode(data: bytes) -> ToolOutput:
    import msgspec

    return msgspec.json.decode(data, type=ToolOutput)


def test_the_log_query_pages_hold_each_blob_once_and_read_back_exactly() -> None:
    from agentloop import EventLog, decode_event, encode_event, run
    from agentloop.temporal._wire import inflate, log_page

    log = EventLog()
    photo = UserMessage("u1", (TextBlock("see"), ImageBlock("image/png", data=PNG)))
    run([photo], model=MODEL, tools=TOOLS, system="chart 2", log=log)
    events = list(log)
    inline = base64.b64encode(PNG)
    whole = log_page(events, MAX_PAYLOAD_BYTES)
    assert whole.count(inline) == 1  # the user's image and the chart are the same bytes
    assert inflate(_items(whole), {}, decode_event) == events
    for budget in (1, 60_000, 200_000):
        read: list[Any] = []
        blobs: dict[str, bytes] = {}
        while len(read) < len(events):
            page = log_page(events[len(read) :], budget)
            assert len(page) <= max(budget, 2 * len(inline))
            read += inflate(_items(page), blobs, decode_event)
        assert [encode_event(e) for e in read] == [encode_event(e) for e in events]


def _items(page: bytes) -> list[bytes]:
    import msgspec

    return [bytes(item) for item in msgspec.json.decode(page, type=list[msgspec.Raw])]


def test_a_request_an_answer_or_a_result_too_large_for_a_payload_says_so(
    temporal: Temporal,
) -> None:
    from temporalio.client import WorkflowFailureError

    from agentloop import ModelResponse, RunFinishedEvent

    half = MAX_PAYLOAD_BYTES * 3 // 4 - 10_000  # one fits; two in one request do not

    def model(request: ModelRequest) -> Any:
        if request.system == "draw big":
            image = ImageBlock("image/png", data=noise(MAX_PAYLOAD_BYTES, "drawn"))
            return [ModelResponse(request.id, "r1", (image,), "stop")]
        if len(request.messages) == 1:
            calls = [ToolCall(f"c{i}", "big", {"size": half}) for i in (1, 2)]
            return [ModelResponse(request.id, "r1", tuple(calls), "tool_call")]
        return [ModelResponse(request.id, "r2", (TextBlock("never"),), "stop")]

    class Model:
        def stream(self, request: ModelRequest) -> Any:
            return model(request)

    async def scenario() -> Any:
        async with serving(temporal, model=Model(), tools=TOOLS) as start:
            drawn = await finish(start, [UserMessage("u1", "go")], system="draw big")
            session = await start([UserMessage("u1", "go")], system="two")
            with pytest.raises(WorkflowFailureError) as failure:
                await session.result()
            return drawn, failure.value.cause, await session.log()

    (drawn, _, _), cause, log = temporal.run(scenario(), timeout=300)
    assert drawn.status == "failed"
    assert drawn.error.message.startswith("step 1: model call failed: the model's answer is ")
    assert cause.type == "PayloadTooLarge"
    assert "the session's result (its RunResult) is " in cause.message
    finished = log[-1]
    assert type(finished) is RunFinishedEvent and finished.status == "failed"
    assert finished.error.message.startswith(
        "step 2: model call failed: the model request (its new messages) is "
    )
    assert drive_by_hand(log) == encoded(log)
