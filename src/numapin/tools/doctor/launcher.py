"""The doctor's findings about how the job is started: its launcher's binding, thread pools, OpenMP, the
start-up file."""

from __future__ import annotations

import os

from ...base import pinners
from ...base.environment import (
    AUTOPIN,
    AUTOPIN_OFF,
    KEEP,
    PATCH,
    THREAD_POOLS,
)
from ...base.text import decimal, plural
from ...cpuset import CpuSet, hex_word
from ...facts.machine import Facts
from ...facts.topology import Topology, read_topology
from ...pinning.decision import MaskOwner, classify
from ...pinning.state import exec_marker
from ...placement.modes import rank_share
from .case import Case
from .finding import Finding

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping


__all__ = ["STARTUP_FILE", "crowd_findings", "launcher_findings", "slurm_binding", "startup_file",
           "thread_pool_findings"]

_OFF = ("", "none", "disabled", "false")


#: The start-up file pip puts at the top of site-packages (its line reads NUMAPIN_AUTOPIN, NUMAPIN_KEEP and
#: NUMAPIN_PATCH).
STARTUP_FILE = "numapin-startup.pth"


def _site_folders() -> list[str]:
    import site

    return [*site.getsitepackages(), site.getusersitepackages()]


def startup_file(env: Mapping[str, str], folders: list[str] | None = None) -> list[Finding]:
    """NUMAPIN_AUTOPIN, NUMAPIN_KEEP or NUMAPIN_PATCH set where no site-packages folder holds numapin's start-up
    file (an editable install, ``pip install -e .``, carries only the package): the variables then do nothing."""
    asked = [name for name, off in ((AUTOPIN, AUTOPIN_OFF), (KEEP, AUTOPIN_OFF), (PATCH, ("",)))
             if env.get(name, "").strip().lower() not in off]
    where = _site_folders() if folders is None else folders
    if not asked or any(os.path.isfile(os.path.join(folder, STARTUP_FILE)) for folder in where):
        return []
    return [Finding(
        "startup-file-missing", "error",
        f"{' and '.join(asked)} {'are' if len(asked) > 1 else 'is'} set, but no site-packages folder of this "
        f"Python holds {STARTUP_FILE}",
        "the start-up hook never runs: an editable install (pip install -e .) carries only the package, so these "
        "variables do nothing",
        "install numapin without -e (pip install .), or start workers under numapin exec")]


_SLURM_LISTS = ("map_cpu", "mask_cpu", "map_ldom", "mask_ldom")
_SLURM_NONE = ("none", "no")


def slurm_binding(env: Mapping[str, str], rank: int, topology: Topology) -> tuple[str | None, CpuSet | None]:
    """Slurm's CPU binding of this task: its type (None when Slurm binds nothing) and its CPUs when the
    type says which (``map_cpu``, ``mask_cpu``, ``map_ldom``, ``mask_ldom``, ``rank``, ``rank_ldom``).

    Read as srun writes it: ``SLURM_CPU_BIND`` is ``[quiet|verbose,]TYPE[:LIST]``, whose LIST holds
    commas of its own (``quiet,map_cpu:0,1``); ``SLURM_CPU_BIND_TYPE`` (``map_cpu:``) and
    ``SLURM_CPU_BIND_LIST`` (``0,1``) say the same apart, and win where set. Task ``rank`` takes
    entry ``rank`` of the list, which is reused from its start when there are fewer entries.
    """
    bind = env.get("SLURM_CPU_BIND", "").strip()
    kind_text = env.get("SLURM_CPU_BIND_TYPE", "").strip().rstrip(":")
    listing = env.get("SLURM_CPU_BIND_LIST", "").strip()
    head, _, tail = bind.partition(":")  # the list after the first colon, commas and all
    words = [w.strip().lower() for w in head.split(",") if w.strip()]
    modifiers = {"quiet", "verbose"}
    kind = kind_text.lower().split(",")[-1] if kind_text else next(
        (w for w in reversed(words) if w not in modifiers), None)
    if kind is None or kind in _SLURM_NONE:
        return None, None
    entries = [v.strip() for v in (listing or tail).split(",") if v.strip()]
    try:
        if kind == "rank":
            return kind, CpuSet([rank]) if rank in topology.online else None
        if kind == "rank_ldom":
            nodes = topology.cpu_nodes
            return kind, nodes[rank % len(nodes)].cpus if nodes else None
        if kind not in _SLURM_LISTS or not entries:
            return kind, None
        entry = entries[rank % len(entries)]
        if kind.startswith("map_"):
            number = decimal(entry)
            if number is None or number < 0:
                return kind, None
            return kind, CpuSet([number]) if kind == "map_cpu" else _nodes_cpus(topology, CpuSet([number]))
        word = entry.lower().removeprefix("0x")
        if not hex_word(word, longest=len(word)):
            return kind, None
        chosen = CpuSet.from_bits(int(word, 16))
        return kind, chosen if kind == "mask_cpu" else _nodes_cpus(topology, chosen)
    except ValueError:  # an id or mask past CpuSet's limit
        return kind, None


