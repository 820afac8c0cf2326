"""Handoffs in durable sessions (DESIGN §26, §20): ``run_durable(...,
handoffs=, agent_name=)`` records the agents in ``session.start``; a resume
rebuilds them (the recorded ones, or ``handoffs=`` given again, which a session
whose handoffs hold code needs), and a crash anywhere -- mid-handoff too -- resumes
to the log an uninterrupted run writes, byte for byte."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import agentloop as al
import replay
from agentloop import (
    EventLog,
    FunctionModel,
    Handoff,
    ModelRequest,
    ScriptedResponse,
    ToolCall,
    UserMessage,
)
from replay import SQLiteStore

from .helpers import encoded, examples

R = ScriptedResponse
ASK = [UserMessage("u1", "my card was charged twice")]


def clock() -> float:
    return 100.0  # the same time for every reply: logs compare byte for byte


class Crash(BaseException):
    """A crash: the process dies here (nothing after the last commit is stored)."""


class Verdict(msgspec.Struct):
    refunded: bool


@al.tool
def lookup(order: str) -> str:
    """Look an order up."""
    return f"order {order}: charged twice"


@al.tool
def refund(order: str) -> str:
    """Refund an order."""
    return f"refunded {order}"


def users_only(messages: tuple[al.Message, ...]) -> list[al.Message]:
    return [m for m in messages if type(m) is UserMessage]


def agents(filtered: bool = False, output: bool = False) -> list[Handoff]:
    return [
        Handoff(
            "billing",
            "Billing.",
            system="You are billing.",
            tools=[refund],
            input_filter=users_only if filtered else None,
            output=Verdict if output else None,
        ),
        Handoff("tech", "Tech.", system="You are tech.", model="tech-model"),
    ]


def transfer(call_id: str, name: str) -> ToolCall:
    return ToolCall(call_id, f"transfer_to_{name}", {})


SCRIPT = [
    [ToolCall("c1", "lookup", {"order": "A1"}), transfer("c2", "billing")],
    [ToolCall("c3", "refund", {"order": "A1"})],
    [transfer("c4", "tech"), transfer("c5", "triage")],  # the second one: a tool error
]


def scripted(steps: list[list[ToolCall]], final: str = "Done.") -> Any:
    def answer(request: ModelRequest) -> Any:
        index = request.step - 1
        if index < len(steps) and steps[index]:
            return R.tool_calls(f"r{request.step}", *steps[index])
        return R.text(f"r{request.step}", final)

    return answer


def uninterrupted(steps: list[list[ToolCall]], handoffs: list[Handoff], final: str) -> EventLog:
    log = EventLog()
    al.run(
        ASK,
        model=FunctionModel(scripted(steps, final)),
        tools=[lookup],
        system="You are triage.",
        handoffs=handoffs,
        agent_name="triage",
        log=log,
        clock=clock,
        max_steps=8,
    )
    return log


def durable(store: SQLiteStore, session: str, model: Any, **options: Any) -> Any:
    options.setdefault("handoffs", agents())
    return replay.run_durable(
        store,
        session,
        options.pop("messages", ASK),
        model=model,
        tools=options.pop("tools", [lookup]),
        system="You are triage.",
        agent_name="triage",
        clock=clock,
        max_steps=8,
        **options,
    )


def test_a_durable_session_hands_off_and_replays(tmp_path: Path) -> None:
    with SQLiteStore(tmp_path / "s.db") as store:
        result = durable(store, "h", FunctionModel(scripted(SCRIPT)))
        assert result.status == "completed"  # type: ignore[union-attr]
        events = store.events("h")
        assert encoded(events) == encoded(uninterrupted(SCRIPT, agents(), "Done."))
        start = events[0]
        assert start.agent == "triage"  # type: ignore[union-attr]
        assert [s.name for s in start.handoffs] == ["billing", "tech"]  # type: ignore[union-attr]
        assert [e.to_agent for e in events if type(e) is al.HandoffEvent] == ["billing", "tech"]
        assert encoded(replay.replay(events).events) == encoded(events)
        # A finished session gives its result back, with or without the handoffs.
        assert durable(store, "h", FunctionModel(scripted([]))) == result
        assert replay.run_durable(store, "h", model=FunctionModel(scripted([])), tools=[]) == result


def test_an_agent_s_tool_among_the_starting_agent_s_is_one_tool(tmp_path: Path) -> None:
    with SQLiteStore(tmp_path / "s.db") as store:
        result = durable(store, "h", FunctionModel(scripted(SCRIPT)), tools=[lookup, refund])
        assert result.status == "completed"  # type: ignore[union-attr]
        start = store.events("h")[0]
        assert [t.name for t in start.tools] == ["lookup", "refund"]  # type: ignore[union-attr]


def test_a_resume_without_handoffs_uses_the_recorded_agents(tmp_path: Path) -> None:
    crashed: list[int] = []

    def crashing(request: ModelRequest) -> Any:
        if request.step == 2 and not crashed:
            crashed.append(request.step)
            raise Crash  # the billing agent's first request
        return scripted(SCRIPT)(request)

    with SQLiteStore(tmp_path / "s.db") as store:
        with pytest.raises(Crash):
            durable(store, "h", FunctionModel(crashing))
        assert store.session("h").status == "running"
        # Without messages and without handoffs=: session.start's agents; the
        # billing agent's tool comes from tools=.
        result = replay.run_durable(
            store, "h", model=FunctionModel(crashing), tools=[lookup, refund], clock=clock
        )
        assert result.status == "completed"  # type: ignore[union-attr]
        assert encoded(store.events("h")) == encoded(uninterrupted(SCRIPT, agents(), "Done."))


def test_handoffs_with_code_are_needed_again(tmp_path: Path) -> None:
    crashed: list[int] = []

    def crashing(request: ModelRequest) -> Any:
        if request.step == 2 and not crashed:
            crashed.append(request.step)
            raise Crash
        return scripted(SCRIPT[:2], '{"refunded": true}')(request)  # billing answers

    handoffs = agents(filtered=True, output=True)
    with SQLiteStore(tmp_path / "s.db") as store:
        with pytest.raises(Crash):
            durable(store, "h", FunctionModel(crashing), handoffs=handoffs)
        with pytest.raises(ValueError, match="pass handoffs= again") as caught:
            replay.run_durable(store, "h", model=FunctionModel(crashing), tools=[lookup, refund])
        assert "billing" in str(caught.value) and "tech" not in str(caught.value)
        assert store.session("h").lease_owner is None  # released
        # Other handoffs than the recorded ones: the replay diverges at session.start.
        with pytest.raises(replay.ReplayDivergence, match="handoffs"):
            durable(store, "h", FunctionModel(crashing), handoffs=agents(), messages=None)
        result = durable(store, "h", FunctionModel(crashing), handoffs=handoffs, messages=None)
        assert result.status == "completed"  # type: ignore[union-attr]
        assert result.output == Verdict(refunded=True)  # type: ignore[union-attr]
        expected = uninterrupted(SCRIPT[:2], handoffs, '{"refunded": true}')
        assert encoded(store.events("h")) == encoded(expected)
        # Started with other handoffs: refused, naming the difference.
        with pytest.raises(ValueError, match="started differently"):
            durable(store, "h", FunctionModel(crashing), handoffs=agents())


def test_arun_durable_hands_off(tmp_path: Path) -> None:
    async def main() -> Any:
        with SQLiteStore(tmp_path / "s.db") as store:
            result = await replay.arun_durable(
                store,
                "h",
                ASK,
                model=FunctionModel(scripted(SCRIPT)),
                tools=[lookup],
                system="You are triage.",
                handoffs=agents(),
                agent_name="triage",
                clock=clock,
                max_steps=8,
            )
            return result, store.events("h")

    result, events = asyncio.run(main())
    assert result.status == "completed"
    assert encoded(events) == encoded(uninterrupted(SCRIPT, agents(), "Done."))


# --------------------------------------------------------------------------- property

_NAMES = ["triage", "billing", "tech", "nobody"]


@st.composite
def cases(draw: st.DrawFn) -> tuple[list[list[str]], bool, float, bool]:
    steps = draw(
        st.lists(
            st.lists(st.sampled_from([*_NAMES, "lookup", "refund"]), min_size=1, max_size=3),
            max_size=5,
        )
    )
    return steps, draw(st.booleans()), draw(st.floats(0, 1)), draw(st.booleans())


@settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases())
def test_a_crash_anywhere_resumes_to_the_uninterrupted_log(
    tmp_path_factory: pytest.TempPathFactory, case: tuple[list[list[str]], bool, float, bool]
) -> None:
    """Random transfers, lookups and refunds; the process crashes at the n-th model
    or tool call (mid-handoff: between a transfer and the new agent's first request,
    in a tool of the transferring step, ...); the next ``run_durable`` (the same
    call, or one without messages) ends with the log an uninterrupted run writes."""
    names, filtered, where, again_with_messages = case
    steps = [
        [
            ToolCall(f"c{i}-{j}", name, {"order": "A"})
            if name in ("lookup", "refund")
            else transfer(f"c{i}-{j}", name)
            for j, name in enumerate(step)
        ]
        for i, step in enumerate(names)
    ]
    count = [0]
    crash_at = 0  # (first a run without a crash counts the calls)

    def tick() -> None:
        count[0] += 1
        if count[0] == crash_at:
            raise Crash

    def answer(request: ModelRequest) -> Any:
        tick()
        return scripted(steps)(request)

    @al.tool(name="lookup")
    def crashing_lookup(order: str) -> str:
        """Look an order up."""
        tick()
        return f"order {order}: charged twice"

    @al.tool(name="refund")
    def crashing_refund(order: str) -> str:
        """Refund an order."""
        tick()
        return f"refunded {order}"

    handoffs = [
        Handoff(
            "billing",
            "Billing.",
            system="You are billing.",
            tools=[crashing_refund],
            input_filter=users_only if filtered else None,
        ),
        Handoff("tech", "Tech.", system="You are tech.", model="tech-model"),
    ]
    expected = uninterrupted(steps, agents(filtered=filtered), "Done.")
    # (The unknown tool "refund" of the triage agent: a loop-made error, as in run.)
    directory = tmp_path_factory.mktemp("db")
    with SQLiteStore(directory / "count.db") as store:
        durable(store, "h", FunctionModel(answer), tools=[crashing_lookup], handoffs=handoffs)
    crash_at, count[0] = 1 + int(where * count[0]), 0  # a model or tool call, or none
    with SQLiteStore(directory / "s.db") as store:
        try:
            first = durable(
                store, "h", FunctionModel(answer), tools=[crashing_lookup], handoffs=handoffs
            )
        except Crash:
            first = None
            options: dict[str, Any] = {} if again_with_messages else {"messages": None}
            result = durable(
                store,
                "h",
                FunctionModel(answer),
                tools=[crashing_lookup],
                handoffs=handoffs,
                **options,
            )
        else:
            result = first
        assert result.status in ("completed", "max_steps")  # type: ignore[union-attr]
        events = store.events("h")
        assert encoded(events) == encoded(expected)
        assert encoded(replay.replay(events).events) == encoded(events)
        handed = any(type(e) is al.HandoffEvent for e in events)
        event(f"crashed: {first is None}, handed off: {handed}")


def test_a_submitted_session_with_handoffs_runs_on_a_worker(tmp_path: Path) -> None:
    with SQLiteStore(tmp_path / "s.db") as store:
        replay.submit(
            store,
            "h",
            ASK,
            tools=[lookup],
            system="You are triage.",
            handoffs=agents(),
            agent_name="triage",
            max_steps=8,
            started_at=100.0,
        )
        info = store.session("h")
        # The stored config names the agents and their tools (a factory serves them).
        assert info.config["agent"] == "triage"
        assert info.config["handoffs"] == {"billing": ["refund"], "tech": []}
        assert info.config["tools"] == ["lookup"]

        def factory(info: replay.SessionInfo) -> replay.SessionSetup:
            served = ["lookup", *(t for ts in info.config["handoffs"].values() for t in ts)]
            tools = {"lookup": lookup, "refund": refund}
            return replay.SessionSetup(
                model=FunctionModel(scripted(SCRIPT)),
                tools=[tools[name] for name in served],
                options={"clock": clock},
            )

        stats = replay.Worker(store, factory).run()
        assert stats.finished == {"completed": 1}
        assert encoded(store.events("h")) == encoded(uninterrupted(SCRIPT, agents(), "Done."))
