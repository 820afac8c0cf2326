"""Every ``DESIGN §N`` reference resolves in ``docs/design.md`` (DESIGN §24).

The design contract lives in the repository; code, tests, docs and the changelog
cite its sections as ``DESIGN §N`` (also ``§5-§7`` ranges and ``§5, §8`` lists).
A reference to a section the file does not have is a dangling pointer.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DESIGN = ROOT / "docs" / "design.md"
# Where references live: everything but what git ignores and binary data.
SEARCHED = ("agentloop", "replay", "tests", "docs", "bench", "scripts", "fixtures", ".ci")
SUFFIXES = {".py", ".md", ".js", ".css", ".html", ".toml", ""}
REFERENCE = re.compile(r"DESIGN\s+(§\d+(?:\s*(?:[-–,]|and)\s*§?\d+)*)")


def sections() -> set[int]:
    return {int(n) for n in re.findall(r"^## (\d+)\. ", DESIGN.read_text(), flags=re.M)}


def files() -> list[Path]:
    found = [ROOT / "README.md", ROOT / "CHANGELOG.md"]
    for top in SEARCHED:
        for path in sorted((ROOT / top).rglob("*")):
            if (
                path.is_file()
                and path.suffix in SUFFIXES
                and "work" not in path.relative_to(ROOT).parts[:2]
                and "__pycache__" not in path.parts
            ):
                found.append(path)
    return found


def cited(text: str) -> set[int]:
    numbers: set[int] = set()
    for group in REFERENCE.findall(text):
        for low, high in re.findall(r"§?(\d+)(?:\s*[-–]\s*§?(\d+))?", group):
            numbers.update(range(int(low), int(high or low) + 1))
    return numbers


def test_the_contract_has_every_part() -> None:
    assert set(range(1, 30)) <= sections()


@pytest.mark.parametrize(
    ("text", "numbers"),
    [
        ("(DESIGN §19)", {19}),
        ("(DESIGN §5-§7, §9-§11)", {5, 6, 7, 9, 10, 11}),
        ("(DESIGN §5, §7, §8, §11)", {5, 7, 8, 11}),
        ("no invented result (DESIGN\n§11)", {11}),
    ],
)
def test_references_are_read_as_written(text: str, numbers: set[int]) -> None:
    assert cited(text) == numbers


def test_every_reference_resolves() -> None:
    known = sections()
    dangling = []
    for path in files():
        if path == DESIGN:
            continue
        for number in sorted(cited(path.read_text(errors="replace")) - known):
            dangling.append(f"{path.relative_to(ROOT)}: DESIGN §{number}")
    assert not dangling, "references to sections docs/design.md does not have:\n" + "\n".join(
        dangling
    )
