"""The drivers' executors for parallel tool batches (DESIGN §18).

Theory of operation
-------------------
With ``parallel_tools=True`` the engine yields a :class:`~agentloop.ToolBatch` and
yields the same batch again after each result, until the last. A driver answers it
with an executor: the first time the executor sees a batch, it starts every call;
each reply is then the next result *to complete*, so the log records results in
completion order (each stamped by the driver's clock when it is sent) and the
transcript still gets them in the model's order. Two executors follow that one
protocol (:class:`_Batches` holds what they share):

- :class:`ThreadPoolBatches` (:func:`agentloop.run`): the calls on a thread pool of
  ``tool_workers`` threads (default :data:`DEFAULT_TOOL_WORKERS`, started as needed).
- :class:`TaskBatches` (:func:`agentloop.arun`): one asyncio task per call, at most
  ``tool_workers`` running at once when given; an ``async def`` tool is awaited, a
  sync one runs in a worker thread (a reused one: :func:`~agentloop._offload.offload`).

Cancellation stays cooperative, as for a sequential tool: a call checks the
:class:`~agentloop.CancelToken` right before it starts, so once the token is set,
calls not started yet never start; calls already running finish and their results
are recorded (nothing that happened is lost); then the driver sends the
``Cancel``. A ``BaseException`` from a tool (``KeyboardInterrupt``) reaches the
driver, which records it as a ``Cancel`` and re-raises it, as for a sequential
tool. When the run ends, the executor is closed: the thread pool waits for its
threads (they cannot be interrupted); the asyncio executor cancels the tool tasks
still running (the awaiting task was cancelled, or a tool raised) and awaits them,
so no task outlives the run.

A loop resumed from a log that stops inside a batch yields the whole batch again:
the first batch an executor sees runs only the calls the log has no result for
(:func:`answered`).

``asyncio`` is imported on first use: ``import agentloop`` stays light for sync
programs.
"""

from __future__ import annotations

import contextvars
from collections.abc import Awaitable, Callable, Collection, Iterator
from concurrent.futures import Future, ThreadPoolExecutor, as_completed
from typing import TYPE_CHECKING, Generic, TypeVar

from ._events import EventLog, PlanCommitEvent, ToolErrorEvent, ToolResultEvent
from ._messages import Content, ToolCall
from ._protocol import ToolBatch, ToolRequest

if TYPE_CHECKING:
    import asyncio

    from ._signals import CancelToken

__all__ = ["DEFAULT_TOOL_WORKERS", "TaskBatches", "ThreadPoolBatches"]

#: Threads for a run's tool batches when ``tool_workers`` is not given (threads are
#: started only as calls need them).
DEFAULT_TOOL_WORKERS = 32

#: What a call produced: ``(content, is_error)`` (``None`` in its place: the call
#: never started, the run was cancelled first).
Outcome = tuple[Content, bool]
#: The next result of a batch to complete, for the driver: the request and its
#: outcome; ``None`` once the run was cancelled and every call that started has been
#: reported.
Done = tuple[ToolRequest, Outcome] | None

Handle = TypeVar("Handle")


def answered(log: EventLog, batch: ToolBatch) -> frozenset[str]:
    """The calls of ``batch`` whose results ``log`` holds already.

    A loop resumed from a log that stops inside a batch yields the whole batch
    again; the calls answered before it stopped have their ``tool.result`` /
    ``tool.error`` after the step's ``plan.commit``, and must not run twice.
    """
    ids = {request.call.id for request in batch.requests}
    found: set[str] = set()
    index = len(log)
    while True:  # back to the step's plan.commit, which comes before any batch
        index -= 1
        event = log[index]
        kind = type(event)
        if kind is PlanCommitEvent:
            return frozenset(found)
        if kind is ToolResultEvent or kind is ToolErrorEvent:
            call_id = event.message.tool_call_id  # type: ignore[union-attr]
            if call_id in ids:
                found.add(call_id)


class _Batches(Generic[Handle]):
    """What both executors keep: the batch being answered and the request each
    running call (a future, a task) answers.

    A subclass starts the calls (:meth:`_start`, each through :meth:`_starts`) and
    reports their results in completion order.
    """

    __slots__ = ("_batch", "_calls", "_log", "_signal", "_workers")

    def __init__(
        self, signal: CancelToken | None, workers: int | None, log: EventLog | None
    ) -> None:
        self._signal = signal
        self._workers = workers
        self._log = log
        self._batch: ToolBatch | None = None
        self._calls: dict[Handle, ToolRequest] = {}

    def _begin(self, batch: ToolBatch) -> bool:
        """Start ``batch``'s calls if it is new; ``False`` when the run was cancelled
        before it started (then none starts, and there is nothing to report)."""
        if batch is self._batch:
            return True
        if not self._starts():
            return False
        requests: Collection[ToolRequest] = batch.requests
        log = self._log
        if self._batch is None and log is not None:  # the first: maybe a resumed one
            done = answered(log, batch)
            requests = [request for request in requests if request.call.id not in done]
        self._batch = batch
        self._calls = self._start(requests)
        return True

    def _starts(self) -> bool:
        """Whether a call may start now: not once the run was cancelled."""
        signal = self._signal
        return signal is None or not signal.cancelled

    #: Starts each call of ``requests``: the handles, each with its request.
    _start: Callable[[Collection[ToolRequest]], dict[Handle, ToolRequest]]

    def _reported(self, handle: Handle, outcome: Outcome | None) -> Done:
        """What to send for ``handle``'s ``outcome``: nothing for a call that never
        started (look for the next one)."""
        return None if outcome is None else (self._calls[handle], outcome)


