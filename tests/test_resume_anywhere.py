"""A log cut at any event boundary resumes (or completes) to the run it was cut from;
a run a one-off interrupt ended inside a hook replays (DESIGN §2, §14).

The sessions are the fixture logs and generated ones (tests/sessions.py); the cuts
are every event boundary, and real SIGKILLs of a child process writing the log.
"""

from __future__ import annotations

import importlib.util
import random
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import msgspec
import pytest

from agentloop import (
    AgentLoop,
    Budget,
    CallerProtocolError,
    Event,
    EventLog,
    HookRegistry,
    Message,
    MessageAcceptedEvent,
    Reply,
    RunFinishedEvent,
    RunResult,
    ScriptedModel,
    ScriptedResponse,
    SessionCompleteEvent,
    SessionStartEvent,
    TextBlock,
    ToolCall,
    ToolResult,
    ToolSpec,
    UserMessage,
    agent_loop,
    encode_event,
    run,
    tool,
)
from agentloop._rules import REPLY_IN_COMPLETE
from replay import (
    LogWriter,
    ReplayDivergence,
    ReplayError,
    TornLogError,
    fork,
    read_log,
    recorded_replies,
    replay,
    resume,
    state_at,
)
from replay._log import _SYNC_AFTER
from tests import sessions
from tests.helpers import ECHO, response, sigkilled

ROOT = Path(__file__).resolve().parent.parent
MAKE_FIXTURES = ROOT / "fixtures" / "make_fixtures.py"
# (An INVALID_TRANSCRIPT log has no run to resume.)
# (fixtures/rules-1: the reply that ended the run is recorded only in run.finished.)
FIXTURE_LOGS = sorted(
    p
    for p in [
        *(ROOT / "fixtures").glob("*.jsonl"),
        *(ROOT / "fixtures" / "rules-1").glob("*.jsonl"),
    ]
    if "invalid" not in p.stem
)
SEEDS = range(40)


def _bytes(events: Sequence[Event]) -> list[bytes]:
    return [encode_event(e) for e in events]


def _send_all(loop: AgentLoop, replies: Sequence[Reply]) -> RunResult:
    try:
        for reply in replies:
            loop.send(reply)
    except StopIteration as stop:
        result: RunResult = stop.value
        return result
    except CallerProtocolError:
        assert loop.result is not None
        return loop.result
    raise AssertionError("the run did not end")  # pragma: no cover - only when a test fails


def _initial(events: Sequence[Event]) -> list[Message]:
    return [e.message for e in events if type(e) is MessageAcceptedEvent]


def _continue(
    prefix: Sequence[Event], full: Sequence[Event], messages: list[Message], handoffs: Any = None
) -> AgentLoop:
    """Resume ``prefix`` and send it the replies ``full`` recorded after it."""
    loop, effect = resume(prefix, messages=messages, handoffs=handoffs)
    if effect is not None:
        _send_all(loop, [r for position, r in recorded_replies(full) if position >= len(prefix)])
    return loop


def _lost_with_run_finished(full: Sequence[Event], cut: int) -> bool:
    """The cut drops only run.finished, and it held the reply that ended the run
    (a misused reply, an invalid chunk): nothing can rebuild that reply. Only
    under rules revisions 0 and 1: from 2 on, session.complete holds it."""
    last, complete = full[-1], full[cut - 1]
    return (
        cut == len(full) - 1
        and type(complete) is SessionCompleteEvent
        and complete.status != "cancelled"
        and type(last) is RunFinishedEvent
        and last.reply is not None
    )


def _recorded_with(path: Path) -> dict[str, Any]:
    """The options a log of ``fixtures/`` was recorded with (fixtures/make_fixtures.py):
    a cut before a handoff whose input filter runs again past the cut needs them."""
    spec = importlib.util.spec_from_file_location("recorded_fixtures", MAKE_FIXTURES)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    recordings = module.FIXTURES
    return recordings[path.stem]()[1] if path.parent.name == "fixtures" else {}


