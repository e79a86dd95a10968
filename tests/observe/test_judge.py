"""The one judge: threads, ps and doctor --pid give one verdict on a process, however numapin placed it.

Real processes placed by every way in (exec, the start-up hook, pin(), a lease, the TensorRT-LLM
function, the numactl front, Ray's wrapper, SGLang's binding) on the pair machine (this host's
CPUs as two nodes with a GPU each), then moved by someone else: the three tools must agree.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import live
from numapin.base.environment import AUTOPIN, CUDA_VISIBLE_DEVICES, FSROOT, RUNTIME_DIR
from numapin.cli import main
from numapin.cpuset import CpuSet

needs_two = pytest.mark.skipif(not live.NODE0 or not live.NODE1, reason="needs two CPUs (one per pair node)")

NUMAPIN = [sys.executable, "-m", "numapin"]
READY = "print('ready', flush=True); import time; time.sleep(120)"
FIRST = min(live.NODE0)

#: Every way numapin places a process: the command line, extra environment, and what it is placed for.
WAYS: dict[str, tuple[list[str], dict[str, str]]] = {
    "exec": ([*NUMAPIN, "exec", "--gpu", "1", "--memory", "none", "--", sys.executable, "-c", READY], {}),
    "exec explicit": ([*NUMAPIN, "exec", "--gpu", "0", "--cpus", str(FIRST), "--memory", "none", "--",
                       sys.executable, "-c", READY], {}),
    "start-up hook": ([sys.executable, "-c", "import numapin.startup as s; s.at_start(); " + READY],
                      {AUTOPIN: "1", "LOCAL_RANK": "1", "NUMAPIN_MEMORY": "none"}),
    "pin": ([sys.executable, "-c", "import numapin; numapin.pin(1); " + READY], {}),
    "lease": ([sys.executable, "-c", "import numapin\nwith numapin.pinned(1):\n    " + READY], {}),
    "tensorrt-llm": ([sys.executable, "-c", "from numapin.compat.tensorrt_llm import configure_cpu_affinity as c; "
                      "c(1); " + READY], {}),
    "numactl": ([*NUMAPIN, "numactl", "--cpunodebind=1", "--", sys.executable, "-c", READY], {}),
    "ray": ([sys.executable, "-c", "from numapin.compat.ray import pin_for_ray; pin_for_ray(); " + READY],
            {CUDA_VISIBLE_DEVICES: "1"}),  # Ray narrowed the worker's view to its GPU: GPU 0 in its view
    "sglang": ([sys.executable, "-c", "from numapin.compat.sglang import bind_to_node; bind_to_node(1); " + READY],
               {}),
}


@pytest.fixture
def placed(pair_root: Path, request: pytest.FixtureRequest) -> Iterator[int]:
    command, extra = WAYS[request.param]
    env = {**live.without_inputs(dict(os.environ)), FSROOT: str(pair_root),
           RUNTIME_DIR: os.environ[RUNTIME_DIR], **extra}
    child = subprocess.Popen(command, stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert child.stdout is not None and child.stdout.readline() == "ready\n"
        yield child.pid
    finally:
        child.kill()
        child.wait()


def _json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, object]:
    main(list(argv))
    out = capsys.readouterr().out
    found: dict[str, object] = json.loads(out)
    return found


def verdicts(pid: int, capsys: pytest.CaptureFixture[str]) -> dict[str, tuple[object, ...]]:
    """Each tool's verdict, GPU (index in the process's view, PCI address) and CPUs, as it prints them."""
    threads = _json(capsys, "threads", str(pid), "--json")
    ps = _json(capsys, "ps", str(pid), "--json")
    workers = ps["workers"]
    assert isinstance(workers, list) and len(workers) == 1
    worker = workers[0]
    doctor = _json(capsys, "doctor", "--pid", str(pid), "--json")
    placement = doctor["placement"]
    assert isinstance(placement, dict)
    return {
        "threads": (threads["verdict"], threads["gpu"], threads["pci"], threads["placement"]),
        "ps": (worker["verdict"], worker["gpu"], worker["pci"], worker["expected"]),
        "doctor": (doctor["verdict"], placement["gpu"], placement["pci"], threads["placement"]),
    }


@needs_two
@pytest.mark.parametrize("placed", sorted(WAYS), indirect=True)
def test_every_tool_gives_one_verdict_however_the_process_was_placed(
        placed: int, capsys: pytest.CaptureFixture[str]) -> None:
    first = verdicts(placed, capsys)
    assert len(set(first.values())) == 1, first
    verdict, gpu, pci, target = first["threads"]
    assert verdict == "ok"
    assert isinstance(target, str) and CpuSet.parse(target) <= CpuSet(live.BASELINE)
    # Someone else moves every thread off the placement: the three tools say so together.
    outside = CpuSet(live.BASELINE) - CpuSet.parse(target)
    assert outside, "the pair machine's placements never take every CPU"
    for tid in os.listdir(f"/proc/{placed}/task"):
        os.sched_setaffinity(int(tid), outside)
    moved = verdicts(placed, capsys)
    assert len(set(moved.values())) == 1, moved
    assert moved["threads"] == ("misplaced", gpu, pci, target)


@needs_two
@pytest.mark.parametrize("placed", ["ray"], indirect=True)
def test_a_gpu_is_named_in_the_process_view_beside_its_pci_address(
        placed: int, capsys: pytest.CaptureFixture[str]) -> None:
    from numapin.facts.machine import cached

    machine = cached(None, {})  # every GPU of the pair machine
    physical = machine.visible[1].gpu.pci  # the worker sees only it, as its GPU 0
    _, gpu, pci, _ = verdicts(placed, capsys)["threads"]
    assert (gpu, pci) == (0, physical)
    main(["threads", str(placed)])
    assert f"GPU 0 in its view ({physical})" in capsys.readouterr().out
    # --gpu N means GPU N of the process's own view: its GPU 0 is the machine's GPU 1, and it is there.
    assert main(["threads", str(placed), "--gpu", "0", "--check"]) == 0
    capsys.readouterr()


@needs_two
def test_ps_reads_the_machine_once_and_each_file_of_a_worker_once(pair_root: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    import numapin
    from numapin.facts import machine as facts_machine
    from numapin.facts import procfs
    from numapin.tools.ps import survey

    env = {**live.without_inputs(dict(os.environ)), FSROOT: str(pair_root), "LOCAL_RANK": "0"}
    views = ["0", "1", "1,0", "0,1"]  # four distinct CUDA_VISIBLE_DEVICES
    children = [subprocess.Popen([sys.executable, "-c", READY], stdout=subprocess.PIPE, text=True,
                                 env={**env, CUDA_VISIBLE_DEVICES: view}) for view in views]
    counts: dict[str, int] = {"topology": 0, "gpus": 0}
    stats: dict[int, int] = {}

    def counting(name: str, real):  # type: ignore[no-untyped-def]
        def spy(*args, **kwargs):  # type: ignore[no-untyped-def]
            counts[name] += 1
            return real(*args, **kwargs)
        return spy

    real_stat, real_read = procfs.stat, procfs._read
    files: dict[tuple[int, str], int] = {}

    def stat_spy(pid: int, tid: int | None = None) -> procfs.Stat:
        if tid is None:
            stats[pid] = stats.get(pid, 0) + 1
        return real_stat(pid, tid)

    def read_spy(pid: int, tid: int | None, name: str, cap: int = 1 << 21) -> bytes:
        if tid is None:  # every file of /proc/PID the scan opens (a thread's own are read once a thread)
            files[pid, name] = files.get((pid, name), 0) + 1
        return real_read(pid, tid, name, cap)

    try:
        for child in children:
            assert child.stdout is not None and child.stdout.readline() == "ready\n"
        numapin.refresh()
        monkeypatch.setattr(facts_machine, "read_topology", counting("topology", facts_machine.read_topology))
        monkeypatch.setattr(facts_machine, "read_gpus", counting("gpus", facts_machine.read_gpus))
        monkeypatch.setattr(procfs, "stat", stat_spy)
        monkeypatch.setattr(procfs, "_read", read_spy)
        found = survey([c.pid for c in children], root=str(pair_root))
    finally:
        for child in children:
            child.kill()
            child.wait()
    assert [w.verdict for w in found.workers] != [] and len(found.workers) == 4
    assert {w.pci for w in found.workers} == {v.gpu.pci for v in facts_machine.cached(str(pair_root), {}).visible}
    assert counts == {"topology": 1, "gpus": 1}, "the machine is read once, whatever the workers' views"
    assert {pid: stats.get(pid) for pid in (c.pid for c in children)} == {c.pid: 1 for c in children}
    for child in children:  # status, environ, cgroup... each opened once a scan
        read = {name: n for (pid, name), n in files.items() if pid == child.pid}
        assert {"stat", "status", "environ"} <= set(read) and set(read.values()) == {1}, read


@needs_two
@pytest.mark.parametrize("placed", ["pin"], indirect=True)
def test_a_process_named_twice_is_listed_once(placed: int, capsys: pytest.CaptureFixture[str]) -> None:
    ps = _json(capsys, "ps", str(placed), str(placed), "--json")
    assert [w["pid"] for w in ps["workers"]] == [placed]  # type: ignore[union-attr]


def test_a_name_that_holds_a_line_feed_stays_one_row(capsys: pytest.CaptureFixture[str]) -> None:
    code = "import ctypes, time; ctypes.CDLL(None).prctl(15, b'evil\\nrow\\x1b[2J'); print('ready', flush=True); " \
           "time.sleep(60)"
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                             env={**live.without_inputs(dict(os.environ)), "LOCAL_RANK": "0"})
    try:
        assert child.stdout is not None and child.stdout.readline() == "ready\n"
        main(["ps", str(child.pid)])
        rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith(str(child.pid))]
    finally:
        child.kill()
        child.wait()
    assert len(rows) == 1 and "evil\\nrow\\x1b[2J" in rows[0] and "\x1b" not in rows[0]


#: A worker (LOCAL_RANK 0: GPU 0, node 0 of the pair machine) whose threads all sit on node 1, and which
#: starts and ends threads without pause; it prints the id of one thread that has ended.
CHURN = f"""
import os, sys, threading, time
os.sched_setaffinity(0, {sorted(live.NODE1)!r})
ended = []
t = threading.Thread(target=lambda: ended.append(threading.get_native_id())); t.start(); t.join()
print(ended[0], flush=True)
sys.stdin.readline()  # no thread made before it is asked for: the ended thread's id stays ended
while True:
    t = threading.Thread(target=lambda: None); t.start(); t.join()
