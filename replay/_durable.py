"""Durable sessions: :func:`run_durable` and :func:`arun_durable` drive a session
stored in a :class:`SQLiteStore`.

Theory of operation
-------------------
A session is its log. :func:`run_durable` starts a session (``agent_loop`` from the
messages) or continues a stored one (:func:`replay.resume` rebuilds the live loop
at the log's last pull point, replaying every recorded reply), then drives it with
:func:`agentloop.drive` -- :func:`arun_durable` with :func:`agentloop.adrive` --
through the driver's ``before_effect`` callback, which :class:`_Runner` answers:

1. **The write-ahead rule.** Events are buffered in the loop's own log and
   committed to the store in one transaction at each *side-effect boundary*, which
   is exactly when the driver calls ``before_effect``: before a model call (a new
   request; the chunks of one stream are one call), before each tool call (or
   batch), before a pause is answered by ``on_pause`` or parks; and once more when
   the run ends. So an effect's events (``step.start``, ``tool.call``, ...) are
   durable before the effect runs, and a reply's events (chunks, ``plan.draft``,
   ``tool.result``, ...) are durable before the next effect. A step with one tool
   call commits twice.
2. **Crashes are not cancels.** If the process dies, or an exception (Ctrl-C
   included) leaves the driver, nothing more is committed: the stored log still
   ends at the last boundary, and the next ``run_durable`` for the session resumes
   there. (The driver ends its in-memory loop with the ``Cancel`` that
   :func:`agentloop.run` records; that end is never committed.) The effect that was
   in flight runs again (at-least-once); a tool can recognise a repeat by its
   :func:`agentloop.idempotency_key` (``"<session id>:<call id>"``).
3. **Parking.** A ``Pause`` with no ``on_pause`` *parks* the session: its events
   are committed with status ``paused``, ``before_effect`` raises (the driver then
   leaves the loop as it is, nothing recorded), the lease is released and
   :func:`run_durable` returns :class:`Parked`; the process may exit.
4. **Stored replies.** :func:`answer` records a ``Resume`` or ``Cancel`` for a
   parked session, and queues a ``Steer`` or ``FollowUp`` for any unfinished one.
   At each boundary ``before_effect`` first looks in the store: queued messages
   (oldest first) are returned to the driver, which sends them to the loop in place
   of the effect (the loop records them and waits at the same effect; the next
   ``before_effect`` looks again); at a pause, the stored answer then. A reply's
   row is deleted in the transaction that commits its events, so a crash in
   between delivers it again and the stored log holds it exactly once.

Several workers (threads or processes) may serve one store. Each run takes the
session's *lease* first (owner id + expiry, renewed by a background thread while
it works and at every commit); a second worker gets :class:`SessionLeased`.
Should a worker stall past its lease and another take the session over, the
staller's next commit fails (its lease is gone, and the optimistic append would
refuse it anyway): two workers never both extend a log.

The async twin does the same work: the store's calls (reading and resuming the
session, each boundary's commit) run in a worker thread (the async drivers' reused
pool threads, ``asyncio.to_thread`` at a fraction of its cost) so
the event loop never waits for SQLite, and the lease is renewed by the same
background thread.
"""

from __future__ import annotations

import collections
import contextlib
import itertools
import os
import secrets
import socket
import sqlite3
import threading
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final, TypeVar

import msgspec
from typing_extensions import TypedDict, Unpack

from agentloop import (
    RULES_REVISION,
    AgentLoop,
    CallerProtocolError,
    Cancel,
    CancelToken,
    Effect,
    Event,
    FollowUp,
    HookRegistry,
    MessageAcceptedEvent,
    MessageQueuedEvent,
    Model,
    ParentLink,
    Pause,
    Resume,
    RunResult,
    SessionPauseEvent,
    SessionStartEvent,
    Steer,
    Tool,
    ToolRegistry,
    ToolSpec,
    adrive,
    agent_loop,
    drive,
    encode_event,
    idempotency_session,
)
from agentloop._spi import (
    SESSION_KEYS,
    AsyncDriveOptions,
    DriveOptions,
    OnEvent,
    SessionOptions,
    child_session_id,
    clean_text,
    handoff_tools,
    hosting,
    model_method,
    offload,
    output_check,
    split,
    tools_problem,
)

from ._diff import diff_events
from ._replay import replay, resume
from ._store import (
    _UNLEASED,
    SessionInfo,
    SessionNotFound,
    SQLiteStore,
    StoreError,
    _check_lease,
)

if TYPE_CHECKING:
    import asyncio

__all__ = ["Parked", "answer", "arun_durable", "run_durable", "submit"]


class Parked(msgspec.Struct, frozen=True, kw_only=True):
    """What :func:`run_durable` returns when the session parks on a pause.

    Attributes:
        session_id: the session (status ``paused`` in the store).
        pause: the ``Pause`` waiting for an answer (:func:`answer`).
        steps: the step it paused in.
    """

    session_id: str
    pause: Pause
    steps: int


Clock = Callable[[], float]


class _LeaseOptions(TypedDict, total=False):
    owner: str | None
    lease_seconds: float


class _HandoffOptions(TypedDict, total=False):
    handoffs: Any
    agent_name: str | None


#: The loop's options ``run_durable`` takes: a session's, and its agents'.
_LOOP_KEYS: Final = SESSION_KEYS | frozenset(_HandoffOptions.__optional_keys__)


class _SubmitOptions(SessionOptions, _HandoffOptions, total=False):
    """What :func:`submit` takes: a new session's options."""


class DurableOptions(SessionOptions, _HandoffOptions, DriveOptions, _LeaseOptions, total=False):
    """What :func:`run_durable` takes: :func:`agentloop.run`'s options (but ``log``)
    and the lease's, ``owner`` (default: host, pid and a random token) and
    ``lease_seconds`` (default 30.0)."""


