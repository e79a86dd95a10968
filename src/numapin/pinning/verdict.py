"""What a judgement says, apart from the judge: the verdicts, the words tables print, the bounds memory is
judged by.

Apart so that ``numapin ps`` can look through a host of ordinary processes, and find no worker among
them, without importing the judge (:mod:`numapin.pinning.judge`) and the machine, records and
placements it reads.
"""

from __future__ import annotations

from ..base.choices import Choice

__all__ = ["JUDGED_MEMORY", "REMOTE_BOUND", "SHARED_NOTED", "Verdict", "verdict_words"]


class Verdict(Choice):
    """Whether a process is where it should be."""

    OK = "ok"
    MISPLACED = "misplaced"
    UNKNOWN = "unknown"
    """Nothing says which GPU it drives, so there is no placement to judge it by."""
    UNREADABLE = "unreadable"
    """Another user's process: nothing this user may read says where it should be."""


#: The default bound on the share of a worker's own memory (heap, stacks, anonymous and shared memory it made;
#: not the files it maps) on other nodes than its placement's: past half, most of what its threads touch
#: crosses the interconnect, the slowdown numapin exists to prevent, while the allocations a process made
#: before a late pin (an interpreter's own start, a library's init) stay well under it.
REMOTE_BOUND = 0.5
#: The least own memory a process's pages are judged by: below it, what the interpreter and its libraries made
#: before a late pin (pin(), a lease, a framework's hook) outweighs the rest, and its share says nothing of the
#: placement; a GPU worker's own memory (tensors staged on the host, pinned buffers) is gigabytes.
JUDGED_MEMORY = 32 << 20
#: The least shared memory off a GPU's node the tools name (pinned buffers are tens of megabytes and more).
SHARED_NOTED = 32 << 20


def verdict_words(verdict: Verdict, misplaced_by: tuple[str, ...]) -> str:
    """The verdict as tables print it: ``misplaced (memory)`` says which."""
    return f"{verdict} ({', '.join(misplaced_by)})" if verdict is Verdict.MISPLACED and misplaced_by else str(verdict)
