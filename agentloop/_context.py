"""The context window (DESIGN §27): the estimator, compaction policies, the model's view.

Theory of operation
-------------------
The engine calls into this module at two points of a step, and nowhere else:

- before it makes the step's model request, :meth:`Context.prepare` brings the
  model's *view* of the transcript up to date (O(new messages)), lets the policy
  decide whether to compact it, performs the decision (a trim is immediate; a
  summary is a model call, yielded through the engine's own ``_plan`` as a
  ``ModelRequest(purpose="compaction")``, so its reply is recorded in ``model.chunk``
  / ``plan.draft`` like any other), records a ``context.compacted`` event, and
  finally refuses a request that would not fit the window (``CONTEXT_OVERFLOW``,
  before anything is sent); it returns the messages the model is sent;
- after the step's response is recorded, :meth:`Context.answered` keeps its
  ``usage.input_tokens``: the estimator's anchor for the next request.

Everything here is decided from the transcript and recorded replies only (no
clock, no tokenizer), so a replay makes the same decisions and the same events.
The log (and ``RunResult.messages``) keep the full history; only the requests see
the compacted view.

The estimator
-------------
:func:`estimate_message` counts a message as ``MESSAGE_TOKENS`` plus its content's
characters (:func:`content_chars`) divided by ``CHARS_PER_TOKEN``, rounded up. A
request's estimate is the recorded ``input_tokens`` of the last request made on
the same view plus the estimates of the messages appended since; before any usage
is recorded (or right after the view changed) it is the estimate of the system
prompt, the tool specs and every message of the view. :func:`content_chars` is the
one place that measures a message's content: give it new content kinds there.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Sequence
from typing import Any, Final, Protocol, TypeAlias, runtime_checkable

import msgspec

from ._errors import CONTEXT_OVERFLOW, MODEL_PROTOCOL_ERROR
from ._events import ContextCompactedEvent, EventLog
from ._messages import (
    AssistantMessage,
    Block,
    Content,
    ImageBlock,
    Message,
    Part,
    ProviderBlock,
    TextBlock,
    ThinkingBlock,
    ToolCall,
    ToolResultMessage,
    UserMessage,
)
from ._protocol import ModelRequest, ModelResponse, Usage
from ._run import Run, failed
from ._toolspec import ToolSpec
from ._transcript import TranscriptView

__all__ = [
    "CHARS_PER_TOKEN",
    "DEFAULT_SUMMARY_INSTRUCTIONS",
    "MESSAGE_TOKENS",
    "TRIM_MARKER",
    "CompactionPolicy",
    "Context",
    "ContextState",
    "Summarize",
    "SummarizeOlder",
    "Trim",
    "TrimToolResults",
    "check_compaction",
    "compaction_problem",
    "content_chars",
    "estimate_message",
    "estimate_request",
    "trimmed",
]

#: Characters per token the estimator assumes (a common rule of thumb for English
#: and code; it overestimates dense text less than it underestimates nothing).
CHARS_PER_TOKEN: Final = 4
#: Tokens the estimator adds per message (role, separators).
MESSAGE_TOKENS: Final = 4
#: Characters an image counts (1,600 tokens: providers count an image by its pixels,
#: not its bytes, and about this much for a picture of about a megapixel). Audio and
#: documents count their bytes (or their URL's characters).
IMAGE_CHARS: Final = 1_600 * CHARS_PER_TOKEN
#: What stands between the head and the tail of a trimmed tool result.
TRIM_MARKER: Final = "\n[... {omitted} characters trimmed ...]\n"
#: The instruction a summary request ends with (``SummarizeOlder.instructions``).
DEFAULT_SUMMARY_INSTRUCTIONS: Final = (
    "Summarise the conversation so far for your own later use: the task, what was "
    "done, what was learned (facts, numbers, names, file paths), and what remains. "
    "Answer with the summary only, as text; do not call tools."
)
#: The line the summary message starts with, before the model's summary.
SUMMARY_HEADER: Final = "[Summary of the earlier conversation]\n"


# --------------------------------------------------------------------------- estimator


def block_chars(block: Block | Part) -> int:
    """Characters a block counts: its text, a call's name and JSON arguments, an
    image :data:`IMAGE_CHARS`, audio or a document its bytes (or its URL), any other
    block its JSON."""
    if isinstance(block, (TextBlock, ThinkingBlock)):
        return len(block.text)
    if isinstance(block, ToolCall):
        return len(block.name) + len(msgspec.json.encode(block.arguments))
    if isinstance(block, ImageBlock):
        return IMAGE_CHARS
    if isinstance(block, ProviderBlock):
        return len(msgspec.json.encode(block))
    return len(block.data) if block.data is not None else len(block.url or "")


def content_chars(content: Content | Sequence[Block]) -> int:
    """Characters a message's content counts (a str: its length; blocks: summed).

    The one function that measures content: the estimator and the trimming go
    through it, so a new kind of content is taught here.

    >>> content_chars("hello"), content_chars((TextBlock("ab"), TextBlock("cd")))
    (5, 4)
    """
    if isinstance(content, str):
        return len(content)
    total = 0
    for block in content:
        total += block_chars(block)
    return total


def estimate_message(message: Message) -> int:
    """The estimated tokens of one message: ``MESSAGE_TOKENS`` plus its content's
    characters over ``CHARS_PER_TOKEN``, rounded up.

    >>> estimate_message(UserMessage("u1", "x" * 10))
    7
    """
    return MESSAGE_TOKENS + -(-content_chars(message.content) // CHARS_PER_TOKEN)


def _fixed_tokens(system: str | None, tools: Sequence[ToolSpec]) -> int:
    chars = len(system) if system is not None else 0
    for spec in tools:
        chars += len(msgspec.json.encode(spec))
    return -(-chars // CHARS_PER_TOKEN)


def estimate_request(
    messages: Sequence[Message], system: str | None = None, tools: Sequence[ToolSpec] = ()
) -> int:
    """The estimated input tokens of a request without recorded usage: the system
    prompt and tool specs (their JSON) over ``CHARS_PER_TOKEN``, plus each message's
    :func:`estimate_message`.

    >>> estimate_request([UserMessage("u1", "x" * 10)], system="be brief")
    9
    """
    return _fixed_tokens(system, tools) + sum(estimate_message(m) for m in messages)


def trimmed(message: ToolResultMessage, head: int, tail: int) -> ToolResultMessage:
    """``message`` with its content shortened to ``head`` and ``tail`` characters
    around :data:`TRIM_MARKER`, or ``message`` itself when that would not make it
    shorter or its content is blocks (media are not cut in half)."""
    content = message.content
    if type(content) is not str:
        return message
    omitted = len(content) - head - tail
    marker = TRIM_MARKER.format(omitted=omitted)
    if omitted <= len(marker):
        return message
    short = content[:head] + marker + (content[len(content) - tail :] if tail else "")
    return msgspec.structs.replace(message, content=short)


# --------------------------------------------------------------------------- policies


class ContextState(msgspec.Struct, frozen=True):
    """What a :class:`CompactionPolicy` decides from, before a model request.

    Attributes:
        window: the context window in tokens (``Limits.context_tokens``).
        estimate: the request's estimated input tokens as the view stands.
        messages: the model's view: the summary (if any) then the transcript from
            ``start`` on, older tool results trimmed (a read-only sequence).
        start: the transcript index of the first message of the view after the
            summary.
        summarized: whether ``messages[0]`` is the summary of what came before
            ``start``.
        estimates: the estimated tokens of each message of ``messages``.
    """

    window: int
    estimate: int
    messages: Sequence[Message]
    start: int
    summarized: bool
    estimates: Sequence[int]

    def cuts(self) -> list[int]:
        """The transcript indexes the view may be cut at without separating a tool
        call from its result: every index from ``start`` up to the transcript's
        length where no call before it is still waiting for its result after it."""
        out: list[int] = []
        open_calls: set[str] = set()
        first = 1 if self.summarized else 0
        for offset, message in enumerate(self.messages[first:]):
            if not open_calls:
                out.append(self.start + offset)
            kind = type(message)
            if kind is AssistantMessage:
                for block in message.content:
                    if type(block) is ToolCall:
                        open_calls.add(block.id)
            elif kind is ToolResultMessage:
                open_calls.discard(message.tool_call_id)  # type: ignore[union-attr]
        if not open_calls:
            out.append(self.start + len(self.messages) - first)
        return out


class Summarize(msgspec.Struct, frozen=True):
    """A decision: replace the view's messages before transcript index ``cut`` (and
    the earlier summary) by a summary the model writes on ``instructions``."""

    cut: int
    instructions: str = DEFAULT_SUMMARY_INSTRUCTIONS


class Trim(msgspec.Struct, frozen=True):
    """A decision: show every tool result before transcript index ``before`` as its
    ``head`` and ``tail`` characters around :data:`TRIM_MARKER`."""

    before: int
    head: int
    tail: int


Decision: TypeAlias = Summarize | Trim


@runtime_checkable
class CompactionPolicy(Protocol):
    """Decides, before a model request, whether the model's view is compacted.

    ``decide`` gets the :class:`ContextState` and returns ``None`` (send the view as
    it is), a :class:`Trim` or a :class:`Summarize`. It must be a pure function of
    its argument: a replay asks it again and must get the same decision. A policy
    is recorded in ``session.start`` as ``spec()`` (plain JSON with a ``"policy"``
    name); the built-ins are rebuilt from it on replay.
    """

    def decide(self, state: ContextState) -> Decision | None: ...

    def spec(self) -> dict[str, Any]: ...


def _fraction(name: str, value: object) -> None:
    if type(value) is not float or not 0.0 < value <= 1.0:
        raise ValueError(f"{name} must be a float in (0, 1], got {value!r}")


def _count(name: str, value: object, low: int) -> None:
    if type(value) is not int or value < low:
        raise ValueError(f"{name} must be an int >= {low}, got {value!r}")


class SummarizeOlder(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """Summarise older turns once the request estimate passes ``at`` of the window.

    The summary keeps the most recent messages whose estimate fits in ``keep`` of
    the window (cut where no tool call is separated from its result) and replaces
    everything before them, the previous summary included, by one user message
    holding the model's summary. The summary is a model call the loop yields
    (``ModelRequest(purpose="compaction")``): recorded, replayed byte for byte.

    >>> SummarizeOlder(at=0.8, keep=0.3).at
    0.8
    """

    at: float = 0.75
    keep: float = 0.25
    instructions: str = DEFAULT_SUMMARY_INSTRUCTIONS

    def __post_init__(self) -> None:
        _fraction("SummarizeOlder.at", self.at)
        _fraction("SummarizeOlder.keep", self.keep)
        if self.keep >= self.at:
            raise ValueError(
                f"SummarizeOlder.keep ({self.keep}) must be below SummarizeOlder.at "
                f"({self.at}): what is kept must leave room for new turns"
            )
        if type(self.instructions) is not str or not self.instructions:
            raise ValueError("SummarizeOlder.instructions must be a non-empty str")

    def decide(self, state: ContextState) -> Decision | None:
        """:class:`Summarize` at the earliest cut whose kept part fits ``keep``."""
        window = state.window
        if state.estimate <= self.at * window:
            return None
        budget = self.keep * window
        first = 1 if state.summarized else 0
        estimates = state.estimates
        # Tokens of the view from each transcript index to the end.
        suffix = [0] * (len(estimates) - first + 1)
        for offset in range(len(estimates) - first - 1, -1, -1):
            suffix[offset] = suffix[offset + 1] + estimates[first + offset]
        for cut in state.cuts():
            if cut > state.start and suffix[cut - state.start] <= budget:
                return Summarize(cut, self.instructions)
        return None

    def spec(self) -> dict[str, Any]:
        """``{"policy": "summarize_older", ...}`` (fields that are not defaults)."""
        return {"policy": "summarize_older", **msgspec.to_builtins(self)}


class TrimToolResults(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """Shorten older tool results once the request estimate passes ``at`` of the window.

    Every tool result but the last ``keep_last`` of the view is shown as its first
    ``head`` and last ``tail`` characters around :data:`TRIM_MARKER`. The
    transcript and the log keep them whole.

    >>> TrimToolResults(keep_last=2).keep_last
    2
    """

    keep_last: int = 3
    head: int = 500
    tail: int = 500
    at: float = 0.5

    def __post_init__(self) -> None:
        _count("TrimToolResults.keep_last", self.keep_last, 0)
        _count("TrimToolResults.head", self.head, 0)
        _count("TrimToolResults.tail", self.tail, 0)
        _fraction("TrimToolResults.at", self.at)

    def decide(self, state: ContextState) -> Decision | None:
        """:class:`Trim` before the ``keep_last``-th last tool result, if that trims
        more than is trimmed already."""
        if state.estimate <= self.at * state.window:
            return None
        first = 1 if state.summarized else 0
        results = [
            state.start + offset
            for offset, message in enumerate(state.messages[first:])
            if type(message) is ToolResultMessage
        ]
        if len(results) <= self.keep_last:
            return None
        before = results[len(results) - self.keep_last] if self.keep_last else results[-1] + 1
        return Trim(before, self.head, self.tail)

    def spec(self) -> dict[str, Any]:
        """``{"policy": "trim_tool_results", ...}`` (fields that are not defaults)."""
        return {"policy": "trim_tool_results", **msgspec.to_builtins(self)}


_BUILT_INS: Final[dict[str, type[Any]]] = {
    "summarize_older": SummarizeOlder,
    "trim_tool_results": TrimToolResults,
}


def policy_from_spec(spec: dict[str, Any]) -> CompactionPolicy:
    """The built-in policy a ``session.start`` records, rebuilt.

    Raises:
        ValueError: the spec names no built-in policy (a custom policy: give it to
            the replay), or its fields are invalid.
    """
    fields = dict(spec)
    name = fields.pop("policy", None)
    cls = _BUILT_INS.get(name) if type(name) is str else None
    if cls is None:
        raise ValueError(
            f"compaction policy {name!r} is not a built-in one "
            f"({', '.join(sorted(_BUILT_INS))}); pass the policy itself to replay it"
        )
    try:
        policy: CompactionPolicy = msgspec.convert(fields, cls)
    except msgspec.ValidationError as exc:
        raise ValueError(f"compaction policy {name!r}: {exc}") from None
    return policy


def check_compaction(compaction: object, window: int | None) -> CompactionPolicy | None:
    """``agent_loop``'s ``compaction`` option, checked; ``None`` for none. A dict is a
    built-in policy's recorded ``spec()`` (what a replay passes)."""
    if compaction is None:
        return None
    if type(compaction) is dict:
        compaction = policy_from_spec(compaction)
    if not isinstance(compaction, CompactionPolicy):
        raise TypeError(
            "compaction must be a CompactionPolicy (SummarizeOlder, TrimToolResults or "
            f"an object with decide() and spec()), got {type(compaction).__name__}"
        )
    if window is None:
        raise ValueError(
            "compaction needs a context window: set Limits(context_tokens=...) "
            "(the policy compacts relative to it)"
        )
    spec = compaction.spec()
    if type(spec) is not dict or type(spec.get("policy")) is not str:
        raise TypeError(f"compaction.spec() must return a dict with a str 'policy', got {spec!r}")
    return compaction


