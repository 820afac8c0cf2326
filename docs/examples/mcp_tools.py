"""Tools from an MCP server, used by ``agentloop.run``.

``MCPToolset`` starts docs/examples/mcp_server.py as a process, lists its tools and
hands them to ``run`` as registry entries. The model is a ``ScriptedModel``: it
asks for two notes (one that does not exist, so the server's error comes back as
an error result the model reads), then answers. Run it:
``python docs/examples/mcp_tools.py``.
"""

from __future__ import annotations

import sys
from pathlib import Path

from agentloop import ScriptedModel, ScriptedResponse, ToolCall, ToolResultMessage, UserMessage, run
from agentloop.mcp import MCPToolset, StdioServer

SERVER = StdioServer(sys.executable, [str(Path(__file__).with_name("mcp_server.py"))])

model = ScriptedModel(
    [
        ScriptedResponse.tool_calls(
            "resp-1",
            ToolCall("call-1", "read_note", {"name": "groceries"}),
            ToolCall("call-2", "read_note", {"name": "recipes"}),
        ),
        ScriptedResponse.text("resp-2", "You need milk, eggs and coffee."),
    ]
)

with MCPToolset(SERVER) as notes:
    for spec in notes.specs:
        print(f"tool {spec.name}: {spec.description} {sorted(spec.parameters['properties'])}")
    result = run(
        [UserMessage("user-1", "What do I need from the shop?")],
        model=model,
        tools=notes.tools,
    )

for message in result.messages:
    if isinstance(message, ToolResultMessage):
        flag = "error" if message.is_error else "ok"
        print(f"{message.tool_call_id} {flag}: {message.content}")
print(result.status, "-", result.final_text)
