"""OTel content on a compacted run (DESIGN §27): each ``chat`` span's
``gen_ai.input.messages`` is what its request sent -- the model's view (the summary,
then the messages kept, older tool results trimmed), not the full transcript."""

from __future__ import annotations

import json
from typing import Any

import pytest

pytest.importorskip("opentelemetry.sdk")

from agentloop import (
    EventLog,
    Limits,
    ModelRequest,
    SummarizeOlder,
    Trim,
    TrimToolResults,
    UserMessage,
    otel,
    run,
)
from agentloop.otel import _json, _message

from .test_context import Custom, KeepLast, fetch, reading_model
from .test_otel import Spans, attrs


def _sent(request: ModelRequest) -> Any:
    return json.loads(_json([_message(m) for m in request.messages]))


def _inputs(spans: Spans) -> dict[str, Any]:
    """Each chat span's input messages, by its request id."""
    return {
        attrs(span)["agentloop.request.id"]: json.loads(attrs(span)["gen_ai.input.messages"])
        for span in spans.exporter.get_finished_spans()
        if span.name.startswith("chat")
    }


def _compacted_run(policy: Any) -> tuple[Any, Any, Spans]:
    spans, log = Spans(), EventLog()
    otel.instrument(log, tracer_provider=spans.provider, capture_content=True)
    model = reading_model(30)
    run(
        [UserMessage("u1", "read")],
        model=model,
        tools=[fetch],
        max_steps=30,
        limits=Limits(agent_steps=64, context_tokens=5000),
        compaction=policy,
        log=log,
        clock=lambda: 0.0,
    )
    return model, log, spans


@pytest.mark.parametrize(
    "policy",
    [SummarizeOlder(at=0.6, keep=0.2), TrimToolResults(keep_last=1, head=40, tail=10, at=0.3)],
    ids=["summarize", "trim"],
)
def test_each_chat_span_holds_what_its_request_sent(policy: Any) -> None:
    model, log, spans = _compacted_run(policy)
    assert any(e.type == "context.compacted" for e in log)
    inputs = _inputs(spans)
    assert sorted(inputs) == sorted(r.id for r in model.requests)
    for request in model.requests:
        assert inputs[request.id] == _sent(request), request.id
    # the run's span keeps the input the run started with; a replayed log gives
    # the same spans
    offline = Spans()
    otel.record_log(list(log), tracer_provider=offline.provider, capture_content=True)
    assert _inputs(offline) == inputs
    assert json.loads(attrs(offline.root())["gen_ai.input.messages"]) == [
        {"role": "user", "parts": [{"type": "text", "content": "read"}]}
    ]


def test_a_custom_policy_s_summary_span_holds_the_messages_summarised() -> None:
    # Its instructions are not recorded (the policy chose them): the span holds the
    # messages it summarised; every step's span holds exactly what was sent.
    model, _, spans = _compacted_run(KeepLast())
    inputs = _inputs(spans)
    summaries = [r for r in model.requests if r.purpose == "compaction"]
    assert summaries
    for request in model.requests:
        if request.purpose == "compaction":
            assert request.messages[-1].content == "Sum up."
            assert inputs[request.id] == _sent(request)[:-1]
        else:
            assert inputs[request.id] == _sent(request)


def test_a_custom_policy_s_trim_is_not_known_and_results_show_whole() -> None:
    # Its head and tail are not recorded: the spans show the tool results whole.
    model, log, spans = _compacted_run(Custom(lambda s: Trim(s.start + 3, 10, 10)))
    trims = [e for e in log if e.type == "context.compacted"]
    assert trims and all(e.how == "trim" for e in trims)
    last = model.requests[-1]
    shown = _inputs(spans)[last.id]
    assert shown != _sent(last)
    assert len(json.dumps(shown)) > len(json.dumps(_sent(last)))


@pytest.mark.parametrize(
    "policy", [SummarizeOlder(at=0.6, keep=0.2), TrimToolResults(keep_last=1, head=40, tail=10)]
)
def test_a_compaction_without_an_open_chat_span_is_tolerated(
    policy: Any, caplog: pytest.LogCaptureFixture
) -> None:
    _, log, _ = _compacted_run(policy)
    events = [e for e in log if e.type != "step.start"]  # no chat span is ever open
    assert any(e.type == "context.compacted" for e in events)
    offline = Spans()
    otel.record_log(events, tracer_provider=offline.provider, capture_content=True)
    assert "cannot record" not in caplog.text
    assert not [s for s in offline.exporter.get_finished_spans() if s.name.startswith("chat")]
