"""The README's commands and examples stay true."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parent.parent / "README.md"
CI = Path(__file__).resolve().parent.parent / ".ci" / "run"


def blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", README.read_text(), flags=re.S)


def test_readme_opens_with_the_two_commands() -> None:
    first = blocks("sh")[0].strip().splitlines()
    assert len(first) == 2
    assert first[0].endswith("python -m agentloop demo")
    assert first[1].endswith("python -m pytest")
    assert README.read_text().index("```sh") < README.read_text().index("```python")


@pytest.mark.parametrize("line", [0, 1], ids=["demo command", "test command"])
def test_ci_runs_the_readmes_commands(line: int) -> None:
    command = blocks("sh")[0].strip().splitlines()[line]
    assert f"\n    {command}\n" in CI.read_text()
