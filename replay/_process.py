"""Who holds a lease, and whether that process is still alive (DESIGN §29).

A lease records its holder's *process*: the host name, the process id and the
process's start time. A worker on the same host can then tell a live holder from a
dead one at once, instead of waiting for the lease to expire:

- **Linux** (``/proc``): the start time is field 22 of ``/proc/<pid>/stat`` (clock
  ticks since boot), prefixed by the boot id (``/proc/sys/kernel/random/boot_id``),
  so a reboot changes it too. The holder is gone when ``/proc/<pid>`` is absent or
  when that pid now belongs to another process (its start time differs: the pid
  was reused).
- **Other POSIX systems** (no ``/proc``): the start time is not known (``None``).
  The holder is gone when no process has that pid (``os.kill(pid, 0)`` says so); a
  pid in use counts as alive, even if it was reused: the lease then lasts until it
  expires, the safe side.
- **Windows**: no liveness check (``os.kill`` would terminate the process): leases
  last until they expire.

Across hosts nothing is known: a holder on another host is alive until its lease
expires (DESIGN §20). The host is ``socket.gethostname()``: processes that share a
host name must share a process table (containers have their own host names by
default; give each one its own if they share a store file).
"""

from __future__ import annotations

import os
import socket
from typing import Final

__all__ = ["Holder", "gone", "this_process"]

Holder = tuple[str, int, str | None]
"""A lease holder's process: ``(host, pid, start)`` (``start`` ``None`` when unknown)."""

_PROC: Final = "/proc"


def _boot_id() -> str | None:
    try:
        with open(f"{_PROC}/sys/kernel/random/boot_id", encoding="ascii") as file:
            return file.read().strip()
    except OSError:
        return None


def start_time(pid: int) -> str | None:
    """The start time of process ``pid`` as this module records it, or ``None``:
    no such process, or no ``/proc`` to read it from."""
    # (os.open and one read: a third of what a file object costs; a worker's claim
    # may look at several holders inside its write transaction.)
    try:
        fd = os.open(f"{_PROC}/{pid}/stat", os.O_RDONLY)
    except OSError:
        return None
    try:
        stat = os.read(fd, 4096)  # (about 300 bytes; the kernel gives it in one read)
    except OSError:  # (the process ended between the open and the read)
        return None
    finally:
        os.close(fd)
    # Field 2 (the command name, in parentheses) may hold spaces and parentheses:
    # the fields after it start after the last ')'. Field 22 is the 20th of those.
    fields = stat[stat.rfind(b")") + 2 :].split()
    return f"{_BOOT_ID}:{fields[19].decode()}"


_BOOT_ID: Final = _boot_id()
_HOST: Final = socket.gethostname()
_HAS_PROC: Final = os.path.isdir(f"{_PROC}/self")
_cached: Holder | None = None


def this_process() -> Holder:
    """This process's identity (computed again after a fork: a child is another
    process)."""
    global _cached
    pid = os.getpid()
    if _cached is None or _cached[1] != pid:
        _cached = (_HOST, pid, start_time(pid) if _HAS_PROC else None)
    return _cached


def gone(host: str | None, pid: int | None, start: str | None) -> bool:
    """Whether the lease holder's process is known to be gone.

    ``False`` whenever that cannot be known: another host (or a lease recorded
    without a holder, by an older library), or no way to look on this system.
    """
    if host != _HOST or pid is None:
        return False
    if _HAS_PROC:
        return start_time(pid) != start
    if os.name != "posix":
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # another user's process: alive
        return False
    return False
