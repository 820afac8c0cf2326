"""A lease names its holder's process; a dead holder on this host is taken over at
once (DESIGN §29). The crash tests with real SIGKILLed workers are in
tests/test_durable_crash.py and tests/test_worker_crash.py."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest

from replay import SessionLeased, SQLiteStore
from replay import _process as process

from .test_store import events_of


def dead_pid() -> int:
    """The pid of a process that has exited (and been reaped)."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_this_process_is_this_host_this_pid_and_its_start():
    host, pid, start = process.this_process()
    assert (host, pid) == (socket.gethostname(), os.getpid())
    assert start == process.start_time(pid)
    assert process.this_process() is process.this_process()  # computed once


def test_a_forked_child_is_another_process(monkeypatch):
    before = process.this_process()
    monkeypatch.setattr(os, "getpid", lambda: before[1] + 1)
    assert process.this_process()[1] == before[1] + 1


needs_proc = pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="Linux /proc")


@needs_proc
def test_the_start_time_is_field_22_of_proc_stat_with_the_boot_id():
    start = process.start_time(os.getpid())
    assert start is not None
    boot, ticks = start.rsplit(":", 1)
    with open("/proc/self/stat") as file:
        assert ticks == file.read().rsplit(")", 1)[1].split()[19]
    with open("/proc/sys/kernel/random/boot_id") as file:
        assert boot == file.read().strip()
    assert process.start_time(dead_pid()) is None


def test_no_boot_id_is_none(monkeypatch):
    monkeypatch.setattr(process, "_PROC", "/nonexistent")
    assert process._boot_id() is None


@needs_proc
@pytest.mark.parametrize(
    ("case", "is_gone"),
    [
        ("this process", False),
        ("a dead pid", True),
        ("a reused pid (another start time)", True),
        ("another host", False),
        ("no holder recorded", False),
    ],
)
def test_gone_on_linux(case, is_gone):
    host, pid, start = process.this_process()
    holder = {
        "this process": (host, pid, start),
        "a dead pid": (host, dead_pid(), start),
        "a reused pid (another start time)": (host, pid, "another-boot:1"),
        "another host": ("elsewhere", dead_pid(), start),
        "no holder recorded": (None, None, None),
    }[case]
    assert process.gone(*holder) is is_gone


@pytest.mark.parametrize(
    ("raised", "is_gone"),
    [(None, False), (ProcessLookupError, True), (PermissionError, False)],
)
def test_gone_without_proc_asks_whether_the_pid_exists(monkeypatch, raised, is_gone):
    # Elsewhere (no /proc) only the pid can be checked: a reused pid counts as alive.
    monkeypatch.setattr(process, "_HAS_PROC", False)
    monkeypatch.setattr(process.os, "name", "posix")
    asked = []

    def kill(pid: int, sig: int) -> None:
        asked.append((pid, sig))
        if raised is not None:
            raise raised

    monkeypatch.setattr(process.os, "kill", kill)
    host = process.this_process()[0]
    assert process.gone(host, 12345, None) is is_gone
    assert asked == [(12345, 0)]


def test_gone_on_windows_is_never_known(monkeypatch):
    # os.kill would terminate the process there: leases last until they expire.
    monkeypatch.setattr(process, "_HAS_PROC", False)
    monkeypatch.setattr(process.os, "name", "nt")
    monkeypatch.setattr(process.os, "kill", None)
    assert process.gone(process.this_process()[0], 12345, None) is False


# --------------------------------------------------------------------------- the store


@pytest.fixture
def store(tmp_path):
    with SQLiteStore(tmp_path / "s.db") as store:
        yield store


def holder_of(store: SQLiteStore, session_id: str) -> tuple[object, ...]:
    row = store._db.execute(  # type: ignore[union-attr]
        "SELECT lease_owner, lease_host, lease_pid, lease_start FROM sessions WHERE id = ?",
        (session_id,),
    ).fetchone()
    return tuple(row)


def test_a_lease_records_its_process_and_a_release_forgets_it(store):
    me = process.this_process()
    store.create("s", events_of()[:3], status="running", steps=1, owner="a", lease_seconds=60)
    assert holder_of(store, "s") == ("a", *me)
    assert store.release("s", "a")
    assert holder_of(store, "s") == (None, None, None, None)
    store.acquire("s", "b", 60)
    assert holder_of(store, "s") == ("b", *me)
    events = events_of()
    store.append("s", events[3:], expected=3, status="completed", steps=1, owner="b")
    assert holder_of(store, "s") == (None, None, None, None)  # finished: unleased


@needs_proc
def test_a_dead_holder_on_this_host_is_taken_over_at_once(store):
    store.create("s", events_of()[:3], status="running", steps=1, owner="a", lease_seconds=600)
    store._db.execute("UPDATE sessions SET lease_pid = ? WHERE id = 's'", (dead_pid(),))
    assert store.runnable() == ["s"]
    assert store.acquire("s", "b", 600).lease_owner == "b"
    assert holder_of(store, "s") == ("b", *process.this_process())


def test_a_live_holder_or_one_elsewhere_keeps_its_lease(store):
    store.create("s", events_of()[:3], status="running", steps=1, owner="a", lease_seconds=600)
    assert store.runnable() == []  # its holder (this process) is alive
    with pytest.raises(SessionLeased, match="its process is alive, on this host"):
        store.acquire("s", "b", 600)
    store._db.execute("UPDATE sessions SET lease_host = 'elsewhere' WHERE id = 's'")
    assert store.runnable() == []
    with pytest.raises(SessionLeased, match=r"\(on another host, which this process"):
        store.acquire("s", "b", 600)
    # A lease taken by a library before schema 4 names no process: it stands.
    store._db.execute("UPDATE sessions SET lease_host = NULL, lease_pid = NULL, lease_start = NULL")
    with pytest.raises(SessionLeased) as caught:
        store.acquire("s", "b", 600)
    assert (caught.value.host, caught.value.pid) == (None, None)
    assert str(caught.value).startswith("session 's' is leased by 'a' for 600.0 more seconds")
    assert "(from a process that is not recorded, which" in str(caught.value)


@needs_proc
def test_a_process_that_ends_between_the_open_and_the_read_has_no_start_time(monkeypatch):
    def ended(fd: int, size: int) -> bytes:
        raise ProcessLookupError(3, "No such process")

    monkeypatch.setattr(process.os, "read", ended)
    assert process.start_time(os.getpid()) is None
