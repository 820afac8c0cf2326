"""replay(), state_at(), resume(), fork(): fixtures, generated sessions, tampering, crashes."""

from __future__ import annotations

import inspect
import tempfile
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import replay as replay_package
from agentloop import (
    CALLER_PROTOCOL_ERROR,
    INVALID_TRANSCRIPT,
    AgentLoop,
    Budget,
    CallerProtocolError,
    Cancel,
    Event,
    HookRegistry,
    MessageAcceptedEvent,
    ModelChunk,
    ModelChunkEvent,
    ModelFailure,
    ModelRequest,
    ModelResponse,
    Pause,
    PlanCommitEvent,
    PlanDraftEvent,
    Reply,
    Resume,
    RunFinishedEvent,
    SessionCompleteEvent,
    SessionStartEvent,
    State,
    StepStartEvent,
    TextBlock,
    ToolBatch,
    ToolCall,
    ToolCallEvent,
    ToolRequest,
    ToolResult,
    ToolResultEvent,
    ToolSpec,
    Usage,
    UserMessage,
    agent_loop,
    encode_event,
)
from replay import (
    LogWriter,
    ReplayDivergence,
    ReplayError,
    fork,
    read_log,
    recorded_replies,
    replay,
    resume,
    state_at,
    write_log,
)
from tests.helpers import ROOT, examples, sigkilled

FIXTURES = ROOT / "fixtures"
# Every recorded run (fixtures/media_session.jsonl: a run with media blocks, a photo
# and a PDF from the user, a chart from a tool). fixtures/media/ holds a file-format
# fixture made by editing a run's events (fixtures/media/make_logs.py: an empty WAV
# the loop refuses, blobs shared across events): tests/test_log_blobs.py reads it byte
# for byte; it is not a run, so it is not replayed.
FIXTURE_PATHS = sorted(path for path in FIXTURES.glob("**/*.jsonl") if path.parent.name != "media")


def _ids(path: Path) -> str:
    return str(path.relative_to(FIXTURES))


def _load(name: str) -> list[Event]:
    return read_log(FIXTURES / f"{name}.jsonl")


def _bytes(events: Sequence[Event]) -> list[bytes]:
    return [encode_event(e) for e in events]


def _send_all(loop: AgentLoop, replies: Sequence[Reply]) -> Any:
    """Send replies in order; return the last effect, or the result once the run ends."""
    effect: Any = None
    for reply in replies:
        try:
            effect = loop.send(reply)
        except StopIteration as stop:
            return stop.value
        except CallerProtocolError:
            return loop.result
    return effect


def test_public_names() -> None:
    public = {
        name
        for name in dir(replay_package)
        if not name.startswith("_") and not inspect.ismodule(getattr(replay_package, name))
    }
    assert set(replay_package.__all__) == public


# --------------------------------------------------------------------------- fixtures


@pytest.mark.parametrize("path", FIXTURE_PATHS, ids=_ids)
def test_every_fixture_replays(path: Path) -> None:
    events = read_log(path)
    outcome = replay(events)
    assert _bytes(outcome.events) == _bytes(events)
    last = events[-1]
    if type(last) is RunFinishedEvent:
        result = outcome.result
        assert result is not None and outcome.pending is None
        assert (result.status, result.final_text, result.steps, result.reason) == (
            last.status,
            last.final_text,
            last.steps,
            last.reason,
        )
        assert (result.error, result.usage, result.max_steps) == (
            last.error,
            last.usage,
            last.max_steps,
        )
    else:
        assert outcome.result is None
        assert outcome.pending is not None


def test_invalid_transcript_log_is_returned_as_is() -> None:
    events = _load("invalid_transcript")
    assert len(events) == 1
    outcome = replay(events)
    assert outcome.result is not None
    assert outcome.result.error is not None
    assert outcome.result.error.code == INVALID_TRANSCRIPT
    assert outcome.result.messages == ()
    assert outcome.events == tuple(events)
    with pytest.raises(ReplayDivergence) as info:
        replay([*events, events[0]])
    assert info.value.sequence == 1


def test_caller_misuse_fixture_replays_its_protocol_error() -> None:
    events = _load("caller_misuse")
    last = events[-1]
    assert type(last) is RunFinishedEvent and last.error is not None
    assert last.error.code == CALLER_PROTOCOL_ERROR
    assert replay(events).result is not None


