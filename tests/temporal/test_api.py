"""agentloop.temporal without a server: its public names, option checks, imports."""

from __future__ import annotations

import asyncio
import subprocess
import sys

import msgspec
import pytest
from temporalio.client import Client

import agentloop.temporal
from agentloop._json import MAX_ANSWER_DEPTH
from agentloop.temporal import (
    ActivityOptions,
    SessionActivities,
    SessionInput,
    worker,
)
from agentloop.temporal._client import AgentSession
from agentloop.temporal._wire import Answer, decode, raw
from tests.helpers import nested

from .app import MODEL


def test_the_package_exports_what_it_lists() -> None:
    public = {name for name in dir(agentloop.temporal) if not name.startswith("_")}
    assert set(agentloop.temporal.__all__) == public - {"temporalio"}


def test_importing_agentloop_does_not_import_temporalio() -> None:
    code = "import sys, agentloop, replay; print('temporalio' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout == "False\n"


def test_without_temporalio_the_import_says_what_to_install() -> None:
    code = (
        "import sys; sys.modules['temporalio'] = None\n"
        "try:\n"
        "    import agentloop.temporal\n"
        "except ImportError as exc:\n"
        "    print(exc)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert (
        out.stdout
        == 'agentloop.temporal needs temporalio: pip install "agentloop-replay[temporal]"\n'
    )


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"start_to_close_seconds": 0}, "start_to_close_seconds must be a positive number"),
        ({"heartbeat_seconds": float("nan")}, "heartbeat_seconds must be a positive number"),
        ({"max_interval_seconds": float("inf")}, "max_interval_seconds must be a positive"),
        ({"max_attempts": -1}, "max_attempts must be an int >= 0"),
        ({"max_attempts": True}, "max_attempts must be an int >= 0"),
        ({"backoff_coefficient": 0.5}, "backoff_coefficient must be a number >= 1"),
    ],
)
def test_activity_options_are_checked(options, message) -> None:
    with pytest.raises(ValueError, match=message):
        ActivityOptions(**options)


def test_activity_options_store_floats_and_travel_as_json() -> None:
    options = ActivityOptions(start_to_close_seconds=5, heartbeat_seconds=None, max_attempts=0)
    assert options.start_to_close_seconds == 5.0
    assert type(options.start_to_close_seconds) is float
    data = msgspec.json.encode(SessionInput(messages=(), tool_activity=options))
    assert decode(raw(data), SessionInput, "input").tool_activity == options


def test_a_payload_that_does_not_decode_names_what_and_where() -> None:
    from temporalio.exceptions import ApplicationError

    with pytest.raises(ApplicationError, match=r"invalid session input: .* `\$.max_steps`") as bad:
        decode(raw(b'{"messages":[],"max_steps":"8"}'), SessionInput, "session input")
    assert bad.value.non_retryable
    with pytest.raises(ApplicationError, match="Object contains unknown field `steps`"):
        decode(raw(b'{"messages":[],"steps":8}'), SessionInput, "session input")


def test_a_payload_nested_past_msgspec_is_invalid_not_a_recursion_error() -> None:
    # A RecursionError out of the resume signal's handler failed the workflow task,
    # which Temporal retries forever; now it is an invalid payload, refused.
    from temporalio.exceptions import ApplicationError

    # (Past what msgspec decodes on every Python: 3.13 goes deeper than 3.10-3.12.)
    deep = b'{"payload":' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    with pytest.raises(ApplicationError, match="invalid resume answer: nested too deep") as bad:
        decode(raw(deep), Answer, "resume answer")
    assert bad.value.non_retryable and bad.value.type == "InvalidPayload"


def test_a_resume_payload_is_checked_before_it_is_sent() -> None:
    class Handle:
        def __init__(self) -> None:
            self.sent: list[object] = []

        async def execute_update(self, *args: object) -> None:
            self.sent.append(args)

    handle = Handle()
    session = AgentSession(handle)  # type: ignore[arg-type]
    cyclic: dict[str, object] = {}
    cyclic["a"] = cyclic
    deep = nested(MAX_ANSWER_DEPTH + 1)
    with pytest.raises(
        ValueError, match=r"cannot be sent: it is not plain JSON: payload\.a: cyclic reference"
    ):
        asyncio.run(session.resume(cyclic))
    with pytest.raises(ValueError, match=f"nests {MAX_ANSWER_DEPTH + 1} levels deep"):
        asyncio.run(session.resume(deep))
    with pytest.raises(ValueError, match=r"payload\.x: nan is not a finite number"):
        asyncio.run(session.resume({"x": float("nan")}))
    assert handle.sent == []
    asyncio.run(session.resume(deep["a"]))  # as deep as allowed: sent
    assert len(handle.sent) == 1


def test_idempotency_key_outside_a_tool_call_is_none() -> None:
    # One key for every tier: agentloop.idempotency_key(), None outside a tool call.
    assert agentloop.idempotency_key() is None
    assert not hasattr(agentloop.temporal, "idempotency_key")


def test_worker_options_are_checked() -> None:
    client = object.__new__(Client)  # never used: the checks come first
    with pytest.raises(ValueError, match="would run nothing"):
        worker(client, task_queue="q", workflows=())
    with pytest.raises(TypeError, match="must have a stream"):
        worker(client, task_queue="q", model=object())
    with pytest.raises(ValueError, match="transcript_cache must be an int >= 0"):
        SessionActivities(model=MODEL, transcript_cache=-1)
    assert SessionActivities().activities() == []


def test_worker_defaults_are_chosen_for_recovery_and_can_be_overridden(temporal) -> None:
    from datetime import timedelta

    from agentloop.temporal import RECOVERY_OPTIONS

    async def config(**options: object) -> dict[str, object]:
        queue = f"recovery-{len(options)}"  # one worker per queue and process
        built = worker(temporal.client, task_queue=queue, model=MODEL, workflows=(), **options)
        return dict(built.config())

    defaults = temporal.run(config())
    for name, value in RECOVERY_OPTIONS.items():
        assert defaults[name] == value
    assert RECOVERY_OPTIONS["sticky_queue_schedule_to_start_timeout"] == timedelta(seconds=1)
    slow = timedelta(seconds=10)
    chosen = temporal.run(config(sticky_queue_schedule_to_start_timeout=slow))
    assert chosen["sticky_queue_schedule_to_start_timeout"] == slow
    assert chosen["max_heartbeat_throttle_interval"] == timedelta(seconds=1)
    # Every call of a session heartbeats every 2 s and retries half a second after
    # a lost worker, unless the session says otherwise.
    assert ActivityOptions().heartbeat_seconds == 2.0
    assert ActivityOptions().initial_interval_seconds == 0.5
