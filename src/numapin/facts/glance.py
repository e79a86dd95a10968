"""Whether this process is a GPU worker, at a glance: the first question of the start-up hook, which runs in
every Python process of a job (each tokenizer subprocess, helper script and launcher that is Python).

A process is a worker when a launcher gave it a local rank, or when exactly one GPU is visible to it. The
full answer reads the machine (its topology, every GPU, NVML where installed); most processes of a job are
no workers, and for them the environment and one listing of the PCI devices tell as much: no rank, and a
GPU count that ``CUDA_VISIBLE_DEVICES`` cannot bring to one. Where the glance cannot be certain (a GPU named
by UUID, sysfs showing no GPU while an NVIDIA driver is loaded, so that NVML may find some), it says so, and
the full reading decides. Imports nothing beyond the host reader.
"""

from __future__ import annotations

from ..base.environment import CUDA_VISIBLE_DEVICES, LOCAL_RANK_VARIABLES
from .host import Host

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing at run time (mypy knows the name)
if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = ["DISPLAY_CLASSES", "NVIDIA", "machine_gpus", "no_worker"]

#: NVIDIA's PCI vendor id, and the PCI classes of a GPU (base class 0x03: 0x0300 VGA, 0x0302 3D controller).
NVIDIA = 0x10DE
DISPLAY_CLASSES = (0x0300, 0x0302)


def _hex(text: str | None) -> int | None:
    try:
        return None if text is None else int(text.strip(), 16)
    except ValueError:
        return None


def machine_gpus(host: Host) -> int | None:
    """How many GPUs the full reading of the machine finds (see ``gpus.read_gpus``), or None when only it can
    tell: sysfs shows none, but an NVIDIA driver is loaded (NVML then lists the GPUs of a bare container)."""
    count = 0
    for name in host.listdir("sys/bus/pci/devices"):
        folder = f"sys/bus/pci/devices/{name}"
        if _hex(host.read(f"{folder}/vendor")) == NVIDIA:
            pci_class = _hex(host.read(f"{folder}/class"))
            count += pci_class is not None and pci_class >> 8 in DISPLAY_CLASSES
    if count == 0 and (host.listdir("proc/driver/nvidia/gpus") or host.listdir("sys/module/nvidia")):
        return None  # vendor files a capture left out, or a container sysfs does not show: read it all
    return count


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


def no_worker(environ: Mapping[str, str]) -> str | None:
    """Why this process is certainly no GPU worker (no local rank, and not exactly one GPU visible); None when
    it may be one, for the full reading to decide."""
    if any(environ.get(name, "").strip() for name in LOCAL_RANK_VARIABLES):
        return None
    count = machine_gpus(Host.at(None))
    visible = None if count is None else _visible(environ.get(CUDA_VISIBLE_DEVICES), count)
    if visible is None or visible == 1:
        return None
    return f"not a worker: no local rank and {visible} GPUs visible"
