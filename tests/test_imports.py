"""What ``import numapin`` loads: nothing else until a name is used, and a pin never the CLI."""

from __future__ import annotations

import json
import subprocess
import sys

import numapin

_LOADED = "import json, sys; {code}; print(json.dumps(sorted(sys.modules)))"


def _modules_after(code: str) -> set[str]:
    out = subprocess.run([sys.executable, "-c", _LOADED.format(code=code)], capture_output=True, text=True,
                         check=True, env={"PATH": "/usr/bin:/bin"}).stdout
    return set(json.loads(out)) - set(json.loads(subprocess.run(
        [sys.executable, "-c", _LOADED.format(code="pass")], capture_output=True, text=True, check=True,
        env={"PATH": "/usr/bin:/bin"}).stdout))


def test_import_numapin_loads_nothing_else() -> None:
    loaded = _modules_after("import numapin")
    assert loaded == {"numapin"}, sorted(loaded)
    assert "numapin.version" in _modules_after("import numapin; numapin.__version__")


def test_a_pin_loads_only_what_it_needs() -> None:
    loaded = _modules_after("import numapin; numapin.pin(cpus='0')")
    assert "numapin.pinning.process" in loaded  # the check below can fail: the pin path did load
    for absent in ("numapin.cli", "numapin.tools.threads_report", "numapin.tools.snapshot", "numapin.facts.synthetic",
                   "numapin.facts.network", "numapin.facts.interrupts", "numapin.tools.doctor", "pynvml", "argparse",
                   "numapin.kernel.threadpools",  # pools are resized only when asked
                   "tempfile", "shutil", "platform", "tarfile", "json",
                   # what costs a pin's start-up more than its work, and buys nothing at run time
                   "dataclasses", "typing", "logging", "re", "pathlib", "inspect"):
        assert absent not in loaded, f"{absent} loaded by a pin"


def test_a_scan_that_finds_no_worker_loads_neither_the_judge_nor_the_machine(tmp_path: object) -> None:
    # ps looks through every process of the host: where none is a worker (a login node, a thousand shells), it
    # reads their open files and nothing of the machine, so it starts as fast as the scan allows.
    code = (f"import os; os.environ['NUMAPIN_RUNTIME_DIR'] = os.path.join({str(tmp_path)!r}, 'records'); "
            "from numapin.tools.ps import survey; found = survey(); "
            "print(json.dumps(len(found.counted)), file=sys.stderr)")
    done = subprocess.run([sys.executable, "-c", _LOADED.format(code=code)], capture_output=True, text=True,
                          check=True, env={"PATH": "/usr/bin:/bin"})
    loaded = set(json.loads(done.stdout))
    assert "numapin.tools.ps" in loaded
    if json.loads(done.stderr) == 0:  # (a host running a real GPU worker beside the tests judges it)
        for absent in ("numapin.observe.judge", "numapin.facts.machine", "numapin.facts.topology",
                       "numapin.placement.modes"):
            assert absent not in loaded, absent


def test_every_public_name_resolves_and_is_listed() -> None:
    for name in numapin.__all__:
        assert getattr(numapin, name) is not None
    assert set(numapin.__all__) == set(numapin._WHERE)
    assert set(numapin.__all__) <= set(dir(numapin))


def test_the_public_surface_is_small_and_every_name_is_in_the_library_guide() -> None:
    from conftest import REPO

    guide = (REPO / "docs" / "library.md").read_text()
    missing = [name for name in numapin.__all__ if f"`{name}" not in guide and f"numapin.{name}" not in guide]
    assert missing == [], f"public names docs/library.md does not document: {missing}"
    assert "TYPE_CHECKING" not in dir(numapin)


def test_no_name_of_an_earlier_layout_is_offered() -> None:
    # Nothing was released before the layout in folders: no old name lingers, at the top or in a module.
    import importlib

    import pytest

    for old in ("Action", "Ownership", "Policy", "Mode", "MemoryPolicy", "Gpu", "residency", "local_rank"):
        with pytest.raises(AttributeError):
            getattr(numapin, old)
    for module in ("audit", "threads", "numa", "numamaps", "ledger", "records", "deprecation", "ownership"):
        with pytest.raises(ModuleNotFoundError):
            importlib.import_module(f"numapin.{module}")
