"""Intel Gaudi accelerators (the ``habanalabs`` driver): found from sysfs alone, and which a process acquires.

A Gaudi is a PCI function of Habana Labs' vendor id (its row of :data:`numapin.facts.glance.ACCELERATORS`; the
driver's table names Gaudi ``0x1000``, Gaudi 2 ``0x1020``, Gaudi 3 ``0x1060`` and their variants). Its NUMA node
and local CPUs are the PCI device's, as for every GPU. Its device file is ``/dev/accel/accelN``
(``sys/class/accel/accelN`` leads to the function; before the accel subsystem, ``/dev/hlN`` under
``sys/class/habanalabs``).

Intel's runtime selects a Gaudi by its *module id* (the OAM slot its firmware reports), not by a place in a list
(Intel Gaudi documentation, "Gaudi-to-process Assignment"): with ``HABANA_VISIBLE_MODULES=m0,m1,...`` local rank
i acquires module m_i; unset, local rank i acquires module i; ``HLS_MODULE_ID=m`` makes the process acquire
module m. The driver shows the module id in sysfs (``module_id`` on the PCI function, since Linux 6.8); where it
does not, numapin does not guess which module a device is: it lists the Gaudis in PCI order, says so, and cannot
resolve either variable. The documentation asks for unique module ids of this host and says nothing of other
entries; numapin ends the list at the first entry that is not one, as CUDA does, and says so.
"""

from __future__ import annotations

from ..base.environment import HABANA_VISIBLE_MODULES, HLS_MODULE_ID
from ..base.text import decimal
from ..cpuset import CpuSet
from . import pci as pci_address
from .gpu import Gpu, Vendor, device_locality, list_end
from .host import Host
from .topology import Topology

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence
    from typing import Any

    from .gpu import HiddenGpu, Reading

__all__ = ["MODELS", "gaudi_visible", "in_view", "read", "read_gaudi", "visible"]

#: Model names by PCI device id, from the habanalabs driver's table of ids.
MODELS = {0x1000: "Intel Gaudi", 0x1001: "Intel Gaudi", 0x1010: "Intel Gaudi", 0x1011: "Intel Gaudi",
          0x1020: "Intel Gaudi 2", 0x1021: "Intel Gaudi 2", 0x1060: "Intel Gaudi 3", 0x1062: "Intel Gaudi 3",
          0x1063: "Intel Gaudi 3"}


def _device_files(host: Host) -> dict[str, str]:
    """PCI address -> the device file the driver made for it (``/dev/accel/accel0``, ``/dev/hl0``)."""
    found: dict[str, str] = {}
    for folder, prefix in (("sys/class/accel", "accel"), ("sys/class/habanalabs", "hl")):
        for name in host.listdir(folder):
            target = host.resolve(f"{folder}/{name}/device") if name.startswith(prefix) else None
            if target is not None:
                device = f"/dev/accel/{name}" if prefix == "accel" else f"/dev/{name}"
                found.setdefault(target.rsplit("/", 1)[-1], device)
    return found


def _device_id(host: Host, folder: str) -> int:
    try:
        return int((host.read(f"{folder}/device") or "").strip(), 16)
    except ValueError:
        return -1


def read_gaudi(topology: Topology, host: Host, functions: Sequence[str], warnings: list[str]) -> list[Gpu]:
    """The Gaudis of ``functions`` (the PCI functions of Habana's vendor id), by module id where sysfs
    shows one, else in PCI order."""
    files = _device_files(host)
    gaudis = []
    for pci in sorted(functions):
        folder = f"sys/bus/pci/devices/{pci}"
        node, cpus, firmware_node = device_locality(topology, host, folder, warnings)
        module = decimal(host.read(f"{folder}/module_id"))
        gaudis.append(Gpu(pci=pci, node=node, cpus=cpus, memory_nodes=CpuSet() if node is None else CpuSet([node]),
                          model=MODELS.get(_device_id(host, folder), "Intel Gaudi"), firmware_node=firmware_node,
                          vendor=Vendor.GAUDI, devices=(files[pci],) if pci in files else (),
                          ordinal=module if module is not None and module >= 0 else None))
    if gaudis and any(g.ordinal is None for g in gaudis):
        warnings.append("a Gaudi shows no module_id in sysfs (a habanalabs driver before Linux 6.8): which module "
                        "each is stays unknown, so HABANA_VISIBLE_MODULES and local ranks cannot be matched to them")
        return gaudis
    return sorted(gaudis, key=lambda g: (g.ordinal, g.pci))


def gaudi_visible(gpus: Sequence[Gpu], environ: Mapping[str, str], notes: list[str]) -> tuple[list[Gpu], str | None]:
    """The Gaudis a process with ``environ`` takes in turn (index i: local rank i's), and why the variables
    give fewer than they list (None when they do not)."""
    one = environ.get(HLS_MODULE_ID)
    name, value = (HLS_MODULE_ID, one) if one is not None else (HABANA_VISIBLE_MODULES,
                                                                 environ.get(HABANA_VISIBLE_MODULES))
    by_module: dict[int, Gpu] = {g.ordinal: g for g in gpus if g.ordinal is not None}
    if value is None:
        return list(gpus), None
    if len(by_module) < len(gpus):
        cut = f"{name} names module ids, and this host's Gaudis show none in sysfs: no Gaudi can be matched"
    elif not value.strip():
        cut = f"{name} is empty: it names no Gaudi ({len(gpus)} found)"
    else:
        chosen: list[Gpu] = []
        for raw in value.split(","):
            entry = raw.strip()
            module = decimal(entry) if entry.isascii() and entry.isdigit() else None
            gaudi = None if module is None else by_module.get(module)
            if gaudi is None or gaudi in chosen:
                why = "names a module already listed" if gaudi is not None else "names no module of this host"
                return chosen, list_end(name, entry, why, "modules " + ", ".join(map(str, sorted(by_module))), notes)
            chosen.append(gaudi)
        return chosen, None
    notes.append(cut)
    return [], cut


# -- the vendor's module, as numapin.facts.inventory asks every vendor's ------------------------------------------


def read(topology: Topology, host: Host, functions: list[str], warnings: list[str], *, nvml: Any,
         scan: Callable[[], dict[str, list[str]]]) -> Reading:
    """The Gaudis (:func:`read_gaudi`) of the PCI functions sysfs shows of Habana's; every one is the process's
    to use (numapin reads no Gaudi's device file in another view yet)."""
    return read_gaudi(topology, host, [pci_address.normalize(name) for name in functions], warnings), list, None


def visible(gpus: Sequence[Gpu], environ: Mapping[str, str], notes: list[str], nvml: Any = None
            ) -> tuple[list[Gpu], str | None]:
    """:func:`gaudi_visible`, as every vendor's module answers it."""
    return gaudi_visible(gpus, environ, notes)


def in_view(gpus: Sequence[Gpu], root: str) -> list[HiddenGpu]:
    """None of the Gaudis is taken for out of another root's view: their device files are not checked there."""
    return []
