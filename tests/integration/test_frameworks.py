"""vLLM 0.33's and SGLang 0.5.23's own NUMA binding (their real numa_utils.py) with no numactl installed:
NUMAPIN_PATCH puts numapin's numactl on PATH, and their spawned workers end on their GPUs' CPUs."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest
from frameworks import tree
from tier import HERE, REPO, Run, node_of, require, require_startup_file

from numapin.base.environment import PATCH


@pytest.mark.parametrize("project", ["vllm", "sglang"])
def test_the_frameworks_workers_are_bound_without_numactl(run: Run, tmp_path: Path, project: str) -> None:
    if project == "vllm":
        require("psutil")
    require_startup_file()
    stubs = tree(project, tmp_path / "site")
    # A PATH without numactl (this machine may have one: the guest tier installs it); Python by its path.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    true = shutil.which("true")  # the frameworks probe with `numactl OPTIONS true`
    assert true is not None
    (bin_dir / "true").symlink_to(true)
    assert shutil.which("numactl", path=str(bin_dir)) is None
    result = run(sys.executable, HERE / f"{project}_driver.py", PATH=str(bin_dir),
                 PYTHONPATH=f"{stubs}:{HERE}:{REPO / 'tests'}", **{PATCH: project})
    workers = json.loads(result.stdout.strip().splitlines()[-1])["workers"]
    assert len(workers) == 2
    for gpu, worker in enumerate(workers):
        assert all(set(m) == node_of(gpu) for m in worker["masks"].values()), (gpu, worker, result.stderr)
        assert worker["marker"] is not None, "bound by numapin numactl, which marks the mask numapin's"
    if project == "sglang":
        bound = json.loads(result.stdout.strip().splitlines()[-1])["bound"]
        assert len(bound) == 4 and all(set(m) == node_of(1) for m in bound.values()), bound  # every thread
