"""What numapin applied to a process, seen from outside it — the host's ledger, ``threads``,
``doctor --pid``, ``current()``, and ``numapin ps`` over every worker of the host (with its Prometheus text)."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

import live
import numapin
from conftest import REPO, Python, in_child
from numapin.base.environment import AUTOPIN, CUDA_VISIBLE_DEVICES, FSROOT, PRIORITY_CORES, RUNTIME_DIR
from numapin.base.frozen import replace
from numapin.cpuset import CpuSet
from numapin.pinning import record
from numapin.pinning.decision import ExternalMaskPolicy
from numapin.pinning.memory import MemoryMode
from numapin.placement.modes import Placement, PlacementMode

NUMAPIN = [sys.executable, "-m", "numapin"]
#: A worker: start threads, say so, then wait to be looked at.
WORKER = ("import sys, threading, time\n"
          "for _ in range(2): threading.Thread(target=time.sleep, args=(120,), daemon=True).start()\n"
          "print('ready', flush=True); time.sleep(120)\n")

needs_two = pytest.mark.skipif(not live.NODE0 or not live.NODE1, reason="needs two CPUs (one per pair node)")


@pytest.fixture
def records(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """This test's own folder of pin records (for it and the processes it starts)."""
    folder = tmp_path / "records"
    monkeypatch.setenv(RUNTIME_DIR, str(folder))
    return folder


class Workers:
    """Processes started for a test, each waited for until it says it is ready, all killed at the end."""

    def __init__(self) -> None:
        self.started: list[subprocess.Popen[str]] = []

    def start(self, argv: list[str], **env: str) -> int:
        base = {**live.without_inputs(dict(os.environ)), **env}
        proc = subprocess.Popen(argv, env=base, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.started.append(proc)
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line == "ready\n", (line, proc.stderr.read() if proc.poll() is not None and proc.stderr else "")
        return proc.pid


@pytest.fixture
def workers() -> Iterator[Workers]:
    made = Workers()
    yield made
    for proc in made.started:
        proc.kill()
        proc.wait()


def _numapin(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*NUMAPIN, *args], capture_output=True, text=True, timeout=120)


# -- the ledger itself ---------------------------------------------------------------------


def _entry(**changes: object) -> record.Record:
    placement = Placement(CpuSet([0]), CpuSet([1]), "GPU 1 (0000:28:00.0) on node 1", PlacementMode.NODE, gpu=1,
                          pci="0000:28:00.0", node=1, rank=1)
    base = record.Record(os.getpid(), record.start_time(os.getpid()) or 0, "pin", CpuSet([0]), CpuSet([0]), placement,
                         MemoryMode.BIND, ExternalMaskPolicy.RESPECT, pools=(("OMP_NUM_THREADS", "1"),), written=1.5)
    return replace(base, **changes)


def test_an_entry_reads_back_as_written() -> None:
    entry = _entry()
    assert record.Record.from_dict(json.loads(json.dumps(entry.as_dict()))) == entry


@given(st.dictionaries(st.sampled_from(["version", "pid", "start", "how", "mask", "target", "placement", "memory",
                                        "policy", "pools", "written"]),
                       st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=12), st.floats(),
                                 st.lists(st.integers(), max_size=3), st.dictionaries(st.text(max_size=3),
                                                                                      st.text(max_size=3)))))
def test_any_file_content_is_an_entry_or_none_never_an_error(data: dict[str, object]) -> None:
    found = record.Record.from_dict(data)
    assert found is None or isinstance(found, record.Record)


def test_a_record_names_one_process_not_a_reused_id(records: Path) -> None:
    # A record left by a process that died, whose id now names another process: its start time differs.
    start = record.start_time(os.getpid())
    assert start is not None
    records.mkdir()
    old = _entry(start=start - 1)
    (records / record.file_name(os.getpid(), start - 1)).write_text(json.dumps(old.as_dict()))
    assert record.lookup(os.getpid()) is None
    assert os.getpid() not in record.entries()
    assert list(records.iterdir()) == [], "the stale record is removed"
    path = record.publish(_entry())
    assert path == str(records / record.file_name(os.getpid(), start)) and record.lookup(os.getpid()) == _entry()
    record.withdraw()
    assert record.lookup(os.getpid()) is None


