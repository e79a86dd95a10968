"""A parent starting two workers by multiprocessing spawn, as TensorRT-LLM starts its own.

Each worker has six threads alive, imports the TensorRT-LLM-shaped package's
worker module (which imports ``configure_cpu_affinity`` by name) and calls it
twice for its GPU, as a process that builds two ``LLM()`` objects does. It
reports every thread's mask and every warning. Nothing here mentions numapin:
whether the function is numapin's depends on the environment alone.
"""

from __future__ import annotations

import json
import multiprocessing
import threading
from typing import Any


def work(gpu: int, results: Any) -> None:
    import report

    warnings = report.Warnings()
    stop = threading.Event()
    others = [threading.Thread(target=stop.wait) for _ in range(5)]
    for t in others:
        t.start()
    from tensorrt_llm.worker import configure_cpu_affinity, start

    start(gpu)
    start(gpu)
    masks = report.masks()
    stop.set()
    results.put({"gpu": gpu, "masks": masks, "warnings": warnings.messages,
                 "numapin": hasattr(configure_cpu_affinity, "__numapin_original__")})


if __name__ == "__main__":
    spawn = multiprocessing.get_context("spawn")
    queue = spawn.Queue()
    workers = [spawn.Process(target=work, args=(gpu, queue)) for gpu in (0, 1)]
    for w in workers:
        w.start()
    found = sorted((queue.get(timeout=120) for _ in workers), key=lambda r: r["gpu"])
    for w in workers:
        w.join()
    print(json.dumps(found))
