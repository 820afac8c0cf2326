"""docs/observability.md (OpenTelemetry) and docs/mcp.md stay true: their examples run.

- Each included example equals its file, runs as a script and prints exactly the
  output block shown under it.
- (Every other ```python block runs on its own in tests/test_docs_blocks.py.)
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.test_docs import between, fenced

ROOT = Path(__file__).resolve().parent.parent
PAGES = {
    "docs/observability.md": ["docs/examples/otel_spans.py"],
    "docs/mcp.md": ["docs/examples/mcp_tools.py"],
}
INCLUDED = re.compile(r"<!-- include: .*?<!-- end include -->", re.S)


def text(page: str) -> str:
    return (ROOT / page).read_text(encoding="utf-8")


def python(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *args], capture_output=True, text=True, cwd=ROOT, timeout=120
    )


EXAMPLES = [(page, example) for page, examples in PAGES.items() for example in examples]


@pytest.mark.parametrize(("page", "example"), EXAMPLES)
def test_the_example_is_included_verbatim(page: str, example: str) -> None:
    included = between(text(page), f"<!-- include: {example} -->", "<!-- end include -->")
    assert fenced(included, "python") == (ROOT / example).read_text(encoding="utf-8")


@pytest.mark.parametrize(("page", "example"), EXAMPLES)
def test_the_example_prints_the_documented_output(page: str, example: str) -> None:
    shown = fenced(
        between(text(page), f"<!-- output: {example} -->", "<!-- end output -->"), "text"
    )
    done = python(example)
    assert done.returncode == 0, done.stderr
    assert done.stdout == shown
