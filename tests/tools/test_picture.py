"""The plan's picture: valid SVG, one element per CPU and GPU, every rank's CPUs exactly the plan's."""

from __future__ import annotations

import json
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from conftest import REPO
from numapin.cpuset import CpuSet
from numapin.facts import synthetic as machines
from numapin.facts.machine import gather

NUMAPIN = [sys.executable, "-m", "numapin"]
SVG = "{http://www.w3.org/2000/svg}"
#: The picture README shows, and the command that draws it.
README_PICTURE = REPO / "docs" / "plan-dgx-h100.svg"
README_COMMAND = ["plan", "--machine", "dgx-h100", "--mode", "exclusive", "--reserve", "1"]


def draw(tmp_path: Path, *args: str) -> tuple[list[dict[str, object]], ET.Element]:
    """Run ``numapin plan ARGS --json --svg``: the plan as JSON and the SVG's root element."""
    out = tmp_path / "plan.svg"
    proc = subprocess.run([*NUMAPIN, *args, "--json", "--svg", str(out)], capture_output=True, text=True, check=True)
    return json.loads(proc.stdout), ET.parse(out).getroot()


def cpu_cells(root: ET.Element) -> dict[int, ET.Element]:
    cells = {int(e.get("data-cpu", "-1")): e for e in root.iter(f"{SVG}rect") if e.get("class") == "cpu"}
    assert all(e.get("id") == f"cpu-{cpu}" for cpu, e in cells.items())
    return cells


@pytest.mark.parametrize("machine", ["dgx-h100", "gb300", "epyc-nps4"])
def test_every_ranks_cpus_in_the_picture_are_the_plans(machine: str, tmp_path: Path) -> None:
    plans, root = draw(tmp_path, "plan", "--machine", machine, "--mode", "exclusive", "--reserve", "1")
    cells = cpu_cells(root)
    spec = machines.shape_named(machine)
    assert sorted(cells) == list(range(spec.cpus)), "one element per CPU"
    gpus = sorted(int(e.get("data-gpu", "-1")) for e in root.iter(f"{SVG}g") if e.get("id", "").startswith("gpu-"))
    assert gpus == list(range(spec.gpus)), "one element per GPU"
    for plan in plans:
        drawn = {cpu for cpu, e in cells.items() if str(plan["rank"]) in e.get("data-ranks", "").split(",")}
        assert CpuSet(drawn) == CpuSet.parse(str(plan["cpus"])), f"rank {plan['rank']}"
    reserved = {cpu for cpu, e in cells.items() if e.get("data-reserved") == "true"}
    assert CpuSet(reserved) == CpuSet.union(CpuSet.parse(str(p["reserved"])) for p in plans)


def test_memory_only_nodes_are_drawn_as_such(tmp_path: Path) -> None:
    _, root = draw(tmp_path, "plan", "--machine", "gb300")
    memory_only = [e for e in root.iter(f"{SVG}rect") if e.get("data-memory-only") == "true"]
    facts = gather(str(machines.write("gb300", tmp_path / "gb300")))
    assert sorted(e.get("id") for e in memory_only) == sorted(f"node-{n.id}" for n in facts.topology.memory_only_nodes)


def test_shared_cpus_carry_every_rank(tmp_path: Path) -> None:
    _, root = draw(tmp_path, "plan", "--machine", "dgx-h100")  # mode node: four ranks share each node
    cell = cpu_cells(root)[0]
    assert cell.get("data-ranks") == "0,1,2,3" and "rank 0,1,2,3" in "".join(cell.itertext())


def test_the_html_is_self_contained_with_hover_text(tmp_path: Path) -> None:
    out = tmp_path / "plan.html"
    subprocess.run([*NUMAPIN, *README_COMMAND, "--html", str(out)], capture_output=True, check=True)
    page = out.read_text()
    assert page.startswith("<!doctype html>") and "<svg" in page
    assert "<script" not in page and "src=" not in page and "href=" not in page
    assert "<title>CPU 13 · core 13 · node 0 · rank 0 · reserved</title>" in page


