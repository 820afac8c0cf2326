"""A worker process for the durable crash tests: runs sessions, may kill itself.

    python -m tests.durable_worker DB MARKERS JOURNAL --sessions s1,s2 [--owner W]
        [--kill LABEL --nth N] [--lease SECONDS] [--race] [--slow SECONDS] [--async]

- Runs every session to its end with ``durable_scenario.run_session`` (answering
  its approval pause itself), then prints ``done``.
- ``--kill LABEL --nth N``: SIGKILL itself at the N-th kill point whose label starts
  with LABEL (``model:``, ``tool:``, ``pause:``, ``sql:`` -- a statement of a store
  transaction: ``sql:BEGIN``, ``sql:INSERT``, ``sql:UPDATE``, ``sql:DELETE``,
  ``sql:COMMIT``). Before dying it prints ``killed at <label>`` to stderr.
- ``--race``: serve sessions the way one of several workers would: skip a
  session whose lease another worker holds, come back to it later.
- ``--slow S``: sleep S seconds at every tool and model call (wider windows for
  kills from outside).
- ``--async``: run the sessions with ``replay.arun_durable`` (async model stream,
  ``async def`` tools) instead of ``replay.run_durable``.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time

import replay

from . import durable_scenario as scenario


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("db")
    parser.add_argument("markers")
    parser.add_argument("journal")
    parser.add_argument("--sessions", required=True)
    parser.add_argument("--owner", default="worker")
    parser.add_argument("--kill", default=None)
    parser.add_argument("--nth", type=int, default=1)
    parser.add_argument("--lease", type=float, default=30.0)
    parser.add_argument("--race", action="store_true")
    parser.add_argument("--slow", type=float, default=0.0)
    parser.add_argument("--async", dest="asynchronous", action="store_true")
    args = parser.parse_args()
    scenario.PATHS.update(markers=args.markers, journal=args.journal)

    seen = 0

    def point(label: str) -> None:
        nonlocal seen
        if args.slow and label in ("model:call", "tool:before:raw_effect"):
            time.sleep(args.slow)
        if args.kill is not None and label.startswith(args.kill):
            seen += 1
            if seen == args.nth:
                print(f"killed at {label}", file=sys.stderr, flush=True)
                os.kill(os.getpid(), signal.SIGKILL)

    class JournaledStore(replay.SQLiteStore):
        """Writes ``commit`` to the journal after every commit of events."""

        def create(self, *a, **k):  # type: ignore[no-untyped-def]
            super().create(*a, **k)
            scenario._append(args.journal, "commit")

        def append(self, *a, **k):  # type: ignore[no-untyped-def]
            found = super().append(*a, **k)
            if not found:  # (messages found waiting: nothing was committed)
                scenario._append(args.journal, "commit")
            return found

    scenario.POINTS["point"] = point
    store = JournaledStore(args.db)
    store._db.set_trace_callback(  # type: ignore[union-attr]
        lambda sql: point("sql:" + " ".join(sql.split()[:3]))
    )
    pending = args.sessions.split(",")
    while pending:
        waiting = []
        for session_id in pending:
            try:
                scenario.run_session(
                    store,
                    session_id,
                    owner=args.owner,
                    lease_seconds=args.lease,
                    asynchronous=args.asynchronous,
                )
            except (replay.SessionLeased, replay.StoreConflict) as exc:
                if not args.race:
                    raise
                print(f"skipped: {exc}", file=sys.stderr, flush=True)
                waiting.append(session_id)
        pending = waiting
        if pending:
            time.sleep(0.05)
    store.close()
    print("done", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
