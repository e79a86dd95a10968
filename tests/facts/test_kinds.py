"""CPU kinds: hwloc's answers on its captures, the synthetic machines, and what reserve and --cores make of them."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import FIXTURES, Snapshots, snapshot_names
from numapin import plan
from numapin.base.environment import PRIORITY_CORES
from numapin.base.errors import UsageError
from numapin.base.frozen import replace
from numapin.cli import main
from numapin.cpuset import CpuSet
from numapin.facts import synthetic as machines
from numapin.facts.kinds import PCT_SKUS, read_kinds
from numapin.facts.machine import gather
from numapin.facts.topology import read_topology

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



def test_cores_fastest_among_explicit_cpus_and_nodes(machine_root: Callable[[str], Path],
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    laptop = machine_root("laptop")
    kinds = read_kinds(read_topology(laptop))
    p_cores, e_cores = kinds.kinds[0].cpus, kinds.kinds[1].cpus
    mixed = CpuSet([max(p_cores), *e_cores])
    assert plan(cpus=mixed, cores="fastest", root=laptop, environ={}).cpus == CpuSet([max(p_cores)])
    assert plan(cpus=e_cores, cores="fastest", root=laptop, environ={}).cpus == e_cores  # the fastest present
    for where in (["--cpus", str(mixed)], ["--nodes", "0"]):
        assert main(["exec", "--root", str(laptop), *where, "--cores", "fastest", "--dry-run", "--json",
                     "--", "true"]) == 0
        chosen = CpuSet.parse(json.loads(capsys.readouterr().out)["placement"]["cpus"])
        assert chosen and chosen <= p_cores
    # Memory-only binding leaves the CPUs alone: options about CPUs or NICs are refused, not ignored.
    for option in (["--cores", "fastest"], ["--reserve", "1"], ["--nics", "auto"]):
        assert main(["exec", "--root", str(laptop), "--mems", "0", *option, "--dry-run", "--", "true"]) == 2
        assert "--mems alone leaves the CPUs as they are" in capsys.readouterr().err


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([3000, 3100, 3400, 4000]), st.sampled_from([1200, 2000])),
                min_size=1, max_size=6))
def test_kinds_from_any_frequencies(tmp_path_factory: pytest.TempPathFactory, freqs: list[tuple[int, int]]) -> None:
    from numapin.facts import synthetic as machines

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


@pytest.fixture(scope="module")
def hidden_b300(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """dgx-b300 as vLLM found a DGX B300: every core shows the priority turbo, so the kernel tells none apart."""
    spec = replace(machines.shape_named("dgx-b300"), priority_hidden=True)
    return Path(machines.write(spec, tmp_path_factory.mktemp("hidden") / "root"))


def test_the_pct_rule_finds_the_priority_cores_the_kernel_hides(hidden_b300: Path,
                                                                 machine_root: Callable[[str], Path]) -> None:
    topology = read_topology(hidden_b300)
    assert len(read_kinds(topology).kinds) == 1
    kinds = read_kinds(topology, rule="pct")
    # The published layout names the cores the exposing machine's frequencies name.
    shown = read_kinds(read_topology(machine_root("dgx-b300")))
    assert [k.cpus for k in kinds.kinds] == [k.cpus for k in shown.kinds]
    assert kinds.kinds[0].rule == "pct" and kinds.kinds[0].highest_perf == PCT_SKUS["6776P"].highest_perf
    assert kinds.note is None and set(kinds.order[:len(kinds.kinds[0].cpus)]) == set(kinds.kinds[0].cpus)
    pct = {PRIORITY_CORES: "pct"}
    for gpu in (0, 5):
        kernel_only = plan(gpu, reserve=1, root=hidden_b300, environ={})
        assert not kernel_only.reserved & kinds.kinds[0].cpus  # without the rule: the highest core, no priority one
        placement = plan(gpu, reserve=1, root=hidden_b300, environ=pct)
        assert placement.reserved and placement.reserved <= kinds.kinds[0].cpus & placement.cpus
        fastest = plan(gpu, cores="fastest", root=hidden_b300, environ=pct)
        assert fastest.cpus == kinds.kinds[0].cpus & plan(gpu, root=hidden_b300, environ={}).cpus


@pytest.mark.parametrize("model, said", [
    ("Intel(R) Xeon(R) 6962P", "highest_perf is 46, not the 44 of a 6962P"),
    ("Intel(R) Xeon(R) Platinum 8480C", "is none of 6776P"),
    ("", "model unknown"),
])
def test_the_pct_rule_fails_closed(hidden_b300: Path, tmp_path: Path, model: str, said: str,
                                   monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    import shutil

    root = tmp_path / "root"
    shutil.copytree(hidden_b300, root, symlinks=True)
    cpuinfo = root / "proc/cpuinfo"
    cpuinfo.write_text(cpuinfo.read_text().replace("Intel(R) Xeon(R) 6776P", model))
    kinds = read_kinds(read_topology(root), rule="pct")
    assert len(kinds.kinds) == 1 and kinds.note is not None and said in kinds.note
    monkeypatch.setenv(PRIORITY_CORES, "pct")
    assert main(["show", "--root", str(root), "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert "rule" not in shown["cpu_kinds"][0] and any(said in w for w in shown["warnings"])
    assert main(["show", "--root", str(root)]) == 0
    assert "note: priority-core rule pct not applied" in capsys.readouterr().out


def test_the_pct_rule_leaves_the_kernels_kinds(machine_root: Callable[[str], Path]) -> None:
    topology = read_topology(machine_root("dgx-b300"))
    kernel, ruled = read_kinds(topology), read_kinds(topology, rule="pct")
    assert ruled.kinds == kernel.kinds and ruled.order == kernel.order
    assert ruled.note is not None and "the kernel tells its CPUs apart" in ruled.note


def test_the_rule_is_read_from_the_environment(hidden_b300: Path, monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv(PRIORITY_CORES, "pct")
    assert main(["show", "--root", str(hidden_b300), "--json"]) == 0
    assert [k["rule"] for k in json.loads(capsys.readouterr().out)["cpu_kinds"]] == ["pct", "pct"]
    assert main(["show", "--root", str(hidden_b300)]) == 0
    assert f"rule pct of {PRIORITY_CORES}" in capsys.readouterr().out
    monkeypatch.setenv(PRIORITY_CORES, "fast")
    assert main(["show", "--root", str(hidden_b300)]) == 2
    assert f"{PRIORITY_CORES}: unknown priority-core rule 'fast'" in capsys.readouterr().err
    with pytest.raises(UsageError, match=PRIORITY_CORES):
        gather(hidden_b300, {PRIORITY_CORES: "PCT"})
