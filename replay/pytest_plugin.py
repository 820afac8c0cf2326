"""pytest plugin: record an agent session once, replay it in every later test run.

The ``agent_cassette`` fixture runs a session through :func:`agentloop.run`, the
way the code under test would, but only when asked to record; otherwise it
replays the session's log (its *cassette*) through the current code, without a
model and without calling any tool:

- ``--agentloop-record=none`` (default): replay. A missing cassette fails the
  test, saying how to record it; nothing reaches a network by accident.
- ``--agentloop-record=once``: record the sessions whose cassette is missing,
  replay the others.
- ``--agentloop-record=all``: record every session again (overwrite).

Cassettes are JSONL event logs (``replay.read_log`` reads them, hash chain
included: an edited cassette fails its test, naming the line) stored next to
the test file, in ``cassettes/<test module>/<test name>.jsonl``; commit them.
``<test name>`` is the test's class(es) and function, dot-separated, with its
parameter ids (``TestGreeting.test_hello[c]``). A name that cannot be a file name
as it is (it holds one of ``\\ / : * ? " < > |`` or a control character, or is
longer than 200 bytes) is made safe (``_`` for those characters, cut) and gets
``-`` and 12 hex digits of a hash of the full name, so two tests never share a
cassette; two tests whose cassettes would still be one file (on a case-insensitive
file system too) fail at setup, naming both. With ``--agentloop-record=all``, a
test that passes also removes its cassettes beyond the sessions it ran (left from
an older recording that ran more sessions).

A replay first rebuilds the session's start from the test's *current*
arguments (initial messages, tool specs, system prompt, ``max_steps``,
``budget``) and compares it with the recorded one, then feeds the recorded
model and tool replies through the current loop with the test's hooks
(:func:`replay.replay`). The first difference fails the test with the
:class:`replay.ReplayDivergence` report: which event, what was recorded, what
the code does now, field by field.

The plugin does no work unless a test uses the fixture: it adds the option,
reports what it recorded and removed, and looks at the outcome of the tests that
use the fixture; everything else happens inside ``agent_cassette``.
"""

from __future__ import annotations

import hashlib
import os
import re
import shlex
from collections.abc import Generator, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import pytest

if TYPE_CHECKING:
    from agentloop import Event, HookRegistry, Model, RunResult, Tool, ToolRegistry, ToolSpec

__all__ = ["CASSETTE_DIR", "RECORD_MODES", "AgentCassette"]

#: The values of ``--agentloop-record``.
RECORD_MODES: Final = ("none", "once", "all")
#: The folder, next to the test file, that holds the cassettes.
CASSETTE_DIR: Final = "cassettes"

_RECORDED: Final = pytest.StashKey[list[Path]]()
_REMOVED: Final = pytest.StashKey[list[Path]]()
# (cassette folder, case-folded file name) -> the nodeid that uses it.
_CLAIMED: Final = pytest.StashKey[dict[tuple[Path, str], str]]()
_CASSETTE: Final = pytest.StashKey["AgentCassette"]()
# run() options that only the driver uses; a replay has nothing to do with them.
_DRIVER_ONLY: Final = frozenset(
    ("signal", "on_pause", "clock", "started_at", "on_event", "inbox", "tool_workers")
)
# run() options that shape the session's start, compared on replay.
_CONFIG: Final = frozenset(
    (
        "system",
        "max_steps",
        "budget",
        "parallel_tools",
        "limits",
        "output",
        "output_retries",
        "compaction",
        "handoffs",
        "agent_name",
    )
)
_UNSAFE: Final = re.compile(r'[\x00-\x1f\\/:*?"<>|]')
_MAX_NAME_BYTES: Final = 200


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("agentloop", "agentloop: record and replay agent sessions")
    group.addoption(
        "--agentloop-record",
        action="store",
        dest="agentloop_record",
        default="none",
        choices=RECORD_MODES,
        help=(
            "when agent_cassette runs sessions live (with the real model and tools) "
            "and writes their cassettes: 'none' never (replay only; the default), "
            "'once' when a cassette is missing, 'all' always"
        ),
    )


def pytest_sessionstart(session: pytest.Session) -> None:
    session.config.stash[_RECORDED] = []
    session.config.stash[_REMOVED] = []
    session.config.stash[_CLAIMED] = {}


