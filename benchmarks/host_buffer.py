"""Filling a host buffer, side by side: numapin.host_buffer against its floor, N threads against one, and against
a plain bytearray.

Three ratios, each measured in alternated pairs (A B A B ..., the ratio taken pair by pair, so a drift of the
machine's speed touches both alike), with the budget each must keep:

- ``host_buffer(SIZE, node=N, fill_threads=K)`` / floor — budget 1.1x. The floor: a fresh private anonymous
  mapping of the same size, K threads each pinned to node N's CPUs and populating its slice with the kernel's
  own call (``madvise(MADV_POPULATE_WRITE)`` through ctypes, which lets go of Python's lock), no read-back, no
  binding; what any such fill must pay. numapin adds the ``mbind``, its checks and the kernel's read-back of
  where every page went.
- one filling thread / K threads, the same host_buffer call: how far threads scale here (the host's cores and
  memory bandwidth decide it; a Python loop touching pages does not scale at all under the interpreter's lock,
  ``../shared/research/host-memory.md``).
- ``bytearray(SIZE)`` / host_buffer: what a plain Python buffer (zeroed by one thread, on whatever node the
  allocator's pages come from) costs beside it.

Run: python benchmarks/host_buffer.py [SIZE_MIB] [PAIRS]   (default 1024 MiB, 5 pairs)
"""

from __future__ import annotations

import mmap
import os
import statistics
import sys
import threading
import time
from collections.abc import Callable

import numapin
from numapin.cpuset import CpuSet
from numapin.facts.topology import read_topology
from numapin.kernel import mapping


def _node() -> tuple[int, CpuSet]:
    topology = read_topology()
    for node in topology.nodes:
        cpus = node.cpus & topology.allowed
        if cpus:
            return node.id, cpus
    raise SystemExit("no node with CPUs this process may use")


def floor(size: int, cpus: CpuSet, threads: int) -> float:
    """K node-pinned threads populating their slices of a fresh mapping; seconds."""
    buf = mmap.mmap(-1, size, flags=mapping.flags_for(None))
    address = mapping.address_of(buf)
    page = mmap.PAGESIZE
    pages = size // page

    def fill(start: int, end: int) -> None:
        os.sched_setaffinity(0, cpus)
        mapping.populate(address + start * page, (end - start) * page)

    started = time.perf_counter()
    workers = [threading.Thread(target=fill, args=(pages * i // threads, pages * (i + 1) // threads))
               for i in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    took = time.perf_counter() - started
    buf.close()
    return took


def numapin_fill(size: int, node: int, threads: int) -> float:
    """host_buffer's whole call (mapping, binding, filling, read-back); seconds."""
    started = time.perf_counter()
    with numapin.host_buffer(size, node=node, fill_threads=threads):
        took = time.perf_counter() - started
    return took


def plain(size: int) -> float:
    started = time.perf_counter()
    buf = bytearray(size)
    took = time.perf_counter() - started
    del buf
    return took


def paired(a: Callable[[], float], b: Callable[[], float], pairs: int) -> tuple[float, float, float]:
    """Median of a/b over alternated pairs, with the medians of each."""
    ratios, first, second = [], [], []
    a(), b()  # warm: imports, the first mapping of its size
    for _ in range(pairs):
        x, y = a(), b()
        first.append(x)
        second.append(y)
        ratios.append(x / y)
    return statistics.median(ratios), statistics.median(first), statistics.median(second)


def main(argv: list[str]) -> int:
    size = (int(argv[1]) if len(argv) > 1 else 1024) << 20
    pairs = int(argv[2]) if len(argv) > 2 else 5
    node, cpus = _node()
    threads = min(len(cpus), 16)
    gib = size / (1 << 30)
    print(f"host_buffer: {size >> 20} MiB on node {node} ({len(cpus)} CPUs there, {threads} filling threads), "
          f"{pairs} alternated pairs, medians")
    ratio, ours, base = paired(lambda: numapin_fill(size, node, threads), lambda: floor(size, cpus, threads), pairs)
    print(f"  host_buffer / floor ({threads} threads): {ratio:.3f}x  ({gib / ours:.2f} vs {gib / base:.2f} GiB/s;"
          f" budget 1.1x: {'kept' if ratio <= 1.1 else 'NOT KEPT'})")
    ratio, one, many = paired(lambda: numapin_fill(size, node, 1), lambda: numapin_fill(size, node, threads), pairs)
    print(f"  1 thread / {threads} threads: {ratio:.3f}x  ({gib / one:.2f} vs {gib / many:.2f} GiB/s)")
    ratio, array, ours = paired(lambda: plain(size), lambda: numapin_fill(size, node, threads), pairs)
    print(f"  bytearray / host_buffer: {ratio:.3f}x  ({gib / array:.2f} vs {gib / ours:.2f} GiB/s)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