def test_a_record_that_cannot_be_written_leaves_the_worker_pinned(pair_root: Path, tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv(RUNTIME_DIR, str(blocker / "records"))  # under a file: no folder can be made

    def child() -> tuple[str, bool, set[int]]:
        result = numapin.pin(1)
        return str(result.action), record.lookup(os.getpid()) is None, os.sched_getaffinity(0)

    action, unrecorded, mask = in_child(child)
    assert action == "pinned" and unrecorded and mask == live.NODE1


def test_the_explicit_folder_is_the_only_one(tmp_path: Path) -> None:
    assert record.folders(environ={RUNTIME_DIR: str(tmp_path)}) == [str(tmp_path)]
    assert record.folders(0, environ={})[0] == "/run/numapin"
    assert record.folders(1000, environ={})[0] == "/run/user/1000/numapin"


# -- who pinned, as the ledger says ----------------------------------------------------------


def test_each_way_in_is_recorded_as_itself(pair_root: Path, records: Path) -> None:
    def child() -> list[tuple[str | None, str | None]]:
        seen = []

        def now() -> tuple[str | None, str | None]:
            entry = record.lookup(os.getpid())
            return (None, None) if entry is None else (entry.how, str(entry.target))

        numapin.pin(0)
        seen.append(now())
        with numapin.pinned(1):
            seen.append(now())
        seen.append(now())
        from numapin.compat import tensorrt_llm

        tensorrt_llm.configure_cpu_affinity(1)
        seen.append(now())
        return seen

    node0, node1 = live.cpus(live.NODE0), live.cpus(live.NODE1)
    assert in_child(child) == [("pin", node0), ("lease", node1), ("pin", node0), ("compat", node1)]


def test_a_lease_with_no_pin_before_leaves_no_record(pair_root: Path, records: Path) -> None:
    def child() -> tuple[bool, bool]:
        with numapin.pinned(1):
            inside = record.lookup(os.getpid()) is not None
        return inside, record.lookup(os.getpid()) is None

    assert in_child(child) == (True, True)


def test_a_record_is_removed_when_its_process_ends(pair_root: Path, records: Path) -> None:
    code = "import numapin; numapin.pin(1); import os, sys; print(os.getpid())"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          env={**os.environ, FSROOT: str(pair_root)})
    assert proc.returncode == 0 and proc.stdout.strip().isdigit()
    assert [p.name for p in records.iterdir()] == []


def test_exec_records_the_program_it_becomes_and_current_reads_it(pair_root: Path, records: Path) -> None:
    code = ("import json, numapin; c = numapin.current(); "
            "print(json.dumps([c.record.how, c.record.placement.gpu, c.matches]))")
    proc = subprocess.run([*NUMAPIN, "exec", "--gpu", "1", "--memory", "none", "--", sys.executable, "-c", code],
                          capture_output=True, text=True, timeout=60,
                          env={**live.without_inputs(dict(os.environ)), FSROOT: str(pair_root)})
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == ["exec", 1, True]


# -- threads and doctor --pid judge by the record ------------------------------------------------


@needs_two
def test_an_autopinned_worker_is_seen_as_numapins(python: Python, pair_root: Path, records: Path,
                                                  workers: Workers) -> None:
    hooked = python("-c", "import sys; print(sys.executable)").stdout.strip()
    pid = workers.start([hooked, "-c", WORKER], **{AUTOPIN: "1", "LOCAL_RANK": "1", FSROOT: str(pair_root),
                                                   RUNTIME_DIR: str(records)})
    threads = _numapin("threads", str(pid), "--root", str(pair_root), "--check")
    assert threads.returncode == 0, threads.stdout + threads.stderr
    rows = [line.split() for line in threads.stdout.splitlines()[1:] if line.split()[:1] and
            line.split()[0].isdigit()]
    assert len(rows) == 3 and all(row[-2:] == ["yes", "numapin"] for row in rows), threads.stdout
    assert "judged by numapin's record (autopin: GPU 1 in its view" in threads.stdout
    doctor = _numapin("doctor", "--pid", str(pid), "--root", str(pair_root), "--json")
    report = json.loads(doctor.stdout)
    assert report["placement"]["gpu"] == 1 and report["placement"]["cpus"] == live.cpus(live.NODE1)
    assert "autopin" in report["basis"]
    assert "thread-pool-default" not in [f["id"] for f in report["findings"]], "the hook set OMP_NUM_THREADS"


