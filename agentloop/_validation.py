"""Checks on what enters the loop: replies' shapes, tool arguments, model responses.

This module is the one place that says what a valid reply is: its structure
(:func:`reply_problem`, :func:`accept`), a tool call's arguments
(:func:`arguments_problems`), a model's response and its content
(:func:`response_problem`, :func:`content_problem`, :func:`edited_plan_problem`),
streamed chunks (``chunk_*_problem``) and failing stop reasons
(:func:`stop_failure`). The functions are pure: the engine passes in the ids the
run used so far and its limits, and raises what they return.

Two kinds of problem are kept apart, because they are different people's fault:

- *structural* problems (a field of the wrong Python type, a value JSON cannot
  represent, such as a ``set``) mean the code driving the loop built a bad reply:
  caller misuse. Such a reply cannot even be written to the log faithfully, so the
  loop records an ``UnrecognizedReply`` describing it instead.
- *semantic* problems (limits, non-finite numbers, ids, chunk/final mismatch) are
  the model's: the run fails with ``MODEL_PROTOCOL_ERROR`` and the reply is logged
  as received.
"""

from __future__ import annotations

import math
import re
from typing import Any

import msgspec

from ._budget import Budget
from ._copy import own_reply
from ._errors import MODEL_ERROR, MODEL_REFUSED
from ._json import INT_END as _INT_END
from ._json import INT_MIN as _INT_MIN
from ._json import (
    MAX_FLOAT_INT,
    clean_text,
    json_problem,
    path_text,
    scan,
    surrogate_problem,
)
from ._limits import DEFAULT_LIMITS, Limits, limit_name
from ._messages import (
    AssistantMessage,
    AudioBlock,
    Block,
    DocumentBlock,
    ImageBlock,
    Message,
    ProviderBlock,
    TextBlock,
    ThinkingBlock,
    ToolCall,
    ToolResultMessage,
    UserMessage,
)
from ._protocol import (
    STOP_REASONS,
    Cancel,
    FollowUp,
    ModelAttempt,
    ModelChunk,
    ModelFailure,
    ModelResponse,
    Resume,
    Steer,
    ToolResult,
    UnrecognizedReply,
    Usage,
)
from ._tree import child_problem

__all__ = [
    "COMPACTION_ID_PREFIXES",
    "FAILING_STOPS",
    "LOOP_ID_PREFIXES",
    "accept",
    "arguments_ok",
    "arguments_problems",
    "block_problem",
    "chunk_call_problem",
    "chunk_limit_problem",
    "chunk_request_problem",
    "content_problem",
    "content_structure_problem",
    "edited_plan_problem",
    "final_request_problem",
    "json_problem",
    "media_problem",
    "message_problem",
    "parts_problem",
    "plain_arguments",
    "plain_call",
    "reply_problem",
    "reserved_id_problem",
    "response_problem",
    "stop_failure",
]

#: The prefixes of the message ids the loop makes itself, each with what it names:
#: a caller's message (a ``Steer``, a ``FollowUp``) may not take one.
LOOP_ID_PREFIXES: tuple[tuple[str, str], ...] = (
    ("message-", "message-<response id> is a model response's message"),
    ("tool-result-", "tool-result-<call id> is a tool call's result"),
    ("output-retry-", "output-retry-<response id> is an answer sent back to the model"),
)
#: And in a run with a compaction policy (DESIGN §27), the ids a compaction makes.
COMPACTION_ID_PREFIXES: tuple[tuple[str, str], ...] = (
    ("summary-", "summary-<response id> is a compaction's summary"),
    ("compaction-", "compaction-<request id> is a summary request's instruction"),
)


def reserved_id_problem(message_id: str, compaction: bool = False) -> str | None:
    """Why a caller's message (a ``Steer``, a ``FollowUp``) may not have the id
    ``message_id``, or ``None``; with ``compaction`` (the run has a compaction
    policy) the ids of :data:`COMPACTION_ID_PREFIXES` are the loop's too.

    The loop names the messages it makes by prefix (:data:`LOOP_ID_PREFIXES`), from
    ids it learns later: the response ids of steps to come, the call ids of calls
    not made yet. A caller's message with such an id could take the id of a message
    the loop has still to make -- the result of the call running now, the next
    response's -- so the whole namespace is the loop's. (The messages a run starts
    with are not held to it: a transcript continued from an earlier run holds the
    loop's ids legitimately.)
    """
    prefixes = LOOP_ID_PREFIXES + COMPACTION_ID_PREFIXES if compaction else LOOP_ID_PREFIXES
    for prefix, meaning in prefixes:
        if message_id.startswith(prefix):
            return (
                f"message id {message_id!r} is in a namespace the loop makes ids in "
                f"({meaning}): give the message an id not starting with {prefix!r}"
            )
    return None


