"""agentloop.evals evaluators: each on good, bad and hostile outputs (DESIGN §28)."""

from __future__ import annotations

import math
from typing import Any

import msgspec
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from agentloop import RunResult, ToolCall, ToolCallEvent, Usage
from agentloop.evals import (
    Bounds,
    Contains,
    Custom,
    Equals,
    Evaluator,
    Exact,
    ExpectedCall,
    JsonSchema,
    Judge,
    Outcome,
    Regex,
    Score,
    Trajectory,
    validate_schema,
)
from agentloop.evals._evaluators import _json_equal, load_function, verdict

from .helpers import nested


def result(
    text: str | None, *, status: str = "completed", output: Any = None, steps: int = 1
) -> RunResult:
    return RunResult(
        status=status,
        final_text=text,
        messages=(),
        steps=steps,
        max_steps=8,
        usage=Usage(100, 20),
        reason="goal_met" if status == "completed" else status,
        output=output,
    )


def outcome(text: str | None = "ok", *, calls: tuple[ToolCall, ...] = (), **kw: Any) -> Outcome:
    events = tuple(ToolCallEvent(sequence=i, step=1, call=call) for i, call in enumerate(calls))
    run_options = {k: kw.pop(k) for k in ("status", "output", "steps") if k in kw}
    return Outcome(case_id="c", result=result(text, **run_options), events=events, **kw)


CRASHED = Outcome(case_id="c", result=None, error="boom")

# (evaluator, outcome, passed, reason contains)
CASES: list[tuple[Any, Outcome, bool, str]] = [
    # text
    (Exact(text="42"), outcome(" 42\n"), True, ""),
    (Exact(text="42", strip=False), outcome(" 42"), False, "' 42'"),
    (
        Exact(text="42"),
        outcome(None, status="failed"),
        False,
        "no final text (the run ended failed)",
    ),
    (Exact(text="42"), CRASHED, False, "no result"),
    (Contains(text="Oslo"), outcome("in Oslo today"), True, ""),
    (Contains(text="oslo"), outcome("in Oslo"), False, "not in the final text"),
    (Contains(text="oslo", ignore_case=True), outcome("in OSLO"), True, ""),
    (Regex(pattern=r"-?\d+ °C"), outcome("It is -3 °C"), True, ""),
    (Regex(pattern=r"^\d+$"), outcome("forty"), False, "no match"),
    # structured
    (Equals(value={"a": 1}), outcome('{"a": 1.0}'), True, ""),
    (Equals(value={"a": 1}), outcome('{"a": true}'), False, "the output is"),
    (Equals(value=[1, 2]), outcome("[1, 2, 3]"), False, ""),
    (Equals(value={"a": 1}), outcome('{"b": 1}'), False, ""),
    (Equals(value="x"), outcome('"y"'), False, ""),
    (Equals(value={"a": 1}), outcome("not json"), False, "not JSON"),
    (Equals(value={"city": "Oslo"}), outcome("x", output={"city": "Oslo"}), True, ""),
    (Equals(value=1), outcome(None, status="failed"), False, "no final text"),
    (Equals(value=1), CRASHED, False, "no result"),
    (JsonSchema(schema={"type": "object", "required": ["city"]}), outcome('{"city": 1}'), True, ""),
    (
        JsonSchema(schema={"type": "object", "required": ["city"]}),
        outcome("{}"),
        False,
        "missing required field 'city'",
    ),
    (
        JsonSchema(schema={"title": "W", "type": "object"}),
        outcome("[]"),
        False,
        "expected object, got array",
    ),
    (JsonSchema(schema={"type": "object"}), outcome("nope"), False, "not JSON"),
    # trajectory
    (
        Trajectory(calls=(ExpectedCall(name="add", arguments={"left": 1}),)),
        outcome(calls=(ToolCall("c0", "look", {}), ToolCall("c1", "add", {"left": 1, "right": 2}))),
        True,
        "",
    ),
    (
        Trajectory(calls=(ExpectedCall(name="b"), ExpectedCall(name="a"))),
        outcome(calls=(ToolCall("c0", "a", {}), ToolCall("c1", "b", {}))),
        False,
        "1 of 2 matched; calls made: [a({}), b({})]",
    ),
    (
        Trajectory(calls=(ExpectedCall(name="b"), ExpectedCall(name="a")), mode="subset"),
        outcome(calls=(ToolCall("c0", "a", {}), ToolCall("c1", "b", {}))),
        True,
        "",
    ),
    (
        Trajectory(calls=(ExpectedCall(name="a"), ExpectedCall(name="a")), mode="subset"),
        outcome(calls=(ToolCall("c0", "a", {}),)),
        False,
        "1 of 2",
    ),
    (
        Trajectory(calls=(ExpectedCall(name="a"),), mode="exact"),
        outcome(calls=(ToolCall("c0", "a", {}), ToolCall("c1", "b", {}))),
        False,
        "1 of 1 matched",
    ),
    (
        Trajectory(calls=(ExpectedCall(name="a", arguments={"x": 1}),), mode="exact"),
        outcome(calls=(ToolCall("c0", "a", {"x": 2}),)),
        False,
        "",
    ),
    (Trajectory(calls=(), mode="exact"), outcome(), True, ""),
    (
        Trajectory(calls=tuple(ExpectedCall(name=f"t{i}") for i in range(6))),
        outcome(calls=tuple(ToolCall(f"c{i}", "z", {}) for i in range(8))),
        False,
        "+2]",
    ),
    # bounds
    (Bounds(status="completed", max_steps=2, max_tokens=120), outcome(), True, ""),
    (Bounds(max_steps=0), outcome(), False, "steps 1 > 0"),
    (
        Bounds(status="completed"),
        outcome(None, status="failed"),
        False,
        "status failed (failed), not completed",
    ),
    (Bounds(max_cost=0.5), outcome(cost=0.75), False, "cost 0.75 > 0.5"),
    (Bounds(max_cost=0.5), outcome(), False, "cost unknown"),
    (Bounds(max_seconds=10.0), outcome(seconds=1.5), True, ""),
    (Bounds(max_tool_calls=0), outcome(calls=(ToolCall("c", "a", {}),)), False, "tool calls 1 > 0"),
    (Bounds(max_steps=1), CRASHED, False, "the agent crashed"),
]


