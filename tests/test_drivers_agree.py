"""Protocol fuzzing across drivers: any scripted session -- text, tool calls (known,
unknown, failing, with bad arguments), several calls per step, sequential or
parallel tools, steering and follow-ups from the inbox, a cancel, a budget -- writes
the same log, byte for byte, under ``run`` and under ``arun``, and that log replays.

Parallel tools are run one at a time here (``tool_workers=1``) so that completion
order, and with it the log, is the same under both drivers; their tools send
nothing to the inbox (see ``sessions``)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

import replay
from agentloop import (
    Budget,
    EventLog,
    Inbox,
    Resume,
    ScriptedModel,
    ScriptedResponse,
    ToolCall,
    UserMessage,
    arun,
    encode_event,
    run,
    tool,
)
from tests.helpers import examples

NAMES = ("add", "fail", "nope")


@st.composite
def sessions(draw: st.DrawFn) -> dict[str, Any]:
    steps: list[list[tuple[str, dict[str, Any]]]] = []
    for _ in range(draw(st.integers(0, 4))):
        calls = draw(
            st.lists(
                st.tuples(
                    st.sampled_from(NAMES),
                    st.one_of(
                        st.fixed_dictionaries({"a": st.integers(-5, 5), "b": st.integers(0, 3)}),
                        st.just({"a": "not a number", "b": 1}),
                    ),
                ),
                min_size=1,
                max_size=3,
            )
        )
        steps.append(calls)
    parallel = draw(st.booleans())
    return {
        "steps": steps,
        "parallel": parallel,
        # (call number, what the tool sends to the inbox while it runs). Not in a
        # batch: there the next call may start before the driver takes the last
        # result, so where a message lands among the results is a race.
        "inbox": []
        if parallel
        else draw(
            st.lists(
                st.tuples(st.integers(1, 8), st.sampled_from(["steer", "follow_up", "cancel"])),
                max_size=2,
            )
        ),
        "max_tool_calls": draw(st.none() | st.integers(1, 6)),
        "max_steps": draw(st.integers(1, 8)),
    }


def script(session: dict[str, Any]) -> ScriptedModel:
    responses = []
    for step, calls in enumerate(session["steps"]):
        responses.append(
            ScriptedResponse.tool_calls(
                f"r{step}",
                *(ToolCall(f"c{step}-{i}", name, args) for i, (name, args) in enumerate(calls)),
            )
        )
    # answers for the steps steering, follow-ups and the last step may need
    responses += [ScriptedResponse.text(f"t{i}", f"answer {i}") for i in range(10)]
    return ScriptedModel(responses)


def setup(
    session: dict[str, Any], asynchronous: bool
) -> tuple[Inbox, list[Any], Callable[[], float]]:
    inbox = Inbox()
    calls = [0]
    plan = dict(session["inbox"])

    def on_call() -> None:
        calls[0] += 1
        action = plan.get(calls[0])
        if action == "cancel":
            inbox.cancel("from the inbox")
        elif action is not None:
            getattr(inbox, action)(UserMessage(f"m{calls[0]}", f"{action} {calls[0]}"))

    @tool
    def add(a: int, b: int) -> int:
        """Adds."""
        on_call()
        return a + b

    def fail(a: int, b: int) -> int:
        """Always fails."""
        on_call()
        raise ValueError(f"no {a}")

    async def afail(a: int, b: int) -> int:
        """Always fails."""
        return fail(a, b)

    # arun awaits an async tool; run() cannot, so it gets the sync one (same spec)
    failing = tool(name="fail")(afail) if asynchronous else tool(fail)
    ticks = iter(range(1_000, 100_000))
    return inbox, [add, failing], lambda: float(next(ticks))


def options(session: dict[str, Any], clock: Callable[[], float]) -> dict[str, Any]:
    budget = session["max_tool_calls"]
    return {
        "max_steps": session["max_steps"],
        "budget": None if budget is None else Budget(max_tool_calls=budget),
        "parallel_tools": session["parallel"],
        "tool_workers": 1,
        "clock": clock,
        "started_at": 0.0,
        "on_pause": lambda pause: Resume(budget=Budget(max_tool_calls=99)),
    }


def session_log(session: dict[str, Any], asynchronous: bool) -> EventLog:
    """The session's log under ``arun`` (``asynchronous``) or ``run``."""
    inbox, tools, clock = setup(session, asynchronous)
    log = EventLog()
    arguments: dict[str, Any] = {
        "model": script(session),
        "tools": tools,
        "log": log,
        "inbox": inbox,
        **options(session, clock),
    }
    if asynchronous:
        asyncio.run(arun([UserMessage("u1", "go")], **arguments))
    else:
        run([UserMessage("u1", "go")], **arguments)
    return log


@settings(max_examples=examples(60), deadline=None)
@given(sessions())
def test_run_and_arun_write_the_same_log_and_it_replays(session: dict[str, Any]) -> None:
    sync, concurrent = session_log(session, False), session_log(session, True)
    assert [encode_event(e) for e in concurrent] == [encode_event(e) for e in sync]
    regenerated = replay.replay(list(sync))
    assert [encode_event(e) for e in regenerated.events] == [encode_event(e) for e in sync]
