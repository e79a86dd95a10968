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
from ..base.text import decimal

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = ["Stat", "alive", "cgroup_paths", "cgroups", "comm", "environ", "fd_targets", "foreign_root", "inner_pid",
           "inner_uid", "locked_memory_limit", "namespace", "numa_maps", "open_files", "own_memory", "owner", "pids",
           "seccomp_mode", "seen", "stat", "status", "tasks"]

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
    flags: int = 0
    """The kernel's ``PF_*`` flags of the task."""
    session: int = 0
    """The session it belongs to (the id of the session's leader)."""

    @property
    def kernel_thread(self) -> bool:
        """A kernel thread (``PF_KTHREAD``): no memory, no files, never anybody's worker."""
        return bool(self.flags & 0x00200000)

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
    """The file whole, up to ``cap`` bytes (-1: no cap). Plain descriptor calls: ``ps`` reads a few files of
    every process of the host, and Python's file objects cost more than the kernel's answer (2x, for stat)."""
    try:
        fd = os.open(_path(pid, tid, name), os.O_RDONLY | os.O_CLOEXEC)
    except OSError as exc:
        raise _translated(exc, pid, name) from None
    try:
        chunks, left = [], cap if cap >= 0 else 1 << 62
        while left > 0:  # a /proc file is made as it is read: to the end (an empty read), not to a size
            chunk = os.read(fd, min(left, 1 << 16))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)
    except OSError as exc:
        raise _translated(exc, pid, name) from None
    finally:
        os.close(fd)


def pids() -> list[int]:
    """Every process of this PID namespace's ``/proc``, in order."""
    return sorted(int(name) for name in os.listdir("/proc") if name.isdigit())


def stat(pid: int, tid: int | None = None) -> Stat:
    """Process ``pid``'s (or its thread ``tid``'s) ``stat``; NoSuchProcess when gone."""
    text = _read(pid, tid, "stat")
    # The name (field 2) may hold spaces and parentheses: it ends at the last ')'.
    close = text.rfind(b")")
    fields = text[close + 2:].split()
    try:
        last = int(fields[36]) if len(fields) > 36 else None
        return Stat(pid if tid is None else tid, text[text.find(b"(") + 1:close].decode(errors="replace"),
                    fields[0].decode(errors="replace"), int(fields[1]), int(fields[19]), last, int(fields[6]),
                    int(fields[3]))
    except (IndexError, ValueError):
        raise NoSuchProcess(pid, f"process {pid}: its stat cannot be read ({text[:80]!r})") from None


def alive(pid: int, seen: Stat | None = None) -> Stat:
    """``stat(pid)``, and NoSuchProcess for a zombie too: what another tool reads of it is gone. ``seen``: its
    stat, where the caller read it."""
    found = stat(pid) if seen is None else seen
    if found.exited:
        raise NoSuchProcess(pid, f"process {pid} has exited (a zombie its parent has not reaped yet)")
    return found


def status(pid: int) -> dict[str, str]:
    """``/proc/PID/status`` as name → value (``Cpus_allowed_list``, ``Threads``...)."""
    lines = _read(pid, None, "status").decode(errors="replace").splitlines()
    return dict(line.split(":\t", 1) for line in lines if ":\t" in line)


def locked_memory_limit(pid: int) -> int | None:
    """The bytes process ``pid`` may lock (``RLIMIT_MEMLOCK``'s soft limit, ``Max locked memory`` of
    ``/proc/PID/limits``); None where it is unlimited, or the process may lock past it (CAP_IPC_LOCK in effect)."""
    effective = _hex(status(pid).get("CapEff", ""))
    if effective is not None and effective >> _CAP_IPC_LOCK & 1:
        return None
    for line in _read(pid, None, "limits").decode(errors="replace").splitlines():
        if line.startswith("Max locked memory"):
            soft = line[len("Max locked memory"):].split()[:1]
            return None if soft == ["unlimited"] else decimal(soft[0]) if soft else None
    return None


