"""What numapin does at interpreter start, when the environment asks for it.

``pip install`` puts ``numapin-startup.pth`` in site-packages; Python's
``site`` module runs its one line at every interpreter start. With neither
``NUMAPIN_PATCH`` nor ``NUMAPIN_AUTOPIN`` set (or ``NUMAPIN_AUTOPIN=0``) that
line reads the environment and stops: no numapin module is imported. Otherwise
it calls :func:`at_start`, before any user code runs.

- ``NUMAPIN_PATCH=tensorrt_llm`` installs :func:`numapin.compat.tensorrt_llm.install`.
- ``NUMAPIN_AUTOPIN=1`` binds the process as ``numapin exec`` would (options
  ``NUMAPIN_MODE``, ``NUMAPIN_MEMORY``, ``NUMAPIN_POLICY``, ``NUMAPIN_RESERVE``, ``NUMAPIN_THREADS``,
  same values and defaults), while it has one thread, so every later thread
  inherits the mask and the memory policy; it exports ``NUMAPIN_APPLIED`` (and
  ``NUMAPIN_RESERVED``) for its children, as ``numapin exec`` does.
- ``NUMAPIN_KEEP=1`` (or a period in seconds) keeps the placement numapin applied to this
  process (by ``NUMAPIN_AUTOPIN`` here, or by ``numapin exec`` before the interpreter
  started) while it runs: a daemon thread notices drift and answers it by the
  policy (:mod:`numapin.pinning.keeper`).

Variables are inherited, so every Python process of a job runs this: the
workers a framework spawns, and launchers that are Python themselves. Hence the
rule for ``NUMAPIN_AUTOPIN``: a process is a worker when a launcher gave it a
local rank, or when exactly one GPU is visible to it. Anything else (torchrun's
agent, Ray's raylet and idle workers, an MPI wrapper: no local rank and several
GPUs visible, or none) is left alone.

A start-up hook must never break Python: :func:`activate` never raises; a bad
value is one warning on stderr and the interpreter starts as usual.
"""

# Every Python process of a job with NUMAPIN_AUTOPIN or NUMAPIN_PATCH exported runs this module, and most
# of them are no workers. What each may import is the rule below, written once and checked against a started
# interpreter's modules (tests/test_startup_imports.py); the rest is imported where it is used.
import os

from .base.environment import APPLIED, AUTOPIN, AUTOPIN_OFF, AUTOPIN_ON, AUTOPIN_OPTIONS, KEEP, PATCH

#: The start-up import rule. A process that is no worker (no rank, not one GPU visible) imports these of
#: numapin and nothing more: the environment's names and the glance at the PCI devices.
NOT_A_WORKER_IMPORTS = frozenset({"numapin", "numapin.startup", "numapin.base", "numapin.base.environment",
                                  "numapin.facts", "numapin.facts.glance"})
#: A worker pinned at start imports at most these of numapin, and its GPUs' vendor's module (:func:`worker_imports`):
#: the machine read, the decision, the walk, the record (not the judge, the tools' commands, the network or
#: interrupts, the synthetic machines).
WORKER_IMPORTS = NOT_A_WORKER_IMPORTS | frozenset({
    "numapin.base.choices", "numapin.base.errors", "numapin.base.files", "numapin.base.frozen", "numapin.base.logger",
    "numapin.base.pinners", "numapin.base.text", "numapin.cpuset", "numapin.facts.cgroup", "numapin.facts.gpu",
    "numapin.facts.grouping", "numapin.facts.host", "numapin.facts.inventory", "numapin.facts.kinds",
    "numapin.facts.machine", "numapin.facts.pci", "numapin.facts.procfs",
    "numapin.facts.sysfs", "numapin.facts.topology", "numapin.kernel",
    "numapin.kernel.affinity", "numapin.kernel.mempolicy", "numapin.pinning", "numapin.pinning.decision",
    "numapin.pinning.folders", "numapin.pinning.memory", "numapin.pinning.options", "numapin.pinning.process",
    "numapin.pinning.record", "numapin.pinning.request", "numapin.pinning.results", "numapin.pinning.state",
    "numapin.pinning.walk", "numapin.placement", "numapin.placement.modes", "numapin.placement.ranks"})
#: Standard modules neither may import: each costs a start more than the work it would do (typing, dataclasses,
#: enum, re, json, logging, argparse, pathlib, inspect), and a worker that never asks for them never pays.
NEVER_AT_START = ("typing", "dataclasses", "enum", "re", "json", "logging", "argparse", "pathlib", "inspect")

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from .compat.patching import PatchReport
    from .pinning.results import PinResult

