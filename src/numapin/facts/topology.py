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
from ..cpuset import MAX_ID, CpuSet
from .cgroup import Cgroup, read_cgroup
from .host import Folder, Host

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing at run time (mypy knows the name)
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

__all__ = ["CacheGroup", "Core", "Grouping", "Node", "Package", "Topology", "free_hugepages", "node_free_bytes",
           "read_topology"]

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
class Package:
    """A socket (``physical_package_id``), or the reader's stand-in grouping."""

    id: int
    cpus: CpuSet


@frozen
class Core:
    """A physical core: its online SMT siblings."""

    package: int
    id: int
    cpus: CpuSet


@frozen
class CacheGroup:
    """CPUs sharing one last-level cache (an L3 slice, a CCX, ...)."""

    level: int
    cpus: CpuSet


@frozen
class Grouping:
    """How the online CPUs group: packages, cores (SMT siblings together), last-level caches, and what the reader
    could not read of them. ``*_source`` says where a grouping came from when the kernel did not say it."""

    packages: tuple[Package, ...]
    package_source: str
    cores: tuple[Core, ...]
    core_source: str
    caches: tuple[CacheGroup, ...]
    warnings: tuple[str, ...] = ()


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


# -- the reader -----------------------------------------------------------


class _Reader:
    def __init__(self, host: Host) -> None:
        self.host = host
        self.warnings: list[str] = []

    def warn(self, message: str) -> None:
        self.warnings.append(message)

    def text(self, rel: str) -> str | None:
        return self.host.read(rel)

    def cpuset(self, rel: str, *, mask: bool = False, quiet: bool = False) -> CpuSet | None:
        return self.parse_cpuset(rel, self.host.read(rel), mask=mask, quiet=quiet)

    def parse_cpuset(self, rel: str, text: str | None, *, mask: bool = False, quiet: bool = False) -> CpuSet | None:
        """``text``, read from ``rel``, as a set; a malformed one is a warning naming ``rel``."""
        if text is None:
            return None
        try:
            return CpuSet.parse_mask(text) if mask else CpuSet.parse(text)
        except ValueError as exc:
            if not quiet:
                self.warn(f"{rel}: {exc}")
            return None

    def either(self, folder: str, listname: str, maskname: str) -> CpuSet | None:
        """A set from ``folder/listname`` (cpulist) or else ``folder/maskname`` (hex mask)."""
        found = self.cpuset(f"{folder}/{listname}")
        return found if found is not None else self.cpuset(f"{folder}/{maskname}", mask=True)

    def integer(self, rel: str) -> int | None:
        return self.parse_integer(rel, self.host.read(rel))

    def parse_integer(self, rel: str, text: str | None) -> int | None:
        if text is None:
            return None
        body = text.strip()
        if body.isdigit() and body.isascii() and len(body) <= 9:  # the common case, checked cheaply
            return int(body)
        if not body:
            return None
        value = decimal(body)
        if value is None:
            self.warn(f"{rel}: not an integer: {body[:40]!r}")
        return value

    def numbered(self, folder: str, prefix: str, names: list[str] | None = None) -> list[int]:
        """The ids of ``folder``'s entries (``names`` when listed already) named prefix + a decimal;
        ids past the kernel's limits are left out."""
        start = len(prefix)
        listed = self.host.listdir(folder) if names is None else names
        suffixes = [name[start:] for name in listed if name.startswith(prefix)]
        # The common case (cpu12) checked cheaply; decimal() for anything else (cpufreq, cpuidle...).
        values = [int(s) if len(s) <= 9 and s.isdigit() and s.isascii() else decimal(s) for s in suffixes]
        ids = [v for v in values if v is not None and 0 <= v <= MAX_ID]
        if len(ids) < len(values):  # some left out: say which were past the kernel's limits
            for suffix, value in zip(suffixes, values, strict=True):
                if value is not None and value > MAX_ID:
                    self.warn(f"{folder}/{prefix}{suffix}: id {value} is past any the kernel gives "
                              f"(up to {MAX_ID}); left out")
        ids.sort()
        return ids