def test_show_draws_the_machine_without_ranks(tmp_path: Path) -> None:
    out = tmp_path / "show.svg"
    subprocess.run([*NUMAPIN, "show", "--machine", "epyc-nps4", "--svg", str(out)], capture_output=True, check=True)
    cells = cpu_cells(ET.parse(out).getroot())
    assert len(cells) == machines.shape_named("epyc-nps4").cpus and all(not e.get("data-ranks") for e in cells.values())


def test_a_1024_cpu_machine_stays_readable(tmp_path: Path) -> None:
    root = machines.write(machines.synthetic(1024), tmp_path / "big")
    out = tmp_path / "big.svg"
    subprocess.run([*NUMAPIN, "plan", "--root", str(root), "--mode", "exclusive", "--svg", str(out)],
                   capture_output=True, check=True)
    svg = ET.parse(out).getroot()
    assert len(cpu_cells(svg)) == 1024
    # Wrapped by cache group: no wider than a screen, and no taller than a few screens.
    assert int(svg.get("width", "0")) <= 1600 and int(svg.get("height", "0")) <= 4000


def test_readmes_picture_is_the_commands_own(tmp_path: Path) -> None:
    out = tmp_path / "plan.svg"
    subprocess.run([*NUMAPIN, *README_COMMAND, "--svg", str(out)], capture_output=True, check=True)
    assert README_PICTURE.read_text() == out.read_text(), (
        f"docs/ is stale: numapin {' '.join(README_COMMAND)} --svg docs/plan-dgx-h100.svg")


def fill(e: ET.Element) -> str:
    """The fill colour in an element's style."""
    return e.get("style", "").split("fill:")[1].split(";")[0]


def test_eight_ranks_have_eight_distinct_colours(tmp_path: Path) -> None:
    plans, root = draw(tmp_path, *README_COMMAND)
    assert len(plans) == 8
    colours = {e.get("data-rank"): fill(e) for e in root.iter(f"{SVG}rect") if e.get("class") == "swatch"}
    assert sorted(colours) == [str(r) for r in range(8)] and len(set(colours.values())) == 8, colours
    cells = cpu_cells(root)
    for plan in plans:  # every rank's cells in its own colour
        rank = str(plan["rank"])
        assert {fill(e) for e in cells.values() if e.get("data-ranks") == rank} == {colours[rank]}, rank


def test_the_node_picture_marks_each_nodes_ranks(tmp_path: Path) -> None:
    _, root = draw(tmp_path, "plan", "--machine", "dgx-h100")  # mode node: four ranks share each node
    texts = ["".join(e.itertext()) for e in root.iter(f"{SVG}text")]
    for node, ranks in ((0, "0-3"), (1, "4-7")):
        assert any(t.startswith(f"node {node} · ") and t.endswith(f" · ranks {ranks}") for t in texts), texts
    for gpu in range(8):  # each GPU carries its rank's swatch and number
        group = next(e for e in root.iter(f"{SVG}g") if e.get("id") == f"gpu-{gpu}")
        assert [e.get("data-rank") for e in group.iter(f"{SVG}rect") if e.get("data-rank")] == [str(gpu)]
        assert f"GPU {gpu} · rank {gpu} · " in "".join(group.itertext())
    # A shared CPU is drawn in bands of its ranks' colours, no longer one grey.
    swatch = {e.get("data-rank"): fill(e) for e in root.iter(f"{SVG}rect") if e.get("class") == "swatch"}
    gradient = fill(cpu_cells(root)[0]).removeprefix("url(#").removesuffix(")")
    stops = next(e for e in root.iter(f"{SVG}linearGradient") if e.get("id") == gradient)
    assert {s.get("stop-color") for s in stops} == {swatch[str(r)] for r in range(4)}


@pytest.mark.parametrize(("args", "shared", "reserved"), [
    (["--mode", "exclusive"], False, False), (["--mode", "exclusive", "--reserve", "1"], False, True),
    ([], True, False)])
