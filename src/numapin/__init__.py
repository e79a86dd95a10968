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
    from .facts import machine
    from .memory import MemoryMode
    from .pinning import (
        ExternalMaskPolicy,
        MaskOwner,
        PinAction,
        PinError,
        PinResult,
        current,
        pin,
        pin_thread,
        pinned,
        refresh,
    )
    from .placement import Placement, PlacementMode
    from .planning import plan, plan_ranks
    from .topology import read_topology

#: Public name -> the module that defines it.
_WHERE = {
    "CpuSet": "cpuset",
    "EnvironmentProblem": "errors", "NumapinError": "errors", "UsageError": "errors",
    "machine": "facts",
    "MemoryMode": "memory",
    "ExternalMaskPolicy": "pinning", "MaskOwner": "pinning", "PinAction": "pinning", "PinError": "pinning",
    "PinResult": "pinning", "current": "pinning", "pin": "pinning", "pin_thread": "pinning", "pinned": "pinning",
    "refresh": "pinning",
    "Placement": "placement", "PlacementMode": "placement",
    "plan": "planning", "plan_ranks": "planning",
    "read_topology": "topology",
}

#: Names this package offered before 0.2, and where each lives now (a DeprecationWarning on use).
_MOVED = {
    "Action": ("numapin", "PinAction"),
    "Ownership": ("numapin", "MaskOwner"),
    "Policy": ("numapin", "ExternalMaskPolicy"),
    "Mode": ("numapin", "PlacementMode"),
    "MemoryPolicy": ("numapin.numa", "KernelMemoryPolicy"),
    "Gpu": ("numapin.gpus", "Gpu"),
    "GpuError": ("numapin.gpus", "UnknownGpu"),
    "NoGpuError": ("numapin.gpus", "NoGpuVisible"),
    "read_gpus": ("numapin.gpus", "read_gpus"),
    "visible_gpus": ("numapin.gpus", "visible_gpus"),
    "HostError": ("numapin.host", "HostError"),
    "get_mempolicy": ("numapin.memory", "get_mempolicy"),
    "set_mempolicy": ("numapin.memory", "set_mempolicy"),
    "migrate": ("numapin.memory", "migrate"),
    "residency": ("numapin.numamaps", "residency"),
    "local_rank": ("numapin.ranks", "local_rank"),
    "Topology": ("numapin.topology", "Topology"),
}

__all__ = [
    "CpuSet",
    "EnvironmentProblem",
    "ExternalMaskPolicy",
    "MaskOwner",
    "MemoryMode",
    "NumapinError",
    "PinAction",
    "PinError",
    "PinResult",
    "Placement",
    "PlacementMode",
    "UsageError",
    "__version__",
    "current",
    "machine",
    "pin",
    "pin_thread",
    "pinned",
    "plan",
    "plan_ranks",
    "read_topology",
    "refresh",
]


def __getattr__(name: str) -> "Any":  # a string: typing is not imported at run time
    module = _WHERE.get(name)
    if module is None:
        from .deprecation import moved

        return moved(__name__, name, _MOVED)
    from importlib import import_module

    value = getattr(import_module(f".{module}", __name__), name)
    globals()[name] = value  # the next lookup is a plain global
    return value


def __dir__() -> list[str]:
    return sorted([n for n in globals() if n != "TYPE_CHECKING"] + list(_WHERE))
