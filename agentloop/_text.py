"""Formatting what the loop says in its errors: short, exact, and always writable."""

from __future__ import annotations

from ._json import clean_text, value_text
from ._messages import Block, ToolCall
from ._protocol import Effect, ModelRequest, Pause, Reply, ToolBatch, ToolRequest

__all__ = [
    "abort_reason",
    "decision_problem",
    "escape_surrogates",
    "exception_text",
    "short",
    "unanswered_pause",
    "wrong_reply",
]


def escape_surrogates(text: str) -> str:
    """``text`` with lone surrogates (e.g. from ``os.listdir`` file names) escaped as
    ``\\udce9``, so the log can hold it."""
    if text.isascii() or clean_text(text):
        return text
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def _str(value: object) -> str:
    """``str(value)``, even when its ``__str__`` raises (as ``traceback`` does it)."""
    try:
        text = str(value)
    except Exception as exc:
        text = f"<{type(value).__name__} whose str() raised {type(exc).__name__}>"
    return escape_surrogates(text)


def exception_text(exc: BaseException) -> str:
    """``"<Type>: <message>"`` for a message or a log: whatever the exception's
    ``__str__`` does (raises, returns lone surrogates), this is text the log holds."""
    return f"{escape_surrogates(type(exc).__name__)}: {_str(exc)}"


def abort_reason(exc: BaseException) -> str:
    """A ``HookAbort``'s reason as text the log holds (it may be anything)."""
    return _str(getattr(exc, "reason", ""))


def short(item: str | Block) -> str:
    """A short description of a normalized stream item (text or a block)."""
    if type(item) is str:
        text = item if len(item) <= 40 else item[:37] + "..."
        return f"text {text!r}"
    if type(item) is ToolCall:
        return f"tool call {item.id!r} ({item.name})"
    return type(item).__name__


def wrong_reply(reply: Reply, effect: Effect, expected: str) -> str:
    """The message for a reply of the wrong kind sent while ``effect`` was pending."""
    if type(effect) is ModelRequest:
        pending = f"ModelRequest {effect.id}"
    elif type(effect) is ToolRequest:
        pending = f"the ToolRequest for call {effect.call.id!r}"
    elif type(effect) is ToolBatch:
        pending = f"the ToolBatch of calls {call_ids(effect)}"
    else:
        pending = f"Pause ({effect.reason})"  # type: ignore[union-attr]
    return f"send() got {type(reply).__name__} while {pending} was pending; expected {expected}"


def call_ids(batch: ToolBatch) -> str:
    """The ids of a batch's calls, quoted, for messages."""
    return ", ".join(repr(request.call.id) for request in batch.requests)


def decision_problem(reason: str, decision: object) -> str | None:
    """Why a ``Resume.payload`` does not decide an approval pause, or ``None``."""
    if type(decision) is dict and type(decision.get("approved")) is bool:
        return None
    if type(decision) is not dict:
        got = "None" if decision is None else f"a {type(decision).__name__}"
    elif "approved" not in decision:
        got = "a dict without 'approved'"
    else:
        approved = decision["approved"]
        scalar = type(approved) in (str, int, float)
        shown = value_text(approved) if scalar else type(approved).__name__
        got = f"'approved': {shown if len(shown) <= 40 else shown[:37] + '...'}"
    return f"Resume.payload for a {reason!r} pause must be a dict with a bool 'approved', got {got}"


def unanswered_pause(pause: Pause) -> str:
    """The reason a driver cancels with when ``pause`` comes and no ``on_pause`` was
    given: what paused, and what to pass so it is answered. It starts with
    ``pause.reason``, so a check of the reason's prefix still tells the pauses apart.
    """
    reason = pause.reason
    payload = pause.payload
    call = payload.get("call") if isinstance(payload, dict) else None
    if isinstance(call, dict) and type(call.get("name")) is str and type(call.get("id")) is str:
        tool = f"tool {call['name']!r} (call {call['id']})"
        what = (
            f"approval needed for {tool}"
            if reason == "approval"
            else f"{reason}: a hook paused before {tool}"
        )
    elif reason.startswith("budget_exceeded:"):
        what = f"{reason}: the {reason.partition(':')[2]} budget was used up"
    else:
        what = f"{reason}: the loop paused"
    return (
        f"{what} and no on_pause was given: pass on_pause=... to answer it, or use "
        "run_durable to park the session"
    )
