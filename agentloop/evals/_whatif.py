"""What-if replay: a recorded session again, under other options, without a model.

Theory of operation
-------------------
A log records every reply that entered its run (``replay.recorded_replies``).
:func:`what_if` builds a *new* loop -- ``agent_loop(...)`` with the recorded
configuration (initial messages, tools, system prompt, rules, ``started_at``)
but the caller's ``max_steps``, ``budget``, ``limits`` and ``hooks`` -- and answers
each effect it yields from the recording:

- a ``ModelRequest`` gets the next recorded model answer (its chunks, then its
  response or failure), its request id set to the new request's;
- a ``ToolRequest`` (or each request of a ``ToolBatch``) gets the result
  recorded for that call id;
- a ``Pause`` for approval gets the caller's decision for that call (by call id,
  then by tool name, from ``approvals``), else the recorded ``Resume`` for the
  same call; any other pause gets the next recorded ``Resume`` for a pause of
  the same reason;
- when the recording ends with a ``Cancel``, it is sent where the recording has
  nothing else to answer with.

It stops at the first effect the recording cannot answer: a pause the recording
never had (a tighter budget, a new approval, a hook's pause) -- that is where the
session would now *pause* or *ask for approval*; or a model or tool call beyond
the recording -- the session would go past what was recorded, and says so. A run
that finishes is reported with its status (``completed``, ``failed``,
``max_steps``, ``cancelled``). Times are the recorded ones (each reply's ``at``),
so a wall-clock budget is checked against the recorded clock.

Steering messages (``Steer``/``FollowUp``) are not fed again: a session that
recorded any (or an unrecognized reply) is reported ``unsupported``.
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final, Literal

import msgspec

import replay
from agentloop import (
    AgentLoop,
    Budget,
    Cancel,
    Effect,
    Event,
    HookRegistry,
    Limits,
    Message,
    MessageAcceptedEvent,
    ModelChunk,
    ModelFailure,
    ModelRequest,
    ModelResponse,
    Pause,
    Resume,
    RunFinishedEvent,
    RunResult,
    SessionPauseEvent,
    SessionStartEvent,
    ToolBatch,
    ToolCallEvent,
    ToolRequest,
    ToolResult,
    agent_loop,
)

from ._errors import EvalError

__all__ = ["UNCHANGED", "WhatIf", "what_if", "what_if_logs"]

#: Pass for an option to keep the recorded value (the default of every option).
UNCHANGED: Final[Any] = msgspec.UNSET

Stop = Literal["finished", "paused", "approval", "past_recording", "unsupported"]


class WhatIf(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """Where a recorded session would end under other options.

    Attributes:
        session: the log's name (its path, or what the caller passed).
        stop: ``finished`` (the run ended; see ``status``), ``paused`` (a pause the
            recording cannot answer, e.g. a budget), ``approval`` (a tool call
            waits for an approval the recording and ``approvals`` do not give),
            ``past_recording`` (the run asks the model or a tool for more than was
            recorded), ``unsupported`` (see ``detail``).
        status, reason: the run's status and reason when it finished.
        recorded_status, recorded_reason: the recording's.
        sequence: the event the new run stopped after (its last event).
        step: the step it stopped in.
        detail: in words.
        changed: the outcome differs from the recording's.
    """

    session: str
    stop: Stop
    detail: str
    status: str | None = None
    reason: str = ""
    recorded_status: str | None = None
    recorded_reason: str = ""
    sequence: int = -1
    step: int = 0
    changed: bool = True

    def line(self) -> str:
        """One line for a terminal."""
        if self.stop == "unsupported":
            return f"{self.session}: not replayed: {self.detail}"
        what = f"{self.status} ({self.reason})" if self.stop == "finished" else self.stop
        recorded = (
            f"{self.recorded_status} ({self.recorded_reason})"
            if self.recorded_status
            else "unfinished"
        )
        mark = "CHANGED" if self.changed else "same"
        return (
            f"{self.session}: {mark}: {what} at event #{self.sequence}, step {self.step} "
            f"(recorded: {recorded}) - {self.detail}"
        )


class _Recording:
    """The replies of a log, sorted by what they answer."""

    def __init__(self, events: Sequence[Event]) -> None:
        self.model: deque[list[ModelChunk | ModelResponse | ModelFailure]] = deque()
        self.tools: dict[str, ToolResult] = {}
        self.calls: dict[str, Any] = {}  # call id -> the arguments it ran with
        self.resumes: list[tuple[str, str | None, Resume]] = []  # (reason, call id, resume)
        self.cancel: Cancel | None = None
        self.unsupported: list[str] = []
        pending_pauses: deque[tuple[str, str | None]] = deque()
        for event in events:
            if type(event) is ToolCallEvent:
                self.calls.setdefault(event.call.id, event.call.arguments)
            if type(event) is SessionPauseEvent:
                pending_pauses.append((event.reason, _call_id(event.payload)))
        current: list[ModelChunk | ModelResponse | ModelFailure] = []
        for _, reply in replay.recorded_replies(events):
            kind = type(reply)
            if kind is ModelChunk:
                current.append(reply)  # type: ignore[arg-type]
            elif kind is ModelResponse or kind is ModelFailure:
                current.append(reply)  # type: ignore[arg-type]
                self.model.append(current)
                current = []
            elif kind is ToolResult:
                self.tools.setdefault(reply.call_id, reply)  # type: ignore[union-attr,arg-type]
            elif kind is Resume:
                reason, call = pending_pauses.popleft() if pending_pauses else ("", None)
                self.resumes.append((reason, call, reply))  # type: ignore[arg-type]
            elif kind is Cancel:
                self.cancel = reply  # type: ignore[assignment]
            else:  # Steer, FollowUp, an unrecognized reply
                self.unsupported.append(kind.__name__)
        # A trailing partial answer (chunks, no response) cannot answer anything.

    def resume_for(self, pause: Pause) -> Resume | None:
        call = _call_id(pause.payload)
        for index, (reason, recorded_call, resume) in enumerate(self.resumes):
            if reason == pause.reason and recorded_call == call:
                del self.resumes[index]
                return resume
        return None


def _call_id(payload: Any) -> str | None:
    if isinstance(payload, dict):
        call = payload.get("call")
        if isinstance(call, dict) and isinstance(call.get("id"), str):
            return str(call["id"])
    return None


def _decision(pause: Pause, approvals: Mapping[str, Any]) -> Any:
    call = pause.payload.get("call") if isinstance(pause.payload, dict) else None
    if not isinstance(call, dict):
        return None
    for key in (call.get("id"), call.get("name")):
        if isinstance(key, str) and key in approvals:
            decision = approvals[key]
            if isinstance(decision, bool):
                return {"approved": decision}
            return decision
    return None


def what_if(
    events: Iterable[Event],
    *,
    session: str = "session",
    max_steps: Any = UNCHANGED,
    budget: Budget | Any | None = UNCHANGED,
    limits: Limits | Any | None = UNCHANGED,
    hooks: HookRegistry | None = None,
    approvals: Mapping[str, Any] | None = None,
    output: Any = None,
) -> WhatIf:
    """Run a recorded session again under other options, answering from its log.

    Args:
        events: the session's log.
        session: its name in the answer.
        max_steps, budget, limits: the options to change (default: as recorded).
        hooks: the hooks to run (default: none).
        approvals: decisions for approval pauses, by call id or tool name: ``True``
            / ``False``, or a ``Resume`` payload (``{"approved": False, "message":
            "..."}``); used instead of the recorded answer.
        output: the run's structured-output type, required when it had one.

    Returns:
        :class:`WhatIf`: where the session would now stop, and how.

    Raises:
        EvalError: the log does not start with ``session.start`` (an empty log, or
            one whose transcript was invalid: nothing ran), or it recorded
            structured output and ``output`` is not given.
        ValueError, TypeError: an option ``agent_loop`` rejects.
    """
    items = list(events)
    if not items or type(items[0]) is not SessionStartEvent:
        raise EvalError(f"{session}: not a session that ran (no session.start first)")
    start = items[0]
    if start.output is not None and output is None:
        raise EvalError(
            f"{session}: the session checked structured output ({start.output.name}); pass "
            "output=<that type> to run it again"
        )
    finished = items[-1] if type(items[-1]) is RunFinishedEvent else None
    recorded_status = finished.status if finished is not None else None
    recorded_reason = finished.reason if finished is not None else ""
    initial: list[Message] = []
    for event in items[1:]:
        if type(event) is not MessageAcceptedEvent:
            break
        initial.append(event.message)
    recording = _Recording(items)
    base: dict[str, Any] = {
        "session": session,
        "recorded_status": recorded_status,
        "recorded_reason": recorded_reason,
    }
    if recording.unsupported:
        kinds = ", ".join(sorted(set(recording.unsupported)))
        return WhatIf(
            **base,
            stop="unsupported",
            detail=f"the session recorded replies what-if does not feed again: {kinds}",
        )
    loop = agent_loop(
        initial,
        tools=start.tools,
        system=start.system,
        max_steps=start.max_steps if max_steps is UNCHANGED else max_steps,
        budget=start.budget if budget is UNCHANGED else budget,
        hooks=hooks,
        request_sequence_start=start.request_sequence_start,
        started_at=start.at,
        rules=start.rules,
        parallel_tools=start.parallel_tools,
        limits=start.limits if limits is UNCHANGED else limits,
        output=output,
        output_retries=start.output.retries if start.output is not None else 2,
    )
    try:
        stop, detail = _drive(loop, recording, approvals or {})
    finally:
        loop.close()
    last = loop.log[-1]
    if stop == "finished":
        result: RunResult = loop.result  # type: ignore[assignment]
        changed = (result.status, result.reason) != (recorded_status, recorded_reason)
        return WhatIf(
            **base,
            stop="finished",
            status=result.status,
            reason=result.reason,
            detail=detail
            or (result.error.message if result.error is not None else "the run finished"),
            sequence=last.sequence,
            step=last.step,
            changed=changed,
        )
    return WhatIf(**base, stop=stop, detail=detail, sequence=last.sequence, step=last.step)


def _drive(
    loop: AgentLoop, recording: _Recording, approvals: Mapping[str, Any]
) -> tuple[Stop, str]:
    try:
        effect: Effect = next(loop)
        while True:
            reply: Any
            if type(effect) is ModelRequest:
                if not recording.model:
                    if recording.cancel is not None:
                        loop.send(recording.cancel)  # ends the run (StopIteration)
                    return "past_recording", (
                        f"the run asks the model again ({effect.id}, step {effect.step}) and the "
                        "recording has no more model answers"
                    )
                answer = recording.model.popleft()
                request_id = effect.id
                for item in answer:
                    effect = loop.send(msgspec.structs.replace(item, request_id=request_id))
                continue
            if type(effect) is ToolRequest or type(effect) is ToolBatch:
                requests: tuple[ToolRequest, ...] = (
                    effect.requests if type(effect) is ToolBatch else (effect,)  # type: ignore[assignment]
                )
                missing = [r.call for r in requests if r.call.id not in recording.tools]
                moved = [
                    r.call for r in requests if recording.calls.get(r.call.id) != r.call.arguments
                ]
                if missing or moved:
                    if recording.cancel is not None:
                        loop.send(recording.cancel)  # ends the run (StopIteration)
                    if missing:
                        call = missing[0]
                        return "past_recording", (
                            f"the run calls the tool {call.name} ({call.id}), which the "
                            "recording never ran"
                        )
                    call = moved[0]
                    return "past_recording", (
                        f"the run calls the tool {call.name} ({call.id}) with other arguments "
                        "than the recording ran it with"
                    )
                for request in requests:
                    effect = loop.send(recording.tools.pop(request.call.id))
                continue
            assert type(effect) is Pause
            decision = _decision(effect, approvals)
            if decision is not None:
                reply = Resume(payload=decision)
            else:
                reply = recording.resume_for(effect)
            if reply is None:
                if effect.reason == "approval":
                    call_id = _call_id(effect.payload)
                    return (
                        "approval",
                        f"the tool call {call_id} waits for an approval the recording "
                        "does not give",
                    )
                return (
                    "paused",
                    f"the run pauses ({effect.reason}), which the recording never answered",
                )
            effect = loop.send(reply)
    except StopIteration:
        return "finished", ""


def what_if_logs(paths: Iterable[str | os.PathLike[str]], **options: Any) -> list[WhatIf]:
    """:func:`what_if` for each log file (a log that cannot be read is reported as
    ``unsupported`` with the reason)."""
    answers = []
    for path in paths:
        name = os.fspath(path)
        try:
            events = replay.read_log(path)
            answers.append(what_if(events, session=name, **options))
        except (replay.LogError, OSError, EvalError) as exc:
            answers.append(WhatIf(session=name, stop="unsupported", detail=str(exc)[:500]))
    return answers
