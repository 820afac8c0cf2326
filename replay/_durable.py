"""Durable sessions: :func:`run_durable` drives a session stored in a :class:`SQLiteStore`.

Theory of operation
-------------------
A session is its log. :func:`run_durable` starts a session (``agent_loop`` from the
messages) or continues a stored one (:func:`replay.resume` rebuilds the live loop
at the log's last pull point, replaying every recorded reply), then drives it the
way :func:`agentloop.run` does, with three differences:

1. **The write-ahead rule.** Events are buffered in the loop's own log and
   committed to the store in one transaction at each *side-effect boundary*: just
   before a model call (a new request), before each tool call, when a pause is
   answered by ``on_pause`` or parks, and when the run ends. So an effect's events
   (``step.start``, ``tool.call``, ...) are durable before the effect runs, and a
   reply's events (chunks, ``plan.draft``, ``tool.result``, ...) are durable
   before the next effect. A step with one tool call commits twice (before the
   model call, before the tool call); the chunks of a stream never commit.
2. **Crashes are not cancels.** If the process dies, or an exception (Ctrl-C
   included) leaves the driver, nothing more is committed and nothing is
   cancelled: the stored log still ends at the last boundary, and the next
   ``run_durable`` for the session resumes there. The effect that was in flight
   runs again (at-least-once); a tool can recognise a repeat by its
   :func:`agentloop.idempotency_key` (``"<session id>:<call id>"``).
3. **Parking.** A ``Pause`` with no ``on_pause`` *parks* the session: its events
   are committed with status ``paused``, the lease is released and
   :func:`run_durable` returns :class:`Parked`; the process may exit.
   :func:`answer` records a ``Resume`` or ``Cancel`` for it, and the next
   ``run_durable`` sends that answer and goes on.

Several workers (threads or processes) may serve one store. Each
``run_durable`` takes the session's *lease* first (owner id + expiry, renewed by a
background thread while it works and at every commit); a second worker gets
:class:`SessionLeased`. Should a worker stall past its lease and another take the
session over, the staller's next commit fails (its lease is gone, and the
optimistic append would refuse it anyway): two workers never both extend a log.

Driving
-------
Until ``agentloop`` has ``drive(loop, ...)`` (DESIGN §17: continue ANY loop), this
module computes replies with ``agentloop._driver._Driver`` -- the private object
:func:`agentloop.run` uses for exactly that (model streaming, tool execution,
``on_pause``, the clock, the cancel token) -- and keeps its own ``send`` loop
(:meth:`_Runner.drive`), so that a boundary can commit, park, or set the
idempotency key. Moving to ``drive`` replaces that method: drive the loop with a
model and tools wrapped to commit first (:meth:`_Runner.before`), and an
``on_pause`` that may stop the driver without cancelling the loop (to park).
"""

from __future__ import annotations

import contextlib
import itertools
import math
import os
import secrets
import socket
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Final

import msgspec

from agentloop import (
    RULES_REVISION,
    AgentLoop,
    Budget,
    CallerProtocolError,
    Cancel,
    CancelToken,
    Effect,
    Event,
    HookRegistry,
    MessageAcceptedEvent,
    Model,
    ModelRequest,
    Pause,
    Resume,
    RunResult,
    SessionPauseEvent,
    SessionStartEvent,
    Tool,
    ToolRegistry,
    ToolSpec,
    agent_loop,
    encode_event,
    idempotency_session,
)
from agentloop._driver import _Driver  # the seam until drive(loop, ...) lands

from ._diff import diff_events
from ._replay import replay, resume
from ._store import SessionNotFound, SQLiteStore, StoreError

__all__ = ["Parked", "answer", "run_durable"]


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
OnPause = Callable[[Pause], "Resume | Cancel"]


def answer(store: SQLiteStore, session_id: str, reply: Resume | Cancel) -> None:
    """Record the answer to a parked session's pause; the next :func:`run_durable`
    for the session sends it to the loop (its ``at`` is stamped then if ``None``).

    Raises:
        TypeError: ``reply`` is not a ``Resume`` or a ``Cancel``.
        ValueError: it holds values that JSON cannot hold exactly (NaN, tuples, ...).
        SessionNotFound: no such session.
        StoreError: the session is not parked, or has an answer already (the first
            answer wins).
    """
    store.put_answer(session_id, reply)


