"""AMD GPUs (ROCm): found from sysfs alone, and which of them ROCm shows a process, in ROCm's order.

The GPUs are the KFD topology's GPU nodes (``sys/class/kfd/kfd/topology/nodes/N``, CPU nodes first), in node
order: ROCr numbers the nodes that have compute units, and ``ROCR_VISIBLE_DEVICES`` indexes that count. A GPU
node's ``location_id`` and ``domain`` give its PCI address; a partitioned package (MI300X in CPX mode: eight
logical GPUs) shows one KFD node a partition, all of one PCI device, which carries their NUMA node. Without a
KFD topology (amdgpu loaded without compute, a capture that left it out) the AMD GPU functions on the PCI bus
stand in, in PCI order: every published host's ROCm order is its PCI order, but that is no rule of ROCm's.

Visibility, as ROCm applies it (ROCm's "GPU isolation techniques" page; ROCr's ``RvdFilter``; HIP's device
list in CLR's ``rocdevice.cpp``):

1. ``ROCR_VISIBLE_DEVICES`` (ROCr, every ROCm program): set and empty shows no GPU. Its entries are
   upper-cased and trimmed; one starting with ``G`` is a UUID, a prefix (5 to 20 characters) of exactly one
   GPU's ``GPU-<16 hex>``; any other is a number as C's ``strtol`` reads it with base 0 (``0x2`` is 2,
   ``010`` is 8, ``+1`` is 1). The first entry that names no GPU, or one already listed, ends the list;
   those before it stay. At most as many entries as there are GPUs are read.
2. HIP then numbers what ROCr left, 0 up, and applies ``HIP_VISIBLE_DEVICES`` when it is not empty, else
   ``CUDA_VISIBLE_DEVICES`` (both empty or unset: no filter). An entry holding ``GPU-`` picks the first GPU
   whose ``GPU-<16 hex, lower case>`` contains it; any other must be a plain decimal index (``1``, not
   ``01`` or `` 1``). The first invalid entry ends the list; an index named again is skipped, not an end
   (unlike CUDA's and ROCr's rule).

ROCm's documentation says ``GPU_DEVICE_ORDINAL`` also selects HIP's devices; CLR's code reads it only for
OpenCL, and numapin follows the code (docs/gpus.md).
"""

from __future__ import annotations

from ..base.environment import CUDA_VISIBLE_DEVICES, HIP_VISIBLE_DEVICES, ROCR_VISIBLE_DEVICES
from ..base.text import decimal
from ..cpuset import CpuSet
from . import pci as pci_address
from .glance import render_node_absent
from .gpu import Gpu, HiddenGpu, Vendor, device_locality, indices, list_end
from .host import Host
from .topology import Topology

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence
    from typing import Any

    from .gpu import Reading

__all__ = ["KFD_NODES", "MODELS", "in_view", "read", "read_amd", "rocm_visible", "visible"]

#: The KFD topology's nodes, as libhsakmt (ROCr's reader) finds them.
KFD_NODES = "sys/class/kfd/kfd/topology/nodes"

#: Model names by PCI device id, where a public source names the part (RCCL's topo_8p_940.xml: 0x74a1;
#: Apache CloudStack issue 11701's lspci: 0x74a5); other parts are named by their id.
MODELS = {0x74A1: "AMD Instinct MI300X", 0x74A5: "AMD Instinct MI325X"}

_SPACE = " \t\n\v\f\r"  # what C's isspace() takes: ROCr's trim; Python's strip() would take more


def _properties(text: str | None) -> dict[str, int]:
    """A KFD ``properties`` file: ``name value`` lines of decimal numbers (64-bit, so up to 20 digits)."""
    found = {}
    for line in (text or "").splitlines():
        name, _, value = line.partition(" ")
        number = decimal(value)
        if name and number is not None:
            found[name] = number
    return found


def _model(host: Host, folder: str) -> str | None:
    text = (host.read(f"{folder}/device") or "").strip()
    try:
        device = int(text, 16)
    except ValueError:
        return None
    return MODELS.get(device, f"AMD GPU {device:#06x}")


def _render_node(host: Host, folder: str) -> tuple[str, ...]:
    """The render node the amdgpu driver made for the PCI function (``drm/renderD128``), as a device file."""
    names = sorted(n for n in host.listdir(f"{folder}/drm") if n.startswith("renderD"))
    return (f"/dev/dri/{names[0]}",) if names else ()


