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

In a process the worker shares (TensorRT-LLM's single-process TP1 worker, several
``LLM()`` objects one after the other), what a call applied is given back by
:func:`release`, as a lease's end gives it back: every thread's mask as it was
before the first call (the function sets no memory policy). Calls and releases pair up; the last
release restores. With the patch installed, TensorRT-LLM's worker shutdown
(``BaseWorker.shutdown``) releases, once per worker.

:func:`install` makes TensorRT-LLM's own callers get this function without
editing TensorRT-LLM (see :mod:`numapin.compat.patching`); the start-up file
does it in every process of a job when ``NUMAPIN_PATCH=tensorrt_llm``.
"""

from __future__ import annotations

import functools
import os
import weakref

from ..base.environment import TLLM_AFFINITY
from ..base.logger import log
from ..kernel.affinity import ThreadKernel
from ..pinning.decision import MaskOwner
from ..pinning.lease import give_back, hold
from ..pinning.process import constraint, pin
from ..pinning.results import PinResult
from ..pinning.state import acting, state
from .patching import FunctionPatch, PatchReport

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

__all__ = ["ENV", "MODULE", "SHUTDOWN", "configure_cpu_affinity", "install", "release", "uninstall"]

ENV = TLLM_AFFINITY
#: Where TensorRT-LLM defines the function its workers import by name.
MODULE = "tensorrt_llm.llmapi.utils"
#: TensorRT-LLM's worker shutdown, where a worker's affinity is given back.
SHUTDOWN = ("tensorrt_llm.executor.base_worker", "BaseWorker.shutdown")


def _applied(**options: Any) -> PinResult:
    """A pin that :func:`release` gives back, as a lease's end would (without holding a lease open).

    What the calls hold lives in the process's pin state: a forked child, whose
    pin state is its own, holds none of its parent's.
    """
    pins = state()
    with pins.lock:
        held, first, calls = pins.compat_hold or (hold(kernel=options.get("kernel")), None, 0)
        result: PinResult = pin(**options)
        pins.compat_hold = (held, first or result, calls + 1)
        return result


def release() -> bool:
    """Give back what :func:`configure_cpu_affinity` applied, once every call has been released.

    Each call counts once; the last release puts every thread's mask (and
    numapin's record) back as before the first call, as a lease's end does: a
    mask someone else changed meanwhile stays. Returns True when this release
    restored them. Never raises.
    """
    pins = state()
    with pins.lock:
        if pins.compat_hold is None:
            return False
        held, first, calls = pins.compat_hold
        pins.compat_hold = (held, first, calls - 1) if calls > 1 else None
        if calls > 1:
            return False
    try:
        give_back(held, first)
    except Exception as exc:  # the compatibility layer never raises
        log.warning("configure_cpu_affinity's pin not given back: %s", exc)
        return False
    return True


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
        with acting("compat"):  # the process's record says the compatibility function pinned it
            if setting == "1":
                return _applied(gpu=device_id, policy="override", kernel=kernel)
            found = constraint(kernel=kernel)
            if found.ownership is MaskOwner.EXTERNAL:
                log.info("process %d is affined to run on the following CPUs: %s", os.getpid(), found.mask)
                log.warning(
                    "process %d has constrained CPU affinity but `%s` is not set. "
                    "Removing CPU affinity constraints (back to %s).",
                    os.getpid(), ENV, found.baseline,
                )
                return _applied(cpus=found.baseline, policy="reset", kernel=kernel)
            return _applied(gpu=device_id, policy="respect", kernel=kernel)
    except Exception as exc:  # the compatibility layer must never break a worker's start-up
        log.warning("configure_cpu_affinity(%r) did nothing: %s", device_id, exc)
        return None


def _replacement(original: Callable[..., Any]) -> Callable[..., Any]:
    """numapin's function in the original's shape: one required argument, the device id, by any name.

    Any other shape (more parameters, defaults, ``*args``) is a TensorRT-LLM
    numapin does not know: a TypeError says so and the original stays.
    """
    import inspect  # only when patching: the start-up path stays lean

    try:
        signature = inspect.signature(original)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"its signature cannot be read ({exc})") from None
    params = list(signature.parameters.values())
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    if len(params) != 1 or params[0].kind not in positional or params[0].default is not inspect.Parameter.empty:
        name = getattr(original, "__name__", None) or type(original).__name__  # a partial has no __name__
        raise TypeError(f"unknown signature {name}{signature}; numapin knows (device_id)")
    name = params[0].name

    def configure(*args: Any, **kwargs: Any) -> PinResult | None:
        device = signature.bind(*args, **kwargs).arguments[name]  # the caller's mistakes raise as before
        return configure_cpu_affinity(device)

    # The original's name and text, but not its module or __wrapped__: tracebacks show whose code runs.
    return functools.update_wrapper(configure, original, assigned=("__name__", "__qualname__", "__doc__"), updated=())


_PATCH = FunctionPatch(MODULE, "configure_cpu_affinity", _replacement)


def _shutdown_replacement(original: Callable[..., Any]) -> Callable[..., Any]:
    released: weakref.WeakSet[Any] = weakref.WeakSet()  # a worker shut down twice releases once

    def first(worker: Any) -> bool:
        try:
            if worker in released:
                return False
            released.add(worker)
        except TypeError:  # an instance weakref cannot hold: released on each shutdown
            pass
        return True

    def shutdown(self: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return original(self, *args, **kwargs)
        finally:  # the original's result or exception stands; the pin is given back either way
            if first(self):
                release()

    return functools.update_wrapper(shutdown, original, assigned=("__name__", "__qualname__", "__doc__"), updated=())


_SHUTDOWN_PATCH = FunctionPatch(*SHUTDOWN, _shutdown_replacement)


def install() -> PatchReport:
    """Make every caller of TensorRT-LLM's ``configure_cpu_affinity`` get numapin's.

    Replaces the function on :data:`MODULE` and every module-level name already
    bound to it (found by identity); when TensorRT-LLM is not imported yet, does
    so the moment that module is first imported. Never imports TensorRT-LLM.
    Idempotent. A function of an unknown signature is left alone, with one warning.
    """
    _SHUTDOWN_PATCH.install()  # its report is logged; a shutdown of another shape is left alone
    return _PATCH.install()


def uninstall() -> PatchReport:
    """Put TensorRT-LLM's function (and its worker shutdown) back wherever numapin's is bound; stop watching."""
    _SHUTDOWN_PATCH.uninstall()
    return _PATCH.uninstall()
