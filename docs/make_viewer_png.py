"""Record a demo session and take the screenshot ``docs/viewer.png`` of its page.

Run from the repository root (needs Debian's ``chromium``; ``pngquant``, where
installed, makes the picture about three times smaller)::

    python docs/make_viewer_png.py                  # writes docs/viewer.png
    python docs/make_viewer_png.py --out shot.png   # somewhere else
    python docs/make_viewer_png.py --log demo.jsonl --html demo.html   # keep those too

The session is recorded with the real loop and a scripted model (thinking, parallel
tool calls, a tool error and a retry, a budget pause and its resume, usage per
step), so the picture shows what a real log looks like.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from agentloop import (  # noqa: E402
    Budget,
    Event,
    ModelChunk,
    ModelResponse,
    Reply,
    Resume,
    TextBlock,
    ThinkingBlock,
    ToolCall,
    ToolResult,
    ToolSpec,
    Usage,
    UserMessage,
    agent_loop,
)
from replay import write_log  # noqa: E402
from replay._view import check_report, render_html  # noqa: E402

CI_STATUS = ToolSpec(
    "ci_status",
    "The latest CI pipeline of a branch.",
    {"type": "object", "properties": {"branch": {"type": "string"}}, "required": ["branch"]},
)
SEARCH_ISSUES = ToolSpec(
    "search_issues",
    "Search the issue tracker.",
    {
        "type": "object",
        "properties": {"label": {"type": "string"}, "milestone": {"type": "string"}},
    },
)
CHROMIUM_FLAGS = (
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
    "--force-device-scale-factor=1",
)


def demo_events() -> list[Event]:
    """The demo session: three steps, a tool error, a budget pause."""
    loop = agent_loop(
        [UserMessage("user-1", "Is release 2.4 ready to ship? Check CI and open blockers.")],
        tools=[CI_STATUS, SEARCH_ISSUES],
        system="You are a careful release assistant. Check before you answer.",
        budget=Budget(max_turns=2),
        started_at=1_733_000_000.0,
    )
    clock = iter(1_733_000_000.0 + 0.4 * n for n in range(1, 1000))
    think = ThinkingBlock(
        "The user wants a go/no-go. I need two facts: is CI green on the release "
        "branch, and are there open blockers in the 2.4 milestone. Both lookups are "
        "independent, so I can ask for them together."
    )
    text = TextBlock("Checking CI and the open blockers for 2.4.")
    ci = ToolCall("call-1", "ci_status", {"branch": "release-2.4"})
    issues = {"label": "blocker", "milestone": "2.4"}
    search = ToolCall("call-2", "search_issues", issues)
    retry = ToolCall("call-3", "search_issues", issues)
    answer = (
        "Not yet. CI is green on release-2.4 (pipeline #1842, 10 min 12 s), but one "
        "blocker is open: #311 “Crash on empty config” (assigned to dana). Ship once "
        "it is fixed and CI passes again."
    )
    replies: list[Reply] = [
        *(
            ModelChunk("request-001", block, at=next(clock))
            for block in (think, TextBlock("Checking CI and the open"), TextBlock(" blockers"))
        ),
        ModelChunk("request-001", TextBlock(" for 2.4."), at=next(clock)),
        ModelChunk("request-001", ci, at=next(clock)),
        ModelChunk("request-001", search, at=next(clock)),
        ModelResponse(
            "request-001",
            "resp-1",
            (think, text, ci, search),
            "tool_call",
            Usage(812, 164),
            at=next(clock),
        ),
        ToolResult(
            "call-1",
            '{"pipeline": 1842, "status": "passed", "duration_s": 612, "jobs": 14}',
            at=next(clock),
        ),
        ToolResult("call-2", "HTTP 429: rate limited, retry in 2 s", is_error=True, at=next(clock)),
        ModelChunk("request-002", TextBlock("The issue search was rate limited; "), at=next(clock)),
        ModelChunk("request-002", TextBlock("trying once more."), at=next(clock)),
        ModelChunk("request-002", retry, at=next(clock)),
        ModelResponse(
            "request-002",
            "resp-2",
            (TextBlock("The issue search was rate limited; trying once more."), retry),
            "tool_call",
            Usage(1013, 41),
            at=next(clock),
        ),
        ToolResult(
            "call-3",
            '[{"id": 311, "title": "Crash on empty config", "assignee": "dana", '
            '"labels": ["blocker", "2.4"]}]',
            at=next(clock),
        ),
        Resume(payload={"note": "ok, one more turn"}, budget=Budget(max_turns=4), at=next(clock)),
        *(
            ModelChunk("request-003", TextBlock(answer[i : i + 60]), at=next(clock))
            for i in range(0, len(answer), 60)
        ),
        ModelResponse(
            "request-003",
            "resp-3",
            (TextBlock(answer),),
            "stop",
            Usage(1180, 73),
            at=next(clock),
        ),
    ]
    effect = next(loop)
    for reply in replies:
        try:
            effect = loop.send(reply)
        except StopIteration:
            return list(loop.log.events)
    raise RuntimeError(f"the demo session still waits for {effect!r}")


def screenshot(page: Path, out: Path, *, size: str = "1100,1560") -> None:
    """Take a screenshot of ``page`` with headless Chromium (no network)."""
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        raise SystemExit("chromium not found (Debian: apt-get install chromium)")
    with tempfile.TemporaryDirectory() as profile:
        subprocess.run(
            [
                browser,
                *CHROMIUM_FLAGS,
                f"--user-data-dir={profile}",
                f"--window-size={size}",
                f"--screenshot={out.resolve()}",
                page.resolve().as_uri(),
            ],
            check=True,
            capture_output=True,
            timeout=120,
        )
    # A flat page quantizes without a visible change, at a third of the size.
    quantize = shutil.which("pngquant")
    if quantize is not None:
        subprocess.run(
            [quantize, "--quality=80-95", "--speed=1", "--force", f"--output={out}", "--", out],
            check=True,
            timeout=120,
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=HERE / "viewer.png")
    parser.add_argument("--log", type=Path, help="also keep the demo log here")
    parser.add_argument("--html", type=Path, help="also keep the page here")
    args = parser.parse_args(argv)
    events = demo_events()
    with tempfile.TemporaryDirectory() as tmp:
        log = args.log or Path(tmp) / "release-check.jsonl"
        page = args.html or Path(tmp) / "release-check.html"
        write_log(log, events)
        page.write_text(
            render_html(events, source=log.name, report=check_report(events)), encoding="utf-8"
        )
        screenshot(page, args.out)
    print(f"wrote {args.out} ({args.out.stat().st_size:,} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