def read_amd(topology: Topology, host: Host, functions: Sequence[str], warnings: list[str],
             hidden: list[HiddenGpu]) -> list[Gpu]:
    """The AMD GPUs in ROCr's order that the process may use (the others, whose render node is not in its
    view, to ``hidden``: libhsakmt skips them); ``functions`` are the AMD GPU functions sysfs shows."""
    shown = set(functions)
    nodes = []
    for name in sorted(host.listdir(KFD_NODES), key=lambda n: (decimal(n) is None, decimal(n) or 0, n)):
        if decimal(name) is None:
            continue
        props = _properties(host.read(f"{KFD_NODES}/{name}/properties"))
        if props.get("simd_count", 0) > 0:  # ROCr's test: a node with compute units is a GPU
            nodes.append((name, props))
    if not nodes:
        if functions and host.listdir("sys/class/kfd"):
            warnings.append("the KFD topology lists no GPU: ROCm's order is taken as PCI order")
        elif functions:
            warnings.append("no KFD topology (sys/class/kfd): ROCm's order is taken as PCI order, and no UUID is known")
        return [_gpu(topology, host, pci, None, None, _render_node(host, f"sys/bus/pci/devices/{pci}"), warnings)
                for pci in sorted(functions)]
    located: list[tuple[str, str | None, int]] = []
    for name, props in nodes:
        location, domain = props.get("location_id", 0), props.get("domain", 0)
        bus, device, function = location >> 8 & 0xFF, location >> 3 & 0x1F, location & 0x7
        pci = f"{domain:04x}:{bus:02x}:{device:02x}.{function}"
        if pci not in shown and f"{pci[:-1]}0" in shown:
            pci = f"{pci[:-1]}0"  # a partition: its number is OR-ed into the function bits of its package's address
        elif pci not in shown:
            warnings.append(f"KFD node {name} (GPU {len(located)} in ROCm's order) is at {pci}, which sysfs does "
                            "not show as an AMD GPU: its node is unknown")
        unique = props.get("unique_id", 0)
        located.append((pci, f"GPU-{unique:016x}" if unique else None, props.get("drm_render_minor", 0)))
    counts: dict[str, int] = {}
    for pci, _, _ in located:
        counts[pci] = counts.get(pci, 0) + 1
    gpus, seen = [], dict.fromkeys(counts, 0)
    for pci, uuid, minor in located:
        partition = None
        if counts[pci] > 1:  # partitions of one package, numbered in ROCm's order (the hidden ones too)
            partition, seen[pci] = seen[pci], seen[pci] + 1
        node = f"/dev/dri/renderD{minor}"
        gpu = _gpu(topology, host, pci, partition, uuid, (node,) if minor > 0 else (), warnings,
                   minor=minor if minor > 0 else None)
        if minor > 0 and render_node_absent(host.root, minor):
            hidden.append(HiddenGpu(gpu, f"its render node {node} is not in this view"))
        else:
            gpus.append(gpu)
    return gpus


def _gpu(topology: Topology, host: Host, pci: str, partition: int | None, uuid: str | None,
         devices: tuple[str, ...], warnings: list[str], minor: int | None = None) -> Gpu:
    folder = f"sys/bus/pci/devices/{pci}"
    node, cpus, firmware_node = device_locality(topology, host, folder, warnings)
    return Gpu(pci=pci, node=node, cpus=cpus, memory_nodes=CpuSet() if node is None else CpuSet([node]),
               model=_model(host, folder), uuid=uuid, minor=minor, firmware_node=firmware_node, vendor=Vendor.AMD,
               partition=partition, devices=devices)


# -- visibility ---------------------------------------------------------------------------------------------


def _strtol(token: str) -> int | None:
    """The whole ``token`` as C's ``strtol(token, &end, 0)`` reads it (``*end`` must be the end), or None."""
    sign, digits = 1, token
    if digits[:1] in ("+", "-"):
        sign, digits = (-1 if digits[0] == "-" else 1), digits[1:]
    base = 10
    if digits[:2] in ("0X", "0x") and len(digits) > 2:
        base, digits = 16, digits[2:]
    elif digits[:1] == "0" and len(digits) > 1:
        base, digits = 8, digits[1:]
    allowed = "0123456789ABCDEFabcdef" if base == 16 else "0123456789"[:base]
    if not digits or len(digits) > 22 or not set(digits) <= set(allowed):
        return None
    return sign * int(digits, base)


