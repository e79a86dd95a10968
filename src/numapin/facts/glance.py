"""Whether this process is a GPU worker, at a glance: the first question of the start-up hook, which runs in
every Python process of a job (each tokenizer subprocess, helper script and launcher that is Python).

A process is a worker when a launcher gave it a local rank, or when exactly one GPU is visible to it. The
full answer reads the machine (its topology, every GPU, NVML where installed); most processes of a job are
no workers, and for them the environment, one listing of the PCI devices and the GPUs' driver entries and
device files (which of the host's GPUs a container holds) tell as much: no rank, and a GPU count that
``CUDA_VISIBLE_DEVICES`` cannot bring to one. Where the glance cannot be certain (a GPU named
by UUID, sysfs showing no GPU while an NVIDIA driver is loaded, so that NVML may find some), it says so, and
the full reading decides.
"""

# Plain os calls, no ``from __future__`` import and no numapin module but the environment's names: the
# glance is what every Python process of a job with NUMAPIN_AUTOPIN=1 pays (benchmarks/startup.py).
import os

from ..base.environment import (
    ACCELERATOR,
    CUDA_VISIBLE_DEVICES,
    FSROOT,
    GPU_VISIBILITY,
    HABANA_VISIBLE_MODULES,
    HIP_VISIBLE_DEVICES,
    HLS_MODULE_ID,
    LOCAL_RANK_VARIABLES,
    ROCR_VISIBLE_DEVICES,
)

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from typing import Any

__all__ = ["ACCELERATORS", "Accelerator", "accelerator", "glimpse", "held_by", "load_nvml", "machine_gpus",
           "no_worker",
           "not_a_worker", "nvidia_driver_loaded", "nvidia_usable", "render_node_absent", "shows_drivers",
           "visibility", "visible_without_rank"]

class Accelerator:
    """One vendor's row of :data:`ACCELERATORS`: how its devices are found, counted and named. A plain class, not a
    record of numapin's: the glance defines it in every Python process of a job, and imports nothing for it.

    A vendor is its row and its reader module (``module``): every other part of numapin asks the row."""

    __slots__ = ("classes", "count", "device", "driver", "files", "maker", "module", "names", "only", "pci_vendor",
                 "shown", "signs", "torch", "unsure_when_loaded")

    def __init__(self, pci_vendor: int, classes: "tuple[int, ...] | None", driver: str, module: str, *,
                 names: "tuple[str, ...]", maker: str, device: str, files: str, torch: "tuple[str, ...]" = (),
                 signs: "tuple[str, ...]" = (), only: "tuple[str, ...] | None" = None,
                 count: "Callable[[str, list[str], bool], int] | None" = None,
                 shown: "Callable[[Mapping[str, str], int], int | None] | None" = None,
                 unsure_when_loaded: bool = False) -> None:
        self.pci_vendor = pci_vendor
        """Its PCI vendor id."""
        self.classes = classes
        """The PCI classes of its accelerators (``class >> 8``); None: every function of it is one."""
        self.driver = driver
        """The kernel driver its runtime needs its devices held by."""
        self.module = module
        """The module that reads its devices and says which a process sees, by its whole dotted name (a vendor's
        module may live outside numapin)."""
        self.names = names
        """The variables that choose its devices, in the order its runtime reads them."""
        self.maker = maker
        """Its maker's name as users write it."""
        self.device = device
        """How its runtime names a device of it in a process (``cuda``, ``hip``, ``hpu``)."""
        self.files = files
        """Its device files under ``/dev``, as a regular expression (``nvidia\\d+``): a process holding one drives
        its device."""
        self.torch = torch or (device,)
        """The device types by which PyTorch names one of its devices (ROCm's builds call theirs ``cuda`` too)."""
        self.signs = signs
        """The folders that show its driver loaded where sysfs shows none of its functions."""
        self.only = names if only is None else only
        """The variables only its runtime reads: set, they say a process drives its devices."""
        self.count = count or _functions_count
        """How many devices the full reading finds, from the PCI functions of it the glance found: ``(root,
        functions, held)``, ``held`` when sysfs names each function's driver."""
        self.shown = shown or self._shown
        """How many of ``count`` devices a process with ``environ`` sees; None where only the full reading can
        tell (by default, where one of its variables is set)."""
        self.unsure_when_loaded = unsure_when_loaded
        """Its driver, loaded (``signs``), may list devices sysfs does not show (NVML in a bare container)."""

    def _shown(self, environ: "Mapping[str, str]", count: int) -> "int | None":
        return None if any(name in environ for name in self.names) else count

    @property
    def variables(self) -> str:
        """Its variables as a user would write them: ``A, B or C``."""
        return " or ".join(part for part in (", ".join(self.names[:-1]), self.names[-1]) if part)


