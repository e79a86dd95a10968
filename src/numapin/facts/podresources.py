"""The kubelet's pod-resources API: each pod's namespace and name, each container's name, devices and CPUs.

The kubelet serves ``v1.PodResourcesLister`` over gRPC on a Unix socket
(``/var/lib/kubelet/pod-resources/kubelet.sock``). Its ``List`` answers, for every pod of the node, its
name and namespace and, per container, the devices a device plugin gave it (``nvidia.com/gpu``: GPU
UUIDs, with their NUMA nodes), its exclusive CPUs (the static CPU manager's), and the devices Dynamic
Resource Allocation gave it. ``GetAllocatableResources`` answers the node's devices and CPUs.

The API names pods and containers but not their UIDs or container ids, which is all a process's cgroup
path holds (:mod:`numapin.facts.pod`). So a process is matched to the API's container by what both
know: the container's exclusive CPUs (its cpuset is exactly them) or the GPU it holds (its UUID among
the container's devices). A match that is not unique names nothing.

Needs the ``kubernetes`` extra (grpcio, protobuf). The messages are built at run time from the API's
published definition (``k8s.io/kubelet/pkg/apis/podresources/v1/api.proto``: names and field numbers as
published there), so no generated code is kept.
"""

from __future__ import annotations

from ..base.errors import EnvironmentProblem
from ..base.frozen import frozen
from ..cpuset import MAX_ID, CpuSet

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Collection, Iterable
    from typing import Any

    from .gpu import Gpu

__all__ = ["AMD_DRA", "NVIDIA_DRA", "QUIET_SECONDS", "SERVICE", "SOCKET", "Container", "Device", "DraDevice", "Listing",
           "PodResourcesUnavailable", "allocatable", "gpu_key", "list_containers", "listing", "match", "messages"]

#: Where the kubelet serves the API (its --pod-resources-directory, by default).
SOCKET = "/var/lib/kubelet/pod-resources/kubelet.sock"

#: The messages numapin reads: name -> [(field, number, type, label, message type)], as the proto publishes them.
_STRING, _INT64, _UINT64, _MESSAGE = 9, 3, 4, 11  # FieldDescriptorProto.Type
_ONE, _MANY = 1, 3  # FieldDescriptorProto.Label: optional (proto3's singular), repeated
_PROTO: dict[str, list[tuple[str, int, int, int, str | None]]] = {
    "ListPodResourcesRequest": [],
    "ListPodResourcesResponse": [("pod_resources", 1, _MESSAGE, _MANY, "PodResources")],
    "AllocatableResourcesRequest": [],
    "AllocatableResourcesResponse": [("devices", 1, _MESSAGE, _MANY, "ContainerDevices"),
                                     ("cpu_ids", 2, _INT64, _MANY, None),
                                     ("memory", 3, _MESSAGE, _MANY, "ContainerMemory")],
    "PodResources": [("name", 1, _STRING, _ONE, None), ("namespace", 2, _STRING, _ONE, None),
                     ("containers", 3, _MESSAGE, _MANY, "ContainerResources")],
    "ContainerResources": [("name", 1, _STRING, _ONE, None), ("devices", 2, _MESSAGE, _MANY, "ContainerDevices"),
                           ("cpu_ids", 3, _INT64, _MANY, None), ("memory", 4, _MESSAGE, _MANY, "ContainerMemory"),
                           ("dynamic_resources", 5, _MESSAGE, _MANY, "DynamicResource")],
    "ContainerMemory": [("memory_type", 1, _STRING, _ONE, None), ("size", 2, _UINT64, _ONE, None),
                        ("topology", 3, _MESSAGE, _ONE, "TopologyInfo")],
    "ContainerDevices": [("resource_name", 1, _STRING, _ONE, None), ("device_ids", 2, _STRING, _MANY, None),
                         ("topology", 3, _MESSAGE, _ONE, "TopologyInfo")],
    "TopologyInfo": [("nodes", 1, _MESSAGE, _MANY, "NUMANode")],
    "NUMANode": [("ID", 1, _INT64, _ONE, None)],
    "DynamicResource": [("claim_name", 2, _STRING, _ONE, None), ("claim_namespace", 3, _STRING, _ONE, None),
                        ("claim_resources", 4, _MESSAGE, _MANY, "ClaimResource")],
    "ClaimResource": [("cdi_devices", 1, _MESSAGE, _MANY, "CDIDevice"), ("driver_name", 2, _STRING, _ONE, None),
                      ("pool_name", 3, _STRING, _ONE, None), ("device_name", 4, _STRING, _ONE, None)],
    "CDIDevice": [("name", 1, _STRING, _ONE, None)],
}
_PACKAGE = "v1"
SERVICE = f"/{_PACKAGE}.PodResourcesLister"