def pytest_report_header(config: pytest.Config) -> str | None:
    mode = config.getoption("agentloop_record")
    if mode == "none":
        return None
    return f"agentloop: --agentloop-record={mode} (sessions may call real models and tools)"


def pytest_terminal_summary(
    terminalreporter: pytest.TerminalReporter, config: pytest.Config
) -> None:
    for key, what in ((_RECORDED, "recorded"), (_REMOVED, "removed (stale)")):
        paths = config.stash.get(key, [])
        if paths:
            terminalreporter.write_sep("-", f"agentloop: {len(paths)} cassette(s) {what}")
            for path in paths:
                terminalreporter.write_line(_shown(path, config.rootpath))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, Any, None]:
    outcome = yield
    cassette = item.stash.get(_CASSETTE, None)
    if cassette is not None and call.when == "call" and outcome.get_result().passed:
        item.config.stash.get(_REMOVED, []).extend(cassette._remove_stale())


@pytest.fixture
def agent_cassette(request: pytest.FixtureRequest) -> AgentCassette:
    """Record (``--agentloop-record``) or replay this test's agent sessions.

    See :class:`AgentCassette`.
    """
    node = request.node
    config = request.config
    # The nodes below the test file (classes, the function with its parameter ids),
    # by name: unlike splitting the nodeid at "::", an id holding "::" stays whole.
    chain = node.listchain()
    files = [index for index, item in enumerate(chain) if isinstance(item, pytest.File)]
    names = [item.name for item in chain[files[-1] + 1 :]] if files else [node.name]
    directory = Path(node.path).parent / CASSETTE_DIR / Path(node.path).stem
    cassette = AgentCassette(
        directory=directory,
        name=".".join(names),
        mode=config.getoption("agentloop_record"),
        nodeid=node.nodeid,
        recorded=config.stash.get(_RECORDED, []),
        rootpath=config.rootpath,
    )
    claimed = config.stash.get(_CLAIMED, {})
    other = claimed.setdefault((directory, cassette._name.casefold()), node.nodeid)
    if other != node.nodeid:
        pytest.fail(
            f"agentloop: the tests {other} and {node.nodeid} would share the cassette "
            f"{_shown(cassette.path, config.rootpath)} (on macOS and Windows, file names "
            "that differ only by case are one file); rename one of them or give its "
            "parameters other ids",
            pytrace=False,
        )
    node.stash[_CASSETTE] = cassette
    return cassette


def _file_name(name: str) -> str:
    """``name`` if it can be a file name as it is; else a safe, cut version of it,
    ``-`` and a hash of all of it (so different names never give one file)."""
    safe = _UNSAFE.sub("_", name)
    encoded = safe.encode("utf-8", "surrogatepass")
    if safe == name and 0 < len(encoded) <= _MAX_NAME_BYTES:
        return name
    digest = hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()[:12]
    cut = encoded[:_MAX_NAME_BYTES].decode("utf-8", "ignore")
    return f"{cut}-{digest}"