def plain_arguments(arguments: object, limits: Limits = DEFAULT_LIMITS) -> dict[str, Any] | None:
    """The fast path: a copy of ``arguments`` when they are plain JSON within every
    limit, else ``None``.

    One walk checks and copies (tuples become lists, as :func:`copy_json` makes
    them); what is checked is the copy, so what the loop keeps is what passed. No
    paths are built here; when this says ``None``, :func:`arguments_problems` walks
    again to say what is wrong and where. The root object is walked first, without
    a stack: most arguments are flat.
    """
    if type(arguments) is not dict:
        return None
    max_depth, max_entries = limits.argument_depth, limits.argument_entries
    entries = len(arguments)
    code_points = 0
    root = arguments.copy()
    copy: Any = root
    items: Any = copy.items()
    keyed, depth = True, 1
    nested: list[tuple[Any, Any, Any, int]] = []  # (source, target, slot, depth): still to walk
    while True:
        if entries > max_entries:
            return None  # before walking on: shared containers may expand without end
        for slot, value in items:
            if keyed:
                if type(slot) is not str or not (slot.isascii() or clean_text(slot)):
                    return None
                code_points += len(slot)
            kind = type(value)
            if kind is str:
                if not (value.isascii() or clean_text(value)):
                    return None
                code_points += len(value)
            elif kind is int:
                if not _INT_MIN <= value < _INT_END:
                    return None
            elif kind is float:
                if not math.isfinite(value):
                    return None
            elif kind is dict or kind is list or kind is tuple:
                nested.append((value, copy, slot, depth + 1))
            elif kind is not bool and value is not None:
                return None
        if not nested:
            break
        source, target, slot, depth = nested.pop()
        if depth > max_depth:
            return None
        entries += len(source)
        keyed = type(source) is dict
        copy = source.copy() if keyed else list(source)
        items = copy.items() if keyed else enumerate(copy)
        target[slot] = copy
    # values == entries + 1 (every value but the root is one entry of its container)
    if entries < limits.argument_values and code_points <= limits.argument_string_code_points:
        return root
    return None


def arguments_ok(arguments: object, limits: Limits = DEFAULT_LIMITS) -> bool:
    """``True`` when ``arguments`` is plain JSON within every limit (see
    :func:`plain_arguments`)."""
    return plain_arguments(arguments, limits) is not None


def arguments_problems(
    arguments: object, limits: Limits = DEFAULT_LIMITS
) -> tuple[str | None, str | None]:
    """Inspect tool-call arguments; return ``(structural, semantic)`` problems.

    Structural: not a dict, a non-string key, a value of a type JSON has no form
    for, a container that contains itself, a value too large to record. Semantic:
    the limits of DESIGN §8 (depth, values, entries, code points), non-finite
    floats and integers outside the 64-bit range. Each is a message naming the
    rule and the path (``$.a[2].b``), or ``None``. The limits are ``limits``' (the
    ``MAX_*`` defaults unless a run set others).
    """
    if plain_arguments(arguments, limits) is not None:
        return None, None
    if type(arguments) is not dict:
        return f"arguments must be a JSON object (dict), got {type(arguments).__name__}", None
    found = scan(arguments, "$", numbers_are_structural=False)
    if found.structural is not None:
        return found.structural, None
    if found.semantic is not None:
        return None, found.semantic
    if found.deepest > limits.argument_depth:
        return None, (
            f"nesting depth {found.deepest} at {path_text('$', found.deepest_node)} exceeds "
            f"{limit_name(limits, 'argument_depth')}"
        )
    # Every value but the root is one entry of its container (values == entries + 1),
    # so with the default limits the two break together; one message names both.
    entries = found.entries
    values = entries + 1
    if values > limits.argument_values:
        return None, (
            f"{values} values exceed {limit_name(limits, 'argument_values', ', root included')}"
            f": {entries} object fields and array elements "
            + ("exceed " if entries > limits.argument_entries else "within ")
            + limit_name(limits, "argument_entries")
        )
    if entries > limits.argument_entries:
        return None, (
            f"{entries} object fields and array elements exceed "
            f"{limit_name(limits, 'argument_entries')}"
        )
    if found.code_points > limits.argument_string_code_points:
        return None, (
            f"{found.code_points} code points in keys and strings exceed "
            f"{limit_name(limits, 'argument_string_code_points')}"
        )
    return None, None  # pragma: no cover - arguments_ok() said no, so a check above fires


