"""The lifecycle table alone, with bare inputs (DESIGN §6; h11 ``tests/test_state.py``).

Every ``(state, input)`` pair either moves exactly as the table says or raises
``IllegalTransition``; nothing is a silent no-op. ``EXPECTED`` restates the table
by hand so that any change to it has to be made twice, on purpose.
"""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentloop import State
from agentloop._state import RESUME_INPUT, TRANSITIONS, IllegalTransition, Input, transition

S, I = State, Input  # noqa: E741 - short names keep the table readable

ACTIVE = (S.PLANNING, S.EXECUTING, S.AWAITING_TOOL, S.REFLECTING)

EXPECTED: dict[tuple[State, Input], State] = {
    # a step
    (S.IDLE, I.START_STEP): S.PLANNING,
    (S.PLANNING, I.COMMIT_TOOLS): S.EXECUTING,
    (S.EXECUTING, I.REQUEST_TOOL): S.AWAITING_TOOL,
    (S.AWAITING_TOOL, I.RECEIVE_RESULT): S.EXECUTING,
    (S.EXECUTING, I.END_BATCH): S.REFLECTING,
    (S.REFLECTING, I.START_STEP): S.PLANNING,
    # parallel_tools: a batch out, results back in any order, the last completes it
    (S.EXECUTING, I.REQUEST_BATCH): S.AWAITING_BATCH,
    (S.AWAITING_BATCH, I.RECEIVE_BATCH_RESULT): S.AWAITING_BATCH,
    (S.AWAITING_BATCH, I.COMPLETE_BATCH): S.EXECUTING,
    # a final answer, but a steering/follow-up message or an output retry: one more step
    (S.PLANNING, I.CONTINUE): S.REFLECTING,
    # pauses park every active state in IDLE ...
    (S.PLANNING, I.PAUSE): S.IDLE,
    (S.EXECUTING, I.PAUSE): S.IDLE,
    (S.AWAITING_TOOL, I.PAUSE): S.IDLE,
    (S.REFLECTING, I.PAUSE): S.IDLE,
    # ... and the resume goes back to where the pause left
    (S.IDLE, I.RESUME_TO_PLANNING): S.PLANNING,
    (S.IDLE, I.RESUME_TO_EXECUTING): S.EXECUTING,
    (S.IDLE, I.RESUME_TO_AWAITING_TOOL): S.AWAITING_TOOL,
    (S.IDLE, I.RESUME_TO_REFLECTING): S.REFLECTING,
    # finishing: from every live state, never from DONE
    (S.IDLE, I.FINISH): S.DONE,
    (S.PLANNING, I.FINISH): S.DONE,
    (S.EXECUTING, I.FINISH): S.DONE,
    (S.AWAITING_TOOL, I.FINISH): S.DONE,
    (S.AWAITING_BATCH, I.FINISH): S.DONE,
    (S.REFLECTING, I.FINISH): S.DONE,
}

ALL_PAIRS = list(itertools.product(State, Input))
LEGAL = [pair for pair in ALL_PAIRS if pair in EXPECTED]
ILLEGAL = [pair for pair in ALL_PAIRS if pair not in EXPECTED]


def pair_id(pair: tuple[State, Input]) -> str:
    return f"{pair[0].name}-{pair[1].value}"


def test_the_table_is_exactly_the_expected_one() -> None:
    assert TRANSITIONS == EXPECTED


def test_there_are_seven_states() -> None:
    assert [s.name for s in State] == [
        "IDLE",
        "PLANNING",
        "EXECUTING",
        "AWAITING_TOOL",
        "AWAITING_BATCH",
        "REFLECTING",
        "DONE",
    ]


# --------------------------------------------------------------------------- every pair


@pytest.mark.parametrize("pair", LEGAL, ids=pair_id)
def test_legal_pair_moves_per_the_table(pair: tuple[State, Input]) -> None:
    assert transition(*pair) is EXPECTED[pair]


@pytest.mark.parametrize("pair", ILLEGAL, ids=pair_id)
def test_illegal_pair_raises(pair: tuple[State, Input]) -> None:
    state, event = pair
    with pytest.raises(IllegalTransition, match=f"from {state.name} on {event.value}"):
        transition(state, event)


