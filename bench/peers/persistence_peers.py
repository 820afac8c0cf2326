"""The peers' workers of ``bench/peers/persistence.py``: with and without SQLite persistence.

``python -m bench.peers.persistence_peers NAME [--quick]`` (NAME: ``langgraph``,
``openai-agents``, ``pydantic-ai-dbos``) times one framework in this process and
prints one JSON object on its last line. Each reuses the agent, scripted model and
``add`` tool of its ``bench/peers`` worker (``langgraph_bench``,
``openai_agents_bench``, ``pydantic_ai_bench``), so it is set up exactly as the
``--peers`` suite sets it up, and adds the framework's SQLite persistence as its
documentation shows, a fresh session per run; every SQLite file in WAL mode with
``synchronous=NORMAL`` (agentloop's store's default), see the docstring of
``persistence.py``.
"""

from __future__ import annotations

import argparse
import asyncio
import sqlite3
import sys
import tempfile
import warnings
from collections.abc import Sequence
from importlib.metadata import version
from pathlib import Path
from typing import Any

from ._harness import FINAL_TEXT, USER_TEXT
from .persistence import STEPS, measure, pragmas, rows_stored, worker_output


def langgraph(quick: bool, directory: Path) -> None:
    from langgraph.checkpoint.sqlite import SqliteSaver

    from . import langgraph_bench as lg

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from langgraph.prebuilt import create_react_agent

    path = directory / "langgraph.db"
    # The saver's own set-up turns WAL on; synchronous is per connection.
    connection = sqlite3.connect(path, check_same_thread=False)
    connection.execute("PRAGMA synchronous=NORMAL")
    saver = SqliteSaver(connection)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        durable_graph = create_react_agent(lg.MODEL, [lg.ADD_TOOL], checkpointer=saver)
    plain_graph = lg.GRAPH  # the same agent, compiled without a checkpointer
    threads = iter(range(10**9))
    sessions = [0]

    def plain(count: int) -> None:
        for _ in range(count):
            lg.MODEL.reset(STEPS)
            state = plain_graph.invoke({"messages": [lg.HumanMessage(USER_TEXT)]}, lg.CONFIG)
            assert state["messages"][-1].content == FINAL_TEXT

    rows: dict[str, Any] = {}
    for durability in ("sync", "async"):

        def durable(count: int, durability: Any = durability) -> None:
            for _ in range(count):
                lg.MODEL.reset(STEPS)
                config: Any = {**lg.CONFIG, "configurable": {"thread_id": f"t{next(threads)}"}}
                state = durable_graph.invoke(
                    {"messages": [lg.HumanMessage(USER_TEXT)]}, config, durability=durability
                )
                assert state["messages"][-1].content == FINAL_TEXT
                sessions[0] += 1

        connection.commit()
        before, stored = sessions[0], rows_stored(path)
        row = measure(plain, durable, quick=quick)
        connection.commit()
        row["rows_per_step"] = (rows_stored(path) - stored) / ((sessions[0] - before) * STEPS)
        row["journal_mode"] = pragmas(path)
        row["synchronous"] = "NORMAL"
        rows[f'SqliteSaver, durability="{durability}"'] = row
    connection.close()
    worker_output(
        "langgraph",
        {
            "langgraph": version("langgraph"),
            "langgraph-checkpoint-sqlite": version("langgraph-checkpoint-sqlite"),
        },
        rows,
    )


def openai_agents(quick: bool, directory: Path) -> None:
    from agents import Runner, SQLiteSession

    from . import openai_agents_bench as oa

    class Session(SQLiteSession):
        """``SQLiteSession`` whose connections use ``synchronous=NORMAL`` (it sets WAL)."""

        @staticmethod
        def _configure_connection(conn: sqlite3.Connection) -> None:
            SQLiteSession._configure_connection(conn)
            conn.execute("PRAGMA synchronous=NORMAL")

    path = directory / "openai_agents.db"
    ids = iter(range(10**9))
    sessions = [0]

    def plain(count: int) -> None:
        for _ in range(count):
            oa.MODEL.reset(STEPS)
            result = Runner.run_sync(oa.AGENT, USER_TEXT, max_turns=100)
            assert result.final_output == FINAL_TEXT

    def durable(count: int) -> None:
        for _ in range(count):
            oa.MODEL.reset(STEPS)
            session = Session(f"s{next(ids)}", path)
            try:
                result = Runner.run_sync(oa.AGENT, USER_TEXT, max_turns=100, session=session)
            finally:
                session.close()
            assert result.final_output == FINAL_TEXT
            sessions[0] += 1

    row = measure(plain, durable, quick=quick)
    row["rows_per_step"] = rows_stored(path) / (sessions[0] * STEPS)
    row["journal_mode"] = pragmas(path)
    row["synchronous"] = "NORMAL"
    worker_output(
        "openai-agents", {"openai-agents": version("openai-agents")}, {"SQLiteSession": row}
    )


