"""The plan's HTML page in a real browser: it renders, is not blank, and shows every rank's colour."""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from pathlib import Path

import png
import pytest

import needs
from numapin.tools.picture import PALETTE, STRAY

NUMAPIN = [sys.executable, "-m", "numapin"]
#: Chromium headless, as root in a closed network: no sandbox, no background connections.
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync", "--hide-scrollbars"]


def browser() -> str:
    return needs.program("chromium", "chromium-browser", install="apt-get install chromium")


def rgb(colour: str) -> tuple[int, int, int]:
    return int(colour[1:3], 16), int(colour[3:5], 16), int(colour[5:7], 16)


def screenshot(chromium: str, page: Path, tmp_path: Path, size: str) -> tuple[int, int, Counter[tuple[int, int, int]]]:
    """``page`` rendered by Chromium in a window of ``size`` (``W,H``): its width, height and pixels by colour."""
    shot = tmp_path / f"{page.stem}.png"
    subprocess.run([chromium, *FLAGS, f"--user-data-dir={tmp_path / 'profile'}", f"--window-size={size}",
                    f"--screenshot={shot}", page.as_uri()], check=True, capture_output=True, timeout=120)
    width, height, found = png.pixels(shot.read_bytes())
    return width, height, Counter(found)


def test_the_plans_page_shows_every_ranks_colour(tmp_path: Path) -> None:
    chromium = browser()
    page = tmp_path / "plan.html"
    subprocess.run([*NUMAPIN, "plan", "--machine", "dgx-h100", "--mode", "exclusive", "--reserve", "1",
                    "--html", str(page)], check=True, capture_output=True)
    width, height, counts = screenshot(chromium, page, tmp_path, "1500,1100")
    assert (width, height) == (1500, 1100)
    white = counts[(255, 255, 255)]
    assert white < 0.97 * counts.total(), "the page rendered blank"
    # Eight ranks, eight of the palette's nine colours: every one of them is on the screen,
    # each over many pixels (a cell's inside, not an edge's anti-aliasing).
    for colour in PALETTE[:8]:
        assert counts[rgb(colour)] > 200, f"{colour} missing from the rendered plan"


#: Measures every label in the browser's own font against the box it sits in (the smallest rectangle
#: holding its start), and writes what overflows into the page, which --dump-dom then prints.
MEASURE = """<script>
addEventListener("load", () => {
  const boxes = [...document.querySelectorAll("svg rect")].map(r => r.getBBox());
  const over = [];
  for (const t of document.querySelectorAll("svg text")) {
    const b = t.getBBox();
    const inside = boxes.filter(r => r.x <= b.x && b.x <= r.x + r.width && r.y <= b.y + b.height / 2
                                     && b.y + b.height / 2 <= r.y + r.height);
    if (!inside.length) { over.push(t.textContent + " (in no box)"); continue; }
    const box = inside.reduce((a, r) => (r.width * r.height < a.width * a.height ? r : a));
    const past = b.x + b.width - (box.x + box.width);
    if (past > 0.5) over.push(t.textContent + " by " + past.toFixed(1) + " px");
  }
  document.body.setAttribute("data-texts", document.querySelectorAll("svg text").length);
  document.body.setAttribute("data-overflow", JSON.stringify(over));
});
</script>"""


def overflowing(chromium: str, tmp_path: Path, *args: str) -> tuple[int, list[str]]:
    """The number of labels on the picture of ``numapin ARGS --html``, and those wider than their box."""
    import html
    import json
    import re

    page = tmp_path / "page.html"
    subprocess.run([*NUMAPIN, *args, "--html", str(page)], check=True, capture_output=True)
    page.write_text(page.read_text().replace("</body>", MEASURE + "</body>"))
    dom = subprocess.run([chromium, *FLAGS, f"--user-data-dir={tmp_path / 'profile'}", "--dump-dom",
                          page.as_uri()], check=True, capture_output=True, text=True, timeout=120).stdout
    texts = re.search(r'data-texts="(\d+)"', dom)
    over = re.search(r'data-overflow="([^"]*)"', dom)
    assert texts and over, "the measuring script did not run"
    return int(texts.group(1)), json.loads(html.unescape(over.group(1)))


@pytest.mark.parametrize("args", [
    ["plan", "--machine", "pair"],  # a small host: short boxes, labels longer than their contents
    ["plan", "--machine", "gb300"],  # memory-only nodes
    ["plan", "--machine", "dgx-h100"],  # mode node: every node's ranks in its label
    ["plan", "--machine", "dgx-h100", "--mode", "exclusive", "--reserve", "1"],
    ["show", "--machine", "epyc-nps4"],
])
def test_every_label_fits_its_box_in_a_real_browser(tmp_path: Path, args: list[str]) -> None:
    texts, over = overflowing(browser(), tmp_path, *args)
    assert texts > 5 and over == [], over


