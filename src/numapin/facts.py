"""Everything numapin knows about a machine, read once: topology, GPUs, CUDA's view."""

from __future__ import annotations

import os
from collections.abc import Mapping

from .environment import CUDA_VISIBLE_DEVICES
from .gpus import Inventory, VisibleGpu, load_nvml, read_gpus, resolve_visible
from .host import Host
from .records import record
from .topology import Topology, read_topology

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing at run time (mypy knows the name)
if TYPE_CHECKING:
    from typing import Any

__all__ = ["Facts", "gather"]


@record
class Facts:
    topology: Topology
    inventory: Inventory
    visible: tuple[VisibleGpu, ...]
    notes: tuple[str, ...] = ()


def gather(
    root: str | os.PathLike[str] | None = None,
    environ: Mapping[str, str] | None = None,
    *,
    nvml: Any = None,
) -> Facts:
    """Read the machine under ``root`` and resolve ``CUDA_VISIBLE_DEVICES`` from ``environ``."""
    env = os.environ if environ is None else environ
    topology = read_topology(root)
    inventory = read_gpus(topology, nvml=nvml)
    # MIG entries of CUDA_VISIBLE_DEVICES can only be traced to their parent GPU through NVML.
    module = nvml if nvml not in (None, False) else None
    if nvml is None and "MIG-" in env.get(CUDA_VISIBLE_DEVICES, "").upper() and Host(topology.root).is_live:
        module = load_nvml()
    resolution = resolve_visible(inventory, env, nvml=module)
    return Facts(topology, inventory, resolution.visible, resolution.notes + inventory.warnings)
