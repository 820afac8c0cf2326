"""What every provider adapter shares: stream assembly, retries, error classification.

Theory of operation
-------------------
An adapter's :meth:`~StreamingModel.stream` is a generator of replies for one
:class:`~agentloop.ModelRequest`: zero or more :class:`~agentloop.ModelChunk`, then
one :class:`~agentloop.ModelResponse` or one :class:`~agentloop.ModelFailure`.
Given the SDK's async client instead, the adapter has the same replies as an async
iterator, :meth:`~StreamingModel.astream` (and :attr:`~StreamingModel.asynchronous`
is ``True``, so ``arun``/``adrive`` take it and ``run``/``drive`` refuse it).

Both are built on one parser per provider, which does no I/O (the engine's own
sans-IO shape, one level down): a generator that yields :data:`NEXT` when it wants
the next event of the provider's stream, is sent that event (or :data:`END` when
the stream is over), and yields the replies it makes of them. A :class:`Feed`
drives it one event at a time; the sync attempt feeds it from a ``for`` loop, the
async one from an ``async for`` loop, and nothing else differs: the same replies,
the same usage, the same errors. Subclasses implement ``_call(request)``: how to
start the provider's stream (the same SDK call for either client: the async
client's returns an awaitable), its parser, and what its exceptions mean
(:class:`ProviderCall`). The parser turns events into replies through a
:class:`StreamAssembler`, which guarantees what the loop checks (DESIGN §8):

- the streamed chunks, normalized (adjacent text merged, other blocks as
  boundaries), equal the final content; the final content is *built from* what was
  streamed, in the order it was streamed, so the two cannot disagree;
- text never pushes a step past ``MAX_CHUNKS_PER_STEP`` chunks: the first half of
  the budget streams text deltas one by one; after that, text is held back and sent
  as one chunk before the next complete block and before the response. (A response
  of more than about 500 tool calls can still exceed the limit; the loop then fails
  the run with ``MODEL_PROTOCOL_ERROR``, as for any model that streams too much.)
- text deltas are streamed as they arrive; tool calls and thinking blocks are sent
  as one complete block each, when the provider says they are complete.

Output the adapter cannot make sense of (tool arguments that are not a JSON object,
a stream that ends early) raises :class:`MalformedOutput` inside the parser; the
:class:`Feed` turns it into ``ModelFailure(code="MODEL_PROTOCOL_ERROR")`` and the
stream ends. It never raises out of ``stream()``/``astream()``.

Provider errors (HTTP status, connection, an error event mid-stream) are raised as
:class:`~agentloop.ModelError`; :func:`agentloop.run` turns them into
``ModelFailure(code="MODEL_ERROR")``. Nothing is retried unless the adapter was
given a :class:`RetryPolicy`: then an error of a retryable kind is retried with
backoff, but only while nothing has been yielded for the request yet (a stream that
already produced chunks cannot be taken back). When the provider said how long to
wait (:attr:`~agentloop.ModelError.retry_after`, read by :func:`retry_after` from
the ``retry-after-ms``/``retry-after`` headers, or Gemini's ``RetryInfo``), that
wait replaces the backoff; a wait longer than the policy's
``max_retry_after_seconds`` is not retried at all (retrying sooner than asked
would only fail again): the error is raised, its ``retry_after`` telling the caller
when to come back. Every attempt, successful or not, is
recorded in the adapter's ``attempts``, and each retry is logged as a WARNING on
the ``agentloop.models`` logger (:class:`_Tries` keeps that book for both paths).
The async path waits with an async ``sleep`` (``asyncio.sleep`` unless given one).

Cancelling the task that awaits ``astream`` (as ``arun`` does when its task is
cancelled) closes the SDK's stream, and with it the HTTP response, on the way out.

Provider blocks (:class:`~agentloop.ProviderBlock`) of another provider are never
sent: :func:`sendable` drops them, with a DEBUG line on the same logger.

A request's structured output (``ModelRequest.output``, from ``output=T``) goes to
the provider as its own JSON-schema response format where it has one (named by
:func:`schema_name`), else as an instruction at the end of the system prompt
(:func:`output_system`).
"""

