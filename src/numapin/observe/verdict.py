"""What a judgement says, apart from the judge: the verdicts, the words tables print, the bounds memory is
judged by.

Apart so that ``numapin ps`` can look through a host of ordinary processes, and find no worker among
them, without importing the judge (:mod:`numapin.observe.judge`) and the machine, records and
placements it reads.
"""

from __future__ import annotations

from ..base.choices import Choice

__all__ = ["JUDGED_MEMORY", "PLACED_BY", "REMOTE_BOUND", "SHARED_NOTED", "Verdict", "placed_by_label", "verdict_words"]


class Verdict(Choice):
    """Whether a process is where it should be."""

    OK = "ok"
    MISPLACED = "misplaced"
    UNKNOWN = "unknown"
    """Nothing says which GPU it drives, so there is no placement to judge it by."""
    UNREADABLE = "unreadable"
    """Another user's process: nothing this user may read says where it should be."""
    REHEARSAL = "rehearsal"
    """A process of a rehearsal (``ps --root DIR`` of a machine that is not this host): what numapin would have
    applied to it there, pinned nowhere (:mod:`numapin.pinning.rehearsed`)."""


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


#: Who placed a process, as a closed set: the judge's words (:func:`numapin.observe.judge.placed_by`) name a
#: parent's pid, which on a series would make a new one at every restart; ``ps``'s narrow table says these too.
PLACED_BY = ("exec", "autopin", "pin", "lease", "compat", "moved", "inherited", "nobody", "other")


def placed_by_label(words: str | None) -> str:
    """The judge's words for who placed a process (``exec, since moved by someone else``), as one of
    :data:`PLACED_BY`."""
    text = words or ""
    if text.startswith("inherited from "):
        return "inherited"
    if ", since moved" in text:
        return "moved"
    return text if text in PLACED_BY else "other"
