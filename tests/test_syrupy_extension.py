"""replay.syrupy.EventLogExtension: readable, stable snapshots of event logs.

The fixture logs are snapshotted in ``__snapshots__/test_syrupy_extension/``
(update them with ``pytest --snapshot-update`` after a deliberate change). The
serializer's properties are checked on its output directly: masked fields do
not reach the text, everything else does.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
import pytest
from syrupy.assertion import SnapshotAssertion

from agentloop import (
    Budget,
    BudgetUsage,
    BudgetWarnEvent,
    EventLog,
    RunFinishedEvent,
    ScriptedModel,
    ScriptedResponse,
    SessionStartEvent,
    ToolCall,
    Usage,
    UserMessage,
    decode_event,
    encode_event,
    run,
    tool,
)
from replay import read_log, replay
from replay.syrupy import DEFAULT_MASK, SERIALIZER_VERSION, EventLogExtension, to_text

from .helpers import add_ab as add

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
LOGS = sorted(FIXTURES.glob("*.jsonl"))


@pytest.fixture
def snapshot(snapshot: SnapshotAssertion) -> SnapshotAssertion:
    return snapshot.use_extension(EventLogExtension)


# --------------------------------------------------------------------------- snapshots


@pytest.mark.parametrize("path", LOGS, ids=[p.stem for p in LOGS])
def test_fixture_logs(path: Path, snapshot: SnapshotAssertion) -> None:
    assert read_log(path) == snapshot


def test_run_result(snapshot: SnapshotAssertion) -> None:
    model = ScriptedModel(
        [
            ScriptedResponse.tool_calls("r1", ToolCall("c1", "add", {"a": 20, "b": 22})),
            ScriptedResponse.text("r2", "20 + 22 = 42."),
        ]
    )
    log = EventLog()
    result = run([UserMessage("u1", "20 + 22?")], model=model, tools=[add], log=log)
    # Live runs stamp the wall clock: `at` is masked, so the snapshots are stable.
    assert log == snapshot(name="log")
    assert result == snapshot(name="result")


def test_snapshot_file_layout() -> None:
    folder = Path(__file__).parent / "__snapshots__" / "test_syrupy_extension"
    assert (folder / "test_fixture_logs[tool_calls].eventlog").is_file()
    text = (folder / "test_fixture_logs[tool_calls].eventlog").read_text()
    assert text.startswith(f"# agentloop events (serializer {SERIALIZER_VERSION}; masked: at,")


def test_the_file_extension_is_set_for_every_syrupy_version() -> None:
    # syrupy 5+ reads `file_extension`; syrupy 4 reads `_file_extension` (and would
    # otherwise write `.raw` files). Checked by hand with syrupy 4.0.0 and 7.0.
    for cls in (EventLogExtension, EventLogExtension.with_options(mask=())):
        assert cls.file_extension == "eventlog"
        assert cls._file_extension == "eventlog"


# --------------------------------------------------------------------------- masking


def _rewrite(events: list[Any], change: Any) -> list[Any]:
    """The events with ``change(builtins)`` applied to each one's JSON form."""
    out = []
    for event in events:
        raw = msgspec.json.decode(encode_event(event))
        out.append(decode_event(msgspec.json.encode(change(raw))))
    return out


