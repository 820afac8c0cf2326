"""Effects the loop yields, replies the caller sends back, and the run's result.

Effects (yielded by the generator) and replies (sent into it) are frozen Structs.
Every reply carries ``at``: the caller's clock when the reply was made, or ``None``.
The engine never reads a clock; time enters only here. Integer ``at`` values are
stored as floats so a JSON round trip gives back exactly the same reply.

Replies are tagged (``kind``) so the event log can record any of them and decode it
back to the same type. They are final: don't subclass them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final, TypeAlias

import msgspec

from ._budget import Budget
from ._messages import AssistantMessage, Block, Content, Message, ToolCall, UserMessage
from ._output import OutputSpec
from ._toolspec import ToolSpec

__all__ = [
    "STATUSES",
    "STOP_REASONS",
    "Cancel",
    "ChildRun",
    "Effect",
    "FollowUp",
    "ModelAttempt",
    "ModelChunk",
    "ModelFailure",
    "ModelRequest",
    "ModelResponse",
    "Pause",
    "Reply",
    "Resume",
    "RunError",
    "RunResult",
    "Steer",
    "ToolBatch",
    "ToolRequest",
    "ToolResult",
    "UnrecognizedReply",
    "Usage",
]

#: ``RunResult.status`` values.
STATUSES = ("completed", "cancelled", "max_steps", "failed")
#: ``ModelResponse.stop_reason`` values.
STOP_REASONS = ("stop", "tool_call", "length", "error", "refusal")

_MODEL_ERROR: Final = "MODEL_ERROR"
_UNKNOWN: Final = "unknown"


class Usage(msgspec.Struct, frozen=True, omit_defaults=True):
    """Token counts reported by a model (summed over a run in ``RunResult.usage``).

    ``input_tokens`` counts every input token the request consumed, cached or not;
    ``cache_read_tokens`` and ``cache_write_tokens`` are the part of them read from
    or written to the provider's prompt cache. ``output_tokens`` counts every output
    token; ``reasoning_tokens`` is the part spent on (possibly hidden) reasoning.

    >>> total = Usage(10, 2, cache_read_tokens=8) + Usage(5, 1, reasoning_tokens=1)
    >>> total.input_tokens, total.cache_read_tokens, total.reasoning_tokens
    (15, 8, 1)
    """

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    reasoning_tokens: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.input_tokens + other.input_tokens,
            self.output_tokens + other.output_tokens,
            self.cache_read_tokens + other.cache_read_tokens,
            self.cache_write_tokens + other.cache_write_tokens,
            self.reasoning_tokens + other.reasoning_tokens,
        )


class ModelAttempt(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """A model that failed before answering, recorded in the reply that came after.

    :class:`~agentloop.models.FallbackModel` lists the models it tried in vain in the
    ``attempts`` of the response (or failure) it finally sends, so the log shows
    every attempt and replays it.

    Attributes:
        model: which model failed (its ``repr``).
        error: the provider's error message.
        kind: the :attr:`~agentloop.ModelError.kind`.
        status_code: the HTTP status, when there was one.
        usage: tokens the failed call had reported (they count in ``RunResult.usage``).
    """

    model: str
    error: str
    kind: str = _UNKNOWN
    status_code: int | None = None
    usage: Usage | None = None

    def __post_init__(self) -> None:
        # The default object itself for an equal kind (see ModelFailure.code).
        if self.kind == _UNKNOWN and self.kind.__class__ is str:
            msgspec.structs.force_setattr(self, "kind", _UNKNOWN)


# --------------------------------------------------------------------------- effects


class ModelRequest(msgspec.Struct, frozen=True, omit_defaults=True):
    """Ask the model for the next assistant message.

    Reply with zero or more :class:`ModelChunk`, then one :class:`ModelResponse` (or
    one :class:`ModelFailure`). After each chunk the same request is yielded again.

    ``messages`` is a read-only view of the run's transcript as it was when the
    request was made (O(1) to create; no copy). ``tools`` are the run's tool specs.
    ``output`` is the run's structured output (its JSON Schema), for a model that
    can ask its provider for that response format; ``None`` without ``output=``.
    ``purpose`` is ``"step"`` for the step's request and ``"compaction"`` for a
    summary the run's compaction policy asks for (DESIGN §27; its id is
    ``compaction-NNN``): answer it like any other request, with text.
    ``model`` is the model name the current agent asks for (a :class:`Handoff`'s
    ``model``, DESIGN §26); ``None``: whatever model the caller runs.
    """

    id: str
    step: int
    messages: Sequence[Message]
    tools: tuple[ToolSpec, ...]
    system: str | None = None
    output: OutputSpec | None = None
    purpose: str = "step"
    model: str | None = None


class ToolRequest(msgspec.Struct, frozen=True):
    """Run one tool call and reply with a :class:`ToolResult` for ``call.id``."""

    call: ToolCall
    step: int


class ToolBatch(msgspec.Struct, frozen=True):
    """Run these tool calls, concurrently if you like (``parallel_tools=True``).

    Reply with one :class:`ToolResult` per request, **in any order** (e.g. as the
    calls complete); after each one the same batch is yielded again, until the
    last. Each result is recorded as it arrives; the results enter the transcript
    in the order of ``requests`` (the order the model gave the calls).
    """

    requests: tuple[ToolRequest, ...]
    step: int


class Pause(msgspec.Struct, frozen=True):
    """The loop needs a decision: reply with :class:`Resume` (or :class:`Cancel`).

    ``reason`` is ``"budget_exceeded:<turns|tool_calls|wall_clock>"``, ``"approval"``
    (a tool that requires approval) or whatever a hook's ``PauseRequest`` said.
    ``path`` is empty for the run's own pauses; a pause of a child session (an agent
    tool, DESIGN §26) reaches its parent's ``on_pause`` with the session ids of the
    children it came through, outermost first.
    """

    reason: str
    payload: Any = None
    path: tuple[str, ...] = ()


Effect: TypeAlias = ModelRequest | ToolRequest | ToolBatch | Pause


# --------------------------------------------------------------------------- replies


class ModelChunk(
    msgspec.Struct, frozen=True, omit_defaults=True, tag_field="kind", tag="model_chunk"
):
    """One streamed piece of the model's answer: a text delta or a complete block."""

    request_id: str
    block: Block
    at: float | None = None


