"""Synthetic machines: root folders shaped like real GPU hosts.

:func:`write` lays out the ``sys/`` and ``proc/`` files the readers use, the
way the kernel, the NVIDIA driver and AMD's amdgpu/KFD driver show them, so
that every reader works on them without special cases. The shapes in
:data:`SHAPES` mirror machines our users run (``dgx-h100``, ``gb300``,
``epyc-nps4``, ``laptop``, ``mi300x`` and its partitioned ``mi300x-cpx``)
plus ``pair``, this project's 2-CPU test machine seen as two nodes.
"""

from __future__ import annotations

import os
from pathlib import Path

from ..base.frozen import frozen
from ..cpuset import CpuSet
from .glance import ACCELERATORS
from .host import Host

__all__ = ["MARKER", "SHAPES", "MachineSpec", "shape_named", "synthetic", "write", "written"]

#: The file under a synthetic root that names the machine written there (so that writing it again is harmless).
MARKER = "numapin-machine"

_NVIDIA = "0x10de"
_AMD = "0x1002"
_GIB = 1 << 30

#: An 8 x MI300X host as ROCm's RCCL published it (ROCm/rccl, tools/topo_expl/models/topo_8p_940.xml, an
#: NCCL_TOPO_DUMP_FILE of a real host; docs/gpus.md cites it): per GPU, in HIP's order, the buses of its two
#: PCIe switches, of AMD's bridge above it, its own, and its NIC's (mlx5_N, beside the GPU's second switch,
#: under the first). GPUs 0-3 hang under socket 0, 4-7 under socket 1.
RCCL_MI300X = (
    (0x05, 0x08, 0x0A, 0x0C, 0x07), (0x0E, 0x11, 0x13, 0x15, 0x10), (0x17, 0x1A, 0x1C, 0x1E, 0x19),
    (0x62, 0x65, 0x67, 0x69, 0x64), (0x98, 0x9B, 0x9D, 0x9F, 0x9A), (0xA8, 0xAB, 0xAD, 0xAF, 0xAA),
    (0xB8, 0xBB, 0xBD, 0xBF, 0xBA), (0xD8, 0xDB, 0xDD, 0xDF, 0xDA),
)


