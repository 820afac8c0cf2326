"""Sync work off the event loop: :func:`offload`, ``asyncio.to_thread`` for the async drivers.

The async drivers run a sync tool (and ``arun_durable`` its store's calls) in a
worker thread, so the event loop keeps serving the other sessions while it runs.
``asyncio.to_thread`` costs about as much CPU per call as a whole step of the
engine: a ``concurrent.futures.Future`` (with its ``Condition``), the executor's
work queue and idle semaphore (which the loop's thread and the worker contend
for), then a second, asyncio future chained to the first.

:func:`offload` does the same job with less: a process-wide pool of reused
threads, each asleep on its own lock. A call hands its job to an idle thread
(one ``lock.release``) and awaits a plain asyncio future, which the thread
settles with one ``call_soon_threadsafe``. The function runs in a copy of the
caller's context, as under ``to_thread`` (``idempotency_key()``, the agent
tool's caller). The pool grows on demand to at most ``min(32, cpus + 4)``
threads (``to_thread``'s default executor's bound; calls beyond it wait their
turn) and a thread idle for a minute ends. A call made *from* a pool thread (a sync
tool that runs ``asyncio.run(arun(...))`` of its own) never waits for a free
thread, it may start one past the bound: the pool is shared by every event loop of
the process (``to_thread`` had one executor per loop), and pool threads waiting
for each other's turn would wait forever.

Handing over without a shared queue: a thread with nothing to do appends itself
to ``idle`` and then looks at ``backlog`` again; a call that found no idle thread
and no room to start one appends its job to ``backlog`` and then looks at
``idle`` again. Whichever comes second sees the other, so a job never waits in
the backlog while a thread sleeps. A thread leaves ``idle`` itself (to take the
backlog, or to end) with ``deque.remove``; when that fails a caller has just
taken it, and a job is coming.

At the process's exit the pool drains, as ``to_thread``'s executor is joined: the
threads are daemon threads (an idle one must not hold the exit up for a minute),
so an ``atexit`` hook (:func:`_drain`) ends the idle ones and waits for the calls
still running and those waiting their turn (a sync tool whose task was cancelled
still finishes what it does, as under ``to_thread``).
"""

from __future__ import annotations

import atexit
import collections
import contextlib
import contextvars
import functools
import os
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final, TypeVar

if TYPE_CHECKING:
    import asyncio

__all__ = ["offload"]

_T = TypeVar("_T")

#: How long a pool thread waits for work before it ends (seconds).
IDLE_SECONDS: Final = 60.0


class _Job:
    """One call: the function and its arguments, in its context, for a future."""

    __slots__ = ("args", "context", "fn", "future", "loop")

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        future: asyncio.Future[Any],
        fn: Callable[..., Any],
        args: tuple[Any, ...],
    ) -> None:
        self.loop = loop
        self.future = future
        self.fn = fn
        self.args = args
        self.context = contextvars.copy_context()

    def run(self) -> Callable[[], None]:
        """Run the call (in a pool thread); returns what hands its outcome over to
        the loop's thread (called once the thread is free for the next job)."""
        error: BaseException | None = None
        try:
            value = self.context.run(self.fn, *self.args)
        except StopIteration as exc:  # an asyncio future refuses it: it would never settle
            value, error = None, RuntimeError(f"{_name(self.fn)} raised StopIteration")
            error.__cause__ = exc
        except BaseException as exc:  # delivered to the caller, as to_thread does
            value, error = None, exc
        return functools.partial(_post, self.loop, self.future, value, error)


def _post(
    loop: asyncio.AbstractEventLoop,
    future: asyncio.Future[Any],
    value: Any,
    error: BaseException | None,
) -> None:
    """Hand an outcome over to ``loop``'s thread (from a pool thread)."""
    with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits any more
        loop.call_soon_threadsafe(_settle, future, value, error)


def _name(fn: Callable[..., Any]) -> str:
    return getattr(fn, "__qualname__", None) or repr(fn)


def _settle(future: asyncio.Future[Any], value: Any, error: BaseException | None) -> None:
    """Set ``future`` (in its loop's thread) unless its awaiter was cancelled meanwhile."""
    if future.cancelled():
        return
    if error is None:
        future.set_result(value)
    else:
        future.set_exception(error)


class _Thread:
    """A pool thread's mailbox: the lock it sleeps on, the job it is handed and the
    last job's outcome until it is delivered (kept here, not in a local variable,
    so that nothing of a finished job stays alive while the thread waits)."""

    __slots__ = ("deliver", "job", "wake")

    def __init__(self) -> None:
        self.wake = threading.Lock()
        self.wake.acquire()
        self.job: _Job | None = None
        self.deliver: Callable[[], None] | None = None


#: ``inside.pool`` is set in the pool's threads.
_inside: Final = threading.local()


