"""Which Kubernetes pod and container a process runs in, from the cgroup path the kubelet made for it.

The kubelet names a pod's cgroup after the pod's QoS class and UID, and the container runtime names
the container's cgroup below it. The layouts (the kubelet's cgroup manager, ``cgroup_manager_linux.go``,
and the runtimes' own prefixes):

- cgroupfs driver: ``/kubepods[/burstable|/besteffort]/pod<UID>/<container>``, the container named
  by its 64-hex id (containerd, Docker) or ``crio-<id>`` (CRI-O);
- systemd driver: ``/kubepods.slice[/kubepods-burstable.slice]/kubepods[-burstable]-pod<UID>.slice/
  <container>.scope``, the UID's dashes written as underscores (systemd reads a dash as a level), the
  scope ``cri-containerd-<id>``, ``crio-<id>`` or ``docker-<id>``.

A Guaranteed pod sits right under ``kubepods``. A kubelet started with ``--cgroup-root`` (kind, k3s
in a container) puts all of it under a prefix: the pattern is found wherever it starts. cgroup v1
lists a path per hierarchy, v2 one; the first that names a pod is taken. A path that does not follow
the layout exactly names no pod. The path holds the pod's UID and the container's id, not their
names: names come from the kubelet's API, and are never guessed here.
"""

from __future__ import annotations

import re

from ..base.errors import ProcessError
from ..base.frozen import frozen
from . import procfs

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__all__ = ["QOS_CLASSES", "Pod", "pod_in_path", "pod_of"]

#: The pod QoS classes, as the kubelet names them in cgroup paths (a Guaranteed pod's path has none).
QOS_CLASSES = ("guaranteed", "burstable", "besteffort")

# A pod UID: the API server's (a UUID) or a static pod's (32 hex digits, a hash of its manifest).
_UID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}|[0-9a-f]{32}")
_ID = re.compile(r"[0-9a-f]{64}")
#: A container's scope under the systemd driver: its runtime's prefix, then its id.
_SCOPES = {"cri-containerd-": "containerd", "crio-": "cri-o", "docker-": "docker"}


@frozen
class Pod:
    """A process's pod and container, as far as its cgroup path says (and, given, the kubelet's API)."""

    uid: str
    qos: str
    """``guaranteed``, ``burstable`` or ``besteffort``."""
    driver: str
    """The kubelet's cgroup driver: ``cgroupfs`` or ``systemd``."""
    container_id: str | None = None
    """The container's 64-hex id; None for a process in the pod's cgroup itself."""
    runtime: str | None = None
    """``containerd``, ``cri-o`` or ``docker`` where the path says (cgroupfs names containerd's and Docker's
    containers alike: None)."""
    namespace: str | None = None
    name: str | None = None
    container: str | None = None
    """The names, from the kubelet's pod-resources API: None without it."""

    def as_dict(self) -> dict[str, Any]:
        return {"uid": self.uid, "qos": self.qos, "driver": self.driver, "container_id": self.container_id,
                "runtime": self.runtime, "namespace": self.namespace, "name": self.name,
                "container": self.container}

    def __str__(self) -> str:
        if self.namespace and self.name:
            return f"{self.namespace}/{self.name}" + (f"/{self.container}" if self.container else "")
        short = f"pod {self.uid}"
        return short + (f" container {self.container_id[:12]}" if self.container_id else "")


def pod_in_path(path: str) -> Pod | None:
    """The pod a cgroup path names, or None when it does not follow the kubelet's layout."""
    parts = [p for p in path.split("/") if p]
    for at, part in enumerate(parts):
        if part == "kubepods":
            return _pod(parts[at + 1:], "cgroupfs", "")
        if part == "kubepods.slice" or part.endswith("-kubepods.slice"):  # under the systemd driver a
            return _pod(parts[at + 1:], "systemd", part[:-len(".slice")])  # root's name leads each level's
    return None