class AsyncDurableOptions(
    SessionOptions, _HandoffOptions, AsyncDriveOptions, _LeaseOptions, total=False
):
    """What :func:`arun_durable` takes (its ``on_pause`` may be ``async def``)."""


_LEASE_KEYS: Final = frozenset(_LeaseOptions.__optional_keys__)

_T = TypeVar("_T")


def answer(store: SQLiteStore, session_id: str, reply: Resume | Cancel | Steer | FollowUp) -> None:
    """Record a reply for a stored session; a worker sends it to the loop.

    - ``Resume`` or ``Cancel``: the answer to a *parked* session's pause. The next
      :func:`run_durable` for the session sends it (its ``at`` is stamped then if
      ``None``). The first answer wins.
    - ``Steer`` or ``FollowUp``: a message for any session that has not finished,
      parked or running (DESIGN §19). It is queued in the store and delivered at
      the session's next side-effect boundary by the worker advancing it -- the one
      running it now (it looks before every model call and tool call), or the next
      ``run_durable``. A parked session stays parked until its pause is answered;
      then its queued messages are delivered first, then the answer. Several
      messages are delivered in the order they were recorded.

    Raises:
        TypeError: ``reply`` is none of those.
        ValueError: it holds values that JSON cannot hold exactly (NaN, tuples,
            ...) or a container that contains itself, its payload nests deeper
            than :data:`replay.MAX_ANSWER_DEPTH`, or the message's id is already
            used in the session or is in a namespace the loop makes ids in
            (``message-``, ``tool-result-``, ``output-retry-``).
        SessionNotFound: no such session.
        StoreError: for an answer, the session is not parked or has an answer
            already; for a message, the session has finished.
    """
    kind = type(reply)
    if kind is Steer or kind is FollowUp:
        message_id = reply.message.id  # type: ignore[union-attr]
        if message_id in _message_ids(store.events(session_id)):
            raise ValueError(
                f"session {session_id!r}: message id {message_id!r} is already used in the "
                f"session; a {kind.__name__} needs a new one"
            )
        store.queue(session_id, reply)  # type: ignore[arg-type]
        return
    store.put_answer(_answer_target(store, session_id), reply)  # type: ignore[arg-type]


def submit(
    store: SQLiteStore,
    session_id: str,
    messages: Sequence[Any],
    *,
    tools: ToolRegistry | Iterable[Tool | ToolSpec],
    **options: Unpack[_SubmitOptions],
) -> None:
    """Store a new session for a worker to run (:class:`replay.Worker`,
    ``python -m replay worker DB``): its first events, up to its first model call,
    with status ``running`` and no lease. Nothing is called: no model, no tool.

    The worker continues it with the model and tools its factory gives for the
    session (the tools must offer the session's; ``hooks`` and ``output``, if the
    session is started with them, must be given again by the factory, and so
    must ``handoffs`` that hold code: see :func:`run_durable`).

    Args:
        store, session_id, messages, tools: as for :func:`run_durable`.
        system, max_steps, budget, hooks, started_at, parallel_tools, limits,
            output, output_retries, compaction, handoffs, agent_name: as for
            :func:`agentloop.run` (``started_at`` defaults to ``time.time()``).

    Raises:
        StoreConflict: a session with that id exists already.
        ValueError, TypeError: bad arguments (as :func:`agentloop.agent_loop`
            says).
    """
    if type(session_id) is not str or not session_id or not clean_text(session_id):
        raise ValueError(f"session_id must be a non-empty str (valid Unicode), got {session_id!r}")
    config, _ = split(options, "submit", _LOOP_KEYS)
    config.setdefault("started_at", time.time())
    loop = agent_loop(messages, tools=tools, **config)
    # Up to the first effect (a model call); an invalid transcript ends the run
    # (failed) at once. The session is stored either way.
    with contextlib.suppress(StopIteration):
        next(loop)
    result = loop.result
    status = "running" if result is None else result.status
    store.create(session_id, list(loop.log), status=status, steps=loop.step)
    loop.close()


def _message_ids(events: Iterable[Event]) -> set[str]:
    """The ids of the messages a stored log holds (or has queued)."""
    ids = set()
    for event in events:
        if type(event) is MessageQueuedEvent:
            ids.add(event.reply.message.id)
        else:
            message = getattr(event, "message", None)
            if message is not None:
                ids.add(message.id)
    return ids


