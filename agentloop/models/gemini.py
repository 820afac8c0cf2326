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
part. Vertex AI's streamed function-call arguments (``stream_function_call_arguments``
in the ``tool_config``: a part ``{name, will_continue}``, parts of ``partial_args``,
a last part without ``will_continue``) are assembled into one ``ToolCall``, sent
when the call ends (:class:`_StreamedCall`). ``finish_reason``: ``STOP`` -> ``stop``
(or ``tool_call`` when the model called functions), ``MAX_TOKENS`` -> ``length``
(calls or not), anything else (``SAFETY``,
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
``bad_request``), with the usage reported before it and the ``retryDelay`` of a
``google.rpc.RetryInfo`` detail (else a ``retry-after`` header) as ``retry_after``;
a transport error is ``connection``. The SDK does not retry unless its client was
built with ``retry_options``; pass ``retry=RetryPolicy(...)`` to retry visibly, in
:attr:`attempts`. Its automatic function calling is turned off (the loop runs the
tools) unless you pass ``automatic_function_calling``.
"""

from __future__ import annotations

import base64
import itertools
import re
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Final, cast

import msgspec

from .._errors import ModelError
from .._messages import (
    AssistantMessage,
    ImageBlock,
    MediaBlock,
    Part,
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
    MalformedOutput,
    Parser,
    ProviderCall,
    RetryPolicy,
    StreamAssembler,
    StreamingModel,
    first_text,
    kind_from_status,
    retry_after,
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
        if config.automatic_function_calling is None:
            # The loop runs the tools: the SDK's automatic function calling never
            # applies (and with stream_function_call_arguments the SDK refuses to
            # start unless it is off).
            config.automatic_function_calling = types.AutomaticFunctionCallingConfig(disable=True)
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
            case UserMessage(content=str() as said):
                out.append(types.Content(role="user", parts=[types.Part(text=said)]))
            case UserMessage(content=tuple() as given):
                out.append(types.Content(role="user", parts=[_part(part) for part in given]))
            case AssistantMessage():
                parts = _model_parts(message)
                if parts:
                    out.append(types.Content(role="model", parts=parts))
            case ToolResultMessage():  # pragma: no branch - the Message union has 3 types
                key = "error" if message.is_error else "result"
                content = message.content
                media: list[types.FunctionResponsePart] | None = None
                if not isinstance(content, str):
                    # text in the response object, media as the response's own parts
                    media = [_response_part(p) for p in content if not isinstance(p, TextBlock)]
                    content = "".join(p.text for p in content if type(p) is TextBlock)
                response = types.FunctionResponse(
                    id=message.tool_call_id,
                    name=message.tool_name,
                    response={key: content},
                    parts=media or None,
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
            case ImageBlock():
                parts.append(_part(block))
                last_kind = "inline_data"
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


def _part(part: Part) -> types.Part:
    """A user message's or assistant's block as a part: text, ``inline_data`` (bytes)
    or ``file_data`` (a URL: a Files API URI, ``gs://``, or a public URL)."""
    if type(part) is TextBlock:
        return types.Part(text=part.text)
    media = cast("MediaBlock", part)
    if media.data is not None:
        return types.Part(inline_data=types.Blob(mime_type=media.media_type, data=media.data))
    return types.Part(file_data=types.FileData(file_uri=media.url, mime_type=media.media_type))


def _response_part(part: MediaBlock) -> types.FunctionResponsePart:
    """A media block of a tool result as a part of its function response."""
    if part.data is not None:
        blob = types.FunctionResponseBlob(mime_type=part.media_type, data=part.data)
        return types.FunctionResponsePart(inline_data=blob)
    uri = types.FunctionResponseFileData(file_uri=part.url, mime_type=part.media_type)
    return types.FunctionResponsePart(file_data=uri)


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
    streamed: _StreamedCall | None = None  # a call whose arguments are still arriving
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
            call = part.function_call
            if streamed is not None:
                if call is not None and not call.name:
                    # a fragment of the open call (Vertex AI's streamed arguments)
                    streamed.add(call, part.thought_signature)
                    if call.will_continue:
                        continue
                    yield from streamed.blocks(out, truncated=False)
                    streamed = None
                    continue
                if call is None and (part.text or part.thought_signature):
                    raise MalformedOutput(f"{streamed.where}: a part of another kind came first")
                # (the next call begins: the open one had no closing fragment)
                yield from streamed.blocks(out, truncated=False)
                streamed = None
            kind = "empty"
            if call is not None:
                kind = "function_call"
                calls += 1
                call_id = call.id or f"{response_id or request.id}-{calls}"
                if call.will_continue:
                    where = f"gemini response {response_id or request.id!r}, function call {calls}"
                    streamed = _StreamedCall(call_id, call.name or "", where)
                    streamed.add(call, part.thought_signature)
                    continue
                yield from out.block(ToolCall(call_id, call.name or "", dict(call.args or {})))
            elif (
                part.inline_data is not None
                and not part.thought  # (draft images of the model's thinking: not kept)
                and _is_image(part.inline_data.mime_type)
            ):
                kind = "inline_data"
                blob = part.inline_data
                image = ImageBlock(blob.mime_type or "", data=blob.data or b"")
                yield from out.block(image)
            elif part.thought and part.text:
                kind = "thought"
                yield from out.thinking(part.text)
            elif part.text:
                kind = "text"
                yield from out.text(part.text)
            if part.thought_signature:
                yield from out.block(_signature(part.thought_signature, kind))
        if candidate.finish_reason is not None:
            finish = _enum_name(candidate.finish_reason)
            finish_message = candidate.finish_message or finish_message
    if streamed is not None:
        if _STOP.get(finish or "") != "length":
            raise MalformedOutput(f"{streamed.where}: the stream ended before the call did")
        yield from streamed.blocks(out, truncated=True)
    yield from out.flush()
    if finish is None and blocked is not None:
        stop, message = "error", blocked
    else:
        stop = _STOP.get(finish or "STOP", "error")
        message = None
        if stop == "error":
            message = f"finish_reason {finish}" + (f": {finish_message}" if finish_message else "")
        elif stop == "stop" and calls:
            stop = "tool_call"  # (a response cut off by MAX_TOKENS stays "length")
    yield out.response(response_id or request.id, stop, usage.value, message)


def _is_image(mime_type: str | None) -> bool:
    return (mime_type or "").lower().startswith("image/")


def _signature(signature: bytes, kind: str) -> ProviderBlock:
    data = {"thought_signature": base64.b64encode(signature).decode("ascii"), "part": kind}
    return ProviderBlock("gemini", "thought_signature", data)


class _StreamedCall:
    """A function call whose arguments Vertex AI streams (``stream_function_call_
    arguments``): a part ``{name, will_continue}``, parts of ``partial_args`` (each a
    JSON path and a value; a string may come in pieces, ``will_continue`` on all but
    the last), and a last part without ``will_continue``. Sent as one ``ToolCall``
    when that last part arrives, with the signature of its first part after it."""

    __slots__ = ("arguments", "continued", "id", "name", "signatures", "where")

    def __init__(self, call_id: str, name: str, where: str) -> None:
        self.id = call_id
        self.name = name
        self.where = f"{where} ({name!r})"
        self.arguments: dict[str, Any] = {}
        self.continued: set[str] = set()  # JSON paths whose string is still arriving
        self.signatures: list[bytes] = []

    def add(self, call: types.FunctionCall, signature: bytes | None) -> None:
        if signature:
            self.signatures.append(signature)
        if call.args:
            self.arguments.update(call.args)
        for partial in call.partial_args or ():
            path = partial.json_path or ""
            value = _partial_value(partial)
            if value is _NO_VALUE:
                continue
            _assign(self.arguments, path, value, path in self.continued, self.where)
            if partial.will_continue:
                self.continued.add(path)
            else:
                self.continued.discard(path)

    def blocks(self, out: StreamAssembler, *, truncated: bool) -> list[Any]:
        # (cut off by the token limit: kept without arguments, like every adapter's)
        arguments = {} if truncated else self.arguments
        ready: list[Any] = out.block(ToolCall(self.id, self.name, arguments))
        for signature in self.signatures:
            ready += out.block(_signature(signature, "function_call"))
        return ready


_NO_VALUE: Final = object()


def _partial_value(partial: types.PartialArg) -> Any:
    """The JSON value of one ``PartialArg`` (numbers come as doubles: whole ones are ints)."""
    if partial.string_value is not None:
        return partial.string_value
    if partial.number_value is not None:
        number = partial.number_value
        whole = number.is_integer() and abs(number) <= 2**53
        return int(number) if whole else number
    if partial.bool_value is not None:
        return partial.bool_value
    if partial.null_value is not None:
        return None
    return _NO_VALUE


#: One step of an RFC 9535 JSON path: ``.name``, ``[index]``, ``['name']``, ``["name"]``.
_STEP: Final = re.compile(
    r"\.([^\W\d]\w*)|\[([0-9]+)\]|\['((?:[^'\\]|\\.)*)'\]|\[\"((?:[^\"\\]|\\.)*)\"\]", re.S
)
#: In a single-quoted name: an escape, or a double quote (JSON needs it escaped).
_SINGLE: Final = re.compile(r"\\.|\"", re.S)
#: The longest array an argument path may make (a bigger index is malformed).
_MAX_INDEX: Final = 100_000


def _path(path: str, where: str) -> list[str | int]:
    """The keys and indexes of a JSON path (``$.recipe.steps[0]`` -> recipe, steps, 0)."""
    if not path.startswith("$"):
        raise MalformedOutput(f"{where}: the argument path {path!r} does not start with $")
    steps: list[str | int] = []
    at = 1
    while at < len(path):
        match = _STEP.match(path, at)
        if match is None:
            raise MalformedOutput(f"{where}: cannot read the argument path {path!r}")
        name, index, single, double = match.groups()
        if index is not None:
            steps.append(int(index))
        elif name is not None:
            steps.append(name)
        else:
            steps.append(_quoted(single, double, path, where))
        at = match.end()
    if not steps:
        raise MalformedOutput(f"{where}: the argument path {path!r} names no argument")
    return steps


def _quoted(single: str | None, double: str | None, path: str, where: str) -> str:
    """A bracketed name, unescaped (RFC 9535 escapes are JSON's, plus ``\\'``)."""
    if single is not None:
        double = _SINGLE.sub(lambda m: {"\\'": "'", '"': '\\"'}.get(m[0], m[0]), single)
    try:
        return msgspec.json.decode(f'"{double}"'.encode(errors="surrogatepass"), type=str)
    except msgspec.DecodeError:
        raise MalformedOutput(f"{where}: cannot read the argument path {path!r}") from None


def _assign(arguments: dict[str, Any], path: str, value: Any, append: bool, where: str) -> None:
    """Set ``value`` at ``path`` in ``arguments``; with ``append``, a string is
    appended to the one already there (the rest of a string streamed in pieces)."""
    steps = _path(path, where)
    target: Any = arguments
    for step, after in itertools.pairwise(steps):  # down to the last step's container
        inner = _slot(target, step, path, where)
        if inner is None:
            inner = target[step] = [] if type(after) is int else {}
        target = inner
    last = steps[-1]
    current = _slot(target, last, path, where)
    if append and isinstance(current, str) and isinstance(value, str):
        value = current + value
    target[last] = value


def _slot(target: Any, step: str | int, path: str, where: str) -> Any:
    """What ``target`` holds at ``step`` (an array grown to have that index)."""
    if type(step) is int:
        if type(target) is not list or step > _MAX_INDEX:
            raise MalformedOutput(f"{where}: argument path {path!r}: no array for [{step}]")
        target.extend([None] * (step + 1 - len(target)))
        return target[step]
    if type(target) is not dict:
        raise MalformedOutput(f"{where}: argument path {path!r}: no object for {step!r}")
    return target.get(step)


def _enum_name(value: object) -> str:
    return str(getattr(value, "name", value))


# --------------------------------------------------------------------------- errors


def _model_error(exc: errors.APIError | httpx2.TransportError, usage: Usage | None) -> ModelError:
    """Classify an SDK or transport error; keep Google's own message and status name,
    and the wait it asked for (``google.rpc.RetryInfo``, or a ``retry-after`` header)."""
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
    retry = _retry_info(exc.details)
    if retry is None:
        headers = getattr(exc.response, "headers", None)
        retry = retry_after(headers if isinstance(headers, Mapping) else None)
    return ModelError(
        f"gemini {where}: {detail}",
        provider="gemini",
        status_code=status,
        kind=kind,
        usage=usage,
        retry_after=retry,
    )


_RETRY_INFO: Final = "type.googleapis.com/google.rpc.RetryInfo"
#: A ``google.protobuf.Duration`` in JSON: seconds, a fraction, and ``s``.
_DURATION: Final = re.compile(r"([0-9]{1,12})(\.[0-9]{1,9})?s")


def _retry_info(body: object) -> float | None:
    """The ``retryDelay`` of the ``google.rpc.RetryInfo`` in an error body's details."""
    error = body.get("error", body) if isinstance(body, Mapping) else None
    details = error.get("details") if isinstance(error, Mapping) else None
    for detail in details if isinstance(details, list) else ():
        if isinstance(detail, Mapping) and detail.get("@type") == _RETRY_INFO:
            delay = detail.get("retryDelay")
            if isinstance(delay, str) and _DURATION.fullmatch(delay):
                return float(delay[:-1])
    return None
