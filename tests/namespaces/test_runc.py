"""A real runtime: Debian's runc runs numapin exec in an OCI container with a seccomp profile refusing the
memory-policy calls (Docker's default profile without CAP_SYS_NICE, for those calls); the host's tools look in.

How runc runs here: the bundle's root is a folder of bind mounts of the host's own folders (this Python and the
project reach inside) with a private ``/run``, no cgroup file system mounted inside, and ``--no-pivot`` (the
sandbox's root is on a file system pivot_root refuses: "device or resource busy"). Debian 12's crun 1.8.1
does not start here at all ("cgroups in hybrid mode not supported, drop all controllers from cgroupv2", with
``--cgroup-manager=disabled`` too), nor podman, which runs crun or runc under systemd.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from container import NUMAPIN, environment

import live
import needs

CPU = min(live.BASELINE)
WORKER = ("import os, threading, time\n"
          "threading.Thread(target=time.sleep, args=(600,), daemon=True).start()\n"
          "print('ready', os.getpid(), flush=True)\n"
          "time.sleep(600)\n")
#: What the profile refuses, with EPERM (moby's default profile, without CAP_SYS_NICE).
REFUSED = ["mbind", "set_mempolicy", "get_mempolicy", "migrate_pages", "move_pages"]
#: The host's folders not bound in: the container has its own.
OWN = {"proc", "sys", "dev", "run", "tmp", "lost+found"}


@pytest.fixture
def runc() -> str:
    return needs.program("runc", install="apt-get install runc")


def _bundle(folder: Path, args: list[str], env: dict[str, str]) -> Path:
    folder.mkdir()
    subprocess.run(["runc", "spec", "--bundle", str(folder)], capture_output=True, text=True, check=True)
    config = json.loads((folder / "config.json").read_text())
    rootfs = folder / "rootfs"
    rootfs.mkdir()
    mounts = [m for m in config["mounts"] if m.get("type") != "cgroup"]
    for name in sorted(os.listdir("/")):
        path = Path("/", name)
        if path.is_symlink():
            (rootfs / name).symlink_to(os.readlink(path))
        elif path.is_dir() and name not in OWN:
            (rootfs / name).mkdir()
            mounts.append({"destination": f"/{name}", "type": "bind", "source": f"/{name}", "options": ["rbind"]})
    (rootfs / "run").mkdir()
    (rootfs / "tmp").mkdir(mode=0o1777)
    mounts.append({"destination": "/run", "type": "tmpfs", "source": "tmpfs", "options": ["nosuid", "mode=755"]})
    # /tmp, where CI's copy of the project and its virtual environment lie, and the test's own folder.
    mounts.append({"destination": "/tmp", "type": "bind", "source": "/tmp", "options": ["rbind"]})
    mounts.append({"destination": str(folder.parent), "type": "bind", "source": str(folder.parent),
                   "options": ["rbind"]})
    config["mounts"] = mounts
    config["root"] = {"path": "rootfs", "readonly": False}
    config["process"].update(args=args, terminal=False, cwd="/", env=[f"{k}={v}" for k, v in env.items()])
    config["linux"]["seccomp"] = {"defaultAction": "SCMP_ACT_ALLOW",
                                  "syscalls": [{"names": REFUSED, "action": "SCMP_ACT_ERRNO", "errnoRet": 1}]}
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def _running(runc: str, bundle: Path, name: str) -> Iterator[tuple[subprocess.Popen[str], int]]:
    process = subprocess.Popen([runc, "run", "--no-pivot", "--bundle", str(bundle), name], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        assert line.startswith("ready"), (line, process.communicate(timeout=30))
        state = json.loads(subprocess.run([runc, "state", name], capture_output=True, text=True, check=True).stdout)
        yield process, int(state["pid"])
    finally:
        subprocess.run([runc, "kill", name, "KILL"], capture_output=True)
        process.communicate(timeout=30)
        subprocess.run([runc, "delete", "--force", name], capture_output=True)


def test_numapin_exec_in_a_runc_container_under_its_seccomp_profile(runc: str, tmp_path: Path) -> None:
    command = [*NUMAPIN, "exec", "--cpus", str(CPU), "--memory", "bind", "--", sys.executable, "-c", WORKER]
    # The refusal's one line goes to the container's stderr: kept in a file the test reads after.
    args = ["/bin/sh", "-c", f"exec {shlex.join(command)} 2>{tmp_path}/stderr"]
    bundle = _bundle(tmp_path / "bundle", args, environment())
    name = f"numapin-{uuid.uuid4().hex[:8]}"
    for _, pid in _running(runc, bundle, name):
        assert os.sched_getaffinity(pid) == {CPU}
        status = Path(f"/proc/{pid}/status").read_text()
        nspid = next(line for line in status.splitlines() if line.startswith("NSpid")).split()
        assert "Seccomp:\t2" in status and len(nspid) == 3, status  # its own PID namespace, under the filter
        listed = subprocess.run([*NUMAPIN, "ps", "--json"], env=environment(), capture_output=True, text=True,
                                timeout=120)
        rows = [w for w in json.loads(listed.stdout)["workers"] if w["pid"] == pid]
        assert len(rows) == 1 and (rows[0]["placed_by"], rows[0]["verdict"]) == ("exec", "ok"), listed.stdout
        doctor = subprocess.run([*NUMAPIN, "doctor", "--pid", str(pid), "--json"], env=environment(),
                                capture_output=True, text=True, timeout=60)
        assert "memory-policy-refused" in [f["id"] for f in json.loads(doctor.stdout)["findings"]], doctor.stdout
    said = [line for line in (tmp_path / "stderr").read_text().splitlines() if line.startswith("numapin")]
    assert len(said) == 1 and "seccomp filter" in said[0] and "What holds" in said[0], said
