from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import numapin
from conftest import Snapshots, in_child, use_root
from numapin.base.environment import LOCAL_RANK_VARIABLES
from numapin.base.errors import UsageError
from numapin.cpuset import CpuSet
from numapin.facts.gpu import Vendor
from numapin.facts.inventory import (
    Inventory,
    NoGpuVisible,
    UnknownGpu,
    read_gpus,
    resolve_visible,
    select_gpu,
)
from numapin.facts.nvidia import sysfs_gaps
from numapin.facts.synthetic import SHAPES
from numapin.facts.topology import read_topology
from numapin.placement.ranks import gpu_for_rank, local_rank

# -- inventory --------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_every_synthetic_gpu_is_found_on_its_node(name: str, machine_root: Callable[[str], Path]) -> None:
    spec = SHAPES[name]
    topo = read_topology(machine_root(name))
    inv = read_gpus(topo, nvml=False)
    assert len(inv.gpus) == spec.gpus * spec.partitions
    for number, gpu in enumerate(inv.gpus):
        node = number // spec.partitions // spec.gpus_per_node
        assert gpu.node == node
        assert gpu.cpus == topo.node(node).cpus
        assert gpu.memory_nodes == CpuSet([node])
        assert gpu.model == spec.gpu_model
        assert gpu.vendor == spec.gpu_vendor
        assert gpu.uuid is not None and gpu.uuid.startswith("GPU-")
        # Each GPU's own device file: CUDA's /dev/nvidiaN by its minor, or the render node amdgpu made for it.
        assert gpu.devices == ((f"/dev/nvidia{number}",) if spec.gpu_vendor == "nvidia" else
                               (f"/dev/dri/renderD{128 + number}",))
        assert gpu.partition == (number % spec.partitions if spec.partitions > 1 else None)
        # GPU-memory nodes are CPU-less, and never the GPU's CPU node.
        if spec.gpu_memory_nodes:
            (mem,) = gpu.gpu_memory_nodes
            assert topo.node(mem).memory_only and mem not in gpu.memory_nodes
        else:
            assert not gpu.gpu_memory_nodes
    assert [g.pci for g in inv.gpus] == sorted(g.pci for g in inv.gpus)  # ROCm's order is PCI order there too


def test_power9_gpus_and_their_memory_nodes(snapshots: Snapshots) -> None:
    topo = read_topology(snapshots.root("nvidiagpunumanodes"))
    inv = read_gpus(topo, nvml=False)
    # The capture has no `vendor` files: the driver's own entries tell these are NVIDIA's.
    assert [(g.pci, g.node, str(g.cpus), str(g.gpu_memory_nodes)) for g in inv.gpus] == [
        ("0004:05:00.0", 0, "0-15", "255"),
        ("0004:06:00.0", 0, "0-15", "254"),
        ("0006:00:00.0", 0, "0-15", "253"),
        ("0007:00:00.0", 8, "88-103", "252"),
        ("0035:04:00.0", 8, "88-103", "251"),
        ("0035:05:00.0", 8, "88-103", "250"),
    ]
    assert all(topo.node(n).memory_only for g in inv.gpus for n in g.gpu_memory_nodes)


@pytest.mark.parametrize("name", ["16amd64-8n2c", "40intel64-2g2n4c+pcilocality", "fakepcilocalities"])
def test_snapshots_without_nvidia_devices_have_no_gpus(name: str, snapshots: Snapshots) -> None:
    assert read_gpus(read_topology(snapshots.root(name)), nvml=False).gpus == ()


def test_unknown_numa_node_is_resolved_from_local_cpus(machine_root: Callable[[str], Path], tmp_path: Path) -> None:
    from numapin.facts import synthetic as machines

    root = machines.write("dgx-h100", tmp_path / "root")
    for device in (root / "sys/bus/pci/devices").iterdir():
        (device / "numa_node").write_text("-1\n")
        (device / "local_cpulist").unlink()  # only the hex mask is left
    inv = read_gpus(read_topology(root), nvml=False)
    assert [g.node for g in inv.gpus] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert inv.gpus[5].cpus == CpuSet("56-111,168-223")


# -- NVML through a stand-in ------------------------------------------------


