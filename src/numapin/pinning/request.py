"""The request of a whole-process pin, and its one path into one: ``numapin exec``'s, the start-up hook's
(``NUMAPIN_AUTOPIN`` and its ``NUMAPIN_*`` options), Ray's workers' and the late naming of a GPU through PyTorch.

:func:`prepare` decides before anything changes, from the same facts and resolver as :func:`numapin.pin`;
:func:`bind` pins and returns the environment a program (or this process's children) gets, with numapin's
marker (``NUMAPIN_APPLIED``), the thread pools' sizes and the NIC variables; :func:`pin_running` carries a request
without a program into this running process. Running a program is the command's (:mod:`numapin.tools.exec`).
"""

from __future__ import annotations

import os

from ..base.environment import APPLIED, NIC_VARIABLES, RESERVED, THREAD_POOLS
from ..base.errors import EnvironmentProblem, UsageError
from ..base.frozen import field, frozen, replace
from ..base.logger import log
from ..base.pinners import PINNERS, sets
from ..base.text import plural
from ..cpuset import CpuSet
from ..facts.machine import Facts, rehearsal
from ..facts.machine import cached as cached_facts
from ..placement.modes import Cores, Placement, PlacementMode, rank_share, resolve
from ..placement.ranks import LocalRank, requested_rank
from .decision import ExternalMaskPolicy
from .memory import MemoryMode, MemoryNodes, place_memory
from .options import OPTIONS, Nics, default, parse_threads
from .process import Options, pin_decided
from .results import PinResult
from .state import acting

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from typing import Any

    from ..facts.network import RankNic

__all__ = ["CROWD", "ExecRequest", "PreparedExec", "autopin_request", "bind", "pin_running", "prepare"]

#: Every variable numapin may set for the crowd of other pinners (:attr:`PreparedExec.crowd`).
CROWD = tuple(name for row in PINNERS.values() for name, _ in row.inherit)


@frozen
class ExecRequest:
    """What ``numapin exec`` was asked to do.

    An empty ``program`` binds this process itself, already running (the
    start-up file's ``NUMAPIN_AUTOPIN``): the same decision and pin, no exec.
    """

    # The options' defaults are the table's (numapin.pinning.options), as exec and the hook take them.
    program: Sequence[str]
    gpu: int | None = default("gpu")
    local_rank: str = default("local_rank")
    mode: PlacementMode = default("mode")
    cpus: CpuSet | None = default("cpus")
    reserve: int = default("reserve")
    memory: MemoryMode = default("memory")
    policy: ExternalMaskPolicy = default("policy")
    strict: bool = False
    root: str | None = None
    machine: str | None = None
    """The synthetic machine ``root`` was written for by ``--machine NAME`` (a temporary folder, gone with the
    command: nothing rehearsed there is kept); None for a root the user gave (``--root``, ``NUMAPIN_FSROOT``)."""
    threads: str = default("threads")
    """Thread-pool sizes for the program: ``auto`` (the placement's CPU count), ``keep``, or a number."""
    nodes: CpuSet | None = default("nodes")
    """Node-only binding: the CPUs of these NUMA nodes (those this process may use), as ``numactl -N``."""
    mems: CpuSet | None = default("mems")
    """The memory policy's nodes instead of the placement's; alone (no GPU, CPUs or nodes), memory-only
    binding: the CPUs are left as they are, as ``numactl -m``."""
    cores: Cores = default("cores")
    """``fastest``: only the fastest kind of core among the placement's (where the machine has kinds)."""
    nics: Nics = default("nics")
    """``auto``: export the GPU's nearest NIC to UCX and NVSHMEM (:data:`NIC_VARIABLES`); ``none``: nothing."""

    @property
    def memory_only(self) -> bool:
        return self.mems is not None and self.gpu is None and self.cpus is None and self.nodes is None


