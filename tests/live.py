"""The live machine as the tests see it: every expectation derived from the kernel, never assumed.

Tests that pin for real describe this machine to numapin through a root
folder with one GPU per CPU node (``pair_root``). Its nodes are the live
kernel's own when the machine has two or more equal CPU nodes numbered in
CPU order (a two-socket server, a guest with real nodes, a Grace-shaped guest
with CPU-less memory nodes), and otherwise the live CPUs split in two halves
(this one-node development machine seen as two nodes). Either way GPU 0 sits
on the first half of the CPUs and GPU 1 on the next, and the names below say
which CPUs and nodes those are here.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

import numapin
from numapin.base import environment, pinners
from numapin.base.frozen import replace
from numapin.cpuset import CpuSet
from numapin.facts.synthetic import MachineSpec, write
from numapin.facts.topology import read_topology
from numapin.pinning.memory import system_nodes

_GIB = 1 << 30

#: Every variable numapin reads: tests start from none of them set.
#: (NUMAPIN_RUNTIME_DIR is no input: conftest points it at the session's own folder of pin records.)
INPUTS = (*(n for n in environment.OWNED if n != environment.RUNTIME_DIR),
          *environment.LOCAL_RANK_VARIABLES, *environment.GPU_VISIBILITY, environment.TLLM_AFFINITY,
          *environment.THREAD_POOLS, *environment.LAUNCHER_BINDING,
          *(name for row in pinners.PINNERS.values() for name in (*row.steer, *(n for n, _, _ in row.fights))))


def without_inputs(environ: dict[str, str]) -> dict[str, str]:
    """``environ`` less every variable numapin reads."""
    return {k: v for k, v in environ.items() if k not in INPUTS}


#: The live kernel's topology, read from ``/`` whatever NUMAPIN_FSROOT says.
TOPOLOGY = read_topology("/")
#: The CPUs a process here may use at all (online inside the cgroup cpuset).
BASELINE: CpuSet = TOPOLOGY.allowed
#: The NUMA nodes of the real kernel that hold memory, and the first id it lacks.
REAL_NODES: CpuSet = system_nodes()
MISSING_NODE: int = REAL_NODES.last() + 1


def _equal_cpu_nodes() -> int:
    """How many CPU nodes the live machine has, when they are equal blocks in CPU order; else 0."""
    nodes = TOPOLOGY.cpu_nodes
    if len(nodes) < 2:
        return 0
    size = len(nodes[0].cpus)
    for i, node in enumerate(nodes):
        if node.id != i or node.cpus != CpuSet(range(i * size, (i + 1) * size)):
            return 0
    return len(nodes)


def _spec() -> MachineSpec:
    count = _equal_cpu_nodes()
    if count:
        memory_only = TOPOLOGY.memory_only_nodes
        grace = [n.id for n in memory_only] == list(range(count, 2 * count))
        return MachineSpec("live", sockets=count, cores_per_socket=len(TOPOLOGY.cpu_nodes[0].cpus),
                           gpus_per_node=1, gpu_memory_nodes=grace, memory_per_node=_GIB, gpu_memory=_GIB)
    cpus = BASELINE.last() + 1
    return MachineSpec("live", sockets=2, cores_per_socket=max(cpus // 2, 1), gpus_per_node=1,
                       memory_per_node=_GIB)


SPEC = _spec()
#: Every CPU of the pair root's GPU 0 and GPU 1 nodes that this process may use.
NODE0: set[int] = set(SPEC.node_cpus(0) & BASELINE)
NODE1: set[int] = set(SPEC.node_cpus(1) & BASELINE)
#: The unconstrained mask of a process here.
ALL: set[int] = set(BASELINE)
#: Whether node 1 (GPU 1's node in the pair root) exists on the real kernel.
NODE1_REAL = 1 in REAL_NODES and bool(NODE1)


def masks() -> dict[int, set[int]]:
    """Every live thread of this process and its mask, as the kernel reports them."""
    found = {}
    for name in os.listdir("/proc/self/task"):
        try:
            found[int(name)] = os.sched_getaffinity(int(name))
        except ProcessLookupError:
            continue  # exited meanwhile
    return found


def storm_round(gpu: int, *, spawners: int = 4, cap: int) -> tuple[numapin.PinResult, dict[int, set[int]]]:
    """pin(gpu) while ``spawners`` threads create up to ``cap`` threads; the result and every mask right after."""
    stop = threading.Event()
    children: list[threading.Thread] = []

    def spawn() -> None:
        while not stop.is_set() and len(children) < cap:
            child = threading.Thread(target=stop.wait)
            child.start()
            children.append(child)

    starters = [threading.Thread(target=spawn) for _ in range(spawners)]
    for s in starters:
        s.start()
    try:
        return numapin.pin(gpu), masks()
    finally:
        stop.set()
        for t in starters + children:
            t.join()


def cpus(cpu_set: set[int]) -> str:
    """A set of CPUs as the cpulist a caller would type."""
    return str(CpuSet(cpu_set))


def write_pair(dest: Path, *, amd: bool = False, partitions: int = 1) -> Path:
    """Write the pair root (one GPU per node, see the module's text) under ``dest``; ``amd``: its GPUs are
    MI300X, found through amdgpu's files and the KFD topology, as ``--machine mi300x``'s, each in
    ``partitions`` logical GPUs."""
    cgroup = None if CpuSet(range(SPEC.cpus)) == BASELINE else BASELINE
    spec = replace(SPEC, gpu_vendor="amd", gpu_model="AMD Instinct MI300X", gpu_class="0x120000",
                   gpu_device="0x74a1", partitions=partitions) if amd else SPEC
    return write(spec, dest, cgroup_cpus=cgroup)


def write_refusing(dest: Path) -> Path:
    """The pair root with GPU 1's node renumbered to a node the real kernel lacks.

    Binding memory there is refused for real (the node does not exist), which
    is how the tests reach the step-down path on any host.
    """
    root = write(MachineSpec("refusing", sockets=2, cores_per_socket=max((BASELINE.last() + 1) // 2, 1),
                             gpus_per_node=1, memory_per_node=_GIB), dest)
    node_dir = root / "sys/devices/system/node"
    os.rename(node_dir / "node1", node_dir / f"node{MISSING_NODE}")
    nodes = str(CpuSet([0, MISSING_NODE]))
    for name in ("online", "possible", "has_cpu", "has_memory", "has_normal_memory"):
        (node_dir / name).write_text(nodes + "\n")
    meminfo = node_dir / f"node{MISSING_NODE}" / "meminfo"
    meminfo.write_text(meminfo.read_text().replace("Node 1 ", f"Node {MISSING_NODE} "))
    for numa_node in root.glob("sys/devices/pci*/*/*/numa_node"):
        if numa_node.read_text().strip() == "1":
            numa_node.write_text(f"{MISSING_NODE}\n")
    (root / "sys/fs/cgroup/cpuset.mems.effective").write_text(nodes + "\n")
    status = root / "proc/self/status"
    status.write_text(status.read_text().replace("Mems_allowed_list:\t0-1", f"Mems_allowed_list:\t{nodes}"))
    return root


def until(condition: Callable[[], object], seconds: float = 30) -> bool:
    """Whether ``condition()`` comes true within ``seconds`` (asked every 10 ms): a wait on what another process
    does, bounded, never a sleep that guesses how long it takes."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.01)
    return False
