"""Small helpers for driving the raw generator in tests (and killing child processes),
and the scaffolding the driver tests share: the ``add`` tools, the one-call script
(``USER``, ``ADD_CALL``, ``script()``) and a deterministic clock."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from hypothesis import settings

from agentloop import (
    AgentLoop,
    Block,
    Effect,
    Event,
    EventLog,
    ModelChunk,
    ModelResponse,
    Reply,
    RunResult,
    ScriptedModel,
    ScriptedResponse,
    TextBlock,
    ToolCall,
    ToolSpec,
    Usage,
    UserMessage,
    encode_event,
    run,
    tool,
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


def examples(count: int) -> int:
    """A property's example count, scaled by the Hypothesis profile in use: ``count``
    under the suite's own profile (Hypothesis' default of 100 examples), a fifth of it
    (at least 10) under ``--hypothesis-profile=secondary``, which `.ci/run` uses on the
    Pythons other than its main one (tests/conftest.py)."""
    return max(10, count * settings.default.max_examples // 100)


# --------------------------------------------------------------------------- driver scaffolding


@tool
def add(left: int, right: int) -> dict[str, int]:
    """Add two integers."""
    return {"sum": left + right}


@tool(name="add")
def add_int(left: int, right: int) -> int:
    """Add two integers."""
    return left + right


@tool(name="add")
def add_ab(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


USER = UserMessage("u1", "What is 20 + 22?")
ADD_CALL = ToolCall("c1", "add", {"left": 20, "right": 22})


def script() -> list[ScriptedResponse]:
    """One ``add`` call, then the answer: the run the driver tests start from."""
    return [
        ScriptedResponse.tool_calls("r1", ADD_CALL, text="Let me add.", usage=Usage(10, 5)),
        ScriptedResponse.text("r2", "20 + 22 = 42", usage=Usage(20, 7)),
    ]


class Ticker:
    """A deterministic clock: 100.0, 101.0, 102.0, ..."""

    def __init__(self, start: float = 100.0) -> None:
        self.now = start - 1

    def __call__(self) -> float:
        self.now += 1
        return self.now


def encoded(log: Iterable[Event]) -> list[bytes]:
    return [encode_event(event) for event in log]


def reference() -> tuple[RunResult, EventLog]:
    """``script()`` run by ``run()`` with ``add`` and a ``Ticker``: the log to agree with."""
    log = EventLog()
    result = run([USER], model=ScriptedModel(script()), tools=[add], log=log, clock=Ticker())
    return result, log


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


def quick_bench(script: str, out: Path, timeout: float) -> subprocess.CompletedProcess[str]:
    """Run ``bench/<script> --quick --json <out>`` in ``out``'s folder; stdout, stderr as text."""
    return subprocess.run(
        [sys.executable, str(ROOT / "bench" / script), "--quick", "--json", str(out)],
        cwd=out.parent,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


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
