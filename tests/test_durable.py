"""replay.run_durable: the write-ahead rule, group commit, parking, answers, leases.

In-process tests; crashes with real processes are in ``test_durable_crash.py``.
"""

from __future__ import annotations

import contextvars
import sqlite3
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

import agentloop
import replay
from agentloop import (
    Budget,
    CallerProtocolError,
    Cancel,
    CancelToken,
    FunctionModel,
    HookRegistry,
    ModelChunk,
    ModelFailure,
    ModelRequest,
    ModelResponse,
    Resume,
    RunResult,
    ScriptedResponse,
    SessionResumeEvent,
    ToolCall,
    ToolSpec,
    UserMessage,
    run,
    tool,
)
from agentloop._driver import tools_problem
from replay import Parked, SessionLeased, SessionNotFound, SQLiteStore, StoreConflict
from replay._durable import _RENEWER, _Lease

from .helpers import add

QUESTION = [UserMessage("u1", "What is 20 + 22, then 42 + 1?")]


@tool(requires_approval=True)
def publish(text: str) -> str:
    """Publish a text (a human approves first)."""
    return f"published {text!r}"


def answer(request: ModelRequest) -> ScriptedResponse:
    """Two add steps (one call each), then the answer."""
    if request.step == 1:
        return ScriptedResponse.tool_calls("r1", ToolCall("c1", "add", {"left": 20, "right": 22}))
    if request.step == 2:
        return ScriptedResponse.tool_calls("r2", ToolCall("c2", "add", {"left": 42, "right": 1}))
    return ScriptedResponse.text("r3", "42, then 43.")


def publishing(request: ModelRequest) -> ScriptedResponse:
    if request.step == 1:
        return ScriptedResponse.tool_calls(
            "r1", ToolCall("c1", "publish", {"text": "hello"}), text="Publishing."
        )
    return ScriptedResponse.text("r2", "Done.")


APPROVE = Resume({"approved": True})


def plain(fn: Any = answer, tools: Any = (add,), **options: Any) -> RunResult:
    return run(QUESTION, model=FunctionModel(fn), tools=list(tools), **options)


# --------------------------------------------------------------------------- running


def test_a_durable_run_gives_what_run_gives_and_stores_a_replayable_log(store):
    result = replay.run_durable(store, "s", QUESTION, model=FunctionModel(answer), tools=[add])
    assert result == plain()
    info = store.session("s")
    assert (info.status, info.steps, info.lease_owner, info.answered) == (
        "completed",
        3,
        None,
        False,
    )
    assert replay.replay(store.events("s")).result == result
    # Group commit: before each model call, before each tool call, at the end.
    assert store.commits == 2 + 2 + 2


def test_the_write_ahead_rule(store):
    # Inside a model call the stored log ends with that step's step.start; inside a
    # tool, with that call's tool.call: an effect's events are durable before it runs.
    seen: list[tuple[str, str]] = []

    def model_fn(request: ModelRequest) -> ScriptedResponse:
        last = store.events("s")[-1]
        seen.append((f"model {request.id}", f"{last.type} {last.request_id}"))
        return answer(request)

    @tool(name="add")
    def watched_add(left: int, right: int) -> dict[str, int]:
        """Add two integers."""
        last = store.events("s")[-1]
        seen.append((f"tool {agentloop.idempotency_key()}", f"{last.type} {last.call.id}"))
        return {"sum": left + right}

    replay.run_durable(store, "s", QUESTION, model=FunctionModel(model_fn), tools=[watched_add])
    assert seen == [
        ("model request-001", "step.start request-001"),
        ("tool s:c1", "tool.call c1"),
        ("model request-002", "step.start request-002"),
        ("tool s:c2", "tool.call c2"),
        ("model request-003", "step.start request-003"),
    ]


def test_chunks_of_one_stream_are_committed_together(store):
    # A streamed answer (three text deltas) is one model call: no commit between chunks.
    text = "x" * 300
    result = replay.run_durable(
        store, "s", QUESTION, model=FunctionModel(lambda request: text), tools=[]
    )
    assert result.final_text == text
    assert [e.type for e in store.events("s")].count("model.chunk") > 1
    assert store.commits == 2