def _read_cpus(r: _Reader) -> tuple[CpuSet, CpuSet, CpuSet]:
    """Online, possible and offline CPUs.

    Only a CPU with a folder counts as online: a capture can list CPUs whose
    folders were trimmed away, and nothing can be known about those (like
    hwloc, the reader leaves them out). One listing tells, whatever the CPUs.
    """
    names = r.host.listdir(_CPU)
    folders = CpuSet.from_bits(_bits(r.numbered(_CPU, "cpu", names)))  # ids checked already
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


def _read_nodes(r: _Reader, online: CpuSet) -> list[Node]:
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


def _node_memory(r: _Reader, folder: str) -> int | None:
    for line in (r.text(f"{folder}/meminfo") or "").splitlines():
        fields = line.split()
        # "Node 0 MemTotal:       129839104 kB"
        if len(fields) >= 4 and fields[2] == "MemTotal:" and (kib := decimal(fields[3])) is not None and kib >= 0:
            return kib * 1024
    return None


def _read_cores_and_packages(
    r: _Reader, cpu_folder: Folder, online: CpuSet, nodes: tuple[Node, ...]
) -> tuple[list[Core], str, list[Package], str]:
    # On the largest machines this runs for 1024 CPUs, so each pass below does
    # per CPU only what must be done per CPU (one core_id read, dict look-ups);
    # shared files are read per group, and sibling sets are kept as integers.
    cpus = list(online)
    read_in = r.host.read_in
    core_texts = [read_in(cpu_folder, f"cpu{cpu}/topology/core_id") for cpu in cpus]
    package_ids, package_groups = _package_ids(r, cpus, online)
    siblings_of, sibling_sets = _core_siblings(r, cpu_folder, cpus, online.bits)
    core_ids = _core_ids(r, cpus, core_texts)
    packages, package_source = _packages(r, online, nodes, package_ids, package_groups)
    if all(core_id is None for core_id in core_ids) and all(s is None for s in siblings_of.values()):
        if online:
            r.warn("no core information: each CPU counted as one core")
        package_of = {cpu: p.id for p in packages for cpu in p.cpus}
        cores = [Core(package_of.get(cpu, 0), cpu, CpuSet([cpu])) for cpu in online]
        return cores, "assumed", packages, package_source
    # A core is the CPUs agreeing on package, core id and sibling set. The core
    # id takes part: on AMD family 15h the kernel lists both cores of a compute
    # unit as siblings while each has its own id.
    # CPUs come in ascending order, so the keys do too, by their first CPU.
    by_key: dict[tuple[int | None, int | None, int | None], list[int]] = {}
    keys = zip(map(package_ids.__getitem__, cpus), core_ids, map(siblings_of.__getitem__, cpus), strict=True)
    for cpu, key in zip(cpus, keys, strict=True):
        by_key.setdefault(key, []).append(cpu)
    # With packages from physical ids, the key's package is the core's; else it is looked up.
    by_id = package_source == "physical_package_id"
    package_bits = [(p.id, p.cpus.bits) for p in packages]
    cores = []
    for (package, core_id, siblings), members in by_key.items():
        first = members[0]
        if not by_id or package is None:
            package = next((pid for pid, held in package_bits if held >> first & 1), 0)
        # Most cores are exactly a sibling set: its CpuSet is reused (see _core_siblings).
        found = sibling_sets.get(siblings) if siblings is not None and len(members) == siblings.bit_count() else None
        cores.append(Core(package, first if core_id is None else core_id,
                          found if found is not None else CpuSet.from_bits(_bits(members))))
    return cores, "thread siblings", packages, package_source


