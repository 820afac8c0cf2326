"""agentloop.otel: GenAI spans from live runs and from recorded logs.

Checked with the OpenTelemetry SDK's in-memory exporter: the span tree, names,
kinds, attributes, times (the events' ``at``), error status, content capture on and
off, across every recorded fixture; the OTLP/JSON export is deterministic and parses
back into an ``ExportTraceServiceRequest``.
"""

from __future__ import annotations

import base64
import hashlib
import itertools
import json
import logging
import subprocess
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import msgspec
import pytest
from google.protobuf.json_format import ParseDict  # type: ignore[import-untyped, unused-ignore]
from hypothesis import given
from hypothesis import strategies as st
from opentelemetry import trace
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from agentloop import (
    SKIP,
    AssistantMessage,
    AudioBlock,
    Budget,
    BudgetWarnEvent,
    Cancel,
    DocumentBlock,
    Event,
    EventLog,
    HookRegistry,
    ImageBlock,
    MessageAcceptedEvent,
    ModelChunk,
    ModelChunkEvent,
    ModelError,
    ModelFailure,
    ModelResponse,
    PlanCommitEvent,
    PlanDraftEvent,
    ProviderBlock,
    Resume,
    RunFinishedEvent,
    ScriptedModel,
    ScriptedResponse,
    SessionPauseEvent,
    SessionResumeEvent,
    SessionStartEvent,
    StepStartEvent,
    TextBlock,
    ThinkingBlock,
    ToolCall,
    ToolCallEvent,
    ToolResultEvent,
    ToolResultMessage,
    Usage,
    UserMessage,
    agent_loop,
    otel,
    run,
    tool,
)
from replay import read_log
from tests.helpers import add_ab as add
from tests.helpers import nested

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = sorted((ROOT / "fixtures").glob("*.jsonl"))
CONTENT_KEYS = {
    "gen_ai.input.messages",
    "gen_ai.output.messages",
    "gen_ai.system_instructions",
    "gen_ai.tool.definitions",
    "gen_ai.tool.call.arguments",
    "gen_ai.tool.call.result",
}


class Spans:
    """An SDK tracer provider whose finished spans are kept in memory."""

    def __init__(self) -> None:
        self.exporter = InMemorySpanExporter()
        self.provider = TracerProvider()
        self.provider.add_span_processor(SimpleSpanProcessor(self.exporter))

    @property
    def finished(self) -> list[ReadableSpan]:
        """Finished spans in start order (the root before its children)."""
        spans = self.exporter.get_finished_spans()
        return sorted(spans, key=lambda s: (s.start_time, s.parent is not None))

    def root(self) -> ReadableSpan:
        (root,) = [s for s in self.exporter.get_finished_spans() if s.parent is None]
        return root

    def children(self) -> list[ReadableSpan]:
        return [s for s in self.finished if s.parent is not None]


def recorded(events: Iterable[Event], **options: Any) -> Spans:
    spans = Spans()
    otel.record_log(events, tracer_provider=spans.provider, **options)
    return spans


def ns(event: Event) -> int:
    """An event's time in ns (the event must have one)."""
    assert event.at is not None
    return round(event.at * 1e9)


def window(span: ReadableSpan) -> tuple[int, int]:
    """A finished span's (start, end) in ns."""
    assert span.start_time is not None and span.end_time is not None
    return span.start_time, span.end_time


def attrs(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})


def shape(spans: Sequence[ReadableSpan]) -> list[tuple[Any, ...]]:
    """Everything about spans but their ids (parents as indexes into the list)."""
    index = {s.context.span_id: i for i, s in enumerate(spans)}
    return [
        (
            s.name,
            s.kind,
            None if s.parent is None else index[s.parent.span_id],
            s.start_time,
            s.end_time,
            attrs(s),
            [(e.name, e.timestamp, dict(e.attributes or {})) for e in s.events],
            s.status.status_code,
            s.status.description,
        )
        for s in spans
    ]


def calculator_run(log: EventLog, **options: Any) -> None:
    """Two steps: ask for add(20, 22), then answer; the clock ticks 0.5 s a reply."""
    model = ScriptedModel(
        [
            ScriptedResponse.tool_calls(
                "resp-1", ToolCall("call-1", "add", {"a": 20, "b": 22}), usage=Usage(50, 10)
            ),
            ScriptedResponse.text("resp-2", "The sum is 42.", usage=Usage(70, 6)),
        ]
    )
    ticks = itertools.count()
    run(
        [UserMessage("user-1", "What is 20 + 22?")],
        model=model,
        tools=[add],
        system="Be brief.",
        log=log,
        clock=lambda: 1000.0 + next(ticks) * 0.5,
        **options,
    )


# --------------------------------------------------------------------------- live


def test_live_spans_follow_the_genai_conventions() -> None:
    spans = Spans()
    log = EventLog()
    recorder = otel.instrument(
        log,
        tracer_provider=spans.provider,
        agent_name="calculator",
        provider_name="openai",
        request_model="gpt-test",
        conversation_id="conv-1",
    )
    assert isinstance(recorder, otel.SpanRecorder)
    calculator_run(log)
    at = {f"{e.type}#{e.step}": e.at for e in log.events}  # the last of each per step

    root, chat1, tool_span, chat2 = spans.finished
    assert [s.name for s in spans.finished] == [
        "invoke_agent calculator",
        "chat gpt-test",
        "execute_tool add",
        "chat gpt-test",
    ]
    assert [s.kind for s in spans.finished] == [
        SpanKind.INTERNAL,
        SpanKind.CLIENT,
        SpanKind.INTERNAL,
        SpanKind.CLIENT,
    ]
    # One trace; every child's parent is the run's span.
    assert {s.context.trace_id for s in spans.finished} == {root.context.trace_id}
    assert root.parent is None
    assert all(s.parent.span_id == root.context.span_id for s in (chat1, tool_span, chat2))

    # Times are the replies' `at` (the run's clock, 0.5 s a tick), in ns.
    times = [(window(s)[0] / 1e9, window(s)[1] / 1e9) for s in spans.finished]
    assert times == [
        (at["session.start#0"], at["run.finished#2"]),
        (at["step.start#1"], at["plan.commit#1"]),
        (at["tool.call#1"], at["tool.result#1"]),
        (at["step.start#2"], at["plan.commit#2"]),
    ]
    assert times == [(1000.0, 1003.5), (1000.0, 1001.0), (1001.0, 1001.5), (1001.5, 1003.5)]

    assert attrs(root) == {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.provider.name": "openai",
        "gen_ai.request.model": "gpt-test",
        "gen_ai.agent.name": "calculator",
        "gen_ai.conversation.id": "conv-1",
        "agentloop.max_steps": 8,
        "agentloop.run.status": "completed",
        "agentloop.run.reason": "goal_met",
        "agentloop.run.steps": 2,
        "gen_ai.usage.input_tokens": 120,
        "gen_ai.usage.output_tokens": 16,
    }
    # gen_ai.conversation.id is on every span (conditionally required when available),
    # and a tool span says its gen_ai.tool.type.
    assert attrs(chat1) == {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "openai",
        "gen_ai.request.model": "gpt-test",
        "gen_ai.conversation.id": "conv-1",
        "agentloop.request.id": "request-001",
        "agentloop.step": 1,
        "gen_ai.response.id": "resp-1",
        "gen_ai.response.finish_reasons": ("tool_call",),
        "gen_ai.usage.input_tokens": 50,
        "gen_ai.usage.output_tokens": 10,
        "gen_ai.response.time_to_first_chunk": 0.5,
    }
    assert attrs(chat2)["gen_ai.response.finish_reasons"] == ("stop",)
    assert attrs(tool_span) == {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "add",
        "gen_ai.tool.call.id": "call-1",
        "gen_ai.tool.type": "function",
        "gen_ai.conversation.id": "conv-1",
        "gen_ai.tool.description": "Add two integers.",
        "agentloop.step": 1,
    }
    for span in spans.finished:
        assert span.status.status_code is StatusCode.UNSET
        assert not CONTENT_KEYS & set(attrs(span)), "content is opt-in"
        assert span.instrumentation_scope.name == "agentloop"


