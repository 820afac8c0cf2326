"""The engine's and the log's underscored attributes are theirs alone (DESIGN §24).

``AgentLoop`` records through ``EventLog.append`` and drivers tell it what they
checked through ``AgentLoop.checked_by_driver``: no module of the library reads or
writes another object's private attributes of either class.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from pathlib import Path

import pytest

from agentloop import AgentLoop, EventLog, UserMessage, agent_loop
from agentloop._run import Run

ROOT = Path(__file__).resolve().parent.parent


def _private(names: Iterable[str]) -> set[str]:
    return {name for name in names if name.startswith("_") and not name.startswith("__")}


def _owned() -> set[str]:
    loop = agent_loop([UserMessage("u1", "hi")], tools=[])
    return (
        _private(vars(AgentLoop))
        | _private(vars(loop))
        | _private(EventLog.__slots__)
        | _private(Run.__slots__)
    )


def _reaches(path: Path, owned: set[str]) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if (
            isinstance(node, ast.Attribute)
            and node.attr in owned
            and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"))
        ):
            found.append(f"{path.relative_to(ROOT)}:{node.lineno}: .{node.attr}")
    return found


@pytest.mark.parametrize("package", ["agentloop", "replay", "bench"])
def test_no_module_reaches_into_the_engine_or_the_log(package: str) -> None:
    owned = _owned()
    found = [
        hit for path in sorted((ROOT / package).rglob("*.py")) for hit in _reaches(path, owned)
    ]
    assert found == []


def test_append_records_then_tells_the_subscribers_in_order() -> None:
    log = EventLog()
    seen: list[tuple[str, int]] = []
    log.subscribe(lambda event: seen.append(("first", len(log))))
    log.subscribe(lambda event: seen.append(("second", len(log))))
    loop = agent_loop([UserMessage("u1", "hi")], tools=[], log=log)
    next(loop)
    assert [event.type for event in log] == ["session.start", "message.accepted", "step.start"]
    assert seen == [
        ("first", 1),
        ("second", 1),
        ("first", 2),
        ("second", 2),
        ("first", 3),
        ("second", 3),
    ]
