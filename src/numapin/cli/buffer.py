"""``numapin buffer``: fill a host buffer on a GPU's node: where its pages went, how fast."""

from __future__ import annotations

import argparse
import sys

from .common import Exit, bytes_arg, count_arg, positive_arg

HELP = "fill a host buffer on a GPU's node: where its pages went, how fast"


def run(args: argparse.Namespace) -> int:
    import json

    from ..tools.buffer import describe, fill

    report = fill(args.size, gpu=args.gpu, node=args.node, hugepages=args.hugepages, threads=args.threads,
                  lock=args.lock, progress=None if args.json else sys.stderr)
    print(json.dumps(report, indent=2) if args.json else describe(report))
    return Exit.OK


def arguments(buf: argparse.ArgumentParser) -> None:
    buf.description = ("Fill a host buffer on a GPU's node (or a node) as numapin.host_buffer does: mapped, bound to "
                       "the node, filled by threads on its CPUs; print where its pages went and how fast it filled, "
                       "then give it back. For sizing pools on a host.")
    where = buf.add_mutually_exclusive_group()
    where.add_argument("--gpu", type=count_arg, metavar="N",
                       help="GPU N's node (default: this process's GPU, as pin's)")
    where.add_argument("--node", type=count_arg, metavar="N", help="NUMA node N")
    buf.add_argument("--size", required=True, type=bytes_arg, metavar="SIZE", help="bytes, or with K, M, G, T: 8G")
    buf.add_argument("--hugepages", choices=("2M", "1G"), help="huge pages from the node's pool (base pages, "
                     "with a note, where too few are free)")
    buf.add_argument("--threads", type=positive_arg, metavar="K", help="filling threads (default: the node's CPUs "
                     "this process may use, at most 16)")
    buf.add_argument("--lock", action="store_true", help="mlock it too")
    buf.add_argument("--json", action="store_true", help="one JSON object instead of text")
    buf.set_defaults(func=run)
