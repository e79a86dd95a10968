"""numapin.compat.ray: which GPU Ray handed a task, and the pin that follows (real Ray: tests/integration)."""

from __future__ import annotations

from pathlib import Path

import pytest

import live
from conftest import in_child
from numapin.compat.ray import NOSET, gpu_of_task, pin_for_ray
from numapin.cpuset import CpuSet


@pytest.mark.parametrize(("env", "ids", "gpu"), [
    ({"CUDA_VISIBLE_DEVICES": "1"}, [], 0),  # Ray narrowed the list to the task's GPU: index 0
    ({"CUDA_VISIBLE_DEVICES": "1,0"}, [], 0),
    ({"CUDA_VISIBLE_DEVICES": ""}, [], None),  # a CPU-only task
    ({}, [], None),
    ({NOSET: "1"}, [1], 1),  # Ray left the list alone: its id is the index under no list
    ({NOSET: "1", "CUDA_VISIBLE_DEVICES": "3,1"}, ["1"], 1),  # ... or its place in the list
    ({NOSET: "1", "CUDA_VISIBLE_DEVICES": "3"}, ["1"], None),
    ({NOSET: "1"}, [], None),
])
def test_the_gpu_ray_handed_the_task(env: dict[str, str], ids: list[object], gpu: int | None) -> None:
    assert gpu_of_task(env, lambda: ids) == gpu


@pytest.mark.skipif(not live.NODE0 or not live.NODE1, reason="needs two CPUs (one per pair node)")
def test_a_worker_handed_a_gpu_is_pinned_for_it_and_again_for_another(pair_root: Path) -> None:
    def child() -> list[object]:
        import os

        from numapin.pinning import record

        seen: list[object] = []
        for cuda in ("1", "1", "0", ""):  # as Ray hands one reused worker its tasks' GPUs
            os.environ["CUDA_VISIBLE_DEVICES"] = cuda
            result = pin_for_ray(os.environ)
            entry = record.lookup(os.getpid())
            seen.append(None if result is None else (sorted(os.sched_getaffinity(0)), result.changed,
                                                     None if entry is None else entry.how))
        return seen

    one, zero = sorted(live.NODE1), sorted(live.NODE0)
    assert in_child(child) == [(one, True, "autopin"), (one, False, "autopin"), (zero, True, "autopin"), None]


@pytest.mark.skipif(not live.NODE0 or not live.NODE1, reason="needs two CPUs (one per pair node)")
def test_a_ray_worker_gets_the_whole_request_the_hook_would_apply(pair_root: Path) -> None:
    # NUMAPIN_THREADS, NUMAPIN_CORES, NUMAPIN_RESERVE and NUMAPIN_MEMORY reach Ray's workers as the
    # start-up hook's own pin applies them: one path from the request to the pin.
    def child() -> tuple[str | None, str | None, object, object, object]:
        import os

        from numapin.pinning import record

        os.environ.update({"CUDA_VISIBLE_DEVICES": "1", "NUMAPIN_THREADS": "3", "NUMAPIN_CORES": "fastest",
                           "NUMAPIN_MEMORY": "none"})
        os.environ.pop("OMP_NUM_THREADS", None)
        result = pin_for_ray(os.environ)
        entry = record.lookup(os.getpid())
        assert result is not None and entry is not None
        return (os.environ.get("OMP_NUM_THREADS"), os.environ.get("NUMAPIN_APPLIED"), entry.placement.cores.value,
                dict(entry.pools).get("OMP_NUM_THREADS"), entry.memory)

    threads, applied, cores, pools, memory = in_child(child)
    assert (threads, cores, pools, memory) == ("3", "fastest", "3", None)
    assert applied == str(CpuSet(live.NODE1))  # what children see as numapin's mask, as after the hook
