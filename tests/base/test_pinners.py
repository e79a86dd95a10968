"""The other pinners inside a worker (``numapin.base.pinners.PINNERS``): every mention of their variables held to the
table; each row's threads recognised as the library names them, or by its doing, and judged by the row; what
numapin sets so that they inherit its placement (and never over the caller's); their fights with it found."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import live
from conftest import REPO
from numapin.base import environment, pinners
from numapin.base.environment import RUNTIME_DIR
from numapin.base.pinners import PINNERS
from numapin.cpuset import CpuSet

NUMAPIN = [sys.executable, "-m", "numapin"]
#: A row's variable, wherever it is written: the families of names the libraries read.
_FAMILY = re.compile(r"\b(?:HSA|NCCL|UCX|UCCL|NIXL|SGLANG|GOMP|KMP)_[A-Z_0-9]+|\bTLLM_EXECUTOR_[A-Z_0-9]+|"
                     r"\bOMP_(?:PROC_BIND|PLACES)\b")


def _variables() -> set[str]:
    return {name for row in PINNERS.values()
            for name in (*row.steer, *(n for n, _ in row.inherit), *(n for n, _ in row.aside),
                         *(n for n, _, _ in row.fights))}


def test_every_mention_of_a_pinners_variable_is_the_tables() -> None:
    # In the code, the table alone writes them (base/environment names the variables numapin itself sets for NICs
    # and pools); in the docs, every such name is the table's, or one of base/environment's.
    known = _variables()
    ours = {value for value in vars(environment).values() if isinstance(value, str)} | {
        name for value in vars(environment).values() if isinstance(value, tuple) for name in value}
    outside = []
    for path in (REPO / "src" / "numapin").rglob("*.py"):
        if (path.name == "pinners.py" and path.parent.name == "base") or path.name == "environment.py":
            continue
        outside += [f"{path.relative_to(REPO)}: {name}" for name in _FAMILY.findall(path.read_text())
                    if name in known - ours]
    assert outside == [], "a pinner's variable is written outside base/pinners.py"
    unknown = [f"{path.name}: {name}" for path in [REPO / "README.md", *(REPO / "docs").glob("*.md")]
               for name in _FAMILY.findall(path.read_text()) if name not in known | ours]
    assert unknown == [], "the docs name a pinner's variable the table does not hold"


def test_the_family_pattern_finds_a_variable_the_table_lacks() -> None:
    # The check above can fail: a name of a family that is no row's is found.
    assert _FAMILY.findall("set NCCL_FROBNICATE=1 and OMP_PLACES=cores") == ["NCCL_FROBNICATE", "OMP_PLACES"]
    assert "NCCL_FROBNICATE" not in _variables()


def test_every_row_says_where_its_threads_belong_and_what_was_read() -> None:
    for key, row in PINNERS.items():
        assert row.belongs in pinners.WHERE and row.read, key
        assert all(len(name) <= 15 for name in row.threads), key  # a thread's name (comm) holds 15 characters


#: A worker placed on the CPUs this process may use, with a thread it names and narrows to the first of them.
_WORKER = """
import ctypes, os, sys, threading
name, cpu = sys.argv[1], int(sys.argv[2])
ready, stop = threading.Event(), threading.Event()
def run():
    with open(f"/proc/self/task/{threading.get_native_id()}/comm", "w") as comm:
        comm.write(name)
    os.sched_setaffinity(0, {cpu})
    ready.set()
    stop.wait()
