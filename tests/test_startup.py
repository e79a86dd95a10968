"""The start-up file: inactive it costs nothing, active it patches and pins, and it never breaks Python.

Each test starts a real interpreter whose site-packages holds the start-up file
this checkout ships (``src/numapin-startup.pth``) beside a path entry for the
numapin under test: a throwaway virtual environment, so the check does not
depend on how numapin was installed here (an editable install has no
start-up file). That the installed wheel carries the file is checked separately.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
from importlib import metadata
from pathlib import Path

import pytest

import live
import trtllm_like
from conftest import REPO, STARTUP, Python
from numapin.base.environment import AUTOPIN, AUTOPIN_OPTIONS, CUDA_VISIBLE_DEVICES, FSROOT, KEEP, PATCH, TLLM_AFFINITY
from numapin.base.errors import UsageError


def _imported(result: subprocess.CompletedProcess[str]) -> list[str]:
    """Modules named in ``-X importtime`` output."""
    return [line.rsplit("|", 1)[-1].strip() for line in result.stderr.splitlines() if line.startswith("import time:")]


@pytest.mark.parametrize("env", [{}, {AUTOPIN: "0"}, {AUTOPIN: "", PATCH: " "}], ids=["unset", "autopin-0", "empty"])
def test_inactive_start_up_imports_nothing_of_numapin(python: Python, env: dict[str, str]) -> None:
    result = python("-X", "importtime", "-c", "pass", **env)
    assert result.returncode == 0
    modules = _imported(result)
    assert modules, "no importtime output to check"
    assert not [m for m in modules if m.startswith("numapin")]


def test_active_start_up_imports_numapin(python: Python) -> None:
    # The check above can fail: with the variable set, numapin is imported at start.
    result = python("-X", "importtime", "-c", "pass", **{PATCH: "tensorrt_llm"})
    assert "numapin.startup" in _imported(result)


@pytest.mark.parametrize(("env", "bad"), [
    ({AUTOPIN: "maybe"}, "maybe"),
    ({PATCH: "tensorrt_llm,deepspeed"}, "deepspeed"),
    ({AUTOPIN: "1", AUTOPIN_OPTIONS["mode"]: "nearest"}, "nearest"),
    ({AUTOPIN: "1", AUTOPIN_OPTIONS["memory"]: "interleave"}, "interleave"),
    ({AUTOPIN: "1", AUTOPIN_OPTIONS["policy"]: "reset"}, "reset"),
    ({AUTOPIN: "1", AUTOPIN_OPTIONS["reserve"]: "two"}, "two"),
    ({AUTOPIN: "1", AUTOPIN_OPTIONS["reserve"]: "-1"}, "-1"),
    ({AUTOPIN: "1", "LOCAL_RANK": "-1"}, "-1"),
], ids=["autopin", "patch", "mode", "memory", "policy", "reserve", "reserve-negative", "rank"])
def test_a_bad_value_is_one_warning_and_python_starts(python: Python, env: dict[str, str], bad: str) -> None:
    result = python("-c", "print('started')", **env)
    assert result.returncode == 0 and result.stdout == "started\n"
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("numapin: start-up: ") and repr(bad) in lines[0], result.stderr


def test_a_spawned_child_is_patched_through_the_variable_only(python: Python, tmp_path: Path) -> None:
    site = trtllm_like.write(tmp_path / "site")
    probe = "import tensorrt_llm.worker as w; print(hasattr(w.configure_cpu_affinity, '__numapin_original__'))"
    env = {"PYTHONPATH": str(site), TLLM_AFFINITY: "0"}
    assert python("-c", probe, **env, **{PATCH: "tensorrt_llm"}).stdout == "True\n"
    assert python("-c", probe, **env).stdout == "False\n"


_REPORT = """
import json, logging, os, threading
import numapin
from live import masks
events = []
class Keep(logging.Handler):
    def emit(self, record): events.append((record.levelname, record.getMessage()))