@given(st.sampled_from(State), st.sampled_from(Input))
def test_any_pair_moves_to_a_state_or_raises_the_typed_error(state: State, event: Input) -> None:
    try:
        after = transition(state, event)
    except IllegalTransition:
        assert (state, event) not in TRANSITIONS
    else:
        assert isinstance(after, State)
        assert TRANSITIONS[state, event] is after


def test_illegal_transition_is_a_runtime_error_not_a_caller_error() -> None:
    # Reaching it is an engine bug, never something the caller caused. (Under the
    # library's one error root since DESIGN §24, but not a CallerProtocolError.)
    from agentloop import AgentLoopError, CallerProtocolError

    assert issubclass(IllegalTransition, RuntimeError)
    assert issubclass(IllegalTransition, AgentLoopError)
    assert not issubclass(IllegalTransition, CallerProtocolError)


# --------------------------------------------------------------------------- shape of the machine


def test_done_is_terminal() -> None:
    assert not [pair for pair in TRANSITIONS if pair[0] is S.DONE]


def test_every_live_state_can_finish() -> None:
    for state in State:
        if state is not S.DONE:
            assert transition(state, I.FINISH) is S.DONE


def test_every_state_is_reachable_from_idle() -> None:
    reached = {S.IDLE}
    frontier = [S.IDLE]
    while frontier:
        state = frontier.pop()
        for (source, _), target in TRANSITIONS.items():
            if source is state and target not in reached:
                reached.add(target)
                frontier.append(target)
    assert reached == set(State)


def test_idle_is_entered_only_by_a_pause() -> None:
    assert {event for (_, event), target in TRANSITIONS.items() if target is S.IDLE} == {I.PAUSE}


@pytest.mark.parametrize("state", ACTIVE, ids=lambda s: s.name)
def test_a_pause_and_its_resume_come_back_to_the_same_state(state: State) -> None:
    paused = transition(state, I.PAUSE)
    assert paused is S.IDLE
    assert transition(paused, RESUME_INPUT[state]) is state


def test_resume_inputs_cover_exactly_the_active_states() -> None:
    assert set(RESUME_INPUT) == set(ACTIVE)
    assert {event.value for event in RESUME_INPUT.values()} == {
        f"resume_to_{state.name.lower()}" for state in ACTIVE
    }


def test_every_input_is_used_by_the_table() -> None:
    assert {event for _, event in TRANSITIONS} == set(Input)


def test_a_step_walks_the_documented_path() -> None:
    state = S.IDLE
    path = [state]
    for event in (
        I.START_STEP,
        I.COMMIT_TOOLS,
        I.REQUEST_TOOL,
        I.RECEIVE_RESULT,
        I.REQUEST_TOOL,
        I.RECEIVE_RESULT,
        I.END_BATCH,
        I.START_STEP,
        I.FINISH,
    ):
        state = transition(state, event)
        path.append(state)
    assert path == [
        S.IDLE,
        S.PLANNING,
        S.EXECUTING,
        S.AWAITING_TOOL,
        S.EXECUTING,
        S.AWAITING_TOOL,
        S.EXECUTING,
        S.REFLECTING,
        S.PLANNING,
        S.DONE,
    ]


def test_a_batch_step_walks_the_documented_path() -> None:
    state = S.EXECUTING
    path = [state]
    for event in (
        I.REQUEST_BATCH,
        I.RECEIVE_BATCH_RESULT,
        I.RECEIVE_BATCH_RESULT,
        I.COMPLETE_BATCH,
        I.REQUEST_TOOL,  # a sequential tool, alone
        I.RECEIVE_RESULT,
        I.END_BATCH,
    ):
        state = transition(state, event)
        path.append(state)
    assert path == [
        S.EXECUTING,
        S.AWAITING_BATCH,
        S.AWAITING_BATCH,
        S.AWAITING_BATCH,
        S.EXECUTING,
        S.AWAITING_TOOL,
        S.EXECUTING,
        S.REFLECTING,
    ]


def test_no_pause_comes_while_a_batch_is_out() -> None:
    assert (S.AWAITING_BATCH, I.PAUSE) not in TRANSITIONS


def test_the_table_is_plain_data() -> None:
    # A (state, input) -> state mapping of enum members: what the docs diagram reads.
    for (state, event), target in TRANSITIONS.items():
        assert type(state) is State and type(event) is Input and type(target) is State