def _check_every_cut(
    full: Sequence[Event], expected: RunResult | None = None, handoffs: Any = None
) -> int:
    """Every proper prefix of ``full`` resumes to the same run. Returns the count."""
    result = replay(full).result if expected is None else expected
    assert result is not None
    messages = _initial(full)
    for cut in range(1, len(full)):
        prefix = list(full[:cut])
        if _lost_with_run_finished(full, cut):
            with pytest.raises(ReplayError, match="the run cannot be rebuilt from this log"):
                resume(prefix, messages=messages)
            continue
        loop = _continue(prefix, full, messages, handoffs)
        assert loop.result == result, cut
        # The same events; under rules 0 and 1, a cancel rebuilt from
        # session.complete may differ from the lost one in its reason or time only.
        assert _bytes(loop.log[:-1]) == _bytes(full[:-1]), cut
        if _bytes(loop.log[-1:]) != _bytes(full[-1:]):
            assert full[0].rules < REPLY_IN_COMPLETE, cut  # type: ignore[union-attr]
            assert cut == len(full) - 1 and type(loop.log[-1].reply) is type(full[-1].reply)  # type: ignore[union-attr]
    return len(full) - 1


@pytest.mark.parametrize("path", FIXTURE_LOGS, ids=lambda p: p.name)
def test_every_cut_of_a_fixture_log_resumes_to_the_same_run(path: Path) -> None:
    events = read_log(path)
    assert type(events[0]) is SessionStartEvent
    if type(events[-1]) is not RunFinishedEvent:
        # A log that ends at a pull point: its cuts resume to the same pending effect.
        messages = _initial(events)
        pending = replay(events).pending
        for cut in range(1, len(events) + 1):
            loop, effect = resume(events[:cut], messages=messages)
            for position, reply in recorded_replies(events):
                if position >= cut:
                    effect = loop.send(reply)
            assert effect == pending and _bytes(loop.log) == _bytes(events)
            loop.close()
        return
    _check_every_cut(events, handoffs=_recorded_with(path).get("handoffs"))


def test_every_cut_of_generated_sessions_resumes_to_the_same_run() -> None:
    cuts = 0
    endings: set[str] = set()
    for seed in SEEDS:
        session = sessions.Session(seed)
        endings.add(f"{session.result.status}/{session.result.reason}")
        cuts += _check_every_cut(session.events, session.result)
    # The generated sessions end in every way a run can end.
    assert {ending.split("/")[0] for ending in endings} == {
        "completed",
        "cancelled",
        "failed",
        "max_steps",
    }
    assert any("CALLER_PROTOCOL_ERROR" in e for e in endings)
    assert any("MODEL_PROTOCOL_ERROR" in e for e in endings)
    assert cuts > 500


# --------------------------------------------------------------------------- the initial transcript


def test_a_log_cut_inside_its_initial_transcript_is_refused_without_the_messages() -> None:
    messages = [UserMessage(f"u{i}", "hi") for i in range(3)]
    loop = agent_loop(messages, tools=[ECHO])
    next(loop)
    loop.close()
    events = list(loop.log)
    for cut in (1, 2, 3, 4):  # session.start, then 1..3 of the 3 messages
        prefix = events[:cut]
        with pytest.raises(ReplayError, match="initial transcript"):
            resume(prefix)
        with pytest.raises(ReplayError, match="initial transcript"):
            fork(prefix, cut - 1)
        resumed, _ = resume(prefix, messages=messages)
        assert list(resumed.messages) == messages  # nothing silently shortened
        assert _bytes(resumed.log) == _bytes(events[:5])  # up to step.start
        resumed.close()
        if cut > 1:  # (the log of cut 1 holds no message to compare with)
            with pytest.raises(ReplayError) as wrong:
                resume(prefix, messages=[UserMessage("other", "hi")])
            assert str(wrong.value) == (
                f"messages= does not match the log's initial transcript ({cut - 1} "
                "message.accepted event(s), maybe cut off; 1 messages given)"
            )
    # A log past its initial transcript is whole: messages must then be exactly those.
    with pytest.raises(ReplayError, match=r"\(3 message.accepted event\(s\); 2 messages given\)"):
        resume(events[:6], messages=messages[:2])


