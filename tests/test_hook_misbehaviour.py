"""Misbehaving hooks: whatever a hook does, every reply is recorded exactly once,
the log is writable, run.finished is last, and the log replays (DESIGN §7, §9)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from agentloop import (
    HOOK_ABORT,
    HOOK_ERROR,
    HOOK_TOPICS,
    SKIP,
    AgentLoop,
    Budget,
    EventLog,
    HookAbort,
    HookRegistry,
    PauseRequest,
    RunResult,
    ScriptedModel,
    ScriptedResponse,
    SessionCompleteEvent,
    TextBlock,
    ToolCall,
    ToolResult,
    ToolSpec,
    UserMessage,
    agent_loop,
    decode_event,
    encode_event,
    run,
    tool,
)
from replay import LogWriter, read_log, recorded_replies, replay
from tests.helpers import ECHO, check_log, response

USER = UserMessage("u1", "hi")
LONE = "caf\udce9"  # a lone surrogate, as os.listdir gives undecodable names
ESCAPED = "caf\\udce9"
TO_TOOL = response("request-001", "r1", ToolCall("c1", "echo", {"text": "hi"}))
RESULT = ToolResult("c1", "hi", at=5.0)
ANSWER = response("request-002", "r2", "done")


def _hooks(topic: str, fn: Callable[[dict[str, Any]], object]) -> HookRegistry:
    hooks = HookRegistry()
    hooks.on(topic, fn)
    return hooks


def _drive(loop: AgentLoop, replies: list[Any]) -> RunResult:
    try:
        next(loop)
        for reply in replies:
            loop.send(reply)
    except StopIteration as stop:
        result: RunResult = stop.value
        return result
    raise AssertionError("the run did not end")  # pragma: no cover - only when a test fails


def _replays(loop: AgentLoop, hooks: HookRegistry) -> None:
    events = [decode_event(encode_event(e)) for e in loop.log]
    check_log(events)
    assert replay(events, hooks=hooks).result == loop.result


# --------------------------------------------------------------------------- after_tool_call


def _raises(payload: dict[str, Any]) -> None:
    raise ValueError("no")


def _aborts(payload: dict[str, Any]) -> None:
    raise HookAbort("stop here")


def _bad_content(payload: dict[str, Any]) -> None:
    payload["content"] = 42


AFTER_TOOL_CALL: dict[str, tuple[Callable[[dict[str, Any]], object], str, str]] = {
    "raises": (_raises, HOOK_ERROR, "after_tool_call hook raised ValueError: no"),
    "HookAbort": (_aborts, HOOK_ABORT, "after_tool_call hook aborted: stop here"),
    "returns SKIP": (
        lambda payload: SKIP,
        HOOK_ERROR,
        "after_tool_call hook returned SKIP, which it may not",
    ),
    "returns a PauseRequest": (
        lambda payload: PauseRequest("later"),
        HOOK_ERROR,
        "after_tool_call hook returned PauseRequest(reason='later', payload=None), "
        "which it may not",
    ),
    "sets bad content": (
        _bad_content,
        HOOK_ERROR,
        "after_tool_call hook set 'content' to a non-str or 'is_error' to a non-bool",
    ),
}


@pytest.mark.parametrize(("hook", "code", "message"), AFTER_TOOL_CALL.values(), ids=AFTER_TOOL_CALL)
def test_a_failing_after_tool_call_hook_still_records_the_tool_result(
    hook: Callable[[dict[str, Any]], object], code: str, message: str
) -> None:
    hooks = _hooks("after_tool_call", hook)
    loop = agent_loop([USER], tools=[ECHO], hooks=hooks)
    result = _drive(loop, [TO_TOOL, RESULT])
    assert result.error is not None and (result.error.code, result.error.message) == (
        code,
        message,
    )
    # The result that arrived is in the log (in session.complete: the hook never let
    # it become a message), exactly once; no invented result is in the transcript.
    complete = loop.log[-2]
    assert type(complete) is SessionCompleteEvent and complete.reply == RESULT
    assert [reply for _, reply in recorded_replies(loop.log)].count(RESULT) == 1
    assert [m.id for m in result.messages] == ["u1", "message-r1"]
    _replays(loop, hooks)


# --------------------------------------------------------------------------- text the log can hold


def _raise_lone(payload: dict[str, Any]) -> None:
    raise ValueError(LONE)


def _abort_lone(payload: dict[str, Any]) -> None:
    raise HookAbort(LONE)


class Unprintable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no str for you")


def _raise_unprintable(payload: dict[str, Any]) -> None:
    raise Unprintable


def _abort_unprintable(payload: dict[str, Any]) -> None:
    raise HookAbort(Unprintable())  # type: ignore[arg-type]


UNPRINTABLE = "<Unprintable whose str() raised RuntimeError>"

# topic, hook -> the run's error message (or, in before_tool_call, the tool error)
TEXTS: dict[str, tuple[str, Callable[[dict[str, Any]], object], str]] = {
    "exception with a lone surrogate": (
        "before_step",
        _raise_lone,
        f"before_step hook raised ValueError: {ESCAPED}",
    ),
    "HookAbort reason with a lone surrogate": (
        "before_plan",
        _abort_lone,
        f"before_plan hook aborted: {ESCAPED}",
    ),
    "HookAbort reason with a lone surrogate, as a tool error": (
        "before_tool_call",
        _abort_lone,
        f"hook_abort:{ESCAPED}",
    ),
    "on_complete exception with a lone surrogate": (
        "on_complete",
        _raise_lone,
        f"on_complete hook raised ValueError: {ESCAPED}",
    ),
    "exception whose __str__ raises": (
        "after_step",
        _raise_unprintable,
        f"after_step hook raised Unprintable: {UNPRINTABLE}",
    ),
    "HookAbort reason whose __str__ raises": (
        "after_plan",
        _abort_unprintable,
        f"after_plan hook aborted: {UNPRINTABLE}",
    ),
}


@pytest.mark.parametrize(("topic", "hook", "message"), TEXTS.values(), ids=TEXTS)
def test_hook_exception_text_is_escaped_where_it_enters(
    topic: str, hook: Callable[[dict[str, Any]], object], message: str, tmp_path: Path
) -> None:
    hooks = _hooks(topic, hook)
    log = EventLog()
    path = tmp_path / "run.jsonl"
    replies = [TO_TOOL, ANSWER] if topic == "before_tool_call" else [TO_TOOL, RESULT, ANSWER]
    with LogWriter(path) as writer:  # a writer attached: send() never hits bad text
        writer.follow(log)
        loop = agent_loop([USER], tools=[ECHO], hooks=hooks, log=log)
        result = _drive(loop, replies)
    if topic == "before_tool_call":
        assert result.status == "completed"
        assert result.messages[2].content == message  # type: ignore[union-attr]
    else:
        assert result.error is not None and result.error.message == message
    assert [encode_event(e) for e in read_log(path)] == [encode_event(e) for e in loop.log]
    _replays(loop, hooks)


def test_a_keyboard_interrupt_with_a_lone_surrogate_is_recorded_escaped() -> None:
    def interrupt(payload: dict[str, Any]) -> None:
        raise KeyboardInterrupt(LONE)

    loop = agent_loop([USER], tools=[ECHO], hooks=_hooks("before_step", interrupt))
    with pytest.raises(KeyboardInterrupt):
        next(loop)
    assert loop.result is not None and loop.result.reason == f"KeyboardInterrupt: {ESCAPED}"
    encode_event(loop.log[-1])


def test_throw_with_an_unprintable_exception_records_a_cancel() -> None:
    loop = agent_loop([USER], tools=[ECHO])
    next(loop)
    with pytest.raises(Unprintable):
        loop.throw(Unprintable())
    assert loop.result is not None
    assert loop.result.reason == f"Unprintable: {UNPRINTABLE}"


def test_run_records_tool_and_model_exceptions_that_cannot_print_themselves() -> None:
    @tool
    def broken() -> str:
        """Fails in a way that is hard to describe."""
        raise Unprintable

    class Model:
        def stream(self, request: Any) -> Any:
            if request.step == 2:
                raise Unprintable
            return iter([response(request.id, "r1", ToolCall("c1", "broken", {}))])

    result = run([USER], model=Model(), tools=[broken])
    assert result.messages[2].content == f"Unprintable: {UNPRINTABLE}"  # type: ignore[union-attr]
    assert result.error is not None
    assert result.error.message == f"step 2: model call failed: Unprintable: {UNPRINTABLE}"


# --------------------------------------------------------------------------- GeneratorExit

# A hook raising GeneratorExit is a hook bug like any other (HOOK_ERROR); left alone it
# would end the generator without run.finished.


def _generator_exit(payload: dict[str, Any]) -> None:
    raise GeneratorExit("from a hook")


GUARDED = ToolSpec("echo", "Echo once approved.", requires_approval=True)
SECOND = response("request-002", "r2", ToolCall("c2", "echo", {}))
# topic -> (tools, budget, replies until the hook runs)
REACH: dict[str, tuple[list[ToolSpec], Budget | None, list[Any]]] = {
    "before_step": ([ECHO], None, []),
    "before_plan": ([ECHO], None, []),
    "after_plan": ([ECHO], None, [TO_TOOL]),
    "before_tool_call": ([ECHO], None, [TO_TOOL]),
    "after_tool_call": ([ECHO], None, [TO_TOOL, RESULT]),
    "after_step": ([ECHO], None, [TO_TOOL, RESULT]),
    "on_error": ([ECHO], None, []),
    "on_pause": ([GUARDED], None, [TO_TOOL]),
    "on_budget_exceeded": ([ECHO], Budget(max_tool_calls=1), [TO_TOOL, RESULT, SECOND]),
    "on_complete": ([ECHO], None, [TO_TOOL, RESULT, ANSWER]),
}


@pytest.mark.parametrize("topic", HOOK_TOPICS)
def test_generator_exit_from_a_hook_is_a_hook_error_and_run_finished_is_last(topic: str) -> None:
    hooks = _hooks(topic, _generator_exit)
    if topic == "on_error":
        hooks.on("before_step", _raises)  # something must fail first
    tools, budget, replies = REACH[topic]
    loop = agent_loop([USER], tools=tools, hooks=hooks, budget=budget)
    result = _drive(loop, replies)
    assert result.status == "failed" and result.error is not None
    assert result.error.code == HOOK_ERROR
    message = f"{topic} hook raised GeneratorExit: from a hook"
    if topic == "on_error":
        message = "before_step hook raised ValueError: no"  # the first failure wins
    assert result.error.message == message
    assert loop.log[-1].type == "run.finished"
    _replays(loop, hooks)


def test_a_scripted_run_with_a_generator_exit_hook_returns_its_result() -> None:
    model = ScriptedModel([ScriptedResponse("r1", (TextBlock("hi"),), "stop")])
    result = run([USER], model=model, tools=[], hooks=_hooks("after_plan", _generator_exit))
    assert result.error is not None and result.error.code == HOOK_ERROR
