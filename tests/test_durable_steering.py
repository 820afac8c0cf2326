"""replay.answer with Steer and FollowUp, and the options of run_durable that a
stored session keeps (limits, parallel tools, structured output).

A message for a session is queued in the store and delivered at the session's
next side-effect boundary: by the worker running it now, or by the next
``run_durable``; a parked session delivers its messages when its pause is
answered, before the answer. Its row goes in the commit that records it.
"""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

import agentloop
import replay
from agentloop import (
    EventLog,
    FollowUp,
    FunctionModel,
    Inbox,
    Limits,
    ModelRequest,
    ScriptedResponse,
    Steer,
    ToolCall,
    ToolResult,
    UserMessage,
    run,
    tool,
)
from replay import Parked, SessionNotFound, SQLiteStore, StoreError

from .test_durable import APPROVE, QUESTION, Interrupted, add, publish


def answer(request: ModelRequest) -> ScriptedResponse:
    if request.step == 1:
        return ScriptedResponse.tool_calls("r1", ToolCall("c1", "add", {"left": 20, "right": 22}))
    if request.step == 2:
        return ScriptedResponse.tool_calls("r2", ToolCall("c2", "add", {"left": 42, "right": 1}))
    return ScriptedResponse.text(f"r{request.step}", f"Answer to {request.messages[-1].content}")


def publishing(request: ModelRequest) -> ScriptedResponse:
    if request.step == 1:
        return ScriptedResponse.tool_calls("r1", ToolCall("c1", "publish", {"text": "hello"}))
    return ScriptedResponse.text(f"r{request.step}", "Done.")


def types(store: SQLiteStore, session_id: str) -> list[str]:
    return [event.type for event in store.events(session_id)]


STEER = Steer(UserMessage("u-steer", "Stop after this one."))
FOLLOW = FollowUp(UserMessage("u-more", "And 1 + 1?"))


# --------------------------------------------------------------------------- delivery


def test_messages_sent_to_a_running_session_are_delivered_at_its_next_boundary(store):
    @tool(name="add")
    def steered_add(left: int, right: int) -> dict[str, int]:
        """Add two integers."""
        if left == 20:  # another process steers while the first tool runs
            replay.answer(store, "s", STEER)
            replay.answer(store, "s", FOLLOW)
            assert store.session("s").queued == 2
        return {"sum": left + right}

    result = replay.run_durable(
        store, "s", QUESTION, model=FunctionModel(answer), tools=[steered_add]
    )
    assert (result.status, result.steps) == ("completed", 4)
    # Found at the next boundary, before step 2's model call: step 2's request had
    # gone out (its step.start was recorded), so the steer is delivered at the
    # boundary after it, once step 2's tool call ran; the follow-up turns the step
    # that would complete into one more.
    assert [m.id for m in result.messages] == [
        "u1",
        "message-r1",
        "tool-result-c1",
        "message-r2",
        "tool-result-c2",
        "u-steer",
        "message-r3",
        "u-more",
        "message-r4",
    ]
    assert result.final_text == "Answer to And 1 + 1?"
    assert types(store, "s").count("message.queued") == 2
    queued = [e for e in store.events("s") if e.type == "message.queued"]
    assert [(e.mode, e.reply.message) for e in queued] == [
        ("steer", STEER.message),
        ("follow_up", FOLLOW.message),
    ]
    assert queued[0].reply.at is not None  # stamped when sent
    assert store.session("s").queued == 0 and store.queued_for("s") == []
    with pytest.raises(StoreError, match="has finished"):
        replay.answer(store, "s", Steer(UserMessage("u-new", "late")))
    # One more commit for the step that delivered them (they were found at the
    # commit before the model call, then sent, then committed with their events).
    assert store.commits == 2 + 2 + 2
    assert replay.replay(store.events("s")).result == result


