"""The start-up import rule (numapin.startup's NOT_A_WORKER_IMPORTS, WORKER_IMPORTS, NEVER_AT_START), checked
against the modules of real interpreters started with the start-up file active: a process that is no worker, a
worker pinned at start with each memory mode. A module added to the path fails here until the rule names it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import Python
from numapin.startup import NEVER_AT_START, NOT_A_WORKER_IMPORTS, worker_imports

LOADED = "import sys; found = sorted(sys.modules); import json; print(json.dumps(found))"  # json imports re and enum


def _loaded(python: Python, root: Path, tmp_path: Path, **env: str) -> set[str]:
    done = python("-c", LOADED, NUMAPIN_FSROOT=str(root), NUMAPIN_AUTOPIN="1",
                  NUMAPIN_RUNTIME_DIR=str(tmp_path / "records"), **env)
    assert done.returncode == 0, done.stderr
    return set(json.loads(done.stdout))


def test_a_process_that_is_no_worker_imports_only_the_glance(python: Python, pair_root: Path,
                                                              tmp_path: Path) -> None:
    loaded = _loaded(python, pair_root, tmp_path)  # the pair machine: two GPUs visible, no rank
    assert {m for m in loaded if m.startswith("numapin")} == NOT_A_WORKER_IMPORTS
    assert [m for m in NEVER_AT_START if m in loaded] == []


@pytest.mark.parametrize("memory", ["none", "preferred", "bind"])
def test_a_worker_pinned_at_start_imports_only_what_the_rule_allows(python: Python, pair_root: Path,
                                                                    tmp_path: Path, memory: str) -> None:
    loaded = _loaded(python, pair_root, tmp_path, LOCAL_RANK="0", NUMAPIN_MEMORY=memory)
    ours = {m for m in loaded if m.startswith("numapin")}
    assert "numapin.pinning.process" in ours, "the worker pinned (the check below can fail)"
    assert ours - worker_imports() == set(), f"outside the start-up rule: {sorted(ours - worker_imports())}"
    assert [m for m in NEVER_AT_START if m in loaded] == []
