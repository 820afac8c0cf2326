"""OpenTelemetry spans for agentloop runs, following the GenAI semantic conventions.

Install with ``pip install 'agentloop-replay[otel]'``. ``import agentloop`` never imports
OpenTelemetry; only this module does.

Two ways in, one translation:

- **Live**: a :class:`SpanRecorder` is a plain event subscriber. Attach it to the
  run's :class:`~agentloop.EventLog` (``instrument(log)`` does
  ``log.subscribe(SpanRecorder(...))``) or pass it wherever a driver takes a
  per-event callback. It works with any driver because it only reads events.
- **Offline**: :func:`record_log` feeds a recorded log through the same recorder,
  into any tracer provider; :func:`otlp_json` writes the spans of a log as OTLP/JSON
  (what ``python -m replay otel LOG`` prints), with trace and span ids derived from
  the log, so the same log always gives the same file.

Conventions
-----------
The names follow the OpenTelemetry GenAI semantic conventions as released in
``semantic-conventions-genai`` v0.1.0 (the same names as semantic-conventions
1.37-1.41, where ``gen_ai.provider.name`` replaced ``gen_ai.system``). One run is one
trace::

    invoke_agent {agent}          INTERNAL  the run, session.start .. run.finished
    ├── chat {model}              CLIENT    one per model request (step)
    ├── execute_tool {tool}       INTERNAL  one per tool call
    ├── chat {model}
    └── ...

Span times are the events' ``at`` (the replies' times; the engine reads no
clock). Errors follow the conventions' "recording errors" rule: status ``ERROR``
and ``error.type`` = the agentloop error code (``MODEL_ERROR``,
``MODEL_PROTOCOL_ERROR``, ``HOOK_ERROR``, ...) for failed runs and model calls,
``tool_error`` for an error result from a tool and ``loop_error`` for one the loop
made itself (unknown tool, hook abort or skip, denied approval, truncated call).
Pauses, resumes, budget warnings, compactions, handoffs and cancellation are span
events (``agentloop.session.pause``, ``agentloop.session.resume``,
``agentloop.budget.warn``, ``agentloop.context.compacted``,
``agentloop.agent.handoff``, ``agentloop.cancel``); in a session with handoffs
each ``chat`` span's ``gen_ai.agent.name`` is the agent that asked;
a summary a compaction policy asked for is its own ``chat`` span with
``agentloop.request.purpose`` = ``compaction``; agentloop's own attributes are
under ``agentloop.*``.

Metrics: ``gen_ai.client.token.usage`` (histogram, ``{token}``, one measurement per
``gen_ai.token.type``, ``input`` and ``output``) and ``gen_ai.client.operation.duration``
(histogram, seconds, with ``error.type`` for a failed call), one measurement per model
call, into the ``meter_provider`` (the global one by default); the duration only when
the log has times.

Message content (``gen_ai.input.messages``, ``gen_ai.output.messages``,
``gen_ai.system_instructions``, ``gen_ai.tool.definitions``,
``gen_ai.tool.call.arguments``, ``gen_ai.tool.call.result``, pause and resume
payloads, tool error texts) is recorded only with ``capture_content=True``: the
conventions make these attributes opt-in because they hold user data. A ``chat``
span's input is what that request sent: with a compaction policy (DESIGN §27), the
model's view, rebuilt from ``context.compacted`` (a custom policy's summary
instructions and trim sizes are not in the log: left out, and results shown whole). Structured
values are recorded as JSON strings (the form the conventions allow where
structured attributes are not supported, and the one GenAI backends read today).

Media (images, audio, documents: DESIGN §25) never put their bytes on a span. A
block given by URL is the conventions' ``uri`` part (``{"type": "uri", "modality",
"mime_type", "uri"}``); a block of inline bytes is their ``file`` part, a file
referred to by id, the id being the bytes' SHA-256 as the log stores them (format
3): ``{"type": "file", "modality", "mime_type", "file_id": "sha256:<hex>",
"size": <bytes>}`` (plus ``name`` when the block has one). The conventions' ``blob``
part would carry the bytes themselves, base64, on every span that shows the
message: megabytes per attribute, and a copy of user data in the trace backend that
the log already holds once. ``modality`` is ``image``, ``audio`` or ``document``
(the conventions take any string beside their ``image``/``video``/``audio``).
A ``data:`` URL is bytes too: it is a ``file`` part by the SHA-256 of the URL's text.
"""

from __future__ import annotations

import base64
import hashlib
import logging
import math
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Final

import msgspec

from ._codec import encode_event
from ._context import SummarizeOlder, TrimToolResults, policy_from_spec, trimmed
from ._deep import encode as encode_deep
from ._events import (
    BudgetWarnEvent,
    ContextCompactedEvent,
    Event,
    EventLog,
    HandoffEvent,
    MessageAcceptedEvent,
    ModelChunkEvent,
    PlanCommitEvent,
    PlanDraftEvent,
    RunFinishedEvent,
    SessionPauseEvent,
    SessionResumeEvent,
    SessionStartEvent,
    StepStartEvent,
    ToolCallEvent,
    ToolErrorEvent,
    ToolResultEvent,
)
from ._messages import (
    AssistantMessage,
    AudioBlock,
    Block,
    Content,
    DocumentBlock,
    ImageBlock,
    MediaBlock,
    Message,
    ProviderBlock,
    TextBlock,
    ThinkingBlock,
    ToolCall,
    ToolResultMessage,
    UserMessage,
    content_text,
)
from ._protocol import ModelFailure, Usage
from ._tree import ParentLink, child_session_id
from ._version import __version__

try:
    from opentelemetry import metrics, trace
    from opentelemetry.context import Context
    from opentelemetry.metrics import MeterProvider
    from opentelemetry.trace import Span, SpanKind, Status, StatusCode, TracerProvider
