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
    HABANA_VISIBLE_MODULES,
    HIP_VISIBLE_DEVICES,
    HLS_MODULE_ID,
    LOCAL_RANK_VARIABLES,
    ROCR_VISIBLE_DEVICES,
)

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing at run time (mypy knows the name)
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from typing import Any

__all__ = ["ACCELERATORS", "Accelerator", "accelerator", "glimpse", "held_by", "load_nvml", "machine_gpus",
           "no_worker",
           "not_a_worker", "nvidia_driver_loaded", "nvidia_usable", "render_node_absent", "shows_drivers",
           "visible_without_rank"]

class Accelerator:
    """One vendor's row of :data:`ACCELERATORS`: how its devices are found and named. A plain class, not a
    record of numapin's: the glance defines it in every Python process of a job, and imports nothing for it."""

    __slots__ = ("classes", "device", "driver", "maker", "module", "pci_vendor", "signs", "variables")

    def __init__(self, pci_vendor: int, classes: "tuple[int, ...] | None", driver: str, module: str,
                 signs: "tuple[str, ...]", variables: str, maker: str, device: str) -> None:
        self.pci_vendor = pci_vendor
        """Its PCI vendor id."""
        self.classes = classes
        """The PCI classes of its accelerators (``class >> 8``); None: every function of it is one."""
        self.driver = driver
        """The kernel driver its runtime needs its devices held by."""
        self.module = module
        """The module of ``numapin.facts`` that reads its devices and says which a process sees."""
        self.signs = signs
        """The folders that show its driver loaded where sysfs shows none of its functions."""
        self.variables = variables
        """The variables that choose its devices, as a user would set them."""
        self.maker = maker
        """Its maker's name as users write it."""
        self.device = device
        """How its runtime names a device of it in a process (``cuda``, ``hip``, ``hpu``)."""


#: The accelerators numapin reads, a row per vendor (a ``Vendor``'s value). The only place their PCI ids and
#: drivers are written, but for the synthetic machines' writer, which makes sysfs as each driver does. A GPU's
#: classes are base class 0x03 (0x0300 VGA, 0x0302 3D controller); AMD's add 0x0380 (other display: MI100-MI250)
#: and 0x1200 (processing accelerator: MI300X and later); Habana Labs' (Intel Gaudi's) functions are all
#: accelerators. The NVIDIA driver shows itself loaded by its GPUs' entries or its module (NVML then lists a bare
#: container's GPUs), AMD's by its KFD topology. Kept here, not in the vendors' modules: every Python process of a
#: job with the start-up file asks this table, and importing three modules more costs each start more than its
#: work.
ACCELERATORS = {
    "nvidia": Accelerator(0x10DE, (0x0300, 0x0302), "nvidia", "nvidia",
                          ("proc/driver/nvidia/gpus", "sys/module/nvidia"), "CUDA_VISIBLE_DEVICES", "NVIDIA", "cuda"),
    "amd": Accelerator(0x1002, (0x0300, 0x0302, 0x0380, 0x1200), "amdgpu", "rocm", ("sys/class/kfd",),
                       "ROCR_VISIBLE_DEVICES, HIP_VISIBLE_DEVICES or CUDA_VISIBLE_DEVICES", "AMD", "hip"),
    "gaudi": Accelerator(0x1DA3, None, "habanalabs", "gaudi", (), "HABANA_VISIBLE_MODULES or HLS_MODULE_ID",
                         "Intel Gaudi", "hpu"),
}
_BY_ID = {row.pci_vendor: (name, row.classes) for name, row in ACCELERATORS.items()}


def accelerator(vendor: "int | None", pci_class: "Callable[[], int | None]") -> "str | None":
    """Whose accelerator a PCI function of vendor id ``vendor`` is (a row's name of :data:`ACCELERATORS`), or None
    (another device: a bridge, a NIC, a display card of no vendor read here). ``pci_class`` reads the function's
    class, asked only of a vendor whose accelerators are some of its classes."""
    found = None if vendor is None else _BY_ID.get(vendor)
    if found is None:
        return None
    if found[1] is None:
        return found[0]
    pci_class_now = pci_class()
    return found[0] if pci_class_now is not None and pci_class_now >> 8 in found[1] else None


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


def _counts(root: str) -> "tuple[int, int, int] | None":
    """How many NVIDIA and AMD GPUs and Gaudis the full reading of the machine under ``root`` finds (see
    ``inventory.read_gpus``), or None when only it can tell: sysfs shows none, but an NVIDIA driver is loaded (NVML
    then lists the GPUs of a bare container; a capture may have left the vendor files out)."""
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
    nvidia_functions, amd, gaudi = found["nvidia"], len(found["amd"]), len(found["gaudi"])
    nvidia = len(nvidia_usable(root, nvidia_functions, held=drivers)[0]) if nvidia_functions else 0
    if amd or _listdir(os.path.join(root, "sys/class/kfd")):
        kfd = _kfd_gpus(root)
        amd = amd if kfd is None else kfd  # ROCm's GPUs are the KFD topology's (partitions each count)
    if nvidia + amd + gaudi == 0 and nvidia_driver_loaded(root):
        return None
    return nvidia, amd, gaudi


def nvidia_driver_loaded(root: str) -> bool:
    """Whether the NVIDIA driver is loaded under ``root`` (its GPU entries or its module show): where sysfs shows
    no GPU of its, NVML then lists the GPUs of a bare container."""
    return any(_listdir(os.path.join(root, folder)) for folder in ACCELERATORS["nvidia"].signs)


def machine_gpus(root: str) -> int | None:
    """How many GPUs, of every vendor, the full reading of the machine under ``root`` finds, or None when
    only it can tell."""
    counts = _counts(root)
    return None if counts is None else sum(counts)


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
    if counts is None or sum(map(bool, counts)) > 1 or environ.get(ACCELERATOR):
        return None, None  # a host of two vendors' GPUs: whose the process drives is the full reading's question
    vendor = next((name for name, count in zip(ACCELERATORS, counts, strict=True) if count), None)
    nvidia, amd, gaudi = counts
    if gaudi:  # a module list (or one module) is the full reading's to match against the modules sysfs shows
        return (None if HABANA_VISIBLE_MODULES in environ or HLS_MODULE_ID in environ else gaudi), vendor
    if amd:
        return _rocm_visible(environ, amd), vendor
    return _visible(environ.get(CUDA_VISIBLE_DEVICES), nvidia), vendor


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
