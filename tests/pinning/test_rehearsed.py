"""A rehearsal's placements, kept beside the rehearsed machine: left by each way in, listed while their process
runs, believed only of a process the file's owner runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

import live
from numapin.facts import synthetic
from numapin.facts.machine import this_host_cpus
from numapin.pinning.folders import start_time
from numapin.pinning.rehearsed import FOLDER, Rehearsed, listed
from other_user import Other


def _dgx(folder: Path) -> Path:
    spec = synthetic.shape_named("dgx-h100")
    if len(this_host_cpus()) >= spec.sockets * spec.cores_per_socket * spec.threads_per_core:
        pytest.skip("this host has a DGX H100's CPUs: dgx-h100 is no rehearsal here")
    return synthetic.write(spec, folder)


def _started(code: str, env: dict[str, str]) -> subprocess.Popen[str]:
    child = subprocess.Popen([sys.executable, "-c", code + "\nprint('ready', flush=True)\nimport time; time.sleep(60)"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    assert child.stdout is not None and child.stdout.readline() == "ready\n", child.stderr and child.stderr.read()
    return child


def test_pin_and_the_start_up_hook_leave_their_rehearsal_and_ps_lists_it_while_it_runs(tmp_path: Path) -> None:
    root = _dgx(tmp_path / "dgx")
    env = live.without_inputs(dict(os.environ)) | {"NUMAPIN_FSROOT": str(root)}
    by_pin = _started("import numapin; numapin.pin(gpu=5)", env)
    hooked = _started("import numapin.startup as s; s.at_start()", env | {"NUMAPIN_AUTOPIN": "1", "LOCAL_RANK": "2"})
    try:
        kept = {r.pid: r for r in listed(str(root))}
        assert set(kept) == {by_pin.pid, hooked.pid}
        assert (kept[by_pin.pid].how, kept[by_pin.pid].placement.gpu) == ("pin", 5)
        assert (kept[hooked.pid].how, kept[hooked.pid].placement.gpu) == ("autopin", 2)
        assert kept[by_pin.pid].start == start_time(by_pin.pid)
        shown = subprocess.run([sys.executable, "-m", "numapin", "ps", "--root", str(root), str(by_pin.pid), "--json"],
                               capture_output=True, text=True, timeout=60, env=live.without_inputs(dict(os.environ)))
        (worker,) = json.loads(shown.stdout)["workers"]
        assert (worker["verdict"], worker["gpu"], worker["placed_by"]) == ("rehearsal", 5, "pin")
        assert worker["expected"] == str(kept[by_pin.pid].placement.workers) and worker["misplaced_by"] == []
        # One judge: threads and doctor --pid say of it what ps says, by the same decision.
        for command in (["threads", str(hooked.pid), "--json"], ["doctor", "--pid", str(hooked.pid), "--json"]):
            said = subprocess.run([sys.executable, "-m", "numapin", *command, "--root", str(root)],
                                  capture_output=True, text=True, timeout=60,
                                  env=live.without_inputs(dict(os.environ)))
            answer = json.loads(said.stdout)
            assert answer["verdict"] == "rehearsal", (command, said.stdout + said.stderr)
            assert str(kept[hooked.pid].placement.workers) in json.dumps(answer), (command, said.stdout)
    finally:
        for child in (by_pin, hooked):
            child.kill()
            child.wait()
    assert listed(str(root)) == []  # ended: no longer listed, whatever its file still says


def _planted(folder: Path, owner: Other) -> Path:
    """A rehearsal folder of ``owner``'s (as a user's own --root DIR is), and the path of its entries."""
    kept = folder / FOLDER
    kept.mkdir(parents=True)
    for path in (folder, folder / "run", folder / "run" / "numapin", kept):
        os.chown(path, owner.uid, owner.gid)
    return kept


def test_an_entry_is_believed_only_of_a_process_its_owner_runs(other: Other) -> None:
    # Another user's rehearsal folder, read by root's ps --root: its entry naming one of root's processes (this one)
    # is not believed; its entry for a process of its own is.
    folder = Path(tempfile.mkdtemp(prefix="numapin-rehearsed-", dir="/tmp"))
    try:
        kept = _planted(folder, other)
        theirs = other.start("echo ready; exec sleep 60")
        try:
            assert theirs.stdout is not None and theirs.stdout.readline() == "ready\n"
            placement = {"rank": None, "gpu": 1, "pci": "0000:28:00.0", "node": 0, "mode": "node", "cpus": "0-55",
                         "mems": "0", "reason": "GPU 1 (0000:28:00.0) on node 0"}
            for pid in (os.getpid(), theirs.pid):
                entry = {"version": 1, "pid": pid, "start": start_time(pid), "how": "exec", "placement": placement}
                other.sh('printf %s "$1" > "$2"', json.dumps(entry), str(kept / f"{pid}-{start_time(pid)}.json"))
            assert [r.pid for r in listed(str(folder))] == [theirs.pid]
            # A FIFO or a link in an entry's name is passed over (never opened to block, never followed); the
            # entry they stand for is then no longer read.
            named = kept / f"{theirs.pid}-{start_time(theirs.pid)}.json"
            other.sh('mv "$1" "$1.real" && ln -s "$1.real" "$1"', str(named))
            assert listed(str(folder)) == []
            other.sh('rm "$1" && mkfifo "$1"', str(named))
            assert listed(str(folder)) == []
        finally:
            theirs.kill()
            theirs.wait()
    finally:
        subprocess.run(["rm", "-rf", str(folder)], check=True)


@given(st.recursive(st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats() | st.text(max_size=8),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
                        st.sampled_from(["version", "pid", "start", "how", "placement", "written", "cpus", "mems",
                                         "mode", "gpu", "x"]), inner, max_size=6), max_leaves=14))
def test_any_json_is_an_entry_or_nothing(value: object) -> None:
    found = Rehearsed.from_dict(value) if isinstance(value, dict) else None
    assert found is None or (isinstance(found, Rehearsed) and found.how in ("exec", "autopin", "pin", "lease",
                                                                              "compat"))


def test_root_rehearsing_on_another_users_folder_writes_nothing_there(other: Other) -> None:
    # The folder is the other user's: a link it planted inside (run -> a folder of root's) would lead root's write
    # anywhere, so root records no rehearsal in it, and still runs the program as a rehearsal.
    folder = Path(tempfile.mkdtemp(prefix="numapin-rehearsal-", dir="/tmp"))
    target = Path(tempfile.mkdtemp(prefix="numapin-roots-", dir="/tmp"))
    try:
        machine = _dgx(folder / "dgx")
        os.chown(folder, other.uid, other.gid)
        subprocess.run(["chown", "-R", f"{other.uid}:{other.gid}", str(machine)], check=True)
        other.sh('ln -s "$1" "$2/run"', str(target), str(machine))
        done = subprocess.run([sys.executable, "-m", "numapin", "exec", "--root", str(machine), "--local-rank", "0",
                               "--", "true"], capture_output=True, text=True, timeout=60,
                              env=live.without_inputs(dict(os.environ)))
        assert done.returncode == 0 and "a rehearsal" in done.stderr, done.stderr
        assert "kept for numapin ps" not in done.stderr
        assert list(target.iterdir()) == []  # nothing made where the link leads
    finally:
        subprocess.run(["rm", "-rf", str(folder), str(target)], check=True)