except ImportError as _exc:  # tested in a subprocess that hides the SDK
    raise ImportError(
        "agentloop.otel needs OpenTelemetry: pip install 'agentloop-replay[otel]'"
    ) from _exc

__all__ = [
    "GENAI_CONVENTIONS",
    "UNKNOWN_PROVIDER",
    "SpanRecorder",
    "instrument",
    "otlp_json",
    "record_log",
    "send_otlp",
]

#: The version of the GenAI semantic conventions the span names and attributes follow.
GENAI_CONVENTIONS: Final = "semantic-conventions-genai v0.1.0"

#: ``gen_ai.provider.name`` when neither ``provider_name`` nor the model says
#: (the attribute is required; a log does not record which provider answered).
UNKNOWN_PROVIDER: Final = "unknown"

_logger = logging.getLogger("agentloop.otel")

# Attribute names (GenAI semantic conventions).
_OPERATION: Final = "gen_ai.operation.name"
_PROVIDER: Final = "gen_ai.provider.name"
_AGENT_NAME: Final = "gen_ai.agent.name"
_CONVERSATION: Final = "gen_ai.conversation.id"
_REQUEST_MODEL: Final = "gen_ai.request.model"
_RESPONSE_ID: Final = "gen_ai.response.id"
_FINISH_REASONS: Final = "gen_ai.response.finish_reasons"
_FIRST_CHUNK: Final = "gen_ai.response.time_to_first_chunk"
_INPUT_TOKENS: Final = "gen_ai.usage.input_tokens"
_OUTPUT_TOKENS: Final = "gen_ai.usage.output_tokens"
# The parts of them (included in the totals above), set when not 0.
_USAGE_PARTS: Final = (
    ("gen_ai.usage.cache_read.input_tokens", "cache_read_tokens"),
    ("gen_ai.usage.cache_creation.input_tokens", "cache_write_tokens"),
    ("gen_ai.usage.reasoning.output_tokens", "reasoning_tokens"),
)
_TOOL_NAME: Final = "gen_ai.tool.name"
_TOOL_CALL_ID: Final = "gen_ai.tool.call.id"
_TOOL_DESCRIPTION: Final = "gen_ai.tool.description"
_TOOL_TYPE: Final = "gen_ai.tool.type"
# Every agentloop tool runs in the application that drives the loop (an MCP tool too:
# the application calls the server), which the conventions call a ``function`` tool.
_FUNCTION: Final = "function"
_ERROR_TYPE: Final = "error.type"
# Opt-in (content) attributes.
_INPUT_MESSAGES: Final = "gen_ai.input.messages"
_OUTPUT_MESSAGES: Final = "gen_ai.output.messages"
_SYSTEM_INSTRUCTIONS: Final = "gen_ai.system_instructions"
_TOOL_DEFINITIONS: Final = "gen_ai.tool.definitions"
_TOOL_ARGUMENTS: Final = "gen_ai.tool.call.arguments"
_TOOL_RESULT: Final = "gen_ai.tool.call.result"

# Metrics (GenAI semantic conventions), with their advised bucket boundaries.
_TOKEN_USAGE: Final = "gen_ai.client.token.usage"
_DURATION: Final = "gen_ai.client.operation.duration"
_TOKEN_TYPE: Final = "gen_ai.token.type"
_TOKEN_BUCKETS: Final = tuple(float(4**n) for n in range(14))  # 1, 4, 16, ... 4**13
_DURATION_BUCKETS: Final = tuple(0.01 * 2**n for n in range(14))  # 0.01 s .. 81.92 s

_NANOS: Final = 1_000_000_000
_encode = msgspec.json.Encoder().encode


def _json(value: Any) -> str:
    # msgspec writes NaN/inf as null and any int exactly; event values are valid Unicode.
    try:
        return _encode(value).decode()
    except RecursionError:  # e.g. a provider's opaque data nested a thousand levels
        return encode_deep(value).decode()  # the same bytes, without recursion


class _Open:
    """A span this recorder started and has not ended yet, with its start time."""

    __slots__ = ("span", "start", "timed")

    def __init__(self, span: Span, start: int | None) -> None:
        self.span = span
        self.start = start
        self.timed = False  # ``start`` is a time from the log (not a stand-in)


