"""Leases: a pin that gives every thread its mask back when it ends.

:func:`pinned` is :func:`hold`, a :func:`numapin.pin`, and :func:`give_back`;
the TensorRT-LLM function holds its pins across calls with the two halves.
"""

from __future__ import annotations

import contextlib
import os

from ..base.errors import NumapinError, UsageError
from ..base.frozen import frozen
from ..base.logger import log
from ..cpuset import CpuSet, CpuSpec
from ..facts.machine import cached as cached_facts
from ..kernel.affinity import LinuxThreads, Outcome, ThreadKernel
from ..placement.modes import Placement, PlacementMode
from . import memory as _memory
from . import record
from .decision import ExternalMaskPolicy
from .memory import MemoryMode
from .process import pin
from .results import PinResult
from .state import PinState, Saved, acting, state
from .walk import finish

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping
    from typing import Any

__all__ = ["Held", "give_back", "hold", "pinned"]


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
    keep: bool | float = False,
) -> Iterator[PinResult]:
    """:func:`pin` as a lease (the same parameters): on exit every thread gets its original mask back.

    Threads created during the lease get the original mask of the thread that
    took it; a thread whose mask someone else changed meanwhile keeps it. A
    memory policy the lease set on the calling thread is put back as it was.
    Whatever numapin applied inside the lease (a :func:`pin` or
    :func:`pin_thread` there) is part of it: taken back on exit, with the
    record as it was before the lease.

    A keeper the lease started (``keep``) stops on exit; one that ran before it,
    and was not replaced inside the lease, runs on and keeps the placement as it is again.

    Leases nest within one thread. A lease taken while another thread holds
    one is a :class:`UsageError`, raised before anything changes: two restores
    that each undo half of the other's work would leave no defined state.
    """
    ops: ThreadKernel = kernel or LinuxThreads()
    pins = state()
    with pins.lock:
        me = ops.self_tid()
        others = [tid for tid in pins.lease_holders if tid != me]
        if others:
            raise UsageError(f"thread {others[0]} holds a numapin lease: leases nest within one thread "
                             "but may not overlap across threads", value=others[0])
        held = hold(kernel=ops, memory=memory, root=root, environ=environ)
        with acting("lease"):
            result = pin(gpu, cpus=cpus, mode=mode, policy=policy, all_threads=all_threads, strict=strict,
                         reserve=reserve, memory=memory, migrate=migrate, root=root, environ=environ, kernel=ops,
                         threadpools=threadpools, placement=placement, keep=keep)
        pins.lease_holders.append(me)
    try:
        yield result
    finally:
        pins = state()  # a child forked inside the lease leaves it with its own state
        with pins.lock:
            if pins.lease_holders:
                pins.lease_holders.pop()
            give_back(held, result)


@frozen
class Held:
    """What a lease gives back: every thread's mask, numapin's state and the memory policy, as before it."""

    ops: ThreadKernel
    me: int
    masks: Mapping[int, CpuSet]
    remembered: Saved
    policy_before: tuple[_memory.KernelMemoryPolicy, CpuSet] | None
    root: str | os.PathLike[str] | None = None
    environ: Mapping[str, str] | None = None
    keeper: Any = None
    """The keeper running when the lease began (numapin.pinning.keeper), if any."""


def hold(*, kernel: ThreadKernel | None = None, memory: str | MemoryMode = "none",
         root: str | os.PathLike[str] | None = None, environ: Mapping[str, str] | None = None) -> Held:
    """Remember what :func:`give_back` will restore: the start of a lease (``pinned()``, or a pin that
    the TensorRT-LLM function holds until its release). ``memory``: the memory policy too, when a pin
    inside will set one."""
    ops: ThreadKernel = kernel or LinuxThreads()
    policy_before = _policy_or_none() if _memory.parse_memory_mode(memory) is not MemoryMode.NONE else None
    pins = state()
    with pins.lock:
        me = ops.self_tid()
        masks: dict[int, CpuSet] = {}
        for tid in ops.list_threads():
            with contextlib.suppress(OSError):
                masks[tid] = ops.get_affinity(tid)
        if me not in masks:
            masks[me] = ops.get_affinity(me)
        return Held(ops, me, masks, pins.saved(), policy_before, root, environ, pins.keeper)


def give_back(held: Held, result: PinResult) -> None:
    """The end of a lease: every thread numapin moved since ``held`` (``result`` and whatever numapin applied
    after it) gets its mask back, what numapin applied and the process's record are as before, and the memory
    policy too."""
    pins = state()
    with pins.lock:
        if pins.keeper is not None and pins.keeper is not held.keeper:
            from .keeper import stop_keeping

            stop_keeping()  # before the masks go back: it would take their return for drift
        _restore(held.ops, held.me, dict(held.masks), result, pins.applied_since(held.remembered))
        published = pins.published
        pins.restore(held.remembered)
        if pins.published is not published:
            _republish(pins)
        if held.policy_before is not None and result.memory is not None \
                and result.memory.applied is not MemoryMode.NONE:
            try:
                facts = cached_facts(held.root, os.environ if held.environ is None else held.environ)
                _memory.set_mempolicy(*held.policy_before, limits=_memory.MemoryNodes.of(facts.topology))
            except (NumapinError, OSError) as exc:
                log.warning("could not restore the memory policy %s %s after the lease: %s",
                            held.policy_before[0].name, held.policy_before[1], exc)


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

    finish(tids, put_back)  # runs to the end even when interrupted


def _republish(pins: PinState) -> None:
    """After a lease: the process's record says again what was restored."""
    if pins.published is None:
        record.withdraw()
    else:
        record.publish(record.stamp(pins.published), pins.ready_folders)

