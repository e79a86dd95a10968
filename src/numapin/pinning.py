"""Idempotent, ownership-aware pinning of every thread of the process; leases.

This is the only stateful part of numapin. Its state (:class:`PinState`) is
one object: the record of what numapin applied (process id, the mask read
back, the target), the threads placed on purpose, the warnings given (the
machine's facts are :mod:`numapin.facts`', read once per process). A mask
is *external* only when it is neither the process's unconstrained baseline
(online CPUs inside the cgroup cpuset) nor numapin's own: its record, the
marker that ``numapin exec`` leaves in the environment, or the mask a forked
child was born with.

What to do with a mask is a pure decision (:func:`decide`, one table of
policy × ownership); :func:`pin` reads the facts, asks for that decision and
carries it out over every thread.
"""

from __future__ import annotations

import contextlib
import enum
import os
import threading
from collections import namedtuple
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence

from . import memory as _memory
from .cpuset import CpuSet, CpuSpec
from .deprecation import moved
from .environment import APPLIED
from .errors import EnvironmentProblem, NumapinError, UsageError, errno_name, parse_choice
from .facts import Facts
from .facts import cached as cached_facts
from .facts import forget as forget_facts
from .logger import log
from .memory import MemoryMode
from .placement import Placement, PlacementMode, explicit_cpus, parse_mode, resolve
from .records import field, record, replace
from .threadpools import ThreadpoolsUnavailable
from .threadpools import resize as resize_pools
from .threads import LinuxThreads, Outcome, ThreadKernel, outcome_of, walk_calls

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing at run time (mypy knows the name)
if TYPE_CHECKING:
    from typing import Any

    #: A thread's fate without its id, ``(outcome, before, after, error)``: the
    #: walk shares one such tuple among all the threads that fared alike.
    Fate = tuple[Outcome, CpuSet | None, CpuSet | None, str | None]

__all__ = [
    "MARKER_ENV",
    "Constraint",
    "Current",
    "Decision",
    "ExternalMaskPolicy",
    "MaskOwner",
    "PinAction",
    "PinError",
    "PinResult",
    "PinState",
    "Record",
    "ThreadResult",
    "ThreadResults",
    "classify",
    "constraint",
    "current",
    "decide",
    "exec_marker",
    "pin",
    "pin_thread",
    "pinned",
    "refresh",
    "state",
]

#: Set by ``numapin exec`` to the cpulist it applied before starting the program.
MARKER_ENV = APPLIED


class ExternalMaskPolicy(str, enum.Enum):
    """What to do when the process mask is external (set by a launcher, Slurm, numactl...)."""

    RESPECT = "respect"
    """Never widen it: pin to (target ∩ external mask), or leave it and warn once when that is empty."""

    OVERRIDE = "override"
    """Ignore it: pin to the target (which always lies inside the cgroup cpuset)."""

    RESET = "reset"
    """Remove it: restore the unconstrained baseline (TensorRT-LLM's automatic behaviour)."""

    OFF = "off"
    """Do nothing at all."""

    def __str__(self) -> str:
        return self.value


def parse_policy(policy: str | ExternalMaskPolicy) -> ExternalMaskPolicy:
    return parse_choice(ExternalMaskPolicy, policy, "policy")


class MaskOwner(str, enum.Enum):
    """Who set the process mask, as far as numapin can tell."""

    UNCONSTRAINED = "unconstrained"
    OWN = "numapin"
    EXTERNAL = "external"

    def __str__(self) -> str:
        return self.value


class PinAction(str, enum.Enum):
    """What a pin did, as a whole (each thread's own fate is in its :class:`ThreadResult`)."""

    PINNED = "pinned"
    PINNED_INSIDE = "pinned inside the external mask"
    KEPT_EXTERNAL = "kept external mask"
    RESET = "reset the external mask to the baseline"
    OVERRODE = "overrode the external mask"
    NOTHING = "nothing pinned"
    ROLLED_BACK = "rolled back"
    OFF = "off: nothing done"
    PINNED_CALLER = "pinned the calling thread"

    def __str__(self) -> str:
        return self.value


@record
class Record:
    """What numapin applied in this process."""

    pid: int
    mask: CpuSet
    target: CpuSet
    gpu: int | None = None
    source: str = "pin"


if TYPE_CHECKING:
    from typing import NamedTuple

    class _ThreadFields(NamedTuple):
        tid: int
        outcome: Outcome
        before: CpuSet | None = None
        after: CpuSet | None = None
        error: str | None = None
else:
    # typing.NamedTuple would import typing at run time for this one class: the same tuple from collections.
    _ThreadFields = namedtuple("ThreadResult", ("tid", "outcome", "before", "after", "error"), defaults=(None,) * 3)


class ThreadResult(_ThreadFields):
    """One thread's fate. An immutable record (a named tuple)."""

    __slots__ = ()

    def __str__(self) -> str:
        text = f"{self.tid}: {self.outcome}"
        if self.error:
            text += f" ({self.error})"
        return text