class SpanRecorder:
    """Turns agentloop events into OpenTelemetry spans, one event at a time.

    A plain subscriber: call it with each event of a run, in order
    (``log.subscribe(recorder)``, or a driver's per-event callback). It keeps only
    what it needs to end the spans it started (and, with ``capture_content``, the
    transcript), and it never raises into the run: an unexpected error is logged to
    the ``agentloop.otel`` logger and the event is skipped.

    A recorder can follow one run after another; a ``session.start`` while a run is
    still open ends that run's spans first (as :meth:`finish` does). Spans of a run
    whose log ends without ``run.finished`` (a parked pause, a crash) stay open until
    :meth:`finish`.

    Args:
        tracer_provider: where spans go; default: the global tracer provider.
        model: the model the run uses; its ``provider`` and ``model`` attributes
            (the agentloop adapters have both) fill ``provider_name`` and
            ``request_model`` when those are not given.
        provider_name: ``gen_ai.provider.name`` (e.g. ``openai``, ``anthropic``);
            ``"unknown"`` when neither this nor ``model`` says.
        request_model: ``gen_ai.request.model``; the chat spans are named
            ``chat {request_model}`` (``chat`` without it).
        agent_name: ``gen_ai.agent.name``; the root span is ``invoke_agent {agent_name}``.
        conversation_id: ``gen_ai.conversation.id`` (e.g. a durable session's id).
        capture_content: record message content (opt-in, see the module docs).
        meter_provider: where the GenAI client metrics go
            (``gen_ai.client.token.usage`` and ``gen_ai.client.operation.duration``,
            one measurement per model call); default: the global meter provider.
    """

    def __init__(
        self,
        *,
        tracer_provider: TracerProvider | None = None,
        meter_provider: MeterProvider | None = None,
        model: object | None = None,
        provider_name: str | None = None,
        request_model: str | None = None,
        agent_name: str | None = None,
        conversation_id: str | None = None,
        capture_content: bool = False,
    ) -> None:
        if provider_name is None:
            provider_name = _str_attribute(model, "provider") or UNKNOWN_PROVIDER
        if request_model is None:
            request_model = _str_attribute(model, "model")
        for name, value in (
            ("provider_name", provider_name),
            ("request_model", request_model),
            ("agent_name", agent_name),
            ("conversation_id", conversation_id),
        ):
            if value is not None and (type(value) is not str or not value):
                raise TypeError(f"{name} must be a non-empty str or None, got {value!r}")
        if type(capture_content) is not bool:
            raise TypeError(f"capture_content must be a bool, got {capture_content!r}")
        self._providers = (tracer_provider, meter_provider)
        self._tracer = trace.get_tracer("agentloop", __version__, tracer_provider=tracer_provider)
        meter = metrics.get_meter("agentloop", __version__, meter_provider=meter_provider)
        self._token_usage = meter.create_histogram(
            _TOKEN_USAGE,
            unit="{token}",
            description="Number of input and output tokens used",
            explicit_bucket_boundaries_advisory=_TOKEN_BUCKETS,
        )
        self._duration = meter.create_histogram(
            _DURATION,
            unit="s",
            description="GenAI operation duration",
            explicit_bucket_boundaries_advisory=_DURATION_BUCKETS,
        )
        self.capture_content = capture_content
        self._common: dict[str, str] = {_PROVIDER: provider_name}
        if request_model is not None:
            self._common[_REQUEST_MODEL] = request_model
        # On every span (conditionally required "when available").
        self._conversation: dict[str, str] = {}
        if conversation_id is not None:
            self._conversation[_CONVERSATION] = conversation_id
        self._agent_name = agent_name
        self._chat_name = "chat" if request_model is None else f"chat {request_model}"
        # Set by record_log for offline export: a root that ignores the ambient
        # context, and the time used before any event has one.
        self._root_context: Context | None = None
        self._fallback_time: Callable[[Event], int | None] = _no_time
        self._handlers: dict[type[Any], Callable[[Any, int | None], None]] = {
            SessionStartEvent: self._session_start,
            MessageAcceptedEvent: self._message_accepted,
            StepStartEvent: self._step_start,
            ModelChunkEvent: self._model_chunk,
            PlanDraftEvent: self._plan_draft,
            PlanCommitEvent: self._plan_commit,
            ToolCallEvent: self._tool_call,
            ToolResultEvent: self._tool_end,
            ToolErrorEvent: self._tool_end,
            BudgetWarnEvent: self._budget_warn,
            ContextCompactedEvent: self._context_compacted,
            HandoffEvent: self._handoff,
            SessionPauseEvent: self._session_pause,
            SessionResumeEvent: self._session_resume,
            RunFinishedEvent: self._run_finished,
        }
        self._reset()

    def _reset(self) -> None:
        self._root: _Open | None = None
        self._chat: _Open | None = None
        self._step_event: StepStartEvent | None = None
        self._chat_chunked = False
        self._tools: dict[str, _Open] = {}
        self._kids: dict[str, SpanRecorder] = {}  # a child session's recorder, by call
        self._descriptions: dict[str, str] = {}
        self._system: str | None = None
        self._agent: str | None = None  # the current agent, in a session with handoffs
        self._systems: dict[str, str | None] = {}  # each agent's system prompt
        self._transcript: list[str] = []  # JSON of each message (capture_content only)
        self._messages: list[Message] = []  # and the messages themselves
        # The model's view (DESIGN §27): the summary in front of the transcript
        # from _view_start on, tool results before _trim[0] trimmed to _trim[1:].
        self._view_start = 0
        self._summary: UserMessage | None = None
        self._trim: tuple[int, int, int] | None = None
        self._trimmed: dict[int, str] = {}  # JSON of each trimmed result shown
        self._instructions: str | None = None  # a built-in policy's (the spec says)
        self._trim_sizes: tuple[int, int] | None = None
        self._input_recorded = False
        self._output: str | None = None  # JSON of the last committed output message
        self._stop_reason = "stop"
        self._last_time: int | None = None

    # ----------------------------------------------------------------- subscriber

    def __call__(self, event: Event) -> None:
        """Record one event (the subscriber entry point)."""
        try:
            handler = self._handlers.get(type(event))
            starts = type(event) is SessionStartEvent
            if starts and self._root is not None:
                self.finish()  # the previous run never finished
            at = self._time(event)
            if self._root is None and not starts:
                # Attached mid-run, or a log with only run.finished (an invalid
                # transcript): the run's span starts at the first event seen.
                self._start_root(at, None)
            if handler is not None:
                handler(event, at)
        except Exception:
            _logger.exception("agentloop.otel: cannot record %s", type(event).__name__)

    def child_watcher(self, link: ParentLink, tool: Any) -> SpanRecorder | None:
        """A recorder of the child session ``link`` places (DESIGN §26), asked by
        an agent tool when its child starts: its ``invoke_agent`` span (named for
        the agent tool, with its model's provider and model) and all its spans go
        under this run's ``execute_tool`` span of the call, in the same trace, and
        its own children under its calls. ``None`` when that call's span is not
        open here."""
        opened = self._tools.get(link.call_id)
        if opened is None:
            return None
        conversation = self._conversation.get(_CONVERSATION)
        child = SpanRecorder(
            tracer_provider=self._providers[0],
            meter_provider=self._providers[1],
            model=getattr(tool, "model", None),
            agent_name=getattr(tool, "name", None) or None,
            conversation_id=None if conversation is None else child_session_id(link),
            capture_content=self.capture_content,
        )
        child._root_context = trace.set_span_in_context(opened.span)
        self._kids[link.call_id] = child
        return child

    def finish(self) -> None:
        """End every span still open, marked ``agentloop.incomplete``.

        For a run whose log ends without ``run.finished`` (a parked pause, a crash):
        the spans end at the last event's time. Does nothing when no run is open.
        """
        root = self._root
        if root is None:
            return
        at = _later(self._last_time, self._finish_kids())
        for child in self._children():
            child.span.set_attribute("agentloop.incomplete", True)
            self._end(child, at)
        root.span.set_attribute("agentloop.incomplete", True)
        self._end(root, at)
        self._reset()

    # ----------------------------------------------------------------- time

    def _time(self, event: Event) -> int | None:
        """The event's time in ns since the epoch (``None``: let the SDK's clock say).

        An event without a usable ``at`` takes the last time seen in this run.
        """
        at = event.at
        if at is not None and math.isfinite(at) and at >= 0:
            self._last_time = round(at * _NANOS)
        elif self._last_time is None:
            return self._fallback_time(event)
        return self._last_time

    # ----------------------------------------------------------------- spans

    def _start(
        self, name: str, kind: SpanKind, attributes: dict[str, Any], at: int | None
    ) -> _Open:
        assert self._root is not None
        context = trace.set_span_in_context(self._root.span)
        span = self._tracer.start_span(
            name, context=context, kind=kind, attributes=attributes, start_time=at
        )
        return _Open(span, at)

    def _end(self, opened: _Open, at: int | None) -> None:
        if at is not None and opened.start is not None and at < opened.start:
            at = opened.start  # a clock that went back: never end before the start
        opened.span.end(end_time=at)

    def _children(self) -> list[_Open]:
        children = list(self._tools.values())
        if self._chat is not None:
            children.insert(0, self._chat)
        self._chat = None
        self._tools = {}
        return children

    def _start_root(self, at: int | None, event: SessionStartEvent | None) -> None:
        attributes: dict[str, Any] = {_OPERATION: "invoke_agent", **self._common}
        name = "invoke_agent"
        if self._agent_name is not None:
            attributes[_AGENT_NAME] = self._agent_name
            name = f"invoke_agent {self._agent_name}"
        attributes.update(self._conversation)
        if event is not None:
            attributes["agentloop.max_steps"] = event.max_steps
            if self.capture_content:
                if event.system is not None:
                    attributes[_SYSTEM_INSTRUCTIONS] = _system_json(event.system)
                attributes[_TOOL_DEFINITIONS] = _json(
                    [
                        {
                            "type": "function",
                            "name": spec.name,
                            "description": spec.description,
                            "parameters": spec.parameters,
                        }
                        for spec in event.tools
                    ]
                )
        span = self._tracer.start_span(
            name,
            context=self._root_context,
            kind=SpanKind.INTERNAL,
            attributes=attributes,
            start_time=at,
        )
        self._root = _Open(span, at)

    # ----------------------------------------------------------------- handlers

    def _session_start(self, event: SessionStartEvent, at: int | None) -> None:
        self._start_root(at, event)
        self._descriptions = {spec.name: spec.description for spec in event.tools}
        self._system = event.system
        if event.handoffs:  # DESIGN §26: every agent's tools, and its prompt
            self._agent = event.agent
            self._systems = {spec.name: spec.system for spec in event.handoffs}
            self._systems[event.agent or ""] = event.system
            for handoff in event.handoffs:
                for spec in handoff.tools:
                    self._descriptions.setdefault(spec.name, spec.description)
        if self.capture_content and event.compaction is not None:
            self._policy(event.compaction)

    def _policy(self, spec: dict[str, Any]) -> None:
        """What a built-in policy adds to the view: its summary instructions, its trim
        sizes (a custom policy's are not recorded: its spans show what is known)."""
        try:
            policy = policy_from_spec(spec)
        except ValueError:
            return
        if type(policy) is SummarizeOlder:
            self._instructions = policy.instructions
        elif type(policy) is TrimToolResults:  # pragma: no branch - the two built-ins
            self._trim_sizes = (policy.head, policy.tail)

    def _message_accepted(self, event: MessageAcceptedEvent, at: int | None) -> None:
        self._remember(event.message)

    def _remember(self, message: Message) -> None:
        if self.capture_content:
            self._transcript.append(_json(_message(message)))
            self._messages.append(message)

    def _messages_json(self) -> str:
        """The messages the next request sends: the model's view."""
        if self._summary is None and self._trim is None:
            return "[" + ",".join(self._transcript) + "]"
        return "[" + ",".join(self._view(len(self._transcript))) + "]"

    def _view(self, end: int) -> list[str]:
        """The JSON of the view's messages before transcript index ``end``."""
        parts = [] if self._summary is None else [_json(_message(self._summary))]
        trim, messages, shown = self._trim, self._messages, self._transcript
        for index in range(self._view_start, min(end, len(shown))):
            message = messages[index]
            if trim is not None and index < trim[0] and type(message) is ToolResultMessage:
                text = self._trimmed.get(index)
                if text is None:
                    short = trimmed(message, trim[1], trim[2])
                    text = self._trimmed[index] = _json(_message(short))
                parts.append(text)
            else:
                parts.append(shown[index])
        return parts

    def _step_start(self, event: StepStartEvent, at: int | None) -> None:
        assert self._root is not None
        attributes: dict[str, Any] = {
            _OPERATION: "chat",
            **self._common,
            **self._conversation,
            "agentloop.request.id": event.request_id,
            "agentloop.step": event.step,
        }
        if self._agent is not None:  # which agent asks (a session with handoffs)
            attributes[_AGENT_NAME] = self._agent
        if self.capture_content:
            attributes[_INPUT_MESSAGES] = self._messages_json()
            if self._system is not None:
                attributes[_SYSTEM_INSTRUCTIONS] = _system_json(self._system)
            if not self._input_recorded:
                self._root.span.set_attribute(_INPUT_MESSAGES, attributes[_INPUT_MESSAGES])
                self._input_recorded = True
        self._step_event = event
        if self._chat is not None:  # a request that never got an answer
            self._end(self._chat, at)
        self._chat = self._start(self._chat_name, SpanKind.CLIENT, attributes, at)
        self._chat.timed = self._last_time is not None
        self._chat_chunked = False

    def _model_chunk(self, event: ModelChunkEvent, at: int | None) -> None:
        chat = self._chat
        if chat is None or self._chat_chunked:
            return
        self._chat_chunked = True
        if at is not None and chat.start is not None:
            chat.span.set_attribute(_FIRST_CHUNK, max(at - chat.start, 0) / _NANOS)

    def _plan_draft(self, event: PlanDraftEvent, at: int | None) -> None:
        chat = self._chat
        if chat is None:
            return
        reply = event.reply
        if isinstance(reply, ModelFailure):
            if reply.usage is not None:  # what the provider reported before it failed
                _set_usage(chat.span, reply.usage)
                self._record_tokens(reply.usage)
            _set_error(chat.span, reply.code, reply.message)
            self._record_duration(chat, at, reply.code)
            self._chat = None
            self._end(chat, at)
            return
        span = chat.span
        span.set_attribute(_RESPONSE_ID, reply.id)
        span.set_attribute(_FINISH_REASONS, (reply.stop_reason,))
        self._stop_reason = reply.stop_reason
        if reply.usage is not None:
            _set_usage(span, reply.usage)
            self._record_tokens(reply.usage)
        if self.capture_content:
            output = {
                "role": "assistant",
                "parts": [_part(block) for block in reply.content],
                "finish_reason": reply.stop_reason,
            }
            span.set_attribute(_OUTPUT_MESSAGES, _json([output]))

    def _plan_commit(self, event: PlanCommitEvent, at: int | None) -> None:
        self._remember(event.message)
        if self.capture_content:
            message = _message(event.message)
            message["finish_reason"] = self._stop_reason
            self._output = _json([message])
        chat = self._chat
        if chat is not None:
            self._record_duration(chat, at, None)
            self._chat = None
            self._end(chat, at)

    # ----------------------------------------------------------------- metrics

    def _metric_attributes(self) -> dict[str, str]:
        return {_OPERATION: "chat", **self._common}

    def _record_tokens(self, usage: Usage) -> None:
        """``gen_ai.client.token.usage``: the call's input and output tokens."""
        attributes = self._metric_attributes()
        for kind, count in (("input", usage.input_tokens), ("output", usage.output_tokens)):
            self._token_usage.record(count, {**attributes, _TOKEN_TYPE: kind})

    def _record_duration(self, chat: _Open, at: int | None, error: str | None) -> None:
        """``gen_ai.client.operation.duration``: the call's time, when the log has it
        (the span's start to the reply that ended it)."""
        if at is None or chat.start is None or not chat.timed:
            return  # no times in the log: no duration is made up
        attributes = self._metric_attributes()
        if error is not None:
            attributes[_ERROR_TYPE] = error
        self._duration.record(max(at - chat.start, 0) / _NANOS, attributes)

    def _tool_call(self, event: ToolCallEvent, at: int | None) -> None:
        call = event.call
        attributes: dict[str, Any] = {
            _OPERATION: "execute_tool",
            _TOOL_NAME: call.name,
            _TOOL_CALL_ID: call.id,
            _TOOL_TYPE: _FUNCTION,
            **self._conversation,
            "agentloop.step": event.step,
        }
        description = self._descriptions.get(call.name)
        if description:
            attributes[_TOOL_DESCRIPTION] = description
        if self.capture_content:
            attributes[_TOOL_ARGUMENTS] = _json(call.arguments)
        previous = self._tools.pop(call.id, None)
        if previous is not None:  # pragma: no cover - call ids are unique in a run
            self._end(previous, at)
        self._tools[call.id] = self._start(
            f"execute_tool {call.name}", SpanKind.INTERNAL, attributes, at
        )

    def _tool_end(self, event: ToolResultEvent | ToolErrorEvent, at: int | None) -> None:
        message = event.message
        self._remember(message)
        kid = self._kids.pop(message.tool_call_id, None)
        if kid is not None:
            kid.finish()  # a child that never finished (it crashed): its spans end first
        tool = self._tools.pop(message.tool_call_id, None)
        if tool is None:  # its tool.call came before this recorder was attached
            tool = self._start(
                f"execute_tool {message.tool_name}",
                SpanKind.INTERNAL,
                {
                    _OPERATION: "execute_tool",
                    _TOOL_NAME: message.tool_name,
                    _TOOL_CALL_ID: message.tool_call_id,
                    _TOOL_TYPE: _FUNCTION,
                    **self._conversation,
                },
                at,
            )
        span = tool.span
        if event.reply is None:
            span.set_attribute("agentloop.tool.loop_made", True)
        if type(event) is ToolErrorEvent:
            error_type = "tool_error" if event.reply is not None else "loop_error"
            _set_error(
                span, error_type, content_text(message.content) if self.capture_content else None
            )
        elif self.capture_content:
            span.set_attribute(_TOOL_RESULT, content_text(message.content))
        self._end(tool, at)

    def _context_compacted(self, event: ContextCompactedEvent, at: int | None) -> None:
        """A span event on the root; a summary's chat span (opened at step.start,
        answered by the compaction's plan.draft) is marked and closed, and the
        step's own chat span opens."""
        assert self._root is not None
        self._root.span.add_event(
            "agentloop.context.compacted",
            {
                "agentloop.context.how": event.how,
                "agentloop.context.start": event.start,
                "agentloop.context.trimmed_before": event.trimmed_before,
                "agentloop.context.tokens_before": event.tokens_before,
                "agentloop.context.tokens_after": event.tokens_after,
            },
            timestamp=at,
        )
        chat, step = self._chat, self._step_event
        if self.capture_content:
            self._compacted(event, chat)
        if event.how != "summarize" or chat is None or step is None:
            return
        chat.span.set_attribute("agentloop.request.purpose", "compaction")
        chat.span.set_attribute(
            "agentloop.request.id", step.request_id.replace("request-", "compaction-", 1)
        )
        self._record_duration(chat, at, None)
        self._chat = None
        self._end(chat, at)
        self._step_start(step, at)

    def _handoff(self, event: HandoffEvent, at: int | None) -> None:
        """A span event on the root; the next chat spans name the new agent."""
        assert self._root is not None
        attributes: dict[str, Any] = {
            "agentloop.handoff.from": event.from_agent,
            "agentloop.handoff.to": event.to_agent,
            "agentloop.handoff.call_id": event.call_id,
        }
        if event.kept is not None:
            attributes["agentloop.handoff.kept"] = len(event.kept)
        self._root.span.add_event("agentloop.agent.handoff", attributes, timestamp=at)
        self._agent = event.to_agent
        self._system = self._systems.get(event.to_agent)

    def _compacted(self, event: ContextCompactedEvent, chat: _Open | None) -> None:
        """The view after ``event``; the open chat span's input brought up to date: a
        summary's is the view before the cut and the policy's instructions (when a
        built-in policy's spec says them), a trimmed request's the trimmed view."""
        if event.how == "summarize":
            if chat is not None:
                older = self._view(event.start)
                if self._instructions is not None:
                    instructions = UserMessage("compaction", self._instructions)
                    older.append(_json(_message(instructions)))
                chat.span.set_attribute(_INPUT_MESSAGES, "[" + ",".join(older) + "]")
            self._view_start, self._summary = event.start, event.summary
        elif self._trim_sizes is not None:
            self._trim = (event.trimmed_before, *self._trim_sizes)
            self._trimmed = {}
            if chat is not None:
                chat.span.set_attribute(_INPUT_MESSAGES, self._messages_json())

    def _budget_warn(self, event: BudgetWarnEvent, at: int | None) -> None:
        assert self._root is not None
        self._root.span.add_event(
            "agentloop.budget.warn",
            {
                "agentloop.budget.limit": event.limit,
                "agentloop.budget.turns": event.usage.turns,
                "agentloop.budget.tool_calls": event.usage.tool_calls,
                "agentloop.budget.wall_seconds": event.usage.wall_seconds,
            },
            timestamp=at,
        )

    def _session_pause(self, event: SessionPauseEvent, at: int | None) -> None:
        assert self._root is not None
        attributes: dict[str, Any] = {"agentloop.pause.reason": event.reason}
        if self.capture_content and event.payload is not None:
            attributes["agentloop.pause.payload"] = _json(event.payload)
        self._root.span.add_event("agentloop.session.pause", attributes, timestamp=at)

    def _session_resume(self, event: SessionResumeEvent, at: int | None) -> None:
        assert self._root is not None
        attributes: dict[str, Any] = {}
        if event.reply.budget is not None:
            attributes["agentloop.resume.new_budget"] = True
        if self.capture_content and event.reply.payload is not None:
            attributes["agentloop.resume.payload"] = _json(event.reply.payload)
        self._root.span.add_event("agentloop.session.resume", attributes, timestamp=at)

    def _finish_kids(self) -> int | None:
        """End the spans of child sessions that did not finish (a child that parked,
        its parent ending or parked too), before this run's; the last time of
        theirs (this run's spans end no earlier: it waited for them)."""
        latest = None
        for kid in self._kids.values():
            latest = _later(latest, kid._last_time)
            kid.finish()
        return latest

    def _run_finished(self, event: RunFinishedEvent, at: int | None) -> None:
        root = self._root
        assert root is not None
        at = _later(at, self._finish_kids())
        error = event.error
        for child in self._children():
            if error is not None:
                _set_error(child.span, error.code, error.message)
            elif event.status == "cancelled":
                child.span.add_event(
                    "agentloop.cancel", {"agentloop.cancel.reason": event.reason}, timestamp=at
                )
            self._end(child, at)
        span = root.span
        span.set_attributes(
            {
                "agentloop.run.status": event.status,
                "agentloop.run.reason": event.reason,
                "agentloop.run.steps": event.steps,
            }
        )
        _set_usage(span, event.usage)
        if self.capture_content and event.status == "completed" and self._output is not None:
            span.set_attribute(_OUTPUT_MESSAGES, self._output)
        if self.capture_content and not self._input_recorded and self._transcript:
            span.set_attribute(_INPUT_MESSAGES, "[" + ",".join(self._transcript) + "]")
        if error is not None:
            _set_error(span, error.code, error.message)
        elif event.status == "cancelled":
            span.add_event(
                "agentloop.cancel", {"agentloop.cancel.reason": event.reason}, timestamp=at
            )
        self._end(root, at)
        self._reset()


