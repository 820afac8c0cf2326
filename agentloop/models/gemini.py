"""Gemini adapter: ``google-genai``'s streaming ``generate_content`` behind the ``Model`` protocol.

Install with ``pip install 'agentloop-replay[gemini]'``. Pass your own client::

    from google import genai
    from agentloop.models.gemini import GeminiModel

    model = GeminiModel(genai.Client(), "gemini-2.5-flash", temperature=0)

Give it the client's async side, ``genai.Client().aio``, instead and it serves
``agentloop.arun``/``adrive`` (:meth:`~GeminiModel.astream`: the same replies,
usage, errors and retries, awaited); the sync client serves ``run``/``drive``, and
the other pairing raises ``TypeError``.

Mapping
-------
Request: ``system`` is the ``system_instruction``; a ``UserMessage`` is a ``user``
content with one text part; an ``AssistantMessage`` a ``model`` content whose parts
follow its blocks (text -> text part, ``ToolCall`` -> ``function_call`` part with
its ``id``, ``ProviderBlock("gemini", "thought_signature")`` -> the
``thought_signature`` of the part it came with; thinking blocks and other
providers' blocks are not sent); consecutive ``ToolResultMessage``\\ s are one
``user`` content of ``function_response`` parts (``{"result": content}``, or
``{"error": content}`` when ``is_error``). Tool specs become one tool of
``function_declarations`` (``parameters_json_schema``). With ``output=T`` the config
has ``response_mime_type="application/json"`` and ``response_json_schema``, unless
you pass ``response_mime_type``, ``response_schema`` or ``response_json_schema``.

Stream: text parts are text; ``thought`` parts are thinking, sent as one
``ThinkingBlock`` when the thought ends; a ``function_call`` part is one
``ToolCall`` (its ``id``, or ``<response id>-<n>`` when the API gave none); a
``thought_signature`` becomes ``ProviderBlock("gemini", "thought_signature",
{"thought_signature": <base64>, "part": "text" | "thought" | "function_call" |
"empty"})`` right after the block of its part, and goes back on that same kind of
part. ``finish_reason``: ``STOP`` -> ``stop`` (or ``tool_call`` when the model
called functions), ``MAX_TOKENS`` -> ``length``, anything else (``SAFETY``,
``RECITATION``, ``PROHIBITED_CONTENT``, ``MALFORMED_FUNCTION_CALL``, ...) -> ``error``
with the reason and ``finish_message`` in ``stop_message``; a blocked prompt
(``prompt_feedback.block_reason``, no candidate) -> ``error`` likewise. A stream
that ends without a finish reason is ``tool_call`` when calls arrived, else
``stop``. Only candidate 0 is read. Usage: ``prompt_token_count +
tool_use_prompt_token_count`` in, ``candidates_token_count + thoughts_token_count``
out, ``cached_content_token_count`` as cache reads, ``thoughts_token_count`` as
reasoning tokens.

Errors: ``google.genai.errors.APIError`` (an HTTP error, or an error object inside
the stream) becomes :class:`~agentloop.ModelError` with ``provider="gemini"``, the
HTTP status and a ``kind`` (``rate_limit``, ``auth``, ``server``,
``bad_request``), with the usage reported before it; a transport error is
``connection``. The SDK does not retry unless its client was built with
``retry_options``; pass ``retry=RetryPolicy(...)`` to retry visibly, in
:attr:`attempts`.
"""

from __future__ import annotations

import base64
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

from .._errors import ModelError
from .._messages import (
    AssistantMessage,
    ProviderBlock,
    TextBlock,
    ToolCall,
    ToolResultMessage,
    UserMessage,
)
from .._protocol import ModelRequest, Usage
from ._common import (
    END,
    NEXT,
    Parser,
    ProviderCall,
    RetryPolicy,
    StreamAssembler,
    StreamingModel,
    first_text,
    kind_from_status,
    sendable,
)

try:
    import httpx2
    from google.genai import errors, types
    from google.genai.client import AsyncClient
except ImportError as _exc:  # tested in a subprocess that hides the SDK
    raise ImportError(
        "agentloop.models.gemini needs the google-genai SDK: pip install 'agentloop-replay[gemini]'"
    ) from _exc

if TYPE_CHECKING:
    from google import genai

__all__ = ["GeminiModel", "RetryPolicy"]

_RESERVED: Final = frozenset({"system_instruction", "tools"})
_OWN_KINDS: Final = ("thought_signature",)
#: Config options that say how to answer: given any, ``output=`` leaves them be.
_OUTPUT_OPTIONS: Final = frozenset(
    {"response_mime_type", "response_schema", "response_json_schema"}
)
_STOP: Final = {"STOP": "stop", "MAX_TOKENS": "length"}


