"""``numapin exporter``: serve the host's GPU workers to Prometheus over HTTP, scanned at each scrape."""

from __future__ import annotations

import argparse
import sys

from .common import Exit, add_pod_resources, add_remote_bound, add_root, machine_root, seconds_arg

HELP = "serve the host's GPU workers to Prometheus over HTTP, scanned at each scrape"


def run(args: argparse.Namespace) -> int:

    from ..base.stop import STOPPING, Stop
    from ..tools.exporter import Exporter

    with machine_root(args) as root:
        exporter = Exporter(root=root, max_remote=args.max_remote_memory / 100, timeout=args.scrape_timeout,
                            pod_resources=args.pod_resources or None)
        with Stop.on(*STOPPING) as stop:
            exporter.serve(args.listen, lambda url: print(f"numapin exporter: serving {url}", file=sys.stderr,
                                                          flush=True), stop)
    return Exit.OK


def arguments(exp: argparse.ArgumentParser) -> None:
    exp.description = ("Serve the host's GPU workers to Prometheus: each scrape of /metrics scans the host as "
                       "numapin ps does (the same workers, verdicts and series as ps --prometheus) and adds "
                       "numapin_up (1 when the scan completed), numapin_scrape_duration_seconds and "
                       "numapin_scrape_errors_total. A scan that fails or runs past its time bound answers with "
                       "those three only, numapin_up 0. Runs until SIGTERM or ^C (exit 0).")
    exp.add_argument("--listen", required=True, metavar="ADDR:PORT",
                     help="where to listen: 127.0.0.1:9877 (this host only), :9877 (every IPv4 interface), "
                          "[::1]:9877; no default, so that exposing a host's process list is a choice; "
                          "port 0 takes a free one (the URL is printed)")
    exp.add_argument("--scrape-timeout", type=seconds_arg, default=10.0, metavar="SECONDS",
                     help="the longest a scan may take (default 10, Prometheus's own default); lowered to what "
                          "the scraper says it waits")
    add_remote_bound(exp)
    add_pod_resources(exp)
    add_root(exp)
    exp.set_defaults(func=run)