def _built_in(spec: dict[str, Any]) -> bool:
    name = spec.get("policy")
    return type(name) is str and name in _BUILT_INS


def compaction_problem(recorded: dict[str, Any] | None, given: object) -> str | None:
    """Why a replay cannot use ``given`` for the policy ``session.start`` records
    (``recorded``, its ``spec()``), or ``None``.

    Without ``given`` a built-in policy is rebuilt from its spec; a custom one must
    be given again: a log holds no code, and a replay does not import it by name.
    A given policy (or spec dict) must have the very spec the log records
    (compared as JSON).
    """
    if given is None:
        if recorded is None or _built_in(recorded):
            return None
        return (
            f"session.start records the compaction policy {recorded.get('policy')!r} "
            f"({recorded!r}), which is not a built-in one: pass the same policy again "
            "(replay(..., compaction=policy))"
        )
    spec_of: Callable[[], object]
    if isinstance(given, dict):
        if not _built_in(given):
            return (
                f"compaction {given!r} is a spec, which rebuilds only a built-in policy: "
                "pass the policy itself"
            )
        spec_of = given.copy
    elif isinstance(given, CompactionPolicy):
        spec_of = given.spec
    else:
        return f"compaction must be a CompactionPolicy, got {type(given).__name__}"
    try:
        spec = msgspec.json.decode(msgspec.json.encode(spec_of()))
    except Exception as exc:  # its spec() is the caller's code: any failure is theirs
        return f"the compaction policy's spec() failed: {type(exc).__name__}: {exc}"
    if recorded is None:
        return f"a compaction policy was given ({spec!r}), but session.start records none"
    if spec != recorded:
        return (
            f"the compaction policy given ({spec!r}) is not the one session.start "
            f"records ({recorded!r})"
        )
    return None


