"""numapin.allocating_for: the calling thread alone on a GPU's node for a block, given back exactly. Real threads,
real masks and memory policies, each test in a child process (where pages land: the guest tier's checks)."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

import live
import numapin
from child import in_child
from numapin.cpuset import CpuSet


def _mask() -> set[int]:
    return set(os.sched_getaffinity(0))


def test_the_block_moves_the_calling_thread_alone_and_gives_its_mask_back(pair_root: Path) -> None:
    def child() -> dict[str, object]:
        numapin.pin(cpus=sorted(live.NODE0))
        stop = threading.Event()
        other = threading.Thread(target=stop.wait)
        other.start()
        assert other.native_id is not None
        with numapin.allocating_for(gpu=1, memory="none") as applied:
            inside, others = _mask(), set(os.sched_getaffinity(other.native_id))
            # A process-wide pin meanwhile leaves the block's thread where the block put it.
            numapin.pin(cpus=sorted(live.NODE0))
            after_pin = _mask()
        after = _mask()
        stop.set()
        other.join()
        return {"inside": inside, "others": others, "after_pin": after_pin, "after": after,
                "cpus": applied.cpus, "nodes": applied.nodes}

    got = in_child(child)
    assert got["inside"] == live.NODE1 and got["cpus"] == CpuSet(live.NODE1) and got["nodes"] == CpuSet([1])
    assert got["others"] == live.NODE0, "another thread was moved"
    assert got["after_pin"] == live.NODE1, "a process-wide pin undid the block"
    assert got["after"] == live.NODE0, "the thread did not get its mask back"


def test_blocks_nest_and_each_gives_back_its_own(pair_root: Path) -> None:
    def child() -> list[set[int]]:
        seen = [_mask()]
        with numapin.allocating_for(gpu=1, memory="none"):
            seen.append(_mask())
            with numapin.allocating_for(gpu=0, memory="none"):
                seen.append(_mask())
            seen.append(_mask())
        seen.append(_mask())
        return seen

    assert in_child(child) == [set(live.BASELINE), live.NODE1, live.NODE0, live.NODE1, set(live.BASELINE)]


def test_one_block_entered_by_two_threads_keeps_each_threads_own(pair_root: Path) -> None:
    def child() -> dict[str, set[int]]:
        block = numapin.allocating_for(gpu=1, memory="none")
        found: dict[str, set[int]] = {}
        entered, leave = threading.Barrier(3), threading.Event()

        def work(name: str, start: set[int]) -> None:
            os.sched_setaffinity(0, start)
            with block:
                entered.wait()
                found[f"{name} inside"] = _mask()
                leave.wait()
            found[f"{name} after"] = _mask()

        starts = (("a", live.NODE0), ("b", set(live.BASELINE)))
        threads = [threading.Thread(target=work, args=start) for start in starts]
        for t in threads:
            t.start()
        entered.wait()  # both inside at once
        leave.set()
        for t in threads:
            t.join()
        return found

    got = in_child(child)
    assert got["a inside"] == got["b inside"] == live.NODE1
    assert got["a after"] == live.NODE0 and got["b after"] == set(live.BASELINE)


def test_the_memory_policy_is_set_for_the_block_and_given_back_exactly() -> None:
    # A real memory node of this machine, whatever it is: the block binds the thread's policy to it.
    node = min(n.id for n in live.TOPOLOGY.nodes if n.cpus & CpuSet(live.BASELINE))

    def child() -> dict[str, object]:
        from numapin.pinning.memory import get_mempolicy

        before = get_mempolicy()
        with numapin.allocating_for(node=node, memory="bind") as applied:
            inside = get_mempolicy()
        return {"before": before, "inside": inside, "after": get_mempolicy(), "memory": str(applied.memory)}

    got = in_child(child)
    assert got["inside"][0].name == "BIND" and got["inside"][1] == CpuSet([node]), got
    assert got["after"] == got["before"], got


@pytest.mark.parametrize(("args", "kwargs", "said"), [
    ((), {}, "one of the two"),
    ((0,), {"node": 0}, "one of the two"),
    ((-1,), {}, "a gpu is a number from 0"),
    ((True,), {}, "a gpu is a number from 0"),
    (("1",), {}, "a gpu is a number from 0"),
    ((), {"node": 64}, "the nodes here are"),
    ((7,), {}, "this process sees 2 GPU(s)"),
    ((0,), {"memory": "interleave"}, "memory mode"),
])
def test_a_callers_mistake_is_named_before_anything_changes(pair_root: Path, args: tuple[object, ...],
                                                             kwargs: dict[str, object], said: str) -> None:
    def child() -> tuple[str, set[int]]:
        before = _mask()
        try:
            numapin.allocating_for(*args, **kwargs)  # type: ignore[arg-type]
        except numapin.UsageError as exc:
            return str(exc), before ^ _mask()
        return "", set()

    message, changed = in_child(child)
    assert said in message and changed == set(), message
