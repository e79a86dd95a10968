"""Pinning with real threads and real syscalls on the live machine.

Every test runs in a forked child (``in_child``) so that no mask or policy
leaks into pytest. The root folder ``pair_root`` describes this machine with
one GPU per node: GPU 0 on the CPUs ``NODE0``, GPU 1 on ``NODE1`` (see
``live.py``; on the 2-CPU development machine, CPU 0 and CPU 1).
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

import numapin
from conftest import in_child
from live import ALL, NODE0, NODE1, SPEC, cpus, masks, storm_round
from numapin.base.errors import UsageError
from numapin.compat.tensorrt_llm import configure_cpu_affinity
from numapin.cpuset import CpuSet
from numapin.kernel.affinity import Outcome

#: The calling thread's reserved core with ``reserve=1`` over every CPU, and the rest.
RESERVED = {max(ALL)}
REST = ALL - RESERVED

pytestmark = pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs CPUs 0 and 1")


class Workers:
    """Threads held alive until closed; each can be asked to run a function on itself."""

    def __init__(self, count: int) -> None:
        self.stop = threading.Event()
        self.ready = threading.Barrier(count + 1)
        self.tids: list[int] = []
        self._lock = threading.Lock()
        self.threads = [threading.Thread(target=self._run, daemon=True) for _ in range(count)]
        for t in self.threads:
            t.start()
        self.ready.wait()

    def _run(self) -> None:
        with self._lock:
            self.tids.append(threading.get_native_id())
        self.ready.wait()
        self.stop.wait()

    def close(self) -> None:
        self.stop.set()
        for t in self.threads:
            t.join()


def set_all(cpus: set[int]) -> None:
    """What an outside party (a launcher, numactl, old TensorRT-LLM) does to every thread."""
    for tid in masks():
        os.sched_setaffinity(tid, cpus)


@contextmanager
def logs() -> Iterator[list[logging.LogRecord]]:
    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    handler = Keep(logging.DEBUG)
    logger = logging.getLogger("numapin")
    logger.addHandler(handler)
    old = logger.level
    logger.setLevel(logging.DEBUG)
    try:
        yield records
    finally:
        logger.removeHandler(handler)
        logger.setLevel(old)


def warnings(records: list[logging.LogRecord]) -> list[str]:
    return [r.getMessage() for r in records if r.levelno >= logging.WARNING]


# -- the TensorRT-LLM field failure, reproduced and fixed --------------------


def test_second_configure_call_keeps_the_numa_pin(pair_root: Path) -> None:
    def body() -> None:
        assert all(m == ALL for m in masks().values())
        workers = Workers(6)
        first = configure_cpu_affinity(0)
        assert first is not None and first.count(Outcome.PINNED) == 7
        assert all(m == NODE0 for m in masks().values()), "main + 6 on node 0"
        late = Workers(1)  # created between the calls: inherits node 0
        assert os.sched_getaffinity(late.tids[0]) == NODE0
        with logs() as records:
            second = configure_cpu_affinity(0)
            third = configure_cpu_affinity(0)
        assert warnings(records) == [], "the second call logs no warning"
        for result in (second, third):
            assert result is not None and not result.changed
            assert result.count(Outcome.ALREADY) == 8 and result.ownership == "numapin"
        assert all(m == NODE0 for m in masks().values()) and len(masks()) == 8
        workers.close()
        late.close()

    in_child(body)


def test_retarget_moves_every_thread(pair_root: Path) -> None:
    def body() -> None:
        workers = Workers(6)
        configure_cpu_affinity(0)
        with logs() as records:
            result = configure_cpu_affinity(1)
        assert result is not None and result.count(Outcome.PINNED) == 7
        assert all(m == NODE1 for m in masks().values())
        assert warnings(records) == []
        workers.close()

    in_child(body)


def test_force_over_an_external_mask(pair_root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TLLM_NUMA_AWARE_WORKER_AFFINITY", "1")

    def body() -> None:
        workers = Workers(6)
        set_all(NODE1)  # someone else's constraint
        result = configure_cpu_affinity(0)
        assert result is not None and result.ownership == "external"
        assert all(m == NODE0 for m in masks().values())
        workers.close()

    in_child(body)


def test_external_change_after_our_pin(pair_root: Path) -> None:
    def body() -> tuple[list[str], list[str]]:
        workers = Workers(6)
        configure_cpu_affinity(0)
        set_all(NODE1)  # a launcher moves the process after numapin pinned it
        with logs() as respected:
            kept = numapin.pin(0)  # policy respect: never widen someone else's mask
            again = numapin.pin(0)
        assert kept.action == "kept external mask" and not kept.changed
        assert again.action == "kept external mask"
        assert all(m == NODE1 for m in masks().values())
        with logs() as reset:
            result = configure_cpu_affinity(0)  # TensorRT-LLM's auto mode removes the constraint
        assert result is not None and result.ownership == "external"
        assert all(m == ALL for m in masks().values())
        workers.close()
        return warnings(respected), warnings(reset)

    respected, reset = in_child(body)
    assert len(respected) == 1 and "left as it is" in respected[0], "warned once"
    assert len(reset) == 1 and "has constrained CPU affinity" in reset[0]


def test_unset_under_an_external_mask_two_calls_two_states(pair_root: Path) -> None:
    # TensorRT-LLM's contract, as the README states it: the first call removes
    # the constraint, the second pins the now unconstrained process to the node.
    def body() -> None:
        workers = Workers(2)
        set_all(NODE1)
        first = configure_cpu_affinity(0)
        assert first is not None and first.ownership == "external"
        assert all(m == ALL for m in masks().values())
        second = configure_cpu_affinity(0)
        assert second is not None and second.ownership == "unconstrained"
        assert all(m == NODE0 for m in masks().values())
        third = configure_cpu_affinity(0)
        assert third is not None and not third.changed
        workers.close()

    in_child(body)


@pytest.mark.parametrize("value", ["0", "", "true", "2"])
def test_other_values_do_nothing_and_log_nothing(value: str, pair_root: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TLLM_NUMA_AWARE_WORKER_AFFINITY", value)

    def body() -> None:
        workers = Workers(2)
        set_all(NODE1)
        with logs() as records:
            assert configure_cpu_affinity(0) is None
        assert records == []
        assert all(m == NODE1 for m in masks().values())
        workers.close()

    in_child(body)


def test_a_container_cpuset_is_not_an_external_constraint(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Same mask NODE0: inside a container whose cpuset is NODE0 it is the
    # baseline; on a host whose cpuset is every CPU somebody constrained it.
    from numapin.facts import synthetic as machines

    container = machines.write(SPEC, tmp_path / "container", cgroup_cpus=CpuSet(NODE0))
    host = machines.write(SPEC, tmp_path / "host", cgroup_cpus=CpuSet(ALL))
    monkeypatch.delenv("TLLM_NUMA_AWARE_WORKER_AFFINITY", raising=False)
    monkeypatch.delenv("NUMAPIN_APPLIED", raising=False)

    def body(root: Path) -> tuple[str | None, list[str]]:
        os.environ["NUMAPIN_FSROOT"] = str(root)
        workers = Workers(2)
        set_all(NODE0)
        with logs() as records:
            result = configure_cpu_affinity(0)
        workers.close()
        assert result is not None
        return result.ownership, warnings(records)

    assert in_child(lambda: body(container)) == ("unconstrained", [])
    ownership, warned = in_child(lambda: body(host))
    assert ownership == "external" and "has constrained CPU affinity" in warned[0]


# -- numapin.pin ------------------------------------------------------------


def test_pin_reports_every_thread_and_reads_back(pair_root: Path) -> None:
    def body() -> None:
        workers = Workers(3)
        with logs() as records:
            result = numapin.pin(1)
        assert result.target == CpuSet(NODE1) and result.mask == CpuSet(NODE1)
        assert set(result.tids(Outcome.PINNED)) == set(masks())
        assert result.threads[0].tid == threading.get_native_id(), "the calling thread goes first"
        physical = numapin.plan(1).pci  # type: ignore[union-attr]
        assert "pinned" in str(result) and f"for GPU 1 ({physical}, node 1)" in str(result), \
            "a line that names a GPU names its physical device too"
        assert [r.levelname for r in records] == ["INFO"]
        now = numapin.current()
        assert now.matches and now.applied is not None and now.applied.target == CpuSet(NODE1)
        workers.close()

    in_child(body)


def test_deliberately_pinned_threads_are_kept(pair_root: Path) -> None:
    def body() -> None:
        workers = Workers(2)
        os.sched_setaffinity(workers.tids[0], NODE1)  # someone's own decision
        result = numapin.pin(0)
        assert result.tids(Outcome.KEPT) == (workers.tids[0],)
        assert os.sched_getaffinity(workers.tids[0]) == NODE1
        forced = numapin.pin(0, all_threads=True)
        assert forced.tids(Outcome.PINNED) == (workers.tids[0],)
        assert all(m == NODE0 for m in masks().values())
        workers.close()

    in_child(body)


def test_pin_thread_survives_process_wide_pins(pair_root: Path) -> None:
    def body() -> None:
        workers = Workers(2)
        hot: dict[str, object] = {}

        def loop() -> None:
            hot["result"] = numapin.pin_thread(cpus(NODE1))
            hot["tid"] = threading.get_native_id()
            release.wait()

        release = threading.Event()
        t = threading.Thread(target=loop)
        t.start()
        while "tid" not in hot:
            pass
        result = numapin.pin(0)
        assert hot["tid"] in result.tids(Outcome.KEPT)
        assert os.sched_getaffinity(hot["tid"]) == NODE1  # type: ignore[call-overload]
        assert numapin.pin(0).count(Outcome.PINNED) == 0
        release.set()
        t.join()
        workers.close()

    in_child(body)


def test_pin_thread_on_the_main_thread_before_any_pin(pair_root: Path) -> None:
    # The main thread takes its own cores first; the process-wide pin that
    # follows must still see the process as unconstrained, not as someone
    # else's constraint, and pin every other thread quietly.
    def body() -> list[str]:
        workers = Workers(3)
        me = threading.get_native_id()
        numapin.pin_thread(cpus(NODE1))
        with logs() as records:
            result = numapin.pin(gpu=0)
        assert result.ownership == "unconstrained" and result.tids(Outcome.KEPT) == (me,)
        assert set(result.tids(Outcome.PINNED)) == set(workers.tids)
        assert os.sched_getaffinity(0) == NODE1, "the caller stays on its own CPUs"
        assert all(os.sched_getaffinity(t) == NODE0 for t in workers.tids)
        now = numapin.current()
        assert now.applied is not None and now.applied.mask == CpuSet(NODE0) and now.matches
        forced = numapin.pin(gpu=0, all_threads=True)
        assert forced.tids(Outcome.PINNED) == (me,) and os.sched_getaffinity(0) == NODE0
        workers.close()
        return warnings(records)

    assert in_child(body) == []


def test_reserved_core_for_the_calling_thread(pair_root: Path) -> None:
    def body() -> None:
        workers = Workers(2)
        result = numapin.pin(cpus=ALL, reserve=1)
        assert result.placement is not None and result.placement.reserved == CpuSet(RESERVED)
        assert os.sched_getaffinity(0) == RESERVED
        assert all(os.sched_getaffinity(t) == REST for t in workers.tids)
        again = numapin.pin(cpus=ALL, reserve=1)
        assert not again.changed and os.sched_getaffinity(0) == RESERVED
        workers.close()

    in_child(body)


def test_reserved_pin_repeated_alone_is_quiet(pair_root: Path) -> None:
    # A single-threaded process: the calling thread is its only thread.
    def body() -> list[str]:
        numapin.pin(cpus=ALL, reserve=1)
        with logs() as records:
            again = numapin.pin(cpus=ALL, reserve=1)
        assert again.tids(Outcome.ALREADY) == (threading.get_native_id(),) and not again.changed
        assert os.sched_getaffinity(0) == RESERVED
        return warnings(records)

    assert in_child(body) == []


def test_bad_input_raises_before_anything_changes(pair_root: Path) -> None:
    def body() -> None:
        for call in (lambda: numapin.pin(5), lambda: numapin.pin(cpus=f"0-{max(ALL) + 1}"),
                     lambda: numapin.pin(cpus="1,,2"),
                     lambda: numapin.pin(0, mode="numa"), lambda: numapin.pin(0, policy="maybe"),
                     lambda: numapin.pin(0, memory="everywhere")):
            with pytest.raises(UsageError):
                call()
            assert all(m == ALL for m in masks().values())

    in_child(body)


def test_no_gpu_is_one_warning_not_a_crash(pair_root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")

    def body() -> list[str]:
        with logs() as records:
            result = numapin.pin(0)
            for _ in range(3):  # a worker that pins again and again warns once per process
                numapin.pin(0)
                with numapin.pinned(gpu=0):
                    pass
        assert result.action == "nothing pinned" and not result.threads
        assert all(m == ALL for m in masks().values())
        with pytest.raises(numapin.EnvironmentProblem) as raised:  # the cause's own class, result attached
            numapin.pin(0, strict=True)
        assert raised.value.result.action is numapin.PinAction.NOTHING  # type: ignore[attr-defined]
        return warnings(records)

    assert len(in_child(body)) == 1


def test_policy_off_and_override_and_respect_intersection(pair_root: Path) -> None:
    def body() -> None:
        assert numapin.pin(0, policy="off").action.startswith("off")
        assert all(m == ALL for m in masks().values())
        os.sched_setaffinity(0, NODE1)
        overridden = numapin.pin(0, policy="override")
        assert overridden.ownership == "external" and os.sched_getaffinity(0) == NODE0

    in_child(body)


def test_plan_after_pin_equals_plan_before(pair_root: Path) -> None:
    def body() -> None:
        before = numapin.plan()
        numapin.pin(1)
        assert numapin.plan() == before

    in_child(body)


def test_exec_marker_is_numapin_own_only_while_it_matches(pair_root: Path) -> None:
    from numapin.pinning.decision import classify
    from numapin.pinning.state import state

    def body() -> tuple[str, str, str | None]:
        os.sched_setaffinity(0, NODE0)
        os.environ["NUMAPIN_APPLIED"] = cpus(NODE1)  # the live mask differs from the marker
        stale = str(classify(CpuSet(NODE0), CpuSet(ALL), state().own_masks(os.environ)))
        os.environ["NUMAPIN_APPLIED"] = cpus(NODE0)
        fresh = str(classify(CpuSet(NODE0), CpuSet(ALL), state().own_masks(os.environ)))
        return stale, fresh, numapin.pin(0).ownership

    assert in_child(body) == ("external", "numapin", "numapin")


# -- races and fork ------------------------------------------------------------


def test_threads_spawning_threads_during_pin(pair_root: Path) -> None:
    def body() -> None:
        for round_ in range(25):
            target = NODE0 if round_ % 2 == 0 else NODE1
            result, survivors = storm_round(round_ % 2, cap=200)
            assert result.count(Outcome.FAILED) == 0
            wrong = {tid: m for tid, m in survivors.items() if m != target}
            assert not wrong, f"round {round_}: threads off target: {wrong}"

    in_child(body)


def test_pin_from_eight_threads_at_once(pair_root: Path) -> None:
    def body() -> None:
        results: list[numapin.PinResult] = []
        barrier = threading.Barrier(8)

        def call(gpu: int) -> None:
            barrier.wait()
            results.append(numapin.pin(gpu))

        callers = [threading.Thread(target=call, args=(n % 2,)) for n in range(8)]
        for t in callers:
            t.start()
        for t in callers:
            t.join()
        assert len(results) == 8 and all(r.count(Outcome.FAILED) == 0 for r in results)
        live = set(map(frozenset, masks().values()))
        record = numapin.current().applied
        assert record is not None and live == {frozenset(record.mask)}, "one consistent outcome"

    in_child(body)


def test_forked_child_repins_quietly(pair_root: Path) -> None:
    def body() -> None:
        numapin.pin(0)

        def child() -> list[str]:
            with logs() as records:
                result = numapin.pin(1)
            assert result.ownership == "numapin", "the mask it was born with is numapin's"
            assert all(m == NODE1 for m in masks().values())
            assert numapin.current().applied is not None
            return warnings(records)

        assert in_child(child) == []
        assert os.sched_getaffinity(0) == NODE0, "the parent is untouched"

    in_child(body)


# -- leases ------------------------------------------------------------------


def test_lease_restores_and_keeps_others_changes(pair_root: Path) -> None:
    def body() -> None:
        workers = Workers(3)
        meddled = workers.tids[0]
        with numapin.pinned(0) as result:
            assert result.count(Outcome.PINNED) == 4
            assert all(m == NODE0 for m in masks().values())
            born = Workers(1)  # created during the lease
            os.sched_setaffinity(meddled, NODE1)  # someone else's change meanwhile
        after = masks()
        assert after[born.tids[0]] == ALL, "new threads get the lease-taker's original mask"
        assert after[meddled] == NODE1, "someone else's change is kept"
        assert all(after[t] == ALL for t in [threading.get_native_id(), *workers.tids[1:]])
        assert numapin.current().applied is None
        workers.close()
        born.close()

    in_child(body)


def test_nested_leases(pair_root: Path) -> None:
    def body() -> None:
        workers = Workers(2)
        with numapin.pinned(0):
            with numapin.pinned(1):
                assert all(m == NODE1 for m in masks().values())
            assert all(m == NODE0 for m in masks().values())
            assert numapin.current().matches
        assert all(m == ALL for m in masks().values())
        workers.close()

    in_child(body)


def test_a_pin_inside_a_lease_is_part_of_it(pair_root: Path) -> None:
    # The lease's exit takes back what a pin inside it applied,
    # and numapin's record is what it was before the lease.
    def body() -> None:
        workers = Workers(2)
        with numapin.pinned(gpu=0):
            numapin.pin(gpu=1)
            assert all(m == NODE1 for m in masks().values())
        assert all(m == ALL for m in masks().values())
        assert numapin.current().applied is None
        with logs() as records:
            again = numapin.pin(gpu=0)
        assert again.ownership == "unconstrained" and all(m == NODE0 for m in masks().values())
        assert warnings(records) == []
        workers.close()

    in_child(body)


def test_leases_from_two_threads_may_not_overlap(pair_root: Path) -> None:
    # Overlapping, non-nested leases would each undo half of the
    # other's work; the second is refused before it changes anything.
    def body() -> str:
        entered, leave = threading.Event(), threading.Event()

        def first() -> None:
            with numapin.pinned(gpu=0):
                entered.set()
                leave.wait()

        holder = threading.Thread(target=first)
        holder.start()
        entered.wait()
        try:
            with pytest.raises(UsageError, match="holds a numapin lease") as info, numapin.pinned(gpu=1):
                pass
            assert all(m == NODE0 for m in masks().values()), "the refused lease changed nothing"
        finally:
            leave.set()
            holder.join()
        assert all(m == ALL for m in masks().values())
        with numapin.pinned(gpu=1):  # once the first is over, another thread may take one
            assert all(m == NODE1 for m in masks().values())
        return str(info.value)

    assert "nest within one thread" in in_child(body)


def test_threadpools_without_threadpoolctl_is_one_warning(pair_root: Path, monkeypatch: pytest.MonkeyPatch,
                                                          caplog: pytest.LogCaptureFixture) -> None:
    # As if threadpoolctl were not installed (None in sys.modules makes its import fail).
    monkeypatch.setitem(__import__("sys").modules, "threadpoolctl", None)

    def body() -> tuple[tuple[str, ...], list[str]]:
        with caplog.at_level(logging.WARNING, logger="numapin"):
            first = numapin.pin(0, threadpools=True)
            numapin.pin(0, threadpools=True)
        return first.threadpools, [r.getMessage() for r in caplog.records]

    pools, messages = in_child(body)
    assert pools == () and len(messages) == 1 and "threadpoolctl is not installed" in messages[0]


def test_a_second_pin_with_cached_facts_opens_no_file_under_the_root(pair_root: Path) -> None:
    import sys

    def child() -> list[tuple[str, object]]:
        numapin.pin(1, memory="preferred")  # reads the facts
        seen: list[tuple[str, object]] = []
        recording = [True]

        def hook(event: str, args: tuple[object, ...]) -> None:
            # "open" is raised by open() and os.open(), a dir_fd open included (then with a relative path).
            if recording[0] and event in ("open", "os.scandir"):
                seen.append((event, args[0]))

        sys.addaudithook(hook)  # for the rest of this child's life: hence the flag
        result = numapin.pin(1, memory="preferred")
        recording[0] = False
        assert result.memory is not None and result.memory.asked is numapin.MemoryMode.PREFERRED
        return seen

    opened = in_child(child)
    under_root = [(e, p) for e, p in opened if not isinstance(p, (str, bytes)) or not os.path.isabs(p)
                  or os.fsdecode(p).startswith(str(pair_root))]
    assert under_root == [], under_root


def test_pin_applies_a_placement_already_decided(pair_root: Path) -> None:
    def child() -> None:
        decided = numapin.plan(1)
        result = numapin.pin(placement=decided)
        assert result.placement == decided and result.placement.node == decided.node
        assert set(result.target or ()) == NODE1 and set().union(*masks().values()) == NODE1
        for extra in ({"gpu": 0}, {"cpus": "0"}, {"mode": "node"}, {"reserve": 1}):
            with pytest.raises(UsageError, match="leave out " + next(iter(extra))):
                numapin.pin(placement=decided, **extra)  # type: ignore[arg-type]
        elsewhere = numapin.base.frozen.replace(decided, cpus=CpuSet([max(ALL) + 1]))
        with pytest.raises(UsageError, match="outside the allowed CPUs"):
            numapin.pin(placement=elsewhere)
        numapin.pin(0)  # and back

    in_child(child)


def test_a_rehearsal_pins_nothing_and_names_what_the_user_gave(tmp_path: Path) -> None:
    # A machine whose CPUs are not this host's (dgx-h100 on this host), through NUMAPIN_FSROOT: pin() places nothing
    # and says so, naming the variable the user set, never the host's own CPUs as someone's external mask; exec says
    # the same of what it was given, --machine or the variable.
    import subprocess
    import sys

    import live
    from numapin.facts import synthetic

    root = synthetic.write("dgx-h100", tmp_path / "dgx")
    code = "import numapin; r = numapin.pin(gpu=0); print(r.action.name, r.mask is None)"
    env = live.without_inputs(dict(os.environ)) | {"NUMAPIN_FSROOT": str(root)}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env)
    assert done.stdout.split() == ["NOTHING", "True"], done.stdout + done.stderr
    assert f"NUMAPIN_FSROOT={root} (the synthetic machine dgx-h100) is not this host" in done.stderr, done.stderr
    assert "external" not in done.stderr and "--machine dgx-h100" not in done.stderr.split("; --machine pair")[0]
    exec_env = subprocess.run([sys.executable, "-m", "numapin", "exec", "--local-rank", "0", "--", "true"],
                              capture_output=True, text=True, timeout=60, env=env)
    typed = subprocess.run([sys.executable, "-m", "numapin", "exec", "--machine", "dgx-h100", "--", "true"],
                           capture_output=True, text=True, timeout=60,
                           env=live.without_inputs(dict(os.environ)))
    assert exec_env.returncode == 0 and f"NUMAPIN_FSROOT={root}" in exec_env.stderr, exec_env.stderr
    assert typed.returncode == 0 and "--machine dgx-h100 is not this host" in typed.stderr, typed.stderr
