"""Every GPU worker on this host, found and judged: what ``numapin ps`` lists.

A process is a GPU worker when what it holds says so: numapin's record of it, a
``/dev/nvidiaN`` among its open files, or NVML's list of processes on a GPU
(where NVML is installed). A process known only from what it inherited (a
launcher's local rank, or ``CUDA_VISIBLE_DEVICES``, in its environment: every
shell, ``sleep`` and ``tmux`` of a Slurm step or a container carries them) is a
*candidate*: listed with ``--all`` (or when asked for by PID), judged, never
counted as a worker nor as misplaced. Each is judged by the one judge
(:func:`numapin.observe.judge.judge`), as ``threads`` and ``doctor --pid`` judge it.
"""

from __future__ import annotations

import os
import re

from ..base.environment import CUDA_VISIBLE_DEVICES, LOCAL_RANK_VARIABLES
from ..base.errors import AccessDenied, NoSuchProcess, NumapinError, ProcessError, ScanTimeout
from ..base.frozen import frozen, replace
from ..facts import procfs
from ..facts.host import Host
from ..facts.pod import Pod
from ..facts.podresources import SOCKET
from ..observe.verdict import REMOTE_BOUND, Verdict, verdict_words
from ..observe.view import Kept, ProcessView, Views
from ..pinning import record

# The machine and the judge are imported when a worker is found: a scan of a host without one (a thousand
# shells, a login node) reads each process's open files and nothing of the machine.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Container, Iterable
    from typing import Any

    from ..cpuset import CpuSet
    from ..facts.machine import Facts
    from ..observe.judge import HostMemory, Judgement
    from ..placement.modes import Placement

__all__ = ["Kept", "ScanTimeout", "Survey", "Verdict", "Worker", "survey"]


def _device() -> re.Pattern[str]:
    """A GPU's device file as a process's open file names it: each vendor's of the accelerators' table
    (``/dev/nvidiaN``, an AMD GPU's render node ``/dev/dri/renderDN`` or ROCm's ``/dev/kfd``, which every ROCm
    process holds and which names no GPU, a Gaudi's ``/dev/accel/accelN``...); also under the root of another mount
    namespace's tree (a container's /dev, or a namespace made after a switch_root: ``/new/dev/nvidia1``), where the
    kernel names the file from that tree's top. Made for each scan: a vendor added to the table is counted."""
    from ..facts.glance import ACCELERATORS

    files = "|".join(row.files for row in ACCELERATORS.values())
    return re.compile(rf"(?:^|/)(dev/(?:{files}))$")


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
    target: CpuSet | None = None
    """The CPUs its threads must lie within (the record's target, else the placement's workers)."""
    misplaced_by: tuple[str, ...] = ()
    """``threads``, ``memory`` or both, when misplaced."""
    candidate: bool = False
    """Known only from its environment (a launcher rank, CUDA_VISIBLE_DEVICES): never counted."""
    pod: Pod | None = None
    """Its Kubernetes pod and container, where its cgroup path names one."""
    kubelet: tuple[str, ...] = ()
    """For a worker in a pod: the ids of doctor's findings on the kubelet's decisions that are warnings or errors
    (``kubelet-topology-manager``...; ``numapin doctor --pid PID`` says each in full)."""
    drift: tuple[tuple[str, int], ...] = ()
    """What its keeper saw move its placement: each cause and its count, the last seen at the end (its record's)."""
    last_drift: str | None = None
    host_memory: HostMemory | None = None
    """Its resident memory per node by kind, its declared buffers verified, and what lies off its GPU's node in
    words; None where its memory was not read."""
    outside_cpus: CpuSet | None = None
    """The CPUs its threads outside the placement may run on (their masks, less the placement's CPUs); None where
    none is outside, or it was not judged."""
    crowd: tuple[str, ...] = ()
    """What the other pinners the table knows did to its threads, a line per library (``ps --wide`` says them)."""

    @property
    def verdict_words(self) -> str:
        return verdict_words(self.verdict, self.misplaced_by)

    def as_dict(self) -> dict[str, Any]:
        return {
            "pid": self.pid, "name": self.name, "verdict": str(self.verdict),
            "misplaced_by": list(self.misplaced_by), "candidate": self.candidate, "why": self.why,
            "placed_by": self.placed_by, "rank": self.rank, "gpu": self.gpu, "pci": self.pci,
            "partition": None if self.expected is None else self.expected.partition,
            "gpu_view": "the process's own (its CUDA_VISIBLE_DEVICES, or its vendor's variables)",
            "expected": None if self.target is None else str(self.target),
            "mems": None if self.expected is None else str(self.expected.mems),
            "threads": self.threads, "outside": self.outside, "remote_share": self.remote, "note": self.note,
            "pod": None if self.pod is None else self.pod.as_dict(), "kubelet": list(self.kubelet),
            "drift": dict(self.drift), "last_drift": self.last_drift,
            "host_memory": None if self.host_memory is None else self.host_memory.as_dict(),
            "crowd": list(self.crowd),
        }

    @property
    def drift_words(self) -> str:
        return record.drift_words(self.drift)

    @property
    def where(self) -> str | None:
        """Its GPU's PCI address, and the partition where the GPU is one."""
        return self.pci if self.expected is None else self.expected.where