@frozen
class PreparedExec:
    """The decision, made before anything changes: what to pin, then what to run."""

    request: ExecRequest
    executable: str
    placement: Placement | None
    rank: LocalRank | None
    notes: tuple[str, ...]
    unpinned: str | None = None
    """Why the program will run unpinned (an environment problem outside strict mode)."""
    pools: tuple[tuple[str, str], ...] = ()
    """Thread-pool variables numapin will set for the program, ``(name, value)``."""
    kept_pools: tuple[tuple[str, str], ...] = ()
    """Thread-pool variables the caller set, which numapin leaves as they are."""
    nic: RankNic | None = None
    """With ``--nics auto``: the NIC chosen for the GPU."""
    network: tuple[tuple[str, str], ...] = ()
    """NIC variables numapin will set for the program (``--nics auto``), ``(name, value)``."""
    kept_network: tuple[tuple[str, str], ...] = ()
    """NIC variables the caller set, which numapin leaves as they are."""
    crowd: tuple[tuple[str, str], ...] = ()
    """What numapin sets so that the other pinners' threads inherit the placement or can be named
    (:data:`numapin.base.pinners.PINNERS`: ROCr's helpers on an AMD GPU, NCCL's names on NVIDIA's)."""
    kept_crowd: tuple[tuple[str, str], ...] = ()
    """Those the caller set, which numapin leaves as they are."""
    facts: Facts | None = field(default=None, compare=False)
    """The machine's facts the decision was made with: the pin uses them, never asks again."""

    def as_dict(self) -> dict[str, Any]:
        return {
            "program": list(self.request.program),
            "executable": self.executable,
            "local_rank": None if self.rank is None else {"rank": self.rank.rank, "variable": self.rank.variable},
            "placement": None if self.placement is None else self.placement.as_dict(),
            "unpinned": self.unpinned,
            "memory": self.request.memory.value,
            "policy": self.request.policy.value,
            "threads": {"set": dict(self.pools), "kept": dict(self.kept_pools)},
            "nics": None if self.request.nics is Nics.NONE else {
                "nic": None if self.nic is None else self.nic.as_dict(),
                "set": dict(self.network), "kept": dict(self.kept_network)},
            "crowd": {"set": dict(self.crowd), "kept": dict(self.kept_crowd)},
            "notes": list(self.notes),
        }

    def describe(self) -> str:
        lines = []
        if self.rank is not None:
            lines.append(str(self.rank))
        if self.request.memory_only:
            mems = self.request.mems or CpuSet()
            lines.append(f"would leave the CPUs as they are and set memory policy {self.request.memory} on "
                         f"{plural(len(mems), 'node')} {mems}")
        elif self.placement is None:
            lines.append("would run unpinned" + (f": {self.unpinned}" if self.unpinned else "")
                         + ("" if self.request.strict else
                            " (numapin fails open: with --strict this is an error instead)"))
        else:
            p = self.placement
            lines.append(f"would pin every thread to {plural(len(p.workers), 'CPU')} {p.workers}: {p.reason}")
            if p.reserved:
                lines.append(f"would export {RESERVED}={p.reserved} for the latency-critical thread")
            if self.request.memory is not MemoryMode.NONE:
                lines.append(f"would set memory policy {self.request.memory} on {plural(len(p.mems), 'node')} {p.mems}")
        if self.pools:
            lines.append("would set " + " ".join(f"{k}={v}" for k, v in self.pools) + " (thread pools)")
        if self.kept_pools:
            lines.append("keeps " + " ".join(f"{k}={v}" for k, v in self.kept_pools) + " (set by the caller)")
        if self.nic is not None:
            lines.append(f"NIC {self.nic.nic.name} ({self.nic.relation} from the GPU, {self.nic.nic.pci})")
        if self.network:
            lines.append("would set " + " ".join(f"{k}={v}" for k, v in self.network) + " (the GPU's NIC)")
        if self.kept_network:
            lines.append("keeps " + " ".join(f"{k}={v}" for k, v in self.kept_network) + " (set by the caller)")
        if self.crowd:
            lines.append("would set " + " ".join(f"{k}={v}" for k, v in self.crowd)
                         + " (the runtime's and libraries' threads inherit the placement, or are named)")
        if self.kept_crowd:
            lines.append("keeps " + " ".join(f"{k}={v}" for k, v in self.kept_crowd) + " (set by the caller)")
        # A note the unpinned line already says (the entry that emptied the GPU list) is not said twice.
        lines.extend(f"note: {n}" for n in self.notes if not (self.placement is None and n in (self.unpinned or "")))
        if self.request.program:
            lines.append("then exec: " + " ".join(self.request.program))
        return "\n".join(lines)


