"""Network devices and how far each is from each GPU, from sysfs alone (no driver, no NVML).

A NIC is an RDMA device under ``sys/class/infiniband`` (InfiniBand, or RoCE
when its ports speak Ethernet) or a physical interface under
``sys/class/net``; an interface on the same PCI function as an RDMA device is
that device's, not a NIC of its own. Virtual interfaces (``lo``, bridges,
VLANs) and SR-IOV virtual functions hang under no physical PCI function of
their own and are left out.

The relation of a GPU to a NIC uses ``nvidia-smi topo -m``'s words, worked
out from the two devices' PCI paths (the chain of bridges sysfs nests them
in, from their host bridge down):

- ``PIX``: at most one PCIe switch between them (or two functions of one card);
- ``PXB``: several switches, but not the host bridge;
- ``PHB``: through a host bridge (two root ports of one root complex);
- ``NODE``: between host bridges of one NUMA node;
- ``SYS``: across the interconnect between nodes.

A PCIe switch appears in sysfs as an upstream port with downstream ports
below it, so below a root port the bridges alternate upstream, downstream;
the switches crossed are the upstream ports on the route between the devices.
"""

from __future__ import annotations

from ..base.choices import Choice
from ..base.frozen import frozen
from ..base.text import decimal
from ..cpuset import CpuSet
from . import pci as pci_address
from .gpu import Gpu, device_locality
from .host import Host
from .topology import Topology

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any

__all__ = ["GpuLink", "Network", "Nic", "RankNic", "Relation", "assign", "pci_path", "read_network", "relation"]

class Relation(Choice):
    """How a GPU reaches a NIC, nearest first (``nvidia-smi topo -m``'s legend)."""

    PIX = "PIX"
    PXB = "PXB"
    PHB = "PHB"
    NODE = "NODE"
    SYS = "SYS"

    @property
    def distance(self) -> int:
        return list(Relation).index(self)


@frozen
class Nic:
    """One network device: its PCI function, where it sits, and what the libraries call it.

    ``name`` is the RDMA device (``mlx5_0``, what UCX, NCCL and NVSHMEM take)
    when there is one, else the interface; ``netdevs`` its interfaces;
    ``ports`` its RDMA ports; ``path`` its host bridge, bridges and itself.
    """

    name: str
    pci: str
    node: int | None
    cpus: CpuSet
    type: str
    netdevs: tuple[str, ...] = ()
    ports: tuple[int, ...] = ()
    path: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "pci": self.pci, "node": self.node, "cpus": str(self.cpus), "type": self.type,
                "netdevs": list(self.netdevs), "ports": list(self.ports)}


@frozen
class GpuLink:
    """A NIC as one GPU sees it."""

    name: str
    relation: Relation

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "relation": str(self.relation)}


@frozen
class Network:
    """The machine's NICs, in PCI order, and for each GPU (by PCI address) every NIC nearest first."""

    nics: tuple[Nic, ...]
    links: tuple[tuple[str, tuple[GpuLink, ...]], ...] = ()
    paths: tuple[tuple[str, tuple[str, ...]], ...] = ()
    """Each GPU's PCI path (host bridge, bridges, the GPU), by PCI address."""

    def nic(self, name: str) -> Nic | None:
        return next((n for n in self.nics if n.name == name or name in n.netdevs), None)

    def of_gpu(self, pci: str) -> tuple[GpuLink, ...]:
        """Every NIC from the GPU at ``pci``, nearest first (empty when the machine has none)."""
        return dict(self.links).get(pci, ())

    def nearest(self, pci: str) -> tuple[Nic, ...]:
        """The NICs closest to the GPU at ``pci``: all those at its best relation (one on a DGX)."""
        links = self.of_gpu(pci)
        best = [link.name for link in links if link.relation is links[0].relation] if links else []
        return tuple(nic for nic in self.nics if nic.name in best)

    def relation_of(self, pci: str, name: str) -> Relation | None:
        return next((link.relation for link in self.of_gpu(pci) if link.name == name), None)


def pci_path(host: Host, rel: str) -> tuple[str, ...] | None:
    """The PCI path of the device ``rel`` leads to: host bridge, bridges, and the nearest PCI function."""
    target = host.resolve(rel)
    if target is None or not target.startswith("sys/devices/"):
        return None
    parts = target.split("/")[2:]
    if not parts or not pci_address.is_host_bridge(parts[0]):
        return None
    chain = [parts[0]]
    for part in parts[1:]:
        if not pci_address.is_function(part):
            break
        chain.append(part)
    return tuple(chain) if len(chain) > 1 else None


def relation(a: tuple[str, ...], b: tuple[str, ...], *, same_node: bool) -> Relation:
    """How the devices at PCI paths ``a`` and ``b`` reach each other (see the module's text)."""
    if a[0] != b[0]:
        return Relation.NODE if same_node else Relation.SYS
    above_a, above_b = a[1:-1], b[1:-1]
    common = 0
    while common < min(len(above_a), len(above_b)) and above_a[common] == above_b[common]:
        common += 1
    if common == 0:
        return Relation.PHB
    # Position 0 is the root port, then upstream (odd) and downstream (even) ports of switches.
    switches = int((common - 1) % 2 == 1)
    switches += sum(1 for i in range(common, len(above_a)) if i % 2 == 1)
    switches += sum(1 for i in range(common, len(above_b)) if i % 2 == 1)
    return Relation.PIX if switches <= 1 else Relation.PXB


