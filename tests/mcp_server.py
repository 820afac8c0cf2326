"""A small real MCP server for the tests (the ``mcp`` SDK's ``MCPServer``, ex-FastMCP).

    python tests/mcp_server.py stdio        serve over stdin/stdout
    python tests/mcp_server.py http FD      serve streamable HTTP on the listening socket FD

The HTTP mode takes a socket the test bound to 127.0.0.1 port 0 and passed down, so
there is no race for a free port.
"""

from __future__ import annotations

import os
import sys
import time

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.utilities.types import Audio, Image
from mcp.types import (
    BlobResourceContents,
    CallToolResult,
    EmbeddedResource,
    ResourceLink,
    TextContent,
    TextResourceContents,
)
from pydantic import BaseModel

server = MCPServer("agentloop-test", instructions="Test tools for agentloop.")


@server.tool()
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


class Weather(BaseModel):
    city: str
    celsius: float


@server.tool()
def weather(city: str) -> Weather:
    """Current weather for a city."""
    return Weather(city=city, celsius=21.5)


@server.tool()
def fail(message: str) -> str:
    """Always fails with the message."""
    raise ToolError(message)


@server.tool()
def picture() -> Image:
    """A tiny image."""
    return Image(data=b"\x89PNG\r\n\x1a\n" + bytes(16), format="png")


@server.tool()
def sound() -> Audio:
    """A tiny sound."""
    return Audio(data=bytes(12), format="wav")


@server.tool()
def documents() -> list[TextContent | EmbeddedResource | ResourceLink]:
    """Mixed content: text, a text resource, a binary resource, a link."""
    return [
        TextContent(text="Two documents:"),
        EmbeddedResource(resource=TextResourceContents(uri="file:///notes.txt", text="buy milk")),
        EmbeddedResource(
            resource=BlobResourceContents(
                uri="file:///logo.bin", mime_type="application/octet-stream", blob="AAAAAA=="
            )
        ),
        ResourceLink(name="report", uri="file:///report.pdf"),
    ]


@server.resource("file:///notes.txt", mime_type="text/plain")
def notes() -> str:
    """A text resource."""
    return "buy milk"


@server.resource("file:///paper.pdf", mime_type="application/pdf")
def paper() -> bytes:
    """A binary resource (a PDF's first bytes)."""
    return b"%PDF-1.4\n%%EOF\n"


@server.tool()
def structured_only() -> CallToolResult:
    """A result with structured content and no content blocks."""
    return CallToolResult(content=[], structured_content={"ok": True, "items": [1, 2]})


@server.tool()
def nothing() -> CallToolResult:
    """An empty result."""
    return CallToolResult(content=[])


@server.tool()
def slow(seconds: float) -> str:
    """Sleep, then answer."""
    time.sleep(seconds)
    return "slept"


@server.tool()
def env(name: str) -> str:
    """An environment variable of the server process."""
    return os.environ.get(name, "<unset>")


@server.tool()
def pid() -> int:
    """The server's process id."""
    return os.getpid()


@server.tool(name="dotted.name", title="A tool with a dot in its name")
def dotted() -> str:
    return "dotted"


if __name__ == "__main__":
    if sys.argv[1] == "stdio":
        server.run("stdio")
    else:
        import uvicorn

        uvicorn.run(server.streamable_http_app(), fd=int(sys.argv[2]), log_level="warning")