@frozen
class MachineSpec:
    """The shape of a machine: CPUs are numbered the way Linux numbers x86 threads.

    The first thread of every core comes first (0..cores-1), then the second
    thread of every core, so SMT siblings are ``c`` and ``c + cores``.
    """

    name: str
    sockets: int
    cores_per_socket: int
    threads_per_core: int = 1
    nodes_per_socket: int = 1
    llc_per_node: int = 1
    gpus_per_node: int = 0
    gpu_model: str = "NVIDIA H100 80GB HBM3"
    gpu_class: str = "0x030200"
    gpu_memory_nodes: bool = False
    memory_per_node: int = 256 * _GIB
    gpu_memory: int = 96 * _GIB
    arch_note: str = ""
    nic_relation: str | None = None
    """Where each GPU's NIC sits: ``PIX`` under the GPU's own switch, ``PXB`` one switch up; None: no NICs."""
    storage_nics: bool = False
    """A dual-port Ethernet (RoCE) card on each socket, apart from the GPUs' NICs (a DGX's storage ports)."""
    efficient_cores: int = 0
    """The last cores of each socket that are efficient (E) cores of one thread, numbered after every P-core CPU."""
    priority_stride: int = 0
    """Cores whose number modulo this is 0 or 1 are priority cores, faster than the rest (Intel's Priority
    Core Turbo, laid out as vLLM published for a DGX B300's Xeon 6776P: 8 of each socket's 64 cores)."""
    priority_hidden: bool = False
    """The kernel shows every core at the priority cores' turbo: which are priority cores, only a published
    layout tells (``NUMAPIN_PRIORITY_CORES=pct``)."""
    cpu_model: str = ""
    """``/proc/cpuinfo``'s model name; empty writes no ``/proc/cpuinfo``."""
    frequencies: tuple[int, int] = (0, 0)
    """Maximum and base frequency of the (ordinary) cores in MHz; (0, 0) writes no cpufreq files."""
    gpu_vendor: str = "nvidia"
    """A row of the accelerators' table: ``nvidia`` (the NVIDIA driver's files), ``amd`` (amdgpu's render nodes and
    the KFD topology), or any other (its PCI functions, held by its driver, as every driver shows them)."""
    gpu_device: str = "0x2330"
    capture: tuple[tuple[int, int, int, int, int], ...] = ()
    """The PCI buses of a published host, per GPU (see :data:`RCCL_MI300X`); empty: buses laid out here."""
    partitions: int = 1
    """Logical GPUs per device (an MI300X in CPX mode: 8), each its own KFD node and render node."""
    narrow_link: int | None = None
    """A GPU whose PCIe link trained at half its width (x8 of x16), as a badly seated card or riser leaves it; the
    others train at x16, 32 GT/s."""

    @property
    def cores(self) -> int:
        return self.sockets * self.cores_per_socket

    @property
    def _p_cores(self) -> int:
        return self.cores - self.sockets * self.efficient_cores

    @property
    def cpus(self) -> int:
        return self._p_cores * self.threads_per_core + self.sockets * self.efficient_cores

    def is_efficient(self, core: int) -> bool:
        return core % self.cores_per_socket >= self.cores_per_socket - self.efficient_cores

    @property
    def cpu_nodes(self) -> int:
        return self.sockets * self.nodes_per_socket

    @property
    def gpus(self) -> int:
        return self.cpu_nodes * self.gpus_per_node

    def core_cpus(self, core: int) -> CpuSet:
        if not self.efficient_cores:
            return CpuSet(core + t * self.cores for t in range(self.threads_per_core))
        # Hybrid parts number each P-core's threads side by side, then the E-cores (one socket here).
        if self.is_efficient(core):
            return CpuSet([self._p_cores * self.threads_per_core + core - self._p_cores])
        return CpuSet(core * self.threads_per_core + t for t in range(self.threads_per_core))

    def node_cores(self, node: int) -> range:
        per_node = self.cores_per_socket // self.nodes_per_socket
        return range(node * per_node, (node + 1) * per_node)

    def node_cpus(self, node: int) -> CpuSet:
        return CpuSet.union(self.core_cpus(c) for c in self.node_cores(node))


SHAPES: dict[str, MachineSpec] = {
    spec.name: spec
    for spec in (
        # A DGX H100 has 2 TiB of memory, 1 TiB a node: MemTotal runs to ten digits of kB.
        MachineSpec("dgx-h100", sockets=2, cores_per_socket=56, threads_per_core=2, gpus_per_node=4,
                    memory_per_node=1024 * _GIB,
                    nic_relation="PXB", storage_nics=True, cpu_model="Intel(R) Xeon(R) Platinum 8480C",
                    arch_note="2 x Xeon 8480C, 8 x H100 SXM, 8 InfiniBand NICs + 2 dual-port storage NICs"),
        MachineSpec("gb300", sockets=2, cores_per_socket=72, gpus_per_node=2,
                    gpu_model="NVIDIA GB300", gpu_class="0x030200", gpu_memory_nodes=True,
                    gpu_memory=288 * _GIB, nic_relation="PIX", storage_nics=True,
                    arch_note="2 x Grace, 4 x Blackwell Ultra, GPU memory as NUMA nodes, a NIC per GPU"),
        MachineSpec("epyc-nps4", sockets=2, cores_per_socket=64, threads_per_core=2, nodes_per_socket=4,
                    llc_per_node=2, gpus_per_node=1, nic_relation="PIX",
                    arch_note="2 x EPYC in NPS4, 2 CCX per node, 8 GPUs, a NIC per GPU"),
        MachineSpec("dgx-b300", sockets=2, cores_per_socket=64, threads_per_core=2, gpus_per_node=4,
                    gpu_model="NVIDIA B300 SXM6 AC", nic_relation="PIX", storage_nics=True,
                    priority_stride=16, frequencies=(3900, 2300), cpu_model="Intel(R) Xeon(R) 6776P",
                    arch_note="2 x Xeon 6776P with 8 priority cores each (4.6 GHz), 8 x B300, a NIC per GPU"),
        MachineSpec("laptop", sockets=1, cores_per_socket=6, threads_per_core=2, gpus_per_node=1,
                    gpu_model="NVIDIA GeForce RTX 4070 Laptop GPU", gpu_class="0x030000",
                    memory_per_node=32 * _GIB, efficient_cores=4, frequencies=(4700, 1700),
                    arch_note="2 P-cores (2 threads each) + 4 E-cores: a hybrid laptop"),
        MachineSpec("pair", sockets=2, cores_per_socket=1, gpus_per_node=1, memory_per_node=8 * _GIB,
                    arch_note="two 1-CPU nodes with a GPU each: this 2-CPU host seen as two nodes"),
        # RCCL's capture: 2 x Xeon (family 6 model 143, 56 cores, 2 threads: node 0 = CPUs 0-55,112-167).
        MachineSpec("mi300x", sockets=2, cores_per_socket=56, threads_per_core=2, gpus_per_node=4,
                    gpu_vendor="amd", gpu_model="AMD Instinct MI300X", gpu_class="0x120000", gpu_device="0x74a1",
                    gpu_memory=192 * _GIB, nic_relation="PXB", capture=RCCL_MI300X,
                    arch_note="2 x Xeon (56 cores), 8 x MI300X, a NIC per GPU: RCCL's topo_8p_940.xml"),
        MachineSpec("mi300x-cpx", sockets=2, cores_per_socket=56, threads_per_core=2, gpus_per_node=4,
                    gpu_vendor="amd", gpu_model="AMD Instinct MI300X", gpu_class="0x120000", gpu_device="0x74a1",
                    gpu_memory=192 * _GIB, nic_relation="PXB", capture=RCCL_MI300X, partitions=8,
                    arch_note="the mi300x host in CPX mode: 8 logical GPUs per package, 64 in all"),
    )
}


