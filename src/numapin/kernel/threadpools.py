"""Thread pools already loaded in the process (PyTorch's, OpenMP, BLAS), resized to a placement.

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
    """Set every loaded pool to ``size`` threads; what changed, as ``"openmp (libgomp.so.1): 2 -> 1"``.

    PyTorch keeps its own count of intra-op threads and sets its OpenMP pool to it again at its next
    parallel region: resized underneath, torch's pool would be back to its old size, and the report wrong.
    So where torch is loaded it is resized through ``torch.set_num_threads``, and what it then says is what
    is reported; the other pools (BLAS, another OpenMP) through threadpoolctl.
    """
    import sys

    changed = []
    torch = sys.modules.get("torch")
    if torch is not None and callable(getattr(torch, "set_num_threads", None)):
        old = torch.get_num_threads()
        torch.set_num_threads(size)
        new = torch.get_num_threads()
        if old != new:
            changed.append(f"torch (intra-op): {old} -> {new}")
    try:
        import threadpoolctl  # type: ignore[import-not-found,import-untyped,unused-ignore]
    except ImportError:
        if changed or torch is not None:
            return tuple(changed)
        raise ThreadpoolsUnavailable("threadpoolctl is not installed (pip install 'numapin[threadpools]')") from None
    before = threadpoolctl.threadpool_info()
    # Called, not entered as a context: the limits stay after the call (threadpoolctl's documented use).
    threadpoolctl.threadpool_limits(limits=size)
    after = threadpoolctl.threadpool_info()
    changed += [
        f"{new['internal_api']} ({os.path.basename(new['filepath'])}): {old['num_threads']} -> {new['num_threads']}"
        for old, new in zip(before, after, strict=False)
        if old["num_threads"] != new["num_threads"]
    ]
    return tuple(changed)
