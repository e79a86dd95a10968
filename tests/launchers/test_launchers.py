"""Slurm, Open MPI and MPICH launching real tasks: numapin exec and NUMAPIN_AUTOPIN under each launcher's
own bindings (its default, none, and a map that matches or crosses the GPUs), every rank checked from
outside with ``numapin threads --check``; and ``numapin doctor`` inside a task."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

import live
from conftest import Launch, exec_worker, placed, require, worker
from live import without_inputs
from numapin.base.environment import AUTOPIN, AUTOPIN_OPTIONS

#: The start-up file must be installed (pip install ., not editable) for NUMAPIN_AUTOPIN.
AUTOPIN_ENV = {AUTOPIN: "1", AUTOPIN_OPTIONS["memory"]: "none"}
#: Rank 0 on GPU 1's CPU and rank 1 on GPU 0's: a binding that crosses the GPUs.
CROSSED_CPUS = f"{min(live.NODE1)},{min(live.NODE0)}" if live.NODE0 and live.NODE1 else "1,0"
MATCHED_CPUS = f"{min(live.NODE0)},{min(live.NODE1)}" if live.NODE0 and live.NODE1 else "0,1"


def require_startup_file() -> None:
    if not (Path(sysconfig.get_path("purelib")) / "numapin-startup.pth").is_file():
        message = "numapin's start-up file is not installed (pip install ., not editable)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)


# -- Slurm ------------------------------------------------------------------------------------


def srun(*options: str) -> list[str]:
    return ["srun", "--ntasks=2", "--nodes=1", *options]


@pytest.mark.parametrize("binding", [[], ["--cpu-bind=none"], [f"--cpu-bind=map_cpu:{MATCHED_CPUS}"]],
                         ids=["default", "none", "map-matched"])
def test_srun_with_numapin_exec(slurm: dict[str, str], launch: Launch, binding: list[str]) -> None:
    reports, _ = launch(*srun(*binding), *exec_worker(), **slurm)
    assert placed(reports), reports


@pytest.mark.parametrize("binding", [[], ["--cpu-bind=none"]], ids=["default", "none"])
def test_srun_with_autopin(slurm: dict[str, str], launch: Launch, binding: list[str]) -> None:
    require_startup_file()
    reports, _ = launch(*srun(*binding), *worker(), **slurm, **AUTOPIN_ENV)
    assert placed(reports), reports


def test_srun_crossed_binding_is_respected_with_one_warning_and_overridden_on_request(
        slurm: dict[str, str], launch: Launch) -> None:
    crossed = f"--cpu-bind=map_cpu:{CROSSED_CPUS}"
    reports, proc = launch(*srun(crossed), *exec_worker(), **slurm)
    assert [r["check"] for r in reports] == [1, 1], "each rank stays where Slurm put it: off its GPU"
    assert proc.stderr.count("--policy override") == 2, proc.stderr  # one warning per task, naming the fix
    reports, _ = launch(*srun(crossed), *exec_worker("--policy", "override"), **slurm)
    assert placed(reports), reports


@pytest.mark.parametrize(("binding", "error"), [("none", False), (f"map_cpu:{MATCHED_CPUS}", False),
                                                (f"map_cpu:{CROSSED_CPUS}", True)])
def test_doctor_inside_a_slurm_task(slurm: dict[str, str], root: Path, tmp_path: Path, binding: str,
                                    error: bool) -> None:
    env = {**without_inputs(dict(os.environ)), **slurm, "NUMAPIN_FSROOT": str(root),
           "OMP_NUM_THREADS": "1"}
    # Each task's output in a file of its own (%t: the task's number): srun interleaves their lines.
    proc = subprocess.run(["srun", "--ntasks=2", f"--cpu-bind={binding}", f"--output={tmp_path}/doctor-%t.json",
                           sys.executable, "-m", "numapin", "doctor", "--local-rank", "auto", "--json"], env=env,
                          capture_output=True, text=True, timeout=240, cwd=tmp_path)
    reports = [json.loads(p.read_text()) for p in sorted(tmp_path.glob("doctor-*.json"))]
    assert len(reports) == 2, proc.stdout + proc.stderr
    for report in reports:
        found = [f for f in report["findings"] if f["id"] == "launcher-binding"]
        assert [f["severity"] for f in found] == (["error"] if error else []), report


# -- Open MPI ---------------------------------------------------------------------------------


def mpirun(*options: str) -> list[str]:
    require("mpirun.openmpi")
    return ["mpirun.openmpi", "-np", "2", *options]


@pytest.mark.parametrize("binding", [[], ["--bind-to", "none"]], ids=["default", "none"])
def test_open_mpi_with_numapin_exec(launch: Launch, binding: list[str]) -> None:
    reports, _ = launch(*mpirun(*binding), *exec_worker())
    assert placed(reports), reports


@pytest.mark.parametrize("binding", [[], ["--bind-to", "none"]], ids=["default", "none"])
def test_open_mpi_with_autopin(launch: Launch, binding: list[str]) -> None:
    require_startup_file()
    reports, _ = launch(*mpirun(*binding, "-x", "NUMAPIN_AUTOPIN", "-x", "NUMAPIN_MEMORY"), *worker(), **AUTOPIN_ENV)
    assert placed(reports), reports


def test_open_mpi_crossed_rankfile_is_respected_and_overridden_on_request(launch: Launch, tmp_path: Path) -> None:
    first, second = CROSSED_CPUS.split(",")
    rankfile = tmp_path / "rankfile"
    rankfile.write_text(f"rank 0=localhost slot={first}\nrank 1=localhost slot={second}\n")
    reports, proc = launch(*mpirun("--rankfile", str(rankfile)), *exec_worker())
    assert [r["check"] for r in reports] == [1, 1] and proc.stderr.count("--policy override") == 2, proc.stderr
    reports, _ = launch(*mpirun("--rankfile", str(rankfile)), *exec_worker("--policy", "override"))
    assert placed(reports), reports


# -- MPICH ------------------------------------------------------------------------------------


def mpiexec(*options: str) -> list[str]:
    require("mpiexec.hydra")
    return ["mpiexec.hydra", "-n", "2", *options]


@pytest.mark.parametrize("binding", [[], ["-bind-to", "none"], ["-bind-to", f"user:{MATCHED_CPUS}"]],
                         ids=["default", "none", "user-matched"])
def test_mpich_with_numapin_exec(launch: Launch, binding: list[str]) -> None:
    reports, _ = launch(*mpiexec(*binding), *exec_worker())
    assert placed(reports), reports


def test_mpich_with_autopin(launch: Launch) -> None:
    require_startup_file()
    reports, _ = launch(*mpiexec(), *worker(), **AUTOPIN_ENV)
    assert placed(reports), reports


def test_mpich_crossed_binding_is_respected_and_overridden_on_request(launch: Launch) -> None:
    crossed = ["-bind-to", f"user:{CROSSED_CPUS}"]
    reports, proc = launch(*mpiexec(*crossed), *exec_worker())
    assert [r["check"] for r in reports] == [1, 1] and proc.stderr.count("--policy override") == 2, proc.stderr
    reports, _ = launch(*mpiexec(*crossed), *exec_worker("--policy", "override"))
    assert placed(reports), reports