# --------------------------------------------------------------------------- helpers


def _no_time(event: Event) -> None:
    return None


def _later(a: int | None, b: int | None) -> int | None:
    """The later of two times (either may be unknown)."""
    return b if a is None else a if b is None else max(a, b)


def _str_attribute(obj: object, name: str) -> str | None:
    value = getattr(obj, name, None)
    return value if type(value) is str and value else None


def _set_error(span: Span, error_type: str, description: str | None) -> None:
    span.set_attribute(_ERROR_TYPE, error_type)
    span.set_status(Status(StatusCode.ERROR, description))


def _set_usage(span: Span, usage: Usage) -> None:
    span.set_attribute(_INPUT_TOKENS, usage.input_tokens)
    span.set_attribute(_OUTPUT_TOKENS, usage.output_tokens)
    for name, field in _USAGE_PARTS:
        value = getattr(usage, field)
        if value:
            span.set_attribute(name, value)


def _system_json(system: str) -> str:
    return _json([{"type": "text", "content": system}])


def _part(block: Block) -> dict[str, Any]:
    """One message part in the conventions' JSON schema (``gen-ai-input-messages.json``)."""
    if isinstance(block, TextBlock):
        return {"type": "text", "content": block.text}
    if isinstance(block, ThinkingBlock):
        return {"type": "reasoning", "content": block.text}
    if isinstance(block, ToolCall):
        return {
            "type": "tool_call",
            "id": block.id,
            "name": block.name,
            "arguments": block.arguments,
        }
    if isinstance(block, ImageBlock):
        return _media_part(block)
    if isinstance(block, ProviderBlock):
        # Opaque provider state: a generic part with its fields, built here rather
        # than by msgspec.to_builtins, which recurses into deep data.
        return {
            "type": "provider",
            "provider": block.provider,
            "kind": block.kind,
            "data": block.data,
        }
    # A block type this module does not know (yet): a generic part with its fields.
    part: dict[str, Any] = msgspec.to_builtins(block)
    return part


