"""Benchmarks of the agent loop on this machine, alone or side by side with its peers.

Run from a checkout::

    python bench/run.py           # core suite: agentloop only (under a minute)
    python bench/run.py --peers   # + pydantic-ai, openai-agents, LangGraph (the bench extra)
    python bench/run.py --quick   # smoke run, few iterations
    python bench/run.py --goals   # the maintainers' report (CI runs --quick --goals)
    python bench/run.py --persistence   # durable steps side by side: agentloop's SQLite
                                        # store vs LangGraph, openai-agents, pydantic-ai +
                                        # DBOS; the replay worker's sessions/s
    python bench/run.py --persistence --temporal   # + Temporal vs pydantic-ai on Temporal

The suite (``bench/peers``, see ``bench/README.md``) runs every scenario and the
memory checks in one fresh process per framework. By default it prints what a user
reads: µs per step then per run of a 50-step run and of one tool call then the
answer; long transcripts (the cost of a step, which does not grow with the
transcript, apart from reading the transcript once per run, which does, and whole
runs after 9 / 999 / 4,095 earlier messages); async runs; memory; replay, log and
import figures. ``--goals`` prints the maintainers' report instead: scenarios S1-S5
by number against the floor (no engine), every agentloop-only figure, and each goal
with met / MISSED.

Numbers are printed, never asserted: timing is not a test.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench/peers as ``peers``
from peers import add_arguments, persistence, run_suite


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    add_arguments(parser)
    parser.add_argument(
        "--persistence",
        action="store_true",
        help="instead of the suite: per-step persistence overhead side by side with the "
        "peers' SQLite persistence, and the replay worker's sessions/s (bench/peers/"
        "persistence.py; --quick, --json apply)",
    )
    parser.add_argument(
        "--temporal",
        action="store_true",
        help="with --persistence: also Temporal per step vs pydantic-ai's Temporal integration",
    )
    parser.add_argument(
        "--fleet-sessions",
        type=int,
        default=None,
        help="with --persistence: sessions per fleet run",
    )
    parser.add_argument(
        "--agentloop-at",
        action="append",
        metavar="REV",
        help="with --persistence: also agentloop's row as of this git revision (repeatable)",
    )
    args = parser.parse_args(argv)
    if args.persistence:
        return persistence.run(args)
    if args.temporal:
        parser.error("--temporal goes with --persistence")
    return run_suite(args)


if __name__ == "__main__":
    sys.exit(main())
