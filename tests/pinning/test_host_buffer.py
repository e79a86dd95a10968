"""numapin.host_buffer and ``numapin buffer``: a buffer mapped, bound, filled and read back on a real node of this
machine; every mistake named before anything stays mapped. (Two nodes, huge pages per node and a memory-only
node: the guest tier's checks.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

import live
import numapin
import seccomp_filter
from child import in_child
from numapin.cpuset import CpuSet
from numapin.tools.buffer import parse_size
from other_user import Other

#: A real memory node of this machine with CPUs this process may use.
NODE = min(n.id for n in live.TOPOLOGY.nodes if n.cpus & CpuSet(live.BASELINE))
NUMAPIN = [sys.executable, "-m", "numapin"]


#: An odd size no other mapping of the process has: a mapping of it is the buffer.
ODD = (3 << 20) + 3 * 4096


def _mappings() -> int:
    """This process's mappings of :data:`ODD` bytes."""
    with open("/proc/self/maps") as maps:
        ranges = [line.split()[0].split("-") for line in maps]
    return sum(1 for start, end in ranges if int(end, 16) - int(start, 16) == ODD)


def _refused(**kwargs: object) -> tuple[str, int]:
    """``host_buffer(**kwargs)``'s error, and how many buffer-sized mappings it left behind ("" and 0: none)."""
    before = _mappings()
    try:
        numapin.host_buffer(**kwargs)  # type: ignore[arg-type]
    except numapin.NumapinError as exc:
        return str(exc), _mappings() - before
    return "", 0


def test_a_buffer_is_filled_on_its_node_read_back_and_given_back() -> None:
    def child() -> dict[str, object]:
        with numapin.host_buffer(16 << 20, node=NODE) as buf:
            got = {"nodes": buf.nodes, "on": sum(buf.on_nodes.values()), "nbytes": buf.nbytes, "view": len(
                memoryview(buf)), "page": buf.page_size, "notes": buf.notes, "threads": buf.fill_threads,
                   "address": buf.address}
            listed = f"{buf.address:x}-" in Path("/proc/self/maps").read_text()
        got["listed"], got["closed"] = listed, buf.closed
        got["still"] = f"{got['address']:x}-" in Path("/proc/self/maps").read_text()
        return got

    got = in_child(child)
    assert got["nodes"] == CpuSet([NODE]) and got["on"] == got["nbytes"] == got["view"] == 16 << 20, got
    assert got["page"] == os.sysconf("SC_PAGE_SIZE") and got["notes"] == () and got["threads"] >= 1
    assert got["listed"] and got["closed"] and not got["still"], "not given back"


def test_a_size_is_rounded_up_to_whole_pages() -> None:
    def child() -> int:
        with numapin.host_buffer(5000, node=NODE) as buf:
            return buf.nbytes

    assert in_child(child) == 2 * os.sysconf("SC_PAGE_SIZE")


@pytest.mark.parametrize(("args", "said"), [
    ({"nbytes": 0}, "a size is a whole number of bytes from 1"),
    ({"nbytes": -4096}, "a size is a whole number of bytes from 1"),
    ({"nbytes": 1.5}, "a size is a whole number of bytes from 1"),
    ({"nbytes": True}, "a size is a whole number of bytes from 1"),
    ({"nbytes": "4096"}, "a size is a whole number of bytes from 1"),
    ({"nbytes": 1 << 60}, "free"),
    ({"node": 4095}, "the nodes with memory here are"),
    ({"gpu": 7}, "this process sees"),
    ({"hugepages": "3M"}, "2M or 1G"),
    ({"fill_threads": 0}, "a count from 1"),
    ({"gpu": 0, "node": 0}, "not both"),
])
def test_each_mistake_is_one_clear_error_and_nothing_stays_mapped(args: dict[str, object], said: str) -> None:
    def child() -> tuple[str, int]:
        return _refused(**{"nbytes": ODD, "node": None if "gpu" in args else NODE, **args})

    message, more = in_child(child)
    assert said in message and more == 0, (message, more)


def test_huge_pages_not_free_on_the_node_step_down_to_base_pages_with_a_note() -> None:
    free = Path(f"/sys/devices/system/node/node{NODE}/hugepages/hugepages-2048kB/free_hugepages")
    if not free.exists() or int(free.read_text()) >= 8:
        pytest.skip("huge pages are free on this node (the guest tier checks them taken)")

    def child() -> tuple[int, tuple[str, ...]]:
        with numapin.host_buffer(16 << 20, node=NODE, hugepages="2M") as buf:
            return buf.page_size, buf.notes

    page, notes = in_child(child)
    assert page == os.sysconf("SC_PAGE_SIZE") and len(notes) == 1 and "2M pages" in notes[0], notes


