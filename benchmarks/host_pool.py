"""A host pool of N bytes, the ways users make one today, side by side with numapin.host_buffer: the memory each
holds over what was asked, and how long each takes to be ready; then a pool spread over every node against its
floor.

1. **Exact size.** Each allocation is made in a fresh child process (no allocator's cache from an earlier one),
   which reports its resident memory before and after (``RssAnon + RssShmem + RssFile`` of ``/proc/self/status``)
   and the seconds the allocation took, ready to use (every page made):

   - ``bytearray(N)``: zeroed by one thread, wherever its pages come from;
   - ``mmap`` + touch: an anonymous mapping written one byte a page from Python (how a pool is prefaulted without
     numapin);
   - ``numapin.host_buffer(N, node=...)``: bound, filled by the node's threads, read back;
   - ``torch.empty(N, dtype=uint8, pin_memory=True)``, where PyTorch with CUDA is installed (the device check):
     PyTorch's pinned allocator rounds each block up to a power of two (vllm#53042), so a pool of 1.25 GiB holds
     2 GiB. Without CUDA the row says so and measures nothing.

2. **A spread's fill.** ``host_buffer(N, nodes=<every node with CPUs>)`` against its floor, in alternated pairs
   (the ratio taken pair by pair): the same threads, each pinned to one node's CPUs, populating that node's
   contiguous share of a fresh mapping with the kernel's own call (``MADV_POPULATE_WRITE``), no policy, no
   read-back: every page made by a thread of its own node. Budget 1.1x. On a one-node host there is nothing to
   spread: it says so (the guest tier's two-node guest runs it: docs/benchmarks.md).

Run: python benchmarks/host_pool.py [SIZE_MIB] [PAIRS]   (default 1280 MiB, 5 pairs)
"""

from __future__ import annotations

import json
import mmap
import multiprocessing
import os
import statistics
import sys
import threading
import time
from collections.abc import Callable

from host_buffer import paired  # the same alternated pairs, from the sibling benchmark

import numapin
from numapin.cpuset import CpuSet
from numapin.facts.topology import read_topology
from numapin.kernel import mapping

_RESIDENT = ("RssAnon:", "RssShmem:", "RssFile:")


def resident() -> int:
    """This process's resident bytes, of every kind."""
    with open("/proc/self/status") as status:
        return sum(int(line.split()[1]) * 1024 for line in status if line.startswith(_RESIDENT))


def _bytearray(size: int) -> object:
    return bytearray(size)


def _touched(size: int) -> object:
    buf = mmap.mmap(-1, size, flags=mapping.flags_for(None))
    for offset in range(0, size, mmap.PAGESIZE):
        buf[offset] = 0
    return buf


def _host_buffer(size: int) -> object:
    return numapin.host_buffer(size, node=_nodes()[0][0])


def _pinned_tensor(size: int) -> object:
    import torch

    if not torch.cuda.is_available():
        raise LookupError("needs PyTorch with CUDA and a GPU (the device check)")
    held = torch.empty(size, dtype=torch.uint8, pin_memory=True)
    held[::mmap.PAGESIZE] = 0  # touched, as a pool is before use (cudaHostAlloc's pages are made already)
    return held


MAKERS: dict[str, Callable[[int], object]] = {
    "bytearray(N)": _bytearray,
    "mmap + touch (Python, a byte a page)": _touched,
    "numapin.host_buffer(N, node=...)": _host_buffer,
    "torch.empty(N, uint8, pin_memory=True)": _pinned_tensor,
}


def _measure(name: str, size: int, out: multiprocessing.connection.Connection) -> None:
    try:
        # One page's worth first: what the way imports and sets up (numapin's modules, PyTorch's CUDA context) is
        # no part of the pool.
        warm = MAKERS[name](mmap.PAGESIZE)
        del warm
        before = resident()
        started = time.perf_counter()
        held = MAKERS[name](size)
        took = time.perf_counter() - started
        out.send({"held": resident() - before, "seconds": took})
        del held
    except (ImportError, LookupError, RuntimeError) as exc:
        out.send({"error": str(exc).splitlines()[0][:90]})


