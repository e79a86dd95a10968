"""Intel Gaudi: found from sysfs (the habanalabs driver's PCI functions, their module ids and accel device files), and
the module a process acquires under HABANA_VISIBLE_MODULES or HLS_MODULE_ID, as Intel's documentation gives the rules.

The host: the bus ids of a published `hl-smi` listing of 8 x HL-225 (Gaudi 2) (vdwarakn/scripts-and-utils,
gaudi/README.md), in its AIP order. That listing names no NUMA node and no module id: the node by bus (below 0x80:
node 0) and the module id as the AIP number are this test's assumptions, chosen so that module order is not PCI
order (0000:4d:00.0 is AIP 7), which is what the reader must get right.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from numapin.facts import synthetic as machines
from numapin.facts.glance import no_worker
from numapin.facts.inventory import Inventory, Vendor, read_gpus, resolve_visible
from numapin.facts.machine import gather
from numapin.facts.topology import read_topology
from numapin.placement.modes import resolve
from sysfs import add_function

HL_SMI_BUSES = ["0000:33:00.0", "0000:34:00.0", "0000:4e:00.0", "0000:9a:00.0",
                "0000:9b:00.0", "0000:b3:00.0", "0000:b4:00.0", "0000:4d:00.0"]


def write_gaudi_host(dest: Path, *, module_ids: bool = True) -> Path:
    spec = machines.MachineSpec("gaudi-test", sockets=2, cores_per_socket=40, threads_per_core=2)
    root = machines.write(spec, dest)
    for aip, bdf in enumerate(HL_SMI_BUSES):
        node = 0 if int(bdf[5:7], 16) < 0x80 else 1
        above = f"{int(bdf[5:7], 16) - 1:02x}"  # its root port's bus
        files = {"vendor": "0x1da3", "device": "0x1020", "class": "0x120000", "numa_node": str(node),
                 "local_cpulist": str(spec.node_cpus(node))}
        if module_ids:
            files["module_id"] = str(aip)
        device = add_function(root, bdf, files, "habanalabs", parent=f"sys/devices/pci0000:{above}/0000:{above}:01.0")
        accel = root / f"sys/devices/virtual/accel/accel{aip}"  # the accel class device, its parent the function
        accel.mkdir(parents=True)
        (accel / "device").symlink_to(os.path.relpath(device, accel))
        (root / "sys/class/accel").mkdir(parents=True, exist_ok=True)
        (root / f"sys/class/accel/accel{aip}").symlink_to(os.path.relpath(accel, root / "sys/class/accel"))
    return root


@pytest.fixture(scope="module")
def gaudi_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_gaudi_host(tmp_path_factory.mktemp("gaudi") / "root")


@pytest.fixture(scope="module")
def gaudis(gaudi_root: Path) -> Inventory:
    return read_gpus(read_topology(gaudi_root), nvml=False)


def test_gaudis_are_found_in_module_order_with_their_node_and_device_file(gaudis: Inventory) -> None:
    assert [g.ordinal for g in gaudis.gpus] == list(range(8))
    assert [g.pci for g in gaudis.gpus] == HL_SMI_BUSES  # module order, not PCI order
    assert [g.node for g in gaudis.gpus] == [0, 0, 0, 1, 1, 1, 1, 0]
    assert [g.devices for g in gaudis.gpus] == [(f"/dev/accel/accel{m}",) for m in range(8)]
    assert {(g.vendor, g.model) for g in gaudis.gpus} == {(Vendor.GAUDI, "Intel Gaudi 2")}
    assert gaudis.warnings == ()


GAUDI_CASES: list[tuple[str, dict[str, str], list[int], str | None]] = [
    ("unset: local rank i takes module i", {}, list(range(8)), None),
    ("a module list", {"HABANA_VISIBLE_MODULES": "4,5,6,7"}, [4, 5, 6, 7], None),
    ("reordered, spaces", {"HABANA_VISIBLE_MODULES": " 7 , 0 "}, [7, 0], None),
    ("a repeat ends the list", {"HABANA_VISIBLE_MODULES": "1,1,2"}, [1], "already listed"),
    ("no such module", {"HABANA_VISIBLE_MODULES": "2,9"}, [2], "'9' names no module"),
    ("not a number", {"HABANA_VISIBLE_MODULES": "x"}, [], "'x'"),
    ("empty", {"HABANA_VISIBLE_MODULES": ""}, [], "empty"),
    ("one module", {"HLS_MODULE_ID": "5"}, [5], None),
    ("the one module before the list", {"HLS_MODULE_ID": "3", "HABANA_VISIBLE_MODULES": "0,1"}, [3], None),
]


@pytest.mark.parametrize(("label", "env", "modules", "note"), GAUDI_CASES, ids=[c[0] for c in GAUDI_CASES])
def test_the_modules_a_process_takes(label: str, env: dict[str, str], modules: list[int], note: str | None,
                                     gaudis: Inventory) -> None:
    resolved = resolve_visible(gaudis, env)
    assert resolved.vendor is Vendor.GAUDI
    assert [v.gpu.ordinal for v in resolved.visible] == modules
    assert [v.label for v in resolved.visible] == [f"hpu:{i}" for i in range(len(modules))]
    assert (resolved.cut is None) == (note is None)
    if note is not None:
        assert resolved.cut is not None and note in resolved.cut


def test_a_local_rank_takes_its_module_of_the_list(gaudi_root: Path) -> None:
    env = {"HABANA_VISIBLE_MODULES": "4,5,6,7", "LOCAL_RANK": "3"}
    facts = gather(gaudi_root, env)
    placement = resolve(facts, env)
    assert (placement.pci, placement.node) == ("0000:4d:00.0", 0)  # module 7, on node 0 though last in the list
    assert placement.cpus == facts.topology.node(0).cpus


def test_without_module_ids_numapin_says_so_and_matches_no_module(tmp_path: Path) -> None:
    inventory = read_gpus(read_topology(write_gaudi_host(tmp_path / "root", module_ids=False)), nvml=False)
    assert [g.pci for g in inventory.gpus] == sorted(HL_SMI_BUSES) and all(g.ordinal is None for g in inventory.gpus)
    assert any("no module_id" in w for w in inventory.warnings)
    unset = resolve_visible(inventory, {})
    assert len(unset.visible) == 8  # each is still placed by its own node: PCI order, said to be no module order
    listed = resolve_visible(inventory, {"HABANA_VISIBLE_MODULES": "0"})
    assert listed.visible == () and listed.cut is not None and "show none in sysfs" in listed.cut


def test_the_start_up_glance_leaves_module_lists_to_the_full_reading(gaudi_root: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NUMAPIN_FSROOT", str(gaudi_root))
    assert no_worker({}) == "not a worker: no local rank and 8 GPUs visible"
    assert no_worker({"HABANA_VISIBLE_MODULES": "0,1"}) is None
    assert no_worker({"HLS_MODULE_ID": "2"}) is None


def test_a_gaudi_beside_nvidia_gpus_is_chosen_by_habanas_variables(tmp_path: Path) -> None:
    root = machines.write("dgx-h100", tmp_path / "root")
    add_function(root, "0000:f1:00.0", {"vendor": "0x1da3", "device": "0x1020", "class": "0x120000",
                                        "numa_node": "1", "module_id": "0"}, "habanalabs")
    inventory = read_gpus(read_topology(root), nvml=False)
    assert resolve_visible(inventory, {}).vendor is Vendor.NVIDIA  # 8 GPUs against 1 Gaudi
    chosen = resolve_visible(inventory, {"HLS_MODULE_ID": "0"})
    assert chosen.vendor is Vendor.GAUDI and [v.gpu.pci for v in chosen.visible] == ["0000:f1:00.0"]
    assert resolve_visible(inventory, {"NUMAPIN_ACCELERATOR": "gaudi"}).vendor is Vendor.GAUDI
