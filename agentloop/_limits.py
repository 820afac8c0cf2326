"""The ceilings the loop enforces (DESIGN §8, §16): :class:`Limits` and its defaults.

The ``MAX_*`` constants are the defaults (the seed's workshop ceilings); a run may
raise or lower any of them with ``agent_loop(..., limits=Limits(...))``. The limits
in force are recorded in ``session.start`` (left out when they are the defaults), so
a replay follows the recorded ones, never this module's defaults.
"""

from __future__ import annotations

from typing import Final

import msgspec

from ._json import MAX_RECORDED_VALUES

__all__ = [
    "DEFAULT_LIMITS",
    "LIMITS_HARD_CAPS",
    "MAX_AGENT_DEPTH",
    "MAX_AGENT_STEPS",
    "MAX_ARGUMENT_DEPTH",
    "MAX_ARGUMENT_ENTRIES",
    "MAX_ARGUMENT_STRING_CODE_POINTS",
    "MAX_ARGUMENT_VALUES",
    "MAX_ASSISTANT_BLOCKS",
    "MAX_BLOBS_PER_STEP",
    "MAX_BLOB_BYTES",
    "MAX_CHUNKS_PER_STEP",
    "MAX_INITIAL_MESSAGES",
    "MAX_STEP_TEXT_CODE_POINTS",
    "Limits",
]

#: Highest ``max_steps`` (and highest request number) a run may use.
MAX_AGENT_STEPS: Final = 64
#: Most messages an initial transcript may hold.
MAX_INITIAL_MESSAGES: Final = 4096
#: Most streamed chunks the model may send for one step.
MAX_CHUNKS_PER_STEP: Final = 1024
#: Most code points of text (streamed, and in the final message) per step.
MAX_STEP_TEXT_CODE_POINTS: Final = 65_536
#: Most blocks in one assistant message.
MAX_ASSISTANT_BLOCKS: Final = 1024
#: Deepest nesting of objects/arrays in tool arguments (the root object counts 1).
MAX_ARGUMENT_DEPTH: Final = 32
#: Most JSON values in tool arguments, the root object included.
MAX_ARGUMENT_VALUES: Final = 257
#: Most object fields plus array elements in tool arguments, in total.
MAX_ARGUMENT_ENTRIES: Final = 256
#: Most code points over all keys and string values of tool arguments.
MAX_ARGUMENT_STRING_CODE_POINTS: Final = 4096
#: Deepest nesting of agent tools (a root session's child is at depth 1).
MAX_AGENT_DEPTH: Final = 4
#: Most bytes in one media block (its ``data``, or its ``url``): 20 MiB.
MAX_BLOB_BYTES: Final = 20 * 1024 * 1024
#: Most media blocks (images, audio, documents) one source adds in one step: the
#: model's response, the step's tool results together, one caller's message.
MAX_BLOBS_PER_STEP: Final = 32

_INT_CAP: Final = 2**31 - 1
#: The highest value each :class:`Limits` field accepts. ``argument_depth`` is capped
#: lower: a log line nests the arguments a few levels deeper still, and msgspec
#: encodes and decodes nesting within Python's recursion limit (1000 by default).
#: ``argument_values`` and ``argument_entries`` stop below ``MAX_RECORDED_VALUES``:
#: beyond it a value is refused as too large to record, whatever the limits say.
LIMITS_HARD_CAPS: Final[dict[str, int]] = {
    "agent_steps": _INT_CAP,
    "initial_messages": _INT_CAP,
    "chunks_per_step": _INT_CAP,
    "step_text_code_points": _INT_CAP,
    "assistant_blocks": _INT_CAP,
    "argument_depth": 256,
    "argument_values": MAX_RECORDED_VALUES - 1,
    "argument_entries": MAX_RECORDED_VALUES - 2,
    "argument_string_code_points": _INT_CAP,
    "agent_depth": 64,
    "blob_bytes": 1024 * 1024 * 1024,
    "blobs_per_step": 4096,
}


