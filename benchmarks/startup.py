"""Start-up costs, measured side by side: Python alone, ``import numapin``, ``numapin exec``, the start-up file.

Every command runs ROUNDS times, the commands interleaved round by round (so
a drift of the machine's speed touches all of them alike); the medians and
their ratios to ``python -c pass`` are printed. The start-up file is measured
in two throwaway virtual environments that differ only by that file, inactive
(no NUMAPIN_* variable set). ``numapin exec --gpu 0`` runs against a synthetic
DGX-H100 (224 CPUs, 8 GPUs) to show the cost of reading a large machine.
Run: python benchmarks/startup.py [ROUNDS]
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
import timeit
from pathlib import Path

from numapin.facts import synthetic as machines

REPO = Path(__file__).resolve().parents[1]
ROUNDS = int(sys.argv[1]) if len(sys.argv) > 1 else 25


def timed(command: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run(command, env=env, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def venv(home: Path, *, startup: bool) -> str:
    """A venv whose site-packages points at this numapin, with or without the start-up file."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(home)], check=True)
    site = next((home / "lib").glob("python3*/site-packages"))
    import numapin

    (site / "_numapin_under_test.pth").write_text(str(Path(numapin.__file__).parents[1]) + "\n")
    if startup:
        (site / "numapin-startup.pth").write_bytes((REPO / "src" / "numapin-startup.pth").read_bytes())
    return str(home / "bin" / "python")


def main() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("NUMAPIN_")}
    script = Path(sys.executable).parent / "numapin"
    numapin_cmd = [str(script)] if script.exists() else [sys.executable, "-m", "numapin"]
    with tempfile.TemporaryDirectory() as tmp:
        dgx = machines.write("dgx-h100", Path(tmp) / "dgx")
        bare = venv(Path(tmp) / "bare", startup=False)
        hooked = venv(Path(tmp) / "hooked", startup=True)
        commands: dict[str, tuple[list[str], dict[str, str]]] = {
            "python -c pass": ([sys.executable, "-c", "pass"], env),
            'python -c "import numapin"': ([sys.executable, "-c", "import numapin"], env),
            "numapin exec --cpus 0 -- python -c pass": (
                [*numapin_cmd, "exec", "--cpus", "0", "--", sys.executable, "-c", "pass"], env),
            "numapin exec --gpu 0 (dgx-h100 root) -- python -c pass": (
                [*numapin_cmd, "exec", "--gpu", "0", "--memory", "none", "--", sys.executable, "-c", "pass"],
                {**env, "NUMAPIN_FSROOT": str(dgx)}),
            "venv without the start-up file: python -c pass": ([bare, "-c", "pass"], env),
            "venv with the start-up file, inactive: python -c pass": ([hooked, "-c", "pass"], env),
        }
        times: dict[str, list[float]] = {name: [] for name in commands}
        for _ in range(ROUNDS):
            for name, (command, command_env) in commands.items():
                times[name].append(timed(command, command_env))
    median = {name: statistics.median(values) * 1e3 for name, values in times.items()}
    base = median["python -c pass"]
    print(f"{ROUNDS} rounds, interleaved; medians")
    for name, ms in median.items():
        print(f"  {name:56} {ms:7.1f} ms  {ms / base:5.2f}x python -c pass")
    hook = median["venv with the start-up file, inactive: python -c pass"]
    plain = median["venv without the start-up file: python -c pass"]
    print(f"  start-up file, inactive: {hook - plain:+.2f} ms ({hook / plain:.3f}x the same venv without it)")
    # The process figures above cannot resolve a fraction of a millisecond: the line itself, timed in process.
    line = (REPO / "src" / "numapin-startup.pth").read_text()
    saved = {k: os.environ.pop(k) for k in ("NUMAPIN_AUTOPIN", "NUMAPIN_PATCH") if k in os.environ}
    try:
        runs = 10000
        seconds = timeit.timeit(lambda: exec(line, {}), number=runs)
    finally:
        os.environ.update(saved)
    print(f"  the start-up line itself, inactive: {seconds / runs * 1e6:.1f} µs per interpreter start")


if __name__ == "__main__":
    main()