def run_durable(
    store: SQLiteStore,
    session_id: str,
    messages: Sequence[Any] | None = None,
    *,
    model: Model,
    tools: ToolRegistry | Iterable[Tool | ToolSpec],
    system: str | None = None,
    max_steps: int = 8,
    budget: Budget | None = None,
    hooks: HookRegistry | None = None,
    signal: CancelToken | None = None,
    on_pause: OnPause | None = None,
    clock: Clock | None = None,
    started_at: float | None = None,
    on_event: Callable[[Event], None] | None = None,
    owner: str | None = None,
    lease_seconds: float = 30.0,
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
            ``max_steps``, ``budget`` and the tools' specs). Without it, the stored
            configuration is used and those options are ignored.
        model, tools, hooks, signal, clock: as for :func:`agentloop.run`. The
            tools must offer every tool the session was started with, with the
            same parameters. Tools can read :func:`agentloop.idempotency_key`.
        system, max_steps, budget, started_at: as for :func:`agentloop.run`, for a
            new session.
        on_event: called with each new event as the loop emits it (before it is
            committed), from the first one this call adds: a live view (a
            resumed session's stored events are in ``store.events``).
        on_pause: answers pauses as in :func:`agentloop.run`. Without it, a pause
            parks the session (see :class:`Parked`). An answer recorded with
            :func:`answer` is used first either way.
        owner: this worker's lease owner id (default: host, pid and a random
            token, new for every call). A worker restarted with the same id takes
            back its own leases at once; others wait for them to expire.
        lease_seconds: how long the lease lasts without renewal (renewed every
            third of it while working, and at every commit).

    Returns:
        The :class:`~agentloop.RunResult`, or :class:`Parked`.

    Raises:
        SessionLeased: another worker holds the session's lease.
        StoreConflict: another writer advanced the session (or created it) first.
        SessionNotFound: no such session and no ``messages`` to start it.
        ValueError: ``messages`` (or the options) differ from the stored session's
            start, or a tool of the session is missing or has other parameters.
        ReplayDivergence: the stored log does not replay with these hooks.
        BaseException: whatever leaves a tool, the model's stream, ``on_pause``
            or ``clock`` (e.g. ``KeyboardInterrupt``) propagates *without* being
            recorded: the session stays resumable from its last commit. (A
            ``CallerProtocolError`` is the exception: it ends the run ``failed``,
            as in ``run``, and that end is committed.)
    """
    _check_options(session_id, model, signal, on_pause, clock, on_event, lease_seconds)
    clock = time.time if clock is None else clock
    registry = ToolRegistry(tools)
    owner = _default_owner() if owner is None else owner
    runner = _Runner(
        store,
        session_id,
        owner,
        float(lease_seconds),
        clock,
        on_pause is not None,
        signal,
        on_event,
    )
    try:
        info, events = store.load(session_id)
    except SessionNotFound:
        if messages is None:
            raise SessionNotFound(session_id, "; pass messages to start it") from None
        loop = agent_loop(
            messages,
            tools=registry,
            system=system,
            max_steps=max_steps,
            budget=budget,
            hooks=hooks,
            started_at=float(clock()) if started_at is None else started_at,
        )
        try:
            effect: Effect | None = next(loop)
        except StopIteration:
            effect = None  # an invalid transcript: the run ended at once
        return runner.run(loop, effect, _Driver(model, registry, signal, on_pause, clock))

    if messages is not None:
        problem = _start_problem(events, messages, registry, system, max_steps, budget)
        if problem is not None:
            raise ValueError(
                f"session {session_id!r} exists and was started differently: {problem}; "
                f"to continue it, call run_durable(store, {session_id!r}, model=..., "
                "tools=...) without messages"
            )
    if info.finished:
        return _finished(events, hooks)
    if info.status == "paused" and not info.answered and on_pause is None:
        # Still parked: nothing to do, and no need to lease or replay it.
        last = events[-1]
        assert type(last) is SessionPauseEvent  # what parking commits last
        pause = Pause(last.reason, last.payload)
        return Parked(session_id=session_id, pause=pause, steps=info.steps)
    store.acquire(session_id, owner, runner.lease_seconds)
    try:
        # Read again under the lease: another worker may have advanced it meanwhile.
        info, events = store.load(session_id)
        if not info.finished:
            loop, effect = resume(events, hooks=hooks)
            problem = _tools_problem(registry, loop.tools)
            if problem is not None:
                raise ValueError(f"session {session_id!r}: {problem}")
    except BaseException:
        store.release(session_id, owner)
        raise
    if info.finished:
        store.release(session_id, owner)
        return _finished(events, hooks)
    runner.created = True
    runner.status = info.status
    runner.committed = len(events)
    return runner.run(loop, effect, _Driver(model, registry, signal, on_pause, clock))


def _finished(events: Sequence[Event], hooks: HookRegistry | None) -> RunResult:
    """The result of a finished session, from its log."""
    result = replay(events, hooks=hooks).result
    assert result is not None  # a finished session's log ends with run.finished
    return result


# --------------------------------------------------------------------------- the runner


class _Runner:
    """One ``run_durable`` call: the loop, what of its log is committed, the lease."""

    def __init__(
        self,
        store: SQLiteStore,
        session_id: str,
        owner: str,
        lease_seconds: float,
        clock: Clock,
        ask: bool,
        signal: CancelToken | None,
        on_event: Callable[[Event], None] | None,
    ) -> None:
        self.store = store
        self.session_id = session_id
        self.owner = owner
        self.lease_seconds = lease_seconds
        self.clock = clock
        self.ask = ask  # an on_pause answers pauses (else a pause parks)
        self.signal = signal
        self.on_event = on_event
        self.created = False  # the session's row exists (and this runner leases it)
        self.status = "running"
        self.committed = 0  # events of loop.log already in the store
        self.requested: str | None = None  # the model request whose events are committed
        self.answer_applied = False  # the stored answer was sent; consume it at the next commit
        self.renewal: int | None = None  # the lease's entry in _RENEWER
        self.loop: AgentLoop | None = None

    def run(self, loop: AgentLoop, effect: Effect | None, driver: _Driver) -> RunResult | Parked:
        self.loop = loop
        try:
            if self.on_event is not None:
                for event in loop.log.since(self.committed):
                    self.on_event(event)
                loop.log.subscribe(self.on_event)
            with idempotency_session(self.session_id):  # the tools' idempotency_key()
                return self.drive(effect, driver)
        finally:
            driver.close_stream()
            if self.renewal is not None:
                _RENEWER.remove(self.renewal)
            if self.created:
                self.store.release(self.session_id, self.owner)

    def drive(self, effect: Effect | None, driver: _Driver) -> RunResult | Parked:
        """The send loop: at each effect, commit (or park) first, then reply."""
        loop = self.loop
        assert loop is not None
        try:
            while effect is not None:
                if type(effect) is Pause:
                    reply = self.answer_to(effect)
                    if reply is None:
                        self.commit(parked=True)
                        return Parked(session_id=self.session_id, pause=effect, steps=loop.step)
                    if reply is _ON_PAUSE:
                        self.commit()
                        self.keep_lease()
                        reply = driver.reply_to(effect)
                else:
                    self.before(effect)
                    reply = driver.reply_to(effect)
                effect = loop.send(reply)
        except StopIteration:
            pass
        except CallerProtocolError:
            # The loop logged its failed run.finished (a malformed answer or on_pause
            # reply): the run is over, and its log says why.
            self.commit()
            raise
        self.commit()
        result = loop.result
        assert result is not None
        return result

    def before(self, effect: Effect) -> None:
        """The write-ahead rule: commit before a model call or a tool call runs."""
        if type(effect) is ModelRequest:
            if effect.id == self.requested:
                return  # the same stream goes on (a chunk was sent): no new side effect
            self.requested = effect.id
        self.commit()
        self.keep_lease()

    def answer_to(self, pause: Pause) -> Any:
        """The stored answer (stamped), ``_ON_PAUSE`` to let the driver answer
        (``on_pause`` or the cancel token), or ``None`` to park."""
        if self.answer_applied:
            self.commit()  # consumes the answer sent to the previous pause
        stored = self.store.answer_for(self.session_id)
        if stored is not None:
            self.answer_applied = True
            if stored.at is None:
                stored = msgspec.structs.replace(stored, at=float(self.clock()))
            return stored
        signal = self.signal
        if self.ask or (signal is not None and signal.cancelled):
            return _ON_PAUSE  # on_pause answers, or the cancel token cancels
        return None

    def commit(self, *, parked: bool = False) -> None:
        """Store the events not stored yet, with the session's status, in one transaction."""
        loop = self.loop
        assert loop is not None
        events = loop.log.since(self.committed)
        result = loop.result
        status = result.status if result is not None else "paused" if parked else "running"
        if not events and status == self.status and not self.answer_applied:
            return
        store = self.store
        if self.created:
            store.append(
                self.session_id,
                events,
                expected=self.committed,
                status=status,
                steps=loop.step,
                owner=self.owner,
                lease_seconds=self.lease_seconds,
                consume_answer=self.answer_applied,
            )
        else:
            store.create(
                self.session_id,
                events,
                status=status,
                steps=loop.step,
                owner=self.owner,
                lease_seconds=self.lease_seconds,
            )
            self.created = True
        self.committed += len(events)
        self.status = status
        self.answer_applied = False

    def keep_lease(self) -> None:
        """Renew the lease in the background while effects run (from the first)."""
        if self.renewal is None:
            self.renewal = _RENEWER.add(self.store, self.session_id, self.owner, self.lease_seconds)


_ON_PAUSE: Final = object()


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
    started once: a thread per run would cost more than a short session."""

    def __init__(self) -> None:
        self._condition = threading.Condition()
        self._leases: dict[int, _Lease] = {}
        self._tokens = itertools.count()
        self._thread: threading.Thread | None = None

    def forget(self) -> None:
        """Start afresh (in a forked child: the parent's runs and their stores, locks
        and thread are not the child's to use)."""
        self.__init__()  # type: ignore[misc]

    def add(self, store: SQLiteStore, session_id: str, owner: str, seconds: float) -> int:
        with self._condition:
            token = next(self._tokens)
            self._leases[token] = _Lease(store, session_id, owner, seconds)
            if self._thread is None or not self._thread.is_alive():  # (or after a fork)
                self._thread = threading.Thread(
                    target=self._run, name="agentloop lease renewer", daemon=True
                )
                self._thread.start()
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
                    wait = min((lease.due for lease in self._leases.values()), default=now + 3600)
                    self._condition.wait(wait - now)
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


# --------------------------------------------------------------------------- checks


def _check_options(
    session_id: object,
    model: object,
    signal: object,
    on_pause: object,
    clock: object,
    on_event: object,
    lease_seconds: object,
) -> None:
    if type(session_id) is not str or not session_id:
        raise ValueError(f"session_id must be a non-empty str, got {session_id!r}")
    if not callable(getattr(model, "stream", None)):
        raise TypeError(f"model must have a stream(request) method, got {model!r}")
    if signal is not None and not isinstance(signal, CancelToken):
        raise TypeError(f"signal must be a CancelToken or None, got {signal!r}")
    if on_pause is not None and not callable(on_pause):
        raise TypeError(f"on_pause must be callable or None, got {on_pause!r}")
    if clock is not None and not callable(clock):
        raise TypeError(f"clock must be callable or None, got {clock!r}")
    if on_event is not None and not callable(on_event):
        raise TypeError(f"on_event must be callable or None, got {on_event!r}")
    if (
        type(lease_seconds) not in (int, float)
        or not math.isfinite(lease_seconds)  # type: ignore[arg-type]
        or lease_seconds <= 0  # type: ignore[operator]
    ):
        raise ValueError(f"lease_seconds must be a positive number, got {lease_seconds!r}")


def _default_owner() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"


def _start_prefix(events: Sequence[Event]) -> list[Event]:
    """``session.start`` and the initial ``message.accepted`` events (or the one
    failed ``run.finished`` of an invalid transcript)."""
    if type(events[0]) is not SessionStartEvent:
        return [events[0]]
    accepted = itertools.takewhile(lambda event: type(event) is MessageAcceptedEvent, events[1:])
    return [events[0], *accepted]


def _start_problem(
    events: Sequence[Event],
    messages: Sequence[Any],
    registry: ToolRegistry,
    system: str | None,
    max_steps: int,
    budget: Budget | None,
) -> str | None:
    """How the stored session's start differs from what these arguments start, or
    ``None``. The engine itself normalizes the arguments: a probe loop is built with
    them and primed (no hooks, so nothing of the caller's runs), and its first
    events are compared with the stored ones, byte for byte."""
    stored = _start_prefix(events)
    probe = agent_loop(
        messages,
        tools=registry,
        system=system,
        max_steps=max_steps,
        budget=budget,
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


def _tools_problem(registry: ToolRegistry, recorded: Sequence[ToolSpec]) -> str | None:
    """Whether the registry can serve the tools the session was started with (the
    check DESIGN §17 gives ``drive``: names and parameter schemas)."""
    have = {spec.name: spec for spec in registry.specs()}
    for spec in recorded:
        mine = have.get(spec.name)
        if mine is None:
            return f"the session offers tool {spec.name!r}, and the tools given have none"
        if mine.parameters != spec.parameters:
            return (
                f"tool {spec.name!r} takes other parameters than the session was started "
                f"with: {mine.parameters!r} instead of {spec.parameters!r}"
            )
    return None