# --------------------------------------------------------------------------- media blocks
#
# An image, audio or document block is checked in two steps, like everything else
# here. Its *structure* (the Python types of its fields, strings the log can hold)
# is the sender's to get right: a ToolResult or a message that breaks it is caller
# misuse, a model's is a malformed output. Its *meaning* -- exactly one of data and
# url, a media type of the block's kind, a URL the loop lets through, the size and
# count limits -- is checked against the run's limits by :func:`media_problem` and
# :func:`parts_problem`, and whose fault a problem is depends on where the block
# came from: a tool's (a tool error the model sees), the caller's
# (INVALID_TRANSCRIPT, caller misuse), the model's (MODEL_PROTOCOL_ERROR).
#
# The loop never decodes the bytes: a PNG that is no PNG passes through.

#: The media blocks, each with the top-level media type it must have (``None``: any).
_MEDIA_KINDS: dict[type, str | None] = {
    ImageBlock: "image",
    AudioBlock: "audio",
    DocumentBlock: None,
}
_PART_TYPES = (TextBlock, ImageBlock, AudioBlock, DocumentBlock)

# RFC 6838 names (letters, digits and !#$&-^_.+), then optional parameters.
_MEDIA_TYPE = re.compile(
    r"[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]{0,126}/[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]{0,126}"
    r"(?:[ \t]*;[ \t]*[A-Za-z0-9!#$&^_.+-]+=(?:[A-Za-z0-9!#$&^_.+-]+|\"[^\"\\\x00-\x1f]*\"))*"
)
#: The URL schemes a media block may refer by: a reference a provider can fetch,
#: or the bytes themselves. Anything else (``javascript:``, ``file:``) is refused.
URL_SCHEMES = ("http", "https", "data")
_URL_UNSAFE = re.compile(r"[\x00-\x20\x7f]")


def media_label(block: object, where: str) -> str:
    """``ToolResult.content[1] (ImageBlock 'image/png')``: how a problem names a block."""
    media_type = getattr(block, "media_type", None)
    kind = type(block).__name__
    if type(media_type) is str and len(media_type) <= 80:
        return f"{where} ({kind} {media_type!r})"
    return f"{where} ({kind})"


def media_structure_problem(block: object, where: str) -> str | None:
    """A field of a media block of the wrong type or holding a string the log
    cannot hold (a lone surrogate), or ``None``."""
    label = media_label(block, where)
    media_type, data, url, name = block.media_type, block.data, block.url, block.name  # type: ignore[attr-defined]
    if type(media_type) is not str:
        return f"{label}: media_type must be a str, got {type(media_type).__name__}"
    if data is not None and type(data) is not bytes:
        return f"{label}: data must be bytes or None, got {type(data).__name__}"
    for field, value in (("media_type", media_type), ("url", url), ("name", name)):
        if value is None:
            continue
        if type(value) is not str:
            return f"{label}: {field} must be a str or None, got {type(value).__name__}"
        if not value.isascii():
            problem = surrogate_problem(value, f"{label}.{field}")
            if problem is not None:
                return problem
    return None


def content_structure_problem(content: object, where: str) -> str | None:
    """A user message's or tool result's ``content`` that is neither a ``str`` the
    log can hold nor a tuple of well-formed parts (:data:`~agentloop.Part`)."""
    if type(content) is str:
        return None if content.isascii() else surrogate_problem(content, where)
    if type(content) is not tuple:
        return f"{where} must be a str or a tuple of parts, got {type(content).__name__}"
    for index, part in enumerate(content):
        kind = type(part)
        at = f"{where}[{index}]"
        if kind is TextBlock:
            problem = block_problem(part, at)
        elif kind in _MEDIA_KINDS:
            problem = media_structure_problem(part, at)
        else:
            problem = (
                f"{at} must be a TextBlock, ImageBlock, AudioBlock or DocumentBlock, "
                f"got {kind.__name__}"
            )
        if problem is not None:
            return problem
    return None


