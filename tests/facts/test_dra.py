"""DRA's NUMA node of a GPU (ResourceSlices as kubectl writes them), read and checked by doctor against the
kernel's."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

import numapin
from numapin.base.errors import UsageError
from numapin.facts import synthetic
from numapin.facts.dra import NUMA_NODE, PCI_BUS_ID, DraDevice, read_slices
from numapin.tools.doctor import diagnose


def _slices(devices: list[dict[str, object]], *, beta: bool = False, driver: str = "gpu.nvidia.com") -> str:
    """A ResourceSliceList of one slice holding ``devices`` (each ``name`` and ``attributes``)."""
    shaped = [{"name": d["name"], "basic": {"attributes": d["attributes"]}} if beta else d for d in devices]
    return json.dumps({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSliceList", "items": [
        {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": "node1-gpus"},
         "spec": {"driver": driver, "nodeName": "node1", "pool": {"name": "node1"}, "devices": shaped}}]})


def _gpu(name: str, pci: str, nodes: list[int] | int, *, attribute: str = NUMA_NODE) -> dict[str, object]:
    value = {"ints": nodes} if isinstance(nodes, list) else {"int": nodes}
    return {"name": name, "attributes": {PCI_BUS_ID: {"string": pci}, attribute: value}}


def test_both_shapes_both_forms_and_a_drivers_own_attribute_are_read() -> None:
    devices = [_gpu("gpu-0", "0000:18:00.0", 0), _gpu("gpu-1", "0000:28:00.0", [1, 0]),
               _gpu("gpu-2", "0000:38:00.0", 1, attribute="numaNode"),
               {"name": "nic", "attributes": {"resource.kubernetes.io/pcieRoot": {"string": "pci0000:00"}}},
               _gpu("bad", "0000:48:00.0", [-1, 70000])]
    for beta in (False, True):
        read = read_slices(_slices(devices, beta=beta, driver="gpu.amd.com"))
        assert [(d.name, d.pci, d.nodes, d.attribute) for d in read] == [
            ("gpu-0", "0000:18:00.0", (0,), NUMA_NODE), ("gpu-1", "0000:28:00.0", (1, 0), NUMA_NODE),
            ("gpu-2", "0000:38:00.0", (1,), "numaNode"), ("bad", "0000:48:00.0", (), "")]
        assert {d.driver for d in read} == {"gpu.amd.com"} and read[0].slice == "node1-gpus (node1)"


@pytest.mark.parametrize("text", ["", "[]", '{"kind": "Pod"}', "{" * 100_000, '"x"'])
def test_what_is_no_list_of_slices_is_refused_in_words(text: str) -> None:
    with pytest.raises(UsageError, match="kubectl get resourceslices -o json"):
        read_slices(text)


JSON = st.recursive(st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.text(max_size=12),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
                        st.sampled_from(["kind", "items", "spec", "devices", "attributes", "basic", "driver", "name",
                                         "int", "ints", "string", NUMA_NODE, PCI_BUS_ID, "numaNode", "metadata"]),
                        inner, max_size=5), max_leaves=20)


@given(JSON, st.sampled_from(["ResourceSliceList", "List", "ResourceSlice"]))
def test_any_json_is_devices_or_a_refusal(value: object, kind: str) -> None:
    shaped = {**value, "kind": kind} if isinstance(value, dict) else value
    try:
        found = read_slices(json.dumps(shaped))
    except UsageError:
        return
    assert all(isinstance(d, DraDevice) and all(0 <= n <= 65535 for n in d.nodes) for d in found)


def _dra(diagnosis: object) -> list[tuple[str, str]]:
    return [(f.severity, f.sees) for f in diagnosis.findings if f.id == "dra-numa-node"]  # type: ignore[attr-defined]


def test_doctor_names_the_gpu_whose_published_node_is_not_the_kernels(tmp_path: Path) -> None:
    root = synthetic.write("dgx-h100", tmp_path / "dgx")
    gpus = numapin.machine(root, {}).inventory.gpus
    agreeing = [_gpu(f"gpu-{i}", g.pci, g.node) for i, g in enumerate(gpus)]  # type: ignore[arg-type]
    assert _dra(diagnose({}, gpu=0, root=root, resource_slices=read_slices(_slices(agreeing)))) == []
    wrong = gpus[-1]
    other = next(g.node for g in gpus if g.node != wrong.node)
    moved = [*agreeing[:-1], _gpu("gpu-last", wrong.pci, other)]  # type: ignore[arg-type]
    (finding,) = _dra(diagnose({}, gpu=0, root=root, resource_slices=read_slices(_slices(moved))))
    assert finding[0] == "warning" and wrong.pci in finding[1] and f"node {wrong.node}" in finding[1]


def test_a_grace_gpus_memory_node_first_is_said_and_an_error_only_without_its_cpus_node(tmp_path: Path) -> None:
    root = synthetic.write("gb300", tmp_path / "gb")
    gpu = numapin.machine(root, {}).inventory.gpus[0]
    memory = gpu.gpu_memory_nodes.first()
    listed = _dra(diagnose({}, gpu=0, root=root,
                           resource_slices=read_slices(_slices([_gpu("g", gpu.pci, [memory, gpu.node])]))))
    alone = _dra(diagnose({}, gpu=0, root=root, resource_slices=read_slices(_slices([_gpu("g", gpu.pci, memory)]))))
    assert [s for s, _ in listed] == ["info"] and [s for s, _ in alone] == ["warning"]
    assert "its own memory's node" in alone[0][1]


def test_the_command_reads_a_file_and_refuses_a_bad_one_in_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "slices.json"
    bad.write_text("not json")
    done = subprocess.run([sys.executable, "-m", "numapin", "doctor", "--machine", "dgx-h100", "--gpu", "0",
                           "--resource-slices", str(bad)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "no JSON" in done.stderr, done.stderr
    missing = subprocess.run([sys.executable, "-m", "numapin", "doctor", "--machine", "dgx-h100", "--gpu", "0",
                              "--resource-slices", str(tmp_path / "none.json")], capture_output=True, text=True,
                             timeout=120)
    assert missing.returncode == 2 and "none.json" in missing.stderr
