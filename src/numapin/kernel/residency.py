"""Where a process's memory lives, node by node, from ``/proc/<pid>/numa_maps`` (:func:`residency`)."""

from __future__ import annotations

import os
import re

from ..base.frozen import field, frozen
from ..base.text import format_size
from ..cpuset import CpuSet, CpuSpec
from ..facts import procfs

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable

__all__ = ["KINDS", "Residency", "parse_numa_maps", "residency"]

_NODE_FIELD = re.compile(r"N([0-9]+)=([0-9]+)\Z")
_ADDRESS = re.compile(r"[0-9a-f]{1,16}\Z")


#: ``file=`` paths of mappings that are memory the process made, not files it read:
#: shared anonymous memory, System V and POSIX shared memory, memfd, anonymous huge pages.
_OWN_FILES = ("/dev/zero", "/SYSV", "/memfd:", "/dev/shm/", "/anon_hugepage")
#: The kinds of memory :attr:`Residency.by_kind` tells apart (numa_maps(5): ``anon=``, ``file=``, ``huge``).
KINDS = ("anon", "shmem", "huge", "file")


@frozen
class Residency:
    """Pages and bytes of a process per NUMA node, from ``numa_maps``.

    ``own_bytes`` leaves out pages of files the process maps (its libraries,
    the page cache): they are shared with every process that reads those
    files and lie wherever the first reader ran, so no placement of this
    process can move them. Everything the process allocated itself counts.
    """

    pid: int
    pages: dict[int, int] = field(default_factory=dict)
    bytes: dict[int, int] = field(default_factory=dict)
    own_bytes: dict[int, int] = field(default_factory=dict)
    by_kind: dict[str, dict[int, int]] = field(default_factory=dict)
    """Bytes per node by kind of mapping (:data:`KINDS`): ``anon`` (private anonymous: the heap, stacks, a host
    buffer's), ``shmem`` (shared memory: where ``cudaHostAlloc`` puts pinned memory), ``huge`` (hugetlb), ``file``
    (files mapped)."""
    in_ranges: dict[int, dict[int, int]] = field(default_factory=dict)
    """Bytes per node of the mappings that begin inside each range asked for, by the range's first address (a
    declared host buffer, verified)."""

    @property
    def total(self) -> int:
        return sum(self.bytes.values())

    def outside(self, nodes: CpuSpec, *, own: bool = False) -> int:
        keep = CpuSet(nodes)
        return sum(b for n, b in (self.own_bytes if own else self.bytes).items() if n not in keep)

    def share_outside(self, nodes: CpuSpec, *, own: bool = False) -> float:
        """The fraction (0..1) of resident bytes (``own``: of the process's own memory) on other nodes."""
        total = sum((self.own_bytes if own else self.bytes).values())
        return self.outside(nodes, own=own) / total if total else 0.0

    def __str__(self) -> str:
        if not self.total:
            return f"pid {self.pid}: no resident pages"
        parts = [f"node {n} {format_size(b)} ({100 * b / self.total:.0f}%)" for n, b in sorted(self.bytes.items())]
        return f"pid {self.pid}: " + ", ".join(parts)


def parse_numa_maps(text: str, pid: int = 0, page_size: int | None = None,
                    ranges: Iterable[tuple[int, int]] = ()) -> Residency:
    """Count pages per node in ``numa_maps`` text.

    Each ``N<node>=<pages>`` field counts pages of the mapping's own size
    (``kernelpagesize_kB``, which is the huge page size for huge mappings).
    ``ranges``: ``(address, nbytes)`` whose mappings are also counted apart (:attr:`Residency.in_ranges`).
    """
    wanted = [(start, start + size) for start, size in ranges]
    within: dict[int, dict[int, int]] = {start: {} for start, _ in wanted}
    base = page_size or os.sysconf("SC_PAGE_SIZE")
    pages: dict[int, int] = {}
    sizes: dict[int, int] = {}
    own: dict[int, int] = {}
    kinds: dict[str, dict[int, int]] = {}
    for line in text.splitlines():
        fields = line.split()
        size = base
        counts: list[tuple[int, int]] = []
        mine = True
        kind = "anon"
        huge = False
        for item in fields[2:]:
            if item.startswith("kernelpagesize_kB="):
                value = item.partition("=")[2]
                if value.isdigit():
                    size = int(value) * 1024
            elif item.startswith("file="):
                mine = item[5:].startswith(_OWN_FILES)
                kind = "shmem" if mine else "file"
            elif item == "huge":
                huge = True  # hugetlb memory names its file too (/anon_hugepage, a hugetlbfs path)
            elif (match := _NODE_FIELD.match(item)) is not None:
                counts.append((int(match.group(1)), int(match.group(2))))
        kind = "huge" if huge else kind
        if wanted and counts:
            begins = int(fields[0], 16) if fields and _ADDRESS.match(fields[0]) else -1
            for start, end in wanted:
                if start <= begins < end:
                    here = within[start]
                    for node, count in counts:
                        here[node] = here.get(node, 0) + count * size
        for node, count in counts:
            pages[node] = pages.get(node, 0) + count
            sizes[node] = sizes.get(node, 0) + count * size
            if mine:
                own[node] = own.get(node, 0) + count * size
            table = kinds.setdefault(kind, {})
            table[node] = table.get(node, 0) + count * size
    return Residency(pid, pages, sizes, own, kinds, within)


def residency(pid: int | None = None, ranges: Iterable[tuple[int, int]] = ()) -> Residency:
    """Where the memory of ``pid`` (default: this process) lives, node by node (``ranges``: as
    :func:`parse_numa_maps`); NoSuchProcess or AccessDenied (another user's process: only its owner or root may
    read its numa_maps)."""
    target = os.getpid() if pid is None else pid
    return parse_numa_maps(procfs.numa_maps(target), target, ranges=ranges)
