"""One reader per ``/proc`` file format of a process: ``stat``, ``status``, ``comm``, ``environ``, fd links, tasks.

What another process shows of itself is bytes its owner chose (a name, an
environment): each is decoded with replacement, never trusted to be text.
The kernel's answers are translated once, here, as psutil does: a process
that is gone (or a zombie, for what a zombie no longer has) is
:class:`NoSuchProcess`, one that may not be read is :class:`AccessDenied`,
each with its ``pid``. Process facts are always the live ``/proc``:
``NUMAPIN_FSROOT`` stands in for the machine, never for its processes.
"""

from __future__ import annotations

import errno
import os

from ..base.errors import AccessDenied, NoSuchProcess
from ..base.frozen import frozen

__all__ = ["Stat", "alive", "comm", "environ", "fd_targets", "numa_maps", "owner", "stat", "status",
           "tasks"]

#: Larger than any of these files the kernel writes for one process (environ is capped at ARG_MAX's share).
_CAP = 1 << 21


@frozen
class Stat:
    """The fields of ``/proc/PID[/task/TID]/stat`` numapin uses."""

    pid: int
    name: str
    state: str
    """``R``, ``S``, ``D``, ``Z`` (zombie), ``X`` (dead)..."""
    ppid: int
    start: int
    """Start time in clock ticks since boot: with the id, it names one process (or thread) for the boot."""
    last_cpu: int | None

    @property
    def exited(self) -> bool:
        """A zombie its parent has not reaped yet: a folder and a main thread, no memory or mask worth reading."""
        return self.state in ("Z", "X")


def _path(pid: int, tid: int | None, name: str) -> str:
    return f"/proc/{pid}/{name}" if tid is None else f"/proc/{pid}/task/{tid}/{name}"


def _translated(exc: OSError, pid: int, what: str) -> Exception:
    if isinstance(exc, PermissionError) or exc.errno == errno.EACCES:
        return AccessDenied(pid, what)
    if isinstance(exc, (FileNotFoundError, ProcessLookupError)) or exc.errno in (errno.ENOENT, errno.ESRCH):
        return NoSuchProcess(pid)
    return exc


def _read(pid: int, tid: int | None, name: str, cap: int = _CAP) -> bytes:
    try:
        with open(_path(pid, tid, name), "rb") as f:
            return f.read(cap)
    except OSError as exc:
        raise _translated(exc, pid, name) from None


def stat(pid: int, tid: int | None = None) -> Stat:
    """Process ``pid``'s (or its thread ``tid``'s) ``stat``; NoSuchProcess when gone."""
    text = _read(pid, tid, "stat")
    # The name (field 2) may hold spaces and parentheses: it ends at the last ')'.
    close = text.rfind(b")")
    fields = text[close + 2:].split()
    try:
        last = int(fields[36]) if len(fields) > 36 else None
        return Stat(pid if tid is None else tid, text[text.find(b"(") + 1:close].decode(errors="replace"),
                    fields[0].decode(errors="replace"), int(fields[1]), int(fields[19]), last)
    except (IndexError, ValueError):
        raise NoSuchProcess(pid, f"process {pid}: its stat cannot be read ({text[:80]!r})") from None


def alive(pid: int) -> Stat:
    """``stat(pid)``, and NoSuchProcess for a zombie too: what another tool reads of it is gone."""
    found = stat(pid)
    if found.exited:
        raise NoSuchProcess(pid, f"process {pid} has exited (a zombie its parent has not reaped yet)")
    return found


def status(pid: int) -> dict[str, str]:
    """``/proc/PID/status`` as name → value (``Cpus_allowed_list``, ``Threads``...)."""
    lines = _read(pid, None, "status").decode(errors="replace").splitlines()
    return dict(line.split(":\t", 1) for line in lines if ":\t" in line)


def comm(pid: int, tid: int | None = None) -> str:
    """The process's (or thread's) name, as the kernel keeps it (15 bytes, maybe cut mid-character)."""
    return _read(pid, tid, "comm").rstrip(b"\n").decode(errors="replace")


def environ(pid: int) -> dict[str, str]:
    """The environment ``pid`` started with; AccessDenied for another user's process (its owner or root may)."""
    entries = _read(pid, None, "environ").split(b"\0")
    pairs = (entry.split(b"=", 1) for entry in entries if b"=" in entry)
    return {k.decode(errors="replace"): v.decode(errors="replace") for k, v in pairs}


def numa_maps(pid: int) -> str:
    """``/proc/PID/numa_maps`` whole (a large worker's runs to megabytes); AccessDenied for another user's."""
    return _read(pid, None, "numa_maps", -1).decode(errors="replace")


def fd_targets(pid: int) -> list[str]:
    """What each open file descriptor of ``pid`` points to (fds closed meanwhile are left out)."""
    folder = f"/proc/{pid}/fd"
    try:
        fds = os.listdir(folder)
    except OSError as exc:
        raise _translated(exc, pid, "its open files") from None
    found = []
    for fd in fds:
        try:
            found.append(os.readlink(f"{folder}/{fd}"))
        except OSError:
            continue
    return found


def tasks(pid: int) -> list[int]:
    """The ids of every thread of ``pid``."""
    try:
        return [int(name) for name in os.listdir(f"/proc/{pid}/task")]
    except OSError as exc:
        raise _translated(exc, pid, "its threads") from None


def owner(pid: int) -> int:
    """The user id that owns ``pid``."""
    try:
        return os.stat(f"/proc/{pid}").st_uid
    except OSError as exc:
        raise _translated(exc, pid, "its owner") from None