def _functions_count(root: str, functions: "list[str]", held: bool) -> int:
    """A vendor's devices where each PCI function is one."""
    return len(functions)


def accelerator(vendor: "int | None", pci_class: "Callable[[], int | None]") -> "str | None":
    """Whose accelerator a PCI function of vendor id ``vendor`` is (a row's name of :data:`ACCELERATORS`), or None
    (another device: a bridge, a NIC, a display card of no vendor read here). ``pci_class`` reads the function's
    class, asked only of a vendor whose accelerators are some of its classes."""
    for name, row in ACCELERATORS.items():
        if row.pci_vendor == vendor:
            if row.classes is None:
                return name
            pci_class_now = pci_class()
            return name if pci_class_now is not None and pci_class_now >> 8 in row.classes else None
    return None


_KFD_NODES = "sys/class/kfd/kfd/topology/nodes"
_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC  # a FIFO under a test root never blocks the hook


def _read(path: str, folder: int | None = None, size: int = 64) -> bytes | None:
    """A small sysfs file's bytes, or None; ``path`` relative to the open ``folder`` where one is given (the
    walk from the root to the folder is then made once, not once a file: a budget of benchmarks/startup.py)."""
    try:
        fd = os.open(path, _FLAGS, dir_fd=folder)
    except OSError:
        return None
    try:
        return os.read(fd, size)
    except OSError:
        return None
    finally:
        os.close(fd)


def _hex(path: str, folder: int | None = None) -> int | None:
    """The hexadecimal number a small sysfs file holds (``0x10de``), or None."""
    try:
        return int((_read(path, folder) or b"").strip(), 16)
    except ValueError:
        return None


def _listdir(path: str) -> list[str]:
    try:
        return os.listdir(path)
    except OSError:
        return []


def _folder(path: str) -> int | None:
    try:
        return os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return None


# -- which of the machine's GPUs a process may use ----------------------------------------------------------
#
# sysfs is not a container's: it shows every GPU of the host. A container runtime gives a process some of them
# through its device files (and, NVIDIA's legacy runtime, its driver's proc entries), and the runtimes then
# enumerate only those: ROCm's libhsakmt skips a GPU whose render node cannot be opened
# (topology_sysfs_check_node_supported); CUDA and NVML list a GPU whose /dev/nvidiaN the process may open
# (NVIDIA/nvidia-docker#170: a container holding /dev/nvidia1 alone lists one GPU); libnvidia-container mounts
# only the container's GPUs under proc/driver/nvidia/gpus (nvc_mount.c, mount_procfs_gpu). The glance and the
# full reading both ask here, so that they count the same GPUs.


def _bus(name: str) -> tuple[int, str] | None:
    """A PCI address as a key, whatever the domain's width (the NVIDIA driver may write 32-bit domains). Not
    ``pci.normalize``, the one reader of PCI addresses: its import brings ``cpuset``, which a process that is
    no worker never loads; this key only compares two sysfs-written names."""
    domain, _, rest = name.lower().partition(":")
    try:
        return int(domain, 16), rest
    except ValueError:
        return None


def _minor(data: bytes | None) -> int | None:
    """The ``Device Minor`` of an NVIDIA driver's ``information`` file."""
    for line in (data or b"").splitlines():
        key, _, value = line.partition(b":")
        if key.strip() == b"Device Minor":
            value = value.strip()
            return int(value) if value.isdigit() and len(value) < 10 else None
    return None


_DRIVERS = "sys/bus/pci/drivers"


def shows_drivers(root: str) -> bool:
    """Whether ``root``'s sysfs says which driver holds each PCI function (the live one does; captures do not)."""
    return os.path.isdir(os.path.join(root, _DRIVERS))


def held_by(root: str, function: str) -> str | None:
    """The driver that holds the PCI function sysfs names ``function`` (None: none does, or unknown)."""
    try:
        return os.path.basename(os.readlink(os.path.join(root, "sys/bus/pci/devices", function, "driver")))
    except OSError:
        return None


def _held(root: str, driver: str) -> list[str]:
    """The PCI functions ``driver`` holds: one listing, where a scan of every function would read hundreds."""
    return [name for name in _listdir(os.path.join(root, _DRIVERS, driver)) if _bus(name) is not None]


