"""The process's cgroup cpuset, v1 or v2, and the room its memory limits leave, read through a :class:`Host`.

A container or batch job usually restricts CPUs through its cpuset; that
restriction, not ``range(os.cpu_count())``, is what an unconstrained process
may use. hwloc's rules are followed so that numapin agrees with it: v1 reads
``cpuset.cpus`` / ``cpuset.mems`` (``cpus`` / ``mems`` on a ``noprefix`` or
legacy ``cpuset`` mount), v2 prefers ``cpuset.cpus.effective``.
"""

from __future__ import annotations

import posixpath

from ..base.frozen import frozen
from ..cpuset import CpuSet
from .host import Host

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["Cgroup", "MemoryLimit", "made_by_root", "memory_room", "read_cgroup"]


@frozen
class Cgroup:
    """The cpuset a process lives in; ``cpus``/``mems`` None when unrestricted or unknown."""

    version: int | None
    path: str | None
    folder: str | None
    cpus: CpuSet | None
    mems: CpuSet | None

    def __str__(self) -> str:
        if self.version is None:
            return "no cgroup cpuset"
        return f"cgroup v{self.version} {self.path}: cpus {self.cpus}, mems {self.mems}"


@frozen
class _Mount:
    point: str
    root: str
    fstype: str
    options: frozenset[str]


def _unescape(field: str) -> str:
    # /proc/mounts escapes blanks and backslashes as octal.
    return field.replace("\\040", " ").replace("\\011", "\t").replace("\\012", "\n").replace("\\134", "\\")


# The filesystem types of cpuset mounts (cgroup, cgroup2, the legacy cpuset), as each line starts them.
_TYPES = ("cgroup", "cpuset")


def _mounts(host: Host) -> list[_Mount]:
    """The cgroup mounts: the others, thousands on a host running containers, are passed over unparsed."""
    found: list[_Mount] = []
    info = host.read("proc/self/mountinfo")
    if info:
        for line in info.splitlines():
            left, sep, right = line.partition(" - ")
            if not right.startswith(_TYPES):
                continue
            fields, tail = left.split(), right.split()
            if not sep or len(fields) < 6 or len(tail) < 3:
                continue
            options = frozenset(fields[5].split(",")) | frozenset(tail[2].split(","))
            found.append(_Mount(_unescape(fields[4]), _unescape(fields[3]), tail[0], options))
        return found
    for line in (host.read("proc/mounts") or "").splitlines():
        fields = line.split()
        if len(fields) >= 4 and fields[2].startswith(_TYPES):
            found.append(_Mount(_unescape(fields[1]), "/", fields[2], frozenset(fields[3].split(","))))
    return found


def _membership(host: Host, process: str = "self", controller: str = "cpuset") -> tuple[str | None, str | None]:
    """(v1 path of ``controller``'s hierarchy, v2 path) from ``proc/PROCESS/cgroup``.

    Without that file, the legacy ``proc/PROCESS/cpuset`` names the path, which
    then applies to whichever hierarchy is mounted.
    """
    v1: str | None = None
    v2: str | None = None
    for line in (host.read(f"proc/{process}/cgroup") or "").splitlines():
        parts = line.strip().split(":", 2)
        if len(parts) != 3:
            continue
        hierarchy, controllers, path = parts
        if hierarchy == "0" and controllers == "":
            v2 = path
        elif controller in controllers.split(","):
            v1 = path
    if v1 is None and v2 is None and controller == "cpuset":
        legacy = host.read(f"proc/{process}/cpuset")
        if legacy and legacy.strip().startswith("/"):
            v1 = v2 = legacy.strip()
    return v1, v2


def _read_set(host: Host, folder: str, names: tuple[str, ...], stop: str,
              warn: Callable[[str], None]) -> CpuSet | None:
    """The first of ``names`` readable in ``folder`` or, failing that, in its parents up to ``stop``."""
    current = folder
    while True:
        for name in names:
            path = posixpath.join(current, name)
            text = host.read(path)
            if text is not None and text.strip():
                try:
                    return CpuSet.parse(text)
                except ValueError:
                    shown = text.strip()[:40]
                    warn(f"cgroup file {path} is not a list of ids ({shown!r}): that restriction is ignored")
                    return None
        if current == stop or len(current) <= len(stop):
            return None
        current = posixpath.dirname(current)


def _folder(mount: _Mount, path: str) -> str:
    rel = path
    # With a cgroup namespace (or a bind mount) the mount shows only part of the tree.
    if mount.root not in ("", "/") and (path == mount.root or path.startswith(mount.root + "/")):
        rel = path[len(mount.root):]
    return posixpath.normpath(posixpath.join(mount.point, rel.lstrip("/")))


