"""Media bytes by reference: a payload codec and a blob store (DESIGN §25).

Temporal keeps every payload in the workflow's history, and refuses one above
2 MiB. :class:`BlobCodec` is a :class:`temporalio.converter.PayloadCodec` (the
"claim check" pattern): on the way out of a process, each media block of at least
``min_bytes`` bytes in a payload of :mod:`agentloop.temporal` goes into a
:class:`BlobStore` under its SHA-256, once however many payloads carry it, and the
payload holds the 64 hex digits in its place; on the way in, the bytes are put
back. The workflow, the loop in it and the activities see the whole blocks, so the
agentloop log is byte for byte the same; the history holds hashes.

The blob granularity is the log's (format 3): a block is stored once, by the same
hash its blob line has, where a codec of whole payloads (Temporal's own external
storage) would store each payload that carries it: the session's input, the model
request after it, the session's result, each ``pending`` and ``log`` answer.

Every client and worker of the sessions needs the codec, with the same store:
``Client.connect(..., data_converter=blob_converter(BlobDirectory(path)))``. A
payload is put in the store before it is sent, so whatever the history refers to
is there when a worker -- a new one, after a crash -- reads it.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import collections
import dataclasses
import hashlib
import os
import re
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Final, Protocol, runtime_checkable

import msgspec
from temporalio.api.common.v1 import Payload
from temporalio.client import Client
from temporalio.converter import DataConverter, PayloadCodec

from ._wire import BLOB_ENCODING, DEFAULT_BLOB_MIN_BYTES, blob_spans, encode

__all__ = ["BlobCodec", "BlobDirectory", "BlobStore", "blob_converter", "by_reference"]

_JSON: Final = b"json/plain"
#: The payload metadata key listing the references: ``[[offset, sha256 hex], ...]``.
_REFS: Final = "agentloop-blobs"
_HEX: Final = re.compile(r"[0-9a-f]{64}")
_refs = msgspec.json.Decoder(list[tuple[int, str]])


def _from_base64(text: bytes) -> bytes | None:
    """The bytes ``text`` is the base64 of, if it is exactly what encoding them
    gives (padded, no stray bits): then putting it back is byte for byte."""
    try:
        blob = base64.b64decode(text, validate=True)
    except binascii.Error:
        return None
    tail = len(blob) % 3 or 3  # the bytes of the last quad
    if len(text) % 4 or binascii.b2a_base64(blob[-tail:], newline=False) != text[-4:]:
        return None
    return blob


@runtime_checkable
class BlobStore(Protocol):
    """Where :class:`BlobCodec` keeps media bytes, by SHA-256 (64 lowercase hex
    digits). Both methods are called in a worker thread; ``put`` must be durable
    when it returns (the history refers to the blob next), and idempotent."""

    def put(self, digest: str, data: bytes) -> None:
        """Keep ``data``, whose SHA-256 is ``digest``."""

    def get(self, digest: str) -> bytes | None:
        """The bytes stored under ``digest``; ``None`` when there are none."""


class BlobDirectory:
    """A :class:`BlobStore` in a directory: one file per blob, named by its hash
    (``<path>/<first two digits>/<digest>``), written once (to a temporary file,
    flushed to disk, then renamed). Share it between machines as a network
    directory, or write a store of your own (S3, a database) with the same two
    methods."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.path.mkdir(parents=True, exist_ok=True)

    def __repr__(self) -> str:
        return f"BlobDirectory({str(self.path)!r})"

    def _file(self, digest: str) -> Path:
        return self.path / digest[:2] / digest

    def put(self, digest: str, data: bytes) -> None:
        """Write the blob, unless it is there already."""
        file = self._file(digest)
        if file.exists():
            return
        file.parent.mkdir(exist_ok=True)
        temporary = file.with_name(f"{digest}.{os.getpid()}.{threading.get_ident()}.tmp")
        with open(temporary, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.replace(temporary, file)

    def get(self, digest: str) -> bytes | None:
        """The blob's bytes, or ``None``."""
        try:
            return self._file(digest).read_bytes()
        except FileNotFoundError:
            return None


class BlobCodec(PayloadCodec):
    """Stores the large media blocks of :mod:`agentloop.temporal` payloads in
    ``store`` (see the module docstring).

    Args:
        store: the blob store every client and worker of the sessions shares.
        min_bytes: blocks of at least this many bytes go by reference; smaller
            ones stay inline (cheaper: no store round trip).
        cache_bytes: the blobs this process keeps in memory, most recent first
            (a workflow replayed, a retried activity, a blob it just stored).

    Payloads that are not ``json/plain`` or hold no block that large pass
    unchanged, so the codec costs a length check on every other payload.
    """

    def __init__(
        self,
        store: BlobStore,
        *,
        min_bytes: int = DEFAULT_BLOB_MIN_BYTES,
        cache_bytes: int = 256 * 2**20,
    ) -> None:
        if not isinstance(store, BlobStore):
            raise TypeError(f"store must have put(digest, data) and get(digest), got {store!r}")
        if type(min_bytes) is not int or min_bytes < 1:
            raise ValueError(f"min_bytes must be an int >= 1, got {min_bytes!r}")
        if type(cache_bytes) is not int or cache_bytes < 0:
            raise ValueError(f"cache_bytes must be an int >= 0, got {cache_bytes!r}")
        self.store = store
        self.min_bytes = min_bytes
        self._cache_bytes = cache_bytes
        self._cache: collections.OrderedDict[str, bytes] = collections.OrderedDict()
        self._cached = 0

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        """Each payload with its large blocks' bytes stored and replaced by hashes."""
        return [await self._encode(payload) for payload in payloads]

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        """Each payload with its blocks' bytes back.

        Raises:
            LookupError: a blob is not in the store.
            ValueError: a reference is malformed, or a stored blob's bytes do not
                have its hash.
        """
        return [await self._decode(payload) for payload in payloads]

    async def _encode(self, payload: Payload) -> Payload:
        data = payload.data
        if len(data) < self.min_bytes or payload.metadata.get("encoding") != _JSON:
            return payload
        parts: list[bytes] = []
        refs: list[tuple[int, str]] = []
        done = size = 0
        for start, end in blob_spans(data, self.min_bytes):
            text = data[start:end]
            blob = _from_base64(text)
            if blob is None:
                continue  # not base64 as msgspec writes bytes: it stays inline
            digest = hashlib.sha256(blob).hexdigest()
            await self._put(digest, blob)
            parts.append(data[done:start])
            size += start - done
            refs.append((size, digest))
            parts.append(digest.encode())
            size += 64
            done = end
        if not refs:
            return payload
        parts.append(data[done:])
        metadata = dict(payload.metadata)
        metadata["encoding"] = BLOB_ENCODING
        metadata[_REFS] = encode(refs)
        return Payload(metadata=metadata, data=b"".join(parts))

    async def _decode(self, payload: Payload) -> Payload:
        if payload.metadata.get("encoding") != BLOB_ENCODING:
            return payload
        data = payload.data
        parts: list[bytes] = []
        done = 0
        for offset, digest in _refs.decode(payload.metadata[_REFS]):
            if not (
                _HEX.fullmatch(digest)
                and done <= offset
                and data[offset : offset + 64] == digest.encode()
            ):
                raise ValueError(f"malformed blob reference {[offset, digest]!r} in a payload")
            parts.append(data[done:offset])
            parts.append(binascii.b2a_base64(await self._get(digest), newline=False))
            done = offset + 64
        parts.append(data[done:])
        metadata = dict(payload.metadata)
        metadata["encoding"] = _JSON
        del metadata[_REFS]
        return Payload(metadata=metadata, data=b"".join(parts))

    async def _put(self, digest: str, blob: bytes) -> None:
        if digest in self._cache:
            self._cache.move_to_end(digest)
            return
        await asyncio.to_thread(self.store.put, digest, blob)
        self._keep(digest, blob)

    async def _get(self, digest: str) -> bytes:
        blob = self._cache.get(digest)
        if blob is not None:
            self._cache.move_to_end(digest)
            return blob
        blob = await asyncio.to_thread(self.store.get, digest)
        if blob is None:
            raise LookupError(f"blob sha256:{digest} is not in the blob store {self.store!r}")
        if hashlib.sha256(blob).hexdigest() != digest:
            raise ValueError(f"blob sha256:{digest} in {self.store!r} does not have that hash")
        self._keep(digest, blob)
        return blob

    def _keep(self, digest: str, blob: bytes) -> None:
        if len(blob) > self._cache_bytes:
            return
        cache = self._cache
        cache[digest] = blob
        self._cached += len(blob)
        while self._cached > self._cache_bytes:
            _, old = cache.popitem(last=False)
            self._cached -= len(old)


def blob_converter(
    store: BlobStore,
    *,
    min_bytes: int = DEFAULT_BLOB_MIN_BYTES,
    cache_bytes: int = 256 * 2**20,
) -> DataConverter:
    """Temporal's default data converter with a :class:`BlobCodec` on ``store``:
    pass it to every ``Client.connect(..., data_converter=...)`` of the sessions
    (the starters' and the workers')."""
    codec = BlobCodec(store, min_bytes=min_bytes, cache_bytes=cache_bytes)
    return dataclasses.replace(DataConverter.default, payload_codec=codec)


def by_reference(client: Client) -> int | None:
    """The ``min_bytes`` of ``client``'s :class:`BlobCodec`; ``None`` without one."""
    codec = client.data_converter.payload_codec
    return codec.min_bytes if isinstance(codec, BlobCodec) else None
