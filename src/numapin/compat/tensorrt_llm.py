"""TensorRT-LLM's ``configure_cpu_affinity(device_id)``, made idempotent.

The environment contract is TensorRT-LLM's own, ``TLLM_NUMA_AWARE_WORKER_AFFINITY``:

- unset (auto): an unconstrained process, or one whose mask numapin applied
  (including through ``numapin exec``), is pinned to the GPU's NUMA node; a
  process whose mask someone else constrained has that constraint removed,
  with TensorRT-LLM's warning;
- ``"1"`` (force): the NUMA pin, over any external mask;
- anything else: nothing is done and nothing is logged.

Under an external mask with the variable unset, a first call removes the
constraint and a second call then finds an unconstrained process and pins it
to the node: two calls, two end states, as in TensorRT-LLM itself (set the
variable to ``"0"`` to keep a launcher's pin). Unlike the original, a call
that finds the previous call's pin recognises it as its own and leaves every
thread where it is, and a container's cpuset is not mistaken for a constraint.
"""

from __future__ import annotations

import logging
import os

from ..environment import TLLM_AFFINITY
from ..pinning import Ownership, PinResult, constraint, pin
from ..threads import ThreadKernel

__all__ = ["ENV", "configure_cpu_affinity"]

ENV = TLLM_AFFINITY

log = logging.getLogger("numapin")


def configure_cpu_affinity(device_id: int, *, kernel: ThreadKernel | None = None) -> PinResult | None:
    """Pin this process for CUDA device ``device_id`` as TensorRT-LLM would, without its bugs.

    Returns the :class:`~numapin.PinResult`, or None when the variable turns
    the feature off or something unexpected went wrong (which is logged):
    this function never raises. ``kernel`` replaces the thread interface
    (tests drive it with a model of the kernel).
    """
    setting = os.environ.get(ENV)
    if setting is not None and setting != "1":
        return None
    try:
        if setting == "1":
            return pin(device_id, policy="override", kernel=kernel)
        found = constraint(kernel=kernel)
        if found.ownership is Ownership.EXTERNAL:
            log.info("numapin: process %d is affined to run on the following CPUs: %s", os.getpid(), found.mask)
            log.warning(
                "numapin: process %d has constrained CPU affinity but `%s` is not set. "
                "Removing CPU affinity constraints (back to %s).",
                os.getpid(), ENV, found.baseline,
            )
            return pin(cpus=found.baseline, policy="reset", kernel=kernel)
        return pin(device_id, policy="respect", kernel=kernel)
    except Exception as exc:  # the compatibility layer must never break a worker's start-up
        log.warning("numapin: configure_cpu_affinity(%r) did nothing: %s", device_id, exc)
        return None
