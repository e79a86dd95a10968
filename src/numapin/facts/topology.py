"""The machine as a tree of facts: CPUs, cores, caches, packages, NUMA nodes, cgroup.

:func:`read_topology` reads ``sys/devices/system`` (and the cgroup files) and
returns a frozen :class:`Topology`; every consumer asks the Topology rather
than re-reading files. How the CPUs group into cores, packages and caches
(:class:`Grouping`) is read on the first question about it, once: a pin to a
GPU's node (the default) never asks, and on a machine of 224 CPUs those are
363 of the 380 files. Missing or unreadable files never raise: the reader falls
back to the plainest grouping that is still true and records what it could
not read in ``Topology.warnings``.
"""

from __future__ import annotations

import os

from ..base.frozen import Later, frozen, once, replace
from ..base.text import decimal
from ..cpuset import CpuSet
from .cgroup import Cgroup, read_cgroup
from .grouping import CacheGroup, Core, Grouping, Package, bits_of, read_grouping
from .host import Host
from .sysfs import SysfsReader

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

# How the CPUs group (packages, cores, caches) is :mod:`numapin.facts.grouping`'s, read on the first question.
__all__ = ["CacheGroup", "Core", "Grouping", "Node", "Package", "Topology", "allowed_in",
           "free_hugepages", "node_free_bytes", "read_topology"]

_CPU = "sys/devices/system/cpu"
_NODE = "sys/devices/system/node"


@frozen
class Node:
    """A NUMA node. ``cpus`` are its online CPUs; a node without CPUs is memory-only."""

    id: int
    cpus: CpuSet
    memory_bytes: int | None = None
    distances: tuple[tuple[int, int], ...] = ()
    has_memory: bool = True
    memory_only: bool = False

    def distance_to(self, other: int) -> int | None:
        return dict(self.distances).get(other)


