"""Steering and follow-ups through an Inbox: sent from the running tool's side, taken
by the driver at its next yield, recorded, and replayed byte for byte."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator

import pytest

import replay
from agentloop import (
    ANYTIME_REPLIES,
    Cancel,
    EventLog,
    FollowUp,
    Inbox,
    ModelChunk,
    ModelRequest,
    ModelResponse,
    ScriptedModel,
    ScriptedResponse,
    Steer,
    ToolCall,
    ToolResultMessage,
    UserMessage,
    arun,
    encode_event,
    run,
    tool,
)

USER = UserMessage("u1", "Look both up.")


def ticking() -> object:
    now = iter(range(100, 10_000))
    return lambda: float(next(now))


def scripted() -> ScriptedModel:
    return ScriptedModel(
        [
            ScriptedResponse.tool_calls(
                "r1", ToolCall("c1", "lookup", {"q": "a"}), ToolCall("c2", "lookup", {"q": "b"})
            ),
            ScriptedResponse.text("r2", "Answered with what I had."),
            ScriptedResponse.text("r3", "One line."),
        ]
    )


def test_anytime_replies_are_cancel_steer_and_follow_up() -> None:
    assert (Cancel, Steer, FollowUp) == ANYTIME_REPLIES


def test_a_steer_sent_while_a_tool_runs_skips_the_calls_left() -> None:
    inbox = Inbox()
    seen: list[str] = []

    @tool
    def lookup(q: str) -> str:
        """Look it up."""
        seen.append(q)
        inbox.steer(UserMessage("s1", "Stop; answer now."))
        return f"found {q}"

    log = EventLog()
    result = run([USER], model=scripted(), tools=[lookup], inbox=inbox, log=log, clock=ticking())
    assert seen == ["a"]  # the second call never ran
    assert result.status == "completed" and result.final_text == "Answered with what I had."
    contents = [m.content for m in result.messages if type(m) is ToolResultMessage]
    assert contents == ["found a", "skipped: steered"]
    assert result.messages[4] == UserMessage("s1", "Stop; answer now.")
    queued = [e for e in log if e.type == "message.queued"]
    assert [(e.mode, e.reply.message.id) for e in queued] == [("steer", "s1")]
    assert queued[0].reply.at is not None  # stamped by the driver's clock
    regenerated = replay.replay(list(log))
    assert [encode_event(e) for e in regenerated.events] == [encode_event(e) for e in log]
    assert len(inbox) == 0


def test_a_follow_up_turns_the_final_answer_into_one_more_step() -> None:
    inbox = Inbox()

    @tool
    def lookup(q: str) -> str:
        """Look it up."""
        if q == "b":
            inbox.follow_up("Then summarise it in one line.")
        return f"found {q}"

    requests: list[ModelRequest] = []
    model = scripted()
    stream = model.stream

    def recording(request: ModelRequest) -> Iterator[ModelChunk | ModelResponse]:
        requests.append(request)
        return stream(request)

    model.stream = recording  # type: ignore[method-assign]
    log = EventLog()
    result = run([USER], model=model, tools=[lookup], inbox=inbox, log=log, clock=ticking())
    assert result.status == "completed" and result.final_text == "One line."
    assert len(requests) == 3
    follow = requests[2].messages[-1]
    assert type(follow) is UserMessage and follow.content == "Then summarise it in one line."
    assert follow.id.startswith("inbox-") and len(follow.id) == len("inbox-") + 16
    assert replay.replay(list(log)).events == tuple(log)


def test_arun_takes_steering_from_the_inbox_too() -> None:
    inbox = Inbox()

    @tool
    async def lookup(q: str) -> str:
        """Look it up."""
        inbox.steer("Enough.")
        return f"found {q}"

    log = EventLog()
    result = asyncio.run(
        arun([USER], model=scripted(), tools=[lookup], inbox=inbox, log=log, clock=ticking())
    )
    assert [m.content for m in result.messages if type(m) is ToolResultMessage] == [
        "found a",
        "skipped: steered",
    ]
    assert replay.replay(list(log)).events == tuple(log)


def test_bad_messages_are_refused_where_they_are_sent() -> None:
    inbox = Inbox()
    with pytest.raises(TypeError, match="message must be a UserMessage or a str, got 3"):
        inbox.steer(3)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="UserMessage or a str"):
        inbox.follow_up(ToolCall("c", "t", {}))  # type: ignore[arg-type]
    # What the loop would refuse is refused here, in the sender's thread: the run
    # it was meant for must not die of a bad message (it did: CallerProtocolError).
    refused: list[tuple[Callable[[], None], str]] = [
        (lambda: inbox.steer("\ud800"), "Steer.message.content is not valid Unicode"),
        (lambda: inbox.follow_up(UserMessage(5, "x")), "FollowUp.message.id must be a str"),  # type: ignore[arg-type]
        (lambda: inbox.cancel(None), "Cancel.reason must be a str"),  # type: ignore[arg-type]
        (lambda: inbox.send(Steer(USER, at=float("nan"))), r"Steer.at must be finite, got nan"),
        (lambda: inbox.send(Cancel("x", at="now")), "Cancel.at must be a number or None"),  # type: ignore[arg-type]
    ]
    for send, problem in refused:
        with pytest.raises(ValueError, match=f"the Inbox refuses this .*: {problem}"):
            send()
    assert len(inbox) == 0
    result = run([USER], model=scripted(), tools=[], inbox=inbox)
    assert result.status == "completed"


def test_a_steering_message_id_already_used_is_the_callers_error() -> None:
    inbox = Inbox()
    inbox.steer(UserMessage("u1", "same id as the first message"))
    from agentloop import CallerProtocolError

    with pytest.raises(CallerProtocolError, match="'u1' is already used"):
        run([USER], model=scripted(), tools=[], inbox=inbox)


def test_a_cancel_waits_for_the_result_and_messages_before_it_go_first() -> None:
    inbox = Inbox()

    @tool
    def lookup(q: str) -> str:
        """Look it up."""
        inbox.follow_up(UserMessage("f1", "and then?"))
        inbox.cancel("stop")
        inbox.steer(UserMessage("s1", "never taken"))
        return f"found {q}"

    log = EventLog()
    result = run([USER], model=scripted(), tools=[lookup], inbox=inbox, log=log)
    assert (result.status, result.reason) == ("cancelled", "stop")
    # the follow-up (sent before the cancel) goes before the tool's result; the
    # cancel waits for the next yield, the second call's ToolRequest
    assert [e.type for e in log][7:] == [
        "tool.call",
        "message.queued",
        "tool.result",
        "tool.call",
        "session.complete",
        "run.finished",
    ]
    queued = [e for e in log if e.type == "message.queued"]
    assert [e.reply.message.id for e in queued] == ["f1"]
    assert len(inbox) == 1  # the steer after the cancel was never taken
    assert replay.replay(list(log)).events == tuple(log)


def test_take_message_leaves_a_cancel_at_the_head() -> None:
    inbox = Inbox()
    assert inbox.take_message() is None
    inbox.cancel()
    assert inbox.take_message() is None and len(inbox) == 1
