"""Thread pools already loaded in the process (OpenMP, BLAS), resized to a placement through threadpoolctl.

A pool started before the pin keeps its size: one thread per CPU of the
machine, now sharing the placement's few CPUs. threadpoolctl (an optional
extra: ``pip install 'numapin[threadpools]'``) finds the pools of every
OpenMP and BLAS library loaded and sets their size; without it, nothing
here is imported and pools stay as they are.
"""

from __future__ import annotations

import os

__all__ = ["ThreadpoolsUnavailable", "resize"]


class ThreadpoolsUnavailable(ImportError):
    """threadpoolctl is not installed."""


def resize(size: int) -> tuple[str, ...]:
    """Set every loaded pool to ``size`` threads; what changed, as ``"openmp (libgomp.so.1): 2 -> 1"``."""
    try:
        import threadpoolctl  # type: ignore[import-not-found,import-untyped,unused-ignore]
    except ImportError:
        raise ThreadpoolsUnavailable("threadpoolctl is not installed (pip install 'numapin[threadpools]')") from None
    before = threadpoolctl.threadpool_info()
    # Called, not entered as a context: the limits stay after the call (threadpoolctl's documented use).
    threadpoolctl.threadpool_limits(limits=size)
    after = threadpoolctl.threadpool_info()
    return tuple(
        f"{new['internal_api']} ({os.path.basename(new['filepath'])}): {old['num_threads']} -> {new['num_threads']}"
        for old, new in zip(before, after, strict=False)
        if old["num_threads"] != new["num_threads"]
    )