@pytest.mark.parametrize(("evaluator", "seen", "passed", "reason"), CASES)
def test_evaluators(evaluator: Any, seen: Outcome, passed: bool, reason: str) -> None:
    score = evaluator.evaluate(seen)
    assert score.passed is passed, score
    assert reason in score.reason
    assert score.error is None
    assert 0 <= score.score <= 1
    assert score.evaluator == evaluator.describe()
    if not passed:
        assert score.reason


def test_trajectory_scores_the_share_found() -> None:
    wanted = Trajectory(calls=(ExpectedCall(name="a"), ExpectedCall(name="b")))
    assert wanted.evaluate(outcome(calls=(ToolCall("c", "a", {}),))).score == 0.5
    assert (
        Trajectory(calls=(), mode="exact").evaluate(outcome(calls=(ToolCall("c", "a", {}),))).score
        == 0
    )


def test_descriptions() -> None:
    assert Bounds().describe() == "bounds"
    assert (
        Bounds(max_steps=3, status="completed").describe() == "bounds status=completed max_steps=3"
    )
    assert JsonSchema(schema={}).describe() == "json_schema"
    assert Judge(rubric="r").describe() == "judge 'r'"
    assert ExpectedCall(name="a").describe() == "a"
    assert ExpectedCall(name="a", arguments={"x": 1}).describe() == 'a({"x":1})'
    many = Trajectory(calls=tuple(ExpectedCall(name=f"t{i}") for i in range(6)))
    assert many.describe() == "trajectory in_order [t0, t1, t2, t3, +2]"
    assert Contains(text="x" * 100).describe().endswith("...'")
    with pytest.raises(NotImplementedError, match="runner"):
        Judge(rubric="r").evaluate(outcome())


# --------------------------------------------------------------------------- hostile outputs

HUGE = "x" * 3_000_000


@pytest.mark.parametrize(
    "evaluator",
    [
        Exact(text="x"),
        Contains(text="needle"),
        Regex(pattern="needle$"),
        Equals(value={"a": 1}),
        JsonSchema(schema={"type": "object"}),
    ],
    ids=lambda e: e.describe(),
)
@pytest.mark.parametrize(
    "text",
    [
        HUGE,
        "[" * 200_000 + "]" * 200_000,
        '{"a": ' * 50_000 + "1" + "}" * 50_000,
        "",
        "\x00\x1b[31m",
        "{",
        "null",
    ],
    ids=["huge", "deep-array", "deep-object", "empty", "control", "torn", "null"],
)
def test_hostile_final_texts_give_a_score_never_an_exception(evaluator: Any, text: str) -> None:
    score = evaluator.evaluate(outcome(text))
    assert type(score) is Score
    assert not score.passed
    assert len(score.reason) < 1000  # a reason never repeats megabytes


