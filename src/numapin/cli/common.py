"""What every command's module shares: the machine a command reads, option types, pictures, the parser."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from enum import IntEnum  # re's own import already: argparse loads it

from ..base.errors import NumapinError
from ..base.text import decimal
from ..cpuset import CpuSet

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Sequence
    from typing import Any, NoReturn

    from ..facts.machine import Facts
    from ..placement.modes import Placement


class Exit(IntEnum):
    """How a command ended: numapin's exit codes, the one list of them (docs/cli.md says the same)."""

    OK = 0
    """Done; nothing found (doctor, ``threads --check``, ``ps``)."""
    FOUND = 1
    """Something found: doctor's warnings or errors, a failed ``threads --check``, a worker ``ps`` judged
    misplaced."""
    USAGE = 2
    """Bad input, or a machine numapin cannot use: one line on stderr, naming the cause and the next step."""
    INTERRUPTED = 130
    """^C (``ab``: what was measured before it is reported), as a shell counts a death by SIGINT."""


class CliError(Exception):
    """A one-line error for stderr, :attr:`Exit.USAGE`."""


#: The synthetic machines (numapin.facts.synthetic.SHAPES, whose import parsing avoids; a test keeps them equal).
MACHINE_NAMES = ("dgx-b300", "dgx-h100", "epyc-nps4", "gb300", "laptop", "mi300x", "mi300x-cpx", "pair")


@contextlib.contextmanager


def machine_root(args: argparse.Namespace) -> Iterator[str | None]:
    """The filesystem root the command reads: --root, --machine (written to a temp folder), or the default."""
    machine = getattr(args, "machine", None)
    if machine:
        from pathlib import Path

        from ..facts import synthetic as machines

        try:
            spec = machines.shape_named(machine)
        except ValueError as exc:
            raise CliError(str(exc)) from None
        with machine_folder() as folder:
            yield str(machines.write(spec, Path(folder) / "root"))
        return
    yield getattr(args, "root", None)


#: Signals that end a command by default: while a synthetic machine's folder exists they end it
#: through Python instead, so that the folder (about 2 MB on tmpfs, which is memory) is removed.
_ENDING_SIGNALS = ("SIGTERM", "SIGHUP")


@contextlib.contextmanager


def machine_folder() -> Iterator[str]:
    """A temporary folder for a synthetic machine, removed however the command ends.

    While it exists, an ending signal removes it and ends the process (exit status 128 +
    signal, as a shell reports a death by it): the handler removes the folder itself, so a
    signal that lands at any moment, even during the removal below, leaves nothing behind.
    It ends the process with ``os._exit``, not ``SystemExit``: a handler's exception that lands
    in a weakref callback or a ``__del__`` is printed and dropped, and the command would go on
    reading a folder that is gone. (The commands that take ``--machine`` rehearse, or pin this
    process just before it execs: nothing of theirs needs a ``finally`` once it is ending.)
    """
    import shutil
    import signal
    import tempfile

    made: list[str] = []

    def end(number: int, _frame: object) -> None:
        for folder in made:
            shutil.rmtree(folder, ignore_errors=True)
        os._exit(128 + number)

    numbers = [getattr(signal, name) for name in _ENDING_SIGNALS]
    previous = {n: signal.getsignal(n) for n in numbers}
    for number in numbers:
        if previous[number] is signal.SIG_DFL:  # a disposition someone chose (ignored, handled) stays
            signal.signal(number, end)
    try:
        # Thousands of small files: on tmpfs when there is one, which is far faster on slow disks.
        base = "/dev/shm" if os.access("/dev/shm", os.W_OK) else tempfile.gettempdir()
        # The name is known to the handler before the folder exists: a signal between making the
        # folder and remembering it (inside mkdtemp) would otherwise leave it behind. The PID in it
        # says whose a folder is (tests tell their commands' folders from others' running meanwhile).
        while True:
            made[:] = [os.path.join(base, f"numapin-machine-{os.getpid()}-{os.urandom(6).hex()}")]
            try:
                os.mkdir(made[0], 0o700)
                break
            except FileExistsError:
                continue
        yield made[0]
    finally:
        for folder in made:
            shutil.rmtree(folder, ignore_errors=True)
        for number, handler in previous.items():
            signal.signal(number, handler)


def add_root(parser: argparse.ArgumentParser) -> None:
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--root", metavar="DIR",
                       help="read the machine from DIR instead of / (as NUMAPIN_FSROOT does)")
    # The names are checked when the machine is written (machine_root), so that parsing
    # does not load the machine specs: `numapin machine --help` lists them.
    where.add_argument("--machine", metavar="NAME",
                       help="read a synthetic machine: " + ", ".join(MACHINE_NAMES))