def media_problem(
    block: ImageBlock | AudioBlock | DocumentBlock, where: str, limits: Limits
) -> str | None:
    """What a well-formed media block breaks, or ``None``: exactly one of ``data``
    and ``url``; a ``type/subtype`` media type of the block's kind (``image/*`` for
    an image, ``audio/*`` for audio, any for a document); non-empty ``data`` within
    ``limits.blob_bytes``; an ``http``, ``https`` or ``data`` URL (a ``data:`` URL
    holds bytes too, so its length counts against ``blob_bytes``)."""
    label = media_label(block, where)
    data, url, media_type = block.data, block.url, block.media_type
    if (data is None) == (url is None):
        both = "both" if data is not None else "neither"
        return f"{label}: exactly one of data and url must be set, got {both}"
    if _MEDIA_TYPE.fullmatch(media_type) is None:
        return f"{label}: media_type {media_type[:80]!r} is not a type/subtype media type"
    top = _MEDIA_KINDS[type(block)]
    if top is not None and media_type.partition("/")[0].lower() != top:
        return f"{label}: an {type(block).__name__}'s media_type must be {top}/*"
    if data is not None:
        if not data:
            return f"{label}: data is empty (0 bytes)"
        if len(data) > limits.blob_bytes:
            return f"{label}: {len(data)} bytes exceed {limit_name(limits, 'blob_bytes')}"
        return None
    assert url is not None
    if len(url) > limits.blob_bytes:
        return f"{label}: a url of {len(url)} characters exceeds {limit_name(limits, 'blob_bytes')}"
    scheme, colon, rest = url.partition(":")
    if not colon or scheme.lower() not in URL_SCHEMES:
        return (
            f"{label}: url scheme {scheme[:40]!r} is not one of http, https, data"
            if colon
            else f"{label}: url {url[:80]!r} has no scheme (http, https or data)"
        )
    if _URL_UNSAFE.search(url) is not None:
        return f"{label}: url holds whitespace or control characters"
    if scheme.lower() == "data":
        if "," not in rest:
            return f"{label}: data: url has no ',' before its data"
    elif not rest.startswith("//") or len(rest) == 2 or rest[2] == "/":
        return f"{label}: url {url[:80]!r} has no host"
    return None


def parts_problem(
    content: tuple[Any, ...], where: str, limits: Limits, count: int = 0
) -> tuple[str | None, int]:
    """The first rule a well-formed tuple of parts breaks (:func:`media_problem`,
    ``limits.blobs_per_step``), and the number of media blocks counted so far:
    ``count`` (the blocks the same source added earlier in the step) plus this
    content's."""
    for index, part in enumerate(content):
        if type(part) not in _MEDIA_KINDS:  # text (or, in an assistant message, other blocks)
            continue
        count += 1
        at = f"{where}[{index}]"
        if count > limits.blobs_per_step:
            name = limit_name(limits, "blobs_per_step")
            return f"{media_label(part, at)}: more than {name} media blocks in one step", count
        problem = media_problem(part, at, limits)
        if problem is not None:
            return problem, count
    return None, count


def block_problem(block: object, where: str) -> str | None:
    kind = type(block)
    if kind is TextBlock:
        if type(block.text) is not str:  # type: ignore[attr-defined]
            return f"{where}.text must be a str"
        return surrogate_problem(block.text, f"{where}.text")  # type: ignore[attr-defined]
    if kind is ToolCall:
        if type(block.id) is not str or type(block.name) is not str:  # type: ignore[attr-defined]
            return f"{where}: ToolCall.id and .name must be str"
        problem = surrogate_problem(block.id, f"{where}.id") or surrogate_problem(  # type: ignore[attr-defined]
            block.name,  # type: ignore[attr-defined]
            f"{where}.name",
        )
        if problem is not None:
            return problem
        structural, _ = arguments_problems(block.arguments)  # type: ignore[attr-defined]
        if structural is not None:
            return f"{where}: ToolCall {block.id!r} {structural}"  # type: ignore[attr-defined]
        return None
    if kind is ThinkingBlock:
        text, signature = block.text, block.signature  # type: ignore[attr-defined]
        if type(text) is not str or (signature is not None and type(signature) is not str):
            return f"{where}: ThinkingBlock.text must be a str and .signature a str or None"
        return surrogate_problem(text, f"{where}.text") or (
            None if signature is None else surrogate_problem(signature, f"{where}.signature")
        )
    if kind is ProviderBlock:
        problem = _str_fields(block, "provider", "kind", where=where)
        if problem is None and type(block.data) is not dict:  # type: ignore[attr-defined]
            problem = f"{where}: ProviderBlock.data must be a dict"
        if problem is None:
            problem = json_problem(block.data, f"{where}.data")  # type: ignore[attr-defined]
        return problem
    if kind is ImageBlock:  # (an image-generating model's)
        return media_structure_problem(block, where)
    return (
        f"{where} must be a TextBlock, ThinkingBlock, ToolCall, ProviderBlock or "
        f"ImageBlock, got {kind.__name__}"
    )


