"""Corrupted machines: every kind of fact file broken in every way, read by show, plan and pin.

Each kind of file of a synthetic machine (one path pattern: ``cpuN/topology/
core_id`` for all CPUs') is in turn emptied, garbled, given absurd ids,
replaced by a folder or by a FIFO, first in one file, then in every file of
the kind at once, so that every file of the machine is hit every way; then
``show``, ``plan`` and a non-strict ``pin()`` (against the kernel model) run
on it. The contract: a clear numapin error or a result, never another
exception, never a hang. The default run covers small machines in seconds;
``-m slow`` (run by CI) covers dgx-h100 and gb300.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from kernel_model import ModelKernel
from numapin.base.errors import NumapinError
from numapin.cli.show import _show_json, _show_text
from numapin.cpuset import CpuSet
from numapin.facts import synthetic as machines
from numapin.facts.machine import gather
from numapin.pinning import process as pinning
from numapin.pinning import state as ownership
from numapin.pinning.process import refresh
from numapin.placement.plan import plan_ranks

CORRUPTIONS = ("empty", "garbled", "absurd", "folder", "fifo")
GARBAGE = "\u00b2 --1 banana\x00\xff 0-\n"
ABSURD = "100000\n"


def kinds(root: Path) -> dict[str, list[Path]]:
    """Every file, grouped by path pattern (digits as N): ``cpuN/topology/core_id`` is one kind."""
    found: dict[str, list[Path]] = {}
    for path in sorted(p for p in root.rglob("*") if p.is_file() and not p.is_symlink()):
        found.setdefault(re.sub(r"[0-9]+", "N", str(path.relative_to(root))), []).append(path)
    return found


@contextmanager
def corrupted(paths: list[Path], how: str) -> Iterator[None]:
    saved = {path: path.read_bytes() for path in paths}
    for path in paths:
        path.unlink()
        if how == "folder":
            path.mkdir()
        elif how == "fifo":
            os.mkfifo(path)
        else:
            path.write_text({"empty": "", "garbled": GARBAGE, "absurd": ABSURD}[how], errors="surrogateescape")
    try:
        yield
    finally:
        for path, data in saved.items():
            if path.is_dir():
                shutil.rmtree(path)
            else:
                path.unlink()
            path.write_bytes(data)


@contextmanager
def deadline(seconds: int, what: str) -> Iterator[None]:
    def hung(signum: int, frame: object) -> None:
        raise AssertionError(f"hung: {what}")

    old = signal.signal(signal.SIGALRM, hung)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def exercise(root: Path, allowed: CpuSet) -> None:
    """show, plan and a non-strict pin on ``root``: numapin's own errors only, and pin never raises."""
    try:
        facts = gather(root, {})
        _show_text(facts)
        json.dumps(_show_json(facts))
        plan_ranks(root=root, environ={})
    except NumapinError:
        pass  # a clear one-line error on the command line
    refresh()
    result = pinning.pin(0, root=root, environ={}, kernel=ModelKernel(allowed, threads=3))
    assert isinstance(result, pinning.PinResult)


def sweep(root: Path) -> int:
    """Each kind's first file alone, then every file of the kind at once, in every way: every file is hit."""
    allowed = gather(root, {}).topology.allowed
    done = 0
    for kind, paths in kinds(root).items():
        for group in ([paths[0]], paths) if len(paths) > 1 else ([paths[0]],):
            for how in CORRUPTIONS:
                what = f"{kind} ({len(group)} files) {how}"
                with corrupted(group, how), deadline(20, what):
                    try:
                        exercise(root, allowed)
                    except (AssertionError, NumapinError):
                        raise
                    except Exception as exc:
                        raise AssertionError(f"{what}: {type(exc).__name__}: {exc}") from exc
                done += 1
    # Folders with ids past the kernel's limits, and a CPU link to nowhere.
    for extra in ("sys/devices/system/cpu/cpu100000", "sys/devices/system/node/node100000"):
        (root / extra).mkdir()
        try:
            exercise(root, allowed)
        finally:
            (root / extra).rmdir()
        done += 1
    return done


@pytest.fixture(autouse=True)
def _own_state(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # The model is not this process: its pins must not reach numapin's state here, nor the record
    # other tests read of this process.
    monkeypatch.setattr(ownership, "_STATE", ownership.PinState())
    monkeypatch.setenv("NUMAPIN_RUNTIME_DIR", str(tmp_path / "records"))


SMALL = machines.MachineSpec("small-grace", sockets=2, cores_per_socket=2, gpus_per_node=1, gpu_memory_nodes=True,
                             gpu_model="NVIDIA GB300")


@pytest.mark.parametrize("shape", ["laptop", SMALL], ids=["laptop", "small-grace"])
def test_every_kind_of_file_corrupted_every_way(shape: str | machines.MachineSpec, tmp_path: Path) -> None:
    root = machines.write(shape, tmp_path / "root")
    assert sweep(root) >= 5 * 30, "every kind of file, every way"


@pytest.mark.slow
@pytest.mark.parametrize("name", ["dgx-h100", "gb300"])
def test_large_machines_corrupted_every_way(name: str, tmp_path: Path) -> None:
    root = machines.write(name, tmp_path / "root")
    assert sweep(root) >= 5 * 30
