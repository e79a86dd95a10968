"""``numapin exec``: pin, then replace this process with PROGRAM (bind at birth)."""

from __future__ import annotations

import argparse
import os

from ..base.environment import LOCAL_RANK_VARIABLES
from .common import (
    CliError,
    Exit,
    add_option,
    add_root,
    add_target,
    after_dashes,
    machine_root,
    refuse_together,
    seconds_arg,
)

HELP = "pin, then replace this process with PROGRAM (bind at birth)"


def run(args: argparse.Namespace) -> int:
    from ..pinning.options import OPTIONS
    from ..pinning.request import ExecRequest
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
        # Each option parsed once, here, by its declaration's parser (what argparse typed already is kept, and a
        # default the table holds typed is a value, not text).
        request = ExecRequest(program=program, root=root, machine=args.machine or None, **{
            name: option.parse(value) if type(value) is str and option.kind in ("choice", "text") else value
            for name, option in OPTIONS.items() if (value := getattr(args, name)) is not None})
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
    for name in ("cpus", "nodes", "mems", "reserve", "cores", "nics", "memory", "policy", "threads", "strict"):
        add_option(ex, name)
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
