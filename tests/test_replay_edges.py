"""replay's edges: logs cut or extended in odd places, summaries and field diffs."""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

import msgspec
import pytest

from agentloop import (
    INVALID_TRANSCRIPT,
    SKIP,
    AssistantMessage,
    Budget,
    BudgetUsage,
    BudgetWarnEvent,
    Cancel,
    HookRegistry,
    MessageAcceptedEvent,
    MessageQueuedEvent,
    ModelChunk,
    ModelChunkEvent,
    ModelFailure,
    ModelRequest,
    ModelResponse,
    Pause,
    PlanDraftEvent,
    Resume,
    RunError,
    RunFinishedEvent,
    SessionCompleteEvent,
    SessionPauseEvent,
    SessionResumeEvent,
    SessionStartEvent,
    State,
    Steer,
    StepEndEvent,
    StepStartEvent,
    TextBlock,
    ThinkingBlock,
    ToolCall,
    ToolCallEvent,
    ToolErrorEvent,
    ToolRequest,
    ToolResult,
    ToolResultEvent,
    ToolResultMessage,
    ToolSpec,
    UnrecognizedReply,
    Usage,
    UserMessage,
    agent_loop,
    encode_event,
)
from replay import (
    ReplayDivergence,
    ReplayError,
    diff_events,
    fork,
    read_log,
    replay,
    resume,
    state_at,
    summarize,
    write_log,
)

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
TOOL_CALLS = read_log(FIXTURES / "tool_calls.jsonl")  # 22 events, ends completed
APPROVAL = read_log(FIXTURES / "approval.jsonl")  # pauses at #8 and #12


# --------------------------------------------------------------------------- odd logs


def test_a_log_that_goes_on_after_its_run_finished_diverges_there() -> None:
    extra = StepEndEvent(sequence=len(TOOL_CALLS), at=9.0, step=2)
    events = [*TOOL_CALLS, extra]
    with pytest.raises(ReplayDivergence) as info:
        replay(events)
    divergence = info.value
    assert (divergence.sequence, divergence.expected, divergence.actual) == (22, extra, None)
    assert divergence.reason == "the regenerated run finished (completed) but the log goes on"
    assert "recorded:    #22 step.end step 2" in str(divergence)
    assert "regenerated: (nothing)" in str(divergence)
    # state_at reads up to that event: the same report.
    with pytest.raises(ReplayDivergence, match="but the log goes on"):
        state_at(events, 22)


@pytest.mark.parametrize(
    ("events", "waits_for"),
    [
        # A log whose recorded tool result (or resume) was lost, the rest kept.
        ([*TOOL_CALLS[:9], TOOL_CALLS[-1]], "ToolRequest call-1 (add)"),
        ([*APPROVAL[:9], APPROVAL[-1]], "Pause (approval)"),
    ],
    ids=["tool result lost", "resume lost"],
)
def test_a_log_missing_the_reply_the_loop_waits_for_names_the_effect(
    events: list[Any], waits_for: str
) -> None:
    with pytest.raises(ReplayDivergence) as info:
        replay(events)
    assert info.value.sequence == 9 and info.value.actual is None
    assert info.value.reason == (
        f"the loop waits for a reply to {waits_for}, but the log records no further reply"
    )
    with pytest.raises(ReplayDivergence, match=re.escape(f"waits for a reply to {waits_for}")):
        state_at(events, 9)


def test_a_log_cut_after_its_initial_messages_resumes_only_with_them() -> None:
    events = TOOL_CALLS[:2]  # session.start, message.accepted
    assert [e.type for e in events] == ["session.start", "message.accepted"]
    with pytest.raises(ReplayDivergence) as info:
        replay(events)
    assert info.value.reason == (
        "the loop emitted more events than the log holds (2): the log ends between two "
        "events, as when its process died (resume() continues it)"
    )
    # The log cannot say whether that was every initial message: resume() needs them.
    with pytest.raises(ReplayError) as refused:
        resume(events)
    assert str(refused.value) == (
        "the log ends in the run's initial transcript (after 1 message.accepted event(s)): "
        "its process died before the first step, and the log cannot tell whether every "
        "initial message was recorded; pass the run's initial messages "
        "(resume(events, messages=...)) or start it again"
    )
    with pytest.raises(ReplayError, match="initial transcript"):
        fork(events, 1)
    loop, effect = resume(events, messages=[events[1].message])  # type: ignore[union-attr]
    assert type(effect) is ModelRequest and effect.id == "request-001"
    assert [e.type for e in loop.log] == ["session.start", "message.accepted", "step.start"]
    loop.close()


