"""Media blocks by reference (DESIGN §25, issue 22): ``BlobCodec`` on a real server.

With every client on ``blob_converter(BlobDirectory(path))``, a 10 MB image goes
into the directory once, by its SHA-256, and the history holds the hash: the
sizes below are read from the server's real history (the events it stores), not
estimated. The agentloop log is byte for byte the one the loop makes from its
recorded replies, and the one :func:`agentloop.run` writes; a worker process
killed in the middle is replaced by one that reads the bytes from the directory.
"""

from __future__ import annotations

import base64
import hashlib
import signal
from typing import Any

import pytest
from temporalio.api.common.v1 import Payload
from temporalio.client import Client
from temporalio.common import RawValue

import replay
from agentloop import (
    FunctionModel,
    ImageBlock,
    ModelRequest,
    ScriptedResponse,
    TextBlock,
    ToolCall,
    ToolResultMessage,
    UserMessage,
    tool,
)
from agentloop.temporal import (
    DEFAULT_BLOB_MIN_BYTES,
    BlobCodec,
    BlobDirectory,
    blob_converter,
    start_session,
    worker,
)
from agentloop.temporal._blobs import by_reference
from agentloop.temporal._wire import (
    BLOB_ENCODING,
    MAX_PAYLOAD_BYTES,
    blob_spans,
    decode,
    encode,
    oversized,
    payload_size,
)

from .conftest import Temporal
from .helpers import drive_by_hand, encoded, queue, run_in_process, session_id
from .test_kill import spawn, wait_for_file
from .test_media import describe, noise

MB = 1_000_000
PHOTO = ImageBlock("image/png", data=b"\x89PNG" + noise(10 * MB - 4, "photo"), name="photo.png")
STEPS = 5