class ModelResponse(
    msgspec.Struct, frozen=True, omit_defaults=True, tag_field="kind", tag="model_response"
):
    """The model's final answer for a request.

    ``stop_reason`` is one of ``stop``, ``tool_call``, ``length``, ``error``,
    ``refusal``. ``stop_message`` keeps the provider's own words about why it
    stopped, when it said any (a refusal's explanation, a content filter,
    ``pause_turn``); the run's error message repeats them.
    """

    request_id: str
    id: str
    content: tuple[Block, ...]
    stop_reason: str
    usage: Usage | None = None
    at: float | None = None
    stop_message: str | None = None
    attempts: tuple[ModelAttempt, ...] = ()


class ModelFailure(
    msgspec.Struct, frozen=True, omit_defaults=True, tag_field="kind", tag="model_failure"
):
    """The model call failed; the run ends ``failed`` with ``code``.

    ``code`` is ``MODEL_ERROR`` (provider/transport error) or ``MODEL_PROTOCOL_ERROR``
    (the adapter received output it could not parse). ``usage`` is what the
    provider had reported (and billed) before the call failed, if anything;
    ``attempts`` the models that failed before this one (see :class:`ModelAttempt`).
    """

    request_id: str
    message: str
    code: str = _MODEL_ERROR
    at: float | None = None
    usage: Usage | None = None
    attempts: tuple[ModelAttempt, ...] = ()

    def __post_init__(self) -> None:
        # The default object itself for an equal code: a log leaves defaults out and
        # msgspec knows a default by identity (see agentloop/_events.py).
        if self.code == _MODEL_ERROR and self.code.__class__ is str:
            msgspec.structs.force_setattr(self, "code", _MODEL_ERROR)


class ChildRun(msgspec.Struct, frozen=True, omit_defaults=True, kw_only=True):
    """A finished child session, as its parent's ``ToolResult.child`` records it.

    Attributes:
        session: the child's session id (``"<parent session>/<call id>"``).
        status: how the child ended (a ``RunResult.status``).
        usage: the tokens the child and its own children used (``None``: none).
        tool_calls: the tool calls the child and its own children made.
    """

    session: str
    status: str
    usage: Usage | None = None
    tool_calls: int = 0