def test_a_parked_session_keeps_its_messages_until_its_pause_is_answered(store):
    options: dict[str, Any] = {"model": FunctionModel(publishing), "tools": [publish]}
    assert type(replay.run_durable(store, "s", QUESTION, **options)) is Parked
    replay.answer(store, "s", STEER)
    info = store.session("s")
    assert (info.status, info.queued, info.answered) == ("paused", 1, False)
    assert store.runnable() == []  # a message does not answer the pause
    commits = store.commits
    assert type(replay.run_durable(store, "s", **options)) is Parked
    assert store.commits == commits  # nothing ran
    replay.answer(store, "s", APPROVE)
    result = replay.run_durable(store, "s", **options)
    assert result.status == "completed"
    recorded = types(store, "s")
    # At the pause: the message first, then the answer.
    assert recorded.index("message.queued") < recorded.index("session.resume")
    assert result.messages[3] == STEER.message
    assert store.session("s").queued == 0


def test_a_session_with_on_pause_delivers_its_messages_at_the_pause(store):
    options: dict[str, Any] = {"model": FunctionModel(publishing), "tools": [publish]}
    replay.run_durable(store, "s", QUESTION, **options)
    replay.answer(store, "s", FOLLOW)
    result = replay.run_durable(store, "s", on_pause=lambda pause: APPROVE, **options)
    assert result.status == "completed" and result.messages[-2] == FOLLOW.message
    assert result.steps == 3


def test_a_message_that_comes_after_the_last_boundary_stays_in_the_store(store):
    def late(request: ModelRequest) -> Any:
        if request.step == 3:  # while the last model call streams
            replay.answer(store, "s", FOLLOW)
        return answer(request)

    result = replay.run_durable(store, "s", QUESTION, model=FunctionModel(late), tools=[add])
    assert result.status == "completed"
    info = store.session("s")
    assert (info.status, info.queued) == ("completed", 1)  # kept, never lost
    assert store.queued_for("s") == [(1, FOLLOW)]
    with pytest.raises(StoreError, match="has finished"):
        replay.answer(store, "s", STEER)


def test_a_crash_before_a_delivered_message_is_committed_delivers_it_again(store):
    replay.run_durable(store, "s", QUESTION, model=FunctionModel(publishing), tools=[publish])
    replay.answer(store, "s", STEER)
    replay.answer(store, "s", APPROVE)

    def dying(event: Any) -> None:
        if event.type == "message.queued":
            raise Interrupted  # the process dies right after the loop took the message

    options: dict[str, Any] = {"model": FunctionModel(publishing), "tools": [publish]}
    with pytest.raises(Interrupted):
        replay.run_durable(store, "s", on_event=dying, **options)
    info = store.session("s")
    assert (info.status, info.queued, info.answered) == ("paused", 1, True)
    result = replay.run_durable(store, "s", **options)
    assert result.status == "completed"
    assert types(store, "s").count("message.queued") == 1


# --------------------------------------------------------------------------- bad messages


def test_bad_messages_are_refused_before_they_are_stored(store):
    replay.run_durable(store, "s", QUESTION, model=FunctionModel(publishing), tools=[publish])
    with pytest.raises(TypeError, match="an answer is a Resume or a Cancel"):
        replay.answer(store, "s", ToolResult("c1", "x"))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="a queued message is a Steer or a FollowUp"):
        store.queue("s", APPROVE)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="message id 'u1' is already used in the session"):
        replay.answer(store, "s", Steer(UserMessage("u1", "again")))
    replay.answer(store, "s", STEER)
    with pytest.raises(ValueError, match="'u-steer' is already taken by a queued message"):
        replay.answer(store, "s", FollowUp(UserMessage("u-steer", "again")))
    with pytest.raises(ValueError, match="the answer cannot be stored as JSON: 'utf-8' codec"):
        replay.answer(store, "s", Steer(UserMessage("u9", "\ud800")))
    with pytest.raises(ValueError, match="does not survive a JSON round trip"):
        replay.answer(store, "s", Steer(agentloop.AssistantMessage("a9", ())))  # type: ignore[arg-type]
    with pytest.raises(SessionNotFound):
        replay.answer(store, "nope", STEER)
    assert store.session("s").queued == 1
    assert [e.type for e in store.events("s")][-1] == "session.pause"  # nothing recorded
    replay.answer(store, "s", APPROVE)
    options: dict[str, Any] = {"model": FunctionModel(publishing), "tools": [publish]}
    assert replay.run_durable(store, "s", **options).status == "completed"
    with pytest.raises(ValueError, match="'u-steer' is already used in the session"):
        replay.answer(store, "s", STEER)  # (a delivered message's id stays taken)


