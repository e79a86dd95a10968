"""What Kubernetes' Dynamic Resource Allocation says of a GPU's NUMA node: the devices of ResourceSlices.

A DRA driver publishes each device with attributes; the standard ``resource.kubernetes.io/numaNode`` (KEP-6072,
stable in Kubernetes 1.37) is an integer, or with the ``DRAListTypeAttributes`` gate a list: the device's node
first, then the same-socket nodes at the smallest distance. The scheduler aligns a claim's devices (GPUs, NICs,
CPUs of other drivers) by it, so where it disagrees with the kernel's ``numa_node`` a claim's CPUs land on the
wrong node. NVIDIA's driver publishes it (dra-driver-nvidia-gpu#1165); AMD's publishes its own unqualified
``numaNode`` (k8s-gpu-dra-driver#18), which a slice holds under the driver's own domain. A device is matched to
a GPU of the machine by its ``resource.kubernetes.io/pciBusID`` (or an unqualified ``pciBusID``).

The slices live in the API server: numapin reads them as ``kubectl get resourceslices -o json`` writes them (a
file, ``numapin doctor --resource-slices FILE``), and asks no API server itself. Both the ``resource.k8s.io/v1``
shape (attributes on the device) and ``v1beta1``'s (under ``basic``) are read.
"""

from __future__ import annotations

from ..base.errors import UsageError
from ..base.frozen import frozen
from ..base.text import printable
from . import pci as pci_address

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterator
    from typing import Any

__all__ = ["NUMA_NODE", "PCI_BUS_ID", "DraDevice", "read_slices"]

NUMA_NODE = "resource.kubernetes.io/numaNode"
PCI_BUS_ID = "resource.kubernetes.io/pciBusID"
#: The most devices read of one answer (a node's GPUs, partitions and NICs are hundreds at most), and the most
#: nodes a list names: the file is the user's, its size is not.
_MOST_DEVICES = 4096
_MOST_NODES = 64
_MOST_BYTES = 16 << 20


@frozen
class DraDevice:
    """One device a DRA driver published, as far as its NUMA node goes."""

    driver: str
    name: str
    pci: str | None
    """Its PCI address (``0000:18:00.0``), where an attribute gives one."""
    nodes: tuple[int, ...]
    """Its NUMA node, then (the list form) the same-socket nodes nearest it; empty where it publishes none."""
    attribute: str
    """The attribute the nodes were read from (the standard one, or the driver's own)."""
    slice: str = ""
    """The ResourceSlice that holds it, and the Kubernetes node it is for (``slice (node)``)."""


def read_slices(text: str | bytes) -> tuple[DraDevice, ...]:
    """Every device of ``text``: a ResourceSliceList (``kubectl get resourceslices -o json``), a ``List`` of slices,
    or one slice. UsageError for text that is none of these."""
    import json

    if len(text) > _MOST_BYTES:
        raise UsageError(f"the ResourceSlices given are over {_MOST_BYTES >> 20} MiB: give those of one node "
                         "(kubectl get resourceslices --field-selector spec.nodeName=NODE -o json)", value=len(text))
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise UsageError(f"the ResourceSlices given are no JSON ({str(exc)[:80]}): kubectl get resourceslices "
                         "-o json writes them", value=str(text)[:40]) from None
    if not isinstance(data, dict) or data.get("kind") not in ("ResourceSliceList", "List", "ResourceSlice"):
        raise UsageError("the ResourceSlices given are not a ResourceSliceList, a List or a ResourceSlice: kubectl "
                         "get resourceslices -o json writes them", value=str(text)[:40])
    slices = [data] if data.get("kind") == "ResourceSlice" else data.get("items")
    found: list[DraDevice] = []
    for one in slices if isinstance(slices, list) else ():
        for device in _devices(one):
            found.append(device)
            if len(found) >= _MOST_DEVICES:
                return tuple(found)
    return tuple(found)


def _devices(one: object) -> Iterator[DraDevice]:
    """The devices of one slice that say anything of their node or address; a malformed entry is passed over."""
    if not isinstance(one, dict) or one.get("kind", "ResourceSlice") != "ResourceSlice":
        return
    spec, meta = one.get("spec"), one.get("metadata")
    if not isinstance(spec, dict):
        return
    driver = spec.get("driver") if isinstance(spec.get("driver"), str) else ""
    where = f"{meta.get('name', '?') if isinstance(meta, dict) else '?'} ({spec.get('nodeName') or 'any node'})"
    devices = spec.get("devices")
    for device in devices if isinstance(devices, list) else []:
        if not isinstance(device, dict):
            continue
        basic = device.get("basic")  # v1beta1 kept them under basic
        attributes = (basic if isinstance(basic, dict) else device).get("attributes")
        if not isinstance(attributes, dict):
            continue
        attribute, nodes = _nodes(attributes, str(driver))
        pci = _pci(attributes)
        if nodes or pci:
            yield DraDevice(printable(str(driver))[:253], printable(str(device.get("name", "")))[:64], pci, nodes,
                            attribute, printable(where)[:300])


def _nodes(attributes: dict[str, Any], driver: str) -> tuple[str, tuple[int, ...]]:
    """The nodes of the standard attribute, else of the driver's own ``numaNode`` (unqualified, or under its
    domain), and the attribute's name."""
    for name in (NUMA_NODE, "numaNode", f"{driver}/numaNode"):
        value = attributes.get(name)
        if not isinstance(value, dict):
            continue
        raw = value.get("ints") if "ints" in value else [value.get("int")]
        if isinstance(raw, list) and raw and all(_node(n) for n in raw[:_MOST_NODES]):
            return name, tuple(raw[:_MOST_NODES])
    return "", ()


def _node(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= 65535


def _pci(attributes: dict[str, Any]) -> str | None:
    for name in (PCI_BUS_ID, "pciBusID"):
        value = attributes.get(name)
        text = value.get("string") if isinstance(value, dict) else None
        if isinstance(text, str):
            try:
                return pci_address.normalize(text[:32])
            except ValueError:
                return None
    return None
