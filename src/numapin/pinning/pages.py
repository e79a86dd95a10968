"""A mapping's pages made where they belong, and read back from the kernel: the filling half of
:func:`numapin.host_buffer`.

Threads on a node's CPUs each populate a slice with the kernel's own call (``MADV_POPULATE_WRITE``, which lets go
of Python's lock): the range's policy, or the kernel's local policy where none is set, puts each page on the
faulting thread's node. Where the pages went is asked of the kernel afterwards, never assumed.
"""

from __future__ import annotations

import mmap
import os
import threading
from itertools import pairwise

from ..base.errors import EnvironmentProblem
from ..cpuset import CpuSet
from ..kernel import mapping

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = ["STRIPE", "fill", "fill_striped", "read_back"]

#: The filling threads a buffer gets at most, unless asked for more (never more than its node's CPUs).
_MOST_THREADS = 16


def fill(address: int, nbytes: int, page: int, cpus: CpuSet, fill_threads: int | None) -> int:
    """Populate the range in slices of whole pages, each by a thread on ``cpus`` (where there are any); how many
    threads filled it: those asked, or the node's CPUs up to :data:`_MOST_THREADS`, never more than the node has CPUs
    (more threads than CPUs only take turns: 5,000 asked would be 5,000 threads)."""
    count = min(fill_threads or _MOST_THREADS, len(cpus) or 1)
    pages = nbytes // page  # slices of whole pages: a huge page is populated whole or not at all
    count = max(1, min(count, pages))
    _run(address, [(cpus, [(page * (pages * i // count), page * (pages * (i + 1) // count - pages * i // count))])
                  for i in range(count)])
    return count


def fill_striped(address: int, nbytes: int, page: int, local: Mapping[int, CpuSet], fill_threads: int | None) -> int:
    """Spread the range without a policy: stripe ``k`` goes to the ``k % n``-th of the ``n`` nodes, made by
    threads on that node's CPUs, which the kernel's local policy follows. Stripes are :data:`STRIPE` bytes (or a
    page, where pages are larger) at addresses that are multiples of it: a transparent huge page the kernel makes
    on a fault is one stripe, never half of two nodes' stripes. Each node gets its share of the threads asked (at
    least one, at most its CPUs). How many threads filled it."""
    stripe = max(STRIPE, page)
    end = address + nbytes
    edges = [address, *range((address // stripe + 1) * stripe, end, stripe), end]
    stripes = [(a - address, b - a) for a, b in pairwise(edges) if b > a]
    order = sorted(local)
    share = max(1, (fill_threads or _MOST_THREADS) // len(order))
    jobs = []
    for k, n in enumerate(order):
        mine = stripes[k::len(order)]
        count = max(1, min(share, len(local[n]), len(mine)))
        jobs += [(local[n], mine[i::count]) for i in range(count)]
    _run(address, jobs)
    return len(jobs)


def _run(address: int, jobs: list[tuple[CpuSet, list[tuple[int, int]]]]) -> None:
    """Populate each job's ranges (offset, length) from ``address`` in a thread of its own on the job's CPUs (none:
    wherever the process runs); the first failure, raised once all are done."""
    failures: list[BaseException] = []

    def fill(cpus: CpuSet, ranges: list[tuple[int, int]]) -> None:
        try:
            if cpus:
                os.sched_setaffinity(0, cpus)
            for offset, length in ranges:
                mapping.populate(address + offset, length)
        except BaseException as exc:
            failures.append(exc)

    threads = [threading.Thread(target=fill, args=job, name=f"numapin-fill-{i}", daemon=True)
               for i, job in enumerate(jobs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if failures:
        raise EnvironmentProblem(f"the buffer could not be filled: {failures[0]}") from failures[0]


#: A spread's stripe where no memory policy interleaves it page by page (a 2 MiB huge page's worth: a
#: transparent huge page is never split between nodes).
STRIPE = 2 << 20


def read_back(address: int, nbytes: int, page_size: int, notes: list[str]) -> tuple[dict[int, int], int]:
    """The range's bytes on each node, and its page size, as the kernel counts its own pages: the mapping's line
    of ``numa_maps`` where the mapping is the buffer alone (one read), else ``move_pages`` asked for no move, page
    by page (a neighbour with the same flags and policy may have merged with it)."""
    if nbytes // page_size <= _ASKED_PAGE_BY_PAGE and _SMALL_PART * nbytes < _resident():
        # A buffer that is a small part of the process asks the kernel of its own pages alone: numa_maps walks
        # every page of every mapping, and a process making hundreds of small buffers would pay that walk for each
        # (quadratic in them). Where the buffer is most of what the process holds, that one walk costs less than
        # asking page by page (a quarter, at 256 MiB).
        try:
            pages, stride = mapping.page_nodes(address, nbytes, page_size)
            return {n: count * stride * page_size for n, count in pages.items()}, page_size
        except OSError:
            pass  # no move_pages here: numa_maps below
    line = _numa_maps_line(address)
    size = page_size
    if line is not None:
        size = next((int(item.partition("=")[2]) * 1024 for item in line.split()
                     if item.startswith("kernelpagesize_kB=") and item.partition("=")[2].isdigit()), page_size)
        if _extent(address) == nbytes:
            from ..kernel.residency import parse_numa_maps

            return parse_numa_maps(line, page_size=size).bytes, size
    try:
        pages, stride = mapping.page_nodes(address, nbytes, size)
    except OSError as exc:
        notes.append(f"where its pages are could not be read back (move_pages: {exc.strerror}, and its mapping is "
                     "not its own in numa_maps)")
        return {}, size
    return {n: count * stride * size for n, count in pages.items()}, size


#: How many times a buffer's size the process must hold for the read-back to ask of the buffer's pages alone.
_SMALL_PART = 4


def _resident() -> int:
    """This process's resident bytes (``statm``: one short read); 0 where unreadable."""
    try:
        with open("/proc/self/statm", "rb") as statm:
            return int(statm.read().split()[1]) * mmap.PAGESIZE
    except (OSError, ValueError, IndexError):
        return 0


#: The most pages a buffer has for its read-back to ask the kernel page by page (``move_pages``) rather than read
#: the process's ``numa_maps`` (256 MiB of base pages).
_ASKED_PAGE_BY_PAGE = 1 << 16


def _numa_maps_line(address: int) -> str | None:
    from ..facts import procfs

    wanted = f"{address:x} "
    return next((line for line in procfs.numa_maps(os.getpid()).splitlines() if line.startswith(wanted)), None)


def _extent(address: int) -> int | None:
    """The length of the mapping that begins at ``address`` (``/proc/self/maps``)."""
    with open("/proc/self/maps", encoding="ascii", errors="replace") as maps:
        for line in maps:
            start, _, end = line.partition(" ")[0].partition("-")
            if int(start, 16) == address:
                return int(end, 16) - address
    return None