class ThreadResults(Sequence[ThreadResult]):
    """Every thread's fate, in walk order: an immutable sequence of :class:`ThreadResult`.

    The walk records one shared fate per thread; the ThreadResult records are
    made when someone first reads them. Most pins are only counted (their
    result's ``counts``), and making a record per thread would cost a pin of a
    thousand threads about a twentieth of its time.
    """

    __slots__ = ("_fates", "_made")

    def __init__(self, fates: Mapping[int, Fate]) -> None:
        self._fates = fates
        self._made: tuple[ThreadResult, ...] | None = None

    def _all(self) -> tuple[ThreadResult, ...]:
        if self._made is None:
            new = tuple.__new__
            self._made = tuple(new(ThreadResult, (tid, *fate)) for tid, fate in self._fates.items())
        return self._made

    def __len__(self) -> int:
        return len(self._fates)

    def __getitem__(self, index: Any) -> Any:
        return self._all()[index]

    def __iter__(self) -> Iterator[ThreadResult]:
        return iter(self._all())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, ThreadResults | tuple):
            return self._all() == tuple(other)
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self._all())

    def __repr__(self) -> str:
        return repr(self._all())

    def __reduce__(self) -> tuple[object, ...]:
        # __slots__ without __getstate__ would refuse pickle's protocols 0 and 1.
        return ThreadResults, (dict(self._fates),)


@record
class PinResult:
    """The truthful outcome of one pin: the decision, the target and every thread's fate."""

    action: PinAction
    target: CpuSet | None = None
    mask: CpuSet | None = None
    placement: Placement | None = None
    policy: ExternalMaskPolicy = ExternalMaskPolicy.RESPECT
    ownership: MaskOwner | None = None
    previous: CpuSet | None = None
    threads: Sequence[ThreadResult] = ()
    memory: _memory.MemoryResult | None = None
    message: str | None = None
    counts: Mapping[Outcome, int] | None = field(default=None, compare=False)
    """How many threads had each outcome, when the walk counted them (else counted from ``threads``)."""
    threadpools: tuple[str, ...] = ()
    """The thread pools resized (``pin(threadpools=True)``), as ``"openmp (libgomp.so.1): 2 -> 1"``."""

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
        parts = [self.action.value]
        if self.ownership is MaskOwner.EXTERNAL and self.previous is not None:
            parts[0] += f" {self.previous}"
        if self.target is not None:
            parts.append(f"target {self.target}")
        if self.placement is not None and self.placement.gpu is not None:
            # CUDA's logical index alone is ambiguous across processes (every Ray
            # actor sees "GPU 0"): name the physical device as well.
            where = [w for w in (self.placement.pci, None if self.placement.node is None
                                 else f"node {self.placement.node}") if w]
            parts.append(f"for GPU {self.placement.gpu}" + (f" ({', '.join(where)})" if where else ""))
        counts = ", ".join(f"{n} {o}" for o in Outcome if (n := self.count(o)))
        if counts:
            parts.append(f"threads: {counts}")
        if self.memory is not None:
            parts.append(str(self.memory))
        if self.threadpools:
            parts.append("thread pools: " + ", ".join(self.threadpools))
        if self.message:
            parts.append(self.message)
        return "numapin: " + "; ".join(parts)


class PinError(NumapinError):
    """A strict pin failed; ``result`` tells what happened (changes were rolled back)."""

    def __init__(self, message: str, result: PinResult) -> None:
        super().__init__(message)
        self.result = result


# -- the decision -----------------------------------------------------------


@record
class Decision:
    """What to do with the process mask: the action, whose mask it is, and the CPUs to apply."""

    action: PinAction
    ownership: MaskOwner
    target: CpuSet  # empty when nothing is to be applied


def classify(mask: CpuSet, baseline: CpuSet, own: Collection[CpuSet]) -> MaskOwner:
    """Whether ``mask`` is the unconstrained baseline, numapin's own (one of ``own``), or someone else's."""
    if mask >= baseline:
        return MaskOwner.UNCONSTRAINED
    if mask in own:
        return MaskOwner.OWN
    return MaskOwner.EXTERNAL


def decide(mask: CpuSet, baseline: CpuSet, own: Collection[CpuSet], policy: ExternalMaskPolicy,
           workers: CpuSet) -> Decision:
    """The whole policy: the process mask ``mask`` × ``policy`` → what to apply. No kernel call.

    ``baseline`` is what the process may use at all, ``own`` the masks numapin
    applied, ``workers`` the placement's CPUs for the worker threads.
    """
    ownership = classify(mask, baseline, own)
    if policy is ExternalMaskPolicy.OFF:
        return Decision(PinAction.OFF, ownership, CpuSet())
    if ownership is not MaskOwner.EXTERNAL:
        return Decision(PinAction.PINNED, ownership, workers)
    if policy is ExternalMaskPolicy.RESPECT:
        inside = workers & mask
        return Decision(PinAction.PINNED_INSIDE if inside else PinAction.KEPT_EXTERNAL, ownership, inside)
    if policy is ExternalMaskPolicy.RESET:
        return Decision(PinAction.RESET, ownership, baseline)
    if policy is ExternalMaskPolicy.OVERRIDE:
        return Decision(PinAction.OVERRODE, ownership, workers)
    raise AssertionError(f"policy {policy} has no decision")  # a new ExternalMaskPolicy must be decided here