def test_content_capture_is_opt_in() -> None:
    spans = Spans()
    log = EventLog()
    otel.instrument(log, tracer_provider=spans.provider, capture_content=True)
    calculator_run(log)
    root, chat1, tool_span, chat2 = spans.finished
    user = {"role": "user", "parts": [{"type": "text", "content": "What is 20 + 22?"}]}
    call = {"type": "tool_call", "id": "call-1", "name": "add", "arguments": {"a": 20, "b": 22}}
    asked = {"role": "assistant", "parts": [call]}
    answer = {
        "role": "tool",
        "parts": [{"type": "tool_call_response", "id": "call-1", "response": "42"}],
    }
    final = {"role": "assistant", "parts": [{"type": "text", "content": "The sum is 42."}]}
    system = [{"type": "text", "content": "Be brief."}]

    def decoded(span: ReadableSpan, key: str) -> Any:
        return json.loads(attrs(span)[key])

    assert decoded(root, "gen_ai.input.messages") == [user]
    assert decoded(root, "gen_ai.output.messages") == [{**final, "finish_reason": "stop"}]
    assert decoded(root, "gen_ai.system_instructions") == system
    assert decoded(root, "gen_ai.tool.definitions") == [
        {
            "type": "function",
            "name": "add",
            "description": "Add two integers.",
            "parameters": add.spec.parameters,
        }
    ]
    assert decoded(chat1, "gen_ai.input.messages") == [user]
    assert decoded(chat1, "gen_ai.system_instructions") == system
    assert decoded(chat1, "gen_ai.output.messages") == [{**asked, "finish_reason": "tool_call"}]
    assert decoded(chat2, "gen_ai.input.messages") == [user, asked, answer]
    assert decoded(chat2, "gen_ai.output.messages") == [{**final, "finish_reason": "stop"}]
    assert decoded(tool_span, "gen_ai.tool.call.arguments") == {"a": 20, "b": 22}
    assert attrs(tool_span)["gen_ai.tool.call.result"] == "42"


def test_provider_blocks_are_generic_parts_at_any_depth(caplog: pytest.LogCaptureFixture) -> None:
    # Opaque provider state nested far past msgspec's recursion: the output messages
    # are still written (without recursion), and nothing is logged as a failure.
    blocks = (ProviderBlock("anthropic", "redacted_thinking", nested(3001)), TextBlock("done"))
    spans = Spans()
    log = EventLog()
    otel.instrument(log, tracer_provider=spans.provider, capture_content=True)
    with caplog.at_level(logging.ERROR, logger="agentloop.otel"):
        result = run(
            [UserMessage("u1", "hi")],
            model=ScriptedModel([ScriptedResponse("r1", blocks, "stop")]),
            tools=[],
            log=log,
        )
    assert result.status == "completed"
    assert caplog.records == []
    _, chat = spans.finished
    output = attrs(chat)["gen_ai.output.messages"]
    part = '{"type":"provider","provider":"anthropic","kind":"redacted_thinking","data":'
    assert output.startswith('[{"role":"assistant","parts":[' + part + '{"a":' * 3000 + "{}")
    assert output.endswith('{"type":"text","content":"done"}],"finish_reason":"stop"}]')


def test_live_and_offline_give_the_same_spans() -> None:
    live = Spans()
    log = EventLog()
    otel.instrument(log, tracer_provider=live.provider, capture_content=True)
    calculator_run(log)
    offline = recorded(log.events, capture_content=True)
    assert shape(live.finished) == shape(offline.finished)


def test_the_recorder_attaches_to_any_driver_as_a_plain_callable() -> None:
    # What a driver's per-event callback does: call it with each event.
    spans = Spans()
    recorder = otel.SpanRecorder(tracer_provider=spans.provider)
    log = EventLog()
    calculator_run(log)
    for event in log.events:
        recorder(event)
    assert [s.name for s in spans.finished] == [
        "invoke_agent",
        "chat",
        "execute_tool add",
        "chat",
    ]


def test_the_model_names_provider_and_model() -> None:
    class Adapter:
        provider = "anthropic"
        model = "claude-test"

    spans = Spans()
    log = EventLog()
    otel.instrument(log, tracer_provider=spans.provider, model=Adapter())
    calculator_run(log)
    chat = spans.children()[0]
    assert chat.name == "chat claude-test"
    assert attrs(chat)["gen_ai.provider.name"] == "anthropic"
    assert attrs(chat)["gen_ai.request.model"] == "claude-test"
    # Explicit names win over the model's; a model without them says nothing.
    explicit = otel.SpanRecorder(model=Adapter(), provider_name="openai", request_model="x")
    assert explicit._common == {"gen_ai.provider.name": "openai", "gen_ai.request.model": "x"}
    bare = otel.SpanRecorder(model=ScriptedModel([]))
    assert bare._common == {"gen_ai.provider.name": otel.UNKNOWN_PROVIDER}


def test_the_global_tracer_provider_is_the_default(monkeypatch: pytest.MonkeyPatch) -> None:
    spans = Spans()
    monkeypatch.setattr(trace, "get_tracer_provider", lambda: spans.provider)
    log = EventLog()
    otel.instrument(log)
    calculator_run(log)
    assert len(spans.finished) == 4


