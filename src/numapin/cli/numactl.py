"""``numapin numactl``: numactl's language, carried out by numapin (no numactl needed)."""

from __future__ import annotations

import argparse

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence


HELP = "numactl's language, carried out by numapin (no numactl needed)"


def run(words: Sequence[str]) -> int:
    """numactl's own arguments, read by numapin.tools.numactl (argparse would take its options for numapin's)."""
    if list(words) in (["-h"], ["--help"]):
        from . import build_parser

        build_parser("numactl").parse_args(["numactl", "--help"])
    from ..tools import numactl

    return numactl.run(words)


def arguments(front: argparse.ArgumentParser) -> None:
    front.description = (
        "numactl's language without numactl: bind PROGRAM as numactl would (every thread at birth, inside the "
        "cgroup cpuset), then exec it. Takes --cpunodebind/-N NODES, --physcpubind/-C CPUS, --membind/-m NODES, "
        "--preferred/-p NODE, --localalloc/-l, --show/-s, --hardware/-H (lists: 0,2 or 0-3 or all; "
        "--opt=VALUE, --opt VALUE, -X VALUE). Exits non-zero and runs nothing where numactl would refuse, so a "
        "caller's probe and step-down work; --interleave and the other options it does not carry out are "
        "refused by name.")
    front.add_argument("numactl_args", nargs=argparse.REMAINDER, metavar="[OPTIONS] PROGRAM [ARGS...]")