def run_durable(
    store: SQLiteStore,
    session_id: str,
    messages: Sequence[Any] | None = None,
    *,
    model: Model,
    tools: ToolRegistry | Iterable[Tool | ToolSpec],
    **options: Unpack[DurableOptions],
) -> RunResult | Parked:
    """Start or continue a stored session and drive it to its end (or a parking pause).

    The first call with ``messages`` stores a new session; after a crash, the same
    call (or one without ``messages``) resumes it from its log. A finished session
    gives back its result at once (nothing runs).

    Args:
        store: the store holding the session.
        session_id: the session's id (any non-empty str you choose).
        messages: the initial transcript, to start the session. For a stored
            session it may be given again (the same call after a crash): it must
            then match what the session was started with (so must ``system``,
            ``max_steps``, ``budget``, ``parallel_tools``, ``limits``, ``output``,
            ``output_retries``, ``compaction`` and the tools' specs). Without it, the stored
            configuration is used and those options are ignored -- except
            ``output``, which a session started with ``output=T`` needs again
            (a type cannot be stored), and ``compaction``, which a session
            started with a policy of your own (not a built-in one) needs again
            (it must have the recorded ``spec()``), as for :func:`replay.resume`.
        model, tools, hooks, signal, clock, inbox, tool_workers: as for
            :func:`agentloop.run`. The tools must offer every tool the session
            was started with, with the same parameters (more are fine: a worker
            may serve sessions started with different tools). Tools can read
            :func:`agentloop.idempotency_key`.
        system, max_steps, budget, started_at, parallel_tools, limits, output,
            output_retries, compaction: as for :func:`agentloop.run`, for a new
            session.
        handoffs, agent_name: the agents the model may transfer the conversation
            to, as for :func:`agentloop.run` (their tools join the driver's). A new
            session records them in ``session.start``; to continue one, the
            recorded agents serve (their tools from ``tools``), unless one holds
            code (an ``input_filter``, an ``output`` type): then pass ``handoffs=``
            again, the same agents (DESIGN §26).
        on_event: called with each new event as the loop emits it (before it is
            committed), from the first one this call adds: a live view (a
            resumed session's stored events are in ``store.events``).
        on_pause: answers pauses as in :func:`agentloop.run`. Without it, a pause
            parks the session (see :class:`Parked`). An answer recorded with
            :func:`answer` is used first either way.
        owner: this worker's lease owner id (default: host, pid and a random
            token, new for every call). A worker restarted with the same id takes
            back its own leases at once; others wait for them to expire (or for
            ``store.release(session_id, owner)``). Two concurrent runs must not
            share one: they would share its lease.
        lease_seconds: how long the lease lasts without renewal (renewed every
            third of it while working, and at every commit).

    Returns:
        The :class:`~agentloop.RunResult`, or :class:`Parked`.

    Raises:
        SessionLeased: another worker holds the session's lease (its message
            says who, for how many more seconds, and how to free it; after a
            crash, a dead worker's lease on this host is taken over at once, one
            held from another host lasts until it expires), or this run lost its
            lease while it worked (nothing more was written).
        StoreConflict: another writer advanced the session (or created it) first.
        SessionNotFound: no such session and no ``messages`` to start it.
        ValueError: ``messages`` (or the options) differ from the stored session's
            start, a tool of the session is missing or has other parameters, or a
            session started with ``output=`` is continued without it (or with
            another type).
        ReplayDivergence: the stored log does not replay with these hooks.
        BaseException: whatever leaves a tool, the model's stream, ``on_pause``
            or ``clock`` (e.g. ``KeyboardInterrupt``) propagates *without* being
            committed: the session stays resumable from its last commit. (A
            ``CallerProtocolError`` is the exception: it ends the run ``failed``,
            as in ``run``, and that end is committed.)
    """
    checked = _Options(False, store, session_id, messages, model, tools, options, "run_durable")
    outcome = _run(checked, None)
    assert outcome is not None  # (only a stop event stops a run half-way)
    return outcome[0]


def _run(checked: _Options, stop: threading.Event | None) -> tuple[RunResult | Parked, bool] | None:
    """:func:`run_durable`'s work; and whether this call advanced the session. With
    ``stop`` (the worker's drain, DESIGN §29): once it is set, the run ends at its
    next side-effect boundary, committed and its lease released, with nothing in
    flight (``None``)."""
    runner = checked.prepare()
    if not isinstance(runner, _Runner):
        return runner, False
    runner.stop_event = stop
    loop = runner.loop
    try:
        with idempotency_session(checked.session_id), hosting(checked.host()):
            drive(loop, **checked.driving(runner), before_effect=runner.before_effect)
        return runner.finish(), True
    except _Parking as parking:
        if parking.child:
            runner.park_on_child()
        return Parked(session_id=checked.session_id, pause=parking.pause, steps=loop.step), True
    except _Stopped:
        return None
    except CallerProtocolError:
        # The loop logged its failed run.finished (a malformed answer or on_pause
        # reply): the run is over, and its log says why.
        runner.commit()
        raise
    finally:
        runner.stop()
        runner.release()


async def arun_durable(
    store: SQLiteStore,
    session_id: str,
    messages: Sequence[Any] | None = None,
    *,
    model: Any,
    tools: ToolRegistry | Iterable[Tool | ToolSpec],
    **options: Unpack[AsyncDurableOptions],
) -> RunResult | Parked:
    """:func:`run_durable` for asyncio: ``await arun_durable(store, session_id, ...)``.

    The same sessions, store, write-ahead rule, parking, answers, leases and
    idempotency keys; driven by :func:`agentloop.adrive`, so the model needs
    ``astream`` (:class:`agentloop.AsyncModel`), tools may be ``async def`` (sync
    ones run in a worker thread) and ``on_pause`` may be ``async def``. The store is
    used from a worker thread (a reused one, as ``arun`` runs sync tools): reading and replaying a
    stored session and every commit; the event loop never waits for SQLite. A
    session may be advanced by ``run_durable`` one day and ``arun_durable`` the
    next: the log is the same.

    Cancelling the task that awaits it is a crash, not a cancel (as Ctrl-C is for
    :func:`run_durable`): nothing more is committed, ``CancelledError`` goes on,
    and the session continues from its last commit when it is run again. To end a
    session ``cancelled``, use ``signal``, ``inbox.cancel()`` or, when it is
    parked, :func:`answer` with a ``Cancel``.

    Arguments, result and exceptions: as for :func:`run_durable`.
    """
    checked = _Options(True, store, session_id, messages, model, tools, options, "arun_durable")
    outcome = await _arun(checked)
    assert outcome is not None  # (only a stop event stops a run half-way)
    return outcome[0]


async def _arun(
    checked: _Options, group: _Group | None = None, stop: threading.Event | None = None
) -> tuple[RunResult | Parked, bool] | None:
    """:func:`arun_durable`'s work, as :func:`_run` gives it. With ``group`` (a
    worker's event loop, DESIGN §29): the store is used from the loop's own
    thread, and the common commits (before a model or tool call, the end) wait for
    the group's next one."""
    session_id = checked.session_id
    call: Callable[..., Awaitable[Any]] = offload if group is None else _now
    runner: _Runner | RunResult | Parked = await call(checked.prepare)
    if not isinstance(runner, _Runner):
        return runner, False
    runner.stop_event = stop
    loop = runner.loop

    def before_effect(effect: Effect) -> Any:
        if group is None:
            return offload(runner.before_effect, effect)
        return group.before_effect(runner, effect)

    try:
        with idempotency_session(session_id), hosting(checked.host()):
            await adrive(loop, **checked.driving(runner), before_effect=before_effect)
        if group is None:
            return await offload(runner.finish), True
        await group.commit(runner)
        result = loop.result
        assert result is not None
        return result, True
    except _Parking as parking:
        if parking.child:
            await call(runner.park_on_child)
        return Parked(session_id=session_id, pause=parking.pause, steps=loop.step), True
    except _Stopped:
        return None
    except CallerProtocolError:
        await call(runner.commit)
        raise
    finally:
        runner.stop()
        # (In a thread too; should this task be cancelled again meanwhile, the
        # thread still gives the lease up.)
        await call(runner.release)