def test_a_live_root_joins_the_current_span() -> None:
    spans = Spans()
    tracer = spans.provider.get_tracer("app")
    log = EventLog()
    otel.instrument(log, tracer_provider=spans.provider)
    with tracer.start_as_current_span("request") as outer:
        calculator_run(log)
    runs = [s for s in spans.finished if s.name == "invoke_agent"]
    assert runs[0].parent.span_id == outer.get_span_context().span_id


def test_errors_from_the_tracer_never_reach_the_run(caplog: pytest.LogCaptureFixture) -> None:
    class Broken(TracerProvider):
        def get_tracer(self, *args: Any, **kwargs: Any) -> Any:
            raise_on_start = super().get_tracer(*args, **kwargs)

            class Tracer:
                def start_span(self, *a: Any, **k: Any) -> Any:
                    raise RuntimeError("collector on fire")

                def __getattr__(self, name: str) -> Any:
                    return getattr(raise_on_start, name)

            return Tracer()

    log = EventLog()
    otel.instrument(log, tracer_provider=Broken())
    with caplog.at_level(logging.ERROR, logger="agentloop.otel"):
        calculator_run(log)
    assert type(log.events[-1]) is RunFinishedEvent and log.events[-1].status == "completed"
    assert "cannot record SessionStartEvent" in caplog.text
    assert "collector on fire" in caplog.text


def test_options_are_checked() -> None:
    with pytest.raises(TypeError, match="agent_name must be a non-empty str"):
        otel.SpanRecorder(agent_name="")
    with pytest.raises(TypeError, match="provider_name must be a non-empty str"):
        otel.SpanRecorder(provider_name=3)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="capture_content must be a bool"):
        otel.SpanRecorder(capture_content="yes")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="log must be an EventLog"):
        otel.instrument([])  # type: ignore[arg-type]


# --------------------------------------------------------------------------- run outcomes


def test_a_failed_model_call_is_an_error_on_chat_and_run() -> None:
    spans = Spans()
    log = EventLog()
    otel.instrument(log, tracer_provider=spans.provider)

    class Down:
        def stream(self, request: Any) -> Any:
            raise ConnectionError("no route to host")

    result = run([UserMessage("u", "hi")], model=Down(), tools=[], log=log, clock=lambda: 5.0)
    assert result.status == "failed"
    root, chat = spans.finished
    assert chat.status.status_code is StatusCode.ERROR
    assert chat.status.description == "ConnectionError: no route to host"
    assert attrs(chat)["error.type"] == "MODEL_ERROR"
    assert root.status.status_code is StatusCode.ERROR
    assert attrs(root)["error.type"] == "MODEL_ERROR"
    assert "no route to host" in (root.status.description or "")


def test_cache_and_reasoning_tokens_and_a_failed_call_s_usage() -> None:
    # The parts of the totals are set when the provider reported them (not 0); a
    # failed call's usage (billed before it failed) is on its chat span, and the
    # run's sums include it.
    spans = Spans()
    log = EventLog()
    otel.instrument(log, tracer_provider=spans.provider)
    usage = Usage(100, 40, cache_read_tokens=80, cache_write_tokens=20, reasoning_tokens=30)

    class Cached:
        calls = 0

        def stream(self, request: Any) -> Any:
            self.calls += 1
            if self.calls == 1:
                call = ToolCall("c1", "noop", {})
                yield ModelChunk(request.id, call)
                yield ModelResponse(request.id, "r1", (call,), "tool_call", usage)
            else:
                raise ModelError("overloaded", usage=Usage(10, 0, cache_read_tokens=8))

    @tool
    def noop() -> str:
        """Nothing."""
        return "ok"

    result = run([UserMessage("u", "hi")], model=Cached(), tools=[noop], log=log, clock=lambda: 5.0)
    assert result.status == "failed"
    root, first, _, second = spans.finished
    assert {k: v for k, v in attrs(first).items() if k.startswith("gen_ai.usage.")} == {
        "gen_ai.usage.input_tokens": 100,
        "gen_ai.usage.output_tokens": 40,
        "gen_ai.usage.cache_read.input_tokens": 80,
        "gen_ai.usage.cache_creation.input_tokens": 20,
        "gen_ai.usage.reasoning.output_tokens": 30,
    }
    assert {k: v for k, v in attrs(second).items() if k.startswith("gen_ai.usage.")} == {
        "gen_ai.usage.input_tokens": 10,
        "gen_ai.usage.output_tokens": 0,
        "gen_ai.usage.cache_read.input_tokens": 8,
    }
    assert attrs(second)["error.type"] == "MODEL_ERROR"
    assert {k: v for k, v in attrs(root).items() if k.startswith("gen_ai.usage.")} == {
        "gen_ai.usage.input_tokens": 110,
        "gen_ai.usage.output_tokens": 40,
        "gen_ai.usage.cache_read.input_tokens": 88,
        "gen_ai.usage.cache_creation.input_tokens": 20,
        "gen_ai.usage.reasoning.output_tokens": 30,
    }


def test_tool_errors_and_loop_made_errors() -> None:
    @tool
    def divide(a: int, b: int) -> float:
        """Divide."""
        return a / b

    for capture in (False, True):
        model = ScriptedModel(
            [
                ScriptedResponse.tool_calls(
                    "r1",
                    ToolCall("c1", "divide", {"a": 1, "b": 0}),
                    ToolCall("c2", "teleport", {}),
                ),
                ScriptedResponse.text("r2", "Cannot."),
            ]
        )
        spans = Spans()
        log = EventLog()
        otel.instrument(log, tracer_provider=spans.provider, capture_content=capture)
        run([UserMessage("u", "go")], model=model, tools=[divide], log=log, clock=lambda: 1.0)
        failed, unknown = [s for s in spans.children() if s.name.startswith("execute_tool")]
        assert failed.status.status_code is StatusCode.ERROR
        assert attrs(failed)["error.type"] == "tool_error"
        assert unknown.name == "execute_tool teleport"
        assert attrs(unknown)["error.type"] == "loop_error"
        assert attrs(unknown)["agentloop.tool.loop_made"] is True
        # The error text is content: only captured on request, never as a result.
        assert "gen_ai.tool.call.result" not in attrs(failed)
        if capture:
            assert failed.status.description == "ZeroDivisionError: division by zero"
        else:
            assert failed.status.description is None
        assert spans.root().status.status_code is StatusCode.UNSET


