"""``numapin exporter``: the host's GPU workers served to Prometheus over HTTP, scanned at each scrape.

A scrape of ``/metrics`` runs one :func:`numapin.tools.ps.survey` and answers with
its series (:func:`numapin.tools.prometheus.exposition`) and the exporter's own:

- ``numapin_up``: 1 when this scrape's scan completed, 0 when it failed or ran past its bound;
- ``numapin_scrape_duration_seconds``: how long this scrape's scan took;
- ``numapin_scrape_errors_total``: the scans that failed or ran out of time since the exporter started.

- ``numapin_scan_age_seconds``: how old the workers' series served are (0 for this scrape's own scan).

Scrapes that arrive together share one scan: one scans, the others wait for its answer within
their own bounds (a client that keeps many scrapes in flight costs one scan at a time, never one
each). A scan stops at its deadline, checked inside each step over a process (a container that
makes its processes costly to look into cannot hold it, nor the next scrape, hostage). A scrape
whose scan failed or ran out of time answers ``numapin_up 0`` with the last complete scan's series,
if any, said stale by ``numapin_scan_age_seconds``: never a partial count, which would read as
workers gone. The bound is ``--scrape-timeout``, lowered to what Prometheus says it waits (its
``X-Prometheus-Scrape-Timeout-Seconds`` header) less a margin for the answer to travel.
"""

from __future__ import annotations

import threading
import time

from ..base.errors import NumapinError, UsageError
from ..base.logger import log
from .prometheus import exposition
from .ps import Kept, ScanTimeout, survey

TYPE_CHECKING = False
if TYPE_CHECKING:
    import os
    from collections.abc import Callable, Mapping

    from ..base.stop import Stop
    from .ps import Survey

__all__ = ["OWN_METRICS", "Exporter", "parse_listen"]

#: The exporter's own series: name -> (type, help).
OWN_METRICS = {
    "numapin_up": ("gauge", "1 when this scrape's scan of the host's processes completed, else 0."),
    "numapin_scrape_duration_seconds": ("gauge", "Seconds this scrape's scan took."),
    "numapin_scrape_errors_total": ("counter", "Scans that failed or ran past their time bound since the exporter "
                                               "started."),
    "numapin_scan_age_seconds": ("gauge", "Seconds since the scan whose workers' series this scrape serves (0: its "
                                          "own; more: its scan failed, and these are the last complete scan's)."),
}

#: Prometheus's text format, as its scrapers ask for it.
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

#: Taken off the time Prometheus says it waits, for the answer to reach it.
_MARGIN = 0.5


def parse_listen(text: str) -> tuple[str, int]:
    """``ADDR:PORT`` as (host, port): ``127.0.0.1:9877``, ``[::1]:9877``, ``:9877`` (every IPv4 interface);
    UsageError for anything else. Port 0 asks the kernel for a free one."""
    host, colon, port = text.rpartition(":")
    if not colon or not port.isascii() or not port.isdigit() or int(port) > 65535:
        raise UsageError(f"--listen {text!r}: expected ADDR:PORT (127.0.0.1:9877, [::1]:9877, :9877 for every "
                         "interface), the port a number from 0 to 65535", value=text)
    if host.startswith("[") != host.endswith("]") or (":" in host and not host.startswith("[")):
        raise UsageError(f"--listen {text!r}: write an IPv6 address in brackets, as [::1]:9877", value=text)
    return host.strip("[]"), int(port)


def _seconds(text: str | None) -> float | None:
    try:
        value = float(text) if text else None
    except ValueError:
        return None
    return value if value is not None and value > 0 else None


class _Flight:
    """One scan under way, and its answer for every scrape that waits on it."""

    def __init__(self) -> None:
        self.done = threading.Event()
        self.found: Survey | None = None


