"""How the topology reader's cost grows with the machine.

Prints the median time to read the largest real capture (by CPU count) and
synthetic machines of 128 to 1024 CPUs, with the cost per CPU: a flat
per-CPU column means reading grows linearly. Run: python benchmarks/topology.py
"""

from __future__ import annotations

import statistics
import tarfile
import tempfile
import time
from pathlib import Path

from numapin import machines, read_topology

FIXTURES = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "hwloc-linux"
REPEATS = 7


def median_seconds(root: Path) -> float:
    read_topology(root)  # warm the page cache
    times = []
    for _ in range(REPEATS):
        start = time.perf_counter()
        read_topology(root)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def largest_capture(workdir: Path) -> tuple[str, Path] | None:
    if not FIXTURES.is_dir():
        return None
    best: tuple[int, str, Path] | None = None
    for tarball in sorted(FIXTURES.glob("*.tar.bz2")):
        dest = workdir / tarball.name
        with tarfile.open(tarball) as archive:
            top = archive.getnames()[0].split("/")[0]
            archive.extractall(dest, filter="tar")
        cpus = len(read_topology(dest / top).online)
        if best is None or cpus > best[0]:
            best = (cpus, tarball.name[: -len(".tar.bz2")], dest / top)
    return None if best is None else (best[1], best[2])


def main() -> None:
    base = "/dev/shm" if Path("/dev/shm").is_dir() else None
    with tempfile.TemporaryDirectory(dir=base) as tmp:
        work = Path(tmp)
        rows: list[tuple[str, int, float]] = []
        capture = largest_capture(work)
        if capture is not None:
            name, root = capture
            rows.append((f"capture {name}", len(read_topology(root).online), median_seconds(root)))
        else:
            print(f"(no captures at {FIXTURES}; synthetic machines only)")
        for cpus in (128, 256, 512, 1024):
            root = machines.write(machines.synthetic(cpus), work / f"synthetic-{cpus}")
            rows.append((f"synthetic {cpus}", cpus, median_seconds(root)))
    smallest = min(r[2] / r[1] for r in rows if r[0].startswith("synthetic"))
    print(f"{'machine':40} {'CPUs':>5} {'median ms':>10} {'us/CPU':>8} {'per-CPU ratio':>14}")
    for name, cpus, seconds in rows:
        per_cpu = seconds / cpus
        print(f"{name:40} {cpus:5d} {seconds * 1e3:10.2f} {per_cpu * 1e6:8.1f} {per_cpu / smallest:14.2f}")
    print("per-CPU ratio: cost per CPU relative to the cheapest synthetic machine (1.00 = linear growth)")


if __name__ == "__main__":
    main()
