"""What numapin applied in this process, and everything else it remembers: the only state of numapin.

What a pin applied (process id, the mask read back, the target) is what makes a
mask numapin's own rather than someone else's; with it, the threads placed on
purpose, the leases held, the pin under way and the warnings given, behind one
lock (:class:`PinState`, one per process: a forked child gets its own).
"""

from __future__ import annotations

import _thread  # threading's lock and thread id themselves, without threading's import
import os

from ..base.environment import APPLIED
from ..base.frozen import frozen, once, replace
from ..base.logger import log
from ..cpuset import CpuSet
from .record import Record, start_time

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

    from ..kernel.affinity import ThreadKernel

__all__ = ["Acting", "Applied", "PinState", "Saved", "acting", "exec_marker", "state"]


@frozen
class Applied:
    """What numapin applied in this process."""

    pid: int
    mask: CpuSet
    target: CpuSet
    gpu: int | None = None
    source: str = "pin"


@frozen
class Acting:
    """Who is pinning (for the process's record): ``exec``, ``autopin``, ``lease`` or ``compat``, and what else
    it set."""

    how: str
    pools: tuple[tuple[str, str], ...] = ()
    """Thread-pool variables set for the process (exec and the start-up hook set them)."""


class acting:
    """Pins made inside are recorded as ``how``'s (the outermost caller's, when these nest). A class, not a
    contextlib generator: contextlib's import would cost every worker pinned at start-up."""

    def __init__(self, how: str, pools: tuple[tuple[str, str], ...] = ()) -> None:
        self.how, self.pools = how, pools

    def __enter__(self) -> None:
        self.pins = pins = state()
        pins.lock.acquire()
        self.before = pins.acting
        pins.acting = self.before or Acting(self.how, self.pools)

    def __exit__(self, *_: object) -> None:
        self.pins.acting = self.before
        self.pins.lock.release()


def exec_marker(environ: Mapping[str, str]) -> CpuSet | None:
    """The mask ``numapin exec`` applied, from its environment marker (None when absent or malformed)."""
    text = environ.get(APPLIED)
    found = CpuSet.parse_or_none(text) if text else None
    if text and found is None:
        log.debug("ignoring malformed %s=%r", APPLIED, text[:40])
    return found


