"""vLLM, zero-code (``NUMAPIN_PATCH=vllm``): its NUMA binding works where no numactl is installed.

vLLM binds each worker by exec-ing ``numactl`` in front of Python (``--numa-bind``),
after probing ``numactl OPTIONS true`` and stepping down (membind, then CPUs
only); without numactl it stops with ``RuntimeError: numactl is required``. The
patch puts :mod:`numapin.compat.numactl_front` on PATH, so its wrapper and its
probe go through ``numapin numactl``: every thread of each worker bound at
birth, its step-down working because numapin exits non-zero where numactl
would refuse. An installed numactl is left to vLLM.
"""

from __future__ import annotations

from .numactl_front import front_report
from .patching import PatchReport

__all__ = ["install"]


def install() -> PatchReport:
    """numapin's numactl first on PATH where none is installed (this process and its children). Never raises."""
    return front_report("vllm")