# --------------------------------------------------------------------------- interrupts in hooks

USER = UserMessage("u1", "Echo hi, twice.")
GUARDED = ToolSpec("echo", "Echo once approved.", requires_approval=True)
FIRST = response("request-001", "r1", ToolCall("c1", "echo", {"text": "hi"}))
SECOND = response("request-002", "r2", ToolCall("c2", "echo", {"text": "hi"}))
RESULT_1 = ToolResult("c1", "hi", at=3.0)
RESULT_2 = ToolResult("c2", "hi", at=4.0)
DONE = response("request-003", "r3", "done", at=5.0)


def once(topic: str, exc: BaseException, *, call: int = 1) -> tuple[HookRegistry, HookRegistry]:
    """Hooks whose ``topic`` subscriber raises ``exc`` on its ``call``-th call only,
    and the same hooks as replay gets them (the interrupt does not happen again)."""
    calls = [0]

    def interrupt(payload: dict[str, Any]) -> None:
        calls[0] += 1
        if calls[0] == call:
            raise exc

    def quiet(payload: dict[str, Any]) -> None:
        return None

    live, again = HookRegistry(), HookRegistry()
    live.on(topic, interrupt)
    again.on(topic, quiet)
    return live, again


# case -> (tools, budget, the replies the run gets before a hook interrupts it)
TOPICS: dict[str, tuple[list[ToolSpec], Budget | None, list[Any]]] = {
    "before_step (first)": ([ECHO], None, []),
    "before_step (second)": ([ECHO], None, [FIRST, RESULT_1]),
    "before_plan": ([ECHO], None, [FIRST, RESULT_1]),
    "after_plan": ([ECHO], None, [FIRST]),
    "before_tool_call": ([ECHO], None, [FIRST]),
    "after_tool_call": ([ECHO], None, [FIRST, RESULT_1]),
    "after_step": ([ECHO], None, [FIRST, RESULT_1]),
    "on_pause": ([GUARDED], None, [FIRST]),
    "on_budget_exceeded": ([ECHO], Budget(max_tool_calls=1), [FIRST, RESULT_1, SECOND]),
}


@pytest.mark.parametrize("exc", [KeyboardInterrupt("stop!"), SystemExit(3)], ids=repr)
@pytest.mark.parametrize("case", TOPICS, ids=TOPICS)
def test_a_one_off_interrupt_in_a_hook_leaves_a_log_that_replays(
    case: str, exc: BaseException
) -> None:
    topic = case.split()[0]
    tools, budget, replies = TOPICS[case]
    live, again = once(topic, exc, call=2 if case == "before_step (second)" else 1)
    loop = agent_loop([USER], tools=tools, budget=budget, hooks=live, started_at=1.0)
    with pytest.raises(type(exc)):
        next(loop)
        for reply in replies:
            loop.send(reply)
    events = list(loop.log)
    assert events[-1].type == "run.finished" and loop.result is not None
    assert loop.result.status == "cancelled"
    assert loop.result.reason == f"{type(exc).__name__}: {exc}"
    if topic == "after_tool_call":  # the result arrived: recorded, not lost
        assert events[-2].reply == RESULT_1  # type: ignore[union-attr]
    # It replays, and so does every view of it.
    outcome = replay(events, hooks=again)
    assert outcome.result == loop.result and _bytes(outcome.events) == _bytes(events)
    assert state_at(events, len(events) - 3, hooks=again).sequence == len(events) - 3
    assert state_at(events, len(events) - 1, hooks=again).result == loop.result
    # Cut before run.finished (or anywhere), it resumes to the same run.
    _check_every_cut_with_hooks(events, again, loop.result)


