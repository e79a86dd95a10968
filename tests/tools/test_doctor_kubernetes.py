"""Doctor checks the kubelet's CPU and topology decisions for a GPU worker in a pod. The
worker is a real process in a real cgroup laid out as the kubelet does (its container's cpuset the
kubelet's choice); the kubelet's files are written in their real formats (``KubeletConfiguration`` as
kubeadm writes /var/lib/kubelet/config.yaml; the CPU manager's checkpoint as
pkg/kubelet/cm/cpumanager/state/checkpoint.go serialises it) into the machine folder doctor reads. One
test per finding, each shown present and, with the fix applied, absent."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import kube
import live
from numapin.facts.kubelet import CONFIG, STATE, read_kubelet

READY = "import time; print('ready', flush=True); time.sleep(120)"

pytestmark = pytest.mark.skipif(not live.NODE0 or not live.NODE1, reason="needs CPUs 0 and 1 (the pair machine)")


@pytest.fixture
def top() -> Path:
    return kube.cgroups_or_skip(cpuset=True)


@pytest.fixture
def worker() -> Iterator[int]:
    with kube.sleeping() as child:
        yield child.pid


def _kubelet(root: Path, config: dict[str, str] | None, state: dict[str, object] | None) -> None:
    folder = root / "var/lib/kubelet"
    folder.mkdir(parents=True, exist_ok=True)
    for name in ("config.yaml", "cpu_manager_state"):
        (folder / name).unlink(missing_ok=True)
    if config is not None:
        lines = ["apiVersion: kubelet.config.k8s.io/v1beta1", "kind: KubeletConfiguration",
                 "authentication:", "  anonymous:", "    enabled: false"]  # nested keys: not the ones read
        lines += [f"{key}: {value}" for key, value in config.items()]
        (folder / "config.yaml").write_text("\n".join(lines) + "\n")
    if state is not None:
        (folder / "cpu_manager_state").write_text(json.dumps({**state, "checksum": 1234567890}))


def _findings(pid: int, root: Path, gpu: int = 0) -> dict[str, dict[str, str]]:
    done = subprocess.run([sys.executable, "-m", "numapin", "doctor", "--pid", str(pid), "--gpu", str(gpu),
                           "--root", str(root), "--json"], capture_output=True, text=True, timeout=60)
    assert done.returncode in (0, 1), done.stderr
    return {f["id"]: f for f in json.loads(done.stdout)["findings"]}


@pytest.fixture
def in_pod(top: Path, worker: int, pair_root: Path) -> Iterator[tuple[int, kube.Layout]]:
    """The worker in a Guaranteed pod's container (systemd driver, containerd), its cpuset CPU 0 (GPU 0's
    node on the pair machine)."""
    layout = kube.Layout("systemd", "guaranteed", "containerd", "4aec46af-22b7-4e26-babb-d15383ac9151",
                         os.urandom(32).hex())
    with kube.placed_in(top, [layout.path], cpus="0") as groups:
        (groups[layout.path] / "cgroup.procs").write_text(f"{worker}\n")
        yield worker, layout


def test_the_kubelets_files_are_read_in_their_real_formats(pair_root: Path) -> None:
    _kubelet(pair_root, {"cpuManagerPolicy": "static", "topologyManagerPolicy": '"single-numa-node"  # aligned'},
             {"policyName": "static", "defaultCpuSet": "0-1,6-11",
              "entries": {"4aec46af-22b7-4e26-babb-d15383ac9151": {"mysqld": "2-3"}}})
    found = read_kubelet(pair_root)
    assert (found.cpu_manager, found.topology_manager, found.topology_scope) == ("static", "single-numa-node",
                                                                                 "container")
    assert {k: {c: str(v) for c, v in d.items()} for k, d in found.exclusive.items()} == {
        "4aec46af-22b7-4e26-babb-d15383ac9151": {"mysqld": "2-3"}}
    _kubelet(pair_root, None, {"policyName": "static", "defaultCpuSet": "0", "entries": {"a" * 64: "1"}})
    older = read_kubelet(pair_root)  # the older checkpoint, keyed by container id
    assert str(older.by_container_id["a" * 64]) == "1" and older.config is None
    _kubelet(pair_root, None, None)
    assert not read_kubelet(pair_root).found


@pytest.mark.parametrize("depth", [1000, 100_000])
def test_a_checkpoint_nested_past_any_parser_is_read_as_none(pair_root: Path, depth: int) -> None:
    # json raises RecursionError (no ValueError) past its nesting limit: the reader reads no checkpoint, and
    # doctor says what it read of the kubelet, never a traceback.
    _kubelet(pair_root, {"cpuManagerPolicy": "static"}, None)
    state = pair_root / "var/lib/kubelet/cpu_manager_state"
    state.write_text('{"policyName": "static", "entries": ' + "[" * depth + "]" * depth + "}")
    found = read_kubelet(pair_root)
    assert found.cpu_manager == "static" and found.exclusive == {} and found.by_container_id == {}
    done = subprocess.run([sys.executable, "-m", "numapin", "doctor", "--json"], capture_output=True, text=True,
                          timeout=60, env={**os.environ, "NUMAPIN_FSROOT": str(pair_root)})
    assert "Traceback" not in done.stderr and done.returncode in (0, 1), done.stderr


def test_cpu_manager_none_with_a_guaranteed_gpu_pod(in_pod: tuple[int, kube.Layout], pair_root: Path) -> None:
    pid, _ = in_pod
    _kubelet(pair_root, {"cpuManagerPolicy": "none", "topologyManagerPolicy": "single-numa-node"},
             {"policyName": "none", "defaultCpuSet": ""})
    finding = _findings(pid, pair_root)["kubelet-cpu-manager-none"]
    assert finding["severity"] == "warning" and "cpuManagerPolicy: static" in finding["fix"]
    _kubelet(pair_root, {"cpuManagerPolicy": "static", "topologyManagerPolicy": "single-numa-node"},
             {"policyName": "static", "defaultCpuSet": "1"})
    assert "kubelet-cpu-manager-none" not in _findings(pid, pair_root)


def test_a_topology_manager_that_aligns_nothing(in_pod: tuple[int, kube.Layout], pair_root: Path) -> None:
    pid, _ = in_pod
    for weak in ("best-effort", None):  # None: the key absent, the kubelet's default (none)
        _kubelet(pair_root, {"cpuManagerPolicy": "static", **({"topologyManagerPolicy": weak} if weak else {})},
                 None)
        finding = _findings(pid, pair_root)["kubelet-topology-manager"]
        assert f"is {weak or 'none'} on a node of 2 NUMA nodes" in finding["sees"]
        assert "single-numa-node" in finding["fix"]
    _kubelet(pair_root, {"cpuManagerPolicy": "static", "topologyManagerPolicy": "restricted"}, None)
    assert "kubelet-topology-manager" not in _findings(pid, pair_root)


def test_a_container_scope_splits_a_pods_containers(in_pod: tuple[int, kube.Layout], pair_root: Path) -> None:
    pid, layout = in_pod
    state = {"policyName": "static", "defaultCpuSet": "", "entries": {layout.uid: {"worker": "0", "sidecar": "1"}}}
    _kubelet(pair_root, {"cpuManagerPolicy": "static", "topologyManagerPolicy": "single-numa-node"}, state)
    finding = _findings(pid, pair_root)["kubelet-topology-scope"]
    assert "sidecar, worker" in finding["sees"] and "topologyManagerScope: pod" in finding["fix"]
    _kubelet(pair_root, {"cpuManagerPolicy": "static", "topologyManagerPolicy": "single-numa-node",
                         "topologyManagerScope": "pod"}, state)
    assert "kubelet-topology-scope" not in _findings(pid, pair_root)


def test_exclusive_cpus_on_another_node_than_the_gpus(in_pod: tuple[int, kube.Layout], pair_root: Path) -> None:
    pid, layout = in_pod
    config = {"cpuManagerPolicy": "static", "topologyManagerPolicy": "single-numa-node"}
    _kubelet(pair_root, config, {"policyName": "static", "defaultCpuSet": "0", "entries": {layout.uid: {"w": "1"}}})
    finding = _findings(pid, pair_root)["kubelet-cpus-other-node"]
    assert finding["severity"] == "error" and "CPUs 1, none of them on GPU 0's node 0" in finding["sees"]
    _kubelet(pair_root, config, {"policyName": "static", "defaultCpuSet": "1", "entries": {layout.uid: {"w": "0"}}})
    assert "kubelet-cpus-other-node" not in _findings(pid, pair_root)


def test_a_containers_cpuset_without_its_gpus_node(in_pod: tuple[int, kube.Layout], pair_root: Path) -> None:
    pid, _ = in_pod  # its cpuset is CPU 0: GPU 0's node; GPU 1's node (CPU 1) it has none of
    _kubelet(pair_root, {"cpuManagerPolicy": "static", "topologyManagerPolicy": "single-numa-node"}, None)
    finding = _findings(pid, pair_root, gpu=1)["pod-cpuset-misses-gpu-node"]
    assert finding["severity"] == "error" and "cpuset 0 holds no CPU of GPU 1's node 1" in finding["sees"]
    assert "pod-cpuset-misses-gpu-node" not in _findings(pid, pair_root, gpu=0)


def test_a_pod_whose_kubelet_files_cannot_be_read_says_so(in_pod: tuple[int, kube.Layout], pair_root: Path) -> None:
    pid, layout = in_pod
    _kubelet(pair_root, None, None)
    finding = _findings(pid, pair_root)["kubelet-unread"]
    assert finding["severity"] == "info" and layout.uid in finding["sees"] and CONFIG in finding["sees"]
    assert STATE in finding["sees"]


# -- inside the pod (item 4) ---------------------------------------------------------------------


def _inside(group: Path, *argv: str, **env: str) -> subprocess.CompletedProcess[str]:
    """``argv`` run inside ``group`` from its first instruction: the shell joins the cgroup, then execs it."""
    script = f'echo $$ > "{group}/cgroup.procs" && exec "$@"'
    return subprocess.run(["sh", "-c", script, "sh", *argv], capture_output=True, text=True, timeout=120,
                          env={**live.without_inputs(dict(os.environ)), **env})


MASK = "import os; print(sorted(os.sched_getaffinity(0)))"


def test_exec_and_the_hook_place_inside_the_cpuset_the_kubelet_chose(top: Path, pair_root: Path,
                                                                     python: Any) -> None:
    # Two containers: one the kubelet gave both CPUs (exec and the start-up hook narrow the worker to its GPU's
    # node inside it), one it gave CPU 1 alone. There, for GPU 0, whose node the container has no CPU of, exec
    # leaves the kubelet's choice as it is and says so in one line (policy respect: never fighting whoever
    # decided first); for GPU 1 the worker runs on CPU 1.
    wide, narrow = (kube.Layout("cgroupfs", qos, "cri-o", str(uuid.uuid4()), os.urandom(32).hex())
                    for qos in ("guaranteed", "burstable"))
    hooked = python("-c", "import sys; print(sys.executable)").stdout.strip()
    exec_ = [sys.executable, "-m", "numapin", "exec", "--root", str(pair_root), "--memory", "none", "--gpu"]
    with kube.placed_in(top, [wide.path], cpus="0-1") as both, kube.placed_in(top, [narrow.path], cpus="1") as one:
        placed = _inside(both[wide.path], *exec_, "1", "--", sys.executable, "-c", MASK)
        assert placed.returncode == 0 and placed.stdout.strip() == "[1]", placed.stderr
        hook = _inside(both[wide.path], hooked, "-c", MASK, NUMAPIN_AUTOPIN="1", LOCAL_RANK="0",
                       NUMAPIN_FSROOT=str(pair_root), NUMAPIN_MEMORY="none")
        assert hook.stdout.strip() == "[0]", hook.stderr
        kept = _inside(one[narrow.path], *exec_, "0", "--", sys.executable, "-c", MASK)
        assert kept.returncode == 0 and kept.stdout.strip() == "[1]", kept
        assert kept.stderr.count("\n") == 1 and "left as it is" in kept.stderr, kept.stderr
        inside = _inside(one[narrow.path], *exec_, "1", "--", sys.executable, "-c", MASK)
        assert inside.returncode == 0 and inside.stdout.strip() == "[1]" and inside.stderr == "", inside


def test_doctor_in_the_pod_says_what_it_could_not_check_and_why(top: Path, pair_root: Path) -> None:
    layout = kube.Layout("systemd", "burstable", "containerd", str(uuid.uuid4()), os.urandom(32).hex())
    pod_env = {"KUBERNETES_SERVICE_HOST": "10.96.0.1"}
    doctor = [sys.executable, "-m", "numapin", "doctor", "--gpu", "0", "--root", str(pair_root), "--json"]
    with kube.placed_in(top, [layout.path], cpus="1") as groups:
        seen = _inside(groups[layout.path], *doctor, **pod_env)
        found = {f["id"]: f for f in json.loads(seen.stdout)["findings"]}
        assert found["pod-cpuset-misses-gpu-node"]["severity"] == "error", found  # none of GPU 0's node
        assert layout.uid in found["kubelet-unread"]["sees"], "its pod is known, the kubelet's files are not here"
        if shutil.which("unshare"):
            # A cgroup namespace, as a container has, hides the path that names the pod: doctor says so.
            hidden = _inside(groups[layout.path], "unshare", "--cgroup", *doctor, **pod_env)
            found = {f["id"]: f for f in json.loads(hidden.stdout)["findings"]}
            assert "pod-unidentified" in found and "kubelet-unread" not in found, hidden.stderr
            assert "doctor --pid PID on the node" in found["pod-unidentified"]["fix"]
    outside = subprocess.run(doctor, capture_output=True, text=True, timeout=60, env=live.without_inputs(
        dict(os.environ)))
    assert not {"pod-unidentified", "kubelet-unread"} & {f["id"] for f in json.loads(outside.stdout)["findings"]}


def test_ps_lists_the_kubelet_findings_beside_each_worker_in_a_pod(in_pod: tuple[int, kube.Layout],
                                                                  pair_root: Path) -> None:
    pid, layout = in_pod
    _kubelet(pair_root, {"cpuManagerPolicy": "static", "topologyManagerPolicy": "best-effort"},
             {"policyName": "static", "defaultCpuSet": "0", "entries": {layout.uid: {"w": "1"}}})
    ps = [sys.executable, "-m", "numapin", "ps", str(pid), "--root", str(pair_root), "--pod-resources", ""]
    row = json.loads(subprocess.run([*ps, "--json"], capture_output=True, text=True, timeout=60).stdout)["workers"][0]
    assert row["pod"]["uid"] == layout.uid and "kubelet-topology-manager" in row["kubelet"]
    assert "kubelet-unread" not in row["kubelet"], "only warnings and errors"
    text = subprocess.run(ps, capture_output=True, text=True, timeout=60).stdout
    assert f"kubelet: {pid}: kubelet-topology-manager" in text and f"numapin doctor --pid {pid}" in text
    _kubelet(pair_root, {"cpuManagerPolicy": "static", "topologyManagerPolicy": "single-numa-node"}, None)
    row = json.loads(subprocess.run([*ps, "--json"], capture_output=True, text=True, timeout=60).stdout)["workers"][0]
    assert row["kubelet"] == []


def test_without_a_yaml_parser_the_top_level_settings_are_read_and_the_rest_named(
        pair_root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "yaml", None)  # as where the kubernetes extra is not installed
    path = pair_root / CONFIG
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text('cpuManagerPolicy: "static"  # a comment\ncpuManagerPolicyOptions:\n  full-pcpus-only: "true"\n'
                    "topologyManagerPolicy: single-numa-node\ntopologyManagerPolicyOptions: {a: b}\n"
                    "allowedUnsafeSysctls:\n  - kernel.numa_balancing\nnote: |\n  text\n")
    found = read_kubelet(pair_root)
    assert (found.cpu_manager, found.topology_manager) == ("static", "single-numa-node")
    assert [u.split()[0] for u in found.unread] == ["cpuManagerPolicyOptions", "topologyManagerPolicyOptions",
                                                    "allowedUnsafeSysctls", "note"]
    assert all("numapin[kubernetes]" in u for u in found.unread)
