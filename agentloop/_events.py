"""Events: the run's totally ordered, append-only record (DESIGN §7).

Every event is a small frozen Struct with ``type`` (its dotted name, also the JSON
tag), ``sequence`` (one counter for the whole run: 0, 1, 2, ... with no gaps),
``at`` (the latest caller time the loop has seen, or ``None``) and ``step``.

Events that record a reply (``model.chunk``, ``plan.draft``, ``tool.result``,
``tool.error``, ``session.resume``, ``run.finished``) hold it verbatim, so the
log alone can be fed back through the loop (see the ``replay`` package).

Evolution rule for the log format: new fields get defaults, existing fields
never change type, defaults never change, tags are never reused. Every Struct an
event can hold (messages, blocks, replies, ``Usage``, ``Budget``, ``ToolSpec``, ...)
is declared with ``omit_defaults=True``: a field that holds its default is left out
of the encoding, so adding a field with a default changes no line of an existing
log (the policy is in ``replay/_log.py``). Declare any new such Struct the same way
(a test checks). msgspec knows a default by identity, so a default must be a value
that is always that very object (``None``, a bool, a small int, ``""``, ``()``) or
be made so in ``__post_init__``, as ``RunFinishedEvent.usage`` and
``BudgetUsage.wall_seconds`` are: equal events must encode the same. Don't
subclass these classes.

Events are not tracked by the garbage collector (msgspec's ``gc=False``): a log
of half a million events is then not walked by every collection, and reading one
is faster. That is safe because an event cannot be part of a reference cycle: the
loop records its own copies of plain JSON data (which has no cycles), and decoded
events hold only what JSON can hold. (Don't build a cycle into an event by hand,
say by putting the event into a dict it holds: it would never be freed.)
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any, ClassVar, Final, TypeAlias, overload

import msgspec

from ._budget import Budget, BudgetUsage
from ._limits import Limits
from ._messages import AssistantMessage, Message, ToolCall, ToolResultMessage, UserMessage
from ._output import OutputSpec
from ._protocol import (
    FollowUp,
    ModelChunk,
    ModelFailure,
    ModelResponse,
    Reply,
    Resume,
    RunError,
    Steer,
    ToolResult,
    Usage,
)
from ._toolspec import ToolSpec
from ._tree import ParentLink

__all__ = [
    "EVENT_TYPES",
    "BudgetWarnEvent",
    "ContextCompactedEvent",
    "Event",
    "EventLog",
    "HandoffEvent",
    "HandoffSpec",
    "MessageAcceptedEvent",
    "MessageQueuedEvent",
    "ModelChunkEvent",
    "PlanCommitEvent",
    "PlanDraftEvent",
    "RunFinishedEvent",
    "SessionCompleteEvent",
    "SessionPauseEvent",
    "SessionResumeEvent",
    "SessionStartEvent",
    "StepEndEvent",
    "StepStartEvent",
    "ToolCallEvent",
    "ToolErrorEvent",
    "ToolResultEvent",
]


_NO_USAGE: Final = Usage()


class _Event(
    msgspec.Struct, frozen=True, omit_defaults=True, kw_only=True, tag_field="type", gc=False
):
    type: ClassVar[str]
    sequence: int
    at: float | None = None
    step: int = 0


class HandoffSpec(msgspec.Struct, frozen=True, omit_defaults=True, kw_only=True):
    """What ``session.start`` records of one :class:`~agentloop.Handoff` (DESIGN §26).

    Attributes:
        name: the agent's name (the model transfers with ``transfer_to_<name>``).
        description: the transfer tool's description.
        system: the agent's system prompt.
        tools: its tools' specs.
        model: the model name its requests carry (``ModelRequest.model``).
        output: its structured output (``None``: plain text).
        filtered: whether an ``input_filter`` chooses what it sees of the past.
    """

    name: str
    description: str = ""
    system: str | None = None
    tools: tuple[ToolSpec, ...] = ()
    model: str | None = None
    output: OutputSpec | None = None
    filtered: bool = False


class SessionStartEvent(_Event, frozen=True, kw_only=True, tag="session.start"):
    """First event of a run whose transcript validated; holds the run's configuration.

    ``rules`` is the engine's rules revision the run follows (``0``, left out, for
    logs written before revisions; see :data:`agentloop.RULES_REVISION`).
    ``parallel_tools`` is the option of that name (left out when ``False``).
    ``limits`` are the run's ceilings when they are not the defaults (``None``, left
    out: the ``MAX_*`` defaults, as for every log written before there were limits).
    ``output`` describes the structured output the run checks (``output=``).
    ``parent`` places a child session in its tree (an agent tool's run, DESIGN §26;
    ``None``, left out, for a root session).
    ``compaction`` is the run's compaction policy's ``spec()`` (plain JSON with a
    ``"policy"`` name; left out without one, DESIGN §27).
    ``agent`` names the starting agent and ``handoffs`` the agents the model may
    transfer to (``agent_loop(handoffs=...)``, DESIGN §26; left out without).
    """

    type: ClassVar[str] = "session.start"
    system: str | None = None
    tools: tuple[ToolSpec, ...] = ()
    max_steps: int
    budget: Budget | None = None
    request_sequence_start: int = 0
    rules: int = 0
    parallel_tools: bool = False
    limits: Limits | None = None
    output: OutputSpec | None = None
    parent: ParentLink | None = None
    compaction: dict[str, Any] | None = None
    agent: str | None = None
    handoffs: tuple[HandoffSpec, ...] = ()


class MessageAcceptedEvent(_Event, frozen=True, kw_only=True, tag="message.accepted"):
    """One message of the initial transcript, accepted into the run."""

    type: ClassVar[str] = "message.accepted"
    message: Message


class MessageQueuedEvent(_Event, frozen=True, kw_only=True, tag="message.queued"):
    """A ``Steer`` or ``FollowUp`` was received (recorded input); ``mode`` is
    ``steer`` or ``follow_up``. Its message is appended later, with a
    ``message.accepted``, when it is delivered (DESIGN §19)."""

    type: ClassVar[str] = "message.queued"
    mode: str
    reply: Steer | FollowUp


class StepStartEvent(_Event, frozen=True, kw_only=True, tag="step.start"):
    """A step begins; ``request_id`` is the model request it will make."""

    type: ClassVar[str] = "step.start"
    request_id: str


class ModelChunkEvent(_Event, frozen=True, kw_only=True, tag="model.chunk"):
    """A valid streamed chunk (recorded input)."""

    type: ClassVar[str] = "model.chunk"
    chunk: ModelChunk


class PlanDraftEvent(_Event, frozen=True, kw_only=True, tag="plan.draft"):
    """The model's final response or failure, as received (recorded input)."""

    type: ClassVar[str] = "plan.draft"
    reply: ModelResponse | ModelFailure


