"""The context window (DESIGN §27): the estimator, CONTEXT_OVERFLOW before sending,
compaction policies whose view replays byte for byte, and the 500-step session."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import replay
from agentloop import (
    CONTEXT_OVERFLOW,
    ERROR_CODES,
    MODEL_PROTOCOL_ERROR,
    AssistantMessage,
    CompactionPolicy,
    ContextCompactedEvent,
    ContextState,
    EventLog,
    FunctionModel,
    Limits,
    Message,
    ModelRequest,
    ProviderBlock,
    RunResult,
    ScriptedResponse,
    Summarize,
    SummarizeOlder,
    TextBlock,
    ThinkingBlock,
    ToolCall,
    ToolResultMessage,
    Trim,
    TrimToolResults,
    Usage,
    UserMessage,
    agent_loop,
    content_chars,
    encode_event,
    estimate_message,
    estimate_request,
    run,
    tool,
    validate_transcript,
)
from agentloop._context import TRIM_MARKER, policy_from_spec, trimmed
from tests.helpers import examples

from . import context_session as session
from .helpers import encoded, subprocess_env

ROOT = Path(__file__).resolve().parent.parent


@tool
def fetch(n: int) -> str:
    """Fetch document n."""
    return f"doc {n} " + "x" * 1200


def reading_model(steps: int, *, usage: bool = True) -> FunctionModel:
    """Calls ``fetch`` each step until ``steps``; summarises when asked."""

    def fn(request: ModelRequest) -> Any:
        tokens = estimate_request(request.messages, request.system, request.tools)
        reported = Usage(tokens, 5) if usage else None
        if request.purpose == "compaction":
            return ScriptedResponse.text(f"s{request.step}", "earlier: docs read", reported)
        if request.step >= steps:
            return ScriptedResponse.text(f"r{request.step}", "done", reported)
        call = ToolCall(f"c{request.step}", "fetch", {"n": request.step})
        return ScriptedResponse.tool_calls(f"r{request.step}", call, usage=reported)

    return FunctionModel(fn)


def go(steps: int, window: int | None, policy: Any = None, **options: Any) -> tuple[Any, ...]:
    model, log = reading_model(steps, usage=options.pop("usage", True)), EventLog()
    result = run(
        [UserMessage("u1", "read")],
        model=model,
        tools=[fetch],
        max_steps=steps,
        limits=Limits(agent_steps=max(steps, 64), context_tokens=window),
        compaction=policy,
        log=log,
        clock=lambda: 0.0,
        **options,
    )
    return result, model, log


# --------------------------------------------------------------------------- estimator


def test_the_estimator_counts_characters_over_four_plus_four_per_message() -> None:
    call = ToolCall("c1", "fetch", {"n": 1})
    block = ProviderBlock("anthropic", "compaction", {"content": "abc"})
    assert content_chars("abcd") == 4
    assert content_chars((TextBlock("ab"), ThinkingBlock("cde"))) == 5
    assert content_chars((call,)) == len("fetch") + len(b'{"n":1}')
    assert content_chars((block,)) == len(msgspec.json.encode(block))
    assert estimate_message(UserMessage("u", "")) == 4
    assert estimate_message(UserMessage("u", "x" * 9)) == 4 + 3
    result = ToolResultMessage("t", "c1", "fetch", "y" * 8)
    assert estimate_message(result) == 6
    spec_chars = len(msgspec.json.encode(fetch.spec))
    assert estimate_request([result], "s" * 4, [fetch.spec]) == 6 + 1 + -(-spec_chars // 4)


@pytest.mark.parametrize("window", [0, -1, 2**31, 1.5, "100", True])
def test_context_tokens_must_be_a_positive_int_or_none(window: object) -> None:
    with pytest.raises(ValueError, match=r"Limits.context_tokens must be None or an int"):
        Limits(context_tokens=window)  # type: ignore[arg-type]


def test_a_window_is_recorded_in_session_start_and_none_is_left_out() -> None:
    assert CONTEXT_OVERFLOW in ERROR_CODES
    assert b"limits" not in encode_event(_start(None))
    assert b'"context_tokens":5000' in encode_event(_start(5000))


def _start(window: int | None) -> Any:
    loop = agent_loop([UserMessage("u1", "hi")], tools=[], limits=Limits(context_tokens=window))
    next(loop)
    return loop.log[0]


# --------------------------------------------------------------------------- overflow


def test_without_a_policy_the_overflowing_request_is_never_sent() -> None:
    result, model, log = go(40, 6000)
    assert result.status == "failed" and result.error.code == CONTEXT_OVERFLOW
    assert result.error.message.startswith(f"step {result.steps}: the request would need about ")
    assert "over the context window of 6000 (Limits.context_tokens); it was not sent" in (
        result.error.message
    )
    assert "compaction=SummarizeOlder()" in result.error.message
    # Every request sent fit; the one that did not was never made.
    assert len(model.requests) == result.steps - 1
    assert all(estimate_request(r.messages, r.system, r.tools) <= 6000 for r in model.requests)
    assert log[-3].type == "step.start"
    assert replay.replay(list(log)).result == msgspec.structs.replace(result)


def test_the_estimate_anchors_on_the_last_recorded_input_tokens() -> None:
    """A model reporting more input tokens than the estimate brings the overflow sooner."""

    def fn(request: ModelRequest) -> Any:
        call = ToolCall(f"c{request.step}", "fetch", {"n": request.step})
        return ScriptedResponse.tool_calls(f"r{request.step}", call, usage=Usage(4000, 1))

    result = run(
        [UserMessage("u1", "read")],
        model=FunctionModel(fn),
        tools=[fetch],
        limits=Limits(context_tokens=4300),
        max_steps=8,
    )
    # 4000 recorded + the assistant message and a ~300-token result: step 2 fails.
    assert result.error.code == CONTEXT_OVERFLOW and result.steps == 2
    unanchored, _, _ = go(8, 4300, usage=False)
    assert unanchored.status == "max_steps" or unanchored.steps > 2


def test_without_a_window_nothing_is_estimated_or_checked() -> None:
    result, model, _log = go(30, None)
    assert result.status == "completed" and len(model.requests) == 30
    assert all(r.purpose == "step" for r in model.requests)


# --------------------------------------------------------------------------- summarise


def test_a_summarised_session_keeps_its_history_and_replays_byte_for_byte() -> None:
    result, model, log = go(60, 5000, SummarizeOlder())
    assert result.status == "completed" and result.steps == 60
    # The full history stays in RunResult.messages and the log.
    assert len(result.messages) == 1 + 59 * 2 + 1
    compactions = [e for e in log if type(e) is ContextCompactedEvent]
    assert compactions and all(e.how == "summarize" for e in compactions)
    summaries = [r for r in model.requests if r.purpose == "compaction"]
    assert len(summaries) == len(compactions)
    assert all(r.id == f"compaction-{r.step:03d}" for r in summaries)
    for event in compactions:
        assert event.summary is not None
        assert event.summary.content.endswith("earlier: docs read")
        assert event.tokens_after < event.tokens_before
    # The model sees the summary, then the messages from the cut on.
    after = next(r for r in model.requests if r.purpose == "step" and r.step == compactions[0].step)
    assert after.messages[0] == compactions[0].summary
    assert list(after.messages[1:]) == list(
        result.messages[compactions[0].start : len(after.messages) - 1 + compactions[0].start]
    )
    assert all(estimate_request(r.messages, r.system, r.tools) <= 5000 for r in model.requests)
    again = replay.replay(list(log))
    assert encoded(again.events) == encoded(log)


def test_the_summary_request_holds_the_previous_summary_and_the_older_turns() -> None:
    _, model, log = go(80, 5000, SummarizeOlder(at=0.6, keep=0.2, instructions="Sum up."))
    compactions = [e for e in log if type(e) is ContextCompactedEvent]
    summaries = [r for r in model.requests if r.purpose == "compaction"]
    assert len(summaries) >= 2
    second = summaries[1]
    assert second.messages[0] == compactions[0].summary
    assert second.messages[-1] == UserMessage(f"compaction-request-{second.step:03d}", "Sum up.")
    assert second.tools == (fetch.spec,)


def test_the_spec_is_recorded_and_a_replay_rebuilds_the_policy() -> None:
    policy = SummarizeOlder(at=0.6, keep=0.2)
    _, _, log = go(30, 5000, policy)
    assert log[0].compaction == {"policy": "summarize_older", "at": 0.6, "keep": 0.2}
    assert policy_from_spec(log[0].compaction) == policy
    assert policy_from_spec(TrimToolResults().spec()) == TrimToolResults()


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"policy": "mine"}, "compaction policy 'mine' is not a built-in one"),
        ({}, "compaction policy None is not a built-in one"),
        ({"policy": "summarize_older", "at": "x"}, "compaction policy 'summarize_older': "),
        ({"policy": "trim_tool_results", "head": -1}, "TrimToolResults.head must be an int >= 0"),
    ],
)
def test_a_spec_that_names_no_built_in_policy_is_refused(
    spec: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        agent_loop([], tools=[], limits=Limits(context_tokens=100), compaction=spec)


@pytest.mark.parametrize(
    ("make", "error", "message"),
    [
        (
            lambda: SummarizeOlder(at=1.5),
            ValueError,
            r"SummarizeOlder.at must be a float in \(0, 1\]",
        ),
        (lambda: SummarizeOlder(keep=0), ValueError, "SummarizeOlder.keep must be a float"),
        (lambda: SummarizeOlder(at=0.5, keep=0.5), ValueError, "must be below SummarizeOlder.at"),
        (
            lambda: SummarizeOlder(instructions=""),
            ValueError,
            "instructions must be a non-empty str",
        ),
        (lambda: TrimToolResults(keep_last=-1), ValueError, "keep_last must be an int >= 0"),
        (lambda: TrimToolResults(at=0.0), ValueError, "TrimToolResults.at must be a float"),
    ],
)
def test_policies_check_their_fields(make: Any, error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=message):
        make()


def test_the_compaction_option_is_checked_eagerly() -> None:
    with pytest.raises(TypeError, match="compaction must be a CompactionPolicy"):
        agent_loop([], tools=[], limits=Limits(context_tokens=100), compaction=3)
    with pytest.raises(ValueError, match=r"compaction needs a context window: set Limits\("):
        agent_loop([], tools=[], compaction=SummarizeOlder())

    class NoSpec:
        def decide(self, state: ContextState) -> None:
            return None

        def spec(self) -> Any:
            return ["not", "a", "dict"]

    with pytest.raises(TypeError, match=r"compaction.spec\(\) must return a dict"):
        agent_loop([], tools=[], limits=Limits(context_tokens=100), compaction=NoSpec())


class Custom:
    """A policy that returns whatever it is given to return."""

    def __init__(self, decision: Any) -> None:
        self.decision = decision

    def decide(self, state: ContextState) -> Any:
        return self.decision(state) if callable(self.decision) else self.decision

    def spec(self) -> dict[str, Any]:
        return {"policy": "custom"}


def test_a_custom_policy_runs_and_its_mistakes_fail_the_run_clearly() -> None:
    assert isinstance(Custom(None), CompactionPolicy)
    result, _, log = go(5, 5000, Custom(None))
    assert result.status == "completed" and log[0].compaction == {"policy": "custom"}
    with pytest.raises(replay.ReplayDivergence, match=r"'custom' .* is not a built-in one"):
        replay.replay(list(log))
    again = replay.replay(list(log), compaction=Custom(None))
    assert encoded(again.events) == encoded(log)
    result, _, _ = go(5, 5000, Custom("cut it"))
    assert result.error.code == CONTEXT_OVERFLOW
    assert "decide() returned str, not Trim, Summarize or None" in result.error.message
    result, _, _ = go(
        5,
        5000,
        Custom(
            lambda state: (
                Summarize(state.start) if state.start == 0 and len(state.messages) > 2 else None
            )
        ),
    )
    assert "chose cut 0, not one of the cuts" in result.error.message
    result, _, _ = go(
        5, 5000, Custom(lambda state: Summarize(2) if len(state.messages) > 2 else None)
    )
    assert result.error.code == CONTEXT_OVERFLOW and "chose cut 2" in result.error.message
    result, _, _ = go(
        5, 5000, Custom(lambda state: Summarize(99) if len(state.messages) > 2 else None)
    )
    assert "chose cut 99" in result.error.message


def test_a_summary_request_that_would_not_fit_fails_before_it_is_sent() -> None:
    # Summarise everything once the view passes the window: the summary request
    # itself would then be over it.
    policy = Custom(lambda s: Summarize(s.cuts()[-1]) if s.estimate > s.window else None)
    result, model, _ = go(40, 3000, policy)
    assert result.error.code == CONTEXT_OVERFLOW
    assert "the summary request would need about" in result.error.message
    assert "the compaction policy did not bring it under the window" in result.error.message
    assert all(r.purpose == "step" for r in model.requests)


def _summary_model(reply: Any) -> FunctionModel:
    def fn(request: ModelRequest) -> Any:
        if request.purpose == "compaction":
            return reply
        call = ToolCall(f"c{request.step}", "fetch", {"n": request.step})
        return ScriptedResponse.tool_calls(f"r{request.step}", call)

    return FunctionModel(fn)


@pytest.mark.parametrize(
    ("reply", "message"),
    [
        (
            ScriptedResponse.tool_calls("s", ToolCall("cx", "fetch", {"n": 0})),
            "the compaction response calls tool 'fetch'; a summary is text only",
        ),
        (
            ScriptedResponse("s", (ThinkingBlock("hm"), TextBlock("  ")), "stop"),
            "the compaction response has no text",
        ),
    ],
)
def test_a_summary_must_be_text(reply: Any, message: str) -> None:
    result = run(
        [UserMessage("u1", "read")],
        model=_summary_model(reply),
        tools=[fetch],
        max_steps=30,
        limits=Limits(context_tokens=3000),
        compaction=SummarizeOlder(),
    )
    assert result.error.code == MODEL_PROTOCOL_ERROR and message in result.error.message


def test_a_summary_id_never_takes_a_transcript_id() -> None:
    first = [UserMessage("u1", "read"), UserMessage("summary-s1", "taken")]
    result = run(
        first,
        model=_summary_model(ScriptedResponse.text("s1", "sum")),
        tools=[fetch],
        max_steps=12,
        limits=Limits(context_tokens=3000),
        compaction=SummarizeOlder(),
        log=(log := EventLog()),
    )
    summary = next(e.summary for e in log if type(e) is ContextCompactedEvent)
    assert summary.id == "summary-s1-" and result.status == "max_steps"


# --------------------------------------------------------------------------- trim


def test_trimming_shows_older_results_as_head_and_tail_and_keeps_the_log_whole() -> None:
    policy = TrimToolResults(keep_last=2, head=10, tail=5, at=0.3)
    result, model, log = go(20, 6000, policy)
    assert result.status == "completed"
    events = [e for e in log if type(e) is ContextCompactedEvent]
    assert events and all(e.how == "trim" and e.summary is None for e in events)
    last = model.requests[-1]
    shown = [m for m in last.messages if type(m) is ToolResultMessage]
    full = [m for m in result.messages if type(m) is ToolResultMessage]
    assert shown[-2:] == full[-2:]
    text = full[0].content
    assert type(text) is str
    marker = TRIM_MARKER.format(omitted=len(text) - 15)
    assert shown[0].content == text[:10] + marker + text[-5:]
    assert all(len(m.content) > 1000 for m in full)  # the transcript is whole
    assert encoded(replay.replay(list(log)).events) == encoded(log)


def test_trim_keeps_short_results_and_can_keep_none() -> None:
    message = ToolResultMessage("t", "c", "f", "short")
    assert trimmed(message, 1, 1) is message
    assert trimmed(ToolResultMessage("t", "c", "f", "a" * 100), 2, 0).content.startswith("aa\n[...")
    state = ContextState(
        100, 90, (UserMessage("u", "x"), ToolResultMessage("t", "c", "f", "r")), 0, False, (5, 5)
    )
    assert TrimToolResults(keep_last=0).decide(state) == Trim(2, 500, 500)
    assert TrimToolResults(keep_last=1).decide(state) is None
    assert TrimToolResults(at=0.95).decide(state) is None


# --------------------------------------------------------------------------- properties


def transcripts() -> st.SearchStrategy[list[Message]]:
    """Valid transcripts: user turns and assistant turns whose calls are answered,
    the answers sometimes after a user message."""

    @st.composite
    def build(draw: st.DrawFn) -> list[Message]:
        out: list[Message] = []
        for turn in range(draw(st.integers(1, 14))):
            kind = draw(st.sampled_from(["user", "text", "calls"]))
            size = draw(st.integers(0, 400))
            if kind == "user":
                out.append(UserMessage(f"u{turn}", "u" * size))
            elif kind == "text":
                out.append(AssistantMessage(f"a{turn}", (TextBlock("a" * size),)))
            else:
                n = draw(st.integers(1, 3))
                calls = [ToolCall(f"c{turn}-{i}", "f", {}) for i in range(n)]
                out.append(AssistantMessage(f"a{turn}", tuple(calls)))
                if draw(st.booleans()):
                    out.append(UserMessage(f"between{turn}", "wait"))
                out.extend(
                    ToolResultMessage(f"t{turn}-{i}", c.id, "f", "r" * size)
                    for i, c in enumerate(calls)
                )
        return out

    return build()


@settings(max_examples=examples(200))
@given(
    transcripts(),
    st.integers(50, 2000),
    st.sampled_from(
        [SummarizeOlder(), SummarizeOlder(at=0.5, keep=0.1), TrimToolResults(keep_last=1)]
    ),
    st.booleans(),
)
def test_a_decision_never_splits_a_call_from_its_result_and_is_deterministic(
    messages: list[Message], window: int, policy: Any, summarized: bool
) -> None:
    view = ((UserMessage("summary", "s"),) if summarized else ()) + tuple(messages)
    estimates = tuple(estimate_message(m) for m in view)
    state = ContextState(window, sum(estimates), view, 7, summarized, estimates)
    decision = policy.decide(state)
    assert decision == policy.decide(msgspec.structs.replace(state))
    if type(decision) is Summarize:
        cut = decision.cut - 7
        before = {
            b.id
            for m in messages[:cut]
            if type(m) is AssistantMessage
            for b in m.content
            if type(b) is ToolCall
        }
        after = {m.tool_call_id for m in messages[cut:] if type(m) is ToolResultMessage}
        assert not before & after
        assert cut > 0 and sum(estimates[len(view) - len(messages) + cut :]) <= policy.keep * window


# --------------------------------------------------------------------------- the 500-step session


def _reference() -> tuple[Any, FunctionModel, EventLog]:
    model, log = FunctionModel(session.answer), EventLog()
    result = run(list(session.MESSAGES), model=model, log=log, **session.options())
    return result, model, log


def test_a_500_step_session_in_a_20k_window_completes_within_it_and_replays() -> None:
    result, _model, log = _reference()
    assert result.status == "completed" and result.steps == session.STEPS
    compactions = [e for e in log if type(e) is ContextCompactedEvent]
    assert len(compactions) >= 20
    # Asserted from the recorded requests: every usage the model reported (its
    # count of what it was sent) is within the window.
    drafts = [e.reply for e in log if e.type == "plan.draft"]
    assert len(drafts) == session.STEPS + len(compactions)
    assert max(d.usage.input_tokens for d in drafts) <= session.WINDOW
    assert encoded(replay.replay(list(log)).events) == encoded(log)
    # The same session without a policy fails before sending, not after a 400.
    options = {**session.options(), "compaction": None}
    bare = run(list(session.MESSAGES), model=(plain := FunctionModel(session.answer)), **options)
    assert bare.error.code == CONTEXT_OVERFLOW and len(plain.requests) == bare.steps - 1


@pytest.mark.skipif(os.name != "posix", reason="SIGKILL")
@pytest.mark.parametrize("nth", [1, 7])
def test_killed_in_the_middle_of_a_compaction_call_it_resumes_to_the_same_log(
    tmp_path: Path, nth: int
) -> None:
    db = tmp_path / "store.db"
    command = [sys.executable, "-m", "tests.context_session", str(db), "s1"]
    killed = subprocess.run(
        [*command, "--kill-at-compaction", str(nth)],
        capture_output=True,
        text=True,
        env=subprocess_env(),
        cwd=ROOT,
        timeout=600,
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    with replay.SQLiteStore(db) as store:
        cut = store.events("s1")
    assert cut[-1].type == "step.start"  # the summary request was out, unanswered
    done = subprocess.run(
        command, capture_output=True, text=True, env=subprocess_env(), cwd=ROOT, timeout=600
    )
    assert done.returncode == 0 and done.stdout.strip() == "completed 500", done.stderr
    with replay.SQLiteStore(db) as store:
        events = store.events("s1")
    _, _, log = _reference()
    assert [encode_event(e) for e in events] == encoded(log)


def test_the_golden_compacted_log_replays_byte_for_byte() -> None:
    events = replay.read_log(ROOT / "fixtures" / "compacted_session.jsonl")
    assert [e.type for e in events].count("context.compacted") == 1
    again = replay.replay(events)
    assert encoded(again.events) == [encode_event(e) for e in events]


def test_edges_of_the_decisions() -> None:
    call = AssistantMessage("a", (ToolCall("c1", "f", {}),))
    result = ToolResultMessage("t", "c1", "f", "r")
    user = UserMessage("u", "x" * 400)
    # A view ending with an unanswered call may be cut only before that call.
    state = ContextState(100, 200, (user, call), 3, False, (104, 5))
    assert state.cuts() == [3, 4]
    assert ContextState(100, 200, (user, call, result), 0, False, (104, 5, 5)).cuts() == [0, 1, 3]
    # No cut after the start: no summary (the overflow check decides).
    only = ContextState(100, 200, (call,), 0, False, (200,))
    assert only.cuts() == [0] and SummarizeOlder().decide(only) is None


def test_a_trim_that_trims_nothing_new_records_nothing() -> None:
    result, _, log = go(6, 6000, Custom(Trim(2, 10, 10)))
    assert result.status == "completed"
    assert [e.trimmed_before for e in log if type(e) is ContextCompactedEvent] == [2]


def test_the_summary_instruction_id_never_takes_a_transcript_id() -> None:
    first = [UserMessage("u1", "read"), UserMessage("compaction-request-009", "taken")]
    model = reading_model(12)
    run(
        first,
        model=model,
        tools=[fetch],
        max_steps=12,
        limits=Limits(context_tokens=3000),
        compaction=SummarizeOlder(),
    )
    summary = next(r for r in model.requests if r.purpose == "compaction")
    assert summary.step == 9 and summary.messages[-1].id == "compaction-request-009-"


# --------------------------------------------------------------------------- visible


def test_otel_marks_the_summary_call_and_the_compaction() -> None:
    pytest.importorskip("opentelemetry.sdk")
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from agentloop import otel

    def spans(events: Any) -> tuple[Any, list[Any]]:
        exporter, provider = InMemorySpanExporter(), TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        otel.record_log(events, tracer_provider=provider)
        finished = exporter.get_finished_spans()
        (root,) = [s for s in finished if s.parent is None]
        return root, [s for s in finished if s.name == "chat"]

    events = replay.read_log(ROOT / "fixtures" / "compacted_session.jsonl")
    root, chats = spans(events)
    purposes = [dict(s.attributes).get("agentloop.request.purpose") for s in chats]
    assert purposes.count("compaction") == 1
    summary = next(s for s in chats if s.attributes.get("agentloop.request.purpose"))
    assert summary.attributes["agentloop.request.id"] == "compaction-005"
    assert summary.attributes["gen_ai.response.id"] == "summary-5"
    (compacted,) = [e for e in root.events if e.name == "agentloop.context.compacted"]
    assert compacted.attributes["agentloop.context.how"] == "summarize"
    assert compacted.attributes["agentloop.context.start"] == 7
    # A trim is a span event only: no model call to mark.
    _, _, log = go(12, 6000, TrimToolResults(keep_last=1, at=0.1))
    root, chats = spans(list(log))
    assert len(chats) == 12 and not any("agentloop.request.purpose" in s.attributes for s in chats)
    assert any(e.name == "agentloop.context.compacted" for e in root.events)


def test_replay_show_prints_the_compaction() -> None:
    path = ROOT / "fixtures" / "compacted_session.jsonl"
    shown = subprocess.run(
        [sys.executable, "-m", "replay", "show", str(path)],
        capture_output=True,
        text=True,
        env=subprocess_env(),
        cwd=ROOT,
        timeout=120,
    )
    (line,) = [line for line in shown.stdout.splitlines() if "context.compacted" in line]
    assert "summary from message 7: '[Summary of the earlier conversation" in line
    assert "(~891 -> ~283 tokens)" in line
    _, _, log = go(12, 6000, TrimToolResults(keep_last=1, at=0.1))
    from replay._diff import summarize

    trims = [summarize(e) for e in log if type(e) is ContextCompactedEvent]
    assert trims[0].startswith("tool results trimmed before message ")


@settings(max_examples=examples(40))
@given(
    st.lists(st.tuples(st.integers(1, 3), st.integers(0, 3000)), min_size=1, max_size=40),
    st.sampled_from(
        [
            SummarizeOlder(),
            SummarizeOlder(at=0.5, keep=0.2),
            TrimToolResults(keep_last=1, head=20, tail=20),
        ]
    ),
    st.integers(2500, 9000),
)
def test_every_request_of_a_random_session_is_a_whole_transcript_and_replays(
    plan: list[tuple[int, int]], policy: Any, window: int
) -> None:
    """Random steps (1-3 calls each, results of random sizes): every request the
    model gets -- summary or step -- holds whole calls with their results, and the
    log replays byte for byte."""

    def fn(request: ModelRequest) -> Any:
        if request.purpose == "compaction":
            return ScriptedResponse.text(f"s{request.step}", "summary")
        if request.step > len(plan):
            return ScriptedResponse.text(f"r{request.step}", "done")
        calls, _ = plan[request.step - 1]
        made = [
            ToolCall(f"c{request.step}-{i}", "sized", {"step": request.step}) for i in range(calls)
        ]
        return ScriptedResponse.tool_calls(f"r{request.step}", *made)

    @tool
    def sized(step: int) -> str:
        """A result of the planned size."""
        return "z" * plan[step - 1][1]

    model, log = FunctionModel(fn), EventLog()
    result = run(
        [UserMessage("u1", "go")],
        model=model,
        tools=[sized],
        max_steps=64,
        limits=Limits(context_tokens=window),
        compaction=policy,
        log=log,
        clock=lambda: 0.0,
    )
    for request in model.requests:
        validate_transcript(
            request.messages[:-1] if request.purpose == "compaction" else request.messages
        )
    if result.status == "failed":
        assert result.error.code == CONTEXT_OVERFLOW
    assert encoded(replay.replay(list(log)).events) == encoded(log)


def test_media_blocks_count_as_the_estimator_documents() -> None:
    from agentloop import AudioBlock, DocumentBlock, ImageBlock, ProviderBlock
    from agentloop._context import IMAGE_CHARS, block_chars, content_chars, trimmed

    parts = (
        TextBlock("abc"),
        ImageBlock("image/png", data=b"\x89PNG" * 1000),
        AudioBlock("audio/wav", data=b"x" * 40),
        DocumentBlock("application/pdf", url="https://example.com/a.pdf"),
    )
    assert content_chars(parts) == 3 + IMAGE_CHARS + 40 + len("https://example.com/a.pdf")
    provider = ProviderBlock("anthropic", "redacted_thinking", {"data": "x"})
    assert block_chars(provider) == len(msgspec.json.encode(provider))
    message = ToolResultMessage("t1", "c1", "chart", parts)
    assert trimmed(message, 1, 1) is message  # blocks are not cut in half


# ------------------------------------------------------------- custom policies on replay


class KeepLast(msgspec.Struct, frozen=True):
    """A policy of the caller's own: summarise all but the last ``n`` cuts' worth."""

    n: int = 2

    def decide(self, state: ContextState) -> Summarize | None:
        cuts = [c for c in state.cuts() if c > state.start]
        if state.estimate <= state.window // 2 or len(cuts) <= self.n:
            return None
        return Summarize(cuts[-self.n - 1], "Sum up.")

    def spec(self) -> dict[str, Any]:
        return {"policy": "keep_last", "n": self.n}


def test_a_custom_policy_replays_resumes_and_forks_when_given_again(tmp_path: Path) -> None:
    result, _, log = go(40, 5000, KeepLast())
    events = list(log)
    compactions = [e for e in events if type(e) is ContextCompactedEvent]
    assert result.status == "completed" and len(compactions) >= 2
    assert events[0].compaction == {"policy": "keep_last", "n": 2}
    again = replay.replay(events, compaction=KeepLast())
    assert encoded(again.events) == encoded(events)
    # its spec is no policy (a log holds no code)
    with pytest.raises(replay.ReplayDivergence, match="rebuilds only a built-in policy"):
        replay.replay(events, compaction=KeepLast().spec())
    # from a file, cut in the middle: resume, fork and state_at take it too
    path = tmp_path / "s.jsonl"
    replay.write_log(path, events)
    cut = replay.read_log(path)[: compactions[1].sequence - 3]
    loop, effect = replay.resume(cut, compaction=KeepLast())
    assert effect is not None and loop.log[0] == events[0]
    forked, _ = replay.fork(events, compactions[0].sequence, compaction=KeepLast())
    assert list(forked.log) == events[: len(forked.log)]
    snapshot = replay.state_at(events, compactions[0].sequence, compaction=KeepLast())
    assert snapshot.event == compactions[0]


@pytest.mark.parametrize(
    ("given", "message"),
    [
        (
            None,
            r"session.start records the compaction policy 'keep_last' \(\{'policy': "
            r"'keep_last', 'n': 2\}\), which is not a built-in one: pass the same policy "
            r"again \(replay\(..., compaction=policy\)\)",
        ),
        (
            KeepLast(3),
            r"the compaction policy given \(\{'policy': 'keep_last', 'n': 3\}\) is not the "
            r"one session.start records \(\{'policy': 'keep_last', 'n': 2\}\)",
        ),
        (SummarizeOlder(), r"the compaction policy given \(\{'policy': 'summarize_older'\}\)"),
        (3, "compaction must be a CompactionPolicy, got int"),
    ],
)
def test_a_custom_policy_missing_or_different_is_a_divergence_naming_it(
    given: Any, message: str
) -> None:
    _, _, log = go(12, 5000, KeepLast())
    for call in (
        lambda: replay.replay(list(log), compaction=given),
        lambda: replay.resume(list(log)[:-3], compaction=given),
    ):
        with pytest.raises(replay.ReplayDivergence, match=message) as caught:
            call()
        assert caught.value.sequence == 0 and str(caught.value)


class Broken:
    def decide(self, state: ContextState) -> None:
        return None

    def spec(self) -> dict[str, Any]:
        raise RuntimeError("no spec today")


def test_a_policy_given_to_a_log_without_one_or_whose_spec_fails_is_refused() -> None:
    _, _, plain = go(3, 5000)
    with pytest.raises(replay.ReplayDivergence, match=r"but session\.start records none"):
        replay.replay(list(plain), compaction=KeepLast())
    _, _, log = go(3, 5000, KeepLast())
    with pytest.raises(
        replay.ReplayDivergence,
        match=r"the compaction policy's spec\(\) failed: RuntimeError: no spec today",
    ):
        replay.replay(list(log), compaction=Broken())
    # a built-in one is rebuilt from its spec; given again, it must match
    _, _, built_in = go(3, 5000, TrimToolResults(keep_last=1))
    assert replay.replay(list(built_in)).events == tuple(built_in)
    assert replay.replay(list(built_in), compaction=TrimToolResults(keep_last=1)).result
    assert replay.replay(list(built_in), compaction=TrimToolResults(keep_last=1).spec()).result


def test_a_durable_session_with_a_custom_policy_needs_it_again(tmp_path: Path) -> None:
    model = reading_model(30)
    options: dict[str, Any] = {
        "tools": [fetch],
        "max_steps": 30,
        "limits": Limits(agent_steps=64, context_tokens=5000),
        "clock": lambda: 0.0,
        "owner": "w1",
    }
    with replay.SQLiteStore(tmp_path / "s.db") as store:
        first = replay.run_durable(
            store,
            "s",
            [UserMessage("u1", "read")],
            model=model,
            compaction=KeepLast(),
            **options,
        )
        assert isinstance(first, RunResult) and first.status == "completed"
        # finished: its result comes from a replay, which needs the policy
        again = replay.run_durable(store, "s", model=model, compaction=KeepLast(), **options)
        assert again == first
        with pytest.raises(replay.ReplayDivergence, match="'keep_last'"):
            replay.run_durable(store, "s", model=model, **options)
