"""Idempotent, ownership-aware pinning of every thread of the process; leases.

This is the only stateful part of numapin. It keeps a record of what it
applied (process id, the mask read back, the target) so that its own earlier
pin is never mistaken for someone else's constraint. A mask is *external*
only when it is neither the process's unconstrained baseline (online CPUs
inside the cgroup cpuset) nor numapin's own: its record, the marker that
``numapin exec`` leaves in the environment, or the mask a forked child was
born with.
"""

from __future__ import annotations

import contextlib
import enum
import logging
import os
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple

from . import memory as _memory
from .cpuset import CpuSet, CpuSpec
from .errors import EnvironmentProblem, NumapinError, UsageError
from .facts import Facts, gather
from .gpus import select_gpu
from .host import resolve_root
from .launch import gpu_of_rank, local_rank
from .placement import Mode, Placement, parse_mode, place
from .threads import LinuxThreads, Outcome, ThreadKernel, errno_name, outcome_of

__all__ = [
    "MARKER_ENV",
    "Ownership",
    "PinError",
    "PinResult",
    "Policy",
    "Record",
    "ThreadResult",
    "classify",
    "current",
    "pin",
    "pin_thread",
    "pinned",
    "refresh",
]

log = logging.getLogger("numapin")

#: Set by ``numapin exec`` to the cpulist it applied before starting the program.
MARKER_ENV = "NUMAPIN_APPLIED"


class Policy(str, enum.Enum):
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


def parse_policy(policy: str | Policy) -> Policy:
    try:
        return Policy(policy)
    except ValueError:
        known = ", ".join(p.value for p in Policy)
        raise UsageError(f"unknown policy {policy!r} (policies: {known})") from None


class Ownership(str, enum.Enum):
    """Who set the process mask, as far as numapin can tell."""

    UNCONSTRAINED = "unconstrained"
    OWN = "numapin"
    EXTERNAL = "external"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class Record:
    """What numapin applied in this process."""

    pid: int
    mask: CpuSet
    target: CpuSet
    gpu: int | None = None
    source: str = "pin"


class ThreadResult(NamedTuple):
    """One thread's fate. An immutable record (a named tuple: pinning makes one per thread)."""

    tid: int
    outcome: Outcome
    before: CpuSet | None = None
    after: CpuSet | None = None
    error: str | None = None

    def __str__(self) -> str:
        text = f"{self.tid}: {self.outcome}"
        if self.error:
            text += f" ({self.error})"
        return text


@dataclass(frozen=True)
class PinResult:
    """The truthful outcome of one pin: the decision, the target and every thread's fate."""

    action: str
    target: CpuSet | None = None
    mask: CpuSet | None = None
    placement: Placement | None = None
    policy: str = "respect"
    ownership: str | None = None
    previous: CpuSet | None = None
    threads: tuple[ThreadResult, ...] = ()
    memory: _memory.MemoryResult | None = None
    message: str | None = None

    def count(self, outcome: Outcome) -> int:
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
        parts = [self.action]
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
        if self.message:
            parts.append(self.message)
        return "numapin: " + "; ".join(parts)


class PinError(NumapinError):
    """A strict pin failed; ``result`` tells what happened (changes were rolled back)."""

    def __init__(self, message: str, result: PinResult) -> None:
        super().__init__(message)
        self.result = result


# -- process-wide state ---------------------------------------------------


@dataclass
class _State:
    lock: threading.RLock = field(default_factory=threading.RLock)
    record: Record | None = None
    # Threads that pin_thread() placed: their mask, and the mask each had before.
    deliberate: dict[int, CpuSet] = field(default_factory=dict)
    before_deliberate: dict[int, CpuSet] = field(default_factory=dict)
    warned: set[tuple[str, int]] = field(default_factory=set)
    facts: dict[tuple[str, str | None, str | None], Facts] = field(default_factory=dict)


_state = _State()


def _after_fork_in_child() -> None:
    # The child is a new process: a fresh lock (the parent's may have been
    # held by another thread at fork time) and a record that says the mask it
    # was born with is numapin's, so it can re-pin for its own GPU quietly.
    global _state
    old = _state
    _state = _State()
    if old.record is not None:
        _state.record = replace(old.record, pid=os.getpid(), source="inherited")


