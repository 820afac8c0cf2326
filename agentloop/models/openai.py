"""OpenAI adapters: Chat Completions and Responses, streaming, behind the ``Model`` protocol.

Install with ``pip install 'agentloop-replay[openai]'``. Pass your own client::

    import openai
    from agentloop.models.openai import OpenAIChatModel

    model = OpenAIChatModel(openai.OpenAI(), "gpt-4.1-mini", temperature=0)

Give it ``openai.AsyncOpenAI()`` instead and it serves ``agentloop.arun``/``adrive``
(:meth:`~OpenAIChatModel.astream`: the same replies, usage, errors and retries,
awaited); a sync client serves ``run``/``drive``, and the other pairing raises
``TypeError``.

Mapping (Chat Completions)
--------------------------
Request: ``system`` becomes the first ``{"role": "system"}`` message; a
``UserMessage`` a user message; an ``AssistantMessage`` one assistant message whose
``content`` is its text blocks joined and whose ``tool_calls`` are its tool calls
(the order of text and calls inside one message is not kept; thinking blocks are
not sent); a ``ToolResultMessage`` a ``{"role": "tool"}`` message (the API has no
error flag: ``is_error`` is not sent, the content says what happened). Tool specs
become ``{"type": "function", "function": {...}}`` tools. The request asks for
``stream_options={"include_usage": True}`` unless you pass ``stream_options``.
With ``output=T`` the request asks for ``response_format={"type": "json_schema",
"json_schema": {"name": ..., "schema": ...}}`` (not ``strict``: a msgspec or
pydantic schema need not meet strict mode's rules) unless you pass
``response_format``.

Stream: ``delta.content`` is text; ``delta.reasoning_content`` (DeepSeek, vLLM,
xAI) and ``delta.reasoning`` (OpenRouter) are thinking, sent as one
``ThinkingBlock`` when the reasoning ends; ``delta.refusal`` is collected and makes
the stop reason ``refusal`` (its text is the ``stop_message``). Tool-call fragments
are assembled per ``index`` and sent as complete ``ToolCall`` blocks when the choice
finishes. Only choice 0 is read. ``finish_reason``: ``stop`` -> ``stop`` (or
``tool_call`` when the model called tools, as with a forced ``tool_choice``),
``tool_calls`` -> ``tool_call``, ``length`` -> ``length``, anything else
(``content_filter``, ...) -> ``error`` with the reason in ``stop_message``. A stream
that ends without any ``finish_reason`` (some OpenAI-compatible servers) is
``tool_call`` when calls arrived, else ``stop``. Usage: ``prompt_tokens`` /
``completion_tokens``, ``prompt_tokens_details.cached_tokens`` (cache reads; the
Hugging Face router's top-level ``cached_tokens`` when there is no such detail) and
``completion_tokens_details.reasoning_tokens``. A chunk carrying an ``error``
(OpenRouter reports failures inside a 200 stream that way) raises
:class:`~agentloop.ModelError` with the usage reported so far.

OpenAI-compatible servers (Ollama, vLLM, LM Studio, OpenRouter, a LiteLLM proxy)
work through the same adapter: give the client their ``base_url``, e.g.
``OpenAIChatModel(openai.OpenAI(base_url="http://localhost:11434/v1",
api_key="ollama"), "llama3.2")``.

Mapping (Responses)
-------------------
``system`` becomes ``instructions``; messages become input items (user and
assistant text messages, ``function_call`` and ``function_call_output`` items, in
transcript order); tool specs become ``{"type": "function", "strict": False}``
tools. With ``output=T`` the request has ``text={"format": {"type": "json_schema",
"name": ..., "schema": ...}}`` (merged into your ``text`` option unless it has a
``format``). ``response.output_text.delta`` (and refusal deltas) are text; a function
call is sent when its ``response.output_item.done`` arrives (``call_id`` is the
``ToolCall.id``). ``response.completed`` -> ``stop``/``tool_call``,
``response.incomplete`` -> ``length`` for ``max_output_tokens`` else ``error``;
refusal deltas make the stop reason ``refusal`` (their text is the
``stop_message``); ``response.failed`` and ``error`` events raise
:class:`~agentloop.ModelError` (with the response's usage, when it has one).
A reasoning item becomes a ``ThinkingBlock`` (its summary, when there is one)
followed by ``ProviderBlock("openai", "reasoning", {"id", "summary",
"encrypted_content"})``, which is sent back as the same input item, so a tool loop
with reasoning keeps its reasoning. With ``store=False`` the adapter asks for
``include=["reasoning.encrypted_content"]`` (stateless reasoning needs it). Usage
includes ``cached_tokens`` and ``reasoning_tokens``.

In both, when the response stopped for ``length``, a tool call whose arguments
were cut off is kept with empty arguments: the loop never runs the calls of a
``length`` response (each gets a "truncated" error result) and the model can
re-issue them. Otherwise arguments that are not a JSON object end the stream with
``ModelFailure(code="MODEL_PROTOCOL_ERROR")``.

Errors: every ``openai.APIError`` becomes :class:`~agentloop.ModelError` with
``provider="openai"``, the HTTP status, a ``kind`` (``rate_limit``, ``auth``,
``connection``, ``server``, ``bad_request``, ``unknown``) and the wait the response
asked for (``retry-after-ms``, ``retry-after``) as ``retry_after``. An OpenAI-
compatible router's upstream reason (OpenRouter's ``error.metadata.raw`` behind
"Provider returned error", and ``provider_name``) is kept in the message. The
adapter uses a copy of your client with ``max_retries=0``: nothing is retried
behind the loop's back; pass ``retry=RetryPolicy(...)`` to retry, visibly, in
:attr:`attempts`.
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, Final, Literal, cast

import msgspec

from .._errors import ModelError
from .._messages import (
    AssistantMessage,
    AudioBlock,
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
    ModelReply,
    Parser,
    ProviderCall,
    RetryPolicy,
    StreamAssembler,
    StreamingModel,
    base64_text,
    base_type,
    data_url,
    decode_arguments,
    encode_arguments,
    file_name,
    first_text,
    kind_from_status,
    media_refused,
    message_where,
    retry_after,
    schema_name,
    sendable,
)

try:
    import openai
except ImportError as _exc:  # tested in a subprocess that hides the SDK
    raise ImportError(
        "agentloop.models.openai needs the OpenAI SDK: pip install 'agentloop-replay[openai]'"
    ) from _exc

from openai.types.responses import (
    ResponseCompletedEvent,
    ResponseCreatedEvent,
    ResponseErrorEvent,
    ResponseFailedEvent,
    ResponseFunctionCallArgumentsDeltaEvent,
    ResponseFunctionToolCall,
    ResponseIncompleteEvent,
    ResponseOutputItemAddedEvent,
    ResponseOutputItemDoneEvent,
    ResponseReasoningItem,
    ResponseRefusalDeltaEvent,
    ResponseTextDeltaEvent,
)
from openai.types.responses.response_output_item import ImageGenerationCall

if TYPE_CHECKING:
    from openai.types import CompletionUsage
    from openai.types.chat import (
        ChatCompletionChunk,
        ChatCompletionContentPartParam,
        ChatCompletionMessageParam,
    )
    from openai.types.chat import ChatCompletionToolParam as _ChatToolParam
    from openai.types.responses import (
        ResponseFunctionCallOutputItemParam,
        ResponseInputContentParam,
        ResponseInputItemParam,
        ResponseStreamEvent,
        ResponseUsage,
        ToolParam,
    )

__all__ = ["OpenAIChatModel", "OpenAIResponsesModel", "RetryPolicy"]

_CHAT_FINISH: Final = {"stop": "stop", "tool_calls": "tool_call", "length": "length"}
#: Where OpenAI-compatible servers put reasoning text in a delta.
_REASONING_FIELDS: Final = ("reasoning_content", "reasoning")
_ENCRYPTED: Final = "reasoning.encrypted_content"
_CHAT_RESERVED: Final = frozenset({"messages", "tools", "stream"})
_RESPONSES_RESERVED: Final = frozenset({"input", "instructions", "tools", "stream"})


class _OpenAIModel(StreamingModel):
    provider = "openai"
    clients = ("a sync openai.OpenAI client", "an async openai.AsyncOpenAI client")
    _reserved: frozenset[str] = frozenset()

    def __init__(
        self,
        client: openai.OpenAI | openai.AsyncOpenAI,
        model: str,
        *,
        retry: RetryPolicy | None = None,
        sleep: Callable[[float], Any] | None = None,
        **request_options: Any,
    ) -> None:
        asynchronous = isinstance(client, openai.AsyncOpenAI)
        super().__init__(retry=retry, sleep=sleep, asynchronous=asynchronous)
        if not isinstance(model, str) or not model:
            raise ValueError(f"model must be a non-empty model name, got {model!r}")
        clash = sorted(self._reserved & request_options.keys())
        if clash:
            raise ValueError(
                f"{type(self).__name__}: {', '.join(clash)} are set by the adapter "
                f"from the ModelRequest; don't pass them as request options"
            )
        #: The client the adapter calls: yours, with the SDK's own retries off.
        self.client: openai.OpenAI | openai.AsyncOpenAI = client.with_options(max_retries=0)
        self.model = model
        self.request_options: dict[str, Any] = dict(request_options)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(model={self.model!r})"

    def _openai_call(
        self, request: ModelRequest, open: Callable[[], Any], parser: Parser[Any]
    ) -> ProviderCall[Any]:
        return ProviderCall(
            open=open,
            parser=parser,
            request_id=request.id,
            errors=(openai.OpenAIError,),
            error=_model_error,
            ready=_keep_error_chunks,
        )


class OpenAIChatModel(_OpenAIModel):
    """The Chat Completions API (``client.chat.completions.create(stream=True)``).

    Args:
        client: an ``openai.OpenAI`` client (or ``AzureOpenAI``, or any
            OpenAI-compatible server's base URL) for ``run``; an
            ``openai.AsyncOpenAI`` (``AsyncAzureOpenAI``, ...) for ``arun``.
        model: the model name.
        retry: retry failed calls that produced nothing yet (default: never retry).
        sleep: how to wait between retries (default ``time.sleep``, or
            ``asyncio.sleep`` with an async client; there, what it returns is
            awaited when it is awaitable).
        **request_options: passed to every ``create`` call (``temperature``,
            ``max_completion_tokens``, ``tool_choice``, ``parallel_tool_calls``,
            ``timeout``, ``extra_headers``, ...). ``model``, ``messages``, ``tools``
            and ``stream`` come from the request.
    """

    _reserved = _CHAT_RESERVED

    def _call(self, request: ModelRequest) -> ProviderCall[Any]:
        options = dict(self.request_options)
        options.setdefault("stream_options", {"include_usage": True})
        output = request.output
        if output is not None and "response_format" not in options:
            options["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": schema_name(output), "schema": output.schema},
            }
        tools = _chat_tools(request)
        if tools:
            options["tools"] = tools
        messages = _chat_messages(request)
        create = self.client.chat.completions.create

        def open() -> Any:
            return create(model=self.model, messages=messages, stream=True, **options)

        return self._openai_call(request, open, _chat_replies(request))


class OpenAIResponsesModel(_OpenAIModel):
    """The Responses API (``client.responses.create(stream=True)``).

    The whole transcript is sent every time (no ``previous_response_id``), so the
    run's log stays the only state. Pass ``store=False`` to keep OpenAI from
    storing responses.

    Args:
        client: an ``openai.OpenAI`` client for ``run``, an ``openai.AsyncOpenAI``
            for ``arun``.
        model: the model name.
        retry: retry failed calls that produced nothing yet (default: never retry).
        sleep: how to wait between retries (default ``time.sleep``, or
            ``asyncio.sleep`` with an async client).
        **request_options: passed to every ``create`` call (``temperature``,
            ``max_output_tokens``, ``store``, ``reasoning``, ``timeout``, ...).
            ``model``, ``input``, ``instructions``, ``tools`` and ``stream`` come
            from the request.
    """

    _reserved = _RESPONSES_RESERVED

    def _call(self, request: ModelRequest) -> ProviderCall[Any]:
        options = dict(self.request_options)
        if options.get("store") is False:
            # Stateless reasoning: the encrypted reasoning is what goes back next turn.
            include = list(options.get("include") or ())
            if _ENCRYPTED not in include:
                options["include"] = [*include, _ENCRYPTED]
        if request.system is not None:
            options["instructions"] = request.system
        output = request.output
        text = options.get("text") or {}
        if output is not None and "format" not in text:
            # (a ``text`` option without a format, e.g. only ``verbosity``, keeps its keys)
            options["text"] = {
                **text,
                "format": {
                    "type": "json_schema",
                    "name": schema_name(output),
                    "schema": output.schema,
                },
            }
        tools = _responses_tools(request)
        if tools:
            options["tools"] = tools
        items = _responses_input(request)
        create = self.client.responses.create

        def open() -> Any:
            return create(model=self.model, input=items, stream=True, **options)

        return self._openai_call(request, open, _responses_replies(request))


# --------------------------------------------------------------------------- chat


def _chat_messages(request: ModelRequest) -> list[ChatCompletionMessageParam]:
    out: list[ChatCompletionMessageParam] = []
    if request.system is not None:
        out.append({"role": "system", "content": request.system})
    # Media of a run of tool results: the tool messages take text only, so the media
    # follow as one user message once the run of tool messages is over.
    attached: list[ChatCompletionContentPartParam] = []
    for number, message in enumerate(request.messages):
        if attached and type(message) is not ToolResultMessage:
            out.append({"role": "user", "content": attached})
            attached = []
        match message:
            case UserMessage(content=str() as said):
                out.append({"role": "user", "content": said})
            case UserMessage(content=tuple() as given):
                where = message_where(number, message)
                parts = [_chat_part(part, index, where) for index, part in enumerate(given)]
                out.append({"role": "user", "content": parts})
            case AssistantMessage():
                for block in message.content:
                    sendable(block, "openai-chat", ())  # logs provider blocks it cannot send
                text = "".join(b.text for b in message.content if type(b) is TextBlock)
                calls = [b for b in message.content if type(b) is ToolCall]
                if calls:
                    out.append(
                        {
                            "role": "assistant",
                            "content": text or None,
                            "tool_calls": [
                                {
                                    "id": call.id,
                                    "type": "function",
                                    "function": {
                                        "name": call.name,
                                        "arguments": encode_arguments(call.arguments),
                                    },
                                }
                                for call in calls
                            ],
                        }
                    )
                else:
                    out.append({"role": "assistant", "content": text})
            case ToolResultMessage():  # pragma: no branch - the Message union has 3 types
                content = message.content
                if not isinstance(content, str):
                    where = message_where(number, message)
                    texts: list[str] = []
                    for index, part in enumerate(content):
                        if type(part) is TextBlock:
                            texts.append(part.text)
                        else:
                            attached.append(_chat_part(part, index, where))
                    content = "".join(texts)
                    if len(texts) < len(message.content):
                        content += _ATTACHED.format(call=message.tool_call_id)
                out.append(
                    {"role": "tool", "tool_call_id": message.tool_call_id, "content": content}
                )
    if attached:
        out.append({"role": "user", "content": attached})
    return out


#: Appended to a Chat tool message whose result had media (sent in the next user message).
_ATTACHED: Final = "\n[the media of this result follow in a user message, tool call {call}]"

#: The audio formats of Chat Completions' ``input_audio``, by media type.
_AUDIO_FORMATS: Final[dict[str, Literal["wav", "mp3"]]] = {
    "audio/wav": "wav",
    "audio/x-wav": "wav",
    "audio/wave": "wav",
    "audio/mpeg": "mp3",
    "audio/mp3": "mp3",
}


def _chat_part(part: Part, index: int, where: str) -> ChatCompletionContentPartParam:
    """One part of a Chat Completions user message (:func:`media_refused` if none fits)."""
    match part:
        case TextBlock(text=text):
            return {"type": "text", "text": text}
        case ImageBlock():
            return {"type": "image_url", "image_url": {"url": data_url(part)}}
        case AudioBlock(data=bytes() as data):
            audio = _AUDIO_FORMATS.get(base_type(part.media_type))
            if audio is None:
                raise media_refused("openai", where, index, part, "audio other than wav or mp3")
            encoded = base64_text(data)
            return {"type": "input_audio", "input_audio": {"data": encoded, "format": audio}}
        case AudioBlock():
            raise media_refused(
                "openai", where, index, part, "audio by URL (input_audio takes bytes)"
            )
        case DocumentBlock(data=bytes()) if base_type(part.media_type) == "application/pdf":
            return {
                "type": "file",
                "file": {"file_data": data_url(part), "filename": file_name(part)},
            }
        case _:
            why = "a document by URL" if part.data is None else "a document other than a PDF"
            raise media_refused(
                "openai", where, index, part, why + " (the file part takes PDF bytes)"
            )


def _chat_tools(request: ModelRequest) -> list[_ChatToolParam]:
    return [
        {
            "type": "function",
            "function": {
                "name": spec.name,
                "description": spec.description,
                "parameters": spec.parameters,
            },
        }
        for spec in request.tools
    ]


class _ChatCall:
    __slots__ = ("arguments", "id", "name")

    def __init__(self) -> None:
        self.id = ""
        self.name = ""
        self.arguments: list[str] = []


def _keep_error_chunks(stream: openai.Stream[Any] | openai.AsyncStream[Any]) -> None:
    """Have the SDK hand over chunks that carry an ``error`` instead of raising on them.

    OpenRouter (and other OpenAI-compatible servers) report a failure inside a 200
    stream as a chunk with an ``error`` object *and* the usage billed so far; the
    Responses API sends an ``error`` event before the ``response.failed`` that
    carries the usage. In its
    default mode the SDK raises on that chunk before the usage can be read; its
    ``events`` stream mode yields it like any chunk (the stream has not started yet).
    """
    options = stream._options
    if options is not None:  # pragma: no branch - create() always gives its options
        stream._options = options.model_copy(update={"stream_mode": "events"})


def _chat_usage(usage: CompletionUsage) -> Usage:
    prompt = usage.prompt_tokens_details
    completion = usage.completion_tokens_details
    cached = prompt.cached_tokens if prompt is not None else None
    # (the Hugging Face router and some servers behind it report a top-level
    # ``cached_tokens`` instead of ``prompt_tokens_details.cached_tokens``)
    top_level = getattr(usage, "cached_tokens", None)
    return Usage(
        usage.prompt_tokens,
        usage.completion_tokens,
        cache_read_tokens=cached or (top_level if type(top_level) is int else 0),
        reasoning_tokens=(completion.reasoning_tokens or 0) if completion is not None else 0,
    )


def _chat_replies(request: ModelRequest) -> Parser[ChatCompletionChunk]:
    out = StreamAssembler(request.id)
    response_id = ""
    finish: str | None = None
    usage: Usage | None = None
    refusal: list[str] = []
    calls: dict[int, _ChatCall] = {}
    while (chunk := (yield NEXT)) is not END:
        # (read defensively: an error chunk need not have the usual fields)
        reported = getattr(chunk, "usage", None)
        if reported is not None:
            usage = _chat_usage(reported)
        error = getattr(chunk, "error", None)
        if error:
            raise _chunk_error(error, usage)
        response_id = response_id or chunk.id
        for choice in chunk.choices:
            if choice.index != 0:
                continue
            delta = choice.delta
            for name in _REASONING_FIELDS:
                reasoning = getattr(delta, name, None)
                if isinstance(reasoning, str):
                    yield from out.thinking(reasoning)
            yield from out.text(delta.content)
            if delta.refusal:
                refusal.append(delta.refusal)
            for fragment in delta.tool_calls or ():
                call = calls.get(fragment.index)
                if call is None:
                    call = calls[fragment.index] = _ChatCall()
                if fragment.id and not call.id:
                    call.id = fragment.id
                function = fragment.function
                if function is not None:
                    if function.name and not call.name:
                        call.name = function.name
                    if function.arguments:
                        call.arguments.append(function.arguments)
            if choice.finish_reason is not None and finish is None:
                finish = choice.finish_reason
                yield from _chat_calls(out, calls, response_id, truncated=finish == "length")
    if finish is None:
        # Some OpenAI-compatible servers end the stream without a finish_reason.
        yield from _chat_calls(out, calls, response_id, truncated=False)
        finish = "tool_calls" if calls else "stop"
    yield from out.flush()
    stop = _CHAT_FINISH.get(finish, "error")
    message = f"finish_reason {finish!r}" if stop == "error" else None
    if refusal:
        stop, message = "refusal", "".join(refusal)
    yield out.response(response_id, stop, usage, message)


def _chat_calls(
    out: StreamAssembler, calls: dict[int, _ChatCall], response_id: str, *, truncated: bool
) -> Iterator[ModelReply]:
    for index in sorted(calls):
        call = calls[index]
        where = f"openai chat completion {response_id!r}, tool call {index}"
        yield from out.block(
            _tool_call(call.id, call.name, call.arguments, where, truncated=truncated)
        )


def _chunk_error(error: object, usage: Usage | None) -> ModelError:
    """An ``error`` object inside a chat completion chunk (its ``code`` may be an HTTP status)."""
    if not isinstance(error, Mapping):
        return _stream_error(str(error), None, usage)
    message = first_text([error.get("message")]) or "the stream reported an error"
    code = error.get("code") or error.get("type")
    if type(code) is int:
        return ModelError(
            f"openai stream error: {message} [{code}]{_upstream(error)}",
            provider="openai",
            kind=kind_from_status(code),
            usage=usage,
        )
    return _stream_error(message + _upstream(error), None if code is None else str(code), usage)


def _tool_call(
    call_id: str, name: str, fragments: list[str], where: str, *, truncated: bool
) -> ToolCall:
    """Build a complete tool call from its argument fragments.

    ``truncated``: the response stopped for ``length``, so arguments that do not
    parse were cut off; the call is kept with empty arguments (the loop answers
    every call of a ``length`` response with a "truncated" error, never runs it).
    """
    if not call_id or not name:
        missing = "id" if not call_id else "name"
        raise MalformedOutput(f"{where}: the tool call has no {missing}")
    where = f"{where} ({name!r}, id {call_id!r})"
    try:
        arguments = decode_arguments("".join(fragments), where)
    except MalformedOutput:
        if not truncated:
            raise
        arguments = {}
    return ToolCall(call_id, name, arguments)


# --------------------------------------------------------------------------- responses


def _responses_input(request: ModelRequest) -> list[ResponseInputItemParam]:
    out: list[ResponseInputItemParam] = []
    for number, message in enumerate(request.messages):
        match message:
            case UserMessage(content=str() as said):
                out.append({"type": "message", "role": "user", "content": said})
            case UserMessage(content=tuple() as given):
                where = message_where(number, message)
                parts = [_input_part(p, index, where) for index, p in enumerate(given)]
                out.append({"type": "message", "role": "user", "content": parts})
            case AssistantMessage():
                text: list[str] = []
                image: ImageBlock | None = None  # the image an image_generation_call made
                for block in message.content:
                    if type(block) is TextBlock:
                        text.append(block.text)
                        continue
                    if type(block) is ImageBlock:
                        image = block
                        continue
                    if type(block) is ThinkingBlock or not sendable(
                        block, "openai", ("reasoning", "image_generation_call")
                    ):
                        # (a reasoning summary goes back inside its reasoning item, an
                        # image inside its image_generation_call item)
                        continue
                    if text:
                        out.append(
                            {"type": "message", "role": "assistant", "content": "".join(text)}
                        )
                        text = []
                    if type(block) is ToolCall:
                        out.append(
                            {
                                "type": "function_call",
                                "call_id": block.id,
                                "name": block.name,
                                "arguments": encode_arguments(block.arguments),
                            }
                        )
                    elif type(block) is ProviderBlock and block.kind == "reasoning":
                        out.append(_reasoning_item(block.data))
                    elif type(block) is ProviderBlock:  # pragma: no branch - sendable() said so
                        out.append(_image_call_item(block.data, image))
                        image = None
                if text:
                    out.append({"type": "message", "role": "assistant", "content": "".join(text)})
            case ToolResultMessage():  # pragma: no branch - the Message union has 3 types
                content = message.content
                output: str | list[ResponseFunctionCallOutputItemParam]
                if isinstance(content, str):
                    output = content
                else:
                    where = message_where(number, message)
                    items = [_input_part(p, index, where) for index, p in enumerate(content)]
                    output = cast("list[ResponseFunctionCallOutputItemParam]", items)
                out.append(
                    {
                        "type": "function_call_output",
                        "call_id": message.tool_call_id,
                        "output": output,
                    }
                )
    return out


def _input_part(part: Part, index: int, where: str) -> ResponseInputContentParam:
    """One part of a Responses input message or function call output
    (:func:`media_refused` if none fits)."""
    match part:
        case TextBlock(text=text):
            return {"type": "input_text", "text": text}
        case ImageBlock():
            return {"type": "input_image", "image_url": data_url(part), "detail": "auto"}
        case DocumentBlock(data=bytes()):
            return {"type": "input_file", "file_data": data_url(part), "filename": file_name(part)}
        case DocumentBlock(url=str() as url):
            return {"type": "input_file", "file_url": url}
        case _:
            raise media_refused(
                "openai", where, index, part, "audio (Responses input has no audio part)"
            )


def _image(made: ImageGenerationCall, index: int) -> ImageBlock:
    try:
        data = base64.b64decode(made.result or "", validate=True)
    except ValueError:
        raise MalformedOutput(
            f"openai response, output item {index}: the image_generation_call result is not base64"
        ) from None
    output_format = made.output_format or "png"
    kind = "svg+xml" if output_format == "svg" else output_format
    return ImageBlock(f"image/{kind}", data=data)


def _image_call_item(data: dict[str, Any], image: ImageBlock | None) -> ResponseInputItemParam:
    """An ``image_generation_call`` output item sent back: its id, with the image
    it made (the :class:`~agentloop.ImageBlock` before its provider block) as
    ``result``."""
    item: dict[str, Any] = {
        "type": "image_generation_call",
        "id": data.get("id"),
        "status": "completed",
    }
    if image is not None and image.data is not None:
        item["result"] = base64_text(image.data)
    return cast("ResponseInputItemParam", item)


def _reasoning_item(data: dict[str, Any]) -> ResponseInputItemParam:
    item: dict[str, Any] = {"type": "reasoning", "summary": data.get("summary") or []}
    for key in ("id", "encrypted_content"):
        if data.get(key) is not None:
            item[key] = data[key]
    return cast("ResponseInputItemParam", item)


def _reasoning_blocks(item: ResponseReasoningItem) -> list[ThinkingBlock | ProviderBlock]:
    summary = [part.model_dump(mode="json", exclude_none=True) for part in item.summary]
    data: dict[str, Any] = {"id": item.id, "summary": summary}
    if item.encrypted_content is not None:
        data["encrypted_content"] = item.encrypted_content
    text = "\n\n".join(part.text for part in item.summary if part.text)
    blocks: list[ThinkingBlock | ProviderBlock] = [ThinkingBlock(text)] if text else []
    blocks.append(ProviderBlock("openai", "reasoning", data))
    return blocks


def _responses_usage(usage: ResponseUsage | None) -> Usage | None:
    if usage is None:
        return None
    cached = getattr(usage.input_tokens_details, "cached_tokens", None) or 0
    written = getattr(usage.input_tokens_details, "cache_write_tokens", None) or 0
    reasoning = getattr(usage.output_tokens_details, "reasoning_tokens", None) or 0
    return Usage(
        usage.input_tokens,
        usage.output_tokens,
        cache_read_tokens=cached,
        cache_write_tokens=written,
        reasoning_tokens=reasoning,
    )


def _responses_tools(request: ModelRequest) -> list[ToolParam]:
    return [
        {
            "type": "function",
            "name": spec.name,
            "description": spec.description,
            "parameters": spec.parameters,
            "strict": False,
        }
        for spec in request.tools
    ]


def _responses_replies(request: ModelRequest) -> Parser[ResponseStreamEvent]:
    out = StreamAssembler(request.id)
    response_id = ""
    refusal: list[str] = []
    failure: ModelError | None = None  # an ``error`` event: raised once the stream ends
    open_calls: dict[str, _ChatCall] = {}  # function calls added, not done yet, by item id
    # A call whose arguments did not parse: fine only if the response then stops for
    # the token limit (the arguments were cut off); anything after it is an error.
    cut_off: tuple[_ChatCall, str, MalformedOutput] | None = None
    while (event := (yield NEXT)) is not END:
        if cut_off is not None and event.type not in _TERMINAL_EVENTS:
            raise cut_off[2]
        match event:
            case ResponseCreatedEvent():
                response_id = event.response.id
            case ResponseTextDeltaEvent():
                yield from out.text(event.delta)
            case ResponseRefusalDeltaEvent():
                refusal.append(event.delta)
            case ResponseOutputItemDoneEvent(item=ResponseReasoningItem() as reasoning):
                for part in _reasoning_blocks(reasoning):
                    yield from out.block(part)
            case ResponseOutputItemDoneEvent(item=ImageGenerationCall(result=str()) as made):
                # The image the image_generation tool made (base64), then the item's id:
                # both go back as the same image_generation_call item next turn.
                yield from out.block(_image(made, event.output_index))
                made_id = {"id": made.id}
                yield from out.block(ProviderBlock("openai", "image_generation_call", made_id))
            case ResponseOutputItemAddedEvent(item=ResponseFunctionToolCall() as item):
                call = open_calls[item.id or item.call_id] = _ChatCall()
                call.id, call.name = item.call_id, item.name
            case ResponseFunctionCallArgumentsDeltaEvent():
                # (a delta for an item never added leaves an unfinished call: a failure)
                open_calls.setdefault(event.item_id, _ChatCall()).arguments.append(event.delta)
            case ResponseOutputItemDoneEvent(item=ResponseFunctionToolCall() as item):
                call = open_calls.pop(item.id or item.call_id, _ChatCall())
                call.id, call.name = item.call_id or call.id, item.name or call.name
                if item.arguments:
                    call.arguments = [item.arguments]
                where = f"openai response {response_id!r}, output item {event.output_index}"
                try:
                    block = _tool_call(call.id, call.name, call.arguments, where, truncated=False)
                except MalformedOutput as problem:
                    cut_off = (call, where, problem)
                    continue
                yield from out.block(block)
            case ResponseCompletedEvent() | ResponseIncompleteEvent():
                response = event.response
                response_id = response.id or response_id
                stop, message = "stop", None
                if type(event) is ResponseIncompleteEvent:
                    details = response.incomplete_details
                    reason = details.reason if details is not None else None
                    stop = "length" if reason == "max_output_tokens" else "error"
                    if stop == "error":
                        message = f"incomplete: {reason or 'no reason given'}"
                if refusal:
                    stop, message = "refusal", "".join(refusal)
                unfinished = [
                    (call, f"openai response {response_id!r}, function call item {item_id!r}")
                    for item_id, call in open_calls.items()
                ]
                if cut_off is not None:
                    if stop != "length":
                        raise cut_off[2]
                    unfinished.insert(0, (cut_off[0], cut_off[1]))
                if unfinished and stop != "length":
                    raise MalformedOutput(
                        f"{unfinished[0][1]}: the response ended before the call was done"
                    )
                for call, where in unfinished:
                    block = _tool_call(call.id, call.name, call.arguments, where, truncated=True)
                    yield from out.block(block)
                yield from out.flush()
                yield out.response(response_id, stop, _responses_usage(response.usage), message)
                return
            case ResponseFailedEvent():
                error = event.response.error
                usage = _responses_usage(event.response.usage)
                if error is None and failure is not None:
                    failure.usage = usage
                    raise failure
                message = error.message if error is not None else "the response failed"
                code = str(error.code) if error is not None and error.code is not None else None
                raise _stream_error(message, code, usage)
            case ResponseErrorEvent():
                # The response.failed that follows (if any) carries the usage. The
                # API puts code and message at the top or inside an "error" object.
                nested = getattr(event, "error", None)
                nested = nested if isinstance(nested, Mapping) else {}
                message = first_text([event.message, nested.get("message")]) or "stream error"
                code = event.code or nested.get("code") or nested.get("type")
                failure = failure or _stream_error(message, code)
            case _:
                pass  # summaries' progress, annotations, web search progress, ...: not mapped
    if failure is not None:
        raise failure
    raise MalformedOutput(
        f"openai response {response_id!r}: the stream ended without "
        f"response.completed, response.incomplete or response.failed"
    )


_TERMINAL_EVENTS: Final = frozenset(
    {"response.completed", "response.incomplete", "response.failed", "error"}
)


# --------------------------------------------------------------------------- errors


def _model_error(exc: openai.OpenAIError) -> ModelError:
    """Classify an SDK exception; keep the provider's own message (and an OpenAI-
    compatible router's upstream reason) and the wait it asked for."""
    retry = None
    if isinstance(exc, openai.APIConnectionError):
        kind = "connection"
        status = None
        detail = str(exc) or "connection error"
        if isinstance(exc, openai.APITimeoutError):
            detail = "request timed out"
    elif isinstance(exc, openai.APIStatusError):
        status = exc.status_code
        kind = kind_from_status(status)
        body = exc.body if isinstance(exc.body, Mapping) else {}
        detail = first_text([body.get("message")]) or str(exc)
        code = exc.code or exc.type
        if code:
            detail = f"{detail} [{code}]"
        detail += _upstream(body)
        retry = retry_after(exc.response.headers)
    else:  # (error chunks and events reach the adapter as data: see _keep_error_chunks)
        status, kind, detail = None, "unknown", f"{type(exc).__name__}: {exc}"
    where = f"HTTP {status}" if status is not None else kind
    return ModelError(
        f"openai {where}: {detail}",
        provider="openai",
        status_code=status,
        kind=kind,
        retry_after=retry,
    )


def _upstream(error: Mapping[Any, Any]) -> str:
    """What an OpenAI-compatible router says the upstream provider answered.

    OpenRouter wraps the upstream failure as ``{"message": "Provider returned error",
    "metadata": {"provider_name": ..., "raw": <the upstream's own words or body>}}``:
    the reason is only in ``raw``. Returned as ``"; upstream <provider>: <raw>"``.
    """
    metadata = error.get("metadata")
    if not isinstance(metadata, Mapping):
        return ""
    raw = metadata.get("raw")
    if raw is None or raw == "":
        return ""
    if not isinstance(raw, str):  # (a JSON body, parsed)
        raw = msgspec.json.encode(raw, enc_hook=repr).decode()
    provider = metadata.get("provider_name")
    name = f" {provider}" if isinstance(provider, str) and provider else ""
    return f"; upstream{name}: {raw}"


def _stream_error(message: str, code: str | None, usage: Usage | None = None) -> ModelError:
    """An error reported inside the stream (no HTTP status of its own)."""
    lowered = (code or "").lower()
    if "rate_limit" in lowered:
        kind = "rate_limit"
    elif "server" in lowered or "overloaded" in lowered or "unavailable" in lowered:
        kind = "server"
    elif "invalid" in lowered:
        kind = "bad_request"
    else:
        kind = "unknown"
    suffix = f" [{code}]" if code else ""
    return ModelError(
        f"openai stream error: {message}{suffix}", provider="openai", kind=kind, usage=usage
    )
