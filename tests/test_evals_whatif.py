"""What-if replay: recorded sessions under other limits, budgets, hooks and approvals,
without a model (DESIGN §28)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec
import pytest

import replay
from agentloop import (
    Budget,
    EventLog,
    FunctionModel,
    HookRegistry,
    ModelFailure,
    PauseRequest,
    Resume,
    ScriptedModel,
    ScriptedResponse,
    Steer,
    ToolCall,
    UserMessage,
    agent_loop,
    run,
    tool,
)
from agentloop.evals import EvalError, WhatIf, what_if, what_if_logs
from agentloop.evals._cli import main


# Not tests.helpers.add_int: the description ("Add.") differs, so the recorded spec does.
@tool
def add(left: int, right: int) -> int:
    """Add."""
    return left + right


@tool(requires_approval=True)
def wire(amount: int) -> str:
    """Send money."""
    return f"sent {amount}"


def recorded(*responses: ScriptedResponse, tools: Any = (add,), **options: Any) -> list[Any]:
    log = EventLog()
    run(
        [UserMessage("u1", "go")],
        model=ScriptedModel(list(responses)),
        tools=list(tools),
        log=log,
        **options,
    )
    return list(log)


def two_steps(**options: Any) -> list[Any]:
    return recorded(
        ScriptedResponse.tool_calls("r1", ToolCall("c1", "add", {"left": 1, "right": 2})),
        ScriptedResponse.tool_calls("r2", ToolCall("c2", "add", {"left": 3, "right": 3})),
        ScriptedResponse.text("r3", "done"),
        **options,
    )


def test_unchanged_options_finish_as_recorded() -> None:
    answer = what_if(two_steps())
    assert (answer.stop, answer.status, answer.changed) == ("finished", "completed", False)
    assert answer.recorded_status == "completed" and answer.step == 3
    assert "same: completed (goal_met)" in answer.line()


def test_a_tighter_budget_pauses_where_the_recording_went_on() -> None:
    answer = what_if(two_steps(), budget=Budget(max_tool_calls=1))
    assert answer.stop == "paused" and answer.changed
    assert answer.detail == (
        "the run pauses (budget_exceeded:tool_calls), which the recording never answered"
    )
    assert answer.step == 2
    assert "CHANGED: paused" in answer.line()


def test_fewer_steps_end_the_run_early() -> None:
    answer = what_if(two_steps(), max_steps=1)
    assert (answer.stop, answer.status, answer.changed) == ("finished", "max_steps", True)


def test_more_steps_than_recorded_stop_at_the_end_of_the_recording() -> None:
    events = two_steps(max_steps=1)
    assert events[-1].status == "max_steps"
    answer = what_if(events, max_steps=5)
    assert answer.stop == "past_recording" and answer.changed
    assert answer.detail == (
        "the run asks the model again (request-002, step 2) and the recording has no more "
        "model answers"
    )


def test_a_hook_that_pauses() -> None:
    hooks = HookRegistry()
    hooks.on(
        "before_tool_call", lambda payload: PauseRequest("review", {"id": payload["tool_call_id"]})
    )
    answer = what_if(two_steps(), hooks=hooks)
    assert answer.stop == "paused" and "review" in answer.detail


def test_a_hook_that_fails_the_run() -> None:
    hooks = HookRegistry()

    def explode(payload: dict[str, Any]) -> None:
        raise RuntimeError("policy")

    hooks.on("after_tool_call", explode)
    answer = what_if(two_steps(), hooks=hooks)
    assert (answer.stop, answer.status) == ("finished", "failed")
    assert "policy" in answer.detail


def approved_session() -> list[Any]:
    return recorded(
        ScriptedResponse.tool_calls("r1", ToolCall("c1", "wire", {"amount": 5})),
        ScriptedResponse.text("r2", "sent"),
        tools=[wire],
        on_pause=lambda pause: Resume({"approved": True}),
    )


def test_approvals_replace_the_recorded_decision() -> None:
    events = approved_session()
    assert what_if(events).changed is False
    for key in ("c1", "wire"):
        denied = what_if(events, approvals={key: False})
        assert (denied.stop, denied.status) == ("finished", "completed")
    edited = what_if(events, approvals={"wire": {"approved": True, "arguments": {"amount": 7}}})
    assert edited.stop == "past_recording"
    assert edited.detail == (
        "the run calls the tool wire (c1) with other arguments than the recording ran it with"
    )


def test_an_approval_the_recording_never_gave() -> None:
    events = recorded(
        ScriptedResponse.tool_calls("r1", ToolCall("c1", "wire", {"amount": 5})),
        ScriptedResponse.text("r2", "sent"),
        tools=[wire],
    )  # no on_pause: the run was cancelled at the pause
    assert events[-1].status == "cancelled"
    answer = what_if(events)
    assert answer.stop == "approval"
    assert answer.detail == "the tool call c1 waits for an approval the recording does not give"
    approved = what_if(events, approvals={"wire": True})  # the recorded cancel ends it
    assert (approved.stop, approved.status, approved.changed) == ("finished", "cancelled", False)


def test_parallel_batches_and_model_failures_replay() -> None:
    events = recorded(
        ScriptedResponse.tool_calls(
            "r1",
            ToolCall("c1", "add", {"left": 1, "right": 2}),
            ToolCall("c2", "add", {"left": 2, "right": 2}),
        ),
        ScriptedResponse.text("r2", "both"),
        parallel_tools=True,
    )
    assert what_if(events).changed is False
    assert what_if(events, budget=Budget(max_tool_calls=1)).stop == "paused"
    log = EventLog()
    run(
        [UserMessage("u1", "go")],
        model=FunctionModel(lambda r: ModelFailure(r.id, "down")),
        tools=[],
        log=log,
    )
    answer = what_if(list(log))
    assert (answer.status, answer.changed) == ("failed", False)


def test_a_cancel_while_a_tool_ran() -> None:
    loop = agent_loop([UserMessage("u1", "go")], tools=[add])
    request = next(loop)
    call = ToolCall("c1", "add", {"left": 1, "right": 2})
    from agentloop import Cancel, ModelResponse

    loop.send(ModelResponse(request.id, "r1", (call,), "tool_call"))
    with pytest.raises(StopIteration):
        loop.send(Cancel("user left"))
    answer = what_if(list(loop.log))
    assert (answer.status, answer.changed) == ("cancelled", False)
    answer = what_if(list(loop.log), max_steps=1)
    assert answer.status == "cancelled"


def test_steered_sessions_are_unsupported() -> None:
    loop = agent_loop([UserMessage("u1", "go")], tools=[])
    request = next(loop)
    loop.send(Steer(UserMessage("u2", "faster")))
    loop.close()
    del request
    answer = what_if(list(loop.log))
    assert answer.stop == "unsupported"
    assert answer.detail == "the session recorded replies what-if does not feed again: Steer"


class Weather(msgspec.Struct):
    city: str


def test_structured_output_needs_its_type() -> None:
    events = recorded(ScriptedResponse.text("r1", '{"city": "Oslo"}'), tools=[], output=Weather)
    with pytest.raises(EvalError, match=r"checked structured output \(Weather\); pass output="):
        what_if(events)
    assert what_if(events, output=Weather).changed is False


def test_not_a_session() -> None:
    with pytest.raises(EvalError, match="not a session that ran"):
        what_if([])
    invalid = EventLog()
    run([UserMessage("u1", "")] * 2, model=ScriptedModel([]), tools=[], log=invalid)
    with pytest.raises(EvalError):
        what_if(list(invalid))


def test_what_if_logs_and_the_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = tmp_path / "good.jsonl"
    replay.write_log(good, two_steps())
    broken = tmp_path / "broken.jsonl"
    broken.write_text("nope\n")
    answers = what_if_logs([good, broken])
    assert answers[0].stop == "finished" and answers[1].stop == "unsupported"
    assert main(["what-if", str(good)]) == 0
    assert "same: completed" in capsys.readouterr().out
    assert main(["what-if", str(good), "--max-tool-calls", "1", "--json"]) == 1
    (answer,) = json.loads(capsys.readouterr().out)["sessions"]
    assert answer["stop"] == "paused"
    approval = tmp_path / "approval.jsonl"
    replay.write_log(approval, approved_session())
    assert (
        main(["what-if", str(approval), "--deny", "wire", "--approve", "other", "--max-steps", "4"])
        == 0
    )
    assert main(["what-if", str(approval), "--max-turns", "1", "--max-total-tokens", "100"]) == 1
    capsys.readouterr()


def test_whatif_is_a_struct() -> None:
    answer = WhatIf(session="s", stop="paused", detail="d")
    assert "unfinished" in answer.line()
    assert WhatIf(session="s", stop="unsupported", detail="d").line() == "s: not replayed: d"


def test_a_log_cut_before_a_tool_result_stops_there() -> None:
    events = two_steps()
    cut = next(i for i, e in enumerate(events) if e.type == "tool.call")
    answer = what_if(events[: cut + 1])
    assert answer.stop == "past_recording" and answer.recorded_status is None
    assert answer.detail == "the run calls the tool add (c1), which the recording never ran"


def test_recordings_of_every_shape() -> None:
    from agentloop import Cancel, FollowUp

    # A follow-up is steering too.
    loop = agent_loop([UserMessage("u1", "go")], tools=[])
    next(loop)
    loop.send(FollowUp(UserMessage("u2", "and then")))
    loop.close()
    assert what_if(list(loop.log)).stop == "unsupported"
    # Cancelled while the model was asked: the cancel answers the model request.
    loop = agent_loop([UserMessage("u1", "go")], tools=[])
    next(loop)
    with pytest.raises(StopIteration):
        loop.send(Cancel("stop"))
    answer = what_if(list(loop.log))
    assert (answer.status, answer.changed) == ("cancelled", False)
    # A log cut inside its initial transcript: nothing after the messages.
    cut = [e for e in two_steps() if e.type in ("session.start", "message.accepted")]
    assert what_if(cut).stop == "past_recording"
    # Two pauses of different kinds, answered in the recording: each gets its own answer.
    hooks = HookRegistry()
    hooks.on("before_tool_call", lambda payload: PauseRequest("review", {"plain": "payload"}))
    log = EventLog()
    run(
        [UserMessage("u1", "go")],
        model=ScriptedModel(
            [
                ScriptedResponse.tool_calls("r1", ToolCall("c1", "wire", {"amount": 5})),
                ScriptedResponse.text("r2", "sent"),
            ]
        ),
        tools=[wire],
        hooks=hooks,
        log=log,
        on_pause=lambda pause: Resume({"approved": True}),
    )
    assert what_if(list(log), hooks=hooks).changed is False
    assert what_if(list(log)).changed is False  # the approval's answer, not the review's
    # A tool call whose recorded run was cancelled mid-call, with other arguments now.
    moved = what_if(
        [e for e in approved_session()],
        approvals={"c1": {"approved": True, "arguments": {"amount": 9}}},
    )
    assert moved.stop == "past_recording"


def test_call_ids_of_pause_payloads() -> None:
    from agentloop.evals._whatif import _call_id

    assert _call_id({"call": {"id": "c1"}}) == "c1"
    assert _call_id("plain") is None and _call_id({"call": {"id": 3}}) is None
