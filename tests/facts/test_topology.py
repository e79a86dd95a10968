from __future__ import annotations

import json
import os
import pickle
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from conftest import FIXTURES, Snapshots, in_child, snapshot_names
from numapin.cpuset import CpuSet
from numapin.facts.host import Host, HostError
from numapin.facts.synthetic import SHAPES
from numapin.facts.topology import read_topology

EXPECTED = json.loads((FIXTURES / "expected.json").read_text())


@pytest.mark.parametrize("name", snapshot_names())
def test_snapshot_agrees_with_hwloc(name: str, snapshots: Snapshots) -> None:
    topo = read_topology(snapshots.root(name))
    assert topo.online, "every snapshot has online CPUs"
    # A CPU belongs to at most one node, and the nodes' CPUs are online.
    seen = CpuSet()
    for node in topo.nodes:
        assert node.cpus <= topo.online
        assert not node.cpus & seen
        seen |= node.cpus
    expected = EXPECTED.get(name)
    if expected is None or "pus" not in expected:
        return  # hwloc checks this one with options that change its topology output: parsing is the test
    assert str(topo.allowed) == expected["pus"]
    compared = 0
    for node in topo.nodes:
        mine = node.cpus & topo.allowed
        # hwloc leaves out nodes whose memory the cgroup forbids, and hangs a
        # node without CPUs of its own under its parent: nothing to compare.
        if node.memory_only or not mine or str(node.id) not in expected["nodes"]:
            continue
        assert str(mine) == expected["nodes"][str(node.id)], f"node {node.id}"
        compared += 1
    assert compared == sum(1 for v in expected["nodes"].values() if v) - _parent_hung(topo, expected)
    cores = sum(1 for c in topo.cores if c.cpus & topo.allowed) if topo.cores_known else 0
    assert cores == expected["cores"]


def _parent_hung(topo, expected: dict) -> int:  # type: ignore[no-untyped-def]
    """hwloc entries for nodes we know to have no allowed CPU of their own (listed with a parent's CPUs)."""
    count = 0
    for key, value in expected["nodes"].items():
        node = next((n for n in topo.nodes if n.id == int(key)), None)
        if value and node is not None and (node.memory_only or not node.cpus & topo.allowed):
            count += 1
    return count


def test_snapshot_cgroup_v1_restricts_allowed(snapshots: Snapshots) -> None:
    topo = read_topology(snapshots.root("4fake-4gr1nu1pu"))
    assert topo.cgroup.version == 1 and topo.cgroup.path == "/dummy"
    assert topo.online == CpuSet("0-3") and topo.allowed == CpuSet("0-1")
    assert topo.allowed_mems == CpuSet([0, 2])
    assert not topo.cores_known and "no core information" in " ".join(topo.warnings)


def test_snapshot_cgroup_v2_restricts_allowed(snapshots: Snapshots) -> None:
    topo = read_topology(snapshots.root("32amd64-4s2n4c-cgroup2"))
    assert topo.cgroup.version == 2
    assert topo.allowed == CpuSet("0-5") and topo.online == CpuSet("0-31")


def test_memory_only_gpu_nodes_of_power9(snapshots: Snapshots) -> None:
    topo = read_topology(snapshots.root("nvidiagpunumanodes"))
    assert [n.id for n in topo.memory_only_nodes] == [250, 251, 252, 253, 254, 255]
    assert [n.id for n in topo.cpu_nodes] == [0, 8]
    assert topo.node(0).distance_to(8) == 40 and topo.distance(250, 250) == 10
    assert topo.node(250).memory_bytes == 15728640 * 1024


def test_buggy_numa_gives_each_cpu_one_home(snapshots: Snapshots) -> None:
    topo = read_topology(snapshots.root("8em64t-2s2ca2c-buggynuma"))
    assert topo.node(0).cpus == CpuSet("0-7")
    assert all(not n.cpus for n in topo.nodes if n.id)
    assert any("already belong to a lower node" in w for w in topo.warnings)


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_synthetic_machines(name: str, machine_root: Callable[[str], Path]) -> None:
    spec = SHAPES[name]
    topo = read_topology(machine_root(name))
    assert len(topo.online) == spec.cpus
    assert len(topo.cpu_nodes) == spec.cpu_nodes
    assert len(topo.memory_only_nodes) == (spec.gpus if spec.gpu_memory_nodes else 0)
    assert len(topo.packages) == spec.sockets
    assert len(topo.cores) == spec.cores
    assert sorted(c.cpus for c in topo.cores) == sorted(spec.core_cpus(core) for core in range(spec.cores))
    assert len(topo.caches) == spec.cpu_nodes * spec.llc_per_node
    assert topo.allowed == topo.online and topo.process == topo.online
    assert topo.warnings == ()