def _package_ids(r: _Reader, cpus: list[int], online: CpuSet) -> tuple[dict[int, int | None], set[CpuSet]]:
    """Each CPU's package id (None when unknown), and the package sibling sets seen.

    A package's list names the same set from each of its CPUs, so the id and
    the list are read from its first CPU and handed to the CPUs after it (only
    when that CPU is in its own list: a capture that breaks this is read CPU by
    CPU, and a later list overrides an earlier one for the CPUs after it).
    """
    ids: dict[int, int | None] = {}
    groups: set[CpuSet] = set()
    for cpu in cpus:
        if cpu in ids:
            continue
        folder = f"{_CPU}/cpu{cpu}/topology"
        package = r.integer(folder + "/physical_package_id")
        ids[cpu] = package = None if package is None or package < 0 else package
        group = r.either(folder, "package_cpus_list", "package_cpus")
        if group is None:
            group = r.either(folder, "core_siblings_list", "core_siblings")
        if group is not None:
            group &= online
            groups.add(group)
            if group.bits >> cpu & 1:
                ids.update(dict.fromkeys(CpuSet.from_bits(group.bits >> cpu + 1 << cpu + 1), package))
    return ids, groups


def _core_siblings(
    r: _Reader, cpu_folder: Folder, cpus: list[int], online_bits: int
) -> tuple[dict[int, int | None], dict[int, CpuSet]]:
    """Each CPU's online core siblings as bits (None when unknown), read once per core as packages are.

    Also each sibling set as a CpuSet, by its bits, when every CPU is in its
    own set: then the CPUs holding a set are inside it, and as many as it has
    means all of it (the caller's check). Empty when some CPU is not.
    """
    of: dict[int, int | None] = {}
    sets: dict[int, CpuSet] = {}
    outside = False
    read_in = r.host.read_in
    for cpu in cpus:
        if cpu in of:
            continue
        # What kernels since 5.7 write, read inside the folder held open: the one file of nearly every core.
        name = f"cpu{cpu}/topology/core_cpus_list"
        found = r.parse_cpuset(f"{_CPU}/{name}", read_in(cpu_folder, name))
        if found is None:
            folder = f"{_CPU}/cpu{cpu}/topology"
            found = r.cpuset(f"{folder}/core_cpus", mask=True)
            if found is None:
                found = r.either(folder, "thread_siblings_list", "thread_siblings")
            if found is None:
                of[cpu] = None
                continue
        listed = found.bits
        of[cpu] = siblings = listed & online_bits
        if not siblings >> cpu & 1:
            outside = True
            continue
        sets[siblings] = found if listed == siblings else CpuSet.from_bits(siblings)
        of.update(dict.fromkeys(_members(siblings >> cpu + 1 << cpu + 1), siblings))  # the CPUs after this one
    return of, {} if outside else sets


def _core_ids(r: _Reader, cpus: list[int], texts: list[str | None]) -> list[int | None]:
    """Each CPU's core id, read for every CPU (see the AMD note above); each distinct text parsed once.

    A text ``decimal`` takes is what ``parse_integer`` would give; the others go
    through ``parse_integer`` CPU by CPU, for its warning naming each file.
    """
    plain = {text: value for text in set(texts) if text is not None and (value := decimal(text)) is not None}
    return [plain[text] if text in plain else r.parse_integer(f"{_CPU}/cpu{cpu}/topology/core_id", text)
            for cpu, text in zip(cpus, texts, strict=True)]


def _bits(members: list[int]) -> int:
    bits = 0
    for member in members:
        bits |= 1 << member
    return bits


def _members(bits: int) -> list[int]:
    """The ids of the 1-bits of ``bits``, ascending (for the small sets of a core's siblings)."""
    found = []
    while bits:
        low = bits & -bits
        found.append(low.bit_length() - 1)
        bits ^= low
    return found


def _packages(
    r: _Reader,
    online: CpuSet,
    nodes: tuple[Node, ...],
    package_ids: dict[int, int | None],
    groups: set[CpuSet],
) -> tuple[list[Package], str]:
    if online and all(p is not None for p in package_ids.values()):
        members: dict[int, int] = {}
        for cpu, pid in package_ids.items():
            assert pid is not None
            members[pid] = members.get(pid, 0) | 1 << cpu
        return [Package(pid, CpuSet.from_bits(bits)) for pid, bits in sorted(members.items())], "physical_package_id"
    # No usable package ids (s390, ppc, partial captures): use the kernel's own
    # package sibling lists when they tile the CPUs, else one package for all.
    if groups and CpuSet.union(groups) == online and sum(len(g) for g in groups) == len(online):
        ordered = sorted(groups, key=lambda g: g.first())
        r.warn("no physical_package_id: packages grouped by the kernel's package sibling lists")
        return [Package(i, g) for i, g in enumerate(ordered)], "package siblings"
    if online:
        r.warn("no physical_package_id: all online CPUs counted as one package")
    return [Package(0, online)], "whole machine"


