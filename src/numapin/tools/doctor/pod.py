"""The doctor's findings for a process in a Kubernetes pod: the kubelet's decisions against its GPU's node."""

from __future__ import annotations

import os

from ...cpuset import CpuSet
from ...facts.cgroup import read_cgroup
from ...facts.host import Host
from ...facts.kubelet import CONFIG, STATE, Kubelet, read_kubelet
from ...facts.machine import Facts
from ...facts.pod import pod_of
from ...facts.podresources import PodResourcesUnavailable, allocatable, gpu_key, listing, match
from ...placement.modes import Placement
from .finding import Finding

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping

    from ...facts.dra import DraDevice
    from ...facts.inventory import Gpu
    from ...facts.pod import Pod
    from ...facts.podresources import Container

__all__ = ["dra_findings", "pod_findings"]


def pod_findings(pid: int, facts: Facts, placement: Placement | None, root: str | os.PathLike[str] | None,
                env: Mapping[str, str], pod_resources: str | None, *, pod: Pod | None = None,
                containers: tuple[Container, ...] | None = None, kubelet: Kubelet | None = None) -> list[Finding]:
    """For a process in a Kubernetes pod: the kubelet's CPU and topology decisions against its GPU's node (``ps``
    lists the ids of those that are warnings or errors beside each worker in a pod). ``pod``, ``containers`` (the
    API's ``List``) and ``kubelet`` (its files): what the caller read already, once for many processes (``ps``)."""
    pod = pod or pod_of(pid)
    if pod is None:
        if not env.get("KUBERNETES_SERVICE_HOST"):
            return []
        # The kubelet gives every container this variable; a cgroup namespace hides the path that names the pod.
        return [Finding(
            "pod-unidentified", "info", f"process {pid} runs in a Kubernetes pod (KUBERNETES_SERVICE_HOST is set), "
            "and its cgroup path, which would name the pod, is hidden by its cgroup namespace",
            "the kubelet's CPU and topology decisions for it cannot be checked from inside the pod",
            "run numapin doctor --pid PID on the node (as root), or in numapin's DaemonSet pod (hostPID)")]
    kubelet = kubelet or read_kubelet(root)
    where = f"pod {pod.uid} ({pod.qos})"
    found = _kubelet_settings(pid, facts, pod, kubelet, where)
    exclusive = kubelet.exclusive.get(pod.uid, {})  # its containers' own CPUs, by container name
    if kubelet.topology_scope == "container" and len(exclusive) > 1:
        found.append(Finding(
            "kubelet-topology-scope", "warning", f"topology manager scope container and {len(exclusive)} "
            f"containers of {where} with CPUs of their own ({', '.join(sorted(exclusive))})",
            "each container is aligned alone, so the containers of one GPU job may land on different nodes",
            f"set topologyManagerScope: pod in {CONFIG}"))
    mask = read_cgroup(Host.at("/"), pid=pid).cpus  # the container's cpuset: processes are always the live ones
    if pod_resources is not None:
        found += _pod_resources(facts, placement, pod_resources, mask, containers)
    node = None if placement is None else next((n for n in facts.topology.nodes if n.id == placement.node), None)
    if placement is None or node is None:
        return found
    mine = kubelet.by_container_id.get(pod.container_id or "") or next(
        (cpus for cpus in exclusive.values() if mask is not None and cpus == mask), None) or (
        next(iter(exclusive.values())) if len(exclusive) == 1 else None)
    if mine is not None and not mine <= node.cpus:
        found.append(Finding(
            "kubelet-cpus-other-node", "error", f"the CPU manager gave the container CPUs {mine}, "
            f"{'none' if not mine & node.cpus else 'only part'} of them on GPU {placement.gpu}'s node {node.id} "
            f"({node.cpus})", "its threads run across the interconnect from its GPU, and numapin, inside the "
            "container's cpuset, can only narrow them", f"set topologyManagerPolicy: single-numa-node in {CONFIG} "
            "(the kubelet then takes the CPUs from the GPU's node), or lower the pod's CPU request to fit one node"))
    if mask is not None and not mask & node.cpus:
        found.append(Finding(
            "pod-cpuset-misses-gpu-node", "error", f"the container's cpuset {mask} holds no CPU of GPU "
            f"{placement.gpu}'s node {node.id} ({node.cpus})", "numapin can place nothing useful: every CPU the "
            "container may use is across the interconnect from its GPU", "have the kubelet align the pod: "
            f"cpuManagerPolicy: static and topologyManagerPolicy: single-numa-node in {CONFIG}, a Guaranteed pod "
            "with integer CPU requests"))
    return found