def test_tools_read_their_idempotency_key(store):
    keys: list[Any] = []

    @tool(name="add")
    def keyed_add(left: int, right: int) -> dict[str, int]:
        """Add two integers."""
        keys.append(agentloop.idempotency_key())
        # The key follows the context into threads started with it.
        context = contextvars.copy_context()
        thread = threading.Thread(
            target=lambda: keys.append(context.run(agentloop.idempotency_key))
        )
        thread.start()
        thread.join()
        return {"sum": left + right}

    replay.run_durable(store, "order-7", QUESTION, model=FunctionModel(answer), tools=[keyed_add])
    assert keys == ["order-7:c1", "order-7:c1", "order-7:c2", "order-7:c2"]
    assert agentloop.idempotency_key() is None  # outside a durable tool call
    plain(tools=[keyed_add])
    assert keys[-2:] == [None, None]


def test_on_event_sees_every_new_event_as_it_happens(store):
    seen: list[Any] = []
    result = replay.run_durable(
        store, "s", QUESTION, model=FunctionModel(answer), tools=[add], on_event=seen.append
    )
    assert seen == store.events("s")
    assert seen[-1].type == "run.finished" and result.status == "completed"


def test_on_event_of_a_resumed_session_starts_after_the_stored_events(store):
    with pytest.raises(Interrupted):
        replay.run_durable(
            store, "s", QUESTION, model=FunctionModel(answer), tools=[interrupting_add]
        )
    stored = len(store.events("s"))
    seen: list[Any] = []
    replay.run_durable(store, "s", model=FunctionModel(answer), tools=[add], on_event=seen.append)
    assert seen == store.events("s")[stored:]
    assert seen[0].type == "tool.result"


def test_a_finished_session_gives_its_result_without_running_anything(store):
    first = replay.run_durable(store, "s", QUESTION, model=FunctionModel(answer), tools=[add])
    commits = store.commits
    model = FunctionModel(answer)
    # The same call again (after a crash right at the end, say), and a bare one.
    assert replay.run_durable(store, "s", QUESTION, model=model, tools=[add]) == first
    assert replay.run_durable(store, "s", model=model, tools=[add]) == first
    assert model.call_count == 0 and store.commits == commits
    assert store.session("s").lease_owner is None


def test_an_invalid_transcript_is_stored_as_the_failed_run_it_is(store):
    bad = [{"role": "user", "id": "u1"}]  # no content
    result = replay.run_durable(store, "bad", bad, model=FunctionModel(answer), tools=[add])
    assert (result.status, result.reason) == ("failed", "INVALID_TRANSCRIPT")
    assert store.session("bad").status == "failed"
    assert [e.type for e in store.events("bad")] == ["run.finished"]
    again = replay.run_durable(store, "bad", bad, model=FunctionModel(answer), tools=[add])
    assert again == result
    assert store.commits == 1


def test_a_cancel_token_cancels_and_the_cancel_is_stored(store):
    token = CancelToken()
    token.cancel("user pressed stop")
    result = replay.run_durable(
        store, "s", QUESTION, model=FunctionModel(answer), tools=[add], signal=token
    )
    assert (result.status, result.reason) == ("cancelled", "user pressed stop")
    assert store.session("s").status == "cancelled"
    assert replay.replay(store.events("s")).result == result


def test_a_model_failure_ends_the_run_failed_and_stored(store):
    def broken(request: ModelRequest) -> Any:
        return ModelFailure(request.id, "rate limited")

    result = replay.run_durable(store, "s", QUESTION, model=FunctionModel(broken), tools=[add])
    assert (result.status, result.reason) == ("failed", "MODEL_ERROR")
    assert replay.replay(store.events("s")).result == result


# --------------------------------------------------------------------------- crashes (in process)


class Interrupted(BaseException):
    """Stands for Ctrl-C or a dying process inside a tool."""