def test_the_inbox_reaches_the_loop(store):
    inbox = Inbox()
    inbox.cancel("from another thread")
    result = replay.run_durable(
        store, "s", QUESTION, model=FunctionModel(answer), tools=[add], inbox=inbox
    )
    assert (result.status, result.reason) == ("cancelled", "from another thread")
    assert store.session("s").status == "cancelled"


def test_on_event_sees_the_events_a_resume_regenerates(store):
    # A log cut between two events (written by another writer of the store): the
    # resumed loop makes the missing ones, on_event sees them, the run commits them.
    log = EventLog()
    run(QUESTION, model=FunctionModel(answer), tools=[add], log=log)
    cut = [e for e in log][: [e.type for e in log].index("tool.result") + 1]
    store.create("s", cut, status="running", steps=1)
    seen: list[Any] = []
    result = replay.run_durable(
        store, "s", model=FunctionModel(answer), tools=[add], on_event=seen.append
    )
    assert result.status == "completed"
    assert [e.type for e in seen[:2]] == ["step.end", "step.start"]
    assert seen == store.events("s")[len(cut) :]


# --------------------------------------------------------------------------- options kept


def test_limits_are_recorded_and_honoured_on_resume(store):
    crash = [True]

    @tool(name="add")
    def fragile_add(left: int, right: int) -> dict[str, int]:
        """Add two integers."""
        if left == 66 and crash and crash.pop():
            raise Interrupted
        return {"sum": left + right}

    def counting(request: ModelRequest) -> ScriptedResponse:
        if request.step < 70:
            call = ToolCall(f"c{request.step}", "add", {"left": request.step, "right": 1})
            return ScriptedResponse.tool_calls(f"r{request.step}", call)
        return ScriptedResponse.text("r70", "Counted to 70.")

    limits = Limits(agent_steps=100)
    options: dict[str, Any] = {"model": FunctionModel(counting), "tools": [fragile_add]}
    with pytest.raises(Interrupted):
        replay.run_durable(store, "s", QUESTION, max_steps=70, limits=limits, **options)
    assert store.events("s")[0].limits == limits
    # Continued without the options: the recorded ones (more than 64 steps) hold.
    result = replay.run_durable(store, "s", **options)
    assert (result.status, result.steps) == ("completed", 70)
    # Given again, they must match.
    with pytest.raises(ValueError, match="max_steps must be an int from 1 to MAX_AGENT_STEPS"):
        replay.run_durable(store, "s", QUESTION, max_steps=70, **options)
    with pytest.raises(ValueError, match="started differently: event #0"):
        replay.run_durable(
            store, "s", QUESTION, max_steps=70, limits=Limits(agent_steps=90), **options
        )
    again = replay.run_durable(store, "s", QUESTION, max_steps=70, limits=limits, **options)
    assert again == result


def test_parallel_tools_commit_once_per_batch_and_are_kept_on_resume(store):
    crash = [True]
    stored: list[list[str]] = []

    @tool(name="add")
    def batched_add(left: int, right: int) -> dict[str, int]:
        """Add two integers."""
        stored.append([e.type for e in store.events("s")[-2:]])
        if left == 42 and crash and crash.pop():
            raise Interrupted
        return {"sum": left + right}

    def both(request: ModelRequest) -> ScriptedResponse:
        if request.step == 1:
            return ScriptedResponse.tool_calls(
                "r1",
                ToolCall("c1", "add", {"left": 20, "right": 22}),
                ToolCall("c2", "add", {"left": 1, "right": 2}),
            )
        if request.step == 2:
            return ScriptedResponse.tool_calls(
                "r2",
                ToolCall("c3", "add", {"left": 42, "right": 1}),
                ToolCall("c4", "add", {"left": 3, "right": 4}),
            )
        return ScriptedResponse.text("r3", "Four sums.")

    options: dict[str, Any] = {"model": FunctionModel(both), "tools": [batched_add]}
    with pytest.raises(Interrupted):
        replay.run_durable(store, "s", QUESTION, parallel_tools=True, tool_workers=1, **options)
    # Both calls of a batch were committed before either ran.
    assert stored[:2] == [["tool.call", "tool.call"]] * 2
    assert store.events("s")[0].parallel_tools is True
    commits = store.commits
    assert commits == 4  # each step: before its model call, before its batch
    result = replay.run_durable(store, "s", **options)
    assert result.status == "completed" and result.final_text == "Four sums."
    assert store.commits - commits == 2  # step 3 and the end (step 2's batch was stored)
    assert replay.replay(store.events("s")).result == result


