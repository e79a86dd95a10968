"""The one judge of a process: where should it be, and is it there?

``numapin threads``, ``numapin ps`` and ``numapin doctor --pid`` all ask
:func:`judge`, so they cannot disagree. What the process should have comes from
the first of these that applies, and the judgement says which (its ``basis``):

1. the caller's own question: a GPU by its index *in the process's own view*
   (its ``CUDA_VISIBLE_DEVICES``), or explicit CPUs;
2. numapin's record of the process: the decision as it was applied, whole
   (mode, GPU, reserved cores, kind of cores, the CPUs it was narrowed to), never
   decided again;
3. the ``numapin exec`` marker in its environment (the CPUs exec applied), when
   no record could be written;
4. its launcher's local rank, or its one visible GPU, in its own view: what
   ``numapin exec`` would decide for it;
5. the one GPU it has open (``/dev/nvidiaN``, an AMD GPU's render node), or NVML lists it on.

A process is ``misplaced`` when a thread runs outside those CPUs, or (when the
caller sets a bound) too much of its own memory lies outside their nodes.
"""

from __future__ import annotations

import os

from ..base import pinners
from ..base.errors import AccessDenied, NumapinError, ProcessError
from ..base.frozen import frozen, replace
from ..base.text import counted, format_size
from ..cpuset import CpuSet
from ..facts.machine import Facts, cached, seen_by, this_host_cpus, this_host_nodes
from ..kernel.residency import KINDS, Residency
from ..pinning.declaration import Declaration, Declared, unbalanced
from ..pinning.record import Record
from ..pinning.state import exec_marker, state
from ..placement.modes import Placement, PlacementMode, resolve
from ..placement.ranks import LocalRank, local_rank
from .verdict import JUDGED_MEMORY, REMOTE_BOUND, SHARED_NOTED, Verdict, verdict_words
from .view import ProcessView

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Collection, Container, Mapping
    from typing import Any

__all__ = ["JUDGED_MEMORY", "REMOTE_BOUND", "Expected", "HostMemory", "Judgement", "ThreadState", "Verdict",
           "VerifiedBuffer", "expected", "judge", "placed_by", "verdict_words"]


@frozen
class Expected:
    """Where a process should be, and what says so."""

    placement: Placement
    target: CpuSet
    """The CPUs every thread must lie within (a record's target; else the placement's workers)."""
    basis: str
    """What says so, in words: ``numapin's record (exec)``, ``GPU 1 in its view, as asked``..."""
    record: Record | None = None

    @property
    def mems(self) -> CpuSet:
        return self.placement.mems


@frozen
class ThreadState:
    """One thread of the judged process."""

    tid: int
    name: str | None
    cpus: CpuSet | None
    """None when it exited while being read."""
    last_cpu: int | None
    inside: bool | None
    """None when there is nothing to judge it by."""
    numapin: bool
    """Whether its mask is one numapin applied (the record's, the exec marker's, a deliberate one)."""
    narrowed: bool = False
    """Whether its mask is a slice inside the placement, smaller than it (a framework's own): inside all the same."""
    pinner: str | None = None
    """The library that set it, where :data:`numapin.base.pinners.PINNERS` knows it (a key of the table)."""

    @property
    def who(self) -> str:
        """Who set its mask, in words (``-``: nobody known)."""
        if self.pinner is not None:
            return pinners.PINNERS[self.pinner].library
        return "numapin" if self.numapin else "-"

    def as_dict(self) -> dict[str, Any]:
        return {"tid": self.tid, "name": self.name, "cpus": None if self.cpus is None else str(self.cpus),
                "last_cpu": self.last_cpu, "inside": self.inside, "numapin": self.numapin, "narrowed": self.narrowed,
                "pinner": None if self.pinner is None else pinners.PINNERS[self.pinner].library}


@frozen
class VerifiedBuffer:
    """A declared host buffer, verified: where its pages are (bytes by node, from ``numa_maps``), whether most lie
    on the node(s) it was made for, and, for a spread, each node that lost its balance in words."""

    declared: Declared
    on_nodes: dict[int, int]
    on_its_node: bool
    unbalanced: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        return {**self.declared.as_dict(), "on_nodes": {str(n): b for n, b in self.on_nodes.items()},
                "on_its_node": self.on_its_node} | ({"unbalanced": list(self.unbalanced)} if self.declared.spread
                                                   else {})


