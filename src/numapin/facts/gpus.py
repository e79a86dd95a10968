"""GPU inventory and locality, and the GPU runtime's view of which GPUs a process sees.

One model of a GPU for every vendor (:mod:`numapin.facts.gpu`); NVIDIA's GPUs
are read here, AMD's in :mod:`numapin.facts.rocm` and Intel Gaudis in
:mod:`numapin.facts.gaudi` (each imported only where the PCI bus shows one),
and each vendor's rules decide which of its devices a process sees.

The inventory comes from the filesystem root alone (PCI devices in sysfs and
the NVIDIA driver's ``proc/driver/nvidia/gpus``); NVML, when the ``nvml`` extra
is installed and a driver answers on the live machine, adds its own answer and
any disagreement is reported. Devices are always looked up by PCI bus id or
UUID, never by an NVML index, because NVML indices ignore
``CUDA_VISIBLE_DEVICES``.

CUDA's device order: with ``CUDA_DEVICE_ORDER=PCI_BUS_ID`` devices are ordered
by PCI address. The default, ``FASTEST_FIRST``, puts faster devices first and
breaks ties by PCI address, so on a host of identical GPUs (every host numapin
targets) it is the PCI order too; when the models differ numapin still uses
PCI order and warns that the default order is ambiguous.

A host with GPUs of two vendors: a process drives one vendor's (its runtime's),
``NUMAPIN_ACCELERATOR`` names which; unset, the vendor with more GPUs (an
accelerator host with a small display card of another make), and where both
have as many, no GPU is taken for the process: the choice would be a guess.
"""

from __future__ import annotations

import os

from ..base.environment import (
    ACCELERATOR,
    CUDA_DEVICE_ORDER,
    CUDA_VISIBLE_DEVICES,
    HABANA_VISIBLE_MODULES,
    HIP_VISIBLE_DEVICES,
    HLS_MODULE_ID,
    ROCR_VISIBLE_DEVICES,
)
from ..base.errors import UsageError, quoted
from ..base.frozen import Later, field, frozen, replace
from ..base.logger import log
from ..base.text import counted, decimal, plural
from ..cpuset import CpuSet
from . import pci as pci_address
from .glance import (
    ACCELERATORS,
    accelerator,
    load_nvml,
    nvidia_driver_loaded,
    nvidia_usable,
    render_node_absent,
    shows_drivers,
)
from .gpu import (
    Gpu,
    HiddenGpu,
    NoGpuVisible,
    NvmlError,
    UnknownGpu,
    Vendor,
    VisibleGpu,
    device_locality,
    indices,
    list_end,
    node_from_cpus,
)
from .host import Host
from .topology import Topology

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing at run time (mypy knows the name)
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence
    from typing import Any

__all__ = [
    "Gpu",
    "Inventory",
    "NoGpuVisible",
    "NvmlError",
    "UnknownGpu",
    "Vendor",
    "VisibleGpu",
    "in_view",
    "read_gpus",
    "visible_gpus",
]



@frozen
class Inventory:
    """Every GPU of the machine that the reading process may use: NVIDIA's in PCI order, AMD's in ROCm's order,
    Gaudis by module id; and those it may not (``hidden``: a container given some of the host's GPUs)."""

    gpus: tuple[Gpu, ...]
    nvml: str = "not used"
    warnings: tuple[str, ...] = ()
    _hidden: Later[tuple[HiddenGpu, ...]] = field(default_factory=lambda: Later(tuple))

    @property
    def hidden(self) -> tuple[HiddenGpu, ...]:
        """The GPUs of the machine the process may not use, and why. Where another driver holds one (vfio-pci,
        for a virtual machine), finding it means reading every PCI function: done on this first question,
        which a pin never asks."""
        return self._hidden.get()

    def by_pci(self, bus_id: str, partition: int | None = None) -> Gpu | None:
        wanted = pci_address.normalize(bus_id)
        return next((g for g in self.gpus if g.is_at(wanted, partition)), None)

    def of(self, vendor: Vendor) -> tuple[Gpu, ...]:
        return tuple(g for g in self.gpus if g.vendor is vendor)

    @property
    def vendors(self) -> tuple[Vendor, ...]:
        return tuple(v for v in Vendor if any(g.vendor is v for g in self.gpus))


# -- sysfs / procfs -------------------------------------------------------


