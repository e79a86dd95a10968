"""The plan's HTML page in a real browser: it renders, is not blank, and shows every rank's colour."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import png
import pytest

from numapin.picture import PALETTE

NUMAPIN = [sys.executable, "-m", "numapin"]
#: Chromium headless, as root in a closed network: no sandbox, no background connections.
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync", "--hide-scrollbars"]


def browser() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        message = "headless Chromium is not installed (apt-get install chromium)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return found


def rgb(colour: str) -> tuple[int, int, int]:
    return int(colour[1:3], 16), int(colour[3:5], 16), int(colour[5:7], 16)


def test_the_plans_page_shows_every_ranks_colour(tmp_path: Path) -> None:
    chromium = browser()
    page = tmp_path / "plan.html"
    subprocess.run([*NUMAPIN, "plan", "--machine", "dgx-h100", "--mode", "exclusive", "--reserve", "1",
                    "--html", str(page)], check=True, capture_output=True)
    shot = tmp_path / "plan.png"
    subprocess.run([chromium, *FLAGS, f"--user-data-dir={tmp_path / 'profile'}", "--window-size=1500,1100",
                    f"--screenshot={shot}", page.as_uri()], check=True, capture_output=True, timeout=120)
    width, height, found = png.pixels(shot.read_bytes())
    assert (width, height) == (1500, 1100)
    counts = Counter(found)
    white = counts[(255, 255, 255)]
    assert white < 0.97 * len(found), "the page rendered blank"
    # Eight ranks cycle through the palette's seven colours: every one of them is on the screen,
    # each over many pixels (a cell's inside, not an edge's anti-aliasing).
    for colour in PALETTE:
        assert counts[rgb(colour)] > 200, f"{colour} missing from the rendered plan"
