"""A picture of the machine and of a plan: packages, NUMA nodes, caches, cores, CPUs, GPUs, and each rank's CPUs.

Standard library only: the SVG is written as text. Packages are stacked top to
bottom; each holds its NUMA nodes; a node shows its GPUs, then its last-level
cache groups (outlined) side by side, wrapping; a cache group holds its cores
in rows, a core its SMT siblings side by side. Memory-only nodes (Grace,
POWER9) come last, with their size and the GPU whose memory they hold.

Every CPU is one ``rect`` with ``id="cpu-N"`` and ``data-cpu``, ``data-core``,
``data-node`` and ``data-ranks`` (the ranks whose placement holds it, comma
separated; ``data-reserved`` when it is set aside for a rank's hot thread),
and a ``title`` that browsers show on hover. Every GPU is one ``g`` with
``id="gpu-N"`` (CUDA's index). A rank's colour comes from the Okabe–Ito
palette, which people with the common colour-vision deficiencies tell apart,
and is never the only label: cells carry the rank's number when they are big
enough, the legend spells each rank's CPUs out, and a CPU shared by several
ranks is grey with their numbers.
"""

from __future__ import annotations

from collections.abc import Sequence
from html import escape

from .cpuset import CpuSet
from .facts import Facts
from .placement import Placement
from .text import format_size
from .topology import Core, Node

__all__ = ["PALETTE", "html", "svg"]

#: Okabe & Ito's palette for colour-blind readers (black left out: it is the text colour).
PALETTE = ("#E69F00", "#56B4E9", "#009E73", "#F0E442", "#0072B2", "#D55E00", "#CC79A7")
SHARED = "#9E9E9E"
FREE = "#F2F2F2"
_FONT = "font-family:sans-serif"
_MAX_WIDTH = 1400  # cache groups wrap to the next row past this width
_PAD = 6


def _colour(rank: int) -> str:
    return PALETTE[rank % len(PALETTE)]


class _Canvas:
    def __init__(self) -> None:
        self.parts: list[str] = []

    def rect(self, x: float, y: float, w: float, h: float, style: str, extra: str = "", inner: str = "") -> None:
        tag = f'<rect x="{x:g}" y="{y:g}" width="{w:g}" height="{h:g}" style="{style}"{extra}'
        self.parts.append(f"{tag}>{inner}</rect>" if inner else f"{tag}/>")

    def text(self, x: float, y: float, words: str, size: int = 12, extra: str = "") -> None:
        self.parts.append(f'<text x="{x:g}" y="{y:g}" style="{_FONT};font-size:{size}px"{extra}>'
                          f"{escape(words)}</text>")


class _Plan:
    """Which ranks hold each CPU, which CPUs are reserved, from the placements."""

    def __init__(self, plans: Sequence[Placement]) -> None:
        self.plans = plans
        self.ranks: dict[int, list[int]] = {}
        self.reserved: set[int] = set()
        for i, p in enumerate(plans):
            rank = i if p.rank is None else p.rank
            for cpu in p.cpus:
                self.ranks.setdefault(cpu, []).append(rank)
            self.reserved.update(p.reserved)