@frozen
class HostMemory:
    """A process's host memory as the judge found it: bytes per node by kind of mapping, its declared buffers
    verified, and what lies away from its GPU in words. Node ids are ints here; :meth:`as_dict` writes them as
    JSON keys."""

    by_kind: dict[str, dict[int, int]]
    buffers: tuple[VerifiedBuffer, ...] = ()
    shared_elsewhere: str | None = None
    buffers_elsewhere: tuple[str, ...] = ()

    @property
    def elsewhere(self) -> bool:
        """Whether anything of it lies away from its GPU's node(s) (shared memory, or a buffer)."""
        return bool(self.shared_elsewhere or self.buffers_elsewhere)

    def as_dict(self) -> dict[str, Any]:
        """As ``threads --json`` and ``ps --json`` give it (``host_memory``)."""
        return {"by_kind": {kind: {str(n): b for n, b in sorted(self.by_kind.get(kind, {}).items())}
                            for kind in KINDS},
                "buffers": [b.as_dict() for b in self.buffers], "shared_elsewhere": self.shared_elsewhere,
                "buffers_elsewhere": list(self.buffers_elsewhere)}


@frozen
class Judgement:
    """One process judged: the verdict, and everything it rests on."""

    pid: int
    name: str
    verdict: Verdict
    expected: Expected | None
    threads: tuple[ThreadState, ...]
    placed_by: str
    memory: Residency | None = None
    """Where its pages live; None when not read (another user's process, or not asked)."""
    note: str | None = None
    """Why there is no verdict, or what had to be assumed."""
    marker: CpuSet | None = None
    max_remote: float | None = None
    """The bound on :meth:`remote_share` the verdict used (0..1), None when memory was not judged."""
    buffers: tuple[Declared, ...] = ()
    """The host buffers it declared (:func:`numapin.host_buffer`), verified against :attr:`memory`."""
    unjudged: str | None = None
    """Why its memory was not judged (``under 32 MiB of its own memory``...); None where it was, or was not read."""
    unlisted: tuple[int, int] = (0, 0)
    """How many more buffers it declared than its declaration lists one by one, and their bytes."""
    crowd: tuple[tuple[str, tuple[tuple[str, str], ...]], ...] = ()
    """Each library of :data:`numapin.base.pinners.PINNERS` that set some of its threads' masks, with its variables
    that the process's environment holds at another value than the one that makes them inherit."""

    @property
    def outside(self) -> tuple[ThreadState, ...]:
        return tuple(t for t in self.threads if t.inside is False)

    @property
    def misplaced_by(self) -> tuple[str, ...]:
        """What makes it misplaced: ``threads`` (one outside the target), ``memory`` (more of its own memory on
        other nodes than the bound allows); empty when it is not (a rehearsal's process, pinned nowhere, never is)."""
        if self.verdict is Verdict.REHEARSAL:
            return ()
        share = self.remote_share()
        return tuple(why for why, found in (
            ("threads", bool(self.outside)),
            ("memory", self.max_remote is not None and share is not None and share > self.max_remote)) if found)

    @property
    def verdict_words(self) -> str:
        return verdict_words(self.verdict, self.misplaced_by)

    def shared_elsewhere(self) -> tuple[int, CpuSet] | None:
        """Its shared memory (where ``cudaHostAlloc`` puts pinned buffers) lying mostly off the expected nodes:
        the bytes off them and the nodes they are on; None where it is not (or under :data:`SHARED_NOTED`)."""
        if self.expected is None or self.memory is None:
            return None
        shared = self.memory.by_kind.get("shmem", {})
        off = {n: b for n, b in shared.items() if n not in self.expected.mems}
        total, away = sum(shared.values()), sum(off.values())
        return (away, CpuSet(off)) if away >= SHARED_NOTED and 2 * away > total else None

    def shared_words(self) -> str | None:
        """:meth:`shared_elsewhere` in words, or None."""
        found = self.shared_elsewhere()
        if found is None or self.expected is None:
            return None
        away, nodes = found
        return (f"{format_size(away)} of its shared memory lies on node(s) {nodes}, off its GPU's node(s) "
                f"{self.expected.mems}: likely pinned buffers (cudaHostAlloc makes shared memory) made before its "
                "placement or by a thread elsewhere")

    def verified_buffers(self) -> tuple[VerifiedBuffer, ...]:
        """Each declared buffer with where its pages are (from ``numa_maps``) and whether most of them lie on the
        node(s) it was made for."""
        found = []
        for buffer in self.buffers:
            on = {} if self.memory is None else self.memory.in_ranges.get(buffer.address, {})
            there = sum(b for n, b in on.items() if n in buffer.nodes)
            found.append(VerifiedBuffer(buffer, {n: b for n, b in sorted(on.items()) if b},
                                        2 * there > sum(on.values()),
                                        tuple(unbalanced(on, buffer.nodes)) if buffer.spread else ()))
        return tuple(found)

    def buffer_words(self) -> list[str]:
        """The declared buffers lying mostly off the node(s) they were made for, or made for other nodes than the
        process's GPU's, in words (what it likely is, what fixes it)."""
        said = []
        for seen in self.verified_buffers():
            buffer = seen.declared
            what = f"host buffer at {buffer.address:#x} ({format_size(buffer.nbytes)}, made for node(s) {buffer.nodes})"
            on = CpuSet(seen.on_nodes)
            if not on:
                said.append(f"{what}: none of its pages is resident (closed or swapped out since it was declared)")
            elif not seen.on_its_node:
                said.append(f"{what} lies mostly on node(s) {on - buffer.nodes}: its node(s) ran out of free memory "
                            "(numapin buffer --node N sizes what fits)")
            elif buffer.spread:
                # Spread on purpose: judged by its own nodes, never "elsewhere" for what was asked; only its balance.
                said.extend(f"{what}: {words}" for words in seen.unbalanced)
                if self.expected is not None and not buffer.nodes & self.expected.mems:
                    said.append(f"{what} is spread off its GPU's node(s) {self.expected.mems}")
            elif self.expected is not None and not buffer.nodes <= self.expected.mems:
                said.append(f"{what} lies off its GPU's node(s) {self.expected.mems}: right for a GPU on node(s) "
                            f"{buffer.nodes}; for its own GPU, numapin.host_buffer(nbytes, gpu=N)")
        more, nbytes = self.unlisted
        if more:
            said.append(f"{counted(more, 'more host buffer')} ({format_size(nbytes)}) declared and not listed one by "
                        f"one (a declaration lists the first {len(self.buffers)}): not verified")
        return said

    def host_memory(self) -> HostMemory | None:
        """Its resident memory per node by kind, its declared buffers verified, and what lies away from its GPU in
        words (:meth:`shared_words`, :meth:`buffer_words`); None where its memory was not read."""
        if self.memory is None:
            return None
        return HostMemory(self.memory.by_kind, self.verified_buffers(), self.shared_words(),
                          tuple(self.buffer_words()))

    def remote_share(self) -> float | None:
        """The share (0..1) of the process's own memory outside the expected nodes; None when unread. A buffer
        spread on purpose over nodes that include the expected ones counts as placed where its pages lie on its own
        nodes: those pages are where they were asked to be."""
        if self.expected is None or self.memory is None:
            return None
        own = sum(self.memory.own_bytes.values())
        if not own:
            return 0.0
        asked = sum(b for buffer in self.buffers if buffer.spread and buffer.nodes & self.expected.mems
                    for n, b in self.memory.in_ranges.get(buffer.address, {}).items()
                    if n in buffer.nodes and n not in self.expected.mems)
        return max(0, self.memory.outside(self.expected.mems, own=True) - asked) / own


