"""numapin: put each GPU worker process — every thread, and its memory — near its GPU.

Correct the first time, harmless the second time, and never fighting whoever
else (a launcher, Slurm, numactl, a container cpuset) already decided where
the process may run.
"""

from __future__ import annotations

from .cpuset import CpuSet
from .errors import EnvironmentProblem, NumapinError, UsageError
from .gpus import Gpu, GpuError, NoGpuError, read_gpus, visible_gpus
from .host import HostError
from .memory import MemoryMode, MemoryPolicy, get_mempolicy, migrate, residency, set_mempolicy
from .pinning import Action, Ownership, PinError, PinResult, Policy, current, pin, pin_thread, pinned, refresh
from .placement import Mode, Placement
from .planning import plan, plan_ranks
from .ranks import local_rank
from .topology import Topology, read_topology
from .version import __version__

__all__ = [
    "Action",
    "CpuSet",
    "EnvironmentProblem",
    "Gpu",
    "GpuError",
    "HostError",
    "MemoryMode",
    "MemoryPolicy",
    "Mode",
    "NoGpuError",
    "NumapinError",
    "Ownership",
    "PinError",
    "PinResult",
    "Placement",
    "Policy",
    "Topology",
    "UsageError",
    "__version__",
    "current",
    "get_mempolicy",
    "local_rank",
    "migrate",
    "pin",
    "pin_thread",
    "pinned",
    "plan",
    "plan_ranks",
    "read_gpus",
    "read_topology",
    "refresh",
    "residency",
    "set_mempolicy",
    "visible_gpus",
]

