"""The engine's rules revision: behaviour changes that keep old logs replaying.

A log replays byte for byte only through the rules it was written under. When a
change to the loop would make an old log regenerate other events (a usage counted
elsewhere, a check added that an old run did not pass, ...), the change gets a new
*rules revision*, and the old behaviour stays, selected by the revision:

- ``session.start`` records the revision a run follows (``rules``; absent, i.e.
  ``0``, for every log written before there were revisions);
- :func:`agentloop.agent_loop` takes ``rules`` (default :data:`RULES_REVISION`, the
  newest) and the loop keeps to it; ``replay`` rebuilds a run with the revision
  its ``session.start`` records, so an old log regenerates as it was written;
- each change is a named constant below, the revision it came with, and the engine
  asks ``self._rules >= CONSTANT`` where the behaviour differs. A revision is never
  removed or reused, and a log of every revision is kept in ``fixtures/rules-<N>/``
  and replayed by the tests.

A revision changes no log format: the field is an ordinary field with a default.
A log whose revision is newer than this agentloop's refuses to replay (its
``session.start`` is rejected), rather than replaying under other rules.

Revisions
---------
0. agentloop 0.1: a model response's usage counts in ``RunResult.usage`` when the
   response is committed (``plan.commit``).
1. :data:`USAGE_WHEN_RECORDED`: a model reply's usage, and that of the attempts
   before it, counts when the reply is recorded (``plan.draft``), whatever
   happens next: a response the loop then rejects, or that stops with reason
   ``error`` or ``refusal``, and a ``ModelFailure``'s usage count too.
2. :data:`REPLY_IN_COMPLETE`: the reply that ended the run, when no earlier event
   recorded it (a cancel, an invalid chunk, a misused reply), is recorded in
   ``session.complete`` (its ``reply``), not in ``run.finished``, so a log cut
   right after ``session.complete`` still holds it and resumes to the same
   ``run.finished`` (revision 1 and before: in ``run.finished``; a cut log then
   resumes only when that reply was a cancel).
3. :data:`RESERVED_MESSAGE_IDS`: a ``Steer`` or ``FollowUp`` whose message id is
   in a namespace the loop makes ids in (``message-``, ``tool-result-``,
   ``output-retry-``: see :func:`agentloop._validation.reserved_id_problem`) is
   caller misuse (``CALLER_PROTOCOL_ERROR``). Revision 2 and before queued it: it
   could take the id of a pending tool result (two messages of one id, a
   transcript that no longer validates) or of the model's next response (whose
   valid response then failed the run, ``MODEL_PROTOCOL_ERROR``).
"""

from __future__ import annotations

from typing import Final

__all__ = [
    "REPLY_IN_COMPLETE",
    "RESERVED_MESSAGE_IDS",
    "RULES_REVISION",
    "USAGE_WHEN_RECORDED",
    "rules_problem",
]

#: A model reply's usage counts when it is recorded, not when it is committed.
USAGE_WHEN_RECORDED: Final = 1

#: The reply that ended the run is recorded in ``session.complete``, not ``run.finished``.
REPLY_IN_COMPLETE: Final = 2

#: A queued message may not take an id in a namespace the loop makes ids in.
RESERVED_MESSAGE_IDS: Final = 3

#: The newest rules revision: what new runs follow and ``session.start`` records.
RULES_REVISION: Final = RESERVED_MESSAGE_IDS


def rules_problem(rules: object) -> str | None:
    """Why ``rules`` is not a revision this agentloop follows, or ``None``."""
    if type(rules) is not int or rules < 0:
        return f"rules must be a rules revision (an int from 0), got {rules!r}"
    if rules > RULES_REVISION:
        return (
            f"rules revision {rules} is newer than this agentloop follows (up to "
            f"{RULES_REVISION}); a newer agentloop wrote it: upgrade agentloop"
        )
    return None
