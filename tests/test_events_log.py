"""EventLog as a reader sees it: subscriptions, views, offsets, and their misuse."""

from __future__ import annotations

from typing import Any

import pytest

from agentloop import Event, EventLog, UserMessage, agent_loop
from tests.helpers import ADD, finish, response


def _finished_log() -> EventLog:
    log = EventLog()
    loop = agent_loop([UserMessage("u1", "hi")], tools=[ADD], log=log)
    finish(loop, [response("request-001", "r1", "hello")])
    return log


def test_unsubscribe_stops_delivery_and_is_idempotent() -> None:
    log = EventLog()
    seen: list[str] = []
    unsubscribe = log.subscribe(lambda event: seen.append(event.type))
    unsubscribe()
    unsubscribe()  # a second call is harmless
    finish(
        agent_loop([UserMessage("u1", "hi")], tools=[ADD], log=log),
        [response("request-001", "r1", "hello")],
    )
    assert seen == []
    assert len(log) > 0


def test_each_subscription_is_removed_on_its_own() -> None:
    log = EventLog()
    first: list[int] = []
    second: list[int] = []
    unsubscribe_first = log.subscribe(lambda event: first.append(event.sequence))
    log.subscribe(lambda event: second.append(event.sequence))
    unsubscribe_first()
    finish(
        agent_loop([UserMessage("u1", "hi")], tools=[ADD], log=log),
        [response("request-001", "r1", "hello")],
    )
    assert first == []
    assert second == list(range(len(log)))


@pytest.mark.parametrize("fn", [None, "print", 3])
def test_subscribe_rejects_what_cannot_be_called(fn: Any) -> None:
    log = EventLog()
    with pytest.raises(TypeError, match=rf"subscriber must be callable, got {fn!r}"):
        log.subscribe(fn)


@pytest.mark.parametrize("sequence", [-1, 1.0, "2", True, None])
def test_since_rejects_anything_but_a_non_negative_int(sequence: Any) -> None:
    with pytest.raises(ValueError, match=r"sequence must be a non-negative int, got "):
        _finished_log().since(sequence)


def test_since_reads_by_offset_and_past_the_end_is_empty() -> None:
    log = _finished_log()
    events: list[Event] = list(log)
    assert log.since(0) == events
    assert log.since(len(log) - 1) == [events[-1]]
    assert log.since(len(log)) == []
    assert log.since(10_000) == []


def test_indexing_slicing_and_repr() -> None:
    log = _finished_log()
    events = list(log)
    assert log[0] is events[0] and log[-1].type == "run.finished"
    assert log[1:3] == events[1:3]
    assert repr(log) == f"<EventLog {len(events)} events>"
    assert repr(EventLog()) == "<EventLog 0 events>"


def test_events_is_a_live_read_only_view() -> None:
    log = EventLog()
    view = log.events
    assert len(view) == 0
    finish(
        agent_loop([UserMessage("u1", "hi")], tools=[ADD], log=log),
        [response("request-001", "r1", "hello")],
    )
    assert len(view) == len(log) and list(view) == list(log)
    assert view[-1] is log[-1] and view[:2] == list(log)[:2]
    assert not hasattr(view, "append")
    with pytest.raises(TypeError):
        view[0] = view[1]  # type: ignore[index]