#: The conventions' ``modality`` of each media block.
_MODALITY: Final = {ImageBlock: "image", AudioBlock: "audio", DocumentBlock: "document"}


def _media_part(block: MediaBlock) -> dict[str, Any]:
    """A media block as a ``uri`` or ``file`` part: never its bytes (module docs)."""
    part: dict[str, Any] = {"modality": _MODALITY[type(block)], "mime_type": block.media_type}
    url = block.url
    if block.data is None and url is not None and url[:5].lower() != "data:":
        part = {"type": "uri", **part, "uri": url}
    else:
        data = block.data if block.data is not None else (url or "").encode()
        digest = hashlib.sha256(data).hexdigest()
        part = {"type": "file", **part, "file_id": f"sha256:{digest}", "size": len(data)}
    if block.name is not None:
        part["name"] = block.name
    return part


def _content_parts(content: Content) -> list[dict[str, Any]]:
    """A user message's or tool result's content as message parts."""
    if isinstance(content, str):
        return [{"type": "text", "content": content}]
    return [_part(p) if isinstance(p, TextBlock) else _media_part(p) for p in content]


def _message(message: Message) -> dict[str, Any]:
    if isinstance(message, UserMessage):
        return {"role": "user", "parts": _content_parts(message.content)}
    if isinstance(message, AssistantMessage):
        return {"role": "assistant", "parts": [_part(block) for block in message.content]}
    content = message.content
    response = {
        "type": "tool_call_response",
        "id": message.tool_call_id,
        "response": content if isinstance(content, str) else _content_parts(content),
    }
    return {"role": "tool", "parts": [response]}