class GeminiModel(StreamingModel):
    """Gemini through ``client.models.generate_content_stream``.

    Args:
        client: a ``google.genai.Client`` (Gemini API or Vertex AI) for ``run``;
            its ``.aio`` (a ``google.genai.client.AsyncClient``) for ``arun``.
        model: the model name, e.g. ``"gemini-2.5-flash"``.
        retry: retry failed calls that produced nothing yet (default: never retry).
        sleep: how to wait between retries (default ``time.sleep``, or
            ``asyncio.sleep`` with the async client; there, what it returns is
            awaited when it is awaitable).
        **config_options: fields of ``GenerateContentConfig`` for every call
            (``temperature``, ``max_output_tokens``, ``thinking_config``,
            ``tool_config``, ``safety_settings``, ``http_options``, ...).
            ``system_instruction`` and ``tools`` come from the request.
    """

    provider = "gemini"
    clients = ("a sync google.genai.Client", "the async client (a google.genai.Client's .aio)")

    def __init__(
        self,
        client: genai.Client | AsyncClient,
        model: str,
        *,
        retry: RetryPolicy | None = None,
        sleep: Callable[[float], Any] | None = None,
        **config_options: Any,
    ) -> None:
        asynchronous = isinstance(client, AsyncClient)
        super().__init__(retry=retry, sleep=sleep, asynchronous=asynchronous)
        if not isinstance(model, str) or not model:
            raise ValueError(f"model must be a non-empty model name, got {model!r}")
        clash = sorted(_RESERVED & config_options.keys())
        if clash:
            raise ValueError(
                f"GeminiModel: {', '.join(clash)} are set by the adapter from the "
                f"ModelRequest; don't pass them as config options"
            )
        self.client = client
        self.model = model
        self.config_options: dict[str, Any] = dict(config_options)

    def __repr__(self) -> str:
        return f"GeminiModel(model={self.model!r})"

    def _call(self, request: ModelRequest) -> ProviderCall[Any]:
        config = types.GenerateContentConfig(**self.config_options)
        if request.system is not None:
            config.system_instruction = request.system
        output = request.output
        if output is not None and not _OUTPUT_OPTIONS & self.config_options.keys():
            config.response_mime_type = "application/json"
            config.response_json_schema = output.schema
        declarations = [
            types.FunctionDeclaration(
                name=spec.name,
                description=spec.description,
                parameters_json_schema=spec.parameters,
            )
            for spec in request.tools
        ]
        if declarations:
            config.tools = [types.Tool(function_declarations=declarations)]
        contents = _contents(request)
        generate = self.client.models.generate_content_stream

        def open() -> Any:
            return generate(model=self.model, contents=contents, config=config)

        usage = _Usage()
        return ProviderCall(
            open=open,
            parser=_replies(request, usage),
            request_id=request.id,
            errors=(errors.APIError, httpx2.TransportError),
            error=lambda exc: _model_error(exc, usage.value),
        )


# --------------------------------------------------------------------------- request


def _contents(request: ModelRequest) -> list[types.Content]:
    out: list[types.Content] = []
    results: list[types.Part] = []  # consecutive tool results: one user turn
    for message in request.messages:
        if type(message) is not ToolResultMessage and results:
            out.append(types.Content(role="user", parts=results))
            results = []
        match message:
            case UserMessage():
                out.append(types.Content(role="user", parts=[types.Part(text=message.content)]))
            case AssistantMessage():
                parts = _model_parts(message)
                if parts:
                    out.append(types.Content(role="model", parts=parts))
            case ToolResultMessage():  # pragma: no branch - the Message union has 3 types
                key = "error" if message.is_error else "result"
                response = types.FunctionResponse(
                    id=message.tool_call_id,
                    name=message.tool_name,
                    response={key: message.content},
                )
                results.append(types.Part(function_response=response))
    if results:
        out.append(types.Content(role="user", parts=results))
    return out