class ThreadPoolBatches(_Batches["Future[Outcome | None]"]):
    """Runs the calls of each :class:`~agentloop.ToolBatch` on a thread pool.

    :meth:`next_result` is called once per reply the batch needs; it returns the
    next request and its ``(content, is_error)`` to complete, or ``None`` when the
    run was cancelled and no started call is left to report.
    """

    __slots__ = ("_done", "_execute", "_pool")

    def __init__(
        self,
        execute: Callable[[ToolCall], Outcome],
        signal: CancelToken | None,
        workers: int | None,
        log: EventLog | None = None,
    ) -> None:
        super().__init__(signal, DEFAULT_TOOL_WORKERS if workers is None else workers, log)
        self._execute = execute
        self._pool: ThreadPoolExecutor | None = None
        self._done: Iterator[Future[Outcome | None]] = iter(())

    def next_result(self, batch: ToolBatch) -> Done:
        """The next result of ``batch`` to complete (starting the batch if it is new)."""
        if not self._begin(batch):
            return None
        for future in self._done:
            done = self._reported(future, future.result())  # a BaseException goes to run()
            if done is not None:
                return done
        return None

    def _start(
        self, requests: Collection[ToolRequest]
    ) -> dict[Future[Outcome | None], ToolRequest]:
        pool = self._pool
        if pool is None:
            pool = self._pool = ThreadPoolExecutor(
                self._workers, thread_name_prefix="agentloop-tool"
            )
        calls = {
            # Each call in a copy of the caller's context (as asyncio.to_thread does):
            # context variables set around run() reach the tool.
            pool.submit(contextvars.copy_context().run, self._call, request.call): request
            for request in requests
        }
        self._done = as_completed(calls)
        return calls

    def _call(self, call: ToolCall) -> Outcome | None:
        return self._execute(call) if self._starts() else None

    def close(self) -> None:
        """Let no call start any more; wait for the running ones (the run is over)."""
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)


class TaskBatches(_Batches["asyncio.Task[Outcome | BaseException | None]"]):
    """Runs the calls of each :class:`~agentloop.ToolBatch` as asyncio tasks.

    :meth:`next_result` is :meth:`ThreadPoolBatches.next_result`, awaited. Each call
    is a task (``agentloop-tool <call id>``), at most ``workers`` of them running at
    once when given (a semaphore; otherwise all at once).
    """

    __slots__ = ("_execute", "_finished", "_left", "_limit")

    def __init__(
        self,
        execute: Callable[[ToolCall], Awaitable[Outcome]],
        signal: CancelToken | None,
        workers: int | None,
        log: EventLog | None = None,
    ) -> None:
        super().__init__(signal, workers, log)
        self._execute = execute
        self._limit: asyncio.Semaphore | None = None
        self._finished: asyncio.Queue[asyncio.Task[Outcome | BaseException | None]] | None = None
        self._left = 0  # tasks of the batch not reported yet

    async def next_result(self, batch: ToolBatch) -> Done:
        """The next result of ``batch`` to complete (starting the batch if it is new)."""
        if not self._begin(batch):
            return None
        finished = self._finished
        assert finished is not None  # made by _start
        while self._left:
            task = await finished.get()
            self._left -= 1
            outcome = task.result()  # CancelledError if the tool raised it: the driver's
            if isinstance(outcome, BaseException):
                raise outcome  # the driver records it as a Cancel, then it goes on
            done = self._reported(task, outcome)
            if done is not None:
                return done
        return None

    def _start(
        self, requests: Collection[ToolRequest]
    ) -> dict[asyncio.Task[Outcome | BaseException | None], ToolRequest]:
        import asyncio

        if self._finished is None:
            self._finished = asyncio.Queue()
            if self._workers is not None:
                self._limit = asyncio.Semaphore(self._workers)
        put = self._finished.put_nowait  # in completion order: done callbacks run in it
        calls = {}
        for request in requests:
            task = asyncio.create_task(
                self._call(request.call), name=f"agentloop-tool {request.call.id}"
            )
            task.add_done_callback(put)
            calls[task] = request
        self._left = len(calls)
        return calls

    async def _call(self, call: ToolCall) -> Outcome | BaseException | None:
        limit = self._limit
        if limit is None:
            return await self._run(call)
        async with limit:
            return await self._run(call)

    async def _run(self, call: ToolCall) -> Outcome | BaseException | None:
        import asyncio

        if not self._starts():
            return None
        try:
            return await self._execute(call)
        except asyncio.CancelledError:
            raise
        except BaseException as exc:
            # Out of a task, KeyboardInterrupt and SystemExit would stop the event loop
            # itself, past the driver: it is handed to next_result(), which raises it.
            return exc

    async def close(self) -> None:
        """Cancel the calls still running and wait for them (the run is over)."""
        import asyncio

        running = [task for task in self._calls if not task.done()]
        for task in running:
            task.cancel()
        if running:
            await asyncio.wait(running)