def instrument(log: EventLog, **options: Any) -> SpanRecorder:
    """Subscribe a :class:`SpanRecorder` to ``log``; returns the recorder.

    ``options`` are :class:`SpanRecorder`'s. Pass the same ``log`` to ``run(...)``::

        log = EventLog()
        instrument(log, tracer_provider=provider, model=model)
        run(messages, model=model, tools=tools, log=log)
    """
    if not isinstance(log, EventLog):
        raise TypeError(f"log must be an EventLog, got {log!r}")
    recorder = SpanRecorder(**options)
    log.subscribe(recorder)
    return recorder


#: ``record_log``'s ``children``: the events of the child session that call
#: ``call_id`` of the session ``events`` ran (an agent tool's, DESIGN §26), or ``None``.
Children = Callable[[Sequence[Event], str], "Sequence[Event] | None"]


def record_log(
    events: Iterable[Event],
    *,
    tracer_provider: TracerProvider | None = None,
    children: Children | None = None,
    **options: Any,
) -> None:
    """Record the spans of a finished (or unfinished) log into ``tracer_provider``
    (and its GenAI client metrics into ``meter_provider``, an option of
    :class:`SpanRecorder`).

    The same translation as live recording. The root span is a new trace (it does
    not join whatever span is current). Spans the log leaves open are ended at its
    last time and marked ``agentloop.incomplete``. Events without a usable ``at``
    take the last time seen; a log that starts without times takes its first
    ``at``, and a log with no ``at`` at all is placed at the Unix epoch, event
    ``#n`` at ``n`` milliseconds (order and nesting kept, no invented clock).

    ``children``: a session tree (DESIGN §26). Called as ``children(events,
    call_id)`` after each ``tool.call``, it returns the events of the child session
    the call ran (or ``None``); the child's ``invoke_agent`` span and its own spans
    are recorded under the call's ``execute_tool`` span, in the same trace, and its
    children under its calls, and so on.
    """
    _record(list(events), Context(), tracer_provider, children, options)


