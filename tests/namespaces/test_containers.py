"""numapin inside containers (their own PID and mount namespaces, a private /run), seen from the host: each
worker listed under its host PID as what placed it, records forged by another container believed for nobody,
a seccomp filter's refusal named, a pod's cgroup read."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from container import NUMAPIN, Container, container, environment

import kube
import live
from child import in_child
from numapin.base.environment import AUTOPIN, AUTOPIN_OPTIONS, FSROOT
from other_user import Other
from reads import counting

CPU = min(live.BASELINE)
OTHER = max(live.BASELINE)
#: A worker: a thread of its own, one line saying it is ready (with its id inside), then it waits.
WORKER = ("import os, threading, time\n"
          "threading.Thread(target=time.sleep, args=(600,), daemon=True).start()\n"
          "print('ready', os.getpid(), flush=True)\n"
          "time.sleep(600)\n")


def _pinning() -> str:
    """A worker that places itself (``numapin.pin()``): nothing but its record says so, no marker in its
    environment."""
    return shlex.join([sys.executable, "-c", f"import numapin\nnumapin.pin(cpus=[{CPU}])\n{WORKER}"])


def _exec(*options: str) -> str:
    return shlex.join([*NUMAPIN, "exec", "--cpus", str(CPU), *options, "--", sys.executable, "-c", WORKER])


def _ready(box: Container) -> tuple[int, int]:
    """The worker's id inside and on the host, once it says it is ready."""
    words = box.line().split()
    assert words[0] == "ready", words
    inner = int(words[1])
    return inner, box.host_pid(inner)


def _ps(*args: str) -> dict[str, object]:
    done = subprocess.run([*NUMAPIN, "ps", *args, "--json"], env=environment(), capture_output=True, text=True,
                          timeout=120)
    assert done.returncode in (0, 1), done.stderr
    return json.loads(done.stdout)


def _row(pid: int, *args: str) -> dict[str, object]:
    rows = [w for w in _ps(*args)["workers"] if w["pid"] == pid]  # type: ignore[index,union-attr]
    assert len(rows) == 1, f"process {pid} listed {len(rows)} times"
    return rows[0]


def test_a_worker_placed_by_exec_inside_is_listed_by_the_host_under_its_host_pid() -> None:
    with container(_exec()) as box:
        inner, pid = _ready(box)
        assert inner != pid  # the container's own numbering
        row = _row(pid)
        assert (row["placed_by"], row["verdict"], row["expected"]) == ("exec", "ok", str(CPU)), row
        threads = subprocess.run([*NUMAPIN, "threads", str(pid), "--json"], env=environment(), capture_output=True,
                                 text=True, timeout=60)
        assert json.loads(threads.stdout)["placed_by"] == "exec", threads.stdout
        series = subprocess.run([*NUMAPIN, "ps", "--prometheus"], env=environment(), capture_output=True, text=True,
                                timeout=60).stdout
        assert f'pid="{pid}"' in series and f'pid="{inner}"' not in series, series


def _forge(box: Container, named: int, start: int, ns: int, model: dict[str, object]) -> None:
    """A record in the container's own folder that names process ``named`` (started at ``start``, of PID
    namespace ``ns``) as placed by exec."""
    folder = box.root("/run/numapin")
    folder.mkdir(mode=0o755, exist_ok=True)
    (folder / f"{named}-{start}-{ns}.json").write_text(json.dumps({**model, "pid": named, "start": start}))


def _start(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[19])


def test_records_forged_by_another_container_place_nobody() -> None:
    host = subprocess.Popen([sys.executable, "-c", WORKER], stdout=subprocess.PIPE, text=True, env=environment())
    try:
        assert host.stdout is not None and host.stdout.readline().startswith("ready")
        with container(_pinning()) as first, container("echo up; exec sleep 600") as second:
            _, pid = _ready(first)
            assert second.line() == "up"
            model = json.loads(next(first.root("/run/numapin").glob("*.json")).read_text())
            host_ns = os.stat("/proc/self/ns/pid").st_ino
            one = first.host_pid(1)
            # The host's process, by its host id and the host's namespace; the first container's PID 1, by its id
            # and namespace there; the first container's worker too, by its host id.
            _forge(second, host.pid, _start(host.pid), host_ns, model)
            _forge(second, 1, _start(one), first.namespace, model)
            _forge(second, pid, _start(pid), host_ns, model)
            _forge(second, 1, _start(second.host_pid(1)), first.namespace, model)
            for forged in (host.pid, one, second.host_pid(1)):
                assert _row(forged, str(forged))["placed_by"] == "nobody", forged
            assert _row(pid)["placed_by"] == "pin"  # its own record still counts, once
            listed = [w["pid"] for w in _ps()["workers"]]  # type: ignore[index,union-attr]
            assert listed.count(pid) == 1 and not {host.pid, one} & set(listed), listed
    finally:
        host.kill()
        host.wait()