# -- process-wide state ---------------------------------------------------


def exec_marker(environ: Mapping[str, str]) -> CpuSet | None:
    """The mask ``numapin exec`` applied, from its environment marker (None when absent or malformed)."""
    text = environ.get(MARKER_ENV)
    if not text:
        return None
    try:
        return CpuSet.parse(text)
    except ValueError:
        log.debug("ignoring malformed %s=%r", MARKER_ENV, text)
        return None


class PinState:
    """Everything numapin remembers in this process, behind one lock.

    A forked child gets a fresh one (:func:`os.register_at_fork`) that says
    the mask it was born with is numapin's, so it can re-pin quietly.
    """

    def __init__(self, record: Record | None = None) -> None:
        self.lock = threading.RLock()
        self.record = record
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

    def forked(self, forking_tid: int) -> PinState:
        """The state of a child just forked from this process by its thread ``forking_tid``.

        The child's one thread was copied from the forking thread, whose mask
        may be the record's, a pin's under way in another thread (before or
        after the walk reached it), or a deliberate one: when it is any of
        numapin's, the child's record is the mask it was born with, so its
        own pin never mistakes it for someone else's. Leases that thread held
        are the child's to leave.
        """
        record, flight = self.record, self.in_flight
        child = PinState()
        child.lease_holders = [threading.get_native_id() for tid in self.lease_holders if tid == forking_tid]
        if record is None and flight is None:
            return child
        ours = {*self.deliberate.values(), *(() if flight is None else (flight,)),
                *(() if record is None else (record.mask, record.target))}
        try:
            born: CpuSet | None = CpuSet(os.sched_getaffinity(0))
        except OSError:
            born = None
        if born is not None and born in ours:
            gpu = record.gpu if record is not None and flight is None else None
            child.record = Record(os.getpid(), born, born, gpu, "inherited")
        elif record is not None:
            child.record = replace(record, pid=os.getpid(), source="inherited")
        return child

    def live_record(self) -> Record | None:
        record = self.record
        return record if record is not None and record.pid == os.getpid() else None

    def own_masks(self, environ: Mapping[str, str]) -> list[CpuSet]:
        """The masks that are numapin's in this process: its record and the exec marker."""
        record = self.live_record()
        marker = exec_marker(environ)
        return [m for m in (None if record is None else record.mask, marker) if m is not None]

    def thread_masks(self) -> set[CpuSet]:
        """Every mask numapin gave a thread of this process (the record's and the deliberate ones)."""
        record = self.live_record()
        return {*(() if record is None else (record.mask,)), *self.deliberate.values()}

    def warn_once(self, message: str) -> None:
        if message not in self._warned:
            self._warned.add(message)
            log.warning("%s", message)

    def mark_deliberate(self, ops: ThreadKernel, tid: int, mask: CpuSet, before: CpuSet) -> None:
        if tid not in self.deliberate:
            self.before_deliberate[tid] = before
            self.started[tid] = ops.start_time(tid)
        self.deliberate[tid] = mask

    def forget_exited(self, ops: ThreadKernel) -> None:
        """Drop what is remembered of deliberate threads that exited, even when their id is back."""
        for tid in list(self.deliberate):
            if ops.start_time(tid) != self.started.get(tid):
                self.deliberate.pop(tid, None)
                self.before_deliberate.pop(tid, None)
                self.started.pop(tid, None)

    def process_mask_of_caller(self, tid: int, mask: CpuSet) -> CpuSet:
        """The process mask as the calling thread sees it: a thread placed on purpose does
        not carry it, so then it is numapin's record, or the mask the thread had before."""
        if self.deliberate.get(tid) != mask:
            return mask
        record = self.live_record()
        return record.mask if record is not None else self.before_deliberate.get(tid, mask)

    def saved(self) -> Saved:
        return Saved(self.record, dict(self.deliberate), dict(self.before_deliberate))

    def applied_since(self, saved: Saved) -> set[CpuSet]:
        """The masks numapin applied after ``saved`` was taken (pins and pin_thread calls inside a lease)."""
        found = {m for tid, m in self.deliberate.items() if saved.deliberate.get(tid) != m}
        if self.record is not None and self.record is not saved.record:
            found |= {self.record.mask, self.record.target}
        return found

    def restore(self, saved: Saved) -> None:
        record = saved.record
        if record is not None and record.pid != os.getpid():
            # Saved in the parent before a fork: the mask it names is the one this child inherited.
            record = replace(record, pid=os.getpid(), source="inherited")
        self.record, self.deliberate, self.before_deliberate = (record, dict(saved.deliberate),
                                                                dict(saved.before_deliberate))


