"""agentloop.temporal when models and tools go wrong, on a real Temporal dev server.

Where :func:`agentloop.run` has an answer (a model error, malformed output, a
stream without a response, too many chunks), the workflow's log is the log
``run`` writes in process with the same model. Where Temporal adds something
(retries, timeouts, output JSON cannot carry), the outcome is checked directly.
"""

from __future__ import annotations

import asyncio
import collections
import math
from typing import Any

import pytest
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from agentloop import (
    MAX_CHUNKS_PER_STEP,
    ModelChunk,
    ModelError,
    ModelResponse,
    Pause,
    TextBlock,
    ToolCall,
    ToolResultMessage,
    tool,
)
from agentloop.temporal import ActivityOptions, SessionActivities
from agentloop.temporal._wire import ModelCall, ModelConfig, config_digest, encode, raw

from .app import MODEL, TOOLS, add
from .conftest import Temporal
from .helpers import QUESTION, drive_by_hand, encoded, run_in_process, serving, wait_for

RETRY_FAST = ActivityOptions(max_attempts=2, initial_interval_seconds=0.1)


class Broken(Exception):
    """An adapter's protocol error: it carries ``code`` (see ``agentloop.run``)."""

    code = "MODEL_PROTOCOL_ERROR"


class Misbehaving:
    """A model whose system prompt says how it goes wrong."""

    def __init__(self) -> None:
        self.calls: collections.Counter[str] = collections.Counter()

    def stream(self, request):
        mode = request.system
        self.calls[mode] += 1
        rid = request.id
        if mode == "auth":
            raise ModelError("invalid api key", provider="test", status_code=401, kind="auth")
        if mode == "down":
            raise ModelError("overloaded", provider="test", status_code=529, kind="server")
        if mode == "flaky" and self.calls[mode] == 1:
            raise ConnectionResetError("connection reset by peer")
        if mode == "broken":
            raise Broken("tool arguments are not JSON")
        if mode == "not-a-reply":
            return iter(["hello"])
        if mode == "nan":
            call = ToolCall("c1", "add", {"left": math.nan, "right": 1.5})
            return [ModelResponse(rid, "r1", (call,), "tool_call")]
        if mode == "surrogate":
            return [ModelChunk(rid, TextBlock("\ud800"))]
        if mode == "no-response":
            return [ModelChunk(rid, TextBlock("thinking..."))]
        if mode == "other-request":
            return [ModelChunk("request-999", TextBlock("hi"))]
        if mode == "chatty":
            return (ModelChunk(rid, TextBlock("x")) for _ in range(5 * MAX_CHUNKS_PER_STEP))
        return MODEL.stream(request)


class AsyncModel:
    """The app's model behind ``astream`` (or a failure, by system prompt)."""

    async def astream(self, request):
        if request.system == "async-down":
            raise ModelError("overloaded", kind="bad_request")
        for item in MODEL.stream(request):
            await asyncio.sleep(0)
            if request.system == "async-no-response" and type(item) is ModelResponse:
                return
            yield item


async def sessions(temporal: Temporal, model, systems, tools=TOOLS, **options):
    """Run one session per system prompt on one worker; ``{system: (result, log)}``."""
    async with serving(temporal, model=model, tools=tools) as start:
        started = {system: await start(system=system, **options) for system in systems}
        return {
            system: (await session.result(), await session.log())
            for system, session in started.items()
        }


# --------------------------------------------------------------------------- models


AS_IN_PROCESS = ["auth", "not-a-reply", "no-response", "other-request", "chatty", "broken"]


def test_model_failures_end_the_run_as_in_process(temporal: Temporal) -> None:
    model = Misbehaving()
    outcomes = temporal.run(sessions(temporal, model, AS_IN_PROCESS, model_activity=RETRY_FAST))
    for system, (result, log) in outcomes.items():
        assert result.status == "failed", system
        in_process_result, in_process = run_in_process(log, model=Misbehaving(), tools=TOOLS)
        assert in_process == encoded(log), system
        assert in_process_result == result, system
    assert outcomes["auth"][0].error.message.endswith(": invalid api key")
    assert outcomes["broken"][0].error.code == "MODEL_PROTOCOL_ERROR"
    assert outcomes["no-response"][0].error.message.endswith(
        ": model stream ended without a response"
    )
    # Not retried: an auth error, a protocol error (only "down" and "flaky" are).
    assert model.calls["auth"] == model.calls["broken"] == 1


def test_transient_model_errors_are_retried_by_temporal(temporal: Temporal) -> None:
    model = Misbehaving()
    outcomes = temporal.run(sessions(temporal, model, ["flaky", "down"], model_activity=RETRY_FAST))
    flaky, flaky_log = outcomes["flaky"]
    assert flaky.status == "completed"
    assert model.calls["flaky"] == 2  # the failed attempt left no trace in the log
    assert drive_by_hand(flaky_log) == encoded(flaky_log)
    down, down_log = outcomes["down"]
    assert model.calls["down"] == 2
    assert (down.status, down.error.code) == ("failed", "MODEL_ERROR")
    assert down.error.message.endswith(": overloaded")
    assert drive_by_hand(down_log) == encoded(down_log)


