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
from .launch import local_rank
from .memory import MemoryPolicy, get_mempolicy, migrate, residency, set_mempolicy
from .pinning import PinError, PinResult, Policy, current, pin, pin_thread, pinned, refresh
from .placement import Mode, Placement, plan
from .topology import Topology, read_topology

__all__ = [
    "CpuSet",
    "EnvironmentProblem",
    "Gpu",
    "GpuError",
    "HostError",
    "MemoryPolicy",
    "Mode",
    "NoGpuError",
    "NumapinError",
    "PinError",
    "PinResult",
    "Placement",
    "Policy",
    "Topology",
    "UsageError",
    "current",
    "get_mempolicy",
    "local_rank",
    "migrate",
    "pin",
    "pin_thread",
    "pinned",
    "plan",
    "read_gpus",
    "read_topology",
    "refresh",
    "residency",
    "set_mempolicy",
    "visible_gpus",
]

__version__ = "0.1.0"
