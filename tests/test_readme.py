"""README.md's examples, run as a newcomer would run them."""

from __future__ import annotations

import contextlib
import io
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

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


def test_the_rehearsal_lists_eight_workers_on_dgx_h100_and_the_host_none(tmp_path: Path) -> None:
    # README's rehearsal as written (the folder moved into this test's own), then what ps --root says of it.
    import json
    import signal
    import time

    from live import until, without_inputs
    from numapin.facts import synthetic
    from numapin.facts.machine import this_host_cpus

    spec = synthetic.shape_named("dgx-h100")
    if len(this_host_cpus()) >= spec.sockets * spec.cores_per_socket * spec.threads_per_core:
        pytest.skip("this host has a DGX H100's CPUs: --root of dgx-h100 is no rehearsal here, it pins for real")
    code = block("rehearsal")
    assert code.count("/tmp/dgx") >= 3 and "numapin ps --root /tmp/dgx" in code
    folder = tmp_path / "dgx"
    env = without_inputs(dict(os.environ))
    script = f'numapin() {{ "{sys.executable}" -m numapin "$@"; }}\n' + code.replace("/tmp/dgx", str(folder))
    said = tmp_path / "said"
    with said.open("w") as out:  # a file, not a pipe: the workers keep what they inherit open for 60 s
        shell = subprocess.Popen(["bash", "-c", script], stdout=out, stderr=subprocess.STDOUT, env=env,
                                 start_new_session=True)
    try:
        assert shell.wait(timeout=120) == 0, said.read_text()
        workers: list[dict[str, object]] = []
        for _ in range(60):  # on a loaded machine the eight may still be starting after the block's own wait
            listed = subprocess.run([sys.executable, "-m", "numapin", "ps", "--root", str(folder), "--json"],
                                    capture_output=True, text=True, timeout=60, env=env)
            workers = json.loads(listed.stdout)["workers"]
            if len(workers) == 8:
                break
            time.sleep(0.5)
        assert sorted(w["gpu"] for w in workers) == list(range(8)), workers  # type: ignore[type-var]
        # Each worker's warning says it ran unpinned and where its placement was kept (written just after it was).
        kept = f"its placement kept for numapin ps --root {folder}"
        assert until(lambda: said.read_text().count(kept) == 8, 30), said.read_text()
        assert {w["verdict"] for w in workers} == {"rehearsal"} and {w["placed_by"] for w in workers} == {"exec"}
        assert len({w["expected"] for w in workers}) == 8  # exclusive: each GPU its own share of its node
        assert json.loads(listed.stdout)["tally"]["rehearsal"] == 8 and listed.returncode == 0
        pids = {w["pid"] for w in workers}
        # The host's own ps never reads the folder: none is a worker there, none has the rehearsal's verdict.
        host = subprocess.run([sys.executable, "-m", "numapin", "ps", "--json", "--all"], capture_output=True,
                              text=True, timeout=60, env=env)
        seen = [w for w in json.loads(host.stdout)["workers"] if w["pid"] in pids]
        assert all(w["candidate"] and w["verdict"] != "rehearsal" for w in seen), seen
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(shell.pid, signal.SIGKILL)
    ended = subprocess.run([sys.executable, "-m", "numapin", "ps", "--root", str(folder), "--json"],
                           capture_output=True, text=True, timeout=60, env=env)
    assert json.loads(ended.stdout)["workers"] == []  # a rehearsal's process that ended is listed no more