async def _now(fn: Callable[..., _T], /, *args: Any) -> _T:
    """``fn(*args)``, in this thread (as :func:`offload` would in another)."""
    return fn(*args)


class _Group:
    """Group commit for the sessions one event loop drives (a worker's, DESIGN
    §29): the commits they ask for while the loop runs its ready tasks are made in
    one write transaction, in the loop's next turn; each session's effect waits
    for it, as the write-ahead rule asks. One ``BEGIN``/``COMMIT`` serves them all
    (the dearest part of a small commit), and the loop's thread is the only one
    to use the store for them. (The rarer boundaries, a pause or a queued message
    to deliver, commit on their own, as :func:`run_durable` does.)"""

    def __init__(self, store: SQLiteStore) -> None:
        self.store = store
        self.waiting: list[tuple[_Runner, Sequence[Event], str, bool, asyncio.Future[Any]]] = []

    async def before_effect(
        self, runner: _Runner, effect: Effect
    ) -> Steer | FollowUp | Resume | Cancel | None:
        """:meth:`_Runner.before_effect`, its common commit grouped."""
        if runner.waiting or type(effect) is Pause:
            return runner.before_effect(effect)
        found = await self.commit(runner, poll=True)
        if found:
            return runner.deliver(found)
        runner.proceed()
        return None

    async def commit(
        self, runner: _Runner, *, poll: bool = False
    ) -> list[tuple[int, Steer | FollowUp]]:
        """:meth:`_Runner.commit` of a stored session (a worker's: never a new one),
        in the next group."""
        batch = runner.batch()
        if batch is None:
            return runner.commit(poll=poll)
        events, status = batch
        import asyncio

        loop = asyncio.get_running_loop()
        if not self.waiting:
            loop.call_soon(self.flush)
        future: asyncio.Future[Any] = loop.create_future()
        self.waiting.append((runner, events, status, poll, future))
        found: list[tuple[int, Steer | FollowUp]] = await future
        if not found:
            runner.written(len(events), status)
        return found

    def flush(self) -> None:
        """Write the waiting commits, in one transaction."""
        waiting = [entry for entry in self.waiting if not entry[-1].cancelled()]
        self.waiting = []
        try:
            results = self.store._append_group(
                [
                    (runner.session_id, events, runner.appending(status, poll))
                    for runner, events, status, poll, _ in waiting
                ]
            )
        except Exception as exc:  # (the store failed: each commit raises it)
            results = [exc] * len(waiting)
        for (*_, future), result in zip(waiting, results, strict=True):
            if isinstance(result, Exception):
                future.set_exception(result)
            else:
                future.set_result(result)


# --------------------------------------------------------------------------- the tree


class _Host:
    """Runs the children of a durable session's agent tools (DESIGN §26): each is a
    stored session of its own (id ``"<parent>/<call id>"``, its ``session.start``
    naming the parent), run by :func:`run_durable` (:func:`arun_durable` under
    ``arun_durable``) with the parent's lease options. So a child that finished is
    never run again (its stored result answers the call when the parent, resumed
    after a crash, makes it again), a crashed child resumes from its own log, and
    a child that parks parks its parent too (at the call): one :func:`answer`
    continues both."""

    __slots__ = ("lease_seconds", "owner", "store")

    def __init__(self, store: SQLiteStore, owner: str, lease_seconds: float) -> None:
        self.store = store
        self.owner = owner
        self.lease_seconds = lease_seconds

    def _options(
        self,
        asynchronous: bool,
        tool: Any,
        link: ParentLink,
        messages: list[Any],
        on_pause: Callable[[Pause], Any] | None,
        signal: CancelToken | None,
        clock: Clock,
        on_event: OnEvent | None,
    ) -> _Options:
        options: dict[str, Any] = {
            **tool.options,
            "started_at": float(clock()),
            "clock": clock,
            "owner": self.owner,
            "lease_seconds": self.lease_seconds,
        }
        if on_pause is not None:
            options["on_pause"] = on_pause
        if signal is not None:
            options["signal"] = signal
        if on_event is not None:  # the parent's watchers' (agentloop.otel's: DESIGN §26)
            options["on_event"] = on_event
        where = "arun_durable" if asynchronous else "run_durable"
        session_id = child_session_id(link)
        checked = _Options(
            asynchronous, self.store, session_id, messages, tool.model, tool.tools, options, where
        )
        checked.config["parent"] = link
        return checked

    def run_child(
        self,
        tool: Any,
        link: ParentLink,
        messages: list[Any],
        on_pause: Callable[[Pause], Any] | None,
        signal: CancelToken | None,
        clock: Clock,
        on_event: OnEvent | None = None,
    ) -> tuple[RunResult, list[Event]]:
        checked = self._options(False, tool, link, messages, on_pause, signal, clock, on_event)
        outcome = _run(checked, None)
        assert outcome is not None  # (no stop event)
        return self._ended(checked.session_id, outcome[0])

    async def arun_child(
        self,
        tool: Any,
        link: ParentLink,
        messages: list[Any],
        on_pause: Callable[[Pause], Any] | None,
        signal: CancelToken | None,
        clock: Clock,
        on_event: OnEvent | None = None,
    ) -> tuple[RunResult, list[Event]]:
        checked = self._options(True, tool, link, messages, on_pause, signal, clock, on_event)
        outcome = await _arun(checked)
        assert outcome is not None  # (no stop event)
        if type(outcome[0]) is Parked:
            return self._ended(checked.session_id, outcome[0])
        return outcome[0], await offload(self.store.events, checked.session_id)  # type: ignore[return-value]

    def _ended(self, session_id: str, outcome: RunResult | Parked) -> tuple[RunResult, list[Event]]:
        """The child's result and log; a parked child parks its parent."""
        if type(outcome) is Parked:
            pause = outcome.pause
            path = (session_id, *pause.path)
            raise _Parking(msgspec.structs.replace(pause, path=path), child=True)
        return outcome, self.store.events(session_id)  # type: ignore[return-value]


