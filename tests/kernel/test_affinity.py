"""The kernel's affinity calls a walk uses: Python's own for small masks, raw cpu_set_t buffers for large ones.

Real syscalls on real threads, each test in a forked child (no pin leaks).
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

import numapin
from conftest import in_child
from live import ALL, masks
from numapin.cpuset import CpuSet
from numapin.facts import synthetic as machines
from numapin.kernel.affinity import LinuxThreads, Outcome

FIRST = min(ALL)
#: One CPU this machine has and a hundred ids past it: the kernel keeps the intersection.
LARGE = CpuSet({FIRST, *range(max(ALL) + 100, max(ALL) + 200)})


def test_small_masks_use_pythons_own_calls_on_a_machine_of_up_to_64_cpus() -> None:
    get, to_cpuset, put, arg, names = LinuxThreads().walk_calls(CpuSet({FIRST}))
    python_calls = get is os.sched_getaffinity and put is os.sched_setaffinity and arg == [FIRST]
    # On a machine with more CPU ids, even a small target goes through raw buffers (Python's calls
    # would convert a set of every CPU each time): either way, one of the two, never a mix.
    assert python_calls == ((os.cpu_count() or 1) <= 64)
    assert to_cpuset(get(0)) == CpuSet(os.sched_getaffinity(0))
    listed = names()  # the thread ids as the kernel writes them: this thread's among them
    assert str(threading.get_native_id()) in listed and all(name.isdigit() for name in listed)


def test_large_masks_go_through_raw_buffers() -> None:
    def child() -> tuple[bool, set[int], set[int]]:
        get, to_cpuset, put, arg, _ = LinuxThreads().walk_calls(LARGE)
        tid = threading.get_native_id()
        put(tid, arg)
        return get is not os.sched_getaffinity, set(to_cpuset(get(tid))), os.sched_getaffinity(0)

    raw, read, live = in_child(child)
    assert raw and read == live == {FIRST}


def test_a_pin_with_a_large_mask_moves_every_thread(tmp_path: Path) -> None:
    # A synthetic machine holding every id of LARGE (its sizes come in multiples of 4).
    root = machines.write(machines.synthetic((LARGE.last() + 4) // 4 * 4), tmp_path / "root")

    def child() -> tuple[int, set[frozenset[int]]]:
        stop = threading.Event()
        workers = [threading.Thread(target=stop.wait) for _ in range(8)]
        for w in workers:
            w.start()
        try:
            # The real kernel, handed in: a machine larger than this host is otherwise a rehearsal, pinned nowhere.
            result = numapin.pin(cpus=LARGE, policy="override", root=root, kernel=LinuxThreads())
            return result.count(Outcome.PINNED), {frozenset(m) for m in masks().values()}
        finally:
            stop.set()
            for w in workers:
                w.join()

    pinned, found = in_child(child)
    assert pinned >= 9 and found == {frozenset({FIRST})}
