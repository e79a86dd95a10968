"""Pinning at scale and under faults, against an in-memory model of the kernel.

The real-syscall tests in test_pin.py are the reference; this model adds a
144-CPU Grace machine and faults that cannot be provoked on demand.
"""

from __future__ import annotations

import errno
import logging
import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import numapin
from conftest import use_root
from kernel_model import ModelKernel
from numapin.compat.tensorrt_llm import configure_cpu_affinity
from numapin.cpuset import CpuSet
from numapin.facts.topology import read_topology
from numapin.kernel.affinity import Outcome
from numapin.pinning.results import PinError

GRACE0, GRACE1, ALL = CpuSet("0-71"), CpuSet("72-143"), CpuSet("0-143")


@pytest.fixture
def gb300(machine_root: Callable[[str], Path], monkeypatch: pytest.MonkeyPatch) -> Path:
    return use_root(machine_root("gb300"), monkeypatch)


@pytest.fixture(autouse=True)
def _fresh_record(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    # The model is not the real process: what numapin records about it must
    # not reach other tests (nor the children they fork). The state object is
    # swapped for one of the model's own, and put back; the record the pins
    # write for this (the test) process goes to a folder of the test's own.
    from numapin.base.environment import RUNTIME_DIR
    from numapin.pinning import state as ownership

    monkeypatch.setattr(ownership, "_STATE", ownership.PinState())
    monkeypatch.setenv(RUNTIME_DIR, str(tmp_path / "records"))
    yield


def table(kernel: ModelKernel) -> tuple[str, int, int]:
    main = kernel.masks[kernel.me]
    others = [m for t, m in kernel.masks.items() if t != kernel.me]
    name = "NUMA" if main == GRACE0 else "ALL" if main == ALL else str(main)
    return name, sum(1 for m in others if m == GRACE0), sum(1 for m in others if m == ALL)


def test_the_field_table_at_scale(gb300: Path, caplog: pytest.LogCaptureFixture) -> None:
    kernel = ModelKernel(ALL, threads=7)
    assert read_topology().allowed == ALL
    assert table(kernel) == ("ALL", 0, 6)
    configure_cpu_affinity(0, kernel=kernel)
    assert table(kernel) == ("NUMA", 6, 0)
    kernel.spawn()  # a thread created between the calls inherits the pin
    with caplog.at_level(logging.WARNING, logger="numapin"):
        result = configure_cpu_affinity(0, kernel=kernel)
    assert table(kernel) == ("NUMA", 7, 0)
    assert caplog.records == []
    assert result is not None and result.count(Outcome.ALREADY) == 8
    configure_cpu_affinity(2, kernel=kernel)
    assert set(kernel.masks.values()) == {GRACE1}


def test_a_thread_exiting_mid_walk(gb300: Path) -> None:
    kernel = ModelKernel(ALL, threads=5)
    gone = list(kernel.masks)[3]
    kernel.vanish_on_get.add(gone)
    result = numapin.pin(0, kernel=kernel)
    assert result.tids(Outcome.VANISHED) == (gone,)
    assert result.count(Outcome.PINNED) == 4 and result.count(Outcome.FAILED) == 0
    assert next(t for t in result.threads if t.tid == gone).error == "ESRCH"


def test_threads_born_during_the_walk_are_caught(gb300: Path) -> None:
    kernel = ModelKernel(ALL, threads=10)
    last = list(kernel.masks)[-1]  # visited last by the first pass
    births: list[int] = []

    def on_set(tid: int) -> None:
        # A thread not yet pinned keeps spawning while the walk is under way;
        # its children inherit its old mask and need pinning themselves.
        births.append(kernel.spawn(parent=last))

    kernel.on_set = on_set
    result = numapin.pin(0, kernel=kernel)
    inherited_old = [t for t in births if next(r for r in result.threads if r.tid == t).before == ALL]
    assert len(inherited_old) >= 9
    assert set(kernel.masks.values()) == {GRACE0}
    assert result.count(Outcome.PINNED) + result.count(Outcome.ALREADY) == len(kernel.masks)


@pytest.mark.parametrize("code", [errno.EPERM, errno.EINVAL])
def test_kernel_refusals_non_strict(code: int, gb300: Path, caplog: pytest.LogCaptureFixture) -> None:
    kernel = ModelKernel(ALL, threads=6)
    refused = list(kernel.masks)[1:3]
    for tid in refused:
        kernel.refuse[tid] = code
    with caplog.at_level(logging.INFO, logger="numapin"):
        result = numapin.pin(0, kernel=kernel)
    assert result.tids(Outcome.FAILED) == tuple(refused)
    assert {t.error for t in result.threads if t.outcome is Outcome.FAILED} == {errno.errorcode[code]}
    assert [r.levelname for r in caplog.records] == ["WARNING"], "one warning, no success line"
    assert all(kernel.masks[t] == ALL for t in refused)


def test_kernel_refusal_strict_rolls_back(gb300: Path) -> None:
    kernel = ModelKernel(ALL, threads=6)
    kernel.refuse[list(kernel.masks)[4]] = errno.EPERM
    with pytest.raises(PinError) as info:
        numapin.pin(0, kernel=kernel, strict=True)
    assert set(kernel.masks.values()) == {ALL}, "every change rolled back"
    assert info.value.result.count(Outcome.FAILED) == 1
    assert numapin.current(kernel=kernel).applied is None


def test_unreadable_task_folder(gb300: Path, caplog: pytest.LogCaptureFixture) -> None:
    kernel = ModelKernel(ALL, threads=4)
    kernel.list_error = errno.EACCES
    with caplog.at_level(logging.INFO, logger="numapin"):
        result = numapin.pin(0, kernel=kernel)
    assert result.action == "nothing pinned" and not result.changed
    assert set(kernel.masks.values()) == {ALL}, "the calling thread's pin was rolled back"
    assert [r.levelname for r in caplog.records] == ["WARNING"]
    with pytest.raises(PinError, match="EACCES"):
        numapin.pin(0, kernel=kernel, strict=True)
    assert set(kernel.masks.values()) == {ALL}


def test_every_thread_refused_is_not_success(gb300: Path, caplog: pytest.LogCaptureFixture) -> None:
    kernel = ModelKernel(ALL, threads=3)
    for tid in kernel.masks:
        kernel.refuse[tid] = errno.EPERM
    with caplog.at_level(logging.INFO, logger="numapin"):
        result = numapin.pin(0, kernel=kernel)
    assert result.action == "nothing pinned"
    assert all(r.levelno >= logging.WARNING for r in caplog.records)
    assert numapin.current(kernel=kernel).applied is None


def test_lease_at_scale(gb300: Path) -> None:
    kernel = ModelKernel(ALL, threads=100)
    with numapin.pinned(2, kernel=kernel):
        assert set(kernel.masks.values()) == {GRACE1}
        born = kernel.spawn()
    assert set(kernel.masks.values()) == {ALL} and kernel.masks[born] == ALL


def test_launcher_rank_without_gpus_is_an_environment_problem(gb300: Path, monkeypatch: pytest.MonkeyPatch,
                                                              caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    monkeypatch.setenv("LOCAL_RANK", "3")
    kernel = ModelKernel(ALL, threads=2)
    with caplog.at_level(logging.WARNING, logger="numapin"):
        result = numapin.pin(kernel=kernel)
    assert result.action == "nothing pinned" and "no GPU is visible" in (result.message or "")
    assert len(caplog.records) == 1 and set(kernel.masks.values()) == {ALL}


def test_launcher_rank_picks_the_gpu(gb300: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLURM_LOCALID", "2")
    kernel = ModelKernel(ALL, threads=2)
    assert numapin.pin(kernel=kernel).placement.gpu == 2  # type: ignore[union-attr]
    assert set(kernel.masks.values()) == {GRACE1}


def test_a_clone_in_flight_at_the_last_listing_is_caught(gb300: Path) -> None:
    # A thread cloned from a parent that was not yet pinned becomes
    # visible just after the listing that found nobody new; the walk lists once
    # more before it trusts that listing.
    kernel = ModelKernel(ALL, threads=4)
    late: list[int] = []

    def clone_in_flight(listing: int) -> None:
        if listing == 2 and not late:  # the listing that finds nobody new
            late.append(kernel.spawn(mask=ALL))  # copied from a parent read before its pin

    kernel.on_list = clone_in_flight
    result = numapin.pin(0, kernel=kernel)
    assert late and late[0] in result.tids(Outcome.PINNED)
    assert all(m == GRACE0 for m in kernel.masks.values())


def test_a_reused_thread_id_is_not_its_predecessor(gb300: Path) -> None:
    # A thread pins itself on purpose (here to the whole machine)
    # and exits; a new thread gets its id and the process mask. It is a new
    # thread: the process-wide pin moves it.
    kernel = ModelKernel(ALL, threads=3)
    main = kernel.me
    hot = kernel.spawn()
    kernel.me = hot
    numapin.pin_thread(ALL, kernel=kernel)
    kernel.me = main
    kernel.exit(hot)
    kernel.spawn(tid=hot)  # same id, started later, the process mask
    result = numapin.pin(0, kernel=kernel)
    assert hot in result.tids(Outcome.PINNED) and kernel.masks[hot] == GRACE0


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture], max_examples=60)
@given(value=st.text(max_size=8).filter(lambda v: v != "1" and "\x00" not in v))
def test_any_other_tensorrt_llm_value_does_nothing(value: str, gb300: Path) -> None:
    kernel = ModelKernel(ALL, threads=3)
    before = dict(kernel.masks)
    os.environ["TLLM_NUMA_AWARE_WORKER_AFFINITY"] = value
    try:
        assert configure_cpu_affinity(0, kernel=kernel) is None
    finally:
        del os.environ["TLLM_NUMA_AWARE_WORKER_AFFINITY"]
    assert kernel.masks == before and kernel.sets == 0


def test_every_thread_has_one_result_agreeing_with_the_counts(gb300: Path) -> None:
    kernel = ModelKernel(ALL, threads=6)
    kernel.masks[1003] = GRACE1  # someone else's mask: kept
    kernel.refuse[1004] = errno.EPERM
    result = numapin.pin(0, kernel=kernel)
    assert sorted(r.tid for r in result.threads) == sorted(kernel.masks)
    tally = {o: sum(1 for r in result.threads if r.outcome is o) for o in Outcome}
    assert tally == {o: result.count(o) for o in Outcome}
    assert tally[Outcome.PINNED] == 4 and tally[Outcome.KEPT] == 1 and tally[Outcome.FAILED] == 1
    failed = result.threads[[r.tid for r in result.threads].index(1004)]
    assert (failed.before, failed.after, failed.error) == (ALL, None, "EPERM")
    assert all(r.after == GRACE0 for r in result.threads if r.outcome is Outcome.PINNED)


def test_a_walk_against_endless_thread_creation_stops_and_says_so(gb300: Path,
                                                                   caplog: pytest.LogCaptureFixture) -> None:
    from numapin.pinning.walk import LISTINGS

    kernel = ModelKernel(ALL, threads=2)
    kernel.on_list = lambda _: kernel.spawn()  # a new thread before every listing, for ever
    with caplog.at_level(logging.WARNING, logger="numapin"):
        result = numapin.pin(0, kernel=kernel)
    assert kernel.listings == LISTINGS  # bounded: it did not run for as long as threads come
    assert result.unconfirmed and set(result.unconfirmed) <= set(kernel.masks)
    walked = {t.tid for t in result.threads}
    assert not walked & set(result.unconfirmed), "found by the last listing, reported rather than walked"
    assert result.message is not None and "not confirmed" in result.message
    assert any("not confirmed" in r.getMessage() for r in caplog.records)


def test_a_walk_that_converges_confirms_every_thread(gb300: Path) -> None:
    kernel = ModelKernel(ALL, threads=3)
    kernel.on_list = lambda n: kernel.spawn() if n < 5 else None  # a few births, then calm
    result = numapin.pin(0, kernel=kernel)
    assert result.unconfirmed == () and set(kernel.masks.values()) == {GRACE0}


def test_a_strict_pin_keeps_the_errors_class_and_attaches_the_result(gb300: Path) -> None:
    from numapin.facts.inventory import NoGpuVisible

    kernel = ModelKernel(ALL, threads=2)
    with pytest.raises(NoGpuVisible) as raised:  # the class plan() raises, not a bare PinError
        numapin.pin(0, strict=True, kernel=kernel, environ={"CUDA_VISIBLE_DEVICES": ""})
    assert isinstance(raised.value, numapin.EnvironmentProblem)
    assert raised.value.result.action is numapin.PinAction.NOTHING  # type: ignore[attr-defined]
    with pytest.raises(NoGpuVisible):
        numapin.plan(0, environ={"CUDA_VISIBLE_DEVICES": ""})
    kernel.refuse[list(kernel.masks)[1]] = errno.EPERM
    with pytest.raises(PinError) as refused:  # no error of numapin's for a refusal: a PinError
        numapin.pin(0, strict=True, kernel=kernel)
    assert isinstance(refused.value, numapin.EnvironmentProblem) and refused.value.result is not None
    assert set(kernel.masks.values()) == {ALL}, "rolled back"
