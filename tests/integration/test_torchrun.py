"""torchrun starts the workers; numapin binds each one at birth, two ways, and pin() inside changes nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tier import HERE, MEMORY, Run, node_of, require, require_startup_file

from numapin.base.environment import AUTOPIN, AUTOPIN_OPTIONS


def _reports(folder: Path) -> list[dict[str, object]]:
    found = [json.loads(p.read_text()) for p in sorted(folder.glob("rank*.json"))]
    assert [r["rank"] for r in found] == [0, 1], f"reports: {[p.name for p in folder.iterdir()]}"
    return found


def _check(reports: list[dict[str, object]]) -> None:
    for r in reports:
        target = node_of(int(str(r["rank"])))
        masks = r["masks"]
        assert isinstance(masks, dict)
        # main, torch's OpenMP and inter-op threads, and the worker's two.
        assert len(masks) >= 4, f"torch started no thread of its own? {masks}"
        assert all(set(m) == target for m in masks.values()), f"rank {r['rank']}: {masks}, want {sorted(target)}"
        again = r["again"]
        assert isinstance(again, dict) and again["changed"] is False and set(again["target"]) == target
        assert r["warnings"] == []


@pytest.fixture(autouse=True)
def _torch() -> None:
    require("torch")


def test_numapin_exec_under_torchrun(run: Run, tmp_path: Path) -> None:
    run("torchrun", "--standalone", "--nproc-per-node", "2", "--no-python",
        "numapin", "exec", "--local-rank", "auto", "--memory", MEMORY, "--", "python", HERE / "torch_worker.py",
        REPORT_DIR=str(tmp_path))
    _check(_reports(tmp_path))


def test_autopin_under_plain_torchrun(run: Run, tmp_path: Path) -> None:
    # The command a user already has; only the environment changes. torchrun's agent sees two GPUs
    # and no local rank, so it is left alone; each worker is bound before torch is imported.
    require_startup_file()
    run("torchrun", "--standalone", "--nproc-per-node", "2", HERE / "torch_worker.py",
        REPORT_DIR=str(tmp_path), **{AUTOPIN: "1", AUTOPIN_OPTIONS["memory"]: MEMORY})
    reports = _reports(tmp_path)
    _check(reports)
    assert [r["applied"] for r in reports] == [",".join(map(str, sorted(node_of(g)))) for g in (0, 1)]