def modes() -> list[str]:
    from ..placement.modes import PlacementMode

    return [m.value for m in PlacementMode if m is not PlacementMode.EXPLICIT]


def count_arg(text: str) -> int:
    """A non-negative ASCII decimal (``int`` would also take other scripts' digits)."""
    value = decimal(text)
    if value is None or value < 0:
        raise argparse.ArgumentTypeError(f"not a non-negative integer: {text[:40]!r}")
    return value


def percent_arg(text: str) -> float:
    try:
        value = float(text) if text.isascii() else -1.0
    except ValueError:
        value = -1.0
    if not 0 <= value <= 100:
        raise argparse.ArgumentTypeError(f"not a percentage from 0 to 100: {text[:40]!r}")
    return value


def positive_arg(text: str) -> int:
    value = count_arg(text)
    if value == 0:
        raise argparse.ArgumentTypeError("expected a number above 0")
    return value


def seconds_arg(text: str) -> float:
    try:
        value = float(text) if text.isascii() else 0.0
    except ValueError:
        value = 0.0
    if not 0 < value < 86400:  # NaN fails too
        raise argparse.ArgumentTypeError(f"not a number of seconds above 0: {text[:40]!r}")
    return value


def bytes_arg(text: str) -> int:
    from ..tools.buffer import parse_size

    try:
        return parse_size(text)
    except NumapinError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def gpu_list_arg(text: str) -> list[int]:
    """GPU indices in the order given (rank i drives the i-th): ``0,2``, ``0-3``, ``4-7,0-3``."""
    found: list[int] = []
    try:
        for item in text.split(","):
            first, dash, last = item.partition("-")
            low, high = count_arg(first), count_arg(last) if dash else count_arg(first)
            if high < low or high - low >= 4096:
                raise argparse.ArgumentTypeError(item)
            found.extend(range(low, high + 1))
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(f"not a list of GPU indices (0,2 or 0-3): {text[:40]!r}") from None
    return found


