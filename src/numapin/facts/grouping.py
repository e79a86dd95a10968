"""How a machine's online CPUs group: packages (sockets), cores (SMT siblings together) and last-level caches,
read from sysfs on the first question about them (a pin to a GPU's node, the default, never asks; on a machine
of 224 CPUs these are 363 of the 380 files read). Where the kernel does not say a grouping, the reader falls back
to the plainest one that is still true and says where it came from.
"""

from __future__ import annotations

from ..base.frozen import frozen
from ..base.text import decimal
from ..cpuset import CpuSet

TYPE_CHECKING = False
if TYPE_CHECKING:
    from .host import Folder
    from .sysfs import SysfsReader

__all__ = ["CacheGroup", "Core", "Grouping", "Package", "bits_of", "read_grouping"]

_CPU = "sys/devices/system/cpu"


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


def read_grouping(r: SysfsReader, online: CpuSet) -> Grouping:
    """How ``online`` CPUs group, as the reader's sysfs says."""
    host = r.host
    # A root removed since (a synthetic machine's folder) is an error, not a machine without cores.
    host.check()
    # Most files read are the CPUs' own: opened relative to their folder, held open.
    with host.folder(_CPU) as cpu_folder:
        cores, core_source, packages, package_source = _read_cores_and_packages(r, cpu_folder, online)
    caches = _read_caches(r, online)
    return Grouping(tuple(packages), package_source, tuple(cores), core_source, tuple(caches), tuple(r.warnings))


def _read_cores_and_packages(
    r: SysfsReader, cpu_folder: Folder, online: CpuSet
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
    packages, package_source = _packages(r, online, package_ids, package_groups)
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
                          found if found is not None else CpuSet.from_bits(bits_of(members))))
    return cores, "thread siblings", packages, package_source


def _package_ids(r: SysfsReader, cpus: list[int], online: CpuSet) -> tuple[dict[int, int | None], set[CpuSet]]:
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
    r: SysfsReader, cpu_folder: Folder, cpus: list[int], online_bits: int
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


def _core_ids(r: SysfsReader, cpus: list[int], texts: list[str | None]) -> list[int | None]:
    """Each CPU's core id, read for every CPU (see the AMD note above); each distinct text parsed once.

    A text ``decimal`` takes is what ``parse_integer`` would give; the others go
    through ``parse_integer`` CPU by CPU, for its warning naming each file.
    """
    plain = {text: value for text in set(texts) if text is not None and (value := decimal(text)) is not None}
    return [plain[text] if text in plain else r.parse_integer(f"{_CPU}/cpu{cpu}/topology/core_id", text)
            for cpu, text in zip(cpus, texts, strict=True)]


def bits_of(members: list[int]) -> int:
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
    r: SysfsReader,
    online: CpuSet,
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


def _read_caches(r: SysfsReader, online: CpuSet) -> list[CacheGroup]:
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