def test_the_legend_lists_only_what_is_drawn(tmp_path: Path, args: list[str], shared: bool, reserved: bool) -> None:
    _, root = draw(tmp_path, "plan", "--machine", "dgx-h100", *args)
    texts = ["".join(e.itertext()) for e in root.iter(f"{SVG}text")]
    assert any("several ranks share" in t for t in texts) is shared
    assert any(t.startswith("thick border") for t in texts) is reserved


def test_a_label_wider_than_the_picture_may_grow_is_shortened() -> None:
    from numapin.tools.picture import _text_width, fit

    long = "node 0 · CPUs " + ",".join(str(c) for c in range(0, 2000, 2))
    cut = fit(long, 12, 500)
    assert cut.endswith("…") and long.startswith(cut[:-1]) and _text_width(cut, 12) <= 500
    assert fit("node 0", 12, 500) == "node 0"


def _ids(root: ET.Element) -> list[tuple[float, float, str]]:
    return [(float(e.get("x", "0")), float(e.get("y", "0")), "".join(e.itertext()))
            for e in root.iter(f"{SVG}text") if e.get("class") == "cpu-id"]


def test_every_cell_shows_its_cpus_number(tmp_path: Path) -> None:
    # The cells showed rank numbers; a reader looking for CPU 57 could not find it.
    _, root = draw(tmp_path, "plan", "--machine", "dgx-h100", "--mode", "exclusive")
    cells = cpu_cells(root)
    ids = _ids(root)
    assert sorted(int(text) for _, _, text in ids) == sorted(cells)
    for x, y, text in ids:  # each number inside its own cell
        cell = cells[int(text)]
        left, top, size = float(cell.get("x", "0")), float(cell.get("y", "0")), float(cell.get("width", "0"))
        assert left <= x <= left + size and top <= y <= top + size, text


def test_the_machine_picture_has_a_legend_and_no_blank_cell(tmp_path: Path) -> None:
    out = tmp_path / "show.svg"
    subprocess.run([*NUMAPIN, "show", "--machine", "laptop", "--svg", str(out)], capture_output=True, check=True)
    root = ET.parse(out).getroot()
    texts = ["".join(e.itertext()) for e in root.iter(f"{SVG}text")]
    assert "legend" in texts and any(t.startswith("a CPU, its number inside") for t in texts)
    assert {int(t) for _, _, t in _ids(root)} == set(cpu_cells(root))


# -- the live host: ps --svg ----------------------------------------------------------------------


def test_the_live_picture_puts_each_worker_where_it_should_run_and_outlines_where_it_strays(
        pair_root: Path, tmp_path: Path) -> None:
    import os

    import live

    env = live.without_inputs(dict(os.environ)) | {"NUMAPIN_FSROOT": str(pair_root),
                                                   "NUMAPIN_RUNTIME_DIR": str(tmp_path / "records")}
    worker = "import time; print('ready', flush=True); time.sleep(60)"
    started = [subprocess.Popen([*NUMAPIN, "exec", "--gpu", str(gpu), "--memory", "none", "--", sys.executable, "-c",
                                 worker], stdout=subprocess.PIPE, text=True, env=env) for gpu in (0, 1)]
    try:
        for proc in started:
            assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
        os.sched_setaffinity(started[1].pid, live.NODE0)  # GPU 1's worker moved onto GPU 0's node
        out = tmp_path / "live.svg"
        done = subprocess.run([*NUMAPIN, "ps", "--svg", str(out), *(str(p.pid) for p in started)],
                              capture_output=True, text=True, timeout=60, env=env)
        assert done.returncode == 1 and "misplaced" in done.stdout, done.stdout + done.stderr
        root = ET.parse(out).getroot()
    finally:
        for proc in started:
            proc.kill()
            proc.wait()
    cells = cpu_cells(root)
    ok, moved = (str(p.pid) for p in started)
    # Each worker's colour on the CPUs it should run on: worker k (in ps's order) holds its GPU's node's CPUs.
    assert {cpu for cpu, e in cells.items() if e.get("data-ranks") == "0"} == set(live.NODE0)
    assert {cpu for cpu, e in cells.items() if e.get("data-ranks") == "1"} == set(live.NODE1)
    assert {cpu for cpu, e in cells.items() if e.get("data-strays")} == set(live.NODE0)
    assert all(e.get("data-strays") == moved for e in cells.values() if e.get("data-strays"))
    gpus = {e.get("id"): "".join(e.itertext()) for e in root.iter(f"{SVG}g") if (e.get("id") or "").startswith("gpu")}
    assert f"worker {ok}" in gpus["gpu-0"] and f"worker {moved}" in gpus["gpu-1"], gpus
    legend = " ".join("".join(t.itertext()) for t in root.iter(f"{SVG}text"))
    assert f"pid {moved}" in legend and "misplaced (threads)" in legend and "may run on CPUs" in legend


