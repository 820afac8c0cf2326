"""``replay view`` pages hold each media blob once, and nothing a media type says
can become markup."""

from __future__ import annotations

import base64
import json
import re
from typing import Any

from agentloop import ImageBlock, MessageAcceptedEvent, UserMessage
from replay import read_log
from replay._view import render_html
from tests.logfiles import FIXTURES
from tests.test_log_blobs import PNG, _sha


def _data(page: str) -> Any:
    found = re.search(r'id="agentloop-data"[^>]*>(.*?)</script>', page, re.S)
    assert found is not None
    return json.loads(found.group(1))


def test_a_page_holds_each_blob_once() -> None:
    events = read_log(FIXTURES / "media" / "image_twice.jsonl")
    page = render_html(events, source="image_twice.jsonl")
    assert page.count(base64.b64encode(PNG).decode()) == 1
    data = _data(page)
    assert set(data["blobs"]) == {_sha(PNG), _sha(b""), _sha(b"GIF89a")}
    first = data["events"][1]["message"]["content"][1]
    assert first["data"] == _sha(PNG)
    assert "img-src data:;" in page


def test_a_hostile_media_type_stays_data() -> None:
    hostile = "image/png</script><script>alert(1)</script>"
    event = MessageAcceptedEvent(
        sequence=0, message=UserMessage("u", (ImageBlock(hostile, data=b"x"),))
    )
    page = render_html([event])
    assert "<script>alert(1)" not in page and page.count("<script") == 2
    assert _data(page)["blobs"] == {_sha(b"x"): {"media_type": hostile, "size": 1, "data": "eA=="}}
