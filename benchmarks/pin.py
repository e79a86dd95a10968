"""Pinning latency with 10, 100 and 1000 live threads, side by side.

Three ways of moving every thread of this process, measured in the same run,
interleaved call by call so that the machine's noise falls on all of them:

- floor: a bare loop of ``os.sched_setaffinity`` over ``/proc/self/task``;
- converging floor: the same loop plus the two things correctness needs, a
  read of each mask and a second listing that catches threads born meanwhile;
- confirming floor: the converging floor plus the one more listing numapin's
  contract makes (it stops only after two listings in a row find nobody new);
- numapin: ``numapin.pin(cpus=...)``, which also reads every thread's mask to
  classify it, records the outcome per thread and makes a convergence pass
  (policy ``override``, since the other two leave masks numapin did not set);
- PyTorch: the all-thread binder of ``torch/numa/binding.py``, when torch is
  installed (``pip install torch==2.13.0``), skipped with a message otherwise.

numapin's time includes the record each changing pin writes for numapin's tools
(numapin.pinning.record), in a folder on tmpfs as ``/run`` is on a host (this
benchmark's own, on /dev/shm); the "record" column is that write alone.

Each call alternates between two targets, so every call really moves every
thread. A second table repeats numapin against PyTorch's binder with large
masks (112 CPU ids each, as one socket of a DGX H100), numapin reading a
synthetic DGX H100 so that such masks are valid placements: the kernel keeps
only the CPUs this machine has, but both tools pass the whole mask on every
call. Run: python benchmarks/pin.py
"""

from __future__ import annotations

import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import numapin
from numapin.base.environment import RUNTIME_DIR
from numapin.cpuset import CpuSet
from numapin.facts import synthetic as machines
from numapin.kernel.affinity import Outcome

ROUNDS = 41


def floor(cpus: set[int]) -> None:
    for name in os.listdir("/proc/self/task"):
        try:  # the bare floor: contextlib.suppress costs more than the syscall
            os.sched_setaffinity(int(name), cpus)
        except OSError:
            pass


def _converge(cpus: set[int], empty_listings: int) -> None:
    """Set each thread's mask where it differs; list again until ``empty_listings`` in a row find nobody new."""
    seen: set[int] = set()
    fresh = [int(name) for name in os.listdir("/proc/self/task")]
    empty = 0
    while empty < empty_listings:
        for tid in fresh:
            seen.add(tid)
            try:
                if os.sched_getaffinity(tid) != cpus:
                    os.sched_setaffinity(tid, cpus)
            except OSError:
                pass
        fresh = [tid for tid in map(int, os.listdir("/proc/self/task")) if tid not in seen]
        empty = 0 if fresh else empty + 1


def converging_floor(cpus: set[int]) -> None:
    """The floor plus what correctness needs: read each mask, and list again for threads born meanwhile."""
    _converge(cpus, 1)


def confirming_floor(cpus: set[int]) -> None:
    """The converging floor, plus the listing numapin's contract adds: stop only after two listings in a row
    find nobody new (a clone in flight during the first shows up in the second)."""
    _converge(cpus, 2)


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


def large_masks(allowed: list[int], rounds: int) -> None:
    """numapin and PyTorch's binder with masks of 112 CPU ids, 1000 threads alive (started by the caller)."""
    binder = torch_binder()
    if binder is None:
        return
    # Each target holds one CPU this machine has and 111 it may not: the kernel applies the intersection.
    targets = [{allowed[0], *range(64, 175)}, {allowed[1], *range(175, 286)}]
    with tempfile.TemporaryDirectory() as tmp:
        root = machines.write(machines.synthetic(288), Path(tmp) / "root")
        calls: dict[str, Callable[[set[int]], None]] = {
            "numapin": lambda cpus: numapin.pin(cpus=CpuSet(cpus), policy="override", root=root),
            "pytorch": binder,
        }
        times: dict[str, list[float]] = {name: [] for name in calls}
        for round_ in range(rounds):
            for offset, name in enumerate(calls if round_ % 2 else reversed(list(calls))):
                start = time.perf_counter()
                calls[name](targets[(round_ + offset) % 2])
                times[name].append(time.perf_counter() - start)
    medians = {name: statistics.median(values) for name, values in times.items()}
    print(f"large masks (112 CPU ids), {len(os.listdir('/proc/self/task'))} threads: numapin "
          f"{medians['numapin'] * 1e6:.0f} us, pytorch {medians['pytorch'] * 1e6:.0f} us, "
          f"numapin/pytorch {medians['numapin'] / medians['pytorch']:.2f}")


def record(cpus: set[int]) -> None:
    """The record a changing pin writes (numapin.pinning.record), alone."""
    mask = CpuSet(cpus)
    record.publish(record.stamp(record.Record(os.getpid(), START, "pin", mask, mask)))


START = record.start_time(os.getpid()) or 0


def main() -> None:
    allowed = sorted(os.sched_getaffinity(0))
    if len(allowed) < 2:
        sys.exit("needs at least two CPUs to move threads between")
    # The records go where a host keeps them: tmpfs (/run is one on a host, not always in a container).
    os.environ[RUNTIME_DIR] = tempfile.mkdtemp(prefix="numapin-bench-records-",
                                               dir="/dev/shm" if os.access("/dev/shm", os.W_OK) else None)
    targets = [{allowed[0]}, {allowed[1]}]
    methods: dict[str, Callable[[set[int]], None]] = {
        "floor": floor, "converging": converging_floor, "confirming": confirming_floor, "numapin": with_numapin,
        "record": record}
    binder = torch_binder()
    if binder is None:
        print("PyTorch not installed: its binder is skipped (pip install torch==2.13.0)")
    else:
        methods["pytorch"] = binder
    stop = threading.Event()
    workers: list[threading.Thread] = []
    original = set(allowed)
    print(f"{'threads':>7} " + " ".join(f"{name + ' us':>12}" for name in methods)
          + f" {'numapin/floor':>14} {'numapin/converging':>19} {'numapin/confirming':>19}"
          + (f" {'numapin/pytorch':>16}" if binder else ""))
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
            line += (f" {medians['numapin'] / medians['floor']:14.2f}"
                     f" {medians['numapin'] / medians['converging']:19.2f}"
                     f" {medians['numapin'] / medians['confirming']:19.2f}")
            if binder:
                line += f" {medians['numapin'] / medians['pytorch']:16.2f}"
            print(line)
        floor(original)
        large_masks(allowed, ROUNDS)
    finally:
        stop.set()
        for worker in workers:
            worker.join()
        floor(original)
        record.withdraw()
        shutil.rmtree(os.environ[RUNTIME_DIR], ignore_errors=True)
    print("ratios below 1 mean numapin is faster; numapin also reads and classifies every thread's mask")


if __name__ == "__main__":
    main()