def _still_parked(
    store: SQLiteStore, session_id: str, info: SessionInfo, events: Sequence[Event]
) -> Parked | None:
    """The outcome of a parked session that nothing of this run answers: its own
    pause (the store vouches that the log ends there, perhaps followed by messages
    delivered there), or the pause of the child it waits on at an agent tool's call
    while that child has no answer; ``None`` when the child's answer came."""
    last = next(e for e in reversed(events) if type(e) is not MessageQueuedEvent)
    if type(last) is SessionPauseEvent:
        return Parked(
            session_id=session_id, pause=Pause(last.reason, last.payload), steps=info.steps
        )
    leaf = parked_leaf(store, session_id)
    if leaf is not None and not leaf[1].answered:
        return Parked(session_id=session_id, pause=leaf[2], steps=info.steps)
    return None


def parked_leaf(
    store: SQLiteStore, session_id: str, path: tuple[str, ...] = ()
) -> tuple[str, SessionInfo, Pause] | None:
    """The first parked session under ``session_id`` that waits at its own pause
    (its id, row and ``Pause``, whose ``path`` leads to it), or ``None``."""
    for child in store.children(session_id):
        if store.session(child).status != "paused":
            continue
        here = (*path, child)
        info, events = store.load(child)
        last = next(e for e in reversed(events) if type(e) is not MessageQueuedEvent)
        if type(last) is SessionPauseEvent:
            return child, info, Pause(last.reason, last.payload, path=here)
        deeper = parked_leaf(store, child, here)
        if deeper is not None:
            return deeper
    return None


def _answer_target(store: SQLiteStore, session_id: str) -> str:
    """The session an answer for ``session_id``'s pause goes to: itself, or, when
    it is parked at an agent tool's call, the child session parked under it."""
    info, events = store.load(session_id)
    if info.status != "paused":
        return session_id  # (put_answer says why not)
    last = next(e for e in reversed(events) if type(e) is not MessageQueuedEvent)
    if type(last) is SessionPauseEvent:
        return session_id
    leaf = parked_leaf(store, session_id)
    if leaf is None:
        raise StoreError(
            f"session {session_id!r} waits at its {last.type} #{last.sequence} on a child "
            "session, but none of its children is parked: run it again (run_durable) to "
            "continue"
        )
    return leaf[0]


class _Stopped(BaseException):
    """Raised by ``before_effect`` when the worker drains (committed already)."""


class _Parking(BaseException):
    """Raised by ``before_effect`` to park the session (committed already); or, with
    ``child``, by an agent tool whose child session parked (the parent, waiting at
    the call, is parked with it: :meth:`_Runner.park_on_child`)."""

    def __init__(self, pause: Pause, *, child: bool = False) -> None:
        super().__init__(pause.reason)
        self.pause = pause
        self.child = child


# --------------------------------------------------------------------------- preparing a run