logging.getLogger("numapin").addHandler(Keep())
stop = threading.Event()
threads = [threading.Thread(target=stop.wait) for _ in range(3)]
for t in threads: t.start()
born = {tid: sorted(m) for tid, m in masks().items()}
again = numapin.pin()
stop.set()
print(json.dumps({"born": born, "applied": os.environ.get("NUMAPIN_APPLIED"),
                  "omp": os.environ.get("OMP_NUM_THREADS"),
                  "changed": again.changed, "events": events}))
"""


def _autopin(python: Python, root: Path, **env: str) -> dict[str, object]:
    memory = "preferred" if live.NODE1_REAL else "none"  # node 1 of the pair root may not exist on this kernel
    result = python("-c", _REPORT, PYTHONPATH=str(REPO / "tests"), **{FSROOT: str(root), AUTOPIN: "1"},
                    **{AUTOPIN_OPTIONS["memory"]: memory}, **env)
    assert result.returncode == 0 and result.stderr == "", result.stderr
    report: dict[str, object] = json.loads(result.stdout)
    return report


def test_autopin_binds_a_worker_at_birth(python: Python, pair_root: Path) -> None:
    report = _autopin(python, pair_root, LOCAL_RANK="1")
    born = report["born"]
    assert isinstance(born, dict) and len(born) == 4
    assert all(set(mask) == live.NODE1 for mask in born.values()), born
    assert report["applied"] == live.cpus(live.NODE1)
    assert report["omp"] == str(len(live.NODE1)), "the pools are sized to the placement, as by numapin exec"
    assert report["changed"] is False and report["events"] == [], "pin() inside must change and warn nothing"


def test_autopin_reads_no_network_unless_asked(python: Python, pair_root: Path) -> None:
    # NICs are read for NUMAPIN_NICS=auto only: a worker's pin at birth pays for nothing else.
    memory = "preferred" if live.NODE1_REAL else "none"
    env = {FSROOT: str(pair_root), AUTOPIN: "1", AUTOPIN_OPTIONS["memory"]: memory, "LOCAL_RANK": "1"}
    plain = _imported(python("-X", "importtime", "-c", "pass", **env))
    assert "numapin.pinning.process" in plain and "numapin.facts.network" not in plain, "the hook pinned, without NICs"
    asked = _imported(python("-X", "importtime", "-c", "pass", **env, **{AUTOPIN_OPTIONS["nics"]: "auto"}))
    assert "numapin.facts.network" in asked


def test_autopin_takes_the_only_visible_gpu(python: Python, pair_root: Path) -> None:
    report = _autopin(python, pair_root, **{CUDA_VISIBLE_DEVICES: "1"})
    born = report["born"]
    assert isinstance(born, dict) and all(set(mask) == live.NODE1 for mask in born.values())


def test_autopin_leaves_a_launcher_alone(python: Python, pair_root: Path) -> None:
    # No local rank and both GPUs visible: torchrun's agent, a raylet. Nothing moves, nothing is said.
    report = _autopin(python, pair_root)
    born = report["born"]
    assert isinstance(born, dict) and all(set(mask) == live.ALL for mask in born.values())
    assert report["applied"] is None


def test_the_installed_wheel_carries_the_start_up_file() -> None:
    dist = metadata.distribution("numapin")
    direct = dist.read_text("direct_url.json")
    if direct and json.loads(direct).get("dir_info", {}).get("editable"):
        pytest.skip("numapin is installed editable here; setuptools' editable wheels carry only the package")
    installed = Path(sysconfig.get_path("purelib")) / STARTUP.name
    assert installed.read_bytes() == STARTUP.read_bytes()
    assert any(str(f) == STARTUP.name for f in dist.files or []), "pip uninstall would leave the file behind"


@pytest.mark.parametrize("env", [
    {PATCH: ",".join(f"nope{i}" for i in range(500))},
    {PATCH: "x" * 100_000},
    {AUTOPIN: "1", AUTOPIN_OPTIONS["mode"]: "m" * 100_000},
    {AUTOPIN: "1", AUTOPIN_OPTIONS["memory"]: "m" * 100_000},
    {AUTOPIN: "1", AUTOPIN_OPTIONS["policy"]: "p" * 100_000},
    {AUTOPIN: "y" * 100_000},
], ids=["long-patch-list", "long-patch-name", "long-mode", "long-memory", "long-policy", "long-autopin"])
def test_a_bad_value_of_any_size_is_one_short_warning(python: Python, env: dict[str, str]) -> None:
    result = python("-c", "print('ran')", **env)
    assert (result.returncode, result.stdout) == (0, "ran\n")
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and len(lines[0]) < 300, lines[:3]
    assert "numapin: start-up" in lines[0]


def test_a_huge_bad_fsroot_is_quoted_short_in_the_warning() -> None:
    # Every interpreter of a job says it: 100 KB of value must not become 100 KB of stderr each time.
    env = {**os.environ, "NUMAPIN_AUTOPIN": "1", "LOCAL_RANK": "0", "NUMAPIN_FSROOT": "/nonexistent/" + "x" * 100_000}
    done = subprocess.run([sys.executable, "-c", "import numapin.startup as s; s.at_start()"], capture_output=True,
                          text=True, timeout=60, env=env)
    assert done.returncode == 0 and "does not exist" in done.stderr and len(done.stderr) < 400, done.stderr[:300]


@pytest.mark.parametrize(("value", "on"), [("1", True), ("true", True), ("YES", True), ("on", True), ("0", False),
                                         ("false", False), ("No", False), ("off", False), ("", False)])
def test_autopin_takes_the_words_for_on_and_off(value: str, on: bool) -> None:
    # NUMAPIN_AUTOPIN=true or yes was refused.
    from numapin.startup import _autopin

    try:
        _autopin({AUTOPIN: value, "LOCAL_RANK": "-1"})  # on: the rank is read, and refused
    except UsageError as exc:
        assert on and "LOCAL_RANK" in str(exc)
    else:
        assert not on


_KEEPING = """
import json, threading
import numapin
print(json.dumps({"keeper": numapin.keeping() is not None,
                  "thread": "numapin-keeper" in [t.name for t in threading.enumerate()]}))