def test_a_run_that_finishes_while_resume_regenerates_it_completes() -> None:
    events = TOOL_CALLS[:-1]  # run.finished lost: the last reply still finishes the run
    loop, effect = resume(events)
    assert effect is None and loop.pending is None
    assert loop.result == replay(TOOL_CALLS).result
    assert [encode_event(e) for e in loop.log] == [encode_event(e) for e in TOOL_CALLS]


def test_resume_refuses_a_log_that_goes_on_past_where_the_loop_waits() -> None:
    # waiting_on_tool ends at its tool.call; an event after it is not the loop's.
    events = read_log(FIXTURES / "waiting_on_tool.jsonl")
    call = events[-1]
    assert type(call) is ToolCallEvent
    bogus = StepStartEvent(sequence=len(events), at=call.at, step=1, request_id="request-999")
    extended = [*events, bogus]
    for attempt in (replay, resume):
        with pytest.raises(ReplayDivergence) as info:
            attempt(extended)
        assert info.value.sequence == len(events)
        assert info.value.expected == bogus and info.value.actual is None
        assert info.value.reason == (
            "the loop waits for a reply to ToolRequest call-1 (add), but the log records "
            "no further reply"
        )
    loop, effect = resume(events)  # the log as written resumes
    assert type(effect) is ToolRequest and effect.call.id == "call-1"
    loop.close()


INVALID = read_log(FIXTURES / "invalid_transcript.jsonl")[0]


@pytest.mark.parametrize(
    ("changes", "difference"),
    [
        ({"sequence": 41}, "sequence: 41 -> 0"),
        ({"step": 1}, "step: 1 -> 0"),
        ({"status": "completed"}, "status: 'completed' -> 'failed'"),
        ({"steps": 7}, "steps: 7 -> 0"),
        ({"reason": "goal_met"}, "reason: 'goal_met' -> 'INVALID_TRANSCRIPT'"),
        ({"final_text": "all good"}, "final_text: 'all good' -> None"),
        ({"usage": Usage(1, 0)}, "usage.input_tokens: 1 -> 0"),
        ({"reply": Cancel("stop")}, 'reply: {"kind":"cancel","reason":"stop","at":null} -> None'),
        (
            {"error": RunError(INVALID_TRANSCRIPT + "_NOT", "x")},
            "error.code: 'INVALID_TRANSCRIPT_NOT' -> 'INVALID_TRANSCRIPT'",
        ),
        ({"error": None}, 'error: None -> {"code":"INVALID_TRANSCRIPT","message":""}'),
    ],
)
def test_a_log_that_is_one_run_finished_must_be_an_invalid_transcripts(
    changes: dict[str, Any], difference: str
) -> None:
    event = msgspec.structs.replace(INVALID, **changes)
    for attempt in (replay, resume, lambda events: state_at(events, 0), lambda e: fork(e, 0)):
        with pytest.raises(ReplayDivergence) as info:
            attempt([event])
        assert info.value.sequence == 0
        assert info.value.expected == event
        assert info.value.reason.startswith("a log that starts with run.finished is the failed")
        assert difference in info.value.differences, info.value.differences


def test_an_invalid_transcripts_time_max_steps_and_message_may_vary() -> None:
    event = msgspec.structs.replace(
        INVALID, at=12.5, max_steps=3, error=RunError(INVALID_TRANSCRIPT, "something else")
    )
    outcome = replay([event])
    assert outcome.result is not None
    assert (outcome.result.max_steps, outcome.result.error) == (3, event.error)


def test_state_at_session_resume_shows_the_resume_applied() -> None:
    # The loop applies a Resume (state, budget, counters) before it records
    # session.resume: the snapshot there shows the resumed loop.
    events = read_log(FIXTURES / "budget_pause_resume.jsonl")
    types = [e.type for e in events]
    pause, resumed = types.index("session.pause"), types.index("session.resume")
    assert (pause, resumed) == (10, 11)
    at_pause = state_at(events, pause)
    assert at_pause.state is State.IDLE
    assert type(at_pause.pending) is Pause and at_pause.pending.reason == "budget_exceeded:turns"
    assert (at_pause.budget_usage.turns, at_pause.budget_usage.tool_calls) == (1, 1)
    at_resume = state_at(events, resumed)
    assert at_resume.state is State.REFLECTING  # where the pause came from
    assert at_resume.budget_usage == BudgetUsage()  # counters reset by the Resume
    assert at_resume.pending is None and at_resume.step == 1
    after = state_at(events, resumed + 1)
    assert after.event.type == "step.start" and after.budget_usage.turns == 1