def _kubelet_settings(pid: int, facts: Facts, pod: Pod, kubelet: Kubelet, where: str) -> list[Finding]:
    """The kubelet's own settings, as they bear on a GPU pod: its files unread, its CPU manager off for a
    Guaranteed pod, its topology manager not aligning on a machine of several nodes."""
    found = []
    if not kubelet.found:  # the container's own cpuset is still checked below
        found.append(Finding(
            "kubelet-unread", "info", f"process {pid} runs in {where}, and neither {CONFIG} nor {STATE} can be read "
            "here", "the kubelet's CPU and topology managers' decisions cannot be checked",
            "run doctor on the node as root, or mount /var/lib/kubelet read-only into numapin's pod"))
    if kubelet.unread:
        found.append(Finding(
            "kubelet-config-unread", "info", f"of {CONFIG}, not read: {'; '.join(kubelet.unread)}",
            "the kubelet settings there are not checked (its CPU and topology policies are, where read)",
            "install numapin[kubernetes] (PyYAML reads the whole file), or correct the file"))
    if kubelet.found and pod.qos == "guaranteed" and kubelet.cpu_manager == "none":
        found.append(Finding(
            "kubelet-cpu-manager-none", "warning", f"the kubelet's CPU manager policy is none and process {pid} runs "
            f"in a Guaranteed {where}", "no container gets CPUs of its own: the GPU worker's threads share every "
            "CPU of the node with all other pods, and the kubelet cannot align them with the GPU",
            f"set cpuManagerPolicy: static (and reservedSystemCPUs) in {CONFIG}, with integer CPU requests"))
    if kubelet.found and len(facts.topology.nodes) > 1 and kubelet.topology_manager in ("none", "best-effort"):
        found.append(Finding(
            "kubelet-topology-manager", "warning", f"the kubelet's topology manager policy is "
            f"{kubelet.topology_manager} on a node of {len(facts.topology.nodes)} NUMA nodes",
            "the kubelet admits a GPU pod whose CPUs (or memory) lie on another node than its GPU: nothing makes "
            "them agree", f"set topologyManagerPolicy: single-numa-node (or restricted) in {CONFIG}"))
    return found


def _pod_resources(facts: Facts, placement: Placement | None, socket: str, mask: CpuSet | None,
                   containers: tuple[Container, ...] | None) -> list[Finding]:
    """What the kubelet's pod-resources API says of the process's container (``containers``: its ``List``, when
    read already): a GPU from Dynamic Resource Allocation, which the topology manager does not align."""
    stale: list[Finding] = []
    try:
        if containers is None:
            listed = listing(socket)
            containers = listed.containers
            if listed.stale:
                stale = [Finding("pod-resources-stale", "info", f"the pods' devices are {listed.stale}",
                                 "what follows is checked against the kubelet's earlier answer",
                                 "check the kubelet (its pod-resources socket accepts but does not answer)")]
    except PodResourcesUnavailable as exc:
        return [Finding("pod-resources-unread", "info", str(exc), "the container's devices and the way its GPU "
                        "came to it cannot be checked", "install numapin[kubernetes] and mount the kubelet's "
                        "pod-resources folder (numapin's DaemonSet does)")]
    gpu = next((g for g in facts.inventory.gpus
                if placement is not None and g.is_at(placement.pci, placement.partition)), None)
    key = None if gpu is None else gpu_key(gpu)
    mine = match(containers, cpus=mask, gpus={gpu.uuid} if gpu is not None and gpu.uuid else (),
                 dra={key} if key is not None else ())
    found = [*stale, *_plugin_node(gpu, socket)]
    # NVIDIA's and AMD's device plugins (nvidia.com/gpu, amd.com/gpu): devices the topology manager aligns.
    plugged = mine is not None and any(d.resource.startswith(("nvidia.com/", "amd.com/")) for d in mine.devices)
    if mine is None or not mine.claims or plugged:
        return found
    container = f"container {mine.namespace}/{mine.pod}/{mine.name}"
    claims = ", ".join(mine.claims)
    why = ("the kubelet's topology manager aligns device-plugin devices with CPUs, not DRA's "
           "(kubernetes/website#56232): nothing put the container's CPUs near its GPU")
    fix = ("pin inside the pod with numapin exec or NUMAPIN_AUTOPIN (the GPU's node within its cpuset), and give the "
           "pod CPUs on that node (a DRA driver that publishes NUMA attributes, matched in the claim)")
    given = {d.device: g for d in mine.dra for g in facts.inventory.gpus if d.gpu is not None and d.gpu == gpu_key(g)}
    if not given:  # devices of no GPU numapin knows here (another driver, a VFIO device)
        return [*found, Finding("gpu-from-dra", "warning", f"{container} got its devices through Dynamic Resource "
                                f"Allocation (claim {claims}), and no GPU from a device plugin", why, fix)]
    near = facts.topology.cpus_of_nodes(CpuSet(g.node for g in given.values() if g.node is not None))
    if mask is not None and near and mask <= near:
        return found  # its cpuset lies on its DRA GPUs' node(s): aligned, by whoever did it
    named = ", ".join(f"{device} ({g.pci}, node {g.node})" for device, g in sorted(given.items()))
    return [*found, Finding(
        "gpu-from-dra", "warning", f"{container} got GPU {named} through Dynamic Resource Allocation (claim "
        f"{claims}); its cpuset {mask} is not on that node's CPUs ({near})", why, fix)]


