"""``docs/drivers.md`` runs: the resume-in-another-process example (two real processes,
the first SIGKILLed mid-session) and the server-sent-events web example. (Every
```` ```python ```` block runs on its own in tests/test_docs_blocks.py.)"""

from __future__ import annotations

import http.client
import json
import runpy
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import replay
from agentloop import EventLog, RunResult, ToolCallEvent, UserMessage, run, run_stream

from .helpers import subprocess_env

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "drivers.md"
EXAMPLES = ROOT / "docs" / "examples"
RESUME = EXAMPLES / "resume_session.py"
SSE = EXAMPLES / "sse_server.py"
INCLUDE = "<!-- include: docs/examples/resume_session.py -->"
END = "<!-- end include -->"


def page() -> str:
    return PAGE.read_text(encoding="utf-8")


def included() -> str:
    text = page()
    assert text.count(INCLUDE) == 1 and text.count(END) == 1
    return text.split(INCLUDE, 1)[1].split(END, 1)[0]


def test_the_page_includes_the_resume_example_verbatim() -> None:
    assert included().strip() == f"```python\n{RESUME.read_text(encoding='utf-8')}```"


# --------------------------------------------------------------------------- resume


def uninterrupted() -> RunResult:
    agent = runpy.run_path(str(EXAMPLES / "adder_agent.py"))
    return run(
        [UserMessage("u1", "What is 1 + 2 + 3?")], model=agent["model"], tools=agent["tools"]
    )


def wait_for(path: Path, kind: type, deadline: float) -> None:
    while time.monotonic() < deadline:
        if path.exists():
            try:
                if any(type(event) is kind for event in replay.read_log(path)):
                    return
            except replay.LogError:
                pass  # a line being written: look again
        time.sleep(0.02)
    raise AssertionError(f"{path} never recorded a {kind.__name__}")


def test_a_session_killed_mid_run_is_finished_by_another_process(tmp_path: Path) -> None:
    log = tmp_path / "session.jsonl"
    first = subprocess.Popen(
        [sys.executable, str(RESUME), str(log)],
        env=subprocess_env(ADD_SECONDS="60"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        wait_for(log, ToolCallEvent, time.monotonic() + 60)  # the tool is running
    finally:
        first.send_signal(signal.SIGKILL)
        first.communicate()
    assert first.returncode == -signal.SIGKILL
    events = replay.read_log(log)
    assert events[-1].type == "tool.call"  # killed mid-session: no run.finished

    second = subprocess.run(
        [sys.executable, str(RESUME), str(log)],
        env=subprocess_env(ADD_SECONDS="0"),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert second.returncode == 0, second.stderr
    assert second.stdout == "1 + 2 + 3 = 6\n"
    finished = replay.replay(replay.read_log(log))  # one log, both processes' events
    assert finished.result == uninterrupted()
    assert len(finished.events) > len(events)


# --------------------------------------------------------------------------- web


def test_the_sse_example_streams_text_deltas_to_a_client() -> None:
    server = subprocess.Popen(
        [sys.executable, str(SSE), "0"],
        env=subprocess_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None
        line = server.stdout.readline()
        assert line.startswith("serving on http://127.0.0.1:"), line
        port = int(line.rsplit(":", 1)[1].strip("/\n"))
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        connection.request("GET", "/")
        index = connection.getresponse()
        assert index.status == 200 and b"EventSource" in index.read()
        connection.request("GET", "/chat?q=what%20is%20a%20generator")
        response = connection.getresponse()
        assert response.status == 200
        assert response.getheader("Content-Type") == "text/event-stream"
        events = parse_sse(response.read().decode())
        connection.request("GET", "/nowhere")
        missing = connection.getresponse()
        assert missing.status == 404
        missing.read()
        connection.close()
    finally:
        server.send_signal(signal.SIGTERM)
        server.communicate(timeout=30)
    deltas = [json.loads(data) for kind, data in events if kind == "message"]
    assert len(deltas) >= 2  # streamed, not sent in one piece
    assert "".join(deltas).startswith("You asked: what is a generator.")
    assert events[-1] == ("done", '"completed"')


def parse_sse(body: str) -> list[tuple[str, str]]:
    events: list[tuple[str, str]] = []
    for block in body.split("\n\n"):
        if not block:
            continue
        fields: dict[str, Any] = dict(line.split(": ", 1) for line in block.split("\n"))
        events.append((fields.get("event", "message"), fields["data"]))
    return events


def test_the_sse_example_cancels_the_run_when_the_client_leaves() -> None:
    module = runpy.run_path(str(SSE))
    handler_type = module["Handler"]
    logs: list[EventLog] = []

    def run_stream_with_log(*args: Any, **options: Any) -> Any:
        logs.append(EventLog())
        return run_stream(*args, log=logs[-1], **options)

    handler_type.do_GET.__globals__["run_stream"] = run_stream_with_log
    handler = object.__new__(handler_type)
    sent: list[str] = []

    def send_event(data: str, event: str | None = None) -> None:
        sent.append(data)
        raise BrokenPipeError  # the browser tab was closed

    handler.send_event = send_event
    handler.path = "/chat?q=hi"
    handler.send_response = lambda code: None
    handler.send_header = lambda name, value: None
    handler.end_headers = lambda: None
    handler.do_GET()
    assert len(sent) == 1
    assert logs[0][-1].type == "run.finished" and logs[0][-1].reason == "closed"
