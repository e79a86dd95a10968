"""Checks that run inside a guest with real NUMA nodes, each against what the kernel reports.

Run as ``python tests/guest/checks.py OUT.json SHAPE [NAME,...]`` inside a guest (see
``runner.py``); every check runs in a forked child, so no pin or memory policy
of one leaks into the next. Each is an assertion against the kernel's own
account: ``move_pages`` for where a buffer's pages are, ``get_mempolicy``,
``/proc/<pid>/numa_maps``, ``sched_getaffinity`` of every thread, and Debian's
``numactl`` as an independent reader.

GPU facts come from a root folder written to match the guest's real nodes
(``tests/live.py``): GPU k sits on CPU node k, so ``pin(gpu=1)`` lands on the
real node 1.
"""

from __future__ import annotations

import ctypes
import json
import logging
import mmap
import os
import platform
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # tests/: live.py
from live import masks  # noqa: E402

#: The bytes each check touches: small enough for a 512 MiB node, large enough to count.
BUFFER = 64 << 20
#: The share of a buffer's pages that must land where numapin put them.
ON_NODE = 0.99


@dataclass(frozen=True)
class Check:
    name: str
    run: Callable[[], str]
    shapes: tuple[str, ...] | None = None  # None: every guest shape
    doc: str = ""


CHECKS: dict[str, Check] = {}


def check(*, shapes: tuple[str, ...] | None = None) -> Callable[[Callable[[], str]], Callable[[], str]]:
    def register(fn: Callable[[], str]) -> Callable[[], str]:
        CHECKS[fn.__name__] = Check(fn.__name__, fn, shapes, (fn.__doc__ or "").strip())
        return fn

    return register


def names_for(shape: str) -> list[str]:
    return [c.name for c in CHECKS.values() if c.shapes is None or shape in c.shapes]


# -- what the kernel says ------------------------------------------------------

_MOVE_PAGES = {"x86_64": 279, "aarch64": 239}
_libc = ctypes.CDLL(None, use_errno=True)


def page_nodes(buf: mmap.mmap) -> Counter[int]:
    """Where each page of ``buf`` is, by ``move_pages(2)`` with no target (a query): node -> pages."""
    size = os.sysconf("SC_PAGE_SIZE")
    count = len(buf) // size
    base = ctypes.addressof(ctypes.c_char.from_buffer(buf))
    pages = (ctypes.c_void_p * count)(*(base + i * size for i in range(count)))
    status = (ctypes.c_int * count)()
    rc = _libc.syscall(_MOVE_PAGES[platform.machine()], 0, ctypes.c_ulong(count), pages, None, status, 0)
    if rc != 0:
        raise OSError(ctypes.get_errno(), "move_pages query failed")
    return Counter(status)


def touched(size: int = BUFFER) -> mmap.mmap:
    """A private anonymous buffer with every page written (first touch happens here)."""
    buf = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    buf.write(b"\x01" * size)
    return buf


def share_on(counts: Counter[int], node: int) -> float:
    return counts[node] / sum(counts.values())


@contextmanager
def warnings_logged() -> Iterator[list[str]]:
    seen: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if record.levelno >= logging.WARNING:
                seen.append(record.getMessage())

    handler = Keep()
    logger = logging.getLogger("numapin")
    logger.addHandler(handler)
    try:
        yield seen
    finally:
        logger.removeHandler(handler)


def held_threads(count: int) -> tuple[threading.Event, list[threading.Thread]]:
    stop = threading.Event()
    threads = [threading.Thread(target=stop.wait, daemon=True) for _ in range(count)]
    for t in threads:
        t.start()
    return stop, threads


def numapin_cli(*args: str, **kwargs: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "numapin", *args], capture_output=True, text=True,
                          timeout=300, **kwargs)  # type: ignore[call-overload]


# Touches BUFFER bytes, then reports its mask, memory policy and where the pages are.
TOUCH_AND_REPORT = f"""
import json, os, sys
sys.path.insert(0, {str(HERE)!r})
from checks import page_nodes, touched
import numapin.pinning.memory
import numapin.kernel.mempolicy
buf = touched()
policy, nodes = numapin.pinning.memory.get_mempolicy()
print(json.dumps({{"mask": sorted(os.sched_getaffinity(0)), "policy": policy.name, "nodes": str(nodes),
                  "pages": {{str(k): v for k, v in page_nodes(buf).items()}}}}), flush=True)
if len(sys.argv) > 1:
    sys.stdin.read()  # stay alive until told
"""


# -- the checks ------------------------------------------------------------------


@check()
def spawn_storm_every_thread() -> str:
    """Every thread on the GPU's node after pin() returns, while threads keep spawning threads."""
    from live import NODE0, NODE1, storm_round
    from numapin.kernel.affinity import Outcome

    rounds = 12
    for round_ in range(rounds):
        gpu = round_ % 2
        result, seen = storm_round(gpu, cap=60)
        target = NODE0 if gpu == 0 else NODE1
        assert result.count(Outcome.FAILED) == 0, str(result)
        wrong = {tid: m for tid, m in seen.items() if m != target}
        assert not wrong, f"round {round_}: threads off node {gpu}: {wrong}"
    return f"{rounds} rounds, up to 240 threads each, none off target"


