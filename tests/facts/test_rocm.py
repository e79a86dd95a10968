"""AMD GPUs: found from sysfs and the KFD topology, against RCCL's published capture of a real MI300X host; ROCm's
visibility variables as tables of ROCm's documented rules and code; partitions; hosts with two vendors' GPUs."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from numapin.base.errors import UsageError
from numapin.cpuset import CpuSet
from numapin.facts import synthetic as machines
from numapin.facts.glance import _rocm_visible, no_worker
from numapin.facts.inventory import Inventory, Vendor, read_gpus, resolve_visible
from numapin.facts.network import Relation, read_network
from numapin.facts.topology import read_topology
from numapin.placement.modes import PlacementMode, place
from sysfs import add_function

#: ROCm/rccl tools/topo_expl/models/topo_8p_940.xml (commit 1a48e19b), row for row: HIP device, GPU bus id,
#: NUMA node (the <cpu numaid> it hangs under), and the NIC under the same PCIe switch with its bus id.
RCCL_TOPO_8P_940 = [
    (0, "0000:0c:00.0", 0, "mlx5_0", "0000:07:00.0"),
    (1, "0000:15:00.0", 0, "mlx5_1", "0000:10:00.0"),
    (2, "0000:1e:00.0", 0, "mlx5_2", "0000:19:00.0"),
    (3, "0000:69:00.0", 0, "mlx5_3", "0000:64:00.0"),
    (4, "0000:9f:00.0", 1, "mlx5_4", "0000:9a:00.0"),
    (5, "0000:af:00.0", 1, "mlx5_5", "0000:aa:00.0"),
    (6, "0000:bf:00.0", 1, "mlx5_6", "0000:ba:00.0"),
    (7, "0000:df:00.0", 1, "mlx5_7", "0000:da:00.0"),
]
#: The same capture's CPU affinity masks of its two <cpu> elements.
RCCL_NODE_MASKS = ["00000000,000000ff,ffffffff,ffff0000,00000000,00ffffff,ffffffff",
                   "ffffffff,ffffff00,00000000,0000ffff,ffffffff,ff000000,00000000"]


@pytest.fixture(scope="module")
def mi300x(tmp_path_factory: pytest.TempPathFactory) -> Inventory:
    return read_gpus(read_topology(machines.write("mi300x", tmp_path_factory.mktemp("mi") / "root")), nvml=False)


def _uuid(gpu: int, partition: int = 0) -> str:
    return f"GPU-{machines.amd_unique_id(gpu, partition):016x}"


# -- the published host, row for row -----------------------------------------------------------------------


@pytest.mark.parametrize("name", ["mi300x", "mi300x-cpx"])
def test_each_gpu_node_and_nic_equal_rccls_capture(name: str, machine_root: Callable[[str], Path]) -> None:
    topology = read_topology(machine_root(name))
    inventory = read_gpus(topology, nvml=False)
    partitions = machines.SHAPES[name].partitions
    assert [n.cpus for n in topology.cpu_nodes] == [CpuSet.parse_mask(m) for m in RCCL_NODE_MASKS]
    network = read_network(topology, inventory.gpus)
    rows = []
    for number, gpu in enumerate(inventory.gpus):
        assert gpu.vendor is Vendor.AMD and gpu.model == "AMD Instinct MI300X"
        (nearest,) = network.nearest(gpu.pci)
        rows.append((number // partitions, gpu.pci, gpu.node, nearest.name, nearest.pci))
        assert network.relation_of(gpu.pci, nearest.name) is Relation.PXB  # two switches and AMD's bridge
        assert gpu.cpus == topology.node(gpu.node or 0).cpus
    assert rows == [row for row in RCCL_TOPO_8P_940 for _ in range(partitions)]


def test_partitions_are_their_packages_in_rocms_order(machine_root: Callable[[str], Path]) -> None:
    inventory = read_gpus(read_topology(machine_root("mi300x-cpx")), nvml=False)
    assert len(inventory.gpus) == 64  # AMD: 8 logical GPUs per package in CPX, 64 on an 8-GPU host
    assert [(g.pci, g.partition) for g in inventory.gpus[6:10]] == [
        ("0000:0c:00.0", 6), ("0000:0c:00.0", 7), ("0000:15:00.0", 0), ("0000:15:00.0", 1)]
    assert len({g.devices for g in inventory.gpus}) == 64 and len({g.uuid for g in inventory.gpus}) == 64


def test_exclusive_shares_split_a_node_among_all_its_partitions(machine_root: Callable[[str], Path]) -> None:
    topology = read_topology(machine_root("mi300x-cpx"))
    inventory = read_gpus(topology, nvml=False)
    visible = resolve_visible(inventory, {}).visible
    placements = [place(topology, inventory, v, mode=PlacementMode.EXCLUSIVE) for v in visible]
    for node in (0, 1):
        shares = [p.cpus for p in placements if p.node == node]
        assert len(shares) == 32
        assert CpuSet.union(shares) == topology.node(node).cpus  # 56 cores over 32 partitions: 1 or 2 each
        assert sum(len(s) for s in shares) == len(topology.node(node).cpus)  # disjoint
    assert placements[9].partition == 1 and placements[9].pci == "0000:15:00.0"
    assert "partition 1" in placements[9].reason


# -- ROCR_VISIBLE_DEVICES, then HIP's list -------------------------------------------------------------------

ROCM_CASES: list[tuple[str, dict[str, str], list[int], str | None]] = [
    # label, environment, the physical GPUs shown (ROCm's order), a word of the note when a list ends early
    ("unset", {}, list(range(8)), None),
    ("rocr empty shows none", {"ROCR_VISIBLE_DEVICES": ""}, [], "empty"),
    ("rocr list", {"ROCR_VISIBLE_DEVICES": "4,5,6"}, [4, 5, 6], None),
    ("rocr spaces trimmed", {"ROCR_VISIBLE_DEVICES": " 2 , 1 "}, [2, 1], None),
    ("rocr repeat ends the list", {"ROCR_VISIBLE_DEVICES": "1,2,1,3"}, [1, 2], "already listed"),
    ("rocr strtol bases", {"ROCR_VISIBLE_DEVICES": "0x2,07,+1"}, [2, 7, 1], None),
    ("rocr octal 08 is invalid", {"ROCR_VISIBLE_DEVICES": "3,08"}, [3], "'08'"),
    ("rocr negative", {"ROCR_VISIBLE_DEVICES": "-1,0"}, [], "'-1'"),
    ("rocr GPU-XX ends", {"ROCR_VISIBLE_DEVICES": "3,GPU-XX,1"}, [3], "GPU-XX"),
    ("rocr full uuid, any case", {"ROCR_VISIBLE_DEVICES": f"{_uuid(5)},{_uuid(2).upper()}"}, [5, 2], None),
    ("rocr unique uuid prefix", {"ROCR_VISIBLE_DEVICES": _uuid(6)[:18]}, [6], None),
    ("rocr ambiguous uuid prefix ends", {"ROCR_VISIBLE_DEVICES": "1,GPU-2F6C"}, [1], "several"),
    ("rocr uuid too short", {"ROCR_VISIBLE_DEVICES": "GPU"}, [], "'GPU'"),
    ("rocr reads as many entries as GPUs", {"ROCR_VISIBLE_DEVICES": "0,1,2,3,4,5,6,7,8"}, list(range(8)), None),
    ("rocr empty entry ends", {"ROCR_VISIBLE_DEVICES": "1,,2"}, [1], "empty"),
    ("rocr last comma", {"ROCR_VISIBLE_DEVICES": "0,1,"}, [0, 1], None),
    ("hip over rocr (ROCm's example)", {"ROCR_VISIBLE_DEVICES": "4,5,6", "HIP_VISIBLE_DEVICES": "1"}, [5], None),
    ("hip reorders rocr's", {"ROCR_VISIBLE_DEVICES": "6,7", "HIP_VISIBLE_DEVICES": "1,0"}, [7, 6], None),
    ("hip skips a repeat", {"HIP_VISIBLE_DEVICES": "1,1,2"}, [1, 2], None),
    ("hip plain decimals only", {"HIP_VISIBLE_DEVICES": "3,01"}, [3], "'01'"),
    ("hip no spaces", {"HIP_VISIBLE_DEVICES": " 1"}, [], "' 1'"),
    ("hip index past rocr's", {"ROCR_VISIBLE_DEVICES": "0,1", "HIP_VISIBLE_DEVICES": "1,2"}, [1], "'2'"),
    ("hip last comma", {"HIP_VISIBLE_DEVICES": "0,1,"}, [0, 1], None),
    ("hip a number past int's reach", {"HIP_VISIBLE_DEVICES": "2," + "9" * 4400}, [2], "names none"),
    ("rocr a number past int's reach", {"ROCR_VISIBLE_DEVICES": "2," + "9" * 4400}, [2], "names no GPU"),
    ("cuda when hip is empty", {"HIP_VISIBLE_DEVICES": "", "CUDA_VISIBLE_DEVICES": "3"}, [3], None),
    ("hip before cuda", {"HIP_VISIBLE_DEVICES": "2", "CUDA_VISIBLE_DEVICES": "3"}, [2], None),
    ("cuda read as hip reads it", {"CUDA_VISIBLE_DEVICES": "3,3,4"}, [3, 4], None),
    ("hip uuid substring", {"HIP_VISIBLE_DEVICES": _uuid(3)[:18]}, [3], None),
    ("hip uuid is case-sensitive", {"HIP_VISIBLE_DEVICES": _uuid(3).upper()}, [], "GPU-"),
    ("hip ambiguous uuid takes the first", {"HIP_VISIBLE_DEVICES": "GPU-2f6c"}, [0], None),
    ("rocr hides all, hip has none left", {"ROCR_VISIBLE_DEVICES": "", "HIP_VISIBLE_DEVICES": "0"}, [], "empty"),
]


@pytest.mark.parametrize(("label", "env", "physical", "note"), ROCM_CASES, ids=[c[0] for c in ROCM_CASES])
def test_rocm_visibility(label: str, env: dict[str, str], physical: list[int], note: str | None,
                         mi300x: Inventory) -> None:
    resolved = resolve_visible(mi300x, env)
    assert resolved.vendor is Vendor.AMD
    assert [v.index for v in resolved.visible] == list(range(len(physical)))
    assert [v.gpu.pci for v in resolved.visible] == [mi300x.gpus[p].pci for p in physical]
    assert all(v.label == f"hip:{v.index}" for v in resolved.visible)
    if note is None:
        assert resolved.cut is None and not resolved.notes
    else:
        assert resolved.cut is not None and note in resolved.cut
        variable = "ROCR_VISIBLE_DEVICES" if label.startswith("rocr") else "HIP_VISIBLE_DEVICES"
        assert variable in resolved.cut


_ENTRIES = st.sampled_from(["0", "1", "3", "7", "8", "01", "0x1", "+2", "-1", " 2", "", "x", "GPU-2f6c",
                            _uuid(4), _uuid(4)[:12], "GPU-XX", "\u00b2"])
_LISTS = st.none() | st.lists(_ENTRIES, max_size=5).map(",".join)


@settings(max_examples=400, deadline=None)
@given(rocr=_LISTS, hip=_LISTS, cuda=_LISTS)
def test_any_rocm_variables_resolve_to_distinct_gpus_and_the_glance_agrees(
        rocr: str | None, hip: str | None, cuda: str | None, mi300x: Inventory) -> None:
    env = {name: value for name, value in (("ROCR_VISIBLE_DEVICES", rocr), ("HIP_VISIBLE_DEVICES", hip),
                                           ("CUDA_VISIBLE_DEVICES", cuda)) if value is not None}
    visible = resolve_visible(mi300x, env).visible
    assert len({v.gpu for v in visible}) == len(visible) <= 8
    glanced = _rocm_visible(env, len(mi300x.gpus))
    assert glanced is None or glanced == len(visible)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rocr=_LISTS, hip=_LISTS)
def test_the_start_up_glance_never_calls_an_amd_worker_none(rocr: str | None, hip: str | None,
                                                             machine_root: Callable[[str], Path],
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    root = machine_root("mi300x")
    monkeypatch.setenv("NUMAPIN_FSROOT", str(root))
    env = {name: value for name, value in (("ROCR_VISIBLE_DEVICES", rocr), ("HIP_VISIBLE_DEVICES", hip))
           if value is not None}
    visible = resolve_visible(read_gpus(read_topology(root), nvml=False), env).visible
    if no_worker(env) is not None:
        assert len(visible) != 1


# -- what sysfs may lack ------------------------------------------------------------------------------------


def _amd_function(root: Path, bdf: str, node: int, cls: str = "0x120000", vendor: str = "0x1002") -> None:
    add_function(root, bdf, {"vendor": vendor, "device": "0x74a1", "class": cls, "numa_node": str(node)},
                 {"0x1002": "amdgpu", "0x10de": "nvidia"}.get(vendor))  # the driver of its maker, if any


def test_without_a_kfd_topology_the_pci_order_stands_in(tmp_path: Path) -> None:
    root = machines.write("pair", tmp_path / "root")
    for bdf, node in (("0000:f3:00.0", 1), ("0000:f2:00.0", 0)):
        _amd_function(root, bdf, node)
    inventory = read_gpus(read_topology(root), nvml=False)
    amd = inventory.of(Vendor.AMD)
    assert [(g.pci, g.node, g.uuid) for g in amd] == [("0000:f2:00.0", 0, None), ("0000:f3:00.0", 1, None)]
    assert any("no KFD topology" in w for w in inventory.warnings)


def test_a_kfd_node_sysfs_does_not_show_keeps_its_place_with_no_node(tmp_path: Path) -> None:
    root = machines.write("mi300x", tmp_path / "root")
    props = root / "sys/devices/virtual/kfd/kfd/topology/nodes/4/properties"  # GPU 2, at 1e:00.0
    props.write_text(props.read_text().replace(f"location_id {0x1E << 8}", f"location_id {0x33 << 8}")
                     .replace(f"unique_id {machines.amd_unique_id(2)}", "unique_id 18446744073709551615"))
    inventory = read_gpus(read_topology(root), nvml=False)
    third = inventory.gpus[2]
    assert (third.pci, third.node, third.uuid) == ("0000:33:00.0", None, "GPU-ffffffffffffffff")  # 20 digits read
    assert inventory.gpus[3].pci == "0000:69:00.0"  # the indices after it stay ROCm's
    assert any("KFD node 4" in w and "not show" in w for w in inventory.warnings)


# -- hosts with two vendors' GPUs -----------------------------------------------------------------------------


@pytest.mark.parametrize(("shape", "added", "env", "vendor", "count"), [
    ("mi300x", ("0x10de", "0x030000"), {}, Vendor.AMD, 8),  # an NVIDIA display card beside 8 MI300X
    ("dgx-h100", ("0x1002", "0x030000"), {}, Vendor.NVIDIA, 8),  # an AMD display GPU beside 8 H100
    ("dgx-h100", ("0x1002", "0x030000"), {"ROCR_VISIBLE_DEVICES": "0"}, Vendor.AMD, 1),  # ROCm's own variable
    ("mi300x", ("0x10de", "0x030000"), {"NUMAPIN_ACCELERATOR": "nvidia"}, Vendor.NVIDIA, 1),
    ("mi300x", ("0x1a03", "0x030000"), {}, Vendor.AMD, 8),  # a BMC's ASPEED VGA is no GPU
    ("laptop", ("0x1002", "0x120000"), {}, None, 0),  # one of each: numapin does not guess
    ("laptop", ("0x1002", "0x120000"), {"NUMAPIN_ACCELERATOR": "AMD "}, Vendor.AMD, 1),
])
def test_a_host_with_two_vendors_gives_each_rank_one_vendors_gpu(
        shape: str, added: tuple[str, str], env: dict[str, str], vendor: Vendor | None, count: int,
        tmp_path: Path) -> None:
    root = machines.write(shape, tmp_path / "root")
    _amd_function(root, "0000:f1:00.0", 0, cls=added[1], vendor=added[0])
    resolved = resolve_visible(read_gpus(read_topology(root), nvml=False), env)
    assert resolved.vendor is vendor and len(resolved.visible) == count
    assert all(v.gpu.vendor is vendor for v in resolved.visible)
    if vendor is None:
        assert resolved.cut is not None and "NUMAPIN_ACCELERATOR=nvidia or amd" in resolved.cut


def test_an_unknown_accelerator_name_is_a_usage_error(mi300x: Inventory) -> None:
    with pytest.raises(UsageError, match=r"NUMAPIN_ACCELERATOR='intel'.*nvidia, amd, gaudi"):
        resolve_visible(mi300x, {"NUMAPIN_ACCELERATOR": "intel"})


def test_a_partitions_placement_decided_again_in_a_smaller_cpuset_stays_that_partitions(
        machine_root: Callable[[str], Path]) -> None:
    # The keeper's re-placement (placement.modes.within) after the cgroup's cpuset shrank: same partition, a
    # share of what is still allowed, still apart from its sibling partitions' shares.
    from numapin.base.frozen import replace
    from numapin.placement.modes import within

    topology = read_topology(machine_root("mi300x-cpx"))
    inventory = read_gpus(topology, nvml=False)
    visible = resolve_visible(inventory, {}).visible
    first = [place(topology, inventory, visible[i], mode=PlacementMode.EXCLUSIVE) for i in (13, 14)]
    smaller = replace(topology, allowed=topology.allowed - CpuSet(range(0, 8)) - CpuSet(range(112, 120)))
    again = [within(p, smaller, inventory) for p in first]
    assert [(p.pci, p.partition) for p in again] == [("0000:15:00.0", 5), ("0000:15:00.0", 6)]
    assert all(p.cpus <= smaller.allowed for p in again) and not again[0].cpus & again[1].cpus
    assert again[0].cpus != first[0].cpus  # the shares were cut again from what is left