def test_a_run_without_steps_still_records_its_input() -> None:
    hooks = HookRegistry()
    hooks.on("before_step", lambda payload: SKIP)
    spans = Spans()
    log = EventLog()
    otel.instrument(log, tracer_provider=spans.provider, capture_content=True)
    calculator_run(log, hooks=hooks)
    (root,) = spans.finished
    assert attrs(root)["agentloop.run.reason"] == "skipped_by_hook"
    assert json.loads(attrs(root)["gen_ai.input.messages"])[0]["role"] == "user"
    assert "gen_ai.output.messages" not in attrs(root)


def test_pauses_resumes_and_budget_warnings_are_events() -> None:
    spans = Spans()
    log = EventLog()
    otel.instrument(log, tracer_provider=spans.provider, capture_content=True)
    answers = iter([Resume({"approved": True}, budget=Budget(max_turns=5))])
    calculator_run(log, budget=Budget(max_turns=1), on_pause=lambda pause: next(answers))
    root = spans.root()
    events = [(e.name, dict(e.attributes or {})) for e in root.events]
    assert [name for name, _ in events] == [
        "agentloop.budget.warn",
        "agentloop.session.pause",
        "agentloop.session.resume",
    ]
    (warn,) = [e for e in log.events if type(e) is BudgetWarnEvent]
    assert events[0][1] == {
        "agentloop.budget.limit": "turns",
        "agentloop.budget.turns": warn.usage.turns,
        "agentloop.budget.tool_calls": warn.usage.tool_calls,
        "agentloop.budget.wall_seconds": warn.usage.wall_seconds,
    }
    assert (warn.usage.turns, warn.usage.tool_calls) == (1, 1)
    assert events[1][1]["agentloop.pause.reason"] == "budget_exceeded:turns"
    assert events[2][1] == {
        "agentloop.resume.new_budget": True,
        "agentloop.resume.payload": '{"approved":true}',
    }
    kinds = (BudgetWarnEvent, SessionPauseEvent, SessionResumeEvent)
    expected = [ns(e) for e in log.events if type(e) in kinds]
    assert [e.timestamp for e in root.events] == expected


def test_approval_payloads_are_content() -> None:
    @tool(requires_approval=True)
    def delete(path: str) -> str:
        """Delete a file."""
        return "deleted"

    model = ScriptedModel(
        [
            ScriptedResponse.tool_calls("r1", ToolCall("c1", "delete", {"path": "/tmp/x"})),
            ScriptedResponse.text("r2", "Done."),
        ]
    )
    spans = Spans()
    log = EventLog()
    otel.instrument(log, tracer_provider=spans.provider)
    run(
        [UserMessage("u", "clean up")],
        model=model,
        tools=[delete],
        log=log,
        on_pause=lambda pause: Resume({"approved": True}),
        clock=lambda: 1.0,
    )
    pause, resume = spans.root().events
    assert dict(pause.attributes or {}) == {"agentloop.pause.reason": "approval"}
    assert dict(resume.attributes or {}) == {}


def test_a_cancel_marks_the_interrupted_span() -> None:
    spans = Spans()
    log = EventLog()
    otel.instrument(log, tracer_provider=spans.provider)
    loop = agent_loop([UserMessage("u", "go")], tools=[add.spec], log=log, started_at=1.0)
    request = next(loop)
    loop.send(
        ModelResponse(
            request.id, "r1", (ToolCall("c1", "add", {"a": 1, "b": 2}),), "tool_call", at=2.0
        )
    )
    with pytest.raises(StopIteration):
        loop.send(Cancel("user pressed stop", at=3.0))
    root, _, tool_span = spans.finished
    for span in (root, tool_span):
        (cancel,) = span.events
        assert cancel.name == "agentloop.cancel"
        assert dict(cancel.attributes or {}) == {"agentloop.cancel.reason": "user pressed stop"}
        assert span.status.status_code is StatusCode.UNSET
        assert span.end_time == 3 * 10**9
    assert attrs(root)["agentloop.run.status"] == "cancelled"


def test_hook_failures_end_open_spans_in_error() -> None:
    hooks = HookRegistry()

    def explode(payload: dict[str, Any]) -> None:
        raise RuntimeError("hook broke")

    hooks.on("after_tool_call", explode)
    spans = Spans()
    log = EventLog()
    otel.instrument(log, tracer_provider=spans.provider)
    calculator_run(log, hooks=hooks)
    tool_span = next(s for s in spans.children() if s.name == "execute_tool add")
    assert tool_span.status.status_code is StatusCode.ERROR
    assert attrs(tool_span)["error.type"] == "HOOK_ERROR"
    assert attrs(spans.root())["error.type"] == "HOOK_ERROR"


# --------------------------------------------------------------------------- fixtures

# fixture -> (root status, root error.type, the children: (name, error.type or None))
EXPECTED: dict[str, tuple[str, str | None, list[tuple[str, str | None]]]] = {
    "approval": (
        "completed",
        None,
        [
            ("chat", None),
            ("execute_tool delete_file", None),
            ("execute_tool delete_file", "loop_error"),
            ("chat", None),
        ],
    ),
    "budget_pause_resume": (
        "completed",
        None,
        [("chat", None), ("execute_tool add", None), ("chat", None)],
    ),
    "caller_misuse": (
        "failed",
        "CALLER_PROTOCOL_ERROR",
        [("chat", None), ("execute_tool add", "CALLER_PROTOCOL_ERROR")],
    ),
    "cancel_mid_tool": ("cancelled", None, [("chat", None), ("execute_tool weather", None)]),
    "compacted_session": (
        "completed",
        None,
        [
            *[("chat", None), ("execute_tool weather", None)] * 4,
            ("chat", None),  # the summary (agentloop.request.purpose: compaction)
            ("chat", None),
            ("execute_tool weather", None),
            ("chat", None),
        ],
    ),
    "handoff_session": (
        "completed",
        None,
        [
            ("chat", None),
            ("execute_tool transfer_to_billing", None),
            ("chat", None),
            ("execute_tool refund", None),
            ("chat", None),
            ("execute_tool transfer_to_triage", None),
            ("chat", None),
        ],
    ),
    "invalid_transcript": ("failed", "INVALID_TRANSCRIPT", []),
    "media_session": (
        "completed",
        None,
        [("chat", None), ("execute_tool chart", None), ("chat", None)],
    ),
    "max_steps": (
        "max_steps",
        None,
        [
            ("chat", None),
            ("execute_tool weather", None),
            ("chat", None),
            ("execute_tool weather", None),
        ],
    ),
    "model_failure": ("failed", "MODEL_ERROR", [("chat", "MODEL_ERROR")]),
    "non_finite_arguments": ("failed", "MODEL_PROTOCOL_ERROR", [("chat", "MODEL_PROTOCOL_ERROR")]),
    "plain_answer": ("completed", None, [("chat", None)]),
    "protocol_failure": ("failed", "MODEL_PROTOCOL_ERROR", [("chat", "MODEL_PROTOCOL_ERROR")]),
    "tool_calls": (
        "completed",
        None,
        [
            ("chat", None),
            ("execute_tool add", None),
            ("execute_tool weather", None),
            ("chat", None),
        ],
    ),
    "tool_error": (
        "completed",
        None,
        [
            ("chat", None),
            ("execute_tool divide", "tool_error"),
            ("execute_tool teleport", "loop_error"),
            ("chat", None),
        ],
    ),
    "waiting_on_approval": ("unfinished", None, [("chat", None)]),
    "waiting_on_tool": ("unfinished", None, [("chat", None), ("execute_tool add", None)]),
}


