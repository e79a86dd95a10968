"""The keeper against a real cgroup cpuset, made by the test (root; this host's v1 cpuset or a v2 one).

A worker pinned to GPU 0's node lives in a cpuset the test shrinks to the other node and widens again,
as the kubelet's CPU manager rewrites a container's. The kernel resets the threads' masks on each change,
each kernel in its own way; the keeper says what it found and puts the placement back. The guests
(``tests/guest``, cgroup v2 on Debian's 6.1) do the same on another kernel and with real NUMA nodes.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest

import kube
import numapin
from conftest import in_child
from live import ALL, NODE0, NODE1, cpus, masks
from numapin.cpuset import CpuSet
from numapin.pinning import record as records
from numapin.pinning.keeper import DriftCause, Response, this_process

pytestmark = pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs CPUs 0 and 1")


def test_a_cpuset_shrunk_and_widened_under_a_worker(pair_root: Path) -> None:
    top = kube.cgroups_or_skip(cpuset=True)
    path = f"numapin-keeper-{uuid.uuid4().hex[:8]}"
    with kube.placed_in(top, [path], cpus=cpus(ALL)) as groups:
        group = groups[path]

        def run() -> dict[str, object]:
            (group / "cgroup.procs").write_text(f"{os.getpid()}\n")
            numapin.pin(0)
            keeper = this_process()
            assert keeper is not None
            (group / "cpuset.cpus").write_text(cpus(NODE1) + "\n")
            (shrunk,) = keeper.check()
            assert (shrunk.cause, shrunk.response) == (DriftCause.CPUSET, Response.LEFT), shrunk
            assert (shrunk.before, shrunk.after) == (CpuSet(ALL), CpuSet(NODE1))
            assert all(mask == NODE1 for mask in masks().values()), "the kernel moved every thread"
            assert keeper.check() == [], "what the kernel did is said once, not as threads moved"
            (group / "cpuset.cpus").write_text(cpus(ALL) + "\n")
            by_kernel = os.sched_getaffinity(0)  # what this kernel made of the widening, before the keeper
            (widened,) = keeper.check()
            assert widened.cause is DriftCause.CPUSET and widened.after == CpuSet(ALL)
            assert all(mask == NODE0 for mask in masks().values()), "the placement is back on every thread"
            written = records.lookup(os.getpid())
            assert written is not None and dict(written.drift) == {"cpuset": 2}
            return {"kernel": sorted(by_kernel), "response": widened.response.value, "note": widened.note}

        found = in_child(run)
    note = str(found["note"])
    if set(found["kernel"]) == NODE0:  # type: ignore[call-overload]
        # A kernel that keeps the mask a thread asked for (sched_setaffinity's) puts it back itself.
        assert found["response"] == Response.HELD.value and "as the kernel kept it" in note
    else:
        assert found["response"] == Response.REPLACED.value
        assert ("kernel had reset" in note) == (set(found["kernel"]) == ALL), note  # type: ignore[call-overload]


def test_explicit_cpus_narrowed_by_a_cpuset_come_back_when_it_widens(pair_root: Path) -> None:
    # A placement of explicit CPUs (all of them) whose cpuset shrinks to GPU 0's half is placed on that half;
    # when the cpuset widens again, the request comes back, not the narrowing. A keeper made afresh in between
    # (numapin keep started again) knows the request from the record.
    top = kube.cgroups_or_skip(cpuset=True)
    path = f"numapin-keeper-{uuid.uuid4().hex[:8]}"
    with kube.placed_in(top, [path], cpus=cpus(ALL)) as groups:
        group = groups[path]

        def run() -> None:
            (group / "cgroup.procs").write_text(f"{os.getpid()}\n")
            numapin.pin(cpus=cpus(ALL))
            keeper = this_process()
            assert keeper is not None
            (group / "cpuset.cpus").write_text(cpus(NODE0) + "\n")
            (shrunk,) = keeper.check()
            assert shrunk.cause is DriftCause.CPUSET and shrunk.after == CpuSet(NODE0)
            assert all(mask == NODE0 for mask in masks().values())
            written = records.lookup(os.getpid())
            assert written is not None and written.target == CpuSet(NODE0)
            assert written.asked()[1] == CpuSet(ALL), "the request is in the record"
            again = this_process()
            assert again is not None
            (group / "cpuset.cpus").write_text(cpus(ALL) + "\n")
            (widened,) = again.check()
            assert widened.cause is DriftCause.CPUSET and widened.after == CpuSet(ALL)
            assert all(mask == ALL for mask in masks().values()), "the request is back on every thread"
            back = records.lookup(os.getpid())
            assert back is not None and back.target == CpuSet(ALL) and back.asked() == written.asked()

        in_child(run)
