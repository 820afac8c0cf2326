"""The session the durable crash tests run: a model, tools with side effects, points.

Shared by the tests and by ``tests/durable_worker.py`` (the worker process they
kill). Everything is deterministic given the request, so a session resumed by a
new process continues exactly as an uninterrupted one would:

- step 1: ``raw_effect`` (c1) and ``keyed_effect`` (c2) in one step;
- step 2: ``approved_effect`` (c3), which requires approval (a pause);
- step 3: ``raw_effect`` (c4);
- step 4: the final text.

Each tool appends a line ``<tool>\\t<idempotency key>`` to the markers file: its
side effect. ``keyed_effect`` writes only if its key is not there yet (an
idempotent tool); the others write every time they run (at-least-once). Before a
side effect a tool appends ``start\\t<key>`` to the *journal* (one per worker
process), and the worker appends ``commit`` after every commit: what was in
flight when a worker died is what it started after its last commit.

``point(label)`` is called at every place the tests may kill a worker.

The same session runs under ``replay.run_durable`` and ``replay.arun_durable``
(``run_session(..., asynchronous=True)``): the model streams through ``stream`` or
``astream``, and the async worker's tools are ``async def`` twins of the sync ones
(the same specs), so workers of both kinds can take turns on one session.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from typing import Any

import agentloop
import replay
from agentloop import (
    FunctionModel,
    ModelChunk,
    ModelFailure,
    ModelRequest,
    ModelResponse,
    Resume,
    ScriptedResponse,
    ToolCall,
    Usage,
    UserMessage,
    tool,
)


def _no_point(label: str) -> None:
    pass


#: Called with a label at every kill point; the worker replaces it.
POINTS: dict[str, Callable[[str], None]] = {"point": _no_point}
#: Where the tools write (set by the worker and the tests).
PATHS: dict[str, str] = {"markers": os.devnull, "journal": os.devnull}

APPROVE = Resume({"approved": True})


def point(label: str) -> None:
    POINTS["point"](label)


def _append(path: str, line: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode() + b"\n")
    finally:
        os.close(fd)


def _effect(name: str, value: int) -> dict[str, Any]:
    key = agentloop.idempotency_key() or "(not durable)"
    point(f"tool:before:{name}")
    _append(PATHS["journal"], f"start\t{key}")
    if name == "keyed_effect":
        with open(PATHS["markers"], encoding="utf-8") as file:
            done = f"{name}\t{key}" in file.read().splitlines()
        if not done:
            _append(PATHS["markers"], f"{name}\t{key}")
    else:
        _append(PATHS["markers"], f"{name}\t{key}")
    point(f"tool:after:{name}")
    return {"tool": name, "value": value * 2}


@tool
def raw_effect(value: int) -> dict[str, Any]:
    """A side effect that happens every time it runs."""
    return _effect("raw_effect", value)


@tool
def keyed_effect(value: int) -> dict[str, Any]:
    """A side effect made idempotent with the idempotency key."""
    return _effect("keyed_effect", value)


@tool(requires_approval=True)
def approved_effect(value: int) -> dict[str, Any]:
    """A side effect that needs a human's approval first."""
    return _effect("approved_effect", value)


TOOLS = [raw_effect, keyed_effect, approved_effect]


@tool(name="raw_effect")
async def araw_effect(value: int) -> dict[str, Any]:
    """A side effect that happens every time it runs."""
    return _effect("raw_effect", value)


@tool(name="keyed_effect")
async def akeyed_effect(value: int) -> dict[str, Any]:
    """A side effect made idempotent with the idempotency key."""
    return _effect("keyed_effect", value)


@tool(name="approved_effect", requires_approval=True)
async def aapproved_effect(value: int) -> dict[str, Any]:
    """A side effect that needs a human's approval first."""
    return _effect("approved_effect", value)


#: The async worker's tools: the same specs, ``async def``.
ATOOLS = [araw_effect, akeyed_effect, aapproved_effect]


def answer_for(request: ModelRequest) -> ScriptedResponse:
    usage = Usage(10 * request.step, request.step)
    if request.step == 1:
        return ScriptedResponse.tool_calls(
            "r1",
            ToolCall("c1", "raw_effect", {"value": 1}),
            ToolCall("c2", "keyed_effect", {"value": 2}),
            text="Two effects first.",
            usage=usage,
        )
    if request.step == 2:
        return ScriptedResponse.tool_calls(
            "r2", ToolCall("c3", "approved_effect", {"value": 3}), usage=usage
        )
    if request.step == 3:
        return ScriptedResponse.tool_calls(
            "r3", ToolCall("c4", "raw_effect", {"value": 4}), usage=usage
        )
    first = request.messages[0].content
    return ScriptedResponse.text("r4", f"All four effects are done for {first!r}.", usage=usage)


class PointedModel:
    """``FunctionModel(answer_for)`` with a kill point at the call and after each item."""

    def __init__(self) -> None:
        self._inner = FunctionModel(answer_for)

    def stream(self, request: ModelRequest) -> Iterator[ModelChunk | ModelResponse | ModelFailure]:
        point("model:call")
        for item in self._inner.stream(request):
            yield item
            point("model:chunk")

    async def astream(
        self, request: ModelRequest
    ) -> AsyncIterator[ModelChunk | ModelResponse | ModelFailure]:
        point("model:call")
        async for item in self._inner.astream(request):
            yield item
            point("model:chunk")


def messages(session_id: str) -> Sequence[UserMessage]:
    return [UserMessage(f"u-{session_id}", f"task {session_id}")]


SYSTEM = "Run the effects."


def run_session(
    store: replay.SQLiteStore,
    session_id: str,
    *,
    owner: str,
    lease_seconds: float = 30.0,
    asynchronous: bool = False,
) -> Any:
    """What a worker does for one session: run it, answer its pause (as the
    human would), run it again, until it ends. Returns the RunResult."""
    while True:
        options: dict[str, Any] = {
            "model": PointedModel(),
            "system": SYSTEM,
            "owner": owner,
            "lease_seconds": lease_seconds,
        }
        if asynchronous:
            outcome = asyncio.run(
                replay.arun_durable(
                    store, session_id, messages(session_id), tools=ATOOLS, **options
                )
            )
        else:
            outcome = replay.run_durable(
                store, session_id, messages(session_id), tools=TOOLS, **options
            )
        if type(outcome) is not replay.Parked:
            return outcome
        point("pause:parked")
        try:
            replay.answer(store, session_id, APPROVE)
        except replay.StoreError:
            # Another worker's "human" answered first, or it already continued.
            info = store.session(session_id)
            if info.status == "paused" and not info.answered:
                raise
        point("pause:answered")
