"""Structured output (DESIGN §19): the final answer decodes to a type, or goes back."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any, TypedDict

import msgspec
import pydantic
import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentloop import (
    OUTPUT_INVALID,
    Cancel,
    EventLog,
    FollowUp,
    Limits,
    MessageAcceptedEvent,
    OutputSpec,
    RunResult,
    ScriptedModel,
    ScriptedResponse,
    SessionStartEvent,
    UserMessage,
    agent_loop,
    encode_event,
    run,
)
from agentloop._output import output_check
from replay import read_log, replay, resume, write_log

from .helpers import response


class Weather(msgspec.Struct):
    city: str
    celsius: float


@dataclasses.dataclass
class Point:
    x: int
    y: int


class Movie(TypedDict):
    title: str
    year: int


class Person(pydantic.BaseModel):
    name: str
    age: int


def _run(
    output: Any, *answers: str, retries: int = 2, log: EventLog | None = None, **options: Any
) -> RunResult:
    model = ScriptedModel([ScriptedResponse.text(f"r{i}", a) for i, a in enumerate(answers, 1)])
    result = run(
        [UserMessage("u1", "answer in JSON")],
        model=model,
        tools=[],
        output=output,
        output_retries=retries,
        log=log,
        clock=lambda: 1.0,
        **options,
    )
    model.assert_complete()
    return result


@pytest.mark.parametrize(
    ("output", "text", "value"),
    [
        (Weather, '{"city": "Oslo", "celsius": -3.5}', Weather("Oslo", -3.5)),
        (Point, '```json\n{"x": 1, "y": 2}\n```', Point(1, 2)),
        (Movie, '{"title": "Up", "year": 2009}', {"title": "Up", "year": 2009}),
        (Person, '{"name": "Ada", "age": 36}', Person(name="Ada", age=36)),
        (list[int], "[1, 2, 3]", [1, 2, 3]),
    ],
)
def test_a_final_answer_decodes_to_the_type(output: Any, text: str, value: Any) -> None:
    log = EventLog()
    result = _run(output, text, log=log)
    assert result.status == "completed" and result.output == value
    assert result.final_text == text
    start = log[0]
    assert type(start) is SessionStartEvent and start.output is not None
    assert start.output.name == getattr(output, "__name__", repr(output))
    assert start.output.schema  # the JSON Schema, for the provider's response format
    replayed = replay(log).result
    assert replayed is not None and replayed.status == "completed"
    assert replayed.output == json.loads(msgspec.json.encode(log[-1].output))  # its JSON


def test_a_bad_answer_goes_back_to_the_model() -> None:
    log = EventLog()
    result = _run(
        Weather, "It is cold.", '{"city": "Oslo"}', '{"city": "Oslo", "celsius": 1}', log=log
    )
    assert result.status == "completed" and result.output == Weather("Oslo", 1.0)
    assert result.steps == 3
    retries = [e.message for e in log if type(e) is MessageAcceptedEvent][1:]
    assert [m.id for m in retries] == ["output-retry-r1", "output-retry-r2"]
    assert retries[0].content.startswith(
        "Your answer is not valid JSON for Weather: JSON is malformed"
    )
    assert "Object missing required field `celsius`" in retries[1].content
    assert replay(log).result is not None


def test_after_the_retries_the_run_fails_output_invalid(tmp_path: Path) -> None:
    log = EventLog()
    result = _run(Person, "no", "still no", retries=1, log=log)
    assert result.status == "failed" and result.error is not None
    assert result.error.code == OUTPUT_INVALID
    assert result.error.message.startswith("step 2: the final answer does not decode to Person: ")
    assert result.output is None
    path = tmp_path / "log.jsonl"
    write_log(path, log)
    assert replay(read_log(path)).result == result


def test_pydantic_errors_name_the_field() -> None:
    result = _run(Person, '{"name": "Ada", "age": "old"}', retries=0)
    assert result.error is not None
    assert "age: Input should be a valid integer" in result.error.message


def test_retries_count_against_max_steps() -> None:
    model = ScriptedModel([ScriptedResponse.text("r1", "nope")])
    result = run(
        [UserMessage("u1", "?")],
        model=model,
        tools=[],
        max_steps=1,
        output=Weather,
        clock=lambda: 1.0,
    )
    assert result.status == "max_steps"
    assert result.messages[-1].id == "output-retry-r1"


def test_a_follow_up_comes_before_the_check() -> None:
    loop = agent_loop([UserMessage("u1", "?")], tools=[], output=Point)
    request = next(loop)
    assert request.output is not None and request.output.name == "Point"  # for the adapter
    assert request.output.schema["$defs"]["Point"]["required"] == ["x", "y"]
    loop.send(FollowUp(UserMessage("f1", "as JSON please")))
    loop.send(response("request-001", "r1", "not json"))  # not checked: the follow-up goes first
    with pytest.raises(StopIteration) as stop:
        loop.send(response("request-002", "r2", '{"x": 1, "y": 2}'))
    assert stop.value.value.output == Point(1, 2)


def test_resume_needs_the_type_to_go_on() -> None:
    loop = agent_loop([UserMessage("u1", "?")], tools=[], output=Point)
    next(loop)
    live, _ = resume(loop.log)
    with pytest.raises(ValueError, match="pass output=Point to go on past the log"):
        live.send(response("request-001", "r1", "{}"))
    live, _ = resume(loop.log, output=Point)
    with pytest.raises(StopIteration) as stop:
        live.send(response("request-001", "r1", '{"x": 3, "y": 4}'))
    assert stop.value.value.output == Point(3, 4)


def test_retry_ids_stay_unique() -> None:
    loop = agent_loop(
        [UserMessage("output-retry-r1", "?")], tools=[], output=Point, output_retries=1
    )
    next(loop)
    loop.send(response("request-001", "r1", "no"))
    assert loop.messages[-1].id == "output-retry-r1-"


@pytest.mark.parametrize("retries", [-1, 1.0, None, True])
def test_output_retries_is_checked(retries: Any) -> None:
    with pytest.raises(ValueError, match="output_retries must be an int from 0 to"):
        agent_loop([UserMessage("u1", "?")], tools=[], output=Point, output_retries=retries)


def test_an_output_type_msgspec_cannot_decode_is_refused() -> None:
    with pytest.raises(TypeError, match=r"output: .* is not a type msgspec can decode"):
        agent_loop([UserMessage("u1", "?")], tools=[], output=object())


def test_without_output_nothing_is_recorded() -> None:
    log = EventLog()
    result = _run(None, "plain", log=log)
    assert result.output is None
    assert b"output" not in encode_event(log[0]) + encode_event(log[-1])
    assert OutputSpec(name="x").retries == 2


def test_replay_with_the_type_decodes_again() -> None:
    log = EventLog()
    result = _run(Weather, "no", '{"city": "Oslo", "celsius": 2}', log=log)
    assert replay(log, output=Weather).result == result
    assert replay(log).result.output == {"city": "Oslo", "celsius": 2.0}  # type: ignore[union-attr]


def test_a_cancelled_run_with_output_replays() -> None:
    loop = agent_loop([UserMessage("u1", "?")], tools=[], output=Point)
    next(loop)
    loop.send(response("request-001", "r1", "no"))
    with pytest.raises(StopIteration) as stop:
        loop.send(Cancel("enough"))
    assert stop.value.value.output is None
    assert replay(loop.log).result == stop.value.value


# --------------------------------------------------------------------------- deep answers


class Tree(msgspec.Struct):
    children: list[Tree]


class Holder(msgspec.Struct):
    name: str
    value: Any


def _deep(depth: int, leaf: str = "[]") -> str:
    return "[" * (depth - 1) + leaf + "]" * (depth - 1)


# Past what msgspec decodes on any Python (3.13 goes deeper than 3.10-3.12: its
# recursion follows the interpreter's), so every version takes the same path.
DEEP = 20_000


@pytest.mark.parametrize(
    ("output", "text", "status"),
    [
        (list[Any], _deep(DEEP), "completed"),
        (Holder, '{"name": "n", "value": ' + _deep(DEEP) + "}", "completed"),
        (Weather, '{"city": ' + _deep(DEEP) + ', "celsius": 1}', "failed"),
        (Weather, _deep(DEEP), "failed"),
        (list[Any], _deep(DEEP, "[}"), "failed"),  # malformed deep down
        # A recursive type matched all the way down: too deep to decode.
        (Tree, '{"children":[' * DEEP + "]}" * DEEP, "failed"),
    ],
)
def test_an_answer_nested_past_msgspec_is_decoded_or_refused_not_raised(
    tmp_path: Path, output: Any, text: str, status: str
) -> None:
    # msgspec's decoder raised RecursionError out of run() (and replay) on these.
    log = EventLog()
    result = _run(output, text, retries=0, log=log, limits=Limits(step_text_code_points=2**20))
    assert result.status == status
    if status == "failed":
        assert result.error is not None and result.error.code == OUTPUT_INVALID
    path = tmp_path / "deep.jsonl"
    write_log(path, list(log))
    replayed = replay(read_log(path), output=output)
    assert [encode_event(e) for e in replayed.events] == [encode_event(e) for e in log]


_SCALARS = st.none() | st.booleans() | st.integers(-5, 5) | st.floats(-2, 2) | st.text("ab")
_JSON = st.recursive(
    _SCALARS,
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(
            st.sampled_from(["city", "celsius", "x", "y", "name", "value", "a"]), inner
        )
    ),
    max_leaves=10,
)
_TEXTS = st.one_of(
    _JSON.map(lambda value: msgspec.json.encode(value).decode()),
    st.text(alphabet='{}[]",:1a ', max_size=12),  # mostly malformed
)


@given(
    st.sampled_from([Weather, Movie, Point, Holder, list[int], dict[str, Any], Any, Tree]),
    _TEXTS,
)
def test_the_deep_path_gives_the_same_verdict_and_value(output: Any, text: str) -> None:
    check = output_check(output, 0)
    assert check is not None
    fast = check.check(text)
    deep = check._check_deep(text)  # type: ignore[attr-defined]
    assert (fast[2] is None) is (deep[2] is None), (fast, deep)
    assert fast[:2] == deep[:2]
