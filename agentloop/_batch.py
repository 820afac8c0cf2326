"""The sync driver's executor for parallel tool batches (DESIGN §18).

Theory of operation
-------------------
With ``parallel_tools=True`` the engine yields a :class:`~agentloop.ToolBatch` and
yields the same batch again after each result, until the last. :func:`agentloop.run`
answers it with a :class:`ThreadPoolBatches`: the first time it sees a batch, every
call is submitted to a thread pool; each reply is then the next result *to
complete*, so the log records results in completion order (each stamped by the
driver's clock when it is sent) and the transcript still gets them in the model's
order.

Cancellation stays cooperative, as for a sequential tool: once the
:class:`~agentloop.CancelToken` is set, calls not started yet never start, calls
already running finish and their results are recorded (nothing that happened is
lost), then the driver sends the ``Cancel``. The pool lives as long as the run
(created on the first batch) and :meth:`ThreadPoolBatches.close` waits for its
threads, so ``run`` leaves no tool running behind it.
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor, as_completed

from ._messages import ToolCall
from ._protocol import ToolBatch

__all__ = ["DEFAULT_TOOL_WORKERS", "ThreadPoolBatches"]

#: Threads for a run's tool batches when ``tool_workers`` is not given (threads are
#: started only as calls need them).
DEFAULT_TOOL_WORKERS = 32

Execute = Callable[[ToolCall], tuple[str, bool]]


class ThreadPoolBatches:
    """Runs the calls of each :class:`~agentloop.ToolBatch` on a thread pool.

    :meth:`next_result` is called once per reply the batch needs; it returns the
    next ``(call_id, content, is_error)`` to complete, or ``None`` when the run was
    cancelled and no started call is left to report.
    """

    __slots__ = ("_batch", "_done", "_execute", "_futures", "_pool", "_workers")

    def __init__(self, execute: Execute, workers: int | None) -> None:
        self._execute = execute
        self._workers = DEFAULT_TOOL_WORKERS if workers is None else workers
        self._pool: ThreadPoolExecutor | None = None
        self._batch: ToolBatch | None = None
        self._futures: dict[Future[tuple[str, bool]], str] = {}
        self._done: Iterator[Future[tuple[str, bool]]] = iter(())

    def next_result(self, batch: ToolBatch, cancelled: bool) -> tuple[str, str, bool] | None:
        """The next result of ``batch`` to complete (submitting the batch if it is new)."""
        if batch is not self._batch:
            if cancelled:
                return None
            self._batch = batch
            pool = self._pool
            if pool is None:
                pool = self._pool = ThreadPoolExecutor(
                    self._workers, thread_name_prefix="agentloop-tool"
                )
            self._futures = {
                # Each call in a copy of the caller's context (as asyncio.to_thread
                # does): context variables set around run() reach the tool.
                pool.submit(contextvars.copy_context().run, self._execute, request.call): (
                    request.call.id
                )
                for request in batch.requests
            }
            self._done = as_completed(self._futures)
        elif cancelled:
            for future in self._futures:
                future.cancel()  # only calls not started yet: running ones finish
        for future in self._done:
            if not future.cancelled():
                content, is_error = future.result()  # a BaseException goes to run()
                return self._futures[future], content, is_error
        return None

    def close(self) -> None:
        """Let no call start any more; wait for the running ones (the run is over)."""
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)
