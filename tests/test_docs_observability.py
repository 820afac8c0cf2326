"""docs/observability.md stays true: a ```python block followed by an
``<!-- output -->`` text block prints exactly that (stdout and stderr), run as a
script of its own in a fresh interpreter (the examples configure logging, which must
not leak into this test session). Every block runs in tests/test_docs_blocks.py.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

import agentloop

PAGE = Path(__file__).resolve().parent.parent / "docs" / "observability.md"
TEXT = PAGE.read_text(encoding="utf-8")
BLOCK = re.compile(
    r"^```python\n(?P<code>.*?)^```\n(?:\n<!-- output -->\n```text\n(?P<output>.*?)^```\n)?",
    re.MULTILINE | re.DOTALL,
)
BLOCKS = [(m["code"], m["output"]) for m in BLOCK.finditer(TEXT) if m["output"] is not None]


def test_the_page_has_runnable_blocks() -> None:
    assert len(BLOCKS) >= 1


@pytest.mark.parametrize(("code", "output"), BLOCKS, ids=[f"block-{i}" for i in range(len(BLOCKS))])
def test_the_block_prints_what_the_page_shows(code: str, output: str, tmp_path: Path) -> None:
    script = tmp_path / "example.py"
    script.write_text(code, encoding="utf-8")
    completed = subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=tmp_path,
    )
    assert completed.returncode == 0, completed.stderr
    assert completed.stdout + completed.stderr == output


def test_the_logger_table_names_loggers_the_library_uses() -> None:
    section = TEXT.split("## Logging", 1)[1].split("| level |", 1)[0]
    named = re.findall(r"^\| `([\w.]+)` \|", section, re.MULTILINE)
    assert named == ["agentloop", "agentloop.models", "replay"]


def test_the_debug_lines_shown_are_the_json_lines_a_log_holds() -> None:
    # The illustrative DEBUG block starts with session.start's line as encoded.
    shown = re.search(r'#0 session.start: (\{"type":"session.start".*?),\.\.\.\}', TEXT)
    assert shown is not None
    event = agentloop.SessionStartEvent(sequence=0, at=1767225600.0, max_steps=8)
    assert agentloop.encode_event(event).decode().startswith(shown[1])