class PodResourcesUnavailable(EnvironmentProblem):
    """The API could not be asked: the extra is not installed, no socket, or the kubelet did not answer."""


@frozen
class Device:
    """Devices of one resource a device plugin gave a container."""

    resource: str
    ids: tuple[str, ...]
    nodes: tuple[int, ...] = ()


@frozen
class DraDevice:
    """One device a Dynamic Resource Allocation claim gave a container (the API's ``ClaimResource``)."""

    driver: str
    """The DRA driver's name: ``gpu.nvidia.com`` (NVIDIA's), ``gpu.amd.com`` (AMD's)..."""
    pool: str
    device: str
    """The driver's name of the device: NVIDIA's ``gpu-MINOR`` (``/dev/nvidiaMINOR``; a MIG device
    ``gpu-MINOR-mig-...``, its parent's minor first), AMD's ``gpu-CARD-RENDER`` (``/dev/dri/renderDRENDER``)."""
    cdi: tuple[str, ...] = ()
    """Its CDI devices' names (``k8s.gpu.nvidia.com/claim=CLAIMUID-gpu-0``)."""

    @property
    def gpu(self) -> tuple[str, int] | None:
        """Which GPU it is, as :func:`gpu_key` names one: (vendor, the minor of its device file); None for
        a device of another driver, or one of no device file (NVIDIA's ``gpu-vfio-N``)."""
        names = [self.device] + [c.rpartition("=")[2][37:] for c in self.cdi if "=" in c]  # CLAIMUID- cut off
        for name in names:
            parts = name.split("-")
            if self.driver == NVIDIA_DRA and len(parts) >= 2 and parts[0] == "gpu" and _number(parts[1]) \
                    and (len(parts) == 2 or parts[2] == "mig"):
                return "nvidia", int(parts[1])
            if self.driver == AMD_DRA and len(parts) == 3 and parts[0] == "gpu" and _number(parts[1]) \
                    and _number(parts[2]):
                return "amd", int(parts[2])
        return None


#: The GPU drivers of Dynamic Resource Allocation whose device names numapin maps to GPUs (NVIDIA's
#: dra-driver-nvidia-gpu, ``cmd/gpu-kubelet-plugin``: ``DriverName``, ``GpuInfo.CanonicalName``; AMD's
#: k8s-gpu-dra-driver, ``pkg/consts``, ``AmdGpuInfo.CanonicalName``).
NVIDIA_DRA = "gpu.nvidia.com"
AMD_DRA = "gpu.amd.com"


def _number(text: str) -> bool:
    return text.isascii() and text.isdigit() and len(text) < 10


def gpu_key(gpu: Gpu) -> tuple[str, int] | None:
    """How a DRA device names ``gpu``: its vendor (``nvidia``, ``amd``) and the minor of its device file
    (``/dev/nvidiaN``, AMD's render node ``/dev/dri/renderDN``); None for a GPU of neither, or of no minor."""
    vendor = str(gpu.vendor)
    return None if gpu.minor is None or vendor not in ("nvidia", "amd") else (vendor, gpu.minor)


@frozen
class Container:
    """One container of the node, as the kubelet's API tells it."""

    namespace: str
    pod: str
    name: str
    devices: tuple[Device, ...] = ()
    cpus: CpuSet = CpuSet()
    """Its exclusive CPUs (empty: it shares the pool)."""
    claims: tuple[str, ...] = ()
    """The Dynamic Resource Allocation claims that gave it devices (``namespace/name``)."""
    dra: tuple[DraDevice, ...] = ()
    """The devices those claims gave it."""

    @property
    def dra_gpus(self) -> frozenset[tuple[str, int]]:
        """The GPUs its claims gave it, as :func:`gpu_key` names them."""
        return frozenset(key for d in self.dra if (key := d.gpu) is not None)


