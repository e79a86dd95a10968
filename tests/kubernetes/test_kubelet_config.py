"""The kubelet's configuration file read whole (PyYAML, the kubernetes extra's): nested maps and lists, quoting,
flow style, comments, JSON; what cannot be read is named, never a traceback."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import kube
from numapin.facts.kubelet import CONFIG, read_kubelet

CONFIG_YAML = """\
# kubeadm's, then edited by hand
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
cpuManagerPolicy: "static"   # quoted, and a comment after it
cpuManagerPolicyOptions:
  full-pcpus-only: "true"
topologyManagerPolicy: 'single-numa-node'
topologyManagerScope: pod
topologyManagerPolicyOptions: {prefer-closest-numa-nodes: "true"}
reservedSystemCPUs: "0-1"
featureGates:
  KubeletPodResourcesDynamicResources: true
allowedUnsafeSysctls:
  - kernel.numa_balancing
"""


def _write(root: Path, text: str) -> None:
    path = root / CONFIG
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_nested_maps_lists_quotes_flow_and_comments_are_read(tmp_path: Path) -> None:
    kube.needed("yaml", "kubetest")
    _write(tmp_path, CONFIG_YAML)
    found = read_kubelet(tmp_path)
    assert (found.cpu_manager, found.topology_manager, found.topology_scope) == ("static", "single-numa-node", "pod")
    assert found.options["cpuManagerPolicyOptions"] == {"full-pcpus-only": "true"}
    assert found.options["topologyManagerPolicyOptions"] == {"prefer-closest-numa-nodes": "true"}
    assert found.options["featureGates"] == {"KubeletPodResourcesDynamicResources": "true"}
    assert found.config is not None and found.config["reservedSystemCPUs"] == "0-1" and found.unread == ()


def test_the_same_settings_as_json_read_alike(tmp_path: Path) -> None:
    yaml = kube.needed("yaml", "kubetest")
    _write(tmp_path, CONFIG_YAML)
    as_yaml = read_kubelet(tmp_path)
    _write(tmp_path, json.dumps(yaml.safe_load(CONFIG_YAML)))
    assert read_kubelet(tmp_path) == as_yaml


def test_a_file_that_is_no_yaml_is_named_unread_and_doctor_says_so(tmp_path: Path) -> None:
    kube.needed("yaml", "kubetest")
    _write(tmp_path, "cpuManagerPolicy: static\n  topologyManagerPolicy: [unclosed\n")
    found = read_kubelet(tmp_path)
    assert found.config == {} and len(found.unread) == 1 and found.unread[0].startswith("the whole file (no YAML")
    _write(tmp_path, "- a\n- list\n")
    assert read_kubelet(tmp_path).unread == ("the whole file (a list, not the settings' map)",)


@settings(max_examples=200, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.text())
def test_any_text_is_read_or_named_never_raised(tmp_path: Path, text: str) -> None:
    kube.needed("yaml", "kubetest")
    _write(tmp_path, text)
    found = read_kubelet(tmp_path)
    assert isinstance(found.cpu_manager, str) and all(isinstance(u, str) for u in found.unread)


def test_doctor_names_what_it_left_unread(tmp_path: Path, pair_root: Path) -> None:
    # The finding is a pod's (doctor --pid of a worker in a pod): here through the reader doctor uses.
    kube.needed("yaml", "kubetest")
    _write(pair_root, "cpuManagerPolicy: static\n  topologyManagerPolicy: [unclosed\n")
    done = subprocess.run([sys.executable, "-c", (
        "from numapin.tools.doctor import pod_findings\n"
        "from numapin.facts.machine import cached\n"
        "from numapin.facts.pod import Pod\n"
        "import os\n"
        "pod = Pod(uid='4aec46af-22b7-4e26-babb-d15383ac9151', qos='guaranteed', driver='systemd')\n"
        "found = pod_findings(os.getpid(), cached(), None, None, {}, None, pod=pod)\n"
        "print([f.id for f in found])\n")], capture_output=True, text=True, timeout=60,
        env={**os.environ, "NUMAPIN_FSROOT": str(pair_root)})
    assert done.returncode == 0, done.stderr
    assert "kubelet-config-unread" in done.stdout, done.stdout