def nvidia_usable(root: str, functions: "list[str]", *, held: bool = False,
                  minors: "Mapping[str, int] | None" = None) -> "tuple[list[str], dict[str, str]]":
    """Of the NVIDIA GPU functions ``functions`` (sysfs names), those a process under ``root`` may use, and
    why each other one is not.

    Where sysfs says which driver holds each function, one the nvidia driver does not hold is not CUDA's
    (vfio-pci holds it for a virtual machine, or no driver does). Where the driver lists GPUs in
    ``proc/driver/nvidia/gpus``, one it does not list is not CUDA's either (a container runtime left it out).
    Where some of the GPUs' device files (``dev/nvidiaN``) exist, one whose file is missing is not in the
    process's view (a container given some of the host's GPUs). Where none exists, nothing is told (a host
    whose driver makes them on first use). ``held``: the functions are the nvidia driver's own list.
    ``minors``: each function's device minor, known already (another process's root is then only listed and
    its files' presence asked: nothing in it is opened, whatever its owner planted there).
    """
    drivers = not held and shows_drivers(root)
    listed = {key: name for name in _listdir(os.path.join(root, "proc/driver/nvidia/gpus"))
              if (key := _bus(name)) is not None}
    usable, why = [], {}
    for function in functions:
        holder = held_by(root, function) if drivers else "nvidia"
        if holder != "nvidia":
            why[function] = f"{holder} holds it, not the nvidia driver" if holder else "no driver holds it"
        elif listed and _bus(function) not in listed:
            why[function] = "not among the NVIDIA driver's GPUs in this view"
        else:
            usable.append(function)
    files = {}
    for function in usable:
        if minors is not None:
            minor = minors.get(function)
        else:
            key = _bus(function)
            entry = listed.get(key) if key is not None else None
            minor = None if entry is None else _minor(
                _read(os.path.join(root, "proc/driver/nvidia/gpus", entry, "information"), size=4096))
        if minor is not None:
            files[function] = f"dev/nvidia{minor}"
    present = {function for function, path in files.items() if os.path.exists(os.path.join(root, path))}
    if present:
        for function in [f for f in usable if f in files and f not in present]:
            why[function] = f"its device file /{files[function]} is not in this view"
            usable.remove(function)
    return usable, why


def render_node_absent(root: str, minor: int) -> bool:
    """Whether ROCm skips the GPU of DRM render minor ``minor`` under ``root`` as libhsakmt does: its render
    node is missing. Asked only of a root that has a ``dev`` folder (the live one; a capture may hold none)."""
    return os.path.isdir(os.path.join(root, "dev")) and not os.path.exists(
        os.path.join(root, f"dev/dri/renderD{minor}"))


def _kfd_gpus(root: str) -> int | None:
    """How many KFD topology nodes have compute units (ROCr's GPUs) and a render node the process may open;
    None where no node has compute units (the full reading then takes the PCI functions)."""
    nodes = _folder(os.path.join(root, _KFD_NODES))
    if nodes is None:
        return None
    count, seen = 0, False
    try:
        for name in os.listdir(nodes):
            gpu, minor = False, 0
            for line in (_read(f"{name}/properties", nodes, 65536) or b"").splitlines():
                if line.startswith(b"simd_count "):
                    gpu = line[11:].strip() not in (b"", b"0")
                elif line.startswith(b"drm_render_minor "):
                    value = line[17:].strip()
                    minor = int(value) if value.isdigit() and len(value) < 10 else 0
            seen = seen or gpu
            count += gpu and not (minor > 0 and render_node_absent(root, minor))
    finally:
        os.close(nodes)
    return count if seen else None


def _counts(root: str) -> "dict[str, int] | None":
    """How many devices of each vendor (a row of :data:`ACCELERATORS`) the full reading of the machine under
    ``root`` finds (see ``inventory.read_gpus``), or None when only it can tell: sysfs shows none, but a driver is
    loaded that can list devices sysfs does not show (NVIDIA's: NVML then lists the GPUs of a bare container; a
    capture may have left the vendor files out)."""
    found: dict[str, list[str]] = {name: [] for name in ACCELERATORS}
    devices = _folder(os.path.join(root, "sys/bus/pci/devices"))
    drivers = shows_drivers(root)
    try:
        if drivers:
            # sysfs names each function's driver: the accelerator drivers' own lists are all there is to read (the
            # runtimes use only the devices their drivers hold), where a scan would read every function's vendor
            # (hundreds on a GPU host: bridges, switches, NICs, disks).
            # A driver holds only its vendor's functions: their class is read where the row asks it, no vendor file.
            for vendor, row in ACCELERATORS.items():
                found[vendor] += [n for n in _held(root, row.driver)
                                  if row.classes is None or (_hex(f"{n}/class", devices) or 0) >> 8 in row.classes]
        else:
            for name in os.listdir(devices) if devices is not None else ():
                which = accelerator(_hex(f"{name}/vendor", devices), lambda: _hex(f"{name}/class", devices))  # noqa: B023
                if which is not None:
                    found[which].append(name)
    finally:
        if devices is not None:
            os.close(devices)
    counts = {vendor: row.count(root, found[vendor], drivers) for vendor, row in ACCELERATORS.items()}
    if not any(counts.values()) and any(row.unsure_when_loaded and _loaded(root, row) for row in ACCELERATORS.values()):
        return None
    return counts


