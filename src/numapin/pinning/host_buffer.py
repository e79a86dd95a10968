"""A large host buffer on a GPU's node, filled fast: ``numapin.host_buffer(nbytes, gpu=N)``.

KV-cache offload pools, staging areas and weights kept in host memory carry the GPU's traffic; where their pages
lie decides its speed (device-to-host 33 vs 13.5 GiB/s on a DGX H100, openxla/xla#21708), and filling a large
one from one thread takes minutes (a 500 GB pool: 397.7 s, against 21.3 s filled by node-local threads,
pegaflow#277; ``../shared/research/host-memory.md``). So a buffer is:

1. a fresh anonymous mapping (never the heap, which may hand back pages touched elsewhere), of huge pages from
   the node's own pool where asked and free there;
2. bound to the node with ``mbind`` (a policy of the range alone: nothing else of the process changes);
3. filled in parallel by threads pinned to the node's CPUs, each populating its slice with the kernel's own call
   (``MADV_POPULATE_WRITE``), which does not hold Python's lock: where ``mbind`` is refused (a container's
   seccomp profile without CAP_SYS_NICE), those threads still place every page under the kernel's local policy.
   A memory-only node has no CPUs to fill from: there ``mbind`` is needed, and its refusal is an error;
4. optionally locked (``mlock``) and registered with CUDA (in chunks of at most 64 GiB, through the CUDA runtime
   the process already loaded: PyTorch's, or a ``libcudart`` already mapped; numapin never loads one);
5. read back: the nodes its pages are on come from the kernel (``numa_maps``), never assumed;
6. declared beside the process's record (:func:`numapin.pinning.declaration.declare`): its range, nodes and pages, which
   ``numapin threads``, ``ps`` and ``doctor --pid`` verify against ``numa_maps`` from outside.
"""

from __future__ import annotations

import errno
import mmap
import os
import threading
import time
import weakref

from ..base.errors import EnvironmentProblem, UsageError
from ..base.logger import log
from ..base.text import Written, counted, format_size
from ..cpuset import CpuSet
from ..facts.machine import cached as cached_facts
from ..kernel import mapping
from ..kernel.mempolicy import KernelMemoryPolicy, LinuxMemory
from . import memory as _memory

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing at run time (mypy knows the name)
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

    from ..facts.machine import Facts

__all__ = ["REGISTER_CHUNK", "HostBuffer", "host_buffer"]

#: The most one CUDA registration takes: larger calls fail on drivers r580+ with 4 KiB pages (LMCache PR #5177).
REGISTER_CHUNK = 64 << 30
#: The filling threads a buffer gets at most, unless asked for more (never more than its node's CPUs).
_MOST_THREADS = 16
#: Every buffer still open, in the order made, closed at interpreter exit (registered memory before CUDA is torn
#: down); and their bytes, counted as they open and close (the declaration says how many it does not list).
_OPEN: weakref.WeakKeyDictionary[HostBuffer, None] = weakref.WeakKeyDictionary()
_OPEN_BYTES = [0]
_AT_EXIT: list[bool] = []


