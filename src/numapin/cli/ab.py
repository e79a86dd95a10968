"""``numapin ab``: which placement is fastest for a command here: measured, with the odds."""

from __future__ import annotations

import argparse
import os
import sys

from ..cpuset import CpuSet
from .common import (
    CliError,
    Exit,
    after_dashes,
    count_arg,
    picture_file,
    picture_to_stdout,
    positive_arg,
    seconds_arg,
    write_pictures,
)

TYPE_CHECKING = False
if TYPE_CHECKING:
    from ..tools.ab.runs import Variant


HELP = "which placement is fastest for a command here: measured, with the odds"


def run(args: argparse.Namespace) -> int:
    import shutil

    from ..tools.ab import picture
    from ..tools.ab.report import analyse, clear
    from ..tools.ab.runs import Design, Run, experiment, parse_metric

    command = after_dashes(args.command, "no COMMAND given (numapin ab [options] -- COMMAND [ARGS...])")
    if shutil.which(command[0]) is None:
        raise CliError(f"no program {command[0]!r} (not an executable file, nor on PATH)")
    to_stdout = picture_to_stdout(args)
    if to_stdout and args.json:
        raise CliError("--json and a picture on standard output (-): give the picture a file")
    metric = parse_metric(args.metric, args.better)
    variants, baseline = _variants(args)
    design = Design(args.rounds, args.warmup, args.until_clear, args.max_time, args.timeout, args.seed)

    from ..tools.progress import Bar

    # A bar on a terminal; nothing per run otherwise (a log wants the table, and the table says each loss).
    bar, total, done = Bar(sys.stderr, "numapin ab"), (design.warmup + design.rounds) * len(variants), [0]

    def said(run: Run) -> None:
        done[0] += 1
        shown = f"{run.value:.6g}" if run.value is not None else run.status.value
        stage = "warm-up" if run.round < 0 else f"round {run.round + 1}/{design.rounds}"
        bar.update(done[0] / total, f"{done[0]}/{total} runs · {stage} · {run.variant}: {shown}")

    allowed = str(CpuSet(os.sched_getaffinity(0)))
    from ..base.stop import Stop

    # ^C sets a flag the runs look at between steps: a run is never left half started (a KeyboardInterrupt
    # inside Popen would orphan it), and the one under way is stopped with everything it started.
    with Stop.on("SIGINT") as stop:
        runs, interrupted = experiment(command, variants, metric, design, allowed=allowed, progress=said,
                                       clear=lambda found: clear(found, variants, design, baseline), stop=stop)
    bar.close()
    report = analyse(runs, command, variants, metric, design, baseline, interrupted=interrupted)
    from ..pinning import record

    record.entries()  # the runs' records, stale now that each run ended: swept, the host as it was
    write_pictures(args, lambda: picture.svg(report), lambda: picture.html(report))
    if args.json:
        import json

        print(json.dumps(report.as_dict(), indent=2))
    elif not to_stdout:
        print(report.table())
    return Exit.INTERRUPTED if interrupted else Exit.OK


def _variants(args: argparse.Namespace) -> tuple[list[Variant], str]:
    """The variants compared (``--variant``, else this host's defaults), each aimed at the GPU asked, and the
    baseline's name; CliError for names given twice, fewer than two, or a baseline that is none of them."""
    from ..base.frozen import replace
    from ..tools.ab.runs import parse_variant

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
    return variants, baseline


def _default_variants() -> list[Variant]:
    """The placements that matter on this host: none, the GPU's node with memory bound or preferred, an
    exclusive share, and the fastest cores where the machine has kinds of core."""
    from ..facts.machine import cached as cached_facts
    from ..tools.ab.runs import Variant

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


def arguments(ab: argparse.ArgumentParser) -> None:
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
    target.add_argument("--gpu", type=count_arg, metavar="N", help="as numapin exec's: added to every variant")
    target.add_argument("--local-rank", metavar="auto|N", help="as numapin exec's: added to every variant")
    ab.add_argument("--metric", default="wall", metavar="wall|regex:PATTERN|json:FILE:KEY",
                    help="what a run is judged by: its wall time (default), the number PATTERN finds last in what "
                         "it prints (its group, or the whole match), or KEY (dotted) in the JSON FILE it writes")
    better = ab.add_mutually_exclusive_group()
    better.add_argument("--higher-is-better", dest="better", action="store_const", const="higher",
                        help="for regex: and json: metrics, a throughput")
    better.add_argument("--lower-is-better", dest="better", action="store_const", const="lower",
                        help="for regex: and json: metrics, a latency")
    ab.add_argument("--rounds", type=positive_arg, default=10, metavar="N",
                    help="rounds measured (default 10); with --until-clear, the most")
    ab.add_argument("--warmup", type=count_arg, default=1, metavar="N", help="warm-up rounds, discarded (default 1)")
    ab.add_argument("--until-clear", action="store_true",
                    help="stop once every comparison calls a difference (looked at after each round from the "
                         "fifth; the error rate shared over the looks too)")
    ab.add_argument("--max-time", type=seconds_arg, metavar="SECONDS", help="start no run after this long")
    ab.add_argument("--timeout", type=seconds_arg, metavar="SECONDS",
                    help="stop a run still going after this long and count it as timed out")
    ab.add_argument("--seed", type=count_arg, metavar="N", help="the order of the runs and the intervals' resamples, "
                    "for a report that can be made again")
    ab.add_argument("--json", action="store_true", help="the report as one JSON object, every run in it")
    ab.add_argument("--svg", metavar="FILE", type=picture_file(".svg"),
                    help="also draw every run's value per variant, with the medians and intervals, as SVG into FILE "
                         "(- for standard output, instead of the table)")
    ab.add_argument("--html", metavar="FILE", type=picture_file(".html", ".htm"),
                    help="the same picture and the table in a self-contained HTML page (- as for --svg)")
    ab.add_argument("command", nargs=argparse.REMAINDER, metavar="-- COMMAND [ARGS...]")
    ab.set_defaults(func=run)