def test_every_fixture_has_an_expectation() -> None:
    assert sorted(EXPECTED) == [path.stem for path in FIXTURES]


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: p.stem)
@pytest.mark.parametrize("capture", [False, True], ids=["no-content", "content"])
def test_fixture_span_trees(path: Path, capture: bool) -> None:
    events = read_log(path)
    spans = recorded(events, capture_content=capture)
    status, error_type, children = EXPECTED[path.stem]
    root = spans.root()
    assert root.name == "invoke_agent"
    assert root.kind is SpanKind.INTERNAL
    assert attrs(root)["gen_ai.operation.name"] == "invoke_agent"
    if status == "unfinished":
        assert attrs(root)["agentloop.incomplete"] is True
    else:
        assert attrs(root)["agentloop.run.status"] == status
    assert attrs(root).get("error.type") == error_type
    assert (root.status.status_code is StatusCode.ERROR) == (error_type is not None)
    got = [(s.name, attrs(s).get("error.type")) for s in spans.children()]
    assert got == children
    for span in spans.children():
        assert span.parent.span_id == root.context.span_id
        assert span.context.trace_id == root.context.trace_id
        # A child lies inside its run, in time.
        start, end = window(span)
        assert window(root)[0] <= start <= end <= window(root)[1]
        assert (span.status.status_code is StatusCode.ERROR) == (
            attrs(span).get("error.type") is not None
        )
        expected_kind = SpanKind.CLIENT if span.name == "chat" else SpanKind.INTERNAL
        assert span.kind is expected_kind
    # Times are the events' `at` (those that have one).
    times = {ns(e) for e in events if e.at is not None}
    for span in spans.finished:
        if times:
            assert span.start_time in times and span.end_time in times
    keys = set().union(*(attrs(s) for s in spans.finished))
    if capture:
        if children:
            assert "gen_ai.input.messages" in keys
    else:
        assert not CONTENT_KEYS & keys
        for span in spans.finished:
            for event in span.events:
                assert not any(k.endswith(".payload") for k in event.attributes or {})


def test_the_cancelled_fixture_marks_the_tool_that_was_running() -> None:
    spans = recorded(read_log(ROOT / "fixtures" / "cancel_mid_tool.jsonl"))
    tool_span = spans.children()[-1]
    assert [e.name for e in tool_span.events] == ["agentloop.cancel"]


def test_unfinished_logs_end_at_their_last_time() -> None:
    events = read_log(ROOT / "fixtures" / "waiting_on_tool.jsonl")
    spans = recorded(events)
    last = ns(events[-1])
    assert all(s.end_time == last for s in spans.finished)
    assert attrs(spans.children()[-1])["agentloop.incomplete"] is True


# --------------------------------------------------------------------------- time rules


def _unclocked_run() -> list[Event]:
    """A run driven by hand, without any `at`."""
    log = EventLog()
    loop = agent_loop([UserMessage("u", "hi")], tools=[], log=log)
    request = next(loop)
    loop.send(ModelChunk(request.id, TextBlock("hello")))
    with pytest.raises(StopIteration):
        loop.send(ModelResponse(request.id, "r1", (TextBlock("hello"),), "stop"))
    return list(log.events)


def test_a_log_without_times_is_placed_by_sequence() -> None:
    events = _unclocked_run()
    assert all(e.at is None for e in events)
    spans = recorded(events)
    root, chat = spans.finished
    ms = 1_000_000
    (step,) = [e.sequence for e in events if type(e) is StepStartEvent]
    (commit,) = [e.sequence for e in events if type(e) is PlanCommitEvent]
    assert (root.start_time, root.end_time) == (0, events[-1].sequence * ms)
    assert (chat.start_time, chat.end_time) == (step * ms, commit * ms)


def test_live_without_times_uses_the_sdk_clock() -> None:
    import time

    spans = Spans()
    recorder = otel.SpanRecorder(tracer_provider=spans.provider)
    before = time.time_ns()
    for event in _unclocked_run():
        recorder(event)
    after = time.time_ns()
    for span in spans.finished:
        start, end = window(span)
        assert before <= start <= end <= after
    # No time to first chunk without times.
    assert "gen_ai.response.time_to_first_chunk" not in attrs(spans.children()[0])


def test_events_without_times_take_the_first_or_the_last_time() -> None:
    events = read_log(ROOT / "fixtures" / "tool_calls.jsonl")
    commit = next(i for i, e in enumerate(events) if type(e) is PlanCommitEvent)
    events[0] = msgspec.structs.replace(events[0], at=None)
    events[commit] = msgspec.structs.replace(events[commit], at=None)
    spans = recorded(events)
    assert spans.root().start_time == ns(events[1])  # the first time in the log
    chat = spans.children()[0]
    assert chat.end_time == ns(events[commit - 1])  # the last time before it


def test_a_clock_that_goes_back_never_ends_a_span_before_it_starts() -> None:
    spans = Spans()
    log = EventLog()
    otel.instrument(log, tracer_provider=spans.provider)
    loop = agent_loop([UserMessage("u", "hi")], tools=[], log=log, started_at=10.0)
    request = next(loop)
    with pytest.raises(StopIteration):
        loop.send(ModelResponse(request.id, "r1", (TextBlock("hello"),), "stop", at=4.0))
    for span in spans.finished:
        assert span.end_time == span.start_time == 10 * 10**9


# --------------------------------------------------------------------------- odd event streams


def test_a_recorder_attached_mid_run_starts_the_run_at_the_first_event_it_sees() -> None:
    log = EventLog()
    calculator_run(log)
    first = next(e.sequence for e in log.events if type(e) is ToolResultEvent)
    late = log.events[first:]  # from the add call's result on
    spans = recorded(late, conversation_id="conv-9")
    assert [s.name for s in spans.finished] == ["invoke_agent", "execute_tool add", "chat"]
    assert all(attrs(s)["gen_ai.conversation.id"] == "conv-9" for s in spans.finished)
    tool_span = spans.finished[1]
    assert attrs(tool_span)["gen_ai.tool.type"] == "function"
    assert tool_span.start_time == tool_span.end_time
    assert attrs(spans.root())["agentloop.run.status"] == "completed"