def exact_size(size: int) -> list[dict[str, object]]:
    """One row per maker, each measured in a fresh child."""
    rows = []
    context = multiprocessing.get_context("fork")
    for name in MAKERS:
        receive, send = context.Pipe(duplex=False)
        child = context.Process(target=_measure, args=(name, size, send))
        child.start()
        row = receive.recv()
        child.join()
        rows.append({"allocation": name, **row})
    return rows


def _nodes() -> list[tuple[int, CpuSet]]:
    topology = read_topology("/")
    return [(n.id, n.cpus & topology.allowed) for n in topology.nodes if n.cpus & topology.allowed]


def floor(size: int, nodes: list[tuple[int, CpuSet]], per_node: int) -> float:
    """Each node's threads populating that node's contiguous share of a fresh mapping (its own pages, first
    touched there); seconds."""
    buf = mmap.mmap(-1, size, flags=mapping.flags_for(None))
    address = mapping.address_of(buf)
    pages = size // mmap.PAGESIZE
    jobs = []
    for k, (_, cpus) in enumerate(nodes):
        first, last = pages * k // len(nodes), pages * (k + 1) // len(nodes)
        jobs += [(cpus, first + (last - first) * i // per_node, first + (last - first) * (i + 1) // per_node)
                 for i in range(per_node)]

    def fill(cpus: CpuSet, start: int, end: int) -> None:
        os.sched_setaffinity(0, cpus)
        mapping.populate(address + start * mmap.PAGESIZE, (end - start) * mmap.PAGESIZE)

    started = time.perf_counter()
    workers = [threading.Thread(target=fill, args=job) for job in jobs]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    took = time.perf_counter() - started
    buf.close()
    return took


def spread(size: int, nodes: list[tuple[int, CpuSet]], threads: int, fills: list[float] | None = None) -> float:
    """host_buffer's whole call, spread over ``nodes``; seconds (``fills``: gets its fill's own seconds)."""
    started = time.perf_counter()
    with numapin.host_buffer(size, nodes=[n for n, _ in nodes], fill_threads=threads) as buf:
        took = time.perf_counter() - started
        if fills is not None:
            fills.append(buf.fill_seconds)
    return took


def main(argv: list[str]) -> int:
    size = (int(argv[1]) if len(argv) > 1 else 1280) << 20
    pairs = int(argv[2]) if len(argv) > 2 else 5
    if "--json" in argv:
        print(json.dumps(exact_size(size)))
        return 0
    print(f"a pool of {size >> 20} MiB ({size} bytes), each way made in a fresh process:")
    print(f"  {'allocation':<42} {'held / asked':>12} {'ready in':>10}")
    for row in exact_size(size):
        if "error" in row:
            print(f"  {row['allocation']:<42} {'-':>12} {'-':>10}  not measured: {row['error']}")
        else:
            print(f"  {row['allocation']:<42} {int(row['held']) / size:>11.3f}x {float(row['seconds']):>9.3f}s")
    nodes = _nodes()
    if len(nodes) < 2:
        print(f"spread: this host has {len(nodes)} node with CPUs; nothing to spread (run it in a two-node guest)")
        return 0
    per_node = max(1, min(16 // len(nodes), *(len(c) for _, c in nodes)))
    threads = per_node * len(nodes)
    fills: list[float] = []
    ratio, ours, base = paired(lambda: spread(size, nodes, threads, fills), lambda: floor(size, nodes, per_node),
                               pairs)
    gib = size / (1 << 30)
    print(f"spread over nodes {CpuSet(n for n, _ in nodes)} ({per_node} thread(s) a node), {pairs} pairs, medians:")
    print(f"  host_buffer(nodes=...) / floor: {ratio:.3f}x  ({gib / ours:.2f} vs {gib / base:.2f} GiB/s; "
          f"budget 1.1x: {'kept' if ratio <= 1.1 else 'NOT KEPT'})")
    fill = statistics.median(fills[1:])  # the first was the warm-up's
    print(f"  its fill alone (interleaved, the same threads) / floor: {fill / base:.3f}x  ({gib / fill:.2f} GiB/s); "
          "the rest is its checks and the kernel's read-back of where every page went")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