def messages() -> dict[str, Any]:
    """The API's message classes, by name (ImportError without the ``kubernetes`` extra)."""
    from google.protobuf import (  # type: ignore[import-not-found,import-untyped,unused-ignore]
        descriptor_pb2,
        descriptor_pool,
        message_factory,
    )

    proto = descriptor_pb2.FileDescriptorProto(name="numapin/podresources/v1/api.proto", package=_PACKAGE,
                                               syntax="proto3")
    for name, fields in _PROTO.items():
        message = proto.message_type.add(name=name)
        for field, number, kind, label, typed in fields:
            made = message.field.add(name=field, number=number, type=kind, label=label)
            if typed:
                made.type_name = f".{_PACKAGE}.{typed}"
    pool = descriptor_pool.DescriptorPool()  # its own pool: another copy of the API in the process is no clash
    pool.Add(proto)
    return {name: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{_PACKAGE}.{name}"))
            for name in _PROTO}


def _containers(response: Any) -> tuple[Container, ...]:
    found = []
    for pod in response.pod_resources:
        for c in pod.containers:
            devices = _devices(c.devices)
            claims = tuple(f"{r.claim_namespace}/{r.claim_name}" for r in c.dynamic_resources)
            dra = tuple(DraDevice(d.driver_name, d.pool_name, d.device_name, tuple(x.name for x in d.cdi_devices))
                        for r in c.dynamic_resources for d in r.claim_resources)
            found.append(Container(pod.namespace, pod.name, c.name, devices, _cpus(c.cpu_ids), claims, dra))
    return tuple(found)


def _cpus(ids: Iterable[int]) -> CpuSet:
    """The CPUs an answer names: PodResourcesUnavailable, never a ValueError, where one is no CPU id (the API's
    int64 holds any number; a kubelet that says one outside 0..MAX_ID says nothing numapin may believe)."""
    try:
        return CpuSet(int(i) for i in ids)
    except ValueError as exc:
        raise PodResourcesUnavailable(f"the kubelet's pod-resources answer names a CPU that cannot be one ({exc})") \
            from None


def _node_ids(ids: Iterable[int]) -> tuple[int, ...]:
    """The NUMA nodes a device's topology names, each a node id (as a CPU's, 0..MAX_ID); PodResourcesUnavailable
    for any other number."""
    found = tuple(int(i) for i in ids)
    if any(not 0 <= i <= MAX_ID for i in found):
        raise PodResourcesUnavailable(f"the kubelet's pod-resources answer names a NUMA node outside 0-{MAX_ID}")
    return found


#: Seconds a kubelet that did not answer is not asked again (its last answer, if any, stands in meanwhile).
QUIET_SECONDS = 30.0
#: Per socket and method, the last answer and when it came; per socket, until when it is not asked again.
_ANSWERS: dict[tuple[str, str], tuple[float, Any]] = {}
_QUIET: dict[str, tuple[float, str]] = {}


@frozen
class Listing:
    """The containers of the node, and, where the kubelet did not answer now, how old they are."""

    containers: tuple[Container, ...]
    stale: str | None = None
    """Said where the containers are the kubelet's last answer, not this one's (None: answered now)."""


def _ask(socket: str, method: str, timeout: float) -> tuple[Any, str | None]:
    """The kubelet's answer to ``method`` (``List``, ``GetAllocatableResources``), a message of the API, and a
    note where it is an earlier answer. Each call is bounded by ``timeout`` seconds; a kubelet that did not answer
    in time is not asked again for :data:`QUIET_SECONDS` (an exporter's scrapes each stay within their bound), and
    its last answer, where there is one, stands in, said as stale. PodResourcesUnavailable where there is none."""
    import time

    now = time.monotonic()
    quiet = _QUIET.get(socket)
    if quiet is not None and now < quiet[0]:
        why = quiet[1]
    else:
        try:
            answer = _call(socket, method, timeout)
        except PodResourcesUnavailable as exc:
            why = str(exc)
            _QUIET[socket] = (now + QUIET_SECONDS, why)
        else:
            _ANSWERS[(socket, method)] = (now, answer)
            _QUIET.pop(socket, None)
            return answer, None
    earlier = _ANSWERS.get((socket, method))
    if earlier is None:
        raise PodResourcesUnavailable(why)
    return earlier[1], f"the kubelet's answer of {now - earlier[0]:.0f} s ago ({why})"