def _model_parts(message: AssistantMessage) -> list[types.Part]:
    parts: list[types.Part] = []
    last_kind = ""  # the kind of the part just built ("" when the last block made none)
    for block in message.content:
        if not sendable(block, "gemini", _OWN_KINDS):
            last_kind = ""
            continue
        match block:
            case TextBlock(text=text) if text:
                parts.append(types.Part(text=text))
                last_kind = "text"
            case ToolCall():
                call = types.FunctionCall(id=block.id, name=block.name, args=block.arguments)
                parts.append(types.Part(function_call=call))
                last_kind = "function_call"
            case ProviderBlock(data=data):
                signature = _signature_bytes(data.get("thought_signature"))
                if signature is None:
                    continue
                if parts and data.get("part") == last_kind:
                    parts[-1].thought_signature = signature
                else:  # came on an empty part (or its part was not sent): its own part
                    parts.append(types.Part(text="", thought_signature=signature))
                last_kind = ""
            case _:
                last_kind = ""  # thinking is not sent back; blank text makes no part
    return parts


def _signature_bytes(value: object) -> bytes | None:
    if not isinstance(value, str):
        return None
    try:
        return base64.b64decode(value, validate=True)
    except ValueError:
        return None


# --------------------------------------------------------------------------- stream


class _Usage:
    """The latest usage metadata (the API repeats the running totals in each chunk)."""

    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value: Usage | None = None

    def update(self, metadata: types.GenerateContentResponseUsageMetadata | None) -> None:
        if metadata is None:
            return
        thoughts = metadata.thoughts_token_count or 0
        self.value = Usage(
            (metadata.prompt_token_count or 0) + (metadata.tool_use_prompt_token_count or 0),
            (metadata.candidates_token_count or 0) + thoughts,
            cache_read_tokens=metadata.cached_content_token_count or 0,
            reasoning_tokens=thoughts,
        )


def _replies(request: ModelRequest, usage: _Usage) -> Parser[types.GenerateContentResponse]:
    out = StreamAssembler(request.id)
    response_id = ""
    finish: str | None = None
    finish_message: str | None = None
    blocked: str | None = None
    calls = 0
    while (chunk := (yield NEXT)) is not END:
        response_id = response_id or (chunk.response_id or "")
        usage.update(chunk.usage_metadata)
        feedback = chunk.prompt_feedback
        if feedback is not None and feedback.block_reason is not None:
            reason = _enum_name(feedback.block_reason)
            blocked = first_text([feedback.block_reason_message]) or ""
            blocked = f"prompt blocked: {reason}" + (f" ({blocked})" if blocked else "")
        candidate = chunk.candidates[0] if chunk.candidates else None
        if candidate is None:
            continue
        content = candidate.content
        for part in (content.parts if content is not None else None) or ():
            kind = "empty"
            if part.function_call is not None:
                kind = "function_call"
                calls += 1
                call = part.function_call
                call_id = call.id or f"{response_id or request.id}-{calls}"
                yield from out.block(ToolCall(call_id, call.name or "", dict(call.args or {})))
            elif part.thought and part.text:
                kind = "thought"
                yield from out.thinking(part.text)
            elif part.text:
                kind = "text"
                yield from out.text(part.text)
            if part.thought_signature:
                signature = base64.b64encode(part.thought_signature).decode("ascii")
                data = {"thought_signature": signature, "part": kind}
                yield from out.block(ProviderBlock("gemini", "thought_signature", data))
        if candidate.finish_reason is not None:
            finish = _enum_name(candidate.finish_reason)
            finish_message = candidate.finish_message or finish_message
    yield from out.flush()
    if finish is None and blocked is not None:
        stop, message = "error", blocked
    else:
        stop = _STOP.get(finish or "STOP", "error")
        message = None
        if stop == "error":
            message = f"finish_reason {finish}" + (f": {finish_message}" if finish_message else "")
        elif calls:
            stop = "tool_call"
    yield out.response(response_id or request.id, stop, usage.value, message)


def _enum_name(value: object) -> str:
    return str(getattr(value, "name", value))


# --------------------------------------------------------------------------- errors


def _model_error(exc: errors.APIError | httpx2.TransportError, usage: Usage | None) -> ModelError:
    """Classify an SDK or transport error; keep Google's own message and status name."""
    if isinstance(exc, httpx2.TransportError):
        detail = "request timed out" if isinstance(exc, httpx2.TimeoutException) else str(exc)
        return ModelError(
            f"gemini connection: {detail or type(exc).__name__}",
            provider="gemini",
            kind="connection",
            usage=usage,
        )
    status = exc.code if type(exc.code) is int and exc.code >= 400 else None
    kind = kind_from_status(status)
    detail = first_text([exc.message]) or str(exc)
    if exc.status:
        detail = f"{detail} [{exc.status}]"
    where = f"HTTP {status}" if status is not None else "stream error"
    return ModelError(
        f"gemini {where}: {detail}", provider="gemini", status_code=status, kind=kind, usage=usage
    )