def test_an_exception_out_of_a_tool_is_not_a_cancel_and_the_same_call_finishes(store):
    attempts: list[Any] = []
    crash = [True]

    @tool(name="add")
    def fragile_add(left: int, right: int) -> dict[str, int]:
        """Add two integers."""
        attempts.append(agentloop.idempotency_key())
        if left == 42 and crash[0]:
            crash[0] = False
            raise Interrupted
        return {"sum": left + right}

    with pytest.raises(Interrupted):
        replay.run_durable(store, "s", QUESTION, model=FunctionModel(answer), tools=[fragile_add])
    info = store.session("s")
    assert (info.status, info.lease_owner) == ("running", None)  # not cancelled; lease freed
    events = store.events("s")
    assert (events[-1].type, events[-1].call.id) == ("tool.call", "c2")  # the effect in flight
    assert store.runnable() == ["s"]
    result = replay.run_durable(
        store, "s", QUESTION, model=FunctionModel(answer), tools=[fragile_add]
    )
    assert result == plain()
    assert attempts == ["s:c1", "s:c2", "s:c2"]  # the call in flight ran again, same key
    assert replay.replay(store.events("s")).result == result


def test_an_exception_in_the_middle_of_a_stream_leaves_the_request_to_run_again(store):
    calls: list[str] = []

    class Flaky:
        def stream(self, request: ModelRequest) -> Iterator[Any]:
            calls.append(request.id)
            for n, item in enumerate(FunctionModel(answer).stream(request)):
                if len(calls) == 1 and n == 1:
                    raise Interrupted
                yield item

    with pytest.raises(Interrupted):
        replay.run_durable(store, "s", QUESTION, model=Flaky(), tools=[add])
    assert store.events("s")[-1].type == "step.start"  # no chunk was committed
    assert replay.run_durable(store, "s", model=Flaky(), tools=[add]) == plain()
    assert calls == ["request-001", "request-001", "request-002", "request-003"]


# --------------------------------------------------------------------------- parking


def test_a_pause_without_on_pause_parks_and_an_answer_continues_it(store):
    options: dict[str, Any] = {"model": FunctionModel(publishing), "tools": [publish]}
    parked = replay.run_durable(store, "s", QUESTION, **options)
    assert type(parked) is Parked
    assert parked.session_id == "s" and parked.steps == 1
    assert parked.pause.reason == "approval"
    assert parked.pause.payload == {
        "call": {"id": "c1", "name": "publish", "arguments": {"text": "hello"}}
    }
    info = store.session("s")
    assert (info.status, info.lease_owner, info.answered) == ("paused", None, False)
    assert store.events("s")[-1].type == "session.pause"
    assert store.runnable() == []
    # Without an answer it stays parked: nothing is leased, replayed or written.
    commits = store.commits
    assert replay.run_durable(store, "s", **options) == parked
    assert store.commits == commits
    replay.answer(store, "s", APPROVE)
    assert store.runnable() == ["s"] and store.session("s").answered
    result = replay.run_durable(store, "s", **options)
    assert result == plain(publishing, (publish,), on_pause=lambda pause: APPROVE)
    assert store.answer_for("s") is None and not store.session("s").answered
    assert replay.replay(store.events("s")).result == result


def test_a_worker_that_dies_right_after_parking_leaves_no_lease(store, monkeypatch):
    # As if the process were killed between the commit that parks and release():
    # the commit itself gave the lease up, so another worker goes on at once.
    options: dict[str, Any] = {"model": FunctionModel(publishing), "tools": [publish]}
    with monkeypatch.context() as patch:
        patch.setattr(store, "release", lambda session_id, owner: False)
        parked = replay.run_durable(store, "s", QUESTION, owner="doomed", **options)
    assert type(parked) is Parked
    info = store.session("s")
    assert (info.status, info.lease_owner, info.lease_expires) == ("paused", None, None)
    replay.answer(store, "s", APPROVE)
    assert store.runnable() == ["s"]
    result = replay.run_durable(store, "s", owner="next", **options)
    assert result == plain(publishing, (publish,), on_pause=lambda pause: APPROVE)


