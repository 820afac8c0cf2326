"""``python -m replay view``: the HTML page without a browser (its structure, its
escaping, the command). ``test_view_browser.py`` opens the pages in Chromium."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import runpy
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from agentloop import (
    MessageAcceptedEvent,
    ModelResponse,
    PlanDraftEvent,
    SessionStartEvent,
    ToolCall,
    ToolResultEvent,
    ToolResultMessage,
    UserMessage,
    decode_event,
    encode_event,
)
from replay import read_log, write_log
from replay.__main__ import main
from replay._view import Report, check_report, diff_report, embed_json, render_html
from tests.helpers import examples

from .logfiles import under_rules
from .view_logs import FIXTURES, HOSTILE, hostile_events, tampered

ROOT = FIXTURES.parent
ASSETS = ROOT / "replay"
FIXTURE_LOGS = sorted(FIXTURES.glob("*.jsonl")) + sorted((FIXTURES / "v1").glob("*.jsonl"))
TEMPLATE_TAGS = [
    "html", "head", "meta", "meta", "meta", "meta", "meta", "title", "link", "style",
    "body", "noscript", "p", "code", "div", "script", "script",
]  # fmt: skip


class Page(HTMLParser):
    """The tags of a page, in order, and the text of its script and style elements."""

    def __init__(self, text: str) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[str] = []
        self.attrs: list[dict[str, str | None]] = []
        self.raw: dict[str, list[str]] = {"script": [], "style": []}
        self._in: str | None = None
        self.feed(text)
        self.close()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        self.attrs.append(dict(attrs))
        if tag in self.raw:
            self._in = tag
            self.raw[tag].append("")

    def handle_endtag(self, tag: str) -> None:
        self._in = None

    def handle_data(self, data: str) -> None:
        if self._in is not None:
            self.raw[self._in][-1] += data

    def data(self) -> Any:
        return json.loads(self.raw["script"][0])

    def meta(self, key: str, value: str) -> dict[str, str | None]:
        return next(a for t, a in zip(self.tags, self.attrs, strict=True) if a.get(key) == value)


def every_field(value: Any) -> Any:
    """Structs as dicts of every field, defaults too (a log file leaves them out)."""
    if isinstance(value, msgspec.Struct):
        config = value.__struct_config__
        out = {} if config.tag_field is None else {config.tag_field: config.tag}
        return out | {name: every_field(getattr(value, name)) for name in value.__struct_fields__}
    if isinstance(value, tuple):
        return [every_field(item) for item in value]
    return value


def as_json(event: Any) -> Any:
    """An event as the page holds it: whole (values JSON can hold only)."""
    return json.loads(msgspec.json.encode(every_field(event)))


def sha256(text: str) -> str:
    return "sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode()


# --------------------------------------------------------------------------- the page


def _inline(value: Any, blobs: dict[str, Any]) -> Any:
    """``value`` (a page's event) with each media block's blob hash replaced by its
    bytes (base64), as in the event itself."""
    if isinstance(value, list):
        return [_inline(item, blobs) for item in value]
    if not isinstance(value, dict):
        return value
    out = {key: _inline(item, blobs) for key, item in value.items()}
    if out.get("type") in ("image", "audio", "document") and out.get("data") in blobs:
        out["data"] = blobs[out["data"]]["data"]
    return out


@pytest.mark.parametrize("log", FIXTURE_LOGS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_fixture_renders(log: Path) -> None:
    events = read_log(log)
    page = Page(render_html(events, source=str(log), report=check_report(events)))
    assert page.tags == TEMPLATE_TAGS
    data = page.data()
    # Every event whole (every field, defaults too), and reading back to the event.
    assert [list(e) for e in data["events"]] == [["type", *e.__struct_fields__] for e in events]
    # Media bytes are on the page once, as blobs the blocks name by their hash.
    blobs = data.get("blobs", {})
    again = [decode_event(json.dumps(_inline(e, blobs))) for e in data["events"]]
    assert [encode_event(e) for e in again] == [encode_event(e) for e in events]
    if log.parent.name == "v1":  # a log's page is the same whatever its format
        same = render_html(under_rules(read_log(FIXTURES / log.name), 0), source=str(log))
        assert Page(same).data()["events"] == data["events"]
    assert data["meta"]["source"] == str(log)
    assert data["meta"]["title"] == f"{log.name} · agentloop session"
    assert data["report"]["ok"] is True


def test_the_policy_allows_exactly_the_page_s_own_script_and_style() -> None:
    page = Page(render_html(read_log(FIXTURES / "tool_calls.jsonl")))
    policy = page.meta("http-equiv", "Content-Security-Policy")["content"]
    script, style = page.raw["script"][1], page.raw["style"][0]
    assert script == (ASSETS / "_view.js").read_text(encoding="utf-8")
    assert style == (ASSETS / "_view.css").read_text(encoding="utf-8")
    assert policy == (
        f"default-src 'none'; script-src '{sha256(script)}'; style-src '{sha256(style)}'; "
        "img-src data:; base-uri 'none'; form-action 'none'"
    )


def test_the_assets_fetch_nothing_and_make_no_markup_from_data() -> None:
    script = (ASSETS / "_view.js").read_text(encoding="utf-8")
    style = (ASSETS / "_view.css").read_text(encoding="utf-8")
    template = (ASSETS / "_view.html").read_text(encoding="utf-8")
    code = re.sub(r"^\s*//.*\n", "", script, flags=re.MULTILINE)  # not the comments
    for sink in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(",
                 "Function(", "srcdoc", "setTimeout(\"", "import(", "fetch(", "XMLHttpRequest",
                 "WebSocket", "http:", "https:"):  # fmt: skip
        assert sink not in code, sink
    for fetch in ("url(", "@import", "http:", "https:"):
        assert fetch not in style, fetch
    # The one URL in the template is the favicon's SVG namespace (an inline data: URI).
    assert re.findall(r"https?:[^'\" ]*", template) == ["http://www.w3.org/2000/svg"]
    for asset in (script, style):
        assert "</" not in asset and "<!--" not in asset and "@@" not in asset
    markers = re.findall(r"@@([A-Z_]+)@@", template)
    assert sorted(markers) == sorted(
        ["SCRIPT_HASH", "STYLE_HASH", "GENERATOR", "NUMBERS", "STYLE", "DATA", "SCRIPT"]
    )


def test_hostile_strings_stay_data() -> None:
    events = hostile_events()
    text = render_html(events, source=HOSTILE)
    page = Page(text)
    assert page.tags == TEMPLATE_TAGS
    data_text = page.raw["script"][0]
    for raw in ("<", ">", "&", "\u2028", "\u2029"):
        assert raw not in data_text
    assert page.data()["events"] == [as_json(e) for e in events]
    assert page.data()["meta"]["source"] == HOSTILE
    assert (
        text.count("@@") == data_text.count("@@") == HOSTILE.count("@@") * text.count("@@SCRIPT@@")
    )
    assert HOSTILE not in text


@settings(max_examples=examples(150), deadline=None)
@given(
    text=st.text(),
    name=st.text(min_size=1),
    at=st.one_of(st.none(), st.floats(allow_nan=False, allow_infinity=False)),
)
@example(text="</script><script>x()</script>", name="</SCRIPT", at=1.0)
@example(text="<!--<script>", name="\u2028\u2029", at=None)
@example(text="]]></script ", name="<img src=x onerror=alert(1)>", at=2.0**60)
@example(text="", name="$float", at=None)  # arguments that read as a codec tag
def test_no_string_can_become_markup(text: str, name: str, at: float | None) -> None:
    """Arbitrary text as a tool result, a tool name and a user message: the page keeps
    the template's tags and nothing else, and the data reads back to the events."""
    events = [
        SessionStartEvent(sequence=0, at=at, system=text, max_steps=1),
        MessageAcceptedEvent(sequence=1, message=UserMessage(name, text)),
        ToolResultEvent(
            sequence=2,
            step=1,
            message=ToolResultMessage("m", name, name, text, is_error=True),
        ),
        PlanDraftEvent(
            sequence=3,
            step=1,
            reply=ModelResponse("r", name, (ToolCall(name, name, {name: text}),), "tool_call"),
        ),
    ]
    page_text = render_html(events, source=name)
    page = Page(page_text)
    assert page.tags == TEMPLATE_TAGS
    data_text = page.raw["script"][0]
    assert "<" not in data_text and "\u2028" not in data_text and "\u2029" not in data_text
    # The data reads back to the events, decoded as the log's lines are: the page holds
    # each event's line, where a plan.draft's arguments that read as a codec tag
    # ({"$float": ...}) are escaped ({"$dict": {...}}, agentloop/_codec.py).
    assert [decode_event(json.dumps(e)) for e in page.data()["events"]] == events
    # No string could end the data element early: its end tag is where we put it.
    assert page_text.count("</script>") == 2


def test_embed_json_escapes_only_what_a_script_element_cannot_hold() -> None:
    data = msgspec.json.encode({"a": "</script><!-- & \u2028\u2029 \\<", "b": [1, 2.5]})
    embedded = embed_json(data)
    assert embedded == (
        '{"a":"\\u003c/script\\u003e\\u003c!-- \\u0026 \\u2028\\u2029 \\\\\\u003c","b":[1,2.5]}'
    )
    assert json.loads(embedded) == json.loads(data)


def test_numbers_javascript_prints_otherwise_switch_on_the_exact_reader() -> None:
    def numbers(at: float | None) -> str | None:
        page = Page(render_html([SessionStartEvent(sequence=0, at=at, max_steps=1)]))
        return page.meta("id", "agentloop-data")["data-numbers"]

    assert numbers(None) == "plain"
    assert numbers(1000.5) == "plain"
    assert numbers(1000.0) == "exact"  # JavaScript prints 1000
    assert numbers(1e16) == "exact"  # 10000000000000000
    assert numbers(1e-7) == "exact"  # any exponent: the same here, but not always


def test_an_empty_log_renders() -> None:
    page = Page(render_html([], report=check_report([])))
    assert page.data()["events"] == []
    assert page.data()["report"]["title"] == "Nothing replayed"
    assert page.data()["meta"]["title"] == "log · agentloop session"


# --------------------------------------------------------------------------- reports


def test_check_report(tmp_path: Path) -> None:
    ok = check_report(read_log(FIXTURES / "tool_calls.jsonl"))
    assert ok.ok and ok.title == "Replay matched"
    assert ok.text.endswith("the run completed (goal_met) after 2 step(s).")
    waiting = check_report(read_log(FIXTURES / "waiting_on_tool.jsonl"))
    assert waiting.ok and "unfinished (it waits for a ToolRequest)" in waiting.text

    events = read_log(tampered(tmp_path / "tampered.jsonl"))
    bad = check_report(events)
    assert not bad.ok
    assert (bad.title, bad.index, bad.labels) == (
        "Replay diverged at event #9",
        9,
        ("recorded", "regenerated"),
    )
    assert bad.differences == ("message.content: '41' -> '42'",)
    assert bad.left is not None and json.loads(bytes(bad.left)) == as_json(events[9])
    assert bad.left_summary == "#9 tool.result step 1  call-1 add: '41'"

    # The log ends before the loop does: nothing of it to mark.
    cut = check_report(read_log(FIXTURES / "tool_calls.jsonl")[:-1])
    assert not cut.ok and cut.index is None and cut.left is None and cut.right is not None


def test_diff_report(tmp_path: Path) -> None:
    a = read_log(FIXTURES / "tool_calls.jsonl")
    b = read_log(tampered(tmp_path / "b.jsonl"))
    names = ("a.jsonl", "b.jsonl")
    same = diff_report(a, a, names)
    assert same == Report(
        kind="diff",
        ok=True,
        title="The logs are identical",
        text="22 events, byte for byte: a.jsonl and b.jsonl.",
    )
    differ = diff_report(a, b, names)
    assert (differ.ok, differ.index, differ.labels) == (False, 9, ("A  a.jsonl", "B  b.jsonl"))
    assert differ.differences == ("message.content: '42' -> '41'",)

    longer_a = diff_report(a, a[:5], names)
    assert longer_a.title == "The logs agree on their first 5 events"
    assert longer_a.text.startswith("A goes on with 17 more, from #5 model.chunk.")
    assert longer_a.index == 5 and longer_a.right is None and longer_a.left is not None
    longer_b = diff_report(a[:5], a, names)
    assert longer_b.text.startswith("B goes on with 17 more")
    assert longer_b.index is None and longer_b.left is None and longer_b.right is not None
    assert longer_b.left_summary == "(nothing)"


# --------------------------------------------------------------------------- the command


def run(*args: str | Path) -> int:
    return main([str(a) for a in args])


def test_view_writes_the_page_next_to_the_log(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = tmp_path / "session.jsonl"
    write_log(log, read_log(FIXTURES / "tool_calls.jsonl"))
    assert run("view", log) == 0
    page = tmp_path / "session.html"
    out = capsys.readouterr()
    assert out.out == f"wrote {page} (22 events, {page.stat().st_size:,} bytes)\n"
    assert out.err == ""
    assert Page(page.read_text(encoding="utf-8")).data()["meta"]["source"] == str(log)


def test_view_to_stdout(capsysbinary: pytest.CaptureFixture[bytes]) -> None:
    assert run("view", FIXTURES / "plain_answer.jsonl", "-o", "-", "--check") == 0
    out = capsysbinary.readouterr()
    page = Page(out.out.decode("utf-8"))
    assert page.data()["report"]["ok"] is True
    assert out.err.decode().startswith("Replay matched: All 11 events were regenerated")


def test_view_check_and_diff_exit_codes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tampered(tmp_path / "bad.jsonl")
    good = FIXTURES / "tool_calls.jsonl"
    page = tmp_path / "page.html"
    assert run("view", bad, "--check", "-o", page) == 1
    assert "Replay diverged at event #9: the regenerated event differs" in capsys.readouterr().out
    assert Page(page.read_text(encoding="utf-8")).data()["report"]["index"] == 9
    assert run("view", good, "--check", "-o", page) == 0
    assert run("view", good, "--diff", good, "-o", page) == 0
    assert "The logs are identical" in capsys.readouterr().out
    assert run("view", good, "--diff", bad, "-o", page) == 1
    assert "The logs differ at event #9" in capsys.readouterr().out


def test_view_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = FIXTURES / "tool_calls.jsonl"

    def error(*args: str | Path) -> str:
        assert run(*args) == 2
        err = capsys.readouterr().err
        assert err.startswith("replay: error: ") and err.count("\n") == 1, err
        return err

    assert "cannot read: No such file or directory" in error("view", tmp_path / "missing.jsonl")
    assert "not an agentloop log" in error("view", ROOT / "README.md", "-o", tmp_path / "x.html")
    assert "not allowed with argument" in error("view", good, "--check", "--diff", good)
    assert "cannot write" in error("view", good, "-o", tmp_path / "no" / "such" / "dir.html")
    # A log is never overwritten, whichever name it goes by.
    log = tmp_path / "log.jsonl"
    write_log(log, read_log(good))
    before = log.read_bytes()
    assert "that is a log, not overwritten" in error("view", log, "-o", log)
    os.link(log, tmp_path / "other.html")
    assert "that is a log" in error("view", good, "--diff", log, "-o", tmp_path / "other.html")
    assert log.read_bytes() == before
    # B must be a whole log.
    torn = tmp_path / "torn.jsonl"
    torn.write_bytes(before[:-5])
    assert "line 23 is torn" in error("view", good, "--diff", torn, "-o", tmp_path / "p.html")


def test_view_of_a_torn_log_shows_the_intact_events(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    torn = tmp_path / "torn.jsonl"
    torn.write_bytes((FIXTURES / "tool_calls.jsonl").read_bytes()[:-5])
    page = tmp_path / "torn.html"
    assert run("view", torn, "--check") == 2  # the page is written all the same
    out = capsys.readouterr()
    assert out.out.startswith(f"wrote {page} (21 events, ")
    # The loop goes on past the 21 intact events: run.finished is missing.
    assert "Replay diverged at event #21: the loop emitted more events" in out.out
    assert out.err.startswith("replay: error: ") and "line 23 is torn" in out.err
    data = Page(page.read_text(encoding="utf-8")).data()
    assert len(data["events"]) == 21
    assert "line 23 is torn" in data["meta"]["torn"]


def test_view_as_a_user_runs_it(tmp_path: Path) -> None:
    page = tmp_path / "session.html"
    done = subprocess.run(
        [sys.executable, "-m", "replay", "view", FIXTURES / "tool_error.jsonl", "-o", page],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert page.read_text(encoding="utf-8").startswith("<!DOCTYPE html>")
    help_text = subprocess.run(
        [sys.executable, "-m", "replay", "view", "--help"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    ).stdout
    assert "Exit codes: 0 written; 1 written, and --check or --diff found a" in " ".join(
        help_text.split()
    )


def demo_script() -> dict[str, Any]:
    return runpy.run_path(str(ROOT / "docs" / "make_viewer_png.py"))


def test_the_screenshot_s_demo_session_replays() -> None:
    events = demo_script()["demo_events"]()
    assert check_report(events).ok
    kinds = [e.type for e in events]
    assert kinds.count("step.start") == 3
    assert "tool.error" in kinds and "budget.warn" in kinds and "session.resume" in kinds
    thinking = events[3].chunk.block  # type: ignore[union-attr]
    assert thinking.text.startswith("The user wants a go/no-go.")
    assert Path(ROOT / "docs" / "viewer.png").stat().st_size < 200_000


def test_bidi_controls_never_reach_the_page_source() -> None:
    """An editor or view-source shows the file as it is: a right-to-left override in
    the data would reorder it there. The script shows each one as <U+XXXX>."""
    spoof = "invoice\u202efdp.exe \u2066x\u2069 \u200f\u061c"
    events = [
        SessionStartEvent(sequence=0, max_steps=1, system=spoof),
        MessageAcceptedEvent(sequence=1, message=UserMessage("u1", spoof)),
    ]
    text = render_html(events, source="spoof.jsonl")
    for char in "\u202e\u2066\u2069\u200f\u061c":
        assert char not in text
    assert "invoice\\u202efdp.exe" in text
    assert Page(text).data()["events"] == [as_json(e) for e in events]
