"""The machine, read once per root, and a process's view of it (the GPUs its ``CUDA_VISIBLE_DEVICES`` shows).

:class:`Machine` holds what does not depend on any process: the topology and
every GPU, read once per root; its CPU kinds and NICs are read on first use.
:class:`Facts` is one process's view of a machine: which of its GPUs the
process sees, in CUDA's order, resolved on top of the machine without reading
it again. ``numapin ps`` over workers with any number of distinct
``CUDA_VISIBLE_DEVICES`` reads the machine once.

One cache (machines by root, each with its views), one lock, one fork policy:
a forked child reads afresh; :func:`forget` (``numapin.refresh()``) drops it.
"""

from __future__ import annotations

import _thread  # threading's locks themselves, without threading's import
import os

from ..base.choices import parse_choice
from ..base.environment import CUDA_VISIBLE_DEVICES, FSROOT, PRIORITY_CORES
from ..base.errors import UsageError
from ..base.frozen import field, frozen
from ..cpuset import CpuSet
from .glance import load_nvml, visibility
from .host import Host, resolve_root
from .inventory import Inventory, Vendor, VisibleGpu, in_view, read_gpus, resolve_visible, select_gpu
from .kinds import CpuKinds, PriorityRule, read_kinds
from .topology import Topology, read_topology

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

    from .network import Network

__all__ = ["Facts", "Machine", "cached", "forget", "gather", "machine", "priority_rule", "read_machine", "seen_by"]


class Machine:
    """One machine under one root: its topology and GPUs, read once; its CPU kinds and NICs on first use."""

    def __init__(self, topology: Topology, inventory: Inventory) -> None:
        self.topology = topology
        self.inventory = inventory
        self._kinds: dict[PriorityRule, CpuKinds] = {}
        self._network: Network | None = None
        #: The views of this machine processes asked for, by their GPU visibility variables and priority rule.
        self.views: dict[tuple[tuple[str | None, ...], PriorityRule], Facts] = {}

    def kinds(self, rule: PriorityRule = PriorityRule.KERNEL) -> CpuKinds:
        """The CPU kinds, fastest first (a pin without ``reserve`` or ``cores`` never asks)."""
        found = self._kinds.get(rule)
        if found is None:
            found = self._kinds[rule] = read_kinds(self.topology, rule=rule)
        return found

    def network(self) -> Network:
        """The NICs and each GPU's relation to them."""
        if self._network is None:
            from .network import read_network  # imported on first use: most pins never ask

            self._network = read_network(self.topology, self.inventory.gpus)
        return self._network

    def view(self, environ: Mapping[str, str], *, nvml: Any = None, seen_from: str | None = None) -> Facts:
        """The machine as a process with ``environ`` sees it (its visible GPUs); the machine is not read again.
        ``seen_from``: that process's root, where it is not this one's (a container's): the GPUs it was given."""
        priority = priority_rule(environ)
        inventory = self.inventory if seen_from is None else in_view(self.inventory, seen_from)
        key = (tuple(environ.get(name) for name in visibility()), priority)
        # A view through another root is not kept: a scan would keep one for every process it met.
        kept = nvml is None and inventory is self.inventory
        found = self.views.get(key) if kept else None
        if found is None:
            # MIG entries of CUDA_VISIBLE_DEVICES can only be traced to their parent GPU through NVML.
            module = nvml if nvml not in (None, False, True) else None
            if nvml in (None, True) and "MIG-" in environ.get(CUDA_VISIBLE_DEVICES, "").upper() \
                    and self.topology.live:
                module = load_nvml()
            resolution = resolve_visible(inventory, environ, nvml=module)
            found = Facts(self.topology, inventory, resolution.visible,
                          resolution.notes + inventory.warnings, resolution.cut, priority, self,
                          resolution.vendor)
            if kept:
                self.views[key] = found
        return found


