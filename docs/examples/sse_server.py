"""Stream an agent's answer to a browser as server-sent events (stdlib only).

    python docs/examples/sse_server.py 8000    # then open http://127.0.0.1:8000/

``GET /chat?q=...`` runs the agent with ``run_stream`` in the request's thread and
forwards each text delta as one ``data:`` event, then ``event: done`` with the run's
status. ``GET /`` is a page that shows the deltas as they arrive (``EventSource``).
A client that goes away stops the run: the next write fails, the ``for`` loop is
left, and leaving ``run_stream`` early cancels the run (its log is finished).
"""

from __future__ import annotations

import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

from agentloop import (
    FunctionModel,
    ModelChunkEvent,
    ModelRequest,
    RunResult,
    TextBlock,
    UserMessage,
    run_stream,
)

PAGE = b"""<!doctype html><meta charset="utf-8"><title>agentloop</title>
<form><input name="q" value="Tell me about generators"><button>Ask</button></form><p id="out"></p>
<script>
document.querySelector("form").onsubmit = (e) => {
  e.preventDefault();
  const out = document.getElementById("out");
  out.textContent = "";
  const q = new FormData(e.target).get("q");
  const source = new EventSource("/chat?q=" + encodeURIComponent(q));
  source.onmessage = (m) => { out.textContent += JSON.parse(m.data); };
  source.addEventListener("done", () => source.close());
};
</script>
"""


def answer(request: ModelRequest) -> str:
    """Stands in for a real model (give ``run_stream`` an adapter instead)."""
    question = request.messages[-1].content  # the user's message
    return f"You asked: {question}. A generator yields effects; the caller sends replies."


model = FunctionModel(answer)


class Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        url = urlsplit(self.path)
        if url.path == "/":
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.end_headers()
            self.wfile.write(PAGE)
            return
        if url.path != "/chat":
            self.send_error(404)
            return
        question = parse_qs(url.query).get("q", [""])[0]
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.end_headers()
        items = run_stream([UserMessage("u1", question)], model=model, tools=[])
        try:
            for item in items:
                if isinstance(item, RunResult):
                    self.send_event(item.status, event="done")
                elif type(item) is ModelChunkEvent and type(item.chunk.block) is TextBlock:
                    self.send_event(item.chunk.block.text)
        except OSError:  # the client went away
            items.close()  # type: ignore[attr-defined]

    def send_event(self, data: str, event: str | None = None) -> None:
        head = f"event: {event}\n" if event else ""
        self.wfile.write(f"{head}data: {json.dumps(data)}\n\n".encode())
        self.wfile.flush()

    def log_message(self, format: str, *args: object) -> None:
        pass  # quiet


if __name__ == "__main__":
    server = ThreadingHTTPServer(
        ("127.0.0.1", int(sys.argv[1]) if len(sys.argv) > 1 else 8000), Handler
    )
    print(f"serving on http://127.0.0.1:{server.server_address[1]}/", flush=True)
    server.serve_forever()
