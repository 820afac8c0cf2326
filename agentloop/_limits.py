"""Public limits the loop enforces (DESIGN §8). They are part of the API."""

from __future__ import annotations

__all__ = [
    "MAX_AGENT_STEPS",
    "MAX_ARGUMENT_DEPTH",
    "MAX_ARGUMENT_ENTRIES",
    "MAX_ARGUMENT_STRING_CODE_POINTS",
    "MAX_ARGUMENT_VALUES",
    "MAX_ASSISTANT_BLOCKS",
    "MAX_CHUNKS_PER_STEP",
    "MAX_INITIAL_MESSAGES",
    "MAX_STEP_TEXT_CODE_POINTS",
]

#: Highest ``max_steps`` (and highest request number) a run may use.
MAX_AGENT_STEPS = 64
#: Most messages an initial transcript may hold.
MAX_INITIAL_MESSAGES = 4096
#: Most streamed chunks the model may send for one step.
MAX_CHUNKS_PER_STEP = 1024
#: Most code points of text (streamed, and in the final message) per step.
MAX_STEP_TEXT_CODE_POINTS = 65_536
#: Most blocks in one assistant message.
MAX_ASSISTANT_BLOCKS = 1024
#: Deepest nesting of objects/arrays in tool arguments (the root object counts 1).
MAX_ARGUMENT_DEPTH = 32
#: Most JSON values in tool arguments, the root object included.
MAX_ARGUMENT_VALUES = 257
#: Most object fields plus array elements in tool arguments, in total.
MAX_ARGUMENT_ENTRIES = 256
#: Most code points over all keys and string values of tool arguments.
MAX_ARGUMENT_STRING_CODE_POINTS = 4096
