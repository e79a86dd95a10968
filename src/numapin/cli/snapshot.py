"""``numapin snapshot``: capture this machine's topology files for a bug report."""

from __future__ import annotations

import argparse
import sys

from .common import CliError, Exit, add_root, machine_root

HELP = "capture this machine's topology files for a bug report"


def run(args: argparse.Namespace) -> int:
    from ..tools.snapshot import TOP, capture

    to_stdout = args.out == "-"
    if to_stdout and sys.stdout.isatty():
        raise CliError("standard output is a terminal: redirect it (numapin snapshot - > machine.tar.gz)")
    with machine_root(args) as root:
        files = capture(sys.stdout.buffer if to_stdout else args.out, root, force=args.force)
    # With the archive on standard output, the report goes to stderr.
    print(f"wrote {'the archive to standard output' if to_stdout else args.out}: {len(files)} files under {TOP}/ "
          f"— attach it to a bug report; `numapin show --root {TOP}` on the unpacked archive shows this machine",
          file=sys.stderr if to_stdout else sys.stdout)
    return Exit.OK


def arguments(snap: argparse.ArgumentParser) -> None:
    snap.description = "Write OUT.tar.gz (or .tgz; - for standard output) with exactly the files numapin reads."
    snap.add_argument("out", metavar="OUT.tar.gz")
    snap.add_argument("--force", action="store_true", help="replace OUT.tar.gz when it exists")
    add_root(snap)
    snap.set_defaults(func=run)
