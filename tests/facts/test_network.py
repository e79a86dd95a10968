"""NICs and their relation to GPUs: hwloc's captures, the public DGX H100 matrix, and the commands that show them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

import live
from conftest import FIXTURES, Snapshots, snapshot_names
from numapin.base.errors import UsageError
from numapin.cli import main
from numapin.cpuset import CpuSet
from numapin.facts.machine import gather
from numapin.facts.network import Network, Relation, assign, read_network, read_nics, relation
from numapin.facts.topology import read_topology
from numapin.pinning.request import autopin_request

EXPECTED = json.loads((FIXTURES / "expected.json").read_text())
NUMAPIN = [sys.executable, "-m", "numapin"]

# The GPU rows of a public `nvidia-smi topo -m` of a DGX H100 (vllm-project/vllm#6746; its CPU affinity,
# 0-55,112-167 and 56-111,168-223, is the dgx-h100 machine's): NIC0 ... NIC11 for GPU0 ... GPU7.
DGX_H100_TOPO = """
GPU0 PXB NODE NODE NODE NODE NODE SYS SYS SYS SYS SYS SYS
GPU1 NODE NODE NODE PXB NODE NODE SYS SYS SYS SYS SYS SYS
GPU2 NODE NODE NODE NODE PXB NODE SYS SYS SYS SYS SYS SYS
GPU3 NODE NODE NODE NODE NODE PXB SYS SYS SYS SYS SYS SYS
GPU4 SYS SYS SYS SYS SYS SYS PXB NODE NODE NODE NODE NODE
GPU5 SYS SYS SYS SYS SYS SYS NODE NODE NODE PXB NODE NODE
GPU6 SYS SYS SYS SYS SYS SYS NODE NODE NODE NODE PXB NODE
GPU7 SYS SYS SYS SYS SYS SYS NODE NODE NODE NODE NODE PXB
"""


def show_json(*args: str) -> dict:  # type: ignore[type-arg]
    proc = subprocess.run([*NUMAPIN, "show", "--json", *args], capture_output=True, text=True, check=True)
    return json.loads(proc.stdout)  # type: ignore[no-any-return]


def with_nics() -> list[str]:
    return [name for name in snapshot_names() if "nics" in EXPECTED.get(name, {})]


@pytest.mark.parametrize("name", with_nics())
def test_every_network_device_sits_where_hwloc_puts_it(name: str, snapshots: Snapshots) -> None:
    topology = read_topology(snapshots.root(name))
    nics = read_nics(topology)
    expected, forced = EXPECTED[name]["nics"], EXPECTED[name].get("nics_forced", {})
    # The same devices as hwloc: an RDMA device and its interface are two names of one NIC here.
    names = {n for nic in nics for n in (nic.name, *nic.netdevs)}
    assert names == set(expected) | set(forced)
    for device, where in expected.items():
        nic = next(n for n in nics if device in (n.name, *n.netdevs))
        assert str(nic.cpus & topology.allowed) == where["cpus"], device
        assert [nic.node] == where["nodes"], device
    # hwloc was told another locality for these (HWLOC_PCI_LOCALITY in its test): only the kernel's is ours.
    for device in forced:
        nic = next(n for n in nics if device in (n.name, *n.netdevs))
        folder = Path(topology.root) / "sys/bus/pci/devices" / nic.pci
        assert nic.cpus == CpuSet.parse_mask((folder / "local_cpus").read_text()) & topology.online


def test_captures_without_network_devices_have_none(snapshots: Snapshots) -> None:
    names = [n for n in snapshot_names() if n not in with_nics()]
    assert names
    for name in names:
        topology = read_topology(snapshots.root(name))
        classes = [Path(topology.root) / "sys/class" / c for c in ("net", "infiniband")]
        physical = [e for c in classes if c.is_dir() for e in c.iterdir() if (e / "device").exists()]
        # hwloc shows no network device on these captures (a PCI tree without one, as pci-conflicts):
        # neither does numapin; a capture with one belongs in expected.json's table instead.
        assert (physical, read_nics(topology)) == ([], ()), name


def test_dgx_h100_matches_the_public_topology(capsys: pytest.CaptureFixture[str]) -> None:
    data = show_json("--machine", "dgx-h100")
    nics = data["nics"]
    assert len(nics) == 12 and sum(n["type"] == "infiniband" for n in nics) == 8
    assert [n["name"] for n in nics] == [f"mlx5_{i}" for i in range(12)]
    rows = {line.split()[0]: line.split()[1:] for line in DGX_H100_TOPO.strip().splitlines()}
    for gpu in data["gpus"]:
        relations = {link["name"]: link["relation"] for link in gpu["nics"]}
        assert [relations[f"mlx5_{i}"] for i in range(12)] == rows[f"GPU{gpu['index']}"]
        # Nearest first.
        order = [Relation(link["relation"]).distance for link in gpu["nics"]]
        assert order == sorted(order) and gpu["nics"][0]["relation"] == "PXB"
        assert nics[int(gpu["nics"][0]["name"].split("_")[1])]["node"] == gpu["node"]
    # Each NIC's node and CPUs are its socket's.
    assert {n["node"] for n in nics[:6]} == {0} and {n["cpus"] for n in nics[6:]} == {"56-111,168-223"}
    # The same table as text.
    assert main(["show", "--machine", "dgx-h100"]) == 0
    text = capsys.readouterr().out
    grid = text[text.index("GPU to NIC"):].splitlines()[1:10]
    assert grid[0].split() == [*(f"mlx5_{i}" for i in range(12)), "nearest"]
    for line in grid[1:]:
        cells = line.split()
        index = int(cells[0].removeprefix("cuda:"))
        assert cells[1:13] == rows[f"GPU{index}"] and cells[13] == data["gpus"][index]["nics"][0]["name"]


@pytest.mark.parametrize(("name", "nearest"), [("gb300", "PIX"), ("epyc-nps4", "PIX"), ("dgx-b300", "PIX")])
def test_other_machines_have_a_nic_per_gpu(name: str, nearest: str, machine_root: Callable[[str], Path]) -> None:
    facts = gather(machine_root(name), {})
    network = read_network(facts.topology, facts.inventory.gpus)
    chosen = assign(network, [(v.index, v.gpu.pci) for v in facts.visible])
    assert all(c is not None and c.relation is Relation(nearest) and not c.shared_with for c in chosen)
    assert len({c.nic.name for c in chosen if c}) == len(facts.visible)
    assert all(c.nic.node == v.gpu.node for c, v in zip(chosen, facts.visible, strict=True) if c)


def test_laptop_and_pair_have_no_nic(machine_root: Callable[[str], Path], capsys: pytest.CaptureFixture[str]) -> None:
    for name in ("laptop", "pair"):
        facts = gather(machine_root(name), {})
        assert read_network(facts.topology, facts.inventory.gpus).nics == ()
        assert main(["show", "--root", str(machine_root(name))]) == 0
        assert "Network devices: none found" in capsys.readouterr().out


def test_the_live_machine_agrees_with_sysfs() -> None:
    topology = read_topology("/")
    for nic in read_nics(topology):
        device = os.path.realpath(f"/sys/bus/pci/devices/{nic.pci}")
        assert device.endswith(nic.pci) and nic.cpus <= topology.online
        for netdev in nic.netdevs:
            assert os.path.realpath(f"/sys/class/net/{netdev}").startswith(device + "/")


def test_plan_names_each_ranks_nic_and_who_shares_it(capsys: pytest.CaptureFixture[str],
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    assert main(["plan", "--machine", "dgx-h100", "--json"]) == 0
    plans = json.loads(capsys.readouterr().out)
    assert [p["nic"]["name"] for p in plans] == ["mlx5_0", "mlx5_3", "mlx5_4", "mlx5_5", "mlx5_6", "mlx5_9",
                                                   "mlx5_10", "mlx5_11"]
    assert all(p["nic"]["relation"] == "PXB" and p["nic"]["shared_with"] == [] for p in plans)
    # Two ranks on one GPU: a rank map says so (a GPU listed twice in --gpus is refused as a likely mistake).
    monkeypatch.setenv("NUMAPIN_RANK_MAP", "2,2,5")
    assert main(["plan", "--machine", "dgx-h100"]) == 0
    monkeypatch.delenv("NUMAPIN_RANK_MAP")
    out = capsys.readouterr().out
    assert "ranks 0, 1 share mlx5_4: it is the nearest NIC of each" in out
    assert out.splitlines()[3].split()[-2:] == ["mlx5_9", "(PXB)"]
    assert main(["plan", "--machine", "pair"]) == 0
    assert "nic" not in capsys.readouterr().out.splitlines()[0].split()


def test_plan_picture_names_the_nics(tmp_path: Path) -> None:
    out = tmp_path / "plan.svg"
    assert main(["plan", "--machine", "dgx-h100", "--svg", str(out)]) == 0
    svg = out.read_text()
    assert "NIC mlx5_0 (PXB)" in svg and "GPU 7 · rank 7 · 0000:88:00.0 · NVIDIA H100 80GB HBM3 · NIC mlx5_11" in svg


def test_exec_exports_the_nic_only_when_asked(tmp_path: Path) -> None:
    def dry(*args: str, **env: str) -> dict:  # type: ignore[type-arg]
        proc = subprocess.run([*NUMAPIN, "exec", "--machine", "dgx-h100", "--local-rank", "3", *args, "--dry-run",
                               "--json", "--", "true"], capture_output=True, text=True, check=True,
                              env={k: v for k, v in {**os.environ, **env}.items()
                                   if k not in ("UCX_NET_DEVICES", "NVSHMEM_HCA_LIST") or k in env})
        return json.loads(proc.stdout)  # type: ignore[no-any-return]

    asked = dry("--nics", "auto")
    assert asked["placement"]["gpu"] == 3
    assert asked["nics"]["nic"]["name"] == "mlx5_5" and asked["nics"]["nic"]["relation"] == "PXB"
    assert asked["nics"]["set"] == {"UCX_NET_DEVICES": "mlx5_5:1", "NVSHMEM_HCA_LIST": "mlx5_5:1"}
    assert "NCCL_IB_HCA" not in json.dumps(asked)
    assert dry()["nics"] is None  # without --nics: nothing network-related
    kept = dry("--nics", "auto", UCX_NET_DEVICES="mlx5_0:1")
    assert kept["nics"]["set"] == {"NVSHMEM_HCA_LIST": "mlx5_5:1"}
    assert kept["nics"]["kept"] == {"UCX_NET_DEVICES": "mlx5_0:1"}
    # The start-up hook's NUMAPIN_AUTOPIN takes the option from its variable, checked by the same parser.
    assert autopin_request({"NUMAPIN_NICS": "auto"}).nics == "auto"
    with pytest.raises(UsageError, match="NUMAPIN_NICS"):
        autopin_request({"NUMAPIN_NICS": "all"})
    bad = subprocess.run([*NUMAPIN, "exec", "--nics", "some", "--", "true"], capture_output=True, text=True)
    assert bad.returncode == 2 and "--nics" in bad.stderr


def test_exec_really_sets_the_variables(tmp_path: Path) -> None:
    if not live.NODE0 or not live.NODE1:
        pytest.skip(f"needs allowed CPUs on both halves of the machine (allowed: {live.BASELINE})")
    root = live.write_pair(tmp_path / "pair")  # this host's CPUs as two nodes, a GPU each
    device = root / "sys/devices/pci0000:00/0000:00:02.0/0000:02:00.0"
    (device / "infiniband/mlx5_0/ports/1").mkdir(parents=True)
    (device / "infiniband/mlx5_0/ports/1/link_layer").write_text("InfiniBand\n")
    (device / "numa_node").write_text("1\n")
    (root / "sys/class/infiniband").mkdir(parents=True)
    (root / "sys/class/infiniband/mlx5_0").symlink_to(os.path.relpath(device / "infiniband/mlx5_0",
                                                                       root / "sys/class/infiniband"))
    env = {k: v for k, v in os.environ.items() if k not in ("UCX_NET_DEVICES", "NVSHMEM_HCA_LIST")}
    proc = subprocess.run([*NUMAPIN, "exec", "--root", str(root), "--gpu", "1", "--nics", "auto", "--",
                           sys.executable, "-c", "import os; print(os.environ['UCX_NET_DEVICES'], "
                           "os.environ['NVSHMEM_HCA_LIST'])"], capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["mlx5_0:1", "mlx5_0:1"]


# -- the relation rule -------------------------------------------------------

BRIDGES = st.lists(st.sampled_from(["0000:01:00.0", "0000:02:00.0", "0000:02:01.0", "0000:03:00.0"]), max_size=5)


@given(st.sampled_from(["pci0000:00", "pci0000:80"]), BRIDGES, BRIDGES, st.booleans())
def test_relation_is_symmetric_and_follows_the_host_bridge(bridge: str, a: list[str], b: list[str],
                                                           same_node: bool) -> None:
    first = ("pci0000:00", *a, "0000:aa:00.0")
    second = (bridge, *b, "0000:bb:00.0")
    found = relation(first, second, same_node=same_node)
    assert found is relation(second, first, same_node=same_node)
    if bridge != "pci0000:00":
        assert found is (Relation.NODE if same_node else Relation.SYS)
    else:
        assert found in (Relation.PIX, Relation.PXB, Relation.PHB)
        assert (found is Relation.PHB) == (not a or not b or a[0] != b[0])


def test_relation_counts_switches() -> None:
    root, up, down, down2, up2, down3 = ("pci0000:00", "0000:00:01.0", "0000:01:00.0", "0000:02:00.0",
                                         "0000:02:01.0", "0000:03:00.0")
    gpu = (root, up, down, down2, "0000:05:00.0")  # root port, switch (upstream, downstream), GPU
    assert relation(gpu, (root, up, down, up2, "0000:06:00.0"), same_node=True) is Relation.PIX
    deeper = (root, up, down, up2, down3, "0000:09:00.0", "0000:0a:00.0")
    assert relation(gpu, deeper, same_node=True) is Relation.PXB
    assert relation(gpu, (root, "0000:00:02.0", "0000:07:00.0"), same_node=True) is Relation.PHB
    functions = (root, up, "0000:04:00.0"), (root, up, "0000:04:00.1")  # two functions of one card
    assert relation(*functions, same_node=True) is Relation.PIX


def test_an_empty_network_answers_nothing() -> None:
    network = Network(())
    assert network.nearest("0000:18:00.0") == () and assign(network, [(0, "0000:18:00.0"), (1, None)]) == (None, None)


_HEX_TEXT = st.text(alphabet="0123456789abcdefABCDEFg:.p ci", max_size=16)


@given(st.one_of(_HEX_TEXT, st.from_regex(r"[0-9a-f]{4,8}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-9]", fullmatch=True),
                 st.from_regex(r"pci[0-9a-f]{3,9}:[0-9a-f]{1,3}", fullmatch=True)))
def test_pci_names_are_read_as_sysfs_writes_them(name: str) -> None:
    # The readers avoid the re module (its import is a start-up cost); the expressions here are the definition.
    import re

    from numapin.facts.pci import is_function as _is_bdf
    from numapin.facts.pci import is_host_bridge as _is_host_bridge

    assert _is_bdf(name) == bool(re.fullmatch(r"[0-9a-f]{4,8}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]", name))
    assert _is_host_bridge(name) == bool(re.fullmatch(r"pci[0-9a-f]{4,8}:[0-9a-f]{2}", name))


def test_a_port_folder_of_a_non_ascii_digit_is_no_port(tmp_path: Path) -> None:
    from numapin.facts import synthetic
    from numapin.facts.machine import gather

    root = synthetic.write("dgx-h100", tmp_path / "root")
    ports = next((root / "sys/class/infiniband").iterdir()).resolve() / "ports"
    (ports / "\u00b2").mkdir()  # isdigit() says yes, int() says no
    nic = next(n for n in gather(root, {}).network().nics if n.name == ports.parent.name)
    assert nic.ports and all(isinstance(p, int) for p in nic.ports)