from __future__ import annotations

import base64
import collections
import contextlib
import datetime
import email.utils
import enum
import inspect
import logging
import math
import re
import time
from collections.abc import (
    AsyncGenerator,
    AsyncIterator,
    Callable,
    Generator,
    Iterable,
    Iterator,
    Mapping,
)
from typing import Any, ClassVar, Final, Generic, Literal, TypeVar

import msgspec

from .._deep import parse as parse_deep
from .._errors import MODEL_PROTOCOL_ERROR, AgentLoopError, ModelError
from .._limits import MAX_CHUNKS_PER_STEP
from .._messages import (
    Block,
    MediaBlock,
    Message,
    ProviderBlock,
    TextBlock,
    ThinkingBlock,
    ToolCall,
)
from .._output import OutputSpec
from .._protocol import ModelChunk, ModelFailure, ModelRequest, ModelResponse, Usage

__all__ = [
    "DEFAULT_RETRY_ON",
    "END",
    "NEXT",
    "Feed",
    "MalformedOutput",
    "ModelReply",
    "Parser",
    "ProviderCall",
    "RetryAttempt",
    "RetryPolicy",
    "StreamAssembler",
    "StreamingModel",
    "base64_text",
    "base_type",
    "data_url",
    "decode_arguments",
    "encode_arguments",
    "file_name",
    "first_text",
    "kind_from_status",
    "logger",
    "media_refused",
    "message_where",
    "output_system",
    "retry_after",
    "schema_name",
    "sendable",
]

#: Where adapters log: WARNING for retries and fallbacks, DEBUG for dropped blocks.
logger = logging.getLogger("agentloop.models")

ModelReply = ModelChunk | ModelResponse | ModelFailure


class Signal(enum.Enum):
    """What a parser and its :class:`Feed` say to each other besides events and replies."""

    #: Yielded by a parser: it wants the next event of the provider's stream.
    NEXT = "next"
    #: Sent to a parser instead of an event: the provider's stream is over.
    END = "end"


NEXT: Final = Signal.NEXT
END: Final = Signal.END

E = TypeVar("E")

#: A provider's stream parser: yields :data:`NEXT` to ask for an event (and is sent
#: the event, or :data:`END`), and yields the replies it makes of the events. It
#: asks for its first event before it replies, and returns after its last reply.
Parser = Generator[ModelReply | Literal[Signal.NEXT], E | Literal[Signal.END], None]

#: Error kinds a :class:`RetryPolicy` retries unless told otherwise.
DEFAULT_RETRY_ON: Final = frozenset({"rate_limit", "connection", "server"})

#: Chunks streamed one per text delta; past this, text is batched (see module doc).
_EAGER_CHUNKS: Final = MAX_CHUNKS_PER_STEP // 2

#: How many attempts an adapter remembers in ``attempts``.
_ATTEMPTS_KEPT: Final = 256


