"""Hooks: registry, firing order and what each topic may do (DESIGN §6, §9).

Most tests run the engine end to end with its scripted partner (``run`` +
``ScriptedModel`` + ``@tool`` functions, a fixed clock); tests that need to see an
effect itself (a ``ToolRequest``'s arguments) drive the raw generator.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any

import pytest

from agentloop import (
    HOOK_ABORT,
    HOOK_ERROR,
    HOOK_TOPICS,
    MAX_ARGUMENT_DEPTH,
    SKIP,
    AssistantMessage,
    Budget,
    Cancel,
    EventLog,
    HookAbort,
    HookRegistry,
    ModelRequest,
    PauseRequest,
    Resume,
    RunResult,
    ScriptedModel,
    ScriptedResponse,
    TextBlock,
    ToolCall,
    ToolRequest,
    ToolResultMessage,
    UserMessage,
    agent_loop,
    close_dangling_calls,
    content_text,
    run,
    tool,
    validate_transcript,
)
from tests.helpers import add_int as add
from tests.helpers import check_log, drive, response

USER = UserMessage("u1", "Add some numbers.")


@tool
def echo(text: str) -> str:
    """Echo the text."""
    return text


TOOLS = [add, echo]


def add_call(call_id: str, left: int = 1, right: int = 2) -> ToolCall:
    return ToolCall(call_id, "add", {"left": left, "right": right})


def tool_step(response_id: str, *calls: ToolCall) -> ScriptedResponse:
    return ScriptedResponse.tool_calls(response_id, *calls)


def text_step(response_id: str, text: str = "done") -> ScriptedResponse:
    return ScriptedResponse.text(response_id, text)


#: Step 1 asks for two calls, step 2 for one, step 3 answers.
MULTI_STEP = [
    tool_step("r1", add_call("c1", 1, 2), add_call("c2", 3, 4)),
    tool_step("r2", add_call("c3", 5, 6)),
    text_step("r3", "3, 7 and 11"),
]


@dataclasses.dataclass(frozen=True)
class Run:
    result: RunResult
    log: EventLog
    model: ScriptedModel


def go(
    script: list[ScriptedResponse],
    hooks: HookRegistry | None = None,
    **options: Any,
) -> Run:
    """Run ``script`` through ``agentloop.run`` with a fixed clock; check the log."""
    model = ScriptedModel(script)
    log = EventLog()
    options.setdefault("max_steps", len(script))
    result = run(
        [USER],
        model=model,
        tools=TOOLS,
        hooks=hooks,
        log=log,
        clock=lambda: 0.0,
        **options,
    )
    check_log(log.events)
    return Run(result, log, model)


def hooks_on(topic: str, fn: Callable[[dict[str, Any]], object]) -> HookRegistry:
    hooks = HookRegistry()
    hooks.on(topic, fn)
    return hooks


def at_step(step: int, outcome: Callable[[], object]) -> Callable[[dict[str, Any]], object]:
    """A hook that does ``outcome()`` (return it, or let it raise) at ``step`` only."""

    def hook(payload: dict[str, Any]) -> object:
        return outcome() if payload.get("step") == step else None

    return hook


def on_every_topic(fn: Callable[[str, dict[str, Any]], object]) -> HookRegistry:
    """A registry calling ``fn(topic, payload)`` on every topic."""
    hooks = HookRegistry()
    for topic in HOOK_TOPICS:
        hooks.on(topic, functools.partial(fn, topic))
    return hooks


def raise_(exc: BaseException) -> Callable[..., object]:
    """An outcome (or a hook: it ignores its arguments) that raises ``exc``."""

    def outcome(*_: object) -> object:
        raise exc

    return outcome


def tool_results(result: RunResult) -> list[tuple[str, str, bool]]:
    return [
        (m.tool_call_id, content_text(m.content), m.is_error)
        for m in result.messages
        if type(m) is ToolResultMessage
    ]


def assert_failed(outcome: Run, code: str, message: str) -> None:
    assert outcome.result.status == "failed"
    assert outcome.result.error is not None
    assert (outcome.result.error.code, outcome.result.error.message) == (code, message)
    assert outcome.result.reason == code
    assert outcome.log[-1].type == "run.finished"


# --------------------------------------------------------------------------- the registry


def test_there_are_ten_topics_in_lifecycle_order() -> None:
    assert HOOK_TOPICS == (
        "before_step",
        "before_plan",
        "after_plan",
        "before_tool_call",
        "after_tool_call",
        "after_step",
        "on_error",
        "on_pause",
        "on_budget_exceeded",
        "on_complete",
    )


@pytest.mark.parametrize("topic", ["before_run", "", "BEFORE_STEP", "on_start"])
def test_unknown_topic_raises_value_error(topic: str) -> None:
    with pytest.raises(ValueError, match="unknown hook topic"):
        HookRegistry().on(topic, lambda payload: None)
    with pytest.raises(ValueError, match="unknown hook topic"):
        HookRegistry({topic: lambda payload: None})


def test_a_hook_must_be_callable() -> None:
    with pytest.raises(TypeError, match="callable"):
        HookRegistry().on("before_step", "not a function")  # type: ignore[arg-type]


def test_subscribers_run_in_registration_order_on_one_mutable_payload() -> None:
    seen: list[tuple[str, Any]] = []

    def first(payload: dict[str, Any]) -> None:
        seen.append(("first", payload.get("note")))
        payload["note"] = "from first"

    def second(payload: dict[str, Any]) -> None:
        seen.append(("second", payload.get("note")))

    hooks = HookRegistry({"before_step": [first, second]})
    go([text_step("r1")], hooks)
    assert seen == [("first", None), ("second", "from first")]


def test_the_run_snapshots_its_hooks() -> None:
    calls: list[str] = []
    hooks = HookRegistry()
    loop = agent_loop([USER], tools=TOOLS, hooks=hooks)
    hooks.on("before_step", lambda payload: calls.append("late"))
    drive(loop, [response("request-001", "r1", "hi")])
    assert calls == []


# --------------------------------------------------------------------------- firing order


def test_firing_order_across_a_multi_step_tool_run() -> None:
    trace: list[str] = []
    hooks = on_every_topic(lambda topic, payload: trace.append(f"[{topic}]"))
    log = EventLog()
    log.subscribe(lambda event: trace.append(event.type))
    model = ScriptedModel(MULTI_STEP)
    result = run([USER], model=model, tools=TOOLS, hooks=hooks, log=log, clock=lambda: 0.0)
    assert result.status == "completed"

    step_open = ["[before_step]", "step.start", "[before_plan]", "plan.draft", "[after_plan]"]
    one_call = ["[before_tool_call]", "tool.call", "[after_tool_call]", "tool.result"]
    step_close = ["step.end", "[after_step]"]
    assert [t for t in trace if t != "model.chunk"] == [
        "session.start",
        "message.accepted",
        *step_open,
        "plan.commit",
        *one_call,
        *one_call,
        *step_close,
        *step_open,
        "plan.commit",
        *one_call,
        *step_close,
        *step_open,
        "plan.commit",
        *step_close,
        "[on_complete]",
        "session.complete",
        "run.finished",
    ]
    hooks_fired = [t for t in trace if t.startswith("[")]
    assert hooks_fired[:2] == ["[before_step]", "[before_plan]"]
    assert hooks_fired[-1] == "[on_complete]"
    assert hooks_fired.count("[before_tool_call]") == 3  # once per call
    assert hooks_fired.count("[on_error]") == 0  # only failures


def test_payloads_name_the_step_request_and_call() -> None:
    payloads: dict[str, list[dict[str, Any]]] = {}
    hooks = on_every_topic(lambda topic, p: payloads.setdefault(topic, []).append(dict(p)))
    go(MULTI_STEP[1:], hooks)
    assert payloads["before_step"] == [{"step": 1}, {"step": 2}]
    assert [(p["step"], p["request_id"]) for p in payloads["before_plan"]] == [
        (1, "request-001"),
        (2, "request-002"),
    ]
    assert payloads["after_plan"][0] == {
        "step": 1,
        "request_id": "request-001",
        "response_id": "r2",
        "content": [add_call("c3", 5, 6)],
        "stop_reason": "tool_call",
    }
    assert payloads["before_tool_call"] == [
        {"step": 1, "tool_call_id": "c3", "tool_name": "add", "arguments": {"left": 5, "right": 6}}
    ]
    assert payloads["after_tool_call"] == [
        {
            "step": 1,
            "tool_call_id": "c3",
            "tool_name": "add",
            "arguments": {"left": 5, "right": 6},
            "content": "11",
            "is_error": False,
        }
    ]
    assert payloads["after_step"] == [{"step": 1}, {"step": 2}]
    assert payloads["on_complete"] == [
        {"status": "completed", "reason": "goal_met", "final_text": "3, 7 and 11", "steps": 2}
    ]


def test_return_values_other_than_skip_or_pause_request_are_ignored() -> None:
    hooks = HookRegistry()
    for topic in HOOK_TOPICS:
        hooks.on(topic, lambda payload: "ignored")
    outcome = go(MULTI_STEP, hooks)
    assert outcome.result.status == "completed"


def test_skip_stops_the_later_subscribers_of_that_topic() -> None:
    later: list[str] = []
    hooks = HookRegistry(
        {"before_tool_call": [lambda payload: SKIP, lambda payload: later.append("called")]}
    )
    outcome = go([tool_step("r1", add_call("c1")), text_step("r2")], hooks)
    assert tool_results(outcome.result) == [("c1", "skipped", True)]
    assert later == []


# --------------------------------------------------------------------------- before_step


def test_before_step_skip_on_the_first_step_completes_without_asking_the_model() -> None:
    outcome = go([text_step("r1")], hooks_on("before_step", lambda payload: SKIP))
    result = outcome.result
    assert (result.status, result.reason, result.final_text, result.steps) == (
        "completed",
        "skipped_by_hook",
        None,
        0,
    )
    assert outcome.model.call_count == 0
    assert [e.type for e in outcome.log] == [
        "session.start",
        "message.accepted",
        "session.complete",
        "run.finished",
    ]


def test_before_step_skip_later_keeps_the_finished_steps() -> None:
    outcome = go(MULTI_STEP, hooks_on("before_step", at_step(2, lambda: SKIP)))
    result = outcome.result
    assert (result.status, result.reason, result.steps) == ("completed", "skipped_by_hook", 1)
    assert outcome.model.call_count == 1
    assert tool_results(result) == [("c1", "3", False), ("c2", "7", False)]
    validate_transcript(result.messages)


def test_before_step_abort_fails_the_run() -> None:
    outcome = go(MULTI_STEP, hooks_on("before_step", at_step(2, raise_(HookAbort("stop")))))
    assert_failed(outcome, HOOK_ABORT, "before_step hook aborted: stop")
    assert outcome.result.steps == 1


# --------------------------------------------------------------------------- before_plan


def test_before_plan_rewrites_what_the_model_sees_not_the_transcript() -> None:
    note = UserMessage("note", "Be brief.")

    def rewrite(payload: dict[str, Any]) -> None:
        payload["messages"] = [note, *payload["messages"][-1:]]
        payload["system"] = f"step {payload['step']}"

    outcome = go(MULTI_STEP, hooks_on("before_plan", rewrite), system="Be helpful.")
    requests: list[ModelRequest] = outcome.model.requests
    assert [list(r.messages) for r in requests] == [
        [note, USER],
        [note, outcome.result.messages[3]],  # the last result of step 1
        [note, outcome.result.messages[5]],
    ]
    assert [r.system for r in requests] == ["step 1", "step 2", "step 3"]
    # The transcript, the log and the next hook call see the real conversation.
    result = outcome.result
    assert note not in result.messages
    assert result.messages[0] == USER and len(result.messages) == 7
    validate_transcript(result.messages)
    assert outcome.log[0].system == "Be helpful."


def test_before_plan_sees_the_transcript_read_only() -> None:
    seen: list[Any] = []

    def look(payload: dict[str, Any]) -> None:
        seen.append(payload["messages"])
        assert not hasattr(payload["messages"], "append")

    outcome = go(MULTI_STEP[1:], hooks_on("before_plan", look))
    assert [len(view) for view in seen] == [1, 3]
    assert list(seen[1]) == list(outcome.result.messages[:3])


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        (
            "messages",
            "hello",
            "before_plan hook set 'messages' to something not a "
            "list of UserMessage/AssistantMessage/ToolResultMessage",
        ),
        (
            "messages",
            [{"role": "user", "id": "x", "content": "dict, not a message"}],
            "before_plan hook set 'messages' to something not a "
            "list of UserMessage/AssistantMessage/ToolResultMessage",
        ),
        ("system", 42, "before_plan hook set 'system' to a non-str"),
    ],
)
def test_before_plan_invalid_rewrite_is_a_hook_error(key: str, value: Any, message: str) -> None:
    outcome = go(MULTI_STEP, hooks_on("before_plan", lambda payload: payload.update({key: value})))
    assert_failed(outcome, HOOK_ERROR, message)
    assert outcome.model.call_count == 0
    assert list(outcome.result.messages) == [USER]


# --------------------------------------------------------------------------- after_plan


def test_after_plan_valid_edit_is_committed_and_the_draft_is_kept_as_received() -> None:
    def drop_second_call(payload: dict[str, Any]) -> None:
        if payload["step"] == 1:
            payload["content"] = [TextBlock("Only the first."), payload["content"][0]]

    outcome = go(MULTI_STEP, hooks_on("after_plan", drop_second_call))
    result = outcome.result
    assert result.status == "completed"
    assert result.messages[1] == AssistantMessage(
        "message-r1", (TextBlock("Only the first."), add_call("c1", 1, 2))
    )
    assert tool_results(result) == [("c1", "3", False), ("c3", "11", False)]
    validate_transcript(result.messages)
    draft = next(e for e in outcome.log if e.type == "plan.draft")
    assert draft.reply.content == MULTI_STEP[0].content  # recorded input, untouched
    commit = next(e for e in outcome.log if e.type == "plan.commit")
    assert commit.message == result.messages[1]


def test_after_plan_may_turn_a_tool_plan_into_a_final_answer() -> None:
    def answer(payload: dict[str, Any]) -> None:
        payload["content"] = [TextBlock("No tools needed.")]
        payload["stop_reason"] = "stop"

    outcome = go(MULTI_STEP, hooks_on("after_plan", answer))
    result = outcome.result
    assert (result.status, result.reason, result.final_text) == (
        "completed",
        "goal_met",
        "No tools needed.",
    )
    assert outcome.model.call_count == 1
    assert tool_results(result) == []


INVALID_PLANS: dict[str, tuple[Callable[[dict[str, Any]], None], str]] = {
    "stop with a tool call": (
        lambda p: p.update(stop_reason="stop"),
        "after_plan hook produced an invalid plan: "
        "stop reason 'stop' but the response contains tool calls",
    ),
    "tool_call without calls": (
        lambda p: p.update(content=[TextBlock("x")]),
        "after_plan hook produced an invalid plan: "
        "stop reason 'tool_call' but the response contains no tool call",
    ),
    "stop reason error": (
        lambda p: p.update(stop_reason="error"),
        "after_plan hook produced an invalid plan: "
        "stop reason 'error' is not stop, tool_call or length",
    ),
    "duplicate call id": (
        lambda p: p.update(content=[add_call("c1"), add_call("c1")]),
        "after_plan hook produced an invalid plan: "
        "content[1] (tool call 'c1'): tool call id is not unique",
    ),
    "content not a list": (
        lambda p: p.update(content="text"),
        "after_plan hook set 'content' to a non-list",
    ),
}


@pytest.mark.parametrize(
    ("edit", "message"), INVALID_PLANS.values(), ids=list(INVALID_PLANS.keys())
)
def test_after_plan_invalid_edit_fails_with_hook_error(
    edit: Callable[[dict[str, Any]], None], message: str
) -> None:
    outcome = go(MULTI_STEP, hooks_on("after_plan", edit))
    assert_failed(outcome, HOOK_ERROR, message)
    # The draft is recorded; nothing half-made is committed.
    assert [e.type for e in outcome.log][-3:] == ["plan.draft", "session.complete", "run.finished"]
    assert "plan.commit" not in [e.type for e in outcome.log]
    assert list(outcome.result.messages) == [USER]


def test_after_plan_invalid_block_type_fails_with_hook_error() -> None:
    outcome = go(MULTI_STEP, hooks_on("after_plan", lambda p: p.update(content=["raw text"])))
    assert outcome.result.error is not None
    assert outcome.result.error.code == HOOK_ERROR
    assert outcome.result.error.message.startswith("after_plan hook produced an invalid plan:")


# --------------------------------------------------------------------------- before_tool_call


def raw_tool_loop(hooks: HookRegistry, *calls: ToolCall) -> tuple[Any, Any]:
    """A raw loop primed and answered up to the first effect after the plan."""
    loop = agent_loop([USER], tools=TOOLS, hooks=hooks, max_steps=2)
    request = next(loop)
    return loop, loop.send(response(request.id, "r1", *calls))


def test_before_tool_call_rewrites_the_arguments_the_tool_request_carries() -> None:
    def double(payload: dict[str, Any]) -> None:
        payload["arguments"] = {k: v * 2 for k, v in payload["arguments"].items()}

    loop, effect = raw_tool_loop(hooks_on("before_tool_call", double), add_call("c1", 1, 2))
    assert effect == ToolRequest(ToolCall("c1", "add", {"left": 2, "right": 4}), 1)
    assert loop.log[-1].type == "tool.call"
    assert loop.log[-1].call == effect.call  # tool.call records the final arguments
    # The model's plan in the transcript keeps what the model asked for.
    assert loop.messages[-1].content == (add_call("c1", 1, 2),)


def test_before_tool_call_in_place_edit_counts_as_an_edit() -> None:
    # Engine decision: the payload's arguments are the hook's own deep copy, so
    # mutating them in place is an edit just like assigning a new dict.
    def bump(payload: dict[str, Any]) -> None:
        payload["arguments"]["left"] = 40

    _, effect = raw_tool_loop(hooks_on("before_tool_call", bump), add_call("c1", 1, 2))
    assert effect.call.arguments == {"left": 40, "right": 2}
    outcome = go(
        [tool_step("r1", add_call("c1", 1, 2)), text_step("r2")], hooks_on("before_tool_call", bump)
    )
    assert tool_results(outcome.result) == [("c1", "42", False)]


def test_before_tool_call_invalid_arguments_edit_is_a_hook_error() -> None:
    deep: Any = {}
    for _ in range(MAX_ARGUMENT_DEPTH):
        deep = {"x": deep}

    outcome = go(
        [tool_step("r1", add_call("c1")), text_step("r2")],
        hooks_on("before_tool_call", lambda p: p.update(arguments=deep)),
    )
    assert outcome.result.error is not None
    assert outcome.result.error.code == HOOK_ERROR
    assert outcome.result.error.message.startswith(
        "before_tool_call hook set invalid arguments for call 'c1': "
    )
    assert "tool.call" not in [e.type for e in outcome.log]


def test_before_tool_call_abort_gives_an_error_result_and_the_run_goes_on() -> None:
    def veto_first(payload: dict[str, Any]) -> None:
        if payload["tool_call_id"] == "c1":
            raise HookAbort("not today")

    outcome = go(MULTI_STEP, hooks_on("before_tool_call", veto_first))
    result = outcome.result
    assert (result.status, result.reason) == ("completed", "goal_met")
    assert tool_results(result) == [
        ("c1", "hook_abort:not today", True),
        ("c2", "7", False),
        ("c3", "11", False),
    ]
    error = next(e for e in outcome.log if e.type == "tool.error")
    assert error.reply is None  # made by the loop; no ToolRequest was yielded
    # The call still gets its tool.call event, with the model's arguments.
    assert [e.call.id for e in outcome.log if e.type == "tool.call"] == ["c1", "c2", "c3"]
    # The next request shows the model the error result.
    assert outcome.model.requests[1].messages[2] == result.messages[2]


def test_before_tool_call_skip_gives_the_error_result_skipped() -> None:
    loop, effect = raw_tool_loop(
        hooks_on("before_tool_call", lambda p: SKIP if p["tool_call_id"] == "c1" else None),
        add_call("c1"),
        add_call("c2"),
    )
    assert effect == ToolRequest(add_call("c2"), 1)  # c1 never reached the caller
    assert loop.messages[-1] == ToolResultMessage("tool-result-c1", "c1", "add", "skipped", True)


def test_before_tool_call_is_not_asked_about_calls_the_loop_answers_itself() -> None:
    # Engine decision: unknown tools and calls truncated by stop reason "length"
    # never reach before_tool_call (nothing would run); after_tool_call sees them.
    seen: dict[str, list[str]] = {"before_tool_call": [], "after_tool_call": []}
    hooks = on_every_topic(
        lambda topic, p: seen[topic].append(p["tool_call_id"]) if topic in seen else None
    )
    script = [
        tool_step("r1", add_call("c1"), ToolCall("c2", "nope", {})),
        ScriptedResponse("r2", (add_call("c3"),), "length"),
        text_step("r3"),
    ]
    outcome = go(script, hooks)
    assert seen == {"before_tool_call": ["c1"], "after_tool_call": ["c1", "c2", "c3"]}
    assert [r[2] for r in tool_results(outcome.result)] == [False, True, True]


def test_before_tool_call_pause_request_pauses_and_resume_decides() -> None:
    def ask(payload: dict[str, Any]) -> PauseRequest:
        return PauseRequest("review", {"why": "costly"})

    loop, effect = raw_tool_loop(hooks_on("before_tool_call", ask), add_call("c1"))
    assert effect.reason == "review"
    assert effect.payload == {
        "why": "costly",
        "call": {"id": "c1", "name": "add", "arguments": {"left": 1, "right": 2}},
    }
    effect = loop.send(Resume({"approved": True, "arguments": {"left": 20, "right": 22}}))
    assert effect == ToolRequest(ToolCall("c1", "add", {"left": 20, "right": 22}), 1)


# --------------------------------------------------------------------------- after_tool_call


def test_after_tool_call_rewrites_the_result() -> None:
    def redact(payload: dict[str, Any]) -> None:
        if payload["content"] == "7":
            payload["content"] = "[redacted]"
            payload["is_error"] = True

    outcome = go(MULTI_STEP, hooks_on("after_tool_call", redact))
    assert tool_results(outcome.result) == [
        ("c1", "3", False),
        ("c2", "[redacted]", True),
        ("c3", "11", False),
    ]
    event = [e for e in outcome.log if e.type in ("tool.result", "tool.error")][1]
    assert event.type == "tool.error"  # the event follows the final is_error ...
    assert event.reply is not None and event.reply.content == "7"  # ... and keeps the input
    assert outcome.model.requests[1].messages[3].content == "[redacted]"


def test_after_tool_call_may_clear_the_error_flag_of_a_loop_made_result() -> None:
    hooks = HookRegistry()
    hooks.on("before_tool_call", lambda p: SKIP)
    hooks.on("after_tool_call", lambda p: p.update(content="fine", is_error=False))
    outcome = go([tool_step("r1", add_call("c1")), text_step("r2")], hooks)
    assert tool_results(outcome.result) == [("c1", "fine", False)]
    event = next(e for e in outcome.log if e.type == "tool.result")
    assert event.reply is None


@pytest.mark.parametrize(
    "edit", [{"content": 3}, {"content": None}, {"is_error": "yes"}, {"is_error": 1}]
)
def test_after_tool_call_invalid_rewrite_is_a_hook_error(edit: dict[str, Any]) -> None:
    outcome = go(MULTI_STEP, hooks_on("after_tool_call", lambda p: p.update(edit)))
    assert_failed(
        outcome,
        HOOK_ERROR,
        "after_tool_call hook set 'content' to a non-str or 'is_error' to a non-bool",
    )
    # The call got no result: only complete messages, one dangling call.
    assert tool_results(outcome.result) == []
    validate_transcript(close_dangling_calls(outcome.result.messages))


# ------------------------------------------------------------------ after_step and observers


def test_after_step_failure_on_the_last_step_beats_completion() -> None:
    outcome = go(MULTI_STEP, hooks_on("after_step", at_step(3, raise_(RuntimeError("late")))))
    assert_failed(outcome, HOOK_ERROR, "after_step hook raised RuntimeError: late")
    assert outcome.result.final_text is None
    validate_transcript(outcome.result.messages)  # step 3's message was complete


def test_on_error_observes_the_failure_once_and_cannot_change_it() -> None:
    seen: list[dict[str, Any]] = []

    def on_error(payload: dict[str, Any]) -> None:
        seen.append(dict(payload))
        raise RuntimeError("the error hook itself breaks")

    hooks = HookRegistry()
    hooks.on("before_plan", at_step(2, raise_(ValueError("bad plan"))))
    hooks.on("on_error", on_error)
    hooks.on("on_error", lambda p: seen.append({"second": True}))
    outcome = go(MULTI_STEP, hooks)
    assert_failed(outcome, HOOK_ERROR, "before_plan hook raised ValueError: bad plan")
    # Engine decision: an on_error hook that raises is ignored (the first failure
    # wins), and the subscribers after it on that topic are not called.
    assert seen == [{"code": HOOK_ERROR, "message": "before_plan hook raised ValueError: bad plan"}]


def test_on_error_is_not_called_for_runs_that_do_not_fail() -> None:
    calls: list[str] = []
    hooks = hooks_on("on_error", lambda p: calls.append("x"))
    go(MULTI_STEP, hooks)
    go(MULTI_STEP, hooks, max_steps=1)
    assert calls == []


def test_on_complete_sees_every_outcome() -> None:
    seen: list[tuple[str, str]] = []
    hooks = hooks_on("on_complete", lambda p: seen.append((p["status"], p["reason"])))
    go(MULTI_STEP, hooks)
    go(MULTI_STEP, hooks, max_steps=1)
    go(MULTI_STEP, hooks, budget=Budget(max_turns=1))  # no on_pause: the pause cancels
    loop = agent_loop([USER], tools=TOOLS, hooks=hooks)
    drive(loop, [Cancel("user")])
    hooks.on("before_step", lambda p: 1 / 0)
    go(MULTI_STEP, hooks)
    assert seen == [
        ("completed", "goal_met"),
        ("max_steps", "no_more_steps"),
        (
            "cancelled",
            "budget_exceeded:turns: the turns budget was used up and no on_pause was given: "
            "pass on_pause=... to answer it, or use run_durable to park the session",
        ),
        ("cancelled", "user"),
        ("failed", HOOK_ERROR),
    ]


def test_on_complete_failure_fails_a_successful_run_and_reaches_on_error() -> None:
    errors: list[str] = []
    hooks = HookRegistry()
    hooks.on("on_complete", lambda p: {}["missing"])
    hooks.on("on_error", lambda p: errors.append(p["message"]))
    outcome = go(MULTI_STEP, hooks)
    assert_failed(outcome, HOOK_ERROR, "on_complete hook raised KeyError: 'missing'")
    assert outcome.result.final_text is None
    assert errors == ["on_complete hook raised KeyError: 'missing'"]
    finished = [e for e in outcome.log if e.type in ("session.complete", "run.finished")]
    assert [e.status for e in finished] == ["failed", "failed"]


def test_on_complete_failure_after_a_failure_keeps_the_first() -> None:
    hooks = HookRegistry()
    hooks.on("before_step", lambda p: 1 / 0)
    hooks.on("on_complete", lambda p: {}["missing"])
    outcome = go(MULTI_STEP, hooks)
    assert_failed(
        outcome, HOOK_ERROR, "before_step hook raised ZeroDivisionError: division by zero"
    )


def test_on_complete_failure_turns_a_cancel_into_a_failure() -> None:
    # Engine decision: "the first failure wins" -- a cancelled run has not failed.
    hooks = hooks_on("on_complete", raise_(RuntimeError("x")))
    loop = agent_loop([USER], tools=TOOLS, hooks=hooks)
    _, result = drive(loop, [Cancel("user")])
    assert (result.status, result.reason) == ("failed", HOOK_ERROR)


# --------------------------------------------------------------------------- meaningless outcomes


#: A run that reaches every topic except on_error: a budget pause (one tool call
#: allowed) in the middle of a two-call batch, resumed by on_pause.
EVERY_TOPIC = MULTI_STEP
EVERY_TOPIC_BUDGET = Budget(max_tool_calls=1)

SKIP_MEANINGLESS = [
    t for t in HOOK_TOPICS if t not in ("before_step", "before_tool_call", "on_error")
]
PAUSE_MEANINGLESS = [t for t in HOOK_TOPICS if t not in ("before_tool_call", "on_error")]
ABORT_FAILS_RUN = [t for t in HOOK_TOPICS if t not in ("before_tool_call", "on_error")]


def every_topic_run(topic: str, fn: Callable[[dict[str, Any]], object]) -> Run:
    return go(
        EVERY_TOPIC,
        hooks_on(topic, fn),
        budget=EVERY_TOPIC_BUDGET,
        on_pause=lambda pause: Resume(),
    )


def test_the_every_topic_run_reaches_every_topic_but_on_error() -> None:
    fired: set[str] = set()
    hooks = on_every_topic(lambda topic, p: fired.add(topic))
    go(EVERY_TOPIC, hooks, budget=EVERY_TOPIC_BUDGET, on_pause=lambda pause: Resume())
    assert fired == set(HOOK_TOPICS) - {"on_error"}


@pytest.mark.parametrize("topic", SKIP_MEANINGLESS)
def test_skip_where_it_has_no_meaning_is_a_hook_error(topic: str) -> None:
    outcome = every_topic_run(topic, lambda payload: SKIP)
    assert outcome.result.error is not None
    assert outcome.result.error.code == HOOK_ERROR
    assert outcome.result.error.message.startswith(f"{topic} hook returned SKIP")


@pytest.mark.parametrize("topic", PAUSE_MEANINGLESS)
def test_pause_request_where_it_has_no_meaning_is_a_hook_error(topic: str) -> None:
    outcome = every_topic_run(topic, lambda payload: PauseRequest("why"))
    assert outcome.result.error is not None
    assert outcome.result.error.code == HOOK_ERROR
    assert outcome.result.error.message.startswith(f"{topic} hook returned PauseRequest(")
    assert "why" not in [e.reason for e in outcome.log if e.type == "session.pause"]


@pytest.mark.parametrize("topic", ABORT_FAILS_RUN)
def test_hook_abort_outside_before_tool_call_fails_the_run(topic: str) -> None:
    outcome = every_topic_run(topic, raise_(HookAbort("enough")))
    assert_failed(outcome, HOOK_ABORT, f"{topic} hook aborted: enough")


@pytest.mark.parametrize("topic", [t for t in HOOK_TOPICS if t != "on_error"])
def test_any_other_exception_is_a_hook_error_with_the_original_message(topic: str) -> None:
    errors: list[dict[str, Any]] = []
    hooks = hooks_on(topic, raise_(LookupError("gone")))
    hooks.on("on_error", lambda p: errors.append(dict(p)))
    outcome = go(EVERY_TOPIC, hooks, budget=EVERY_TOPIC_BUDGET, on_pause=lambda pause: Resume())
    message = f"{topic} hook raised LookupError: gone"
    assert_failed(outcome, HOOK_ERROR, message)
    assert errors == [{"code": HOOK_ERROR, "message": message}]


# ------------------------------------------------------------------ a failure deep in a long run


FORTY_STEPS = [
    *(tool_step(f"r{n}", add_call(f"c{n}", n, n)) for n in range(1, 40)),
    text_step("r40", "finished"),
]
FAILING_STEP = 27  # two-thirds into the run
#: Transcript length when the hook fails: the user message plus 26 complete steps,
#: plus what the failing step had completed by then.
KEPT = {
    "before_step": 1 + 26 * 2,
    "before_plan": 1 + 26 * 2,
    "after_plan": 1 + 26 * 2,
    "before_tool_call": 1 + 26 * 2 + 1,  # the plan, its call left without a result
    "after_tool_call": 1 + 26 * 2 + 1,
    "after_step": 1 + 27 * 2,
}


def test_the_forty_step_script_completes_without_the_hook() -> None:
    outcome = go(FORTY_STEPS)
    assert (outcome.result.status, outcome.result.steps) == ("completed", 40)


@pytest.mark.parametrize("topic", list(KEPT))
def test_hook_raising_key_error_two_thirds_into_a_forty_step_run(topic: str) -> None:
    errors: list[dict[str, Any]] = []
    hooks = hooks_on(topic, at_step(FAILING_STEP, raise_(KeyError("token"))))
    hooks.on("on_error", lambda p: errors.append(dict(p)))
    outcome = go(FORTY_STEPS, hooks)
    message = f"{topic} hook raised KeyError: 'token'"
    assert_failed(outcome, HOOK_ERROR, message)
    assert errors == [{"code": HOOK_ERROR, "message": message}]
    result = outcome.result
    assert result.steps == FAILING_STEP - (topic == "before_step")
    # Only complete messages are kept; the next run can close a dangling call on purpose.
    assert len(result.messages) == KEPT[topic]
    validate_transcript(close_dangling_calls(result.messages))
    if KEPT[topic] % 2 == 0:  # a plan whose call never got a result
        assert type(result.messages[-1]) is AssistantMessage
        with pytest.raises(ValueError, match="without a result"):
            validate_transcript(result.messages)
    else:
        validate_transcript(result.messages)
    events = outcome.log.events
    assert [e.type for e in events][-2:] == ["session.complete", "run.finished"]
    assert [e.type for e in events].count("run.finished") == 1
    assert events[-1].error == result.error


# --------------------------------------------------------------------------- hooks get copies


def test_before_tool_call_payload_is_a_deep_copy() -> None:
    kept: list[dict[str, Any]] = []
    nested = ToolCall("c1", "echo", {"text": "hi", "meta": {"tags": ["a"]}})

    def keep(payload: dict[str, Any]) -> None:
        kept.append(payload["arguments"])

    loop, effect = raw_tool_loop(hooks_on("before_tool_call", keep), nested)
    kept[0]["meta"]["tags"].append("mutated later")  # after the hook returned
    assert effect.call == nested
    assert loop.messages[-1].content == (nested,)
    assert loop.log[-1].call.arguments == {"text": "hi", "meta": {"tags": ["a"]}}


def test_an_edit_is_copied_in_so_later_mutation_changes_nothing() -> None:
    kept: list[dict[str, Any]] = []

    def edit(payload: dict[str, Any]) -> None:
        payload["arguments"] = {"text": "edited", "meta": {"tags": []}}
        kept.append(payload["arguments"])

    loop, effect = raw_tool_loop(hooks_on("before_tool_call", edit), ToolCall("c1", "echo", {}))
    kept[0]["meta"]["tags"].append("x")
    assert effect.call.arguments == {"text": "edited", "meta": {"tags": []}}
    assert loop.log[-1].call.arguments == {"text": "edited", "meta": {"tags": []}}


def test_after_tool_call_arguments_are_a_copy() -> None:
    def mutate(payload: dict[str, Any]) -> None:
        payload["arguments"]["left"] = 1000

    outcome = go(MULTI_STEP, hooks_on("after_tool_call", mutate))
    assert outcome.result.messages[1].content[0] == add_call("c1", 1, 2)
    assert next(e.call for e in outcome.log if e.type == "tool.call") == add_call("c1", 1, 2)


def test_on_pause_payload_is_a_copy_of_the_pause_payload() -> None:
    def mutate(payload: dict[str, Any]) -> None:
        payload["payload"]["call"]["arguments"]["left"] = 1000

    loop_hooks = HookRegistry()
    loop_hooks.on("before_tool_call", lambda p: PauseRequest("review"))
    loop_hooks.on("on_pause", mutate)
    loop = agent_loop([USER], tools=TOOLS, hooks=loop_hooks, max_steps=2)
    request = next(loop)
    pause = loop.send(response(request.id, "r1", add_call("c1", 1, 2)))
    assert pause.payload["call"]["arguments"] == {"left": 1, "right": 2}
    assert loop.log[-1].payload == pause.payload
    assert loop.send(Resume({"approved": True})).call == add_call("c1", 1, 2)


def test_on_budget_exceeded_payload_is_plain_data_detached_from_the_log() -> None:
    seen: list[dict[str, Any]] = []

    def mutate(payload: dict[str, Any]) -> None:
        seen.append(payload)
        payload["usage"]["turns"] = 99
        payload["budget"]["max_turns"] = 99

    outcome = go(MULTI_STEP, hooks_on("on_budget_exceeded", mutate), budget=Budget(max_turns=1))
    assert seen[0]["limit"] == "turns"
    warn = next(e for e in outcome.log if e.type == "budget.warn")
    assert (warn.usage.turns, warn.budget.max_turns) == (1, 1)


def test_after_plan_payload_does_not_alias_the_draft() -> None:
    """The hook gets copies: editing them in place is an edit of the plan (committed
    after validation), never a change to the caller's reply or the recorded draft."""

    def mutate(payload: dict[str, Any]) -> None:
        payload["content"][0].arguments["left"] = 1000

    loop = agent_loop([USER], tools=TOOLS, hooks=hooks_on("after_plan", mutate), max_steps=2)
    request = next(loop)
    reply = response(request.id, "r1", add_call("c1", 1, 2))
    loop.send(reply)
    assert reply.content == (add_call("c1", 1, 2),)  # the caller's own reply
    assert loop.log[3].reply.content == (add_call("c1", 1, 2),)  # plan.draft: recorded input
    assert loop.messages[1].content == (add_call("c1", 1000, 2),)  # the hook's edit


def test_skip_stays_the_same_singleton_through_copies_and_pickles() -> None:
    """Hooks get deep copies of their payloads; SKIP must survive that by identity."""
    import copy
    import pickle

    assert copy.deepcopy({"result": SKIP})["result"] is SKIP
    assert copy.copy(SKIP) is SKIP
    assert pickle.loads(pickle.dumps(SKIP)) is SKIP
    assert repr(SKIP) == "SKIP"