def _draw(facts: Facts, plans: Sequence[Placement], title: str) -> tuple[str, int, int]:
    t = facts.topology
    plan = _Plan(plans)
    cell = 14 if len(t.online) <= 256 else 9
    c = _Canvas()
    y = 40.0
    c.text(_PAD, 24, title, 16, ' font-weight="bold"')
    width = 0.0
    gpus_by_node: dict[int | None, list[tuple[int, str]]] = {}
    for v in facts.visible:
        g = v.gpu
        gpus_by_node.setdefault(g.node, []).append((v.index, f"GPU {v.index} · {g.pci} · {g.model or 'NVIDIA GPU'}"))
    node_of_package: dict[int | None, list[Node]] = {}
    for node in t.cpu_nodes:
        first = node.cpus.first() if node.cpus else None
        package = next((p.id for p in t.packages if first is not None and first in p.cpus), None)
        node_of_package.setdefault(package, []).append(node)
    boxes = [(f"package {p.id} · CPUs {p.cpus}", node_of_package.get(p.id, [])) for p in t.packages]
    if None in node_of_package:  # nodes whose CPUs no package claims (partial captures)
        boxes.append(("no package", node_of_package[None]))
    for label, nodes in boxes:
        top = y
        y += 22
        inner_width = 0.0
        for node in nodes:
            w, h = _node(c, facts, plan, node.id, node.cpus, gpus_by_node.get(node.id, []), _PAD * 3, y, cell)
            inner_width = max(inner_width, w)
            y += h + _PAD
        box = inner_width + _PAD * 4
        c.rect(_PAD, top, box, y - top, "fill:none;stroke:#333;stroke-width:1.5")
        c.text(_PAD * 2, top + 15, label, 13)
        width = max(width, box + _PAD)
        y += _PAD * 2
    memory = t.memory_only_nodes
    if memory:
        owners = {n: g.pci for g in facts.inventory.gpus for n in g.gpu_memory_nodes}
        x = float(_PAD)
        for node in memory:
            label = f"memory-only node {node.id} · {_size(node.memory_bytes)}"
            if node.id in owners:
                label += f" · memory of GPU {owners[node.id]}"
            w = 6.5 * len(label) + 2 * _PAD
            if x + w > _MAX_WIDTH and x > _PAD:  # wrap, as cache groups do
                x, y = float(_PAD), y + 28 + _PAD
            c.rect(x, y, w, 28, "fill:#FFFFFF;stroke:#333;stroke-dasharray:4 2",
                   f' id="node-{node.id}" data-memory-only="true"')
            c.text(x + _PAD, y + 18, label)
            x += w + _PAD
            width = max(width, x)
        y += 28 + _PAD * 2
    y = _legend(c, plan, y, cell)
    width = max(width, 620)
    return "\n".join(c.parts), int(width) + _PAD, int(y) + _PAD


def _size(value: int | None) -> str:
    return "size unknown" if value is None else format_size(value)


def _node(c: _Canvas, facts: Facts, plan: _Plan, node_id: int, cpus: CpuSet, gpus: list[tuple[int, str]],
          x: float, y: float, cell: int) -> tuple[float, float]:
    t = facts.topology
    top = y
    node = t.node(node_id)
    y += 20
    gx = x + _PAD
    for index, label in gpus:
        w = 7.0 * len(label) + 2 * _PAD
        c.parts.append(f'<g id="gpu-{index}" data-gpu="{index}">')
        c.rect(gx, y, w, 22, "fill:#FFFFFF;stroke:#000;stroke-width:1.5", inner=f"<title>{escape(label)}</title>")
        c.text(gx + _PAD, y + 15, label, 12)
        c.parts.append("</g>")
        gx += w + _PAD
    if gpus:
        y += 22 + _PAD
    groups = _cache_groups(facts, cpus)
    row_x, row_y, row_h, widest = x + _PAD, y, 0.0, gx - x
    for group in groups:
        w, h = _group_size(group, cell)
        if row_x + w > x + _MAX_WIDTH and row_x > x + _PAD:
            row_x, row_y = x + _PAD, row_y + row_h + _PAD
            row_h = 0.0
        _group(c, facts, plan, group, row_x, row_y, cell)
        row_x += w + _PAD
        row_h = max(row_h, h)
        widest = max(widest, row_x - x)
    y = row_y + row_h + _PAD
    c.rect(x, top, widest + _PAD, y - top, "fill:none;stroke:#555;stroke-width:1", f' id="node-{node_id}"')
    c.text(x + _PAD, top + 14, f"node {node_id} · CPUs {cpus} · {_size(node.memory_bytes)}", 12)
    return widest + _PAD, y - top


def _cache_groups(facts: Facts, cpus: CpuSet) -> list[list[CpuSet]]:
    """The node's cores, grouped by their last-level cache (one group when caches are unknown)."""
    t = facts.topology
    cores = [core.cpus & cpus for core in t.cores if core.cpus & cpus]
    groups: dict[int, list[CpuSet]] = {}
    for core in cores:
        cache = next((i for i, g in enumerate(t.caches) if core.first() in g.cpus), -1)
        groups.setdefault(cache, []).append(core)
    return list(groups.values())


def _per_row(cell: int) -> int:
    return 8 if cell >= 14 else 16


