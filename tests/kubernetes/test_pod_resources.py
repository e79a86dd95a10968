"""The kubelet's pod-resources API names the pods and containers of workers. A real gRPC server
started by the test speaks the kubelet's published v1 API (``v1.PodResourcesLister``, from
k8s.io/kubelet/pkg/apis/podresources/v1/api.proto: its messages built here, by this test, from that file's
names and field numbers) on a Unix socket; real worker processes sit in real cgroups laid out as the kubelet
does; numapin's names and device assignments come from the server."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from concurrent import futures
from pathlib import Path
from typing import Any

import pytest

import kube
import live
from numapin.base.environment import RUNTIME_DIR
from numapin.cpuset import CpuSet
from numapin.facts.podresources import (
    Container,
    Device,
    DraDevice,
    PodResourcesUnavailable,
    allocatable,
    list_containers,
    listing,
    match,
)

READY = "import time; print('ready', flush=True); time.sleep(120)"


def _api() -> dict[str, Any]:
    """The API's messages, as the test's own reading of api.proto: (field, number, type, repeated, message)."""
    kube.needed("google.protobuf", "kubetest")
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    string, int64, message = 9, 3, 11
    spec = {
        "ListPodResourcesRequest": [],
        "ListPodResourcesResponse": [("pod_resources", 1, message, True, "PodResources")],
        "AllocatableResourcesRequest": [],
        "AllocatableResourcesResponse": [("devices", 1, message, True, "ContainerDevices"),
                                         ("cpu_ids", 2, int64, True, None)],
        "PodResources": [("name", 1, string, False, None), ("namespace", 2, string, False, None),
                         ("containers", 3, message, True, "ContainerResources")],
        "ContainerResources": [("name", 1, string, False, None), ("devices", 2, message, True, "ContainerDevices"),
                               ("cpu_ids", 3, int64, True, None),
                               ("dynamic_resources", 5, message, True, "DynamicResource")],
        "ContainerDevices": [("resource_name", 1, string, False, None), ("device_ids", 2, string, True, None),
                             ("topology", 3, message, False, "TopologyInfo")],
        "TopologyInfo": [("nodes", 1, message, True, "NUMANode")],
        "NUMANode": [("ID", 1, int64, False, None)],
        "DynamicResource": [("claim_name", 2, string, False, None), ("claim_namespace", 3, string, False, None),
                            ("claim_resources", 4, message, True, "ClaimResource")],
        "ClaimResource": [("cdi_devices", 1, message, True, "CDIDevice"), ("driver_name", 2, string, False, None),
                          ("pool_name", 3, string, False, None), ("device_name", 4, string, False, None)],
        "CDIDevice": [("name", 1, string, False, None)],
    }
    proto = descriptor_pb2.FileDescriptorProto(name="test/podresources.proto", package="v1", syntax="proto3")
    for name, fields in spec.items():
        made = proto.message_type.add(name=name)
        for field, number, kind, many, typed in fields:
            made.field.add(name=field, number=number, type=kind, label=3 if many else 1,
                           **({"type_name": f".v1.{typed}"} if typed else {}))
    pool = descriptor_pool.DescriptorPool()
    pool.Add(proto)
    return {n: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"v1.{n}")) for n in spec}


Pods = list[tuple[str, str, list[dict[str, Any]]]]  # (namespace, name, containers as dicts)
Devices = list[tuple[str, list[str], list[int]]]  # (resource, ids, NUMA nodes)


@pytest.fixture
def kubelet(tmp_path: Path) -> Iterator[Callable[..., str]]:
    """Start a pod-resources server answering List with the pods given (and GetAllocatableResources with the
    devices given); the socket's path."""
    grpc: Any = kube.needed("grpc", "kubetest")
    api = _api()
    servers = []

    def add_devices(into: Any, devices: Devices) -> None:
        for resource, ids, nodes in devices:
            device = into.add(resource_name=resource)
            device.device_ids.extend(ids)
            for node in nodes:
                device.topology.nodes.add(ID=node)

    def serve(pods: Pods, devices: Devices | None = None) -> str:
        def answer(request: Any, context: Any) -> Any:
            response = api["ListPodResourcesResponse"]()
            for namespace, name, containers in pods:
                pod = response.pod_resources.add(name=name, namespace=namespace)
                for c in containers:
                    made = pod.containers.add(name=c["name"])
                    made.cpu_ids.extend(c.get("cpus", []))
                    add_devices(made.devices, c.get("devices", []))
                    for claim in c.get("claims", []):
                        # A claim is its name, or (name, [(driver, pool, device, [CDI names])...]).
                        claim_name, given = (claim, []) if isinstance(claim, str) else claim
                        added = made.dynamic_resources.add(claim_namespace=namespace, claim_name=claim_name)
                        for driver, pool, device, cdi in given:
                            resource = added.claim_resources.add(driver_name=driver, pool_name=pool,
                                                                 device_name=device)
                            for name in cdi:
                                resource.cdi_devices.add(name=name)
            return response

        def node(request: Any, context: Any) -> Any:
            response = api["AllocatableResourcesResponse"]()
            add_devices(response.devices, devices or [])
            response.cpu_ids.extend(sorted(os.sched_getaffinity(0)))
            return response

        handlers = {"List": grpc.unary_unary_rpc_method_handler(
            answer, request_deserializer=api["ListPodResourcesRequest"].FromString,
            response_serializer=api["ListPodResourcesResponse"].SerializeToString),
            "GetAllocatableResources": grpc.unary_unary_rpc_method_handler(
                node, request_deserializer=api["AllocatableResourcesRequest"].FromString,
                response_serializer=api["AllocatableResourcesResponse"].SerializeToString)}
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("v1.PodResourcesLister", handlers),))
        socket = str(tmp_path / f"kubelet-{len(servers)}.sock")
        server.add_insecure_port(f"unix://{socket}")
        server.start()
        servers.append(server)
        return socket

    yield serve
    for server in servers:
        server.stop(None)


