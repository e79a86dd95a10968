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
    ({"hugepages": "3M"}, "'2M', '1G', 'thp'"),
    ({"fill_threads": 0}, "a count from 1"),
    ({"gpu": 0, "node": 0}, "one of gpu=N, node=N, gpus=[...], nodes=[...]"),
    ({"nodes": [NODE], "node": NODE}, "one of gpu=N, node=N"),
    ({"nodes": [], "node": None}, "a list of one or more"),
    ({"nodes": str(NODE), "node": None}, "a list of one or more"),
    ({"nodes": [True], "node": None}, "node numbers, whole numbers"),
    ({"nodes": [NODE, 4095], "node": None}, "the nodes with memory here are"),
    ({"gpus": [7], "node": None}, "this process sees"),
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


# -- limits the kernel enforces, many buffers, a fork, a view alive ----------------------------------------------


def _memory_cgroup() -> Path | None:
    """A folder of this process's memory cgroup (v2 with the memory controller, or v1's) where a child may be made."""
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        hierarchy, controllers, path = line.split(":", 2)
        for mount in Path("/proc/self/mountinfo").read_text().splitlines():
            fields, _, tail = mount.partition(" - ")
            kind, options = tail.split()[0], set(tail.split()[2].split(",")) | set(fields.split()[5].split(","))
            point, top = fields.split()[4], fields.split()[3]
            v1 = kind == "cgroup" and "memory" in options and "memory" in controllers.split(",")
            v2 = kind == "cgroup2" and hierarchy == "0" and "memory" in (
                Path(point) / "cgroup.controllers").read_text().split() if kind == "cgroup2" else False
            if (v1 or v2) and path.startswith(top):
                folder = Path(point) / path[len(top):].lstrip("/")
                if os.access(folder, os.W_OK):
                    return folder
    return None


@pytest.fixture
def limited() -> Path:
    """A memory cgroup of this process's hierarchy limited to 256 MiB, removed after the test."""
    parent = _memory_cgroup()
    if parent is None or os.geteuid() != 0:
        pytest.skip("no memory cgroup this process may make a child of (root, a memory controller)")
    group = parent / f"numapin-test-{os.getpid()}"
    group.mkdir()
    limit = "memory.max" if (group / "memory.max").exists() else "memory.limit_in_bytes"
    (group / limit).write_text(str(256 << 20))
    yield group
    group.rmdir()


