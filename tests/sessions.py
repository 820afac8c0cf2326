"""Generated sessions for crash tests: a seed gives a run, its replies and its log.

Self-contained (only agentloop and the standard library): the SIGKILL tests run
this file's source in a child process.
"""

from __future__ import annotations

import random
from typing import Any

from agentloop import (
    AgentLoop,
    Budget,
    CallerProtocolError,
    Cancel,
    ModelChunk,
    ModelFailure,
    ModelRequest,
    ModelResponse,
    Pause,
    Resume,
    TextBlock,
    ToolCall,
    ToolRequest,
    ToolResult,
    ToolSpec,
    UserMessage,
    agent_loop,
)

TOOLS = (ToolSpec("add"), ToolSpec("guarded", requires_approval=True))


class Session:
    """One generated run: its options, and the replies it got, in order."""

    def __init__(self, seed: int) -> None:
        rng = random.Random(seed)
        self.seed = seed
        self.messages = [UserMessage(f"u{i}", f"question {i}") for i in range(rng.randint(1, 3))]
        limit = rng.choice([None, None, 1, 2])
        self.options: dict[str, Any] = {
            "tools": TOOLS,
            "max_steps": rng.randint(2, 4),
            "budget": None if limit is None else Budget(max_tool_calls=limit),
            "started_at": 100.0,
        }
        self.replies: list[Any] = []
        self._rng = rng
        self._plans: dict[str, list[Any]] = {}
        self._clock = 100.0
        loop = self.loop()
        effect: Any = next(loop)
        try:
            while True:
                reply = self._reply(effect)
                self.replies.append(reply)
                effect = loop.send(reply)
        except (StopIteration, CallerProtocolError):
            pass
        assert loop.result is not None
        self.result = loop.result
        self.events = list(loop.log)

    def loop(self) -> AgentLoop:
        return agent_loop(self.messages, **self.options)

    # ------------------------------------------------------------------ replies

    def _at(self) -> float:
        self._clock += 0.5
        return self._clock

    def _reply(self, effect: Any) -> Any:
        rng = self._rng
        ending = rng.random()
        if type(effect) is ModelRequest:
            plan = self._plans.get(effect.id)
            if plan is None:
                plan = self._plans[effect.id] = self._plan(effect)
            return plan.pop(0)
        if ending < 0.04:
            return Cancel(reason=rng.choice(["", "user stop"]), at=self._at())
        if ending < 0.09:
            return ModelResponse("request-999", "x", (), "stop", at=self._at())  # misuse
        if type(effect) is ToolRequest:
            content = f"result {rng.randint(0, 99)}"
            return ToolResult(effect.call.id, content, rng.random() < 0.2, at=self._at())
        assert type(effect) is Pause
        if effect.reason == "approval":
            return Resume({"approved": rng.random() < 0.7, "message": "no"}, at=self._at())
        return Resume(budget=rng.choice([None, Budget(max_tool_calls=3)]), at=self._at())

    def _plan(self, request: ModelRequest) -> list[Any]:
        """The replies to one model request: chunks, then the final answer."""
        rng = self._rng
        step = request.step
        ending = rng.random()
        if ending < 0.04:
            return [Cancel(reason="", at=self._at())]
        if ending < 0.07:
            return [ModelFailure(request.id, "overloaded", at=self._at())]
        if ending < 0.12:  # a chunk for another request: the model's fault
            return [ModelChunk("request-999", TextBlock("?"), at=self._at())]
        blocks: list[Any] = []
        if rng.random() < 0.8:
            blocks.append(TextBlock(f"thinking about step {step}"))
        calls = rng.choice([0, 1, 1, 2]) if step < 4 else 0
        for index in range(calls):
            name = rng.choice(["add", "add", "guarded"])
            blocks.append(ToolCall(f"c{step}-{index}", name, {"n": index}))
        if not blocks:
            blocks.append(TextBlock("done"))
        stop = "tool_call" if calls else "stop"
        plan: list[Any] = []
        if rng.random() < 0.6:
            for block in blocks:
                if type(block) is TextBlock:
                    half = len(block.text) // 2
                    plan.append(ModelChunk(request.id, TextBlock(block.text[:half]), at=self._at()))
                    plan.append(ModelChunk(request.id, TextBlock(block.text[half:]), at=self._at()))
                else:
                    plan.append(ModelChunk(request.id, block, at=self._at()))
        plan.append(ModelResponse(request.id, f"r{step}", tuple(blocks), stop, at=self._at()))
        return plan