class RetryPolicy(msgspec.Struct, frozen=True):
    """Retry a model call that failed before it produced anything.

    Between two tries the adapter waits the backoff (``backoff_seconds``, then
    times ``multiplier`` each time, at most ``max_backoff_seconds``), unless the
    provider said how long to wait (:attr:`agentloop.ModelError.retry_after`): then
    it waits exactly that. A provider that asks for more than
    ``max_retry_after_seconds`` is not retried: the error is raised at once (with
    its ``retry_after``), since a try before the provider's time would fail again.

    Attributes:
        attempts: total tries per request, the first included (``1`` = no retry).
        backoff_seconds: wait before the second try.
        multiplier: each later wait is the previous one times this.
        max_backoff_seconds: no backoff is longer than this.
        retry_on: the :attr:`agentloop.ModelError.kind` values worth retrying.
        max_retry_after_seconds: the longest wait asked by the provider that the
            adapter sleeps through (``math.inf``: any).

    >>> policy = RetryPolicy(4, 0.5)
    >>> [policy.delay(n) for n in (1, 2, 3)]
    [0.5, 1.0, 2.0]
    >>> policy.next_delay(1, retry_after=20.0), policy.next_delay(1, retry_after=600.0)
    (20.0, None)
    """

    attempts: int = 3
    backoff_seconds: float = 1.0
    multiplier: float = 2.0
    max_backoff_seconds: float = 30.0
    retry_on: frozenset[str] = DEFAULT_RETRY_ON
    max_retry_after_seconds: float = 60.0

    def __post_init__(self) -> None:
        if type(self.attempts) is not int or self.attempts < 1:
            raise ValueError(f"RetryPolicy.attempts must be an int >= 1, got {self.attempts!r}")
        for name in ("backoff_seconds", "max_backoff_seconds", "max_retry_after_seconds"):
            value = getattr(self, name)
            if not _number(value) or not value >= 0:  # (not >= 0: NaN too)
                raise ValueError(f"RetryPolicy.{name} must be a number >= 0, got {value!r}")
        multiplier = self.multiplier
        if not _number(multiplier) or not multiplier >= 1:
            raise ValueError(f"RetryPolicy.multiplier must be a number >= 1, got {multiplier!r}")

    def delay(self, failed_attempt: int) -> float:
        """The backoff after attempt number ``failed_attempt`` (1-based) failed."""
        wait = self.backoff_seconds * self.multiplier ** (failed_attempt - 1)
        return float(min(wait, self.max_backoff_seconds))

    def next_delay(self, failed_attempt: int, retry_after: float | None = None) -> float | None:
        """Seconds to wait after attempt number ``failed_attempt`` failed, when the
        provider asked for ``retry_after`` seconds (``None``: it did not say).

        Returns ``retry_after`` itself when it is at most ``max_retry_after_seconds``,
        ``None`` (do not retry) when it is more, and :meth:`delay` when there is no ask.
        """
        if retry_after is None or not retry_after >= 0:  # (a NaN is no ask)
            return self.delay(failed_attempt)
        if retry_after > self.max_retry_after_seconds or not math.isfinite(retry_after):
            return None
        return float(retry_after)


def _number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


class RetryAttempt(msgspec.Struct, frozen=True, kw_only=True):
    """One try at answering a request, as recorded in an adapter's ``attempts``.

    Attributes:
        request_id: the :class:`~agentloop.ModelRequest` it answered.
        number: 1 for the first try of that request, 2 for the first retry, ...
        error: the :class:`~agentloop.ModelError` message, ``None`` if it succeeded
            (the stream ran to its end; a ``ModelFailure`` it yielded counts as
            an answer, not an error).
        kind: the error's kind, when it failed.
        status_code: the error's HTTP status, when there was one.
        retried: whether another try followed.
        delay_seconds: how long the adapter slept before that next try.
        retry_after: the wait the provider asked for, when it failed and said
            (:attr:`agentloop.ModelError.retry_after`).
    """

    request_id: str
    number: int
    error: str | None = None
    kind: str | None = None
    status_code: int | None = None
    retried: bool = False
    delay_seconds: float = 0.0
    retry_after: float | None = None


class MalformedOutput(AgentLoopError):
    """The provider's stream cannot be turned into valid replies (becomes a
    ``ModelFailure`` with code ``MODEL_PROTOCOL_ERROR``; never leaves the adapter)."""


