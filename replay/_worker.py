"""The fleet: one worker runs every runnable session of a store (DESIGN §29).

Theory of operation
-------------------
A :class:`Worker` is a pool of threads over one :class:`SQLiteStore`. A dispatcher
(the thread that calls :meth:`Worker.run`) lists the store's runnable sessions
(:meth:`SQLiteStore.runnable`: new ones stored by :func:`replay.submit`, ones whose
worker died, parked ones with an answer waiting) and hands each to a thread, which
claims it by its lease and advances it with :func:`replay.run_durable` -- with the
model and tools the *factory* gives for that session (from its stored row: its
``config`` names its tools and system prompt). A session another worker leased
first is skipped (``SessionLeased``, ``StoreConflict``): several workers, threads or
processes, may serve one store, and no session is advanced by two at once.

- **Draining.** :meth:`Worker.stop` (the CLI calls it on SIGTERM and Ctrl-C): no
  new session is claimed, and each session in progress stops at its next
  side-effect boundary, its events committed and its lease released, with no
  effect in flight; the effect running when ``stop`` was called finishes first.
  The store is left with every session resumable, nothing half-written.
- **Rate limits.** A :class:`RateLimit` per provider (the factory's
  :attr:`SessionSetup.provider`): requests and tokens per minute (token buckets
  refilled continuously; a call's tokens, from its response's ``usage``, are
  charged when it ends), at most ``concurrent`` calls at a time, and a
  ``ModelError`` with ``retry_after`` (the provider's ``retry-after``) pauses every
  call to that provider for that long, then the call is made again (nothing of the
  failed call was recorded: it never reached the loop), up to ``retries`` times.
- **Tasks and group commit.** With ``tasks=N`` each thread runs an asyncio event
  loop with up to N sessions at once (:func:`replay.arun_durable`'s driver; the
  store used from the loop's thread), claimed as above. The commits the loop's
  sessions ask for during one turn of the loop wait for its next turn, which makes
  them all in one write transaction (``_Group``, ``SQLiteStore._append_group``):
  one ``BEGIN``/``COMMIT`` for many sessions, each session's effect still after its
  own commit (the write-ahead rule), a session whose write is refused told so
  alone.
- **Stats.** :class:`WorkerStats`: sessions finished by status, parked, stopped,
  skipped and failed, and sessions per second.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import os
import secrets
import socket
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from typing import Any, Final

import msgspec

from agentloop import AgentLoopError, ModelError, ModelRequest, ModelResponse, RunResult
from agentloop._spi import model_method

from ._durable import Parked, _arun, _Group, _Options, _run
from ._store import SessionInfo, SessionLeased, SQLiteStore, StoreConflict, _check_lease, _Claim

__all__ = ["RateLimit", "SessionSetup", "Worker", "WorkerError", "WorkerStats", "work"]

_logger: Final = logging.getLogger("replay")


class WorkerError(AgentLoopError):
    """The worker cannot run: a bad option, or a factory that is not one."""


class RateLimit(msgspec.Struct, frozen=True, kw_only=True):
    """How hard a worker may call one provider.

    Attributes:
        requests_per_minute: model calls per minute (``None``: no limit).
        tokens_per_minute: tokens (input + output, from each response's ``usage``)
            per minute (``None``: no limit). A call that ends in debt makes the
            next ones wait until the bucket is positive again.
        concurrent: model calls in flight at once (``None``: no limit).
        retries: how many times a call that failed with a ``retry_after`` is made
            again after waiting that long (each wait pauses the whole provider).
    """

    requests_per_minute: float | None = None
    tokens_per_minute: float | None = None
    concurrent: int | None = None
    retries: int = 3

    def __post_init__(self) -> None:
        for name in ("requests_per_minute", "tokens_per_minute"):
            value = getattr(self, name)
            if value is not None and not (type(value) in (int, float) and 0 < value < 1e300):
                raise WorkerError(f"RateLimit.{name} must be a positive number, got {value!r}")
        concurrent = self.concurrent
        if concurrent is not None and not (type(concurrent) is int and concurrent > 0):
            raise WorkerError(f"RateLimit.concurrent must be a positive int, got {concurrent!r}")
        if not (type(self.retries) is int and self.retries >= 0):
            raise WorkerError(f"RateLimit.retries must be an int, 0 or more, got {self.retries!r}")


class SessionSetup(msgspec.Struct, frozen=True, kw_only=True):
    """What a worker's factory gives for one session.

    Attributes:
        model: the model (sync: ``stream``).
        tools: the tools (they must offer the session's).
        provider: the name its calls are rate-limited under (a key of the worker's
            ``limits``; ``None``: not limited).
        options: more :func:`replay.run_durable` options (``hooks``, ``output``,
            ``on_pause``, ``clock``, ``tool_workers``, ...; not ``owner`` or
            ``lease_seconds``: the worker's).
    """

    model: Any
    tools: Any
    provider: str | None = None
    options: dict[str, Any] = msgspec.field(default_factory=dict)


#: A worker's factory: the setup for a session, from its stored row.
Factory = Callable[[SessionInfo], SessionSetup]


class WorkerStats(msgspec.Struct, kw_only=True):
    """What a worker did.

    Attributes:
        finished: sessions it ran to their end, by status (``completed``, ...).
        parked: sessions it left parked on a pause (waiting for an answer).
        stopped: sessions it left at a boundary when it was stopped (resumable).
        skipped: sessions another worker had claimed (or finished) first (not
            those already leased to a live worker when listed). Each worker
            counts those the others took from its own list: the sum over several
            processes counts a session once per other process that listed it.
        failed: sessions whose run raised (the error is logged to the ``replay``
            logger; the session is left resumable from its last commit).
        seconds: how long it ran.
    """

    finished: dict[str, int] = msgspec.field(default_factory=dict)
    parked: int = 0
    stopped: int = 0
    skipped: int = 0
    failed: int = 0
    seconds: float = 0.0

    @property
    def advanced(self) -> int:
        """Sessions it ran to their end or to a parking pause."""
        return sum(self.finished.values()) + self.parked

    @property
    def per_second(self) -> float:
        """Sessions advanced per second."""
        return self.advanced / self.seconds if self.seconds > 0 else 0.0

    def line(self) -> str:
        """The progress line."""
        statuses = ", ".join(f"{count} {status}" for status, count in sorted(self.finished.items()))
        return (
            f"{self.advanced} sessions ({statuses or 'none finished'}; {self.parked} parked), "
            f"{self.stopped} stopped, {self.skipped} skipped, {self.failed} failed, "
            f"{self.seconds:.1f} s, {self.per_second:.0f}/s"
        )

    def to_dict(self) -> dict[str, Any]:
        """The JSON stats (``--json``)."""
        return {
            **msgspec.structs.asdict(self),
            "advanced": self.advanced,
            "per_second": round(self.per_second, 3),
        }


# --------------------------------------------------------------------------- rate limits


class _Bucket:
    """A token bucket refilled continuously at ``per_minute / 60`` per second, up to
    ``per_minute``; it may go into debt (a call's tokens are known at its end)."""

    __slots__ = ("capacity", "level", "rate", "updated")

    def __init__(self, per_minute: float, now: float) -> None:
        self.capacity = per_minute
        self.rate = per_minute / 60.0
        self.level = per_minute
        self.updated = now

    def refill(self, now: float) -> None:
        self.level = min(self.capacity, self.level + (now - self.updated) * self.rate)
        self.updated = now

    def wait(self, amount: float) -> float:
        """Seconds until ``amount`` is there (0: now)."""
        return 0.0 if self.level >= amount else (amount - self.level) / self.rate


class _Limiter:
    """One provider's limits, shared by every thread of a worker."""

    def __init__(self, limit: RateLimit, stop: threading.Event, clock: Callable[[], float]):
        self.limit = limit
        self.stop = stop
        self.clock = clock
        now = clock()
        self.lock = threading.Lock()
        self.requests = (
            None if limit.requests_per_minute is None else _Bucket(limit.requests_per_minute, now)
        )
        self.tokens = (
            None if limit.tokens_per_minute is None else _Bucket(limit.tokens_per_minute, now)
        )
        self.slots = (
            None if limit.concurrent is None else threading.BoundedSemaphore(limit.concurrent)
        )
        self.blocked_until = 0.0

    def _delay(self, now: float) -> float:
        delay = self.blocked_until - now
        for bucket, amount in ((self.requests, 1.0), (self.tokens, 0.0)):
            if bucket is not None:
                bucket.refill(now)
                delay = max(delay, bucket.wait(amount) if amount else -bucket.level / bucket.rate)
        return delay

    def _sleep(self, seconds: float) -> None:
        if self.stop.wait(seconds):
            raise _Draining

    def _take(self) -> float:
        """Take one request if the buckets allow it now (0); else the seconds to
        wait before trying again."""
        with self.lock:
            delay = self._delay(self.clock())
            if delay <= 0:
                if self.requests is not None:
                    self.requests.level -= 1.0
                return 0.0
        return min(delay, 1.0)

    def begin(self) -> None:
        """Wait for a slot and the buckets; take one request."""
        if self.slots is not None:
            while not self.slots.acquire(timeout=0.1):
                if self.stop.is_set():
                    raise _Draining
        try:
            while delay := self._take():
                self._sleep(delay)
        except BaseException:
            self.end(None)
            raise

    async def abegin(self) -> None:
        """:meth:`begin` for an event loop's sessions (a worker's ``tasks``): waits
        with ``asyncio.sleep``, so the loop's other sessions go on meanwhile."""
        import asyncio

        if self.slots is not None:
            while not self.slots.acquire(blocking=False):
                if self.stop.is_set():
                    raise _Draining
                await asyncio.sleep(0.01)
        try:
            while delay := self._take():
                if self.stop.is_set():
                    raise _Draining
                await asyncio.sleep(delay)
            if self.stop.is_set():
                raise _Draining
        except BaseException:
            self.end(None)
            raise

    def end(self, response: ModelResponse | None) -> None:
        """A call ended: charge its tokens, free its slot."""
        usage = None if response is None else response.usage
        if usage is not None and self.tokens is not None:
            with self.lock:
                self.tokens.refill(self.clock())
                self.tokens.level -= usage.input_tokens + usage.output_tokens
        if self.slots is not None:
            self.slots.release()

    def block(self, seconds: float) -> None:
        """The provider asked to wait ``seconds`` (``retry-after``)."""
        with self.lock:
            self.blocked_until = max(self.blocked_until, self.clock() + seconds)


class _Draining(BaseException):
    """The worker stopped while a call waited for its rate limit: the call is not
    made (the session stays resumable at the boundary before it)."""


class _LimitedModel:
    """A model whose calls go through a :class:`_Limiter`."""

    def __init__(self, model: Any, limiter: _Limiter) -> None:
        self.model = model
        self.limiter = limiter

    def stream(self, request: ModelRequest) -> Iterator[Any]:
        limiter = self.limiter
        attempt = 0
        while True:
            limiter.begin()
            response = None
            started = False
            try:
                for item in self.model.stream(request):
                    started = True
                    if type(item) is ModelResponse:
                        response = item
                    yield item
                return
            except ModelError as exc:
                self._retry(exc, started, attempt)
            finally:
                limiter.end(response)
            attempt += 1

    async def astream(self, request: ModelRequest) -> AsyncIterator[Any]:
        limiter = self.limiter
        attempt = 0
        while True:
            await limiter.abegin()
            response = None
            started = False
            try:
                async for item in self.model.astream(request):
                    started = True
                    if type(item) is ModelResponse:
                        response = item
                    yield item
                return
            except ModelError as exc:
                self._retry(exc, started, attempt)
            finally:
                limiter.end(response)
            attempt += 1

    def _retry(self, exc: ModelError, started: bool, attempt: int) -> None:
        """Raise ``exc`` unless the call may be made again (nothing of it reached
        the loop, the provider said when, retries are left): then every call to
        the provider waits that long."""
        if started or exc.retry_after is None or attempt >= self.limiter.limit.retries:
            raise exc
        self.limiter.block(exc.retry_after)


# --------------------------------------------------------------------------- the worker


class Worker:
    """Runs every runnable session of a store with a pool of threads.

    >>> import replay
    >>> from agentloop import ScriptedModel, ScriptedResponse, UserMessage
    >>> store = replay.SQLiteStore(":memory:")
    >>> replay.submit(store, "s1", [UserMessage("u1", "Hi")], tools=[])
    >>> def factory(info):
    ...     return replay.SessionSetup(
    ...         model=ScriptedModel([ScriptedResponse.text("r1", "Hello.")]), tools=[]
    ...     )
    >>> replay.Worker(store, factory, threads=2).run().finished
    {'completed': 1}

    Args:
        store: the store (a :class:`SQLiteStore`; its object is shared by the
            threads, which SQLite serializes anyway).
        factory: ``factory(info) -> SessionSetup`` for each session it runs
            (``info``: the session's :class:`SessionInfo`, whose ``config`` says
            how it was started). It is called from the worker's threads.
        threads: sessions in progress at once (the concurrency cap); with
            ``tasks``, threads each running an event loop.
        tasks: run up to this many sessions at once in each thread, on an
            asyncio event loop (models need ``astream``, as for
            :func:`replay.arun_durable`; ``async def`` tools run in the loop, sync
            ones in a pool thread), their commits grouped: the commits the loop's
            sessions ask for in one turn of the loop are made in one write
            transaction (DESIGN §29). ``None`` (the default): one session per
            thread, sync models, each commit its own.
        limits: a :class:`RateLimit` per provider name.
        lease_seconds: the leases' length (see :func:`replay.run_durable`).
        forever: keep polling for sessions when none is runnable (until
            :meth:`stop`); by default the worker returns once none is left.
        poll: seconds between two looks at the store when none is runnable.
        on_progress: called with the :class:`WorkerStats` so far, about every
            ``progress`` seconds, from the dispatching thread.
        progress: seconds between two ``on_progress`` calls.
    """

    def __init__(
        self,
        store: SQLiteStore,
        factory: Factory,
        *,
        threads: int = 4,
        tasks: int | None = None,
        limits: Mapping[str, RateLimit] | None = None,
        lease_seconds: float = 30.0,
        forever: bool = False,
        poll: float = 0.5,
        on_progress: Callable[[WorkerStats], None] | None = None,
        progress: float = 1.0,
    ) -> None:
        if not isinstance(store, SQLiteStore):
            raise WorkerError(f"store must be a replay.SQLiteStore, got {store!r}")
        if not callable(factory):
            raise WorkerError(f"factory must be callable (info -> SessionSetup), got {factory!r}")
        if type(threads) is not int or threads < 1:
            raise WorkerError(f"threads must be a positive int, got {threads!r}")
        if tasks is not None and (type(tasks) is not int or tasks < 1):
            raise WorkerError(f"tasks must be a positive int or None, got {tasks!r}")
        for name, value in (("poll", poll), ("progress", progress)):
            if type(value) not in (int, float) or not 0 < value < 1e9:
                raise WorkerError(f"{name} must be a positive number of seconds, got {value!r}")
        limits = dict(limits or {})
        for name, limit in limits.items():
            if type(limit) is not RateLimit:
                raise WorkerError(f"limits[{name!r}] must be a RateLimit, got {limit!r}")
        self.store = store
        self.factory = factory
        self.threads = threads
        self.tasks = tasks
        self.lease_seconds = lease_seconds
        self.forever = forever
        self.poll = float(poll)
        self.on_progress = on_progress
        self.progress = float(progress)
        self._stop = threading.Event()
        self._limiters = {
            name: _Limiter(limit, self._stop, time.monotonic) for name, limit in limits.items()
        }
        _check_lease("worker", lease_seconds)
        self._stats = WorkerStats()
        # Sessions whose run raised: not tried again by this worker (they stay
        # resumable for the next one, or for run_durable, once fixed).
        self._failed: set[str] = set()
        self._lock = threading.Lock()
        # The listed sessions not claimed yet, those in progress, and what the
        # threads claiming take turns with.
        self._pending: collections.deque[str] = collections.deque()
        self._listed: dict[str, str | None] = {}  # (each one's lease owner when listed)
        # A claim passed over one leased since the listing, its holder not looked at
        # (see SQLiteStore._claim_some): list again before ending.
        self._unlooked = False
        self._busy: set[str] = set()
        self._claiming = threading.Lock()
        self._broken = threading.Event()  # a thread failed: the others end too
        self._errors: list[BaseException] = []
        self._owner = f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"

    def stop(self) -> None:
        """Drain: claim nothing more; sessions in progress stop at their next
        side-effect boundary (committed, resumable). Safe from a signal handler
        and from any thread."""
        self._stop.set()

    @property
    def stopping(self) -> bool:
        """Whether :meth:`stop` was called."""
        return self._stop.is_set()

    def stats(self) -> WorkerStats:
        """A copy of the stats so far."""
        with self._lock:
            return msgspec.structs.replace(self._stats, finished=dict(self._stats.finished))

    def run(self) -> WorkerStats:
        """Run sessions until none is runnable (or, ``forever``, until :meth:`stop`);
        then wait for the threads. Returns the stats."""
        started = time.monotonic()
        self._pending.clear()
        self._busy.clear()
        self._unlooked = False
        self._errors.clear()
        threads = [
            threading.Thread(
                target=self._serve,
                args=(f"{self._owner}:{index}",),
                name=f"replay worker {index}",
                daemon=True,
            )
            for index in range(self.threads)
        ]
        for thread in threads:
            thread.start()
        shown = started
        try:
            for thread in threads:
                while thread.is_alive():
                    if self.on_progress is None:
                        thread.join(1.0)
                        continue
                    thread.join(max(0.0, shown + self.progress - time.monotonic()))
                    now = time.monotonic()
                    if now - shown >= self.progress:
                        shown = now
                        self.on_progress(self._stamp(started))
        except BaseException:
            self._broken.set()  # (e.g. on_progress raised: the threads stop, then it goes on)
            for thread in threads:
                thread.join()
            raise
        if self._errors:
            raise self._errors[0]
        return self._stamp(started)

    def _stamp(self, started: float) -> WorkerStats:
        with self._lock:
            self._stats.seconds = time.monotonic() - started
        return self.stats()

    def _serve(self, owner: str) -> None:
        """A thread: claim a session, run it, again, until none is left (or the
        worker stops)."""
        try:
            if self.tasks is not None:
                import asyncio

                asyncio.run(self._serve_tasks(owner, self.tasks))
                return
            while True:
                jobs = self._next(owner)
                if not isinstance(jobs, list):  # (None: waiting, it never gives False)
                    return
                [(session_id, claim)] = jobs
                outcome = None
                try:
                    outcome = self._advance(session_id, owner, claim)
                finally:
                    self._done(session_id, outcome)
        except BaseException as exc:  # (the store failed: run() raises it)
            self._errors.append(exc)
            self._broken.set()

    async def _serve_tasks(self, owner: str, tasks: int) -> None:
        """A thread's event loop: up to ``tasks`` sessions at once, claimed as
        :meth:`_serve` does, their commits grouped (:class:`_Group`)."""
        import asyncio

        group = _Group(self.store)
        running: dict[asyncio.Task[None], str] = {}
        try:
            while True:
                job: list[tuple[str, _Claim | None]] | bool | None = False
                if len(running) < tasks:
                    job = self._next(owner, not running, tasks - len(running))
                    if isinstance(job, list):
                        for session_id, claim in job:
                            task = asyncio.ensure_future(
                                self._aadvance(session_id, owner, claim, group)
                            )
                            running[task] = session_id
                        continue
                    if job is None and not running:
                        return
                # Full, none claimable now, or none left: wait for a session to end
                # (or, none claimable, poll again soon).
                ended, _ = await asyncio.wait(
                    running,
                    timeout=None if job is None or len(running) >= tasks else 0.01,
                    return_when=asyncio.FIRST_COMPLETED,
                )
                for task in ended:
                    del running[task]
        finally:
            # (Only when this thread fails.) A session's task ends at once, as at a
            # crash; one that never started still holds its claim's lease.
            for task in running:
                task.cancel()
            if running:
                await asyncio.wait(running)
            for session_id in running.values():
                with contextlib.suppress(Exception):
                    self.store.release(session_id, owner)  # (a no-op if its run did)
                self._done(session_id, None)

    def _done(self, session_id: str, outcome: str | None) -> None:
        with self._claiming:
            self._busy.discard(session_id)
        if outcome is not None:
            self._count(outcome)

    def _count(self, outcome: str, number: int = 1) -> None:
        with self._lock:
            stats = self._stats
            if outcome in ("parked", "stopped", "skipped", "failed"):
                setattr(stats, outcome, getattr(stats, outcome) + number)
            else:
                stats.finished[outcome] = stats.finished.get(outcome, 0) + number

    def _next(
        self, owner: str, wait: bool = True, count: int = 1
    ) -> list[tuple[str, _Claim | None]] | bool | None:
        """The next sessions for this thread (up to ``count``, in one claim),
        claimed by ``owner``; ``None`` when it should end (stopped, or none is left
        and not ``forever``); without ``wait``, ``False`` when none is claimable
        now but some may be soon.

        The sessions :meth:`SQLiteStore.runnable` listed are claimed one by one,
        each in one write transaction that passes over those another worker
        claimed (or finished) since: several workers on one store never build a
        session's run only to find it taken (nor read ``/proc`` for the workers
        that took them: see :meth:`SQLiteStore._claim_some`). The list is made
        again once it is used up (and before ending, when a claim passed over one
        so); when nothing is runnable, the thread waits ``poll`` seconds (10 ms
        while a session of this worker is in progress: it may leave work)."""
        store, pending, busy = self.store, self._pending, self._busy
        while True:
            with self._claiming:
                fresh = False
                while True:
                    if self._stop.is_set() or self._broken.is_set():
                        return None
                    if not pending:
                        if fresh and not self._unlooked:
                            break
                        failed = self._failed
                        listed = self._listed = store._runnable()
                        pending.extend(s for s in listed if s not in busy and s not in failed)
                        fresh, self._unlooked = True, False
                        continue
                    claims, skipped, unlooked = store._claim_some(
                        pending, owner, self.lease_seconds, self._listed, count
                    )
                    if skipped:
                        self._count("skipped", skipped)
                        self._unlooked = self._unlooked or unlooked
                    if claims:
                        busy.update(session_id for session_id, _ in claims)
                        return claims
                idle = not busy
            if idle and not self.forever:
                return None
            if not wait:
                return False
            self._stop.wait(self.poll if idle else min(self.poll, 0.01))

    def _advance(self, session_id: str, owner: str, claim: _Claim | None) -> str:
        """Run one claimed session; how it went (a status, or
        parked/stopped/skipped/failed). ``claim``: what the claim read (``None``:
        its rows could not be read; its run says why)."""
        try:
            checked = self._setup(session_id, owner, claim, False)
            if isinstance(checked, str):
                return checked
            outcome = _run(checked, self._stop)
        except BaseException as exc:
            return self._failed_as(session_id, exc)
        return _ended(outcome)

    async def _aadvance(
        self, session_id: str, owner: str, claim: _Claim | None, group: _Group
    ) -> None:
        """:meth:`_advance` in a thread's event loop (``tasks``); counted."""
        outcome = None
        try:
            checked = self._setup(session_id, owner, claim, True)
            if isinstance(checked, str):
                outcome = checked
            else:
                outcome = _ended(await _arun(checked, group, self._stop))
        except BaseException as exc:
            outcome = self._failed_as(session_id, exc)
        finally:
            self._done(session_id, outcome)

    def _failed_as(self, session_id: str, exc: BaseException) -> str:
        """How a session's run that raised ``exc`` counts (or ``exc`` goes on)."""
        if isinstance(exc, (SessionLeased, StoreConflict)):
            return "skipped"
        if isinstance(exc, _Draining):
            return "stopped"
        if not isinstance(exc, Exception):
            raise exc
        _logger.error("worker: session %r failed", session_id, exc_info=exc)
        self._failed.add(session_id)
        return "failed"

    def _setup(
        self, session_id: str, owner: str, claim: _Claim | None, asynchronous: bool
    ) -> _Options | str:
        """The claimed session's run, as the factory sets it up; or how it counts
        when there is none to run (``stopped``)."""
        store = self.store
        if claim is None:
            info = store.session(session_id)
            claimed = None
        else:
            info, events, leased = store._claimed(session_id, owner, self.lease_seconds, claim)
            # (Not leased: a parked tree's root, whose run leases it itself.)
            claimed = (info, events) if leased else None
        if self._stop.is_set():  # (stopped while it was claimed)
            store.release(session_id, owner)  # (a no-op when not leased)
            return "stopped"
        try:
            setup = self.factory(info)
            if type(setup) is not SessionSetup:
                raise WorkerError(
                    f"the factory returned {setup!r} for session {session_id!r}, not a "
                    "replay.SessionSetup"
                )
            model = setup.model
            limiter = None if setup.provider is None else self._limiters.get(setup.provider)
            if limiter is not None:
                model_method(model, asynchronous)  # (before it is wrapped)
                model = _LimitedModel(model, limiter)
            options = {
                **setup.options,
                "owner": owner,
                "lease_seconds": self.lease_seconds,
            }
            checked = _Options(
                asynchronous, store, session_id, None, model, setup.tools, options, "Worker"
            )
        except BaseException:
            store.release(session_id, owner)  # (a no-op when not leased)
            raise
        checked.claimed = claimed
        return checked


def _ended(outcome: tuple[RunResult | Parked, bool] | None) -> str:
    """How a run's outcome counts: a status, parked, stopped or skipped."""
    if outcome is None:
        return "stopped"
    result, advanced = outcome
    if not advanced:
        return "skipped"
    return "parked" if type(result) is Parked else result.status  # type: ignore[union-attr]


def work(store: SQLiteStore, factory: Factory, **options: Any) -> WorkerStats:
    """``Worker(store, factory, **options).run()``: run every runnable session of
    the store; the stats."""
    return Worker(store, factory, **options).run()
