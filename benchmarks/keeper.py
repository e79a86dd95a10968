"""What keeping a 1,000-thread worker costs: one look, side by side with the scan's floor, and the daemon's CPU.

A worker process pinned by numapin starts 1,000 threads. Then, measured here:

- one look of the keeper (``Keeper.check``: the cgroup, the task list, every thread's mask, compared
  with the last look) against the floor any such look must pay: listing ``/proc/PID/task`` and one
  ``sched_getaffinity`` per thread, nothing else; in alternated pairs, the ratio taken pair by pair;
- the share of one CPU the keeper's daemon thread (``keep()``, the default period) uses inside the
  worker over a stretch of seconds, read from that thread's own CPU time (``/proc/PID/task/TID/stat``).

The issue's bound: at most 0.5% of one CPU at the default period.
Run: python benchmarks/keeper.py [THREADS] [SECONDS] [PAIRS]
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time

from numapin.facts.machine import cached
from numapin.pinning.keeper import DEFAULT_PERIOD
from numapin.tools.keep import keeper_of

THREADS = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
SECONDS = float(sys.argv[2]) if len(sys.argv) > 2 else 20.0
PAIRS = int(sys.argv[3]) if len(sys.argv) > 3 else 30

WORKER = """
import os, sys, threading, time
import numapin
numapin.pin(cpus=sorted(os.sched_getaffinity(0)), keep=sys.argv[2] == "keep")
stop = threading.Event()
for _ in range(int(sys.argv[1])):
    threading.Thread(target=stop.wait, daemon=True).start()
print(threading.get_native_id() if sys.argv[2] != "keep" else
      next(t.native_id for t in threading.enumerate() if t.name == "numapin-keeper"), flush=True)
sys.stdin.read()
"""


def started(keep: bool) -> tuple[subprocess.Popen[str], int]:
    """A pinned worker with THREADS threads (and its keeper thread when ``keep``); the keeper thread's id."""
    child = subprocess.Popen([sys.executable, "-c", WORKER, str(THREADS), "keep" if keep else "no"],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None
    return child, int(child.stdout.readline())


def floor(pid: int) -> None:
    for name in os.listdir(f"/proc/{pid}/task"):
        try:
            os.sched_getaffinity(int(name))
        except OSError:
            continue


def cpu_seconds(pid: int, tid: int) -> float:
    with open(f"/proc/{pid}/task/{tid}/stat") as file:
        fields = file.read().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> None:
    os.environ.setdefault("NUMAPIN_RUNTIME_DIR", tempfile.mkdtemp(prefix="numapin-bench-"))
    child, _ = started(keep=False)
    try:
        keeper = keeper_of(child.pid, cached(None, os.environ))
        ratios, looks, floors = [], [], []
        for _ in range(PAIRS):
            start = time.perf_counter()
            floor(child.pid)
            middle = time.perf_counter()
            found = keeper.check()
            end = time.perf_counter()
            assert found == [], found  # nothing moved: a look that says nothing
            floors.append(middle - start)
            looks.append(end - middle)
            ratios.append((end - middle) / (middle - start))
    finally:
        child.kill()
        child.wait()
    print(f"{THREADS} threads, {PAIRS} alternated pairs:")
    print(f"  one look {1e3 * statistics.median(looks):.2f} ms, the floor (listing + one sched_getaffinity a "
          f"thread) {1e3 * statistics.median(floors):.2f} ms: {statistics.median(ratios):.2f}x the floor")
    print(f"  at the default period ({DEFAULT_PERIOD:g} s) one look a period is "
          f"{100 * statistics.median(looks) / DEFAULT_PERIOD:.2f}% of one CPU")

    child, tid = started(keep=True)
    try:
        before = cpu_seconds(child.pid, tid)
        time.sleep(SECONDS)
        used = cpu_seconds(child.pid, tid) - before
    finally:
        child.kill()
        child.wait()
    share = 100 * used / SECONDS
    print(f"  the keeper thread inside the worker over {SECONDS:g} s: {used * 1e3:.0f} ms of CPU, {share:.2f}% of "
          f"one CPU (bound 0.5%: {'within' if share <= 0.5 else 'OVER'}; clock ticks of 10 ms bound its precision)")


if __name__ == "__main__":
    main()