def _typed(request: ExecRequest, facts: Facts) -> str | None:
    """What the user typed that names the machine, where the request's root is not this host's: ``--machine NAME``,
    or ``--root DIR``; None where it came from the environment (:func:`rehearsal` names the variable)."""
    if request.machine is not None:
        return f"--machine {request.machine}"
    if request.root is None:
        return None
    from ..facts.synthetic import written

    name = written(facts.topology.root)
    return f"--root {request.root}" + (f" (the synthetic machine {name})" if name else "")


def _exec_rank(request: ExecRequest, environ: Mapping[str, str]) -> LocalRank | None:
    if request.gpu is not None or request.cpus is not None:
        return None
    return requested_rank(request.local_rank, environ)


def _network(facts: Facts, placement: Placement, nics: Nics, environ: Mapping[str, str], notes: list[str]
             ) -> tuple[RankNic | None, tuple[tuple[str, str], ...], tuple[tuple[str, str], ...]]:
    """With ``auto``: the GPU's NIC, the variables to set for it, and those the caller set (kept)."""
    if nics is Nics.NONE or placement.pci is None:
        return None, (), ()
    from ..facts.network import assign  # only with --nics auto: the start-up hook's pins never import it

    nic = assign(facts.network(), [(placement.rank, placement.pci)])[0]
    if nic is None:
        notes.append("--nics auto: no network device found near the GPU; no NIC variable set")
        return None, (), ()
    if not nic.nic.ports:
        notes.append(f"--nics auto: {nic.nic.name}, the GPU's nearest NIC, is no RDMA device; no NIC variable set")
        return nic, (), ()
    device = f"{nic.nic.name}:{nic.nic.ports[0]}"
    return (nic, tuple((name, device) for name in NIC_VARIABLES if name not in environ),
            tuple((name, environ[name]) for name in NIC_VARIABLES if name in environ))


def _node_cpus(facts: Facts, nodes: CpuSet) -> CpuSet:
    """The CPUs of ``nodes`` this process may use (``--nodes``); UsageError for a node with none."""
    t = facts.topology
    known = CpuSet(n.id for n in t.cpu_nodes)
    if nodes - known:
        raise UsageError(f"--nodes {nodes}: {plural(len(nodes - known), 'node')} {nodes - known} "
                         f"{plural(len(nodes - known), 'has', 'have')} no CPUs here (CPU nodes: {known})", value=nodes)
    cpus = t.cpus_of_nodes(nodes) & t.allowed
    if not cpus:
        raise UsageError(f"--nodes {nodes}: none of their CPUs is allowed (allowed: {t.allowed})", value=nodes)
    return cpus


def _memory_nodes(facts: Facts, mems: CpuSet | None) -> CpuSet | None:
    """``--mems`` checked against the nodes that hold memory; None when not given."""
    if mems is None:
        return None
    exist = MemoryNodes.of(facts.topology).exist
    if not mems or mems - exist:
        raise UsageError(f"--mems {mems}: memory nodes here are {exist}", value=mems)
    return mems


def autopin_request(env: Mapping[str, str]) -> ExecRequest:
    """``numapin exec``'s request for this process, from the ``NUMAPIN_*`` option variables
    (the start-up hook's, and Ray's workers' when Ray hands them GPUs): every option of the table that has one."""
    return ExecRequest(program=(), **{o.name: o.from_environ(env) for o in OPTIONS.values() if o.variable})


