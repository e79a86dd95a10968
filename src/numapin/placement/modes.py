"""Placement policies: pure functions from facts (topology, GPUs) to CPU and memory sets.

Nothing here reads files or changes kernel state: :func:`resolve` answers
"which GPU, which CPUs" from facts already read, for every caller (``pin``,
``numapin exec``, ``numapin plan``, the compatibility layer). Every placement
is computed against the unconstrained baseline (online CPUs inside the cgroup
cpuset), never against the process's current mask, so planning again after
pinning gives the same answer.
"""

from __future__ import annotations

from ..base.choices import Choice, parse_choice
from ..base.environment import RANK_MAP
from ..base.errors import EnvironmentProblem, UsageError
from ..base.frozen import frozen, replace
from ..base.text import counted, plural, printable
from ..cpuset import CpuSet, CpuSpec
from ..facts.grouping import Core
from ..facts.inventory import Gpu, Inventory, VisibleGpu
from ..facts.kinds import CpuKinds
from ..facts.machine import Facts
from ..facts.pci import is_function
from ..facts.topology import Topology
from .ranks import LocalRank, gpu_for_rank, local_rank

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

__all__ = ["Cores", "Placement", "PlacementError", "PlacementMode", "parse_mode", "place", "rank_share", "resolve",
           "within"]


class PlacementError(EnvironmentProblem):
    """The machine offers nothing to place on (say, the GPU's node lies outside the cgroup)."""


class PlacementMode(Choice):
    """Where a GPU's worker runs. Examples are for ``dgx-h100`` (GPU 0 on node 0)."""

    NODE = "node"
    """Every allowed CPU of the GPU's NUMA node: GPU 0 → ``0-55,112-167``."""

    SOCKET = "socket"
    """Every allowed CPU of the GPU's package, all its nodes: on ``epyc-nps4`` GPU 0 → 4 nodes."""

    EXCLUSIVE = "exclusive"
    """The node's physical cores split among the node's GPUs, SMT siblings together:
    GPU 0 → ``0-13,112-125`` (14 of the node's 56 cores)."""

    CORE_COMPLEX = "core-complex"
    """One last-level-cache group (CCX) per GPU on its node: on ``epyc-nps4`` one 8-core CCX."""

    SINGLE = "single"
    """One physical core per GPU, distinct per GPU: GPU 0 → ``0,112``."""

    EXPLICIT = "explicit"
    """The caller's own CPUs (``cpus=``), checked against the allowed CPUs: ``cpus="0-7"`` → ``0-7``."""


class Cores(Choice):
    """Which of the placement's cores its workers get, where the machine has CPU kinds (:mod:`numapin.facts.kinds`)."""

    ALL = "all"
    """Every core the mode gives, of whatever kind."""

    FASTEST = "fastest"
    """Only those of the fastest kind among them: a hybrid laptop's P-cores, a Xeon's priority cores.
    Where every core is of one kind, the same as ``all``."""


def parse_mode(mode: str | PlacementMode) -> PlacementMode:
    """A mode a caller may ask for by name (``explicit`` is what giving CPUs makes, not a mode to ask for)."""
    askable = tuple(m for m in PlacementMode if m is not PlacementMode.EXPLICIT)
    return parse_choice(PlacementMode, mode, "mode", among=askable)


@frozen
class Placement:
    """Where one GPU's worker runs.

    ``cpus`` is the whole placement; ``reserved`` (part of ``cpus``) is set
    aside for one latency-critical thread, ``workers`` is the rest.
    """

    cpus: CpuSet
    mems: CpuSet
    reason: str
    mode: PlacementMode
    gpu: int | None = None
    pci: str | None = None
    node: int | None = None
    rank: int | None = None
    reserved: CpuSet = CpuSet()
    cores: Cores = Cores.ALL
    """Which kind of core was asked for: a judge of the process holds it to the same."""
    partition: int | None = None
    """The GPU's partition of its PCI device (``pci``), where it is one."""

    @property
    def workers(self) -> CpuSet:
        return self.cpus - self.reserved

    @property
    def where(self) -> str | None:
        """The GPU's PCI address, and its partition where it is one (as :attr:`Gpu.where` says it)."""
        return self.pci if self.partition is None else f"{self.pci} partition {self.partition}"

    def __str__(self) -> str:
        text = f"cpus {self.cpus} mems {self.mems}"
        if self.reserved:
            text += f" (reserved {self.reserved})"
        return f"{text}: {self.reason}"

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "rank": self.rank,
            "gpu": self.gpu,
            "pci": self.pci,
            "node": self.node,
            "mode": self.mode.value,
            "cpus": str(self.cpus),
            "mems": str(self.mems),
            "reason": self.reason,
        }
        if self.reserved:
            out["reserved"] = str(self.reserved)
            out["workers"] = str(self.workers)
        if self.cores is not Cores.ALL:
            out["cores"] = self.cores.value
        if self.partition is not None:
            out["partition"] = self.partition
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Placement:
        """The placement :meth:`as_dict` wrote; ValueError, KeyError or TypeError for anything else."""

        def number(key: str) -> int | None:
            value = data.get(key)
            if value is None:
                return None
            if isinstance(value, bool) or not isinstance(value, int):
                raise TypeError(f"{key}: not an integer: {value!r}")
            return value

        pci = data.get("pci")
        if pci is not None and not is_function(str(pci)):  # a record's label in the node's metrics: a PCI address
            raise ValueError(f"pci: not a PCI address: {pci!r}")
        # Words that reach a terminal and a log, read from a file another user may have written: escaped here,
        # once, so that no reader of a record prints a control character it holds.
        reason = printable(str(data["reason"]))
        return cls(CpuSet.parse(str(data["cpus"])), CpuSet.parse(str(data["mems"])), reason,
                   PlacementMode(data["mode"]), number("gpu"), None if pci is None else str(pci), number("node"),
                   number("rank"), CpuSet.parse(str(data.get("reserved") or "")), Cores(data.get("cores", "all")),
                   number("partition"))


