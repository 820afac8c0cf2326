"""A workflow subclass written in a user's own file works, whatever its annotations.

docs/durable.md tells users to subclass ``AgentLoopWorkflow`` (hooks, structured
output) and to write the ``@workflow.run`` method again. Temporal compares that
method's parameters with ``__init__``'s as written: ``session: RawValue`` is the
class in a plain module and the string ``"RawValue"`` under ``from __future__
import annotations``. Each variant below is a file of its own, run in a fresh
process against the test session's dev server: the class must be accepted and its
session must run to the typed output.
"""

from __future__ import annotations

import inspect
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from temporalio import workflow
from temporalio.common import RawValue

from agentloop.temporal import AgentLoopWorkflow

from .conftest import Temporal

AGENT = """\
{header}
import msgspec
from temporalio import workflow
{import_raw_value}

from agentloop.temporal import AgentLoopWorkflow


class Verdict(msgspec.Struct):
    approved: bool
    reason: str


@workflow.defn(name="review-agent")
class ReviewAgent(AgentLoopWorkflow):
    def output(self):
        return Verdict

    @workflow.run
    async def run(self, session: {raw_value}) -> {raw_value}:
        return await super().run(session)
"""

MAIN = """\
import asyncio
import os
import sys

from temporalio.client import Client

from agentloop import FunctionModel, ScriptedResponse, UserMessage
from agentloop.temporal import start_session, worker
from review import ReviewAgent, Verdict

VERDICT = '{"approved": true, "reason": "looks right"}'


async def main() -> None:
    client = await Client.connect(os.environ["TEMPORAL_ADDRESS"])
    model = FunctionModel(lambda request: ScriptedResponse.text("r1", VERDICT))
    queue = os.environ["QUEUE"]
    async with worker(client, task_queue=queue, model=model, tools=[], workflows=[ReviewAgent]):
        session = await start_session(
            client, queue, [UserMessage("u1", "Review this.")], task_queue=queue,
            workflow="review-agent", output_retries=1,
        )
        result = await session.result(output=Verdict)
    print(result.status, result.output)


asyncio.run(main())
# A short-lived process with a Temporal client may abort while the interpreter
# finalizes ("PyGILState_Release: thread state ... must be current",
# temporalio/sdk-python#300); the run is over, so skip the finalization.
sys.stdout.flush()
os._exit(0)
"""

VARIANTS = {
    "plain module": ("", "from temporalio.common import RawValue", "RawValue"),
    "future annotations": (
        "from __future__ import annotations",
        "from temporalio.common import RawValue",
        "RawValue",
    ),
    "future annotations, qualified name": (
        "from __future__ import annotations",
        "import temporalio.common",
        "temporalio.common.RawValue",
    ),
}


@pytest.mark.parametrize("variant", VARIANTS)
def test_a_subclass_in_a_users_file_runs_its_sessions(
    temporal: Temporal, tmp_path: Path, variant: str
) -> None:
    header, import_raw_value, raw_value = VARIANTS[variant]
    agent = AGENT.format(header=header, import_raw_value=import_raw_value, raw_value=raw_value)
    (tmp_path / "review.py").write_text(agent, encoding="utf-8")
    (tmp_path / "main.py").write_text(MAIN, encoding="utf-8")
    queue = f"review-{variant.replace(' ', '-').replace(',', '')}-{os.getpid()}"
    done = subprocess.run(
        [sys.executable, "main.py"],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
        cwd=tmp_path,
        env={**os.environ, "TEMPORAL_ADDRESS": temporal.target, "QUEUE": queue},
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == "completed Verdict(approved=True, reason='looks right')\n"


# --------------------------------------------------------------------------- the rule


def define(namespace: dict[str, object], source: str) -> type:
    # dont_inherit: this module's `from __future__ import annotations` must not apply.
    exec(compile(textwrap.dedent(source), "<subclass>", "exec", dont_inherit=True), namespace)
    cls = namespace["Agent"]
    assert isinstance(cls, type)
    return cls


def test_the_generated_init_has_the_subclass_runs_parameters_as_written() -> None:
    agent = define(
        {"workflow": workflow, "AgentLoopWorkflow": AgentLoopWorkflow, "RawValue": RawValue},
        """
        class Agent(AgentLoopWorkflow):
            @workflow.run
            async def run(self, value: "RawValue") -> RawValue:
                return await super().run(value)
        """,
    )
    parameters = inspect.signature(agent.__init__).parameters  # type: ignore[misc]
    assert [(p.name, p.annotation) for p in parameters.values()] == [
        ("self", inspect.Parameter.empty),
        ("value", "RawValue"),
    ]
    assert agent.__init__.__qualname__ == "Agent.__init__"  # type: ignore[misc]


SUBCLASSES_LEFT_ALONE = {
    "no run of its own": """
        class Agent(AgentLoopWorkflow):
            def hooks(self):
                return None
        """,
    "its own __init__": """
        class Agent(AgentLoopWorkflow):
            @workflow.init
            def __init__(self, session: RawValue) -> None:
                super().__init__(session)

            @workflow.run
            async def run(self, session: RawValue) -> RawValue:
                return await super().run(session)
        """,
    "a run with two arguments": """
        class Agent(AgentLoopWorkflow):
            @workflow.run
            async def run(self, session: RawValue, extra: int) -> RawValue:
                return await super().run(session)
        """,
    "a run with a default": """
        class Agent(AgentLoopWorkflow):
            @workflow.run
            async def run(self, session: RawValue = None) -> RawValue:
                return await super().run(session)
        """,
    "a run with a keyword-only argument": """
        class Agent(AgentLoopWorkflow):
            @workflow.run
            async def run(self, *, session: RawValue) -> RawValue:
                return await super().run(session)
        """,
}


@pytest.mark.parametrize("case", SUBCLASSES_LEFT_ALONE)
def test_a_subclass_that_does_not_fit_is_left_alone(case: str) -> None:
    namespace = {"workflow": workflow, "AgentLoopWorkflow": AgentLoopWorkflow, "RawValue": RawValue}
    agent = define(namespace, SUBCLASSES_LEFT_ALONE[case])
    if case == "its own __init__":
        assert agent.__init__ is agent.__dict__["__init__"]  # type: ignore[misc]
    else:
        assert agent.__init__ is AgentLoopWorkflow.__init__  # type: ignore[misc]