def test_a_second_session_ends_the_first_one_as_incomplete() -> None:
    first = [e for e in read_log(ROOT / "fixtures" / "waiting_on_tool.jsonl")]
    second = read_log(ROOT / "fixtures" / "plain_answer.jsonl")
    spans = Spans()
    recorder = otel.SpanRecorder(tracer_provider=spans.provider)
    for event in [*first, *second]:
        recorder(event)
    roots = [s for s in spans.finished if s.parent is None]
    assert len(roots) == 2
    assert attrs(roots[0])["agentloop.incomplete"] is True
    assert roots[0].end_time == ns(first[-1])
    assert attrs(roots[1])["agentloop.run.status"] == "completed"
    recorder.finish()  # nothing open: nothing happens
    assert len(spans.finished) == 5


def test_events_out_of_place_are_tolerated() -> None:
    start = SessionStartEvent(sequence=0, at=1.0, max_steps=8)
    user = MessageAcceptedEvent(sequence=1, at=1.0, message=UserMessage("u", "hi"))
    step1 = StepStartEvent(sequence=2, at=1.0, step=1, request_id="request-001")
    step2 = StepStartEvent(sequence=3, at=2.0, step=2, request_id="request-002")
    call = ToolCallEvent(sequence=4, at=3.0, step=2, call=ToolCall("c1", "x", {}))
    again = ToolCallEvent(sequence=5, at=4.0, step=2, call=ToolCall("c1", "x", {}))
    draft = PlanDraftEvent(
        sequence=6, at=5.0, step=2, reply=ModelFailure("request-002", "down", at=5.0)
    )
    late_draft = PlanDraftEvent(
        sequence=7, at=6.0, step=2, reply=ModelFailure("request-002", "down", at=6.0)
    )
    chunk = ModelChunkEvent(
        sequence=8, at=6.0, step=2, chunk=ModelChunk("request-002", TextBlock("x"), at=6.0)
    )
    commit = PlanCommitEvent(sequence=9, at=7.0, step=2, message=AssistantMessage("a", ()))
    other = ToolCallEvent(sequence=10, at=8.0, step=2, call=ToolCall("c2", "y", {}))
    done = RunFinishedEvent(sequence=11, at=9.0, step=2, status="completed")
    spans = recorded(
        [start, user, step1, step2, call, again, draft, late_draft, chunk, commit, other, done],
        capture_content=True,
    )
    names = [s.name for s in spans.finished]
    # step 1 never answered: its chat span ends when step 2 starts; a repeated call id
    # ends the first span; drafts, chunks and commits with no chat open are ignored; a
    # span still open when the run completes just ends.
    assert names == [
        "invoke_agent",
        "chat",
        "chat",
        "execute_tool x",
        "execute_tool x",
        "execute_tool y",
    ]
    assert spans.finished[1].end_time == 2 * 10**9
    last = spans.finished[-1]
    assert (last.end_time, last.status.status_code, list(last.events)) == (
        9 * 10**9,
        StatusCode.UNSET,
        [],
    )


def test_unknown_blocks_become_generic_parts() -> None:
    class Image(msgspec.Struct, frozen=True, tag_field="type", tag="image"):
        url: str

    message = AssistantMessage("a", (TextBlock("look"), ThinkingBlock("hmm"), Image("x.png")))  # type: ignore[arg-type]
    assert otel._message(message) == {
        "role": "assistant",
        "parts": [
            {"type": "text", "content": "look"},
            {"type": "reasoning", "content": "hmm"},
            {"type": "image", "url": "x.png"},
        ],
    }
    result = ToolResultMessage("t", "c1", "add", "3")
    assert otel._message(result)["role"] == "tool"


# --------------------------------------------------------------------------- media


PNG = b"\x89PNG\r\n\x1a\n" + bytes(40)
PNG_ID = "sha256:" + hashlib.sha256(PNG).hexdigest()


def test_media_parts_follow_the_conventions_without_their_bytes() -> None:
    """Inline bytes are a ``file`` part by SHA-256 and size, a URL a ``uri`` part;
    text parts stay text, in order, in user messages, tool results and assistant
    messages alike."""
    user = UserMessage(
        "u",
        (
            TextBlock("see"),
            ImageBlock("image/png", data=PNG, name="chart.png"),
            AudioBlock("audio/wav", url="https://example.com/a.wav"),
            DocumentBlock("application/pdf", url="DATA:application/pdf;base64,JVBERg=="),
        ),
    )
    data_url = b"DATA:application/pdf;base64,JVBERg=="
    assert otel._message(user) == {
        "role": "user",
        "parts": [
            {"type": "text", "content": "see"},
            {
                "type": "file",
                "modality": "image",
                "mime_type": "image/png",
                "file_id": PNG_ID,
                "size": len(PNG),
                "name": "chart.png",
            },
            {
                "type": "uri",
                "modality": "audio",
                "mime_type": "audio/wav",
                "uri": "https://example.com/a.wav",
            },
            {
                "type": "file",
                "modality": "document",
                "mime_type": "application/pdf",
                "file_id": "sha256:" + hashlib.sha256(data_url).hexdigest(),
                "size": len(data_url),
            },
        ],
    }
    result = ToolResultMessage("t", "c1", "chart", (ImageBlock("image/png", data=PNG),))
    assert otel._message(result)["parts"] == [
        {
            "type": "tool_call_response",
            "id": "c1",
            "response": [
                {
                    "type": "file",
                    "modality": "image",
                    "mime_type": "image/png",
                    "file_id": PNG_ID,
                    "size": len(PNG),
                }
            ],
        }
    ]
    made = AssistantMessage("a", (ImageBlock("image/png", data=PNG),))
    assert otel._message(made)["parts"][0]["file_id"] == PNG_ID


@given(
    st.binary(min_size=12, max_size=64), st.sampled_from([ImageBlock, AudioBlock, DocumentBlock])
)
def test_no_media_bytes_reach_a_span_attribute(data: bytes, cls: Any) -> None:
    block = cls("application/octet-stream", data=data)
    text = "".join(
        otel._json(otel._message(message))
        for message in (
            UserMessage("u", (block,)),
            ToolResultMessage("t", "c", "x", (TextBlock("r"), block)),
        )
    )
    assert base64.b64encode(data).decode() not in text
    assert hashlib.sha256(data).hexdigest() in text


