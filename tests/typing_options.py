"""The drivers' keywords as mypy sees them (DESIGN §24): checked by ``python -m
mypy`` (strict, with ``warn_unused_ignores``: see this module's override in
pyproject.toml), never run. Every keyword type-checks; a wrong keyword and a wrong
type are errors, which each ``# type: ignore[...]`` below proves (an ignore that is
not needed is itself an error)."""

from __future__ import annotations

from typing import Any

from agentloop import (
    AgentLoop,
    AsyncModel,
    Budget,
    Cancel,
    CancelToken,
    Event,
    EventLog,
    HookRegistry,
    Inbox,
    Limits,
    Model,
    Pause,
    Resume,
    adrive,
    arun,
    arun_stream,
    drive,
    run,
    run_stream,
)
from replay import SQLiteStore, arun_durable, run_durable


def on_pause(pause: Pause) -> Resume | Cancel:
    return Resume()


async def async_on_pause(pause: Pause) -> Resume:
    return Resume()


def on_event(event: Event) -> None:
    pass


def clock() -> float:
    return 0.0


def every_keyword(model: Model, loop: AgentLoop, store: SQLiteStore) -> None:
    run(
        [],
        model=model,
        tools=[],
        system="s",
        max_steps=2,
        budget=Budget(max_turns=1),
        hooks=HookRegistry(),
        log=EventLog(),
        signal=CancelToken(),
        on_pause=on_pause,
        clock=clock,
        started_at=0.0,
        on_event=on_event,
        inbox=Inbox(),
        parallel_tools=True,
        tool_workers=2,
        limits=Limits(),
        output=dict,
        output_retries=1,
    )
    run_stream([], model=model, tools=[], system=None, max_steps=1, output_retries=0)
    drive(loop, model=model, tools=[], clock=clock, signal=None, on_pause=on_pause)
    drive(loop, model=model, tools=[], on_event=on_event, inbox=None, tool_workers=None)
    drive(loop, model=model, tools=[], before_effect=lambda effect: None)
    run_durable(
        store,
        "s",
        [],
        model=model,
        tools=[],
        system="s",
        max_steps=2,
        budget=None,
        hooks=None,
        signal=None,
        on_pause=on_pause,
        clock=clock,
        started_at=None,
        on_event=on_event,
        inbox=None,
        parallel_tools=False,
        tool_workers=None,
        limits=None,
        output=None,
        output_retries=2,
        owner="worker-1",
        lease_seconds=10.0,
    )


def wrong_keywords(model: Model, loop: AgentLoop, store: SQLiteStore) -> None:
    run([], model=model, tools=[], bogus=1)  # type: ignore[call-arg]
    run([], model=model, tools=[], max_steps="8")  # type: ignore[arg-type]
    run([], model=model, tools=[], on_pause=async_on_pause)  # type: ignore[arg-type]
    run_stream([], model=model, tools=[], before_effect=None)  # type: ignore[call-arg]
    drive(loop, model=model, tools=[], system="s")  # type: ignore[call-arg]
    drive(loop, model=model, tools=[], tool_workers="2")  # type: ignore[arg-type]
    run_durable(store, "s", model=model, tools=[], log=EventLog())  # type: ignore[call-arg]
    run_durable(store, "s", model=model, tools=[], lease_seconds="30")  # type: ignore[arg-type]


async def asynchronous(model: AsyncModel, loop: AgentLoop, store: SQLiteStore) -> None:
    await arun([], model=model, tools=[], max_steps=2, on_pause=async_on_pause, log=EventLog())
    arun_stream([], model=model, tools=[], parallel_tools=True, tool_workers=4)
    await adrive(loop, model=model, tools=[], on_pause=async_on_pause, before_effect=None)
    await arun_durable(store, "s", model=model, tools=[], on_pause=async_on_pause, owner=None)
    await arun([], model=model, tools=[], bogus=1)  # type: ignore[call-arg]
    await arun([], model=model, tools=[], signal=object())  # type: ignore[arg-type]
    arun_stream([], model=model, tools=[], limits=3)  # type: ignore[arg-type]
    await adrive(loop, model=model, tools=[], max_steps=3)  # type: ignore[call-arg]
    await arun_durable(store, "s", model=model, tools=[], log=None)  # type: ignore[call-arg]


_: Any = None
