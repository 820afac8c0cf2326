"""What a driver lends the agent tools it runs (DESIGN §26).

An agent tool (:func:`agentloop.agent_tool`) runs a child session inside one tool
call of its parent. The child needs a few things only the parent's *driver* has:
the parent's session id and depth (for the child's id and the depth bound), its
:class:`~agentloop.CancelToken` (cancelling the parent cancels the child), its
``on_pause`` (a pause in the child is a pause of the parent's call) and its clock.
A driver whose tools include an agent tool makes one :class:`Caller` and lends it
to each tool call it runs (:func:`lent`, a context variable: it follows the call
into a batch's worker thread or task); the agent tool reads it with
:func:`current` and leaves the finished child's :class:`~agentloop.ChildRun` in
``Caller.children`` for the driver to put in the call's ``ToolResult``.

A driver without agent tools makes no Caller, and its tool calls cost nothing more.

*Watchers that follow children*: a subscriber of the parent's log, or the
driver's ``on_event``, with a ``child_watcher(link, tool)`` method (an
:class:`agentloop.otel.SpanRecorder` has one) is asked, when a child starts, for
a watcher of the child's events (or ``None``); the child's log calls it
(:meth:`Caller.child_watchers`). That is how live OTel spans of a child nest under
the parent's ``execute_tool`` span.

A *host* (:func:`hosting`) runs the children somewhere other than in memory: under
``replay.run_durable`` each child is its own stored session, run durably (parked,
resumed, never re-run once finished). The driver captures the host in effect when
it starts, with the rest of its Caller.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, Final, Protocol

from ._idempotency import named_session
from ._limits import DEFAULT_LIMITS
from ._protocol import ChildRun
from ._tree import child_session_id

if TYPE_CHECKING:
    from ._engine import AgentLoop
    from ._events import Event, EventLog
    from ._protocol import RunResult
    from ._signals import CancelToken
    from ._tree import ParentLink

__all__ = ["ROOT_SESSION", "Caller", "ChildHost", "current", "hosting", "lent", "make_caller"]

#: The session id of a root session that has none of its own: an in-memory ``run``
#: outside :func:`~agentloop.idempotency_session` (``run_durable`` names it).
ROOT_SESSION: Final = "root"


class ChildHost(Protocol):
    """Runs an agent tool's child sessions (``replay.run_durable`` lends one: see
    :func:`hosting`). Each method runs the child ``link`` places, of agent tool
    ``tool``, from ``messages`` (the task), and returns how it ended with its whole
    log; or raises to stop the parent (``run_durable`` parks it when the child
    parks)."""

    def run_child(
        self,
        tool: Any,
        link: ParentLink,
        messages: list[Any],
        on_pause: Callable[[Any], Any] | None,
        signal: CancelToken | None,
        clock: Callable[[], float],
        on_event: Callable[[Event], object] | None = None,
    ) -> tuple[RunResult, list[Event]]: ...

    async def arun_child(
        self,
        tool: Any,
        link: ParentLink,
        messages: list[Any],
        on_pause: Callable[[Any], Any] | None,
        signal: CancelToken | None,
        clock: Callable[[], float],
        on_event: Callable[[Event], object] | None = None,
    ) -> tuple[RunResult, list[Event]]: ...


class Caller:
    """The parent's side of its agent tools' calls (one per driver).

    Attributes:
        session: the parent's session id.
        depth: the parent's depth (0: a root session).
        bound: the deepest a child may be (the parent's ``Limits.agent_depth``).
        signal, on_pause, clock: the parent driver's.
        asynchronous: whether the parent's driver is async (its ``on_pause`` may
            then return an awaitable).
        named: whether the parent's session is named for idempotency keys (then
            each child's is too, with its own id: a child's call ``c1`` never shares
            a key with its parent's call ``c1``).
        children: the finished children by call id, until the driver takes them.
        host: where the children run (a :class:`ChildHost`), or ``None``: in memory.
    """

    __slots__ = (
        "asynchronous",
        "bound",
        "children",
        "clock",
        "depth",
        "host",
        "log",
        "named",
        "on_event",
        "on_pause",
        "session",
        "signal",
    )

    def __init__(
        self,
        session: str,
        depth: int,
        bound: int,
        signal: CancelToken | None,
        on_pause: Callable[[Any], Any] | None,
        clock: Callable[[], float],
        asynchronous: bool,
        named: bool = False,
        host: ChildHost | None = None,
        log: EventLog | None = None,
        on_event: Callable[[Any], object] | None = None,
    ) -> None:
        self.session = session
        self.depth = depth
        self.bound = bound
        self.signal = signal
        self.on_pause = on_pause
        self.clock = clock
        self.asynchronous = asynchronous
        self.named = named
        self.host = host
        self.log = log
        self.on_event = on_event
        self.children: dict[str, ChildRun] = {}

    def child_watchers(self, link: ParentLink, tool: Any) -> list[Callable[[Event], object]]:
        """The watchers of the child ``link`` places (of agent tool ``tool``): each
        one that a watcher of the parent's events (a subscriber of its log, its
        driver's ``on_event``) with a ``child_watcher`` method gives for it."""
        parents = [*(() if self.log is None else self.log.subscribers), self.on_event]
        return child_watchers(parents, link, tool)

    def take(self, call_id: str) -> ChildRun | None:
        """The child that call ``call_id`` ran, if any (once)."""
        return self.children.pop(call_id, None)