class ToolResult(
    msgspec.Struct, frozen=True, omit_defaults=True, tag_field="kind", tag="tool_result"
):
    """The outcome of a tool call; ``is_error`` marks a recoverable error.

    ``child`` is set when the call ran a child session (an agent tool, DESIGN §26):
    the loop adds its usage and tool calls to the run's.

    ``content`` is a ``str`` (text, or a tool's JSON), or a tuple of parts
    (:class:`TextBlock`, :class:`ImageBlock`, :class:`AudioBlock`,
    :class:`DocumentBlock`) when the tool returned blocks.
    """

    call_id: str
    content: Content
    is_error: bool = False
    at: float | None = None
    child: ChildRun | None = None


class Resume(msgspec.Struct, frozen=True, omit_defaults=True, tag_field="kind", tag="resume"):
    """Answer to a :class:`Pause`.

    ``payload`` (plain JSON) carries the decision, e.g. ``{"approved": True}``;
    ``budget`` replaces the run's budget (the counters reset either way).
    """

    payload: Any = None
    budget: Budget | None = None
    at: float | None = None


class Cancel(msgspec.Struct, frozen=True, omit_defaults=True, tag_field="kind", tag="cancel"):
    """Stop the run now; it ends ``cancelled`` keeping only complete messages."""

    reason: str = ""
    at: float | None = None


class Steer(msgspec.Struct, frozen=True, omit_defaults=True, tag_field="kind", tag="steer"):
    """Redirect the run: deliver ``message`` at the next boundary (DESIGN §19).

    May be sent at any yield. The loop records it (``message.queued``) and yields
    the same effect again. After the tool call now running, the remaining calls
    of the current assistant message get the error result ``skipped: steered``;
    then ``message`` is appended and the next model request goes out (a run that
    would complete takes another step instead, counted by ``max_steps``).
    """

    message: UserMessage
    at: float | None = None


class FollowUp(msgspec.Struct, frozen=True, omit_defaults=True, tag_field="kind", tag="follow_up"):
    """Ask one more thing once the run would complete (DESIGN §19).

    May be sent at any yield. The loop records it (``message.queued``) and yields
    the same effect again. When the model next gives its final answer, instead of
    completing, the loop appends ``message`` and takes another step (counted by
    ``max_steps``).
    """

    message: UserMessage
    at: float | None = None


class UnrecognizedReply(
    msgspec.Struct, frozen=True, omit_defaults=True, tag_field="kind", tag="unrecognized"
):
    """Stands in, in the log, for something sent that was not a well-formed reply.

    The loop never expects you to send one. When ``send()`` receives an object that
    is not a reply, or a reply whose fields have the wrong types, the loop records
    this description in the failed ``run.finished`` event instead of the object
    (which might not be encodable), so the log still replays.
    """

    description: str
    at: float | None = None


Reply: TypeAlias = (
    ModelChunk
    | ModelResponse
    | ModelFailure
    | ToolResult
    | Resume
    | Cancel
    | Steer
    | FollowUp
    | UnrecognizedReply
)


# --------------------------------------------------------------------------- result


class RunError(msgspec.Struct, frozen=True, omit_defaults=True):
    """Why a run failed: one of the error codes and a message saying what and where."""

    code: str
    message: str


class RunResult(msgspec.Struct, frozen=True, kw_only=True):
    """How a run ended.

    Attributes:
        status: ``completed``, ``cancelled``, ``max_steps`` or ``failed``.
        final_text: the text of the final assistant message when ``completed``.
        messages: the transcript, complete messages only.
        steps: model requests made.
        max_steps: the run's ceiling.
        error: set when ``failed``.
        usage: token usage summed over the responses that reported it.
        reason: why it ended: ``goal_met``, ``length``, ``no_more_steps``,
            ``skipped_by_hook``, the cancel's reason, or the error code.
        output: with ``agent_loop(..., output=T)``, the final answer decoded to
            ``T`` when ``completed`` (a replay without ``T`` gives its JSON form).
    """

    status: str
    final_text: str | None
    messages: tuple[Message, ...]
    steps: int
    max_steps: int
    error: RunError | None = None
    usage: Usage = Usage()
    reason: str = ""
    output: Any = None

    @property
    def last_assistant(self) -> AssistantMessage | None:
        """The last assistant message of the transcript, if any."""
        for message in reversed(self.messages):
            if type(message) is AssistantMessage:
                return message
        return None
