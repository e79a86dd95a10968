"""The calling thread alone, on a GPU's node for a block: where the memory it allocates there lands.

A process-wide pin places every thread, and so the pages they touch, for one GPU. A process that drives GPUs on
two nodes (one process for all GPUs, a loader feeding several) cannot be pinned so; what it can do is make
each GPU's host buffers on that GPU's node::

    with numapin.allocating_for(gpu=1):
        staging = torch.empty(n, dtype=torch.uint8, pin_memory=True)

``cudaHostAlloc`` (PyTorch's pinned memory) faults its pages in inside the call, in the calling thread, under
that thread's CPUs and memory policy (``../shared/research/host-memory.md``: dynamo#13710, pytorch PR #197868;
the open kernel module's ``nv-vm.c`` allocates under the task's policy). So the block moves the calling thread
alone — its mask to the node's CPUs this process may use, its memory policy to the node where the kernel
allows it — and on exit puts both back exactly as they were. Other threads are never touched. Blocks nest;
each thread has its own. While inside, the thread is numapin's on purpose: a process-wide pin, a lease or the
keeper leaves it where the block put it.

Where the node has no CPU of this process's (a memory-only node: Grace's GPU memory, CXL), only the memory
policy can place the pages; where the policy is refused (a container's seccomp profile), only the CPUs can,
through the kernel's local policy. Where neither is possible the block changes nothing and says so, once.
"""

from __future__ import annotations

import os
import threading

from ..base.errors import UsageError
from ..base.frozen import frozen
from ..base.logger import log
from ..cpuset import CpuSet
from ..facts.machine import cached as cached_facts
from ..kernel.affinity import LinuxThreads
from . import memory as _memory
from .memory import MemoryMode, MemoryResult
from .state import state

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping

    from ..facts.machine import Facts

__all__ = ["Allocating", "Block", "allocating_for"]


@frozen
class Allocating:
    """What a block applied to its thread."""

    nodes: CpuSet
    """The memory nodes the block is for (the GPU's host-memory nodes, or the node named)."""
    cpus: CpuSet | None
    """The CPUs the thread runs on inside the block; None where its mask was left (no CPU of the node here)."""
    memory: MemoryResult | None
    """The memory policy set for the block (None: not asked, ``memory="none"``)."""
    notes: tuple[str, ...] = ()
    """What could not be done, in words."""

    @property
    def placed(self) -> bool:
        """Whether anything places the block's pages: the CPUs, or a memory policy in force."""
        return self.cpus is not None or (self.memory is not None and self.memory.applied is not MemoryMode.NONE)


@frozen
class _Frame:
    tid: int
    mask: CpuSet
    policy: tuple[_memory.KernelMemoryPolicy, CpuSet] | None
    deliberate: CpuSet | None
    """The thread's deliberate mask before the block (None: it had none)."""
    before_deliberate: CpuSet | None
    applied: Allocating


def allocating_for(gpu: int | None = None, *, node: int | None = None, memory: str | MemoryMode = "preferred",
                   root: str | os.PathLike[str] | None = None, environ: Mapping[str, str] | None = None) -> Block:
    """``with allocating_for(gpu=N)`` (or ``node=N``): the calling thread on that GPU's node for the block.

    ``gpu`` is CUDA's index in this process's view, as for :func:`numapin.pin`; ``node`` a NUMA node id.
    ``memory``: ``preferred`` (default: the node first, elsewhere when it is full), ``bind`` (the node only,
    stepping down to preferred where refused), ``none`` (the CPUs alone). A caller's mistake (both or neither
    of ``gpu`` and ``node``, a GPU or node that is not there, an unknown ``memory``) is a :class:`UsageError`
    before anything changes. The ``with`` value is the :class:`Allocating` applied. One block may be entered by
    several threads, each for itself.
    """
    return Block(gpu, node, memory, root, environ)