@record
class Saved:
    """What a lease remembers of the pin state, to put back on exit."""

    record: Record | None
    deliberate: Mapping[int, CpuSet]
    before_deliberate: Mapping[int, CpuSet]


_STATE = PinState()


def state() -> PinState:
    """This process's pin state (a new one in each forked child)."""
    return _STATE


_FORKING = [0]  # the native id of the thread that forks, in the parent (register_at_fork's before)


def _before_fork() -> None:
    _FORKING[0] = threading.get_native_id()


def _after_fork_in_child() -> None:
    # The child is a new process: a fresh lock (the parent's may have been
    # held by another thread at fork time, even mid-walk) and what it inherited as its own.
    global _STATE
    _STATE = _STATE.forked(_FORKING[0])


os.register_at_fork(before=_before_fork, after_in_child=_after_fork_in_child)


def refresh() -> None:
    """Forget the facts numapin read (after CPU hotplug or a change of the cgroup cpuset).

    Topology, GPUs and the cgroup are read on the first pin and kept: pinning
    is then as cheap as its syscalls. A forked child reads them afresh.
    """
    forget_facts()


@record
class Current:
    """What numapin applied in this process, and whether the live mask still matches it."""

    record: Record | None
    live: CpuSet
    matches: bool
    marker: CpuSet | None

    def __str__(self) -> str:
        if self.record is None and self.marker is None:
            return f"numapin has not pinned this process; live mask {self.live}"
        applied = self.record.mask if self.record is not None else self.marker
        state = "matches" if self.matches else "differs from"
        return f"numapin applied {applied}; live mask {self.live} {state} it"


def current(*, kernel: ThreadKernel | None = None) -> Current:
    """Report numapin's record (or the exec marker) against the process's live mask."""
    ops = kernel or LinuxThreads()
    me = ops.self_tid()
    live = ops.get_affinity(me)
    pins = _STATE
    with pins.lock:
        record = pins.live_record()
        if pins.deliberate.get(me) == live:
            # The caller sits on cores of its own (pin_thread): the process
            # mask is what the other threads carry.
            live = _other_thread_mask(ops, me, pins.deliberate, live)
    marker = exec_marker(os.environ)
    applied = record.mask if record is not None else marker
    return Current(record, live, applied == live, marker)


def _other_thread_mask(ops: ThreadKernel, me: int, deliberate: Mapping[int, CpuSet], fallback: CpuSet) -> CpuSet:
    """The mask of the first thread that was not placed on purpose, or ``fallback``."""
    with contextlib.suppress(OSError):
        for tid in ops.list_threads():
            if tid != me and tid not in deliberate:
                with contextlib.suppress(OSError):
                    return ops.get_affinity(tid)
    return fallback


@record
class Constraint:
    """The calling thread's process mask, whose it is, and the baseline it is compared with."""

    ownership: MaskOwner
    mask: CpuSet
    baseline: CpuSet


def constraint(
    *,
    root: str | os.PathLike[str] | None = None,
    environ: Mapping[str, str] | None = None,
    kernel: ThreadKernel | None = None,
) -> Constraint:
    """Whether someone else constrained this process's mask (what :func:`pin`'s policy acts on)."""
    env = os.environ if environ is None else environ
    ops = kernel or LinuxThreads()
    pins = _STATE
    with pins.lock:
        baseline = cached_facts(root, env).topology.allowed
        me = ops.self_tid()
        mask = pins.process_mask_of_caller(me, ops.get_affinity(me))
        return Constraint(classify(mask, baseline, pins.own_masks(env)), mask, baseline)


# -- the walk -------------------------------------------------------------