@frozen
class Topology:
    root: str
    online: CpuSet
    possible: CpuSet
    offline: CpuSet
    nodes: tuple[Node, ...]
    cgroup: Cgroup
    allowed: CpuSet
    allowed_mems: CpuSet
    # The reading process's mask as the root's proc/self/status gave it at read
    # time: a fact of the snapshot for `show`, never consulted by pinning (the
    # cached facts would make it stale; pinning asks the kernel each time).
    process: CpuSet | None
    _grouping: Later[Grouping]
    _warnings: tuple[str, ...] = ()
    """What could not be read of the CPUs, nodes and cgroup (the grouping's own come with it)."""
    live: bool = False
    """Read from this host's own ``/`` (no folder stands in for it): the one answer to "this host, or a
    machine read from elsewhere?", worked out once, when read."""

    # -- the grouping, read on first use ----------------------------------

    @property
    def grouping(self) -> Grouping:
        """Packages, cores and caches: read on the first question about them, then kept."""
        return self._grouping.get()

    @property
    def packages(self) -> tuple[Package, ...]:
        return self._grouping.get().packages

    @property
    def package_source(self) -> str:
        """``physical_package_id``, or what stood in where the kernel gave none."""
        return self._grouping.get().package_source

    @property
    def cores(self) -> tuple[Core, ...]:
        return self._grouping.get().cores

    @property
    def core_source(self) -> str:
        """``thread siblings``, or ``assumed`` where the kernel said nothing about cores."""
        return self._grouping.get().core_source

    @property
    def caches(self) -> tuple[CacheGroup, ...]:
        return self._grouping.get().caches

    @property
    def warnings(self) -> tuple[str, ...]:
        """Everything the reader could not read, the grouping's too (so asking reads the grouping)."""
        return self._warnings + self._grouping.get().warnings

    # -- questions consumers ask ------------------------------------------

    @once
    def _node_of_cpu(self) -> dict[int, Node]:
        return {cpu: node for node in self.nodes for cpu in node.cpus}

    @once
    def _core_of_cpu(self) -> dict[int, Core]:
        return {cpu: core for core in self.cores for cpu in core.cpus}

    @property
    def cores_known(self) -> bool:
        """False when the kernel said nothing about cores and each CPU stands for one."""
        return self.core_source != "assumed"

    @property
    def cpu_nodes(self) -> tuple[Node, ...]:
        return tuple(n for n in self.nodes if not n.memory_only)

    @property
    def memory_only_nodes(self) -> tuple[Node, ...]:
        return tuple(n for n in self.nodes if n.memory_only)

    def node(self, node_id: int) -> Node:
        for node in self.nodes:
            if node.id == node_id:
                return node
        known = ",".join(str(n.id) for n in self.nodes)
        raise KeyError(f"no NUMA node {node_id} (nodes: {known})")

    def node_of(self, cpu: int) -> Node | None:
        return self._node_of_cpu.get(cpu)

    def nodes_of(self, cpus: CpuSet) -> CpuSet:
        """Ids of the nodes holding any of ``cpus``."""
        return CpuSet({n.id for c in cpus if (n := self._node_of_cpu.get(c)) is not None})

    def cpus_of_nodes(self, nodes: CpuSet) -> CpuSet:
        """The CPUs of the nodes ``nodes`` (a memory-only node has none), allowed or not."""
        return CpuSet.union(n.cpus for n in self.nodes if n.id in nodes)

    def in_cgroup(self, cgroup: Cgroup) -> Topology:
        """This machine as a process in ``cgroup`` sees it: the same CPUs and nodes, allowed by that cpuset
        (another process's, or this one's after the cpuset changed)."""
        allowed, allowed_mems = allowed_in(cgroup, self.online, CpuSet(n.id for n in self.nodes if n.has_memory))
        return replace(self, cgroup=cgroup, allowed=allowed, allowed_mems=allowed_mems)

    def core_of(self, cpu: int) -> Core | None:
        return self._core_of_cpu.get(cpu)

    def cores_within(self, cpus: CpuSet) -> tuple[Core, ...]:
        """Cores with at least one CPU in ``cpus``, each cut down to those CPUs."""
        seen: list[Core] = []
        for core in self.cores:
            inside = core.cpus & cpus
            if inside:
                seen.append(Core(core.package, core.id, inside))
        return tuple(seen)

    def caches_within(self, cpus: CpuSet) -> tuple[CacheGroup, ...]:
        return tuple(CacheGroup(g.level, g.cpus & cpus) for g in self.caches if g.cpus & cpus)

    def distance(self, a: int, b: int) -> int | None:
        return self.node(a).distance_to(b)

    # -- output -----------------------------------------------------------

    def as_dict(self) -> dict[str, Any]:
        """The JSON shape of ``numapin show --json`` (GPUs are added by the caller)."""
        return {
            "root": str(self.root),
            "cpus": {
                "online": str(self.online),
                "possible": str(self.possible),
                "offline": str(self.offline),
                "allowed": str(self.allowed),
                "process": None if self.process is None else str(self.process),
            },
            "cgroup": {
                "version": self.cgroup.version,
                "path": self.cgroup.path,
                "cpus": None if self.cgroup.cpus is None else str(self.cgroup.cpus),
                "mems": None if self.cgroup.mems is None else str(self.cgroup.mems),
            },
            "allowed_mems": str(self.allowed_mems),
            "nodes": [
                {
                    "id": n.id,
                    "cpus": str(n.cpus),
                    "memory_only": n.memory_only,
                    "memory_bytes": n.memory_bytes,
                    "distances": {str(k): v for k, v in n.distances},
                }
                for n in self.nodes
            ],
            "packages": [{"id": p.id, "cpus": str(p.cpus)} for p in self.packages],
            "package_source": self.package_source,
            "cores": [{"package": c.package, "id": c.id, "cpus": str(c.cpus)} for c in self.cores],
            "core_source": self.core_source,
            "caches": [{"level": g.level, "cpus": str(g.cpus)} for g in self.caches],
            "warnings": list(self.warnings),
        }


