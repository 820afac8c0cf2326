"""LangGraph's worker: the prebuilt ReAct agent over a scripted chat model, ``.invoke``.

``langgraph.prebuilt.create_react_agent`` is LangGraph's own prebuilt agent (a
``StateGraph`` of a model node and a ``ToolNode``). LangGraph 1.x marks it
deprecated in favour of ``langchain.agents.create_agent``, which lives in the
separate ``langchain`` package and is built on the same graph runtime; the
deprecation warning is silenced here.

The chat model is a minimal langchain-core ``BaseChatModel`` subclass that
returns scripted ``AIMessage`` objects with tool calls (``GenericFakeChatModel``
cannot bind tools, which the agent requires); ``bind_tools`` returns the model
itself, as langchain's own ``FakeToolCallingModel`` test double does. The graph
is compiled once; ``recursion_limit`` is raised for the 50- and 64-step runs
(the default, 25 graph steps, stops a run after 12 model calls).
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Awaitable, Callable, Sequence
from importlib.metadata import version
from typing import Any

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import AIMessage, AnyMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import StructuredTool

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from langgraph.prebuilt import create_react_agent

from ._harness import (
    ADD_ARGS,
    FINAL_TEXT,
    USER_TEXT,
    RunFactory,
    add,
    call_id,
    history_plan,
    on_one_event_loop,
    worker_main,
)

FRAMEWORK = "langgraph"
CONFIG: RunnableConfig = {"recursion_limit": 1000}


class ScriptedChatModel(BaseChatModel):
    """Answers each call with the next scripted message: add() calls, then text."""

    steps: int = 2
    step: int = 0

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def reset(self, steps: int) -> None:
        self.steps, self.step = steps, 0

    def bind_tools(self, tools: Any, **kwargs: Any) -> ScriptedChatModel:
        return self

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        self.step += 1
        if self.step < self.steps:
            call = {"name": "add", "args": dict(ADD_ARGS), "id": call_id(self.step)}
            message = AIMessage(content="", tool_calls=[{**call, "type": "tool_call"}])
        else:
            message = AIMessage(content=FINAL_TEXT)
        return ChatResult(generations=[ChatGeneration(message=message)])

    async def _agenerate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: Any = None,
        **kwargs: Any,
    ) -> ChatResult:
        # The default runs _generate in a worker thread: answer on the event loop.
        return self._generate(messages, stop, None, **kwargs)


MODEL = ScriptedChatModel()


async def _async_add(left: int, right: int) -> dict[str, int]:
    return add(left, right)


ADD_TOOL = StructuredTool.from_function(
    add, coroutine=_async_add, name="add", description="Add two integers."
)
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    GRAPH = create_react_agent(MODEL, [ADD_TOOL])


def versions() -> dict[str, str]:
    return {"langgraph": version("langgraph"), "langchain-core": version("langchain-core")}


def history(size: int) -> list[AnyMessage]:
    """``size`` earlier messages as langchain-core messages (with ids, as after a run)."""
    messages: list[AnyMessage] = []
    for kind, i in history_plan(size):
        if kind == "user":
            messages.append(HumanMessage(f"question {i}", id=f"u{i}"))
        elif kind == "call":
            call = {"name": "add", "args": {"left": i, "right": 1}, "id": f"old-{i}"}
            tool_calls = [{**call, "type": "tool_call"}]
            messages.append(AIMessage("", id=f"a{i}", tool_calls=tool_calls))
        elif kind == "result":
            result = f'{{"sum":{i + 1}}}'
            messages.append(ToolMessage(result, tool_call_id=f"old-{i}", id=f"t{i}"))
        else:
            messages.append(AIMessage(f"answer {i}", id=f"b{i}"))
    return messages


def make(size: int, steps: int) -> Callable[[], str]:
    earlier = history(size)

    def run() -> str:
        MODEL.reset(steps)
        state = GRAPH.invoke({"messages": [*earlier, HumanMessage(USER_TEXT)]}, CONFIG)
        text: str = state["messages"][-1].content
        return text

    return run


def make_async(size: int, steps: int) -> Callable[[], Awaitable[str]]:
    earlier = history(size)

    async def run() -> str:
        MODEL.reset(steps)
        state = await GRAPH.ainvoke({"messages": [*earlier, HumanMessage(USER_TEXT)]}, CONFIG)
        text: str = state["messages"][-1].content
        return text

    return run


def variants() -> dict[str, RunFactory]:
    return {"create_react_agent .invoke": make}


def async_variants() -> dict[str, RunFactory]:
    return {"create_react_agent .ainvoke": on_one_event_loop(make_async)}


def main(argv: Sequence[str] | None = None) -> int:
    return worker_main(FRAMEWORK, versions, variants, async_variants=async_variants, argv=argv)


if __name__ == "__main__":
    sys.exit(main())
