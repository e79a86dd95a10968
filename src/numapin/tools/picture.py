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
``id="gpu-N"`` (CUDA's index). A rank's colour comes from Paul Tol's "muted"
palette (nine colours that people with the common colour-vision deficiencies
tell apart) and is never the only label: each GPU and node names its ranks,
the legend spells each rank's CPUs out, the hover names a CPU's ranks, and a
CPU several ranks share (mode node) shows a band of each one's colour. A cell
carries its CPU's number (so that a reader finds CPU 57), in the largest size
that fits it; the legend says what a cell, a core and a cache group are.

Every label fits its box: boxes grow to their label's width, measured with
DejaVu Sans's advance widths (the widest of the usual sans-serif faces and
Debian's default, so narrower faces fit too), and a label wider than the
picture may grow is shortened with an ellipsis.
"""

from __future__ import annotations

from ..base.frozen import frozen, replace
from ..base.text import counted, format_size, markup, plural
from ..cpuset import CpuSet
from ..facts.grouping import Core
from ..facts.machine import Facts
from ..facts.network import Network, assign
from ..facts.topology import Node
from ..placement.modes import Placement

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = ["PALETTE", "STRAY", "LiveWorker", "fit", "html", "svg"]

#: Paul Tol's "muted" palette: nine colours for qualitative data that colour-blind readers tell apart
#: (his pale grey for "no data" is left out: free CPUs are drawn in a grey of their own).
PALETTE = ("#CC6677", "#332288", "#DDCC77", "#117733", "#88CCEE", "#882255", "#44AA99", "#999933", "#AA4499")
#: The palette's dark colours, on which a CPU's number is written in white.
_DARK = frozenset({"#332288", "#117733", "#882255", "#AA4499"})
FREE = "#F2F2F2"
#: The outline of a CPU running a worker's thread outside its placement (Paul Tol's vibrant red).
STRAY = "#CC3311"
_STRAY_STYLE = f"fill:none;stroke:{STRAY};stroke-width:2;stroke-dasharray:3 1.5"
_FONT = "font-family:sans-serif"
_MAX_WIDTH = 1400  # cache groups wrap to the next row past this width; labels are cut to it
_PAD = 6

#: DejaVu Sans's advance widths in ems (from its hmtx table), by the characters that share one.
_EMS = {chars: width for width, chars in (
    (0.278, "ijl'"), (0.318, " ,.·"), (0.337, ":;/|\\"), (0.352, "f"), (0.361, "-"), (0.39, "()[]"),
    (0.392, "t"), (0.411, "r"), (0.5, "*_"), (0.521, "s"), (0.525, "z"), (0.55, "c"), (0.557, "L"),
    (0.579, "k"), (0.592, "vxy"), (0.603, "P"), (0.611, "TY"), (0.613, "a"), (0.615, "e"), (0.612, "o"),
    (0.632, "E"), (0.575, "F"), (0.634, "hnu"), (0.635, "bdgpqS"), (0.636, "0123456789$"), (0.656, "K"),
    (0.684, "AV"), (0.685, "XZ"), (0.686, "B"), (0.695, "R"), (0.698, "C"), (0.732, "U"), (0.748, "N"),
    (0.752, "H"), (0.77, "D"), (0.775, "G"), (0.787, "OQ"), (0.818, "w"), (0.838, "→+=<>#"), (0.863, "M"),
    (0.974, "m"), (0.989, "W"), (0.295, "IJ"))}
_WIDTH = {ch: width for chars, width in _EMS.items() for ch in chars}


def _text_width(words: str, size: float, bold: bool = False) -> float:
    """How wide ``words`` is drawn at ``size`` px (DejaVu Sans; bold about 9% wider; 0.7 em for the unknown)."""
    return sum(_WIDTH.get(ch, 0.7) for ch in words) * size * (1.09 if bold else 1.0)


def fit(words: str, size: float, room: float) -> str:
    """``words``, shortened with an ellipsis when wider than ``room``."""
    if _text_width(words, size) <= room:
        return words
    while words and _text_width(words + "…", size) > room:
        words = words[:-1]
    return words.rstrip(" ·,") + "…"


def _colour(rank: int) -> str:
    return PALETTE[rank % len(PALETTE)]


def _ranks(ranks: Sequence[int]) -> str:
    """Ranks as a list with runs: "0-3", "0,2", "5"."""
    return str(CpuSet(ranks))


class _Canvas:
    def __init__(self) -> None:
        self.parts: list[str] = []

    def rect(self, x: float, y: float, w: float, h: float, style: str, extra: str = "", inner: str = "") -> None:
        tag = f'<rect x="{x:g}" y="{y:g}" width="{w:g}" height="{h:g}" style="{style}"{extra}'
        self.parts.append(f"{tag}>{inner}</rect>" if inner else f"{tag}/>")

    def text(self, x: float, y: float, words: str, size: int = 12, extra: str = "") -> None:
        self.parts.append(f'<text x="{x:g}" y="{y:g}" style="{_FONT};font-size:{size}px"{extra}>'
                          f"{markup(words)}</text>")


@frozen
class LiveWorker:
    """A worker as ``ps`` found it, for the picture of the live host: its placement (where it should be), the CPUs
    its threads outside that placement may run on (their masks, less the placement's), and its own memory by
    node."""

    pid: int
    name: str
    placement: Placement
    verdict: str
    threads: int
    outside: int
    outside_cpus: CpuSet
    memory: tuple[tuple[int, int], ...] = ()
    """Its own resident memory by node, bytes (empty where it was not read)."""


class _Plan:
    """Which ranks (or, for the live host, workers) hold each CPU, GPU and node, which CPUs are reserved, from
    the placements; for the live host, which CPUs run a worker's threads outside its placement."""

    def __init__(self, plans: Sequence[Placement], network: Network,
                 live: Sequence[LiveWorker] = ()) -> None:
        self.plans = plans
        self.live = live
        #: The word for what a colour stands for: a rank of the plan, a worker (by its pid) of the live host.
        self.noun = "worker" if live else "rank"
        #: Each CPU running a thread of a worker outside its placement: the workers' colour keys.
        self.strays: dict[int, list[int]] = {}
        for i, w in enumerate(live):
            for cpu in w.outside_cpus:
                self.strays.setdefault(cpu, []).append(i)
        #: Each rank's NIC (None without a GPU or a NIC near it).
        self.nics = assign(network, [(p.rank, p.pci) for p in plans])
        self.ranks: dict[int, list[int]] = {}
        self.reserved: set[int] = set()
        self.of_gpu: dict[int, list[int]] = {}
        for i, p in enumerate(plans):
            rank = self.rank(i)
            for cpu in p.cpus:
                self.ranks.setdefault(cpu, []).append(rank)
            self.reserved.update(p.reserved)
            if p.gpu is not None:
                self.of_gpu.setdefault(p.gpu, []).append(rank)
        #: Each set of ranks that shares a CPU: drawn as bands of their colours (an SVG gradient).
        self.shared = sorted({tuple(r) for r in self.ranks.values() if len(r) > 1})

    def rank(self, i: int) -> int:
        """Plan ``i``'s colour key: its rank; a live worker's, its place in the list."""
        p = self.plans[i]
        return i if p.rank is None or self.live else p.rank

    def named(self, keys: Sequence[int]) -> str:
        """``ranks 0-3``, or ``workers 4242,4243`` (by pid) on the live host."""
        if not self.live:
            return f"{plural(len(keys), 'rank')} {_ranks(keys)}"
        return f"{plural(len(keys), 'worker')} {','.join(str(self.live[k].pid) for k in keys)}"

    def on(self, cpus: CpuSet) -> list[int]:
        """The ranks whose placement holds any of ``cpus``."""
        return sorted({r for cpu in cpus for r in self.ranks.get(cpu, ())})


def _bands_id(ranks: Sequence[int]) -> str:
    return "bands-" + "-".join(map(str, ranks))


def _bands(c: _Canvas, plan: _Plan) -> None:
    """One gradient per set of sharing ranks: equal vertical bands, one in each rank's colour."""
    if not plan.shared:
        return
    c.parts.append("<defs>")
    for ranks in plan.shared:
        stops = []
        for i, rank in enumerate(ranks):
            for at in (i / len(ranks), (i + 1) / len(ranks)):
                stops.append(f'<stop offset="{at:.4g}" stop-color="{_colour(rank)}"/>')
        c.parts.append(f'<linearGradient id="{_bands_id(ranks)}">{"".join(stops)}</linearGradient>')
    c.parts.append("</defs>")


def _label(c: _Canvas, x: float, y: float, words: str, size: int = 12) -> float:
    """Write a label cut to the picture's width; return the width it takes."""
    words = fit(words, size, _MAX_WIDTH - x)
    c.text(x, y, words, size)
    return _text_width(words, size)


def _draw(facts: Facts, plans: Sequence[Placement], title: str,
          live: Sequence[LiveWorker] = ()) -> tuple[str, int, int]:
    t = facts.topology
    network = facts.network()
    if live:  # a worker's GPU by the machine's index (its own is in its own view), found by its PCI address
        index = {v.gpu.pci: v.index for v in facts.visible}
        plans = [replace(w.placement, gpu=index.get(w.placement.pci or "", w.placement.gpu)) for w in live]
    plan = _Plan(plans, network, live)
    cell = 14 if len(t.online) <= 256 else 9
    c = _Canvas()
    _bands(c, plan)
    y = 40.0
    title = fit(title, 16 * 1.09, _MAX_WIDTH)
    c.text(_PAD, 24, title, 16, ' font-weight="bold"')
    width = _PAD + _text_width(title, 16, bold=True)
    gpus_by_node = _gpu_labels(facts, plan, network)
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
        label_width = _label(c, _PAD * 2, top + 15, label, 13)
        box = max(inner_width + _PAD * 4, label_width + _PAD * 2)
        c.rect(_PAD, top, box, y - top, "fill:none;stroke:#333;stroke-width:1.5")
        width = max(width, box + _PAD)
        y += _PAD * 2
    y, width = _memory_nodes(c, facts, y, width)
    y, legend_width = _legend(c, plan, y)
    width = max(width, legend_width)
    return "\n".join(c.parts), int(width + 1) + _PAD, int(y) + _PAD


def _gpu_labels(facts: Facts, plan: _Plan, network: Network) -> dict[int | None, list[tuple[int, str]]]:
    """Each visible GPU's label (its ranks, place, name and nearest NICs), by its node."""
    gpus_by_node: dict[int | None, list[tuple[int, str]]] = {}
    for v in facts.visible:
        g = v.gpu
        ranks = plan.of_gpu.get(v.index, [])
        who = f" · {plan.named(ranks)}" if ranks else ""
        label = f"GPU {v.index}{who} · {g.where} · {g.name}"
        nearest = network.nearest(g.pci)
        if nearest:
            label += f" · {plural(len(nearest), 'NIC')} {','.join(n.name for n in nearest)}"
        gpus_by_node.setdefault(g.node, []).append((v.index, label))
    return gpus_by_node


def _memory_nodes(c: _Canvas, facts: Facts, y: float, width: float) -> tuple[float, float]:
    """The memory-only nodes in a row of dashed boxes (wrapped at the picture's width), each with its GPU where it
    holds one's memory; the height and width reached."""
    t = facts.topology
    memory = t.memory_only_nodes
    if memory:
        owners = {n: g.pci for g in facts.inventory.gpus for n in g.gpu_memory_nodes}
        x = float(_PAD)
        for node in memory:
            label = f"memory-only node {node.id} · {_size(node.memory_bytes)}"
            if node.id in owners:
                label += f" · memory of GPU {owners[node.id]}"
            label = fit(label, 12, _MAX_WIDTH - 2 * _PAD)
            w = _text_width(label, 12) + 2 * _PAD
            if x + w > _MAX_WIDTH and x > _PAD:  # wrap, as cache groups do
                x, y = float(_PAD), y + 28 + _PAD
            c.rect(x, y, w, 28, "fill:#FFFFFF;stroke:#333;stroke-dasharray:4 2",
                   f' id="node-{node.id}" data-memory-only="true"')
            c.text(x + _PAD, y + 18, label)
            x += w + _PAD
            width = max(width, x)
        y += 28 + _PAD * 2
    return y, width


def _size(value: int | None) -> str:
    return "size unknown" if value is None else format_size(value)


def _node(c: _Canvas, facts: Facts, plan: _Plan, node_id: int, cpus: CpuSet, gpus: list[tuple[int, str]],
          x: float, y: float, cell: int) -> tuple[float, float]:
    t = facts.topology
    top = y
    node = t.node(node_id)
    y += 20
    gx, gpus_right = x + _PAD, x + _PAD
    # What a node's rows may hold: the picture's width less the node's and its package's frames around them.
    room = _MAX_WIDTH - x - 4 * _PAD
    labels = [(index, fit(label, 12, room - 24 - 2 * _PAD)) for index, label in gpus]
    widths = [_text_width(label, 12) + 24 + 2 * _PAD for _, label in labels]
    per_row = _balanced(widths, room)
    for n, ((index, label), w) in enumerate(zip(labels, widths, strict=True)):
        if n and n % per_row == 0:  # the next row: as many GPUs on each, the last row never the odd one out
            gx, y = x + _PAD, y + 22 + _PAD
        c.parts.append(f'<g id="gpu-{index}" data-gpu="{index}">')
        c.rect(gx, y, w, 22, "fill:#FFFFFF;stroke:#000;stroke-width:1.5", inner=f"<title>{markup(label)}</title>")
        ranks = plan.of_gpu.get(index, [])
        if ranks:  # the GPU's swatch: its rank's colour (the first one's, when several ranks drive it)
            c.rect(gx + 4, y + 4, 14, 14, f"fill:{_colour(ranks[0])};stroke:#333", f' data-rank="{ranks[0]}"')
        c.text(gx + 24, y + 15, label, 12)
        c.parts.append("</g>")
        gx += w + _PAD
        gpus_right = max(gpus_right, gx)
    if gpus:
        y += 22 + _PAD
    groups = _cache_groups(facts, cpus)
    row_x, row_y, row_h, widest = x + _PAD, y, 0.0, gpus_right - x
    for group in groups:
        w, h = _group_size(group, cell)
        if row_x + w > x + room and row_x > x + _PAD:
            row_x, row_y = x + _PAD, row_y + row_h + _PAD
            row_h = 0.0
        _group(c, facts, plan, group, row_x, row_y, cell)
        row_x += w + _PAD
        row_h = max(row_h, h)
        widest = max(widest, row_x - x)
    y = row_y + row_h + _PAD
    ranks = plan.on(cpus)
    who = f" · {plan.named(ranks)}" if ranks else ""
    label_width = _label(c, x + _PAD, top + 14, f"node {node_id} · CPUs {cpus} · {_size(node.memory_bytes)}{who}")
    widest = max(widest, label_width + _PAD)
    c.rect(x, top, widest + _PAD, y - top, "fill:none;stroke:#555;stroke-width:1", f' id="node-{node_id}"')
    return widest + _PAD, y - top


def _balanced(widths: list[float], room: float) -> int:
    """How many boxes of ``widths`` (each followed by a pad) a row takes: as many as fit in ``room``, then spread
    evenly over the rows they need (four GPUs that do not fit in one row go 2 + 2, never 3 + 1)."""
    fit_in, used = 0, float(_PAD)
    for w in widths:
        if used + w > room and fit_in:
            break
        fit_in, used = fit_in + 1, used + w + _PAD
    rows = -(-len(widths) // max(1, fit_in))
    return max(1, -(-len(widths) // rows))


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
        for j, cpu in enumerate(core):  # over the core's outline: a CPU a worker's thread strays to
            if cpu in plan.strays:
                c.rect(cx + j * cell + 1, cy + 1, cell - 2, cell - 2, _STRAY_STYLE, ' class="stray"')


def _cpu(c: _Canvas, core: Core | None, node: Node | None, plan: _Plan, cpu: int, x: float, y: float,
         cell: int) -> None:
    ranks = plan.ranks.get(cpu, [])
    fill = FREE if not ranks else _colour(ranks[0]) if len(ranks) == 1 else f"url(#{_bands_id(ranks)})"
    reserved = cpu in plan.reserved
    core_id = "?" if core is None else core.id
    node_id = "?" if node is None else node.id
    who = f"no {plan.noun}" if not ranks else plan.named(ranks) if plan.live else "rank " + ",".join(map(str, ranks))
    strays = plan.strays.get(cpu, [])
    hover = f"CPU {cpu} · core {core_id} · node {node_id} · {who}" + (" · reserved" if reserved else "") + (
        f" · threads of {plan.named(strays)} may run here, outside their placement" if strays else "")
    stroke = "stroke:#000;stroke-width:2.5" if reserved else "stroke:#FFFFFF;stroke-width:0.5"
    extra = (f' id="cpu-{cpu}" class="cpu" data-cpu="{cpu}" data-core="{core_id}" data-node="{node_id}"'
             f' data-ranks="{",".join(map(str, ranks))}"' + (' data-reserved="true"' if reserved else "")
             + (f' data-strays="{",".join(str(plan.live[k].pid) for k in strays)}"' if strays else ""))
    c.rect(x, y, cell, cell, f"fill:{fill};{stroke}", extra, f"<title>{markup(hover)}</title>")
    # The CPU's number, so that a reader finds CPU 57 (the rank is the colour, the legend and the hover), in the
    # largest size that fits the cell; where none does (a 1024-CPU machine's small cells), the hover says it.
    label = str(cpu)
    size = next((size for size in (9, 8, 7, 6) if _text_width(label, size) <= cell - 2), None)
    if size is not None:
        ink = ";fill:#FFFFFF" if len(ranks) == 1 and _colour(ranks[0]) in _DARK else ""
        c.parts.append(f'<text x="{x + cell / 2:g}" y="{y + cell - (cell - size * 0.7) / 2:g}" '
                       f'style="{_FONT};font-size:{size}px{ink}" class="cpu-id" text-anchor="middle" '
                       f'pointer-events="none">{label}</text>')


def _legend(c: _Canvas, plan: _Plan, y: float) -> tuple[float, float]:
    """The legend, listing only what the picture holds; returns its bottom and its width."""
    c.text(_PAD, y + 14, "legend", 13, ' font-weight="bold"')
    y += 22
    width = 0.0
    x = _PAD + 20
    # What every picture holds: the CPUs, each core's SMT siblings, each last-level cache's cores.
    for style, words in ((f"fill:{FREE};stroke:#FFFFFF", "a CPU, its number inside (hover: its core and node)"),
                         ("fill:none;stroke:#444;stroke-width:0.8", "a core: its CPUs (SMT siblings) side by side"),
                         ("fill:none;stroke:#888;stroke-dasharray:3 2", "a last-level cache: the cores that share it")):
        c.rect(_PAD, y, 14, 14, style, ' class="key"')
        width = max(width, x + _label(c, x, y + 12, words))
        y += 20
    for i, p in enumerate(plan.plans):
        rank = plan.rank(i)
        c.rect(_PAD, y, 14, 14, f"fill:{_colour(rank)};stroke:#333", f' class="swatch" data-rank="{rank}"')
        if plan.live:
            w = plan.live[i]
            words = (f"pid {w.pid} {w.name} → GPU {p.gpu} ({p.where}) · should run on CPUs {p.workers} · "
                     f"{w.outside} of {counted(w.threads, 'thread')} outside" + (
                         f" (may run on CPUs {w.outside_cpus})" if w.outside_cpus else "")
                     + (" · memory " + ", ".join(f"node {n} {format_size(b)}" for n, b in w.memory)
                        if w.memory else "") + f" · {w.verdict}")
            width = max(width, x + _label(c, x, y + 12, words))
            y += 20
            continue
        words = (f"rank {rank} → GPU {p.gpu} ({p.where}) · CPUs {p.workers} · memory "
                 f"{plural(len(p.mems), 'node')} {p.mems}")
        if p.reserved:
            words += f" · reserved {p.reserved}"
        nic = plan.nics[i]
        if nic is not None:
            words += f" · NIC {nic.nic.name} ({nic.relation}{', shared' if nic.shared_with else ''})"
        width = max(width, x + _label(c, x, y + 12, words))
        y += 20
    if plan.shared:
        ranks = plan.shared[0]
        c.rect(_PAD, y, 14, 14, f"fill:url(#{_bands_id(ranks)});stroke:#333")
        words = f"a CPU several {plan.noun}s share: a band of each one's colour"
        width = max(width, x + _label(c, x, y + 12, words))
        y += 20
    if plan.strays:
        c.rect(_PAD, y, 14, 14, f"fill:{FREE}")
        c.rect(_PAD + 1, y + 1, 12, 12, _STRAY_STYLE)
        words = "dashed red border: a CPU a worker's thread may run on outside its placement (its mask)"
        width = max(width, x + _label(c, x, y + 12, words))
        y += 20
    if plan.reserved:
        c.rect(_PAD, y, 14, 14, f"fill:{FREE};stroke:#000;stroke-width:2.5")
        words = "thick border: reserved for the rank's latency-critical thread"
        width = max(width, x + _label(c, x, y + 12, words))
        y += 20
    return y + 2, width


def svg(facts: Facts, plans: Sequence[Placement] = (), title: str = "numapin",
        live: Sequence[LiveWorker] = ()) -> str:
    """The picture as a standalone SVG document: of the machine and a plan's placements, or, with ``live``, of the
    live host's workers (each in its colour where it should run, CPUs running a thread outside its placement
    outlined)."""
    body, width, height = _draw(facts, plans, title, live)
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
            f'viewBox="0 0 {width} {height}" role="img" aria-label="{markup(title)}">\n'
            f'<rect x="0" y="0" width="{width}" height="{height}" style="fill:#FFFFFF"/>\n{body}\n</svg>\n')


def html(facts: Facts, plans: Sequence[Placement] = (), title: str = "numapin",
         live: Sequence[LiveWorker] = ()) -> str:
    """The picture in a self-contained HTML page (inline SVG, no script: hover shows each CPU's title)."""
    return ("<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{markup(title)}</title>"
            "<style>body{margin:12px;font-family:sans-serif} rect.cpu:hover{stroke:#000;stroke-width:2}</style>"
            f"</head><body>\n{svg(facts, plans, title, live)}</body></html>\n")