def gpu_words(placement: Placement) -> str | None:
    """``GPU 0 in its view (0000:1a:00.0)``: an index means nothing without the view it is in."""
    if placement.gpu is None:
        return None
    seen = f"GPU {placement.gpu} in its view"
    return f"{seen} ({placement.where})" if placement.pci else seen


def expected(
    facts: Facts,
    environ: Mapping[str, str],
    *,
    record: Record | None = None,
    gpu: int | None = None,
    cpus: CpuSet | None = None,
    mode: PlacementMode | None = None,
    rank: LocalRank | None = None,
    reserve: int = 0,
    devices: Collection[str] = (),
) -> tuple[Expected | None, str | None]:
    """Where a process with this environment (its own view in ``facts``) and record should be, and what says
    so; or None and why nothing does. ``devices`` are the GPUs it has open, by :attr:`Gpu.where` (the PCI
    address, and the partition where the GPU is one).

    Raises :class:`UsageError` when the caller's own question (``gpu``, ``rank``, ``cpus``, ``mode``,
    ``reserve``) cannot be answered.
    """
    if gpu is not None or cpus is not None or mode is not None or rank is not None or reserve:
        if gpu is None and cpus is None and rank is None and record is not None:
            gpu = record.placement.gpu  # another mode for the GPU numapin placed it for
        asked = resolve(facts, environ, gpu=gpu, cpus=cpus, rank=rank, mode=mode or PlacementMode.NODE,
                        reserve=reserve)
        what = (f"CPUs {cpus}" if cpus is not None else f"{rank}: {gpu_words(asked)}" if rank is not None
                else gpu_words(asked) or "its local rank's GPU")
        return Expected(asked, asked.workers, f"{what}, as asked" + (f", mode {mode}" if mode else "")), None
    if record is not None:
        basis = f"numapin's record ({record.how}: {gpu_words(record.placement) or record.placement.reason}, " \
                f"mode {record.placement.mode})"
        return Expected(record.placement, record.target, basis, record), None
    marker = exec_marker(environ)
    if marker is not None:
        placement = Placement(marker, facts.topology.nodes_of(marker), "the CPUs numapin exec applied",
                              PlacementMode.EXPLICIT)
        return Expected(placement, marker, "numapin exec's marker (no record of numapin's)"), None
    try:
        rank = local_rank(environ)
        if rank is not None or len(facts.visible) == 1:
            placement = resolve(facts, environ, rank=rank)
            said = str(rank) if rank is not None else "its one visible GPU"
            return Expected(placement, placement.workers, f"{said} (no record of numapin's)"), None
        if len(set(devices)) == 1:
            where = next(iter(devices))
            index = next((v.index for v in facts.visible if v.gpu.where == where), None)
            if index is not None:
                placement = resolve(facts, environ, gpu=index)
                return Expected(placement, placement.workers, f"the one GPU it uses, {gpu_words(placement)}"), None
    except NumapinError as exc:
        return None, str(exc)
    return None, "no record, no local rank, and not one GPU of its own: nothing says which GPU it drives"


