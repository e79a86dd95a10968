"""The words for what moved a placement: a closed set, counted in a process's record and labelled in metrics.

Apart from the keeper, which says them, and from the record, which reads them back (lazily: a worker writing
its record at start-up never reads one, and defines no enum it does not use).
"""

from __future__ import annotations

from ..base.choices import Choice

__all__ = ["UNKNOWN_CAUSE", "DriftCause"]


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


#: A drift cause a record holds that is none of :class:`DriftCause`'s: counted under this word, never repeated
#: (the causes are labels of the node's metrics, and a record may be another user's writing).
UNKNOWN_CAUSE = "unknown"
