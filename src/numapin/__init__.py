"""numapin: put each GPU worker process — every thread, and its memory — near its GPU.

Correct the first time, harmless the second time, and never fighting whoever
else (a launcher, Slurm, numactl, a container cpuset) already decided where
the process may run.

``import numapin`` loads nothing else: each name below, ``__version__`` too, is
imported from its module on first use (PEP 562), so a process that only imports
numapin, or the start-up file of every interpreter of a job, pays for what it uses.
"""

TYPE_CHECKING = False
if TYPE_CHECKING:  # what type checkers and readers see; at run time __getattr__ below
    from typing import Any

    from .base.errors import EnvironmentProblem, NumapinError, UsageError
    from .cpuset import CpuSet
    from .facts.machine import machine
    from .facts.topology import read_topology
    from .pinning.allocating import Allocating, allocating_for
    from .pinning.decision import ExternalMaskPolicy, MaskOwner, PinAction
    from .pinning.host_buffer import HostBuffer, host_buffer
    from .pinning.keeper import keeping, stop_keeping
    from .pinning.lease import pinned
    from .pinning.memory import MemoryMode
    from .pinning.process import current, pin, pin_thread, refresh
    from .pinning.results import PinError, PinResult
    from .placement.modes import Placement, PlacementMode
    from .placement.plan import plan, plan_ranks
    from .version import __version__

#: Public name -> the module that defines it.
_WHERE = {
    "CpuSet": "cpuset",
    "EnvironmentProblem": "base.errors", "NumapinError": "base.errors", "UsageError": "base.errors",
    "machine": "facts.machine",
    "MemoryMode": "pinning.memory",
    "Allocating": "pinning.allocating", "allocating_for": "pinning.allocating",
    "HostBuffer": "pinning.host_buffer", "host_buffer": "pinning.host_buffer",
    "ExternalMaskPolicy": "pinning.decision", "MaskOwner": "pinning.decision", "PinAction": "pinning.decision",
    "PinError": "pinning.results", "PinResult": "pinning.results",
    "current": "pinning.process", "pin": "pinning.process", "pin_thread": "pinning.process",
    "refresh": "pinning.process", "pinned": "pinning.lease",
    "keeping": "pinning.keeper", "stop_keeping": "pinning.keeper",
    "Placement": "placement.modes", "PlacementMode": "placement.modes",
    "plan": "placement.plan", "plan_ranks": "placement.plan",
    "read_topology": "facts.topology",
    "__version__": "version",
}

__all__ = [
    "Allocating",
    "CpuSet",
    "EnvironmentProblem",
    "ExternalMaskPolicy",
    "HostBuffer",
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
    "allocating_for",
    "current",
    "host_buffer",
    "keeping",
    "machine",
    "pin",
    "pin_thread",
    "pinned",
    "plan",
    "plan_ranks",
    "read_topology",
    "refresh",
    "stop_keeping",
]


def __getattr__(name: str) -> "Any":  # a string: typing is not imported at run time
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from importlib import import_module

    value = getattr(import_module(f".{module}", __name__), name)
    globals()[name] = value  # the next lookup is a plain global
    return value


def __dir__() -> list[str]:
    return sorted([n for n in globals() if n != "TYPE_CHECKING"] + list(_WHERE))
