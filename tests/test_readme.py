"""README.md's examples, run as a newcomer would run them."""

from __future__ import annotations

import contextlib
import io
import os
import re
import subprocess
import sys
from pathlib import Path

import numapin
from conftest import in_child
from live import NODE0, NODE1, NODE1_REAL
from numapin.cpuset import CpuSet
from numapin.pinning.memory import get_mempolicy

README = Path(__file__).resolve().parents[1] / "README.md"


def block(marker: str) -> str:
    """The fenced code between ``<!-- marker -->`` and ``<!-- /marker -->``."""
    text = README.read_text()
    found = re.search(rf"<!-- {marker} -->\s*```\w*\n(.*?)```\s*<!-- /{marker} -->", text, re.S)
    assert found, f"README.md has no {marker} block"
    return found.group(1)


def test_python_example_runs_as_written_on_a_two_gpu_machine(pair_root: Path) -> None:
    code = block("example")
    assert "numapin.pinned(gpu=" in code

    def body() -> tuple[str, set[int], str, str]:
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(compile(code, "README.md", "exec"), {})
        policy, nodes = get_mempolicy()
        return out.getvalue(), os.sched_getaffinity(0), policy.name, str(nodes)

    printed, mask, policy, nodes = in_child(body)
    physical = numapin.plan(0).pci  # type: ignore[union-attr]
    assert printed.startswith("numapin: pinned; target ") and f"for GPU 0 ({physical}, node 0)" in printed
    assert f"target {CpuSet(NODE0)}" in printed
    # After the lease the pin is GPU 1's again, with its memory bound where node 1 really exists.
    assert mask == NODE1
    assert (policy, nodes) == (("BIND", "1") if NODE1_REAL else ("DEFAULT", ""))


def test_quickstart_is_two_commands_that_ci_runs() -> None:
    commands = [line for line in block("quickstart").splitlines() if line.strip()]
    assert len(commands) == 2 and commands[0].endswith("numapin show") and "pytest" in commands[1]
    ci = (README.parent / ".ci" / "run").read_text()
    assert "quickstart" in ci
    # The test command's time, stated where CI reads it and prints it beside its own measure.
    stated = re.search(r"about <!-- quick-seconds -->(\d+)<!-- /quick-seconds --> s", README.read_text())
    assert stated and 10 <= int(stated.group(1)) <= 600 and "quick-seconds" in ci


def test_show_into_a_closed_pipe_is_quiet() -> None:
    # `numapin show | head -1`: the reader leaves after one line; `| true`
    # leaves before numapin writes anything, so the closed pipe is certain.
    for reader in ("head -1", "true"):
        shell = f"set -o pipefail; {sys.executable} -m numapin show | {reader}"
        proc = subprocess.run(["bash", "-c", shell], capture_output=True, text=True, timeout=60)
        assert (proc.returncode, proc.stderr) == (0, ""), reader
    assert proc.stdout == ""