def _first_touch(memory: str) -> str:
    import numapin.kernel.mempolicy
    import numapin.pinning.memory
    from live import NODE1

    result = numapin.pin(1, memory=memory)
    assert result.memory is not None and result.memory.applied == memory, str(result)
    policy, nodes = numapin.pinning.memory.get_mempolicy()
    expected = {"bind": "BIND", "preferred": "PREFERRED"}[memory]
    assert (policy.name, str(nodes)) == (expected, "1"), f"get_mempolicy: {policy.name} {nodes}"
    counts = page_nodes(touched())
    assert share_on(counts, 1) >= ON_NODE, f"pages by node {dict(counts)}"
    assert all(m == NODE1 for m in masks().values())
    return f"{100 * share_on(counts, 1):.2f}% of {sum(counts.values())} pages on node 1"


@check()
def bind_first_touch_on_the_node() -> str:
    """pin(gpu=1, memory="bind"): pages touched afterwards are on node 1."""
    return _first_touch("bind")


@check()
def preferred_first_touch_on_the_node() -> str:
    """pin(gpu=1, memory="preferred"): pages touched afterwards are on node 1."""
    return _first_touch("preferred")


@check()
def migrate_moves_earlier_pages() -> str:
    """pin(..., migrate=True) moves pages touched before the pin, and counts truthfully what stayed."""
    import numapin.kernel.mempolicy
    import numapin.pinning.memory

    numapin.pin(0, memory="bind")
    buf = touched()
    before = page_nodes(buf)
    assert share_on(before, 0) >= ON_NODE, f"set-up: pages by node {dict(before)}"
    result = numapin.pin(1, memory="bind", migrate=True)
    assert result.memory is not None and result.memory.migration is not None, str(result)
    after = page_nodes(buf)
    stayed = sum(v for k, v in after.items() if k != 1)
    assert share_on(after, 1) >= ON_NODE, f"pages by node after migration {dict(after)}"
    assert stayed <= result.memory.migration.not_moved or stayed == 0, \
        f"{stayed} pages of the buffer stayed but migration reported {result.memory.migration.not_moved}"
    return f"before {dict(before)}, after {dict(after)}; {result.memory.migration}"


def long_term_pinned(buf: mmap.mmap) -> int:
    """Pin ``buf``'s pages for good as a device driver does (``FOLL_LONGTERM``, as cudaHostRegister and RDMA
    registrations pin them), through io_uring's registered buffers: the one such pin a guest without a device has.
    The ring's descriptor: the pages stay pinned while it is open."""
    params = ctypes.create_string_buffer(120)  # struct io_uring_params, zeroed
    ring = _libc.syscall(425, 1, params)  # io_uring_setup: one number on x86_64 and aarch64 (the generic table)
    assert ring >= 0, f"io_uring_setup: {os.strerror(ctypes.get_errno())}"

    class Iovec(ctypes.Structure):
        _fields_ = [("base", ctypes.c_void_p), ("length", ctypes.c_size_t)]

    vector = Iovec(ctypes.addressof(ctypes.c_char.from_buffer(buf)), len(buf))
    rc = _libc.syscall(427, ring, 0, ctypes.byref(vector), 1)  # io_uring_register(IORING_REGISTER_BUFFERS)
    assert rc == 0, f"io_uring_register: {os.strerror(ctypes.get_errno())}"
    return ring


@check(shapes=("two-node",))
def pinned_pages_stay_after_a_late_pin_and_it_is_said() -> str:
    """Pages pinned for a device before a late pin(migrate=True) cannot move: they stay, the migration counts
    them, and the one warning says what they likely are and what to do."""
    import numapin

    numapin.pin(0, memory="bind")
    buf = touched(8 << 20)
    ring = long_term_pinned(buf)
    try:
        with warnings_logged() as said:
            result = numapin.pin(1, memory="bind", migrate=True)
        after = page_nodes(buf)
    finally:
        os.close(ring)
    assert result.memory is not None and result.memory.migration is not None, str(result)
    assert share_on(after, 0) == 1.0, f"pinned pages moved: {dict(after)}"
    stayed = dict(result.memory.migration.stayed)
    assert stayed.get(0, 0) >= len(buf), (result.memory.migration, dict(after))  # read back, not the kernel's count
    assert any("cannot move" in s and "stayed on node(s) 0" in s for s in said), said
    return f"after {dict(after)}; {result.memory.migration}"


@check()
def step_down_on_a_real_refusal() -> str:
    """A cgroup whose mems exclude node 1: the kernel refuses, bind steps down to none; strict rolls back."""
    import numapin.kernel.mempolicy
    import numapin.pinning.memory
    from live import NODE0, NODE1

    group = Path("/sys/fs/cgroup/numapin-check")
    Path("/sys/fs/cgroup/cgroup.subtree_control").write_text("+cpuset\n")
    group.mkdir(exist_ok=True)
    (group / "cpuset.mems").write_text("0\n")
    (group / "cgroup.procs").write_text(f"{os.getpid()}\n")
    # The kernel's own refusal, without numapin: MPOL_BIND on node 1 is EINVAL here.
    mask = ctypes.c_ulong(1 << 1)
    rc = _libc.syscall({"x86_64": 238, "aarch64": 237}[platform.machine()], 2, ctypes.byref(mask), 65)
    assert rc == -1 and ctypes.get_errno() == 22, f"the kernel accepted BIND on node 1 (rc {rc})"
    with warnings_logged() as warned:
        result = numapin.pin(1, memory="bind")
    assert result.memory is not None and result.memory.applied == "none", str(result)
    assert len(result.memory.problems) == 2 and len(warned) == 1, (result.memory.problems, warned)
    assert numapin.pinning.memory.get_mempolicy()[0].name == "DEFAULT"
    assert all(m == NODE1 for m in masks().values()), "the CPU part holds"
    numapin.pin(0)
    try:
        numapin.pin(1, memory="bind", strict=True)
    except numapin.pinning.memory.MemoryPolicyError as exc:  # the refusal keeps its class, the result attached
        assert exc.result.action is numapin.PinAction.ROLLED_BACK, exc.result  # type: ignore[attr-defined]
    else:
        raise AssertionError("strict pin with refused memory did not raise")
    assert all(m == NODE0 for m in masks().values()), "strict: the CPU pin rolled back"
    return f"stepped down: {result.memory}"


