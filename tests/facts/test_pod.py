"""A process's Kubernetes pod and container from the cgroup path the kubelet made, in every
layout: the cgroupfs and systemd drivers, the three QoS classes, containerd, CRI-O and Docker ids, a kubelet
--cgroup-root; real cgroups made by the test with real processes moved in (root), and the same layouts read
as text. Only the kubelet's cgroups name a pod: the same names laid out by a user in a subtree of its own
name none, whether the reader sees the folders or, from a cgroup namespace of its own, only the path."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

import kube
import live
from numapin.base.environment import RUNTIME_DIR
from numapin.facts import procfs
from numapin.facts.pod import QOS_CLASSES, Pod, pod_in_path, pod_of
from other_user import Other

READY = "import time; print('ready', flush=True); time.sleep(120)"


def _named(layout: kube.Layout) -> Pod:
    return Pod(layout.uid, layout.qos, layout.driver, layout.container_id, layout.runtime_said)


@pytest.mark.parametrize("layout", kube.layouts() + kube.layouts(root="kubelet"),
                         ids=lambda k: f"{k.driver}-{k.qos}-{k.runtime}{'-rooted' if k.root else ''}")
def test_every_layout_of_the_kubelet_names_its_pod_and_container(layout: kube.Layout) -> None:
    assert pod_in_path(layout.path) == _named(layout), layout.path


def test_a_static_pods_uid_and_a_process_in_the_pods_own_cgroup() -> None:
    static = os.urandom(16).hex()  # a static pod's UID: a hash of its manifest, 32 hex digits
    found = pod_in_path(f"/kubepods/besteffort/pod{static}")
    assert found == Pod(static, "besteffort", "cgroupfs") and found.container_id is None


@pytest.mark.parametrize("path", [
    "/", "/user.slice/user-0.slice/session-1.scope", "/kubepods", "/kubepods/burstable",
    "/kubepods/burstable/podnot-a-uid/" + "a" * 64,
    "/kubepods/burstable/pod1234abcd-12ab-34cd-56ef-1234567890ab/" + "a" * 63,  # not a container id
    "/kubepods/guaranteed/pod1234abcd-12ab-34cd-56ef-1234567890ab",  # guaranteed has no level of its own
    "/kubepods.slice/kubepods-pod1234abcd_12ab_34cd_56ef_1234567890ab.slice/crio-conmon-" + "a" * 64 + ".scope",
    "/kubepods.slice/kubepods-burstable.slice/kubepods-pod1234abcd_12ab_34cd_56ef_1234567890ab.slice",
    "/kubepods.slice/kubepods-pod1234abcd-12ab-34cd-56ef-1234567890ab.slice",  # dashes the driver never writes
    "/kubepods/burstable/POD1234abcd-12ab-34cd-56ef-1234567890ab",
])
def test_a_path_off_the_layout_names_no_pod(path: str) -> None:
    assert pod_in_path(path) is None


@given(st.lists(st.sampled_from(["kubepods", "kubepods.slice", "burstable", "besteffort", "guaranteed",
                                 "pod1234abcd-12ab-34cd-56ef-1234567890ab", "a" * 64, "crio-" + "b" * 64,
                                 "x.scope", "kubepods-burstable.slice", ""]) | st.text(max_size=20), max_size=6))
def test_any_path_is_a_pod_or_none(parts: list[str]) -> None:
    found = pod_in_path("/".join(parts))
    assert found is None or (found.qos in QOS_CLASSES and found.uid in "/".join(parts).replace("_", "-"))


# -- real cgroups, real processes ----------------------------------------------------------------


@pytest.fixture
def top() -> Path:
    return kube.cgroups_or_skip(cpuset=False)


@pytest.fixture
def sleeper() -> Iterator[subprocess.Popen[str]]:
    with kube.sleeping() as child:
        yield child


def test_a_process_moved_into_each_layout_is_known_by_its_pod(top: Path, sleeper: subprocess.Popen[str]) -> None:
    every = kube.layouts() + kube.layouts(root="kubelet")
    with kube.placed_in(top, [k.path for k in every]) as groups:
        for layout in every:
            (groups[layout.path] / "cgroup.procs").write_text(f"{sleeper.pid}\n")
            assert any(p.endswith(layout.path) for p in procfs.cgroup_paths(sleeper.pid)), layout.path
            assert pod_of(sleeper.pid) == _named(layout), layout.path
    assert pod_of(sleeper.pid) is None, "back at the top: in no pod"


def test_ps_labels_each_worker_with_its_pod(top: Path, tmp_path: Path) -> None:
    # A worker numapin exec placed, then moved into a pod's container cgroup: ps's row, its JSON and its series
    # carry the pod, and the official Prometheus parser reads the labels.
    from prometheus_client.parser import text_string_to_metric_families

    env = {**live.without_inputs(dict(os.environ)), RUNTIME_DIR: str(tmp_path / "records")}
    first = min(os.sched_getaffinity(0))
    worker = subprocess.Popen([sys.executable, "-m", "numapin", "exec", "--cpus", str(first), "--", sys.executable,
                               "-c", READY], stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert worker.stdout is not None and worker.stdout.readline() == "ready\n"
        layout = kube.layouts()[4]  # cgroupfs, burstable, CRI-O
        with kube.placed_in(top, [layout.path]) as groups:
            (groups[layout.path] / "cgroup.procs").write_text(f"{worker.pid}\n")
            listed = subprocess.run([sys.executable, "-m", "numapin", "ps", "--json"], env=env, capture_output=True,
                                    text=True, timeout=60)
            text = subprocess.run([sys.executable, "-m", "numapin", "ps"], env=env, capture_output=True, text=True,
                                  timeout=60).stdout
            series = subprocess.run([sys.executable, "-m", "numapin", "ps", "--prometheus"], env=env,
                                    capture_output=True, text=True, timeout=60).stdout
    finally:
        worker.kill()
        worker.wait()
    row = next(w for w in json.loads(listed.stdout)["workers"] if w["pid"] == worker.pid)
    assert row["pod"] == {"uid": layout.uid, "qos": "burstable", "driver": "cgroupfs",
                          "container_id": layout.container_id, "runtime": "cri-o", "namespace": None, "name": None,
                          "container": None}
    assert f"pod {layout.uid} container {layout.container_id[:12]}" in text and " pod " in text.splitlines()[0]
    labels = [s.labels for f in text_string_to_metric_families(series) if f.name == "numapin_worker"
              for s in f.samples if s.labels["pid"] == str(worker.pid)]
    assert labels and labels[0]["pod_uid"] == layout.uid and labels[0]["container_id"] == layout.container_id
    assert labels[0]["namespace"] == labels[0]["pod"] == labels[0]["container"] == "", "names only from the API"


# -- who made the pod's cgroups ------------------------------------------------------------------------


@pytest.fixture
def delegated(top: Path, other: Other) -> Iterator[Path]:
    """A cgroup given to the other user, as systemd's user@UID.service is: the folder and its files its own."""
    folder = top / f"numapin-user-{uuid.uuid4().hex[:8]}"
    folder.mkdir()
    for path in (folder, *folder.iterdir()):
        os.chown(path, other.uid, other.gid)
    yield folder
    for below in sorted(folder.rglob("*"), key=lambda p: len(p.parts), reverse=True):
        if below.is_dir():
            for pid in (below / "cgroup.procs").read_text().split():
                with contextlib.suppress(OSError):
                    (top / "cgroup.procs").write_text(f"{pid}\n")
            below.rmdir()
    for pid in (folder / "cgroup.procs").read_text().split():
        with contextlib.suppress(OSError):
            (top / "cgroup.procs").write_text(f"{pid}\n")
    folder.rmdir()


