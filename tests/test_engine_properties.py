"""Hypothesis: whatever replies arrive, the loop ends well-formed (DESIGN §5, §7, §8, §11)."""

from __future__ import annotations

from typing import Any

import msgspec
from hypothesis import event as note_event
from hypothesis import given, settings
from hypothesis import strategies as st

from agentloop import (
    STOP_REASONS,
    Budget,
    CallerProtocolError,
    Cancel,
    FollowUp,
    ModelChunk,
    ModelFailure,
    ModelRequest,
    ModelResponse,
    Pause,
    Resume,
    RunResult,
    Steer,
    TextBlock,
    ThinkingBlock,
    ToolBatch,
    ToolCall,
    ToolRequest,
    ToolResult,
    UserMessage,
    agent_loop,
    close_dangling_calls,
    validate_transcript,
)
from replay import replay
from tests.helpers import ADD, ECHO, check_log, examples

json_leaf = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=8),
)
json_value = st.recursive(
    json_leaf,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner, max_size=4)
    ),
    max_leaves=12,
)
ids = st.sampled_from(["c1", "c2", "c3", "", "r1", "r2", "x"])
tool_names = st.sampled_from(["add", "echo", "nope", ""])
blocks = st.one_of(
    st.builds(TextBlock, st.text(max_size=12)),
    st.builds(ThinkingBlock, st.text(max_size=6)),
    st.builds(
        ToolCall, ids, tool_names, st.dictionaries(st.text(max_size=4), json_value, max_size=3)
    ),
)
stop_reasons = st.sampled_from([*STOP_REASONS, "bogus"])
times = st.one_of(st.none(), st.floats(min_value=0, max_value=1e6))


def random_reply(data: st.DataObject, effect: Any) -> Any:
    """Mostly plausible replies for ``effect``, sometimes anything at all."""
    request_id = effect.id if type(effect) is ModelRequest else "request-001"
    request_ids = st.sampled_from([request_id, request_id, request_id, "request-999"])
    call_id = effect.call.id if type(effect) is ToolRequest else "c1"
    if type(effect) is ToolBatch:  # any call of the batch, answered already or not
        call_id = data.draw(st.sampled_from([r.call.id for r in effect.requests]), label="call")
    choice = data.draw(st.integers(0, 29), label="kind")
    at = data.draw(times, label="at")
    if data.draw(st.integers(0, 9), label="queue") == 0:  # steering, a follow-up
        kind = data.draw(st.sampled_from([Steer, FollowUp]), label="mode")
        message_id = data.draw(st.sampled_from(["u1", "m1", "m2", "m3", "message-resp1"]))
        return kind(UserMessage(message_id, "more"), at)
    if choice >= 20:  # a well-formed answer to what is pending
        if type(effect) is ToolRequest or type(effect) is ToolBatch:
            return ToolResult(call_id, "ok", data.draw(st.booleans()), at)
        if type(effect) is Pause:
            return Resume(at=at)
        step = effect.step
        n_calls = data.draw(st.integers(0, 3), label="calls")
        calls = tuple(
            ToolCall(f"s{step}c{i}", data.draw(st.sampled_from(["add", "echo"])), {"n": i})
            for i in range(n_calls)
        )
        stop = "tool_call" if calls else data.draw(st.sampled_from(["stop", "length"]))
        return ModelResponse(request_id, f"resp{step}", (TextBlock("t"), *calls), stop, None, at)
    if choice < 6:
        return ModelChunk(data.draw(request_ids), data.draw(blocks), at)
    if choice < 11:
        return ModelResponse(
            data.draw(request_ids),
            data.draw(ids),
            tuple(data.draw(st.lists(blocks, max_size=4))),
            data.draw(stop_reasons),
            None,
            at,
        )
    if choice < 12:
        return ModelFailure(data.draw(request_ids), "boom", at=at)
    if choice < 16:
        return ToolResult(
            data.draw(st.sampled_from([call_id, call_id, "other"])),
            data.draw(st.text(max_size=8)),
            data.draw(st.booleans()),
            at,
        )
    if choice < 18:
        return Resume(at=at)
    return Cancel(data.draw(st.text(max_size=5)), at)


@settings(max_examples=examples(300), deadline=None)
@given(
    data=st.data(),
    max_steps=st.integers(1, 6),
    budget=st.one_of(
        st.none(), st.builds(Budget, max_turns=st.integers(1, 3), max_tool_calls=st.integers(1, 3))
    ),
    parallel_tools=st.booleans(),
)
def test_arbitrary_replies_always_end_in_a_valid_result(
    data: st.DataObject, max_steps: int, budget: Budget | None, parallel_tools: bool
) -> None:
    loop = agent_loop(
        [UserMessage("u1", "go")],
        tools=[ADD, ECHO],
        max_steps=max_steps,
        budget=budget,
        parallel_tools=parallel_tools,
    )
    effect: Any = next(loop)
    result: RunResult | None = None
    for _ in range(200):
        if type(effect) is Pause and data.draw(st.booleans(), label="resume"):
            reply: Any = Resume(at=data.draw(times))
        else:
            reply = random_reply(data, effect)
        try:
            effect = loop.send(reply)
        except StopIteration as stop:
            result = stop.value
            break
        except CallerProtocolError:
            result = loop.result
            break
    else:
        loop.close()
        result = loop.result
    assert isinstance(result, RunResult)
    note_event(f"{result.status}/{result.reason}")
    assert result.status in ("completed", "cancelled", "max_steps", "failed")
    check_log(loop.log.events)
    finished = loop.log[-1]
    assert finished.status == result.status  # type: ignore[union-attr]
    assert result.steps <= max_steps
    if result.status in ("completed", "max_steps"):
        validate_transcript(result.messages)
    else:
        validate_transcript(close_dangling_calls(result.messages))
    for event in loop.log:
        msgspec.json.encode(event)
    if parallel_tools and any(e.type == "tool.result" for e in loop.log):
        note_event("parallel tools, results")
    assert replay(loop.log).result == result  # whatever came, it replays
