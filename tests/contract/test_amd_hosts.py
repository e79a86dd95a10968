"""AMD hosts end to end: the start-up hook, exec and ps pin and judge for real on this host seen as two nodes with an
MI300X each (GPUs found through amdgpu's files and the KFD topology, chosen by ROCm's variables). The guests run these
on real NUMA nodes too (tests/guest)."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from test_visible_from_outside import NUMAPIN, WORKER, Workers, needs_two

import live
from conftest import REPO, Python
from numapin.base.environment import AUTOPIN, AUTOPIN_OPTIONS, FSROOT, RUNTIME_DIR
from test_startup import _REPORT


@pytest.fixture(scope="module")
def amd_pair(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return live.write_pair(tmp_path_factory.mktemp("amd") / "root", amd=True)


def _hook(python: Python, root: Path, **env: str) -> dict[str, object]:
    memory = "preferred" if live.NODE1_REAL else "none"
    result = python("-c", _REPORT, PYTHONPATH=str(REPO / "tests"), **{FSROOT: str(root), AUTOPIN: "1"},
                    **{AUTOPIN_OPTIONS["memory"]: memory}, **env)
    assert result.returncode == 0 and result.stderr == "", result.stderr
    report: dict[str, object] = json.loads(result.stdout)
    return report


@needs_two
@pytest.mark.parametrize("env", [{"LOCAL_RANK": "1"}, {"ROCR_VISIBLE_DEVICES": "1"}, {"HIP_VISIBLE_DEVICES": "1"},
                                 {"CUDA_VISIBLE_DEVICES": "1"}, {"ROCR_VISIBLE_DEVICES": "1,0", "LOCAL_RANK": "0"}],
                         ids=["rank", "rocr", "hip", "cuda-as-hip", "rocr-reordered"])
def test_the_start_up_hook_binds_an_amd_worker_at_birth(python: Python, amd_pair: Path, env: dict[str, str]) -> None:
    report = _hook(python, amd_pair, **env)
    born = report["born"]
    assert isinstance(born, dict) and len(born) == 4 and all(set(m) == live.NODE1 for m in born.values()), born
    assert report["applied"] == live.cpus(live.NODE1) and report["changed"] is False and report["events"] == []


@needs_two
def test_the_start_up_hook_leaves_an_amd_launcher_alone(python: Python, amd_pair: Path) -> None:
    report = _hook(python, amd_pair)  # both GPUs visible, no rank: a launcher
    assert report["applied"] is None and all(set(m) == live.ALL for m in report["born"].values())  # type: ignore[union-attr]


@needs_two
def test_exec_places_by_hips_index_over_rocrs_list(amd_pair: Path) -> None:
    env = {**live.without_inputs(dict(os.environ)), "ROCR_VISIBLE_DEVICES": "1,0"}
    probe = "import os; print(sorted(os.sched_getaffinity(0)))"
    out = subprocess.run([*NUMAPIN, "exec", "--root", str(amd_pair), "--gpu", "0", "--memory", "none", "--",
                          sys.executable, "-c", probe], capture_output=True, text=True, env=env, timeout=60)
    assert out.returncode == 0 and json.loads(out.stdout) == sorted(live.NODE1), out.stderr
    hidden = subprocess.run([*NUMAPIN, "exec", "--root", str(amd_pair), "--gpu", "0", "--strict", "--", "true"],
                            capture_output=True, text=True, env={**env, "ROCR_VISIBLE_DEVICES": ""}, timeout=60)
    assert hidden.returncode != 0 and "ROCR_VISIBLE_DEVICES is empty" in hidden.stderr
    assert len(hidden.stderr.strip().splitlines()) == 1


def holding(device: str) -> list[str]:
    """A command line whose process holds ``device`` (and ROCm's /dev/kfd) open, as a HIP process does: regular
    files standing in for them in a private mount namespace (root: ``unshare --mount``), then WORKER."""
    if os.geteuid() != 0 or not Path("/usr/bin/unshare").exists():
        pytest.skip("standing a file in for a GPU device needs root and unshare")
    code = f"held = open('{device}'), open('/dev/kfd')\n" + WORKER
    return ["unshare", "--mount", "sh", "-c", f"mount -t tmpfs tmpfs /dev && mkdir /dev/dri && : > {device} && "
            f": > /dev/kfd && exec {shlex.quote(sys.executable)} -c {shlex.quote(code)}"]


@needs_two
def test_ps_knows_an_amd_worker_by_its_render_node(amd_pair: Path, tmp_path: Path) -> None:
    made = Workers()
    env = {**live.without_inputs(dict(os.environ)), RUNTIME_DIR: str(tmp_path / "records")}
    try:
        by_exec = made.start([*NUMAPIN, "exec", "--root", str(amd_pair), "--gpu", "1", "--memory", "none", "--",
                              sys.executable, "-c", WORKER], **{RUNTIME_DIR: env[RUNTIME_DIR]})
        unpinned = made.start(holding("/dev/dri/renderD129"))  # GPU 1's render node: 128 + 1
        listing = subprocess.run([*NUMAPIN, "ps", "--root", str(amd_pair), "--json", str(by_exec), str(unpinned)],
                                 capture_output=True, text=True, env=env, timeout=120)
    finally:
        for proc in made.started:
            proc.kill()
            proc.wait()
    seen = {w["pid"]: w for w in json.loads(listing.stdout)["workers"]}
    assert (seen[by_exec]["placed_by"], seen[by_exec]["verdict"], seen[by_exec]["gpu"]) == ("exec", "ok", 1)
    assert (seen[unpinned]["why"], seen[unpinned]["verdict"]) == ("/dev/dri/renderD129", "misplaced")
    assert seen[unpinned]["pci"] == seen[by_exec]["pci"], "renderD129 is GPU 1"


@needs_two
def test_ps_names_a_partitions_worker_by_its_partition(tmp_path: Path) -> None:
    root = live.write_pair(tmp_path / "root", amd=True, partitions=2)  # GPUs 2 and 3: package 1's partitions
    made = Workers()
    env = {**live.without_inputs(dict(os.environ)), RUNTIME_DIR: str(tmp_path / "records")}
    try:
        worker = made.start([*NUMAPIN, "exec", "--root", str(root), "--gpu", "3", "--memory", "none", "--",
                             sys.executable, "-c", WORKER], **{RUNTIME_DIR: env[RUNTIME_DIR]})
        listing = subprocess.run([*NUMAPIN, "ps", "--root", str(root), "--json", str(worker)],
                                 capture_output=True, text=True, env=env, timeout=120)
        table = subprocess.run([*NUMAPIN, "ps", "--root", str(root), str(worker)],
                               capture_output=True, text=True, env=env, timeout=120)
    finally:
        for proc in made.started:
            proc.kill()
            proc.wait()
    (seen,) = json.loads(listing.stdout)["workers"]
    assert (seen["verdict"], seen["gpu"], seen["partition"]) == ("ok", 3, 1)
    assert f"{seen['pci']} partition 1" in table.stdout