class _Walk:
    """Apply ``target`` to every thread, converging over threads born meanwhile."""

    def __init__(self, ops: ThreadKernel, target: CpuSet, movable: set[CpuSet], all_threads: bool,
                 deliberate: Mapping[int, CpuSet]) -> None:
        self.ops = ops
        self.target = target
        self.movable = movable
        self.all_threads = all_threads
        self.deliberate = deliberate
        self.fates: dict[int, Fate] = {}
        self.counts: dict[Outcome, int] = dict.fromkeys(Outcome, 0)
        #: The thread ids listed so far, as the listing writes them.
        self.known: set[str] = set()
        #: True once the walk's changes were rolled back or recorded: nothing is left to undo.
        self.settled = False

    def run(self, first: int) -> None:
        # The calling thread first: threads it creates from now on inherit the
        # target. Then passes over /proc/self/task until one finds nobody new,
        # so threads spawned meanwhile by not-yet-pinned threads are caught.
        # This loop runs once per thread: locals instead of attributes, masks
        # compared as integers, one fate tuple shared by the threads that fare
        # alike, outcomes counted as they happen (nothing walks the fates again).
        get, to_cpuset, put, arg, names = walk_calls(self.ops, self.target)
        target, fates, counts = self.target, self.fates, self.counts
        target_bits = target.bits
        movable = frozenset(m.bits for m in self.movable)
        deliberate, force = self.deliberate, self.all_threads
        pinned = already = kept = 0
        # Neighbouring threads almost always share a mask: the raw mask of the
        # last read, its CpuSet and the fates of threads holding it are kept,
        # so a thread costs the syscalls and a dictionary entry.
        last_raw: object = None
        before, bits = target, target.bits
        is_pinned: Fate = (Outcome.PINNED, before, target, None)
        is_already: Fate = (Outcome.ALREADY, before, before, None)
        is_kept: Fate = (Outcome.KEPT, before, before, None)
        # Whether a thread holding the last mask read may be moved: decided once per mask, not per thread.
        may_move = True
        fresh = [first]
        # The ids walked, as the listing writes them: a listing with nobody new
        # (every one but the first) is then one set comparison, made in C.
        known = self.known
        known.add(str(first))
        confirmed = False
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
                    fate: Fate = (outcome_of(exc), None, None, errno_name(exc.errno))
                    fates[tid] = fate
                    counts[fate[0]] += 1
                    continue
                if raw != last_raw:
                    last_raw, before = raw, to_cpuset(raw)
                    bits = before.bits
                    may_move = force or bits in movable
                    is_pinned = (Outcome.PINNED, before, target, None)
                    is_already = (Outcome.ALREADY, before, before, None)
                    is_kept = (Outcome.KEPT, before, before, None)
                if bits == target_bits:
                    fates[tid] = is_already
                    already += 1
                elif not may_move or (deliberate and not force and deliberate.get(tid) == before):
                    fates[tid] = is_kept
                    kept += 1
                else:
                    # Recorded before the call: an interruption right after it must find the change to undo.
                    fates[tid] = is_pinned
                    try:
                        put(tid, arg)
                    except OSError as exc:
                        fate = (outcome_of(exc), before, None, errno_name(exc.errno))
                        fates[tid] = fate
                        counts[fate[0]] += 1
                        continue
                    pinned += 1
            listed = names()
            if known.issuperset(listed):
                fresh = []
            else:
                new = [name for name in listed if name not in known]
                known.update(new)
                fresh = [int(name) for name in new]
        counts[Outcome.PINNED] += pinned
        counts[Outcome.ALREADY] += already
        counts[Outcome.KEPT] += kept

    def move_caller(self, tid: int, before: CpuSet, cpus: CpuSet) -> None:
        """Give the calling thread a target of its own (the reserved cores) after the walk."""
        self.counts[self.fates[tid][0]] -= 1
        if before == cpus:
            self.fates[tid] = (Outcome.ALREADY, before, before, None)
            self.counts[Outcome.ALREADY] += 1
            return
        self.ops.set_affinity(tid, cpus)
        self.fates[tid] = (Outcome.PINNED, before, cpus, None)
        self.counts[Outcome.PINNED] += 1

    def rollback(self) -> None:
        """Give every thread the walk moved its mask from before.

        It runs to the end even when an exception (a second signal) interrupts
        it, resuming where it was, and raises that exception afterwards.
        """
        todo = [(tid, before) for tid, (outcome, before, _, _) in self.fates.items()
                if outcome is Outcome.PINNED and before is not None]
        self.settled = _finish(todo, lambda item: self.ops.set_affinity(*item))

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

        _finish(born, settle)


def _finish(items: list[Any], act: Callable[[Any], None]) -> bool:
    """``act`` on each item, last first, ignoring OSError (a thread gone); resumed after any other exception,
    which is raised once every item is done. Returns True."""
    pending: BaseException | None = None
    while items:
        try:
            while items:
                with contextlib.suppress(OSError):
                    act(items[-1])
                items.pop()
        except BaseException as exc:  # a signal handler's exception: finish first
            pending = pending or exc
    if pending is not None:
        raise pending
    return True


def _fail(strict: bool, message: str, result: PinResult) -> PinResult:
    if strict:
        raise PinError(message, result)
    # Once per process and problem: a worker that pins in a loop (or a library
    # that calls pin() per request) must not repeat "no GPU" at every call.
    _STATE.warn_once(f"numapin: {message}; the process keeps its mask")
    return result


# -- pin ------------------------------------------------------------------


