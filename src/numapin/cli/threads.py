"""``numapin threads``: where every thread of a process runs."""

from __future__ import annotations

import argparse

from .common import add_remote_bound, add_root, count_arg, cpuset_arg, machine_root, modes, refuse_together

HELP = "where every thread of a process runs"


def run(args: argparse.Namespace) -> int:
    import json

    from ..placement.modes import parse_mode
    from ..placement.ranks import LocalRank
    from ..tools.threads_report import threads_report

    refuse_together(args, ("cpus", "mode", "both say which CPUs the process should be on"))
    with machine_root(args) as root:
        bound = args.max_remote_memory / 100
        rank = None if args.local_rank is None else LocalRank(args.local_rank, "--local-rank")
        report = threads_report(args.pid, gpu=args.gpu, rank=rank, cpus=args.cpus,
                                mode=None if args.mode is None else parse_mode(args.mode), root=root, max_remote=bound)
    verdict = report.check() if args.check else 0  # no placement to check against: the error, before any table
    if args.json:
        print(json.dumps(report.as_dict(), indent=2))
    else:
        print(report.table())
    return verdict


def arguments(th: argparse.ArgumentParser) -> None:
    th.description = ("One row per thread: tid, name, mask, last CPU, inside the placement, pinned by numapin; "
                      "then memory by node.")
    th.add_argument("pid", type=count_arg, metavar="PID", help="the process to inspect")
    which = th.add_mutually_exclusive_group()
    which.add_argument("--gpu", type=count_arg, metavar="N",
                       help="compare with GPU N's node placement, N as the process sees its GPUs (its "
                            "CUDA_VISIBLE_DEVICES), as in every numapin command")
    which.add_argument("--local-rank", type=count_arg, metavar="N",
                       help="compare with local rank N's placement (its GPU in the process's view)")
    which.add_argument("--cpus", type=cpuset_arg, metavar="LIST", help="compare with these CPUs")
    th.add_argument("--mode", choices=modes(),
                    help="compare with this mode's placement (default: the process's record's, else node)")
    th.add_argument("--json", action="store_true",
                    help="one JSON object: the placement compared with, every thread, the count outside, "
                         "memory by node (all and own bytes, remote share)")
    th.add_argument("--check", action="store_true",
                    help="exit 1 if a thread is outside the placement or too much memory is remote")
    add_remote_bound(th)
    add_root(th)
    th.set_defaults(func=run)
