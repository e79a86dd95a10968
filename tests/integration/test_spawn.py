"""TensorRT-LLM's way: workers by multiprocessing spawn, the function imported by name, called twice.

With ``NUMAPIN_PATCH=tensorrt_llm`` in the parent's environment, every spawned
worker gets numapin's function through the start-up file: all six threads on
the GPU's node after both calls, no warning. Without it the original's
flip-flop shows (the second call undoes the first, and only the calling thread
ever moved), which is what lets this test fail.
"""

from __future__ import annotations

import json
from pathlib import Path

from tier import HERE, Run, node_of, require_startup_file

import live
import trtllm_like
from numapin.base.environment import PATCH


def _workers(run: Run, tmp_path: Path, **env: str) -> list[dict[str, object]]:
    site = trtllm_like.write(tmp_path / "site")
    out = run("python", HERE / "spawn_parent.py", PYTHONPATH=f"{site}:{HERE}:{HERE.parent}",
              TRTLLM_LIKE_GPU_CPUS=trtllm_like.gpu_cpus(node_of(0), node_of(1)), **env)
    workers: list[dict[str, object]] = json.loads(out.stdout.strip().splitlines()[-1])
    assert [w["gpu"] for w in workers] == [0, 1]
    return workers


def test_spawned_workers_get_numapins_function_through_the_environment(run: Run, tmp_path: Path) -> None:
    require_startup_file()
    for worker in _workers(run, tmp_path, **{PATCH: "tensorrt_llm"}):
        masks = worker["masks"]
        assert isinstance(masks, dict) and len(masks) == 6
        assert worker["numapin"] is True
        assert all(set(m) == node_of(int(str(worker["gpu"]))) for m in masks.values()), worker
        assert worker["warnings"] == []


def test_without_the_variable_the_original_flip_flops(run: Run, tmp_path: Path) -> None:
    for worker in _workers(run, tmp_path):
        masks = worker["masks"]
        assert isinstance(masks, dict) and worker["numapin"] is False
        assert all(set(m) == live.ALL for m in masks.values()), "the second call should have reset the first"
        assert any("constrained" in w for w in worker["warnings"])  # type: ignore[union-attr]
