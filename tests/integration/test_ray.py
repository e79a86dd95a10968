"""Ray assigns each actor a GPU through CUDA_VISIBLE_DEVICES; numapin.pin() inside puts it on that GPU's CPUs."""

from __future__ import annotations

import json

import pytest
from tier import HERE, MEMORY, Run, node_of, require, require_startup_file

import live
from numapin.base.environment import AUTOPIN, AUTOPIN_OPTIONS


@pytest.mark.parametrize("autopin", ["", "1"], ids=["plain", "autopin-set"])
def test_ray_actors_land_on_their_gpus_cpus(run: Run, autopin: str) -> None:
    # With NUMAPIN_AUTOPIN set, Ray's worker processes start seeing both GPUs, so the start-up
    # file leaves them alone at start, and pins each when Ray hands it its GPU (before the actor's
    # creation task): the actor's own pin() then finds it placed and changes nothing.
    require("ray")
    env = {AUTOPIN: autopin, AUTOPIN_OPTIONS["memory"]: MEMORY}
    actors = json.loads(run("python", HERE / "ray_driver.py", **env).stdout.strip().splitlines()[-1])
    assert sorted(a["cuda"] for a in actors) == ["0", "1"], "Ray did not give each actor its own GPU"
    for actor in actors:
        target = node_of(int(actor["cuda"]))
        assert actor["pin"]["changed"] is (autopin == "") and set(actor["pin"]["target"]) == target
        # Ray's worker has threads of its own (gRPC, the core worker): every one of them moved.
        assert len(actor["masks"]) > 1 and all(set(m) == target for m in actor["masks"].values()), actor
        assert actor["warnings"] == []


def test_autopin_alone_pins_every_gpu_worker_when_ray_hands_it_gpus(run: Run) -> None:
    # NUMAPIN_AUTOPIN=1 in the job's environment, and not one numapin call in the job.
    require("ray")
    require_startup_file()
    found = json.loads(run("python", HERE / "ray_autopin_driver.py", **{AUTOPIN: "1",
                                                                        AUTOPIN_OPTIONS["memory"]: MEMORY}
                           ).stdout.strip().splitlines()[-1])
    assert sorted(a["cuda"] for a in found["actors"]) == ["0", "1"], "Ray did not give each actor its own GPU"
    for worker in [*found["actors"], *found["tasks"]]:
        target = node_of(int(worker["cuda"]))
        assert len(worker["masks"]) > 1, worker  # Ray's own threads (gRPC, the core worker) are there too
        assert all(set(m) == target for m in worker["masks"].values()), worker
        assert worker["how"] == "autopin", worker
    # A CPU-only actor is left as Ray started it: every CPU this process may use, no record.
    cpu = found["cpu"]
    assert all(set(m) == set(live.BASELINE) for m in cpu["masks"].values()) and cpu["how"] is None, cpu