def _nodes_cpus(topology: Topology, nodes: CpuSet) -> CpuSet | None:
    return topology.cpus_of_nodes(nodes) or None


def launcher_findings(case: Case) -> list[Finding]:
    """A launcher's binding (Slurm, Open MPI) or another's mask that keeps the worker from its GPU's CPUs."""
    env, facts, placement, rank, entry = case.env, case.facts, case.placement, case.chosen, case.found
    if placement is None:
        return []
    found = []
    target = placement.workers
    bind = env.get("SLURM_CPU_BIND", "")
    kind, cpus = slurm_binding(env, 0 if rank is None else rank.rank, facts.topology)
    if kind is not None:
        if cpus is not None and not cpus <= target:
            found.append(Finding(
                "launcher-binding", "error", f"Slurm binds this task to {plural(len(cpus), 'CPU')} {cpus} "
                f"({kind}; SLURM_CPU_BIND={bind}), not within GPU {placement.gpu}'s {target}",
                "numapin respects a launcher's mask: the worker stays where Slurm put it, away from its GPU",
                "srun --cpu-bind=none (numapin then places each task), or a map_cpu/mask_cpu list per GPU"))
        elif cpus is None:
            found.append(Finding(
                "launcher-binding", "warning", f"Slurm binds this task (SLURM_CPU_BIND={bind})",
                "numapin respects a launcher's mask: the pin is at most its intersection with the GPU's CPUs",
                "srun --cpu-bind=none, and let numapin place each task"))
    policy = env.get("OMPI_MCA_hwloc_base_binding_policy", "").strip().lower()
    if policy and policy not in _OFF:
        found.append(Finding(
            "launcher-binding", "warning", f"Open MPI binds each rank (OMPI_MCA_hwloc_base_binding_policy={policy})",
            "numapin respects a launcher's mask: the pin is at most its intersection with the GPU's CPUs",
            "mpirun --bind-to none, and let numapin place each rank"))
    mask = _process_mask(facts, case.status)
    if mask is not None:
        own = [m for m in (exec_marker(env), None if entry is None else entry.mask) if m is not None]
        # A live mask is someone else's only against the live machine's baseline: a 2-CPU host read as a
        # DGX (--machine) is not "constrained" to its two CPUs.
        live = facts.topology.allowed if facts.topology.live else read_topology("/").allowed
        if classify(mask, live, own) is MaskOwner.EXTERNAL and not target <= mask:
            found.append(Finding(
                "external-mask", "error" if not mask & target else "warning",
                f"the process mask {mask} was set by someone else (a launcher, numactl, taskset) and does not "
                f"hold GPU {placement.gpu}'s {target}",
                "numapin respects it (policy respect): the worker cannot reach its GPU's CPUs",
                "remove the outer binding, or pin with --policy override"))
    return found


