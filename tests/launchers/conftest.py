"""The launchers tier: Slurm (one node, started here), Open MPI and MPICH, each launching real tasks; and the
real numactl beside numapin's (test_numactl_differential.py).

Run with ``python -m pytest tests/launchers`` after ``apt-get install slurm-wlm openmpi-bin mpich``
and a non-editable ``pip install .`` (the start-up file is under test too). The Slurm cluster is
this machine alone: ``slurmctld`` and ``slurmd`` as root, ``AuthType=auth/none`` and
``CredType=cred/none`` (no munge), ``ProctrackType=proctrack/linuxproc`` (no systemd or cgroup
plugin), ``TaskPlugin=task/affinity`` (so that ``--cpu-bind`` binds). Without the launchers the
tier skips with one line saying what to install; with ``CI`` set it fails instead.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import live
from live import without_inputs
from numapin.base.environment import FSROOT

HERE = Path(__file__).resolve().parent
NEEDS = "apt-get install slurm-wlm openmpi-bin mpich"
#: A task's report (worker.py), one per rank.
Reports = list[dict[str, object]]
Launch = Callable[..., tuple[Reports, subprocess.CompletedProcess[str]]]


def require(*programs: str) -> None:
    missing = [p for p in programs if shutil.which(p) is None]
    if missing:
        message = f"{', '.join(missing)} not installed ({NEEDS})"
        if os.environ.get("CI"):
            pytest.fail(message, pytrace=False)
        pytest.skip(message)


@pytest.fixture(scope="session")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if not live.NODE0 or not live.NODE1:
        pytest.fail(f"needs allowed CPUs on both halves of the machine (allowed: {live.BASELINE})")
    return live.write_pair(tmp_path_factory.mktemp("pair") / "root")


@pytest.fixture(scope="session")
def slurm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """A one-node Slurm cluster of this machine, for the session; the environment srun needs."""
    require("slurmctld", "slurmd", "srun")
    if os.geteuid() != 0:
        pytest.skip("starting slurmctld and slurmd needs root")
    home = tmp_path_factory.mktemp("slurm")
    host = socket.gethostname()
    cpus = len(live.TOPOLOGY.online)
    conf = home / "slurm.conf"
    conf.write_text("\n".join([
        "ClusterName=numapin", f"SlurmctldHost={host}", "AuthType=auth/none", "CredType=cred/none",
        "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/affinity", "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_Core", "SlurmUser=root", "SlurmdUser=root", "MpiDefault=none",
        "ReturnToService=2", f"StateSaveLocation={home}/state", f"SlurmdSpoolDir={home}/spool",
        f"SlurmctldPidFile={home}/slurmctld.pid", f"SlurmdPidFile={home}/slurmd.pid",
        f"SlurmctldLogFile={home}/slurmctld.log", f"SlurmdLogFile={home}/slurmd.log",
        # Ports of its own, away from a Slurm this machine may run.
        "SlurmctldPort=16917", "SlurmdPort=16918",
        f"NodeName={host} CPUs={cpus} State=UNKNOWN",
        "PartitionName=numapin Nodes=ALL Default=YES MaxTime=INFINITE State=UP", ""]))
    (home / "state").mkdir()
    (home / "spool").mkdir()
    env = {**os.environ, "SLURM_CONF": str(conf)}
    for daemon in ("slurmctld", "slurmd"):
        subprocess.run([daemon, "-f", str(conf)] + (["-i"] if daemon == "slurmctld" else []), env=env,
                       check=True, timeout=60)
    try:
        deadline = time.monotonic() + 90
        while True:
            state = subprocess.run(["sinfo", "-h", "-o", "%t"], env=env, capture_output=True, text=True,
                                   timeout=30).stdout.split()
            if state and state[0] in ("idle", "mix", "alloc"):
                break
            if time.monotonic() > deadline:
                logs = "".join(p.read_text()[-2000:] for p in home.glob("*.log"))
                pytest.fail(f"Slurm did not come up (sinfo: {state}):\n{logs}")
            time.sleep(0.5)
        yield {"SLURM_CONF": str(conf)}
    finally:
        for pid_file in ("slurmd.pid", "slurmctld.pid"):
            with contextlib.suppress(OSError, ValueError):  # a daemon that never started, or already ended
                os.kill(int((home / pid_file).read_text()), 15)


@pytest.fixture
def launch(root: Path, tmp_path: Path) -> Launch:
    """Run a launcher command line whose tasks run ``worker.py``; the tasks' reports, by rank, and the run."""
    base = without_inputs(dict(os.environ))
    base["PATH"] = f"{Path(sys.executable).parent}:{base.get('PATH', os.defpath)}"
    base[FSROOT] = str(root)
    # Open MPI refuses root unless told twice.
    base.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")

    def go(*command: str, **env: str) -> tuple[Reports, subprocess.CompletedProcess[str]]:
        reports_dir = Path(tempfile.mkdtemp(dir=tmp_path, prefix="reports-"))
        proc = subprocess.run(list(command), cwd=tmp_path, capture_output=True, text=True, timeout=240,
                              env={**base, **env, "NUMAPIN_TEST_REPORTS": str(reports_dir)})
        reports = [json.loads(p.read_text()) for p in sorted(reports_dir.glob("*.json"))]
        assert proc.returncode == 0 and len(reports) == 2, f"{command}:\n{proc.stdout}\n{proc.stderr}"
        return sorted(reports, key=lambda r: int(r["rank"])), proc  # type: ignore[call-overload]

    return go


def worker() -> list[str]:
    return [sys.executable, str(HERE / "worker.py")]


def exec_worker(*options: str) -> list[str]:
    return [sys.executable, "-m", "numapin", "exec", "--local-rank", "auto", "--memory", "none", *options, "--",
            *worker()]


def placed(reports: Reports) -> bool:
    """Every rank's every thread on its GPU's CPUs (the pair root: GPU r on node r), as checked from outside."""
    return all(r["check"] == 0 and all(set(m) == (live.NODE0 if r["rank"] == 0 else live.NODE1)
                                       for m in r["masks"].values())  # type: ignore[attr-defined]
               for r in reports)
