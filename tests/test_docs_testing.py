"""docs/testing.md ("Testing your agent") stays true: its examples run as written.

Every ```python block that starts with ``# <name>.py`` is a file of the page's
example project. They are written to a fresh folder and run with pytest, following
the page's walk-through step by step; each ```text block marked
``<!-- output: ... -->`` must appear in the output of its step, and the block
marked ``<!-- snapshot: ... -->`` must be the start of the snapshot file the
example writes.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import agentloop
from agentloop._function_model import FunctionModel
from replay.syrupy import EventLogExtension
from tests.test_pytest_plugin import run_inner

DOC = Path(__file__).resolve().parent.parent / "docs" / "testing.md"
TEXT = DOC.read_text()

FILES = dict(re.findall(r"```python\n# (\w+\.py)\n(.*?)```", TEXT, flags=re.S))
SNIPPETS = [
    code
    for code in re.findall(r"```python\n(.*?)```", TEXT, flags=re.S)
    if not code.startswith("# ")
]
OUTPUTS = dict(re.findall(r"<!-- output: (\w+) -->\n```text\n(.*?)```", TEXT, flags=re.S))
SNAPSHOTS = re.findall(r"<!-- snapshot: (\S+) -->\n```text\n(.*?)```", TEXT, flags=re.S)


@pytest.fixture(autouse=True)
def _function_model_exported(monkeypatch: pytest.MonkeyPatch) -> None:
    # The page imports FunctionModel from agentloop, as users will.
    if not hasattr(agentloop, "FunctionModel"):
        monkeypatch.setattr(agentloop, "FunctionModel", FunctionModel, raising=False)


def _expect(result: pytest.RunResult, name: str) -> None:
    """Every line of the page's output block ``name`` (but the command) was printed."""
    printed = set(result.stdout.lines)
    for line in OUTPUTS[name].splitlines():
        if not line.startswith("$ "):
            assert line in printed, f"docs/testing.md output {name!r}: {line!r} not printed"


def test_the_page_has_its_examples() -> None:
    assert sorted(FILES) == [
        "test_cassette.py",
        "test_function_model.py",
        "test_scripted.py",
        "test_snapshot.py",
        "weather_agent.py",
    ]
    assert sorted(OUTPUTS) == ["divergence", "missing", "record"]
    assert len(SNAPSHOTS) == 1
    assert len(SNIPPETS) == 1


def test_examples_and_walk_through(pytester: pytest.Pytester) -> None:
    for name, code in FILES.items():
        pytester.path.joinpath(name).write_text(f"# {name}\n{code}")

    # Sections 1 to 3: the first run writes the snapshots, the next compares.
    examples = ("test_scripted.py", "test_function_model.py", "test_snapshot.py")
    run_inner(pytester, "--snapshot-update", *examples).assert_outcomes(passed=3)
    for location, shown in SNAPSHOTS:
        assert (pytester.path / location).read_text().startswith(shown)
    run_inner(pytester, *examples).assert_outcomes(passed=3)

    # Section 4, the walk-through.
    cassette = pytester.path / "cassettes" / "test_cassette" / "test_weather_in_oslo.jsonl"
    missing = run_inner(pytester, "test_cassette.py")  # 1. nothing recorded yet
    missing.assert_outcomes(failed=1)
    _expect(missing, "missing")

    recorded = run_inner(pytester, "--agentloop-record=once", "test_cassette.py")  # 2.
    recorded.assert_outcomes(passed=1)
    _expect(recorded, "record")
    assert cassette.is_file()

    run_inner(pytester, "test_cassette.py").assert_outcomes(passed=1)  # 3. replay

    agent = pytester.path / "weather_agent.py"  # 4. change the system prompt
    old = '"You answer questions about the weather. Be brief."'
    agent.write_text(agent.read_text().replace(old, '"You answer questions about the weather."'))
    diverged = run_inner(pytester, "test_cassette.py")
    diverged.assert_outcomes(failed=1)
    _expect(diverged, "divergence")

    before = cassette.read_bytes()  # 5. re-record on purpose
    run_inner(pytester, "--agentloop-record=all", "test_cassette.py").assert_outcomes(passed=1)
    assert cassette.read_bytes() != before
    run_inner(pytester, "test_cassette.py").assert_outcomes(passed=1)


def test_mask_snippet() -> None:
    class Snapshot:
        def use_extension(self, extension: type[EventLogExtension]) -> object:
            used.append(extension)
            return self

    used: list[type[EventLogExtension]] = []
    namespace = {"snapshot": Snapshot()}
    exec(compile(SNIPPETS[0], "docs/testing.md snippet", "exec"), namespace)
    assert [extension.mask for extension in used] == [("at",), ()]
    assert namespace["MyExtension"].mask == ("at", "wall_seconds", "usage")  # type: ignore[attr-defined]
