"""The ``numapin`` command: a dispatcher over one module per command.

Each command is a module of this package with ``HELP`` (its line in ``numapin --help``), ``arguments(parser)``
(its options; the parser's ``func`` is its ``run(args) -> int``) and ``run``. :data:`COMMANDS` names them in the
order ``--help`` lists them; adding a command is one module and one line there. Only the command named is
imported and its parser built: ``numapin exec`` starts every rank, and reaches ``execve`` without reading what
``show`` or ``snapshot`` use. Every decision is the library's; a command parses, prints, and says how it ended
with an :class:`~numapin.cli.common.Exit` code.
"""

from __future__ import annotations

import argparse
import os
import sys

from ..base.errors import NumapinError
from ..facts.host import HostError
from ..version import __version__
from .common import MACHINE_NAMES, CliError, Exit, Formatter, LinesFormatter, Parser

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from types import ModuleType

__all__ = ["COMMANDS", "MACHINE_NAMES", "READ_THE_MACHINE", "CliError", "Exit", "build_parser", "guides", "main"]


#: The commands, in the order ``numapin --help`` lists them: each the module of this package of its name.
COMMANDS = ("show", "plan", "exec", "threads", "doctor", "ps", "keep", "ab", "exporter", "numactl", "buffer",
            "snapshot", "machine")


#: The commands whose answers depend on the machine read, so take --machine and --root (the parser's own list is
#: checked against it by the tests).
READ_THE_MACHINE = ("show", "plan", "exec", "threads", "doctor", "ps", "exporter", "snapshot")


def command_module(name: str) -> ModuleType:
    """The module of command ``name`` (one of :data:`COMMANDS`), imported when first asked for."""
    import importlib

    return importlib.import_module(f"{__name__}.{name}")


def guides() -> str:
    """Where the guides are: installed with the package (a wheel carries them), or in the checkout."""
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    for folder in (os.path.join(here, "docs"), os.path.join(os.path.dirname(os.path.dirname(here)), "docs")):
        if os.path.isfile(os.path.join(folder, "README.md")):
            return os.path.join(folder, "README.md")
    return "docs/README.md in numapin's source distribution"


def build_parser(command: str | None = None) -> Parser:
    """The whole parser; with ``command``, only that sub-command's.

    Top-level options take no value, so the first word that is no option names the sub-command (:func:`_command`),
    and the others' parsers are never consulted: building them (argparse asks gettext for each parser's
    headings, and each module would be imported) would cost ``numapin exec`` for nothing.
    """
    parser = Parser(
        prog="numapin",
        description="Put each GPU worker process, every thread and its memory, near its GPU.",
        epilog="No GPU here? The commands that read the machine (" + ", ".join(READ_THE_MACHINE) + ") take "
               "--machine NAME, a synthetic machine: numapin plan --machine dgx-h100\n"
               f"Guides:\n  {guides()}",
        formatter_class=LinesFormatter,
    )
    parser.add_argument("--version", action="version", version=f"numapin {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="log what numapin does")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in COMMANDS:
        if command in COMMANDS and name != command:
            continue
        module = command_module(name)
        p = sub.add_parser(name, help=module.HELP, formatter_class=Formatter)
        # -v after the sub-command too; SUPPRESS keeps an absent one from resetting `numapin -v exec`.
        p.add_argument("-v", "--verbose", action="store_true", default=argparse.SUPPRESS,
                       help="log what numapin does")
        module.arguments(p)
    if command in COMMANDS:
        parser.command_prog = f"numapin {command}"
    return parser


def _command(argv: Sequence[str]) -> str | None:
    """The sub-command named in ``argv`` (its first word not an option), when it is one of ours."""
    for word in argv:
        if not word.startswith("-"):
            return word if word in COMMANDS else None
    return None


def main(argv: Sequence[str] | None = None) -> int:
    words = sys.argv[1:] if argv is None else list(argv)
    command = _command(words)
    run: Callable[[], int]
    hint: Callable[[BaseException], str]
    if command == "numactl":
        # numactl's words go to numactl's own reader, untouched by argparse (its -m, -C... are not ours).
        at = words.index("numactl")
        verbose = any(w in ("-v", "--verbose") for w in words[:at])
        run, hint = (lambda: command_module("numactl").run(words[at + 1:])), (lambda exc: "")
    elif not [w for w in words if w not in ("-v", "--verbose")]:
        build_parser().print_help()  # plain `numapin`: what it can do, not an error about what is missing
        return Exit.OK
    else:
        args = build_parser(command).parse_args(words)
        verbose, command = args.verbose, args.command
        run, hint = (lambda: int(args.func(args))), (lambda exc: _hint(args, exc))
    if verbose:
        import logging

        logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s")
    # Without -v, logging stays unconfigured (and unimported until numapin warns): warnings then
    # reach stderr through logging's last-resort handler, which numapin's logger prefixes.
    try:
        code = run()
        sys.stdout.flush()  # here, not at exit: a closed pipe must meet the handler below
        return code
    except BrokenPipeError:
        # A reader that stops early (`numapin show | head -1`) is no error of
        # ours: say nothing, and keep Python's exit-time flush from failing too.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return Exit.OK
    except (CliError, HostError, NumapinError, OSError) as exc:
        print(f"numapin {command}: {_one_line(exc)}{hint(exc)}", file=sys.stderr)
        return Exit.USAGE


def _one_line(exc: BaseException) -> str:
    """The error as one line; a file error as the system says it, without Python's "[Errno 13]"."""
    if isinstance(exc, OSError) and not isinstance(exc, (HostError, NumapinError)) and exc.strerror:
        return f"{exc.filename}: {exc.strerror}" if exc.filename is not None else exc.strerror
    return str(exc)


def _hint(args: argparse.Namespace, exc: BaseException) -> str:
    """Where one exists, the next step: a machine with no GPU can still show what numapin does."""
    from ..facts.inventory import NoGpuVisible

    if isinstance(exc, NoGpuVisible) and "none found" in str(exc) and "machine" in vars(args) and not (
            getattr(args, "machine", None) or getattr(args, "root", None)):
        pid = f" {args.pid}" if getattr(args, "pid", None) is not None and args.command == "threads" else ""
        return f"; to try numapin as on a GPU host: numapin {args.command}{pid} --machine dgx-h100"
    return ""
