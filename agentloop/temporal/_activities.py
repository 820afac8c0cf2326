"""The activities: the user's model and tools, run for the workflow on any worker.

Theory of operation
-------------------
``agentloop.model`` answers one model request. Its input is a delta
(``_wire.ModelCall``): the messages new since the session's previous request and
the digest of the prefix before them. Each worker keeps the transcripts of the
sessions it served last (a small LRU, ``transcript_cache`` sessions); when it
holds that exact prefix (same length, same digest) it appends the new messages.
When it does not -- another worker served the previous request, the worker
restarted, the workflow was reset -- it asks the workflow for the whole request
(query ``pending``; queries are not recorded in the history; the activity
heartbeats while it waits for the answer). Either way the model
gets exactly the request the loop made, and the history holds each message about
twice (once as a result, once as the next input), never the transcript per step.

The model is called the way :func:`agentloop.run` calls it: ``stream(request)``
(read in a worker thread, so a sync SDK client does not block the worker) or, when
the model has it, ``astream(request)``. The activity heartbeats while it waits for
items (a dead worker is noticed after ``heartbeat_seconds``) and returns every
chunk and the response together: a retried attempt starts over, and the loop never
sees half an answer. What ``run`` turns into a ``ModelFailure`` is one here too,
inside the result: items that are not replies, a stream that ends without a
response, output that JSON cannot carry exactly (non-finite numbers). Exceptions
raised by the model fail the attempt so Temporal retries it: a ``ModelError`` of a
transient kind (``rate_limit``, ``connection``, ``server``) and any other
exception are retried; other ``ModelError`` kinds (``auth``, ``bad_request``, ...)
and ``MODEL_PROTOCOL_ERROR``s are not. When no attempt is left, the workflow sends
the loop a ``ModelFailure`` with the message ``run`` would record.

``agentloop.tool`` runs one call through a :class:`~agentloop.ToolRegistry` in a
worker thread, heartbeating while it runs. The tool can read its idempotency key
(``<workflow id>:<call id>``) with :func:`agentloop.idempotency_key`: Temporal runs an
activity at least once, so the call that was running when a worker died runs
again on another worker, with the same key.
"""

from __future__ import annotations

import asyncio
import collections
import math
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, Final, NamedTuple, TypeVar

import msgspec
from temporalio import activity
from temporalio.common import RawValue
from temporalio.exceptions import ApplicationError

from agentloop import (
    MODEL_ERROR,
    MODEL_PROTOCOL_ERROR,
    AgentTool,
    Content,
    Message,
    ModelChunk,
    ModelError,
    ModelFailure,
    ModelRequest,
    ModelResponse,
    Tool,
    ToolRegistry,
    ToolSpec,
    idempotency_session,
)
from agentloop._spi import content_structure_problem

from ._wire import (
    ModelCall,
    ModelConfig,
    PendingModel,
    ToolInput,
    ToolOutput,
    chain_digest,
    config_digest,
    decode,
    decode_pending,
    encode,
    oversized,
    raw,
)
from ._workflow import MODEL_ACTIVITY, PENDING_QUERY, TOOL_ACTIVITY

__all__ = ["RETRIED_KINDS", "SessionActivities"]

T = TypeVar("T")

#: ``ModelError.kind`` values whose model activity attempt Temporal retries.
RETRIED_KINDS: Final = frozenset({"rate_limit", "connection", "server"})

_REPLY_TYPES: Final = (ModelChunk, ModelResponse, ModelFailure)


def _valid_unicode(text: str) -> str:
    """``text`` with lone surrogates escaped (as :func:`agentloop.run` does)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text


async def _heartbeating(awaitable: Awaitable[T], details: Callable[[], int] | None = None) -> T:
    """Await ``awaitable``, heartbeating every third of the heartbeat timeout."""
    task = asyncio.ensure_future(awaitable)
    timeout = activity.info().heartbeat_timeout
    interval = None if timeout is None else timeout.total_seconds() / 3
    try:
        while True:
            done, _ = await asyncio.wait((task,), timeout=interval)
            if done:
                return task.result()
            if details is None:
                activity.heartbeat()
            else:
                activity.heartbeat(details())
    except asyncio.CancelledError:
        task.cancel()
        raise


def _finite(value: Any) -> bool:
    """No NaN or infinity anywhere in ``value`` (builtins), walked without recursion."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, float):
            if not math.isfinite(item):
                return False
        elif isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, (list, tuple)):
            stack.extend(item)
    return True