def test_node_mode_shows_every_ranks_colour_in_a_real_browser(tmp_path: Path) -> None:
    chromium = browser()
    page = tmp_path / "plan.html"
    subprocess.run([*NUMAPIN, "plan", "--machine", "dgx-h100", "--html", str(page)], check=True, capture_output=True)
    _, _, counts = screenshot(chromium, page, tmp_path, "1500,1100")
    # Shared CPUs in bands, GPUs' swatches, the legend: each of the 8 ranks' colours over many pixels.
    for colour in PALETTE[:8]:
        assert counts[rgb(colour)] > 300, f"{colour} missing from the node picture"


def test_the_ab_page_shows_every_run_of_every_variant(tmp_path: Path) -> None:
    # numapin ab's page: each variant's runs as dots of its colour (over many pixels), the table beneath.
    chromium = browser()
    page = tmp_path / "ab.html"
    variants = [arg for name in ("one", "two", "three") for arg in ("--variant", f"{name}=")]
    subprocess.run([*NUMAPIN, "ab", *variants, "--rounds", "4", "--warmup", "0", "--html", str(page), "--", "true"],
                   check=True, capture_output=True, timeout=300)
    _, _, counts = screenshot(chromium, page, tmp_path, "1000,700")
    assert counts[(255, 255, 255)] < 0.97 * counts.total(), "the page rendered blank"
    for colour in PALETTE[:3]:
        assert counts[rgb(colour)] > 60, f"{colour}: a variant's runs missing from the rendered page"
    assert counts[rgb(PALETTE[3])] == 0, "three variants, three colours"


def test_every_label_of_the_ab_picture_stays_on_the_page(tmp_path: Path) -> None:
    chromium = browser()
    page = tmp_path / "ab.html"
    subprocess.run([*NUMAPIN, "ab", "--variant", "a-rather-long-variant-name=", "--variant", "b=", "--rounds", "2",
                    "--warmup", "0", "--html", str(page), "--", "true"], check=True, capture_output=True, timeout=300)
    measure = """<script>addEventListener("load", () => {
      const svg = document.querySelector("svg").getBBox(), width = +document.querySelector("svg").getAttribute("width");
      const out = [...document.querySelectorAll("svg text")].filter(t => t.getBBox().x + t.getBBox().width > width)
        .map(t => t.textContent);
      document.body.setAttribute("data-out", JSON.stringify(out));
      document.body.setAttribute("data-texts", document.querySelectorAll("svg text").length);
    });</script>"""
    page.write_text(page.read_text().replace("</body>", measure + "</body>"))
    import html
    import json
    import re

    dom = subprocess.run([chromium, *FLAGS, f"--user-data-dir={tmp_path / 'profile'}", "--dump-dom", page.as_uri()],
                         check=True, capture_output=True, text=True, timeout=120).stdout
    out, texts = re.search(r'data-out="([^"]*)"', dom), re.search(r'data-texts="(\d+)"', dom)
    assert out and texts and int(texts.group(1)) > 6, "the measuring script did not run"
    assert json.loads(html.unescape(out.group(1))) == [], "a label runs past the picture's right edge"


def test_the_live_picture_shows_each_worker_and_where_one_strays(tmp_path: Path) -> None:
    # numapin ps --html on the live host seen as two GPUs (this host's CPUs as two nodes): two workers, the second
    # moved onto the first one's node by someone else. Rendered: both workers' colours and the stray outline.
    import os

    import live

    if not live.NODE0 or not live.NODE1:
        pytest.skip(f"needs allowed CPUs on both halves of the machine (allowed: {live.BASELINE})")
    chromium = browser()
    root = live.write_pair(tmp_path / "root")
    env = live.without_inputs(dict(os.environ)) | {"NUMAPIN_FSROOT": str(root),
                                                   "NUMAPIN_RUNTIME_DIR": str(tmp_path / "records")}
    worker = "import time; print('ready', flush=True); time.sleep(60)"
    started = [subprocess.Popen([*NUMAPIN, "exec", "--gpu", str(gpu), "--memory", "none", "--", sys.executable, "-c",
                                 worker], stdout=subprocess.PIPE, text=True, env=env) for gpu in (0, 1)]
    page = tmp_path / "live.html"
    try:
        for proc in started:
            assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
        os.sched_setaffinity(started[1].pid, live.NODE0)
        subprocess.run([*NUMAPIN, "ps", "--html", str(page), *(str(p.pid) for p in started)], capture_output=True,
                       timeout=60, env=env)
    finally:
        for proc in started:
            proc.kill()
            proc.wait()
    _, _, counts = screenshot(chromium, page, tmp_path, "1100,460")
    assert counts[(255, 255, 255)] < 0.97 * counts.total(), "the page rendered blank"
    for colour in PALETTE[:2]:  # each worker's CPUs, its GPU's swatch and its legend line
        assert counts[rgb(colour)] > 200, f"{colour}: a worker missing from the live picture"
    assert counts[rgb(STRAY)] > 20, "the CPU the moved worker strays to is not outlined"
    text = page.read_text()
    assert "misplaced (threads)" in text and f"pid {started[1].pid}" in text
