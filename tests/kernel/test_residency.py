"""A process's memory per node by kind, from numa_maps (numa_maps(5): ``anon=``, ``file=``, ``huge``,
``N<node>=<pages>``, ``kernelpagesize_kB``), and what the tools print of it."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from hypothesis import given
from hypothesis import strategies as st

import live
from numapin.cpuset import CpuSet
from numapin.kernel.residency import KINDS, parse_numa_maps
from numapin.observe.judge import HostMemory

#: One line of each kind, as the kernel writes them (a path's spaces as \\040).
LINES = """\
55d0c0000000 default heap anon=256 dirty=256 active=0 N0=256 kernelpagesize_kB=4
7f1000000000 default file=/dev/zero\\040(deleted) dirty=16 mapped=16 N0=10 N1=6 kernelpagesize_kB=4
7f1800000000 default file=/memfd:pool\\040(deleted) dirty=4 N1=4 kernelpagesize_kB=4
7f2000000000 default file=/usr/lib/x86_64-linux-gnu/libc.so.6 mapped=5 mapmax=30 N0=5 kernelpagesize_kB=4
7f3000000000 bind:1 file=/anon_hugepage\\040(deleted) huge dirty=2 N1=2 kernelpagesize_kB=2048
7ffd00000000 default stack anon=3 dirty=3 N0=3 kernelpagesize_kB=4
"""


def test_each_mapping_is_counted_by_its_kind_and_node() -> None:
    found = parse_numa_maps(LINES, page_size=4096)
    assert found.by_kind == {"anon": {0: 259 * 4096}, "shmem": {0: 10 * 4096, 1: 10 * 4096},
                             "file": {0: 5 * 4096}, "huge": {1: 2 << 21}}
    said = HostMemory(found.by_kind).as_dict()  # the judge's record, JSON's shape only at the output
    assert said["by_kind"]["shmem"] == {"0": 40960, "1": 40960}
    assert set(said["by_kind"]) == set(KINDS)


@given(st.lists(st.tuples(st.sampled_from(["anon=1", "file=/dev/zero", "file=/x.so", "huge file=/anon_hugepage", ""]),
                          st.dictionaries(st.integers(0, 7), st.integers(0, 1 << 20), max_size=3),
                          st.sampled_from([4, 2048, 1048576])), max_size=20), st.text(max_size=200))
def test_the_kinds_add_up_to_the_nodes_and_any_text_reads(lines: list[tuple[str, dict[int, int], int]],
                                                          noise: str) -> None:
    text = "\n".join(f"7f{i:010x} default {kind} " + " ".join(f"N{n}={p}" for n, p in nodes.items())
                     + f" kernelpagesize_kB={size}" for i, (kind, nodes, size) in enumerate(lines))
    found = parse_numa_maps(text, page_size=4096)
    for node, total in found.bytes.items():
        assert sum(table.get(node, 0) for table in found.by_kind.values()) == total
    parse_numa_maps(noise)  # whatever the file holds: read, never raised


def test_threads_shows_a_processs_shared_memory_by_node() -> None:
    # A real worker holding 40 MiB of shared anonymous memory (what cudaHostAlloc makes), written on this node.
    node = min(n.id for n in live.TOPOLOGY.nodes if n.cpus & CpuSet(live.BASELINE))
    cpus = sorted(live.TOPOLOGY.cpus_of_nodes(CpuSet([node])) & CpuSet(live.BASELINE))
    script = (f"import mmap, os, sys\nos.sched_setaffinity(0, {cpus})\n"
              "buf = mmap.mmap(-1, 40 << 20, flags=mmap.MAP_SHARED | mmap.MAP_ANONYMOUS)\n"
              "buf.write(b'x' * (40 << 20))\nprint('ready', flush=True)\nsys.stdin.read()\n")
    env = live.without_inputs(dict(os.environ))
    worker = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                              env=env)
    try:
        assert worker.stdout is not None and worker.stdout.readline() == "ready\n"
        done = subprocess.run([sys.executable, "-m", "numapin", "threads", str(worker.pid), "--json"],
                              capture_output=True, text=True, timeout=60, env=env)
    finally:
        worker.communicate("")
    report = json.loads(done.stdout)
    assert report["host_memory"]["by_kind"]["shmem"].get(str(node), 0) >= 40 << 20, report["host_memory"]
    assert report["host_memory"]["shared_elsewhere"] is None  # no placement to be off from