def test_replay_of_a_live_event_log() -> None:
    loop = agent_loop([UserMessage("u1", "hi")], tools=[], started_at=0.0)
    request = next(loop)
    with pytest.raises(StopIteration):
        loop.send(ModelResponse(request.id, "r1", (TextBlock("hello"),), "stop", at=1))
    outcome = replay(loop.log.events)
    assert outcome.result == loop.result


# --------------------------------------------------------------------------- generated sessions

TOOLS = [ToolSpec("add"), ToolSpec("echo"), ToolSpec("guarded", requires_approval=True)]
_text = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=12)
_json_scalar = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**63), 2**64 - 1),
    st.floats(allow_nan=False, allow_infinity=False),
    _text,
)
_arguments = st.dictionaries(
    _text,
    st.recursive(
        _json_scalar,
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_text, inner, max_size=3),
        max_leaves=6,
    ),
    max_size=3,
)


def _model_turn(data: st.DataObject, request: ModelRequest, clock: list[float]) -> list[Reply]:
    """The replies of one model turn: maybe streamed chunks, then the response."""

    def at() -> float | None:
        if data.draw(st.booleans()):
            clock[0] += data.draw(st.floats(0, 5, allow_nan=False))
            return clock[0]
        return None

    kind = data.draw(st.sampled_from(["text", "text", "tools", "tools", "bad", "failure"]))
    if kind == "failure":
        return [ModelFailure(request.id, data.draw(_text), at=at())]
    content: list[TextBlock | ToolCall] = []
    if kind == "text" or data.draw(st.booleans()):
        content.append(TextBlock(data.draw(_text)))
    if kind != "text":
        names = data.draw(
            st.lists(st.sampled_from(["add", "echo", "guarded", "missing"]), min_size=1, max_size=3)
        )
        content += [
            ToolCall(f"{request.id}-call-{i}", name, data.draw(_arguments))
            for i, name in enumerate(names)
        ]
    stop_reason = {"text": "stop", "tools": "tool_call", "bad": "stop"}[kind]
    if data.draw(st.integers(0, 9)) == 0:
        stop_reason = "length"
    replies: list[Reply] = []
    if data.draw(st.booleans()):  # stream it
        for block in content:
            if type(block) is TextBlock and len(block.text) > 1:
                cut = data.draw(st.integers(1, len(block.text) - 1))
                replies.append(ModelChunk(request.id, TextBlock(block.text[:cut]), at=at()))
                replies.append(ModelChunk(request.id, TextBlock(block.text[cut:]), at=at()))
            else:
                replies.append(ModelChunk(request.id, block, at=at()))
    usage = Usage(data.draw(st.integers(0, 999)), data.draw(st.integers(0, 99)))
    response_id = f"resp-{request.id}"
    replies.append(
        ModelResponse(request.id, response_id, tuple(content), stop_reason, usage, at=at())
    )
    return replies


def _generated_session(data: st.DataObject) -> AgentLoop:
    budget = data.draw(
        st.none()
        | st.builds(
            Budget,
            max_turns=st.none() | st.integers(1, 3),
            max_tool_calls=st.none() | st.integers(1, 3),
        )
    )
    loop = agent_loop(
        [UserMessage("user-1", data.draw(_text))],
        tools=TOOLS,
        system=data.draw(st.none() | _text),
        max_steps=data.draw(st.integers(1, 5)),
        budget=budget,
        started_at=data.draw(st.none() | st.just(100.0)),
        parallel_tools=data.draw(st.booleans()),
    )
    clock = [100.0]
    effect: Any = next(loop)
    for _ in range(200):
        if data.draw(st.integers(0, 40)) == 0:
            replies: list[Reply] = [Cancel(data.draw(_text), at=None)]
        elif type(effect) is ModelRequest:
            replies = _model_turn(data, effect, clock)
        elif type(effect) is ToolRequest:
            replies = [
                ToolResult(effect.call.id, data.draw(_text), data.draw(st.booleans()), at=None)
            ]
        elif type(effect) is ToolBatch:  # results arrive in any order
            replies = [
                ToolResult(request.call.id, data.draw(_text), data.draw(st.booleans()), at=None)
                for request in data.draw(st.permutations(effect.requests))
            ]
        else:
            assert type(effect) is Pause
            if effect.reason == "approval":
                payload: dict[str, Any] = {"approved": data.draw(st.booleans())}
                replies = [Resume(payload)]
            else:
                replies = [Resume(budget=data.draw(st.none() | st.just(Budget(max_turns=9))))]
        effect = _send_all(loop, replies)
        if loop.result is not None:
            return loop
    raise AssertionError("the generated session did not end")  # pragma: no cover


