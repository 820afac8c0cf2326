"""A caller's message may not take an id the loop makes (issue 21, rules revision 3).

The loop names the messages it makes by prefix: ``message-<response id>``,
``tool-result-<call id>``, ``output-retry-<response id>``. A ``Steer`` or
``FollowUp`` with such an id could take the id of a message the loop has still
to make. Under rules revision 3 the loop refuses it (caller misuse); the
``Inbox`` and ``replay.answer`` refuse it at once. Logs of revision 2 and before
replay as they were written (``fixtures/rules-2/``).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import replay
from agentloop import (
    CALLER_PROTOCOL_ERROR,
    MODEL_PROTOCOL_ERROR,
    RULES_REVISION,
    CallerProtocolError,
    FollowUp,
    FunctionModel,
    Inbox,
    Limits,
    ModelRequest,
    RunFinishedEvent,
    ScriptedResponse,
    SessionCompleteEvent,
    Steer,
    SummarizeOlder,
    ToolCall,
    ToolRequest,
    ToolResult,
    UserMessage,
    agent_loop,
    encode_event,
    run,
    tool,
    validate_transcript,
)
from agentloop._validation import COMPACTION_ID_PREFIXES, LOOP_ID_PREFIXES, reserved_id_problem
from replay import SQLiteStore, read_log, recorded_replies
from replay.__main__ import main

from .helpers import ECHO, call, response
from .test_durable import APPROVE, QUESTION, publish

RULES_2 = Path(__file__).resolve().parent.parent / "fixtures" / "rules-2"
PREFIXES = [prefix for prefix, _ in LOOP_ID_PREFIXES]
QUESTION_OF_FIXTURE = [UserMessage("u1", "What is the weather in Oslo?")]
RESERVED = ["message-r2", "tool-result-c1", "output-retry-r1", "message-", "tool-result-"]


def _loop(**options: Any) -> Any:
    loop = agent_loop([UserMessage("u1", "hi")], tools=[ECHO], started_at=1.0, **options)
    next(loop)
    return loop


def _at_the_tool(loop: Any) -> Any:
    """Bring ``loop`` to its ToolRequest for call c1 (response r1)."""
    effect = loop.send(response("request-001", "r1", call("echo", "c1")))
    assert type(effect) is ToolRequest
    return effect


# --------------------------------------------------------------------------- the rule


def test_the_namespaces_are_the_loop_s() -> None:
    assert PREFIXES == ["message-", "tool-result-", "output-retry-"]
    assert RULES_REVISION == 3


@given(st.text(max_size=30))
def test_an_id_is_reserved_exactly_when_it_starts_with_a_loop_prefix(suffix: str) -> None:
    assert reserved_id_problem(suffix) is None or suffix.startswith(tuple(PREFIXES))
    for prefix in PREFIXES:
        problem = reserved_id_problem(prefix + suffix)
        assert problem is not None
        assert repr(prefix + suffix) in problem and repr(prefix) in problem


@pytest.mark.parametrize("id_", ["u2", "inbox-0a1b", "messages-1", "tool-result", "Message-r2"])
def test_other_ids_are_the_caller_s(id_: str) -> None:
    assert reserved_id_problem(id_) is None


# --------------------------------------------------------------------------- the engine


@pytest.mark.parametrize("kind", [Steer, FollowUp])
@pytest.mark.parametrize("id_", RESERVED)
@pytest.mark.parametrize("where", ["model", "tool"])
def test_the_loop_refuses_a_queued_message_with_a_reserved_id(
    kind: type[Steer | FollowUp], id_: str, where: str
) -> None:
    loop = _loop()
    if where == "tool":
        _at_the_tool(loop)
    reply = kind(UserMessage(id_, "redirect"), at=2.0)
    refused = re.escape(f"{kind.__name__}.message id {id_!r} is in")
    with pytest.raises(CallerProtocolError, match=refused):
        loop.send(reply)
    result = loop.result
    assert result is not None and result.status == "failed" and result.error is not None
    assert result.error.code == CALLER_PROTOCOL_ERROR
    complete = loop.log[-2]
    assert type(complete) is SessionCompleteEvent and complete.reply == reply  # recorded
    assert "message.queued" not in [event.type for event in loop.log]
    rebuilt = replay.replay(list(loop.log))
    assert [encode_event(e) for e in rebuilt.events] == [encode_event(e) for e in loop.log]


def test_under_rules_2_a_steer_took_the_pending_result_s_id() -> None:
    # The defect, kept for the logs written under it: two messages of one id.
    loop = _loop(rules=2)
    _at_the_tool(loop)
    loop.send(Steer(UserMessage("tool-result-c1", "in Fahrenheit")))
    loop.send(ToolResult("c1", "12 °C"))
    with pytest.raises(StopIteration):
        loop.send(response("request-002", "r2", "54 °F"))
    result = loop.result
    assert result is not None and result.status == "completed"
    ids = [message.id for message in result.messages]
    assert ids.count("tool-result-c1") == 2
    with pytest.raises(ValueError, match="tool-result-c1"):
        validate_transcript(result.messages)


def test_under_the_newest_rules_the_model_is_not_blamed_for_the_caller_s_id() -> None:
    loop = _loop()
    with pytest.raises(CallerProtocolError):
        loop.send(Steer(UserMessage("message-r2", "redirect")))
    assert loop.result is not None and loop.result.error is not None
    assert loop.result.error.code == CALLER_PROTOCOL_ERROR  # not MODEL_PROTOCOL_ERROR


# --------------------------------------------------------------------------- the Inbox


@pytest.mark.parametrize("id_", RESERVED)
@pytest.mark.parametrize("method", ["steer", "follow_up"])
def test_the_inbox_refuses_a_reserved_id_in_the_sender_s_thread(id_: str, method: str) -> None:
    inbox = Inbox()
    refused = r"^the Inbox refuses this \w+: " + re.escape(f"message id {id_!r} is in")
    with pytest.raises(ValueError, match=refused):
        getattr(inbox, method)(UserMessage(id_, "redirect"))
    assert len(inbox) == 0


def test_a_run_steered_through_the_inbox_keeps_unique_ids() -> None:
    inbox = Inbox()
    refused: list[str] = []

    def echo_and_steer(text: str) -> str:
        try:
            inbox.steer(UserMessage("tool-result-c1", "in Fahrenheit"))
        except ValueError as exc:
            refused.append(str(exc))
            inbox.steer(UserMessage("u-steer", "in Fahrenheit"))
        return text

    echo = tool(name="echo")(echo_and_steer)

    def model(request: ModelRequest) -> ScriptedResponse:
        if request.step == 1:
            return ScriptedResponse.tool_calls("r1", ToolCall("c1", "echo", {"text": "12 °C"}))
        return ScriptedResponse.text("r2", "54 °F")

    result = run([UserMessage("u1", "hi")], model=FunctionModel(model), tools=[echo], inbox=inbox)
    assert result.status == "completed"
    assert len(refused) == 1
    validate_transcript(result.messages)
    assert [m.id for m in result.messages] == [
        "u1",
        "message-r1",
        "tool-result-c1",
        "u-steer",
        "message-r2",
    ]


# --------------------------------------------------------------------------- replay.answer


@pytest.mark.parametrize("kind", [Steer, FollowUp])
def test_answer_refuses_a_reserved_id_for_a_parked_session(
    kind: type[Steer | FollowUp], tmp_path: Path
) -> None:
    def publishing(request: ModelRequest) -> ScriptedResponse:
        if request.step == 1:
            return ScriptedResponse.tool_calls("r1", ToolCall("c1", "publish", {"text": "hi"}))
        return ScriptedResponse.text(f"r{request.step}", "Done.")

    options: dict[str, Any] = {"model": FunctionModel(publishing), "tools": [publish]}
    with SQLiteStore(tmp_path / "s.db") as store:
        assert type(replay.run_durable(store, "s", QUESTION, **options)) is replay.Parked
        with pytest.raises(ValueError, match="message id 'tool-result-c1' is in a namespace"):
            replay.answer(store, "s", kind(UserMessage("tool-result-c1", "wait")))
        with pytest.raises(ValueError, match="message id 'message-r2' is in a namespace"):
            store.queue("s", kind(UserMessage("message-r2", "wait")))
        assert store.session("s").queued == 0
        replay.answer(store, "s", APPROVE)
        result = replay.run_durable(store, "s", **options)
        assert result.status == "completed"
        validate_transcript(result.messages)


# --------------------------------------------------------------------------- old logs


def test_there_are_logs_of_rules_2() -> None:
    logs = sorted(RULES_2.glob("*.jsonl"))
    assert [p.name for p in logs] == [
        "steered_into_a_response_id.jsonl",
        "steered_into_a_result_id.jsonl",
    ]
    assert [read_log(p)[0].rules for p in logs] == [2, 2]  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("name", "status", "code"),
    [
        ("steered_into_a_result_id.jsonl", "completed", None),
        ("steered_into_a_response_id.jsonl", "failed", MODEL_PROTOCOL_ERROR),
    ],
)
def test_a_rules_2_log_with_a_reserved_id_replays_as_written(
    name: str, status: str, code: str | None, capsys: pytest.CaptureFixture[str]
) -> None:
    events = read_log(RULES_2 / name)
    finished = events[-1]
    assert type(finished) is RunFinishedEvent and finished.status == status
    rebuilt = replay.replay(events)
    assert [encode_event(e) for e in rebuilt.events] == [encode_event(e) for e in events]
    assert rebuilt.result is not None and rebuilt.result.status == status
    assert (rebuilt.result.error.code if rebuilt.result.error else None) == code
    assert main(["check", str(RULES_2 / name)]) == 0
    assert "ok" in capsys.readouterr().out
    # The same replies under the newest rules: the steering message is refused.
    start = events[0]
    loop = agent_loop(QUESTION_OF_FIXTURE, tools=start.tools, started_at=start.at)  # type: ignore[attr-defined]
    next(loop)
    with pytest.raises(CallerProtocolError, match=r"message id .* is in a namespace"):
        for _, reply in recorded_replies(events):
            loop.send(reply)
    assert loop.result is not None and loop.result.error is not None
    assert loop.result.error.code == CALLER_PROTOCOL_ERROR


# --------------------------------------------------------------------------- compaction's ids


COMPACTION_PREFIXES = [prefix for prefix, _ in COMPACTION_ID_PREFIXES]


def test_compaction_makes_ids_in_two_more_namespaces() -> None:
    assert COMPACTION_PREFIXES == ["summary-", "compaction-"]


@given(st.text(max_size=30))
def test_with_compaction_the_summary_ids_are_the_loop_s_too(suffix: str) -> None:
    for prefix in COMPACTION_PREFIXES:
        assert reserved_id_problem(prefix + suffix) is None  # without a policy: the caller's
        problem = reserved_id_problem(prefix + suffix, compaction=True)
        assert problem is not None and repr(prefix) in problem
    assert (reserved_id_problem(suffix, compaction=True) is None) == (
        reserved_id_problem(suffix) is None and not suffix.startswith(tuple(COMPACTION_PREFIXES))
    )


def _compacting_loop(policy: Any) -> Any:
    limits = Limits(context_tokens=5000)
    loop = agent_loop(
        [UserMessage("u1", "hi")], tools=[ECHO], started_at=1.0, limits=limits, compaction=policy
    )
    next(loop)
    return loop


@pytest.mark.parametrize("kind", [Steer, FollowUp])
@pytest.mark.parametrize("id_", ["summary-r1", "compaction-request-002", "summary-"])
def test_a_run_with_a_compaction_policy_refuses_its_ids(
    kind: type[Steer | FollowUp], id_: str
) -> None:
    loop = _compacting_loop(SummarizeOlder())
    reply = kind(UserMessage(id_, "redirect"), at=2.0)
    with pytest.raises(CallerProtocolError, match=re.escape(f"{id_!r} is in a namespace")):
        loop.send(reply)
    assert loop.result is not None and loop.result.error is not None
    assert loop.result.error.code == CALLER_PROTOCOL_ERROR
    rebuilt = replay.replay(list(loop.log))
    assert [encode_event(e) for e in rebuilt.events] == [encode_event(e) for e in loop.log]


def test_without_a_policy_those_ids_stay_the_caller_s() -> None:
    for loop in (_loop(), _compacting_loop(None)):
        loop.send(Steer(UserMessage("summary-r1", "redirect"), at=2.0))
        assert loop.log[-1].type == "message.queued"


def test_a_steer_may_not_take_the_id_of_the_summary_the_model_sees() -> None:
    # The defect: the summary is not in the transcript, so its id was free for a
    # steering message, and the next request would hold two messages of one id.
    policy = SummarizeOlder(at=0.3, keep=0.1)
    loop = _compacting_loop(policy)
    effect = loop.send(response("request-001", "r1", call("echo", "c1", text="x" * 3000)))
    effect = loop.send(ToolResult("c1", "y" * 3000))
    assert type(effect) is ModelRequest and effect.purpose == "compaction"
    effect = loop.send(response(effect.id, "s1", "the summary"))
    assert type(effect) is ModelRequest and effect.messages[0].id == "summary-s1"
    with pytest.raises(CallerProtocolError, match="'summary-s1' is in a namespace"):
        loop.send(Steer(UserMessage("summary-s1", "and now?"), at=3.0))
