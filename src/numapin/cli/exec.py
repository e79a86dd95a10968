"""``numapin exec``: pin, then replace this process with PROGRAM (bind at birth)."""

from __future__ import annotations

import argparse
import os

from ..base.environment import LOCAL_RANK_VARIABLES
from .common import (
    CliError,
    Exit,
    add_cores,
    add_root,
    add_target,
    after_dashes,
    count_arg,
    cpuset_arg,
    machine_root,
    refuse_together,
    seconds_arg,
)

HELP = "pin, then replace this process with PROGRAM (bind at birth)"


def run(args: argparse.Namespace) -> int:
    from ..pinning.memory import parse_memory_mode
    from ..pinning.request import ExecRequest, parse_cores, parse_exec_policy, parse_nics
    from ..placement.modes import parse_mode
    from ..tools.exec import apply_exec, exec_program, prepare_exec

    program = after_dashes(args.program, "no PROGRAM given (numapin exec [options] -- PROGRAM [ARGS...])")
    if args.json and not args.dry_run:
        raise CliError("--json formats the --dry-run report: add --dry-run (a real exec prints nothing of its own)")
    refuse_together(
        args,
        ("gpu", "nodes", "both choose the CPUs (--nodes is a binding without a GPU)"),
        ("local_rank", "nodes", "both choose the CPUs (--nodes is a binding without a GPU)"),
        ("cpus", "nodes", "both choose the CPUs"),
        ("cpus", "mode", "both choose the CPUs (--cpus is a placement of its own)"),
        ("nodes", "mode", "both choose the CPUs (--nodes takes the nodes' CPUs whole)"))
    if args.keep_period is not None and not args.keep:
        raise CliError("--keep-period is the period of --keep: add --keep")
    if args.mems is not None and args.memory == "none":
        raise CliError("--mems and --memory none: --mems names the memory policy's nodes, --memory none sets no "
                       "policy: give one")
    # Everything that reads the machine happens inside machine_root(): a synthetic
    # machine's folder is removed before the program replaces this process.
    with machine_root(args) as root:
        request = ExecRequest(
            program=program,
            gpu=args.gpu,
            local_rank=args.local_rank,
            mode=parse_mode(args.mode or "node"),
            cpus=args.cpus,
            reserve=args.reserve,
            memory=parse_memory_mode(args.memory),
            policy=parse_exec_policy(args.policy),
            strict=args.strict,
            root=root,
            threads=args.threads,
            nodes=args.nodes,
            mems=args.mems,
            cores=parse_cores(args.cores),
            nics=parse_nics(args.nics),
        )
        prepared = prepare_exec(request, os.environ)
        if args.dry_run:
            if args.json:
                import json

                print(json.dumps(prepared.as_dict(), indent=2))
            else:
                print(prepared.describe())
            return Exit.OK
        env = apply_exec(prepared)
        if args.keep:
            env = _watched(env, args.keep_period, root)
    return exec_program(prepared, env)


def _watched(env: dict[str, str], period: float | None, root: str | None) -> dict[str, str]:
    """Leave a watcher that keeps this process's placement once it is the program; the program's environment
    without NUMAPIN_KEEP (its start-up hook would keep it a second time)."""
    from ..base.environment import KEEP
    from ..base.logger import log
    from ..facts.machine import cached as cached_facts
    from ..pinning.keeper import DEFAULT_PERIOD
    from ..pinning.state import state
    from ..tools.keep import keeper_of, start_watcher

    record = state().published
    if record is None:
        log.warning("--keep: numapin placed nothing here (or could not write its record): nothing to keep")
    else:
        start_watcher(keeper_of(os.getpid(), cached_facts(root, os.environ), record), period or DEFAULT_PERIOD)
    return {k: v for k, v in env.items() if k != KEEP}


def arguments(ex: argparse.ArgumentParser) -> None:
    ex.description = ("Pin this process for its GPU (CPUs and memory), mark the mask as numapin's, then exec "
                      "PROGRAM: same pid, same stdio, PROGRAM's own exit code and signals. Local ranks are read "
                      "from " + ", ".join(LOCAL_RANK_VARIABLES) + " (first set wins).")
    add_target(ex)
    ex.add_argument("--cpus", type=cpuset_arg, metavar="LIST", help="explicit cpulist instead of a mode")
    ex.add_argument("--nodes", type=cpuset_arg, metavar="LIST",
                    help="node-only binding: the CPUs of these NUMA nodes (as numactl -N), instead of a GPU's")
    ex.add_argument("--mems", type=cpuset_arg, metavar="LIST",
                    help="the memory policy's nodes instead of the placement's; alone (no --gpu, --cpus, --nodes): "
                         "memory-only binding, the CPUs left as they are (as numactl -m)")
    ex.add_argument("--reserve", type=count_arg, default=0, metavar="K",
                    help="keep K cores out of the mask (the fastest), exported as NUMAPIN_RESERVED for one hot thread")
    add_cores(ex)
    from ..pinning.memory import MemoryMode
    from ..pinning.request import EXEC_POLICIES, Nics

    ex.add_argument("--nics", choices=[n.value for n in Nics], default="none",
                    help="auto: export the GPU's nearest NIC as UCX_NET_DEVICES and NVSHMEM_HCA_LIST (never "
                         "over a value already set; NCCL is left to choose its own); none: nothing (default)")
    ex.add_argument("--memory", choices=[m.value for m in MemoryMode], default="preferred",
                    help="memory policy for the GPU's node (default: preferred)")
    ex.add_argument("--policy", choices=[p.value for p in EXEC_POLICIES], default="respect",
                    help="what to do with a mask someone else set (default: respect)")
    ex.add_argument("--threads", default="auto", metavar="keep|auto|N",
                    help="thread pools (OMP_NUM_THREADS, MKL_NUM_THREADS, OPENBLAS_NUM_THREADS) when unset: "
                         "auto sizes them to the rank's share of the placement's CPUs (default; mode node: the "
                         "node's CPUs over its GPUs), N to N, keep leaves them; a value already set is never changed")
    ex.add_argument("--strict", action="store_true",
                    help="exit 2 instead of stepping down or running unpinned")
    ex.add_argument("--keep", action="store_true",
                    help="keep the placement while PROGRAM runs, any program: a small watcher process notices "
                         "a cpuset change or a thread someone else moved, answers by --policy and ends with "
                         "PROGRAM (NUMAPIN_KEEP is then not handed on: one keeper is enough); see numapin keep")
    ex.add_argument("--keep-period", type=seconds_arg, default=None, metavar="SECONDS",
                    help="with --keep: seconds between two looks (default 1)")
    ex.add_argument("--dry-run", action="store_true", help="print what would be done; run nothing")
    ex.add_argument("--json", action="store_true", help="with --dry-run: print JSON")
    add_root(ex)
    ex.add_argument("program", nargs=argparse.REMAINDER, metavar="-- PROGRAM [ARGS...]")
    ex.set_defaults(func=run)