def test_an_answer_is_stamped_when_it_is_applied(store):
    options: dict[str, Any] = {"model": FunctionModel(publishing), "tools": [publish]}
    replay.run_durable(store, "a", QUESTION, **options)
    replay.answer(store, "a", APPROVE)
    replay.run_durable(store, "a", clock=lambda: 77.0, **options)
    replay.run_durable(store, "b", QUESTION, **options)
    replay.answer(store, "b", Resume({"approved": True}, at=5.0))
    replay.run_durable(store, "b", clock=lambda: 77.0, **options)
    (a,) = [e for e in store.events("a") if type(e) is SessionResumeEvent]
    (b,) = [e for e in store.events("b") if type(e) is SessionResumeEvent]
    assert (a.reply.at, b.reply.at) == (77.0, 5.0)


def test_a_cancel_answer_cancels(store):
    options: dict[str, Any] = {"model": FunctionModel(publishing), "tools": [publish]}
    replay.run_durable(store, "s", QUESTION, **options)
    replay.answer(store, "s", Cancel("not today"))
    result = replay.run_durable(store, "s", **options)
    assert (result.status, result.reason) == ("cancelled", "not today")
    assert store.session("s").status == "cancelled" and store.answer_for("s") is None


def test_answering_a_session_that_is_not_parked_is_refused(store):
    replay.run_durable(store, "s", QUESTION, model=FunctionModel(answer), tools=[add])
    with pytest.raises(replay.StoreError, match="is not parked on a pause"):
        replay.answer(store, "s", APPROVE)


def test_on_pause_answers_after_the_pause_is_stored(store):
    seen: list[str] = []

    def on_pause(pause: Any) -> Resume:
        seen.append(store.events("s")[-1].type)
        return APPROVE

    result = replay.run_durable(
        store, "s", QUESTION, model=FunctionModel(publishing), tools=[publish], on_pause=on_pause
    )
    assert seen == ["session.pause"]
    assert result == plain(publishing, (publish,), on_pause=lambda pause: APPROVE)
    assert store.session("s").status == "completed"


def test_a_parked_session_continues_with_on_pause_when_one_is_given(store):
    options: dict[str, Any] = {"model": FunctionModel(publishing), "tools": [publish]}
    replay.run_durable(store, "s", QUESTION, **options)
    result = replay.run_durable(store, "s", on_pause=lambda pause: APPROVE, **options)
    assert result.status == "completed"


def test_a_session_left_at_a_pause_by_a_dead_worker_parks(store):
    # A worker with on_pause died while the human was thinking: the session is
    # "running" with a pause pending; a worker without on_pause parks it.
    def dying(pause: Any) -> Resume:
        raise Interrupted

    options: dict[str, Any] = {"model": FunctionModel(publishing), "tools": [publish]}
    with pytest.raises(Interrupted):
        replay.run_durable(store, "s", QUESTION, on_pause=dying, **options)
    assert store.session("s").status == "running"
    commits = store.commits
    parked = replay.run_durable(store, "s", **options)
    assert type(parked) is Parked
    assert store.session("s").status == "paused"
    assert store.commits == commits + 1  # the status only: no new events
    assert store.events("s")[-1].type == "session.pause"


def test_a_cancel_token_cancels_at_a_pause_instead_of_parking(store):
    token = CancelToken()
    parked_first = replay.run_durable(
        store, "s", QUESTION, model=FunctionModel(publishing), tools=[publish]
    )
    assert type(parked_first) is Parked
    token.cancel("shutting down")
    result = replay.run_durable(
        store,
        "s",
        model=FunctionModel(publishing),
        tools=[publish],
        signal=token,
        on_pause=None,
    )
    assert type(result) is Parked  # a parked session is not even opened
    replay.answer(store, "s", APPROVE)
    result = replay.run_durable(
        store, "s", model=FunctionModel(publishing), tools=[publish], signal=token
    )
    assert (result.status, result.reason) == ("cancelled", "shutting down")

    fresh = replay.run_durable(
        store, "t", QUESTION, model=FunctionModel(publishing), tools=[publish], signal=token
    )
    assert fresh.status == "cancelled"  # cancelled before the first model call


