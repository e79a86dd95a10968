"""``numapin ps --prometheus``: the host's GPU workers in Prometheus's text exposition format.

For node_exporter's textfile collector (``numapin ps --textfile DIR`` from a timer: the file
replaced whole), the way fleets already collect host facts. Only GPU workers are
exported (what holds a GPU or numapin's record); candidates known only from their
environment are not. The names and labels
are stable: every per-worker series carries ``pid``, ``rank``, ``gpu`` (CUDA's
index in the worker's view) and ``pci`` (the physical device), and a worker in a
Kubernetes pod ``namespace``, ``pod``, ``container`` (names from the kubelet's API),
``pod_uid`` and ``container_id`` (from its cgroup path); a label numapin cannot tell
is the empty string, which Prometheus treats as absent.
"""

from __future__ import annotations

from ..base.text import printable
from ..observe.verdict import placed_by_label
from .ps import Survey, Verdict, Worker

__all__ = ["METRICS", "TEXTFILE", "dcgm_bus_id", "exposition", "write_textfile"]

#: The file ``--textfile DIR`` writes (node_exporter reads every ``*.prom`` of its folder).
TEXTFILE = "numapin.prom"

#: name -> (type, help). The names are stable: dashboards and alerts match on them.
METRICS = {
    "numapin_worker": ("gauge", "A GPU worker process on this host (always 1), with its verdict and what placed it."),
    "numapin_worker_threads": ("gauge", "Threads of the worker."),
    "numapin_worker_threads_outside": ("gauge", "Threads of the worker running outside its placement's CPUs."),
    "numapin_worker_remote_memory_ratio": ("gauge", "Share (0 to 1) of the worker's own memory on other NUMA "
                                                    "nodes than its placement's."),
    "numapin_worker_misplaced": ("gauge", "1 when the worker is misplaced (threads or memory), else 0."),
    "numapin_worker_misplaced_threads": ("gauge", "1 when a thread of the worker runs outside its placement, else 0."),
    "numapin_worker_misplaced_memory": ("gauge", "1 when more of the worker's own memory than the bound lies on other "
                                                 "nodes than its placement's, else 0."),
    "numapin_worker_drift_total": ("counter", "Times the worker's keeper saw its placement move, by cause: cpuset, "
                                              "mems (the cgroup's allowed CPUs or memory nodes changed), moved (a "
                                              "thread's mask changed by someone else), inherited (a new thread on a "
                                              "mask that is not the placement), narrowed (a thread's mask made a "
                                              "slice inside the placement: left as it is)."),
    "numapin_worker_host_memory_bytes": ("gauge", "The worker's resident memory on one NUMA node, by kind: anon "
                                                  "(private anonymous), shmem (shared memory, where cudaHostAlloc "
                                                  "puts pinned buffers), huge (hugetlb), file (files mapped)."),
    "numapin_worker_host_memory_elsewhere": ("gauge", "1 when the worker's shared memory, or a host buffer it "
                                                      "declared, lies mostly off its GPU's node (or off the node it "
                                                      "was made for), else 0."),
    "numapin_gpu_workers": ("gauge", "GPU worker processes on this GPU (by its PCI address; 0: none), of every "
                                     "verdict."),
    "numapin_gpu_workers_misplaced": ("gauge", "GPU worker processes on this GPU that are misplaced (threads or "
                                               "memory)."),
    "numapin_gpu_threads_outside": ("gauge", "Threads of this GPU's workers running outside their placements' CPUs."),
    "numapin_workers": ("gauge", "GPU worker processes found on this host."),
    "numapin_workers_misplaced": ("gauge", "GPU worker processes on this host that are misplaced (threads or "
                                           "memory)."),
    "numapin_processes_unseen": ("gauge", "Processes of other users the scan could not look into (their open "
                                          "files are for their owner or root), any of which may be a GPU worker; "
                                          "0 when it runs as root."),
}


def _value(text: object) -> str:
    """A label value as the format escapes it (backslash, double quote, line feed), after what a terminal or a
    log would act on is made visible (a process name is any bytes its process chose: ``\\x1b`` stays text)."""
    return "" if text is None else printable(str(text)).replace("\\", "\\\\").replace('"', '\\"')


def _labels(pairs: dict[str, object]) -> str:
    return "{" + ",".join(f'{k}="{_value(v)}"' for k, v in pairs.items()) + "}"


def _number(value: float) -> str:
    return repr(float(value)) if isinstance(value, float) else str(value)


