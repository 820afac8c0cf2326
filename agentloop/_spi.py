"""The internal interface ``replay`` and ``agentloop.temporal`` build on (DESIGN §24).

Those packages use ``agentloop``'s public names and, beyond them, only what this
module re-exports: the few helpers a log reader, a durable runner or a workflow
shares with the drivers, which are not part of the public API (they may change
between releases together with their users in this distribution). A test
(``tests/test_architecture.py``) fails if ``replay/`` or ``agentloop/temporal/``
imports any other private ``agentloop`` module. Adding a name here is a decision:
say which package needs it, and why the public API does not serve.

Who uses what:

- ``decode_deep``, ``deep_encode``, ``deep_parse``: ``replay/_log.py`` (values nested
  past what msgspec decodes);
- ``MAX_ANSWER_DEPTH``, ``answer_problem``: ``replay/_store.py`` and
  ``agentloop/temporal/_client.py`` (what a stored or sent answer may hold);
- ``clean_text``: ``replay/_store.py``, ``replay/_durable.py`` (a str SQLite can store);
- ``model_method``, ``tools_problem``: ``replay/_durable.py`` (the drivers' checks of a
  model and of a loop's tools);
- ``follow``, ``RecordedOutput``, ``recorded_handoffs``: ``replay/_replay.py`` (the
  DEBUG log of each event; a replayed run's structured output and handoffs);
- ``output_check``: ``agentloop/temporal/_client.py`` (a session's output, decoded; an
  agent tool's ``OutputSpec``), ``agentloop/temporal/_workflow.py`` (a child session's
  output type against its agent tool's) and ``replay/_durable.py`` (a continued
  session's output type against its recording);
- ``content_structure_problem``, ``parts_problem``: ``agentloop/temporal`` (a tool's
  blocks, checked in its activity and its workflow as the drivers check them, so
  the log is the one :func:`agentloop.run` writes);
- ``compaction_problem``: ``replay/_replay.py`` (a recorded compaction policy against
  the one a replay is given: the built-ins' names are the loop's business);
- ``reserved_id_problem``: ``replay/_store.py`` (a queued message may not take an id in
  a namespace the loop makes ids in);
- ``SessionOptions``, ``DriveOptions``, ``AsyncDriveOptions``, ``OnEvent``,
  ``SESSION_KEYS``, ``split``: ``replay/_durable.py`` (the option families of
  ``agentloop/_keywords.py``, which ``run_durable`` takes with its lease's);
- ``hosting``, ``child_session_id``: ``replay/_durable.py`` (a durable session's agent
  tools run their children as stored sessions, DESIGN §26);
- ``handoff_tools``: ``replay/_durable.py`` (a durable session's handoffs' tools join
  its driver's, as ``run`` adds them, DESIGN §26);
- ``offload``: ``replay/_durable.py`` (``arun_durable`` runs the store's calls, one or
  more per step, on the async drivers' reused worker threads: ``asyncio.to_thread``
  costs several times as much per call).
"""

from __future__ import annotations

from ._caller import hosting
from ._codec import decode_deep
from ._context import compaction_problem
from ._deep import encode as deep_encode
from ._deep import parse as deep_parse
from ._driver import model_method, tools_problem
from ._handoffs import handoff_tools, recorded_handoffs
from ._json import MAX_ANSWER_DEPTH, answer_problem, clean_text
from ._keywords import SESSION_KEYS, AsyncDriveOptions, DriveOptions, OnEvent, SessionOptions, split
from ._logging import follow
from ._offload import offload
from ._output import RecordedOutput, output_check
from ._tree import child_session_id
from ._validation import content_structure_problem, parts_problem, reserved_id_problem

__all__ = [
    "MAX_ANSWER_DEPTH",
    "SESSION_KEYS",
    "AsyncDriveOptions",
    "DriveOptions",
    "OnEvent",
    "RecordedOutput",
    "SessionOptions",
    "answer_problem",
    "child_session_id",
    "clean_text",
    "compaction_problem",
    "content_structure_problem",
    "decode_deep",
    "deep_encode",
    "deep_parse",
    "follow",
    "handoff_tools",
    "hosting",
    "model_method",
    "offload",
    "output_check",
    "parts_problem",
    "recorded_handoffs",
    "reserved_id_problem",
    "split",
    "tools_problem",
]
