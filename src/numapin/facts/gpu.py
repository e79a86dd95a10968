"""One GPU, of any vendor: the model every layer above reads (placement, pinning and the tools never ask
whose GPU it is), the errors of naming one, and where a PCI device sits (its node and local CPUs).

The readers of each vendor's GPUs (a module per vendor, behind :mod:`numapin.facts.inventory`) build these records.
"""

from __future__ import annotations

from ..base.errors import EnvironmentProblem, UsageError, quoted
from ..base.frozen import frozen
from ..base.text import decimal
from ..cpuset import CpuSet
from .glance import ACCELERATORS
from .host import Host
from .topology import Topology

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any, ClassVar, TypeAlias

    #: What a vendor's module reads of its devices (``read``): the GPUs a process may use, in its runtime's order;
    #: how to find those it may not (asked only when wanted: it may read every PCI function); and NVML's status
    #: (NVIDIA's reader; None from the others).
    Reading: TypeAlias = "tuple[list[Gpu], Callable[[], list[HiddenGpu]], str | None]"

__all__ = ["Gpu", "HiddenGpu", "NoGpuVisible", "NvmlError", "UnknownGpu", "Vendor", "VisibleGpu", "device_locality",
           "indices", "list_end"]


class UnknownGpu(UsageError):
    """A GPU named by the caller cannot be found or resolved."""


class NvmlError(EnvironmentProblem):
    """NVML, installed and needed (a MIG device to trace), failed: the driver's problem, not the caller's."""


class NoGpuVisible(EnvironmentProblem):
    """No GPU is visible to this process at all."""


class Vendor(str):
    """Whose GPU it is, which decides only how it is found and which variables select it: the name of a row of the
    accelerators' table (:data:`numapin.facts.glance.ACCELERATORS`), whose words it gives. Not a closed set of
    its own: a vendor added to the table is a ``Vendor`` with nothing more written. It reads, prints and compares
    as its name, and one name is one object (``is`` holds, through copy and pickle too)."""

    __slots__ = ()
    NVIDIA: ClassVar[Vendor]
    AMD: ClassVar[Vendor]
    GAUDI: ClassVar[Vendor]

    def __new__(cls, value: str) -> Vendor:
        found = _VENDORS.get(value)
        if found is None:
            if value not in ACCELERATORS:
                raise ValueError(f"{value!r} is not a valid Vendor (the table's: {', '.join(ACCELERATORS)})")
            found = _VENDORS[value] = super().__new__(cls, value)
        return found

    def __reduce__(self) -> tuple[type[Vendor], tuple[str]]:
        return Vendor, (self.value,)

    @classmethod
    def every(cls) -> tuple[Vendor, ...]:
        """Every vendor of the table, in its order."""
        return tuple(cls(name) for name in ACCELERATORS)

    @property
    def value(self) -> str:
        return str.__str__(self)

    @property
    def variables(self) -> str:
        """The variables that choose this vendor's GPUs, as a user would set them."""
        return ACCELERATORS[self].variables

    @property
    def maker(self) -> str:
        """Its maker's name as users write it: ``NVIDIA``, ``AMD``, ``Intel Gaudi``."""
        return ACCELERATORS[self].maker

    @property
    def device(self) -> str:
        """How its runtime names a device of it in a process: ``cuda``, ``hip``, ``hpu``."""
        return ACCELERATORS[self].device

    @property
    def devices(self) -> str:
        """What one of its devices is called: ``NVIDIA GPU``, ``Intel Gaudi`` (a Gaudi is no GPU to its maker)."""
        return self.maker if ACCELERATORS[self].classes is None else f"{self.maker} GPU"


_VENDORS: dict[str, Vendor] = {}
Vendor.NVIDIA, Vendor.AMD, Vendor.GAUDI = Vendor("nvidia"), Vendor("amd"), Vendor("gaudi")


@frozen
class Gpu:
    """One GPU, of any vendor, and what lies near it.

    ``node`` is the CPU NUMA node the GPU hangs under (None when unknown),
    ``cpus`` its local online CPUs, ``memory_nodes`` the host-memory nodes to
    allocate on for it, ``gpu_memory_nodes`` CPU-less nodes that hold the
    GPU's own memory (Grace, POWER9): never CPU nodes. ``firmware_node`` is
    the node the firmware itself reports (``numa_node``; -1 when it does not
    know, and ``node`` was then inferred from the local CPUs), None when unread.
    ``partition`` numbers a logical GPU among those sharing one PCI device (an
    MI300X in CPX mode shows eight), None for a whole device; ``devices`` are
    the device files that a process holding open uses this GPU (``/dev/nvidia0``,
    ``/dev/dri/renderD128``).
    """

    pci: str
    node: int | None
    cpus: CpuSet
    memory_nodes: CpuSet
    gpu_memory_nodes: CpuSet = CpuSet()
    model: str | None = None
    uuid: str | None = None
    minor: int | None = None
    source: str = "sysfs"
    disagreement: str | None = None
    firmware_node: int | None = None
    vendor: Vendor = Vendor.NVIDIA
    partition: int | None = None
    devices: tuple[str, ...] = ()
    ordinal: int | None = None
    """The number its runtime selects it by where that is no place in a list: a Gaudi's module id."""

    @property
    def name(self) -> str:
        """Its model, or its vendor's words for a GPU where the model is unknown."""
        return self.model or self.vendor.devices

    @property
    def where(self) -> str:
        """Its PCI address, and its partition where it is one: what tells it apart from every other GPU."""
        return self.pci if self.partition is None else f"{self.pci} partition {self.partition}"

    def is_at(self, pci: str | None, partition: int | None = None) -> bool:
        return self.pci == pci and self.partition == partition

    def __str__(self) -> str:
        node = "?" if self.node is None else self.node
        return f"{self.where} {self.name} node {node} cpus {self.cpus}"