@frozen
class Survey:
    """Every worker found, and whether any is misplaced."""

    workers: tuple[Worker, ...]
    """The GPU workers found (and, with ``candidates``, the processes known only from their environment)."""

    unseen: int = 0
    """Processes of other users this user could not look into (their open files and environment are for their
    owner or root), or this user's own in another namespace whose root it may not open: any of them may be a GPU
    worker. Always 0 for root, but for other PID namespaces' processes."""
    gpus: tuple[str, ...] = ()
    """The PCI addresses of the host's GPUs, where a scan of the whole host asked for them (the per-GPU series
    count a GPU without a worker as 0); empty for a scan of chosen processes."""
    uuids: tuple[tuple[str, str], ...] = ()
    """Each of :attr:`gpus` with its UUID, where the machine gives one (the per-GPU series carry it as DCGM's
    exporter does)."""
    pod_names: str | None = None
    """Why the names of the workers' pods could not be read (the kubelet's API), where a worker runs in one."""
    pod_names_stale: str | None = None
    """Where the names are the kubelet's last answer, which did not come now: what that answer was."""

    @property
    def pod_names_said(self) -> str | None:
        """:attr:`pod_names` or :attr:`pod_names_stale` as ``ps --json`` says them (``pod_names_unread``: a stale
        answer begins ``stale:``)."""
        return f"stale: {self.pod_names_stale}" if self.pod_names_stale is not None else self.pod_names

    @property
    def counted(self) -> tuple[Worker, ...]:
        """The GPU workers: what holds a GPU or numapin's record, not a candidate."""
        return tuple(w for w in self.workers if not w.candidate)

    @property
    def misplaced(self) -> tuple[Worker, ...]:
        return tuple(w for w in self.counted if w.verdict == Verdict.MISPLACED)

    def tally(self) -> dict[str, int]:
        """The GPU workers by verdict (ok, misplaced, unknown, unreadable), and the candidates listed."""
        found = {str(v): 0 for v in Verdict}
        for w in self.counted:
            found[str(w.verdict)] += 1
        return {**found, "candidates": len(self.workers) - len(self.counted)}

    @property
    def exit_code(self) -> int:
        """1 when a worker is misplaced, else 0."""
        return 1 if self.misplaced else 0


# -- finding them -----------------------------------------------------------------------


def _nvml_processes(root: str | os.PathLike[str] | None, machine: Callable[[], Facts]) -> dict[int, set[str]]:
    """Process id → the PCI addresses of the GPUs NVML says it runs on (empty without NVML, or off this host)."""
    if not Host.at(root).is_live:
        return {}
    from ..facts.glance import load_nvml, nvidia_driver_loaded

    # Without the NVIDIA driver NVML lists nothing, and looking for pynvml where it is not installed searches
    # every folder of the path: on a host of no NVIDIA GPU, a scan asks neither.
    nvml = load_nvml() if nvidia_driver_loaded("/") else None
    if nvml is None:
        return {}
    found: dict[int, set[str]] = {}
    try:
        nvml.nvmlInit()
        try:
            for gpu in machine().inventory.gpus:
                handle = nvml.nvmlDeviceGetHandleByPciBusId(gpu.pci)
                for query in (nvml.nvmlDeviceGetComputeRunningProcesses, nvml.nvmlDeviceGetGraphicsRunningProcesses):
                    for process in query(handle):
                        found.setdefault(int(process.pid), set()).add(gpu.pci)
        finally:
            nvml.nvmlShutdown()
    except Exception:  # NVML present but unusable (no driver): the other signs still count
        return {}
    return found


