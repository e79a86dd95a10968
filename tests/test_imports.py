"""What ``import numapin`` loads: nothing but its version until a name is used, and a pin never the CLI."""

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
    assert loaded == {"numapin", "numapin.version"}, sorted(loaded)


def test_a_pin_loads_only_what_it_needs() -> None:
    loaded = _modules_after("import numapin; numapin.pin(cpus='0')")
    assert "numapin.pinning" in loaded  # the check below can fail: the pin path did load
    for absent in ("numapin.cli", "numapin.audit", "numapin.snapshot", "numapin.machines", "pynvml", "argparse",
                   "tempfile", "shutil", "platform", "tarfile", "json",
                   # what costs a pin's start-up more than its work, and buys nothing at run time
                   "dataclasses", "typing", "logging", "re", "pathlib", "inspect"):
        assert absent not in loaded, f"{absent} loaded by a pin"


def test_every_public_name_resolves_and_is_listed() -> None:
    for name in numapin.__all__:
        assert getattr(numapin, name) is not None
    assert set(numapin.__all__) == set(numapin._WHERE) | {"__version__"}
    assert set(numapin.__all__) <= set(dir(numapin))