def synthetic(cpus: int, *, gpus_per_node: int = 4) -> MachineSpec:
    """A 2-socket, 2-thread machine of ``cpus`` CPUs (a multiple of 4) for benchmarks."""
    if cpus % 4 or cpus <= 0:
        raise ValueError(f"synthetic machines need a positive multiple of 4 CPUs, not {cpus}")
    return MachineSpec(f"synthetic-{cpus}", sockets=2, cores_per_socket=cpus // 4, threads_per_core=2,
                       gpus_per_node=gpus_per_node)


def shape_named(name: str) -> MachineSpec:
    """The spec called ``name``; ValueError listing the known names otherwise."""
    try:
        return SHAPES[name]
    except KeyError:
        raise ValueError(f"unknown machine {name!r} (known: {', '.join(SHAPES)})") from None


def written(dest: str | os.PathLike[str]) -> str | None:
    """The name of the synthetic machine written under ``dest``, None when there is none (or its marker is no
    regular file: a folder handed in as a machine is read as any root, never waited on)."""
    return (Host.at(dest).read(MARKER) or "").strip() or None


def _put(root: Path, rel: str, text: str) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text if text.endswith("\n") else text + "\n")


def _bdf(spec: MachineSpec, gpu: int) -> str:
    if spec.capture:
        return f"0000:{spec.capture[gpu][3]:02x}:00.0"
    # Spread GPUs over buses the way a PCIe switch tree would.
    return f"0000:{0x18 + 0x10 * gpu:02x}:00.0"


def _uuid(name: str, gpu: int) -> str:
    seed = sum(map(ord, name)) & 0xFFFF
    return f"GPU-{seed:04x}{gpu:04x}-0000-4000-8000-{gpu:012x}"