# --------------------------------------------------------------------------- the view


class Context:
    """The model's view of one run's transcript and the window it must fit.

    Owned by the engine (one per run with ``Limits.context_tokens`` set); see the
    module docstring for the two points it is called at.
    """

    def __init__(
        self,
        run: Run,
        log: EventLog,
        window: int,
        policy: CompactionPolicy | None,
        system: str | None,
        tools: tuple[ToolSpec, ...],
    ) -> None:
        self._run = run
        self._log = log
        self._window = window
        self._policy = policy
        # A caller's steering message may not take the ids a compaction makes.
        run.compacting = policy is not None
        self._system = system
        self._tools = tools
        self._fixed = _fixed_tokens(system, tools)
        self._start = 0  # transcript index the view continues from, after the summary
        self._summary: UserMessage | None = None
        self._trim: Trim | None = None
        self._view: list[Message] = []
        self._estimates: list[int] = []
        self._seen = 0  # transcript messages taken into the view
        self._total = self._fixed  # estimate of the whole view
        self._anchor: int | None = None  # recorded input tokens of the last request
        self._since = 0  # estimate of the view's messages after that request

    @property
    def estimate(self) -> int:
        """The next request's estimated input tokens."""
        return self._total if self._anchor is None else self._anchor + self._since

    def use(self, system: str | None, tools: tuple[ToolSpec, ...]) -> None:
        """The requests from now on send ``system`` and ``tools`` (a handoff's
        agent, DESIGN §26): the estimate counts them, from scratch (the recorded
        usage was for another prompt)."""
        fixed = _fixed_tokens(system, tools)
        self._total += fixed - self._fixed
        self._fixed = fixed
        self._system = system
        self._tools = tools
        self._anchor = None

    def _shown(self, message: Message, index: int) -> Message:
        trim = self._trim
        if trim is not None and index < trim.before and type(message) is ToolResultMessage:
            return trimmed(message, trim.head, trim.tail)
        return message

    def _take_new(self) -> None:
        transcript = self._run.transcript
        for index in range(self._seen, len(transcript)):
            message = self._shown(transcript[index], index)
            tokens = estimate_message(message)
            self._view.append(message)
            self._estimates.append(tokens)
            self._total += tokens
            self._since += tokens
        self._seen = len(transcript)

    def _rebuild(self) -> None:
        """A new view (a new list: requests already made keep theirs)."""
        transcript = self._run.transcript
        view: list[Message] = [] if self._summary is None else [self._summary]
        view.extend(self._shown(transcript[i], i) for i in range(self._start, len(transcript)))
        self._view = view
        self._estimates = [estimate_message(m) for m in view]
        self._total = self._fixed + sum(self._estimates)
        self._anchor = None  # the recorded usage was for another view
        self._since = 0

    def prepare(
        self, step: int, request_id: str, plan: Callable[[ModelRequest], Generator[Any, Any, Any]]
    ) -> Generator[Any, Any, Sequence[Message]]:
        """Bring the view up to date, compact it if the policy says so (a summary is
        a model call made through ``plan``), and check it fits the window.

        Returns:
            The messages the step's request sends (a read-only sequence).
        """
        self._take_new()
        policy = self._policy
        if policy is not None:
            before = self.estimate
            # Fixed-length views of lists that are only appended to until the next
            # rebuild (which makes new lists): O(1), whatever the view's length.
            length = len(self._view)
            state = ContextState(
                self._window,
                before,
                TranscriptView(self._view, length),
                self._start,
                self._summary is not None,
                TranscriptView(self._estimates, length),  # type: ignore[arg-type]
            )
            decision = policy.decide(state)
            if type(decision) is Trim:
                if self._trim is None or decision.before > self._trim.before:
                    self._trim = decision
                    self._rebuild()
                    self._record(step, "trim", before)
            elif type(decision) is Summarize:
                yield from self._summarize(step, request_id, decision, state, plan)
                self._record(step, "summarize", before)
            elif decision is not None:
                raise failed(
                    CONTEXT_OVERFLOW,
                    f"step {step}: the compaction policy's decide() returned "
                    f"{type(decision).__name__}, not Trim, Summarize or None",
                )
        estimate = self.estimate
        if estimate > self._window:
            raise failed(CONTEXT_OVERFLOW, self._overflow(step, estimate, "request"))
        return TranscriptView(self._view, len(self._view))

    def _overflow(self, step: int, estimate: int, what: str) -> str:
        how = (
            "set a compaction policy (agent_loop(..., compaction=SummarizeOlder()))"
            if self._policy is None
            else "the compaction policy did not bring it under the window"
        )
        return (
            f"step {step}: the {what} would need about {estimate} input tokens, over "
            f"the context window of {self._window} (Limits.context_tokens); it was not "
            f"sent: {how}"
        )

    def _summarize(
        self,
        step: int,
        request_id: str,
        decision: Summarize,
        state: ContextState,
        plan: Callable[[ModelRequest], Generator[Any, Any, Any]],
    ) -> Generator[Any, Any, None]:
        cut = decision.cut
        valid = state.cuts()
        if not state.start < cut <= valid[-1] or cut not in valid:
            raise failed(
                CONTEXT_OVERFLOW,
                f"step {step}: the compaction policy chose cut {cut}, not one of the "
                f"cuts that separate no tool call from its result after {state.start}",
            )
        first = 1 if state.summarized else 0
        older = list(state.messages[: first + cut - state.start])
        instruction_id = f"compaction-{request_id}"
        while instruction_id in self._run.message_ids:
            instruction_id += "-"
        older.append(UserMessage(instruction_id, decision.instructions))
        estimate = _fixed_tokens(self._system, self._tools) + sum(
            estimate_message(m) for m in older
        )
        if estimate > self._window:
            raise failed(CONTEXT_OVERFLOW, self._overflow(step, estimate, "summary request"))
        request = ModelRequest(
            request_id.replace("request-", "compaction-", 1),
            step,
            tuple(older),
            self._tools,
            self._system,
            purpose="compaction",
        )
        response: ModelResponse = yield from plan(request)
        text = ""
        for block in response.content:
            if type(block) is ToolCall:
                raise failed(
                    MODEL_PROTOCOL_ERROR,
                    f"step {step}: the compaction response calls tool {block.name!r}; "
                    "a summary is text only",
                )
            if type(block) is TextBlock:
                text += block.text
        if not text.strip():
            raise failed(MODEL_PROTOCOL_ERROR, f"step {step}: the compaction response has no text")
        summary_id = f"summary-{response.id}"
        while summary_id in self._run.message_ids:
            summary_id += "-"
        self._summary = UserMessage(summary_id, SUMMARY_HEADER + text)
        self._start = cut
        self._rebuild()

    def _record(self, step: int, how: str, before: int) -> None:
        log = self._log
        log.append(
            ContextCompactedEvent(
                sequence=len(log),
                at=self._run.now,
                step=step,
                how=how,
                start=self._start,
                summary=self._summary if how == "summarize" else None,
                trimmed_before=0 if self._trim is None else self._trim.before,
                tokens_before=before,
                tokens_after=self.estimate,
            )
        )

    def answered(self, request: ModelRequest, usage: Usage | None) -> None:
        """The step's response was recorded: its input tokens anchor the estimate."""
        if (
            usage is not None
            and usage.input_tokens > 0
            and len(request.messages) == len(self._view)
        ):
            self._anchor = usage.input_tokens
            self._since = 0
