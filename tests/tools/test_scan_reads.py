"""What one scan reads of each process: every ``/proc/PID`` file counted (files opened, folders listed, links read,
entries stat'ed), ancestors' included; and a long-running scanner (the exporter) reading again only what can have
changed. Counted in a child (an audit hook cannot be removed), over real processes: workers with a record and a
launcher's rank under a shell that started them, and ordinary ones."""

from __future__ import annotations

import os
import subprocess
import tempfile
from collections import Counter

from child import in_child
from live import without_inputs
from numapin.base.environment import RUNTIME_DIR
from numapin.cpuset import CpuSet
from numapin.pinning import record
from numapin.placement.modes import Placement, PlacementMode
from reads import counting


def _processes(folder: str) -> tuple[list[subprocess.Popen[bytes]], list[int], list[int]]:
    """Two workers (a record, LOCAL_RANK), each the child of a shell that waits for it, and two ordinary
    processes: the shells, the workers' pids and the ordinary ones'."""
    env = {**without_inputs(dict(os.environ)), RUNTIME_DIR: folder}
    shells = [subprocess.Popen(["sh", "-c", "sleep 60 & echo $!; wait"], env={**env, "LOCAL_RANK": "0"},
                               stdout=subprocess.PIPE) for _ in range(2)]
    workers = [int(shell.stdout.readline()) for shell in shells if shell.stdout is not None]
    plain = [subprocess.Popen(["sleep", "60"], env=env) for _ in range(2)]
    everything = CpuSet(os.sched_getaffinity(0))
    placement = Placement(everything, CpuSet([0]), "the whole machine", PlacementMode.EXPLICIT)
    for pid in workers:
        start = record.start_time(pid)
        assert start is not None
        record.publish(record.Record(pid, start, "pin", everything, everything, placement))
    return shells + plain, workers, [p.pid for p in plain]


def _scans() -> dict[str, object]:
    from numapin.tools.ps import Kept, survey

    folder = tempfile.mkdtemp()
    os.environ[RUNTIME_DIR] = folder
    started, workers, plain = _processes(folder)
    try:
        counts = counting()
        kept = Kept()
        first = survey(kept=kept)
        once = Counter(counts)
        counts.clear()
        second = survey(kept=kept)
        again = Counter(counts)
    finally:
        for process in started:
            process.kill()
    return {"first": sorted(w.pid for w in first.workers), "second": sorted(w.pid for w in second.workers),
            "workers": workers, "plain": plain, "shells": [p.pid for p in started[:2]],
            "once": dict(once), "again": dict(again)}


def test_one_scan_reads_each_file_of_each_process_once_and_a_kept_scan_only_what_can_change() -> None:
    got = in_child(_scans)
    workers, plain, shells = got["workers"], got["plain"], got["shells"]
    assert set(workers) <= set(got["first"]) and set(workers) <= set(got["second"]), got
    once, again = got["once"], got["again"]
    for counts in (once, again):
        twice = {key: n for key, n in counts.items() if n > 1 and key[0] != os.getpid()}
        assert twice == {}, f"read more than once in one scan: {twice}"
    # Every kind of file was seen counted (the counter can fail): a worker's stat, environ, threads, open files.
    mine = {what for (pid, what) in once if pid == workers[0]}
    assert {"read stat", "read environ", "list task", "stat .", "read fd"} <= mine, mine
    # The shells that started the workers are read too (who placed it), each file once: counted above.
    assert any(pid in shells for pid, _ in once), once
    # Kept: a worker's environment and pod (its cgroup) are not read again; its threads and stat are.
    for pid in workers:
        kept_again = {what for (p, what) in again if p == pid}
        assert {"read environ", "read cgroup"} & kept_again == set() and {"read stat", "list task"} <= kept_again
    # Kept: an ordinary process seen before costs a stat of its entry and of its fd folder, nothing else.
    for pid in plain:
        assert {what for (p, what) in once if p == pid} >= {"stat .", "read fd", "link ns/mnt"}, once
        assert {what for (p, what) in again if p == pid} == {"stat .", "stat fd"}, again


def _a_reused_id() -> dict[str, object]:
    from numapin.facts import procfs
    from numapin.observe.view import Kept, ProcessView

    process = subprocess.Popen(["sleep", "60"], env={**without_inputs(dict(os.environ)), "MARK": "first"})
    try:
        owner, born = procfs.seen(process.pid)
        kept = Kept()
        first = ProcessView(process.pid, owner, born, kept)
        seen = first.environ().get("MARK")
        counts = counting()
        again = first.environ().get("MARK")  # the same view: not read again
        same = ProcessView(process.pid, owner, born, kept).environ().get("MARK")  # the next scan: kept
        quiet = dict(counts)
        # Another process under the same id is made at another time: nothing kept of the first is taken for it.
        other = ProcessView(process.pid, owner, born + 1, kept)
        other.environ()
        return {"seen": [seen, again, same], "quiet": quiet, "after": dict(counts), "pid": process.pid}
    finally:
        process.kill()


def test_a_view_reads_a_file_once_and_never_takes_what_was_kept_of_another_process_under_its_id() -> None:
    got = in_child(_a_reused_id)
    assert got["seen"] == ["first", "first", "first"], got
    assert got["quiet"] == {}, got  # asked twice more, read no more
    assert got["after"] == {(got["pid"], "read environ"): 1}, got


def _judged_through_views() -> dict[str, object]:
    from numapin.observe.judge import judge
    from numapin.observe.view import ProcessView
    from numapin.tools.doctor import diagnose
    from numapin.tools.threads_report import threads_report

    folder = tempfile.mkdtemp()
    os.environ[RUNTIME_DIR] = folder
    started, workers, _ = _processes(folder)
    try:
        pid = workers[0]
        counts = counting()
        view = ProcessView(pid)
        first = judge(view)
        once = {what: n for (p, what), n in counts.items() if p == pid}
        counts.clear()
        again = judge(view)
        twice = {what: n for (p, what), n in counts.items() if p == pid}
        counts.clear()
        diagnose(pid=pid)
        doctor = {what: n for (p, what), n in counts.items() if p == pid}
        counts.clear()
        threads_report(pid)
        threads = {what: n for (p, what), n in counts.items() if p == pid}
    finally:
        for process in started:
            process.kill()
    return {"verdicts": [str(first.verdict), str(again.verdict)], "once": once, "twice": twice, "doctor": doctor,
            "threads": threads}


def test_the_judge_reads_a_process_only_through_its_view_each_file_once() -> None:
    """The judge is a function of the view and the machine: judging a view again reads nothing of the process,
    and ``doctor --pid`` (its gathering, the judge and every check) and ``threads`` read each of its files once."""
    got = in_child(_judged_through_views)
    assert got["verdicts"] == ["ok", "ok"], got
    once, twice = got["once"], got["twice"]
    assert {"read stat", "read environ", "list task"} <= set(once), once  # the counter counts (it can fail)
    assert all(n == 1 for n in once.values()), once
    assert twice == {}, f"judging the same view again read {twice}"
    for tool in (got["doctor"], got["threads"]):
        assert {"read stat", "read environ", "list task"} <= set(tool), tool
        assert {what: n for what, n in tool.items() if n > 1} == {}, tool
