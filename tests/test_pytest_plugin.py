"""The pytest plugin: ``--agentloop-record`` and the ``agent_cassette`` fixture.

End to end with ``pytester`` (generated test files run in-process: record, then
replay; change the agent, replay fails with a readable diff; ...), then the
cassette object directly for the smaller cases. No test touches the network: the
"real" model is a ScriptedModel.
"""

from __future__ import annotations

import hashlib
import inspect
import os
import shutil
from importlib.metadata import entry_points
from pathlib import Path

import pytest

import agentloop
from agentloop import (
    HookRegistry,
    PauseRequest,
    ScriptedModel,
    ScriptedResponse,
    ToolCall,
    ToolResultMessage,
    UserMessage,
    tool,
)
from replay import read_log
from replay.pytest_plugin import _CONFIG, _DRIVER_ONLY, RECORD_MODES, AgentCassette, _file_name


def _plugin_args() -> list[str]:
    # Once the package is installed with its pytest11 entry point the plugin loads
    # by itself; loading it twice (-p as well) would be an error.
    for ep in entry_points(group="pytest11"):
        if ep.value == "replay.pytest_plugin":
            return []
    return ["-p", "replay.pytest_plugin"]


AGENT = '''
from agentloop import HookRegistry, ScriptedModel, ScriptedResponse, ToolCall, UserMessage, tool

SYSTEM = "Be brief."
ANSWER = "20 + 22 = 42."
CALLS = []


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    CALLS.append((a, b))
    return a + b


def hooks():
    registry = HookRegistry()
    # HOOKS
    return registry


def test_adds(agent_cassette):
    model = ScriptedModel([
        ScriptedResponse.tool_calls("r1", ToolCall("c1", "add", {"a": 20, "b": 22})),
        ScriptedResponse.text("r2", ANSWER),
    ])
    live = agent_cassette.recording
    result = agent_cassette.run(
        [UserMessage("u1", "What is 20 + 22?")],
        model=model, tools=[add], system=SYSTEM, hooks=hooks(),
    )
    assert result.status == "completed"
    assert result.final_text == ANSWER
    # The model and the tool run only when recording.
    assert model.call_count == (2 if live else 0)
    assert CALLS == ([(20, 22)] if live else [])
    assert [e.type for e in agent_cassette.events][-1] == "run.finished"
'''


@pytest.fixture
def agent_file(pytester: pytest.Pytester) -> Path:
    return pytester.makepyfile(test_agent=AGENT)


# Inner sessions skip plugins that only cost time here (hypothesis: ~0.5 s each).
_QUIET = ("-p", "no:cacheprovider", "-p", "no:hypothesispytest", "-p", "no:langsmith_plugin")
# The plugin module is imported already (by this file), so the inner session
# cannot assert-rewrite it; that is expected.
_NO_REWRITE_WARNING = ("-W", "ignore::pytest.PytestAssertRewriteWarning")


def run_inner(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    """Run pytest in-process in ``pytester.path`` with the plugin loaded."""
    return pytester.runpytest(*_plugin_args(), *_QUIET, *_NO_REWRITE_WARNING, *args)


def _cassette(pytester: pytest.Pytester, name: str = "test_adds") -> Path:
    return pytester.path / "cassettes" / "test_agent" / f"{name}.jsonl"


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new))
    # An edit of the same size within the same second leaves the cached bytecode
    # looking fresh (pytest 8 checks mtime and size): drop it, as an editor's save
    # a second later would make it stale.
    shutil.rmtree(path.parent / "__pycache__", ignore_errors=True)


# --------------------------------------------------------------------------- end to end