class HostBuffer(mmap.mmap):
    """A filled buffer on a node: an ``mmap`` (``memoryview(buf)``, slicing, ``len``), and what it is.

    ``address`` and ``nbytes`` (a whole number of pages: the size asked, rounded up), ``nodes`` (where its pages
    are, read back) and ``on_nodes`` (its bytes by node), ``page_size``, ``locked``, ``registered``, ``notes``
    (each step-down or refusal, in words), ``fill_seconds`` and ``fill_threads``. ``close()`` (or the ``with``
    block's end, or interpreter exit) unregisters, unlocks and unmaps it.
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


def host_buffer(nbytes: int, *, gpu: int | None = None, node: int | None = None, hugepages: str | None = None,
                fill_threads: int | None = None, lock: bool = False, register: bool = False,
                root: str | os.PathLike[str] | None = None, environ: Mapping[str, str] | None = None) -> HostBuffer:
    """A buffer of ``nbytes`` on GPU ``gpu``'s node (its index in this process's view; neither ``gpu`` nor
    ``node``: the GPU :func:`numapin.pin` would choose) or on node ``node``, filled and read back.

    ``hugepages``: ``"2M"`` or ``"1G"`` from that node's pool (base pages, with a note, where it has too few
    free); ``fill_threads``: how many threads fill it (default: the node's CPUs this process may use, at most
    16; never more than those CPUs); ``lock``: ``mlock`` it; ``register``: register it with CUDA. A caller's
    mistake is a :class:`UsageError` and a refusal of the machine an :class:`EnvironmentProblem` (a size past
    what the node has free, its memory cgroup's limit leaves, or ``RLIMIT_MEMLOCK`` lets it lock), each before
    anything stays mapped.
    """
    env = os.environ if environ is None else environ
    if isinstance(nbytes, bool) or not isinstance(nbytes, int) or nbytes <= 0:
        raise UsageError(f"host_buffer({nbytes!r}): a size is a whole number of bytes from 1", value=nbytes)
    if hugepages is not None and hugepages not in mapping.HUGE_PAGES:
        raise UsageError(f"host_buffer(hugepages={hugepages!r}): {' or '.join(mapping.HUGE_PAGES)} (or None, base "
                         "pages)", value=hugepages)
    if fill_threads is not None and (isinstance(fill_threads, bool) or not isinstance(fill_threads, int)
                                     or fill_threads < 1):
        raise UsageError(f"host_buffer(fill_threads={fill_threads!r}): a count from 1", value=fill_threads)
    if gpu is not None and node is not None:
        raise UsageError("host_buffer(): a GPU (gpu=N) or a node (node=N), not both", value=(gpu, node))
    facts = cached_facts(root, env)
    nodes = _nodes(facts, env, gpu, node)
    _fits(nbytes, nodes, lock)
    cpus = facts.topology.cpus_of_nodes(nodes) & facts.topology.allowed
    notes: list[str] = []
    page_size = _page_size(hugepages, nbytes, nodes, notes)
    length = -(-nbytes // page_size) * page_size
    if fill_threads is not None and fill_threads > max(1, len(cpus)):
        notes.append(f"{fill_threads} fill threads asked; node(s) {nodes} have {counted(len(cpus), 'CPU')} of this "
                     f"process's: {max(1, len(cpus))} instead")
    buffer = _mapped(length, page_size, notes)
    try:
        buffer.address = mapping.address_of(buffer)
        buffer.nbytes = length
        # Its own mapping, never merged with a neighbour (whose pages a read-back of numa_maps would count too):
        # kept out of core dumps, and named where the kernel names anonymous memory.
        mapping.keep_apart(buffer.address, length)
        mapping.name(buffer.address, length, "numapin-host-buffer")
        buffer.locked = buffer.registered = False
        buffer._unregister = None
        _bind(buffer, nodes, cpus, notes)
        started = time.perf_counter()
        buffer.fill_threads = _fill(buffer, cpus, fill_threads)
        buffer.fill_seconds = time.perf_counter() - started
        if lock:
            _lock(buffer)
        if register:
            _register(buffer)
        buffer.on_nodes, buffer.page_size = _read_back(buffer, buffer.page_size, notes)
        buffer.nodes = CpuSet(n for n, b in buffer.on_nodes.items() if b)
        if buffer.nodes and not buffer.nodes <= nodes:
            notes.append(f"pages on node(s) {buffer.nodes - nodes} too: node(s) {nodes} ran out of free memory")
        buffer.notes = tuple(notes)
    except BaseException:
        buffer.close()
        raise
    for note in notes:
        log.info("host buffer: %s", note)
    from .declaration import Declared

    buffer._declared = Declared(buffer.address, buffer.nbytes, nodes, buffer.page_size,
                                mapping.HUGE_PAGES.get(hugepages or "", mmap.PAGESIZE), buffer.locked)
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
    return buffer


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


def _fits(nbytes: int, nodes: CpuSet, lock: bool) -> None:
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

    free = [node_free_bytes("/", n) for n in nodes]
    total = sum(f or 0 for f in free)
    if all(f is not None for f in free) and nbytes > total:
        raise UsageError(f"host_buffer({format_size(nbytes)}): node(s) {nodes} have {format_size(total)} free",
                         value=nbytes)
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


def _page_size(hugepages: str | None, nbytes: int, nodes: CpuSet, notes: list[str]) -> int:
    base = mmap.PAGESIZE
    if hugepages is None:
        return base
    size = mapping.HUGE_PAGES[hugepages]
    from ..facts.topology import free_hugepages, reserve_command

    needed = -(-nbytes // size)
    free = sum(free_hugepages("/", n, size) or 0 for n in nodes)  # this kernel's pools, whatever the facts' root
    if free < needed:
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


def _bind(buffer: HostBuffer, nodes: CpuSet, cpus: CpuSet, notes: list[str]) -> None:
    try:
        LinuxMemory().mbind(buffer.address, buffer.nbytes, KernelMemoryPolicy.BIND, nodes)
    except OSError as exc:
        who = _memory.refused_by() if exc.errno == errno.EPERM else None
        by = f": this process's {_memory.REFUSER[who]}" if who else ""
        what = f"mbind refused ({os.strerror(exc.errno or 0)}{by})"
        if not cpus:
            lift = f"; to lift it: {_memory.LIFT[who]}" if who else ""
            raise EnvironmentProblem(f"node(s) {nodes} have no CPU to fill a buffer from (memory only), and {what}"
                                     f"{lift}") from None
        notes.append(f"{what}: filled by threads on node(s) {nodes}'s CPUs instead, which the kernel's local "
                     "policy follows")


def _fill(buffer: HostBuffer, cpus: CpuSet, fill_threads: int | None) -> int:
    """Populate the buffer in slices of whole pages, each by a thread on ``cpus`` (where there are any); how many
    threads filled it: those asked, or the node's CPUs up to :data:`_MOST_THREADS`, never more than the node has CPUs
    (more threads than CPUs only take turns: 5,000 asked would be 5,000 threads)."""
    count = min(fill_threads or _MOST_THREADS, len(cpus) or 1)
    page = buffer.page_size  # slices of whole pages: a huge page is populated whole or not at all
    pages = buffer.nbytes // page
    count = max(1, min(count, pages))
    failures: list[BaseException] = []

    def fill(start: int, end: int) -> None:
        try:
            if cpus:
                os.sched_setaffinity(0, cpus)
            mapping.populate(buffer.address + start * page, (end - start) * page)
        except BaseException as exc:
            failures.append(exc)

    threads = [threading.Thread(target=fill, args=(pages * i // count, pages * (i + 1) // count),
                                name=f"numapin-fill-{i}", daemon=True) for i in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if failures:
        raise EnvironmentProblem(f"the buffer could not be filled: {failures[0]}") from failures[0]
    return count


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


def _read_back(buffer: HostBuffer, page_size: int, notes: list[str]) -> tuple[dict[int, int], int]:
    """The buffer's bytes on each node, and its page size, as the kernel counts its own pages: the mapping's line
    of ``numa_maps`` where the mapping is the buffer alone (one read), else ``move_pages`` asked for no move, page
    by page (a neighbour with the same flags and policy may have merged with it)."""
    if buffer.nbytes // page_size <= _ASKED_PAGE_BY_PAGE:
        # A small buffer asks the kernel of its own pages alone: numa_maps walks every mapping of the process,
        # and a process making hundreds of small buffers would pay that walk for each (quadratic in them).
        try:
            pages, stride = mapping.page_nodes(buffer.address, buffer.nbytes, page_size)
            return {n: count * stride * page_size for n, count in pages.items()}, page_size
        except OSError:
            pass  # no move_pages here: numa_maps below
    line = _numa_maps_line(buffer.address)
    size = page_size
    if line is not None:
        size = next((int(item.partition("=")[2]) * 1024 for item in line.split()
                     if item.startswith("kernelpagesize_kB=") and item.partition("=")[2].isdigit()), page_size)
        if _extent(buffer.address) == buffer.nbytes:
            from ..kernel.residency import parse_numa_maps

            return parse_numa_maps(line, page_size=size).bytes, size
    try:
        pages, stride = mapping.page_nodes(buffer.address, buffer.nbytes, size)
    except OSError as exc:
        notes.append(f"where its pages are could not be read back (move_pages: {exc.strerror}, and its mapping is "
                     "not its own in numa_maps)")
        return {}, size
    return {n: count * stride * size for n, count in pages.items()}, size


#: The most pages a buffer has for its read-back to ask the kernel page by page (``move_pages``) rather than read
#: the process's ``numa_maps`` (256 MiB of base pages).
_ASKED_PAGE_BY_PAGE = 1 << 16


def _numa_maps_line(address: int) -> str | None:
    from ..facts import procfs

    wanted = f"{address:x} "
    return next((line for line in procfs.numa_maps(os.getpid()).splitlines() if line.startswith(wanted)), None)


def _extent(address: int) -> int | None:
    """The length of the mapping that begins at ``address`` (``/proc/self/maps``)."""
    with open("/proc/self/maps", encoding="ascii", errors="replace") as maps:
        for line in maps:
            start, _, end = line.partition(" ")[0].partition("-")
            if int(start, 16) == address:
                return int(end, 16) - address
    return None


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