def _check_every_cut_with_hooks(full: list[Event], hooks: HookRegistry, result: RunResult) -> None:
    messages = _initial(full)
    complete = len(full) - 2  # session.complete: only from there does the log know
    for cut in range(1, len(full)):
        loop, effect = resume(full[:cut], hooks=hooks, messages=messages)
        if cut <= complete:
            # Cut before the interrupt was recorded: the run goes on as if it had
            # not happened (it is in no event of this log).
            assert _bytes(loop.log[:cut]) == _bytes(full[:cut])
            loop.close()
            continue
        assert effect is None and loop.result == result  # session.complete holds the reply
        assert _bytes(loop.log) == _bytes(full)


@pytest.mark.parametrize("when", ["tool.call", "tool.result"])
def test_a_one_off_interrupt_in_a_subscriber_leaves_a_log_that_replays(when: str) -> None:
    log = EventLog()
    interrupted: list[int] = []

    def flaky_writer(event: Event) -> None:
        if event.type == when and not interrupted:
            interrupted.append(event.sequence)
            raise KeyboardInterrupt("while writing")

    log.subscribe(flaky_writer)
    loop = agent_loop([USER], tools=[ECHO], log=log)
    with pytest.raises(KeyboardInterrupt):
        next(loop)
        loop.send(FIRST)
        loop.send(RESULT_1)
    events = list(log)
    assert [e.type for e in events[-3:]] == [when, "session.complete", "run.finished"]
    assert replay(events).result == loop.result


def test_run_interrupted_in_a_hook_replays() -> None:
    @tool
    def echo(text: str) -> str:
        """Echo."""
        return text

    live, again = once("after_step", KeyboardInterrupt())
    model = ScriptedModel(
        [
            ScriptedResponse.tool_calls("r1", ToolCall("c1", "echo", {"text": "hi"})),
            ScriptedResponse("r2", (TextBlock("done"),), "stop"),
        ]
    )
    log = EventLog()
    with pytest.raises(KeyboardInterrupt):
        run([USER], model=model, tools=[echo], hooks=live, log=log)
    events = list(log)
    outcome = replay(events, hooks=again)
    assert _bytes(outcome.events) == _bytes(events)
    assert outcome.result is not None
    assert (outcome.result.status, outcome.result.reason) == ("cancelled", "KeyboardInterrupt: ")
    assert outcome.result.steps == 1 and len(outcome.result.messages) == 3


def _interrupted_after_step() -> tuple[list[Event], HookRegistry]:
    live, again = once("after_step", KeyboardInterrupt("x"))
    loop = agent_loop([USER], tools=[ECHO], hooks=live)
    with pytest.raises(KeyboardInterrupt):
        next(loop)
        loop.send(FIRST)
        loop.send(RESULT_1)
    return list(loop.log), again


def test_a_log_edited_after_the_interrupt_reports_the_first_divergence() -> None:
    events, again = _interrupted_after_step()
    edited = [*events[:-1], msgspec.structs.replace(events[-1], at=7.0)]
    with pytest.raises(ReplayDivergence) as info:
        replay(edited, hooks=again)
    # The first try's difference: where the loop went on instead of stopping.
    assert info.value.sequence == len(events) - 2
    assert info.value.expected == events[-2]


def test_a_cancel_that_is_not_an_interrupt_is_not_replayed_as_one() -> None:
    events = read_log(ROOT / "fixtures" / "cancel_mid_tool.jsonl")
    complete = len(events) - 2
    edited = list(events)
    edited[complete] = msgspec.structs.replace(events[complete], at=123.0)
    with pytest.raises(ReplayDivergence) as info:
        replay(edited)
    assert info.value.sequence == complete


def test_a_log_edited_after_an_interrupt_still_diverges() -> None:
    events, again = _interrupted_after_step()
    edited = list(events)
    edited[-3] = msgspec.structs.replace(events[-3], at=99.0)  # the step.end before it
    with pytest.raises(ReplayDivergence) as info:
        replay(edited, hooks=again)
    assert info.value.sequence == len(events) - 3


# --------------------------------------------------------------------------- SIGKILL