def message_problem(message: Message, where: str) -> str | None:
    """A field of ``message`` of the wrong type, or a string the log could not hold
    (a lone surrogate), or ``None``."""
    kind = type(message)
    if kind is AssistantMessage:
        content: object = message.content
        if type(content) is not tuple and type(content) is not list:
            return f"{where}.content must be a tuple of blocks, got {type(content).__name__}"
        for index, block in enumerate(content):
            problem = block_problem(block, f"{where}.content[{index}]")
            if problem is not None:
                return problem
        names: tuple[str, ...] = ("id",)
    elif kind is ToolResultMessage:
        if type(message.is_error) is not bool:  # type: ignore[union-attr]
            return f"{where}.is_error must be a bool, got {type(message.is_error).__name__}"  # type: ignore[union-attr]
        names = ("id", "tool_call_id", "tool_name")
    else:
        names = ("id",)
    problem = _str_fields(message, *names, where=where)
    if problem is None and kind is not AssistantMessage:
        problem = content_structure_problem(message.content, f"{where}.content")
    return problem


def _str_fields(owner: object, *names: str, where: str | None = None) -> str | None:
    """The first of ``owner``'s fields ``names`` that is not a str the log can hold.

    Messages name the field after ``where`` (``messages[2].content``); replies after
    their type (``ToolResult.content``).
    """
    label = type(owner).__name__ if where is None else where
    for name in names:
        value = getattr(owner, name)
        if type(value) is not str:
            return f"{label}.{name} must be a str, got {type(value).__name__}"
        if not value.isascii():
            problem = surrogate_problem(value, f"{label}.{name}")
            if problem is not None:
                return problem
    return None


_USAGE_FIELDS = Usage.__struct_fields__


def _usage_problem(usage: object, owner: str) -> str | None:
    if usage is None:
        return None
    if type(usage) is Usage:
        values = [getattr(usage, name) for name in _USAGE_FIELDS]
        if all(type(value) is int and value >= 0 for value in values):
            return None
    return f"{owner}.usage must be None or a Usage of non-negative ints"


def _attempts_problem(attempts: object, owner: str) -> str | None:
    if type(attempts) is not tuple:
        return f"{owner}.attempts must be a tuple of ModelAttempt"
    for index, attempt in enumerate(attempts):
        where = f"{owner}.attempts[{index}]"
        if type(attempt) is not ModelAttempt:
            return f"{where} must be a ModelAttempt, got {type(attempt).__name__}"
        problem = _str_fields(attempt, "model", "error", "kind", where=where)
        if problem is not None:
            return problem
        if attempt.status_code is not None and type(attempt.status_code) is not int:
            return f"{where}.status_code must be an int or None"
        problem = _usage_problem(attempt.usage, where)
        if problem is not None:
            return problem
    return None


def reply_problem(reply: object) -> str | None:
    """A structural problem with something sent into the loop, or ``None``.

    Checks the Python types of every field (msgspec Structs don't check types on
    construction) and that ``at`` is ``None`` or a number. A non-finite ``at`` is
    not structural (it is checked by the engine, and the reply still logged).
    """
    kind = type(reply)
    if kind is ModelChunk:
        problem = _str_fields(reply, "request_id")
        if problem is None:
            problem = block_problem(reply.block, "ModelChunk.block")  # type: ignore[attr-defined]
    elif kind is ModelResponse:
        problem = _str_fields(reply, "request_id", "id", "stop_reason")
        if problem is None:
            content = reply.content  # type: ignore[attr-defined]
            if type(content) is not tuple:
                problem = f"ModelResponse.content must be a tuple, got {type(content).__name__}"
            else:
                for index, block in enumerate(content):
                    problem = block_problem(block, f"ModelResponse.content[{index}]")
                    if problem is not None:
                        break
        message = reply.stop_message  # type: ignore[attr-defined]
        if problem is None and message is not None:
            problem = _str_fields(reply, "stop_message")
        if problem is None:
            problem = _usage_problem(reply.usage, "ModelResponse")  # type: ignore[attr-defined]
        if problem is None:
            problem = _attempts_problem(reply.attempts, "ModelResponse")  # type: ignore[attr-defined]
    elif kind is ModelFailure:
        problem = (
            _str_fields(reply, "request_id", "message", "code")
            or _usage_problem(reply.usage, "ModelFailure")  # type: ignore[attr-defined]
            or _attempts_problem(reply.attempts, "ModelFailure")  # type: ignore[attr-defined]
        )
    elif kind is ToolResult:
        problem = _str_fields(reply, "call_id") or content_structure_problem(
            reply.content,  # type: ignore[attr-defined]
            "ToolResult.content",
        )
        if problem is None and type(reply.is_error) is not bool:  # type: ignore[attr-defined]
            problem = "ToolResult.is_error must be a bool"
        if problem is None:
            problem = child_problem(reply.child)  # type: ignore[attr-defined]
    elif kind is Resume:
        problem = json_problem(reply.payload, "Resume.payload")  # type: ignore[attr-defined]
        budget = reply.budget  # type: ignore[attr-defined]
        if problem is None and budget is not None and type(budget) is not Budget:
            problem = f"Resume.budget must be a Budget or None, got {type(budget).__name__}"
    elif kind is Cancel:
        problem = _str_fields(reply, "reason")
    elif kind is Steer or kind is FollowUp:
        message = reply.message  # type: ignore[attr-defined]
        if type(message) is not UserMessage:
            problem = f"{kind.__name__}.message must be a UserMessage, got {type(message).__name__}"
        else:
            where = f"{kind.__name__}.message"
            problem = _str_fields(message, "id", where=where) or content_structure_problem(
                message.content, f"{where}.content"
            )
    elif kind is UnrecognizedReply:
        problem = _str_fields(reply, "description")
    else:
        return (
            # (Steer and FollowUp go unnamed: logs hold these words as they are.)
            "send() expects a reply (ModelChunk, ModelResponse, ModelFailure, ToolResult, "
            f"Resume or Cancel), got {kind.__name__}"
        )
    if problem is None:
        at = reply.at  # type: ignore[attr-defined]
        if at is not None and type(at) is not float and type(at) is not int:
            problem = f"{kind.__name__}.at must be a number or None, got {type(at).__name__}"
        elif type(at) is int and not -MAX_FLOAT_INT <= at <= MAX_FLOAT_INT:
            problem = f"{kind.__name__}.at is an integer too large for a float"
    return problem


