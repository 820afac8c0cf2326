"""Peak memory of a log with a 10 MB image (DESIGN §25, issue 22).

A 10 MB image in the first user message and in 49 more (the worst case for a
log: the same bytes in 50 events; a run sends the first message in every request
but records it once). Written with ``write_log`` in a child process, read with
``read_log`` in a fresh one; each reports its peak RSS (``ru_maxrss``) above its
own baseline after imports. The same is measured for the same log without the
image (the messages' text only), and the image's share is the difference: the
goal of issue 22 is "within 2x the bytes involved plus today's baseline" (the
peak of the text-only log)::

    python bench/blob_memory.py [--mb 10] [--copies 50]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
from typing import Any


def _peak() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB


def _child(action: str, path: str, size: int, copies: int) -> None:
    """Write (``size`` 0: without the image) or read the log ``path``; print the
    peak RSS and the baseline after imports."""
    import replay
    from agentloop import (
        ImageBlock,
        MessageAcceptedEvent,
        SessionStartEvent,
        TextBlock,
        UserMessage,
    )

    baseline = _peak()
    if action == "write":
        image = (ImageBlock("image/png", data=os.urandom(size)),) if size else ()
        events: list[Any] = [SessionStartEvent(sequence=0, max_steps=8)] + [
            MessageAcceptedEvent(
                sequence=n, message=UserMessage(f"u{n}", (TextBlock(f"look {n}"), *image))
            )
            for n in range(1, copies + 1)
        ]
        baseline = _peak()  # the image itself is not the writer's
        replay.write_log(path, events)
    else:
        assert len(replay.read_log(path)) == copies + 1
    print(json.dumps({"baseline": baseline, "peak": _peak()}))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=float, default=10.0)
    parser.add_argument("--copies", type=int, default=50)
    args = parser.parse_args(argv)
    size = int(args.mb * 1e6)
    out: dict[tuple[str, int], dict[str, int]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for image in (0, size):
            path = os.path.join(tmp, f"image-{image}.jsonl")
            for action in ("write", "read"):
                done = subprocess.run(
                    [
                        sys.executable,
                        __file__,
                        "--child",
                        action,
                        path,
                        str(image),
                        str(args.copies),
                    ],
                    capture_output=True,
                    text=True,
                    check=True,
                )
                out[action, image] = json.loads(done.stdout)
        file_size = os.path.getsize(path)
    mib = 1024 * 1024
    print(f"image {size / mib:.1f} MiB in {args.copies} messages; file {file_size / mib:.1f} MiB")
    for action in ("write", "read"):
        numbers, text = out[action, size], out[action, 0]
        above = numbers["peak"] - numbers["baseline"]
        over_text = numbers["peak"] - text["peak"]
        print(
            f"{action:5}  peak above baseline {above / mib:7.1f} MiB = {above / size:4.2f}x "
            f"the image, {above / file_size:4.2f}x the file "
            f"(baseline {numbers['baseline'] / mib:.1f} MiB); above the text-only log's "
            f"peak: {over_text / mib:.1f} MiB = {over_text / size:4.2f}x the image "
            f"({'within' if over_text <= 2 * size else 'OVER'} 2x)"
        )
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        _child(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]))
    else:
        sys.exit(main())
