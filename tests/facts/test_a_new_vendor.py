"""A vendor is its row of the accelerators' table and its own module: a vendor added through those two only is
counted by the start-up glance, read and listed by ``numapin ps`` for the device file a process holds, and placed
when the process names its device late through PyTorch. (The module below is written by the test, outside
numapin, as a vendor's module kept elsewhere would be; nothing else of numapin is changed.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import live
from numapin.base.frozen import replace

#: The vendor's own module: its row, added to the table when it is imported, and its reader.
VENDOR = '''
from numapin.cpuset import CpuSet
from numapin.facts import pci
from numapin.facts.glance import ACCELERATORS, Accelerator
from numapin.facts.gpu import Gpu, Vendor, device_locality

ACCELERATORS["fake"] = Accelerator(0x1DED, (0x1200,), "fakegpu", "fakevendor", names=("FAKE_VISIBLE_DEVICES",),
                                   maker="Fake", device="fake", files=r"fake\\d+")


def read(topology, host, functions, warnings, *, nvml, scan):
    gpus = []
    for number, name in enumerate(sorted(pci.normalize(f) for f in functions)):
        node, cpus, firmware = device_locality(topology, host, f"sys/bus/pci/devices/{name}", warnings)
        gpus.append(Gpu(pci=name, node=node, cpus=cpus, memory_nodes=CpuSet([node]), model="Fake One",
                        firmware_node=firmware, vendor=Vendor("fake"), devices=(f"/dev/fake{number}",)))
    return gpus, list, None


def visible(gpus, environ, notes, nvml=None):
    listed = environ.get("FAKE_VISIBLE_DEVICES")
    if listed is None:
        return list(gpus), None
    return [gpus[int(i)] for i in listed.split(",") if i.isdigit() and int(i) < len(gpus)], None


def in_view(gpus, root):
    return []
'''
#: PyTorch as far as a late naming goes (the real one is the integration tier's).
TORCH = {"torch/__init__.py": "from . import accelerator\n",
         "torch/accelerator.py": "def set_device_index(device, /):\n    pass\n"}


@pytest.fixture
def vendor_root(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """The pair machine with the new vendor's two devices in place of NVIDIA's, and an environment whose Python
    finds the vendor's module and the PyTorch stand-in (each interpreter imports the vendor's module first)."""
    modules = tmp_path / "modules"
    for name, text in {"fakevendor.py": VENDOR, **TORCH}.items():
        (modules / name).parent.mkdir(parents=True, exist_ok=True)
        (modules / name).write_text(text)
    writer = (f"import sys; sys.path.insert(0, {str(modules)!r}); import fakevendor\n"
              "from numapin.facts import synthetic\nfrom numapin.facts.synthetic import MachineSpec\n")
    spec = replace(live.SPEC, name="fake-pair", gpu_vendor="fake", gpu_model="Fake One", gpu_class="0x120000",
                   gpu_device="0x0001")
    subprocess.run([sys.executable, "-c", writer + f"synthetic.write({spec!r}, {str(tmp_path / 'root')!r})"],
                   check=True, timeout=60, env=live.without_inputs(dict(os.environ)) | {"PYTHONPATH": str(modules)})
    return tmp_path / "root", live.without_inputs(dict(os.environ)) | {"PYTHONPATH": str(modules)}


def _python(code: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", "import fakevendor\n" + textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=60, env=env)


def test_the_new_vendor_is_counted_and_read(vendor_root: tuple[Path, dict[str, str]]) -> None:
    root, env = vendor_root
    done = _python(f"""
        from numapin.facts.glance import glimpse, machine_gpus
        import numapin, os
        os.environ["NUMAPIN_FSROOT"] = {str(root)!r}
        facts = numapin.machine({str(root)!r}, {{}})
        read = [(str(g.vendor), g.pci, g.node) for g in facts.inventory.gpus]
        print(machine_gpus({str(root)!r}), glimpse({{}}), read)
        print(numapin.machine({str(root)!r}, {{"FAKE_VISIBLE_DEVICES": "1"}}).visible[0].gpu.node)
    """, env)
    assert done.returncode == 0, done.stderr
    counted, one = done.stdout.splitlines()
    assert counted.startswith("2 (2, 'fake') [('fake', ") and counted.count("'fake'") == 3, counted
    assert one == "1"  # its own variable, by its own module's rule


def test_a_process_holding_its_device_is_listed_by_ps(vendor_root: tuple[Path, dict[str, str]],
                                                       tmp_path: Path) -> None:
    root, env = vendor_root
    held = tmp_path / "dev" / "fake1"
    held.parent.mkdir()
    held.write_text("")  # a process's open file named .../dev/fake1, as the device file is named
    worker = subprocess.Popen([sys.executable, "-c", f"f = open({str(held)!r}); print('ready', flush=True); "
                               "import time; time.sleep(60)"], stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert worker.stdout is not None and worker.stdout.readline() == "ready\n"
        listed = _python(f"""
            from numapin.cli import main
            main(["ps", "--root", {str(root)!r}, "--json"])
        """, env)
    finally:
        worker.kill()
        worker.wait()
    found = [w for w in json.loads(listed.stdout)["workers"] if w["pid"] == worker.pid]
    assert [(w["why"], w["candidate"], w["expected"]) for w in found] == [
        ("/dev/fake1", False, live.cpus(live.NODE1))], listed.stdout + listed.stderr


def test_a_process_naming_its_device_late_is_placed(vendor_root: tuple[Path, dict[str, str]]) -> None:
    # The start-up hook sees two of the vendor's devices and no rank: left alone until the process names one.
    root, env = vendor_root
    # The hook is asked here, after the vendor's module added its row (an installed start-up file would ask at the
    # interpreter's start, before this test's module could add it).
    done = _python("""
        import os, numapin.startup as s
        os.environ["NUMAPIN_AUTOPIN"] = "1"
        print(s.activate().left_alone)
        import torch
        torch.accelerator.set_device_index("fake:1")
        print(sorted(os.sched_getaffinity(0)))
    """, env | {"NUMAPIN_FSROOT": str(root)})
    assert done.returncode == 0, done.stderr
    alone, mask = done.stdout.splitlines()
    assert alone == "not a worker: no local rank and 2 GPUs visible"
    assert mask == str(sorted(live.NODE1)), done.stderr