@settings(
    max_examples=examples(60),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(data=st.data())
def test_generated_sessions_round_trip_through_a_file_and_replay(data: st.DataObject) -> None:
    loop = _generated_session(data)
    events = list(loop.log)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "session.jsonl"
        write_log(path, events)
        loaded = read_log(path)
    assert _bytes(loaded) == _bytes(events)
    outcome = replay(loaded)
    assert _bytes(outcome.events) == _bytes(events)
    assert msgspec.json.encode(outcome.result) == msgspec.json.encode(loop.result)


# --------------------------------------------------------------------------- tampering


def _diverges(events: list[Event]) -> ReplayDivergence:
    with pytest.raises(ReplayDivergence) as info:
        replay(events)
    text = str(info.value)
    assert text.startswith(f"replay diverged at event #{info.value.sequence}: ")
    assert "recorded:" in text and "regenerated:" in text
    return info.value


def test_tampered_final_text_is_found() -> None:
    events = _load("tool_calls")
    last = events[-1]
    assert type(last) is RunFinishedEvent
    events[-1] = msgspec.structs.replace(last, final_text="It is sunny in Oslo.")
    divergence = _diverges(events)
    assert divergence.sequence == len(events) - 1
    assert divergence.expected is events[-1]
    assert divergence.actual is not None and divergence.actual.type == "run.finished"
    assert divergence.differences == [
        "final_text: 'It is sunny in Oslo.' -> '20 + 22 = 42, and it is -3 °C and snowing in Oslo.'"
    ]
    assert "final_text: 'It is sunny in Oslo.' ->" in str(divergence)


@pytest.mark.parametrize("index", [2, 7, 8, 12, 20])
def test_deleted_event_is_found_where_it_was(index: int) -> None:
    events = _load("tool_calls")
    del events[index]
    assert _diverges(events).sequence == index


def test_deleted_reply_event_leaves_the_loop_waiting() -> None:
    events = _load("plain_answer")
    assert events[6].type == "plan.draft"
    del events[6]
    divergence = _diverges(events)
    assert divergence.sequence == 6
    assert divergence.actual is None
    assert "waits for a reply to ModelRequest request-001" in divergence.reason


@pytest.mark.parametrize(("first", "second"), [(9, 10), (3, 4), (13, 15), (19, 21)])
def test_reordered_events_are_found_at_the_first_swap(first: int, second: int) -> None:
    events = _load("tool_calls")
    events[first], events[second] = events[second], events[first]
    divergence = _diverges(events)
    assert divergence.sequence == first


def test_reordering_hint_points_at_the_moved_event() -> None:
    events = _load("tool_calls")
    events[9], events[10] = events[10], events[9]
    divergence = _diverges(events)
    assert "recorded event #10" in divergence.hint
    assert "hint:" in str(divergence)


def test_reply_for_a_call_never_made_is_found() -> None:
    events = _load("tool_calls")
    index = next(i for i, e in enumerate(events) if type(e) is ToolResultEvent)
    event = events[index]
    assert type(event) is ToolResultEvent and event.reply is not None
    bad = msgspec.structs.replace(event.reply, call_id="call-404")
    events[index] = msgspec.structs.replace(event, reply=bad)
    divergence = _diverges(events)
    assert divergence.sequence == index
    actual = divergence.actual  # the loop rejected the reply as caller misuse
    assert type(actual) is SessionCompleteEvent
    assert (actual.status, actual.reason) == ("failed", CALLER_PROTOCOL_ERROR)
    assert "type: 'tool.result' -> 'session.complete'" in divergence.differences


def test_changed_model_text_diverges_at_the_commit() -> None:
    events = _load("plain_answer")
    draft = events[6]
    assert type(draft) is PlanDraftEvent and type(draft.reply) is ModelResponse
    changed = msgspec.structs.replace(draft.reply, content=(TextBlock("Lyon."),))
    events[6] = msgspec.structs.replace(draft, reply=changed)
    divergence = _diverges(events)
    # The changed response is recorded input: it is fed back, and the loop now
    # rejects it (the stream says otherwise), so the first difference is the next event.
    assert divergence.sequence == 7


def test_unused_recorded_reply_after_the_end() -> None:
    events = _load("plain_answer")
    chunk = events[3]
    assert type(chunk) is ModelChunkEvent
    events.append(msgspec.structs.replace(chunk, sequence=len(events)))
    divergence = _diverges(events)
    assert divergence.sequence == len(events) - 1
    assert "finished (completed)" in divergence.reason
    assert "unused reply" in divergence.reason


def test_log_missing_its_end_diverges_past_the_end() -> None:
    events = _load("plain_answer")[:-1]
    divergence = _diverges(events)
    assert divergence.sequence == len(events)
    assert divergence.expected is None
    assert divergence.actual is not None and divergence.actual.type == "run.finished"


def test_log_without_session_start() -> None:
    events = _load("plain_answer")
    assert _diverges(events[1:]).sequence == 0
    with pytest.raises(ReplayError, match="no events"):
        replay([])


def test_recorded_configuration_rejected() -> None:
    events = _load("plain_answer")
    start = events[0]
    assert type(start) is SessionStartEvent
    events[0] = msgspec.structs.replace(start, max_steps=0)
    divergence = _diverges(events)
    assert divergence.sequence == 0
    assert "configuration is rejected" in divergence.reason


@pytest.mark.parametrize("index", [3, 9, 16])
def test_inserted_event_is_found_where_it_was_put(index: int) -> None:
    events = _load("tool_calls")
    events.insert(index, msgspec.structs.replace(events[12], sequence=index))  # a step.end
    assert _diverges(events).sequence == index


def test_inserted_initial_message_shifts_what_follows() -> None:
    # The initial transcript comes from the log itself, so an added message is
    # replayed too; the first event after it no longer has its recorded number.
    events = _load("plain_answer")
    message = UserMessage("user-2", "and Spain?")
    events.insert(2, MessageAcceptedEvent(sequence=2, at=events[1].at, message=message))
    divergence = _diverges(events)
    assert divergence.sequence == 3
    assert "sequence: 2 -> 3" in divergence.differences


def test_hooks_run_again_and_must_match() -> None:
    def add_unit(payload: dict[str, Any]) -> None:
        payload["arguments"]["unit"] = "cm"

    hooks = HookRegistry()
    hooks.on("before_tool_call", add_unit)
    loop = agent_loop([UserMessage("u1", "add")], tools=[ToolSpec("add")], hooks=hooks)
    request = next(loop)
    call = ToolCall("c1", "add", {"a": 1})
    _send_all(
        loop,
        [
            ModelResponse(request.id, "r1", (call,), "tool_call"),
            ToolResult("c1", "1cm"),
            ModelResponse("request-002", "r2", (TextBlock("1cm"),), "stop"),
        ],
    )
    events = list(loop.log)
    assert replay(events, hooks=hooks).result == loop.result
    divergence = _diverges(events)
    assert divergence.expected is not None and divergence.expected.type == "tool.call"
    assert "call.arguments.unit: only in recorded: 'cm'" in divergence.differences


# --------------------------------------------------------------------------- state_at


def test_state_at_every_event() -> None:
    events = _load("tool_calls")
    previous = -1
    for event in events:
        snapshot = state_at(events, event.sequence)
        assert snapshot.sequence == event.sequence
        assert encode_event(snapshot.event) == encode_event(event)
        assert len(snapshot.messages) >= previous
        previous = len(snapshot.messages)
        if type(event) is StepStartEvent:
            assert snapshot.state is State.PLANNING
            assert type(snapshot.pending) is ModelRequest
            assert snapshot.pending.id == event.request_id
        elif type(event) is ToolCallEvent:
            assert snapshot.state is State.AWAITING_TOOL
            assert type(snapshot.pending) is ToolRequest
            assert snapshot.pending.call == event.call
        elif type(event) is PlanCommitEvent:
            assert snapshot.messages[-1] == event.message
            assert snapshot.pending is None
        if type(event) is RunFinishedEvent:
            assert snapshot.state is State.DONE
            assert snapshot.result is not None and snapshot.result.final_text == event.final_text
        else:
            assert snapshot.result is None
    first = state_at(events, 0)
    initial = (UserMessage("user-1", "What is 20 + 22, and the weather in Oslo?"),)
    assert (first.state, first.step, first.messages, first.pending) == (
        State.IDLE,
        0,
        initial,  # the initial transcript is the loop's from the start
        None,
    )
    assert state_at(events, len(events) - 1).usage == Usage(300, 60)


def test_state_at_a_budget_pause() -> None:
    events = _load("budget_pause_resume")
    pause = next(e for e in events if e.type == "session.pause")
    snapshot = state_at(events, pause.sequence)
    assert snapshot.state is State.IDLE
    assert type(snapshot.pending) is Pause
    assert snapshot.pending.reason == "budget_exceeded:turns"
    assert snapshot.budget_usage.turns == 1
    assert snapshot.step == 1
    assert events[pause.sequence + 1].type == "session.resume"
    after = state_at(events, pause.sequence + 2)  # step.start of step 2, counters reset
    assert (after.state, after.step, after.budget_usage.turns) == (State.PLANNING, 2, 1)


def test_state_at_bad_positions_and_invalid_logs() -> None:
    events = _load("plain_answer")
    for bad in (-1, len(events), "3", 1.0):
        with pytest.raises(ValueError, match="sequence must be"):
            state_at(events, bad)  # type: ignore[arg-type]
    invalid = state_at(_load("invalid_transcript"), 0)
    assert invalid.state is State.DONE and invalid.result is not None
    tampered = _load("plain_answer")
    del tampered[3]
    with pytest.raises(ReplayDivergence):
        state_at(tampered, 8)


# --------------------------------------------------------------------------- resume


def _uninterrupted(name: str, more: Sequence[Reply]) -> AgentLoop:
    """The same run as fixture ``name`` plus ``more`` replies, in one process."""
    events = _load(name)
    start = events[0]
    assert type(start) is SessionStartEvent
    loop = agent_loop(
        [e.message for e in events if e.type == "message.accepted"],  # type: ignore[union-attr]
        tools=start.tools,
        started_at=start.at,
    )
    next(loop)
    _send_all(loop, [reply for _, reply in recorded_replies(events)])
    _send_all(loop, more)
    return loop


def test_resume_waiting_on_tool_continues_the_same_sequence() -> None:
    events = _load("waiting_on_tool")
    loop, effect = resume(events)
    assert type(effect) is ToolRequest and effect.call.id == "call-1"
    assert loop.pending == effect
    more = [
        ToolResult("call-1", "11", at=2000.0),
        ModelResponse("request-002", "r2", (TextBlock("11"),), "stop", at=2001.0),
    ]
    result = _send_all(loop, more)
    assert result.final_text == "11"
    assert [e.sequence for e in loop.log] == list(range(len(loop.log)))
    assert _bytes(loop.log[: len(events)]) == _bytes(events)
    assert _bytes(loop.log) == _bytes(_uninterrupted("waiting_on_tool", more).log)


def test_resume_at_an_approval_pause() -> None:
    events = _load("waiting_on_approval")
    loop, effect = resume(events)
    assert type(effect) is Pause and effect.reason == "approval"
    effect = loop.send(Resume({"approved": True}))
    assert type(effect) is ToolRequest and effect.call.arguments == {"path": "/tmp/b"}
    loop.close()


def test_resume_refuses_finished_runs() -> None:
    for name in ("plain_answer", "cancel_mid_tool", "invalid_transcript"):
        with pytest.raises(ReplayError, match="already finished"):
            resume(_load(name))


def test_resume_regenerates_events_lost_between_two_events(tmp_path: Path) -> None:
    full = _load("tool_calls")
    # The process died after recording call-2's result, before step.end was written.
    cut = next(i for i, e in enumerate(full) if e.type == "step.end")
    path = tmp_path / "cut.jsonl"
    write_log(path, full[:cut])
    loop, effect = resume(read_log(path))
    assert type(effect) is ModelRequest and effect.id == "request-002"
    assert len(loop.log) == cut + 2  # step.end and step.start, regenerated
    with LogWriter(path) as writer:
        unsubscribe = writer.follow(loop.log)
        _send_all(loop, [reply for pos, reply in recorded_replies(full) if pos > cut])
        unsubscribe()
    assert _bytes(read_log(path)) == _bytes(full)


def _kill_scenario() -> tuple[list[Any], dict[str, Any], list[Any], list[Any]]:
    from agentloop import ModelResponse, TextBlock, ToolCall, ToolResult, ToolSpec, UserMessage

    first = ToolCall("c1", "add", {"a": 2, "b": 3})
    second = ToolCall("c2", "add", {"a": 4, "b": 5})
    messages = [UserMessage("u1", "Add 2 and 3, then 4 and 5.")]
    options = {"tools": [ToolSpec("add")], "started_at": 10.0}
    before = [  # up to the second tool request
        ModelResponse("request-001", "r1", (first,), "tool_call", at=11.0),
        ToolResult("c1", "5", at=12.0),
        ModelResponse("request-002", "r2", (second,), "tool_call", at=13.0),
    ]
    after = [
        ToolResult("c2", "9", at=14.0),
        ModelResponse("request-003", "r3", (TextBlock("5, then 9."),), "stop", at=15.0),
    ]
    return messages, options, before, after


_CHILD = (
    "from __future__ import annotations\n"
    + textwrap.dedent(inspect.getsource(_kill_scenario))
    + textwrap.dedent(
        """
        import sys, time
        from agentloop import agent_loop
        from replay import LogWriter

        messages, options, before, after = _kill_scenario()
        writer = LogWriter(sys.argv[1])
        loop = agent_loop(messages, **options)
        loop.log.subscribe(writer.write)
        effect = next(loop)
        for reply in before:
            effect = loop.send(reply)
        print(type(effect).__name__, effect.call.id, flush=True)
        time.sleep(60)
        """
    )
)


def test_resume_after_sigkill_while_waiting_on_a_tool(tmp_path: Path) -> None:
    path = tmp_path / "session.jsonl"
    with sigkilled(_CHILD, str(path)) as child:
        assert child.stdout is not None
        line = child.stdout.readline()
        assert line.split() == [b"ToolRequest", b"c2"]

    events = read_log(path)  # every event flushed before the kill; nothing torn
    assert events[-1].type == "tool.call"
    loop, effect = resume(events)
    assert type(effect) is ToolRequest and effect.call.id == "c2"
    messages, options, before, after = _kill_scenario()
    with LogWriter(path) as writer:
        unsubscribe = writer.follow(loop.log)
        result = _send_all(loop, after)
        unsubscribe()

    reference = agent_loop(messages, **options)
    next(reference)
    expected = _send_all(reference, [*before, *after])
    assert result == expected
    assert result.final_text == "5, then 9."
    final = read_log(path)
    assert _bytes(final) == _bytes(reference.log)
    assert replay(final).result == expected


# --------------------------------------------------------------------------- fork


def _fits(effect: Any, reply: Reply) -> bool:
    if type(reply) is Cancel:
        return True
    if type(effect) is ModelRequest:
        return type(reply) in (ModelChunk, ModelResponse, ModelFailure)
    if type(effect) is ToolRequest or type(effect) is ToolBatch:
        return type(reply) is ToolResult
    return type(effect) is Pause and type(reply) is Resume


FORKABLE = [p for p in FIXTURE_PATHS if p.parent == FIXTURES and p.stem != "invalid_transcript"]


@pytest.mark.parametrize("path", FORKABLE, ids=_ids)
def test_fork_at_every_event_matches_the_log(path: Path) -> None:
    events = read_log(path)
    replies = recorded_replies(events)
    for event in events:
        at = event.sequence
        try:
            loop, effect = fork(events, at)
        except ReplayError as error:
            # Only when the loop asks for nothing after this event.
            assert "nothing to fork" in str(error)
            assert type(events[-1]) is RunFinishedEvent
            assert all(state_at(events, j).pending is None for j in range(at, len(events)))
            continue
        assert loop.pending == effect
        assert len(loop.log) > at
        assert _bytes(loop.log) == _bytes(events[: len(loop.log)])
        assert state_at(events, len(loop.log) - 1).pending == effect
        remaining = [reply for position, reply in replies if position >= len(loop.log)]
        if remaining:
            assert _fits(effect, remaining[0]), (at, effect, remaining[0])
            _send_all(loop, remaining)
            assert _bytes(loop.log) == _bytes(events)
        else:
            assert _bytes(loop.log) == _bytes(events)
            loop.close()


def test_fork_what_if_the_model_had_answered_differently() -> None:
    events = _load("tool_calls")
    step2 = next(e for e in events if type(e) is StepStartEvent and e.step == 2)
    loop, effect = fork(events, step2.sequence)
    assert type(effect) is ModelRequest and effect.id == "request-002"
    result = _send_all(loop, [ModelResponse(effect.id, "alt", (TextBlock("Alt."),), "stop")])
    assert result.final_text == "Alt."
    assert _bytes(loop.log[: step2.sequence + 1]) == _bytes(events[: step2.sequence + 1])


def test_fork_bad_positions() -> None:
    with pytest.raises(ValueError, match="sequence must be"):
        fork(_load("plain_answer"), 99)
    with pytest.raises(ReplayError, match="nothing to fork"):
        fork(_load("invalid_transcript"), 0)
