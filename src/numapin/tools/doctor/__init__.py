"""``numapin doctor``: what in the job would undo the pin or waste it, each finding with its fix.

Reads an environment (this process's, or another's from ``/proc/PID/environ``),
the machine's facts and the placement numapin would make, and checks them
against each other. Nothing is changed. Every finding has a stable id (for
scripts: ``--json``), a severity — ``error``: the pin will be undone or cannot
hold; ``warning``: it will be wasted; ``info``: worth knowing — what was seen,
why it matters, and the fix.

Each kind of finding has its module here (the machine's, the launcher's, the pod's, the memory's);
this one gathers them.
"""

from __future__ import annotations

import os

from ...base.environment import ACCELERATOR, RANK_MAP
from ...base.errors import EnvironmentProblem, ProcessError, UsageError
from ...base.text import counted
from ...facts import procfs
from ...facts.host import Host
from ...facts.machine import Facts, cached, seen_by
from ...facts.podresources import SOCKET
from ...kernel.mapping import HUGEPAGES
from ...pinning import record
from ...pinning.judge import Expected, Judgement, Verdict, expected, judge
from ...placement.modes import Placement, PlacementMode, parse_mode, resolve
from ...placement.ranks import LocalRank, gpu_for_rank, requested_rank
from .finding import Diagnosis, Finding
from .launcher import (
    STARTUP_FILE,
    crowd_findings,
    launcher_findings,
    slurm_binding,
    startup_file,
    thread_pool_findings,
)
from .machine import interrupt_findings, link_findings, machine_findings, reserved_cpus
from .memory import host_buffers, memory_refused, pinned_memory, transparent_huge_pages
from .pod import dra_findings, pod_findings

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing at run time (mypy knows the name)
if TYPE_CHECKING:
    from collections.abc import Mapping

    from ...facts.dra import DraDevice


__all__ = ["STARTUP_FILE", "Diagnosis", "Finding", "diagnose", "pod_findings", "slurm_binding", "startup_file"]


