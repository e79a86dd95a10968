"""The device check for host memory (one command, on a host with a CUDA GPU and PyTorch): where pinned memory
lands, and what placing it is worth.

For GPU 0 (or ``--gpu N``), side by side in one run:

- host-to-device and device-to-host bandwidth from a registered ``numapin.host_buffer`` on the GPU's node and
  on the farthest other node (where the host has one);
- the same from ``torch.empty(..., pin_memory=True)`` made inside ``numapin.allocating_for(gpu=N)`` and made
  by a thread pinned to the far node;
- for each allocation, what ``/proc/self/smaps`` and ``numa_maps`` show of it: its kind (shared or private
  anonymous), ``Locked``, and its pages per node — the facts ``../shared/research/host-memory.md`` marks UNSURE.

Prints one table and one JSON line. On a host without a CUDA GPU or without PyTorch it says so and exits 0.
Run: python benchmarks/h2d.py [--gpu N] [--size MIB] [--rounds K]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import threading
from typing import Any

import numapin
from numapin.compat.torch_tensor import tensor
from numapin.cpuset import CpuSet


def _torch() -> Any:
    try:
        import torch
    except ImportError:
        return None
    return torch if torch.cuda.is_available() else None


def _mapping_of(address: int) -> dict[str, Any]:
    """The smaps fields and numa_maps counts of the mapping holding ``address``."""
    found: dict[str, Any] = {}
    with open("/proc/self/smaps") as smaps:
        inside = False
        for line in smaps:
            head = line.split()[0]
            if "-" in head and not head.endswith(":"):
                start, end = (int(x, 16) for x in head.split("-"))
                inside = start <= address < end
                if inside:
                    found["range"] = head
                    found["name"] = line.split()[5] if len(line.split()) > 5 else "[anonymous]"
            elif inside and head in ("Rss:", "Shared_Dirty:", "Private_Dirty:", "Locked:", "KernelPageSize:"):
                found[head.rstrip(":")] = " ".join(line.split()[1:])
    start = found.get("range", "0-0").split("-")[0].lstrip("0")
    with open("/proc/self/numa_maps") as maps:
        for line in maps:
            if line.split()[0].lstrip("0") == start:
                found["numa_maps"] = " ".join(f for f in line.split()[1:] if f.startswith(("N", "anon", "file")))
    return found


def _bandwidth(torch: Any, host: Any, gpu: int, rounds: int) -> tuple[float, float]:
    """Median GiB/s host-to-device and device-to-host for ``host`` (a pinned uint8 tensor)."""
    device = torch.empty(host.numel(), dtype=torch.uint8, device=f"cuda:{gpu}")
    results: dict[str, list[float]] = {"h2d": [], "d2h": []}
    for _ in range(rounds):
        for way, (dst, src) in (("h2d", (device, host)), ("d2h", (host, device))):
            start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            dst.copy_(src, non_blocking=True)
            stop.record()
            stop.synchronize()
            results[way].append(host.numel() / (start.elapsed_time(stop) / 1000) / (1 << 30))
    return statistics.median(results["h2d"]), statistics.median(results["d2h"])


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gpu", type=int, default=0)
    parser.add_argument("--size", type=int, default=1024, help="MiB per buffer")
    parser.add_argument("--rounds", type=int, default=10)
    args = parser.parse_args(argv[1:])
    torch = _torch()
    if torch is None:
        print("h2d: needs PyTorch with a CUDA GPU; this host has none (nothing measured)")
        return 0
    facts = numapin.machine()
    near = facts.visible[args.gpu].gpu.node
    nodes = [n.id for n in facts.topology.nodes if n.cpus & facts.topology.allowed]
    far = next((n for n in sorted(nodes, key=lambda n: -abs(n - (near or 0))) if n != near), None)
    size = args.size << 20
    rows: list[dict[str, Any]] = []

    def measure(label: str, host: Any, address: int) -> None:
        h2d, d2h = _bandwidth(torch, host, args.gpu, args.rounds)
        rows.append({"allocation": label, "h2d_gib_s": round(h2d, 2), "d2h_gib_s": round(d2h, 2),
                     "mapping": _mapping_of(address)})

    for where, node in (("near", near), ("far", far)):
        if node is None:
            continue
        with numapin.host_buffer(size, node=node, register=True) as buf:
            host = tensor(buf)
            measure(f"host_buffer on node {node} ({where})", host, buf.address)
            del host
    with numapin.allocating_for(gpu=args.gpu):
        pinned = torch.empty(size, dtype=torch.uint8, pin_memory=True)
    measure(f"pin_memory inside allocating_for(gpu={args.gpu})", pinned, pinned.data_ptr())
    if far is not None:
        made: list[Any] = []

        def elsewhere() -> None:
            os.sched_setaffinity(0, facts.topology.cpus_of_nodes(CpuSet([far])) & facts.topology.allowed)
            made.append(torch.empty(size, dtype=torch.uint8, pin_memory=True))

        worker = threading.Thread(target=elsewhere)
        worker.start()
        worker.join()
        measure(f"pin_memory by a thread on node {far}", made[0], made[0].data_ptr())
    print(f"GPU {args.gpu} (node {near}), {args.size} MiB, median of {args.rounds}:")
    for row in rows:
        print(f"  {row['allocation']:<48} h2d {row['h2d_gib_s']:>7.2f} GiB/s  d2h {row['d2h_gib_s']:>7.2f} GiB/s  "
              f"{row['mapping'].get('numa_maps', '')}")
    print(json.dumps(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
