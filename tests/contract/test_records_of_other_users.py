"""Records and processes of another user, read by root's tools: whatever they hold, nothing reaches root's
terminal or the node's metrics but text and the documented labels. The other user is real (made by the
tests), and so are its processes, its record folder and what it writes there."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from live import until
from numapin.cpuset import CpuSet
from numapin.pinning import record
from other_user import Other

NUMAPIN = [sys.executable, "-m", "numapin"]
#: What a terminal acts on (the title, a clear screen, colours), and the start of a line that was never written.
HOSTILE = "\x1b]0;owned\x07\x1b[2J\x1b[31m\nFAKE line"
#: A process name of the same kind: the kernel keeps 15 bytes of it.
HOSTILE_NAME = "\x1b]0;t\x07\nFAKE"
ALLOWED = CpuSet(os.sched_getaffinity(0))


def _record(pid: int, **changes: object) -> str:
    placement = {"cpus": str(ALLOWED), "mems": "", "reason": HOSTILE, "mode": "explicit", "gpu": None, "pci": None,
                 "node": None, "rank": None}
    data: dict[str, object] = {
        "version": record.VERSION, "pid": pid, "start": record.start_time(pid), "how": "exec",
        "mask": str(ALLOWED), "target": str(ALLOWED), "placement": placement, "memory": None, "policy": "respect",
        "pools": {f"OMP{HOSTILE}": HOSTILE}, "written": time.time(),
        "drift": {f"cpu{HOSTILE}set": 2, "moved": 1}, "last_drift": HOSTILE}
    for key, value in changes.items():
        if key in placement:
            placement[key] = value
        else:
            data[key] = value
    return json.dumps(data)


@pytest.fixture
def folder(other: Other) -> Iterator[Path]:
    """The other user's own record folder, where root's readers look for its processes' records."""
    path = Path(f"/tmp/numapin-{other.uid}")
    shutil.rmtree(path, ignore_errors=True)
    other.sh('mkdir -m 755 "$1"', str(path))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def hostile(other: Other, folder: Path) -> Iterator[dict[str, int]]:
    """A process of the other user named to act on a terminal, with a record of its own that says the same;
    and a second, with no record, known only from the same environment (``candidate``)."""
    # Its environment says the same in every variable numapin reads of a process (a launcher's rank, the GPUs
    # it sees, numapin's own), as any process may.
    env = {"PATH": "/usr/bin:/bin", "LOCAL_RANK": HOSTILE, "CUDA_VISIBLE_DEVICES": HOSTILE,
           "NUMAPIN_AUTOPIN": HOSTILE, "NUMAPIN_APPLIED": HOSTILE, "NUMAPIN_MODE": HOSTILE,
           "SLURM_LOCALID": HOSTILE, "OMP_NUM_THREADS": HOSTILE}
    proc = other.start('d=$(mktemp -d) && echo "$d" && ln -s /bin/sleep "$d/$1" && exec "$d/$1" 300', HOSTILE_NAME,
                       env=env)
    assert proc.stdout is not None
    links = proc.stdout.readline().strip()
    candidate = None
    try:
        name = ""
        for _ in range(500):  # until the shell has become the hostile sleep
            try:
                name = Path(f"/proc/{proc.pid}/comm").read_text()
            except OSError:
                pass
            if name.startswith("\x1b"):
                break
            time.sleep(0.01)
        assert name.startswith("\x1b"), name
        candidate = other.start('exec "$1/$2" 300', links, HOSTILE_NAME, env=env)  # the link is there now
        planted = folder / record.file_name(proc.pid, record.start_time(proc.pid) or 0)
        other.sh('printf %s "$2" > "$1"', str(planted), _record(proc.pid))
        found = record.lookup(proc.pid)
        assert found is not None, "the other user's record of its own process is believed"
        yield {"pid": proc.pid, "candidate": candidate.pid}
    finally:
        for child in (proc, candidate):
            if child is not None:
                child.kill()
                child.wait()
        shutil.rmtree(links, ignore_errors=True)


def _clean(text: str, what: str) -> None:
    assert "\x1b" not in text and "\x07" not in text, f"{what}: a control character reached the terminal"
    assert not [line for line in text.splitlines() if line.startswith("FAKE")], f"{what}: a line was forged"
    assert "Traceback" not in text, what


