"""Shared pytest configuration: pytester drives the pytest plugin's own tests; the
``store`` fixture the durable-run tests share; Hypothesis without its per-example
deadline."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import settings

from replay import SQLiteStore

pytest_plugins = ["pytester"]

# Hypothesis fails an example that takes longer than 200 ms: a timing assertion, which
# a loaded CI machine (four suites side by side on two CPUs) breaks for correct code
# (seen: the idempotency-key property, 252 ms once, 7 ms when retried). Off for the suite.
settings.register_profile("agentloop", deadline=None)
settings.load_profile("agentloop")


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SQLiteStore]:
    """A fresh session store in ``tmp_path`` (``test_store.py`` has its own, on a fake clock)."""
    with SQLiteStore(tmp_path / "sessions.db") as opened:
        yield opened