def dcgm_bus_id(pci: str) -> str:
    """A PCI address as DCGM's exporter labels a GPU (``pci_bus_id``): an eight-digit domain, upper-case hex
    (``0000:18:00.0`` is ``00000000:18:00.0``)."""
    domain, colon, rest = pci.partition(":")
    return f"{domain.zfill(8)}{colon}{rest}".upper() if colon and rest else pci.upper()


def exposition(found: Survey) -> str:
    """The survey as Prometheus text: one series per worker and metric, and the host's totals."""
    series: dict[str, list[str]] = {name: [] for name in METRICS}

    def add(metric: str, worker: Worker | None, value: float, **extra: object) -> None:
        pod = None if worker is None else worker.pod
        labels = {} if worker is None else {"pid": worker.pid, "rank": worker.rank, "gpu": worker.gpu,
                                            "pci": worker.pci, **extra}
        if pod is not None:  # a worker in a pod: Kubernetes's own label names, the names from its API only
            labels.update(namespace=pod.namespace, pod=pod.name, container=pod.container, pod_uid=pod.uid,
                          container_id=pod.container_id)
        series[metric].append(f"{metric}{_labels(labels) if labels else ''} {_number(value)}")

    for w in found.counted:
        add("numapin_worker", w, 1, name=w.name, placed_by=placed_by_label(w.placed_by), verdict=str(w.verdict))
        if w.verdict in (Verdict.OK, Verdict.MISPLACED):
            add("numapin_worker_threads", w, w.threads)
            add("numapin_worker_threads_outside", w, w.outside)
            add("numapin_worker_misplaced", w, int(w.verdict is Verdict.MISPLACED))
            add("numapin_worker_misplaced_threads", w, int("threads" in w.misplaced_by))
            add("numapin_worker_misplaced_memory", w, int("memory" in w.misplaced_by))
            if w.remote is not None:
                add("numapin_worker_remote_memory_ratio", w, round(w.remote, 6))
        for cause, count in w.drift:
            add("numapin_worker_drift_total", w, count, cause=cause)
        if w.host_memory is not None:
            for kind, nodes in w.host_memory.as_dict()["by_kind"].items():
                for node, size in nodes.items():
                    add("numapin_worker_host_memory_bytes", w, size, kind=kind, node=node)
            add("numapin_worker_host_memory_elsewhere", w, int(w.host_memory.elsewhere))
    uuids = dict(found.uuids)
    for pci in sorted({*found.gpus, *(w.pci for w in found.counted if w.pci)}):
        # Keyed by the GPU alone (as DCGM's exporter keys its series): stable across the workers' restarts; and
        # by DCGM's own spelling of the address too, so that a join with its series needs no label_replace.
        on = [w for w in found.counted if w.pci == pci]
        keys = f'pci="{_value(pci)}",pci_bus_id="{_value(dcgm_bus_id(pci))}"' + (
            f',UUID="{_value(uuids[pci])}"' if pci in uuids else "")
        series["numapin_gpu_workers"].append(f"numapin_gpu_workers{{{keys}}} {len(on)}")
        series["numapin_gpu_workers_misplaced"].append(
            f"numapin_gpu_workers_misplaced{{{keys}}} {sum(w.verdict is Verdict.MISPLACED for w in on)}")
        series["numapin_gpu_threads_outside"].append(
            f"numapin_gpu_threads_outside{{{keys}}} "
            f"{sum(w.outside for w in on if w.verdict in (Verdict.OK, Verdict.MISPLACED))}")
    add("numapin_workers", None, len(found.counted))
    add("numapin_workers_misplaced", None, len(found.misplaced))
    add("numapin_processes_unseen", None, found.unseen)
    lines = []
    for name, (kind, helptext) in METRICS.items():
        if series[name]:
            lines += [f"# HELP {name} {helptext}", f"# TYPE {name} {kind}", *series[name]]
    return "\n".join(lines) + "\n"


def write_textfile(folder: str, text: str) -> str:
    """Write ``text`` as ``folder/numapin.prom``, replaced whole: a new temporary file (``.tmp``, which the
    textfile collector skips) renamed over the old, in the folder held open, so a reader racing the writer
    reads the old file or the new one, never half of one. The path written; OSError as the kernel says it,
    PermissionError for a folder another user could replace (or swap the file in: node_exporter would serve
    their series as the node's)."""
    import os

    from ..base.files import Folder, settled

    mine = {os.geteuid(), 0}
    if not settled(folder, mine):
        raise PermissionError(f"--textfile {folder}: another user could replace this folder or what it holds (it, "
                              "or a folder above it, is theirs or writable by others without the sticky bit)")
    with Folder.open(os.path.realpath(folder), mine, shared=True) as held:
        held.replace(TEXTFILE, text.encode(), 0o644)
    return os.path.join(folder, TEXTFILE)
