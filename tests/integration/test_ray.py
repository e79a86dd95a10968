"""Ray assigns each actor a GPU through CUDA_VISIBLE_DEVICES; numapin.pin() inside puts it on that GPU's CPUs."""

from __future__ import annotations

import json

import pytest
from tier import HERE, MEMORY, Run, node_of, require

from numapin.environment import AUTOPIN, AUTOPIN_OPTIONS


@pytest.mark.parametrize("autopin", ["", "1"], ids=["plain", "autopin-set"])
def test_ray_actors_land_on_their_gpus_cpus(run: Run, autopin: str) -> None:
    # With NUMAPIN_AUTOPIN set, Ray's worker processes start seeing both GPUs (Ray narrows
    # CUDA_VISIBLE_DEVICES when it assigns an actor), so the start-up file leaves them alone
    # and the actor's own pin() is the one that moves them, as README says.
    require("ray")
    env = {AUTOPIN: autopin, AUTOPIN_OPTIONS["memory"]: MEMORY}
    actors = json.loads(run("python", HERE / "ray_driver.py", **env).stdout.strip().splitlines()[-1])
    assert sorted(a["cuda"] for a in actors) == ["0", "1"], "Ray did not give each actor its own GPU"
    for actor in actors:
        target = node_of(int(actor["cuda"]))
        assert actor["pin"]["changed"] is True and set(actor["pin"]["target"]) == target
        # Ray's worker has threads of its own (gRPC, the core worker): every one of them moved.
        assert len(actor["masks"]) > 1 and all(set(m) == target for m in actor["masks"].values()), actor
        assert actor["warnings"] == []
