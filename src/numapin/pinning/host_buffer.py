"""A large host buffer on a GPU's node, filled fast: ``numapin.host_buffer(nbytes, gpu=N)``.

KV-cache offload pools, staging areas and weights kept in host memory carry the GPU's traffic; where their pages
lie decides its speed (device-to-host 33 vs 13.5 GiB/s on a DGX H100, openxla/xla#21708), and filling a large
one from one thread takes minutes (a 500 GB pool: 397.7 s, against 21.3 s filled by node-local threads,
pegaflow#277; ``../shared/research/host-memory.md``). So a buffer is:

1. a fresh anonymous mapping (never the heap, which may hand back pages touched elsewhere), of huge pages from
   the node's own pool where asked and free there;
2. bound to the node with ``mbind`` (a policy of the range alone: nothing else of the process changes), or, for a
   pool shared by GPUs on several nodes (``nodes=[...]``, ``gpus=[...]``), interleaved page by page over them
   (a KV cache shared by TP8 across two sockets served more, sooner, interleaved than first-touched:
   LightLLM#1399); transparent huge pages asked for (``MADV_HUGEPAGE``) where ``hugepages="thp"`` and the
   kernel's settings give them;
3. filled in parallel by threads pinned to the node's CPUs (:mod:`numapin.pinning.pages`), each populating its
   slice with the kernel's own call (``MADV_POPULATE_WRITE``), which does not hold Python's lock: where ``mbind``
   is refused (a container's seccomp profile without CAP_SYS_NICE), those threads still place every page under
   the kernel's local policy (a spread: each node's threads its 2 MiB stripes, taken in turn).
   A memory-only node has no CPUs to fill from: there ``mbind`` is needed, and its refusal is an error;
4. optionally locked (``mlock``) and registered with CUDA (in chunks of at most 64 GiB, through the CUDA runtime
   the process already loaded: PyTorch's, or a ``libcudart`` already mapped; numapin never loads one);
5. read back: the nodes its pages are on come from the kernel (``numa_maps``), and its transparent huge pages
   (``smaps``), never assumed; the NICs nearest its nodes named (:attr:`HostBuffer.nics`);
6. declared beside the process's record (:func:`numapin.pinning.declaration.declare`): its range, nodes and pages, which
   ``numapin threads``, ``ps`` and ``doctor --pid`` verify against ``numa_maps`` from outside.
"""

from __future__ import annotations

import errno
import mmap
import os
import time
import weakref

from ..base.errors import EnvironmentProblem, UsageError
from ..base.logger import log
from ..base.text import Written, counted, format_size
from ..cpuset import CpuSet
from ..facts.machine import cached as cached_facts
from ..facts.thp import FOLDER, read_thp
from ..kernel import mapping
from ..kernel.mempolicy import KernelMemoryPolicy, LinuxMemory
from . import memory as _memory
from . import pages
from .declaration import Declared, unbalanced

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from typing import Any

    from ..facts.machine import Facts
    from ..facts.thp import TransparentHugePages

__all__ = ["REGISTER_CHUNK", "HostBuffer", "host_buffer", "nics_near"]

#: The most one CUDA registration takes: larger calls fail on drivers r580+ with 4 KiB pages (LMCache PR #5177).
REGISTER_CHUNK = 64 << 30
#: Every buffer still open, in the order made, closed at interpreter exit (registered memory before CUDA is torn
#: down); and their bytes, counted as they open and close (the declaration says how many it does not list).
_OPEN: weakref.WeakKeyDictionary[HostBuffer, None] = weakref.WeakKeyDictionary()
_OPEN_BYTES = [0]
_AT_EXIT: list[bool] = []


