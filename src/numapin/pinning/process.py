"""Idempotent, ownership-aware pinning of every thread of the process; leases.

:func:`pin` reads the facts (:mod:`numapin.facts`), resolves the placement,
asks :func:`numapin.pinning.decision.decide` what to do with the process mask, carries
it out over every thread (:class:`numapin.pinning.walk.Walk`) and memory, and writes
numapin's record (:mod:`numapin.pinning.record`) last. The result says what
happened to each thread (:mod:`numapin.pinning.results`).
"""

from __future__ import annotations

import atexit
import os

from ..base.environment import LOCAL_RANK_VARIABLES
from ..base.errors import EnvironmentProblem, NumapinError, UsageError, errno_name
from ..base.frozen import frozen
from ..base.logger import log
from ..cpuset import CpuSet, CpuSpec
from ..facts.machine import Facts, rehearsal
from ..facts.machine import cached as cached_facts
from ..facts.machine import forget as forget_facts
from ..kernel.affinity import LinuxThreads, Outcome, ThreadKernel, outcome_of
from ..placement.modes import Placement, PlacementMode, explicit_cpus, parse_mode, resolve
from ..placement.ranks import local_rank
from . import memory as _memory
from . import record as records
from .decision import Decision, ExternalMaskPolicy, MaskOwner, PinAction, classify, decide, parse_policy
from .memory import MemoryMode, MemoryResult
from .record import Record
from .results import PinError, PinResult, ThreadResult
from .state import Applied, PinState, exec_marker, state
from .walk import LISTINGS, Walk

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = ["Constraint", "Current", "Options", "constraint", "current", "pin", "pin_decided", "pin_thread", "refresh"]


def refresh() -> None:
    """Forget the facts numapin read (after CPU hotplug or a change of the cgroup cpuset).

    Topology, GPUs and the cgroup are read on the first pin and kept: pinning
    is then as cheap as its syscalls. A forked child reads them afresh.
    """
    forget_facts()


@frozen
class Current:
    """What numapin applied in this process, and whether the live mask still matches it."""

    applied: Applied | None
    live: CpuSet
    matches: bool
    marker: CpuSet | None
    record: Record | None = None
    """This process's record on the host, when this process's own memory has none (``numapin exec``)."""

    def __str__(self) -> str:
        applied = self.applied.mask if self.applied is not None else self.record.mask if self.record is not None \
            else self.marker
        if applied is None:
            return f"numapin has not pinned this process; live mask {self.live}"
        state = "matches" if self.matches else "differs from"
        return f"numapin applied {applied}; live mask {self.live} {state} it"


def current(*, kernel: ThreadKernel | None = None) -> Current:
    """Report what numapin applied (or the exec marker) against the process's live mask."""
    ops = kernel or LinuxThreads()
    me = ops.self_tid()
    live = ops.get_affinity(me)
    pins = state()
    with pins.lock:
        applied = pins.live_applied()
        if pins.deliberate.get(me) == live:
            # The caller sits on cores of its own (pin_thread): the process
            # mask is what the other threads carry.
            live = _other_thread_mask(ops, me, pins.deliberate, live)
    marker = exec_marker(os.environ)
    # Before the marker: the process's record, which says how (exec at birth, the start-up hook) and for which GPU.
    found = records.lookup(os.getpid()) if applied is None else None
    mask = applied.mask if applied is not None else found.mask if found is not None else marker
    return Current(applied, live, mask == live, marker, found)


def _other_thread_mask(ops: ThreadKernel, me: int, deliberate: Mapping[int, CpuSet], fallback: CpuSet) -> CpuSet:
    """The mask of the first thread that was not placed on purpose, or ``fallback``."""
    try:
        threads = ops.list_threads()
    except OSError:
        return fallback
    for tid in threads:
        if tid != me and tid not in deliberate:
            try:
                return ops.get_affinity(tid)
            except OSError:
                continue
    return fallback


@frozen
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
    pins = state()
    with pins.lock:
        baseline = cached_facts(root, env).topology.allowed
        me = ops.self_tid()
        mask = pins.process_mask_of_caller(me, ops.get_affinity(me))
        return Constraint(classify(mask, baseline, pins.own_masks(env)), mask, baseline)


