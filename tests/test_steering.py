"""Steering and follow-ups (DESIGN §19): replies accepted at any yield, delivered at
the next boundary, recorded and replayed."""

from __future__ import annotations

from typing import Any

import pytest

from agentloop import (
    Budget,
    CallerProtocolError,
    Cancel,
    FollowUp,
    HookRegistry,
    MessageQueuedEvent,
    ModelRequest,
    Pause,
    Resume,
    RunResult,
    State,
    Steer,
    ToolRequest,
    ToolResult,
    ToolResultMessage,
    ToolSpec,
    UserMessage,
    agent_loop,
    encode_event,
)
from replay import ReplayDivergence, replay, resume

from .helpers import ECHO, call, chunks, response

APPROVE = ToolSpec("approve", "Needs approval.", {"type": "object"}, requires_approval=True)


def _loop(**options: Any) -> Any:
    options.setdefault("tools", [ECHO, APPROVE])
    return agent_loop([UserMessage("u1", "hi")], started_at=1.0, **options)


def _types(loop: Any) -> list[str]:
    return [event.type for event in loop.log]


def _finish(loop: Any, reply: Any) -> RunResult:
    with pytest.raises(StopIteration) as stop:
        loop.send(reply)
    result: RunResult = stop.value.value
    assert replay(loop.log).result == result  # every run here replays byte for byte
    return result


def test_a_steer_is_recorded_and_the_same_request_yielded_again() -> None:
    loop = _loop()
    request = next(loop)
    again = loop.send(Steer(UserMessage("s1", "use French"), at=2.0))
    assert again == request and type(again) is ModelRequest
    queued = loop.log[-1]
    assert type(queued) is MessageQueuedEvent
    assert queued.mode == "steer" and queued.reply == Steer(UserMessage("s1", "use French"), 2.0)
    assert b'"mode":"steer"' in encode_event(queued)
    assert loop.state is State.PLANNING


def test_steering_skips_the_remaining_calls_and_is_delivered_before_the_next_request() -> None:
    loop = _loop()
    next(loop)
    effect = loop.send(
        response("request-001", "r1", call("echo", "c1"), call("echo", "c2"), call("echo", "c3"))
    )
    assert type(effect) is ToolRequest and effect.call.id == "c1"
    assert loop.send(Steer(UserMessage("s1", "stop that"))) == effect
    request = loop.send(ToolResult("c1", "done"))
    assert type(request) is ModelRequest and request.id == "request-002"
    results = [m for m in request.messages if type(m) is ToolResultMessage]
    assert [(m.tool_call_id, m.content, m.is_error) for m in results] == [
        ("c1", "done", False),
        ("c2", "skipped: steered", True),
        ("c3", "skipped: steered", True),
    ]
    assert request.messages[-1] == UserMessage("s1", "stop that")
    assert loop.budget_usage.tool_calls == 1  # skipped calls are not tool calls
    result = _finish(loop, response("request-002", "r2", "ok"))
    assert result.status == "completed" and result.final_text == "ok"
    types = _types(loop)
    assert types.index("message.queued") < types.index("tool.result")
    assert types[-8:] == [
        "step.end",
        "message.accepted",
        "step.start",
        "plan.draft",
        "plan.commit",
        "step.end",
        "session.complete",
        "run.finished",
    ]


def test_a_steer_while_the_model_plans_skips_every_call() -> None:
    loop = _loop()
    next(loop)
    loop.send(chunks("request-001", "thinking")[0])
    loop.send(Steer(UserMessage("s1", "wait")))
    loop.send(chunks("request-001", call("echo", "c1"))[0])
    request = loop.send(response("request-001", "r1", "thinking", call("echo", "c1")))
    assert type(request) is ModelRequest
    assert request.messages[-2].content == "skipped: steered"  # type: ignore[union-attr]
    assert request.messages[-1] == UserMessage("s1", "wait")
    _finish(loop, response("request-002", "r2", "ok"))


def test_a_steer_during_the_final_answer_takes_another_step() -> None:
    loop = _loop()
    next(loop)
    loop.send(Steer(UserMessage("s1", "more detail")))
    request = loop.send(response("request-001", "r1", "short"))
    assert type(request) is ModelRequest and request.step == 2
    assert request.messages[-1] == UserMessage("s1", "more detail")
    assert _finish(loop, response("request-002", "r2", "long")).final_text == "long"


