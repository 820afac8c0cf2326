"""A long session for the context-window tests (DESIGN §27): a model that reads
pages for ``STEPS`` steps against a ``WINDOW``-token window.

The model is a :class:`~agentloop.FunctionModel`: each step it asks for the next
page (a tool result of about 2,400 characters), reports as its input tokens the
loop's own estimate of the request it got (so the recorded usage and the window
speak of the same tokens), answers a ``purpose="compaction"`` request with a short
summary naming how many messages it summarised, and gives its final answer at
step ``STEPS``.

    python -m tests.context_session DB SESSION [--kill-at-compaction N]

runs the session durably in ``DB`` (a :class:`replay.SQLiteStore`);
``--kill-at-compaction N`` SIGKILLs the process in the middle of the N-th
compaction call (its request yielded and committed, no reply recorded).
"""

from __future__ import annotations

import argparse
import os
import signal
from typing import Any

import agentloop
from agentloop import (
    FunctionModel,
    Limits,
    ModelRequest,
    ScriptedResponse,
    SummarizeOlder,
    ToolCall,
    Usage,
    UserMessage,
    estimate_request,
    tool,
)

STEPS = 500
WINDOW = 20_000
POLICY = SummarizeOlder(at=0.75, keep=0.25)
MESSAGES = (UserMessage("u1", "Read every page and tell me when you are done."),)


@tool
def read_page(n: int) -> str:
    """Read page n of the book."""
    return f"page {n}: " + f"line {n} of the book, a fairly long line of text. " * 48


def answer(request: ModelRequest) -> Any:
    usage = Usage(estimate_request(request.messages, request.system, request.tools), 12)
    if request.purpose == "compaction":
        return ScriptedResponse.text(
            f"s{request.step}",
            f"Pages read so far: up to the one before step {request.step} "
            f"({len(request.messages) - 1} messages summarised).",
            usage=usage,
        )
    if request.step >= STEPS:
        return ScriptedResponse.text(f"r{request.step}", "I read every page.", usage=usage)
    call = ToolCall(f"c{request.step}", "read_page", {"n": request.step})
    return ScriptedResponse.tool_calls(f"r{request.step}", call, usage=usage)


def options() -> dict[str, Any]:
    return {
        "tools": [read_page],
        "max_steps": STEPS,
        "limits": Limits(agent_steps=STEPS, context_tokens=WINDOW),
        "compaction": POLICY,
        "clock": lambda: 0.0,
    }


def main() -> int:
    import replay

    parser = argparse.ArgumentParser()
    parser.add_argument("db")
    parser.add_argument("session")
    parser.add_argument("--kill-at-compaction", type=int, default=0)
    args = parser.parse_args()
    calls = 0

    def killing(request: ModelRequest) -> Any:
        nonlocal calls
        if request.purpose == "compaction":
            calls += 1
            if calls == args.kill_at_compaction:
                print(f"killed at compaction {calls}", flush=True)
                os.kill(os.getpid(), signal.SIGKILL)
        return answer(request)

    with replay.SQLiteStore(args.db) as store:
        result = replay.run_durable(
            store,
            args.session,
            list(MESSAGES),
            model=FunctionModel(killing),
            owner="context-worker",
            **options(),
        )
    assert isinstance(result, agentloop.RunResult)
    print(f"{result.status} {result.steps}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