def _fail(strict: bool, message: str, result: PinResult, cause: BaseException | None = None) -> PinResult:
    """The result of a pin that could not be done: one warning, or in strict mode the error, its class kept.

    ``cause``, a numapin error, is raised itself with ``result`` attached; an
    OSError becomes the cause (``__cause__``) of a :class:`PinError`.
    """
    if strict:
        if isinstance(cause, NumapinError):
            cause.result = result  # type: ignore[attr-defined]
            raise cause
        raise PinError(message, result, errno=None if not isinstance(cause, OSError) else errno_name(cause.errno)) \
            from cause
    # Once per process and problem: a worker that pins in a loop (or a library
    # that calls pin() per request) must not repeat "no GPU" at every call.
    state().warn_once(f"{message}; the process keeps its mask")
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
    keep: bool | float = False,
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

    ``keep=True`` (or a period in seconds) keeps the placement while the process
    runs: a daemon thread notices when a cpuset change or someone else moves it and
    answers by ``policy`` (:func:`numapin.pinning.keeper.keep`).

    Caller mistakes raise :class:`UsageError` before anything changes. Problems
    of the environment return a result saying nothing was pinned (after one
    warning), or raise the error when ``strict`` (its own class, with the result attached).
    """
    period = None
    if keep is not False and keep is not None:
        from .keeper import DEFAULT_PERIOD, parse_period

        period = DEFAULT_PERIOD if keep is True else parse_period(keep, "pin(keep=...)")
    if placement is not None:
        if not isinstance(placement, Placement):
            raise UsageError(f"pin(placement=...) takes a Placement (numapin.plan(GPU) makes one), not "
                             f"{type(placement).__name__} {placement!r:.40}; for CPUs, pin(cpus=...)", value=placement)
        given = [name for name, value in (("gpu", gpu), ("cpus", cpus), ("mode", mode), ("reserve", reserve or None))
                 if value is not None]
        if given:
            raise UsageError(f"pin(placement=...) is the decision already made: leave out {', '.join(given)}",
                             value=given)
    # Each value parsed here, once: below, only typed values.
    chosen_mode = parse_mode(mode) if cpus is None and mode is not None else PlacementMode.NODE
    options = Options(parse_policy(policy), all_threads, strict, _memory.parse_memory_mode(memory), migrate,
                       os.environ if environ is None else environ, threadpools)
    return pin_decided(options, gpu=gpu, cpus=cpus, mode=chosen_mode, reserve=reserve, placement=placement,
                       root=root, kernel=kernel, period=period)


def pin_decided(options: Options, *, gpu: int | None = None, cpus: CpuSpec | None = None,
                mode: PlacementMode = PlacementMode.NODE, reserve: int = 0, placement: Placement | None = None,
                root: str | os.PathLike[str] | None = None, kernel: ThreadKernel | None = None,
                period: float | None = None, facts: Facts | None = None) -> PinResult:
    """:func:`pin` with every value parsed already (``options``: the policy, the memory mode...): the path of a
    request decided by :func:`numapin.pinning.request.prepare`, which hands the machine's facts it decided with."""
    env, chosen_policy, strict = options.environ, options.policy, options.strict
    if chosen_policy is ExternalMaskPolicy.OFF:
        return PinResult(PinAction.OFF, policy=chosen_policy)
    ops = kernel or LinuxThreads()
    pins = state()
    with pins.lock:
        try:
            facts = facts or cached_facts(root, env)
            for note in facts.notes:  # CUDA_VISIBLE_DEVICES cut short, NVML disagreeing...: said once a process
                pins.warn_once(note)
            if placement is None:
                placement = resolve(facts, env, gpu=gpu, cpus=cpus, mode=mode, reserve=reserve)
                if gpu is None and cpus is None and len(facts.visible) > 1 and local_rank(env) is None:
                    names = ", ".join(LOCAL_RANK_VARIABLES[:3])
                    pins.warn_once(f"no launcher variable gives this process a local rank ({names}...): GPU 0 of "
                                   f"the {len(facts.visible)} visible is assumed; name it with pin(gpu=N)")
            else:
                explicit_cpus(facts.topology, placement.cpus)  # a placement made elsewhere must fit here
            # A machine whose CPUs are not this host's (a synthetic one, through NUMAPIN_FSROOT or root=) is planned
            # and judged, never pinned by this kernel (a model kernel, handed in, acts on any machine); the host's
            # own CPUs are no one's external mask.
            why = None if kernel is not None else rehearsal(facts.topology, env)
            if why is not None:
                from .rehearsed import note as rehearsed

                kept = rehearsed(facts.topology.root, placement, pins.acting.how if pins.acting else "pin")
                why += f"; {kept}" if kept else ""
                raise EnvironmentProblem(why)
        except UsageError:
            raise
        except (EnvironmentProblem, OSError) as exc:
            return _fail(strict, str(exc), PinResult(PinAction.NOTHING, policy=chosen_policy, message=str(exc)), exc)
        result = _apply(pins, ops, facts, placement, options)
        if period is not None and result.mask is not None:
            from .keeper import keep as keep_placement

            keep_placement(period)
        return result


