"""Small helpers for driving the raw generator in tests (and killing child processes)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from agentloop import (
    AgentLoop,
    Block,
    Effect,
    Event,
    ModelChunk,
    ModelResponse,
    Reply,
    RunResult,
    TextBlock,
    ToolCall,
    ToolSpec,
    Usage,
)

ADD = ToolSpec(
    "add",
    "Add two integers.",
    {
        "type": "object",
        "properties": {"left": {"type": "integer"}, "right": {"type": "integer"}},
        "required": ["left", "right"],
    },
)
ECHO = ToolSpec("echo", "Echo the text.", {"type": "object"})


def call(name: str, call_id: str, **arguments: Any) -> ToolCall:
    return ToolCall(call_id, name, arguments)


def response(
    request_id: str,
    response_id: str,
    *content: Block | str,
    stop: str | None = None,
    usage: Usage | None = None,
    at: float | None = None,
) -> ModelResponse:
    blocks = tuple(TextBlock(b) if isinstance(b, str) else b for b in content)
    if stop is None:
        stop = "tool_call" if any(type(b) is ToolCall for b in blocks) else "stop"
    return ModelResponse(request_id, response_id, blocks, stop, usage, at)


def chunks(request_id: str, *content: Block | str) -> list[ModelChunk]:
    return [ModelChunk(request_id, TextBlock(b) if isinstance(b, str) else b) for b in content]


def drive(loop: AgentLoop, replies: Iterable[Reply]) -> tuple[list[Effect], RunResult]:
    """Prime ``loop``, send ``replies`` in order; return the effects and the result.

    Fails if the replies run out before the loop finishes.
    """
    effects = [next(loop)]
    for reply in replies:
        try:
            effects.append(loop.send(reply))
        except StopIteration as stop:
            check_log(loop.log.events)
            return effects, stop.value
    raise AssertionError(f"loop still waiting on {effects[-1]!r} after the last reply")


def finish(loop: AgentLoop, replies: Iterable[Reply]) -> RunResult:
    return drive(loop, replies)[1]


def nested(depth: int) -> dict[str, Any]:
    """A dict ``depth`` levels deep (the root counts 1): {"a": {"a": ... {}}}."""
    value: dict[str, Any] = {}
    for _ in range(depth - 1):
        value = {"a": value}
    return value


def check_log(events: Sequence[Event]) -> None:
    """Sequences 0..n-1 without gaps; exactly one run.finished, and it is last."""
    assert [e.sequence for e in events] == list(range(len(events)))
    assert [e.type for e in events].count("run.finished") == 1
    assert events[-1].type == "run.finished"


def types(loop: AgentLoop) -> list[str]:
    return [e.type for e in loop.log]


ROOT = Path(__file__).resolve().parent.parent


def subprocess_env(**extra: str) -> dict[str, str]:
    """The environment for a child ``python`` that imports this checkout."""
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, "PYTHONPATH": path, **extra}


@contextlib.contextmanager
def sigkilled(code: str, *arguments: str) -> Iterator[subprocess.Popen[bytes]]:
    """Run ``python -c code arguments`` from the checkout; SIGKILL it when the block
    ends (unless it died already) and check that SIGKILL is what ended it."""
    env = subprocess_env()
    child = subprocess.Popen(
        [sys.executable, "-c", code, *arguments],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=ROOT,
        env=env,
    )
    try:
        yield child
        if child.poll() is None:
            os.kill(child.pid, signal.SIGKILL)
        returncode = child.wait(timeout=60)
        stderr = child.stderr.read() if child.stderr is not None else b""
        assert returncode == -signal.SIGKILL, stderr.decode(errors="replace")
    finally:
        if child.poll() is None:  # pragma: no cover - only when a test fails
            child.kill()
            child.wait()
        for stream in (child.stdout, child.stderr):
            if stream is not None:
                stream.close()
