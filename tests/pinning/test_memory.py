"""Memory policies through the real syscalls on this machine (node 0), each in a child process."""

from __future__ import annotations

import errno
import mmap
import os
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

import numapin
from conftest import in_child
from live import ALL, NODE0, REAL_NODES
from memory_model import ModelMemory
from numapin.base.errors import UsageError
from numapin.cpuset import CpuSet
from numapin.kernel.mempolicy import KernelMemoryPolicy
from numapin.kernel.residency import parse_numa_maps, residency
from numapin.pinning.memory import (
    MemoryMode,
    MemoryPolicyError,
    get_mempolicy,
    migrate,
    place_memory,
    set_mempolicy,
    system_nodes,
)

pytestmark = pytest.mark.skipif(0 not in system_nodes(), reason="needs NUMA node 0")


def test_bind_preferred_default_read_back() -> None:
    def body() -> list[tuple[str, str]]:
        seen = [(get_mempolicy()[0].name, str(get_mempolicy()[1]))]
        for policy in (KernelMemoryPolicy.BIND, KernelMemoryPolicy.PREFERRED, KernelMemoryPolicy.INTERLEAVE):
            got = set_mempolicy(policy, [0])
            assert got == get_mempolicy()
            seen.append((got[0].name, str(got[1])))
        set_mempolicy("local")
        seen.append((get_mempolicy()[0].name, str(get_mempolicy()[1])))
        set_mempolicy("default")
        seen.append((get_mempolicy()[0].name, str(get_mempolicy()[1])))
        return seen

    seen = in_child(body)
    assert seen[0] == ("DEFAULT", "")
    assert seen[1:4] == [("BIND", "0"), ("PREFERRED", "0"), ("INTERLEAVE", "0")]
    assert seen[4] in (("LOCAL", ""), ("PREFERRED", ""))
    assert seen[5] == ("DEFAULT", "")


def test_preferred_many_where_the_kernel_has_it() -> None:
    def body() -> str:
        try:
            got = set_mempolicy(KernelMemoryPolicy.PREFERRED_MANY, [0])
        except MemoryPolicyError as exc:  # kernels before 5.15
            assert "EINVAL" in str(exc)
            return "absent"
        assert got == get_mempolicy() == (KernelMemoryPolicy.PREFERRED_MANY, CpuSet([0]))
        return "read back"

    major, minor = (int(x) for x in os.uname().release.split(".")[:2])
    assert in_child(body) == ("read back" if (major, minor) >= (5, 15) else "absent"), "MPOL_PREFERRED_MANY: 5.15"


def test_policy_belongs_to_the_thread_and_its_children() -> None:
    def body() -> tuple[str, str, str]:
        import threading

        out: dict[str, str] = {}
        before = threading.Thread(target=lambda: (threading.Event().wait(0.2), out.__setitem__(
            "old", get_mempolicy()[0].name)))
        before.start()
        set_mempolicy(KernelMemoryPolicy.BIND, [0])
        after = threading.Thread(target=lambda: out.__setitem__("new", get_mempolicy()[0].name))
        after.start()
        after.join()
        before.join()
        return get_mempolicy()[0].name, out["new"], out["old"]

    assert in_child(body) == ("BIND", "BIND", "DEFAULT")


def test_node_that_does_not_exist_fails_before_the_syscall_and_changes_nothing() -> None:
    def body() -> tuple[str, str]:
        set_mempolicy(KernelMemoryPolicy.PREFERRED, [0])
        missing = system_nodes().last() + 1
        with pytest.raises(UsageError, match=f"node\\(s\\) {missing} do not exist"):
            set_mempolicy(KernelMemoryPolicy.BIND, [missing])
        policy, nodes = get_mempolicy()
        return policy.name, str(nodes)

    assert in_child(body) == ("PREFERRED", "0")


def test_bad_arguments() -> None:
    with pytest.raises(UsageError, match="needs at least one node"):
        set_mempolicy(KernelMemoryPolicy.BIND, [])
    with pytest.raises(UsageError, match="takes no nodes"):
        set_mempolicy(KernelMemoryPolicy.DEFAULT, [0])
    with pytest.raises(UsageError, match="unknown memory policy"):
        set_mempolicy("sometimes", [0])


