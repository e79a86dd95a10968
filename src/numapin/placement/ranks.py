"""Which local rank this process is, as its launcher tells it, and which GPU that rank drives.

Pure reading of an environment mapping. The launchers' variables are read in
the order of :data:`numapin.base.environment.LOCAL_RANK_VARIABLES`; the first one
set to a value wins (an empty value counts as unset). torchrun comes first
because it is often started by another launcher (one ``srun`` task per node
running torchrun): then ``SLURM_LOCALID`` is the same for every worker and
only ``LOCAL_RANK`` tells them apart.

A local rank becomes a logical GPU (an index under ``CUDA_VISIBLE_DEVICES``)
as ``rank % number_of_visible_gpus``, unless ``NUMAPIN_RANK_MAP="3,2,1,0"``
says otherwise (rank r drives logical GPU map[r]).
"""

from __future__ import annotations

from ..base.environment import LOCAL_RANK_VARIABLES, RANK_MAP
from ..base.errors import UsageError, quoted
from ..base.frozen import frozen
from ..base.text import decimal

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

__all__ = ["LocalRank", "gpu_for_rank", "local_rank", "rank_number", "requested_rank"]


@frozen
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


def rank_number(name: str, value: str) -> int:
    """``value`` of the launcher variable ``name`` as a local rank, or a UsageError naming both."""
    rank = decimal(value)
    if rank is None or rank < 0:
        raise UsageError(f"{name}={quoted(value)} is not a local rank (a non-negative decimal integer)", value=value)
    return rank


def local_rank(environ: Mapping[str, str]) -> LocalRank | None:
    """The local rank the launcher set, or None when no launcher variable is set."""
    found = [(name, rank_number(name, environ[name])) for name in LOCAL_RANK_VARIABLES if environ.get(name, "").strip()]
    if not found:
        return None
    (name, rank), rest = found[0], found[1:]
    return LocalRank(rank, name, tuple((n, r) for n, r in rest if r != rank))


def requested_rank(value: str, environ: Mapping[str, str]) -> LocalRank | None:
    """``--local-rank``'s answer: ``auto`` reads the launcher's variables, a number is taken as given."""
    if value == "auto":
        return local_rank(environ)
    return LocalRank(rank_number("--local-rank", value), "--local-rank")


def gpu_for_rank(rank: int, visible: int, rank_map: Sequence[int] | str | None = None) -> int:
    """The logical GPU that local rank ``rank`` drives among ``visible`` GPUs: ``NUMAPIN_RANK_MAP``'s entry, else
    GPU ``rank`` (GPU 0 where the process sees one GPU: its launcher gave it its own). A rank past the GPUs in
    view is a UsageError naming the misconfiguration."""
    if visible <= 0:
        raise UsageError("no GPU is visible, so no local rank can be given one", value=rank)
    if isinstance(rank_map, str) and not rank_map.strip():
        rank_map = None  # an empty map, like an empty launcher variable, counts as unset
    if rank_map is not None:
        mapping = ([rank_number(RANK_MAP, v) for v in rank_map.split(",")] if isinstance(rank_map, str)
                   else list(rank_map))
        if rank >= len(mapping):
            raise UsageError(f"{RANK_MAP} has {len(mapping)} entries; local rank {rank} has none", value=rank_map)
        gpu = mapping[rank]
        if not 0 <= gpu < visible:
            raise UsageError(f"{RANK_MAP} maps local rank {rank} to GPU {gpu}, but {visible} GPUs are visible",
                             value=rank_map)
        return gpu
    if visible > 1 and rank >= visible:
        # More local ranks than GPUs: a launcher started more processes than the node has GPUs for (one GPU in
        # view is the other case, a launcher that hands each process its own GPU: rank r drives GPU 0 there).
        raise UsageError(f"local rank {rank}, but {visible} GPUs are visible (ranks 0-{visible - 1}): the launcher "
                         f"starts more processes than GPUs; to share GPUs, map ranks to them with {RANK_MAP}",
                         value=rank)
    return rank % visible
