"""The start-up time that ``numapin exec`` adds in front of a program.

Runs ``python -c pass`` plainly and through ``numapin exec -- python -c pass``,
alternating, and prints the medians and their ratio. numapin pins itself and
sets the memory policy before it execs, so the difference is numapin's own
start-up (Python, imports, reading the machine). Run: python benchmarks/exec.py
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from numapin import machines

ROUNDS = 21


def timed(command: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run(command, env=env, check=True)
    return time.perf_counter() - start


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        # A machine with a GPU per CPU of this host, so the pin path is the real one.
        cpus = len(os.sched_getaffinity(0))
        shape = "pair" if cpus >= 2 else "laptop"
        root = machines.write(shape, Path(tmp) / "root")
        env = {**os.environ, "NUMAPIN_FSROOT": str(root)}
        plain = [sys.executable, "-c", "pass"]
        wrapped = [sys.executable, "-m", "numapin", "exec", "--gpu", "0", "--memory", "none", "--", *plain]
        results: dict[str, list[float]] = {"plain": [], "numapin exec": []}
        for round_ in range(ROUNDS):
            order = [("plain", plain), ("numapin exec", wrapped)]
            for name, command in order if round_ % 2 == 0 else reversed(order):
                results[name].append(timed(command, env))
    plain_ms = statistics.median(results["plain"]) * 1e3
    exec_ms = statistics.median(results["numapin exec"]) * 1e3
    print(f"python -c pass                        {plain_ms:8.1f} ms")
    print(f"numapin exec -- python -c pass        {exec_ms:8.1f} ms")
    print(f"ratio (numapin exec / plain)          {exec_ms / plain_ms:8.2f}")
    print(f"added by numapin exec                 {exec_ms - plain_ms:8.1f} ms")


if __name__ == "__main__":
    main()