def test_kernel_refusal_names_syscall_nodes_and_errno(tmp_path: Path) -> None:
    # A node that exists for numapin's check (a root that says so) but not for
    # the kernel: the kernel's own EINVAL must surface, with its name as a field.
    (tmp_path / "sys/devices/system/node").mkdir(parents=True)
    (tmp_path / "sys/devices/system/node/has_memory").write_text("0-1000\n")
    (tmp_path / "proc/self").mkdir(parents=True)
    (tmp_path / "proc/self/status").write_text("Mems_allowed_list:\t0-1000\n")

    def body() -> tuple[str, str | None]:
        with pytest.raises(MemoryPolicyError) as info:
            set_mempolicy(KernelMemoryPolicy.BIND, [900], root=tmp_path)
        assert get_mempolicy()[0] is KernelMemoryPolicy.DEFAULT, "the previous policy stays"
        return str(info.value), info.value.errno

    message, name = in_child(body)
    assert "set_mempolicy(BIND, nodes 900)" in message and "EINVAL" in message and name == "EINVAL"


# -- the memory model: refusals on demand --------------------------------------------


@pytest.fixture
def four_nodes(tmp_path: Path) -> Path:
    """A root whose machine has memory nodes 0-3, all allowed: what the model stands for."""
    (tmp_path / "sys/devices/system/node").mkdir(parents=True)
    (tmp_path / "sys/devices/system/node/has_memory").write_text("0-3\n")
    (tmp_path / "proc/self").mkdir(parents=True)
    (tmp_path / "proc/self/status").write_text("Mems_allowed_list:\t0-3\n")
    return tmp_path


def test_bind_refused_steps_down_to_preferred(four_nodes: Path) -> None:
    model = ModelMemory(CpuSet("0-1"))
    model.refuse[KernelMemoryPolicy.BIND] = errno.EPERM
    result = place_memory(CpuSet([1]), MemoryMode.BIND, False, strict=False, kernel=model, root=four_nodes)
    assert (result.asked, result.applied) == (MemoryMode.BIND, MemoryMode.PREFERRED)
    assert model.policy == (KernelMemoryPolicy.PREFERRED, CpuSet([1])) and len(result.problems) == 1
    assert "EPERM" in result.problems[0] and str(result) == "memory preferred 1 (asked bind)"


def test_every_step_refused_leaves_the_policy_and_says_so(four_nodes: Path) -> None:
    model = ModelMemory(CpuSet("0-1"))
    model.refuse.update({KernelMemoryPolicy.BIND: errno.EINVAL, KernelMemoryPolicy.PREFERRED: errno.EINVAL})
    result = place_memory(CpuSet([1]), MemoryMode.BIND, False, strict=False, kernel=model, root=four_nodes)
    assert result.applied is MemoryMode.NONE and len(result.problems) == 2
    assert model.policy == (KernelMemoryPolicy.DEFAULT, CpuSet())
    assert model.calls == ["set BIND 1", "set PREFERRED 1"]


def test_strict_memory_refusal_is_an_environment_problem_with_the_errno(four_nodes: Path) -> None:
    model = ModelMemory(CpuSet("0-1"))
    model.refuse[KernelMemoryPolicy.BIND] = errno.EPERM
    with pytest.raises(MemoryPolicyError) as info:
        place_memory(CpuSet([1]), MemoryMode.BIND, False, strict=True, kernel=model, root=four_nodes)
    assert info.value.errno == "EPERM" and model.calls == ["set BIND 1"], "strict: no step-down"


def test_a_read_back_that_differs_is_a_refusal(four_nodes: Path) -> None:
    model = ModelMemory(CpuSet("0-1"))
    model.report = (KernelMemoryPolicy.PREFERRED, CpuSet([0]))  # the kernel quietly changed it
    with pytest.raises(MemoryPolicyError, match="read back as PREFERRED 0"):
        set_mempolicy(KernelMemoryPolicy.BIND, [1], kernel=model, root=four_nodes)


def test_several_nodes_prefer_many_then_the_first(four_nodes: Path) -> None:
    model = ModelMemory(CpuSet("0-3"))
    model.refuse[KernelMemoryPolicy.PREFERRED_MANY] = errno.EINVAL  # kernels before 5.15
    result = place_memory(CpuSet("2-3"), MemoryMode.PREFERRED, False, strict=False, kernel=model, root=four_nodes)
    assert result.applied is MemoryMode.PREFERRED and model.policy == (KernelMemoryPolicy.PREFERRED, CpuSet([2]))
    assert model.calls == ["set PREFERRED_MANY 2-3", "set PREFERRED 2"] and result.problems == ()


def test_migration_reports_the_pages_it_could_not_move(four_nodes: Path) -> None:
    model = ModelMemory(CpuSet("0-1"))
    model.unmovable = 17
    result = place_memory(CpuSet([1]), MemoryMode.NONE, True, strict=False, kernel=model, root=four_nodes)
    assert result.migration is not None and result.migration.not_moved == 17
    assert "17 pages not moved" in str(result)