threading.Thread(target=run, daemon=True).start()
ready.wait()
print("ready", flush=True)
sys.stdin.readline()
"""


def _judged(name: str, env: dict[str, str], tmp_path: Path) -> tuple[dict[str, object], dict[str, object]]:
    """A worker numapin exec placed on every CPU here, with a thread named ``name`` narrowed to one of them: the
    thread's row and the whole of ``threads --json``."""
    first = min(live.BASELINE)
    run_env = live.without_inputs(dict(os.environ)) | {RUNTIME_DIR: str(tmp_path / "records")} | env
    proc = subprocess.Popen([*NUMAPIN, "exec", "--cpus", str(CpuSet(live.BASELINE)), "--memory", "none", "--",
                             sys.executable, "-c", _WORKER, name, str(first)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True, env=run_env)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
        done = subprocess.run([*NUMAPIN, "threads", str(proc.pid), "--json"], capture_output=True, text=True,
                              timeout=60, env=run_env)
        report = json.loads(done.stdout)
        text = subprocess.run([*NUMAPIN, "threads", str(proc.pid)], capture_output=True, text=True, timeout=60,
                              env=run_env).stdout
        wide = subprocess.run([*NUMAPIN, "ps", str(proc.pid), "--wide"], capture_output=True, text=True, timeout=60,
                              env=run_env).stdout
        doctor = json.loads(subprocess.run([*NUMAPIN, "doctor", "--pid", str(proc.pid), "--json"],
                                           capture_output=True, text=True, timeout=60, env=run_env).stdout)
    finally:
        proc.kill()
        proc.wait()
    (row,) = [t for t in report["threads"] if t["name"] == name[:15]]
    return row, {**report, "text": text, "wide": wide,
                 "doctor": [f["sees"] for f in doctor["findings"] if f["id"] == "other-pinners"]}


@pytest.mark.skipif(len(live.BASELINE) < 2, reason="a slice needs a placement of two CPUs or more")
@pytest.mark.parametrize(("name", "env", "library"), [
    ("NCCL Progress 0", {}, "NCCL (RCCL)"),
    ("NCCL GIN Progress 0", {}, "NCCL (RCCL)"),  # as NCCL names it: the kernel keeps 15 characters
    ("async", {"UCX_TLS": "rc"}, "UCX"),
    ("pt_data_pin", {}, "PyTorch's DataLoader"),
    ("loop", {"TLLM_EXECUTOR_LOOP_PIN": "1"}, "TensorRT-LLM's executor loop"),  # no row's name: its slice, its switch
])
def test_a_librarys_thread_is_named_by_its_row_and_judged_narrowed_not_misplaced(
        name: str, env: dict[str, str], library: str, tmp_path: Path) -> None:
    row, report = _judged(name, env, tmp_path)
    assert (row["pinner"], row["narrowed"], row["inside"]) == (library, True, True), row
    assert report["verdict"] == "ok", report
    said = f"{library}: 1 thread on CPUs {min(live.BASELINE)}"
    text = str(report["text"])
    assert "narrowed" in text and said in text, text
    assert f"crowd: {report['pid']}: {said}" in str(report["wide"]), report["wide"]  # ps --wide names it too
    assert any(said in sees for sees in report["doctor"]), report["doctor"]  # and doctor --pid


@pytest.mark.skipif(len(live.BASELINE) < 2, reason="a slice needs a placement of two CPUs or more")
def test_a_common_thread_name_is_a_librarys_only_where_its_signs_are(tmp_path: Path) -> None:
    row, _ = _judged("async", {}, tmp_path)  # no UCX_ variable: any library's async thread
    assert row["pinner"] is None and row["narrowed"] is True, row


def test_rocrs_unnamed_helpers_are_known_by_their_mask_of_every_cpu() -> None:
    from numapin.observe.judge import _pinner

    everywhere = CpuSet(range(os.cpu_count() or 1)) | CpuSet(live.BASELINE)
    assert _pinner(None, everywhere, False, {}, "amd") == "rocr"
    assert _pinner(None, everywhere, False, {"HSA_OVERRIDE_CPU_AFFINITY_DEBUG": "1"}, "amd") == "rocr"
    assert _pinner(None, everywhere, False, {"HSA_OVERRIDE_CPU_AFFINITY_DEBUG": "0"}, "amd") is None  # it inherits
    assert _pinner(None, everywhere, False, {}, "nvidia") is None  # no ROCr in an NVIDIA GPU's worker
    assert _pinner(None, CpuSet([min(live.BASELINE)]), True, {}, "amd") is None  # inside: nobody's doing to name


def _dry_run(machine: str, **env: str) -> dict[str, dict[str, str]]:
    done = subprocess.run([*NUMAPIN, "exec", "--machine", machine, "--local-rank", "1", "--dry-run", "--json", "--",
                           "true"], capture_output=True, text=True, timeout=60,
                          env=live.without_inputs(dict(os.environ)) | env)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)["crowd"]  # type: ignore[no-any-return]


