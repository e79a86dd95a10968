"""The keeper: a placement that holds while the process runs.

numapin places a worker once; the placement can move under it later. The
keeper looks again every period and reports each *drift*:

- the cgroup's allowed CPUs or memory nodes changed (the kubelet's CPU manager
  rewrites a container's cpuset as Guaranteed pods come and go; the kernel then
  resets its tasks' masks, each kernel in its own way);
- a thread's mask was changed by someone else (a communication library that
  leaves its calling thread on its own mask, a runtime binding its threads);
- a thread was born with a mask that is not the placement (inherited from a
  thread that was moved).

It answers each by the ownership contract and the process's policy
(:func:`respond`): the placement was numapin's, so a changed cpuset has it
decided again inside the new one and put back on the threads that carried it;
a mask someone else gave a thread is theirs, reported and left alone under
``respect`` (the default) and put back under ``override``. A thread born with
such a mask follows the rule of the mask it inherited. Memory policies are each
thread's own, and the kernel rebinds them to a new cpuset itself: a change of
the memory nodes is reported, never acted on.

Each event is counted in the process's record (``numapin threads``, ``ps``, the
exporter read it there) and logged once per kind and process, never a flood.

The keeper runs inside a Python worker as a daemon thread (:func:`keep`,
``pin(keep=...)``, ``NUMAPIN_KEEP``), or from outside for any program
(``numapin keep PID``, ``numapin exec --keep``): the same :class:`Keeper`.
"""

from __future__ import annotations

import errno
import os
import time

from ..base import pinners
from ..base.errors import EnvironmentProblem, ProcessError, UsageError, errno_name
from ..base.frozen import replace
from ..base.logger import log
from ..base.text import counted
from ..cpuset import CpuSet
from ..facts import procfs
from ..facts.cgroup import Cgroup, read_cgroup
from ..facts.host import Host
from ..facts.machine import forget as forget_facts
from ..kernel.affinity import LinuxThreads, walk_calls
from . import record as records
from .decision import ExternalMaskPolicy
from .drift import Drift, DriftCause, Response, respond
from .record import Record

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from typing import Any

    from ..facts.machine import Facts
    from ..facts.topology import Topology
    from ..kernel.affinity import ThreadKernel

__all__ = ["DEFAULT_PERIOD", "Drift", "DriftCause", "Keeper", "Response", "environ_period", "keep", "keeping",
           "parse_period", "respond", "stop_keeping", "this_process"]

#: Seconds between two looks: a drift is seen within one. A look at a 1,000-thread worker costs a few
#: milliseconds (benchmarks/keeper.py), so this period keeps the keeper under 0.5% of one CPU.
DEFAULT_PERIOD = 1.0

#: From outside a process, how long a thread's new mask must hold, with no new record of the process, before
#: the keeper takes it for drift: a pin the process makes sets its threads' masks first and writes its record
#: right after, and a look in between must not take that pin for someone else's move (nor undo it). Inside
#: the process the keeper looks under the pin lock, and a look never falls between the two.
SETTLE_SECONDS = 0.5


def parse_period(text: str | float, what: str = "period") -> float:
    """Seconds between two looks: a positive number (``0.5``, ``2``)."""
    try:
        value = float(text)
    except (TypeError, ValueError):
        value = float("nan")
    if not 0 < value < 1e6:  # also refuses nan and inf
        raise UsageError(f"{what} {text!r}: expected a positive number of seconds (e.g. 1 or 0.5)", value=text)
    return value


#: A thread's entry in a keeper's last look once the keeper set its mask itself (to the mask in ``Keeper._put``).
_PUT = object()