def placed_by(process: ProcessView, record: Record | None, environ: Mapping[str, str], mask: CpuSet | None,
              baseline: CpuSet) -> str:
    """Who put the process where it runs (its main thread's mask is the process's): its ancestors' views are of
    the same scan, so a scan of many workers under one launcher reads the launcher once."""
    if record is not None:
        return record.how if mask == record.mask else f"{record.how}, since moved by someone else"
    marker = exec_marker(environ)
    if marker is not None and mask == marker:
        return "exec"
    parent, depth = process.parent(), 0
    while parent is not None and depth < 8:  # a data loader, a compile worker: forked by a worker numapin placed
        above = parent.record()
        if above is not None and mask == above.mask:
            return f"inherited from {parent.pid} ({above.how})"
        parent, depth = parent.parent(), depth + 1
    if mask is None or mask == baseline:
        return "nobody"
    return "someone else"


def _pinner(name: str | None, mask: CpuSet | None, inside: bool | None, environ: Mapping[str, str],
            vendor: str | None, narrowed: bool = False) -> str | None:
    """The library of :data:`numapin.base.pinners.PINNERS` that set a thread's mask, where the table knows it: by
    the thread's name; a slice by the library that slices where its variable is on (TensorRT-LLM's executor loop);
    or, for ROCr's unnamed helpers on an AMD GPU's worker, by their mask of every CPU while the variable that makes
    them inherit is not 0."""
    found = pinners.named(name, dict(environ), narrowed=narrowed)
    rocr = pinners.PINNERS["rocr"]
    if found is None and vendor == rocr.vendor and inside is False and mask is not None and \
            pinners.unheeded("rocr", dict(environ)) and mask >= this_host_cpus():
        return "rocr"
    return found


def on_nic_node(mask: CpuSet, environ: Mapping[str, str], facts: Facts, pci: str | None) -> str | None:
    """The library of :data:`numapin.base.pinners.PINNERS` whose threads belong on the NIC's node (UCCL's proxies,
    NIXL's), in a process whose environment shows it, where ``mask`` lies on the CPUs of the NICs nearest the GPU at
    ``pci``: a thread that library put where it belongs, judged by its row. None for any other thread."""
    rows = [key for key, row in pinners.PINNERS.items() if row.belongs == "nic" and row.shown(environ)]
    if not rows or not pci:
        return None
    near = CpuSet.union([nic.cpus for nic in facts.network().nearest(pci)])
    return rows[0] if near and mask <= near else None