class FakeNVML:
    """The NVML calls numapin uses, answering from a table keyed by PCI bus id."""

    NVML_AFFINITY_SCOPE_NODE = 0
    NVML_AFFINITY_SCOPE_SOCKET = 1

    def __init__(self, devices: dict[str, dict[str, Any]], *, fail_init: bool = False) -> None:
        self.devices = devices
        self.fail_init = fail_init
        self.calls: list[str] = []
        self.migs: dict[str, str] = {}

    def nvmlInit(self) -> None:
        self.calls.append("init")
        if self.fail_init:
            raise OSError("NVML Shared Library Not Found")

    def nvmlShutdown(self) -> None:
        self.calls.append("shutdown")

    def nvmlDeviceGetCount(self) -> int:
        return len(self.devices)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> str:
        return sorted(self.devices)[index]

    def nvmlDeviceGetHandleByPciBusId(self, bus: str) -> str:
        self.calls.append(f"bus {bus}")
        return bus

    def nvmlDeviceGetHandleByUUID(self, uuid: str) -> str:
        return uuid

    def nvmlDeviceGetDeviceHandleFromMigDeviceHandle(self, mig: str) -> str:
        return self.migs[mig]

    def nvmlDeviceGetPciInfo(self, handle: str) -> Any:
        class Info:
            busId = ("0000" + handle).encode()  # NVML spells the domain with 8 digits

        return Info()

    def nvmlDeviceGetCpuAffinityWithinScope(self, handle: str, words: int, scope: int) -> list[int]:
        assert scope == self.NVML_AFFINITY_SCOPE_NODE
        return CpuSet(self.devices[handle]["cpus"]).to_words(words)

    def nvmlDeviceGetMemoryAffinity(self, handle: str, words: int, scope: int) -> list[int]:
        return CpuSet(self.devices[handle]["mems"]).to_words(words)

    def nvmlDeviceGetName(self, handle: str) -> str:
        return "NVML name"

    def nvmlDeviceGetUUID(self, handle: str) -> bytes:
        return f"GPU-nvml-{handle}".encode()


def _dgx(machine_root: Callable[[str], Path]) -> Any:
    topo = read_topology(machine_root("dgx-h100"))
    table = {g.pci: {"cpus": str(g.cpus), "mems": str(g.memory_nodes)} for g in read_gpus(topo, nvml=False).gpus}
    return topo, table


def test_nvml_agreeing_with_sysfs(machine_root: Callable[[str], Path]) -> None:
    topo, table = _dgx(machine_root)
    fake = FakeNVML(table)
    inv = read_gpus(topo, nvml=fake)
    assert inv.nvml == "used"
    assert all(g.source == "sysfs+nvml" and g.disagreement is None for g in inv.gpus)
    # Handles come from bus ids, never from an index; the library is shut down again.
    assert [c for c in fake.calls if c.startswith("bus")] == [f"bus {g.pci}" for g in inv.gpus]
    assert fake.calls[0] == "init" and fake.calls[-1] == "shutdown"


def test_nvml_disagreement_is_reported(machine_root: Callable[[str], Path]) -> None:
    topo, table = _dgx(machine_root)
    table["0000:18:00.0"]["cpus"] = "56-111"
    inv = read_gpus(topo, nvml=FakeNVML(table))
    first = inv.gpus[0]
    assert first.disagreement is not None and "56-111" in first.disagreement
    assert first.cpus == CpuSet("0-55,112-167"), "sysfs stays the reference"
    assert any("disagree" in w for w in inv.warnings)


def test_show_reports_the_disagreement(machine_root: Callable[[str], Path]) -> None:
    from numapin.cli.show import _show_json, _show_text
    from numapin.facts.machine import gather

    topo, table = _dgx(machine_root)
    table["0000:28:00.0"]["cpus"] = "0-3"
    facts = gather(topo.root, {}, nvml=FakeNVML(table))
    assert "NVML and sysfs disagree: NVML cpus 0-3 vs sysfs 0-55,112-167" in _show_text(facts)
    assert _show_json(facts)["gpus"][1]["disagreement"] == "NVML cpus 0-3 vs sysfs 0-55,112-167"