@frozen
class HiddenGpu:
    """A GPU of the machine that the reading process cannot use (sysfs shows every GPU of the host, a container
    only some), and why: its runtime does not count it, so neither do the others' indices."""

    gpu: Gpu
    why: str


@frozen
class VisibleGpu:
    """A GPU as CUDA numbers it in this process (``index`` = ``cuda:index``)."""

    index: int
    gpu: Gpu

    @property
    def label(self) -> str:
        """How its runtime names it in this process: ``cuda:0``, HIP's device ``hip:0``, a Gaudi's ``hpu:0``."""
        return f"{self.gpu.vendor.device}:{self.index}"

    def as_dict(self) -> dict[str, Any]:
        g = self.gpu
        return {
            "index": self.index,
            "vendor": str(g.vendor),
            "pci": g.pci,
            "partition": g.partition,
            "model": g.model,
            "uuid": g.uuid,
            "minor": g.minor,
            "node": g.node,
            "cpus": str(g.cpus),
            "memory_nodes": str(g.memory_nodes),
            "gpu_memory_nodes": str(g.gpu_memory_nodes),
            "source": g.source,
            "disagreement": g.disagreement,
        }


def node_from_cpus(topology: Topology, cpus: CpuSet) -> int | None:
    """The one CPU node that holds the local CPUs (numa_node = -1 on some firmware)."""
    if not cpus:
        return None
    holders = [n for n in topology.cpu_nodes if n.cpus & cpus]
    if len(holders) == 1:
        return holders[0].id
    # Local CPUs spanning several nodes mean the kernel knows no single home.
    return None


def device_locality(topology: Topology, host: Host, folder: str,
                    warnings: list[str]) -> tuple[int | None, CpuSet, int | None]:
    """A PCI device's CPU node, local online CPUs and the node its firmware names (``numa_node``).

    The firmware's node when it is a CPU node; else the one node holding the
    local CPUs (``numa_node`` is -1 on some firmware); no local online CPU
    means the node's CPUs. GPUs and NICs are read by this one rule.
    """
    cpus = _local_cpus(host, folder, warnings)
    firmware_node = node = decimal(host.read(f"{folder}/numa_node"))
    if node is not None and (node < 0 or not any(n.id == node and n.cpus for n in topology.nodes)):
        node = None
    if node is None:
        node = node_from_cpus(topology, cpus & topology.online)
    if not cpus & topology.online and node is not None:
        cpus = topology.node(node).cpus
    return node, cpus & topology.online, firmware_node


def _local_cpus(host: Host, folder: str, warnings: list[str]) -> CpuSet:
    # The mask first, as hwloc reads it: the kernel prints both from one mask, and where a
    # hand-edited capture has them disagree, hwloc's answer is the mask's.
    for name, parse in (("local_cpus", CpuSet.parse_mask), ("local_cpulist", CpuSet.parse)):
        text = host.read(f"{folder}/{name}")
        if text is not None:
            try:
                return parse(text)
            except ValueError as exc:
                warnings.append(f"{folder}/{name}: {exc}")
    return CpuSet()


def indices(count: int, whose: str = "this machine's") -> str:
    """The entries a visibility list could have named: ``this machine's GPUs: 0-7, or GPU-<uuid>``."""
    return f"{whose} GPUs: 0-{count - 1}, or GPU-<uuid>" if count > 1 else f"{whose} GPU: 0, or GPU-<uuid>"


def list_end(variable: str, entry: str, why: str, hint: str | None, notes: list[str]) -> str:
    """The note for the entry that ends a visibility list (CUDA's, ROCm's and Gaudi's lists all end at their
    first bad entry), added to ``notes``: the variable, the entry, why, and what it could have named."""
    cut = f"{variable} entry {quoted(entry)} {why}: the list ends before it" + (f" ({hint})" if hint else "")
    notes.append(cut)
    return cut