def _shift_at(value: Any) -> Any:
    if isinstance(value, dict):
        return {
            k: (v + 12345.5 if k == "at" and v is not None else _shift_at(v))
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [_shift_at(v) for v in value]
    return value


@pytest.mark.parametrize("name", ["tool_calls", "budget_pause_resume", "approval"])
def test_changing_at_values_does_not_change_the_text(name: str) -> None:
    events = read_log(FIXTURES / f"{name}.jsonl")
    shifted = _rewrite(events, _shift_at)
    assert shifted != events
    assert to_text(shifted) == to_text(events)
    # ...because it is masked: unmasked, the shift shows.
    assert to_text(shifted, mask=()) != to_text(events, mask=())


def test_changing_a_tool_result_changes_the_text() -> None:
    events = read_log(FIXTURES / "tool_calls.jsonl")

    def change(raw: dict[str, Any]) -> dict[str, Any]:
        if raw["type"] == "tool.result" and raw["message"]["content"] == "42":
            raw["message"]["content"] = raw["reply"]["content"] = "43"
        return raw

    changed = _rewrite(events, change)
    before, after = to_text(events).splitlines(), to_text(changed).splitlines()
    differing = [(a, b) for a, b in zip(before, after, strict=True) if a != b]
    assert len(differing) == 2  # tool.result: its message and its reply
    for old, new in differing:
        assert '"content":"42"' in old and '"content":"43"' in new


def test_durations_are_masked_by_default() -> None:
    events = read_log(FIXTURES / "budget_pause_resume.jsonl")
    assert DEFAULT_MASK == ("at", "wall_seconds")
    header, body = to_text(events).split("\n", 1)
    assert header.endswith("masked: at, wall_seconds)")
    assert '"wall_seconds"' not in body
    assert "at=" not in body
    unmasked = to_text(events, mask=())
    assert '"wall_seconds":0.75' in unmasked
    assert "#0 session.start step=0 at=1000.0" in unmasked


def test_tool_arguments_and_schemas_are_data_never_masked() -> None:
    model = ScriptedModel(
        [
            ScriptedResponse.tool_calls("r1", ToolCall("c1", "remind", {"at": "noon"})),
            ScriptedResponse.text("r2", "ok"),
        ]
    )

    @tool
    def remind(at: str) -> str:
        """Remind me at a time."""
        return "set"

    log = EventLog()
    run([UserMessage("u1", "remind me")], model=model, tools=[remind], log=log)
    text = to_text(log)
    assert '"arguments":{"at":"noon"}' in text
    assert '"properties":{"at":{"type":"string"}}' in text
    assert '"at":1' not in text


# --------------------------------------------------------------------------- format


def test_format_of_one_event_block() -> None:
    events = read_log(FIXTURES / "tool_calls.jsonl")
    lines = to_text(events[:3]).splitlines()
    assert lines[0] == "# agentloop events (serializer 2; masked: at, wall_seconds)"
    assert lines[1:4] == ["#0 session.start step=0", '  system: "Be brief."', "  tools:"]
    assert lines[4].startswith('    - {"name":"add","description":"Add two integers."')
    assert lines[-2:] == ["#2 step.start step=1", '  request_id: "request-001"']


def test_fields_holding_their_default_are_left_out() -> None:
    # As in the log files: a field added later (with a default) changes no snapshot.
    start = SessionStartEvent(sequence=0, max_steps=8)
    assert to_text([start]).splitlines()[1:] == ["#0 session.start step=0", "  max_steps: 8"]
    usage = Usage(3, 0, reasoning_tokens=2)
    finished = RunFinishedEvent(sequence=1, status="completed", usage=usage)
    assert to_text([finished]).splitlines()[2:] == [
        '  status: "completed"',
        '  usage: {"input_tokens":3,"reasoning_tokens":2}',
    ]
    # Equal is not enough: -0.0 is not the default 0.0, and is written.
    budget = BudgetUsage(wall_seconds=-0.0)
    warn = BudgetWarnEvent(sequence=2, limit="turns", usage=budget, budget=Budget(max_turns=1))
    text = to_text([warn], mask=())
    assert '  usage: {"wall_seconds":-0.0}' in text.splitlines()


def test_values_json_cannot_hold_are_tagged() -> None:
    text = to_text(read_log(FIXTURES / "non_finite_arguments.jsonl"))
    assert '"a":{"$float":"nan"},"b":{"$float":"-inf"}' in text
    assert '"n":{"$int":"1180591620717411303424"}' in text


def test_a_dict_that_reads_as_a_tag_is_escaped() -> None:
    model = ScriptedModel(
        [
            ScriptedResponse.tool_calls("r1", ToolCall("c1", "add", {"$int": "1"})),
            ScriptedResponse.text("r2", "ok"),
        ]
    )
    log = EventLog()
    run([UserMessage("u1", "hi")], model=model, tools=[add], log=log)
    assert '"arguments":{"$dict":{"$int":"1"}}' in to_text(log)


def test_inputs_that_hold_events() -> None:
    events = read_log(FIXTURES / "tool_calls.jsonl")
    expected = to_text(events)
    assert to_text(tuple(events)) == expected
    assert to_text(replay(events)) == expected  # ReplayResult.events
    assert to_text([]) == "# agentloop events (serializer 2; masked: at, wall_seconds)\n"


def test_run_result_text() -> None:
    result = replay(read_log(FIXTURES / "tool_calls.jsonl")).result
    lines = to_text(result).splitlines()
    assert lines[:3] == [
        "# agentloop run result (serializer 2; masked: at, wall_seconds)",
        "result",
        '  status: "completed"',
    ]
    assert "  messages:" in lines
    assert lines[lines.index("  messages:") + 1].startswith('    - {"role":"user"')


@pytest.mark.parametrize(
    "data",
    [object(), "text", b"bytes", [1, 2], EventLog, read_log(FIXTURES / "plain_answer.jsonl")[0]],
)
def test_other_data_is_rejected(data: object) -> None:
    with pytest.raises(TypeError, match=r"agentloop event|EventLogExtension snapshots"):
        to_text(data)


# --------------------------------------------------------------------------- options


def test_with_options() -> None:
    only_at = EventLogExtension.with_options(mask=["at"])
    assert only_at.mask == ("at",)
    assert issubclass(only_at, EventLogExtension)
    assert EventLogExtension.with_options(mask=("at",)) is only_at  # cached
    assert EventLogExtension.with_options().mask == DEFAULT_MASK
    assert only_at.with_options().mask == ("at",)
    events = read_log(FIXTURES / "budget_pause_resume.jsonl")
    assert only_at().serialize(events) == to_text(events, mask=("at",))
    assert '"wall_seconds":0.75' in only_at().serialize(events)


def test_subclass_sets_the_mask() -> None:
    class Everything(EventLogExtension):
        mask = ()

    events = read_log(FIXTURES / "tool_calls.jsonl")
    assert Everything().serialize(events) == to_text(events, mask=())


@pytest.mark.parametrize("mask", ["at", [1], [""]])
def test_bad_masks(mask: Any) -> None:
    with pytest.raises(TypeError, match="mask must"):
        EventLogExtension.with_options(mask=mask)
    with pytest.raises(TypeError, match="mask must"):
        to_text([], mask=mask)


def test_property_filters_are_refused() -> None:
    with pytest.raises(TypeError, match="with_options"):
        EventLogExtension().serialize([], exclude=lambda **kwargs: False)
    with pytest.raises(TypeError, match="with_options"):
        EventLogExtension().serialize([], include=lambda **kwargs: True)


# --------------------------------------------------------------------------- in a test run


def test_snapshot_diff_in_a_test_run(pytester: pytest.Pytester) -> None:
    # A format-1 log: it has no hash chain, so its bytes can be edited here.
    source = FIXTURES / "v1" / "tool_calls.jsonl"
    log = pytester.path / "session.jsonl"
    log.write_bytes(source.read_bytes())
    pytester.makepyfile(
        test_log="""
from replay import read_log
from replay.syrupy import EventLogExtension

def test_log(snapshot):
    assert read_log("session.jsonl") == snapshot(extension_class=EventLogExtension)
"""
    )
    args = ("-p", "no:cacheprovider", "-p", "no:hypothesispytest", "-p", "no:langsmith_plugin")
    pytester.runpytest(*args, "--snapshot-update").assert_outcomes(passed=1)
    stored = pytester.path / "__snapshots__" / "test_log" / "test_log.eventlog"
    assert stored.read_text() == to_text(read_log(source))

    log.write_bytes(source.read_bytes().replace(b'"at":1001.25', b'"at":2001.25'))
    pytester.runpytest(*args).assert_outcomes(passed=1)

    log.write_bytes(source.read_bytes().replace(b'"content":"42"', b'"content":"43"'))
    result = pytester.runpytest(*args)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(['*- *"content":"42"*', '*+ *"content":"43"*'])


def test_hand_built_values_are_written_as_to_builtins_writes_them() -> None:
    # Events the loop makes hold plain JSON; hand-built ones may hold anything
    # msgspec.to_builtins knows, and any sequence (a deque, a range) is a list.
    import collections
    import datetime
    import decimal

    from agentloop import SessionPauseEvent

    payload = {
        "when": datetime.date(2026, 1, 2),
        "price": decimal.Decimal("1.50"),
        "queue": collections.deque([1, 2]),
        "range": range(2),
        "tags": frozenset(["a"]),
    }
    event = SessionPauseEvent(sequence=0, reason="approval", payload=payload)
    assert to_text([event]).splitlines()[1:] == [
        "#0 session.pause step=0",
        '  reason: "approval"',
        '  payload: {"when":"2026-01-02","price":"1.50","queue":[1,2],"range":[0,1],"tags":["a"]}',
    ]