def _chosen(pids: Iterable[int] | None, listed: list[int]) -> list[int]:
    """The processes to look at: those asked (each once; NoSuchProcess for one that is none, or is a thread's id),
    else every one listed."""
    if pids is None:
        return listed
    chosen = list(dict.fromkeys(pids))  # ps PID PID lists it once
    processes = set(listed)
    for pid in chosen:
        if pid in processes:
            continue  # /proc lists processes, not threads: its status is read once, by the judge
        group = procfs.status(pid).get("Tgid", str(pid)).strip()  # NoSuchProcess when there is none
        if group != str(pid):
            raise NoSuchProcess(pid, f"{pid} is a thread of process {group}, not a process")
    return chosen


class _Scan:
    """One scan: a view of each process it looks at (:class:`numapin.observe.view.ProcessView`, each file read
    once), NVML's list, and the machine (read when first needed); with :class:`Kept`, what an earlier scan read
    and cannot have changed is not read again."""

    def __init__(self, root: str | os.PathLike[str] | None, kept: Kept | None = None) -> None:
        self.root = root
        self.views = Views(kept)
        self._machine: list[Facts] = []
        self._device = _device()  # once a scan, not once a process
        self.nvml = _nvml_processes(root, self.machine)

    def machine(self) -> Facts:
        """Every GPU of the machine, as no CUDA_VISIBLE_DEVICES hides them (read once, when first needed)."""
        if not self._machine:
            from ..facts.machine import cached

            self._machine.append(cached(self.root, {}))
        return self._machine[0]

    def read_owners(self, pids: list[int], deadline: float | None) -> set[int]:
        """Each process's entry (its owner, and when it was made): the view of it; the owners met."""
        for pid in pids:
            ScanTimeout.past(deadline, "listing the processes' owners")
            try:
                owner, born = procfs.seen(pid)
            except ProcessError:
                continue
            self.views.seen(pid, owner, born)
        if self.views.kept is not None:
            self.views.kept.forget_all_but(self.views.by_pid)
        return {v.owner for v in self.views.by_pid.values() if v.owner is not None}

    def view(self, pid: int) -> ProcessView:
        """The view of ``pid``: the scan's, or a new one for a process the listing did not show."""
        return self.views.of(pid)

    def stat_of(self, pid: int) -> procfs.Stat | None:
        return self.view(pid).stat()

    def start_of(self, pid: int) -> int | None:
        return self.view(pid).start

    def owner_of(self, pid: int) -> int | None:
        return self.view(pid).user()

    def devices_of(self, pid: int) -> tuple[str, ...]:
        """Its GPU device files (ProcessError where they cannot be read)."""
        return self.view(pid).devices(self._device)

    def namespaces_of(self, pid: int) -> tuple[int, int]:
        return self.view(pid).namespaces(may_be_worker=self.may_be_worker(pid))

    def may_be_worker(self, pid: int) -> bool:
        """Whether what it holds makes it a GPU worker: only such a process of another namespace has its
        environment read for a records folder of its own choosing (any container may set one, costly to walk)."""
        try:
            return bool(self.devices_of(pid)) or pid in self.nvml
        except ProcessError:
            return pid in self.nvml