# --------------------------------------------------------------------------- OTLP/JSON


def _request(text: str) -> ExportTraceServiceRequest:
    """Parse OTLP/JSON back into the protobuf message (hex ids -> protobuf bytes)."""
    data = json.loads(text)
    for resource in data["resourceSpans"]:
        for scope in resource["scopeSpans"]:
            for span in scope["spans"]:
                for key in ("traceId", "spanId", "parentSpanId"):
                    if key in span:
                        span[key] = base64.b64encode(bytes.fromhex(span[key])).decode()
    request = ExportTraceServiceRequest()
    ParseDict(data, request)
    return request


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: p.stem)
def test_otlp_json_is_deterministic_and_valid(path: Path) -> None:
    events = read_log(path)
    text = otel.otlp_json(events)
    assert text == otel.otlp_json(read_log(path))
    assert "\n" not in text
    request = _request(text)
    (resource_spans,) = request.resource_spans
    assert [(a.key, a.value.string_value) for a in resource_spans.resource.attributes] == [
        ("service.name", "agentloop")
    ]
    (scope_spans,) = resource_spans.scope_spans
    assert scope_spans.scope.name == "agentloop"
    spans = list(scope_spans.spans)
    assert len(spans) == 1 + len(EXPECTED[path.stem][2])
    assert len({s.trace_id for s in spans}) == 1
    assert len({s.span_id for s in spans}) == len(spans)
    (root,) = [s for s in spans if not s.parent_span_id]
    assert all(s.parent_span_id == root.span_id for s in spans if s is not root)
    # The same spans as recording into an SDK provider, ids aside.
    sdk = recorded(events).finished
    assert sorted((s.name, s.start_time_unix_nano, s.end_time_unix_nano) for s in spans) == sorted(
        (s.name, s.start_time, s.end_time) for s in sdk
    )


def test_otlp_json_uses_hex_ids_and_integer_enums() -> None:
    data = json.loads(otel.otlp_json(read_log(ROOT / "fixtures" / "model_failure.jsonl")))
    spans = data["resourceSpans"][0]["scopeSpans"][0]["spans"]
    for span in spans:
        assert len(span["traceId"]) == 32 and int(span["traceId"], 16)
        assert len(span["spanId"]) == 16 and int(span["spanId"], 16)
    chat = next(s for s in spans if s["name"] == "chat")
    assert chat["kind"] == 3  # SPAN_KIND_CLIENT
    assert chat["status"] == {"code": 2, "message": "HTTP 529: overloaded"}  # STATUS_CODE_ERROR
    assert chat["startTimeUnixNano"] == "1000000000000"


def test_different_logs_get_different_trace_ids() -> None:
    def trace_id(path: Path) -> str:
        data = json.loads(otel.otlp_json(read_log(path)))
        return str(data["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["traceId"])

    # The seed is the session's start: its configuration, start time and messages.
    assert len({trace_id(path) for path in FIXTURES}) == len(FIXTURES)


def test_otlp_json_options() -> None:
    text = otel.otlp_json(
        read_log(ROOT / "fixtures" / "plain_answer.jsonl"),
        service_name="support-bot",
        agent_name="support",
        provider_name="anthropic",
        request_model="claude-test",
        capture_content=True,
    )
    request = _request(text)
    resource = request.resource_spans[0]
    assert resource.resource.attributes[0].value.string_value == "support-bot"
    names = sorted(s.name for s in resource.scope_spans[0].spans)
    assert names == ["chat claude-test", "invoke_agent support"]
    assert "gen_ai.input.messages" in text


def test_otlp_json_of_no_events() -> None:
    assert json.loads(otel.otlp_json([])) == {}


# --------------------------------------------------------------------------- CLI


def cli(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "replay", *map(str, args)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )


def test_cli_writes_otlp_json_to_stdout_or_a_file(tmp_path: Path) -> None:
    log = ROOT / "fixtures" / "tool_calls.jsonl"
    done = cli("otel", log)
    assert done.returncode == 0, done.stderr
    assert done.stdout == otel.otlp_json(read_log(log)) + "\n"
    out = tmp_path / "spans.json"
    done = cli("otel", log, "-o", out, "--capture-content", "--agent-name", "calc")
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")
    written = out.read_text(encoding="utf-8")
    assert written == otel.otlp_json(read_log(log), capture_content=True, agent_name="calc") + "\n"
    names = {s.name for s in _request(written).resource_spans[0].scope_spans[0].spans}
    assert "invoke_agent calc" in names


def test_cli_options_name_the_model_and_service() -> None:
    done = cli(
        "otel",
        ROOT / "fixtures" / "plain_answer.jsonl",
        "--provider",
        "openai",
        "--model",
        "gpt-test",
        "--conversation-id",
        "c-1",
        "--service-name",
        "bot",
    )
    assert done.returncode == 0, done.stderr
    request = _request(done.stdout)
    spans = request.resource_spans[0].scope_spans[0].spans
    assert sorted(s.name for s in spans) == ["chat gpt-test", "invoke_agent"]
    assert request.resource_spans[0].resource.attributes[0].value.string_value == "bot"
    assert '"gen_ai.conversation.id"' in done.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["otel", "missing.jsonl"], "missing.jsonl: cannot read"),
        (["otel", "fixtures/plain_answer.jsonl", "-o", "no/such/dir/x.json"], "cannot write"),
        (["otel", "fixtures/plain_answer.jsonl", "--agent-name", " "], "must not be empty"),
    ],
)
def test_cli_errors_are_one_line(args: list[str], message: str) -> None:
    done = cli(*args)
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("replay: error: ")
    assert message in done.stderr


def test_cli_without_the_extra_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from replay.__main__ import main

    monkeypatch.delitem(sys.modules, "agentloop.otel")
    monkeypatch.setitem(sys.modules, "opentelemetry", None)
    assert main(["otel", str(ROOT / "fixtures" / "plain_answer.jsonl")]) == 2
    err = capsys.readouterr().err
    assert (
        err == "replay: error: agentloop.otel needs OpenTelemetry: "
        "pip install 'agentloop-replay[otel]'\n"
    )


# --------------------------------------------------------------------------- metrics


def histograms(reader: Any) -> dict[str, list[Any]]:
    """Each metric's histogram data points, by metric name."""
    data = reader.get_metrics_data()
    out: dict[str, list[Any]] = {}
    for resource in data.resource_metrics if data is not None else ():
        for scope in resource.scope_metrics:
            assert scope.scope.name == "agentloop"
            for metric in scope.metrics:
                out[metric.name] = list(metric.data.data_points)
    return out


