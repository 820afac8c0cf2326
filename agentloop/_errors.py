"""Exceptions raised by agentloop, and the error codes a failed run carries.

:class:`AgentLoopError` is the root of every exception class agentloop and replay
define (DESIGN §24); the whole tree, with who is at fault for each, is written
down once, in docs/protocol.md ("The exception tree"). Defined here:

- :class:`CallerProtocolError`: the code driving the generator broke the protocol
  (a reply of the wrong kind, a reply for another call, a send after the run
  ended); the run is dead after it;
- :class:`ModelError`: a model call failed (provider/transport error); raised by
  model adapters, turned into ``ModelFailure`` by :func:`agentloop.run`.

Problems caused by the *model* (bad output) or by *hooks* are not exceptions:
they end the run with ``RunResult(status="failed", error=RunError(code, message))``
using one of the codes below, and the event log records what happened.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ._protocol import ModelAttempt, Usage

__all__ = [
    "CALLER_PROTOCOL_ERROR",
    "CONTEXT_OVERFLOW",
    "ERROR_CODES",
    "HOOK_ABORT",
    "HOOK_ERROR",
    "INVALID_TRANSCRIPT",
    "MODEL_ERROR",
    "MODEL_PROTOCOL_ERROR",
    "MODEL_REFUSED",
    "OUTPUT_INVALID",
    "AgentLoopError",
    "CallerProtocolError",
    "ModelError",
]

#: The initial transcript did not validate; the model was never asked.
INVALID_TRANSCRIPT = "INVALID_TRANSCRIPT"
#: The model's output broke a rule of the protocol (limits, ids, chunk/final mismatch).
MODEL_PROTOCOL_ERROR = "MODEL_PROTOCOL_ERROR"
#: The model call failed (provider or transport error, or stop reason ``error``).
MODEL_ERROR = "MODEL_ERROR"
#: The model refused to answer (stop reason ``refusal``); the message holds its explanation.
MODEL_REFUSED = "MODEL_REFUSED"
#: A hook raised :class:`~agentloop.HookAbort` outside ``before_tool_call``.
HOOK_ABORT = "HOOK_ABORT"
#: A hook raised any other exception, or returned a value with no meaning there.
HOOK_ERROR = "HOOK_ERROR"
#: The final answer did not decode to the run's ``output`` type, retries included.
OUTPUT_INVALID = "OUTPUT_INVALID"
#: The next model request would not fit the context window (``Limits.context_tokens``)
#: and no compaction policy brought it under; it was never sent.
CONTEXT_OVERFLOW = "CONTEXT_OVERFLOW"
#: The code driving the generator sent a reply that does not fit the pending effect.
CALLER_PROTOCOL_ERROR = "CALLER_PROTOCOL_ERROR"

ERROR_CODES = frozenset(
    {
        INVALID_TRANSCRIPT,
        MODEL_PROTOCOL_ERROR,
        MODEL_ERROR,
        MODEL_REFUSED,
        OUTPUT_INVALID,
        HOOK_ABORT,
        HOOK_ERROR,
        CALLER_PROTOCOL_ERROR,
        CONTEXT_OVERFLOW,
    }
)


class AgentLoopError(Exception):
    """Root of every exception agentloop and replay raise on purpose (the tree:
    docs/protocol.md).

    It is abstract: catch it, never raise it.
    """

    def __new__(cls, *args: object, **kwargs: object) -> AgentLoopError:
        if cls is AgentLoopError:
            raise TypeError("AgentLoopError is abstract; raise a subclass")
        return super().__new__(cls, *args, **kwargs)


class CallerProtocolError(AgentLoopError):
    """The code driving the generator broke the generator protocol.

    Raised out of ``send()`` after the loop has logged a failed ``run.finished``
    (code ``CALLER_PROTOCOL_ERROR``). Like h11's sticky ``ERROR`` state, the run is
    dead afterwards: every later ``send()`` raises this error again.

    Seeing it means a bug in the driver, not in the model or a tool.
    """


class ModelError(AgentLoopError):
    """A model call failed: the provider answered with an error or could not be reached.

    Model adapters raise it from ``stream()``; :func:`agentloop.run` turns it into a
    ``ModelFailure`` reply so the run ends ``failed`` with code ``MODEL_ERROR`` and the
    log records the provider's message.

    Attributes:
        message: the provider's message.
        provider: ``"openai"``, ``"anthropic"``, ... or ``None``.
        status_code: the HTTP status, when there was one.
        kind: a short classification such as ``"rate_limit"``, ``"auth"``,
            ``"connection"``, ``"server"``, ``"bad_request"`` or ``"unknown"``.
        usage: the tokens the provider reported (and billed) before the failure,
            e.g. an error event in the middle of a stream; :func:`agentloop.run`
            records them in the ``ModelFailure`` so ``RunResult.usage`` counts them.
        attempts: the models tried before, when a
            :class:`~agentloop.models.FallbackModel` gave up (recorded likewise).
        retry_after: the seconds the provider asked to wait before trying again
            (its ``retry-after-ms`` or ``retry-after`` header, or Gemini's
            ``google.rpc.RetryInfo``), ``None`` when it said nothing. A
            :class:`~agentloop.models.RetryPolicy` waits that long instead of its
            own backoff, up to its ``max_retry_after_seconds``.
    """

    def __init__(
        self,
        message: str,
        *,
        provider: str | None = None,
        status_code: int | None = None,
        kind: str = "unknown",
        usage: Usage | None = None,
        attempts: tuple[ModelAttempt, ...] = (),
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.provider = provider
        self.status_code = status_code
        self.kind = kind
        self.usage = usage
        self.attempts = attempts
        self.retry_after = retry_after
