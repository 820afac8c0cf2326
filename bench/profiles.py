"""Where the time of a step goes: cProfile listings of the bench's scenarios.

Run from a checkout::

    python bench/profiles.py                 # every scenario, top 10 by own time
    python bench/profiles.py S3-run chunks   # some of them
    python bench/profiles.py --top 20 --sort cumulative

Scenarios (the same as ``bench/run.py``'s, see ``bench/README.md``):

- ``S1-raw`` / ``S1-run``: one tool call then the answer, the raw generator /
  ``run()`` + ``ScriptedModel``;
- ``S3-raw`` / ``S3-run``: 50 steps (49 ``add`` calls, then the answer);
- ``chunks``: ``run()`` of one step whose answer streams in 1,000 text chunks;
- ``replay``: ``replay.replay`` of a recorded 64-step session (S4);
- ``codec``: ``encode_event`` then ``decode_event`` over that session's events (S5).

Each scenario runs for about ``--seconds`` under the profiler. The profiler's own
cost per call inflates small functions: read the listing for *where* the time
goes, and ``bench/run.py`` for how much there is.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench/peers as ``peers``

from peers.agentloop_bench import make_driven, make_raw, make_streamed, record_session

import agentloop
import replay


def _scenarios() -> dict[str, Callable[[], object]]:
    events = record_session()
    encode, decode = agentloop.encode_event, agentloop.decode_event

    def codec() -> None:
        for event in events:
            decode(encode(event))

    return {
        "S1-raw": make_raw(0, 2),
        "S1-run": make_driven(0, 2),
        "S3-raw": make_raw(0, 50),
        "S3-run": make_driven(0, 50),
        "chunks": make_streamed(1000),
        "replay": lambda: replay.replay(events),
        "codec": codec,
    }


def profile(name: str, fn: Callable[[], object], seconds: float, top: int, sort: str) -> str:
    """The listing of ``fn`` run repeatedly for about ``seconds`` under cProfile."""
    fn()  # warm up (and a first check that it runs)
    start = time.perf_counter()
    calls = 0
    profiler = cProfile.Profile()
    profiler.enable()
    while time.perf_counter() - start < seconds:
        fn()
        calls += 1
    profiler.disable()
    out = io.StringIO()
    stats = pstats.Stats(profiler, stream=out)
    stats.sort_stats(sort).print_stats(top)
    body = out.getvalue().strip().splitlines()
    # Keep the summary line and the table; drop pstats' blank lines and preamble.
    keep = [line for line in body if line.strip() and not line.startswith("   Ordered by")]
    return f"== {name}: {calls} runs\n" + "\n".join(keep)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("names", nargs="*", help="scenarios (default: all)")
    parser.add_argument("--top", type=int, default=10, help="rows per listing")
    parser.add_argument("--seconds", type=float, default=2.0, help="profiled time per scenario")
    parser.add_argument("--sort", default="tottime", help="pstats sort key (tottime, cumulative)")
    args = parser.parse_args(argv)
    scenarios = _scenarios()
    unknown = [name for name in args.names if name not in scenarios]
    if unknown:
        parser.error(f"unknown scenario(s) {', '.join(unknown)}; known: {', '.join(scenarios)}")
    for name in args.names or scenarios:
        print(profile(name, scenarios[name], args.seconds, args.top, args.sort))
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
