"""``numapin keep``: keep processes' placements while they run: notice drift, put back what is numapin's."""

from __future__ import annotations

import argparse
import os
import sys

from .common import Exit, count_arg, seconds_arg

HELP = "keep processes' placements while they run: notice drift, put back what is numapin's"


def run(args: argparse.Namespace) -> int:

    from ..base.stop import STOPPING, Stop
    from ..base.text import counted
    from ..facts.machine import cached as cached_facts
    from ..pinning.keeper import DEFAULT_PERIOD
    from ..tools.keep import keep_processes

    # The machine the processes were placed on ($NUMAPIN_FSROOT when a test or rehearsal set it): their cpusets
    # are always the live ones.
    facts = cached_facts(None, os.environ)
    with Stop.on(*STOPPING) as stop:
        seen = keep_processes(args.pids, facts, args.period or DEFAULT_PERIOD, looks=args.looks, as_json=args.json,
                              stop=stop)
    if not args.json:
        print(f"numapin keep: {counted(seen, 'drift')} seen", file=sys.stderr)
    return Exit.OK


def arguments(keep: argparse.ArgumentParser) -> None:
    keep.description = ("Keep the placement numapin applied to each PID (any program: its record says what) while "
                        "it runs, from outside it: every period, notice a change of the cgroup's CPUs or memory "
                        "nodes, a thread whose mask someone else changed, a new thread on a mask that is not the "
                        "placement; answer each by the process's policy (a cpuset change: the placement decided "
                        "again inside it and put back; a foreign mask: reported under respect, put back under "
                        "override), count it in the process's record (ps and threads show it) and print it. Ends "
                        "when every PID has ended, after --looks looks, or at ^C/SIGTERM (exit 0). Memory "
                        "policies cannot be set from outside: a change of memory nodes is reported.")
    keep.add_argument("pids", nargs="+", type=count_arg, metavar="PID", help="the processes to keep")
    keep.add_argument("--period", type=seconds_arg, default=None, metavar="SECONDS",
                      help="seconds between two looks (default 1)")
    keep.add_argument("--looks", type=count_arg, default=None, metavar="N", help="stop after N looks")
    keep.add_argument("--json", action="store_true", help="each drift as one JSON object per line")
    keep.set_defaults(func=run)