@frozen
class Facts:
    """What numapin knows of a machine as one process sees it: its topology, its GPUs, those it may use."""

    topology: Topology
    """CPUs, cores, caches, packages, NUMA nodes and the cgroup cpuset (:func:`numapin.read_topology`)."""
    inventory: Inventory
    visible: tuple[VisibleGpu, ...]
    """The GPUs this process sees, in its runtime's order (``CUDA_VISIBLE_DEVICES``; ROCm's variables on an AMD
    host): ``visible[i].index == i``."""
    notes: tuple[str, ...] = ()
    cut: str | None = None
    """Why the visibility variables show fewer GPUs than they list, or none (also among the notes)."""
    priority: PriorityRule = PriorityRule.KERNEL
    """What besides the kernel decides the CPU kinds (``NUMAPIN_PRIORITY_CORES``)."""
    machine: Machine | None = field(default=None, compare=False)
    """The machine this is a view of: where its CPU kinds and NICs are read, once."""
    vendor: Vendor | None = Vendor.NVIDIA
    """Whose GPUs the process drives (None where a host of two vendors' GPUs leaves that open)."""

    def gpu(self, index: int) -> VisibleGpu:
        """The visible GPU ``index``; when there is none, the error names the exact cause."""
        return select_gpu(self.visible, index, found=len(self.inventory.gpus), cut=self.cut)

    def vendor_at(self, pci: str | None) -> str | None:
        """The vendor (a row of ``glance.ACCELERATORS``) of the machine's GPU at ``pci``; None for no GPU there."""
        return next((str(g.vendor) for g in self.inventory.gpus if pci and g.pci == pci), None)

    def _machine(self) -> Machine:
        return self.machine if self.machine is not None else Machine(self.topology, self.inventory)

    def kinds(self) -> CpuKinds:
        """The machine's CPU kinds, fastest first: read on first use (a pin without ``reserve`` never asks)."""
        return self._machine().kinds(self.priority)

    def network(self) -> Network:
        """The machine's NICs and each GPU's relation to them: read on first use."""
        return self._machine().network()


def seen_by(facts: Facts, seen_from: str | None, environ: Mapping[str, str]) -> Facts:
    """``facts`` as a process sees the machine: where its root is not this one's (a container's: ``seen_from``,
    the path its files are seen through, :func:`numapin.facts.procfs.foreign_root`), its GPU indices count the
    GPUs it was given, not every one sysfs shows (:func:`numapin.facts.inventory.in_view`)."""
    if seen_from is None or facts.machine is None:
        return facts
    return facts.machine.view(environ, seen_from=seen_from)


def read_machine(root: str | os.PathLike[str] | None = None, *, nvml: Any = None) -> Machine:
    """Read the machine under ``root`` afresh (its topology and GPUs)."""
    topology = read_topology(root)
    return Machine(topology, read_gpus(topology, nvml=nvml))


def gather(
    root: str | os.PathLike[str] | None = None,
    environ: Mapping[str, str] | None = None,
    *,
    nvml: Any = None,
) -> Facts:
    """Read the machine under ``root`` afresh and resolve ``CUDA_VISIBLE_DEVICES`` from ``environ``; ``nvml`` as
    :func:`numapin.facts.inventory.read_gpus` takes it (True: NVML checks sysfs's answer, as ``numapin show`` asks)."""
    env = os.environ if environ is None else environ
    priority_rule(env)  # a bad value is the caller's to hear before anything is read
    return read_machine(root, nvml=nvml).view(env, nvml=nvml)


def priority_rule(environ: Mapping[str, str]) -> PriorityRule:
    """``NUMAPIN_PRIORITY_CORES`` (unset or empty: the kernel's kinds alone); UsageError naming it otherwise."""
    try:
        return parse_choice(PriorityRule, environ.get(PRIORITY_CORES) or PriorityRule.KERNEL, "priority-core rule")
    except UsageError as exc:
        raise UsageError(f"{PRIORITY_CORES}: {exc}", value=exc.value) from None