def test_a_follow_up_waits_until_the_run_would_complete() -> None:
    loop = _loop()
    next(loop)
    loop.send(FollowUp(UserMessage("f1", "and then?")))
    effect = loop.send(response("request-001", "r1", call("echo", "c1"), call("echo", "c2")))
    assert type(effect) is ToolRequest
    assert loop.send(ToolResult("c1", "one")).call.id == "c2"  # nothing skipped
    request = loop.send(ToolResult("c2", "two"))
    assert request.messages[-1] != UserMessage("f1", "and then?")  # not yet
    request = loop.send(response("request-002", "r2", "answer"))
    assert type(request) is ModelRequest and request.messages[-1] == UserMessage("f1", "and then?")
    queued = [e for e in loop.log if type(e) is MessageQueuedEvent]
    assert [e.mode for e in queued] == ["follow_up"]
    result = _finish(loop, response("request-003", "r3", "then this"))
    assert (result.status, result.steps, result.final_text) == ("completed", 3, "then this")


def test_a_follow_up_counts_against_max_steps() -> None:
    loop = _loop(max_steps=1)
    next(loop)
    loop.send(FollowUp(UserMessage("f1", "and then?")))
    result = _finish(loop, response("request-001", "r1", "answer"))
    assert (result.status, result.reason) == ("max_steps", "no_more_steps")
    assert result.messages[-1] == UserMessage("f1", "and then?")  # kept for whoever continues


def test_steering_at_max_steps_is_kept_in_the_transcript() -> None:
    loop = _loop(max_steps=1)
    next(loop)
    loop.send(response("request-001", "r1", call("echo", "c1"), call("echo", "c2")))
    loop.send(Steer(UserMessage("s1", "halt")))
    result = _finish(loop, ToolResult("c1", "one"))
    assert result.status == "max_steps"
    assert result.messages[-2].content == "skipped: steered"  # type: ignore[union-attr]
    assert result.messages[-1] == UserMessage("s1", "halt")


def test_steer_and_follow_up_at_a_pause() -> None:
    loop = _loop()
    next(loop)
    pause = loop.send(response("request-001", "r1", call("approve", "c1"), call("echo", "c2")))
    assert type(pause) is Pause and pause.reason == "approval"
    assert loop.send(Steer(UserMessage("s1", "no, this"))) == pause
    assert loop.send(FollowUp(UserMessage("f1", "later"))) == pause
    assert loop.state is State.IDLE
    effect = loop.send(Resume({"approved": True}))
    assert type(effect) is ToolRequest and effect.call.id == "c1"  # the call now running
    request = loop.send(ToolResult("c1", "ran"))
    assert request.messages[-2].content == "skipped: steered"  # c2
    assert request.messages[-1] == UserMessage("s1", "no, this")
    request = loop.send(response("request-002", "r2", "done"))
    assert request.messages[-1] == UserMessage("f1", "later")
    assert _finish(loop, response("request-003", "r3", "really done")).steps == 3


def test_steering_during_a_budget_pause_is_delivered_before_the_request() -> None:
    loop = _loop(budget=Budget(max_turns=1))
    next(loop)
    loop.send(response("request-001", "r1", call("echo", "c1")))
    pause = loop.send(ToolResult("c1", "one"))
    assert type(pause) is Pause and pause.reason == "budget_exceeded:turns"
    loop.send(Steer(UserMessage("s1", "new plan")))
    request = loop.send(Resume())
    assert request.messages[-1] == UserMessage("s1", "new plan")
    _finish(loop, response("request-002", "r2", "ok"))


def test_steering_skips_budget_pauses_for_the_skipped_calls() -> None:
    loop = _loop(budget=Budget(max_tool_calls=1))
    next(loop)
    loop.send(response("request-001", "r1", call("echo", "c1"), call("echo", "c2")))
    loop.send(Steer(UserMessage("s1", "enough")))
    request = loop.send(ToolResult("c1", "one"))
    assert type(request) is ModelRequest  # c2 skipped, no tool_calls pause for it
    _finish(loop, response("request-002", "r2", "ok"))


def test_a_steer_during_a_tool_calls_pause_skips_that_call() -> None:
    loop = _loop(budget=Budget(max_tool_calls=1))
    next(loop)
    loop.send(response("request-001", "r1", call("echo", "c1"), call("echo", "c2")))
    pause = loop.send(ToolResult("c1", "one"))
    assert type(pause) is Pause and pause.reason == "budget_exceeded:tool_calls"
    loop.send(Steer(UserMessage("s1", "enough")))
    request = loop.send(Resume())
    assert type(request) is ModelRequest
    assert request.messages[-2].content == "skipped: steered"  # type: ignore[union-attr]
    _finish(loop, response("request-002", "r2", "ok"))