def write(shape: str | MachineSpec, dest: str | os.PathLike[str], *,
          cgroup_cpus: CpuSet | None = None) -> Path:
    """Write the machine ``shape`` (a name from :data:`SHAPES` or a spec) under ``dest``.

    ``cgroup_cpus`` puts the process in a cgroup v2 cpuset of those CPUs, as a
    container would. Returns the root folder.
    """
    spec = shape_named(shape) if isinstance(shape, str) else shape
    root = Path(dest)
    _put(root, MARKER, spec.name)
    every = _write_cpus(spec, root)
    cpu_nodes, gpu_nodes = _write_nodes(spec, root)
    all_nodes = cpu_nodes + gpu_nodes
    _write_kinds(spec, root)
    if spec.cpu_model:
        _put(root, "proc/cpuinfo", "".join(f"processor\t: {cpu}\nmodel name\t: {spec.cpu_model}\n\n"
                                           for cpu in range(spec.cpus)))
    words = -(-spec.cpus // 32)
    irqs = _Irqs(root, spec.cpus)
    if spec.gpu_vendor == "amd":
        _write_amd(spec, root, irqs)
    elif spec.gpu_vendor == "nvidia":
        _write_nvidia(spec, root, irqs, gpu_nodes)
    else:  # a vendor of no files but its PCI functions': its row says its id and driver
        row = ACCELERATORS[spec.gpu_vendor]
        for gpu in range(spec.gpus):
            _pci_device(root, spec, gpu, f"{row.pci_vendor:#06x}", irqs, row.driver)

    for number, nic in enumerate(_nics(spec)):
        _write_nic(root, nic, f"mlx5_{number}", spec.node_cpus(nic.node), words, irqs)
    irqs.write()

    # Transparent huge pages as Ubuntu and Debian ship them: for ranges that ask, each fault compacting if it must.
    _put(root, "sys/kernel/mm/transparent_hugepage/enabled", "always [madvise] never")
    _put(root, "sys/kernel/mm/transparent_hugepage/defrag", "always defer defer+madvise [madvise] never")
    _put(root, "sys/kernel/mm/transparent_hugepage/hpage_pmd_size", str(2 << 20))
    allowed = every if cgroup_cpus is None else cgroup_cpus & every
    _put(root, "proc/self/cgroup", "0::/")
    _put(root, "proc/mounts", "cgroup2 /sys/fs/cgroup cgroup2 rw,nosuid,nodev,noexec,relatime 0 0")
    _put(root, "sys/fs/cgroup/cpuset.cpus.effective", str(allowed))
    _put(root, "sys/fs/cgroup/cpuset.mems.effective", str(CpuSet(all_nodes)))
    _put(root, "proc/self/status", f"Name:\tpython3\nCpus_allowed:\t{allowed.to_mask()}\n"
                                   f"Cpus_allowed_list:\t{allowed}\n"
                                   f"Mems_allowed_list:\t{CpuSet(all_nodes)}")
    return root


def _write_cpus(spec: MachineSpec, root: Path) -> CpuSet:
    """Every CPU's topology and caches, as the kernel shows them under ``sys/devices/system/cpu``; the CPUs."""
    cpu_dir = "sys/devices/system/cpu"
    every = CpuSet(range(spec.cpus))
    _put(root, f"{cpu_dir}/online", str(every))
    _put(root, f"{cpu_dir}/possible", str(every))
    _put(root, f"{cpu_dir}/present", str(every))
    _put(root, f"{cpu_dir}/offline", "")

    cores_per_llc = spec.cores_per_socket // spec.nodes_per_socket // spec.llc_per_node
    for core in range(spec.cores):
        siblings = spec.core_cpus(core)
        socket = core // spec.cores_per_socket
        package = CpuSet.union(spec.node_cpus(n) for n in range(socket * spec.nodes_per_socket,
                                                                (socket + 1) * spec.nodes_per_socket))
        first_llc_core = core - core % cores_per_llc
        llc = CpuSet.union(spec.core_cpus(c) for c in range(first_llc_core, first_llc_core + cores_per_llc))
        for cpu in siblings:
            base = f"{cpu_dir}/cpu{cpu}"
            _put(root, f"{base}/online", "1")
            topo = f"{base}/topology"
            _put(root, f"{topo}/physical_package_id", str(socket))
            _put(root, f"{topo}/core_id", str(core % spec.cores_per_socket))
            _put(root, f"{topo}/thread_siblings_list", str(siblings))
            _put(root, f"{topo}/thread_siblings", siblings.to_mask())
            _put(root, f"{topo}/core_cpus_list", str(siblings))
            _put(root, f"{topo}/package_cpus_list", str(package))
            for index, (level, kind, shared) in enumerate(
                ((1, "Data", siblings), (1, "Instruction", siblings), (2, "Unified", siblings), (3, "Unified", llc))
            ):
                leaf = f"{base}/cache/index{index}"
                _put(root, f"{leaf}/level", str(level))
                _put(root, f"{leaf}/type", kind)
                _put(root, f"{leaf}/shared_cpu_list", str(shared))
                _put(root, f"{leaf}/shared_cpu_map", shared.to_mask())

    return every


def _write_nodes(spec: MachineSpec, root: Path) -> tuple[list[int], list[int]]:
    """The NUMA nodes: the CPU nodes, then (where its GPUs' memory is shown as nodes) one per GPU; their CPUs,
    distances and memory. The CPU nodes' and the GPU memory nodes' ids."""
    cpu_nodes = list(range(spec.cpu_nodes))
    gpu_nodes = list(range(spec.cpu_nodes, spec.cpu_nodes + spec.gpus)) if spec.gpu_memory_nodes else []
    all_nodes = cpu_nodes + gpu_nodes
    node_dir = "sys/devices/system/node"
    _put(root, f"{node_dir}/online", str(CpuSet(all_nodes)))
    _put(root, f"{node_dir}/possible", str(CpuSet(all_nodes)))
    _put(root, f"{node_dir}/has_cpu", str(CpuSet(cpu_nodes)))
    _put(root, f"{node_dir}/has_memory", str(CpuSet(all_nodes)))
    _put(root, f"{node_dir}/has_normal_memory", str(CpuSet(cpu_nodes)))
    for node in all_nodes:
        cpus = spec.node_cpus(node) if node in cpu_nodes else CpuSet()
        distances = []
        for other in all_nodes:
            if other == node:
                distances.append(10)
            elif node in gpu_nodes or other in gpu_nodes:
                distances.append(80)
            elif other // spec.nodes_per_socket == node // spec.nodes_per_socket:
                distances.append(12)
            else:
                distances.append(32)
        memory = spec.memory_per_node if node in cpu_nodes else spec.gpu_memory
        base = f"{node_dir}/node{node}"
        _put(root, f"{base}/cpulist", str(cpus))
        _put(root, f"{base}/cpumap", cpus.to_mask(words=-(-spec.cpus // 32)))
        _put(root, f"{base}/distance", " ".join(map(str, distances)))
        _put(root, f"{base}/meminfo", f"Node {node} MemTotal:       {memory // 1024} kB\n"
                                      f"Node {node} MemFree:        {memory // 2048} kB")

    return cpu_nodes, gpu_nodes


def _pci_device(root: Path, spec: MachineSpec, gpu: int, vendor: str, irqs: _Irqs, driver: str) -> tuple[str, int]:
    """The GPU's PCI function: its ids, class, node and local CPUs, its link in ``bus/pci/devices``; its sysfs
    path and its interrupt."""
    node = gpu // spec.gpus_per_node
    bdf = _bdf(spec, gpu)
    local = spec.node_cpus(node)
    device = _gpu_device(spec, gpu)
    irq = irqs.add(device, bdf, driver, 1, local)[0]
    _put(root, f"{device}/vendor", vendor)
    _put(root, f"{device}/device", spec.gpu_device)
    _put(root, f"{device}/class", spec.gpu_class)
    _put(root, f"{device}/numa_node", str(node))
    _put(root, f"{device}/local_cpulist", str(local))
    _put(root, f"{device}/local_cpus", local.to_mask(words=-(-spec.cpus // 32)))
    _link(root, f"sys/bus/pci/devices/{bdf}", device)
    # Its link, as both ends of it show it: the function and the port above it.
    width = 8 if gpu == spec.narrow_link else 16
    for end in (device, device.rsplit("/", 1)[0]):
        _put(root, f"{end}/current_link_width", str(width))
        _put(root, f"{end}/max_link_width", "16")
        _put(root, f"{end}/current_link_speed", "32.0 GT/s PCIe")
        _put(root, f"{end}/max_link_speed", "32.0 GT/s PCIe")
    # The driver that holds it, both ways, as the kernel links them.
    _link(root, f"sys/bus/pci/drivers/{driver}/{bdf}", device)
    _link(root, f"{device}/driver", f"sys/bus/pci/drivers/{driver}")
    return device, irq


def _write_nvidia(spec: MachineSpec, root: Path, irqs: _Irqs, gpu_nodes: list[int]) -> None:
    """Each GPU's PCI function and the NVIDIA driver's ``proc/driver/nvidia/gpus`` entry."""
    for gpu in range(spec.gpus):
        bdf = _bdf(spec, gpu)
        _, irq = _pci_device(root, spec, gpu, _NVIDIA, irqs, "nvidia")
        info = f"proc/driver/nvidia/gpus/{bdf}"
        _put(root, f"{info}/information",
             f"Model: \t\t {spec.gpu_model}\nIRQ:   \t\t {irq}\nGPU UUID: \t {_uuid(spec.name, gpu)}\n"
             f"Video BIOS: \t 96.00.99.00.01\nBus Type: \t PCIe\nDMA Size: \t 52 bits\n"
             f"DMA Mask: \t 0xfffffffffffff\nBus Location: \t {bdf}\nDevice Minor: \t {gpu}\n"
             f"GPU Excluded:\t No")
        if gpu_nodes:
            _put(root, f"{info}/numa_status",
                 f"Node:      {gpu_nodes[gpu]}\nStatus:    online\n"
                 f"Address:   {0x40000000000 + gpu * 0x1000000000:x}\nSize:      {spec.gpu_memory:x}")


#: The first render node's minor number (``/dev/dri/renderD128``), as DRM numbers them.
_RENDER = 128


def amd_unique_id(gpu: int, partition: int = 0) -> int:
    """The 64-bit ``unique_id`` KFD shows for a GPU (a partition's differs in its last bits); ROCr prints it as
    ``GPU-<16 hex>``. Every GPU's starts alike, so that a short prefix is ambiguous, as on real hosts of one part."""
    return 0x2F6C0A3E1B7D0000 + (gpu << 8) + partition


def _write_amd(spec: MachineSpec, root: Path, irqs: _Irqs) -> None:
    """Each GPU's PCI function, its render nodes, and the KFD topology: CPU nodes first, then a node per
    logical GPU in ROCm's order (partitions of a package side by side), as amdgpu and KFD show them."""
    kfd = "sys/devices/virtual/kfd/kfd"
    _link(root, "sys/class/kfd/kfd", kfd)
    _put(root, f"{kfd}/topology/generation_id", "1")
    nodes = f"{kfd}/topology/nodes"
    for node in range(spec.cpu_nodes):
        cores = len(spec.node_cpus(node))
        _put(root, f"{nodes}/{node}/gpu_id", "0")
        _put(root, f"{nodes}/{node}/name", "")
        _put(root, f"{nodes}/{node}/properties", _kfd_properties(
            cpu_cores_count=cores, simd_count=0, mem_banks_count=1, io_links_count=0, cpu_core_id_base=0,
            location_id=0, domain=0, drm_render_minor=0, unique_id=0))
    simds = 304 * 4 // spec.partitions  # 304 compute units of 4 SIMDs each, split among the partitions
    kfd_node = spec.cpu_nodes
    for gpu in range(spec.gpus):
        node = gpu // spec.gpus_per_node
        device, _ = _pci_device(root, spec, gpu, _AMD, irqs, "amdgpu")
        bus, dev_fn = int(_bdf(spec, gpu)[5:7], 16), 0
        for partition in range(spec.partitions):
            minor = _RENDER + gpu * spec.partitions + partition
            if partition == 0:
                _put(root, f"{device}/drm/renderD{minor}/dev", f"226:{minor}")
            else:  # a partition's render node hangs under a platform device of its own
                _put(root, f"sys/devices/platform/amdgpu_xcp.{gpu * (spec.partitions - 1) + partition - 1}"
                           f"/drm/renderD{minor}/dev",
                      f"226:{minor}")
            folder = f"{nodes}/{kfd_node}"
            _put(root, f"{folder}/gpu_id", str(0x1000 + minor))
            _put(root, f"{folder}/name", "gfx942")
            _put(root, f"{folder}/properties", _kfd_properties(
                cpu_cores_count=0, simd_count=simds, mem_banks_count=1, io_links_count=1, cpu_core_id_base=0,
                location_id=(bus << 8 | dev_fn) | (partition if spec.partitions > 1 else 0), domain=0,
                drm_render_minor=minor, vendor_id=0x1002, device_id=int(spec.gpu_device, 16),
                gfx_target_version=90402, num_xcc=8 // spec.partitions,
                local_mem_size=spec.gpu_memory // spec.partitions, unique_id=amd_unique_id(gpu, partition)))
            _put(root, f"{folder}/io_links/0/properties", _kfd_properties(
                type=2, version_major=0, node_from=kfd_node, node_to=node, weight=20))
            kfd_node += 1


def _kfd_properties(**values: int) -> str:
    """A KFD ``properties`` file: one ``name value`` line each, in decimal."""
    return "".join(f"{name} {value}\n" for name, value in values.items())


def _link(root: Path, rel: str, target: str) -> None:
    """A relative symlink ``rel`` to ``target`` (both under ``root``), as sysfs makes its class links."""
    link = root / rel
    link.parent.mkdir(parents=True, exist_ok=True)
    if not link.is_symlink():
        link.symlink_to(os.path.relpath(root / target, link.parent))


def _write_kinds(spec: MachineSpec, root: Path) -> None:
    """cpufreq and CPPC files, and the hybrid PMUs' CPU lists, the way Intel parts show them."""
    max_mhz, base_mhz = spec.frequencies
    if not max_mhz:
        return
    cpu_dir = "sys/devices/system/cpu"
    for core in range(spec.cores):
        top, base = max_mhz, base_mhz
        if spec.is_efficient(core):
            top, base = max_mhz * 3 // 4, base_mhz * 7 // 10
        elif spec.priority_hidden or (spec.priority_stride and core % spec.priority_stride in (0, 1)):
            top = 4600  # the Xeon 6776P's priority-core turbo, as vLLM's table gives it
        elif spec.efficient_cores and core % spec.cores_per_socket == 1:
            top += 200  # a Turbo Boost Max 3.0 favoured core: a little faster, the same kind
        for cpu in spec.core_cpus(core):
            _put(root, f"{cpu_dir}/cpu{cpu}/cpufreq/cpuinfo_max_freq", str(top * 1000))
            _put(root, f"{cpu_dir}/cpu{cpu}/cpufreq/base_frequency", str(base * 1000))
            _put(root, f"{cpu_dir}/cpu{cpu}/acpi_cppc/highest_perf", str(top // 100))
    if spec.efficient_cores:
        efficient = CpuSet.union(spec.core_cpus(c) for c in range(spec.cores) if spec.is_efficient(c))
        _put(root, "sys/devices/cpu_core/cpus", str(CpuSet(range(spec.cpus)) - efficient))
        _put(root, "sys/devices/cpu_atom/cpus", str(efficient))


def _root_port(bus: int) -> str:
    """A host bridge's root port, the first bridge of every device path written here."""
    return f"sys/devices/pci0000:{bus:02x}/0000:{bus:02x}:01.0"


def _gpu_switch(gpu: int) -> str:
    """The upstream port of the switch below GPU ``gpu``'s root port, which its NIC shares."""
    bus = 0x10 * gpu
    return f"{_root_port(bus)}/0000:{bus + 1:02x}:00.0"


def _captured(spec: MachineSpec, gpu: int) -> tuple[str, str]:
    """A captured GPU's sysfs path and its NIC's: the capture names the switches' upstream ports (and AMD's
    bridge); their downstream ports are on the next bus, as PCIe numbers them."""
    first, second, bridge, own, nic = spec.capture[gpu]
    top = f"{_root_port(first - 1)}/0000:{first:02x}:00.0"
    path = (f"{top}/0000:{first + 1:02x}:00.0/0000:{second:02x}:00.0/0000:{second + 1:02x}:00.0"
            f"/0000:{bridge:02x}:00.0/0000:{bridge + 1:02x}:00.0/0000:{own:02x}:00.0")
    return path, f"{top}/0000:{first + 1:02x}:01.0/0000:{nic:02x}:00.0"


def _gpu_device(spec: MachineSpec, gpu: int) -> str:
    """The GPU's sysfs path: under its root port, or under one or two PCIe switches where NICs share them."""
    if spec.capture:
        return _captured(spec, gpu)[0]
    bus = 0x10 * gpu
    path = _root_port(bus)
    if spec.nic_relation is not None:
        # A switch (upstream port, then downstream port); for PXB a second switch below it.
        path = f"{_gpu_switch(gpu)}/0000:{bus + 2:02x}:00.0"
        if spec.nic_relation == "PXB":
            path += f"/0000:{bus + 3:02x}:00.0/0000:{bus + 4:02x}:00.0"
    return f"{path}/{_bdf(spec, gpu)}"


@frozen
class _Nic:
    device: str  # sysfs path of the PCI function
    bdf: str
    node: int
    infiniband: bool


def _nics(spec: MachineSpec) -> list[_Nic]:
    """A NIC per GPU, beside it under the GPU's first switch; storage cards on their own root port."""
    found = []
    if spec.capture:
        for gpu in range(spec.gpus):
            device = _captured(spec, gpu)[1]
            found.append(_Nic(device, device.rsplit("/", 1)[1], gpu // spec.gpus_per_node, True))
    elif spec.nic_relation is not None:
        for gpu in range(spec.gpus):
            bus = 0x10 * gpu
            bdf = f"0000:{bus + 5:02x}:00.0"
            device = f"{_gpu_switch(gpu)}/0000:{bus + 2:02x}:01.0/{bdf}"  # the switch's other downstream port
            found.append(_Nic(device, bdf, gpu // spec.gpus_per_node, True))
    if spec.storage_nics and spec.gpus_per_node:
        for node in range(spec.cpu_nodes):
            bus = 0x10 * node * spec.gpus_per_node + 0x0C
            for function in (0, 1):
                bdf = f"0000:{bus + 1:02x}:00.{function}"
                found.append(_Nic(f"{_root_port(bus)}/{bdf}", bdf, node, False))
    return sorted(found, key=lambda n: n.bdf)


def _write_nic(root: Path, nic: _Nic, hca: str, local: CpuSet, words: int, irqs: _Irqs) -> None:
    index = int(nic.bdf[5:7], 16), int(nic.bdf[-1])
    _put(root, f"{nic.device}/vendor", "0x15b3")
    _put(root, f"{nic.device}/device", "0x1021")
    _put(root, f"{nic.device}/class", "0x020700" if nic.infiniband else "0x020000")
    _put(root, f"{nic.device}/numa_node", str(nic.node))
    _put(root, f"{nic.device}/local_cpulist", str(local))
    _put(root, f"{nic.device}/local_cpus", local.to_mask(words=words))
    _link(root, f"sys/bus/pci/devices/{nic.bdf}", nic.device)
    _put(root, f"{nic.device}/infiniband/{hca}/ports/1/link_layer", "InfiniBand" if nic.infiniband else "Ethernet")
    _link(root, f"sys/class/infiniband/{hca}", f"{nic.device}/infiniband/{hca}")
    netdev = f"ibp{index[0]}s0" if nic.infiniband else f"enp{index[0]}s0f{index[1]}np{index[1]}"
    _put(root, f"{nic.device}/net/{netdev}/type", "32" if nic.infiniband else "1")
    _link(root, f"sys/class/net/{netdev}", f"{nic.device}/net/{netdev}")
    irqs.add(nic.device, nic.bdf, "mlx5_comp{}@pci:" + nic.bdf, 4, local)


class _Irqs:
    """Interrupts of the devices written: each device's ``msi_irqs``, ``/proc/interrupts`` and the affinities.

    Each interrupt may go to its device's node (``smp_affinity_list``) and is
    delivered to one CPU of it (``effective_affinity_list``), as irqbalance
    leaves them on a well-kept host.
    """

    def __init__(self, root: Path, cpus: int) -> None:
        self.root = root
        self.cpus = cpus
        self.lines: list[str] = []
        self.next = 120

    def add(self, device: str, bdf: str, name: str, count: int, local: CpuSet) -> list[int]:
        numbers = []
        spread = sorted(local)
        for i in range(count):
            irq, self.next = self.next, self.next + 1
            numbers.append(irq)
            _put(self.root, f"{device}/msi_irqs/{irq}", "msix")
            _put(self.root, f"proc/irq/{irq}/smp_affinity_list", str(local))
            _put(self.root, f"proc/irq/{irq}/effective_affinity_list", str(spread[i % len(spread)]))
            label = name.format(i) if "{}" in name else name
            self.lines.append(f"{irq:>4}:" + "          0" * self.cpus + f"  IR-PCI-MSIX-{bdf}  {i}-edge      {label}")
        return numbers

    def write(self) -> None:
        header = "     " + "".join(f"{'CPU' + str(c):>11}" for c in range(self.cpus))
        _put(self.root, "proc/interrupts", "\n".join([header, *self.lines]))