@check()
def pods_known_from_cgroup_v2_paths() -> str:
    """A process moved into every kubelet layout on cgroup v2 is known by its pod and container."""
    import kube
    from numapin.facts.pod import Pod, pod_of

    top = Path("/sys/fs/cgroup")
    every = kube.layouts() + kube.layouts(root="kubelet")
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        with kube.placed_in(top, [k.path for k in every]) as groups:
            for layout in every:
                (groups[layout.path] / "cgroup.procs").write_text(f"{child.pid}\n")
                assert Path(f"/proc/{child.pid}/cgroup").read_text().startswith("0::"), "cgroup v2"
                want = Pod(layout.uid, layout.qos, layout.driver, layout.container_id, layout.runtime_said)
                assert pod_of(child.pid) == want, layout.path
    finally:
        child.kill()
        child.wait()
    return f"{len(every)} layouts on cgroup v2, each known by its pod"


@check()
def keeper_places_again_as_the_cpuset_changes() -> str:
    """A worker pinned to node 0 in a cgroup v2 cpuset shrunk to part of node 0 and node 1, then to node 1
    alone, then widened to every CPU: each time the keeper says what the kernel did and puts node 0's
    part back on every thread (none fits in the second step: left to the cgroup)."""
    import kube
    import numapin
    from live import ALL, NODE0, NODE1, cpus
    from numapin.pinning.keeper import Response, this_process

    top = kube.cpuset_hierarchy()
    assert top is not None and (top / "cgroup.controllers").exists(), "cgroup v2 with the cpuset controller"
    first = {min(NODE0)}
    steps = ([(first | NODE1, first)] if len(NODE0) > 1 else []) + [(NODE1, None), (ALL, NODE0)]
    said = []
    with kube.placed_in(top, ["numapin-keeper-check"], cpus=cpus(ALL)) as groups:
        group = groups["numapin-keeper-check"]

        def run() -> list[str]:
            (group / "cgroup.procs").write_text(f"{os.getpid()}\n")
            stop, threads = held_threads(3)
            try:
                numapin.pin(0)
                keeper = this_process()
                assert keeper is not None
                for allowed, placed in steps:
                    (group / "cpuset.cpus").write_text(cpus(allowed) + "\n")
                    by_kernel = {tid: m for tid, m in masks().items()}
                    (event,) = keeper.check()
                    now = masks()
                    if placed is None:
                        assert event.response is Response.LEFT, event
                        assert all(m == by_kernel[t] for t, m in now.items() if t in by_kernel), "left as it was"
                    else:
                        assert all(m == placed for m in now.values()), (allowed, now)
                        reset = sum(1 for m in by_kernel.values() if m == allowed and m != placed)
                        assert ("kernel had reset" in (event.note or "")) == bool(reset), (event, by_kernel)
                    said.append(f"{cpus(allowed)}: {event.response.value} ({event.note})")
                # The memory nodes cut to node 1: reported (a thread's memory policy is its own; the kernel
                # rebinds it), the CPUs' placement untouched.
                (group / "cpuset.mems").write_text("1\n")
                (event,) = keeper.check()
                assert (event.cause.value, event.response) == ("mems", Response.REPORTED), event
                assert str(event.after) == "1" and all(m == NODE0 for m in masks().values())
                said.append(f"mems 1: {event.response.value}")
                return said
            finally:
                stop.set()
                for t in threads:
                    t.join()

        return "; ".join(forked(run))  # type: ignore[arg-type]


@check(shapes=("grace",))
def memory_only_nodes_never_hold_cpus() -> str:
    """On a Grace-shaped machine, no placement's CPUs or memory nodes come from CPU-less nodes."""
    import numapin.kernel.mempolicy
    import numapin.pinning.memory
    from live import TOPOLOGY

    memory_only = {n.id for n in TOPOLOGY.memory_only_nodes}
    assert memory_only, "this guest should have CPU-less nodes"
    plans = []
    for mode in ("node", "socket", "exclusive", "core-complex", "single"):
        for p in numapin.plan_ranks(mode=mode):
            plans.append(p)
            assert not set(TOPOLOGY.nodes_of(p.cpus)) & memory_only, p
            assert not set(p.mems) & memory_only and p.node not in memory_only, p
    result = numapin.pin(1, memory="bind")
    assert result.memory is not None and str(result.memory.nodes) == "1", str(result)
    return f"{len(plans)} placements, memory-only nodes {sorted(memory_only)} in none"


@check(shapes=("grace",))
def memory_only_node_honoured_when_asked() -> str:
    """Memory asked for on a CPU-less node lands there: set_mempolicy(BIND, [that node])."""
    import numapin.kernel.mempolicy
    import numapin.pinning.memory
    from live import TOPOLOGY

    node = TOPOLOGY.memory_only_nodes[0].id
    numapin.pinning.memory.set_mempolicy(numapin.kernel.mempolicy.KernelMemoryPolicy.BIND, [node])
    counts = page_nodes(touched(32 << 20))
    assert share_on(counts, node) >= ON_NODE, f"pages by node {dict(counts)}"
    return f"{100 * share_on(counts, node):.2f}% on memory-only node {node}"