class Exporter:
    """Scans on demand, one at a time, each within its bound, shared by the scrapes that arrive while it runs;
    counts the scrapes whose scan failed; keeps the last complete scan to serve, said stale, when one fails."""

    def __init__(self, *, root: str | os.PathLike[str] | None = None, max_remote: float | None = None,
                 timeout: float = 10.0, scan: Callable[[float], Survey] | None = None,
                 pod_resources: str | None = None) -> None:
        self.timeout = timeout
        self.errors = 0
        # Kept between scans, which run one at a time: what a process cannot have changed is not read again.
        kept = Kept()
        self._scan = scan or (lambda deadline: survey(root=root, max_remote=max_remote, deadline=deadline,
                                                      pod_resources=pod_resources, every_gpu=True, kept=kept))
        self._lock = threading.Lock()
        self._flight: _Flight | None = None
        self._last: tuple[float, Survey] | None = None  # when the last complete scan ended, and what it found

    def scrape(self, waits: float | None = None) -> str:
        """The text of one scrape: the workers' series and the exporter's own; ``waits``, what the scraper said
        it waits (seconds)."""
        bound = self.timeout if waits is None else max(0.1, min(self.timeout, waits - _MARGIN))
        started = time.monotonic()
        with self._lock:
            flight = self._flight
            leading = flight is None
            if flight is None:
                flight = self._flight = _Flight()
        if leading:
            self._lead(flight, started + bound, bound)
        elif not flight.done.wait(bound):
            log.warning("exporter: the scan under way did not end within this scrape's bound (%.1f s)", bound)
        found = flight.found if flight.done.is_set() else None
        took = time.monotonic() - started
        with self._lock:  # scrapes run in threads of their own, and a counter must not lose one
            if found is None:
                self.errors += 1
            last = self._last
        served, age = (found, 0.0) if found is not None else (None, 0.0) if last is None else \
            (last[1], time.monotonic() - last[0])
        own = {"numapin_up": int(found is not None), "numapin_scrape_duration_seconds": round(took, 6),
               "numapin_scrape_errors_total": self.errors, "numapin_scan_age_seconds": round(age, 3)}
        lines = [] if served is None else [exposition(served).rstrip("\n")]
        for name, (kind, helptext) in OWN_METRICS.items():
            lines += [f"# HELP {name} {helptext}", f"# TYPE {name} {kind}", f"{name} {own[name]}"]
        return "\n".join(lines) + "\n"

    def _lead(self, flight: _Flight, deadline: float, bound: float) -> None:
        """Run the scan ``flight`` stands for, within ``deadline``, and hand its answer to every scrape waiting."""
        try:
            flight.found = self._scan(deadline)
        except ScanTimeout as exc:
            log.warning("exporter: %s (bound %.1f s; raise --scrape-timeout, or the scraper's)", exc, bound)
        except (NumapinError, OSError) as exc:
            log.warning("exporter: the scan failed: %s", exc)
        finally:
            with self._lock:
                self._flight = None
                if flight.found is not None:
                    self._last = time.monotonic(), flight.found
            flight.done.set()

    def serve(self, listen: str, ready: Callable[[str], None] | None = None,
              stopped: Stop | None = None) -> None:
        """Serve ``/metrics`` on ``listen`` (``ADDR:PORT``) until interrupted (or ``stopped`` is set); ``ready``
        hears the URL served. Any client may connect: :mod:`numapin.tools.metrics_server` bounds what each costs."""
        import socket

        from .metrics_server import serve

        host, port = parse_listen(listen)
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        listener = socket.socket(family, socket.SOCK_STREAM)
        try:
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                listener.bind((host, port))
                listener.listen(128)
            except OSError as exc:
                raise UsageError(f"--listen {listen}: {exc.strerror or exc}", value=listen) from None
            bound_host, bound_port = str(listener.getsockname()[0]), int(listener.getsockname()[1])
            shown = f"[{bound_host}]" if ":" in bound_host else bound_host
            url = f"http://{shown}:{bound_port}/metrics"
            if ready is not None:
                ready(url)
            serve(listener, self.route, stopped)
        finally:
            listener.close()

    def route(self, path: str, headers: Mapping[str, str]) -> tuple[int, str, bytes]:
        """The answer to a GET of ``path``: the metrics, a line saying where they are, or 404."""
        if path == "/metrics":
            body = self.scrape(_seconds(headers.get("x-prometheus-scrape-timeout-seconds")))
            return 200, CONTENT_TYPE, body.encode()
        if path == "/":
            return 200, "text/plain; charset=utf-8", b"numapin exporter: the host's GPU workers at /metrics\n"
        return 404, "text/plain; charset=utf-8", b"not found: the metrics are at /metrics\n"