def answer(request: ModelRequest) -> ScriptedResponse:
    """Step 1 asks for ``picture`` (3 MB), steps 2-4 for ``add``, step 5 answers
    with what it saw and a drawing of its own (2.5 MB)."""
    count = len(request.messages)
    results = [m for m in request.messages if type(m) is ToolResultMessage]
    if not results:
        return ScriptedResponse.tool_calls("r1", ToolCall("c1", "picture", {"size": 3 * MB}))
    if len(results) < STEPS - 1:
        return ScriptedResponse.tool_calls(f"r{count}", ToolCall(f"c{count}", "add", {"n": count}))
    seen = f"saw {describe(request.messages[0].content)}; {describe(results[0].content)}"
    drawn = ImageBlock("image/png", data=noise(5 * MB // 2, "drawn"))
    return ScriptedResponse(f"r{count}", (TextBlock(seen), drawn), "stop")


MODEL = FunctionModel(answer)


@tool
def picture(size: int) -> Any:
    """A picture of ``size`` bytes."""
    return [TextBlock("a picture"), ImageBlock("image/png", data=noise(size, "picture"))]


@tool
def add(n: int) -> int:
    """One more."""
    return n + 1


TOOLS = [picture, add]


def history_sizes(history: Any) -> dict[str, int]:
    """What the server keeps: the history's bytes, the largest activity input, and
    how often each image's bytes (their base64) or hash occur."""
    events = [event.SerializeToString() for event in history.events]
    inputs = [
        sum(p.ByteSize() for p in e.activity_task_scheduled_event_attributes.input.payloads)
        for e in history.events
        if e.HasField("activity_task_scheduled_event_attributes")
    ]
    photo = PHOTO.data
    assert photo is not None
    digest = hashlib.sha256(photo).hexdigest().encode()
    return {
        "history": sum(map(len, events)),
        "activities": len(inputs),
        "largest input": max(inputs),
        "photo bytes": sum(e.count(base64.b64encode(photo[:3000])) for e in events),
        "photo hash": sum(e.count(digest) for e in events),
    }


def test_a_10_mb_image_goes_once_to_the_store_and_the_history_holds_its_hash(
    temporal: Temporal, tmp_path: Any
) -> None:
    store = BlobDirectory(tmp_path / "blobs")

    async def scenario() -> Any:
        client = await Client.connect(temporal.target, data_converter=blob_converter(store))
        task_queue = queue()
        # No transcript cache: each model activity after the first asks the workflow
        # for its request (query ``pending``), whose answer holds the photo by hash.
        options = {"model": MODEL, "tools": TOOLS, "transcript_cache": 0}
        async with worker(client, task_queue=task_queue, **options):
            session = await start_session(
                client,
                session_id(),
                [UserMessage("u1", (TextBlock("look"), PHOTO))],
                task_queue=task_queue,
                tools=TOOLS,
                max_steps=STEPS,
            )
            result = await session.result()
            log = await session.log()
            history = await session.handle.fetch_history()
            return result, log, history

    result, log, history = temporal.run(scenario(), timeout=300)
    assert result.status == "completed", result.error
    assert result.steps == STEPS
    assert result.final_text.startswith(f"saw look + {describe((PHOTO,))}; a picture + ")
    assert result.messages[0].content[1] == PHOTO
    assert drive_by_hand(log) == encoded(log)
    in_process_result, in_process = run_in_process(log, model=MODEL, tools=TOOLS)
    assert in_process == encoded(log)
    assert in_process_result == result
    # Three blobs, each once: the photo, the tool's picture, the model's drawing.
    files = sorted(p for p in (tmp_path / "blobs").rglob("*") if p.is_file())
    assert sorted(p.stat().st_size for p in files) == [5 * MB // 2, 3 * MB, 10 * MB]
    sizes = history_sizes(history)
    assert sizes["photo bytes"] == 0
    # Its hash (in the payload and its metadata), in three events: the session's
    # input, the first model request, the session's result.
    assert sizes["photo hash"] == 2 * 3
    assert sizes["activities"] == 2 * STEPS - 1
    assert sizes["largest input"] < 2_000
    assert sizes["history"] < 30_000


def test_a_killed_worker_is_replaced_by_one_that_reads_the_bytes_from_the_store(
    temporal: Temporal, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    blobs = tmp_path / "blobs"
    monkeypatch.setenv("AGENTLOOP_TEST_BLOBS", str(blobs))
    photo = PHOTO.data
    assert photo is not None
    task_queue = queue()
    first = spawn(temporal, task_queue, tmp_path)
    second = None
    try:

        async def start() -> Any:
            client = await Client.connect(
                temporal.target, data_converter=blob_converter(BlobDirectory(blobs))
            )
            return await start_session(
                client,
                session_id(),
                [UserMessage("u1", (PHOTO,))],
                task_queue=task_queue,
                system="slow-model",
            )

        session = temporal.run(start())
        wait_for_file(tmp_path / "started")
        first.send_signal(signal.SIGKILL)
        first.communicate(timeout=30)
        second = spawn(temporal, task_queue, tmp_path)
        result = temporal.run(session.result())
        log = temporal.run(session.log())
        _, errors = second.communicate(timeout=60)
        assert second.returncode == 0, errors
    finally:
        for process in (first, second):
            if process is not None and process.returncode is None:
                process.kill()
                process.communicate()

    assert result.status == "completed", result.error
    # The second worker's model saw the photo: its bytes, read from the directory.
    assert result.final_text == f"Done: answered (saw {hashlib.sha256(photo).hexdigest()[:12]})"
    assert drive_by_hand(log) == encoded(log)
    assert replay.replay(log).result == result


def test_a_client_without_the_codec_cannot_read_such_a_session_and_says_why(
    temporal: Temporal, tmp_path: Any
) -> None:
    async def scenario() -> Any:
        client = await Client.connect(
            temporal.target, data_converter=blob_converter(BlobDirectory(tmp_path))
        )
        task_queue = queue()
        async with worker(client, task_queue=task_queue, model=MODEL, tools=TOOLS):
            session = await start_session(
                client,
                session_id(),
                [UserMessage("u1", (PHOTO,))],
                task_queue=task_queue,
                tools=TOOLS,
                system="stop",
                max_steps=1,
            )
            await session.result()
            plain = await Client.connect(temporal.target)
            handle = plain.get_workflow_handle(session.id, result_type=RawValue)
            with pytest.raises(RuntimeError, match="no BlobCodec to read them"):
                decode(await handle.result(), Any, "session result")  # type: ignore[arg-type]
            from agentloop.temporal import get_session

            with pytest.raises(RuntimeError, match="no BlobCodec to read them"):
                await get_session(plain, session.id).log()
            return get_session(client, session.id).by_reference

    assert temporal.run(scenario(), timeout=300) == DEFAULT_BLOB_MIN_BYTES


# --------------------------------------------------------------------------- in process


def run(coroutine: Any) -> Any:
    import asyncio

    return asyncio.run(coroutine)


def json_payload(value: Any) -> Payload:
    return Payload(metadata={"encoding": b"json/plain"}, data=encode(value))


def test_the_codec_puts_each_blob_once_and_reads_payloads_back_exactly(tmp_path: Any) -> None:
    store = BlobDirectory(tmp_path)
    codec = BlobCodec(store, min_bytes=1000)
    big = ImageBlock("image/png", data=noise(5000, "a"))
    small = ImageBlock("image/png", data=noise(999, "b"))
    message = UserMessage("u1", (TextBlock("x"), big, small, big))
    payloads = [
        json_payload(message),
        json_payload({"data": "not base64 at all" * 100}),
        Payload(metadata={"encoding": b"binary/plain"}, data=b"\x00" * 5000),
        json_payload("short"),
        # Not base64, and base64 msgspec never writes (padding bits set): inline.
        json_payload({"data": "A" * 2001 + "B="}),
        json_payload({"data": "A" * 2002 + "B="}),
    ]
    encoded_ = run(codec.encode(payloads))
    assert encoded_[1:] == payloads[1:]
    first = encoded_[0]
    assert first.metadata["encoding"] == BLOB_ENCODING
    assert len(first.data) < 2500  # the small block inline, the big one twice by hash
    assert len(list(tmp_path.rglob("*"))) == 2  # one directory, one blob
    assert payload_size(payloads[0].data, 1000) == len(first.data)
    assert run(codec.decode(encoded_)) == payloads
    # Another process: nothing cached, the bytes come from the directory.
    assert run(BlobCodec(store, min_bytes=1000, cache_bytes=0).decode([first])) == payloads[:1]
    store.put(hashlib.sha256(big.data or b"").hexdigest(), b"ignored: it is there already")
    assert run(BlobCodec(store).decode([first])) == payloads[:1]


def test_the_codec_refuses_missing_tampered_and_malformed_blobs(tmp_path: Any) -> None:
    store = BlobDirectory(tmp_path)
    data = noise(5000, "c")
    digest = hashlib.sha256(data).hexdigest()
    first = run(BlobCodec(store, min_bytes=1000).encode([json_payload({"data": data})]))[0]
    (tmp_path / digest[:2] / digest).write_bytes(b"tampered")
    with pytest.raises(ValueError, match="does not have that hash"):
        run(BlobCodec(store).decode([first]))
    (tmp_path / digest[:2] / digest).unlink()
    with pytest.raises(LookupError, match=f"blob sha256:{digest} is not in the blob store"):
        run(BlobCodec(store).decode([first]))
    for refs in (b'[[0,"' + digest.encode() + b'"]]', b'[[9,"../etc/passwd"]]'):
        bad = Payload(metadata={**first.metadata, "agentloop-blobs": refs}, data=first.data)
        with pytest.raises(ValueError, match="malformed blob reference"):
            run(BlobCodec(store).decode([bad]))


def test_the_codec_keeps_at_most_cache_bytes_in_memory(tmp_path: Any) -> None:
    store = BlobDirectory(tmp_path)
    codec = BlobCodec(store, min_bytes=100, cache_bytes=2500)
    blobs = [noise(1000, str(i)) for i in range(3)] + [noise(3000, "large")]
    for blob in blobs:
        run(codec.encode([json_payload({"data": blob})]))
    digests = [hashlib.sha256(blob).hexdigest() for blob in blobs]
    assert list(codec._cache) == digests[1:3]  # the oldest went; the largest never came
    assert codec._cached == 2000
    run(codec.encode([json_payload({"data": blobs[1]})]))  # known: not written again
    assert list(codec._cache) == [digests[2], digests[1]]
    assert repr(store) == f"BlobDirectory({str(tmp_path)!r})"


def test_the_codec_and_the_converter_check_their_arguments(tmp_path: Any) -> None:
    with pytest.raises(TypeError, match="store must have put"):
        BlobCodec(object())  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="min_bytes must be an int >= 1"):
        BlobCodec(BlobDirectory(tmp_path), min_bytes=0)
    with pytest.raises(ValueError, match="cache_bytes must be an int >= 0"):
        BlobCodec(BlobDirectory(tmp_path), cache_bytes=-1)
    converter = blob_converter(BlobDirectory(tmp_path), min_bytes=10)
    codec = converter.payload_codec
    assert isinstance(codec, BlobCodec) and codec.min_bytes == 10


def test_sizes_count_large_blocks_by_reference() -> None:
    data = encode(UserMessage("u1", (ImageBlock("image/png", data=noise(3 * MB, "d")),)))
    assert payload_size(data, None) == len(data) > 4 * MB
    assert payload_size(data, DEFAULT_BLOB_MIN_BYTES) < 200
    assert oversized(data, "it", DEFAULT_BLOB_MIN_BYTES) is None
    message = oversized(data, "it")
    assert message is not None and "agentloop.temporal.blob_converter" in message
    huge = encode(["x" * MAX_PAYLOAD_BYTES])
    message = oversized(huge, "it", DEFAULT_BLOB_MIN_BYTES)
    assert message is not None and "stored by reference" in message
    assert payload_size(b"[]", 1) == 2
    assert blob_spans(b'{"data":"' + b"A" * 2000, 1000) == []  # not JSON
    assert blob_spans(b'{"data":"' + b"A" * 2000 + b'\\n"}', 1000) == []  # an escape
    assert blob_spans(b'{"data":"' + b"A" * 2000 + b'"}', 1000) == [(9, 2009)]


class _NoCodecClient:
    class data_converter:
        payload_codec = None


def test_by_reference_reads_the_clients_codec() -> None:
    assert by_reference(_NoCodecClient()) is None  # type: ignore[arg-type]
