"""The asyncio drivers: :func:`adrive`, :func:`arun`, :func:`arun_stream`.

Theory of operation
-------------------
The engine is the same synchronous generator under every driver: nothing async
happens inside it, and a log written under ``arun`` is the log ``run`` writes for
the same replies, byte for byte. These drivers are the sync driver's send loop
(``agentloop/_driver.py``) with ``await`` where the I/O is -- the way httpx's
``async_auth_flow`` adapts the sync one. Every decision about a reply (what a
model's item becomes, stamping, the cancel token, the inbox) is made by the rules
the sync driver uses (``_Rules``).

- ``ModelRequest``: ``model.astream(request)`` is an async iterable of chunks
  then the response (an ``async def`` returning one is awaited first);
- ``ToolRequest``: :meth:`ToolRegistry.aexecute`: an ``async def`` tool is
  awaited, a sync one runs in a worker thread (a reused pool thread:
  ``_offload.offload``, ``asyncio.to_thread`` at a fraction of its cost);
- ``ToolBatch`` (``parallel_tools=True``): each call an asyncio task (at most
  ``tool_workers`` at once when given, see ``_batch.py``), the results sent in
  completion order;
- ``Pause``: ``on_pause`` may be a plain function or an ``async def``.

Cancelling the task that awaits the driver (``task.cancel()``, a timeout, a
closed web request) sends ``Cancel("task cancelled")`` to the loop, so the log is
finished, then lets ``CancelledError`` go on -- after cancelling and awaiting the
tool tasks of a batch still running, so none outlives the run.

``asyncio`` is imported on first use, so ``import agentloop`` stays light for sync
programs.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import AsyncGenerator, AsyncIterable, Iterable, Sequence
from types import AsyncGeneratorType
from typing import Any, Protocol, runtime_checkable

from typing_extensions import Unpack

from ._batch import TaskBatches
from ._caller import Caller, lent
from ._driver import (
    _new_loop,
    _result,
    _Rules,
    _stop_iteration,
    abandon,
    first_effect,
    send_messages,
)
from ._engine import AgentLoop
from ._events import Event
from ._keywords import DRIVE_KEYS, AsyncDriveOptions, AsyncRunOptions, unexpected
from ._messages import Content, ToolCall
from ._protocol import (
    Cancel,
    Effect,
    ModelChunk,
    ModelFailure,
    ModelRequest,
    ModelResponse,
    Pause,
    Reply,
    RunResult,
    ToolBatch,
    ToolRequest,
    ToolResult,
)
from ._tools import Tool, ToolRegistry
from ._toolspec import ToolSpec

__all__ = ["AsyncModel", "adrive", "arun", "arun_stream"]

#: The reason recorded when the task awaiting a driver is cancelled.
TASK_CANCELLED = "task cancelled"


@runtime_checkable
class AsyncModel(Protocol):
    """A model for the asyncio drivers: ``astream(request)`` returns an async
    iterable of zero or more ``ModelChunk`` then one ``ModelResponse`` (or one
    ``ModelFailure``), as :class:`~agentloop.Model`'s ``stream`` does. Exceptions
    become a ``ModelFailure``, as under :func:`agentloop.run`."""

    def astream(
        self, request: ModelRequest
    ) -> AsyncIterable[ModelChunk | ModelResponse | ModelFailure]: ...


async def arun(
    messages: Sequence[Any],
    *,
    model: AsyncModel,
    tools: ToolRegistry | Iterable[Tool | ToolSpec],
    **options: Unpack[AsyncRunOptions],
) -> RunResult:
    """:func:`agentloop.run` for asyncio: ``await arun(messages, model=..., tools=...)``.

    ``arun(messages, ...)`` is ``adrive(agent_loop(messages, ...), ...)``. The
    arguments are :func:`agentloop.run`'s, with async in three places: the model
    needs ``astream`` (:class:`AsyncModel`; ``ScriptedModel`` and ``FunctionModel``
    have it, and so do the provider adapters given an async SDK client), tools may
    be ``async def`` (sync tools run in a worker thread), and ``on_pause`` may be
    ``async def``. With ``parallel_tools=True`` the calls of a batch run as
    asyncio tasks, at most ``tool_workers`` at once (default: no limit; sync tools
    also share a pool of at most ``min(32, CPUs + 4)`` worker threads).

    Raises:
        TypeError, ValueError: bad options (before anything runs), a model without
            ``astream``.
        asyncio.CancelledError: the awaiting task was cancelled: the run was first
            ended with ``Cancel("task cancelled")`` in its log.
        CallerProtocolError, BaseException: as for :func:`agentloop.run`.
    """
    loop, registry, driving = _new_loop(messages, tools, options, "arun")
    return await adrive(loop, model=model, tools=registry, **driving)


async def adrive(
    loop: AgentLoop,
    *,
    model: AsyncModel,
    tools: ToolRegistry | Iterable[Tool | ToolSpec],
    before_effect: Any = None,
    **options: Unpack[AsyncDriveOptions],
) -> RunResult:
    """:func:`agentloop.drive` for asyncio: continue ANY loop to its result.

    Arguments, checks and exceptions: as for :func:`agentloop.drive` and :func:`arun`;
    ``before_effect`` may be ``async def`` (it is awaited; a cancel of the task
    while it runs is not recorded either).
    """
    for key in options:
        if key not in DRIVE_KEYS:
            raise unexpected("adrive", key)
    driver = _AsyncDriver.checked(loop, model, tools, before_effect=before_effect, **options)
    async for _ in _asteps(loop, driver):
        pass
    return _result(loop)


def arun_stream(
    messages: Sequence[Any],
    *,
    model: AsyncModel,
    tools: ToolRegistry | Iterable[Tool | ToolSpec],
    **options: Unpack[AsyncRunOptions],
) -> AsyncGenerator[Event | RunResult, None]:
    """:func:`arun`, as an async iterator of its events as they happen, then its result.

    The items are :func:`agentloop.run_stream`'s: each event once recorded (text
    deltas are ``model.chunk`` events), the :class:`RunResult` last. The run
    advances while you iterate; leaving early cancels it (reason ``closed``) when
    the iterator is closed -- use ``contextlib.aclosing`` so that happens at once::

        async with contextlib.aclosing(arun_stream(messages, model=m, tools=t)) as items:
            async for item in items:
                ...

    Options are checked at once, before the first item.
    """
    loop, registry, driving = _new_loop(messages, tools, options, "arun_stream")
    driver = _AsyncDriver.checked(loop, model, registry, **driving)
    return _aevents(loop, _asteps(loop, driver))


async def _asteps(loop: AgentLoop, driver: _AsyncDriver) -> AsyncGenerator[None, None]:
    """Drive ``loop`` to its end, pausing after each ``send`` (the sync ``_steps``)."""
    import asyncio

    unfollow = driver.watch(loop)
    left = False  # before_effect stopped the driver: the loop stays where it is
    try:
        effect = first_effect(loop)
        while effect is not None:
            driver.stop_if_told(loop)
            reply = driver.queued()
            if reply is None and driver.before_effect is not None and driver.starts(effect):
                try:
                    reply = await driver.abefore(effect)
                except BaseException:
                    left = True
                    raise
            if reply is None:
                try:
                    reply = await driver.reply_to(effect)
                except asyncio.CancelledError as exc:
                    abandon(loop, exc, Cancel(TASK_CANCELLED, at=driver.now()))
                except BaseException as exc:
                    abandon(loop, exc)
                send_messages(loop, driver)
            effect = loop.send(reply)
            yield
    except StopIteration:
        pass
    finally:
        await driver.close_stream()
        await driver.close_batches()
        if not left:
            loop.close()
        unfollow()
    driver.stop_if_told(loop)  # on_event raised at the run's last events


async def _aevents(
    loop: AgentLoop, steps: AsyncGenerator[None, None]
) -> AsyncGenerator[Event | RunResult, None]:
    """The events ``steps`` make ``loop`` record, as they are recorded, then the result."""
    seen = len(loop.log)
    try:
        async for _ in steps:
            events = loop.log.since(seen)
            seen += len(events)
            for event in events:
                yield event
    finally:
        await steps.aclose()
    for event in loop.log.since(seen):
        yield event
    yield _result(loop)


class _AsyncDriver(_Rules):
    """The async driver: the sync driver's replies, awaiting the I/O."""

    __slots__ = ("_batches",)

    asynchronous = True

    _batches: TaskBatches | None

    async def reply_to(self, effect: Effect) -> Reply | Any:
        kind = type(effect)
        if kind is ModelRequest:
            return await self._model_reply(effect)  # type: ignore[arg-type]
        await self.close_stream()
        if kind is ToolRequest:
            cancel = self._cancel()
            if cancel is not None:
                return cancel
            call = effect.call  # type: ignore[union-attr]
            if self._caller is None:
                outcome = await self._registry.aexecute(call)
            else:
                outcome = await aexecute_tool(self._registry, call, self._caller)
            return self._tool_result(effect, outcome)  # type: ignore[arg-type]
        if kind is ToolBatch:
            return await self._batch_reply(effect)  # type: ignore[arg-type]
        if kind is Pause:
            unasked = self._unasked(effect)  # type: ignore[arg-type]
            if unasked is not None or self._on_pause is None:
                return unasked
            answer = self._ask(effect)  # type: ignore[arg-type]
            if inspect.isawaitable(answer):
                answer = await answer
            return self._answered(answer)
        raise TypeError(f"agent_loop yielded an unknown effect: {effect!r}")  # pragma: no cover

    async def abefore(self, effect: Effect) -> Any:
        """``before_effect``'s reply for ``effect`` (awaited if it is ``async def``)."""
        assert self.before_effect is not None
        try:
            reply = self.before_effect(effect)
        except StopIteration as exc:
            raise _stop_iteration("before_effect") from exc
        if inspect.isawaitable(reply):
            reply = await reply
        return self._before_reply(effect, reply)

    async def _model_reply(self, request: ModelRequest) -> Reply:
        if self._opening(request):
            await self.close_stream()
            cancel = self._cancel()
            if cancel is not None:
                return cancel
            self._stream_id = request.id
            try:
                items = self._model.astream(request)
                # an ``async def`` returning the iterable (an async generator never is)
                if type(items) is not AsyncGeneratorType and inspect.isawaitable(items):
                    items = await items
                self._stream = aiter(items)
            except Exception as exc:
                await self.close_stream()
                return self._failure(request, exc)
        try:
            item = await anext(self._stream)
        except StopAsyncIteration:
            reply: Reply = self._ended(request)
        except Exception as exc:
            reply = self._failure(request, exc)
        else:
            reply = self._item_reply(request, item)
            if type(reply) is ModelChunk:
                return reply
        await self.close_stream()
        return reply

    async def _batch_reply(self, batch: ToolBatch) -> ToolResult | Cancel:
        """The next result of ``batch`` to complete, each call a task (started on
        the first batch's first reply)."""
        batches = getattr(self, "_batches", None)
        if batches is None:
            registry, caller = self._registry, self._caller
            execute = (
                registry.aexecute
                if caller is None
                else functools.partial(aexecute_tool, registry, caller=caller)
            )
            batches = self._batches = TaskBatches(
                execute, self._signal, self._tool_workers, self._log
            )
        return self._batched(await batches.next_result(batch))

    async def close_batches(self) -> None:
        """Cancel the batched calls still running and wait for them."""
        batches = getattr(self, "_batches", None)
        if batches is not None:
            await batches.close()

    async def close_stream(self) -> None:
        stream, self._stream, self._stream_id = self._stream, None, None
        aclose = getattr(stream, "aclose", None)
        if aclose is not None:
            await aclose()


async def aexecute_tool(
    registry: ToolRegistry, call: ToolCall, caller: Caller
) -> tuple[Content, bool]:
    """Run one tool call for an async driver, lending it ``caller`` (see
    :func:`~agentloop._driver.execute_tool`)."""
    with lent(caller):
        return await registry.aexecute(call)
