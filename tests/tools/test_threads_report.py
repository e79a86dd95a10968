"""``numapin threads`` on live processes, and ``numapin snapshot`` round trips."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from live import ALL, MISSING_NODE, NODE0, NODE1, REAL_NODES, cpus
from numapin.cli import main
from numapin.cpuset import CpuSet
from numapin.facts import procfs
from numapin.facts import synthetic as machines
from numapin.tools.snapshot import TOP

NUMAPIN = [sys.executable, "-m", "numapin"]
needs_two = pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs")

# Threads pinned in several ways; prints their tids, then waits for stdin to close.
PROGRAM = """
import json, os, sys, threading
hold = threading.Event()
tids = {}
def worker(name, cpus):
    if cpus is not None:
        os.sched_setaffinity(0, cpus)
    tids[name] = threading.get_native_id()
    hold.wait()
spec = json.loads(sys.argv[1])
threads = [threading.Thread(target=worker, args=(n, set(c) if c is not None else None)) for n, c in spec.items()]
for t in threads: t.start()
while len(tids) < len(spec): pass
tids["main"] = threading.get_native_id()
print(json.dumps(tids), flush=True)
sys.stdin.read()
hold.set()
"""


@pytest.fixture
def launch() -> Iterator[Callable[..., tuple[int, dict[str, int]]]]:
    """Start PROGRAM under ``numapin exec`` on the root the test chose (NUMAPIN_FSROOT)."""
    started: list[subprocess.Popen[str]] = []

    def start(spec: dict[str, list[int] | None], gpu: str = "0") -> tuple[int, dict[str, int]]:
        proc = subprocess.Popen([*NUMAPIN, "exec", "--gpu", gpu, "--memory", "none", "--",
                                 sys.executable, "-c", PROGRAM, json.dumps(spec)],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        started.append(proc)
        assert proc.stdout is not None
        return proc.pid, json.loads(proc.stdout.readline())

    yield start
    for proc in started:
        proc.communicate(timeout=30)


def threads_json(*args: str) -> tuple[int, list[dict]]:  # type: ignore[type-arg]
    """The exit code and the thread rows of ``numapin threads ARGS`` (its JSON object's "threads")."""
    proc = subprocess.run([*NUMAPIN, "threads", *args], capture_output=True, text=True, timeout=60)
    return proc.returncode, (json.loads(proc.stdout)["threads"] if proc.stdout.strip().startswith("{") else [])


@needs_two
def test_threads_reports_each_way_of_pinning(pair_root: Path,
                                            launch: Callable[..., tuple[int, dict[str, int]]]) -> None:
    pid, tids = launch({"inherited": None, "elsewhere": sorted(NODE1), "wide": sorted(ALL)})
    code, report = threads_json(str(pid), "--gpu", "0", "--json")
    assert code == 0
    rows = {row["tid"]: row for row in report}
    assert set(rows) == set(tids.values())
    expect = {"main": (cpus(NODE0), True, True), "inherited": (cpus(NODE0), True, True),
              "elsewhere": (cpus(NODE1), False, False), "wide": (cpus(ALL), False, False)}
    for name, (mask, inside, ours) in expect.items():
        row = rows[tids[name]]
        assert (row["cpus"], row["inside"], row["numapin"]) == (mask, inside, ours), name
        assert row["name"] == "python3" or row["name"].startswith("python")
        assert row["last_cpu"] in ALL
    from numapin.tools.threads_report import threads_report

    seen = threads_report(pid, gpu=0)
    j = seen.judgement
    assert len(j.outside) == 2 and j.marker == CpuSet(NODE0) and j.memory is not None and j.memory.total > 0
    share = seen.as_dict()["memory"]["remote_share"]
    # With one real node nothing can be remote; with more, the page cache and
    # what the program touched before its threads moved may lie anywhere.
    assert share == 0.0 if len(REAL_NODES) == 1 else 0.0 <= share <= 1.0
    code, _ = threads_json(str(pid), "--gpu", "0", "--check")
    assert code == 1, "two threads are outside"
    text = subprocess.run([*NUMAPIN, "threads", str(pid), "--gpu", "0"], capture_output=True, text=True).stdout
    assert f"2 of 4 threads outside CPUs {cpus(NODE0)}" in text and "memory: pid" in text
    # --json is the whole report: the placement compared with, the count outside, memory own and all.
    proc = subprocess.run([*NUMAPIN, "threads", str(pid), "--gpu", "0", "--json"], capture_output=True, text=True)
    whole = json.loads(proc.stdout)
    assert (whole["placement"], whole["outside"], len(whole["threads"])) == (cpus(NODE0), 2, 4)
    assert set(whole["memory"]) == {"bytes", "own_bytes", "remote_share", "bound"}


@needs_two
def test_check_passes_and_fails_on_memory(refusing_root: Path,
                                          launch: Callable[..., tuple[int, dict[str, int]]]) -> None:
    pid, _ = launch({"a": None, "b": None})
    assert threads_json(str(pid), "--gpu", "0", "--check")[0] == 0
    # Without --gpu the exec marker names the placement.
    assert threads_json(str(pid), "--check")[0] == 0
    # GPU 1's memory node (MISSING_NODE) does not exist on the real kernel: no page can be there, so where they lie says
    # nothing of the placement, whatever the bound (the guest tier judges memory on real nodes).
    pid1, _ = launch({"a": None}, gpu="1")
    for bound in ((), ("--max-remote-memory", "10")):
        proc = subprocess.run([*NUMAPIN, "threads", str(pid1), "--gpu", "1", "--check", "--json", *bound],
                              capture_output=True, text=True, timeout=60)
        report = json.loads(proc.stdout)
        assert proc.returncode == 0 and f"memory not judged: node(s) {MISSING_NODE} are not this host's" in (
            report["note"]), report


def test_missing_process_is_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["threads", str(2**22 + 4321)]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_check_needs_a_placement(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
                                 tmp_path: Path) -> None:
    monkeypatch.delenv("NUMAPIN_APPLIED", raising=False)
    monkeypatch.setenv("NUMAPIN_RUNTIME_DIR", str(tmp_path))  # no record of this process (a model's pin leaves one)
    assert main(["threads", str(os.getpid()), "--check"]) == 2
    out, err = capsys.readouterr()
    assert "needs a placement" in err and out == ""  # refused before any table is printed


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to become another user")
def test_another_users_process_lists_its_masks_with_memory_unreadable() -> None:
    from conftest import in_child
    from numapin.tools.threads_report import threads_report

    def body() -> tuple[list[int], str | None, str]:
        os.setgid(65534)
        os.setuid(65534)  # nobody, looking at init (root's): masks are anyone's to read, numa_maps is not
        report = threads_report(1)
        rows = report.judgement.threads
        return [r.tid for r in rows], str(rows[0].cpus), report.summary()

    tids, mask, summary = in_child(body)
    assert tids and 1 in tids
    assert mask == str(CpuSet(os.sched_getaffinity(1)))
    assert "memory: unreadable" in summary


# -- snapshot ---------------------------------------------------------------------


def show_json(*args: str) -> dict:  # type: ignore[type-arg]
    proc = subprocess.run([*NUMAPIN, "show", "--json", *args], capture_output=True, text=True, timeout=60,
                          env={k: v for k, v in os.environ.items() if k != "NUMAPIN_FSROOT"})
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    data.pop("root")
    data["cpus"].pop("process")  # the live mask differs from a capture's by nature
    data.pop("nvml")  # whether a driver answers is the live machine's, not a topology fact
    return data


def capture(tmp_path: Path, *root: str) -> Path:
    out = tmp_path / "machine.tar.gz"
    assert main(["snapshot", str(out), *root]) == 0
    with tarfile.open(out) as archive:
        archive.extractall(tmp_path / "unpacked", filter="tar")
    return tmp_path / "unpacked" / TOP


def test_snapshot_of_this_machine_round_trips(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    unpacked = capture(tmp_path)
    assert "attach it to a bug report" in capsys.readouterr().out
    assert show_json("--root", str(unpacked)) == show_json()


@pytest.mark.parametrize("name", sorted(machines.SHAPES))
def test_snapshot_of_synthetic_machines_round_trips(name: str, tmp_path: Path,
                                                    machine_root: Callable[[str], Path]) -> None:
    root = machine_root(name)
    unpacked = capture(tmp_path, "--root", str(root))
    assert show_json("--root", str(unpacked)) == show_json("--root", str(root))


@pytest.mark.parametrize("name", ["dgx-h100", "mi300x"])
def test_snapshot_in_a_container_keeps_which_gpus_it_was_given(name: str, tmp_path: Path) -> None:
    # The device files of the container's GPUs (the host's first and last here) are all that tells them apart.
    root = machines.write(name, tmp_path / "root")
    before = show_json("--root", str(root))
    gpus = before["gpus"]
    devices = [f"dev/nvidia{gpus[i]['minor']}" for i in (0, -1)] if name == "dgx-h100" else \
        [f"dev/dri/renderD{128 + i}" for i in (0, len(gpus) - 1)]
    for path in devices:
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).touch()
    seen = show_json("--root", str(root))
    assert [g["pci"] for g in seen["gpus"]] == [gpus[0]["pci"], gpus[-1]["pci"]] and len(seen["hidden_gpus"]) == 6
    unpacked = capture(tmp_path, "--root", str(root))
    assert show_json("--root", str(unpacked)) == seen


def test_snapshot_holds_only_what_the_readers_use(tmp_path: Path) -> None:
    from numapin.facts.inventory import read_gpus
    from numapin.facts.kinds import read_kinds
    from numapin.facts.network import read_network
    from numapin.facts.topology import read_topology

    unpacked = capture(tmp_path)
    files = {str(p.relative_to(unpacked)) for p in unpacked.rglob("*") if p.is_file() and not p.is_symlink()}
    journal: list[str] = []
    topology = read_topology("/", journal=journal)
    inventory = read_gpus(topology, nvml=False, journal=journal)
    read_kinds(topology, rule="pct", journal=journal)
    read_network(topology, inventory.gpus, journal=journal)
    # A file read through a sysfs link is kept where the link leads (the link is kept too).
    read = {os.path.relpath(os.path.realpath("/" + rel), "/") if rel.startswith("sys/") else rel
            for rel in journal if not rel.endswith("/")}
    assert files <= {*read, "proc/self/status"}
    if os.path.exists("/proc/cpuinfo"):
        assert "proc/cpuinfo" in files  # the model name NUMAPIN_PRIORITY_CORES=pct reads
    links = {str(p.relative_to(unpacked)) for p in unpacked.rglob("*") if p.is_symlink()}
    for link in links:
        assert link.startswith("sys/") and os.path.realpath(unpacked / link).startswith(str(unpacked))
    assert not any(part in ("environ", "cmdline", "comm") for f in files for part in f.split("/"))
    status = (unpacked / "proc/self/status").read_text().splitlines()
    assert status and all(line.split(":")[0] in ("Cpus_allowed", "Cpus_allowed_list", "Mems_allowed",
                                                  "Mems_allowed_list") for line in status)
    mounts = unpacked / "proc/self/mountinfo"
    if mounts.exists():
        assert all("cgroup" in line or "cpuset" in line for line in mounts.read_text().splitlines())


def test_snapshot_never_overwrites_without_force(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "machine.tar.gz"
    out.write_bytes(b"someone's file")
    assert main(["snapshot", str(out), "--machine", "pair"]) == 2
    assert "exists; use --force" in capsys.readouterr().err and out.read_bytes() == b"someone's file"
    assert main(["snapshot", str(out), "--machine", "pair", "--force"]) == 0
    assert tarfile.is_tarfile(out)


def test_snapshot_keeps_only_the_cpuset_lines_of_proc_self_cgroup(tmp_path: Path) -> None:
    from numapin.facts import synthetic

    root = synthetic.write("pair", tmp_path / "root")
    (root / "proc/self/cgroup").write_text(
        "12:memory:/secret/job-4711\n11:cpuset,cpu:/slurm/uid_0/job_42\n0::/slurm/uid_0/job_42/step_0\n"
        "3:name=systemd:/user.slice/private\n")
    unpacked = capture(tmp_path, "--root", str(root))
    assert (unpacked / "proc/self/cgroup").read_text() == \
        "11:cpuset,cpu:/slurm/uid_0/job_42\n0::/slurm/uid_0/job_42/step_0\n"


def test_a_zombie_is_named_as_exited_by_threads_and_doctor() -> None:
    proc = subprocess.Popen(["true"])
    deadline = time.monotonic() + 30
    while not procfs.stat(proc.pid).exited and time.monotonic() < deadline:
        time.sleep(0.01)  # exited, not reaped: a zombie until wait()
    try:
        assert procfs.stat(proc.pid).exited
        for command in (["threads", str(proc.pid)], ["doctor", "--pid", str(proc.pid)]):
            done = subprocess.run([sys.executable, "-m", "numapin", *command], capture_output=True, text=True,
                                  timeout=60)
            assert done.returncode == 2, done
            assert f"process {proc.pid} has exited" in done.stderr
    finally:
        proc.wait()
    assert not procfs.stat(os.getpid()).exited
