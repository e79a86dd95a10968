"""Memory placement: NUMA memory policies, page migration, and where memory lives.

A memory policy belongs to a *thread*: ``set_mempolicy`` affects the calling
thread and the threads it creates afterwards. Threads that already exist keep
their own policy (normally DEFAULT: allocate on the node they run on) — which
the CPU pin makes the GPU's node, so they allocate there too. Pages touched
before the pin stay where they are until :func:`migrate` moves them.

The syscalls are made directly through ctypes (x86_64 and aarch64), so no
libnuma is needed. Every policy is read back after it is set.
"""

from __future__ import annotations

import ctypes
import enum
import errno
import logging
import os
import platform
import re
from dataclasses import dataclass, field

from .cpuset import CpuSet, CpuSpec
from .errors import EnvironmentProblem, UsageError

__all__ = [
    "MemoryPolicy",
    "MemoryPolicyError",
    "MemoryResult",
    "Residency",
    "get_mempolicy",
    "migrate",
    "parse_numa_maps",
    "residency",
    "set_mempolicy",
]

log = logging.getLogger("numapin")

# (set_mempolicy, get_mempolicy, migrate_pages) by machine.
_SYSCALLS = {
    "x86_64": (238, 239, 256),
    "aarch64": (237, 236, 238),
}
# Mode flags the kernel may OR into the mode it reports.
_MODE_FLAGS = (1 << 15) | (1 << 14) | (1 << 13)
_MASK_WORDS = 16  # 1024 nodes: above any real nr_node_ids
_WORD_BITS = ctypes.sizeof(ctypes.c_ulong) * 8


class MemoryPolicy(enum.IntEnum):
    """The kernel's memory policy modes (``MPOL_*``)."""

    DEFAULT = 0
    PREFERRED = 1
    BIND = 2
    INTERLEAVE = 3
    LOCAL = 4
    PREFERRED_MANY = 5


class MemoryPolicyError(EnvironmentProblem):
    """The kernel refused a memory call; names the syscall, the nodes and the errno."""


class NotSupported(MemoryPolicyError):
    """This architecture has no known syscall numbers."""


def _numbers() -> tuple[int, int, int]:
    machine = platform.machine()
    try:
        return _SYSCALLS[machine]
    except KeyError:
        raise NotSupported(f"memory policies are not supported on this architecture ({machine})") from None


_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


def _mask(nodes: CpuSet) -> ctypes.Array[ctypes.c_ulong]:
    words = nodes.to_words(_MASK_WORDS, word_bits=_WORD_BITS)
    return (ctypes.c_ulong * len(words))(*words)


def _syscall(name: str, number: int, *args: object) -> int:
    ret = _libc.syscall(ctypes.c_long(number), *args)
    if ret < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{name}: {os.strerror(err)}")
    return int(ret)


def _errname(code: int | None) -> str:
    return errno.errorcode.get(code or 0, str(code))


def system_nodes() -> CpuSet:
    """The NUMA nodes of the real machine that hold memory."""
    for name in ("has_memory", "online"):
        try:
            with open(f"/sys/devices/system/node/{name}") as f:
                return CpuSet.parse(f.read())
        except (OSError, ValueError):
            continue
    return CpuSet([0])


def allowed_nodes() -> CpuSet:
    """The nodes this process may allocate on (its cpuset's ``mems``, as the kernel reports it)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Mems_allowed_list:"):
                    return CpuSet.parse(line.split(":", 1)[1])
    except (OSError, ValueError):
        pass
    return system_nodes()


def _check_nodes(nodes: CpuSet, call: str) -> None:
    missing = nodes - system_nodes()
    if missing:
        raise UsageError(f"{call}: node(s) {missing} do not exist (memory nodes: {system_nodes()})")
    outside = nodes - allowed_nodes()
    if outside:
        raise UsageError(f"{call}: node(s) {outside} are outside this process's allowed memory nodes "
                         f"{allowed_nodes()} (cpuset.mems)")


def get_mempolicy() -> tuple[MemoryPolicy, CpuSet]:
    """The calling thread's memory policy and its nodes."""
    _, number, _ = _numbers()
    mode = ctypes.c_int(0)
    buf = (ctypes.c_ulong * (_MASK_WORDS + 1))()
    try:
        _syscall("get_mempolicy", number, ctypes.byref(mode), buf,
                 ctypes.c_ulong(_MASK_WORDS * _WORD_BITS + 1), None, ctypes.c_ulong(0))
    except OSError as exc:
        raise MemoryPolicyError(f"get_mempolicy failed: {_errname(exc.errno)} ({exc.strerror})") from exc
    return MemoryPolicy(mode.value & ~_MODE_FLAGS), CpuSet.from_words(list(buf), word_bits=_WORD_BITS)


