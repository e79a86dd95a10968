"""``numapin exporter``, the host's GPU workers over HTTP, scanned at each scrape within a time bound.
(Prometheus itself scrapes it in tests/exporters, a tier of its own.)"""

from __future__ import annotations

import gzip
import os
import re
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

import live
from live import until
from numapin.base.environment import RUNTIME_DIR
from numapin.base.errors import UsageError
from numapin.base.stop import Stop
from numapin.tools.exporter import OWN_METRICS, Exporter, parse_listen
from numapin.tools.ps import ScanTimeout, Survey, survey

NUMAPIN = [sys.executable, "-m", "numapin"]
WORKER = "import time; print('ready', flush=True); time.sleep(120)"


@pytest.fixture
def records(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "records"
    monkeypatch.setenv(RUNTIME_DIR, str(folder))
    return folder


@pytest.fixture
def worker(records: Path) -> Iterator[int]:
    """A worker numapin exec placed on the first CPU this process may use: its record says so."""
    first = min(os.sched_getaffinity(0))
    proc = subprocess.Popen([*NUMAPIN, "exec", "--cpus", str(first), "--memory", "none", "--", sys.executable,
                             "-c", WORKER], stdout=subprocess.PIPE, text=True,
                            env=live.without_inputs(dict(os.environ)) | {RUNTIME_DIR: str(records)})
    assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
    yield proc.pid
    proc.kill()
    proc.wait()


def _series(text: str) -> dict[str, str]:
    """Each sample line of an exposition as series -> value."""
    return dict(line.rsplit(" ", 1) for line in text.splitlines() if line and not line.startswith("#"))


# -- ADDR:PORT ------------------------------------------------------------------------------


@pytest.mark.parametrize(("text", "want"), [("127.0.0.1:9877", ("127.0.0.1", 9877)), (":0", ("", 0)),
                                            ("[::1]:9877", ("::1", 9877)), ("localhost:65535", ("localhost", 65535))])
def test_listen_addresses_are_read(text: str, want: tuple[str, int]) -> None:
    assert parse_listen(text) == want


@pytest.mark.parametrize("text", ["9877", "127.0.0.1", "host:", "host:65536", "host:-1", "::1:9877", "[::1:9877",
                                  "host:９８", "host:0x10"])
def test_bad_listen_addresses_are_refused_with_the_form_expected(text: str) -> None:
    with pytest.raises(UsageError, match=r"ADDR:PORT|IPv6"):
        parse_listen(text)


@given(st.text(max_size=30))
def test_any_listen_text_is_an_address_or_a_usage_error(text: str) -> None:
    try:
        host, port = parse_listen(text)
    except UsageError:
        return
    written = text.rpartition(":")[2]
    assert 0 <= port <= 65535 and written.isascii() and int(written) == port and host in text


# -- one scrape -------------------------------------------------------------------------------


def test_a_scrape_holds_each_worker_and_the_exporters_own_series(worker: int) -> None:
    exporter = Exporter(max_remote=0.5)
    series = _series(exporter.scrape())
    assert any(s.startswith("numapin_worker{") and f'pid="{worker}"' in s and 'verdict="ok"' in s for s in series)
    assert series["numapin_up"] == "1" and series["numapin_scrape_errors_total"] == "0"
    assert 0 < float(series["numapin_scrape_duration_seconds"]) < 60
    assert set(OWN_METRICS) <= set(series)


def test_a_scan_past_its_deadline_stops_and_says_so() -> None:
    with pytest.raises(ScanTimeout, match="time bound"):
        survey(deadline=time.monotonic() - 1)


def test_a_scan_past_its_bound_is_an_error_counted_and_no_partial_count(worker: int) -> None:
    # A real scan with no time at all: it stops at its first process. What it found so far is not served:
    # a partial count reads as workers gone.
    exporter = Exporter(timeout=1e-9)
    first, second = _series(exporter.scrape()), _series(exporter.scrape())
    assert first["numapin_up"] == "0" and first["numapin_scrape_errors_total"] == "1"
    assert second["numapin_scrape_errors_total"] == "2", "a counter, never reset"
    assert not any(s.startswith("numapin_worker") for s in first), first


def test_a_scrape_waits_for_a_scan_in_flight_only_within_its_bound() -> None:
    running, release = threading.Event(), threading.Event()

    def slow(deadline: float) -> Survey:
        running.set()
        release.wait(10)
        return Survey(())

    exporter = Exporter(timeout=0.3, scan=slow)
    first: list[str] = []
    holder = threading.Thread(target=lambda: first.append(exporter.scrape(waits=30)))
    holder.start()
    assert running.wait(5)
    started = time.monotonic()
    blocked = _series(exporter.scrape())
    assert time.monotonic() - started < 5 and blocked["numapin_up"] == "0"
    release.set()
    holder.join()
    assert _series(first[0])["numapin_up"] == "1"
    assert _series(exporter.scrape())["numapin_scrape_errors_total"] == "1"


def test_the_scrapers_own_timeout_lowers_the_bound() -> None:
    bounds: list[float] = []

    def timed(deadline: float) -> Survey:
        bounds.append(deadline - time.monotonic())
        return Survey(())

    exporter = Exporter(timeout=10, scan=timed)
    exporter.scrape(waits=3)
    exporter.scrape(waits=60)
    assert bounds[0] < 3 and 9 < bounds[1] <= 10


# -- over HTTP --------------------------------------------------------------------------------


@pytest.fixture
def served(records: Path) -> Iterator[tuple[subprocess.Popen[str], str]]:
    proc = subprocess.Popen([*NUMAPIN, "exporter", "--listen", "127.0.0.1:0"], stderr=subprocess.PIPE, text=True,
                            env={**os.environ, RUNTIME_DIR: str(records)})
    assert proc.stderr is not None
    line = proc.stderr.readline()
    assert line.startswith("numapin exporter: serving http://127.0.0.1:"), line
    yield proc, line.split()[-1]
    if proc.poll() is None:
        proc.kill()
    proc.wait()


def test_the_exporter_serves_metrics_over_http_and_stops_on_sigterm(served: tuple[subprocess.Popen[str], str],
                                                                    worker: int) -> None:
    proc, url = served
    with urllib.request.urlopen(url, timeout=30) as answer:
        assert answer.headers["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
        text = answer.read().decode()
    assert f'pid="{worker}"' in text and _series(text)["numapin_up"] == "1"
    zipped = urllib.request.Request(url, headers={"Accept-Encoding": "gzip"})
    with urllib.request.urlopen(zipped, timeout=30) as answer:
        body = answer.read()
        if answer.headers.get("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
    assert f'pid="{worker}"' in body.decode()
    with pytest.raises(urllib.error.HTTPError) as missing:
        urllib.request.urlopen(url.replace("/metrics", "/nothing"), timeout=30)
    assert missing.value.code == 404
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 0


def test_a_taken_or_bad_address_is_one_line_and_exit_2(served: tuple[subprocess.Popen[str], str]) -> None:
    taken = served[1].split("/")[2]
    for listen in (taken, "nowhere"):
        proc = subprocess.run([*NUMAPIN, "exporter", "--listen", listen], capture_output=True, text=True,
                              timeout=60)
        assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
        assert proc.stderr.startswith(f"numapin exporter: --listen {listen!r}" if listen == "nowhere" else
                                      f"numapin exporter: --listen {listen}: ")


# -- any client that connects ---------------------------------------------------------------------


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _connect(url: str) -> socket.socket:
    host, port = url.split("/")[2].rsplit(":", 1)
    return socket.create_connection((host, int(port)), timeout=30)


def _ask(url: str, request: bytes) -> bytes:
    with _connect(url) as sock:
        sock.sendall(request)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    return answer


def test_idle_connections_past_its_descriptors_neither_starve_a_scrape_nor_spin(records: Path) -> None:
    # The exporter with 64 descriptors, and 150 connections that never send a byte: before, one thread each
    # held them 30 s, accept() then failed with EMFILE and the serve loop spun at 100% CPU answering nothing.
    import resource

    def few_files() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))

    proc = subprocess.Popen([*NUMAPIN, "exporter", "--listen", "127.0.0.1:0"], stderr=subprocess.PIPE, text=True,
                            env={**os.environ, RUNTIME_DIR: str(records)}, preexec_fn=few_files)
    idle: list[socket.socket] = []
    try:
        assert proc.stderr is not None
        url = proc.stderr.readline().split()[-1]
        for _ in range(150):
            idle.append(_connect(url))
        with urllib.request.urlopen(url, timeout=60) as answer:
            assert _series(answer.read().decode())["numapin_up"] == "1", "a scrape among them is answered"
        before = _cpu_seconds(proc.pid)
        time.sleep(2)
        assert _cpu_seconds(proc.pid) - before < 0.5, "no loop spins while idle connections are held"
        with urllib.request.urlopen(url, timeout=60) as answer:
            assert answer.status == 200
    finally:
        for sock in idle:
            sock.close()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    assert proc.stderr.read() == "", "nothing said of any of it but at debug level"


def test_clients_that_reset_mid_scrape_cost_no_traceback(served: tuple[subprocess.Popen[str], str]) -> None:
    proc, url = served
    for _ in range(20):  # what a scraper does when its own timeout passes: a reset, not a close
        sock = _connect(url)
        sock.sendall(b"GET /metrics HTTP/1.1\r\nAccept-Encoding: gzip\r\n\r\n")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        sock.close()
    assert until(lambda: _ask(url, b"GET /metrics HTTP/1.0\r\n\r\n").startswith(b"HTTP/1.0 200 ")), \
        "answered again (503 and Retry-After while the answers under way end)"
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 0
    assert proc.stderr is not None and "Traceback" not in proc.stderr.read()


@pytest.mark.parametrize(("request_bytes", "status"), [
    (b"POST /metrics HTTP/1.1\r\n\r\n", b"501"), (b"DELETE / HTTP/1.0\r\n\r\n", b"501"),
    (b"GET /../../etc/passwd HTTP/1.0\r\n\r\n", b"404"), (b"GET /metrics/../x HTTP/1.0\r\n\r\n", b"404"),
    (b"GET /" + b"a" * 20000 + b" HTTP/1.0\r\n\r\n", b"414"),
    (b"GET / HTTP/1.0\r\n" + b"X-Pad: " + b"b" * 4000 + b"\r\n" * 1 + b"X-Pad2: " + b"c" * 40000 + b"\r\n\r\n",
     b"431"),
    (b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n", b"400"), (b"GET\r\n\r\n", b"400"),
    (b"HEAD /metrics HTTP/1.0\r\n\r\n", b"200"), (b"GET /?x=1 HTTP/1.1\r\nHost: a\r\n\r\n", b"200"),
])
def test_any_request_gets_one_status_line(served: tuple[subprocess.Popen[str], str], request_bytes: bytes,
                                          status: bytes) -> None:
    answer = _ask(served[1], request_bytes)
    assert answer.split(b" ", 2)[1] == status, answer[:200]
    if request_bytes.startswith(b"HEAD"):
        assert answer.endswith(b"\r\n\r\n"), "HEAD: the headers alone"


def test_a_request_sent_slowly_is_cut_at_its_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    # A client that sends a byte now and then (each within any per-read timeout) never holds a connection
    # past the bound for its whole request; a scrape meanwhile is answered.
    from numapin.tools import metrics_server

    monkeypatch.setattr(metrics_server, "REQUEST_SECONDS", 0.5)
    exporter = Exporter(scan=lambda deadline: Survey(()))
    stopped = Stop()
    urls: list[str] = []
    thread = threading.Thread(target=exporter.serve, args=("127.0.0.1:0", urls.append, stopped), daemon=True)
    thread.start()
    try:
        assert until(lambda: bool(urls))
        slow = _connect(urls[0])
        started = time.monotonic()
        closed = False
        for byte in b"GET /metrics HTTP/1.0\r\n":
            try:
                slow.sendall(bytes([byte]))
                slow.settimeout(0.2)
                if slow.recv(1) == b"":
                    closed = True
                    break
            except TimeoutError:
                continue
            except OSError:
                closed = True
                break
        assert closed and time.monotonic() - started < 30, "cut before the request was whole"
        assert _ask(urls[0], b"GET /metrics HTTP/1.0\r\n\r\n").startswith(b"HTTP/1.0 200 ")
    finally:
        stopped.set()
        thread.join(timeout=30)
        stopped.close()


# -- the operator's series ------------------------------------------------------------------------


def test_per_gpu_series_count_each_gpus_workers_with_no_pid_and_placed_by_is_a_closed_word(
        pair_root: Path, records: Path) -> None:
    from numapin.facts.machine import cached
    from numapin.observe.verdict import PLACED_BY

    gpus = [v.gpu.pci for v in cached(str(pair_root), {}).visible]
    env = live.without_inputs(dict(os.environ)) | {RUNTIME_DIR: str(records), "NUMAPIN_FSROOT": str(pair_root)}
    proc = subprocess.Popen([*NUMAPIN, "exec", "--gpu", "0", "--memory", "none", "--", sys.executable, "-c", WORKER],
                            stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
        placed = _series(subprocess.run([*NUMAPIN, "ps", "--prometheus"], capture_output=True, text=True,
                                        timeout=60, env=env).stdout)
        os.sched_setaffinity(proc.pid, live.NODE1)  # its main thread moved to GPU 1's node by someone else
        moved = _series(subprocess.run([*NUMAPIN, "ps", "--prometheus"], capture_output=True, text=True,
                                       timeout=60, env=env).stdout)
    finally:
        proc.kill()
        proc.wait()
    uuids = {v.gpu.pci: v.gpu.uuid for v in cached(str(pair_root), {}).visible}

    def keys(pci: str) -> str:  # the GPU as numapin writes it, and as DCGM's exporter does (pci_bus_id, UUID)
        domain, _, rest = pci.partition(":")
        return f'pci="{pci}",pci_bus_id="{domain.zfill(8).upper()}:{rest.upper()}",UUID="{uuids.get(pci)}"'

    assert all(uuids.values()), "the pair machine's GPUs have UUIDs, as NVIDIA's driver gives them"
    for pci, count in zip(gpus, (1, 0), strict=True):
        assert placed[f"numapin_gpu_workers{{{keys(pci)}}}"] == str(count), placed
        assert placed[f"numapin_gpu_workers_misplaced{{{keys(pci)}}}"] == "0"
    assert moved[f"numapin_gpu_workers_misplaced{{{keys(gpus[0])}}}"] == "1"
    assert moved[f"numapin_gpu_threads_outside{{{keys(gpus[0])}}}"] == "1"
    said = [(s, v) for s, v in {**placed, **moved}.items() if s.startswith("numapin_worker{")]
    words = sorted({re.search(r'placed_by="([^"]*)"', s).group(1) for s, _ in said})  # type: ignore[union-attr]
    assert words == ["exec", "moved"] and set(words) <= set(PLACED_BY), said


# -- many scrapes at once -------------------------------------------------------------------------


def _serving(exporter: Exporter) -> Iterator[str]:
    stopped = Stop()
    urls: list[str] = []
    ready = threading.Event()
    thread = threading.Thread(target=exporter.serve, args=("127.0.0.1:0", lambda url: (urls.append(url),
                                                                                      ready.set()), stopped))
    thread.start()
    assert ready.wait(30)
    try:
        yield urls[0]
    finally:
        stopped.set()
        thread.join(30)
        stopped.close()


def _slow_scans(seconds: float) -> tuple[Exporter, list[float]]:
    """An exporter whose scans each take ``seconds`` and find nothing, and the times they started."""
    started: list[float] = []

    def scan(deadline: float) -> Survey:
        started.append(time.monotonic())
        time.sleep(seconds)
        return Survey(())

    return Exporter(timeout=30, scan=scan), started


def test_scrapes_that_arrive_together_share_one_scan() -> None:
    exporter, scans = _slow_scans(1.0)
    answers: list[str] = []
    first = threading.Thread(target=lambda: answers.append(exporter.scrape()))
    first.start()
    assert until(lambda: scans)  # the first scrape's scan is under way: the others arrive during it
    others = [threading.Thread(target=lambda: answers.append(exporter.scrape())) for _ in range(15)]
    for thread in others:
        thread.start()
    for thread in [first, *others]:
        thread.join(30)
    assert len(answers) == 16 and all(_series(a)["numapin_up"] == "1" for a in answers)
    assert len(scans) == 1, f"{len(scans)} scans for 16 scrapes that arrived while one ran"


def _flood(url: str, stop: threading.Event, source: str) -> None:
    """One client keeping 32 requests in flight: each answered one is sent again at once."""
    host, port = url.split("/")[2].rsplit(":", 1)

    def one() -> None:
        while not stop.is_set():
            try:
                with socket.create_connection((host, int(port)), timeout=10, source_address=(source, 0)) as sock:
                    sock.sendall(b"GET /metrics HTTP/1.0\r\n\r\n")
                    while sock.recv(65536):
                        pass
            except OSError:
                time.sleep(0.01)

    threads = [threading.Thread(target=one, daemon=True) for _ in range(32)]
    for thread in threads:
        thread.start()
    stop.wait()
    for thread in threads:
        thread.join(30)


def test_one_client_keeping_many_scrapes_in_flight_never_starves_the_scraper() -> None:
    # The flood comes from 127.0.0.2, the scraper from 127.0.0.1 (both loopback): the flood holds at most its share
    # of the answer slots, and the scraper's requests wait their turn in order, each round sharing one scan.
    exporter, scans = _slow_scans(0.05)
    stop = threading.Event()
    for url in _serving(exporter):
        flood = threading.Thread(target=_flood, args=(url, stop, "127.0.0.2"))
        flood.start()
        try:
            assert until(lambda: len(scans) >= 5), "the flood is scraping"
            codes = []
            for _ in range(10):
                answer = _ask(url, b"GET /metrics HTTP/1.0\r\n\r\n")
                codes.append(answer.split(b" ", 2)[1])
                assert answer.split(b" ", 2)[1] != b"200" or b"numapin_up 1" in answer
            before = len(scans)
        finally:
            stop.set()
            flood.join(60)
    assert codes == [b"200"] * 10, codes
    assert before > 0


def test_a_client_that_closes_its_side_after_its_request_is_answered(served: tuple[subprocess.Popen[str], str]) \
        -> None:
    # nc -N, and some proxies: the whole request, then shutdown(SHUT_WR); they still read the answer.
    _, url = served
    for _ in range(10):
        with _connect(url) as sock:
            sock.sendall(b"GET /metrics HTTP/1.0\r\n\r\n")
            sock.shutdown(socket.SHUT_WR)
            answer = b""
            while chunk := sock.recv(65536):
                answer += chunk
        assert answer.startswith(b"HTTP/1.0 200 ") and b"numapin_up 1" in answer, answer[:200]


def test_a_scan_that_fails_answers_the_last_complete_one_said_stale() -> None:
    calls: list[int] = []

    def scan(deadline: float) -> Survey:
        calls.append(1)
        if len(calls) == 2:
            raise ScanTimeout("the scan ran past its time bound")
        return Survey((), gpus=("0000:18:00.0",))

    exporter = Exporter(scan=scan)
    first, second = _series(exporter.scrape()), _series(exporter.scrape())
    assert first["numapin_up"] == "1" and first["numapin_scan_age_seconds"] == "0.0"
    assert second["numapin_up"] == "0" and float(second["numapin_scan_age_seconds"]) >= 0
    assert second["numapin_scrape_errors_total"] == "1"
    assert {k for k in first if k.startswith("numapin_gpu")} == {k for k in second if k.startswith("numapin_gpu")}
    assert any(k.startswith("numapin_gpu") for k in second), "the last complete scan's series, served stale"
