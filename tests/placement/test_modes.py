from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from conftest import Snapshots
from numapin.base.errors import UsageError
from numapin.cpuset import CpuSet
from numapin.facts import synthetic as machines
from numapin.facts.inventory import VisibleGpu
from numapin.facts.machine import gather
from numapin.facts.topology import read_topology
from numapin.placement.modes import Placement, PlacementMode, place, resolve
from numapin.placement.plan import plan, plan_ranks

GOLDEN = Path(__file__).parent / "golden" / "placement.json"
MODES = [m.value for m in PlacementMode if m is not PlacementMode.EXPLICIT]
SYNTHETIC = ["dgx-h100", "gb300", "epyc-nps4"]
# Multi-node captures; all but the POWER9 one carry no GPU, so the tests add one per CPU node.
SNAPSHOTS = ["nvidiagpunumanodes", "16amd64-8n2c", "64amd64-4s2n4ca2co", "fakecpuid1f-64intel64-2p4d2n2c2t",
             "32intel64-2p8co2t+8ve", "8ia64-2n2s2c"]


def _add_gpus(root: Path) -> None:
    """One NVIDIA 3D controller per CPU node, as the kernel would show it."""
    topo = read_topology(root)
    for n, node in enumerate(topo.cpu_nodes):
        device = root / "sys/bus/pci/devices" / f"0000:{0x20 + n:02x}:00.0"
        device.mkdir(parents=True, exist_ok=True)
        for name, text in {"vendor": "0x10de", "class": "0x030200", "numa_node": str(node.id),
                           "local_cpulist": str(node.cpus)}.items():
            (device / name).write_text(text + "\n")


@pytest.fixture(scope="module")
def roots(scratch: Callable[[str], Path]) -> dict[str, Path]:
    # A separate unpacking: the GPUs added here must not reach other tests.
    own = Snapshots(scratch("placement-snapshots"))
    found = {}
    for name in SNAPSHOTS:
        root = own.root(name)
        if name != "nvidiagpunumanodes":
            _add_gpus(root)
        found[name] = root
    for name in SYNTHETIC:
        found[name] = machines.write(name, scratch(name) / "root")
    return found


def _table(root: Path, mode: str) -> list[Placement]:
    return list(plan_ranks(mode=mode, root=root, environ={}))


def test_golden_tables(roots: dict[str, Path]) -> None:
    tables = {f"{name}/{mode}": [[p.gpu, str(p.cpus), str(p.mems)] for p in _table(root, mode)]
              for name, root in roots.items() for mode in MODES}
    if os.environ.get("NUMAPIN_REGEN_GOLDEN"):
        GOLDEN.write_text(json.dumps(tables, indent=1, sort_keys=True) + "\n")
    assert tables == json.loads(GOLDEN.read_text())


