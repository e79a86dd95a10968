"""The placement options, each declared once: its name, flag, start-up variable, defaults, parser and help.

Four surfaces take them, and each is made from (or held to) this table: ``numapin exec``'s options (and
``doctor``'s, ``threads``' and ``plan``'s where they share one: :func:`numapin.cli.common.add_option`), the
start-up hook's variables (``NUMAPIN_AUTOPIN`` and :func:`numapin.pinning.request.autopin_request`), the
request's defaults (:class:`numapin.pinning.request.ExecRequest`), and the keywords of :func:`numapin.pin` and
:func:`numapin.pinned` (a test holds their names and defaults to the table's ``pin_default``). The docs' option
table (``docs/cli.md``) is held to it by a test too.

Each value is parsed once, at the edge, by the option's parser: a command's option and a variable of the hook
alike, with the same words in the error (:class:`numapin.base.errors.UsageError` naming the input).

``exec`` and the hook place memory on the GPU's node by default (``preferred``); :func:`numapin.pin` sets no
memory policy unless asked (``none``): a library call changes what it is asked to. The table says both.
"""

from __future__ import annotations

from ..base.choices import Choice, parse_choice
from ..base.environment import AUTOPIN_OPTIONS
from ..base.errors import UsageError, quoted
from ..base.frozen import frozen
from ..base.text import decimal
from ..cpuset import CpuSet
from ..placement.modes import Cores, PlacementMode, parse_mode
from .decision import ExternalMaskPolicy
from .memory import MemoryMode, parse_memory_mode

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

__all__ = ["EXEC_POLICIES", "NOT_PIN", "OPTIONS", "Nics", "Option", "default", "parse_cores", "parse_count",
           "parse_exec_policy", "parse_nics", "parse_threads"]


#: The policies ``numapin exec`` (and ``NUMAPIN_AUTOPIN``) take: it never resets or ignores a launcher's mask.
EXEC_POLICIES = (ExternalMaskPolicy.RESPECT, ExternalMaskPolicy.OVERRIDE)


class Nics(Choice):
    """Whether ``numapin exec`` tells the program's network libraries its GPU's NIC."""

    AUTO = "auto"
    """Export the GPU's nearest RDMA NIC to the libraries that take one per process (``NIC_VARIABLES``)."""

    NONE = "none"
    """Set nothing network-related (the default): the libraries choose."""


def parse_exec_policy(policy: str | ExternalMaskPolicy) -> ExternalMaskPolicy:
    return parse_choice(ExternalMaskPolicy, policy, "policy", among=EXEC_POLICIES)


def parse_nics(nics: str | Nics) -> Nics:
    """``auto`` or ``none`` (``--nics``, ``NUMAPIN_NICS``); UsageError otherwise."""
    return parse_choice(Nics, nics, "nics")


def parse_cores(cores: str | Cores) -> Cores:
    return parse_choice(Cores, cores, "cores")


def parse_count(text: str) -> int:
    """A non-negative number (``--reserve``, ``NUMAPIN_RESERVE``); UsageError otherwise."""
    value = decimal(text)
    if value is None or value < 0:
        raise UsageError(f"{quoted(text)} is not a non-negative integer", value=text)
    return value


def parse_threads(threads: str) -> str:
    """``keep``, ``auto`` or a positive number of threads; UsageError otherwise."""
    if threads in ("keep", "auto"):
        return threads
    value = decimal(threads)
    if value is None or value < 1:
        raise UsageError(f"--threads {quoted(threads)}: keep, auto, or a positive number of threads", value=threads)
    return str(value)


def _cpus(text: str) -> CpuSet:
    try:
        return CpuSet.parse(text)
    except ValueError as exc:
        raise UsageError(str(exc), value=text) from None


def _text(text: str) -> str:
    return text


#: In ``pin_default``: :func:`numapin.pin` takes no such keyword (the option is ``exec``'s and the hook's only).
NOT_PIN = "(not pin's)"


