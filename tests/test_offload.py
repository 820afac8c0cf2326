"""agentloop._offload: the reused worker threads the async drivers run sync work on."""

from __future__ import annotations

import asyncio
import collections
import contextvars
import functools
import gc
import subprocess
import sys
import textwrap
import threading
import time
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import agentloop._offload as offload_module
from agentloop import ScriptedModel, ScriptedResponse, ToolCall, UserMessage, arun, tool
from agentloop._offload import _Job, _Pool, _Thread, offload

VAR: contextvars.ContextVar[str] = contextvars.ContextVar("test_offload_var", default="unset")


def own_pool(monkeypatch: pytest.MonkeyPatch, size: int = 2, idle: float = 5.0) -> _Pool:
    """A pool of the test's own in place of the process's."""
    pool = _Pool(size, idle)
    monkeypatch.setattr(offload_module, "_POOL", pool)
    return pool


@pytest.fixture
def pool(monkeypatch: pytest.MonkeyPatch) -> _Pool:
    return own_pool(monkeypatch)


def wait_until(condition: Callable[[], bool], seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "condition never became true"
        time.sleep(0.005)


def test_runs_in_another_thread_with_the_callers_context() -> None:
    async def main() -> tuple[int, str, int]:
        VAR.set("set in the task")
        seen: tuple[int, str, int] = await offload(lambda: (threading.get_ident(), VAR.get(), 7))
        return seen

    ident, seen, value = asyncio.run(main())
    assert ident != threading.get_ident()
    assert (seen, value) == ("set in the task", 7)


def test_the_thread_is_reused(pool: _Pool) -> None:
    async def main() -> set[int]:
        return {await offload(threading.get_ident) for _ in range(20)}

    assert len(asyncio.run(main())) == 1
    assert pool.threads == 1


def test_an_idle_thread_keeps_nothing_of_its_last_call(pool: _Pool) -> None:
    class Result:
        pass

    async def main() -> weakref.ref[Result]:
        result = await offload(Result)
        return weakref.ref(result)

    gone = asyncio.run(main())
    wait_until(lambda: len(pool.idle) == 1)
    gc.collect()
    assert gone() is None


def test_exceptions_come_back() -> None:
    def fails(text: str) -> None:
        raise ValueError(text)

    async def main() -> None:
        await offload(fails, "boom")

    with pytest.raises(ValueError, match="boom"):
        asyncio.run(main())

    async def interrupted() -> None:
        await offload(functools.partial(_raise, KeyboardInterrupt()))

    with pytest.raises(KeyboardInterrupt):
        asyncio.run(interrupted())


def _raise(exc: BaseException) -> None:
    raise exc


def test_stop_iteration_becomes_a_runtime_error() -> None:
    """asyncio refuses a StopIteration in a future (it would never settle: a hang)."""

    def stops() -> None:
        raise StopIteration("done")

    async def main(fn: Callable[[], Any]) -> None:
        await offload(fn)

    with pytest.raises(RuntimeError, match="stops raised StopIteration") as info:
        asyncio.run(main(stops))
    assert isinstance(info.value.__cause__, StopIteration)
    with pytest.raises(RuntimeError, match=r"functools.partial.* raised StopIteration"):
        asyncio.run(main(functools.partial(_raise, StopIteration())))


def test_a_cancelled_caller_drops_the_outcome() -> None:
    started, release, finished = threading.Event(), threading.Event(), threading.Event()

    def slow() -> str:
        started.set()
        release.wait(10)
        finished.set()
        return "late"

    async def main() -> str:
        task = asyncio.create_task(offload(slow))
        await asyncio.to_thread(started.wait, 10)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        release.set()
        await asyncio.to_thread(finished.wait, 10)
        next_one: str = await offload(lambda: "next")  # the late outcome was dropped quietly
        return next_one

    assert asyncio.run(main()) == "next"


def test_an_outcome_for_a_closed_loop_is_dropped(pool: _Pool) -> None:
    started, release = threading.Event(), threading.Event()

    def slow() -> str:
        started.set()
        release.wait(10)
        return "late"

    async def main() -> None:
        task = asyncio.create_task(offload(slow))
        await asyncio.to_thread(started.wait, 10)
        task.cancel()

    asyncio.run(main())  # the loop is closed with slow() still running
    release.set()
    wait_until(lambda: len(pool.idle) == 1)  # the thread dropped it and went idle

    async def again() -> str:
        next_one: str = await offload(lambda: "next")
        return next_one

    assert asyncio.run(again()) == "next"


def test_at_most_size_threads_the_rest_wait_their_turn(pool: _Pool) -> None:
    lock = threading.Lock()
    running, most = 0, 0

    def work(n: int) -> int:
        nonlocal running, most
        with lock:
            running += 1
            most = max(most, running)
        time.sleep(0.01)
        with lock:
            running -= 1
        return n

    async def main() -> list[int]:
        return list(await asyncio.gather(*(offload(work, n) for n in range(8))))

    assert asyncio.run(main()) == list(range(8))
    assert most == 2
    assert pool.threads == 2
    assert not pool.backlog


def test_a_call_from_a_pool_thread_never_waits_for_a_free_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """One thread allowed, busy with a call that makes a call of its own on a loop
    of its own: the inner call gets a second thread (waiting, it would never run)."""
    pool = own_pool(monkeypatch, 1, 5.0)

    def nested() -> str:
        async def inner() -> str:
            seen: str = await offload(lambda: "inner")
            return seen

        return asyncio.run(inner())

    async def main() -> str:
        outer: str = await offload(nested)
        return outer

    assert asyncio.run(main()) == "inner"
    assert pool.threads == 2


def test_loops_in_several_threads_share_the_pool(pool: _Pool) -> None:
    results: list[int] = []

    def loop_thread(n: int) -> None:
        async def main() -> int:
            total = 0
            for step in range(20):
                total += await offload(lambda step=step: step + n)
            return total

        results.append(asyncio.run(main()))

    threads = [threading.Thread(target=loop_thread, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert sorted(results) == [190 + 20 * n for n in range(4)]
    assert pool.threads <= 2


def test_an_idle_thread_ends_and_a_new_one_starts(monkeypatch: pytest.MonkeyPatch) -> None:
    pool = own_pool(monkeypatch, 1, 0.05)

    async def main() -> threading.Thread:
        thread: threading.Thread = await offload(threading.current_thread)
        return thread

    first = asyncio.run(main())
    wait_until(lambda: pool.threads == 0)
    assert not pool.idle and not first.is_alive()
    assert asyncio.run(main()) is not first
    assert pool.threads == 1


def test_a_forked_child_gets_a_pool_of_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(offload_module, "_POOL", None)
    first = offload_module._pool()
    assert offload_module._pool() is first
    monkeypatch.setattr(first, "pid", -1)  # as seen from a forked child
    assert offload_module._pool() is not first


# --- the hand-over, one interleaving at a time ---------------------------------------


class Marker(_Job):
    """A job handed around by name (these tests never run it)."""

    def __init__(self, name: str) -> None:
        self.name = name


def test_recheck_with_no_idle_thread_leaves_the_backlog() -> None:
    pool = _Pool(1, 5.0)
    job = Marker("job")
    pool.backlog.append(job)
    pool._recheck()
    assert list(pool.backlog) == [job]


def test_recheck_hands_the_backlog_to_a_thread_that_went_idle() -> None:
    pool, thread = _Pool(1, 5.0), _Thread()
    job = Marker("job")
    pool.idle.append(thread)
    pool.backlog.append(job)
    pool._recheck()
    assert thread.job is job and thread.wake.acquire(blocking=False)
    assert not pool.idle and not pool.backlog


def test_recheck_puts_the_thread_back_when_the_backlog_was_taken() -> None:
    pool, thread = _Pool(1, 5.0), _Thread()
    pool.idle.append(thread)
    pool._recheck()
    assert list(pool.idle) == [thread]
    assert thread.job is None and not thread.wake.acquire(blocking=False)


class Idle(collections.deque[_Thread]):
    """``pool.idle`` that runs ``then`` right after a thread appends itself: what
    another thread might do at that moment."""

    def __init__(self, then: Callable[[_Thread], None]) -> None:
        super().__init__()
        self.then = then

    def append(self, thread: _Thread) -> None:
        super().append(thread)
        then, self.then = self.then, lambda thread: None
        then(thread)


def test_a_thread_going_idle_takes_a_job_that_reached_the_backlog_meanwhile() -> None:
    pool, thread = _Pool(1, 5.0), _Thread()
    job = Marker("late")
    pool.idle = Idle(lambda thread: pool.backlog.append(job))
    assert pool._next(thread) is job
    assert not pool.idle


def test_a_thread_taken_by_a_caller_as_it_goes_idle_waits_for_its_job() -> None:
    pool, thread = _Pool(1, 5.0), _Thread()
    handed = Marker("handed")

    def caller_takes_it(thread: _Thread) -> None:
        pool.backlog.append(Marker("queued"))
        pool.idle.remove(thread)  # a caller popped it and will hand it a job
        thread.job = handed
        thread.wake.release()

    pool.idle = Idle(caller_takes_it)
    assert pool._next(thread) is handed
    assert thread.job is None


def test_an_idle_thread_ends_after_idle_seconds() -> None:
    pool, thread = _Pool(1, 0.01), _Thread()
    pool.threads = 1
    assert pool._next(thread) is None
    assert pool.threads == 0 and not pool.idle


def test_an_idle_thread_that_times_out_with_a_backlog_takes_it() -> None:
    """The backlog filled between its timeout and its exit check: it serves it."""
    pool, thread = _Pool(1, 0.01), _Thread()
    job = Marker("job")
    real = pool._unidle

    def unidle(thread: _Thread) -> bool:
        taken = real(thread)
        pool.backlog.append(job)
        return taken

    pool._unidle = unidle  # type: ignore[method-assign]
    pool.threads = 1
    assert pool._next(thread) is job
    assert pool.threads == 1


def test_an_idle_thread_taken_as_it_times_out_waits_for_its_job() -> None:
    pool, thread = _Pool(1, 0.01), _Thread()
    job = Marker("job")
    calls = 0

    def unidle(thread: _Thread) -> bool:
        nonlocal calls
        calls += 1
        pool.idle.remove(thread)  # a caller took it first ...
        thread.job = job
        thread.wake.release()  # ... and hands it a job
        return False

    pool._unidle = unidle  # type: ignore[method-assign]
    assert pool._next(thread) is job
    assert calls == 1


# --- the drivers -----------------------------------------------------------------------


def test_arun_runs_sync_tools_on_the_pool(pool: _Pool) -> None:
    threads: list[int] = []

    @tool
    def where() -> str:
        """Where it runs."""
        threads.append(threading.get_ident())
        return "here"

    calls = [ScriptedResponse.tool_calls(f"r{n}", ToolCall(f"c{n}", "where", {})) for n in range(3)]
    model = ScriptedModel([*calls, ScriptedResponse.text("r9", "done")])
    result = asyncio.run(arun([UserMessage("u1", "Go.")], model=model, tools=[where]))
    assert result.final_text == "done"
    assert len(threads) == 3 and len(set(threads)) == 1
    assert threads[0] != threading.get_ident()
    assert pool.threads == 1


# --- the exit: the pool drains, as to_thread's executor is joined --------------------


def test_an_exiting_thread_going_idle_ends() -> None:
    pool, thread = _Pool(1, 5.0), _Thread()
    pool.exiting = True
    assert pool._next(thread) is None
    assert not pool.idle


def test_an_exiting_thread_taken_by_a_caller_as_it_goes_idle_waits_for_its_job() -> None:
    pool, thread = _Pool(1, 5.0), _Thread()
    handed = Marker("handed")

    def exit_and_a_caller_takes_it(thread: _Thread) -> None:
        pool.exiting = True
        pool.idle.remove(thread)  # _drain (or a caller) popped it and wakes it
        thread.job = handed
        thread.wake.release()

    pool.idle = Idle(exit_and_a_caller_takes_it)
    assert pool._next(thread) is handed


def test_drain_without_a_pool_of_this_process_does_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(offload_module, "_POOL", None)
    offload_module._drain()
    forked = _Pool(1, 5.0)
    forked.pid = -1  # the parent's pool, as a forked child sees it
    offload_module._drain(forked)
    assert not forked.exiting


def test_drain_waits_for_running_and_waiting_calls_and_ends_idle_threads(pool: _Pool) -> None:
    done: list[str] = []
    started = threading.Event()

    def slow(name: str) -> str:
        started.set()
        time.sleep(0.2)
        done.append(name)
        return name

    async def main() -> None:
        assert await offload(str, 1) == "1"  # a thread that goes idle again
        tasks = [asyncio.ensure_future(offload(slow, name)) for name in "abc"]
        await asyncio.get_running_loop().run_in_executor(None, started.wait)
        for task in tasks:  # the callers give up: the calls go on (a, b) or wait (c)
            task.cancel()

    asyncio.run(main())
    assert pool.size == 2 and done == []
    offload_module._drain()
    assert sorted(done) == ["a", "b", "c"]
    assert pool.exiting and not pool.running and not pool.backlog


def test_drain_wakes_idle_threads_to_end(pool: _Pool) -> None:
    assert asyncio.run(offload(str, 1)) == "1"
    wait_until(lambda: len(pool.idle) == 1)
    (worker,) = pool.running
    offload_module._drain()
    assert not worker.is_alive() and not pool.running and not pool.idle


def test_the_process_exit_waits_for_a_cancelled_sync_tool(tmp_path: Path) -> None:
    """A sync tool whose task was cancelled still finishes before the process ends
    (its pool thread is a daemon thread: the exit drains the pool)."""
    marker = tmp_path / "written"
    script = tmp_path / "cancelled_tool.py"
    script.write_text(
        textwrap.dedent(
            f"""
            import asyncio, pathlib, threading, time
            from agentloop import (
                ScriptedModel, ScriptedResponse, TextBlock, ToolCall, UserMessage, arun, tool,
            )

            started = threading.Event()

            @tool
            def write() -> str:
                "Write the marker, slowly."
                started.set()
                time.sleep(0.5)
                pathlib.Path({str(marker)!r}).write_text("done")
                return "ok"

            async def main():
                model = ScriptedModel([
                    ScriptedResponse("r1", (ToolCall("c1", "write", {{}}),), "tool_call"),
                    ScriptedResponse("r2", (TextBlock("done"),), "stop"),
                ])
                messages = [UserMessage("u1", "go")]
                task = asyncio.ensure_future(arun(messages, model=model, tools=[write]))
                await asyncio.get_running_loop().run_in_executor(None, started.wait)
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)

            asyncio.run(main())
            assert not pathlib.Path({str(marker)!r}).exists()
            print("asyncio.run returned")
            """
        )
    )
    ran = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=60, check=False
    )
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout == "asyncio.run returned\n"
    assert marker.read_text() == "done"
