"""Ray, zero-code: pin each Ray worker when Ray hands it GPUs (``NUMAPIN_AUTOPIN=1`` in the job's environment).

A Ray worker process starts with every GPU visible and no launcher rank, so the
start-up hook leaves it alone; Ray gives it its GPUs later, before each task (an
actor's creation task included), in ``ray._private.utils.set_visible_accelerator_ids``,
which narrows ``CUDA_VISIBLE_DEVICES`` to them. numapin wraps that function
(patched by identity, as the TensorRT-LLM function is): after Ray's own work, a
worker handed GPUs is pinned for the first of them, every thread, and pinned
again when a reused worker is handed other GPUs; a worker handed none (a CPU-only
task or actor) is left as it is. Under ``RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES``
Ray leaves ``CUDA_VISIBLE_DEVICES`` alone, and the GPU comes from ``ray.get_gpu_ids()``.

The limit to know: memory the worker touched before its first GPU task (Ray's
own start-up, imports) stays where it was; ``NUMAPIN_MEMORY`` applies to what is
allocated afterwards.
"""

from __future__ import annotations

import os

from ..base.environment import CUDA_VISIBLE_DEVICES
from ..base.frozen import replace
from ..base.logger import log
from ..pinning.request import autopin_request, pin_running
from ..pinning.results import PinResult
from .patching import FunctionPatch, PatchReport

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from typing import Any

__all__ = ["MODULE", "NOSET", "gpu_of_task", "install", "pin_for_ray", "uninstall"]

#: Where Ray keeps the function that gives a worker its GPUs before each task.
MODULE = "ray._private.utils"
#: Ray's switch that keeps it from setting CUDA_VISIBLE_DEVICES.
NOSET = "RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES"


def gpu_of_task(environ: Mapping[str, str], ray_gpu_ids: Callable[[], list[Any]] | None = None) -> int | None:
    """The logical GPU (CUDA's index in this process) Ray handed the current task; None for none.

    Ray narrows ``CUDA_VISIBLE_DEVICES`` to the task's GPUs, so the first is index 0.
    Under Ray's NOSET switch it does not: the first of ``ray.get_gpu_ids()`` (an id
    in Ray's own view, that is under the ``CUDA_VISIBLE_DEVICES`` the worker started
    with) is found in that list, or taken as the index when the variable is unset.
    """
    if environ.get(NOSET, "").strip().lower() in ("1", "true", "yes"):
        ids = [str(i) for i in (ray_gpu_ids() if ray_gpu_ids is not None else [])]
        if not ids:
            return None
        listed = environ.get(CUDA_VISIBLE_DEVICES)
        if listed is None:
            return int(ids[0]) if ids[0].isdigit() else None
        entries = [e.strip() for e in listed.split(",")]
        return entries.index(ids[0]) if ids[0] in entries else None
    listed = environ.get(CUDA_VISIBLE_DEVICES)
    if listed is None or not listed.strip():
        return None  # no GPU for this task (Ray leaves or empties the variable)
    return 0


def pin_for_ray(environ: Mapping[str, str] | None = None,
                ray_gpu_ids: Callable[[], list[Any]] | None = None) -> PinResult | None:
    """Pin this worker for the GPU Ray handed its task, with the ``NUMAPIN_*`` options; None when it has none."""
    env = os.environ if environ is None else environ
    gpu = gpu_of_task(env, ray_gpu_ids)
    if gpu is None:
        return None

    # The hook's whole request, read and checked as numapin exec's options, for the GPU Ray handed the task.
    return pin_running(replace(autopin_request(env), gpu=gpu), env)


def _ray_gpu_ids() -> list[Any]:
    import ray  # already imported: this runs inside Ray's own call

    return list(ray.get_gpu_ids())


def _replacement(original: Callable[..., Any]) -> Callable[..., Any]:
    import functools

    def set_visible_accelerator_ids(*args: Any, **kwargs: Any) -> Any:
        given = original(*args, **kwargs)  # Ray's own work first, untouched; its errors are its own
        try:
            pin_for_ray(ray_gpu_ids=_ray_gpu_ids)
        except Exception as exc:  # a worker's task must never fail for numapin
            log.warning("Ray worker not pinned for its GPU: %s", exc)
        return given

    return functools.update_wrapper(set_visible_accelerator_ids, original,
                                    assigned=("__name__", "__qualname__", "__doc__"), updated=())


_PATCH = FunctionPatch(MODULE, "set_visible_accelerator_ids", _replacement)


def install() -> PatchReport:
    """Pin Ray's workers when Ray hands them GPUs, now or once Ray is imported. Idempotent; never raises."""
    return _PATCH.install()


def uninstall() -> PatchReport:
    """Put Ray's function back and stop watching imports."""
    return _PATCH.uninstall()
