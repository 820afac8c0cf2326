"""The lifecycle state machine (DESIGN §6): named states, transitions as data.

Theory of operation
-------------------
The loop is always in exactly one :class:`State`. It starts in ``IDLE`` and ends in
``DONE``; nothing else is an entry or an exit. A step goes::

    IDLE/REFLECTING --start_step--> PLANNING --commit_tools--> EXECUTING
    EXECUTING --request_tool--> AWAITING_TOOL --receive_result--> EXECUTING
    EXECUTING --end_batch--> REFLECTING --start_step--> PLANNING ...
    PLANNING --continue--> REFLECTING   (a final answer, but a steering or
                                         follow-up message is waiting)

With ``parallel_tools=True`` the calls that may run together go out as one batch::

    EXECUTING --request_batch--> AWAITING_BATCH --receive_batch_result--> AWAITING_BATCH
    AWAITING_BATCH --complete_batch--> EXECUTING     (the batch's last result)

and ends with ``finish`` (from PLANNING when the model stops or fails to plan, from
REFLECTING when no step may follow, from anywhere on cancel or failure). A pause
(budget, hook, approval) moves any active state but ``AWAITING_BATCH`` (no pause
comes while a batch is out) to ``IDLE``; the matching
``resume_to_<state>`` input moves it back to where it was.

:data:`TRANSITIONS` is the whole machine: a ``(state, input) -> next state`` table.
:func:`transition` is the only function that changes state; a pair missing from the
table raises :class:`IllegalTransition` (a bug in the engine, never silently ignored).
The documentation's state diagram is generated from this table
(``docs/make_state_diagram.py``) and a test keeps the two in step.
"""

from __future__ import annotations

import enum

from ._errors import AgentLoopError

__all__ = ["RESUME_INPUT", "TRANSITIONS", "IllegalTransition", "Input", "State", "transition"]


class State(enum.Enum):
    """Where the loop is in its lifecycle."""

    #: Not running a step: before the first step, or paused waiting for ``Resume``.
    IDLE = "IDLE"
    #: A model request is open: waiting for chunks and the final response.
    PLANNING = "PLANNING"
    #: Working through the tool calls of the committed plan.
    EXECUTING = "EXECUTING"
    #: A ``ToolRequest`` is out: waiting for its ``ToolResult``.
    AWAITING_TOOL = "AWAITING_TOOL"
    #: A ``ToolBatch`` is out: waiting for its results, in any order.
    AWAITING_BATCH = "AWAITING_BATCH"
    #: The step's batch is done: deciding whether another step follows.
    REFLECTING = "REFLECTING"
    #: The run is over (completed, cancelled, max_steps or failed).
    DONE = "DONE"

    # Members are singletons compared by identity; hashing by identity keeps the
    # per-transition table lookup cheap (Enum's default hashes the name in Python).
    __hash__ = object.__hash__


class Input(enum.Enum):
    """What makes the state change."""

    START_STEP = "start_step"
    COMMIT_TOOLS = "commit_tools"
    REQUEST_TOOL = "request_tool"
    RECEIVE_RESULT = "receive_result"
    END_BATCH = "end_batch"
    REQUEST_BATCH = "request_batch"
    RECEIVE_BATCH_RESULT = "receive_batch_result"
    COMPLETE_BATCH = "complete_batch"
    #: A final answer does not end the run: a steering or follow-up message came.
    CONTINUE = "continue"
    PAUSE = "pause"
    RESUME_TO_PLANNING = "resume_to_planning"
    RESUME_TO_EXECUTING = "resume_to_executing"
    RESUME_TO_AWAITING_TOOL = "resume_to_awaiting_tool"
    RESUME_TO_REFLECTING = "resume_to_reflecting"
    FINISH = "finish"

    __hash__ = object.__hash__


class IllegalTransition(AgentLoopError, RuntimeError):
    """The engine tried a transition the table does not have (an engine bug)."""


S, I = State, Input  # noqa: E741 - short names keep the table readable

_ACTIVE = (S.PLANNING, S.EXECUTING, S.AWAITING_TOOL, S.REFLECTING)

#: ``(state, input) -> next state``. Anything missing is illegal.
TRANSITIONS: dict[tuple[State, Input], State] = {
    (S.IDLE, I.START_STEP): S.PLANNING,
    (S.PLANNING, I.COMMIT_TOOLS): S.EXECUTING,
    (S.EXECUTING, I.REQUEST_TOOL): S.AWAITING_TOOL,
    (S.AWAITING_TOOL, I.RECEIVE_RESULT): S.EXECUTING,
    (S.EXECUTING, I.END_BATCH): S.REFLECTING,
    # parallel_tools: a batch of calls out at once, its results back in any order
    (S.EXECUTING, I.REQUEST_BATCH): S.AWAITING_BATCH,
    (S.AWAITING_BATCH, I.RECEIVE_BATCH_RESULT): S.AWAITING_BATCH,
    (S.AWAITING_BATCH, I.COMPLETE_BATCH): S.EXECUTING,
    (S.REFLECTING, I.START_STEP): S.PLANNING,
    (S.PLANNING, I.CONTINUE): S.REFLECTING,
    # pauses: any active state parks in IDLE and comes back to where it was
    **{(state, I.PAUSE): S.IDLE for state in _ACTIVE},
    (S.IDLE, I.RESUME_TO_PLANNING): S.PLANNING,
    (S.IDLE, I.RESUME_TO_EXECUTING): S.EXECUTING,
    (S.IDLE, I.RESUME_TO_AWAITING_TOOL): S.AWAITING_TOOL,
    (S.IDLE, I.RESUME_TO_REFLECTING): S.REFLECTING,
    # finishing: completion, max_steps, cancel or failure, from any live state
    **{(state, I.FINISH): S.DONE for state in (S.IDLE, S.AWAITING_BATCH, *_ACTIVE)},
}

#: The resume input that returns to each state a pause can leave.
RESUME_INPUT: dict[State, Input] = {
    S.PLANNING: I.RESUME_TO_PLANNING,
    S.EXECUTING: I.RESUME_TO_EXECUTING,
    S.AWAITING_TOOL: I.RESUME_TO_AWAITING_TOOL,
    S.REFLECTING: I.RESUME_TO_REFLECTING,
}


def transition(state: State, event: Input) -> State:
    """Return the state after ``event`` in ``state``.

    Raises:
        IllegalTransition: the pair is not in :data:`TRANSITIONS`.
    """
    try:
        return TRANSITIONS[state, event]
    except KeyError:
        raise IllegalTransition(f"no transition from {state.name} on {event.value}") from None