"""


@needs_two
def test_a_thread_that_ends_during_the_scan_leaves_the_worker_judged(pair_root: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """One thread ending between the listing of a worker's threads and their reading made the whole worker
    vanish from ps, a misplaced worker read as none misplaced."""
    from numapin.facts import procfs
    from numapin.observe.judge import judge
    from numapin.tools.ps import survey

    child = subprocess.Popen([sys.executable, "-c", CHURN], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                             env={**live.without_inputs(dict(os.environ)), FSROOT: str(pair_root), "LOCAL_RANK": "0"})
    try:
        assert child.stdout is not None and child.stdin is not None
        ended = int(child.stdout.readline())
        # Joined is not yet gone: the kernel lets go of an ended thread a moment after Python's join returns.
        gone = time.monotonic() + 30
        while os.path.exists(f"/proc/{child.pid}/task/{ended}") and time.monotonic() < gone:
            time.sleep(0.01)
        # The race made certain: the listing names a thread that has ended, as a listing read an instant
        # earlier would; every answer about that thread comes from the real kernel.
        listing = procfs.tasks
        monkeypatch.setattr(procfs, "tasks", lambda pid: [*listing(pid), ended] if pid == child.pid else listing(pid))
        certain = survey([child.pid], root=str(pair_root)).workers
        judged = judge(child.pid, root=str(pair_root))
        monkeypatch.setattr(procfs, "tasks", listing)
        # And the race itself: threads end and start while ps reads them (and, churning, reuse thread ids).
        child.stdin.write("churn\n")
        child.stdin.flush()
        raced = [survey([child.pid], root=str(pair_root)).workers for _ in range(30)]
    finally:
        child.kill()
        child.wait()
    for workers in [certain, *raced]:
        assert [(w.pid, w.verdict.value) for w in workers] == [(child.pid, "misplaced")]
    assert ended not in {t.tid for t in judged.threads} and judged.verdict.value == "misplaced"


@needs_two
@pytest.mark.parametrize("placed", ["pin"], indirect=True)
def test_threads_takes_the_placement_options_doctor_and_exec_take(placed: int,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    # Threads had no --local-rank or --mode. The process is pinned for GPU 1 (node 1).
    by_rank = _json(capsys, "threads", str(placed), "--local-rank", "1", "--json")
    by_gpu = _json(capsys, "threads", str(placed), "--gpu", "1", "--json")
    assert (by_rank["verdict"], by_rank["placement"]) == (by_gpu["verdict"], by_gpu["placement"]) == (
        "ok", by_gpu["placement"])
    other = _json(capsys, "threads", str(placed), "--local-rank", "0", "--mode", "single", "--json")
    assert other["verdict"] == "misplaced" and other["gpu"] == 0
    assert main(["threads", str(placed), "--cpus", str(FIRST), "--mode", "single"]) == 2


@pytest.mark.parametrize(("target", "device"), [
    ("/dev/nvidia3", "/dev/nvidia3"), ("/new/dev/nvidia1", "/dev/nvidia1"), ("/dev/nvidiactl", None),
    ("/dev/nvidia-uvm", None), ("/home/nvidia1", None), ("/dev/nvidia1 (deleted)", None),
    ("/dev/dri/renderD129", "/dev/dri/renderD129"), ("/new/dev/kfd", "/dev/kfd"), ("/dev/dri/card1", None),
    ("/dev/kfd2", None), ("/dev/accel/accel3", "/dev/accel/accel3"), ("/dev/accel/accel_controlD3", None),
    ("/dev/hl2", "/dev/hl2"), ("/dev/hl_controlD2", None)])
def test_a_gpu_device_file_is_known_by_the_name_its_holder_sees(target: str, device: str | None) -> None:
    # From another mount namespace's tree (a container's /dev; a namespace made after a switch_root) the kernel
    # names the device from that tree's top: /new/dev/nvidia1 is GPU 1's device still. An AMD GPU is held
    # through its render node; /dev/kfd is every ROCm process's, of no GPU in particular; a Gaudi through its
    # accel device (hlN before), never its control device (which monitoring tools open).
    from numapin.tools.ps import _device

    found = _device().search(target)
    assert (None if found is None else "/" + found.group(1)) == device
