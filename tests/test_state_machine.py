"""Hypothesis drives the raw generator with random replies (DESIGN §5-§7, §9-§11).

A ``RuleBasedStateMachine`` plays the caller: at every pull point it may send a
legal reply (chunks, responses, model failures and protocol errors, tool results,
approvals, denials, edits, budget resumes with or without a new budget), an
illegal one (wrong kind, wrong call id, malformed ``Resume``, not a reply at all),
a ``Cancel``, or ``close()`` the loop. The loop runs with a random budget, tools
that need approval, and hooks that pause, skip, abort or fail.

After every step: the state is one of the seven; every state change seen (by a log
subscriber reading ``loop.state`` at each event, and after each ``send``) is an
edge of the table; sequences are contiguous; ``run.finished`` appears at most once
and only last; the pending effect matches the state. Illegal replies raise
``CallerProtocolError`` and nothing else. Every run ends with exactly one
``run.finished``, and its transcript holds only complete messages.
"""

from __future__ import annotations

import gc
import itertools
import math
import sys
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import event as hypothesis_event
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    rule,
)

from agentloop import (
    SKIP,
    AgentLoop,
    Budget,
    CallerProtocolError,
    Cancel,
    EventLog,
    FollowUp,
    HookAbort,
    HookRegistry,
    MessageQueuedEvent,
    ModelChunk,
    ModelFailure,
    ModelRequest,
    ModelResponse,
    Pause,
    PauseRequest,
    Resume,
    RunResult,
    State,
    Steer,
    TextBlock,
    ToolBatch,
    ToolCall,
    ToolRequest,
    ToolResult,
    ToolSpec,
    UserMessage,
    agent_loop,
    close_dangling_calls,
    validate_transcript,
)
from agentloop._state import TRANSITIONS
from replay import replay
from tests.helpers import examples

ECHO = ToolSpec("echo", "Echo the text.", {"type": "object"})
DELETE = ToolSpec("delete", "Delete a path.", {"type": "object"}, requires_approval=True)
WRITE = ToolSpec("write", "Write a file.", {"type": "object"}, sequential=True)
#: What a call's "text" argument makes the before_tool_call hook do.
HOOK_WORDS = ("plain",) * 6 + ("ask", "skip", "abort", "boom")

#: Target states reachable in one move from each state (DESIGN §6).
EDGES: dict[State, set[State]] = {state: set() for state in State}
for (_source, _), _target in TRANSITIONS.items():
    EDGES[_source].add(_target)

#: The state the loop must be in while each kind of effect is pending.
STATE_OF_EFFECT = {
    ModelRequest: State.PLANNING,
    ToolRequest: State.AWAITING_TOOL,
    ToolBatch: State.AWAITING_BATCH,
    Pause: State.IDLE,
}


#: The caller's moves, weighted: mostly legal replies, so runs get far enough to
#: reach budget pauses, approvals and max_steps.
MOVES = ("reply",) * 16 + (
    "cancel",
    "close",
    "illegal_reply",
    "illegal_reply",
    "model_misbehaves",
    "steer",
    "steer",
    "follow_up",
)
DECISIONS: list[dict[str, Any]] = [
    {"approved": True},
    {"approved": True},
    {"approved": False},
    {"approved": False, "message": "no"},
    {"approved": True, "arguments": {"text": "edited"}},
    {"approved": True, "arguments": {"text": "ask"}},
    {"approved": True, "arguments": ["not", "an", "object"]},
]


def before_tool_call(payload: dict[str, Any]) -> object:
    word = payload["arguments"].get("text")
    if word == "ask":
        return PauseRequest("review", {"word": word})
    if word == "skip":
        return SKIP
    if word == "abort":
        raise HookAbort("vetoed")
    if word == "boom":
        raise KeyError("boom")
    return None


def skip_step_at(step: int) -> Any:
    return lambda payload: SKIP if payload["step"] == step else None


budgets = st.one_of(
    st.none(),
    st.builds(
        Budget,
        max_turns=st.none() | st.integers(1, 3),
        max_tool_calls=st.none() | st.integers(1, 4),
        max_wall_seconds=st.none() | st.floats(5, 20),
    ),
)


class AgentLoopMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.loop: AgentLoop | None = None
        self.effect: Any = None
        self.result: RunResult | None = None
        self.seen: list[State] = []
        self.ids = itertools.count(1)
        self.now = 0.0
        # the plan for the open model request: its id, blocks, stop reason, chunks sent
        self.plan_for: str | None = None
        self.blocks: tuple[Any, ...] = ()
        self.stop_reason = "stop"
        self.sent_chunks = 0
        self.answered: set[str] = set()  # calls of the pending batch already answered

    # ------------------------------------------------------------------ setup

    @initialize(
        max_steps=st.integers(1, 5),
        budget=budgets,
        skip_at=st.sampled_from([None] * 6 + [1, 2, 3]),
        started_at=st.none() | st.floats(0, 100),
        parallel_tools=st.booleans(),
    )
    def start(
        self,
        max_steps: int,
        budget: Budget | None,
        skip_at: int | None,
        started_at: float | None,
        parallel_tools: bool,
    ) -> None:
        hooks = HookRegistry({"before_tool_call": before_tool_call})
        if skip_at is not None:
            hooks.on("before_step", skip_step_at(skip_at))
        log = EventLog()
        log.subscribe(lambda event: self.observe())
        self.now = started_at or 0.0
        self.hooks = hooks
        self.loop = agent_loop(
            [UserMessage("u1", "go")],
            tools=[ECHO, DELETE, WRITE],
            max_steps=max_steps,
            budget=budget,
            hooks=hooks,
            log=log,
            started_at=started_at,
            parallel_tools=parallel_tools,
        )
        self.observe()
        self.step_result(lambda: next(self.live))

    @property
    def live(self) -> AgentLoop:
        assert self.loop is not None
        return self.loop

    def observe(self) -> None:
        self.seen.append(self.live.state)

    def running(self) -> bool:
        return self.loop is not None and self.result is None

    def step_result(self, action: Any, *, legal: bool = True) -> None:
        """Run ``action`` (a ``send``/``next``) and record what came of it."""
        try:
            effect = action()
        except StopIteration as stop:
            self.result = stop.value
        except CallerProtocolError:
            assert not legal, "a legal reply raised CallerProtocolError"
            self.result = self.live.result
            assert self.result is not None and self.result.error is not None
            assert self.result.error.code == "CALLER_PROTOCOL_ERROR"
            with pytest.raises(CallerProtocolError):  # the run is dead: sticky
                self.live.send(Cancel())
        else:
            assert legal, f"an illegal reply was accepted; the loop yielded {effect!r}"
            if effect is not self.effect:
                self.answered = set()
            self.effect = effect
        self.observe()

    def send(self, reply: Any, *, legal: bool = True) -> None:
        self.step_result(lambda: self.live.send(reply), legal=legal)

    def tick(self, data: st.DataObject) -> float | None:
        if data.draw(st.booleans(), label="stamped"):
            self.now += data.draw(st.sampled_from([0.5, 2.0, 5.0, 11.0]), label="elapsed")
            return self.now
        return None

    # ------------------------------------------------------------------ model replies

    def plan(self, data: st.DataObject) -> None:
        request = self.effect
        if self.plan_for == request.id:
            return
        self.plan_for, self.sent_chunks = request.id, 0
        calls = data.draw(st.sampled_from([0, 1, 1, 2, 2, 3, 4]), label="calls")
        blocks: list[Any] = []
        if calls == 0 or data.draw(st.booleans(), label="with text"):
            blocks.append(TextBlock(data.draw(st.sampled_from(["ok", "thinking aloud"]))))
        for _ in range(calls):
            name = data.draw(
                st.sampled_from(["echo", "echo", "delete", "write", "nope"]), label="tool"
            )
            word = data.draw(st.sampled_from(HOOK_WORDS), label="word")
            blocks.append(ToolCall(f"c{next(self.ids)}", name, {"text": word}))
        self.blocks = tuple(blocks)
        self.stop_reason = (
            "stop" if not calls else data.draw(st.sampled_from(["tool_call", "length"]))
        )

    @rule(data=st.data())
    def act(self, data: st.DataObject) -> None:
        """One move of the caller: mostly a legal reply, sometimes a disruption."""
        if not self.running():
            self.after_the_end()
            return
        move = data.draw(st.sampled_from(MOVES), label="move")
        if move == "reply":
            kind = type(self.effect)
            if kind is ModelRequest:
                self.model_reply(data)
            elif kind is ToolRequest:
                self.tool_result(data)
            elif kind is ToolBatch:
                self.batch_result(data)
            else:
                self.resume(data)
        else:
            getattr(self, move)(data)

    def after_the_end(self) -> None:
        """Once finished, ``close()`` changes nothing."""
        before = len(self.live.log)
        self.live.close()
        self.observe()
        assert len(self.live.log) == before

    # ------------------------------------------------------------------ legal replies

    def model_reply(self, data: st.DataObject) -> None:
        self.plan(data)
        request_id = self.effect.id
        # Stream all the blocks or none (a partial stream is model_misbehaves' job).
        streaming = self.sent_chunks > 0 or data.draw(st.booleans(), label="stream")
        if streaming and self.sent_chunks < len(self.blocks):
            block = self.blocks[self.sent_chunks]
            self.sent_chunks += 1
            self.send(ModelChunk(request_id, block, at=self.tick(data)))
            return
        self.plan_for = None  # the next request gets a new plan
        response_id = f"r{next(self.ids)}"
        response = ModelResponse(
            request_id, response_id, self.blocks, self.stop_reason, at=self.tick(data)
        )
        self.send(response)

    def tool_result(self, data: st.DataObject) -> None:
        content = data.draw(st.sampled_from(["fine", ""]), label="content")
        is_error = data.draw(st.booleans(), label="is_error")
        self.send(ToolResult(self.effect.call.id, content, is_error, at=self.tick(data)))

    def batch_result(self, data: st.DataObject) -> None:
        """A result for any call of the batch not answered yet: arrival in any order."""
        waiting = [r.call.id for r in self.effect.requests if r.call.id not in self.answered]
        call_id = data.draw(st.sampled_from(waiting), label="batch call")
        content = data.draw(st.sampled_from(["fine", ""]), label="content")
        is_error = data.draw(st.booleans(), label="is_error")
        self.answered.add(call_id)
        self.send(ToolResult(call_id, content, is_error, at=self.tick(data)))

    def resume(self, data: st.DataObject) -> None:
        at = self.tick(data)
        if self.effect.reason.startswith("budget_exceeded:"):
            budget = data.draw(budgets, label="new budget")
            self.send(Resume(budget=budget, at=at))
            return
        decision = data.draw(st.sampled_from(DECISIONS), label="decision")
        self.send(Resume(decision, at=at))

    def model_misbehaves(self, data: st.DataObject) -> None:
        """Model failures and model protocol errors: the run fails, nothing is raised."""
        if type(self.effect) is not ModelRequest:
            return self.illegal_reply(data)
        request_id = self.effect.id
        reply = data.draw(
            st.sampled_from(
                [
                    ModelFailure(request_id, "provider down"),
                    ModelChunk("request-999", TextBlock("stale")),
                    ModelResponse("request-999", f"r{next(self.ids)}", (TextBlock("x"),), "stop"),
                    ModelResponse(request_id, f"r{next(self.ids)}", (TextBlock("x"),), "tool_call"),
                    ModelResponse(request_id, f"r{next(self.ids)}", (TextBlock("x"),), "bogus"),
                    ModelResponse(request_id, f"r{next(self.ids)}", (TextBlock("x"),), "error"),
                ]
            ),
            label="bad model reply",
        )
        self.send(reply)
        assert self.result is not None and self.result.status == "failed"
        return None

    # ------------------------------------------------------------------ steering

    def steer(self, data: st.DataObject) -> None:
        """A Steer at any yield: recorded, and the same effect comes back."""
        self.queue(Steer(UserMessage(f"s{next(self.ids)}", "change course"), at=self.tick(data)))

    def follow_up(self, data: st.DataObject) -> None:
        self.queue(FollowUp(UserMessage(f"f{next(self.ids)}", "and then?"), at=self.tick(data)))

    def queue(self, reply: Steer | FollowUp) -> None:
        before, state = self.effect, self.live.state
        self.send(reply)
        assert self.effect is before or self.effect == before
        assert self.live.state is state
        last = self.live.log[-1]
        assert type(last) is MessageQueuedEvent and last.reply == reply

    # ------------------------------------------------------------------ disruptions

    def cancel(self, data: st.DataObject) -> None:
        reason = data.draw(st.sampled_from(["", "user stop"]), label="reason")
        pause_reason = self.effect.reason if type(self.effect) is Pause else None
        self.send(Cancel(reason, at=self.tick(data)))
        assert self.result is not None
        assert (self.result.status, self.result.reason) == (
            "cancelled",
            reason or pause_reason or "cancelled",
        )

    def close(self, data: st.DataObject | None = None) -> None:
        self.live.close()
        self.observe()
        self.result = self.live.result
        assert self.result is not None
        assert (self.result.status, self.result.reason) == ("cancelled", "closed")

    def illegal_reply(self, data: st.DataObject) -> None:
        effect = self.effect
        anywhere: list[Any] = [
            "not a reply",
            None,
            42,
            ModelChunk(7, TextBlock("x")),  # wrong field type
            Cancel(at=math.nan),
        ]
        if type(effect) is ModelRequest:
            wrong: list[Any] = [ToolResult("c1", "x"), Resume(), Resume({"approved": True})]
        elif type(effect) is ToolRequest:
            wrong = [
                ToolResult(effect.call.id + "-other", "x"),
                ModelChunk("request-001", TextBlock("x")),
                ModelResponse("request-001", "rx", (TextBlock("x"),), "stop"),
                Resume(),
            ]
        elif type(effect) is ToolBatch:
            wrong = [
                ToolResult("not-in-the-batch", "x"),
                ModelResponse("request-001", "rx", (TextBlock("x"),), "stop"),
                Resume(),
                *(ToolResult(call_id, "again") for call_id in sorted(self.answered)),
            ]
        else:
            wrong = [ToolResult("c1", "x"), ModelFailure("request-001", "x")]
            if not effect.reason.startswith("budget_exceeded:"):
                wrong += [Resume(), Resume({"approve": True}), Resume({"approved": "yes"})]
        self.send(data.draw(st.sampled_from(anywhere + wrong), label="illegal"), legal=False)

    # ------------------------------------------------------------------ invariants

    @invariant()
    def state_is_one_of_seven(self) -> None:
        if self.loop is not None:
            assert self.live.state in set(State)
            assert len(State) == 7

    @invariant()
    def state_changes_follow_the_table(self) -> None:
        for before, after in itertools.pairwise(self.seen):
            assert before is after or after in EDGES[before], f"{before.name} -> {after.name}"

    @invariant()
    def log_is_well_formed(self) -> None:
        if self.loop is None:
            return
        events = self.live.log.events
        assert [e.sequence for e in events] == list(range(len(events)))
        finished = [i for i, e in enumerate(events) if e.type == "run.finished"]
        if self.result is None:
            assert finished == []
        else:
            assert finished == [len(events) - 1]

    @invariant()
    def pending_effect_matches_the_state(self) -> None:
        if not self.running():
            if self.loop is not None:
                assert self.live.state is State.DONE
                assert self.live.pending is None
            return
        assert self.live.pending == self.effect
        assert self.live.state is STATE_OF_EFFECT[type(self.effect)]
        assert self.live.step <= self.live.log[0].max_steps

    def teardown(self) -> None:
        if self.loop is None:
            return
        if self.result is None:
            self.close()
        result = self.live.result
        assert result is not None and result == self.result
        events = self.live.log.events
        assert [e.type for e in events].count("run.finished") == 1
        assert events[-1].type == "run.finished"
        assert events[-1].status == result.status
        # only complete messages: closing dangling calls makes a valid transcript
        validate_transcript(close_dangling_calls(result.messages))
        assert self.seen[-1] is State.DONE
        reason = result.reason if result.status != "failed" else result.error.code  # type: ignore[union-attr]
        hypothesis_event(f"{result.status}: {reason}")
        for pause in {e.reason for e in events if e.type == "session.pause"}:
            hypothesis_event(f"paused: {pause}")
        if self.live.log[0].parallel_tools:
            hypothesis_event("parallel tools")
        if any(e.type == "message.queued" for e in events):
            hypothesis_event("steered or followed up")
        # Any interleaving of replies (steering and follow-ups included) replays.
        assert replay(events, hooks=self.hooks).result == result