def test_output_json_cannot_carry_is_a_model_protocol_error(temporal: Temporal) -> None:
    outcomes = temporal.run(sessions(temporal, Misbehaving(), ["nan", "surrogate"]))
    nan, nan_log = outcomes["nan"]
    assert nan.error.code == "MODEL_PROTOCOL_ERROR"
    assert "NaN or infinity" in nan.error.message
    surrogate, surrogate_log = outcomes["surrogate"]
    assert surrogate.error.code == "MODEL_PROTOCOL_ERROR"
    assert "cannot be encoded" in surrogate.error.message
    for log in (nan_log, surrogate_log):
        assert drive_by_hand(log) == encoded(log)


def test_an_async_model_streams_through_astream(temporal: Temporal) -> None:
    systems = ["add 2", "async-down", "async-no-response"]
    outcomes = temporal.run(sessions(temporal, AsyncModel(), systems, model_activity=RETRY_FAST))
    result, log = outcomes["add 2"]
    assert result.final_text == 'Done: {"sum":42}'
    assert run_in_process(log, model=MODEL, tools=TOOLS)[1] == encoded(log)
    down = outcomes["async-down"][0]
    assert down.status == "failed"
    assert down.error.message.endswith(": overloaded")
    assert outcomes["async-no-response"][0].error.message.endswith(
        ": model stream ended without a response"
    )


# --------------------------------------------------------------------------- tools


def test_tools_see_their_idempotency_key_and_odd_text_is_kept(temporal: Temporal) -> None:
    from agentloop import idempotency_key

    @tool
    def add(left: int, right: int) -> str:
        """Report the key and a lone surrogate."""
        return f"{idempotency_key()} \udce9"

    outcomes = temporal.run(sessions(temporal, MODEL, ["add 1"], tools=[add]))
    result, log = outcomes["add 1"]
    (tool_result,) = [m for m in result.messages if type(m) is ToolResultMessage]
    session = result.messages[1].content[1].id
    assert tool_result.content.endswith(f":{session} \\udce9")
    assert drive_by_hand(log) == encoded(log)


def test_a_tool_activity_that_times_out_is_an_error_result(temporal: Temporal) -> None:
    import threading

    release = threading.Event()

    @tool
    def add(left: int, right: int) -> int:
        """Never in time."""
        release.wait(30)
        return left + right

    options = ActivityOptions(start_to_close_seconds=1, heartbeat_seconds=None, max_attempts=1)
    try:
        outcomes = temporal.run(
            sessions(temporal, MODEL, ["add 1"], tools=[add], tool_activity=options)
        )
    finally:
        release.set()
    result, log = outcomes["add 1"]
    assert result.status == "completed"
    (tool_result,) = [m for m in result.messages if type(m) is ToolResultMessage]
    assert tool_result.is_error
    assert tool_result.content.startswith("the tool call failed: ")
    assert "timeout" in tool_result.content.lower()
    assert drive_by_hand(log) == encoded(log)


# --------------------------------------------------------------------------- the activity alone


def test_a_worker_without_the_prefix_asks_the_workflow_and_checks_the_answer(
    temporal: Temporal,
) -> None:
    """The model activity, run by hand (ActivityEnvironment) for a session that is
    waiting on a pause: a request it cannot rebuild is refused, never guessed."""

    async def scenario() -> Any:
        async with serving(temporal) as start:
            session = await start(system="approve")
            await wait_for(session, Pause)
            run_id = session.handle.result_run_id
            activities = SessionActivities(model=MODEL, transcript_cache=4)
            env = ActivityEnvironment(client=temporal.client)
            config = ModelConfig(tuple(spec for spec in (add.spec,)), "add 1")
            first = ModelCall(
                session=session.id,
                run_id=run_id,
                request_id="request-001",
                step=1,
                base=0,
                digest=config_digest(config),
                messages=tuple(QUESTION),
                config=config,
            )
            answered = await env.run(activities.model, raw(encode(first)))
            stale = ModelCall(
                session=session.id,
                run_id=run_id,
                request_id="request-002",
                step=2,
                base=1,
                digest="not the digest of anything",
                messages=(),
            )
            with pytest.raises(ApplicationError) as refused:
                await env.run(activities.model, raw(encode(stale)))
            await session.cancel("done")
            return answered, refused.value

    answered, refused = temporal.run(scenario())
    assert answered.payload.data.startswith(b'{"items":[{"kind":"model_chunk"')
    assert refused.type == "NotPending"
    assert "is not waiting for model request 'request-002'" in refused.message
    assert refused.non_retryable