def test_golden_spot_checks(roots: dict[str, Path]) -> None:
    # A few entries worked out by hand from the machines' shapes.
    dgx = {m: _table(roots["dgx-h100"], m) for m in MODES}
    assert str(dgx["node"][5].cpus) == "56-111,168-223"
    assert str(dgx["exclusive"][0].cpus) == "0-13,112-125"
    assert str(dgx["exclusive"][7].cpus) == "98-111,210-223"
    assert str(dgx["single"][4].cpus) == "56,168"
    epyc = {m: _table(roots["epyc-nps4"], m) for m in MODES}
    assert str(epyc["socket"][3].cpus) == "0-63,128-191"
    assert str(epyc["core-complex"][1].cpus) == "16-23,144-151"
    gb = {m: _table(roots["gb300"], m) for m in MODES}
    assert str(gb["exclusive"][1].cpus) == "36-71" and str(gb["exclusive"][1].mems) == "0"
    assert str(gb["node"][2].mems) == "1", "GPU memory nodes are not host memory nodes"


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", SYNTHETIC + SNAPSHOTS)
def test_placement_properties(name: str, mode: str, roots: dict[str, Path]) -> None:
    facts = gather(roots[name], {})
    topo = facts.topology
    table = [resolve(facts, {}, gpu=v.index, mode=PlacementMode(mode)) for v in facts.visible]
    assert table == [resolve(facts, {}, gpu=v.index, mode=PlacementMode(mode)) for v in facts.visible], "deterministic"
    assert len(table) == len(facts.visible) > 0
    for p in table:
        assert p.cpus and p.cpus <= topo.allowed
        assert p.mems == topo.nodes_of(p.cpus) & topo.allowed_mems
        assert not any(topo.node(m).memory_only for m in p.mems)
        if mode in ("node", "exclusive", "core-complex", "single"):
            gpu = facts.inventory.by_pci(p.pci or "")
            assert gpu is not None and gpu.node is not None and p.cpus <= topo.node(gpu.node).cpus
    # Where the mode promises it, shares are disjoint.
    per_node: dict[int | None, list[Placement]] = {}
    for p in table:
        per_node.setdefault(p.node, []).append(p)
    for node, shares in per_node.items():
        cores = topo.cores_within(topo.node(node).cpus & topo.allowed) if node is not None else ()
        groups = topo.caches_within(topo.node(node).cpus) if node is not None else ()
        disjoint = mode == "exclusive" or (mode == "single" and len(cores) >= len(shares)) or (
            mode == "core-complex" and len(groups) >= len(shares))
        if disjoint:
            for i, a in enumerate(shares):
                for b in shares[i + 1:]:
                    assert a.cpus.isdisjoint(b.cpus), f"{a.cpus} and {b.cpus} overlap"
    if mode == "exclusive":
        for p in table:
            for core in topo.cores:
                inside = core.cpus & p.cpus
                assert not inside or inside == core.cpus & topo.allowed, "SMT siblings never split"


def test_plan_ignores_the_current_mask(tmp_path: Path) -> None:
    # After a pin the process mask is narrow; planning again must give the same answer.
    root = machines.write("dgx-h100", tmp_path / "root")
    before = _table(root, "exclusive")
    status = root / "proc/self/status"
    status.write_text(status.read_text().replace("Cpus_allowed_list:\t0-223", "Cpus_allowed_list:\t0-13,112-125"))
    assert read_topology(root).process == CpuSet("0-13,112-125")
    assert _table(root, "exclusive") == before


def test_exclusive_gives_leftover_cores_to_the_lowest_ranks(tmp_path: Path) -> None:
    spec = machines.MachineSpec("three", sockets=1, cores_per_socket=10, threads_per_core=2, gpus_per_node=3)
    root = machines.write(spec, tmp_path / "root")
    shares = [p.cpus for p in _table(root, "exclusive")]
    assert [len(s) // 2 for s in shares] == [4, 3, 3]
    assert [str(s) for s in shares] == ["0-3,10-13", "4-6,14-16", "7-9,17-19"]


def test_exclusive_inside_a_container_cpuset(tmp_path: Path) -> None:
    root = machines.write("dgx-h100", tmp_path / "root", cgroup_cpus=CpuSet("0-27,112-139"))
    table = plan_ranks(mode="exclusive", gpus=[0, 1, 2, 3], root=root, environ={})
    shares = [p.cpus for p in table]
    assert [str(s) for s in shares] == ["0-6,112-118", "7-13,119-125", "14-20,126-132", "21-27,133-139"]


def test_exclusive_gpus_sharing_a_node_are_split_whatever_cuda_shows(tmp_path: Path) -> None:
    # Each worker sees only its own GPU (Ray, Slurm): shares must still be disjoint.
    root = machines.write("dgx-h100", tmp_path / "root")
    one = plan(0, mode="exclusive", root=root, environ={"CUDA_VISIBLE_DEVICES": "1"})
    two = plan(0, mode="exclusive", root=root, environ={"CUDA_VISIBLE_DEVICES": "2"})
    assert isinstance(one, Placement) and isinstance(two, Placement)
    assert one.cpus.isdisjoint(two.cpus) and one.pci == "0000:28:00.0"


def test_reserve_sets_whole_cores_aside(tmp_path: Path) -> None:
    root = machines.write("dgx-h100", tmp_path / "root")
    p = plan(0, mode="exclusive", reserve=2, root=root, environ={})
    assert isinstance(p, Placement)
    assert p.reserved == CpuSet("12-13,124-125")
    assert p.workers == CpuSet("0-11,112-123") and p.reserved <= p.cpus
    assert p.as_dict()["reserved"] == "12-13,124-125"


def test_explicit_cpus(tmp_path: Path) -> None:
    root = machines.write("epyc-nps4", tmp_path / "root")
    p = plan(cpus="0-3,16", root=root, environ={})
    assert isinstance(p, Placement) and p.cpus == CpuSet("0-3,16") and p.mems == CpuSet("0-1")
    assert p.mode == "explicit"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [({"mode": "numa"}, "unknown mode 'numa'"),
     ({"gpu": 0, "reserve": 112}, "leaves no core"),
     ({"gpu": 0, "reserve": -1}, "non-negative"),
     ({"cpus": "0-300"}, "outside the allowed CPUs"),
     ({"cpus": "0-3,x"}, "bad CPU list"),
     ({"gpu": 8}, "not visible")],
)
def test_bad_input_is_a_clear_error(kwargs: dict[str, object], message: str, tmp_path: Path) -> None:
    root = machines.write("dgx-h100", tmp_path / "root")
    with pytest.raises(UsageError, match=message):
        plan(root=root, environ={}, **kwargs)  # type: ignore[arg-type]


