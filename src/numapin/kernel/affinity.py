"""The kernel interface for per-thread CPU affinity: list threads, get and set one mask.

Linux affinity belongs to a thread, not a process: ``sched_setaffinity(pid)``
moves only the thread whose id equals ``pid``. Every affinity call numapin
makes goes through a :class:`ThreadKernel`, so the pinning logic can be driven
by the real kernel (:class:`LinuxThreads`) or, in tests, by a model of it.
"""

from __future__ import annotations

import _thread  # threading's calls themselves, without threading's import
import errno
import os

from ..base.choices import Choice
from ..base.errors import ProcessError
from ..cpuset import MAX_ID, CpuSet
from ..facts import procfs

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any, Protocol

    #: ``(get, to_cpuset, put, arg, names)``: ``get(tid)`` gives a raw mask (raw masks compare with
    #: ``==``), ``to_cpuset(raw)`` its CpuSet, ``put(tid, arg)`` applies the target given as ``arg``,
    #: ``names()`` lists the threads' ids as the kernel writes them (decimal strings).
    WalkCalls = tuple[Callable[[int], Any], Callable[[Any], CpuSet], Callable[[int, Any], None], Any,
                      Callable[[], list[str]]]
else:
    Protocol = object  # the protocol is for type checkers; at run time any object with these methods serves

__all__ = ["LinuxThreads", "Outcome", "ThreadKernel", "outcome_of", "walk_calls"]


class Outcome(Choice):
    """What happened to one thread."""

    PINNED = "pinned"
    ALREADY = "already correct"
    KEPT = "kept"
    VANISHED = "vanished"
    FAILED = "failed"


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

    @property
    def pid(self) -> int:
        return os.getpid() if self._pid is None else self._pid

    def self_tid(self) -> int:
        return _thread.get_native_id()

    def list_threads(self) -> list[int]:
        return list(map(int, os.listdir(f"/proc/{self.pid}/task")))

    def get_affinity(self, tid: int) -> CpuSet:
        return CpuSet(os.sched_getaffinity(tid))

    def set_affinity(self, tid: int, cpus: CpuSet) -> None:
        os.sched_setaffinity(tid, cpus)

    def walk_calls(self, target: CpuSet) -> WalkCalls:
        """The calls a walk over many threads makes, as direct as they can be (see :class:`WalkCalls`).

        With CPU ids up to 64 (machine and target), ``os.sched_getaffinity`` and
        ``os.sched_setaffinity`` themselves, with the target's list built once.
        Above, Python's calls convert a set of every CPU on each call (a few
        microseconds at 224 CPUs), so the masks travel as raw ``cpu_set_t``
        bytes through libc instead: the target's buffer built once per pin, a
        read compared as bytes and turned into a CpuSet only when it differs
        from the last one.
        """
        # The listing as the kernel gives it: a walk compares names, and converts only the new ones.
        folder = f"/proc/{self.pid}/task"

        def names() -> list[str]:
            return os.listdir(folder)

        ids = max(_cpu_count(), target.last() + 1 if target else 1)
        if ids <= _SMALL_MASKS:
            return os.sched_getaffinity, CpuSet, os.sched_setaffinity, list(target), names
        raw = _RawAffinity(ids)
        return raw.get, raw.to_cpuset, raw.set, raw.buffer(target), names


    def thread_name(self, tid: int) -> str | None:
        try:
            return procfs.comm(self.pid, tid)
        except ProcessError:
            return None

    def stat(self, tid: int) -> procfs.Stat | None:
        """The thread's ``stat`` (its name, last CPU and start time in one read), None when it is gone."""
        try:
            return procfs.stat(self.pid, tid)
        except ProcessError:
            return None

    def last_cpu(self, tid: int) -> int | None:
        """The CPU the thread last ran on (field 39 of its ``stat``)."""
        found = self.stat(tid)
        return None if found is None else found.last_cpu

    def start_time(self, tid: int) -> int | None:
        """Field 22 of the thread's ``stat``: its start time in clock ticks since boot."""
        found = self.stat(tid)
        return None if found is None else found.start


#: Up to this many CPU ids, Python's own affinity calls are as fast as raw buffers.
_SMALL_MASKS = 64


def _cpu_count() -> int:
    # Asked once a process: glibc reads a sysfs file for it (several microseconds a pin), and
    # it only chooses the faster of two correct ways to pass masks.
    if not _COUNTED:
        _COUNTED.append(os.cpu_count() or 1)
    return _COUNTED[0]


_COUNTED: list[int] = []  # os.cpu_count(), asked once


def walk_calls(ops: ThreadKernel, target: CpuSet) -> WalkCalls:
    """``ops``'s own fast calls when it has them, else its plain methods (a model of the kernel)."""
    fast = getattr(ops, "walk_calls", None)
    if fast is not None:
        calls: WalkCalls = fast(target)
        return calls
    return ops.get_affinity, _same, ops.set_affinity, target, lambda: [str(tid) for tid in ops.list_threads()]


def _same(cpus: CpuSet) -> CpuSet:
    return cpus


class _RawAffinity:
    """``sched_{get,set}affinity`` through libc with ``cpu_set_t`` buffers, for masks of many CPU ids."""

    def __init__(self, cpus: int) -> None:
        import ctypes

        self._ctypes = ctypes
        libc = _libc()
        self._get, self._set = libc.sched_getaffinity, libc.sched_setaffinity
        # At least glibc's CPU_SETSIZE (1024 CPUs); the kernel refuses a read into
        # less than its own mask size (possible CPUs), so get() grows it on EINVAL.
        self._size(max(128, (cpus + 63) // 64 * 8))

    def _size(self, size: int) -> None:
        self.size = size
        self._buf = self._ctypes.create_string_buffer(size)

    def _fail(self) -> None:
        code = self._ctypes.get_errno()
        raise OSError(code, os.strerror(code))

    def get(self, tid: int) -> bytes:
        while self._get(tid, self.size, self._buf) != 0:
            if self._ctypes.get_errno() != errno.EINVAL or self.size >= _MAX_MASK_BYTES:
                self._fail()
            self._size(self.size * 2)
        return self._buf.raw

    def to_cpuset(self, raw: bytes) -> CpuSet:
        return CpuSet.from_bits(int.from_bytes(raw, "little"))

    def buffer(self, target: CpuSet) -> Any:
        return self._ctypes.create_string_buffer(target.bits.to_bytes(self.size, "little"), self.size)

    def set(self, tid: int, buffer: Any) -> None:
        if self._set(tid, len(buffer), buffer) != 0:
            self._fail()


#: CpuSet's id limit, in bytes of mask.
_MAX_MASK_BYTES = (MAX_ID + 1) // 8


def _libc() -> Any:
    if not _LIBC:
        import ctypes

        _LIBC.append(ctypes.CDLL(None, use_errno=True))
    return _LIBC[0]


_LIBC: list[Any] = []  # libc, loaded on first use (for masks of more than 64 CPU ids)


def outcome_of(exc: OSError) -> Outcome:
    """ESRCH means the thread exited meanwhile; anything else is a failure."""
    return Outcome.VANISHED if exc.errno == errno.ESRCH else Outcome.FAILED