def test_a_cancel_token_cancels_a_session_left_at_a_pause(store):
    def dying(pause: Any) -> Resume:
        raise Interrupted

    options: dict[str, Any] = {"model": FunctionModel(publishing), "tools": [publish]}
    with pytest.raises(Interrupted):
        replay.run_durable(store, "s", QUESTION, on_pause=dying, **options)
    token = CancelToken()
    token.cancel("shutting down")
    result = replay.run_durable(store, "s", signal=token, **options)
    assert (result.status, result.reason) == ("cancelled", "shutting down")
    assert store.session("s").status == "cancelled"


def test_two_pauses_in_a_row_each_take_their_own_answer(store):
    # Two calls needing approval in one step; the first is refused (the loop makes
    # its error result itself: no tool runs, nothing commits), so the second pause
    # comes right away. The first answer must not be taken for it.
    def twice(request: ModelRequest) -> ScriptedResponse:
        if request.step == 1:
            return ScriptedResponse.tool_calls(
                "r1",
                ToolCall("c1", "publish", {"text": "draft"}),
                ToolCall("c2", "publish", {"text": "final"}),
            )
        return ScriptedResponse.text("r2", "One of two published.")

    refuse = Resume({"approved": False, "message": "not the draft"})
    answers = [refuse, APPROVE]
    options: dict[str, Any] = {"model": FunctionModel(twice), "tools": [publish]}
    outcome = replay.run_durable(store, "s", QUESTION, **options)
    seen = []
    while type(outcome) is Parked:
        seen.append(outcome.pause.payload["call"]["id"])
        replay.answer(store, "s", answers[len(seen) - 1])
        outcome = replay.run_durable(store, "s", **options)
    assert seen == ["c1", "c2"]
    replies = iter(answers)
    assert outcome == plain(twice, (publish,), on_pause=lambda pause: next(replies))
    assert replay.replay(store.events("s")).result == outcome


def test_budget_pauses_park_and_a_new_budget_continues(store):
    options: dict[str, Any] = {"model": FunctionModel(answer), "tools": [add]}
    parked = replay.run_durable(store, "s", QUESTION, budget=Budget(max_turns=1), **options)
    assert type(parked) is Parked and parked.pause.reason == "budget_exceeded:turns"
    replay.answer(store, "s", Resume(budget=Budget(max_turns=5)))
    result = replay.run_durable(store, "s", **options)
    assert result.status == "completed"


def test_a_malformed_on_pause_reply_fails_the_run_and_the_failure_is_stored(store):
    with pytest.raises(CallerProtocolError):
        replay.run_durable(
            store,
            "s",
            QUESTION,
            model=FunctionModel(publishing),
            tools=[publish],
            on_pause=lambda pause: "yes",  # type: ignore[arg-type,return-value]
        )
    info = store.session("s")
    assert (info.status, info.lease_owner) == ("failed", None)
    result = replay.replay(store.events("s")).result
    assert result.error.code == "CALLER_PROTOCOL_ERROR"


def test_an_answer_the_loop_refuses_fails_the_run_and_is_consumed(store):
    options: dict[str, Any] = {"model": FunctionModel(publishing), "tools": [publish]}
    replay.run_durable(store, "s", QUESTION, **options)
    replay.answer(store, "s", Resume({"approved": "maybe"}))  # JSON, but not a decision
    with pytest.raises(CallerProtocolError, match="must be a dict with a bool 'approved'"):
        replay.run_durable(store, "s", **options)
    info = store.session("s")
    assert (info.status, info.answered, info.lease_owner) == ("failed", False, None)
    last = store.events("s")[-1]
    assert (last.type, last.error.code) == ("run.finished", "CALLER_PROTOCOL_ERROR")


# --------------------------------------------------------------------------- the same call again


