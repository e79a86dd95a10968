"""Every GPU worker on this host, found and judged: what ``numapin ps`` lists.

A process is listed when numapin placed it (its record in the host's ledger)
or when it looks like a GPU worker: a ``/dev/nvidiaN`` open among its file
descriptors, NVML's list of processes on a GPU (where NVML is installed), or a
launcher's local rank or ``CUDA_VISIBLE_DEVICES`` in its environment. Each is
judged against the placement it should have: its record's, else the one its
rank (or its only GPU) gives, exactly as ``numapin exec`` would decide it.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping

from ..base.choices import Choice
from ..base.environment import CUDA_VISIBLE_DEVICES, LOCAL_RANK_VARIABLES
from ..base.errors import NumapinError
from ..base.frozen import frozen
from ..cpuset import CpuSet
from ..facts.gpus import Gpu, load_nvml
from ..facts.host import Host
from ..facts.machine import Facts
from ..facts.machine import cached as cached_facts
from ..kernel.affinity import LinuxThreads, exited, process_environ
from ..kernel.residency import residency
from ..pinning import record
from ..pinning.state import exec_marker
from ..placement.modes import Placement, resolve
from ..placement.ranks import local_rank

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing at run time (mypy knows the name)
if TYPE_CHECKING:
    from typing import Any

__all__ = ["Survey", "Verdict", "Worker", "survey"]

_DEVICE = re.compile(r"/dev/nvidia(\d+)$")


class Verdict(Choice):
    """A worker's verdict."""

    OK = "ok"
    MISPLACED = "misplaced"
    UNKNOWN = "unknown"
    """Nothing says which GPU it drives, so there is no placement to judge it by."""
    UNREADABLE = "unreadable"
    """Another user's process, and this user is not root."""


@frozen
class Worker:
    """One process of the host as ``numapin ps`` sees it."""

    pid: int
    name: str
    verdict: Verdict
    why: str
    """What made it look like a GPU worker: ``record``, ``/dev/nvidia1``, ``NVML``, ``LOCAL_RANK=1``..."""
    placed_by: str = "nobody"
    """``exec``, ``autopin``, ``pin``, ``lease``, ``compat`` (numapin's record), ``inherited from PID (how)``,
    ``someone else`` (a mask that is not the baseline) or ``nobody``."""
    rank: int | None = None
    gpu: int | None = None
    pci: str | None = None
    expected: Placement | None = None
    threads: int = 0
    outside: int = 0
    remote: float | None = None
    """The share (0..1) of its own memory outside the placement's nodes; None when unread."""
    note: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "pid": self.pid, "name": self.name, "verdict": str(self.verdict), "why": self.why,
            "placed_by": self.placed_by, "rank": self.rank, "gpu": self.gpu, "pci": self.pci,
            "expected": None if self.expected is None else str(self.expected.workers),
            "mems": None if self.expected is None else str(self.expected.mems),
            "threads": self.threads, "outside": self.outside, "remote_share": self.remote, "note": self.note,
        }


@frozen
class Survey:
    """Every worker found, and whether any is misplaced."""

    workers: tuple[Worker, ...]

    @property
    def misplaced(self) -> tuple[Worker, ...]:
        return tuple(w for w in self.workers if w.verdict == Verdict.MISPLACED)

    @property
    def exit_code(self) -> int:
        """1 when a worker is misplaced, else 0."""
        return 1 if self.misplaced else 0


# -- finding them -----------------------------------------------------------------------


def _pids() -> list[int]:
    return sorted(int(name) for name in os.listdir("/proc") if name.isdigit())


