"""``python -m replay view`` pages in a real headless browser (Chromium + chromedriver).

Skipped, with the reason, only where no Chromium or chromedriver can be found;
``.ci/run`` installs Debian's ``chromium`` and ``chromium-driver`` when they are
missing. The browser runs with no network features (no background networking,
component updates, sync or QUIC) and a fresh profile; the pages fetch nothing.
"""

from __future__ import annotations

import json
import re
import runpy
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest

import replay
from agentloop import (
    Event,
    Limits,
    ModelAttempt,
    ModelFailure,
    ModelResponse,
    ProviderBlock,
    TextBlock,
    ToolCall,
    ToolResult,
    ToolSpec,
    Usage,
    UserMessage,
    agent_loop,
    encode_event,
)
from replay import read_log, write_log
from replay._view import check_report, diff_report, embed_json, render_html

from .view_logs import (
    FIXTURES,
    HOSTILE,
    SPOOF_CHILD,
    hostile_events,
    large_events,
    tampered,
    tree_on_disk,
)

CHROMIUM = next(
    (p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if p), None
)
DRIVER = shutil.which("chromedriver")

pytestmark = pytest.mark.skipif(
    CHROMIUM is None or DRIVER is None,
    reason=(
        f"no headless browser: chromium {'found' if CHROMIUM else 'not found'}, chromedriver "
        f"{'found' if DRIVER else 'not found'} on PATH (Debian: apt-get install chromium "
        "chromium-driver; .ci/run installs them when it runs as root)"
    ),
)

FLAGS = (
    "--headless=new",
    "--no-sandbox",  # as root, Chromium refuses to start with its sandbox
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-extensions",
    "--window-size=1200,900",
)


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={tmp_path_factory.mktemp('chromium-profile')}")
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    # A driver path given: Selenium Manager (which would download one) is not used.
    driver = webdriver.Chrome(service=Service(executable_path=str(DRIVER)), options=options)
    try:
        yield driver
    finally:
        driver.quit()


class Page:
    """One rendered page in the browser."""

    def __init__(self, driver: Any, path: Path) -> None:
        self.driver = driver
        self.path = path
        driver.get_log("browser")  # drop what earlier pages logged
        driver.get(path.as_uri())
        assert self.js("return document.body.dataset.ready") == "true", self.console()

    def js(self, script: str, *args: Any) -> Any:
        return self.driver.execute_script(script, *args)

    def key(self, keys: str) -> None:
        from selenium.webdriver.common.action_chains import ActionChains

        ActionChains(self.driver).send_keys(keys).perform()

    def count(self, selector: str) -> int:
        return int(self.js("return document.querySelectorAll(arguments[0]).length", selector))

    def rendered(self) -> list[tuple[int, str]]:
        return [
            (int(i), t)
            for i, t in self.js(
                "return [...document.querySelectorAll('.ev')]"
                ".map(e => [e.dataset.index, e.dataset.type])"
            )
        ]

    def console(self) -> list[str]:
        return [entry["message"] for entry in self.driver.get_log("browser")]

    def errors(self) -> list[str]:
        return [e["message"] for e in self.driver.get_log("browser") if e["level"] == "SEVERE"]


def json_string(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)


def write_page(path: Path, events: list[Event], **options: Any) -> Path:
    path.write_text(render_html(events, source=str(path), **options), encoding="utf-8")
    return path


def step_groups(events: list[Event]) -> int:
    return sum(1 for e in events if e.type == "step.start")


# --------------------------------------------------------------------------- every fixture

FIXTURE_LOGS = sorted(FIXTURES.glob("*.jsonl")) + sorted((FIXTURES / "v1").glob("*.jsonl"))