@pytest.mark.parametrize("name", ["a\x01b", "esc\x1b[31m", "bell\x07<x>&"])
def test_the_live_picture_is_well_formed_xml_whatever_a_process_is_named(
        name: str, pair_root: Path, tmp_path: Path) -> None:
    """A process names itself (its comm): characters XML 1.0 forbids, or that a terminal acts on, are written out
    visibly, and the SVG parses (a browser draws nothing after one bad character)."""
    import os

    import live

    env = live.without_inputs(dict(os.environ)) | {"NUMAPIN_FSROOT": str(pair_root),
                                                   "NUMAPIN_RUNTIME_DIR": str(tmp_path / "records")}
    worker = ("import sys, time; open('/proc/self/comm', 'w').write(sys.argv[1]); print('ready', flush=True); "
              "time.sleep(60)")
    proc = subprocess.Popen([*NUMAPIN, "exec", "--gpu", "0", "--memory", "none", "--", sys.executable, "-c", worker,
                             name], stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
        out = tmp_path / "live.svg"
        done = subprocess.run([*NUMAPIN, "ps", "--svg", str(out), str(proc.pid)], capture_output=True, text=True,
                              timeout=60, env=env)
        assert done.returncode in (0, 1), done.stderr
    finally:
        proc.kill()
        proc.wait()
    root = ET.parse(out).getroot()  # ElementTree refuses a character XML 1.0 forbids
    legend = " ".join("".join(t.itertext()) for t in root.iter(f"{SVG}text"))
    shown = name.encode("unicode_escape").decode().replace("\\x1b", "\\x1b")
    assert f"pid {proc.pid} {shown}" in legend, legend
    assert not set(legend) & {"\x01", "\x07", "\x1b"}


@pytest.mark.parametrize("machine", ["dgx-h100", "epyc-nps4", "mi300x"])
def test_the_plan_fits_a_1400_pixel_window_and_each_nodes_gpus_share_their_rows_evenly(
        machine: str, tmp_path: Path) -> None:
    _, root = draw(tmp_path, "plan", "--machine", machine, "--mode", "exclusive", "--reserve", "1")
    assert float(root.get("width", "0")) <= 1400, root.get("width")
    rows: dict[str, dict[str, int]] = {}  # node -> row (its y) -> GPUs on it
    for node in root.iter(f"{SVG}rect"):
        if (node.get("id") or "").startswith("node-"):
            top, bottom = float(node.get("y", 0)), float(node.get("y", 0)) + float(node.get("height", 0))
            for g in root.iter(f"{SVG}g"):
                if (g.get("id") or "").startswith("gpu-"):
                    y = float(g.find(f"{SVG}rect").get("y", 0))  # type: ignore[union-attr]
                    if top <= y <= bottom:
                        row = rows.setdefault(node.get("id", ""), {})
                        row[str(y)] = row.get(str(y), 0) + 1
    for node, counts in rows.items():
        assert max(counts.values()) - min(counts.values()) <= 1, (node, counts)  # 2 + 2, never 3 + 1
