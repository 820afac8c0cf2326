"""Handoffs with a context window (DESIGN §26, §27): the window's estimate counts
the current agent's system prompt and tools (its own and its transfers), from the
step after the handoff on; a compaction summarizes with the current agent's."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import agentloop as al
import replay
from agentloop import (
    EventLog,
    FunctionModel,
    Handoff,
    Limits,
    ModelRequest,
    ScriptedModel,
    ScriptedResponse,
    ToolCall,
    UserMessage,
    estimate_request,
)

from .helpers import Ticker, check_log, encoded, examples

R = ScriptedResponse
ASK = [UserMessage("u1", "my card was charged twice")]


@al.tool
def lookup(order: str) -> str:
    """Look an order up."""
    return f"order {order}: charged twice"


def transfer(call_id: str, name: str) -> ToolCall:
    return ToolCall(call_id, f"transfer_to_{name}", {})


def run(
    model: Any, handoffs: list[Handoff], window: int | None, **options: Any
) -> tuple[al.RunResult, EventLog]:
    log = EventLog()
    result = al.run(
        ASK,
        model=model,
        tools=[lookup],
        system="You are triage.",
        handoffs=handoffs,
        agent_name="triage",
        limits=Limits(context_tokens=window),
        log=log,
        clock=Ticker(),
        **options,
    )
    check_log(log.events)
    again = replay.replay(list(log), compaction=options.get("compaction"))
    assert encoded(again.events) == encoded(log)  # byte for byte, without the model
    return result, log


def sent(request: ModelRequest) -> int:
    """The estimate of what a request sends (no usage recorded: no anchor)."""
    return estimate_request(request.messages, request.system, request.tools)


def test_the_window_counts_the_current_agent_s_prompt_and_tools() -> None:
    billing = Handoff("billing", "Billing.", system="You are billing. " * 200)  # ~850 tokens
    script = [R.tool_calls("r1", transfer("c1", "billing")), R.text("r2", "Refunded.")]
    # A window the triage agent's requests fit, the billing agent's not.
    model = ScriptedModel(script)
    result, log = run(model, [billing], 400)
    assert result.status == "failed" and result.error is not None
    assert result.error.code == "CONTEXT_OVERFLOW"
    assert "step 2" in result.error.message
    assert len(model.requests) == 1  # the billing request was not sent
    assert [e.type for e in log].count("agent.handoff") == 1
    # A window both fit: the estimate of each request is what it sends.
    model = ScriptedModel(script)
    result, _ = run(model, [billing], 2_000)
    assert result.status == "completed"
    first, second = model.requests
    assert second.system == billing.system
    assert sent(first) < 400 < sent(second) <= 2_000
    # Back to a small agent: the estimate drops with its prompt.
    back = [
        R.tool_calls("r1", transfer("c1", "billing")),
        R.tool_calls("r2", transfer("c2", "triage")),
        R.text("r3", "Done."),
    ]
    model = ScriptedModel(back)
    result, _ = run(model, [billing], 2_000)
    assert result.status == "completed"
    assert sent(model.requests[2]) < 400


def test_usage_anchors_the_estimate_until_the_agent_changes() -> None:
    """A response's recorded input tokens stand for its request; the next agent's
    prompt is another request: estimated from scratch."""
    billing = Handoff("billing", "Billing.", system="You are billing. " * 200)
    script = [
        R.tool_calls("r1", transfer("c1", "billing"), usage=al.Usage(10, 1)),
        R.text("r2", "Refunded."),
    ]
    result, _ = run(ScriptedModel(script), [billing], 400)
    # Anchored on 10 input tokens, the billing request would "fit"; it does not.
    assert result.error is not None and result.error.code == "CONTEXT_OVERFLOW"


def test_a_compaction_after_a_handoff_summarizes_with_the_current_agent() -> None:
    billing = Handoff("billing", "Billing.", system="You are billing.", tools=[lookup])
    seen: list[ModelRequest] = []

    def answer(request: ModelRequest) -> Any:
        seen.append(request)
        if request.purpose == "compaction":
            return R.text(f"s{request.step}", "Summary: charged twice.")
        if request.step == 1:
            return R.tool_calls("r1", transfer("c1", "billing"))
        if request.step < 6:
            call = ToolCall(f"k{request.step}", "lookup", {"order": "A" * 300})
            return R.tool_calls(f"r{request.step}", call)
        return R.text("r9", "Refunded.")

    compaction = al.SummarizeOlder(at=0.6, keep=0.2)
    result, log = run(FunctionModel(answer), [billing], 900, compaction=compaction, max_steps=8)
    assert result.status == "completed", result.error
    summaries = [r for r in seen if r.purpose == "compaction"]
    assert summaries and all(r.system == "You are billing." for r in summaries)
    assert all(sent(r) <= 900 for r in seen)
    assert "context.compacted" in [e.type for e in log]


# --------------------------------------------------------------------------- property

_AGENTS = ["triage", "billing", "tech"]


@st.composite
def cases(draw: st.DrawFn) -> tuple[list[list[str]], dict[str, int], int, bool]:
    steps = draw(st.lists(st.lists(st.sampled_from([*_AGENTS, "lookup"]), max_size=3), max_size=6))
    sizes = {name: draw(st.integers(0, 3_000)) for name in _AGENTS}
    return steps, sizes, draw(st.integers(50, 1_500)), draw(st.booleans())


@settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases())
def test_a_windowed_run_is_the_unwindowed_one_cut_at_the_first_request_over_it(
    case: tuple[list[list[str]], dict[str, int], int, bool],
) -> None:
    """Random transfers between agents with random prompt sizes: with a window,
    the run makes the same requests as without, up to the first whose estimate
    (the current agent's prompt and tools, and the messages) is over the window,
    and fails there with CONTEXT_OVERFLOW; every log replays byte for byte."""
    steps, sizes, window, parallel = case

    def model() -> FunctionModel:
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

        return FunctionModel(answer)

    def handoffs() -> list[Handoff]:
        return [
            Handoff("billing", "Billing.", system="b" * sizes["billing"], tools=[lookup]),
            Handoff("tech", "Tech.", system="t" * sizes["tech"], model="m"),
        ]

    def requests(window: int | None) -> tuple[al.RunResult, list[ModelRequest]]:
        made: list[ModelRequest] = []
        inner = model()

        def answer(request: ModelRequest) -> Any:
            made.append(request)
            return inner.fn(request)

        log = EventLog()
        result = al.run(
            ASK,
            model=FunctionModel(answer),
            tools=[lookup],
            system="s" * sizes["triage"],
            handoffs=handoffs(),
            agent_name="triage",
            limits=Limits(context_tokens=window),
            log=log,
            clock=Ticker(),
            max_steps=8,
            parallel_tools=parallel,
        )
        check_log(log.events)
        again = replay.replay(list(log))
        assert encoded(again.events) == encoded(log)
        return result, made

    free, every = requests(None)
    cut, windowed = requests(window)
    over = next((i for i, r in enumerate(every) if sent(r) > window), None)
    if over is None:
        assert windowed == every
        assert (cut.status, cut.final_text) == (free.status, free.final_text)
    else:
        assert windowed == every[:over]
        assert cut.status == "failed" and cut.error is not None
        assert cut.error.code == "CONTEXT_OVERFLOW"