def _exec_report(*options: str) -> dict[str, object]:
    proc = numapin_cli("exec", "--gpu", "1", *options, "--", sys.executable, "-c", TOUCH_AND_REPORT)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)  # type: ignore[no-any-return]


@check()
def exec_bind_first_touch() -> str:
    """numapin exec --memory bind: the program's first touch lands on the GPU's node."""
    from live import NODE1

    report = _exec_report("--memory", "bind")
    pages = {int(k): v for k, v in report["pages"].items()}  # type: ignore[attr-defined]
    assert report["mask"] == sorted(NODE1) and (report["policy"], report["nodes"]) == ("BIND", "1"), report
    assert pages.get(1, 0) / sum(pages.values()) >= ON_NODE, pages
    return f"mask {report['mask']}, pages {pages}"


@check()
def exec_default_prefers_the_node() -> str:
    """numapin exec (default memory: preferred): first touch on the GPU's node."""
    report = _exec_report()
    pages = {int(k): v for k, v in report["pages"].items()}  # type: ignore[attr-defined]
    assert report["policy"] == "PREFERRED" and pages.get(1, 0) / sum(pages.values()) >= ON_NODE, report
    return f"pages {pages}"


def _held(command: list[str]) -> tuple[subprocess.Popen[str], dict[str, object]]:
    proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line, proc.stderr.read() if proc.stderr else "no output"
    return proc, json.loads(line)


