"""Every command rehearses an AMD host: ``--machine mi300x`` (RCCL's published 8 x MI300X host) and its partitioned
``mi300x-cpx`` (64 logical GPUs), as a user without one would try them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

import live
from numapin.cpuset import CpuSet
from numapin.facts import synthetic as machines
from sysfs import add_function

NUMAPIN = [sys.executable, "-m", "numapin"]
SVG = "{http://www.w3.org/2000/svg}"


def _run(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*NUMAPIN, *args], capture_output=True, text=True, timeout=120,
                          env={**live.without_inputs(dict(os.environ)), **env})


@pytest.mark.parametrize("machine", ["mi300x", "mi300x-cpx"])
def test_every_command_rehearses_an_mi300x_host(machine: str, tmp_path: Path) -> None:
    spec = machines.shape_named(machine)
    gpus = spec.gpus * spec.partitions
    rank = gpus - 3  # on node 1, and in CPX a partition of package 7
    dry = _run("exec", "--machine", machine, "--mode", "exclusive", "--dry-run", "--json", "--", "true",
               LOCAL_RANK=str(rank))
    placement = json.loads(dry.stdout)["placement"]
    node1 = spec.node_cpus(1)
    assert dry.returncode == 0 and CpuSet.parse(placement["cpus"]) <= node1 and placement["node"] == 1
    assert placement.get("partition") == (rank % spec.partitions if spec.partitions > 1 else None)
    hidden = _run("exec", "--machine", machine, "--dry-run", "--", "true", LOCAL_RANK="0", ROCR_VISIBLE_DEVICES="3,3")
    assert hidden.returncode == 0 and "ROCR_VISIBLE_DEVICES entry '3' names a GPU already listed: the list ends " \
        f"before it (this machine's GPUs: 0-{gpus - 1}, or GPU-<uuid>)" in hidden.stdout
    doctor = json.loads(_run("doctor", "--machine", machine, "--local-rank", str(rank), "--json").stdout)
    assert doctor["placement"]["node"] == 1 and "no-placement" not in {f["id"] for f in doctor["findings"]}
    wrong = json.loads(_run("doctor", "--machine", machine, "--local-rank", "0", "--json",
                            ROCR_VISIBLE_DEVICES="0,99").stdout)
    finding = next(f for f in wrong["findings"] if f["id"] == "cuda-visible-devices")
    assert "ROCm shows this process 1 GPU" in finding["why"] and finding["fix"].endswith("ROCR_VISIBLE_DEVICES")
    ps = _run("ps", "--machine", machine, "--json")
    assert ps.returncode in (0, 1) and "Traceback" not in ps.stderr
    picture = tmp_path / "plan.svg"
    plan = _run("plan", "--machine", machine, "--mode", "exclusive", "--json", "--svg", str(picture))
    plans = json.loads(plan.stdout)
    assert len(plans) == gpus and all(p["node"] == i // spec.partitions // spec.gpus_per_node
                                      for i, p in enumerate(plans))
    drawn = ET.parse(picture).getroot()
    assert sorted(int(e.get("data-gpu", "-1")) for e in drawn.iter(f"{SVG}g")
                  if e.get("id", "").startswith("gpu-")) == list(range(gpus))
    show = _run("show", "--machine", machine).stdout
    assert "hip:0 0000:0c:00.0" in show and "AMD Instinct MI300X" in show


def test_a_host_of_one_nvidia_and_one_amd_gpu_places_no_rank_by_guess(tmp_path: Path) -> None:
    root = machines.write("laptop", tmp_path / "root")  # one NVIDIA GPU
    add_function(root, "0000:f1:00.0", {"vendor": "0x1002", "device": "0x74a1", "class": "0x120000",
                                        "numa_node": "0"}, "amdgpu")
    plain = _run("exec", "--root", str(root), "--dry-run", "--", "true", LOCAL_RANK="0")
    said = plain.stdout + plain.stderr
    assert plain.returncode == 0 and "would pin" not in plain.stdout
    assert said.count("this host has 1 NVIDIA GPU and 1 AMD GPU, as many of each: set NUMAPIN_ACCELERATOR=nvidia "
                      "or amd to say whose this process drives") == 1, said  # said once, not again as a note
    strict = _run("exec", "--root", str(root), "--strict", "--", "true", LOCAL_RANK="0")
    assert strict.returncode != 0 and "NUMAPIN_ACCELERATOR" in strict.stderr
    named = _run("exec", "--root", str(root), "--dry-run", "--json", "--", "true", LOCAL_RANK="0",
                 NUMAPIN_ACCELERATOR="amd")
    assert json.loads(named.stdout)["placement"]["pci"] == "0000:f1:00.0"