__all__ = ["NEVER_AT_START", "NOT_A_WORKER_IMPORTS", "PATCHES", "WORKER_IMPORTS", "Activation", "activate",
           "at_start", "worker_imports"]


def worker_imports() -> "frozenset[str]":
    """:data:`WORKER_IMPORTS` and every vendor's reader module of the accelerators' table (a worker imports its
    GPUs' vendor's)."""
    from .facts.glance import ACCELERATORS

    return WORKER_IMPORTS | {row.module for row in ACCELERATORS.values()}


def _tensorrt_llm() -> "tuple[PatchReport, ...]":
    from .compat import tensorrt_llm

    return (tensorrt_llm.install(),)


def _vllm() -> "tuple[PatchReport, ...]":
    from .compat import vllm

    return (vllm.install(),)


def _sglang() -> "tuple[PatchReport, ...]":
    from .compat import sglang

    return sglang.install()


#: ``NUMAPIN_PATCH`` names and what each installs (its reports).
PATCHES: "dict[str, Callable[[], tuple[PatchReport, ...]]]" = {
    "tensorrt_llm": _tensorrt_llm,
    "vllm": _vllm,
    "sglang": _sglang,
}


class Activation:
    """What :func:`activate` did: the patches' reports, the pin, or why the process was left alone.

    A frozen record written out by hand: the record decorator's import would be most of what a process
    that is no worker pays for the hook.
    """

    __slots__ = ("left_alone", "patches", "pinned")
    patches: "tuple[PatchReport, ...]"
    pinned: "PinResult | None"
    left_alone: "str | None"
    """Why ``NUMAPIN_AUTOPIN`` did not pin this process (None when it pinned or was not asked)."""

    def __init__(self, patches: "tuple[PatchReport, ...]" = (), pinned: "PinResult | None" = None,
                 left_alone: "str | None" = None) -> None:
        for name, value in (("patches", patches), ("pinned", pinned), ("left_alone", left_alone)):
            object.__setattr__(self, name, value)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"Activation is frozen: cannot assign to {name!r}")

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Activation) and (self.patches, self.pinned, self.left_alone) == (
            other.patches, other.pinned, other.left_alone)

    def __hash__(self) -> int:
        return hash((self.patches, self.pinned, self.left_alone))

    def __repr__(self) -> str:
        return f"Activation(patches={self.patches!r}, pinned={self.pinned!r}, left_alone={self.left_alone!r})"


_STARTED: "list[Activation]" = []


def at_start() -> Activation:
    """:func:`activate` once per interpreter: what the start-up file calls.

    Python's ``site`` reads the ``.pth`` files of a virtual environment's
    site-packages twice (once as the venv's, once as the prefix's), so the line
    runs twice; the second call returns the first's result.
    """
    if not _STARTED:
        _STARTED.append(activate())
    return _STARTED[0]


def activate(environ: "Mapping[str, str] | None" = None) -> Activation:
    """Apply what ``NUMAPIN_PATCH`` and ``NUMAPIN_AUTOPIN`` ask for. Never raises."""
    env = os.environ if environ is None else environ
    patches: tuple[PatchReport, ...] = ()
    try:
        patches = _patch(env) if env.get(PATCH, "").strip() else ()
        pinned, left_alone = _autopin(env)
        if env.get(KEEP, "").strip().lower() not in AUTOPIN_OFF:
            _keep(env, pinned)
    except Exception as exc:  # a start-up hook never breaks the interpreter
        from .base.logger import log

        log.warning("start-up: %s; this process runs unpinned", exc)
        return Activation(patches, left_alone=str(exc))
    return Activation(patches, pinned, left_alone)


def _patch(env: "Mapping[str, str]") -> "tuple[PatchReport, ...]":
    names = [n.strip() for n in env.get(PATCH, "").split(",") if n.strip()]
    unknown = [name for name in names if name not in PATCHES]
    if unknown:
        from .base.errors import quoted
        from .base.logger import log

        # One line however long the list: every interpreter of a job prints it.
        shown = ", ".join(quoted(name) for name in unknown[:3]) + (f" and {len(unknown) - 3} more"
                                                                  if len(unknown) > 3 else "")
        log.warning("start-up: %s: unknown name%s %s (known: %s); ignored",
                    PATCH, "s" if len(unknown) > 1 else "", shown, ", ".join(PATCHES))
    return tuple(report for name in dict.fromkeys(names) if name in PATCHES for report in PATCHES[name]())