def test_other_messages_or_options_for_an_existing_session_are_refused(store):
    replay.run_durable(store, "s", QUESTION, model=FunctionModel(answer), tools=[add])
    options: dict[str, Any] = {"model": FunctionModel(answer), "tools": [add]}
    with pytest.raises(ValueError, match=r"event #1 \(message.accepted\) differs: message.content"):
        replay.run_durable(store, "s", [UserMessage("u1", "Something else")], **options)
    with pytest.raises(ValueError, match=r"event #0 \(session.start\) differs: system"):
        replay.run_durable(store, "s", QUESTION, system="Be terse.", **options)
    with pytest.raises(ValueError, match="1 initial messages are stored, 2 were given"):
        replay.run_durable(store, "s", [*QUESTION, UserMessage("u2", "More.")], **options)
    with pytest.raises(ValueError, match=r"without messages"):
        replay.run_durable(store, "s", [{"role": "user"}], **options)


def test_a_missing_session_needs_messages(store):
    with pytest.raises(SessionNotFound, match="no session 'nope' in the store; pass messages"):
        replay.run_durable(store, "nope", model=FunctionModel(answer), tools=[add])


def test_the_tools_must_match_the_session(store):
    options: dict[str, Any] = {"model": FunctionModel(publishing)}
    replay.run_durable(store, "s", QUESTION, tools=[publish, add], **options)
    replay.answer(store, "s", APPROVE)
    with pytest.raises(ValueError, match="offers tool 'add', and the tools given have none"):
        replay.run_durable(store, "s", tools=[publish], **options)
    assert store.session("s").lease_owner is None  # released again

    @tool(name="add")
    def other_add(left: str) -> str:
        """Not the same parameters."""
        return left

    with pytest.raises(ValueError, match="tool 'add' takes other parameters"):
        replay.run_durable(store, "s", tools=[publish, other_add], **options)
    # Extra tools are fine (the model is never offered them).
    spare = ToolSpec("spare", "unused", {"type": "object"})
    assert replay.run_durable(store, "s", tools=[publish, add, spare], **options).status == (
        "completed"
    )
    assert tools_problem(replay_registry([add]), [add.spec]) is None
    assert tools_problem(replay_registry([add, publish]), [add.spec], extra=True) is None


def replay_registry(tools: list[Any]) -> Any:
    from agentloop import ToolRegistry

    return ToolRegistry(tools)


# --------------------------------------------------------------------------- leases


def test_a_leased_session_is_refused_to_another_worker(store):
    options: dict[str, Any] = {"model": FunctionModel(publishing), "tools": [publish]}
    replay.run_durable(store, "s", QUESTION, **options)
    replay.answer(store, "s", APPROVE)
    store.acquire("s", "other-worker", 60)
    with pytest.raises(SessionLeased, match="leased by 'other-worker'"):
        replay.run_durable(store, "s", owner="me", **options)
    # The same owner (a restarted worker) takes its own lease back at once.
    assert replay.run_durable(store, "s", owner="other-worker", **options).status == "completed"
    assert store.session("s").lease_owner is None


def test_a_session_finished_meanwhile_by_another_worker_gives_its_result(tmp_path):
    # Between reading the session (running) and leasing it, another worker ends it.
    class Racing(SQLiteStore):
        def _claim(self, session_id: str, owner: str, lease_seconds: float, **kw: Any) -> Any:
            if owner == "late":
                replay.run_durable(self, session_id, model=FunctionModel(answer), tools=[add])
            return super()._claim(session_id, owner, lease_seconds, **kw)

    with Racing(tmp_path / "r.db") as store:
        with pytest.raises(Interrupted):
            replay.run_durable(
                store, "s", QUESTION, model=FunctionModel(answer), tools=[interrupting_add]
            )
        result = replay.run_durable(
            store, "s", model=FunctionModel(answer), tools=[add], owner="late"
        )
        assert result == plain()
        assert store.session("s").lease_owner is None


@tool(name="add")
def interrupting_add(left: int, right: int) -> dict[str, int]:
    """Add two integers."""
    raise Interrupted