class _Collector:
    """The items of one model stream, encoded, up to and including the last one.

    The loop fails a step at chunk ``chunks_per_step + 1`` (the session's
    ``Limits``): nothing after it is ever read, so the activity stops there (and
    its result stays bounded).
    """

    __slots__ = ("by_reference", "cap", "done", "items", "request_id")

    def __init__(
        self, request_id: str, chunks_per_step: int, by_reference: int | None = None
    ) -> None:
        self.request_id = request_id
        self.by_reference = by_reference
        self.cap = chunks_per_step + 1
        self.items: list[bytes] = []
        self.done = False

    def add(self, item: object) -> bool:
        """Keep ``item``; ``False`` when nothing after it will be read."""
        if type(item) not in _REPLY_TYPES:
            return self._fail(
                f"the model's output was malformed: yielded {type(item).__name__}, "
                "expected ModelChunk, ModelResponse or ModelFailure",
                MODEL_PROTOCOL_ERROR,
            )
        try:
            data = encode(item)
            exact = _finite(msgspec.to_builtins(item))
        except (TypeError, ValueError, msgspec.EncodeError) as exc:
            return self._fail(f"the model's output cannot be encoded: {exc}", MODEL_PROTOCOL_ERROR)
        if not exact:
            return self._fail(
                "the model's output holds a number JSON cannot carry (NaN or infinity)",
                MODEL_PROTOCOL_ERROR,
            )
        self.items.append(data)
        if type(item) is not ModelChunk:
            self.done = True
            return False
        return len(self.items) < self.cap

    def finish(self) -> bytes:
        """The activity result: every item, and a failure if the stream just ended."""
        if not self.done and len(self.items) < self.cap:
            self._fail("model stream ended without a response", MODEL_ERROR)
        data = b'{"items":[' + b",".join(self.items) + b"]}"
        problem = oversized(data, "the model's answer", self.by_reference)
        if problem is None:
            return data
        self.items.clear()
        self._fail(problem, MODEL_ERROR)
        return b'{"items":[' + self.items[0] + b"]}"

    def _fail(self, message: str, code: str) -> bool:
        self.items.append(encode(ModelFailure(self.request_id, message, code=code)))
        self.done = True
        return False


def _drain(
    stream: Callable[[ModelRequest], Iterable[Any]], request: ModelRequest, collector: _Collector
) -> None:
    """Read a sync model's stream into ``collector`` (in a worker thread)."""
    iterator = iter(stream(request))
    try:
        for item in iterator:
            if not collector.add(item):
                break
    finally:
        close = getattr(iterator, "close", None)
        if close is not None:
            close()


def _attempt_failed(exc: Exception) -> ApplicationError:
    """The failure of a model activity attempt whose model raised ``exc``."""
    if isinstance(exc, ModelError):
        message, retry = exc.message, exc.kind in RETRIED_KINDS
    else:
        message, retry = f"{type(exc).__name__}: {exc}", True
    code = MODEL_ERROR
    if getattr(exc, "code", None) == MODEL_PROTOCOL_ERROR:
        code, retry = MODEL_PROTOCOL_ERROR, False
    return ApplicationError(_valid_unicode(message), type=code, non_retryable=not retry)


class _Transcript(NamedTuple):
    config: ModelConfig
    messages: tuple[Message, ...]
    #: ``digests[k]``: the digest of ``config`` and ``messages[:k]``.
    digests: list[str]


