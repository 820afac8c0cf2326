"""The sync driver: :func:`run` owns every side effect the engine asks for.

Theory of operation
-------------------
:func:`agentloop.agent_loop` does no I/O; it yields effects and waits for replies.
:func:`run` is the loop around it, shaped like httpx's ``_send_handling_auth``:
prime the generator with ``next()``, answer each effect with ``send()``, take the
``RunResult`` from ``StopIteration.value``, and ``close()`` it in ``finally`` so an
exception anywhere (even ``KeyboardInterrupt``) still leaves a finished log.

- ``ModelRequest``: pull the model's stream one item at a time and send each item,
  stamped with the clock. The engine yields the same request again after every
  chunk, so the driver keeps the stream open across sends until the response (or
  a failure) has been sent. Any exception from the model becomes a
  ``ModelFailure``: the run ends ``failed`` with the message in the log, never an
  exception out of ``run``.
- ``ToolRequest``: execute through the :class:`~agentloop.ToolRegistry` (argument
  conversion and exceptions become error results there).
- ``Pause``: ask ``on_pause``; without one, a pause cancels the run.

The :class:`CancelToken` is checked before opening a model stream, after each item
pulled from it, before each tool, and before and after each pause callback; a
cancel becomes ``Cancel(reason=token.reason)``. A call blocked inside the model or
a tool is not interrupted: cancellation is cooperative. A tool that finished is
never thrown away: its result is recorded and the cancel takes effect right after.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, Protocol, runtime_checkable

import msgspec

from ._budget import Budget
from ._engine import agent_loop
from ._errors import MODEL_ERROR, MODEL_PROTOCOL_ERROR, ModelError
from ._events import EventLog
from ._hooks import HookRegistry
from ._json import SURROGATE
from ._limits import Limits
from ._logging import follow, run_finished
from ._protocol import (
    Cancel,
    Effect,
    ModelChunk,
    ModelFailure,
    ModelRequest,
    ModelResponse,
    Pause,
    Reply,
    Resume,
    RunResult,
    ToolRequest,
    ToolResult,
    Usage,
)
from ._tools import Tool, ToolRegistry
from ._toolspec import ToolSpec
from ._validation import reply_problem

__all__ = ["CancelToken", "Model", "run"]


@runtime_checkable
class Model(Protocol):
    """Anything that can answer a :class:`~agentloop.ModelRequest`.

    ``stream`` returns an iterable of zero or more ``ModelChunk`` then one
    ``ModelResponse`` (or one ``ModelFailure``), all with ``request_id ==
    request.id``. It may raise instead: :func:`run` turns the exception into a
    ``ModelFailure`` (raise :class:`~agentloop.ModelError` for provider errors).
    The driver stamps ``at`` itself; leave it ``None``.
    """

    def stream(
        self, request: ModelRequest
    ) -> Iterable[ModelChunk | ModelResponse | ModelFailure]: ...


class CancelToken:
    """A flag to stop a running :func:`run`, settable from any thread.

    The first :meth:`cancel` wins; later calls change nothing.

    >>> token = CancelToken()
    >>> token.cancel("user pressed stop")
    >>> token.cancelled, token.reason
    (True, 'user pressed stop')
    """

    __slots__ = ("_event", "_lock", "_reason")

    def __init__(self) -> None:
        self._event = threading.Event()
        self._lock = threading.Lock()
        self._reason = ""

    def cancel(self, reason: str = "cancelled") -> None:
        """Ask the run to stop; it ends ``cancelled`` with ``reason``."""
        with self._lock:
            if not self._event.is_set():
                self._reason = reason
                self._event.set()

    @property
    def cancelled(self) -> bool:
        """Whether :meth:`cancel` was called."""
        return self._event.is_set()

    @property
    def reason(self) -> str:
        """The reason given to :meth:`cancel` (``""`` until then)."""
        return self._reason

    def wait(self, timeout: float | None = None) -> bool:
        """Block until cancelled or ``timeout`` seconds pass; return :attr:`cancelled`."""
        return self._event.wait(timeout)

    def __repr__(self) -> str:
        state = f"cancelled {self._reason!r}" if self.cancelled else "active"
        return f"<CancelToken {state}>"


Clock = Callable[[], float]
OnPause = Callable[[Pause], "Resume | Cancel"]


def run(
    messages: Sequence[Any],
    *,
    model: Model,
    tools: ToolRegistry | Iterable[Tool | ToolSpec],
    system: str | None = None,
    max_steps: int = 8,
    budget: Budget | None = None,
    hooks: HookRegistry | None = None,
    log: EventLog | None = None,
    signal: CancelToken | None = None,
    on_pause: OnPause | None = None,
    clock: Clock | None = None,
    started_at: float | None = None,
    limits: Limits | None = None,
    output: Any = None,
    output_retries: int = 2,
) -> RunResult:
    """Run the agent loop to the end, calling the model and the tools.

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
            pause ends the run cancelled with the pause's reason.
        clock: returns the time stamped on every reply (default ``time.time``).
        started_at: the time of ``session.start`` (default: ``clock()`` now).
        limits: the loop's ceilings (:class:`Limits`; default: the ``MAX_*`` values).
        output, output_retries: structured output (see :func:`agent_loop`).

    Returns:
        The :class:`RunResult`. Model errors, tool errors and cancellation are
        outcomes in it, not exceptions.

    Raises:
        TypeError, ValueError: bad options (raised before anything runs).
        CallerProtocolError: ``on_pause`` returned something that is not a
            ``Resume`` or ``Cancel`` (a bug in the callback; the log records it).
        BaseException: an exception from ``on_pause``, ``clock`` or a tool's
            ``BaseException`` (e.g. ``KeyboardInterrupt``) is first recorded as
            ``Cancel("<ExcType>: <message>")`` ending the log, then re-raised. An
            exception from a log subscriber propagates as is.
    """
    if not callable(getattr(model, "stream", None)):
        raise TypeError(f"model must have a stream(request) method, got {model!r}")
    if signal is not None and not isinstance(signal, CancelToken):
        raise TypeError(f"signal must be a CancelToken or None, got {signal!r}")
    if on_pause is not None and not callable(on_pause):
        raise TypeError(f"on_pause must be callable or None, got {on_pause!r}")
    if clock is None:
        clock = time.time
    elif not callable(clock):
        raise TypeError(f"clock must be callable or None, got {clock!r}")
    registry = ToolRegistry(tools)
    loop = agent_loop(
        messages,
        tools=registry,
        system=system,
        max_steps=max_steps,
        budget=budget,
        hooks=hooks,
        log=log,
        started_at=float(clock()) if started_at is None else started_at,
        limits=limits,
        output=output,
        output_retries=output_retries,
    )
    follow(loop.log)  # DEBUG per event, only if enabled now: free otherwise
    driver = _Driver(model, registry, signal, on_pause, clock)
    try:
        effect = next(loop)
        while True:
            try:
                reply = driver.reply_to(effect)
            except BaseException as exc:
                # Recorded as Cancel("<ExcType>: <message>") in the log, then
                # re-raised by the generator: the log says why the run stopped.
                loop.throw(exc)
                raise  # pragma: no cover - throw() re-raises exc
            effect = loop.send(reply)
    except StopIteration as stop:
        result: RunResult = stop.value
        return result
    finally:
        driver.close_stream()
        loop.close()
        run_finished(loop.result)  # INFO


def _valid_unicode(text: str) -> str:
    """``text`` with lone surrogates (e.g. from ``os.listdir`` file names) escaped as
    ``\\udce9``, so the log can hold it."""
    if text.isascii() or SURROGATE.search(text) is None:
        return text
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


class _Driver:
    """Computes the reply to each effect; holds the open model stream between sends."""

    __slots__ = ("_clock", "_model", "_on_pause", "_registry", "_signal", "_stream", "_stream_id")

    def __init__(
        self,
        model: Model,
        registry: ToolRegistry,
        signal: CancelToken | None,
        on_pause: OnPause | None,
        clock: Clock,
    ) -> None:
        self._model = model
        self._registry = registry
        self._signal = signal
        self._on_pause = on_pause
        self._clock = clock
        self._stream: Iterator[Any] | None = None
        self._stream_id: str | None = None

    def reply_to(self, effect: Effect) -> Reply | Any:
        kind = type(effect)
        if kind is ModelRequest:
            return self._model_reply(effect)  # type: ignore[arg-type]
        self.close_stream()
        if kind is ToolRequest:
            return self._tool_reply(effect)  # type: ignore[arg-type]
        if kind is Pause:
            return self._pause_reply(effect)  # type: ignore[arg-type]
        raise TypeError(f"agent_loop yielded an unknown effect: {effect!r}")  # pragma: no cover

    def _cancel(self) -> Cancel | None:
        signal = self._signal
        if signal is not None and signal.cancelled:
            return Cancel(reason=signal.reason, at=float(self._clock()))
        return None

    def _model_reply(self, request: ModelRequest) -> Reply:
        if self._stream_id != request.id:
            # A new request (the previous stream, if any, was fully answered).
            self.close_stream()
            cancel = self._cancel()
            if cancel is not None:
                return cancel
            self._stream_id = request.id
            try:
                self._stream = iter(self._model.stream(request))
            except Exception as exc:
                return self._failure(request, exc)
        assert self._stream is not None
        try:
            item = next(self._stream)
        except StopIteration:
            self.close_stream()
            return ModelFailure(
                request.id, "model stream ended without a response", at=float(self._clock())
            )
        except Exception as exc:
            return self._failure(request, exc)
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
            problem = reply_problem(item)
        if problem is not None:
            self.close_stream()
            return ModelFailure(
                request.id,
                f"the model's output was malformed: {problem}",
                code=MODEL_PROTOCOL_ERROR,
                at=float(self._clock()),
            )
        reply: ModelChunk | ModelResponse | ModelFailure = msgspec.structs.replace(
            item, at=float(self._clock())
        )
        if kind is not ModelChunk:
            self.close_stream()
        return reply

    def _failure(self, request: ModelRequest, exc: Exception) -> ModelFailure:
        self.close_stream()
        message = exc.message if isinstance(exc, ModelError) else f"{type(exc).__name__}: {exc}"
        message = _valid_unicode(message)
        code = (
            MODEL_PROTOCOL_ERROR
            if getattr(exc, "code", None) == MODEL_PROTOCOL_ERROR
            else MODEL_ERROR
        )
        usage = attempts = None
        if isinstance(exc, ModelError):  # what the provider billed, and models tried before
            usage = exc.usage if type(exc.usage) is Usage else None
            attempts = exc.attempts if type(exc.attempts) is tuple else None
        failure = ModelFailure(request.id, message, code=code, at=float(self._clock()), usage=usage)
        return msgspec.structs.replace(failure, attempts=attempts) if attempts else failure

    def _tool_reply(self, request: ToolRequest) -> ToolResult | Cancel:
        cancel = self._cancel()
        if cancel is not None:
            return cancel
        content, is_error = self._registry.execute(request.call)
        # The tool ran: its result is recorded even if a cancel arrived meanwhile
        # (nothing that happened is lost); the cancel takes effect right after.
        return ToolResult(
            request.call.id, _valid_unicode(content), is_error, at=float(self._clock())
        )

    def _pause_reply(self, pause: Pause) -> Any:
        cancel = self._cancel()
        if cancel is not None:
            return cancel
        if self._on_pause is None:
            return Cancel(reason=pause.reason, at=float(self._clock()))
        reply = self._on_pause(pause)
        cancel = self._cancel()
        if cancel is not None:
            return cancel
        if type(reply) is Resume or type(reply) is Cancel:
            return msgspec.structs.replace(reply, at=float(self._clock()))
        # Not a reply: the engine records it and raises CallerProtocolError.
        return reply

    def close_stream(self) -> None:
        stream, self._stream, self._stream_id = self._stream, None, None
        close = getattr(stream, "close", None)
        if close is not None:
            close()