def _domain(topology: Topology, gpu: Gpu) -> tuple[CpuSet, str]:
    """The allowed CPUs of the GPU's node (its local CPUs when the node is unknown)."""
    if gpu.node is not None:
        return topology.node(gpu.node).cpus & topology.allowed, f"node {gpu.node}"
    return gpu.cpus & topology.allowed, f"local CPUs {gpu.cpus} (node unknown)"


def _siblings(inventory: Inventory, gpu: Gpu) -> list[Gpu]:
    """Every GPU of the machine sharing ``gpu``'s node, in PCI order.

    Physical GPUs, not the visible ones: processes that each see one GPU
    through CUDA_VISIBLE_DEVICES must still get disjoint shares.
    """
    if gpu.node is not None:
        return [g for g in inventory.gpus if g.node == gpu.node]
    return [g for g in inventory.gpus if g.node is None and g.cpus == gpu.cpus]


def _cores(topology: Topology, cpus: CpuSet) -> list[Core]:
    return sorted(topology.cores_within(cpus), key=lambda c: c.cpus.first())


def _exclusive(topology: Topology, inventory: Inventory, gpu: Gpu, domain: CpuSet, where: str) -> CpuSet:
    peers = _siblings(inventory, gpu)
    cores = _cores(topology, domain)
    if len(cores) < len(peers):
        raise UsageError(
            f"exclusive: {where} has {counted(len(cores), 'allowed core')} for {len(peers)} GPUs; every GPU needs one",
            value=PlacementMode.EXCLUSIVE,
        )
    share, extra = divmod(len(cores), len(peers))
    rank = peers.index(gpu)
    # Leftover cores go to the lowest ranks, one each, so shares differ by at most one.
    start = rank * share + min(rank, extra)
    stop = start + share + (1 if rank < extra else 0)
    return CpuSet.union(c.cpus for c in cores[start:stop])


def _core_complex(topology: Topology, inventory: Inventory, gpu: Gpu, domain: CpuSet) -> CpuSet | None:
    groups = sorted(topology.caches_within(domain), key=lambda g: g.cpus.first())
    if not groups:
        return None
    rank = _siblings(inventory, gpu).index(gpu)
    return groups[rank % len(groups)].cpus


def _single(topology: Topology, inventory: Inventory, gpu: Gpu, domain: CpuSet) -> CpuSet:
    cores = _cores(topology, domain)
    rank = _siblings(inventory, gpu).index(gpu)
    return cores[rank % len(cores)].cpus


def _mems(topology: Topology, cpus: CpuSet) -> CpuSet:
    mems = topology.nodes_of(cpus) & topology.allowed_mems
    return mems or topology.allowed_mems


def _check_reserve(reserve: int) -> None:
    if isinstance(reserve, bool) or not isinstance(reserve, int) or reserve < 0:
        raise UsageError(f"reserve must be a non-negative number of cores, not {reserve!r}", value=reserve)


def _reserve(topology: Topology, cpus: CpuSet, reserve: int, kinds: CpuKinds | None) -> CpuSet:
    _check_reserve(reserve)
    if reserve == 0:
        return CpuSet()
    cores = _cores(topology, cpus)
    if reserve >= len(cores):
        raise UsageError(
            f"reserve={reserve} leaves no core for the other threads: the placement (CPUs {cpus}) has "
            f"{counted(len(cores), 'core')}",
            value=reserve,
        )
    # The fastest cores first (a priority core, a P-core, a favoured core), then the highest:
    # low-numbered CPUs tend to carry interrupts and housekeeping, which a latency-critical loop
    # should not share.
    position = kinds.position() if kinds is not None else {}
    def speed(core: Core) -> tuple[int, int]:
        return min((position.get(cpu, len(position)) for cpu in core.cpus), default=0), -core.cpus.last()
    return CpuSet.union(c.cpus for c in sorted(cores, key=speed)[:reserve])


