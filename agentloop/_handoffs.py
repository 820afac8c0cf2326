"""Handoffs: the model transfers the conversation to another agent (DESIGN §26).

Theory of operation
-------------------
``agent_loop(..., handoffs=[Handoff(...), ...], agent_name="triage")`` makes the
run one of several *agents*: the starting one (``agent_name``, configured by the
loop's own ``system``/``tools``/``output``) and one per :class:`Handoff` (its own
system prompt, tools, model name and output type). Each agent is offered one
extra tool per *other* agent, ``transfer_to_<name>`` (no parameters; its
description is the target's). The loop runs such a call itself -- no
``ToolRequest`` reaches the caller -- and records it like any loop-made result:
``tool.call``, then ``tool.result`` (``Transferred to <name>.``; ``reply`` is
``None``).

The transfer takes effect at the end of the step, once every call of the step
has its result: an ``agent.handoff`` event (:class:`~agentloop.HandoffEvent`:
from, to, the call id, and, when the target has an ``input_filter``, the ids of
the transcript's messages the filter kept) is recorded just before ``step.end``,
and from the next request on the requests carry the new agent's system prompt,
tools (its own and its transfers), ``ModelRequest.model`` and output schema.

Rules, each the model's fault (a tool error the model sees and can correct; the
run goes on, bounded by ``max_steps``): a transfer to an agent that does not
exist (``transfer_to_<unknown>``), to the current agent, or a second transfer in
the same step. One transfer per step bounds the number of transfers by
``max_steps``; back and forth is allowed.

The input filter is the caller's pure function of the full transcript (a tuple of
messages, read-only). It returns the messages the next agent sees of the past: a
subsequence of the transcript, the very message objects, in order, with every
kept tool call's result and every kept result's call. Messages appended later
are seen as they come. What it kept is recorded, so a replay without the filter
follows the record, and a replay with it checks it again, byte for byte. A filter
that raises or returns anything else is the caller's fault: the run fails
``CALLER_PROTOCOL_ERROR`` naming the handoff.

``session.start`` records the starting agent's name (``agent``) and each handoff's
:class:`~agentloop.HandoffSpec` (what the model is offered; ``filtered`` says
whether a filter runs). Sessions without handoffs record neither and pay one
``is None`` check per step.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Final

from ._events import EventLog, HandoffEvent, HandoffSpec
from ._messages import AssistantMessage, Message, ToolCall, ToolResultMessage
from ._options import tool_specs
from ._output import OutputCheck, RecordedOutput, output_check
from ._toolspec import ToolSpec

__all__ = [
    "PREFIX",
    "Handoff",
    "HandoffSpec",
    "Handoffs",
    "check_handoffs",
    "handoff_tools",
    "recorded_handoffs",
]

#: The name of the tool that transfers to agent ``x`` is ``PREFIX + x``.
PREFIX: Final = "transfer_to_"
#: The default name of the starting agent.
DEFAULT_AGENT: Final = "main"
_MAX_NAME: Final = 64 - len(PREFIX)

InputFilter = Callable[[tuple[Message, ...]], Sequence[Message]]


@dataclasses.dataclass(frozen=True)
class Handoff:
    """An agent the model may transfer the conversation to (``agent_loop(handoffs=...)``).

    Attributes:
        name: the agent's name, 1-52 characters of ``A-Z a-z 0-9 _ -``; the model
            transfers with the tool ``transfer_to_<name>``.
        description: the transfer tool's description (when to transfer).
        system: the agent's system prompt.
        tools: its tools (``Tool`` or ``ToolSpec``, as ``agent_loop``'s ``tools``).
        model: a model name, carried in ``ModelRequest.model`` while this agent
            runs (``None``: the run's model decides).
        output: the type its final answer must decode to (as ``agent_loop``'s
            ``output``).
        input_filter: ``f(transcript) -> messages``: what the agent sees of the
            past when the conversation is transferred to it (see the module text).
    """

    name: str
    description: str = ""
    system: str | None = None
    tools: Sequence[Any] = ()
    model: str | None = None
    output: Any = None
    input_filter: InputFilter | None = None


class _Agent:
    """One agent's configuration, checked."""

    __slots__ = ("filter", "model", "name", "offered", "output", "spec", "specs", "system")

    def __init__(
        self,
        spec: HandoffSpec,
        specs: tuple[ToolSpec, ...],
        output: OutputCheck | None,
        input_filter: InputFilter | None,
    ) -> None:
        self.spec = spec
        self.name = spec.name
        self.system = spec.system
        self.model = spec.model
        self.specs = specs
        self.output = output
        self.filter = input_filter
        self.offered: tuple[ToolSpec, ...] = specs


class Handoffs:
    """The run's agents and which one is current (the engine's side of handoffs)."""

    __slots__ = ("_agents", "_names", "base", "current", "pending", "specs", "start", "tools")

    def __init__(self, agents: list[_Agent]) -> None:
        self._agents = {agent.name: agent for agent in agents}
        self.current = agents[0]
        self.specs = tuple(agent.spec for agent in agents[1:])  # session.start's record
        for agent in agents:
            transfers = tuple(
                ToolSpec(PREFIX + other.name, other.spec.description)
                for other in agents
                if other is not agent
            )
            agent.offered = agent.specs + transfers
        self._names = ", ".join(sorted(self._agents))
        tools: dict[str, ToolSpec] = {}
        for agent in agents:
            for spec in agent.specs:
                tools.setdefault(spec.name, spec)
        self.tools = tuple(tools.values())  # every tool the run may request
        self.pending: tuple[str, str] | None = None  # (target, call id) of this step
        self.base: tuple[Message, ...] | None = None  # what the filter kept
        self.start = 0  # ... and the transcript index from which messages follow it

    @property
    def start_name(self) -> str:
        return next(iter(self._agents))

    def transfer(self, call: ToolCall) -> tuple[str, bool]:
        """Run a ``transfer_to_*`` call: its result's content and whether it is an error."""
        target = call.name[len(PREFIX) :]
        current = self.current.name
        if target not in self._agents:
            return f"unknown agent {target!r}: the agents are {self._names}", True
        if target == current:
            return f"the conversation is already with {current!r}", True
        if self.pending is not None:
            return (
                f"this step already transfers to {self.pending[0]!r}: one transfer per step",
                True,
            )
        self.pending = (target, call.id)
        return f"Transferred to {target}.", False

    def switch(self, transcript: list[Message], log: EventLog, at: float | None, step: int) -> str:
        """End the step's transfer: run the target's filter, record ``agent.handoff``,
        make the target current. Returns why the filter failed, or ``""``."""
        assert self.pending is not None
        target_name, call_id = self.pending
        self.pending = None
        target = self._agents[target_name]
        kept: tuple[str, ...] | None = None
        problem = ""
        if target.filter is not None:
            past = tuple(transcript)
            try:
                chosen = target.filter(past)
            except Exception as exc:  # the caller's code: its fault, said where
                name = type(exc).__name__
                return f"handoff to {target_name!r}: input_filter raised {name}: {exc}"
            problem = _filter_problem(chosen, past)
            if problem:
                return f"handoff to {target_name!r}: input_filter {problem}"
            self.base = tuple(chosen)
            self.start = len(past)
            kept = tuple(message.id for message in self.base)
        else:
            self.base = None
        log.append(
            HandoffEvent(
                sequence=log.next_sequence(),
                at=at,
                step=step,
                from_agent=self.current.name,
                to_agent=target_name,
                call_id=call_id,
                kept=kept,
            )
        )
        self.current = target
        return ""

    def view(self, transcript: list[Message]) -> tuple[Message, ...] | None:
        """The current agent's view of the transcript (``None``: all of it)."""
        base = self.base
        if base is None:
            return None
        return base + tuple(transcript[self.start :])


def _filter_problem(chosen: object, past: tuple[Message, ...]) -> str:
    """Why ``chosen`` is not a valid filtered view of ``past``, or ``""``."""
    if not isinstance(chosen, (list, tuple)):
        return f"must return a list of the transcript's messages, got {type(chosen).__name__}"
    position = 0
    calls: set[str] = set()
    results: set[str] = set()
    for index, message in enumerate(chosen):
        while position < len(past) and past[position] is not message:
            position += 1
        if position == len(past):
            return (
                f"returned item {index} ({_describe(message)}), which is not one of the "
                "transcript's messages in order (keep the very objects, each once)"
            )
        position += 1
        if type(message) is AssistantMessage:
            calls.update(block.id for block in message.content if type(block) is ToolCall)
        elif type(message) is ToolResultMessage:
            results.add(message.tool_call_id)
    if calls != results:
        call_id = min(calls ^ results)
        which = "result" if call_id in calls else "call"
        return f"kept one side of tool call {call_id!r} without its {which}"
    return ""


def _describe(message: object) -> str:
    name = getattr(message, "id", None)
    return f"{type(message).__name__} {name!r}" if type(name) is str else type(message).__name__


def _name_problem(name: object) -> str | None:
    if type(name) is not str:
        return f"must be a str, got {type(name).__name__}"
    if (
        not name
        or len(name) > _MAX_NAME
        or not all(c.isascii() and (c.isalnum() or c in "_-") for c in name)
    ):
        return f"must be 1-{_MAX_NAME} characters of A-Z a-z 0-9 _ -, got {name!r}"
    return None


def check_handoffs(
    handoffs: object,
    agent_name: object,
    *,
    system: str | None,
    specs: tuple[ToolSpec, ...],
    output: OutputCheck | None,
    output_retries: int,
    context_tokens: int | None,
) -> Handoffs | None:
    """The checked ``handoffs``/``agent_name`` options of ``agent_loop``.

    Raises:
        TypeError, ValueError: naming the option (and the handoff) that is wrong.
    """
    if handoffs is None or (isinstance(handoffs, (list, tuple)) and not handoffs):
        if agent_name is not None:
            raise ValueError("agent_name names the starting agent of handoffs: give handoffs=")
        return None
    if not isinstance(handoffs, (list, tuple)):
        raise TypeError(f"handoffs must be a list of Handoff, got {type(handoffs).__name__}")
    start = DEFAULT_AGENT if agent_name is None else agent_name
    problem = _name_problem(start)
    if problem is not None:
        raise (TypeError if type(start) is not str else ValueError)(f"agent_name {problem}")
    assert type(start) is str
    agents = [_Agent(HandoffSpec(name=start, system=system), specs, output, None)]
    names = {start}
    for index, handoff in enumerate(handoffs):
        where = f"handoffs[{index}]"
        if type(handoff) is not Handoff:
            raise TypeError(f"{where} must be a Handoff, got {type(handoff).__name__}")
        problem = _name_problem(handoff.name)
        if problem is not None:
            raise (TypeError if type(handoff.name) is not str else ValueError)(
                f"{where}.name {problem}"
            )
        if handoff.name in names:
            raise ValueError(f"{where}: two agents are named {handoff.name!r}")
        names.add(handoff.name)
        where = f"handoff {handoff.name!r}"
        for field in ("description", "system", "model"):
            value = getattr(handoff, field)
            if value is not None and type(value) is not str:
                raise TypeError(f"{where}: {field} must be a str, got {type(value).__name__}")
        if handoff.input_filter is not None and not callable(handoff.input_filter):
            raise TypeError(f"{where}: input_filter must be callable or None")
        if handoff.input_filter is not None and context_tokens is not None:
            raise ValueError(
                f"{where}: an input_filter together with Limits.context_tokens is not "
                "supported yet (the window's view of the transcript and the filter's "
                "would have to be one)"
            )
        try:
            tools = tool_specs(list(handoff.tools) if handoff.tools else [])
            checked = output_check(handoff.output, output_retries)
        except (TypeError, ValueError) as exc:
            raise type(exc)(f"{where}: {exc}") from None
        spec = HandoffSpec(
            name=handoff.name,
            description=handoff.description or "",
            system=handoff.system,
            tools=tools,
            model=handoff.model,
            output=None if checked is None else checked.spec,
            filtered=handoff.input_filter is not None,
        )
        agents.append(_Agent(spec, tools, checked, handoff.input_filter))
    seen: dict[str, ToolSpec] = {}
    for agent in agents:
        for tool in agent.specs:
            if tool.name.startswith(PREFIX):
                raise ValueError(
                    f"agent {agent.name!r}: tool {tool.name!r} starts with {PREFIX!r}, "
                    "the prefix of the transfer tools"
                )
            other = seen.setdefault(tool.name, tool)
            if other.parameters != tool.parameters:
                raise ValueError(
                    f"agent {agent.name!r}: tool {tool.name!r} takes other parameters than "
                    "another agent's tool of that name (the driver runs one tool per name)"
                )
    return Handoffs(agents)


def handoff_tools(handoffs: Sequence[Handoff], given: Iterable[Any]) -> list[Any]:
    """The handoffs' tools (``Tool`` or ``ToolSpec`` entries) not among ``given``'s
    names: what a ``run``-like driver adds to its registry (checked already)."""
    names = {entry.name for entry in given}
    extra: list[Any] = []
    for handoff in handoffs:
        for entry in handoff.tools:
            if entry.name not in names:
                names.add(entry.name)
                extra.append(entry)
    return extra


# --------------------------------------------------------------------------- replay


class _RecordedFilter:
    """A handoff's filter as a log records it: the ids each transfer to it kept."""

    def __init__(self, name: str, kept: list[tuple[str, ...]]) -> None:
        self._name = name
        self._kept = kept
        self._next = 0

    def __call__(self, transcript: tuple[Message, ...]) -> list[Message]:
        if self._next >= len(self._kept):
            raise ValueError(
                f"the log records no transfer to {self._name!r} this far: pass "
                "handoffs= (with its input_filter) to go on past the log"
            )
        ids = set(self._kept[self._next])
        self._next += 1
        return [message for message in transcript if message.id in ids]


class _SharedVerdicts(OutputCheck):
    """An agent's output spec over the run's recorded verdicts (shared by the agents:
    the log records the final answers' verdicts in order, whichever agent gave them)."""

    def __init__(self, spec: Any, verdicts: RecordedOutput) -> None:
        super().__init__(spec)
        self._verdicts = verdicts

    def check(self, text: str) -> tuple[Any, Any, str | None]:
        return self._verdicts.check(text)

    def retry_text(self, error: str) -> str:
        return error

    def failure_text(self, error: str) -> str:
        return error


def recorded_handoffs(
    specs: Sequence[HandoffSpec],
    events: Sequence[Any],
    verdicts: RecordedOutput | None,
) -> list[Handoff]:
    """The handoffs a log's ``session.start`` records, with the filters' recorded
    outcomes and (``verdicts``) the recorded output verdicts: what a replay without
    ``handoffs=`` follows."""
    kept: dict[str, list[tuple[str, ...]]] = {}
    for event in events:
        if type(event) is HandoffEvent and event.kept is not None:
            kept.setdefault(event.to_agent, []).append(event.kept)
    return [
        Handoff(
            spec.name,
            spec.description,
            system=spec.system,
            tools=spec.tools,
            model=spec.model,
            output=(
                None
                if spec.output is None
                else _SharedVerdicts(spec.output, verdicts)
                if verdicts is not None
                else None
            ),
            input_filter=_RecordedFilter(spec.name, kept.get(spec.name, []))
            if spec.filtered
            else None,
        )
        for spec in specs
    ]