def test_record_once_then_replay(pytester: pytest.Pytester, agent_file: Path) -> None:
    recorded = run_inner(pytester, "--agentloop-record=once")
    recorded.assert_outcomes(passed=1)
    recorded.stdout.fnmatch_lines(
        [
            "agentloop: --agentloop-record=once*",
            "*agentloop: 1 cassette(s) recorded*",
            "cassettes/test_agent/test_adds.jsonl",
        ]
    )
    cassette = _cassette(pytester)
    data = cassette.read_bytes()
    assert [e.type for e in read_log(cassette)][:2] == ["session.start", "message.accepted"]

    replayed = run_inner(pytester)
    replayed.assert_outcomes(passed=1)
    assert "agentloop:" not in replayed.stdout.str()  # no header, nothing recorded
    assert cassette.read_bytes() == data

    # `once` leaves an existing cassette alone (the test replays it).
    run_inner(pytester, "--agentloop-record=once").assert_outcomes(passed=1)
    assert cassette.read_bytes() == data


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        # The session's start: compared with the test's current arguments.
        ('SYSTEM = "Be brief."', 'SYSTEM = "Be terse."', "system: 'Be brief.' -> 'Be terse.'"),
        (
            '"""Add two integers."""',
            '"""Add two numbers."""',
            "tools*'Add two integers.'* -> *'Add two numbers.'*",
        ),
        (
            '"What is 20 + 22?"',
            '"What is 22 + 20?"',
            "message.content: 'What is 20 + 22?' -> 'What is 22 + 20?'",
        ),
        # Mid-run: a hook now rewrites the tool call's arguments.
        (
            "# HOOKS",
            'registry.on("before_tool_call", lambda p: p["arguments"].update(b=1))',
            "call.arguments.b: 22 -> 1",
        ),
    ],
    ids=["system-prompt", "tool-description", "initial-message", "hook"],
)
def test_changed_agent_fails_with_a_readable_diff(
    pytester: pytest.Pytester, agent_file: Path, old: str, new: str, expected: str
) -> None:
    run_inner(pytester, "--agentloop-record=once").assert_outcomes(passed=1)
    _edit(agent_file, old, new)
    result = run_inner(pytester)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*agentloop: the agent behaves differently from its recorded session",
            "cassette: cassettes/test_agent/test_adds.jsonl",
            "replay diverged at event #*",
            "  recorded: *",
            "  regenerated: *",
            "  differences (recorded -> regenerated):",
            f"    {expected}",
            "If the change is intended, record the session again:",
            "  pytest --agentloop-record=all test_agent.py::test_adds",
        ]
    )
    # pytest.fail(pytrace=False): the report, not a traceback into the plugin.
    assert "pytest_plugin.py" not in result.stdout.str()


def test_missing_cassette_fails_with_the_command_to_record_it(
    pytester: pytest.Pytester, agent_file: Path
) -> None:
    result = run_inner(pytester)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*agentloop: no cassette for this session: cassettes/test_agent/test_adds.jsonl",
            "Record it once, running the real model and tools:",
            "  pytest --agentloop-record=once test_agent.py::test_adds",
        ]
    )
    assert not (pytester.path / "cassettes").exists()


def test_record_all_rewrites(pytester: pytest.Pytester, agent_file: Path) -> None:
    run_inner(pytester, "--agentloop-record=once").assert_outcomes(passed=1)
    cassette = _cassette(pytester)
    before = cassette.read_bytes()
    # The model now answers differently: a replay cannot know (the model is
    # not called), so the old cassette replays and its old answer fails the test...
    _edit(agent_file, 'ANSWER = "20 + 22 = 42."', 'ANSWER = "It is 42."')
    run_inner(pytester).assert_outcomes(failed=1)
    # ...until the session is recorded again.
    rerecorded = run_inner(pytester, "--agentloop-record=all")
    rerecorded.assert_outcomes(passed=1)
    rerecorded.stdout.fnmatch_lines(["*agentloop: 1 cassette(s) recorded*"])
    assert cassette.read_bytes() != before
    assert read_log(cassette)[-1].final_text == "It is 42."
    run_inner(pytester).assert_outcomes(passed=1)


def test_record_mode_is_checked_by_argparse(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_nothing="def test_nothing(): pass")
    result = run_inner(pytester, "--agentloop-record=sometimes")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--agentloop-record: invalid choice: 'sometimes'*"])


def test_help_shows_one_option_group(pytester: pytest.Pytester) -> None:
    result = run_inner(pytester, "--help")
    result.stdout.fnmatch_lines(
        ["agentloop: record and replay agent sessions:", "  --agentloop-record=*"]
    )


def test_tests_without_the_fixture_are_untouched(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_plain="def test_plain(): pass")
    result = run_inner(pytester, "--agentloop-record=all")
    result.assert_outcomes(passed=1)
    assert "cassette(s) recorded" not in result.stdout.str()
    assert not (pytester.path / "cassettes").exists()