@check()
def threads_check_passes_for_a_placed_process() -> str:
    """numapin threads PID --check --max-remote-memory 1 passes for a process numapin exec placed."""
    proc, _ = _held([sys.executable, "-m", "numapin", "exec", "--gpu", "1", "--memory", "bind", "--",
                     sys.executable, "-c", TOUCH_AND_REPORT, "hold"])
    try:
        result = numapin_cli("threads", str(proc.pid), "--gpu", "1", "--check", "--max-remote-memory", "1")
    finally:
        proc.communicate("", timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout.splitlines()[-1]


@check()
def threads_check_fails_for_remote_memory() -> str:
    """... and exits 1 for a process on node 1's CPUs whose memory numactl bound to node 0."""
    proc, report = _held(["numactl", "--cpunodebind=1", "--membind=0", sys.executable, "-c", TOUCH_AND_REPORT,
                          "hold"])
    try:
        assert report["nodes"] == "0", report
        result = numapin_cli("threads", str(proc.pid), "--gpu", "1", "--check", "--max-remote-memory", "1")
    finally:
        proc.communicate("", timeout=60)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "0 of" in result.stdout, "every thread is inside: only memory fails the check"
    return result.stdout.splitlines()[-1]


@check()
def ps_says_misplaced_memory_by_default() -> str:
    """ps and threads, with no bound given, call a worker whose memory lies on the far node misplaced (memory)."""
    env = {**os.environ, "LOCAL_RANK": "1"}
    proc = subprocess.Popen(["numactl", "--cpunodebind=1", "--membind=0", sys.executable, "-c", TOUCH_AND_REPORT,
                             "hold"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    try:
        assert json.loads(line)["nodes"] == "0", line
        listed = numapin_cli("ps", str(proc.pid), "--json")
        threads = numapin_cli("threads", str(proc.pid), "--check")
    finally:
        proc.communicate("", timeout=60)
    worker = json.loads(listed.stdout)["workers"][0]
    assert (worker["verdict"], worker["misplaced_by"]) == ("misplaced", ["memory"]), worker
    assert threads.returncode == 1 and "misplaced (memory)" in threads.stdout, threads.stdout
    return f"ps: {worker['verdict']} ({', '.join(worker['misplaced_by'])}), remote {worker['remote_share']:.2f}"


@check()
def tensorrt_llm_compat_twice_with_six_threads() -> str:
    """configure_cpu_affinity(1) twice with six threads: every thread on node 1, the second call changes nothing."""
    from live import NODE1
    from numapin.compat.tensorrt_llm import configure_cpu_affinity
    from numapin.kernel.affinity import Outcome

    stop, _ = held_threads(6)
    with warnings_logged() as warned:
        first = configure_cpu_affinity(1)
        second = configure_cpu_affinity(1)
    stop.set()
    assert first is not None and first.count(Outcome.PINNED) == 7, str(first)
    assert second is not None and not second.changed and second.ownership == "numapin", str(second)
    assert all(m == NODE1 for m in masks().values()) and not warned, warned
    return f"{first}; then {second}"


@check()
def lease_restores_threads_and_memory_policy() -> str:
    """pinned(gpu=1, memory="bind") binds to node 1; on exit masks and the earlier policy come back."""
    import numapin.kernel.mempolicy
    import numapin.pinning.memory
    from live import ALL, NODE1

    numapin.pinning.memory.set_mempolicy(numapin.kernel.mempolicy.KernelMemoryPolicy.PREFERRED, [0])
    stop, _ = held_threads(3)
    with numapin.pinned(gpu=1, memory="bind"):
        inside = numapin.pinning.memory.get_mempolicy()
        counts = page_nodes(touched())
        assert all(m == NODE1 for m in masks().values())
    after = numapin.pinning.memory.get_mempolicy()
    back = masks()
    stop.set()
    assert (inside[0].name, str(inside[1])) == ("BIND", "1") and share_on(counts, 1) >= ON_NODE, (inside, counts)
    assert (after[0].name, str(after[1])) == ("PREFERRED", "0"), after
    assert all(m == ALL for m in back.values()), back
    return f"inside {inside[0].name} {inside[1]}, after {after[0].name} {after[1]}"


def shared_touched(size: int = BUFFER) -> mmap.mmap:
    """A shared anonymous buffer with every page written: what cudaHostAlloc's pages are, faulted in here."""
    buf = mmap.mmap(-1, size, flags=mmap.MAP_SHARED | mmap.MAP_ANONYMOUS)
    buf.write(b"\x01" * size)
    return buf


@check(shapes=("two-node", "four-node"))
def new_threads_shared_memory_lands_on_the_placed_node() -> str:
    """A worker placed on node 1: a thread it starts later maps shared anonymous memory, which lands on node 1."""
    import numapin

    numapin.pin(1, memory="none")  # the CPUs alone: the kernel's local policy places the pages
    found: list[Counter[int]] = []
    worker = threading.Thread(target=lambda: found.append(page_nodes(shared_touched())))
    worker.start()
    worker.join()
    assert share_on(found[0], 1) >= ON_NODE, f"pages by node {dict(found[0])}"
    return f"{100 * share_on(found[0], 1):.2f}% of {sum(found[0].values())} shared pages on node 1"


@check(shapes=("two-node", "four-node"))
def allocating_for_puts_one_threads_memory_on_another_node() -> str:
    """A process pinned to node 0: inside allocating_for(gpu=1) its thread's shared anonymous memory lands on
    node 1; after the block the thread has its exact mask and memory policy back, and no other thread moved."""
    import numapin.kernel.mempolicy
    import numapin.pinning.memory
    from live import NODE0

    numapin.pin(0, memory="preferred")
    stop, _ = held_threads(2)
    before = (masks(), numapin.pinning.memory.get_mempolicy())
    with numapin.allocating_for(gpu=1) as applied:
        counts = page_nodes(shared_touched())
        inside = numapin.pinning.memory.get_mempolicy()
        others = {tid: m for tid, m in masks().items() if tid != threading.get_native_id()}
    after = (masks(), numapin.pinning.memory.get_mempolicy())
    stop.set()
    assert share_on(counts, 1) >= ON_NODE, f"pages by node {dict(counts)}"
    assert (inside[0].name, str(inside[1])) == ("PREFERRED", "1") and applied.notes == (), (inside, applied)
    assert all(m == NODE0 for m in others.values()), others
    assert after == before, (before, after)
    return f"{100 * share_on(counts, 1):.2f}% of {sum(counts.values())} shared pages on node 1; thread given back"


@check(shapes=("two-node", "four-node"))
def host_buffer_fills_on_the_node_asked() -> str:
    """host_buffer(256 MiB, node=1): every page on node 1 (by move_pages here), as its own read-back says."""
    import numapin

    with numapin.host_buffer(256 << 20, node=1) as buf:
        counts = page_nodes(buf)
        said, on, threads = buf.nodes, dict(buf.on_nodes), buf.fill_threads
    assert share_on(counts, 1) == 1.0 and str(said) == "1" and on == {1: 256 << 20}, (dict(counts), said, on)
    return f"{sum(counts.values())} pages on node 1, filled by {threads} thread(s)"


_HUGE = "/sys/devices/system/node/node{}/hugepages/hugepages-2048kB/nr_hugepages"


@check(shapes=("two-node",))
def host_buffer_takes_huge_pages_from_the_nodes_pool() -> str:
    """With 2 MiB pages reserved on node 1, hugepages="2M" is backed by them there; with none on node 0, base
    pages and a note."""
    import numapin

    Path(_HUGE.format(0)).write_text("0\n")
    Path(_HUGE.format(1)).write_text("40\n")
    try:
        with numapin.host_buffer(64 << 20, node=1, hugepages="2M") as buf:
            line = next(x for x in Path("/proc/self/numa_maps").read_text().splitlines()
                        if x.startswith(f"{buf.address:x} "))
            huge = (buf.page_size, str(buf.nodes), buf.notes)
        with numapin.host_buffer(16 << 20, node=0, hugepages="2M") as small:
            base = (small.page_size, str(small.nodes), small.notes)
    finally:
        Path(_HUGE.format(1)).write_text("0\n")
    assert huge == (2 << 20, "1", ()) and "huge" in line and "N1=32" in line, (huge, line)
    assert base[:2] == (os.sysconf("SC_PAGE_SIZE"), "0") and "2M pages" in base[2][0], base
    return f"2M pages on node 1 ({line.split()[-1]}); node 0: {base[2][0][:60]}..."


_FILTERED_BUFFER = """
import sys
sys.path.insert(0, {tests!r})
import numapin
try:
    buf = numapin.host_buffer(64 << 20, {where})
except numapin.NumapinError as exc:
    print("error", exc)
else:
    line = next(x for x in open("/proc/self/numa_maps").read().splitlines() if x.startswith(f"{{buf.address:x}} "))
    print("buffer", sorted(buf.nodes), buf.notes[0], line)
"""


def _filtered_buffer(where: str) -> str:
    """A buffer made under the seccomp filter refusing the memory-policy calls (Docker's default profile)."""
    script = _FILTERED_BUFFER.format(tests=str(HERE.parent), where=where)
    done = subprocess.run([sys.executable, str(HERE.parent / "seccomp_filter.py"), sys.executable, "-c", script],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


@check(shapes=("two-node",))
def host_buffer_under_seccomp_lands_on_the_node_by_its_filling_threads() -> str:
    """Under a seccomp filter refusing mbind and set_mempolicy: host_buffer(node=1) still all on node 1 (its
    filling threads run there), and a note says mbind was refused."""
    said = _filtered_buffer("node=1")
    assert said.startswith("buffer [1] mbind refused") and "seccomp filter" in said, said
    pages = {int(f[1:].partition("=")[0]): int(f.partition("=")[2]) for f in said.split() if f[:1] == "N" and "=" in f}
    assert set(pages) == {1} and pages[1] == (64 << 20) // os.sysconf("SC_PAGE_SIZE"), said
    return said[:160]


@check(shapes=("grace",))
def host_buffer_for_a_grace_gpu_uses_its_memory_only_node() -> str:
    """gpu=0 on the Grace-shaped guest: the buffer lies on GPU 0's memory-only node; with mbind refused there
    (no CPUs to fill from) it is a clear error."""
    import numapin
    from live import TOPOLOGY

    memory_only = {n.id for n in TOPOLOGY.memory_only_nodes}
    with numapin.host_buffer(64 << 20, gpu=0) as buf:
        counts = page_nodes(buf)
        nodes = set(buf.nodes)
    assert len(nodes) == 1 and nodes <= memory_only and share_on(counts, min(nodes)) == 1.0, (nodes, dict(counts))
    refused = _filtered_buffer("gpu=0")
    assert refused.startswith("error") and "no CPU to fill a buffer from" in refused, refused
    return f"on memory-only node {min(nodes)}; refused: {refused[:100]}"


def _numa_maps_pages(address: int) -> dict[int, int]:
    """The pages by node of this process's mapping at ``address``, as its line of numa_maps counts them."""
    line = next(x for x in Path("/proc/self/numa_maps").read_text().splitlines() if x.startswith(f"{address:x} "))
    return {int(f[1:].partition("=")[0]): int(f.partition("=")[2]) for f in line.split()
            if f[:1] == "N" and "=" in f}


def _even(pages: dict[int, int], nodes: tuple[int, ...]) -> bool:
    """40-60% of the pages on each of two nodes (an even share within 10 points, for more nodes)."""
    total = sum(pages.values())
    return bool(total) and all(abs(pages.get(n, 0) / total - 1 / len(nodes)) <= 0.1 for n in nodes)


@check(shapes=("two-node",))
def host_buffer_spread_over_two_nodes_is_interleaved() -> str:
    """host_buffer(128 MiB, nodes=[0, 1]): 40-60% of its pages on each node, read from numa_maps (its policy
    there: interleave), as its read-back says; declared as a spread."""
    import numapin

    with numapin.host_buffer(128 << 20, nodes=[0, 1]) as buf:
        pages = _numa_maps_pages(buf.address)
        line = next(x for x in Path("/proc/self/numa_maps").read_text().splitlines()
                    if x.startswith(f"{buf.address:x} "))
        said, on, entry, notes = str(buf.nodes), dict(buf.on_nodes), json.loads(str(buf._entry)), buf.notes
    assert _even(pages, (0, 1)) and "interleave" in line, line
    assert said == "0-1" and sum(on.values()) == 128 << 20 and entry.get("spread") is True, (said, on, entry)
    assert not notes, notes
    return f"{pages} ({line.split()[1]})"


@check(shapes=("two-node",))
def host_buffer_spread_under_seccomp_still_holds() -> str:
    """Under the seccomp filter refusing mbind: host_buffer(nodes=[0, 1]) still 40-60% on each node (each node's
    threads fill its stripes), and a note says the policy was refused and how it was spread instead."""
    said = _filtered_buffer("nodes=[0, 1]")
    pages = {int(f[1:].partition("=")[0]): int(f.partition("=")[2]) for f in said.split() if f[:1] == "N" and "=" in f}
    assert said.startswith("buffer [0, 1] mbind refused") and "stripes" in said, said
    assert _even(pages, (0, 1)), said
    return f"{pages}: {said[:120]}"


def _seen_from_outside(script: str) -> tuple[str, dict[str, Any], str, dict[str, Any], dict[str, Any]]:
    """A worker started from ``script`` (which prints ``ready ADDRESS`` once it holds what it holds) as numapin's
    tools see it: the address it printed, ``threads --json`` and its text, its ``ps --json`` row, ``doctor --pid
    --json``; the worker ended after."""
    worker = subprocess.Popen([sys.executable, "-c", script.format(here=str(HERE))], stdout=subprocess.PIPE,
                              text=True)
    try:
        assert worker.stdout is not None
        ready, address = worker.stdout.readline().split()
        assert ready == "ready"
        return (address, json.loads(numapin_cli("threads", str(worker.pid), "--json").stdout),
                numapin_cli("threads", str(worker.pid)).stdout,
                json.loads(numapin_cli("ps", str(worker.pid), "--json").stdout)["workers"][0],
                json.loads(numapin_cli("doctor", "--pid", str(worker.pid), "--json").stdout))
    finally:
        worker.kill()
        worker.wait()


_SPREAD_WORKER = """
import sys, time
sys.path.insert(0, {here!r})
import numapin
numapin.pin(0, memory="bind")
pool = numapin.host_buffer(96 << 20, nodes=[0, 1])   # a pool shared with a GPU on the other node, spread
print("ready", pool.address, flush=True)
time.sleep(300)
"""


@check(shapes=("two-node",))
def a_worker_holding_a_spread_is_not_told_it_lies_elsewhere() -> str:
    """A worker placed on node 0 holding a spread over 0-1: threads, ps and doctor --pid judge the spread by its
    own nodes (verdict ok, nothing said elsewhere, no buffer-elsewhere finding), its pages verified on both."""
    address, threads, text, listed, doctor = _seen_from_outside(_SPREAD_WORKER)
    buffers = threads["host_memory"]["buffers"]
    assert f"host buffer at {int(address):#x}: 96.0 MiB spread over node(s) 0-1" in text, text
    assert [(b["address"], b["node"], b.get("spread"), b["on_its_node"], b["unbalanced"]) for b in buffers] == \
        [(int(address), "0-1", True, True, [])], buffers
    assert set(buffers[0]["on_nodes"]) == {"0", "1"}, buffers
    assert threads["verdict"] == listed["verdict"] == doctor["verdict"] == "ok", (threads["verdict"], listed["verdict"])
    assert listed["host_memory"]["buffers_elsewhere"] == [], listed["host_memory"]
    assert not [f for f in doctor["findings"] if f["id"] in ("buffer-elsewhere", "misplaced")], doctor["findings"]
    return f"verdict ok; buffer on {buffers[0]['on_nodes']}"


_THP = "/sys/kernel/mm/transparent_hugepage/"


@contextmanager
def _thp(enabled: str, defrag: str) -> Iterator[None]:
    before = {name: Path(_THP + name).read_text().split("[")[1].split("]")[0] for name in ("enabled", "defrag")}
    Path(_THP + "enabled").write_text(enabled)
    Path(_THP + "defrag").write_text(defrag)
    try:
        yield
    finally:
        for name, value in before.items():
            Path(_THP + name).write_text(value)


def _huge_in_smaps(address: int) -> int:
    """AnonHugePages of this process's mapping at ``address``, read by the test from smaps itself."""
    lines = Path("/proc/self/smaps").read_text().splitlines()
    first = next(i for i, x in enumerate(lines) if x.startswith(f"{address:x}-"))
    return next(int(x.split()[1]) * 1024 for x in lines[first + 1:] if x.startswith("AnonHugePages:"))


@check(shapes=("two-node",))
def transparent_huge_pages_where_the_kernel_gives_them() -> str:
    """THP enabled=madvise, defrag=defer: hugepages="thp" gives at least half of a 64 MiB buffer as AnonHugePages
    (read from smaps), all on the node asked; enabled=never: base pages and a note saying so; defrag=madvise: a
    note naming the defrag setting."""
    import numapin

    with _thp("madvise", "defer"), numapin.host_buffer(64 << 20, node=1, hugepages="thp") as buf:
        huge, counts, got = _huge_in_smaps(buf.address), page_nodes(buf), (buf.huge_bytes, buf.page_size, buf.notes)
    assert huge >= 32 << 20 and got[0] == huge and got[1] == 2 << 20, (huge, got)
    assert share_on(counts, 1) == 1.0 and not any("defrag" in n for n in got[2]), (dict(counts), got)
    with _thp("never", "defer"), numapin.host_buffer(16 << 20, node=1, hugepages="thp") as buf:
        never = (_huge_in_smaps(buf.address), buf.page_size, buf.notes)
    assert never[:2] == (0, os.sysconf("SC_PAGE_SIZE")) and any("enabled is never" in n for n in never[2]), never
    with _thp("madvise", "madvise"), numapin.host_buffer(16 << 20, node=0, hugepages="thp") as buf:
        stalls = buf.notes
    assert any("transparent_hugepage/defrag is madvise" in n for n in stalls), stalls
    return f"{huge >> 20} MiB of 64 in THP on node 1; never: {never[2][0][:50]}; madvise: {stalls[0][:50]}"


_SHARED_ELSEWHERE = """
import sys, time
sys.path.insert(0, {here!r})
import numapin
from checks import shared_touched
numapin.pin(0, memory="preferred")
with numapin.allocating_for(node=1):
    held = shared_touched(64 << 20)   # as cudaHostAlloc's pages, made by a thread while on node 1
pool = numapin.host_buffer(16 << 20, node=1)   # a pool for a GPU on the other node, declared
print("ready", pool.address, flush=True)
time.sleep(300)
"""


@check(shapes=("two-node",))
def shared_memory_off_the_gpus_node_is_reported_from_outside() -> str:
    """A worker on node 0 holding 64 MiB of shared anonymous memory on node 1: threads --json shows it by kind
    (host_memory.by_kind.shmem["1"]), ps --json and doctor --pid say it lies off its GPU's node. The host buffer
    it holds for node 1 is listed under host_memory.buffers, verified on node 1 from numa_maps, and named as off
    its GPU's node."""
    address, threads, _, listed, doctor = _seen_from_outside(_SHARED_ELSEWHERE)
    shmem = threads["host_memory"]["by_kind"]["shmem"]
    assert shmem.get("1", 0) >= 64 << 20, threads["host_memory"]
    assert "off its GPU's node(s) 0" in (listed["host_memory"]["shared_elsewhere"] or ""), listed["host_memory"]
    found = [f for f in doctor["findings"] if f["id"] == "shared-memory-elsewhere"]
    assert len(found) == 1 and "node(s) 1" in found[0]["sees"], doctor["findings"]
    buffers = threads["host_memory"]["buffers"]
    assert [(b["address"], b["node"], b["on_nodes"], b["on_its_node"]) for b in buffers] == \
        [(int(address), "1", {"1": 16 << 20}, True)], buffers
    assert any("made for node(s) 1" in words for words in listed["host_memory"]["buffers_elsewhere"]), listed
    assert [f for f in doctor["findings"] if f["id"] == "buffer-elsewhere"], doctor["findings"]
    return f"shmem by node {shmem}; buffer {buffers[0]['on_nodes']}; doctor: {found[0]['sees'][:80]}"


@check()
def numactl_agrees_with_exec() -> str:
    """numactl --show, an independent reader, sees what numapin exec applied."""
    from live import NODE1

    proc = numapin_cli("exec", "--gpu", "1", "--memory", "bind", "--", "numactl", "--show")
    assert proc.returncode == 0, proc.stderr
    fields = dict(line.split(":", 1) for line in proc.stdout.splitlines() if ":" in line)
    assert fields["physcpubind"].split() == [str(c) for c in sorted(NODE1)], proc.stdout
    assert fields["membind"].split() == ["1"] and fields["policy"].strip() == "bind", proc.stdout
    return " / ".join(line.strip() for line in proc.stdout.splitlines()[:4])


@check()
def show_matches_the_kernel() -> str:
    """numapin show --json on the guest itself: every node's CPUs and memory-only flag as sysfs has them."""
    env = {k: v for k, v in os.environ.items() if k != "NUMAPIN_FSROOT"}
    proc = numapin_cli("show", "--json", env=env)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    base = Path("/sys/devices/system/node")
    real = sorted(int(p.name[4:]) for p in base.glob("node[0-9]*"))
    assert [n["id"] for n in data["nodes"]] == real
    for node in data["nodes"]:
        cpulist = (base / f"node{node['id']}" / "cpulist").read_text().strip()
        assert node["cpus"] == cpulist and node["memory_only"] == (cpulist == ""), node
    return f"nodes {[(n['id'], n['cpus'] or 'memory') for n in data['nodes']]}"


@check()
def every_gpu_lands_on_its_node() -> str:
    """pin(gpu=k, memory="bind") for every GPU: threads on node k's CPUs, memory bound to node k."""
    import numapin.kernel.mempolicy
    import numapin.pinning.memory
    from live import SPEC, TOPOLOGY

    done = []
    for gpu in range(SPEC.gpus):
        def one(gpu: int = gpu) -> None:
            numapin.pin(gpu, memory="bind")
            node_cpus = set(TOPOLOGY.node(gpu).cpus)
            assert all(m == node_cpus for m in masks().values()), (gpu, masks())
            policy, nodes = numapin.pinning.memory.get_mempolicy()
            assert (policy.name, str(nodes)) == ("BIND", str(gpu)), (gpu, policy, nodes)
            counts = page_nodes(touched(16 << 20))
            assert share_on(counts, gpu) >= ON_NODE, (gpu, dict(counts))

        forked(one)
        done.append(gpu)
    return f"GPUs {done} each on its own node"


@check()
def repeated_pin_changes_nothing() -> str:
    """A second pin for the same GPU on real nodes: nothing changes, nothing is warned."""
    import numapin.kernel.mempolicy
    import numapin.pinning.memory
    from numapin.kernel.affinity import Outcome

    stop, _ = held_threads(4)
    numapin.pin(1, memory="bind")
    with warnings_logged() as warned:
        again = numapin.pin(1, memory="bind")
    stop.set()
    assert not again.changed and again.count(Outcome.ALREADY) == 5 and not warned, (str(again), warned)
    return str(again)


# -- running them ------------------------------------------------------------------


def forked(fn: Callable[[], object]) -> object:
    """Run ``fn`` in a forked child; return its value or raise its failure here."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_end)
        try:
            payload = {"ok": True, "value": fn()}
        except BaseException:
            payload = {"ok": False, "value": traceback.format_exc()}
        with os.fdopen(write_end, "w") as pipe:
            json.dump(payload, pipe, default=str)
        os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end) as pipe:
        data = pipe.read()
    os.waitpid(pid, 0)
    if not data:
        raise AssertionError("the child died without a report")
    payload = json.loads(data)
    if not payload["ok"]:
        raise AssertionError(payload["value"])
    return payload["value"]


def main(argv: list[str]) -> int:
    out, shape = Path(argv[0]), argv[1]
    names = argv[2].split(",") if len(argv) > 2 else names_for(shape)  # a third: only these (a developer's rerun)
    import live

    root = live.write_pair(Path(tempfile.mkdtemp(prefix="numapin-guest-root-")) / "root")
    os.environ["NUMAPIN_FSROOT"] = str(root)
    for name in ("CUDA_VISIBLE_DEVICES", "NUMAPIN_APPLIED", "TLLM_NUMA_AWARE_WORKER_AFFINITY", "LOCAL_RANK"):
        os.environ.pop(name, None)
    results = {}
    for name in names:
        started = time.monotonic()
        try:
            detail, ok = str(forked(CHECKS[name].run)), True
        except AssertionError as exc:
            detail, ok = str(exc), False
        results[name] = {"ok": ok, "detail": detail, "seconds": round(time.monotonic() - started, 2)}
        print(f"{'ok  ' if ok else 'FAIL'} {name} ({results[name]['seconds']} s): {detail.splitlines()[-1:]}",
              flush=True)
    out.write_text(json.dumps(results, indent=2))
    return 0 if all(r["ok"] for r in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