def _driver_info(host: Host, bdf: str) -> dict[str, str]:
    info: dict[str, str] = {}
    for line in (host.read(f"proc/driver/nvidia/gpus/{bdf}/information") or "").splitlines():
        key, sep, value = line.partition(":")
        if sep:
            info[key.strip()] = value.strip()
    return info


def _numa_status_node(host: Host, bdf: str) -> int | None:
    for line in (host.read(f"proc/driver/nvidia/gpus/{bdf}/numa_status") or "").splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "Node":
            node = decimal(value)
            return node if node is not None and node >= 0 else None
    return None


def _hex(text: str | None) -> int | None:
    if text is None:
        return None
    try:
        return int(text.strip(), 16)
    except ValueError:
        return None


_DEVICES = "sys/bus/pci/devices"


def _functions(host: Host, driver_bdfs: set[str], *, held: bool) -> dict[str, list[str]]:
    """The PCI functions (sysfs names) of each vendor's accelerators (:data:`numapin.facts.glance.ACCELERATORS`).
    ``held``: sysfs names each function's driver, and the accelerator drivers' own lists are all there is to read
    (the runtimes use no other function); else every function's vendor is read (a capture must be read so: it
    names no driver), on a GPU host hundreds, opened inside the folder held open, the class read only of an
    accelerator vendor's function. A capture may omit ``vendor``: the NVIDIA driver's entry then tells."""
    found: dict[str, list[str]] = {name: [] for name in ACCELERATORS}
    nvidia = ACCELERATORS["nvidia"][0]
    with host.folder(_DEVICES) as devices:
        if held:
            names = sorted({n for row in ACCELERATORS.values() for n in host.listdir(f"sys/bus/pci/drivers/{row[2]}")})
        else:
            names = sorted(host.listdir(_DEVICES))
        for name in names:
            if not pci_address.split(name):
                continue
            vendor = _hex(host.read_in(devices, f"{name}/vendor"))
            if vendor is None and not held and pci_address.normalize(name) in driver_bdfs:
                vendor = nvidia
            which = accelerator(vendor, lambda: _hex(host.read_in(devices, f"{name}/class")))  # noqa: B023
            if which is not None:
                found[which].append(name)
    return found


def _sysfs_gpus(topology: Topology, host: Host, warnings: list[str], amd: list[str],
                gaudi: list[str]) -> tuple[list[Gpu], Callable[[], list[HiddenGpu]]]:
    """NVIDIA's GPUs on the PCI bus that the process may use, and how to find those it may not, in PCI order (the
    ones another driver or none holds are read only when asked: that reads every PCI function); the AMD GPU and
    Gaudi functions are added to ``amd`` and ``gaudi``."""
    driver_bdfs = {pci_address.normalize(b) for b in host.listdir("proc/driver/nvidia/gpus") if pci_address.split(b)}
    drivers = shows_drivers(host.root)
    found = _functions(host, driver_bdfs, held=drivers)
    functions = found["nvidia"]
    amd += [pci_address.normalize(name) for name in found["amd"]]
    gaudi += [pci_address.normalize(name) for name in found["gaudi"]]
    gpus = {name: _sysfs_gpu(topology, host, name, warnings) for name in functions}
    # The minors just read (each driver entry read once, and through the host, which a snapshot records).
    _, why_not = nvidia_usable(host.root, functions, held=drivers,
                               minors={name: g.minor for name, g in gpus.items() if g.minor is not None})
    hidden = [HiddenGpu(gpus[name], why_not[name]) for name in functions if name in why_not]

    def all_hidden() -> list[HiddenGpu]:
        if not drivers:
            return hidden  # every NVIDIA GPU function was read above
        host.check()  # a root removed since (a synthetic machine's folder) is an error, not a machine without them
        others = [name for name in _functions(host, driver_bdfs, held=False)["nvidia"] if name not in gpus]
        _, why = nvidia_usable(host.root, others)
        # What their files lack is no warning about the GPUs the process uses: those were read before.
        elsewhere = [HiddenGpu(_sysfs_gpu(topology, host, name, []), why[name]) for name in others if name in why]
        return sorted(hidden + elsewhere, key=lambda h: h.gpu.pci)

    return [gpus[name] for name in functions if name not in why_not], all_hidden


