"""A task under a launcher: two more threads, then a report — its rank as the launcher gave it, every
thread's mask, and `numapin threads PID --gpu RANK --check` run on it from outside (another process).

The report goes to a file of its own, REPORTS/RANK.json: launchers forward their tasks' output in
chunks that may split a line between two tasks."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time

RANK_VARIABLES = ("SLURM_LOCALID", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID")

if __name__ == "__main__":
    stop = threading.Event()
    for _ in range(2):
        threading.Thread(target=stop.wait, daemon=True).start()
    time.sleep(0.2)
    rank = next(int(os.environ[v]) for v in RANK_VARIABLES if os.environ.get(v, "").strip())
    masks = {tid: sorted(os.sched_getaffinity(int(tid))) for tid in os.listdir("/proc/self/task")}
    check = subprocess.run([sys.executable, "-m", "numapin", "threads", str(os.getpid()), "--gpu", str(rank),
                            "--check"], capture_output=True, text=True, timeout=120)
    report = {"rank": rank, "masks": masks, "check": check.returncode, "checked": check.stdout,
              "bind": os.environ.get("SLURM_CPU_BIND")}
    with open(os.path.join(os.environ["NUMAPIN_TEST_REPORTS"], f"{rank}.json"), "w") as f:
        json.dump(report, f)
    stop.set()