class PlanCommitEvent(_Event, frozen=True, kw_only=True, tag="plan.commit"):
    """The assistant message appended to the transcript."""

    type: ClassVar[str] = "plan.commit"
    message: AssistantMessage


class ToolCallEvent(_Event, frozen=True, kw_only=True, tag="tool.call"):
    """A tool call starts (its final arguments, after hooks and approval)."""

    type: ClassVar[str] = "tool.call"
    call: ToolCall


class ToolResultEvent(_Event, frozen=True, kw_only=True, tag="tool.result"):
    """A successful tool result was appended.

    ``reply`` is the caller's :class:`ToolResult` as received (recorded input), or
    ``None`` when the loop made the result itself.
    """

    type: ClassVar[str] = "tool.result"
    message: ToolResultMessage
    reply: ToolResult | None = None


class ToolErrorEvent(_Event, frozen=True, kw_only=True, tag="tool.error"):
    """An error result was appended (from the tool, or made by the loop when
    ``reply`` is ``None``: unknown tool, hook abort/skip, denied, truncated call)."""

    type: ClassVar[str] = "tool.error"
    message: ToolResultMessage
    reply: ToolResult | None = None


class StepEndEvent(_Event, frozen=True, kw_only=True, tag="step.end"):
    """A step ended (its model request answered and every tool call it asked for done)."""

    type: ClassVar[str] = "step.end"


