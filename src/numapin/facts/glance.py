"""Whether this process is a GPU worker, at a glance: the first question of the start-up hook, which runs in
every Python process of a job (each tokenizer subprocess, helper script and launcher that is Python).

A process is a worker when a launcher gave it a local rank, or when exactly one GPU is visible to it. The
full answer reads the machine (its topology, every GPU, NVML where installed); most processes of a job are
no workers, and for them the environment and one listing of the PCI devices tell as much: no rank, and a
GPU count that ``CUDA_VISIBLE_DEVICES`` cannot bring to one. Where the glance cannot be certain (a GPU named
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
    from collections.abc import Mapping
    from typing import Any

__all__ = ["AMD", "AMD_CLASSES", "DISPLAY_CLASSES", "GAUDI", "NVIDIA", "load_nvml", "machine_gpus", "no_worker"]

#: NVIDIA's PCI vendor id, and the PCI classes of a GPU (base class 0x03: 0x0300 VGA, 0x0302 3D controller).
NVIDIA = 0x10DE
DISPLAY_CLASSES = (0x0300, 0x0302)
#: AMD's (ATI's) PCI vendor id for its GPUs, and their classes: display ones, 0x0380 (other display, as
#: MI100-MI250 show), and 0x1200, processing accelerator (MI300X and later are no display devices).
AMD = 0x1002
AMD_CLASSES = (0x0300, 0x0302, 0x0380, 0x1200)
#: Habana Labs' (Intel Gaudi's) PCI vendor id: every device of it is an accelerator the habanalabs driver drives.
GAUDI = 0x1DA3
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


def _kfd_gpus(root: str) -> int:
    """How many KFD topology nodes have compute units (ROCr's GPUs)."""
    nodes = _folder(os.path.join(root, _KFD_NODES))
    if nodes is None:
        return 0
    count = 0
    try:
        for name in os.listdir(nodes):
            for line in (_read(f"{name}/properties", nodes, 65536) or b"").splitlines():
                if line.startswith(b"simd_count "):
                    count += line[11:].strip() not in (b"", b"0")
    finally:
        os.close(nodes)
    return count


def _counts(root: str) -> "tuple[int, int, int] | None":
    """How many NVIDIA and AMD GPUs and Gaudis the full reading of the machine under ``root`` finds (see
    ``gpus.read_gpus``), or None when only it can tell: sysfs shows none, but an NVIDIA driver is loaded (NVML
    then lists the GPUs of a bare container; a capture may have left the vendor files out)."""
    nvidia = amd = gaudi = 0
    devices = _folder(os.path.join(root, "sys/bus/pci/devices"))
    try:
        for name in os.listdir(devices) if devices is not None else ():
            vendor = _hex(f"{name}/vendor", devices)
            gaudi += vendor == GAUDI
            if vendor in (NVIDIA, AMD):
                pci_class = _hex(f"{name}/class", devices)
                if pci_class is not None and vendor == NVIDIA:
                    nvidia += pci_class >> 8 in DISPLAY_CLASSES
                elif pci_class is not None:
                    amd += pci_class >> 8 in AMD_CLASSES
    finally:
        if devices is not None:
            os.close(devices)
    if amd or _listdir(os.path.join(root, "sys/class/kfd")):
        amd = _kfd_gpus(root) or amd  # ROCm's GPUs are the KFD topology's (partitions each count)
    if nvidia + amd + gaudi == 0 and (_listdir(os.path.join(root, "proc/driver/nvidia/gpus"))
                                      or _listdir(os.path.join(root, "sys/module/nvidia"))):
        return None
    return nvidia, amd, gaudi


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


def no_worker(environ: "Mapping[str, str]") -> str | None:
    """Why this process is certainly no GPU worker (no local rank, and not exactly one GPU visible); None when
    it may be one, for the full reading to decide."""
    if any(environ.get(name, "").strip() for name in LOCAL_RANK_VARIABLES):
        return None
    counts = _counts(os.environ.get(FSROOT) or "/")  # the root the full reading would read
    if counts is None or sum(map(bool, counts)) > 1 or environ.get(ACCELERATOR):
        return None  # a host of two vendors' GPUs: whose the process drives is the full reading's question
    nvidia, amd, gaudi = counts
    if gaudi:  # a module list (or one module) is the full reading's to match against the modules sysfs shows
        visible = None if HABANA_VISIBLE_MODULES in environ or HLS_MODULE_ID in environ else gaudi
    elif amd:
        visible = _rocm_visible(environ, amd)
    else:
        visible = _visible(environ.get(CUDA_VISIBLE_DEVICES), nvidia)
    if visible is None or visible == 1:
        return None
    return f"not a worker: no local rank and {visible} GPUs visible"


def load_nvml() -> "Any | None":
    """The ``pynvml`` module of the ``nvml`` extra, or None when it is not installed. Here, not with the GPU
    readers: ``numapin ps`` asks NVML for its processes before it reads anything of the machine."""
    try:
        import pynvml  # type: ignore[import-not-found,import-untyped,unused-ignore]
    except ImportError:
        return None
    return pynvml