def test_the_list_is_read_whole(kubelet: Callable[..., str]) -> None:
    socket = kubelet([("ml", "trainer-0", [{"name": "worker", "cpus": [2, 3], "devices": [
        ("nvidia.com/gpu", ["GPU-aaaa", "GPU-bbbb"], [1])]}, {"name": "sidecar"}]),
        ("inference", "server", [{"name": "engine", "claims": ["gpu-claim"]}])])
    found = list_containers(socket)
    assert found == (
        Container("ml", "trainer-0", "worker", (Device("nvidia.com/gpu", ("GPU-aaaa", "GPU-bbbb"), (1,)),),
                  CpuSet("2-3")),
        Container("ml", "trainer-0", "sidecar"),
        Container("inference", "server", "engine", claims=("inference/gpu-claim",)))


def test_an_unreachable_api_says_why(tmp_path: Path) -> None:
    kube.needed("grpc", "kubetest")
    with pytest.raises(PodResourcesUnavailable, match="no pod-resources socket at"):
        list_containers(str(tmp_path / "none.sock"))
    grpc: Any = kube.needed("grpc", "kubetest")
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=1))  # answers nothing: UNIMPLEMENTED
    socket = str(tmp_path / "mute.sock")
    server.add_insecure_port(f"unix://{socket}")
    server.start()
    try:
        with pytest.raises(PodResourcesUnavailable, match="did not answer List: UNIMPLEMENTED"):
            list_containers(socket)
    finally:
        server.stop(None)


def test_a_process_is_matched_by_its_cpus_or_its_gpu_and_never_by_a_guess() -> None:
    a = Container("ml", "a", "w", cpus=CpuSet("2-3"))
    b = Container("ml", "b", "w", (Device("nvidia.com/gpu", ("GPU-1",)),))
    assert match([a, b], cpus=CpuSet("2-3")) == a and match([a, b], gpus={"gpu-1"}) == b
    assert match([a, b], cpus=CpuSet("2-3"), gpus={"GPU-1"}) is None, "two ways that disagree name nothing"
    assert match([a, b], cpus=CpuSet("0-1")) is None and match([a, b]) is None


@pytest.fixture
def top() -> Path:
    return kube.cgroups_or_skip(cpuset=True)