class Limits(msgspec.Struct, frozen=True, omit_defaults=True, kw_only=True):
    """The loop's ceilings for one run; every field defaults to its ``MAX_*`` constant.

    Attributes:
        agent_steps: highest ``max_steps`` and request number (``MAX_AGENT_STEPS``).
        initial_messages: most messages in the initial transcript.
        chunks_per_step: most streamed chunks per step.
        step_text_code_points: most code points of text per step.
        assistant_blocks: most blocks in one assistant message.
        argument_depth: deepest nesting of tool arguments (the root object counts 1).
        argument_values: most JSON values in tool arguments, the root included.
        argument_entries: most object fields plus array elements in tool arguments.
        argument_string_code_points: most code points over the keys and strings of
            tool arguments.
        agent_depth: deepest nesting of child sessions (agent tools, DESIGN §26) under
            this run's root: a call that would start a child deeper is a tool error.
        blob_bytes: most bytes in one media block's ``data`` (or characters in its
            ``url``) (``MAX_BLOB_BYTES``, 20 MiB; hard cap 1 GiB).
        blobs_per_step: most media blocks one source adds in a step: the model's
            response, the step's tool results together, each caller's message
            (``MAX_BLOBS_PER_STEP``, 32; hard cap 4096).
        context_tokens: the model's context window in tokens, or ``None`` (unknown:
            nothing is checked). With a window, a request whose estimated input
            tokens exceed it fails the run ``CONTEXT_OVERFLOW`` before it is sent,
            unless a ``compaction`` policy brings it under (DESIGN §27).

    Each field is an int from 1 to its hard cap (:data:`LIMITS_HARD_CAPS`: 2**31-1,
    ``argument_depth`` 256, ``agent_depth`` 64, ``blob_bytes`` 1 GiB, ``blobs_per_step``
    4096); anything else raises ``ValueError`` naming the field.

    >>> Limits(agent_steps=300).agent_steps
    300
    >>> Limits(argument_depth=0)
    Traceback (most recent call last):
    ...
    ValueError: Limits.argument_depth must be an int from 1 to 256, got 0
    """

    agent_steps: int = MAX_AGENT_STEPS
    initial_messages: int = MAX_INITIAL_MESSAGES
    chunks_per_step: int = MAX_CHUNKS_PER_STEP
    step_text_code_points: int = MAX_STEP_TEXT_CODE_POINTS
    assistant_blocks: int = MAX_ASSISTANT_BLOCKS
    argument_depth: int = MAX_ARGUMENT_DEPTH
    argument_values: int = MAX_ARGUMENT_VALUES
    argument_entries: int = MAX_ARGUMENT_ENTRIES
    argument_string_code_points: int = MAX_ARGUMENT_STRING_CODE_POINTS
    agent_depth: int = MAX_AGENT_DEPTH
    blob_bytes: int = MAX_BLOB_BYTES
    blobs_per_step: int = MAX_BLOBS_PER_STEP
    context_tokens: int | None = None

    def __post_init__(self) -> None:
        window = self.context_tokens
        if window is not None and (type(window) is not int or not 1 <= window <= _INT_CAP):
            raise ValueError(
                f"Limits.context_tokens must be None or an int from 1 to {_INT_CAP}, got {window!r}"
            )
        for name, cap in LIMITS_HARD_CAPS.items():
            value = getattr(self, name)
            if type(value) is not int or not 1 <= value <= cap:
                raise ValueError(f"Limits.{name} must be an int from 1 to {cap}, got {value!r}")
            default = _DEFAULTS[name]
            if value == default:
                # The default object itself: a log leaves defaults out, and msgspec
                # knows a default by identity (see agentloop/_events.py).
                msgspec.structs.force_setattr(self, name, default)


_DEFAULTS: Final[dict[str, int]] = {
    field.name: field.default for field in msgspec.structs.fields(Limits)
}

#: The seed's ceilings: what a run without ``limits=`` (or a log without recorded
#: limits) follows.
DEFAULT_LIMITS: Final = Limits()


def limit_name(limits: Limits, field: str, note: str = "") -> str:
    """How an error names a limit: ``MAX_CHUNKS_PER_STEP (1024)`` when it is the
    default (the words logs have always held), else ``Limits.chunks_per_step (5000)``."""
    value = getattr(limits, field)
    if value == _DEFAULTS[field]:
        return f"MAX_{field.upper()} ({value}{note})"
    return f"Limits.{field} ({value}{note})"