AgentLoopMachine.TestCase.settings = settings(
    max_examples=examples(200),
    stateful_step_count=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestAgentLoopMachine = AgentLoopMachine.TestCase


# --------------------------------------------------------------------------- after the end


def finished_loop() -> AgentLoop:
    loop = agent_loop([UserMessage("u1", "go")], tools=[ECHO])
    request = next(loop)
    with pytest.raises(StopIteration):
        loop.send(ModelResponse(request.id, "r1", (TextBlock("done"),), "stop"))
    return loop


def test_a_reply_after_the_run_finished_is_caller_misuse_and_logs_nothing() -> None:
    loop = finished_loop()
    before = list(loop.log)
    with pytest.raises(CallerProtocolError, match="after the run finished"):
        loop.send(Cancel())
    with pytest.raises(StopIteration):  # next() ends like any finished generator
        next(loop)
    assert list(loop.log) == before


def test_close_after_the_run_finished_changes_nothing() -> None:
    loop = finished_loop()
    before = list(loop.log)
    loop.close()
    assert list(loop.log) == before


def test_an_abandoned_loop_is_finalized_quietly_and_records_nothing() -> None:
    # Dropping a paused loop is not a cancel: its log stays at the pause, resumable.
    caught: list[Any] = []
    previous, sys.unraisablehook = sys.unraisablehook, caught.append
    try:
        loop = agent_loop([UserMessage("u1", "go")], tools=[DELETE])
        request = next(loop)
        loop.send(ModelResponse(request.id, "r1", (ToolCall("c1", "delete", {}),), "tool_call"))
        log = loop.log
        before = list(log)
        # The cyclic GC may finalize an inner generator before the outer one.
        inner = loop._gen.gi_yieldfrom
        assert inner is not None
        inner.close()
        del loop, inner
        gc.collect()
    finally:
        sys.unraisablehook = previous
    assert caught == []
    assert list(log) == before
    assert log[-1].type == "session.pause"