def test_deep_values_are_compared_and_checked_without_recursion() -> None:
    deep, other = nested(100_000), nested(100_000)
    inner = other
    while inner:
        inner = inner["a"]
    inner["b"] = 1
    assert _json_equal(deep, nested(100_000))
    assert not _json_equal(deep, other)
    schema = {"type": "object", "additionalProperties": {"type": "object"}}
    assert validate_schema(deep, schema) == []


def test_an_output_that_is_not_json_is_a_reason() -> None:
    score = Equals(value=1).evaluate(outcome("x", output=object()))
    assert not score.passed and "cannot be read as JSON" in score.reason


# --------------------------------------------------------------------------- JSON schema subset

SCHEMA = {
    "type": "object",
    "required": ["name", "tags"],
    "additionalProperties": False,
    "properties": {
        "name": {"type": "string", "minLength": 2, "maxLength": 5, "pattern": "^[a-z]+$"},
        "age": {"type": "integer", "minimum": 0, "maximum": 150},
        "tags": {"type": "array", "items": {"enum": ["a", "b"]}, "minItems": 1, "maxItems": 2},
        "kind": {"const": "person"},
        "nick": {"type": ["string", "null"]},
    },
}


@pytest.mark.parametrize(
    ("value", "problems"),
    [
        ({"name": "ann", "tags": ["a"], "age": 3.0, "kind": "person", "nick": None}, []),
        (
            {"name": "a", "tags": []},
            ["$.name: shorter than 2 characters", "$.tags: fewer than 1 items"],
        ),
        (
            {"name": "abcdefg", "tags": ["a", "b", "a"]},
            ["$.name: longer than 5 characters", "$.tags: more than 2 items"],
        ),
        (
            {"name": "AB", "tags": ["c"]},
            ["$.name: does not match '^[a-z]+$'", '$.tags[0]: "c" is not one of ["a","b"]'],
        ),
        ({"name": "ab", "tags": ["a"], "age": -1}, ["$.age: -1 is less than 0"]),
        ({"name": "ab", "tags": ["a"], "age": 200}, ["$.age: 200 is more than 150"]),
        ({"name": "ab", "tags": ["a"], "age": 1.5}, ["$.age: expected integer, got number"]),
        ({"name": "ab", "tags": ["a"], "age": True}, ["$.age: expected integer, got boolean"]),
        ({"name": "ab", "tags": ["a"], "kind": "cat"}, ['$.kind: expected "person"']),
        ({"name": "ab", "tags": ["a"], "extra": 1}, ["$.extra: no value is allowed here"]),
        ({}, ["$: missing required field 'name'", "$: missing required field 'tags'"]),
        ("x", ["$: expected object, got string"]),
    ],
)
def test_schema_subset(value: Any, problems: list[str]) -> None:
    assert validate_schema(value, SCHEMA) == problems


def test_schema_limit_and_true() -> None:
    assert validate_schema([1] * 20, {"items": {"type": "string"}}, limit=3) == [
        "$[0]: expected string, got number",
        "$[1]: expected string, got number",
        "$[2]: expected string, got number",
    ]
    assert validate_schema({"x": 1}, {"properties": {"x": True}}) == []


@pytest.mark.parametrize(
    ("schema", "message"),
    [
        ({"oneOf": []}, "keyword 'oneOf' at $ is not supported"),
        ({"type": "thing"}, "unknown type 'thing' at $"),
        ({"properties": {"a": 3}}, "the schema at $.properties.a must be an object or a boolean"),
        ({"items": {"pattern": "("}}, "bad pattern at $.items"),
        ({"additionalProperties": {"type": ["string", "nope"]}}, "unknown type 'nope'"),
    ],
)
def test_schemas_outside_the_subset_are_refused(schema: dict[str, Any], message: str) -> None:
    with pytest.raises(
        ValueError, match=message.replace("$", r"\$").replace("(", r"\(").replace("[", r"\[")
    ):
        JsonSchema(schema=schema)


def test_a_bad_regex_is_refused() -> None:
    with pytest.raises(ValueError, match="does not compile"):
        Regex(pattern="(")


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4)
    ),
    max_leaves=30,
)


@given(json_values)
@example(None)
@example({"a": [1, 2.5, "x"]})
def test_equals_accepts_its_own_value_and_the_schema_walk_never_raises(value: Any) -> None:
    text = msgspec.json.encode(value).decode()
    assert Equals(value=value).evaluate(outcome(text)).passed
    for schema in (
        {"type": "object"},
        {"items": {"type": "number"}},
        {"additionalProperties": False},
        SCHEMA,
    ):
        problems = validate_schema(value, schema)
        assert isinstance(problems, list)