def diagnose(
    environ: Mapping[str, str] | None = None,
    *,
    gpu: int | None = None,
    rank: str = "auto",
    mode: str | PlacementMode | None = None,
    reserve: int = 0,
    root: str | os.PathLike[str] | None = None,
    pid: int | None = None,
    pod_resources: str | None = SOCKET,
    buffer: int | None = None,
    hugepages: str | None = None,
    lock: bool = False,
    resource_slices: tuple[DraDevice, ...] = (),
) -> Diagnosis:
    """Check ``environ`` (default: this process's, or PID's when ``pid`` is given) against the placement.

    The GPU is ``gpu`` (an index in the process's own view, as everywhere),
    else ``rank``'s; with neither (``rank="auto"``), what numapin's record of the
    process says (a pin made inside the process is there too), else its
    launcher's local rank. The mode is ``mode``, else the record's, else
    ``node``. With ``pid``, the placement and the verdict are the one judge's
    (:func:`numapin.pinning.judge.judge`), as ``threads`` and ``ps`` give them.
    What was used is the diagnosis's ``basis``, an assumption said as one. A process in a Kubernetes pod is
    checked against the kubelet's files and its pod-resources API at ``pod_resources`` (None: not asked).
    ``buffer``: bytes of a host buffer to be made for the GPU (``hugepages`` ``"2M"``/``"1G"``/``"thp"``, ``lock``),
    checked against the node's free huge pages, the kernel's transparent huge page settings and the process's
    ``RLIMIT_MEMLOCK``. ``resource_slices``: the devices DRA
    drivers published (:func:`numapin.facts.dra.read_slices`), their NUMA nodes checked against the kernel's.
    """
    if hugepages is not None and hugepages not in HUGEPAGES:
        raise UsageError(f"hugepages {hugepages!r}: {', '.join(HUGEPAGES)}", value=hugepages)
    if buffer is not None and (isinstance(buffer, bool) or not isinstance(buffer, int) or buffer <= 0):
        raise UsageError(f"buffer {buffer!r}: a size is a whole number of bytes from 1", value=buffer)
    stat = None if pid is None else procfs.alive(pid)
    if pid is not None and environ is None:
        environ = procfs.environ(pid)
    # The record of the process judged: PID's, or this process's when its own environment is checked
    # (an environment handed in is another process's to be, which numapin has not placed).
    found = record.lookup(pid) if pid is not None else record.lookup(os.getpid()) if environ is None else None
    env = dict(os.environ if environ is None else environ)
    if found is not None:
        for name, value in found.pools:  # set inside the process: its environ at start does not show them
            env.setdefault(name, value)
    facts = cached(root, env)  # the facts the judge reads too: the machine read once
    if pid is not None:
        facts = seen_by(facts, pid, env)  # a container's process: the GPUs it was given, as the judge sees them
    findings: list[Finding] = []
    try:
        chosen = None if gpu is not None else requested_rank(rank, env)
    except UsageError as exc:
        if pid is None or rank != "auto":
            raise  # the caller's own environment, or its --local-rank: the caller's mistake
        # Another process's environment is a fact about that process, not a mistake of the caller's.
        chosen = None
        findings.append(Finding("launcher-rank", "error", f"its environment: {exc}",
                                "numapin cannot tell which GPU its launcher meant for it",
                                "fix the launcher's local-rank variable, or name the GPU with --gpu"))
    asked_mode = None if mode is None else parse_mode(mode)
    if chosen is not None and rank != "auto":  # --local-rank N: that rank's GPU, in the process's view
        gpu = gpu_for_rank(chosen.rank, len(facts.visible), env.get(RANK_MAP)) if facts.visible else 0
    judged: Judgement | None = None
    placement: Placement | None = None
    try:
        if pid is not None:
            judged = judge(pid, root=root, gpu=gpu, mode=asked_mode, reserve=reserve, environ=env,
                           known={} if found is None else {pid: found}, stat=stat, facts=facts)
            want, why = judged.expected, judged.note
        else:
            want, why = expected(facts, env, record=found, gpu=gpu, mode=asked_mode, reserve=reserve)
    except EnvironmentProblem as exc:
        want, why = None, str(exc)
    if want is None and pid is None:
        # An environment about to start a worker, not a process to judge: assume what numapin exec would.
        try:
            assumed = resolve(facts, env, gpu=gpu, rank=chosen, mode=asked_mode or PlacementMode.NODE,
                              reserve=reserve)
            want = Expected(assumed, assumed.workers, _assumption(gpu, chosen, facts))
        except EnvironmentProblem as exc:
            why = str(exc)
    if want is None:
        fix = (f"list GPUs of this machine in {facts.vendor.variables} (or unset it)" if facts.cut and facts.vendor
               else f"set {ACCELERATOR} to whose GPUs the process drives" if facts.cut else
               "check the launcher's local rank and NUMAPIN_RANK_MAP" if facts.visible else
               "to try numapin as on a GPU host: numapin doctor --machine dgx-h100" if not facts.inventory.gpus else
               "name the GPU with --gpu (or --local-rank), or place the process with numapin")
        findings.append(Finding("no-placement", "error", why or "nothing says which GPU the process drives",
                                "numapin has nothing to pin this process to", fix))
        basis = None
    else:
        placement, basis = want.placement, want.basis
        if placement.rank is not None and chosen is None:
            chosen = LocalRank(placement.rank, "its record" if want.record is not None else "its placement")
    host = Host(facts.topology.root)
    findings += machine_findings(facts, host, placement, env, placement.mode if placement else asked_mode or "node")
    findings += link_findings(facts, host)
    if placement is not None:
        findings += interrupt_findings(facts, host, placement, reserved_cpus(env, placement))
        status = None if pid is None else _status(pid)  # PID's mask and thread count, read once
        findings += launcher_findings(env, facts, placement, chosen, status, found)
        findings += thread_pool_findings(env, facts, placement, pid, status)
    if pid is not None or environ is None:  # a process: PID, or this one (not an environment handed in)
        findings += pod_findings(os.getpid() if pid is None else pid, facts, placement, root, env, pod_resources)
    if judged is not None and judged.verdict is Verdict.MISPLACED and want is not None:
        share = judged.remote_share()
        sees = [f"{len(judged.outside)} of {counted(len(judged.threads), 'thread')} run outside CPUs {want.target}"
                if judged.outside else "",
                f"{100 * (share or 0):.1f}% of its own memory lies outside node(s) {want.mems} (bound "
                f"{100 * (judged.max_remote or 0):.0f}%)" if "memory" in judged.misplaced_by else ""]
        findings.append(Finding(
            "misplaced", "error", "; ".join(x for x in sees if x),
            "the process is not where its placement puts it: numapin threads PID and numapin ps PID say the same",
            "run it under numapin exec (or pin() it again, with migrate=True to move its pages); numapin threads "
            "PID shows which threads moved and where its memory lies"))
    shared = None if judged is None else judged.shared_words()
    if shared:
        findings.append(Finding(
            "shared-memory-elsewhere", "warning", shared,
            "pinned host memory off the GPU's node halves its copies' bandwidth (device-to-host 13.5 against 33 GiB/s "
            "on a DGX H100, openxla/xla#21708), and pinned pages cannot be moved afterwards",
            "place the worker before it allocates (numapin exec, NUMAPIN_AUTOPIN), make each GPU's buffers inside "
            "numapin.allocating_for(gpu=N), or make pools with numapin.host_buffer(nbytes, gpu=N)"))
    for words in () if judged is None else judged.buffer_words():
        findings.append(Finding(
            "buffer-elsewhere", "warning", words,
            "a pool off its GPU's node carries each copy across the sockets' link, and its pages stay where they are",
            "make it for the GPU that uses it (numapin.host_buffer(nbytes, gpu=N)), with the node's free memory "
            "checked first (numapin buffer --gpu N --size S)"))
    findings += host_buffers(facts, placement, pid, judged, buffer, hugepages, lock)
    findings += transparent_huge_pages(facts, judged, hugepages)
    named = gpu is not None or rank != "auto" or (found is not None and found.placement.gpu is not None)
    findings += pinned_memory(env, facts, judged, named)
    if pid is not None or environ is None:  # a process, not an environment handed in
        findings += memory_refused(pid, found)
    findings += crowd_findings(env, None if placement is None else facts.vendor_at(placement.pci))
    if judged is not None:
        from ..threads_report import crowd_words

        findings += [Finding("other-pinners", "info", words, "a library's own threads: where the table of the other "
                             "pinners says they belong, they are expected there", "nothing where it says expected; "
                             "else the variable it names") for words in crowd_words(judged)]
    findings += dra_findings(facts, resource_slices)
    findings += startup_file(env)
    return Diagnosis(placement, tuple(findings), pid, basis, None if judged is None else judged.verdict)


def _assumption(gpu: int | None, rank: LocalRank | None, facts: Facts) -> str:
    """What the placement of an environment is judged by, in words; an assumption is said as one."""
    if gpu is not None:
        return f"GPU {gpu}, as asked"
    if rank is not None:
        return str(rank)
    if len(facts.visible) > 1:
        return (f"assumed local rank 0 (GPU 0 of {len(facts.visible)} visible): no record of numapin's and no "
                "launcher variable; name it with --gpu or --local-rank")
    if not facts.visible:
        return "no GPU visible, no record of numapin's, no launcher variable"
    return "its one visible GPU (no record of numapin's, no launcher variable)"


def _status(pid: int) -> dict[str, str]:
    try:
        return procfs.status(pid)
    except ProcessError:
        return {}