#: capabilities(7): the capability that lifts RLIMIT_MEMLOCK.
_CAP_IPC_LOCK = 14


def _hex(text: str) -> int | None:
    """A kernel's hexadecimal word (``CapEff``'s ``000001ffffffffff``), or None."""
    text = text.strip()
    return int(text, 16) if 0 < len(text) <= 16 and all(c in "0123456789abcdefABCDEF" for c in text) else None


def comm(pid: int, tid: int | None = None) -> str:
    """The process's (or thread's) name, as the kernel keeps it (15 bytes, maybe cut mid-character)."""
    return _read(pid, tid, "comm").rstrip(b"\n").decode(errors="replace")


def environ(pid: int) -> dict[str, str]:
    """The environment ``pid`` started with; AccessDenied for another user's process (its owner or root may)."""
    # Decoded whole, then split: '=' and NUL are one byte each in UTF-8 and never inside another character, so
    # the pieces are what decoding each would give, at a fraction of the calls (ps reads every worker's).
    found = {}
    for entry in _read(pid, None, "environ").decode(errors="replace").split("\0"):
        name, equals, value = entry.partition("=")
        if equals:
            found[name] = value
    return found


def own_memory(pid: int) -> int | None:
    """Bytes of memory the process made itself and holds resident (anonymous, shared memory, huge pages), from
    ``status``, which any user may read; None for a process without memory (a kernel thread). What ``numa_maps``
    counts as its own, at a small share of the cost (that file walks every mapping's pages)."""
    # Three fields found in the bytes, not status()'s whole parse: ps asks this of every worker, and parsing
    # the fifty-odd lines costs six times the read (76 µs against 12 here).
    text = _read(pid, None, "status")
    total, seen = 0, False
    for name in (b"\nRssAnon:", b"\nRssShmem:", b"\nHugetlbPages:"):  # each "\nName:\t   1234 kB"
        at = text.find(name)
        if at >= 0:
            value = text[at + len(name):text.find(b"\n", at + 1)].split()
            if len(value) == 2 and value[0].isdigit():
                total, seen = total + (int(value[0]) << 10), True
    return total if seen else None


def cgroup_paths(pid: int) -> list[str]:
    """The cgroup path of each hierarchy ``pid`` is in (``/proc/PID/cgroup``: one for v2, one per v1 hierarchy)."""
    return [path for _, path in cgroups(pid)]


def cgroups(pid: int) -> list[tuple[str, str]]:
    """``(controllers, path)`` of each hierarchy ``pid`` is in: the controllers as ``/proc/PID/cgroup`` names
    them (``cpu,cpuacct``, ``name=systemd``; empty for v2), the path as this reader's cgroup namespace sees it."""
    lines = _read(pid, None, "cgroup").decode(errors="replace").splitlines()
    return [(parts[1], parts[2]) for parts in (line.split(":", 2) for line in lines) if len(parts) == 3]


def numa_maps(pid: int) -> str:
    """``/proc/PID/numa_maps`` whole (a large worker's runs to megabytes); AccessDenied for another user's."""
    return _read(pid, None, "numa_maps", -1).decode(errors="replace")


