"""Rounds of pin() while native threads spawn threads: how many threads escape the pin.

``python benchmarks/storm.py [ROUNDS [DEADLINE_S]]`` (default 500 rounds, 60 s more than rounds).

Each round starts the C storm of tests/contract/test_storm.py (4 spawners, 40 sleepers each), pins
for GPU 0 or 1 of a two-node description of this machine (the tests' pair root), reads
every thread's mask right after pin() returns and 2 ms later, and stops the storm. Prints
the threads found outside the target (expected: 0 and 0), and how the storm's process ended: a
crash (SIGSEGV) is reported with its signal. To keep a core for gdb, run it with
``ulimit -c unlimited`` and a core pattern that writes into the working folder.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "tests"), str(REPO / "tests" / "contract")]

ROUNDS = 500


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else ROUNDS
    import test_storm

    import live

    folder = Path(tempfile.mkdtemp(prefix="numapin-storm-"))
    library = test_storm.build(folder)
    if library is None:
        raise SystemExit("no C compiler: the storm is a small C library")
    root = live.write_pair(folder / "root")
    env = {"NUMAPIN_FSROOT": str(root), "PATH": "/usr/bin:/bin"}
    deadline = float(sys.argv[2]) if len(sys.argv) > 2 else 60 + rounds
    try:
        proc = subprocess.run([sys.executable, "-c", test_storm.RUNNER, str(library), str(rounds),
                               json.dumps(sorted(live.NODE0)), json.dumps(sorted(live.NODE1))],
                              capture_output=True, text=True, env=env, timeout=deadline)
    except subprocess.TimeoutExpired:
        # A loaded machine: say so in one line, with what to do, never a traceback.
        raise SystemExit(f"the storm did not finish {rounds} rounds in {deadline} s (a loaded machine?): "
                         f"run fewer rounds, python benchmarks/storm.py {max(rounds // 5, 1)}") from None
    if proc.returncode < 0:
        raise SystemExit(f"the storm process died of signal {-proc.returncode}: {proc.stderr[-2000:]}")
    if proc.returncode != 0:
        raise SystemExit(f"the storm process failed (exit {proc.returncode}): {proc.stderr[-2000:]}")
    seen = json.loads(proc.stdout)
    print(f"{rounds} rounds, up to {seen['most']} threads at a pin; threads outside the target: "
          f"{seen['escaped']} right after pin(), {seen['late']} 2 ms later; failed threads: {seen['failed']}")


if __name__ == "__main__":
    main()