class Feed(Generic[E]):
    """Drives a :data:`Parser` one provider event at a time.

    :meth:`send` gives the replies the parser made of an event; :attr:`done` is set
    once the parser has returned (it read all it needed: the caller stops reading
    the stream). :class:`MalformedOutput` raised by the parser becomes the
    request's last reply, ``ModelFailure(code="MODEL_PROTOCOL_ERROR")``.
    """

    __slots__ = ("_parser", "done", "request_id")

    def __init__(self, parser: Parser[E], request_id: str) -> None:
        self._parser = parser
        self.request_id = request_id
        #: The parser has returned: no more events are wanted.
        self.done = False
        first = next(parser)  # the parser's set-up, up to its first ask for an event
        assert first is NEXT, "a parser asks for an event before it replies"

    def send(self, event: E | Literal[Signal.END]) -> list[ModelReply]:
        """The replies the parser makes of ``event`` before it asks for another."""
        parser = self._parser
        ready: list[ModelReply] = []
        try:
            item = parser.send(event)
            while item is not NEXT:
                ready.append(item)
                item = next(parser)
        except StopIteration:
            self.done = True
        except MalformedOutput as problem:
            self.done = True
            ready.append(ModelFailure(self.request_id, str(problem), code=MODEL_PROTOCOL_ERROR))
        return ready


class ProviderCall(Generic[E]):
    """One try at a request, as an adapter's ``_call(request)`` describes it.

    Args:
        open: starts the provider's stream: the SDK call, which returns the stream
            with a sync client and an awaitable of it with an async client.
        parser: the :data:`Parser` of that stream's events.
        request_id: the request's id (for the ``ModelFailure`` of malformed output).
        errors: the SDK's exception classes; any of them raised while the stream is
            opened or read becomes ``error(exc)``.
        error: turns one of those exceptions into a :class:`~agentloop.ModelError`.
        ready: called with the opened stream before it is read.
    """

    __slots__ = ("errors", "feed", "open", "ready", "translate")

    def __init__(
        self,
        *,
        open: Callable[[], Any],
        parser: Parser[E],
        request_id: str,
        errors: tuple[type[BaseException], ...],
        error: Callable[[Any], ModelError],
        ready: Callable[[Any], None] = lambda stream: None,
    ) -> None:
        self.open = open
        self.feed = Feed(parser, request_id)
        self.errors = errors
        self.translate = error
        self.ready = ready

    @contextlib.contextmanager
    def translated(self) -> Iterator[None]:
        """The SDK's exceptions, raised inside, leave as :class:`~agentloop.ModelError`."""
        try:
            yield
        except self.errors as exc:
            raise self.translate(exc) from exc


