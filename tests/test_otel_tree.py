"""Live OpenTelemetry spans of a session tree (DESIGN §26): a child session's
spans are children of its call's ``execute_tool`` span, in the parent's trace, as
the offline export (``record_log(..., children=)``) puts them."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("opentelemetry.sdk")

from opentelemetry.sdk.trace import ReadableSpan

import agentloop as al
import replay
from agentloop import FunctionModel, ParentLink, UserMessage, otel
from agentloop._spi import child_session_id
from replay import SQLiteStore

from .helpers import Ticker
from .test_otel import Spans
from .view_logs import delegating, tree_tools

TASK = [UserMessage("u1", "research cats")]
CALLS = (("c1", "searcher"), ("c2", "editor"))


def shape(spans: list[ReadableSpan]) -> list[tuple[str, str, str]]:
    """Each span's name, its call id and its parent's (the tree, not the ids),
    sorted; ``invoke_agent`` spans without their agent's name (the offline export
    names no child's agent)."""
    by_id = {span.context.span_id: span for span in spans}

    def name(span: ReadableSpan | None) -> str:
        if span is None:
            return ""
        plain = "invoke_agent" if span.name.startswith("invoke_agent") else span.name
        return f"{plain} {span.attributes.get('gen_ai.tool.call.id', '')}"  # type: ignore[union-attr]

    return sorted(
        (
            name(span),
            str(span.attributes.get("agentloop.step")),
            name(by_id.get(span.parent.span_id) if span.parent else None),
        )  # type: ignore[union-attr]
        for span in spans
    )


def check_tree(spans: Spans, root_agent: str = "invoke_agent") -> None:
    finished = spans.exporter.get_finished_spans()
    assert len({span.context.trace_id for span in finished}) == 1  # one trace
    by_id = {span.context.span_id: span for span in finished}
    agents = [span for span in finished if span.name.startswith("invoke_agent")]
    assert len(agents) == 4  # the root, c1, c2 and c2's child g1
    (root,) = [span for span in agents if span.parent is None]
    assert root.name == root_agent
    under: dict[str, str] = {}
    for span in agents:
        if span is root:
            continue
        assert span.parent is not None
        call = by_id[span.parent.span_id]
        assert call.name.startswith("execute_tool ")
        under[str(call.attributes["gen_ai.tool.call.id"])] = span.name  # type: ignore[index]
        assert span.attributes["gen_ai.agent.name"] == span.name.removeprefix("invoke_agent ")  # type: ignore[index]
    assert under == {
        "c1": "invoke_agent searcher",
        "c2": "invoke_agent editor",
        "g1": "invoke_agent searcher",
    }
    # g1's execute_tool is a span of c2's run, under c2's invoke_agent.
    (g1,) = [s for s in finished if s.attributes.get("gen_ai.tool.call.id") == "g1"]  # type: ignore[union-attr]
    assert g1.parent is not None
    assert by_id[g1.parent.span_id].name == "invoke_agent editor"
    # Every child span ends within its parent's (nothing left open).
    for span in finished:
        if span.parent is not None:
            parent = by_id[span.parent.span_id]
            assert parent.start_time <= span.start_time  # type: ignore[operator]
            assert span.end_time <= parent.end_time  # type: ignore[operator]


def test_a_live_run_nests_each_child_under_its_execute_tool() -> None:
    spans = Spans()
    log = al.EventLog()
    tools = tree_tools()
    recorder = otel.instrument(log, tracer_provider=spans.provider)
    result = al.run(
        TASK, model=FunctionModel(delegating(*CALLS)), tools=tools, log=log, clock=Ticker()
    )
    assert result.status == "completed"
    check_tree(spans)
    # The same tree as the offline export of the logs, span for span (the
    # children's agents named for their agent tools there too).
    offline = Spans()
    logs = {session: list(child) for tool in tools for session, child in tool.logs.items()}

    def children(events: Any, call_id: str) -> Any:
        start = events[0]
        session = "root" if start.parent is None else child_session_id(start.parent)
        return logs.get(f"{session}/{call_id}")

    otel.record_log(log, tracer_provider=offline.provider, children=children)
    assert shape(list(spans.exporter.get_finished_spans())) == shape(
        list(offline.exporter.get_finished_spans())
    )
    assert recorder._kids == {}  # each child's recorder let go when its call ended


def test_on_event_follows_children_too_and_two_recorders_each_get_theirs() -> None:
    first, second = Spans(), Spans()
    log = al.EventLog()
    otel.instrument(log, tracer_provider=first.provider, conversation_id="research")
    on_event = otel.SpanRecorder(tracer_provider=second.provider, agent_name="lead")
    al.run(
        TASK,
        model=FunctionModel(delegating(*CALLS)),
        tools=tree_tools(),
        log=log,
        on_event=on_event,
        clock=Ticker(),
    )
    check_tree(first)
    check_tree(second, "invoke_agent lead")
    # A conversation id given: each child's spans carry the child's session id.
    ids = {
        span.attributes.get("gen_ai.conversation.id")  # type: ignore[union-attr]
        for span in first.exporter.get_finished_spans()
        if span.name.startswith("invoke_agent")
    }
    assert ids == {"research", "root/c1", "root/c2", "root/c2/g1"}


def test_an_async_run_with_parallel_agent_tools() -> None:
    spans = Spans()
    log = al.EventLog()
    otel.instrument(log, tracer_provider=spans.provider)
    result = asyncio.run(
        al.arun(
            TASK,
            model=FunctionModel(delegating(*CALLS)),
            tools=tree_tools(),
            log=log,
            parallel_tools=True,
            clock=Ticker(),
        )
    )
    assert result.status == "completed"
    check_tree(spans)