class Block:
    """:func:`allocating_for`'s context manager."""

    def __init__(self, gpu: int | None, node: int | None, memory: str | MemoryMode,
                 root: str | os.PathLike[str] | None, environ: Mapping[str, str] | None) -> None:
        if (gpu is None) == (node is None):
            raise UsageError("allocating_for() takes a GPU (gpu=N) or a node (node=N), one of the two",
                             value=(gpu, node))
        for name, value in (("gpu", gpu), ("node", node)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
                raise UsageError(f"allocating_for({name}={value!r}): a {name} is a number from 0", value=value)
        self.memory = _memory.parse_memory_mode(memory)
        self.env = os.environ if environ is None else environ
        self.root = root
        self.nodes, self.cpus = _target(cached_facts(root, self.env), gpu, node)
        self._frames = threading.local()

    def __enter__(self) -> Allocating:
        pins = state()
        tid = threading.get_native_id()
        mask = CpuSet(os.sched_getaffinity(0))  # 0: the calling thread
        policy = _policy_or_none() if self.memory is not MemoryMode.NONE else None
        notes: list[str] = []
        placed_cpus: CpuSet | None = None
        with pins.lock:
            before = pins.deliberate.get(tid), pins.before_deliberate.get(tid)
            if self.cpus:
                try:
                    os.sched_setaffinity(0, self.cpus)
                    placed_cpus = CpuSet(os.sched_getaffinity(0))
                    pins.mark_deliberate(LinuxThreads(), tid, placed_cpus, mask)
                except OSError as exc:
                    notes.append(f"the thread's CPUs left as they are: the kernel refused {self.cpus} ({exc})")
            else:
                notes.append(f"node(s) {self.nodes} have none of this process's CPUs: only a memory policy places "
                             "the pages")
        placed = None
        if self.memory is not MemoryMode.NONE:
            placed = _memory.place_memory(self.nodes, self.memory, False, strict=False, root=self.root)
            said = placed.said(None if placed_cpus is None else self.nodes)
            if said:
                notes.append(said)
        applied = Allocating(self.nodes, placed_cpus, placed, tuple(notes))
        if not applied.placed:
            pins.warn_once(f"allocating_for: nothing places the block's memory on node(s) {self.nodes}: "
                           + "; ".join(notes))
        elif notes:
            log.info("allocating_for: %s", "; ".join(notes))
        stack = getattr(self._frames, "stack", None)
        if stack is None:
            stack = self._frames.stack = []
        stack.append(_Frame(tid, mask, policy, before[0], before[1], applied))
        return applied

    def __exit__(self, *_: object) -> None:
        frame: _Frame = self._frames.stack.pop()
        pins = state()
        memory = frame.applied.memory
        if frame.policy is not None and memory is not None and memory.applied is not MemoryMode.NONE:
            try:
                _memory.set_mempolicy(*frame.policy, root=self.root)
            except Exception as exc:  # the kernel took the block's policy: giving the old one back may not fail
                log.warning("allocating_for: could not give the thread back its memory policy %s %s: %s",
                            frame.policy[0].name, frame.policy[1], exc)
        with pins.lock:
            if frame.applied.cpus is not None:
                try:
                    os.sched_setaffinity(0, frame.mask)
                except OSError as exc:
                    log.warning("allocating_for: could not give the thread back its CPUs %s: %s", frame.mask, exc)
            pins.restore_deliberate(frame.tid, frame.deliberate, frame.before_deliberate)


def _target(facts: Facts, gpu: int | None, node: int | None) -> tuple[CpuSet, CpuSet]:
    """The memory nodes and the CPUs (this process's, of those nodes) a block is for."""
    topology = facts.topology
    if gpu is not None:
        if gpu >= len(facts.visible):
            raise UsageError(f"allocating_for(gpu={gpu}): this process sees {len(facts.visible)} GPU(s)", value=gpu)
        found = facts.visible[gpu].gpu
        nodes = found.memory_nodes or (CpuSet([found.node]) if found.node is not None else CpuSet())
        if not nodes:
            raise UsageError(f"allocating_for(gpu={gpu}): the firmware gives GPU {gpu} ({found.pci}) no NUMA node; "
                             "name one with node=N", value=gpu)
    else:
        assert node is not None  # one of the two, checked by the caller
        known = _memory.MemoryNodes.of(topology).exist | CpuSet(n.id for n in topology.nodes)
        if node not in known:
            raise UsageError(f"allocating_for(node={node}): the nodes here are {known}", value=node)
        nodes = CpuSet([node])
    return nodes, topology.cpus_of_nodes(nodes) & topology.allowed


def _policy_or_none() -> tuple[_memory.KernelMemoryPolicy, CpuSet] | None:
    try:
        return _memory.get_mempolicy()
    except _memory.MemoryPolicyError:
        return None
