"""``numapin buffer``: fill a host buffer on a GPU's node: where its pages went, how fast."""

from __future__ import annotations

import argparse
import sys

from .common import Exit, bytes_arg, count_arg, cpuset_arg, gpu_list_arg, positive_arg

HELP = "fill a host buffer on a GPU's node: where its pages went, how fast"


def run(args: argparse.Namespace) -> int:
    import json

    from ..tools.buffer import describe, fill

    report = fill(args.size, gpu=args.gpu, node=args.node, gpus=args.gpus,
                  nodes=None if args.nodes is None else sorted(args.nodes), hugepages=args.hugepages,
                  threads=args.threads, lock=args.lock, progress=None if args.json else sys.stderr)
    print(json.dumps(report, indent=2) if args.json else describe(report))
    return Exit.OK


def arguments(buf: argparse.ArgumentParser) -> None:
    from ..kernel.mapping import HUGEPAGES

    buf.description = ("Fill a host buffer on a GPU's node (or a node, or spread over several) as numapin.host_buffer "
                       "does: mapped, bound to the node, filled by threads on its CPUs; print where its pages went, "
                       "in what pages, how fast it filled and the NICs nearest it, then give it back. For sizing "
                       "pools on a host.")
    where = buf.add_mutually_exclusive_group()
    where.add_argument("--gpu", type=count_arg, metavar="N",
                       help="GPU N's node (default: this process's GPU, as pin's)")
    where.add_argument("--node", type=count_arg, metavar="N", help="NUMA node N")
    where.add_argument("--nodes", type=cpuset_arg, metavar="LIST", help="spread page by page over these nodes "
                       "(0-1; MPOL_INTERLEAVE, or each node's threads filling its stripes where the policy is refused)")
    where.add_argument("--gpus", type=gpu_list_arg, metavar="LIST", help="spread over these GPUs' nodes (0,4)")
    buf.add_argument("--size", required=True, type=bytes_arg, metavar="SIZE", help="bytes, or with K, M, G, T: 8G")
    buf.add_argument("--hugepages", choices=HUGEPAGES, help="huge pages from the node's pool (base "
                     "pages, with a note, where too few are free); thp: transparent huge pages, where the kernel's "
                     "settings give them (a note where they cannot, or where each fault stalls on compaction)")
    buf.add_argument("--threads", type=positive_arg, metavar="K", help="filling threads (default: the node's CPUs "
                     "this process may use, at most 16)")
    buf.add_argument("--lock", action="store_true", help="mlock it too")
    buf.add_argument("--json", action="store_true", help="one JSON object instead of text")
    buf.set_defaults(func=run)
