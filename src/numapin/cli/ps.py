"""``numapin ps``: every GPU worker of this host: where it runs, where it should, who placed it."""

from __future__ import annotations

import argparse
import os
import sys

from ..cpuset import CpuSet
from .common import (
    CliError,
    Exit,
    add_pod_resources,
    add_remote_bound,
    add_root,
    count_arg,
    dash,
    machine_root,
    picture_file,
    picture_to_stdout,
    write_pictures,
)

TYPE_CHECKING = False
if TYPE_CHECKING:
    from ..tools.ps import Survey


HELP = "every GPU worker of this host: where it runs, where it should, who placed it"


def run(args: argparse.Namespace) -> int:
    from ..tools.ps import survey

    formats = [name for name, given in (("--json", args.json), ("--prometheus", args.prometheus),
                                        ("--textfile", args.textfile is not None)) if given]
    if len(formats) > 1:
        raise CliError(f"{' and '.join(formats)} are formats of the same listing: give one")
    quiet = picture_to_stdout(args)
    if quiet and formats:
        raise CliError(f"{formats[0]} and a picture to standard output: give the picture a file")
    with machine_root(args) as root:
        found = survey(args.pids or None, root=root, max_remote=args.max_remote_memory / 100,
                       candidates=args.all, pod_resources=args.pod_resources or None,
                       every_gpu=args.prometheus or args.textfile is not None)
        if args.svg or args.html:
            _live_pictures(args, root, found)
        rehearsal = _rehearsal(f"machine: {args.machine}" if args.machine else f"root: {root}" if root else None,
                               root)
    if quiet:
        return found.exit_code
    if args.textfile is not None:
        from ..tools.prometheus import exposition, write_textfile

        # For a timer: the file is replaced whole (node_exporter never reads half of one), and the exit status
        # says whether the scan and the write worked, not what they found (the series say that).
        write_textfile(args.textfile, exposition(found))
        return Exit.OK
    if args.prometheus:
        from ..tools.prometheus import exposition

        sys.stdout.write(exposition(found))
    elif args.json:
        import json

        print(json.dumps({"workers": [w.as_dict() for w in found.workers], "misplaced": len(found.misplaced),
                          "tally": found.tally(), "unseen": found.unseen, "pod_names_unread": found.pod_names_said},
                         indent=2))
    else:
        print("\n".join(_table(found, args.wide)))
        for line in _footnotes(found, args.wide, rehearsal):
            print(line)
    return found.exit_code


def _table(found: Survey, wide: bool) -> list[str]:
    """The workers as a table: every column with ``wide``, else within 100 columns (an ``expected`` column for a
    rehearsal, ``drift`` and ``pod`` only where a worker has one)."""
    from ..base.text import table
    from ..observe.verdict import Verdict, placed_by_label

    if wide:
        header = ["pid", "name", "rank", "gpu", "pci", "placed by", "expected", "threads", "outside", "remote",
                  "drift", "seen by", "verdict"]
        rows = [[str(w.pid), w.name, dash(w.rank), dash(w.gpu), w.where or "-", w.placed_by,
                 "-" if w.target is None else str(w.target), str(w.threads), str(w.outside),
                 "-" if w.remote is None else f"{100 * w.remote:.1f}%", w.drift_words,
                 w.why + (" (candidate)" if w.candidate else ""), w.verdict_words] for w in found.workers]
    else:  # within 100 columns: who placed it in one word, the threads outside of all, drift where there is any
        header = ["pid", "name", "gpu", "pci", "placed by", "outside", "remote", "verdict"]
        rows = [[str(w.pid), w.name, dash(w.gpu), w.where or "-", placed_by_label(w.placed_by),
                 "-" if w.verdict is Verdict.REHEARSAL else f"{w.outside} of {w.threads}",
                 "-" if w.remote is None else f"{100 * w.remote:.1f}%",
                 w.verdict_words + (" (candidate)" if w.candidate else "")] for w in found.workers]
        if any(w.verdict is Verdict.REHEARSAL for w in found.workers):  # what it would have: the point of one
            _column(header, rows, 4, "expected", ["-" if w.target is None else str(w.target) for w in found.workers])
        if any(w.drift for w in found.workers):
            _column(header, rows, 6, "drift", [w.drift_words for w in found.workers])
    if any(w.pod is not None for w in found.workers):  # a column only where a worker runs in a pod
        _column(header, rows, 2, "pod", ["-" if w.pod is None else str(w.pod) for w in found.workers])
    return table(header, rows)


