"""Shared pytest configuration: pytester drives the pytest plugin's own tests; the
``store`` fixture the durable-run tests share."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from replay import SQLiteStore

pytest_plugins = ["pytester"]


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SQLiteStore]:
    """A fresh session store in ``tmp_path`` (``test_store.py`` has its own, on a fake clock)."""
    with SQLiteStore(tmp_path / "sessions.db") as opened:
        yield opened
