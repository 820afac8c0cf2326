"""A tiny MCP server (the ``mcp`` SDK's ``MCPServer``), for docs/examples/mcp_tools.py.

Run on its own it serves over stdin/stdout: ``python docs/examples/mcp_server.py``.
"""

from __future__ import annotations

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

server = MCPServer("notes")
NOTES = {"groceries": "milk, eggs, coffee", "todo": "write the report"}


@server.tool()
def list_notes() -> list[str]:
    """The names of the saved notes."""
    return sorted(NOTES)


@server.tool()
def read_note(name: str) -> str:
    """The text of one note."""
    if name not in NOTES:
        raise ToolError(f"no note named {name!r}; see list_notes")
    return NOTES[name]


if __name__ == "__main__":
    server.run("stdio")