def test_ps_names_each_worker_by_the_kubelets_api(top: Path, tmp_path: Path, kubelet: Callable[..., str]) -> None:
    # Two workers numapin exec placed, each moved into its own pod's container cgroup; the kubelet's API says
    # which containers own which exclusive CPUs (the containers' cpusets). ps names each, in text, JSON and
    # series; without the API it says why the names are missing.
    from prometheus_client.parser import text_string_to_metric_families

    if not live.NODE0 or not live.NODE1:
        pytest.skip("needs CPUs 0 and 1")
    env = {**live.without_inputs(dict(os.environ)), RUNTIME_DIR: str(tmp_path / "records")}
    layouts = [kube.Layout("systemd", "guaranteed", "containerd", str(uuid.uuid4()),
                           os.urandom(32).hex()) for _ in range(2)]
    socket = kubelet([("ml", "trainer-0", [{"name": "worker", "cpus": [0]}]),
                      ("ml", "trainer-1", [{"name": "worker", "cpus": [1]}, {"name": "log"}])])
    workers = []
    try:
        with kube.placed_in(top, [layouts[0].path], cpus="0") as first, \
                kube.placed_in(top, [layouts[1].path], cpus="1") as second:
            for cpu, group in ((0, first[layouts[0].path]), (1, second[layouts[1].path])):
                script = (f'echo $$ > "{group}/cgroup.procs" && exec {shlex.quote(sys.executable)} -m numapin exec '
                          f"--cpus {cpu} -- {shlex.quote(sys.executable)} -c {shlex.quote(READY)}")
                proc = subprocess.Popen(["sh", "-c", script], stdout=subprocess.PIPE, text=True, env=env)
                assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
                workers.append(proc)
            ps = [sys.executable, "-m", "numapin", "ps", "--pod-resources", socket]
            listed = json.loads(subprocess.run([*ps, "--json"], env=env, capture_output=True, text=True,
                                               timeout=60).stdout)
            series = subprocess.run([*ps, "--prometheus"], env=env, capture_output=True, text=True,
                                    timeout=60).stdout
            text = subprocess.run(ps, env=env, capture_output=True, text=True, timeout=60).stdout
            unnamed = subprocess.run([*ps[:-1], str(tmp_path / "none.sock")], env=env, capture_output=True,
                                     text=True, timeout=60).stdout
            exporter = subprocess.Popen([sys.executable, "-m", "numapin", "exporter", "--listen", "127.0.0.1:0",
                                         "--pod-resources", socket], env=env, stderr=subprocess.PIPE, text=True)
            try:
                assert exporter.stderr is not None
                url = exporter.stderr.readline().split()[-1]
                with urllib.request.urlopen(url, timeout=30) as answer:
                    scraped = answer.read().decode()
            finally:
                exporter.terminate()
                exporter.wait()
    finally:
        for proc in workers:
            proc.kill()
            proc.wait()
    pods = {w["pid"]: w["pod"] for w in listed["workers"]}
    for proc, layout, name in zip(workers, layouts, ("trainer-0", "trainer-1"), strict=True):
        assert pods[proc.pid] == {**pods[proc.pid], "uid": layout.uid, "namespace": "ml", "name": name,
                                  "container": "worker"}
    assert listed["pod_names_unread"] is None
    for exposition in (series, scraped):  # ps --prometheus, and the exporter as Prometheus scrapes it
        labels = {s.labels["pid"]: s.labels for f in text_string_to_metric_families(exposition)
                  if f.name == "numapin_worker" for s in f.samples}
        assert {(labels[str(p.pid)]["namespace"], labels[str(p.pid)]["pod"], labels[str(p.pid)]["container"])
                for p in workers} == {("ml", "trainer-0", "worker"), ("ml", "trainer-1", "worker")}
        assert {labels[str(p.pid)]["pod_uid"] for p in workers} == {k.uid for k in layouts}
    assert "ml/trainer-0/worker" in text and "ml/trainer-1/worker" in text
    assert "pod: named by UID and container id only: no pod-resources socket at" in unnamed
    assert f"pod {layouts[0].uid} container {layouts[0].container_id[:12]}" in unnamed