def test_a_durable_tree_nests_its_stored_children(tmp_path: Path) -> None:
    spans = Spans()
    recorder = otel.SpanRecorder(tracer_provider=spans.provider)
    with SQLiteStore(tmp_path / "s.db") as store:
        result = replay.run_durable(
            store,
            "research",
            TASK,
            model=FunctionModel(delegating(*CALLS)),
            tools=tree_tools(),
            clock=Ticker(),
            on_event=recorder,
        )
    assert result.status == "completed"  # type: ignore[union-attr]
    check_tree(spans)


def test_a_parked_tree_s_spans_end_at_finish_marked_incomplete(tmp_path: Path) -> None:
    """A child that waits for an approval parks, and its parent with it: the
    child's log does not end; its spans end with its parent's, in one trace."""

    @al.tool(requires_approval=True)
    def publish(text: str) -> str:
        """Publish."""
        return "published"

    def writing(request: Any) -> Any:
        if request.step == 1:
            return al.ScriptedResponse.tool_calls("w1", al.ToolCall("p1", "publish", {"text": "x"}))
        return al.ScriptedResponse.text("w2", "done")

    writer = al.agent_tool("writer", "Writes.", model=FunctionModel(writing), tools=[publish])
    spans = Spans()
    recorder = otel.SpanRecorder(tracer_provider=spans.provider)
    with SQLiteStore(tmp_path / "s.db") as store:
        parked = replay.run_durable(
            store,
            "w",
            TASK,
            model=FunctionModel(delegating(("c1", "writer"))),
            tools=[writer],
            on_event=recorder,
            clock=Ticker(),
        )
    assert type(parked) is replay.Parked
    # (on_event saw the parent's run end, uncommitted, as the child parked it:
    # the child's spans ended first; nothing is left for finish().)
    count = len(spans.exporter.get_finished_spans())
    recorder.finish()
    assert len(spans.exporter.get_finished_spans()) == count
    finished = spans.exporter.get_finished_spans()
    by_id = {s.context.span_id: s for s in finished}
    (child,) = [s for s in finished if s.name == "invoke_agent writer"]
    assert child.attributes["agentloop.incomplete"] is True  # type: ignore[index]
    assert child.parent is not None
    call = by_id[child.parent.span_id]
    assert call.name == "execute_tool writer"
    assert child.end_time <= call.end_time  # type: ignore[operator]
    assert len({s.context.trace_id for s in finished}) == 1
    assert recorder._kids == {}


def test_no_watcher_without_an_open_call() -> None:
    recorder = otel.SpanRecorder(tracer_provider=Spans().provider)
    assert recorder.child_watcher(ParentLink(session="root", call_id="c1", depth=1), None) is None

    class Declines:
        def __call__(self, event: Any) -> None:
            pass

        def child_watcher(self, link: ParentLink, tool: Any) -> None:
            return None

    log = al.EventLog()
    log.subscribe(Declines())
    result = al.run(TASK, model=FunctionModel(delegating(*CALLS)), tools=tree_tools(), log=log)
    assert result.status == "completed"


class MemoryHost:
    """A host (``agentloop._caller.ChildHost``) running each child in memory:
    it gets one ``on_event`` for the child, however many watch it."""

    def __init__(self) -> None:
        self.watched: list[bool] = []

    def run_child(
        self,
        tool: Any,
        link: ParentLink,
        messages: list[Any],
        on_pause: Any,
        signal: Any,
        clock: Any,
        on_event: Any = None,
    ) -> Any:
        self.watched.append(on_event is not None)
        loop = al.agent_loop(
            messages,
            tools=tool.tools,
            parent=link,
            started_at=float(clock()),
            **tool.options,
        )
        result = al.drive(loop, model=tool.model, tools=tool.tools, clock=clock, on_event=on_event)
        return result, list(loop.log)

    async def arun_child(self, *args: Any, **kwargs: Any) -> Any:  # pragma: no cover
        raise AssertionError("a sync run")


def test_a_host_gets_one_on_event_for_every_watcher_of_a_child() -> None:
    from agentloop._caller import hosting

    first, second = Spans(), Spans()
    log = al.EventLog()
    otel.instrument(log, tracer_provider=first.provider)
    seen: list[str] = []

    class Follows:
        """Follows the children, not theirs (its child's watcher is a function)."""

        def __call__(self, event: Any) -> None:
            pass

        def child_watcher(self, link: ParentLink, tool: Any) -> Any:
            return lambda event: seen.append(f"{link.call_id} {event.type}")

    log.subscribe(Follows())
    host = MemoryHost()
    with hosting(host):
        al.run(
            TASK,
            model=FunctionModel(delegating(*CALLS)),
            tools=tree_tools(),
            log=log,
            on_event=otel.SpanRecorder(tracer_provider=second.provider),
            clock=Ticker(),
        )
    assert host.watched == [True, True, True]  # c1, c2 and c2's g1
    assert {entry.split()[0] for entry in seen} == {"c1", "c2"}
    assert "c2 run.finished" in seen
    check_tree(first)
    check_tree(second)
    # Nothing watching: the host gets no on_event.
    host = MemoryHost()
    with hosting(host):
        al.run(TASK, model=FunctionModel(delegating(*CALLS)), tools=tree_tools())
    assert host.watched == [False, False, False]
