"""``numapin numactl``: numactl's language carried out by numapin (issue 30), on the live kernel."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import live
from numapin.base.errors import UsageError
from numapin.tools.numactl import NumactlRequest, parse_numactl

NUMAPIN = [sys.executable, "-m", "numapin"]
#: The program numactl starts: its mask, memory policy, numapin's marker, and where 32 MiB it touched lie.
REPORT = ("import json, os, mmap\n"
          "from numapin.pinning.memory import get_mempolicy\n"
          "from numapin.kernel.residency import residency\n"
          "buffer = mmap.mmap(-1, 32 << 20)\n"
          "for at in range(0, len(buffer), 4096): buffer[at] = 1\n"
          "policy, nodes = get_mempolicy()\n"
          "own = residency().own_bytes\n"
          "print(json.dumps({'mask': sorted(os.sched_getaffinity(0)), 'policy': policy.name, 'nodes': str(nodes),\n"
          "                  'marker': os.environ.get('NUMAPIN_APPLIED'),\n"
          "                  'own': {str(k): v for k, v in own.items()}}))\n")


def _run(*args: str, root: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = live.without_inputs(dict(os.environ))
    if root is not None:
        env["NUMAPIN_FSROOT"] = str(root)
    return subprocess.run([*NUMAPIN, "numactl", *args], capture_output=True, text=True, timeout=120, env=env)


# -- reading numactl's options --------------------------------------------------------------


@pytest.mark.parametrize("argv", [
    ["--cpunodebind=1", "--membind=1", "--", "python", "-c", "x"],
    ["--cpunodebind", "1", "--membind", "1", "python", "-c", "x"],
    ["-N", "1", "-m", "1", "python", "-c", "x"],
    ["-N1", "-m1", "python", "-c", "x"],
])
def test_every_spelling_of_an_option_reads_the_same(argv: list[str]) -> None:
    assert parse_numactl(argv) == NumactlRequest(program=("python", "-c", "x"), cpu_nodes="1", membind="1")


def test_options_end_at_the_program() -> None:
    found = parse_numactl(["-C", "0-3", "-p", "0", "prog", "-m", "1"])
    assert (found.cpus, found.preferred, found.program) == ("0-3", "0", ("prog", "-m", "1"))
    assert parse_numactl(["--show"]).show and parse_numactl(["-H"]).hardware
    assert parse_numactl(["-l", "true"]).local


@pytest.mark.parametrize(("argv", "says"), [
    (["--interleave=all", "true"], "--interleave is not supported"),
    (["-i", "0", "true"], "-i is not supported"),
    (["--balancing", "true"], "--balancing is not supported"),
    (["--frobnicate", "true"], "unknown numactl option"),
    (["-N"], "needs a value"),
    (["-m", "0", "-p", "0", "true"], "two memory policies"),
    (["-C", "0", "-N", "0", "true"], "both bind CPUs"),
    (["-N", "0"], "no PROGRAM"),
    (["--show", "true"], "take no program"),
    (["--localalloc=1", "true"], "takes no value"),
])
def test_what_is_not_carried_out_is_refused_by_name(argv: list[str], says: str) -> None:
    with pytest.raises(UsageError, match=says):
        parse_numactl(argv)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(["-N", "-m", "-C", "-p", "-l", "-s", "-H", "-i", "--", "--membind=", "0", "1",
                                 "all", "!0", "+1", "0-1", "prog", "--cpunodebind", "=", "-", "-N0", "--x"]),
                max_size=8))
def test_any_argument_list_is_read_or_refused_never_an_error(argv: list[str]) -> None:
    try:
        request = parse_numactl(argv)
    except UsageError as exc:
        # Refused by name: one line, its value the words at fault (an option, its value, or the command line).
        assert "\n" not in str(exc)
        named = exc.value if isinstance(exc.value, (list, tuple)) else [exc.value]
        assert exc.value == argv or (named and all(isinstance(v, str) for v in named)), (argv, exc.value)
        return
    # Read: the program is the words after the options, as the caller wrote them.
    program = list(request.program)
    assert argv[len(argv) - len(program):] == program


# -- carrying them out --------------------------------------------------------------------


@pytest.mark.skipif(not live.NODE0 or not live.NODE1, reason="needs two CPUs (one per pair node)")
def test_cpunodebind_and_membind_bind_the_program_or_refuse_like_numactl(pair_root: Path) -> None:
    proc = _run("--cpunodebind=1", "--membind=1", "--", sys.executable, "-c", REPORT, root=pair_root)
    if not live.NODE1_REAL:
        # This kernel has no node 1: numactl refuses the memory policy and runs nothing; so does numapin.
        assert proc.returncode != 0 and proc.stdout == "" and "BIND, nodes 1" in proc.stderr, proc.stderr
        return
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert set(report["mask"]) == live.NODE1 and (report["policy"], report["nodes"]) == ("BIND", "1")
    assert report["marker"] == live.cpus(live.NODE1), "the mask is marked numapin's for pin() inside"
    own = report["own"]
    assert own.get("1", 0) >= 0.9 * sum(own.values()), own  # what it touched lies on node 1 (numa_maps)


@pytest.mark.skipif(not live.NODE0 or not live.NODE1, reason="needs two CPUs (one per pair node)")
def test_physcpubind_alone_leaves_memory_as_it_is(pair_root: Path) -> None:
    cpu = min(live.NODE1)
    proc = _run(f"--physcpubind={cpu}", sys.executable, "-c", REPORT, root=pair_root)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["mask"] == [cpu] and report["policy"] == "DEFAULT"


def test_a_probe_of_a_node_that_does_not_exist_fails() -> None:
    # vLLM and SGLang probe `numactl ARGS true` and step down when it fails.
    missing = str(live.MISSING_NODE + 7)
    for option in ("--cpunodebind", "--membind", "--preferred"):
        proc = _run(f"{option}={missing}", "true")
        assert proc.returncode != 0 and f"node {missing} is not available" in proc.stderr, proc.stderr
    assert _run("--membind=0", "true").returncode == 0


def test_show_says_what_numactl_says() -> None:
    ours = _run("--show")
    assert ours.returncode == 0
    fields = dict(line.split(":", 1) for line in ours.stdout.splitlines())
    numactl = shutil.which("numactl")
    if numactl is not None:
        theirs = subprocess.run([numactl, "--show"], capture_output=True, text=True, timeout=60).stdout
        expected = dict(line.split(":", 1) for line in theirs.splitlines() if ":" in line)
        assert {k: v.strip() for k, v in fields.items()} == {k: v.strip() for k, v in expected.items()
                                                             if k in fields}, (ours.stdout, theirs)
        assert set(fields) <= set(expected)
    else:  # no numactl here: what the kernel says of this process
        assert fields["policy"].strip() == "default"
        assert fields["physcpubind"].split() == [str(c) for c in sorted(os.sched_getaffinity(0))]
    assert _run("--membind=0", "--show").stdout.splitlines()[0] == "policy: bind"


def test_hardware_lists_every_node() -> None:
    proc = _run("--hardware")
    assert proc.returncode == 0
    lines = proc.stdout.splitlines()
    assert lines[0].startswith(f"available: {len(live.TOPOLOGY.nodes)} nodes")
    for node in live.TOPOLOGY.nodes:
        assert f"node {node.id} cpus: {' '.join(map(str, node.cpus))}".rstrip() in lines


# -- the same bindings as options of numapin exec ----------------------------------------------


def _exec(*args: str, root: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = live.without_inputs(dict(os.environ))
    if root is not None:
        env["NUMAPIN_FSROOT"] = str(root)
    return subprocess.run([*NUMAPIN, "exec", *args, "--", sys.executable, "-c", REPORT], capture_output=True,
                          text=True, timeout=120, env=env)


@pytest.mark.skipif(not live.NODE0 or not live.NODE1, reason="needs two CPUs (one per pair node)")
def test_exec_binds_a_node_without_a_gpu(pair_root: Path) -> None:
    proc = _exec("--nodes", "1", "--memory", "none", root=pair_root)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert set(report["mask"]) == live.NODE1 and report["marker"] == live.cpus(live.NODE1)


def test_exec_binds_memory_alone_and_leaves_the_cpus() -> None:
    before = sorted(os.sched_getaffinity(0))
    node = str(min(live.REAL_NODES))
    proc = _exec("--mems", node, "--memory", "bind")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert (report["policy"], report["nodes"]) == ("BIND", node)
    assert report["mask"] == before and report["marker"] is None, "the CPUs are not numapin's to mark"
    refused = _exec("--mems", node, "--memory", "none")
    assert refused.returncode == 2 and "--mems without a CPU placement" in refused.stderr


def test_exec_refuses_nodes_it_cannot_bind() -> None:
    missing = str(live.MISSING_NODE + 7)
    for option in ("--nodes", "--mems"):
        proc = _exec(option, missing)
        assert proc.returncode == 2 and missing in proc.stderr and proc.stdout == "", proc.stderr