def _rocr(value: str, gpus: Sequence[Gpu], notes: list[str]) -> tuple[list[Gpu], str | None]:
    name = ROCR_VISIBLE_DEVICES
    if value == "":
        return [], f"{name} is empty: it hides every GPU ({len(gpus)} found)"
    tokens = value.split(",")
    if value.endswith(","):
        tokens.pop()  # C++'s getline makes no empty entry after a last comma
    uuids = [g.uuid.upper() if g.uuid else "Invalid-UUID" for g in gpus]
    chosen: list[Gpu] = []
    for raw in tokens[: len(gpus)]:
        entry = raw.upper().strip(_SPACE)
        index: int | None = None
        if entry.startswith("G"):
            matches = [i for i, u in enumerate(uuids) if 5 <= len(entry) <= 20 and u.startswith(entry)]
            index = matches[0] if len(matches) == 1 else None
            why = "matches several GPUs' UUIDs" if len(matches) > 1 else "names no GPU of this machine"
        elif entry:
            index = _strtol(entry)
            why = "names no GPU of this machine"
        else:
            why = "is empty"  # ROCr's code reads an empty entry's first character, which it does not have
        if index is not None and not 0 <= index < len(gpus):
            index = None
        if index is not None and gpus[index] in chosen:
            index, why = None, "names a GPU already listed"
        if index is None:
            return chosen, list_end(name, raw.strip(_SPACE), why, indices(len(gpus)) if gpus else None, notes)
        chosen.append(gpus[index])
    return chosen, None


def _hip(name: str, value: str, agents: Sequence[Gpu], notes: list[str]) -> tuple[list[Gpu], str | None]:
    uuids = [f"GPU-{g.uuid[4:].lower()}" if g.uuid else "GPU-XX" for g in agents]  # as ROCr's agents print them
    chosen: list[Gpu] = []
    position = 0
    while position < len(value):  # a last comma ends the list: CLR stops at the string's end
        end = value.find(",", position)
        end = len(value) if end < 0 else end
        entry = value[position:end]
        if "GPU-" in entry:
            entry = next((str(i) for i, u in enumerate(uuids) if entry in u), entry)
        # CLR's test, str == to_string(atoi(str)): plain decimal digits, no sign, no leading zero, no space.
        plain = entry.isascii() and entry.isdigit() and len(entry) < 10 and (entry == "0" or entry[0] != "0")
        index = int(entry) if plain else None
        if index is None or index >= len(agents):
            return chosen, list_end(name, value[position:end], "names none of its GPUs",
                                    indices(len(agents), "ROCr's") if agents else None, notes)
        if agents[index] not in chosen:  # HIP skips an index named again
            chosen.append(agents[index])
        position = end + 1
    return chosen, None


def rocm_visible(gpus: Sequence[Gpu], environ: Mapping[str, str], notes: list[str]) -> tuple[list[Gpu], str | None]:
    """The AMD GPUs HIP shows a process with ``environ``, in HIP's order, and why the lists show fewer than
    they name (None when they do not)."""
    agents, cut = list(gpus), None
    used = []
    rocr = environ.get(ROCR_VISIBLE_DEVICES)
    if rocr is not None:
        used.append(ROCR_VISIBLE_DEVICES)
        agents, cut = _rocr(rocr, gpus, notes)
    name = HIP_VISIBLE_DEVICES if environ.get(HIP_VISIBLE_DEVICES) else CUDA_VISIBLE_DEVICES
    value = environ.get(name) or ""
    if value:
        used.append(name)
        agents, hip_cut = _hip(name, value, agents, notes)
        cut = cut or hip_cut
    if cut is None and not agents and gpus and used:
        cut = f"{' then '.join(used)} leave no GPU"
    return agents, cut


# -- the vendor's module, as numapin.facts.inventory asks every vendor's ------------------------------------------


def read(topology: Topology, host: Host, functions: list[str], warnings: list[str], *, nvml: Any,
         scan: Callable[[], dict[str, list[str]]]) -> Reading:
    """AMD's GPUs (:func:`read_amd`) of the PCI functions sysfs shows of AMD's GPUs, and those whose render node
    is not in this view (found with them). NVML and the scan of every function are not ROCm's to ask."""
    hidden: list[HiddenGpu] = []
    gpus = read_amd(topology, host, [pci_address.normalize(name) for name in functions], warnings, hidden)
    return gpus, lambda: hidden, None


def visible(gpus: Sequence[Gpu], environ: Mapping[str, str], notes: list[str], nvml: Any = None
            ) -> tuple[list[Gpu], str | None]:
    """:func:`rocm_visible`, as every vendor's module answers it."""
    return rocm_visible(gpus, environ, notes)


def in_view(gpus: Sequence[Gpu], root: str) -> list[HiddenGpu]:
    """Of AMD's ``gpus``, those a process whose root is ``root`` may not use: their render node is not there
    (libhsakmt skips such a GPU)."""
    return [HiddenGpu(g, f"its render node {g.devices[0]} is not in this view") for g in gpus
            if g.minor is not None and g.devices and render_node_absent(root, g.minor)]
