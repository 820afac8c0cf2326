"""Local activities (``ActivityOptions(local=True)``, DESIGN §29: fewer round trips).

The model and tool calls run on the workflow's worker inside its workflow task:
no activity task is scheduled on the server, and the log is the log of the
default activities, of the loop driven by hand, and of :func:`agentloop.run`.
"""

from __future__ import annotations

from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType

from agentloop.temporal import ActivityOptions

from .app import MODEL, TOOLS
from .conftest import Temporal
from .helpers import drive_by_hand, encoded, run_in_process, serving

LOCAL = ActivityOptions(local=True)


@pytest.mark.parametrize(
    "options",
    [{"tool_activity": LOCAL}, {"tool_activity": LOCAL, "model_activity": LOCAL}],
    ids=["local tools", "local model and tools"],
)
def test_local_activities_run_the_session_with_the_same_log(
    temporal: Temporal, options: dict[str, Any]
) -> None:
    async def scenario() -> Any:
        async with serving(temporal) as start:
            session = await start(system="add 3", **options)
            result = await session.result()
            history = await session.handle.fetch_history()
            return result, await session.log(), history

    result, log, history = temporal.run(scenario())
    assert result.status == "completed" and result.steps == 4
    assert drive_by_hand(log) == encoded(log)
    in_process_result, in_process = run_in_process(log, model=MODEL, tools=TOOLS)
    assert in_process == encoded(log)
    assert in_process_result == result
    scheduled = [
        e for e in history.events if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
    ]
    markers = [e for e in history.events if e.event_type == EventType.EVENT_TYPE_MARKER_RECORDED]
    local_model = "model_activity" in options
    assert len(scheduled) == (0 if local_model else 4)  # the model calls, unless local
    assert len(markers) == 3 + (4 if local_model else 0)


def test_local_must_be_a_bool() -> None:
    with pytest.raises(ValueError, match="local must be a bool"):
        ActivityOptions(local=1)  # type: ignore[arg-type]
