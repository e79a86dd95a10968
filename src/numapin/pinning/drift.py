"""What moved a placement, and what the keeper did about it: the closed set of causes (counted in a process's
record and labelled in metrics), the responses, the rule between them (:func:`respond`) and one event
(:class:`Drift`).

Apart from the keeper, which looks and answers, and from the record, which reads the causes back (lazily: a
worker writing its record at start-up never reads one, and defines no enum it does not use).
"""

from __future__ import annotations

import time

from ..base.choices import Choice
from ..base.frozen import frozen
from ..base.text import printable
from .decision import ExternalMaskPolicy

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from ..cpuset import CpuSet

__all__ = ["UNKNOWN_CAUSE", "Drift", "DriftCause", "Response", "respond"]


class DriftCause(Choice):
    """What moved a placement."""

    CPUSET = "cpuset"
    """The cgroup's allowed CPUs changed."""
    MEMS = "mems"
    """The cgroup's allowed memory nodes changed."""
    MOVED = "moved"
    """Someone else changed a thread's mask."""
    INHERITED = "inherited"
    """A thread was born with a mask that is not the placement (from a thread that was moved)."""
    NARROWED = "narrowed"
    """A thread's mask became a slice inside the placement (a framework's own: TensorRT-LLM's executor loop, an
    NCCL proxy on its GPU's CPUs): no locality lost, never widened back."""


#: A drift cause a record holds that is none of :class:`DriftCause`'s: counted under this word, never repeated
#: (the causes are labels of the node's metrics, and a record may be another user's writing).
UNKNOWN_CAUSE = "unknown"


class Response(Choice):
    """What the keeper did about one drift."""

    RESTORED = "put back"
    REPLACED = "placed again inside the new cpuset"
    HELD = "nothing to put back: the placement holds"
    REPORTED = "reported, left alone"
    LEFT = "left to the cgroup"
    INSIDE = "left narrowed: a slice inside the placement"


def respond(cause: DriftCause, policy: ExternalMaskPolicy) -> Response:
    """The whole rule, for one drift: the policy × what moved. No kernel call.

    A cpuset change is answered by :meth:`numapin.pinning.keeper.Keeper.check` with :attr:`Response.REPLACED` (or
    :attr:`Response.HELD`/:attr:`Response.LEFT`, by what the new cpuset holds): the placement was numapin's.
    """
    if cause is DriftCause.NARROWED:
        return Response.INSIDE  # under either policy: undoing a framework's slice breaks its design, wins nothing
    if cause in (DriftCause.MOVED, DriftCause.INHERITED):
        return Response.RESTORED if policy is ExternalMaskPolicy.OVERRIDE else Response.REPORTED
    if cause is DriftCause.MEMS:
        return Response.REPORTED
    if cause is DriftCause.CPUSET:
        return Response.REPLACED
    raise AssertionError(f"drift cause {cause} has no response")  # a new cause must be answered here


@frozen
class Drift:
    """One event: what moved, when, from what to what, and what the keeper did."""

    when: float
    cause: DriftCause
    response: Response
    before: CpuSet | None
    after: CpuSet | None
    tid: int | None = None
    name: str | None = None
    note: str | None = None

    def __str__(self) -> str:
        stamp = time.strftime("%H:%M:%S", time.localtime(self.when))
        if self.tid is None:
            what = f"cgroup's allowed {'CPUs' if self.cause is DriftCause.CPUSET else 'memory nodes'}"
        else:
            # A thread's name is any bytes its process chose: escaped, so a log or a terminal never acts on it.
            what = f"thread {self.tid}" + (f" ({printable(self.name)})" if self.name else "")
        change = f"new {what} on {self.after}" if self.cause is DriftCause.INHERITED or self.before is None else \
            f"{what} changed {self.before} -> {self.after}"
        return f"{stamp} {self.cause.value}: {change}: {self.response.value}" + (f" ({self.note})" if self.note else "")

    def as_dict(self) -> dict[str, Any]:
        return {"when": self.when, "cause": self.cause.value, "response": self.response.value,
                "before": None if self.before is None else str(self.before),
                "after": None if self.after is None else str(self.after),
                "tid": self.tid, "name": self.name, "note": self.note}