def read_cgroup(host: Host, warn: Callable[[str], None] | None = None, *, pid: int | None = None) -> Cgroup:
    """This process's cpuset restriction (or process ``pid``'s) as far as the files tell; ``warn`` hears of
    files it cannot read."""
    say = warn or (lambda message: None)
    v1_path, v2_path = _membership(host, "self" if pid is None else str(pid))
    mounts = _mounts(host)
    if v1_path is not None:
        for mount in mounts:
            legacy = mount.fstype == "cpuset"
            if legacy or (mount.fstype == "cgroup" and "cpuset" in mount.options):
                prefix = "" if legacy or "noprefix" in mount.options else "cpuset."
                folder = _folder(mount, v1_path)
                cpus = _read_set(host, folder, (prefix + "cpus",), mount.point, say)
                mems = _read_set(host, folder, (prefix + "mems",), mount.point, say)
                return Cgroup(1, v1_path, folder, cpus, mems)
    if v2_path is not None:
        for mount in mounts:
            if mount.fstype == "cgroup2":
                folder = _folder(mount, v2_path)
                cpus = _read_set(host, folder, ("cpuset.cpus.effective", "cpuset.cpus"), mount.point, say)
                mems = _read_set(host, folder, ("cpuset.mems.effective", "cpuset.mems"), mount.point, say)
                return Cgroup(2, v2_path, folder, cpus, mems)
    return Cgroup(None, v1_path or v2_path, None, None, None)


@frozen
class MemoryLimit:
    """The tightest memory limit over a process's cgroups: what it leaves, and the numbers that say so."""

    room: int
    """Bytes the cgroup may still take before its OOM killer acts: the limit less what it holds that the kernel
    cannot reclaim at once (its usage less its inactive file cache)."""
    limit: int
    used: int
    path: str
    """The file of the limit (``.../memory.max``, ``.../memory.limit_in_bytes``)."""

    def __str__(self) -> str:
        from ..base.text import format_size

        return (f"the memory cgroup's limit {self.path} is {format_size(self.limit)}, "
                f"{format_size(self.used)} of it held")


#: A v1 limit at or past this is no limit (the kernel writes "unlimited" as the largest page-aligned long).
_UNLIMITED = 1 << 62


def _stat_field(text: str | None, names: tuple[str, ...]) -> int:
    """The first of ``names`` in a ``memory.stat``'s lines; 0 where none is."""
    for line in (text or "").splitlines():
        name, _, value = line.partition(" ")
        if name in names and value.strip().isdigit():
            return int(value)
    return 0


def _number(text: str | None) -> int | None:
    value = (text or "").strip()
    return int(value) if value.isascii() and value.isdigit() else None


def memory_room(host: Host, *, pid: int | None = None) -> MemoryLimit | None:
    """The tightest of the memory limits over this process's cgroup (or ``pid``'s) and every cgroup above it, v1
    or v2; None where none applies or none can be read. What a buffer of this process may still take before the
    cgroup's OOM killer ends it (a pod's memory limit)."""
    process = "self" if pid is None else str(pid)
    v1_path, v2_path = _membership(host, process, "memory")
    tightest: MemoryLimit | None = None
    files: tuple[str, str, tuple[str, ...]]  # the limit, the usage, the reclaimable cache's names in memory.stat
    for mount in _mounts(host):
        if mount.fstype == "cgroup" and "memory" in mount.options and v1_path is not None:
            files = ("memory.limit_in_bytes", "memory.usage_in_bytes", ("total_inactive_file", "inactive_file"))
            folder = _folder(mount, v1_path)
        elif mount.fstype == "cgroup2" and v2_path is not None:
            files = ("memory.max", "memory.current", ("inactive_file",))
            folder = _folder(mount, v2_path)
        else:
            continue
        limit_file, usage_file, cache = files
        current = folder
        while True:
            limit = _number(host.read(posixpath.join(current, limit_file)))
            used = _number(host.read(posixpath.join(current, usage_file)))
            if limit is not None and limit < _UNLIMITED and used is not None:
                held = max(0, used - _stat_field(host.read(posixpath.join(current, "memory.stat")), cache))
                found = MemoryLimit(max(0, limit - held), limit, held, posixpath.join(current, limit_file))
                if tightest is None or found.room < tightest.room:
                    tightest = found
            if current == mount.point or len(current) <= len(mount.point):
                break
            current = posixpath.dirname(current)
    return tightest


def made_by_root(controllers: str, path: str, host: Host | None = None) -> bool | None:
    """Whether the cgroup ``path`` of the hierarchy with ``controllers`` (``/proc/PID/cgroup``'s second field:
    empty for v2) and every cgroup above it is a folder of root's; None when it cannot be told here (that
    hierarchy is not mounted, the path lies outside this cgroup namespace's view, the folder is gone).

    A user given a subtree of its own (systemd's ``user@UID.service`` on v2, a folder chowned to it) makes
    folders that are its own: whatever they are named, they were not made by root's kubelet or runtime.
    """
    import os
    import stat

    where = host or Host.at("/")
    wanted = frozenset(c for c in controllers.split(",") if c)
    for mount in _mounts(where):
        if not (mount.fstype == "cgroup2" if not wanted else mount.fstype == "cgroup" and wanted <= mount.options):
            continue
        relative = path
        if mount.root not in ("", "/"):
            if not (path == mount.root or path.startswith(mount.root + "/")):
                return None
            relative = path[len(mount.root):]
        parts = [p for p in relative.split("/") if p]
        if ".." in parts or "." in parts:
            return None  # another cgroup namespace's view: not a folder of this mount
        folder = where.path(mount.point)
        for part in ["", *parts]:
            folder = os.path.join(folder, part) if part else folder
            try:
                info = os.lstat(folder)
            except OSError:
                return None
            if not stat.S_ISDIR(info.st_mode) or info.st_uid != 0:
                return False
        return True
    return None