def pin(
    gpu: int | None = None,
    *,
    cpus: CpuSpec | None = None,
    mode: str | PlacementMode | None = None,
    policy: str | ExternalMaskPolicy = "respect",
    all_threads: bool = False,
    strict: bool = False,
    reserve: int = 0,
    memory: str | MemoryMode = "none",
    migrate: bool = False,
    root: str | os.PathLike[str] | None = None,
    environ: Mapping[str, str] | None = None,
    kernel: ThreadKernel | None = None,
    threadpools: bool = False,
    placement: Placement | None = None,
) -> PinResult:
    """Pin every thread of this process (and optionally its memory) near GPU ``gpu``.

    ``gpu`` is CUDA's logical index (under ``CUDA_VISIBLE_DEVICES``); None means
    the launcher's local rank mapped to a GPU, or GPU 0. ``cpus`` pins to an
    explicit set instead. Pinning again for the same GPU changes nothing and
    warns about nothing; another GPU moves the pin. Threads with a mask that is
    neither the old process mask nor numapin's are kept unless ``all_threads``.
    With ``reserve=K`` the calling thread goes to the K reserved cores (see
    :func:`pin_thread`) and every other thread to the rest. ``threadpools=True``
    also sizes the OpenMP and BLAS pools already loaded to the target's CPU count
    (through threadpoolctl, when installed; ``PinResult.threadpools`` says what changed).
    ``mode`` is a :class:`PlacementMode` (default ``node``).

    ``placement`` pins to a placement already decided (``pin(placement=plan(1))``)
    instead of deciding again from ``gpu``, ``cpus``, ``mode`` and ``reserve``,
    which must then be left out: the result carries that decision (its GPU,
    mode, node and reason). Its CPUs must lie inside the allowed CPUs.

    Caller mistakes raise :class:`UsageError` before anything changes. Problems
    of the environment return a result saying nothing was pinned (after one
    warning), or raise :class:`PinError` when ``strict``.
    """
    env = os.environ if environ is None else environ
    chosen_policy = parse_policy(policy)
    if placement is not None:
        given = [name for name, value in (("gpu", gpu), ("cpus", cpus), ("mode", mode), ("reserve", reserve or None))
                 if value is not None]
        if given:
            raise UsageError(f"pin(placement=...) is the decision already made: leave out {', '.join(given)}",
                             value=given)
    elif cpus is None and mode is not None:
        parse_mode(mode)
    memory_mode = _memory.parse_memory_mode(memory)
    if chosen_policy is ExternalMaskPolicy.OFF:
        return PinResult(PinAction.OFF, policy=chosen_policy)
    ops = kernel or LinuxThreads()
    pins = _STATE
    with pins.lock:
        try:
            facts = cached_facts(root, env)
            if placement is None:
                placement = resolve(facts, env, gpu=gpu, cpus=cpus, mode=mode or PlacementMode.NODE, reserve=reserve)
            else:
                explicit_cpus(facts.topology, placement.cpus)  # a placement made elsewhere must fit here
        except UsageError:
            raise
        except (EnvironmentProblem, OSError) as exc:
            return _fail(strict, str(exc), PinResult(PinAction.NOTHING, policy=chosen_policy, message=str(exc)))
        return _apply(pins, ops, facts, placement, _Options(chosen_policy, all_threads, strict, memory_mode,
                                                            migrate, env, root, threadpools))


@record
class _Options:
    policy: ExternalMaskPolicy
    all_threads: bool
    strict: bool
    memory: MemoryMode
    migrate: bool
    environ: Mapping[str, str]
    root: str | os.PathLike[str] | None
    threadpools: bool = False


def _apply(pins: PinState, ops: ThreadKernel, facts: Facts, placement: Placement, options: _Options) -> PinResult:
    """Carry out :func:`decide`'s answer over every thread, then memory; record what was applied."""
    policy, strict = options.policy, options.strict
    baseline = facts.topology.allowed
    me = ops.self_tid()
    try:
        mine = ops.get_affinity(me)
    except OSError as exc:
        message = f"cannot read this thread's mask ({errno_name(exc.errno)})"
        return _fail(strict, message, PinResult(PinAction.NOTHING, policy=policy, message=message))
    pins.forget_exited(ops)
    previous = pins.process_mask_of_caller(me, mine)
    own = pins.own_masks(options.environ)
    decision = decide(previous, baseline, own, policy, placement.workers)
    wanted, ownership = decision.target, decision.ownership
    if decision.action is PinAction.KEPT_EXTERNAL:
        message = (f"the process mask {previous} was set by someone else and does not meet the "
                   f"placement {placement.cpus}; left as it is (policy respect)")
        pins.warn_once(f"numapin: {message}")
        return PinResult(PinAction.KEPT_EXTERNAL, placement=placement, policy=policy, ownership=ownership,
                         previous=previous, message=message)
    walk = _Walk(ops, wanted, {previous, baseline, *own}, options.all_threads, pins.deliberate)
    # Interruption (KeyboardInterrupt, a signal handler's exception) may land anywhere below. Until
    # the record is written the pin is undone: the walk's changes rolled back, the process as it was.
    # Once it is written the pin stands, complete. A fork meanwhile: see _after_fork_in_child.
    pins.in_flight = wanted
    try:
        return _carry_out(pins, ops, walk, me, mine, previous, placement, decision, options, facts)
    except BaseException:
        if not walk.settled:
            walk.abandon(previous)
        raise
    finally:
        pins.in_flight = None


