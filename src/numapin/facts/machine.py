"""Everything numapin knows about a machine, read once: topology, GPUs, CUDA's view."""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Mapping

from ..base.choices import parse_choice
from ..base.environment import CUDA_DEVICE_ORDER, CUDA_VISIBLE_DEVICES, PRIORITY_CORES
from ..base.errors import UsageError
from ..base.frozen import frozen
from .gpus import Inventory, VisibleGpu, load_nvml, read_gpus, resolve_visible, select_gpu
from .host import Host, resolve_root
from .kinds import CpuKinds, PriorityRule, cached_kinds, forget_kinds
from .topology import Topology, read_topology

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing at run time (mypy knows the name)
if TYPE_CHECKING:
    from typing import Any

    from .network import Network

__all__ = ["Facts", "cached", "forget", "gather", "machine", "priority_rule"]


@frozen
class Facts:
    """What numapin knows of a machine: its topology, its GPUs, and those this process may use."""

    topology: Topology
    """CPUs, cores, caches, packages, NUMA nodes and the cgroup cpuset (:func:`numapin.read_topology`)."""
    inventory: Inventory
    visible: tuple[VisibleGpu, ...]
    """The GPUs this process sees, in CUDA's order (``CUDA_VISIBLE_DEVICES``): ``visible[i].index == i``."""
    notes: tuple[str, ...] = ()
    cut: str | None = None
    """Why ``CUDA_VISIBLE_DEVICES`` shows fewer GPUs than it lists, or none (also among the notes)."""
    priority: PriorityRule = PriorityRule.KERNEL
    """What besides the kernel decides the CPU kinds (``NUMAPIN_PRIORITY_CORES``)."""

    def gpu(self, index: int) -> VisibleGpu:
        """The visible GPU ``index``; when there is none, the error names the exact cause."""
        return select_gpu(self.visible, index, found=len(self.inventory.gpus), cut=self.cut)

    def kinds(self) -> CpuKinds:
        """The machine's CPU kinds, fastest first: read on first use (a pin without ``reserve`` never asks)."""
        return cached_kinds(self.topology, self.priority)

    def network(self) -> Network:
        """The machine's NICs and each GPU's relation to them: read on first use."""
        from .network import cached_network  # imported on first use: most pins never ask

        return cached_network(self.topology, self.inventory.gpus)


def gather(
    root: str | os.PathLike[str] | None = None,
    environ: Mapping[str, str] | None = None,
    *,
    nvml: Any = None,
) -> Facts:
    """Read the machine under ``root`` and resolve ``CUDA_VISIBLE_DEVICES`` from ``environ``."""
    env = os.environ if environ is None else environ
    priority = priority_rule(env)
    topology = read_topology(root)
    inventory = read_gpus(topology, nvml=nvml)
    # MIG entries of CUDA_VISIBLE_DEVICES can only be traced to their parent GPU through NVML.
    module = nvml if nvml not in (None, False) else None
    if nvml is None and "MIG-" in env.get(CUDA_VISIBLE_DEVICES, "").upper() and Host(topology.root).is_live:
        module = load_nvml()
    resolution = resolve_visible(inventory, env, nvml=module)
    return Facts(topology, inventory, resolution.visible, resolution.notes + inventory.warnings, resolution.cut,
                 priority)


def priority_rule(environ: Mapping[str, str]) -> PriorityRule:
    """``NUMAPIN_PRIORITY_CORES`` (unset or empty: the kernel's kinds alone); UsageError naming it otherwise."""
    try:
        return parse_choice(PriorityRule, environ.get(PRIORITY_CORES) or PriorityRule.KERNEL, "priority-core rule")
    except UsageError as exc:
        raise UsageError(f"{PRIORITY_CORES}: {exc}", value=exc.value) from None


# -- the process's facts, read once -----------------------------------------------

_CACHE: dict[tuple[str, str | None, str | None, str | None], Facts] = {}
_LOCK = [threading.Lock()]


def cached(root: str | os.PathLike[str] | None = None, environ: Mapping[str, str] | None = None) -> Facts:
    """The facts of the machine under ``root`` as ``environ``'s CUDA variables show it, read on first use.

    Every part of numapin that needs facts in this process asks here (pins,
    ``numapin exec``, the start-up hook): the machine is read once, and a pin
    with cached facts opens no file under the root. :func:`forget` drops them.
    """
    env = os.environ if environ is None else environ
    key = (resolve_root(root), env.get(CUDA_VISIBLE_DEVICES), env.get(CUDA_DEVICE_ORDER), env.get(PRIORITY_CORES))
    with _LOCK[0]:
        found = _CACHE.get(key)
        if found is None:
            found = _CACHE[key] = gather(root, env)
        return found


def forget() -> None:
    """Drop the cached facts (after CPU hotplug or a change of the cgroup cpuset)."""
    with _LOCK[0]:
        _CACHE.clear()
    forget_kinds()
    network = sys.modules.get(f"{__package__}.network")
    if network is not None:  # read only if imported
        network.forget_network()


def _after_fork_in_child() -> None:
    # A fresh lock (another thread may have held it at fork time); a child reads its facts afresh.
    _LOCK[0] = threading.Lock()
    _CACHE.clear()


os.register_at_fork(after_in_child=_after_fork_in_child)


def machine(root: str | os.PathLike[str] | None = None, environ: Mapping[str, str] | None = None) -> Facts:
    """This machine as numapin sees it, in one call: its topology and the GPUs visible to this process.

    The same facts a pin acts on, read once per process (:func:`numapin.refresh`
    forgets them). ``root`` stands in for ``/``; ``environ`` (default this
    process's) gives ``CUDA_VISIBLE_DEVICES``.
    """
    return cached(root, environ)