def test_a_session_created_meanwhile_by_another_worker_is_a_conflict(store):
    # The other worker creates the session while this one primes its loop.
    hooks = HookRegistry()

    def sneak_in(payload: dict[str, Any]) -> None:
        if store.find("s") is None:
            replay.run_durable(store, "s", QUESTION, model=FunctionModel(answer), tools=[add])

    hooks.on("before_step", sneak_in)
    with pytest.raises(StoreConflict, match="created by another writer"):
        replay.run_durable(
            store, "s", QUESTION, model=FunctionModel(answer), tools=[add], hooks=hooks
        )
    assert store.session("s").status == "completed"


def test_a_worker_whose_lease_was_taken_over_cannot_commit(tmp_path):
    now = [1000.0]
    with SQLiteStore(tmp_path / "l.db", clock=lambda: now[0]) as store:

        @tool(name="add")
        def slow_add(left: int, right: int) -> dict[str, int]:
            """Add two integers."""
            # The worker stalls here past its lease; another one takes the session.
            now[0] += 100
            store.acquire("s", "thief", 30)
            return {"sum": left + right}

        with pytest.raises(SessionLeased, match="'me' lost it"):
            replay.run_durable(
                store,
                "s",
                QUESTION,
                model=FunctionModel(answer),
                tools=[slow_add],
                owner="me",
                lease_seconds=10,
            )
        assert store.session("s").lease_owner == "thief"
        assert store.events("s")[-1].type == "tool.call"  # the stalled result is not stored


def test_the_lease_is_renewed_while_an_effect_runs(store):
    renewed = threading.Event()

    @tool(name="add")
    def slow_add(left: int, right: int) -> dict[str, int]:
        """Add two integers."""
        first = store.session("s").lease_expires
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and store.session("s").lease_expires == first:
            time.sleep(0.005)
        renewed.set()
        return {"sum": left + right}

    result = replay.run_durable(
        store,
        "s",
        QUESTION,
        model=FunctionModel(answer),
        tools=[slow_add],
        lease_seconds=0.03,
    )
    assert renewed.is_set() and result.status == "completed"
    assert store.session("s").lease_owner is None


class FakeStore:
    def __init__(self, outcome: Any) -> None:
        self.outcome = outcome
        self.calls = 0

    def renew(self, session_id: str, owner: str, seconds: float) -> bool:
        self.calls += 1
        if isinstance(self.outcome, BaseException):
            raise self.outcome
        return bool(self.outcome)


@pytest.mark.parametrize(
    "outcome", [False, replay.StoreError("closed"), sqlite3.OperationalError("locked")]
)
def test_the_renewer_drops_a_lease_that_is_lost_or_whose_store_fails(outcome):
    fake = FakeStore(outcome)
    token = _RENEWER.add(fake, "s", "me", 0.003)  # type: ignore[arg-type]
    wait_until(lambda: token not in _RENEWER._leases)
    assert fake.calls == 1
    _RENEWER.remove(token)  # (removing twice is harmless)


def test_the_renewer_renews_each_lease_at_its_own_pace():
    a, b = FakeStore(True), FakeStore(True)
    first = _RENEWER.add(a, "a", "me", 0.003)  # type: ignore[arg-type]
    second = _RENEWER.add(b, "b", "me", 0.03)  # type: ignore[arg-type]
    wait_until(lambda: b.calls >= 2)
    _RENEWER.remove(first)
    _RENEWER.remove(second)
    assert a.calls > b.calls


def test_the_renewer_forgets_the_parent_s_leases_in_a_forked_child():
    # (As the child sees it: a lease of the parent's, and its thread, which a fork
    # does not copy.)
    renewer = type(_RENEWER)()
    renewer._leases[7] = _Lease(FakeStore(True), "s", "me", 60)  # type: ignore[arg-type]
    renewer._thread = threading.Thread(target=lambda: None)
    renewer.forget()
    assert renewer._thread is None and renewer._leases == {}


def wait_until(condition: Any) -> None:
    deadline = time.monotonic() + 30
    while not condition():
        assert time.monotonic() < deadline, "waited 30 s"
        time.sleep(0.001)


