"""The trust boundary of the files numapin shares: what another, unprivileged user plants is never believed,
followed, blocked on or deleted through. Each attack is made by a real second user the tests create (root
is there in CI), never by mocking ownership."""

from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from numapin.base.environment import RUNTIME_DIR
from numapin.pinning import record

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to create and become another user")

OTHER = "numapin-test-other"
READY = "import time; print('ready', flush=True); time.sleep(60)"


@pytest.fixture(scope="module")
def other() -> tuple[int, int]:
    """A second, unprivileged user of this host, made for these tests."""
    try:
        entry = pwd.getpwnam(OTHER)
    except KeyError:
        subprocess.run(["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", OTHER],
                       check=True)
        entry = pwd.getpwnam(OTHER)
    assert entry.pw_uid != 0
    return entry.pw_uid, entry.pw_gid


def as_other(other: tuple[int, int], script: str, *args: str) -> None:
    """Run the shell ``script`` (with ``args`` as $1...) as the other user: what it plants is its own doing.
    (Shell, not Python: this test's interpreter may live where that user may not read.)"""
    subprocess.run(["/bin/sh", "-c", script, "sh", *args], user=other[0], group=other[1], check=True, timeout=60,
                   cwd="/")


@pytest.fixture
def worker(monkeypatch: pytest.MonkeyPatch) -> Iterator[int]:
    """A live process of root's, never pinned: nothing numapin wrote speaks for it."""
    child = subprocess.Popen([sys.executable, "-c", READY], stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None and child.stdout.readline() == "ready\n"
    yield child.pid
    child.kill()
    child.wait()


@pytest.fixture
def shared(other: tuple[int, int]) -> Iterator[Path]:
    """A folder the other user owns (as its /tmp/numapin-UID would be), inside one that is root's."""
    top = Path(tempfile.mkdtemp(prefix="numapin-trust-"))
    top.chmod(0o755)
    theirs = top / "theirs"
    theirs.mkdir(mode=0o755)
    os.chown(theirs, *other)
    yield theirs
    shutil.rmtree(top)


def _forged(pid: int) -> str:
    start = record.start_time(pid)
    placement = {"cpus": "0", "mems": "0", "reason": "forged", "mode": "node", "gpu": 0, "pci": None,
                 "node": 0, "rank": None, "reserved": "", "cores": "all"}
    data = {"version": record.VERSION, "pid": pid, "start": start, "how": "exec", "mask": "0", "target": "0",
            "placement": placement, "memory": None, "policy": "respect", "pools": {}, "written": 1.0}
    return json.dumps(data)


def test_a_record_another_user_writes_for_roots_process_is_not_believed(
        other: tuple[int, int], shared: Path, worker: int, monkeypatch: pytest.MonkeyPatch) -> None:
    name = f"{worker}-{record.start_time(worker)}.json"
    as_other(other, 'printf %s "$2" > "$1"', str(shared / name), _forged(worker))
    assert (shared / name).stat().st_uid == other[0]
    monkeypatch.setenv(RUNTIME_DIR, str(shared))
    assert record.lookup(worker) is None
    assert worker not in record.entries()
    # The same content, written by the process's owner (root) in a folder of root's, is believed.
    (shared / name).unlink()
    os.chown(shared, 0, 0)
    (shared / name).write_text(_forged(worker))
    found = record.lookup(worker)
    assert found is not None and found.placement.reason == "forged"


def test_roots_files_are_never_deleted_through_another_users_symlink(
        other: tuple[int, int], shared: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    victim = Path(tempfile.mkdtemp(prefix="numapin-victim-"))  # root's, 0700
    try:
        planted = ["1-1.json", f"{2**22 + 77}-5.json", f"x.{2**22 + 78}.tmp"]  # named like stale records
        for name in planted:
            (victim / name).write_text("root's own file")
        link = shared / "records"
        as_other(other, 'ln -s "$1" "$2"', str(victim), str(link))
        monkeypatch.setenv(RUNTIME_DIR, str(link))
        assert record.entries() == {}  # what ps reads: the symlinked folder is refused whole
        assert record.lookup(os.getpid()) is None
        assert sorted(p.name for p in victim.iterdir()) == sorted(planted)
    finally:
        shutil.rmtree(victim)


def test_a_fifo_named_like_a_record_blocks_no_reader(worker: int, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = Path(tempfile.mkdtemp(prefix="numapin-fifo-"))
    try:
        os.mkfifo(folder / f"{worker}-{record.start_time(worker)}.json")
        monkeypatch.setenv(RUNTIME_DIR, str(folder))
        # In a child with a deadline: a blocking open would hang it, and the deadline would say so.
        code = (f"from numapin.pinning import record; print(record.lookup({worker}), "
                f"{worker} in record.entries())")
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30)
        assert done.returncode == 0, done.stderr
        assert done.stdout.split() == ["None", "False"]
    finally:
        shutil.rmtree(folder)


@pytest.mark.parametrize(("name", "content"), [
    ("{pid}-{start}.json", "[" * 100_000 + "]" * 100_000),  # nested deep enough to exhaust the parser
    ("\u00b2-1.json", "{}"),  # isdigit() is true for a superscript two, int() refuses it
    ("{pid}-{start}.json", '{"version": 2, "how": "exec", "placement": {"reason": "\\ud800"}}'),
    ("{pid}-0{start}.json", "{}"),  # not the name numapin writes for that process
])
def test_a_damaged_record_is_passed_over(name: str, content: str, worker: int,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    folder = Path(tempfile.mkdtemp(prefix="numapin-damaged-"))
    try:
        (folder / name.format(pid=worker, start=record.start_time(worker))).write_text(content)
        monkeypatch.setenv(RUNTIME_DIR, str(folder))
        assert record.lookup(worker) is None and record.entries() == {}
        done = subprocess.run([sys.executable, "-m", "numapin", "ps", str(worker), "--json"], capture_output=True,
                              text=True, timeout=60)
        assert "Traceback" not in done.stderr and done.returncode in (0, 1), done.stderr
    finally:
        shutil.rmtree(folder)


def test_the_numactl_stand_in_never_imports_from_the_working_directory(
        other: tuple[int, int], shared: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from numapin.compat.numactl_front import NAME, front_folder

    monkeypatch.setenv("TMPDIR", str(tmp_path))
    tmp_path.chmod(0o755)
    from numapin.compat import numactl_front

    numactl_front._write(front_folder())
    stand_in = Path(front_folder()) / NAME
    # The other user's folder, holding an argparse.py (and a numapin/) that would run as root if imported.
    as_other(other, 'echo "raise SystemExit(99)" > "$1/argparse.py" && mkdir "$1/numapin" && '
                    'echo "raise SystemExit(98)" > "$1/numapin/__init__.py"', str(shared))
    done = subprocess.run([str(stand_in), "--show"], cwd=shared, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, (done.returncode, done.stderr)
    assert "policy" in done.stdout