def judge(
    process: ProcessView | int,
    *,
    root: str | os.PathLike[str] | None = None,
    gpu: int | None = None,
    cpus: CpuSet | None = None,
    mode: PlacementMode | None = None,
    rank: LocalRank | None = None,
    reserve: int = 0,
    environ: Mapping[str, str] | None = None,
    devices: Collection[str] = (),
    memory: bool = True,
    max_remote: float | None = REMOTE_BOUND,
    small_memory: bool = True,
    facts: Facts | None = None,
    declarations: Container[str] | None = None,
) -> Judgement:
    """Judge a process, by its view or its pid: where it should be (see the module's list), where each thread is,
    the verdict. Everything of the process is read through its :class:`~numapin.observe.view.ProcessView` (a
    scan's, where the caller has one: ``ps``), each file once: its record, its ancestors' (to say a child inherited
    its pin), its threads, memory and declarations.

    ``gpu`` is an index in the process's own view; ``rank`` a local rank, its GPU in that view; ``mode`` and
    ``reserve`` as for ``numapin exec``. ``environ``: the environment to judge it by, where the caller has it
    (else its view's). ``max_remote`` (0..1, default :data:`REMOTE_BOUND`; None: memory not judged) bounds the share
    of its own memory outside the expected nodes. ``small_memory`` False leaves unread where the memory of a
    process too small to be judged by it lies (``ps``, judging every worker of the host, has no use for it;
    ``threads`` shows it). ``facts``: the machine as the process sees it (:func:`numapin.facts.machine.seen_by`),
    when the caller has it; else read (cached) under ``root`` and cut to the GPUs the process's root holds.
    ``declarations``: the host-buffer declarations in this namespace's folders
    (:func:`numapin.pinning.declaration.present`), where the caller listed them for many processes.
    Raises :class:`NoSuchProcess` for a process that is gone or exited,
    :class:`UsageError` for a question that cannot be answered.
    """
    view = process if isinstance(process, ProcessView) else ProcessView(process)
    pid, stat = view.pid, view.alive()
    found = view.record()
    unreadable = False
    if environ is None:
        try:
            environ = os.environ if pid == os.getpid() else view.environ()
        except AccessDenied:
            environ, unreadable = {}, True
    if facts is None:
        facts = seen_by(cached(root, environ), view.foreign_root(), environ)  # a container's: the GPUs it was given
    live = facts.topology.live  # this host: no other CPUs or nodes to leave out
    # A process a rehearsal started under the machine read (not this host): judged by what was decided for it there.
    rehearsed = None if live else view.rehearsal(str(facts.topology.root))
    want, note = expected(facts, environ, record=found, gpu=gpu, cpus=cpus, mode=mode, rank=rank, reserve=reserve,
                          devices=devices)
    if rehearsed is not None and gpu is None and cpus is None and mode is None and rank is None and not reserve:
        p = rehearsed.placement
        want, note = Expected(p, p.workers, f"the rehearsal's decision ({rehearsed.how}: {gpu_words(p) or p.reason}, "
                                            f"mode {p.mode}), pinned nowhere"), None
    marker = exec_marker(environ)
    own = state().thread_masks() if pid == os.getpid() else set()
    own |= {m for m in (marker, None if found is None else found.mask) if m is not None}
    threads = _threads(view, want, own, environ, facts)
    crowd = tuple((key, tuple(pinners.unheeded(key, dict(environ))))
                  for key in dict.fromkeys(t.pinner for t in threads if t.pinner is not None))
    pages, size, hidden, declaration = _memory(view, declarations, small_memory or max_remote is None) \
        if memory else (None, None, False, Declaration())
    buffers, unlisted = declaration.buffers, (declaration.more, declaration.more_bytes)
    main = next((t.cpus for t in threads if t.tid == pid), None)
    # An unplaced process runs on every CPU it may: of the machine judged by, those this host has (a rehearsal
    # machine's other CPUs exist nowhere, and no process was kept from them).
    baseline = facts.topology.allowed if live else facts.topology.allowed & this_host_cpus()
    who = placed_by(view, found, environ, main, baseline)
    if want is None:
        verdict = Verdict.UNREADABLE if unreadable else Verdict.UNKNOWN
        if unreadable:
            note = ("its environment cannot be read, even by root (another PID namespace's process, or a ptrace "
                    "restriction such as a container's)" if os.geteuid() == 0 else
                    "another user's process: its environment is for its owner (or root) to read")
        return Judgement(pid, stat.name, verdict, None, tuple(threads), who, pages, note, marker, max_remote,
                         buffers, unlisted=unlisted, crowd=crowd)
    unjudged = None if max_remote is None else _unjudged(want, pages, size, hidden, live)
    if unjudged is not None:
        note = ((note + "; ") if note else "") + f"memory not judged: {unjudged}"
        max_remote = None
    judged = Judgement(pid, stat.name, Verdict.OK, want, tuple(threads), who, pages, note, marker, max_remote,
                       buffers, unjudged, unlisted, crowd)
    if rehearsed is not None:  # placed nowhere: neither right nor wrong, whatever its threads' masks say
        return replace(judged, verdict=Verdict.REHEARSAL, placed_by=rehearsed.how)
    if judged.misplaced_by:
        return replace(judged, verdict=Verdict.MISPLACED)
    return judged


