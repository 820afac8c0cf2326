"""The model and tools the Temporal tests (and their worker processes) run.

Everything here is deterministic and stateless across processes: the model's
answer is a function of the request (:class:`agentloop.FunctionModel`), so a
worker started after another one was killed answers the same way.

The model reads its script from the system prompt: ``"add N"`` asks for ``add``
N times (one call per step) then answers; ``"pair N"`` asks for ``add`` twice in
each of N steps (two calls in one response) then answers; ``"note"`` asks for
``slow_note`` once; ``"slow-model"`` answers at once, except the first time, when
it writes a mark and takes a long time (the kill test kills its worker then);
``"approve"`` asks for ``guarded`` (a tool that requires approval); ``"json"``
answers ``{"total": <messages so far>}`` (for :class:`OutputWorkflow`) after a
first answer that is not JSON.
"""

from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path
from typing import Any

import msgspec
from temporalio import workflow
from temporalio.common import RawValue

from agentloop import (
    FunctionModel,
    HookRegistry,
    ModelRequest,
    ScriptedResponse,
    ToolCall,
    ToolResultMessage,
    Usage,
    UserMessage,
    idempotency_key,
    tool,
)
from agentloop.temporal import AgentLoopWorkflow

#: Where ``slow_note`` writes its side effect (one file per idempotency key).
NOTES_DIR = "AGENTLOOP_TEST_NOTES"


# tests.helpers.add again, kept here: the workflow sandbox re-imports this module, and
# tests.helpers would bring subprocess, signal and the driver scaffolding in with it.
@tool
def add(left: int, right: int) -> dict[str, int]:
    """Add two integers."""
    return {"sum": left + right}


@tool
def slow_note(text: str) -> str:
    """Write a note (once per idempotency key), then take a long time."""
    notes = Path(os.environ[NOTES_DIR])
    key = idempotency_key()
    done = notes / (key.replace("/", "_") + ".done")
    if done.exists():
        return f"already noted: {done.read_text()}"
    done.write_text(f"{text} (pid {os.getpid()})")
    (notes / "started").write_text(key)
    # The worker is killed while it waits here; the retry on the next worker
    # finds the note and returns at once.
    time.sleep(float(os.environ.get("AGENTLOOP_TEST_NOTE_SECONDS", "0")))
    return f"noted: {text}"


@tool(requires_approval=True)
def guarded(target: str) -> str:
    """Do something that needs a human's approval."""
    return f"done to {target}"


TOOLS = [add, slow_note, guarded]


def answer(request: ModelRequest) -> ScriptedResponse:
    """The scripted model: see the module docstring."""
    script = (request.system or "add 1").split()
    count = len(request.messages)
    last = request.messages[-1]
    usage = Usage(input_tokens=count, output_tokens=1)
    calls = sum(type(m) is ToolResultMessage for m in request.messages)
    if script[0] == "add" and calls < int(script[1]):
        call = ToolCall(f"call-{count}", "add", {"left": calls, "right": 40 + calls})
        text = f"Step {calls + 1}."
        return ScriptedResponse.tool_calls(f"r{count}", call, text=text, usage=usage)
    if script[0] == "pair" and calls < 2 * int(script[1]):
        pair = [
            ToolCall(f"call-{count}-{i}", "add", {"left": calls + i, "right": 40}) for i in (0, 1)
        ]
        return ScriptedResponse.tool_calls(f"r{count}", *pair, usage=usage)
    if script[0] == "note" and type(last) is UserMessage:
        call = ToolCall(f"call-{count}", "slow_note", {"text": last.content})
        return ScriptedResponse.tool_calls(f"r{count}", call, usage=usage)
    if script[0] == "slow-model":
        first = Path(os.environ[NOTES_DIR]) / "started"
        if not first.exists():
            first.write_text("model")
            time.sleep(float(os.environ.get("AGENTLOOP_TEST_NOTE_SECONDS", "0")))
        seen = _blobs(request.messages[0].content)
        return ScriptedResponse.text(f"r{count}", f"Done: answered{seen}", usage=usage)
    if script[0] == "json":
        text = "forty-two" if count == 1 else f'{{"total": {count}}}'
        return ScriptedResponse.text(f"r{count}", text, usage=usage)
    if script[0] == "approve" and type(last) is UserMessage:
        call = ToolCall(f"call-{count}", "guarded", {"target": "prod"})
        return ScriptedResponse.tool_calls(f"r{count}", call, usage=usage)
    content = last.content if type(last) is ToolResultMessage else "nothing to do"
    return ScriptedResponse.text(f"r{count}", f"Done: {content}", usage=usage)