def test_exec_hands_an_amd_gpus_worker_what_makes_rocrs_helpers_inherit_never_over_the_callers() -> None:
    assert _dry_run("mi300x") == {"set": {"HSA_OVERRIDE_CPU_AFFINITY_DEBUG": "0"}, "kept": {}}
    assert "HSA_OVERRIDE_CPU_AFFINITY_DEBUG" not in _dry_run("dgx-h100")["set"]
    assert _dry_run("dgx-h100")["set"] == {"NCCL_SET_THREAD_NAME": "1"}  # NCCL's threads named, to be known
    kept = _dry_run("mi300x", HSA_OVERRIDE_CPU_AFFINITY_DEBUG="1")
    assert kept == {"set": {}, "kept": {"HSA_OVERRIDE_CPU_AFFINITY_DEBUG": "1"}}


def test_the_start_up_hook_sets_it_before_the_runtime_could_read_it(python: object, tmp_path: Path) -> None:
    # An AMD GPU's worker (rank 1 of the MI300X machine, read from a folder): the first line of the program, before
    # any import of a runtime, already sees the variable; a value the caller set is kept.
    from numapin.facts import synthetic

    root = synthetic.write("mi300x", tmp_path / "mi300x")
    code = "import os; print(os.environ.get('HSA_OVERRIDE_CPU_AFFINITY_DEBUG'))"
    env = {"NUMAPIN_AUTOPIN": "1", "LOCAL_RANK": "1", "NUMAPIN_FSROOT": str(root), "NUMAPIN_MEMORY": "none",
           RUNTIME_DIR: str(tmp_path / "records")}
    first = python("-c", code, **env)  # type: ignore[operator]
    assert first.stdout.strip() == "0", first.stderr
    kept = python("-c", code, **env, HSA_OVERRIDE_CPU_AFFINITY_DEBUG="1")  # type: ignore[operator]
    assert kept.stdout.strip() == "1", kept.stderr


def _empty_torch(into: Path) -> Path:
    """A package named torch that does nothing: what a server imports before it starts its workers."""
    (into / "torch").mkdir(parents=True)
    (into / "torch" / "__init__.py").write_text("")
    return into


def test_a_server_that_names_its_gpus_later_sets_sglangs_binder_aside(pair_root: Path, tmp_path: Path) -> None:
    # Two GPUs in view, no rank (an SGLang server): at its import of torch (before it starts a scheduler), what it
    # starts inherits SGLang's step aside, and numapin places each scheduler when it names its GPU. A process that
    # never imports torch is left as it was; a value the caller set stays.
    from child import in_child

    folder = _empty_torch(tmp_path / "fake")

    def child(preset: dict[str, str]) -> tuple[str | None, dict[str, str | None]]:
        import sys

        from numapin import startup

        os.environ.update({"NUMAPIN_AUTOPIN": "1", **preset})
        startup.activate(os.environ)
        before = os.environ.get("SGLANG_AUTO_NUMA_BIND")
        sys.path.insert(0, str(folder))
        import torch  # noqa: F401  (the empty one)

        return before, {name: os.environ.get(name) for name in ("SGLANG_AUTO_NUMA_BIND", "NCCL_SET_THREAD_NAME")}

    before, after = in_child(lambda: child({}))
    assert before is None and after == {"SGLANG_AUTO_NUMA_BIND": "0", "NCCL_SET_THREAD_NAME": "1"}
    assert in_child(lambda: child({"SGLANG_AUTO_NUMA_BIND": "1"}))[1]["SGLANG_AUTO_NUMA_BIND"] == "1"