# --------------------------------------------------------------------------- options


@pytest.mark.parametrize(
    ("options", "error", "message"),
    [
        ({"session_id": ""}, ValueError, "session_id must be a non-empty str"),
        ({"model": object()}, TypeError, "model must have a stream"),
        ({"signal": "stop"}, TypeError, "signal must be a CancelToken"),
        ({"on_pause": 3}, TypeError, "on_pause must be callable"),
        ({"clock": 3}, TypeError, "clock must be callable"),
        ({"on_event": 3}, TypeError, "on_event must be callable"),
        ({"lease_seconds": 0}, ValueError, "lease_seconds must be a positive number"),
        ({"lease_seconds": float("nan")}, ValueError, "lease_seconds must be a positive number"),
        ({"lease_seconds": "5"}, ValueError, "lease_seconds must be a positive number"),
        ({"owner": ""}, ValueError, "a lease owner is a non-empty str"),
        # (These two reached SQLite, which raised UnicodeEncodeError.)
        ({"session_id": "\ud800"}, ValueError, r"session_id must be .* \(valid Unicode\)"),
        ({"owner": "w\udce9"}, ValueError, r"a lease owner is a non-empty str \(valid Unicode\)"),
    ],
)
def test_bad_options_are_refused_before_anything_runs(store, options, error, message):
    arguments: dict[str, Any] = {
        "session_id": "s",
        "model": FunctionModel(answer),
        "tools": [add],
        **options,
    }
    session_id = arguments.pop("session_id")
    with pytest.raises(error, match=message):
        replay.run_durable(store, session_id, QUESTION, **arguments)
    assert store.sessions() == []


def test_a_model_given_as_chunks_and_response(store):
    # Any Model works, not only FunctionModel: a hand-written stream.
    class Hand:
        def stream(self, request: ModelRequest) -> Iterator[Any]:
            yield ModelChunk(request.id, ToolCall("c1", "add", {"left": 1, "right": 2}))
            if request.step == 1:
                yield ModelResponse(
                    request.id, "r1", (ToolCall("c1", "add", {"left": 1, "right": 2}),), "tool_call"
                )

    result = replay.run_durable(store, "s", QUESTION, model=Hand(), tools=[add], max_steps=2)
    assert result.status == "failed"  # step 2 streamed a chunk, then ended without a response
    assert replay.replay(store.events("s")).result == result


def test_two_threads_sharing_an_owner_id_get_the_documented_errors(store):
    # Thread 1 runs the session; in the middle of its tool, a run in thread 2 with
    # the same owner id takes the lease (its own), runs the pending tool, dies
    # (an exception leaves its tool: nothing committed) and releases the lease.
    # Thread 1's next commit is a SessionLeased (it was a plain StoreError, which
    # the documented serve loop did not catch).
    inside, leave = threading.Event(), threading.Event()
    calls: list[str] = []

    @tool(name="add")
    def shared_add(left: int, right: int) -> dict[str, int]:
        """Add two integers."""
        calls.append(threading.current_thread().name)
        if len(calls) == 1:
            inside.set()
            assert leave.wait(60)
        elif len(calls) == 2:
            raise Interrupted
        return {"sum": left + right}

    options: dict[str, Any] = {
        "model": FunctionModel(answer),
        "tools": [shared_add],
        "owner": "shared",
    }
    outcome: list[BaseException] = []

    def first() -> None:
        try:
            replay.run_durable(store, "s", QUESTION, **options)
        except BaseException as exc:
            outcome.append(exc)

    thread = threading.Thread(target=first, name="first")
    thread.start()
    assert inside.wait(60)
    with pytest.raises(Interrupted):
        replay.run_durable(store, "s", **options)
    assert store.session("s").lease_owner is None
    leave.set()
    thread.join(60)
    (error,) = outcome
    assert isinstance(error, (SessionLeased, StoreConflict)), repr(error)
    assert "nobody holds its lease; 'shared' lost it" in str(error)
    assert replay.run_durable(store, "s", **options).status == "completed"