class Sum(msgspec.Struct):
    total: int


class Total(msgspec.Struct):
    total: int


#: Another type of the same name.
OtherSum = msgspec.defstruct("Sum", [("total", str)])


def test_structured_output_is_given_again_to_continue(store):
    def summing(request: ModelRequest) -> ScriptedResponse:
        if request.step == 1:
            return ScriptedResponse.tool_calls(
                "r1", ToolCall("c1", "publish", {"text": "sum"}), text="Asking."
            )
        if request.step == 2:
            return ScriptedResponse.text("r2", "forty-two")  # does not decode: sent back
        return ScriptedResponse.text("r3", '{"total": 42}')

    options: dict[str, Any] = {"model": FunctionModel(summing), "tools": [publish]}
    parked = replay.run_durable(store, "s", QUESTION, output=Sum, output_retries=1, **options)
    assert type(parked) is Parked
    replay.answer(store, "s", APPROVE)
    with pytest.raises(ValueError, match=r"structured output \(Sum\): pass output= again"):
        replay.run_durable(store, "s", **options)
    # Another type is refused up front, as with messages= (it was a ReplayDivergence).
    with pytest.raises(
        ValueError, match=r"started with output=Sum, and output=Total is another type"
    ):
        replay.run_durable(store, "s", output=Total, **options)
    with pytest.raises(ValueError, match=r"output=Sum, and another JSON Schema is another type"):
        replay.run_durable(store, "s", output=OtherSum, **options)
    with pytest.raises(ValueError, match="started differently"):
        replay.run_durable(store, "s", QUESTION, output=Sum, **options)  # 2 retries, not 1
    result = replay.run_durable(store, "s", output=Sum, **options)
    assert (result.status, result.output) == ("completed", Sum(42))
    # A finished session gives its result: typed with the type, as recorded without.
    assert replay.run_durable(store, "s", output=Sum, **options) == result
    assert replay.run_durable(store, "s", **options).output == {"total": 42}
    with pytest.raises(ValueError, match="started with output=Sum, and output=Total"):
        replay.run_durable(store, "s", output=Total, **options)

    replay.run_durable(store, "t", QUESTION, **options)
    replay.answer(store, "t", APPROVE)
    with pytest.raises(ValueError, match="started without structured output"):
        replay.run_durable(store, "t", output=Sum, **options)


def test_a_session_that_parks_right_after_a_message_delivered_at_its_pause_stays_parked(store):
    # The message is queued while the model answers, delivered at the pause (the
    # log then ends with message.queued after session.pause), and the session
    # parks. Calling run_durable again ended with a bare AssertionError.
    def model_fn(request: ModelRequest) -> ScriptedResponse:
        if request.step == 1:
            replay.answer(store, "s", Steer(UserMessage("u-steer", "Hurry.")))
        return publishing(request)

    options: dict[str, Any] = {"model": FunctionModel(model_fn), "tools": [publish]}
    parked = replay.run_durable(store, "s", QUESTION, **options)
    assert type(parked) is Parked
    assert [e.type for e in store.events("s")][-2:] == ["session.pause", "message.queued"]
    assert replay.run_durable(store, "s", **options) == parked  # still parked
    replay.answer(store, "s", APPROVE)
    result = replay.run_durable(store, "s", **options)
    assert result.status == "completed"
    assert UserMessage("u-steer", "Hurry.") in result.messages
    assert replay.replay(store.events("s")).result == result