def set_mempolicy(policy: MemoryPolicy | str, nodes: CpuSpec = ()) -> tuple[MemoryPolicy, CpuSet]:
    """Set the calling thread's memory policy and return it as read back.

    A node that does not exist or lies outside the allowed memory nodes is a
    :class:`UsageError` before any syscall. A kernel refusal raises
    :class:`MemoryPolicyError` and leaves the previous policy in place.
    """
    mode = policy if isinstance(policy, MemoryPolicy) else _policy_named(policy)
    wanted = CpuSet(nodes)
    needs_nodes = mode in (MemoryPolicy.BIND, MemoryPolicy.INTERLEAVE, MemoryPolicy.PREFERRED_MANY)
    if needs_nodes and not wanted:
        raise UsageError(f"set_mempolicy({mode.name}) needs at least one node")
    if mode in (MemoryPolicy.DEFAULT, MemoryPolicy.LOCAL) and wanted:
        raise UsageError(f"set_mempolicy({mode.name}) takes no nodes, got {wanted}")
    _check_nodes(wanted, f"set_mempolicy({mode.name})")
    number, _, _ = _numbers()
    if wanted:
        mask, maxnode = _mask(wanted), _MASK_WORDS * _WORD_BITS + 1
        _call_set(number, mode, wanted, mask, maxnode)
    else:
        _call_set(number, mode, wanted, None, 0)
    got = get_mempolicy()
    if not _same_policy(got, mode, wanted):
        raise MemoryPolicyError(f"set_mempolicy({mode.name}, {wanted}) read back as {got[0].name} {got[1]}")
    return got


def _call_set(number: int, mode: MemoryPolicy, nodes: CpuSet, mask: object, maxnode: int) -> None:
    try:
        _syscall("set_mempolicy", number, ctypes.c_int(int(mode)), mask, ctypes.c_ulong(maxnode))
    except OSError as exc:
        raise MemoryPolicyError(
            f"set_mempolicy({mode.name}, nodes {nodes or 'none'}) failed: {_errname(exc.errno)} ({exc.strerror})"
        ) from exc


def _same_policy(got: tuple[MemoryPolicy, CpuSet], mode: MemoryPolicy, nodes: CpuSet) -> bool:
    if mode is MemoryPolicy.LOCAL:
        # Older kernels report LOCAL as PREFERRED with no node.
        return got in ((MemoryPolicy.LOCAL, CpuSet()), (MemoryPolicy.PREFERRED, CpuSet()))
    if mode is MemoryPolicy.PREFERRED:
        return got[0] is mode and got[1] == CpuSet([nodes.first()]) if nodes else got[0] is mode
    return got == (mode, nodes)


def _policy_named(name: str) -> MemoryPolicy:
    try:
        return MemoryPolicy[name.strip().upper().replace("-", "_")]
    except KeyError:
        known = ", ".join(p.name.lower() for p in MemoryPolicy)
        raise UsageError(f"unknown memory policy {name!r} (policies: {known})") from None


@dataclass(frozen=True)
class MigrateResult:
    to_nodes: CpuSet
    from_nodes: CpuSet
    not_moved: int

    def __str__(self) -> str:
        return f"migrated {self.from_nodes} -> {self.to_nodes}, {self.not_moved} pages not moved"


def migrate(to_nodes: CpuSpec, from_nodes: CpuSpec | None = None, pid: int | None = None) -> MigrateResult:
    """Move a process's pages (default: this one's) from ``from_nodes`` (default: all others) to ``to_nodes``."""
    target = CpuSet(to_nodes)
    if not target:
        raise UsageError("migrate needs at least one target node")
    _check_nodes(target, "migrate_pages")
    source = system_nodes() if from_nodes is None else CpuSet(from_nodes)
    _, _, number = _numbers()
    maxnode = _MASK_WORDS * _WORD_BITS + 1
    try:
        left = _syscall("migrate_pages", number, ctypes.c_int(pid or 0), ctypes.c_ulong(maxnode),
                        _mask(source), _mask(target))
    except OSError as exc:
        raise MemoryPolicyError(f"migrate_pages({source} -> {target}) failed: {_errname(exc.errno)} "
                                f"({exc.strerror})") from exc
    return MigrateResult(target, source, left)


# -- what pin() does with memory -------------------------------------------

_STEPS = {"bind": ("bind", "preferred", "none"), "preferred": ("preferred", "none"), "none": ("none",)}


def parse_memory_mode(mode: str) -> str:
    if mode not in _STEPS:
        raise UsageError(f"unknown memory mode {mode!r} (modes: {', '.join(_STEPS)})")
    return mode


@dataclass(frozen=True)
class MemoryResult:
    """What was done with memory: the policy in force, migration, and any step-down."""

    asked: str
    applied: str
    nodes: CpuSet
    read_back: tuple[str, str] | None = None
    migration: MigrateResult | None = None
    problems: tuple[str, ...] = ()

    def __str__(self) -> str:
        text = f"memory {self.applied} {self.nodes}" if self.applied != "none" else "memory policy unchanged"
        if self.applied != self.asked:
            text += f" (asked {self.asked})"
        if self.migration is not None:
            text += f", {self.migration}"
        return text