def _loaded(root: str, row: Accelerator) -> bool:
    """Whether ``row``'s driver shows itself loaded under ``root`` (a folder of its ``signs`` holds anything)."""
    return any(_listdir(os.path.join(root, folder)) for folder in row.signs)


def nvidia_driver_loaded(root: str) -> bool:
    """Whether the NVIDIA driver is loaded under ``root`` (its GPU entries or its module show): where sysfs shows
    no GPU of its, NVML then lists the GPUs of a bare container."""
    return _loaded(root, ACCELERATORS["nvidia"])


def machine_gpus(root: str) -> int | None:
    """How many GPUs, of every vendor, the full reading of the machine under ``root`` finds, or None when
    only it can tell."""
    counts = _counts(root)
    return None if counts is None else sum(counts.values())


def _visible(value: str | None, count: int) -> int | None:
    """How many GPUs CUDA shows for ``CUDA_VISIBLE_DEVICES=value`` on a machine of ``count`` GPUs, when its
    entries are indices (CUDA's rule: a list ends at its first entry that names no GPU, or one named again);
    None when an entry names a GPU another way (a UUID: only the full reading can match it)."""
    if value is None:
        return count
    chosen: list[int] = []
    for raw in value.split(","):
        entry = raw.strip()
        if not (entry.isascii() and entry.isdigit()):
            if entry and entry[:4].upper() in ("GPU-", "MIG-"):
                return None
            break  # an empty or malformed entry ends the list
        index = int(entry) if len(entry) < 10 else count
        if index >= count or index in chosen:
            break
        chosen.append(index)
    return len(chosen)


def _plain(entry: str) -> bool:
    """A decimal index as both ROCr and HIP read it alike (``01`` is octal to ROCr, invalid to HIP)."""
    return entry.isascii() and entry.isdigit() and (entry == "0" or entry[0] != "0") and len(entry) < 10


def _rocm_visible(environ: "Mapping[str, str]", count: int) -> int | None:
    """How many AMD GPUs HIP shows under ROCR_VISIBLE_DEVICES, then HIP's (or CUDA's) list, where every entry
    is a plain index; None where one is anything else (a UUID, ``0x1``): the full reading's rules decide."""
    rocr = environ.get(ROCR_VISIBLE_DEVICES)
    left = count
    if rocr is not None:
        chosen: list[int] = []
        for raw in rocr.split(",")[:count] if rocr else ():
            entry = raw.strip(" \t\n\v\f\r")
            if entry and not _plain(entry):
                return None
            if not entry or int(entry) >= count or int(entry) in chosen:
                break
            chosen.append(int(entry))
        left = len(chosen)
    value = environ.get(HIP_VISIBLE_DEVICES) or environ.get(CUDA_VISIBLE_DEVICES) or ""
    if not value:
        return left
    shown: set[int] = set()
    position = 0
    while position < len(value):  # HIP's walk: a last comma ends the list, an index named again is skipped
        end = value.find(",", position)
        end = len(value) if end < 0 else end
        entry = value[position:end]
        if "GPU-" in entry:
            return None
        if not _plain(entry) or int(entry) >= left:
            break
        shown.add(int(entry))
        position = end + 1
    return len(shown)


def _nvidia_count(root: str, functions: "list[str]", held: bool) -> int:
    """NVIDIA's GPUs: those of its functions a process can use (the driver's entries and device files)."""
    return len(nvidia_usable(root, functions, held=held)[0]) if functions else 0


def _amd_count(root: str, functions: "list[str]", held: bool) -> int:
    """AMD's GPUs: the KFD topology's where it shows them (each partition counts), else the functions."""
    if functions or _listdir(os.path.join(root, "sys/class/kfd")):
        kfd = _kfd_gpus(root)
        return len(functions) if kfd is None else kfd
    return 0


