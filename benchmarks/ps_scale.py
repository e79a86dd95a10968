"""``numapin ps`` at scale, measured side by side with procps's ``ps -e -L -o pid,tid,psr``.

Two ratios, each over the same live processes, in alternated pairs (A B A B ..., the ratio taken pair
by pair), with the bound each must keep:

- 1,000 GPU workers: ``sleep`` processes, each with numapin's record (written as a pin would write
  it: the whole machine as its placement, so each is judged ``ok``), ``LOCAL_RANK`` and
  ``CUDA_VISIBLE_DEVICES`` in its environment; ``numapin ps --json`` finds, judges (threads and
  memory) and prints all 1,000 — bound 2x;
- 1,000 ordinary processes (``sleep``, nothing GPU about them): ``numapin ps --json`` looks at each
  and lists none — bound 1.5x;
- the same 1,000 ordinary processes scraped from a running exporter (``Exporter.scrape()`` in this process, after
  a first scrape: what a Prometheus server's scrapes cost it every interval) — bound 0.5x.

Both sides of the first two start a process and read every process of the host; procps also reads every thread.
The exporter starts none: it keeps between scans what a process cannot have changed.

Beside each row, its floor: a Python interpreter (``-c``, its own imports only) that reads of each process what any
scan must to find the GPU workers among them (its entry, the targets of its open files, its two namespace links: a
worker is known by the GPU it holds, a container's by the record in its own root) and, of each worker, what judging
it needs (its record, stat, environment, status, cgroup, each thread's mask and stat), and prints the workers;
numapin's ratio to it is what numapin's own work costs above that floor. For the ordinary processes, the floor is
printed again with ``argparse`` and ``json`` imported first: what any command line in Python that prints JSON
starts with.
Run as root or as any user: python benchmarks/ps_scale.py [PROCESSES] [PAIRS]
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from numapin.base.environment import RUNTIME_DIR
from numapin.cpuset import CpuSet
from numapin.pinning import record
from numapin.placement.modes import Placement, PlacementMode
from numapin.tools.exporter import Exporter

PROCESSES = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
PAIRS = int(sys.argv[2]) if len(sys.argv) > 2 else 10


def wall(command: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run(command, env=env, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def paired(a: list[str], b: list[str], env: dict[str, str]) -> float:
    """Median of the pair-by-pair ratios A/B over PAIRS alternated pairs, after one warm-up of each."""
    wall(a, env), wall(b, env)
    return statistics.median(wall(a, env) / wall(b, env) for _ in range(PAIRS))


def scraped(exporter: Exporter, baseline: list[str], env: dict[str, str]) -> tuple[float, float]:
    """Median of the pair-by-pair ratios scrape / ``baseline`` over PAIRS alternated pairs, and the scrape's
    median seconds."""
    def scrape() -> float:
        start = time.perf_counter()
        exporter.scrape()
        return time.perf_counter() - start

    scrape(), wall(baseline, env)
    pairs = [(scrape(), wall(baseline, env)) for _ in range(PAIRS)]
    return statistics.median(a / b for a, b in pairs), statistics.median(a for a, _ in pairs)


#: The least a Python scan must read of each process to find its GPU workers (see the module's text).
FLOOR = """
import os
for name in os.listdir("/proc"):
    if not name.isdigit():
        continue
    base = "/proc/" + name
    try:
        os.stat(base)
        folder = os.open(base + "/fd", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        continue
    try:
        for fd in os.listdir(folder):
            try:
                os.readlink(fd, dir_fd=folder)
            except OSError:
                pass
    except OSError:
        pass
    finally:
        os.close(folder)
    for kind in ("mnt", "pid"):
        try:
            os.readlink(base + "/ns/" + kind)
        except OSError:
            pass
"""


#: The least a Python scan must read of each worker to judge it, beside :data:`FLOOR`'s reads of every process: its
#: record (the records folder listed, each file read and parsed), its stat, environment, status (its own memory),
#: cgroup (its pod), and each thread's mask and stat; one line of JSON a worker printed.
FLOOR_WORKERS = FLOOR + """
import json
folder = os.environ["NUMAPIN_RUNTIME_DIR"]
records = {}
for name in os.listdir(folder):
    if name.endswith(".json"):
        with open(os.path.join(folder, name), "rb") as file:
            records[int(name.split("-")[0])] = json.loads(file.read())
found = []
for pid, record in records.items():
    base = "/proc/" + str(pid)
    try:
        for part in ("stat", "environ", "status", "cgroup"):
            with open(base + "/" + part, "rb") as file:
                file.read()
        masks = {}
        for tid in os.listdir(base + "/task"):
            with open(base + "/task/" + tid + "/stat", "rb") as file:
                file.read()
            masks[tid] = sorted(os.sched_getaffinity(int(tid)))
    except OSError:
        continue
    found.append({"pid": pid, "how": record.get("how"), "threads": masks})
print(json.dumps(found))
"""


def spawn(count: int, env: dict[str, str]) -> list[subprocess.Popen[bytes]]:
    return [subprocess.Popen(["sleep", "3600"], env=env) for _ in range(count)]


def publish_records(children: list[subprocess.Popen[bytes]]) -> None:
    """Each child's record, as a pin of the whole machine by numapin would leave it."""
    everything = CpuSet(os.sched_getaffinity(0))
    placement = Placement(everything, CpuSet([0]), "the whole machine", PlacementMode.EXPLICIT)
    for child in children:
        start = record.start_time(child.pid)
        assert start is not None
        record.publish(record.Record(child.pid, start, "pin", everything, everything, placement))


def main() -> None:
    procps = shutil.which("ps")
    if procps is None:
        sys.exit("procps's ps is needed: apt-get install procps")
    script = Path(sys.executable).parent / "numapin"
    numapin = [str(script)] if script.exists() else [sys.executable, "-m", "numapin"]
    baseline = [procps, "-e", "-L", "-o", "pid,tid,psr"]
    # Bytecode as an installed package has it (pip compiles it): no figure is a compiler's, even where the shell
    # says not to write bytecode and an editable install's changed modules would be compiled at every start.
    env = {k: v for k, v in os.environ.items() if not k.startswith("NUMAPIN_") and k != "PYTHONDONTWRITEBYTECODE"}
    import compileall

    from numapin import __file__ as package

    compileall.compile_dir(str(Path(package).parent), quiet=1)
    with tempfile.TemporaryDirectory() as tmp:
        env[RUNTIME_DIR] = os.environ[RUNTIME_DIR] = tmp
        print(f"{PAIRS} alternated pairs each, median of the pair-by-pair ratios (wall)")
        plain = {k: v for k, v in env.items() if not k.startswith(("LOCAL_RANK", "CUDA_VISIBLE"))}
        for name, worker_env, bound in (
                (f"{PROCESSES} GPU workers (record, LOCAL_RANK)", {**plain, "LOCAL_RANK": "0",
                                                                   "CUDA_VISIBLE_DEVICES": "0"}, 2.0),
                (f"{PROCESSES} ordinary processes", plain, 1.5)):
            children = spawn(PROCESSES, worker_env)
            try:
                if bound == 2.0:
                    publish_records(children)
                listed = subprocess.run([*numapin, "ps", "--json"], env=env, capture_output=True, text=True)
                counted = listed.stdout.count('"pid"')
                ratio = paired([*numapin, "ps", "--json"], baseline, env)
                seconds = statistics.median(wall([*numapin, "ps", "--json"], env) for _ in range(3))
                floor = [sys.executable, "-c", FLOOR if bound == 1.5 else FLOOR_WORKERS]
                floor_ratio = paired(floor, baseline, env)
                above_floor = paired([*numapin, "ps", "--json"], floor, env)
                if bound == 1.5:
                    scrape_ratio, scrape_seconds = scraped(Exporter(), baseline, env)
                    # The floor with what any command line of Python that writes JSON imports: its parser and json.
                    cli_ratio = paired([sys.executable, "-c", "import argparse, json\n" + FLOOR], baseline, env)
            finally:
                for child in children:
                    child.kill()
                for child in children:
                    child.wait()
            within = "within" if ratio <= bound else "OVER"
            print(f"  {name:42} numapin ps --json / ps -e -L: {ratio:5.2f}x  ({seconds:.3f} s, "
                  f"{counted} listed; bound {bound}x: {within})")
            print(f"  {name:42} the floor / ps -e -L:          {floor_ratio:5.2f}x  (a Python scan reading only "
                  f"what {'finding' if bound == 1.5 else 'finding and judging'} workers needs)")
            print(f"  {name:42} numapin ps --json / the floor: {above_floor:5.2f}x")
            if bound == 1.5:
                print(f"  {name:42} ... with argparse and json:    {cli_ratio:5.2f}x  (what a command line adds to it)")
                within = "within" if scrape_ratio <= 0.5 else "OVER"
                print(f"  {name:42} exporter scrape / ps -e -L:   {scrape_ratio:5.2f}x  ({scrape_seconds:.3f} s; "
                      f"bound 0.5x: {within})")


if __name__ == "__main__":
    main()