def _record(
    events: list[Event],
    context: Context,
    tracer_provider: TracerProvider | None,
    children: Children | None,
    options: dict[str, Any],
) -> None:
    """:func:`record_log` of one session of a tree, its root under ``context``."""
    first = next(
        (e.at for e in events if e.at is not None and math.isfinite(e.at) and e.at >= 0),
        None,
    )
    recorder = SpanRecorder(tracer_provider=tracer_provider, **options)
    recorder._root_context = context
    if first is not None:
        start = round(first * _NANOS)
        recorder._fallback_time = lambda event: start
    else:
        recorder._fallback_time = lambda event: event.sequence * 1_000_000
    for event in events:
        recorder(event)
        if children is not None and type(event) is ToolCallEvent:
            child = children(events, event.call.id)
            opened = recorder._tools.get(event.call.id)
            if child is not None and opened is not None:
                under = trace.set_span_in_context(opened.span)
                _record(list(child), under, tracer_provider, children, options)
    recorder.finish()


# --------------------------------------------------------------------------- OTLP/JSON


def send_otlp(
    events: Iterable[Event],
    endpoint: str,
    *,
    service_name: str = "agentloop",
    timeout: float = 10.0,
    children: Children | None = None,
    **options: Any,
) -> int:
    """Send the spans of a log to an OTLP/HTTP endpoint (protobuf); returns how many.

    The spans are :func:`otlp_json`'s (the same ids), sent with
    ``opentelemetry-exporter-otlp-proto-http`` (the ``otel`` extra). ``endpoint`` is
    the collector's traces URL (``http://localhost:4318/v1/traces``); a URL without a
    path gets ``/v1/traces``.

    Raises:
        ConnectionError: the endpoint did not accept the spans (within ``timeout``
            seconds, retries included).
    """
    from urllib.parse import urlsplit

    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace.export import SpanExportResult

    if urlsplit(endpoint).path in ("", "/"):
        endpoint = endpoint.rstrip("/") + "/v1/traces"
    spans = _log_spans(list(events), service_name, options, children)
    exporter = OTLPSpanExporter(endpoint=endpoint, timeout=timeout)
    try:
        result = exporter.export(spans)
    finally:
        exporter.shutdown()  # type: ignore[no-untyped-call]
    if result is not SpanExportResult.SUCCESS:
        raise ConnectionError(f"{endpoint}: the spans were not accepted (see the log above)")
    return len(spans)


