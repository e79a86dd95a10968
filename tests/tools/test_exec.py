"""``numapin exec`` for real: the program replaces numapin and reports what it inherited."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from live import ALL, NODE0, NODE1, NODE1_REAL, cpus, without_inputs
from numapin.base.environment import LOCAL_RANK_VARIABLES
from numapin.cpuset import CpuSet
from numapin.pinning.request import ExecRequest
from numapin.tools.exec import prepare_exec

NUMAPIN = [sys.executable, "-m", "numapin"]

REPORT = """
import json, os, sys
import numapin.pinning.memory
policy, nodes = numapin.pinning.memory.get_mempolicy()
print(json.dumps({"pid": os.getpid(), "mask": sorted(os.sched_getaffinity(0)), "policy": policy.name,
                  "nodes": str(nodes), "applied": os.environ.get("NUMAPIN_APPLIED"),
                  "reserved": os.environ.get("NUMAPIN_RESERVED")}))
"""


def run(args: list[str], env: dict[str, str], **kwargs: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*NUMAPIN, *args], env=env, capture_output=True, text=True, timeout=60,
                          **kwargs)  # type: ignore[call-overload]


def _clean(root: Path) -> dict[str, str]:
    return {**without_inputs(dict(os.environ)), "NUMAPIN_FSROOT": str(root)}


@pytest.fixture
def env(pair_root: Path) -> dict[str, str]:
    return _clean(pair_root)


@pytest.fixture
def refusing_env(refusing_root: Path) -> dict[str, str]:
    return _clean(refusing_root)


needs_two = pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs")


@needs_two
@pytest.mark.parametrize(("gpu", "node", "node_cpus"), [("0", 0, NODE0), ("1", 1, NODE1)])
def test_child_inherits_mask_policy_and_marker(gpu: str, node: int, node_cpus: set[int], env: dict[str, str]) -> None:
    bind = node == 0 or NODE1_REAL  # bind only where the node really exists
    proc = subprocess.Popen([*NUMAPIN, "exec", "--gpu", gpu, "--memory", "bind" if bind else "none", "--",
                             sys.executable, "-c", REPORT],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    report = json.loads(out)
    assert report["pid"] == proc.pid, "exec keeps the pid"
    assert report["mask"] == sorted(node_cpus)
    assert report["applied"] == cpus(node_cpus)
    assert (report["policy"], report["nodes"]) == (("BIND", str(node)) if bind else ("DEFAULT", ""))
    assert err == ""


def test_exit_code_passes_through(env: dict[str, str]) -> None:
    proc = run(["exec", "--gpu", "0", "--", sys.executable, "-c", "import sys; sys.exit(7)"], env)
    assert proc.returncode == 7


def test_signal_passes_through(env: dict[str, str]) -> None:
    code = "import os, signal; os.kill(os.getpid(), signal.SIGTERM)"
    proc = run(["exec", "--gpu", "0", "--", sys.executable, "-c", code], env)
    assert proc.returncode == -signal.SIGTERM


def test_stdin_and_stdout_are_untouched(env: dict[str, str]) -> None:
    code = "import sys; data = sys.stdin.read(); sys.stdout.write(data.upper()); sys.stderr.write('e')"
    proc = run(["exec", "--gpu", "0", "--", sys.executable, "-c", code], env, input="hello\nworld\n")
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "HELLO\nWORLD\n", "e")


COMPAT = """
import logging, os, sys
logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s", stream=sys.stdout)
if len(sys.argv) > 1:
    os.sched_setaffinity(0, {int(sys.argv[1])})
