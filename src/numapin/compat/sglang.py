"""SGLang, zero-code (``NUMAPIN_PATCH=sglang``): its NUMA binding without numactl, and every thread bound.

SGLang binds spawned workers by exec-ing ``numactl`` in front of Python after
probing it, as vLLM does: the patch puts :mod:`numapin.compat.numactl_front` on
PATH where none is installed. Its other path, ``numa_bind_to_node(node)``
(SGLang's V1 binding and its Ray workers), sets the calling thread's mask
alone; numapin's replacement, bound wherever SGLang's function is (by identity),
pins every thread of the process to the node's CPUs this process may use, with
its memory preferred there, as SGLang's does for the one thread.
"""

from __future__ import annotations

import functools

from ..base.logger import log
from ..cpuset import CpuSet
from ..facts.machine import cached as cached_facts
from ..pinning.process import pin
from ..pinning.results import PinResult
from ..pinning.state import acting
from .numactl_front import front_report
from .patching import FunctionPatch, PatchReport

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

__all__ = ["MODULE", "bind_to_node", "install", "uninstall"]

MODULE = "sglang.srt.utils.numa_utils"


def bind_to_node(node: int) -> PinResult | None:
    """Every thread of this process to ``node``'s CPUs (those it may use), memory preferred there.

    None when the node has no such CPU (a memory-only node): the caller's own function then runs.
    """
    topology = cached_facts().topology
    cpus = topology.cpus_of_nodes(CpuSet([node])) & topology.allowed
    if not cpus:
        return None
    with acting("compat"):
        return pin(cpus=cpus, memory="preferred")


def _replacement(original: Callable[..., Any]) -> Callable[..., Any]:
    import inspect

    try:
        params = list(inspect.signature(original).parameters.values())
    except (TypeError, ValueError) as exc:
        raise TypeError(f"its signature cannot be read ({exc})") from None
    if len(params) != 1 or params[0].default is not inspect.Parameter.empty:
        raise TypeError(f"unknown signature {getattr(original, '__name__', '?')}{inspect.signature(original)}; "
                        "numapin knows (node)")

    def numa_bind_to_node(node: int) -> None:
        try:
            if bind_to_node(int(node)) is not None:
                return
        except Exception as exc:  # SGLang's own binding then, as without numapin
            log.warning("numa_bind_to_node(%r): numapin could not bind every thread (%s); SGLang's binding used",
                        node, exc)
        original(node)

    return functools.update_wrapper(numa_bind_to_node, original, assigned=("__name__", "__qualname__", "__doc__"),
                                    updated=())


_PATCH = FunctionPatch(MODULE, "numa_bind_to_node", _replacement)


def install() -> tuple[PatchReport, PatchReport]:
    """numapin's numactl on PATH where none is installed, and numa_bind_to_node replaced. Never raises."""
    return front_report("sglang"), _PATCH.install()


def uninstall() -> PatchReport:
    """Put SGLang's numa_bind_to_node back (the numactl on PATH stays for the processes already started)."""
    return _PATCH.uninstall()