def _carry_out(pins: PinState, ops: ThreadKernel, walk: _Walk, me: int, mine: CpuSet, previous: CpuSet,
               placement: Placement, decision: Decision, options: _Options, facts: Facts) -> PinResult:
    """The walk, memory and thread pools for a decided pin; the record written last."""
    policy, strict = options.policy, options.strict
    wanted, ownership = decision.target, decision.ownership
    reserve_me = bool(placement.reserved) and decision.action is not PinAction.RESET
    try:
        walk.run(me)
        if reserve_me:
            walk.move_caller(me, mine, placement.reserved)
    except OSError as exc:
        # Nothing may stay half-applied when the walk itself broke.
        walk.rollback()
        message = f"cannot list this process's threads ({errno_name(exc.errno)}); changes rolled back"
        return _fail(strict, message, PinResult(PinAction.NOTHING, wanted, placement=placement, policy=policy,
                                                ownership=ownership, previous=previous, message=message))
    results = ThreadResults(walk.fates)
    counts = walk.counts

    def unapplied(action: PinAction, mask: CpuSet = wanted) -> PinResult:
        return PinResult(action, wanted, mask, placement, policy, ownership, previous, results, counts=counts)

    if counts[Outcome.FAILED] and strict:
        walk.rollback()
        failed = [r for r in results if r.outcome is Outcome.FAILED]
        raise PinError(f"{len(failed)} threads refused the mask {wanted} (changes rolled back): "
                       + ", ".join(str(r) for r in failed[:5]), unapplied(PinAction.ROLLED_BACK))
    if not counts[Outcome.PINNED] and not counts[Outcome.ALREADY]:
        walk.settled = True  # nothing was changed
        return _fail(strict, f"no thread could be pinned to {wanted}", unapplied(PinAction.NOTHING))
    mask = _read_back(ops, walk.fates, wanted)
    placed = None
    if options.memory is not MemoryMode.NONE or options.migrate:
        try:
            placed = _memory.place_memory(placement.mems, options.memory, options.migrate, strict=strict,
                                          limits=_memory.MemoryNodes.of(facts.topology))
        except NumapinError as exc:  # strict only: the CPU part goes back too
            walk.rollback()
            raise PinError(f"memory placement failed, CPU pin rolled back: {exc}",
                           unapplied(PinAction.ROLLED_BACK, mask)) from exc
    pools: tuple[str, ...] = ()
    if options.threadpools:
        try:
            pools = resize_pools(len(wanted))
        except ThreadpoolsUnavailable as exc:
            pins.warn_once(f"numapin: {exc}; thread pools left as they are")
    # Built once, now that the mask read back, the memory placement and the pools are known.
    result = PinResult(decision.action, wanted, mask, placement, policy, ownership, previous, results, placed,
                       counts=counts, threadpools=pools)
    pins.record = Record(os.getpid(), result.mask or wanted, wanted, placement.gpu)
    walk.settled = True  # from here on the pin stands: an interruption below leaves it complete
    if reserve_me:
        pins.mark_deliberate(ops, me, placement.reserved, mine)
    if placed is not None and placed.warning:
        pins.warn_once(placed.warning)
    if counts[Outcome.FAILED]:
        log.warning("%s", result)
    elif result.changed:
        log.info("%s", result)
    else:
        log.debug("%s", result)
    return result


def _read_back(ops: ThreadKernel, fates: Mapping[int, Fate], wanted: CpuSet) -> CpuSet:
    """The mask the kernel reports for a thread the walk put on ``wanted`` (the record keeps what was applied).

    The calling thread may hold a mask of its own (reserved or deliberate
    cores), so it is not asked unless it, too, landed on ``wanted``.
    """
    for tid, (outcome, _, after, _) in fates.items():
        if after == wanted and outcome in (Outcome.PINNED, Outcome.ALREADY):
            with contextlib.suppress(OSError):
                return ops.get_affinity(tid)
    return wanted


def pin_thread(
    cpus: CpuSpec,
    *,
    strict: bool = False,
    root: str | os.PathLike[str] | None = None,
    kernel: ThreadKernel | None = None,
) -> PinResult:
    """Pin only the calling thread, and remember it as deliberate.

    Later process-wide pins keep this thread where it is (unless they are
    asked for all threads): the case of a scheduler or executor loop on the
    reserved cores of a placement.
    """
    ops = kernel or LinuxThreads()
    pins = _STATE
    with pins.lock:
        facts = cached_facts(root, os.environ)
        placement = resolve(facts, os.environ, cpus=cpus)
        me = ops.self_tid()
        try:
            before = ops.get_affinity(me)
            ops.set_affinity(me, placement.cpus)
            after = ops.get_affinity(me)
        except OSError as exc:
            outcome = ThreadResult(me, outcome_of(exc), error=errno_name(exc.errno))
            return _fail(strict, f"cannot pin thread {me} to {placement.cpus} ({errno_name(exc.errno)})",
                         PinResult(PinAction.NOTHING, placement.cpus, placement=placement, threads=(outcome,)))
        pins.mark_deliberate(ops, me, after, before)
        return PinResult(PinAction.PINNED_CALLER, placement.cpus, after, placement,
                         threads=(ThreadResult(me, Outcome.PINNED, before, after),))