MODEL = FunctionModel(answer)


def _blobs(content: Any) -> str:
    """The SHA-256 (first 12 digits) of each media block's bytes in ``content``."""
    if type(content) is str:
        return ""
    digests = [hashlib.sha256(p.data).hexdigest()[:12] for p in content if hasattr(p, "data")]
    return f" (saw {', '.join(digests)})"


# --------------------------------------------------------------------------- hooks


def _rewrite(payload: dict[str, Any]) -> None:
    """before_plan: step 2 sees its first message rewritten, step 3 another system."""
    if payload["step"] == 2:
        messages = list(payload["messages"])
        first = messages[0]
        messages[0] = UserMessage(first.id, first.content + " (rewritten)")
        payload["messages"] = messages
    elif payload["step"] == 3:
        payload["system"] = payload["system"] + " (step 3)"


def hooks() -> HookRegistry:
    registry = HookRegistry()
    registry.on("before_plan", _rewrite)
    return registry


@workflow.defn(name="agentloop-hooked")
class HookedWorkflow(AgentLoopWorkflow):
    """Sessions with :func:`hooks`: what docs/durable.md tells users to write."""

    def hooks(self) -> HookRegistry:
        return hooks()

    @workflow.run  # Temporal wants the run method on each workflow class
    async def run(self, session: RawValue) -> RawValue:
        return await super().run(session)


class Total(msgspec.Struct):
    """The structured output of :class:`OutputWorkflow`'s sessions."""

    total: int


@workflow.defn(name="agentloop-output")
class OutputWorkflow(AgentLoopWorkflow):
    """Sessions whose final answer must decode to :class:`Total`."""

    def output(self) -> Any:
        return Total

    @workflow.run
    async def run(self, session: RawValue) -> RawValue:
        return await super().run(session)


class Finding(msgspec.Struct):
    """The structured output of the ``analyst`` agent tool's child sessions."""

    sum: int
    task: str


@workflow.defn(name="agentloop-agents")
class AgentsWorkflow(AgentLoopWorkflow):
    """Sessions whose ``analyst`` agent tool has :func:`hooks` and the output type
    :class:`Finding`: the workflow class gives them to its child sessions."""

    def agent_hooks(self, agent: str) -> HookRegistry | None:
        return hooks() if agent == "analyst" else None

    def agent_output(self, agent: str) -> Any:
        return Finding if agent == "analyst" else None

    @workflow.run
    async def run(self, session: RawValue) -> RawValue:
        return await super().run(session)


# --------------------------------------------------------------------------- compaction


class EveryFewMessages:
    """A compaction policy of one's own: once the view holds 7 messages or more,
    summarise all but its last few (at a cut that keeps calls with their results)."""

    def decide(self, state: Any) -> Any:
        from agentloop import Summarize

        first = 1 if state.summarized else 0
        size = len(state.messages) - first
        if size < 7:
            return None
        cuts = [c for c in state.cuts() if state.start < c <= state.start + size - 3]
        return Summarize(cuts[-1], "summarise") if cuts else None

    def spec(self) -> dict[str, Any]:
        return {"policy": "every_few_messages"}


@workflow.defn(name="agentloop-compacting")
class CompactingWorkflow(AgentLoopWorkflow):
    """Sessions with :class:`EveryFewMessages` (a policy that is not a built-in)."""

    def compaction(self) -> Any:
        return EveryFewMessages()

    @workflow.run
    async def run(self, session: RawValue) -> RawValue:
        return await super().run(session)