def test_nvml_fills_in_when_sysfs_shows_nothing(tmp_path: Path) -> None:
    from numapin.facts import synthetic as machines

    root = machines.write("pair", tmp_path / "root")
    for gone in ("sys/bus", "proc/driver"):
        import shutil

        shutil.rmtree(root / gone)
    topo = read_topology(root)
    fake = FakeNVML({"0000:18:00.0": {"cpus": "0", "mems": "0"}, "0000:28:00.0": {"cpus": "1", "mems": "1"}})
    inv = read_gpus(topo, nvml=fake)
    assert [(g.pci, g.node, str(g.cpus), g.source) for g in inv.gpus] == [
        ("0000:18:00.0", 0, "0", "nvml"), ("0000:28:00.0", 1, "1", "nvml")]


def test_nvml_is_asked_only_what_sysfs_left_untold(machine_root: Callable[[str], Path], tmp_path: Path) -> None:
    import shutil

    from numapin.facts import synthetic as machines

    root = machine_root("dgx-h100")
    gpus = list(read_gpus(read_topology(root), nvml=False).gpus)
    assert sysfs_gaps(str(root), gpus) == []
    # A GPU whose driver entry gives no UUID (a capture that left the file out): NVML can tell it.
    (tmp_path / "dgx").mkdir()
    copy = Path(shutil.copytree(root, tmp_path / "dgx" / "root", symlinks=True))
    first = gpus[0].pci
    (copy / "proc/driver/nvidia/gpus" / first / "information").unlink()
    untold = list(read_gpus(read_topology(copy), nvml=False).gpus)
    assert sysfs_gaps(str(copy), untold) == [f"{first}: no UUID"]
    # A bare container: sysfs shows no GPU, the driver's entries show it loaded; without them, nothing to ask.
    bare = machines.write("pair", tmp_path / "bare")
    shutil.rmtree(bare / "sys/bus")
    assert sysfs_gaps(str(bare), []) == ["no GPU in sysfs, but the NVIDIA driver is loaded"]
    shutil.rmtree(bare / "proc/driver")
    assert sysfs_gaps(str(bare), []) == []


def test_a_reading_of_the_live_machine_loads_nvml_only_for_gaps_or_a_check(tmp_path: Path) -> None:
    # A stand-in for nvidia-ml-py, whose import alone costs a worker three interpreter starts: it notes its import
    # and refuses to start, as without a driver.
    (tmp_path / "pynvml.py").write_text(
        "class NVMLError(Exception):\n    pass\n"
        "def nvmlInit():\n    raise NVMLError('no driver here')\n")

    def child() -> tuple[list[str], bool, str, bool, str, str]:
        import contextlib
        import io
        import json
        import sys

        from numapin.cli import main

        sys.path.insert(0, str(tmp_path))
        topology = read_topology("/")
        gaps = sysfs_gaps("/", list(read_gpus(topology, nvml=False).of(Vendor.NVIDIA)))
        default = read_gpus(topology)
        loaded = "pynvml" in sys.modules
        checked = read_gpus(topology, nvml=True)
        shown = io.StringIO()
        with contextlib.redirect_stdout(shown):
            main(["show", "--json"])
        return gaps, loaded, default.nvml, "pynvml" in sys.modules, checked.nvml, json.loads(shown.getvalue())["nvml"]

    gaps, loaded, status, loaded_to_check, checked, show = in_child(child)
    # Where sysfs told everything (this host, and any whose GPUs the driver describes), a reading never loads it.
    assert loaded == bool(gaps)
    assert status == ("unavailable (no driver here)" if gaps else "not needed: sysfs told everything")
    # Asked to check (numapin show asks), it is loaded and started.
    assert loaded_to_check and checked == show == "unavailable (no driver here)"


def test_nvml_without_driver_is_silent(machine_root: Callable[[str], Path]) -> None:
    topo, table = _dgx(machine_root)
    inv = read_gpus(topo, nvml=FakeNVML(table, fail_init=True))
    assert inv.nvml.startswith("unavailable") and len(inv.gpus) == 8 and inv.warnings == ()


# -- CUDA_VISIBLE_DEVICES ------------------------------------------------------


@pytest.fixture(scope="module")
def dgx_inventory(tmp_path_factory: pytest.TempPathFactory) -> Inventory:
    from numapin.facts import synthetic as machines

    root = machines.write("dgx-h100", tmp_path_factory.mktemp("dgx") / "root")
    return read_gpus(read_topology(root), nvml=False)


