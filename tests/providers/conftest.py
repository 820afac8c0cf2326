"""Fixtures of the provider tests: which client, and the adapter on a fresh server."""

from __future__ import annotations

import pytest

from .serve import Adapter


@pytest.fixture(params=[False, True], ids=["sync", "async"])
def asynchronous(request: pytest.FixtureRequest) -> bool:
    """The SDK's sync client (``run``/``stream``) or its async one (``arun``/``astream``)."""
    value: bool = request.param
    return value


@pytest.fixture
def adapter(kind: str, asynchronous: bool) -> Adapter:
    """The ``kind`` adapter (the test's parameter) with either client."""
    return Adapter(kind, asynchronous)
