"""SGLang's own configure_subprocess (its real numa_utils.py) spawning one worker per GPU."""

from __future__ import annotations

import json
import multiprocessing
import multiprocessing.spawn  # SGLang imports it elsewhere; numa_utils reads it
import os


def report(queue: multiprocessing.Queue) -> None:  # type: ignore[type-arg]
    masks = {t: sorted(os.sched_getaffinity(int(t))) for t in os.listdir("/proc/self/task")}
    queue.put({"masks": masks, "marker": os.environ.get("NUMAPIN_APPLIED")})


if __name__ == "__main__":
    multiprocessing.set_start_method("spawn")
    from sglang.srt.server_args import ServerArgs
    from sglang.srt.utils import numa_utils

    args = ServerArgs()
    args.numa_node = [0, 1]  # GPU 0 on node 0, GPU 1 on node 1: the pair machine
    found = []
    for gpu in (0, 1):
        with numa_utils.configure_subprocess(args, gpu):
            queue = multiprocessing.Queue()
            worker = multiprocessing.Process(target=report, args=(queue,))
            worker.start()
            found.append(queue.get(timeout=120))
            worker.join()
    # SGLang's other way in: numa_bind_to_node(node) in the process itself (its own sets one thread's mask).
    import threading

    stop = threading.Event()
    helpers = [threading.Thread(target=stop.wait) for _ in range(3)]
    for helper in helpers:
        helper.start()
    numa_utils.numa_bind_to_node(1)
    bound = {t: sorted(os.sched_getaffinity(int(t))) for t in os.listdir("/proc/self/task")}
    stop.set()
    for helper in helpers:
        helper.join()
    print(json.dumps({"workers": found, "bound": bound}))
