"""The walk: one target applied to every thread of the process, converging over threads born meanwhile."""

from __future__ import annotations

from ..base.errors import errno_name
from ..cpuset import CpuSet
from ..kernel.affinity import Outcome, ThreadKernel, outcome_of, walk_calls
from .results import ThreadResult

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from typing import Any

__all__ = ["LISTINGS", "Walk", "finish"]

#: The most listings of the threads a walk takes that still find new ones: a process creating threads
#: as fast as they are walked would keep it going for as long as they come (hwloc bounds its walk too).
LISTINGS = 100


class Walk:
    """Apply ``target`` to every thread, converging over threads born meanwhile.

    ``movable`` are the masks a thread may be moved from (the process mask,
    the baseline, numapin's own); any other mask was set on purpose and is kept,
    unless ``all_threads``. So is a thread ``deliberate`` names with the mask
    numapin gave it. ``results`` holds each thread's fate, in walk order.
    """

    def __init__(self, ops: ThreadKernel, target: CpuSet, movable: set[CpuSet], all_threads: bool,
                 deliberate: Mapping[int, CpuSet]) -> None:
        self.ops = ops
        self.target = target
        self.movable = movable
        self.all_threads = all_threads
        self.deliberate = deliberate
        self.results: dict[int, ThreadResult] = {}
        #: The thread ids listed so far, as the listing writes them.
        self.known: set[str] = set()
        #: True once the walk's changes were rolled back or recorded: nothing is left to undo.
        self.settled = False
        #: Threads the last listing found when the walk gave up after LISTINGS listings: not confirmed.
        self.unconfirmed: tuple[int, ...] = ()

    def run(self, first: int) -> None:
        # The calling thread first: threads it creates from now on inherit the
        # target. Then passes over /proc/self/task until one finds nobody new,
        # so threads spawned meanwhile by not-yet-pinned threads are caught.
        get, to_cpuset, put, arg, names = walk_calls(self.ops, self.target)
        target, results, movable, deliberate, force = (self.target, self.results, self.movable, self.deliberate,
                                                       self.all_threads)
        # This loop runs once per thread: the outcomes as locals (an enum member is an attribute
        # lookup of a tenth of a microsecond), and each mask read judged once, since neighbouring
        # threads mostly share one: ALREADY on the target, PINNED when it may be moved, else KEPT.
        already, pinned, kept = Outcome.ALREADY, Outcome.PINNED, Outcome.KEPT
        make = tuple.__new__  # a ThreadResult made as the tuple it is: half the cost of the class call
        last_raw: object = None
        before, verdict = target, already
        fresh = [first]
        known = self.known
        known.add(str(first))
        confirmed = False
        listings = 0
        while fresh or not confirmed:
            # A listing that finds nobody new is read once more: a clone in
            # flight when the first was taken (copied from a thread not yet
            # pinned) shows up in the second. What remains is a clone that
            # started before its parent was pinned and is still not listed
            # after two consecutive listings; `numapin threads --check` finds it.
            confirmed = not fresh
            for tid in fresh:
                try:
                    raw = get(tid)
                except OSError as exc:
                    results[tid] = ThreadResult(tid, outcome_of(exc), error=errno_name(exc.errno))
                    continue
                if raw != last_raw:
                    last_raw, before = raw, to_cpuset(raw)
                    verdict = already if before == target else pinned if force or before in movable else kept
                outcome = verdict
                if outcome is pinned and deliberate and not force and deliberate.get(tid) == before:
                    outcome = kept  # a thread numapin placed on purpose keeps its cores
                if outcome is not pinned:
                    results[tid] = make(ThreadResult, (tid, outcome, before, before, None))
                    continue
                # Recorded before the call: an interruption right after it must find the change to undo.
                results[tid] = make(ThreadResult, (tid, pinned, before, target, None))
                try:
                    put(tid, arg)
                except OSError as exc:
                    results[tid] = ThreadResult(tid, outcome_of(exc), before, None, errno_name(exc.errno))
            # The listing as the kernel writes it: one with nobody new is one set comparison.
            listed = names()
            if known.issuperset(listed):
                fresh = []
            else:
                new = [name for name in listed if name not in known]
                listings += 1
                if listings >= LISTINGS:  # bounded: said, never an endless walk
                    self.unconfirmed = tuple(sorted(int(name) for name in new))
                    return
                known.update(new)
                fresh = [int(name) for name in new]

    def counts(self) -> dict[Outcome, int]:
        """How many threads had each outcome (every outcome present, zero or not)."""
        found = dict.fromkeys(Outcome, 0)
        for result in self.results.values():
            found[result.outcome] += 1
        return found

    def move_caller(self, tid: int, before: CpuSet, cpus: CpuSet) -> None:
        """Give the calling thread a target of its own (the reserved cores) after the walk."""
        if before == cpus:
            self.results[tid] = ThreadResult(tid, Outcome.ALREADY, before, before)
            return
        self.results[tid] = ThreadResult(tid, Outcome.PINNED, before, cpus)  # before the call, as in run()
        self.ops.set_affinity(tid, cpus)

    def rollback(self) -> None:
        """Give every thread the walk moved its mask from before.

        It runs to the end even when an exception (a second signal) interrupts
        it, resuming where it was, and raises that exception afterwards.
        """
        todo = [(r.tid, r.before) for r in self.results.values() if r.outcome is Outcome.PINNED and r.before]
        finish(todo, lambda item: self.ops.set_affinity(*item))
        self.settled = True

    def abandon(self, previous: CpuSet) -> None:
        """Undo an interrupted walk: :meth:`rollback`, and threads born since the last listing from a
        thread already moved (they inherited the target) get the process mask ``previous``."""
        self.rollback()
        try:
            born = [tid for tid in self.ops.list_threads() if str(tid) not in self.known]
        except OSError:
            return

        def settle(tid: int) -> None:
            if self.ops.get_affinity(tid) == self.target:
                self.ops.set_affinity(tid, previous)

        finish(born, settle)


def finish(items: list[Any], act: Callable[[Any], None]) -> None:
    """``act`` on each item, last first, ignoring OSError (a thread gone); resumed after any other exception,
    which is raised once every item is done."""
    pending: BaseException | None = None
    while items:
        try:
            while items:
                try:
                    act(items[-1])
                except OSError:
                    pass
                items.pop()
        except BaseException as exc:  # a signal handler's exception: finish first
            pending = pending or exc
    if pending is not None:
        raise pending