class Keeper:
    """Keeps one process's placement: :meth:`check` looks once and answers what moved.

    ``record`` is what numapin applied (the process's record); ``facts`` the machine it was placed on (the
    allowed CPUs are the process's cgroup's, read at each look). ``publish`` writes the record again (drift
    counted, a new placement after a cpuset change); ``source`` gives the record as the process itself last
    wrote it (a pin since then is followed, not undone); ``own`` gives further masks of numapin's in the
    process (threads placed on purpose); ``lock`` is held through each look (this process's pin lock, so a
    look and a pin never interleave). One keeper, one looker: not for several threads at once.
    """

    def __init__(self, pid: int, record: Record, facts: Facts, *, kernel: ThreadKernel | None = None,
                 publish: Callable[[Record], None] | None = None, source: Callable[[], Record | None] | None = None,
                 own: Callable[[], set[CpuSet]] | None = None, lock: Any = None) -> None:
        self.pid = pid
        self.record = self._taken = record
        self._lock = lock
        self.facts = facts
        self.ops = kernel or LinuxThreads(pid)
        self._publish, self._source, self._own = publish, source, own
        self.counts: dict[DriftCause, int] = {}
        for cause, count in record.drift:
            if cause in (c.value for c in DriftCause):
                self.counts[DriftCause(cause)] = count
        self.last: Drift | None = None
        self.looks = 0
        #: Set (under ``lock``) when the keeper is stopped: no look acts after that.
        self.stopped = False
        self._said: set[DriftCause] = set()
        self._cgroup = read_cgroup(Host.at("/"), pid=pid)
        #: Each thread's raw mask at the last look (or _PUT: the keeper set it since, to ``_put[tid]``), and whether
        #: it carried numapin's placement then.
        self._seen: dict[int, tuple[Any, bool]] = {}
        self._put: dict[int, CpuSet] = {}
        #: Each thread's start time when first seen: a mask is set only on a thread that still has it, in this
        #: process (thread ids are reused, and from outside an id may name another process's thread by now).
        self._born: dict[int, int | None] = {}
        self._asked = record.asked()
        #: Threads whose mask changed to one not numapin's, not answered yet (from outside): the raw mask, and
        #: when it was first seen.
        self._settling: dict[int, tuple[Any, float]] = {}
        #: The masks the kernel gave numapin's threads when a new cpuset left no room for the placement: theirs
        #: are still numapin's threads, and so are the threads they start.
        self._kernel_masks: set[CpuSet] = set()
        #: The process's environment, by which a thread's name is known as a library's (:mod:`numapin.base.pinners`).
        self._environ = _environment(pid)
        self.rebase()

    @property
    def policy(self) -> ExternalMaskPolicy:
        return self.record.policy or ExternalMaskPolicy.RESPECT

    def ours(self) -> set[CpuSet]:
        """The masks that are numapin's in the process: the target, the reserved cores, the deliberate ones."""
        found = {self.record.target, self.record.mask}
        if self.record.placement.reserved:
            found.add(self.record.placement.reserved)
        if self._own is not None:
            found |= self._own()
        return found | self._kernel_masks

    def rebase(self, *, adding: bool = False) -> None:
        """Take every thread's mask as it is now: the baseline the next look compares with. ``adding``: only
        the threads not known yet (those known keep what the last look saw)."""
        self._get, self._cpuset, _, _, self._names = walk_calls(self.ops, self.record.target)
        ours = self.ours()
        seen: dict[int, tuple[Any, bool]] = {}
        for name in self._names():
            tid = int(name)
            if adding and tid in self._seen:
                seen[tid] = self._seen[tid]
                continue
            try:
                raw = self._get(tid)
            except OSError:
                continue
            seen[tid] = raw, self._cpuset(raw) in ours
            self._born.setdefault(tid, self.ops.start_time(tid))
        self._seen = seen
        self._born = {tid: born for tid, born in self._born.items() if tid in seen}
        self._settling = {}

    def off_placement(self) -> tuple[int, int]:
        """Of the threads the last look (or the start) saw, how many were off numapin's masks, and how many
        there were: at the start, moves made before the keeper came, which it takes as they are."""
        return sum(1 for _, ours in self._seen.values() if not ours), len(self._seen)

    def adopt(self, tid: int) -> None:
        """Count thread ``tid`` as one of numapin's, on the mask it has now."""
        self._seen[tid] = self._get(tid), True
        self._born[tid] = self.ops.start_time(tid)

    def _set(self, tid: int, mask: CpuSet) -> None:
        """Set thread ``tid``'s mask, when it is still the thread the keeper saw: the process's (its
        ``/proc/PID/task/TID``), started when it was first seen. ProcessLookupError (ESRCH) for any other."""
        born = self._born.get(tid)
        if born is None or self.ops.start_time(tid) != born:
            raise ProcessLookupError(errno.ESRCH, f"thread {tid} is no longer process {self.pid}'s")
        self.ops.set_affinity(tid, mask)

    def _follow(self) -> None:
        """Take up the record the process wrote since the last look (it pinned again): its new placement is the
        one to keep, and its threads' masks now are the baseline."""
        found = self._source() if self._source is not None else None
        if found is None or found.placed_alike(self._taken):
            return  # unchanged (or a write of the keeper's own that failed)
        self._taken = found
        if not found.placed_alike(self.record):
            self.record = replace(found, drift=self.record.drift, last_drift=self.record.last_drift)
            self._asked = found.asked()
            self.rebase()

    def check(self) -> list[Drift]:
        """Look once: the cgroup, then every thread. The drifts found, each already answered.

        Raises :class:`ProcessLookupError` (an OSError) when the process is gone.
        """
        if self._lock is not None:
            with self._lock:
                return [] if self.stopped else self._check()
        return self._check()

    def _check(self) -> list[Drift]:
        # From outside, the process may have ended and its id gone to another since the last look: a process
        # that is not the one placed is never acted on (its start time is the record's, or it is gone).
        if records.start_time(self.pid) != self.record.start:
            raise ProcessLookupError(f"process {self.pid} is gone")
        self.looks += 1
        self._follow()
        events: list[Drift] = []
        cgroup = read_cgroup(Host.at("/"), pid=self.pid)
        if (cgroup.cpus, cgroup.mems) != (self._cgroup.cpus, self._cgroup.mems):
            events += self._cgroup_changed(self._cgroup, cgroup)
            self._cgroup = cgroup
        events += self._threads()
        if events:
            self._note(events)
        return events

    def _threads(self) -> list[Drift]:
        try:
            listing = self._names()
        except FileNotFoundError:
            raise ProcessLookupError(f"process {self.pid} is gone") from None
        ours: set[CpuSet] | None = None
        events: list[Drift] = []
        seen: dict[int, tuple[Any, bool]] = {}
        for name in listing:
            tid = int(name)
            try:
                raw = self._get(tid)
            except OSError:
                continue  # ended since the listing
            last = self._seen.get(tid)
            if last is not None and raw == last[0]:
                seen[tid] = last
                continue
            if last is None:
                born = self.ops.start_time(tid)
                if born is None:
                    continue  # ended since the listing, or its id is another process's thread by now
                self._born[tid] = born
            if ours is None:
                ours = self.ours()
            mask = self._cpuset(raw)
            if mask in ours:
                seen[tid] = raw, True  # born on, or put back on, a mask of numapin's
                self._settling.pop(tid, None)
                continue
            if self._too_fresh(tid, raw):
                if last is not None:
                    seen[tid] = last  # compared again at the next look
                continue
            self._settling.pop(tid, None)
            # A slice inside the placement (a framework's own) loses no locality: narrowed, never widened back.
            narrowed = bool(mask) and mask <= self.record.target
            cause = DriftCause.NARROWED if narrowed else DriftCause.INHERITED if last is None else DriftCause.MOVED
            event = self._answer(cause, tid, None if last is None else self._mask_of(tid, last[0]), mask, ours)
            events.append(event)
            # Put back: what it is now is what the keeper set (read again, a move right after would be missed).
            seen[tid] = (_PUT, True) if event.response is Response.RESTORED else (raw, False)
        self._seen = seen
        self._put = {tid: mask for tid, mask in self._put.items() if seen.get(tid, (None,))[0] is _PUT}
        self._born = {tid: born for tid, born in self._born.items() if tid in seen}
        if self._settling:
            listed = set(map(int, listing))
            self._settling = {tid: first for tid, first in self._settling.items() if tid in listed}
        return events

    def _too_fresh(self, tid: int, raw: Any) -> bool:
        """Whether thread ``tid``'s mask ``raw`` (not numapin's) is too new to be taken for drift: from outside,
        until it has held :data:`SETTLE_SECONDS` (the process's own pin writes its record within that)."""
        if self._lock is not None or self.pid == os.getpid():
            return False  # a look in the process itself: its pins are its own to see through
        now = time.monotonic()
        first = self._settling.get(tid)
        if first is None or first[0] != raw:
            self._settling[tid] = raw, now
            return True
        return now - first[1] < SETTLE_SECONDS

    def _mask_of(self, tid: int, raw: Any) -> CpuSet:
        """The mask a thread had at the last look (``raw``), or the one the keeper gave it since."""
        return self._put[tid] if raw is _PUT else self._cpuset(raw)

    def _answer(self, cause: DriftCause, tid: int, before: CpuSet | None, mask: CpuSet, ours: set[CpuSet]) -> Drift:
        """A thread's drift, answered by the policy: put back on the mask of numapin's it left (or the target)."""
        response = respond(cause, self.policy)
        if response is Response.RESTORED:
            back = before if before is not None and before in ours else self.record.target
            try:
                self._set(tid, back)
                self._put[tid] = back
                note = f"policy override: back on {back}"
            except OSError as exc:
                response, note = Response.REPORTED, f"could not put it back: {errno_name(exc.errno)}"
        elif response is Response.INSIDE:
            note = f"inside the placement {self.record.target}, under either policy"
        else:
            note = f"policy {self.policy.value} leaves it to whoever set it; policy override puts it back"
        named = getattr(self.ops, "thread_name", None)
        name = named(tid) if named else None
        who = pinners.named(name, self._environ)
        if who is not None:
            note = f"{pinners.PINNERS[who].library}'s thread; {note}"
        return Drift(time.time(), cause, response, before, mask, tid, name, note)

    def _cgroup_changed(self, old: Cgroup, new: Cgroup) -> list[Drift]:
        now = time.time()
        before, after = self.facts.topology.in_cgroup(old), self.facts.topology.in_cgroup(new)
        events: list[Drift] = []
        if before.allowed_mems != after.allowed_mems:
            events.append(Drift(now, DriftCause.MEMS, Response.REPORTED, before.allowed_mems, after.allowed_mems,
                                note="the kernel moves each thread's memory policy to the new nodes itself"))
        if before.allowed != after.allowed:
            events.append(self._place_again(now, before.allowed, after))
        else:
            self._refresh_seen()
        return events

    def _refresh_seen(self) -> None:
        """The threads' masks as the kernel left them (a cpuset changed), each still numapin's or not as it was;
        the masks the kernel gave numapin's threads are numapin's until the placement fits again."""
        for tid, (_, mine) in list(self._seen.items()):
            try:
                raw = self._get(tid)
            except OSError:
                del self._seen[tid]
                continue
            self._seen[tid] = raw, mine
            if mine:
                self._kernel_masks.add(self._cpuset(raw))

    def _place_again(self, now: float, was: CpuSet, topology: Topology) -> Drift:
        """The placement decided again inside the new cpuset, and put on every thread that carried it."""
        from ..placement.modes import within

        record, allowed = self.record, topology.allowed
        asked, asked_target = self._asked  # decided again from the request, never from an earlier narrowing
        try:
            placement = within(asked, topology, self.facts.inventory,
                               self.facts.kinds() if asked.reserved else None)
        except (EnvironmentProblem, UsageError) as exc:
            self._refresh_seen()
            return Drift(now, DriftCause.CPUSET, Response.LEFT, was, allowed,
                         note=f"nothing of the placement fits it ({exc}); the kernel's masks stay until it does")
        # Under policy respect inside a launcher's mask, the target was the placement's part inside that mask.
        inside_launcher = asked_target != asked.workers
        target = placement.workers & asked_target if inside_launcher else placement.workers
        if not target:
            self._refresh_seen()
            return Drift(now, DriftCause.CPUSET, Response.LEFT, was, allowed,
                         note=f"the new placement {placement.workers} misses the launcher's CPUs {record.target}")
        reset = kept = moved = 0
        refused: list[str] = []
        placed: dict[int, CpuSet] = {}
        for tid, (raw, mine) in list(self._seen.items()):
            if not mine and self.policy is not ExternalMaskPolicy.OVERRIDE:
                continue
            had = self._mask_of(tid, raw)
            want = placement.reserved if placement.reserved and had == record.placement.reserved else target
            try:
                mask = self.ops.get_affinity(tid)
                if mask == want:
                    kept += 1
                else:
                    reset += mask == allowed
                    self._set(tid, want)
                    moved += 1
                placed[tid] = want
            except ProcessLookupError:
                continue  # ended meanwhile (or no longer this process's): nothing to place
            except OSError as exc:
                refused.append(f"{tid} {errno_name(exc.errno)}")
        narrowed = (placement.workers, placement.mems, target) != (asked.workers, asked.mems, asked_target)
        self.record = replace(record, placement=placement, target=target, mask=target,
                              requested=(asked, asked_target) if narrowed else None)
        self._refresh_seen()  # the others' masks as the kernel left them: theirs, not drift
        self._kernel_masks = set()
        for tid, want in placed.items():
            self._seen[tid], self._put[tid] = (_PUT, True), want
        self.rebase(adding=True)  # and the threads born meanwhile
        said = []
        if reset:
            said.append(f"the kernel had reset {counted(reset, 'thread')} to the cgroup's CPUs")
        if moved:
            said.append(f"{counted(moved, 'thread')} put on {target}")
        if kept:
            said.append(f"{counted(kept, 'thread')} already on {target}" + ("" if moved else ", as the kernel kept it"))
        if refused:
            said.append(f"refused: {', '.join(refused[:3])}")
        return Drift(now, DriftCause.CPUSET, Response.REPLACED if moved else Response.HELD, was, allowed,
                     note="; ".join(said) or None)

    def _note(self, events: list[Drift]) -> None:
        """Count, log once per kind, and write the record."""
        for event in events:
            # The cause seen last goes last: a reader of the record takes it from there.
            self.counts[event.cause] = self.counts.pop(event.cause, 0) + 1
            if event.cause in self._said:
                log.debug("keeper: process %d: %s", self.pid, event)
            else:
                self._said.add(event.cause)
                log.warning("keeper: process %d: %s (further %s drift is counted in its record, not logged)",
                            self.pid, event, event.cause.value)
        self.last = events[-1]
        self.record = replace(self.record, drift=tuple((c.value, n) for c, n in self.counts.items()),
                              last_drift=str(self.last))
        if self._publish is not None:
            self._publish(self.record)

    def run(self, period: float, stopped: Callable[[float], bool]) -> None:
        """Look every ``period`` seconds until ``stopped(timeout)`` (which waits up to timeout) says stop, or the
        process is gone. A look that fails for another reason is one debug line; the next one tries again."""
        while not stopped(period) and not self.stopped:
            try:
                self.check()
            except ProcessLookupError:
                return
            except OSError as exc:
                log.debug("keeper: process %d: look failed: %s", self.pid, exc)