@given(st.text(max_size=200), st.text(max_size=20))
def test_text_evaluators_never_raise(text: str, needle: str) -> None:
    for evaluator in (
        Exact(text=needle),
        Contains(text=needle),
        Contains(text=needle, ignore_case=True),
    ):
        score = evaluator.evaluate(outcome(text))
        assert score.passed in (True, False)
    assert Contains(text=needle).evaluate(outcome(text)).passed is (needle in text)


# --------------------------------------------------------------------------- custom functions


def always(outcome: Outcome) -> bool:
    return outcome.final_text == "ok"


def half(outcome: Outcome) -> float:
    return 0.5


def garbage(outcome: Outcome) -> object:
    return "yes"


def scored(outcome: Outcome) -> Score:
    return Score(evaluator="mine", passed=True, score=0.9)


@pytest.mark.parametrize(
    ("function", "threshold", "passed", "score", "error"),
    [
        ("tests.test_evals_evaluators:always", 1.0, True, 1.0, None),
        ("tests.test_evals_evaluators:half", 1.0, False, 0.5, None),
        ("tests.test_evals_evaluators:half", 0.5, True, 0.5, None),
        ("tests.test_evals_evaluators:scored", 1.0, True, 0.9, None),
        ("tests.test_evals_evaluators:garbage", 1.0, False, 0.0, "returned 'yes'"),
    ],
)
def test_custom(
    function: str, threshold: float, passed: bool, score: float, error: str | None
) -> None:
    got = Custom(function=function, threshold=threshold).evaluate(outcome())
    assert (got.passed, got.score) == (passed, score)
    assert (got.error is None) if error is None else (error in (got.error or ""))


@pytest.mark.parametrize("value", [math.nan, 2, -1, None, [1]])
def test_verdict_refuses_what_is_not_a_score(value: Any) -> None:
    assert verdict("f", value).error is not None


def test_load_function_from_a_file(tmp_path: Any) -> None:
    (tmp_path / "helper_mod.py").write_text("VALUE = 3\n")
    (tmp_path / "checks.py").write_text(
        "import helper_mod\n\ndef check(o):\n    return helper_mod.VALUE == 3\n"
    )
    spec = f"{tmp_path / 'checks.py'}:check"
    assert load_function(spec)(None) is True
    assert load_function(spec) is load_function(spec)  # loaded once


@pytest.mark.parametrize(
    ("spec", "error", "message"),
    [
        ("nocolon", ValueError, "is not 'module:function'"),
        ("mod:not an id", ValueError, "is not 'module:function'"),
        ("/no/such/file.py:f", OSError, "no such file"),
        ("json:nothing_here", ValueError, "has no function 'nothing_here'"),
        ("no_such_module_xyz:f", ImportError, "no_such_module_xyz"),
    ],
)
def test_load_function_errors(spec: str, error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=message):
        load_function(spec)


def test_a_file_that_raises_is_not_kept(tmp_path: Any) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("raise RuntimeError('broken module')\n")
    for _ in range(2):  # not cached half-loaded: raises again
        with pytest.raises(RuntimeError, match="broken module"):
            load_function(f"{bad}:f")


def test_where_predicate(tmp_path: Any) -> None:
    (tmp_path / "preds.py").write_text(
        "def positive(arguments):\n    return arguments.get('x', 0) > 0\n"
    )
    call = ExpectedCall(name="a", where=f"{tmp_path / 'preds.py'}:positive")
    assert call.matches(ToolCall("c", "a", {"x": 1}))
    assert not call.matches(ToolCall("c", "a", {"x": -1}))
    assert not call.matches(ToolCall("c", "b", {"x": 1}))


def test_edges_of_the_helpers() -> None:
    from agentloop.evals._evaluators import _json

    assert (
        Contains(text="x")
        .evaluate(outcome(None, status="failed"))
        .reason.startswith("no final text")
    )
    assert (
        Regex(pattern="x")
        .evaluate(outcome(None, status="failed"))
        .reason.startswith("no final text")
    )
    assert _json(object()).startswith("<object object")
    assert _json_equal({1}, {1}) and not _json_equal({1}, {2})
    assert JsonSchema(schema={"properties": {"a": True}}).evaluate(outcome('{"a": 1}')).passed


def test_the_base_evaluator_evaluates_nothing() -> None:
    # Evaluator is the union's base: a dataset never holds it, and calling it says so.
    with pytest.raises(NotImplementedError, match="does not describe itself"):
        Evaluator().describe()
    with pytest.raises(NotImplementedError, match="does not evaluate"):
        Evaluator().evaluate(None)  # type: ignore[arg-type]
