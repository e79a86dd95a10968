"""A container given some of a host's GPUs: sysfs shows every GPU of the host, the container's device files (and
NVIDIA's legacy runtime's proc entries) only its own, and the runtimes count only those. numapin counts the same,
in the glance and the full reading alike, so that a rank's GPU is the one its runtime gives it."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import in_child
from numapin.base.environment import CUDA_VISIBLE_DEVICES, ROCR_VISIBLE_DEVICES
from numapin.facts import synthetic as machines
from numapin.facts.glance import machine_gpus
from numapin.facts.inventory import Inventory, in_view, read_gpus
from numapin.facts.machine import gather
from numapin.facts.rocm import KFD_NODES
from numapin.facts.topology import read_topology

PROC = "proc/driver/nvidia/gpus"


def _inventory(root: Path) -> Inventory:
    return read_gpus(read_topology(root), nvml=False)


def _minor(root: Path, bus: str) -> int:
    for line in (root / PROC / bus / "information").read_text().splitlines():
        if line.startswith("Device Minor:"):
            return int(line.split(":")[1])
    raise AssertionError(f"{bus}: no minor")


def _render_minor(root: Path, node: str) -> int:
    for line in (root / KFD_NODES / node / "properties").read_text().splitlines():
        if line.startswith("drm_render_minor "):
            return int(line.split()[1])
    return 0


@pytest.fixture(scope="module")
def dgx(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return machines.write("dgx-h100", tmp_path_factory.mktemp("dgx") / "root")


def _hold(root: Path, bus: str, driver: str) -> None:
    """Make ``driver`` the holder of the function ``bus``, both ways, as sysfs links them."""
    device = (root / "sys/bus/pci/devices" / bus).resolve()
    for held in (root / "sys/bus/pci/drivers").glob(f"*/{bus}"):
        held.unlink()
    (root / "sys/bus/pci/drivers" / driver).mkdir(exist_ok=True)
    (root / "sys/bus/pci/drivers" / driver / bus).symlink_to(device)
    (device / "driver").unlink()
    (device / "driver").symlink_to(root / "sys/bus/pci/drivers" / driver)


@contextmanager
def cut(root: Path, *, unlisted: Iterable[str] = (), files: Iterable[str] | None = None,
        rebound: Iterable[str] = ()) -> Iterator[Path]:
    """``root`` as a container runtime (or an administrator) shows it while the block runs: the driver's proc
    entries of ``unlisted`` GPUs gone, a ``dev`` folder holding ``files`` (None: no dev folder), the ``rebound``
    GPUs held by vfio-pci; put back after."""
    stash = Path(tempfile.mkdtemp(dir=root.parent))  # beside the root: a rename, not a copy
    moved: list[str] = []
    rebound = list(rebound)
    try:
        for bus in rebound:
            _hold(root, bus, "vfio-pci")
        for bus in unlisted:
            os.rename(root / PROC / bus, stash / bus)
            moved.append(bus)
        if files is not None:
            (root / "dev").mkdir()
            for name in files:
                (root / "dev" / name).parent.mkdir(parents=True, exist_ok=True)
                (root / "dev" / name).touch()
        yield root
    finally:
        for bus in rebound:
            _hold(root, bus, "nvidia")
        for bus in moved:
            os.rename(stash / bus, root / PROC / bus)
        shutil.rmtree(root / "dev", ignore_errors=True)
        shutil.rmtree(stash)


def test_a_legacy_runtime_s_container_counts_only_the_gpus_it_mounted(dgx: Path) -> None:
    everything = _inventory(dgx).gpus
    kept = [g for g in everything if g.node == everything[-1].node]  # the GPUs of the last node
    with cut(dgx, unlisted=[g.pci for g in everything if g not in kept]):
        inventory = _inventory(dgx)
        assert [g.pci for g in inventory.gpus] == [g.pci for g in kept]
        assert {h.gpu.pci for h in inventory.hidden} == {g.pci for g in everything} - {g.pci for g in kept}
        assert all("NVIDIA driver" in h.why for h in inventory.hidden)
        facts = gather(dgx, {})
        assert facts.gpu(0).gpu.pci == kept[0].pci and facts.gpu(0).gpu.node == kept[0].node != everything[0].node
        assert gather(dgx, {CUDA_VISIBLE_DEVICES: "1"}).gpu(0).gpu.pci == kept[1].pci


def test_device_files_tell_which_gpus_a_container_was_given(dgx: Path) -> None:
    everything = _inventory(dgx).gpus
    given = [everything[5], everything[2]]
    with cut(dgx, files=[f"nvidia{_minor(dgx, g.pci)}" for g in given]):
        inventory = _inventory(dgx)
        assert [g.pci for g in inventory.gpus] == sorted(g.pci for g in given)  # CUDA's order: PCI order
        assert len(inventory.hidden) == len(everything) - 2
        assert all(h.why == f"its device file /dev/nvidia{_minor(dgx, h.gpu.pci)} is not in this view"
                   for h in inventory.hidden)
        assert gather(dgx, {}).gpu(1).gpu.pci == everything[5].pci


@pytest.mark.parametrize("every", [True, False], ids=["all-files", "no-file"])
def test_every_gpu_counts_where_the_device_files_cannot_tell(dgx: Path, every: bool) -> None:
    # All present (a host), or none (a host whose driver makes them on first use): nothing is hidden.
    everything = _inventory(dgx).gpus
    with cut(dgx, files=[f"nvidia{_minor(dgx, g.pci)}" for g in everything] if every else []):
        assert (dgx / "dev").is_dir()
        assert _inventory(dgx).gpus == everything and _inventory(dgx).hidden == ()


@pytest.mark.parametrize("how", ["rebound", "unlisted"])
def test_a_gpu_another_driver_holds_shifts_the_indices_after_it(dgx: Path, how: str) -> None:
    everything = _inventory(dgx).gpus
    with cut(dgx, **{how: [everything[1].pci]}):  # vfio-pci holds it, for a virtual machine
        inventory = _inventory(dgx)
        assert [g.pci for g in inventory.gpus] == [everything[0].pci, *(g.pci for g in everything[2:])]
        assert gather(dgx, {}).gpu(1).gpu.pci == everything[2].pci
        assert machine_gpus(str(dgx)) == len(everything) - 1
        if how == "rebound":
            assert [h.why for h in inventory.hidden] == ["vfio-pci holds it, not the nvidia driver"]


def test_where_sysfs_names_drivers_a_reading_reads_only_the_gpu_drivers_functions(dgx: Path) -> None:
    # A GPU host has hundreds of PCI functions, and the runtimes use only those the GPU drivers hold: a pin reads
    # no other. A GPU another driver holds (vfio-pci, for a virtual machine) is found on the first question
    # about the GPUs the process may not use, which reads every function.
    everything = _inventory(dgx).gpus
    functions = sorted(p.name for p in (dgx / "sys/bus/pci/devices").iterdir())
    assert len(functions) > len(everything)  # bridges, NICs, switches: the functions a pin never reads

    def child() -> tuple[list[str], list[tuple[str, str]], list[list[str]]]:
        import sys

        opened: list[list[str]] = [[]]
        sys.addaudithook(lambda event, args: opened[-1].append(str(args[0])) if event == "open" else None)
        inventory = _inventory(dgx)
        opened.append([])
        hidden = [(h.gpu.pci, h.why) for h in inventory.hidden]
        return [g.pci for g in inventory.gpus], hidden, [[p for p in step if p.endswith("/vendor")] for step in opened]

    with cut(dgx, rebound=[everything[1].pci]):
        gpus, hidden, (reading, asking) = in_child(child)
    assert gpus == [g.pci for g in everything if g != everything[1]]
    assert hidden == [(everything[1].pci, "vfio-pci holds it, not the nvidia driver")]
    assert sorted(path.split("/")[0] for path in reading) == gpus  # the nvidia driver's functions, no other
    assert sorted({path.split("/")[0] for path in asking}) == functions  # every function, once asked


@pytest.fixture(scope="module")
def mi300x(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return machines.write("mi300x-cpx", tmp_path_factory.mktemp("mi300x") / "root")


def _gpu_nodes(root: Path) -> list[str]:
    nodes = sorted((p.name for p in (root / KFD_NODES).iterdir()), key=int)
    return [n for n in nodes if _render_minor(root, n) > 0]


def test_rocm_counts_the_partitions_whose_render_nodes_a_container_holds(mi300x: Path) -> None:
    everything = _inventory(mi300x).gpus
    nodes = _gpu_nodes(mi300x)
    assert len(nodes) == len(everything)  # KFD's GPU nodes, in ROCm's order
    given = [12, 3, 40]  # indices in the host's order
    with cut(mi300x, files=[f"dri/renderD{_render_minor(mi300x, nodes[i])}" for i in given]):
        inventory = _inventory(mi300x)
        expected = [everything[i] for i in sorted(given)]
        assert inventory.gpus == tuple(expected)  # each keeps its package's PCI device and its partition number
        assert expected[0].partition == 3 and len(inventory.hidden) == len(everything) - 3
        assert gather(mi300x, {ROCR_VISIBLE_DEVICES: "1"}).gpu(0).gpu == expected[1]
        assert machine_gpus(str(mi300x)) == 3


def test_a_container_without_render_nodes_has_no_amd_gpu(mi300x: Path) -> None:
    with cut(mi300x, files=[]):
        inventory = _inventory(mi300x)
        assert inventory.gpus == () and len(inventory.hidden) == len(_gpu_nodes(mi300x))
        assert machine_gpus(str(mi300x)) == 0


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(unlisted=st.sets(st.integers(0, 7)), files=st.sets(st.integers(0, 7)), rebound=st.sets(st.integers(0, 7)),
       stray=st.booleans())
def test_the_glance_counts_a_containers_gpus_as_the_full_reading(dgx: Path, unlisted: set[int], files: set[int],
                                                                 rebound: set[int], stray: bool) -> None:
    everything = _inventory(dgx).gpus
    names = [f"nvidia{_minor(dgx, everything[i].pci)}" for i in files] + (["nvidia99"] if stray else [])
    with cut(dgx, unlisted=[everything[i].pci for i in unlisted], files=names,
             rebound=[everything[i].pci for i in rebound]):
        full = len(_inventory(dgx).gpus)
        assert machine_gpus(str(dgx)) in (full, None)  # None: only the full reading can tell (it asks NVML)
        assert machine_gpus(str(dgx)) == full or full == 0
    # The rules, in words: only the GPUs the nvidia driver holds; of them, with none listed in its proc entries,
    # none of the entries' rules can tell; else the listed ones, narrowed to those with a device file where any
    # of them has one (a stray file is no GPU's).
    held = [i for i in range(8) if i not in rebound]
    listed = [i for i in held if i not in unlisted]
    present = [i for i in listed if i in files]
    assert full == (len(held) if len(unlisted) == 8 else len(present) if present else len(listed))


def test_another_process_s_root_narrows_the_machine_s_gpus_to_those_it_holds(mi300x: Path, dgx: Path,
                                                                              tmp_path: Path) -> None:
    # How a process in a container is judged from the host: the machine read there, narrowed by what the
    # other root holds (its render nodes; its NVIDIA device files, by the minors the host's reading found).
    amd = _inventory(mi300x)
    nvidia = _inventory(dgx)
    other = tmp_path / "other"
    (other / "dev" / "dri").mkdir(parents=True)
    (other / "dev" / "dri" / f"renderD{amd.gpus[9].minor}").touch()
    (other / "dev" / f"nvidia{nvidia.gpus[6].minor}").touch()
    assert in_view(amd, str(other)).gpus == (amd.gpus[9],)
    assert in_view(nvidia, str(other)).gpus == (nvidia.gpus[6],)
    assert len(in_view(nvidia, str(other)).hidden) == len(nvidia.gpus) - 1
    assert in_view(nvidia, str(tmp_path / "bare")) is nvidia  # a root that holds no device file tells nothing
    machine = gather(dgx, {}).machine
    assert machine is not None
    seen = machine.view({}, seen_from=str(other))
    assert [v.gpu for v in seen.visible] == [nvidia.gpus[6]] and machine.view({}).visible != seen.visible