def test_genai_client_metrics_live_and_from_a_log() -> None:
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    live = InMemoryMetricReader()
    log = EventLog()
    otel.instrument(
        log,
        tracer_provider=Spans().provider,
        meter_provider=MeterProvider(metric_readers=[live]),
        provider_name="openai",
        request_model="gpt-test",
    )
    calculator_run(log)  # two model calls: 50+10 tokens in 1.0 s, 70+6 in 2.0 s
    offline = InMemoryMetricReader()
    otel.record_log(
        log.events,
        tracer_provider=Spans().provider,
        meter_provider=MeterProvider(metric_readers=[offline]),
        provider_name="openai",
        request_model="gpt-test",
    )
    common = {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "openai",
        "gen_ai.request.model": "gpt-test",
    }
    for reader in (live, offline):
        points = histograms(reader)
        assert set(points) == {"gen_ai.client.token.usage", "gen_ai.client.operation.duration"}
        tokens = {p.attributes["gen_ai.token.type"]: p for p in points["gen_ai.client.token.usage"]}
        assert {kind: (p.count, p.sum) for kind, p in tokens.items()} == {
            "input": (2, 120),
            "output": (2, 16),
        }
        assert dict(tokens["input"].attributes) == {**common, "gen_ai.token.type": "input"}
        assert tokens["input"].explicit_bounds[:3] == (1.0, 4.0, 16.0)  # the advised buckets
        (duration,) = points["gen_ai.client.operation.duration"]
        assert (duration.count, duration.sum) == (2, 3.0)
        assert dict(duration.attributes) == common
        assert duration.explicit_bounds[:2] == (0.01, 0.02)


def test_a_failed_call_is_measured_with_its_error_type() -> None:
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    reader = InMemoryMetricReader()
    otel.record_log(
        read_log(ROOT / "fixtures" / "model_failure.jsonl"),
        tracer_provider=Spans().provider,
        meter_provider=MeterProvider(metric_readers=[reader]),
    )
    (duration,) = histograms(reader)["gen_ai.client.operation.duration"]
    assert duration.attributes["error.type"] == "MODEL_ERROR"
    assert duration.count == 1
    # A log without times has no durations to measure, and otlp_json records no metrics.
    reader = InMemoryMetricReader()
    otel.record_log(
        _unclocked_run(),
        tracer_provider=Spans().provider,
        meter_provider=MeterProvider(metric_readers=[reader]),
    )
    assert "gen_ai.client.operation.duration" not in histograms(reader)


# --------------------------------------------------------------------------- OTLP/HTTP


class Collector:
    """An OTLP/HTTP receiver on 127.0.0.1: keeps each request's path, headers and body."""

    def __init__(self, status: int = 200) -> None:
        import http.server
        import threading

        self.requests: list[tuple[str, dict[str, str], bytes]] = []
        collector = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                collector.requests.append((self.path, dict(self.headers), body))
                self.send_response(status)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join()


@pytest.fixture
def collector() -> Any:
    server = Collector()
    yield server
    server.close()


def test_cli_sends_the_spans_to_an_otlp_http_endpoint(
    collector: Collector, capsys: pytest.CaptureFixture[str]
) -> None:
    from replay.__main__ import main

    log = ROOT / "fixtures" / "tool_calls.jsonl"
    assert main(["otel", str(log), "--endpoint", collector.url, "--agent-name", "calc"]) == 0
    out = capsys.readouterr()
    assert out.out == f"sent 5 spans to {collector.url}\n"
    ((path, headers, body),) = collector.requests
    assert path == "/v1/traces"
    assert {k.lower(): v for k, v in headers.items()}["content-type"] == "application/x-protobuf"
    received = ExportTraceServiceRequest()
    received.ParseFromString(body)
    # What was sent is what otlp_json writes: the same spans, ids and all.
    assert received == _request(otel.otlp_json(read_log(log), agent_name="calc"))
    names = {s.name for s in received.resource_spans[0].scope_spans[0].spans}
    assert "invoke_agent calc" in names

    # A full traces URL is used as it is.
    assert otel.send_otlp(read_log(log), collector.url + "/custom/traces") == 5
    assert collector.requests[-1][0] == "/custom/traces"


def test_an_endpoint_that_refuses_is_a_one_line_error(capsys: pytest.CaptureFixture[str]) -> None:
    from replay.__main__ import main

    refusing = Collector(status=400)
    try:
        log = str(ROOT / "fixtures" / "plain_answer.jsonl")
        assert main(["otel", log, "--endpoint", refusing.url + "/"]) == 2
    finally:
        refusing.close()
    err = capsys.readouterr().err.splitlines()[-1]
    assert err == (
        f"replay: error: {refusing.url}/v1/traces: the spans were not accepted (see the log above)"
    )
    assert main(["otel", log, "--endpoint", refusing.url, "-o", "x.json"]) == 2
    assert "not allowed with argument" in capsys.readouterr().err


def test_without_the_exporter_the_cli_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from replay.__main__ import main

    exporter = "opentelemetry.exporter.otlp.proto.http.trace_exporter"
    monkeypatch.setitem(sys.modules, exporter, None)
    log = str(ROOT / "fixtures" / "plain_answer.jsonl")
    assert main(["otel", log, "--endpoint", "http://127.0.0.1:9"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("replay: error: ") and "pip install 'agentloop-replay[otel]'" in err


def test_a_handoff_is_a_span_event_and_names_the_agent_of_each_chat() -> None:
    events = read_log(ROOT / "fixtures" / "handoff_session.jsonl")
    finished = recorded(events, capture_content=True).finished
    (root,) = [s for s in finished if s.parent is None]
    moves = [dict(e.attributes) for e in root.events if e.name == "agentloop.agent.handoff"]
    assert moves == [
        {
            "agentloop.handoff.from": "triage",
            "agentloop.handoff.to": "billing",
            "agentloop.handoff.call_id": "call-1",
            "agentloop.handoff.kept": 1,
        },
        {
            "agentloop.handoff.from": "billing",
            "agentloop.handoff.to": "triage",
            "agentloop.handoff.call_id": "call-3",
        },
    ]
    chats = sorted((s for s in finished if s.name == "chat"), key=lambda s: s.start_time or 0)
    assert [s.attributes["gen_ai.agent.name"] for s in chats] == [
        "triage",
        "billing",
        "billing",
        "triage",
    ]
    systems = [json.loads(s.attributes["gen_ai.system_instructions"])[0]["content"] for s in chats]
    assert systems[1] == "You are billing." and systems[3].startswith("You are triage")
    (refund,) = [s for s in finished if s.name == "execute_tool refund"]
    assert refund.attributes["gen_ai.tool.description"] == "Refund an order."