def test_cassette_names_follow_classes_params_and_repeated_runs(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(
        test_names="""
import pytest
from agentloop import ScriptedModel, ScriptedResponse, UserMessage


def session(cassette, text):
    model = ScriptedModel([ScriptedResponse.text("r1", text)])
    return cassette.run([UserMessage("u1", "hi")], model=model, tools=[]).final_text


class TestGreeting:
    @pytest.mark.parametrize("who", ["a/b", "c"])
    def test_hello(self, agent_cassette, who):
        assert session(agent_cassette, who) == who
        assert session(agent_cassette, "again") == "again"
"""
    )
    run_inner(pytester, "--agentloop-record=once").assert_outcomes(passed=2)
    folder = pytester.path / "cassettes" / "test_names"
    # "a/b" cannot be in a file name: made safe, and told apart by a hash.
    digest = _digest("TestGreeting.test_hello[a/b]")
    assert sorted(p.name for p in folder.iterdir()) == [
        f"TestGreeting.test_hello[a_b]-{digest}.2.jsonl",
        f"TestGreeting.test_hello[a_b]-{digest}.jsonl",
        "TestGreeting.test_hello[c].2.jsonl",
        "TestGreeting.test_hello[c].jsonl",
    ]
    run_inner(pytester).assert_outcomes(passed=2)


def _digest(name: str) -> str:
    return hashlib.sha256(name.encode()).hexdigest()[:12]


SESSIONS = """
import pytest
from agentloop import ScriptedModel, ScriptedResponse, UserMessage


@pytest.mark.parametrize("who", IDS, ids=IDS)
def test_hello(agent_cassette, who):
    model = ScriptedModel([ScriptedResponse.text("r1", who)])
    result = agent_cassette.run([UserMessage("u1", "hi")], model=model, tools=[])
    assert result.final_text == who
"""


def test_cassette_names_that_sanitize_alike_get_their_own_files(
    pytester: pytest.Pytester,
) -> None:
    # "1/2" and "1_2" were one file; so were "a::b" and "a.b" (the nodeid split at
    # "::"); a long name was cut to 200 characters.
    long = "x" * 300
    ids = ["1/2", "1_2", "a::b", "a.b", long, long + "y"]
    pytester.makepyfile(test_ids=SESSIONS.replace("IDS", repr(ids)))
    run_inner(pytester, "--agentloop-record=once").assert_outcomes(passed=6)
    names = sorted(p.name for p in (pytester.path / "cassettes" / "test_ids").iterdir())
    cut = f"test_hello[{long}"[:200]
    assert names == sorted(
        [
            f"test_hello[1_2]-{_digest('test_hello[1/2]')}.jsonl",
            "test_hello[1_2].jsonl",
            f"test_hello[a__b]-{_digest('test_hello[a::b]')}.jsonl",
            "test_hello[a.b].jsonl",
            f"{cut}-{_digest(f'test_hello[{long}]')}.jsonl",
            f"{cut}-{_digest(f'test_hello[{long}y]')}.jsonl",
        ]
    )
    folder = pytester.path / "cassettes" / "test_ids"
    finals = [getattr(read_log(folder / name)[-1], "final_text", None) for name in names]
    assert sorted(map(str, finals)) == sorted(ids)
    run_inner(pytester).assert_outcomes(passed=6)


def test_tests_that_would_share_a_cassette_fail_clearly(pytester: pytest.Pytester) -> None:
    # Names that differ by case alone are one file on macOS and Windows.
    pytester.makepyfile(test_case=SESSIONS.replace("IDS", repr(["Paris", "paris"])))
    result = run_inner(pytester, "--agentloop-record=once")
    result.assert_outcomes(passed=1, errors=1)
    assert (
        "\nagentloop: the tests test_case.py::test_hello[Paris] and "
        "test_case.py::test_hello[paris] would share the cassette "
        "cassettes/test_case/test_hello[paris].jsonl (on macOS and Windows, file names "
        "that differ only by case are one file); rename one of them or give its "
        "parameters other ids\n"
    ) in result.stdout.str()
    assert [p.name for p in (pytester.path / "cassettes" / "test_case").iterdir()] == [
        "test_hello[Paris].jsonl"
    ]


COUNTED = """
import pathlib
from agentloop import ScriptedModel, ScriptedResponse, UserMessage


def test_sessions(agent_cassette):
    count = int(pathlib.Path("count.txt").read_text())
    for index in range(count):
        model = ScriptedModel([ScriptedResponse.text("r1", str(index))])
        agent_cassette.run([UserMessage("u1", "hi")], model=model, tools=[])
    assert pathlib.Path("fail.txt").read_text() == "no"
"""


def test_record_all_removes_the_cassettes_of_sessions_no_longer_run(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(test_counted=COUNTED)
    folder = pytester.path / "cassettes" / "test_counted"
    count, fail = pytester.path / "count.txt", pytester.path / "fail.txt"
    count.write_text("3")
    fail.write_text("no")
    run_inner(pytester, "--agentloop-record=all").assert_outcomes(passed=1)
    three = ["test_sessions.2.jsonl", "test_sessions.3.jsonl", "test_sessions.jsonl"]
    assert sorted(p.name for p in folder.iterdir()) == three
    # Another test's cassettes and other files are left alone.
    (folder / "test_sessions_more.2.jsonl").write_text("")
    (folder / "notes.txt").write_text("")
    kept = ["notes.txt", "test_sessions_more.2.jsonl"]
    # A failing test removes nothing; neither does `once` (nor a replay).
    count.write_text("1")
    fail.write_text("yes")
    run_inner(pytester, "--agentloop-record=all").assert_outcomes(failed=1)
    assert sorted(p.name for p in folder.iterdir()) == sorted([*three, *kept])
    fail.write_text("no")
    run_inner(pytester, "--agentloop-record=once").assert_outcomes(passed=1)
    assert sorted(p.name for p in folder.iterdir()) == sorted([*three, *kept])
    # A passing `all` run of 1 session removes sessions 2 and 3, and says so.
    result = run_inner(pytester, "--agentloop-record=all")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        [
            "*agentloop: 1 cassette(s) recorded*",
            "cassettes/test_counted/test_sessions.jsonl",
            "*agentloop: 2 cassette(s) removed (stale)*",
            "cassettes/test_counted/test_sessions.2.jsonl",
            "cassettes/test_counted/test_sessions.3.jsonl",
        ]
    )
    assert sorted(p.name for p in folder.iterdir()) == sorted(["test_sessions.jsonl", *kept])
    run_inner(pytester).assert_outcomes(passed=1)
    # No session at all: its last cassette goes too.
    count.write_text("0")
    run_inner(pytester, "--agentloop-record=all").assert_outcomes(passed=1)
    assert sorted(p.name for p in folder.iterdir()) == kept
    # And without a cassette folder there is nothing to remove.
    shutil.rmtree(pytester.path / "cassettes")
    run_inner(pytester, "--agentloop-record=all").assert_outcomes(passed=1)
    assert not (pytester.path / "cassettes").exists()


# --------------------------------------------------------------------------- the cassette object


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def _model() -> ScriptedModel:
    return ScriptedModel(
        [
            ScriptedResponse.tool_calls("r1", ToolCall("c1", "add", {"a": 1, "b": 2})),
            ScriptedResponse.text("r2", "3"),
        ]
    )


def _cassette_at(tmp_path: Path, mode: str) -> AgentCassette:
    return AgentCassette(directory=tmp_path, name="session", mode=mode, rootpath=tmp_path)


MESSAGES = [UserMessage("u1", "1 + 2?")]


def test_cassette_records_and_replays(tmp_path: Path) -> None:
    recorder = _cassette_at(tmp_path, "once")
    assert recorder.recording
    assert recorder.path == tmp_path / "session.jsonl"
    live = recorder.run(MESSAGES, model=_model(), tools=[add], max_steps=4)
    assert recorder.paths == [tmp_path / "session.jsonl"]
    assert recorder.path == tmp_path / "session.2.jsonl"
    assert list(recorder.events) == read_log(tmp_path / "session.jsonl")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["session.jsonl"]

    player = _cassette_at(tmp_path, "none")
    assert not player.recording
    replayed = player.run(MESSAGES, model=None, tools=[add], max_steps=4, clock=lambda: 0.0)
    assert replayed == live
    assert player.events == recorder.events
    assert "session.2.jsonl" in repr(player)


def test_cassette_of_a_parallel_run_replays_and_checks_the_option(tmp_path: Path) -> None:
    recorder = _cassette_at(tmp_path, "once")
    live = recorder.run(MESSAGES, model=_model(), tools=[add], parallel_tools=True, tool_workers=2)
    assert recorder.events[0].parallel_tools
    player = _cassette_at(tmp_path, "none")
    assert player.run(MESSAGES, model=None, tools=[add], parallel_tools=True) == live
    with pytest.raises(pytest.fail.Exception, match="behaves differently"):
        _cassette_at(tmp_path, "none").run(MESSAGES, model=None, tools=[add])


def test_cassette_option_errors(tmp_path: Path) -> None:
    cassette = _cassette_at(tmp_path, "once")
    with pytest.raises(TypeError, match=r"agent_cassette\.events"):
        cassette.run(MESSAGES, model=_model(), tools=[add], log=agentloop.EventLog())
    with pytest.raises(TypeError, match="unexpected keyword argument 'max_step'"):
        cassette.run(MESSAGES, model=_model(), tools=[add], max_step=3)
    with pytest.raises(TypeError, match="needs a model"):
        cassette.run(MESSAGES, model=None, tools=[add])
    with pytest.raises(ValueError, match="mode must be one of"):
        AgentCassette(directory=tmp_path, name="x", mode="sometimes")
    assert not list(tmp_path.iterdir())


def test_cassette_options_cover_run() -> None:
    # Every option of agentloop.run is either compared on replay or driver-only.
    # (run takes them as **options: Unpack[RunOptions], DESIGN §24.)
    from agentloop._keywords import RunOptions, keys

    parameters = set(inspect.signature(agentloop.run).parameters) - {"options"} | keys(RunOptions)
    assert parameters == _CONFIG | _DRIVER_ONLY | {"messages", "model", "tools", "hooks", "log"}
    assert RECORD_MODES == ("none", "once", "all")


def test_changed_max_steps_diverges(tmp_path: Path) -> None:
    _cassette_at(tmp_path, "once").run(MESSAGES, model=_model(), tools=[add])
    with pytest.raises(pytest.fail.Exception, match=r"max_steps: 8 -> 5"):
        _cassette_at(tmp_path, "none").run(MESSAGES, model=None, tools=[add], max_steps=5)


def test_extra_initial_message_diverges(tmp_path: Path) -> None:
    _cassette_at(tmp_path, "once").run(MESSAGES, model=_model(), tools=[add])
    more = [*MESSAGES, UserMessage("u2", "and 3 + 4?")]
    with pytest.raises(pytest.fail.Exception) as info:
        _cassette_at(tmp_path, "none").run(more, model=None, tools=[add])
    assert "replay diverged at event #2" in str(info.value)
    assert "regenerated: #2 message.accepted" in str(info.value)


def test_invalid_transcript_session_replays(tmp_path: Path) -> None:
    # A tool result with no call before it: the loop refuses the transcript.
    bad = [UserMessage("u1", "hi"), ToolResultMessage("tool-result-x", "x", "add", "3")]
    live = _cassette_at(tmp_path, "once").run(bad, model=_model(), tools=[add])
    assert live.status == "failed"
    replayed = _cassette_at(tmp_path, "none").run(bad, model=None, tools=[add])
    assert replayed.status == "failed"
    with pytest.raises(pytest.fail.Exception, match="session starts differently"):
        _cassette_at(tmp_path, "none").run(MESSAGES, model=None, tools=[add])


def test_unreadable_cassette_fails_with_the_command_to_rerecord(tmp_path: Path) -> None:
    (tmp_path / "session.jsonl").write_text("not a log\n")
    with pytest.raises(pytest.fail.Exception) as info:
        _cassette_at(tmp_path, "none").run(MESSAGES, model=None, tools=[add])
    message = str(info.value)
    assert "cannot read the cassette session.jsonl" in message
    assert "pytest --agentloop-record=all" in message


def test_an_edited_cassette_fails_its_test(tmp_path: Path) -> None:
    _cassette_at(tmp_path, "once").run(MESSAGES, model=_model(), tools=[add])
    path = tmp_path / "session.jsonl"
    data = path.read_bytes()
    # A tool result edited by hand (it is stored once: in the reply).
    assert data.count(b'"content":"3"') == 1
    path.write_bytes(data.replace(b'"content":"3"', b'"content":"4"'))
    with pytest.raises(pytest.fail.Exception) as info:
        _cassette_at(tmp_path, "none").run(MESSAGES, model=None, tools=[add])
    message = str(info.value)
    assert message.startswith(
        "agentloop: the cassette session.jsonl was edited after it was recorded (its hash "
        "chain is broken at line "
    )
    assert "the hash chain is broken here" in message
    assert "pytest --agentloop-record=all" in message


def test_unfinished_cassette_fails(tmp_path: Path) -> None:
    _cassette_at(tmp_path, "once").run(MESSAGES, model=_model(), tools=[add])
    path = tmp_path / "session.jsonl"
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(b"".join(lines[:4]))  # header, start, message, step.start
    with pytest.raises(pytest.fail.Exception, match="ends before its run finished"):
        _cassette_at(tmp_path, "none").run(MESSAGES, model=None, tools=[add])
    path.write_bytes(lines[0])  # the header alone
    with pytest.raises(pytest.fail.Exception, match="holds no events"):
        _cassette_at(tmp_path, "none").run(MESSAGES, model=None, tools=[add])


def test_recording_that_raises_leaves_no_cassette(tmp_path: Path) -> None:
    hooks = HookRegistry()
    hooks.on("before_tool_call", lambda payload: PauseRequest("ask"))

    def on_pause(pause: object) -> agentloop.Resume:
        raise KeyboardInterrupt

    cassette = _cassette_at(tmp_path, "all")
    with pytest.raises(KeyboardInterrupt):
        cassette.run(MESSAGES, model=_model(), tools=[add], hooks=hooks, on_pause=on_pause)
    assert os.listdir(tmp_path) == []


def test_cassette_cut_after_its_initial_messages_diverges(tmp_path: Path) -> None:
    # A recording that died before its first step: the start matches, then the loop
    # goes on where the cassette stops.
    _cassette_at(tmp_path, "once").run(MESSAGES, model=_model(), tools=[add])
    path = tmp_path / "session.jsonl"
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(b"".join(lines[:3]))  # header, session.start, message.accepted
    with pytest.raises(pytest.fail.Exception) as info:
        _cassette_at(tmp_path, "none").run(MESSAGES, model=None, tools=[add])
    message = str(info.value)
    assert "the loop emitted more events than the log holds (2)" in message
    assert "regenerated: #2 step.start step 1  request-001" in message


@pytest.mark.parametrize("root", ["elsewhere", None])
def test_a_cassette_outside_the_root_is_shown_by_its_full_path(
    tmp_path: Path, root: str | None
) -> None:
    rootpath = None if root is None else tmp_path / root
    cassette = AgentCassette(
        directory=tmp_path / "cassettes", name="s", mode="none", rootpath=rootpath
    )
    with pytest.raises(pytest.fail.Exception) as info:
        cassette.run(MESSAGES, model=None, tools=[add])
    assert f"no cassette for this session: {tmp_path / 'cassettes' / 's.jsonl'}\n" in str(
        info.value
    )


def test_cassette_file_names(tmp_path: Path) -> None:
    assert _file_name("TestA.test_b[x-1.5]") == "TestA.test_b[x-1.5]"
    assert _file_name("a/b") == f"a_b-{_digest('a/b')}"
    assert _file_name("tab\there") == f"tab_here-{_digest('tab' + chr(9) + 'here')}"
    # Cut at 200 bytes, not characters, and never inside a character.
    wide = "é" * 150  # 300 bytes
    assert _file_name(wide) == "é" * 100 + "-" + _digest(wide)
    assert _file_name("a" + wide) == "a" + "é" * 99 + "-" + _digest("a" + wide)
    assert _file_name("a" * 200) == "a" * 200
    assert _file_name("a" * 201) == "a" * 200 + "-" + _digest("a" * 201)
    assert AgentCassette(directory=tmp_path, name="", mode="none").path == (
        tmp_path / "session.jsonl"
    )


TYPED = """
import msgspec
from agentloop import Limits, ScriptedModel, ScriptedResponse, UserMessage


class Point(msgspec.Struct):
    x: int
    y: int


def test_point(agent_cassette):
    model = ScriptedModel([
        ScriptedResponse.text("r1", "no"),
        ScriptedResponse.text("r2", '{"x": 1, "y": 2}'),
    ])
    result = agent_cassette.run(
        [UserMessage("u1", "A point?")], model=model, tools=[],
        output=Point, output_retries=1, max_steps=70, limits=Limits(agent_steps=70),
    )
    assert result.output == Point(1, 2)  # recorded or replayed: the type
"""


def test_a_cassette_with_limits_and_structured_output(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_typed=TYPED)
    run_inner(pytester, "--agentloop-record=once").assert_outcomes(passed=1)
    run_inner(pytester).assert_outcomes(passed=1)