@contextlib.contextmanager
def pinned(
    gpu: int | None = None,
    *,
    cpus: CpuSpec | None = None,
    mode: str | PlacementMode | None = None,
    policy: str | ExternalMaskPolicy = "respect",
    all_threads: bool = False,
    strict: bool = False,
    reserve: int = 0,
    memory: str | MemoryMode = "none",
    migrate: bool = False,
    root: str | os.PathLike[str] | None = None,
    environ: Mapping[str, str] | None = None,
    kernel: ThreadKernel | None = None,
    threadpools: bool = False,
    placement: Placement | None = None,
) -> Iterator[PinResult]:
    """:func:`pin` as a lease (the same parameters): on exit every thread gets its original mask back.

    Threads created during the lease get the original mask of the thread that
    took it; a thread whose mask someone else changed meanwhile keeps it. A
    memory policy the lease set on the calling thread is put back as it was.
    Whatever numapin applied inside the lease (a :func:`pin` or
    :func:`pin_thread` there) is part of it: taken back on exit, with the
    record as it was before the lease.

    Leases nest within one thread. A lease taken while another thread holds
    one is a :class:`UsageError`, raised before anything changes: two restores
    that each undo half of the other's work would leave no defined state.
    """
    ops: ThreadKernel = kernel or LinuxThreads()
    policy_before = _policy_or_none() if _memory.parse_memory_mode(memory) is not MemoryMode.NONE else None
    pins = _STATE
    with pins.lock:
        me = ops.self_tid()
        others = [tid for tid in pins.lease_holders if tid != me]
        if others:
            raise UsageError(f"thread {others[0]} holds a numapin lease: leases nest within one thread "
                             "but may not overlap across threads")
        saved: dict[int, CpuSet] = {}
        for tid in ops.list_threads():
            with contextlib.suppress(OSError):
                saved[tid] = ops.get_affinity(tid)
        if me not in saved:
            saved[me] = ops.get_affinity(me)
        remembered = pins.saved()
        result = pin(gpu, cpus=cpus, mode=mode, policy=policy, all_threads=all_threads, strict=strict,
                     reserve=reserve, memory=memory, migrate=migrate, root=root, environ=environ, kernel=ops,
                     threadpools=threadpools, placement=placement)
        pins.lease_holders.append(me)
    try:
        yield result
    finally:
        pins = _STATE  # a child forked inside the lease leaves it with its own state
        with pins.lock:
            if pins.lease_holders:
                pins.lease_holders.pop()
            _restore(ops, me, saved, result, pins.applied_since(remembered))
            pins.restore(remembered)
            if policy_before is not None and result.memory is not None \
                    and result.memory.applied is not MemoryMode.NONE:
                try:
                    facts = cached_facts(root, os.environ if environ is None else environ)
                    _memory.set_mempolicy(*policy_before, limits=_memory.MemoryNodes.of(facts.topology))
                except (NumapinError, OSError) as exc:
                    log.warning("numapin: could not restore the memory policy %s %s after the lease: %s",
                                policy_before[0].name, policy_before[1], exc)


def _policy_or_none() -> tuple[_memory.KernelMemoryPolicy, CpuSet] | None:
    """The calling thread's memory policy, or None where it cannot be read (the lease then leaves it)."""
    try:
        return _memory.get_mempolicy()
    except (NumapinError, OSError):
        return None


def _restore(ops: ThreadKernel, me: int, saved: dict[int, CpuSet], result: PinResult,
             inside: set[CpuSet]) -> None:
    applied = {t.tid: t.after for t in result.threads if t.outcome in (Outcome.PINNED, Outcome.ALREADY)}
    lease_masks = {m for m in applied.values() if m is not None} | inside
    try:
        tids = ops.list_threads()
    except OSError:
        return

    def put_back(tid: int) -> None:
        now = ops.get_affinity(tid)
        original = saved.get(tid, saved[me])
        # Only masks this lease applied are taken back; anything else was
        # someone's deliberate change made during the lease.
        if now in lease_masks and now != original:
            ops.set_affinity(tid, original)

    _finish(tids, put_back)  # runs to the end even when interrupted


#: Old names, importable for one release with a DeprecationWarning.
_RENAMED = {
    "Policy": ("numapin.pinning", "ExternalMaskPolicy"),
    "Ownership": ("numapin.pinning", "MaskOwner"),
    "Action": ("numapin.pinning", "PinAction"),
}


def __getattr__(name: str) -> object:
    return moved(__name__, name, _RENAMED)