def _group_size(cores: list[CpuSet], cell: int) -> tuple[float, float]:
    widest = max(len(core) for core in cores)
    per_row = _per_row(cell)
    rows = -(-len(cores) // per_row)
    return min(len(cores), per_row) * (widest * cell + 3) + 2 * 3, rows * (cell + 3) + 2 * 3


def _group(c: _Canvas, facts: Facts, plan: _Plan, cores: list[CpuSet], x: float, y: float, cell: int) -> None:
    t = facts.topology
    w, h = _group_size(cores, cell)
    c.rect(x, y, w, h, "fill:none;stroke:#888;stroke-dasharray:3 2", ' class="cache"')
    widest = max(len(core) for core in cores)
    per_row = _per_row(cell)
    for i, core in enumerate(cores):
        cx = x + 3 + (i % per_row) * (widest * cell + 3)
        cy = y + 3 + (i // per_row) * (cell + 3)
        for j, cpu in enumerate(core):
            _cpu(c, t.core_of(cpu), t.node_of(cpu), plan, cpu, cx + j * cell, cy, cell)
        c.rect(cx - 0.5, cy - 0.5, len(core) * cell + 1, cell + 1, "fill:none;stroke:#444;stroke-width:0.8")


def _cpu(c: _Canvas, core: Core | None, node: Node | None, plan: _Plan, cpu: int, x: float, y: float,
         cell: int) -> None:
    ranks = plan.ranks.get(cpu, [])
    fill = FREE if not ranks else _colour(ranks[0]) if len(ranks) == 1 else SHARED
    reserved = cpu in plan.reserved
    core_id = "?" if core is None else core.id
    node_id = "?" if node is None else node.id
    who = "no rank" if not ranks else "rank " + ",".join(map(str, ranks))
    hover = f"CPU {cpu} · core {core_id} · node {node_id} · {who}" + (" · reserved" if reserved else "")
    stroke = "stroke:#000;stroke-width:2.5" if reserved else "stroke:#FFFFFF;stroke-width:0.5"
    extra = (f' id="cpu-{cpu}" class="cpu" data-cpu="{cpu}" data-core="{core_id}" data-node="{node_id}"'
             f' data-ranks="{",".join(map(str, ranks))}"' + (' data-reserved="true"' if reserved else ""))
    c.rect(x, y, cell, cell, f"fill:{fill};{stroke}", extra, f"<title>{escape(hover)}</title>")
    if ranks and cell >= 14:
        label = "R" if reserved else (str(ranks[0]) if len(ranks) == 1 else "*")
        c.text(x + cell / 2, y + cell - 3.5, label, 9, ' text-anchor="middle" pointer-events="none"')


def _legend(c: _Canvas, plan: _Plan, y: float, cell: int) -> float:
    if not plan.plans:
        return y
    c.text(_PAD, y + 14, "legend", 13, ' font-weight="bold"')
    y += 22
    for i, p in enumerate(plan.plans):
        rank = i if p.rank is None else p.rank
        c.rect(_PAD, y, 14, 14, f"fill:{_colour(rank)};stroke:#333", f' class="swatch" data-rank="{rank}"')
        words = f"rank {rank} → GPU {p.gpu} ({p.pci}) · CPUs {p.cpus} · memory node(s) {p.mems}"
        if p.reserved:
            words += f" · reserved {p.reserved}"
        c.text(_PAD + 20, y + 12, words, 12)
        y += 20
    c.rect(_PAD, y, 14, 14, f"fill:{SHARED};stroke:#333")
    c.text(_PAD + 20, y + 12, "a CPU in several ranks' placements (* in the cell)", 12)
    y += 20
    c.rect(_PAD, y, 14, 14, f"fill:{FREE};stroke:#000;stroke-width:2.5")
    c.text(_PAD + 20, y + 12, "thick border (R): reserved for the rank's latency-critical thread", 12)
    return y + 22


def svg(facts: Facts, plans: Sequence[Placement] = (), title: str = "numapin") -> str:
    """The picture as a standalone SVG document."""
    body, width, height = _draw(facts, plans, title)
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
            f'viewBox="0 0 {width} {height}" role="img" aria-label="{escape(title)}">\n'
            f'<rect x="0" y="0" width="{width}" height="{height}" style="fill:#FFFFFF"/>\n{body}\n</svg>\n')


def html(facts: Facts, plans: Sequence[Placement] = (), title: str = "numapin") -> str:
    """The picture in a self-contained HTML page (inline SVG, no script: hover shows each CPU's title)."""
    return ("<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{escape(title)}</title>"
            "<style>body{margin:12px;font-family:sans-serif} rect.cpu:hover{stroke:#000;stroke-width:2}</style>"
            f"</head><body>\n{svg(facts, plans, title)}</body></html>\n")