class StreamingModel:
    """Base class of the adapters: the retry loop around one try at a request.

    Subclasses set :attr:`provider` and :attr:`clients` and implement ``_call``
    (or, for the sync path alone, override ``_attempt``).
    """

    provider: ClassVar[str] = ""
    #: The SDK's client classes as users know them: (sync, async), for error messages.
    clients: ClassVar[tuple[str, str]] = ("a sync client", "an async client")

    def __init__(
        self,
        *,
        retry: RetryPolicy | None = None,
        sleep: Callable[[float], Any] | None = None,
        asynchronous: bool = False,
    ) -> None:
        if retry is not None and not isinstance(retry, RetryPolicy):
            raise TypeError(f"retry must be a RetryPolicy or None, got {retry!r}")
        if sleep is not None and not callable(sleep):
            raise TypeError(f"sleep must be callable, got {sleep!r}")
        if not asynchronous and inspect.iscoroutinefunction(sleep):
            raise TypeError(
                f"sleep {sleep!r} is an async function, but the client is sync: pass a "
                "plain function (time.sleep), or give the adapter the SDK's async client"
            )
        self.retry = retry
        #: The most recent attempts (up to 256), oldest first.
        self.attempts: collections.deque[RetryAttempt] = collections.deque(maxlen=_ATTEMPTS_KEPT)
        #: ``True``: the adapter has the SDK's async client and serves
        #: ``arun``/``adrive`` (:meth:`astream`); ``False``: ``run``/``drive``
        #: (:meth:`stream`). The drivers read it to refuse the other pairing.
        self.asynchronous = asynchronous
        if sleep is None:
            sleep = _asyncio_sleep if asynchronous else time.sleep
        self._sleep: Callable[[float], Any] = sleep

    def stream(self, request: ModelRequest) -> Iterator[ModelReply]:
        """Answer ``request``: chunks, then one response or one failure.

        Raises:
            TypeError: the adapter has an async client (use :meth:`astream`).
            agentloop.ModelError: the provider answered with an error or could not
                be reached (after the retries the policy allows, if any); raised
                while iterating.
        """
        if self.asynchronous:
            raise TypeError(self._mismatch("astream", "agentloop.arun/adrive"))
        return self._retried(request)

    def astream(self, request: ModelRequest) -> AsyncIterator[ModelReply]:
        """:meth:`stream` for the asyncio drivers, with the SDK's async client.

        Raises:
            TypeError: the adapter has a sync client (use :meth:`stream`).
            agentloop.ModelError: as for :meth:`stream`.
        """
        if not self.asynchronous:
            raise TypeError(self._mismatch("stream", "agentloop.run/drive"))
        return self._aretried(request)

    def _mismatch(self, method: str, drivers: str) -> str:
        sync, async_ = self.clients
        has, other = (async_, sync) if self.asynchronous else (sync, async_)
        return f"{self!r} was given {has}: use {method}(request) ({drivers} do), or give it {other}"

    def _retried(self, request: ModelRequest) -> Iterator[ModelReply]:
        tries = _Tries(self, request)
        while not tries.over:
            try:
                with contextlib.closing(self._attempt(request)) as attempt:
                    for item in attempt:
                        yield tries.yielded(item)
                tries.succeeded()
            except ModelError as error:
                self._sleep(tries.failed(error))

    async def _aretried(self, request: ModelRequest) -> AsyncIterator[ModelReply]:
        tries = _Tries(self, request)
        while not tries.over:
            try:
                # (closed with this generator: ``async for`` alone would leave it,
                # and the SDK stream in it, to the event loop's clean-up, later)
                async with contextlib.aclosing(self._aattempt(request)) as attempt:
                    async for item in attempt:
                        yield tries.yielded(item)
                tries.succeeded()
            except ModelError as error:
                waited = self._sleep(tries.failed(error))
                if inspect.isawaitable(waited):
                    await waited

    def _attempt(self, request: ModelRequest) -> Generator[ModelReply, None, None]:
        """One try at ``request`` with the sync client."""
        call = self._call(request)
        with call.translated():
            stream = call.open()
            call.ready(stream)
            with contextlib.closing(stream):
                feed = call.feed
                for event in stream:
                    yield from feed.send(event)
                    if feed.done:
                        return
                yield from feed.send(END)

    async def _aattempt(self, request: ModelRequest) -> AsyncGenerator[ModelReply, None]:
        """One try at ``request`` with the async client (:meth:`_attempt`'s twin)."""
        call = self._call(request)
        with call.translated():
            stream = await call.open()
            call.ready(stream)
            try:
                async for event in stream:
                    for item in call.feed.send(event):
                        yield item
                    if call.feed.done:
                        break
                else:
                    for item in call.feed.send(END):
                        yield item
            finally:
                await _aclose(stream)

    def _call(self, request: ModelRequest) -> ProviderCall[Any]:  # pragma: no cover
        raise NotImplementedError