class _Options:
    """The arguments of one ``run_durable``/``arun_durable`` call, checked; and the
    work before driving (:meth:`prepare`: no asyncio, so the async twin runs it in
    a worker thread)."""

    def __init__(
        self,
        asynchronous: bool,
        store: SQLiteStore,
        session_id: str,
        messages: Sequence[Any] | None,
        model: Any,
        tools: ToolRegistry | Iterable[Tool | ToolSpec],
        options: Mapping[str, Any],
        where: str,
    ) -> None:
        lease = {key: options[key] for key in _LEASE_KEYS if key in options}
        config, driving = split(
            {key: value for key, value in options.items() if key not in lease},
            where,
            _LOOP_KEYS,
        )
        hooks, on_pause, clock = config.get("hooks"), driving.get("on_pause"), driving.get("clock")
        on_event, signal = driving.get("on_event"), driving.get("signal")
        owner, lease_seconds = lease.get("owner"), lease.get("lease_seconds", 30.0)
        if (
            type(session_id) is not str
            or not session_id
            or not (session_id.isascii() or clean_text(session_id))
        ):
            raise ValueError(
                f"session_id must be a non-empty str (valid Unicode), got {session_id!r}"
            )
        model_method(model, asynchronous)
        for name, value in (("on_pause", on_pause), ("clock", clock), ("on_event", on_event)):
            if value is not None and not callable(value):
                raise TypeError(f"{name} must be callable or None, got {value!r}")
        if signal is not None and not isinstance(signal, CancelToken):
            raise TypeError(f"signal must be a CancelToken or None, got {signal!r}")
        owner = _default_owner() if owner is None else owner
        _check_lease(owner, lease_seconds)
        self.store = store
        self.session_id = session_id
        self.messages = messages
        self.registry = ToolRegistry(tools)  # once: ``tools`` may be an iterator
        self.handoffs: Any = config.get("handoffs")
        # What the driver serves: with handoffs, their tools too (as run() adds them).
        self.served = self.registry
        if self.handoffs:
            extra = handoff_tools(self.handoffs, self.registry)
            if extra:
                self.served = ToolRegistry([*self.registry, *extra])
        self.config = config  # agent_loop's options, as given (its defaults otherwise)
        self.hooks: HookRegistry | None = hooks
        self.output: Any = config.get("output")
        self.compaction: Any = config.get("compaction")
        self.started_at: float | None = config.get("started_at")
        self.signal: CancelToken | None = signal
        self.on_pause: Any = on_pause
        self.clock: Clock = time.time if clock is None else clock
        self.on_event: OnEvent | None = on_event
        self.owner = owner
        self.lease_seconds = float(lease_seconds)
        self.model = model
        self.driving_options = driving  # drive's options, as given
        # The session as a worker's claim read and leased it (see Worker), or None.
        self.claimed: tuple[SessionInfo, list[Event]] | None = None

    def host(self) -> _Host:
        """What runs this session's agent tools' children: each as its own stored
        session, with this run's lease options."""
        return _Host(self.store, self.owner, self.lease_seconds)

    def driving(self, runner: _Runner) -> dict[str, Any]:
        """The options of ``drive``/``adrive`` for the runner's loop."""
        return {
            **self.driving_options,
            "model": self.model,
            "tools": runner.registry,
            "clock": self.clock,
        }

    def new_loop(self, **extra: Any) -> AgentLoop:
        """``agent_loop`` with these options (``extra`` overrides some)."""
        options: dict[str, Any] = {"tools": self.registry, **self.config, **extra}
        assert self.messages is not None
        return agent_loop(self.messages, **options)

    def prepare(self) -> _Runner | RunResult | Parked:
        """A runner holding the loop to drive (and the lease of a stored session),
        or the outcome when there is nothing to drive."""
        store, session_id = self.store, self.session_id
        try:
            # Read and lease it in one transaction (not a finished session, nor a
            # parked one that nothing of this run would answer).
            claimed = self.claimed
            info, events, leased = (
                (*claimed, True)
                if claimed is not None
                else store._claim(
                    session_id, self.owner, self.lease_seconds, paused=self.on_pause is not None
                )
            )
        except SessionNotFound:
            if self.messages is None:
                raise SessionNotFound(session_id, "; pass messages to start it") from None
            started_at = self.started_at
            loop = self.new_loop(
                started_at=float(self.clock()) if started_at is None else started_at
            )
            return _Runner(self, loop, self.served, created=False, status="running")
        try:
            if self.messages is not None:
                problem = self.start_problem(events)
                if problem is not None:
                    raise ValueError(
                        f"session {session_id!r} exists and was started differently: "
                        f"{problem}; to continue it, call run_durable(store, {session_id!r}, "
                        "model=..., tools=...) without messages"
                    )
            self.check_output_type(events[0])
            if not info.finished:
                self.check_output(events[0])
                self.check_handoffs(events[0])
                if not leased:
                    parked = _still_parked(store, session_id, info, events)
                    if parked is not None:
                        return parked
                    # It waited at an agent tool's call on a child whose pause has its
                    # answer now (DESIGN §26): lease it and go on.
                    info, events, leased = store._claim(
                        session_id, self.owner, self.lease_seconds, paused=True
                    )
            if info.finished:
                return self.finished(events)
            loop, _ = resume(
                events,
                hooks=self.hooks,
                output=self.output,
                compaction=self.compaction,
                handoffs=self.handoffs or None,
            )
            problem = tools_problem(self.served, loop.tools, extra=True)
            if problem is not None:
                raise ValueError(f"session {session_id!r}: {problem}")
        except BaseException:
            if leased:
                store.release(session_id, self.owner)
            raise
        # Only the session's tools go to the driver (it refuses others).
        registry = ToolRegistry(self.served.get(spec.name) for spec in loop.tools)  # type: ignore[misc]
        runner = _Runner(self, loop, registry, created=True, status=info.status)
        runner.committed = len(events)
        if self.on_event is not None:
            # Events the resume regenerated (a log cut between two events, e.g. by
            # another writer of the store); this run commits them.
            for event in loop.log.since(runner.committed):
                self.on_event(event)
        return runner

    def finished(self, events: Sequence[Event]) -> RunResult:
        """The result of a finished session, from its log."""
        result = replay(
            events,
            hooks=self.hooks,
            output=self.output,
            compaction=self.compaction,
            handoffs=self.handoffs or None,
        ).result
        assert result is not None  # the store vouches: its log ends with run.finished
        return result

    def check_output(self, start: Event) -> None:
        """A session started with ``output=T`` needs the type again (a type cannot
        be stored); one started without it takes none."""
        recorded = start.output if type(start) is SessionStartEvent else None
        if recorded is not None and self.output is None:
            raise ValueError(
                f"session {self.session_id!r} was started with structured output "
                f"({recorded.name}): pass output= again (the type its answers decode to)"
            )
        if recorded is None and self.output is not None and type(start) is SessionStartEvent:
            raise ValueError(
                f"session {self.session_id!r} was started without structured output: "
                "continue it without output="
            )

    def check_handoffs(self, start: Event) -> None:
        """A session whose handoffs hold code (an ``input_filter``, an ``output``
        type) needs ``handoffs=`` again to go on (code cannot be stored); without
        code, the recorded agents serve (their tools from ``tools=``)."""
        recorded = start.handoffs if type(start) is SessionStartEvent else ()
        if self.handoffs or not recorded:
            return
        coded = [spec.name for spec in recorded if spec.filtered or spec.output is not None]
        if coded:
            raise ValueError(
                f"session {self.session_id!r} was started with handoffs whose code "
                f"(an input_filter or an output type) cannot be stored: {', '.join(coded)}; "
                "pass handoffs= again (the same agents) to continue it"
            )

    def check_output_type(self, start: Event) -> None:
        """``output=T`` for a session started with structured output must be the
        type it was started with (the same name and JSON Schema, as recorded)."""
        recorded = start.output if type(start) is SessionStartEvent else None
        if recorded is None or self.output is None:
            return
        check = output_check(self.output, recorded.retries)
        assert check is not None
        if check.spec != recorded:
            given = check.spec.name
            other = f"output={given}" if given != recorded.name else "another JSON Schema"
            raise ValueError(
                f"session {self.session_id!r} was started with output={recorded.name}, and "
                f"{other} is another type (its JSON Schema differs from the recorded one): "
                f"pass the type the session was started with"
            )

    def start_problem(self, events: Sequence[Event]) -> str | None:
        """How the stored session's start differs from what these arguments start,
        or ``None``. The engine itself normalizes the arguments: a probe loop is
        built with them and primed (no hooks, so nothing of the caller's runs), and
        its first events are compared with the stored ones, byte for byte."""
        stored = _start_prefix(events)
        probe = self.new_loop(
            hooks=None,
            started_at=events[0].at,
            rules=getattr(events[0], "rules", RULES_REVISION),  # the stored session's rules
        )
        with contextlib.suppress(StopIteration):
            next(probe)
        probe.close()
        fresh = _start_prefix(list(probe.log))
        for recorded, given in zip(stored, fresh, strict=False):
            if encode_event(recorded) != encode_event(given):
                labels = ("stored", "given")
                detail = "; ".join(diff_events(recorded, given, labels=labels, limit=3))
                return f"event #{recorded.sequence} ({recorded.type}) differs: {detail}"
        if len(stored) != len(fresh):
            return f"{len(stored) - 1} initial messages are stored, {len(fresh) - 1} were given"
        return None