class HostBuffer(mmap.mmap):
    """A filled buffer on a node: an ``mmap`` (``memoryview(buf)``, slicing, ``len``), and what it is.

    ``address`` and ``nbytes`` (a whole number of pages: the size asked, rounded up), ``nodes`` (where its pages
    are, read back) and ``on_nodes`` (its bytes by node), ``page_size`` (and ``huge_bytes``), ``nics``, ``locked``,
    ``registered``, ``notes`` (each step-down or refusal, in words), ``fill_seconds`` and ``fill_threads``.
    ``close()`` (or the ``with`` block's end, or interpreter exit) unregisters, unlocks and unmaps it.
    """

    address: int
    nbytes: int
    nodes: CpuSet
    page_size: int
    locked: bool
    registered: bool
    notes: tuple[str, ...]
    fill_seconds: float
    fill_threads: int
    on_nodes: dict[int, int]
    """Its resident bytes by node, as the kernel counted them after the fill."""
    huge_bytes: int
    """Its bytes in transparent huge pages (``AnonHugePages`` of its range), where it asked for them; else 0."""
    nics: tuple[str, ...]
    """The NICs nearest its nodes (RDMA device names where there are: ``mlx5_0``), for a transfer engine to post
    from; empty where the machine shows none."""
    _unregister: Any
    _finalizer: Any
    _entry: Written
    _declared: Any
    """What the process's declaration says of it (:class:`numapin.pinning.declaration.Declared`)."""

    def __enter__(self) -> HostBuffer:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def close(self) -> None:
        """Unregister, unlock and unmap it. A ``memoryview`` (or any export) of it still alive is a BufferError
        raised before anything changes: the buffer stays mapped, locked, registered and declared, as it was."""
        if self.closed:
            return
        if _exported(self):
            raise BufferError(f"host buffer at {self.address:#x}: a view of it (a memoryview, a numpy array, a tensor "
                              "made from it) is still alive: release it first; nothing was changed")
        self._release()
        super().close()
        if self in _OPEN:
            del _OPEN[self]
            self._finalizer.detach()
            _OPEN_BYTES[0] -= self.nbytes
            _declare()

    def _release(self) -> None:
        """Give back what the mapping holds beyond its pages: its CUDA registration, its lock."""
        if self.registered and self._unregister is not None:
            try:
                self._unregister()
            except Exception as exc:  # the driver may be gone at exit: the mapping goes all the same
                log.debug("host buffer at %#x: unregister failed: %s", self.address, exc)
            self.registered = False
        if self.locked:
            try:
                mapping.unlock(self.address, self.nbytes)
            except OSError:
                pass
            self.locked = False

    def __repr__(self) -> str:
        state = "closed" if self.closed else f"on node(s) {self.nodes}"
        return f"<HostBuffer {format_size(self.nbytes)} at {self.address:#x}, {state}>"