def _one_step(step: str, nodes: CpuSet) -> tuple[MemoryPolicy, CpuSet]:
    if step == "bind":
        return set_mempolicy(MemoryPolicy.BIND, nodes)
    if len(nodes) > 1:
        try:
            return set_mempolicy(MemoryPolicy.PREFERRED_MANY, nodes)
        except MemoryPolicyError:
            pass  # kernels before 5.15: prefer the first node
    return set_mempolicy(MemoryPolicy.PREFERRED, CpuSet([nodes.first()]))


def place_memory(nodes: CpuSet, mode: str, do_migrate: bool, *, strict: bool) -> MemoryResult:
    """Apply ``mode`` for ``nodes`` to the calling thread, stepping down bind → preferred → none unless strict."""
    problems: list[str] = []
    applied = "none"
    read_back = None
    for step in _STEPS[mode] if not strict else (mode,):
        if step == "none":
            break
        try:
            got = _one_step(step, nodes)
        except (MemoryPolicyError, UsageError) as exc:
            if strict:
                raise
            problems.append(str(exc))
            continue
        applied, read_back = step, (got[0].name, str(got[1]))
        break
    migration = None
    if do_migrate:
        try:
            migration = migrate(nodes)
        except (MemoryPolicyError, UsageError) as exc:
            if strict:
                raise
            problems.append(str(exc))
    if problems:
        log.warning("numapin: memory placement on %s: %s; continuing with memory %s",
                    nodes, "; ".join(problems), applied)
    return MemoryResult(mode, applied, nodes, read_back, migration, tuple(problems))


# -- where memory lives ---------------------------------------------------

_NODE_FIELD = re.compile(r"N([0-9]+)=([0-9]+)\Z")


#: ``file=`` paths of mappings that are memory the process made, not files it read:
#: shared anonymous memory, System V and POSIX shared memory, memfd, anonymous huge pages.
_OWN_FILES = ("/dev/zero", "/SYSV", "/memfd:", "/dev/shm/", "/anon_hugepage")


@dataclass(frozen=True)
class Residency:
    """Pages and bytes of a process per NUMA node, from ``numa_maps``.

    ``own_bytes`` leaves out pages of files the process maps (its libraries,
    the page cache): they are shared with every process that reads those
    files and lie wherever the first reader ran, so no placement of this
    process can move them. Everything the process allocated itself counts.
    """

    pid: int
    pages: dict[int, int] = field(default_factory=dict)
    bytes: dict[int, int] = field(default_factory=dict)
    own_bytes: dict[int, int] = field(default_factory=dict)

    @property
    def total(self) -> int:
        return sum(self.bytes.values())

    def outside(self, nodes: CpuSpec, *, own: bool = False) -> int:
        keep = CpuSet(nodes)
        return sum(b for n, b in (self.own_bytes if own else self.bytes).items() if n not in keep)

    def share_outside(self, nodes: CpuSpec, *, own: bool = False) -> float:
        """The fraction (0..1) of resident bytes (``own``: of the process's own memory) on other nodes."""
        total = sum((self.own_bytes if own else self.bytes).values())
        return self.outside(nodes, own=own) / total if total else 0.0

    def __str__(self) -> str:
        if not self.total:
            return f"pid {self.pid}: no resident pages"
        parts = [f"node {n} {_size(b)} ({100 * b / self.total:.0f}%)" for n, b in sorted(self.bytes.items())]
        return f"pid {self.pid}: " + ", ".join(parts)


def _size(value: int) -> str:
    size = float(value)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} TiB"  # pragma: no cover - loop always returns


def parse_numa_maps(text: str, pid: int = 0, page_size: int | None = None) -> Residency:
    """Count pages per node in ``numa_maps`` text.

    Each ``N<node>=<pages>`` field counts pages of the mapping's own size
    (``kernelpagesize_kB``, which is the huge page size for huge mappings).
    """
    base = page_size or os.sysconf("SC_PAGE_SIZE")
    pages: dict[int, int] = {}
    sizes: dict[int, int] = {}
    own: dict[int, int] = {}
    for line in text.splitlines():
        fields = line.split()
        size = base
        counts: list[tuple[int, int]] = []
        mine = True
        for item in fields[2:]:
            if item.startswith("kernelpagesize_kB="):
                value = item.partition("=")[2]
                if value.isdigit():
                    size = int(value) * 1024
            elif item.startswith("file="):
                mine = item[5:].startswith(_OWN_FILES)
            elif (match := _NODE_FIELD.match(item)) is not None:
                counts.append((int(match.group(1)), int(match.group(2))))
        for node, count in counts:
            pages[node] = pages.get(node, 0) + count
            sizes[node] = sizes.get(node, 0) + count * size
            if mine:
                own[node] = own.get(node, 0) + count * size
    return Residency(pid, pages, sizes, own)


def residency(pid: int | None = None) -> Residency:
    """Where the memory of ``pid`` (default: this process) lives, node by node."""
    target = os.getpid() if pid is None else pid
    try:
        with open(f"/proc/{target}/numa_maps") as f:
            text = f.read()
    except FileNotFoundError:
        raise UsageError(f"process {target} does not exist (or has no numa_maps)") from None
    except PermissionError:
        raise UsageError(
            f"process {target}: permission denied reading its numa_maps (another user's process?)"
        ) from None
    return parse_numa_maps(text, target)