class _Tries:
    """The book of one request's tries, kept the same way by both retry loops."""

    __slots__ = ("_yielded", "model", "number", "over", "request")

    def __init__(self, model: StreamingModel, request: ModelRequest) -> None:
        self.model = model
        self.request = request
        self.number = 1
        self.over = False
        self._yielded = False

    def yielded(self, item: ModelReply) -> ModelReply:
        self._yielded = True
        return item

    def succeeded(self) -> None:
        self.over = True
        self.model.attempts.append(RetryAttempt(request_id=self.request.id, number=self.number))

    def failed(self, error: ModelError) -> float:
        """Record the failed try; the seconds to wait before the next one.

        Raises:
            ModelError: ``error``, when it is not to be retried.
        """
        model, number = self.model, self.number
        policy = model.retry
        asked = error.retry_after
        delay = None
        if (
            policy is not None
            and not self._yielded
            and number < policy.attempts
            and error.kind in policy.retry_on
        ):
            delay = policy.next_delay(number, asked)
            if delay is None:
                logger.warning(
                    "%r: attempt %d of %d for %s failed (%s); not retrying: the provider "
                    "asks to wait %.3gs, more than RetryPolicy.max_retry_after_seconds=%.3g",
                    model,
                    number,
                    policy.attempts,
                    self.request.id,
                    error.message,
                    asked,
                    policy.max_retry_after_seconds,
                )
        model.attempts.append(
            RetryAttempt(
                request_id=self.request.id,
                number=number,
                error=error.message,
                kind=error.kind,
                status_code=error.status_code,
                retried=delay is not None,
                delay_seconds=delay or 0.0,
                retry_after=asked,
            )
        )
        if delay is None or policy is None:
            raise error
        logger.warning(
            "%r: attempt %d of %d for %s failed (%s); retrying in %.3gs%s",
            model,
            number,
            policy.attempts,
            self.request.id,
            error.message,
            delay,
            "" if asked is None else " (as the provider asked)",
        )
        self.number += 1
        return delay


async def _asyncio_sleep(seconds: float) -> None:
    import asyncio  # on first use: importing the adapters does not import asyncio

    await asyncio.sleep(seconds)


async def _aclose(stream: Any) -> None:
    """Close an SDK's async stream (``aclose()`` on async generators, ``close()`` on
    the OpenAI and Anthropic streams)."""
    close = getattr(stream, "aclose", None) or stream.close
    await close()


class StreamAssembler:
    """Turns provider deltas into chunks and builds the final content from them.

    Every method returns the chunks to yield now, in order.
    """

    __slots__ = ("_content", "_held", "_thinking", "chunks", "request_id", "tool_calls")

    def __init__(self, request_id: str) -> None:
        self.request_id = request_id
        #: Chunks handed out so far.
        self.chunks = 0
        #: Tool calls handed out so far.
        self.tool_calls = 0
        self._content: list[list[str] | Block] = []  # text runs are lists of deltas
        self._held: list[str] = []  # text in the content but not streamed yet
        self._thinking: list[str] = []  # reasoning deltas of the thinking block still open

    def thinking(self, delta: str | None) -> list[ModelChunk]:
        """A reasoning delta; sent as one :class:`~agentloop.ThinkingBlock` when the
        reasoning ends (anything else arrives, or the stream ends)."""
        if delta:
            self._thinking.append(delta)
        return []

    def text(self, delta: str | None) -> list[ModelChunk]:
        """A text delta (empty ones are dropped)."""
        if not delta:
            return []
        out = self._close_thinking()
        content = self._content
        last = content[-1] if content else None
        if isinstance(last, list):
            last.append(delta)
        else:
            content.append([delta])
        if self.chunks < _EAGER_CHUNKS:
            out.append(self._chunk(TextBlock(delta)))
        else:
            self._held.append(delta)
        return out

    def block(self, block: Block) -> list[ModelChunk]:
        """A complete non-text block (a tool call, thinking or provider block)."""
        out = self.flush()
        self._content.append(block)
        if type(block) is ToolCall:
            self.tool_calls += 1
        out.append(self._chunk(block))
        return out

    def flush(self) -> list[ModelChunk]:
        """Held-back text, as one chunk, and the open thinking block."""
        out = self._close_thinking()
        if self._held:
            text = "".join(self._held)
            self._held.clear()
            out.append(self._chunk(TextBlock(text)))
        return out

    def _close_thinking(self) -> list[ModelChunk]:
        if not self._thinking:
            return []
        text = "".join(self._thinking)
        self._thinking.clear()
        return self.block(ThinkingBlock(text))

    def response(
        self,
        response_id: str,
        stop_reason: str,
        usage: Usage | None,
        stop_message: str | None = None,
    ) -> ModelResponse:
        """The final response; call :meth:`flush` first and yield what it returns."""
        content = tuple(
            TextBlock("".join(part)) if isinstance(part, list) else part for part in self._content
        )
        if stop_reason == "stop" and self.tool_calls:
            # OpenAI answers a forced tool_choice with finish_reason "stop"; the calls
            # are what the model asked for, so the response is a tool_call response.
            stop_reason = "tool_call"
        return ModelResponse(
            self.request_id, response_id, content, stop_reason, usage, stop_message=stop_message
        )

    def _chunk(self, block: Block) -> ModelChunk:
        self.chunks += 1
        return ModelChunk(self.request_id, block)


