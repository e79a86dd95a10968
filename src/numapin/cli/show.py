"""``numapin show``: the machine: NUMA nodes, packages, cores, caches, cgroup, GPUs."""

from __future__ import annotations

import argparse

from ..base.environment import PRIORITY_CORES
from ..version import __version__
from .common import MACHINE_NAMES, Exit, add_picture, add_root, machine_root, memory_size, picture_to_stdout, pictures

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from ..facts.machine import Facts


HELP = "the machine: NUMA nodes, packages, cores, caches, cgroup, GPUs"


def _show_text(facts: Facts, machine: str | None = None) -> str:
    t = facts.topology
    lines = [f"numapin {__version__} — " + (f"synthetic machine {machine}" if machine else f"machine at {t.root}")]
    restriction = str(t.cgroup) if t.cgroup.version else "no cgroup cpuset restriction"
    lines.append(f"CPUs: online {t.online} ({len(t.online)}), allowed {t.allowed} ({restriction})")
    if t.offline:
        lines.append(f"      offline {t.offline}")
    lines.append(f"      this process may run on {'unknown' if t.process is None else t.process}")
    lines.append(f"NUMA nodes ({len(t.nodes)}):")
    gpu_mem = {n: g.pci for g in facts.inventory.gpus for n in g.gpu_memory_nodes}
    for node in t.nodes:
        dist = " ".join(f"{k}:{v}" for k, v in node.distances)
        if node.memory_only:
            owner = f", memory of GPU {gpu_mem[node.id]}" if node.id in gpu_mem else ""
            lines.append(f"  node {node.id}: memory-only, {memory_size(node.memory_bytes)}{owner}; distances {dist}")
        else:
            lines.append(f"  node {node.id}: cpus {node.cpus} ({len(node.cpus)}), {memory_size(node.memory_bytes)}; "
                         f"distances {dist or 'unknown'}")
    lines.append(f"Packages ({t.package_source}):")
    for package in t.packages:
        cores = [c for c in t.cores if c.cpus & package.cpus]
        lines.append(f"  package {package.id}: cpus {package.cpus}, {len(cores)} cores")
    smt = sorted({len(c.cpus) for c in t.cores})
    smt_text = "/".join(map(str, smt)) or "0"
    note = " (assumed: no core information)" if not t.cores_known else ""
    lines.append(f"Cores: {len(t.cores)} physical, {smt_text} thread(s) each{note}")
    if t.caches:
        level = max(g.level for g in t.caches)
        groups = "group" if len(t.caches) == 1 else "groups"
        lines.append(f"Last-level caches (L{level}): {len(t.caches)} {groups}: "
                     + "; ".join(str(g.cpus) for g in t.caches[:16]) + (" ..." if len(t.caches) > 16 else ""))
    else:
        lines.append("Last-level caches: unknown")
    lines += _gpus_text(facts)
    lines += _kinds_text(facts)
    lines += _network_text(facts)
    for warning in (*t.warnings, *facts.notes):
        lines.append(f"note: {warning}")
    return "\n".join(lines)


def _gpus_text(facts: Facts) -> list[str]:
    """The GPUs in this process's view, and those of the machine it does not see."""
    lines = []
    if facts.visible:
        lines.append(f"GPUs ({len(facts.visible)} visible of {len(facts.inventory.gpus)}, "
                     f"{facts.visible[0].label.split(':')[0]}:N in this process's view; NVML {facts.inventory.nvml}):")
        for v in facts.visible:
            g = v.gpu
            extra = f", GPU memory node {g.gpu_memory_nodes}" if g.gpu_memory_nodes else ""
            lines.append(f"  {v.label} {g.where} {g.name} {g.uuid or ''}".rstrip())
            lines.append(f"      node {'unknown' if g.node is None else g.node}, cpus {g.cpus}, "
                         f"memory nodes {g.memory_nodes or 'unknown'}{extra}")
            if g.disagreement:
                lines.append(f"      NVML and sysfs disagree: {g.disagreement}")
    elif facts.inventory.gpus:
        lines.append(f"GPUs: {len(facts.inventory.gpus)} found, none visible: {facts.cut or 'hidden from it'}")
    elif not facts.inventory.hidden:
        lines.append("GPUs: none found on this machine")
        if facts.topology.root == "/":
            lines.append(f"      to see numapin on a GPU host, try a synthetic one: numapin show --machine dgx-h100 "
                         f"(or {', '.join(n for n in MACHINE_NAMES if n != 'dgx-h100')})")
    if facts.inventory.hidden:
        # A container given some of the host's GPUs: sysfs shows the rest, the runtime does not count them.
        lines.append(f"Not in this process's view ({len(facts.inventory.hidden)} of the machine's GPUs; its runtime "
                     "counts only the others):")
        lines += [f"  {h.gpu.where} node {'unknown' if h.gpu.node is None else h.gpu.node}: {h.why}"
                  for h in facts.inventory.hidden]
    return lines


