"""CPU kinds: a machine's cores ranked by performance, from what the kernel exposes.

Hybrid x86 parts list their core types as PMU folders (``sys/devices/cpu_core``
and ``cpu_atom``); ARM and some x86 kernels give each CPU a ``cpu_capacity``
(the scheduler's relative performance, 1024 for the fastest); ``cpufreq``
gives maximum and base frequencies, and ACPI CPPC a ``highest_perf``. A kind is
a set of CPUs alike in all of these. Rank 0 is the fastest kind.

Two rules follow hwloc's Linux reading, so that the kinds here are hwloc's:
among CPUs of one base frequency, maximum frequencies less than 10% apart are
one kind (Turbo Boost Max 3.0 raises a few "favoured" cores a little above the
rest of the same cores); where ``base_frequency`` is missing, CPPC's
``nominal_freq`` stands in for it. The favoured cores still come first inside
their kind (:attr:`CpuKinds.order`), which is what ``reserve=K`` takes.

Some parts hide their fastest cores from the kernel: Intel's Priority Core
Turbo (Xeon 6 "P" parts) runs a few priority cores at a higher turbo, and no
file a user may read says which (only ``/dev/isst_interface``, root's).
:class:`PriorityRule` ``pct`` (opt-in, ``NUMAPIN_PRIORITY_CORES=pct``) takes
their layout from the figures vLLM published for the parts it measured or
looked up (:data:`PCT_SKUS`): data, applied only where the CPU's model and
CPU 0's CPPC ``highest_perf`` both match, and only where the kernel tells no
cores apart itself.

Read on demand, not with the topology: a pin without ``reserve`` or
``cores="fastest"`` never needs them, and they cost up to four files per CPU.
"""

from __future__ import annotations

from ..base.choices import Choice
from ..base.frozen import frozen
from ..base.logger import log
from ..base.text import decimal
from ..cpuset import CpuSet
from .host import Host
from .topology import Topology

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__all__ = ["PCT_SKUS", "CpuKind", "CpuKinds", "PctSku", "PriorityRule", "read_kinds"]

# Intel's hybrid PMUs, fastest type first, each with the name show gives its kind.
_CORE_TYPES = (("cpu_core", "performance"), ("cpu_atom", "efficient"), ("cpu_lowpower", "low power"))
# hwloc's default: maximum frequencies within 10% of each other (same base) are one kind.
_ADJUST_PERCENT = 10


class PriorityRule(Choice):
    """What decides the CPU kinds besides the kernel's files."""

    KERNEL = "kernel"
    """Only what the kernel exposes (the default)."""

    PCT = "pct"
    """Also the published Priority Core Turbo layouts of :data:`PCT_SKUS`, where the kernel tells nothing apart."""


@frozen
class PctSku:
    """One Priority Core Turbo part as vLLM published it (``vllm/utils/numa_utils.py``, vllm#43270, #43775)."""

    highest_perf: int
    """CPU 0's CPPC ``highest_perf``: the priority cores' turbo in 100 MHz (a guard: no match, no rule)."""
    stride: int
    """Logical CPUs per priority group: CPUs whose number modulo ``stride`` is 0 or 1 are priority cores."""
    measured: bool
    """True where vLLM measured the layout (a DGX B300); False where it took the figures from Intel's ARK."""


#: Model number in ``/proc/cpuinfo``'s model name -> its layout. Figures, not code, from vLLM's table.
PCT_SKUS: dict[str, PctSku] = {
    "6776P": PctSku(46, 16, measured=True),
    "6774P": PctSku(46, 16, measured=False),
    "6962P": PctSku(44, 18, measured=False),
}


@frozen
class CpuKind:
    """CPUs alike in everything the kernel says of their performance; ``rank`` 0 is the fastest kind."""

    rank: int
    cpus: CpuSet
    core_type: str | None = None
    capacity: int | None = None
    max_mhz: int | None = None
    base_mhz: int | None = None
    highest_perf: int | None = None
    rule: str | None = None
    """Where not the kernel's files but a :class:`PriorityRule` made this kind: its name (``pct``)."""

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"cpus": str(self.cpus), "rank": self.rank}
        for name in ("core_type", "capacity", "max_mhz", "base_mhz", "highest_perf", "rule"):
            value = getattr(self, name)
            if value is not None:
                out[name] = value
        return out