def _uuid(inv: Inventory, n: int) -> str:
    uuid = inv.gpus[n].uuid
    assert uuid is not None
    return uuid


CASES: list[tuple[str, str | None, list[int]]] = [
    ("unset", None, [0, 1, 2, 3, 4, 5, 6, 7]),
    ("empty", "", []),
    ("reordered like Ray", "3,6,5,4,0,7,1,2", [3, 6, 5, 4, 0, 7, 1, 2]),
    ("spaces", " 2 , 1 ", [2, 1]),
    ("duplicate ends the list", "1,2,1,3", [1, 2]),
    ("invalid entry in the middle", "4,9,5", [4]),
    ("garbage in the middle", "0,abc,1", [0]),
    ("negative", "-1,0", []),
    ("full uuid", "UUID:7", [7]),
    ("unique uuid prefix", "PREFIX:6", [6]),
    ("unknown uuid ends the list", "5,GPU-ffffffff", [5]),
    ("legacy MIG naming its parent", "MIGGPU:3", [3]),
    ("a number past any GPU count", "2," + "9" * 4400, [2]),
    ("digits of another script", "1,\u00b2", [1]),
]


@given(value=st.text(alphabet=st.sampled_from("0123456789,- GPUMIG-abcdef\u00b2\u0663"), max_size=60))
def test_any_cuda_visible_devices_value_resolves_without_error(value: str, dgx_inventory: Inventory) -> None:
    # Whatever the value, CUDA's rules give a list of distinct GPUs, never an exception
    # (an ambiguous UUID prefix, a caller's error, aside).
    try:
        visible = resolve_visible(dgx_inventory, {"CUDA_VISIBLE_DEVICES": value}).visible
    except UnknownGpu as exc:
        assert "ambiguous" in str(exc) or "MIG" in str(exc)
        return
    assert len({v.gpu.pci for v in visible}) == len(visible) <= len(dgx_inventory.gpus)


@pytest.mark.parametrize(("label", "value", "physical"), CASES, ids=[c[0] for c in CASES])
def test_cuda_visible_devices(label: str, value: str | None, physical: list[int], dgx_inventory: Inventory) -> None:
    env = {}
    if value is not None:
        inv = dgx_inventory
        value = value.replace("UUID:7", _uuid(inv, 7)).replace("PREFIX:6", _uuid(inv, 6)[:13])
        value = value.replace("MIGGPU:3", "MIG-" + _uuid(inv, 3) + "/1/0")
        env["CUDA_VISIBLE_DEVICES"] = value
    resolved = resolve_visible(dgx_inventory, env)
    assert [v.index for v in resolved.visible] == list(range(len(physical)))
    assert [v.gpu.pci for v in resolved.visible] == [dgx_inventory.gpus[p].pci for p in physical]
    if label.endswith("ends the list") or "middle" in label:
        assert any("the list ends" in n for n in resolved.notes)


def test_ambiguous_uuid_prefix_is_a_clear_error(dgx_inventory: Inventory) -> None:
    # Every synthetic UUID of one machine shares its first 8 hex digits but the last four.
    prefix = _uuid(dgx_inventory, 0)[:8]
    with pytest.raises(UnknownGpu, match="ambiguous"):
        resolve_visible(dgx_inventory, {"CUDA_VISIBLE_DEVICES": prefix})


def test_mig_without_nvml_is_a_clear_error(dgx_inventory: Inventory) -> None:
    with pytest.raises(UnknownGpu, match="without NVML"):
        resolve_visible(dgx_inventory, {"CUDA_VISIBLE_DEVICES": "MIG-7f3c2a10-1111-2222-3333-444455556666"})


def test_mig_through_nvml_finds_the_parent(dgx_inventory: Inventory) -> None:
    fake = FakeNVML({})
    fake.migs["MIG-abc"] = "0000:48:00.0"
    resolved = resolve_visible(dgx_inventory, {"CUDA_VISIBLE_DEVICES": "MIG-abc"}, nvml=fake)
    assert [v.gpu.pci for v in resolved.visible] == ["0000:48:00.0"]