class SessionActivities:
    """The model and tool activities of one worker (see the module docstring).

    Args:
        model: answers model requests (``stream(request)`` or ``astream(request)``),
            or ``None`` for a worker that runs no model calls.
        tools: the tools (a registry or an iterable of tools/specs), or ``None``
            for a worker that runs no tool calls.
        transcript_cache: how many sessions' transcripts to keep (0: none; every
            request after the first is then read from the workflow).
        by_reference: the ``min_bytes`` of the worker's client's ``BlobCodec``
            (its results' large media blocks travel by reference), or ``None``.
    """

    def __init__(
        self,
        *,
        model: Any = None,
        tools: ToolRegistry | Iterable[Tool | ToolSpec] | None = None,
        transcript_cache: int = 256,
        by_reference: int | None = None,
    ) -> None:
        if model is not None and not (
            callable(getattr(model, "astream", None)) or callable(getattr(model, "stream", None))
        ):
            raise TypeError(
                f"model must have a stream(request) or astream(request) method, got {model!r}"
            )
        if type(transcript_cache) is not int or transcript_cache < 0:
            raise ValueError(f"transcript_cache must be an int >= 0, got {transcript_cache!r}")
        self._model = model
        #: The ``min_bytes`` of the worker's client's ``BlobCodec``, or ``None``
        #: (:func:`~agentloop.temporal.worker` sets it from its client).
        self.by_reference = by_reference
        self._registry = None if tools is None else ToolRegistry(tools)
        #: The agent tools of the tree, by name: their children's models and tools.
        self._agents: dict[str, AgentTool] = {}
        if self._registry is not None:
            _collect_agents(self._registry, self._agents)
        self._cache_size = transcript_cache
        # Only the worker's event loop thread touches it (the activities are async).
        self._cache: collections.OrderedDict[str, _Transcript] = collections.OrderedDict()

    def activities(self) -> list[Callable[..., Any]]:
        """The activity callables to register with a worker."""
        out: list[Callable[..., Any]] = []
        if self._model is not None or self._agents:
            out.append(self.model)
        if self._registry is not None:
            out.append(self.tool)
        return out

    # ------------------------------------------------------------------ model

    @activity.defn(name=MODEL_ACTIVITY)
    async def model(self, call: RawValue) -> RawValue:
        """Answer one model request: every chunk, then the response or a failure."""
        value = decode(call, ModelCall, "model call")
        # Asking the workflow for the transcript can take a while (when the
        # session's worker died, the query waits for another one to take the
        # session over): heartbeat meanwhile, or the attempt times out.
        request = await _heartbeating(self._request(value))
        collector = _Collector(request.id, value.chunks_per_step, self.by_reference)
        model = self._model if value.agent is None else self._agent(value.agent).model
        try:
            astream = getattr(model, "astream", None)
            if callable(astream):
                items = aiter(astream(request))
                while await _heartbeating(_next(items, collector), lambda: len(collector.items)):
                    pass
            else:
                await _heartbeating(
                    asyncio.to_thread(_drain, model.stream, request, collector),
                    lambda: len(collector.items),
                )
        except Exception as exc:
            raise _attempt_failed(exc) from None
        return raw(collector.finish())

    async def _request(self, call: ModelCall) -> ModelRequest:
        """The whole request ``call`` stands for (see the module docstring)."""
        if call.config is not None:
            entry: _Transcript | None = _Transcript(call.config, (), [config_digest(call.config)])
        else:
            entry = self._cache.get(call.session)
        if (
            entry is not None
            and call.base < len(entry.digests)
            and (entry.digests[call.base] == call.digest)
        ):
            digests = entry.digests[: call.base + 1]
            config, messages = entry.config, entry.messages[: call.base] + call.messages
            for message in call.messages:
                digests.append(chain_digest(digests[-1], message))
        else:
            config, messages = await self._ask_workflow(call)
            digests = [config_digest(config)]
            for message in messages:
                digests.append(chain_digest(digests[-1], message))
        if self._cache_size:
            cache = self._cache
            cache[call.session] = _Transcript(config, messages, digests)
            cache.move_to_end(call.session)
            if len(cache) > self._cache_size:
                cache.popitem(last=False)
        return ModelRequest(
            call.request_id,
            call.step,
            messages,
            config.tools,
            config.system,
            config.output,
            call.purpose,
        )

    def _agent(self, name: str) -> AgentTool:
        """The agent tool ``name`` (a child session's model and tools)."""
        agent = self._agents.get(name)
        if agent is None:
            raise ApplicationError(
                f"this worker has no agent tool {name!r}: give it to worker(tools=...)",
                type="UnknownAgent",
                non_retryable=True,
            )
        return agent

    async def _ask_workflow(self, call: ModelCall) -> tuple[ModelConfig, tuple[Message, ...]]:
        handle = activity.client().get_workflow_handle(call.session, run_id=call.run_id)
        pending = decode_pending(await handle.query(PENDING_QUERY, result_type=RawValue))
        if type(pending) is not PendingModel or pending.id != call.request_id:
            raise ApplicationError(
                f"session {call.session!r} is not waiting for model request "
                f"{call.request_id!r} (it waits for {pending!r})",
                type="NotPending",
                non_retryable=True,
            )
        return ModelConfig(pending.tools, pending.system, pending.output), pending.messages

    # ------------------------------------------------------------------ tools

    @activity.defn(name=TOOL_ACTIVITY)
    async def tool(self, call: RawValue) -> RawValue:
        """Run one tool call; the tool can read :func:`agentloop.idempotency_key`."""
        value = decode(call, ToolInput, "tool call")
        registry = self._registry if value.agent is None else self._agent(value.agent).tools
        assert registry is not None
        with idempotency_session(value.session):
            # to_thread copies this context: the tool sees the key.
            content, is_error = await _heartbeating(asyncio.to_thread(registry.execute, value.call))
        return raw(_tool_output(content, is_error, self.by_reference))


def _tool_output(content: Content, is_error: bool, by_reference: int | None = None) -> bytes:
    """The tool activity's result for a tool's outcome, as JSON.

    Text with lone surrogates escaped, and blocks that are not well formed refused,
    as :func:`agentloop.run`'s driver does (the workflow checks the session's
    limits on blocks: it has them); a result too large for one payload is a tool
    error the model sees, naming its size.
    """
    if type(content) is str:
        content = _valid_unicode(content)
    else:
        problem = content_structure_problem(content, "the tool's result")
        if problem is not None:
            content, is_error = f"the tool's result was refused: {problem}", True
    data = encode(ToolOutput(content, is_error))
    problem = oversized(data, "the tool's result", by_reference)
    if problem is None:
        return data
    return encode(ToolOutput(f"the tool's result was refused: {problem}", True))


async def _next(items: Any, collector: _Collector) -> bool:
    """Read one item of an async model's stream into ``collector``; ``False`` at the end."""
    try:
        item = await anext(items)
    except StopAsyncIteration:
        return False
    return collector.add(item)


def _collect_agents(registry: ToolRegistry, agents: dict[str, AgentTool]) -> None:
    """Every agent tool in ``registry`` and in its children's tools, by name."""
    for entry in registry:
        if isinstance(entry, AgentTool) and entry.name not in agents:
            agents[entry.name] = entry
            _collect_agents(entry.tools, agents)