def _pod(rest: list[str], driver: str, stem: str) -> Pod | None:
    # What follows kubepods: the QoS level (burstable, besteffort; none for guaranteed), the pod, the container.
    # ``stem``: the systemd name of the kubepods level (``kubepods``, ``kubelet-kubepods``), which every level's
    # name below it repeats.
    qos = "guaranteed"
    if driver == "cgroupfs":
        if rest and rest[0] in QOS_CLASSES[1:]:
            qos = rest.pop(0)
        uid = rest[0][len("pod"):] if rest and rest[0].startswith("pod") else None
    else:
        if rest and rest[0] in [f"{stem}-{q}.slice" for q in QOS_CLASSES[1:]]:
            qos = rest.pop(0)[len(stem) + 1:-len(".slice")]
        prefix = f"{stem}-pod" if qos == "guaranteed" else f"{stem}-{qos}-pod"
        named = rest[0][len(prefix):-len(".slice")] if rest and rest[0].startswith(prefix) and \
            rest[0].endswith(".slice") else None
        # systemd reads a dash as one level down: the kubelet writes the UID's dashes as underscores
        uid = None if named is None or "-" in named else named.replace("_", "-")
    if uid is None or not _UID.fullmatch(uid):
        return None
    container, runtime = _container(rest[1] if len(rest) > 1 else None, driver)
    if len(rest) > 1 and container is None:
        return None  # something below the pod that is no container of the layout (crio-conmon-..., a stranger)
    return Pod(uid, qos, driver, container, runtime)


def _container(part: str | None, driver: str) -> tuple[str | None, str | None]:
    if part is None:
        return None, None
    if driver == "cgroupfs":
        if part.startswith("crio-") and _ID.fullmatch(part[5:]):
            return part[5:], "cri-o"
        return (part, None) if _ID.fullmatch(part) else (None, None)
    if part.endswith(".scope"):
        for prefix, runtime in _SCOPES.items():
            if part.startswith(prefix) and _ID.fullmatch(part[len(prefix):-6]):
                return part[len(prefix):-6], runtime
    return None, None


def pod_of(pid: int) -> Pod | None:
    """The pod process ``pid`` runs in, from ``/proc/PID/cgroup``; None outside a pod, or when it is gone.

    Only a pod the kubelet made names one: a path that follows the layout (:func:`pod_in_path`) counts when its
    pod's and container's cgroups, and every cgroup above them, are root's folders (a user with a subtree of its
    own could lay the same names out in it). Where this reader cannot see those folders (it runs in a cgroup
    namespace of its own, as a DaemonSet's container does, and sees other pods' paths as ``/../..``), the path
    must start at the kubelet's own root (``kubepods``, under the kubelet's ``cgroupRoot`` where it has one),
    which no user's subtree is.
    """
    try:
        lines = procfs.cgroups(pid)
    except ProcessError:
        return None
    for controllers, path in lines:
        found = pod_in_path(path)
        if found is not None and _kubelets(controllers, path, found):
            return found
    return None


def _kubelets(controllers: str, path: str, pod: Pod) -> bool:
    """Whether the pod's cgroups in ``path`` are the kubelet's (root's folders, or a path from the kubelet's root)."""
    from .cgroup import made_by_root

    parts = [p for p in path.split("/") if p]
    at = next(i for i, part in enumerate(parts) if _names_pod(part, pod.uid))
    made = made_by_root(controllers, "/" + "/".join(parts[:at + 2]))  # the pod, and its container when named
    if made is not None:
        return made
    while parts[:1] == [".."]:
        parts.pop(0)
    start = next(i for i, part in enumerate(parts) if part == "kubepods" or part.endswith("kubepods.slice"))
    return start == 0 or parts[:start] in _cgroup_roots()


def _names_pod(part: str, uid: str) -> bool:
    return part == f"pod{uid}" or (part.endswith(".slice") and f"pod{uid.replace('-', '_')}." in part)


def _cgroup_roots() -> list[list[str]]:
    """The kubelet's ``cgroupRoot`` (its config file), as the cgroupfs and the systemd drivers lay it out."""
    from .kubelet import read_kubelet

    root = read_kubelet().setting("cgroupRoot", "")
    names = [p for p in root.split("/") if p]
    if not names:
        return []
    return [names, ["-".join(names[:i + 1]) + ".slice" for i in range(len(names))]]