@frozen
class CpuKinds:
    """The machine's CPU kinds, fastest first, and every CPU in the order to take them."""

    kinds: tuple[CpuKind, ...]
    order: tuple[int, ...] = ()
    """Online CPUs fastest first: by kind, then by each CPU's own maximum
    frequency and ``highest_perf`` (a kind's favoured cores first), then by
    number, highest first (low CPUs carry interrupts and housekeeping)."""
    note: str | None = None
    """Why a :class:`PriorityRule` asked for did not apply (``numapin show`` says it)."""

    @property
    def hybrid(self) -> bool:
        """True when the CPUs are of more than one kind."""
        return len(self.kinds) > 1

    def fastest(self, cpus: CpuSet) -> CpuSet:
        """The CPUs of ``cpus`` that belong to the fastest kind present among them."""
        for kind in self.kinds:
            if kind.cpus & cpus:
                return kind.cpus & cpus
        return CpuSet()

    def position(self) -> dict[int, int]:
        """Each CPU's place in :attr:`order` (0 the fastest)."""
        return {cpu: i for i, cpu in enumerate(self.order)}


@frozen
class _Cpu:
    cpu: int
    core_type: int | None  # index into _CORE_TYPES (lower is faster)
    capacity: int | None
    max_khz: int | None
    base_khz: int | None
    highest_perf: int | None


def _read_cpus(host: Host, online: CpuSet) -> list[_Cpu]:
    types: dict[int, int] = {}
    for index, (pmu, _) in enumerate(_CORE_TYPES):
        text = host.read(f"sys/devices/{pmu}/cpus")
        if text is not None:
            try:
                for cpu in CpuSet.parse(text):
                    types.setdefault(cpu, index)
            except ValueError:
                pass
    found = []
    with host.folder("sys/devices/system/cpu") as folder:
        def number(cpu: int, name: str) -> int | None:
            value = decimal(host.read_in(folder, f"cpu{cpu}/{name}"))
            return value if value is not None and value > 0 else None

        for cpu in online:
            base = number(cpu, "cpufreq/base_frequency")
            if base is None:
                nominal = number(cpu, "acpi_cppc/nominal_freq")  # MHz
                base = None if nominal is None else nominal * 1000
            found.append(_Cpu(cpu, types.get(cpu) if types else None, number(cpu, "cpu_capacity"),
                              number(cpu, "cpufreq/cpuinfo_max_freq"), base, number(cpu, "acpi_cppc/highest_perf")))
    return found


def _adjusted_max(cpus: list[_Cpu]) -> dict[int, int | None]:
    """Each CPU's maximum frequency, the small Turbo Boost Max spread within one base frequency flattened."""
    by_base: dict[int | None, list[_Cpu]] = {}
    for c in cpus:
        by_base.setdefault(c.base_khz, []).append(c)
    adjusted: dict[int, int | None] = {c.cpu: c.max_khz for c in cpus}
    if any(c.max_khz and not c.base_khz for c in cpus):
        return adjusted  # hwloc flattens only where every CPU with a maximum has its base too
    for group in by_base.values():
        maxima = [c.max_khz for c in group if c.max_khz]
        if maxima and min(maxima) != max(maxima) and (max(maxima) - min(maxima)) * 100 < _ADJUST_PERCENT * min(maxima):
            for c in group:
                adjusted[c.cpu] = min(maxima)
    return adjusted


def _speed(core_type: int | None, capacity: int | None, highest: int | None, max_khz: int | None,
           base_khz: int | None) -> tuple[int, ...]:
    """A key that sorts faster CPUs first: core type, then capacity, CPPC, maximum and base frequency."""
    return (core_type if core_type is not None else 0, -(capacity or 0), -(highest or 0), -(max_khz or 0),
            -(base_khz or 0))


def read_kinds(topology: Topology, *, rule: PriorityRule | str = PriorityRule.KERNEL,
               journal: list[str] | None = None) -> CpuKinds:
    """The CPU kinds of the machine under ``topology.root`` (one kind when the kernel tells nothing apart).

    ``rule`` ``pct`` applies :data:`PCT_SKUS` where it fits (see the module's text);
    ``journal`` collects the files read (``numapin snapshot``)."""
    host = Host(topology.root, journal)
    cpus = _read_cpus(host, topology.online)
    if not cpus:
        return CpuKinds(())
    kinds = _kernel_kinds(cpus)
    if PriorityRule(rule) is PriorityRule.PCT:
        return _priority_cores(host, cpus, kinds)
    return kinds