def test_a_link_in_the_containers_root_is_not_followed_out_of_it() -> None:
    # The container's folder becomes a link to /run/elsewhere: resolved against the host's root (as a plain path
    # through /proc/PID/root would be), it lands in a host folder holding the same record. Neither is read.
    elsewhere = f"/run/numapin-elsewhere-{uuid.uuid4().hex[:8]}"
    with container(_pinning()) as box:
        _inner, pid = _ready(box)
        assert _row(pid)["placed_by"] == "pin"
        record = next(box.root("/run/numapin").glob("*.json"))
        Path(elsewhere).mkdir(mode=0o755)
        try:
            (Path(elsewhere) / record.name).write_bytes(record.read_bytes())
            box.root("/run/numapin").rename(box.root(elsewhere))
            box.root("/run/numapin").symlink_to(elsewhere)
            assert _row(pid, str(pid))["placed_by"] != "pin"  # its mask is someone else's now, as far as ps knows
        finally:
            for leftover in Path(elsewhere).iterdir():
                leftover.unlink()
            Path(elsewhere).rmdir()


def test_the_start_up_hook_inside_places_the_worker_the_host_lists(pair_root: Path) -> None:
    script = shlex.join([sys.executable, "-c", "from numapin import startup\nstartup.at_start()\n" + WORKER])
    env = environment(**{AUTOPIN: "1", AUTOPIN_OPTIONS["memory"]: "none", FSROOT: str(pair_root),
                         "CUDA_VISIBLE_DEVICES": "1"})
    with container(script, env=env) as box:
        _, pid = _ready(box)
        row = _row(pid)
        assert (row["placed_by"], row["verdict"], row["gpu"]) == ("autopin", "ok", 0), row
        assert row["expected"] == live.cpus(live.NODE1)


@pytest.mark.skipif(CPU == OTHER, reason="needs two CPUs: one to place on, one to move a thread to")
def test_drift_the_keeper_inside_counts_is_seen_from_the_host() -> None:
    with container(_exec("--keep", "--keep-period", "0.1", "--policy", "override")) as box:
        _inner, pid = _ready(box)
        thread = max(int(t) for t in os.listdir(f"/proc/{pid}/task"))
        os.sched_setaffinity(thread, {OTHER})
        assert live.until(lambda: _row(pid)["drift"]), "no drift seen from the host"
        row = _row(pid)
        assert row["placed_by"] == "exec" and sum(row["drift"].values()) >= 1, row  # type: ignore[union-attr]
        assert live.until(lambda: os.sched_getaffinity(thread) == {CPU}), "the keeper did not put it back"


