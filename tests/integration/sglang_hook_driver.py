"""SGLang's own scheduler start (its real numa_utils.configure_subprocess, its defaults as the wheel ships them)
under NUMAPIN_AUTOPIN=1: a scheduler per GPU, each naming its GPU as SGLang's ModelRunner does. Prints one JSON line:
what the server's environment holds after numapin's start-up hook, what SGLang's binder decided, and each
scheduler's masks, record, warnings and ps row."""

from __future__ import annotations

import json
import multiprocessing
import multiprocessing.spawn  # SGLang imports it elsewhere; numa_utils reads it
import os
import subprocess
import sys


def scheduler(gpu: int, queue: multiprocessing.Queue) -> None:  # type: ignore[type-arg]
    import report

    warnings = report.Warnings()
    import torch

    from numapin.pinning import record

    try:
        torch.get_device_module("cuda").set_device(gpu)  # SGLang's ModelRunner; a CPU build refuses after numapin
    except Exception:
        pass
    found = record.lookup(os.getpid())
    ps = subprocess.run([sys.executable, "-m", "numapin", "ps", str(os.getpid()), "--json"], capture_output=True,
                        text=True, timeout=120)
    row = next(w for w in json.loads(ps.stdout)["workers"] if w["pid"] == os.getpid())
    queue.put({"masks": report.masks(), "how": None if found is None else found.how, "warnings": warnings.messages,
               "ps": {k: row[k] for k in ("placed_by", "gpu", "verdict")}})


if __name__ == "__main__":
    multiprocessing.set_start_method("spawn")
    from sglang.srt.server_args import ServerArgs
    from sglang.srt.utils import numa_utils

    args = ServerArgs()  # no --numa-node: SGLang's automatic binding decides
    decided = [numa_utils.get_numa_node_if_available(args, gpu) for gpu in (0, 1)]
    found = []
    for gpu in (0, 1):
        with numa_utils.configure_subprocess(args, gpu):
            queue = multiprocessing.Queue()
            worker = multiprocessing.Process(target=scheduler, args=(gpu, queue))
            worker.start()
            found.append(queue.get(timeout=300))
            worker.join()
    print(json.dumps({"auto": os.environ.get("SGLANG_AUTO_NUMA_BIND"), "sglang_decided": decided,
                      "schedulers": found}))
