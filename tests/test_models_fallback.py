"""FallbackModel, retry warnings, and what the loop does with provider fidelity fields.

Usage of every response (failed ones too), refusals, ``stop_message``,
``ProviderBlock`` validation and ``ModelAttempt`` records, driven by small
in-test models (the adapters' own traffic is in ``tests/providers/``).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Generator, Iterator
from typing import Any

import msgspec
import pytest

import replay
from agentloop import (
    MODEL_ERROR,
    MODEL_PROTOCOL_ERROR,
    MODEL_REFUSED,
    AssistantMessage,
    CallerProtocolError,
    EventLog,
    HookRegistry,
    ModelAttempt,
    ModelChunk,
    ModelError,
    ModelFailure,
    ModelRequest,
    ModelResponse,
    PlanDraftEvent,
    ProviderBlock,
    ScriptedModel,
    ScriptedResponse,
    TextBlock,
    ToolCall,
    Usage,
    UserMessage,
    agent_loop,
    run,
    tool,
)
from agentloop.models import FallbackModel, RetryPolicy
from agentloop.models._common import StreamingModel

HI = [UserMessage("u1", "Hi")]


class Replies:
    """A model that answers every request with the same replies (or raises)."""

    def __init__(self, *replies: Any, name: str = "replies") -> None:
        self.replies = replies
        self.name = name
        self.calls = 0

    def __repr__(self) -> str:
        return f"Replies({self.name})"

    def stream(self, request: ModelRequest) -> Iterator[Any]:
        self.calls += 1
        for reply in self.replies:
            if isinstance(reply, Exception):
                raise reply
            yield msgspec.structs.replace(reply, request_id=request.id)


def answer(text: str = "Hello", **fields: Any) -> ModelResponse:
    return ModelResponse("?", "r1", (TextBlock(text),), "stop", **fields)


def replays(log: EventLog) -> None:
    assert list(replay.replay(log.events).events) == list(log.events)


def drafts(log: EventLog) -> list[Any]:
    return [event.reply for event in log.events if type(event) is PlanDraftEvent]


# =========================================================================== FallbackModel


class TestFallbackModel:
    def test_next_model_answers_and_the_attempt_is_recorded(
        self, caplog: pytest.LogCaptureFixture
    ) -> None:
        billed = Usage(7, 1)
        down = Replies(
            ModelError("openai HTTP 503: down", kind="server", status_code=503, usage=billed),
            name="a",
        )
        backup = Replies(ModelChunk("?", TextBlock("Hello")), answer(usage=Usage(3, 2)), name="b")
        log = EventLog()
        with caplog.at_level(logging.WARNING, logger="agentloop.models"):
            result = run(HI, model=FallbackModel(down, backup), tools=[], log=log)
        assert result.status == "completed"
        assert result.final_text == "Hello"
        assert result.usage == Usage(10, 3)  # the failed attempt's billed tokens count
        (draft,) = drafts(log)
        assert draft.attempts == (
            ModelAttempt(
                model="Replies(a)",
                error="openai HTTP 503: down",
                kind="server",
                status_code=503,
                usage=billed,
            ),
        )
        assert (
            "Replies(a) failed for request-001 (openai HTTP 503: down); falling back to Replies(b)"
            in caplog.text
        )
        replays(log)

    def test_every_model_failing_is_one_failure_listing_each(self) -> None:
        first = Replies(ModelError("boom", kind="server", usage=Usage(2, 0)), name="a")
        second = Replies(ModelError("nope", kind="auth", status_code=401), name="b")
        log = EventLog()
        result = run(HI, model=FallbackModel(first, second), tools=[], log=log)
        assert result.error is not None
        assert result.error.code == MODEL_ERROR
        assert result.error.message == (
            "step 1: model call failed: all 2 models failed: Replies(a): boom; Replies(b): nope"
        )
        assert result.usage == Usage(2, 0)
        (failure,) = drafts(log)
        assert type(failure) is ModelFailure
        assert [a.model for a in failure.attempts] == ["Replies(a)", "Replies(b)"]
        replays(log)

    def test_failure_after_the_first_chunk_is_not_retried_elsewhere(self) -> None:
        started = Replies(ModelChunk("?", TextBlock("Hel")), ModelError("cut"), name="a")
        backup = Replies(answer(), name="b")
        result = run(HI, model=FallbackModel(started, backup), tools=[])
        assert result.error is not None
        assert "cut" in result.error.message
        assert backup.calls == 0

    def test_a_model_failure_reply_is_an_answer_and_keeps_the_attempts(self) -> None:
        down = Replies(ModelError("down"), name="a")
        broken = Replies(ModelFailure("?", "bad JSON", code=MODEL_PROTOCOL_ERROR), name="b")
        log = EventLog()
        result = run(HI, model=FallbackModel(down, broken), tools=[], log=log)
        assert result.error is not None
        assert result.error.code == MODEL_PROTOCOL_ERROR
        assert [a.model for a in drafts(log)[0].attempts] == ["Replies(a)"]

    def test_other_exceptions_are_not_a_reason_to_switch(self) -> None:
        buggy = Replies(ZeroDivisionError("bug"), name="a")
        backup = Replies(answer(), name="b")
        result = run(HI, model=FallbackModel(buggy, backup), tools=[])
        assert result.error is not None
        assert "ZeroDivisionError: bug" in result.error.message
        assert backup.calls == 0

    def test_primary_that_works_records_nothing(self) -> None:
        log = EventLog()
        run(HI, model=FallbackModel(Replies(answer()), Replies(answer())), tools=[], log=log)
        assert drafts(log)[0].attempts == ()

    def test_construction(self) -> None:
        with pytest.raises(TypeError, match="at least one fallback"):
            FallbackModel(Replies())
        with pytest.raises(TypeError, match="model 1 must have a stream"):
            FallbackModel(Replies(), object())  # type: ignore[arg-type]
        model = FallbackModel(Replies(name="a"), Replies(name="x" * 300))
        assert repr(model).startswith("FallbackModel(Replies(a), Replies(xxx")
        assert repr(model).endswith("...)")


class Flaky(StreamingModel):
    provider = "flaky"

    def __init__(self, failures: int) -> None:
        super().__init__(retry=RetryPolicy(3, 0.25), sleep=lambda _: None)
        self.failures = failures

    def __repr__(self) -> str:
        return "Flaky()"

    def _attempt(self, request: ModelRequest) -> Generator[Any, None, None]:
        if self.failures:
            self.failures -= 1
            raise ModelError("HTTP 500", kind="server", status_code=500)
        yield ModelResponse(request.id, "r1", (TextBlock("ok"),), "stop")


def test_retries_are_logged_as_warnings(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="agentloop.models"):
        result = run(HI, model=Flaky(2), tools=[])
    assert result.final_text == "ok"
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == [
        "Flaky(): attempt 1 of 3 for request-001 failed (HTTP 500); retrying in 0.25s",
        "Flaky(): attempt 2 of 3 for request-001 failed (HTTP 500); retrying in 0.5s",
    ]


# =========================================================================== the loop


def drive(*replies: Any, hooks: HookRegistry | None = None) -> tuple[Any, EventLog]:
    log = EventLog()
    loop = agent_loop(HI, tools=[], log=log, hooks=hooks)
    effect = next(loop)
    for reply in replies:
        try:
            effect = loop.send(msgspec.structs.replace(reply, request_id=effect.id))
        except StopIteration as stop:
            return stop.value, log
    raise AssertionError("the run did not end")


class TestLoop:
    def test_refusal_without_words_uses_the_text_or_says_so(self) -> None:
        result, _ = drive(ModelResponse("?", "r1", (TextBlock("I won't."),), "refusal"))
        assert result.error.code == MODEL_REFUSED
        assert result.error.message == "step 1: the model refused: I won't."
        result, _ = drive(ModelResponse("?", "r1", (), "refusal", usage=Usage(4, 0)))
        assert result.error.message == "step 1: the model refused: it gave no explanation"
        assert result.usage == Usage(4, 0)

    def test_error_stop_without_words(self) -> None:
        result, _ = drive(ModelResponse("?", "r1", (), "error"))
        assert result.error.message == "step 1: the model stopped with reason 'error'"

    def test_usage_of_a_rejected_response_still_counts(self) -> None:
        bad = ModelResponse("?", "r1", (ToolCall("c1", "x", {}),), "stop", usage=Usage(9, 9))
        result, log = drive(bad)
        assert result.error.code == MODEL_PROTOCOL_ERROR
        assert result.usage == Usage(9, 9)
        replays(log)

    def test_failure_usage_counts(self) -> None:
        result, _ = drive(ModelFailure("?", "down", usage=Usage(5, 1, cache_read_tokens=4)))
        assert result.usage == Usage(5, 1, cache_read_tokens=4)

    def test_provider_block_is_kept_and_copied(self) -> None:
        data = {"id": "rs_1", "summary": [{"type": "summary_text", "text": "s"}]}
        block = ProviderBlock("openai", "reasoning", data)
        result, log = drive(
            ModelChunk("?", block),
            ModelChunk("?", TextBlock("ok")),
            ModelResponse("?", "r1", (block, TextBlock("ok")), "stop"),
        )
        assert result.status == "completed"
        data["summary"].clear()  # the caller's dict is not the loop's
        kept = result.messages[-1].content[0]
        assert kept.data["summary"] == [{"type": "summary_text", "text": "s"}]
        replays(log)

    def test_after_plan_cannot_turn_a_plan_into_a_refusal(self) -> None:
        hooks = HookRegistry()
        hooks.on("after_plan", lambda payload: payload.update(stop_reason="refusal"))
        result, _ = drive(answer(), hooks=hooks)
        assert result.error.message == (
            "after_plan hook produced an invalid plan: stop reason 'refusal' is not stop, "
            "tool_call or length"
        )

    @pytest.mark.parametrize(
        ("reply", "problem"),
        [
            (
                ModelChunk("?", ProviderBlock("openai", 1, {})),  # type: ignore[arg-type]
                "ModelChunk.block.kind must be a str",
            ),
            (
                ModelChunk("?", ProviderBlock("openai", "k", [])),  # type: ignore[arg-type]
                "ProviderBlock.data must be a dict",
            ),
            (
                ModelChunk("?", ProviderBlock("openai", "k", {"x": float("nan")})),
                "ModelChunk.block.data.x: nan is not a finite number",
            ),
            (answer(stop_message=3), "ModelResponse.stop_message must be a str"),
            (answer(usage=Usage(1, 2, reasoning_tokens=-1)), "ModelResponse.usage must be None"),
            (answer(attempts=[]), "ModelResponse.attempts must be a tuple"),
            (answer(attempts=("x",)), "ModelResponse.attempts[0] must be a ModelAttempt, got str"),
            (
                answer(attempts=(ModelAttempt(model="m", error=2),)),  # type: ignore[arg-type]
                "ModelResponse.attempts[0].error must be a str",
            ),
            (
                answer(attempts=(ModelAttempt(model="m", error="e", status_code="5"),)),  # type: ignore[arg-type]
                "ModelResponse.attempts[0].status_code must be an int or None",
            ),
            (
                answer(attempts=(ModelAttempt(model="m", error="e", usage=Usage(-1, 0)),)),
                "ModelResponse.attempts[0].usage must be None",
            ),
            (ModelFailure("?", "x", usage=Usage("1", 0)), "ModelFailure.usage must be None"),  # type: ignore[arg-type]
        ],
    )
    def test_malformed_fields_are_caller_misuse(self, reply: Any, problem: str) -> None:
        loop = agent_loop(HI, tools=[])
        effect = next(loop)
        with pytest.raises(CallerProtocolError, match=re.escape(problem)):
            loop.send(msgspec.structs.replace(reply, request_id=effect.id))

    def test_usage_sums_every_field(self) -> None:
        a = Usage(10, 2, cache_read_tokens=8, cache_write_tokens=1, reasoning_tokens=1)
        assert a + a == Usage(20, 4, 16, 2, 2)


def test_scripted_model_still_works_with_the_new_fields() -> None:
    script = ScriptedModel([ScriptedResponse("r1", (TextBlock("Hi"),), "stop", Usage(1, 1))])
    result = run(HI, model=script, tools=[])
    assert result.usage == Usage(1, 1)
    assert result.messages[-1] == AssistantMessage("message-r1", (TextBlock("Hi"),))


@tool
def noop() -> str:
    """Nothing."""
    return ""
