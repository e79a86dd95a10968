"""Pinning latency with 10, 100 and 1000 live threads, side by side.

Three ways of moving every thread of this process, measured in the same run,
interleaved call by call so that the machine's noise falls on all of them:

- floor: a bare loop of ``os.sched_setaffinity`` over ``/proc/self/task``;
- converging floor: the same loop plus the two things correctness needs, a
  read of each mask and a second listing that catches threads born meanwhile;
- numapin: ``numapin.pin(cpus=...)``, which also reads every thread's mask to
  classify it, records the outcome per thread and makes a convergence pass
  (policy ``override``, since the other two leave masks numapin did not set);
- PyTorch: the all-thread binder of ``torch/numa/binding.py``, when torch is
  installed (``pip install torch==2.13.0``), skipped with a message otherwise.

Each call alternates between two targets, so every call really moves every
thread. Run: python benchmarks/pin.py
"""

from __future__ import annotations

import os
import statistics
import sys
import threading
import time
from collections.abc import Callable

import numapin
from numapin import CpuSet
from numapin.threads import Outcome

ROUNDS = 41


def floor(cpus: set[int]) -> None:
    for name in os.listdir("/proc/self/task"):
        try:  # noqa: SIM105 - the bare floor: contextlib.suppress costs more than the syscall
            os.sched_setaffinity(int(name), cpus)
        except OSError:
            pass


def converging_floor(cpus: set[int]) -> None:
    """The floor plus what correctness needs: read each mask, and list again for threads born meanwhile."""
    seen: set[int] = set()
    fresh = [int(name) for name in os.listdir("/proc/self/task")]
    while fresh:
        for tid in fresh:
            seen.add(tid)
            try:
                if os.sched_getaffinity(tid) != cpus:
                    os.sched_setaffinity(tid, cpus)
            except OSError:
                pass
        fresh = [tid for tid in map(int, os.listdir("/proc/self/task")) if tid not in seen]


def with_numapin(cpus: set[int]) -> None:
    result = numapin.pin(cpus=CpuSet(cpus), policy="override")
    assert result.count(Outcome.FAILED) == 0


def torch_binder() -> Callable[[set[int]], None] | None:
    try:
        from torch.numa import binding
    except ImportError:
        return None
    bind = binding._bind_all_threads_in_current_process_to_logical_cpus

    def run(cpus: set[int]) -> None:
        bind(logical_cpu_indices=cpus)

    return run


def main() -> None:
    allowed = sorted(os.sched_getaffinity(0))
    if len(allowed) < 2:
        sys.exit("needs at least two CPUs to move threads between")
    targets = [{allowed[0]}, {allowed[1]}]
    methods: dict[str, Callable[[set[int]], None]] = {
        "floor": floor, "converging": converging_floor, "numapin": with_numapin}
    binder = torch_binder()
    if binder is None:
        print("PyTorch not installed: its binder is skipped (pip install torch==2.13.0)")
    else:
        methods["pytorch"] = binder
    stop = threading.Event()
    workers: list[threading.Thread] = []
    original = set(allowed)
    print(f"{'threads':>7} " + " ".join(f"{name + ' us':>12}" for name in methods)
          + f" {'numapin/floor':>14} {'numapin/converging':>19}" + (f" {'numapin/pytorch':>16}" if binder else ""))
    try:
        for count in (10, 100, 1000):
            while len(os.listdir("/proc/self/task")) < count:
                worker = threading.Thread(target=stop.wait, daemon=True)
                worker.start()
                workers.append(worker)
            times: dict[str, list[float]] = {name: [] for name in methods}
            calls = 0
            for round_ in range(ROUNDS):
                names = list(methods)
                # Rotate the order so that no method always runs first.
                names = names[round_ % len(names):] + names[: round_ % len(names)]
                for name in names:
                    target = targets[calls % 2]
                    calls += 1
                    start = time.perf_counter()
                    methods[name](target)
                    times[name].append(time.perf_counter() - start)
            medians = {name: statistics.median(values) for name, values in times.items()}
            line = f"{len(os.listdir('/proc/self/task')):7d} " + " ".join(
                f"{medians[name] * 1e6:12.0f}" for name in methods)
            line += f" {medians['numapin'] / medians['floor']:14.2f} {medians['numapin'] / medians['converging']:19.2f}"
            if binder:
                line += f" {medians['numapin'] / medians['pytorch']:16.2f}"
            print(line)
    finally:
        stop.set()
        for worker in workers:
            worker.join()
        floor(original)
    print("ratios below 1 mean numapin is faster; numapin also reads and classifies every thread's mask")


if __name__ == "__main__":
    main()
