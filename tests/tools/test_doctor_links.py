"""numapin doctor on a GPU's PCIe link and on the kernel's transparent huge page settings: each finding on a
synthetic machine that shows it, and none where nothing is wrong."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from live import without_inputs
from numapin.facts import synthetic as machines
from numapin.facts.host import Host
from numapin.facts.link import links_above, parse_speed
from numapin.tools.doctor import diagnose

NUMAPIN = [sys.executable, "-m", "numapin"]


def _findings(root: Path, code: str, **kwargs: object) -> list[object]:
    found = diagnose({"OMP_NUM_THREADS": "1"}, root=str(root), gpu=0, **kwargs)  # type: ignore[arg-type]
    return [f for f in found.findings if f.id == code]


@pytest.fixture(scope="module")
def narrow(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """dgx-h100 with GPU 3's link at x8 of x16, written by the command a user would run."""
    root = tmp_path_factory.mktemp("narrow") / "dgx"
    done = subprocess.run([*NUMAPIN, "machine", "dgx-h100", str(root), "--narrow-link", "3"], capture_output=True,
                          text=True, timeout=60, env=without_inputs(dict(os.environ)))
    assert done.returncode == 0, done.stderr
    return root


def test_a_gpus_link_at_half_width_is_named_with_its_numbers(narrow: Path) -> None:
    found = _findings(narrow, "pcie-link-degraded")
    assert len(found) == 1, found
    finding = found[0]
    pci = machines._bdf(machines.SHAPES["dgx-h100"], 3)
    assert finding.severity == "warning" and f"GPU 3 ({pci})" in finding.sees, finding  # type: ignore[attr-defined]
    assert f"{pci}: x8 of x16, 32 GT/s of 32 GT/s" in finding.sees, finding  # type: ignore[attr-defined]
    # The link is said once, though both its ends (the GPU and the port above it) show it.
    assert finding.sees.count("x8 of x16") == 1, finding  # type: ignore[attr-defined]


def test_every_link_at_its_most_says_nothing(machine_root: object) -> None:
    for shape in ("dgx-h100", "mi300x", "pair"):
        root = machine_root(shape)  # type: ignore[operator]
        assert _findings(root, "pcie-link-degraded") == [], shape


def test_a_slower_link_alone_is_information_that_names_idle(tmp_path: Path) -> None:
    root = machines.write("pair", tmp_path / "pair")
    gpu = Host(str(root)).resolve("sys/bus/pci/devices/" + machines._bdf(machines.SHAPES["pair"], 1))
    assert gpu is not None
    (root / gpu / "current_link_speed").write_text("2.5 GT/s PCIe\n")
    (root / gpu.rsplit("/", 1)[0] / "current_link_speed").write_text("2.5 GT/s PCIe\n")
    found = diagnose({}, root=str(root), gpu=0).findings
    slow = [f for f in found if f.id == "pcie-link-degraded"]
    assert len(slow) == 1 and slow[0].severity == "info" and "GPU 1" in slow[0].sees, slow
    assert "2.5 GT/s of 32 GT/s" in slow[0].sees and "idle" in slow[0].why + slow[0].fix, slow


def test_the_links_above_a_gpu_are_each_read_once_device_first(narrow: Path) -> None:
    spec = machines.SHAPES["dgx-h100"]
    links = links_above(Host(str(narrow)), machines._bdf(spec, 3))
    assert [link.pci for link in links][:1] == [machines._bdf(spec, 3)] and len(links) == 1, links
    assert links[0].narrow and not links[0].slow


@given(st.text(max_size=30))
def test_any_speed_text_is_a_speed_or_none(text: str) -> None:
    value = parse_speed(text)
    assert value is None or 0 < value < 1024


def test_the_kernels_speeds_read_as_written() -> None:
    assert [parse_speed(t) for t in ("32.0 GT/s PCIe", "8 GT/s", "2.5 GT/s PCIe", "Unknown", "", "16.0 GB/s",
                                     "١٦ GT/s", "-2 GT/s")] == [32.0, 8.0, 2.5, None, None, None, None, None]


# -- transparent huge pages -------------------------------------------------------------------------------------


def _thp(root: Path, enabled: str, defrag: str) -> None:
    folder = root / "sys/kernel/mm/transparent_hugepage"
    words = {"enabled": "always madvise never", "defrag": "always defer defer+madvise madvise never"}
    for name, chosen in (("enabled", enabled), ("defrag", defrag)):
        (folder / name).write_text(" ".join(f"[{w}]" if w == chosen else w for w in words[name].split()) + "\n")


@pytest.mark.parametrize(("enabled", "defrag", "code"), [
    ("madvise", "madvise", "thp-defrag-stalls"), ("always", "always", "thp-defrag-stalls"),
    ("madvise", "defer+madvise", "thp-defrag-stalls"), ("never", "madvise", "thp-unavailable"),
    ("madvise", "defer", None), ("always", "never", None),
])
def test_a_pool_planned_with_thp_hears_what_the_settings_do(tmp_path: Path, enabled: str, defrag: str,
                                                              code: str | None) -> None:
    root = machines.write("pair", tmp_path / "pair")
    _thp(root, enabled, defrag)
    found = diagnose({}, root=str(root), gpu=0, buffer=64 << 30, hugepages="thp").findings
    thp = [f for f in found if f.id.startswith("thp-")]
    assert [f.id for f in thp] == ([code] if code else []), thp
    if code == "thp-defrag-stalls":
        assert f"transparent_hugepage/defrag is {defrag}" in thp[0].sees and "defer" in thp[0].fix, thp
    # Without a pool asking for them, the settings are no finding.
    assert not [f for f in diagnose({}, root=str(root), gpu=0).findings if f.id.startswith("thp-")]


def test_a_machine_without_thp_files_says_nothing_of_them(tmp_path: Path) -> None:
    root = machines.write("pair", tmp_path / "pair")
    for name in ("enabled", "defrag"):
        (root / "sys/kernel/mm/transparent_hugepage" / name).unlink()
    assert not [f for f in diagnose({}, root=str(root), gpu=0, buffer=1 << 30, hugepages="thp").findings
                if f.id.startswith("thp-")]


def test_the_command_checks_thp_before_a_pool_is_made(narrow: Path) -> None:
    done = subprocess.run([*NUMAPIN, "doctor", "--root", str(narrow), "--gpu", "0", "--buffer", "64G", "--hugepages",
                           "thp", "--json"], capture_output=True, text=True, timeout=60,
                          env=without_inputs(dict(os.environ)))
    found = {f["id"] for f in json.loads(done.stdout)["findings"]}
    assert "thp-defrag-stalls" in found and "hugepages-not-free" not in found, found
