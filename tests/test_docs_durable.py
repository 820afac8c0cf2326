"""docs/durable.md stays true: the examples of its sections run, in order, and print
what their comments say.

Only the sections listed here are run (the page's Temporal section, which needs a
Temporal server, has its own tests).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

PAGE = Path(__file__).resolve().parent.parent / "docs" / "durable.md"
SECTIONS = (
    "The three tiers",
    "The write-ahead rule",
    "At-least-once and idempotency keys",
    "Parking and answering pauses",
    "Steering a stored session",
    "The async twin",
    "Multiple workers",
    "The store",
)


def sections() -> dict[str, str]:
    parts = re.split(r"^## (.+)$", PAGE.read_text(encoding="utf-8"), flags=re.M)
    return dict(zip(parts[1::2], parts[2::2], strict=True))


def examples() -> list[str]:
    found = sections()
    return [
        code
        for title in SECTIONS
        for code in re.findall(r"```python\n(.*?)```", found[title], flags=re.S)
    ]


def test_the_page_has_its_sections():
    assert set(SECTIONS) <= set(sections())
    assert len(examples()) == 8


def test_the_examples_run_and_print_what_they_say(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)  # they write sessions.db, ledger.db, ...
    namespace: dict[str, object] = {"__name__": "durable_docs"}
    for index, code in enumerate(examples()):
        exec(compile(code, f"docs/durable.md example {index + 1}", "exec"), namespace)
        printed = capsys.readouterr().out
        for expected in re.findall(r"^\s*print\(.*\)  # (.+)$", code, flags=re.M):
            assert expected in printed, f"example {index + 1}: {expected!r} not in {printed!r}"


def test_the_numbers_are_the_bench_s_labels():
    numbers = re.search(
        r"<!-- numbers: bench/durable.py -->\n(.*?)<!-- end numbers -->", PAGE.read_text(), re.S
    )
    assert numbers is not None
    assert "commits" in numbers.group(1) and "sessions/s" in numbers.group(1)


if __name__ == "__main__":  # pragma: no cover
    pytest.main([__file__])
