"""Handoffs: the model transfers the conversation to another agent (DESIGN §26).

The loop runs ``transfer_to_<name>`` itself, records ``agent.handoff`` at the
step's end, and the next request is the new agent's (system, tools, model name,
output, the input filter's view). Every log replays byte for byte, with the
handoffs given again or from what the log records.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import agentloop as al
import replay
from agentloop import (
    CALLER_PROTOCOL_ERROR,
    AssistantMessage,
    CallerProtocolError,
    EventLog,
    FunctionModel,
    Handoff,
    HandoffEvent,
    HandoffSpec,
    Limits,
    ModelRequest,
    ScriptedModel,
    ScriptedResponse,
    ToolCall,
    ToolRequest,
    ToolResult,
    ToolResultMessage,
    UserMessage,
    agent_loop,
    encode_event,
)

from .helpers import Ticker, check_log, encoded

R = ScriptedResponse
ASK = [UserMessage("u1", "my card was charged twice")]


@al.tool
def lookup(order: str) -> str:
    """Look an order up."""
    return f"order {order}: charged twice"


@al.tool
def refund(order: str) -> str:
    """Refund an order."""
    return f"refunded {order}"


@al.tool
def reboot(device: str) -> str:
    """Reboot a device."""
    return f"rebooted {device}"


class Verdict(msgspec.Struct):
    refunded: bool


def users_only(messages: tuple[al.Message, ...]) -> list[al.Message]:
    return [m for m in messages if type(m) is UserMessage]


def agents(**overrides: Any) -> list[Handoff]:
    billing = dict(
        description="Billing: charges, refunds.",
        system="You are billing.",
        tools=[refund],
        model="billing-model",
    )
    billing.update(overrides)
    return [
        Handoff("billing", **billing),
        Handoff("tech", "Technical problems.", system="You are tech.", tools=[reboot]),
    ]


def transfer(call_id: str, name: str) -> ToolCall:
    return ToolCall(call_id, f"transfer_to_{name}", {})


def run(script: list[ScriptedResponse], **options: Any) -> tuple[al.RunResult, EventLog, Any]:
    model = ScriptedModel(script)
    log = EventLog()
    options.setdefault("handoffs", agents())
    options.setdefault("agent_name", "triage")
    result = al.run(
        ASK,
        model=model,
        tools=options.pop("tools", [lookup]),
        system="You are triage.",
        log=log,
        clock=Ticker(),
        **options,
    )
    check_log(log.events)
    return result, log, model


def replays(log: EventLog, **options: Any) -> None:
    again = replay.replay(list(log), **options)
    assert encoded(again.events) == encoded(log)


# --------------------------------------------------------------------------- the transfer


def test_a_transfer_moves_the_next_request_to_the_new_agent() -> None:
    result, log, model = run(
        [
            R.tool_calls(
                "r1", ToolCall("c0", "lookup", {"order": "A1"}), transfer("c1", "billing")
            ),
            R.tool_calls("r2", ToolCall("c2", "refund", {"order": "A1"})),
            R.text("r3", "Refunded A1."),
        ]
    )
    assert result.status == "completed" and result.final_text == "Refunded A1."
    first, second, third = model.requests
    assert (first.system, first.model) == ("You are triage.", None)
    assert [t.name for t in first.tools] == ["lookup", "transfer_to_billing", "transfer_to_tech"]
    assert (second.system, second.model) == ("You are billing.", "billing-model")
    assert [t.name for t in second.tools] == ["refund", "transfer_to_triage", "transfer_to_tech"]
    assert second.tools[2].description == "Technical problems."
    assert [m.id for m in second.messages] == [m.id for m in third.messages][:4]  # no filter
    kinds = [e.type for e in log]
    at = kinds.index("agent.handoff")
    assert kinds[at - 1 : at + 2] == ["tool.result", "agent.handoff", "step.end"]
    event = log.events[at]
    assert event == HandoffEvent(
        sequence=at, at=event.at, step=1, from_agent="triage", to_agent="billing", call_id="c1"
    )
    done = log.events[at - 1]
    assert done.message.content == "Transferred to billing." and done.reply is None
    start = log.events[0]
    assert start.agent == "triage" and [s.name for s in start.handoffs] == ["billing", "tech"]
    assert start.tools == (lookup.spec,)  # the starting agent's own
    replays(log)
    replays(log, handoffs=agents())


def test_the_input_filter_chooses_what_the_next_agent_sees() -> None:
    result, log, model = run(
        [
            R.tool_calls(
                "r1", ToolCall("c0", "lookup", {"order": "A1"}), transfer("c1", "billing")
            ),
            R.tool_calls("r2", ToolCall("c2", "refund", {"order": "A1"})),
            R.text("r3", "Refunded."),
        ],
        handoffs=agents(input_filter=users_only),
    )
    assert result.status == "completed"
    assert [m.id for m in model.requests[1].messages] == ["u1"]
    assert [m.id for m in model.requests[2].messages] == ["u1", "message-r2", "tool-result-c2"]
    assert len(result.messages) == 7  # the transcript keeps everything
    handoff = next(e for e in log if type(e) is HandoffEvent)
    assert handoff.kept == ("u1",)
    assert log.events[0].handoffs[0].filtered
    replays(log)  # the recorded outcome
    replays(log, handoffs=agents(input_filter=users_only))  # the filter again

    def everything(messages: tuple[al.Message, ...]) -> list[al.Message]:
        return list(messages)

    with pytest.raises(replay.ReplayDivergence) as caught:
        replay.replay(list(log), handoffs=agents(input_filter=everything))
    assert "kept" in str(caught.value) and caught.value.sequence == handoff.sequence


def test_back_and_forth_and_the_model_s_mistakes_are_tool_errors() -> None:
    result, log, model = run(
        [
            R.tool_calls("r1", transfer("c1", "nobody")),
            R.tool_calls("r2", transfer("c2", "triage")),
            R.tool_calls("r3", transfer("c3", "tech"), transfer("c4", "billing")),
            R.tool_calls("r4", transfer("c5", "triage")),
            R.text("r5", "Back at triage."),
        ],
        max_steps=6,
    )
    assert result.status == "completed"
    errors = {e.message.tool_call_id: e.message.content for e in log if e.type == "tool.error"}
    assert errors == {
        "c1": "unknown agent 'nobody': the agents are billing, tech, triage",
        "c2": "the conversation is already with 'triage'",
        "c4": "this step already transfers to 'tech': one transfer per step",
    }
    moves = [(e.from_agent, e.to_agent, e.call_id) for e in log if type(e) is HandoffEvent]
    assert moves == [("triage", "tech", "c3"), ("tech", "triage", "c5")]
    assert [r.system for r in model.requests] == ["You are triage."] * 3 + [
        "You are tech.",
        "You are triage.",
    ]
    replays(log)


def test_a_transfer_in_a_parallel_batch_and_under_a_before_tool_call_hook() -> None:
    seen: list[str] = []
    hooks = al.HookRegistry()
    hooks.on("before_tool_call", lambda payload: seen.append(payload["tool_name"]))
    result, log, _ = run(
        [
            R.tool_calls("r1", ToolCall("c0", "lookup", {"order": "A1"}), transfer("c1", "tech")),
            R.text("r2", "Rebooted."),
        ],
        parallel_tools=True,
        hooks=hooks,
    )
    assert result.status == "completed" and seen == ["lookup"]  # a transfer is not gated
    replays(log, hooks=hooks)


def test_the_new_agent_s_output_type_checks_its_answer() -> None:
    result, log, model = run(
        [
            R.tool_calls("r1", transfer("c1", "billing")),
            R.text("r2", "not json"),
            R.text("r3", '{"refunded": true}'),
        ],
        handoffs=agents(output=Verdict),
    )
    assert result.status == "completed" and result.output == Verdict(True)
    assert model.requests[0].output is None and model.requests[1].output.name == "Verdict"
    replays(log)  # by the recorded verdicts
    assert replay.replay(list(log), handoffs=agents(output=Verdict)).result.output == Verdict(True)
    with pytest.raises(replay.ReplayError, match="give handoffs="):
        replay.replay(list(log), output=Verdict)


def test_the_driver_runs_every_agent_s_tools_and_drive_needs_them_all() -> None:
    loop = agent_loop(ASK, tools=[lookup], handoffs=agents(), agent_name="triage")
    assert loop.agent == "triage"
    assert [t.name for t in loop.tools] == ["lookup", "refund", "reboot"]
    model = ScriptedModel([R.tool_calls("r1", transfer("c1", "tech")), R.text("r2", "ok")])
    with pytest.raises(ValueError, match="the tools do not match"):
        al.drive(loop, model=model, tools=[lookup])
    assert al.drive(loop, model=model, tools=[lookup, refund, reboot]).status == "completed"
    assert loop.agent == "tech"
    assert agent_loop(ASK, tools=[]).agent is None


def test_arun_hands_off_too() -> None:
    model = ScriptedModel(
        [
            R.tool_calls("r1", transfer("c1", "tech")),
            R.tool_calls("r2", ToolCall("c2", "reboot", {"device": "router"})),
            R.text("r3", "Rebooted."),
        ]
    )
    log = EventLog()
    result = asyncio.run(al.arun(ASK, model=model, tools=[], handoffs=agents(), log=log))
    assert result.status == "completed"
    assert [e.to_agent for e in log if type(e) is HandoffEvent] == ["tech"]
    assert log.events[0].agent == "main"
    replays(log)


def test_the_engine_yields_no_tool_request_for_a_transfer() -> None:
    loop = agent_loop(ASK, tools=[], handoffs=agents())
    effect = next(loop)
    assert type(effect) is ModelRequest
    effect = loop.send(al.ModelResponse(effect.id, "r1", (transfer("c1", "tech"),), "tool_call"))
    assert type(effect) is ModelRequest and effect.system == "You are tech."
    effect = loop.send(
        al.ModelResponse(effect.id, "r2", (ToolCall("c2", "reboot", {"device": "x"}),), "tool_call")
    )
    assert type(effect) is ToolRequest
    effect = loop.send(ToolResult("c2", "done"))
    assert type(effect) is ModelRequest and effect.id == "request-003"
    with pytest.raises(StopIteration):
        loop.send(al.ModelResponse("request-003", "r3", (al.TextBlock("ok"),), "stop"))


def test_a_handoff_at_the_step_limit_is_recorded_and_the_run_ends() -> None:
    result, log, _ = run([R.tool_calls("r1", transfer("c1", "tech"))], max_steps=1)
    assert result.status == "max_steps"
    assert [e.type for e in log][-4:] == [
        "agent.handoff",
        "step.end",
        "session.complete",
        "run.finished",
    ]
    replays(log)


# --------------------------------------------------------------------------- filter mistakes


def _kept_call_only(messages: tuple[al.Message, ...]) -> list[al.Message]:
    return [m for m in messages if type(m) is not ToolResultMessage]


def _kept_result_only(messages: tuple[al.Message, ...]) -> list[al.Message]:
    return [m for m in messages if type(m) is not AssistantMessage]


def _raises(messages: tuple[al.Message, ...]) -> list[al.Message]:
    raise KeyError("oops")


def _copies(messages: tuple[al.Message, ...]) -> list[al.Message]:
    return [UserMessage("u1", "my card was charged twice")]


def _reversed(messages: tuple[al.Message, ...]) -> list[al.Message]:
    return list(reversed(messages))


def _not_a_list(messages: tuple[al.Message, ...]) -> Any:
    return iter(messages)


def _not_a_message(messages: tuple[al.Message, ...]) -> Any:
    return [42]


@pytest.mark.parametrize(
    ("input_filter", "problem"),
    [
        (_raises, "input_filter raised KeyError: 'oops'"),
        (_copies, "returned item 0 (UserMessage 'u1'), which is not one of the transcript's"),
        (_reversed, "returned item 1 (AssistantMessage 'message-r1'), which is not one"),
        (_not_a_list, "must return a list of the transcript's messages, got tuple_iterator"),
        (_not_a_message, "returned item 0 (int), which is not one"),
        (_kept_call_only, "kept one side of tool call 'c1' without its result"),
        (_kept_result_only, "kept one side of tool call 'c1' without its call"),
    ],
)
def test_a_filter_that_fails_is_the_caller_s_fault(input_filter: Any, problem: str) -> None:
    model = ScriptedModel([R.tool_calls("r1", transfer("c1", "billing"))])
    log = EventLog()
    with pytest.raises(CallerProtocolError) as caught:
        al.run(ASK, model=model, tools=[], handoffs=agents(input_filter=input_filter), log=log)
    assert "handoff to 'billing': input_filter" in str(caught.value)
    finished = log.events[-1]
    assert finished.error.code == CALLER_PROTOCOL_ERROR
    assert problem.split("got")[0] in finished.error.message
    assert "agent.handoff" not in [e.type for e in log]
    replays(log, handoffs=agents(input_filter=input_filter))


def test_a_recorded_filter_asked_past_the_log_says_what_to_pass() -> None:
    _result, log, _ = run(
        [R.tool_calls("r1", transfer("c1", "billing")), R.text("r2", "hi")],
        handoffs=agents(input_filter=users_only),
    )
    cut = list(log)[:3]  # before the transfer: resume without the filter
    loop, effect = replay.resume(cut)
    assert type(effect) is ModelRequest
    with pytest.raises(CallerProtocolError, match="pass handoffs="):
        loop.send(al.ModelResponse(effect.id, "r1", (transfer("c1", "billing"),), "tool_call"))
    loop, effect = replay.resume(cut, handoffs=agents(input_filter=users_only))
    effect = loop.send(al.ModelResponse(effect.id, "r1", (transfer("c1", "billing"),), "tool_call"))
    assert [m.id for m in effect.messages] == ["u1"]


# --------------------------------------------------------------------------- bad options


def _bad(*handoffs: Any, **options: Any) -> None:
    agent_loop(ASK, tools=options.pop("tools", [lookup]), handoffs=list(handoffs), **options)


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (lambda: _bad(agent_name="x"), ValueError, "agent_name names the starting agent"),
        (
            lambda: agent_loop(ASK, tools=[], handoffs="billing"),
            TypeError,
            "handoffs must be a list",
        ),  # type: ignore[arg-type]
        (lambda: _bad("billing"), TypeError, r"handoffs\[0\] must be a Handoff, got str"),
        (lambda: _bad(Handoff("")), ValueError, r"handoffs\[0\].name must be 1-52"),
        (lambda: _bad(Handoff("a b")), ValueError, "must be 1-52 characters"),
        (lambda: _bad(Handoff("x" * 53)), ValueError, "must be 1-52 characters"),
        (lambda: _bad(Handoff(3)), TypeError, r"handoffs\[0\].name must be a str, got int"),  # type: ignore[arg-type]
        (lambda: _bad(Handoff("a"), agent_name="é"), ValueError, "agent_name must be 1-52"),
        (lambda: _bad(Handoff("a"), agent_name=7), TypeError, "agent_name must be a str"),
        (lambda: _bad(Handoff("a"), Handoff("a")), ValueError, "two agents are named 'a'"),
        (lambda: _bad(Handoff("main")), ValueError, "two agents are named 'main'"),
        (lambda: _bad(Handoff("a", 5)), TypeError, "handoff 'a': description must be a str"),  # type: ignore[arg-type]
        (lambda: _bad(Handoff("a", model=5)), TypeError, "handoff 'a': model must be a str"),  # type: ignore[arg-type]
        (lambda: _bad(Handoff("a", input_filter=5)), TypeError, "input_filter must be callable"),  # type: ignore[arg-type]
        (lambda: _bad(Handoff("a", tools=[5])), TypeError, r"handoff 'a': tools\[0\] is not"),
        (
            lambda: _bad(Handoff("a", output=Verdict), output_retries=-1),
            ValueError,
            "output_retries",
        ),
        (
            lambda: _bad(Handoff("a", tools=[al.ToolSpec("transfer_to_b")])),
            ValueError,
            "tool 'transfer_to_b' starts with 'transfer_to_'",
        ),
        (
            lambda: _bad(Handoff("a", tools=[al.ToolSpec("lookup")])),
            ValueError,
            "tool 'lookup' takes other parameters",
        ),
        (
            lambda: _bad(
                Handoff("a", input_filter=users_only), limits=Limits(context_tokens=10_000)
            ),
            ValueError,
            "handoff 'a': an input_filter together with Limits.context_tokens is not supported",
        ),
    ],
)
def test_bad_handoff_options_raise_naming_them(call: Any, error: type, message: str) -> None:
    with pytest.raises(error, match=message):
        call()


def test_no_handoffs_is_a_plain_run() -> None:
    loop = agent_loop(ASK, tools=[], handoffs=[])
    next(loop)
    start = loop.log.events[0]
    assert start.agent is None and start.handoffs == ()
    assert b"handoffs" not in encode_event(start) and b"agent" not in encode_event(start)


def test_the_same_tool_in_two_agents_is_one_tool() -> None:
    loop = agent_loop(ASK, tools=[lookup], handoffs=[Handoff("a", tools=[lookup, refund])])
    assert [t.name for t in loop.tools] == ["lookup", "refund"]


def test_handoff_spec_and_event_round_trip() -> None:
    spec = HandoffSpec(name="a", tools=(lookup.spec,), filtered=True)
    assert msgspec.json.decode(msgspec.json.encode(spec), type=HandoffSpec) == spec
    event = HandoffEvent(sequence=3, from_agent="a", to_agent="b", call_id="c", kept=())
    assert al.decode_event(encode_event(event)) == event


# --------------------------------------------------------------------------- snapshot


def test_handoff_log_snapshot(snapshot: Any) -> None:
    _, log, _ = run(
        [
            R.tool_calls("r1", transfer("c1", "billing")),
            R.tool_calls("r2", ToolCall("c2", "refund", {"order": "A1"})),
            R.text("r3", "Refunded."),
        ],
        handoffs=agents(input_filter=users_only),
    )
    assert [encode_event(e).decode() for e in log] == snapshot


# --------------------------------------------------------------------------- property


_NAMES = ["main", "billing", "tech", "nobody"]


@st.composite
def sessions(draw: st.DrawFn) -> tuple[list[list[str]], bool, bool]:
    steps = draw(st.lists(st.lists(st.sampled_from([*_NAMES, "lookup"]), max_size=3), max_size=6))
    return steps, draw(st.booleans()), draw(st.booleans())


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sessions())
def test_random_handoff_sessions_replay_byte_for_byte(
    case: tuple[list[list[str]], bool, bool],
) -> None:
    steps, filtered, parallel = case
    calls = 0

    def answer(request: ModelRequest) -> Any:
        nonlocal calls
        index = request.step - 1
        if index >= len(steps) or not steps[index]:
            return "done"
        blocks = []
        for name in steps[index]:
            calls += 1
            if name == "lookup":
                blocks.append(ToolCall(f"c{calls}", "lookup", {"order": "A"}))
            else:
                blocks.append(transfer(f"c{calls}", name))
        return R.tool_calls(f"r{request.step}", *blocks)

    handoffs = [
        Handoff(
            "billing", system="B", tools=[lookup], input_filter=users_only if filtered else None
        ),
        Handoff("tech", system="T", model="m"),
    ]
    log = EventLog()
    result = al.run(
        ASK,
        model=FunctionModel(answer),
        tools=[lookup],
        handoffs=handoffs,
        log=log,
        clock=Ticker(),
        max_steps=8,
        parallel_tools=parallel,
    )
    check_log(log.events)
    assert result.status in ("completed", "max_steps")
    # The agent after each step follows the rules, and the log says so.
    current = "main"
    for event in log:
        if type(event) is HandoffEvent:
            assert event.from_agent == current != event.to_agent
            current = event.to_agent
    assert [al.decode_event(encode_event(e)) for e in log] == list(log)  # the log reads back
    replays(log)
    replays(log, handoffs=handoffs)


def test_a_written_log_reads_back_and_replays(tmp_path: Path) -> None:
    _, log, _ = run(
        [R.tool_calls("r1", transfer("c1", "tech")), R.text("r2", "ok")],
        handoffs=agents(input_filter=users_only),
    )
    path = tmp_path / "handoff.jsonl"
    replay.write_log(path, log)
    events = replay.read_log(path)
    assert encoded(events) == encoded(log)
    assert encoded(replay.replay(events).events) == encoded(log)


def test_an_answer_that_never_decodes_fails_and_replays_by_its_verdicts() -> None:
    result, log, _ = run(
        [R.tool_calls("r1", transfer("c1", "billing")), R.text("r2", "not json")],
        handoffs=agents(output=Verdict),
        output_retries=0,
    )
    assert result.status == "failed" and result.error.code == al.OUTPUT_INVALID
    replays(log)


def test_fork_after_a_handoff_continues_with_the_new_agent() -> None:
    _, log, _ = run(
        [R.tool_calls("r1", transfer("c1", "tech")), R.text("r2", "ok")],
    )
    at = next(e.sequence for e in log if type(e) is HandoffEvent)
    loop, effect = replay.fork(list(log), at, handoffs=agents())
    assert type(effect) is ModelRequest and effect.system == "You are tech."
    assert loop.agent == "tech"


# --------------------------------------------------------------------------- the golden log


GOLDEN = Path(__file__).resolve().parent.parent / "fixtures" / "handoff_session.jsonl"


def test_the_golden_log_shows_checks_and_views_its_handoffs(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from replay.__main__ import main

    assert main(["show", str(GOLDEN)]) == 0
    shown = capsys.readouterr().out
    assert "agent 'triage', handoffs: 'billing'" in shown
    assert (
        "agent.handoff     'triage' -> 'billing' (call 'call-1', sees 1 earlier message(s))"
        in shown
    )
    assert "agent.handoff     'billing' -> 'triage' (call 'call-3')" in shown
    assert main(["check", str(GOLDEN)]) == 0
    events = replay.read_log(GOLDEN)
    replayed = replay.replay(events)
    assert replayed.result.final_text == "Your order A17 was refunded (12.50 EUR)."
    from replay._view import render_html

    page = render_html(events, source=str(GOLDEN))
    assert "agent.handoff" in page and '"agent.handoff"(e)' in page  # the data and its renderer


def test_other_handoffs_than_the_recorded_ones_diverge_at_session_start() -> None:
    _, log, _ = run([R.tool_calls("r1", transfer("c1", "tech")), R.text("r2", "ok")])
    for other in (agents(system="You are someone else."), agents()[:1], agents(model="big")):
        with pytest.raises(replay.ReplayDivergence) as caught:
            replay.replay(list(log), handoffs=other)
        assert caught.value.sequence == 0 and "handoffs:" in str(caught.value)
