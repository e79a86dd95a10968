"""pin(threadpools=True) with torch's OpenMP pool already started: resized to the placement through threadpoolctl."""

from __future__ import annotations

import json

from tier import Run, node_of, require

PROBE = """
import json, os, torch, numapin
torch.set_num_threads(int(os.environ["POOL"]))
x = torch.randn(256, 256)
(x @ x).sum()  # the pool exists, larger than GPU 0's CPUs
result = numapin.pin(0, threadpools=True)
print(json.dumps({"threads": torch.get_num_threads(), "pools": list(result.threadpools)}))
"""


def test_torchs_openmp_pool_follows_the_pin(run: Run) -> None:
    require("torch")
    require("threadpoolctl")
    cpus = len(node_of(0))
    report = json.loads(run("python", "-c", PROBE, POOL=str(cpus + 3)).stdout.strip().splitlines()[-1])
    assert report["threads"] == cpus, report
    assert any(p.startswith("openmp") and p.endswith(f"{cpus + 3} -> {cpus}") for p in report["pools"]), report
