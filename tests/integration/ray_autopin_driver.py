"""A Ray job with NUMAPIN_AUTOPIN=1 in its environment only: no numapin call anywhere in it.

Two GPU actors, a GPU task run several times (a reused worker), and a CPU-only actor each
report every thread's mask and numapin's record of them.
"""

from __future__ import annotations

import json
import os

import ray


def _report() -> dict[str, object]:
    import report

    from numapin.pinning import record

    entry = record.lookup(os.getpid())
    return {"pid": os.getpid(), "cuda": os.environ.get("CUDA_VISIBLE_DEVICES"), "masks": report.masks(),
            "how": None if entry is None else entry.how}


@ray.remote(num_gpus=1)
class GpuActor:
    def where(self) -> dict[str, object]:
        return _report()


@ray.remote(num_gpus=0)
class CpuActor:
    def where(self) -> dict[str, object]:
        return _report()


@ray.remote(num_gpus=1)
def gpu_task() -> dict[str, object]:
    return _report()


if __name__ == "__main__":
    ray.init(num_cpus=4, num_gpus=2, include_dashboard=False, object_store_memory=100 << 20, log_to_driver=False)
    try:
        # Tasks first, one at a time: Ray reuses their worker, handing it a GPU before each. The
        # actors after them (an actor holds its GPU for its lifetime: a task could not get one).
        tasks = [ray.get(gpu_task.remote()) for _ in range(4)]  # type: ignore[attr-defined]
        gpu_actors = [GpuActor.remote() for _ in range(2)]  # type: ignore[attr-defined]
        cpu_actor = CpuActor.remote()  # type: ignore[attr-defined]
        found = {"tasks": tasks, "actors": ray.get([a.where.remote() for a in gpu_actors]),
                 "cpu": ray.get(cpu_actor.where.remote())}
        print(json.dumps(found))
    finally:
        ray.shutdown()
