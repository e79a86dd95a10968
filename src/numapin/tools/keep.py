"""Keeping placements from outside the process: ``numapin keep PID...`` and ``numapin exec --keep``.

Any program can be kept, Python or not: a thread's mask can be read and set by
another process of the same user (or root). What is kept is what the process's
record says numapin applied; the rules are :mod:`numapin.pinning.keeper`'s.
Memory policies are each thread's own and cannot be set from outside: a change
of the cgroup's memory nodes is reported (the kernel rebinds the policies itself).

``exec --keep`` leaves a small watcher behind: a process that is nobody's child
(the program never meets it in ``wait()``), looks every period, and ends as soon
as the program does (it waits on the program's pidfd, not on a timer).
"""

from __future__ import annotations

import os
import select
import sys

from ..base.errors import UsageError
from ..base.logger import log
from ..pinning import record as records
from ..pinning.keeper import Keeper

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import TextIO

    from ..base.stop import Stop
    from ..facts.machine import Facts
    from ..pinning.keeper import Drift
    from ..pinning.record import Record

__all__ = ["keep_processes", "keeper_of", "start_watcher"]


def keeper_of(pid: int, facts: Facts, record: Record | None = None) -> Keeper:
    """A keeper for process ``pid`` from outside it: :class:`UsageError` when there is no such process or
    numapin placed nothing there.

    The record is read, and written again, where the process's own pins keep it: its owner's folder, as
    its owner's file (root keeping a user's worker), so that the worker's next pin replaces the keeper's
    copy and the keeper follows it, never the other way round.
    """
    if records.start_time(pid) is None:
        raise UsageError(f"no process {pid}", value=pid)
    located = records.locate(pid)
    found = record or (None if located is None else located[0])
    if found is None:
        raise UsageError(f"process {pid}: numapin placed nothing there (no record of it): nothing to keep; place it "
                         "with numapin exec, NUMAPIN_AUTOPIN=1 or numapin.pin()", value=pid)
    where = [None if located is None else located[1]]

    def source() -> Record | None:
        again = records.locate(pid)
        if again is None:
            return None
        where[0] = again[1]
        return again[0]

    def publish(kept: Record) -> None:
        if where[0] is None:  # a record handed in, found nowhere: this user's own folder
            records.publish(records.stamp(kept))
        else:  # never a copy elsewhere, where it would outlive the owner's next pin
            records.rewrite(records.stamp(kept), where[0])

    return Keeper(pid, found, facts, publish=publish, source=source)


def keep_processes(pids: Sequence[int], facts: Facts, period: float, *, looks: int | None = None,
                   out: TextIO | None = None, as_json: bool = False, stop: Stop | None = None) -> int:
    """Keep each of ``pids`` until every one has ended (or ``looks`` looks were made, or ``stop`` is asked);
    each drift is one line of ``out``. The number of drifts seen."""
    import json
    import time

    write = out or sys.stdout
    keepers = [keeper_of(pid, facts) for pid in dict.fromkeys(pids)]
    # Said once each is watched: what changes from now on is drift (a script may wait for this line).
    for keeper in keepers:  # what moved before the keeper came is no drift it sees: said here, not silently taken
        off, threads = keeper.off_placement()
        if off:
            print(f"numapin keep: {keeper.pid}: {off} of {threads} threads were already off its placement (CPUs "
                  f"{keeper.record.target}) when the keeper started; they are left where they are, and only what "
                  f"moves from now on is drift (numapin threads {keeper.pid} shows them)", file=sys.stderr)
    print(f"numapin keep: keeping {', '.join(str(k.pid) for k in keepers)} every {period:g} s", file=sys.stderr,
          flush=True)
    seen = made = 0
    while keepers and (looks is None or made < looks):
        if stop is None:
            time.sleep(period)
        elif stop.wait(period):
            break
        made += 1
        for keeper in list(keepers):
            try:
                events: list[Drift] = keeper.check()
            except ProcessLookupError:
                keepers.remove(keeper)
                continue
            except OSError as exc:
                log.debug("keeper: process %d: look failed: %s", keeper.pid, exc)
                continue
            for event in events:
                seen += 1
                write.write((json.dumps({"pid": keeper.pid, **event.as_dict()}) if as_json
                             else f"{keeper.pid}: {event}") + "\n")
            write.flush()
    return seen


def start_watcher(keeper: Keeper, period: float) -> None:
    """Leave a process behind that keeps this one (about to exec its program) with ``keeper`` until it ends.

    The keeper is made here, before the exec: its first view of the threads is the placement just applied,
    so a mask changed at any time after (even before the watcher's first look) is drift. Forked twice, so
    that the watcher is nobody's child here: a program that waits for its children never waits for it. Its
    stdin and stdout are closed (a pipe reading the program ends with the program); its stderr stays, for
    the keeper's log lines.
    """
    pid = keeper.pid
    first = os.fork()
    if first:
        os.waitpid(first, 0)  # the middle process ends at once
        return
    code = 0
    try:
        if os.fork():
            os._exit(0)
        null = os.open(os.devnull, os.O_RDWR)
        os.dup2(null, 0)
        os.dup2(null, 1)
        os.close(null)
        done = os.pidfd_open(pid)  # readable once the program has ended

        def ended(timeout: float) -> bool:
            return bool(select.select([done], [], [], timeout)[0])

        keeper.run(period, ended)
    except BaseException as exc:  # the watcher must never return into numapin exec's code as a second exec
        log.warning("keeper: the watcher of process %d stopped: %s", pid, exc)
        code = 1
    finally:
        os._exit(code)
