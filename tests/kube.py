"""The kubelet's cgroup layouts, made for real: a test builds a pod's and a container's cgroup as the
kubelet and its runtime would (their naming: the kubelet's ``cgroup_manager_linux.go``, the runtimes'
scope prefixes), and moves a real process into it. Root only; on cgroup v2 in the unified hierarchy,
on v1 in a hierarchy that needs no settings before a process joins (freezer, pids, name=systemd)."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: Where each runtime's container cgroup is named, by driver: (prefix, suffix) around the 64-hex id.
CONTAINERS = {
    ("cgroupfs", "containerd"): ("", ""), ("cgroupfs", "cri-o"): ("crio-", ""),
    ("systemd", "containerd"): ("cri-containerd-", ".scope"), ("systemd", "cri-o"): ("crio-", ".scope"),
    ("systemd", "docker"): ("docker-", ".scope"),
}


@dataclass(frozen=True)
class Layout:
    """One pod container's cgroup path as the kubelet lays it out, and what it names."""

    driver: str
    qos: str
    runtime: str
    uid: str
    container_id: str
    root: str = ""
    """The kubelet's --cgroup-root, when it has one (``kubelet`` as kind runs it)."""

    @property
    def path(self) -> str:
        prefix, suffix = CONTAINERS[(self.driver, self.runtime)]
        container = f"{prefix}{self.container_id}{suffix}"
        levels = [self.root] if self.root else []
        levels.append("kubepods")
        if self.qos != "guaranteed":
            levels.append(self.qos)
        if self.driver == "cgroupfs":
            return "/" + "/".join([*levels, f"pod{self.uid}", container])
        # systemd: each level's slice repeats the names above it, dashes inside a name written as underscores
        names = [*levels, "pod" + self.uid.replace("-", "_")]
        return "/" + "/".join("-".join(names[:i + 1]) + ".slice" for i in range(len(names))) + "/" + container

    @property
    def runtime_said(self) -> str | None:
        """The runtime the path itself tells (cgroupfs names containerd's containers by their bare id)."""
        return None if (self.driver, self.runtime) == ("cgroupfs", "containerd") else self.runtime


def layouts(root: str = "") -> list[Layout]:
    """One of each: both drivers, the three QoS classes, every runtime of the driver."""
    made = []
    for driver, runtime in CONTAINERS:
        for qos in ("guaranteed", "burstable", "besteffort"):
            made.append(Layout(driver, qos, runtime, str(uuid.uuid4()), os.urandom(32).hex(), root))
    return made


def hierarchy() -> Path | None:
    """A cgroup hierarchy this root can make groups in and move any process into, or None."""
    if os.geteuid() != 0:
        return None
    mounts = [line.split(" - ") for line in Path("/proc/self/mountinfo").read_text().splitlines()]
    found = {}
    for before, after in mounts:
        fstype, _, options = after.split(" ", 2)
        point = before.split()[4]
        if fstype == "cgroup2":
            found.setdefault("v2", Path(point))
        elif fstype == "cgroup":
            for name in ("freezer", "pids", "name=systemd"):
                if name in options.split(" ")[-1].split(","):
                    found.setdefault(name, Path(point))
    for key in ("v2", "freezer", "pids", "name=systemd"):
        if key in found and os.access(found[key], os.W_OK):
            return found[key]
    return None


def cpuset_hierarchy() -> Path | None:
    """The cpuset controller's hierarchy (v1's own mount, or v2's unified one), where this root can make
    groups; None elsewhere."""
    if os.geteuid() != 0:
        return None
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        before, after = line.split(" - ")
        fstype, _, options = after.split(" ", 2)
        point = Path(before.split()[4])
        if fstype == "cgroup" and "cpuset" in options.split(" ")[-1].split(","):
            return point if os.access(point, os.W_OK) else None
        if fstype == "cgroup2" and "cpuset" in (point / "cgroup.controllers").read_text().split():
            return point if os.access(point, os.W_OK) else None
    return None


def _limit(folder: Path, cpus: str | None) -> None:
    """Give a group made in the cpuset hierarchy its CPUs: v1 wants cpus and mems before a process may join
    (its parent's, or ``cpus``); v2 has the parent hand the controller down."""
    if (folder.parent / "cgroup.subtree_control").exists():  # v2
        (folder.parent / "cgroup.subtree_control").write_text("+cpuset\n")
        if cpus is not None:
            (folder / "cpuset.cpus").write_text(f"{cpus}\n")
        return
    (folder / "cpuset.mems").write_text((folder.parent / "cpuset.mems").read_text())
    inherited = (folder.parent / "cpuset.cpus").read_text()
    (folder / "cpuset.cpus").write_text(f"{cpus}\n" if cpus is not None else inherited)


@contextmanager
def placed_in(top: Path, paths: list[str], cpus: str | None = None) -> Iterator[dict[str, Path]]:
    """Each of ``paths`` made as a cgroup under ``top``; yields path -> its folder (write a pid to its
    cgroup.procs to move a process in). ``cpus``: ``top`` is the cpuset hierarchy, and each path's last group
    gets these CPUs (the kubelet's choice for the container). On the way out, every process still inside goes
    back to the top and each group made is removed, deepest first."""
    made: list[Path] = []
    folders = {}
    try:
        for path in paths:
            folder = top
            parts = path.strip("/").split("/")
            for depth, part in enumerate(parts, 1):
                folder = folder / part
                try:
                    folder.mkdir()
                except FileExistsError:  # there before, or made meanwhile by another run of the suite: its
                    continue
                made.append(folder)
                if cpus is not None:
                    _limit(folder, cpus if depth == len(parts) else None)
            folders[path] = folder
        yield folders
    finally:
        for folder in sorted(made, key=lambda f: len(f.parts), reverse=True):
            for pid in (folder / "cgroup.procs").read_text().split():
                with suppress(OSError):  # ended meanwhile
                    (top / "cgroup.procs").write_text(f"{pid}\n")
            try:
                folder.rmdir()
            except OSError as exc:  # a group another run of the suite made inside meanwhile: that run removes it
                if exc.errno not in (errno.EBUSY, errno.ENOTEMPTY):
                    raise


def cgroups_or_skip(*, cpuset: bool) -> Path:
    """The hierarchy a test makes its pods' cgroups in (``cpuset``: the cpuset controller's), or skip saying why."""
    import pytest

    found = cpuset_hierarchy() if cpuset else hierarchy()
    if found is None:
        pytest.skip("making cgroups and moving processes into them needs root and a cgroup hierarchy")
    return found


@contextmanager
def sleeping() -> Iterator[subprocess.Popen[str]]:
    """A process that waits to be looked at (killed on the way out)."""
    child = subprocess.Popen([sys.executable, "-c", "import time; print('ready', flush=True); time.sleep(120)"],
                             stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline() == "ready\n"
        yield child
    finally:
        child.kill()
        child.wait()


def needed(module: str, extra: str) -> Any:
    """``module`` imported, or skip saying which extra installs it (fail under CI: a tier never skips there)."""
    import pytest

    try:
        return __import__(module)
    except ImportError:
        message = f"{module} is not installed (pip install '.[{extra}]')"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
