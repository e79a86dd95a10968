"""numapin: put each GPU worker process — every thread, and its memory — near its GPU.

Correct the first time, harmless the second time, and never fighting whoever
else (a launcher, Slurm, numactl, a container cpuset) already decided where
the process may run.

``import numapin`` loads nothing else: each name below is imported from its
module on first use (PEP 562), so a process that only imports numapin, or the
start-up file of every interpreter of a job, pays for what it uses.
"""

from .version import __version__

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (mypy knows the name)
if TYPE_CHECKING:  # what type checkers and readers see; at run time __getattr__ below
    from typing import Any

    from .cpuset import CpuSet
    from .errors import EnvironmentProblem, NumapinError, UsageError
    from .gpus import Gpu, GpuError, NoGpuError, read_gpus, visible_gpus
    from .host import HostError
    from .memory import MemoryMode, MemoryPolicy, get_mempolicy, migrate, set_mempolicy
    from .numamaps import residency
    from .pinning import Action, Ownership, PinError, PinResult, Policy, current, pin, pin_thread, pinned, refresh
    from .placement import Mode, Placement
    from .planning import plan, plan_ranks
    from .ranks import local_rank
    from .topology import Topology, read_topology

#: Public name -> the module that defines it.
_WHERE = {
    "CpuSet": "cpuset",
    "EnvironmentProblem": "errors", "NumapinError": "errors", "UsageError": "errors",
    "Gpu": "gpus", "GpuError": "gpus", "NoGpuError": "gpus", "read_gpus": "gpus", "visible_gpus": "gpus",
    "HostError": "host",
    "MemoryMode": "memory", "MemoryPolicy": "memory", "get_mempolicy": "memory", "migrate": "memory",
    "set_mempolicy": "memory", "residency": "numamaps",
    "Action": "pinning", "Ownership": "pinning", "PinError": "pinning", "PinResult": "pinning", "Policy": "pinning",
    "current": "pinning", "pin": "pinning", "pin_thread": "pinning", "pinned": "pinning", "refresh": "pinning",
    "Mode": "placement", "Placement": "placement",
    "plan": "planning", "plan_ranks": "planning",
    "local_rank": "ranks",
    "Topology": "topology", "read_topology": "topology",
}

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


def __getattr__(name: str) -> "Any":  # a string: typing is not imported at run time
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'numapin' has no attribute {name!r}")
    from importlib import import_module

    value = getattr(import_module(f".{module}", __name__), name)
    globals()[name] = value  # the next lookup is a plain global
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_WHERE])