os.register_at_fork(after_in_child=_after_fork_in_child)


def _own_masks(environ: Mapping[str, str]) -> list[CpuSet]:
    masks = []
    record = _state.record
    if record is not None and record.pid == os.getpid():
        masks.append(record.mask)
    marker = environ.get(MARKER_ENV)
    if marker:
        try:
            masks.append(CpuSet.parse(marker))
        except ValueError:
            log.debug("ignoring malformed %s=%r", MARKER_ENV, marker)
    return masks


def classify(mask: CpuSet, baseline: CpuSet, environ: Mapping[str, str] | None = None) -> Ownership:
    """Whether ``mask`` is the unconstrained baseline, numapin's own, or someone else's."""
    env = os.environ if environ is None else environ
    if mask >= baseline:
        return Ownership.UNCONSTRAINED
    if mask in _own_masks(env):
        return Ownership.OWN
    return Ownership.EXTERNAL


@dataclass(frozen=True)
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
    """Report numapin's record (or the exec marker) against the calling thread's live mask."""
    ops = kernel or LinuxThreads()
    me = ops.self_tid()
    live = ops.get_affinity(me)
    with _state.lock:
        record = _state.record if _state.record and _state.record.pid == os.getpid() else None
        if _state.deliberate.get(me) == live:
            # The caller sits on cores of its own (pin_thread): the process
            # mask is what the other threads carry.
            live = _process_mask(ops, me, live)
    marker_text = os.environ.get(MARKER_ENV)
    marker = None
    if marker_text:
        with contextlib.suppress(ValueError):
            marker = CpuSet.parse(marker_text)
    applied = record.mask if record is not None else marker
    return Current(record, live, applied == live, marker)


def _process_mask(ops: ThreadKernel, me: int, fallback: CpuSet) -> CpuSet:
    """The mask of the first thread that pin_thread() did not place, or ``fallback``."""
    with contextlib.suppress(OSError):
        for tid in ops.list_threads():
            if tid != me and tid not in _state.deliberate:
                with contextlib.suppress(OSError):
                    return ops.get_affinity(tid)
    return fallback


# -- the walk -------------------------------------------------------------


class _Walk:
    """Apply ``target`` to every thread, converging over threads born meanwhile."""

    def __init__(self, ops: ThreadKernel, target: CpuSet, movable: set[CpuSet], all_threads: bool) -> None:
        self.ops = ops
        self.target = target
        self.movable = movable
        self.all_threads = all_threads
        self.results: dict[int, ThreadResult] = {}

    def run(self, first: int) -> None:
        # The calling thread first: threads it creates from now on inherit the
        # target. Then passes over /proc/self/task until one finds nobody new,
        # so threads spawned meanwhile by not-yet-pinned threads are caught.
        # This loop runs once per thread: locals instead of attributes, masks
        # compared as integers, results built as plain tuples.
        get, put = self.ops.get_affinity, self.ops.set_affinity
        target, results = self.target, self.results
        target_bits = target.bits
        movable = frozenset(m.bits for m in self.movable)
        deliberate, force = _state.deliberate, self.all_threads
        new = tuple.__new__
        fresh = [first]
        while fresh:
            for tid in fresh:
                try:
                    before = get(tid)
                except OSError as exc:
                    results[tid] = ThreadResult(tid, outcome_of(exc), error=errno_name(exc))
                    continue
                bits = before.bits
                if bits == target_bits:
                    results[tid] = new(ThreadResult, (tid, Outcome.ALREADY, before, before, None))
                elif not force and (bits not in movable or (deliberate and deliberate.get(tid) == before)):
                    results[tid] = new(ThreadResult, (tid, Outcome.KEPT, before, before, None))
                else:
                    try:
                        put(tid, target)
                    except OSError as exc:
                        results[tid] = ThreadResult(tid, outcome_of(exc), before, error=errno_name(exc))
                        continue
                    results[tid] = new(ThreadResult, (tid, Outcome.PINNED, before, target, None))
            fresh = [tid for tid in self.ops.list_threads() if tid not in results]

    def move_caller(self, tid: int, before: CpuSet, cpus: CpuSet) -> None:
        """Give the calling thread a target of its own (the reserved cores) after the walk."""
        if before == cpus:
            self.results[tid] = ThreadResult(tid, Outcome.ALREADY, before, before)
            return
        self.ops.set_affinity(tid, cpus)
        self.results[tid] = ThreadResult(tid, Outcome.PINNED, before, cpus)

    def rollback(self) -> None:
        for result in self.results.values():
            if result.outcome is Outcome.PINNED and result.before is not None:
                with contextlib.suppress(OSError):
                    self.ops.set_affinity(result.tid, result.before)


