"""The kernel interface for per-thread CPU affinity: list threads, get and set one mask.

Linux affinity belongs to a thread, not a process: ``sched_setaffinity(pid)``
moves only the thread whose id equals ``pid``. Every affinity call numapin
makes goes through a :class:`ThreadKernel`, so the pinning logic can be driven
by the real kernel (:class:`LinuxThreads`) or, in tests, by a model of it.
"""

from __future__ import annotations

import enum
import errno
import os
import threading

from .cpuset import CpuSet

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing at run time (mypy knows the name)
if TYPE_CHECKING:
    from typing import Protocol
else:
    Protocol = object  # the protocol is for type checkers; at run time any object with these methods serves

__all__ = ["LinuxThreads", "Outcome", "ThreadKernel", "outcome_of"]


class Outcome(str, enum.Enum):
    """What happened to one thread."""

    PINNED = "pinned"
    ALREADY = "already correct"
    KEPT = "kept"
    VANISHED = "vanished"
    FAILED = "failed"

    def __str__(self) -> str:
        return self.value


class ThreadKernel(Protocol):
    """The calls pinning needs; each raises OSError as the kernel would."""

    def self_tid(self) -> int: ...

    def list_threads(self) -> list[int]: ...

    def get_affinity(self, tid: int) -> CpuSet: ...

    def set_affinity(self, tid: int, cpus: CpuSet) -> None: ...

    def start_time(self, tid: int) -> int | None:
        """When the thread started (clock ticks since boot), None when it is gone: with the tid,
        it names one thread for good, since the kernel reuses thread ids."""
        ...


class LinuxThreads:
    """The real kernel: ``/proc/<pid>/task`` and ``sched_{get,set}affinity`` on thread ids."""

    def __init__(self, pid: int | None = None) -> None:
        # None = this process, as seen at call time (stays right after fork).
        self._pid = pid
        # Pinning reads one mask per thread, and neighbouring threads almost
        # always share one: reusing the CpuSet of the last mask read keeps the
        # per-thread cost at the syscall's.
        self._last_read: tuple[set[int], CpuSet] | None = None
        self._target: tuple[CpuSet, list[int]] | None = None

    @property
    def pid(self) -> int:
        return os.getpid() if self._pid is None else self._pid

    def self_tid(self) -> int:
        return threading.get_native_id()

    def list_threads(self) -> list[int]:
        return list(map(int, os.listdir(f"/proc/{self.pid}/task")))

    def get_affinity(self, tid: int) -> CpuSet:
        mask = os.sched_getaffinity(tid)
        last = self._last_read
        if last is not None and last[0] == mask:
            return last[1]
        found = CpuSet(mask)
        self._last_read = (mask, found)
        return found

    def set_affinity(self, tid: int, cpus: CpuSet) -> None:
        last = self._target
        if last is None or last[0] is not cpus:
            last = self._target = (cpus, list(cpus))
        os.sched_setaffinity(tid, last[1])

    def thread_name(self, tid: int) -> str | None:
        try:
            with open(f"/proc/{self.pid}/task/{tid}/comm") as f:
                return f.read().strip()
        except OSError:
            return None

    def _stat_field(self, tid: int, index: int) -> int | None:
        try:
            with open(f"/proc/{self.pid}/task/{tid}/stat") as f:
                text = f.read()
        except OSError:
            return None
        # The name (field 2) may hold spaces and parentheses: split after the last ')'.
        fields = text[text.rfind(")") + 2:].split()
        try:
            return int(fields[index])
        except (IndexError, ValueError):
            return None

    def last_cpu(self, tid: int) -> int | None:
        """The CPU the thread last ran on (field 39 of its ``stat``)."""
        return self._stat_field(tid, 36)

    def start_time(self, tid: int) -> int | None:
        """Field 22 of the thread's ``stat``: its start time in clock ticks since boot."""
        return self._stat_field(tid, 19)


def outcome_of(exc: OSError) -> Outcome:
    """ESRCH means the thread exited meanwhile; anything else is a failure."""
    return Outcome.VANISHED if exc.errno == errno.ESRCH else Outcome.FAILED
