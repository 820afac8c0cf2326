"""agentloop.mcp against a real MCP server process (tests/mcp_server.py).

The server runs over stdio (started by the toolset) and over streamable HTTP on
127.0.0.1 (started and stopped by a fixture, on a socket bound to a free port).
"""

from __future__ import annotations

import asyncio
import base64
import os
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import mcp
import pytest
from mcp.types import (
    AudioContent,
    BlobResourceContents,
    CallToolResult,
    EmbeddedResource,
    ImageContent,
    TextContent,
)

from agentloop import (
    AudioBlock,
    DocumentBlock,
    EventLog,
    ImageBlock,
    Pause,
    Resume,
    ScriptedModel,
    ScriptedResponse,
    TextBlock,
    ToolCall,
    ToolErrorEvent,
    ToolRegistry,
    ToolResultEvent,
    UserMessage,
    run,
    tool,
)
from agentloop.mcp import (
    AsyncMCPToolset,
    HTTPServer,
    MCPTool,
    MCPToolError,
    MCPToolset,
    StdioServer,
    tool_result,
)
from replay import replay
from tests import mcp_server

ROOT = Path(__file__).resolve().parent.parent
SERVER = ROOT / "tests" / "mcp_server.py"
TOOLS = [
    "add",
    "weather",
    "fail",
    "picture",
    "sound",
    "documents",
    "structured_only",
    "nothing",
    "slow",
    "env",
    "pid",
    "dotted_name",
]


def stdio(**options: Any) -> StdioServer:
    """The test server as a process over stdio."""
    return StdioServer(sys.executable, [str(SERVER), "stdio"], **options)


def inproc() -> mcp.Client:
    """The same server in this process (the SDK's own Client): for the option tests,
    where the transport does not matter and a process start costs seconds."""
    return mcp.Client(mcp_server.server)


