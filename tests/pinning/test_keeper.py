"""The keeper: drift noticed, said and answered by the policy, with real threads and real syscalls.

Each test runs in a forked child (``in_child``): no mask leaks into pytest. The machine is
``pair_root`` (GPU 0 on ``NODE0``, GPU 1 on ``NODE1``; on a 2-CPU host, CPU 0 and CPU 1). Most tests
drive a :class:`Keeper` look by look, so that what it saw is certain; the daemon thread is tested for
what is its own (it runs, never holds the process, is not inherited, stops).
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

import numapin
from conftest import in_child
from live import ALL, NODE0, NODE1, masks
from numapin.base.errors import UsageError
from numapin.cpuset import CpuSet
from numapin.pinning import record as records
from numapin.pinning.decision import ExternalMaskPolicy
from numapin.pinning.keeper import (
    Drift,
    DriftCause,
    Keeper,
    Response,
    environ_period,
    keeping,
    respond,
    stop_keeping,
    this_process,
)

pytestmark = pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs CPUs 0 and 1")


def test_the_rule_is_one_table_of_cause_and_policy() -> None:
    expected = {
        (DriftCause.MOVED, ExternalMaskPolicy.RESPECT): Response.REPORTED,
        (DriftCause.MOVED, ExternalMaskPolicy.OVERRIDE): Response.RESTORED,
        (DriftCause.MOVED, ExternalMaskPolicy.RESET): Response.REPORTED,
        (DriftCause.INHERITED, ExternalMaskPolicy.RESPECT): Response.REPORTED,
        (DriftCause.INHERITED, ExternalMaskPolicy.OVERRIDE): Response.RESTORED,
        (DriftCause.INHERITED, ExternalMaskPolicy.RESET): Response.REPORTED,
        (DriftCause.MEMS, ExternalMaskPolicy.RESPECT): Response.REPORTED,
        (DriftCause.MEMS, ExternalMaskPolicy.OVERRIDE): Response.REPORTED,
        (DriftCause.CPUSET, ExternalMaskPolicy.RESPECT): Response.REPLACED,
        (DriftCause.CPUSET, ExternalMaskPolicy.OVERRIDE): Response.REPLACED,
    }
    assert {key: respond(*key) for key in expected} == expected


class Thread:
    """A thread that runs what it is asked, on itself (so its mask can be set as another library would)."""

    def __init__(self) -> None:
        self.jobs: list[Callable[[], object]] = []
        self.ready = threading.Event()
        self.done = threading.Event()
        self.tid = 0
        self.started = threading.Event()
        threading.Thread(target=self._run, daemon=True).start()
        self.started.wait()

    def _run(self) -> None:
        self.tid = threading.get_native_id()
        self.started.set()
        while True:  # a daemon: it ends with its process
            self.ready.wait()
            self.ready.clear()
            self.jobs.pop()()
            self.done.set()

    def do(self, job: Callable[[], object]) -> None:
        self.done.clear()
        self.jobs.append(job)
        self.ready.set()
        assert self.done.wait(10)

    def spawn(self) -> int:
        """A thread started by this one (it inherits this one's mask); its id."""
        found: list[int] = []
        hold = threading.Event()

        def child() -> None:
            found.append(threading.get_native_id())
            hold.wait(30)

        self.do(lambda: threading.Thread(target=child, daemon=True).start())
        while not found:
            time.sleep(0.001)
        return found[0]


def _kept(policy: str) -> tuple[Keeper, Thread]:
    worker = Thread()
    result = numapin.pin(0, policy=policy)
    assert result.mask == CpuSet(NODE0)
    keeper = this_process()
    assert keeper is not None
    return keeper, worker


def test_a_mask_someone_else_set_is_reported_and_left_under_respect(pair_root: Path) -> None:
    def run() -> None:
        keeper, worker = _kept("respect")
        assert keeper.check() == []  # nothing moved yet: nothing said
        worker.do(lambda: os.sched_setaffinity(0, NODE1))
        (event,) = keeper.check()
        assert (event.cause, event.response, event.tid) == (DriftCause.MOVED, Response.REPORTED, worker.tid)
        assert (event.before, event.after) == (CpuSet(NODE0), CpuSet(NODE1))
        assert os.sched_getaffinity(worker.tid) == NODE1, "respect: left where its setter put it"
        assert keeper.check() == [], "said once: the same mask is no new drift"
        written = records.lookup(os.getpid())
        assert written is not None and written.drift == (("moved", 1),) and written.last_drift == str(event)

    in_child(run)


def test_a_mask_someone_else_set_is_put_back_under_override(pair_root: Path) -> None:
    def run() -> None:
        keeper, worker = _kept("override")
        worker.do(lambda: os.sched_setaffinity(0, NODE1))
        (event,) = keeper.check()
        assert (event.cause, event.response) == (DriftCause.MOVED, Response.RESTORED)
        assert os.sched_getaffinity(worker.tid) == NODE0
        assert keeper.check() == [], "put back: nothing left to say"

    in_child(run)


@pytest.mark.parametrize(("policy", "where"), [("respect", "moved"), ("override", "placed")])
def test_a_thread_born_from_a_moved_thread_follows_its_parents_rule(pair_root: Path, policy: str,
                                                                     where: str) -> None:
    def run() -> None:
        keeper, worker = _kept(policy)
        worker.do(lambda: os.sched_setaffinity(0, NODE1))
        child = worker.spawn()  # born between two looks, on its parent's new mask
        moved, born = sorted(keeper.check(), key=lambda e: e.cause is DriftCause.INHERITED)
        assert (moved.cause, moved.tid) == (DriftCause.MOVED, worker.tid)
        assert (born.cause, born.tid, born.after) == (DriftCause.INHERITED, child, CpuSet(NODE1))
        assert born.response is moved.response is (Response.REPORTED if where == "moved" else Response.RESTORED)
        assert os.sched_getaffinity(child) == os.sched_getaffinity(worker.tid) == \
            (NODE1 if where == "moved" else NODE0)

    in_child(run)


def test_threads_born_on_the_placement_and_masks_put_back_by_others_are_no_drift(pair_root: Path) -> None:
    def run() -> None:
        keeper, worker = _kept("respect")
        worker.spawn()
        worker.do(lambda: os.sched_setaffinity(0, NODE1))
        worker.do(lambda: os.sched_setaffinity(0, NODE0))  # back before the next look: nothing happened
        assert keeper.check() == []
        numapin.pin_thread([sorted(NODE1)[0]])  # a thread numapin placed on purpose is numapin's
        assert keeper.check() == []

    in_child(run)


def test_a_pin_the_process_makes_later_is_followed_not_undone(pair_root: Path) -> None:
    def run() -> None:
        keeper, _ = _kept("override")
        numapin.pin(1)  # the process moves itself to GPU 1: a new placement, no drift
        assert keeper.check() == []
        assert keeper.record.target == CpuSet(NODE1)
        assert all(mask == NODE1 for mask in masks().values())

    in_child(run)


def test_the_daemon_keeps_and_stops(pair_root: Path) -> None:
    def run() -> dict[str, object]:
        worker = Thread()
        numapin.pin(0, policy="override", keep=0.01)
        keeper = keeping()
        assert keeper is not None
        names = [t.name for t in threading.enumerate()]
        assert "numapin-keeper" in names
        for moves in range(1, 4):
            worker.do(lambda: os.sched_setaffinity(0, NODE1))
            deadline = time.monotonic() + 60
            while keeper.counts.get(DriftCause.MOVED) != moves and time.monotonic() < deadline:
                time.sleep(0.005)
            assert os.sched_getaffinity(worker.tid) == NODE0, "put back within a few periods"
        counts = dict(keeper.counts)
        stop_keeping()
        assert keeping() is None and keeper.stopped
        worker.do(lambda: os.sched_setaffinity(0, NODE1))
        time.sleep(0.1)  # ten periods
        assert os.sched_getaffinity(worker.tid) == NODE1, "a stopped keeper answers nothing"
        return {"counts": {c.value: n for c, n in counts.items()}}

    assert in_child(run)["counts"] == {"moved": 3}


def test_one_warning_per_kind_of_drift(pair_root: Path) -> None:
    def run() -> list[str]:
        import logging

        said: list[str] = []

        class Catch(logging.Handler):
            def emit(self, record: logging.LogRecord) -> None:
                said.append(record.getMessage())

        logging.getLogger("numapin").addHandler(Catch(logging.WARNING))
        keeper, worker = _kept("override")
        for _ in range(5):
            worker.do(lambda: os.sched_setaffinity(0, NODE1))
            keeper.check()
        worker.spawn()
        worker.do(lambda: os.sched_setaffinity(0, NODE1))
        worker.spawn()
        keeper.check()
        return said

    import re

    said = in_child(run)
    kinds = [m.group(1) for line in said if (m := re.match(r"keeper: process \d+: \S+ (\w+): ", line))]
    assert kinds == ["moved", "inherited"], said


def test_a_forked_child_keeps_nothing_of_its_parents_keeper(pair_root: Path) -> None:
    def run() -> None:
        numapin.pin(0, keep=0.05)
        assert keeping() is not None
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(read)
            ok = keeping() is None and "numapin-keeper" not in [t.name for t in threading.enumerate()]
            numapin.pin(1, keep=0.05)  # its own placement, its own keeper
            ok = ok and keeping() is not None and keeping().pid == os.getpid()  # type: ignore[union-attr]
            os.write(write, b"1" if ok else b"0")
            os._exit(0)
        os.close(write)
        assert os.read(read, 1) == b"1", "the child starts with no keeper, and keeps itself when it pins"
        os.waitpid(pid, 0)
        assert keeping() is not None, "the parent's keeper runs on"

    in_child(run)


def test_a_lease_stops_the_keeper_it_started(pair_root: Path) -> None:
    def run() -> None:
        with numapin.pinned(0, keep=0.05):
            assert keeping() is not None
        assert keeping() is None

    in_child(run)


def test_the_keeper_never_keeps_a_process_from_exiting(pair_root: Path) -> None:
    code = "import numapin, sys; numapin.pin(0, keep=0.01); sys.exit(7)"
    result = subprocess.run([sys.executable, "-c", code], timeout=60, capture_output=True, text=True)
    assert result.returncode == 7, result.stderr


@pytest.mark.parametrize("keep", [0, -1, "soon", float("nan"), float("inf")])
def test_a_bad_period_is_refused_before_anything_changes(pair_root: Path, keep: object) -> None:
    def run() -> None:
        before = masks()
        with pytest.raises(UsageError, match="keep"):
            numapin.pin(0, keep=keep)  # type: ignore[arg-type]
        assert masks() == before and keeping() is None

    in_child(run)


@pytest.mark.parametrize(("text", "period"), [("", None), ("0", None), ("off", None), ("1", 1.0), ("yes", 1.0),
                                               ("0.25", 0.25), ("2", 2.0)])
def test_numapin_keep_reads_on_off_and_periods(text: str, period: float | None) -> None:
    assert environ_period({"NUMAPIN_KEEP": text}, "NUMAPIN_KEEP") == period


def test_numapin_keep_refuses_what_is_no_period() -> None:
    with pytest.raises(UsageError, match="NUMAPIN_KEEP='-3': expected 1"):
        environ_period({"NUMAPIN_KEEP": "-3"}, "NUMAPIN_KEEP")


def test_the_record_carries_the_drift_and_refuses_a_damaged_one() -> None:
    from numapin.placement.modes import Placement, PlacementMode

    placement = Placement(CpuSet([0]), CpuSet([0]), "explicit CPUs 0", PlacementMode.EXPLICIT)
    kept = records.Record(1, 2, "pin", CpuSet([0]), CpuSet([0]), placement, drift=(("moved", 2), ("cpuset", 1)),
                          last_drift="12:00:00 cpuset: ...")
    again = records.Record.from_dict(kept.as_dict())
    assert again == kept and records.drift_words(again.drift) == "3 cpuset"
    assert records.drift_words(()) == "-"
    assert "drift" not in records.Record(1, 2, "pin", CpuSet([0]), CpuSet([0]), placement).as_dict()
    for damaged in ({"moved": -1}, {"moved": "2"}, {"moved": True}, ["moved"]):
        assert records.Record.from_dict({**kept.as_dict(), "drift": damaged}) is None, damaged
    # Its words are another process's writing: read as text a terminal shows, never acts on (nor cannot write).
    escaped = records.Record.from_dict({**kept.as_dict(), "last_drift": "\ud800\x1b[2J\nx"})
    assert escaped is not None and escaped.last_drift == "\\ud800\\x1b[2J\\nx"
    # A cause outside the closed set is counted as unknown (a label of the node's metrics).
    odd = records.Record.from_dict({**kept.as_dict(), "drift": {"cpu\nset": 2, "moved": 1, "x": 1}})
    assert odd is not None and odd.drift == (("moved", 1), ("unknown", 3))
    # As its file gives it back (keys sorted: the pools in another order), a record is still the same placement.
    pooled = records.Record(1, 2, "exec", CpuSet([0]), CpuSet([0]), placement,
                            pools=(("OMP_NUM_THREADS", "1"), ("MKL_NUM_THREADS", "1")))
    import json

    from numapin.base.text import json_text

    read_back = records.Record.from_dict(json.loads(json_text(records.stamp(pooled).as_dict())))
    assert read_back is not None and read_back.pools != pooled.pools and read_back.placed_alike(pooled)
    assert not read_back.placed_alike(records.Record(1, 2, "exec", CpuSet([1]), CpuSet([1]), placement))


def test_drift_reads_as_one_line() -> None:
    moved = Drift(0.0, DriftCause.MOVED, Response.REPORTED, CpuSet([0]), CpuSet([1]), 42, "loader", "why")
    assert "thread 42 (loader) changed 0 -> 1: reported, left alone (why)" in str(moved)
    born = Drift(0.0, DriftCause.INHERITED, Response.RESTORED, None, CpuSet([1]), 43)
    assert str(born).endswith("inherited: new thread 43 on 1: put back")
    cpuset = Drift(0.0, DriftCause.CPUSET, Response.LEFT, CpuSet([0, 1]), CpuSet([1]))
    assert "cpuset: cgroup's allowed CPUs changed 0-1 -> 1: left to the cgroup" in str(cpuset)
    assert moved.as_dict()["before"] == "0" and born.as_dict()["before"] is None


def test_a_thread_moved_again_as_it_is_put_back_is_drift_again(pair_root: Path) -> None:
    # A library that re-pins its thread right after the keeper put it back (the real kernel, a real thread; the
    # race made certain by doing the library's move inside the keeper's own set_affinity call).
    from numapin.kernel.affinity import LinuxThreads

    class Racing(LinuxThreads):
        def __init__(self) -> None:
            super().__init__()
            self.raced = False

        def set_affinity(self, tid: int, cpus: CpuSet) -> None:
            super().set_affinity(tid, cpus)
            if not self.raced:
                self.raced = True
                os.sched_setaffinity(tid, NODE1)

    def run() -> None:
        worker = Thread()
        numapin.pin(0, policy="override")
        written = records.lookup(os.getpid())
        assert written is not None
        from numapin.facts.machine import cached

        keeper = Keeper(os.getpid(), written, cached(None, os.environ), kernel=Racing())
        worker.do(lambda: os.sched_setaffinity(0, NODE1))
        (first,) = keeper.check()
        assert first.response is Response.RESTORED and os.sched_getaffinity(worker.tid) == NODE1, "raced"
        (again,) = keeper.check()
        assert (again.cause, again.before, again.after) == (DriftCause.MOVED, CpuSet(NODE0), CpuSet(NODE1))
        assert os.sched_getaffinity(worker.tid) == NODE0

    in_child(run)


def test_a_thread_id_that_names_another_process_by_now_is_never_moved(pair_root: Path) -> None:
    # Thread ids are reused: between the keeper's listing and its call, an id may come to name a thread of another
    # process. The listing is made to hold such an id (the race made certain); the keeper, under override, would
    # put a "new thread" back on the placement: it moves nothing that is not the process's.
    from numapin.kernel.affinity import LinuxThreads

    def run() -> None:
        stranger = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        try:
            reused: list[str] = []  # the ids of this process's threads that name another's by now

            class Listing(LinuxThreads):
                def walk_calls(self, target: CpuSet):  # type: ignore[no-untyped-def]
                    get, cpuset, put, arg, names = super().walk_calls(target)
                    return get, cpuset, put, arg, lambda: [*names(), *reused]

            numapin.pin(0, policy="override")
            written = records.lookup(os.getpid())
            assert written is not None
            from numapin.facts.machine import cached

            keeper = Keeper(os.getpid(), written, cached(None, os.environ), kernel=Listing())
            reused.append(str(stranger.pid))
            assert keeper.check() == [], "another process's thread is no drift of this one"
            assert os.sched_getaffinity(stranger.pid) == ALL, "and it is never moved"
        finally:
            stranger.kill()
            stranger.wait()

    in_child(run)


def test_a_threads_name_is_said_as_text_never_as_terminal_codes(pair_root: Path) -> None:
    # Thread names are any bytes their process chose: the keeper's lines (log, numapin keep) show them escaped.
    def run() -> str:
        keeper, worker = _kept("respect")

        def named() -> None:
            with open(f"/proc/self/task/{threading.get_native_id()}/comm", "wb") as file:
                file.write(b"\x1b[2Jx\x07")
            os.sched_setaffinity(0, NODE1)

        worker.do(named)
        (event,) = keeper.check()
        return str(event)

    said = in_child(run)
    assert "\x1b" not in said and "\x07" not in said and "x" in said, repr(said)
    assert said.isprintable(), repr(said)


#: A worker that pins itself (every CPU, override), then, as a pin does, sets every thread's mask to node 0 and
#: only on a second word writes its record of that pin (``numapin.pin``, which finds the masks already right).
TWO_STEP_PIN = f"""
import os, sys, threading
import numapin
threading.Thread(target=threading.Event().wait, daemon=True).start()
numapin.pin(cpus={sorted(ALL)!r}, memory="none", policy="override")
print("pinned", flush=True)
sys.stdin.readline()
for tid in os.listdir("/proc/self/task"):
    os.sched_setaffinity(int(tid), {sorted(NODE0)!r})
print("masks", flush=True)
sys.stdin.readline()
numapin.pin(cpus={sorted(NODE0)!r}, memory="none", policy="override")
print("recorded", flush=True)
sys.stdin.readline()
"""


def test_a_keeper_outside_never_takes_a_pin_between_its_masks_and_its_record_for_a_move(
        pair_root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A pin sets its threads' masks, then writes its record: a look from outside in between saw every thread
    # "moved" and, under override, put the old placement back, undoing the process's own later pin.
    from numapin.facts.machine import cached
    from numapin.pinning import keeper as keeping

    monkeypatch.setattr(keeping, "SETTLE_SECONDS", 60.0, raising=False)  # the looks below fall in the window
    worker = subprocess.Popen([sys.executable, "-c", TWO_STEP_PIN], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True)
    try:
        assert worker.stdin is not None and worker.stdout is not None
        assert worker.stdout.readline() == "pinned\n"
        written = records.lookup(worker.pid)
        assert written is not None
        keeper = Keeper(worker.pid, written, cached(None, os.environ), source=lambda: records.lookup(worker.pid))
        worker.stdin.write("go\n")
        worker.stdin.flush()
        assert worker.stdout.readline() == "masks\n"
        assert keeper.check() == [] and keeper.check() == [], "a fresh mask is no drift yet"
        worker.stdin.write("go\n")
        worker.stdin.flush()
        assert worker.stdout.readline() == "recorded\n"
        assert keeper.check() == [], "the process's own pin, followed"
        assert keeper.record.target == CpuSet(NODE0)
        tids = os.listdir(f"/proc/{worker.pid}/task")
        assert all(os.sched_getaffinity(int(t)) == NODE0 for t in tids), "never put back"
    finally:
        worker.kill()
        worker.wait()