def _sysfs_gpu(topology: Topology, host: Host, name: str, warnings: list[str]) -> Gpu:
    """The NVIDIA GPU of the PCI function sysfs names ``name``."""
    bdf = pci_address.normalize(name)
    folder = f"sys/bus/pci/devices/{name}"
    node, cpus, firmware_node = device_locality(topology, host, folder, warnings)
    memory = _numa_status_node(host, bdf)
    gpu_memory = CpuSet()
    if memory is not None:
        if any(n.id == memory and n.memory_only for n in topology.nodes):
            gpu_memory = CpuSet([memory])
        else:
            warnings.append(f"{bdf}: driver names node {memory} for GPU memory, but it is no memory-only node")
    info = _driver_info(host, bdf)
    minor = decimal(info.get("Device Minor"))
    known = minor if minor is not None and minor >= 0 else None
    return Gpu(
        pci=bdf,
        node=node,
        cpus=cpus,
        memory_nodes=CpuSet() if node is None else CpuSet([node]),
        gpu_memory_nodes=gpu_memory,
        model=info.get("Model") or None,
        uuid=info.get("GPU UUID") or None,
        minor=known,
        firmware_node=firmware_node,
        devices=() if known is None else (f"/dev/nvidia{known}",),
    )


def in_view(inventory: Inventory, root: str) -> Inventory:
    """``inventory`` as a process whose root is ``root`` sees it (another process's: ``/proc/PID/root``, a
    container's): the GPUs its device files and driver entries leave out move to ``hidden``, by the rules the
    machine's own reading applies (sysfs, the drivers' links among it, is the host's in every view). The
    other root is only listed and asked what exists, with the minors this reading found: its owner chose
    what is in it, and a file of it opened could be any device of the host (/proc/PID/root follows links)."""
    nvidia = inventory.of(Vendor.NVIDIA)
    _, why = nvidia_usable(root, [g.pci for g in nvidia], held=True,
                           minors={g.pci: g.minor for g in nvidia if g.minor is not None})
    left = [HiddenGpu(g, why[g.pci]) for g in nvidia if g.pci in why]
    left += [HiddenGpu(g, f"its render node {g.devices[0]} is not in this view") for g in inventory.of(Vendor.AMD)
             if g.minor is not None and g.devices and render_node_absent(root, g.minor)]
    if not left:
        return inventory
    gone = {h.gpu for h in left}
    return replace(inventory, gpus=tuple(g for g in inventory.gpus if g not in gone),
                   _hidden=Later(lambda: (*inventory.hidden, *left)))