@frozen
class Options:
    """A pin's options, parsed: how it meets another's mask, every thread or numapin's, strict, its memory."""

    policy: ExternalMaskPolicy
    all_threads: bool
    strict: bool
    memory: MemoryMode
    migrate: bool
    environ: Mapping[str, str]
    threadpools: bool = False


def _apply(pins: PinState, ops: ThreadKernel, facts: Facts, placement: Placement, options: Options) -> PinResult:
    """Carry out :func:`decide`'s answer over every thread, then memory; record what was applied."""
    policy, strict = options.policy, options.strict
    baseline = facts.topology.allowed
    me = ops.self_tid()
    try:
        mine = ops.get_affinity(me)
    except OSError as exc:
        message = f"cannot read this thread's mask ({errno_name(exc.errno)})"
        return _fail(strict, message, PinResult(PinAction.NOTHING, policy=policy, message=message), exc)
    pins.forget_exited(ops)
    previous = pins.process_mask_of_caller(me, mine)
    own = pins.own_masks(options.environ)
    decision = decide(previous, baseline, own, policy, placement.workers)
    wanted, ownership = decision.target, decision.ownership
    if decision.action is PinAction.KEPT_EXTERNAL:
        message = (f"the process mask {previous} was set by someone else and does not meet the "
                   f"placement {placement.cpus}; left as it is (policy respect; policy override pins over it: "
                   "--policy override, NUMAPIN_POLICY=override)")
        kept = PinResult(PinAction.KEPT_EXTERNAL, placement=placement, policy=policy, ownership=ownership,
                         previous=previous, message=message)
        if options.strict:  # the pin asked for did not happen: strict says so instead of running on
            raise PinError(message, kept)
        pins.warn_once(message)
        return kept
    walk = Walk(ops, wanted, {previous, baseline, *own}, options.all_threads, pins.deliberate)
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


def _carry_out(pins: PinState, ops: ThreadKernel, walk: Walk, me: int, mine: CpuSet, previous: CpuSet,
               placement: Placement, decision: Decision, options: Options, facts: Facts) -> PinResult:
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
                                                ownership=ownership, previous=previous, message=message), exc)
    results = tuple(walk.results.values())
    counts = walk.counts()

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
    mask = _read_back(ops, results, wanted)
    try:
        placed = _place_memory(placement, options, facts)
    except NumapinError as exc:  # strict only: the CPU part goes back too, and the error keeps its class
        walk.rollback()
        exc.result = unapplied(PinAction.ROLLED_BACK, mask)  # type: ignore[attr-defined]
        raise
    pools = _resize_pools(pins, len(wanted)) if options.threadpools else ()
    # Built once, now that the mask read back, the memory placement and the pools are known.
    unsure = None
    if walk.unconfirmed:
        unsure = (f"the process kept creating threads for {LISTINGS} listings: {len(walk.unconfirmed)} "
                   f"threads found last are not confirmed on {wanted} (numapin threads --check tells)")
    result = PinResult(decision.action, wanted, mask, placement, policy, ownership, previous, results, placed,
                       unsure, counts=counts, threadpools=pools, unconfirmed=walk.unconfirmed)
    pins.applied = Applied(os.getpid(), result.mask or wanted, wanted, placement.gpu)
    walk.settled = True  # from here on the pin stands: an interruption below leaves it complete
    if reserve_me:
        pins.mark_deliberate(ops, me, placement.reserved, mine)
    _publish(pins, result, options)
    _say(pins, result, placed.said(facts.topology.nodes_of(result.mask or wanted)) if placed is not None else None,
         unsure)
    return result


