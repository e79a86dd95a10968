"""``numapin plan``: where each local rank's worker would run."""

from __future__ import annotations

import argparse
import sys

from .common import (
    Exit,
    add_cores,
    add_picture,
    add_root,
    count_arg,
    cpuset_arg,
    dash,
    gpu_list_arg,
    machine_root,
    modes,
    picture_to_stdout,
    pictures,
    refuse_together,
)

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence

    from ..facts.network import RankNic


HELP = "where each local rank's worker would run"


def run(args: argparse.Namespace) -> int:
    import json

    from ..base.text import counted, table
    from ..facts.machine import cached
    from ..facts.network import assign
    from ..placement.plan import plan_ranks

    quiet = picture_to_stdout(args)
    refuse_together(args, ("cpus", "mode", "both say which CPUs each rank gets (--cpus is a placement of its own)"),
                     ("gpus", "ranks", "both say which ranks to plan"))
    with machine_root(args) as root:
        plans = plan_ranks(mode=args.mode or "node", reserve=args.reserve, cpus=args.cpus, gpus=args.gpus,
                           ranks=args.ranks, cores=args.cores, root=root)
        facts = cached(root)  # the facts plan_ranks() just read
        for note in facts.notes:  # an entry of CUDA_VISIBLE_DEVICES that ends the list, mixed models...
            print(f"numapin plan: note: {note}", file=sys.stderr)
        if args.svg or args.html:
            what = f"mode {plans[0].mode}" + (f" · reserve {args.reserve}" if args.reserve else "")
            where = args.machine or facts.topology.root
            title = f"numapin plan · {what} · {where}" + (f" · {plans[0].reason}" if len(plans) == 1 else "")
            pictures(args, facts, plans, title)
        nics = assign(facts.network(), [(p.rank, p.pci) for p in plans])  # read while the root is there
    if quiet:
        return Exit.OK
    if args.json:
        print(json.dumps([{**p.as_dict(), "nic": None if n is None else n.as_dict()}
                          for p, n in zip(plans, nics, strict=True)], indent=2))
        return Exit.OK
    # With --reserve, the workers' CPUs (what exec pins every thread to) and the reserved ones apart.
    reserving = any(p.reserved for p in plans)
    networked = any(nics)
    header = ["rank", "gpu", "pci", "node", "workers" if reserving else "cpus", "mems"] + (
        ["reserved"] if reserving else []) + (["nic"] if networked else [])
    rows = [[dash(p.rank), dash(p.gpu), p.where or "-", dash(p.node), str(p.workers), str(p.mems)]
            + ([str(p.reserved)] if reserving else [])
            + ([f"{n.nic.name} ({n.relation})" if n else "-"] if networked else [])
            for p, n in zip(plans, nics, strict=True)]
    print("\n".join(table(header, rows)))
    footer = f"mode {plans[0].mode}, {counted(len(plans), 'rank')}"
    if reserving:
        footer += "; numapin exec exports each rank's reserved CPUs to it as NUMAPIN_RESERVED"
    print(footer)
    for shared in _shared_nics(nics):
        print(shared)
    return Exit.OK


def _shared_nics(nics: Sequence[RankNic | None]) -> list[str]:
    """One line per NIC that several ranks were given (no NIC near enough for each)."""
    said: dict[str, list[str]] = {}
    for n in nics:
        if n is not None and n.shared_with:
            said.setdefault(n.nic.name, []).append(dash(n.rank))
    return [f"ranks {', '.join(ranks)} share {name}: it is the nearest NIC of each" for name, ranks in said.items()]


def arguments(plan: argparse.ArgumentParser) -> None:
    plan.description = ("Print the placement of every local rank: one row per visible GPU, local rank r driving "
                        "GPU r % N (or entry r of NUMAPIN_RANK_MAP); with --gpus, rank i drives the i-th GPU listed.")
    plan.add_argument("--mode", choices=modes(), help="placement mode (default: node)")
    plan.add_argument("--cpus", type=cpuset_arg, metavar="LIST", help="explicit cpulist instead of a mode")
    plan.add_argument("--reserve", type=count_arg, default=0, metavar="K",
                      help="set K whole cores aside for one latency-critical thread (the fastest cores)")
    add_cores(plan)
    plan.add_argument("--gpus", type=gpu_list_arg, metavar="LIST",
                      help="rank i drives the i-th GPU listed: logical indices, e.g. 0,2 or 0-3")
    plan.add_argument("--ranks", type=count_arg, metavar="N",
                      help="plan local ranks 0 to N-1, as a launcher of N processes would start them")
    plan.add_argument("--json", action="store_true", help="a JSON list, one object per rank")
    add_picture(plan)
    add_root(plan)
    plan.set_defaults(func=run)
