"""``numapin doctor``: what in the job would undo the pin or waste it, each finding with its fix.

Reads an environment (this process's, or another's from ``/proc/PID/environ``),
the machine's facts and the placement numapin would make, and checks them
against each other. Nothing is changed. Every finding has a stable id (for
scripts: ``--json``), a severity — ``error``: the pin will be undone or cannot
hold; ``warning``: it will be wasted; ``info``: worth knowing — what was seen,
why it matters, and the fix.
"""

from __future__ import annotations

import os
import re

from ..base.environment import (
    ACCELERATOR,
    AUTOPIN,
    AUTOPIN_OFF,
    CUDA_DEVICE_ORDER,
    KEEP,
    OPENMP_BINDING,
    PATCH,
    RANK_MAP,
    RESERVED,
    THREAD_POOLS,
)
from ..base.errors import EnvironmentProblem, ProcessError, UsageError
from ..base.frozen import frozen
from ..base.text import counted, decimal, format_size, plural
from ..cpuset import CpuSet, hex_word
from ..facts import procfs
from ..facts.cgroup import read_cgroup
from ..facts.gpu import Vendor
from ..facts.host import Host
from ..facts.interrupts import Irq, device_irqs, running
from ..facts.kubelet import CONFIG, STATE, read_kubelet
from ..facts.machine import Facts, cached, seen_by
from ..facts.network import assign
from ..facts.pod import pod_of
from ..facts.podresources import SOCKET, PodResourcesUnavailable, allocatable, gpu_key, listing, match
from ..facts.topology import Topology, free_hugepages, read_topology
from ..kernel.mapping import HUGE_PAGES
from ..pinning import record
from ..pinning.decision import MaskOwner, classify
from ..pinning.judge import Expected, Judgement, Verdict, expected, judge
from ..pinning.state import exec_marker
from ..placement.modes import Placement, PlacementMode, parse_mode, rank_share, resolve
from ..placement.ranks import LocalRank, gpu_for_rank, local_rank, requested_rank

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing at run time (mypy knows the name)
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

    from ..facts.gpus import Gpu
    from ..facts.pod import Pod
    from ..facts.podresources import Container

__all__ = ["Diagnosis", "Finding", "diagnose", "pod_findings"]

_OFF = ("", "none", "disabled", "false")


@frozen
class Finding:
    """One thing that fights or wastes the pin."""

    id: str
    severity: str  # "error", "warning" or "info"
    sees: str
    why: str
    fix: str

    def as_dict(self) -> dict[str, str]:
        return {"id": self.id, "severity": self.severity, "sees": self.sees, "why": self.why, "fix": self.fix}

    def text(self) -> str:
        return f"{self.severity}: [{self.id}] {self.sees}\n    why: {self.why}\n    fix: {self.fix}"