@pytest.mark.skipif(not seccomp_filter.supported(), reason="no syscall table here for the filter")
def test_under_a_seccomp_filter_the_node_pinned_fill_still_places_it_and_says_so() -> None:
    script = (f"import numapin\nb = numapin.host_buffer(16 << 20, node={NODE})\n"
              "print(sorted(b.nodes), sum(b.on_nodes.values()) == b.nbytes, b.notes[0])\n")
    done = subprocess.run([sys.executable, seccomp_filter.__file__, sys.executable, "-c", script], capture_output=True,
                          text=True, timeout=60, env=live.without_inputs(dict(os.environ)))
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"[{NODE}] True mbind refused"), done.stdout
    assert "seccomp filter" in done.stdout and f"threads on node(s) {NODE}'s CPUs" in done.stdout


def test_register_without_a_cuda_runtime_is_an_error_and_nothing_stays_mapped() -> None:
    message, more = in_child(lambda: _refused(nbytes=ODD, node=NODE, register=True))
    assert "needs the CUDA runtime loaded in this process" in message and more == 0, message


def test_lock_past_the_memlock_limit_names_the_limit(other: Other) -> None:
    # Root may lock any amount (CAP_IPC_LOCK): the other user, with a 64 KiB limit, may not lock 3 MiB.
    def child() -> tuple[str, int]:
        import resource

        with numapin.host_buffer(1 << 20, node=NODE, lock=True) as buf:  # as root: every module it needs loaded
            assert buf.locked
        resource.setrlimit(resource.RLIMIT_MEMLOCK, (64 << 10, 64 << 10))
        os.setgroups([])
        os.setgid(other.gid)
        os.setuid(other.uid)
        return _refused(nbytes=ODD, node=NODE, lock=True)

    message, more = in_child(child)
    assert "RLIMIT_MEMLOCK is 64.0 KiB" in message and more == 0, message


@given(st.integers(1, 1 << 40), st.sampled_from(["", "K", "M", "G", "T", "k", "MiB", "gb", "Ti"]))
def test_a_size_reads_as_binary_units(n: int, unit: str) -> None:
    scale = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}[unit[:1].lower()]
    assert parse_size(f"{n}{unit}") == n * scale


@given(st.text(max_size=40))
def test_any_text_is_a_size_or_one_clear_error(text: str) -> None:
    try:
        assert parse_size(text) >= 1
    except numapin.UsageError as exc:
        assert "size" in str(exc)


def test_the_command_reports_where_the_pages_went_and_never_a_traceback() -> None:
    env = live.without_inputs(dict(os.environ))
    done = subprocess.run([*NUMAPIN, "buffer", "--node", str(NODE), "--size", "8M", "--json"], capture_output=True,
                          text=True, timeout=60, env=env)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["on_nodes"] == {str(NODE): 8 << 20} and report["nbytes"] == 8 << 20 and report["notes"] == []
    text = subprocess.run([*NUMAPIN, "buffer", "--node", str(NODE), "--size", "8M"], capture_output=True, text=True,
                          timeout=60, env=env).stdout
    assert f"node {NODE} 8.0 MiB (100%)" in text
    for bad in (["--size", "0"], ["--size", "x"], ["--size", "-1G"], ["--node", "4095", "--size", "1M"],
                ["--node", str(NODE), "--size", "1P"], ["--gpu", "3", "--size", "1M"], ["--size", "1M",
                 "--hugepages", "3M"], ["--node", str(NODE), "--size", "99999999T"], [], ["--threads", "0",
                 "--size", "1M"]):
        done = subprocess.run([*NUMAPIN, "buffer", *bad], capture_output=True, text=True, timeout=60, env=env)
        assert done.returncode == 2 and "Traceback" not in done.stderr, (bad, done.stderr)
        assert len(done.stderr.strip().splitlines()) == 1, (bad, done.stderr)


#: Words of ``numapin buffer``'s language and beside it; no size above a few MiB (a buffer is filled for real).
_WORDS = st.sampled_from(["--gpu", "--node", "--size", "--hugepages", "--threads", "--lock", "--json", "0", "1",
                          "-1", "4095", "2M", "--hugepages=1G", "3M", "8K", "64K", "0x10", "", "x", "1P", "--", "-v",
                          "--size=99999999T", "--node=1"])


@given(st.lists(_WORDS, max_size=7))
def test_numapin_buffer_answers_any_arguments_without_a_traceback(words: list[str]) -> None:
    # In this process (a subprocess per example would take minutes): main's answer, never an escaping exception.
    import contextlib
    import io

    from numapin.cli import main

    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            code = main(["buffer", *words])
        except SystemExit as exc:  # argparse's own exit, for its own usage errors
            code = exc.code if isinstance(exc.code, int) else 2
    assert code in (0, 2) and "Traceback" not in err.getvalue(), (words, err.getvalue())
