"""docs/durable.md's Temporal section runs: its examples print what the page shows.

The included scripts must equal the files; each runs as a script against the
test session's dev server (``$TEMPORAL_ADDRESS``) and must print exactly the
output block under it (every Python block also runs on its own in
tests/test_docs_blocks.py). The benchmark (bench/temporal.py) runs once in its
quick mode, so it cannot rot.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import Temporal

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "durable.md"
EXAMPLES = ["docs/examples/temporal_session.py", "docs/examples/temporal_many_workers.py"]
FENCE = re.compile(r"^```(\w*)\n(.*?)^```\n", re.MULTILINE | re.DOTALL)


def section() -> str:
    text = PAGE.read_text(encoding="utf-8")
    return text[text.index("## Temporal") :]


def between(text: str, start: str, end: str) -> str:
    assert text.count(start) == 1, start
    return text.split(start, 1)[1].split(end, 1)[0]


def fenced(text: str, language: str) -> str:
    ((found, body),) = FENCE.findall(text.strip() + "\n")
    assert found == language
    return str(body)


def run_script(temporal: Temporal, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *args],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
        cwd=ROOT,
        env={**os.environ, "TEMPORAL_ADDRESS": temporal.target},
    )


@pytest.mark.parametrize("example", EXAMPLES)
def test_the_page_includes_the_example_verbatim(example: str) -> None:
    included = between(section(), f"<!-- include: {example} -->", "<!-- end include -->")
    assert fenced(included, "python") == (ROOT / example).read_text(encoding="utf-8")


@pytest.mark.parametrize("example", EXAMPLES)
def test_the_example_prints_the_documented_output(temporal: Temporal, example: str) -> None:
    shown = fenced(between(section(), f"<!-- output: {example} -->", "<!-- end output -->"), "text")
    completed = run_script(temporal, example)
    assert completed.returncode == 0, completed.stderr
    assert completed.stdout == shown


def test_the_benchmark_runs(temporal: Temporal) -> None:
    completed = run_script(temporal, "bench/temporal.py", "--quick", "--address", temporal.target)
    assert completed.returncode == 0, completed.stderr
    lines = completed.stdout.splitlines()
    assert lines[0] == "agentloop.temporal: one worker in this process, a local server"
    assert sum(line.startswith("one more step: +") for line in lines) == 2
