"""A seccomp filter that refuses the memory-policy calls with EPERM, as Docker's default profile does.

moby's ``profiles/seccomp/default.json`` allows ``mbind``, ``set_mempolicy`` and ``get_mempolicy`` only to a
container given CAP_SYS_NICE, and ``migrate_pages`` and ``move_pages`` to none; a refused call fails with
EPERM (the profile's ``defaultErrnoRet``). This filter is that profile without CAP_SYS_NICE, for these calls,
every other call allowed. It is built here as a classic BPF program (``struct sock_filter``) and installed
with ``prctl`` (no libseccomp: Debian's Python binding is for Debian's Python), after ``no_new_privs``, so
any user may install it; it holds for the process and everything it execs, for good.

``python seccomp_filter.py PROGRAM ARGS...`` runs PROGRAM under it.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import struct
import sys

#: The refused calls' numbers, and the audit architecture the kernel reports, per machine (the kernel's
#: arch/x86/entry/syscalls/syscall_64.tbl and include/uapi/asm-generic/unistd.h; linux/audit.h).
CALLS = {
    "x86_64": (0xC000003E, {"mbind": 237, "set_mempolicy": 238, "get_mempolicy": 239, "migrate_pages": 256,
                            "move_pages": 279, "set_mempolicy_home_node": 450}),
    "aarch64": (0xC00000B7, {"mbind": 235, "get_mempolicy": 236, "set_mempolicy": 237, "migrate_pages": 238,
                             "move_pages": 239, "set_mempolicy_home_node": 450}),
}

_LD_ABS_W, _JEQ_K, _RET_K = 0x20, 0x15, 0x06
_ALLOW, _ERRNO = 0x7FFF0000, 0x00050000
_PR_SET_SECCOMP, _PR_SET_NO_NEW_PRIVS, _SECCOMP_MODE_FILTER = 22, 38, 2


def _op(code: int, k: int, jt: int = 0, jf: int = 0) -> bytes:
    return struct.pack("=HBBI", code, jt, jf, k)


def program(arch: int, numbers: list[int]) -> bytes:
    """The filter: another architecture's calls allowed (not this table's numbers), each number EPERM."""
    n = len(numbers)
    ops = [_op(_LD_ABS_W, 4), _op(_JEQ_K, arch, 0, n + 1), _op(_LD_ABS_W, 0)]
    ops += [_op(_JEQ_K, number, n - k, 0) for k, number in enumerate(numbers)]
    ops += [_op(_RET_K, _ALLOW), _op(_RET_K, _ERRNO | errno.EPERM)]
    return b"".join(ops)


def refuse_memory_policy() -> None:
    """Install the filter in this process (and all it execs and forks from now on). Raises OSError."""
    arch, calls = CALLS[platform.machine()]
    code = program(arch, sorted(calls.values()))
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS)")
    filters = ctypes.create_string_buffer(code)

    class Fprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    prog = Fprog(len(code) // 8, ctypes.addressof(filters))
    if libc.prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.byref(prog), 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_SECCOMP)")


def supported() -> bool:
    return platform.machine() in CALLS


if __name__ == "__main__":
    refuse_memory_policy()
    os.execvp(sys.argv[1], sys.argv[1:])
