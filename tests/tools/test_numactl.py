"""``numapin numactl``: numactl's language carried out by numapin, on the live kernel."""

from __future__ import annotations

import ctypes
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import live
from numapin.base.errors import UsageError
from numapin.cpuset import CpuSet
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
    ["--cpun=1", "--mem", "1", "python", "-c", "x"],  # unambiguous beginnings, as getopt_long takes them
    ["--cpubind=1", "-m", "same", "python", "-c", "x"],  # the old name of -N; "same": the node list before
])
def test_every_spelling_of_an_option_reads_the_same(argv: list[str]) -> None:
    assert parse_numactl(argv) == NumactlRequest(program=("python", "-c", "x"), binds=(("nodes", "1"),), membind="1")


def test_options_end_at_the_program_and_at_show() -> None:
    found = parse_numactl(["-C", "0-3", "-p", "0", "prog", "-m", "1"])
    assert (found.binds, found.preferred, found.program) == ((("cpus", "0-3"),), "0", ("prog", "-m", "1"))
    assert parse_numactl(["--show"]).show and parse_numactl(["-H"]).hardware
    assert parse_numactl(["-l", "true"]).local
    # numactl acts on --show and --hardware at once: what follows is never read, a program neither.
    assert parse_numactl(["-m", "0", "--show", "-m", "1", "--bogus", "prog"]) == NumactlRequest(membind="0", show=True)
    assert parse_numactl(["-lsC", "zzz"]) == NumactlRequest(local=True, show=True)
    # Clustered flags, a value glued on, repeated CPU bindings (each checked, the last stands).
    assert parse_numactl(["-lC0", "-N", "1", "true"]) == NumactlRequest(program=("true",), local=True,
                                                                      binds=(("cpus", "0"), ("nodes", "1")))


@pytest.mark.parametrize(("argv", "says"), [
    (["--interleave=all", "true"], "--interleave (-i) is not supported"),
    (["-i", "0", "true"], "--interleave (-i) is not supported"),
    (["--balancing", "true"], "--balancing (-b) is not supported"),
    (["--shm", "x", "-m", "0"], "shared-memory options"),
    (["--frobnicate", "true"], "unknown numactl option"),
    (["--pre=0", "true"], "ambiguous: --preferred, --preferred-many"),
    (["-N"], "needs a value"),
    (["-m", "0", "-p", "0", "true"], "two memory policies"),
    (["-m", "0", "-m", "0", "true"], "two memory policies"),
    (["-m", "0", "-H"], "--membind before it"),
    (["-N", "0"], "no PROGRAM"),
    (["--localalloc=1", "true"], "takes no value"),
    (["-m", "same", "true"], "'same' needs a node list"),
])
def test_what_is_not_carried_out_is_refused_by_name(argv: list[str], says: str) -> None:
    with pytest.raises(UsageError, match=re.escape(says)):
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
    assert refused.returncode == 2 and "--mems and --memory none" in refused.stderr


def test_exec_refuses_nodes_it_cannot_bind() -> None:
    missing = str(live.MISSING_NODE + 7)
    for option in ("--nodes", "--mems"):
        proc = _exec(option, missing)
        assert proc.returncode == 2 and missing in proc.stderr and proc.stdout == "", proc.stderr


# -- numbers and lists as libnuma reads them ----------------------------------------

_LIBC = ctypes.CDLL(None)
_LIBC.strtoul.restype = ctypes.c_ulong
_LIBC.strtoul.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_char_p), ctypes.c_int]


def _strtoul(text: str) -> tuple[int, int]:
    """The C library's own strtoul(text, &end, 0): the number and where it ended."""
    buffer = ctypes.create_string_buffer(text.encode())
    end = ctypes.c_char_p()
    value = _LIBC.strtoul(buffer, ctypes.byref(end), 0)
    return value, ctypes.cast(end, ctypes.c_void_p).value - ctypes.addressof(buffer)  # type: ignore[operator]


@settings(max_examples=2000, deadline=None)
@given(st.text(alphabet=" \t\n\v\f\r+-0123456789abcdefxXg,", max_size=12))
def test_a_number_is_read_as_the_c_library_reads_it(text: str) -> None:
    from numapin.tools.numactl import _number

    value, end = _number(text, 0)
    theirs, their_end = _strtoul(text)
    assert end == their_end, text
    if value is not None:
        assert value % 2**64 == theirs, text  # a minus sign wraps, as for an unsigned long


def test_numactls_list_forms_are_read_as_libnuma_reads_them() -> None:
    from numapin.facts.machine import cached
    from numapin.tools.numactl import _list

    allowed = cached(None, {}).topology.allowed & CpuSet(os.sched_getaffinity(0))
    first, last = allowed.first(), max(allowed)

    def cpus(text: str) -> CpuSet:
        return _list(text, allowed, "CPU", "CPUs", devices=False)

    assert cpus(f"0x{last:x}") == cpus(f"0{last:o}" if last else "0") == cpus(f" {last}") == CpuSet([last])
    assert cpus(f"{last}-{first}") == CpuSet([last]), "a range that runs backwards keeps its first end"
    assert cpus(f"{first},all") == allowed
    for refused in (f"{last} ", f"{first},", f"{first}-", "", f"{first}\u0661"):  # as numactl refuses them
        with pytest.raises(UsageError):
            cpus(refused)
    beyond = max(allowed) + 1
    with pytest.raises(UsageError, match=f"CPU {beyond} is not available"):
        cpus(f"0{beyond:o}")  # octal, as C reads it: 010 is CPU 8


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(["-N", "-m", "-C", "-p", "--physcpubind", "--cpunodebind", "--membind", "--preferred"]),
       st.sampled_from(["", "0x", "0", "0-", "1,", "-"]), st.integers(min_value=25, max_value=20000))
def test_a_number_of_any_length_is_refused_in_one_line(option: str, prefix: str, digits: int) -> None:
    # Past 4,300 digits Python's int() refuses, and slows long before: the reader saturates as strtoul does.
    value = prefix + "7" * digits
    with pytest.raises(UsageError) as refused:
        _carried(option, value)
    assert "\n" not in str(refused.value) and len(str(refused.value)) < 400


def _carried(option: str, value: str) -> None:
    """What numapin numactl does with one option: read it and check it against this machine's CPUs and nodes."""
    from numapin.facts.machine import cached
    from numapin.tools.numactl import _list

    facts = cached(None, os.environ)
    parse_numactl([option, value, "true"])
    nodes = option in ("-N", "-m", "-p", "--cpunodebind", "--membind", "--preferred")
    what = ("node", "nodes") if nodes else ("CPU", "CPUs")
    allowed = CpuSet(n.id for n in facts.topology.nodes) if nodes else facts.topology.allowed
    _list(value, allowed, *what, devices=nodes)


def test_numactl_with_five_thousand_digits_is_one_line_and_exit_1() -> None:
    for option in ("-N", "-C", "-m", "-p", "--physcpubind"):
        done = subprocess.run([sys.executable, "-m", "numapin", "numactl", option, "5" * 5000, "--", "true"],
                              capture_output=True, text=True, timeout=60)
        assert done.returncode != 0 and done.stderr.count("\n") == 1 and "Traceback" not in done.stderr, done.stderr
        assert "is not available here" in done.stderr, done.stderr