@pytest.fixture(scope="module")
def http_url() -> Iterator[str]:
    """The test server over streamable HTTP, on a port the kernel picked."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    port = listener.getsockname()[1]
    process = subprocess.Popen(
        [sys.executable, str(SERVER), "http", str(listener.fileno())],
        pass_fds=(listener.fileno(),),
    )
    listener.close()  # the server has its own copy; connections queue until it accepts
    try:
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:  # pragma: no cover - a stuck server
            process.kill()
            process.wait()


@pytest.fixture(scope="module")
def server() -> Iterator[MCPToolset]:
    """One open stdio toolset for the result-mapping tests."""
    with MCPToolset(stdio(), call_timeout=5.0) as toolset:
        yield toolset


@pytest.fixture(autouse=True)
def no_leftover_threads() -> Iterator[None]:
    before = {t for t in threading.enumerate() if t.name == "agentloop-mcp"}
    yield
    after = {t for t in threading.enumerate() if t.name == "agentloop-mcp"}
    assert after <= before, "a toolset left its event loop thread running"


def calculator_model() -> ScriptedModel:
    return ScriptedModel(
        [
            ScriptedResponse.tool_calls(
                "r1",
                ToolCall("c1", "add", {"a": 20, "b": 22}),
                ToolCall("c2", "fail", {"message": "no such city"}),
            ),
            ScriptedResponse.text("r2", "20 + 22 = 42."),
        ]
    )


# --------------------------------------------------------------------------- end to end


@pytest.mark.parametrize("transport", ["stdio", "http"])
def test_run_calls_mcp_tools_end_to_end(transport: str, request: pytest.FixtureRequest) -> None:
    target = stdio() if transport == "stdio" else HTTPServer(request.getfixturevalue("http_url"))
    model = calculator_model()
    log = EventLog()
    with MCPToolset(target, tools=["add", "fail"]) as toolset:
        result = run(
            [UserMessage("u", "What is 20 + 22?")], model=model, tools=toolset.tools, log=log
        )
    assert result.status == "completed"
    assert result.final_text == "20 + 22 = 42."
    outcomes = [
        (e.message.tool_name, e.message.content, e.message.is_error)
        for e in log.events
        if type(e) in (ToolResultEvent, ToolErrorEvent)
    ]
    assert outcomes == [
        ("add", "42", False),
        ("fail", "Error executing tool fail: no such city", True),
    ]
    # The model was shown the server's tools with their JSON schemas.
    (first, _) = model.requests
    add_spec = next(spec for spec in first.tools if spec.name == "add")
    assert add_spec.description == "Add two integers."
    assert add_spec.parameters["properties"]["a"]["type"] == "integer"
    assert add_spec.parameters["required"] == ["a", "b"]
    # The results are recorded replies: the log replays without the server.
    assert replay(list(log.events)).result == result


def test_mcp_tools_mix_with_local_tools(server: MCPToolset) -> None:
    @tool
    def double(x: int) -> int:
        """Double it."""
        return 2 * x

    model = ScriptedModel(
        [
            ScriptedResponse.tool_calls(
                "r1", ToolCall("c1", "add", {"a": 1, "b": 2}), ToolCall("c2", "double", {"x": 4})
            ),
            ScriptedResponse.text("r2", "3 and 8."),
        ]
    )
    registry = ToolRegistry([double, *server.tools])
    result = run([UserMessage("u", "go")], model=model, tools=registry)
    contents = [m.content for m in result.messages if m.__class__.__name__ == "ToolResultMessage"]
    assert contents == ["3", "8"]


def test_the_listing_over_both_transports_is_the_same(http_url: str, server: MCPToolset) -> None:
    with MCPToolset(http_url) as over_http:
        assert over_http.specs == server.specs
    assert [spec.name for spec in server.specs] == TOOLS


def test_http_headers_are_sent(http_url: str) -> None:
    with MCPToolset(HTTPServer(http_url, headers={"X-Agent": "agentloop"})) as toolset:
        assert toolset.call("add", {"a": 2, "b": 3}) == ("5", False)


# --------------------------------------------------------------------------- results

RESULTS = [
    ("add", {"a": 1, "b": 2}, ("3", False)),
    ("weather", {"city": "Oslo"}, ('{\n  "city": "Oslo",\n  "celsius": 21.5\n}', False)),
    ("fail", {"message": "boom"}, ("Error executing tool fail: boom", True)),
    ("picture", {}, ((ImageBlock("image/png", data=b"\x89PNG\r\n\x1a\n" + bytes(16)),), False)),
    ("sound", {}, ((AudioBlock("audio/wav", data=bytes(12)),), False)),
    (
        "documents",
        {},
        (
            (
                TextBlock("Two documents:\n[resource file:///notes.txt]\nbuy milk"),
                DocumentBlock("application/octet-stream", data=bytes(4), name="file:///logo.bin"),
                TextBlock("[resource link: file:///report.pdf]"),
            ),
            False,
        ),
    ),
    ("structured_only", {}, ('{"ok":true,"items":[1,2]}', False)),
    ("nothing", {}, ("", False)),
    ("dotted_name", {}, ("dotted", False)),
]


@pytest.mark.parametrize(("name", "arguments", "expected"), RESULTS, ids=[r[0] for r in RESULTS])
def test_results_map_to_tool_results(
    server: MCPToolset, name: str, arguments: dict[str, Any], expected: tuple[str, bool]
) -> None:
    assert server.call(name, arguments) == expected
    entry = server.tools.get(name)
    assert isinstance(entry, MCPTool)
    assert entry.execute(ToolCall("c", name, arguments)) == expected


def test_bad_arguments_are_an_error_result(server: MCPToolset) -> None:
    content, is_error = server.call("add", {"a": "x"})
    assert is_error
    assert "validation error" in content


def test_an_unknown_tool_is_an_error_result(server: MCPToolset) -> None:
    assert server.call("teleport", {}) == ("MCP error: no tool 'teleport' on this server", True)


def test_a_call_that_takes_too_long_is_an_error_result(http_url: str) -> None:
    with MCPToolset(http_url, tools=["slow"], call_timeout=0.1) as toolset:
        content, is_error = toolset.call("slow", {"seconds": 1})
    assert is_error
    assert content.startswith("MCP error: ") and "timed out" in content


def test_calling_a_tool_directly(server: MCPToolset) -> None:
    add, fail = server.tools.get("add"), server.tools.get("fail")
    assert isinstance(add, MCPTool) and isinstance(fail, MCPTool)
    assert add(a=4, b=5) == "9"
    with pytest.raises(MCPToolError, match="boom"):
        fail(message="boom")
    assert repr(add) == "<MCPTool 'add' -> 'add'>"
    assert add.mcp_name == "add"
    dotted = server.tools.get("dotted_name")
    assert isinstance(dotted, MCPTool) and dotted.mcp_name == "dotted.name"
    assert dotted.spec.description == "A tool with a dot in its name"


def test_unknown_content_types_get_a_placeholder() -> None:
    block = SimpleNamespace(type="hologram")
    result = CallToolResult.model_construct(
        content=[block], structured_content=None, is_error=False
    )
    assert tool_result(result) == ("[hologram content, not shown]", False)


def test_media_results_are_blocks_with_their_bytes() -> None:
    """Images, audio and binary resources become blocks by MIME type (text between
    them joined by newlines); bytes that are not base64 a placeholder naming them."""
    png = base64.b64encode(b"\x89PNG").decode()
    result = CallToolResult(
        content=[
            TextContent(text="a"),
            TextContent(text="b"),
            ImageContent(data=png, mime_type="image/png"),
            AudioContent(data="!!not base64!!", mime_type="audio/wav"),
            EmbeddedResource(
                resource=BlobResourceContents(uri="file:///x.png", mime_type="image/png", blob=png)
            ),
            EmbeddedResource(
                resource=BlobResourceContents(uri="file:///y.mp3", mime_type="audio/mpeg", blob=png)
            ),
            EmbeddedResource(resource=BlobResourceContents(uri="file:///z", blob=png)),
        ],
        is_error=True,
    )
    assert tool_result(result) == (
        (
            TextBlock("a\nb"),
            ImageBlock("image/png", data=b"\x89PNG"),
            TextBlock("[audio: audio/wav, not base64, not shown]"),
            ImageBlock("image/png", data=b"\x89PNG", name="file:///x.png"),
            AudioBlock("audio/mpeg", data=b"\x89PNG", name="file:///y.mp3"),
            DocumentBlock("application/octet-stream", data=b"\x89PNG", name="file:///z"),
        ),
        True,
    )


def test_a_failed_call_with_media_raises_with_its_text() -> None:
    def call(name: str, arguments: dict[str, Any]) -> tuple[Any, bool]:
        return (TextBlock("bad chart: "), ImageBlock("image/png", data=b"x")), True

    async def acall(name: str, arguments: dict[str, Any]) -> tuple[Any, bool]:
        return call(name, arguments)

    chart = MCPTool(spec_of("chart"), "chart", call, acall)
    with pytest.raises(MCPToolError, match=r"^bad chart: \[image image/png, 1 bytes\]$"):
        chart()


def spec_of(name: str) -> Any:
    from agentloop import ToolSpec

    return ToolSpec(name, "", {"type": "object"})


def test_an_image_tool_reaches_the_model_as_an_image_block(server: MCPToolset) -> None:
    picture = server.tools.get("picture")
    assert isinstance(picture, MCPTool)
    assert picture() == (ImageBlock("image/png", data=b"\x89PNG\r\n\x1a\n" + bytes(16)),)


# --------------------------------------------------------------------------- resources


def test_resources_are_read_into_blocks(server: MCPToolset) -> None:
    assert server.read_resource("file:///notes.txt") == (TextBlock("buy milk"),)
    assert server.read_resource("file:///paper.pdf") == (
        DocumentBlock("application/pdf", data=b"%PDF-1.4\n%%EOF\n", name="file:///paper.pdf"),
    )
    with pytest.raises(MCPToolError, match=r"^cannot read 'file:///none': "):
        server.read_resource("file:///none")


def test_resources_read_by_the_async_core_and_refused_once_closed() -> None:
    async def main() -> None:
        async with AsyncMCPToolset(inproc()) as toolset:
            parts = await toolset.read_resource("file:///paper.pdf")
            assert [type(p) for p in parts] == [DocumentBlock]
        with pytest.raises(MCPToolError, match="connection to the server is closed"):
            await toolset.read_resource("file:///paper.pdf")

    asyncio.run(main())
    toolset = MCPToolset(inproc())
    with pytest.raises(MCPToolError, match=r"^cannot read 'file:///notes\.txt': the connection"):
        toolset.read_resource("file:///notes.txt")


def test_reading_a_resource_from_the_toolsets_own_loop_is_refused(server: MCPToolset) -> None:
    loop = server._loop
    assert loop is not None

    async def inside() -> Any:
        return server.read_resource("file:///notes.txt")

    with pytest.raises(MCPToolError) as caught:
        asyncio.run_coroutine_threadsafe(inside(), loop).result()
    assert str(caught.value) == (
        "cannot read 'file:///notes.txt': a blocking MCP call from the toolset's own event loop"
    )


# --------------------------------------------------------------------------- options


def test_prefix_filter_and_approval() -> None:
    with MCPToolset(
        inproc(), prefix="calc.", tools=["add", "fail"], requires_approval=["fail"]
    ) as toolset:
        specs = {spec.name: spec.requires_approval for spec in toolset.specs}
        assert specs == {"calc_add": False, "calc_fail": True}
        assert toolset.call("calc_add", {"a": 1, "b": 1}) == ("2", False)
        assert toolset.call("add", {"a": 1, "b": 1})[1] is True  # the server name is not ours
    with MCPToolset(inproc(), tools=["add"], requires_approval=True) as toolset:
        assert [spec.requires_approval for spec in toolset.specs] == [True]


def test_approval_pauses_before_an_mcp_call() -> None:
    pauses: list[Pause] = []

    def deny(pause: Pause) -> Resume:
        pauses.append(pause)
        return Resume({"approved": False, "message": "not today"})

    with MCPToolset(inproc(), tools=["add", "fail"], requires_approval=["fail"]) as toolset:
        result = run(
            [UserMessage("u", "go")], model=calculator_model(), tools=toolset.tools, on_pause=deny
        )
    assert [p.reason for p in pauses] == ["approval"]
    errors = [m.content for m in result.messages if getattr(m, "is_error", False)]
    assert errors == ["not today"]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (
            {"tools": ["add", "teleport"]},
            "tools names tools the MCP server does not list: teleport",
        ),
        ({"requires_approval": ["warp"]}, "requires_approval names tools .* not list: warp"),
    ],
)
def test_names_the_server_does_not_list_are_refused(options: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message), MCPToolset(inproc(), **options):
        pass  # pragma: no cover - entering raises


def test_names_that_collide_are_refused() -> None:
    toolset = AsyncMCPToolset("http://127.0.0.1:9/mcp")
    listed = [
        SimpleNamespace(name="a.b", description=None, title=None, input_schema={}),
        SimpleNamespace(name="a_b", description="x", title=None, input_schema={}),
    ]
    with pytest.raises(ValueError, match=r"MCP tools 'a\.b' and 'a_b' both become 'a_b'"):
        toolset._specs(listed)
    toolset = AsyncMCPToolset("http://127.0.0.1:9/mcp", tools=["a_b"])
    specs, names = toolset._specs(listed)
    assert [s.name for s in specs] == ["a_b"] and names == {"a_b": "a_b"}
    with pytest.raises(ValueError, match="it lists: nothing"):
        AsyncMCPToolset("http://127.0.0.1:9/mcp", tools=["x"])._specs([])


@pytest.mark.parametrize(
    ("server", "options", "message"),
    [
        (42, {}, "server must be a StdioServer, an HTTPServer, a URL or an mcp.Client"),
        ("http://x/mcp", {"prefix": 1}, "prefix must be a str"),
        ("http://x/mcp", {"tools": "add"}, "tools must be a collection of tool names"),
        ("http://x/mcp", {"requires_approval": "add"}, "requires_approval must be a bool or"),
    ],
)
def test_options_are_checked(server: Any, options: dict[str, Any], message: str) -> None:
    with pytest.raises(TypeError, match=message):
        MCPToolset(server, **options)


def test_the_server_gets_the_environment_given() -> None:
    with MCPToolset(stdio(env={"AGENTLOOP_TEST": "hello"}), tools=["env"]) as toolset:
        assert toolset.call("env", {"name": "AGENTLOOP_TEST"}) == ("hello", False)


# --------------------------------------------------------------------------- lifecycle


def test_a_server_that_cannot_start_raises_on_entering() -> None:
    toolset = MCPToolset(StdioServer(str(ROOT / "no-such-server")))
    with pytest.raises(OSError), toolset:
        pass  # pragma: no cover - entering raises
    assert repr(toolset).endswith("closed, 0 tools>")


def test_a_server_killed_mid_session_gives_error_results_and_closes_cleanly() -> None:
    with MCPToolset(stdio(), tools=["pid", "add"]) as toolset:
        pid = int(toolset.call("pid", {})[0])
        os.kill(pid, signal.SIGKILL)
        for _ in range(2):
            content, is_error = toolset.call("add", {"a": 1, "b": 2})
            assert is_error and content.startswith("MCP error: ")
    assert "closed" in repr(toolset)


def test_open_once_and_calls_after_closing_are_error_results() -> None:
    toolset = MCPToolset(inproc(), tools=["add"])
    assert toolset.specs == ()
    with toolset:
        assert "open, 1 tools" in repr(toolset)
        with pytest.raises(RuntimeError, match="already open"):
            toolset.__enter__()
        add = toolset.tools.get("add")
        assert isinstance(toolset.server, mcp.Client)
    assert isinstance(add, MCPTool)
    closed = ("MCP error: the connection to the server is closed", True)
    assert add.execute(ToolCall("c", "add", {"a": 1, "b": 2})) == closed
    assert asyncio.run(add.aexecute(ToolCall("c", "add", {"a": 1, "b": 2}))) == closed
    assert len(toolset.tools) == 0
    toolset.__exit__(None, None, None)  # closing twice is harmless


def test_sync_tools_can_be_awaited_from_another_loop(server: MCPToolset) -> None:
    add = server.tools.get("add")
    assert isinstance(add, MCPTool)
    assert asyncio.run(add.aexecute(ToolCall("c", "add", {"a": 6, "b": 7}))) == ("13", False)


def test_a_blocking_call_from_the_toolsets_own_loop_is_refused(server: MCPToolset) -> None:
    async def inside() -> tuple[Any, bool]:
        return server.call("add", {"a": 1, "b": 2})

    loop = server._loop
    assert loop is not None
    answer = asyncio.run_coroutine_threadsafe(inside(), loop).result()
    assert answer == ("MCP error: a blocking MCP call from the toolset's own event loop", True)


# --------------------------------------------------------------------------- async core


def test_the_async_core() -> None:
    async def main() -> None:
        async with AsyncMCPToolset(stdio(), tools=["add", "weather"]) as toolset:
            assert [spec.name for spec in toolset.specs] == ["add", "weather"]
            assert toolset.instructions == "Test tools for agentloop."
            assert await toolset.call("add", {"a": 2, "b": 2}) == ("4", False)
            tools = toolset.tools
            add = tools.get("add")
            assert isinstance(add, MCPTool)
            assert await add.aexecute(ToolCall("c", "add", {"a": 1, "b": 1})) == ("2", False)
            content, is_error = add.execute(ToolCall("c", "add", {"a": 1, "b": 1}))
            assert is_error and "async driver" in content
            with pytest.raises(RuntimeError, match="already open"):
                await toolset.__aenter__()
        assert await toolset.call("add", {"a": 1, "b": 1}) == (
            "MCP error: the connection to the server is closed",
            True,
        )

    asyncio.run(main())


class Paged(mcp.Client):
    """The in-process server, listing its tools two per page (or never ending)."""

    endless = False

    async def list_tools(self, *, cursor: str | None = None, **kwargs: Any) -> Any:
        listing = await super().list_tools(**kwargs)
        start = int(cursor or 0)
        following = None if start + 2 >= len(listing.tools) else str(start + 2)
        if self.endless:
            following = str(start % len(listing.tools))
        return listing.model_copy(
            update={"tools": listing.tools[start : start + 2], "next_cursor": following}
        )


def test_every_page_of_the_listing_is_read() -> None:
    with MCPToolset(Paged(mcp_server.server)) as toolset:
        assert [spec.name for spec in toolset.specs] == TOOLS


def test_a_listing_that_never_ends_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    import agentloop.mcp

    monkeypatch.setattr(agentloop.mcp, "_MAX_PAGES", 3)
    client = Paged(mcp_server.server)
    client.endless = True
    with pytest.raises(ValueError, match="did not end after 3 pages"), MCPToolset(client):
        pass  # pragma: no cover - entering raises


def test_an_error_while_closing_is_raised_on_leaving() -> None:
    class Failing(mcp.Client):
        async def __aexit__(self, *exc_info: Any) -> None:
            await super().__aexit__(*exc_info)
            raise RuntimeError("could not stop the server")

    toolset = MCPToolset(Failing(mcp_server.server), tools=["add"])
    with pytest.raises(RuntimeError, match="could not stop the server"), toolset:
        assert toolset.call("add", {"a": 1, "b": 1}) == ("2", False)
    assert "closed" in repr(toolset)


def test_leaving_an_async_toolset_that_never_opened_does_nothing() -> None:
    asyncio.run(AsyncMCPToolset(inproc()).__aexit__(None, None, None))


def test_stdio_server_descriptions_compare_by_what_starts_them() -> None:
    assert stdio() == stdio(stderr=sys.stderr)
    assert stdio() != stdio(env={"X": "1"})