class PinState:
    """Everything numapin remembers in this process, behind one lock.

    A forked child gets a fresh one (:func:`os.register_at_fork`) that says
    the mask it was born with is numapin's, so it can re-pin quietly.
    """

    def __init__(self, applied: Applied | None = None) -> None:
        self.lock = _thread.RLock()
        self.applied = applied
        #: Threads that pin_thread() (or reserve=) placed: their mask, the mask each had before,
        #: and when each started (a reused thread id is another thread).
        self.deliberate: dict[int, CpuSet] = {}
        self.before_deliberate: dict[int, CpuSet] = {}
        self.started: dict[int, int | None] = {}
        self._warned: set[str] = set()
        #: Threads holding a lease, innermost last (all the same thread: leases do not overlap across threads).
        self.lease_holders: list[int] = []
        #: The target of a pin whose walk is under way (another thread may fork meanwhile).
        self.in_flight: CpuSet | None = None
        #: Who is pinning now (exec, the start-up hook, a lease, a compatibility function), when not pin().
        self.acting: Acting | None = None
        #: What this process last wrote to its record (numapin.pinning.record), None when nothing.
        self.published: Record | None = None
        #: The TensorRT-LLM function's pins, held until their last release: (the state before the
        #: first, the first's result, the calls not yet released). A forked child holds none.
        self.compat_hold: tuple[Any, Any, int] | None = None
        #: The record folders this process has checked (and swept) already.
        self.ready_folders: set[str] = set()
        #: The keeper thread (numapin.pinning.keeper), while one runs; a forked child has none.
        self.keeper: Any = None

    @once
    def start(self) -> int | None:
        """This process's start time, read once (with the pid it names the process in its record)."""
        return start_time(os.getpid())

    def forked(self, forking_tid: int) -> PinState:
        """The state of a child just forked from this process by its thread ``forking_tid``.

        The child's one thread was copied from the forking thread, whose mask
        may be what numapin applied, a pin's under way in another thread (before or
        after the walk reached it), or a deliberate one: when it is any of
        numapin's, what the child applied is the mask it was born with, so its
        own pin never mistakes it for someone else's. Leases that thread held
        are the child's to leave.
        """
        applied, flight = self.applied, self.in_flight
        child = PinState()
        child.lease_holders = [_thread.get_native_id() for tid in self.lease_holders if tid == forking_tid]
        if applied is None and flight is None:
            return child
        ours = {*self.deliberate.values(), *(() if flight is None else (flight,)),
                *(() if applied is None else (applied.mask, applied.target))}
        try:
            born: CpuSet | None = CpuSet(os.sched_getaffinity(0))
        except OSError:
            born = None
        if born is not None and born in ours:
            gpu = applied.gpu if applied is not None and flight is None else None
            child.applied = Applied(os.getpid(), born, born, gpu, "inherited")
        elif applied is not None:
            child.applied = replace(applied, pid=os.getpid(), source="inherited")
        return child

    def live_applied(self) -> Applied | None:
        applied = self.applied
        return applied if applied is not None and applied.pid == os.getpid() else None

    def own_masks(self, environ: Mapping[str, str]) -> list[CpuSet]:
        """The masks that are numapin's in this process: what it applied and the exec marker."""
        applied = self.live_applied()
        marker = exec_marker(environ)
        return [m for m in (None if applied is None else applied.mask, marker) if m is not None]

    def thread_masks(self) -> set[CpuSet]:
        """Every mask numapin gave a thread of this process (the applied one and the deliberate ones)."""
        applied = self.live_applied()
        return {*(() if applied is None else (applied.mask,)), *self.deliberate.values()}

    def warn_once(self, message: str) -> None:
        if message not in self._warned:
            self._warned.add(message)
            log.warning("%s", message)

    def mark_deliberate(self, ops: ThreadKernel, tid: int, mask: CpuSet, before: CpuSet) -> None:
        if tid not in self.deliberate:
            self.before_deliberate[tid] = before
            self.started[tid] = ops.start_time(tid)
        self.deliberate[tid] = mask

    def restore_deliberate(self, tid: int, mask: CpuSet | None, before: CpuSet | None) -> None:
        """Put back what was remembered of thread ``tid`` as deliberate (``mask`` None: nothing)."""
        if mask is None:
            for table in (self.deliberate, self.before_deliberate, self.started):
                table.pop(tid, None)
            return
        self.deliberate[tid] = mask
        if before is not None:
            self.before_deliberate[tid] = before

    def forget_exited(self, ops: ThreadKernel) -> None:
        """Drop what is remembered of deliberate threads that exited, even when their id is back."""
        for tid in list(self.deliberate):
            if ops.start_time(tid) != self.started.get(tid):
                self.deliberate.pop(tid, None)
                self.before_deliberate.pop(tid, None)
                self.started.pop(tid, None)

    def process_mask_of_caller(self, tid: int, mask: CpuSet) -> CpuSet:
        """The process mask as the calling thread sees it: a thread placed on purpose does
        not carry it, so then it is the mask numapin applied, or the mask the thread had before."""
        if self.deliberate.get(tid) != mask:
            return mask
        applied = self.live_applied()
        return applied.mask if applied is not None else self.before_deliberate.get(tid, mask)

    def saved(self) -> Saved:
        return Saved(self.applied, dict(self.deliberate), dict(self.before_deliberate), self.published)

    def applied_since(self, saved: Saved) -> set[CpuSet]:
        """The masks numapin applied after ``saved`` was taken (pins and pin_thread calls inside a lease)."""
        found = {m for tid, m in self.deliberate.items() if saved.deliberate.get(tid) != m}
        if self.applied is not None and self.applied is not saved.applied:
            found |= {self.applied.mask, self.applied.target}
        return found

    def restore(self, saved: Saved) -> None:
        applied = saved.applied
        if applied is not None and applied.pid != os.getpid():
            # Saved in the parent before a fork: the mask it names is the one this child inherited.
            applied = replace(applied, pid=os.getpid(), source="inherited")
        self.applied, self.deliberate, self.before_deliberate = (applied, dict(saved.deliberate),
                                                                dict(saved.before_deliberate))
        # The record on the host goes back too: one saved in the parent before a fork is not this child's.
        self.published = saved.published if applied is saved.applied else None


@frozen
class Saved:
    """What a lease remembers of the pin state, to put back on exit."""

    applied: Applied | None
    deliberate: Mapping[int, CpuSet]
    before_deliberate: Mapping[int, CpuSet]
    published: Record | None = None


_STATE = PinState()


def state() -> PinState:
    """This process's pin state (a new one in each forked child)."""
    return _STATE


_FORKING = [0]  # the native id of the thread that forks, in the parent (register_at_fork's before)


def _before_fork() -> None:
    _FORKING[0] = _thread.get_native_id()


def _after_fork_in_child() -> None:
    # The child is a new process: a fresh lock (the parent's may have been
    # held by another thread at fork time, even mid-walk) and what it inherited as its own.
    global _STATE
    _STATE = _STATE.forked(_FORKING[0])


os.register_at_fork(before=_before_fork, after_in_child=_after_fork_in_child)
