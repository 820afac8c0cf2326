"""The run's signals from other threads or tasks: :class:`CancelToken` and :class:`Inbox`.

Both are set by someone else while a driver runs (a UI thread, a web handler, a
timer) and read by the driver at its own pace (see ``_driver.py``, "Cancelling").
They are their own module so that the drivers and the batch executors
(``_batch.py``) can all use them without importing one another.
"""

from __future__ import annotations

import collections
import math
import os
import threading

from ._messages import UserMessage
from ._protocol import Cancel, FollowUp, Reply, Steer
from ._validation import reply_problem, reserved_id_problem

__all__ = ["ANYTIME_REPLIES", "CancelToken", "Inbox"]


class CancelToken:
    """A flag to stop a running :func:`run`, settable from any thread.

    The first :meth:`cancel` wins; later calls change nothing.

    >>> token = CancelToken()
    >>> token.cancel("user pressed stop")
    >>> token.cancelled, token.reason
    (True, 'user pressed stop')
    """

    __slots__ = ("_event", "_lock", "_reason")

    def __init__(self) -> None:
        self._event = threading.Event()
        self._lock = threading.Lock()
        self._reason = ""

    def cancel(self, reason: str = "cancelled") -> None:
        """Ask the run to stop; it ends ``cancelled`` with ``reason``."""
        with self._lock:
            if not self._event.is_set():
                self._reason = reason
                self._event.set()

    @property
    def cancelled(self) -> bool:
        """Whether :meth:`cancel` was called."""
        return self._event.is_set()

    @property
    def reason(self) -> str:
        """The reason given to :meth:`cancel` (``""`` until then)."""
        return self._reason

    def wait(self, timeout: float | None = None) -> bool:
        """Block until cancelled or ``timeout`` seconds pass; return :attr:`cancelled`."""
        return self._event.wait(timeout)

    def __repr__(self) -> str:
        state = f"cancelled {self._reason!r}" if self.cancelled else "active"
        return f"<CancelToken {state}>"


#: The replies the engine accepts at ANY yield, whatever effect is pending: what
#: an :class:`Inbox` carries.
ANYTIME_REPLIES: tuple[type[Reply], ...] = (Cancel, Steer, FollowUp)


class Inbox:
    """Replies for a running driver, sent from any thread or task.

    Pass it to :func:`run`/:func:`drive` (or ``arun``/``adrive``) as ``inbox=``;
    at every yield the driver sends what is waiting here to the loop, in the order
    it was sent, before computing its own reply. Use it to stop a run from a UI
    thread or a web handler, or to redirect it while it works::

        inbox = Inbox()
        threading.Timer(5.0, inbox.cancel, ["too slow"]).start()
        result = run(messages, model=model, tools=tools, inbox=inbox)

        inbox.steer("Stop searching; answer with what you have.")  # from another thread
        inbox.follow_up("Then summarise it in one line.")

    A reply is taken when the run reaches its next yield: one sent while a tool
    or a model call is running waits for it to finish (nothing that happened is
    lost). Replies still waiting when the run ends stay here (:func:`len`).
    """

    __slots__ = ("_lock", "_queue")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._queue: collections.deque[Reply] = collections.deque()

    def send(self, reply: Reply) -> None:
        """Queue ``reply`` for the loop (one of :data:`ANYTIME_REPLIES`).

        Its ``at`` is stamped by the driver's clock when it is sent to the loop,
        unless it has one. It is checked here, in the sender's thread, as the loop
        would check it: a bad reply is refused at once instead of failing the run.

        Raises:
            TypeError: ``reply`` is not a reply the loop accepts at any yield.
            ValueError: a field the loop would refuse (of the wrong type, a string
                with a lone surrogate, a non-finite ``at``, a message id in a
                namespace the loop makes ids in, such as ``tool-result-...``);
                nothing was queued.
        """
        if type(reply) not in ANYTIME_REPLIES:
            accepted = ", ".join(kind.__name__ for kind in ANYTIME_REPLIES)
            raise TypeError(f"an Inbox carries {accepted} replies, got {reply!r}")
        problem = reply_problem(reply)
        if problem is None and reply.at is not None and not math.isfinite(reply.at):
            problem = f"{type(reply).__name__}.at must be finite, got {reply.at!r}"
        if problem is None and type(reply) is not Cancel:  # a Steer or a FollowUp
            problem = reserved_id_problem(reply.message.id)  # type: ignore[union-attr]
        if problem is not None:
            raise ValueError(f"the Inbox refuses this {type(reply).__name__}: {problem}")
        with self._lock:
            self._queue.append(reply)

    def cancel(self, reason: str = "cancelled") -> None:
        """Stop the run: queue ``Cancel(reason)``."""
        self.send(Cancel(reason=reason))

    def steer(self, message: UserMessage | str) -> None:
        """Redirect the run: queue ``Steer(message)`` (see :class:`Steer`).

        A ``str`` becomes a :class:`UserMessage` with a fresh random id (ids must be
        unique in the run; pass a ``UserMessage`` to choose it).
        """
        self.send(Steer(_user_message(message)))

    def follow_up(self, message: UserMessage | str) -> None:
        """Ask one more thing once the run would complete: queue ``FollowUp(message)``
        (see :class:`FollowUp`; a ``str`` as for :meth:`steer`)."""
        self.send(FollowUp(_user_message(message)))

    def take(self) -> Reply | None:
        """Remove and return the oldest waiting reply, or ``None`` (what drivers call)."""
        if not self._queue:  # the common case, without the lock
            return None
        with self._lock:
            return self._queue.popleft() if self._queue else None

    def take_message(self) -> Steer | FollowUp | None:
        """:meth:`take`, only if the oldest waiting reply is a ``Steer`` or a
        ``FollowUp`` (else ``None``, and it stays)."""
        if not self._queue:
            return None
        with self._lock:
            queue = self._queue
            if queue and type(queue[0]) in (Steer, FollowUp):
                return queue.popleft()  # type: ignore[return-value]
            return None

    def __len__(self) -> int:
        return len(self._queue)

    def __repr__(self) -> str:
        return f"<Inbox {len(self._queue)} waiting>"


def _user_message(message: UserMessage | str) -> UserMessage:
    if type(message) is str:
        return UserMessage(f"inbox-{os.urandom(8).hex()}", message)
    if type(message) is not UserMessage:
        raise TypeError(f"message must be a UserMessage or a str, got {message!r}")
    return message
