"""Values parsed once, at the edge: on one ``numapin exec``, the mode, the kind of cores, the policy and the
memory mode are each parsed once (from the command's text into the typed request; every layer below takes only
typed values), and the machine's facts are asked for once (the prepared request carries those it was decided
with). Counted in a real ``numapin exec`` that pins this process and execs a program, by a profile hook on the
one parser of every closed set and on the one cache of the machine's facts."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import live

_COUNT = """
import collections, json, os, sys
import numapin.base.choices as choices
import numapin.facts.machine as machine
counts = collections.Counter()
parse, cached = choices.parse_choice.__code__, machine.cached.__code__
def profile(frame, event, arg):
    if event == "call" and frame.f_code is parse:
        counts[frame.f_locals["kind"].__name__] += 1
    elif event == "call" and frame.f_code is cached:
        counts["facts asked"] += 1
sys.setprofile(profile)
def execve(path, argv, env):
    sys.setprofile(None)
    print(json.dumps({"counts": counts, "program": argv, "mask": sorted(os.sched_getaffinity(0))}), flush=True)
    os._exit(0)
os.execve = execve
from numapin.cli import main
sys.exit(main(sys.argv[1:]))
"""


def test_one_exec_parses_each_value_once_and_asks_the_machine_once(tmp_path: Path) -> None:
    root = live.write_pair(tmp_path / "pair")
    args = ["exec", "--root", str(root), "--gpu", "0", "--mode", "node", "--cores", "all", "--policy", "override",
            "--memory", "preferred", "--", "true"]
    done = subprocess.run([sys.executable, "-c", _COUNT, *args], capture_output=True, text=True, timeout=120,
                          env=live.without_inputs(dict(os.environ)))
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["program"] == ["true"] and set(report["mask"]) == live.NODE0, report  # it did pin, for real
    counts = report["counts"]
    assert {kind: counts.get(kind, 0) for kind in ("PlacementMode", "Cores", "ExternalMaskPolicy", "MemoryMode")} \
        == {"PlacementMode": 1, "Cores": 1, "ExternalMaskPolicy": 1, "MemoryMode": 1}, counts
    assert counts["facts asked"] == 1, counts