def test_a_run_that_ends_before_its_first_request_replays_with_its_hooks() -> None:
    hooks = HookRegistry()
    hooks.on("before_step", lambda payload: SKIP)
    loop = agent_loop([UserMessage("u1", "hi")], tools=[ToolSpec("add")], hooks=hooks)
    with pytest.raises(StopIteration) as stop:
        next(loop)
    events = list(loop.log)
    replayed = replay(events, hooks=hooks)
    assert replayed.result == stop.value.value
    assert replayed.result.reason == "skipped_by_hook"
    assert list(replayed.events) == events
    with pytest.raises(ReplayDivergence):
        replay(events)  # without the hook, the loop asks the model


def test_write_log_failing_midway_keeps_the_old_file_and_leaves_no_temp(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    write_log(path, TOOL_CALLS)
    before = path.read_bytes()
    bad = ToolCallEvent(sequence=2, at=None, step=1, call=ToolCall("c1", "add", {"x": object()}))
    with pytest.raises(TypeError):
        write_log(path, [TOOL_CALLS[0], TOOL_CALLS[1], bad])
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.jsonl"]


# --------------------------------------------------------------------------- summarize

USAGE_DRAFT = ModelResponse(
    "request-001",
    "r1",
    (*(TextBlock(t) for t in "abcd"), ToolCall("c1", "add", {"x": 1})),
    "tool_call",
    Usage(10, 2),
)

# One line per event kind and variant: what `python -m replay show` prints.
SUMMARIES = {
    "message.queued": (
        MessageQueuedEvent(sequence=3, mode="steer", reply=Steer(UserMessage("s1", "use French"))),
        "steer s1: 'use French'",
    ),
    "session.start, budget and system": (
        SessionStartEvent(
            sequence=0,
            tools=(ToolSpec("add"),),
            max_steps=4,
            budget=Budget(max_turns=2),
            system="Be brief.",
        ),
        'max_steps=4  tools: add  budget={"max_turns":2,"max_tool_calls":null,'
        '"max_wall_seconds":null,"max_input_tokens":null,"max_output_tokens":null,'
        "\"max_total_tokens\":null}  system='Be brief.'",
    ),
    "session.start, bare": (
        SessionStartEvent(sequence=0, max_steps=8),
        "max_steps=8  tools: no tools",
    ),
    "accepted assistant message": (
        MessageAcceptedEvent(sequence=1, message=AssistantMessage("a1", ())),
        "assistant a1: (empty)",
    ),
    "accepted tool error": (
        MessageAcceptedEvent(
            sequence=2, message=ToolResultMessage("r1", "c1", "add", "boom", is_error=True)
        ),
        "tool result c1 (error): 'boom'",
    ),
    "accepted tool result": (
        MessageAcceptedEvent(sequence=2, message=ToolResultMessage("r1", "c1", "add", "3")),
        "tool result c1: '3'",
    ),
    "thinking chunk": (
        ModelChunkEvent(sequence=3, step=1, chunk=ModelChunk("request-001", ThinkingBlock("hm"))),
        "thinking 'hm'",
    ),
    "draft with usage and many blocks": (
        PlanDraftEvent(sequence=4, step=1, reply=USAGE_DRAFT),
        "response r1 stop=tool_call usage=10/2: text 'a', text 'b', text 'c', +2 more",
    ),
    "draft failure": (
        PlanDraftEvent(sequence=4, step=1, reply=ModelFailure("request-001", "rate limited")),
        "failure MODEL_ERROR: 'rate limited'",
    ),
    "budget.warn": (
        BudgetWarnEvent(
            sequence=5,
            step=1,
            limit="turns",
            usage=BudgetUsage(turns=2, tool_calls=1, wall_seconds=1.5),
            budget=Budget(max_turns=2),
        ),
        "turns limit reached (turns=2 tool_calls=1 wall=1.5s)",
    ),
    "session.pause": (
        SessionPauseEvent(sequence=6, step=1, reason="approval", payload={"call": {"id": "c1"}}),
        'approval {"call":{"id":"c1"}}',
    ),
    "session.pause, non-finite payload": (
        SessionPauseEvent(sequence=6, step=1, reason="approval", payload={"x": [math.nan]}),
        'approval {"x":[nan]}',  # JSON would have to lose the NaN
    ),
    "session.resume with a budget": (
        SessionResumeEvent(
            sequence=7, step=1, reply=Resume({"approved": True}, budget=Budget(max_turns=3))
        ),
        'resume {"approved":true} +budget',
    ),
    "session.resume, bare": (
        SessionResumeEvent(sequence=7, step=1, reply=Resume()),
        "resume None",
    ),
    "tool.error made by the loop": (
        ToolErrorEvent(
            sequence=8,
            step=1,
            message=ToolResultMessage("tool-result-c1", "c1", "nope", "unknown tool", True),
        ),
        "c1 nope (made by the loop): 'unknown tool'",
    ),
    "tool.result": (
        ToolResultEvent(
            sequence=8,
            step=1,
            message=ToolResultMessage("tool-result-c1", "c1", "add", "3"),
            reply=ToolResult("c1", "3"),
        ),
        "c1 add: '3'",
    ),
    "session.complete with a reason": (
        SessionCompleteEvent(sequence=9, step=1, status="completed", reason="goal_met"),
        "completed (goal_met)",
    ),
    "session.complete, bare": (
        SessionCompleteEvent(sequence=9, step=1, status="completed"),
        "completed",
    ),
    "run.finished, bare": (RunFinishedEvent(sequence=10, status="completed"), "completed"),
    "run.finished by a cancel": (
        RunFinishedEvent(sequence=10, status="cancelled", reason="user", reply=Cancel("user")),
        "cancelled (user) [cancel 'user']",
    ),
    "run.finished by misuse": (
        RunFinishedEvent(
            sequence=10,
            status="failed",
            error=RunError("CALLER_PROTOCOL_ERROR", "a set"),
            reason="CALLER_PROTOCOL_ERROR",
            reply=UnrecognizedReply("a set"),
        ),
        "failed (CALLER_PROTOCOL_ERROR) CALLER_PROTOCOL_ERROR: 'a set' "
        "[unrecognized reply: 'a set']",
    ),
    "run.finished by a tool result": (
        RunFinishedEvent(sequence=10, status="failed", reply=ToolResult("c9", "x", is_error=True)),
        "failed [result for c9 (error): 'x']",
    ),
    "run.finished by a chunk": (
        RunFinishedEvent(sequence=10, status="failed", reply=ModelChunk("r-2", TextBlock("hi"))),
        "failed [chunk for r-2: text 'hi']",
    ),
    "step.end": (StepEndEvent(sequence=3, step=1), ""),
}


@pytest.mark.parametrize(("event", "line"), SUMMARIES.values(), ids=SUMMARIES.keys())
def test_summaries(event: Any, line: str) -> None:
    assert summarize(event) == line


# --------------------------------------------------------------------------- diff_events


def _pause(payload: Any, sequence: int = 6) -> SessionPauseEvent:
    return SessionPauseEvent(sequence=sequence, step=1, reason="approval", payload=payload)


def test_diff_tells_ints_floats_and_bools_apart() -> None:
    lines = diff_events(_pause({"n": 1, "b": 1, "f": 1.5}), _pause({"n": 1.0, "b": True, "f": 1.5}))
    assert lines == ["payload.n: 1 -> 1.0", "payload.b: 1 -> True"]


def test_diff_treats_nan_as_equal_to_itself_only() -> None:
    assert diff_events(_pause([math.nan]), _pause([math.nan])) == []
    assert diff_events(_pause([math.nan]), _pause([1.0])) == ["payload[0]: nan -> 1.0"]


LONG_A, LONG_B = "x" * 80 + "a", "x" * 80 + "b"  # differ after the 60-character cut


def test_diff_of_long_strings_shows_where_they_differ() -> None:
    (line,) = diff_events(_pause(LONG_A), _pause(LONG_B))
    assert line == f"payload: …{'x' * 20}a' -> …{'x' * 20}b'"


def test_diff_of_huge_numbers_that_differ_late() -> None:
    (line,) = diff_events(_pause(10**70 + 1), _pause(10**70 + 2))
    assert line == f"payload: …{'0' * 20}1 -> …{'0' * 20}2"


def test_diff_reports_lists_of_different_lengths() -> None:
    assert diff_events(_pause([1, 2]), _pause([1, 2, 3])) == ["payload: 2 items -> 3 items"]
    assert diff_events(_pause([1, 2]), _pause([1, 5, 3])) == [
        "payload[1]: 2 -> 5",
        "payload: 2 items -> 3 items",
    ]


def test_diff_keys_only_on_one_side_use_the_labels() -> None:
    lines = diff_events(_pause({"a": 1}), _pause({"b": 2}), labels=("A", "B"))
    assert lines == ["payload.a: only in A: 1", "payload.b: only in B: 2"]


def test_diff_stops_after_twenty_lines_and_says_how_many_more() -> None:
    a = {f"k{i}": i for i in range(30)}
    b = {f"k{i}": -i - 1 for i in range(30)}
    lines = diff_events(_pause(a), _pause(b))
    assert len(lines) == 21
    assert lines[0] == "payload.k0: 0 -> -1" and lines[19] == "payload.k19: 19 -> -20"
    assert lines[20] == "(+10 more differences)"
    # Every kind of difference past the limit is counted: values, keys only on one
    # side, list lengths; and nested ones.
    nested: dict[str, Any] = {"x": [[1, 2], [3]], "only_a": 1}
    nested.update({f"k{i}": i for i in range(20)})
    other: dict[str, Any] = {"x": [[1, 5], [3, 4]], "only_b": 2}
    other.update({f"k{i}": -i for i in range(20)})
    a, b = nested, other
    lines = diff_events(_pause(a), _pause(b), limit=1)
    assert lines == ["payload.x[0][1]: 2 -> 5", "(+22 more differences)"]
    assert diff_events(_pause({"a": 1, "b": 2}), _pause({"a": 0, "b": 0}), limit=1) == [
        "payload.a: 1 -> 0",
        "(+1 more difference)",
    ]
    assert len(diff_events(_pause(a), _pause(b), limit=100)) == 23  # all of them, no note


def test_a_divergence_says_how_many_differences_it_does_not_list() -> None:
    events = list(APPROVAL)
    pause = events[8]
    assert type(pause) is SessionPauseEvent
    payload = {f"k{i}": i for i in range(25)}
    events[8] = msgspec.structs.replace(pause, payload=payload)
    with pytest.raises(ReplayDivergence) as info:
        replay(events)
    everything = diff_events(info.value.expected, info.value.actual, limit=100)
    assert len(everything) == 26
    assert info.value.differences == [*everything[:20], "(+6 more differences)"]
    assert str(info.value).splitlines()[-1] == "    (+6 more differences)"


def test_diff_of_different_event_types_names_the_type() -> None:
    lines = diff_events(StepEndEvent(sequence=3, step=1), _pause(None, sequence=3))
    assert lines[0] == "type: 'step.end' -> 'session.pause'"
    assert "reason: only in regenerated: 'approval'" in lines


def test_replay_divergence_str_lists_the_differences() -> None:
    events = list(TOOL_CALLS)
    result = events[9]
    assert type(result) is ToolResultEvent
    message = msgspec.structs.replace(result.message, content="41")
    events[9] = msgspec.structs.replace(result, message=message)
    with pytest.raises(ReplayDivergence) as info:
        replay(events)
    text = str(info.value)
    assert text.splitlines()[0] == (
        "replay diverged at event #9: the regenerated event differs from the recorded one"
    )
    assert "    message.content: '41' -> '42'" in text


# --------------------------------------------------------------------------- misuse, closing

MISUSE = read_log(FIXTURES / "caller_misuse.jsonl")


def test_a_misuse_log_that_goes_on_after_run_finished_says_so() -> None:
    # The loop rejects the recorded reply as misuse, as the recorded run did; what
    # is wrong is the event after run.finished.
    extra = StepEndEvent(sequence=len(MISUSE), at=None, step=1)
    with pytest.raises(ReplayDivergence) as info:
        replay([*MISUSE, extra])
    assert info.value.sequence == len(MISUSE) and info.value.expected == extra
    assert info.value.reason == "the regenerated run finished (failed) but the log goes on"


def _watched() -> tuple[HookRegistry, list[tuple[str, str]]]:
    endings: list[tuple[str, str]] = []
    hooks = HookRegistry()
    hooks.on("on_complete", lambda payload: endings.append((payload["status"], payload["reason"])))
    return hooks, endings


def _tampered() -> tuple[list[Any], int]:
    """TOOL_CALLS with its first step.end edited, and that event's position."""
    tampered = list(TOOL_CALLS)
    step_end = next(i for i, e in enumerate(tampered) if e.type == "step.end")
    tampered[step_end] = StepEndEvent(sequence=step_end, at=0.5, step=1)
    return tampered, step_end


def test_replay_closes_the_rebuilt_loop_after_a_divergence() -> None:
    tampered, _ = _tampered()
    hooks, endings = _watched()
    with pytest.raises(ReplayDivergence):
        replay(tampered, hooks=hooks)
    assert endings == [("cancelled", "closed")]  # closed at once, not by the collector


def test_a_failed_fork_closes_the_rebuilt_loop() -> None:
    tampered, step_end = _tampered()
    hooks, endings = _watched()
    with pytest.raises(ReplayDivergence):
        fork(tampered, step_end + 2, hooks=hooks)
    assert endings == [("cancelled", "closed")]
    hooks, endings = _watched()
    with pytest.raises(ReplayDivergence):
        resume(tampered[: step_end + 2], hooks=hooks)
    assert endings == [("cancelled", "closed")]
