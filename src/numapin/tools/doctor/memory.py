"""The doctor's findings about the job's memory: a refused memory policy, pinned host memory, host buffers."""

from __future__ import annotations

import os
import re

from ...base.errors import ProcessError, UsageError
from ...base.text import format_size, plural
from ...cpuset import CpuSet
from ...facts import procfs
from ...facts.machine import Facts
from ...facts.topology import free_hugepages, reserve_command
from ...kernel.mapping import HUGE_PAGES
from ...placement.ranks import local_rank
from .case import Case
from .finding import Finding

__all__ = ["host_buffers", "memory_refused", "pinned_memory", "transparent_huge_pages"]


def memory_refused(case: Case) -> list[Finding]:
    """``memory-policy-refused``: PID's record says its memory policy was refused; without ``pid``, this process
    asks the kernel for its own policy (what a worker started here would meet). Nothing for an environment handed
    in (no process of it to ask)."""
    pid, found = case.asked.pid, case.found
    if case.process is None:
        return []
    from ...pinning.memory import LIFT, REFUSER, MemoryPolicyError, get_mempolicy, refused_by

    if pid is None:
        try:
            get_mempolicy()
            return []
        except MemoryPolicyError as exc:
            if exc.errno != "EPERM":
                return []
            who = refused_by()
            sees = f"{exc}: this process's {REFUSER[who]} refuses it"
    else:
        if found is None or found.memory_refused is None:
            return []
        who = found.memory_refused
        sees = (f"its record: the memory policy asked for on node(s) {found.placement.mems} was refused by its "
                f"{REFUSER[who]}")
    return [Finding(
        "memory-policy-refused", "warning", sees,
        "numapin keeps the CPU placement and runs on: pages touched from then on follow the CPUs under the kernel's "
        "local default, but pages already elsewhere stay, a memory-only node cannot be reached, and numactl "
        "--membind fails outright (vLLM's and SGLang's binders then bind CPUs only)",
        LIFT[who])]


_REGISTER_POOL = re.compile(r"(?:^|,)\s*pinned_use_cuda_host_register\s*:\s*(?:true|1)\s*(?:,|$)", re.IGNORECASE)


def pinned_memory(case: Case) -> list[Finding]:
    """What will put a process's pinned host memory off its GPU's node: PyTorch's register pool in a process not
    wholly on one node, and one process seeing GPUs on several nodes (PyTorch's cache reuses pinned blocks
    across them), where nothing names its one GPU (an option, or numapin's record of a pin for one). The
    process's judgement (``--pid``) gives its threads' masks; without it, this process's own mask."""
    env, facts, judged, named = case.env, case.facts, case.judged, case.named
    found = []
    topology = facts.topology
    if _REGISTER_POOL.search(env.get("PYTORCH_CUDA_ALLOC_CONF", "")):
        masks = [t.cpus for t in judged.threads if t.cpus is not None] if judged is not None \
            else [CpuSet(os.sched_getaffinity(0))]
        nodes = topology.nodes_of(CpuSet.union(masks)) if masks else CpuSet()
        if len(nodes) > 1:
            found.append(Finding(
                "pinned-register-pool-unbound", "warning", "PYTORCH_CUDA_ALLOC_CONF sets "
                f"pinned_use_cuda_host_register, and the process's threads run on {plural(len(nodes), 'node')} {nodes}",
                "PyTorch pre-faults each pinned block from a pool of up to 128 threads that nothing binds, then "
                "registers it: its pages land wherever those threads run, and registered pages cannot move",
                "place the whole process on its GPU's node first (numapin exec, NUMAPIN_AUTOPIN): the pool's threads "
                "inherit the mask; or drop the setting (cudaHostAlloc then makes them in the calling thread)"))
    try:
        ranked = local_rank(env) is not None
    except UsageError:
        ranked = True  # a malformed rank: launcher-rank says it
    if not ranked and not named:
        spread = CpuSet(v.gpu.node for v in facts.visible if v.gpu.node is not None)
        if len(spread) > 1:
            found.append(Finding(
                "gpus-on-several-nodes", "info", f"this process sees {len(facts.visible)} GPUs on "
                f"{plural(len(spread), 'node')} {spread}, and no launcher rank",
                "a process that drives GPUs on several nodes cannot be placed for all of them, and PyTorch's pinned "
                "memory cache hands a block made for one GPU to another (pytorch/pytorch#160420)",
                "one process per GPU (a launcher's ranks), or each GPU's buffers made inside "
                "numapin.allocating_for(gpu=N) and pools with numapin.host_buffer(nbytes, gpu=N)"))
    return found


