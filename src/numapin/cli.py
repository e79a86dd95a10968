"""The ``numapin`` command: show, plan, exec, threads, doctor, ps, keep, ab, exporter, numactl, buffer, snapshot,
machine.

A thin front end: every decision is made by the library; this module parses
arguments, prints, and maps errors to exit codes (0 fine, 1 a failed
``--check``, 2 bad input or an unusable machine).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys

from .base.environment import LOCAL_RANK_VARIABLES, PRIORITY_CORES
from .base.errors import NumapinError, UsageError
from .base.text import decimal
from .cpuset import CpuSet
from .facts.host import HostError
from .version import __version__

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing at run time (mypy knows the name)
if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Sequence
    from typing import Any, NoReturn

    from .facts.machine import Facts
    from .facts.network import RankNic
    from .placement.modes import Placement
    from .tools.ab.runs import Variant
    from .tools.ps import Survey

#: The synthetic machines (numapin.machines.SHAPES, whose import parsing avoids; a test keeps them equal).
MACHINE_NAMES = ("dgx-b300", "dgx-h100", "epyc-nps4", "gb300", "laptop", "mi300x", "mi300x-cpx", "pair")

# Each command imports what it needs when it runs: `numapin exec` reaches execve
# without loading what show, threads or snapshot use (json, tempfile, tarfile...).


class CliError(Exception):
    """A one-line error for stderr, exit code 2."""


# -- shared helpers -------------------------------------------------------


@contextlib.contextmanager
def _root(args: argparse.Namespace) -> Iterator[str | None]:
    """The filesystem root the command reads: --root, --machine (written to a temp folder), or the default."""
    machine = getattr(args, "machine", None)
    if machine:
        from pathlib import Path

        from .facts import synthetic as machines

        try:
            spec = machines.shape_named(machine)
        except ValueError as exc:
            raise CliError(str(exc)) from None
        with _machine_folder() as folder:
            yield str(machines.write(spec, Path(folder) / "root"))
        return
    yield getattr(args, "root", None)


#: Signals that end a command by default: while a synthetic machine's folder exists they end it
#: through Python instead, so that the folder (about 2 MB on tmpfs, which is memory) is removed.
_ENDING_SIGNALS = ("SIGTERM", "SIGHUP")


@contextlib.contextmanager
def _machine_folder() -> Iterator[str]:
    """A temporary folder for a synthetic machine, removed however the command ends.

    While it exists, an ending signal removes it and raises SystemExit (exit status 128 +
    signal, as a shell reports a death by it): the handler removes the folder itself, so a
    signal that lands at any moment, even during the removal below, leaves nothing behind.
    """
    import shutil
    import signal
    import tempfile

    made: list[str] = []

    def end(number: int, _frame: object) -> None:
        for folder in made:
            shutil.rmtree(folder, ignore_errors=True)
        raise SystemExit(128 + number)

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


def _add_root(parser: argparse.ArgumentParser) -> None:
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--root", metavar="DIR",
                       help="read the machine from DIR instead of / (as NUMAPIN_FSROOT does)")
    # The names are checked when the machine is written (_root), so that parsing
    # does not load the machine specs: `numapin machine --help` lists them.
    where.add_argument("--machine", metavar="NAME",
                       help="read a synthetic machine: " + ", ".join(MACHINE_NAMES))


def _modes() -> list[str]:
    from .placement.modes import PlacementMode

    return [m.value for m in PlacementMode if m is not PlacementMode.EXPLICIT]


def _count(text: str) -> int:
    """A non-negative ASCII decimal (``int`` would also take other scripts' digits)."""
    value = decimal(text)
    if value is None or value < 0:
        raise argparse.ArgumentTypeError(f"not a non-negative integer: {text[:40]!r}")
    return value


def _percent(text: str) -> float:
    try:
        value = float(text) if text.isascii() else -1.0
    except ValueError:
        value = -1.0
    if not 0 <= value <= 100:
        raise argparse.ArgumentTypeError(f"not a percentage from 0 to 100: {text[:40]!r}")
    return value


def _gpu_list(text: str) -> list[int]:
    """GPU indices in the order given (rank i drives the i-th): ``0,2``, ``0-3``, ``4-7,0-3``."""
    found: list[int] = []
    try:
        for item in text.split(","):
            first, dash, last = item.partition("-")
            low, high = _count(first), _count(last) if dash else _count(first)
            if high < low or high - low >= 4096:
                raise argparse.ArgumentTypeError(item)
            found.extend(range(low, high + 1))
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(f"not a list of GPU indices (0,2 or 0-3): {text[:40]!r}") from None
    return found


def _refuse_together(args: argparse.Namespace, *pairs: tuple[str, str, str]) -> None:
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


def _cpuset_arg(text: str) -> CpuSet:
    try:
        return CpuSet.parse(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _size(value: int | None) -> str:
    from .base.text import format_size

    return "memory unknown" if value is None else format_size(value)


# -- show -----------------------------------------------------------------


def _show_text(facts: Facts, machine: str | None = None) -> str:
    t = facts.topology
    lines = [f"numapin {__version__} — " + (f"synthetic machine {machine}" if machine else f"machine at {t.root}")]
    restriction = str(t.cgroup) if t.cgroup.version else "no cgroup cpuset restriction"
    lines.append(f"CPUs: online {t.online} ({len(t.online)}), allowed {t.allowed} ({restriction})")
    if t.offline:
        lines.append(f"      offline {t.offline}")
    lines.append(f"      this process may run on {'unknown' if t.process is None else t.process}")
    lines.append(f"NUMA nodes ({len(t.nodes)}):")
    gpu_mem = {n: g.pci for g in facts.inventory.gpus for n in g.gpu_memory_nodes}
    for node in t.nodes:
        dist = " ".join(f"{k}:{v}" for k, v in node.distances)
        if node.memory_only:
            owner = f", memory of GPU {gpu_mem[node.id]}" if node.id in gpu_mem else ""
            lines.append(f"  node {node.id}: memory-only, {_size(node.memory_bytes)}{owner}; distances {dist}")
        else:
            lines.append(f"  node {node.id}: cpus {node.cpus} ({len(node.cpus)}), {_size(node.memory_bytes)}; "
                         f"distances {dist or 'unknown'}")
    lines.append(f"Packages ({t.package_source}):")
    for package in t.packages:
        cores = [c for c in t.cores if c.cpus & package.cpus]
        lines.append(f"  package {package.id}: cpus {package.cpus}, {len(cores)} cores")
    smt = sorted({len(c.cpus) for c in t.cores})
    smt_text = "/".join(map(str, smt)) or "0"
    note = " (assumed: no core information)" if not t.cores_known else ""
    lines.append(f"Cores: {len(t.cores)} physical, {smt_text} thread(s) each{note}")
    if t.caches:
        level = max(g.level for g in t.caches)
        groups = "group" if len(t.caches) == 1 else "groups"
        lines.append(f"Last-level caches (L{level}): {len(t.caches)} {groups}: "
                     + "; ".join(str(g.cpus) for g in t.caches[:16]) + (" ..." if len(t.caches) > 16 else ""))
    else:
        lines.append("Last-level caches: unknown")
    if facts.visible:
        lines.append(f"GPUs ({len(facts.visible)} visible of {len(facts.inventory.gpus)}, "
                     f"{facts.visible[0].label.split(':')[0]}:N in this process's view; NVML {facts.inventory.nvml}):")
        for v in facts.visible:
            g = v.gpu
            extra = f", GPU memory node {g.gpu_memory_nodes}" if g.gpu_memory_nodes else ""
            lines.append(f"  {v.label} {g.where} {g.name} {g.uuid or ''}".rstrip())
            lines.append(f"      node {'unknown' if g.node is None else g.node}, cpus {g.cpus}, "
                         f"memory nodes {g.memory_nodes or 'unknown'}{extra}")
            if g.disagreement:
                lines.append(f"      NVML and sysfs disagree: {g.disagreement}")
    elif facts.inventory.gpus:
        lines.append(f"GPUs: {len(facts.inventory.gpus)} found, none visible: {facts.cut or 'hidden from it'}")
    elif not facts.inventory.hidden:
        lines.append("GPUs: none found on this machine")
        if facts.topology.root == "/":
            lines.append(f"      to see numapin on a GPU host, try a synthetic one: numapin show --machine dgx-h100 "
                         f"(or {', '.join(n for n in MACHINE_NAMES if n != 'dgx-h100')})")
    if facts.inventory.hidden:
        # A container given some of the host's GPUs: sysfs shows the rest, the runtime does not count them.
        lines.append(f"Not in this process's view ({len(facts.inventory.hidden)} of the machine's GPUs; its runtime "
                     "counts only the others):")
        lines += [f"  {h.gpu.where} node {'unknown' if h.gpu.node is None else h.gpu.node}: {h.why}"
                  for h in facts.inventory.hidden]
    lines += _kinds_text(facts)
    lines += _network_text(facts)
    for warning in (*t.warnings, *facts.notes):
        lines.append(f"note: {warning}")
    return "\n".join(lines)


def _kinds_text(facts: Facts) -> list[str]:
    found = facts.kinds()
    kinds = found.kinds
    note = [f"note: {found.note}"] if found.note else []
    if len(kinds) <= 1:
        return ["CPU kinds: one (the kernel tells no CPU apart)", *note]
    rule = f", rule {kinds[0].rule} of {PRIORITY_CORES}: a published layout" if kinds[0].rule else ""
    lines = [f"CPU kinds ({len(kinds)}, fastest first{rule}):"]
    for kind in kinds:
        said = [kind.core_type or "", f"capacity {kind.capacity}" if kind.capacity else "",
                f"{kind.max_mhz} MHz max" if kind.max_mhz else "", f"{kind.base_mhz} MHz base" if kind.base_mhz else ""]
        lines.append(f"  rank {kind.rank}: cpus {kind.cpus} ({len(kind.cpus)}): " + ", ".join(w for w in said if w))
    return [*lines, *note]


def _network_text(facts: Facts) -> list[str]:
    from .base.text import table

    network = facts.network()
    if not network.nics:
        return ["Network devices: none found (InfiniBand, RoCE or physical Ethernet)"]
    lines = [f"Network devices ({len(network.nics)}):"]
    rows = [[n.name, n.type, n.pci, "?" if n.node is None else str(n.node), str(n.cpus), ",".join(n.netdevs) or "-"]
            for n in network.nics]
    lines += ["  " + row for row in table(["name", "type", "pci", "node", "cpus", "interfaces"], rows)]
    linked = [v for v in facts.visible if network.of_gpu(v.gpu.pci)]
    if linked:
        lines.append("GPU to NIC (nvidia-smi topo -m's words: PIX one switch, PXB several, PHB host bridge, "
                     "NODE same node, SYS across nodes):")
        names = [n.name for n in network.nics]
        grid = []
        for v in linked:
            relation = {link.name: str(link.relation) for link in network.of_gpu(v.gpu.pci)}
            nearest = ",".join(n.name for n in network.nearest(v.gpu.pci))
            grid.append([v.label, *(relation[name] for name in names), nearest])
        lines += ["  " + row for row in table(["", *names, "nearest"], grid)]
    return lines


def _show_json(facts: Facts, machine: str | None = None) -> dict[str, Any]:
    data = facts.topology.as_dict()
    if machine:
        # The synthetic machine's folder is gone once the command ends: name the machine instead.
        data["root"] = None
        data["machine"] = machine
    network = facts.network()
    data["gpus"] = [{**v.as_dict(), "nics": [link.as_dict() for link in network.of_gpu(v.gpu.pci)]}
                    for v in facts.visible]
    data["hidden_gpus"] = [{"vendor": str(h.gpu.vendor), "pci": h.gpu.pci, "partition": h.gpu.partition,
                            "node": h.gpu.node, "why": h.why} for h in facts.inventory.hidden]
    data["nics"] = [nic.as_dict() for nic in network.nics]
    kinds = facts.kinds()
    data["cpu_kinds"] = [kind.as_dict() for kind in kinds.kinds]
    data["nvml"] = facts.inventory.nvml
    data["warnings"] = [*data["warnings"], *([kinds.note] if kinds.note else []), *facts.notes]
    return data


def cmd_show(args: argparse.Namespace) -> int:
    import json

    from .facts.machine import gather

    quiet = _picture_to_stdout(args)
    with _root(args) as root:
        facts = gather(root, nvml=True)  # NVML, where installed, checks what sysfs says (a pin asks it only of gaps)
        if quiet:
            pass
        elif args.json:
            print(json.dumps(_show_json(facts, args.machine), indent=2))
        else:
            print(_show_text(facts, args.machine))
        _pictures(args, facts, (), f"numapin show · {args.machine or facts.topology.root}")
    return 0


def _pictures(args: argparse.Namespace, facts: Facts, plans: Sequence[Placement], title: str) -> None:
    """Write the machine's --svg and --html pictures asked for (``-``: to standard output)."""
    if not (args.svg or args.html):
        return
    from .tools import picture

    _write_pictures(args, lambda: picture.svg(facts, plans, title), lambda: picture.html(facts, plans, title))


def _write_pictures(args: argparse.Namespace, svg: Callable[[], str], html: Callable[[], str]) -> None:
    """Write --svg and --html as asked, each drawn only when asked for (``-``: to standard output)."""
    for path, make in ((args.svg, svg), (args.html, html)):
        if path == "-":
            sys.stdout.write(make())
        elif path:
            with open(path, "w", encoding="utf-8") as f:
                f.write(make())


def _picture_to_stdout(args: argparse.Namespace) -> bool:
    """True when --svg or --html is ``-``: the picture is then the whole of standard output."""
    if args.svg == "-" and args.html == "-":
        raise CliError("--svg - and --html - would both write to standard output: give one of them a file")
    return "-" in (args.svg, args.html)


# -- plan -----------------------------------------------------------------


def cmd_plan(args: argparse.Namespace) -> int:
    import json

    from .base.text import counted, table
    from .facts.machine import cached
    from .facts.network import assign
    from .placement.plan import plan_ranks

    quiet = _picture_to_stdout(args)
    _refuse_together(args, ("cpus", "mode", "both say which CPUs each rank gets (--cpus is a placement of its own)"),
                     ("gpus", "ranks", "both say which ranks to plan"))
    with _root(args) as root:
        plans = plan_ranks(mode=args.mode or "node", reserve=args.reserve, cpus=args.cpus, gpus=args.gpus,
                           ranks=args.ranks, cores=args.cores, root=root)
        facts = cached(root)  # the facts plan_ranks() just read
        for note in facts.notes:  # an entry of CUDA_VISIBLE_DEVICES that ends the list, mixed models...
            print(f"numapin plan: note: {note}", file=sys.stderr)
        if args.svg or args.html:
            what = f"mode {plans[0].mode}" + (f" · reserve {args.reserve}" if args.reserve else "")
            where = args.machine or facts.topology.root
            title = f"numapin plan · {what} · {where}" + (f" · {plans[0].reason}" if len(plans) == 1 else "")
            _pictures(args, facts, plans, title)
        nics = assign(facts.network(), [(p.rank, p.pci) for p in plans])  # read while the root is there
    if quiet:
        return 0
    if args.json:
        print(json.dumps([{**p.as_dict(), "nic": None if n is None else n.as_dict()}
                          for p, n in zip(plans, nics, strict=True)], indent=2))
        return 0
    # With --reserve, the workers' CPUs (what exec pins every thread to) and the reserved ones apart.
    reserving = any(p.reserved for p in plans)
    networked = any(nics)
    header = ["rank", "gpu", "pci", "node", "workers" if reserving else "cpus", "mems"] + (
        ["reserved"] if reserving else []) + (["nic"] if networked else [])
    rows = [[_dash(p.rank), _dash(p.gpu), p.where or "-", _dash(p.node), str(p.workers), str(p.mems)]
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
    return 0


def _shared_nics(nics: Sequence[RankNic | None]) -> list[str]:
    """One line per NIC that several ranks were given (no NIC near enough for each)."""
    said: dict[str, list[str]] = {}
    for n in nics:
        if n is not None and n.shared_with:
            said.setdefault(n.nic.name, []).append(_dash(n.rank))
    return [f"ranks {', '.join(ranks)} share {name}: it is the nearest NIC of each" for name, ranks in said.items()]


def _dash(value: int | None) -> str:
    return "-" if value is None else str(value)


# -- exec -----------------------------------------------------------------


def cmd_exec(args: argparse.Namespace) -> int:
    from .pinning.memory import parse_memory_mode
    from .placement.modes import parse_mode
    from .tools.exec import (
        ExecRequest,
        apply_exec,
        exec_program,
        parse_cores,
        parse_exec_policy,
        parse_nics,
        prepare_exec,
    )

    program = _after_dashes(args.program, "no PROGRAM given (numapin exec [options] -- PROGRAM [ARGS...])")
    if args.json and not args.dry_run:
        raise CliError("--json formats the --dry-run report: add --dry-run (a real exec prints nothing of its own)")
    _refuse_together(
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
    # Everything that reads the machine happens inside _root(): a synthetic
    # machine's folder is removed before the program replaces this process.
    with _root(args) as root:
        request = ExecRequest(
            program=program,
            gpu=args.gpu,
            local_rank=args.local_rank,
            mode=parse_mode(args.mode or "node"),
            cpus=args.cpus,
            reserve=args.reserve,
            memory=parse_memory_mode(args.memory),
            policy=parse_exec_policy(args.policy),
            strict=args.strict,
            root=root,
            threads=args.threads,
            nodes=args.nodes,
            mems=args.mems,
            cores=parse_cores(args.cores),
            nics=parse_nics(args.nics),
        )
        prepared = prepare_exec(request, os.environ)
        if args.dry_run:
            if args.json:
                import json

                print(json.dumps(prepared.as_dict(), indent=2))
            else:
                print(prepared.describe())
            return 0
        env = apply_exec(prepared)
        if args.keep:
            env = _watched(env, args.keep_period, root)
    return exec_program(prepared, env)


def _after_dashes(words: Sequence[str], missing: str) -> list[str]:
    """A command line argparse left whole (``REMAINDER``), less the ``--`` before it; ``missing`` when empty."""
    found = list(words)
    if found and found[0] == "--":
        found = found[1:]
    if not found:
        raise CliError(missing)
    return found


def _watched(env: dict[str, str], period: float | None, root: str | None) -> dict[str, str]:
    """Leave a watcher that keeps this process's placement once it is the program; the program's environment
    without NUMAPIN_KEEP (its start-up hook would keep it a second time)."""
    from .base.environment import KEEP
    from .base.logger import log
    from .facts.machine import cached as cached_facts
    from .pinning.keeper import DEFAULT_PERIOD
    from .pinning.state import state
    from .tools.keep import keeper_of, start_watcher

    record = state().published
    if record is None:
        log.warning("--keep: numapin placed nothing here (or could not write its record): nothing to keep")
    else:
        start_watcher(keeper_of(os.getpid(), cached_facts(root, os.environ), record), period or DEFAULT_PERIOD)
    return {k: v for k, v in env.items() if k != KEEP}


# -- doctor ---------------------------------------------------------------


def cmd_doctor(args: argparse.Namespace) -> int:
    from .tools.doctor import diagnose

    if args.buffer is None and (args.hugepages or args.lock):
        raise UsageError("--hugepages and --lock say what a --buffer SIZE asks for: give --buffer too",
                         value=args.hugepages or "--lock")
    with _root(args) as root:
        found = diagnose(gpu=args.gpu, rank=args.local_rank, mode=args.mode, reserve=args.reserve, root=root,
                         pid=args.pid, pod_resources=args.pod_resources or None, buffer=args.buffer,
                         hugepages=args.hugepages, lock=args.lock)
    if args.json:
        import json

        print(json.dumps(found.as_dict(), indent=2))
    else:
        print(found.text())
    return found.exit_code


# -- threads --------------------------------------------------------------


def cmd_threads(args: argparse.Namespace) -> int:
    import json

    from .placement.modes import parse_mode
    from .placement.ranks import LocalRank
    from .tools.threads_report import threads_report

    _refuse_together(args, ("cpus", "mode", "both say which CPUs the process should be on"))
    with _root(args) as root:
        bound = args.max_remote_memory / 100
        rank = None if args.local_rank is None else LocalRank(args.local_rank, "--local-rank")
        report = threads_report(args.pid, gpu=args.gpu, rank=rank, cpus=args.cpus,
                                mode=None if args.mode is None else parse_mode(args.mode), root=root, max_remote=bound)
    verdict = report.check() if args.check else 0  # no placement to check against: the error, before any table
    if args.json:
        print(json.dumps(report.as_dict(), indent=2))
    else:
        print(report.table())
    return verdict


# -- ps -------------------------------------------------------------------


def cmd_ps(args: argparse.Namespace) -> int:
    from .base.text import counted, table
    from .tools.ps import survey

    formats = [name for name, given in (("--json", args.json), ("--prometheus", args.prometheus),
                                        ("--textfile", args.textfile is not None)) if given]
    if len(formats) > 1:
        raise CliError(f"{' and '.join(formats)} are formats of the same listing: give one")
    quiet = _picture_to_stdout(args)
    if quiet and formats:
        raise CliError(f"{formats[0]} and a picture to standard output: give the picture a file")
    with _root(args) as root:
        found = survey(args.pids or None, root=root, max_remote=args.max_remote_memory / 100,
                       candidates=args.all, pod_resources=args.pod_resources or None,
                       every_gpu=args.prometheus or args.textfile is not None)
        if args.svg or args.html:
            _live_pictures(args, root, found)
        rehearsal = _rehearsal(args.machine, root)
    if quiet:
        return found.exit_code
    if args.textfile is not None:
        from .tools.prometheus import exposition, write_textfile

        # For a timer: the file is replaced whole (node_exporter never reads half of one), and the exit status
        # says whether the scan and the write worked, not what they found (the series say that).
        write_textfile(args.textfile, exposition(found))
        return 0
    if args.prometheus:
        from .tools.prometheus import exposition

        sys.stdout.write(exposition(found))
    elif args.json:
        import json

        print(json.dumps({"workers": [w.as_dict() for w in found.workers], "misplaced": len(found.misplaced),
                          "tally": found.tally(), "unseen": found.unseen, "pod_names_unread": found.pod_names},
                         indent=2))
    else:
        from .tools.prometheus import placed_by_label

        if args.wide:
            header = ["pid", "name", "rank", "gpu", "pci", "placed by", "expected", "threads", "outside", "remote",
                      "drift", "seen by", "verdict"]
            rows = [[str(w.pid), w.name, _dash(w.rank), _dash(w.gpu), w.where or "-", w.placed_by,
                     "-" if w.target is None else str(w.target), str(w.threads), str(w.outside),
                     "-" if w.remote is None else f"{100 * w.remote:.1f}%", w.drift_words,
                     w.why + (" (candidate)" if w.candidate else ""), w.verdict_words] for w in found.workers]
        else:  # within 100 columns: who placed it in one word, the threads outside of all, drift where there is any
            header = ["pid", "name", "gpu", "pci", "placed by", "outside", "remote", "verdict"]
            rows = [[str(w.pid), w.name, _dash(w.gpu), w.where or "-", placed_by_label(w.placed_by),
                     f"{w.outside} of {w.threads}", "-" if w.remote is None else f"{100 * w.remote:.1f}%",
                     w.verdict_words + (" (candidate)" if w.candidate else "")] for w in found.workers]
            if any(w.drift for w in found.workers):
                header.insert(6, "drift")
                for row, w in zip(rows, found.workers, strict=True):
                    row.insert(6, w.drift_words)
        if any(w.pod is not None for w in found.workers):  # a column only where a worker runs in a pod
            header.insert(2, "pod")
            for row, w in zip(rows, found.workers, strict=True):
                row.insert(2, "-" if w.pod is None else str(w.pod))
        print("\n".join(table(header, rows)))
        for w in found.workers:
            if w.note:
                print(f"note: {w.pid}: {w.note}")
            memory = w.host_memory or {}
            for words in [memory.get("shared_elsewhere"), *memory.get("buffers_elsewhere", ())]:
                if words:
                    print(f"memory: {w.pid}: {words} (numapin doctor --pid {w.pid})")
            if w.kubelet:
                print(f"kubelet: {w.pid}: {', '.join(w.kubelet)} (numapin doctor --pid {w.pid} says why and the fix)")
        if found.workers and args.wide:
            print("gpu: the GPU's index in each process's own view (its CUDA_VISIBLE_DEVICES, or ROCm's variables); "
                  "pci: the GPU itself")
        if found.pod_names and found.pod_names.startswith("stale: "):
            print(f"pod: names from {found.pod_names.removeprefix('stale: ')}")
        elif found.pod_names:
            print(f"pod: named by UID and container id only: {found.pod_names}")
        if rehearsal:  # said, so that the listing is not taken for this host's own verdicts
            print(rehearsal)
        print(_tally(found.tally(), len(found.counted)))
        if found.unseen:
            unseen = counted(found.unseen, "process", "processes")
            why = ("even root may not look into them: another PID namespace's, or a ptrace restriction such as "
                   "Yama's" if os.geteuid() == 0 else "their open files and environment are for their owners or "
                   "root; run as root to see every one")
            print(f"not looked into: {unseen} of other users, any of which may be a GPU worker ({why})")
    return found.exit_code


def _rehearsal(machine: str | None, root: str | None) -> str | None:
    """A line saying that --machine NAME is not this host (its CPUs are not this host's), or None."""
    if not machine:
        return None
    from .facts.machine import cached, this_host_cpus

    cpus, here = cached(root, {}).topology.online, this_host_cpus()
    if cpus <= here:
        return None
    return (f"machine: {machine} is a rehearsal (its CPUs {cpus}; this host's {here}): this host's processes "
            "judged as if they ran there, by their records and environment")


def _live_pictures(args: argparse.Namespace, root: str | None, found: Survey) -> None:
    """--svg and --html of ps: the live host, each worker in its colour where it should run, what strays outlined."""
    import socket

    from .facts.machine import cached
    from .tools import picture

    facts = cached(root, {})  # every GPU of the machine, as no CUDA_VISIBLE_DEVICES hides them
    live = []
    for w in found.counted:
        if w.expected is None:
            continue  # nothing says where it should be: the table says so, the picture has no place for it
        mine: dict[int, int] = {}
        for nodes in (w.host_memory or {}).get("by_kind", {}).values():
            for node, size in nodes.items():
                mine[int(node)] = mine.get(int(node), 0) + size
        live.append(picture.LiveWorker(w.pid, w.name, w.expected, w.verdict_words, w.threads, w.outside,
                                       w.outside_cpus or CpuSet(), tuple(sorted(mine.items()))))
    from .base.text import counted

    title = f"numapin ps · {socket.gethostname()} · {counted(len(live), 'GPU worker')}"
    _write_pictures(args, lambda: picture.svg(facts, (), title, live), lambda: picture.html(facts, (), title, live))


def cmd_exporter(args: argparse.Namespace) -> int:

    from .tools.exporter import Exporter

    with _root(args) as root:
        exporter = Exporter(root=root, max_remote=args.max_remote_memory / 100, timeout=args.scrape_timeout,
                            pod_resources=args.pod_resources or None)
        _sigterm_as_interrupt()
        try:
            exporter.serve(args.listen, lambda url: print(f"numapin exporter: serving {url}", file=sys.stderr,
                                                          flush=True))
        except KeyboardInterrupt:
            return 0
    return 0


def cmd_keep(args: argparse.Namespace) -> int:

    from .base.text import counted
    from .facts.machine import cached as cached_facts
    from .pinning.keeper import DEFAULT_PERIOD
    from .tools.keep import keep_processes

    # The machine the processes were placed on ($NUMAPIN_FSROOT when a test or rehearsal set it): their cpusets
    # are always the live ones.
    facts = cached_facts(None, os.environ)
    _sigterm_as_interrupt()
    try:
        seen = keep_processes(args.pids, facts, args.period or DEFAULT_PERIOD, looks=args.looks, as_json=args.json)
    except KeyboardInterrupt:
        return 0
    if not args.json:
        print(f"numapin keep: {counted(seen, 'drift')} seen", file=sys.stderr)
    return 0


def cmd_ab(args: argparse.Namespace) -> int:
    import shutil

    from .base.frozen import replace
    from .tools.ab import picture
    from .tools.ab.report import analyse, clear
    from .tools.ab.runs import Design, Run, experiment, parse_metric, parse_variant

    command = _after_dashes(args.command, "no COMMAND given (numapin ab [options] -- COMMAND [ARGS...])")
    if shutil.which(command[0]) is None:
        raise CliError(f"no program {command[0]!r} (not an executable file, nor on PATH)")
    to_stdout = _picture_to_stdout(args)
    if to_stdout and args.json:
        raise CliError("--json and a picture on standard output (-): give the picture a file")
    metric = parse_metric(args.metric, args.better)
    variants = [parse_variant(text) for text in args.variant] or _default_variants()
    names = [v.name for v in variants]
    if len(set(names)) != len(names):
        raise CliError(f"--variant: each name once (given: {', '.join(names)})")
    if len(variants) < 2:
        raise CliError("--variant: give two at least (a baseline and what to compare with it)")
    baseline = args.baseline or names[0]
    if baseline not in names:
        raise CliError(f"--baseline {baseline!r}: not a variant (variants: {', '.join(names)})")
    target = ["--gpu", str(args.gpu)] if args.gpu is not None else \
        ["--local-rank", args.local_rank] if args.local_rank is not None else []
    if target:
        variants = [replace(v, options=(*v.options, *target)) if v.options else v for v in variants]
    design = Design(args.rounds, args.warmup, args.until_clear, args.max_time, args.timeout, args.seed)

    from .tools.progress import Bar

    # A bar on a terminal; nothing per run otherwise (a log wants the table, and the table says each loss).
    bar, total, done = Bar(sys.stderr, "numapin ab"), (design.warmup + design.rounds) * len(variants), [0]

    def said(run: Run) -> None:
        done[0] += 1
        shown = f"{run.value:.6g}" if run.value is not None else run.status.value
        stage = "warm-up" if run.round < 0 else f"round {run.round + 1}/{design.rounds}"
        bar.update(done[0] / total, f"{done[0]}/{total} runs · {stage} · {run.variant}: {shown}")

    allowed = str(CpuSet(os.sched_getaffinity(0)))
    import signal
    import threading

    # ^C sets a flag the runs look at between steps: a run is never left half started (a KeyboardInterrupt
    # inside Popen would orphan it), and the one under way is stopped with everything it started.
    stop = threading.Event()
    signal.signal(signal.SIGINT, lambda signum, frame: stop.set())
    runs, interrupted = experiment(command, variants, metric, design, allowed=allowed, progress=said,
                                   clear=lambda found: clear(found, variants, design, baseline), stop=stop)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    bar.close()
    report = analyse(runs, command, variants, metric, design, baseline, interrupted=interrupted)
    from .pinning import record

    record.entries()  # the runs' records, stale now that each run ended: swept, the host as it was
    _write_pictures(args, lambda: picture.svg(report), lambda: picture.html(report))
    if args.json:
        import json

        print(json.dumps(report.as_dict(), indent=2))
    elif not to_stdout:
        print(report.table())
    return 130 if interrupted else 0


def _default_variants() -> list[Variant]:
    """The placements that matter on this host: none, the GPU's node with memory bound or preferred, an
    exclusive share, and the fastest cores where the machine has kinds of core."""
    from .facts.machine import cached as cached_facts
    from .tools.ab.runs import Variant

    facts = cached_facts(None, os.environ)
    if not facts.visible:
        raise CliError("no GPU is visible here, and the default variants are each GPU's placements: name your "
                       "own, e.g. --variant 'one=--cpus 0' --variant 'all=--cpus 0-1'")
    found = [Variant("none", ()), Variant("node-bind", ("--mode", "node", "--memory", "bind")),
             Variant("node-preferred", ("--mode", "node", "--memory", "preferred")),
             Variant("exclusive", ("--mode", "exclusive", "--memory", "preferred"))]
    if len(facts.kinds().kinds) > 1:
        found.append(Variant("fastest", ("--mode", "node", "--memory", "preferred", "--cores", "fastest")))
    return found


def _sigterm_as_interrupt() -> None:
    """A service manager's SIGTERM ends a long-running command (exporter, keep) as ^C does: cleanly, exit 0."""
    import signal

    def stop(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)


def _tally(tally: dict[str, int], workers: int) -> str:
    """``3 GPU workers: 1 ok, 1 misplaced, 1 unknown; 2 candidates (their environment only, not counted)``."""
    from .base.text import counted

    parts = [f"{n} {verdict}" for verdict, n in tally.items() if n and verdict != "candidates"]
    line = f"{counted(workers, 'GPU worker')}" + (f": {', '.join(parts)}" if parts else "")
    if tally["candidates"]:
        line += (f"; {counted(tally['candidates'], 'candidate')} (known from their environment only: not "
                 "counted)")
    return line


# -- numactl --------------------------------------------------------------


def cmd_numactl(words: Sequence[str]) -> int:
    """numactl's own arguments, read by numapin.numactl (argparse would take its options for numapin's)."""
    if list(words) in (["-h"], ["--help"]):
        build_parser("numactl").parse_args(["numactl", "--help"])
    from .tools.numactl import run

    return run(words)


def _numactl_args(front: argparse.ArgumentParser) -> None:
    front.description = (
        "numactl's language without numactl: bind PROGRAM as numactl would (every thread at birth, inside the "
        "cgroup cpuset), then exec it. Takes --cpunodebind/-N NODES, --physcpubind/-C CPUS, --membind/-m NODES, "
        "--preferred/-p NODE, --localalloc/-l, --show/-s, --hardware/-H (lists: 0,2 or 0-3 or all; "
        "--opt=VALUE, --opt VALUE, -X VALUE). Exits non-zero and runs nothing where numactl would refuse, so a "
        "caller's probe and step-down work; --interleave and the other options it does not carry out are "
        "refused by name.")
    front.add_argument("numactl_args", nargs=argparse.REMAINDER, metavar="[OPTIONS] PROGRAM [ARGS...]")


# -- snapshot -------------------------------------------------------------


def cmd_snapshot(args: argparse.Namespace) -> int:
    from .tools.snapshot import TOP, capture

    to_stdout = args.out == "-"
    if to_stdout and sys.stdout.isatty():
        raise CliError("standard output is a terminal: redirect it (numapin snapshot - > machine.tar.gz)")
    with _root(args) as root:
        files = capture(sys.stdout.buffer if to_stdout else args.out, root, force=args.force)
    # With the archive on standard output, the report goes to stderr.
    print(f"wrote {'the archive to standard output' if to_stdout else args.out}: {len(files)} files under {TOP}/ "
          f"— attach it to a bug report; `numapin show --root {TOP}` on the unpacked archive shows this machine",
          file=sys.stderr if to_stdout else sys.stdout)
    return 0


# -- machine --------------------------------------------------------------


def cmd_machine(args: argparse.Namespace) -> int:
    from pathlib import Path

    from .facts import synthetic as machines

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
    return 0


# -- parser ---------------------------------------------------------------


class _Formatter(argparse.HelpFormatter):
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


class _LinesFormatter(_Formatter):
    """The top parser's formatter: each line of its text wrapped alone, never at a hyphen or inside a word, so a
    path on a line of its own is copied whole from the terminal."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        import textwrap

        return "\n".join(textwrap.fill(line, width, initial_indent=indent, subsequent_indent=indent,
                                        break_on_hyphens=False, break_long_words=False) if line.strip() else ""
                         for line in text.splitlines())


def _guides() -> str:
    """Where the guides are: installed with the package (a wheel carries them), or in the checkout."""
    here = os.path.dirname(os.path.abspath(__file__))
    for folder in (os.path.join(here, "docs"), os.path.join(os.path.dirname(os.path.dirname(here)), "docs")):
        if os.path.isfile(os.path.join(folder, "README.md")):
            return os.path.join(folder, "README.md")
    return "docs/README.md in numapin's source distribution"


class _Parser(argparse.ArgumentParser):
    """argparse's parser, whose errors are one line (the usage block is what --help is for)."""

    #: The sub-command's prog (``numapin exec``) when one was named: an error the top parser finds (an
    #: argument no parser takes) is still about that sub-command, and its --help is the one to read.
    command_prog: str | None = None

    def error(self, message: str) -> NoReturn:
        prog = self.command_prog or self.prog
        self.exit(2, f"{prog}: {message} (see {prog} --help)\n")


def build_parser(command: str | None = None) -> _Parser:
    """The whole parser; with ``command``, only that sub-command's.

    Top-level options take no value, so the first word that is no option names the sub-command (:func:`_command`),
    and the others' parsers are never consulted: building them (argparse asks gettext for each parser's
    headings) would cost ``numapin exec``, which starts every rank, a millisecond and a half for nothing.
    """
    parser = _Parser(
        prog="numapin",
        description="Put each GPU worker process, every thread and its memory, near its GPU.",
        epilog="No GPU here? The commands that read the machine (" + ", ".join(_READ_THE_MACHINE) + ") take "
               "--machine NAME, a synthetic machine: numapin plan --machine dgx-h100\n"
               f"Guides:\n  {_guides()}",
        formatter_class=_LinesFormatter,
    )
    parser.add_argument("--version", action="version", version=f"numapin {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="log what numapin does")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, (helptext, fill) in _COMMANDS.items():
        if command in _COMMANDS and name != command:
            continue
        p = sub.add_parser(name, help=helptext, formatter_class=_Formatter)
        # -v after the sub-command too; SUPPRESS keeps an absent one from resetting `numapin -v exec`.
        p.add_argument("-v", "--verbose", action="store_true", default=argparse.SUPPRESS,
                       help="log what numapin does")
        fill(p)
    if command in _COMMANDS:
        parser.command_prog = f"numapin {command}"
    return parser


def _show_args(show: argparse.ArgumentParser) -> None:
    show.description = "Show this machine's topology as numapin sees it."
    show.add_argument("--json", action="store_true", help="one JSON object instead of text")
    _add_picture(show, ranks=False)
    _add_root(show)
    show.set_defaults(func=cmd_show)


def _plan_args(plan: argparse.ArgumentParser) -> None:
    plan.description = ("Print the placement of every local rank: one row per visible GPU, local rank r driving "
                        "GPU r % N (or entry r of NUMAPIN_RANK_MAP); with --gpus, rank i drives the i-th GPU listed.")
    plan.add_argument("--mode", choices=_modes(), help="placement mode (default: node)")
    plan.add_argument("--cpus", type=_cpuset_arg, metavar="LIST", help="explicit cpulist instead of a mode")
    plan.add_argument("--reserve", type=_count, default=0, metavar="K",
                      help="set K whole cores aside for one latency-critical thread (the fastest cores)")
    _add_cores(plan)
    plan.add_argument("--gpus", type=_gpu_list, metavar="LIST",
                      help="rank i drives the i-th GPU listed: logical indices, e.g. 0,2 or 0-3")
    plan.add_argument("--ranks", type=_count, metavar="N",
                      help="plan local ranks 0 to N-1, as a launcher of N processes would start them")
    plan.add_argument("--json", action="store_true", help="a JSON list, one object per rank")
    _add_picture(plan)
    _add_root(plan)
    plan.set_defaults(func=cmd_plan)


def _add_cores(parser: argparse.ArgumentParser) -> None:
    from .placement.modes import Cores

    parser.add_argument("--cores", choices=[c.value for c in Cores], default="all",
                        help="fastest: only the fastest kind of core among the placement's, where the machine has "
                             "CPU kinds (P-cores, priority cores; see numapin show); all: every one (default)")


def _file_name(text: str) -> str:
    if not text.strip():
        raise argparse.ArgumentTypeError("an empty file name")
    return text


def _picture_file(*endings: str) -> Callable[[str], str]:
    """A file name for a picture: ``-`` (standard output), or one ending as its format does (an SVG written
    into ``x.png`` is a file no viewer opens as what its name says)."""

    def check(text: str) -> str:
        name = _file_name(text)
        if name != "-" and not name.lower().endswith(endings):
            raise argparse.ArgumentTypeError(f"{name[:60]!r}: the file's name must end in {' or '.join(endings)} "
                                             "(or be - for standard output)")
        return name

    return check


def _add_picture(parser: argparse.ArgumentParser, ranks: bool = True) -> None:
    what = "packages, nodes, caches, cores, GPUs" + (", each rank's CPUs" if ranks else "")
    parser.add_argument("--svg", metavar="FILE", type=_picture_file(".svg"),
                        help=f"also draw the picture ({what}) as SVG into FILE (- for standard output, instead of "
                             "the text)")
    parser.add_argument("--html", metavar="FILE", type=_picture_file(".html", ".htm"),
                        help="the same picture in a self-contained HTML page, with hover text per CPU (- as for --svg)")


def _add_target(parser: argparse.ArgumentParser, mode_default: str | None = "node") -> None:
    """--gpu or --local-rank, and --mode: which GPU's placement (exec and doctor)."""
    target = parser.add_mutually_exclusive_group()
    target.add_argument("--gpu", type=_count, metavar="N",
                        help="logical GPU index (under CUDA_VISIBLE_DEVICES, or ROCm's variables on an AMD host)")
    target.add_argument("--local-rank", default="auto", metavar="auto|N",
                        help="the launcher's local rank (default auto: read it from the environment)")
    parser.add_argument("--mode", choices=_modes(),
                        help="placement mode (default: " + (mode_default or "the process's record's, else node") + ")")


def _exec_args(ex: argparse.ArgumentParser) -> None:
    ex.description = ("Pin this process for its GPU (CPUs and memory), mark the mask as numapin's, then exec "
                      "PROGRAM: same pid, same stdio, PROGRAM's own exit code and signals. Local ranks are read "
                      "from " + ", ".join(LOCAL_RANK_VARIABLES) + " (first set wins).")
    _add_target(ex)
    ex.add_argument("--cpus", type=_cpuset_arg, metavar="LIST", help="explicit cpulist instead of a mode")
    ex.add_argument("--nodes", type=_cpuset_arg, metavar="LIST",
                    help="node-only binding: the CPUs of these NUMA nodes (as numactl -N), instead of a GPU's")
    ex.add_argument("--mems", type=_cpuset_arg, metavar="LIST",
                    help="the memory policy's nodes instead of the placement's; alone (no --gpu, --cpus, --nodes): "
                         "memory-only binding, the CPUs left as they are (as numactl -m)")
    ex.add_argument("--reserve", type=_count, default=0, metavar="K",
                    help="keep K cores out of the mask (the fastest), exported as NUMAPIN_RESERVED for one hot thread")
    _add_cores(ex)
    from .pinning.memory import MemoryMode
    from .tools.exec import EXEC_POLICIES, Nics

    ex.add_argument("--nics", choices=[n.value for n in Nics], default="none",
                    help="auto: export the GPU's nearest NIC as UCX_NET_DEVICES and NVSHMEM_HCA_LIST (never "
                         "over a value already set; NCCL is left to choose its own); none: nothing (default)")
    ex.add_argument("--memory", choices=[m.value for m in MemoryMode], default="preferred",
                    help="memory policy for the GPU's node (default: preferred)")
    ex.add_argument("--policy", choices=[p.value for p in EXEC_POLICIES], default="respect",
                    help="what to do with a mask someone else set (default: respect)")
    ex.add_argument("--threads", default="auto", metavar="keep|auto|N",
                    help="thread pools (OMP_NUM_THREADS, MKL_NUM_THREADS, OPENBLAS_NUM_THREADS) when unset: "
                         "auto sizes them to the rank's share of the placement's CPUs (default; mode node: the "
                         "node's CPUs over its GPUs), N to N, keep leaves them; a value already set is never changed")
    ex.add_argument("--strict", action="store_true",
                    help="exit 2 instead of stepping down or running unpinned")
    ex.add_argument("--keep", action="store_true",
                    help="keep the placement while PROGRAM runs, any program: a small watcher process notices "
                         "a cpuset change or a thread someone else moved, answers by --policy and ends with "
                         "PROGRAM (NUMAPIN_KEEP is then not handed on: one keeper is enough); see numapin keep")
    ex.add_argument("--keep-period", type=_seconds_arg, default=None, metavar="SECONDS",
                    help="with --keep: seconds between two looks (default 1)")
    ex.add_argument("--dry-run", action="store_true", help="print what would be done; run nothing")
    ex.add_argument("--json", action="store_true", help="with --dry-run: print JSON")
    _add_root(ex)
    ex.add_argument("program", nargs=argparse.REMAINDER, metavar="-- PROGRAM [ARGS...]")
    ex.set_defaults(func=cmd_exec)


def _doctor_args(doc: argparse.ArgumentParser) -> None:
    doc.description = ("Check the environment (this process's, or PID's) and the machine against the placement "
                       "numapin would make: launcher bindings, OpenMP binding, thread-pool sizes, NUMA balancing, "
                       "a cgroup that cuts the GPU's node, GPUs sharing a node, mixed GPU models. Each finding has "
                       "a stable id, a severity, what is seen, why it matters and the fix. Exit 0: no warning or "
                       "error; 1: findings; 2: bad input.")
    _add_target(doc, mode_default=None)
    doc.add_argument("--pid", type=_count, metavar="PID",
                     help="check that process: its record of numapin's (a pin made inside it too), else its "
                          "environment's launcher rank and CUDA_VISIBLE_DEVICES; its mask and thread count")
    doc.add_argument("--reserve", type=_count, default=0, metavar="K",
                     help="judge the placement with K cores set aside for one latency-critical thread, as "
                          "numapin exec --reserve K makes it (interrupts on them are then found)")
    doc.add_argument("--buffer", type=_bytes, metavar="SIZE",
                     help="check a host buffer of SIZE (K, M, G, T) planned for the GPU: its node's free huge "
                          "pages (--hugepages) and the locked-memory limit (--lock)")
    doc.add_argument("--hugepages", choices=("2M", "1G"), help="with --buffer: huge pages of this size asked for")
    doc.add_argument("--lock", action="store_true", help="with --buffer: the buffer is to be locked (mlock)")
    doc.add_argument("--json", action="store_true", help="one JSON object: placement and findings")
    _add_pod_resources(doc)
    _add_root(doc)
    doc.set_defaults(func=cmd_doctor)


def _threads_args(th: argparse.ArgumentParser) -> None:
    th.description = ("One row per thread: tid, name, mask, last CPU, inside the placement, pinned by numapin; "
                      "then memory by node.")
    th.add_argument("pid", type=_count, metavar="PID", help="the process to inspect")
    which = th.add_mutually_exclusive_group()
    which.add_argument("--gpu", type=_count, metavar="N",
                       help="compare with GPU N's node placement, N as the process sees its GPUs (its "
                            "CUDA_VISIBLE_DEVICES), as in every numapin command")
    which.add_argument("--local-rank", type=_count, metavar="N",
                       help="compare with local rank N's placement (its GPU in the process's view)")
    which.add_argument("--cpus", type=_cpuset_arg, metavar="LIST", help="compare with these CPUs")
    th.add_argument("--mode", choices=_modes(),
                    help="compare with this mode's placement (default: the process's record's, else node)")
    th.add_argument("--json", action="store_true",
                    help="one JSON object: the placement compared with, every thread, the count outside, "
                         "memory by node (all and own bytes, remote share)")
    th.add_argument("--check", action="store_true",
                    help="exit 1 if a thread is outside the placement or too much memory is remote")
    _add_remote_bound(th)
    _add_root(th)
    th.set_defaults(func=cmd_threads)


def _add_remote_bound(parser: argparse.ArgumentParser) -> None:
    from .pinning.outcome import REMOTE_BOUND

    parser.add_argument("--max-remote-memory", type=_percent, metavar="PCT", default=100 * REMOTE_BOUND,
                        help="the largest share of a worker's own memory (heap, stacks, shared memory it made; not "
                             "files it maps) allowed on other nodes than its placement's before the verdict is "
                             f"misplaced (memory) (default {100 * REMOTE_BOUND:.0f}: past half, most of what its "
                             "threads touch crosses the interconnect; 100: memory reported, not judged)")


def _add_pod_resources(parser: argparse.ArgumentParser) -> None:
    from .facts.podresources import SOCKET

    parser.add_argument("--pod-resources", metavar="SOCKET", default=SOCKET,
                        help="the kubelet's pod-resources socket, which names the pods and containers of workers "
                             f"that run in Kubernetes (default {SOCKET}; needs numapin[kubernetes]; empty: not "
                             "asked)")


def _ps_args(ps: argparse.ArgumentParser) -> None:
    ps.description = ("Every GPU worker of this host: a process that holds a GPU (a /dev/nvidiaN or AMD render node "
                      "open, NVML's "
                      "process list) or numapin's record of it; with its GPU, expected placement, threads outside "
                      "it, remote share of its own memory, what placed it and the verdict: ok, misplaced (threads "
                      "outside, or too much of its own memory on other nodes), unknown, unreadable. A process known "
                      "only from its environment (a launcher rank, CUDA_VISIBLE_DEVICES: every shell of a job has "
                      "them) is a candidate, listed with --all or by PID, never counted. Run by a user other than "
                      "root, it judges other users' workers by their records and counts the processes it could not "
                      "look into. Exit 1 when a worker is misplaced; 2 for a PID that is no process.")
    ps.add_argument("pids", nargs="*", type=_count, metavar="PID", help="only these processes (default: all)")
    ps.add_argument("--all", action="store_true",
                    help="list the candidates too: processes known only from their environment (never counted)")
    _add_remote_bound(ps)
    _add_pod_resources(ps)
    ps.add_argument("--wide", action="store_true",
                    help="every column (rank, expected CPUs, threads, drift, what it was seen by, who placed it in "
                         "words), past 100 columns; the default fits 100: gpu is the GPU's index in each process's "
                         "own view, pci the GPU itself")
    ps.add_argument("--json", action="store_true",
                    help="one JSON object: every worker, the count misplaced, and the tally by verdict")
    ps.add_argument("--prometheus", action="store_true",
                    help="Prometheus text exposition format on standard output")
    ps.add_argument("--svg", metavar="FILE", type=_picture_file(".svg"),
                    help="also draw the live host as SVG into FILE (- for standard output, instead of the table): "
                         "each GPU and its workers, each worker's CPUs in its colour, CPUs running a thread outside "
                         "its placement outlined, its memory by node")
    ps.add_argument("--html", metavar="FILE", type=_picture_file(".html", ".htm"),
                    help="the same picture in a self-contained HTML page, with hover text per CPU (- as for --svg)")
    ps.add_argument("--textfile", metavar="DIR",
                    help="write DIR/numapin.prom for node_exporter's textfile collector, replaced whole (a reader "
                         "sees the old file or the new one, never half); exit 0 unless the scan or the write "
                         "failed")
    _add_root(ps)
    ps.set_defaults(func=cmd_ps)


def _seconds_arg(text: str) -> float:
    try:
        value = float(text) if text.isascii() else 0.0
    except ValueError:
        value = 0.0
    if not 0 < value < 86400:  # NaN fails too
        raise argparse.ArgumentTypeError(f"not a number of seconds above 0: {text[:40]!r}")
    return value


def _exporter_args(exp: argparse.ArgumentParser) -> None:
    exp.description = ("Serve the host's GPU workers to Prometheus: each scrape of /metrics scans the host as "
                       "numapin ps does (the same workers, verdicts and series as ps --prometheus) and adds "
                       "numapin_up (1 when the scan completed), numapin_scrape_duration_seconds and "
                       "numapin_scrape_errors_total. A scan that fails or runs past its time bound answers with "
                       "those three only, numapin_up 0. Runs until SIGTERM or ^C (exit 0).")
    exp.add_argument("--listen", required=True, metavar="ADDR:PORT",
                     help="where to listen: 127.0.0.1:9877 (this host only), :9877 (every IPv4 interface), "
                          "[::1]:9877; no default, so that exposing a host's process list is a choice; "
                          "port 0 takes a free one (the URL is printed)")
    exp.add_argument("--scrape-timeout", type=_seconds_arg, default=10.0, metavar="SECONDS",
                     help="the longest a scan may take (default 10, Prometheus's own default); lowered to what "
                          "the scraper says it waits")
    _add_remote_bound(exp)
    _add_pod_resources(exp)
    _add_root(exp)
    exp.set_defaults(func=cmd_exporter)


def _keep_args(keep: argparse.ArgumentParser) -> None:
    keep.description = ("Keep the placement numapin applied to each PID (any program: its record says what) while "
                        "it runs, from outside it: every period, notice a change of the cgroup's CPUs or memory "
                        "nodes, a thread whose mask someone else changed, a new thread on a mask that is not the "
                        "placement; answer each by the process's policy (a cpuset change: the placement decided "
                        "again inside it and put back; a foreign mask: reported under respect, put back under "
                        "override), count it in the process's record (ps and threads show it) and print it. Ends "
                        "when every PID has ended, after --looks looks, or at ^C/SIGTERM (exit 0). Memory "
                        "policies cannot be set from outside: a change of memory nodes is reported.")
    keep.add_argument("pids", nargs="+", type=_count, metavar="PID", help="the processes to keep")
    keep.add_argument("--period", type=_seconds_arg, default=None, metavar="SECONDS",
                      help="seconds between two looks (default 1)")
    keep.add_argument("--looks", type=_count, default=None, metavar="N", help="stop after N looks")
    keep.add_argument("--json", action="store_true", help="each drift as one JSON object per line")
    keep.set_defaults(func=cmd_keep)


def _ab_args(ab: argparse.ArgumentParser) -> None:
    ab.description = ("Run COMMAND under several placements and say which is fastest, by how much, and how sure: "
                      "each variant is numapin exec with its options (exactly what you would then deploy), run in "
                      "rounds that take every variant once in a random order, after warm-up rounds that are "
                      "discarded. Per variant: the median and its 95% bootstrap interval; against the baseline: "
                      "the ratio of medians with its interval and the Mann-Whitney U test's p-value, a difference "
                      "called only below the error rate shared over every comparison; then what to deploy. Runs "
                      "that fail, time out or give no value are reported, never averaged in. ^C stops and reports "
                      "what was measured (exit 130).")
    ab.add_argument("--variant", action="append", default=[], metavar="NAME=EXEC-OPTIONS",
                    help="a variant: numapin exec's options, e.g. 'bind=--mode node --memory bind' (NAME= alone: "
                         "the baseline's placement of nothing); repeat for each. Default: none, node-bind, "
                         "node-preferred, exclusive, and fastest where the machine has kinds of cores")
    ab.add_argument("--baseline", metavar="NAME", help="the variant the others are compared with (default: the "
                    "first)")
    target = ab.add_mutually_exclusive_group()
    target.add_argument("--gpu", type=_count, metavar="N", help="as numapin exec's: added to every variant")
    target.add_argument("--local-rank", metavar="auto|N", help="as numapin exec's: added to every variant")
    ab.add_argument("--metric", default="wall", metavar="wall|regex:PATTERN|json:FILE:KEY",
                    help="what a run is judged by: its wall time (default), the number PATTERN finds last in what "
                         "it prints (its group, or the whole match), or KEY (dotted) in the JSON FILE it writes")
    better = ab.add_mutually_exclusive_group()
    better.add_argument("--higher-is-better", dest="better", action="store_const", const="higher",
                        help="for regex: and json: metrics, a throughput")
    better.add_argument("--lower-is-better", dest="better", action="store_const", const="lower",
                        help="for regex: and json: metrics, a latency")
    ab.add_argument("--rounds", type=_positive, default=10, metavar="N",
                    help="rounds measured (default 10); with --until-clear, the most")
    ab.add_argument("--warmup", type=_count, default=1, metavar="N", help="warm-up rounds, discarded (default 1)")
    ab.add_argument("--until-clear", action="store_true",
                    help="stop once every comparison calls a difference (looked at after each round from the "
                         "fifth; the error rate shared over the looks too)")
    ab.add_argument("--max-time", type=_seconds_arg, metavar="SECONDS", help="start no run after this long")
    ab.add_argument("--timeout", type=_seconds_arg, metavar="SECONDS",
                    help="stop a run still going after this long and count it as timed out")
    ab.add_argument("--seed", type=_count, metavar="N", help="the order of the runs and the intervals' resamples, "
                    "for a report that can be made again")
    ab.add_argument("--json", action="store_true", help="the report as one JSON object, every run in it")
    ab.add_argument("--svg", metavar="FILE", type=_picture_file(".svg"),
                    help="also draw every run's value per variant, with the medians and intervals, as SVG into FILE "
                         "(- for standard output, instead of the table)")
    ab.add_argument("--html", metavar="FILE", type=_picture_file(".html", ".htm"),
                    help="the same picture and the table in a self-contained HTML page (- as for --svg)")
    ab.add_argument("command", nargs=argparse.REMAINDER, metavar="-- COMMAND [ARGS...]")
    ab.set_defaults(func=cmd_ab)


def _positive(text: str) -> int:
    value = _count(text)
    if value == 0:
        raise argparse.ArgumentTypeError("expected a number above 0")
    return value


def _snapshot_args(snap: argparse.ArgumentParser) -> None:
    snap.description = "Write OUT.tar.gz (or .tgz; - for standard output) with exactly the files numapin reads."
    snap.add_argument("out", metavar="OUT.tar.gz")
    snap.add_argument("--force", action="store_true", help="replace OUT.tar.gz when it exists")
    _add_root(snap)
    snap.set_defaults(func=cmd_snapshot)


def _buffer_args(buf: argparse.ArgumentParser) -> None:
    buf.description = ("Fill a host buffer on a GPU's node (or a node) as numapin.host_buffer does: mapped, bound to "
                       "the node, filled by threads on its CPUs; print where its pages went and how fast it filled, "
                       "then give it back. For sizing pools on a host.")
    where = buf.add_mutually_exclusive_group()
    where.add_argument("--gpu", type=_count, metavar="N", help="GPU N's node (default: this process's GPU, as pin's)")
    where.add_argument("--node", type=_count, metavar="N", help="NUMA node N")
    buf.add_argument("--size", required=True, type=_bytes, metavar="SIZE", help="bytes, or with K, M, G, T: 8G")
    buf.add_argument("--hugepages", choices=("2M", "1G"), help="huge pages from the node's pool (base pages, "
                     "with a note, where too few are free)")
    buf.add_argument("--threads", type=_positive, metavar="K", help="filling threads (default: the node's CPUs "
                     "this process may use, at most 16)")
    buf.add_argument("--lock", action="store_true", help="mlock it too")
    buf.add_argument("--json", action="store_true", help="one JSON object instead of text")
    buf.set_defaults(func=cmd_buffer)


def _bytes(text: str) -> int:
    from .tools.buffer import parse_size

    try:
        return parse_size(text)
    except NumapinError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def cmd_buffer(args: argparse.Namespace) -> int:
    import json

    from .tools.buffer import describe, fill

    report = fill(args.size, gpu=args.gpu, node=args.node, hugepages=args.hugepages, threads=args.threads,
                  lock=args.lock, progress=None if args.json else sys.stderr)
    print(json.dumps(report, indent=2) if args.json else describe(report))
    return 0


def _machine_args(mach: argparse.ArgumentParser) -> None:
    from .facts.synthetic import SHAPES

    mach.description = ("Write the sys/ and proc/ files of a synthetic machine under DIR (new, empty, or holding "
                        "the same machine), as the kernel and the NVIDIA driver would show them.")
    mach.add_argument("name", metavar="NAME", choices=sorted(SHAPES), help="one of: " + ", ".join(sorted(SHAPES)))
    mach.add_argument("dir", metavar="DIR", help="the folder to write (it stands in for /)")
    mach.set_defaults(func=cmd_machine)


_COMMANDS = {
    "show": ("the machine: NUMA nodes, packages, cores, caches, cgroup, GPUs", _show_args),
    "plan": ("where each local rank's worker would run", _plan_args),
    "exec": ("pin, then replace this process with PROGRAM (bind at birth)", _exec_args),
    "threads": ("where every thread of a process runs", _threads_args),
    "doctor": ("what in the job would undo or waste the pin, and the fix", _doctor_args),
    "ps": ("every GPU worker of this host: where it runs, where it should, who placed it", _ps_args),
    "keep": ("keep processes' placements while they run: notice drift, put back what is numapin's", _keep_args),
    "ab": ("which placement is fastest for a command here: measured, with the odds", _ab_args),
    "exporter": ("serve the host's GPU workers to Prometheus over HTTP, scanned at each scrape", _exporter_args),
    "numactl": ("numactl's language, carried out by numapin (no numactl needed)", _numactl_args),
    "buffer": ("fill a host buffer on a GPU's node: where its pages went, how fast", _buffer_args),
    "snapshot": ("capture this machine's topology files for a bug report", _snapshot_args),
    "machine": ("write a synthetic machine to a folder, for --root or NUMAPIN_FSROOT", _machine_args),
}


#: The commands whose answers depend on the machine read, so take --machine and --root (the parser's own list is
#: checked against it by the tests).
_READ_THE_MACHINE = ("show", "plan", "exec", "threads", "doctor", "ps", "exporter", "snapshot")


def _command(argv: Sequence[str]) -> str | None:
    """The sub-command named in ``argv`` (its first word not an option), when it is one of ours."""
    for word in argv:
        if not word.startswith("-"):
            return word if word in _COMMANDS else None
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
        run, hint = (lambda: cmd_numactl(words[at + 1:])), (lambda exc: "")
    elif not [w for w in words if w not in ("-v", "--verbose")]:
        build_parser().print_help()  # plain `numapin`: what it can do, not an error about what is missing
        return 0
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
        return 0
    except (CliError, HostError, NumapinError, OSError) as exc:
        print(f"numapin {command}: {_one_line(exc)}{hint(exc)}", file=sys.stderr)
        return 2


def _one_line(exc: BaseException) -> str:
    """The error as one line; a file error as the system says it, without Python's "[Errno 13]"."""
    if isinstance(exc, OSError) and not isinstance(exc, (HostError, NumapinError)) and exc.strerror:
        return f"{exc.filename}: {exc.strerror}" if exc.filename is not None else exc.strerror
    return str(exc)


def _hint(args: argparse.Namespace, exc: BaseException) -> str:
    """Where one exists, the next step: a machine with no GPU can still show what numapin does."""
    from .facts.gpus import NoGpuVisible

    if isinstance(exc, NoGpuVisible) and "none found" in str(exc) and "machine" in vars(args) and not (
            getattr(args, "machine", None) or getattr(args, "root", None)):
        pid = f" {args.pid}" if getattr(args, "pid", None) is not None and args.command == "threads" else ""
        return f"; to try numapin as on a GPU host: numapin {args.command}{pid} --machine dgx-h100"
    return ""


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
