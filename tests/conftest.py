"""Shared pytest configuration: pytester drives the pytest plugin's own tests; the
``store`` fixture the durable-run tests share; Hypothesis without its per-example
deadline; the ``version_independent`` marker."""

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
# `.ci/run` runs the whole suite under coverage on its main Python, every property
# with its full count of examples; on the other Pythons it passes
# `--hypothesis-profile=secondary`: every property still runs there, with a fifth of
# its examples (tests/helpers.py `examples()` scales the counts tests set themselves),
# so the same inputs are not generated four times over on two CPUs.
settings.register_profile("secondary", parent=settings.get_profile("agentloop"), max_examples=20)

#: The tests marked ``version_independent`` (node id prefixes, relative to the
#: repository root). What they prove does not depend on the Python that runs pytest,
#: and they are the suite's most expensive: other processes do the work (a fresh
#: interpreter per docs block or example, workers SIGKILLed over a store or a log
#: file, a headless browser, the bench scripts) and the code those processes run is
#: tested in-process by the rest of the suite, on every Python (the docs blocks are
#: compiled on every Python, too). A plain ``python -m pytest`` runs them; `.ci/run`
#: runs them on its main Python and deselects them on the others
#: (``-m "not version_independent"``), saying so in its log.
VERSION_INDEPENDENT = (
    "tests/test_docs_blocks.py::test_the_block_runs_as_a_file_of_its_own",
    "tests/test_docs_otel_mcp.py::test_the_example_prints_the_documented_output",
    "tests/test_durable_crash.py",
    "tests/test_agent_tree_crash.py",
    "tests/test_worker_crash.py",
    "tests/test_idempotency.py::test_a_file_tier_session_killed_at_any_point",
    "tests/temporal/test_kill.py",
    "tests/temporal/test_blobs.py::test_a_killed_worker_is_replaced_by_one_that_reads_the_bytes",
    "tests/test_view_browser.py",
    "tests/test_bench_agents.py",
    "tests/test_bench_batches.py",
    "tests/test_bench_context.py",
    "tests/test_bench_drivers.py",
    "tests/test_bench_durable.py",
    "tests/test_bench_fleet.py",
    "tests/test_bench_persistence.py::test_quick_run",
    "tests/test_bench_smoke.py",
    "tests/test_big_log_bench.py",
)


@pytest.hookimpl(tryfirst=True)  # before `-m` selects by marker
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    root = Path(__file__).resolve().parent.parent
    for prefix in VERSION_INDEPENDENT:
        if not (root / prefix.partition("::")[0]).is_file():
            raise pytest.UsageError(
                f"tests/conftest.py: VERSION_INDEPENDENT names {prefix!r}, "
                "a file that does not exist"
            )
    for item in items:  # node ids are relative to the rootdir: the repository root
        if item.nodeid.startswith(VERSION_INDEPENDENT):
            item.add_marker(pytest.mark.version_independent)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SQLiteStore]:
    """A fresh session store in ``tmp_path`` (``test_store.py`` has its own, on a fake clock)."""
    with SQLiteStore(tmp_path / "sessions.db") as opened:
        yield opened
