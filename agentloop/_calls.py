"""Tool calls, one at a time or in parallel batches (DESIGN §9, §18).

Each call: the tool-call budget, then the loop's own verdicts (a truncated
response, an unknown tool), before_tool_call (edit, abort, skip, pause) and
approval, then tool.call for every call, made-up error results included. Only a
call that survived all of that is yielded as a ToolRequest; the caller's
ToolResult passes after_tool_call and is appended, recorded in tool.result or
tool.error with the reply as received. Loop-made results have no reply. Hooks and
tools get copies of the arguments, never the loop's own.

With ``parallel_tools`` the calls that may run together go out as one
``ToolBatch`` (:meth:`ToolCalls.run_batched`).

:class:`ToolCalls` is one of :class:`~agentloop.AgentLoop`'s delegates: it shares
the loop's :class:`~agentloop._run.Run`, asks through the loop's ``_ask`` and
pauses through :class:`~agentloop._pauses.Pauses`.
"""

from __future__ import annotations

from collections.abc import Generator, Mapping
from typing import Any, Final

from ._copy import copy_call, copy_json
from ._errors import HOOK_ERROR
from ._events import EventLog, ToolCallEvent, ToolErrorEvent, ToolResultEvent
from ._handoffs import PREFIX, Handoffs
from ._hooks import SKIP, HookAbort, PauseRequest
from ._json import surrogate_problem
from ._limits import Limits
from ._messages import Content, Part, ToolCall, ToolResultMessage
from ._pauses import Ask, Pauses
from ._protocol import Effect, ToolBatch, ToolRequest, ToolResult
from ._run import Run, _Misuse, failed, misuse, observe, run_hooks
from ._state import Input
from ._text import abort_reason, call_ids
from ._toolspec import ToolSpec
from ._tree import roll_up
from ._validation import (
    arguments_problems,
    content_structure_problem,
    json_problem,
    parts_problem,
)

__all__ = ["ToolCalls"]

_TRANSFER: Final = "transfer"  # _open_call's verdict on a transfer_to_* call (handoffs)