def survey(
    pids: Iterable[int] | None = None,
    *,
    root: str | os.PathLike[str] | None = None,
    memory: bool = True,
    max_remote: float | None = REMOTE_BOUND,
    candidates: bool = False,
    deadline: float | None = None,
    pod_resources: str | None = SOCKET,
    every_gpu: bool = False,
    kept: Kept | None = None,
) -> Survey:
    """Find every GPU worker of this host (or only ``pids``) and judge each; ``memory`` reads where its pages are,
    ``max_remote`` bounds the share of its own memory on other nodes (None: not judged); ``candidates`` lists the
    processes known only from their environment too. A PID asked for that is no process (or is a thread's id)
    is a :class:`NoSuchProcess`; a scan still running at ``deadline`` (``time.monotonic()``) a
    :class:`ScanTimeout`. Workers in Kubernetes pods are named by the kubelet's API at ``pod_resources`` (its
    socket; None: not asked). ``every_gpu``: list the host's GPUs (:attr:`Survey.gpus`, for the per-GPU series),
    reading the machine even where no worker is found. ``kept``: what a long-running scanner keeps between scans
    (:class:`Kept`)."""
    chosen = _chosen(pids, procfs.pids())
    asked = pids is not None
    me = os.getpid()
    scan = _Scan(root, kept)
    owners = scan.read_owners(chosen, deadline)
    known = record.entries(owners, scan.start_of, scan.owner_of)
    # A container's workers keep their records in its own root, under their ids there: read through /proc/PID/root.
    elsewhere, unseen = record.across([pid for pid in chosen if pid not in known], scan.start_of, scan.owner_of,
                                      may_be_worker=scan.may_be_worker, deadline=deadline,
                                      namespaces_of=scan.namespaces_of)
    known.update({pid: entry for pid, (entry, _) in elsewhere.items()})
    scan.views.records, scan.views.looked = known, set(chosen)  # a judge's ancestors asked: looked up no more
    from ..pinning.declaration import present

    declarations = present(owners)  # the host buffers declared here, listed once a scan
    rehearsed = _rehearsed(root)
    found: list[Worker] = []
    for pid in chosen:
        ScanTimeout.past(deadline, f"{len(found)} workers found so far")
        if pid == me and not asked:
            continue
        try:
            worker = _look(pid, scan, root, memory, max_remote, declarations, asked=asked, candidates=candidates,
                           rehearsed=rehearsed)
        except AccessDenied:
            seen = scan.stat_of(pid)
            unseen += seen is not None and not seen.kernel_thread  # a kernel thread is nobody's worker
            continue
        if worker is not None and (asked or candidates or not worker.candidate):
            found.append(worker)
    unnamed: tuple[str | None, str | None] = (None, None)
    if any(w.pod is not None for w in found):
        found, unnamed = _in_pods(found, root, pod_resources, scan.machine)
    every = scan.machine().inventory.gpus if every_gpu and not asked else ()
    gpus = tuple(g.pci for g in every if g.pci)
    uuids = tuple((g.pci, g.uuid) for g in every if g.pci and g.uuid)
    return Survey(tuple(found), unseen, gpus, uuids, *unnamed)


def _rehearsed(root: str | os.PathLike[str] | None) -> set[int]:
    """The processes a rehearsal under ``root`` started that still run (none for this host's own root): each holds
    no GPU here, and is a worker of the machine rehearsed all the same."""
    if root is None or Host(str(root)).is_live:
        return set()
    from ..pinning.rehearsed import listed

    return {r.pid for r in listed(str(root))}


def _in_pods(workers: list[Worker], root: str | os.PathLike[str] | None, socket: str | None,
             machine: Callable[[], Facts]) -> tuple[list[Worker], tuple[str | None, str | None]]:
    """Each worker in a pod named from the kubelet's API (matched by its cpuset or its GPU) and given the ids of
    doctor's warnings and errors on the kubelet's decisions for it; and why none could be named, when the API
    could not be asked. The API is asked once a scan: one that does not answer is not waited for again."""
    from ..facts.cgroup import read_cgroup
    from ..facts.kubelet import read_kubelet
    from ..facts.podresources import PodResourcesUnavailable, gpu_key, listing, match
    from .doctor import pod_findings

    containers, unnamed, stale = None, None, None
    if socket is not None:
        try:
            listed = listing(socket)
            containers, stale = listed.containers, listed.stale
        except PodResourcesUnavailable as exc:
            unnamed = str(exc)
    live = Host.at("/")  # a process's cgroup is always the live one's
    kubelet = read_kubelet(root)  # its files read once a scan, for every worker in a pod
    checked = []
    for w in workers:
        pod = w.pod
        if pod is not None:
            if containers is not None:
                held = [g for g in machine().inventory.gpus if g.pci == w.pci]
                named = match(containers, cpus=read_cgroup(live, pid=w.pid).cpus, gpus={g.uuid for g in held if g.uuid},
                              dra={key for g in held if (key := gpu_key(g)) is not None})
                if named is not None:
                    pod = replace(pod, namespace=named.namespace, name=named.pod, container=named.name)
            found = pod_findings(w.pid, machine(), w.expected, root, {}, None if containers is None else socket,
                                 pod=pod, containers=containers, kubelet=kubelet)
            w = replace(w, pod=pod, kubelet=tuple(f.id for f in found if f.severity in ("warning", "error")))
        checked.append(w)
    return checked, (unnamed, stale)