class AgentCassette:
    """Records or replays the agent sessions of one test (the ``agent_cassette`` fixture).

    Call :meth:`run` where the test would call :func:`agentloop.run`. The first
    session of a test uses ``<test name>.jsonl``, later ones ``<test name>.2.jsonl``,
    ``.3``, and so on.

    Attributes:
        mode: the ``--agentloop-record`` value.
        events: the events of the last session (recorded, or regenerated by
            the replay); empty before the first :meth:`run`.
        paths: the cassette of every session run so far.
    """

    def __init__(
        self,
        *,
        directory: Path,
        name: str,
        mode: str,
        nodeid: str = "",
        recorded: list[Path] | None = None,
        rootpath: Path | None = None,
    ) -> None:
        if mode not in RECORD_MODES:
            raise ValueError(f"mode must be one of {RECORD_MODES}, got {mode!r}")
        self.mode = mode
        self.events: list[Event] = []
        self.paths: list[Path] = []
        self._directory = directory
        self._name = _file_name(name) if name else "session"
        self._nodeid = nodeid
        self._recorded = [] if recorded is None else recorded
        self._rootpath = rootpath

    @property
    def path(self) -> Path:
        """The cassette the next :meth:`run` reads or writes."""
        index = len(self.paths) + 1
        suffix = "" if index == 1 else f".{index}"
        return self._directory / f"{self._name}{suffix}.jsonl"

    @property
    def recording(self) -> bool:
        """Whether the next :meth:`run` runs live (calls the model and the tools).

        Handy to build a real model client only when it is needed::

            model = OpenAIChatModel(OpenAI(), "gpt-4o") if agent_cassette.recording else None
        """
        return self.mode == "all" or (self.mode == "once" and not self.path.exists())

    def run(
        self,
        messages: Sequence[Any],
        *,
        model: Model | None,
        tools: ToolRegistry | Iterable[Tool | ToolSpec],
        hooks: HookRegistry | None = None,
        **run_options: Any,
    ) -> RunResult:
        """Run a session live and record it, or replay its cassette.

        Takes the arguments of :func:`agentloop.run` (except ``log``: read
        :attr:`events` instead). When recording, they all go to ``run``. When
        replaying, ``model`` is not used (it may be ``None``), no tool is called,
        and ``signal``, ``on_pause``, ``clock``, ``started_at``, ``on_event``,
        ``inbox`` and ``tool_workers`` are ignored (the cassette holds the replies
        they led to); ``messages``, the tool specs, ``system``, ``max_steps``,
        ``budget``, ``parallel_tools`` and ``limits`` must still be what was
        recorded, and ``hooks`` run again.

        Returns:
            The :class:`~agentloop.RunResult`: live, or regenerated by the replay.

        Raises:
            TypeError: an unknown option, ``log``, or no ``model`` when recording.
            ValueError: an option ``agentloop.run`` rejects (live or not).
            pytest.fail.Exception: no cassette in replay mode, an unreadable
                cassette, or a replay that diverges (the test fails).
        """
        for key in run_options:
            if key == "log":
                raise TypeError(
                    "agent_cassette.run() keeps the log itself; read agent_cassette.events"
                )
            if key not in _CONFIG and key not in _DRIVER_ONLY:
                raise TypeError(f"agent_cassette.run() got an unexpected keyword argument {key!r}")
        path = self.path
        if self.recording:
            if model is None:
                raise TypeError(f"recording {_shown(path, self._rootpath)} needs a model")
            result = self._record(path, messages, model, tools, hooks, run_options)
        else:
            config = {key: value for key, value in run_options.items() if key in _CONFIG}
            result = self._replay(path, messages, tools, hooks, config)
        self.paths.append(path)
        return result

    # ------------------------------------------------------------------ recording

    def _record(
        self,
        path: Path,
        messages: Sequence[Any],
        model: Model,
        tools: ToolRegistry | Iterable[Tool | ToolSpec],
        hooks: HookRegistry | None,
        options: dict[str, Any],
    ) -> RunResult:
        from agentloop import EventLog, run
        from replay import LogWriter

        path.parent.mkdir(parents=True, exist_ok=True)
        # Written under a temporary name and renamed when the run returns: a run
        # that raises leaves no half cassette that a later `once` would replay.
        partial = path.with_name(f".{path.name}.recording")
        partial.unlink(missing_ok=True)
        log = EventLog()
        try:
            with LogWriter(partial) as writer:
                writer.follow(log)
                result = run(messages, model=model, tools=tools, hooks=hooks, log=log, **options)
            os.replace(partial, path)
        finally:
            partial.unlink(missing_ok=True)
        self.events = list(log)
        self._recorded.append(path)
        return result

    # ------------------------------------------------------------------ replaying

    def _replay(
        self,
        path: Path,
        messages: Sequence[Any],
        tools: ToolRegistry | Iterable[Tool | ToolSpec],
        hooks: HookRegistry | None,
        config: dict[str, Any],
    ) -> RunResult:
        from replay import LogError, LogIntegrityError, ReplayDivergence, ReplayError, read_log

        shown = _shown(path, self._rootpath)
        if not path.exists():
            pytest.fail(
                f"agentloop: no cassette for this session: {shown}\n"
                "Record it once, running the real model and tools:\n"
                f"  {self._command('once')}",
                pytrace=False,
            )
        advice = "Record it again:"
        try:
            events = read_log(path)
        except LogIntegrityError as exc:
            problem = (
                f"agentloop: the cassette {shown} was edited after it was recorded (its hash "
                f"chain is broken at line {exc.line}), so it no longer says what happened:\n{exc}"
            )
        except (LogError, OSError) as exc:
            problem = f"agentloop: cannot read the cassette {shown}:\n{exc}"
        else:
            try:
                return self._replay_events(events, messages, tools, hooks, config)
            except ReplayDivergence as exc:
                problem = (
                    "agentloop: the agent behaves differently from its recorded session\n"
                    f"cassette: {shown}\n{exc}"
                )
                advice = "If the change is intended, record the session again:"
            except ReplayError as exc:
                problem = f"agentloop: cannot replay the cassette {shown}: {exc}"
        # Outside the except blocks, so the report is not chained to the exception.
        pytest.fail(f"{problem}\n{advice}\n  {self._command('all')}", pytrace=False)

    def _replay_events(
        self,
        events: list[Event],
        messages: Sequence[Any],
        tools: ToolRegistry | Iterable[Tool | ToolSpec],
        hooks: HookRegistry | None,
        config: dict[str, Any],
    ) -> RunResult:
        from replay import ReplayError, replay

        if not events:
            raise ReplayError("the cassette holds no events")
        _check_start(events, messages, tools, config)
        replayed = replay(
            events,
            hooks=hooks,
            output=config.get("output"),
            compaction=config.get("compaction"),
            handoffs=config.get("handoffs"),
        )
        if replayed.result is None:
            raise ReplayError(
                "the cassette ends before its run finished (the loop waits for "
                f"{type(replayed.pending).__name__})"
            )
        self.events = list(replayed.events)
        return replayed.result

    def _remove_stale(self) -> list[Path]:
        """With ``--agentloop-record=all``: remove this test's cassettes beyond the
        sessions it ran (an older recording ran more); returns what it removed."""
        if self.mode != "all":
            return []
        pattern = re.compile(rf"{re.escape(self._name)}(?:\.([1-9][0-9]*))?\.jsonl")
        removed: list[Path] = []
        try:
            entries = sorted(self._directory.iterdir())
        except OSError:
            return removed  # no cassette folder: nothing to remove
        for path in entries:
            match = pattern.fullmatch(path.name)
            if match is not None and int(match.group(1) or 1) > len(self.paths):
                path.unlink(missing_ok=True)
                removed.append(path)
        return removed

    def _command(self, mode: str) -> str:
        target = f" {shlex.quote(self._nodeid)}" if self._nodeid else ""
        return f"pytest --agentloop-record={mode}{target}"

    def __repr__(self) -> str:
        return f"<AgentCassette {self.mode} {str(self.path)!r}>"