class BudgetWarnEvent(_Event, frozen=True, kw_only=True, tag="budget.warn"):
    """A budget limit was reached; a ``session.pause`` follows."""

    type: ClassVar[str] = "budget.warn"
    limit: str
    usage: BudgetUsage
    budget: Budget


class ContextCompactedEvent(_Event, frozen=True, kw_only=True, tag="context.compacted"):
    """The model's view of the transcript was compacted before a request (DESIGN §27).

    ``how`` is ``summarize`` (the messages before transcript index ``start`` are
    replaced, for the model, by ``summary``: a model call recorded just before,
    ``ModelRequest(purpose="compaction")``) or ``trim`` (every tool result before
    transcript index ``trimmed_before`` is shown shortened). ``tokens_before`` and
    ``tokens_after`` are the request's estimates. The transcript and the log keep
    every message whole.
    """

    type: ClassVar[str] = "context.compacted"
    how: str
    start: int = 0
    summary: UserMessage | None = None
    trimmed_before: int = 0
    tokens_before: int = 0
    tokens_after: int = 0


class HandoffEvent(_Event, frozen=True, kw_only=True, tag="agent.handoff"):
    """The conversation moved from agent ``from_agent`` to ``to_agent`` (DESIGN §26).

    Recorded at the end of the step whose tool call ``call_id`` (a
    ``transfer_to_<to_agent>`` call) asked for it, before ``step.end``; the next
    request is the new agent's. ``kept`` holds the ids of the transcript's messages
    the new agent's ``input_filter`` kept (``None``: no filter, it sees them all).
    """

    type: ClassVar[str] = "agent.handoff"
    from_agent: str
    to_agent: str
    call_id: str
    kept: tuple[str, ...] | None = None


class SessionPauseEvent(_Event, frozen=True, kw_only=True, tag="session.pause"):
    """The loop yields a ``Pause`` with this reason and payload."""

    type: ClassVar[str] = "session.pause"
    reason: str
    payload: Any = None


class SessionResumeEvent(_Event, frozen=True, kw_only=True, tag="session.resume"):
    """The loop received a ``Resume`` (recorded input)."""

    type: ClassVar[str] = "session.resume"
    reply: Resume


class SessionCompleteEvent(_Event, frozen=True, kw_only=True, tag="session.complete"):
    """The state machine reached DONE (any outcome).

    ``reply`` holds the reply that ended the run when one did and no earlier event
    recorded it: a ``Cancel``, an invalid chunk, or a misused reply (rules revision
    2 and later; before, ``run.finished`` held it).
    """

    type: ClassVar[str] = "session.complete"
    status: str
    reason: str = ""
    reply: Reply | None = None


class RunFinishedEvent(_Event, frozen=True, kw_only=True, tag="run.finished"):
    """Always the last event, exactly once: the ``RunResult`` without its messages.

    ``reply`` is ``None`` (rules revision 2 and later: ``session.complete`` records
    the reply that ended the run). Under rules 0 and 1 it held that reply.
    ``output`` is the decoded structured output, as JSON (runs with ``output=``).
    """

    type: ClassVar[str] = "run.finished"
    status: str
    final_text: str | None = None
    steps: int = 0
    max_steps: int = 0
    error: RunError | None = None
    usage: Usage = _NO_USAGE
    reason: str = ""
    reply: Reply | None = None
    output: Any = None

    def __post_init__(self) -> None:
        # The default object itself for a usage equal to it, however it was made or
        # decoded: omit_defaults knows a default by identity, and equal events must
        # encode the same (see the module docstring).
        if self.usage == _NO_USAGE and self.usage.__class__ is Usage:
            msgspec.structs.force_setattr(self, "usage", _NO_USAGE)


