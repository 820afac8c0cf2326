"""``run()``: the sync driver around the generator (model streaming, tools, cancel, pauses)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from agentloop import (
    SKIP,
    AssistantMessage,
    Budget,
    CallerProtocolError,
    Cancel,
    CancelToken,
    EventLog,
    HookRegistry,
    ModelChunk,
    ModelError,
    ModelFailure,
    ModelRequest,
    ModelResponse,
    Pause,
    Resume,
    ScriptedModel,
    ScriptedResponse,
    TextBlock,
    ToolCall,
    ToolRegistry,
    ToolResultMessage,
    ToolSpec,
    Usage,
    run,
    tool,
)

from .helpers import ADD_CALL, USER, Ticker, add, script

S1 = script()


class GeneratorModel:
    """A model whose stream is a generator built by ``make(request)``; tracks closing."""

    def __init__(self, make: Callable[[ModelRequest], Iterator[Any]]) -> None:
        self.make = make
        self.closed: list[str] = []

    def stream(self, request: ModelRequest) -> Iterator[Any]:
        try:
            yield from self.make(request)
        finally:
            self.closed.append(request.id)


def types(log: EventLog) -> list[str]:
    return [event.type for event in log]


def run_s1(**options: Any) -> tuple[Any, EventLog, ScriptedModel]:
    model = ScriptedModel(S1)
    log = EventLog()
    result = run([USER], model=model, tools=[add], log=log, **options)
    return result, log, model


# --------------------------------------------------------------------------- happy path


def test_one_tool_call_then_answer():
    clock = Ticker()
    result, log, model = run_s1(clock=clock)
    assert result.status == "completed"
    assert result.reason == "goal_met"
    assert result.final_text == "20 + 22 = 42"
    assert result.steps == 2
    assert result.usage == Usage(30, 12)
    assert result.messages == (
        USER,
        AssistantMessage("message-r1", (TextBlock("Let me add."), ADD_CALL)),
        ToolResultMessage("tool-result-c1", "c1", "add", '{"sum":42}'),
        AssistantMessage("message-r2", (TextBlock("20 + 22 = 42"),)),
    )
    model.assert_complete()
    assert [r.id for r in model.requests] == ["request-001", "request-002"]
    assert model.requests[0].tools == (add.spec,)
    assert types(log)[-2:] == ["session.complete", "run.finished"]
    # session.start is stamped with the first clock reading; every reply after it
    # with a later one, so event times never go backwards.
    assert log[0].at == 100.0
    stamps = [e.at for e in log]
    assert None not in stamps
    assert stamps == sorted(s for s in stamps if s is not None)
    chunks = [e.chunk for e in log if e.type == "model.chunk"]
    assert [c.at for c in chunks] == [101.0, 102.0, 103.0, 104.0, 107.0, 108.0, 109.0]
    assert next(e for e in log if e.type == "tool.result").reply.at == 106.0
    assert all(type(e.at) is float for e in log)


def test_started_at_and_int_clock():
    result, log, _ = run_s1(clock=lambda: 7, started_at=5.0)
    assert result.status == "completed"
    assert log[0].at == 5.0
    assert log[-1].at == 7.0 and type(log[-1].at) is float


def test_default_clock_is_wall_time():
    import time

    before = time.time()
    _, log, _ = run_s1()
    first, last = log[0].at, log[-1].at
    assert first is not None and last is not None
    assert before <= first <= last <= time.time()


def test_tools_may_be_a_registry_which_is_copied():
    registry = ToolRegistry([add])
    model = ScriptedModel(S1)
    result = run([USER], model=model, tools=registry)
    assert result.status == "completed"
    assert model.requests[0].tools == (add.spec,)


def test_tool_errors_are_results_the_model_sees():
    bad = ToolCall("c1", "add", {"left": 20, "right": "22"})
    remote = ToolCall("c2", "remote", {})
    model = ScriptedModel(
        [
            ScriptedResponse.tool_calls("r1", bad, remote),
            ScriptedResponse.tool_calls("r2", ToolCall("c3", "add", {"left": 20, "right": 22})),
            ScriptedResponse.text("r3", "42"),
        ]
    )
    log = EventLog()
    result = run([USER], model=model, tools=[add, ToolSpec("remote")], log=log)
    assert result.status == "completed"
    errors = [e.message for e in log if e.type == "tool.error"]
    assert [(m.tool_call_id, m.content, m.is_error) for m in errors] == [
        ("c1", "invalid arguments: Expected `int`, got `str` - at `$.right`", True),
        ("c2", "tool 'remote' has no implementation", True),
    ]
    # The next request carries those results.
    assert model.requests[1].messages[-2:] == tuple(errors)


def test_max_steps_ends_the_run():
    model = ScriptedModel([ScriptedResponse.tool_calls("r1", ADD_CALL)])
    result = run([USER], model=model, tools=[add], max_steps=1)
    assert result.status == "max_steps"
    assert result.steps == 1


def test_hooks_are_passed_to_the_engine():
    hooks = HookRegistry()
    hooks.on("before_tool_call", lambda payload: SKIP)
    ran: list[int] = []

    @tool
    def add(left: int, right: int) -> int:
        ran.append(1)
        return left + right

    log = EventLog()
    result = run([USER], model=ScriptedModel(S1), tools=[add], hooks=hooks, log=log)
    assert result.status == "completed"
    assert ran == []
    assert [e.message.content for e in log if e.type == "tool.error"] == ["skipped"]


def test_system_prompt_reaches_the_model():
    model = ScriptedModel([ScriptedResponse.text("r1", "hi")])
    run([USER], model=model, tools=[], system="Be brief.")
    assert model.requests[0].system == "Be brief."


def test_empty_text_is_streamed_and_accepted():
    result = run([USER], model=ScriptedModel([ScriptedResponse.text("r1", "")]), tools=[])
    assert result.status == "completed"
    assert result.final_text == ""


def test_invalid_transcript_never_calls_the_model():
    model = ScriptedModel(S1)
    log = EventLog()
    result = run([USER, USER], model=model, tools=[add], log=log)
    assert result.status == "failed"
    assert result.error is not None and result.error.code == "INVALID_TRANSCRIPT"
    assert model.call_count == 0
    assert types(log) == ["run.finished"]


# --------------------------------------------------------------------------- model failures


class ProtocolBroken(Exception):
    code = "MODEL_PROTOCOL_ERROR"


@pytest.mark.parametrize(
    ("exc", "message", "code"),
    [
        (RuntimeError("boom"), "RuntimeError: boom", "MODEL_ERROR"),
        (
            ModelError("rate limited", provider="x", kind="rate_limit"),
            "rate limited",
            "MODEL_ERROR",
        ),
        (ProtocolBroken("bad tool JSON"), "ProtocolBroken: bad tool JSON", "MODEL_PROTOCOL_ERROR"),
    ],
)
@pytest.mark.parametrize("when", ["on_call", "mid_stream"])
def test_model_exceptions_become_model_failures(exc, message, code, when):
    class Failing:
        def stream(self, request: ModelRequest) -> Iterator[Any]:
            if when == "on_call":
                raise exc
            return self.gen(request)

        def gen(self, request: ModelRequest) -> Iterator[Any]:
            yield ModelChunk(request.id, TextBlock("partial"))
            raise exc

    log = EventLog()
    result = run([USER], model=Failing(), tools=[], log=log, clock=Ticker())
    assert result.status == "failed"
    assert result.error is not None
    assert result.error.code == code
    assert result.error.message == f"step 1: model call failed: {message}"
    draft = next(e for e in log if e.type == "plan.draft")
    assert draft.reply == ModelFailure("request-001", message, code, at=draft.reply.at)
    assert draft.reply.at is not None
    # The partial assistant message is never appended.
    assert result.messages == (USER,)


def test_stream_without_response_is_a_failure():
    model = GeneratorModel(lambda request: iter([ModelChunk(request.id, TextBlock("hi"))]))
    result = run([USER], model=model, tools=[])
    assert result.status == "failed"
    assert result.error is not None
    assert result.error.message.endswith(": model stream ended without a response")
    assert model.closed == ["request-001"]


def test_model_may_yield_a_failure():
    model = GeneratorModel(
        lambda request: iter([ModelFailure(request.id, "overloaded", "MODEL_ERROR")])
    )
    log = EventLog()
    result = run([USER], model=model, tools=[], log=log, clock=lambda: 3.0)
    assert result.error is not None and result.error.message.endswith(": overloaded")
    assert next(e for e in log if e.type == "plan.draft").reply.at == 3.0


def test_non_reply_items_are_a_model_protocol_error():
    model = GeneratorModel(lambda request: iter([{"text": "hi"}]))
    result = run([USER], model=model, tools=[])
    assert result.error is not None
    assert result.error.code == "MODEL_PROTOCOL_ERROR"
    assert "the model's output was malformed: yielded dict" in result.error.message


def test_items_after_the_response_are_ignored_and_the_stream_closed():
    pulled: list[int] = []

    def make(request: ModelRequest) -> Iterator[Any]:
        yield ModelResponse(request.id, "r1", (TextBlock("done"),), "stop")
        pulled.append(1)
        yield ModelChunk(request.id, TextBlock("late"))

    model = GeneratorModel(make)
    result = run([USER], model=model, tools=[])
    assert result.final_text == "done"
    assert pulled == []
    assert model.closed == ["request-001"]


def test_exhausted_script_fails_the_run():
    model = ScriptedModel([ScriptedResponse.tool_calls("r1", ADD_CALL)])
    result = run([USER], model=model, tools=[add])
    assert result.status == "failed"
    assert result.error is not None
    assert result.error.code == "MODEL_ERROR"
    assert result.error.message.startswith(
        "step 2: model call failed: AssertionError: ScriptedModel: no scripted response "
        "left for request-002"
    )


def test_request_id_mismatch_is_judged_by_the_engine():
    model = GeneratorModel(
        lambda request: iter([ModelResponse("request-999", "r1", (TextBlock("x"),), "stop")])
    )
    result = run([USER], model=model, tools=[])
    assert result.error is not None and result.error.code == "MODEL_PROTOCOL_ERROR"


# --------------------------------------------------------------------------- cancellation


def test_cancelled_before_start_never_calls_the_model():
    token = CancelToken()
    token.cancel("not today")
    model = ScriptedModel(S1)
    log = EventLog()
    result = run([USER], model=model, tools=[add], signal=token, log=log)
    assert (result.status, result.reason) == ("cancelled", "not today")
    assert model.call_count == 0
    assert log[-2].reply == Cancel("not today", at=log[-2].reply.at)


def test_cancel_between_chunks_drops_the_partial_message():
    token = CancelToken()

    def make(request: ModelRequest) -> Iterator[Any]:
        yield ModelChunk(request.id, TextBlock("Hel"))
        token.cancel("user stop")
        yield ModelChunk(request.id, TextBlock("lo"))
        yield ModelResponse(request.id, "r1", (TextBlock("Hello"),), "stop")

    model = GeneratorModel(make)
    log = EventLog()
    result = run([USER], model=model, tools=[], signal=token, log=log)
    assert (result.status, result.reason) == ("cancelled", "user stop")
    assert result.messages == (USER,)
    assert [e.chunk.block.text for e in log if e.type == "model.chunk"] == ["Hel"]
    assert model.closed == ["request-001"]


def test_cancel_before_a_tool_skips_it():
    token = CancelToken()
    ran: list[int] = []

    @tool
    def add(left: int, right: int) -> int:
        ran.append(1)
        return left + right

    log = EventLog()
    log.subscribe(lambda e: token.cancel("stop at call") if e.type == "tool.call" else None)
    result = run([USER], model=ScriptedModel(S1), tools=[add], signal=token, log=log)
    assert (result.status, result.reason) == ("cancelled", "stop at call")
    assert ran == []
    # The assistant message with the call stays; no result is invented.
    assert [type(m).__name__ for m in result.messages] == ["UserMessage", "AssistantMessage"]


def test_cancel_from_another_thread_while_a_tool_runs():
    token = CancelToken()

    @tool
    def add(left: int, right: int) -> int:
        thread = threading.Thread(target=token.cancel, args=("from thread",))
        thread.start()
        thread.join()
        return left + right

    log = EventLog()
    result = run([USER], model=ScriptedModel(S1), tools=[add], signal=token, log=log)
    assert (result.status, result.reason) == ("cancelled", "from thread")
    # The tool ran, so its result is kept; the cancel stops the run right after.
    assert result.messages[-1].content == "42"
    assert types(log)[-5:] == [
        "tool.result",
        "step.end",
        "step.start",
        "session.complete",
        "run.finished",
    ]


def test_cancel_token():
    token = CancelToken()
    assert (token.cancelled, token.reason) == (False, "")
    assert repr(token) == "<CancelToken active>"
    assert token.wait(0) is False
    token.cancel()
    token.cancel("second")  # the first cancel wins
    assert (token.cancelled, token.reason) == (True, "cancelled")
    assert token.wait(0) is True
    assert repr(token) == "<CancelToken cancelled 'cancelled'>"


def test_keyboard_interrupt_in_a_tool_is_recorded_then_raised():
    @tool
    def add(left: int, right: int) -> int:
        raise KeyboardInterrupt

    log = EventLog()
    with pytest.raises(KeyboardInterrupt):
        run([USER], model=ScriptedModel(S1), tools=[add], log=log)
    assert log[-1].type == "run.finished"
    assert (log[-1].status, log[-1].reason) == ("cancelled", "KeyboardInterrupt: ")


# --------------------------------------------------------------------------- pauses


@tool(requires_approval=True)
def delete(path: str) -> str:
    """Delete a file (pretend)."""
    return f"deleted {path}"


DELETE = [
    ScriptedResponse.tool_calls("r1", ToolCall("c1", "delete", {"path": "/tmp/x"})),
    ScriptedResponse.text("r2", "done"),
]


def test_pause_without_on_pause_cancels():
    result = run([USER], model=ScriptedModel(DELETE), tools=[delete])
    assert result.status == "cancelled"
    assert result.reason.startswith("approval needed for tool 'delete' (call c1) and no on_pause")


@pytest.mark.parametrize(
    ("payload", "content", "is_error"),
    [
        ({"approved": True}, "deleted /tmp/x", False),
        ({"approved": True, "arguments": {"path": "/tmp/y"}}, "deleted /tmp/y", False),
        ({"approved": False, "message": "not allowed"}, "not allowed", True),
    ],
)
def test_on_pause_answers_approvals(payload, content, is_error):
    pauses: list[Pause] = []

    def on_pause(pause: Pause) -> Resume:
        pauses.append(pause)
        return Resume(payload)

    log = EventLog()
    result = run(
        [USER],
        model=ScriptedModel(DELETE),
        tools=[delete],
        on_pause=on_pause,
        log=log,
        clock=Ticker(),
    )
    assert result.status == "completed"
    assert [p.reason for p in pauses] == ["approval"]
    assert (result.messages[2].content, result.messages[2].is_error) == (content, is_error)
    resume = next(e for e in log if e.type == "session.resume").reply
    assert resume.payload == payload and resume.at is not None


def test_on_pause_may_cancel():
    result = run(
        [USER], model=ScriptedModel(DELETE), tools=[delete], on_pause=lambda p: Cancel("denied")
    )
    assert (result.status, result.reason) == ("cancelled", "denied")


def test_cancel_while_waiting_for_on_pause_wins():
    token = CancelToken()

    def on_pause(pause: Pause) -> Resume:
        token.cancel("gave up")
        return Resume({"approved": True})

    result = run(
        [USER], model=ScriptedModel(DELETE), tools=[delete], on_pause=on_pause, signal=token
    )
    assert (result.status, result.reason) == ("cancelled", "gave up")


def test_cancelled_token_answers_a_pause_without_asking():
    token = CancelToken()
    log = EventLog()
    log.subscribe(lambda e: token.cancel("early") if e.type == "session.pause" else None)
    asked: list[Pause] = []
    result = run(
        [USER],
        model=ScriptedModel(DELETE),
        tools=[delete],
        on_pause=asked.append,  # type: ignore[arg-type]
        signal=token,
        log=log,
    )
    assert (result.status, result.reason) == ("cancelled", "early")
    assert asked == []


def test_budget_pause_resumed_by_on_pause():
    model = ScriptedModel(S1)
    result = run(
        [USER],
        model=model,
        tools=[add],
        budget=Budget(max_turns=1),
        on_pause=lambda pause: Resume(None, budget=Budget(max_turns=5)),
    )
    assert result.status == "completed"
    model.assert_complete()


def test_on_pause_returning_junk_is_caller_misuse():
    log = EventLog()
    with pytest.raises(CallerProtocolError):
        run(
            [USER],
            model=ScriptedModel(DELETE),
            tools=[delete],
            on_pause=lambda pause: {"approved": True},  # type: ignore[arg-type,return-value]
            log=log,
        )
    assert log[-1].type == "run.finished"
    assert log[-1].error is not None and log[-1].error.code == "CALLER_PROTOCOL_ERROR"


def test_on_pause_exception_is_recorded_then_raised():
    def on_pause(pause: Pause) -> Resume:
        raise ValueError("no human around")

    log = EventLog()
    with pytest.raises(ValueError, match="no human around"):
        run([USER], model=ScriptedModel(DELETE), tools=[delete], on_pause=on_pause, log=log)
    assert (log[-1].status, log[-1].reason) == ("cancelled", "ValueError: no human around")


# --------------------------------------------------------------------------- options


@pytest.mark.parametrize(
    ("options", "error", "match"),
    [
        ({"model": object()}, TypeError, "model must have a stream"),
        ({"signal": object()}, TypeError, "signal must be a CancelToken"),
        ({"on_pause": 42}, TypeError, "on_pause must be callable"),
        ({"clock": 42}, TypeError, "clock must be callable"),
        ({"max_steps": 0}, ValueError, "max_steps"),
    ],
)
def test_bad_options_raise_before_anything_runs(options, error, match):
    model = ScriptedModel(S1)
    kwargs: dict[str, Any] = {"model": model, "tools": [add], **options}
    with pytest.raises(error, match=match):
        run([USER], **kwargs)
    assert model.call_count == 0


def test_replies_are_stamped_even_if_the_model_set_at():
    model = GeneratorModel(
        lambda request: iter([ModelResponse(request.id, "r1", (TextBlock("x"),), "stop", at=1.0)])
    )
    log = EventLog()
    run([USER], model=model, tools=[], log=log, clock=lambda: 9.0)
    draft = next(e for e in log if e.type == "plan.draft")
    assert draft.reply == ModelResponse("request-001", "r1", (TextBlock("x"),), "stop", at=9.0)


# --------------------------------------------------------------------------- callbacks, streams


def test_on_pause_raising_stop_iteration_is_a_runtime_error_not_the_result():
    def on_pause(pause: Pause) -> Resume:
        raise StopIteration("not a result")

    log = EventLog()
    with pytest.raises(RuntimeError, match=r"^on_pause raised StopIteration$") as raised:
        run([USER], model=ScriptedModel(DELETE), tools=[delete], on_pause=on_pause, log=log)
    assert type(raised.value.__cause__) is StopIteration
    assert (log[-1].status, log[-1].reason) == (
        "cancelled",
        "RuntimeError: on_pause raised StopIteration",
    )


@pytest.mark.parametrize("when", [0, 1, 3], ids=["at the start", "first reply", "later"])
def test_a_clock_raising_stop_iteration_is_a_runtime_error_not_the_result(when):
    calls = iter(range(when))

    def clock() -> float:
        return float(next(calls))  # StopIteration after ``when`` readings

    log = EventLog()
    with pytest.raises(RuntimeError, match=r"^clock raised StopIteration$"):
        run([USER], model=ScriptedModel(S1), tools=[add], clock=clock, log=log)
    if when:  # the run had started: its log is finished
        assert log[-1].type == "run.finished" and log[-1].status == "cancelled"
    else:
        assert len(log) == 0


@tool
def measure() -> dict[str, Any]:
    """Returns a value JSON cannot hold."""
    return {"ok": None, "values": [float("nan"), 1.0]}


def test_a_tool_returning_nan_is_an_error_result_not_null():
    model = ScriptedModel(
        [
            ScriptedResponse.tool_calls("r1", ToolCall("c1", "measure", {})),
            ScriptedResponse.text("r2", "hm"),
        ]
    )
    result = run([USER], model=model, tools=[measure])
    message = result.messages[2]
    assert type(message) is ToolResultMessage and message.is_error
    assert message.content == (
        "cannot encode the result as JSON: $.values[0]: nan is not a finite number"
    )


class ClosableStream:
    """An SDK-style stream object: iterable, with close(), and no finalizer."""

    def __init__(self, items: list[Any]) -> None:
        self.items = iter(items)
        self.closed = 0

    def __iter__(self) -> ClosableStream:
        return self

    def __next__(self) -> Any:
        return next(self.items)

    def close(self) -> None:
        self.closed += 1


def test_run_closes_a_stream_object_it_leaves_open():
    streams: list[ClosableStream] = []

    class Model:
        def stream(self, request: ModelRequest) -> ClosableStream:
            # A chunk for another request ends the run while the stream is open.
            stream = ClosableStream(
                [ModelChunk("request-999", TextBlock("x")), ModelChunk(request.id, TextBlock("y"))]
            )
            streams.append(stream)
            return stream

    result = run([USER], model=Model(), tools=[])
    assert result.error is not None and result.error.code == "MODEL_PROTOCOL_ERROR"
    assert [stream.closed for stream in streams] == [1]


def test_run_closes_a_stream_object_once_its_response_arrived():
    streams: list[ClosableStream] = []

    class Model:
        def stream(self, request: ModelRequest) -> ClosableStream:
            stream = ClosableStream(
                [
                    ModelChunk(request.id, TextBlock("done")),
                    ModelResponse(request.id, "r1", (TextBlock("done"),), "stop"),
                ]
            )
            streams.append(stream)
            return stream

    assert run([USER], model=Model(), tools=[]).final_text == "done"
    assert [stream.closed for stream in streams] == [1]
