"""FunctionModel: a test model that computes each response from the request."""

from __future__ import annotations

from typing import Any

import pytest

from agentloop import (
    EventLog,
    ModelChunk,
    ModelFailure,
    ModelRequest,
    ModelResponse,
    ScriptedModel,
    ScriptedResponse,
    TextBlock,
    ToolCall,
    ToolResultMessage,
    Usage,
    UserMessage,
    run,
)
from agentloop._function_model import FunctionModel

from .helpers import add_int as add


def _request(request_id: str = "request-001") -> ModelRequest:
    return ModelRequest(request_id, 1, (UserMessage("u1", "hi"),), ())


def test_answers_depend_on_the_request() -> None:
    def answer(request: ModelRequest) -> ScriptedResponse:
        last = request.messages[-1]
        if type(last) is ToolResultMessage:
            return ScriptedResponse.text("r2", f"The sum is {last.content}.")
        return ScriptedResponse.tool_calls("r1", ToolCall("c1", "add", {"left": 2, "right": 3}))

    model = FunctionModel(answer)
    result = run([UserMessage("u1", "2 + 3?")], model=model, tools=[add], system="Be brief.")
    assert result.status == "completed"
    assert result.final_text == "The sum is 5."
    assert model.call_count == 2
    assert [r.id for r in model.requests] == ["request-001", "request-002"]
    assert all(r.system == "Be brief." for r in model.requests)
    assert [len(r.messages) for r in model.requests] == [1, 3]
    assert "answer" in repr(model) and "2x" in repr(model)


def test_streams_like_scripted_model() -> None:
    response = ScriptedResponse(
        "r1",
        (TextBlock("Let me add these."), ToolCall("c1", "add", {"left": 1, "right": 2})),
        "tool_call",
        Usage(3, 4),
    )
    streamed = list(FunctionModel(lambda request: response).stream(_request()))
    assert streamed == list(ScriptedModel([response]).stream(_request()))
    assert len([item for item in streamed if type(item) is ModelChunk]) == 4  # 3 deltas + call


def test_same_log_as_scripted_model() -> None:
    responses = [
        ScriptedResponse.tool_calls("r1", ToolCall("c1", "add", {"left": 2, "right": 3})),
        ScriptedResponse.text("r2", "5"),
    ]
    logs = []
    for model in (ScriptedModel(responses), FunctionModel(lambda r: responses[r.step - 1])):
        log = EventLog()
        run([UserMessage("u1", "2 + 3?")], model=model, tools=[add], log=log, clock=lambda: 1.0)
        logs.append(list(log))
    assert logs[0] == logs[1]


# What the function may return -------------------------------------------------------


def test_model_response_gets_the_request_id() -> None:
    response = ModelResponse("wrong", "r1", (TextBlock("hi"),), "stop", Usage(1, 2), at=5.0)
    items = list(FunctionModel(lambda request: response).stream(_request("request-007")))
    final = items[-1]
    assert final == ModelResponse("request-007", "r1", (TextBlock("hi"),), "stop", Usage(1, 2))
    assert all(item.request_id == "request-007" for item in items)


def test_response_like_object() -> None:
    class Answer:
        id = "r9"
        content = (TextBlock("ok"),)
        stop_reason = "stop"

    final = list(FunctionModel(lambda request: Answer()).stream(_request()))[-1]
    assert final == ModelResponse("request-001", "r9", (TextBlock("ok"),), "stop", None)


def test_str_is_a_final_text_answer() -> None:
    model = FunctionModel(lambda request: f"echo: {request.messages[-1].content}")
    result = run([UserMessage("u1", "hi")], model=model, tools=[])
    assert result.final_text == "echo: hi"
    assert result.messages[-1].id == "message-function-request-001-1"


def test_model_failure_fails_the_run() -> None:
    model = FunctionModel(lambda request: ModelFailure("", "rate limited", code="MODEL_ERROR"))
    assert list(model.stream(_request())) == [ModelFailure("request-001", "rate limited")]
    result = run([UserMessage("u1", "hi")], model=model, tools=[])
    assert result.status == "failed"
    assert result.error.message.endswith("rate limited")


def test_exception_in_the_function_fails_the_run() -> None:
    def broken(request: ModelRequest) -> Any:
        raise RuntimeError("no answer for you")

    model = FunctionModel(broken)
    with pytest.raises(RuntimeError):
        model.stream(_request())
    result = run([UserMessage("u1", "hi")], model=model, tools=[])
    assert result.status == "failed"
    assert result.error.code == "MODEL_ERROR"
    assert "no answer for you" in result.error.message
    assert model.call_count == 2


@pytest.mark.parametrize("answer", [None, 42, {"text": "hi"}])
def test_other_return_values_are_rejected(answer: object) -> None:
    with pytest.raises(TypeError, match="must return a ScriptedResponse"):
        FunctionModel(lambda request: answer).stream(_request())


def test_fn_must_be_callable() -> None:
    with pytest.raises(TypeError, match="needs a function"):
        FunctionModel("not a function")  # type: ignore[arg-type]