"""


def test_numapin_keep_keeps_the_pin_the_hook_made(python: Python, pair_root: Path) -> None:
    env = {FSROOT: str(pair_root), AUTOPIN: "1", AUTOPIN_OPTIONS["memory"]: "none", "LOCAL_RANK": "0"}
    kept = python("-c", _KEEPING, **env, **{KEEP: "0.5"})
    assert kept.returncode == 0 and json.loads(kept.stdout) == {"keeper": True, "thread": True}, kept.stderr
    assert json.loads(python("-c", _KEEPING, **env).stdout) == {"keeper": False, "thread": False}


def test_numapin_keep_keeps_what_exec_placed_and_nothing_unplaced(python: Python, pair_root: Path) -> None:
    # The process numapin exec placed carries its marker and its record: its hook keeps it.
    env = {FSROOT: str(pair_root), KEEP: "1"}
    interpreter = python("-c", "import sys; print(sys.executable)").stdout.strip()  # its venv has the file
    placed = subprocess.run([sys.executable, "-m", "numapin", "exec", "--cpus", live.cpus(live.NODE0), "--memory",
                             "none", "--", interpreter, "-c", _KEEPING], capture_output=True, text=True,
                            timeout=60, env={**live.without_inputs(dict(os.environ)), **env})
    assert placed.returncode == 0 and json.loads(placed.stdout) == {"keeper": True, "thread": True}, placed.stderr
    # A Python process of the job that numapin did not place (a tokenizer, a launcher) keeps nothing.
    alone = python("-c", _KEEPING, **env)
    assert alone.returncode == 0 and json.loads(alone.stdout) == {"keeper": False, "thread": False}, alone.stderr


@pytest.mark.parametrize("value", ["-1", "soon", "nan"])
def test_a_bad_numapin_keep_is_one_warning_and_python_starts(python: Python, pair_root: Path, value: str) -> None:
    result = python("-c", "print('started')", **{FSROOT: str(pair_root), AUTOPIN: "1", "LOCAL_RANK": "0",
                                                 AUTOPIN_OPTIONS["memory"]: "none", KEEP: value})
    assert result.returncode == 0 and result.stdout == "started\n"
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and f"NUMAPIN_KEEP={value!r}: expected" in lines[0], result.stderr
