"""``numapin machine``: write a synthetic machine to a folder, for --root or NUMAPIN_FSROOT."""

from __future__ import annotations

import argparse

from .common import CliError, Exit

HELP = "write a synthetic machine to a folder, for --root or NUMAPIN_FSROOT"


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from ..facts import synthetic as machines

    spec = machines.shape_named(args.name)
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
    mach.set_defaults(func=run)