def host_buffer(nbytes: int, *, gpu: int | None = None, node: int | None = None,
                gpus: Sequence[int] | None = None, nodes: Sequence[int] | None = None, hugepages: str | None = None,
                fill_threads: int | None = None, lock: bool = False, register: bool = False,
                root: str | os.PathLike[str] | None = None, environ: Mapping[str, str] | None = None) -> HostBuffer:
    """A buffer of ``nbytes`` on GPU ``gpu``'s node (its index in this process's view; none named: the GPU
    :func:`numapin.pin` would choose), on node ``node``, or spread page by page over ``nodes`` (or the nodes of
    ``gpus``): filled and read back.

    ``hugepages``: ``"2M"`` or ``"1G"`` from the nodes' pools (base pages, with a note, where too few are free), or
    ``"thp"``: transparent huge pages, where the kernel's settings give them (said in ``notes`` where they cannot be
    had, or where each fault would stall on compaction); ``fill_threads``: how many threads fill it (default: the
    nodes' CPUs this process may use, at most 16; never more than those CPUs); ``lock``: ``mlock`` it;
    ``register``: register it with CUDA. A caller's mistake is a :class:`UsageError` and a refusal of the machine
    an :class:`EnvironmentProblem` (a size past what a node has free, its memory cgroup's limit leaves, or
    ``RLIMIT_MEMLOCK`` lets it lock), each before anything stays mapped.
    """
    env = os.environ if environ is None else environ
    _check(nbytes, hugepages, fill_threads, gpu, node, gpus, nodes)
    facts = cached_facts(root, env)
    where, spread = _where(facts, env, gpu, node, gpus, nodes)
    _fits(nbytes, where, spread, lock)
    cpus = facts.topology.cpus_of_nodes(where) & facts.topology.allowed
    notes: list[str] = []
    thp = read_thp("/") if hugepages == "thp" else None  # this kernel's settings, whatever the facts' root
    page_size = _page_size(hugepages, nbytes, where, notes, thp)
    length = -(-nbytes // page_size) * page_size
    if fill_threads is not None and fill_threads > max(1, len(cpus)):
        notes.append(f"{fill_threads} fill threads asked; node(s) {where} have {counted(len(cpus), 'CPU')} of this "
                     f"process's: {max(1, len(cpus))} instead")
    buffer = _mapped(length, page_size, notes)
    try:
        _made(buffer, facts, where, spread, cpus, fill_threads, thp, notes)
        if lock:
            _lock(buffer)
        if register:
            _register(buffer)
        _placed(buffer, where, spread, thp, notes)
        buffer.nics = nics_near(facts, buffer.nodes or where)
        buffer.notes = tuple(notes)
    except BaseException:
        buffer.close()
        raise
    for note in notes:
        log.info("host buffer: %s", note)
    _opened(buffer, where, spread, hugepages, thp)
    return buffer


def _check(nbytes: int, hugepages: str | None, fill_threads: int | None, *where: object) -> None:
    """The caller's mistakes, each a UsageError, before anything is read or mapped."""
    if isinstance(nbytes, bool) or not isinstance(nbytes, int) or nbytes <= 0:
        raise UsageError(f"host_buffer({nbytes!r}): a size is a whole number of bytes from 1", value=nbytes)
    if hugepages is not None and hugepages not in mapping.HUGEPAGES:
        raise UsageError(f"host_buffer(hugepages={hugepages!r}): {', '.join(map(repr, mapping.HUGEPAGES))} (or None, "
                         "base pages)", value=hugepages)
    if fill_threads is not None and (isinstance(fill_threads, bool) or not isinstance(fill_threads, int)
                                     or fill_threads < 1):
        raise UsageError(f"host_buffer(fill_threads={fill_threads!r}): a count from 1", value=fill_threads)
    if sum(w is not None for w in where) > 1:
        raise UsageError("host_buffer(): one of gpu=N, node=N, gpus=[...], nodes=[...]", value=where)


def _made(buffer: HostBuffer, facts: Facts, where: CpuSet, spread: bool, cpus: CpuSet, fill_threads: int | None,
          thp: TransparentHugePages | None, notes: list[str]) -> None:
    """Name the fresh mapping, set its policy, ask for transparent huge pages, and fill it."""
    buffer.address = mapping.address_of(buffer)
    buffer.nbytes = len(buffer)
    # Its own mapping, never merged with a neighbour (whose pages a read-back of numa_maps would count too):
    # kept out of core dumps, and named where the kernel names anonymous memory.
    mapping.keep_apart(buffer.address, buffer.nbytes)
    mapping.name(buffer.address, buffer.nbytes, "numapin-host-buffer")
    buffer.locked = buffer.registered = False
    buffer._unregister = None
    # Each node's own CPUs of this process's: a spread whose policy is refused fills each node's stripes from them.
    local = {n: facts.topology.cpus_of_nodes(CpuSet([n])) & cpus for n in where} if spread else {}
    bound = _bind(buffer, where, cpus, local, notes)
    if thp is not None and thp.available and not mapping.ask_huge(buffer.address, buffer.nbytes):
        notes.append("transparent huge pages: madvise(MADV_HUGEPAGE) was refused; base pages")
    started = time.perf_counter()
    if spread and not bound:
        # No policy spreads it: each node's threads make that node's stripes, under the kernel's local policy.
        buffer.fill_threads = pages.fill_striped(buffer.address, buffer.nbytes, buffer.page_size, local, fill_threads)
    else:
        buffer.fill_threads = pages.fill(buffer.address, buffer.nbytes, buffer.page_size, cpus, fill_threads)
    buffer.fill_seconds = time.perf_counter() - started
    if thp is not None and thp.stalls:
        notes.append(f"{thp.stall_words()}; filled by {counted(buffer.fill_threads, 'thread')} so the stall is "
                     f"spread; echo defer > /{FOLDER}/defrag (root) keeps compaction off the fill")


def _placed(buffer: HostBuffer, where: CpuSet, spread: bool, thp: TransparentHugePages | None,
            notes: list[str]) -> None:
    """Read back where its pages are and in what pages, and say what differs from what was asked."""
    buffer.on_nodes, buffer.page_size = pages.read_back(buffer.address, buffer.nbytes, buffer.page_size, notes)
    buffer.huge_bytes = 0
    if thp is not None and thp.available:
        buffer.huge_bytes = mapping.huge_bytes(buffer.address) or 0
        if 2 * buffer.huge_bytes >= buffer.nbytes:
            buffer.page_size = thp.size
        notes.append(f"transparent huge pages: {format_size(buffer.huge_bytes)} of {format_size(buffer.nbytes)} in "
                     f"{format_size(thp.size)} pages")
    buffer.nodes = CpuSet(n for n, b in buffer.on_nodes.items() if b)
    if buffer.nodes and not buffer.nodes <= where:
        notes.append(f"pages on node(s) {buffer.nodes - where} too: node(s) {where} ran out of free memory")
    if spread:
        notes.extend(unbalanced(buffer.on_nodes, where))


def _opened(buffer: HostBuffer, where: CpuSet, spread: bool, hugepages: str | None,
            thp: TransparentHugePages | None) -> None:
    """Count it among this process's open buffers, declare it, and close it at exit if its user does not."""
    asked = thp.size if thp is not None else mapping.HUGE_PAGES.get(hugepages or "", mmap.PAGESIZE)
    buffer._declared = Declared(buffer.address, buffer.nbytes, where, buffer.page_size, asked, buffer.locked,
                                spread, thp is not None, buffer.huge_bytes)
    buffer._entry = buffer._declared.text()  # written once: a declaration of many re-serialises none
    _OPEN[buffer] = None
    _OPEN_BYTES[0] += buffer.nbytes
    # One dropped unclosed (its mapping goes with it) leaves the count.
    buffer._finalizer = weakref.finalize(buffer, _dropped, buffer.nbytes)
    buffer._finalizer.atexit = False
    if not _AT_EXIT:
        import atexit

        _AT_EXIT.append(True)
        atexit.register(_close_all)
    _declare()


def _where(facts: Facts, env: Mapping[str, str], gpu: int | None, node: int | None, gpus: Sequence[int] | None,
           nodes: Sequence[int] | None) -> tuple[CpuSet, bool]:
    """The nodes the buffer is for, and whether it is spread over them (``nodes``/``gpus`` naming several)."""
    if nodes is None and gpus is None:
        return _nodes(facts, env, gpu, node), False
    name, items = ("nodes", nodes) if nodes is not None else ("gpus", gpus)
    if isinstance(items, (str, bytes)) or not isinstance(items, (list, tuple, range, frozenset, set, CpuSet)) \
            or not items:
        raise UsageError(f"host_buffer({name}={items!r}): a list of one or more", value=items)
    if any(isinstance(n, bool) or not isinstance(n, int) for n in items):
        raise UsageError(f"host_buffer({name}={items!r}): {name[:-1]} numbers, whole numbers", value=items)
    if name == "nodes":
        exist = _memory.MemoryNodes.of(facts.topology).exist
        if not CpuSet(items) <= exist:
            raise UsageError(f"host_buffer(nodes={list(items)!r}): the nodes with memory here are {exist}", value=items)
        return CpuSet(items), len(CpuSet(items)) > 1
    found = [_nodes(facts, env, n, None) for n in items]
    every = CpuSet.union(found)
    return every, len(every) > 1


def _nodes(facts: Facts, env: Mapping[str, str], gpu: int | None, node: int | None) -> CpuSet:
    """The nodes the buffer is for: the node named, or the GPU's memory (its own memory-only nodes, where
    firmware shows its memory as nodes: Grace), else the host memory nodes a pin for it would prefer."""
    exist = _memory.MemoryNodes.of(facts.topology).exist
    if node is not None:
        if isinstance(node, bool) or not isinstance(node, int) or node not in exist:
            raise UsageError(f"host_buffer(node={node!r}): the nodes with memory here are {exist}", value=node)
        return CpuSet([node])
    if gpu is not None and (isinstance(gpu, bool) or not isinstance(gpu, int) or not 0 <= gpu < len(facts.visible)):
        raise UsageError(f"host_buffer(gpu={gpu!r}): this process sees {counted(len(facts.visible), 'GPU')}, "
                         f"0 to {len(facts.visible) - 1}" if facts.visible else
                         f"host_buffer(gpu={gpu!r}): this process sees no GPU; name a node (node=N; numapin buffer "
                         f"--node N): the nodes with memory here are {exist}", value=gpu)
    if not facts.visible:
        raise UsageError("host_buffer(): no GPU is visible to this process to choose a node by; name a node "
                         f"(node=N; numapin buffer --node N): the nodes with memory here are {exist}", value=gpu)
    from ..placement.modes import resolve

    placement = resolve(facts, env, gpu=gpu)
    found = next((v.gpu for v in facts.visible if v.gpu.pci == placement.pci), None)
    if found is not None and found.gpu_memory_nodes:
        return found.gpu_memory_nodes
    if not placement.mems:
        raise UsageError(f"host_buffer(gpu={gpu}): GPU {placement.gpu} has no NUMA node here; name one (node=N)",
                         value=gpu)
    return placement.mems


def nics_near(facts: Facts, nodes: CpuSet) -> tuple[str, ...]:
    """The NICs nearest ``nodes``: those on them; for a node with none (a memory-only node: a Grace GPU's memory),
    those of the CPU nodes nearest it. Empty where the machine shows none."""
    try:
        nics = facts.network().nics
    except OSError:
        return ()
    topology = facts.topology
    holding = {nic.node for nic in nics if nic.node is not None}
    ids = {x.id for x in topology.nodes}
    near: set[int] = set()
    for n in nodes:
        if n in holding:
            near.add(n)
            continue
        distances = {m: topology.distance(n, m) for m in holding} if n in ids else {}
        known = {m: d for m, d in distances.items() if d is not None}
        if known:
            least = min(known.values())
            near.update(m for m, d in known.items() if d == least)
    return tuple(nic.name for nic in nics if nic.node in near)


def _fits(nbytes: int, nodes: CpuSet, spread: bool, lock: bool) -> None:
    """Refuse, before anything is mapped, a buffer past a limit the kernel will enforce on this process: its
    nodes' free memory, its memory cgroup's limit less what the cgroup holds (v1 and v2, every cgroup above it too:
    past it, the cgroup's OOM killer ends the process without a word), and, to lock it, ``RLIMIT_MEMLOCK``. One
    line each, naming the limit."""
    from ..facts import procfs
    from ..facts.cgroup import memory_room
    from ..facts.host import Host
    from ..facts.topology import node_free_bytes

    kernel = _memory.system_nodes("/")  # the buffer is made on this kernel: its own nodes, free memory, huge pages
    if nodes - kernel:
        raise EnvironmentProblem(f"this kernel has no memory on node(s) {nodes - kernel} (its memory nodes: {kernel}), "
                                 "as when the machine is read from a folder standing in for / (--root, "
                                 "NUMAPIN_FSROOT): a buffer is made on this host's own nodes")

    free = {n: node_free_bytes("/", n) for n in nodes}
    total = sum(f or 0 for f in free.values())
    if all(f is not None for f in free.values()) and nbytes > total:
        raise UsageError(f"host_buffer({format_size(nbytes)}): node(s) {nodes} have {format_size(total)} free",
                         value=nbytes)
    share = -(-nbytes // len(nodes))
    short = sorted((n, f) for n, f in free.items() if f is not None and f < share) if spread else []
    if short:
        n, f = short[0]
        raise UsageError(f"host_buffer({format_size(nbytes)}) spread over node(s) {nodes}: node {n} has "
                         f"{format_size(f)} free, under its share of {format_size(share)}", value=nbytes)
    cgroup = memory_room(Host.at("/"))
    if cgroup is not None and nbytes > cgroup.room:
        raise EnvironmentProblem(f"host_buffer({format_size(nbytes)}): {cgroup}, leaving {format_size(cgroup.room)}; "
                                 "past it the cgroup's OOM killer ends this process (a pod's memory limit: raise it, "
                                 "or ask for less)")
    if lock:
        try:
            most = procfs.locked_memory_limit(os.getpid())
        except OSError:
            most = None
        if most is not None and nbytes > most:
            raise EnvironmentProblem(f"host_buffer({format_size(nbytes)}, lock=True): RLIMIT_MEMLOCK is "
                                     f"{format_size(most)} (ulimit -l; a container's --ulimit memlock=-1, or "
                                     "CAP_IPC_LOCK)")


def _page_size(hugepages: str | None, nbytes: int, nodes: CpuSet, notes: list[str],
               thp: TransparentHugePages | None) -> int:
    """The page size to map: a huge page size where the nodes' pools have enough free; else base pages (and for
    transparent huge pages, base pages too: the kernel makes huge ones on fault, where its settings let it)."""
    base = mmap.PAGESIZE
    if thp is not None and not thp.available:
        notes.append("transparent huge pages: " + (f"transparent_hugepage/enabled is {thp.enabled}"
                                                   if thp.enabled else "this kernel has none") + "; base pages")
    if hugepages is None or thp is not None:
        return base
    size = mapping.HUGE_PAGES[hugepages]
    from ..facts.topology import free_hugepages, reserve_command

    needed = -(-nbytes // size)
    counts = [free_hugepages("/", n, size) or 0 for n in nodes]  # this kernel's pools, whatever the facts' root
    free = sum(counts)
    # A spread takes an even share of its pages from each node's pool: the fullest cannot stand in for another.
    if free < needed or (len(nodes) > 1 and min(counts) * len(nodes) < needed):
        notes.append(f"{hugepages} pages: node(s) {nodes} have {free} free, {needed} needed (reserve them: "
                     f"{reserve_command('/', nodes, size, needed)}); base pages instead")
        return base
    return size


def _mapped(length: int, page_size: int, notes: list[str]) -> HostBuffer:
    """The mapping, its ``page_size`` set: huge pages of ``page_size`` where asked, base pages where the kernel
    refuses them (a note says so)."""
    huge = page_size if page_size != mmap.PAGESIZE else None
    try:
        buffer = HostBuffer(-1, length, flags=mapping.flags_for(huge), prot=mmap.PROT_READ | mmap.PROT_WRITE)
        buffer.page_size = page_size
        return buffer
    except OSError as exc:
        if huge is None:
            raise EnvironmentProblem(f"host_buffer({format_size(length)}): the kernel refused the mapping ({exc})") \
                from None
        notes.append(f"{format_size(huge)} pages: the kernel refused them ({exc}); base pages instead")
        return _mapped(-(-length // mmap.PAGESIZE) * mmap.PAGESIZE, mmap.PAGESIZE, notes)


def _bind(buffer: HostBuffer, nodes: CpuSet, cpus: CpuSet, local: Mapping[int, CpuSet], notes: list[str]) -> bool:
    """Set the range's policy: bound to its node(s), or interleaved page by page over a spread's (``local``: each
    spread node's CPUs); False where the kernel refused it (a note says so, and the fill places the pages)."""
    spread = bool(local)
    policy = KernelMemoryPolicy.INTERLEAVE if spread else KernelMemoryPolicy.BIND
    try:
        LinuxMemory().mbind(buffer.address, buffer.nbytes, policy, nodes)
        return True
    except OSError as exc:
        who = _memory.refused_by() if exc.errno == errno.EPERM else None
        by = f": this process's {_memory.REFUSER[who]}" if who else ""
        what = f"mbind refused ({os.strerror(exc.errno or 0)}{by})"
        if not cpus:
            lift = f"; to lift it: {_memory.LIFT[who]}" if who else ""
            raise EnvironmentProblem(f"node(s) {nodes} have no CPU to fill a buffer from (memory only), and {what}"
                                     f"{lift}") from None
        if spread and not all(local.values()):
            bare = CpuSet(n for n, c in local.items() if not c)
            raise EnvironmentProblem(f"node(s) {bare} of the spread over {nodes} have no CPU of this process's to fill "
                                     f"their share from, and {what}") from None
        how = f"in {format_size(pages.STRIPE)} stripes taken in turn, " if spread else ""
        notes.append(f"{what}: filled {how}by threads on node(s) {nodes}'s CPUs instead, which the kernel's local "
                     "policy follows")
        return False


def _lock(buffer: HostBuffer) -> None:
    try:
        mapping.lock(buffer.address, buffer.nbytes)
    except OSError as exc:
        import resource

        soft, _ = resource.getrlimit(resource.RLIMIT_MEMLOCK)
        limit = "unlimited" if soft == resource.RLIM_INFINITY else format_size(soft)
        raise EnvironmentProblem(f"mlock of {format_size(buffer.nbytes)} refused ({exc.strerror}): RLIMIT_MEMLOCK is "
                                 f"{limit} (ulimit -l; a container's --ulimit memlock=-1)") from None
    buffer.locked = True


def _register(buffer: HostBuffer) -> None:
    """Register with CUDA through the runtime this process has loaded, in chunks of at most REGISTER_CHUNK."""
    register, unregister = _cuda_runtime()
    done: list[int] = []
    try:
        for start in range(0, buffer.nbytes, REGISTER_CHUNK):
            size = min(REGISTER_CHUNK, buffer.nbytes - start)
            code = register(buffer.address + start, size)
            if code != 0:
                raise EnvironmentProblem(f"cudaHostRegister of {format_size(size)} at offset {start} returned {code}")
            done.append(start)
    except BaseException:
        for start in done:
            unregister(buffer.address + start)
        raise

    def unregister_all() -> None:
        for start in done:
            unregister(buffer.address + start)

    buffer.registered, buffer._unregister = True, unregister_all


def _cuda_runtime() -> tuple[Any, Any]:
    """cudaHostRegister and cudaHostUnregister of the CUDA runtime already in this process: PyTorch's
    (``torch.cuda.cudart()``), or a ``libcudart`` already mapped; EnvironmentProblem where there is none."""
    import sys

    torch = sys.modules.get("torch")
    if torch is not None:
        try:
            if torch.cuda.is_available():
                cudart = torch.cuda.cudart()
                return (lambda ptr, size: int(cudart.cudaHostRegister(ptr, size, 0)),
                        lambda ptr: int(cudart.cudaHostUnregister(ptr)))
        except Exception as exc:
            log.debug("torch's CUDA runtime not usable: %s", exc)
    with open("/proc/self/maps", encoding="utf-8", errors="replace") as maps:
        mapped = sorted({line.split()[-1] for line in maps if "libcudart.so" in line.rsplit("/", 1)[-1]})
    if mapped:
        import ctypes

        library = ctypes.CDLL(mapped[0], mode=os.RTLD_NOLOAD | os.RTLD_NOW)  # already loaded: never a load of ours
        return (lambda ptr, size: int(library.cudaHostRegister(ctypes.c_void_p(ptr), ctypes.c_size_t(size), 0)),
                lambda ptr: int(library.cudaHostUnregister(ctypes.c_void_p(ptr))))
    raise EnvironmentProblem("register=True needs the CUDA runtime loaded in this process (import torch with CUDA, "
                             "or a library that loads libcudart): numapin loads none of its own")


def _exported(buffer: mmap.mmap) -> bool:
    """Whether a view of ``buffer`` (a memoryview, an array made from it) is alive: ``mmap`` has no public count of
    them, and its ``close()`` refuses only after numapin would have unregistered and unlocked it. A resize to its
    own size is the same refusal asked first: with no view alive it is no change (``mremap`` to the same length
    keeps the mapping, its policy, its lock and its registration where they are)."""
    try:
        buffer.resize(len(buffer))
    except BufferError:
        return True
    except (OSError, SystemError, TypeError, ValueError):
        return False
    return False


def _dropped(nbytes: int) -> None:
    """A buffer dropped without ``close()``: its mapping went with it; its bytes leave the count."""
    _OPEN_BYTES[0] -= nbytes


def _declare() -> None:
    """This process's open buffers, declared beside its record (a closed one leaves the declaration): the first
    :data:`numapin.pinning.declaration.LISTED_AT_MOST` made, and how many more and their bytes."""
    from itertools import islice

    from .declaration import LISTED_AT_MOST, declare

    listed = list(islice(_OPEN.keys(), LISTED_AT_MOST))
    declare([b._entry for b in listed], more=len(_OPEN) - len(listed),
            more_bytes=_OPEN_BYTES[0] - sum(b.nbytes for b in listed))


def _close_all() -> None:
    """At exit: close every buffer still open. One a view still holds gives back its registration and lock (CUDA is
    torn down next) and stays mapped until the process ends, one debug line: never a traceback at exit."""
    for buffer in list(_OPEN):
        try:
            buffer.close()
        except BufferError as exc:
            buffer._release()
            log.debug("%s", exc)


def _forked() -> None:
    """A forked child holds copies of its parent's buffers, but none of its own: never locked (``mlock`` is not
    inherited) nor registered, and never declared as the child's."""
    for buffer in list(_OPEN):
        buffer.locked = buffer.registered = False
        buffer._unregister = None
        buffer._finalizer.detach()
    _OPEN.clear()
    _OPEN_BYTES[0] = 0


os.register_at_fork(after_in_child=_forked)