@needs_two
def test_doctor_judges_an_exec_worker_by_its_gpu(pair_root: Path, records: Path, workers: Workers) -> None:
    # The synthetic machine exec read is gone once the program runs: its record still says GPU 1.
    pid = workers.start([*NUMAPIN, "exec", "--machine", "pair", "--gpu", "1", "--memory", "none", "--",
                         sys.executable, "-c", WORKER])
    report = json.loads(_numapin("doctor", "--pid", str(pid), "--root", str(pair_root), "--json").stdout)
    assert report["placement"]["gpu"] == 1 and "exec" in report["basis"]


def test_doctor_says_what_it_assumed(pair_root: Path, records: Path, workers: Workers) -> None:
    pid = workers.start([sys.executable, "-c", WORKER])  # no record, no rank, both GPUs visible
    # A running process is judged, not assumed: as ps and threads say, nothing names its GPU.
    report = json.loads(_numapin("doctor", "--pid", str(pid), "--root", str(pair_root), "--json").stdout)
    assert report["placement"] is None and report["verdict"] == "unknown"
    assert [f["id"] for f in report["findings"]][:1] == ["no-placement"]
    text = _numapin("doctor", "--pid", str(pid), "--root", str(pair_root)).stdout
    assert "verdict: unknown" in text and "nothing says which GPU it drives" in text
    # An environment about to start is assumed to be local rank 0, and doctor says so.
    env_report = _numapin("doctor", "--root", str(pair_root)).stdout
    assert "judged by: assumed local rank 0" in env_report


# -- numapin ps ------------------------------------------------------------------------------


def holding_a_gpu(minor: int) -> list[str]:
    """A command line whose process holds ``/dev/nvidiaMINOR`` open, as a CUDA process does: a regular file
    standing in for the device, in a private mount namespace (root: ``unshare --mount``), then WORKER."""
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("standing a file in for a GPU device needs root and unshare")
    code = f"held = open('/dev/nvidia{minor}')\n" + WORKER
    return ["unshare", "--mount", "sh", "-c", f"mount -t tmpfs tmpfs /dev && : > /dev/nvidia{minor} && exec "
            f"{shlex.quote(sys.executable)} -c {shlex.quote(code)}"]


