"""The drivers' keyword options, declared once (DESIGN §24).

Theory of operation
-------------------
``run``, ``run_stream``, ``arun``, ``arun_stream``, ``drive``, ``adrive`` and
replay's ``run_durable``/``arun_durable`` take their options as ``**options:
Unpack[...]`` (PEP 692) of the ``TypedDict`` families here: mypy still checks each
keyword and its type, as when every function spelled the list out, and an unknown
keyword is still a ``TypeError`` naming it (:func:`split` raises it, with Python's
own wording). A driver passes on only the keywords it was given, so each default
lives in one place: a loop option's in :func:`agentloop.agent_loop`'s signature, a
drive option's in the driver's ``_Rules.checked`` (all ``None``).

- :class:`SessionOptions`: what a session is started with (``agent_loop``'s options
  that a durable session stores); :class:`LoopOptions` adds ``log``.
- :class:`DriveOptions` / :class:`AsyncDriveOptions`: how a driver runs the loop
  (the async one's ``on_pause`` may be ``async def``).
- :class:`RunOptions` / :class:`AsyncRunOptions`: both, what ``run``/``arun`` take.

Adding an option touches two places: its key in one family here (its type, and a
line in the family's ``Keyword Args:``), and the code that implements it --
``agent_loop`` for a loop option (its default in the signature), ``_Rules.checked``
for a drive option. ``tests/test_options.py`` then checks that the drivers'
docstrings and docs/durable.md's list name it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from typing_extensions import TypedDict

from ._budget import Budget
from ._events import Event, EventLog
from ._hooks import HookRegistry
from ._limits import Limits
from ._protocol import Cancel, Pause, Resume
from ._signals import CancelToken, Inbox

__all__ = [
    "DRIVE_KEYS",
    "LOOP_KEYS",
    "SESSION_KEYS",
    "AsyncDriveOptions",
    "AsyncRunOptions",
    "Clock",
    "DriveOptions",
    "LoopOptions",
    "OnEvent",
    "OnPause",
    "RunOptions",
    "SessionOptions",
    "keys",
    "split",
    "unexpected",
]

Clock = Callable[[], float]
OnPause = Callable[[Pause], "Resume | Cancel"]
OnEvent = Callable[[Event], object]


class SessionOptions(TypedDict, total=False):
    """The options a session starts with (passed on to :func:`agentloop.agent_loop`).

    Keyword Args:
        system: the system prompt sent with every model request.
        max_steps: hard ceiling on model requests (at most ``MAX_AGENT_STEPS``;
            default 8).
        budget: soft limits; reaching one pauses the run (see ``on_pause``).
        hooks: hook subscribers, run inside the engine.
        started_at: the time of ``session.start`` (default: ``clock()`` now).
        parallel_tools: run the calls of a step together (see :func:`agent_loop`;
            tools marked ``sequential`` still run alone).
        limits: the loop's ceilings (:class:`Limits`; default: the ``MAX_*`` values).
        output: a type the final answer must decode to (see :func:`agent_loop`).
        output_retries: how many times an answer that does not decode goes back to
            the model (default 2).
        compaction: a compaction policy for the context window (see
            :func:`agent_loop`; needs ``Limits(context_tokens=...)``).
    """

    system: str | None
    max_steps: int
    budget: Budget | None
    hooks: HookRegistry | None
    started_at: float | None
    parallel_tools: bool
    limits: Limits | None
    output: Any
    output_retries: int
    compaction: Any


class LoopOptions(SessionOptions, total=False):
    """:class:`SessionOptions` and the log to record into.

    Keyword Args:
        log: an :class:`EventLog` to record into (subscribe to it for live events).
        handoffs: the agents the model may transfer the conversation to (see
            :func:`agent_loop`); their tools join the driver's.
        agent_name: the starting agent's name (with ``handoffs``).
    """

    log: EventLog | None
    handoffs: Any
    agent_name: str | None


class _Driving(TypedDict, total=False):
    clock: Clock | None
    signal: CancelToken | None
    on_event: OnEvent | None
    inbox: Inbox | None
    tool_workers: int | None


class DriveOptions(_Driving, total=False):
    """How a driver runs the loop (:func:`agentloop.drive`'s options).

    Keyword Args:
        clock: returns the time stamped on every reply (default ``time.time``).
        signal: a :class:`CancelToken` to stop the run cooperatively.
        on_pause: answers each ``Pause`` with ``Resume`` or ``Cancel``; without it a
            pause ends the run cancelled with the pause's reason.
        on_event: called with each event as the loop records it.
        inbox: an :class:`Inbox` other threads send replies through.
        tool_workers: how many calls of a batch run at once.
    """

    on_pause: OnPause | None


class AsyncDriveOptions(_Driving, total=False):
    """:class:`DriveOptions` for the asyncio drivers: ``on_pause`` may be ``async def``.

    Keyword Args:
        on_pause: as for :class:`DriveOptions`, a plain function or ``async def``.
    """

    on_pause: Any


class RunOptions(LoopOptions, DriveOptions, total=False):
    """What :func:`agentloop.run` and :func:`agentloop.run_stream` take: the loop's
    options and the driver's (see :class:`LoopOptions`, :class:`DriveOptions`)."""


class AsyncRunOptions(LoopOptions, AsyncDriveOptions, total=False):
    """What :func:`agentloop.arun` and :func:`agentloop.arun_stream` take."""


def keys(family: Any) -> frozenset[str]:
    """The keywords of a ``TypedDict`` family."""
    return frozenset(family.__required_keys__ | family.__optional_keys__)


SESSION_KEYS = keys(SessionOptions)
LOOP_KEYS = keys(LoopOptions)
DRIVE_KEYS = keys(DriveOptions)


def unexpected(where: str, key: str) -> TypeError:
    """Python's own error for a keyword a function does not take."""
    return TypeError(f"{where}() got an unexpected keyword argument {key!r}")


def split(
    options: Mapping[str, Any], where: str, loop_keys: frozenset[str] = LOOP_KEYS
) -> tuple[dict[str, Any], dict[str, Any]]:
    """``options`` as (the loop's, the driver's); any other keyword is refused.

    Raises:
        TypeError: a keyword ``where`` does not take.
    """
    loop: dict[str, Any] = {}
    drive: dict[str, Any] = {}
    for key, value in options.items():
        if key in loop_keys:
            loop[key] = value
        elif key in DRIVE_KEYS:
            drive[key] = value
        else:
            raise unexpected(where, key)
    return loop, drive
