"""What travels through Temporal: compact JSON made by msgspec, as raw payloads.

Every workflow input and result, activity input and result, update, signal and
query payload of :mod:`agentloop.temporal` is one JSON document encoded with
msgspec and handed to Temporal as a :class:`temporalio.common.RawValue` with the
``json/plain`` encoding. Temporal's own converter never sees a Struct, so no
custom data converter is needed on any client, and the documents stay readable
in the Temporal UI and CLI (``temporal workflow query --name log``). msgspec keeps
dict order (Temporal's JSON converter sorts keys), so tool arguments travel
exactly as the model wrote them.

Payloads are kept small (DESIGN §20): a model activity receives the messages that
are *new* since the previous model request of the session plus a digest of the
prefix it should already have (see ``agentloop.temporal._activities``), not the
whole transcript; a tool activity receives one call. History then grows with the
new content of each step, not with the transcript.

Media blocks (``ImageBlock``, ``AudioBlock``, ``DocumentBlock``, DESIGN §25) travel
inline, their bytes base64 in the JSON, inside the payload that brings them in: the
session's input, a steer or follow-up, a tool activity's result, a model
activity's result. The delta above keeps a block out of every later activity input
(the model activity worker holds it in its transcript cache; another worker reads
it with the ``pending`` query, which is not recorded). So a block is in the history
about twice (where it came in, and the first model request after that), never once
per step. Temporal refuses a payload above 2 MiB (the server's default
``limit.blobSize.error``); :data:`MAX_PAYLOAD_BYTES` is checked before anything is
sent, and each side says what was too large instead of the server's rejection
(see docs/durable.md, "Media"). With a ``BlobCodec`` on the clients (``_blobs``),
the bytes of large blocks are in a blob store and the history holds their
SHA-256: the checks then count such blocks by reference (``by_reference``, the
codec's ``min_bytes``; :func:`payload_size`).
"""

from __future__ import annotations

import base64
import hashlib
import math
from typing import Any, Final, TypeVar

import msgspec
from temporalio.api.common.v1 import Payload
from temporalio.common import RawValue
from temporalio.exceptions import ApplicationError

from agentloop import (
    MAX_CHUNKS_PER_STEP,
    AudioBlock,
    Budget,
    Content,
    DocumentBlock,
    Event,
    FollowUp,
    ImageBlock,
    Limits,
    Message,
    ModelChunk,
    ModelFailure,
    ModelRequest,
    ModelResponse,
    OutputSpec,
    ParentLink,
    Resume,
    RunResult,
    Steer,
    ToolCall,
    ToolResult,
    ToolSpec,
    UserMessage,
    encode_event,
)

__all__ = [
    "BLOB_ENCODING",
    "DEFAULT_BLOB_MIN_BYTES",
    "DEFAULT_MODEL_ACTIVITY",
    "DEFAULT_TOOL_ACTIVITY",
    "MAX_PAYLOAD_BYTES",
    "ActivityOptions",
    "AgentConfig",
    "Answer",
    "ChildOutcome",
    "ChildPause",
    "ModelCall",
    "ModelConfig",
    "ModelOutput",
    "PendingBatch",
    "PendingModel",
    "PendingPause",
    "PendingTool",
    "SessionInput",
    "ToolInput",
    "ToolOutput",
    "UserInput",
    "blob_spans",
    "chain_digest",
    "config_digest",
    "decode",
    "decode_pending",
    "encode",
    "inflate",
    "log_page",
    "oversized",
    "payload_data",
    "payload_size",
    "raw",
]

T = TypeVar("T")

_JSON: Final = b"json/plain"
_encode = msgspec.json.Encoder().encode

#: The largest JSON document one payload of :mod:`agentloop.temporal` may hold: under
#: the 2 MiB (2,097,152 bytes) Temporal's server refuses by default, with room for
#: the payload's metadata and the rest of the request. A base64 block takes 4/3 of
#: its bytes: an image of about 1.4 MiB still fits.
MAX_PAYLOAD_BYTES: Final = 2_000_000

#: Starts every digest chain; bump it if the digest recipe ever changes.
_DIGEST_SEED: Final = b"agentloop.temporal/1\n"


