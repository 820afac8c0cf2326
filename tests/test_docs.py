"""The docs run: ``docs/harness.md``'s examples, its included script and its diagram.

- The included example runs as a script and must print exactly the output block
  shown under it; the included copy must equal the file. (Every ```` ```python ````
  block runs on its own in tests/test_docs_blocks.py.)
- The state diagram between the markers must be what ``docs/make_state_diagram.py``
  renders from the table today (the script's ``--check`` mode), and it must say the
  same thing as the table.
- The hook table names every topic, in order.
"""

from __future__ import annotations

import re
import runpy
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from agentloop import HOOK_TOPICS
from agentloop._state import TRANSITIONS, Input, State

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
PAGE = DOCS / "harness.md"
SCRIPT = DOCS / "make_state_diagram.py"
EXAMPLE = DOCS / "examples" / "human_approval.py"

FENCE = re.compile(r"^```(\w*)\n(.*?)^```\n", re.MULTILINE | re.DOTALL)


def page() -> str:
    return PAGE.read_text(encoding="utf-8")


def between(text: str, start: str, end: str) -> str:
    """The text between two marker lines (exactly one pair must exist)."""
    assert text.count(start) == 1 and text.count(end) == 1, f"markers {start!r} / {end!r}"
    return text.split(start, 1)[1].split(end, 1)[0]


def fenced(text: str, language: str) -> str:
    """The body of the only fenced block in ``text``; it must be in ``language``."""
    blocks = FENCE.findall(text.strip() + "\n")
    assert len(blocks) == 1, f"expected one fenced block, found {len(blocks)}"
    found, body = blocks[0]
    assert found == language
    return str(body)


def diagram_script() -> ModuleType:
    module = ModuleType("make_state_diagram")
    module.__dict__.update(runpy.run_path(str(SCRIPT)))
    return module


# --------------------------------------------------------------------------- the example


def test_the_page_includes_the_example_verbatim() -> None:
    included = between(
        page(), "<!-- include: docs/examples/human_approval.py -->", "<!-- end include -->"
    )
    assert fenced(included, "python") == EXAMPLE.read_text(encoding="utf-8")


def test_the_example_runs_and_prints_the_documented_output() -> None:
    shown = fenced(
        between(page(), "<!-- output: docs/examples/human_approval.py -->", "<!-- end output -->"),
        "text",
    )
    completed = subprocess.run(
        [sys.executable, str(EXAMPLE)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=ROOT,
    )
    assert completed.returncode == 0, completed.stderr
    assert completed.stderr == ""
    assert completed.stdout == shown


# --------------------------------------------------------------------------- the diagram


def test_the_committed_diagram_matches_the_table() -> None:
    completed = subprocess.run(
        [sys.executable, str(SCRIPT), "--check"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=ROOT,
    )
    assert completed.returncode == 0, completed.stderr


def test_the_diagram_says_what_the_table_says() -> None:
    body = fenced(
        between(page(), "<!-- state-diagram:start -->", "<!-- state-diagram:end -->"), "mermaid"
    )
    lines = [line.strip() for line in body.splitlines()]
    assert lines[0] == "stateDiagram-v2"
    assert "[*] --> IDLE" in lines and "DONE --> [*]" in lines
    drawn: dict[tuple[State, Input], State] = {}
    for line in lines:
        match = re.fullmatch(r"(\w+) --> (\w+): (.+)", line)
        if match:
            source, target, labels = match.groups()
            for label in labels.split(" / "):
                drawn[State[source], Input(label)] = State[target]
    assert drawn == TRANSITIONS


def test_check_mode_fails_on_a_stale_diagram_and_writing_fixes_it(tmp_path: Path) -> None:
    stale = tmp_path / "harness.md"
    stale.write_text(page().replace("REFLECTING --> PLANNING: start_step\n", ""), "utf-8")
    script = diagram_script()
    assert script.main(["--check", "--page", str(stale)]) == 1
    assert script.main(["--page", str(stale)]) == 0
    assert stale.read_text("utf-8") == page()
    assert script.main(["--check", "--page", str(stale)]) == 0


def test_missing_markers_are_reported(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    broken = tmp_path / "harness.md"
    broken.write_text("# no diagram here\n", "utf-8")
    assert diagram_script().main(["--check", "--page", str(broken)]) == 1
    assert "state-diagram:start" in capsys.readouterr().err


def test_render_is_stable_and_fenced() -> None:
    script = diagram_script()
    rendered = script.render()
    assert rendered == script.render()
    assert rendered.startswith("```mermaid\nstateDiagram-v2\n") and rendered.endswith("```\n")


# --------------------------------------------------------------------------- the hook table


def test_the_hook_table_lists_every_topic_in_order() -> None:
    text = between(page(), "### What each topic gets and may do", "### Returning and raising")
    rows = re.findall(r"^\| `(\w+)` \|", text, re.MULTILINE)
    assert tuple(rows) == HOOK_TOPICS


def test_protocol_page_lists_every_limit_with_its_value_and_every_event_type() -> None:
    import agentloop

    page = (Path(__file__).resolve().parent.parent / "docs" / "protocol.md").read_text()
    limits = dict(re.findall(r"\| `(MAX_[A-Z_]+)` \| (\d+) \|", page))
    expected = {n: str(getattr(agentloop, n)) for n in agentloop.__all__ if n.startswith("MAX_")}
    assert limits == expected
    for event_type in agentloop.EVENT_TYPES:
        assert f"`{event_type}`" in page, event_type
    for code in agentloop.ERROR_CODES:
        assert code in page, code
