"""The SQLite floor of a durable step: what the store's commits cost with no Python around them.

Run from a checkout::

    python bench/durable_floor.py          # about a minute
    python bench/durable_floor.py --quick  # smoke run (numbers mean nothing)
    python bench/durable_floor.py --json floor.json   # also the numbers as JSON

``replay.run_durable`` commits twice per step of S3 (a 50-step session: 49 ``add``
calls, then the answer): before the model call and before the tool call (DESIGN
§20's write-ahead rule). This prints, in CPU µs per step (``time.process_time``:
this process's user + system time; best batch of several rounds, interleaved):

- ``run()``: the step without persistence; ``run_durable``: with the store
  (``SQLiteStore``, WAL, ``synchronous=NORMAL``), and the difference: the overhead.
- F1 bare commits: two transactions per step of ``BEGIN IMMEDIATE``, one
  ``UPDATE`` of the session's row, ``COMMIT``: the locks and the WAL write of a
  commit, nothing stored.
- F2 the store's statements: two transactions per step of the statements
  ``SQLiteStore.append`` runs (``BEGIN IMMEDIATE``, its ``UPDATE`` of the session's
  row with the checks, the events' ``INSERT``, ``COMMIT``) with the rows of a real
  session, encoded and hashed beforehand (not timed): SQLite's share of the
  overhead; the rest is Python (the events' encoding and hash chain, the checks).

Numbers are printed, never asserted.
"""

from __future__ import annotations

import argparse
import gc
import itertools
import json
import sqlite3
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import agentloop  # noqa: E402
import replay  # noqa: E402
from agentloop import FunctionModel, ModelRequest, ScriptedResponse, ToolCall, UserMessage  # noqa: E402
from replay import _store  # noqa: E402

STEPS = 50


@agentloop.tool
def add(left: int, right: int) -> dict[str, int]:
    """Add two integers."""
    return {"sum": left + right}


def answer(request: ModelRequest) -> ScriptedResponse:
    if request.step < STEPS:
        call = ToolCall(f"c{request.step}", "add", {"left": 20, "right": 22})
        return ScriptedResponse.tool_calls(f"r{request.step}", call)
    return ScriptedResponse.text(f"r{request.step}", "20 + 22 = 42")