def sendable(block: Block, provider: str, kinds: Iterable[str]) -> bool:
    """Whether an adapter for ``provider`` sends ``block`` back to its API.

    Every block but a :class:`~agentloop.ProviderBlock` is sendable; a provider block
    only when it is ``provider``'s and of one of ``kinds``. What is dropped is logged
    at DEBUG level (another provider's reasoning cannot go to this one).
    """
    if type(block) is not ProviderBlock:
        return True
    if block.provider == provider and block.kind in kinds:
        return True
    logger.debug(
        "%s adapter: not sending a %r block of provider %r", provider, block.kind, block.provider
    )
    return False


def media_refused(provider: str, where: str, index: int, part: MediaBlock, why: str) -> ModelError:
    """The :class:`~agentloop.ModelError` for a block ``provider``'s API cannot take.

    Raised while the request is built, so nothing is sent: ``kind="bad_request"``
    (never retried), naming the message (``where``), the block's index in its
    content, its type and media type, and why.
    """
    source = "inline bytes" if part.data is not None else "a URL"
    return ModelError(
        f"{where}: content[{index}] ({type(part).__name__} {part.media_type!r}, {source}): "
        f"the {provider} adapter cannot send {why}; nothing was sent",
        provider=provider,
        kind="bad_request",
    )


def message_where(index: int, message: Message) -> str:
    """``messages[3] (tool_result 'r-1')``: a request's message, as errors name it."""
    role = type(message).__struct_config__.tag
    return f"messages[{index}] ({role} {message.id!r})"


def base64_text(data: bytes) -> str:
    """``data`` as standard base64 text (what every provider's JSON takes)."""
    return base64.b64encode(data).decode("ascii")


def data_url(part: MediaBlock) -> str:
    """An inline block as a ``data:`` URL; a block by reference as its URL."""
    if part.data is None:
        return part.url or ""
    return f"data:{part.media_type};base64,{base64_text(part.data)}"


def file_name(part: MediaBlock) -> str:
    """The block's ``name``, else ``document`` with the media type's usual extension."""
    if part.name:
        return part.name
    return "document" + _EXTENSIONS.get(base_type(part.media_type), "")


#: File name extensions of the document types providers take (a fixed table: the
#: ``mimetypes`` module's answer depends on the machine's ``mime.types`` files).
_EXTENSIONS: Final = {
    "application/pdf": ".pdf",
    "text/plain": ".txt",
    "text/markdown": ".md",
    "text/csv": ".csv",
    "text/html": ".html",
    "application/json": ".json",
}


def base_type(value: str) -> str:
    """A media type as the adapters compare it: lower case, without parameters
    (``"Audio/WAV; rate=16000"`` -> ``"audio/wav"``)."""
    return value.split(";", 1)[0].strip().lower()


