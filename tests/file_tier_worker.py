"""A worker process for the file tier's crash test: one session in a log file.

    python -m tests.file_tier_worker LOG MARKERS [--kill LABEL --nth N]

Runs ``durable_scenario``'s session with ``LogWriter(LOG, fsync=True)``, driving the
loop itself (the file tier: no runner), and names the session for the tools'
idempotency keys with ``agentloop.idempotency_session``. If LOG exists, the session
is resumed from it; a model stream cut short by the previous worker's death is
dropped from the file first (the model is asked again). ``--kill``: SIGKILL itself
at the N-th kill point whose label starts with LABEL.
"""

from __future__ import annotations

import argparse
import os
import signal
import time

import agentloop
import replay
from agentloop import Effect, Pause, ToolRegistry, agent_loop
from agentloop._driver import _Driver

from . import durable_scenario as scenario

SESSION = "file-1"


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("log")
    parser.add_argument("markers")
    parser.add_argument("--kill", default=None)
    parser.add_argument("--nth", type=int, default=1)
    args = parser.parse_args()
    scenario.PATHS.update(markers=args.markers)
    seen = 0

    def point(label: str) -> None:
        nonlocal seen
        if args.kill is not None and label.startswith(args.kill):
            seen += 1
            if seen == args.nth:
                os.kill(os.getpid(), signal.SIGKILL)

    scenario.POINTS["point"] = point
    registry = ToolRegistry(scenario.TOOLS)
    effect: Effect | None
    if os.path.exists(args.log):
        events = replay.read_log(args.log)
        end = len(events)
        while events[end - 1].type == "model.chunk":  # a stream cut short: ask again
            end -= 1
        if end < len(events):
            replay.write_log(args.log, events[:end])
        loop, effect = replay.resume(events[:end])
    else:
        loop = agent_loop(scenario.messages(SESSION), tools=registry)
        effect = next(loop)
    driver = _Driver(
        scenario.PointedModel(), registry, None, lambda pause: scenario.APPROVE, time.time
    )
    with replay.LogWriter(args.log, fsync=True) as writer, agentloop.idempotency_session(SESSION):
        writer.follow(loop.log)
        try:
            while effect is not None:
                assert type(effect) is not Pause or effect.reason == "approval"
                effect = loop.send(driver.reply_to(effect))
        except StopIteration:
            pass
    print("done")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
