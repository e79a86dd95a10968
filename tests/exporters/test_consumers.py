"""A real Prometheus scrapes ``numapin exporter``, a real node_exporter serves ``numapin ps --textfile``;
each is asked through its own HTTP API for the series of each worker."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import pytest

import live
from numapin.base.environment import RUNTIME_DIR
from numapin.tools.prometheus import TEXTFILE, exposition, write_textfile
from numapin.tools.ps import survey

NUMAPIN = [sys.executable, "-m", "numapin"]
WORKER = "import time; print('ready', flush=True); time.sleep(300)"
T = TypeVar("T")


def binary(name: str, package: str) -> str:
    found = shutil.which(name)
    if found is None:
        message = f"{name} is not installed (apt-get install {package})"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return found


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def fetch(url: str) -> str:
    with urllib.request.urlopen(url, timeout=30) as answer:
        return str(answer.read().decode())


def until(what: str, answer: Callable[[], T | None], seconds: float = 90) -> T:
    """``answer()`` once it is not None (errors while a service starts count as None), or fail saying what."""
    deadline, last = time.monotonic() + seconds, None
    while time.monotonic() < deadline:
        try:
            found = answer()
        except OSError as exc:  # not listening yet
            found, last = None, exc
        if found is not None:
            return found
        time.sleep(0.5)
    pytest.fail(f"no {what} within {seconds:.0f} s (last error: {last})")


def samples(text: str) -> dict[str, float]:
    """An exposition's samples: the series as written (labels sorted by name) -> value."""
    found = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            series, value = line.rsplit(" ", 1)
            name, _, labels = series.partition("{")
            pairs = sorted(p for p in labels.rstrip("}").split(",") if p) if labels else []
            found[name + ("{" + ",".join(pairs) + "}" if pairs else "")] = float(value)
    return found


def worker_series(text: str, metric: str, pid: int) -> dict[str, float]:
    return {s: v for s, v in samples(text).items() if s.startswith(metric + "{") and f'pid="{pid}"' in s}


class Services:
    """Processes of a test (workers, exporters, Prometheus), each killed at the end."""

    def __init__(self, records: Path) -> None:
        self.env = {**live.without_inputs(dict(os.environ)), RUNTIME_DIR: str(records)}
        self.started: list[subprocess.Popen[str]] = []

    def start(self, argv: list[str], *, stdout: int | None = None, stderr: int | None = None) -> subprocess.Popen[str]:
        proc = subprocess.Popen(argv, env=self.env, text=True, stdout=stdout, stderr=stderr)
        self.started.append(proc)
        return proc

    def worker(self, cpu: int, *options: str) -> int:
        """A worker numapin exec placed on ``cpu`` (with exec's ``options``): its record says so."""
        proc = self.start([*NUMAPIN, "exec", "--cpus", str(cpu), "--memory", "none", *options, "--", sys.executable,
                           "-c", WORKER], stdout=subprocess.PIPE)
        assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
        return proc.pid

    def two_workers(self) -> tuple[int, int]:
        """One worker where numapin put it (ok), one whose thread someone moved since (misplaced)."""
        cpus = sorted(os.sched_getaffinity(0))
        if len(cpus) < 2:
            pytest.skip("a misplaced worker needs two CPUs")
        ok, moved = self.worker(cpus[0]), self.worker(cpus[0])
        os.sched_setaffinity(moved, {cpus[1]})
        return ok, moved


@pytest.fixture
def services(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Services]:
    monkeypatch.setenv(RUNTIME_DIR, str(tmp_path / "records"))  # this process's survey() reads the same records
    made = Services(tmp_path / "records")
    yield made
    for proc in made.started:
        proc.kill()
        proc.wait()


