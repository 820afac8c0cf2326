"""agentloop on Temporal: durable agent sessions across many workers (DESIGN §20).

Install the extra: ``pip install "agentloop-replay[temporal]"``. ``import agentloop``
never imports this package (nor ``temporalio``).

- :class:`AgentLoopWorkflow`: one session; the loop runs inside the workflow,
  each model call and each tool call is an activity, a ``Pause`` waits for the
  ``resume`` update, ``cancel`` ends it; queries ``pending`` and ``log``.
- :func:`worker`: a Temporal worker running sessions, model calls and tool calls
  with your model and tools (all three, or any part: see docs/durable.md).
- :func:`start_session`, :func:`get_session`, :class:`AgentSession`: the client
  side, with typed payloads.
- Tools read their idempotency key, ``<workflow id>:<call id>``, with
  :func:`agentloop.idempotency_key`, as in every tier.

Everything travels as msgspec JSON (``json/plain`` payloads): no data converter
to configure. Media blocks travel inline, up to one payload (2 MB); give every
client ``data_converter=blob_converter(BlobDirectory(path))`` (or a
:class:`BlobStore` of your own) and large ones travel by reference: their bytes
once in the store, their SHA-256 in the history. See docs/durable.md ("Temporal").
"""

try:
    import temporalio  # noqa: F401
except ImportError as exc:  # tested in a subprocess that hides temporalio
    raise ImportError(
        'agentloop.temporal needs temporalio: pip install "agentloop-replay[temporal]"'
    ) from exc

from ._activities import RETRIED_KINDS, SessionActivities
from ._blobs import BlobCodec, BlobDirectory, BlobStore, blob_converter
from ._client import AgentSession, get_session, start_session
from ._wire import (
    DEFAULT_BLOB_MIN_BYTES,
    DEFAULT_MODEL_ACTIVITY,
    DEFAULT_TOOL_ACTIVITY,
    MAX_PAYLOAD_BYTES,
    ActivityOptions,
    SessionInput,
)
from ._worker import PASSTHROUGH_MODULES, RECOVERY_OPTIONS, sandbox_runner, worker
from ._workflow import MODEL_ACTIVITY, TOOL_ACTIVITY, WORKFLOW_NAME, AgentLoopWorkflow

__all__ = [
    "DEFAULT_BLOB_MIN_BYTES",
    "DEFAULT_MODEL_ACTIVITY",
    "DEFAULT_TOOL_ACTIVITY",
    "MAX_PAYLOAD_BYTES",
    "MODEL_ACTIVITY",
    "PASSTHROUGH_MODULES",
    "RECOVERY_OPTIONS",
    "RETRIED_KINDS",
    "TOOL_ACTIVITY",
    "WORKFLOW_NAME",
    "ActivityOptions",
    "AgentLoopWorkflow",
    "AgentSession",
    "BlobCodec",
    "BlobDirectory",
    "BlobStore",
    "SessionActivities",
    "SessionInput",
    "blob_converter",
    "get_session",
    "sandbox_runner",
    "start_session",
    "worker",
]