class ToolCalls:
    """Run a step's tool calls (see the module docstring)."""

    __slots__ = (
        "_ask",
        "_blob_step",
        "_blobs",
        "_hooks",
        "_limits",
        "_log",
        "_pauses",
        "_run",
        "_spec_by_name",
        "handoffs",
    )

    def __init__(
        self,
        run: Run,
        log: EventLog,
        hooks: dict[str, tuple[Any, ...]],
        specs: tuple[ToolSpec, ...],
        limits: Limits,
        ask: Ask,
        pauses: Pauses,
    ) -> None:
        self._run = run
        self._log = log
        self._hooks = hooks
        self._spec_by_name = {spec.name: spec for spec in specs}
        self._limits = limits
        self._ask = ask
        self._pauses = pauses
        self._blob_step = 0  # the step whose tool results _blobs counts media blocks of
        self._blobs = 0
        self.handoffs: Handoffs | None = None  # the run's agents (DESIGN §26)

    def use_tools(self, specs: tuple[ToolSpec, ...]) -> None:
        """From now on run these tools (a handoff moved the run to another agent)."""
        self._spec_by_name = {spec.name: spec for spec in specs}

    # ------------------------------------------------------------------ one at a time

    def run_call(self, call: ToolCall, step: int, truncated: bool) -> Generator[Effect, Any, None]:
        """Open, gate and run ``call``; append and record its result."""
        run, pauses = self._run, self._pauses
        if not run.steering and pauses.tool_budget_spent():
            yield from pauses.budget_pause("tool_calls")
        loop_error, gated = self._open_call(call, truncated)
        if gated:
            call, loop_error = yield from self._gate(call, step)
        self._emit_call(call, step)
        reply: ToolResult | None = None
        content: Content
        if loop_error is not None:
            content, is_error = loop_error, True
            if loop_error is _TRANSFER:
                content, is_error = self._transfer(call)
        else:
            run.set(Input.REQUEST_TOOL)
            effect = ToolRequest(copy_call(call), step)  # the tool may mutate its copy
            answer = yield from self._ask(effect)
            if type(answer) is not ToolResult:
                raise misuse(answer, effect, f"ToolResult(call_id={call.id!r}) or Cancel")
            reply = answer
            if reply.call_id != call.id:
                raise _Misuse(
                    f"send() got ToolResult for call {reply.call_id!r} while the ToolRequest "
                    f"for call {call.id!r} was pending",
                    reply,
                )
            run.set(Input.RECEIVE_RESULT)
            content, is_error = reply.content, reply.is_error
            if type(content) is tuple:
                content, is_error = self._media(content, is_error, step)
        message = self._result_message(call, step, content, is_error, reply)
        run.transcript.append(message)
        run.message_ids.add(message.id)
        self._emit_result(message, step, reply)
        if reply is not None and pauses.wall_spent():
            yield from pauses.budget_pause("wall_clock")

    def _open_call(self, call: ToolCall, truncated: bool) -> tuple[str | None, bool]:
        """Count the call and give the loop's own verdict on it, before any hook.

        Returns the loop-made error that replaces running it, if any (a ``Steer``
        came, a truncated response, an unknown tool), and whether
        ``before_tool_call`` or approval must still decide (:meth:`_gate`). Once a
        ``Steer`` came (even during a budget pause just before), the calls left are
        skipped, not run and not counted. ``tool.call`` follows (:meth:`_emit_call`).
        """
        run = self._run
        if run.steering:
            return "skipped: steered", False
        run.tool_calls += 1
        if truncated:
            return "truncated; re-issue the call", False
        spec = self._spec_by_name.get(call.name)
        if spec is None:
            if self.handoffs is not None and call.name.startswith(PREFIX):
                return _TRANSFER, False
            known = ", ".join(sorted(self._spec_by_name)) or "none"
            return f"unknown tool {call.name!r}; available tools: {known}", False
        return None, spec.requires_approval or "before_tool_call" in self._hooks

    def _gate(
        self, call: ToolCall, step: int
    ) -> Generator[Effect, Any, tuple[ToolCall, str | None]]:
        """Run ``before_tool_call``, then approval; return the call as it will run
        (hooks may edit its arguments) and the error that replaces running it, if any."""
        loop_error: str | None = None
        if "before_tool_call" in self._hooks:
            call, loop_error = yield from self._before_tool_call(call, step)
        if loop_error is None and self._spec_by_name[call.name].requires_approval:
            call, loop_error = yield from self._approval(call, "approval", None)
        return call, loop_error

    def _transfer(self, call: ToolCall) -> tuple[str, bool]:
        """A ``transfer_to_*`` call, run by the loop (:mod:`agentloop._handoffs`)."""
        assert self.handoffs is not None
        return self.handoffs.transfer(call)

    def _emit_call(self, call: ToolCall, step: int) -> None:
        log = self._log
        log.append(
            ToolCallEvent(sequence=log.next_sequence(), at=self._run.now, step=step, call=call)
        )

    def _media(self, content: tuple[Part, ...], is_error: bool, step: int) -> tuple[Content, bool]:
        """A tool result's parts as the model gets them: as they are, or, when a media
        block breaks a rule or the limits (``blob_bytes``; ``blobs_per_step``, over
        the step's results together), a tool error naming it, for the model to see."""
        if self._blob_step != step:
            self._blob_step, self._blobs = step, 0
        problem, count = parts_problem(content, "ToolResult.content", self._limits, self._blobs)
        if problem is None:
            self._blobs = count  # (a refused result's blocks never reach the model: not counted)
            return content, is_error
        return f"the tool's result was refused: {problem}", True

    def _result_message(
        self, call: ToolCall, step: int, content: Content, is_error: bool, reply: ToolResult | None
    ) -> ToolResultMessage:
        """Run ``after_tool_call`` on a result; return its message. Should the hook
        fail, the run's end records ``reply`` (every reply is recorded)."""
        if "after_tool_call" in self._hooks:
            run = self._run
            run.unrecorded = reply
            content, is_error = self._after_tool_call(call, step, content, is_error)
            run.unrecorded = None
        return ToolResultMessage(f"tool-result-{call.id}", call.id, call.name, content, is_error)

    def _emit_result(self, message: ToolResultMessage, step: int, reply: ToolResult | None) -> None:
        event_type = ToolErrorEvent if message.is_error else ToolResultEvent
        log = self._log
        if reply is not None and reply.child is not None:
            run = self._run
            run.usage, run.tool_calls = roll_up(run.usage, run.tool_calls, reply.child)
        log.append(
            event_type(
                sequence=log.next_sequence(),
                at=self._run.now,
                step=step,
                message=message,
                reply=reply,
            )
        )

    # ------------------------------------------------------------------ parallel tool batches

    def run_batched(self, calls: list[ToolCall], step: int) -> Generator[Effect, Any, None]:
        """``parallel_tools``: the step's calls in batches (DESIGN §18).

        Calls are opened in source order (budget, ``before_tool_call``, approval
        pauses, ``tool.call``) and gathered into a batch; the batch goes out when a
        sequential tool comes (which then runs alone), when the tool-call budget is
        spent (the pause follows the batch, where the sequential loop pauses), or
        after the last call. Results -- the caller's, in the order they arrive, and
        the loop's own errors -- are recorded at once and enter the transcript in
        source order when their batch is complete, or when the run stops (only the
        results received are kept; none is invented).
        """
        batch: list[tuple[int, ToolCall]] = []
        done: list[tuple[int, ToolResultMessage]] = []
        try:
            for index, call in enumerate(calls):
                spec = self._spec_by_name.get(call.name)
                if spec is not None and spec.sequential:
                    yield from self._run_batch(batch, done, step)
                    yield from self.run_call(call, step, False)
                    continue
                if not self._run.steering and self._pauses.tool_budget_spent():
                    yield from self._run_batch(batch, done, step)
                    yield from self._pauses.budget_pause("tool_calls")
                loop_error, gated = self._open_call(call, False)
                if gated:
                    call, loop_error = yield from self._gate(call, step)
                self._emit_call(call, step)
                if loop_error is None:
                    batch.append((index, call))
                else:
                    is_error = True
                    if loop_error is _TRANSFER:
                        loop_error, is_error = self._transfer(call)
                    message = self._result_message(call, step, loop_error, is_error, None)
                    done.append((index, message))
                    self._emit_result(message, step, None)
            yield from self._run_batch(batch, done, step)
        finally:
            self._append_results(done)

    def _run_batch(
        self,
        batch: list[tuple[int, ToolCall]],
        done: list[tuple[int, ToolResultMessage]],
        step: int,
    ) -> Generator[Effect, Any, None]:
        """Yield ``batch`` (if any) until each call has its result; then append ``done``."""
        if not batch:
            self._append_results(done)
            return
        run = self._run
        run.set(Input.REQUEST_BATCH)
        effect = ToolBatch(tuple(ToolRequest(copy_call(call), step) for _, call in batch), step)
        waiting = {call.id: (index, call) for index, call in batch}
        batch.clear()
        while waiting:
            reply = yield from self._ask(effect)
            if type(reply) is not ToolResult:
                raise misuse(reply, effect, "a ToolResult for one of its calls, or Cancel")
            entry = waiting.pop(reply.call_id, None)
            if entry is None:
                raise _Misuse(_stray_result(reply, effect, waiting), reply)
            run.set(Input.RECEIVE_BATCH_RESULT if waiting else Input.COMPLETE_BATCH)
            index, call = entry
            content, is_error = reply.content, reply.is_error
            if type(content) is tuple:
                content, is_error = self._media(content, is_error, step)
            message = self._result_message(call, step, content, is_error, reply)
            done.append((index, message))
            self._emit_result(message, step, reply)
        self._append_results(done)
        if self._pauses.wall_spent():
            yield from self._pauses.budget_pause("wall_clock")

    def _append_results(self, done: list[tuple[int, ToolResultMessage]]) -> None:
        done.sort(key=_first)
        run = self._run
        for _, message in done:
            run.transcript.append(message)
            run.message_ids.add(message.id)
        done.clear()

    # ------------------------------------------------------------------ hooks and approval

    def _before_tool_call(
        self, call: ToolCall, step: int
    ) -> Generator[Effect, Any, tuple[ToolCall, str | None]]:
        arguments = copy_json(call.arguments)
        payload: dict[str, Any] = {
            "step": step,
            "tool_call_id": call.id,
            "tool_name": call.name,
            "arguments": arguments,
        }
        try:
            outcome = run_hooks(self._hooks, "before_tool_call", payload)
        except HookAbort as exc:
            return call, f"hook_abort:{abort_reason(exc)}"
        if outcome is SKIP:
            return call, "skipped"
        edited = payload["arguments"]
        if edited is not arguments or edited != call.arguments:
            structural, semantic = arguments_problems(edited, self._limits)
            if structural or semantic:
                raise failed(
                    HOOK_ERROR,
                    f"before_tool_call hook set invalid arguments for call {call.id!r}: "
                    f"{structural or semantic}",
                )
            call = ToolCall(call.id, call.name, copy_json(edited))
        if type(outcome) is PauseRequest:
            if type(outcome.reason) is not str:
                raise failed(HOOK_ERROR, "before_tool_call PauseRequest.reason is not a str")
            problem = surrogate_problem(outcome.reason, "before_tool_call PauseRequest.reason")
            if problem is not None:
                raise failed(HOOK_ERROR, problem)
            problem = json_problem(outcome.payload, "PauseRequest.payload")
            if problem is not None:
                raise failed(HOOK_ERROR, f"before_tool_call {problem}")
            return (yield from self._approval(call, outcome.reason, outcome.payload))
        return call, None

    def _approval(
        self, call: ToolCall, reason: str, extra: Any
    ) -> Generator[Effect, Any, tuple[ToolCall, str | None]]:
        """Pause before ``call`` and act on the decision in ``Resume.payload``."""
        payload: dict[str, Any] = {}
        if isinstance(extra, dict):
            payload.update(extra)
        elif extra is not None:
            payload["detail"] = extra
        payload["call"] = {
            "id": call.id,
            "name": call.name,
            "arguments": copy_json(call.arguments),
        }
        resume = yield from self._pauses.pause(reason, payload, decision=True)
        decision = resume.payload
        if not decision["approved"]:
            message = decision.get("message")
            return call, message if type(message) is str and message else "denied"
        if "arguments" in decision:
            structural, semantic = arguments_problems(decision["arguments"], self._limits)
            if structural or semantic:
                return call, f"invalid edited arguments: {structural or semantic}"
            call = ToolCall(call.id, call.name, copy_json(decision["arguments"]))
        return call, None

    def _after_tool_call(
        self, call: ToolCall, step: int, content: Content, is_error: bool
    ) -> tuple[Content, bool]:
        payload: dict[str, Any] = {
            "step": step,
            "tool_call_id": call.id,
            "tool_name": call.name,
            "arguments": copy_json(call.arguments),
            "content": content,
            "is_error": is_error,
        }
        observe(self._hooks, "after_tool_call", payload)
        edited, is_error = payload["content"], payload["is_error"]
        if type(edited) is list:
            edited = tuple(edited)
        if (type(edited) is not str and type(edited) is not tuple) or type(is_error) is not bool:
            raise failed(
                HOOK_ERROR,
                # (the words logs have held since before content had parts)
                "after_tool_call hook set 'content' to a non-str or 'is_error' to a non-bool",
            )
        where = "after_tool_call hook's 'content'"
        if type(edited) is str:
            problem = surrogate_problem(edited, where)
        elif edited is content:
            problem = None  # the parts the loop checked, handed back
        else:
            problem = content_structure_problem(edited, where)
            if problem is None:
                problem, _ = parts_problem(edited, where, self._limits)  # type: ignore[arg-type]
        if problem is not None:
            raise failed(HOOK_ERROR, problem)
        return edited, is_error


def _first(pair: tuple[int, Any]) -> int:
    return pair[0]


def _stray_result(reply: ToolResult, batch: ToolBatch, waiting: Mapping[str, Any]) -> str:
    """Why a ``ToolResult`` does not answer the pending batch."""
    awaiting = ", ".join(repr(call_id) for call_id in waiting)
    if any(request.call.id == reply.call_id for request in batch.requests):
        return (
            f"send() got a second ToolResult for call {reply.call_id!r} of the pending "
            f"ToolBatch; it still awaits calls {awaiting}"
        )
    return (
        f"send() got ToolResult for call {reply.call_id!r}, which is not in the pending "
        f"ToolBatch of calls {call_ids(batch)}; it still awaits calls {awaiting}"
    )
