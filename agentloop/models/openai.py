"""OpenAI adapters: Chat Completions and Responses, streaming, behind the ``Model`` protocol.

Install with ``pip install 'agentloop-replay[openai]'``. Pass your own client::

    import openai
    from agentloop.models.openai import OpenAIChatModel

    model = OpenAIChatModel(openai.OpenAI(), "gpt-4.1-mini", temperature=0)

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

Stream: ``delta.content`` (and ``delta.refusal``) are text; tool-call fragments are
assembled per ``index`` and sent as complete ``ToolCall`` blocks when the choice
finishes. Only choice 0 is read. ``finish_reason``: ``stop`` -> ``stop`` (or
``tool_call`` when the model called tools, as with a forced ``tool_choice``),
``tool_calls`` -> ``tool_call``, ``length`` -> ``length``, anything else
(``content_filter``, ...) -> ``error``. Usage: ``prompt_tokens`` / ``completion_tokens``.

Mapping (Responses)
-------------------
``system`` becomes ``instructions``; messages become input items (user and
assistant text messages, ``function_call`` and ``function_call_output`` items, in
transcript order); tool specs become ``{"type": "function", "strict": False}``
tools. ``response.output_text.delta`` (and refusal deltas) are text; a function
call is sent when its ``response.output_item.done`` arrives (``call_id`` is the
``ToolCall.id``). ``response.completed`` -> ``stop``/``tool_call``,
``response.incomplete`` -> ``length`` for ``max_output_tokens`` else ``error``;
``response.failed`` and ``error`` events raise :class:`~agentloop.ModelError`.
Reasoning items are neither returned nor sent back.

In both, when the response stopped for ``length``, a tool call whose arguments
were cut off is kept with empty arguments: the loop never runs the calls of a
``length`` response (each gets a "truncated" error result) and the model can
re-issue them. Otherwise arguments that are not a JSON object end the stream with
``ModelFailure(code="MODEL_PROTOCOL_ERROR")``.

Errors: every ``openai.APIError`` becomes :class:`~agentloop.ModelError` with
``provider="openai"``, the HTTP status and a ``kind`` (``rate_limit``, ``auth``,
``connection``, ``server``, ``bad_request``, ``unknown``). The adapter uses a copy
of your client with ``max_retries=0``: nothing is retried behind the loop's back;
pass ``retry=RetryPolicy(...)`` to retry, visibly, in :attr:`attempts`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, Final

from .._errors import ModelError
from .._messages import AssistantMessage, TextBlock, ToolCall, ToolResultMessage, UserMessage
from .._protocol import ModelRequest, Usage
from ._common import (
    MalformedOutput,
    ModelReply,
    RetryPolicy,
    StreamAssembler,
    StreamingModel,
    decode_arguments,
    encode_arguments,
    first_text,
    kind_from_status,
)

try:
    import openai
except ImportError as _exc:  # pragma: no cover - exercised without the extra
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
    ResponseRefusalDeltaEvent,
    ResponseTextDeltaEvent,
)

if TYPE_CHECKING:
    from openai.types.chat import ChatCompletionChunk, ChatCompletionMessageParam
    from openai.types.chat import ChatCompletionToolParam as _ChatToolParam
    from openai.types.responses import ResponseInputItemParam, ResponseStreamEvent, ToolParam

__all__ = ["OpenAIChatModel", "OpenAIResponsesModel", "RetryPolicy"]

_CHAT_FINISH: Final = {"stop": "stop", "tool_calls": "tool_call", "length": "length"}
_CHAT_RESERVED: Final = frozenset({"messages", "tools", "stream"})
_RESPONSES_RESERVED: Final = frozenset({"input", "instructions", "tools", "stream"})


class _OpenAIModel(StreamingModel):
    provider = "openai"
    _reserved: frozenset[str] = frozenset()

    def __init__(
        self,
        client: openai.OpenAI,
        model: str,
        *,
        retry: RetryPolicy | None = None,
        sleep: Callable[[float], None] = time.sleep,
        **request_options: Any,
    ) -> None:
        super().__init__(retry=retry, sleep=sleep)
        if not isinstance(model, str) or not model:
            raise ValueError(f"model must be a non-empty model name, got {model!r}")
        clash = sorted(self._reserved & request_options.keys())
        if clash:
            raise ValueError(
                f"{type(self).__name__}: {', '.join(clash)} are set by the adapter "
                f"from the ModelRequest; don't pass them as request options"
            )
        #: The client the adapter calls: yours, with the SDK's own retries off.
        self.client: openai.OpenAI = client.with_options(max_retries=0)
        self.model = model
        self.request_options: dict[str, Any] = dict(request_options)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(model={self.model!r})"


class OpenAIChatModel(_OpenAIModel):
    """The Chat Completions API (``client.chat.completions.create(stream=True)``).

    Args:
        client: an ``openai.OpenAI`` client (or ``AzureOpenAI``, or any
            OpenAI-compatible server's base URL).
        model: the model name.
        retry: retry failed calls that produced nothing yet (default: never retry).
        sleep: how to wait between retries (default ``time.sleep``).
        **request_options: passed to every ``create`` call (``temperature``,
            ``max_completion_tokens``, ``tool_choice``, ``parallel_tool_calls``,
            ``timeout``, ``extra_headers``, ...). ``model``, ``messages``, ``tools``
            and ``stream`` come from the request.
    """

    _reserved = _CHAT_RESERVED

    def _attempt(self, request: ModelRequest) -> Iterator[ModelReply]:
        options = dict(self.request_options)
        options.setdefault("stream_options", {"include_usage": True})
        tools = _chat_tools(request)
        if tools:
            options["tools"] = tools
        try:
            stream = self.client.chat.completions.create(
                model=self.model, messages=_chat_messages(request), stream=True, **options
            )
        except openai.OpenAIError as exc:
            raise _model_error(exc) from exc
        with stream:
            try:
                yield from _chat_replies(request, stream)
            except openai.OpenAIError as exc:
                raise _model_error(exc) from exc


class OpenAIResponsesModel(_OpenAIModel):
    """The Responses API (``client.responses.create(stream=True)``).

    The whole transcript is sent every time (no ``previous_response_id``), so the
    run's log stays the only state. Pass ``store=False`` to keep OpenAI from
    storing responses.

    Args:
        client: an ``openai.OpenAI`` client.
        model: the model name.
        retry: retry failed calls that produced nothing yet (default: never retry).
        sleep: how to wait between retries (default ``time.sleep``).
        **request_options: passed to every ``create`` call (``temperature``,
            ``max_output_tokens``, ``store``, ``reasoning``, ``timeout``, ...).
            ``model``, ``input``, ``instructions``, ``tools`` and ``stream`` come
            from the request.
    """

    _reserved = _RESPONSES_RESERVED

    def _attempt(self, request: ModelRequest) -> Iterator[ModelReply]:
        options = dict(self.request_options)
        if request.system is not None:
            options["instructions"] = request.system
        tools = _responses_tools(request)
        if tools:
            options["tools"] = tools
        try:
            stream = self.client.responses.create(
                model=self.model, input=_responses_input(request), stream=True, **options
            )
        except openai.OpenAIError as exc:
            raise _model_error(exc) from exc
        with stream:
            try:
                yield from _responses_replies(request, stream)
            except openai.OpenAIError as exc:
                raise _model_error(exc) from exc


# --------------------------------------------------------------------------- chat


def _chat_messages(request: ModelRequest) -> list[ChatCompletionMessageParam]:
    out: list[ChatCompletionMessageParam] = []
    if request.system is not None:
        out.append({"role": "system", "content": request.system})
    for message in request.messages:
        match message:
            case UserMessage():
                out.append({"role": "user", "content": message.content})
            case AssistantMessage():
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
                out.append(
                    {
                        "role": "tool",
                        "tool_call_id": message.tool_call_id,
                        "content": message.content,
                    }
                )
    return out


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


def _chat_replies(
    request: ModelRequest, stream: Iterator[ChatCompletionChunk]
) -> Iterator[ModelReply]:
    out = StreamAssembler(request.id)
    response_id = ""
    finish: str | None = None
    usage: Usage | None = None
    calls: dict[int, _ChatCall] = {}
    for chunk in stream:
        response_id = response_id or chunk.id
        if chunk.usage is not None:
            usage = Usage(chunk.usage.prompt_tokens, chunk.usage.completion_tokens)
        for choice in chunk.choices:
            if choice.index != 0:
                continue
            delta = choice.delta
            yield from out.text(delta.content)
            yield from out.text(delta.refusal)
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
                for index in sorted(calls):
                    call = calls[index]
                    where = f"openai chat completion {response_id!r}, tool call {index}"
                    block = _tool_call(
                        call.id, call.name, call.arguments, where, truncated=finish == "length"
                    )
                    yield from out.block(block)
    if finish is None:
        raise MalformedOutput(
            f"openai chat completion {response_id!r}: the stream ended without a finish_reason"
        )
    yield from out.flush()
    yield out.response(response_id, _CHAT_FINISH.get(finish, "error"), usage)


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
    for message in request.messages:
        match message:
            case UserMessage():
                out.append({"type": "message", "role": "user", "content": message.content})
            case AssistantMessage():
                text: list[str] = []
                for block in message.content:
                    if type(block) is TextBlock:
                        text.append(block.text)
                    elif type(block) is ToolCall:
                        if text:
                            out.append(
                                {"type": "message", "role": "assistant", "content": "".join(text)}
                            )
                            text = []
                        out.append(
                            {
                                "type": "function_call",
                                "call_id": block.id,
                                "name": block.name,
                                "arguments": encode_arguments(block.arguments),
                            }
                        )
                if text:
                    out.append({"type": "message", "role": "assistant", "content": "".join(text)})
            case ToolResultMessage():  # pragma: no branch - the Message union has 3 types
                out.append(
                    {
                        "type": "function_call_output",
                        "call_id": message.tool_call_id,
                        "output": message.content,
                    }
                )
    return out


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


def _responses_replies(
    request: ModelRequest, stream: Iterator[ResponseStreamEvent]
) -> Iterator[ModelReply]:
    out = StreamAssembler(request.id)
    response_id = ""
    open_calls: dict[str, _ChatCall] = {}  # function calls added, not done yet, by item id
    # A call whose arguments did not parse: fine only if the response then stops for
    # the token limit (the arguments were cut off); anything after it is an error.
    cut_off: tuple[_ChatCall, str, MalformedOutput] | None = None
    for event in stream:
        if cut_off is not None and event.type not in _TERMINAL_EVENTS:
            raise cut_off[2]
        match event:
            case ResponseCreatedEvent():
                response_id = event.response.id
            case ResponseTextDeltaEvent() | ResponseRefusalDeltaEvent():
                yield from out.text(event.delta)
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
                stop = "stop"
                if type(event) is ResponseIncompleteEvent:
                    details = response.incomplete_details
                    reason = details.reason if details is not None else None
                    stop = "length" if reason == "max_output_tokens" else "error"
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
                usage = response.usage
                yield from out.flush()
                yield out.response(
                    response_id,
                    stop,
                    Usage(usage.input_tokens, usage.output_tokens) if usage is not None else None,
                )
                return
            case ResponseFailedEvent():
                error = event.response.error
                message = error.message if error is not None else "the response failed"
                code = str(error.code) if error is not None and error.code is not None else None
                raise _stream_error(message, code)
            case ResponseErrorEvent():
                raise _stream_error(event.message, event.code)
            case _:
                pass  # reasoning, annotations, web search progress, ...: not mapped
    raise MalformedOutput(
        f"openai response {response_id!r}: the stream ended without "
        f"response.completed, response.incomplete or response.failed"
    )


_TERMINAL_EVENTS: Final = frozenset(
    {"response.completed", "response.incomplete", "response.failed", "error"}
)


# --------------------------------------------------------------------------- errors


def _model_error(exc: openai.OpenAIError) -> ModelError:
    """Classify an SDK exception; keep the provider's own message."""
    if isinstance(exc, openai.APIConnectionError):
        kind = "connection"
        status = None
        detail = str(exc) or "connection error"
        if isinstance(exc, openai.APITimeoutError):
            detail = "request timed out"
    elif isinstance(exc, openai.APIStatusError):
        status = exc.status_code
        kind = kind_from_status(status)
        body = exc.body
        detail = first_text([body.get("message")] if isinstance(body, Mapping) else []) or str(exc)
        code = exc.code or exc.type
        if code:
            detail = f"{detail} [{code}]"
    elif isinstance(exc, openai.APIError):
        # an error event inside a stream that had started fine
        return _stream_error(exc.message, exc.code)
    else:
        status, kind, detail = None, "unknown", f"{type(exc).__name__}: {exc}"
    where = f"HTTP {status}" if status is not None else kind
    return ModelError(f"openai {where}: {detail}", provider="openai", status_code=status, kind=kind)


def _stream_error(message: str, code: str | None) -> ModelError:
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
    return ModelError(f"openai stream error: {message}{suffix}", provider="openai", kind=kind)