@pytest.mark.parametrize("log", FIXTURE_LOGS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_event_of_every_fixture_renders(browser: Any, tmp_path: Path, log: Path) -> None:
    events = read_log(log)
    page = Page(browser, write_page(tmp_path / "page.html", events))
    assert page.js("return document.title") == "page.html · agentloop session"
    # Small logs open with every step expanded; streamed chunks stay folded.
    assert page.count("details.group") == page.count("details.group[open]")
    page.key("e")  # expand everything, streamed chunks too
    assert page.rendered() == [(i, e.type) for i, e in enumerate(events)]
    titles = page.js(
        "return [...document.querySelectorAll('.group-title')].map(e => e.textContent)"
    )
    assert sum(1 for t in titles if t.startswith("Step ")) == step_groups(events)
    assert page.errors() == []


def test_the_header_sums_up_the_run(browser: Any, tmp_path: Path) -> None:
    events = read_log(FIXTURES / "tool_calls.jsonl")
    page = Page(browser, write_page(tmp_path / "page.html", events))
    stats = page.js(
        "return [...document.querySelectorAll('.stat')].map(s => s.innerText.replace('\\n', ' | '))"
    )
    assert stats == [
        "completed | goal_met",
        "2 | steps of max 8",
        "2 | tool calls",
        "300 / 60 | tokens in / out",
        "2.500 s | duration",
        "22 | events",
    ]
    usage = page.js(
        "return [...document.querySelectorAll('.group-meta .usage')].map(e => e.textContent)"
    )
    assert usage == ["120 in · 40 out", "180 in · 20 out"]  # per step
    text = page.js("return document.getElementById('timeline').textContent")
    assert "Let me check both." in text
    assert '"temp_c": -3' in text  # a JSON tool result, pretty
    assert page.count(".minimap .tick") == 2

    # No response reported usage: the page says so ("–"), rather than "0 / 0".
    events = read_log(FIXTURES / "budget_pause_resume.jsonl")
    page = Page(browser, write_page(tmp_path / "no-usage.html", events))
    tokens = page.js("return document.querySelectorAll('.stat .stat-value')[3].textContent")
    assert tokens == "–"


def test_usage_parts_attempts_stop_messages_and_provider_blocks(
    browser: Any, tmp_path: Path
) -> None:
    """What the providers report beyond tokens in and out, and FallbackModel's attempts."""
    tried = ModelAttempt(model="primary", error="overloaded", kind="server", status_code=529)
    usage = Usage(100, 40, cache_read_tokens=80, reasoning_tokens=30)
    secret = ProviderBlock("anthropic", "redacted_thinking", {"data": "opaque"})
    call = ToolCall("c1", "add", {"a": 1, "b": 2})
    loop = agent_loop([UserMessage("u1", "1 + 2?")], tools=[ToolSpec("add")], started_at=1.0)
    request = next(loop)
    response = ModelResponse(request.id, "r1", (secret, call), "tool_call", usage, 2.0)
    loop.send(msgspec.structs.replace(response, stop_message="pause_turn", attempts=(tried,)))
    loop.send(ToolResult("c1", "3", at=3.0))
    with pytest.raises(StopIteration):
        loop.send(ModelFailure("request-002", "down", at=4.0, usage=Usage(7, 0)))
    events = list(loop.log)
    page = Page(browser, write_page(tmp_path / "page.html", events))
    page.key("e")
    chips = page.js("return [...document.querySelectorAll('.chip.usage')].map(c => c.textContent)")
    assert "100 in · 40 out (80 cache read, 30 reasoning)" in chips
    assert "7 in · 0 out" in chips  # the failed call's
    label = page.js("return document.querySelectorAll('.stat .stat-label')[3].textContent")
    assert label == "tokens in / out · 80 cache read, 30 reasoning"
    value = page.js("return document.querySelectorAll('.stat .stat-value')[3].textContent")
    assert value == "107 / 40"
    text = page.js("return document.getElementById('timeline').textContent")
    assert "tried first" in text and "primary server 529: overloaded" in text
    assert "stop message" in text and "pause_turn" in text
    assert "anthropic redacted_thinking" in text and '"opaque"' in text
    assert "engine rules" in text
    # Fields holding their default are not listed as extras.
    names = page.js("return [...document.querySelectorAll('.kv dt')].map(d => d.textContent)")
    assert not {"attempts", "stop_message", "rules"} & set(names)
    assert page.errors() == []


# --------------------------------------------------------------------------- hostile content


@pytest.mark.parametrize("csp", [True, False], ids=["with-csp", "without-csp"])
def test_markup_from_the_log_stays_text(browser: Any, tmp_path: Path, csp: bool) -> None:
    """Without its Content-Security-Policy too: the escaping alone must hold."""
    events = hostile_events()
    # The file's own name is hostile too (it is shown in the header and the title).
    log = tmp_path / "<img src=x onerror=window.pwned=1>.jsonl"
    write_log(log, events)
    page_html = render_html(read_log(log), source=str(log))
    if not csp:
        page_html, found = re.subn(
            r'<meta http-equiv="Content-Security-Policy"[^>]*>', "", page_html
        )
        assert found == 1
    path = tmp_path / "page.html"
    path.write_text(page_html, encoding="utf-8")
    page = Page(browser, path)
    page.key("e")
    # Open every raw view and every clamped value, so everything is in the DOM.
    page.js("document.querySelectorAll('.raw-toggle, .more').forEach(b => b.click())")
    page.js("document.querySelectorAll('details').forEach(d => d.open = true)")
    assert page.js("return window.pwned") is None
    assert page.js("return document.title") == f"{log.name} · agentloop session"
    assert page.count("script") == 2  # the data and the viewer: nothing injected
    assert page.count("img, svg, iframe, b, object, embed") == 0
    assert page.rendered() == [(i, e.type) for i, e in enumerate(events)]
    # The markup is there, as text: in the thinking, the text, the tool name, ...
    text = page.js("return document.body.textContent")
    assert text.count(HOSTILE) >= 10
    assert page.js("return document.querySelector('.source').textContent") == str(log)
    # Numbers as logged: 1.0 is not 1, 2**62 is not 4611686018427388000.
    assert "[\n    " + json_string(HOSTILE) + ",\n    1.0,\n    4611686018427387904\n  ]" in text
    names = page.js("return [...document.querySelectorAll('.ev .fn')].map(e => e.textContent)")
    assert HOSTILE in names  # the tool name, in the tool error's head
    assert page.errors() == []


# --------------------------------------------------------------------------- divergence


def test_a_failed_check_shows_the_divergence(browser: Any, tmp_path: Path) -> None:
    events = read_log(tampered(tmp_path / "tampered.jsonl"))
    page = Page(browser, write_page(tmp_path / "page.html", events, report=check_report(events)))
    report = page.js(
        "const r = document.getElementById('report');"
        "return [r.className, r.querySelector('h2').textContent,"
        " [...r.querySelectorAll('.differences li')].map(li => li.textContent),"
        " [...r.querySelectorAll('.side-label')].map(e => e.textContent)]"
    )
    assert report == [
        "report bad",
        "✗ Replay diverged at event #9",
        ["message.content: '41' -> '42'"],
        ["recorded", "regenerated"],
    ]
    assert page.count("details.group.has-divergence") == 1
    page.key("c")  # collapse everything; the key d opens the way to the event again
    assert page.count("details.group[open]") == 0
    page.key("d")
    row = page.js(
        "const e = document.activeElement;"
        "return [e.id, e.className, e.querySelector('.diverged-note').textContent]"
    )
    assert row == ["e9", "ev tool diverged current", "⚠ Replay diverged at event #9"]
    assert page.errors() == []


def test_a_passed_check_and_a_diff(browser: Any, tmp_path: Path) -> None:
    events = read_log(FIXTURES / "tool_calls.jsonl")
    page = Page(browser, write_page(tmp_path / "ok.html", events, report=check_report(events)))
    assert page.js("return document.getElementById('report').className") == "report ok"
    assert page.count(".diverged, .has-divergence") == 0

    other = read_log(tampered(tmp_path / "b.jsonl"))
    report = diff_report(events, other, ("a.jsonl", "b.jsonl"))
    page = Page(browser, write_page(tmp_path / "diff.html", events, report=report))
    labels = page.js(
        "return [...document.querySelectorAll('#report .side-label')].map(e => e.textContent)"
    )
    assert labels == ["A  a.jsonl", "B  b.jsonl"]
    page.js("document.getElementById('jump-divergence').click()")
    assert page.js("return document.activeElement.id") == "e9"

    # B stops early: the first event only A has is marked.
    report = diff_report(events, events[:15], ("a.jsonl", "b.jsonl"))
    page = Page(browser, write_page(tmp_path / "prefix.html", events, report=report))
    assert page.js("return document.querySelector('.ev.diverged').id") == "e15"


# --------------------------------------------------------------------------- interaction


def test_keyboard_search_and_raw_view(browser: Any, tmp_path: Path) -> None:
    events = read_log(FIXTURES / "tool_calls.jsonl")
    page = Page(browser, write_page(tmp_path / "page.html", events))
    page.key("c")
    page.key("jj")  # the second group: step 1
    assert page.js("return document.activeElement.parentElement.id") == "step-1"
    page.key("\n")  # Enter opens it
    assert page.js("return document.getElementById('step-1').open") is True
    assert page.count("#step-1 .ev") == 8  # 11 events, 3 of them streamed chunks (folded)
    page.key("?")
    assert page.js("return document.getElementById('help').hidden") is False
    page.key("\ue00c")  # Escape
    assert page.js("return document.getElementById('help').hidden") is True

    page.key("/")
    assert page.js("return document.activeElement.id") == "search"
    page.key("oslo\n")
    matches = sum(1 for e in events if b"oslo" in encode_event(e).lower())
    assert page.js("return document.querySelector('.search-count').textContent") == (
        f"1 of {matches}"
    )
    hit = page.js("return document.querySelector('.ev.hit').id")
    assert hit == "e1"  # the user message
    page.key("\n")
    assert page.js("return document.querySelector('.ev.hit').id") == "e5"  # a streamed chunk

    # The raw view shows an event as logged: 1000.0 stays 1000.0 (not 1000).
    page.js("document.querySelector('#e0 .raw-toggle').click()")
    raw = page.js("return document.querySelector('#e0 .raw').textContent")
    assert '"at": 1000.0' in raw and '"type": "session.start"' in raw
    page.js("document.querySelector('#e0 .raw-toggle').click()")
    assert page.count("#e0 .raw") == 0
    assert page.errors() == []


def test_long_values_are_clamped(browser: Any, tmp_path: Path) -> None:
    events = read_log(FIXTURES / "tool_calls.jsonl")
    event = events[9]
    long = "\n".join(f"line {n}" for n in range(200))
    import msgspec

    events[9] = msgspec.structs.replace(
        event, message=msgspec.structs.replace(event.message, content=long)
    )
    page = Page(browser, write_page(tmp_path / "page.html", events))
    box = "#e9 .clamp-box"
    height = "return document.querySelector(arguments[0]).getBoundingClientRect().height"
    assert page.js(f"return document.querySelector('{box} .clamped') !== null")
    folded = page.js(height, box)
    text = f"return document.querySelector('{box}').textContent"
    assert page.js(text).count("line ") == 14  # the first lines only
    page.js(f"document.querySelector('{box} .more').click()")
    assert page.js(f"return document.querySelector('{box} .clamped')") is None
    assert page.js(height, box) > 5 * folded
    assert page.js(text).count("line ") == 200
    page.js(f"document.querySelector('{box} .more').click()")  # show less
    assert page.js(text).count("line ") == 14

    # A huge JSON result (50,000 numbers) renders, pretty and clamped, in its row.
    huge = json.dumps(list(range(50_000)))
    events[9] = msgspec.structs.replace(
        event, message=msgspec.structs.replace(event.message, content=huge)
    )
    page = Page(browser, write_page(tmp_path / "huge.html", events))
    assert page.js("return document.querySelector('#e9 .label').textContent") == "tool result"
    assert page.js(f"return document.querySelector('{box} pre.json.clamped') !== null")
    page.js(f"document.querySelector('{box} .more').click()")
    assert (
        page.js(f"return document.querySelector('{box} pre.json').textContent").count(",") == 49_999
    )
    assert page.errors() == []


def test_unknown_event_and_block_types_render_generically(browser: Any, tmp_path: Path) -> None:
    """What a newer agentloop may log: a new event type, a new block type, a new field."""
    events = read_log(FIXTURES / "tool_calls.jsonl")
    page_html = render_html(events, source="new.jsonl")
    data = re.search(
        r'(<script type="application/json" id="agentloop-data"[^>]*>)(.*?)(</script>)', page_html
    )
    assert data is not None
    document = json.loads(data.group(2))
    log = document["events"]
    log[6]["reply"]["content"].append({"type": "provider_block", "provider": "x", "data": {"k": 1}})
    log[8]["batch"] = 3
    log.insert(
        2, {"type": "message.queued", "sequence": 2, "at": 1000.0, "step": 0, "text": HOSTILE}
    )
    for index, event in enumerate(log):
        event["sequence"] = index
    blob = embed_json(json.dumps(document).encode())
    page_html = page_html[: data.start(2)] + blob + page_html[data.end(2) :]
    path = tmp_path / "page.html"
    path.write_text(page_html, encoding="utf-8")
    page = Page(browser, path)
    page.key("e")
    assert len(page.rendered()) == len(log)
    assert page.js("return document.querySelector('#e2 .label').textContent") == "message.queued"
    assert page.js("return document.querySelector('#e2 .kv dd').textContent") == HOSTILE
    block = page.js("return document.querySelector('#e7 .block.generic').textContent")
    assert "provider_block" in block.lower() and '"k": 1' in block
    assert "batch" in page.js("return document.getElementById('e9').textContent")
    assert page.js("return window.pwned") is None
    assert page.errors() == []


# --------------------------------------------------------------------------- a long log


def test_a_long_log_opens_folded_and_expands(browser: Any, tmp_path: Path) -> None:
    events = large_events()
    assert len(events) > 10_000
    page = Page(browser, write_page(tmp_path / "page.html", events))
    groups = page.count("details.group")
    assert groups == step_groups(events) + 2  # the session, the steps, the outcome
    # Only the last step and the outcome are open (and drawn) at first.
    assert page.count("details.group[open]") == 2
    assert len(page.rendered()) < 20
    page.js("document.querySelector('#step-5 > summary').click()")
    assert page.js("return document.getElementById('step-5').open") is True
    in_step = sum(1 for e in events if e.step == 5 and e.type not in ("model.chunk",))
    assert page.count("#step-5 .ev") == in_step
    page.key("e")
    assert page.rendered() == [(i, e.type) for i, e in enumerate(events)]
    assert page.errors() == []


def test_the_docs_screenshot_script(tmp_path: Path) -> None:
    script = runpy.run_path(str(FIXTURES.parent / "docs" / "make_viewer_png.py"))
    out = tmp_path / "viewer.png"
    assert script["main"](["--out", str(out), "--html", str(tmp_path / "demo.html")]) == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert 10_000 < out.stat().st_size < 600_000
    assert "release-check.jsonl" in (tmp_path / "demo.html").read_text(encoding="utf-8")


# ------------------------------------------------------------- spoofing, filters, new fields

SPOOF = "invoice\u202efdp.exe"  # shows as "invoiceexe.pdf" if the override is in the page


def spoofing_events() -> list[Event]:
    """A tool call whose argument holds a right-to-left override, and a result with
    zero-width characters."""
    send = ToolSpec("send_file", "Send a file.", {"type": "object"})
    loop = agent_loop([UserMessage("u1", "Send the invoice")], tools=[send], started_at=1.0)
    request = next(loop)
    call = ToolCall("c1", "send_file", {"file": SPOOF})
    loop.send(ModelResponse(request.id, "r1", (call,), "tool_call", at=2.0))
    loop.send(ToolResult("c1", "sent to pay\u200bpal.com\u2066!", at=3.0))
    with pytest.raises(StopIteration):
        loop.send(ModelResponse("request-002", "r2", (TextBlock(f"Sent {SPOOF}."),), "stop"))
    return list(loop.log)


def test_invisible_and_reordering_characters_are_shown(browser: Any, tmp_path: Path) -> None:
    events = spoofing_events()
    page = Page(browser, write_page(tmp_path / "page.html", events))
    page.key("e")
    shown = page.js("return document.getElementById('timeline').innerText")
    # The displayed text: the override as a token, never applied.
    assert "invoice<U+202E>fdp.exe" in shown
    assert "pay<U+200B>pal.com<U+2066>!" in shown
    assert "Sent invoice<U+202E>fdp.exe." in shown
    for char in ("\u202e", "\u200b", "\u2066"):
        assert char not in page.js("return document.getElementById('app').textContent")
    assert page.count(".cp") >= 4
    # Each value is isolated: no text from the log reorders what is around it.
    bidi = page.js(
        "return [...document.querySelectorAll('.json, .output, .prose, .cp')]"
        ".map(e => getComputedStyle(e).unicodeBidi)"
    )
    assert bidi and set(bidi) == {"isolate"}
    assert page.errors() == []


def visible_rows(page: Page) -> list[int]:
    return [
        int(i)
        for i in page.js(
            "return [...document.querySelectorAll('.ev')]"
            ".filter(e => e.offsetParent !== null).map(e => e.dataset.index)"
        )
    ]


def choose(page: Page, control: str, value: Any) -> None:
    if isinstance(value, bool):
        page.js(
            "const c = document.getElementById(arguments[0]); c.checked = arguments[1];"
            "c.dispatchEvent(new Event('change'))",
            control,
            value,
        )
    else:
        page.js(
            "const c = document.getElementById(arguments[0]); c.value = arguments[1];"
            "c.dispatchEvent(new Event('change'))",
            control,
            value,
        )


def test_filter_by_type_tool_and_errors(browser: Any, tmp_path: Path) -> None:
    events = read_log(FIXTURES / "tool_error.jsonl")
    page = Page(browser, write_page(tmp_path / "page.html", events))
    page.key("e")
    everything = visible_rows(page)
    assert everything == list(range(len(events)))

    choose(page, "filter-errors", True)
    errors = [
        i
        for i, e in enumerate(events)
        if e.type == "tool.error"
        or (e.type == "plan.draft" and isinstance(e.reply, ModelFailure))
        or (e.type == "run.finished" and e.error is not None)
    ]
    assert errors and visible_rows(page) == errors
    count = page.js("return document.getElementById('filter-count').textContent")
    assert count == f"{len(errors)} of {len(events)} events"
    choose(page, "filter-errors", False)

    choose(page, "filter-type", "tool.call")
    calls = [i for i, e in enumerate(events) if e.type == "tool.call"]
    assert visible_rows(page) == calls
    # A step with nothing left is hidden.
    hidden = page.js(
        "return [...document.querySelectorAll('details.group')].filter(d => d.hidden).length"
    )
    assert len({events[i].step for i in calls}) == 1
    assert hidden == page.count("details.group") - 1
    choose(page, "filter-type", "")

    tools = page.js("return [...document.getElementById('filter-tool').options].map(o => o.value)")
    name = tools[1]
    choose(page, "filter-tool", name)
    rows = visible_rows(page)
    assert rows and all(name in encode_event(events[i]).decode() for i in rows)
    assert any(events[i].type == "tool.call" for i in rows)
    choose(page, "filter-tool", "")
    assert visible_rows(page) == everything
    assert page.js("return document.getElementById('filter-count').textContent") == ""
    assert page.errors() == []


def test_parallel_tools_limits_output_and_sequential_are_known_fields(
    browser: Any, tmp_path: Path
) -> None:
    class Answer(msgspec.Struct):
        value: int

    tools = [ToolSpec("a", "A.", {"type": "object"}, sequential=True)]
    loop = agent_loop(
        [UserMessage("u1", "Go")],
        tools=tools,
        started_at=1.0,
        parallel_tools=True,
        limits=Limits(agent_steps=50),
        output=Answer,
    )
    request = next(loop)
    with pytest.raises(StopIteration):
        loop.send(ModelResponse(request.id, "r1", (TextBlock('{"value": 3}'),), "stop", at=2.0))
    events = list(loop.log)
    page = Page(browser, write_page(tmp_path / "page.html", events))
    names = page.js("return [...document.querySelectorAll('.kv dt')].map(d => d.textContent)")
    assert {"tool calls", "loop limits", "structured output"} <= set(names)
    assert not {"parallel_tools", "limits", "output", "sequential"} & set(names)
    text = page.js("return document.getElementById('e0').innerText")
    assert "sequential" in text and "Answer" in text and "run at once" in text
    assert page.errors() == []


# --------------------------------------------------------------------------- media


def test_images_render_inline_and_other_media_are_named(browser: Any, tmp_path: Path) -> None:
    from agentloop import AudioBlock, ImageBlock, MessageAcceptedEvent

    events = list(read_log(FIXTURES / "media" / "image_twice.jsonl"))
    hostile_type = '"><img src=x onerror=window.pwned=1>'
    events.insert(
        2,
        MessageAcceptedEvent(
            sequence=1,
            message=UserMessage(
                "u2",
                (
                    ImageBlock(hostile_type, data=b"\x89PNG not really"),
                    ImageBlock("image/svg+xml", data=b"<svg onload='window.pwned=1'/>"),
                    AudioBlock("audio/wav", data=b"RIFF"),
                ),
            ),
        ),
    )
    page = Page(browser, write_page(tmp_path / "page.html", events))
    page.js("document.querySelectorAll('details').forEach(d => d.open = true)")
    # The PNG of the first message (twice) and of the answer (twice: draft, commit)
    # are drawn, from the page's one copy of the bytes; nothing else is an image.
    sizes = page.js(
        "return [...document.querySelectorAll('img.media')]"
        ".map(i => [i.complete, i.naturalWidth, i.naturalHeight, i.src.slice(0, 22)])"
    )
    assert sizes and all(s == [True, 1, 1, "data:image/png;base64,"] for s in sizes[:2])
    assert {s[3] for s in sizes} == {"data:image/png;base64,", "data:image/gif;base64,"}
    text = page.js("return document.body.textContent")
    assert "audio audio/wav" in text and "4 bytes · sha256 " in text
    assert hostile_type in text  # as text: the block is named, not drawn
    assert page.js("return window.pwned") is None
    assert page.count("script") == 2
    assert page.errors() == []


# --------------------------------------------------------------------------- a session tree


def nested_rows(page: Page) -> dict[int, str]:
    """Each rendered event's index -> the child session block holding it ("" for
    the top session's)."""
    return {
        int(i): k
        for i, k in page.js(
            "return [...document.querySelectorAll('.ev')].map(e => [e.dataset.index, "
            "(e.parentElement.closest('.child-session') || {dataset: {session: ''}})"
            ".dataset.session])"
        )
    }


def test_a_child_session_nests_under_its_call(browser: Any, tmp_path: Path) -> None:
    """DESIGN §26: each child's timeline under the tool.call that ran it, a
    grandchild's under its parent's call; collapsible; search and "e" reach them."""
    files = tree_on_disk(tmp_path / "run.jsonl", ("c1", "searcher"), ("c2", "editor"))
    logs = [read_log(f) for f in files]
    path = tmp_path / "run.html"
    path.write_text(replay.view_html(files[0]), encoding="utf-8")
    page = Page(browser, path)
    sizes = [len(log) for log in logs]
    starts = [sum(sizes[:n]) for n in range(len(sizes))]
    # The header is the top session's; the children are counted.
    assert page.js("return document.querySelector('.stat:last-child').textContent") == (
        f"{sizes[0]}events · 3 child sessions"
    )
    # A small tree opens whole: every event rendered, each in its own session's block.
    page.key("e")
    rows = nested_rows(page)
    assert sorted(rows) == list(range(sum(sizes)))
    for k, (start, size) in enumerate(zip(starts, sizes, strict=True)):
        assert {rows[i] for i in range(start, start + size)} == {str(k) if k else ""}
    # Each block is in the card of its call: c1 and c2 in the parent's, g1 in c2's.
    holders = page.js(
        "return [...document.querySelectorAll('.child-session')].map(d => "
        "[d.dataset.session, d.closest('.ev').dataset.index, "
        "d.querySelector('summary').textContent])"
    )
    calls = {k: int(i) for k, i, _ in holders}
    for k, call_id in ((1, "c1"), (2, "c2"), (3, "g1")):
        event = [e for log in logs for e in log][calls[str(k)]]
        assert event.type == "tool.call" and event.call.id == call_id  # type: ignore[union-attr]
    assert rows[calls["3"]] == "2"  # g1's call is one of c2's events
    summaries = {k: text for k, _, text in holders}
    assert summaries["1"] == f"child session{files[1]}completed2 steps{sizes[1]} eventscats purr"
    # The child's steps are its own groups, titled as the parent's are.
    titles = page.js(
        "return [...document.querySelectorAll('#session-1 > .child-timeline > .group "
        ".group-title')].map(e => e.textContent)"
    )
    assert titles == ["Session", "Step 1", "Step 2", "Outcome"]
    # j/k move through the top session's steps only; the minimap shows them.
    assert page.count(".minimap .tick") == 2
    # Collapsible: closing c2's block hides g1's rows with it.
    page.js("document.querySelector('#session-2 > summary').click()")
    assert page.js("return document.getElementById('session-2').open") is False
    grandchild_row = f"e{starts[3]}"
    assert page.js(f"return document.getElementById('{grandchild_row}').checkVisibility()") is False
    # Search finds a grandchild's event and opens what holds it.
    page.key("c")
    assert page.js("return document.getElementById('session-1').open") is False
    page.key("/")
    page.key("results for cats\n")
    hit = page.js("return document.querySelector('.ev.hit').id")
    assert hit == f"e{starts[1] + [e.type for e in logs[1]].index('tool.result')}"
    assert page.js("return document.getElementById('session-1').open") is True
    assert page.js(f"return document.getElementById('{hit}').checkVisibility()") is True
    everything = [e for log in logs for e in log]
    matches = [i for i, e in enumerate(everything) if b"results for cats" in encode_event(e)]
    assert matches[0] == int(hit[1:])
    for _ in range(matches.index(next(i for i in matches if i >= starts[3]))):
        page.key("\n")
    hit = page.js("return document.querySelector('.ev.hit').id")
    assert int(hit[1:]) >= starts[3]  # in g1, inside c2's block
    assert page.js("return document.getElementById('session-2').open") is True
    assert page.js("return document.getElementById('session-3').open") is True
    # The raw view of a nested event.
    page.js(f"document.querySelector('#{hit} .raw-toggle').click()")
    assert '"type": "tool.result"' in page.js(
        f"return document.querySelector('#{hit} .raw').textContent"
    )
    assert page.errors() == []


def test_a_hostile_child_session_stays_text(browser: Any, tmp_path: Path) -> None:
    """The viewer's rules for hostile content hold in a child's events and its
    source: markup stays text, reordering and invisible characters show as tokens."""
    hostile_id = "c<img src=x onerror=window.pwned=1>\u202e"
    files = tree_on_disk(
        tmp_path / "run.jsonl",
        (hostile_id, "searcher"),
        ("c2", "editor"),
        text=HOSTILE + SPOOF_CHILD,
    )
    path = tmp_path / "run.html"
    path.write_text(replay.view_html(files[0]), encoding="utf-8")
    page = Page(browser, path)
    page.key("e")
    page.js("document.querySelectorAll('.raw-toggle, .more').forEach(b => b.click())")
    page.js("document.querySelectorAll('details').forEach(d => d.open = true)")
    assert page.js("return window.pwned") is None
    assert page.count("script") == 2
    assert page.count("img, svg, iframe, b, object, embed") == 0
    child = page.js("return document.getElementById('session-1').textContent")
    assert "invoice<U+202E>fdp.exe pay<U+200B>pal" in child
    assert HOSTILE.split("\u2028")[0] in page.js(
        "return document.getElementById('session-1').textContent"
    )
    assert (
        page.js("return document.getElementById('session-3').textContent").count(
            "invoice<U+202E>fdp.exe"
        )
        >= 2
    )  # the grandchild's search and answer
    for char in ("\u202e", "\u200b"):
        assert char not in page.js("return document.getElementById('app').textContent")
    # The source (a path holding the model's call id, percent-encoded) is text too.
    assert (
        page.js("return document.querySelector('#session-1 .child-source').textContent")
        == (files[1])
    )
    bidi = page.js(
        "return [...document.querySelectorAll('.child-source')]"
        ".map(e => getComputedStyle(e).unicodeBidi)"
    )
    assert set(bidi) == {"isolate"}
    assert page.errors() == []
