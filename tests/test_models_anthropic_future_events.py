"""An event type the Messages API adds later reaches the adapter through the SDK
(which yields any event it does not know as a generic object): it is skipped, and
the stream's own events still give the same response."""

from __future__ import annotations

import pytest

pytest.importorskip("anthropic")

from .test_models_anthropic import FakeAnthropic, events, model, request, sse


def test_an_unknown_event_type_is_skipped() -> None:
    text = events("text.sse")
    future = (
        b"event: content_block_future\n"
        b'data: {"type":"content_block_future","index":0,"note":"added later"}'
    )
    with_future = sse(*text[:2], future, *text[2:])
    expected = list(model(FakeAnthropic(sse(*text))).stream(request()))
    assert list(model(FakeAnthropic(with_future)).stream(request())) == expected
    assert len(expected) >= 2  # chunks, then the response