def _pools(threads: str, cpus: int, environ: Mapping[str, str]) -> tuple[tuple[tuple[str, str], ...],
                                                                          tuple[tuple[str, str], ...]]:
    """The thread-pool variables to set (unset ones) and to keep (the caller's), for ``--threads``."""
    if threads == "keep":
        return (), ()
    size = str(cpus) if threads == "auto" else threads
    pools = tuple((name, size) for name in THREAD_POOLS if name not in environ)
    kept = tuple((name, environ[name]) for name in THREAD_POOLS if name in environ)
    return pools, kept


def bind(prepared: PreparedExec, environ: Mapping[str, str] | None = None) -> tuple[PinResult | None, dict[str, str]]:
    """Pin this process as decided; return the pin's result and the environment with numapin's marker."""
    env = dict(os.environ if environ is None else environ)
    request = prepared.request
    facts = prepared.facts or cached_facts(request.root, env)
    if request.memory_only and request.mems is not None:  # the CPUs stay as they are
        placed = place_memory(request.mems, request.memory, False, strict=request.strict,
                              limits=MemoryNodes.of(facts.topology))
        if placed.warning:
            log.warning("%s", placed.warning)
        return None, env
    if prepared.placement is None:
        what = "the program runs" if request.program else "this process runs"
        log.warning("%s; %s unpinned", prepared.unpinned or "no placement", what)
        return None, env
    # The crowd's threads inherit whatever the process holds, pinned here or not (a rehearsal, a refusal).
    env.update(prepared.crowd)
    if prepared.crowd:
        log.info("set %s: the runtime's and libraries' threads inherit the placement, or are named",
                 " ".join(f"{k}={v}" for k, v in prepared.crowd))
    p = prepared.placement
    # The live root is this host: only a machine read from elsewhere costs the start-up hook a read of /sys. A
    # rehearsal (--machine dgx-h100 on a laptop): the kernel here has none of that machine's CPUs to pin to;
    # respecting "someone else's" mask, or stepping down, would only hide that.
    why = rehearsal(facts.topology, env, typed=_typed(request, facts))
    if why is not None:
        if request.strict:
            raise EnvironmentProblem(why)
        log.warning("%s; %s unpinned%s", why, "the program runs" if request.program else "this process runs",
                    _rehearsed(request, facts, p))
        return None, env
    # The decision made once, in prepare_exec(), is the one applied. The reserved cores are the
    # program's to take (NUMAPIN_RESERVED below): this process and every thread run on the rest.
    whole = replace(p, cpus=p.workers, reserved=CpuSet()) if p.reserved else p
    # The process's record says who pinned: numapin exec, or the start-up hook (the same request, no program).
    with acting("exec" if request.program else "autopin", prepared.pools):
        result = pin_decided(Options(policy=request.policy, all_threads=False, strict=request.strict,
                                     memory=request.memory, migrate=False, environ=env),
                             placement=whole, root=request.root, facts=facts)
    if result.mask is not None and result.on_target:
        env[APPLIED] = str(result.mask)
    if p.reserved:
        env[RESERVED] = str(p.reserved)
    env.update(prepared.pools)
    env.update(prepared.network)
    if prepared.kept_pools:
        log.info("thread pools left as set: %s", " ".join(f"{k}={v}" for k, v in prepared.kept_pools))
    return result, env


def _rehearsed(request: ExecRequest, facts: Facts, placement: Placement) -> str:
    """Leave the rehearsal's decision beside the machine rehearsed, where the user will look (not in the temporary
    folder of ``--machine``); the words that say where, or nothing."""
    if request.machine is not None:
        return ""
    from .rehearsed import note

    kept = note(facts.topology.root, placement, "exec" if request.program else "autopin")
    return f" ({kept})" if kept else ""


