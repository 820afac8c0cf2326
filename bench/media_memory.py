"""Peak memory of ``run()`` with a 10 MB image in one user message, sent in 50
model requests (DESIGN §25): what the loop holds beyond the bytes themselves.

Measured with tracemalloc (Python allocations; the image's bytes are allocated
before measuring starts, so the peak is what the run adds). The model is a
scripted one: each request gets a tool call, the 50th the answer, so the image
is in every one of the 50 requests' transcripts (by reference: messages are
frozen and shared). Also: the log encoded in memory (``encode_event`` of each
event, as the in-memory form holds bytes as base64 inside the JSON).

    python bench/media_memory.py [--mb 10] [--requests 50]
"""

from __future__ import annotations

import argparse
import gc
import os
import tracemalloc

from agentloop import (
    EventLog,
    ImageBlock,
    ScriptedModel,
    ScriptedResponse,
    TextBlock,
    ToolCall,
    UserMessage,
    run,
    tool,
)


@tool
def look() -> str:
    """Look again."""
    return "nothing new"


def _script(requests: int) -> list[ScriptedResponse]:
    calls = [
        ScriptedResponse.tool_calls(f"r{i}", ToolCall(f"c{i}", "look", {}))
        for i in range(1, requests)
    ]
    return [*calls, ScriptedResponse.text(f"r{requests}", "a cat")]


def _peak(image: ImageBlock | None, requests: int, path: str | None = None) -> tuple[int, int]:
    """(peak bytes tracemalloc saw during run(), messages in the transcript); with
    ``path``, the log is also written to that file as it grows (replay.LogWriter)."""
    content: object = "what is in this picture?"
    if image is not None:
        content = (TextBlock("what is in this picture?"), image)
    messages = [UserMessage("u1", content)]  # type: ignore[arg-type]
    model = ScriptedModel(_script(requests))
    log = EventLog()
    gc.collect()
    tracemalloc.start()
    tracemalloc.reset_peak()
    if path is None:
        result = run(messages, model=model, tools=[look], max_steps=requests, log=log)
    else:
        from replay import LogWriter

        with LogWriter(path) as writer:
            writer.follow(log)
            result = run(messages, model=model, tools=[look], max_steps=requests, log=log)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert result.status == "completed", result.error
    return peak, len(result.messages)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mb", type=float, default=10.0)
    parser.add_argument("--requests", type=int, default=50)
    args = parser.parse_args()
    size = int(args.mb * 1024 * 1024)
    image = ImageBlock("image/png", data=os.urandom(size), name="cat.png")
    baseline, _ = _peak(None, args.requests)
    peak, count = _peak(image, args.requests)
    mib = 1024 * 1024
    print(f"image: {size / mib:.1f} MiB in one user message, {args.requests} requests")
    print(f"text-only run peak (baseline):  {baseline / mib:8.2f} MiB")
    print(f"run with the image, peak:       {peak / mib:8.2f} MiB ({count} messages)")
    print(f"added by the image:             {(peak - baseline) / mib:8.2f} MiB")
    print(f"bound 2 x bytes + baseline:     {(2 * size + baseline) / mib:8.2f} MiB")
    print("within the bound" if peak <= 2 * size + baseline else "OVER the bound")
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "session.jsonl")
        # (A first run makes what replay builds on first use: not the image's.)
        _peak(None, args.requests, os.path.join(folder, "warm-up.jsonl"))
        written_baseline, _ = _peak(None, args.requests, os.path.join(folder, "text.jsonl"))
        written, _ = _peak(image, args.requests, path)
        file_size = os.path.getsize(path)
    print(f"with a LogWriter, text-only:    {written_baseline / mib:8.2f} MiB")
    print(f"with a LogWriter, the image:    {written / mib:8.2f} MiB")
    print(f"log file:                       {file_size / mib:8.2f} MiB")
    print(
        "within the bound"
        if written <= 2 * size + written_baseline
        else "OVER the bound (the log writer encodes the image: see log format v3)"
    )


if __name__ == "__main__":
    main()
