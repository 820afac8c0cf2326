"""Anthropic adapter: the Messages API, streaming, behind the ``Model`` protocol.

Install with ``pip install 'agentloop-replay[anthropic]'``. Pass your own client::

    import anthropic
    from agentloop.models.anthropic import AnthropicModel

    model = AnthropicModel(anthropic.Anthropic(), "claude-sonnet-4-5", max_tokens=2048)

Give it ``anthropic.AsyncAnthropic()`` (or the async Bedrock or Vertex client)
instead and it serves ``agentloop.arun``/``adrive`` (:meth:`~AnthropicModel.astream`:
the same replies, usage, errors and retries, awaited); a sync client serves
``run``/``drive``, and the other pairing raises ``TypeError``.

Mapping
-------
Request: ``system`` is the ``system`` parameter; a ``UserMessage`` is a user
message; an ``AssistantMessage`` an assistant message with its blocks in order
(text -> ``text``, ``ToolCall`` -> ``tool_use`` with ``input``, a ``ThinkingBlock``
followed by its ``ProviderBlock("anthropic", "thinking_signature")`` (or carrying a
``signature`` itself, as transcripts from earlier versions do) -> ``thinking``,
``ProviderBlock("anthropic", "redacted_thinking")`` -> ``redacted_thinking``,
``ProviderBlock("anthropic", "compaction")`` -> ``compaction`` with its fields
verbatim, in place; unsigned thinking, blank text and other providers' blocks are
not sent, as the API rejects them); consecutive ``ToolResultMessage``\\ s are one user message of
``tool_result`` blocks (``is_error`` included). Tool specs become tools with
``input_schema``. With ``output=T`` (no JSON-schema option is assumed) the system
prompt ends with "Answer with only a JSON value matching this JSON Schema: ...".

Stream: ``text_delta`` is text; a ``tool_use`` block's ``input_json_delta``
fragments are assembled and sent as one ``ToolCall`` at ``content_block_stop``; a
``thinking`` block is sent at its stop as one ``ThinkingBlock`` followed by
``ProviderBlock("anthropic", "thinking_signature", {"signature": ...})``; a
``redacted_thinking`` block as ``ProviderBlock("anthropic", "redacted_thinking",
{"data": ...})``; a ``compaction`` block (the server compacted the context:
``context_management={"edits": [{"type": "compact_20260112"}]}`` with the
``compact-2026-01-12`` beta, passed as ``extra_body``/``extra_headers``) as
``ProviderBlock("anthropic", "compaction", {...})`` holding its fields as the API
sent them (``content``, the summary, streamed in ``compaction_delta`` events;
``encrypted_content``, ``signature``, ``tool_changes`` when present): the next
request sends it back unchanged, and the API ignores what came before it. Server
tool blocks are skipped. ``stop_reason``: ``end_turn``,
``stop_sequence`` -> ``stop``; ``tool_use`` -> ``tool_call``; ``max_tokens``,
``model_context_window_exceeded`` -> ``length``; ``refusal`` -> ``refusal`` (the
run fails with ``MODEL_REFUSED`` and ``stop_details.explanation``); anything else
(``pause_turn``, ``compaction`` from ``pause_after_compaction``, ...) -> ``error``, its
name kept in ``stop_message``. Usage: input tokens are ``input_tokens +
cache_creation_input_tokens + cache_read_input_tokens`` (what the request
consumed), of which ``cache_write_tokens`` and ``cache_read_tokens``; output tokens
the final cumulative ``output_tokens``, of which
``output_tokens_details.thinking_tokens`` are the ``reasoning_tokens``; plus, for
each ``compaction`` entry of ``usage.iterations`` (the server's compaction call,
which the API leaves out of the top-level counts), its input, cache and output
tokens: ``Usage`` counts what the request was billed.

When the response stopped for ``max_tokens``, a tool call whose input was cut off
is kept with empty arguments: the loop never runs the calls of a ``length``
response (each gets a "truncated" error result). Otherwise input that is not a JSON
object ends the stream with ``ModelFailure(code="MODEL_PROTOCOL_ERROR")``.

Errors: every ``anthropic.APIError`` (an HTTP error, or an ``error`` event in the
stream) becomes :class:`~agentloop.ModelError` with ``provider="anthropic"``, the
HTTP status and a ``kind`` from the error type (``rate_limit_error`` ->
``rate_limit``, ``authentication_error``/``permission_error`` -> ``auth``,
``overloaded_error``/``api_error`` -> ``server``, ...); so does a connection dropped
mid-stream, which the SDK lets out as the ``httpx2`` error (``connection``). The
``retry-after-ms`` or ``retry-after`` header of an error response is its
``retry_after``. The adapter uses a copy of your client with ``max_retries=0``;
pass ``retry=RetryPolicy(...)`` to retry, visibly, in :attr:`attempts`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Final, TypeAlias, cast

from .._errors import ModelError
from .._messages import (
    AssistantMessage,
    Block,
    DocumentBlock,
    ImageBlock,
    Part,
    ProviderBlock,
    TextBlock,
    ThinkingBlock,
    ToolCall,
    ToolResultMessage,
    UserMessage,
)
from .._protocol import ModelRequest, Usage
from ._common import (
    END,
    NEXT,
    MalformedOutput,
    Parser,
    ProviderCall,
    RetryPolicy,
    StreamAssembler,
    StreamingModel,
    base64_text,
    base_type,
    decode_arguments,
    first_text,
    kind_from_status,
    media_refused,
    message_where,
    output_system,
    retry_after,
    sendable,
)

try:
    import anthropic
    import httpx2  # the SDK's HTTP client
except ImportError as _exc:  # tested in a subprocess that hides the SDK
    raise ImportError(
        "agentloop.models.anthropic needs the Anthropic SDK: "
        "pip install 'agentloop-replay[anthropic]'"
    ) from _exc

from anthropic.types import (
    InputJSONDelta,
    RawContentBlockDeltaEvent,
    RawContentBlockStartEvent,
    RawContentBlockStopEvent,
    RawMessageDeltaEvent,
    RawMessageStartEvent,
    RawMessageStopEvent,
    SignatureDelta,
    TextDelta,
    ThinkingDelta,
)
from anthropic.types import RedactedThinkingBlock as _RedactedStart
from anthropic.types import TextBlock as _TextStart
from anthropic.types import ThinkingBlock as _ThinkingStart
from anthropic.types import ToolUseBlock as _ToolUseStart

if TYPE_CHECKING:
    from anthropic.types import (
        ContentBlockParam,
        DocumentBlockParam,
        ImageBlockParam,
        MessageParam,
        RawMessageStreamEvent,
        TextBlockParam,
        ToolParam,
        ToolResultBlockParam,
    )
    from anthropic.types.tool_result_block_param import Content as _ResultContent

    _UserContent: TypeAlias = TextBlockParam | ImageBlockParam | DocumentBlockParam

__all__ = ["AnthropicModel", "RetryPolicy"]

#: The SDK's async clients (the first-party one, and the cloud ones built like it).
_ASYNC_CLIENTS: Final = (
    anthropic.AsyncAnthropic,
    anthropic.AsyncAnthropicBedrock,
    anthropic.AsyncAnthropicBedrockMantle,
    anthropic.AsyncAnthropicVertex,
)

_OWN_KINDS: Final = frozenset({"thinking_signature", "redacted_thinking", "compaction"})
#: The stream's event types the parser knows (the SDK's ``RawMessageStreamEvent``).
_EVENT_TYPES: Final = frozenset(
    {
        "message_start",
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    }
)
_STOP: Final = {
    "refusal": "refusal",
    "end_turn": "stop",
    "stop_sequence": "stop",
    "tool_use": "tool_call",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
}
_RESERVED: Final = frozenset({"messages", "system", "tools", "stream"})
_ERROR_KINDS: Final = {
    "rate_limit_error": "rate_limit",
    "authentication_error": "auth",
    "permission_error": "auth",
    "billing_error": "auth",
    "invalid_request_error": "bad_request",
    "not_found_error": "bad_request",
    "request_too_large": "bad_request",
    "api_error": "server",
    "overloaded_error": "server",
    "timeout_error": "server",
}


class AnthropicModel(StreamingModel):
    """The Messages API (``client.messages.create(stream=True)``).

    Args:
        client: an ``anthropic.Anthropic`` client for ``run``; an
            ``anthropic.AsyncAnthropic`` (or ``AsyncAnthropicBedrock``,
            ``AsyncAnthropicVertex``) for ``arun``.
        model: the model name.
        max_tokens: the ``max_tokens`` of every request (the API requires one).
        retry: retry failed calls that produced nothing yet (default: never retry).
        sleep: how to wait between retries (default ``time.sleep``, or
            ``asyncio.sleep`` with an async client; there, what it returns is
            awaited when it is awaitable).
        **request_options: passed to every ``create`` call (``tool_choice``,
            ``thinking``, ``stop_sequences``, ``metadata``, ``timeout``,
            ``extra_headers``, ``extra_body``, ...). ``model``, ``messages``, ``system``, ``tools``,
            ``stream`` and ``max_tokens`` come from the request and the adapter.
    """

    provider = "anthropic"
    clients = ("a sync anthropic.Anthropic client", "an async anthropic.AsyncAnthropic client")

    def __init__(
        self,
        client: anthropic.Anthropic | anthropic.AsyncAnthropic,
        model: str,
        max_tokens: int = 1024,
        *,
        retry: RetryPolicy | None = None,
        sleep: Callable[[float], Any] | None = None,
        **request_options: Any,
    ) -> None:
        asynchronous = isinstance(client, _ASYNC_CLIENTS)
        super().__init__(retry=retry, sleep=sleep, asynchronous=asynchronous)
        if not isinstance(model, str) or not model:
            raise ValueError(f"model must be a non-empty model name, got {model!r}")
        if type(max_tokens) is not int or max_tokens < 1:
            raise ValueError(f"max_tokens must be an int >= 1, got {max_tokens!r}")
        clash = sorted(_RESERVED & request_options.keys())
        if clash:
            raise ValueError(
                f"AnthropicModel: {', '.join(clash)} are set by the adapter; "
                f"don't pass them as request options"
            )
        #: The client the adapter calls: yours, with the SDK's own retries off.
        self.client: anthropic.Anthropic | anthropic.AsyncAnthropic = client.with_options(
            max_retries=0
        )
        self.model = model
        self.max_tokens = max_tokens
        self.request_options: dict[str, Any] = dict(request_options)

    def __repr__(self) -> str:
        return f"AnthropicModel(model={self.model!r}, max_tokens={self.max_tokens})"

    def _call(self, request: ModelRequest) -> ProviderCall[Any]:
        options = dict(self.request_options)
        system = output_system(request.system, request.output)
        if system is not None:
            options["system"] = system
        tools = _tools(request)
        if tools:
            options["tools"] = tools
        messages = _messages(request)
        create = self.client.messages.create

        def open() -> Any:
            return create(
                model=self.model,
                max_tokens=self.max_tokens,
                messages=messages,
                stream=True,
                **options,
            )

        usage = _Usage()
        return ProviderCall(
            open=open,
            parser=_replies(request, usage),
            request_id=request.id,
            # (the SDK lets a connection dropped mid-stream out as the httpx2 error)
            errors=(anthropic.AnthropicError, httpx2.TransportError),
            error=lambda exc: _model_error(exc, usage.value()),
        )


# --------------------------------------------------------------------------- request


def _messages(request: ModelRequest) -> list[MessageParam]:
    out: list[MessageParam] = []
    results: list[ToolResultBlockParam] = []  # consecutive tool results: one user turn
    for number, message in enumerate(request.messages):
        if type(message) is not ToolResultMessage and results:
            out.append({"role": "user", "content": results})
            results = []
        match message:
            case UserMessage(content=str() as said):
                out.append({"role": "user", "content": said})
            case UserMessage(content=tuple() as given):
                where = message_where(number, message)
                parts = [_part(part, index, where) for index, part in enumerate(given)]
                out.append({"role": "user", "content": parts})
            case AssistantMessage():
                blocks: list[ContentBlockParam] = []
                content = [b for b in message.content if sendable(b, "anthropic", _OWN_KINDS)]
                for index, block in enumerate(content):
                    match block:
                        case TextBlock(text=text) if text.strip():
                            blocks.append({"type": "text", "text": text})
                        case ToolCall():
                            blocks.append(
                                {
                                    "type": "tool_use",
                                    "id": block.id,
                                    "name": block.name,
                                    "input": block.arguments,
                                }
                            )
                        case ThinkingBlock():
                            signature = block.signature or _signature_after(content, index)
                            if signature is not None:
                                blocks.append(
                                    {
                                        "type": "thinking",
                                        "thinking": block.text,
                                        "signature": signature,
                                    }
                                )
                        case ProviderBlock(kind="redacted_thinking", data={"data": str() as data}):
                            blocks.append({"type": "redacted_thinking", "data": data})
                        case ProviderBlock(kind="compaction", data=data):
                            # sent back verbatim where it was (the API then ignores
                            # what came before it)
                            blocks.append(cast("Any", {**data, "type": "compaction"}))
                if blocks:
                    out.append({"role": "assistant", "content": blocks})
            case ToolResultMessage():  # pragma: no branch - the Message union has 3 types
                given_result = message.content
                result: str | list[_ResultContent]
                if isinstance(given_result, str):
                    result = given_result
                else:
                    where = message_where(number, message)
                    result = [_part(part, i, where) for i, part in enumerate(given_result)]
                results.append(
                    {
                        "type": "tool_result",
                        "tool_use_id": message.tool_call_id,
                        "content": result,
                        "is_error": message.is_error,
                    }
                )
    if results:
        out.append({"role": "user", "content": results})
    return out


#: The image types the Messages API takes.
_IMAGE_TYPES: Final = frozenset({"image/jpeg", "image/png", "image/gif", "image/webp"})


def _part(part: Part, index: int, where: str) -> _UserContent:
    """One block of a user message or a tool result (:func:`media_refused` if none fits)."""
    match part:
        case TextBlock(text=text):
            return {"type": "text", "text": text}
        case ImageBlock(url=str() as url):
            return {"type": "image", "source": {"type": "url", "url": url}}
        case ImageBlock(data=bytes() as data) if base_type(part.media_type) in _IMAGE_TYPES:
            kind = cast("Any", base_type(part.media_type))
            image: ImageBlockParam = {
                "type": "image",
                "source": {"type": "base64", "media_type": kind, "data": base64_text(data)},
            }
            return image
        case DocumentBlock():
            return _document(part, index, where)
        case ImageBlock():
            raise media_refused(
                "anthropic", where, index, part, "an image other than JPEG, PNG, GIF or WebP"
            )
        case _:
            raise media_refused("anthropic", where, index, part, "audio (the API takes none)")


def _document(part: DocumentBlock, index: int, where: str) -> DocumentBlockParam:
    kind = base_type(part.media_type)
    document: DocumentBlockParam
    if part.url is not None:
        document = {"type": "document", "source": {"type": "url", "url": part.url}}
    elif kind == "application/pdf":
        data = base64_text(part.data or b"")
        source: Any = {"type": "base64", "media_type": kind, "data": data}
        document = {"type": "document", "source": source}
    elif kind == "text/plain":
        try:
            text = (part.data or b"").decode("utf-8")
        except UnicodeDecodeError:
            raise media_refused(
                "anthropic", where, index, part, "a text/plain document that is not UTF-8"
            ) from None
        source = {"type": "text", "media_type": kind, "data": text}
        document = {"type": "document", "source": source}
    else:
        raise media_refused(
            "anthropic", where, index, part, "a document other than a PDF or text/plain"
        )
    if part.name:
        document["title"] = part.name
    return document


def _signature_after(content: list[Block], index: int) -> str | None:
    """The signature of the thinking block at ``index``: the provider block after it."""
    after = content[index + 1] if index + 1 < len(content) else None
    if type(after) is ProviderBlock and after.kind == "thinking_signature":
        signature = after.data.get("signature")
        if isinstance(signature, str):
            return signature
    return None


def _tools(request: ModelRequest) -> list[ToolParam]:
    return [
        {"name": spec.name, "description": spec.description, "input_schema": spec.parameters}
        for spec in request.tools
    ]


# --------------------------------------------------------------------------- stream


class _OpenBlock:
    """A tool_use, thinking or compaction block between its start and its stop."""

    __slots__ = ("id", "kind", "name", "parts", "signature", "start_input")

    def __init__(self, kind: str, id: str = "", name: str = "") -> None:
        self.kind = kind
        self.id = id
        self.name = name
        self.parts: list[str] = []
        self.signature: str | None = None
        self.start_input: dict[str, object] = {}

    def extend(self, fields: dict[str, Any]) -> None:
        """A compaction block's delta: its strings continue the block's, the rest
        replaces (``start_input`` holds the block's fields)."""
        have = self.start_input
        for name, value in fields.items():
            before = have.get(name)
            have[name] = before + value if type(before) is str and type(value) is str else value

    def compaction(self) -> ProviderBlock:
        """The compaction block, as the API must get it back (its fields verbatim);
        a signature streamed as a ``signature_delta`` is one of them."""
        data = dict(self.start_input)
        if self.signature:
            started = data.get("signature")
            data["signature"] = (started if type(started) is str else "") + self.signature
        return ProviderBlock("anthropic", "compaction", data)


class _Usage:
    """The usage reported so far (kept outside ``_replies`` for an error mid-stream).

    A response in which the server compacted the context (``compact_20260112``)
    lists the compaction's own call in ``usage.iterations`` as a ``compaction``
    entry, which the API leaves out of the top-level counts: it is added to them
    here (it was billed). The other entries (``message``, ...) are the top-level
    counts' own parts and are not added again.
    """

    __slots__ = (
        "cache_read",
        "cache_write",
        "compacted",
        "input",
        "output",
        "reasoning",
        "reported",
    )

    def __init__(self) -> None:
        self.input = self.output = self.cache_read = self.cache_write = self.reasoning = 0
        self.compacted = Usage()
        self.reported = False

    def update(self, usage: Any) -> None:
        if usage.input_tokens is not None:
            self.cache_write = usage.cache_creation_input_tokens or 0
            self.cache_read = usage.cache_read_input_tokens or 0
            self.input = usage.input_tokens + self.cache_write + self.cache_read
        self.output = usage.output_tokens
        # (cumulative, like output_tokens: the thinking part of them)
        details = getattr(usage, "output_tokens_details", None)
        if details is not None:
            self.reasoning = details.thinking_tokens or 0
        iterations = getattr(usage, "iterations", None)
        if iterations:  # (cumulative too: the last report lists them all)
            compacted = Usage()
            for entry in iterations:
                if _count(entry, "type") == "compaction":
                    write = _count(entry, "cache_creation_input_tokens")
                    read = _count(entry, "cache_read_input_tokens")
                    compacted += Usage(
                        _count(entry, "input_tokens") + write + read,
                        _count(entry, "output_tokens"),
                        cache_read_tokens=read,
                        cache_write_tokens=write,
                    )
            self.compacted = compacted
        self.reported = True

    def value(self) -> Usage | None:
        if not self.reported:
            return None
        return (
            Usage(
                self.input,
                self.output,
                cache_read_tokens=self.cache_read,
                cache_write_tokens=self.cache_write,
                reasoning_tokens=self.reasoning,
            )
            + self.compacted
        )


def _count(entry: Any, name: str) -> Any:
    """A field of a ``usage.iterations`` entry: a dict from the SDK's Messages types
    (which do not declare the list), a model from its beta types; 0 when absent."""
    value = entry.get(name) if isinstance(entry, Mapping) else getattr(entry, name, None)
    return 0 if value is None else value


def _fields(model: Any) -> dict[str, object]:
    """A block's or delta's fields as the API sent them, but ``type``."""
    fields: dict[str, object] = model.to_dict(mode="json")
    fields.pop("type", None)
    return fields


def _replies(request: ModelRequest, usage: _Usage) -> Parser[RawMessageStreamEvent]:
    out = StreamAssembler(request.id)
    message_id = ""
    stop_reason: str | None = None
    stop_message: str | None = None
    blocks: dict[int, _OpenBlock] = {}
    # A tool call whose input did not parse: fine only if the message then stops
    # for max_tokens (the input was cut off); anything after it is an error.
    cut_off: tuple[_OpenBlock, str, MalformedOutput] | None = None
    while (event := (yield NEXT)) is not END:
        if event.type not in _EVENT_TYPES:
            # A type the API added later: the SDK yields it dressed as the first
            # class of its event union (a message_start without a message). Skip it.
            continue
        if cut_off is not None and type(event) not in (RawMessageDeltaEvent, RawMessageStopEvent):
            raise cut_off[2]
        match event:
            case RawMessageStartEvent(message=message):
                message_id = message.id
                usage.update(message.usage)
            case RawContentBlockStartEvent(index=index, content_block=start):
                match start:
                    case _ if str(start.type) == "compaction":
                        # (the SDK's Messages types dress it as the first block class)
                        block = blocks[index] = _OpenBlock("compaction")
                        block.start_input = _fields(start)
                    case _TextStart():
                        yield from out.text(start.text)
                    case _ToolUseStart():
                        block = blocks[index] = _OpenBlock("tool_use", start.id, start.name)
                        block.start_input = dict(start.input)
                    case _ThinkingStart():
                        block = blocks[index] = _OpenBlock("thinking")
                        block.parts.append(start.thinking)
                        block.signature = start.signature or None
                    case _RedactedStart():
                        redacted = ProviderBlock(
                            "anthropic", "redacted_thinking", {"data": start.data}
                        )
                        yield from out.block(redacted)
                    case _:
                        pass  # server tool blocks: not mapped
            case RawContentBlockDeltaEvent(index=index, delta=delta):
                block_or_none = blocks.get(index)
                match delta:
                    case _ if str(delta.type) == "compaction_delta":
                        if block_or_none is not None:
                            block_or_none.extend(_fields(delta))
                    case TextDelta():
                        yield from out.text(delta.text)
                    case InputJSONDelta() if block_or_none is not None:
                        block_or_none.parts.append(delta.partial_json)
                    case ThinkingDelta() if block_or_none is not None:
                        block_or_none.parts.append(delta.thinking)
                    case SignatureDelta() if block_or_none is not None:
                        block_or_none.signature = (block_or_none.signature or "") + delta.signature
                    case _:
                        pass  # citations, deltas of blocks that are not mapped
            case RawContentBlockStopEvent(index=index):
                block_or_none = blocks.pop(index, None)
                if block_or_none is None:
                    continue
                if block_or_none.kind == "compaction":
                    yield from out.block(block_or_none.compaction())
                    continue
                if block_or_none.kind == "thinking":
                    yield from out.block(ThinkingBlock("".join(block_or_none.parts)))
                    if block_or_none.signature:
                        signature = {"signature": block_or_none.signature}
                        yield from out.block(
                            ProviderBlock("anthropic", "thinking_signature", signature)
                        )
                    continue
                where = f"anthropic message {message_id!r}, content block {index}"
                try:
                    call = _tool_call(block_or_none, where, truncated=False)
                except MalformedOutput as problem:
                    cut_off = (block_or_none, where, problem)
                    continue
                yield from out.block(call)
            case RawMessageDeltaEvent(delta=delta_, usage=usage_):
                stop_reason = delta_.stop_reason or stop_reason
                details = delta_.stop_details
                if details is not None:
                    stop_message = first_text([details.explanation, details.category])
                usage.update(usage_)
            case _:  # message_stop, the one type of _EVENT_TYPES left
                break
    if stop_reason is None:
        raise MalformedOutput(
            f"anthropic message {message_id!r}: the stream ended without a stop_reason"
        )
    stop = _STOP.get(stop_reason, "error")
    if stop == "error":
        stop_message = f"stop_reason {stop_reason!r}"
    unfinished = [
        (block, f"anthropic message {message_id!r}, content block {index}")
        for index, block in blocks.items()
        if block.kind == "tool_use"
    ]
    if cut_off is not None:
        if stop != "length":
            raise cut_off[2]
        unfinished.insert(0, (cut_off[0], cut_off[1]))
    if unfinished and stop != "length":
        raise MalformedOutput(f"{unfinished[0][1]}: the message ended before the block stopped")
    for block, where in unfinished:
        yield from out.block(_tool_call(block, where, truncated=True))
    yield from out.flush()
    yield out.response(message_id, stop, usage.value(), stop_message)


def _tool_call(block: _OpenBlock, where: str, *, truncated: bool) -> ToolCall:
    if not block.id or not block.name:
        missing = "id" if not block.id else "name"
        raise MalformedOutput(f"{where}: the tool_use block has no {missing}")
    where = f"{where} (tool_use {block.name!r}, id {block.id!r})"
    raw = "".join(block.parts)
    if not raw.strip():
        # no input_json_delta: the input given at content_block_start ({} for no input)
        return ToolCall(block.id, block.name, dict(block.start_input))
    try:
        arguments = decode_arguments(raw, where)
    except MalformedOutput:
        if not truncated:
            raise
        arguments = {}  # cut off by max_tokens; the loop will not run it
    return ToolCall(block.id, block.name, arguments)


# --------------------------------------------------------------------------- errors


def _model_error(
    exc: anthropic.AnthropicError | httpx2.TransportError, usage: Usage | None = None
) -> ModelError:
    """Classify an SDK or transport exception; keep the provider's own message and
    the wait it asked for (``retry-after``)."""
    status: int | None = None
    retry = None
    if isinstance(exc, (anthropic.APIConnectionError, httpx2.TransportError)):
        kind = "connection"
        timeout = isinstance(exc, (anthropic.APITimeoutError, httpx2.TimeoutException))
        detail = "request timed out" if timeout else str(exc) or type(exc).__name__
    elif isinstance(exc, anthropic.APIStatusError):
        error = exc.body.get("error") if isinstance(exc.body, Mapping) else None
        error_type = exc.type or (error.get("type") if isinstance(error, Mapping) else None)
        # An error event inside a stream arrives on an HTTP 200 response.
        status = exc.status_code if exc.status_code >= 400 else None
        kind = _ERROR_KINDS.get(str(error_type), "") or kind_from_status(status)
        message = exc.api_message or (error.get("message") if isinstance(error, Mapping) else None)
        detail = first_text([message]) or str(exc)
        if error_type:
            detail = f"{detail} [{error_type}]"
        retry = retry_after(exc.response.headers)
    else:
        kind, detail = "unknown", f"{type(exc).__name__}: {exc}"
    where = f"HTTP {status}" if status is not None else kind
    return ModelError(
        f"anthropic {where}: {detail}",
        provider="anthropic",
        status_code=status,
        kind=kind,
        usage=usage,
        retry_after=retry,
    )