def cpuset_arg(text: str) -> CpuSet:
    try:
        return CpuSet.parse(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def refuse_together(args: argparse.Namespace, *pairs: tuple[str, str, str]) -> None:
    """A CliError for the first pair of options given together that cannot be: each pair is two options'
    ``dest`` names and why (numapin never drops an option the user gave)."""
    for first, second, why in pairs:
        if _given(args, first) and _given(args, second):
            raise CliError(f"{_flag(first)} and {_flag(second)} {why}: give one")


def _given(args: argparse.Namespace, dest: str) -> bool:
    value = getattr(args, dest, None)
    return value is not None and not (dest == "local_rank" and value == "auto")


def _flag(dest: str) -> str:
    return "--" + dest.replace("_", "-")


def after_dashes(words: Sequence[str], missing: str) -> list[str]:
    """A command line argparse left whole (``REMAINDER``), less the ``--`` before it; ``missing`` when empty."""
    found = list(words)
    if found and found[0] == "--":
        found = found[1:]
    if not found:
        raise CliError(missing)
    return found


def dash(value: int | None) -> str:
    return "-" if value is None else str(value)


def memory_size(value: int | None) -> str:
    from ..base.text import format_size

    return "memory unknown" if value is None else format_size(value)


def add_option(parser: Any, name: str, **overrides: Any) -> None:
    """Placement option ``name`` as its declaration says (:data:`numapin.pinning.options.OPTIONS`: flag, kind,
    default, help), ``overrides`` applied (a command whose default differs says so in its help too)."""
    from ..pinning.options import OPTIONS

    option = OPTIONS[name]
    kwargs: dict[str, Any] = {"help": option.help}
    if option.kind == "switch":
        kwargs["action"] = "store_true"
    elif option.kind == "choice":
        kwargs.update(choices=list(option.words), default=option.default)
    else:
        kwargs.update(type={"count": count_arg, "cpus": cpuset_arg, "text": str}[option.kind], default=option.default,
                      metavar=option.metavar)
    kwargs.update(overrides)
    parser.add_argument(option.flag, **kwargs)


def add_target(parser: argparse.ArgumentParser, mode_default: str | None = "node") -> None:
    """--gpu or --local-rank, and --mode: which GPU's placement (exec and doctor)."""
    target = parser.add_mutually_exclusive_group()
    add_option(target, "gpu")
    add_option(target, "local_rank")
    add_option(parser, "mode", default=None,
               help="placement mode (default: " + (mode_default or "the process's record's, else node") + ")")


def add_cores(parser: argparse.ArgumentParser) -> None:
    add_option(parser, "cores")


def add_remote_bound(parser: argparse.ArgumentParser) -> None:
    from ..observe.verdict import REMOTE_BOUND

    parser.add_argument("--max-remote-memory", type=percent_arg, metavar="PCT", default=100 * REMOTE_BOUND,
                        help="the largest share of a worker's own memory (heap, stacks, shared memory it made; not "
                             "files it maps) allowed on other nodes than its placement's before the verdict is "
                             f"misplaced (memory) (default {100 * REMOTE_BOUND:.0f}: past half, most of what its "
                             "threads touch crosses the interconnect; 100: memory reported, not judged)")


def add_pod_resources(parser: argparse.ArgumentParser) -> None:
    from ..facts.podresources import SOCKET

    parser.add_argument("--pod-resources", metavar="SOCKET", default=SOCKET,
                        help="the kubelet's pod-resources socket, which names the pods and containers of workers "
                             f"that run in Kubernetes (default {SOCKET}; needs numapin[kubernetes]; empty: not "
                             "asked)")


def _file_name(text: str) -> str:
    if not text.strip():
        raise argparse.ArgumentTypeError("an empty file name")
    return text


def picture_file(*endings: str) -> Callable[[str], str]:
    """A file name for a picture: ``-`` (standard output), or one ending as its format does (an SVG written
    into ``x.png`` is a file no viewer opens as what its name says)."""

    def check(text: str) -> str:
        name = _file_name(text)
        if name != "-" and not name.lower().endswith(endings):
            raise argparse.ArgumentTypeError(f"{name[:60]!r}: the file's name must end in {' or '.join(endings)} "
                                             "(or be - for standard output)")
        return name

    return check


def add_picture(parser: argparse.ArgumentParser, ranks: bool = True) -> None:
    what = "packages, nodes, caches, cores, GPUs" + (", each rank's CPUs" if ranks else "")
    parser.add_argument("--svg", metavar="FILE", type=picture_file(".svg"),
                        help=f"also draw the picture ({what}) as SVG into FILE (- for standard output, instead of "
                             "the text)")
    parser.add_argument("--html", metavar="FILE", type=picture_file(".html", ".htm"),
                        help="the same picture in a self-contained HTML page, with hover text per CPU (- as for --svg)")


def pictures(args: argparse.Namespace, facts: Facts, plans: Sequence[Placement], title: str) -> None:
    """Write the machine's --svg and --html pictures asked for (``-``: to standard output)."""
    if not (args.svg or args.html):
        return
    from ..tools import picture

    write_pictures(args, lambda: picture.svg(facts, plans, title), lambda: picture.html(facts, plans, title))


def write_pictures(args: argparse.Namespace, svg: Callable[[], str], html: Callable[[], str]) -> None:
    """Write --svg and --html as asked, each drawn only when asked for (``-``: to standard output)."""
    for path, make in ((args.svg, svg), (args.html, html)):
        if path == "-":
            sys.stdout.write(make())
        elif path:
            with open(path, "w", encoding="utf-8") as f:
                f.write(make())


def picture_to_stdout(args: argparse.Namespace) -> bool:
    """True when --svg or --html is ``-``: the picture is then the whole of standard output."""
    if args.svg == "-" and args.html == "-":
        raise CliError("--svg - and --html - would both write to standard output: give one of them a file")
    return "-" in (args.svg, args.html)


class Formatter(argparse.HelpFormatter):
    """argparse's formatter, told the terminal width up front.

    Left to itself it imports shutil for the width, on every add_argument call
    (argparse formats each argument once to check it): as much time as the
    rest of parsing. The width is the one shutil would find.
    """

    def __init__(self, prog: str, **options: Any) -> None:
        if "width" not in options:
            try:
                columns = int(os.environ["COLUMNS"])
            except (KeyError, ValueError):
                try:
                    columns = os.get_terminal_size(sys.__stdout__.fileno()).columns if sys.__stdout__ else 80
                except (AttributeError, ValueError, OSError):
                    columns = 80
            options["width"] = (columns or 80) - 2
        super().__init__(prog, **options)


class LinesFormatter(Formatter):
    """The top parser's formatter: each line of its text wrapped alone, never at a hyphen or inside a word, so a
    path on a line of its own is copied whole from the terminal."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        import textwrap

        return "\n".join(textwrap.fill(line, width, initial_indent=indent, subsequent_indent=indent,
                                        break_on_hyphens=False, break_long_words=False) if line.strip() else ""
                         for line in text.splitlines())


class Parser(argparse.ArgumentParser):
    """argparse's parser, whose errors are one line (the usage block is what --help is for)."""

    #: The sub-command's prog (``numapin exec``) when one was named: an error the top parser finds (an
    #: argument no parser takes) is still about that sub-command, and its --help is the one to read.
    command_prog: str | None = None

    def error(self, message: str) -> NoReturn:
        prog = self.command_prog or self.prog
        self.exit(2, f"{prog}: {message} (see {prog} --help)\n")