def _name(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return "?"


def _parent(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            text = f.read()
        return int(text[text.rfind(b")") + 2:].split()[1])
    except (OSError, ValueError, IndexError):
        return None


def _devices(pid: int) -> tuple[int, ...]:
    """The minor numbers of the ``/dev/nvidiaN`` it has open; PermissionError for another user's."""
    found = set()
    folder = f"/proc/{pid}/fd"
    for fd in os.listdir(folder):
        try:
            match = _DEVICE.match(os.readlink(f"{folder}/{fd}"))
        except OSError:
            continue
        if match:
            found.add(int(match.group(1)))
    return tuple(sorted(found))


def _nvml_processes(facts: Facts) -> dict[int, set[str]]:
    """Process id → the PCI addresses of the GPUs NVML says it runs on (empty without NVML)."""
    nvml = load_nvml() if Host(facts.topology.root).is_live else None
    if nvml is None:
        return {}
    found: dict[int, set[str]] = {}
    try:
        nvml.nvmlInit()
        try:
            for gpu in facts.inventory.gpus:
                handle = nvml.nvmlDeviceGetHandleByPciBusId(gpu.pci)
                for query in (nvml.nvmlDeviceGetComputeRunningProcesses, nvml.nvmlDeviceGetGraphicsRunningProcesses):
                    for process in query(handle):
                        found.setdefault(int(process.pid), set()).add(gpu.pci)
        finally:
            nvml.nvmlShutdown()
    except Exception:  # NVML present but unusable (no driver): the other signs still count
        return {}
    return found


def survey(
    pids: Iterable[int] | None = None,
    *,
    root: str | os.PathLike[str] | None = None,
    memory: bool = True,
) -> Survey:
    """Find every GPU worker of this host (or only ``pids``) and judge each; ``memory`` reads where its pages are."""
    base = cached_facts(root, {})  # every GPU of the machine, as no CUDA_VISIBLE_DEVICES hides them
    chosen = list(pids) if pids is not None else _pids()
    asked = pids is not None
    me = os.getpid()
    owners = set()
    for pid in chosen:
        try:
            owners.add(os.stat(f"/proc/{pid}").st_uid)
        except OSError:
            continue
    records = record.entries(owners)
    nvml = _nvml_processes(base)
    found = []
    for pid in chosen:
        if pid == me and not asked:
            continue
        worker = _look(pid, records, nvml, base, root, memory, asked)
        if worker is not None:
            found.append(worker)
    return Survey(tuple(found))


def _look(pid: int, records: Mapping[int, record.Record], nvml: Mapping[int, set[str]], base: Facts,
          root: str | os.PathLike[str] | None, memory: bool, asked: bool) -> Worker | None:
    """The worker ``pid`` is, or None when it is none (or gone)."""
    if not os.path.isdir(f"/proc/{pid}") or exited(pid):
        if asked:
            return Worker(pid, "?", Verdict.UNKNOWN, "asked for", note="no such process")
        return None
    entry = records.get(pid)
    name = _name(pid)
    try:
        env = process_environ(pid)
        devices = _devices(pid)
    except PermissionError:
        if entry is None and pid not in nvml and not asked:
            return None  # nothing says it is a worker, and nothing more can be read
        return Worker(pid, name, Verdict.UNREADABLE, "record" if entry else "NVML" if pid in nvml else "asked for",
                      note="another user's process: run as root (or as its user) to judge it")
    except OSError:
        return None  # gone meanwhile
    launcher = next((f"{v}={env[v]}" for v in LOCAL_RANK_VARIABLES if env.get(v, "").strip()), None)
    by_device = [g for g in base.inventory.gpus if g.minor in devices]
    why = ("record" if entry else f"/dev/nvidia{devices[0]}" if devices else "NVML" if pid in nvml
           else launcher or (f"{CUDA_VISIBLE_DEVICES}={env[CUDA_VISIBLE_DEVICES]}"
                             if CUDA_VISIBLE_DEVICES in env else None))
    if why is None:
        if not asked:
            return None
        why = "asked for"
    try:
        facts = cached_facts(root, env)
    except NumapinError as exc:  # its environment says something numapin cannot take (a bad NUMAPIN_* value)
        return Worker(pid, name, Verdict.UNKNOWN, why, note=str(exc))
    expected, note = _expected(entry, env, facts, base, by_device, nvml.get(pid, set()))
    ops = LinuxThreads(pid)
    try:
        masks = [ops.get_affinity(t) for t in ops.list_threads()]
    except OSError:
        return None
    rank = entry.rank if entry is not None and entry.rank is not None else (
        expected.rank if expected is not None else None)
    placed = _placed_by(pid, entry, env, masks, records, facts)
    if expected is None:
        return Worker(pid, name, Verdict.UNKNOWN, why, placed, rank, threads=len(masks), note=note)
    outside = sum(1 for m in masks if not m <= expected.workers)
    remote = None
    if memory:
        try:
            remote = residency(pid).share_outside(expected.mems, own=True)
        except (NumapinError, OSError):
            remote = None
    verdict = Verdict.MISPLACED if outside else Verdict.OK
    return Worker(pid, name, verdict, why, placed, rank, expected.gpu, expected.pci, expected, len(masks), outside,
                  remote, note)


def _expected(entry: record.Record | None, env: Mapping[str, str], facts: Facts, base: Facts,
              by_device: list[Gpu], on_gpus: set[str]) -> tuple[Placement | None, str | None]:
    """The placement the process should have, and a note when it cannot be told or had to be assumed."""
    try:
        if entry is not None and entry.gpu is not None:
            return resolve(facts, env, gpu=entry.gpu, mode=entry.mode or "node"), None
        rank = local_rank(env)
        if rank is not None or len(facts.visible) == 1:
            return resolve(facts, env, rank=rank), None
        # No rank, several GPUs in its view: the one GPU it has open (or NVML lists it on) tells.
        physical = {g.pci for g in by_device} | on_gpus
        if len(physical) == 1:
            index = next(v.index for v in base.visible if v.gpu.pci in physical)
            return resolve(base, {}, gpu=index), None
    except NumapinError as exc:
        return None, str(exc)
    return None, "no record, no local rank, and not one GPU of its own: nothing says which GPU it drives"


def _placed_by(pid: int, entry: record.Record | None, env: Mapping[str, str], masks: list[CpuSet],
               records: Mapping[int, record.Record], facts: Facts) -> str:
    """Who put the process where it runs (its main thread's mask is the process's)."""
    mask = masks[0] if masks else None
    if entry is not None:
        return entry.how if mask == entry.mask else f"{entry.how}, since moved by someone else"
    marker = exec_marker(env)
    if marker is not None and mask == marker:
        return "exec"
    parent, depth = _parent(pid), 0
    while parent and depth < 8:  # a data loader, a compile worker: forked by a worker numapin placed
        above = records.get(parent)
        if above is not None and mask == above.mask:
            return f"inherited from {parent} ({above.how})"
        parent, depth = _parent(parent), depth + 1
    if mask is None or mask == facts.topology.allowed:
        return "nobody"
    return "someone else"