# -- in this process ------------------------------------------------------------------------------------------


class _Running:
    """The keeper thread of this process (one at most), and how to stop it."""

    def __init__(self, keeper: Keeper, period: float) -> None:
        import threading

        self.keeper = keeper
        self.period = period
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="numapin-keeper",
                                       daemon=True)  # never keeps the process from exiting

    def _run(self) -> None:
        import _thread

        # This thread too is one of the process's, born on the mask of the thread that asked to keep.
        me = _thread.get_native_id()
        try:
            self.keeper.adopt(me)
        except OSError:
            pass
        self.keeper.rebase(adding=True)
        self.keeper.run(self.period, self.stop.wait)


def keep(period: float = DEFAULT_PERIOD) -> Keeper | None:
    """Keep this process's placement from now on, looking every ``period`` seconds in a daemon thread.

    What is kept is what numapin applied last (a pin, the start-up hook, ``numapin exec``'s record); None when
    numapin has placed nothing here. Keeping again replaces the keeper; a forked child keeps nothing (it is
    not the placement the parent's keeper knew) until it keeps itself; :func:`stop_keeping` stops it.
    """
    from .state import state

    period = parse_period(period)
    pins = state()
    with pins.lock:
        keeper = this_process()
        if keeper is None:
            log.debug("keeper: numapin has placed nothing in this process: nothing to keep")
            return None
        stop_keeping()
        running = _Running(keeper, period)
        pins.keeper = running
        running.thread.start()
        return keeper