def facts_for(root: str | os.PathLike[str] | None, env: Mapping[str, str]) -> Facts:
    """The machine's facts, read once per root and CUDA environment (see :func:`refresh`)."""
    key = (str(resolve_root(root)), env.get("CUDA_VISIBLE_DEVICES"), env.get("CUDA_DEVICE_ORDER"))
    with _state.lock:
        found = _state.facts.get(key)
        if found is None:
            found = _state.facts[key] = gather(root, env)
        return found


def refresh() -> None:
    """Forget the facts numapin read (after CPU hotplug or a change of the cgroup cpuset).

    Topology, GPUs and the cgroup are read on the first pin and kept: pinning
    is then as cheap as its syscalls. A forked child reads them afresh.
    """
    with _state.lock:
        _state.facts.clear()


def _warn_once(key: tuple[str, int], message: str) -> None:
    if key not in _state.warned:
        _state.warned.add(key)
        log.warning("%s", message)


def _fail(strict: bool, message: str, result: PinResult) -> PinResult:
    if strict:
        raise PinError(message, result)
    # Once per process and problem: a worker that pins in a loop (or a library
    # that calls pin() per request) must not repeat "no GPU" at every call.
    _warn_once((message, 0), f"numapin: {message}; the process keeps its mask")
    return result


def pin(
    gpu: int | None = None,
    *,
    cpus: CpuSpec | None = None,
    mode: str | Mode = "node",
    policy: str | Policy = "respect",
    all_threads: bool = False,
    strict: bool = False,
    reserve: int = 0,
    memory: str = "none",
    migrate: bool = False,
    root: str | os.PathLike[str] | None = None,
    environ: Mapping[str, str] | None = None,
    kernel: ThreadKernel | None = None,
) -> PinResult:
    """Pin every thread of this process (and optionally its memory) near GPU ``gpu``.

    ``gpu`` is CUDA's logical index (under ``CUDA_VISIBLE_DEVICES``); None means
    the launcher's local rank mapped to a GPU, or GPU 0. ``cpus`` pins to an
    explicit set instead. Pinning again for the same GPU changes nothing and
    warns about nothing; another GPU moves the pin. Threads with a mask that is
    neither the old process mask nor numapin's are kept unless ``all_threads``.
    With ``reserve=K`` the calling thread goes to the K reserved cores (see
    :func:`pin_thread`) and every other thread to the rest.

    Caller mistakes raise :class:`UsageError` before anything changes. Problems
    of the environment return a result saying nothing was pinned (after one
    warning), or raise :class:`PinError` when ``strict``.
    """
    env = os.environ if environ is None else environ
    chosen_policy = parse_policy(policy)
    if cpus is None:
        parse_mode(mode)
    memory_mode = _memory.parse_memory_mode(memory)
    if chosen_policy is Policy.OFF:
        return PinResult("off: nothing done", policy=chosen_policy.value)
    ops = kernel or LinuxThreads()
    with _state.lock:
        try:
            facts = facts_for(root, env)
            if cpus is None:
                index = gpu if gpu is not None else gpu_of_rank(local_rank(env), len(facts.visible), env)
                placement = place(facts.topology, facts.inventory, select_gpu(facts.visible, index),
                                  mode=mode, reserve=reserve)
            else:
                named = select_gpu(facts.visible, gpu) if gpu is not None else None
                placement = place(facts.topology, facts.inventory, named, cpus=cpus, reserve=reserve)
        except UsageError:
            raise
        except (EnvironmentProblem, OSError) as exc:
            return _fail(strict, str(exc), PinResult("nothing pinned", policy=chosen_policy.value, message=str(exc)))
        return _apply(ops, facts, placement, chosen_policy, all_threads, strict, memory_mode, migrate, env)