Event: TypeAlias = (
    SessionStartEvent
    | MessageAcceptedEvent
    | MessageQueuedEvent
    | StepStartEvent
    | ModelChunkEvent
    | PlanDraftEvent
    | PlanCommitEvent
    | ToolCallEvent
    | ToolResultEvent
    | ToolErrorEvent
    | StepEndEvent
    | BudgetWarnEvent
    | ContextCompactedEvent
    | HandoffEvent
    | SessionPauseEvent
    | SessionResumeEvent
    | SessionCompleteEvent
    | RunFinishedEvent
)

#: Every event type name, in the order the table in DESIGN §7 lists them.
EVENT_TYPES: tuple[str, ...] = tuple(cls.type for cls in Event.__args__)


class EventLog:
    """The append-only log of one run.

    The loop appends (:meth:`append`); anyone may read. Subscribers are called
    synchronously, in subscription order, for every event as it is appended; an
    exception from a subscriber propagates into the loop's caller (it is a bug in
    the subscriber).

    >>> log = EventLog()
    >>> len(log)
    0
    """

    __slots__ = ("_events", "_subscribers", "next_sequence")

    def __init__(self) -> None:
        self._events: list[Event] = []
        self._subscribers: list[Callable[[Event], object]] = []
        #: ``next_sequence()``: the sequence number the next event gets (the number
        #: of events so far, as ``len(log)``). The engine numbers every event with
        #: it: the list's own C-level ``__len__``, bound once, so numbering an
        #: event costs no Python-level call.
        self.next_sequence: Callable[[], int] = self._events.__len__

    def subscribe(self, fn: Callable[[Event], object]) -> Callable[[], None]:
        """Call ``fn(event)`` for each later event; returns a function that unsubscribes."""
        if not callable(fn):
            raise TypeError(f"subscriber must be callable, got {fn!r}")
        # Copy on write: a subscriber may (un)subscribe while the loop is calling the
        # subscribers, and that call keeps going over the list it started with.
        self._subscribers = [*self._subscribers, fn]

        def unsubscribe() -> None:
            if fn in self._subscribers:
                remaining = list(self._subscribers)
                remaining.remove(fn)
                self._subscribers = remaining

        return unsubscribe

    @property
    def subscribers(self) -> tuple[Callable[[Event], object], ...]:
        """The subscribers now, in order (an agent tool asks those that follow child
        sessions for the child's: DESIGN §26)."""
        return tuple(self._subscribers)

    def append(self, event: Event) -> None:
        """Record ``event``, then call the subscribers with it, in order.

        For the loop that records into this log (:func:`~agentloop.agent_loop`'s
        engine appends every event through this method, numbering each by the
        log's length); nothing else appends: a log is one run's record.
        """
        self._events.append(event)
        for fn in self._subscribers:  # replaced, never edited, by (un)subscribe
            fn(event)

    @property
    def events(self) -> Sequence[Event]:
        """A read-only view of every event so far."""
        return _ReadOnly(self._events)

    def since(self, sequence: int) -> list[Event]:
        """The events whose sequence is ``>= sequence`` (reading by offset)."""
        if type(sequence) is not int or sequence < 0:
            raise ValueError(f"sequence must be a non-negative int, got {sequence!r}")
        return self._events[sequence:]

    def __len__(self) -> int:
        return len(self._events)

    def __iter__(self) -> Iterator[Event]:
        return iter(self._events)

    @overload
    def __getitem__(self, index: int) -> Event: ...
    @overload
    def __getitem__(self, index: slice) -> list[Event]: ...
    def __getitem__(self, index: int | slice) -> Event | list[Event]:
        return self._events[index]

    def __repr__(self) -> str:
        return f"<EventLog {len(self._events)} events>"


class _ReadOnly(Sequence[Any]):
    __slots__ = ("_items",)

    def __init__(self, items: list[Any]) -> None:
        self._items = items

    @overload
    def __getitem__(self, index: int) -> Any: ...
    @overload
    def __getitem__(self, index: slice) -> list[Any]: ...
    def __getitem__(self, index: int | slice) -> Any:
        return self._items[index]

    def __len__(self) -> int:
        return len(self._items)
