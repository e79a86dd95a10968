"""A worker in a container given one of the host's GPUs, end to end: the start-up hook, in a real interpreter,
binds it at birth to the CPUs of the GPU its runtime counts (the container's), not of the host's first GPU; with
no local rank it is a worker all the same (one GPU visible to it). The container is this host seen as the pair
machine with the other GPU's driver entry or device file left out, as container runtimes leave them out."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from test_visible_from_outside import NUMAPIN, needs_two

import live
from conftest import Python
from numapin.facts.inventory import read_gpus
from numapin.facts.rocm import KFD_NODES
from numapin.facts.topology import read_topology
from other_user import Other
from test_startup import _autopin

PROC = "proc/driver/nvidia/gpus"


def _pair(tmp_path: Path, *, amd: bool = False) -> Path:
    return live.write_pair(tmp_path / "root", amd=amd)


def _bus(root: Path, index: int) -> str:
    return sorted(p.name for p in (root / PROC).iterdir())[index]


def _minor(root: Path, index: int) -> int:
    text = (root / PROC / _bus(root, index) / "information").read_text()
    return int(next(line for line in text.splitlines() if line.startswith("Device Minor:")).split(":")[1])


def _born_on(report: dict[str, object], cpus: set[int]) -> bool:
    born = report["born"]
    return isinstance(born, dict) and len(born) == 4 and all(set(m) == cpus for m in born.values())


@needs_two
@pytest.mark.parametrize("rank", [None, "0"], ids=["no-rank", "rank-0"])
@pytest.mark.parametrize("given", [1, 0], ids=["gpu1", "gpu0"])
def test_a_legacy_runtime_container_worker_is_bound_to_its_own_gpu(python: Python, tmp_path: Path, given: int,
                                                                   rank: str | None) -> None:
    root = _pair(tmp_path)
    shutil.rmtree(root / PROC / _bus(root, 1 - given))  # the runtime mounts the container's GPU's entry alone
    report = _autopin(python, root, **({} if rank is None else {"LOCAL_RANK": rank}))
    node = live.NODE1 if given == 1 else live.NODE0
    assert _born_on(report, node) and report["applied"] == live.cpus(node), report


@needs_two
def test_a_container_holding_one_gpus_device_file_is_bound_to_that_gpu(python: Python, tmp_path: Path) -> None:
    root = _pair(tmp_path)
    (root / "dev").mkdir()
    (root / "dev" / f"nvidia{_minor(root, 1)}").touch()
    report = _autopin(python, root, LOCAL_RANK="0")
    assert _born_on(report, live.NODE1) and report["applied"] == live.cpus(live.NODE1), report


@needs_two
def test_an_amd_container_worker_is_bound_to_the_gpu_whose_render_node_it_holds(python: Python, tmp_path: Path) -> None:
    root = _pair(tmp_path, amd=True)
    minors = []
    for node in sorted((p.name for p in (root / KFD_NODES).iterdir()), key=int):
        for line in (root / KFD_NODES / node / "properties").read_text().splitlines():
            if line.startswith("drm_render_minor ") and int(line.split()[1]) > 0:
                minors.append(int(line.split()[1]))
    (root / "dev" / "dri").mkdir(parents=True)
    (root / "dev" / "dri" / f"renderD{minors[1]}").touch()
    report = _autopin(python, root)  # no rank: one GPU visible, so a worker
    assert _born_on(report, live.NODE1) and report["applied"] == live.cpus(live.NODE1), report


def test_the_same_container_seen_whole_leaves_a_rankless_process_alone(python: Python, tmp_path: Path) -> None:
    # The control: both GPUs in view and no rank is a launcher, not a worker.
    report = _autopin(python, _pair(tmp_path))
    assert report["applied"] is None and _born_on(report, live.ALL), report


# -- judged from the host: ps reads a container's process through its root --------------------------------------

CHROOTED = ("import os, sys, time; os.chroot(sys.argv[1]); os.chdir('/'); os.setgid(int(sys.argv[3])); "
            "os.setuid(int(sys.argv[2])); print('ready', flush=True); time.sleep(60)")


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to chroot a process and make it another user's")
def test_ps_judges_a_containers_process_by_the_gpus_its_root_holds(tmp_path: Path, other: Other) -> None:
    # A second user's process in a root of its own (a container's), which holds GPU 1's device file alone. Its
    # owner also planted driver entries that swap the two GPUs' minors: numapin takes the minors from the host's
    # reading and opens nothing in that root, so the swap changes nothing.
    full = _pair(tmp_path)
    host = read_gpus(read_topology(full), nvml=False).gpus
    inside = tmp_path / "container"
    shutil.copytree(full, inside, symlinks=True)
    (inside / "dev").mkdir()
    (inside / "dev" / f"nvidia{host[1].minor}").touch()
    for gpu, lie in ((host[0], host[1].minor), (host[1], host[0].minor)):
        info = inside / PROC / gpu.pci / "information"
        info.write_text(info.read_text().replace(f"Device Minor: \t {gpu.minor}", f"Device Minor: \t {lie}"))
        assert f"Device Minor: \t {lie}" in info.read_text()
    os.chmod(tmp_path, 0o755)
    env = {**live.without_inputs(dict(os.environ)), "LOCAL_RANK": "0"}
    child = subprocess.Popen([sys.executable, "-c", CHROOTED, str(inside), *map(str, other)], env=env,
                             stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline() == "ready\n"
        out = subprocess.run([*NUMAPIN, "ps", str(child.pid), "--root", str(full), "--json"], capture_output=True,
                             text=True, timeout=60, env=live.without_inputs(dict(os.environ)))
        assert out.returncode in (0, 1), out.stderr
        (judged,) = json.loads(out.stdout)["workers"]
        assert (judged["gpu"], judged["pci"]) == (0, host[1].pci), judged  # its GPU 0 is the host's GPU 1
        doctor = subprocess.run([*NUMAPIN, "doctor", "--pid", str(child.pid), "--root", str(full)],
                                capture_output=True, text=True, timeout=60, env=live.without_inputs(dict(os.environ)))
        assert f"GPU 0 ({host[1].pci})" in doctor.stdout, doctor.stdout + doctor.stderr
    finally:
        child.kill()
        child.wait()
