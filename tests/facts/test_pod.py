"""Issue 40, item 1: a process's Kubernetes pod and container from the cgroup path the kubelet made, in every
layout: the cgroupfs and systemd drivers, the three QoS classes, containerd, CRI-O and Docker ids, a kubelet
--cgroup-root; real cgroups made by the test with real processes moved in (root), and the same layouts read
as text."""

from __future__ import annotations

import json
import os
import subprocess
import sys
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
