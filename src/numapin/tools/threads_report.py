"""``numapin threads``: every thread of a process, and where its memory lives, as the one judge sees them."""

from __future__ import annotations

import os

from ..base import pinners
from ..base.errors import UsageError
from ..base.frozen import frozen
from ..base.text import counted, format_size, plural, table
from ..cpuset import CpuSet
from ..observe.judge import REMOTE_BOUND, Judgement, ThreadState, Verdict, judge

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from ..placement.modes import PlacementMode
    from ..placement.ranks import LocalRank

__all__ = ["ThreadsReport", "crowd_words", "threads_report"]


@frozen
class ThreadsReport:
    """Every thread of a process against where it should be (:func:`numapin.observe.judge.judge`)."""

    judgement: Judgement

    @property
    def pid(self) -> int:
        return self.judgement.pid

    @property
    def placement(self) -> CpuSet | None:
        """The CPUs every thread should lie within; None when nothing says."""
        expected = self.judgement.expected
        return None if expected is None else expected.target

    @property
    def nodes(self) -> CpuSet | None:
        expected = self.judgement.expected
        return None if expected is None else expected.mems

    def summary(self) -> str:
        j = self.judgement
        parts = []
        if j.expected is not None:
            parts.append(f"judged by {j.expected.basis}")
            outside = j.outside
            parts.append(f"{len(outside)} of {counted(len(j.threads), 'thread')} outside CPUs {j.expected.target}")
        else:
            parts.append(f"{counted(len(j.threads), 'thread')} (no placement to compare with: {j.note})")
        parts.append(f"memory: {j.memory}" if j.memory is not None
                     else "memory: unreadable (only its owner or root may read its numa_maps)")
        share = j.remote_share()
        if share is not None and j.expected is not None:
            mems = j.expected.mems
            parts.append(f"{100 * share:.1f}% of its own memory outside {plural(len(mems), 'node')} {mems}")
        if share is not None and j.max_remote is not None:
            parts[-1] += f" (bound {100 * j.max_remote:.0f}%)"
        elif share is not None and j.expected is not None:
            parts[-1] += f" (not judged: {j.unjudged})" if j.unjudged else " (not judged)"
        parts.append(f"verdict: {j.verdict_words}")
        summary = "; ".join(parts)
        for words in crowd_words(j):
            summary += f"\n{words}"
        shared = j.shared_words()
        if shared:
            summary += (f"\nshared memory: {shared}; make them once it is placed, or inside "
                        "numapin.allocating_for(gpu=N), or use numapin.host_buffer")
        for seen in j.verified_buffers():
            b = seen.declared
            on = ", ".join(f"node {n} {format_size(size)}" for n, size in seen.on_nodes.items()) or "nothing resident"
            made = "spread over" if b.spread else "made for"
            summary += (f"\nhost buffer at {b.address:#x}: {format_size(b.nbytes)} {made} node(s) {b.nodes}, "
                        f"{format_size(b.page_size)} pages; resident: {on}")
        for words in j.buffer_words():
            summary += f"\nhost buffer: {words}"
        kept = None if j.expected is None else j.expected.record
        if kept is not None and kept.drift:  # what its keeper saw move the placement, from the record
            summary += (f"\ndrift: {', '.join(f'{n} {cause}' for cause, n in kept.drift)}; last: "
                        f"{kept.last_drift or '?'}")
        return summary

    def table(self) -> str:
        header = ("tid", "name", "cpus", "last", "inside", "numapin", "set by")
        rows = [
            (str(t.tid), t.name or "?", "?" if t.cpus is None else str(t.cpus),
             "?" if t.last_cpu is None else str(t.last_cpu),
             "-" if t.inside is None else ("narrowed" if t.narrowed else "yes" if t.inside else "NO"),
             "yes" if t.numapin else "no", t.who)
            for t in self.judgement.threads
        ]
        return "\n".join([*table(header, rows), self.summary()])

    def as_dict(self) -> dict[str, Any]:
        j = self.judgement
        e = j.expected
        memory = j.memory
        return {
            "pid": j.pid,
            "verdict": j.verdict.value,
            "misplaced_by": list(j.misplaced_by),
            "basis": None if e is None else e.basis,
            "placement": None if e is None else str(e.target),
            "expected": None if e is None else e.placement.as_dict(),
            "gpu": None if e is None else e.placement.gpu,
            "pci": None if e is None else e.placement.pci,
            "gpu_view": "the process's own (its CUDA_VISIBLE_DEVICES, or its vendor's variables)",
            "marker": None if j.marker is None else str(j.marker),
            "record": None if e is None or e.record is None else e.record.as_dict(),
            "placed_by": j.placed_by,
            "note": j.note,
            "threads": [t.as_dict() for t in j.threads],
            "outside": len(j.outside),
            "memory": None if memory is None else {
                "bytes": {str(k): v for k, v in sorted(memory.bytes.items())},
                "own_bytes": {str(k): v for k, v in sorted(memory.own_bytes.items())},
                "remote_share": j.remote_share(), "bound": j.max_remote},
            "host_memory": None if (host := j.host_memory()) is None else host.as_dict(),
        }

    def check(self) -> int:
        """0 when the verdict is ``ok``, else 1; UsageError when nothing says where the process should be."""
        if self.judgement.expected is None:
            raise UsageError("--check needs a placement: --gpu, --cpus, or a process numapin placed (or with a "
                             f"launcher rank); {self.judgement.note}", value=self.pid)
        return 0 if self.judgement.verdict is Verdict.OK else 1


def crowd_words(judged: Judgement) -> list[str]:
    """What the other pinners did to the judged process's threads, a line per library the table knows there: its
    threads narrowed inside the placement (expected), where it put them, and the variable that fixes what is
    wrong."""
    said: list[str] = []
    by: dict[str, list[ThreadState]] = {}
    for thread in judged.threads:
        if thread.pinner is not None:
            by.setdefault(thread.pinner, []).append(thread)
    unheeded = dict(judged.crowd)
    for key, threads in by.items():
        row = pinners.PINNERS[key]
        outside = [t for t in threads if t.inside is False]
        where = "; ".join(sorted({str(t.cpus) for t in threads if t.cpus is not None}))
        if not outside:
            said.append(f"{row.library}: {counted(len(threads), 'thread')} on CPUs {where}, "
                        f"{pinners.WHERE[row.belongs]}: expected")
            continue
        fix = ", ".join(f"{name} is {value}" for name, value in unheeded.get(key, ()))
        said.append(f"{row.library}: {counted(len(outside), 'thread')} on CPUs {where}, outside the placement"
                    + (f": {fix}; set " + ", ".join(f"{n}={v}" for n, v in row.inherit) if fix else ""))
    return said


def threads_report(
    pid: int | None = None,
    *,
    gpu: int | None = None,
    rank: LocalRank | None = None,
    cpus: CpuSet | None = None,
    mode: PlacementMode | None = None,
    root: str | None = None,
    max_remote: float | None = REMOTE_BOUND,
) -> ThreadsReport:
    """Judge every thread of ``pid`` (default: this process) and its memory; ``gpu`` (or ``rank``'s GPU) is in
    the process's view; ``mode`` as for ``numapin exec``."""
    target = os.getpid() if pid is None else pid
    return ThreadsReport(judge(target, root=root, gpu=gpu, rank=rank, cpus=cpus, mode=mode, max_remote=max_remote))
