"""A host buffer seen from outside: declared beside the process's record, verified against ``numa_maps`` by
``threads``, ``doctor --pid`` and the exporter, believed only as a record is; and ``doctor --buffer``'s checks of
what a planned buffer needs (free huge pages on the GPU's node, the locked-memory limit)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import live
from numapin.base.environment import RUNTIME_DIR
from numapin.cpuset import CpuSet
from numapin.pinning import record
from other_user import Other

NUMAPIN = [sys.executable, "-m", "numapin"]
#: A real memory node of this machine with CPUs this process may use.
NODE = min(n.id for n in live.TOPOLOGY.nodes if n.cpus & CpuSet(live.BASELINE))
SIZE = 8 << 20

#: Makes a buffer, says its address and page size, closes it on a line of input, then waits for another.
HOLDER = """
import sys, numapin
buf = numapin.host_buffer({size}, node={node}, hugepages={huge!r})
print(buf.address, buf.page_size, flush=True)
sys.stdin.readline()
buf.close()
print("closed", flush=True)
sys.stdin.readline()
"""


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return live.without_inputs(dict(os.environ)) | {RUNTIME_DIR: str(tmp_path / "records")}


@pytest.fixture
def holder(env: dict[str, str]) -> Iterator[tuple[subprocess.Popen[str], int, int]]:
    proc = subprocess.Popen([sys.executable, "-c", HOLDER.format(size=SIZE, node=NODE, huge=None)], text=True,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)
    assert proc.stdout is not None
    address, page = map(int, proc.stdout.readline().split())
    yield proc, address, page
    proc.kill()
    proc.wait()


def _json(env: dict[str, str], *args: str) -> dict:  # type: ignore[type-arg]
    done = subprocess.run([*NUMAPIN, *args, "--json"], capture_output=True, text=True, timeout=60, env=env)
    assert "Traceback" not in done.stderr, done.stderr
    return json.loads(done.stdout)  # type: ignore[no-any-return]


def test_a_buffer_is_listed_with_where_its_pages_are_until_it_is_closed(
        env: dict[str, str], holder: tuple[subprocess.Popen[str], int, int]) -> None:
    proc, address, page = holder
    seen = _json(env, "threads", str(proc.pid))["host_memory"]
    assert seen["buffers"] == [{"address": address, "nbytes": SIZE, "node": str(NODE), "page_size": page,
                                "asked_page_size": page, "locked": False, "on_nodes": {str(NODE): SIZE},
                                "on_its_node": True}], seen
    assert seen["buffers_elsewhere"] == []
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write("\n")
    proc.stdin.flush()
    assert proc.stdout.readline() == "closed\n"
    assert _json(env, "threads", str(proc.pid))["host_memory"]["buffers"] == []
    assert not [name for name in os.listdir(env[RUNTIME_DIR]) if name.endswith(".buffers.json")]


def test_a_declaration_another_user_plants_for_roots_process_is_not_believed(
        env: dict[str, str], holder: tuple[subprocess.Popen[str], int, int], other: Other) -> None:
    proc, address, _ = holder
    start = record.start_time(proc.pid)
    assert start is not None
    name = record.file_name(proc.pid, start).replace(".json", ".buffers.json")
    forged = json.dumps({"version": record.VERSION, "pid": proc.pid, "start": start, "buffers": [
        {"address": 4096, "nbytes": 1 << 40, "node": "0", "page_size": 4096, "asked_page_size": 4096}]})
    # The other user's own folders, where a process of theirs would declare: never read for root's process.
    planted = [f"/tmp/numapin-{other.uid}", f"/run/user/{other.uid}/numapin"]
    try:
        other.sh('for d in "$@"; do mkdir -p "$d" 2>/dev/null && printf %s "$0" > "$d/$1"; done; true',
                 forged, name, *planted)
        found = _json(env | {RUNTIME_DIR: ""}, "threads", str(proc.pid))["host_memory"]["buffers"]
        assert [b["address"] for b in found] == [], found
        found = _json(env, "threads", str(proc.pid))["host_memory"]["buffers"]
        assert [b["address"] for b in found] == [address], found
    finally:
        subprocess.run(["rm", "-rf", *planted], check=False)


def test_a_buffer_that_stepped_down_from_huge_pages_is_a_finding_of_its_process(env: dict[str, str]) -> None:
    huge = 2 << 20
    proc = subprocess.Popen([sys.executable, "-c", HOLDER.format(size=SIZE, node=NODE, huge="2M")], text=True,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)
    try:
        assert proc.stdout is not None
        _, page = map(int, proc.stdout.readline().split())
        found = _json(env, "doctor", "--pid", str(proc.pid))["findings"]
    finally:
        proc.kill()
        proc.wait()
    stepped = [f for f in found if f["id"] == "hugepages-not-free"]
    # What the live machine did: base pages where node NODE had too few 2 MiB pages free, else huge ones.
    assert bool(stepped) == (page < huge), (page, found)
    if stepped:
        assert "asked for 2.0 MiB pages and got" in stepped[0]["sees"] and "nr_hugepages" in stepped[0]["fix"]


def _doctor_ids(env: dict[str, str], *args: str) -> list[str]:
    return [f["id"] for f in _json(env, "doctor", *args)["findings"]]


def test_a_planned_buffer_is_checked_against_the_gpus_nodes_free_huge_pages(tmp_path: Path,
                                                                            env: dict[str, str]) -> None:
    root = tmp_path / "machine"
    subprocess.run([*NUMAPIN, "machine", "dgx-h100", str(root)], check=True, capture_output=True, env=env)
    pool = root / "sys/devices/system/node/node0/hugepages/hugepages-2048kB"
    pool.mkdir(parents=True)
    args = ("--root", str(root), "--gpu", "0", "--buffer", "1G", "--hugepages", "2M")
    (pool / "free_hugepages").write_text("511\n")  # one short of 1 GiB of 2 MiB pages
    (pool / "nr_hugepages").write_text("600\n")
    assert "hugepages-not-free" in _doctor_ids(env, *args)
    done = subprocess.run([*NUMAPIN, "doctor", *args, "--json"], capture_output=True, text=True, timeout=60, env=env)
    (fix,) = [f["fix"] for f in json.loads(done.stdout)["findings"] if f["id"] == "hugepages-not-free"]
    # The command itself, its number filled: the node's pool now (600) and the one page it lacks.
    assert "echo 601 > /sys/devices/system/node/node0/hugepages/hugepages-2048kB/nr_hugepages" in fix, fix
    (pool / "free_hugepages").write_text("512\n")
    assert "hugepages-not-free" not in _doctor_ids(env, *args)
    assert "hugepages-not-free" not in _doctor_ids(env, "--root", str(root), "--gpu", "0", "--buffer", "1G")


def test_a_buffer_to_lock_past_the_memlock_limit_is_an_error_and_root_may_lock_any(env: dict[str, str],
                                                                                 other: Other) -> None:
    assert "memlock-too-low" not in _doctor_ids(env, "--buffer", "1T", "--lock")  # root: CAP_IPC_LOCK
    # The other user, with a 64 KiB limit: its own process, checked from outside by root.
    proc = other.start('ulimit -l 64 && exec sleep 60')
    try:
        live.until(lambda: Path(f"/proc/{proc.pid}/comm").read_text().strip() == "sleep")
        ids = _doctor_ids(env, "--pid", str(proc.pid), "--buffer", "1M", "--lock")
        assert "memlock-too-low" in ids
        assert "memlock-too-low" not in _doctor_ids(env, "--pid", str(proc.pid), "--buffer", "64K", "--lock")
        assert "memlock-too-low" not in _doctor_ids(env, "--pid", str(proc.pid), "--buffer", "1M")
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.parametrize("args", [["--hugepages", "2M"], ["--lock"], ["--buffer", "0"], ["--buffer", "3X"],
                                  ["--buffer", "1G", "--hugepages", "3M"]])
def test_bad_buffer_questions_are_one_clear_line(env: dict[str, str], args: list[str]) -> None:
    done = subprocess.run([*NUMAPIN, "doctor", *args], capture_output=True, text=True, timeout=60, env=env)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr


def test_the_exporter_says_a_workers_host_memory_by_kind_and_node(env: dict[str, str]) -> None:
    first = min(os.sched_getaffinity(0))
    worker = (f"import numapin, time; buf = numapin.host_buffer(8 << 20, node={NODE}); print('ready', flush=True); "
              "time.sleep(120)")
    proc = subprocess.Popen([*NUMAPIN, "exec", "--cpus", str(first), "--memory", "none", "--", sys.executable, "-c",
                             worker], stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
        text = subprocess.run([*NUMAPIN, "ps", "--prometheus"], capture_output=True, text=True, timeout=60,
                              env=env).stdout
    finally:
        proc.kill()
        proc.wait()
    mine = [line for line in text.splitlines() if f'pid="{proc.pid}"' in line]
    anon = [line for line in mine if line.startswith("numapin_worker_host_memory_bytes{")
            and 'kind="anon"' in line and f'node="{NODE}"' in line]
    assert len(anon) == 1 and int(anon[0].rsplit(" ", 1)[1]) >= 8 << 20, mine
    away = [line for line in mine if line.startswith("numapin_worker_host_memory_elsewhere{")]
    assert len(away) == 1 and away[0].endswith(" 0"), mine


_JSON = st.recursive(st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.text(max_size=8),
                     lambda inner: st.lists(inner, max_size=4)
                     | st.dictionaries(st.text(max_size=8), inner, max_size=4), max_leaves=12)


@settings(max_examples=40)
@given(buffers=st.one_of(_JSON, st.lists(st.dictionaries(st.sampled_from(
    ["address", "nbytes", "node", "page_size", "asked_page_size", "locked"]), _JSON), max_size=5)), more=_JSON)
def test_any_declaration_a_process_writes_of_itself_is_read_or_passed_over(buffers: object, more: object) -> None:
    # The process's own file, in its own folder: whatever it holds, a reader's answer is a Declaration whose every
    # buffer and count is well formed, never an exception.
    import tempfile

    from numapin.pinning.declaration import LISTED_AT_MOST, Declared, declared

    with tempfile.TemporaryDirectory() as folder:
        os.chmod(folder, 0o755)
        start = record.start_time(os.getpid())
        assert start is not None
        name = record.file_name(os.getpid(), start).replace(".json", ".buffers.json")
        Path(folder, name).write_text(json.dumps({"version": record.VERSION, "pid": os.getpid(), "start": start,
                                                  "buffers": buffers, "more": more}))
        old = os.environ.get(RUNTIME_DIR)
        os.environ[RUNTIME_DIR] = folder
        try:
            found = declared(os.getpid())
        finally:
            if old is None:
                del os.environ[RUNTIME_DIR]
            else:
                os.environ[RUNTIME_DIR] = old
    assert all(isinstance(b, Declared) and b.nbytes > 0 for b in found.buffers)
    assert len(found.buffers) <= LISTED_AT_MOST
    assert all(isinstance(n, int) and n >= 0 for n in (found.more, found.more_bytes))