def _threads(view: ProcessView, want: Expected | None, own: set[CpuSet], environ: Mapping[str, str],
             facts: Facts) -> list[ThreadState]:
    """Each thread of the process as it is: its mask against the target, whether numapin set it, the library whose
    thread it is (and where that library's row says it belongs)."""
    vendor = None if want is None else facts.vendor_at(want.placement.pci)
    threads = []
    for task in view.tasks():
        tid, mask, seen = task.tid, task.cpus, task.stat
        name = None if seen is None else seen.name
        inside = None if want is None or mask is None else mask <= want.target
        narrowed = bool(inside) and want is not None and mask != want.target
        pinner = _pinner(name, mask, inside, environ, vendor, narrowed)
        if inside is False and pinner is None and want is not None and mask is not None:
            pinner = on_nic_node(mask, environ, facts, want.placement.pci)
            inside = True if pinner is not None else inside  # where its library's row says it belongs
        threads.append(ThreadState(tid, name, mask, None if seen is None else seen.last_cpu, inside,
                                   mask is not None and mask in own, narrowed, pinner))
    return threads


def _memory(view: ProcessView, declarations: Container[str] | None,
            sized_by_numa_maps: bool) -> tuple[Residency | None, int | None, bool, Declaration]:
    """Where the process's pages lie (None: not read), its own memory's size where status told it instead, whether
    its numa_maps was another user's to read, and the host buffers it declared."""
    declaration = view.declaration(declarations)
    pages, size = None, None
    try:
        # Too small a process is not judged by its memory: status says so at a fraction of numa_maps's cost,
        # which walks every page of every mapping (and any user may read status). Declared buffers are read.
        size = None if sized_by_numa_maps or declaration.buffers else view.own_memory()
        if size is None or size >= JUDGED_MEMORY:
            pages = view.residency([(b.address, b.nbytes) for b in declaration.buffers])
    except AccessDenied:
        return None, size, True, declaration  # another user's process: its numa_maps is for its owner or root
    except ProcessError:
        pass  # gone meanwhile: its threads, read above, say so
    return pages, size, False, declaration


def _unjudged(want: Expected, pages: Residency | None, size: int | None, hidden: bool, live: bool) -> str | None:
    """Why the process's memory says nothing of its placement, where it does not; None where it is judged (or
    was not read)."""
    if pages is None and size is None and not hidden:
        return None
    lacking = CpuSet() if live else want.mems - this_host_nodes()
    made = sum(pages.own_bytes.values()) if pages is not None else size
    if lacking:
        # Nodes this host lacks (a rehearsal machine's, pair's second node on a one-node host): no page can
        # be there, so where pages lie says nothing of the placement.
        return f"node(s) {lacking} are not this host's"
    if hidden:
        return "another user's process, whose numa_maps only its owner or root may read"
    if made is not None and made < JUDGED_MEMORY:
        # What an interpreter made before a late pin dominates a small process; a worker's data does not.
        return f"under {JUDGED_MEMORY >> 20} MiB of its own memory"
    return None
