"""Workers that name their GPU after start (vLLM's and SGLang's way), under NUMAPIN_AUTOPIN=1 and real PyTorch."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from frameworks import VERSIONS, WHEELS
from tier import HERE, Run, node_of, require, require_startup_file

import live
from numapin.base.environment import AUTOPIN, AUTOPIN_OPTIONS

#: Where each server names its GPU, as read from its wheel (the module's docstring cites the same lines).
NAMED_IN = {"vllm": ("vllm/v1/worker/gpu_worker.py", r"torch\.accelerator\.set_device_index\(self\.device\)"),
            "sglang": ("sglang/srt/model_executor/model_runner.py",
                       r"torch\.get_device_module\(self\.device\)\.set_device\(")}


@pytest.fixture(autouse=True)
def _torch() -> None:
    require("torch")
    require_startup_file()


@pytest.mark.parametrize("how", ["cuda", "accelerator"])
def test_a_worker_that_names_gpu_1_runs_on_its_cpus_and_ps_says_numapin_placed_it(
        how: str, run: Run, environ: dict[str, str], tmp_path: Path) -> None:
    env = {**environ, AUTOPIN: "1", AUTOPIN_OPTIONS["memory"]: "none"}
    worker = subprocess.Popen([sys.executable, str(HERE / "late_gpu_worker.py"), how], cwd=tmp_path, env=env,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert worker.stdout is not None
        line = worker.stdout.readline()
        assert line, worker.communicate(timeout=60)
        seen = json.loads(line)
        assert seen["torch_error"], "a CPU build of PyTorch set a CUDA device?"
        assert len(seen["masks"]) >= 3 and all(set(m) == node_of(1) for m in seen["masks"].values()), seen
        assert seen["warnings"] == []
        rows = json.loads(run("numapin", "ps", "--json", **{AUTOPIN: ""}).stdout)
        mine = [row for row in rows["workers"] if row["pid"] == worker.pid]
        assert len(mine) == 1, rows
        assert (mine[0]["placed_by"], mine[0]["gpu"], mine[0]["verdict"]) == ("autopin", 1, "ok"), mine[0]
    finally:
        _, err = worker.communicate(timeout=60)
    assert worker.returncode == 0, err
    assert json.loads(err.rpartition("WARNINGS ")[2]) == [], err


def test_a_worker_that_names_no_gpu_stays_unplaced_and_says_so_once(environ: dict[str, str], tmp_path: Path) -> None:
    env = {**environ, AUTOPIN: "1", AUTOPIN_OPTIONS["memory"]: "none"}
    done = subprocess.run([sys.executable, str(HERE / "late_gpu_worker.py"), "none"], cwd=tmp_path, env=env,
                          input="", capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert all(set(m) == set(live.BASELINE) for m in seen["masks"].values()), seen
    said = json.loads(done.stderr.rpartition("WARNINGS ")[2])
    assert len(said) == 1 and "left unplaced: no local rank and 2 GPUs visible" in said[0], done.stderr


@pytest.mark.parametrize("project", sorted(NAMED_IN))
def test_the_servers_name_their_gpu_where_numapin_looks(project: str) -> None:
    # The versions the docs name: the call numapin wraps is the one their worker makes.
    folder = os.environ.get(WHEELS)
    wheels = sorted(Path(folder).glob(f"{project}-{VERSIONS[project]}-*.whl")) if folder else []
    if not wheels:
        message = f"{project} {VERSIONS[project]}'s wheel is not in ${WHEELS}"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    path, call = NAMED_IN[project]
    with zipfile.ZipFile(wheels[0]) as wheel:
        assert re.search(call, wheel.read(path).decode()), f"{project} {VERSIONS[project]}: {path} has no {call}"