_CALLER: Final[ContextVar[Caller | None]] = ContextVar("agentloop_caller", default=None)
_HOST: Final[ContextVar[ChildHost | None]] = ContextVar("agentloop_child_host", default=None)


@contextlib.contextmanager
def hosting(host: ChildHost | None) -> Iterator[None]:
    """Drivers started inside the block run their agent tools' children with ``host``."""
    token = _HOST.set(host)
    try:
        yield
    finally:
        _HOST.reset(token)


def child_watchers(
    parents: Iterable[object], link: ParentLink, tool: Any
) -> list[Callable[[Event], object]]:
    """The watchers of the child ``link`` places (of agent tool ``tool``) that
    ``parents`` (watchers of its parent's events) give: each one's, once, that has
    a ``child_watcher`` method and gives one."""
    found: list[Callable[[Event], object]] = []
    seen: set[int] = set()
    for parent in parents:
        follow = getattr(parent, "child_watcher", None)
        if follow is None or id(parent) in seen:
            continue
        seen.add(id(parent))
        watcher = follow(link, tool)
        if watcher is not None:
            found.append(watcher)
    return found


def make_caller(
    loop: AgentLoop | None,
    tools: Iterable[object],
    signal: CancelToken | None,
    on_pause: Callable[[Any], Any] | None,
    clock: Callable[[], float],
    asynchronous: bool,
    on_event: Callable[[Any], object] | None = None,
) -> Caller | None:
    """The :class:`Caller` a driver of ``loop`` lends its tool calls, or ``None``
    when none of ``tools`` runs a child session."""
    if not any(getattr(entry, "runs_agent", False) for entry in tools):
        return None
    link = None if loop is None else loop.parent
    limits = DEFAULT_LIMITS if loop is None else loop.limits
    if link is None:  # a root: named by run_durable, a Temporal worker or the caller
        session, depth = named_session() or ROOT_SESSION, 0
    else:
        session, depth = child_session_id(link), link.depth
    named = named_session() is not None
    return Caller(
        session,
        depth,
        limits.agent_depth,
        signal,
        on_pause,
        clock,
        asynchronous,
        named,
        _HOST.get(),
        None if loop is None else loop.log,
        on_event,
    )


@contextlib.contextmanager
def lent(caller: Caller) -> Iterator[None]:
    """Lend ``caller`` to the tool call run inside the block."""
    token = _CALLER.set(caller)
    try:
        yield
    finally:
        _CALLER.reset(token)


def current() -> Caller | None:
    """The :class:`Caller` lent to the tool call running now, if any."""
    return _CALLER.get()
