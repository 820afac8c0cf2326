"""The agent the example evaluation runs, in two variants (and a real one).

``python -m agentloop eval run docs/examples/evals/dataset.jsonl --agent
docs/examples/evals/agent.py:careful`` runs it offline: the models are functions of
the request (``FunctionModel``), standing in for two versions of a real model.
"""

from __future__ import annotations

import json

from agentloop import (
    FunctionModel,
    ModelRequest,
    ScriptedResponse,
    ToolCall,
    ToolResultMessage,
    Usage,
    tool,
)
from agentloop.evals import Agent, Pricing

SYSTEM = "You are a helpful assistant. Use the tools for arithmetic and weather."
PRICING = Pricing(input=0.40, output=1.60)  # dollars per million tokens


@tool
def add(left: int, right: int) -> dict[str, int]:
    """Add two integers."""
    return {"sum": left + right}


@tool
def get_weather(city: str) -> dict[str, object]:
    """Current weather for a city."""
    return {"city": city, "temp_c": {"Oslo": -3, "Paris": 18}.get(city, 20), "sky": "clear"}


TOOLS = [add, get_weather]


def _question(request: ModelRequest) -> str:
    return str(request.messages[0].content)


def _usage(request: ModelRequest) -> Usage:
    return Usage(input_tokens=40 * len(request.messages) + 60, output_tokens=18)


def careful_model(request: ModelRequest) -> ScriptedResponse:
    """Uses the tools, answers from their results."""
    question, last, step = _question(request), request.messages[-1], request.step
    usage = _usage(request)
    if type(last) is ToolResultMessage:
        data = json.loads(last.content)
        if "sum" in data:
            return ScriptedResponse.text(f"r{step}", f"20 + 22 = {data['sum']}.", usage)
        if "JSON" in question:
            answer = json.dumps({"city": data["city"], "temp_c": data["temp_c"]})
            return ScriptedResponse.text(f"r{step}", answer, usage)
        return ScriptedResponse.text(
            f"r{step}", f"It is {data['temp_c']} °C and {data['sky']} in {data['city']}.", usage
        )
    if "+" in question:
        call = ToolCall("c1", "add", {"left": 20, "right": 22})
        return ScriptedResponse.tool_calls(f"r{step}", call, usage=usage)
    if "weather" in question.lower():
        city = "Paris" if "Paris" in question else "Oslo"
        call = ToolCall("c1", "get_weather", {"city": city})
        return ScriptedResponse.tool_calls(f"r{step}", call, usage=usage)
    if "sky" in question:
        return ScriptedResponse.text(
            f"r{step}", "Rayleigh scattering: air scatters blue light more than red.", usage
        )
    return ScriptedResponse.text(f"r{step}", "Hello!", usage)


def hasty_model(request: ModelRequest) -> ScriptedResponse:
    """A cheaper model: does the sum in its head, announces its tool calls, guesses."""
    question, last, step = _question(request), request.messages[-1], request.step
    usage = Usage(input_tokens=30 * len(request.messages) + 40, output_tokens=12)
    if type(last) is ToolResultMessage:
        data = json.loads(last.content)
        if "JSON" in question:
            return ScriptedResponse.text(f"r{step}", json.dumps({"city": data["city"]}), usage)
        return ScriptedResponse.text(
            f"r{step}", f"It is {data['temp_c']} °C and {data['sky']} in {data['city']}.", usage
        )
    if "+" in question:
        return ScriptedResponse.text(f"r{step}", "That makes 42.", usage)
    if "weather" in question.lower():
        city = "Paris" if "Paris" in question else "Oslo"
        call = ToolCall("c1", "get_weather", {"city": city})
        return ScriptedResponse.tool_calls(f"r{step}", call, text="Let me look.", usage=usage)
    if "sky" in question:
        return ScriptedResponse.text(f"r{step}", "It reflects the ocean.", usage)
    return careful_model(request)  # the same answer, the same tokens


def judge_model(request: ModelRequest) -> str:
    """Stands in for a judge model: grades by whether the answer names the physics."""
    prompt = str(request.messages[-1].content)
    answer = prompt.split("Answer:\n", 1)[1]
    if "scatter" in answer.lower():
        return '{"score": 1.0, "reason": "names Rayleigh scattering"}'
    return '{"score": 0.1, "reason": "no scattering; the ocean is not why"}'


def careful() -> Agent:
    return Agent(
        FunctionModel(careful_model),
        tools=TOOLS,
        system=SYSTEM,
        judge=FunctionModel(judge_model),
        pricing=PRICING,
        name="careful",
    )


def hasty() -> Agent:
    return Agent(
        FunctionModel(hasty_model),
        tools=TOOLS,
        system=SYSTEM,
        judge=FunctionModel(judge_model),
        pricing=PRICING,
        name="hasty",
    )


def real() -> Agent:  # needs the openai extra, OPENAI_API_KEY and the network
    """The same agent on a real provider (docs/evals.md, "A real model")."""
    import openai

    from agentloop.models.openai import OpenAIChatModel

    client = openai.AsyncOpenAI()  # reads OPENAI_API_KEY
    return Agent(
        OpenAIChatModel(client, "gpt-4.1-mini"),
        tools=TOOLS,
        system=SYSTEM,
        judge=OpenAIChatModel(client, "gpt-4.1"),
        pricing=PRICING,
        name="gpt-4.1-mini",
    )
