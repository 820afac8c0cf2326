"""agentloop.evals datasets: JSON Lines and YAML files, clear errors, round trips."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from agentloop import AssistantMessage, TextBlock, UserMessage
from agentloop.evals import (
    Bounds,
    Case,
    Contains,
    Dataset,
    DatasetError,
    EvalError,
    ExpectedCall,
    Judge,
    Regex,
    Trajectory,
)
from tests.helpers import examples

ROOT = Path(__file__).resolve().parent.parent

CASES = [
    Case(id="sum", prompt="20 + 22?", expect=(Contains(text="42"), Bounds(max_steps=3))),
    Case(
        id="chat",
        messages=(
            UserMessage("u1", "Hi"),
            AssistantMessage("a1", (TextBlock("Hello"),)),
            UserMessage("u2", "Weather?"),
        ),
        tools=("get_weather",),
        expect=(
            Trajectory(calls=(ExpectedCall(name="get_weather", arguments={"city": "Oslo"}),)),
            Judge(rubric="polite", threshold=0.8),
        ),
        metadata={"tags": ["smoke"], "n": 1},
    ),
]


@pytest.mark.parametrize("suffix", [".jsonl", ".yaml", ".yml"])
def test_save_and_load_round_trip(tmp_path: Path, suffix: str) -> None:
    path = tmp_path / f"cases{suffix}"
    Dataset(CASES).save(path)
    loaded = Dataset.load(path)
    assert loaded.cases == tuple(CASES)
    assert loaded.name == "cases"
    assert len(loaded) == 2 and loaded["chat"].tools == ("get_weather",)
    assert repr(loaded) == "<Dataset 'cases' (2 cases)>"


def test_jsonl_skips_blank_and_comment_lines(tmp_path: Path) -> None:
    path = tmp_path / "d.jsonl"
    path.write_text('# a comment\n\n{"id": "a", "prompt": "x"}\n   \n')
    assert [case.id for case in Dataset.load(path)] == ["a"]


def test_yaml_forms(tmp_path: Path) -> None:
    path = tmp_path / "d.yaml"
    path.write_text(
        "cases:\n  - id: a\n    prompt: x\n    expect:\n      - {kind: regex, pattern: '^x'}\n"
    )
    (case,) = Dataset.load(path)
    assert case.expect == (Regex(pattern="^x"),)
    path.write_text("")
    assert len(Dataset.load(path)) == 0


def test_initial_messages() -> None:
    assert CASES[0].initial_messages() == (UserMessage("user-1", "20 + 22?"),)
    assert CASES[1].initial_messages() == CASES[1].messages


BAD_LINES = [
    ('{"id": "a"}', "give a prompt or messages"),
    (
        '{"id": "a", "prompt": "x", "messages": [{"role": "user", "id": "u", "content": "y"}]}',
        "exactly one",
    ),
    ('{"id": " ", "prompt": "x"}', "non-empty id"),
    ('{"prompt": "x"}', "missing field `id`"),
    ('{"id": "a", "prompt": "x", "expect": [{"kind": "nope"}]}', "Invalid value 'nope'"),
    ('{"id": "a", "prompt": "x", "expect": [{"kind": "contains"}]}', "missing field `text`"),
    (
        '{"id": "a", "prompt": "x", "expect": [{"kind": "regex", "pattern": "("}]}',
        "does not compile",
    ),
    (
        '{"id": "a", "prompt": "x", "expect": [{"kind": "json_schema", "schema": {"anyOf": []}}]}',
        "not supported",
    ),
    ('{"id": "a", "prompt": 3}', "Expected `str | null`, got `int`"),
    ("not json", "malformed"),
    (
        '{"id": "a", "prompt": "x", "metadata": {"x": ' + "[" * 100_000,
        "nested too deeply|malformed|depth",
    ),
    ("[1]", "Expected `object`, got `array`"),
]


@pytest.mark.parametrize(("line", "message"), BAD_LINES)
def test_bad_jsonl_lines_name_the_file_and_line(tmp_path: Path, line: str, message: str) -> None:
    path = tmp_path / "d.jsonl"
    path.write_text('{"id": "ok", "prompt": "x"}\n' + line + "\n")
    with pytest.raises(DatasetError, match=message) as caught:
        Dataset.load(path)
    assert str(caught.value).startswith(f"{path}:2: ")
    assert caught.value.line == 2 and caught.value.path == str(path)
    assert isinstance(caught.value, EvalError)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("- id: a\n- id: b\n  prompt: y\n", r"case 1 \('a'\): case 'a': give a prompt"),
        ("- 3\n", "case 1: Expected `object`, got `int`"),
        ("key: value\n", "a YAML dataset is a list of cases"),
        ("[unclosed\n", "not YAML"),
        ("- id: a\n  prompt: x\n- id: a\n  prompt: y\n", "two cases have the id 'a'"),
    ],
)
def test_bad_yaml(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "d.yaml"
    path.write_text(text)
    with pytest.raises(DatasetError, match=message):
        Dataset.load(path)


def test_deep_yaml_is_an_error_not_a_crash(tmp_path: Path) -> None:
    path = tmp_path / "d.yaml"
    path.write_text("- id: a\n  prompt: x\n  metadata: {x: " + "[" * 5000 + "]" * 5000 + "}\n")
    try:
        Dataset.load(path)
    except DatasetError as exc:
        assert "nested too deeply" in str(exc) or "not YAML" in str(exc)


def test_dataset_errors() -> None:
    with pytest.raises(DatasetError, match="two cases have the id 'sum'"):
        Dataset([CASES[0], CASES[0]])
    with pytest.raises(DatasetError, match="holds Case objects"):
        Dataset(["x"])  # type: ignore[list-item]
    with pytest.raises(KeyError):
        Dataset(CASES)["nope"]
    with pytest.raises(DatasetError, match="cannot read") as caught:
        Dataset.load("/no/such/file.jsonl")
    assert caught.value.line is None


def test_yaml_without_pyyaml_says_what_to_install(tmp_path: Path) -> None:
    path = tmp_path / "d.yaml"
    path.write_text("[]\n")
    code = (
        "import sys; sys.modules['yaml'] = None\n"
        "from agentloop.evals import Dataset, DatasetError\n"
        "try:\n    Dataset.load(sys.argv[1])\nexcept DatasetError as exc:\n    print(exc)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(path)], capture_output=True, text=True, cwd=ROOT
    )
    assert "pip install 'agentloop-replay[evals]'" in done.stdout


def test_import_agentloop_imports_neither_evals_nor_yaml() -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, agentloop, replay, replay.pytest_plugin; "
            "print(sorted(m for m in sys.modules if m.startswith(('agentloop.evals', 'yaml'))))",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert done.stdout.strip() == "[]", done.stderr
    done = subprocess.run(
        [sys.executable, "-c", "import sys, agentloop.evals; print('yaml' in sys.modules)"],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert done.stdout.strip() == "False", done.stderr


# --------------------------------------------------------------------------- properties

ids = st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=12).filter(
    str.strip
)
texts = st.text(st.characters(blacklist_categories=("Cs",)), max_size=30)
expectations = st.one_of(
    st.builds(Contains, text=texts, ignore_case=st.booleans()),
    st.builds(
        Bounds,
        max_steps=st.none() | st.integers(0, 10),
        status=st.none() | st.sampled_from(["completed", "failed"]),
    ),
    st.builds(Judge, rubric=texts, threshold=st.floats(0, 1)),
    st.builds(
        Trajectory,
        calls=st.lists(
            st.builds(
                ExpectedCall,
                name=ids,
                arguments=st.none() | st.dictionaries(ids, st.integers(), max_size=2),
            ),
            max_size=3,
        ).map(tuple),
        mode=st.sampled_from(["in_order", "exact", "subset"]),
    ),
)
cases = st.builds(
    Case,
    id=ids,
    prompt=texts,
    expect=st.lists(expectations, max_size=3).map(tuple),
    metadata=st.dictionaries(ids, st.integers() | texts, max_size=2),
)


@settings(
    suppress_health_check=[HealthCheck.function_scoped_fixture],
    max_examples=examples(60),
    deadline=None,
)
@given(st.lists(cases, max_size=5, unique_by=lambda case: case.id))
@example([Case(id="a\u2028", prompt="\n\x00")])
@example([Case(id="a", prompt="x", metadata={"\x85": "\xb0C"})])
def test_any_dataset_round_trips_through_both_formats(tmp_path: Path, data: list[Case]) -> None:
    for name in ("p.jsonl", "p.yaml"):
        path = tmp_path / name
        Dataset(data).save(path)
        assert Dataset.load(path).cases == tuple(data)


@settings(
    suppress_health_check=[HealthCheck.function_scoped_fixture],
    max_examples=examples(100),
    deadline=None,
)
@given(st.binary(max_size=200) | st.text(max_size=200).map(str.encode))
@example(b'{"id": "a", "prompt": "x", "expect": [{"kind": "bounds", "max_steps": "x"}]}')
@example(b"\xff\xfe")
def test_the_loader_raises_only_dataset_errors(tmp_path: Path, data: bytes) -> None:
    for name in ("f.jsonl", "f.yaml"):
        path = tmp_path / name
        path.write_bytes(data)
        try:
            Dataset.load(path)
        except DatasetError as exc:
            assert str(exc)