def test_prometheus_scrapes_the_exporter_and_holds_each_workers_series(services: Services, tmp_path: Path) -> None:
    prometheus = binary("prometheus", "prometheus")
    ok, moved = services.two_workers()
    # A kept worker whose thread someone moves: its keeper puts it back and counts the drift in its record.
    first, second = sorted(os.sched_getaffinity(0))[:2]
    kept = services.worker(first, "--keep", "--keep-period", "0.1", "--policy", "override")
    os.sched_setaffinity(kept, {second})
    until("the keeper put the kept worker back", lambda: os.sched_getaffinity(kept) == {first} or None)
    exporter = services.start([*NUMAPIN, "exporter", "--listen", "127.0.0.1:0"], stderr=subprocess.PIPE)
    assert exporter.stderr is not None
    target = exporter.stderr.readline().split("http://")[-1].split("/")[0]
    config = tmp_path / "prometheus.yml"
    config.write_text("global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\nscrape_configs:\n"
                      f"  - job_name: numapin\n    static_configs:\n      - targets: ['{target}']\n")
    port = free_port()
    services.start([prometheus, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'data'}",
                    f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"], stderr=subprocess.DEVNULL)

    def query(expression: str) -> dict[str, float]:
        """Prometheus's answer to an instant query: each series's labels (sorted, as text) -> value."""
        url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": expression})
        data = json.loads(fetch(url))
        assert data["status"] == "success", data
        ours = ("__name__", "instance", "job")  # Prometheus's own labels
        return {",".join(f'{k}="{v}"' for k, v in sorted(r["metric"].items()) if k not in ours):
                float(r["value"][1]) for r in data["data"]["result"]}

    def both() -> dict[str, float] | None:
        found = query("numapin_worker")
        return found if all(any(f'pid="{p}"' in s for s in found) for p in (ok, moved, kept)) else None

    workers = until("both workers' series in Prometheus", both)
    verdicts = {pid: next(s for s in workers if f'pid="{pid}"' in s) for pid in (ok, moved)}
    assert 'verdict="ok"' in verdicts[ok] and 'placed_by="exec"' in verdicts[ok], verdicts
    assert 'verdict="misplaced"' in verdicts[moved] and 'placed_by="moved"' in verdicts[moved]
    assert set(query(f'numapin_worker_misplaced_threads{{pid="{moved}"}}').values()) == {1.0}
    assert set(query(f'numapin_worker_misplaced_threads{{pid="{ok}"}}').values()) == {0.0}
    assert set(query(f'numapin_worker_threads_outside{{pid="{moved}"}}').values()) == {1.0}
    assert query("numapin_workers_misplaced")[""] >= 1
    assert query('up{job="numapin"}')[""] == 1.0, "Prometheus took the exposition whole"
    assert query("numapin_up")[""] == 1.0 and query("numapin_scrape_errors_total")[""] == 0.0
    assert 0 < query("numapin_scrape_duration_seconds")[""] < 1
    kinds = json.loads(fetch(f"http://127.0.0.1:{port}/api/v1/metadata?metric=numapin_scrape_errors_total"))
    assert [m["type"] for m in kinds["data"]["numapin_scrape_errors_total"]] == ["counter"]
    drift = until("the kept worker's drift", lambda: query(f'numapin_worker_drift_total{{pid="{kept}"}}') or None)
    assert list(drift) == [f'cause="moved",pid="{kept}"'] and set(drift.values()) == {1.0}  # empty labels dropped
    assert query("numapin_worker_drift_total") == drift, "only the kept worker has drift"
    assert 'verdict="ok"' in next(s for s in query("numapin_worker") if f'pid="{kept}"' in s), "put back: ok"
    kinds = json.loads(fetch(f"http://127.0.0.1:{port}/api/v1/metadata?metric=numapin_worker_drift_total"))
    assert [m["type"] for m in kinds["data"]["numapin_worker_drift_total"]] == ["counter"]


def test_node_exporter_serves_the_textfile_and_never_half_of_one(services: Services, tmp_path: Path) -> None:
    node_exporter = binary("prometheus-node-exporter", "prometheus-node-exporter")
    ok, moved = services.two_workers()
    folder = tmp_path / "textfile"
    folder.mkdir()
    done = subprocess.run([*NUMAPIN, "ps", "--textfile", str(folder)], env=services.env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr  # a misplaced worker is in the series, not the exit status
    port = free_port()
    services.start([node_exporter, "--collector.disable-defaults", "--collector.textfile",
                    f"--collector.textfile.directory={folder}", f"--web.listen-address=127.0.0.1:{port}"],
                   stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}/metrics"
    text = until("node_exporter's metrics", lambda: fetch(url))
    assert samples(text)["node_textfile_scrape_error"] == 0.0, text
    assert any('verdict="ok"' in s for s in worker_series(text, "numapin_worker", ok)), text
    assert any('verdict="misplaced"' in s for s in worker_series(text, "numapin_worker", moved))
    assert list(worker_series(text, "numapin_worker_misplaced_threads", moved).values()) == [1.0]
    assert samples(text)["numapin_workers_misplaced"] >= 1

    # A timer rewriting the file while node_exporter reads it: every scrape parses, and holds one whole file
    # (the one listing both workers, or the one listing none).
    full = exposition(survey())
    empty = "# HELP numapin_workers GPU worker processes found on this host.\n# TYPE numapin_workers gauge\n" \
            "numapin_workers 0\n"
    counts = {samples(full)["numapin_workers"], 0.0}
    stop = threading.Event()

    def rewrite() -> None:
        turn = 0
        while not stop.is_set():
            write_textfile(str(folder), (full, empty)[turn % 2])
            turn += 1

    writer = threading.Thread(target=rewrite)
    writer.start()
    try:
        seen = []
        for _ in range(60):
            scraped = samples(fetch(url))
            assert scraped["node_textfile_scrape_error"] == 0.0, "node_exporter read half a file"
            seen.append(scraped["numapin_workers"])
    finally:
        stop.set()
        writer.join()
    assert set(seen) <= counts and len(set(seen)) == 2, seen
    assert sorted(p.name for p in folder.iterdir()) == [TEXTFILE]


def test_the_service_monitors_relabelling_names_each_series_by_its_node_and_no_worker_by_numapins_pod(
        services: Services, tmp_path: Path) -> None:
    # The ServiceMonitor's endpoint as the Prometheus Operator renders it (honor_labels, its relabelings in
    # Prometheus's spelling), on a target carrying the labels the operator gives one (numapin's own pod, its
    # namespace, container, service, endpoint; the node's name as Kubernetes discovery has it): every series names
    # the node, and a worker in no pod carries none of numapin's pod labels. The alerts load in the same Prometheus.
    import yaml

    prometheus = binary("prometheus", "prometheus")
    deploy = Path(__file__).resolve().parents[2] / "deploy" / "kubernetes"
    (endpoint,) = yaml.safe_load((deploy / "servicemonitor.yaml").read_text())["spec"]["endpoints"]
    spelling = {"sourceLabels": "source_labels", "targetLabel": "target_label"}
    relabel = [{spelling.get(k, k): v for k, v in step.items()} for step in endpoint["relabelings"]]
    rules = tmp_path / "rules.yaml"
    rules.write_text(yaml.safe_dump({"groups": yaml.safe_load((deploy / "prometheusrule.yaml").read_text())
                                     ["spec"]["groups"]}))
    worker = services.worker(min(os.sched_getaffinity(0)))
    exporter = services.start([*NUMAPIN, "exporter", "--listen", "127.0.0.1:0"], stderr=subprocess.PIPE)
    assert exporter.stderr is not None
    target = exporter.stderr.readline().split("http://")[-1].split("/")[0]
    operator = {"pod": "numapin-x7k2p", "namespace": "numapin", "container": "numapin", "service": "numapin",
                "endpoint": "metrics", "__meta_kubernetes_pod_node_name": "gpu-node-7"}
    config = tmp_path / "prometheus.yml"
    config.write_text(yaml.safe_dump({
        "global": {"scrape_interval": "1s", "scrape_timeout": "1s"}, "rule_files": [str(rules)],
        "scrape_configs": [{"job_name": "numapin", "honor_labels": endpoint["honorLabels"],
                            "static_configs": [{"targets": [target], "labels": operator}],
                            "relabel_configs": relabel}]}))
    port = free_port()
    services.start([prometheus, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'data'}",
                    f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"], stderr=subprocess.DEVNULL)

    def series(expression: str) -> list[dict[str, str]] | None:
        url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": expression})
        data = json.loads(fetch(url))
        return [r["metric"] for r in data["data"]["result"]] or None

    (mine,) = until("the worker's series", lambda: series(f'numapin_worker{{pid="{worker}"}}'))
    assert mine["node"] == "gpu-node-7" and not {"pod", "namespace", "container", "service"} & set(mine), mine
    (up,) = until("up", lambda: series('up{job="numapin"}'))
    assert up["node"] == "gpu-node-7", up
    loaded = json.loads(fetch(f"http://127.0.0.1:{port}/api/v1/rules"))["data"]["groups"]
    alerts = {rule["name"] for group in loaded for rule in group["rules"]}
    assert {"NumapinExporterDown", "NumapinExporterAbsent", "GpuWorkerMisplaced"} <= alerts, alerts


def test_every_panel_of_the_dashboard_has_data_from_real_prometheus_scraping_the_exporter(
        services: Services, tmp_path: Path, pair_root: Path) -> None:
    # deploy/grafana's dashboard: each panel's every query, its node variable at All, answered with data by Prometheus
    # scraping the exporter (the pair machine: two GPUs, one worker placed), the node label as the ServiceMonitor
    # gives it.
    prometheus = binary("prometheus", "prometheus")
    dashboard = json.loads((Path(__file__).resolve().parents[2] / "deploy" / "grafana" / "numapin-dashboard.json")
                           .read_text())
    services.env["NUMAPIN_FSROOT"] = str(pair_root)
    services.worker(min(os.sched_getaffinity(0)))
    exporter = services.start([*NUMAPIN, "exporter", "--listen", "127.0.0.1:0"], stderr=subprocess.PIPE)
    assert exporter.stderr is not None
    target = exporter.stderr.readline().split("http://")[-1].split("/")[0]
    config = tmp_path / "prometheus.yml"
    config.write_text("global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\nscrape_configs:\n"
                      f"  - job_name: numapin\n    static_configs:\n      - targets: ['{target}']\n"
                      "        labels: {node: gpu-node-7}\n")
    port = free_port()
    services.start([prometheus, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'data'}",
                    f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"], stderr=subprocess.DEVNULL)

    def answered(expression: str) -> list[object] | None:
        url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": expression})
        data = json.loads(fetch(url))
        assert data["status"] == "success", (expression, data)
        return data["data"]["result"] or None

    queries = [t["expr"].replace("$node", ".*") for p in dashboard["panels"] for t in p["targets"]]
    assert len(queries) >= 9 and all("$" not in q for q in queries)
    for expression in queries:
        assert until(f"data for {expression}", lambda e=expression: answered(e)), expression
    variable = next(v for v in dashboard["templating"]["list"] if v["name"] == "node")
    values = until("the node variable's values", lambda: answered("group by (node) (numapin_up)"))
    assert variable["query"] == "label_values(numapin_up, node)" and values
