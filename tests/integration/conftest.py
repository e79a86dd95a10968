"""The integration tier: numapin under real clients (torchrun, Ray, multiprocessing spawn).

Run with ``python -m pytest tests/integration`` after ``pip install '.[integration]'``
(not editable: the start-up file is part of the test). Each client runs as a
real process tree against the pair root (the live machine seen as two nodes
with one GPU each, ``tests/live.py``). Without a client this tier skips with
one line saying what to install; with ``CI`` set it fails instead.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from tier import HERE, REPO, Run

import live
from live import without_inputs
from numapin.base.environment import FSROOT


@pytest.fixture(scope="session")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if not live.NODE0 or not live.NODE1:
        pytest.skip(f"needs allowed CPUs on both halves of the machine (allowed: {live.BASELINE})")
    return live.write_pair(tmp_path_factory.mktemp("pair") / "root")


@pytest.fixture
def environ(root: Path) -> dict[str, str]:
    """This environment's tools first on PATH, the tier's helpers importable, and the pair root as machine."""
    base = without_inputs(dict(os.environ))
    base["PATH"] = f"{Path(sys.executable).parent}:{base.get('PATH', os.defpath)}"
    base["PYTHONPATH"] = f"{HERE}:{REPO / 'tests'}"
    base[FSROOT] = str(root)
    return base


@pytest.fixture
def run(environ: dict[str, str], tmp_path: Path) -> Run:
    """Run a command in ``tmp_path`` under :func:`environ`."""
    base = environ

    def go(*command: str | Path, timeout: float = 240, **env: str) -> subprocess.CompletedProcess[str]:
        result = subprocess.run([str(c) for c in command], cwd=tmp_path, env={**base, **env}, capture_output=True,
                                text=True, timeout=timeout)
        assert result.returncode == 0, f"{command} exited {result.returncode}:\n{result.stdout}\n{result.stderr}"
        return result

    return go
