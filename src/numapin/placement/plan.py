"""Where workers would run on a machine: read its facts, then ask :func:`numapin.placement.modes.resolve`."""

from __future__ import annotations

import os

from ..base.choices import parse_choice
from ..base.environment import RANK_MAP
from ..base.errors import UsageError
from ..cpuset import CpuSpec
from ..facts.machine import cached
from .modes import Cores, Placement, PlacementMode, parse_mode, resolve
from .ranks import LocalRank

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

__all__ = ["plan", "plan_ranks"]


def plan(
    gpu: int | None = None,
    *,
    mode: str | PlacementMode = PlacementMode.NODE,
    reserve: int = 0,
    cpus: CpuSpec | None = None,
    cores: str | Cores = Cores.ALL,
    root: str | os.PathLike[str] | None = None,
    environ: Mapping[str, str] | None = None,
) -> Placement:
    """Where this process's worker would run: for GPU ``gpu``, or the GPU of its local rank.

    Reads the machine under ``root``; changes nothing. The same answer
    :func:`numapin.pin` would act on. ``cores="fastest"`` keeps only the
    fastest kind of CPU among them (``pin(placement=plan(..., cores="fastest"))``).
    """
    env = os.environ if environ is None else environ
    chosen_mode, chosen_cores = _parsed(mode, cores, cpus)
    return resolve(cached(root, env), env, gpu=gpu, cpus=cpus, mode=chosen_mode, reserve=reserve, cores=chosen_cores)


def _parsed(mode: str | PlacementMode, cores: str | Cores, cpus: CpuSpec | None) -> tuple[PlacementMode, Cores]:
    """The mode (asked of a GPU's placement only: explicit CPUs have none) and the kind of cores, parsed once."""
    return (parse_mode(mode) if cpus is None else PlacementMode.NODE), parse_choice(Cores, cores, "cores")


def plan_ranks(
    *,
    mode: str | PlacementMode = PlacementMode.NODE,
    reserve: int = 0,
    cpus: CpuSpec | None = None,
    cores: str | Cores = Cores.ALL,
    gpus: Sequence[int] | None = None,
    ranks: int | None = None,
    root: str | os.PathLike[str] | None = None,
    environ: Mapping[str, str] | None = None,
) -> tuple[Placement, ...]:
    """One placement per local rank: rank i drives ``gpus[i]`` when given; else as a launcher's ranks would,
    ``ranks`` of them (default: one per visible GPU, or per entry of ``NUMAPIN_RANK_MAP``), rank r driving GPU r
    or entry r of the map. A GPU listed twice is a UsageError: two ranks would be given one placement."""
    env = os.environ if environ is None else environ
    mode, cores = _parsed(mode, cores, cpus)
    facts = cached(root, env)
    if gpus is not None and ranks is not None:
        raise UsageError("--gpus and --ranks both say which ranks to plan: give one", value=ranks)
    if gpus is None:
        rank_map = env.get(RANK_MAP, "")
        count = len(rank_map.split(",")) if rank_map else len(facts.visible)
        if not count:
            facts.gpu(0)  # raises the "no GPU visible" error
        if ranks is not None:
            if ranks < 1:
                raise UsageError(f"--ranks {ranks}: at least one rank", value=ranks)
            count = ranks  # a rank past the GPUs in view is refused by the rank's own rule
        return tuple(resolve(facts, env, rank=LocalRank(r, "plan"), cpus=cpus, mode=mode, reserve=reserve,
                             cores=cores) for r in range(count))
    twice = sorted({g for g in gpus if list(gpus).count(g) > 1})
    if twice:
        raise UsageError(f"GPU {', '.join(map(str, twice))} listed twice in --gpus: each rank drives a GPU of its "
                         "own (to share a GPU, map ranks with NUMAPIN_RANK_MAP)", value=list(gpus))
    return tuple(resolve(facts, env, gpu=g, rank=LocalRank(r, "--gpus"), cpus=cpus, mode=mode, reserve=reserve,
                         cores=cores) for r, g in enumerate(gpus))
