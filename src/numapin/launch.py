"""Which local rank this process is, as its launcher tells it.

The variables are read in this order, the first one set wins:

==============================  ==========================================
``LOCAL_RANK``                  torchrun / torch.distributed, DeepSpeed
``SLURM_LOCALID``               Slurm ``srun``
``OMPI_COMM_WORLD_LOCAL_RANK``  Open MPI ``mpirun``
``MPI_LOCALRANKID``             MPICH / Intel MPI (Hydra)
``PMI_LOCAL_RANK``              MPICH (PMI)
``MV2_COMM_WORLD_LOCAL_RANK``   MVAPICH2
``PALS_LOCAL_RANKID``           HPE Cray PALS (``aprun`` successor)
==============================  ==========================================

torchrun comes first because it is often started by another launcher (one
``srun`` task per node running torchrun): then ``SLURM_LOCALID`` is the same
for every worker and only ``LOCAL_RANK`` tells them apart.

A local rank becomes a logical GPU (an index under ``CUDA_VISIBLE_DEVICES``)
as ``rank % number_of_visible_gpus``, unless a rank map says otherwise
(``NUMAPIN_RANK_MAP="3,2,1,0"``: rank r drives logical GPU map[r]).
"""

from __future__ import annotations

import logging
import os
import shutil
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .cpuset import CpuSet
from .errors import EnvironmentProblem, UsageError

if TYPE_CHECKING:
    from .placement import Placement

__all__ = [
    "LOCAL_RANK_VARIABLES",
    "RANK_MAP_ENV",
    "RESERVED_ENV",
    "ExecRequest",
    "LocalRank",
    "PreparedExec",
    "apply_exec",
    "exec_program",
    "gpu_for_rank",
    "gpu_of_rank",
    "local_rank",
    "prepare_exec",
    "run_exec",
]

LOCAL_RANK_VARIABLES: tuple[str, ...] = (
    "LOCAL_RANK",
    "SLURM_LOCALID",
    "OMPI_COMM_WORLD_LOCAL_RANK",
    "MPI_LOCALRANKID",
    "PMI_LOCAL_RANK",
    "MV2_COMM_WORLD_LOCAL_RANK",
    "PALS_LOCAL_RANKID",
)

RANK_MAP_ENV = "NUMAPIN_RANK_MAP"

log = logging.getLogger("numapin")


@dataclass(frozen=True)
class LocalRank:
    """A local rank and the variable it came from; ``ignored`` lists other launchers' differing values."""

    rank: int
    variable: str
    ignored: tuple[tuple[str, int], ...] = ()

    def __str__(self) -> str:
        text = f"local rank {self.rank} (from {self.variable})"
        if self.ignored:
            text += "; ignored " + ", ".join(f"{k}={v}" for k, v in self.ignored)
        return text


def _rank_value(name: str, value: str) -> int:
    text = value.strip()
    if not text.isdigit():
        raise UsageError(f"{name}={value!r} is not a local rank (a non-negative integer)")
    return int(text)


def local_rank(environ: Mapping[str, str]) -> LocalRank | None:
    """The local rank the launcher set, or None when no launcher variable is set."""
    found = [(name, _rank_value(name, environ[name])) for name in LOCAL_RANK_VARIABLES if name in environ]
    if not found:
        return None
    (name, rank), rest = found[0], found[1:]
    return LocalRank(rank, name, tuple((n, r) for n, r in rest if r != rank))


def gpu_for_rank(rank: int, visible: int, rank_map: Sequence[int] | str | None = None) -> int:
    """The logical GPU that local rank ``rank`` drives among ``visible`` GPUs."""
    if visible <= 0:
        raise UsageError("no GPU is visible, so no local rank can be given one")
    if rank_map is not None and rank_map != "":
        if isinstance(rank_map, str):
            mapping = [_rank_value(RANK_MAP_ENV, v) for v in rank_map.split(",")]
        else:
            mapping = list(rank_map)
        if rank >= len(mapping):
            raise UsageError(f"{RANK_MAP_ENV} has {len(mapping)} entries; local rank {rank} has none")
        gpu = mapping[rank]
        if not 0 <= gpu < visible:
            raise UsageError(f"{RANK_MAP_ENV} maps local rank {rank} to GPU {gpu}, but {visible} GPUs are visible")
        return gpu
    return rank % visible


def gpu_of_rank(rank: LocalRank | None, visible: int, environ: Mapping[str, str]) -> int:
    """The logical GPU for ``rank`` (rank 0 when no launcher said), honouring ``NUMAPIN_RANK_MAP``.

    With no GPU visible this answers 0, so that choosing the GPU, not this
    mapping, reports the problem (an environment problem, not a usage error).
    """
    return gpu_for_rank(0 if rank is None else rank.rank, max(visible, 1), environ.get(RANK_MAP_ENV))


# -- numapin exec ---------------------------------------------------------

#: Set by ``numapin exec`` when cores were reserved: the hot thread's CPUs.
RESERVED_ENV = "NUMAPIN_RESERVED"


@dataclass(frozen=True)
class ExecRequest:
    """What ``numapin exec`` was asked to do."""

    program: Sequence[str]
    gpu: int | None = None
    local_rank: str = "auto"
    mode: str = "node"
    cpus: CpuSet | None = None
    reserve: int = 0
    memory: str = "preferred"
    policy: str = "respect"
    strict: bool = False
    root: str | None = None


