"""Human approval: ``ToolSpec(requires_approval=True)`` and ``PauseRequest`` (DESIGN §9).

The loop pauses before the call (reason ``approval``, the call in the payload) and
the ``Resume.payload`` decides: approve, deny (with a message), or approve edited
arguments, which are bounds-checked again.
"""

from __future__ import annotations

import math
from typing import Any

import msgspec
import pytest

from agentloop import (
    HOOK_ERROR,
    MAX_ARGUMENT_DEPTH,
    MAX_ARGUMENT_STRING_CODE_POINTS,
    MAX_ARGUMENT_VALUES,
    SKIP,
    AgentLoop,
    Budget,
    CallerProtocolError,
    Cancel,
    Effect,
    HookRegistry,
    ModelRequest,
    Pause,
    PauseRequest,
    Resume,
    RunResult,
    ScriptedModel,
    ScriptedResponse,
    State,
    ToolCall,
    ToolRequest,
    ToolResult,
    ToolResultMessage,
    ToolSpec,
    UserMessage,
    agent_loop,
    close_dangling_calls,
    run,
    tool,
    validate_transcript,
)
from replay import replay
from tests.helpers import ECHO, check_log, response

USER = UserMessage("u1", "Tidy up.")
DELETE = ToolSpec(
    "delete",
    "Delete a file.",
    {"type": "object", "properties": {"path": {"type": "string"}}},
    requires_approval=True,
)
TOOLS = [DELETE, ECHO]


def new_loop(hooks: HookRegistry | None = None, **options: Any) -> AgentLoop:
    """A loop over ``TOOLS``."""
    options.setdefault("max_steps", 3)
    return agent_loop([USER], tools=TOOLS, hooks=hooks, **options)


def delete(call_id: str, path: str = "/tmp/a") -> ToolCall:
    return ToolCall(call_id, "delete", {"path": path})


def echo(call_id: str, text: str = "hi") -> ToolCall:
    return ToolCall(call_id, "echo", {"text": text})


def approval_pause(call: ToolCall) -> Pause:
    return Pause(
        "approval",
        {"call": {"id": call.id, "name": call.name, "arguments": dict(call.arguments)}},
    )


def plan(loop: AgentLoop, *calls: ToolCall) -> Effect:
    """Prime ``loop`` and answer its first request with ``calls``."""
    request = next(loop)
    return loop.send(response(request.id, "r1", *calls))


def finish(loop: AgentLoop, *replies: Any) -> RunResult:
    """Send ``replies``; the last must end the run."""
    for reply in replies[:-1]:
        loop.send(reply)
    with pytest.raises(StopIteration) as stop:
        loop.send(replies[-1])
    check_log(loop.log.events)
    result: RunResult = stop.value.value
    return result


def types(loop: AgentLoop) -> list[str]:
    return [e.type for e in loop.log]


# --------------------------------------------------------------------------- the pause


def test_a_call_that_requires_approval_pauses_before_it_starts() -> None:
    seen: list[dict[str, Any]] = []
    loop = new_loop(HookRegistry({"on_pause": lambda p: seen.append(p)}))
    effect = plan(loop, delete("c1"))
    assert effect == approval_pause(delete("c1"))
    assert loop.state is State.IDLE
    assert loop.pending == effect
    assert types(loop)[-2:] == ["plan.commit", "session.pause"]  # no tool.call yet
    assert loop.log[-1].reason == "approval"
    assert loop.log[-1].payload == effect.payload
    assert seen == [{"reason": "approval", "payload": effect.payload}]


def test_calls_not_requiring_approval_run_without_a_pause() -> None:
    loop = new_loop()
    effect = plan(loop, echo("c1"), delete("c2"))
    assert effect == ToolRequest(echo("c1"), 1)
    assert loop.send(ToolResult("c1", "hi")) == approval_pause(delete("c2"))


# --------------------------------------------------------------------------- the decision


def test_approved_runs_the_call_as_asked() -> None:
    loop = new_loop()
    plan(loop, delete("c1"))
    resume = Resume({"approved": True})
    assert loop.send(resume) == ToolRequest(delete("c1"), 1)
    assert loop.state is State.AWAITING_TOOL
    assert types(loop)[-3:] == ["session.pause", "session.resume", "tool.call"]
    assert loop.log[-2].reply == resume
    result = finish(loop, ToolResult("c1", "deleted"), response("request-002", "r2", "ok"))
    assert result.messages[2] == ToolResultMessage(
        "tool-result-c1", "c1", "delete", "deleted", False
    )