def encode(value: Any) -> bytes:
    """``value`` as compact JSON (msgspec)."""
    return _encode(value)


def raw(data: bytes) -> RawValue:
    """A ``json/plain`` payload holding ``data`` (already JSON) as is."""
    return RawValue(Payload(metadata={"encoding": _JSON}, data=data))


#: The smallest media block :class:`~agentloop.temporal.BlobCodec` stores by
#: reference by default (its ``min_bytes``): smaller blocks stay inline.
DEFAULT_BLOB_MIN_BYTES: Final = 65_536
#: The ``encoding`` of a payload whose large media bytes are in a blob store (the
#: payload holds each one's SHA-256 in its place; see ``BlobCodec``).
BLOB_ENCODING: Final = b"json/agentloop-blobs"


_DATA_KEY: Final = b'"data":"'


def blob_spans(data: bytes, min_bytes: int) -> list[tuple[int, int]]:
    """Where the bytes of each media block of at least ``min_bytes`` bytes may be
    in ``data`` (a JSON document): the ``(start, end)`` of every string value of a
    ``"data"`` key (a block's field, or a ``log`` page's blob item) at least as
    long as their base64 and without escapes. (``"data":"`` can only be that key
    in JSON: a string holds no bare quote.)"""
    chars = -(-min_bytes * 4 // 3)  # the base64 of min_bytes bytes, without padding
    spans: list[tuple[int, int]] = []
    find = data.find
    key = find(_DATA_KEY)
    while key >= 0:
        start = key + len(_DATA_KEY)
        end = find(b'"', start)
        if end < 0:
            break  # (not JSON)
        if end - start >= chars and find(b"\\", start, end) < 0:
            spans.append((start, end))
        key = find(_DATA_KEY, end + 1)
    return spans


def payload_size(data: bytes, by_reference: int | None) -> int:
    """The size ``data`` has in Temporal: with a ``BlobCodec`` of ``min_bytes ==
    by_reference``, each large block's base64 is replaced by its 64-digit hash."""
    if by_reference is None or len(data) < by_reference:
        return len(data)
    return len(data) - sum(end - start - 64 for start, end in blob_spans(data, by_reference))


def oversized(data: bytes, what: str, by_reference: int | None = None) -> str | None:
    """Why ``data`` cannot travel as one payload (it is larger than
    :data:`MAX_PAYLOAD_BYTES`, its large media blocks counted by reference when
    ``by_reference`` is a ``BlobCodec``'s ``min_bytes``), naming ``what`` it is;
    ``None`` when it can."""
    size = payload_size(data, by_reference)
    if size <= MAX_PAYLOAD_BYTES:
        return None
    if by_reference is None:
        return (
            f"{what} is {size:,} bytes as JSON, more than the {MAX_PAYLOAD_BYTES:,} "
            "one Temporal payload may hold (media blocks travel inline, base64): "
            "pass large media by url= instead of data=, or give the clients a blob "
            "store (agentloop.temporal.blob_converter)"
        )
    return (
        f"{what} is {size:,} bytes as JSON with its media blocks of {by_reference:,} "
        f"bytes or more stored by reference, more than the {MAX_PAYLOAD_BYTES:,} one "
        "Temporal payload may hold: lower the BlobCodec's min_bytes"
    )


def decode(value: RawValue, type_: type[T], what: str) -> T:
    """Decode a payload as ``type_``.

    Raises:
        ApplicationError: (non-retryable, type ``InvalidPayload``) the payload is
            not JSON of that shape, or nested too deep to decode (msgspec gives up
            about a thousand levels down); the message says which ``what`` and
            where. (A ``RecursionError`` out of a signal handler would fail the
            workflow task, and Temporal would retry it forever.)
    """
    data = payload_data(value)
    try:
        return msgspec.json.decode(data, type=type_)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        problem = str(exc)
    except RecursionError:
        problem = "nested too deep to decode"
    raise ApplicationError(f"invalid {what}: {problem}", type="InvalidPayload", non_retryable=True)


def payload_data(value: RawValue) -> bytes:
    """The JSON of a payload of :mod:`agentloop.temporal`.

    Raises:
        RuntimeError: its large media bytes are in a blob store: this process's
            client has no ``BlobCodec`` to read them. (Not an ``ApplicationError``:
            a workflow task or activity attempt that fails this way is retried,
            on another worker if this one is the one misconfigured.)
    """
    payload = value.payload
    if payload.metadata.get("encoding") == BLOB_ENCODING:
        raise RuntimeError(
            "this payload's media blocks are in a blob store (agentloop.temporal.BlobCodec), "
            "and this client has no BlobCodec to read them: connect every client and "
            "worker with data_converter=agentloop.temporal.blob_converter(store)"
        )
    return payload.data


# --------------------------------------------------------------------------- options


class ActivityOptions(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """How the workflow runs one kind of activity (model calls or tool calls).

    Attributes:
        task_queue: where the activity runs (default: the workflow's task queue).
            Give model calls and tool calls their own queues to run them on other
            machines than the workflows (see docs/durable.md).
        start_to_close_seconds: the longest one attempt may take.
        heartbeat_seconds: the activity heartbeats while the model streams or the
            tool runs; a worker that dies is noticed this long after its last
            heartbeat reached the server (``None``: no heartbeats, a dead worker is
            noticed after ``start_to_close_seconds``).
        max_attempts: attempts before the call fails for good (``0``: unlimited).
        initial_interval_seconds, backoff_coefficient, max_interval_seconds:
            the delay before each retry.
        local: run it as a Temporal *local activity*: on the worker running the
            workflow, inside its workflow task, with no activity task to
            schedule, poll and complete on the server (DESIGN §29: fewer round
            trips per step). The workflow's workers must then hold the model (or
            the tools); ``task_queue`` and ``heartbeat_seconds`` do not apply (a
            worker that dies mid-call is noticed when the workflow task times
            out, and the call runs again: at least once, as always). A local
            model call carries the whole request (a local activity's input is not
            recorded in the history, and it must not query its own workflow).
            For cheap, fast calls; see docs/durable.md, "Fewer round trips".

    The defaults are chosen for recovery (see docs/durable.md, "When a worker
    dies"): with :func:`~agentloop.temporal.worker`'s own defaults, a session
    whose worker was SIGKILLed in the middle of a call goes on on another worker
    within 5 s: the call's last heartbeat is at most 1 s old (``worker()``
    throttles heartbeats to one a second), the server notices the silence 2 s
    later, retries after 0.5 s, and the session's next workflow task leaves the
    dead worker's sticky queue after 1 s.
    """

    task_queue: str | None = None
    start_to_close_seconds: float = 600.0
    heartbeat_seconds: float | None = 2.0
    max_attempts: int = 3
    initial_interval_seconds: float = 0.5
    backoff_coefficient: float = 2.0
    max_interval_seconds: float = 60.0
    local: bool = False

    def __post_init__(self) -> None:
        if type(self.local) is not bool:
            raise ValueError(f"ActivityOptions.local must be a bool, got {self.local!r}")
        for name in ("start_to_close_seconds", "initial_interval_seconds", "max_interval_seconds"):
            _positive(self, name, getattr(self, name))
        if self.heartbeat_seconds is not None:
            _positive(self, "heartbeat_seconds", self.heartbeat_seconds)
        attempts = self.max_attempts
        if type(attempts) is not int or not 0 <= attempts < 2**31:
            raise ValueError(f"ActivityOptions.max_attempts must be an int >= 0, got {attempts!r}")
        backoff = self.backoff_coefficient
        if not (math.isfinite(backoff) and backoff >= 1.0):
            raise ValueError(
                f"ActivityOptions.backoff_coefficient must be a number >= 1, got {backoff!r}"
            )


def _positive(options: ActivityOptions, name: str, value: float) -> None:
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"ActivityOptions.{name} must be a positive number, got {value!r}")
    msgspec.structs.force_setattr(options, name, float(value))


#: The model activity's defaults: five minutes per attempt, three attempts, a 2 s
#: heartbeat timeout.
DEFAULT_MODEL_ACTIVITY: Final = ActivityOptions(start_to_close_seconds=300.0)
#: The tool activity's defaults: ten minutes per attempt, three attempts, a 2 s
#: heartbeat timeout.
DEFAULT_TOOL_ACTIVITY: Final = ActivityOptions()


class AgentConfig(
    msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True, omit_defaults=True
):
    """An agent tool's child, as it travels (DESIGN §26): what its ``agent_loop`` is
    built from. Its model and its tools' implementations stay on the workers
    (:func:`~agentloop.temporal.worker` finds them in the agent tools it is given,
    by name). Its hooks and output type are code: the workflow class gives them
    (:meth:`AgentLoopWorkflow.agent_hooks`, :meth:`AgentLoopWorkflow.agent_output`);
    what travels is whether it has hooks and its output's ``OutputSpec`` (name,
    schema, retries), which the child workflow checks against its own.
    """

    tools: tuple[ToolSpec, ...] = ()
    system: str | None = None
    max_steps: int = 8
    budget: Budget | None = None
    limits: Limits | None = None
    parallel_tools: bool = False
    output_retries: int = 2
    output: OutputSpec | None = None
    hooks: bool = False


class ChildOutcome(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A child session's workflow result (its parent reads it): the ``RunResult``
    and the tool calls its log records, its own children's included."""

    result: RunResult
    tool_calls: int


#: A reply the workflow sent its loop, carried into the next run (continue-as-new).
CarriedReply = ModelChunk | ModelResponse | ModelFailure | ToolResult | Resume | Steer | FollowUp


class SessionInput(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The workflow's input: what ``agent_loop(...)`` is built from, and how to
    run its activities.

    ``messages`` are passed to :func:`agentloop.agent_loop` as decoded (dicts of
    the message IR), so a transcript the loop refuses ends the run with
    ``INVALID_TRANSCRIPT`` exactly as it would in process. ``started_at``
    defaults to the workflow's start time (``workflow.now()``). ``limits`` and
    ``output_retries`` and ``parallel_tools`` are :func:`agentloop.agent_loop`'s
    (the output type itself comes from the workflow class:
    :meth:`AgentLoopWorkflow.output`).

    ``compaction``: a built-in compaction policy's ``spec()`` (DESIGN §27;
    ``agent_loop`` rebuilds it; a custom policy comes from the workflow class:
    :meth:`AgentLoopWorkflow.compaction`). Its summary requests are model
    activities like any other (``ModelCall.purpose``).

    ``agents``: the agent tools of the whole tree, by name (every session of the
    tree gets them all); a call to one runs a child workflow. ``agent`` and
    ``parent``: set on a child session: whose model and tools its activities use,
    and its place in the tree (recorded in its ``session.start``).

    ``steps_per_run``: after this many model requests in one workflow run, the
    workflow continues as new (Temporal's continue-as-new) at the next step's
    start; ``None``: when Temporal suggests it (its history grew past the
    server's limits). ``replies``: set by the workflow itself when it continues
    as new: every reply it sent its loop so far, stamped; the next run feeds
    them to a fresh loop, which rebuilds the log byte for byte.

    ``by_reference``: set by :func:`~agentloop.temporal.start_session` when the
    client has a :class:`~agentloop.temporal.BlobCodec`: its ``min_bytes``. Media
    blocks that large travel by reference (their bytes in the blob store, their
    SHA-256 in the history), and the workflow counts them so when it checks a
    payload's size.
    """

    messages: tuple[Any, ...]
    tools: tuple[ToolSpec, ...] = ()
    system: str | None = None
    max_steps: int = 8
    budget: Budget | None = None
    started_at: float | None = None
    model_activity: ActivityOptions = DEFAULT_MODEL_ACTIVITY
    tool_activity: ActivityOptions = DEFAULT_TOOL_ACTIVITY
    limits: Limits | None = None
    output_retries: int = 2
    parallel_tools: bool = False
    steps_per_run: int | None = None
    compaction: dict[str, Any] | None = None
    agents: dict[str, AgentConfig] = msgspec.field(default_factory=dict)
    agent: str | None = None
    parent: ParentLink | None = None
    replies: tuple[CarriedReply, ...] = ()
    by_reference: int | None = None

    def __post_init__(self) -> None:
        steps = self.steps_per_run
        if steps is not None and (type(steps) is not int or steps < 1):
            raise ValueError(f"steps_per_run must be an int >= 1 or None, got {steps!r}")


class Answer(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The ``resume`` update's (and signal's) argument: a ``Resume`` without ``at``
    (the workflow stamps ``workflow.now()`` when it accepts the answer)."""

    payload: Any = None
    budget: Budget | None = None


class UserInput(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The ``steer`` and ``follow_up`` updates' (and signals') argument: the user
    message to send (the workflow stamps ``workflow.now()`` when it sends it)."""

    message: UserMessage


# --------------------------------------------------------------------------- activities


class ModelConfig(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """The part of a model request that does not change from step to step
    (``output``: the run's structured output, sent only when it has one)."""

    tools: tuple[ToolSpec, ...]
    system: str | None
    output: OutputSpec | None = None


class ModelCall(
    msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True, omit_defaults=True
):
    """The model activity's input: one request, as a delta.

    The request's messages are the first ``base`` messages the activity worker
    already has for ``session`` (their digest chain ends at ``digest``) followed
    by ``messages``. ``config`` is sent when ``base == 0`` (the first request, or
    after a ``before_plan`` hook changed the system prompt). A worker that does
    not hold that prefix asks the workflow (query ``pending``) for the request.
    ``chunks_per_step`` is the session's limit (``Limits.chunks_per_step``; sent
    only when it is not the default): the activity reads no further than the
    chunk the loop would fail the step on. ``purpose`` is the request's
    (``"compaction"`` for a summary the session's compaction policy asks for,
    DESIGN §27; sent only then).
    """

    session: str
    run_id: str
    request_id: str
    step: int
    base: int
    digest: str
    messages: tuple[Message, ...]
    config: ModelConfig | None = None
    chunks_per_step: int = MAX_CHUNKS_PER_STEP
    purpose: str = "step"
    agent: str | None = None


class ModelOutput(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """The model activity's result: every chunk, then the response or a failure."""

    items: tuple[ModelChunk | ModelResponse | ModelFailure, ...]


class ToolInput(msgspec.Struct, frozen=True, forbid_unknown_fields=True, omit_defaults=True):
    """The tool activity's input: the session (workflow id) and one call (``agent``:
    the agent tool whose child session made it, whose tools run it)."""

    session: str
    call: ToolCall
    agent: str | None = None


class ToolOutput(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """The tool activity's result, as ``ToolRegistry.execute`` returns it: text, or
    the tool's blocks (their bytes inline)."""

    content: Content
    is_error: bool = False


# --------------------------------------------------------------------------- the pending query


class PendingModel(
    msgspec.Struct, frozen=True, omit_defaults=True, tag_field="effect", tag="model_request"
):
    """A ``ModelRequest`` as the ``pending`` query returns it."""

    id: str
    step: int
    messages: tuple[Message, ...]
    tools: tuple[ToolSpec, ...]
    system: str | None
    output: OutputSpec | None = None
    purpose: str = "step"

    def request(self) -> ModelRequest:
        """The ``ModelRequest`` it stands for."""
        return ModelRequest(
            self.id, self.step, self.messages, self.tools, self.system, self.output, self.purpose
        )


class PendingTool(msgspec.Struct, frozen=True, tag_field="effect", tag="tool_request"):
    """A ``ToolRequest`` as the ``pending`` query returns it."""

    call: ToolCall
    step: int


class PendingBatch(msgspec.Struct, frozen=True, tag_field="effect", tag="tool_batch"):
    """A ``ToolBatch`` as the ``pending`` query returns it (``parallel_tools``)."""

    calls: tuple[ToolCall, ...]
    step: int


class PendingPause(msgspec.Struct, frozen=True, tag_field="effect", tag="pause"):
    """A ``Pause`` as the ``pending`` query returns it (``path``: the child sessions
    down to the one that paused, for a pause of an agent tool's child)."""

    reason: str
    payload: Any = None
    path: tuple[str, ...] = ()


class ChildPause(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """The ``child_paused`` signal a child session sends its parent: it (or one of
    its own children, by ``pause.path``) waits for an answer."""

    session: str
    pause: PendingPause


# --------------------------------------------------------------------------- digests


def config_digest(config: ModelConfig) -> str:
    """The first link of a transcript's digest chain."""
    return hashlib.blake2b(_DIGEST_SEED + _encode(config), digest_size=16).hexdigest()


def chain_digest(digest: str, message: Message) -> str:
    """The digest of a prefix extended by one message."""
    return hashlib.blake2b(digest.encode() + _encode(message), digest_size=16).hexdigest()


Pending = PendingModel | PendingTool | PendingBatch | PendingPause | None
_pending_decoder: msgspec.json.Decoder[Pending] = msgspec.json.Decoder(Pending)


def decode_pending(value: RawValue) -> Pending:
    """Decode the ``pending`` query's result."""
    return _pending_decoder.decode(payload_data(value))


# --------------------------------------------------------------------------- the log query

_MEDIA: Final = frozenset((ImageBlock, AudioBlock, DocumentBlock))
_BLOB_ITEM: Final = b'{"blob":"'


class _Blob(msgspec.Struct, frozen=True):
    blob: str
    data: bytes


def _swap_media(value: Any, swap: Any) -> Any:
    """``value`` (an event, or part of one) with each media block holding bytes
    replaced by ``swap(block)``; ``value`` itself when it holds none. Walks Structs
    and tuples (plain data -- dicts, lists -- holds no block)."""
    cls = value.__class__
    if cls in _MEDIA:
        return value if value.data is None else swap(value)
    if cls is tuple:
        items = tuple(_swap_media(item, swap) for item in value)
        return value if all(a is b for a, b in zip(items, value, strict=True)) else items
    if not isinstance(value, msgspec.Struct):
        return value
    changes = {}
    for name in value.__struct_fields__:
        field = getattr(value, name)
        new = _swap_media(field, swap)
        if new is not field:
            changes[name] = new
    return msgspec.structs.replace(value, **changes) if changes else value


def log_page(events: list[Event], max_bytes: int, by_reference: int | None = None) -> bytes:
    """The ``log`` query's answer: a JSON array of encoded events, as many as fit
    in ``max_bytes`` (at least one).

    As in log format 3, the bytes of a media block are in the page once, as an
    item ``{"blob": <sha-256 hex>, "data": <base64>}`` before the first event that
    refers to them, and the events hold ``"data": "<sha-256 hex>"`` (64 hex
    digits are base64 too); :func:`inflate` puts the bytes back. A tool result's
    event holds its content twice (the reply and the message): by value, an image
    of 1 MiB would make it too large for any query answer. A blob item counts
    as its size in Temporal (by reference, see :func:`payload_size`).
    """
    items: list[bytes] = []
    size = 2
    seen: set[str] = set()
    blobs: list[bytes] = []  # the blob items of the event at hand

    def deflate(block: Any) -> Any:
        digest = hashlib.sha256(block.data).hexdigest()
        if digest not in seen:
            seen.add(digest)
            blobs.append(_encode(_Blob(digest, block.data)))
        return msgspec.structs.replace(block, data=base64.b64decode(digest))

    for event in events:
        blobs.clear()
        data = encode_event(_swap_media(event, deflate))
        size += len(data) + 1 + sum(payload_size(blob, by_reference) + 1 for blob in blobs)
        if items and size > max_bytes:
            break
        items += blobs
        items.append(data)
    return b"[" + b",".join(items) + b"]"


def inflate(items: list[bytes], blobs: dict[str, bytes], decode_event: Any) -> list[Event]:
    """The events of a ``log`` page (see :func:`log_page`); ``blobs`` keeps the
    bytes seen so far (pages after the first may refer to them)."""
    events: list[Event] = []

    def swap(block: Any) -> Any:
        data = blobs.get(base64.b64encode(block.data).decode())
        return block if data is None else msgspec.structs.replace(block, data=data)

    for item in items:
        if item.startswith(_BLOB_ITEM):
            blob = msgspec.json.decode(item, type=_Blob)
            blobs[blob.blob] = blob.data
        else:
            event = decode_event(item)
            events.append(_swap_media(event, swap) if blobs else event)
    return events
