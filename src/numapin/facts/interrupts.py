"""A device's interrupts and where the kernel delivers them, read like every other fact (through ``Host``).

A PCI function's MSI and MSI-X vectors are the names in its ``msi_irqs``
folder; ``/proc/interrupts`` names each IRQ's handler (``mlx5_comp3@pci:...``,
``nvidia``) and gives those of a device without ``msi_irqs`` by its bus address.
``/proc/irq/N/smp_affinity_list`` is where the IRQ may go and
``effective_affinity_list`` (x86) where the interrupt controller sends it now.
"""

from __future__ import annotations

from ..base.frozen import frozen
from ..base.text import decimal
from ..cpuset import CpuSet
from .host import Host

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = ["Irq", "device_irqs", "running"]


@frozen
class Irq:
    """One interrupt line or vector of a device."""

    number: int
    name: str
    allowed: CpuSet | None
    """``smp_affinity_list``: the CPUs it may be delivered to (None when unreadable)."""
    effective: CpuSet | None = None
    """``effective_affinity_list``: the CPUs it is delivered to now, where the kernel says."""

    @property
    def delivered(self) -> CpuSet | None:
        """Where it lands: the effective CPUs where known, else the allowed ones."""
        return self.effective if self.effective else self.allowed


def _names(host: Host) -> dict[int, str]:
    """IRQ number → the line of ``/proc/interrupts`` after the per-CPU counts (chip, type, handler)."""
    found: dict[int, str] = {}
    for line in (host.read("proc/interrupts") or "").splitlines():
        number, colon, rest = line.partition(":")
        irq = decimal(number)
        if colon and irq is not None:
            words = rest.split()
            found[irq] = " ".join(w for w in words if not w.isdigit())
    return found


def _names_device(line: str, pci: str) -> bool:
    """Whether a handler line names the PCI function ``pci`` itself: ``mlx5_comp0@pci:0000:05:00.0`` does,
    a VMD domain's ``10000:18:00.0`` (or ``0000:18:00.01``) does not name ``0000:18:00.0``."""
    start = line.find(pci)
    while start >= 0:
        end = start + len(pci)
        before = line[start - 1] if start else " "
        after = line[end] if end < len(line) else " "
        if not (before.isalnum() or after.isalnum() or after == "."):
            return True
        start = line.find(pci, start + 1)
    return False


def _cpus(host: Host, rel: str) -> CpuSet | None:
    return CpuSet.parse_or_none(host.read(rel))


def device_irqs(host: Host, pcis: Sequence[str]) -> dict[str, tuple[Irq, ...]]:
    """Each PCI function of ``pcis`` (``0000:05:00.0``) and its interrupts by number; ``/proc/interrupts`` read once."""
    names = _names(host)
    found = {}
    for pci in pcis:
        listed = (decimal(e) for e in host.listdir(f"sys/bus/pci/devices/{pci}/msi_irqs"))
        named = {irq for irq, line in names.items() if _names_device(line, pci)}
        numbers = {n for n in listed if n is not None} | named
        found[pci] = tuple(
            Irq(irq, names.get(irq, ""), _cpus(host, f"proc/irq/{irq}/smp_affinity_list"),
                _cpus(host, f"proc/irq/{irq}/effective_affinity_list"))
            for irq in sorted(numbers)
        )
    return found


def running(host: Host, program: str) -> int | None:
    """The PID of a process whose command is ``program`` (``proc/PID/comm``), or None."""
    for name in host.listdir("proc"):
        pid = decimal(name)
        if pid is not None and (host.read(f"proc/{name}/comm") or "").strip() == program:
            return pid
    return None