def _read_caches(r: _Reader, online: CpuSet) -> list[CacheGroup]:
    groups: dict[int, int] = {}
    covered = CpuSet()
    # Every CPU that shares a cache has that same cache as its last level, so
    # only the lowest CPU not yet inside a group is read: one per group.
    while rest := online.bits & ~covered.bits:
        cpu = (rest & -rest).bit_length() - 1
        best: tuple[int, CpuSet] | None = None
        folder = f"{_CPU}/cpu{cpu}/cache"
        for index in r.numbered(folder, "index"):
            leaf = f"{folder}/index{index}"
            kind = (r.text(f"{leaf}/type") or "").strip()
            level = r.integer(f"{leaf}/level")
            if kind not in ("Unified", "Data") or level is None:
                continue
            shared = r.either(leaf, "shared_cpu_list", "shared_cpu_map")
            if shared is None:
                continue
            if best is None or level > best[0]:
                best = (level, shared & online | CpuSet([cpu]))
        if best is None:
            covered |= CpuSet([cpu])
            continue
        level, cpus = best
        groups[cpus.bits] = level
        covered |= cpus
    if online and not groups:
        r.warn("no cache information: no last-level-cache groups")
    return sorted((CacheGroup(level, CpuSet.from_bits(bits)) for bits, level in groups.items()),
                  key=lambda g: g.cpus.first())


def _process_mask(host: Host, r: _Reader) -> CpuSet | None:
    if host.is_live:
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

    Raises :class:`numapin.host.HostError` only when the root does not exist
    or holds no ``sys/devices/system/cpu``; any other gap becomes a warning.
    """
    host = Host.at(root, journal)
    host.check()
    r = _Reader(host)
    online, possible, offline = _read_cpus(r)
    nodes = tuple(_read_nodes(r, online))
    homeless = online - CpuSet.union(n.cpus for n in nodes)
    if homeless:
        r.warn(f"CPUs {homeless} belong to no NUMA node")
    cgroup = read_cgroup(host, r.warn)
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
        process=_process_mask(host, r),
        _grouping=Later(lambda: _read_grouping(host, online, nodes)),
        _warnings=tuple(r.warnings),
    )
    if journal is not None:
        topology._grouping.get()  # now, while the journal is kept: a capture holds every file a question reads
    return topology


def _read_grouping(host: Host, online: CpuSet, nodes: tuple[Node, ...]) -> Grouping:
    # A root removed since (a synthetic machine's folder) is an error, not a machine without cores.
    host.check()
    r = _Reader(host)
    # Most files read are the CPUs' own: opened relative to their folder, held open.
    with host.folder(_CPU) as cpu_folder:
        cores, core_source, packages, package_source = _read_cores_and_packages(r, cpu_folder, online, nodes)
    caches = _read_caches(r, online)
    return Grouping(tuple(packages), package_source, tuple(cores), core_source, tuple(caches), tuple(r.warnings))


def node_free_bytes(root: str | os.PathLike[str] | None, node: int) -> int | None:
    """Node ``node``'s free memory now (``MemFree`` of its meminfo); None where it cannot be read."""
    for line in (Host.at(root).read(f"sys/devices/system/node/node{node}/meminfo") or "").splitlines():
        fields = line.split()  # "Node 0 MemFree:  123456 kB"
        if len(fields) >= 4 and fields[2] == "MemFree:" and (kib := decimal(fields[3])) is not None:
            return kib * 1024
    return None


def free_hugepages(root: str | os.PathLike[str] | None, node: int, size: int) -> int | None:
    """Huge pages of ``size`` bytes free in node ``node``'s pool now; None where the kernel has no such pool (or
    the file cannot be read)."""
    return decimal((Host.at(root).read(f"sys/devices/system/node/node{node}/hugepages/hugepages-{size >> 10}kB/"
                                       "free_hugepages") or "").strip())
