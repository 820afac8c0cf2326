"""The sync driver (:func:`drive`, :func:`run`, :func:`run_stream`) and the rules every
driver shares.

Theory of operation
-------------------
:func:`agentloop.agent_loop` does no I/O; it yields effects and waits for replies.
A driver is the loop around it, shaped like httpx's ``_send_handling_auth``: take
the pending effect (priming a fresh loop with ``next()``), answer each effect with
``send()``, stop when the loop finishes, and ``close()`` it in ``finally`` so an
exception anywhere (even ``KeyboardInterrupt``) still leaves a finished log.
:func:`drive` continues ANY :class:`~agentloop.AgentLoop` this way -- a fresh one,
one ``replay.resume`` rebuilt from a log, one ``replay.fork`` branched -- and
:func:`run` is ``drive(agent_loop(...))``. The asyncio drivers
(``agentloop/_adriver.py``) are the same loop with ``await`` where the I/O is.

- ``ModelRequest``: pull the model's stream one item at a time and send each item,
  stamped with the clock. The engine yields the same request again after every
  chunk, so the driver keeps the stream open across sends until the response (or
  a failure) has been sent. Any exception from the model becomes a
  ``ModelFailure``: the run ends ``failed`` with the message in the log, never an
  exception out of ``run``.
- ``ToolRequest``: execute through the :class:`~agentloop.ToolRegistry` (argument
  conversion and exceptions become error results there).
- ``ToolBatch`` (``parallel_tools=True``): run the calls on a thread pool
  (``tool_workers`` threads, see ``_batch.py``) and send the results in completion
  order.
- ``Pause``: ask ``on_pause``; without one, a pause cancels the run.

What a reply *is* -- validating what the model streamed, stamping ``at``, turning
an exception into a ``ModelFailure``, the cancel checks -- is decided by
:class:`_Rules`, shared by the sync and the async driver; only the calls that do
I/O (open a stream, pull from it, run a tool, ask ``on_pause``) differ.

``before_effect`` (a callback of :func:`drive` and ``adrive``) is called once per
side effect, just before the driver acts on it: before it opens a model stream,
runs a tool call, starts a batch, or answers a pause. It is where a durable driver
commits the log so far (the write-ahead rule, see ``replay/_durable.py``). It may
return a reply to send instead (a stored answer, a steering message), and it may
raise to stop driving: that exception is not recorded, and the loop is left
waiting at the effect, as resumable as the log it has so far.

Cancelling: the :class:`CancelToken` is checked before opening a model stream,
after each item pulled from it, before each tool, and before and after each pause
callback; a cancel becomes ``Cancel(reason=token.reason)``. An :class:`Inbox` is
read at every yield, before the driver computes its own reply: what another thread
sent there (a ``Cancel`` today; any reply the engine accepts at any yield) goes to
the loop first. A call blocked inside the model or a tool is not interrupted:
cancellation is cooperative. A tool that finished is never thrown away: its
result is recorded and the cancel takes effect right after.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Generator, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, NoReturn, Protocol, runtime_checkable

import msgspec
from typing_extensions import Self, Unpack

from ._caller import Caller, lent, make_caller
from ._engine import AgentLoop, agent_loop
from ._errors import MODEL_ERROR, MODEL_PROTOCOL_ERROR, ModelError
from ._events import Event, EventLog, ModelChunkEvent
from ._handoffs import handoff_tools
from ._keywords import (
    DRIVE_KEYS,
    Clock,
    DriveOptions,
    OnEvent,
    RunOptions,
    split,
    unexpected,
)
from ._limits import DEFAULT_LIMITS
from ._logging import follow, logger, run_finished
from ._messages import Content
from ._protocol import (
    Cancel,
    Effect,
    FollowUp,
    ModelChunk,
    ModelFailure,
    ModelRequest,
    ModelResponse,
    Pause,
    Reply,
    Resume,
    RunResult,
    Steer,
    ToolBatch,
    ToolRequest,
    ToolResult,
    Usage,
)
from ._signals import ANYTIME_REPLIES, CancelToken, Inbox
from ._text import escape_surrogates, exception_text, unanswered_pause
from ._tools import Tool, ToolRegistry
from ._toolspec import ToolSpec
from ._validation import accept, content_structure_problem, parts_problem

if TYPE_CHECKING:
    from ._batch import Done, ThreadPoolBatches

__all__ = [
    "ANYTIME_REPLIES",
    "CancelToken",
    "Inbox",
    "Model",
    "drive",
    "execute_tool",
    "run",
    "run_stream",
]


@runtime_checkable
class Model(Protocol):
    """Anything that can answer a :class:`~agentloop.ModelRequest`.

    ``stream`` returns an iterable of zero or more ``ModelChunk`` then one
    ``ModelResponse`` (or one ``ModelFailure``), all with ``request_id ==
    request.id``. It may raise instead: :func:`run` turns the exception into a
    ``ModelFailure`` (raise :class:`~agentloop.ModelError` for provider errors).
    The driver stamps ``at`` itself; leave it ``None``.

    A model for :func:`agentloop.arun` has ``astream(request)`` instead (or as
    well): an async iterable of the same items (see :class:`~agentloop.AsyncModel`).
    A model that serves only one kind of driver may say so with an
    ``asynchronous`` attribute (``True``: only ``arun``/``adrive``; ``False``: only
    ``run``/``drive``), as the provider adapters do for the client they were given;
    the other drivers then refuse it with a ``TypeError`` before anything runs.
    """

    def stream(
        self, request: ModelRequest
    ) -> Iterable[ModelChunk | ModelResponse | ModelFailure]: ...


BeforeEffect = Callable[[Effect], Any]


def run(
    messages: Sequence[Any],
    *,
    model: Model,
    tools: ToolRegistry | Iterable[Tool | ToolSpec],
    **options: Unpack[RunOptions],
) -> RunResult:
    """Run the agent loop to the end, calling the model and the tools.

    ``run(messages, ...)`` is ``drive(agent_loop(messages, ...), ...)``.

    Args:
        messages: the initial transcript (Message structs or dicts of the IR shape).
        model: answers model requests (see :class:`Model`).
        tools: a :class:`ToolRegistry` or a sequence of tools/specs; it is copied,
            so registering more tools during the run changes nothing.
        system: the system prompt.
        max_steps: hard ceiling on model requests (at most ``MAX_AGENT_STEPS``).
        budget: soft limits; reaching one pauses the run (see ``on_pause``).
        hooks: hook subscribers, run inside the engine.
        log: an :class:`EventLog` to record into (subscribe to it for live events).
        signal: a :class:`CancelToken` to stop the run cooperatively.
        on_pause: answers each ``Pause`` with ``Resume`` or ``Cancel``; without it a
            pause ends the run cancelled, with a reason that starts with the pause's
            and names the missing ``on_pause`` (also logged at WARNING).
        clock: returns the time stamped on every reply (default ``time.time``).
        started_at: the time of ``session.start`` (default: ``clock()`` now).
        on_event: called with each event as the loop records it (text deltas are
            ``model.chunk`` events), in the driver's thread.
        inbox: an :class:`Inbox` other threads send replies (``Cancel``) through.
        parallel_tools: run the calls of a step together on a thread pool (see
            :func:`agent_loop`; tools marked ``sequential`` still run alone).
        tool_workers: the pool's size (default: up to 32 threads, started as needed).
        limits: the loop's ceilings (:class:`Limits`; default: the ``MAX_*`` values).
        output, output_retries: structured output (see :func:`agent_loop`).
        compaction: a compaction policy for ``Limits.context_tokens`` (see
            :func:`agent_loop`).
        handoffs, agent_name: agents the model may transfer the conversation to
            (see :func:`agent_loop`); their tools join ``tools``.

    Returns:
        The :class:`RunResult`. Model errors, tool errors and cancellation are
        outcomes in it, not exceptions.

    Raises:
        TypeError, ValueError: bad options (raised before anything runs), an
            async tool or an async-only model (use ``agentloop.arun``).
        CallerProtocolError: ``on_pause`` returned something that is not a
            ``Resume`` or ``Cancel`` (a bug in the callback; the log records it).
        BaseException: an exception from ``on_pause``, ``clock`` or a tool's
            ``BaseException`` (e.g. ``KeyboardInterrupt``) is first recorded as
            ``Cancel("<ExcType>: <message>")`` ending the log, then re-raised. So is
            an exception from ``on_event``, at the driver's next step (the events
            up to it are recorded; ``on_event`` is not called again; raised at the
            run's last event, it propagates once the log is finished, the run
            keeping its outcome). An exception from another subscriber of the
            ``log`` propagates as is, the log left unfinished. A ``StopIteration``
            from ``on_pause``, ``on_event`` or ``clock`` becomes ``RuntimeError``
            (as PEP 479 does for generators): it would otherwise read as the run's
            end.
    """
    loop, registry, driving = _new_loop(messages, tools, options, "run")
    driver = _Driver.checked(loop, model, registry, fresh=True, **driving)
    for _ in _steps(loop, driver):  # drive(loop, ...), the loop known to match the tools
        pass
    return _result(loop)


def drive(
    loop: AgentLoop,
    *,
    model: Model,
    tools: ToolRegistry | Iterable[Tool | ToolSpec],
    before_effect: BeforeEffect | None = None,
    **options: Unpack[DriveOptions],
) -> RunResult:
    """Continue ``loop`` from its pending effect to its :class:`RunResult`.

    ``loop`` may be fresh (from :func:`agent_loop`, not primed yet), rebuilt from a
    log (``replay.resume``), branched (``replay.fork``) or driven by hand for a
    while: the driver answers whatever it waits for next. A loop that already
    finished returns its result at once. To resume a session in another process::

        loop, _ = replay.resume(replay.read_log("session.jsonl"))
        replay.LogWriter("session.jsonl", append=True).follow(loop.log)
        result = drive(loop, model=model, tools=[add])

    Args:
        loop: the :class:`~agentloop.AgentLoop` to continue.
        model, tools, clock, signal, on_pause, on_event, inbox, tool_workers: as
            for :func:`run` (``tool_workers`` matters for a loop made with
            ``parallel_tools=True``).
            ``tools`` must be the tools the loop was started with: the same names,
            each with the same parameters schema as ``loop.tools`` recorded.
            ``on_event`` sees the events recorded from now on.
        before_effect: called with the effect, in the driver's thread, once per
            side effect and just before it: before a model stream is opened (not
            for each of its chunks), a tool call runs, a batch starts (once per
            batch) or a pause is answered (by ``on_pause``, a cancel, or not at
            all); never for a reply taken from ``inbox``. It returns ``None`` to
            let the driver go on, or a reply to send in its place (its ``at``
            stamped by ``clock`` if ``None``; the loop then waits again, and
            ``before_effect`` is asked again before the next side effect). An
            exception it raises leaves ``drive`` as it is, *not* recorded: the
            loop stays waiting at the effect (nothing ran), so ``drive`` may be
            called on it again. ``replay.run_durable`` commits its store here and
            parks a session by raising.

    Returns:
        The :class:`RunResult` (see :func:`run`).

    Raises:
        ValueError: ``tools`` differ from the loop's (the message names the tool).
        TypeError, CallerProtocolError, BaseException: as for :func:`run`.
    """
    for key in options:
        if key not in DRIVE_KEYS:
            raise unexpected("drive", key)
    driver = _Driver.checked(loop, model, tools, before_effect=before_effect, **options)
    for _ in _steps(loop, driver):
        pass
    return _result(loop)


def run_stream(
    messages: Sequence[Any],
    *,
    model: Model,
    tools: ToolRegistry | Iterable[Tool | ToolSpec],
    **options: Unpack[RunOptions],
) -> Generator[Event | RunResult, None, None]:
    """:func:`run`, as an iterator of its events as they happen, then its result.

    Every event the loop records is yielded once it is recorded (the model's text
    deltas are ``model.chunk`` events whose ``chunk.block`` is a ``TextBlock``);
    the last item is the :class:`RunResult`. The run advances only while you
    iterate, in your thread; stopping early (``break``, ``close()``) cancels it
    (reason ``closed``) and finishes its log::

        for item in run_stream(messages, model=model, tools=tools):
            if isinstance(item, RunResult):
                print("\\n", item.status)
            elif type(item) is ModelChunkEvent and type(item.chunk.block) is TextBlock:
                print(item.chunk.block.text, end="", flush=True)

    Options are checked at once (before the first item), as :func:`run` checks them.
    Arguments and exceptions: as for :func:`run`.
    """
    loop, registry, driving = _new_loop(messages, tools, options, "run_stream")
    driver = _Driver.checked(loop, model, registry, fresh=True, **driving)
    return _events(loop, _steps(loop, driver))


# --------------------------------------------------------------------------- the send loop


def _steps(loop: AgentLoop, driver: _Driver) -> Generator[None, None, None]:
    """Drive ``loop`` to its end, pausing after each ``send`` (for :func:`_events`)."""
    unfollow = driver.watch(loop)
    left = False  # before_effect stopped the driver: the loop stays where it is
    try:
        effect = first_effect(loop)
        while effect is not None:
            driver.stop_if_told(loop)
            reply = driver.queued()
            if reply is None and driver.before_effect is not None and driver.starts(effect):
                try:
                    reply = driver.before(effect)
                except BaseException:
                    left = True
                    raise
            if reply is None:
                try:
                    reply = driver.reply_to(effect)
                except BaseException as exc:
                    abandon(loop, exc)
                send_messages(loop, driver)
            effect = loop.send(reply)
            yield
    except StopIteration:
        pass
    finally:
        driver.close_stream()
        driver.close_batches()
        if not left:
            loop.close()
        unfollow()
    driver.stop_if_told(loop)  # on_event raised at the run's last events


def send_messages(loop: AgentLoop, driver: _Rules) -> None:
    """Send the steering and follow-up messages that reached the inbox while the
    driver computed its reply (a tool ran, the model streamed), before that reply:
    a ``Steer`` that came during a tool call then skips the calls after it, as
    the user meant. The loop records each and yields the same effect again. A
    ``Cancel`` waits for the next yield, so the reply is recorded first."""
    message = driver.queued_message()
    while message is not None:
        loop.send(message)
        message = driver.queued_message()


def _events(
    loop: AgentLoop, steps: Generator[None, None, None]
) -> Generator[Event | RunResult, None, None]:
    """The events ``steps`` make ``loop`` record, as they are recorded, then the result."""
    seen = len(loop.log)
    try:
        for _ in steps:
            events = loop.log.since(seen)
            seen += len(events)
            yield from events
    finally:
        steps.close()  # stopped early: the run is cancelled (closed) and its log finished
    yield from loop.log.since(seen)
    yield _result(loop)


def first_effect(loop: AgentLoop) -> Effect | None:
    """What ``loop`` waits for: its pending effect, the first one of a fresh loop
    (primed here), or ``None`` when it already finished.

    Raises:
        StopIteration: priming finished the run (an invalid transcript).
    """
    if loop.result is not None:
        return None
    pending = loop.pending
    return pending if pending is not None else next(loop)


def abandon(loop: AgentLoop, exc: BaseException, cancel: Cancel | None = None) -> NoReturn:
    """End ``loop`` because the driver stopped on ``exc``, then raise ``exc``.

    Recorded as ``cancel``, by default ``Cancel("<ExcType>: <message>")``: the log
    says why the run stopped.
    """
    if cancel is None:
        loop.throw(exc)  # records the cancel, then raises exc
    with contextlib.suppress(StopIteration):
        loop.send(cancel)
    raise exc


def _new_loop(
    messages: Sequence[Any],
    tools: ToolRegistry | Iterable[Tool | ToolSpec],
    options: Mapping[str, Any],
    where: str,
) -> tuple[AgentLoop, ToolRegistry, dict[str, Any]]:
    """The loop ``run``-like drivers drive (only the options given are passed on:
    the defaults are ``agent_loop``'s), its tools, and the driver's options (the
    clock resolved)."""
    looping, driving = split(options, where)
    clock = driving["clock"] = _check_clock(driving.get("clock"))
    registry = ToolRegistry(tools)  # once: ``tools`` may be an iterator
    if looping.get("started_at") is None:
        looping["started_at"] = _read_clock(clock)
    loop = agent_loop(messages, tools=registry, **looping)
    if loop.agent is not None:  # handoffs: the driver runs every agent's tools
        registry = ToolRegistry([*registry, *handoff_tools(looping["handoffs"], registry)])
    return loop, registry, driving


def _result(loop: AgentLoop) -> RunResult:
    result = loop.result
    assert result is not None  # the loop was driven to its end
    return result


# --------------------------------------------------------------------------- shared checks


def _check_clock(clock: Clock | None) -> Clock:
    if clock is None:
        return time.time
    if not callable(clock):
        raise TypeError(f"clock must be callable or None, got {clock!r}")
    return clock


def model_method(model: object, asynchronous: bool) -> Callable[[ModelRequest], Any]:
    """The method a driver calls on ``model``: ``stream`` (sync) or ``astream`` (async).

    Raises:
        TypeError: the model cannot serve this kind of driver, saying what to use.
    """
    name = "astream" if asynchronous else "stream"
    method = getattr(model, name, None)
    declared = getattr(model, "asynchronous", None)
    if callable(method) and declared is not (not asynchronous):
        return method  # type: ignore[no-any-return]
    if asynchronous:
        raise TypeError(
            f"model {model!r} has no astream(request), so arun/adrive cannot await it: "
            "run it with agentloop.run/drive, or for a provider adapter pass the SDK's "
            "async client (openai.AsyncOpenAI, anthropic.AsyncAnthropic, a google-genai "
            "client's .aio)"
        )
    if callable(getattr(model, "astream", None)):
        raise TypeError(
            f"model {model!r} is asynchronous (it has astream(request) and no usable "
            "stream(request)): run it with agentloop.arun/adrive, or for a provider "
            "adapter pass the SDK's sync client (openai.OpenAI, anthropic.Anthropic, "
            "a google-genai Client)"
        )
    raise TypeError(f"model must have a stream(request) method, got {model!r}")


def tools_problem(
    registry: ToolRegistry, recorded: Sequence[ToolSpec], *, extra: bool = False
) -> str | None:
    """How ``registry`` differs from the tool specs a loop recorded (names and
    parameter schemas), or ``None`` when it can serve that loop.

    With ``extra``, tools the loop does not have are allowed (a worker serving
    sessions started with different tools passes them all; the model is only
    ever offered the loop's).
    """
    specs = registry.specs()
    if specs == tuple(recorded):  # (the same spec objects, when run() made the loop)
        return None
    given = {spec.name: spec for spec in specs}
    for spec in recorded:
        mine = given.pop(spec.name, None)
        if mine is None:
            return f"the loop offers tool {spec.name!r}, and the tools given have none"
        if mine.parameters != spec.parameters:
            return (
                f"tool {spec.name!r} takes other parameters than the loop recorded: "
                f"{mine.parameters!r} instead of {spec.parameters!r}"
            )
    if given and not extra:
        names = ", ".join(repr(spec.name) for spec in recorded) or "none"
        return (
            f"tool {next(iter(given))!r} is not one of the loop's tools ({names}); "
            "the model was never offered it"
        )
    return None


def _check_not_mid_stream(loop: AgentLoop) -> None:
    """Refuse a loop left in the middle of a model stream (its process died while the
    model streamed): a new stream cannot continue the chunks already recorded."""
    pending = loop.pending
    log = loop.log
    if type(pending) is not ModelRequest or not len(log):
        return
    last = log[-1]
    if type(last) is ModelChunkEvent and last.chunk.request_id == pending.id:
        first = len(log) - 1
        while type(log[first - 1]) is ModelChunkEvent:
            first -= 1
        raise ValueError(
            f"the loop waits in the middle of {pending.id}'s stream ({len(log) - first} "
            "chunks recorded): a new model stream cannot continue it. Branch the log "
            f"just before its first chunk instead: replay.fork(events, {first - 1})"
        )


def execute_tool(
    registry: ToolRegistry, call: Any, caller: Caller | None = None
) -> tuple[Content, bool]:
    """Run one tool call for a sync driver: ``(content, is_error)``.

    The one place :func:`run`/:func:`drive` execute a tool (see
    :meth:`ToolRegistry.execute`); a driver that runs several at once calls it
    from its workers. ``caller``: what the driver lends its agent tools (see
    ``agentloop/_caller.py``), when it has any.
    """
    if caller is None:
        return registry.execute(call)
    with lent(caller):
        return registry.execute(call)


def _read_clock(clock: Clock) -> float:
    try:
        return float(clock())
    except StopIteration as exc:
        raise _stop_iteration("clock") from exc


def _stop_iteration(callback: str) -> RuntimeError:
    # Out of run() (or into the generator protocol) a StopIteration would read as
    # the loop's end: run() would return whatever it carried. As in PEP 479, it
    # becomes a RuntimeError.
    return RuntimeError(f"{callback} raised StopIteration")


# --------------------------------------------------------------------------- the rules


class _Rules:
    """What each reply is, given what the model, a tool or ``on_pause`` did.

    Shared by the sync and the async driver: no I/O happens here, only decisions
    (validation, stamping, cancel checks). The subclasses hold the open model
    stream between sends and do the calls.
    """

    __slots__ = (
        "_begun",
        "_caller",
        "_clock",
        "_event_error",
        "_inbox",
        "_log",
        "_loop",
        "_model",
        "_on_event",
        "_on_pause",
        "_registry",
        "_signal",
        "_stream",
        "_stream_id",
        "_tool_workers",
        "before_effect",
    )

    asynchronous = False

    def __init__(
        self,
        model: Any,
        registry: ToolRegistry,
        signal: CancelToken | None,
        on_pause: Callable[[Pause], Any] | None,
        clock: Clock,
        inbox: Inbox | None = None,
        on_event: OnEvent | None = None,
        tool_workers: int | None = None,
        before_effect: BeforeEffect | None = None,
        loop: AgentLoop | None = None,
    ) -> None:
        self._loop = loop  # told which replies the driver checked itself
        self._model = model
        self._registry = registry
        self._signal = signal
        self._on_pause = on_pause
        self._clock = clock
        self._inbox = inbox
        self._on_event = on_event
        self._event_error: BaseException | None = None  # what on_event raised
        self._stream: Any = None
        self._stream_id: str | None = None
        self._tool_workers = tool_workers
        self._log: EventLog | None = None  # the driven loop's (watch)
        self.before_effect = before_effect
        self._begun: ToolBatch | None = None  # the batch before_effect let start
        self._caller = make_caller(
            loop, registry, signal, on_pause, clock, self.asynchronous, on_event
        )

    @classmethod
    def checked(
        cls,
        loop: AgentLoop,
        model: Any,
        tools: ToolRegistry | Iterable[Tool | ToolSpec],
        *,
        clock: Clock | None = None,
        signal: CancelToken | None = None,
        on_pause: Callable[[Pause], Any] | None = None,
        on_event: OnEvent | None = None,
        inbox: Inbox | None = None,
        tool_workers: int | None = None,
        before_effect: BeforeEffect | None = None,
        fresh: bool = False,
    ) -> Self:
        """A driver for ``loop``, after checking every option (nothing runs before).

        ``fresh``: ``loop`` was just made from ``tools`` (a registry ``run`` copied),
        so they match, and nothing was streamed yet. The keywords are
        :class:`~agentloop._keywords.DriveOptions`: their defaults live here.
        """
        if not isinstance(loop, AgentLoop):
            raise TypeError(f"loop must be an AgentLoop (from agent_loop or replay), got {loop!r}")
        model_method(model, cls.asynchronous)
        if signal is not None and not isinstance(signal, CancelToken):
            raise TypeError(f"signal must be a CancelToken or None, got {signal!r}")
        if on_pause is not None and not callable(on_pause):
            raise TypeError(f"on_pause must be callable or None, got {on_pause!r}")
        if on_event is not None and not callable(on_event):
            raise TypeError(f"on_event must be callable or None, got {on_event!r}")
        if inbox is not None and not isinstance(inbox, Inbox):
            raise TypeError(f"inbox must be an Inbox or None, got {inbox!r}")
        if before_effect is not None and not callable(before_effect):
            raise TypeError(f"before_effect must be callable or None, got {before_effect!r}")
        if tool_workers is not None and (type(tool_workers) is not int or tool_workers < 1):
            raise ValueError(f"tool_workers must be a positive int or None, got {tool_workers!r}")
        clock = _check_clock(clock)
        if fresh and type(tools) is ToolRegistry:
            registry = tools  # run()'s own copy, which made the loop's specs
        else:
            _check_not_mid_stream(loop)
            registry = ToolRegistry(tools)
            problem = tools_problem(registry, loop.tools)
            if problem is not None:
                raise ValueError(f"the tools do not match the loop's: {problem}")
        if not cls.asynchronous:
            for entry in registry:
                if isinstance(entry, Tool) and entry.is_async:
                    raise TypeError(
                        f"tool {entry.name!r} is an async function: run it with "
                        "agentloop.arun/adrive, or make it a plain (sync) function"
                    )
        return cls(
            model,
            registry,
            signal,
            on_pause,
            clock,
            inbox,
            on_event,
            tool_workers,
            before_effect=before_effect,
            loop=loop,
        )

    def watch(self, loop: AgentLoop) -> Callable[[], None]:
        """Subscribe ``on_event`` and the DEBUG logger to ``loop.log``; the returned
        function unsubscribes them and logs the result (call it after the end)."""
        log = self._log = loop.log
        unsubscribe = log.subscribe(self._tell) if self._on_event is not None else None
        unfollow = follow(log)  # DEBUG per event, only if enabled now: free otherwise

        def done() -> None:
            if unsubscribe is not None:
                unsubscribe()
            if unfollow is not None:
                unfollow()
            run_finished(loop.result)  # INFO

        return done

    def _tell(self, event: Event) -> None:
        """Call ``on_event`` with ``event``. What it raises is kept, not raised into the
        loop (that would end the generator without its ``run.finished``): the driver
        then ends the run at its next step (:meth:`stop_if_told`), and ``on_event`` is
        not called again."""
        if self._event_error is not None:
            return
        assert self._on_event is not None
        try:
            self._on_event(event)
        except StopIteration as exc:  # it would read as the run's end: as for on_pause
            self._event_error = _stop_iteration("on_event")
            self._event_error.__cause__ = exc
        except BaseException as exc:
            self._event_error = exc

    def stop_if_told(self, loop: AgentLoop) -> None:
        """Raise what ``on_event`` raised, if it did: the run, if still going, is first
        ended with ``Cancel("<ExcType>: <message>")`` (as for ``on_pause``)."""
        exc = self._event_error
        if exc is None:
            return
        if loop.result is None:
            abandon(loop, exc)
        raise exc

    def now(self) -> float:
        try:
            return float(self._clock())
        except StopIteration as exc:
            raise _stop_iteration("clock") from exc

    def queued(self) -> Reply | None:
        """The oldest reply waiting in the inbox, stamped; ``None`` when there is none."""
        inbox = self._inbox
        if inbox is None:
            return None
        reply = inbox.take()
        if reply is None or reply.at is not None:
            return reply
        return msgspec.structs.replace(reply, at=self.now())

    def queued_message(self) -> Steer | FollowUp | None:
        """The oldest reply waiting in the inbox if it is a ``Steer`` or a
        ``FollowUp``, stamped; else ``None``."""
        inbox = self._inbox
        message = inbox.take_message() if inbox is not None else None
        if message is None or message.at is not None:
            return message
        return msgspec.structs.replace(message, at=self.now())

    def starts(self, effect: Effect) -> bool:
        """Whether acting on ``effect`` starts a side effect (``before_effect`` is
        asked first): not the next chunk of an open stream, nor the next result of
        a batch already started."""
        kind = type(effect)
        if kind is ModelRequest:
            return self._opening(effect)  # type: ignore[arg-type]
        return kind is not ToolBatch or effect is not self._begun

    def _before_reply(self, effect: Effect, reply: Any) -> Any:
        """What ``before_effect`` returned for ``effect``: ``None`` (the driver acts
        on it), or a reply to send instead, stamped."""
        if reply is None:
            if type(effect) is ToolBatch:
                self._begun = effect
            return None
        if isinstance(reply, msgspec.Struct) and getattr(reply, "at", 0.0) is None:
            reply = msgspec.structs.replace(reply, at=self.now())
        return reply

    def _cancel(self) -> Cancel | None:
        signal = self._signal
        if signal is not None and signal.cancelled:
            return Cancel(reason=signal.reason, at=self.now())
        return None

    def _opening(self, request: ModelRequest) -> bool:
        """Whether ``request`` needs a new stream (the previous one, if any, was
        fully answered)."""
        return self._stream_id != request.id

    def _item_reply(self, request: ModelRequest, item: Any) -> Reply:
        """The reply for an item pulled from the model's stream; after a response
        or a failure the stream is done (:meth:`_done`)."""
        cancel = self._cancel()
        if cancel is not None:
            return cancel
        kind = type(item)
        problem: str | None
        if kind is not ModelChunk and kind is not ModelResponse and kind is not ModelFailure:
            problem = f"yielded {kind.__name__}, expected ModelChunk, ModelResponse or ModelFailure"
        else:
            # Output the loop would refuse as malformed (wrong field types, arguments
            # that are not a JSON object, text that is not valid Unicode) is the
            # model's fault: a failed run, not a CallerProtocolError out of run().
            # Checked here, once: the loop is told so and does not check it again.
            limits = DEFAULT_LIMITS if self._loop is None else self._loop.limits
            item, problem, arguments_ok = accept(item, limits)
        if problem is not None:
            return ModelFailure(
                request.id,
                f"the model's output was malformed: {problem}",
                code=MODEL_PROTOCOL_ERROR,
                at=self.now(),
            )
        reply: Reply = msgspec.structs.replace(item, at=self.now())
        if self._loop is not None:  # made and checked here: the loop need not check it again
            self._loop.checked_by_driver(reply, arguments_ok)
        return reply

    def _result(self, call_id: str, content: Content, is_error: bool) -> ToolResult:
        """The reply for a tool's outcome: its content with lone surrogates escaped (a
        tool may return ``os.listdir`` names), stamped.

        Blocks are checked here, against the run's limits: a malformed or too large
        block becomes a tool error naming it (the model sees it; the bytes are not
        recorded). The loop still counts the step's blocks (``blobs_per_step``).
        """
        if type(content) is str:
            content = escape_surrogates(content)
        else:
            problem = content_structure_problem(content, "the tool's result")
            if problem is None:
                limits = DEFAULT_LIMITS if self._loop is None else self._loop.limits
                problem, _ = parts_problem(content, "the tool's result", limits)  # type: ignore[arg-type]
            if problem is not None:
                content, is_error = f"the tool's result was refused: {problem}", True
        caller = self._caller
        child = None if caller is None else caller.take(call_id)
        reply = ToolResult(call_id, content, is_error, at=self.now(), child=child)
        if type(is_error) is bool and self._loop is not None:  # nothing left to check in it
            self._loop.checked_by_driver(reply, True)
        return reply

    def _ended(self, request: ModelRequest) -> ModelFailure:
        return ModelFailure(request.id, "model stream ended without a response", at=self.now())

    def _failure(self, request: ModelRequest, exc: Exception) -> ModelFailure:
        message = (
            escape_surrogates(exc.message) if isinstance(exc, ModelError) else exception_text(exc)
        )
        code = (
            MODEL_PROTOCOL_ERROR
            if getattr(exc, "code", None) == MODEL_PROTOCOL_ERROR
            else MODEL_ERROR
        )
        usage = attempts = None
        if isinstance(exc, ModelError):  # what the provider billed, and models tried before
            usage = exc.usage if type(exc.usage) is Usage else None
            attempts = exc.attempts if type(exc.attempts) is tuple else None
        failure = ModelFailure(request.id, message, code=code, at=self.now(), usage=usage)
        return msgspec.structs.replace(failure, attempts=attempts) if attempts else failure

    def _tool_result(self, request: ToolRequest, outcome: tuple[Content, bool]) -> ToolResult:
        # The tool ran: its result is recorded even if a cancel arrived meanwhile
        # (nothing that happened is lost); the cancel takes effect right after.
        content, is_error = outcome
        return self._result(request.call.id, content, is_error)

    def _batched(self, done: Done) -> ToolResult | Cancel:
        """The reply for the next result of a batch to complete; ``None`` means the
        run was cancelled and every call that started has been reported."""
        if done is None:
            cancel = self._cancel()
            assert cancel is not None
            return cancel
        return self._tool_result(*done)

    def _unasked(self, pause: Pause) -> Cancel | None:
        """The reply to ``pause`` when ``on_pause`` is not asked: a cancel, or no
        callback (a pause then cancels the run with its reason)."""
        cancel = self._cancel()
        if cancel is not None or self._on_pause is not None:
            return cancel
        reason = unanswered_pause(pause)
        logger.warning("run cancelled: %s", reason)
        return Cancel(reason=reason, at=self.now())

    def _ask(self, pause: Pause) -> Any:
        """``on_pause``'s answer to ``pause`` (an awaitable, for the async driver)."""
        assert self._on_pause is not None
        try:
            return self._on_pause(pause)
        except StopIteration as exc:
            raise _stop_iteration("on_pause") from exc

    def _answered(self, reply: Any) -> Any:
        cancel = self._cancel()
        if cancel is not None:
            return cancel
        if type(reply) is Resume or type(reply) is Cancel:
            return msgspec.structs.replace(reply, at=self.now())
        # Not a reply: the engine records it and raises CallerProtocolError.
        return reply


class _Driver(_Rules):
    """The sync driver: computes the reply to each effect, doing the I/O it needs."""

    __slots__ = ("_batches",)

    _batches: ThreadPoolBatches | None

    def before(self, effect: Effect) -> Any:
        """``before_effect``'s reply for ``effect`` (``None``: act on it)."""
        assert self.before_effect is not None
        try:
            reply = self.before_effect(effect)
        except StopIteration as exc:
            raise _stop_iteration("before_effect") from exc
        return self._before_reply(effect, reply)

    def reply_to(self, effect: Effect) -> Reply | Any:
        kind = type(effect)
        if kind is ModelRequest:
            return self._model_reply(effect)  # type: ignore[arg-type]
        self.close_stream()
        if kind is ToolRequest:
            cancel = self._cancel()
            if cancel is not None:
                return cancel
            outcome = execute_tool(self._registry, effect.call, self._caller)  # type: ignore[union-attr]
            return self._tool_result(effect, outcome)  # type: ignore[arg-type]
        if kind is ToolBatch:
            return self._batch_reply(effect)  # type: ignore[arg-type]
        if kind is Pause:
            unasked = self._unasked(effect)  # type: ignore[arg-type]
            if unasked is not None or self._on_pause is None:
                return unasked
            return self._answered(self._ask(effect))  # type: ignore[arg-type]
        raise TypeError(f"agent_loop yielded an unknown effect: {effect!r}")  # pragma: no cover

    def _model_reply(self, request: ModelRequest) -> Reply:
        if self._opening(request):
            self.close_stream()
            cancel = self._cancel()
            if cancel is not None:
                return cancel
            self._stream_id = request.id
            try:
                self._stream = iter(self._model.stream(request))
            except Exception as exc:
                self.close_stream()
                return self._failure(request, exc)
        try:
            item = next(self._stream)
        except StopIteration:
            reply: Reply = self._ended(request)
        except Exception as exc:
            reply = self._failure(request, exc)
        else:
            reply = self._item_reply(request, item)
            if type(reply) is ModelChunk:
                return reply
        self.close_stream()
        return reply

    def _batch_reply(self, batch: ToolBatch) -> ToolResult | Cancel:
        """The next result of ``batch`` to complete, run on the run's thread pool
        (started on the first batch)."""
        batches = getattr(self, "_batches", None)
        if batches is None:
            registry, caller = self._registry, self._caller
            from ._batch import ThreadPoolBatches  # on the first batch: threads cost an import

            batches = self._batches = ThreadPoolBatches(
                lambda call: execute_tool(registry, call, caller),
                self._signal,
                self._tool_workers,
                self._log,
            )
        return self._batched(batches.next_result(batch))

    def close_batches(self) -> None:
        """Let no batched call start any more; wait for the running ones."""
        batches = getattr(self, "_batches", None)
        if batches is not None:
            batches.close()

    def close_stream(self) -> None:
        stream, self._stream, self._stream_id = self._stream, None, None
        close = getattr(stream, "close", None)
        if close is not None:
            close()
