"""pin(threadpools=True) with torch loaded: torch's own count and its OpenMP pool follow the placement, and
the report says only what holds (resized underneath, torch put its own count back)."""

from __future__ import annotations

import json

import pytest
from tier import Run, node_of, require

PROBE = """
import json, os, torch, numapin
torch.set_num_threads(int(os.environ["POOL"]))
if os.environ["WARM"] == "1":
    x = torch.randn(256, 256)
    (x @ x).sum()  # the pool exists, larger than GPU 0's CPUs
result = numapin.pin(0, threadpools=True)
x = torch.randn(256, 256)
(x @ x).sum()  # torch's next parallel region: its own count applies again
print(json.dumps({"threads": torch.get_num_threads(), "pools": list(result.threadpools)}))
"""


@pytest.mark.parametrize("warm", ["0", "1"], ids=["cold pool", "warm pool"])
def test_torchs_pool_follows_the_pin_and_the_report_holds(run: Run, warm: str) -> None:
    require("torch")
    require("threadpoolctl")
    cpus = len(node_of(0))
    report = json.loads(run("python", "-c", PROBE, POOL=str(cpus + 3), WARM=warm).stdout.strip().splitlines()[-1])
    assert report["threads"] == cpus, report
    assert f"torch (intra-op): {cpus + 3} -> {cpus}" in report["pools"], report
