"""The trust boundary of the files numapin shares: what another, unprivileged user plants is never believed,
followed, blocked on or deleted through. Each attack is made by a real second user the tests create (root
is there in CI), never by mocking ownership."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from numapin.base.environment import RUNTIME_DIR
from numapin.pinning import record
from other_user import Other

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to create and become another user")

READY = "import time; print('ready', flush=True); time.sleep(60)"


def as_other(other: Other, script: str, *args: str) -> None:
    other.sh(script, *args)


@pytest.fixture
def worker(monkeypatch: pytest.MonkeyPatch) -> Iterator[int]:
    """A live process of root's, never pinned: nothing numapin wrote speaks for it."""
    child = subprocess.Popen([sys.executable, "-c", READY], stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None and child.stdout.readline() == "ready\n"
    yield child.pid
    child.kill()
    child.wait()


@pytest.fixture
def shared(other: Other) -> Iterator[Path]:
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
        other: Other, shared: Path, worker: int, monkeypatch: pytest.MonkeyPatch) -> None:
    name = record.file_name(worker, record.start_time(worker) or 0)
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
        other: Other, shared: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    victim = Path(tempfile.mkdtemp(prefix="numapin-victim-"))  # root's, 0700
    try:
        planted = [record.file_name(1, 1), record.file_name(2**22 + 77, 5),
                   f"{record.file_name(1, 2)}.{2**22 + 78}.tmp"]  # named like stale records
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
        os.mkfifo(folder / record.file_name(worker, record.start_time(worker) or 0))
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
    ("{pid}-{start}-{ns}.json", "[" * 100_000 + "]" * 100_000),  # nested deep enough to exhaust the parser
    ("\u00b2-1-{ns}.json", "{}"),  # isdigit() is true for a superscript two, int() refuses it
    ("{pid}-{start}-{ns}.json", '{"version": 3, "how": "exec", "placement": {"reason": "\\ud800"}}'),
    ("{pid}-0{start}-{ns}.json", "{}"),  # not the name numapin writes for that process
])
def test_a_damaged_record_is_passed_over(name: str, content: str, worker: int,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    folder = Path(tempfile.mkdtemp(prefix="numapin-damaged-"))
    try:
        (folder / name.format(pid=worker, start=record.start_time(worker), ns=record.namespace())).write_text(content)
        monkeypatch.setenv(RUNTIME_DIR, str(folder))
        assert record.lookup(worker) is None and record.entries() == {}
        done = subprocess.run([sys.executable, "-m", "numapin", "ps", str(worker), "--json"], capture_output=True,
                              text=True, timeout=60)
        assert "Traceback" not in done.stderr and done.returncode in (0, 1), done.stderr
    finally:
        shutil.rmtree(folder)


def test_the_numactl_stand_in_never_imports_from_the_working_directory(
        other: Other, shared: Path, private_tmp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from numapin.compat import numactl_front

    monkeypatch.setenv("XDG_RUNTIME_DIR", str(private_tmp))
    folder = numactl_front.front_folder()
    assert folder is not None and folder.startswith(str(private_tmp))
    numactl_front._write(folder)
    stand_in = Path(folder) / numactl_front.NAME
    # The other user's folder, holding an argparse.py (and a numapin/) that would run as root if imported.
    as_other(other, 'echo "raise SystemExit(99)" > "$1/argparse.py" && mkdir "$1/numapin" && '
                    'echo "raise SystemExit(98)" > "$1/numapin/__init__.py"', str(shared))
    done = subprocess.run([str(stand_in), "--show"], cwd=shared, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, (done.returncode, done.stderr)
    assert "policy" in done.stdout


#: Where an interpreter puts the stand-in, run afresh (its temporary folder, runtime folder and home as given).
FRONT = ("import os; from numapin.compat.numactl_front import ensure_front; "
         "print(ensure_front({'PATH': '/nonexistent'}))")


def _front(**env: str) -> str:
    base = {k: v for k, v in os.environ.items() if k not in ("XDG_RUNTIME_DIR", "XDG_CACHE_HOME", "TMPDIR")}
    done = subprocess.run([sys.executable, "-c", FRONT], env={**base, **env}, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def _planted_numactl(other: Other, folder: str) -> bool:
    """Whether the other user can put a numactl of its own at ``folder``."""
    try:
        as_other(other, 'mkdir -p "$1" && printf "#!/bin/sh\\necho planted\\n" > "$1/numactl" && '
                        'chmod 755 "$1/numactl"', folder)
    except subprocess.CalledProcessError:
        return False
    return True


def test_the_numactl_stand_in_is_never_where_another_user_can_make_it(
        other: Other, private_tmp: Path) -> None:
    """The stand-in stayed first on PATH at a predictable name in /tmp; once a cleaner
    removed it, another user could make it again with their own numactl, which root's next worker ran."""
    import hashlib

    tag = f"{os.geteuid()}-{hashlib.sha256(sys.executable.encode()).hexdigest()[:12]}"
    guess = f"/tmp/numapin-front-{tag}"  # where the stand-in of root's interpreter was
    # Planted (by this run's other user, or already by another run's, side by side with this one).
    assert _planted_numactl(other, guess) or (Path(guess) / "numactl").exists()
    try:
        home = private_tmp / "home"
        home.mkdir()
        folder = _front(TMPDIR="/tmp", HOME=str(home))  # no runtime folder: /tmp, or the cache?
        assert folder.startswith(str(home)), folder
        run = subprocess.run(["numactl", "--show"], env={**os.environ, "PATH": f"{folder}:/nonexistent"},
                             capture_output=True, text=True, timeout=60)
        assert run.stdout.startswith("policy: ") and "planted" not in run.stdout
        # A cleaner empties the folder; the other user cannot make it again, and root's next interpreter does.
        shutil.rmtree(folder)
        assert not _planted_numactl(other, folder)
        assert _front(TMPDIR="/tmp", HOME=str(home)) == folder and (Path(folder) / "numactl").stat().st_uid == 0
    finally:
        shutil.rmtree(guess, ignore_errors=True)


def test_a_place_another_user_took_gives_way_to_the_next(other: Other, private_tmp: Path) -> None:
    """Another user making the stand-in's folder first left root with no numactl."""
    runtime, home = private_tmp / "run", private_tmp / "home"
    (runtime / "numapin").mkdir(parents=True)
    home.mkdir()
    for reachable in (private_tmp.parent, private_tmp, runtime):  # others may pass, not write
        reachable.chmod(0o755)
    os.chown(runtime / "numapin", *other)  # the first place is another user's
    assert _planted_numactl(other, str(runtime / "numapin" / "front"))
    folder = _front(XDG_RUNTIME_DIR=str(runtime), HOME=str(home))
    assert folder.startswith(str(home / ".cache" / "numapin")), folder
    run = subprocess.run([f"{folder}/numactl", "--show"], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0 and run.stdout.startswith("policy: "), run.stderr


def test_a_folder_another_user_owns_is_not_only_roots(other: Other, private_tmp: Path) -> None:
    from numapin.base.files import only_theirs

    theirs = private_tmp / "theirs"
    theirs.mkdir(mode=0o755)
    assert only_theirs(str(theirs / "front"), {0})
    os.chown(theirs, *other)
    assert not only_theirs(str(theirs / "front"), {0}) and only_theirs(str(theirs / "front"), {0, other[0]})


def _records(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".json"))


def test_a_pid_namespace_never_judges_nor_removes_anothers_records(private_tmp: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """A reader in one PID namespace deleted the live records of another sharing the folder
    (a container with -v /tmp:/tmp): ids there name other processes, or none."""
    if shutil.which("unshare") is None:
        pytest.fail("unshare (util-linux) is needed to make a PID namespace")
    folder = private_tmp / "records"
    monkeypatch.setenv(RUNTIME_DIR, str(folder))
    env = dict(os.environ)
    pinned = [sys.executable, "-m", "numapin", "exec", "--cpus", str(min(os.sched_getaffinity(0))),
              "--memory", "none", "--", sys.executable, "-c", READY]
    host = subprocess.Popen(pinned, stdout=subprocess.PIPE, text=True, env=env)
    contained = subprocess.Popen(["unshare", "--pid", "--fork", "--mount-proc", *pinned], stdout=subprocess.PIPE,
                                 text=True, env=env)
    try:
        for child in (host, contained):
            assert child.stdout is not None and child.stdout.readline() == "ready\n"
        both = _records(folder)
        assert len(both) == 2 and record.file_name(host.pid, record.start_time(host.pid) or 0) in both
        # The host reads every record of the folder: the container's (process 1 there) stays, and is not
        # taken for the host's process 1.
        assert host.pid in record.entries() and 1 not in record.entries() and record.lookup(1) is None
        ps = subprocess.run([sys.executable, "-m", "numapin", "ps", "--json"], env=env, capture_output=True,
                            text=True, timeout=60)
        assert ps.returncode in (0, 1), ps.stderr
        assert _records(folder) == both
        # A reader inside another namespace, where the host's process id names nothing: both stay.
        inside = subprocess.run(["unshare", "--pid", "--fork", "--mount-proc", sys.executable, "-m", "numapin",
                                 "ps", "--json"], env=env, capture_output=True, text=True, timeout=60)
        assert inside.returncode in (0, 1), inside.stderr
        assert json.loads(inside.stdout)["workers"] == [] and _records(folder) == both
    finally:
        for child in (host, contained):
            child.kill()
            child.wait()


def test_a_front_on_path_that_is_no_longer_its_users_alone_is_dropped(other: Other,
                                                                       private_tmp: Path) -> None:
    # An earlier interpreter of the job put the front first on PATH; its folder has since passed to another
    # user: the next interpreter takes it off PATH and uses the next place, never running it unchecked.
    runtime, home = private_tmp / "run", private_tmp / "home"
    runtime.mkdir()
    home.mkdir()
    env = {"XDG_RUNTIME_DIR": str(runtime), "HOME": str(home)}
    first = _front(**env)
    assert first.startswith(str(runtime))
    os.chown(first, *other)
    code = ("import os; from numapin.compat.numactl_front import ensure_front; "
            f"env = {{'PATH': {first!r} + ':/nonexistent'}}; print(ensure_front(env)); print(env['PATH'])")
    base = {k: v for k, v in os.environ.items() if k not in ("XDG_RUNTIME_DIR", "XDG_CACHE_HOME", "TMPDIR")}
    done = subprocess.run([sys.executable, "-c", code], env={**base, **env}, capture_output=True, text=True,
                          timeout=60)
    folder, path = done.stdout.split()
    assert folder.startswith(str(home / ".cache")) and first not in path.split(":"), done.stdout
    assert path.split(":")[0] == folder


#: numapin's ps (or keep), run by the other user: this interpreter imports what they need while root (the
#: interpreter may live where that user may not read), then becomes the other user for good, and only then scans.
_PS_AS = """
import importlib, json, locale, logging, os, pkgutil, select, signal, sys, time
import numapin, numapin.cli
for module in pkgutil.walk_packages(numapin.__path__, "numapin."):  # what ps imports when it finds a worker
    if module.name.endswith("__main__"):
        continue  # it runs the command line
    try:
        importlib.import_module(module.name)
    except ImportError:
        pass  # a compatibility module whose framework is not here
numapin.cli.build_parser("ps").parse_args(["ps"])
uid, gid = int(sys.argv[1]), int(sys.argv[2])
os.setgroups([]); os.setresgid(gid, gid, gid); os.setresuid(uid, uid, uid)
assert os.getresuid() == (uid, uid, uid)
sys.exit(numapin.cli.main(sys.argv[3:]))
"""


def test_a_user_sees_roots_workers_by_their_records_and_says_what_it_could_not_read(
        other: Other, monkeypatch: pytest.MonkeyPatch) -> None:
    # A user's ps judged root's workers `unreadable`, though their masks and records are
    # readable by anyone; and said nothing of the processes it could not look into.
    top = Path(tempfile.mkdtemp(prefix="numapin-view-"))
    top.chmod(0o755)  # root's records, readable by every user, as /run/numapin is
    monkeypatch.setenv(RUNTIME_DIR, str(top))
    first = min(os.sched_getaffinity(0))
    placed = subprocess.Popen([sys.executable, "-m", "numapin", "exec", "--cpus", str(first), "--memory", "none",
                               "--", sys.executable, "-c", "held = b'x' * (64 << 20)\n" + READY],
                              stdout=subprocess.PIPE, text=True)  # past the memory judged, written: resident
    hidden = subprocess.Popen([sys.executable, "-c", READY], stdout=subprocess.PIPE, text=True)
    try:
        for child in (placed, hidden):
            assert child.stdout is not None and child.stdout.readline() == "ready\n"
        seen = subprocess.run([sys.executable, "-c", _PS_AS, *map(str, other), "ps", "--json"], capture_output=True,
                              text=True, timeout=60)
        assert seen.returncode == 0, seen.stderr
        report = json.loads(seen.stdout)
        worker = next(w for w in report["workers"] if w["pid"] == placed.pid)
        assert (worker["verdict"], worker["placed_by"], worker["why"]) == ("ok", "exec", "record")
        assert worker["expected"] == str(first) and worker["threads"] == 1
        assert "another user's process" in worker["note"], "it says its memory could not be read"
        assert hidden.pid not in {w["pid"] for w in report["workers"]}
        assert report["unseen"] >= 1, "root's unrecorded process is counted as not looked into"
        text = subprocess.run([sys.executable, "-c", _PS_AS, *map(str, other), "ps"], capture_output=True,
                              text=True, timeout=60).stdout
        assert "not looked into:" in text and "run as root" in text
        # Root itself looks into every process: none is left unseen.
        assert json.loads(subprocess.run([sys.executable, "-m", "numapin", "ps", "--json"], capture_output=True,
                                         text=True, timeout=60).stdout)["unseen"] == 0
    finally:
        for child in (placed, hidden):
            child.kill()
            child.wait()
        shutil.rmtree(top)


def test_another_users_keeper_can_neither_move_roots_worker_nor_speak_for_it(
        other: Other, monkeypatch: pytest.MonkeyPatch) -> None:
    # numapin keep run by another user on root's worker (policy override: the keeper would put a moved thread
    # back): it may watch and say what it saw, but the kernel refuses its mask, and nothing it writes is taken
    # for root's record.
    top = Path(tempfile.mkdtemp(prefix="numapin-keep-"))
    top.chmod(0o755)
    monkeypatch.setenv(RUNTIME_DIR, str(top))
    first, second = sorted(os.sched_getaffinity(0))[:2]
    placed = subprocess.Popen([sys.executable, "-m", "numapin", "exec", "--cpus", str(first), "--memory", "none",
                               "--policy", "override", "--", sys.executable, "-c", READY], stdout=subprocess.PIPE,
                              text=True)
    keeper = None
    try:
        assert placed.stdout is not None and placed.stdout.readline() == "ready\n"
        keeper = subprocess.Popen([sys.executable, "-c", _PS_AS, *map(str, other), "keep", str(placed.pid),
                                   "--period", "0.05", "--looks", "40", "--json"], stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True)
        assert keeper.stderr is not None and keeper.stderr.readline().startswith("numapin keep: keeping ")
        os.sched_setaffinity(placed.pid, {second})
        out, _ = keeper.communicate(timeout=60)
        event = json.loads(out.splitlines()[0])
        assert (event["cause"], event["response"]) == ("moved", "reported, left alone"), event
        assert event["note"] == "could not put it back: EPERM", event
        assert os.sched_getaffinity(placed.pid) == {second}, "the kernel refused the other user's mask"
        found = record.lookup(placed.pid)
        assert found is not None and found.drift == (), "root's record holds nothing the other user wrote"
        assert os.listdir(top) == [record.file_name(placed.pid, found.start)], "nothing planted beside it"
    finally:
        for child in (placed, keeper):
            if child is not None:
                child.kill()
                child.wait()
        shutil.rmtree(top)


def test_the_textfile_is_never_written_through_another_users_symlink(other: Other) -> None:
    # A textfile folder every user may write (sticky, as /tmp): the other user plants numapin.prom, and the
    # temporary name the writer will use, as links to a file of root's. Root's ps replaces the link; the
    # file it pointed to is untouched.
    top = Path(tempfile.mkdtemp(prefix="numapin-textfile-"))
    try:
        top.chmod(0o755)
        folder = top / "textfile"
        folder.mkdir()
        folder.chmod(0o1777)
        precious = top / "precious"
        precious.write_text("root's own\n")
        as_other(other, 'ln -s "$1" "$2/numapin.prom"', str(precious), str(folder))
        done = subprocess.run([sys.executable, "-m", "numapin", "ps", "--textfile", str(folder)],
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        written = folder / "numapin.prom"
        assert precious.read_text() == "root's own\n"
        assert not written.is_symlink() and written.stat().st_uid == 0 and "numapin_workers" in written.read_text()
    finally:
        shutil.rmtree(top)


def test_the_textfile_goes_only_into_a_folder_no_other_user_can_replace(other: Other) -> None:
    # node_exporter serves what the folder holds as the node's series: a folder another user could rename away
    # and make again, or fill after root wrote it, is refused in one line and nothing is written.
    top = Path(tempfile.mkdtemp(prefix="numapin-textfile-"))
    try:
        top.chmod(0o755)
        theirs = top / "theirs"
        theirs.mkdir(mode=0o755)
        os.chown(theirs, *other)
        inside_theirs = theirs / "textfile"  # root's folder, in one the other user may rename things in
        as_other(other, 'mkdir -m 755 "$1"', str(inside_theirs))
        os.chown(inside_theirs, 0, 0)
        open_to_all = top / "open"  # root's, writable by all without the sticky bit
        open_to_all.mkdir()
        open_to_all.chmod(0o777)
        sticky = top / "sticky"
        sticky.mkdir()
        sticky.chmod(0o1777)
        as_other(other, 'mkdir -m 755 "$1/mine" && ln -s "$1/mine" "$1/link"', str(sticky))  # a link to theirs
        for folder in (inside_theirs, open_to_all, sticky / "link", sticky / "mine"):
            done = subprocess.run([sys.executable, "-m", "numapin", "ps", "--textfile", str(folder)],
                                  capture_output=True, text=True, timeout=60)
            assert done.returncode == 2 and done.stderr.count("\n") == 1, (folder, done.stderr)
            assert "another user could replace" in done.stderr
            assert not (folder / "numapin.prom").exists()
        done = subprocess.run([sys.executable, "-m", "numapin", "ps", "--textfile", str(sticky)],
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 0 and (sticky / "numapin.prom").stat().st_uid == 0, done.stderr
    finally:
        shutil.rmtree(top)