def _start_prefix(events: Sequence[Event]) -> list[Event]:
    """``session.start`` and the initial ``message.accepted`` events (or the one
    failed ``run.finished`` of an invalid transcript)."""
    if type(events[0]) is not SessionStartEvent:
        return [events[0]]
    accepted = itertools.takewhile(lambda event: type(event) is MessageAcceptedEvent, events[1:])
    return [events[0], *accepted]


def _default_owner() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"


# --------------------------------------------------------------------------- the runner


class _Runner:
    """One run of a session: the loop, what of its log is committed, the lease,
    and the driver's ``before_effect`` (:meth:`before_effect`)."""

    def __init__(
        self,
        options: _Options,
        loop: AgentLoop,
        registry: ToolRegistry,
        *,
        created: bool,
        status: str,
    ) -> None:
        self.store = options.store
        self.session_id = options.session_id
        self.owner = options.owner
        self.lease_seconds = options.lease_seconds
        self.clock = options.clock
        self.ask = options.on_pause is not None  # an on_pause answers pauses (else: park)
        self.signal = options.signal
        self.loop = loop
        self.registry = registry
        self.created = created  # the session's row exists (and this runner leases it)
        self.leased = created  # this runner holds the lease (the last commit kept it)
        self.status = status
        self.committed = 0  # events of loop.log already in the store
        self.answer_applied = False  # the stored answer was sent; consume it at the next commit
        self.delivered = 0  # the last queued message sent; consume up to it at the next commit
        self.seen = 0  # the last queued message read from the store
        self.waiting: collections.deque[tuple[int, Steer | FollowUp]] = collections.deque()
        self.renewal: int | None = None  # the lease's entry in _RENEWER
        self.stop_event: threading.Event | None = None  # a worker's drain (see _run)

    def before_effect(self, effect: Effect) -> Steer | FollowUp | Resume | Cancel | None:
        """The driver asks before each side effect: a stored reply to send instead,
        or (``None``) go on once the log so far is committed; parks by raising."""
        waiting = self.waiting
        if waiting or type(effect) is Pause:
            stored = self.stored(effect)
            if stored is not None:
                return stored
            if type(effect) is Pause and not self.ask:
                signal = self.signal
                if signal is None or not signal.cancelled:  # (a cancel token cancels instead)
                    self.commit(parked=True)
                    raise _Parking(effect)
            self.commit()
        else:
            # The common boundary (a model or tool call): the look for queued
            # messages and the commit are one transaction; a message found is
            # sent first, and nothing is written (the next call commits it too).
            found = self.commit(poll=True)
            if found:
                return self.deliver(found)
        self.proceed()
        return None

    def deliver(self, found: list[tuple[int, Steer | FollowUp]]) -> Steer | FollowUp:
        """Send the first of the queued messages a commit's look found."""
        waiting = self.waiting
        waiting.extend(found)
        self.seen = found[-1][0]
        self.delivered, reply = waiting.popleft()
        return reply

    def proceed(self) -> None:
        """The log so far is committed: the effect goes on (unless the worker
        drains), the lease renewed meanwhile."""
        stop = self.stop_event
        if stop is not None and stop.is_set():
            raise _Stopped
        self.keep_lease()

    def stored(self, effect: Effect) -> Steer | FollowUp | Resume | Cancel | None:
        """The next reply waiting in the store: a queued message, then (at a pause)
        the answer. Its ``at`` is stamped by the driver if it has none."""
        waiting = self.waiting
        if not waiting:
            waiting.extend(self.store.queued_for(self.session_id, after=self.seen))
            if waiting:
                self.seen = waiting[-1][0]
        if waiting:
            self.delivered, reply = waiting.popleft()
            return reply
        if type(effect) is Pause and not self.answer_applied:
            # (Once an answer was sent, it is consumed at the next commit, and a
            # second pause in a row waits for its own.)
            answer = self.store.answer_for(self.session_id)
            if answer is not None:
                self.answer_applied = True
                return answer
        return None

    def commit(
        self, *, parked: bool = False, poll: bool = False
    ) -> list[tuple[int, Steer | FollowUp]]:
        """Store the events not stored yet, with the session's status, in one
        transaction. With ``poll``, look for queued messages first (in the same
        transaction): those found are returned, and nothing is written."""
        batch = self.batch(parked)
        store = self.store
        if batch is None:
            # (A delivered message always brings its message.queued event.)
            return store.queued_for(self.session_id, after=self.seen) if poll else []
        events, status = batch
        if self.created:
            found = store.append(
                self.session_id,
                events,
                expected=self.committed,
                status=status,
                steps=self.loop.step,
                owner=self.owner,
                lease_seconds=self.lease_seconds,
                consume_answer=self.answer_applied,
                consume_queued=self.delivered,
                poll_queued=self.seen if poll else None,
            )
            if found:
                return found
        else:  # (a new session: no message can be queued for it yet)
            store.create(
                self.session_id,
                events,
                status=status,
                steps=self.loop.step,
                owner=self.owner,
                lease_seconds=self.lease_seconds,
            )
            self.created = True
        self.written(len(events), status)
        return []

    def batch(self, parked: bool = False) -> tuple[Sequence[Event], str] | None:
        """What the next commit writes: the events not stored yet and the
        session's status after them; ``None`` when nothing changed."""
        loop = self.loop
        events = loop.log.since(self.committed)
        result = loop.result
        status = result.status if result is not None else "paused" if parked else "running"
        if not events and status == self.status and not self.answer_applied:
            return None
        return events, status

    def appending(self, status: str, poll: bool) -> dict[str, Any]:
        """:meth:`SQLiteStore.append`'s options for the next commit (but the
        events), as :meth:`commit` passes them (a group commit's)."""
        return {
            "expected": self.committed,
            "status": status,
            "steps": self.loop.step,
            "owner": self.owner,
            "lease_seconds": self.lease_seconds,
            "consume_answer": self.answer_applied,
            "consume_queued": self.delivered,
            "poll_queued": self.seen if poll else None,
        }

    def written(self, count: int, status: str) -> None:
        """A commit of ``count`` events with ``status`` went through."""
        self.committed += count
        self.status = status
        self.leased = status not in _UNLEASED  # (the commit released it: see append)
        self.answer_applied = False
        self.delivered = 0

    def park_on_child(self) -> None:
        """Park the session where its log was last committed: at the ``tool.call`` of
        an agent tool whose child session parked (DESIGN §26). The driver ended the
        loop in memory when the tool raised; none of that is committed: the next run
        resumes at the call, and the child's answer continues both."""
        self.store.append(
            self.session_id,
            [],
            expected=self.committed,
            status="paused",
            steps=self.loop.step,
            owner=self.owner,
            lease_seconds=self.lease_seconds,
        )
        self.status = "paused"
        self.leased = False  # (the commit released it: see append)

    def finish(self) -> RunResult:
        """Commit the end of the run; its result."""
        self.commit()
        result = self.loop.result
        assert result is not None
        return result

    def keep_lease(self) -> None:
        """Renew the lease in the background while effects run (from the first)."""
        if self.renewal is None:
            self.renewal = _RENEWER.add(self.store, self.session_id, self.owner, self.lease_seconds)

    def stop(self) -> None:
        """Stop renewing the lease."""
        if self.renewal is not None:
            _RENEWER.remove(self.renewal)
            self.renewal = None

    def release(self) -> None:
        """Give the lease up (call :meth:`stop` first); unless the last commit did
        (a finished or parked session holds none)."""
        if self.leased:
            self.store.release(self.session_id, self.owner)