# The child records a generated session with a LogWriter and SIGKILLs itself when
# event ``kill_at`` is appended: before the writer wrote it, or after.
_CHILD = """
import os, signal, sys
from replay import LogWriter
from tests.sessions import Session

seed, kill_at, written = int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "after"
session = Session(seed)
loop = session.loop()

def kill(event):
    if event.sequence == kill_at:
        os.kill(os.getpid(), signal.SIGKILL)

writer = LogWriter(sys.argv[1])
if not written:
    loop.log.subscribe(kill)
writer.follow(loop.log)
if written:
    loop.log.subscribe(kill)
effect = next(loop)
for reply in session.replies:
    effect = loop.send(reply)
"""


def _read_what_survived(path: Path) -> list[Event]:
    try:
        return read_log(path)
    except TornLogError as torn:  # pragma: no cover - LogWriter writes whole lines
        return torn.events


@pytest.mark.parametrize("trial", range(6))
def test_sigkill_at_a_random_point_then_resume_gives_the_same_run(
    trial: int, tmp_path: Path
) -> None:
    rng = random.Random(trial)
    seed = rng.choice([s for s in SEEDS if len(sessions.Session(s).events) > 6])
    session = sessions.Session(seed)
    kill_at = rng.randrange(len(session.events) - 1)
    written = rng.choice(["before", "after"])
    path = tmp_path / "session.jsonl"
    with sigkilled(_CHILD, str(path), str(seed), str(kill_at), written) as child:
        child.wait(timeout=60)  # it kills itself

    # LogWriter writes at side-effect boundaries: what survives is every event up to
    # the last boundary the writer saw (the event it saw last is kill_at when the
    # kill came after it, kill_at - 1 when before).
    seen = kill_at + (1 if written == "after" else 0)
    survived = max((i + 1 for i in range(seen) if session.events[i].type in _SYNC_AFTER), default=0)
    assert len(_read_what_survived(path)) == survived
    _recover(path, session)


def _recover(path: Path, session: sessions.Session) -> None:
    """What survived the kill resumes, appended to the same file, to the session's run."""
    events = _read_what_survived(path)
    if not events:
        return  # killed before session.start was written: nothing happened yet
    if len(events) == len(session.events):
        assert replay(events).result == session.result  # it finished before the kill
        return
    if _lost_with_run_finished(session.events, len(events)):
        with pytest.raises(ReplayError, match="cannot be rebuilt"):
            resume(events, messages=session.messages)
        return
    loop, effect = resume(events, messages=session.messages)
    with LogWriter(path) as writer:
        writer.follow(loop.log)
        if effect is not None:
            replies = recorded_replies(session.events)
            _send_all(loop, [reply for position, reply in replies if position >= len(events)])
    assert loop.result == session.result
    final = read_log(path)
    assert replay(final).result == session.result
    assert _bytes(final[:-1]) == _bytes(session.events[:-1])


_SLOW_CHILD = """
import sys, time
from agentloop import CallerProtocolError
from replay import LogWriter
from tests.sessions import Session

session = Session(int(sys.argv[2]))
loop = session.loop()
with LogWriter(sys.argv[1]) as writer:
    writer.follow(loop.log)
    print("started", flush=True)
    try:
        effect = next(loop)
        for reply in session.replies:
            time.sleep(0.002)
            effect = loop.send(reply)
    except (StopIteration, CallerProtocolError):
        pass
print("finished", flush=True)
time.sleep(60)
"""


@pytest.mark.parametrize("trial", range(3))
def test_sigkill_from_outside_at_a_random_moment_then_resume(trial: int, tmp_path: Path) -> None:
    seed = max(SEEDS, key=lambda s: len(sessions.Session(s).events))  # the longest session
    session = sessions.Session(seed)
    path = tmp_path / "session.jsonl"
    with sigkilled(_SLOW_CHILD, str(path), str(seed)) as child:
        assert child.stdout is not None
        assert child.stdout.readline() == b"started\n"
        # Somewhere in the run (or after it): the delay decides, not the test.
        threading.Event().wait(random.Random().uniform(0.0, 0.15))

    _recover(path, session)