def host_buffers(case: Case) -> list[Finding]:
    """What a host buffer asked for does not get: huge pages not free on the GPU's node (a process's declared
    buffer that stepped down to base pages; or ``--buffer SIZE`` of ``--hugepages`` planned), and
    ``RLIMIT_MEMLOCK`` under the size to lock."""
    facts, placement, pid, judged = case.facts, case.placement, case.asked.pid, case.judged
    size, hugepages, lock = case.asked.buffer, case.asked.hugepages, case.asked.lock
    found = []
    for b in () if judged is None else judged.buffers:
        if b.asked_page_size > b.page_size and not b.transparent:  # a pool's pages, not the kernel's settings
            found.append(Finding(
                "hugepages-not-free", "warning", f"its host buffer at {b.address:#x} ({format_size(b.nbytes)}) asked "
                f"for {format_size(b.asked_page_size)} pages and got {format_size(b.page_size)} pages: node(s) "
                f"{b.nodes} had too few free", _HUGE_WHY, _huge_fix(facts, b.nodes, b.asked_page_size, b.nbytes)))
    if size is None:
        return found
    if hugepages in HUGE_PAGES and placement is not None and placement.mems:
        page = HUGE_PAGES[hugepages]
        free = [free_hugepages(facts.topology.root, n, page) for n in placement.mems]
        needed = -(-size // page)
        if all(f is not None for f in free) and sum(f or 0 for f in free) < needed:
            found.append(Finding(
                "hugepages-not-free", "warning", f"{hugepages} pages: node(s) {placement.mems} have "
                f"{sum(f or 0 for f in free)} free, {needed} needed for {format_size(size)}",
                _HUGE_WHY, _huge_fix(facts, placement.mems, page, size)))
    if lock:
        try:
            limit = procfs.locked_memory_limit(os.getpid() if pid is None else pid)
        except ProcessError:
            limit = None
        if limit is not None and limit < size:
            found.append(Finding(
                "memlock-too-low", "error", f"RLIMIT_MEMLOCK is {format_size(limit)}, under the {format_size(size)} "
                "to lock", "mlock past the limit is refused: host_buffer(lock=True) and numapin buffer --lock fail",
                "raise it where the job starts: ulimit -l unlimited, LimitMEMLOCK=infinity (systemd), docker run "
                "--ulimit memlock=-1, limits.conf's memlock; or leave the buffer unlocked (cudaHostRegister "
                "pins it for the GPU without mlock)"))
    return found


def transparent_huge_pages(case: Case) -> list[Finding]:
    """What the kernel's transparent huge page settings do to a pool that asks for them (``hugepages="thp"``
    planned, or a process's declared buffer that asked): ``thp-unavailable`` where ``enabled`` is ``never``, and
    ``thp-defrag-stalls`` where each fault compacts memory in the faulting thread. Nothing where the settings
    cannot be read (a machine read from a folder that has none)."""
    from ...facts.thp import FOLDER, read_thp

    asked = [b for b in (() if case.judged is None else case.judged.buffers) if b.transparent]
    if case.asked.hugepages != "thp" and not asked:
        return []
    thp = read_thp(case.facts.topology.root)
    whose = (f"its host buffer at {asked[0].address:#x} ({format_size(asked[0].nbytes)}) asked for transparent huge "
             "pages" if asked else "a host buffer planned with transparent huge pages")
    if thp.enabled is None:
        return []
    if not thp.available:
        return [Finding(
            "thp-unavailable", "warning", f"{whose}; transparent_hugepage/enabled is {thp.enabled}",
            f"it gets base pages: {_HUGE_WHY.split(': ', 1)[1]}",
            f"echo madvise > /{FOLDER}/enabled (root; a range that asks then gets them), or reserve a pool "
            "(--hugepages 2M)")]
    if thp.stalls:
        return [Finding(
            "thp-defrag-stalls", "warning", f"{whose}; {thp.stall_words()}",
            "the fill of a large pool then waits on compaction page by page (TensorRT-LLM#15431: a 300 GB pool "
            "never started), and so does every later fault of it",
            f"echo defer > /{FOLDER}/defrag (root): kcompactd makes huge pages in the background and a fault takes "
            "a base page meanwhile; numapin fills in parallel either way")]
    return []


_HUGE_WHY = ("the buffer steps down to base pages: a large pool then needs 512 times as many page-table entries, "
             "and its copies miss the TLB more")


def _huge_fix(facts: Facts, nodes: CpuSet, page: int, size: int) -> str:
    needed = -(-size // page)
    command = reserve_command(facts.topology.root, nodes, page, needed)
    return (f"reserve {needed} on node(s) {nodes} before the job: {command} (1G pages are surest reserved at "
            f"boot: hugepagesz={'1G' if page >= 1 << 30 else '2M'} hugepages={needed})")
