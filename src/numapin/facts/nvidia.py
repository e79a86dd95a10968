"""NVIDIA GPUs: found from sysfs and the NVIDIA driver's entries (``proc/driver/nvidia/gpus``), NVML's word on
them where the ``nvml`` extra is installed and a driver answers, and which of them CUDA shows a process.

The inventory comes from the filesystem root alone; NVML, on the live machine, adds its own answer and any
disagreement is reported (or, where sysfs leaves something untold, fills it). Devices are always looked up by PCI
bus id or UUID, never by an NVML index, because NVML indices ignore ``CUDA_VISIBLE_DEVICES``.

CUDA's device order: with ``CUDA_DEVICE_ORDER=PCI_BUS_ID`` devices are ordered by PCI address. The default,
``FASTEST_FIRST``, puts faster devices first and breaks ties by PCI address, so on a host of identical GPUs
(every host numapin targets) it is the PCI order too; when the models differ numapin still uses PCI order and
warns that the default order is ambiguous.

One of the vendors' modules behind :mod:`numapin.facts.inventory` (the table:
:data:`numapin.facts.glance.ACCELERATORS`): ``read`` the devices, ``visible`` to a process, ``in_view`` of another
root.
"""

from __future__ import annotations

from ..base.environment import CUDA_DEVICE_ORDER, CUDA_VISIBLE_DEVICES
from ..base.frozen import replace
from ..base.text import decimal
from ..cpuset import CpuSet
from . import pci as pci_address
from .glance import ACCELERATORS, load_nvml, nvidia_driver_loaded, nvidia_usable, shows_drivers
from .gpu import Gpu, HiddenGpu, NvmlError, UnknownGpu, device_locality, indices, list_end, node_from_cpus

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence
    from typing import Any

    from .gpu import Reading
    from .host import Host
    from .topology import Topology

__all__ = ["in_view", "read", "sysfs_gaps", "visible"]

#: The NVIDIA driver's entries, one folder per GPU it drives (named by PCI address).
_ENTRIES = "proc/driver/nvidia/gpus"


def read(topology: Topology, host: Host, functions: list[str], warnings: list[str], *, nvml: Any,
         scan: Callable[[], dict[str, list[str]]]) -> Reading:
    """NVIDIA's GPUs of the PCI functions ``functions`` (sysfs names) that the process may use, in PCI order, with
    NVML's word on them (``nvml`` as :func:`numapin.facts.inventory.read_gpus` takes it), and how to find those it may
    not (another driver or none holds them: found only when asked, by ``scan``, which reads every PCI function).
    A function ``scan`` found without a ``vendor`` file (a capture may omit it) is NVIDIA's where the driver's
    entries list it."""
    drivers = shows_drivers(host.root)
    if not drivers:
        entries = {pci_address.normalize(b) for b in host.listdir(_ENTRIES) if pci_address.split(b)}
        functions = sorted([*functions, *(n for n in scan().get("", ()) if pci_address.normalize(n) in entries
                                          and _display(host, n))])
    gpus = {name: _sysfs_gpu(topology, host, name, warnings) for name in functions}
    # The minors just read (each driver entry read once, and through the host, which a snapshot records).
    _, why_not = nvidia_usable(host.root, functions, held=drivers,
                               minors={name: g.minor for name, g in gpus.items() if g.minor is not None})
    hidden = [HiddenGpu(gpus[name], why_not[name]) for name in functions if name in why_not]

    def all_hidden() -> list[HiddenGpu]:
        if not drivers:
            return hidden  # every NVIDIA GPU function was read above
        host.check()  # a root removed since (a synthetic machine's folder) is an error, not a machine without them
        others = [name for name in scan()["nvidia"] if name not in gpus]
        _, why = nvidia_usable(host.root, others)
        # What their files lack is no warning about the GPUs the process uses: those were read before.
        elsewhere = [HiddenGpu(_sysfs_gpu(topology, host, name, []), why[name]) for name in others if name in why]
        return sorted(hidden + elsewhere, key=lambda h: h.gpu.pci)

    usable = [gpus[name] for name in functions if name not in why_not]
    module = None
    status = "not installed"
    if nvml is None and not sysfs_gaps(host.root, usable):
        status = "not needed: sysfs told everything"
    elif nvml in (None, True):
        module = load_nvml() if host.is_live else None
    elif nvml is not False:
        module = nvml
    if module is not None:
        usable, status = _nvml_enrich(module, topology, usable, warnings)
    return sorted(usable, key=lambda g: g.pci), all_hidden, status


def _display(host: Host, name: str) -> bool:
    """Whether the PCI function sysfs names ``name`` is of a GPU's class (its vendor unread: a capture's)."""
    text, classes = host.read(f"sys/bus/pci/devices/{name}/class"), ACCELERATORS["nvidia"].classes or ()
    try:
        return int((text or "").strip(), 16) >> 8 in classes
    except ValueError:
        return False


def _driver_info(host: Host, bdf: str) -> dict[str, str]:
    info: dict[str, str] = {}
    for line in (host.read(f"{_ENTRIES}/{bdf}/information") or "").splitlines():
        key, sep, value = line.partition(":")
        if sep:
            info[key.strip()] = value.strip()
    return info


def _numa_status_node(host: Host, bdf: str) -> int | None:
    for line in (host.read(f"{_ENTRIES}/{bdf}/numa_status") or "").splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "Node":
            node = decimal(value)
            return node if node is not None and node >= 0 else None
    return None


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


def in_view(gpus: Sequence[Gpu], root: str) -> list[HiddenGpu]:
    """Of NVIDIA's ``gpus``, those a process whose root is ``root`` may not use, and why: the driver's entries
    and device files of that root leave them out. The root is only listed and asked what exists, with the
    minors the machine's reading found (:func:`numapin.facts.inventory.in_view`)."""
    _, why = nvidia_usable(root, [g.pci for g in gpus], held=True,
                           minors={g.pci: g.minor for g in gpus if g.minor is not None})
    return [HiddenGpu(g, why[g.pci]) for g in gpus if g.pci in why]


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


def visible(gpus: Sequence[Gpu], environ: Mapping[str, str], notes: list[str], nvml: Any | None = None
            ) -> tuple[list[Gpu], str | None]:
    """The NVIDIA GPUs CUDA shows a process with ``environ``, in CUDA's order (index i: ``cuda:i``), and why
    ``CUDA_VISIBLE_DEVICES`` shows fewer than it lists (None when it does not). A MIG device's parent is named by
    NVML (``nvml``: the module, where installed)."""
    gpus = _cuda_order(gpus, environ, notes)
    value = environ.get(CUDA_VISIBLE_DEVICES)
    if value is None:
        return list(gpus), None
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
    return chosen, cut
