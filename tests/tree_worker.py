"""A worker process for ``tests/test_agent_tree_crash.py``: the research tree of
DESIGN §26 (a parent delegating to a search agent, then to a writer agent whose
``publish`` needs an approval), run with ``replay.run_durable`` over a store file.

    python tests/tree_worker.py DB STATE KILL_AT

``STATE`` is a folder shared by the processes of one scenario: ``points`` counts
the kill points passed so far (across processes), ``calls`` gets a line per model
call (``<agent> <step>``) and ``effects`` one per tool side effect. The process
SIGKILLs itself at the ``KILL_AT``-th point (0: never). It prints the outcome:
``parked``, or ``completed <final text> <input tokens> <output tokens>``.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import agentloop as al
import replay
from agentloop import FunctionModel, ModelRequest, ToolCall, Usage, UserMessage
from agentloop import ScriptedResponse as R

DB, STATE, KILL_AT = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3])
TASK = [UserMessage("u1", "write about cats")]


def _append(name: str, line: str) -> None:
    with open(STATE / name, "a") as file:
        file.write(line + "\n")
        file.flush()
        os.fsync(file.fileno())


def point() -> None:
    """A kill point: the scenario's KILL_AT-th one kills this process."""
    counter = STATE / "points"
    passed = int(counter.read_text()) + 1 if counter.exists() else 1
    counter.write_text(str(passed))
    if passed == KILL_AT:
        os.kill(os.getpid(), signal.SIGKILL)


def counted(agent: str, fn: object) -> FunctionModel:
    def model(request: ModelRequest) -> R:
        point()
        _append("calls", f"{agent} {request.step}")
        response: R = fn(request)  # type: ignore[operator]
        point()
        return response

    return FunctionModel(model)


@al.tool
def search(query: str) -> str:
    """Search the web."""
    point()
    _append("effects", f"search {query}")
    point()
    return f"results for {query}"


@al.tool(requires_approval=True)
def publish(text: str) -> str:
    """Publish a text (a human approves first)."""
    point()
    _append("effects", f"publish {text}")
    point()
    return "published"


def searching(request: ModelRequest) -> R:
    if request.step == 1:
        return R.tool_calls("s1", ToolCall("k1", "search", {"query": "cats"}), usage=Usage(3, 1))
    return R.text("s2", "cats purr", usage=Usage(5, 2))


def writing(request: ModelRequest) -> R:
    if request.step == 1:
        return R.tool_calls("w1", ToolCall("k1", "publish", {"text": "cats"}), usage=Usage(4, 1))
    return R.text("w2", "published it", usage=Usage(6, 2))


def researching(request: ModelRequest) -> R:
    if request.step == 1:
        call = ToolCall("c1", "searcher", {"task": "find cats"})
        return R.tool_calls("p1", call, usage=Usage(10, 1))
    if request.step == 2:
        call = ToolCall("c2", "writer", {"task": "write it up"})
        return R.tool_calls("p2", call, usage=Usage(12, 1))
    return R.text("p3", "done", usage=Usage(20, 2))


def main() -> None:
    tools = [
        al.agent_tool(
            "searcher", "Searches.", model=counted("searcher", searching), tools=[search]
        ),
        al.agent_tool("writer", "Writes.", model=counted("writer", writing), tools=[publish]),
    ]
    with replay.SQLiteStore(DB) as store:
        outcome = replay.run_durable(
            store, "research", TASK, model=counted("research", researching), tools=tools
        )
    if isinstance(outcome, replay.Parked):
        print("parked", flush=True)
        return
    usage = outcome.usage
    print(f"{outcome.status} {outcome.final_text} {usage.input_tokens} {usage.output_tokens}")


if __name__ == "__main__":
    main()
