"""replay's summaries and diffs on values of any depth and any content, without recursion."""

from __future__ import annotations

import math
import sys
from typing import Any

import pytest

from agentloop import (
    ModelChunk,
    ModelChunkEvent,
    PlanDraftEvent,
    SessionPauseEvent,
    SessionStartEvent,
    ToolCall,
    ToolCallEvent,
    UserMessage,
)
from replay import ReplayDivergence, diff_events, summarize
from replay._diff import short

DEPTH = 100_000


def _deep(depth: int, leaf: Any = 1, *, dicts: bool = False) -> Any:
    value = leaf
    for _ in range(depth):
        value = {"k": value} if dicts else [value]
    return value


def _pause(payload: Any, sequence: int = 6) -> SessionPauseEvent:
    return SessionPauseEvent(sequence=sequence, step=1, reason="approval", payload=payload)


@pytest.mark.parametrize("dicts", [False, True], ids=["lists", "dicts"])
def test_a_100_000_deep_value_is_summarized_diffed_and_reported(dicts: bool) -> None:
    limit = sys.getrecursionlimit()
    a, b = _pause(_deep(DEPTH, 1, dicts=dicts)), _pause(_deep(DEPTH, 2, dicts=dicts))
    start = '{"k":{"k":{"k":' if dicts else "[[[[[[[[[["
    assert summarize(a).startswith("approval " + start)
    assert len(summarize(a)) <= len("approval ") + 50
    (line,) = diff_events(a, b)
    segment = ".k" if dicts else "[0]"
    assert line == (f"payload{segment * 5}…(+{DEPTH - 11:,} levels)…{segment * 6}: 1 -> 2")
    divergence = ReplayDivergence(6, a, b)
    assert divergence.differences == [line]
    text = str(divergence)
    assert "recorded:    #6 session.pause step 1  approval " + start in text
    assert text.endswith(f"    {line}")
    assert diff_events(a, a) == []
    assert sys.getrecursionlimit() == limit


def test_a_deep_value_against_a_shallow_one() -> None:
    (line,) = diff_events(_pause(_deep(DEPTH)), _pause([1]))
    assert line == "payload[0]: " + "[" * 57 + "... -> 1"
    assert short(_deep(DEPTH), sys.maxsize) == "[" * DEPTH + "1" + "]" * DEPTH


def test_paths_up_to_thirteen_levels_are_shown_whole() -> None:
    (line,) = diff_events(_pause(_deep(12, 1)), _pause(_deep(12, 2)))
    assert line == "payload" + "[0]" * 12 + ": 1 -> 2"
    (line,) = diff_events(_pause(_deep(13, 1)), _pause(_deep(13, 2)))
    assert line == "payload" + "[0]" * 5 + "…(+2 levels)…" + "[0]" * 6 + ": 1 -> 2"


def test_short_renders_what_json_would_and_cuts_it() -> None:
    assert short({"a": [1, 2.5, True, None, "x"]}) == '{"a":[1,2.5,true,null,"x"]}'
    assert short([math.nan, -math.inf]) == "[nan,-inf]"
    assert short({1: "int key"}) == '{"1":"int key"}'
    assert short("x" * 100) == "'" + "x" * 56 + "..."
    assert short(["x" * 100]) == '["' + "x" * 55 + "..."
    assert short(10**5000).startswith("<int of 16610 bits>")
    assert short([10**5000]) == "[<int of 16610 bits>]"
    assert short([object]) == "[<class 'object'>]"  # hand-built events may hold anything
    assert short(None) == "None" and short(True) == "True" and short(1.5) == "1.5"
    start = SessionStartEvent(sequence=0, max_steps=8)
    whole = short(start, sys.maxsize)
    assert whole.endswith(
        ',"parallel_tools":false,"limits":null,"output":null,"parent":null,"compaction":null,"agent":null,"handoffs":[]}'
    )  # every field
    assert short(start) == whole[:57] + "..."


def test_values_that_print_alike_name_their_types() -> None:
    class Text(str):
        pass

    (line,) = diff_events(_pause("x"), _pause(Text("x")))
    assert line == "payload: 'x' (str) -> 'x' (Text)"


def test_blocks_and_replies_of_unknown_kinds_are_named() -> None:
    # Types a later agentloop adds (a provider block, a new reply): named, not lost.
    odd: Any = UserMessage("u1", "not a block")
    chunk = ModelChunkEvent(sequence=3, step=1, chunk=ModelChunk("request-001", odd))
    assert summarize(chunk) == "UserMessage"
    draft = PlanDraftEvent(sequence=4, step=1, reply=odd)
    assert summarize(draft) == "UserMessage"
    call = ToolCallEvent(sequence=5, step=1, call=ToolCall("c1", "add", {}))
    assert summarize(call) == "call c1 add({})"


def test_dict_subclasses_are_compared_as_dicts() -> None:
    from collections import OrderedDict

    lines = diff_events(_pause(OrderedDict(a=1, b=2)), _pause({"a": 1, "b": 3}))
    assert lines == ["payload.b: 2 -> 3"]