@frozen
class Diagnosis:
    """What ``numapin doctor`` found, and the placement it checked against."""

    placement: Placement | None
    findings: tuple[Finding, ...]
    pid: int | None = None
    basis: str | None = None
    """What the placement was judged by: the process's record, its launcher's rank, an option, or an assumption."""
    verdict: Verdict | None = None
    """With ``--pid``: the one judge's verdict on the process (as ``threads`` and ``ps`` give it)."""

    @property
    def exit_code(self) -> int:
        """0 when nothing is a warning or an error, else 1."""
        return 1 if any(f.severity in ("error", "warning") for f in self.findings) else 0

    def as_dict(self) -> dict[str, Any]:
        return {"pid": self.pid, "placement": None if self.placement is None else self.placement.as_dict(),
                "basis": self.basis, "verdict": None if self.verdict is None else self.verdict.value,
                "findings": [f.as_dict() for f in self.findings]}

    def text(self) -> str:
        who = "this process" if self.pid is None else f"process {self.pid}"
        lines = [f"numapin doctor: {who}"]
        if self.placement is not None:
            p = self.placement
            lines.append(f"placement: {plural(len(p.workers), 'CPU')} {p.workers}: {p.reason}")
        if self.basis:
            lines.append(f"judged by: {self.basis}")
        if self.verdict is not None:
            lines.append(f"verdict: {self.verdict}")
        lines.extend(f.text() for f in self.findings)
        lines.append(counted(len(self.findings), "finding") if self.findings else "no findings")
        return "\n".join(lines)


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
    ``buffer``: bytes of a host buffer to be made for the GPU (``hugepages`` ``"2M"``/``"1G"``, ``lock``), checked
    against the node's free huge pages and the process's ``RLIMIT_MEMLOCK``.
    """
    if hugepages is not None and hugepages not in HUGE_PAGES:
        raise UsageError(f"hugepages {hugepages!r}: {' or '.join(HUGE_PAGES)}", value=hugepages)
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
    findings += _machine(facts, host, placement, env, placement.mode if placement else asked_mode or "node")
    if placement is not None:
        findings += _interrupts(facts, host, placement, _reserved(env, placement))
        status = None if pid is None else _status(pid)  # PID's mask and thread count, read once
        findings += _launcher(env, facts, placement, chosen, status, found)
        findings += _thread_pools(env, facts, placement, pid, status)
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
    named = gpu is not None or rank != "auto" or (found is not None and found.placement.gpu is not None)
    findings += pinned_memory(env, facts, judged, named)
    if pid is not None or environ is None:  # a process, not an environment handed in
        findings += memory_refused(pid, found)
    findings += _openmp(env)
    findings += startup_file(env)
    return Diagnosis(placement, tuple(findings), pid, basis, None if judged is None else judged.verdict)


def memory_refused(pid: int | None, found: record.Record | None) -> list[Finding]:
    """``memory-policy-refused``: PID's record says its memory policy was refused; without ``pid``, this process
    asks the kernel for its own policy (what a worker started here would meet)."""
    from ..pinning.memory import LIFT, REFUSER, MemoryPolicyError, get_mempolicy, refused_by

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


# -- the checks ---------------------------------------------------------------


def _machine(facts: Facts, host: Host, placement: Placement | None, env: Mapping[str, str],
             mode: str | PlacementMode) -> list[Finding]:
    found = []
    t = facts.topology
    balancing = decimal(host.read("proc/sys/kernel/numa_balancing"))
    if balancing:
        found.append(Finding(
            "numa-balancing", "warning", f"automatic NUMA balancing is on (kernel.numa_balancing={balancing})",
            "the kernel moves pages and tasks between nodes behind numapin's memory policy and pins, and its "
            "page-fault scanning stalls the threads it samples (16-31 ms stalls on a GPU dispatch path were "
            "measured with it on, deepseek-ai/DeepEP#624)",
            "sysctl kernel.numa_balancing=0 on hosts that place their workers (or bind memory: --memory bind)"))
    gpus = [v.gpu for v in facts.visible]
    if facts.cut and gpus:  # with none visible, no-placement says it
        runtime = "CUDA" if facts.vendor is Vendor.NVIDIA else "ROCm"
        found.append(Finding(
            "cuda-visible-devices", "warning", facts.cut,
            f"{runtime} shows this process {counted(len(gpus), 'GPU')} of the {len(facts.inventory.gpus)} found: "
            f"the entries after it are ignored, by {runtime} as by numapin",
            f"correct or remove that entry of {facts.cut.split()[0]}"))
    # The firmware's answer itself: numapin infers a node from the local CPUs when it says -1.
    unknown = [g for g in gpus if g.node is None or (g.firmware_node or 0) < 0]
    if unknown:
        guessed = ", ".join(f"{g.pci} (taken as node {g.node}, from its local CPUs)" if g.node is not None
                            else f"{g.pci} (no node)" for g in unknown)
        found.append(Finding(
            "gpu-node-unknown", "warning", f"the firmware reports NUMA node -1 for GPU(s) {guessed}",
            "numapin can only go by the GPU's local CPU list, which may span nodes or be the whole machine",
            "update the BIOS/firmware (ACPI _PXM of the PCIe root port), or pin with --cpus"))
    models = {g.model for g in gpus if g.model}
    order = env.get(CUDA_DEVICE_ORDER, "")
    if len(models) > 1 and order != "PCI_BUS_ID" and facts.vendor is Vendor.NVIDIA:
        found.append(Finding(
            "mixed-gpu-models", "warning", f"GPUs of {len(models)} models ({', '.join(sorted(models))}) and "
            f"{CUDA_DEVICE_ORDER}={order or 'unset'}",
            "CUDA then numbers the fastest GPU first, not in PCI order: cuda:N may not be the GPU numapin places",
            f"export {CUDA_DEVICE_ORDER}=PCI_BUS_ID"))
    if placement is None or placement.node is None:
        return found
    node = next((n for n in t.nodes if n.id == placement.node), None)
    if node is not None and node.cpus - t.allowed:
        severity = "error" if not node.cpus & t.allowed else "warning"
        found.append(Finding(
            "cgroup-cuts-node", severity, f"the cgroup cpuset {t.cgroup.cpus} holds {len(node.cpus & t.allowed)} "
            f"of the {len(node.cpus)} CPUs of GPU {placement.gpu}'s node {node.id}",
            "the worker gets only part of its node (or none of it)",
            "give the container the whole node (docker --cpuset-cpus, Kubernetes CPU manager static policy)"))
    gpu_mems = next((g.memory_nodes for g in gpus if g.pci == placement.pci), CpuSet())
    if gpu_mems and not gpu_mems <= t.allowed_mems and t.cgroup.mems is not None:
        found.append(Finding(
            "cgroup-excludes-memory", "error", f"the cgroup allows memory on node(s) {t.cgroup.mems}, not "
            f"GPU {placement.gpu}'s {gpu_mems}",
            "the worker's memory cannot live on its GPU's node: every host-to-device copy crosses the interconnect",
            "allow the node in the container's cpuset.mems"))
    sharing = [g.pci for g in gpus if g.node == placement.node]
    if str(mode) == PlacementMode.NODE.value and len(sharing) > 1:
        # Information, not a warning: node is the default, as PyTorch's own binding recommends it ("if in doubt")
        # and as TensorRT-LLM's, NeMo's and vLLM's binders place (each GPU's whole node); exclusive is a choice to
        # measure, not a fix of a mistake.
        _, share = rank_share(facts, placement)
        found.append(Finding(
            "shared-node", "info", f"{len(sharing)} visible GPUs on node {placement.node} share its "
            f"{len(placement.workers)} CPUs (mode node, the default): each rank's share is {share}",
            "each rank's threads may run on all of them: numapin exec sizes each one's thread pools to its share, "
            "and the scheduler moves threads among the node's CPUs as load comes and goes",
            "where the ranks' CPU work contends (busy data loaders, CPU-side preprocessing), try --mode exclusive "
            "(each rank its own share of the node's cores) and measure both: numapin ab -- COMMAND"))
    return found


def pod_findings(pid: int, facts: Facts, placement: Placement | None, root: str | os.PathLike[str] | None,
                env: Mapping[str, str], pod_resources: str | None, *, pod: Pod | None = None,
                containers: tuple[Container, ...] | None = None) -> list[Finding]:
    """For a process in a Kubernetes pod: the kubelet's CPU and topology decisions against its GPU's node (``ps``
    lists the ids of those that are warnings or errors beside each worker in a pod). ``pod`` and ``containers``
    (the API's ``List``): what the caller read already, for each of many processes (``ps``)."""
    pod = pod or pod_of(pid)
    if pod is None:
        if not env.get("KUBERNETES_SERVICE_HOST"):
            return []
        # The kubelet gives every container this variable; a cgroup namespace hides the path that names the pod.
        return [Finding(
            "pod-unidentified", "info", f"process {pid} runs in a Kubernetes pod (KUBERNETES_SERVICE_HOST is set), "
            "and its cgroup path, which would name the pod, is hidden by its cgroup namespace",
            "the kubelet's CPU and topology decisions for it cannot be checked from inside the pod",
            "run numapin doctor --pid PID on the node (as root), or in numapin's DaemonSet pod (hostPID)")]
    kubelet = read_kubelet(root)
    where = f"pod {pod.uid} ({pod.qos})"
    found = []
    if not kubelet.found:  # the container's own cpuset is still checked below
        found.append(Finding(
            "kubelet-unread", "info", f"process {pid} runs in {where}, and neither {CONFIG} nor {STATE} can be read "
            "here", "the kubelet's CPU and topology managers' decisions cannot be checked",
            "run doctor on the node as root, or mount /var/lib/kubelet read-only into numapin's pod"))
    if kubelet.unread:
        found.append(Finding(
            "kubelet-config-unread", "info", f"of {CONFIG}, not read: {'; '.join(kubelet.unread)}",
            "the kubelet settings there are not checked (its CPU and topology policies are, where read)",
            "install numapin[kubernetes] (PyYAML reads the whole file), or correct the file"))
    if kubelet.found and pod.qos == "guaranteed" and kubelet.cpu_manager == "none":
        found.append(Finding(
            "kubelet-cpu-manager-none", "warning", f"the kubelet's CPU manager policy is none and process {pid} runs "
            f"in a Guaranteed {where}", "no container gets CPUs of its own: the GPU worker's threads share every "
            "CPU of the node with all other pods, and the kubelet cannot align them with the GPU",
            f"set cpuManagerPolicy: static (and reservedSystemCPUs) in {CONFIG}, with integer CPU requests"))
    if kubelet.found and len(facts.topology.nodes) > 1 and kubelet.topology_manager in ("none", "best-effort"):
        found.append(Finding(
            "kubelet-topology-manager", "warning", f"the kubelet's topology manager policy is "
            f"{kubelet.topology_manager} on a node of {len(facts.topology.nodes)} NUMA nodes",
            "the kubelet admits a GPU pod whose CPUs (or memory) lie on another node than its GPU: nothing makes "
            "them agree", f"set topologyManagerPolicy: single-numa-node (or restricted) in {CONFIG}"))
    exclusive = kubelet.exclusive.get(pod.uid, {})  # its containers' own CPUs, by container name
    if kubelet.topology_scope == "container" and len(exclusive) > 1:
        found.append(Finding(
            "kubelet-topology-scope", "warning", f"topology manager scope container and {len(exclusive)} "
            f"containers of {where} with CPUs of their own ({', '.join(sorted(exclusive))})",
            "each container is aligned alone, so the containers of one GPU job may land on different nodes",
            f"set topologyManagerScope: pod in {CONFIG}"))
    mask = read_cgroup(Host.at("/"), pid=pid).cpus  # the container's cpuset: processes are always the live ones
    if pod_resources is not None:
        found += _pod_resources(facts, placement, pod_resources, mask, containers)
    node = None if placement is None else next((n for n in facts.topology.nodes if n.id == placement.node), None)
    if placement is None or node is None:
        return found
    mine = kubelet.by_container_id.get(pod.container_id or "") or next(
        (cpus for cpus in exclusive.values() if mask is not None and cpus == mask), None) or (
        next(iter(exclusive.values())) if len(exclusive) == 1 else None)
    if mine is not None and not mine <= node.cpus:
        found.append(Finding(
            "kubelet-cpus-other-node", "error", f"the CPU manager gave the container CPUs {mine}, "
            f"{'none' if not mine & node.cpus else 'only part'} of them on GPU {placement.gpu}'s node {node.id} "
            f"({node.cpus})", "its threads run across the interconnect from its GPU, and numapin, inside the "
            "container's cpuset, can only narrow them", f"set topologyManagerPolicy: single-numa-node in {CONFIG} "
            "(the kubelet then takes the CPUs from the GPU's node), or lower the pod's CPU request to fit one node"))
    if mask is not None and not mask & node.cpus:
        found.append(Finding(
            "pod-cpuset-misses-gpu-node", "error", f"the container's cpuset {mask} holds no CPU of GPU "
            f"{placement.gpu}'s node {node.id} ({node.cpus})", "numapin can place nothing useful: every CPU the "
            "container may use is across the interconnect from its GPU", "have the kubelet align the pod: "
            f"cpuManagerPolicy: static and topologyManagerPolicy: single-numa-node in {CONFIG}, a Guaranteed pod "
            "with integer CPU requests"))
    return found


def _pod_resources(facts: Facts, placement: Placement | None, socket: str, mask: CpuSet | None,
                   containers: tuple[Container, ...] | None) -> list[Finding]:
    """What the kubelet's pod-resources API says of the process's container (``containers``: its ``List``, when
    read already): a GPU from Dynamic Resource Allocation, which the topology manager does not align."""
    stale: list[Finding] = []
    try:
        if containers is None:
            listed = listing(socket)
            containers = listed.containers
            if listed.stale:
                stale = [Finding("pod-resources-stale", "info", f"the pods' devices are {listed.stale}",
                                 "what follows is checked against the kubelet's earlier answer",
                                 "check the kubelet (its pod-resources socket accepts but does not answer)")]
    except PodResourcesUnavailable as exc:
        return [Finding("pod-resources-unread", "info", str(exc), "the container's devices and the way its GPU "
                        "came to it cannot be checked", "install numapin[kubernetes] and mount the kubelet's "
                        "pod-resources folder (numapin's DaemonSet does)")]
    gpu = next((g for g in facts.inventory.gpus
                if placement is not None and g.is_at(placement.pci, placement.partition)), None)
    key = None if gpu is None else gpu_key(gpu)
    mine = match(containers, cpus=mask, gpus={gpu.uuid} if gpu is not None and gpu.uuid else (),
                 dra={key} if key is not None else ())
    found = [*stale, *_plugin_node(gpu, socket)]
    # NVIDIA's and AMD's device plugins (nvidia.com/gpu, amd.com/gpu): devices the topology manager aligns.
    plugged = mine is not None and any(d.resource.startswith(("nvidia.com/", "amd.com/")) for d in mine.devices)
    if mine is None or not mine.claims or plugged:
        return found
    container = f"container {mine.namespace}/{mine.pod}/{mine.name}"
    claims = ", ".join(mine.claims)
    why = ("the kubelet's topology manager aligns device-plugin devices with CPUs, not DRA's "
           "(kubernetes/website#56232): nothing put the container's CPUs near its GPU")
    fix = ("pin inside the pod with numapin exec or NUMAPIN_AUTOPIN (the GPU's node within its cpuset), and give the "
           "pod CPUs on that node (a DRA driver that publishes NUMA attributes, matched in the claim)")
    given = {d.device: g for d in mine.dra for g in facts.inventory.gpus if d.gpu is not None and d.gpu == gpu_key(g)}
    if not given:  # devices of no GPU numapin knows here (another driver, a VFIO device)
        return [*found, Finding("gpu-from-dra", "warning", f"{container} got its devices through Dynamic Resource "
                                f"Allocation (claim {claims}), and no GPU from a device plugin", why, fix)]
    near = facts.topology.cpus_of_nodes(CpuSet(g.node for g in given.values() if g.node is not None))
    if mask is not None and near and mask <= near:
        return found  # its cpuset lies on its DRA GPUs' node(s): aligned, by whoever did it
    named = ", ".join(f"{device} ({g.pci}, node {g.node})" for device, g in sorted(given.items()))
    return [*found, Finding(
        "gpu-from-dra", "warning", f"{container} got GPU {named} through Dynamic Resource Allocation (claim "
        f"{claims}); its cpuset {mask} is not on that node's CPUs ({near})", why, fix)]


def _plugin_node(gpu: Gpu | None, socket: str) -> list[Finding]:
    """The NUMA node the GPU's device plugin reports to the kubelet (``GetAllocatableResources``) against the
    kernel's: the topology manager aligns a pod's CPUs with the plugin's."""
    if gpu is None or gpu.uuid is None or gpu.node is None:
        return []
    try:
        devices, _ = allocatable(socket)
    except PodResourcesUnavailable:
        return []  # said once already, by List's finding
    reported = {n for d in devices for i in d.ids if i.lower() == gpu.uuid.lower() for n in d.nodes}
    if not reported or gpu.node in reported:
        return []
    return [Finding(
        "device-plugin-numa", "warning", f"the device plugin reports GPU {gpu.uuid} ({gpu.pci}) on NUMA node(s) "
        f"{', '.join(map(str, sorted(reported)))}; the kernel puts it on node {gpu.node}",
        "the kubelet's topology manager aligns the pod's CPUs and memory with the plugin's node, away from the GPU",
        "correct the plugin's topology (NVIDIA's device plugin reads the GPU's numa_node from sysfs: check the "
        "firmware's, and the plugin's version), then restart the pod")]


def _reserved(env: Mapping[str, str], placement: Placement) -> CpuSet:
    """The hot thread's cores: the placement's, else those numapin exec --reserve exported to the process."""
    if placement.reserved:
        return placement.reserved
    return CpuSet.parse_or_none(env.get(RESERVED, "")) or CpuSet()


def _interrupts(facts: Facts, host: Host, placement: Placement, reserved: CpuSet) -> list[Finding]:
    """The GPU's and its NIC's interrupts: on another node, on the reserved cores; irqbalance moving them."""
    t = facts.topology
    gpu = next((v.gpu for v in facts.visible if v.gpu.is_at(placement.pci, placement.partition)), None)
    if gpu is None:
        return []
    devices = [(f"GPU {placement.gpu}", gpu.pci, gpu.node)]
    nic = assign(facts.network(), [(placement.rank, placement.pci)])[0]
    if nic is not None:
        devices.append((f"{nic.nic.name}, the NIC of GPU {placement.gpu}", nic.nic.pci, nic.nic.node))
    balancer = running(host, "irqbalance")
    again = (f"; irqbalance (PID {balancer}) would move them back: ban them "
             f"(its --banirq=N for each) or stop it") if balancer else ""
    found = []
    irqs_of = device_irqs(host, [pci for _, pci, _ in devices])
    for what, pci, node in devices:
        irqs = [i for i in irqs_of[pci] if i.delivered]
        if node is None or not irqs:
            continue
        home = t.node(node).cpus
        away = [i for i in irqs if not i.delivered & home]  # type: ignore[operator]
        if away:
            where = CpuSet.union(i.delivered for i in away if i.delivered)
            which = ("its one interrupt" if len(irqs) == 1 else f"all {len(irqs)} interrupts" if len(away) == len(irqs)
                     else f"{len(away)} of the {len(irqs)} interrupts")
            # Onto the node's CPUs but the reserved cores: the fix must not be what irq-on-reserved undoes.
            target = (home - reserved) or home
            found.append(Finding(
                "irq-other-node", "warning",
                f"{which} of {what} ({pci}) {'goes' if len(away) == 1 else 'go'} to CPUs {where}, off its node "
                f"{node} (IRQ {_numbers(away)})",
                "each completion then wakes a CPU of another node and its data crosses the interconnect, "
                "away from the worker's threads and memory",
                f"for N in {_numbers(away, ' ')}; do echo {target} > /proc/irq/$N/smp_affinity_list; done{again}"))
        hot = [i for i in irqs if reserved and i.delivered & reserved]  # type: ignore[operator]
        if hot:
            found.append(Finding(
                "irq-on-reserved", "warning",
                f"{counted(len(hot), 'interrupt')} of {what} ({pci}) go to the reserved cores {reserved} "
                f"(IRQ {_numbers(hot)})",
                "the latency-critical thread on those cores is interrupted by every one of them",
                f"move them to the worker's other CPUs: for N in {_numbers(hot, ' ')}; "
                f"do echo {placement.workers - reserved} > /proc/irq/$N/smp_affinity_list; done{again}"))
    if balancer:
        found.append(Finding(
            "irqbalance", "warning" if found or reserved else "info",
            f"irqbalance is running (PID {balancer})",
            "it moves interrupts between CPUs every few seconds, under the worker's feet: onto its reserved cores, "
            "or its GPU's and NIC's onto another node",
            "ban the GPU's and NIC's interrupts and the reserved cores (IRQBALANCE_BANNED_CPULIST, --banirq), "
            "or stop it where interrupt affinities are set by hand"))
    return found


def _numbers(irqs: list[Irq], sep: str = ",") -> str:
    shown = [str(i.number) for i in irqs[:16]]
    return sep.join(shown) + (f"{sep}..." if len(irqs) > 16 else "")


#: Slurm's --cpu-bind types that name CPUs or nodes per task, and those that let Slurm choose.
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


def _launcher(env: Mapping[str, str], facts: Facts, placement: Placement, rank: LocalRank | None,
              status: dict[str, str] | None, entry: record.Record | None) -> list[Finding]:
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
    mask = _process_mask(facts, status)
    if mask is not None:
        own = [m for m in (exec_marker(env), None if entry is None else entry.mask) if m is not None]
        # A live mask is someone else's only against the live machine's baseline: a 2-CPU host read as a
        # DGX (--machine) is not "constrained" to its two CPUs.
        live = facts.topology.allowed if Host(facts.topology.root).is_live else read_topology("/").allowed
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


def _thread_pools(env: Mapping[str, str], facts: Facts, placement: Placement, pid: int | None,
                  status: dict[str, str] | None) -> list[Finding]:
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
_REGISTER_POOL = re.compile(r"(?:^|,)\s*pinned_use_cuda_host_register\s*:\s*(?:true|1)\s*(?:,|$)", re.IGNORECASE)


def pinned_memory(env: Mapping[str, str], facts: Facts, judged: Judgement | None, named: bool) -> list[Finding]:
    """What will put a process's pinned host memory off its GPU's node: PyTorch's register pool in a process not
    wholly on one node, and one process seeing GPUs on several nodes (PyTorch's cache reuses pinned blocks
    across them), where nothing names its one GPU (``named``: an option, or numapin's record of a pin for one).
    ``judged``: the process's judgement (``--pid``); without it, this process's own mask."""
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


def host_buffers(facts: Facts, placement: Placement | None, pid: int | None, judged: Judgement | None,
                 size: int | None, hugepages: str | None, lock: bool) -> list[Finding]:
    """What a host buffer asked for does not get: huge pages not free on the GPU's node (a process's declared
    buffer that stepped down to base pages; or ``size`` of ``hugepages`` planned), and ``RLIMIT_MEMLOCK`` under
    ``size`` to lock."""
    found = []
    for b in () if judged is None else judged.buffers:
        if b.asked_page_size > b.page_size:
            found.append(Finding(
                "hugepages-not-free", "warning", f"its host buffer at {b.address:#x} ({format_size(b.nbytes)}) asked "
                f"for {format_size(b.asked_page_size)} pages and got {format_size(b.page_size)} pages: node(s) "
                f"{b.nodes} had too few free", _HUGE_WHY, _huge_fix(b.nodes, b.asked_page_size, b.nbytes)))
    if size is None:
        return found
    if hugepages is not None and placement is not None and placement.mems:
        page = HUGE_PAGES[hugepages]
        free = [free_hugepages(facts.topology.root, n, page) for n in placement.mems]
        needed = -(-size // page)
        if all(f is not None for f in free) and sum(f or 0 for f in free) < needed:
            found.append(Finding(
                "hugepages-not-free", "warning", f"{hugepages} pages: node(s) {placement.mems} have "
                f"{sum(f or 0 for f in free)} free, {needed} needed for {format_size(size)}",
                _HUGE_WHY, _huge_fix(placement.mems, page, size)))
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


_HUGE_WHY = ("the buffer steps down to base pages: a large pool then needs 512 times as many page-table entries, "
             "and its copies miss the TLB more")


def _huge_fix(nodes: CpuSet, page: int, size: int) -> str:
    kib = page >> 10
    return (f"reserve {-(-size // page)} on node(s) {nodes} before the job: echo N > /sys/devices/system/node/"
            f"nodeX/hugepages/hugepages-{kib}kB/nr_hugepages (1G pages are surest reserved at boot: "
            f"hugepagesz={'1G' if page >= 1 << 30 else '2M'} hugepages=N)")


def _openmp(env: Mapping[str, str]) -> list[Finding]:
    set_ = [f"{name}={env[name]}" for name in OPENMP_BINDING if env.get(name, "").strip().lower() not in _OFF]
    if not set_:
        return []
    return [Finding(
        "openmp-affinity", "warning", f"OpenMP binding is set: {', '.join(set_)}",
        "the OpenMP runtime re-pins each thread it starts after numapin, often several threads to one CPU",
        f"unset {', '.join(s.split('=')[0] for s in set_)} (numapin's mask already holds every thread), "
        "or OMP_PROC_BIND=false")]
