"""CPU kinds: hwloc's answers on its captures, the synthetic machines, and what reserve and --cores make of them."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import FIXTURES, Snapshots, snapshot_names
from numapin import CpuSet, plan, read_topology
from numapin.cli import main
from numapin.facts import gather
from numapin.kinds import read_kinds

EXPECTED = json.loads((FIXTURES / "expected.json").read_text())


@pytest.mark.parametrize("name", [n for n in snapshot_names() if "cpu_kinds" in EXPECTED.get(n, {})])
def test_kinds_are_hwlocs(name: str, snapshots: Snapshots) -> None:
    kinds = read_kinds(read_topology(snapshots.root(name))).kinds
    expected = EXPECTED[name]["cpu_kinds"]
    assert sorted(str(k.cpus) for k in kinds) == sorted(e["cpus"] for e in expected)
    # A more efficient kind in hwloc's eyes is never ranked slower here.
    rank = {str(k.cpus): k.rank for k in kinds}
    for a in expected:
        for b in expected:
            if a["efficiency"] > b["efficiency"]:
                assert rank[a["cpus"]] < rank[b["cpus"]], (a, b)


def test_turbo_boost_max_favoured_cores_are_one_kind_but_first(snapshots: Snapshots) -> None:
    topology = read_topology(snapshots.root("20em64t-hybrid-1p6c2t+2ca4co1t"))
    kinds = read_kinds(topology)
    root = Path(topology.root) / "sys/devices/system/cpu"
    top = {cpu: int((root / f"cpu{cpu}/cpufreq/cpuinfo_max_freq").read_text()) for cpu in topology.online}
    p_cores = kinds.kinds[0].cpus
    assert len({top[c] for c in p_cores}) > 1, "the capture's P-cores differ a little in maximum frequency"
    favoured = [c for c in p_cores if top[c] == max(top.values())]
    assert sorted(kinds.order[: len(favoured)]) == sorted(favoured)


def test_every_capture_has_kinds_covering_its_cpus(snapshots: Snapshots) -> None:
    for name in snapshot_names():
        topology = read_topology(snapshots.root(name))
        kinds = read_kinds(topology)
        assert sorted(kinds.order) == sorted(topology.online), name
        assert CpuSet.union(k.cpus for k in kinds.kinds) == topology.online, name
        assert [k.rank for k in kinds.kinds] == list(range(len(kinds.kinds))), name


def test_the_live_machine() -> None:
    topology = read_topology("/")
    kinds = read_kinds(topology)
    assert CpuSet.union(k.cpus for k in kinds.kinds) == topology.online
    assert sorted(kinds.order) == sorted(topology.online)


def test_hybrid_laptop_in_show(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["show", "--machine", "laptop", "--json"]) == 0
    kinds = json.loads(capsys.readouterr().out)["cpu_kinds"]
    assert [(k["rank"], k["core_type"]) for k in kinds] == [(0, "performance"), (1, "efficient")]
    assert kinds[0]["max_mhz"] > kinds[1]["max_mhz"]
    assert main(["show", "--machine", "laptop"]) == 0
    assert "CPU kinds (2, fastest first):" in capsys.readouterr().out
    assert main(["show", "--machine", "dgx-h100", "--json"]) == 0
    assert len(json.loads(capsys.readouterr().out)["cpu_kinds"]) == 1


def test_reserve_takes_a_priority_core(machine_root: Callable[[str], Path]) -> None:
    root = machine_root("dgx-b300")
    facts = gather(root, {})
    kinds = facts.kinds()
    priority = kinds.kinds[0].cpus
    assert kinds.kinds[0].max_mhz == 4600 and len(priority) < len(facts.topology.online) // 4
    for gpu in range(len(facts.visible)):
        placement = plan(gpu, reserve=1, root=root, environ={})
        assert placement.reserved and placement.reserved <= priority & placement.cpus
        assert placement.workers == placement.cpus - placement.reserved
    two = plan(0, mode="exclusive", reserve=2, root=root, environ={})
    assert two.reserved <= priority and len(facts.topology.cores_within(two.reserved)) == 2


def test_reserve_without_kinds_keeps_the_highest_core(machine_root: Callable[[str], Path]) -> None:
    placement = plan(0, mode="exclusive", reserve=1, root=machine_root("dgx-h100"), environ={})
    assert placement.reserved == CpuSet([13, 125])


def test_cores_fastest(machine_root: Callable[[str], Path], capsys: pytest.CaptureFixture[str]) -> None:
    laptop = machine_root("laptop")
    fastest = plan(0, cores="fastest", root=laptop, environ={})
    assert fastest.cpus == read_kinds(read_topology(laptop)).kinds[0].cpus
    assert "fastest cores" in fastest.reason
    # One kind: the same placement as without the option.
    h100 = machine_root("dgx-h100")
    assert plan(1, cores="fastest", root=h100, environ={}).cpus == plan(1, root=h100, environ={}).cpus
    assert main(["plan", "--root", str(laptop), "--cores", "fastest", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)[0]["cpus"] == str(fastest.cpus)
    with pytest.raises(SystemExit) as exited:
        main(["plan", "--root", str(laptop), "--cores", "most"])
    assert exited.value.code == 2 and "--cores" in capsys.readouterr().err


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([3000, 3100, 3400, 4000]), st.sampled_from([1200, 2000])),
                min_size=1, max_size=6))
def test_kinds_from_any_frequencies(tmp_path_factory: pytest.TempPathFactory, freqs: list[tuple[int, int]]) -> None:
    from numapin import machines

    spec = machines.MachineSpec("freq", sockets=1, cores_per_socket=len(freqs))
    root = machines.write(spec, tmp_path_factory.mktemp("freq"))
    for cpu, (top, base) in enumerate(freqs):
        folder = root / f"sys/devices/system/cpu/cpu{cpu}/cpufreq"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "cpuinfo_max_freq").write_text(f"{top * 1000}\n")
        (folder / "base_frequency").write_text(f"{base * 1000}\n")
    kinds = read_kinds(read_topology(root))
    assert CpuSet.union(k.cpus for k in kinds.kinds) == CpuSet(range(len(freqs)))
    for kind in kinds.kinds:  # a kind is one base frequency, its maxima within 10% of each other
        members = [freqs[c] for c in kind.cpus]
        assert len({b for _, b in members}) == 1
        assert max(t for t, _ in members) < min(t for t, _ in members) * 1.1
    speeds = [(k.max_mhz, k.base_mhz) for k in kinds.kinds]
    assert speeds == sorted(speeds, reverse=True)  # fastest first
