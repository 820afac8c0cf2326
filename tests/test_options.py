"""The drivers' options are declared once (agentloop/_keywords.py, DESIGN §24):
the families, the drivers' signatures, their runtime errors and their docs agree."""

from __future__ import annotations

import asyncio
import inspect
import re
from pathlib import Path
from typing import Any

import pytest

import agentloop
import replay
from agentloop import ScriptedModel, ScriptedResponse, UserMessage, agent_loop
from agentloop._docstrings import parameter_descriptions
from agentloop._driver import _Driver
from agentloop._keywords import (
    DRIVE_KEYS,
    LOOP_KEYS,
    SESSION_KEYS,
    AsyncDriveOptions,
    AsyncRunOptions,
    DriveOptions,
    LoopOptions,
    RunOptions,
    SessionOptions,
    keys,
)
from replay._durable import AsyncDurableOptions, DurableOptions

ROOT = Path(__file__).resolve().parent.parent
FAMILIES = [SessionOptions, LoopOptions, DriveOptions, AsyncDriveOptions]


def model() -> ScriptedModel:
    return ScriptedModel([ScriptedResponse.text("r1", "hi")])


def test_the_families() -> None:
    assert keys(LoopOptions) == SESSION_KEYS | {"log", "handoffs", "agent_name"} == LOOP_KEYS
    assert keys(AsyncDriveOptions) == keys(DriveOptions) == DRIVE_KEYS
    assert keys(RunOptions) == keys(AsyncRunOptions) == LOOP_KEYS | DRIVE_KEYS
    assert not LOOP_KEYS & DRIVE_KEYS
    lease = {"owner", "lease_seconds"}
    # A durable session takes the loop's options but the log (its own is the store),
    # handoffs too (DESIGN §26: the recorded agents, or handoffs= again).
    durable = LOOP_KEYS - {"log"}
    assert keys(DurableOptions) == keys(AsyncDurableOptions) == durable | DRIVE_KEYS | lease
    for family in (RunOptions, DurableOptions, *FAMILIES):
        assert not family.__required_keys__, family  # every option is optional


def test_each_family_documents_its_keys() -> None:
    # (LoopOptions and AsyncDriveOptions document what they add to their bases.)
    own = {
        SessionOptions: SESSION_KEYS,
        LoopOptions: {"log", "handoffs", "agent_name"},
        DriveOptions: DRIVE_KEYS,
        AsyncDriveOptions: {"on_pause"},
    }
    for family, names in own.items():
        assert set(parameter_descriptions(family.__doc__)) == names, family.__name__


def test_loop_defaults_live_in_agent_loop_only() -> None:
    # The drivers declare none of them: what they are not given, they do not pass.
    signature = inspect.signature(agent_loop).parameters
    assert set(signature) >= LOOP_KEYS
    for driver in (agentloop.run, agentloop.run_stream, agentloop.arun, agentloop.arun_stream):
        names = list(inspect.signature(driver).parameters)
        assert names == ["messages", "model", "tools", "options"], driver
    checked = inspect.signature(_Driver.checked).parameters
    assert all(checked[key].default is None for key in DRIVE_KEYS)


def test_the_drivers_docstrings_name_every_option() -> None:
    def named(doc: str | None) -> set[str]:
        return set(re.findall(r"\b(\w+)\b", doc or ""))

    assert named(agentloop.run.__doc__) >= LOOP_KEYS | DRIVE_KEYS
    assert named(agentloop.drive.__doc__) >= DRIVE_KEYS
    assert SESSION_KEYS | DRIVE_KEYS | {"owner", "lease_seconds"} <= named(
        replay.run_durable.__doc__
    )
    durable_md = (ROOT / "docs" / "durable.md").read_text(encoding="utf-8")
    listed = durable_md.split("The options are `agentloop.run`'s", 1)[1].split(".", 1)[0]
    assert named(listed) >= SESSION_KEYS | DRIVE_KEYS


def test_an_unknown_keyword_is_pythons_type_error_naming_it(tmp_path: Path) -> None:
    messages = [UserMessage("u1", "hi")]
    with pytest.raises(TypeError, match=r"^run\(\) got an unexpected keyword argument 'bogus'$"):
        agentloop.run(messages, model=model(), tools=[], bogus=1)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match=r"^run_stream\(\) got an unexpected keyword argument"):
        agentloop.run_stream(messages, model=model(), tools=[], before_effect=None)  # type: ignore[call-arg]
    loop = agent_loop(messages, tools=[])
    with pytest.raises(TypeError, match=r"^drive\(\) got an unexpected keyword argument 'system'"):
        agentloop.drive(loop, model=model(), tools=[], system="s")  # type: ignore[call-arg]
    with pytest.raises(TypeError, match=r"^arun\(\) got an unexpected keyword argument 'x'"):
        asyncio.run(agentloop.arun(messages, model=model(), tools=[], x=1))  # type: ignore[call-arg]
    with pytest.raises(TypeError, match=r"^arun_stream\(\) got an unexpected keyword argument"):
        agentloop.arun_stream(messages, model=model(), tools=[], y=1)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match=r"^adrive\(\) got an unexpected keyword argument 'log'"):
        asyncio.run(agentloop.adrive(loop, model=model(), tools=[], log=None))  # type: ignore[call-arg]
    with replay.SQLiteStore(tmp_path / "s.db") as store:
        with pytest.raises(
            TypeError, match=r"^run_durable\(\) got an unexpected keyword argument 'log'"
        ):
            replay.run_durable(store, "s", messages, model=model(), tools=[], log=None)  # type: ignore[call-arg]
        with pytest.raises(TypeError, match=r"^arun_durable\(\) got an unexpected keyword"):
            asyncio.run(replay.arun_durable(store, "s", messages, model=model(), tools=[], z=1))  # type: ignore[call-arg]
        assert store.sessions() == []  # refused before anything ran


def test_options_given_reach_the_loop_and_the_driver() -> None:
    events: list[Any] = []
    result = agentloop.run(
        [UserMessage("u1", "hi")],
        model=model(),
        tools=[],
        system="be brief",
        max_steps=3,
        on_event=events.append,
        clock=lambda: 5.0,
    )
    assert (result.status, result.max_steps) == ("completed", 3)
    assert events[0].type == "session.start" and events[0].system == "be brief"
    assert events[0].at == 5.0  # started_at read from the given clock


def test_the_temporal_client_and_wire_keep_agent_loop_s_defaults() -> None:
    # Their keywords stay explicit (start_session's **options are
    # Client.start_workflow's); they must mean what agent_loop's do.
    pytest.importorskip("temporalio")
    import msgspec

    from agentloop.temporal import start_session
    from agentloop.temporal._wire import SessionInput

    defaults = {
        name: parameter.default
        for name, parameter in inspect.signature(agent_loop).parameters.items()
        if name in SESSION_KEYS
    }
    client = {
        name: parameter.default
        for name, parameter in inspect.signature(start_session).parameters.items()
        if name in SESSION_KEYS
    }
    assert set(client) == {
        "system",
        "max_steps",
        "budget",
        "started_at",
        "limits",
        "output_retries",
        "parallel_tools",
        "compaction",
    }
    assert client == {name: defaults[name] for name in client}
    wire = {
        field.name: field.default
        for field in msgspec.structs.fields(SessionInput)
        if field.name in SESSION_KEYS
    }
    assert wire == client