@pytest.mark.parametrize(("env", "vendor", "finding"), [
    ({}, "amd", "rocr-affinity"),
    ({"HSA_OVERRIDE_CPU_AFFINITY_DEBUG": "0"}, "amd", None),
    ({}, "nvidia", None),
    ({"NCCL_IGNORE_CPU_AFFINITY": "1"}, "nvidia", "nccl-affinity"),
    ({"UCCL_NUM_PROXIES": "4"}, "nvidia", "uccl-affinity"),
    ({"UCCL_NUM_PROXIES": "4", "UCCL_EP_DISABLE_CPU_AFFINITY": "1"}, "nvidia", None),
    ({"OMP_PLACES": "cores"}, None, "openmp-affinity"),
    ({"OMP_PROC_BIND": "false"}, None, None),
], ids=["rocr-default", "rocr-inherits", "no-rocr", "nccl-ignores", "uccl-pins", "uccl-off", "omp-places",
        "omp-off"])
def test_a_library_turned_against_the_placement_is_a_finding_with_its_fix(
        env: dict[str, str], vendor: str | None, finding: str | None) -> None:
    from numapin.tools.doctor.launcher import crowd_findings

    found = crowd_findings(env, vendor)
    assert [f.id for f in found] == ([finding] if finding else [])
    for f in found:
        fixes = [fix for key, row in PINNERS.items() if f.id.startswith(key) for _, _, fix in row.fights]
        assert f.fix in fixes or any(fix in f.fix for fix in fixes), f


def test_a_proxy_on_its_nics_node_is_judged_by_its_row_not_misplaced(tmp_path: Path) -> None:
    # UCCL pins its proxy threads to its NIC's node. A worker placed on a slice of that node (mode exclusive) holds
    # one there: outside the placement, where the table says it belongs; known only where UCCL is in the process.
    from numapin.facts import synthetic
    from numapin.facts.machine import cached
    from numapin.observe.judge import on_nic_node

    facts = cached(synthetic.write("dgx-h100", tmp_path / "dgx"), {})
    gpu = facts.inventory.gpus[0]
    nics = facts.network().nearest(gpu.pci)
    assert nics, "the DGX H100 gives each GPU a NIC"
    node = nics[0].cpus
    assert on_nic_node(node, {"UCCL_NUM_PROXIES": "4"}, facts, gpu.pci) == "uccl"
    assert on_nic_node(node, {}, facts, gpu.pci) is None  # no UCCL here: whoever did it, it stays outside
    elsewhere = facts.topology.online - node
    assert on_nic_node(elsewhere, {"UCCL_NUM_PROXIES": "4"}, facts, gpu.pci) is None  # not on its NIC's node


def test_a_server_on_an_amd_host_hands_its_workers_rocrs_inheritance_before_they_start(python: object,
                                                                                       tmp_path: Path) -> None:
    # The MI300X machine's eight GPUs in view, no rank (vLLM's or SGLang's server): from its import of torch, what
    # it starts inherits HSA_OVERRIDE_CPU_AFFINITY_DEBUG=0 (the glance's vendor: one look at the PCI devices) and
    # SGLang's step aside.
    from numapin.facts import synthetic

    root = synthetic.write("mi300x", tmp_path / "mi300x")
    code = ("import os, torch; print(os.environ.get('HSA_OVERRIDE_CPU_AFFINITY_DEBUG'), "
            "os.environ.get('SGLANG_AUTO_NUMA_BIND'), os.environ.get('NCCL_SET_THREAD_NAME'))")
    done = python("-c", code, NUMAPIN_AUTOPIN="1", NUMAPIN_FSROOT=str(root),  # type: ignore[operator]
                  PYTHONPATH=str(_empty_torch(tmp_path / "fake")), **{RUNTIME_DIR: str(tmp_path / "records")})
    assert done.stdout.split() == ["0", "0", "None"], done.stdout + done.stderr
