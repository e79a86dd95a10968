"""PyTorch, zero-code: place a worker when it names its GPU (``NUMAPIN_AUTOPIN=1``).

The workers of vLLM and SGLang (and of any ``torch.multiprocessing`` program) start with every GPU in
view and no launcher rank, so at start-up numapin cannot tell which GPU is theirs; each names it once
started, through PyTorch:

- vLLM 0.33.0, ``Worker.init_device`` (``vllm/v1/worker/gpu_worker.py``):
  ``torch.accelerator.set_device_index(torch.device(f"cuda:{index}"))``, which goes straight to
  PyTorch's C++ accelerator API, not through ``torch.cuda.set_device``;
- SGLang 0.5.23, ``ModelRunner`` (``sglang/srt/model_executor/model_runner.py``):
  ``torch.get_device_module(device).set_device(gpu_id)``: the ``torch.cuda`` module's attribute, read at
  the call, on CUDA and ROCm builds alike;
- a torchrun script: ``torch.cuda.set_device(local_rank)``.

When ``torch`` is first imported, numapin wraps ``torch.cuda.set_device`` and
``torch.accelerator.set_device_index`` (and its deprecated alias ``set_device_idx``), by identity
wherever they are bound (:mod:`numapin.compat.patching`); numapin itself never imports torch, and a
process that never imports it pays for a finder that finds nothing. The wrapper places the process
first (every thread, memory as ``NUMAPIN_MEMORY`` says, recorded as the start-up hook's pin), then
calls PyTorch's function, whose result and errors are the caller's as without numapin.

Which naming moves what:

- the GPU numapin placed the process for already (its rank's at start-up, or named before): nothing;
- the first GPU the process names, where numapin placed it for another (a rank at start-up, a
  ``pin()``): the contract's retarget, the pin follows;
- a second, different GPU named after a first: the process drives several GPUs (single-process
  multi-GPU code names one, then the next); numapin keeps the placement it has, does not chase the
  process from node to node, and says so once;
- a process that numapin placed on explicit CPUs (``--cpus``, ``pin(cpus=...)``): left as it is;
- a GPU numapin cannot place the process for (one it does not see: PyTorch refuses it too, and the caller
  catches PyTorch's error): nothing, and the next naming is the first.

A process that sees several GPUs, has no rank and never names one stays unplaced, and says so once, at
exit (a warning: it imported torch, so it may well have driven a GPU, unplaced).

What a late placement cannot do: memory the process touched before it named its GPU (imports, a
model read to host memory) stays where it was; ``NUMAPIN_MEMORY`` applies to the calling thread's new
pages, and the others' follow their CPUs under the kernel's local default.
"""

from __future__ import annotations

import operator
import os
import threading

from ..base.logger import log
from .patching import FunctionPatch, PatchReport

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    from ..pinning.results import PinResult

__all__ = ["TARGETS", "Follower", "install", "named_gpu", "uninstall"]

#: The functions a PyTorch program names its GPU with: (module, function).
TARGETS = (("torch.cuda", "set_device"), ("torch.accelerator", "set_device_index"),
           ("torch.accelerator", "set_device_idx"))


def _kinds() -> frozenset[str]:
    """The device types that name one of numapin's GPUs: every vendor's of the accelerators' table (ROCm's builds
    call theirs ``cuda`` too; a Gaudi's is ``hpu``)."""
    from ..facts.glance import ACCELERATORS

    return frozenset(kind for row in ACCELERATORS.values() for kind in row.torch)


def named_gpu(device: object) -> int | None:
    """The GPU (its index in this process's view) that ``device``, as PyTorch's functions take it, names.

    An int, anything with ``__index__``, a string (``"cuda:1"``, ``"1"``), or a ``torch.device``-like object
    (``type`` and ``index``). None where it names none: a negative index (a no-op to PyTorch), a device of
    another type (``"cpu"``, ``"xpu:0"``), no index (``"cuda"``: the current device), anything else.
    """
    if isinstance(device, bool):
        return None
    if isinstance(device, str):
        kind, colon, index = device.strip().partition(":")
        text = index if colon else kind
        if colon and kind not in _kinds():
            return None
        return int(text) if text.isascii() and text.isdigit() and len(text) < 10 else None
    if hasattr(device, "__index__"):
        number = operator.index(device)
        return number if number >= 0 else None
    given = getattr(device, "index", None)
    if getattr(device, "type", None) in _kinds() and isinstance(given, int) and not isinstance(given, bool) \
            and given >= 0:
        return given
    return None


