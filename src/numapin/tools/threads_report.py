"""Audit where every thread of a process runs, and where its memory lives."""

from __future__ import annotations

import os

from ..base.errors import UsageError
from ..base.frozen import frozen
from ..base.text import counted, plural, table
from ..cpuset import CpuSet
from ..facts.machine import cached as cached_facts
from ..kernel.affinity import LinuxThreads, exited, process_environ
from ..kernel.residency import Residency, residency
from ..pinning import record
from ..pinning.record import Record
from ..pinning.state import exec_marker, state
from ..placement.plan import plan

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing at run time (mypy knows the name)
if TYPE_CHECKING:
    from typing import Any

__all__ = ["Audit", "ThreadRow", "audit"]


@frozen
class ThreadRow:
    tid: int
    name: str | None
    cpus: CpuSet | None
    last_cpu: int | None
    inside: bool | None
    numapin: bool

    def as_dict(self) -> dict[str, Any]:
        return {
            "tid": self.tid,
            "name": self.name,
            "cpus": None if self.cpus is None else str(self.cpus),
            "last_cpu": self.last_cpu,
            "inside": self.inside,
            "numapin": self.numapin,
        }


@frozen
class Audit:
    """Every thread of ``pid`` against a placement (None when no placement was named)."""

    pid: int
    placement: CpuSet | None
    nodes: CpuSet | None
    rows: tuple[ThreadRow, ...]
    memory: Residency | None
    """None when its numa_maps cannot be read (another user's process)."""
    marker: CpuSet | None
    entry: Record | None = None
    """What numapin applied to it, from the host's ledger (pins made inside the process included)."""

    @property
    def outside(self) -> tuple[ThreadRow, ...]:
        return tuple(r for r in self.rows if r.inside is False)

    def remote_share(self) -> float | None:
        """The share of the process's own memory (not the files it maps) outside the placement's nodes."""
        if self.nodes is None or self.memory is None:
            return None
        return self.memory.share_outside(self.nodes, own=True)

    def summary(self) -> str:
        parts = []
        if self.entry is not None:
            e = self.entry
            parts.append(f"placed by numapin ({e.how}" + (f", GPU {e.gpu}" if e.gpu is not None else "") + ")")
        if self.placement is not None:
            parts.append(f"{len(self.outside)} of {counted(len(self.rows), 'thread')} outside CPUs {self.placement}")
        else:
            parts.append(f"{counted(len(self.rows), 'thread')} (no placement to compare with)")
        parts.append(f"memory: {self.memory}" if self.memory is not None
                     else "memory: unreadable (only its owner or root may read its numa_maps)")
        share = self.remote_share()
        if share is not None:
            parts.append(f"{100 * share:.1f}% of its own memory outside {plural(len(self.nodes or ()), 'node')} "
                         f"{self.nodes}")
        return "; ".join(parts)

    def table(self) -> str:
        header = ("tid", "name", "cpus", "last", "inside", "numapin")
        rows = [
            (str(r.tid), r.name or "?", "?" if r.cpus is None else str(r.cpus),
             "?" if r.last_cpu is None else str(r.last_cpu),
             "-" if r.inside is None else ("yes" if r.inside else "NO"), "yes" if r.numapin else "no")
            for r in self.rows
        ]
        return "\n".join([*table(header, rows), self.summary()])

    def as_dict(self) -> dict[str, Any]:
        share = self.remote_share()
        return {
            "pid": self.pid,
            "placement": None if self.placement is None else str(self.placement),
            "marker": None if self.marker is None else str(self.marker),
            "record": None if self.entry is None else self.entry.as_dict(),
            "threads": [r.as_dict() for r in self.rows],
            "outside": len(self.outside),
            "memory": None if self.memory is None else {
                "bytes": {str(k): v for k, v in sorted(self.memory.bytes.items())},
                "own_bytes": {str(k): v for k, v in sorted(self.memory.own_bytes.items())},
                "remote_share": share},
        }

    def check(self, max_remote_percent: float) -> int:
        """0 when every thread is inside and remote memory is within bounds, else 1."""
        if self.placement is None:
            raise UsageError("--check needs a placement: --gpu, --cpus, or a process numapin placed",
                             value=self.pid)
        share = self.remote_share() or 0.0
        return 1 if self.outside or 100 * share > max_remote_percent else 0


def _marker(pid: int) -> CpuSet | None:
    try:
        return exec_marker(os.environ if pid == os.getpid() else process_environ(pid))
    except OSError:
        return None


def audit(
    pid: int | None = None,
    *,
    gpu: int | None = None,
    cpus: CpuSet | None = None,
    root: str | None = None,
) -> Audit:
    """Read every thread of ``pid`` (default: this process) and its memory by node."""
    target = os.getpid() if pid is None else pid
    if not os.path.isdir(f"/proc/{target}"):
        raise UsageError(f"process {target} does not exist", value=target)
    if exited(target):
        raise UsageError(f"process {target} has exited (a zombie its parent has not reaped yet)", value=target)
    kernel = LinuxThreads(target)
    try:
        tids = sorted(kernel.list_threads())
    except PermissionError:
        raise UsageError(f"process {target}: permission denied (it belongs to another user)",
                         value=target) from None
    except FileNotFoundError:
        raise UsageError(f"process {target} does not exist", value=target) from None
    memory: Residency | None = None
    try:
        memory = residency(target)
    except UsageError:
        # Another user's process: its masks are readable by anyone, its numa_maps only by its owner (or root).
        if os.path.isdir(f"/proc/{target}"):
            memory = None
        else:
            raise
    marker = _marker(target)
    # What numapin applied, however it did (exec, the start-up hook, pin() inside the process), comes
    # first; the exec marker in its environment is only what it was started with.
    entry = record.lookup(target)
    placement: CpuSet | None = None
    nodes: CpuSet | None = None
    if gpu is not None or cpus is not None:
        chosen = plan(gpu, cpus=cpus, root=root)
        placement, nodes = chosen.cpus, chosen.mems
    elif entry is not None:
        placement, nodes = entry.target, entry.mems
    elif marker is not None:
        placement = marker
    if placement is not None and nodes is None:
        nodes = cached_facts(root).topology.nodes_of(placement)
    own: set[CpuSet] = state().thread_masks() if target == os.getpid() else set()
    own |= {m for m in (marker, None if entry is None else entry.mask) if m is not None}
    rows = []
    for tid in tids:
        try:
            mask: CpuSet | None = kernel.get_affinity(tid)
        except OSError:
            mask = None  # exited meanwhile
        rows.append(ThreadRow(
            tid=tid,
            name=kernel.thread_name(tid),
            cpus=mask,
            last_cpu=kernel.last_cpu(tid),
            inside=None if placement is None or mask is None else mask <= placement,
            numapin=mask is not None and mask in own,
        ))
    return Audit(target, placement, nodes, tuple(rows), memory, marker, entry)