def pydantic_ai_dbos(quick: bool, directory: Path) -> None:
    import sqlalchemy
    from dbos import DBOS
    from pydantic_ai import Agent
    from pydantic_ai.durable_exec.dbos import DBOSDurability
    from pydantic_ai.models.function import FunctionModel

    from . import pydantic_ai_bench as pa

    @sqlalchemy.event.listens_for(sqlalchemy.engine.Engine, "connect")
    def like_for_like(dbapi_connection: Any, record: Any) -> None:
        # DBOS's SQLite default: a rollback journal, synchronous=FULL.
        if isinstance(dbapi_connection, sqlite3.Connection):
            dbapi_connection.execute("PRAGMA journal_mode=WAL")
            dbapi_connection.execute("PRAGMA synchronous=NORMAL")

    # pydantic-ai's DBOS integration makes each model request a DBOS step; a function
    # tool runs in the workflow as it is, its result not stored, unless it is a
    # ``@DBOS.step`` itself (as the docs advise for tools that do I/O). agentloop
    # stores every tool result: both are measured, one agent each.
    agent = Agent(
        FunctionModel(pa.SCRIPT.respond), name="bench_add", capabilities=[DBOSDurability()]
    )
    stepped = Agent(
        FunctionModel(pa.SCRIPT.respond), name="bench_add_steps", capabilities=[DBOSDurability()]
    )

    @agent.tool_plain(name="add")
    async def add_tool(left: int, right: int) -> dict[str, int]:
        """Add two integers."""
        return pa.add(left, right)

    @stepped.tool_plain(name="add")
    @DBOS.step()
    async def add_step(left: int, right: int) -> dict[str, int]:
        """Add two integers."""
        return pa.add(left, right)

    @DBOS.workflow()
    async def session(prompt: str) -> str:
        result = await agent.run(prompt, usage_limits=pa.NO_LIMITS)
        return result.output

    @DBOS.workflow()
    async def stepped_session(prompt: str) -> str:
        result = await stepped.run(prompt, usage_limits=pa.NO_LIMITS)
        return result.output

    path = directory / "dbos.sqlite"
    DBOS(
        config={
            "name": "bench-persistence",
            "system_database_url": f"sqlite:///{path}",
            "run_admin_server": False,
            "enable_otlp": False,
            "log_level": "WARNING",
        }
    )
    DBOS.launch()
    sessions = [0]

    async def plain_all(count: int) -> None:
        for _ in range(count):
            pa.SCRIPT.reset(STEPS)
            result = await pa.AGENT.run(USER_TEXT, usage_limits=pa.NO_LIMITS)
            assert result.output == FINAL_TEXT

    rows: dict[str, Any] = {}
    try:
        for label, workflow in (
            ("DBOSDurability, DBOS on SQLite", session),
            ("DBOSDurability + tool as @DBOS.step", stepped_session),
        ):

            async def durable_all(count: int, workflow: Any = workflow) -> None:
                for _ in range(count):
                    pa.SCRIPT.reset(STEPS)
                    assert await workflow(USER_TEXT) == FINAL_TEXT
                    sessions[0] += 1

            before, stored = sessions[0], rows_stored(path)
            row = measure(
                lambda n: asyncio.run(plain_all(n)),
                lambda n, durable_all=durable_all: asyncio.run(durable_all(n)),
                quick=quick,
            )
            row["rows_per_step"] = (rows_stored(path) - stored) / ((sessions[0] - before) * STEPS)
            row["journal_mode"] = pragmas(path)
            row["synchronous"] = "NORMAL"
            rows[label] = row
    finally:
        DBOS.destroy()
    worker_output(
        "pydantic-ai + DBOS",
        {"pydantic-ai-slim": version("pydantic-ai-slim"), "dbos": version("dbos")},
        rows,
    )


WORKERS = {
    "langgraph": langgraph,
    "openai-agents": openai_agents,
    "pydantic-ai-dbos": pydantic_ai_dbos,
}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="a peer's persistence worker")
    parser.add_argument("name", choices=sorted(WORKERS))
    parser.add_argument("--quick", action="store_true", help="few iterations (smoke run)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        WORKERS[args.name](args.quick, Path(tmp))
    return 0


if __name__ == "__main__":
    sys.exit(main())