def _read_cpus(r: SysfsReader) -> tuple[CpuSet, CpuSet, CpuSet]:
    """Online, possible and offline CPUs.

    Only a CPU with a folder counts as online: a capture can list CPUs whose
    folders were trimmed away, and nothing can be known about those (like
    hwloc, the reader leaves them out). One listing tells, whatever the CPUs.
    """
    names = r.host.listdir(_CPU)
    folders = CpuSet.from_bits(bits_of(r.numbered(_CPU, "cpu", names)))  # ids checked already
    online = r.cpuset(f"{_CPU}/online")
    if online is None:
        # Old kernels and partial captures: a cpuN folder is online unless its
        # own `online` file says 0.
        online = CpuSet(c for c in folders if r.integer(f"{_CPU}/cpu{c}/online") != 0)
        r.warn(f"{_CPU}/online missing: online CPUs taken from the cpuN folders")
    elif not online <= folders:
        r.warn(f"CPUs {online - folders} are online but have no folder; ignored")
        online &= folders
    possible = r.cpuset(f"{_CPU}/possible")
    if possible is None:
        possible = folders | online
    offline = r.cpuset(f"{_CPU}/offline")
    if offline is None:
        offline = possible - online
    return online, possible | online, offline - online


def _read_nodes(r: SysfsReader, online: CpuSet) -> list[Node]:
    ids = r.numbered(_NODE, "node")
    if not ids:
        r.warn(f"{_NODE} has no nodes: one node 0 holds every online CPU")
        return [Node(0, online)]
    order = r.cpuset(f"{_NODE}/online")
    order_ids = list(order) if order is not None and set(order) >= set(ids) else ids
    has_memory = r.cpuset(f"{_NODE}/has_memory")
    nodes = []
    claimed = CpuSet()
    for node_id in ids:
        folder = f"{_NODE}/node{node_id}"
        raw = r.either(folder, "cpulist", "cpumap")
        if raw is None:
            links = r.numbered(folder, "cpu")
            raw = CpuSet(links)
            if not links:
                r.warn(f"{folder}: no cpulist or cpumap; taken as a node without CPUs")
        memory = _node_memory(r, folder)
        distances: tuple[tuple[int, int], ...] = ()
        text = r.text(f"{folder}/distance")
        if text is not None:
            values = text.split()
            # One check of the whole line in the usual case; decimal() per value otherwise.
            joined = "".join(values)
            plain = joined.isdigit() and joined.isascii() and all(len(v) <= 9 for v in values)
            numbers = list(map(int, values)) if plain else [decimal(v) for v in values]
            if len(values) == len(order_ids) and all(n is not None and n >= 0 for n in numbers):
                distances = tuple(zip(order_ids, (n or 0 for n in numbers), strict=True))
            else:
                r.warn(f"{folder}/distance: {len(values)} values for {len(order_ids)} nodes; ignored")
        with_memory = node_id in has_memory if has_memory is not None else memory is None or memory > 0
        cpus = raw & online
        # Buggy firmware can give several nodes the same CPUs; a CPU has one
        # home, so the lowest node keeps it.
        if cpus & claimed:
            r.warn(f"node {node_id}: CPUs {cpus & claimed} already belong to a lower node; left there")
            cpus -= claimed
        claimed |= cpus
        nodes.append(
            Node(
                id=node_id,
                cpus=cpus,
                memory_bytes=memory,
                distances=distances,
                has_memory=with_memory,
                memory_only=not raw,
            )
        )
    return nodes


def _node_memory(r: SysfsReader, folder: str) -> int | None:
    for line in (r.text(f"{folder}/meminfo") or "").splitlines():
        fields = line.split()
        # "Node 0 MemTotal:       129839104 kB"
        if len(fields) >= 4 and fields[2] == "MemTotal:" and (kib := decimal(fields[3])) is not None and kib >= 0:
            return kib * 1024
    return None


def _process_mask(live: bool, r: SysfsReader) -> CpuSet | None:
    if live:
        return CpuSet(os.sched_getaffinity(0))
    for line in (r.text("proc/self/status") or "").splitlines():
        if line.startswith("Cpus_allowed_list:"):
            try:
                return CpuSet.parse(line.split(":", 1)[1])
            except ValueError as exc:
                r.warn(f"proc/self/status: {exc}")
    return None