def test_a_node_the_machine_lacks_is_the_callers_mistake_but_an_environment_problem_in_a_pin(
        tmp_path: Path) -> None:
    # set_mempolicy() with a missing node: the caller named it. place_memory()
    # with one: numapin computed it from the facts, so it is the environment's.
    model = ModelMemory(CpuSet("0-1"))
    with pytest.raises(UsageError, match="do not exist"):
        set_mempolicy(KernelMemoryPolicy.BIND, [7], kernel=model, root=tmp_path)
    with pytest.raises(MemoryPolicyError, match="do not exist"):
        place_memory(CpuSet([7]), MemoryMode.BIND, False, strict=True, kernel=model, root=tmp_path)
    assert model.calls == []


def test_migrate_to_node_zero() -> None:
    def body() -> int:
        buf = mmap.mmap(-1, 1 << 20)
        buf.write(b"x" * (1 << 20))  # touch the pages
        result = migrate([0])
        assert result.to_nodes == CpuSet([0])
        return result.not_moved

    assert in_child(body) == 0


def test_migrate_to_a_missing_node_is_a_clear_error() -> None:
    with pytest.raises(UsageError, match="do not exist"):
        migrate([system_nodes().last() + 1])


def test_pin_binds_memory_and_migrates(pair_root: Path) -> None:
    def body() -> tuple[str, str, bool, str]:
        result = numapin.pin(0, memory="bind", migrate=True)
        assert result.memory is not None and result.memory.migration is not None
        policy, nodes = get_mempolicy()
        not_moved = result.memory.migration.not_moved
        # With one real node every page is already there; with more, at most every page stays.
        fits = not_moved == 0 if len(REAL_NODES) == 1 else 0 <= not_moved <= sum(residency().pages.values())
        return policy.name, str(nodes), fits, str(result)

    policy, nodes, migrated, text = in_child(body)
    assert (policy, nodes, migrated) == ("BIND", "0", True)
    assert "memory bind 0" in text and "migrated" in text


def test_pin_steps_down_when_memory_is_refused(refusing_root: Path) -> None:
    # GPU 1's node exists on the test root but not on this machine: bind and
    # preferred are refused, so the pin keeps its CPU part and memory steps down.
    def body() -> tuple[str, tuple[str, ...], str]:
        result = numapin.pin(1, memory="bind")
        assert result.memory is not None
        numapin.pin(0)
        with pytest.raises(MemoryPolicyError) as raised:  # the kernel's refusal keeps its class
            numapin.pin(1, memory="bind", strict=True)
        assert raised.value.result.action is numapin.PinAction.ROLLED_BACK  # type: ignore[attr-defined]
        assert os.sched_getaffinity(0) == NODE0, "strict: nothing half-applied"
        return result.memory.applied, result.memory.problems, get_mempolicy()[0].name

    applied, problems, policy = in_child(body)
    assert applied == "none" and len(problems) == 2 and policy == "DEFAULT"


# -- numa_maps -------------------------------------------------------------------

SAMPLE = """\
00400000 default file=/usr/bin/python3.11 mapped=100 mapmax=3 N0=60 N1=40 kernelpagesize_kB=4
7f0000000000 bind:1 anon=512 dirty=512 N1=512 kernelpagesize_kB=4
7f2000000000 default file=/anon_hugepage\\040(deleted) huge anon=4 dirty=4 N0=1 N1=3 kernelpagesize_kB=2048
7f4000000000 interleave:0-1 anon=8 dirty=8 N0=4 N1=4 kernelpagesize_kB=1048576
7ffd00000000 default stack anon=3 dirty=3 N0=3 kernelpagesize_kB=4
7ffe00000000 default
7fff00000000 default file=/dev/zero
"""


def test_numa_maps_sample_with_huge_pages() -> None:
    r = parse_numa_maps(SAMPLE, pid=7)
    assert r.pages == {0: 60 + 1 + 4 + 3, 1: 40 + 512 + 3 + 4}
    kib = 1024
    assert r.bytes[0] == (60 + 3) * 4 * kib + 1 * 2048 * kib + 4 * 1048576 * kib
    assert r.bytes[1] == (40 + 512) * 4 * kib + 3 * 2048 * kib + 4 * 1048576 * kib
    assert r.share_outside([0, 1]) == 0.0
    assert 0.49 < r.share_outside([0]) < 0.51
    assert str(r).startswith("pid 7: node 0 ")
    # Own memory leaves out the mapped file (the python binary: 60 pages on node 0, 40 on node 1).
    assert r.own_bytes[0] == r.bytes[0] - 60 * 4 * kib and r.own_bytes[1] == r.bytes[1] - 40 * 4 * kib
    assert r.share_outside([1], own=True) == r.outside([1], own=True) / sum(r.own_bytes.values())