def _fastest(chosen: CpuSet, kinds: CpuKinds | None) -> CpuSet:
    fastest = kinds.fastest(chosen) if kinds is not None else CpuSet()
    return fastest or chosen


def explicit_cpus(topology: Topology, cpus: CpuSpec) -> CpuSet:
    """Validate an explicit CPU request against the allowed CPUs."""
    try:
        wanted = CpuSet(cpus)
    except (TypeError, ValueError) as exc:
        raise UsageError(f"bad CPU list: {exc}", value=cpus) from None
    if not wanted:
        raise UsageError("the explicit CPU list is empty", value=cpus)
    outside = wanted - topology.allowed
    if outside:
        which = f"{plural(len(outside), 'CPU')} {outside}" if outside != wanted or len(wanted) == 1 \
            else f"all {len(wanted)} CPUs {wanted}"
        raise UsageError(f"{which} {plural(len(outside), 'is', 'are')} outside the allowed CPUs {topology.allowed}",
                         value=cpus)
    return wanted


def place(
    topology: Topology,
    inventory: Inventory,
    gpu: VisibleGpu | None,
    *,
    mode: PlacementMode = PlacementMode.NODE,
    reserve: int = 0,
    cpus: CpuSpec | None = None,
    rank: int | None = None,
    cores: Cores = Cores.ALL,
    kinds: CpuKinds | None = None,
) -> Placement:
    """The placement for one visible GPU (or for explicit ``cpus``).

    ``kinds`` (the machine's CPU kinds) orders the cores ``reserve`` takes and
    is what ``cores="fastest"`` keeps; without it every core is alike.
    """
    if cpus is not None:
        return _explicit(topology, gpu, cpus, rank, reserve, cores, kinds)
    chosen_mode = mode
    if gpu is None or chosen_mode is PlacementMode.EXPLICIT:
        raise UsageError("a placement needs a GPU and a mode, or explicit cpus", value=mode)
    physical = gpu.gpu
    domain, where = _domain(topology, physical)
    if not domain:
        raise PlacementError(
            f"GPU {gpu.index} ({physical.where}): {where} has no CPU inside the allowed CPUs {topology.allowed}"
        )
    chosen, how = _by_mode(chosen_mode, topology, inventory, physical, domain, where)
    reason = f"GPU {gpu.index} ({physical.where}) on {where}{how}"
    if cores is Cores.FASTEST:
        fastest = _fastest(chosen, kinds)
        if fastest != chosen:
            chosen = fastest
            reason += ", its fastest cores"
    return Placement(
        cpus=chosen,
        mems=_mems(topology, chosen),
        reason=reason,
        mode=chosen_mode,
        gpu=gpu.index,
        pci=physical.pci,
        node=physical.node,
        rank=rank,
        reserved=_reserve(topology, chosen, reserve, kinds),
        cores=cores,
        partition=physical.partition,
    )


def _explicit(topology: Topology, gpu: VisibleGpu | None, cpus: CpuSpec, rank: int | None, reserve: int,
              cores: Cores, kinds: CpuKinds | None) -> Placement:
    """The placement on explicit ``cpus`` (their fastest cores alone, where ``cores`` asks)."""
    given = explicit_cpus(topology, cpus)
    chosen = _fastest(given, kinds) if cores is Cores.FASTEST else given
    return Placement(
        cpus=chosen,
        mems=_mems(topology, chosen),
        reason=f"explicit CPUs {given}" + (", their fastest cores" if chosen != given else ""),
        mode=PlacementMode.EXPLICIT,
        gpu=None if gpu is None else gpu.index,
        pci=None if gpu is None else gpu.gpu.pci,
        node=None,
        rank=rank,
        reserved=_reserve(topology, chosen, reserve, kinds),
        cores=cores,
        partition=None if gpu is None else gpu.gpu.partition,
    )


def _by_mode(mode: PlacementMode, topology: Topology, inventory: Inventory, physical: Gpu, domain: CpuSet,
             where: str) -> tuple[CpuSet, str]:
    """The CPUs ``mode`` gives the GPU out of its ``domain`` (its node's allowed CPUs), and what the reason adds."""
    if mode is PlacementMode.NODE:
        return domain, ""
    if mode is PlacementMode.SOCKET:
        packages = [p for p in topology.packages if p.cpus & domain]
        return (CpuSet.union(p.cpus for p in packages) & topology.allowed,
                ", package " + ",".join(str(p.id) for p in packages))
    if mode is PlacementMode.EXCLUSIVE:
        peers = _siblings(inventory, physical)
        return (_exclusive(topology, inventory, physical, domain, where),
                f", share {peers.index(physical) + 1} of {len(peers)}")
    if mode is PlacementMode.CORE_COMPLEX:
        group = _core_complex(topology, inventory, physical, domain)
        return (domain, ", no cache information: whole node") if group is None else \
            (group, ", last-level cache group")
    if mode is PlacementMode.SINGLE:
        return _single(topology, inventory, physical, domain), ", one core"
    # a mode added to the enum but not here must fail loudly, never act as another
    raise AssertionError(f"placement mode {mode} has no policy")