def pin_running(request: ExecRequest, environ: Mapping[str, str] | None = None) -> PinResult | None:
    """Carry a whole request (``numapin exec``'s, without a program) into a pin of this running process.

    The one path of the start-up hook and Ray's workers: the same decision as
    ``numapin exec`` (mode, memory, policy, reserve, threads, cores, NICs), then
    what exec would hand a program goes into this process's environment, for its
    children (they see the mask as numapin's) and for the OpenMP and BLAS
    libraries it loads later.
    """
    env = os.environ if environ is None else environ
    result, bound = bind(prepare(request, env), env)
    for name in (APPLIED, RESERVED, *THREAD_POOLS, *NIC_VARIABLES, *CROWD):
        if name in bound and env.get(name) != bound[name]:
            os.environ[name] = bound[name]
    return result


def prepare(request: ExecRequest, environ: Mapping[str, str], executable: str = "") -> PreparedExec:
    """Decide what the request will do; raises on bad input, changes nothing. ``executable``: the program's
    file, found by the caller (``numapin exec``: :func:`numapin.tools.exec.which`)."""
    parse_threads(request.threads)
    rank = _exec_rank(request, environ)
    # The facts pin() will use: read once, for the decision and the pin.
    facts = cached_facts(request.root, environ)
    memory_nodes = _memory_nodes(facts, request.mems)
    if request.memory_only:
        if request.memory is MemoryMode.NONE:
            raise UsageError("--mems without a CPU placement sets a memory policy: give --memory bind or "
                             "preferred", value=request.mems)
        ignored = [option for option, given in (("--reserve", request.reserve > 0),
                                                ("--cores fastest", request.cores is Cores.FASTEST),
                                                ("--nics auto", request.nics is Nics.AUTO)) if given]
        if ignored:
            raise UsageError(f"--mems alone leaves the CPUs as they are: {' and '.join(ignored)} would do nothing; "
                             "give --gpu, --cpus or --nodes too", value=request.mems)
        return PreparedExec(request, executable, None, None, tuple(facts.notes), facts=facts)
    if request.nodes is not None:
        request = replace(request, cpus=_node_cpus(facts, request.nodes))
    notes = list(facts.notes)
    if rank is not None and rank.ignored:
        notes.append(str(rank))
    if request.gpu is None and request.cpus is None and rank is None:
        notes.append("no launcher variable set: local rank 0")
    try:
        placement = resolve(facts, environ, gpu=request.gpu, cpus=request.cpus, rank=rank, mode=request.mode,
                            reserve=request.reserve, cores=request.cores)
    except EnvironmentProblem as exc:
        if request.strict:
            raise
        # Deciding changes nothing and says nothing: apply_exec() warns when it
        # really runs the program unpinned, a dry run prints the reason once.
        return PreparedExec(request, executable, None, rank, tuple(notes), unpinned=str(exc), facts=facts)
    if memory_nodes is not None:
        placement = replace(placement, mems=memory_nodes)
    # Pools sized to the rank's share of CPUs it shares with the other ranks of the job (mode node: the node's
    # GPUs' ranks), not to all of them: four ranks of 112 threads on one node's 112 CPUs is the slowdown the
    # sizing exists to prevent (pytorch/pytorch#125547).
    sharing, share = rank_share(facts, placement)
    pools, kept = _pools(request.threads, share, environ)
    if sharing > 1 and pools:
        notes.append(f"thread pools sized {share}: the {len(placement.workers)} CPUs are shared by the ranks of "
                     f"{sharing} GPUs (mode {placement.mode}; --mode exclusive gives each rank CPUs of its own)")
    nic, network, kept_network = _network(facts, placement, request.nics, environ, notes)
    crowd, kept_crowd = sets(facts.vendor_at(placement.pci), dict(environ))
    return PreparedExec(request, executable, placement, rank, tuple(notes), pools=pools, kept_pools=kept,
                        nic=nic, network=network, kept_network=kept_network, crowd=tuple(crowd),
                        kept_crowd=tuple(kept_crowd), facts=facts)
