"""The kernel interface for NUMA memory: ``get_mempolicy``, ``set_mempolicy``, ``migrate_pages``, ``mbind``.

Every memory call numapin makes goes through a :class:`MemoryKernel`, so the
memory logic can be driven by the real kernel (:class:`LinuxMemory`, direct
syscalls through ctypes on x86_64 and aarch64: no libnuma needed) or, in
tests, by a model that refuses on demand. Calls take and return node sets,
never raw buffers, and raise :class:`OSError` as the kernel would.
"""

from __future__ import annotations

import errno
import os

from ..base.choices import Numbered
from ..cpuset import CpuSet

TYPE_CHECKING = False
if TYPE_CHECKING:
    import ctypes
    from typing import Protocol
else:
    Protocol = object  # the protocol is for type checkers; at run time any object with these methods serves

__all__ = ["KernelMemoryPolicy", "LinuxMemory", "MemoryKernel"]

# (set_mempolicy, get_mempolicy, migrate_pages, mbind) by machine.
_SYSCALLS = {
    "x86_64": (238, 239, 256, 237),
    "aarch64": (237, 236, 238, 235),
}
# Mode flags the kernel may OR into the mode it reports.
_MODE_FLAGS = (1 << 15) | (1 << 14) | (1 << 13)
_MASK_WORDS = 16  # 1024 nodes: above any real nr_node_ids
_WORD_BITS = 64  # an unsigned long on the 64-bit machines of _SYSCALLS (ctypes, which could say, loads on first call)
_MAXNODE = _MASK_WORDS * _WORD_BITS + 1


class KernelMemoryPolicy(Numbered):
    """The kernel's memory policy modes (``MPOL_*``)."""

    DEFAULT = 0
    PREFERRED = 1
    BIND = 2
    INTERLEAVE = 3
    LOCAL = 4
    PREFERRED_MANY = 5


class MemoryKernel(Protocol):
    """The three calls memory placement needs; each raises OSError as the kernel would."""

    def get_mempolicy(self) -> tuple[KernelMemoryPolicy, CpuSet]: ...

    def set_mempolicy(self, policy: KernelMemoryPolicy, nodes: CpuSet) -> None: ...

    def migrate_pages(self, pid: int, from_nodes: CpuSet, to_nodes: CpuSet) -> int: ...


class LinuxMemory:
    """The real kernel, through ``syscall(2)``."""

    def __init__(self) -> None:
        # ctypes is imported here, by the first process that sets a policy: its import is a sixth of what a
        # worker pinned at start-up pays, and a pin that leaves memory alone makes no call at all.
        import ctypes

        if ctypes.sizeof(ctypes.c_ulong) * 8 != _WORD_BITS:  # a 32-bit interpreter: the masks would be misread
            raise OSError(errno.ENOSYS, "memory policies need a 64-bit interpreter")
        self._libc = ctypes.CDLL(None, use_errno=True)
        self._libc.syscall.restype = ctypes.c_long

    def _numbers(self) -> tuple[int, int, int, int]:
        machine = os.uname().machine
        try:
            return _SYSCALLS[machine]
        except KeyError:
            # ENOSYS: what the kernel says of a call it does not have.
            raise OSError(errno.ENOSYS, f"memory policies are not supported on this architecture ({machine})") \
                from None

    def _call(self, number: int, *args: object) -> int:
        import ctypes

        ret = self._libc.syscall(ctypes.c_long(number), *args)
        if ret < 0:
            err = ctypes.get_errno()
            raise OSError(err, os.strerror(err))
        return int(ret)

    @staticmethod
    def _mask(nodes: CpuSet) -> ctypes.Array[ctypes.c_ulong]:
        import ctypes

        words = nodes.to_words(_MASK_WORDS, word_bits=_WORD_BITS)
        return (ctypes.c_ulong * len(words))(*words)

    def get_mempolicy(self) -> tuple[KernelMemoryPolicy, CpuSet]:
        import ctypes

        mode = ctypes.c_int(0)
        buf = (ctypes.c_ulong * (_MASK_WORDS + 1))()
        self._call(self._numbers()[1], ctypes.byref(mode), buf, ctypes.c_ulong(_MAXNODE), None, ctypes.c_ulong(0))
        return KernelMemoryPolicy(mode.value & ~_MODE_FLAGS), CpuSet.from_words(list(buf), word_bits=_WORD_BITS)

    def set_mempolicy(self, policy: KernelMemoryPolicy, nodes: CpuSet) -> None:
        import ctypes

        number = self._numbers()[0]
        if nodes:
            self._call(number, ctypes.c_int(int(policy)), self._mask(nodes), ctypes.c_ulong(_MAXNODE))
        else:
            self._call(number, ctypes.c_int(int(policy)), None, ctypes.c_ulong(0))

    def migrate_pages(self, pid: int, from_nodes: CpuSet, to_nodes: CpuSet) -> int:
        import ctypes

        return self._call(self._numbers()[2], ctypes.c_int(pid), ctypes.c_ulong(_MAXNODE),
                          self._mask(from_nodes), self._mask(to_nodes))

    def mbind(self, address: int, length: int, policy: KernelMemoryPolicy, nodes: CpuSet) -> None:
        """The policy of the range ``[address, address + length)`` of this process (pages not yet made)."""
        import ctypes

        self._call(self._numbers()[3], ctypes.c_void_p(address), ctypes.c_ulong(length), ctypes.c_int(int(policy)),
                   self._mask(nodes), ctypes.c_ulong(_MAXNODE), ctypes.c_uint(0))
