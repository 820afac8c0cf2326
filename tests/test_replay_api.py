"""The replay API as a new user calls it: wrong arguments get a clear error, and a
divergence always prints, whatever it holds."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

import replay
from agentloop import SessionStartEvent
from replay import ReplayDivergence, read_log
from tests.helpers import examples

from .helpers import nested

ROOT = Path(__file__).resolve().parent.parent
LOG = ROOT / "fixtures" / "tool_calls.jsonl"


# --------------------------------------------------------------------------- events, not paths


@pytest.mark.parametrize("function", ["replay", "resume", "fork", "state_at"])
@pytest.mark.parametrize("path", [str(LOG), LOG, bytes(LOG)], ids=["str", "Path", "bytes"])
def test_a_path_is_refused_with_what_to_do(function: str, path: Any) -> None:
    args: tuple[Any, ...] = (path, 0) if function in ("fork", "state_at") else (path,)
    with pytest.raises(TypeError) as caught:
        getattr(replay, function)(*args)
    message = str(caught.value)
    assert message.startswith(f"replay.{function}() takes the events of a log, not a path")
    assert f"replay.{function}(replay.read_log(" in message


def test_items_that_are_not_events_are_refused() -> None:
    events: list[Any] = read_log(LOG)
    events[3] = {"type": "step.start"}
    with pytest.raises(TypeError, match=r"item 3 of the events is not an agentloop event: \{"):
        replay.replay(events)
    with pytest.raises(TypeError, match=r"takes the events of a log .* got 42"):
        replay.replay(42)  # type: ignore[arg-type]
    assert replay.replay(read_log(LOG)).result is not None  # events are fine


# --------------------------------------------------------------------------- str() never fails


class BadRepr:
    def __repr__(self) -> str:
        raise RuntimeError("repr is broken")

    __str__ = __repr__


class Huge:
    """A value whose repr is a megabyte (Hypothesis does not print it)."""

    def __repr__(self) -> str:
        return "x" * 1_000_000


class NotAStr:
    def __repr__(self) -> Any:
        return 42


HOSTILE = st.one_of(
    st.none(),
    st.integers(),
    st.floats(),
    st.text(),
    st.binary(),
    st.builds(BadRepr),
    st.builds(NotAStr),
    st.just(nested(5000)),  # deeper than repr() can go
    st.builds(Huge),
    st.just("\ud800 lone surrogate"),
    st.lists(st.text(), max_size=3),
    st.just(SessionStartEvent(sequence=0, max_steps=1)),
    st.builds(lambda: read_log(LOG)[4]),
)


@settings(max_examples=examples(300), deadline=None)
@given(
    sequence=HOSTILE,
    expected=HOSTILE,
    actual=HOSTILE,
    reason=HOSTILE,
    hint=HOSTILE,
)
@example(
    sequence=0, expected=str(LOG), actual=None, reason="a log starts with session.start", hint=""
)
def test_a_divergence_always_prints(
    sequence: Any, expected: Any, actual: Any, reason: Any, hint: Any
) -> None:
    divergence = ReplayDivergence(sequence, expected, actual, reason=reason, hint=hint)
    text = str(divergence)
    assert type(text) is str
    assert text.startswith("replay diverged at event #")
    assert len(text) < 20_000  # a huge value is cut, not printed whole


def test_a_divergence_on_a_string_says_it_is_not_an_event() -> None:
    text = str(ReplayDivergence(0, "session.jsonl", None, reason="no session.start"))
    assert "recorded:    not an event: 'session.jsonl'" in text
    text = str(ReplayDivergence(0, BadRepr(), None))
    assert "<BadRepr object that cannot be printed>" in text


def test_a_divergence_between_events_made_by_hand_with_hostile_values_prints() -> None:
    # Structs do not check their values: an event can hold anything.
    bad = SessionStartEvent(sequence=0, max_steps=1, system=BadRepr())  # type: ignore[arg-type]
    good = SessionStartEvent(sequence=0, max_steps=1, system="x")
    divergence = ReplayDivergence(0, bad, good)
    assert divergence.differences == []  # the field diff failed: none, not a crash
    text = str(divergence)
    assert "recorded:    <SessionStartEvent object that cannot be printed>" in text
    assert "regenerated: #0 session.start step 0" in text