# -- NVML -----------------------------------------------------------------


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _nvml_enrich(nvml: Any, topology: Topology, gpus: list[Gpu], warnings: list[str]) -> tuple[list[Gpu], str]:
    try:
        nvml.nvmlInit()
    except Exception as exc:  # NVMLError, OSError: no driver is a normal case here
        return gpus, f"unavailable ({exc})"
    try:
        words = -(-(topology.possible.last() + 1 if topology.possible else 1) // 64)
        node_words = -(-(max((n.id for n in topology.nodes), default=0) + 1) // 64)
        if not gpus:
            # sysfs showed nothing (a very bare container): list NVML's devices
            # and key them by bus id from then on.
            for index in range(nvml.nvmlDeviceGetCount()):
                handle = nvml.nvmlDeviceGetHandleByIndex(index)
                bus = pci_address.normalize(_text(nvml.nvmlDeviceGetPciInfo(handle).busId))
                gpus.append(Gpu(pci=bus, node=None, cpus=CpuSet(), memory_nodes=CpuSet(), source="nvml"))
            gpus.sort(key=lambda g: g.pci)
        enriched = []
        for gpu in gpus:
            handle = nvml.nvmlDeviceGetHandleByPciBusId(gpu.pci)
            cpus = CpuSet.from_words(list(nvml.nvmlDeviceGetCpuAffinityWithinScope(
                handle, words, nvml.NVML_AFFINITY_SCOPE_NODE))) & topology.online
            mems = CpuSet.from_words(list(nvml.nvmlDeviceGetMemoryAffinity(
                handle, node_words, nvml.NVML_AFFINITY_SCOPE_NODE)))
            # NVML can list GPU-memory nodes as memory affinity; host memory
            # belongs on CPU nodes, so keep those apart.
            gpu_mems = CpuSet(n.id for n in topology.memory_only_nodes if n.id in mems)
            host_mems = mems - gpu_mems
            notes = []
            if gpu.source == "sysfs" and gpu.cpus and cpus != gpu.cpus:
                notes.append(f"NVML cpus {cpus} vs sysfs {gpu.cpus}")
            if gpu.source == "sysfs" and gpu.memory_nodes and host_mems and host_mems != gpu.memory_nodes:
                notes.append(f"NVML memory nodes {host_mems} vs sysfs {gpu.memory_nodes}")
            node = gpu.node if gpu.node is not None else node_from_cpus(topology, cpus)
            disagreement = "; ".join(notes) or None
            if disagreement:
                warnings.append(f"{gpu.pci}: NVML and sysfs disagree: {disagreement}")
            enriched.append(replace(
                gpu,
                node=node,
                # sysfs stays the reference where it answered; NVML fills gaps.
                cpus=gpu.cpus or cpus,
                memory_nodes=gpu.memory_nodes or host_mems,
                gpu_memory_nodes=gpu.gpu_memory_nodes or gpu_mems,
                model=gpu.model or _text(nvml.nvmlDeviceGetName(handle)),
                uuid=gpu.uuid or _text(nvml.nvmlDeviceGetUUID(handle)),
                source="nvml" if gpu.source == "nvml" else "sysfs+nvml",
                disagreement=disagreement,
            ))
        return enriched, "used"
    except Exception as exc:  # a driver that answers init but fails a query
        warnings.append(f"NVML query failed: {exc}")
        return gpus, f"failed ({exc})"
    finally:
        try:
            nvml.nvmlShutdown()
        except Exception:  # a shutdown that fails leaves nothing to undo
            pass


def sysfs_gaps(root: str, gpus: list[Gpu]) -> list[str]:
    """What sysfs and the driver's entries left untold of the NVIDIA GPUs ``gpus`` found under ``root``, which NVML
    could tell: a GPU's UUID, its CPUs or node; every GPU, where none was found but the driver is loaded."""
    if not gpus:
        return ["no GPU in sysfs, but the NVIDIA driver is loaded"] if nvidia_driver_loaded(root) else []
    gaps = []
    for gpu in gpus:
        untold = [name for name, missing in (("UUID", gpu.uuid is None), ("CPUs", not gpu.cpus),
                                             ("node", gpu.node is None)) if missing]
        if untold:
            gaps.append(f"{gpu.pci}: no {' or '.join(untold)}")
    return gaps


def read_gpus(topology: Topology, *, nvml: Any = None, journal: list[str] | None = None) -> Inventory:
    """The GPUs of the machine that ``topology`` was read from.

    ``nvml``: None = NVML, on the live machine when installed, only to fill what sysfs left untold
    (:func:`sysfs_gaps`): a pin where sysfs told everything never loads it (its import alone costs three
    interpreter starts, and the driver's initialisation more); True = NVML there, to check sysfs's answer too
    (``numapin show``); False = never; an object = that module (or a stand-in implementing the calls used),
    always.
    """
    host = Host(topology.root, journal)
    warnings: list[str] = []
    amd_functions: list[str] = []
    gaudi_functions: list[str] = []
    gpus, nvidia_hidden = _sysfs_gpus(topology, host, warnings, amd_functions, gaudi_functions)
    amd_hidden: list[HiddenGpu] = []
    others: list[Gpu] = []
    if amd_functions or host.listdir("sys/class/kfd"):
        from .rocm import read_amd  # imported only where an AMD GPU may be: most hosts have none

        others += read_amd(topology, host, amd_functions, warnings, amd_hidden)
    if gaudi_functions:
        from .gaudi import read_gaudi

        others += read_gaudi(topology, host, gaudi_functions, warnings)
    module = None
    status = "not installed"
    if nvml is None and not sysfs_gaps(host.root, gpus):
        status = "not needed: sysfs told everything"
    elif nvml in (None, True):
        module = load_nvml() if host.is_live else None
    elif nvml is not False:
        module = nvml
    if module is not None:
        gpus, status = _nvml_enrich(module, topology, gpus, warnings)
    inventory = Inventory((*sorted(gpus, key=lambda g: g.pci), *others), status, tuple(warnings),
                          Later(lambda: (*nvidia_hidden(), *amd_hidden)))
    if journal is not None:
        inventory._hidden.get()  # now, while the journal is kept: a capture holds every file a question reads
    return inventory


# -- CUDA_VISIBLE_DEVICES -------------------------------------------------


@frozen
class _Resolution:
    visible: tuple[VisibleGpu, ...]
    notes: tuple[str, ...] = field(default=())
    cut: str | None = None
    """Why the visibility variables show fewer GPUs than they list (or none): the entry that ended one, or emptiness."""
    vendor: Vendor | None = None
    """Whose GPUs the process drives (None where a host of two vendors leaves it open)."""


#: Variables only one vendor's runtime reads: set, they say the process drives that vendor's devices.
_ONLY = {Vendor.AMD: (ROCR_VISIBLE_DEVICES, HIP_VISIBLE_DEVICES),
         Vendor.GAUDI: (HABANA_VISIBLE_MODULES, HLS_MODULE_ID)}


def choose_vendor(inventory: Inventory, environ: Mapping[str, str]) -> tuple[Vendor | None, str | None]:
    """Whose GPUs a process with ``environ`` drives; ``(None, why)`` where that cannot be told."""
    named = environ.get(ACCELERATOR, "").strip().lower()
    if named:
        if named not in {str(v) for v in Vendor}:
            raise UsageError(f"{ACCELERATOR}={quoted(named)}: name whose GPUs the process drives, one of "
                             + ", ".join(str(v) for v in Vendor), value=named)
        return Vendor(named), None
    vendors = inventory.vendors
    if len(vendors) <= 1:
        return (vendors[0] if vendors else Vendor.NVIDIA), None
    hinted = [v for v in vendors if any(environ.get(name) is not None for name in _ONLY.get(v, ()))]
    if len(hinted) == 1:
        return hinted[0], None
    counts = {v: len(inventory.of(v)) for v in vendors}
    top = [v for v in vendors if counts[v] == max(counts.values())]
    if len(top) == 1:
        return top[0], None
    held = " and ".join(counted(counts[v], v.maker if v is Vendor.GAUDI else f"{v.maker} GPU") for v in vendors)
    return None, (f"this host has {held}, as many of each: set {ACCELERATOR}=" + " or ".join(map(str, vendors))
                  + " to say whose this process drives")


def _cuda_order(gpus: Sequence[Gpu], environ: Mapping[str, str], notes: list[str]) -> list[Gpu]:
    order = environ.get(CUDA_DEVICE_ORDER, "FASTEST_FIRST").strip().upper()
    gpus = sorted(gpus, key=lambda g: g.pci)
    if order != "PCI_BUS_ID" and len({g.model for g in gpus}) > 1:
        notes.append(
            "GPUs of different models under CUDA_DEVICE_ORDER=FASTEST_FIRST: CUDA's order may differ "
            "from PCI order, which numapin uses; set CUDA_DEVICE_ORDER=PCI_BUS_ID to make it certain"
        )
    return gpus


def _match_uuid(entry: str, gpus: Sequence[Gpu]) -> Gpu | None:
    matches = [g for g in gpus if g.uuid and g.uuid.lower().startswith(entry.lower())]
    if len(matches) > 1:
        raise UnknownGpu(
            f"CUDA_VISIBLE_DEVICES entry {entry!r} is ambiguous: it matches "
            + ", ".join(f"{g.uuid} ({g.pci})" for g in matches), value=entry
        )
    return matches[0] if matches else None


def _mig_parent(entry: str, gpus: Sequence[Gpu], nvml: Any | None) -> Gpu:
    # Old CUDA spelling: MIG-GPU-<parent uuid>/<gi>/<ci> names its parent itself.
    if entry.upper().startswith("MIG-GPU-"):
        parent = _match_uuid(entry[4:].split("/", 1)[0], gpus)
        if parent is not None:
            return parent
    if nvml is not None:
        try:
            nvml.nvmlInit()
            try:
                mig = nvml.nvmlDeviceGetHandleByUUID(entry)
                parent_handle = nvml.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(mig)
                bus = pci_address.normalize(_text(nvml.nvmlDeviceGetPciInfo(parent_handle).busId))
            finally:
                nvml.nvmlShutdown()
        except Exception as exc:
            raise NvmlError(f"MIG device {entry!r}: NVML cannot name its parent GPU ({exc})") from exc
        parent = next((g for g in gpus if g.pci == bus), None)
        if parent is not None:
            return parent
        raise UnknownGpu(f"MIG device {entry!r}: its parent GPU {bus} is not in the inventory", value=entry)
    raise UnknownGpu(f"MIG device {entry!r}: its parent GPU cannot be told without NVML (install numapin[nvml])",
                     value=entry)


def resolve_visible(
    inventory: Inventory, environ: Mapping[str, str], *, nvml: Any | None = None
) -> _Resolution:
    notes: list[str] = []
    vendor, undecided = choose_vendor(inventory, environ)
    if vendor is None:
        notes.append(str(undecided))
        return _Resolution((), tuple(notes), undecided)
    if vendor is not Vendor.NVIDIA:  # each other vendor's rules live with its reader, imported where it has GPUs
        if vendor is Vendor.AMD:
            from .rocm import rocm_visible as rules
        else:
            from .gaudi import gaudi_visible as rules
        shown, other_cut = rules(inventory.of(vendor), environ, notes)
        return _Resolution(tuple(VisibleGpu(i, g) for i, g in enumerate(shown)), tuple(notes), other_cut, vendor)
    gpus = _cuda_order(inventory.of(vendor), environ, notes)
    value = environ.get(CUDA_VISIBLE_DEVICES)
    if value is None:
        return _Resolution(tuple(VisibleGpu(i, g) for i, g in enumerate(gpus)), tuple(notes), vendor=vendor)
    chosen: list[Gpu] = []
    cut = f"CUDA_VISIBLE_DEVICES is empty: it hides every GPU ({len(gpus)} found)" if not value.strip() else None
    for raw in value.split(","):
        entry = raw.strip()
        gpu: Gpu | None = None
        if entry.isascii() and entry.isdigit():
            # No machine has 10**9 GPUs; a longer number names none (and int() refuses 4,300 digits).
            index = int(entry) if len(entry) < 10 else len(gpus)
            gpu = gpus[index] if index < len(gpus) else None
        elif entry.upper().startswith("GPU-"):
            gpu = _match_uuid(entry, gpus)
        elif entry.upper().startswith("MIG-"):
            gpu = _mig_parent(entry, gpus, nvml)
        # CUDA's rule: an invalid entry ends the list; what came before stays
        # visible. A device named twice counts as invalid the second time.
        if gpu is None or gpu in chosen:
            why = "names a GPU already listed" if gpu is not None else "names no GPU of this machine"
            if entry:
                cut = list_end(CUDA_VISIBLE_DEVICES, entry, why, indices(len(gpus)) if gpus else None, notes)
            break
        chosen.append(gpu)
    return _Resolution(tuple(VisibleGpu(i, g) for i, g in enumerate(chosen)), tuple(notes), cut, vendor)


def visible_gpus(
    inventory: Inventory, environ: Mapping[str, str] | None = None, *, nvml: Any | None = None
) -> tuple[VisibleGpu, ...]:
    """The GPUs the GPU runtime shows this process, in its order (index = ``cuda:N``, or HIP's device N).

    Notes about the resolution (an entry that ends the list, an ambiguous
    device order) are logged once at warning level.
    """
    resolution = resolve_visible(inventory, os.environ if environ is None else environ, nvml=nvml)
    for note in resolution.notes:
        log.warning("%s", note)
    return resolution.visible


def select_gpu(visible: Sequence[VisibleGpu], index: int, *, found: int | None = None,
               cut: str | None = None) -> VisibleGpu:
    """The visible GPU ``index``; an UnknownGpu listing the visible GPUs otherwise.

    ``found`` (the GPUs of the machine) and ``cut`` (why CUDA_VISIBLE_DEVICES
    shows fewer) let the error name the exact cause rather than a general one.
    """
    if isinstance(index, bool) or not isinstance(index, int):  # "0" or True: the caller's mistake, whatever is visible
        raise UnknownGpu(f"a GPU is named by its index, an int (CUDA's logical index), not {quoted(index)}",
                         value=index)
    if not visible:
        if cut:
            raise NoGpuVisible(f"no GPU is visible to this process: {cut}")
        if found == 0:
            raise NoGpuVisible("no GPU is visible to this process: none found on this machine (numapin looks for "
                               "NVIDIA and AMD GPUs and Intel Gaudis on the PCI bus, under sys/bus/pci, and in "
                               "AMD's KFD topology)")
        raise NoGpuVisible("no GPU is visible to this process (none found, or its visibility variables hide them all)")
    if not 0 <= index < len(visible):
        listing = ", ".join(f"{v.index}: {v.gpu.where}" for v in visible)
        raise UnknownGpu(f"GPU {index!r} is not visible; visible {plural(len(visible), 'GPU is', 'GPUs are')} "
                         f"{listing}" + (f" ({cut})" if cut else ""), value=index)
    return visible[index]