def _ports(host: Host, hca: str) -> tuple[tuple[int, ...], str]:
    ports, layers = [], set()
    for name in host.listdir(f"sys/class/infiniband/{hca}/ports"):
        port = decimal(name)  # ASCII digits: "²" is a digit to isdigit(), not to int()
        if port is not None and port >= 0:
            ports.append(port)
            layers.add((host.read(f"sys/class/infiniband/{hca}/ports/{name}/link_layer") or "").strip())
    kind = "roce" if layers == {"Ethernet"} else "infiniband"
    return tuple(sorted(ports)), kind


def _is_virtual_function(host: Host, path: tuple[str, ...]) -> bool:
    return host.resolve("sys/devices/" + "/".join(path) + "/physfn") is not None


def read_nics(topology: Topology, warnings: list[str] | None = None, *, host: Host | None = None) -> tuple[Nic, ...]:
    """Every physical NIC of the machine under ``topology.root``, in PCI order."""
    host = host or Host(topology.root)
    notes: list[str] = [] if warnings is None else warnings
    by_pci: dict[str, dict[str, Any]] = {}
    for hca in sorted(host.listdir("sys/class/infiniband")):
        path = pci_path(host, f"sys/class/infiniband/{hca}")
        if path is None or _is_virtual_function(host, path):
            continue
        ports, kind = _ports(host, hca)
        by_pci.setdefault(path[-1], {"path": path, "netdevs": []}).update(name=hca, ports=ports, type=kind)
    for netdev in sorted(host.listdir("sys/class/net")):
        path = pci_path(host, f"sys/class/net/{netdev}")
        if path is None or _is_virtual_function(host, path):
            continue
        entry = by_pci.setdefault(path[-1], {"path": path, "netdevs": []})
        entry["netdevs"].append(netdev)
        entry.setdefault("name", netdev)
        # ARPHRD_INFINIBAND (32): an IPoIB interface of an HCA whose RDMA device this kernel does not list.
        link = (host.read(f"sys/class/net/{netdev}/type") or "").strip()
        entry.setdefault("type", "infiniband" if link == "32" else "ethernet")
    nics = []
    for pci in sorted(by_pci):
        entry = by_pci[pci]
        node, cpus, _ = device_locality(topology, host, "sys/devices/" + "/".join(entry["path"]), notes)
        nics.append(Nic(entry["name"], pci, node, cpus, entry["type"], tuple(entry["netdevs"]),
                        tuple(entry.get("ports", ())), entry["path"]))
    return tuple(nics)


def read_network(topology: Topology, gpus: tuple[Gpu, ...], *, journal: list[str] | None = None) -> Network:
    """The NICs and, for each GPU of ``gpus``, every NIC nearest first (ties in PCI order).

    ``journal`` collects the files read and the links followed (``numapin snapshot``)."""
    host = Host(topology.root, journal)
    nics = read_nics(topology, host=host)
    one_node = len(topology.cpu_nodes) <= 1
    links, paths = [], []
    for gpu in gpus:
        path = pci_path(host, f"sys/bus/pci/devices/{gpu.pci}")
        if path is None:
            continue
        paths.append((gpu.pci, path))
        ranked = sorted(
            ((relation(path, nic.path, same_node=one_node or (gpu.node is not None and gpu.node == nic.node)), i)
             for i, nic in enumerate(nics)),
            key=lambda pair: (pair[0].distance, pair[1]),
        )
        links.append((gpu.pci, tuple(GpuLink(nics[i].name, r) for r, i in ranked)))
    return Network(nics, tuple(links), tuple(paths))


@frozen
class RankNic:
    """The NIC one rank's GPU should use: the nearest, spread over ranks where several are as near."""

    rank: int | None
    nic: Nic
    relation: Relation
    shared_with: tuple[int, ...] = ()
    """The other ranks given the same NIC."""

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.nic.name, "relation": str(self.relation), "pci": self.nic.pci,
                "ports": list(self.nic.ports), "shared_with": list(self.shared_with)}


def assign(network: Network, ranks: Sequence[tuple[int | None, str | None]]) -> tuple[RankNic | None, ...]:
    """For each ``(rank, GPU PCI address)``, its NIC: the nearest one, the least used so far where several
    are as near (the first in PCI order among equals); None for no GPU or no NIC."""
    used: dict[str, int] = {}
    chosen: list[tuple[int | None, Nic, Relation] | None] = []
    for rank, pci in ranks:
        nearest = network.nearest(pci) if pci else ()
        if not nearest:
            chosen.append(None)
            continue
        nic = min(nearest, key=lambda n: used.get(n.name, 0))
        used[nic.name] = used.get(nic.name, 0) + 1
        chosen.append((rank, nic, network.relation_of(pci, nic.name) or Relation.SYS))  # type: ignore[arg-type]
    out: list[RankNic | None] = []
    for entry in chosen:
        if entry is None:
            out.append(None)
            continue
        rank, nic, rel = entry
        others = tuple(e[0] for e in chosen if e is not None and e[1] is nic and e[0] is not None and e[0] != rank)
        out.append(RankNic(rank, nic, rel, others))
    return tuple(out)