def _autopin(env: "Mapping[str, str]") -> "tuple[PinResult | None, str | None]":
    value = env.get(AUTOPIN, "").strip()
    if value.lower() in AUTOPIN_OFF:
        return None, None
    if value.lower() not in AUTOPIN_ON:
        from .base.errors import UsageError, quoted

        raise UsageError(f"{AUTOPIN}={quoted(value)}: expected 1 (or true, yes, on) to pin, 0 (or false, no, off) "
                         "to leave processes alone", value=value)
    from .facts.glance import glimpse, not_a_worker

    # Most processes of a job are no workers: the environment and one listing of the PCI devices say so,
    # and nothing else of numapin is imported. Where the glance is unsure, the machine is read whole.
    visible, vendor = glimpse(env)
    if visible is None:
        from .placement.ranks import local_rank

        if local_rank(env) is None:
            from .facts.machine import cached as cached_facts

            seen = cached_facts(None, env).visible
            visible = len(seen)
            vendors = {str(v.gpu.vendor) for v in seen}
            vendor = vendors.pop() if len(vendors) == 1 else None
    if visible is not None and visible != 1:
        why = not_a_worker(visible)
        if any(env.get(name, "").strip() for name in AUTOPIN_OPTIONS.values()):
            from .pinning.request import autopin_request

            autopin_request(env)  # a bad option value is named in every process, worker or not
        import sys

        if "logging" in sys.modules:  # else nobody configured logging, and a debug line reaches no one
            from .base.logger import log

            log.debug("start-up: %s; placed if it names a GPU (through PyTorch) or Ray hands it one", why)
        # Left alone, unless it names its GPU later (a vLLM or SGLang worker, through PyTorch) or Ray hands it
        # GPUs before a task: then it is placed for them.
        # A server that starts its workers (several GPUs in view): they inherit the crowd's variables.
        _watch(unplaced=why if visible > 1 else None, crowd=visible > 1 and env is os.environ, vendor=vendor)
        return None, why
    from .pinning.request import autopin_request, pin_running

    pinned = pin_running(autopin_request(env), env)
    _watch(ray=False)
    return pinned, None


def _crowd(vendor: str | None) -> None:
    """A process that sees several GPUs and will name its own later (a vLLM or SGLang server, its workers), at
    its import of torch (which those import before they start a worker or a GPU runtime; a launcher or a script
    that never imports it pays nothing): what it starts inherits the variables that make the other pinners'
    threads inherit the placement (ROCr's helpers) or named (NCCL's), and SGLang's own binder's step aside, so that
    numapin alone places each worker when it names its GPU (:data:`numapin.base.pinners.PINNERS`). Never over a
    value the caller set."""
    from .base.pinners import steps_aside

    for name, value in steps_aside(vendor, dict(os.environ)):  # vendor: the glance's, of the GPUs in view
        os.environ[name] = value


def _keep(env: "Mapping[str, str]", pinned: "PinResult | None") -> None:
    """Keep what numapin placed here: the pin just made, or ``numapin exec``'s (its marker says so). A process
    numapin did not place has nothing to keep, and pays for nothing more (its NUMAPIN_KEEP is not read)."""
    if (pinned is None or pinned.mask is None) and not env.get(APPLIED):
        return  # most processes of a job: nothing of numapin's to keep, nothing more imported
    from .pinning.keeper import environ_period, keep

    period = environ_period(env, KEEP)
    if period is not None:
        keep(period)


def _watch(*, ray: bool = True, unplaced: str | None = None, crowd: bool = False, vendor: str | None = None) -> None:
    """Install the patches for what this process may import later, each the first time it is imported; ``crowd``:
    set the crowd's variables, for ``vendor``'s GPUs, at torch's import (:func:`_crowd`)."""
    import sys

    def torch() -> None:
        if crowd:
            _crowd(vendor)
        _torch(unplaced)

    wanted = {"torch": torch}
    if ray:
        wanted["ray"] = _ray
    sys.meta_path.insert(0, _ImportWatch(wanted))


def _torch(unplaced: str | None) -> None:
    from .compat import torch_device

    torch_device.install(unplaced)


def _ray() -> None:
    from .compat import ray

    ray.install()


class _ImportWatch:
    """A finder that finds nothing: the first time one of its packages is imported, it installs numapin's
    patch for it (numapin.compat.ray, numapin.compat.torch_device), so a process that never imports them never
    imports the patching. It stays in sys.meta_path, done: the import system is walking that list while it
    asks, and taking an entry out there would make it skip the next finder."""

    def __init__(self, wanted: "dict[str, Callable[[], None]]") -> None:
        self.wanted = wanted

    def find_spec(self, fullname: str, path: object = None, target: object = None) -> None:
        if self.wanted:
            install = self.wanted.pop(fullname.partition(".")[0], None)
            if install is not None:
                install()
        return None
