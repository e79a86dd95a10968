"""The kernel interface for a buffer of this process's own: anonymous mappings (huge pages from the kernel's
pools), populating a range in place, and locking it (``mmap``, ``madvise``, ``mlock``).

Calls go through libc by ctypes, which lets go of the interpreter's lock for the call's length: threads that
each populate a slice run in parallel, as a Python loop touching pages never could.
"""

from __future__ import annotations

import errno
import mmap
import os

TYPE_CHECKING = False
if TYPE_CHECKING:
    import ctypes

__all__ = ["HUGEPAGES", "HUGE_PAGES", "MADV_POPULATE_WRITE", "address_of", "ask_huge", "flags_for", "huge_bytes",
           "keep_apart", "lock", "name", "page_nodes", "populate", "unlock"]

#: The kernel's huge page sizes numapin asks for, by name: bytes.
HUGE_PAGES = {"2M": 2 << 20, "1G": 1 << 30}
#: What a buffer may ask for (``hugepages=``, ``--hugepages``): a size from the kernel's pools, or transparent huge
#: pages (``thp``), made on fault where the kernel's settings let it.
HUGEPAGES = (*HUGE_PAGES, "thp")
#: madvise(2)'s advice that faults a range in, writable, without touching it from user space (Linux 5.14).
MADV_POPULATE_WRITE = 23
_MAP_HUGETLB = 0x40000
_MOVE_PAGES = {"x86_64": 279, "aarch64": 239}
#: The most pages :func:`page_nodes` asks about one by one; past it, every k-th page.
_MOST_PAGES = 1 << 22
_MAP_HUGE_SHIFT = 26
_LIBC: list[ctypes.CDLL] = []


def _libc() -> ctypes.CDLL:
    import ctypes

    if not _LIBC:
        libc = ctypes.CDLL(None, use_errno=True)
        for call in ("madvise", "mlock", "munlock"):
            getattr(libc, call).argtypes = [ctypes.c_void_p, ctypes.c_size_t] + ([ctypes.c_int] if call == "madvise"
                                                                                  else [])
            getattr(libc, call).restype = ctypes.c_int
        libc.memset.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t]
        libc.memset.restype = ctypes.c_void_p
        _LIBC.append(libc)
    return _LIBC[0]


def _checked(ret: int, call: str) -> None:
    if ret != 0:
        import ctypes

        err = ctypes.get_errno()
        raise OSError(err, f"{call}: {os.strerror(err)}")


def flags_for(page_size: int | None) -> int:
    """``mmap`` flags of a private anonymous mapping, of huge pages of ``page_size`` bytes where given."""
    flags = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS
    if page_size is not None:
        flags |= _MAP_HUGETLB | ((page_size.bit_length() - 1) << _MAP_HUGE_SHIFT)
    return flags


def address_of(buffer: mmap.mmap) -> int:
    """Where ``buffer`` begins in this process's memory (no export of it is kept: it can still be closed)."""
    import ctypes

    view = ctypes.c_char.from_buffer(buffer)
    try:
        return ctypes.addressof(view)
    finally:
        del view


def populate(address: int, length: int) -> None:
    """Make every page of the range, written, in the calling thread (its CPUs and memory policy place them):
    ``MADV_POPULATE_WRITE``, or, on kernels before 5.14, a ``memset`` of zeros (pages made by the write)."""
    libc = _libc()
    if libc.madvise(address, length, MADV_POPULATE_WRITE) == 0:
        return
    import ctypes

    if ctypes.get_errno() != errno.EINVAL:  # EINVAL: an older kernel without the advice
        _checked(-1, "madvise(MADV_POPULATE_WRITE)")
    libc.memset(address, 0, length)


def name(address: int, length: int, text: str) -> bool:
    """Name the anonymous range (``prctl(PR_SET_VMA, PR_SET_VMA_ANON_NAME)``, Linux 5.17): ``/proc/PID/maps`` shows
    ``[anon:TEXT]``, and the kernel never merges it with a neighbour. False where the kernel refuses (older, a huge
    page mapping, built without it)."""
    import ctypes

    label = ctypes.create_string_buffer(text.encode())
    return bool(_libc().prctl(0x53564D41, 0, ctypes.c_ulong(address), ctypes.c_ulong(length), label) == 0)


def keep_apart(address: int, length: int) -> bool:
    """Keep the range out of core dumps (``MADV_DONTDUMP``): a pool of hundreds of gigabytes would fill a disk, and
    the flag also keeps the kernel from merging the mapping with a neighbour of other flags, so its own line of
    ``numa_maps`` stays its own. False where refused."""
    return bool(_libc().madvise(address, length, 16) == 0)


def ask_huge(address: int, length: int) -> bool:
    """Ask for transparent huge pages in the range (``MADV_HUGEPAGE``), before its pages are made: the kernel then
    faults it a huge page at a time where ``transparent_hugepage/enabled`` allows. False where refused."""
    return bool(_libc().madvise(address, length, 14) == 0)


def huge_bytes(address: int) -> int | None:
    """The bytes of this process's mapping that begins at ``address`` held in transparent huge pages
    (``AnonHugePages`` of its entry in ``/proc/self/smaps``); None where no mapping begins there. The file is read
    up to that mapping's entry only."""
    wanted = f"{address:x}-"
    found = False
    with open("/proc/self/smaps", encoding="ascii", errors="replace") as smaps:
        for line in smaps:
            if found and line.startswith("AnonHugePages:"):
                fields = line.split()
                return int(fields[1]) * 1024 if len(fields) >= 2 and fields[1].isdigit() else None
            if not line[:1].isupper():  # an entry's first line: its range (lower-case hex), then its fields
                if found:
                    return None
                found = line.startswith(wanted)
    return None


def lock(address: int, length: int) -> None:
    """``mlock`` the range (OSError: ENOMEM or EPERM past ``RLIMIT_MEMLOCK``)."""
    _checked(_libc().mlock(address, length), "mlock")


def unlock(address: int, length: int) -> None:
    _checked(_libc().munlock(address, length), "munlock")


def page_nodes(address: int, length: int, page_size: int) -> tuple[dict[int, int], int]:
    """Where the pages of the range are, by ``move_pages(2)`` asked for no move (a query): node -> pages asked
    about, and the stride (1: every page; for ranges of more than 4 Mi pages, every k-th page). Pages not
    made yet, or of no node, are left out."""
    import array
    import ctypes
    from collections import Counter

    number = _MOVE_PAGES.get(os.uname().machine)
    if number is None:
        raise OSError(errno.ENOSYS, "move_pages is not known on this architecture")
    total = length // page_size
    stride = max(1, -(-total // _MOST_PAGES))
    counted: Counter[int] = Counter()
    libc = _libc()
    libc.syscall.restype = ctypes.c_long
    chunk = 1 << 16
    step = stride * page_size
    for first in range(0, total, stride * chunk):
        count = min(chunk, -(-(total - first) // stride))
        start = address + first * page_size
        # The addresses made and the answers counted through buffers, each loop in C, not bytecode (a Python loop
        # over 65,536 pages cost a third of the fill it read back).
        addresses = array.array("Q", range(start, start + count * step, step))
        status = (ctypes.c_int * count)()
        if libc.syscall(ctypes.c_long(number), 0, ctypes.c_ulong(count), (ctypes.c_void_p * count).from_buffer(
                addresses), None, status, 0) != 0:
            _checked(-1, "move_pages")
        counted.update(memoryview(status).cast("B").cast("i"))
    found = {node: n for node, n in counted.items() if node >= 0}
    return found, stride