def fd_targets(pid: int) -> list[str]:
    """What each open file descriptor of ``pid`` points to (fds closed meanwhile are left out)."""
    try:
        folder = os.open(f"/proc/{pid}/fd", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as exc:
        raise _translated(exc, pid, "its open files") from None
    try:
        fds = os.listdir(folder)
        found = []
        for fd in fds:
            try:
                found.append(os.readlink(fd, dir_fd=folder))  # from the folder held: no path walked per link
            except OSError:
                continue
        return found
    except OSError as exc:
        raise _translated(exc, pid, "its open files") from None
    finally:
        os.close(folder)


def tasks(pid: int) -> list[int]:
    """The ids of every thread of ``pid``."""
    try:
        return [int(name) for name in os.listdir(f"/proc/{pid}/task")]
    except OSError as exc:
        raise _translated(exc, pid, "its threads") from None


def foreign_root(pid: int) -> str | None:
    """``/proc/PID/root`` where ``pid``'s root is not this process's (a container's, a chroot's): the path its
    files are seen through. None where it is the same, or may not be looked into (another user's process)."""
    path = f"/proc/{pid}/root"
    try:
        theirs, ours = os.stat(path), os.stat("/")
    except OSError:
        return None
    return None if (theirs.st_dev, theirs.st_ino) == (ours.st_dev, ours.st_ino) else path


def owner(pid: int) -> int:
    """The user id that owns ``pid``."""
    return seen(pid)[0]


def seen(pid: int) -> tuple[int, int]:
    """The user id that owns ``pid``, and when the kernel made its ``/proc`` entry (ns): one ``stat``. The entry
    lives as long as the process does, so an unchanged time names the same process, without its start time read;
    a time changed (the entry made again once the kernel let it go) says nothing either way."""
    try:
        found = os.stat(f"/proc/{pid}")
    except OSError as exc:
        raise _translated(exc, pid, "its owner") from None
    return found.st_uid, found.st_ctime_ns


def open_files(pid: int) -> int | None:
    """How many files ``pid`` holds open (the size of ``/proc/PID/fd``, Linux 6.2): one ``stat``, no listing.
    None where the kernel does not say (before 6.2 it shows 0) or it may not be looked into."""
    try:
        count = os.stat(f"/proc/{pid}/fd").st_size
    except OSError:
        return None
    return count or None


def seccomp_mode(pid: int) -> int | None:
    """The process's seccomp mode (``Seccomp:`` of its status): 0 none, 1 strict, 2 a filter (what container
    runtimes install); None where it cannot be read (gone, not shown, a kernel without seccomp)."""
    try:
        value = status(pid).get("Seccomp", "").strip()
    except (NoSuchProcess, AccessDenied):
        return None
    return int(value) if value.isascii() and value.isdigit() else None


def namespace(pid: int | str, kind: str) -> int:
    """The inode of the process's ``kind`` namespace (``pid``, ``mnt``...: ``/proc/PID/ns/KIND``), which names
    it for the boot; ``pid`` may be ``"self"``. Only the owner or root may look (ptrace's read access). Read
    from the link's text (``mnt:[4026531841]``), not by ``stat``: ``ps`` asks it of every process of the host,
    and a link's text costs half a ``stat`` of the namespace's file."""
    try:
        text = os.readlink(f"/proc/{pid}/ns/{kind}")
    except OSError as exc:
        raise _translated(exc, 0 if pid == "self" else int(pid), f"its {kind} namespace") from None
    inode = decimal(text[text.find("[") + 1:-1]) if text.endswith("]") else None
    if inode is None:  # never from a kernel with /proc/PID/ns; said rather than guessed
        raise OSError(errno.EINVAL, f"/proc/{pid}/ns/{kind} reads {text!r}, not KIND:[INODE]")
    return inode


def inner_pid(pid: int, seen: Mapping[str, str] | None = None) -> int:
    """The process's id in its own PID namespace: the last of its ``NSpid`` (the kernel lists it from the
    reader's namespace inward); ``pid`` itself where the kernel shows no list. ``seen``: its status, where the
    caller read it."""
    ids = (status(pid) if seen is None else seen).get("NSpid", "").split()
    return int(ids[-1]) if ids and ids[-1].isascii() and ids[-1].isdigit() else pid


def inner_uid(pid: int, uid: int) -> int | None:
    """What the host's user ``uid`` is in process ``pid``'s user namespace (its ``uid_map``: inside, outside,
    count); None where it maps to none there."""
    try:
        text = _read(pid, None, "uid_map").decode(errors="replace")
    except (NoSuchProcess, AccessDenied):
        return uid
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 3 and all(p.isascii() and p.isdigit() for p in parts):
            inside, outside, count = map(int, parts)
            if outside <= uid < outside + count:
                return inside + uid - outside
    return None