def _call(socket: str, method: str, timeout: float) -> Any:
    import os

    try:
        import grpc  # type: ignore[import-not-found,import-untyped,unused-ignore]
        classes = messages()
    except ImportError:
        raise PodResourcesUnavailable("the kubelet's pod-resources API needs numapin's kubernetes extra "
                                      "(pip install 'numapin[kubernetes]')") from None
    if not os.path.exists(socket):
        raise PodResourcesUnavailable(f"no pod-resources socket at {socket} (mount the kubelet's "
                                      "pod-resources folder, or this is no Kubernetes node)")
    names = {"List": ("ListPodResourcesRequest", "ListPodResourcesResponse"),
             "GetAllocatableResources": ("AllocatableResourcesRequest", "AllocatableResourcesResponse")}[method]
    request, response = classes[names[0]], classes[names[1]]
    # A subchannel pool of this channel's own: gRPC otherwise shares connections among channels to one target, and
    # a kubelet restarted on a new socket at the same path would be asked on the dead one's connection (or a hung
    # one answered for by the connection to the last).
    with grpc.insecure_channel(f"unix://{socket}", options=[("grpc.use_local_subchannel_pool", 1)]) as channel:
        call = channel.unary_unary(f"{SERVICE}/{method}", request_serializer=request.SerializeToString,
                                   response_deserializer=response.FromString)
        try:
            return call(request(), timeout=timeout)
        except grpc.RpcError as exc:
            raise PodResourcesUnavailable(f"the kubelet's pod-resources API at {socket} did not answer {method}: "
                                          f"{exc.code().name} {exc.details() or ''}".rstrip()) from None


def _devices(found: Iterable[Any]) -> tuple[Device, ...]:
    return tuple(Device(d.resource_name, tuple(d.device_ids), _node_ids(n.ID for n in d.topology.nodes)) for d in found)


def listing(socket: str = SOCKET, timeout: float = 2.0) -> Listing:
    """Every container of the node, from the kubelet's ``List`` (its last answer, said as stale, where it does not
    answer now); PodResourcesUnavailable saying why not."""
    answer, stale = _ask(socket, "List", timeout)
    return Listing(_containers(answer), stale)


def list_containers(socket: str = SOCKET, timeout: float = 2.0) -> tuple[Container, ...]:
    """:func:`listing`'s containers."""
    return listing(socket, timeout).containers


def allocatable(socket: str = SOCKET, timeout: float = 2.0) -> tuple[tuple[Device, ...], CpuSet]:
    """The node's devices (each with the NUMA nodes its plugin reports) and CPUs the kubelet may hand out, from
    ``GetAllocatableResources`` (its last answer where it does not answer now); PodResourcesUnavailable saying
    why not."""
    answer, _ = _ask(socket, "GetAllocatableResources", timeout)
    return _devices(answer.devices), _cpus(answer.cpu_ids)


def match(containers: Iterable[Container], *, cpus: CpuSet | None = None,
          gpus: Collection[str] = (), dra: Collection[tuple[str, int]] = ()) -> Container | None:
    """The one container whose exclusive CPUs are exactly ``cpus`` (a process's cpuset), or that holds one of
    the GPUs ``gpus`` (UUIDs, from a device plugin) or ``dra`` (:func:`gpu_key`, from a DRA claim); None when
    none is, or more than one (two ways that disagree name nothing)."""
    by_cpus = {c for c in containers if cpus and c.cpus and c.cpus == cpus}
    wanted = {g.lower() for g in gpus}
    by_gpu = {c for c in containers if wanted & {i.lower() for d in c.devices for i in d.ids}
              or set(dra) & c.dra_gpus}
    found = by_cpus | by_gpu
    return next(iter(found)) if len(found) == 1 else None