def best_cpu_us_per_step(
    runs: dict[str, Callable[[], None]], rounds: int, batch: int
) -> dict[str, float]:
    """CPU µs per step of each of ``runs`` (one session each): best batch, rounds interleaved."""
    best = dict.fromkeys(runs, float("inf"))
    for run in runs.values():
        run()  # warm up
    for _ in range(rounds):
        for name, run in runs.items():
            gc.collect()
            start = time.process_time_ns()
            for _ in range(batch):
                run()
            best[name] = min(best[name], (time.process_time_ns() - start) / batch / STEPS / 1000)
    return best


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="smoke run, few iterations")
    parser.add_argument("--json", metavar="PATH", help="also write the numbers as JSON")
    args = parser.parse_args(argv)
    rounds, batch = (2, 1) if args.quick else (9, 10)
    model = FunctionModel(answer)
    question = [UserMessage("u1", "What is 20 + 22?")]
    ids = itertools.count()
    with tempfile.TemporaryDirectory() as tmp:
        store = replay.SQLiteStore(Path(tmp) / "durable.db")
        # One session's commits, as the store writes them (recorded, not timed).
        batches: list[tuple[int, list[tuple[str, int, str, str]]]] = []
        append = store.append

        def recording(session_id: str, events: Sequence[Any], **options: Any) -> Any:
            found = append(session_id, events, **options)
            batches.append((options["expected"], []))
            return found

        store.append = recording  # type: ignore[method-assign]
        replay.run_durable(store, "recorded", question, model=model, tools=[add], max_steps=STEPS)
        store.append = append  # type: ignore[method-assign]
        stored = store._db.execute(_store._SELECT_ROWS, ("recorded",) * 2).fetchall()  # type: ignore[union-attr]
        ends = [expected for expected, _ in batches[1:]] + [len(stored)]
        commits = [
            (expected, stored[expected:end])
            for (expected, _), end in zip(batches, ends, strict=True)
        ]
        first = commits[0][0]
        db = sqlite3.connect(Path(tmp) / "durable.db", isolation_level=None)
        db.execute("PRAGMA synchronous=NORMAL")
        execute = db.cursor().execute

        def new_session() -> tuple[str, int]:
            session_id = f"floor{next(ids)}"
            number = execute("SELECT max(number) + 1 FROM sessions").fetchone()[0]
            execute(
                "INSERT INTO sessions (id, status, steps, next_sequence, created, updated, "
                "lease_owner, lease_expires, config, log_format, number) "
                "VALUES (?, 'running', 1, ?, 0, 0, 'w', 1e12, '{}', 3, ?)",
                (session_id, first, number),
            )
            execute(_store._INSERTS[first], rows_of(session_id, number, stored[:first]))
            return session_id, number

        def rows_of(session_id: str, number: int, rows: Sequence[Any]) -> list[Any]:
            """The values of the events' INSERT (as the store's: see _stored_values)."""
            return [
                value
                for sequence, event, link in rows
                for value in ((number << 32) + sequence, sequence, event, link)
            ]

        def plain() -> None:
            agentloop.run(question, model=model, tools=[add], max_steps=STEPS)

        def durable() -> None:
            replay.run_durable(
                store, f"s{next(ids)}", question, model=model, tools=[add], max_steps=STEPS
            )

        def bare() -> None:
            session_id, _ = new_session()
            for _ in commits:
                execute("BEGIN IMMEDIATE")
                execute("UPDATE sessions SET steps = steps + 1 WHERE id = ?", (session_id,))
                execute("COMMIT")

        def statements() -> None:
            session_id, number = new_session()
            for expected, rows in commits:
                execute("BEGIN IMMEDIATE")
                moved = execute(
                    _store._APPEND_SAME_STATUS,
                    (
                        expected + len(rows),
                        1,
                        0.0,
                        1e12,
                        session_id,
                        expected,
                        "running",
                        "w",
                        "w",
                        0,
                        session_id,
                        0,
                        (number << 32) + expected - 1,
                        stored[expected - 1][2],
                    ),
                ).rowcount
                if moved != 1:  # (the checks of the store's UPDATE passed: it did its work)
                    raise SystemExit(f"F2: the session's row did not move at {expected}")
                execute(_store._INSERTS[len(rows)], rows_of(session_id, number, rows))
                execute("COMMIT")

        best = best_cpu_us_per_step(
            {"run()": plain, "run_durable": durable, "F1": bare, "F2": statements}, rounds, batch
        )
        db.close()
        store.close()
    overhead = best["run_durable"] - best["run()"]
    print(f"S3 ({STEPS} steps), CPU µs per step, best of {rounds} rounds of {batch} sessions")
    print(f"  commits per step: {len(commits) / STEPS:.2f}; SQLite {sqlite3.sqlite_version}")
    print(f"  run():                     {best['run()']:8.1f}")
    print(f"  run_durable:               {best['run_durable']:8.1f}")
    print(f"  overhead:                  {overhead:8.1f}")
    print(f"  F1 bare commits:           {best['F1']:8.1f}")
    share = best["F2"] / overhead if overhead > 0 else float("nan")
    print(f"  F2 the store's statements: {best['F2']:8.1f}  ({share:.0%} of the overhead)")
    if args.json:
        numbers = {
            "cpu_us_per_step": best,
            "overhead_us_per_step": overhead,
            "commits_per_step": len(commits) / STEPS,
            "rounds": rounds,
            "sessions_per_batch": batch,
            "sqlite": sqlite3.sqlite_version,
        }
        Path(args.json).write_text(json.dumps(numbers, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
