"""numapin.facts.procfs: one reader per /proc file format, the process errors translated once (real processes)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from conftest import in_child
from numapin.base.errors import AccessDenied, NoSuchProcess, ProcessError
from numapin.facts import procfs

GONE = 2**22 + 4321  # above the kernel's pid_max limit: never a live process


def test_a_process_named_with_spaces_and_parentheses_is_read_whole() -> None:
    # The name (stat's field 2) may hold ") (": the fields after it are found from the last ')'.
    name = "a) (b c)"
    code = f"import ctypes, time; ctypes.CDLL(None).prctl(15, {name!r}.encode()); print('up', flush=True); " \
           "time.sleep(30)"
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline() == "up\n"
        stat = procfs.stat(child.pid)
        assert (stat.pid, stat.name, stat.ppid) == (child.pid, name, os.getpid())
        assert procfs.comm(child.pid) == name and not stat.exited
        assert stat.start == procfs.stat(child.pid).start > 0
    finally:
        child.kill()
        child.wait()


def test_a_name_cut_mid_character_is_decoded_with_replacement() -> None:
    def body() -> tuple[str, str]:
        import ctypes

        ctypes.CDLL(None).prctl(15, ("é" * 8).encode())  # 16 bytes: the kernel keeps 15, cutting the last é
        return procfs.comm(os.getpid()), procfs.stat(os.getpid()).name

    comm, name = in_child(body)
    assert comm == name == "é" * 7 + "\ufffd"


def test_an_environment_of_any_bytes_is_read_as_text() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; print('up', flush=True); time.sleep(30)"],
                             stdout=subprocess.PIPE, text=True,
                             env={**os.environ, "NUMAPIN_TEST_BYTES": os.fsdecode(b"a\xffb")})
    try:
        assert child.stdout is not None and child.stdout.readline() == "up\n"
        assert procfs.environ(child.pid)["NUMAPIN_TEST_BYTES"] == "a\ufffdb"
    finally:
        child.kill()
        child.wait()


def test_a_zombie_has_exited() -> None:
    child = subprocess.Popen(["true"])
    deadline = time.monotonic() + 30
    while not procfs.stat(child.pid).exited and time.monotonic() < deadline:
        time.sleep(0.01)
    try:
        with pytest.raises(NoSuchProcess, match="has exited") as raised:
            procfs.alive(child.pid)
        assert raised.value.pid == child.pid and procfs.stat(child.pid).exited
    finally:
        child.wait()


@pytest.mark.parametrize("read", [procfs.stat, procfs.comm, procfs.environ, procfs.status, procfs.tasks,
                                  procfs.fd_targets, procfs.owner, procfs.numa_maps, procfs.own_memory])
def test_every_reader_says_a_process_is_gone_with_its_pid(read) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(NoSuchProcess) as raised:
        read(GONE)
    assert raised.value.pid == GONE and str(GONE) in str(raised.value)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to become another user")
def test_another_users_environment_is_access_denied_and_its_stat_is_anyones() -> None:
    def body() -> tuple[str, str, int]:
        os.setgid(65534)
        os.setuid(65534)  # nobody, reading init (root's)
        denied = []
        for read in (procfs.environ, procfs.numa_maps, procfs.fd_targets):
            try:
                read(1)
            except AccessDenied as exc:
                denied.append(type(exc).__name__)
        return ",".join(denied), procfs.stat(1).state, procfs.owner(1)

    denied, state, owner = in_child(body)
    assert denied == "AccessDenied,AccessDenied,AccessDenied" and state and owner == 0


@given(st.integers(min_value=1, max_value=2**22 + 5000))
def test_any_pid_is_read_or_a_process_error(pid: int) -> None:
    try:
        stat = procfs.stat(pid)
    except ProcessError as exc:
        assert exc.pid == pid
        return
    assert stat.pid == pid and stat.start >= 0


def test_own_memory_from_status_is_what_numa_maps_counts_as_the_processs_own() -> None:
    # ps decides from status (cheap, anyone's to read) whether a process is too small to judge by its memory,
    # instead of walking numa_maps: the two must agree on what a process made itself.
    def body() -> tuple[int | None, int, int | None]:
        from numapin.kernel.residency import residency

        before = procfs.own_memory(os.getpid())
        held = b"x" * (64 << 20)  # written: resident, anonymous
        own = sum(residency().own_bytes.values())
        after = procfs.own_memory(os.getpid())
        del held
        return before, own, after

    before, own, after = in_child(body)
    assert before is not None and after is not None and after - before >= 60 << 20
    assert abs(after - own) < 8 << 20, (after, own)


def test_kernel_threads_are_told_from_processes() -> None:
    # Two sources that must agree: the PF_KTHREAD flag in stat, and status, which has memory lines for every
    # process with memory. (A container may show no kernel thread: then every process has memory.)
    told = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                stat, own = procfs.stat(int(name)), procfs.own_memory(int(name))
                after, again = procfs.stat(int(name)), procfs.own_memory(int(name))
            except ProcessError:
                continue  # ended meanwhile
            # One exiting between the reads (its memory gone from status before it turns zombie) is left out.
            if not stat.exited and not after.exited and after.start == stat.start and (own is None) == (again is None):
                told[int(name)] = (stat.kernel_thread, own is None)
    assert told and all(flag == memoryless for flag, memoryless in told.values()), told
    assert told[os.getpid()] == (False, False)


def test_a_namespace_is_the_inode_of_its_file_for_this_process_and_a_child_in_new_ones() -> None:
    # Read from the link's text: the same inode a stat of the namespace's file gives, here and in a child given
    # a PID and a mount namespace of its own (as root; else only this process's).
    assert {kind: procfs.namespace("self", kind) for kind in ("mnt", "pid")} == \
           {kind: os.stat(f"/proc/self/ns/{kind}").st_ino for kind in ("mnt", "pid")}
    if os.geteuid() != 0:
        return
    child = subprocess.Popen(["unshare", "--pid", "--mount", "--fork", "--kill-child", "sleep", "30"])
    try:
        for _ in range(200):  # unshare forks the sleep once its namespaces are made
            inner = [int(t) for t in Path(f"/proc/{child.pid}/task/{child.pid}/children").read_text().split()]
            if inner:
                break
            time.sleep(0.01)
        assert inner, "unshare made no child"
        for kind in ("mnt", "pid"):
            read = procfs.namespace(inner[0], kind)
            assert read == os.stat(f"/proc/{inner[0]}/ns/{kind}").st_ino
            assert read != procfs.namespace("self", kind)
    finally:
        child.kill()
        child.wait()
