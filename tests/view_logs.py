"""Logs for the viewer's tests: a hostile one, a large one, a tampered one."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec

from agentloop import (
    Event,
    ModelChunk,
    ModelResponse,
    Reply,
    Resume,
    TextBlock,
    ThinkingBlock,
    ToolCall,
    ToolResult,
    ToolSpec,
    Usage,
    UserMessage,
    agent_loop,
)
from replay import read_log, write_log

from .helpers import drive

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"

#: Markup a model could send, in every field it controls. If any of it became
#: markup or ran, it would set ``window.pwned``, change the title or leave an
#: element (img, svg, iframe, a third script) in the page.
HOSTILE = " ".join(
    (
        '</script><script>window.pwned = "script"; document.title = "pwned"</script>',
        "<img src=x onerror=\"window.pwned = 'img'; document.title = 'pwned'\">",
        '<!--<script>window.pwned = "comment"</script>-->',
        "<svg onload=\"window.pwned = 'svg'\"></svg><iframe srcdoc='<b>x</b>'></iframe>",
        "\u2028\u2029 &lt; &amp; @@SCRIPT@@",
    )
)


def hostile_events() -> list[Event]:
    """A session with ``HOSTILE`` in the system prompt, a tool's description, the
    user message, thinking, text, a tool name, tool arguments (keys and values), a
    tool result, a pause payload and the final answer."""
    echo = ToolSpec("echo", HOSTILE, {"type": "object"}, requires_approval=True)
    loop = agent_loop(
        [UserMessage("user-1", HOSTILE)], tools=[echo], system=HOSTILE, started_at=0.0
    )
    content = (
        ThinkingBlock(HOSTILE),
        TextBlock(HOSTILE),
        ToolCall("call-1", HOSTILE, {"x": HOSTILE}),
        ToolCall("call-2", "echo", {HOSTILE: [HOSTILE, 1.0, 2**62]}),
    )
    replies: list[Reply] = [
        *(ModelChunk("request-001", block, at=1.0) for block in content),
        ModelResponse("request-001", "resp-1", content, "tool_call", Usage(11, 22), at=2.0),
        Resume(payload={"approved": True, "note": HOSTILE}, at=3.0),
        ToolResult("call-2", HOSTILE, at=4.0),
        ModelResponse("request-002", "resp-2", (TextBlock(HOSTILE),), "stop", Usage(3, 4), at=5.0),
    ]
    drive(loop, replies)
    return list(loop.log.events)


def large_events(steps: int = 60, chunks: int = 160) -> list[Event]:
    """A long session: ``steps`` steps, each streaming ``chunks`` text chunks and
    calling a tool."""
    echo = ToolSpec("echo", "Echo.", {"type": "object"})
    loop = agent_loop(
        [UserMessage("user-1", "Count.")], tools=[echo], max_steps=steps, started_at=0.0
    )
    replies: list[Reply] = []
    clock = 0.0
    for step in range(1, steps + 1):
        request = f"request-{step:03d}"
        for n in range(chunks):
            clock += 0.01
            replies.append(ModelChunk(request, TextBlock(f"{n} "), at=clock))
        text = "".join(f"{n} " for n in range(chunks))
        if step < steps:
            call = ToolCall(f"call-{step}", "echo", {"n": step})
            content: tuple[TextBlock | ToolCall, ...] = (TextBlock(text), call)
            replies.append(ModelChunk(request, call, at=clock))
            replies.append(ModelResponse(request, f"r{step}", content, "tool_call", Usage(5, 7)))
            replies.append(ToolResult(f"call-{step}", str(step), at=clock))
        else:
            replies.append(ModelResponse(request, f"r{step}", (TextBlock(text),), "stop"))
    drive(loop, replies)
    return list(loop.log.events)


def tampered(path: Path) -> Path:
    """``fixtures/tool_calls.jsonl`` with the first tool result changed (42 -> 41):
    a log that reads fine and diverges at event #9 when replayed."""
    events = read_log(FIXTURES / "tool_calls.jsonl")
    event = events[9]
    assert event.type == "tool.result"
    message = msgspec.structs.replace(event.message, content="41")  # type: ignore[union-attr]
    events[9] = msgspec.structs.replace(event, message=message)  # type: ignore[arg-type]
    write_log(path, events)
    return path


#: A right-to-left override and a zero-width space: text that reorders itself.
SPOOF_CHILD = "invoice\u202efdp.exe pay\u200bpal"


def tree_tools(text: str = "cats purr") -> list[Any]:
    """Agent tools: ``searcher`` answers ``text`` after a search; ``editor`` calls
    ``searcher`` (a grandchild)."""
    import agentloop as al
    from agentloop import FunctionModel, ModelRequest, ScriptedResponse

    @al.tool
    def search(query: str) -> str:
        """Search the web."""
        return f"results for {query}"

    def searching(request: ModelRequest) -> ScriptedResponse:
        if request.step == 1:
            return ScriptedResponse.tool_calls("s1", ToolCall("k1", "search", {"query": text}))
        return ScriptedResponse.text("s2", text)

    def editing(request: ModelRequest) -> ScriptedResponse:
        if request.step == 1:
            return ScriptedResponse.tool_calls("e1", ToolCall("g1", "searcher", {"task": "go"}))
        return ScriptedResponse.text("e2", "edited")

    searcher = al.agent_tool(
        "searcher", "Searches.", model=FunctionModel(searching), tools=[search]
    )
    editor = al.agent_tool("editor", "Edits.", model=FunctionModel(editing), tools=[searcher])
    return [searcher, editor]


def delegating(*calls: tuple[str, str]) -> Any:
    """A parent model that calls ``calls`` (id, agent tool) at once, then answers."""
    from agentloop import ModelRequest, ScriptedResponse

    def fn(request: ModelRequest) -> ScriptedResponse:
        if request.step == 1:
            return ScriptedResponse.tool_calls(
                "p1", *(ToolCall(cid, name, {"task": "go"}) for cid, name in calls)
            )
        return ScriptedResponse.text("p2", "all done")

    return fn


def tree_on_disk(path: Path, *calls: tuple[str, str], text: str = "cats purr") -> list[str]:
    """Run a parent that calls ``calls``; write its tree at ``path``
    (``replay.write_tree``); the files written."""
    import agentloop as al
    import replay
    from agentloop import FunctionModel

    from .helpers import Ticker

    log = al.EventLog()
    tools = tree_tools(text)
    al.run(
        [UserMessage("u1", "research cats")],
        model=FunctionModel(delegating(*calls)),
        tools=tools,
        log=log,
        clock=Ticker(),
    )
    return replay.write_tree(path, log, tools)