class _Pool:
    """Reused worker threads (see the module's docstring)."""

    def __init__(self, size: int, idle_seconds: float) -> None:
        self.pid = os.getpid()
        self.size = size
        self.idle_seconds = idle_seconds
        self.idle: collections.deque[_Thread] = collections.deque()
        self.backlog: collections.deque[_Job] = collections.deque()
        self.lock = threading.Lock()  # guards threads (and the backlog's last check)
        self.threads = 0
        self.exiting = False  # set by _drain: a thread going idle ends
        self.running: set[threading.Thread] = set()  # what _drain joins

    def submit(self, job: _Job) -> None:
        """Run ``job`` on an idle thread, a new one, or the first thread free."""
        try:
            thread = self.idle.pop()
        except IndexError:
            pass
        else:
            thread.job = job
            thread.wake.release()
            return
        with self.lock:
            start = self.threads < self.size or getattr(_inside, "pool", False)
            if start:
                self.threads += 1
            else:
                self.backlog.append(job)
        if start:
            thread = _Thread()
            thread.job = job  # (not in the Thread's args: they live as long as it does)
            worker = threading.Thread(
                target=self._serve, args=(thread,), name="agentloop-offload", daemon=True
            )
            self.running.add(worker)
            worker.start()
            return
        self._recheck()

    def _recheck(self) -> None:
        """After a job went to the backlog: a thread that went idle meanwhile takes it."""
        try:
            thread = self.idle.pop()
        except IndexError:
            return
        try:
            job = self.backlog.popleft()
        except IndexError:  # a thread took it already
            self.idle.append(thread)
            return
        thread.job = job
        thread.wake.release()

    def _serve(self, thread: _Thread) -> None:
        _inside.pool = True
        job, thread.job = thread.job, None
        while job is not None:
            thread.deliver = job.run()
            job = None
            job = self._next(thread)
        self.running.discard(threading.current_thread())

    def _next(self, thread: _Thread) -> _Job | None:
        """The next job for ``thread``: the backlog's first, else one handed to it;
        ``None`` when it has been idle too long (it ends). The last job's outcome
        (``thread.deliver``) is delivered once ``thread`` is idle or has its next
        job, so the caller, should it call again at once, finds it idle."""
        deliver, thread.deliver = thread.deliver, None
        while True:
            try:
                job = self.backlog.popleft()
            except IndexError:
                pass
            else:
                if deliver is not None:
                    deliver()
                return job
            self.idle.append(thread)
            if deliver is not None:
                deliver()
                deliver = None
            if self.backlog and self._unidle(thread):
                continue
            if self.exiting and self._unidle(thread):
                return None  # (the process is exiting: _drain joins this thread)
            while not thread.wake.acquire(timeout=self.idle_seconds):
                if self._unidle(thread):
                    with self.lock:
                        if not self.backlog:
                            self.threads -= 1
                            return None
                    break
                # a caller took this thread from ``idle`` just now: its job is coming
            else:
                handed, thread.job = thread.job, None
                return handed

    def _unidle(self, thread: _Thread) -> bool:
        """Take ``thread`` out of ``idle``; ``False`` when a caller took it first."""
        try:
            self.idle.remove(thread)
        except ValueError:
            return False
        return True


_POOL: _Pool | None = None


def _pool() -> _Pool:
    """The process's pool: a new one in a forked child, where the parent's threads
    are not. (Two threads may make one each at first: harmless, each serves its jobs.)"""
    global _POOL
    pool = _POOL
    if pool is None or pool.pid != os.getpid():
        pool = _POOL = _Pool(min(32, (os.cpu_count() or 1) + 4), IDLE_SECONDS)
    return pool


def _drain(pool: _Pool | None = None) -> None:
    """At exit (``atexit``): wait for the pool's calls, running or waiting their
    turn, then for its threads to end (an idle one is woken to end at once)."""
    pool = _POOL if pool is None else pool
    if pool is None or pool.pid != os.getpid():
        return
    pool.exiting = True
    while True:
        try:
            thread = pool.idle.pop()
        except IndexError:
            break
        thread.job = None  # (woken with no job: it ends)
        thread.wake.release()
    for worker in list(pool.running):
        worker.join()


atexit.register(_drain)


async def offload(fn: Callable[..., _T], /, *args: Any) -> _T:
    """``await asyncio.to_thread(fn, *args)``, cheaper: ``fn`` runs in a reused
    pool thread in a copy of this context; its result or exception comes back
    here. A ``StopIteration`` comes back as a ``RuntimeError`` (asyncio cannot
    carry one). Cancelling the awaiting task does not stop ``fn``: its outcome is
    dropped."""
    import asyncio  # on first use: ``import agentloop`` stays free of asyncio

    loop = asyncio.get_running_loop()
    future: asyncio.Future[_T] = loop.create_future()
    _pool().submit(_Job(loop, future, fn, args))
    return await future
