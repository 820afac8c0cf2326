"""An agent that sees an image and a PDF, and a tool that returns a chart: offline.

A scripted model stands in for a real one (swap in ``OpenAIChatModel`` and
friends: they map these blocks to each provider's parts). The user sends a
screenshot and a PDF; the model asks for a chart; the ``chart`` tool draws a
tiny PNG (made here, with the standard library) and returns it as an
``ImageBlock``; the model answers. The session's log is written to a file and
read back, and ``replay`` shows each block in one line: by kind, media type,
size and hash, never its bytes.

    python docs/examples/image_agent.py
"""

from __future__ import annotations

import struct
import tempfile
import zlib
from pathlib import Path

from agentloop import (
    DocumentBlock,
    EventLog,
    FunctionModel,
    ImageBlock,
    ModelRequest,
    ScriptedResponse,
    TextBlock,
    ToolCall,
    UserMessage,
    content_text,
    run,
    tool,
)
from replay import read_log, replay, summarize, write_log


def png(width: int, height: int, rgb: tuple[int, int, int]) -> bytes:
    """A one-colour PNG of ``width`` x ``height`` pixels."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    row = b"\x00" + bytes(rgb) * width
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(row * height))
        + chunk(b"IEND", b"")
    )


@tool
def chart(title: str) -> list[TextBlock | ImageBlock]:
    """Draw a bar chart of the quarter's numbers."""
    return [TextBlock(f"chart: {title}"), ImageBlock("image/png", data=png(4, 3, (0, 128, 255)))]


def model(request: ModelRequest) -> ScriptedResponse | str:
    """Ask for a chart once, then describe what came back."""
    last = request.messages[-1]
    if last.id == "u1":
        return ScriptedResponse.tool_calls("r1", ToolCall("c1", "chart", {"title": "Q3"}))
    return f"I drew it: {content_text(last.content)}"


screenshot = ImageBlock("image/png", data=png(2, 2, (255, 0, 0)), name="screenshot.png")
report = DocumentBlock("application/pdf", data=b"%PDF-1.4\n%%EOF\n", name="report.pdf")
question = UserMessage("u1", (TextBlock("Chart Q3 from these."), screenshot, report))

log = EventLog()
result = run([question], model=FunctionModel(model), tools=[chart], log=log)
print(result.final_text)  # I drew it: chart: Q3[image image/png, 72 bytes]

with tempfile.TemporaryDirectory() as folder:
    path = Path(folder) / "session.jsonl"
    write_log(path, log)
    events = read_log(path)
assert replay(events).result == result  # the file replays: no model, no tool
for event in events:
    if event.type in ("message.accepted", "tool.result"):
        print(event.type, summarize(event))
