"""Benchmarks of the agent loop on this machine, alone or side by side with its peers.

Run from a checkout::

    python bench/run.py           # core suite: agentloop only (under a minute)
    python bench/run.py --peers   # + pydantic-ai, openai-agents, LangGraph (the bench extra)
    python bench/run.py --quick   # smoke run, few iterations (CI)

The suite (``bench/peers``, see ``bench/README.md``) runs scenarios S1-S5 and the
memory checks in one fresh process per framework and prints one table: µs per run
for one tool call then answer (S1), µs per step for a 50-step run (S3), µs per step
after 10 / 1000 / 4096 initial messages (S2, steps only, with setup reported
separately: with an O(1) transcript view per request a step should not cost more
as the transcript grows), replay and log encoding throughput (S4, S5).

Numbers are printed, never asserted: timing is not a test.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench/peers as ``peers``
from peers import add_arguments, run_suite


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    add_arguments(parser)
    return run_suite(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