def test_dgx_h100_numbering(machine_root: Callable[[str], Path]) -> None:
    topo = read_topology(machine_root("dgx-h100"))
    assert topo.node(0).cpus == CpuSet("0-55,112-167")
    assert topo.core_of(0) is not None and topo.core_of(0).cpus == CpuSet([0, 112])  # type: ignore[union-attr]
    assert topo.node_of(170) is not None and topo.node_of(170).id == 1  # type: ignore[union-attr]
    assert topo.nodes_of(CpuSet([1, 60])) == CpuSet([0, 1])


def test_fsroot_environment_variable(machine_root: Callable[[str], Path], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NUMAPIN_FSROOT", str(machine_root("laptop")))
    assert len(read_topology().online) == 8


def test_live_machine_matches_the_kernel() -> None:
    topo = read_topology("/")
    assert topo.process == CpuSet(os.sched_getaffinity(0))
    assert topo.online >= topo.allowed >= topo.process


def test_missing_root_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(HostError, match="does not exist"):
        read_topology(tmp_path / "nowhere")


def test_root_without_cpu_information_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "sys").mkdir()
    with pytest.raises(HostError, match="no CPU information"):
        read_topology(tmp_path)


def _write(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def test_bare_root_falls_back_and_says_so(tmp_path: Path) -> None:
    root = _write(tmp_path, {"sys/devices/system/cpu/cpu0/x": "", "sys/devices/system/cpu/cpu1/x": ""})
    topo = read_topology(root)
    assert topo.online == CpuSet("0-1")
    assert [n.cpus for n in topo.nodes] == [CpuSet("0-1")]
    assert [c.cpus for c in topo.cores] == [CpuSet([0]), CpuSet([1])]
    assert topo.package_source == "whole machine"
    text = " ".join(topo.warnings)
    assert "no nodes" in text and "no core information" in text and "online missing" in text


def test_unreadable_and_malformed_files_become_warnings(tmp_path: Path) -> None:
    root = _write(tmp_path, {
        "sys/devices/system/cpu/online": "0-3",
        "sys/devices/system/cpu/cpu0/topology/thread_siblings_list": "garbage",
        "sys/devices/system/cpu/cpu1/x": "", "sys/devices/system/cpu/cpu2/x": "", "sys/devices/system/cpu/cpu3/x": "",
        "sys/devices/system/node/node0/cpulist": "0-1",
        "sys/devices/system/node/node1/cpulist": "2-3",
        "sys/devices/system/node/node1/distance": "10 20 30",
    })
    topo = read_topology(root)
    assert [n.cpus for n in topo.nodes] == [CpuSet("0-1"), CpuSet("2-3")]
    assert any("garbage" in w for w in topo.warnings)
    assert any("distance" in w for w in topo.warnings)


def test_cgroup_v2_effective_walks_up_to_the_parent(tmp_path: Path) -> None:
    root = _write(tmp_path, {
        "sys/devices/system/cpu/online": "0-7",
        **{f"sys/devices/system/cpu/cpu{i}/x": "" for i in range(8)},
        "proc/self/cgroup": "0::/kubepods/pod1/ctr\n",
        "proc/self/mountinfo": "30 20 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n",
        "sys/fs/cgroup/kubepods/cpuset.cpus.effective": "2-5\n",
        "sys/fs/cgroup/kubepods/pod1/ctr/cgroup.procs": "1\n",
    })
    topo = read_topology(root)
    assert topo.cgroup.version == 2 and topo.allowed == CpuSet("2-5")


def test_cgroup_namespace_root_in_mountinfo(tmp_path: Path) -> None:
    # Without a cgroup namespace, the path names the full tree while the mount shows a part of it.
    root = _write(tmp_path, {
        "sys/devices/system/cpu/online": "0-7",
        **{f"sys/devices/system/cpu/cpu{i}/x": "" for i in range(8)},
        "proc/self/cgroup": "5:cpuset:/docker/abc\n",
        "proc/self/mountinfo": "31 23 0:29 /docker/abc /sys/fs/cgroup/cpuset rw - cgroup cgroup rw,cpuset\n",
        "sys/fs/cgroup/cpuset/cpuset.cpus": "0,1\n",
        "sys/fs/cgroup/cpuset/cpuset.mems": "0\n",
    })
    topo = read_topology(root)
    assert topo.cgroup.version == 1 and topo.allowed == CpuSet("0-1")


_OTHER_TYPES = st.sampled_from(["overlay", "tmpfs", "proc", "sysfs", "ext4", "nfs4", "fuse.sshfs", "squashfs", "nsfs"])


@given(others=st.lists(st.tuples(_OTHER_TYPES, st.from_regex(r"/[a-z0-9/._-]{0,30}", fullmatch=True)), max_size=40),
       at=st.integers(min_value=0, max_value=40))
def test_the_cgroup_mount_is_found_among_any_others(others: list[tuple[str, str]], at: int) -> None:
    # A host running containers has thousands of mounts; only the cgroup ones are parsed, and always found.
    import tempfile

    from numapin.facts.cgroup import read_cgroup

    lines = [f"{40 + i} 20 0:{50 + i} / {point} rw,relatime - {kind} {kind} rw"
             for i, (kind, point) in enumerate(others)]
    lines.insert(min(at, len(lines)), "30 20 0:26 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate")
    with tempfile.TemporaryDirectory() as folder:
        root = _write(Path(folder), {
            "proc/self/cgroup": "0::/job/step\n",
            "proc/self/mountinfo": "\n".join(lines) + "\n",
            "sys/fs/cgroup/job/cpuset.cpus.effective": "2-5\n",
            "sys/fs/cgroup/job/cpuset.mems.effective": "0\n",
        })
        cgroup = read_cgroup(Host(str(root)))
    assert (cgroup.version, cgroup.folder, cgroup.cpus, cgroup.mems) == (
        2, "/sys/fs/cgroup/job/step", CpuSet("2-5"), CpuSet("0"))


def test_container_cpuset_smaller_than_online(machine_root: Callable[[str], Path], tmp_path: Path) -> None:
    from numapin.facts import synthetic as machines

    root = machines.write("dgx-h100", tmp_path / "root", cgroup_cpus=CpuSet("0-15"))
    topo = read_topology(root)
    assert topo.allowed == CpuSet("0-15") and topo.online == CpuSet("0-223")
    assert topo.process == CpuSet("0-15")


def test_an_unparsable_cgroup_cpuset_is_said_not_swallowed(tmp_path: Path) -> None:
    # The restriction is ignored (nothing else can be done), but the user hears of it.
    from numapin.facts import synthetic as machines

    root = machines.write("pair", tmp_path / "root")
    (root / "sys/fs/cgroup/cpuset.cpus.effective").write_text("0-1,banana\n")
    topo = read_topology(root)
    assert topo.allowed == topo.online
    assert any("cpuset.cpus.effective is not a list of ids ('0-1,banana')" in w for w in topo.warnings)


def test_online_cpus_without_a_folder_are_left_out(tmp_path: Path) -> None:
    root = _write(tmp_path, {
        "sys/devices/system/cpu/online": "0-3",
        "sys/devices/system/cpu/cpu0/topology/core_id": "0",
        "sys/devices/system/cpu/cpu1/topology/core_id": "1",
        "sys/devices/system/cpu/cpufreq/x": "",
    })
    topo = read_topology(root)
    assert topo.online == CpuSet("0-1")
    assert topo.possible == CpuSet("0-1")  # no `possible` file: the folders and the online CPUs
    assert any("2-3 are online but have no folder" in w for w in topo.warnings)


def test_reads_inside_a_held_folder_are_reads_of_the_whole_path(
    machine_root: Callable[[str], Path], tmp_path: Path
) -> None:
    root = machine_root("dgx-h100")
    journal: list[str] = []
    host = Host(str(root), journal)
    rel = "sys/devices/system/cpu/cpu3/topology/core_cpus_list"
    with host.folder("sys/devices/system/cpu/") as folder:
        held = folder.fd
        assert held is not None
        assert host.read_in(folder, "cpu3/topology/core_cpus_list") == host.read(rel)
        assert host.read_in(folder, "cpu3/topology/nothing") is None
    assert journal == [rel, rel]  # the whole relative path, as snapshot captures it
    assert folder.fd is None
    with pytest.raises(OSError):
        os.fstat(held)  # closed when the block ends
    # A folder that cannot be opened still reads (by whole paths), and finds nothing there.
    with host.folder("sys/devices/system/absent") as missing:
        assert missing.fd is None and host.read_in(missing, "online") is None
    with Host(str(tmp_path)).folder("x") as nowhere:
        (tmp_path / "x").mkdir()
        (tmp_path / "x" / "f").write_text("late\n")
        assert nowhere.fd is None and Host(str(tmp_path)).read_in(nowhere, "f") == "late\n"


def test_a_node_of_a_terabyte_or_more_reads_its_memory(machine_root: Callable[[str], Path]) -> None:
    # MemTotal of a 1 TiB node is ten digits of kB, past a nine-digit parser.
    from numapin.facts import synthetic as machines

    spec = machines.shape_named("dgx-h100")
    topology = read_topology(machine_root("dgx-h100"))
    assert spec.memory_per_node >= 1 << 40
    assert [n.memory_bytes for n in topology.nodes] == [spec.memory_per_node] * len(topology.nodes)



# What only a question about cores, packages or caches opens: a pin to a GPU's node never asks one.
_GROUPING = ("topology/core_id", "topology/core_cpus", "topology/thread_siblings", "topology/physical_package_id",
             "topology/package_cpus", "cache/index")


def _grouping_opened(steps: Callable[[Callable[[], None]], None]) -> list[list[str]]:
    """The files only the grouping reads that ``steps`` opens, step by step (it calls its argument between two
    steps), heard by an audit hook in a child (a hook cannot be removed)."""
    def child() -> list[list[str]]:
        import sys

        opened: list[list[str]] = [[]]
        sys.addaudithook(lambda event, args: opened[-1].append(str(args[0])) if event == "open" else None)
        steps(lambda: opened.append([]))
        return [[path for path in step if any(part in path for part in _GROUPING)] for step in opened]
    result: list[list[str]] = in_child(child)
    return result


def test_a_pin_to_a_node_reads_no_core_or_cache_file(pair_root: Path) -> None:
    import numapin

    def steps(next_step: Callable[[], None]) -> None:
        result = numapin.pin(1)  # the default mode: GPU 1's node
        assert result.placement is not None and result.placement.node == 1, result
        next_step()
        assert numapin.machine().topology.cores_known  # the first question about cores

    pinning, asking = _grouping_opened(steps)
    assert pinning == []
    online = read_topology(pair_root).online
    assert sorted(p for p in asking if p.endswith("core_id")) == sorted(f"cpu{c}/topology/core_id" for c in online)


def test_the_grouping_is_read_once_when_asked(machine_root: Callable[[str], Path]) -> None:
    from numapin.facts.machine import cached
    from numapin.placement.modes import PlacementMode, resolve

    root = machine_root("dgx-h100")
    whole = read_topology(root, journal=[])  # a journal asks for everything at once

    def steps(next_step: Callable[[], None]) -> None:
        facts = cached(root, {})
        node = resolve(facts, {}, gpu=3)  # the default mode
        assert node.cpus == facts.topology.node(node.node or 0).cpus
        next_step()
        exclusive = resolve(facts, {}, gpu=3, mode=PlacementMode.EXCLUSIVE)
        assert exclusive.cpus < node.cpus
        next_step()
        # The same reading's other views (another cgroup's) and copies ask nothing again.
        topology = facts.topology
        assert topology.in_cgroup(topology.cgroup).cores == topology.cores == whole.cores
        assert pickle.loads(pickle.dumps(topology)) == topology == whole

    placing, splitting, again = _grouping_opened(steps)
    assert placing == [] and again == []
    core_ids = [p for p in splitting if p.endswith("core_id")]
    assert sorted(core_ids) == sorted(f"cpu{c}/topology/core_id" for c in whole.online)  # each once


def test_the_grouping_of_a_removed_root_is_an_error_not_a_machine_without_cores(tmp_path: Path) -> None:
    import shutil

    from numapin.facts import synthetic as machines

    topology = read_topology(machines.write("pair", tmp_path / "root"))
    shutil.rmtree(tmp_path / "root")
    assert topology.online  # what was read stays
    with pytest.raises(HostError, match="does not exist"):
        topology.cores  # noqa: B018 -- the question that would read them
