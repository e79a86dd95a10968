"""numapin doctor: each finding on a root or environment that produces it, and a clean case that produces none."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import live
from live import NODE0, NODE1, without_inputs
from numapin.cpuset import CpuSet
from numapin.facts import synthetic as machines
from numapin.facts.synthetic import MachineSpec
from numapin.tools.doctor import diagnose

NUMAPIN = [sys.executable, "-m", "numapin"]


def ids(found: object) -> list[str]:
    return [f.id for f in found.findings]  # type: ignore[attr-defined]


@pytest.fixture
def pair(tmp_path: Path) -> Path:
    """The pair root (GPU 0 on NODE0, GPU 1 on NODE1) with NUMA balancing off."""
    if not NODE0 or not NODE1:
        pytest.skip(f"needs allowed CPUs on both halves of the machine (allowed: {live.BASELINE})")
    root = live.write_pair(tmp_path / "pair")
    balance(root, 0)
    return root


def balance(root: Path, value: int) -> None:
    path = root / "proc/sys/kernel/numa_balancing"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"{value}\n")


def clean() -> dict[str, str]:
    """An environment with nothing to find for GPU 0 of the pair root: its pools sized to its node."""
    return {"OMP_NUM_THREADS": str(len(NODE0))}


def doctor_cli(root: Path, env: dict[str, str], *args: str) -> tuple[int, dict[str, object]]:
    proc = subprocess.run([*NUMAPIN, "doctor", "--root", str(root), "--gpu", "0", "--json", *args],
                          capture_output=True, text=True, env={**without_inputs(dict(os.environ)), **env})
    return proc.returncode, json.loads(proc.stdout) if proc.stdout else {"stderr": proc.stderr}


def test_a_launchers_binding_openmp_oversized_pools_and_numa_balancing_each_found_and_the_clean_case(
        pair: Path) -> None:
    outside = min(NODE1)  # a CPU that is not GPU 0's
    balance(pair, 1)
    env = {"OMP_NUM_THREADS": "64", "KMP_AFFINITY": "compact", "SLURM_CPU_BIND": f"map_cpu:{outside}"}
    code, report = doctor_cli(pair, env)
    findings = report["findings"]
    assert isinstance(findings, list)
    assert sorted(f["id"] for f in findings) == ["launcher-binding", "numa-balancing", "openmp-affinity",
                                                 "thread-pool-oversized"]
    assert code == 1 and all(f["sees"] and f["why"] and f["fix"] for f in findings)
    balance(pair, 0)
    code, report = doctor_cli(pair, clean())
    assert (code, report["findings"]) == (0, [])


@pytest.mark.parametrize(("env", "expected", "severity"), [
    ({"SLURM_CPU_BIND": "quiet,cores"}, "launcher-binding", "warning"),
    ({"SLURM_CPU_BIND": "none"}, None, None),
    ({"OMPI_MCA_hwloc_base_binding_policy": "core"}, "launcher-binding", "warning"),
    ({"OMPI_MCA_hwloc_base_binding_policy": "none"}, None, None),
    ({"OMP_PROC_BIND": "close"}, "openmp-affinity", "warning"),
    ({"OMP_PROC_BIND": "false", "KMP_AFFINITY": "disabled"}, None, None),
    ({"MKL_NUM_THREADS": "1000"}, "thread-pool-oversized", "warning"),
    ({"OMP_NUM_THREADS": "1000,2"}, "thread-pool-oversized", "warning"),
    ({"CUDA_VISIBLE_DEVICES": ""}, "no-placement", "error"),
], ids=["slurm-cores", "slurm-none", "ompi-core", "ompi-none", "omp-bind", "omp-off", "mkl", "omp-nested",
        "no-gpu"])
def test_environment_findings(pair: Path, env: dict[str, str], expected: str | None, severity: str | None) -> None:
    found = diagnose({**clean(), **env}, gpu=0 if "CUDA_VISIBLE_DEVICES" not in env else None, root=pair)
    assert ids(found) == ([expected] if expected else [])
    if expected:
        assert found.findings[0].severity == severity and found.exit_code == 1


def test_slurm_mask_inside_the_node_is_no_finding(pair: Path) -> None:
    inside = CpuSet(NODE0)
    found = diagnose({**clean(), "SLURM_CPU_BIND": f"quiet,mask_cpu:{hex(inside.bits)}"}, gpu=0, root=pair)
    assert ids(found) == []


def test_unset_pools_default_to_the_whole_machine(pair: Path) -> None:
    assert ids(diagnose({}, gpu=0, root=pair)) == ["thread-pool-default"]


def test_another_process_mask_and_threads(pair: Path) -> None:
    # A process a launcher pinned away from GPU 0, with more threads than GPU 0's CPUs.
    code = "import threading, time; [threading.Thread(target=time.sleep, args=(30,), daemon=True).start() " \
           f"for _ in range({len(NODE0) + 1})]; print('up', flush=True); time.sleep(30)"
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                             env={**without_inputs(dict(os.environ)), **clean()},
                             preexec_fn=lambda: os.sched_setaffinity(0, NODE1))
    try:
        assert child.stdout is not None and child.stdout.readline() == "up\n"
        found = diagnose(gpu=0, root=pair, pid=child.pid)
    finally:
        child.kill()
        child.wait()
    # On node 1, judged for GPU 0 (node 0): the one verdict is misplaced, and doctor says it too.
    assert sorted(ids(found)) == ["external-mask", "live-threads", "misplaced"]
    severities = {f.id: f.severity for f in found.findings}
    assert severities == {"external-mask": "error", "live-threads": "info", "misplaced": "error"}
    assert found.verdict == "misplaced"


def test_bad_input_exits_2(pair: Path) -> None:
    for args in (["--local-rank", "x"], ["--pid", str(2**22 + 7)]):
        proc = subprocess.run([*NUMAPIN, "doctor", "--root", str(pair), *args], capture_output=True, text=True)
        assert proc.returncode == 2 and proc.stderr.startswith("numapin doctor: "), (args, proc.stderr)


# -- the machine's own findings, each on a root edited to show it ---------------------------------


def _edit(make: Callable[[Path], Path], edit: Callable[[Path], None], tmp_path: Path) -> Path:
    root = make(tmp_path / "root")
    balance(root, 0)
    edit(root)
    return root


def _gpu_dirs(root: Path) -> list[Path]:
    return sorted((root / "proc/driver/nvidia/gpus").iterdir())


def test_a_cgroup_that_cuts_the_node(tmp_path: Path) -> None:
    spec = MachineSpec("cut", sockets=2, cores_per_socket=2, gpus_per_node=1)
    root = machines.write(spec, tmp_path / "root", cgroup_cpus=CpuSet("1-3"))
    balance(root, 0)
    found = diagnose({"OMP_NUM_THREADS": "1"}, gpu=0, root=root)
    assert ids(found) == ["cgroup-cuts-node"] and found.findings[0].severity == "warning"


def test_a_cgroup_that_excludes_the_gpus_memory(tmp_path: Path) -> None:
    def edit(root: Path) -> None:
        (root / "sys/fs/cgroup/cpuset.mems.effective").write_text("1\n")

    root = _edit(lambda d: machines.write(MachineSpec("mems", sockets=2, cores_per_socket=1, gpus_per_node=1), d),
                 edit, tmp_path)
    assert ids(diagnose({"OMP_NUM_THREADS": "1"}, gpu=0, root=root)) == ["cgroup-excludes-memory"]


def test_gpus_sharing_a_node_in_mode_node(machine_root: Callable[[str], Path]) -> None:
    root = machine_root("dgx-h100")
    balance(root, 0)
    env = {"OMP_NUM_THREADS": "1"}
    found = diagnose(env, gpu=0, root=root)
    assert ids(found) == ["shared-node"] and found.exit_code == 0  # the default mode: said, not a warning
    assert "each rank's share is 28" in found.findings[0].sees
    assert ids(diagnose(env, gpu=0, root=root, mode="exclusive")) == []


def test_mixed_models_without_pci_order(tmp_path: Path) -> None:
    def edit(root: Path) -> None:
        info = _gpu_dirs(root)[1] / "information"
        info.write_text(info.read_text().replace("H100 80GB HBM3", "A100-SXM4-80GB"))

    spec = MachineSpec("mixed", sockets=2, cores_per_socket=1, gpus_per_node=1)
    root = _edit(lambda d: machines.write(spec, d), edit, tmp_path)
    assert ids(diagnose({"OMP_NUM_THREADS": "1"}, gpu=0, root=root)) == ["mixed-gpu-models"]
    assert ids(diagnose({"OMP_NUM_THREADS": "1", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}, gpu=0, root=root)) == []


def test_a_gpu_without_a_numa_node(tmp_path: Path) -> None:
    def edit(root: Path) -> None:
        for device in (root / "sys/bus/pci/devices").iterdir():
            node = device / "numa_node"
            if node.exists() and (device / "class").read_text().startswith("0x03"):
                node.write_text("-1\n")

    spec = MachineSpec("nonode", sockets=1, cores_per_socket=2, gpus_per_node=1)
    root = _edit(lambda d: machines.write(spec, d), edit, tmp_path)
    found = diagnose({"OMP_NUM_THREADS": "1"}, gpu=0, root=root)
    assert ids(found) == ["gpu-node-unknown"] and "taken as node 0" in found.findings[0].sees


# -- Slurm's binding, read as srun writes it ------------------------------------------


@pytest.mark.parametrize(("listing", "error"), [("0,1", False), ("1,0", True)])
def test_a_map_cpu_list_is_read_whole_for_each_task(listing: str, error: bool) -> None:
    # srun --cpu-bind=quiet,map_cpu:0,1 for task 1 (GPU 1 on CPU 1 of the pair machine): its entry is 1.
    env = {**without_inputs(dict(os.environ)), "SLURM_CPU_BIND": f"quiet,map_cpu:{listing}",
           "SLURM_CPU_BIND_LIST": listing, "SLURM_CPU_BIND_TYPE": "map_cpu:", "SLURM_LOCALID": "1"}
    proc = subprocess.run([*NUMAPIN, "doctor", "--local-rank", "auto", "--machine", "pair", "--json"], env=env,
                          capture_output=True, text=True, timeout=60)
    found = [f for f in json.loads(proc.stdout)["findings"] if f["id"] == "launcher-binding"]
    assert [f["severity"] for f in found] == (["error"] if error else []), found
    if error:
        assert "CPU 0 (map_cpu" in found[0]["sees"]


@pytest.fixture(scope="module")
def nps4(tmp_path_factory: pytest.TempPathFactory) -> object:
    from numapin.facts.topology import read_topology

    return read_topology(str(machines.write("epyc-nps4", tmp_path_factory.mktemp("nps4") / "root")))


@pytest.mark.parametrize(("env", "rank", "kind", "cpus"), [
    ({"SLURM_CPU_BIND": "quiet,map_cpu:5,7"}, 1, "map_cpu", "7"),
    ({"SLURM_CPU_BIND": "verbose,map_cpu:5,7"}, 2, "map_cpu", "5"),  # fewer entries than tasks: reused
    ({"SLURM_CPU_BIND": "mask_cpu:0x3,C"}, 1, "mask_cpu", "2-3"),
    ({"SLURM_CPU_BIND": "quiet,map_ldom:1,0"}, 0, "map_ldom", "16-31,144-159"),
    ({"SLURM_CPU_BIND": "mask_ldom:0x1,0x6"}, 1, "mask_ldom", "16-47,144-175"),
    ({"SLURM_CPU_BIND": "quiet,rank"}, 3, "rank", "3"),
    ({"SLURM_CPU_BIND": "rank_ldom"}, 9, "rank_ldom", "16-31,144-159"),
    ({"SLURM_CPU_BIND_TYPE": "map_cpu:", "SLURM_CPU_BIND_LIST": "4,6", "SLURM_CPU_BIND": "quiet,map_cpu:4,6"}, 1,
     "map_cpu", "6"),
    ({"SLURM_CPU_BIND": "quiet,cores"}, 0, "cores", None),
    ({"SLURM_CPU_BIND": "quiet,none"}, 0, None, None),
    ({"SLURM_CPU_BIND": "quiet"}, 0, None, None),
    ({}, 0, None, None),
])
def test_every_slurm_binding_type(nps4: object, env: dict[str, str], rank: int, kind: str | None,
                                  cpus: str | None) -> None:
    from numapin.tools.doctor import slurm_binding

    found_kind, found = slurm_binding(env, rank, nps4)  # type: ignore[arg-type]
    assert (found_kind, None if found is None else str(found)) == (kind, cpus)


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="quietverbosmap_cpulkdnr:,0123456789xabcdefABCDEF ", max_size=40),
       st.text(alphabet="0123456789xabcdef,", max_size=20), st.integers(0, 500))
def test_any_slurm_value_is_read_without_error(nps4: object, bind: str, listing: str, rank: int) -> None:
    from numapin.tools.doctor import slurm_binding

    kind, cpus = slurm_binding({"SLURM_CPU_BIND": bind, "SLURM_CPU_BIND_LIST": listing}, rank, nps4)  # type: ignore[arg-type]
    assert kind is not None or cpus is None


def test_the_live_mask_is_judged_under_a_synthetic_root(tmp_path: Path) -> None:
    # taskset -c 0 numapin doctor --machine pair --gpu 1: the live mask (CPU 0) is someone else's and
    # keeps the process off GPU 1's CPU, whatever the synthetic proc/self/status says.
    if not NODE0 or not NODE1:
        pytest.skip("needs two CPUs")
    cpu = min(NODE0)
    proc = subprocess.run(["taskset", "-c", str(cpu), *NUMAPIN, "doctor", "--machine", "pair", "--gpu", "1",
                           "--json"], env=without_inputs(dict(os.environ)), capture_output=True, text=True,
                          timeout=60)
    found = [f["id"] for f in json.loads(proc.stdout)["findings"]]
    assert "external-mask" in found


# -- interrupts -----------------------------------------------------------------


def _irqs(root: Path, pci: str) -> list[int]:
    return sorted(int(n.name) for n in (root / "sys/bus/pci/devices" / pci / "msi_irqs").iterdir())


def _deliver(root: Path, irqs: list[int], cpus: str) -> None:
    for irq in irqs:
        (root / f"proc/irq/{irq}/effective_affinity_list").write_text(f"{cpus}\n")
        (root / f"proc/irq/{irq}/smp_affinity_list").write_text(f"{cpus}\n")


def dgx_doctor(root: Path, *args: str, **env: str) -> tuple[int, list[dict[str, str]]]:
    # GPU 3 of four on its node, its share of the node's cores: nothing else to find.
    proc = subprocess.run([*NUMAPIN, "doctor", "--root", str(root), "--local-rank", "3", "--mode", "exclusive",
                           "--json", *args], capture_output=True, text=True,
                          env={**without_inputs(dict(os.environ)), "OMP_NUM_THREADS": "28", **env})
    return proc.returncode, json.loads(proc.stdout)["findings"]


def test_interrupts_on_the_other_node_are_found_with_their_fix(tmp_path: Path) -> None:
    root = machines.write("dgx-h100", tmp_path / "root")
    code, findings = dgx_doctor(root)
    assert (code, findings) == (0, []), "the synthetic machine delivers every interrupt on its device's node"
    nic_irqs = _irqs(root, "0000:35:00.0")  # mlx5_5, GPU 3's NIC
    _deliver(root, nic_irqs, "60")  # a CPU of node 1
    code, findings = dgx_doctor(root)
    assert code == 1 and [f["id"] for f in findings] == ["irq-other-node"]
    found = findings[0]
    assert "mlx5_5" in found["sees"] and "off its node 0" in found["sees"] and "CPUs 60" in found["sees"]
    assert found["fix"] == (f"for N in {' '.join(map(str, nic_irqs))}; do echo 0-55,112-167 > "
                            "/proc/irq/$N/smp_affinity_list; done")
    assert found["severity"] == "warning"
    gpu_irqs = _irqs(root, "0000:48:00.0")
    _deliver(root, gpu_irqs, "100-103")
    _, findings = dgx_doctor(root)
    assert sum("GPU 3 (0000:48:00.0)" in f["sees"] for f in findings) == 1


def test_irqbalance_will_move_them(tmp_path: Path) -> None:
    root = machines.write("dgx-h100", tmp_path / "root")
    (root / "proc/4242").mkdir(parents=True)
    (root / "proc/4242/comm").write_text("irqbalance\n")
    code, findings = dgx_doctor(root)
    assert (code, [(f["id"], f["severity"]) for f in findings]) == (0, [("irqbalance", "info")])
    assert "moves interrupts" in findings[0]["why"]
    _deliver(root, _irqs(root, "0000:35:00.0"), "60")
    code, findings = dgx_doctor(root)
    assert code == 1 and [(f["id"], f["severity"]) for f in findings] == [("irq-other-node", "warning"),
                                                                          ("irqbalance", "warning")]
    assert "irqbalance (PID 4242) would move them back" in findings[0]["fix"]


def test_interrupts_on_the_reserved_cores(tmp_path: Path) -> None:
    root = machines.write("dgx-h100", tmp_path / "root")
    hot = plan_reserved(root)
    _deliver(root, _irqs(root, "0000:48:00.0")[:1], str(hot.first()))
    code, findings = dgx_doctor(root, NUMAPIN_RESERVED=str(hot))
    assert code == 1 and [f["id"] for f in findings] == ["irq-on-reserved"]
    assert str(hot) in findings[0]["sees"]
    code, findings = dgx_doctor(root)
    assert (code, findings) == (0, []), "without reserved cores the interrupt is on the worker's own node"


def plan_reserved(root: Path) -> CpuSet:
    from numapin import plan

    return plan(3, mode="exclusive", reserve=1, root=root, environ={}).reserved


def test_numa_balancing_says_what_it_costs(pair: Path) -> None:
    balance(pair, 1)
    _, report = doctor_cli(pair, clean())
    findings = report["findings"]
    assert isinstance(findings, list)
    assert "16-31 ms stalls" in next(f["why"] for f in findings if f["id"] == "numa-balancing")


def test_an_interrupt_is_the_devices_only_when_its_handler_names_that_device(tmp_path: Path) -> None:
    from numapin.facts.host import Host
    from numapin.facts.interrupts import device_irqs

    root = machines.write("dgx-h100", tmp_path / "root")
    lines = ["           CPU0       CPU1",
             " 900:          1          0  PCI-MSI 1  edge      nvme0q1@pci:10000:18:00.0",  # a VMD domain's NVMe
             " 901:          1          0  PCI-MSI 2  edge      vfio-msix[0](0000:18:00.01)",
             " 902:          1          0  PCI-MSI 3  edge      mlx5_comp0@pci:0000:18:00.0"]
    (root / "proc/interrupts").write_text("\n".join(lines) + "\n")
    found = {irq.number for irq in device_irqs(Host(str(root)), ["0000:18:00.0"])["0000:18:00.0"]}
    assert 902 in found and not found & {900, 901}


def test_a_large_hosts_interrupts_are_read_whole(tmp_path: Path) -> None:
    # /proc/interrupts of a many-CPU host runs past 64 KiB: the device's line at its end still counts.
    from numapin.facts.host import Host
    from numapin.facts.interrupts import device_irqs

    root = machines.write("dgx-h100", tmp_path / "root")
    filler = [f" {n}:          1          0  PCI-MSI {n}  edge      other{n}" for n in range(1000, 4000)]
    last = " 4000:          1          0  PCI-MSI 9  edge  mlx5_comp0@pci:0000:18:00.0"
    text = "\n".join(["           CPU0       CPU1", *filler, last]) + "\n"
    assert 65_536 < len(text) < 1 << 20
    (root / "proc/interrupts").write_text(text)
    host = Host(str(root))
    assert host.read("proc/interrupts") == text
    assert 4000 in {irq.number for irq in device_irqs(host, ["0000:18:00.0"])["0000:18:00.0"]}


def test_the_variables_without_the_start_up_file_are_an_error(tmp_path: Path) -> None:
    from numapin.base.environment import AUTOPIN, PATCH
    from numapin.tools.doctor import STARTUP_FILE, startup_file

    folders = [str(tmp_path)]
    found = startup_file({AUTOPIN: "1", PATCH: "vllm"}, folders)
    assert [f.id for f in found] == ["startup-file-missing"] and "NUMAPIN_AUTOPIN and NUMAPIN_PATCH" in found[0].sees
    assert startup_file({AUTOPIN: "0"}, folders) == [] and startup_file({}, folders) == []
    (tmp_path / STARTUP_FILE).write_text("import os\n")
    assert startup_file({AUTOPIN: "1"}, folders) == []


def test_the_interrupt_fixes_agree_and_say_how_many(tmp_path: Path) -> None:
    # "1 of the 1 interrupt"; and irq-other-node's fix moved interrupts onto the reserved cores
    # that irq-on-reserved moves them off.
    root = machines.write("dgx-h100", tmp_path / "root")
    hot = plan_reserved(root)
    nic_irqs = _irqs(root, "0000:35:00.0")  # mlx5_5, GPU 3's NIC
    assert len(nic_irqs) > 1
    _deliver(root, nic_irqs[:1], "100")  # one of them on node 1
    _, findings = dgx_doctor(root, NUMAPIN_RESERVED=str(hot))
    other = next(f for f in findings if f["id"] == "irq-other-node")
    assert other["sees"].startswith(f"1 of the {len(nic_irqs)} interrupts of mlx5_5") and " goes to " in other["sees"]
    moved_to = CpuSet(other["fix"].split("echo ")[1].split(" >")[0])
    assert moved_to and not moved_to & hot, "the fix keeps the reserved cores free"
    _deliver(root, nic_irqs, "100")
    _, findings = dgx_doctor(root)
    assert next(f for f in findings if f["id"] == "irq-other-node")["sees"].startswith(
        f"all {len(nic_irqs)} interrupts of mlx5_5")
    gpu_irqs = _irqs(root, "0000:48:00.0")
    _deliver(root, gpu_irqs, "100")
    _, findings = dgx_doctor(root)
    said = [f["sees"] for f in findings if f["sees"].startswith(("its one", "1 of the")) and "of GPU 3 (" in f["sees"]]
    assert len(said) == 1 and "1 of the 1" not in said[0]


def test_doctor_with_no_gpu_does_not_judge_by_one(tmp_path: Path) -> None:
    root = machines.write("dgx-h100", tmp_path / "root")
    proc = subprocess.run([*NUMAPIN, "doctor", "--root", str(root)], capture_output=True, text=True,
                          env={**without_inputs(dict(os.environ)), "CUDA_VISIBLE_DEVICES": ""})
    assert "its one visible GPU" not in proc.stdout and "no-placement" in proc.stdout, proc.stdout


def test_doctor_reserve_judges_as_exec_reserve_places(tmp_path: Path) -> None:
    # Doctor had no --reserve; the reserved cores came only from NUMAPIN_RESERVED.
    root = machines.write("dgx-h100", tmp_path / "root")
    hot = plan_reserved(root)
    _deliver(root, _irqs(root, "0000:48:00.0")[:1], str(hot.first()))
    code, findings = dgx_doctor(root, "--reserve", "1")
    reserved = [f for f in findings if f["id"] == "irq-on-reserved"]
    assert code == 1 and len(reserved) == 1 and str(hot) in reserved[0]["sees"]
    _, without = dgx_doctor(root)
    assert "irq-on-reserved" not in [f["id"] for f in without]


REGISTER = {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True,pinned_use_cuda_host_register:True"}


@pytest.mark.skipif(not NODE0 or not NODE1, reason="needs CPUs on both nodes of the pair machine")
@pytest.mark.parametrize(("conf", "cpus", "found"), [
    (REGISTER["PYTORCH_CUDA_ALLOC_CONF"], None, True),  # this process's mask: both nodes
    ("pinned_use_cuda_host_register: true", None, True),
    ("pinned_use_cuda_host_register:False", None, False),
    ("pinned_num_register_threads:8", None, False),
    (REGISTER["PYTORCH_CUDA_ALLOC_CONF"], "node0", False),  # wholly on one node: the pool's threads inherit it
])
def test_pytorchs_register_pool_is_named_where_the_process_spans_nodes(pair: Path, conf: str, cpus: str | None,
                                                                        found: bool) -> None:
    env = {**without_inputs(dict(os.environ)), "NUMAPIN_FSROOT": str(pair), "PYTORCH_CUDA_ALLOC_CONF": conf,
           "LOCAL_RANK": "0"}
    command = [sys.executable, "-m", "numapin", "doctor", "--json"]
    if cpus is not None:
        command = ["taskset", "-c", live.cpus(NODE0), *command]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=60)
    found_ids = [f["id"] for f in json.loads(done.stdout)["findings"]]
    assert ("pinned-register-pool-unbound" in found_ids) is found, done.stdout


def test_a_process_seeing_gpus_on_several_nodes_without_a_rank_is_told(pair: Path) -> None:
    def said(env: dict[str, str], *args: str) -> list[str]:
        done = subprocess.run([*NUMAPIN, "doctor", "--root", str(pair), "--json", *args], capture_output=True,
                              text=True, env={**without_inputs(dict(os.environ)), **env}, timeout=60)
        return [str(f["id"]) for f in json.loads(done.stdout)["findings"]]

    assert "gpus-on-several-nodes" in said({})
    for more, args in (({"LOCAL_RANK": "1"}, ()), ({"CUDA_VISIBLE_DEVICES": "1"}, ()), ({}, ("--gpu", "1"))):
        assert "gpus-on-several-nodes" not in said(more, *args), (more, args)


def test_every_check_is_one_function_of_a_case_listed_once(pair: Path) -> None:
    # doctor's checks are a table: each takes the one case (read once) and gives its findings; diagnose is the
    # loop over them, so what the checks give, in the table's order, is the diagnosis.
    import inspect

    from numapin.tools.doctor.case import Asked, gather
    from numapin.tools.doctor.checks import CHECKS

    assert len(CHECKS) == len(set(CHECKS)) >= 15
    assert all(list(inspect.signature(check).parameters) == ["case"] for check in CHECKS), CHECKS
    env = {"OMP_NUM_THREADS": "999", "SLURM_CPU_BIND": "verbose,map_cpu:0"}
    case = gather(env, Asked(gpu=0, root=str(pair)))
    found = [f for check in CHECKS for f in check(case)]
    assert all(isinstance(f, type(found[0])) for f in found) and {"thread-pool-oversized"} <= {f.id for f in found}
    assert tuple(found) == diagnose(env, gpu=0, root=str(pair)).findings