@pytest.mark.parametrize(
    ("decision", "content"),
    [
        ({"approved": False, "message": "not that file"}, "not that file"),
        ({"approved": False}, "denied"),
        ({"approved": False, "message": ""}, "denied"),
        ({"approved": False, "message": 42}, "denied"),
    ],
)
def test_denied_gets_an_error_result_and_the_run_goes_on(
    decision: dict[str, Any], content: str
) -> None:
    loop = new_loop()
    plan(loop, delete("c1"), echo("c2"))
    assert loop.send(Resume(decision)) == ToolRequest(echo("c2"), 1)  # c1 never ran
    denied = loop.log[-2]
    assert (denied.type, denied.reply) == ("tool.error", None)
    assert denied.message == ToolResultMessage("tool-result-c1", "c1", "delete", content, True)
    effect = loop.send(ToolResult("c2", "hi"))
    assert type(effect) is ModelRequest
    assert effect.messages[2] == denied.message  # the model reads the refusal
    result = finish(loop, response("request-002", "r2", "ok"))
    assert (result.status, result.reason) == ("completed", "goal_met")
    validate_transcript(result.messages)


def test_edited_arguments_replace_the_models() -> None:
    loop = new_loop()
    plan(loop, delete("c1", "/etc"))
    effect = loop.send(Resume({"approved": True, "arguments": {"path": "/tmp/etc"}}))
    assert effect == ToolRequest(delete("c1", "/tmp/etc"), 1)
    assert loop.log[-1].call == delete("c1", "/tmp/etc")  # tool.call: what actually runs
    assert loop.messages[1].content == (delete("c1", "/etc"),)  # what the model asked


def test_edited_arguments_are_copied_in() -> None:
    edited: dict[str, Any] = {"path": "/tmp/x", "tags": ["a"]}
    loop = new_loop()
    plan(loop, delete("c1"))
    effect = loop.send(Resume({"approved": True, "arguments": edited}))
    edited["tags"].append("changed later")
    assert effect.call.arguments == {"path": "/tmp/x", "tags": ["a"]}
    assert loop.log[-1].call.arguments == {"path": "/tmp/x", "tags": ["a"]}


def nested(depth: int) -> dict[str, Any]:
    value: dict[str, Any] = {}
    for _ in range(depth - 1):
        value = {"x": value}
    return value


BAD_EDITS = {
    "not an object": ["/tmp/a"],
    "too deep": nested(MAX_ARGUMENT_DEPTH + 1),
    "too many values": {"list": list(range(MAX_ARGUMENT_VALUES))},
    "string too long": {"path": "x" * (MAX_ARGUMENT_STRING_CODE_POINTS + 1)},
}


@pytest.mark.parametrize("arguments", BAD_EDITS.values(), ids=list(BAD_EDITS))
def test_edited_arguments_out_of_bounds_get_an_error_result(arguments: Any) -> None:
    loop = new_loop()
    plan(loop, delete("c1"), echo("c2"))
    assert loop.send(Resume({"approved": True, "arguments": arguments})) == ToolRequest(
        echo("c2"), 1
    )
    message = loop.messages[-1]
    assert type(message) is ToolResultMessage and message.is_error
    assert message.content.startswith("invalid edited arguments: ")
    call_event, error_event = loop.log[-3], loop.log[-2]
    assert call_event.call == delete("c1")  # tool.call keeps the model's arguments
    assert (error_event.type, error_event.reply) == ("tool.error", None)


def test_edited_arguments_at_the_bounds_are_accepted() -> None:
    loop = new_loop()
    plan(loop, delete("c1"))
    edit = nested(MAX_ARGUMENT_DEPTH)
    assert loop.send(Resume({"approved": True, "arguments": edit})).call.arguments == edit


# ------------------------------------------------------------------ caller misuse at the pause


MALFORMED = {
    "no payload": (Resume(), "None"),
    "empty dict": (Resume({}), "a dict without 'approved'"),
    "approved not a bool": (Resume({"approved": "yes"}), "'approved': 'yes'"),
    "approved an int": (Resume({"approved": 1}), "'approved': 1"),
    "approved a big int": (Resume({"approved": 2**64 - 1}), f"'approved': {2**64 - 1}"),
    "approved a long str": (Resume({"approved": "y" * 99}), "'approved': '" + "y" * 36 + "..."),
    "approved a list": (Resume({"approved": [True]}), "'approved': list"),
    "a list": (Resume([True]), "a list"),
    "a string": (Resume("approved"), "a str"),
}


@pytest.mark.parametrize(("resume", "got"), MALFORMED.values(), ids=list(MALFORMED))
def test_malformed_resume_payload_is_caller_misuse_recorded_once(resume: Resume, got: str) -> None:
    loop = new_loop()
    plan(loop, delete("c1"))
    with pytest.raises(CallerProtocolError) as raised:
        loop.send(resume)
    assert str(raised.value) == (
        f"Resume.payload for a 'approval' pause must be a dict with a bool 'approved', got {got}"
    )
    finished = loop.log[-1]
    assert finished.type == "run.finished"
    assert finished.error is not None and finished.error.code == "CALLER_PROTOCOL_ERROR"
    # Exactly one event records the reply: session.complete, not session.resume too.
    assert "session.resume" not in types(loop) and loop.log[-2].reply == resume
    assert finished.reply is None
    assert replay(list(loop.log)).result == loop.result
    check_log(loop.log.events)
    with pytest.raises(CallerProtocolError):  # sticky
        loop.send(Resume({"approved": True}))


