"""vLLM 0.33's and SGLang 0.5.23's own NUMA binding (their real numa_utils.py) with no numactl installed:
NUMAPIN_PATCH puts numapin's numactl on PATH, and their spawned workers end on their GPUs' CPUs."""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import pytest
from frameworks import tree
from tier import HERE, REPO, Run, node_of, require, require_startup_file

from numapin.base.environment import PATCH


@pytest.mark.parametrize("project", ["vllm", "sglang"])
def test_the_frameworks_workers_are_bound_without_numactl(run: Run, tmp_path: Path, project: str) -> None:
    if project == "vllm":
        require("psutil")
    require_startup_file()
    stubs = tree(project, tmp_path / "site")
    # A PATH without numactl (this machine may have one: the guest tier installs it); Python by its path.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    true = shutil.which("true")  # the frameworks probe with `numactl OPTIONS true`
    assert true is not None
    (bin_dir / "true").symlink_to(true)
    assert shutil.which("numactl", path=str(bin_dir)) is None
    result = run(sys.executable, HERE / f"{project}_driver.py", PATH=str(bin_dir),
                 PYTHONPATH=f"{stubs}:{HERE}:{REPO / 'tests'}", **{PATCH: project})
    workers = json.loads(result.stdout.strip().splitlines()[-1])["workers"]
    assert len(workers) == 2
    for gpu, worker in enumerate(workers):
        assert all(set(m) == node_of(gpu) for m in worker["masks"].values()), (gpu, worker, result.stderr)
        assert worker["marker"] is not None, "bound by numapin numactl, which marks the mask numapin's"
    if project == "sglang":
        bound = json.loads(result.stdout.strip().splitlines()[-1])["bound"]
        assert len(bound) == 4 and all(set(m) == node_of(1) for m in bound.values()), bound  # every thread


def test_sglang_steps_aside_beside_the_hook_and_each_scheduler_is_placed_once(run: Run, tmp_path: Path) -> None:
    # SGLang 0.5.23 binds each scheduler by itself by default; beside NUMAPIN_AUTOPIN=1 numapin places, and SGLang's
    # binder steps aside: one placement per scheduler, numapin's, judged ok, with no external-mask warning.
    import re
    import zipfile

    from frameworks import VERSIONS, WHEELS

    require("torch")
    require_startup_file()
    site = tree("sglang", tmp_path / "site")
    shutil.rmtree(site / "torch")  # the schedulers name their GPU through real PyTorch
    wheel = next(Path(os.environ[WHEELS]).glob(f"sglang-{VERSIONS['sglang']}-*.whl"))
    with zipfile.ZipFile(wheel) as opened:
        shipped = opened.read("sglang/srt/environ.py").decode()
    defaults = dict(re.findall(r"(SGLANG_(?:AUTO_NUMA_BIND|NUMA_BIND_V2|CRASH_ON_NUMA_BIND_FAILURE)) = "
                               r"EnvBool\((True|False)\)", shipped))
    assert defaults["SGLANG_AUTO_NUMA_BIND"] == "True", "0.5.23 binds by default"
    (site / "sglang" / "srt" / "environ.py").write_text(
        "import os\nclass _Flag:\n    def __init__(self, name, default): self.name, self.default = name, default\n"
        "    def get(self):\n        value = os.environ.get(self.name)\n"
        "        return self.default if value is None else value.strip().lower() in ('1', 'true', 'yes', 'on')\n"
        "class envs:\n" + "".join(f"    {name} = _Flag({name!r}, {value})\n" for name, value in defaults.items()))
    result = run(sys.executable, HERE / "sglang_hook_driver.py", PYTHONPATH=f"{site}:{HERE}:{REPO / 'tests'}",
                 NUMAPIN_AUTOPIN="1", NUMAPIN_MEMORY="none")
    seen = json.loads(result.stdout.strip().splitlines()[-1])
    assert seen["auto"] == "0" and seen["sglang_decided"] == [None, None], seen  # its binder stepped aside
    for gpu, scheduler in enumerate(seen["schedulers"]):
        assert all(set(m) == node_of(gpu) for m in scheduler["masks"].values()), (gpu, scheduler, result.stderr)
        assert scheduler["how"] == "autopin" and scheduler["ps"] == {"placed_by": "autopin", "gpu": gpu,
                                                                     "verdict": "ok"}, scheduler
        assert not [w for w in scheduler["warnings"] if "external" in w], scheduler["warnings"]