def _apply(
    ops: ThreadKernel,
    facts: Facts,
    placement: Placement,
    policy: Policy,
    all_threads: bool,
    strict: bool,
    memory_mode: str,
    migrate: bool,
    env: Mapping[str, str],
) -> PinResult:
    baseline = facts.topology.allowed
    me = ops.self_tid()
    try:
        previous = mine = ops.get_affinity(me)
    except OSError as exc:
        message = f"cannot read this thread's mask ({errno_name(exc)})"
        return _fail(strict, message, PinResult("nothing pinned", policy=policy.value, message=message))
    # A thread that pin_thread() placed deliberately does not carry the process
    # mask: that is numapin's record, or else the mask the thread had before.
    if me in _state.deliberate and _state.deliberate[me] == previous:
        previous = _state.record.mask if _state.record is not None else _state.before_deliberate.get(me, previous)
    ownership = classify(previous, baseline, env)
    wanted = placement.workers
    action = "pinned"
    if ownership is Ownership.EXTERNAL:
        if policy is Policy.RESPECT:
            wanted = placement.workers & previous
            action = f"pinned inside the external mask {previous}"
            if not wanted:
                message = (f"the process mask {previous} was set by someone else and does not meet the "
                           f"placement {placement.cpus}; left as it is (policy respect)")
                _warn_once(("respect", previous.bits), f"numapin: {message}")
                return PinResult("kept external mask", placement=placement, policy=policy.value,
                                 ownership=ownership.value, previous=previous, message=message)
        elif policy is Policy.RESET:
            wanted = baseline
            action = f"reset the external mask {previous} to the baseline"
        else:
            action = f"overrode the external mask {previous}"
    movable = {previous, baseline, *_own_masks(env)}
    walk = _Walk(ops, wanted, movable, all_threads)
    reserve_me = bool(placement.reserved) and policy is not Policy.RESET
    try:
        walk.run(me)
        if reserve_me:
            walk.move_caller(me, mine, placement.reserved)
    except OSError as exc:
        # Nothing may stay half-applied when the walk itself broke.
        walk.rollback()
        message = f"cannot list this process's threads ({errno_name(exc)}); changes rolled back"
        return _fail(strict, message, PinResult("nothing pinned", wanted, placement=placement,
                                                policy=policy.value, ownership=ownership.value,
                                                previous=previous, message=message))
    results = tuple(walk.results.values())
    failed = [r for r in results if r.outcome is Outcome.FAILED]
    result = PinResult(action, wanted, wanted, placement, policy.value, ownership.value, previous, results)
    if failed and strict:
        walk.rollback()
        raise PinError(f"{len(failed)} threads refused the mask {wanted} (changes rolled back): "
                       + ", ".join(str(r) for r in failed[:5]), replace(result, action="rolled back"))
    if not result.count(Outcome.PINNED) and not result.count(Outcome.ALREADY):
        return _fail(strict, f"no thread could be pinned to {wanted}", replace(result, action="nothing pinned"))
    result = replace(result, mask=_read_back(ops, results, wanted))
    if memory_mode != "none" or migrate:
        try:
            memory = _memory.place_memory(placement.mems, memory_mode, migrate, strict=strict)
        except NumapinError as exc:  # strict only: the CPU part goes back too
            walk.rollback()
            raise PinError(f"memory placement failed, CPU pin rolled back: {exc}",
                           replace(result, action="rolled back")) from exc
        result = replace(result, memory=memory)
    _state.record = Record(os.getpid(), result.mask or wanted, wanted, placement.gpu)
    if reserve_me:
        _state.deliberate[me] = placement.reserved
    if failed:
        log.warning("%s", result)
    elif result.changed:
        log.info("%s", result)
    else:
        log.debug("%s", result)
    return result


