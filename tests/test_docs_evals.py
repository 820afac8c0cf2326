"""``docs/evals.md`` runs: each Python block on its own, in a fresh process from a
temporary folder; the table it shows is what the example prints."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "evals.md"


def python_blocks() -> list[str]:
    text = PAGE.read_text(encoding="utf-8")
    return [body.split("```\n")[0] for body in text.split("```python\n")[1:]]


@pytest.mark.parametrize("code", python_blocks(), ids=lambda code: code.splitlines()[2][:30])
def test_every_python_block_runs_alone(code: str, tmp_path: Path) -> None:
    script = tmp_path / "block.py"
    script.write_text(code, encoding="utf-8")
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, cwd=tmp_path, timeout=120
    )
    assert done.returncode == 0, done.stderr


def test_the_page_shows_what_the_example_prints(tmp_path: Path) -> None:
    text = PAGE.read_text(encoding="utf-8")
    shown = text.split("progress line per case on stderr, then the table", 1)[1]
    shown = shown.split("```text\n", 1)[1].split("```\n", 1)[0]
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "agentloop",
            "eval",
            "run",
            str(ROOT / "docs/examples/evals/dataset.jsonl"),
            "--agent",
            str(ROOT / "docs/examples/evals/agent.py:hasty"),
            "--out",
            "runs/hasty",
            "--quiet",
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
    )
    assert done.returncode == 1, done.stderr
    assert done.stdout == shown