@needs_two
def test_ps_lists_every_worker_with_its_verdict(python: Python, pair_root: Path, records: Path,
                                                workers: Workers) -> None:
    hooked = python("-c", "import sys; print(sys.executable)").stdout.strip()
    by_exec = workers.start([*NUMAPIN, "exec", "--root", str(pair_root), "--gpu", "1", "--memory", "none", "--",
                             sys.executable, "-c", WORKER])
    by_hook = workers.start([hooked, "-c", WORKER], **{AUTOPIN: "1", "LOCAL_RANK": "1", FSROOT: str(pair_root),
                                                       RUNTIME_DIR: str(records)})
    # Unpinned, holding GPU 1 open: a worker, whatever its environment says.
    unpinned = workers.start(holding_a_gpu(1))
    # A shell of the job: CUDA_VISIBLE_DEVICES and a rank inherited, no GPU held: a candidate, never counted.
    shell = workers.start([sys.executable, "-c", WORKER], **{CUDA_VISIBLE_DEVICES: "1", "LOCAL_RANK": "0"})
    mine = [str(p) for p in (by_exec, by_hook, unpinned)]
    listing = _numapin("ps", "--root", str(pair_root), "--json")
    seen = {w["pid"]: w for w in json.loads(listing.stdout)["workers"]}
    assert {by_exec, by_hook, unpinned} <= set(seen) and shell not in seen, listing.stdout
    assert (seen[by_exec]["placed_by"], seen[by_exec]["verdict"], seen[by_exec]["gpu"]) == ("exec", "ok", 1)
    assert (seen[by_hook]["placed_by"], seen[by_hook]["verdict"], seen[by_hook]["rank"]) == ("autopin", "ok", 1)
    assert (seen[unpinned]["placed_by"], seen[unpinned]["verdict"], seen[unpinned]["why"]) == (
        "nobody", "misplaced", "/dev/nvidia1")
    assert seen[unpinned]["pci"] == seen[by_exec]["pci"], "/dev/nvidia1 is GPU 1"
    assert seen[unpinned]["misplaced_by"] == ["threads"] and seen[by_hook]["threads"] == 3
    assert listing.returncode == 1, "a misplaced worker makes ps exit non-zero"
    assert _numapin("ps", "--root", str(pair_root), *mine[:2]).returncode == 0
    text = _numapin("ps", "--root", str(pair_root), *mine, str(shell))
    assert text.returncode == 1 and text.stdout.rstrip().endswith(
        "3 GPU workers: 2 ok, 1 misplaced; 1 candidate (known from their environment only: not counted)"), text.stdout
    every = json.loads(_numapin("ps", "--root", str(pair_root), "--all", "--json").stdout)
    assert {w["pid"]: w["candidate"] for w in every["workers"] if w["pid"] in (shell, unpinned)} == {
        shell: True, unpinned: False}
    assert every["tally"]["candidates"] >= 1

    from prometheus_client.parser import text_string_to_metric_families

    exposition = _numapin("ps", "--root", str(pair_root), "--prometheus", *mine, str(shell))
    families = {f.name: f for f in text_string_to_metric_families(exposition.stdout)}
    assert exposition.returncode == 1
    for name in ("numapin_worker", "numapin_worker_threads", "numapin_worker_threads_outside",
                 "numapin_worker_misplaced", "numapin_worker_misplaced_threads", "numapin_worker_misplaced_memory"):
        samples = families[name].samples
        assert sorted(s.labels["pid"] for s in samples) == sorted(mine), name  # one series per worker, no shell
        assert all(set(s.labels) >= {"pid", "rank", "gpu", "pci"} for s in samples), name
    verdicts = {s.labels["pid"]: s.labels["verdict"] for s in families["numapin_worker"].samples}
    assert verdicts == {mine[0]: "ok", mine[1]: "ok", mine[2]: "misplaced"}
    assert [s.value for s in families["numapin_workers_misplaced"].samples] == [1.0]


def test_a_pid_that_is_no_process_is_one_line_and_exit_2(workers: Workers) -> None:
    pid = workers.start([sys.executable, "-c", WORKER])
    thread = max(int(t) for t in os.listdir(f"/proc/{pid}/task"))
    for asked, says in ((str(2**22 + 12345), "does not exist"), (str(thread), f"is a thread of process {pid}")):
        done = _numapin("ps", asked)
        assert done.returncode == 2 and says in done.stderr and done.stderr.count("\n") == 1, done.stderr


def test_a_forked_child_of_a_worker_is_said_to_inherit(pair_root: Path, records: Path, workers: Workers) -> None:
    code = ("import os, time, numapin\nnumapin.pin(1)\nif os.fork() == 0:\n"
            "    print('ready', os.getpid(), sep='\\n', flush=True); time.sleep(120); os._exit(0)\ntime.sleep(120)\n")
    parent = workers.start([sys.executable, "-c", code], **{FSROOT: str(pair_root), "LOCAL_RANK": "1"})
    out = workers.started[-1].stdout
    assert out is not None
    child = int(out.readline())
    assert _parent_of(child) == parent
    found = json.loads(_numapin("ps", "--root", str(pair_root), "--json", str(child)).stdout)["workers"]
    assert found[0]["placed_by"] == f"inherited from {parent} (pin)" and found[0]["verdict"] == "ok"