def allowed_in(cgroup: Cgroup, online: CpuSet, memory_nodes: CpuSet,
               warn: Callable[[str], None] | None = None) -> tuple[CpuSet, CpuSet]:
    """The CPUs and memory nodes a process in ``cgroup`` may use: the online CPUs and the nodes with memory,
    cut to the cpuset's (a cpuset that holds none of them is ignored, and ``warn`` hears so)."""
    allowed, allowed_mems = online, memory_nodes
    if cgroup.cpus is not None:
        allowed = online & cgroup.cpus
        if not allowed:
            if warn is not None:
                warn(f"cgroup cpuset {cgroup.cpus} holds no online CPU; ignored")
            allowed = online
    if cgroup.mems is not None and memory_nodes & cgroup.mems:
        allowed_mems = memory_nodes & cgroup.mems
    return allowed, allowed_mems


def read_topology(root: str | os.PathLike[str] | None = None, *, journal: list[str] | None = None) -> Topology:
    """Read the machine under ``root`` (default ``$NUMAPIN_FSROOT``, else ``/``): its CPUs, NUMA nodes and cgroup
    now, how its CPUs group (cores, packages, caches) on the first question about that. With ``journal``, which
    collects the files read to capture them (``numapin snapshot``), all of it now.

    Raises :class:`numapin.facts.host.HostError` only when the root does not exist
    or holds no ``sys/devices/system/cpu``; any other gap becomes a warning.
    """
    host = Host.at(root, journal)
    host.check()
    r = SysfsReader(host)
    online, possible, offline = _read_cpus(r)
    nodes = tuple(_read_nodes(r, online))
    homeless = online - CpuSet.union(n.cpus for n in nodes)
    if homeless:
        r.warn(f"CPUs {homeless} belong to no NUMA node")
    cgroup = read_cgroup(host, r.warn)
    live = host.is_live
    allowed, allowed_mems = allowed_in(cgroup, online, CpuSet(n.id for n in nodes if n.has_memory), r.warn)
    topology = Topology(
        root=host.root,
        online=online,
        possible=possible,
        offline=offline,
        nodes=nodes,
        cgroup=cgroup,
        allowed=allowed,
        allowed_mems=allowed_mems,
        process=_process_mask(live, r),
        _grouping=Later(lambda: read_grouping(SysfsReader(host), online)),
        _warnings=tuple(r.warnings),
        live=live,
    )
    if journal is not None:
        topology._grouping.get()  # now, while the journal is kept: a capture holds every file a question reads
    return topology


def node_free_bytes(root: str | os.PathLike[str] | None, node: int) -> int | None:
    """Node ``node``'s free memory now (``MemFree`` of its meminfo); None where it cannot be read."""
    for line in (Host.at(root).read(f"sys/devices/system/node/node{node}/meminfo") or "").splitlines():
        fields = line.split()  # "Node 0 MemFree:  123456 kB"
        if len(fields) >= 4 and fields[2] == "MemFree:" and (kib := decimal(fields[3])) is not None:
            return kib * 1024
    return None


def _pool(node: int, size: int) -> str:
    return f"sys/devices/system/node/node{node}/hugepages/hugepages-{size >> 10}kB"


def free_hugepages(root: str | os.PathLike[str] | None, node: int, size: int) -> int | None:
    """Huge pages of ``size`` bytes free in node ``node``'s pool now; None where the kernel has no such pool (or
    the file cannot be read)."""
    return decimal((Host.at(root).read(f"{_pool(node, size)}/free_hugepages") or "").strip())


def reserve_command(root: str | os.PathLike[str] | None, nodes: CpuSet, size: int, needed: int) -> str:
    """The command that reserves ``needed`` huge pages of ``size`` bytes free on ``nodes`` (spread over them), each
    node's pool written its new total: its pages now and its share of what is missing."""
    host = Host.at(root)
    ids = sorted(nodes)
    missing = needed - sum(free_hugepages(root, n, size) or 0 for n in ids)
    lines = []
    for i, node in enumerate(ids):
        share = missing // len(ids) + (1 if i < missing % len(ids) else 0)
        now = decimal((host.read(f"{_pool(node, size)}/nr_hugepages") or "").strip()) or 0
        lines.append(f"echo {now + max(0, share)} > /{_pool(node, size)}/nr_hugepages")
    return "; ".join(lines)