# --------------------------------------------------------------------------- leases


class _Lease:
    __slots__ = ("due", "owner", "seconds", "session_id", "store")

    def __init__(self, store: SQLiteStore, session_id: str, owner: str, seconds: float) -> None:
        self.store = store
        self.session_id = session_id
        self.owner = owner
        self.seconds = seconds
        self.due = time.monotonic() + seconds / 3


class _Renewer:
    """One daemon thread per process renews the leases of every run in progress,
    each every third of its length, until the run removes it (or the lease is lost,
    or the store fails: the run's next commit then says so). One thread for all,
    started once: a thread per run would cost more than a short session. It serves
    :func:`arun_durable` as well: a renewal is a small SQLite write, which the event
    loop never waits for."""

    def __init__(self) -> None:
        self._condition = threading.Condition()
        self._leases: dict[int, _Lease] = {}
        self._tokens = itertools.count()
        self._thread: threading.Thread | None = None
        # When the thread wakes up next (monotonic clock): a lease due later needs
        # no wake-up call. (A notify() costs the adding thread a GIL hand-off, up to
        # the interpreter's switch interval, 5 ms: more than a short session.)
        self._wake = 0.0

    def forget(self) -> None:
        """Start afresh (in a forked child: the parent's runs and their stores, locks
        and thread are not the child's to use)."""
        self.__init__()  # type: ignore[misc]

    def add(self, store: SQLiteStore, session_id: str, owner: str, seconds: float) -> int:
        with self._condition:
            token = next(self._tokens)
            lease = self._leases[token] = _Lease(store, session_id, owner, seconds)
            if self._thread is None or not self._thread.is_alive():  # (or after a fork)
                self._thread = threading.Thread(
                    target=self._run, name="agentloop lease renewer", daemon=True
                )
                self._thread.start()
            elif lease.due < self._wake:
                self._condition.notify()
        return token

    def remove(self, token: int) -> None:
        with self._condition:
            self._leases.pop(token, None)

    def _run(self) -> None:
        while True:
            with self._condition:
                now = time.monotonic()
                due = [(token, lease) for token, lease in self._leases.items() if lease.due <= now]
                if not due:
                    self._wake = min(
                        (lease.due for lease in self._leases.values()), default=now + 3600
                    )
                    self._condition.wait(self._wake - now)
                    continue
                for _, lease in due:
                    lease.due = now + lease.seconds / 3
            for token, lease in due:  # outside the lock: a renewal is a write
                try:
                    kept = lease.store.renew(lease.session_id, lease.owner, lease.seconds)
                except (StoreError, sqlite3.Error):
                    kept = False
                if not kept:
                    self.remove(token)


_RENEWER: Final = _Renewer()
if hasattr(os, "register_at_fork"):  # pragma: no branch - every POSIX Python has it
    os.register_at_fork(after_in_child=_RENEWER.forget)
