"""Keeping from outside the process: ``numapin exec --keep`` (any program) and ``numapin keep PID``.

Real programs (``sleep``, a shell), real masks; the pair root puts GPU 0 on ``NODE0``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from live import NODE0, NODE1, cpus, without_inputs
from numapin.pinning import record as records

pytestmark = pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs CPUs 0 and 1")

NUMAPIN = [sys.executable, "-m", "numapin"]


def run(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*NUMAPIN, *args], env=env, capture_output=True, text=True, timeout=60)


@pytest.fixture
def env(pair_root: Path) -> dict[str, str]:
    return {**without_inputs(dict(os.environ)), "NUMAPIN_FSROOT": str(pair_root)}


def _until(condition: object, seconds: float = 20) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():  # type: ignore[operator]
            return True
        time.sleep(0.01)
    return False


def _holding(marker: str, but: int) -> list[int]:
    """Processes whose command line holds ``marker``, other than ``but``."""
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit() and int(name) != but:
            try:
                with open(f"/proc/{name}/cmdline", "rb") as file:
                    if marker.encode() in file.read():
                        found.append(int(name))
            except OSError:
                continue
    return found


@contextmanager
def program(env: dict[str, str], *options: str) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """``sleep`` under ``numapin exec --cpus NODE0 OPTIONS``: the process (its pid is the program's) and the
    sleep's length, unique, to find the watcher by."""
    seconds = f"60.{uuid.uuid4().int % 10**6:06d}"
    proc = subprocess.Popen([*NUMAPIN, "exec", "--cpus", cpus(NODE0), "--memory", "none", *options, "--",
                             "sleep", seconds], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert _until(lambda: _comm(proc.pid) == "sleep"), proc.stderr
        yield proc, seconds
    finally:
        proc.kill()
        proc.communicate()


def _line(stream: object, seconds: float = 60) -> str:
    """The next line of a child's pipe, or fail after ``seconds`` (never hang the suite)."""
    import select

    ready, _, _ = select.select([stream], [], [], seconds)
    assert ready, f"no line within {seconds} s"
    return stream.readline()  # type: ignore[attr-defined, no-any-return]


def _drift(pid: int) -> dict[str, int]:
    found = records.lookup(pid)
    return {} if found is None else dict(found.drift)


def _comm(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/comm") as file:
            return file.read().strip()
    except OSError:
        return None


def test_exec_keep_puts_back_a_moved_program_and_ends_with_it(env: dict[str, str]) -> None:
    with program(env, "--policy", "override", "--keep", "--keep-period", "0.05") as (proc, seconds):
        (watcher,) = _holding(seconds, but=proc.pid)
        children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()
        assert str(watcher) not in children, "the watcher is not the program's child: its wait() never sees it"
        os.sched_setaffinity(proc.pid, NODE1)
        assert _until(lambda: os.sched_getaffinity(proc.pid) == NODE0), "put back (policy override)"
        assert _until(lambda: _drift(proc.pid) == {"moved": 1}), "counted in its record"
        listing = run(["ps", str(proc.pid)], env)
        header, row = listing.stdout.splitlines()[:2]
        assert row[header.index("drift"):].startswith("1 moved "), listing.stdout
        exposition = run(["ps", "--prometheus", str(proc.pid)], env).stdout
        assert f'numapin_worker_drift_total{{pid="{proc.pid}",rank="",gpu="",pci="",cause="moved"}} 1' \
            in exposition
        threads = run(["threads", str(proc.pid)], env).stdout
        assert "drift: 1 moved; last: " in threads and "put back" in threads
        proc.kill()
        proc.wait()
        assert _until(lambda: not _holding(seconds, but=proc.pid), 10), "the watcher ends with its program"
    _, err = proc.communicate()
    assert err.count("keeper:") == 1, err


def test_exec_keep_reports_under_respect_and_hands_on_no_second_keeper(env: dict[str, str]) -> None:
    with program(env, "--keep", "--keep-period", "0.05") as (proc, _):
        os.sched_setaffinity(proc.pid, NODE1)
        assert _until(lambda: _drift(proc.pid) == {"moved": 1})
        assert os.sched_getaffinity(proc.pid) == NODE1, "respect: left where its setter put it"
    shell = run(["exec", "--cpus", cpus(NODE0), "--keep", "--", "sh", "-c", "echo ${NUMAPIN_KEEP-unset}"],
                {**env, "NUMAPIN_KEEP": "1"})
    assert shell.stdout == "unset\n", shell


def test_numapin_keep_watches_a_process_it_did_not_start(env: dict[str, str]) -> None:
    with program(env) as (proc, _):
        keeper = subprocess.Popen([*NUMAPIN, "keep", str(proc.pid), "--period", "0.05", "--json"], env=env,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            assert _line(keeper.stderr) == f"numapin keep: keeping {proc.pid} every 0.05 s\n"
            os.sched_setaffinity(proc.pid, NODE1)  # after that line: drift
            event = json.loads(_line(keeper.stdout))
            assert (event["pid"], event["cause"], event["before"], event["after"]) == \
                (proc.pid, "moved", cpus(NODE0), cpus(NODE1))
            assert event["response"] == "reported, left alone"
            keeper.send_signal(signal.SIGTERM)
            assert keeper.wait(20) == 0
            assert "Traceback" not in keeper.communicate()[1], "ended cleanly"
        finally:
            keeper.kill()
            keeper.communicate()


def test_numapin_keep_says_at_start_what_had_moved_before_it_came(env: dict[str, str]) -> None:
    with program(env) as (proc, _):
        os.sched_setaffinity(proc.pid, NODE1)  # moved before any keeper looks
        done = run(["keep", str(proc.pid), "--period", "0.05", "--looks", "2"], env)
    assert done.returncode == 0, done.stderr
    first = done.stderr.splitlines()[0]
    assert first.startswith(f"numapin keep: {proc.pid}: 1 of 1 threads were already off its placement (CPUs "
                            f"{cpus(NODE0)})") and "only what moves from now on is drift" in first, done.stderr


def test_numapin_keep_ends_when_its_processes_do(env: dict[str, str]) -> None:
    with program(env) as (proc, _):
        keeper = subprocess.Popen([*NUMAPIN, "keep", str(proc.pid), "--period", "0.05"], env=env,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert _line(keeper.stderr).startswith("numapin keep: keeping ")
        proc.kill()
        proc.wait()
        out, err = keeper.communicate(timeout=60)
    assert keeper.returncode == 0 and (out, err) == ("", "numapin keep: 0 drifts seen\n"), (out, err)


@pytest.mark.parametrize(("args", "says"), [
    (["keep", "999999999"], "no process 999999999"),
    (["keep", "1", "--period", "0"], "--period"),
    (["keep", "1", "--looks", "-1"], "--looks"),
    (["exec", "--keep-period", "1", "--", "true"], "--keep-period is the period of --keep"),
])
def test_keep_refuses_in_one_line(env: dict[str, str], args: list[str], says: str) -> None:
    result = run(args, env)
    assert result.returncode == 2 and says in result.stderr and len(result.stderr.splitlines()) == 1, result


def test_keep_refuses_a_process_numapin_did_not_place(env: dict[str, str]) -> None:
    with subprocess.Popen(["sleep", "30"]) as sleeper:
        try:
            result = run(["keep", str(sleeper.pid)], env)
        finally:
            sleeper.kill()
    assert result.returncode == 2 and "numapin placed nothing there" in result.stderr, result


def test_a_keeper_never_acts_on_a_process_that_is_not_the_one_placed(env: dict[str, str]) -> None:
    # A process id given to another process since the last look: the record's start time is not its own.
    from numapin.base.frozen import replace
    from numapin.facts.machine import cached
    from numapin.pinning.keeper import Keeper

    with program(env, "--policy", "override") as (proc, _):  # override: a keeper would put the thread back
        written = records.lookup(proc.pid)
        assert written is not None
        facts = cached(env["NUMAPIN_FSROOT"], env)
        keeper = Keeper(proc.pid, replace(written, start=written.start + 1), facts)
        os.sched_setaffinity(proc.pid, NODE1)
        with pytest.raises(ProcessLookupError):
            keeper.check()
        assert os.sched_getaffinity(proc.pid) == NODE1, "nothing done to a process that is not the one placed"


@pytest.mark.parametrize("keeper", ["exec --keep", "numapin keep"])
def test_a_thread_narrowed_to_a_slice_inside_the_placement_stays_narrowed(env: dict[str, str], keeper: str) -> None:
    # TensorRT-LLM's executor loop narrows itself to a slice of its GPU's node: under policy override, the keeper
    # neither widens it back nor calls it moved; the record counts it narrowed, and the process is judged ok.
    from live import BASELINE

    placed = cpus(set(BASELINE))
    slice_ = {min(BASELINE)}
    keep = ["--keep", "--keep-period", "0.05"] if keeper == "exec --keep" else []
    proc = subprocess.Popen([*NUMAPIN, "exec", "--cpus", placed, "--memory", "none", "--policy", "override", *keep,
                             "--", "sleep", "60"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    outside = None
    try:
        assert _until(lambda: _comm(proc.pid) == "sleep"), proc.stderr
        if keeper == "numapin keep":
            outside = subprocess.Popen([*NUMAPIN, "keep", str(proc.pid), "--period", "0.05", "--json"], env=env,
                                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            assert "keeping" in _line(outside.stderr)
        os.sched_setaffinity(proc.pid, slice_)
        assert _until(lambda: _drift(proc.pid) == {"narrowed": 1}), _drift(proc.pid)
        time.sleep(0.3)  # several looks more: none of them widens it back
        assert os.sched_getaffinity(proc.pid) == slice_, "nothing put back"
        assert _drift(proc.pid) == {"narrowed": 1}, "counted once, as narrowed: never as moved"
        check = run(["threads", str(proc.pid), "--check"], env)
        assert check.returncode == 0 and "narrowed" in check.stdout, check.stdout + check.stderr
        if outside is not None:
            event = json.loads(_line(outside.stdout))
            assert (event["cause"], event["response"]) == ("narrowed", "left narrowed: a slice inside the placement")
    finally:
        for child in (proc, outside):
            if child is not None:
                child.kill()
                child.communicate()