def _process_mask(facts: Facts, status: dict[str, str] | None) -> CpuSet | None:
    """This process's live mask, or another's from its status (never a synthetic root's stand-in)."""
    if status is None:
        try:
            return CpuSet(os.sched_getaffinity(0))
        except OSError:
            return facts.topology.process
    return CpuSet.parse_or_none(status.get("Cpus_allowed_list"))


def thread_pool_findings(case: Case) -> list[Finding]:
    """Thread pools sized past the placement (or to the whole machine), and a process of more threads than CPUs."""
    env, facts, placement, pid, status = case.env, case.facts, case.placement, case.asked.pid, case.status
    if placement is None:
        return []
    found = []
    sharing, cpus = rank_share(facts, placement)  # the CPUs over the ranks placed on them (mode node: its GPUs)
    shared = f", shared by the ranks of {sharing} GPUs: {cpus} each" if sharing > 1 else ""
    for name in THREAD_POOLS:
        text = env.get(name, "").strip()
        size = decimal(text.split(",")[0]) if text else None  # OpenMP allows a list per nesting level
        if size is not None and size > cpus:
            found.append(Finding(
                "thread-pool-oversized", "warning",
                f"{name}={text} but the placement has {len(placement.workers)} CPU(s){shared}",
                f"{size * sharing} threads share {len(placement.workers)} CPU(s): they preempt each other and wait "
                "on each other at every barrier",
                f"export {name}={cpus} (numapin exec does it with --threads auto when it is unset)"))
    if "OMP_NUM_THREADS" not in env and len(facts.topology.online) > cpus:
        found.append(Finding(
            "thread-pool-default", "warning",
            f"OMP_NUM_THREADS is unset: thread pools size themselves to the machine ({len(facts.topology.online)} "
            f"CPUs), the placement has {len(placement.workers)}" + (f", the rank's share of them {cpus}"
                                                                   if sharing > 1 else ""),
            "more threads than CPUs to run on (MKL and OpenBLAS fall back to OMP_NUM_THREADS too)",
            f"export OMP_NUM_THREADS={cpus}, or start the worker with numapin exec (--threads auto)"))
    if pid is not None and status is not None:
        threads = decimal(status.get("Threads"))
        if threads is not None and threads > cpus:
            found.append(Finding(
                "live-threads", "info", f"process {pid} has {threads} threads for {cpus} CPU(s)",
                "fine when most of them wait; a pool of busy threads larger than the CPUs is not",
                "size the busy pools to the placement"))
    return found


#: PyTorch's setting that pre-faults pinned blocks from a pool of threads nothing binds, then registers them.


def crowd_findings(env: Mapping[str, str], vendor: str | None) -> list[Finding]:
    """The other pinners (:data:`numapin.base.pinners.PINNERS`) that this worker's environment turns against
    numapin's placement: each with the variable that fixes it."""
    found = []
    for key, row in pinners.PINNERS.items():
        fights = pinners.fighting(key, dict(env), vendor)
        if not fights:
            continue
        seen = ", ".join(f"{name}={value}" if value != "unset" else f"{name} unset" for name, value, _ in fights)
        if key == "openmp":
            found.append(Finding(
                "openmp-affinity", "warning", f"OpenMP binding is set: {seen}",
                "the OpenMP runtime re-pins each thread it starts after numapin, often several threads to one CPU",
                fights[0][2]))
            continue
        found.append(Finding(
            f"{key}-affinity", "warning", f"{row.library} pins its threads by its own rule here: {seen}",
            f"its threads then run {'on every core' if key == 'rocr' else 'where it chooses'}, not "
            f"{pinners.WHERE[row.belongs]} (what was read: {row.read.split(';')[0]})",
            "; ".join(fix for _, _, fix in fights)))
    return found