def within(placement: Placement, topology: Topology, inventory: Inventory, kinds: CpuKinds | None = None) -> Placement:
    """The same request as ``placement``, decided again inside ``topology.allowed`` (a cpuset that changed
    under a running process): explicit CPUs keep those still allowed; a GPU's placement is made again for
    the same GPU, mode, reserved cores and kind of cores. :class:`PlacementError` (or :class:`UsageError`)
    when nothing of it fits there."""
    reserve = len(topology.cores_within(placement.reserved)) if placement.reserved else 0
    if placement.mode is PlacementMode.EXPLICIT:
        inside = placement.cpus & topology.allowed
        if not inside:
            raise PlacementError(f"none of the CPUs {placement.cpus} is inside the allowed CPUs {topology.allowed}")
        return replace(place(topology, inventory, None, cpus=inside, reserve=reserve, rank=placement.rank,
                             cores=placement.cores, kinds=kinds), gpu=placement.gpu, pci=placement.pci,
                       partition=placement.partition)
    found = next((g for g in inventory.gpus if g.is_at(placement.pci, placement.partition)), None)
    if found is None or placement.gpu is None:
        raise PlacementError(f"the GPU {placement.pci} of the placement is not on this machine")
    return place(topology, inventory, VisibleGpu(placement.gpu, found), mode=placement.mode, reserve=reserve,
                 rank=placement.rank, cores=placement.cores, kinds=kinds)


def resolve(
    facts: Facts,
    environ: Mapping[str, str],
    *,
    gpu: int | None = None,
    cpus: CpuSpec | None = None,
    rank: LocalRank | None = None,
    mode: PlacementMode = PlacementMode.NODE,
    reserve: int = 0,
    cores: Cores = Cores.ALL,
) -> Placement:
    """The placement for this request: the one answer to "which GPU, which CPUs".

    ``cpus`` pins to an explicit set (``gpu``, when given, only names the GPU
    it is for). Otherwise ``gpu`` is CUDA's logical index; None means the GPU
    of ``rank``, itself read from the launcher's variables in ``environ`` when
    None (rank 0 when none is set), through ``NUMAPIN_RANK_MAP``. Raises
    :class:`UsageError` for the caller's mistakes and :class:`EnvironmentProblem`
    when the machine offers nothing (no GPU visible, no allowed CPU near it). ``mode`` and ``cores`` are parsed
    already (:func:`parse_mode`, at the edge that took them as text).
    """
    # The CPU kinds are read only when asked about: most pins never need them.
    _check_reserve(reserve)
    kinds = facts.kinds() if reserve or cores is Cores.FASTEST else None
    if cpus is not None:
        named = facts.gpu(gpu) if gpu is not None else None
        return place(facts.topology, facts.inventory, named, cpus=cpus, reserve=reserve,
                     rank=None if rank is None else rank.rank, cores=cores, kinds=kinds)
    if gpu is None:
        if rank is None:
            rank = local_rank(environ)
        # With no GPU visible, selecting GPU 0 below reports that (an environment problem).
        gpu = gpu_for_rank(0 if rank is None else rank.rank, len(facts.visible), environ.get(RANK_MAP)) \
            if facts.visible else 0
    return place(facts.topology, facts.inventory, facts.gpu(gpu), mode=mode, reserve=reserve,
                 rank=None if rank is None else rank.rank, cores=cores, kinds=kinds)


def rank_share(facts: Facts, placement: Placement) -> tuple[int, int]:
    """How many ranks of a job, one per GPU, are placed on this placement's worker CPUs, and how many of them
    each rank's thread pools get: in mode ``node`` the GPUs of its node share them, in mode ``socket`` those of
    its package, else the rank has them alone. Every GPU of the machine counts, not only those in view: a
    launcher that hands each process its own GPU still starts one process per GPU."""
    sharing = 1
    if placement.mode in (PlacementMode.NODE, PlacementMode.SOCKET) and placement.node is not None:
        nodes = ({placement.node} if placement.mode is PlacementMode.NODE
                 else {n.id for n in facts.topology.nodes if n.cpus and n.cpus & placement.cpus})
        sharing = max(1, sum(1 for g in facts.inventory.gpus if g.node in nodes))
    return sharing, max(1, len(placement.workers) // sharing)
