"""OpenTelemetry spans of a live run, printed from the SDK's in-memory exporter.

``agentloop.otel.instrument(log, ...)`` subscribes a ``SpanRecorder`` to the run's
event log; ``run(..., log=log)`` then produces one trace: ``invoke_agent`` for the
run, a ``chat`` span per model request and an ``execute_tool`` span per tool call,
timed by the run's clock (here a fake one, so the output never changes). In an
application, add a ``BatchSpanProcessor`` with an OTLP exporter instead of the
in-memory one. Run it: ``python docs/examples/otel_spans.py``.
"""

from __future__ import annotations

import itertools

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from agentloop import (
    EventLog,
    ScriptedModel,
    ScriptedResponse,
    ToolCall,
    Usage,
    UserMessage,
    run,
    tool,
)
from agentloop.otel import instrument


@tool
def get_weather(city: str) -> dict[str, object]:
    """Current weather for a city."""
    return {"city": city, "temp_c": -3, "sky": "snow"}


model = ScriptedModel(
    [
        ScriptedResponse.tool_calls(
            "resp-1", ToolCall("call-1", "get_weather", {"city": "Oslo"}), usage=Usage(120, 18)
        ),
        ScriptedResponse.text("resp-2", "Snow and -3 °C in Oslo.", usage=Usage(160, 11)),
    ]
)

exporter = InMemorySpanExporter()
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(exporter))

log = EventLog()
instrument(
    log,
    tracer_provider=provider,
    agent_name="weather",
    provider_name="openai",
    request_model="gpt-4.1-mini",
)
ticks = itertools.count()
result = run(
    [UserMessage("user-1", "Weather in Oslo?")],
    model=model,
    tools=[get_weather],
    log=log,
    clock=lambda: 1_700_000_000.0 + 0.25 * next(ticks),
)

spans = sorted(exporter.get_finished_spans(), key=lambda s: (s.start_time, s.parent is not None))
for span in spans:
    attributes = dict(span.attributes or {})
    details = [f"{(span.end_time - span.start_time) / 1e6:>5.0f} ms"]
    if "gen_ai.response.finish_reasons" in attributes:
        details.append(f"finish={attributes['gen_ai.response.finish_reasons'][0]}")
    if "gen_ai.usage.input_tokens" in attributes:
        details.append(
            f"tokens={attributes['gen_ai.usage.input_tokens']}"
            f"+{attributes['gen_ai.usage.output_tokens']}"
        )
    if "gen_ai.tool.call.id" in attributes:
        details.append(f"call={attributes['gen_ai.tool.call.id']}")
    indent = "  " if span.parent is not None else ""
    print(f"{indent}{span.name:<{28 - len(indent)}} {'  '.join(details)}")
print(result.final_text)
