"""A pin interrupted, a process forked in the middle: what numapin leaves behind.

The contract: a pin interrupted by an exception (KeyboardInterrupt, a signal
handler's exception) either completes, or rolls back what it changed, or
records exactly what it applied — never a process split between two masks that
numapin then calls external. The same for a lease. A child forked at any moment
has a record that matches the mask it was born with.

The probes that race a signal or a fork against a walk are timing-based and
run with ``-m slow``; the fork inside a lease is deterministic and quick.
Each runs in a child process (nothing pinned leaks into pytest).
"""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import pytest

import numapin
from conftest import in_child
from live import NODE0, NODE1, masks
from numapin.cpuset import CpuSet
from numapin.pinning.decision import PinAction
from numapin.pinning.state import state

#: Threads that make a walk long enough to be interrupted in its middle.
MANY = 1500


def _crowd(count: int) -> threading.Event:
    """Start ``count`` idle threads (small stacks); set the returned event to let them end."""
    threading.stack_size(64 * 1024)
    done = threading.Event()
    for _ in range(count):
        threading.Thread(target=done.wait, daemon=True).start()
    return done


def _one_mask() -> set[frozenset[int]]:
    return {frozenset(m) for m in masks().values()}


@pytest.mark.slow
@pytest.mark.parametrize("inside_lease", [False, True], ids=["pin", "lease"])
def test_an_interrupted_pin_is_rolled_back_or_complete_never_split(pair_root: Path, inside_lease: bool) -> None:
    def child() -> tuple[int, int]:
        # ^C is what is sent: a shell's background job inherits SIGINT ignored, and Python then raises nothing.
        signal.signal(signal.SIGINT, signal.default_int_handler)
        done = _crowd(MANY)
        numapin.pin(1)
        started = time.perf_counter()
        numapin.pin(0)
        numapin.pin(1)
        walk = (time.perf_counter() - started) / 2  # one pin of every thread, measured here
        interrupted = 0
        rounds = 24
        for step in range(rounds):
            target = NODE0 if step % 2 == 0 else NODE1
            delay = walk * (step + 0.5) / rounds
            timer = threading.Timer(delay, os.kill, (os.getpid(), signal.SIGINT))
            result = None
            timer.start()
            try:
                if inside_lease:
                    with numapin.pinned(0 if target is NODE0 else 1) as result:
                        time.sleep(walk)  # the lease's exit may be interrupted too
                else:
                    result = numapin.pin(0 if target is NODE0 else 1)
                time.sleep(walk * 2)
            except KeyboardInterrupt:
                interrupted += result is None  # raised inside pin() or the lease's entry
            timer.join()
            seen = _one_mask()
            assert len(seen) == 1, f"round {step}: the process is split between {sorted(map(sorted, seen))}"
            assert numapin.current().matches, f"round {step}: {numapin.current()}"
            # The next pin never calls what numapin left external, and moves every thread.
            again = numapin.pin(1 if target is NODE0 else 0)
            assert again.action is PinAction.PINNED, f"round {step}: {again}"
            assert _one_mask() == {frozenset(NODE1 if target is NODE0 else NODE0)}
        done.set()
        return interrupted, rounds

    interrupted, rounds = in_child(child)
    assert interrupted >= 1, f"no signal landed inside a pin in {rounds} rounds"


@pytest.mark.slow
def test_a_child_forked_while_another_thread_pins_owns_the_mask_it_was_born_with(pair_root: Path) -> None:
    def child() -> tuple[int, int]:
        done = _crowd(MANY // 3)
        numapin.pin(0)
        stop = threading.Event()
        verdicts: list[str] = []

        def forker() -> None:
            while not stop.is_set() and len(verdicts) < 25:
                pid = os.fork()
                if pid == 0:  # the child: one thread, the mask it was born with
                    code = 1
                    try:
                        born = CpuSet(os.sched_getaffinity(0))
                        record = state().applied
                        if record is not None and record.mask == born and numapin.current().matches:
                            code = 0 if numapin.pin(1).action is PinAction.PINNED else 3
                        else:
                            code = 2
                    finally:
                        os._exit(code)
                _, status = os.waitpid(pid, 0)
                verdicts.append({0: "ok", 2: "record differs", 3: "refused as external"}.get(
                    os.waitstatus_to_exitcode(status), f"exit {status}"))
                time.sleep(0.001)

        thread = threading.Thread(target=forker)
        thread.start()
        pins = 0
        while thread.is_alive():
            numapin.pin(pins % 2)
            pins += 1
        stop.set()
        thread.join()
        done.set()
        bad = [v for v in verdicts if v != "ok"]
        assert not bad, f"{len(bad)} of {len(verdicts)} children: {bad[:5]}"
        return len(verdicts), pins

    forks, pins = in_child(child)
    assert forks == 25 and pins > 2


def test_a_child_forked_inside_a_lease_leaves_it_with_a_record_of_its_own(pair_root: Path) -> None:
    def child() -> None:
        numapin.pin(0)
        with numapin.pinned(1):
            pid = os.fork()
        if pid == 0:  # the child, out of the lease it inherited
            code = 1
            try:
                mask = os.sched_getaffinity(0)
                current = numapin.current()
                again = numapin.pin(1)
                code = 0 if (mask == NODE0 and current.matches and again.action is PinAction.PINNED
                             and os.sched_getaffinity(0) == NODE1) else 2
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0, "the child's record still named the lease's mask"
        assert os.sched_getaffinity(0) == NODE0 and numapin.current().matches

    in_child(child)
