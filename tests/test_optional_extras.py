"""Optional extras stay optional: ``import agentloop`` (and the ``replay`` CLI) never
imports them, and a module that needs one says what to install when it is missing."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# module -> (the top-level packages it brings in, the extra that installs them)
EXTRAS = {
    "agentloop.otel": (("opentelemetry", "google"), "otel"),
    "agentloop.mcp": (("mcp", "httpx2", "anyio"), "mcp"),
    "agentloop.models.openai": (("openai",), "openai"),
    "agentloop.models.anthropic": (("anthropic",), "anthropic"),
    "agentloop.models.gemini": (("google",), "gemini"),
}


def python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60
    )


@pytest.mark.parametrize("module", EXTRAS)
def test_import_agentloop_does_not_import_the_extra(module: str) -> None:
    packages, _ = EXTRAS[module]
    done = python(
        "import sys, agentloop, replay, replay.__main__; "
        f"print(sorted(m for m in sys.modules if m.split('.')[0] in {packages!r}))"
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


@pytest.mark.parametrize("module", EXTRAS)
def test_without_the_extra_the_import_error_says_what_to_install(module: str) -> None:
    packages, extra = EXTRAS[module]
    done = python(
        f"import sys; sys.modules[{packages[0]!r}] = None\n"
        f"try:\n    import {module}\n"
        "except ImportError as exc:\n    print(exc)\n"
    )
    assert f"pip install 'agentloop-replay[{extra}]'" in done.stdout
