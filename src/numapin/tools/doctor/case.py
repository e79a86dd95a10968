"""What doctor's checks read: one :class:`Case`, gathered once (:func:`gather`) from the environment, the process
(``--pid``), numapin's record of it, the machine and the placement.

Every check of :data:`numapin.tools.doctor.checks.CHECKS` takes a case and gives its findings; none reads a file
the case holds already.
"""

from __future__ import annotations

import os

from ...base.environment import ACCELERATOR, RANK_MAP
from ...base.errors import EnvironmentProblem, ProcessError, UsageError
from ...base.frozen import frozen
from ...facts.host import Host
from ...facts.machine import Facts, cached, seen_by
from ...observe.judge import Expected, Judgement, expected, judge
from ...observe.view import ProcessView
from ...pinning import record
from ...placement.modes import Placement, PlacementMode, resolve
from ...placement.ranks import LocalRank, gpu_for_rank, requested_rank
from .finding import Finding

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping

    from ...facts.dra import DraDevice

__all__ = ["Asked", "Case", "gather", "mode_of"]


@frozen
class Asked:
    """What the caller asked doctor to check: the process's GPU, rank and mode, a buffer planned, the kubelet's
    socket and the DRA drivers' devices."""

    gpu: int | None = None
    rank: str = "auto"
    mode: PlacementMode | None = None
    reserve: int = 0
    root: str | os.PathLike[str] | None = None
    pid: int | None = None
    pod_resources: str | None = None
    buffer: int | None = None
    hugepages: str | None = None
    lock: bool = False
    resource_slices: tuple[DraDevice, ...] = ()


@frozen
class Case:
    """One process (or environment) as doctor checks it."""

    asked: Asked
    facts: Facts
    host: Host
    env: dict[str, str]
    """Its environment, with the thread pools' sizes its record says were set inside it."""
    process: int | None
    """The process whose own files are read: ``--pid``'s, this one, or None (an environment handed in)."""
    found: record.Record | None
    chosen: LocalRank | None
    judged: Judgement | None
    want: Expected | None
    status: dict[str, str] | None
    """``--pid``'s status (its mask, its thread count), read once; None for this process."""
    early: tuple[Finding, ...] = ()
    """What the gathering itself found: a rank the process's launcher got wrong, no placement."""

    @property
    def placement(self) -> Placement | None:
        return None if self.want is None else self.want.placement

    @property
    def named(self) -> bool:
        """Whether something names the process's one GPU: an option, or numapin's record of a pin for one."""
        return (self.asked.gpu is not None or self.asked.rank != "auto"
                or (self.found is not None and self.found.placement.gpu is not None))


def gather(environ: Mapping[str, str] | None, asked: Asked) -> Case:
    """Read what the checks need, once: the process, its record, the machine as it sees it, and the placement
    judged (``--pid``: the one judge's) or assumed (an environment about to start a worker)."""
    pid = asked.pid
    view = None if pid is None else ProcessView(pid)  # what the judge reads of it too: each file once
    if view is not None:
        view.alive()
        if environ is None:
            environ = view.environ()
    # The record of the process judged: PID's, or this process's when its own environment is checked
    # (an environment handed in is another process's to be, which numapin has not placed).
    found = view.record() if view is not None else record.lookup(os.getpid()) if environ is None else None
    env = dict(os.environ if environ is None else environ)
    if found is not None:
        for name, value in found.pools:  # set inside the process: its environ at start does not show them
            env.setdefault(name, value)
    facts = cached(asked.root, env)  # the facts the judge reads too: the machine read once
    if view is not None:
        facts = seen_by(facts, view.foreign_root(), env)  # a container's process: the GPUs it was given
    early: list[Finding] = []
    chosen, gpu = _rank(env, facts, asked, early)
    judged, want, why = _expected(facts, env, asked, gpu, chosen, found, view)
    if want is None:
        early.append(_no_placement(facts, why))
    elif want.placement.rank is not None and chosen is None:
        chosen = LocalRank(want.placement.rank, "its record" if want.record is not None else "its placement")
    process = pid if pid is not None else os.getpid() if environ is None else None
    status = None if view is None else _status(view)  # PID's mask and thread count, read once
    return Case(asked, facts, Host(facts.topology.root), env, process, found, chosen, judged, want, status,
                tuple(early))


def _rank(env: Mapping[str, str], facts: Facts, asked: Asked, early: list[Finding]) -> tuple[LocalRank | None,
                                                                                             int | None]:
    """The local rank asked or the process's launcher gave, and the GPU asked (``--local-rank N``: that rank's)."""
    try:
        chosen = None if asked.gpu is not None else requested_rank(asked.rank, env)
    except UsageError as exc:
        if asked.pid is None or asked.rank != "auto":
            raise  # the caller's own environment, or its --local-rank: the caller's mistake
        # Another process's environment is a fact about that process, not a mistake of the caller's.
        early.append(Finding("launcher-rank", "error", f"its environment: {exc}",
                             "numapin cannot tell which GPU its launcher meant for it",
                             "fix the launcher's local-rank variable, or name the GPU with --gpu"))
        return None, asked.gpu
    if chosen is not None and asked.rank != "auto":  # --local-rank N: that rank's GPU, in the process's view
        return chosen, gpu_for_rank(chosen.rank, len(facts.visible), env.get(RANK_MAP)) if facts.visible else 0
    return chosen, asked.gpu


def _expected(facts: Facts, env: Mapping[str, str], asked: Asked, gpu: int | None, chosen: LocalRank | None,
              found: record.Record | None, view: ProcessView | None) -> tuple[Judgement | None, Expected | None,
                                                                               str | None]:
    """The process judged (``--pid``), and where it should be, or why that cannot be said."""
    judged = None
    try:
        if view is not None:
            judged = judge(view, root=asked.root, gpu=gpu, mode=asked.mode, reserve=asked.reserve, environ=env,
                           facts=facts)
            want, why = judged.expected, judged.note
        else:
            want, why = expected(facts, env, record=found, gpu=gpu, mode=asked.mode, reserve=asked.reserve)
    except EnvironmentProblem as exc:
        want, why = None, str(exc)
    if want is None and asked.pid is None:
        # An environment about to start a worker, not a process to judge: assume what numapin exec would.
        try:
            assumed = resolve(facts, env, gpu=gpu, rank=chosen, mode=asked.mode or PlacementMode.NODE,
                              reserve=asked.reserve)
            want = Expected(assumed, assumed.workers, _assumption(gpu, chosen, facts))
        except EnvironmentProblem as exc:
            why = str(exc)
    return judged, want, why


def _no_placement(facts: Facts, why: str | None) -> Finding:
    fix = (f"list GPUs of this machine in {facts.vendor.variables} (or unset it)" if facts.cut and facts.vendor
           else f"set {ACCELERATOR} to whose GPUs the process drives" if facts.cut else
           "check the launcher's local rank and NUMAPIN_RANK_MAP" if facts.visible else
           "to try numapin as on a GPU host: numapin doctor --machine dgx-h100" if not facts.inventory.gpus else
           "name the GPU with --gpu (or --local-rank), or place the process with numapin")
    return Finding("no-placement", "error", why or "nothing says which GPU the process drives",
                   "numapin has nothing to pin this process to", fix)


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


def _status(view: ProcessView) -> dict[str, str]:
    try:
        return view.status()
    except ProcessError:
        return {}


def mode_of(case: Case) -> str | PlacementMode:
    """The placement mode checked: the placement's, else the one asked, else ``node``."""
    placement = case.placement
    return placement.mode if placement is not None else case.asked.mode or "node"