@pytest.mark.skipif(CPU == OTHER, reason="needs two CPUs: one to place on, one to move a thread to")
def test_the_hosts_keeper_keeps_a_containers_worker_in_its_own_record() -> None:
    with container(_exec("--policy", "override")) as box:
        inner, pid = _ready(box)
        keeper = subprocess.Popen([*NUMAPIN, "keep", str(pid), "--period", "0.1", "--json"], env=environment(),
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            assert keeper.stderr is not None and "keeping" in keeper.stderr.readline()
            thread = max(int(t) for t in os.listdir(f"/proc/{pid}/task"))
            os.sched_setaffinity(thread, {OTHER})
            assert live.until(lambda: os.sched_getaffinity(thread) == {CPU}), "the host's keeper did not put it back"
            assert live.until(lambda: sum(_row(pid)["drift"].values()) >= 1)  # type: ignore[union-attr]
        finally:
            keeper.kill()
            keeper.wait()
        files = list(box.root("/run/numapin").glob("*.json"))
        assert [f.name.split("-")[0] for f in files] == [str(inner)], files  # its own name, its own id inside
        written = json.loads(files[0].read_text())
        assert written["pid"] == inner and written["drift"], written


def _reads_of(pid: int) -> dict[str, dict[str, int]]:
    from numapin.tools.doctor import diagnose
    from numapin.tools.threads_report import threads_report

    counts = counting()
    diagnose(pid=pid)
    doctor = {what: n for (p, what), n in counts.items() if p == pid}
    counts.clear()
    threads_report(pid)
    return {"doctor": doctor, "threads": {what: n for (p, what), n in counts.items() if p == pid}}


def test_the_host_reads_each_file_of_a_containers_worker_once() -> None:
    # Its record and its declarations are each looked for in its own root, under its own id and user there: both
    # from the one view of it, so its status, environment and user mapping are read once, not once per question.
    with container(_pinning()) as box:
        _, pid = _ready(box)
        got = in_child(lambda: _reads_of(pid))
    for tool in got.values():
        assert {"read uid_map", "read status", "read environ", "list task"} <= set(tool), tool  # counted: can fail
        # Its root is opened for each folder looked into, by design: each reached and checked at its moment of use.
        assert {what: n for what, n in tool.items() if n > 1 and what != "read root"} == {}, tool


def test_a_seccomp_filter_inside_keeps_the_cpus_and_the_host_doctor_names_it() -> None:
    with container(_exec("--memory", "bind") + " 2>/dev/null", seccomp=True) as box:
        _, pid = _ready(box)
        assert os.sched_getaffinity(pid) == {CPU}
        doctor = subprocess.run([*NUMAPIN, "doctor", "--pid", str(pid), "--json"], env=environment(),
                                capture_output=True, text=True, timeout=60)
        found = [f for f in json.loads(doctor.stdout)["findings"] if f["id"] == "memory-policy-refused"]
        assert len(found) == 1 and "seccomp" in found[0]["sees"], doctor.stdout


def test_a_container_in_a_pods_cgroup_is_named_by_its_pod_from_the_host() -> None:
    top = kube.cgroups_or_skip(cpuset=False)
    layout = kube.layouts()[0]
    with kube.placed_in(top, [layout.path]) as groups, container(_exec(), cgroup=groups[layout.path]) as box:
        _, pid = _ready(box)
        row = _row(pid)
        assert row["placed_by"] == "exec" and row["pod"]["uid"] == layout.uid, row  # type: ignore[index]
        assert row["pod"]["container_id"] == layout.container_id  # type: ignore[index]


def test_another_user_sees_what_the_kernel_lets_it_and_counts_the_rest(other: Other) -> None:
    # Root's container: its namespaces, root and open files are root's to look into. The other user's survey
    # lists nothing of it, and counts it among the processes it could not look into. (In a child that drops to
    # the other user once every module the survey imports is loaded: this Python lies under root's home.)
    from numapin.tools.ps import survey

    with container(_exec()) as box:
        _, pid = _ready(box)

        def as_other() -> tuple[list[int], int]:
            survey(memory=False, pod_resources=None)  # as root first: whatever it imports, imported
            os.setgroups([])
            os.setgid(other.gid)
            os.setuid(other.uid)
            seen = survey(memory=False, pod_resources=None)
            return [w.pid for w in seen.workers], seen.unseen

        listed, unseen = in_child(as_other)
        assert pid not in listed and unseen >= 1, (listed, unseen)
        assert _row(pid)["placed_by"] == "exec"  # root's ps, the same moment, sees it


def _model_record(tmp_path: Path) -> dict[str, object]:
    """A record numapin exec really wrote for a process placed on CPU, policy override (its fields, to name another
    process with)."""
    env = environment(NUMAPIN_RUNTIME_DIR=str(tmp_path / "model"))
    proc = subprocess.Popen([*NUMAPIN, "exec", "--cpus", str(CPU), "--memory", "none", "--policy", "override", "--",
                             sys.executable, "-c", WORKER], stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert proc.stdout is not None and proc.stdout.readline().startswith("ready")
        (written,) = (tmp_path / "model").glob("*.json")
        return json.loads(written.read_text())  # type: ignore[no-any-return]
    finally:
        proc.kill()
        proc.wait()


#: How the user's process keeps its record, and what it does once root keeps it: (the script's set-up, where its
#: record lies, the step). In a user and mount namespace of its own (``unshare -Urm``: no privilege needed), it
#: lays a root-owned folder of the host ($1) over its folder; in the host's namespaces, it removes its record.
_UNDER_THE_KEEPER = {
    "a root-owned folder bound over the user's own": (
        "exec unshare -Urm sh -c 'mount -t tmpfs tmpfs /run && mkdir -m 755 /run/numapin && F=/run/numapin && {}' "
        'sh "$1"', 'mount --bind "$1" "$F"'),
    "the record removed": ('F=/tmp/numapin-$(id -u) && mkdir -p -m 755 "$F" && {}', 'rm "$F/$name"'),
}


@pytest.mark.skipif(CPU == OTHER, reason="needs two CPUs: one to place on, one to move a thread to")
@pytest.mark.parametrize("then", list(_UNDER_THE_KEEPER))
def test_roots_keeper_writes_only_where_this_look_finds_the_users_record(then: str, other: Other,
                                                                          tmp_path: Path) -> None:
    """A user's process keeps its record in its own folder; root keeps it. The user then changes what that folder
    is (a mount) or removes the record, and its thread is moved: the keeper puts the thread back and writes
    nothing, neither in the host's folder the mount shows nor a record that is gone."""
    from numapin.facts.machine import cached
    from numapin.pinning import record
    from numapin.tools.keep import keeper_of

    model = _model_record(tmp_path)
    host = Path(tmp_path.parent / f"host-records-{uuid.uuid4().hex[:8]}")  # a folder of root's, on the host
    host.mkdir(mode=0o755)
    os.chmod(host, 0o755)
    for folder in (tmp_path.parent, tmp_path):  # the user reaches it to bind it (and nothing more)
        os.chmod(folder, os.stat(folder).st_mode | 0o011)
    setup, step = _UNDER_THE_KEEPER[then]
    script = setup.format('echo "$$" && read name && read body && printf "%s" "$body" > "$F/$name" && echo written '
                          f'&& read go && {step} && echo done && exec sleep 600')
    proc = other.start(script, str(host), env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"})
    try:
        assert proc.stdout is not None
        pid = int(proc.stdout.readline())
        start, ns = _start(pid), os.stat("/proc/self/ns/pid").st_ino
        name = f"{pid}-{start}-{ns}.json"
        os.sched_setaffinity(pid, {CPU})  # placed, as the record says
        _say(proc, name, json.dumps({**model, "pid": pid, "start": start}))
        assert proc.stdout.readline().strip() == "written"
        keeper = keeper_of(pid, cached(None, {}))  # root's keeper finds the record in the user's own folder
        found = record.locate(pid)
        assert found is not None
        folder = Path(f"/proc/{pid}/root{found[1].folder}")
        _say(proc, "go")
        assert proc.stdout.readline().strip() == "done", proc.stderr.read() if proc.stderr else ""
        os.sched_setaffinity(pid, {OTHER})  # a thread moved: the keeper's to put back
        events: list[object] = []
        # From outside, a mask counts as moved once it has held a moment (the process's own pin settles first).
        assert live.until(lambda: bool(events.extend(keeper.check()) or events)), "the keeper saw no drift"
        assert os.sched_getaffinity(pid) == {CPU}, events
        assert list(host.iterdir()) == [] and name not in os.listdir(folder), (list(host.iterdir()),
                                                                                os.listdir(folder))
    finally:
        proc.kill()
        proc.wait()
        for leftover in host.iterdir():
            leftover.unlink()
        host.rmdir()
        other.sh('rm -rf "/tmp/numapin-$(id -u)"')


def _say(proc: subprocess.Popen[str], *lines: str) -> None:
    assert proc.stdin is not None
    proc.stdin.write("".join(f"{line}\n" for line in lines))
    proc.stdin.flush()


def _deep(top: Path, depth: int) -> str:
    """``depth`` folders, one in the next, made under ``top`` (a container's /run, reached from the host) by
    descriptor (a path that long is past what one system call takes); the deepest's path inside the container."""
    fd = os.open(top, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for _ in range(depth):
            os.mkdir("d", dir_fd=fd)
            step = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = step
    finally:
        os.close(fd)
    return "/run" + "/d" * depth


def test_a_container_that_makes_its_processes_costly_to_look_into_blinds_no_scan(tmp_path: Path) -> None:
    """Fifty processes in a container, none a worker, each naming as its records folder one 60,000 folders deep
    in the container's own tmpfs (any tenant may set a variable; walked, they cost a scan seconds): root's ps, an
    exporter's scrape within a bound of a few seconds and a keeper of a worker beside them do their work, and write
    nothing there."""
    from numapin.tools.exporter import Exporter

    script = ('while [ ! -e /run/go ]; do sleep 0.05; done; D=$(cat /run/go); '
              'for i in $(seq 50); do NUMAPIN_RUNTIME_DIR="$D/x$i" sleep 600 & done; echo up; wait')
    with container(script) as box, container(_exec("--policy", "override")) as placed:
        path = _deep(box.root("/run"), 60_000)
        box.root("/run/go").write_text(path)
        assert box.line() == "up"
        _inner, pid = _ready(placed)
        scrape = Exporter(timeout=4).scrape()
        assert "\nnumapin_up 1\n" in scrape, scrape[-600:]
        assert f'pid="{pid}"' in scrape  # the worker beside them, found and judged
        listed = subprocess.run([*NUMAPIN, "ps", "--json", "--all"], env=environment(), capture_output=True, text=True,
                                timeout=120)
        assert listed.returncode in (0, 1) and "Traceback" not in listed.stderr, listed.stderr
        assert pid in [w["pid"] for w in json.loads(listed.stdout)["workers"]]
        keeper = subprocess.run([*NUMAPIN, "keep", str(pid), "--period", "0.05", "--looks", "3"], env=environment(),
                                capture_output=True, text=True, timeout=120)
        assert keeper.returncode == 0, keeper.stderr
        assert sorted(os.listdir(box.root("/run"))) == ["d", "go"]
