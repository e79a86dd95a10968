"""``numapin machine``: write a synthetic machine to a folder, for --root or NUMAPIN_FSROOT."""

from __future__ import annotations

import argparse

from .common import CliError, Exit, count_arg

HELP = "write a synthetic machine to a folder, for --root or NUMAPIN_FSROOT"


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from ..base.frozen import replace
    from ..facts import synthetic as machines

    spec = machines.shape_named(args.name)
    if args.narrow_link is not None:
        if args.narrow_link >= spec.gpus:
            raise CliError(f"--narrow-link {args.narrow_link}: {spec.name} has GPUs 0 to {spec.gpus - 1}")
        spec = replace(spec, narrow_link=args.narrow_link)
    dest = Path(args.dir)
    there = machines.written(dest)
    # Writing the same machine again is harmless (its files are written anew); anything else there is not ours.
    if dest.exists() and (not dest.is_dir() or any(dest.iterdir())) and there != spec.name:
        held = f"synthetic machine {there}" if there else "other files"
        raise CliError(f"{dest} holds {held}: give a new or empty folder (or one numapin machine {spec.name} wrote)")
    root = machines.write(spec, dest)
    about = f"{spec.cpus} CPUs, {spec.cpu_nodes} CPU nodes, {spec.gpus} GPUs" + (
        f": {spec.arch_note}" if spec.arch_note else "")
    print(f"wrote synthetic machine {spec.name} ({about}) to {root}\n"
          f"read it with --root {root}, or NUMAPIN_FSROOT={root} for the library")
    return Exit.OK


def arguments(mach: argparse.ArgumentParser) -> None:
    from ..facts.synthetic import SHAPES

    mach.description = ("Write the sys/ and proc/ files of a synthetic machine under DIR (new, empty, or holding "
                        "the same machine), as the kernel and the NVIDIA driver would show them.")
    mach.add_argument("name", metavar="NAME", choices=sorted(SHAPES), help="one of: " + ", ".join(sorted(SHAPES)))
    mach.add_argument("dir", metavar="DIR", help="the folder to write (it stands in for /)")
    mach.add_argument("--narrow-link", type=count_arg, metavar="GPU", help="GPU's PCIe link trained at half its "
                      "width (x8 of x16), for numapin doctor's pcie-link-degraded")
    mach.set_defaults(func=run)