#: The accelerators numapin reads, a row per vendor (a ``Vendor``'s value): the one place their PCI ids, drivers,
#: variables and device files are written; with its reader module (``module``), all a vendor is to numapin (the
#: synthetic machines' writer also makes sysfs as each driver does). A GPU's classes are base class 0x03 (0x0300
#: VGA, 0x0302 3D controller); AMD's add 0x0380 (other display: MI100-MI250) and 0x1200 (processing accelerator:
#: MI300X and later); Habana Labs' (Intel Gaudi's) functions are all accelerators. The NVIDIA driver shows itself
#: loaded by its GPUs' entries or its module (NVML then lists a bare container's GPUs), AMD's by its KFD
#: topology. Kept here, not in the vendors' modules: every Python process of a job with the start-up file asks
#: this table, and importing three modules more costs each start more than its work. Its order is the order
#: vendors are read in.
ACCELERATORS = {
    "nvidia": Accelerator(0x10DE, (0x0300, 0x0302), "nvidia", "numapin.facts.nvidia", names=(CUDA_VISIBLE_DEVICES,),
                          maker="NVIDIA", device="cuda", files=r"nvidia\d+", only=(),
                          signs=("proc/driver/nvidia/gpus", "sys/module/nvidia"), count=_nvidia_count,
                          shown=lambda environ, count: _visible(environ.get(CUDA_VISIBLE_DEVICES), count),
                          unsure_when_loaded=True),
    "amd": Accelerator(0x1002, (0x0300, 0x0302, 0x0380, 0x1200), "amdgpu", "numapin.facts.rocm",
                       names=(ROCR_VISIBLE_DEVICES, HIP_VISIBLE_DEVICES, CUDA_VISIBLE_DEVICES), maker="AMD",
                       device="hip", torch=("cuda", "hip"), files=r"dri/renderD\d+|kfd", signs=("sys/class/kfd",),
                       only=(ROCR_VISIBLE_DEVICES, HIP_VISIBLE_DEVICES), count=_amd_count, shown=_rocm_visible),
    "gaudi": Accelerator(0x1DA3, None, "habanalabs", "numapin.facts.gaudi",
                         names=(HABANA_VISIBLE_MODULES, HLS_MODULE_ID), maker="Intel Gaudi", device="hpu",
                         files=r"accel/accel\d+|hl\d+"),
}


def visibility() -> "tuple[str, ...]":
    """Every variable that changes which devices a process sees, or in which order: the environment's known ones
    and every row's (a vendor added to the table brings its own)."""
    return tuple(dict.fromkeys((*GPU_VISIBILITY, *(name for row in ACCELERATORS.values() for name in row.names))))


def visible_without_rank(environ: "Mapping[str, str]") -> int | None:
    """How many GPUs this process sees, where that count alone says whether it is a worker (no launcher rank
    is set); None where a rank is set or the glance is unsure, for the full reading to decide."""
    return glimpse(environ)[0]


def glimpse(environ: "Mapping[str, str]") -> "tuple[int | None, str | None]":
    """:func:`visible_without_rank`'s count, and the one vendor (a row of :data:`ACCELERATORS`) whose GPUs the
    host shows (None for none, or two, or a rank set), from one look at the PCI devices."""
    if any(environ.get(name, "").strip() for name in LOCAL_RANK_VARIABLES):
        return None, None
    counts = _counts(os.environ.get(FSROOT) or "/")  # the root the full reading would read
    if counts is None or sum(map(bool, counts.values())) > 1 or environ.get(ACCELERATOR):
        return None, None  # a host of two vendors' GPUs: whose the process drives is the full reading's question
    vendor = next((name for name, count in counts.items() if count), None)
    # Each vendor's rule: a list of its variables the glance can follow, or None for the full reading.
    return (0, None) if vendor is None else (ACCELERATORS[vendor].shown(environ, counts[vendor]), vendor)


def no_worker(environ: "Mapping[str, str]") -> str | None:
    """Why this process is certainly no GPU worker (no local rank, and not exactly one GPU visible); None when
    it may be one, for the full reading to decide."""
    visible = visible_without_rank(environ)
    return None if visible is None or visible == 1 else not_a_worker(visible)


def not_a_worker(visible: int) -> str:
    """What the start-up hook says of a process with no launcher rank and ``visible`` GPUs (not one)."""
    return f"not a worker: no local rank and {visible} GPUs visible"


def load_nvml() -> "Any | None":
    """The ``pynvml`` module of the ``nvml`` extra, or None when it is not installed. Here, not with the GPU
    readers: ``numapin ps`` asks NVML for its processes before it reads anything of the machine."""
    try:
        import pynvml  # type: ignore[import-not-found,import-untyped,unused-ignore]
    except ImportError:
        return None
    return pynvml