def accept(reply: object, limits: Limits) -> tuple[Any, str | None, bool]:
    """Check a reply on its way into the loop and take it over, in one walk.

    Returns ``(owned, problem, arguments_ok)``:

    - ``problem``: the structural problem (:func:`reply_problem`'s words), or
      ``None``; then ``owned`` is the reply holding its own copies of the caller's
      argument dicts and payloads (:func:`own_reply`: mutating what was sent
      changes nothing in the loop).
    - ``arguments_ok``: every tool call in it has plain arguments within ``limits``.
      When ``False`` the loop checks them again to word the semantic problem (or,
      for the rarer replies, to find that there is none).

    The replies of every step (text and tool-call chunks, responses, tool results)
    are checked and copied by a fast path that takes only what is plainly right;
    any other reply, or anything unusual in one of these (non-ASCII ids, say),
    goes the slow way: :func:`reply_problem`, then :func:`own_reply`. Both agree
    on what is accepted; the slow one words what is not.
    """
    kind = type(reply)
    if kind is ToolResult:
        call_id, content = reply.call_id, reply.content  # type: ignore[attr-defined]
        if (
            type(call_id) is str
            and call_id.isascii()
            and type(content) is str
            and (content.isascii() or clean_text(content))
            and type(reply.is_error) is bool  # type: ignore[attr-defined]
            and _plain_at(reply.at)  # type: ignore[attr-defined]
            and reply.child is None  # type: ignore[attr-defined]
        ):
            return reply, None, True
    elif kind is ModelChunk:
        request_id, block = reply.request_id, reply.block  # type: ignore[attr-defined]
        if type(request_id) is str and request_id.isascii() and _plain_at(reply.at):  # type: ignore[attr-defined]
            if type(block) is TextBlock:
                text = block.text
                if type(text) is str and (text.isascii() or clean_text(text)):
                    return reply, None, True
            elif type(block) is ToolCall:
                call = plain_call(block, limits)
                if call is not None:
                    return msgspec.structs.replace(reply, block=call), None, True  # type: ignore[type-var]
    elif kind is ModelResponse:
        owned = _plain_response(reply, limits)  # type: ignore[arg-type]
        if owned is not None:
            return owned, None, True
    problem = reply_problem(reply)
    if problem is not None:
        return reply, problem, False
    if (kind is Steer or kind is FollowUp) and type(reply.message.content) is tuple:  # type: ignore[attr-defined]
        # The caller's message: its blocks' limits are caller misuse too, refused
        # before the message is queued (and its bytes recorded).
        where = f"{kind.__name__}.message.content"
        problem, _ = parts_problem(reply.message.content, where, limits)  # type: ignore[attr-defined]
        if problem is not None:
            return reply, problem, False
    return own_reply(reply), None, False


def _plain_at(at: object) -> bool:
    """``at`` as :func:`reply_problem` accepts it, finite or not (the engine judges that)."""
    return (
        at is None
        or type(at) is float
        or (type(at) is int and -MAX_FLOAT_INT <= at <= MAX_FLOAT_INT)
    )