def _look(pid: int, scan: _Scan, root: str | os.PathLike[str] | None, memory: bool, max_remote: float | None,
          declarations: Container[str], *, asked: bool, candidates: bool,
          rehearsed: Container[int] = ()) -> Worker | None:
    """The worker ``pid`` is, or None when it is none (or gone); AccessDenied when another user's process could
    be one and nothing this user may read says. ``asked``: a PID asked for, judged whatever it is;
    ``candidates``: its environment read even when nothing it holds makes it a worker; ``rehearsed``: the processes
    a rehearsal under ``root`` started (workers of the machine rehearsed)."""
    view, nvml = scan.view(pid), scan.nvml
    entry = view.record()
    try:
        devices: tuple[str, ...] | None = scan.devices_of(pid)
    except AccessDenied:
        devices = None  # another user's: only a record or NVML can say it is a worker
    except NoSuchProcess:
        return None
    if not (entry or devices or pid in nvml or pid in rehearsed or asked or candidates):
        if devices is None:
            raise AccessDenied(pid, "its open files")
        return None  # what it holds says no, and its environment could make it a candidate at most: not read
    try:
        name = view.alive().name  # the stat read once a scan holds the name (comm) too
        env: dict[str, str] | None = view.environ()
    except AccessDenied:
        if entry is None and pid not in nvml and not asked:
            raise  # nothing says it is a worker, and nothing more can be read
        env = None
    except NoSuchProcess:
        return None  # gone since the listing (an asked PID that is none was refused above)
    devices = devices or ()
    launcher = None if env is None else next(
        (f"{v}={env[v]}" for v in LOCAL_RANK_VARIABLES if env.get(v, "").strip()), None)
    # What it holds makes a worker; what it inherited, a candidate (every shell of a Slurm step has LOCAL_RANK).
    held = ("record" if entry else devices[0] if devices else "NVML" if pid in nvml
            else "rehearsal" if pid in rehearsed else None)
    why = held or launcher or (f"{CUDA_VISIBLE_DEVICES}={env[CUDA_VISIBLE_DEVICES]}"
                               if env is not None and CUDA_VISIBLE_DEVICES in env else None)
    if why is None:
        if not asked:
            return None
        why = "asked for"
    from ..observe.judge import judge

    using = {g.where for g in scan.machine().inventory.gpus if set(g.devices) & set(devices)} | nvml.get(pid, set())
    try:
        judged = judge(view, root=root, environ=env, devices=using, memory=memory, max_remote=max_remote,
                       small_memory=False, declarations=declarations)
    except NoSuchProcess:
        return Worker(pid, name, Verdict.UNKNOWN, why, note="no such process") if asked else None
    except NumapinError as exc:  # its environment says something numapin cannot take (a bad NUMAPIN_* value)
        return Worker(pid, name, Verdict.UNKNOWN, why, note=str(exc), candidate=held is None)
    return _worker(judged, why, held is None, view.pod())


def _worker(judged: Judgement, why: str, candidate: bool, pod: Pod | None) -> Worker:
    """The worker a judgement found, as ``ps`` lists it."""
    from ..cpuset import CpuSet
    from .threads_report import crowd_words

    e = judged.expected
    recorded = None if e is None else e.record
    placement = None if e is None else e.placement
    outside = CpuSet.union([t.cpus for t in judged.outside if t.cpus is not None])
    return Worker(
        pid=judged.pid, name=judged.name, verdict=judged.verdict, why=why, placed_by=judged.placed_by,
        rank=None if placement is None else placement.rank, gpu=None if placement is None else placement.gpu,
        pci=None if placement is None else placement.pci, expected=placement, threads=len(judged.threads),
        outside=len(judged.outside), remote=judged.remote_share(), note=judged.note,
        target=None if e is None else e.target, misplaced_by=judged.misplaced_by, candidate=candidate, pod=pod,
        drift=() if recorded is None else recorded.drift, last_drift=None if recorded is None else recorded.last_drift,
        host_memory=judged.host_memory(), outside_cpus=(outside - (e.target if e is not None else CpuSet())) or None,
        crowd=tuple(crowd_words(judged)))