def test_a_buffer_past_its_memory_cgroups_limit_is_refused_in_one_line_not_killed(limited: Path) -> None:
    # Inside a 256 MiB memory cgroup (a pod's memory limit) 1 GiB fits the node but not the cgroup: before, the
    # cgroup's OOM killer ended the process (137) without a word.
    script = f'echo $$ > "{limited}/cgroup.procs" && exec "$@"'
    command = ["sh", "-c", script, "-", *NUMAPIN, "buffer", "--size", "1G", "--node", str(NODE)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, (done.returncode, done.stderr)
    (line,) = done.stderr.strip().splitlines()
    assert "memory cgroup's limit" in line and "256.0 MiB" in line and str(limited) in line, line
    fits = subprocess.run(["sh", "-c", script, "-", *NUMAPIN, "buffer", "--size", "64M", "--node", str(NODE)],
                          capture_output=True, text=True, timeout=120)
    assert fits.returncode == 0, fits.stderr  # what the cgroup leaves room for is made


def test_many_buffers_declare_in_bounded_size_and_a_reader_hears_of_the_rest(tmp_path: Path) -> None:
    # 700 small buffers: a declaration of every one (84 KB) passed what a reader takes, and it saw none.
    from numapin.pinning.declaration import LISTED_AT_MOST, declared

    def child() -> tuple[int, int, int, int, int]:
        os.environ["NUMAPIN_RUNTIME_DIR"] = str(tmp_path)
        made = [numapin.host_buffer(4096, node=NODE, fill_threads=1) for _ in range(700)]
        (path,) = tmp_path.glob("*.buffers.json")
        size = path.stat().st_size
        seen = declared(os.getpid())
        for buf in made[:100]:
            buf.close()
        after = declared(os.getpid())
        return size, len(seen.buffers), seen.more, seen.more_bytes, after.more

    size, listed, more, more_bytes, after = in_child(child)
    assert size < 64 << 10 and listed == LISTED_AT_MOST and more == 700 - LISTED_AT_MOST, (size, listed, more)
    assert more_bytes == more * 4096 and after == 600 - LISTED_AT_MOST


def test_a_forked_child_holds_no_buffer_of_its_own(tmp_path: Path) -> None:
    from numapin.pinning.declaration import declared

    def child() -> tuple[bytes, list[int], bool]:
        os.environ["NUMAPIN_RUNTIME_DIR"] = str(tmp_path)
        buf = numapin.host_buffer(1 << 20, node=NODE, lock=True)
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the fork: a copy of the pages, none of the buffers its own (mlock is not inherited)
            try:
                with numapin.host_buffer(4096, node=NODE):  # its own first buffer: declared alone
                    own = declared(os.getpid()).buffers
                    os.write(write, b"%d %d %d" % (len(own), own[0].nbytes if own else 0, buf.locked))
            finally:
                os._exit(0)  # never back into the test's own child
        os.close(write)
        os.waitpid(pid, 0)
        return os.read(read, 64), [b.nbytes for b in declared(os.getpid()).buffers], buf.locked

    there, here, locked_here = in_child(child)
    assert there == b"1 4096 0", there
    assert here == [1 << 20] and locked_here


def test_fill_threads_are_capped_by_the_nodes_cpus() -> None:
    def child() -> tuple[int, tuple[str, ...]]:
        with numapin.host_buffer(16 << 20, node=NODE, fill_threads=5000) as buf:
            return buf.fill_threads, buf.notes

    threads, notes = in_child(child)
    cpus = len(live.TOPOLOGY.cpus_of_nodes(CpuSet([NODE])) & CpuSet(live.BASELINE))
    assert threads == cpus and any("5000 fill threads asked" in n for n in notes), (threads, notes)


def test_closing_a_buffer_a_view_still_holds_changes_nothing(tmp_path: Path) -> None:
    def child() -> tuple[str, bool, bool, bool]:
        os.environ["NUMAPIN_RUNTIME_DIR"] = str(tmp_path)
        buf = numapin.host_buffer(1 << 20, node=NODE, lock=True)
        view = memoryview(buf)
        try:
            buf.close()
        except BufferError as exc:
            said = str(exc)
        else:
            said = ""
        declared = bool(list(tmp_path.glob("*.buffers.json")))
        still = (buf.locked, not buf.closed, declared)
        view.release()
        buf.close()
        return said, *still

    said, locked, open_, declared = in_child(child)
    assert "still alive: release it first; nothing was changed" in said, said
    assert locked and open_ and declared


def test_a_view_kept_until_exit_costs_no_traceback_at_exit(tmp_path: Path) -> None:
    # The docs' own example: a memoryview of the pool kept until the interpreter ends, three buffers made.
    script = ("import numapin, sys\n"
              f"pools = [numapin.host_buffer(1 << 20, node={NODE}) for _ in range(3)]\n"
              "views = [memoryview(p) for p in pools]\n"
              "print('made', flush=True)\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "NUMAPIN_RUNTIME_DIR": str(tmp_path)})
    assert done.returncode == 0 and done.stdout == "made\n", done.stderr
    assert "Traceback" not in done.stderr and "BufferError" not in done.stderr, done.stderr


def test_a_gpu_named_where_none_is_visible_names_the_commands_flag_too() -> None:
    # numapin buffer --gpu 1 on a host (or in a container) of no GPU: the way out is its --node, said as such.
    done = subprocess.run([*NUMAPIN, "buffer", "--gpu", "1", "--size", "1M"], capture_output=True, text=True,
                          timeout=60, env={**os.environ, "CUDA_VISIBLE_DEVICES": ""})
    assert done.returncode == 2 and "numapin buffer --node N" in done.stderr, done.stderr