def test_nvml_failing_on_a_mig_device_is_the_environments_problem(dgx_inventory: Inventory) -> None:
    # The caller named a MIG device correctly; NVML broke: not a UsageError.
    from numapin.base.errors import EnvironmentProblem, UsageError
    from numapin.facts.inventory import NvmlError

    fake = FakeNVML({}, fail_init=True)
    with pytest.raises(NvmlError, match="NVML cannot name its parent GPU") as info:
        resolve_visible(dgx_inventory, {"CUDA_VISIBLE_DEVICES": "MIG-abc"}, nvml=fake)
    assert isinstance(info.value, EnvironmentProblem) and not isinstance(info.value, UsageError)


def test_device_order_and_mixed_models(dgx_inventory: Inventory) -> None:
    from numapin.base.frozen import replace

    mixed = Inventory((replace(dgx_inventory.gpus[0], model="other"), *dgx_inventory.gpus[1:]))
    assert any("FASTEST_FIRST" in n for n in resolve_visible(mixed, {}).notes)
    assert not resolve_visible(mixed, {"CUDA_DEVICE_ORDER": "PCI_BUS_ID"}).notes
    assert not resolve_visible(dgx_inventory, {}).notes


def test_unknown_logical_index_lists_the_visible_gpus(dgx_inventory: Inventory) -> None:
    visible = resolve_visible(dgx_inventory, {"CUDA_VISIBLE_DEVICES": "3,1"}).visible
    assert select_gpu(visible, 1).gpu.pci == dgx_inventory.gpus[1].pci
    with pytest.raises(UnknownGpu) as info:
        select_gpu(visible, 2)
    assert "0: 0000:48:00.0" in str(info.value) and "1: 0000:28:00.0" in str(info.value)


def test_no_gpu_at_all_is_an_environment_problem() -> None:
    with pytest.raises(NoGpuVisible, match="no GPU is visible"):
        select_gpu((), 0)


def test_visible_gpus_logs_resolution_notes(dgx_inventory: Inventory, caplog: pytest.LogCaptureFixture) -> None:
    from numapin.facts.inventory import visible_gpus

    with caplog.at_level(logging.WARNING, logger="numapin"):
        assert len(visible_gpus(dgx_inventory, {"CUDA_VISIBLE_DEVICES": "0,0"})) == 1
    assert [r.levelname for r in caplog.records] == ["WARNING"]


# -- local ranks ---------------------------------------------------------------

RANKS: list[tuple[dict[str, str], int | None, str | None, list[str]]] = [
    ({}, None, None, []),
    ({"LOCAL_RANK": "3"}, 3, "LOCAL_RANK", []),
    ({"SLURM_LOCALID": "2"}, 2, "SLURM_LOCALID", []),
    ({"OMPI_COMM_WORLD_LOCAL_RANK": "5"}, 5, "OMPI_COMM_WORLD_LOCAL_RANK", []),
    ({"MPI_LOCALRANKID": "1"}, 1, "MPI_LOCALRANKID", []),
    ({"PMI_LOCAL_RANK": "4"}, 4, "PMI_LOCAL_RANK", []),
    ({"MV2_COMM_WORLD_LOCAL_RANK": "6"}, 6, "MV2_COMM_WORLD_LOCAL_RANK", []),
    ({"PALS_LOCAL_RANKID": "7"}, 7, "PALS_LOCAL_RANKID", []),
    # torchrun under srun: one srun task per node, so SLURM_LOCALID is 0 for every worker.
    ({"LOCAL_RANK": "3", "SLURM_LOCALID": "0"}, 3, "LOCAL_RANK", ["SLURM_LOCALID"]),
    ({"SLURM_LOCALID": "1", "OMPI_COMM_WORLD_LOCAL_RANK": "1"}, 1, "SLURM_LOCALID", []),
    ({"OMPI_COMM_WORLD_LOCAL_RANK": "2", "PMI_LOCAL_RANK": "0", "PALS_LOCAL_RANKID": "9"}, 2,
     "OMPI_COMM_WORLD_LOCAL_RANK", ["PMI_LOCAL_RANK", "PALS_LOCAL_RANKID"]),
]


@pytest.mark.parametrize(("env", "rank", "variable", "ignored"), RANKS)
def test_local_rank_detection(env: dict[str, str], rank: int | None, variable: str | None,
                              ignored: list[str]) -> None:
    found = local_rank(env)
    if rank is None:
        assert found is None
        return
    assert found is not None and (found.rank, found.variable) == (rank, variable)
    assert [name for name, _ in found.ignored] == ignored