def _plugin_node(gpu: Gpu | None, socket: str) -> list[Finding]:
    """The NUMA node the GPU's device plugin reports to the kubelet (``GetAllocatableResources``) against the
    kernel's: the topology manager aligns a pod's CPUs with the plugin's."""
    if gpu is None or gpu.uuid is None or gpu.node is None:
        return []
    try:
        devices, _ = allocatable(socket)
    except PodResourcesUnavailable:
        return []  # said once already, by List's finding
    reported = {n for d in devices for i in d.ids if i.lower() == gpu.uuid.lower() for n in d.nodes}
    if not reported or gpu.node in reported:
        return []
    return [Finding(
        "device-plugin-numa", "warning", f"the device plugin reports GPU {gpu.uuid} ({gpu.pci}) on NUMA node(s) "
        f"{', '.join(map(str, sorted(reported)))}; the kernel puts it on node {gpu.node}",
        "the kubelet's topology manager aligns the pod's CPUs and memory with the plugin's node, away from the GPU",
        "correct the plugin's topology (NVIDIA's device plugin reads the GPU's numa_node from sysfs: check the "
        "firmware's, and the plugin's version), then restart the pod")]


def dra_findings(facts: Facts, devices: tuple[DraDevice, ...]) -> list[Finding]:
    """Each GPU of the machine whose DRA device (matched by PCI address) publishes a NUMA node other than the
    kernel's: a claim aligned by ``matchAttribute`` on it puts CPUs and NICs on another node than its GPU's. The
    GPU's own memory node first (Grace: a node of no CPUs) is said as such, an error only where no node of the
    list is its CPUs'."""
    found = []
    by_pci = {d.pci: d for d in devices if d.pci and d.nodes}
    for gpu in facts.inventory.gpus:
        device = by_pci.get(gpu.pci)
        if device is None or gpu.node is None or device.nodes[0] == gpu.node:
            continue
        what = (f"DRA driver {device.driver} publishes {device.attribute}={list(device.nodes)} for GPU {gpu.pci} "
                f"(device {device.name}, slice {device.slice}); the kernel puts it on node {gpu.node}")
        if device.nodes[0] in gpu.gpu_memory_nodes and gpu.node in device.nodes:
            found.append(Finding("dra-numa-node", "info", what + ", its CPUs' node, which the list names too",
                                 "its first node is the GPU's own memory (no CPUs): aligned by the list, a claim "
                                 "still meets the CPUs' node", "nothing to do"))
            continue
        memory = device.nodes[0] in gpu.gpu_memory_nodes
        fix = ("publish the list form (the DRAListTypeAttributes gate and the driver's list option): its nodes "
               f"include node {gpu.node}, the CPUs' own" if memory else
               f"the driver read another node than the kernel's numa_node for {gpu.pci}: update or report it; until "
               "then align claims by resource.kubernetes.io/pcieRoot, not numaNode")
        found.append(Finding("dra-numa-node", "warning", what + (" (its own memory's node, of no CPUs)" if memory
                                                                   else ""),
                             "the scheduler aligns a claim's CPUs, NICs and memory by the published node: none of "
                             "those it names is the node of the GPU's CPUs, so they land across the interconnect "
                             f"from it (numapin places the worker on node {gpu.node} whatever the claim says)", fix))
    return found
