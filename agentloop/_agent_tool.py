"""Agents that call agents: :func:`agent_tool` (DESIGN §26).

Theory of operation
-------------------
An agent tool is a :class:`~agentloop.Tool` whose execution runs a *child* agent
loop -- its own model, tools, system prompt, limits and output type -- on the
task the parent's model gave it, and answers the call with the child's final
answer. Nothing in the engine runs it: the parent's driver executes it like any
tool, lending it a :class:`~agentloop._caller.Caller` (the parent's session id,
depth, cancel token, ``on_pause`` and clock). From there:

- The child is its own session, with its own :class:`~agentloop.EventLog` (kept in
  :attr:`AgentTool.logs` by session id). Its id is ``"<parent session>/<call id>"``
  (a root session is named by :func:`~agentloop.idempotency_session`, as
  ``replay.run_durable`` names it, else ``"root"``; when it is named, each child's
  tools get idempotency keys of the child's own session), and its
  ``session.start`` records a :class:`~agentloop.ParentLink` (the parent's session,
  the call, the depth), so ``replay.replay(child_events)`` rebuilds the child
  alone, in its place in the tree.
- The parent's ``ToolResult`` holds the child's answer as its content (the final
  text; with ``output=``, the structured output as JSON) and a
  :class:`~agentloop.ChildRun` (the child's session id, status, the tokens and tool
  calls of the whole subtree). The parent's loop adds those to its own usage and
  tool-call count when it records the result, so ``RunResult.usage`` and the
  parent's budget count the children. A child that does not complete answers with
  an error result (``is_error``) saying how it ended.
- Replay: the child's answer is the parent's *recorded reply*, so
  ``replay.replay(parent_events)`` needs no child model, and regenerates the same
  usage; the child's log replays by itself.
- Cancellation: the child shares the parent's ``CancelToken``; cancelling the
  parent cancels the child, whose (cancelled) outcome is recorded in the parent
  before the parent stops.
- Pauses: the child's ``on_pause`` relays each pause to the parent's ``on_pause``
  with the child's session id prepended to ``Pause.path``; the parent's answer
  answers the child. Without a parent ``on_pause`` a pause in the child cancels
  the child (as it would cancel a root run), and the parent reads an error result.
- Depth: a call that would start a child deeper than the parent's
  ``Limits.agent_depth`` (default 4) starts nothing and answers an error result
  naming the bound -- a recursive agent stops there.

Under :func:`agentloop.run` a child runs with :func:`agentloop.run` (a sync model);
under :func:`agentloop.arun` with :func:`agentloop.arun` (an async model; its
tools may run in parallel with ``parallel_tools=True``). Under
``replay.run_durable`` the caller carries a *host* (``agentloop/_caller.py``) that
runs each child as a stored session of its own, durably (``replay/_durable.py``).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import Any

import msgspec

from ._budget import Budget
from ._caller import ROOT_SESSION, Caller, child_watchers, current
from ._engine import AgentLoop, agent_loop
from ._events import (
    Event,
    EventLog,
    RunFinishedEvent,
    ToolCallEvent,
    ToolErrorEvent,
    ToolResultEvent,
)
from ._hooks import HookRegistry
from ._idempotency import idempotency_session
from ._limits import DEFAULT_LIMITS, Limits
from ._messages import ToolCall, UserMessage
from ._protocol import ChildRun, Pause, RunResult, Usage
from ._tools import Tool, ToolRegistry
from ._toolspec import ToolSpec
from ._tree import ParentLink, child_session_id

__all__ = ["AgentTool", "agent_tool"]

#: The id of the child's one initial message (the task).
TASK_MESSAGE_ID = "task"

_NO_USAGE = Usage()


class AgentTool(Tool):
    """A tool that runs a child agent loop per call (make one with :func:`agent_tool`).

    Attributes:
        model: the child's model.
        tools: the child's tools (a :class:`ToolRegistry`).
        options: the child's ``agent_loop`` options (``system``, ``limits``, ...).
        logs: each child's event log, by child session id, in the order they ran
            (in memory; under ``replay.run_durable`` each child is a stored session
            instead: ``store.children(parent id)``).
    """

    __slots__ = ("logs", "model", "options", "tools")

    #: Drivers lend a :class:`~agentloop._caller.Caller` to tools that say so.
    runs_agent = True

    def __init__(
        self,
        name: str,
        description: str,
        model: Any,
        tools: ToolRegistry,
        options: dict[str, Any],
        *,
        requires_approval: bool = False,
        sequential: bool = False,
    ) -> None:
        super().__init__(
            self._direct,
            name=name,
            description=description,
            requires_approval=requires_approval,
            sequential=sequential,
        )
        self.model = model
        self.tools = tools
        self.options = options
        self.logs: dict[str, EventLog] = {}

    def __repr__(self) -> str:
        return f"<AgentTool {self.name!r}>"

    def _direct(self, task: str) -> str:
        """Calling the tool (``searcher("find cats")``) runs a child for ``task`` outside
        any driver, as a root session's child of call ``direct``, and returns its
        answer (or the error result's text)."""
        return self.execute(ToolCall("direct", self.name, {"task": task}))[0]

    @property
    def is_async(self) -> bool:
        """``False``: the sync drivers run it (with :func:`agentloop.run`), and the
        async ones (with :func:`agentloop.arun`, see :meth:`aexecute`)."""
        return False

    def execute(self, call: ToolCall) -> tuple[str, bool]:
        """Run the child for ``call`` with :func:`agentloop.run` (or the caller's
        host: ``run_durable``'s); ``(answer, is_error)``."""
        from ._driver import drive  # the drivers import the tools: on first use

        placed = self._place(call)
        if isinstance(placed, str):
            return placed, True
        caller, link = placed
        on_pause = caller.on_pause
        session = child_session_id(link)
        relay = None if on_pause is None else _relay(on_pause, session)
        host = caller.host
        watchers = caller.child_watchers(link, self)
        if host is not None:
            result, events = host.run_child(
                self,
                link,
                self._task(call),
                relay,
                caller.signal,
                caller.clock,
                on_event=_together(watchers),
            )
            return self._answer(caller, call, link, result, events)
        loop = self._loop(caller, link, call, watchers)
        with _keys(caller, session):
            result = drive(
                loop,
                model=self.model,
                tools=self.tools,
                clock=caller.clock,
                signal=caller.signal,
                on_pause=relay,
            )
        return self._answer(caller, call, link, result, loop.log)

    async def aexecute(self, call: ToolCall) -> tuple[str, bool]:
        """Run the child for ``call`` with :func:`agentloop.arun` (or the caller's
        host: ``arun_durable``'s); ``(answer, is_error)``."""
        from ._adriver import adrive  # the drivers import the tools: on first use

        placed = self._place(call)
        if isinstance(placed, str):
            return placed, True
        caller, link = placed
        on_pause = caller.on_pause
        session = child_session_id(link)
        relay = None if on_pause is None else _arelay(on_pause, session)
        host = caller.host
        watchers = caller.child_watchers(link, self)
        if host is not None:
            result, events = await host.arun_child(
                self,
                link,
                self._task(call),
                relay,
                caller.signal,
                caller.clock,
                on_event=_together(watchers),
            )
            return self._answer(caller, call, link, result, events)
        loop = self._loop(caller, link, call, watchers)
        with _keys(caller, session):
            result = await adrive(
                loop,
                model=self.model,
                tools=self.tools,
                clock=caller.clock,
                signal=caller.signal,
                on_pause=relay,
            )
        return self._answer(caller, call, link, result, loop.log)

    def _place(self, call: ToolCall) -> str | tuple[Caller, ParentLink]:
        """The child's place in the tree, or the error that answers the call instead."""
        prepared = self._prepare(call)
        if isinstance(prepared, str):
            return prepared
        caller = current()
        if caller is None:  # run outside a driver (a test calling execute): a root's child
            import time

            caller = Caller(
                ROOT_SESSION, 0, DEFAULT_LIMITS.agent_depth, None, None, time.time, False
            )
        depth = caller.depth + 1
        if depth > caller.bound:
            return (
                f"agent {self.name!r} not started: it would run {depth} agents deep, "
                f"past Limits.agent_depth ({caller.bound}) of session {caller.session!r}"
            )
        return caller, ParentLink(session=caller.session, call_id=call.id, depth=depth)

    @staticmethod
    def _task(call: ToolCall) -> list[Any]:
        """The child's initial transcript: the task, as one user message."""
        return [UserMessage(TASK_MESSAGE_ID, call.arguments["task"])]

    def _loop(
        self,
        caller: Caller,
        link: ParentLink,
        call: ToolCall,
        watchers: Sequence[Callable[[Event], object]],
    ) -> AgentLoop:
        """The child's loop, run in memory (its log kept in :attr:`logs`, watched by
        ``watchers``: :meth:`Caller.child_watchers`)."""
        log = EventLog()
        for watcher in watchers:
            log.subscribe(watcher)
        self.logs[child_session_id(link)] = log
        return agent_loop(
            self._task(call),
            tools=self.tools,
            log=log,
            started_at=float(caller.clock()),
            parent=link,
            **self.options,
        )

    def _answer(
        self,
        caller: Caller,
        call: ToolCall,
        link: ParentLink,
        result: RunResult,
        log: Sequence[Any] | EventLog,
    ) -> tuple[str, bool]:
        """The parent's result for a finished child (``log``: its events); leaves its
        :class:`ChildRun` with ``caller`` for the driver."""
        session = child_session_id(link)
        caller.children[call.id] = ChildRun(
            session=session,
            status=result.status,
            usage=None if result.usage == _NO_USAGE else result.usage,
            tool_calls=subtree_tool_calls(log),
        )
        if result.status == "completed":
            if "output" in self.options:
                finished = log[-1]
                assert type(finished) is RunFinishedEvent
                return msgspec.json.encode(finished.output).decode(), False
            return result.final_text or "", False
        if result.error is not None:
            why = f"{result.error.code}: {result.error.message}"
        else:
            why = result.reason or result.status
        return f"agent {self.name!r} (session {session!r}) ended {result.status}: {why}", True


def _together(
    watchers: Sequence[Callable[[Event], object]],
) -> Callable[[Event], object] | None:
    """One ``on_event`` for a host's child calling each of ``watchers`` (``None``
    for none); it follows the child's own children as they do."""
    if not watchers:
        return None
    if len(watchers) == 1:
        return watchers[0]
    return _Watchers(watchers)


class _Watchers:
    """Several watchers of one child, as one (:func:`_together`)."""

    __slots__ = ("watchers",)

    def __init__(self, watchers: Sequence[Callable[[Event], object]]) -> None:
        self.watchers = watchers

    def __call__(self, event: Event) -> None:
        for watcher in self.watchers:
            watcher(event)

    def child_watcher(self, link: ParentLink, tool: Any) -> Callable[[Event], object] | None:
        return _together(child_watchers(self.watchers, link, tool))


def _keys(caller: Caller, session: str) -> AbstractContextManager[None]:
    """The child's tools' idempotency keys: its own session's, when its parent's
    session is named (else none, as for the parent)."""
    return idempotency_session(session) if caller.named else nullcontext()


def subtree_tool_calls(log: Iterable[Any]) -> int:
    """The tool calls a session's log records, its children's included."""
    count = 0
    for event in log:
        kind = type(event)
        if kind is ToolCallEvent:
            count += 1
        elif kind is ToolResultEvent or kind is ToolErrorEvent:
            reply = event.reply
            if reply is not None and reply.child is not None:
                count += reply.child.tool_calls
    return count


def _relay(on_pause: Callable[[Pause], Any], session: str) -> Callable[[Pause], Any]:
    """The child's ``on_pause``: the parent's, told which child paused."""

    def relay(pause: Pause) -> Any:
        return on_pause(msgspec.structs.replace(pause, path=(session, *pause.path)))

    return relay


def _arelay(on_pause: Callable[[Pause], Any], session: str) -> Callable[[Pause], Any]:
    """:func:`_relay` for ``arun``: the parent's ``on_pause`` may be ``async def``."""

    async def relay(pause: Pause) -> Any:
        answer = on_pause(msgspec.structs.replace(pause, path=(session, *pause.path)))
        if inspect.isawaitable(answer):
            answer = await answer
        return answer

    return relay


def agent_tool(
    name: str,
    description: str,
    *,
    model: Any,
    tools: ToolRegistry | Iterable[Tool | ToolSpec],
    system: str | None = None,
    limits: Limits | None = None,
    output: Any = None,
    max_steps: int = 8,
    budget: Budget | None = None,
    hooks: HookRegistry | None = None,
    parallel_tools: bool = False,
    output_retries: int = 2,
    requires_approval: bool = False,
    sequential: bool = False,
) -> AgentTool:
    """A tool whose execution runs a child agent loop (DESIGN §26).

    The model calls it with ``{"task": "..."}``; the child starts from one user
    message holding the task (id ``"task"``) and runs to its end; its final answer
    (the text, or with ``output=`` the structured output as JSON) answers the call.

    Args:
        name, description: what the parent's model is shown (see :class:`ToolSpec`).
        model: the child's model (a :class:`Model` under ``run``, an
            :class:`AsyncModel` under ``arun``).
        tools: the child's tools (agent tools too: children may have children, down
            to ``Limits.agent_depth``).
        system, limits, output, max_steps, budget, hooks, parallel_tools,
            output_retries: the child's :func:`agent_loop` options.
        requires_approval: the parent pauses (reason ``approval``) before each call.
        sequential: never run in a parallel tool batch of the parent.

    Returns:
        An :class:`AgentTool`; put it in the parent's ``tools``.

    Raises:
        TypeError, ValueError: an option is invalid (checked now, as
            :func:`agent_loop` checks it), or ``model`` has neither ``stream`` nor
            ``astream``.
    """
    if not callable(getattr(model, "stream", None)) and not callable(
        getattr(model, "astream", None)
    ):
        raise TypeError(
            f"agent_tool {name!r}: model must have stream() or astream(), got {model!r}"
        )
    registry = ToolRegistry(tools)
    options: dict[str, Any] = {
        "system": system,
        "limits": limits,
        "max_steps": max_steps,
        "budget": budget,
        "hooks": hooks,
        "parallel_tools": parallel_tools,
        "output_retries": output_retries,
    }
    if output is not None:
        options["output"] = output
    # Checked now, as agent_loop checks them (the loop made here never runs).
    agent_loop([UserMessage(TASK_MESSAGE_ID, "")], tools=registry, **options)
    return AgentTool(
        name,
        description,
        model,
        registry,
        options,
        requires_approval=requires_approval,
        sequential=sequential,
    )