def decode_arguments(raw: str, where: str) -> dict[str, Any]:
    """Parse tool-call arguments; an empty string means no arguments.

    Raises:
        MalformedOutput: not JSON, or JSON that is not an object.
    """
    text = raw.strip()
    if not text:
        return {}
    try:
        try:
            value = msgspec.json.decode(text)
        except RecursionError:  # deeper than msgspec's recursive decoder goes
            value = parse_deep(text)
    except msgspec.DecodeError as exc:
        raise MalformedOutput(
            f"{where}: the arguments are not valid JSON ({exc}): {_preview(raw)}"
        ) from None
    if type(value) is not dict:
        raise MalformedOutput(
            f"{where}: the arguments must be a JSON object, got {_json_kind(value)}: "
            f"{_preview(raw)}"
        )
    return value


def encode_arguments(arguments: dict[str, Any]) -> str:
    """Tool-call arguments as the compact JSON text providers expect."""
    return msgspec.json.encode(arguments).decode()


def kind_from_status(status: int | None) -> str:
    """Classify an HTTP status as a :attr:`agentloop.ModelError.kind`."""
    if status is None:
        return "unknown"
    if status == 429:
        return "rate_limit"
    if status in (401, 403):
        return "auth"
    if status >= 500:
        return "server"
    if 400 <= status < 500:
        return "bad_request"
    return "unknown"


def retry_after(
    headers: Mapping[str, str] | None, now: Callable[[], float] = time.time
) -> float | None:
    """The wait an HTTP response asks for before the next try, in seconds.

    ``retry-after-ms`` (milliseconds, as OpenAI and Anthropic send it) wins over
    ``retry-after`` (seconds, or an HTTP date: the seconds from ``now()`` until
    then, 0 for a date past). ``None`` when neither says anything usable.

    >>> retry_after({"retry-after": "20"}), retry_after({"retry-after-ms": "1500"})
    (20.0, 1.5)
    >>> retry_after({"retry-after": "Thu, 01 Jan 1970 00:01:00 GMT"}, now=lambda: 30.0)
    30.0
    """
    if headers is None:
        return None
    milliseconds = _seconds(headers.get("retry-after-ms"))
    if milliseconds is not None:
        return milliseconds / 1000
    value = headers.get("retry-after")
    seconds = _seconds(value)
    if seconds is not None or value is None:
        return seconds
    try:
        when = email.utils.parsedate_to_datetime(value.strip())
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if when.tzinfo is None:  # "-0000": UTC, with no claim about the sender's zone
        when = when.replace(tzinfo=datetime.timezone.utc)
    return max(0.0, when.timestamp() - now())


_SECONDS: Final = re.compile(r"[ \t]*[0-9]{1,12}(?:\.[0-9]{1,9})?[ \t]*")  # (HTTP whitespace only)


def _seconds(value: str | None) -> float | None:
    """A non-negative decimal number of (milli)seconds; ``None`` for anything else."""
    if value is None or not _SECONDS.fullmatch(value):
        return None
    return float(value)


def output_system(system: str | None, output: OutputSpec | None) -> str | None:
    """``system`` with the structured-output instruction appended (for a provider
    without a JSON-schema response format); ``system`` itself without ``output``."""
    if output is None:
        return system
    schema = msgspec.json.encode(output.schema).decode()
    instruction = f"Answer with only a JSON value matching this JSON Schema: {schema}"
    return instruction if not system else f"{system}\n\n{instruction}"


def schema_name(output: OutputSpec) -> str:
    """The output type's name as a response-format name: ``[a-zA-Z0-9_-]{1,64}``."""
    return _NOT_NAME.sub("_", output.name)[:64] or "output"


_NOT_NAME: Final = re.compile(r"[^a-zA-Z0-9_-]")


def first_text(values: Iterable[object]) -> str | None:
    """The first non-empty string among ``values``."""
    for value in values:
        if isinstance(value, str) and value:
            return value
    return None


def _preview(raw: str, limit: int = 120) -> str:
    return repr(raw if len(raw) <= limit else raw[: limit - 3] + "...")


def _json_kind(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    return "an array"  # the one JSON type left: objects are never asked about
