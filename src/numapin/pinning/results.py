"""What a pin did, truthfully: every thread's fate and the pin as a whole; the error a strict pin raises."""

from __future__ import annotations

from ..base.errors import EnvironmentProblem
from ..base.frozen import field, frozen
from ..cpuset import CpuSet
from ..kernel.affinity import Outcome
from ..placement.modes import Placement, PlacementMode
from .decision import ExternalMaskPolicy, MaskOwner, PinAction
from .memory import MemoryResult

TYPE_CHECKING = False

__all__ = ["PinError", "PinResult", "ThreadResult"]


if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import NamedTuple

    class _ThreadFields(NamedTuple):
        tid: int
        outcome: Outcome
        before: CpuSet | None = None
        after: CpuSet | None = None
        error: str | None = None
else:
    class _ThreadFields(tuple):
        """The named tuple written out: typing.NamedTuple would import typing for this one class, and
        collections.namedtuple collections (and make the class from source text) in every pinned worker."""

        __slots__ = ()
        _fields = ("tid", "outcome", "before", "after", "error")

        def __new__(cls, tid, outcome, before=None, after=None, error=None):
            return tuple.__new__(cls, (tid, outcome, before, after, error))

        def __getnewargs__(self):  # copy and pickle make it again from its values
            return tuple(self)

        def __repr__(self):
            values = ", ".join(f"{name}={value!r}" for name, value in zip(self._fields, self, strict=True))
            return f"ThreadResult({values})"

        tid = property(lambda self: self[0])
        outcome = property(lambda self: self[1])
        before = property(lambda self: self[2])
        after = property(lambda self: self[3])
        error = property(lambda self: self[4])


class ThreadResult(_ThreadFields):
    """One thread's fate. An immutable record (a named tuple)."""

    __slots__ = ()

    def __str__(self) -> str:
        text = f"{self.tid}: {self.outcome}"
        if self.error:
            text += f" ({self.error})"
        return text


@frozen
class PinResult:
    """The truthful outcome of one pin: the decision, the target and every thread's fate."""

    action: PinAction
    target: CpuSet | None = None
    mask: CpuSet | None = None
    placement: Placement | None = None
    policy: ExternalMaskPolicy = ExternalMaskPolicy.RESPECT
    ownership: MaskOwner | None = None
    previous: CpuSet | None = None
    threads: tuple[ThreadResult, ...] = ()
    """Every thread's fate, in the order the walk met them."""
    memory: MemoryResult | None = None
    message: str | None = None
    counts: Mapping[Outcome, int] | None = field(default=None, compare=False)
    """How many threads had each outcome, as the walk counted them (else counted from ``threads``)."""
    threadpools: tuple[str, ...] = ()
    """The thread pools resized (``pin(threadpools=True)``), as ``"openmp (libgomp.so.1): 2 -> 1"``."""
    unconfirmed: tuple[int, ...] = ()
    """Threads the walk found but could not confirm: the process kept creating threads for as many
    listings as a walk takes (:data:`numapin.pinning.walk.LISTINGS`), so it stopped there."""

    def count(self, outcome: Outcome) -> int:
        if self.counts is not None:
            return self.counts.get(outcome, 0)
        return sum(1 for t in self.threads if t.outcome is outcome)

    def tids(self, outcome: Outcome) -> tuple[int, ...]:
        return tuple(t.tid for t in self.threads if t.outcome is outcome)

    @property
    def changed(self) -> bool:
        return self.count(Outcome.PINNED) > 0

    @property
    def on_target(self) -> bool:
        """True when at least one thread now runs on the target and none failed."""
        landed = self.count(Outcome.PINNED) + self.count(Outcome.ALREADY)
        return landed > 0 and self.count(Outcome.FAILED) == 0

    def __str__(self) -> str:
        return f"numapin: {self.summary()}"

    @property
    def said(self) -> _Said:
        """The summary as a log argument: made only if a record is formatted (a pin at DEBUG usually is not)."""
        return _Said(self)

    def summary(self) -> str:
        """What :func:`str` says, without the leading ``numapin:`` (log records carry the logger's name)."""
        parts = [self.action.value]
        if self.ownership is MaskOwner.EXTERNAL and self.previous is not None:
            parts[0] += f" {self.previous}"
        if self.target is not None:
            parts.append(f"target {self.target}")
        if self.placement is not None and self.placement.gpu is not None:
            # CUDA's logical index alone is ambiguous across processes (every Ray
            # actor sees "GPU 0"): name the physical device as well.
            where = [w for w in (self.placement.where, None if self.placement.node is None
                                 else f"node {self.placement.node}") if w]
            gpu = f"GPU {self.placement.gpu}" + (f" ({', '.join(where)})" if where else "")
            # cpus= with gpu=: the CPUs are the caller's, the GPU only named; say so rather than "for GPU 0".
            explicit = self.placement.mode is PlacementMode.EXPLICIT
            parts.append(f"explicit CPUs, named for {gpu}" if explicit else f"for {gpu}")
        counts = ", ".join(f"{n} {o}" for o in Outcome if (n := self.count(o)))
        if counts:
            parts.append(f"threads: {counts}")
        if self.memory is not None:
            parts.append(str(self.memory))
        if self.threadpools:
            parts.append("thread pools: " + ", ".join(self.threadpools))
        if self.message:
            parts.append(self.message)
        return "; ".join(parts)


class _Said:
    __slots__ = ("result",)

    def __init__(self, result: PinResult) -> None:
        self.result = result

    def __str__(self) -> str:
        return self.result.summary()


class PinError(EnvironmentProblem):
    """A strict pin failed where no error of numapin's says why (threads refused, a foreign mask kept);
    ``result`` tells what happened (changes were rolled back), ``__cause__`` the kernel's error if any.

    A strict pin that fails for a reason numapin has an error for (no GPU visible,
    a memory policy refused) raises that error itself, its class kept, with the
    same ``result`` attached.
    """

    def __init__(self, message: str, result: PinResult, *, errno: str | None = None) -> None:
        super().__init__(message, errno=errno)
        self.result = result