@dataclass(frozen=True)
class PreparedExec:
    """The decision, made before anything changes: what to pin, then what to run."""

    request: ExecRequest
    executable: str
    placement: Placement | None
    rank: LocalRank | None
    notes: tuple[str, ...]
    unpinned: str | None = None
    """Why the program will run unpinned (an environment problem outside strict mode)."""

    def as_dict(self) -> dict[str, Any]:
        return {
            "program": list(self.request.program),
            "executable": self.executable,
            "local_rank": None if self.rank is None else {"rank": self.rank.rank, "variable": self.rank.variable},
            "placement": None if self.placement is None else self.placement.as_dict(),
            "unpinned": self.unpinned,
            "memory": self.request.memory,
            "policy": self.request.policy,
            "notes": list(self.notes),
        }

    def describe(self) -> str:
        lines = []
        if self.rank is not None:
            lines.append(str(self.rank))
        if self.placement is None:
            lines.append("would run unpinned" + (f": {self.unpinned}" if self.unpinned else ""))
        else:
            p = self.placement
            lines.append(f"would pin every thread to {p.workers} ({p.reason})")
            if p.reserved:
                lines.append(f"would export {RESERVED_ENV}={p.reserved} for the latency-critical thread")
            if self.request.memory != "none":
                lines.append(f"would set memory policy {self.request.memory} on node(s) {p.mems}")
        lines.extend(f"note: {n}" for n in self.notes)
        lines.append("then exec: " + " ".join(self.request.program))
        return "\n".join(lines)


def _which(program: str, environ: Mapping[str, str]) -> str:
    if "/" in program:
        if os.path.isfile(program) and os.access(program, os.X_OK):
            return program
        raise UsageError(f"{program!r} is not an executable file")
    found = shutil.which(program, path=environ.get("PATH", os.defpath))
    if found is None:
        raise UsageError(f"program {program!r} not found on PATH")
    return found


def _exec_rank(request: ExecRequest, environ: Mapping[str, str]) -> LocalRank | None:
    if request.gpu is not None or request.cpus is not None:
        return None
    if request.local_rank == "auto":
        return local_rank(environ)
    return LocalRank(_rank_value("--local-rank", request.local_rank), "--local-rank")


def prepare_exec(request: ExecRequest, environ: Mapping[str, str]) -> PreparedExec:
    """Decide what ``numapin exec`` will do; raises on bad input, changes nothing."""
    from .facts import gather
    from .gpus import select_gpu
    from .memory import parse_memory_mode
    from .placement import parse_mode, place

    executable = _which(request.program[0], environ)
    parse_memory_mode(request.memory)
    if request.cpus is None:
        parse_mode(request.mode)
    facts = gather(request.root, environ)
    notes = list(facts.notes)
    rank = _exec_rank(request, environ)
    if rank is not None and rank.ignored:
        notes.append(str(rank))
    if request.gpu is None and request.cpus is None and rank is None:
        notes.append("no launcher variable set: local rank 0")
    if request.cpus is not None and request.gpu is None:
        placement = place(facts.topology, facts.inventory, None, cpus=request.cpus, reserve=request.reserve)
        return PreparedExec(request, executable, placement, rank, tuple(notes))
    try:
        index = request.gpu if request.gpu is not None else gpu_of_rank(rank, len(facts.visible), environ)
        visible = select_gpu(facts.visible, index)
        placement = place(facts.topology, facts.inventory, visible, mode=request.mode,
                          cpus=request.cpus, reserve=request.reserve)
    except EnvironmentProblem as exc:
        if request.strict:
            raise
        # Deciding changes nothing and says nothing: apply_exec() warns when it
        # really runs the program unpinned, a dry run prints the reason once.
        return PreparedExec(request, executable, None, rank, tuple(notes), unpinned=str(exc))
    return PreparedExec(request, executable, placement, rank, tuple(notes))


def apply_exec(prepared: PreparedExec, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """Pin this process as decided; return the environment the program gets (with numapin's marker)."""
    from .pinning import MARKER_ENV, pin

    env = dict(os.environ if environ is None else environ)
    request = prepared.request
    if prepared.placement is None:
        log.warning("numapin exec: %s; running the program unpinned", prepared.unpinned or "no placement")
    else:
        p = prepared.placement
        result = pin(p.gpu, cpus=p.workers, policy=request.policy, strict=request.strict, memory=request.memory,
                     root=request.root, environ=env)
        if result.mask is not None and result.on_target:
            env[MARKER_ENV] = str(result.mask)
        if p.reserved:
            env[RESERVED_ENV] = str(p.reserved)
    return env


def exec_program(prepared: PreparedExec, env: Mapping[str, str]) -> int:
    """Replace this process with the program. Returns only on failure (raising UsageError)."""
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execve(prepared.executable, list(prepared.request.program), env)
    except OSError as exc:
        raise UsageError(f"cannot run {prepared.executable!r}: {exc.strerror}") from exc
    return 2  # pragma: no cover - execve does not return


def run_exec(prepared: PreparedExec, environ: Mapping[str, str] | None = None) -> int:
    """Pin, mark, and replace this process with the program. Returns only on failure."""
    return exec_program(prepared, apply_exec(prepared, environ))