# -- the one cache: machines by root -------------------------------------------------

_MACHINES: dict[str, Machine] = {}
_LOCK = [_thread.allocate_lock()]


def cached(root: str | os.PathLike[str] | None = None, environ: Mapping[str, str] | None = None) -> Facts:
    """The facts of the machine under ``root`` as ``environ``'s CUDA variables show it, read on first use.

    Every part of numapin that needs facts in this process asks here (pins,
    ``numapin exec``, the start-up hook, the judge): the machine is read once
    per root, whatever the views asked of it, and a pin with cached facts opens
    no file under the root. :func:`forget` drops them.
    """
    env = os.environ if environ is None else environ
    key = resolve_root(root)
    with _LOCK[0]:
        found = _MACHINES.get(key)
        if found is None:
            found = _MACHINES[key] = read_machine(root)
        return found.view(env)


def forget() -> None:
    """Drop the cached facts (after CPU hotplug or a change of the cgroup cpuset)."""
    with _LOCK[0]:
        _MACHINES.clear()


def _after_fork_in_child() -> None:
    # A fresh lock (another thread may have held it at fork time); a child reads its facts afresh.
    _LOCK[0] = _thread.allocate_lock()
    _MACHINES.clear()


os.register_at_fork(after_in_child=_after_fork_in_child)


def machine(root: str | os.PathLike[str] | None = None, environ: Mapping[str, str] | None = None) -> Facts:
    """This machine as numapin sees it, in one call: its topology and the GPUs visible to this process.

    The same facts a pin acts on, read once per process (:func:`numapin.refresh`
    forgets them). ``root`` stands in for ``/``; ``environ`` (default this
    process's) gives ``CUDA_VISIBLE_DEVICES``.
    """
    return cached(root, environ)


def this_host_cpus() -> CpuSet:
    """The CPUs of the host this process runs on (its live ``/sys``, whatever root the facts are read from).

    A machine read from another root (``--machine``, ``NUMAPIN_FSROOT``) is this host only where its CPUs are
    among these: ``pair`` on a host of two CPUs or more; ``dgx-h100`` on a laptop is a rehearsal, which can be
    planned and judged, never pinned for real."""
    return CpuSet.parse_or_none(Host.at("/").read("sys/devices/system/cpu/online") or "") \
        or CpuSet(os.sched_getaffinity(0))


def rehearsal(topology: Topology, environ: Mapping[str, str], *, typed: str | None = None) -> str | None:
    """Why a machine (its ``topology``) is a rehearsal here, in the words of what the user gave (``typed``: the
    option, ``--machine NAME``; else ``NUMAPIN_FSROOT`` from ``environ``): its CPUs are not this host's, so it is
    planned and judged, never pinned. None for this host (the live root, or ``pair``: its CPUs are this host's)."""
    if topology.live:
        return None
    here = this_host_cpus()
    if topology.online <= here:
        return None
    from .synthetic import written

    name = written(topology.root)
    given = environ.get(FSROOT)
    what = typed or (f"{FSROOT}={given}" + (f" (the synthetic machine {name})" if name else "") if given
                     else f"the machine under {topology.root}")
    return (f"{what} is not this host (its CPUs {topology.online}, this host's {here}): a rehearsal, which plans and "
            "judges (numapin exec --dry-run shows what would be done) but pins nothing here; --machine pair is this "
            "host seen as two nodes")


def this_host_nodes() -> CpuSet:
    """The NUMA nodes with memory of the host this process runs on (its live ``/sys``): where a page of its can
    lie. A placement naming another node (a rehearsal machine's, or ``pair``'s second node on a one-node host)
    cannot be judged by where pages lie."""
    return CpuSet.parse_or_none(Host.at("/").read("sys/devices/system/node/has_memory") or "") \
        or CpuSet.parse_or_none(Host.at("/").read("sys/devices/system/node/online") or "") or CpuSet([0])