def test_hooks_see_the_delivered_messages() -> None:
    seen: list[Any] = []
    hooks = HookRegistry()
    hooks.on("before_plan", lambda payload: seen.append(list(payload["messages"])))
    hooks.on("after_tool_call", lambda payload: seen.append(payload["content"]))
    loop = _loop(hooks=hooks)
    next(loop)
    loop.send(response("request-001", "r1", call("echo", "c1"), call("echo", "c2")))
    loop.send(Steer(UserMessage("s1", "stop")))
    loop.send(ToolResult("c1", "one"))
    assert seen[1:3] == ["one", "skipped: steered"]
    assert seen[3][-1] == UserMessage("s1", "stop")
    with pytest.raises(StopIteration):
        loop.send(Cancel("enough"))
    assert replay(loop.log, hooks=hooks).result == loop.result


def test_cancel_keeps_undelivered_messages_out_of_the_transcript() -> None:
    loop = _loop()
    next(loop)
    loop.send(FollowUp(UserMessage("f1", "later")))
    result = _finish(loop, Cancel("stop"))
    assert result.status == "cancelled"
    assert UserMessage("f1", "later") not in result.messages


def test_a_message_id_already_used_is_caller_misuse() -> None:
    loop = _loop()
    next(loop)
    with pytest.raises(CallerProtocolError, match=r"Steer.message id 'u1' is already used"):
        loop.send(Steer(UserMessage("u1", "again")))
    assert loop.result.error.code == "CALLER_PROTOCOL_ERROR"
    assert replay(loop.log).result == loop.result


def test_a_queued_id_is_reserved() -> None:
    loop = _loop()
    next(loop)
    loop.send(FollowUp(UserMessage("f1", "later")))
    with pytest.raises(CallerProtocolError, match=r"Steer\.message id 'f1' is already used"):
        loop.send(Steer(UserMessage("f1", "again")))


def test_under_rules_2_a_queued_id_could_take_the_next_response_s() -> None:
    # The behaviour old logs replay with (rules revision 3 refuses the message:
    # tests/test_reserved_ids.py): the model's valid response failed the run.
    loop = _loop(rules=2)
    next(loop)
    loop.send(FollowUp(UserMessage("message-r1", "later")))
    result = _finish(loop, response("request-001", "r1", "taken"))
    assert result.status == "failed" and result.error is not None
    assert "already used" in result.error.message


def test_a_malformed_steer_is_caller_misuse() -> None:
    loop = _loop()
    next(loop)
    with pytest.raises(CallerProtocolError, match=r"Steer\.message must be a UserMessage, got str"):
        loop.send(Steer("hi"))  # type: ignore[arg-type]
    loop = _loop()
    next(loop)
    with pytest.raises(CallerProtocolError, match=r"FollowUp.message.content must be a str"):
        loop.send(FollowUp(UserMessage("f1", 3)))  # type: ignore[arg-type]


def test_a_steer_after_the_end_is_caller_misuse() -> None:
    loop = _loop()
    next(loop)
    _finish(loop, response("request-001", "r1", "done"))
    with pytest.raises(CallerProtocolError, match="send\\(\\) got Steer after the run finished"):
        loop.send(Steer(UserMessage("s1", "late")))


def test_resume_rebuilds_the_queue() -> None:
    loop = _loop()
    next(loop)
    loop.send(FollowUp(UserMessage("f1", "later")))
    live, effect = resume(loop.log)
    assert type(effect) is ModelRequest
    with pytest.raises(StopIteration):
        live.send(response("request-001", "r1", "x"))
        live.send(response("request-002", "r2", "y"))
    assert live.result.messages[-2] == UserMessage("f1", "later")


def test_replay_notices_a_dropped_steer() -> None:
    loop = _loop()
    next(loop)
    loop.send(Steer(UserMessage("s1", "x")))
    loop.send(response("request-001", "r1", "a"))
    _finish(loop, response("request-002", "r2", "b"))
    events = [e for e in loop.log if type(e) is not MessageQueuedEvent]
    with pytest.raises(ReplayDivergence):
        replay(events)


def test_many_steers_at_one_yield() -> None:
    loop = _loop()
    request = next(loop)
    for n in range(3000):  # no recursion: the loop takes them one after another
        assert loop.send(Steer(UserMessage(f"s{n}", "again"))) == request
    request = loop.send(response("request-001", "r1", "a"))
    assert len(request.messages) == 3002
    _finish(loop, response("request-002", "r2", "b"))
