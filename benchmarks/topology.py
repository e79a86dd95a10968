"""How the topology reader's cost grows with the machine, and how close it is to reading the files raw.

Prints the median time to read the largest real capture (by CPU count) and
synthetic machines of 128 to 1024 CPUs, with the cost per CPU (a flat
per-CPU column means reading grows linearly), and beside it the median time
of plain ``os.open``/``os.read``/``os.close`` of exactly the files the reader
read (its journal), measured in the same run: the ratio is what parsing and
checking add to the reads themselves. The reader opens the files under
``sys/devices/system/cpu`` relative to that folder held open, which is cheaper
than opening them by whole path, so a second raw column does the same: the
ratio to it is the reader's own cost alone. The reader's figures are of the whole
topology (cores, packages and caches asked for: those are read on first use); the
last column is what a pin to a GPU's node reads (CPUs, nodes, cgroup), which never
asks. Run: python benchmarks/topology.py
"""

from __future__ import annotations

import os
import statistics
import tarfile
import tempfile
import time
from pathlib import Path

from numapin.facts import synthetic as machines
from numapin.facts.topology import read_topology

FIXTURES = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "hwloc-linux"
REPEATS = 15


CPU = "sys/devices/system/cpu/"


def raw_reads(paths: list[str]) -> None:
    for path in paths:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.read(fd, 4096)  # a page: every file the reader reads is smaller
        finally:
            os.close(fd)


def raw_reads_in_folder(root: Path, rels: list[str]) -> None:
    """The same reads, those under sys/devices/system/cpu opened relative to that folder held open, as the reader
    opens them: the kernel then walks the folder's path once, not once per file."""
    folder = os.open(os.path.join(root, CPU), os.O_RDONLY | os.O_DIRECTORY)
    try:
        for rel in rels:
            inside = rel.startswith(CPU)
            fd = os.open(rel[len(CPU):], os.O_RDONLY, dir_fd=folder) if inside else os.open(
                os.path.join(root, rel), os.O_RDONLY)
            try:
                os.read(fd, 4096)
            finally:
                os.close(fd)
    finally:
        os.close(folder)


def median_seconds(root: Path) -> tuple[float, float, float, float]:
    """Median seconds of the whole read_topology(root), of the raw reads of the same files (plain and
    folder-relative) and of the read a pin to a node makes, interleaved."""
    journal: list[str] = []
    read_topology(root, journal=journal)  # warm the page cache, and learn which files it reads (all of them)
    paths = [os.path.join(root, rel) for rel in journal]
    reader, raw, relative, pins = [], [], [], []
    for _ in range(REPEATS):
        start = time.perf_counter()
        read_topology(root).grouping  # noqa: B018 -- asked: the cores, packages and caches are read
        reader.append(time.perf_counter() - start)
        start = time.perf_counter()
        read_topology(root)
        pins.append(time.perf_counter() - start)
        start = time.perf_counter()
        raw_reads(paths)
        raw.append(time.perf_counter() - start)
        start = time.perf_counter()
        raw_reads_in_folder(root, journal)
        relative.append(time.perf_counter() - start)
    return statistics.median(reader), statistics.median(raw), statistics.median(relative), statistics.median(pins)


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
        rows: list[tuple[str, int, tuple[float, float, float, float]]] = []
        capture = largest_capture(work)
        if capture is not None:
            name, root = capture
            rows.append((f"capture {name}", len(read_topology(root).online), median_seconds(root)))
        else:
            print(f"(no captures at {FIXTURES}; synthetic machines only)")
        for cpus in (128, 256, 512, 1024):
            root = machines.write(machines.synthetic(cpus), work / f"synthetic-{cpus}")
            rows.append((f"synthetic {cpus}", cpus, median_seconds(root)))
    smallest = min(r[2][0] / r[1] for r in rows if r[0].startswith("synthetic"))
    print(f"{'machine':32} {'CPUs':>5} {'median ms':>10} {'us/CPU':>7} {'per-CPU ratio':>14} "
          f"{'raw reads ms':>13} {'reader/raw':>11} {'raw in folder ms':>17} {'reader/raw in folder':>21} "
          f"{'a pin reads ms':>15}")
    for name, cpus, (seconds, raw, relative, pin) in rows:
        per_cpu = seconds / cpus
        print(f"{name:32} {cpus:5d} {seconds * 1e3:10.2f} {per_cpu * 1e6:7.1f} {per_cpu / smallest:14.2f} "
              f"{raw * 1e3:13.2f} {seconds / raw:11.2f} {relative * 1e3:17.2f} {seconds / relative:21.2f} "
              f"{pin * 1e3:15.2f}")
    print("per-CPU ratio: cost per CPU relative to the cheapest synthetic machine (1.00 = linear growth)")
    print("raw reads: os.open/os.read/os.close of exactly the files the reader read, in the same run;")
    print("raw in folder: the same, CPU files opened relative to sys/devices/system/cpu held open (as the reader does)")
    print("a pin reads: the topology a pin to a GPU's node reads (CPUs, nodes, cgroup; cores and caches never asked)")


if __name__ == "__main__":
    main()