@frozen
class Option:
    """One placement option."""

    name: str
    """The request's field, and :func:`numapin.pin`'s keyword where it takes one."""
    flag: str
    kind: str
    """How a command line takes it: ``choice`` (one of ``words``), ``count``, ``cpus`` (a cpulist), ``text``
    (``words`` its metavar) or ``switch`` (given or not)."""
    words: tuple[str, ...]
    parse: Callable[[str], Any]
    default: Any
    """``exec``'s and the hook's default, typed (a choice prints as a user writes it; None: not given): never
    parsed again."""
    pin_default: Any
    """:func:`numapin.pin`'s default, or :data:`NOT_PIN`."""
    help: str
    variable: str | None = None
    """The start-up hook's variable (``NUMAPIN_MODE``); None where the hook takes none."""

    @property
    def metavar(self) -> str:
        return "|".join(self.words)

    def from_environ(self, environ: Any) -> Any:
        """The value the hook's variable gives (its default where unset or blank), parsed; a UsageError names
        the variable."""
        assert self.variable is not None and self.default is not None
        text = environ.get(self.variable, "").strip()
        if not text:
            return self.default
        try:
            return self.parse(text)
        except UsageError as exc:  # the same parser as the command's option, the variable named
            raise UsageError(f"{self.variable}: {exc}", value=exc.value) from None


def _modes() -> tuple[str, ...]:
    return tuple(m.value for m in PlacementMode if m is not PlacementMode.EXPLICIT)


#: Every placement option, in the order ``numapin exec --help`` lists them.
OPTIONS: dict[str, Option] = {o.name: o for o in (
    Option("gpu", "--gpu", "count", ("N",), parse_count, None, None,
           "logical GPU index (under CUDA_VISIBLE_DEVICES, or ROCm's variables on an AMD host)"),
    Option("local_rank", "--local-rank", "text", ("auto", "N"), _text, "auto", NOT_PIN,
           "the launcher's local rank (default auto: read it from the environment)"),
    Option("mode", "--mode", "choice", _modes(), parse_mode, PlacementMode.NODE, None, "placement mode",
           AUTOPIN_OPTIONS["mode"]),
    Option("cpus", "--cpus", "cpus", ("LIST",), _cpus, None, None, "explicit cpulist instead of a mode"),
    Option("nodes", "--nodes", "cpus", ("LIST",), _cpus, None, NOT_PIN,
           "node-only binding: the CPUs of these NUMA nodes (as numactl -N), instead of a GPU's"),
    Option("mems", "--mems", "cpus", ("LIST",), _cpus, None, NOT_PIN,
           "the memory policy's nodes instead of the placement's; alone (no --gpu, --cpus, --nodes): memory-only "
           "binding, the CPUs left as they are (as numactl -m)"),
    Option("reserve", "--reserve", "count", ("K",), parse_count, 0, 0,
           "keep K cores out of the mask (the fastest), exported as NUMAPIN_RESERVED for one hot thread",
           AUTOPIN_OPTIONS["reserve"]),
    Option("cores", "--cores", "choice", tuple(c.value for c in Cores), parse_cores, Cores.ALL, NOT_PIN,
           "fastest: only the fastest kind of core among the placement's, where the machine has CPU kinds "
           "(P-cores, priority cores; see numapin show); all: every one (default)", AUTOPIN_OPTIONS["cores"]),
    Option("nics", "--nics", "choice", tuple(n.value for n in Nics), parse_nics, Nics.NONE, NOT_PIN,
           "auto: export the GPU's nearest NIC as UCX_NET_DEVICES and NVSHMEM_HCA_LIST (never over a value "
           "already set; NCCL is left to choose its own); none: nothing (default)", AUTOPIN_OPTIONS["nics"]),
    Option("memory", "--memory", "choice", tuple(m.value for m in MemoryMode), parse_memory_mode,
           MemoryMode.PREFERRED, "none", "memory policy for the GPU's node (default: preferred)",
           AUTOPIN_OPTIONS["memory"]),
    Option("policy", "--policy", "choice", tuple(p.value for p in EXEC_POLICIES), parse_exec_policy,
           ExternalMaskPolicy.RESPECT, "respect", "what to do with a mask someone else set (default: respect)",
           AUTOPIN_OPTIONS["policy"]),
    Option("threads", "--threads", "text", ("keep", "auto", "N"), parse_threads, "auto", NOT_PIN,
           "thread pools (OMP_NUM_THREADS, MKL_NUM_THREADS, OPENBLAS_NUM_THREADS) when unset: auto sizes them to "
           "the rank's share of the placement's CPUs (default; mode node: the node's CPUs over its GPUs), N to N, "
           "keep leaves them; a value already set is never changed", AUTOPIN_OPTIONS["threads"]),
    Option("strict", "--strict", "switch", (), _text, None, False,
           "exit 2 instead of stepping down or running unpinned"),
)}


def default(name: str) -> Any:
    """Option ``name``'s default for ``exec`` and the hook, typed (None where it has none)."""
    return OPTIONS[name].default