def test_a_worker_whose_environment_numapin_refuses_is_unknown(pair_root: Path, workers: Workers) -> None:
    good = workers.start([sys.executable, "-c", WORKER], **{CUDA_VISIBLE_DEVICES: "1"})
    bad = workers.start([sys.executable, "-c", WORKER], **{CUDA_VISIBLE_DEVICES: "1", PRIORITY_CORES: "fastest"})
    listing = _numapin("ps", "--root", str(pair_root), "--json", str(good), str(bad))
    seen = {w["pid"]: w for w in json.loads(listing.stdout)["workers"]}
    assert seen[good]["verdict"] == "misplaced", listing.stderr  # the others are still judged
    assert seen[bad]["verdict"] == "unknown" and PRIORITY_CORES in seen[bad]["note"]


def _parent_of(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])


def test_a_process_the_caller_may_not_read_is_listed_as_such(tmp_path: Path) -> None:
    # Another user's process: as root, ps runs as nobody against this (root's) process; otherwise
    # this user's ps against init's.
    if os.geteuid() != 0:
        proc = _numapin("ps", "1")
    else:
        python = shutil.which("python3", path="/usr/bin:/bin") or sys.executable
        readable = tempfile.mkdtemp(prefix="numapin-src-")  # a copy of the package that nobody may read
        try:
            os.chmod(readable, 0o755)
            shutil.copytree(REPO / "src" / "numapin", Path(readable) / "numapin")
            proc = subprocess.run([python, "-m", "numapin", "ps", str(os.getpid())], capture_output=True, text=True,
                                  timeout=60, user=65534, group=65534, cwd="/",
                                  env={"PYTHONPATH": readable, "PATH": "/usr/bin:/bin", RUNTIME_DIR: "/nonexistent"})
        finally:
            shutil.rmtree(readable, ignore_errors=True)
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.returncode == 0 and " unreadable" in proc.stdout, proc.stdout + proc.stderr


def test_ps_refuses_two_formats_at_once() -> None:
    proc = _numapin("ps", "--json", "--prometheus")
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1


def test_a_killed_workers_record_is_not_taken_for_a_live_one(pair_root: Path, records: Path) -> None:
    code = "import numapin, time; numapin.pin(1); print('ready', flush=True); time.sleep(60)"
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                            env={**os.environ, FSROOT: str(pair_root)})
    assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
    assert record.lookup(proc.pid) is not None
    proc.send_signal(signal.SIGKILL)  # no exit handler runs: the record stays behind
    proc.wait()
    deadline = time.monotonic() + 10
    while record.start_time(proc.pid) is not None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(list(records.iterdir())) == 1
    assert proc.pid not in record.entries() and list(records.iterdir()) == [], "stale: ignored and removed"


def test_the_textfile_is_replaced_whole_and_a_timer_gets_exit_0(tmp_path: Path, workers: Workers) -> None:
    # `ps --prometheus > DIR/numapin.prom` let node_exporter read half a file, and exit 1 for a
    # misplaced worker made the timer's unit fail.
    import threading

    from numapin.tools.prometheus import TEXTFILE, write_textfile

    folder = tmp_path / "textfile"
    folder.mkdir()
    texts = ["# numapin small\nnumapin_workers 0\n", "# numapin large\n" + "numapin_workers 1\n" * 20000]
    seen: set[str] = set()
    stop = threading.Event()

    def reader() -> None:
        while not stop.is_set():
            try:
                seen.add((folder / TEXTFILE).read_text())
            except FileNotFoundError:
                continue

    watcher = threading.Thread(target=reader)
    watcher.start()
    try:
        for i in range(300):
            write_textfile(str(folder), texts[i % 2])
    finally:
        stop.set()
        watcher.join()
    assert seen and seen <= set(texts), "a reader saw half a file"
    assert sorted(p.name for p in folder.iterdir()) == [TEXTFILE], "no temporary file left behind"
    unpinned = workers.start(holding_a_gpu(0))
    done = _numapin("ps", str(unpinned), "--textfile", str(folder))
    assert done.returncode == 0 and done.stdout == "", done.stderr
    assert f'pid="{unpinned}"' in (folder / TEXTFILE).read_text()
    assert _numapin("ps", "--textfile", str(tmp_path / "missing")).returncode == 2