def _read_back(ops: ThreadKernel, results: tuple[ThreadResult, ...], wanted: CpuSet) -> CpuSet:
    """The mask the kernel reports for a thread the walk put on ``wanted`` (the record keeps what was applied).

    The calling thread may hold a mask of its own (reserved or deliberate
    cores), so it is not asked unless it, too, landed on ``wanted``.
    """
    for r in results:
        if r.after == wanted and r.outcome in (Outcome.PINNED, Outcome.ALREADY):
            with contextlib.suppress(OSError):
                return ops.get_affinity(r.tid)
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
    with _state.lock:
        facts = facts_for(root, os.environ)
        placement = place(facts.topology, facts.inventory, None, cpus=cpus)
        me = ops.self_tid()
        try:
            before = ops.get_affinity(me)
            ops.set_affinity(me, placement.cpus)
            after = ops.get_affinity(me)
        except OSError as exc:
            outcome = ThreadResult(me, outcome_of(exc), error=errno_name(exc))
            return _fail(strict, f"cannot pin thread {me} to {placement.cpus} ({errno_name(exc)})",
                         PinResult("nothing pinned", placement.cpus, placement=placement, threads=(outcome,)))
        if me not in _state.deliberate:
            _state.before_deliberate[me] = before
        _state.deliberate[me] = after
        return PinResult("pinned the calling thread", placement.cpus, after, placement,
                         threads=(ThreadResult(me, Outcome.PINNED, before, after),))


@contextlib.contextmanager
def pinned(gpu: int | None = None, **options: Any) -> Iterator[PinResult]:
    """:func:`pin` as a lease: on exit every thread gets its original mask back.

    Threads created during the lease get the original mask of the thread that
    took it; a thread whose mask someone else changed meanwhile keeps it. A
    memory policy the lease set on the calling thread is put back as it was.
    Leases nest.
    """
    ops: ThreadKernel = options.get("kernel") or LinuxThreads()
    policy_before = _policy_or_none() if options.get("memory", "none") != "none" else None
    with _state.lock:
        me = ops.self_tid()
        saved: dict[int, CpuSet] = {}
        for tid in ops.list_threads():
            with contextlib.suppress(OSError):
                saved[tid] = ops.get_affinity(tid)
        if me not in saved:
            saved[me] = ops.get_affinity(me)
        record, deliberate, before_deliberate = _state.record, dict(_state.deliberate), dict(_state.before_deliberate)
        result = pin(gpu, **options)
    try:
        yield result
    finally:
        with _state.lock:
            _restore(ops, me, saved, result)
            _state.record, _state.deliberate, _state.before_deliberate = record, deliberate, before_deliberate
            if policy_before is not None and result.memory is not None and result.memory.applied != "none":
                try:
                    _memory.set_mempolicy(*policy_before)
                except (NumapinError, OSError) as exc:
                    log.warning("numapin: could not restore the memory policy %s %s after the lease: %s",
                                policy_before[0].name, policy_before[1], exc)


def _policy_or_none() -> tuple[_memory.MemoryPolicy, CpuSet] | None:
    """The calling thread's memory policy, or None where it cannot be read (the lease then leaves it)."""
    try:
        return _memory.get_mempolicy()
    except (NumapinError, OSError):
        return None


def _restore(ops: ThreadKernel, me: int, saved: dict[int, CpuSet], result: PinResult) -> None:
    applied = {t.tid: t.after for t in result.threads if t.outcome in (Outcome.PINNED, Outcome.ALREADY)}
    lease_masks = {m for m in applied.values() if m is not None}
    with contextlib.suppress(OSError):
        for tid in ops.list_threads():
            try:
                now = ops.get_affinity(tid)
            except OSError:
                continue
            original = saved.get(tid, saved[me])
            # Only masks this lease applied are taken back; anything else was
            # someone's deliberate change made during the lease.
            if now in lease_masks and now != original:
                with contextlib.suppress(OSError):
                    ops.set_affinity(tid, original)