def plain_call(call: ToolCall, limits: Limits) -> ToolCall | None:
    """``call`` with a copy of its arguments, when its id and name are ASCII strs and
    its arguments plain and within ``limits``; else ``None``."""
    call_id, name = call.id, call.name
    if type(call_id) is not str or type(name) is not str or not (call_id + name).isascii():
        return None
    arguments = plain_arguments(call.arguments, limits)
    if arguments is None:
        return None
    return ToolCall(call_id, name, arguments)


def _plain_response(response: ModelResponse, limits: Limits) -> ModelResponse | None:
    """``response`` owning copies of its tool calls' arguments, when its ids and stop
    reason are ASCII strs, it holds only text blocks and plain tool calls, and no
    provider words, usage or attempts of unusual types; else ``None``."""
    content, request_id, response_id, stop_reason = (
        response.content,
        response.request_id,
        response.id,
        response.stop_reason,
    )
    if (
        type(content) is not tuple
        or type(request_id) is not str
        or type(response_id) is not str
        or type(stop_reason) is not str
        or not (request_id + response_id + stop_reason).isascii()
        or not _plain_at(response.at)
        or response.stop_message is not None
        or response.attempts != ()
        or (response.usage is not None and _usage_problem(response.usage, "") is not None)
    ):
        return None
    copied: list[Block] | None = None  # the blocks, once a call among them was copied
    for index, block in enumerate(content):
        if type(block) is TextBlock:
            text = block.text
            if type(text) is not str or not (text.isascii() or clean_text(text)):
                return None
        elif type(block) is ToolCall:
            call = plain_call(block, limits)
            if call is None:
                return None
            if copied is None:
                copied = list(content)
            copied[index] = call
        else:
            return None
    if copied is None:
        return response
    return msgspec.structs.replace(response, content=tuple(copied))


# --------------------------------------------------------------------------- responses
#
# What a response must satisfy before it becomes a message (DESIGN §8): a known
# stop reason that agrees with the content, new ids (they become message-<id> and
# tool-result-<call id>), the block and text limits, and plain-JSON arguments
# within the argument limits. These are pure functions of the response and of the
# ids the run has used so far: the engine calls them (on the model's response, and
# on an after_plan hook's edit of it, which is held to the same rules).

#: The stop reasons that fail the run (``MODEL_ERROR``, ``MODEL_REFUSED``).
FAILING_STOPS = ("error", "refusal")


def response_problem(
    response: ModelResponse,
    message_ids: set[str] | frozenset[str],
    call_ids: set[str] | frozenset[str],
    limits: Limits,
    checked: bool,
) -> str | None:
    """The first rule a model's final ``response`` breaks, or ``None``.

    ``message_ids``/``call_ids``: the ids the run used so far; ``checked``: the
    response's tool-call arguments are known to be plain and within ``limits``
    (see :func:`accept`).
    """
    if response.stop_reason not in STOP_REASONS:
        return f"unknown stop reason {response.stop_reason!r}; expected one of {STOP_REASONS}"
    if not response.id:
        return "response id is empty"
    if f"message-{response.id}" in message_ids:
        return f"response id {response.id!r} was already used (message-{response.id})"
    return content_problem(
        response.content, response.stop_reason, message_ids, call_ids, limits, checked
    )


def edited_plan_problem(
    edited: ModelResponse,
    message_ids: set[str] | frozenset[str],
    call_ids: set[str] | frozenset[str],
    limits: Limits,
) -> str | None:
    """The first rule an ``after_plan`` hook's edit of a response breaks, or ``None``:
    a well-formed reply, a stop reason that keeps the run going, and content that
    passes :func:`content_problem`."""
    problem = reply_problem(edited)
    if problem is None:
        stop_reason = edited.stop_reason
        if stop_reason not in STOP_REASONS or stop_reason in FAILING_STOPS:
            problem = f"stop reason {stop_reason!r} is not stop, tool_call or length"
        else:
            problem = content_problem(edited.content, stop_reason, message_ids, call_ids, limits)
    return problem


