"""The log subscribers work under ``arun``: the live OpenTelemetry recorder, the
``agentloop`` logger, and MCP tools through their async path."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from agentloop import (
    EventLog,
    ScriptedModel,
    ScriptedResponse,
    ToolCall,
    UserMessage,
    arun,
    run,
)

pytest.importorskip("opentelemetry.sdk")

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from agentloop.otel import instrument

from .helpers import add_int as add


def script() -> list[ScriptedResponse]:
    """Not tests.helpers.script(): another run (1 + 2, no text, no usage)."""
    return [
        ScriptedResponse.tool_calls("r1", ToolCall("c1", "add", {"left": 1, "right": 2})),
        ScriptedResponse.text("r2", "3"),
    ]


def spans(drive: str) -> list[tuple[Any, ...]]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    log = EventLog()
    instrument(log, tracer_provider=provider)
    clock = iter(float(n) for n in range(100, 200)).__next__
    options: dict[str, Any] = {"model": ScriptedModel(script()), "tools": [add], "log": log}
    if drive == "run":
        run([UserMessage("u1", "1 + 2?")], clock=clock, **options)
    else:
        asyncio.run(arun([UserMessage("u1", "1 + 2?")], clock=clock, **options))
    provider.shutdown()
    return [
        (span.name, dict(span.attributes or {}), span.start_time, span.end_time)
        for span in exporter.get_finished_spans()
    ]


def test_the_live_otel_recorder_sees_the_same_spans_under_arun() -> None:
    under_run = spans("run")
    assert [name for name, *_ in under_run] == ["chat", "execute_tool add", "chat", "invoke_agent"]
    assert spans("arun") == under_run


def test_the_agentloop_logger_logs_arun_runs(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG, logger="agentloop"):
        asyncio.run(arun([UserMessage("u1", "1 + 2?")], model=ScriptedModel(script()), tools=[add]))
    messages = [record.getMessage() for record in caplog.records if record.name == "agentloop"]
    assert any("run.finished" in message for message in messages)
    assert any("completed" in message for message in messages)


def test_mcp_tools_run_through_their_async_path_under_arun() -> None:
    pytest.importorskip("mcp")
    import mcp

    from agentloop.mcp import AsyncMCPToolset

    from . import mcp_server

    async def main() -> Any:
        async with AsyncMCPToolset(mcp.Client(mcp_server.server), tools=["add"]) as toolset:
            model = ScriptedModel(
                [
                    ScriptedResponse.tool_calls("r1", ToolCall("c1", "add", {"a": 2, "b": 3})),
                    ScriptedResponse.text("r2", "5"),
                ]
            )
            return await arun([UserMessage("u1", "2 + 3?")], model=model, tools=toolset.tools)

    result = asyncio.run(main())
    assert result.status == "completed"
    assert (result.messages[2].content, result.messages[2].is_error) == ("5", False)