def _column(header: list[str], rows: list[list[str]], at: int, name: str, cells: list[str]) -> None:
    """Put a column in at ``at``: its name in the header, a cell in each row."""
    header.insert(at, name)
    for row, cell in zip(rows, cells, strict=True):
        row.insert(at, cell)


def _footnotes(found: Survey, wide: bool, rehearsal: str | None) -> list[str]:
    """The lines under the table: each worker's notes, memory elsewhere, kubelet findings and (``wide``) other
    pinners; what the columns mean; where pod names came from; a rehearsal; the tally; who was not looked into."""
    from ..base.text import counted
    from ..observe.verdict import Verdict

    lines = []
    for w in found.workers:
        if w.note and w.verdict is not Verdict.REHEARSAL:  # the rehearsal's line below says it once for all
            lines.append(f"note: {w.pid}: {w.note}")
        memory = w.host_memory
        lines += [f"memory: {w.pid}: {words} (numapin doctor --pid {w.pid})"
                  for words in ([] if memory is None else [memory.shared_elsewhere, *memory.buffers_elsewhere])
                  if words]
        if w.kubelet:
            lines.append(f"kubelet: {w.pid}: {', '.join(w.kubelet)} (numapin doctor --pid {w.pid} says why and the "
                         "fix)")
        lines += [f"crowd: {w.pid}: {words}" for words in (w.crowd if wide else ())]
    if found.workers and wide:
        lines.append("gpu: the GPU's index in each process's own view (its CUDA_VISIBLE_DEVICES, or ROCm's "
                     "variables); pci: the GPU itself")
    if found.pod_names_stale is not None:
        lines.append(f"pod: names from {found.pod_names_stale}")
    elif found.pod_names:
        lines.append(f"pod: named by UID and container id only: {found.pod_names}")
    if rehearsal:  # said, so that the listing is not taken for this host's own verdicts
        lines.append(rehearsal)
    lines.append(tally(found.tally(), len(found.counted)))
    if found.unseen:
        unseen = counted(found.unseen, "process", "processes")
        why = ("even root may not look into them: another PID namespace's, or a ptrace restriction such as "
               "Yama's" if os.geteuid() == 0 else "their open files and environment are for their owners or "
               "root; run as root to see every one")
        lines.append(f"not looked into: {unseen} of other users, any of which may be a GPU worker ({why})")
    return lines


def _rehearsal(typed: str | None, root: str | None) -> str | None:
    """A line saying that the machine read (``typed``: ``machine: NAME``, ``root: DIR``) is not this host (its CPUs
    are not this host's), or None."""
    if not typed:
        return None
    from ..facts.machine import cached, this_host_cpus

    cpus, here = cached(root, {}).topology.online, this_host_cpus()
    if cpus <= here:
        return None
    return (f"{typed} is a rehearsal (its CPUs {cpus}; this host's {here}): this host's processes judged as if "
            "they ran there, by their records and environment; those rehearsed there, by what was decided for them")