def otlp_json(
    events: Iterable[Event],
    *,
    service_name: str = "agentloop",
    children: Children | None = None,
    **options: Any,
) -> str:
    """The spans of a log as one OTLP/JSON ``ExportTraceServiceRequest`` (one line).

    Built with the OpenTelemetry SDK and the OTLP protobuf encoder, then written in
    the OTLP/JSON mapping (protobuf JSON with lowerCamelCase keys, enums as
    integers, trace and span ids as hex). Deterministic: the trace id is the first
    16 bytes of SHA-256 over the events before the first step (``session.start``
    and the initial messages, which include the start time), and the n-th span's id
    the first 8 bytes of SHA-256 over that seed and ``n``; the resource holds only
    ``service.name``, and no span limits apply. The same log gives the same bytes.

    ``options`` are :class:`SpanRecorder`'s (``tracer_provider`` excepted);
    ``children`` is :func:`record_log`'s (a session tree: one trace, each child's
    spans under its call's, their span ids continuing the count).
    """
    from google.protobuf.json_format import (  # type: ignore[import-untyped, unused-ignore]
        MessageToDict,
    )
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

    request = encode_spans(_log_spans(list(events), service_name, options, children))
    data = MessageToDict(request, use_integers_for_enums=True)
    for resource_spans in data.get("resourceSpans", ()):
        for scope_spans in resource_spans.get("scopeSpans", ()):
            for span in scope_spans.get("spans", ()):
                for key in ("traceId", "spanId", "parentSpanId"):
                    if key in span:
                        span[key] = base64.b64decode(span[key]).hex()
    return _json(data)


def _log_spans(
    events: list[Event],
    service_name: str,
    options: dict[str, Any],
    children: Children | None = None,
) -> Any:
    """The finished spans of a log, with ids derived from it (see :func:`otlp_json`)."""
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import SpanLimits
    from opentelemetry.sdk.trace import TracerProvider as SDKTracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from opentelemetry.sdk.trace.id_generator import IdGenerator
    from opentelemetry.sdk.trace.sampling import ALWAYS_ON

    seed = hashlib.sha256(b"agentloop.otel\0")
    for event in events:
        if type(event) is StepStartEvent:
            break
        seed.update(encode_event(event))
        seed.update(b"\n")
    digest = seed.digest()

    class LogIds(IdGenerator):
        """Ids derived from the log (see above) instead of random ones."""

        def __init__(self) -> None:
            self.spans = 0

        def generate_trace_id(self) -> int:
            return int.from_bytes(hashlib.sha256(digest + b"trace").digest()[:16], "big")

        def generate_span_id(self) -> int:
            self.spans += 1
            n = self.spans.to_bytes(8, "big")
            return int.from_bytes(hashlib.sha256(digest + b"span" + n).digest()[:8], "big")

    unlimited = SpanLimits.UNSET
    provider = SDKTracerProvider(
        sampler=ALWAYS_ON,
        resource=Resource({"service.name": service_name}),
        id_generator=LogIds(),
        span_limits=SpanLimits(
            max_attributes=unlimited,
            max_events=unlimited,
            max_links=unlimited,
            max_span_attributes=unlimited,
            max_event_attributes=unlimited,
            max_link_attributes=unlimited,
            max_attribute_length=unlimited,
            max_span_attribute_length=unlimited,
        ),
    )
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    # Spans only: exporting a log adds nothing to the application's metrics.
    options.setdefault("meter_provider", metrics.NoOpMeterProvider())
    try:
        record_log(events, tracer_provider=provider, children=children, **options)
        return exporter.get_finished_spans()
    finally:
        provider.shutdown()