def test_exclusive_with_more_gpus_than_cores(tmp_path: Path) -> None:
    spec = machines.MachineSpec("crowded", sockets=1, cores_per_socket=2, gpus_per_node=4)
    root = machines.write(spec, tmp_path / "root")
    with pytest.raises(UsageError, match="2 allowed cores for 4 GPUs"):
        plan_ranks(mode="exclusive", root=root, environ={})
    # single still works: cores are shared when there are not enough.
    assert [str(p.cpus) for p in _table(root, "single")] == ["0", "1", "0", "1"]


def test_gpu_whose_node_is_outside_the_cgroup(tmp_path: Path) -> None:
    from numapin.placement.modes import PlacementError

    root = machines.write("dgx-h100", tmp_path / "root", cgroup_cpus=CpuSet("56-111"))
    with pytest.raises(PlacementError, match="no CPU inside the allowed CPUs"):
        plan(0, root=root, environ={})


def test_place_needs_a_gpu_or_cpus(machine_root: Callable[[str], Path]) -> None:
    facts = gather(machine_root("laptop"), {})
    with pytest.raises(UsageError):
        place(facts.topology, facts.inventory, None)
    assert isinstance(facts.visible[0], VisibleGpu)
    with pytest.raises(UsageError, match="a GPU and a mode"):  # "explicit" names cpus=, it is no policy
        place(facts.topology, facts.inventory, facts.visible[0], mode=PlacementMode.EXPLICIT)
    with pytest.raises(UsageError, match="unknown mode"):  # text is parsed at the edge (plan, pin, exec), once
        plan(mode="explicit-ish", root=machine_root("laptop"), environ={})


def test_every_mode_has_a_policy(machine_root: Callable[[str], Path]) -> None:
    # A PlacementMode added without its policy would raise instead of acting as another mode.
    facts = gather(machine_root("epyc-nps4"), {})
    made = {m: place(facts.topology, facts.inventory, facts.visible[0], mode=m).mode
            for m in PlacementMode if m is not PlacementMode.EXPLICIT}
    assert made == {m: m for m in PlacementMode if m is not PlacementMode.EXPLICIT}


def test_plan_ranks_follow_the_rank_map(machine_root: Callable[[str], Path]) -> None:
    root = machine_root("dgx-h100")
    table = plan_ranks(root=root, environ={"NUMAPIN_RANK_MAP": "7,0,3"})
    assert [(p.rank, p.gpu) for p in table] == [(0, 7), (1, 0), (2, 3)]
    assert plan(root=root, environ={"NUMAPIN_RANK_MAP": "7,0,3", "LOCAL_RANK": "2"}).gpu == 3
    with pytest.raises(UsageError, match="NUMAPIN_RANK_MAP"):
        plan_ranks(root=root, environ={"NUMAPIN_RANK_MAP": "7,9"})