def _laid_out_by_the_user(delegated: Path, other: Other, layout: kube.Layout) -> subprocess.Popen[str]:
    """The other user's process, moved by that user into the kubelet's names made in its own subtree."""
    proc = other.start("read line; exec sleep 300")
    (delegated / "cgroup.procs").write_text(f"{proc.pid}\n")  # into its subtree (by root, as a login puts it)
    other.sh('mkdir -p "$1" && echo "$2" > "$1/cgroup.procs"', str(delegated) + layout.path, str(proc.pid))
    assert any(p.endswith(layout.path) for p in procfs.cgroup_paths(proc.pid)), "moved by its own user"
    return proc


@pytest.mark.parametrize("driver", ["cgroupfs", "systemd"])
def test_the_kubelets_names_in_a_users_own_subtree_name_no_pod(top: Path, other: Other, delegated: Path,
                                                               driver: str) -> None:
    layout = kube.Layout(driver, "guaranteed", "containerd", str(uuid.uuid4()), os.urandom(32).hex())
    proc = _laid_out_by_the_user(delegated, other, layout)
    try:
        assert pod_in_path(procfs.cgroup_paths(proc.pid)[0]) is not None or any(
            pod_in_path(p) is not None for p in procfs.cgroup_paths(proc.pid)), "the path reads as a pod's"
        assert pod_of(proc.pid) is None, "but its folders are the user's own"
    finally:
        proc.kill()
        proc.wait()


