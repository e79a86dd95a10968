"""The guest tier: boot each guest shape once per session and run everything for it in that boot."""

from __future__ import annotations

import json
import os
import shlex
import sys
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest
import runner

REPO = Path(__file__).resolve().parents[2]

#: The test files that talk to the kernel (pinning, memory, exec, the threads report, the one judge,
#: compat, the keeper), run inside the guests with README's test command.
KERNEL_FACING = ("tests/pinning/test_pin.py", "tests/kernel/test_affinity.py", "tests/pinning/test_memory.py",
                 "tests/tools/test_exec.py", "tests/tools/test_threads_report.py", "tests/test_readme.py",
                 "tests/contract/test_visible_from_outside.py", "tests/tools/test_numactl.py",
                 "tests/observe/test_judge.py", "tests/pinning/test_keeper.py", "tests/pinning/test_keeper_cgroup.py",
                 "tests/contract/test_amd_hosts.py", "tests/contract/test_container_gpus.py")
#: The shapes whose boot also runs those files (the slow part under emulation).
SUITE_SHAPES = ("two-node", "grace")


@dataclass(frozen=True)
class GuestReport:
    run: runner.GuestRun
    checks: dict[str, dict[str, object]]
    suite_rc: int | None
    suite_output: str

    def text(self, name: str) -> str:
        return self.run.files.get(name, b"").decode(errors="replace")


def _script(shape: str) -> str:
    python = shlex.quote(sys.executable)
    lines = [
        f"cd {shlex.quote(str(REPO))}",
        f"{python} tests/guest/checks.py /job/out/checks.json {shape} > /job/out/checks.txt 2>&1",
        "echo $? > /job/out/checks.rc",
    ]
    if shape in SUITE_SHAPES:
        files = " ".join(KERNEL_FACING)
        # Snapshot archives are file formats, not kernel behaviour: under emulation they are minutes.
        lines += [f"{python} -m pytest -q -p no:cacheprovider -k 'not snapshot' {files} > /job/out/suite.txt 2>&1",
                  "echo $? > /job/out/suite.rc"]
    return "\n".join(lines) + "\n"


def _report(shape: str) -> GuestReport:
    env = {"PATH": f"{Path(sys.executable).parent}:/usr/local/bin:/usr/bin:/bin", "HOME": "/root",
           "PYTHONDONTWRITEBYTECODE": "1", "LANG": "C.UTF-8"}
    # Emulation is slow and this machine's speed varies (the same guest job took 4 to 14 minutes): a wide bound.
    run = runner.boot(runner.SHAPES[shape], _script(shape), env=env, timeout=1500)
    files = run.files
    checks = json.loads(files["checks.json"]) if "checks.json" in files else {}
    suite_rc = int(files["suite.rc"].decode().strip()) if "suite.rc" in files else None
    return GuestReport(run, checks, suite_rc, files.get("suite.txt", b"").decode(errors="replace"))


@pytest.fixture(scope="session")
def guest() -> Iterator[Callable[[str], GuestReport]]:
    """Each shape's report. Every guest boots at the first request, all at once: under
    emulation a guest keeps about one host CPU busy, so they overlap well."""
    lacks = runner.missing()
    if lacks:
        message = f"needs {', '.join(lacks)}: install {runner.NEEDS}"
        if os.environ.get("CI"):
            pytest.fail(f"CI must run the guest tier, but it {message}", pytrace=False)
        pytest.skip(f"guest tier {message}")
    with ThreadPoolExecutor(max_workers=len(runner.SHAPES)) as pool:
        futures = {shape: pool.submit(_report, shape) for shape in runner.SHAPES}

        def report(shape: str) -> GuestReport:
            try:
                return futures[shape].result()
            except runner.GuestError as exc:
                pytest.fail(f"guest {shape}: {exc}", pytrace=False)

        yield report