def test_doctor_says_a_gpu_from_dra_was_never_aligned(top: Path, pair_root: Path,
                                                     kubelet: Callable[..., str]) -> None:
    layout = kube.Layout("cgroupfs", "guaranteed", "containerd", str(uuid.uuid4()), os.urandom(32).hex())
    child = subprocess.Popen([sys.executable, "-c", READY], stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None and child.stdout.readline() == "ready\n"
    try:
        with kube.placed_in(top, [layout.path], cpus="0") as groups:
            (groups[layout.path] / "cgroup.procs").write_text(f"{child.pid}\n")
            doctor = [sys.executable, "-m", "numapin", "doctor", "--pid", str(child.pid), "--gpu", "0", "--root",
                      str(pair_root), "--json", "--pod-resources"]
            dra = kubelet([("serve", "engine-0", [{"name": "engine", "cpus": [0], "claims": ["gpus"]}])])
            found = {f["id"]: f for f in json.loads(subprocess.run(
                [*doctor, dra], capture_output=True, text=True, timeout=60).stdout)["findings"]}
            assert "serve/engine-0/engine" in found["gpu-from-dra"]["sees"]
            assert "serve/gpus" in found["gpu-from-dra"]["sees"]
            plugged = kubelet([("serve", "engine-0", [{"name": "engine", "cpus": [0], "claims": ["nics"],
                                                       "devices": [("nvidia.com/gpu", ["GPU-x"], [0])]}])])
            found = {f["id"] for f in json.loads(subprocess.run(
                [*doctor, plugged], capture_output=True, text=True, timeout=60).stdout)["findings"]}
            assert "gpu-from-dra" not in found and "pod-resources-unread" not in found
    finally:
        child.kill()
        child.wait()


def test_the_nodes_devices_and_cpus_are_read(kubelet: Callable[..., str]) -> None:
    socket = kubelet([], [("nvidia.com/gpu", ["GPU-a"], [0]), ("nvidia.com/gpu", ["GPU-b"], [1])])
    devices, cpus = allocatable(socket)
    assert devices == (Device("nvidia.com/gpu", ("GPU-a",), (0,)), Device("nvidia.com/gpu", ("GPU-b",), (1,)))
    assert cpus == CpuSet(os.sched_getaffinity(0))


def test_doctor_says_when_the_device_plugin_puts_the_gpu_on_another_node(
        top: Path, pair_root: Path, kubelet: Callable[..., str]) -> None:
    from numapin.facts.machine import gather

    gpu = gather(pair_root, {}).inventory.gpus[0]  # node 0 on the pair machine, as the kernel (sysfs) says
    assert gpu.uuid and gpu.node == 0
    layout = kube.Layout("cgroupfs", "burstable", "cri-o", str(uuid.uuid4()), os.urandom(32).hex())
    child = subprocess.Popen([sys.executable, "-c", READY], stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None and child.stdout.readline() == "ready\n"
    doctor = [sys.executable, "-m", "numapin", "doctor", "--pid", str(child.pid), "--gpu", "0", "--root",
              str(pair_root), "--json", "--pod-resources"]
    try:
        with kube.placed_in(top, [layout.path], cpus="0") as groups:
            (groups[layout.path] / "cgroup.procs").write_text(f"{child.pid}\n")
            wrong = kubelet([], [("nvidia.com/gpu", [gpu.uuid], [1])])
            found = {f["id"]: f for f in json.loads(subprocess.run(
                [*doctor, wrong], capture_output=True, text=True, timeout=60).stdout)["findings"]}
            assert f"reports GPU {gpu.uuid} ({gpu.pci}) on NUMA node(s) 1; the kernel puts it on node 0" in \
                found["device-plugin-numa"]["sees"]
            right = kubelet([], [("nvidia.com/gpu", [gpu.uuid.upper()], [0])])
            found = {f["id"]: f for f in json.loads(subprocess.run(
                [*doctor, right], capture_output=True, text=True, timeout=60).stdout)["findings"]}
            assert "device-plugin-numa" not in found
    finally:
        child.kill()
        child.wait()


CLAIM = "0b1f2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d"
#: What NVIDIA's DRA driver reports for GPU 1 (its /dev/nvidia1) allocated to a claim: driver, pool, device, CDI.
NVIDIA_GPU_1 = ("gpu.nvidia.com", "node-a", "gpu-1", [f"k8s.gpu.nvidia.com/claim={CLAIM}-gpu-1"])


def test_dra_devices_are_read_and_named_as_gpus(kubelet: Callable[..., str]) -> None:
    socket = kubelet([("serve", "engine-0", [{"name": "engine", "claims": [("gpus", [
        NVIDIA_GPU_1, ("gpu.nvidia.com", "node-a", "gpu-0-mig-1g.10gb-19-6", []),
        ("gpu.amd.com", "node-a", "gpu-1-129", [f"k8s.gpu.amd.com/gpu={CLAIM}-gpu-1-129"]),
        ("gpu.nvidia.com", "node-a", "gpu-vfio-3", []), ("nic.example.com", "node-a", "gpu-2", [])])]}])])
    (container,) = list_containers(socket)
    assert container.claims == ("serve/gpus",)
    assert container.dra[0] == DraDevice("gpu.nvidia.com", "node-a", "gpu-1",
                                         (f"k8s.gpu.nvidia.com/claim={CLAIM}-gpu-1",))
    assert [d.gpu for d in container.dra] == [("nvidia", 1), ("nvidia", 0), ("amd", 129), None, None]
    assert container.dra_gpus == {("nvidia", 1), ("nvidia", 0), ("amd", 129)}
    # The device's name empty, its CDI device still names it.
    assert DraDevice("gpu.nvidia.com", "p", "", (f"k8s.gpu.nvidia.com/claim={CLAIM}-gpu-7",)).gpu == ("nvidia", 7)
    assert match([container], dra={("nvidia", 1)}) == container and match([container], dra={("nvidia", 2)}) is None


def test_a_dra_pod_is_named_with_its_gpu_and_judged(top: Path, pair_root: Path, tmp_path: Path,
                                                    kubelet: Callable[..., str]) -> None:
    # A worker numapin exec placed for GPU 1 of the pair machine, in a pod container whose cpuset is GPU 1's node;
    # the kubelet says the container got GPU 1 (gpu-1) through a DRA claim, and no exclusive CPUs: ps names the
    # pod by the GPU, doctor finds it aligned; in a cpuset on the other node (where exec leaves it unplaced, so
    # doctor is told the GPU), doctor names the GPU and its node.
    if not live.NODE0 or not live.NODE1:
        pytest.skip("needs CPUs on both nodes of the pair machine")
    env = {**live.without_inputs(dict(os.environ)), RUNTIME_DIR: str(tmp_path / "records"),
           "NUMAPIN_FSROOT": str(pair_root)}
    layout = kube.Layout("systemd", "guaranteed", "containerd", str(uuid.uuid4()), os.urandom(32).hex())
    socket = kubelet([("serve", "engine-0", [{"name": "engine", "claims": [("gpus", [NVIDIA_GPU_1])]}]),
                      ("other", "job", [{"name": "main", "claims": [("gpus", [("gpu.nvidia.com", "node-a", "gpu-0",
                                                                                [])])]}])])
    for cpus, aligned in ((live.cpus(live.NODE1), True), (live.cpus(live.NODE0), False)):
        with kube.placed_in(top, [layout.path], cpus=cpus) as groups:
            group = groups[layout.path]
            script = (f'echo $$ > "{group}/cgroup.procs" && exec {shlex.quote(sys.executable)} -m numapin exec '
                      f"--gpu 1 -- {shlex.quote(sys.executable)} -c {shlex.quote(READY)}")
            worker = subprocess.Popen(["sh", "-c", script], stdout=subprocess.PIPE, text=True, env=env)
            try:
                assert worker.stdout is not None and worker.stdout.readline() == "ready\n"
                doctor = json.loads(subprocess.run(
                    [sys.executable, "-m", "numapin", "doctor", "--pid", str(worker.pid), "--gpu", "1", "--json",
                     "--pod-resources", socket], env=env, capture_output=True, text=True, timeout=60).stdout)
                listed = json.loads(subprocess.run(
                    [sys.executable, "-m", "numapin", "ps", "--json", "--pod-resources", socket], env=env,
                    capture_output=True, text=True, timeout=60).stdout)
            finally:
                worker.kill()
                worker.wait()
        found = {f["id"]: f for f in doctor["findings"]}
        if aligned:
            (row,) = [w for w in listed["workers"] if w["pid"] == worker.pid]
            assert (row["pod"]["namespace"], row["pod"]["name"], row["pod"]["container"]) == ("serve", "engine-0",
                                                                                              "engine"), row
            assert "gpu-from-dra" not in found, found
        else:
            gpu = "gpu-1 (0000:28:00.0, node 1)"
            assert gpu in found["gpu-from-dra"]["sees"] and "serve/gpus" in found["gpu-from-dra"]["sees"], found


def _hung(path: Path) -> tuple[Any, list[Any]]:
    """A Unix socket that accepts every connection and never answers (a kubelet that hangs)."""
    import socket as sockets
    import threading

    server = sockets.socket(sockets.AF_UNIX, sockets.SOCK_STREAM)
    server.bind(str(path))
    server.listen(16)
    held: list[Any] = []

    def accept() -> None:
        while True:
            try:
                held.append(server.accept()[0])
            except OSError:
                return

    threading.Thread(target=accept, daemon=True).start()
    return server, held


def test_a_hung_kubelet_leaves_ps_within_its_bound_and_its_last_answer_stands_in_said_stale(
        tmp_path: Path, kubelet: Callable[..., str]) -> None:
    kube.needed("grpc", "kubetest")
    hung_path = tmp_path / "hung.sock"
    server, held = _hung(hung_path)
    try:
        # ps with a worker in a pod asks List once; the kubelet never answers: ps ends, saying why.
        top = kube.cgroups_or_skip(cpuset=False)
        layout = kube.layouts()[1]
        with kube.sleeping() as worker, kube.placed_in(top, [layout.path]) as groups:
            (groups[layout.path] / "cgroup.procs").write_text(f"{worker.pid}\n")
            done = subprocess.run([sys.executable, "-m", "numapin", "ps", str(worker.pid), "--json",
                                   "--pod-resources", str(hung_path)], capture_output=True, text=True, timeout=60)
        assert done.returncode in (0, 1), done.stderr
        assert "did not answer List: DEADLINE_EXCEEDED" in json.loads(done.stdout)["pod_names_unread"]
        assert held, "ps never reached the hung socket"
        # In one process (an exporter's), an answer first, then none: the answer stands in, said stale.
        answering = Path(kubelet([("ml", "trainer-0", [{"name": "worker", "cpus": [0]}])]))
        flaky = tmp_path / "flaky.sock"
        flaky.symlink_to(answering)
        first = listing(str(flaky))
        assert first.stale is None and [c.pod for c in first.containers] == ["trainer-0"]
        flaky.unlink()
        flaky.symlink_to(hung_path)
        again = listing(str(flaky), timeout=0.5)
        assert again.containers == first.containers
        assert again.stale is not None and "answer of" in again.stale and "DEADLINE_EXCEEDED" in again.stale
        # Not asked again meanwhile: no new connection reaches the hung socket (a false pass is possible where
        # accepting is slow, a false failure not).
        reached = len(held)
        third = listing(str(flaky), timeout=30)
        time.sleep(0.3)
        assert third.containers == first.containers and third.stale is not None and len(held) == reached
    finally:
        server.close()
        for connection in held:
            connection.close()


@pytest.mark.parametrize("cpus", [[70_000], [-1], [1 << 40]])
def test_a_number_that_is_no_cpu_leaves_the_kubelets_answer_unavailable_never_a_traceback(
        cpus: list[int], kubelet: Callable[..., str]) -> None:
    # The API's int64 holds any number: a CPU id past CpuSet's range, or a NUMA node id, is "unavailable".
    socket = kubelet([("ml", "trainer-0", [{"name": "worker", "cpus": cpus}])], [("nvidia.com/gpu", ["GPU-a"], [0])])
    with pytest.raises(PodResourcesUnavailable, match="names a CPU that cannot be one"):
        listing(socket)
    with_node = kubelet([], [("nvidia.com/gpu", ["GPU-a"], [cpus[0]])])
    with pytest.raises(PodResourcesUnavailable, match="NUMA node"):
        allocatable(with_node)
    # ps and doctor over a worker in a pod, asking that kubelet: their answers, saying why, never a ValueError.
    top = kube.cgroups_or_skip(cpuset=False)
    layout = kube.layouts()[1]
    with kube.sleeping() as worker, kube.placed_in(top, [layout.path]) as groups:
        (groups[layout.path] / "cgroup.procs").write_text(f"{worker.pid}\n")
        ps = subprocess.run([sys.executable, "-m", "numapin", "ps", str(worker.pid), "--json", "--pod-resources",
                             socket], capture_output=True, text=True, timeout=60)
        doctor = subprocess.run([sys.executable, "-m", "numapin", "doctor", "--pid", str(worker.pid), "--json",
                                 "--pod-resources", socket], capture_output=True, text=True, timeout=60)
    assert ps.returncode in (0, 1) and "Traceback" not in ps.stderr, ps.stderr
    assert "names a CPU that cannot be one" in json.loads(ps.stdout)["pod_names_unread"]
    assert doctor.returncode in (0, 1) and "Traceback" not in doctor.stderr, doctor.stderr
    assert "pod-resources-unread" in {f["id"] for f in json.loads(doctor.stdout)["findings"]}


def test_names_from_the_kubelet_reach_a_terminal_escaped(top: Path, kubelet: Callable[..., str]) -> None:
    # Pod, container and claim names holding ESC, BEL and a line feed: doctor's DRA finding says them, one line each.
    layout = kube.Layout("cgroupfs", "guaranteed", "containerd", str(uuid.uuid4()), os.urandom(32).hex())
    odd = kubelet([("s\x1b[2J", "e\x07ngine", [{"name": "x\ny", "cpus": [0], "claims": ["c\x1b]0;t\x07"]}])])
    with kube.sleeping() as worker, kube.placed_in(top, [layout.path], cpus="0") as groups:
        (groups[layout.path] / "cgroup.procs").write_text(f"{worker.pid}\n")
        done = subprocess.run([sys.executable, "-m", "numapin", "doctor", "--pid", str(worker.pid), "--gpu", "0",
                               "--machine", "pair", "--pod-resources", odd], capture_output=True, text=True,
                              timeout=60)
    assert "Traceback" not in done.stderr, done.stderr
    (line,) = [line for line in done.stdout.splitlines() if "[gpu-from-dra]" in line]
    assert "s\\x1b[2J/e\\x07ngine/x\\ny" in line and "c\\x1b]0;t\\x07" in line, line
    assert not set(done.stdout) & {"\x1b", "\x07"}


def test_the_kubelets_files_are_read_once_a_scan(top: Path, tmp_path: Path, kubelet: Callable[..., str],
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    # Three workers in pods: one scan reads the kubelet's config.yaml and its state once, not once a worker.
    from numapin.facts import kubelet as kubelet_files
    from numapin.tools import ps
    from numapin.tools.doctor import pod

    env = {**live.without_inputs(dict(os.environ)), RUNTIME_DIR: str(tmp_path / "records")}
    monkeypatch.setenv(RUNTIME_DIR, env[RUNTIME_DIR])
    reads = []
    real = kubelet_files.read_kubelet

    def counted(root: Any = None) -> Any:
        reads.append(root)
        return real(root)

    monkeypatch.setattr(kubelet_files, "read_kubelet", counted)
    monkeypatch.setattr(pod, "read_kubelet", counted)
    layouts = [kube.Layout("systemd", "guaranteed", "containerd", str(uuid.uuid4()), os.urandom(32).hex())
               for _ in range(3)]
    socket = kubelet([("ml", f"trainer-{i}", [{"name": "worker"}]) for i in range(3)])
    workers = []
    try:
        with kube.placed_in(top, [layout.path for layout in layouts], cpus="0") as groups:
            for layout in layouts:
                script = (f'echo $$ > "{groups[layout.path]}/cgroup.procs" && exec {shlex.quote(sys.executable)} '
                          f"-m numapin exec --cpus 0 -- {shlex.quote(sys.executable)} -c {shlex.quote(READY)}")
                proc = subprocess.Popen(["sh", "-c", script], stdout=subprocess.PIPE, text=True, env=env)
                workers.append(proc)
                assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
            found = ps.survey([p.pid for p in workers], pod_resources=socket, memory=False)
    finally:
        for proc in workers:
            proc.kill()
            proc.wait()
    assert sum(w.pod is not None for w in found.workers) == 3
    assert len(reads) == 1, reads
