"""deploy/kubernetes holds what an operator applies: a DaemonSet, a Service, a ServiceMonitor, a PrometheusRule,
and the image's recipe. Each manifest is valid for the Kubernetes API (its published schema, strict: no field
the API lacks), says what it claims (host PID namespace, read-only mounts, the two capabilities), runs a
command numapin takes; and the Containerfile's steps, run here, give an image whose default command serves
the metrics the probe and the ServiceMonitor ask for."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

import pytest

import kube
import needs
from numapin.cli import build_parser

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy" / "kubernetes"
#: The Kubernetes versions the manifests must be valid for: the oldest and newest the validator knows here.
VERSIONS = ("1.29.0", "1.37.0")


def _documents() -> list[dict[str, Any]]:
    yaml = kube.needed("yaml", "kubetest")
    found = []
    for path in sorted(DEPLOY.glob("*.yaml")):
        if path.name != "kustomization.yaml":  # kustomize's own kind, checked below
            found += [d for d in yaml.safe_load_all(path.read_text()) if d]
    return found


def _one(kind: str) -> dict[str, Any]:
    (found,) = [d for d in _documents() if d["kind"] == kind]
    return found


@pytest.mark.parametrize("version", VERSIONS)
def test_every_manifest_is_valid_for_the_kubernetes_api(version: str) -> None:
    validator = kube.needed("kubernetes_validate", "kubetest")
    kinds = []
    for document in _documents():
        kinds.append(document["kind"])
        if document["apiVersion"].startswith("monitoring.coreos.com/"):
            continue  # the Prometheus Operator's own kinds: checked against the Service and by promtool below
        validator.validate(document, version, strict=True)  # raises on any error
    assert sorted(kinds) == ["DaemonSet", "Namespace", "PrometheusRule", "Service", "ServiceMonitor"]


def test_an_invalid_manifest_is_caught() -> None:
    validator = kube.needed("kubernetes_validate", "kubetest")
    broken = _one("DaemonSet")
    broken["spec"]["template"]["spec"]["hostPid"] = True  # a misspelt field the API does not have
    with pytest.raises(validator.ValidationError):
        validator.validate(broken, VERSIONS[-1], strict=True)


def test_the_daemonset_does_what_the_docs_say() -> None:
    spec = _one("DaemonSet")["spec"]["template"]["spec"]
    (container,) = spec["containers"]
    security = container["securityContext"]
    assert spec["hostPID"] is True and spec["automountServiceAccountToken"] is False
    assert all(m["readOnly"] for m in container["volumeMounts"]), "nothing of the node is writable"
    assert security["capabilities"] == {"drop": ["ALL"], "add": ["SYS_PTRACE", "DAC_READ_SEARCH"]}
    assert security["readOnlyRootFilesystem"] is True and security["allowPrivilegeEscalation"] is False
    assert not security.get("privileged")
    args = build_parser("exporter").parse_args(container["args"])  # a command numapin takes
    port = int(args.listen.rpartition(":")[2])
    assert [p["containerPort"] for p in container["ports"] if p["name"] == "metrics"] == [port]
    docs = (REPO / "docs" / "kubernetes.md").read_text()
    for capability in security["capabilities"]["add"]:
        assert capability in docs, f"docs/kubernetes.md does not say what {capability} is for"
    # What the comments say is read is mounted: every folder a record of another user's worker may lie in.
    from numapin.pinning.record import folders

    mounted = [m["mountPath"] for m in container["volumeMounts"]]
    for path in folders(1000, environ={}):
        assert any(path == m or path.startswith(m + "/") for m in mounted), f"{path} is not mounted"
        assert f"`{path.replace('1000', 'UID')}`" in docs or path.replace("1000", "UID") in docs, path


def test_the_image_is_this_version_and_its_server_is_probed_for_life() -> None:
    from numapin.version import __version__

    (container,) = _one("DaemonSet")["spec"]["template"]["spec"]["containers"]
    name, _, tag = container["image"].rpartition(":")
    assert (name, tag) == ("numapin", __version__), "the manifest names this version, never latest"
    docs = (REPO / "docs" / "kubernetes.md").read_text()
    assert f"numapin=REGISTRY/numapin:{__version__}@$(cat ../../numapin.digest)" in docs, \
        "the documented flow pins the digest"
    for probe in ("readinessProbe", "livenessProbe"):
        assert container[probe]["httpGet"] == {"path": "/", "port": "metrics"}, probe  # served: see the image test
    assert container["livenessProbe"]["timeoutSeconds"] * container["livenessProbe"]["failureThreshold"] >= 10


def test_the_prometheus_rule_holds_the_documented_alerts_and_promtool_takes_it(tmp_path: Path) -> None:
    yaml = kube.needed("yaml", "kubetest")
    rule = _one("PrometheusRule")
    assert rule["metadata"]["namespace"] == _one("DaemonSet")["metadata"]["namespace"]
    docs = (REPO / "docs" / "kubernetes.md").read_text()
    block = docs.split("## Alerts to start with", 1)[1].split("```yaml\n", 1)[1].split("```", 1)[0]
    assert yaml.safe_load(block) == {"groups": rule["spec"]["groups"]}, "the manifest and the docs say one thing"
    promtool = needs.program("promtool", install="apt-get install prometheus")
    rules = tmp_path / "rules.yaml"
    rules.write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}))
    checked = subprocess.run([promtool, "check", "rules", str(rules)], capture_output=True, text=True, timeout=60)
    rules_found = len(rule["spec"]["groups"][0]["rules"])
    assert checked.returncode == 0 and f"SUCCESS: {rules_found} rules found" in checked.stdout, \
        checked.stdout + checked.stderr
    rules.write_text(yaml.safe_dump({"groups": [{**rule["spec"]["groups"][0], "rules": [
        {"alert": "Broken", "expr": "numapin_up =="}]}]}))
    assert subprocess.run([promtool, "check", "rules", str(rules)], capture_output=True, timeout=60).returncode != 0


def test_every_alert_has_a_severity_a_runbook_that_exists_and_names_its_node() -> None:
    import re

    docs = (REPO / "docs" / "kubernetes.md").read_text()
    anchors = {re.sub(r"[^a-z0-9 -]", "", heading.lower()).replace(" ", "-")
               for heading in re.findall(r"^#{2,3} (.+)$", docs, re.M)}
    rules = _one("PrometheusRule")["spec"]["groups"][0]["rules"]
    for rule in rules:
        assert rule["labels"]["severity"] in ("critical", "warning", "info"), rule["alert"]
        page, _, anchor = rule["annotations"]["runbook_url"].partition("#")
        assert page == "docs/kubernetes.md" and anchor in anchors, rule["alert"]
        assert rule["annotations"]["summary"] and rule["annotations"]["description"], rule["alert"]
        assert "$labels.instance" not in rule["annotations"]["summary"], "a pod's address names no node"
    exprs = [rule["expr"] for rule in rules]
    assert any(e.startswith("absent(up{") for e in exprs) and any(e.startswith("up{") for e in exprs), \
        "the exporter's own absence fires an alert"
    relabel = _one("ServiceMonitor")["spec"]["endpoints"][0]["relabelings"]
    assert {"sourceLabels": ["__meta_kubernetes_pod_node_name"], "targetLabel": "node"} in relabel


def test_the_kustomization_applies_every_manifest_with_the_image_named_once() -> None:
    yaml = kube.needed("yaml", "kubetest")
    kustomization = yaml.safe_load((DEPLOY / "kustomization.yaml").read_text())
    manifests = sorted(p.name for p in DEPLOY.glob("*.yaml") if p.name != "kustomization.yaml")
    assert sorted(kustomization["resources"]) == manifests
    (container,) = _one("DaemonSet")["spec"]["template"]["spec"]["containers"]
    (image,) = kustomization["images"]
    assert image["name"] == container["image"].rpartition(":")[0] and image["newTag"] == \
        container["image"].rpartition(":")[2], "the kustomization rewrites the DaemonSet's own image"


def test_the_service_monitor_finds_the_service_and_its_port() -> None:
    service, monitor, daemonset = _one("Service"), _one("ServiceMonitor"), _one("DaemonSet")
    wanted = monitor["spec"]["selector"]["matchLabels"]
    assert wanted.items() <= service["metadata"]["labels"].items()
    assert monitor["spec"]["namespaceSelector"]["matchNames"] == [service["metadata"]["namespace"]]
    assert {e["port"] for e in monitor["spec"]["endpoints"]} <= {p["name"] for p in service["spec"]["ports"]}
    assert all(e["honorLabels"] is True for e in monitor["spec"]["endpoints"]), "worker labels kept"
    assert service["spec"]["selector"].items() <= daemonset["spec"]["template"]["metadata"]["labels"].items()
    timeouts = [float(e["scrapeTimeout"].rstrip("s")) for e in monitor["spec"]["endpoints"]]
    args = daemonset["spec"]["template"]["spec"]["containers"][0]["args"]
    bound = float(args[args.index("--scrape-timeout") + 1])
    assert all(bound < t for t in timeouts), "the exporter answers before Prometheus gives up"


def _steps() -> list[tuple[str, str]]:
    steps = []
    for line in (DEPLOY / "Containerfile").read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            word, _, rest = line.strip().partition(" ")
            steps.append((word.upper(), rest.strip()))
    return steps


def test_the_image_recipe_run_here_serves_the_metrics(tmp_path: Path) -> None:
    # No base image can be pulled here: the recipe's own steps are carried out on this host instead. The base
    # image's Python is a fresh virtual environment of this one; COPY copies the build context as a builder
    # takes it (the repository less what .containerignore names).
    steps = _steps()
    assert [w for w, _ in steps] == ["ARG", "FROM", "COPY", "RUN", "USER", "ENTRYPOINT", "CMD"]
    assert dict(steps)["FROM"] == "${BASE}" and "[kubernetes]" in dict(steps)["RUN"]
    image = tmp_path / "image"
    subprocess.run([sys.executable, "-m", "venv", str(image)], check=True)
    where = {}
    for word, rest in steps:
        if word == "COPY":
            source, target = rest.split()
            assert source == "."
            where[target] = tmp_path / "copy"
            skipped = [line.strip() for line in (REPO / ".containerignore").read_text().splitlines()
                       if line.strip() and not line.startswith("#")]
            shutil.copytree(REPO, where[target], ignore=shutil.ignore_patterns(*skipped), symlinks=True)
        elif word == "RUN":
            command = rest
            for target, local in where.items():
                command = command.replace(target, str(local))
            env = {**os.environ, "PATH": f"{image / 'bin'}:{os.environ['PATH']}"}
            subprocess.run(["sh", "-c", command], check=True, env=env, timeout=600, capture_output=True)
        elif word == "USER":
            assert rest == "0", "the image runs as root (the DaemonSet names the capabilities it keeps)"
            if os.geteuid() != 0:
                pytest.skip("the image runs as root: so must this test")
    assert not (tmp_path / "copy").exists(), "the source is not left in the image"
    # The pod-resources client is in the image (the build itself checks it): its messages are made there.
    client = subprocess.run([str(image / "bin" / "python"), "-c", "from numapin.facts.podresources import messages; "
                             "print(sorted(messages())[:2]); import grpc, yaml"], capture_output=True, text=True,
                            timeout=120, cwd="/")
    assert client.returncode == 0 and "AllocatableResourcesRequest" in client.stdout, client.stderr
    entry = json.loads(dict(steps)["ENTRYPOINT"])
    command = json.loads(dict(steps)["CMD"])
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    listen = command[command.index("--listen") + 1]
    command[command.index("--listen") + 1] = f"127.0.0.1:{port}"  # its port, on this host's loopback only
    assert listen == ":9877"
    served = subprocess.Popen([str(image / "bin" / entry[0]), *entry[1:], *command], stderr=subprocess.PIPE,
                              text=True, cwd="/")
    try:
        assert served.stderr is not None and "serving" in served.stderr.readline()
        base = f"http://127.0.0.1:{port}"
        with urllib.request.urlopen(f"{base}/", timeout=30) as answer:  # the readiness probe's path
            assert answer.status == 200
        with urllib.request.urlopen(f"{base}/metrics", timeout=30) as answer:
            assert "numapin_up 1" in answer.read().decode()
    finally:
        served.terminate()
        assert served.wait(timeout=30) == 0
