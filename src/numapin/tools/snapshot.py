"""Capture a machine's topology files for a bug report.

The capture holds exactly the files that numapin's readers read on this
machine (recorded as they read them), plus the process's CPU and memory masks
from ``proc/self/status``. Nothing else: no environment, no command lines, no
other process's data. ``numapin show --root`` on the unpacked capture prints
what ``numapin show`` prints here.
"""

from __future__ import annotations

import io
import os
import tarfile
import time
from pathlib import Path

from ..base.errors import UsageError, quoted
from ..facts.host import Host
from ..facts.inventory import read_gpus
from ..facts.kinds import PriorityRule, read_kinds
from ..facts.network import read_network
from ..facts.topology import read_topology

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import BinaryIO

__all__ = ["SUFFIXES", "TOP", "capture"]

#: The folder inside the archive that stands in for ``/``.
TOP = "numapin-snapshot"

# Lines of proc/self/status that describe placement; the rest (name, ids,
# memory use) is not the readers' business.
_STATUS_KEYS = ("Cpus_allowed:", "Cpus_allowed_list:", "Mems_allowed:", "Mems_allowed_list:")
# Mount entries the cgroup reader needs; other mounts stay private.
_CGROUP_TYPES = (" cgroup ", " cgroup2 ", " cpuset ")


def _cpuset_line(line: str) -> bool:
    """A /proc/self/cgroup line the cpuset reader uses: v2's, or v1's cpuset hierarchy."""
    parts = line.split(":", 2)
    return len(parts) == 3 and ((parts[0] == "0" and parts[1] == "") or "cpuset" in parts[1].split(","))


def _filtered(rel: str, text: str) -> str:
    if rel == "proc/self/cgroup":
        # Other controllers' paths name the job's other cgroups: none of the readers' business.
        return "".join(line for line in text.splitlines(keepends=True) if _cpuset_line(line))
    if rel == "proc/self/status":
        return "".join(line for line in text.splitlines(keepends=True) if line.startswith(_STATUS_KEYS))
    if rel in ("proc/self/mountinfo", "proc/mounts"):
        return "".join(line for line in text.splitlines(keepends=True) if any(t in line for t in _CGROUP_TYPES))
    return text


#: The names an archive may have: numapin writes gzip-compressed tar, and says so in the name.
SUFFIXES = (".tar.gz", ".tgz")


def capture(out: str | os.PathLike[str] | BinaryIO, root: str | os.PathLike[str] | None = None, *,
            force: bool = False) -> list[str]:
    """Write ``out`` (a .tar.gz, or a binary stream) holding the files numapin reads under ``root``;
    returns their paths.

    An existing ``out`` is a :class:`UsageError` unless ``force``; so is a name
    that promises another format (``out.zip``).
    """
    stream: BinaryIO | None = None
    if not isinstance(out, (str, os.PathLike)):
        stream = out
    else:
        name = os.fspath(out)
        if not name.endswith(SUFFIXES):
            raise UsageError(f"{quoted(name)}: a snapshot is a gzip-compressed tar archive; name it "
                             f"{' or '.join('NAME' + s for s in SUFFIXES)} (or - for standard output)", value=name)
        if not force and os.path.lexists(out):
            raise UsageError(f"{quoted(name)} exists; use --force to replace it", value=name)
    journal: list[str] = []
    topology = read_topology(root, journal=journal)
    inventory = read_gpus(topology, nvml=False, journal=journal)
    read_kinds(topology, rule=PriorityRule.PCT, journal=journal)  # the CPU's model too, which that rule reads
    read_network(topology, inventory.gpus, journal=journal)
    host = Host(topology.root)
    wanted = list(dict.fromkeys([*journal, "proc/self/status"]))
    links = _links(host, wanted)
    captured: list[str] = []
    stamp = time.time()
    # A stream is written as one (w|gz): standard output cannot seek.
    with (tarfile.open(fileobj=stream, mode="w|gz") if stream is not None
          else tarfile.open(Path(name), "w:gz")) as archive:
        # Folders the readers list must exist even when empty of files we keep (dev: where it exists, a GPU
        # whose device file is missing is not in the view).
        for folder in ("sys/devices/system/cpu", "sys/devices/system/node", "dev"):
            if os.path.isdir(host.path(folder)):
                info = tarfile.TarInfo(f"{TOP}/{folder}")
                info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o755, stamp
                archive.addfile(info)
        # Which GPUs a container was given its device files say: the capture keeps those of the GPUs in view,
        # as empty files (their presence is all the readers ask; a device is never opened).
        for path in sorted({p.lstrip("/") for gpu in inventory.gpus for p in gpu.devices}):
            if os.path.exists(host.path(path)):
                info = tarfile.TarInfo(f"{TOP}/{path}")
                info.size, info.mode, info.mtime = 0, 0o644, stamp
                archive.addfile(info, io.BytesIO(b""))
                captured.append(path)
        for link, target in links.items():
            info = tarfile.TarInfo(f"{TOP}/{link}")
            info.type, info.mode, info.mtime = tarfile.SYMTYPE, 0o777, stamp
            info.linkname = os.path.relpath(target, os.path.dirname(link))
            archive.addfile(info)
        for rel in wanted:
            text = None if rel.endswith("/") else host.read(rel)
            if text is None:
                continue
            data = _filtered(rel, text).encode()
            # Where sysfs reached the file through a link (a class entry, sys/bus/pci/devices), the file
            # is kept where the link leads, and the link beside it: readers find devices by their links.
            real = (host.resolve(rel) or rel) if rel.startswith("sys/") else rel
            info = tarfile.TarInfo(f"{TOP}/{real}")
            info.size, info.mode, info.mtime = len(data), 0o644, stamp
            archive.addfile(info, io.BytesIO(data))
            captured.append(rel)
    return captured


def _links(host: Host, paths: list[str]) -> dict[str, str]:
    """The symbolic links of ``sys/`` on the way to ``paths``, each with where it leads (both under the root)."""
    links: dict[str, str] = {}
    seen: set[str] = set()
    for rel in paths:
        if not rel.startswith("sys/"):
            continue
        parts = rel.strip("/").split("/")
        for end in range(2, len(parts) + 1):
            prefix = "/".join(parts[:end])
            if prefix in seen:
                continue
            seen.add(prefix)
            if os.path.islink(host.path(prefix)):
                target = host.resolve(prefix)
                if target is not None:
                    links[prefix] = target
    return links