@pytest.mark.parametrize("command", [
    ["threads", "{pid}"], ["threads", "{pid}", "--check"], ["doctor", "--pid", "{pid}"], ["ps"], ["ps", "{pid}"],
    ["ps", "--all"], ["ps", "--prometheus"], ["keep", "{pid}", "--looks", "40", "--period", "0.05"],
    ["threads", "{candidate}"], ["doctor", "--pid", "{candidate}"], ["ps", "{candidate}"],
    ["ps", "--all", "--prometheus"],
], ids=lambda c: " ".join(c))
def test_no_command_prints_what_another_users_record_or_process_would_have_a_terminal_do(
        hostile: dict[str, int], other: Other, command: list[str]) -> None:
    args = [word.format(**hostile) for word in command]
    target = hostile["candidate" if "{candidate}" in command else "pid"]
    if command[0] == "keep":  # a drift to report: the other user moves its own thread
        proc = subprocess.Popen([*NUMAPIN, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert proc.stderr is not None and proc.stderr.readline().startswith("numapin keep: keeping")
        other.sh(f'taskset -p -c {ALLOWED.first()} "$1" >/dev/null', str(target))
        out, err = proc.communicate(timeout=60)
        assert "narrowed" in out, (out, err)  # a slice inside its placement (every CPU): the drift it is
    else:
        done = subprocess.run([*NUMAPIN, *args], capture_output=True, text=True, timeout=60)
        assert done.returncode in (0, 1), done.stderr
        out, err = done.stdout, done.stderr
    assert str(target) in out + err
    _clean(out, "stdout")
    _clean(err, "stderr")


#: Each label of the node's metrics, and what its values may be (a record's or a process's own words are
#: escaped, never a new series of numapin's vocabulary).
LABELS = {
    "cause": re.compile(r"cpuset|mems|moved|inherited|unknown"),
    "pci": re.compile(r"|unknown|[0-9a-f]{4,8}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]"),
    "gpu": re.compile(r"|[0-9]+"), "rank": re.compile(r"|[0-9]+"), "pid": re.compile(r"[0-9]+"),
    "verdict": re.compile(r"ok|misplaced|unknown|unreadable"),
    "placed_by": re.compile(r"exec|autopin|pin|lease|compat|moved|inherited|nobody|other"),
    "kind": re.compile(r"anon|shmem|huge|file"), "node": re.compile(r"[0-9]+"),
    "name": re.compile(r"[^\x00-\x1f\x7f]*"),
}
_SAMPLE = re.compile(r'([a-z_]+)(?:\{(.*)\})? (\S+)')
_LABEL = re.compile(r'([a-z_]+)="((?:[^"\\]|\\.)*)"')


def labels_of(exposition: str) -> list[dict[str, str]]:
    """Every sample's labels, as a Prometheus scraper would parse them."""
    found = []
    for line in exposition.splitlines():
        if line.startswith("#") or not line:
            continue
        sample = _SAMPLE.fullmatch(line)
        assert sample is not None, f"not one sample: {line!r}"
        body = sample.group(2) or ""
        pairs = _LABEL.findall(body)
        assert ",".join(f'{k}="{v}"' for k, v in pairs) == body, f"labels that do not parse back: {line!r}"
        found.append(dict(pairs))
    return found


def test_label_values_from_a_record_are_its_documented_words_or_unknown(hostile: dict[str, int], other: Other,
                                                                         folder: Path) -> None:
    pid = hostile["pid"]
    # A second process of the other user whose record gives a PCI address that is none: not believed.
    forged = other.start("exec sleep 300")
    try:
        time.sleep(0.2)
        planted = folder / record.file_name(forged.pid, record.start_time(forged.pid) or 0)
        other.sh('printf %s "$2" > "$1"', str(planted),
                 _record(forged.pid, pci="0000:00:00.0\x1b[31m\n", gpu=0, drift={"moved": 1}))
        assert record.lookup(forged.pid) is None, "a record whose PCI address is none is damaged"
        done = subprocess.run([*NUMAPIN, "ps", "--prometheus"], capture_output=True, text=True, timeout=60)
        assert done.returncode in (0, 1), done.stderr
        samples = labels_of(done.stdout)
        assert any(s.get("pid") == str(pid) for s in samples)
        assert not any(s.get("pid") == str(forged.pid) for s in samples), "no series from a damaged record"
        causes = sorted(s["cause"] for s in samples if s.get("pid") == str(pid) and "cause" in s)
        assert causes == ["moved", "unknown"], causes
        for sample in samples:
            for label, value in sample.items():
                if label in LABELS:
                    assert LABELS[label].fullmatch(value), (label, value)
    finally:
        forged.kill()
        forged.wait()


#: A worker of the other user that pins itself (every CPU, policy override), and pins again (the first CPU) on a
#: line of input. Its modules are imported before it becomes that user: this interpreter may live where the
#: user may not read.
SELF_PINNING = """
import importlib, os, pkgutil, sys, threading, time
import numapin
for module in pkgutil.walk_packages(numapin.__path__, "numapin."):
    if not module.name.endswith("__main__"):
        try:
            importlib.import_module(module.name)
        except ImportError:
            pass
uid, gid, every, first = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
os.setgroups([]); os.setresgid(gid, gid, gid); os.setresuid(uid, uid, uid)
threading.Thread(target=threading.Event().wait, daemon=True).start()
numapin.pin(cpus=every, memory="none", policy="override")
print("pinned", flush=True)
sys.stdin.readline()
numapin.pin(cpus=first, memory="none", policy="override")
print("again", flush=True)
time.sleep(120)
"""


@pytest.mark.skipif(len(ALLOWED) < 2, reason="needs two CPUs")
def test_roots_keeper_writes_as_the_owner_and_follows_the_owners_later_pin(other: Other, folder: Path) -> None:
    every, first = str(ALLOWED), str(ALLOWED.first())
    env = {k: v for k, v in os.environ.items() if k not in ("NUMAPIN_RUNTIME_DIR", "XDG_RUNTIME_DIR")}
    # Placed on the first CPU, then, later, on every one (a move out of a placement is drift; into a slice of it
    # is a narrowing, left as it is).
    worker = subprocess.Popen([sys.executable, "-c", SELF_PINNING, *map(str, other), first, every], env=env,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    keeper = None
    try:
        assert worker.stdout is not None and worker.stdin is not None
        assert worker.stdout.readline() == "pinned\n"
        own = folder / record.file_name(worker.pid, record.start_time(worker.pid) or 0)
        assert own.stat().st_uid == other.uid, "the worker's own record, in its own folder"
        keeper = subprocess.Popen([*NUMAPIN, "keep", str(worker.pid), "--period", "0.02", "--looks", "250",
                                   "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert keeper.stderr is not None and keeper.stderr.readline().startswith("numapin keep: keeping")
        # Someone moves the worker's main thread: root's keeper puts it back (override) and counts it...
        other.sh(f'taskset -p -c {every} "$1" >/dev/null', str(worker.pid))
        assert until(lambda: (r := record.lookup(worker.pid)) is not None and dict(r.drift).get("moved") == 1)
        assert os.sched_getaffinity(worker.pid) == {ALLOWED.first()}, "put back"
        # ...in the owner's folder, as the owner's file: root's own folder holds no copy to shadow the owner's.
        assert own.stat().st_uid == other.uid
        roots = Path(os.environ["NUMAPIN_RUNTIME_DIR"])
        assert not [p for p in roots.iterdir() if p.name.startswith(f"{worker.pid}-")]
        # The owner pins again: root's keeper follows the new placement, never puts the old one back.
        worker.stdin.write("again\n")
        worker.stdin.flush()
        assert worker.stdout.readline() == "again\n"
        out, _ = keeper.communicate(timeout=60)
        masks = {int(t): os.sched_getaffinity(int(t)) for t in os.listdir(f"/proc/{worker.pid}/task")}
        assert all(mask == set(ALLOWED) for mask in masks.values()), (masks, out)
        events = [json.loads(line) for line in out.splitlines()]
        assert [e["cause"] for e in events] == ["moved"], events
        found = record.lookup(worker.pid)
        assert found is not None and found.target == ALLOWED, "judged by the owner's new pin"
        assert own.stat().st_uid == other.uid
    finally:
        for child in (worker, keeper):
            if child is not None:
                child.kill()
                child.wait()