def this_process() -> Keeper | None:
    """A keeper of this process's placement, looked through by hand (:meth:`Keeper.check`; :func:`keep` runs
    one in a thread): it writes the process's record, follows its pins, counts its deliberate threads as
    numapin's and looks under the pin lock. None when numapin has placed nothing here."""
    from ..facts.machine import cached as cached_facts
    from .state import state

    pins = state()
    with pins.lock:
        record = pins.published or records.lookup(os.getpid())
        if record is None:
            return None
        return Keeper(os.getpid(), record, cached_facts(None, os.environ), publish=_publish_own,
                      source=_published, own=_deliberate, lock=pins.lock)


def keeping() -> Keeper | None:
    """This process's keeper, while it runs."""
    from .state import state

    running = state().keeper
    return running.keeper if running is not None and running.thread.is_alive() else None


def stop_keeping() -> None:
    """Stop this process's keeper, if one runs: a look under way ends first, and none acts after this returns."""
    from .state import state

    pins = state()
    with pins.lock:  # each look holds it: taking it waits for the one under way
        running, pins.keeper = pins.keeper, None
        if running is not None:
            running.keeper.stopped = True
            running.stop.set()


def _deliberate() -> set[CpuSet]:
    from .state import state

    return set(state().deliberate.values())


def _publish_own(record: Record) -> None:
    """This process's record, written again by its keeper; the pin state learns a new placement."""
    from .state import Applied, state

    pins = state()
    with pins.lock:
        applied = pins.live_applied()
        if applied is not None and applied.target != record.target:
            pins.applied = Applied(os.getpid(), record.mask, record.target, record.placement.gpu, applied.source)
            forget_facts()  # the cpuset changed: the next pin reads it again
        stamped = records.stamp(record)
        if records.publish(stamped, pins.ready_folders) is not None:
            pins.published = stamped


def _published() -> Record | None:
    from .state import state

    return state().published


def environ_period(environ: Mapping[str, str], variable: str) -> float | None:
    """``NUMAPIN_KEEP``'s answer: None (off), or the period (``1``, ``on``... the default; a number of
    seconds)."""
    from ..base.environment import AUTOPIN_OFF, AUTOPIN_ON

    text = environ.get(variable, "").strip()
    if text.lower() in AUTOPIN_OFF:
        return None
    if text.lower() in AUTOPIN_ON:
        return DEFAULT_PERIOD
    try:
        return parse_period(text, variable)
    except UsageError:
        from ..base.errors import quoted

        raise UsageError(f"{variable}={quoted(text)}: expected 1 (or true, yes, on) to keep every "
                         f"{DEFAULT_PERIOD:g} s, a period in seconds (0.5), or 0 (or false, no, off)",
                         value=text) from None


def _environment(pid: int) -> dict[str, str] | None:
    """Process ``pid``'s environment (this process's own as it is now); None where it may not be read."""
    if pid == os.getpid():
        return dict(os.environ)
    try:
        return procfs.environ(pid)
    except ProcessError:
        return None
