"""vLLM's own configure_subprocess (its real numa_utils.py) spawning one worker per GPU with --numa-bind."""

from __future__ import annotations

import json
import multiprocessing
import multiprocessing.spawn  # vLLM imports it elsewhere; numa_utils reads it
import os
import sys


class ParallelConfig:
    def __init__(self) -> None:
        self.numa_bind = True
        self.numa_bind_nodes = [0, 1]  # GPU 0 on node 0, GPU 1 on node 1: the pair machine
        self.numa_bind_cpus = None

    def get_local_gpu_index(self, local_rank: int, dp_local_rank: int | None = None) -> int:
        return local_rank


class VllmConfig:
    def __init__(self) -> None:
        self.parallel_config = ParallelConfig()


def report(queue: multiprocessing.Queue) -> None:  # type: ignore[type-arg]
    masks = {t: sorted(os.sched_getaffinity(int(t))) for t in os.listdir("/proc/self/task")}
    queue.put({"masks": masks, "marker": os.environ.get("NUMAPIN_APPLIED")})


if __name__ == "__main__":
    from vllm.utils import numa_utils

    context = multiprocessing.get_context("spawn")
    found = []
    for rank in (0, 1):
        with numa_utils.configure_subprocess(VllmConfig(), rank):
            queue = context.Queue()
            worker = context.Process(target=report, args=(queue,))
            worker.start()
            found.append(queue.get(timeout=120))
            worker.join()
    print(json.dumps({"workers": found, "executable": sys.executable}))
