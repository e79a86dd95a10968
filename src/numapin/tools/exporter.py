"""``numapin exporter``: the host's GPU workers served to Prometheus over HTTP, scanned at each scrape.

A scrape of ``/metrics`` runs one :func:`numapin.tools.ps.survey` and answers with
its series (:func:`numapin.tools.prometheus.exposition`) and the exporter's own:

- ``numapin_up``: 1 when this scrape's scan completed, 0 when it failed or ran past its bound;
- ``numapin_scrape_duration_seconds``: how long this scrape's scan took;
- ``numapin_scrape_errors_total``: the scans that failed or ran out of time since the exporter started.

A scan that fails answers with the exporter's own series only (HTTP 200, ``numapin_up 0``): a
partial count of workers would read as workers gone, and the counter and duration still say
what happened. Scans run one at a time (they read the same ``/proc``; two at once only take
longer); a scrape that cannot start its own within its bound fails the same way. The bound is
``--scrape-timeout``, lowered to what Prometheus says it waits (its
``X-Prometheus-Scrape-Timeout-Seconds`` header) less a margin for the answer to travel.
"""

from __future__ import annotations

import threading
import time

from ..base.errors import NumapinError, UsageError
from ..base.logger import log
from .prometheus import exposition
from .ps import ScanTimeout, survey

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing at run time (mypy knows the name)
if TYPE_CHECKING:
    import os
    from collections.abc import Callable, Mapping

    from .ps import Survey

__all__ = ["OWN_METRICS", "Exporter", "parse_listen"]

#: The exporter's own series: name -> (type, help).
OWN_METRICS = {
    "numapin_up": ("gauge", "1 when this scrape's scan of the host's processes completed, else 0."),
    "numapin_scrape_duration_seconds": ("gauge", "Seconds this scrape's scan took."),
    "numapin_scrape_errors_total": ("counter", "Scans that failed or ran past their time bound since the exporter "
                                               "started."),
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


class Exporter:
    """Scans on demand, one at a time, each within its bound; counts the scans that failed."""

    def __init__(self, *, root: str | os.PathLike[str] | None = None, max_remote: float | None = None,
                 timeout: float = 10.0, scan: Callable[[float], Survey] | None = None,
                 pod_resources: str | None = None) -> None:
        self.timeout = timeout
        self.errors = 0
        self._scan = scan or (lambda deadline: survey(root=root, max_remote=max_remote, deadline=deadline,
                                                      pod_resources=pod_resources, every_gpu=True))
        self._one = threading.Lock()
        self._counting = threading.Lock()

    def scrape(self, waits: float | None = None) -> str:
        """The text of one scrape: the workers' series and the exporter's own; ``waits``, what the scraper said
        it waits (seconds)."""
        bound = self.timeout if waits is None else max(0.1, min(self.timeout, waits - _MARGIN))
        started = time.monotonic()
        deadline = started + bound
        found = None
        if self._one.acquire(timeout=bound):
            try:
                found = self._scan(deadline)
            except ScanTimeout as exc:
                log.warning("exporter: %s (bound %.1f s; raise --scrape-timeout, or the scraper's)", exc, bound)
            except (NumapinError, OSError) as exc:
                log.warning("exporter: the scan failed: %s", exc)
            finally:
                self._one.release()
        else:
            log.warning("exporter: a scan already running did not end within this scrape's bound (%.1f s)", bound)
        took = time.monotonic() - started
        if found is None:
            with self._counting:  # scrapes run in threads of their own, and a counter must not lose one
                self.errors += 1
        own = {"numapin_up": int(found is not None), "numapin_scrape_duration_seconds": round(took, 6),
               "numapin_scrape_errors_total": self.errors}
        lines = [] if found is None else [exposition(found).rstrip("\n")]
        for name, (kind, helptext) in OWN_METRICS.items():
            lines += [f"# HELP {name} {helptext}", f"# TYPE {name} {kind}", f"{name} {own[name]}"]
        return "\n".join(lines) + "\n"

    def serve(self, listen: str, ready: Callable[[str], None] | None = None,
              stopped: threading.Event | None = None) -> None:
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