def _check_start(
    events: Sequence[Event],
    messages: Sequence[Any],
    tools: ToolRegistry | Iterable[Tool | ToolSpec],
    config: dict[str, Any],
) -> None:
    """Compare the start the test's arguments give now with the recorded start.

    ``replay`` rebuilds the loop from the *recorded* configuration, so a changed
    system prompt, tool spec or initial message would go unnoticed there. The
    current start is made by the loop itself (without hooks, which only run
    once a step begins) at the recorded time, so equal arguments give equal bytes.
    """
    from agentloop import (
        RULES_REVISION,
        MessageAcceptedEvent,
        RunFinishedEvent,
        SessionStartEvent,
        ToolRegistry,
        agent_loop,
        encode_event,
    )
    from replay import ReplayDivergence

    rules = getattr(events[0], "rules", RULES_REVISION)  # as recorded: an older cassette's
    loop = agent_loop(
        messages, tools=ToolRegistry(tools), started_at=events[0].at, rules=rules, **config
    )
    try:
        next(loop)
    except StopIteration:
        pass
    finally:
        loop.close()
    current = list(loop.log)

    def start_of(log: Sequence[Event]) -> int:
        if log and type(log[0]) is RunFinishedEvent:
            return 1  # an invalid transcript: the run is that one event
        count = 0
        for event in log:
            if type(event) is not SessionStartEvent and type(event) is not MessageAcceptedEvent:
                break
            count += 1
        return count

    for position in range(max(start_of(current), start_of(events))):
        expected = events[position] if position < len(events) else None
        actual = current[position] if position < len(current) else None
        if expected is None or actual is None or encode_event(expected) != encode_event(actual):
            raise ReplayDivergence(
                position,
                expected,
                actual,
                reason="the session starts differently (initial messages, tools, system "
                "prompt, max_steps or budget changed)",
            )


def _shown(path: Path, root: Path | None) -> str:
    if root is not None:
        try:
            return str(path.relative_to(root))
        except ValueError:
            pass
    return str(path)