def _place_memory(placement: Placement, options: Options, facts: Facts) -> MemoryResult | None:
    """The memory part of a pin, where one is asked (a policy, or pages moved); None where none is."""
    if options.memory is MemoryMode.NONE and not options.migrate:
        return None
    return _memory.place_memory(placement.mems, options.memory, options.migrate, strict=options.strict,
                                limits=_memory.MemoryNodes.of(facts.topology))


def _resize_pools(pins: PinState, size: int) -> tuple[str, ...]:
    """The thread pools already loaded, resized to the placement (``threadpools=True``): their names."""
    # Imported here: most pins leave pools alone, and every worker pinned at start-up pays for a module.
    from ..kernel.threadpools import ThreadpoolsUnavailable
    from ..kernel.threadpools import resize as resize_pools

    try:
        return resize_pools(size)
    except ThreadpoolsUnavailable as exc:
        pins.warn_once(f"{exc}; thread pools left as they are")
        return ()


def _say(pins: PinState, result: PinResult, memory: str | None, unsure: str | None) -> None:
    """What the pin did, said once at the level it deserves: what its memory left elsewhere, threads not
    confirmed, threads that refused, or the pin itself."""
    if memory:
        pins.warn_once(memory)
    if unsure:
        log.warning("%s", unsure)
    if result.count(Outcome.FAILED):
        log.warning("%s", result.said)
    elif result.changed:
        log.info("%s", result.said)
    else:
        log.debug("%s", result.said)


def _publish(pins: PinState, result: PinResult, options: Options) -> None:
    """Write the pin to the process's record, for numapin's tools outside this process (when it differs)."""
    placement = result.placement
    start = pins.start
    if placement is None or result.mask is None or start is None:
        return
    how = pins.acting.how if pins.acting is not None else "pin"
    memory = None if result.memory is None else result.memory.applied
    record = records.Record(os.getpid(), start, how, result.mask, result.target or placement.workers, placement,
                            memory, options.policy, pins.acting.pools if pins.acting is not None else (),
                            memory_refused=None if result.memory is None else result.memory.refused)
    if record.same_pin(pins.published):
        return
    if records.publish(records.stamp(record), pins.ready_folders) is not None:
        if pins.published is None:
            atexit.register(_withdraw_at_exit)
        pins.published = record


def _withdraw_at_exit() -> None:
    pins = state()
    if pins.published is not None and pins.published.pid == os.getpid():
        records.withdraw()


def _read_back(ops: ThreadKernel, results: tuple[ThreadResult, ...], wanted: CpuSet) -> CpuSet:
    """The mask the kernel reports for a thread the walk put on ``wanted`` (the record keeps what was applied).

    The calling thread may hold a mask of its own (reserved or deliberate
    cores), so it is not asked unless it, too, landed on ``wanted``.
    """
    for result in results:
        if result.after == wanted and result.outcome in (Outcome.PINNED, Outcome.ALREADY):
            try:
                return ops.get_affinity(result.tid)
            except OSError:
                continue
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
    pins = state()
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
                         PinResult(PinAction.NOTHING, placement.cpus, placement=placement, threads=(outcome,)), exc)
        pins.mark_deliberate(ops, me, after, before)
        return PinResult(PinAction.PINNED_CALLER, placement.cpus, after, placement,
                         threads=(ThreadResult(me, Outcome.PINNED, before, after),))