from numapin.compat.tensorrt_llm import configure_cpu_affinity
result = configure_cpu_affinity(0)
print("RESULT", result.ownership, sorted(os.sched_getaffinity(0)))
"""


@needs_two
def test_tensorrt_llm_keeps_the_execd_mask(env: dict[str, str]) -> None:
    proc = run(["exec", "--gpu", "0", "--", sys.executable, "-c", COMPAT], env)
    assert proc.returncode == 0, proc.stderr
    assert f"RESULT numapin {sorted(NODE0)}" in proc.stdout
    assert "WARNING" not in proc.stdout and "constrained" not in proc.stdout


@needs_two
def test_a_mask_changed_in_the_child_is_still_external(env: dict[str, str]) -> None:
    proc = run(["exec", "--gpu", "0", "--", sys.executable, "-c", COMPAT, str(min(NODE1))], env)
    assert proc.returncode == 0, proc.stderr
    assert "has constrained CPU affinity" in proc.stdout
    assert f"RESULT external {sorted(ALL)}" in proc.stdout


@needs_two
def test_reserved_cores_are_exported(env: dict[str, str]) -> None:
    proc = run(["exec", "--cpus", cpus(ALL), "--reserve", "1", "--memory", "none", "--", sys.executable, "-c",
                REPORT], env)
    report = json.loads(proc.stdout)
    assert report["mask"] == sorted(ALL - {max(ALL)}) and report["reserved"] == str(max(ALL))


# -- local ranks under a reordering CUDA_VISIBLE_DEVICES ----------------------------

ORDER = "3,6,5,4,0,7,1,2"


@pytest.mark.parametrize("variable", LOCAL_RANK_VARIABLES)
@pytest.mark.parametrize("rank", [0, 2, 5])
def test_local_rank_picks_the_reordered_gpu(variable: str, rank: int,
                                            machine_root: Callable[[str], Path]) -> None:
    environ = {variable: str(rank), "CUDA_VISIBLE_DEVICES": ORDER, "PATH": os.environ["PATH"]}
    prepared = prepare_exec(ExecRequest(program=["true"], root=str(machine_root("dgx-h100"))), environ)
    physical = int(ORDER.split(",")[rank])
    assert prepared.rank is not None and prepared.rank.variable == variable
    assert prepared.placement is not None
    assert prepared.placement.pci == f"0000:{0x18 + 0x10 * physical:02x}:00.0"
    assert prepared.placement.node == physical // 4


def test_dry_run_json_runs_nothing(machine_root: Callable[[str], Path], tmp_path: Path) -> None:
    flag = tmp_path / "ran"
    environ = {**os.environ, "LOCAL_RANK": "1", "SLURM_LOCALID": "0", "CUDA_VISIBLE_DEVICES": ORDER}
    proc = run(["exec", "--root", str(machine_root("dgx-h100")), "--mode", "exclusive", "--dry-run", "--json",
                "--", "touch", str(flag)], environ)
    assert proc.returncode == 0, proc.stderr
    plan = json.loads(proc.stdout)
    assert plan["local_rank"] == {"rank": 1, "variable": "LOCAL_RANK"}
    assert plan["placement"]["pci"] == "0000:78:00.0" and plan["placement"]["cpus"] == "84-97,196-209"
    assert any("SLURM_LOCALID=0" in n for n in plan["notes"])
    assert not flag.exists()


# -- bad input and the environment --------------------------------------------------


@pytest.mark.parametrize(
    ("args", "message"),
    [(["--gpu", "9"], "GPU 9 is not visible"),
     (["--mode", "numa"], "invalid choice"),
     (["--local-rank", "x"], "not a local rank"),
     (["--cpus", f"0-{max(ALL) + 1}"], "outside the allowed CPUs")],
)
def test_bad_input_exits_2_and_runs_nothing(args: list[str], message: str, env: dict[str, str],
                                            tmp_path: Path) -> None:
    flag = tmp_path / "ran"
    proc = run(["exec", *args, "--", "touch", str(flag)], env)
    assert proc.returncode == 2 and message in proc.stderr
    assert not flag.exists()


def test_no_program(env: dict[str, str]) -> None:
    for args in (["exec"], ["exec", "--"], ["exec", "--gpu", "0", "--"]):
        proc = run(args, env)
        assert proc.returncode == 2 and "no PROGRAM" in proc.stderr


def test_program_not_found(env: dict[str, str]) -> None:
    proc = run(["exec", "--", "no-such-program-numapin"], env)
    assert proc.returncode == 2 and "not found" in proc.stderr
    proc = run(["exec", "--", "/nonexistent/prog"], env)
    assert proc.returncode == 2 and "not an executable" in proc.stderr


def test_no_gpu_runs_unpinned_unless_strict(env: dict[str, str], tmp_path: Path) -> None:
    env = {**env, "CUDA_VISIBLE_DEVICES": ""}
    proc = run(["exec", "--", sys.executable, "-c", REPORT], env)
    assert proc.returncode == 0
    assert json.loads(proc.stdout)["mask"] == sorted(os.sched_getaffinity(0))
    assert proc.stderr.count("unpinned") == 1
    flag = tmp_path / "ran"
    strict = run(["exec", "--strict", "--", "touch", str(flag)], env)
    assert strict.returncode == 2 and "no GPU is visible" in strict.stderr and not flag.exists()


@needs_two
def test_refused_memory_policy_steps_down_unless_strict(refusing_env: dict[str, str], tmp_path: Path) -> None:
    # GPU 1's node is on the test root only: binding there is refused on this machine.
    env = refusing_env
    proc = run(["exec", "--gpu", "1", "--memory", "bind", "--", sys.executable, "-c", REPORT], env)
    assert proc.returncode == 0
    report = json.loads(proc.stdout)
    assert report["mask"] == sorted(NODE1) and report["policy"] == "DEFAULT"
    assert proc.stderr.count("memory not placed") == 1
    flag = tmp_path / "ran"
    strict = run(["exec", "--gpu", "1", "--memory", "bind", "--strict", "--", "touch", str(flag)], env)
    assert strict.returncode == 2 and not flag.exists()


# -- thread pools follow the placement ------------------------------------------------------------

POOL = "import os; print(os.environ.get('OMP_NUM_THREADS'), os.environ.get('MKL_NUM_THREADS'))"


@pytest.mark.parametrize(("given", "threads", "expected"), [
    ({}, [], "1 1"),  # one CPU placed: pools of one
    ({"OMP_NUM_THREADS": "3"}, [], "3 1"),
    ({}, ["--threads", "keep"], "None None"),
    ({}, ["--threads", "5"], "5 5"),
    ({"MKL_NUM_THREADS": "2"}, ["--threads", "5"], "5 2"),
], ids=["auto", "user-set-kept", "keep", "number", "number-keeps-user"])
def test_thread_pools_are_sized_to_the_placement_unless_set(given: dict[str, str], threads: list[str],
                                                            expected: str) -> None:
    env = {**without_inputs(dict(os.environ)), **given}
    proc = run(["exec", "--cpus", str(min(ALL)), "--memory", "none", *threads, "--", sys.executable, "-c", POOL], env)
    assert proc.returncode == 0 and proc.stdout == expected + "\n", proc.stderr


def test_the_issues_command_prints_1_then_3() -> None:
    command = ["exec", "--cpus", "0", "--", sys.executable, "-c", 'import os; print(os.environ["OMP_NUM_THREADS"])']
    env = without_inputs(dict(os.environ))
    if 0 not in ALL:
        pytest.skip("CPU 0 is not allowed here")
    assert run(command, env).stdout == "1\n"
    assert run(command, {**env, "OMP_NUM_THREADS": "3"}).stdout == "3\n"


def test_a_dry_run_says_what_it_sets_and_keeps(env: dict[str, str]) -> None:
    proc = run(["exec", "--gpu", "0", "--dry-run", "--", "true"], {**env, "OMP_NUM_THREADS": "7"})
    assert f"would set MKL_NUM_THREADS={len(NODE0)} OPENBLAS_NUM_THREADS={len(NODE0)}" in proc.stdout
    assert "keeps OMP_NUM_THREADS=7 (set by the caller)" in proc.stdout


@pytest.mark.parametrize("bad", ["0", "many", "-2"])
def test_bad_thread_counts_exit_2(bad: str) -> None:
    proc = run(["exec", "--cpus", str(min(ALL)), "--threads", bad, "--", "true"], without_inputs(dict(os.environ)))
    assert proc.returncode == 2 and "--threads" in proc.stderr



def test_exec_reports_the_decision_it_applied_as_a_library_pin_does(machine_root: Callable[[str], Path]) -> None:
    # One decision per request: the pin carries exec's placement (GPU, node, mode), not CPUs decided anew.
    root = machine_root("pair")
    env = {**without_inputs(dict(os.environ)), "NUMAPIN_FSROOT": str(root)}
    proc = run(["-v", "exec", "--gpu", "1", "--memory", "none", "--", "true"], env)
    library = subprocess.run([sys.executable, "-c", "import logging, numapin\n"
                              "logging.basicConfig(level=logging.INFO, format='%(name)s: %(message)s')\n"
                              "print(numapin.pin(1).placement.mode)"],
                             env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and library.returncode == 0, proc.stderr + library.stderr
    line = [ln for ln in proc.stderr.splitlines() if ln.startswith("numapin: pinned")]
    assert line == library.stderr.splitlines(), (proc.stderr, library.stderr)
    assert "for GPU 1 (0000:28:00.0, node 1)" in line[0]
    assert library.stdout.strip() == "node"


@needs_two
def test_strict_exec_under_a_conflicting_outside_mask_exits_2_naming_the_fix(env: dict[str, str]) -> None:
    # taskset's mask is someone else's: respect keeps it, and strict refuses to run the program on it.
    first = min(NODE0)
    outside = ["taskset", "-c", str(first), *NUMAPIN, "exec", "--gpu", "1"]
    strict = subprocess.run([*outside, "--strict", "--", "true"], env=env, capture_output=True, text=True, timeout=60)
    assert strict.returncode == 2
    lines = strict.stderr.strip().splitlines()
    assert len(lines) == 1 and "--policy override" in lines[0], strict.stderr
    show = "import os; print(sorted(os.sched_getaffinity(0)))"
    relaxed = subprocess.run([*outside, "--", sys.executable, "-c", show], env=env, capture_output=True, text=True,
                             timeout=60)
    assert relaxed.returncode == 0 and json.loads(relaxed.stdout) == [first]
    assert "--policy override" in relaxed.stderr


def test_thread_pools_are_sized_to_the_ranks_share_of_a_shared_node() -> None:
    # Mode node gave each of a node's four ranks OMP_NUM_THREADS=112 on 112 CPUs.
    from numapin.facts import synthetic as machines

    spec = machines.shape_named("dgx-h100")
    node_cpus = spec.cores_per_socket * spec.threads_per_core  # one node a socket here
    share = node_cpus // spec.gpus_per_node
    dry = subprocess.run([*NUMAPIN, "exec", "--machine", "dgx-h100", "--dry-run", "--json", "--", "true"],
                         capture_output=True, text=True, env=without_inputs(dict(os.environ)))
    report = json.loads(dry.stdout)
    assert report["threads"]["set"]["OMP_NUM_THREADS"] == str(share), report["threads"]
    text = subprocess.run([*NUMAPIN, "exec", "--machine", "dgx-h100", "--dry-run", "--", "true"],
                          capture_output=True, text=True, env=without_inputs(dict(os.environ))).stdout
    assert f"thread pools sized {share}: the {node_cpus} CPUs are shared by the ranks of 4 GPUs" in text
    for mode in ("exclusive", "single"):  # CPUs of its own: pools the size of its placement
        own = json.loads(subprocess.run([*NUMAPIN, "exec", "--machine", "dgx-h100", "--mode", mode, "--dry-run",
                                         "--json", "--", "true"], capture_output=True, text=True,
                                        env=without_inputs(dict(os.environ))).stdout)
        assert own["threads"]["set"]["OMP_NUM_THREADS"] == str(len(CpuSet(own["placement"]["cpus"])))


def test_doctor_holds_pools_to_the_same_share() -> None:
    env = without_inputs(dict(os.environ))
    for size, oversized in (("112", True), ("28", False)):
        proc = subprocess.run([*NUMAPIN, "doctor", "--machine", "dgx-h100", "--local-rank", "0", "--json"],
                              capture_output=True, text=True, env={**env, "OMP_NUM_THREADS": size})
        found = {f["id"]: f for f in json.loads(proc.stdout)["findings"]}
        assert ("thread-pool-oversized" in found) == oversized, found.keys()
        assert "shared-node" in found and "thread pools to its share" in found["shared-node"]["why"]