#: Runs in a cgroup namespace of its own, with the hierarchy mounted afresh (a container's view: other pods'
#: paths are ``/../..``, their folders out of sight): prints what pod_of makes of each process.
_IN_A_CGROUP_NAMESPACE = """
import json, sys
from numapin.facts import procfs
from numapin.facts.pod import pod_of
print(json.dumps({pid: [procfs.cgroup_paths(int(pid)), None if (p := pod_of(int(pid))) is None else p.uid]
                  for pid in sys.argv[1:]}))
"""


def test_from_a_cgroup_namespace_only_a_path_from_the_kubelets_root_names_a_pod(
        top: Path, other: Other, delegated: Path, sleeper: subprocess.Popen[str]) -> None:
    if shutil.which("unshare") is None:
        pytest.skip("needs unshare(1)")
    kubelets = kube.Layout("cgroupfs", "besteffort", "containerd", str(uuid.uuid4()), os.urandom(32).hex())
    users = kube.Layout("cgroupfs", "guaranteed", "containerd", str(uuid.uuid4()), os.urandom(32).hex())
    fstype = "cgroup2" if (top / "cgroup.subtree_control").exists() else "cgroup"
    options = "" if fstype == "cgroup2" else "-o " + _controllers(top)
    reader = f"numapin-reader-{uuid.uuid4().hex[:8]}"
    proc = _laid_out_by_the_user(delegated, other, users)
    try:
        with kube.placed_in(top, [kubelets.path, reader]) as groups:
            (groups[kubelets.path] / "cgroup.procs").write_text(f"{sleeper.pid}\n")
            # Into the reader's cgroup, then a cgroup and a mount namespace of its own with the hierarchy mounted
            # afresh: from there, other cgroups' paths start with /.. and their folders are out of sight.
            remount = f'umount "{top}" && mount -t {fstype} {options} none "{top}"'
            inner = f'{remount} && exec "$0" -c "$1" {sleeper.pid} {proc.pid}'
            script = (f'echo $$ > "{groups[reader]}/cgroup.procs" && '
                      f'exec unshare --cgroup --mount sh -c \'{inner}\' "{sys.executable}" "$0"')
            done = subprocess.run(["sh", "-c", script, _IN_A_CGROUP_NAMESPACE], capture_output=True, text=True,
                                  timeout=60)
            assert done.returncode == 0, done.stderr
            seen = json.loads(done.stdout)
    finally:
        proc.kill()
        proc.wait()
    paths, uid = seen[str(sleeper.pid)]
    assert any(p.startswith("/..") and p.endswith(kubelets.path) for p in paths), paths
    assert uid == kubelets.uid, "a path from the kubelet's root names its pod"
    paths, uid = seen[str(proc.pid)]
    assert any(p.startswith("/..") and p.endswith(users.path) for p in paths), paths
    assert uid is None, "a path through a user's subtree names none"


def _controllers(top: Path) -> str:
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        before, after = line.split(" - ")
        if before.split()[4] == str(top):
            return ",".join(o for o in after.split()[2].split(",") if o not in ("rw", "ro"))
    raise AssertionError(f"{top} is not mounted")