def test_a_resume_payload_that_is_not_plain_json_is_caller_misuse() -> None:
    loop = new_loop()
    plan(loop, delete("c1"))
    with pytest.raises(CallerProtocolError, match="not a finite number"):
        loop.send(Resume({"approved": True, "arguments": {"path": math.inf}}))
    assert loop.log[-1].type == "run.finished"
    assert "session.resume" not in types(loop)  # recorded in run.finished instead


@pytest.mark.parametrize(
    "reply",
    [ToolResult("c1", "x"), response("request-001", "r9", "x"), "yes", None],
    ids=["tool result", "model response", "a string", "None"],
)
def test_a_pause_accepts_only_resume_or_cancel(reply: Any) -> None:
    loop = new_loop()
    plan(loop, delete("c1"))
    with pytest.raises(CallerProtocolError):
        loop.send(reply)
    assert loop.log[-1].type == "run.finished"
    assert loop.state is State.DONE


# --------------------------------------------------------------------------- cancel at the pause


def test_cancel_at_an_approval_pause_ends_cancelled_with_reason_approval() -> None:
    loop = new_loop()
    plan(loop, delete("c1"))
    cancel = Cancel()
    result = finish(loop, cancel)
    assert (result.status, result.reason) == ("cancelled", "approval")
    assert loop.log[-2].reply == cancel
    # The plan is kept, its call gets no invented result (DESIGN §11).
    assert "tool.call" not in types(loop)
    assert close_dangling_calls(result.messages)[-1] == ToolResultMessage(
        "tool-result-c1", "c1", "delete", "interrupted", True
    )
    validate_transcript(close_dangling_calls(result.messages))


# ------------------------------------------------------------------ PauseRequest from a hook


def ask(reason: str, payload: Any = None) -> HookRegistry:
    return HookRegistry({"before_tool_call": lambda p: PauseRequest(reason, payload)})


def test_pause_request_pauses_with_its_reason_and_the_call() -> None:
    loop = new_loop(ask("expensive", {"cost": 3}))
    effect = plan(loop, echo("c1"))
    assert effect == Pause(
        "expensive",
        {"cost": 3, "call": {"id": "c1", "name": "echo", "arguments": {"text": "hi"}}},
    )
    assert loop.state is State.IDLE


@pytest.mark.parametrize(
    ("extra", "payload_extra"),
    [(None, {}), ("see the docs", {"detail": "see the docs"}), ([1, 2], {"detail": [1, 2]})],
)
def test_pause_request_payload_that_is_not_a_dict_goes_under_detail(
    extra: Any, payload_extra: dict[str, Any]
) -> None:
    loop = new_loop(ask("review", extra))
    effect = plan(loop, echo("c1"))
    assert effect.payload == {
        **payload_extra,
        "call": {"id": "c1", "name": "echo", "arguments": {"text": "hi"}},
    }


def test_pause_request_payload_key_call_is_the_loops() -> None:
    loop = new_loop(ask("review", {"call": "mine"}))
    assert plan(loop, echo("c1")).payload["call"]["id"] == "c1"


def test_pause_request_payload_must_be_plain_json() -> None:
    loop = new_loop(ask("review", {"when": {1, 2}}))
    request = next(loop)
    with pytest.raises(StopIteration) as stop:
        loop.send(response(request.id, "r1", echo("c1")))
    result = stop.value.value
    assert result.error is not None
    assert (result.error.code, result.error.message) == (
        HOOK_ERROR,
        "before_tool_call PauseRequest.payload.when: set is not a JSON value",
    )


@pytest.mark.parametrize(
    ("decision", "effect"),
    [
        ({"approved": True}, ToolRequest(echo("c1"), 1)),
        ({"approved": True, "arguments": {"text": "bye"}}, ToolRequest(echo("c1", "bye"), 1)),
    ],
)
def test_resume_decides_a_hook_pause_like_an_approval(
    decision: dict[str, Any], effect: ToolRequest
) -> None:
    loop = new_loop(ask("review"))
    plan(loop, echo("c1"))
    assert loop.send(Resume(decision)) == effect


def test_a_denied_hook_pause_gets_the_message() -> None:
    loop = new_loop(ask("review"))
    plan(loop, echo("c1"))
    assert type(loop.send(Resume({"approved": False, "message": "no"}))) is ModelRequest
    assert loop.messages[-1] == ToolResultMessage("tool-result-c1", "c1", "echo", "no", True)