def _kernel_kinds(cpus: list[_Cpu]) -> CpuKinds:
    adjusted = _adjusted_max(cpus)
    # Like hwloc, CPPC highest_perf does not split kinds by itself (favoured cores differ in it a little);
    # it orders CPUs inside their kind.
    groups: dict[tuple[int | None, int | None, int | None, int | None], list[_Cpu]] = {}
    for c in cpus:
        groups.setdefault((c.core_type, c.capacity, adjusted[c.cpu], c.base_khz), []).append(c)

    def group_speed(key: tuple[int | None, int | None, int | None, int | None]) -> tuple[int, ...]:
        core_type, capacity, max_khz, base_khz = key
        highest = max((c.highest_perf or 0) for c in groups[key])
        return _speed(core_type, capacity, highest, max_khz, base_khz)

    keys = sorted(groups, key=group_speed)
    kinds = []
    for rank, key in enumerate(keys):
        core_type, capacity, max_khz, base_khz = key
        members = groups[key]
        highest = {c.highest_perf for c in members}
        kinds.append(CpuKind(
            rank=rank,
            cpus=CpuSet(c.cpu for c in members),
            core_type=None if core_type is None else _CORE_TYPES[core_type][1],
            capacity=capacity,
            max_mhz=None if max_khz is None else max_khz // 1000,
            base_mhz=None if base_khz is None else base_khz // 1000,
            highest_perf=highest.pop() if len(highest) == 1 else None,
        ))
    rank_of = {c.cpu: rank for rank, key in enumerate(keys) for c in groups[key]}
    return CpuKinds(tuple(kinds), _order(cpus, rank_of))


def _order(cpus: list[_Cpu], rank_of: dict[int, int]) -> tuple[int, ...]:
    order = sorted(cpus, key=lambda c: (rank_of[c.cpu], -(c.highest_perf or 0), -(c.max_khz or 0), -c.cpu))
    return tuple(c.cpu for c in order)


def _model_name(host: Host) -> str:
    for line in (host.read("proc/cpuinfo") or "").splitlines():
        key, colon, value = line.partition(":")
        if colon and key.strip() == "model name":
            return value.strip()
    return ""


def _priority_cores(host: Host, cpus: list[_Cpu], kernel: CpuKinds) -> CpuKinds:
    """The kernel's kinds, or the published PCT layout where the part is in :data:`PCT_SKUS` and every guard holds."""
    model = _model_name(host)
    sku = next((name for name in PCT_SKUS if name in model.split()), "")  # "Intel(R) Xeon(R) 6776P"
    layout = PCT_SKUS.get(sku)
    cpu0 = next((c.highest_perf for c in cpus if c.cpu == 0), None)
    note = None
    if len(kernel.kinds) > 1:
        note = "the kernel tells its CPUs apart: its kinds stand"
    elif layout is None:
        note = f"the CPU ({model or 'model unknown'}) is none of {', '.join(PCT_SKUS)}"
    elif cpu0 != layout.highest_perf:
        note = f"CPU 0's highest_perf is {cpu0 or 'unreadable'}, not the {layout.highest_perf} of a {sku} with PCT"
    if note is not None or layout is None:
        log.info("priority-core rule pct not applied: %s", note)
        return CpuKinds(kernel.kinds, kernel.order, note=f"priority-core rule pct not applied: {note}")
    # CPU 0 passed the guard, so the priority kind is never empty; the rest may be (a one-group machine).
    priority = CpuSet(c.cpu for c in cpus if c.cpu % layout.stride in (0, 1))
    others = CpuSet(c.cpu for c in cpus) - priority
    base, pct = kernel.kinds[0], str(PriorityRule.PCT)
    kinds = [CpuKind(0, priority, base.core_type, base.capacity, layout.highest_perf * 100, base.base_mhz,
                     layout.highest_perf, rule=pct)]
    if others:
        kinds.append(CpuKind(1, others, base.core_type, base.capacity, base.max_mhz, base.base_mhz, rule=pct))
    return CpuKinds(tuple(kinds), _order(cpus, {c.cpu: int(c.cpu in others) for c in cpus}))