class Follower:
    """What this process named, and the one decision per naming (see the module's rules)."""

    def __init__(self, place: Callable[[int], PinResult | None] | None = None) -> None:
        self._lock = threading.Lock()
        self._place = place or _place
        self.first: int | None = None
        """The first GPU the process named that numapin could place it for (None: none yet)."""
        self._told = False

    def named(self, gpu: int) -> PinResult | None:
        """The process names ``gpu``: place it, or not (the rules); the pin's result where one was made. A naming
        numapin cannot place (a GPU the process does not see) raises before anything changes, and is no first
        naming: the next one is."""
        from ..pinning.state import state

        with self._lock:
            if self.first is None:
                applied = state().live_applied()
                if applied is not None and applied.gpu is None:
                    log.debug("GPU %d named; this process stays on the CPUs numapin was given (%s)", gpu,
                              applied.target)
                    self.first = gpu
                    return None
                if applied is not None and applied.gpu == gpu:
                    self.first = gpu
                    return None
                placed = self._place(gpu)  # raises, changing nothing, for a GPU it cannot place
                self.first = gpu
                return placed
            if gpu != self.first and not self._told:
                self._told = True
                log.warning("this process names GPU %d after GPU %d: it drives several GPUs, and numapin keeps it "
                            "where GPU %d put it (no chase from node to node; numapin.pin(gpu=N) moves it)",
                            gpu, self.first, self.first)
            return None


def _place(gpu: int) -> PinResult | None:
    """The start-up hook's whole request (the ``NUMAPIN_*`` options), for ``gpu``."""
    from ..base.frozen import replace
    from ..pinning.request import autopin_request, pin_running

    return pin_running(replace(autopin_request(os.environ), gpu=gpu))


#: The process's one follower; a forked child starts with a new one (what it names is its own: the mask it was
#: born with is numapin's, and it is placed for its own GPU as any process that names one).
_FOLLOWER = [Follower()]


def _forked() -> None:
    _FOLLOWER[0] = Follower()


os.register_at_fork(after_in_child=_forked)


def _replacement(original: Callable[..., Any]) -> Callable[..., Any]:
    import functools

    def set_device(device: Any, *args: Any, **kwargs: Any) -> Any:
        refused = None
        try:
            gpu = named_gpu(device)
            if gpu is not None:
                _FOLLOWER[0].named(gpu)
        except Exception as exc:  # the worker's start must never fail for numapin
            refused = exc
        try:
            found = original(device, *args, **kwargs)
        except BaseException:
            if refused is not None:  # the caller hears PyTorch's error; numapin's own is the same mistake
                log.debug("not placed for the GPU named (%r): %s", device, refused)
            raise
        if refused is not None:
            log.warning("not placed for the GPU named (%r): %s", device, refused)
        return found

    return functools.update_wrapper(set_device, original, assigned=("__module__", "__name__", "__qualname__",
                                                                    "__doc__"), updated=())


#: ``set_device_idx``, the deprecated alias, is gone from newer PyTorch: its absence is said at debug level only.
_PATCHES = tuple(FunctionPatch(module, name, _replacement, optional=name == "set_device_idx")
                 for module, name in TARGETS)
_AT_EXIT: list[str] = []


def install(unplaced: str | None = None) -> tuple[PatchReport, ...]:
    """Wrap PyTorch's set-device functions, now or once torch imports them. Idempotent; never raises.

    ``unplaced``: why the start-up hook left this process unplaced, where it sees several GPUs and has no
    rank; if the process names none, that is said once, at exit.
    """
    if unplaced is not None and not _AT_EXIT:
        import atexit

        _AT_EXIT.append(unplaced)
        atexit.register(_unplaced_at_exit)
    return tuple(patch.install() for patch in _PATCHES)


def uninstall() -> tuple[PatchReport, ...]:
    """Put PyTorch's functions back."""
    return tuple(patch.uninstall() for patch in _PATCHES)


def _unplaced_at_exit() -> None:
    from ..pinning.state import state

    if _FOLLOWER[0].first is None and state().live_applied() is None:
        log.warning("left unplaced: %s, and it named none (torch.cuda.set_device, torch.accelerator."
                    "set_device_index); docs/vllm-sglang.md", _AT_EXIT[0].removeprefix("not a worker: "))