def _live_pictures(args: argparse.Namespace, root: str | None, found: Survey) -> None:
    """--svg and --html of ps: the live host, each worker in its colour where it should run, what strays outlined."""
    import socket

    from ..facts.machine import cached
    from ..tools import picture

    facts = cached(root, {})  # every GPU of the machine, as no CUDA_VISIBLE_DEVICES hides them
    live = []
    for w in found.counted:
        if w.expected is None:
            continue  # nothing says where it should be: the table says so, the picture has no place for it
        mine: dict[int, int] = {}
        for nodes in ({} if w.host_memory is None else w.host_memory.by_kind).values():
            for node, size in nodes.items():
                mine[node] = mine.get(node, 0) + size
        live.append(picture.LiveWorker(w.pid, w.name, w.expected, w.verdict_words, w.threads, w.outside,
                                       w.outside_cpus or CpuSet(), tuple(sorted(mine.items()))))
    from ..base.text import counted

    title = f"numapin ps · {socket.gethostname()} · {counted(len(live), 'GPU worker')}"
    write_pictures(args, lambda: picture.svg(facts, (), title, live), lambda: picture.html(facts, (), title, live))


def tally(tally: dict[str, int], workers: int) -> str:
    """``3 GPU workers: 1 ok, 1 misplaced, 1 unknown; 2 candidates (their environment only, not counted)``."""
    from ..base.text import counted

    parts = [f"{n} {verdict}" for verdict, n in tally.items() if n and verdict != "candidates"]
    line = f"{counted(workers, 'GPU worker')}" + (f": {', '.join(parts)}" if parts else "")
    if tally["candidates"]:
        line += (f"; {counted(tally['candidates'], 'candidate')} (known from their environment only: not "
                 "counted)")
    return line


def arguments(ps: argparse.ArgumentParser) -> None:
    ps.description = ("Every GPU worker of this host: a process that holds a GPU (a /dev/nvidiaN or AMD render node "
                      "open, NVML's process list) or numapin's record of it; with its GPU, expected placement, "
                      "threads outside it, remote share of its own memory, what placed it and the verdict: ok, "
                      "misplaced (threads outside, or too much of its own memory on other nodes), unknown, "
                      "unreadable; with --root DIR, rehearsal (a process a rehearsal under DIR started, listed by what "
                      "was decided for it). A process known only from its environment (a launcher rank, "
                      "CUDA_VISIBLE_DEVICES: every shell of a job has them) is a candidate, listed with --all or by "
                      "PID, never counted. Run by a user other than root, it judges other users' workers by their "
                      "records and counts the processes it could not look into. Exit 1 when a worker is misplaced; 2 "
                      "for a PID that is no process.")
    ps.add_argument("pids", nargs="*", type=count_arg, metavar="PID", help="only these processes (default: all)")
    ps.add_argument("--all", action="store_true",
                    help="list the candidates too: processes known only from their environment (never counted)")
    add_remote_bound(ps)
    add_pod_resources(ps)
    ps.add_argument("--wide", action="store_true",
                    help="every column (rank, expected CPUs, threads, drift, what it was seen by, who placed it in "
                         "words), past 100 columns; the default fits 100: gpu is the GPU's index in each process's "
                         "own view, pci the GPU itself")
    ps.add_argument("--json", action="store_true",
                    help="one JSON object: every worker, the count misplaced, and the tally by verdict")
    ps.add_argument("--prometheus", action="store_true",
                    help="Prometheus text exposition format on standard output")
    ps.add_argument("--svg", metavar="FILE", type=picture_file(".svg"),
                    help="also draw the live host as SVG into FILE (- for standard output, instead of the table): "
                         "each GPU and its workers, each worker's CPUs in its colour, CPUs running a thread outside "
                         "its placement outlined, its memory by node")
    ps.add_argument("--html", metavar="FILE", type=picture_file(".html", ".htm"),
                    help="the same picture in a self-contained HTML page, with hover text per CPU (- as for --svg)")
    ps.add_argument("--textfile", metavar="DIR",
                    help="write DIR/numapin.prom for node_exporter's textfile collector, replaced whole (a reader "
                         "sees the old file or the new one, never half); exit 0 unless the scan or the write "
                         "failed")
    add_root(ps)
    ps.set_defaults(func=run)
