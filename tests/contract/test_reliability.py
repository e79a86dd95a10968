"""Reliability across process boundaries: errors that cross them, results that pickle, start-up warnings of
bounded size, names that stay what they are.

Each test reproduces a defect that was there, and failed before its fix. The timing-based probes (a signal in
the middle of a walk, a fork while another thread pins) are in ``test_interruption.py``.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import pickle
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import live
import numapin
from conftest import in_child
from numapin.base import errors
from numapin.facts import host, inventory
from numapin.kernel import residency as numamaps
from numapin.pinning import memory
from numapin.pinning import process as pinning
from numapin.pinning.results import PinError
from numapin.placement import modes as placement

PROTOCOLS = range(pickle.HIGHEST_PROTOCOL + 1)


def _raised(call: Callable[[], object]) -> BaseException:
    try:
        call()
    except BaseException as exc:
        return exc
    raise AssertionError(f"{call} raised nothing")


def _fields(error: BaseException) -> tuple[type, str, dict[str, Any]]:
    return type(error), str(error), dict(vars(error))


# -- 1: errors and results cross process boundaries ------------------------------------


def _no_gpu_strict(root: str) -> None:
    numapin.pin(0, strict=True, root=root, environ={"CUDA_VISIBLE_DEVICES": ""})


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_errors_from_real_triggers_pickle_whole(pair_root: Path, protocol: int) -> None:
    found = [
        _raised(lambda: numapin.pin(cpus="zzz")),
        _raised(lambda: numapin.pin(99)),
        _raised(lambda: _no_gpu_strict(str(pair_root))),
    ]
    # A strict pin keeps the class of what went wrong (as plan() raises it), its result attached.
    assert [type(e) for e in found] == [errors.UsageError, inventory.UnknownGpu, inventory.NoGpuVisible]
    for error in found:
        back = pickle.loads(pickle.dumps(error, protocol))
        assert _fields(back) == _fields(error)
    strict = found[2]
    assert isinstance(strict, errors.EnvironmentProblem)
    back = pickle.loads(pickle.dumps(strict, protocol))
    assert back.result == strict.result and back.result.action is pinning.PinAction.NOTHING


@pytest.mark.parametrize("cls", [errors.NumapinError, errors.UsageError, errors.EnvironmentProblem,
                                 inventory.UnknownGpu, inventory.NoGpuVisible, inventory.NvmlError, host.HostError,
                                 memory.MemoryPolicyError, memory.NotSupported, placement.PlacementError])
def test_every_error_class_pickles_with_its_fields(cls: type[errors.NumapinError]) -> None:
    kwargs = {"value": "0-x"} if issubclass(cls, errors.UsageError) else \
        {"errno": "EINVAL"} if issubclass(cls, errors.EnvironmentProblem) else {}
    error = cls("it went wrong", **kwargs)
    for protocol in PROTOCOLS:
        back = pickle.loads(pickle.dumps(error, protocol))
        assert _fields(back) == _fields(error) and vars(back) == kwargs


def test_a_pin_result_with_threads_pickles_under_every_protocol(pair_root: Path) -> None:
    def child() -> None:
        result = numapin.pin(1, memory="preferred")
        assert len(result.threads) >= 1
        for protocol in PROTOCOLS:
            back = pickle.loads(pickle.dumps(result, protocol))
            assert back == result and back.threads == result.threads and back.placement == result.placement
            assert str(back) == str(result)

    in_child(child)


def test_a_strict_failure_in_a_pool_worker_reaches_the_parent_whole(pair_root: Path) -> None:
    with multiprocessing.get_context("fork").Pool(1) as pool:
        waiting = pool.apply_async(_no_gpu_strict, (str(pair_root),))
        with pytest.raises(inventory.NoGpuVisible) as caught:
            waiting.get(timeout=60)  # before the fix the pool's result thread died and this waited forever
    assert caught.value.result.action is pinning.PinAction.NOTHING
    assert "no GPU is visible" in str(caught.value)


def test_copy_deepcopy_of_a_pin_error() -> None:
    import copy

    error = PinError("strict pin failed", pinning.PinResult(pinning.PinAction.ROLLED_BACK))
    twin = copy.deepcopy(error)
    assert _fields(twin) == _fields(error)


# -- a public name stays what it is, whichever module is imported first -----------------


def test_public_names_stay_themselves_after_every_module_is_imported() -> None:
    # A submodule import sets an attribute on its package: none may shadow a public name.
    code = ("import pkgutil, importlib, numapin\n"
            "names = {n: getattr(numapin, n) for n in numapin.__all__}\n"
            "for m in pkgutil.walk_packages(numapin.__path__, 'numapin.'):\n"
            "    m.name.endswith('__main__') or importlib.import_module(m.name)\n"
            "print(sorted(n for n in numapin.__all__ if getattr(numapin, n) is not names[n]))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "NUMAPIN_FSROOT": "/"})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["[]"]


def test_no_public_name_is_also_a_submodule() -> None:
    import importlib.util

    clashes = [name for name in numapin.__all__ if importlib.util.find_spec(f"numapin.{name}") is not None]
    assert clashes == [], "importing such a submodule replaces the public name on the package"


# -- 10: one warning per process and problem, the memory step-down included --------------


def test_identical_pins_whose_memory_steps_down_warn_once(refusing_root: Path,
                                                          caplog: pytest.LogCaptureFixture) -> None:
    def child() -> list[str]:
        with caplog.at_level(logging.WARNING, logger="numapin"):
            results = [numapin.pin(1, memory="preferred") for _ in range(5)]
        assert all(r.memory is not None and r.memory.problems for r in results), "the step-down was not reached"
        return [r.getMessage() for r in caplog.records]

    messages = in_child(child)
    assert len(messages) == 1, messages
    # It names the node, and says why in plain words (the kernel has no such node).
    assert messages[0].startswith(f"memory not placed on node {live.MISSING_NODE}: this kernel has no memory on "
                                  f"node {live.MISSING_NODE} (its memory "), messages[0]
    assert "EINVAL" not in messages[0]


def test_facts_placements_and_reports_pickle_equal_under_every_protocol(pair_root: Path) -> None:
    from numapin.facts.machine import gather
    from numapin.pinning.request import ExecRequest
    from numapin.tools.doctor import diagnose
    from numapin.tools.exec import prepare_exec

    facts = gather(None, {})
    objects: list[object] = [
        numapin.plan(1), *numapin.plan_ranks(), numapin.current(), facts.topology, facts.visible[0],
        diagnose(gpu=1, environ={}), prepare_exec(ExecRequest(program=("true",), gpu=1), {"PATH": os.defpath}),
        numamaps.residency(),
    ]
    for obj in objects:
        for protocol in PROTOCOLS:
            back = pickle.loads(pickle.dumps(obj, protocol))
            assert back == obj, f"{type(obj).__name__} under protocol {protocol}"


def test_the_errors_travel_script_finds_every_error_the_same_after_the_trip() -> None:
    from conftest import REPO

    proc = subprocess.run([sys.executable, str(REPO / "scripts" / "errors_travel.py")], capture_output=True,
                          text=True, timeout=120, env={k: v for k, v in os.environ.items() if k != "NUMAPIN_FSROOT"})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.count("the same") == 3 and "DIFFERENT" not in proc.stdout
    for kind in ("UsageError", "UnknownGpu", "NoGpuVisible"):
        assert f"{kind}: " in proc.stdout
