"""The store keeps media bytes once per session, in the ``blobs`` table (schema 4)."""

from __future__ import annotations

import contextlib
import itertools
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from replay import SQLiteStore, StoreError, read_log, write_log
from tests.logfiles import bodies, link
from tests.test_log_blobs import MEDIA, MEDIA_EVENTS, PNG, _encoded, _sha


def _blob_rows(path: Path) -> list[tuple[str, int, int]]:
    with contextlib.closing(sqlite3.connect(path)) as db, db:
        return db.execute(
            "SELECT hash, sequence, position FROM blobs ORDER BY sequence, position"
        ).fetchall()


@pytest.mark.parametrize("batches", [[len(MEDIA_EVENTS)], [1, 2, 5, 11]], ids=["once", "steps"])
def test_a_session_with_blobs_round_trips_and_exports_its_log(
    tmp_path: Path, batches: list[int]
) -> None:
    path = tmp_path / "s.db"
    with SQLiteStore(path) as store:
        first = MEDIA_EVENTS[: batches[0]]
        store.create("s", first, status="running" if len(batches) > 1 else "completed", steps=0)
        for start, end in itertools.pairwise(batches):
            status = "completed" if end == len(MEDIA_EVENTS) else "running"
            store.append("s", MEDIA_EVENTS[start:end], expected=start, status=status, steps=1)
        assert store.events("s") == MEDIA_EVENTS
        assert _encoded(store.events("s")) == _encoded(MEDIA_EVENTS)
        exported = tmp_path / "s.jsonl"
        assert store.export("s", exported) == len(MEDIA_EVENTS)
    # The file LogWriter would have written: each blob once, before its first use.
    written = tmp_path / "written.jsonl"
    write_log(written, MEDIA_EVENTS)
    assert exported.read_bytes() == written.read_bytes() == MEDIA.read_bytes()
    assert [h for h, _, _ in _blob_rows(path)] == [
        _sha(PNG),
        _sha(b""),
        _sha(b"GIF89a"),
    ]
    # And back in (a log file imported into another store): the same rows.
    other = tmp_path / "other.db"
    with SQLiteStore(other) as store:
        store.create("s", read_log(exported), status="completed", steps=1)
        assert store.events("s") == MEDIA_EVENTS
    assert _blob_rows(other) == _blob_rows(path)


def _stored(tmp_path: Path) -> Path:
    path = tmp_path / "s.db"
    with SQLiteStore(path) as store:
        store.create("s", MEDIA_EVENTS, status="completed", steps=1)
    return path


def _damage_bytes(db: sqlite3.Connection) -> None:
    (data,) = db.execute("SELECT data FROM blobs WHERE hash = ?", (_sha(PNG),)).fetchone()
    db.execute("UPDATE blobs SET data = ? WHERE hash = ?", (b"\x00" + data[1:], _sha(PNG)))


def _sql(statement: str) -> Any:
    return lambda db: db.execute(statement, (_sha(PNG),))


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (_damage_bytes, f"blob '{_sha(PNG)}' is damaged: its bytes hash to "),
        (_sql("UPDATE blobs SET data = 'text' WHERE hash = ?"), "the stored row is damaged"),
        (_sql("UPDATE blobs SET data = 5 WHERE hash = ?"), "the stored row is damaged"),
        (_sql("UPDATE blobs SET media_type = 'image/gif' WHERE hash = ?"), "hash chain"),
        (_sql("DELETE FROM blobs WHERE hash = ?"), "hash chain"),
    ],
    ids=["bytes", "text", "int", "media type", "missing"],
)
def test_a_damaged_blob_row_is_a_store_error_naming_session_and_blob(
    tmp_path: Path, damage: Any, message: str
) -> None:
    path = _stored(tmp_path)
    with contextlib.closing(sqlite3.connect(path)) as db, db:
        damage(db)
    with SQLiteStore(path) as store, pytest.raises(StoreError) as raised:
        store.events("s")
    text = str(raised.value)
    assert "session 's'" in text and message in text, text


def test_an_event_row_that_is_a_blob_line_is_refused(tmp_path: Path) -> None:
    path = _stored(tmp_path)
    blob = bodies(MEDIA.read_bytes())[2]
    assert blob.startswith(b'{"blob":')
    with contextlib.closing(sqlite3.connect(path)) as db, db:
        (header,) = db.execute("SELECT log_header FROM sessions").fetchone()
        start = link(b"", header.encode()[:-1])
        db.execute(
            "UPDATE events SET event = ?, link = ? WHERE sequence = 0",
            ((blob + b"}").decode(), link(start, blob).decode()),
        )
    with SQLiteStore(path) as store, pytest.raises(StoreError, match="is a blob line"):
        store.events("s")
