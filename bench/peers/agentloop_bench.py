"""agentloop's worker: the raw generator and ``run()`` + ``ScriptedModel``, plus S4/S5.

Variants:

- ``raw generator``: ``agent_loop(...)`` driven with ``send()`` and replies built
  once in advance (``ModelResponse``/``ToolResult``): the loop itself (validation,
  events, state), no model and no tool function.
- ``run() + ScriptedModel``: the sync driver with the scripted model double (each
  text block streamed as chunks) and the real ``add`` tool executed through the
  ``ToolRegistry``: what a user's test pays, like the peers' runs.

Agentloop-only scenarios (``extras``): S2 steps only (per-step cost after N
initial messages, setup excluded), S4 ``replay.replay`` of a recorded 64-step
session, S5 ``encode_event``/``decode_event`` over that session's log; and
(``memory``) RSS while replaying the session back to back.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Generator, Iterator, Sequence
from pathlib import Path
from typing import Any

import msgspec

import agentloop
import replay

from ._harness import (
    ADD_ARGS,
    FINAL_TEXT,
    MEMORY_STEPS,
    S2_SIZES,
    S3_STEPS,
    USER_TEXT,
    Job,
    RunFactory,
    Settings,
    add,
    call_id,
    history_plan,
    measure_all,
    on_one_event_loop,
    rss_mib,
    worker_main,
)

FRAMEWORK = "agentloop"
ADD_TOOL = agentloop.tool(add)
ADD_SPEC = ADD_TOOL.spec
USER = agentloop.UserMessage("user-question", USER_TEXT)
Replies = dict[str, Any]  # request id or call id -> the reply to send


def versions() -> dict[str, str]:
    return {"agentloop": agentloop.__version__, "msgspec": msgspec.__version__}


def transcript(history: int) -> list[agentloop.Message]:
    """``history`` earlier messages (see ``history_plan``), then the S1 question."""
    messages: list[agentloop.Message] = []
    for kind, i in history_plan(history):
        if kind == "user":
            messages.append(agentloop.UserMessage(f"u{i}", f"question {i}"))
        elif kind == "call":
            call = agentloop.ToolCall(f"old-{i}", "add", {"left": i, "right": 1})
            messages.append(agentloop.AssistantMessage(f"a{i}", (call,)))
        elif kind == "result":
            messages.append(
                agentloop.ToolResultMessage(f"t{i}", f"old-{i}", "add", f'{{"sum":{i + 1}}}')
            )
        else:
            messages.append(
                agentloop.AssistantMessage(f"b{i}", (agentloop.TextBlock(f"answer {i}"),))
            )
    messages.append(USER)
    return messages


def replies_for(steps: int) -> Replies:
    """Pre-built replies for ``steps`` requests: ``steps - 1`` add() calls, then the answer."""
    replies: Replies = {}
    for step in range(1, steps + 1):
        request_id = f"request-{step:03d}"
        if step < steps:
            call = agentloop.ToolCall(call_id(step), "add", dict(ADD_ARGS))
            replies[request_id] = agentloop.ModelResponse(
                request_id, f"resp-{step}", (call,), "tool_call"
            )
            replies[call.id] = agentloop.ToolResult(call.id, '{"sum":42}')
        else:
            replies[request_id] = agentloop.ModelResponse(
                request_id, f"resp-{step}", (agentloop.TextBlock(FINAL_TEXT),), "stop"
            )
    return replies


def script_for(steps: int) -> list[agentloop.ScriptedResponse]:
    """The same conversation as :func:`replies_for`, for ``ScriptedModel``."""
    script = [
        agentloop.ScriptedResponse.tool_calls(
            f"resp-{step}", agentloop.ToolCall(call_id(step), "add", dict(ADD_ARGS))
        )
        for step in range(1, steps)
    ]
    script.append(agentloop.ScriptedResponse.text(f"resp-{steps}", FINAL_TEXT))
    return script


def drive(
    loop: Generator[Any, Any, agentloop.RunResult], effect: Any, replies: Replies
) -> agentloop.RunResult:
    """Answer every effect from ``replies`` until the run ends."""
    model_request, send = agentloop.ModelRequest, loop.send
    try:
        while True:
            if type(effect) is model_request:
                effect = send(replies[effect.id])
            else:
                effect = send(replies[effect.call.id])
    except StopIteration as stop:
        result: agentloop.RunResult = stop.value
        return result


def make_raw(history: int, steps: int) -> Callable[[], str]:
    messages = transcript(history)
    replies = replies_for(steps)
    tools = (ADD_SPEC,)

    def run() -> str:
        loop = agentloop.agent_loop(messages, tools=tools, max_steps=steps, started_at=0.0)
        return drive(loop, next(loop), replies).final_text or ""

    return run


def make_driven(history: int, steps: int) -> Callable[[], str]:
    messages = transcript(history)
    script = script_for(steps)
    tools = [ADD_TOOL]

    def run() -> str:
        model = agentloop.ScriptedModel(script)
        result = agentloop.run(messages, model=model, tools=tools, max_steps=steps)
        return result.final_text or ""

    return run


def floor_loop(
    messages: Sequence[agentloop.Message],
    max_steps: int,
    events: list[agentloop.Event] | None = None,
) -> Generator[Any, Any, agentloop.RunResult]:
    """The floor: what any engine of this design must do, and nothing else.

    The same conversation as ``agent_loop`` (the same effects yielded, the same
    replies received) building the same 302 event structs of S3 and appending the
    same messages, with no validation, no state machine, no hooks, budget or
    limits: the cost of the structs, the list appends and the generator's
    send()s. ``engine / floor`` is what the rules cost on top. (Its events are
    the engine's, equal one for one: ``tests/test_bench_smoke.py`` checks.)
    """
    if events is None:
        events = []
    emit = events.append
    transcript = list(messages)
    specs = (ADD_SPEC,)
    emit(
        agentloop.SessionStartEvent(
            sequence=0, at=0.0, tools=specs, max_steps=max_steps, rules=agentloop.RULES_REVISION
        )
    )
    for message in transcript:
        emit(agentloop.MessageAcceptedEvent(sequence=len(events), at=0.0, message=message))
    step = 0
    while True:
        step += 1
        request_id = f"request-{step:03d}"
        emit(
            agentloop.StepStartEvent(sequence=len(events), at=0.0, step=step, request_id=request_id)
        )
        view = agentloop.TranscriptView(transcript, len(transcript))
        response = yield agentloop.ModelRequest(request_id, step, view, specs)
        emit(agentloop.PlanDraftEvent(sequence=len(events), at=0.0, step=step, reply=response))
        message = agentloop.AssistantMessage(f"message-{response.id}", response.content)
        transcript.append(message)
        emit(agentloop.PlanCommitEvent(sequence=len(events), at=0.0, step=step, message=message))
        calls = [block for block in response.content if type(block) is agentloop.ToolCall]
        for call in calls:
            emit(agentloop.ToolCallEvent(sequence=len(events), at=0.0, step=step, call=call))
            result = yield agentloop.ToolRequest(call, step)
            reply = agentloop.ToolResultMessage(
                f"tool-result-{call.id}", call.id, call.name, result.content, result.is_error
            )
            transcript.append(reply)
            emit(
                agentloop.ToolResultEvent(
                    sequence=len(events), at=0.0, step=step, message=reply, reply=result
                )
            )
        emit(agentloop.StepEndEvent(sequence=len(events), at=0.0, step=step))
        if not calls:
            final_text = agentloop.text_from_assistant(message)
            emit(
                agentloop.SessionCompleteEvent(
                    sequence=len(events), at=0.0, step=step, status="completed", reason="goal_met"
                )
            )
            emit(
                agentloop.RunFinishedEvent(
                    sequence=len(events),
                    at=0.0,
                    step=step,
                    status="completed",
                    final_text=final_text,
                    steps=step,
                    max_steps=max_steps,
                    reason="goal_met",
                )
            )
            return agentloop.RunResult(
                status="completed",
                final_text=final_text,
                messages=tuple(transcript),
                steps=step,
                max_steps=max_steps,
                reason="goal_met",
            )


def make_floor(history: int, steps: int) -> Callable[[], str]:
    messages = transcript(history)
    replies = replies_for(steps)

    def run() -> str:
        loop = floor_loop(messages, steps)
        return drive(loop, next(loop), replies).final_text or ""

    return run


def make_streamed(chunks: int) -> Callable[[], str]:
    """``run()`` of one step whose answer streams in ``chunks`` text deltas.

    The answer is the same ``chunks`` words whatever the number of chunks
    (``make_streamed(1)`` sends it in one), so ``(t(n) - t(1)) / (n - 1)`` is the
    cost of one streamed chunk through the driver and the engine.
    """
    words = [f"w{index % 10} " for index in range(CHUNK_WORDS)]
    size = -(-len(words) // chunks)
    pieces = ["".join(words[i : i + size]) for i in range(0, len(words), size)]
    text = "".join(pieces)
    request_id = "request-001"
    items: list[agentloop.ModelChunk | agentloop.ModelResponse] = [
        agentloop.ModelChunk(request_id, agentloop.TextBlock(piece)) for piece in pieces
    ]
    items.append(
        agentloop.ModelResponse(request_id, "resp-1", (agentloop.TextBlock(text),), "stop")
    )
    model = _Replayed(items)

    def run() -> str:
        result = agentloop.run([USER], model=model, tools=[ADD_TOOL], max_steps=1)
        assert result.final_text == text, result
        return FINAL_TEXT

    return run


#: Words in the streamed answer of :func:`make_streamed` (one per chunk at most).
CHUNK_WORDS = 1000


class _Replayed:
    """A model that streams the same prebuilt items for every request (one step)."""

    def __init__(self, items: Sequence[agentloop.ModelChunk | agentloop.ModelResponse]) -> None:
        self.items = items

    def stream(
        self, request: agentloop.ModelRequest
    ) -> Iterator[agentloop.ModelChunk | agentloop.ModelResponse]:
        return iter(self.items)


class _Unstreamed(agentloop.ScriptedModel):
    """``ScriptedModel`` that sends each response whole, without chunks."""

    def stream(
        self, request: agentloop.ModelRequest
    ) -> Iterator[agentloop.ModelChunk | agentloop.ModelResponse]:
        *_, response = super().stream(request)
        return iter((response,))


def make_unstreamed(history: int, steps: int) -> Callable[[], str]:
    messages = transcript(history)
    script = script_for(steps)
    tools = [ADD_TOOL]

    def run() -> str:
        model = _Unstreamed(script)
        result = agentloop.run(messages, model=model, tools=tools, max_steps=steps)
        return result.final_text or ""

    return run


@agentloop.tool(name="add")
async def _async_add(left: int, right: int) -> dict[str, int]:
    """Add two integers (the one tool of every scenario)."""
    return add(left, right)


def make_arun(history: int, steps: int) -> Callable[[], Awaitable[str]]:
    """``arun()`` + ``ScriptedModel`` (streaming) with an ``async def`` tool, as the
    peers' async runs have theirs."""
    messages = transcript(history)
    script = script_for(steps)
    tools = [_async_add]

    async def run() -> str:
        model = agentloop.ScriptedModel(script)
        result = await agentloop.arun(messages, model=model, tools=tools, max_steps=steps)
        return result.final_text or ""

    return run


def variants() -> dict[str, RunFactory]:
    return {
        "raw generator": make_raw,
        "run() + ScriptedModel": make_driven,
        "run() + ScriptedModel, no streaming": make_unstreamed,
        "floor (no engine)": make_floor,
    }


def async_variants() -> dict[str, RunFactory]:
    return {"arun() + ScriptedModel": on_one_event_loop(make_arun)}


def record_session(steps: int = MEMORY_STEPS) -> list[agentloop.Event]:
    """The log of a ``steps``-step ``run()`` + ``ScriptedModel`` session (chunks included)."""
    log = agentloop.EventLog()
    ticks = iter(range(1_000_000))
    result = agentloop.run(
        [USER],
        model=agentloop.ScriptedModel(script_for(steps)),
        tools=[ADD_TOOL],
        max_steps=steps,
        log=log,
        clock=lambda: 1_700_000_000.0 + next(ticks) / 1000,
    )
    if result.status != "completed" or result.steps != steps:
        raise AssertionError(f"recording failed: {result}")
    return list(log)


def steps_only_jobs(steps: int = S3_STEPS) -> dict[str, Job]:
    """Per-step cost of ``steps`` steps after N initial messages, setup excluded.

    Setup (``agent_loop(...)`` + the first ``next()``: validating, snapshotting
    and recording the N messages) is O(N) by design and timed on its own.
    """
    jobs: dict[str, Job] = {}
    replies = replies_for(steps)
    tools = (ADD_SPEC,)
    for size in S2_SIZES:
        messages = transcript(size - 1)

        def setup(messages: Sequence[agentloop.Message] = messages) -> int:
            start = time.perf_counter_ns()
            loop = agentloop.agent_loop(messages, tools=tools, max_steps=steps, started_at=0.0)
            next(loop)
            elapsed = time.perf_counter_ns() - start
            loop.close()
            return elapsed

        def sample(messages: Sequence[agentloop.Message] = messages) -> int:
            loop = agentloop.agent_loop(messages, tools=tools, max_steps=steps, started_at=0.0)
            effect = next(loop)
            start = time.perf_counter_ns()
            result = drive(loop, effect, replies)
            elapsed = time.perf_counter_ns() - start
            assert result.steps == steps, result
            return elapsed

        jobs[f"steps:{size}"] = Job(sample, sampled=True)
        jobs[f"setup:{size}"] = Job(setup, sampled=True)
    return jobs


#: Tool results of a million code points: ASCII source text, and the same text with
#: a few non-ASCII characters per line (as real files and web pages have them).
ASCII_RESULT = ("def naive_cafe(x):  # 'quoted' - ok\n" * 30_000)[:1_000_000]
NON_ASCII_RESULT = ("def naïve_café(x):  # “quoted” — ok\n" * 30_000)[:1_000_000]
LARGE_STEPS = 4


def make_large_results(text: str, log_path: Path | None = None) -> Callable[[], object]:
    """``run()`` of ``LARGE_STEPS`` steps, each a tool call returning ``text`` (with
    ``log_path``: recorded by a ``LogWriter``, as a durable session is)."""

    @agentloop.tool
    def read_file(path: str) -> str:
        """Read a file."""
        return text

    calls = [
        agentloop.ScriptedResponse.tool_calls(
            f"r{step}", agentloop.ToolCall(f"c{step}", "read_file", {"path": "a.py"})
        )
        for step in range(1, LARGE_STEPS)
    ]
    script = [*calls, agentloop.ScriptedResponse.text(f"r{LARGE_STEPS}", "done")]

    def run() -> object:
        model = agentloop.ScriptedModel(script)
        if log_path is None:
            return agentloop.run([USER], model=model, tools=[read_file], max_steps=LARGE_STEPS)
        log_path.unlink(missing_ok=True)
        log = agentloop.EventLog()
        with replay.LogWriter(log_path) as writer:
            writer.follow(log)
            return agentloop.run(
                [USER], model=model, tools=[read_file], max_steps=LARGE_STEPS, log=log
            )

    return run


_IMPORT = (
    "import time; t0 = time.perf_counter(); import msgspec; t1 = time.perf_counter(); "
    "import agentloop; t2 = time.perf_counter(); print((t1 - t0) * 1e3, (t2 - t1) * 1e3)"
)


def cold_start(runs: int) -> dict[str, Any]:
    """``import agentloop`` in fresh processes, after ``import msgspec``: with bytecode
    (a copy of the package whose bytecode the first run wrote) and without (a copy
    with none, nothing written); the median of ``runs`` each, in milliseconds."""
    package = Path(agentloop.__file__).resolve().parent
    engine = (package / "_engine.py").read_text()
    start = time.perf_counter()
    for _ in range(5):
        compile(engine, "_engine.py", "exec")
    compile_ms = (time.perf_counter() - start) / 5 * 1e3
    medians: dict[str, tuple[float, float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for mode in ("bytecode", "no_bytecode"):
            root = Path(tmp) / mode
            shutil.copytree(package, root / "agentloop", ignore=shutil.ignore_patterns("*.pyc"))
            env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
            env["PYTHONPATH"] = str(root)
            if mode == "no_bytecode":
                env["PYTHONDONTWRITEBYTECODE"] = "1"
            else:  # the first run writes the bytecode the others read
                subprocess.run([sys.executable, "-c", _IMPORT], env=env, cwd=root, check=True)
            times = []
            for _ in range(runs):
                done = subprocess.run(
                    [sys.executable, "-c", _IMPORT],
                    env=env,
                    cwd=root,
                    capture_output=True,
                    text=True,
                    check=True,
                )
                first, second = done.stdout.split()
                times.append((float(first), float(second)))
            medians[mode] = (
                statistics.median(t[0] for t in times),
                statistics.median(t[1] for t in times),
            )
    return {
        "runs": runs,
        "msgspec_ms": medians["bytecode"][0],
        "bytecode_ms": medians["bytecode"][1],
        "no_bytecode_ms": medians["no_bytecode"][1],
        "engine_compile_ms": compile_ms,
        "engine_lines": engine.count("\n"),
    }


def bare_codec(events: list[agentloop.Event]) -> Callable[[], None]:
    """S5's floor: msgspec alone (one Encoder, one typed Decoder), none of
    ``encode_event``'s checks for values JSON cannot hold."""
    encoder = msgspec.json.Encoder()
    decoder = msgspec.json.Decoder(agentloop.Event)
    encode, decode = encoder.encode, decoder.decode

    def codec() -> None:
        for event in events:
            decode(encode(event))

    return codec


def reader_floor(path: Path, events: list[agentloop.Event]) -> Callable[[], None]:
    """The C work a log-format-2 reader cannot skip, per line, with no Python logic
    around it: read the line, hash it into the chain (SHA-256), decode the event and
    encode it again (the canonical check); then what ``replay`` adds at least: the
    check of each event, byte for byte (two encodings). Bare msgspec calls on the
    whole encoded event stand in for the line's own fields."""
    encoder = msgspec.json.Encoder()
    decoder = msgspec.json.Decoder(agentloop.Event)
    encode, decode = encoder.encode, decoder.decode
    pairs = [(agentloop.encode_event(event), event) for event in events]
    sha256 = hashlib.sha256()

    def floor() -> None:
        link = b""
        with open(path, "rb") as file:
            file.readline()  # the header
            for data, original in pairs:
                line = file.readline()
                digest = sha256.copy()
                digest.update(link)
                digest.update(line[:-21])
                link = digest.digest()[:8].hex().encode()
                event = decode(data)
                if encode(event) != data or encode(original) != encode(event):
                    raise AssertionError(f"{event} does not encode as recorded")

    return floor


def read_floor(path: Path, events: list[agentloop.Event]) -> Callable[[], None]:
    """:func:`reader_floor` without replay's part: the C work ``read_log`` cannot
    skip per line (read it, hash it into the chain, decode, encode, compare), no
    Python logic around it; what the log format-1 reader did but the hash."""
    encoder = msgspec.json.Encoder()
    decoder = msgspec.json.Decoder(agentloop.Event)
    encode, decode = encoder.encode, decoder.decode
    encoded = [agentloop.encode_event(event) for event in events]
    sha256 = hashlib.sha256

    def floor() -> None:
        link = b""
        out = []
        with open(path, "rb") as file:
            file.readline()  # the header
            for data in encoded:
                line = file.readline()
                link = sha256(link + line[:-25]).digest()[:8].hex().encode()
                event = decode(data)
                if encode(event) != data:
                    raise AssertionError(f"{event} does not encode as recorded")
                out.append(event)

    return floor


def extras(settings: Settings) -> dict[str, Any]:
    events = record_session()
    check = replay.replay(events)
    assert check.result is not None and check.result.status == "completed", check
    count = len(events)
    encode, decode = agentloop.encode_event, agentloop.decode_event
    encoded = [encode(event) for event in events]
    assert [decode(data) for data in encoded] == events
    size = sum(len(data) for data in encoded)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "session.jsonl"
        replay.write_log(path, events)
        file_bytes = path.stat().st_size
        jobs = steps_only_jobs()
        jobs["replay"] = Job(lambda: replay.replay(events))
        jobs["replay_file"] = Job(lambda: replay.replay(replay.read_log(path)))
        jobs["reader_floor"] = Job(reader_floor(path, events))
        jobs["read_floor"] = Job(read_floor(path, events))
        jobs["bare_codec"] = Job(bare_codec(events))
        jobs["read_log"] = Job(lambda: replay.read_log(path))
        jobs["write_log"] = Job(lambda: replay.write_log(path, events))
        jobs["encode"] = Job(lambda: [encode(event) for event in events])
        jobs["decode"] = Job(lambda: [decode(data) for data in encoded])
        jobs["chunks"] = Job(make_streamed(CHUNK_WORDS))
        jobs["one_chunk"] = Job(make_streamed(1))
        for name, text in (("ascii", ASCII_RESULT), ("non_ascii", NON_ASCII_RESULT)):
            jobs[name] = Job(make_large_results(text))
            jobs[f"{name}_log"] = Job(make_large_results(text, Path(tmp) / f"{name}.jsonl"))
        ns = measure_all(jobs, settings)
    return {
        "chunks": {
            "chunks": CHUNK_WORDS,
            "ns_streamed": ns["chunks"],
            "ns_one": ns["one_chunk"],
            "ns_per_chunk": (ns["chunks"] - ns["one_chunk"]) / (CHUNK_WORDS - 1),
        },
        "non_ascii": {
            "steps": LARGE_STEPS,
            **{name: ns[name] / LARGE_STEPS for name in ("ascii", "non_ascii")},
            **{f"{name}_log": ns[f"{name}_log"] / LARGE_STEPS for name in ("ascii", "non_ascii")},
        },
        "cold_start": cold_start(3 if settings.quick else 11),
        "S2_steps_only": {
            str(n): {
                "ns_per_step": ns[f"steps:{n}"] / S3_STEPS,
                "steps": S3_STEPS,
                "setup_ns": ns[f"setup:{n}"],
            }
            for n in S2_SIZES
        },
        "S4": {
            "steps": MEMORY_STEPS,
            "events": count,
            "ns_per_replay": ns["replay"],
            "events_per_s": count / ns["replay"] * 1e9,
            "file_events_per_s": count / ns["replay_file"] * 1e9,
            # Reading and checking without any Python logic, nor the engine.
            "floor_events_per_s": count / ns["reader_floor"] * 1e9,
            "file_bytes": file_bytes,
        },
        "S5": {
            "steps": MEMORY_STEPS,
            "events": count,
            "encode_events_per_s": count / ns["encode"] * 1e9,
            "decode_events_per_s": count / ns["decode"] * 1e9,
            "roundtrip_events_per_s": count / (ns["encode"] + ns["decode"]) * 1e9,
            "bare_events_per_s": count / ns["bare_codec"] * 1e9,
            "bytes": size,
            "bytes_per_step": size / MEMORY_STEPS,
            "bytes_per_event": size / count,
            # The log file as written (header, hash chain, content stored once).
            "file_bytes": file_bytes,
            "file_bytes_per_step": file_bytes / MEMORY_STEPS,
            "read_log_events_per_s": count / ns["read_log"] * 1e9,
            # The C work of reading and checking the file, no Python logic.
            "read_floor_events_per_s": count / ns["read_floor"] * 1e9,
            "write_log_events_per_s": count / ns["write_log"] * 1e9,
        },
    }


def memory(settings: Settings) -> dict[str, Any]:
    """RSS while replaying one recorded session ``settings.replays`` times back to back."""
    events = record_session()
    sessions = settings.replays
    marks = {1, 10, 100, sessions}
    checkpoints: dict[str, Any] = {}
    for n in range(1, sessions + 1):
        result = replay.replay(events).result
        assert result is not None and result.steps == MEMORY_STEPS
        if n in marks:
            checkpoints[str(n)] = rss_mib()
    return {"steps": MEMORY_STEPS, "sessions": sessions, "checkpoints": checkpoints}


def main(argv: Sequence[str] | None = None) -> int:
    return worker_main(
        FRAMEWORK,
        versions,
        variants,
        extras=extras,
        memory=memory,
        async_variants=async_variants,
        argv=argv,
    )


if __name__ == "__main__":
    sys.exit(main())