def test_a_hook_edit_is_applied_before_its_pause() -> None:
    def edit_then_ask(payload: dict[str, Any]) -> PauseRequest:
        payload["arguments"] = {"text": "edited"}
        return PauseRequest("review")

    loop = new_loop(HookRegistry({"before_tool_call": edit_then_ask}))
    pause = plan(loop, echo("c1"))
    assert pause.payload["call"]["arguments"] == {"text": "edited"}
    assert loop.send(Resume({"approved": True})) == ToolRequest(echo("c1", "edited"), 1)


def test_a_hook_pause_and_an_approval_are_two_pauses() -> None:
    # Engine decision: before_tool_call runs first; a tool that requires approval
    # is then paused for approval too, with the (possibly edited) call.
    loop = new_loop(ask("policy"))
    first = plan(loop, delete("c1"))
    assert first.reason == "policy"
    second = loop.send(Resume({"approved": True, "arguments": {"path": "/tmp/b"}}))
    assert second == approval_pause(delete("c1", "/tmp/b"))
    assert loop.send(Resume({"approved": True})) == ToolRequest(delete("c1", "/tmp/b"), 1)


def test_a_skipping_or_aborting_hook_leaves_nothing_to_approve() -> None:
    loop = new_loop(HookRegistry({"before_tool_call": lambda p: SKIP}))
    assert type(plan(loop, delete("c1"))) is ModelRequest
    assert "session.pause" not in types(loop)
    assert loop.messages[-1].content == "skipped"


def test_an_unknown_tool_is_never_paused() -> None:
    loop = new_loop(ask("review"))
    assert type(plan(loop, ToolCall("c1", "nope", {}))) is ModelRequest
    assert "session.pause" not in types(loop)


# --------------------------------------------------------------------------- with the budget


def test_an_approval_pause_and_a_budget_pause_are_separate() -> None:
    # The budget check comes first; its Resume leads to the approval pause.
    loop = new_loop(budget=Budget(max_tool_calls=1))
    effect = plan(loop, echo("c1"), delete("c2"))
    assert type(effect) is ToolRequest
    effect = loop.send(ToolResult("c1", "hi"))
    assert effect.reason == "budget_exceeded:tool_calls"
    assert loop.send(Resume()) == approval_pause(delete("c2"))
    assert loop.send(Resume({"approved": True})) == ToolRequest(delete("c2"), 1)


# --------------------------------------------------------------------------- through the driver


@tool(requires_approval=True)
def remove(path: str) -> str:
    """Remove a file."""
    return f"removed {path}"


SCRIPT = [
    ScriptedResponse.tool_calls(
        "r1",
        ToolCall("c1", "remove", {"path": "a"}),
        ToolCall("c2", "remove", {"path": "b"}),
        ToolCall("c3", "remove", {"path": "c"}),
    ),
    ScriptedResponse.text("r2", "Done."),
]


def test_run_calls_on_pause_and_acts_on_each_decision() -> None:
    decisions = iter(
        [
            Resume({"approved": True}),
            Resume({"approved": False, "message": "keep b"}),
            Resume({"approved": True, "arguments": {"path": "c.bak"}}),
        ]
    )
    pauses: list[Pause] = []

    def on_pause(pause: Pause) -> Resume:
        pauses.append(pause)
        return next(decisions)

    result = run([USER], model=ScriptedModel(SCRIPT), tools=[remove], on_pause=on_pause)
    assert [p.payload["call"]["id"] for p in pauses] == ["c1", "c2", "c3"]
    assert [(m.content, m.is_error) for m in result.messages if type(m) is ToolResultMessage] == [
        ("removed a", False),
        ("keep b", True),
        ("removed c.bak", False),
    ]
    assert (result.status, result.final_text) == ("completed", "Done.")


def test_run_without_on_pause_cancels_with_the_pause_reason() -> None:
    model = ScriptedModel(SCRIPT)
    result = run([USER], model=model, tools=[remove])
    assert (result.status, result.reason) == (
        "cancelled",
        "approval needed for tool 'remove' (call c1) and no on_pause was given: pass "
        "on_pause=... to answer it, or use run_durable to park the session",
    )
    assert model.call_count == 1
    assert len(close_dangling_calls(result.messages)) == len(result.messages) + 3


def test_on_pause_may_cancel() -> None:
    result = run(
        [USER],
        model=ScriptedModel(SCRIPT),
        tools=[remove],
        on_pause=lambda pause: Cancel("the reviewer left"),
    )
    assert (result.status, result.reason) == ("cancelled", "the reviewer left")


def test_the_pause_payload_round_trips_through_json() -> None:
    loop = new_loop()
    pause = plan(loop, delete("c1"))
    assert msgspec.json.decode(msgspec.json.encode(pause), type=Pause) == pause
