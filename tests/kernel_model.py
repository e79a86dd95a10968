"""An in-memory model of the kernel's per-thread CPU masks, for scale and fault injection.

It implements numapin's ThreadKernel interface. The real-syscall tests stay the
reference; this model only adds machines larger than this one and faults that
cannot be provoked on demand (a thread exiting mid-walk, EPERM, EINVAL).
"""

from __future__ import annotations

import errno
from collections.abc import Callable

from numapin.cpuset import CpuSet


class ModelKernel:
    def __init__(self, allowed: CpuSet, threads: int = 1) -> None:
        self.allowed = allowed
        self.masks: dict[int, CpuSet] = {}
        self.starts: dict[int, int] = {}  # tid -> start time: a reused tid starts later
        self.next_tid = 1000
        self.me = self.spawn(mask=allowed)
        for _ in range(threads - 1):
            self.spawn(mask=allowed)
        self.refuse: dict[int, int] = {}  # tid -> errno for set_affinity
        self.vanish_on_get: set[int] = set()  # tids that exit just before they are read
        self.list_error: int | None = None
        self.on_set: Callable[[int], None] | None = None
        self.on_list: Callable[[int], None] | None = None  # called with the listing's number, after it
        self.sets = 0
        self.listings = 0

    def spawn(self, parent: int | None = None, mask: CpuSet | None = None, tid: int | None = None) -> int:
        """A new thread inherits its creator's mask, as clone() does; ``tid`` reuses an exited one's id."""
        if tid is None:
            tid = self.next_tid
            self.next_tid += 1
        self.starts[tid] = len(self.starts) + sum(self.starts.values()) + 1
        self.masks[tid] = mask if mask is not None else self.masks[parent if parent is not None else self.me]
        return tid

    def self_tid(self) -> int:
        return self.me

    def list_threads(self) -> list[int]:
        if self.list_error is not None:
            raise OSError(self.list_error, "cannot list /proc/self/task")
        listed = list(self.masks)
        self.listings += 1
        if self.on_list is not None:
            self.on_list(self.listings)
        return listed

    def get_affinity(self, tid: int) -> CpuSet:
        if tid in self.vanish_on_get:
            self.masks.pop(tid, None)
        if tid not in self.masks:
            raise OSError(errno.ESRCH, "No such process")
        return self.masks[tid]

    def start_time(self, tid: int) -> int | None:
        return self.starts[tid] if tid in self.masks else None

    def exit(self, tid: int) -> None:
        self.masks.pop(tid)

    def set_affinity(self, tid: int, cpus: CpuSet) -> None:
        if tid not in self.masks:
            raise OSError(errno.ESRCH, "No such process")
        if tid in self.refuse:
            raise OSError(self.refuse[tid], "refused")
        if not cpus & self.allowed:
            raise OSError(errno.EINVAL, "Invalid argument")
        self.masks[tid] = cpus & self.allowed
        self.sets += 1
        if self.on_set is not None:
            self.on_set(tid)