def test_shared_anonymous_memory_is_the_process_own() -> None:
    text = ("1000 default file=/usr/lib/libc.so.6 mapped=5 N0=5 kernelpagesize_kB=4\n"
            "2000 default file=/dev/zero\\040(deleted) dirty=7 N1=7 kernelpagesize_kB=4\n"
            "3000 default file=/dev/shm/torch_1 dirty=2 N1=2 kernelpagesize_kB=4\n"
            "4000 default file=/SYSV00000000\\040(deleted) dirty=1 N1=1 kernelpagesize_kB=4\n")
    r = parse_numa_maps(text, page_size=4096)
    assert r.bytes == {0: 5 * 4096, 1: 10 * 4096} and r.own_bytes == {1: 10 * 4096}
    assert r.share_outside([1], own=True) == 0.0 and 0.3 < r.share_outside([1]) < 0.4


def test_numa_maps_without_page_size_uses_the_base_page() -> None:
    r = parse_numa_maps("1000 default anon=2 N3=2\n", page_size=4096)
    assert r.bytes == {3: 8192} and r.total == 8192


def test_numa_maps_of_this_process() -> None:
    text = Path("/proc/self/numa_maps").read_text()
    r = residency()
    assert r.total > 0 and set(r.pages) <= set(REAL_NODES)
    assert parse_numa_maps(text).pages.keys() == r.pages.keys()


def test_residency_of_a_missing_process() -> None:
    from numapin.base.errors import NoSuchProcess

    with pytest.raises(NoSuchProcess, match="does not exist") as raised:
        residency(2**22 + 12345)
    assert raised.value.pid == 2**22 + 12345


@given(st.text())
def test_numa_maps_parser_never_raises(text: str) -> None:
    r = parse_numa_maps(text, page_size=4096)
    # One well-formed line more adds exactly its pages, whatever came before it.
    more = parse_numa_maps(text + "\n7f00 default anon=2 N3=2 kernelpagesize_kB=8\n", page_size=4096)
    assert more.pages.get(3, 0) == r.pages.get(3, 0) + 2 and more.bytes.get(3, 0) == r.bytes.get(3, 0) + 2 * 8192
    assert all(0 <= r.own_bytes.get(n, 0) <= b for n, b in r.bytes.items()) and r.own_bytes.keys() <= r.bytes.keys()


@given(st.lists(st.tuples(st.integers(0, 7), st.integers(0, 10**6), st.sampled_from([4, 64, 2048])), max_size=20))
def test_numa_maps_counts_add_up(entries: list[tuple[int, int, int]]) -> None:
    text = "".join(f"{i:x}000 default anon={n} N{node}={n} kernelpagesize_kB={k}\n"
                   for i, (node, n, k) in enumerate(entries))
    r = parse_numa_maps(text)
    assert r.total == sum(n * k * 1024 for _, n, k in entries)


def test_unsupported_architecture(monkeypatch: pytest.MonkeyPatch) -> None:
    from types import SimpleNamespace

    from numapin.pinning.memory import NotSupported

    monkeypatch.setattr(os, "uname", lambda: SimpleNamespace(machine="riscv64"))
    with pytest.raises(NotSupported, match="riscv64"):
        get_mempolicy()


def test_strict_memory_failure_leaves_the_reserved_thread_where_it_was(refusing_root: Path) -> None:
    def body() -> tuple[set[int], set[int]]:
        numapin.pin(cpus=ALL, reserve=1)  # calling thread on the reserved (highest) CPU, the rest elsewhere
        with pytest.raises(MemoryPolicyError):
            # Every CPU's nodes include one the real kernel lacks: binding to them is refused.
            numapin.pin(cpus=ALL, reserve=1, memory="bind", strict=True)
        return os.sched_getaffinity(0), numapin.current().applied.mask  # type: ignore[union-attr,return-value]

    mine, recorded = in_child(body)
    assert mine == {max(ALL)} and recorded == CpuSet(ALL - {max(ALL)})


def test_a_lease_puts_the_memory_policy_back(pair_root: Path) -> None:
    def body() -> list[tuple[str, str]]:
        seen = []
        set_mempolicy(KernelMemoryPolicy.PREFERRED, [0])
        with numapin.pinned(gpu=0, memory="bind"):
            seen.append((get_mempolicy()[0].name, str(get_mempolicy()[1])))
        seen.append((get_mempolicy()[0].name, str(get_mempolicy()[1])))
        with numapin.pinned(gpu=0):  # a lease without memory leaves the policy alone
            set_mempolicy(KernelMemoryPolicy.BIND, [0])
        seen.append((get_mempolicy()[0].name, str(get_mempolicy()[1])))
        return seen

    assert in_child(body) == [("BIND", "0"), ("PREFERRED", "0"), ("BIND", "0")]