def content_problem(
    content: tuple[Block, ...],
    stop_reason: str,
    message_ids: set[str] | frozenset[str],
    call_ids: set[str] | frozenset[str],
    limits: Limits,
    checked: bool = False,
) -> str | None:
    """The first rule ``content`` breaks, or ``None``. ``checked``: its tool calls'
    arguments are known to be plain and within the limits (see :func:`accept`)."""
    if len(content) > limits.assistant_blocks:
        name = limit_name(limits, "assistant_blocks")
        return f"{len(content)} blocks exceed {name}"
    text_points = media = 0
    seen: set[str] = set()
    for index, block in enumerate(content):
        kind = type(block)
        if kind is ToolCall:
            call_id = block.id  # type: ignore[union-attr]
            if (
                not call_id
                or not block.name  # type: ignore[union-attr]
                or call_id in seen
                or call_id in call_ids
                or f"tool-result-{call_id}" in message_ids
                or not (checked or arguments_ok(block.arguments, limits))  # type: ignore[union-attr]
            ):
                return _call_problem(index, block, seen, message_ids, call_ids, limits)  # type: ignore[arg-type]
            seen.add(call_id)
        elif kind is TextBlock or kind is ThinkingBlock:
            text_points += len(block.text)  # type: ignore[union-attr]
        elif kind is ImageBlock:
            media += 1
            where = f"content[{index}]"
            if media > limits.blobs_per_step:
                name = limit_name(limits, "blobs_per_step")
                return f"{media_label(block, where)}: more than {name} media blocks in one step"
            problem = media_problem(block, where, limits)  # type: ignore[arg-type]
            if problem is not None:
                return problem
        # (a ProviderBlock's opaque data is checked as JSON, not as text)
    if text_points > limits.step_text_code_points:
        name = limit_name(limits, "step_text_code_points")
        return f"text exceeds {name}"
    if stop_reason == "stop" and seen:
        return "stop reason 'stop' but the response contains tool calls"
    if stop_reason == "tool_call" and not seen:
        return "stop reason 'tool_call' but the response contains no tool call"
    return None


def _call_problem(
    index: int,
    call: ToolCall,
    seen: set[str],
    message_ids: set[str] | frozenset[str],
    call_ids: set[str] | frozenset[str],
    limits: Limits,
) -> str:
    """What is wrong with ``content[index]``, a tool call (the words, once
    :func:`content_problem` found that something is)."""
    if not call.id:
        return f"content[{index}]: tool call id is empty"
    where = f"content[{index}] (tool call {call.id!r})"
    if not call.name:
        return f"{where}: tool name is empty"
    if call.id in seen or call.id in call_ids:
        return f"{where}: tool call id is not unique"
    if f"tool-result-{call.id}" in message_ids:
        return f"{where}: its result id tool-result-{call.id} is already taken"
    # (Structural problems were refused on the way in: the limits are left.)
    structural, semantic = arguments_problems(call.arguments, limits)
    return f"{where} arguments: {semantic or structural}"


def stop_failure(step: int, response: ModelResponse) -> tuple[str, str]:
    """The failure ``(code, message)`` of a response that stopped for ``error`` or
    ``refusal`` (:data:`FAILING_STOPS`)."""
    words = response.stop_message
    if response.stop_reason == "refusal":
        why = words or "".join(b.text for b in response.content if type(b) is TextBlock)
        return MODEL_REFUSED, f"step {step}: the model refused: {why or 'it gave no explanation'}"
    said = f": {words}" if words else ""
    return MODEL_ERROR, f"step {step}: the model stopped with reason 'error'{said}"


# --------------------------------------------------------------------------- streamed chunks
#
# A chunk is checked as it arrives (the engine counts; these word the problem):
# the request it names, the chunk and text limits, its tool call's arguments.


def chunk_request_problem(step: int, number: int, request_id: object, active: str) -> str:
    """A chunk (the ``number``-th of ``step``) names another request than the active one."""
    return (
        f"step {step}, chunk {number}: chunk names request {request_id!r}, "
        f"but the active request is {active!r}"
    )


def chunk_limit_problem(step: int, number: int, limits: Limits, limit: str) -> str:
    """The ``number``-th chunk of ``step`` goes past ``limit`` (``chunks_per_step`` or
    ``step_text_code_points``)."""
    name = limit_name(limits, limit)
    if limit == "chunks_per_step":
        return f"step {step}, chunk {number}: more than {name} chunks"
    return f"step {step}, chunk {number}: streamed text exceeds {name}"


def chunk_call_problem(step: int, number: int, call: ToolCall, limits: Limits) -> str | None:
    """What is wrong with the arguments of a streamed tool call, or ``None``."""
    _, semantic = arguments_problems(call.arguments, limits)
    if semantic is None:
        return None
    return f"step {step}, chunk {number}: tool call {call.id!r} arguments: {semantic}"


def final_request_problem(step: int, reply: ModelResponse | ModelFailure, active: str) -> str:
    """A final response or failure names another request than the active one."""
    return (
        f"step {step}: {type(reply).__name__} names request {reply.request_id!r}, "
        f"but the active request is {active!r}"
    )
