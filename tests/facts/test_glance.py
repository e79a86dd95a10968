"""The start-up hook's glance (is this process surely no GPU worker?) against the full reading of the machine:
on hwloc's captures of real machines, on every synthetic machine and this host, for any CUDA_VISIBLE_DEVICES."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import Snapshots, snapshot_names
from numapin.base.environment import CUDA_VISIBLE_DEVICES
from numapin.facts import synthetic as machines
from numapin.facts.glance import _visible, machine_gpus, no_worker
from numapin.facts.inventory import read_gpus, resolve_visible
from numapin.facts.topology import read_topology


def _full_count(root: str | Path) -> int:
    return len(read_gpus(read_topology(root), nvml=False).gpus)


@pytest.mark.parametrize("name", snapshot_names())
def test_the_glance_counts_the_gpus_of_a_real_machine_as_the_full_reading(name: str, snapshots: Snapshots) -> None:
    root = snapshots.root(name)
    assert machine_gpus(str(root)) in (_full_count(root), None)


@pytest.mark.parametrize("name", sorted(machines.SHAPES))
def test_the_glance_counts_a_synthetic_machines_gpus(name: str, machine_root: Callable[[str], Path]) -> None:
    root = machine_root(name)
    assert machine_gpus(str(root)) == _full_count(root) > 0


def test_the_glance_counts_this_hosts_gpus_or_leaves_it_to_the_full_reading() -> None:
    assert machine_gpus("/") in (_full_count("/"), None)


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(value=st.lists(st.sampled_from(["0", "1", "2", "3", "7", "8", "12", "00", "01", " 1", "", "x", "-1", "\u00b2",
                                       "1000000000000", "GPU-1234", "MIG-x"]), max_size=5).map(",".join)
       | st.none())
def test_cuda_visible_devices_gives_the_count_the_full_resolution_gives(value: str | None,
                                                                        machine_root: Callable[[str], Path]) -> None:
    root = machine_root("dgx-h100")
    inventory = read_gpus(read_topology(root), nvml=False)
    env = {} if value is None else {CUDA_VISIBLE_DEVICES: value}
    glanced = _visible(value, len(inventory.gpus))
    if glanced is None:  # unsure only where a UUID is met before the list ends: the full reading decides
        assert value is not None and ("GPU-" in value or "MIG-" in value)
        return
    assert glanced == len(resolve_visible(inventory, env).visible)


@pytest.mark.parametrize(("env", "worker"), [
    ({}, False),  # eight GPUs visible
    ({CUDA_VISIBLE_DEVICES: "3"}, None),  # one: a worker, for the full reading to place
    ({CUDA_VISIBLE_DEVICES: "3,3"}, None),  # one again (a GPU named twice ends the list)
    ({CUDA_VISIBLE_DEVICES: "2,5"}, False),
    ({CUDA_VISIBLE_DEVICES: ""}, False),
    ({CUDA_VISIBLE_DEVICES: "GPU-0"}, None),  # a UUID: only the full reading can match it
    ({"LOCAL_RANK": "0"}, None),
    ({"LOCAL_RANK": " "}, False),  # an empty launcher variable counts as unset
])
def test_no_worker_is_certain_only_where_the_full_reading_agrees(
        env: dict[str, str], worker: bool | None, machine_root: Callable[[str], Path],
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NUMAPIN_FSROOT", str(machine_root("dgx-h100")))
    why = no_worker(env)
    assert (why is None) == (worker is None)
    if why is not None:
        assert why.startswith("not a worker: no local rank and ")