def test_every_documented_launcher_is_read() -> None:
    for n, name in enumerate(LOCAL_RANK_VARIABLES):
        found = local_rank({name: str(n)})
        assert found is not None and found.rank == n


@pytest.mark.parametrize("value", ["x", "-1", "1.5", "\u00b2", "\u0663", "9" * 4400, "1e3"])
def test_malformed_local_rank_is_a_clear_error(value: str) -> None:
    # Superscripts and other scripts' digits pass str.isdigit(); launchers write ASCII.
    with pytest.raises(UsageError, match="LOCAL_RANK"):
        local_rank({"LOCAL_RANK": value})


def test_an_empty_launcher_variable_counts_as_unset() -> None:
    assert local_rank({"LOCAL_RANK": "1", "PMI_LOCAL_RANK": ""}) == local_rank({"LOCAL_RANK": "1"})
    found = local_rank({"LOCAL_RANK": "  ", "SLURM_LOCALID": "2"})
    assert found is not None and (found.rank, found.variable) == (2, "SLURM_LOCALID")
    assert local_rank({"LOCAL_RANK": ""}) is None


@given(st.text(max_size=12))
def test_rank_values_are_ascii_decimals_or_a_usage_error(text: str) -> None:
    try:
        found = local_rank({"LOCAL_RANK": text})
    except UsageError:
        assert not (text.strip().isascii() and text.strip().isdigit())
        return
    if text.strip():
        assert found is not None and found.rank == int(text.strip()) and text.strip().isascii()
    else:
        assert found is None


def test_rank_to_gpu_mapping() -> None:
    assert [gpu_for_rank(r, 4) for r in range(4)] == [0, 1, 2, 3]
    assert [gpu_for_rank(r, 1) for r in range(3)] == [0, 0, 0], "one GPU in view: the launcher gave it its own"
    # More local ranks than GPUs in view is a launcher's misconfiguration, named.
    with pytest.raises(UsageError, match="local rank 12, but 8 GPUs are visible"):
        gpu_for_rank(12, 8)
    assert [gpu_for_rank(r, 4, "3,2,1,0") for r in range(4)] == [3, 2, 1, 0]
    assert gpu_for_rank(1, 2, [1, 0]) == 0
    with pytest.raises(ValueError, match="NUMAPIN_RANK_MAP"):
        gpu_for_rank(4, 4, "3,2,1,0")
    with pytest.raises(ValueError, match="visible"):
        gpu_for_rank(0, 2, "5")


@given(st.text(max_size=20))
def test_rank_map_values_are_decimals_or_a_usage_error(text: str) -> None:
    try:
        gpu = gpu_for_rank(1, 4, text)
    except UsageError:
        assert text.strip(), "an empty map counts as unset"
        return
    entries = text.split(",") if text.strip() else []
    assert 0 <= gpu < 4 and (not entries or gpu == int(entries[1]))


@pytest.mark.parametrize("gpu", ["0", True, 1.0])
def test_a_gpu_index_of_another_type_is_a_usage_error_saying_so(gpu: object, machine_root: Callable[[str], Path],
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    use_root(machine_root("pair"), monkeypatch)
    for call in (lambda: numapin.pin(gpu), lambda: numapin.plan(gpu)):  # type: ignore[arg-type]
        with pytest.raises(numapin.UsageError, match="an int") as caught:
            call()
        assert "not visible" not in str(caught.value) and caught.value.value == gpu


def test_the_hidden_gpus_of_a_removed_root_are_an_error_not_none(tmp_path: Path) -> None:
    import shutil

    from numapin.facts import synthetic as machines
    from numapin.facts.host import HostError

    root = machines.write("dgx-h100", tmp_path / "root")  # its sysfs names drivers: hidden GPUs are read when asked
    inventory = read_gpus(read_topology(root), nvml=False)
    shutil.rmtree(root)
    assert len(inventory.gpus) == SHAPES["dgx-h100"].gpus  # what was read stays
    with pytest.raises(HostError, match="does not exist"):
        inventory.hidden  # noqa: B018 -- the question that would read them