def _kinds_text(facts: Facts) -> list[str]:
    found = facts.kinds()
    kinds = found.kinds
    note = [f"note: {found.note}"] if found.note else []
    if len(kinds) <= 1:
        return ["CPU kinds: one (the kernel tells no CPU apart)", *note]
    rule = f", rule {kinds[0].rule} of {PRIORITY_CORES}: a published layout" if kinds[0].rule else ""
    lines = [f"CPU kinds ({len(kinds)}, fastest first{rule}):"]
    for kind in kinds:
        said = [kind.core_type or "", f"capacity {kind.capacity}" if kind.capacity else "",
                f"{kind.max_mhz} MHz max" if kind.max_mhz else "", f"{kind.base_mhz} MHz base" if kind.base_mhz else ""]
        lines.append(f"  rank {kind.rank}: cpus {kind.cpus} ({len(kind.cpus)}): " + ", ".join(w for w in said if w))
    return [*lines, *note]


def _network_text(facts: Facts) -> list[str]:
    from ..base.text import table

    network = facts.network()
    if not network.nics:
        return ["Network devices: none found (InfiniBand, RoCE or physical Ethernet)"]
    lines = [f"Network devices ({len(network.nics)}):"]
    rows = [[n.name, n.type, n.pci, "?" if n.node is None else str(n.node), str(n.cpus), ",".join(n.netdevs) or "-"]
            for n in network.nics]
    lines += ["  " + row for row in table(["name", "type", "pci", "node", "cpus", "interfaces"], rows)]
    linked = [v for v in facts.visible if network.of_gpu(v.gpu.pci)]
    if linked:
        lines.append("GPU to NIC (nvidia-smi topo -m's words: PIX one switch, PXB several, PHB host bridge, "
                     "NODE same node, SYS across nodes):")
        names = [n.name for n in network.nics]
        grid = []
        for v in linked:
            relation = {link.name: str(link.relation) for link in network.of_gpu(v.gpu.pci)}
            nearest = ",".join(n.name for n in network.nearest(v.gpu.pci))
            grid.append([v.label, *(relation[name] for name in names), nearest])
        lines += ["  " + row for row in table(["", *names, "nearest"], grid)]
    return lines


def _show_json(facts: Facts, machine: str | None = None) -> dict[str, Any]:
    data = facts.topology.as_dict()
    if machine:
        # The synthetic machine's folder is gone once the command ends: name the machine instead.
        data["root"] = None
        data["machine"] = machine
    network = facts.network()
    data["gpus"] = [{**v.as_dict(), "nics": [link.as_dict() for link in network.of_gpu(v.gpu.pci)]}
                    for v in facts.visible]
    data["hidden_gpus"] = [{"vendor": str(h.gpu.vendor), "pci": h.gpu.pci, "partition": h.gpu.partition,
                            "node": h.gpu.node, "why": h.why} for h in facts.inventory.hidden]
    data["nics"] = [nic.as_dict() for nic in network.nics]
    kinds = facts.kinds()
    data["cpu_kinds"] = [kind.as_dict() for kind in kinds.kinds]
    data["nvml"] = facts.inventory.nvml
    data["warnings"] = [*data["warnings"], *([kinds.note] if kinds.note else []), *facts.notes]
    return data


def run(args: argparse.Namespace) -> int:
    import json

    from ..facts.machine import gather

    quiet = picture_to_stdout(args)
    with machine_root(args) as root:
        facts = gather(root, nvml=True)  # NVML, where installed, checks what sysfs says (a pin asks it only of gaps)
        if quiet:
            pass
        elif args.json:
            print(json.dumps(_show_json(facts, args.machine), indent=2))
        else:
            print(_show_text(facts, args.machine))
        pictures(args, facts, (), f"numapin show · {args.machine or facts.topology.root}")
    return Exit.OK


def arguments(show: argparse.ArgumentParser) -> None:
    show.description = "Show this machine's topology as numapin sees it."
    show.add_argument("--json", action="store_true", help="one JSON object instead of text")
    add_picture(show, ranks=False)
    add_root(show)
    show.set_defaults(func=run)
