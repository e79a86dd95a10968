"""A Ray job: a local cluster declaring two GPUs, two actors of one GPU each, each calling numapin.pin()."""

from __future__ import annotations

import json
import os

import ray


@ray.remote(num_gpus=1)
class Worker:
    def place(self) -> dict[str, object]:
        import report

        warnings = report.Warnings()
        again = report.pin_again()  # the first pin: Ray gives no local rank, CUDA_VISIBLE_DEVICES one GPU
        return {"cuda": os.environ["CUDA_VISIBLE_DEVICES"], "pin": again, "masks": report.masks(),
                "warnings": warnings.messages}


if __name__ == "__main__":
    # Ray's object store wants at least 75 MiB; the dashboard and log forwarding are not needed.
    ray.init(num_cpus=2, num_gpus=2, include_dashboard=False, object_store_memory=100 << 20, log_to_driver=False)
    try:
        actors = [Worker.remote() for _ in range(2)]  # type: ignore[attr-defined]
        print(json.dumps(ray.get([a.place.remote() for a in actors])))
    finally:
        ray.shutdown()
