"""What the program inherits from ``numapin exec`` besides its pin: signal dispositions and locale as its
caller gave them, not as Python changed them for itself. (Not kernel-NUMA-facing: not run in the guests.)"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from live import without_inputs

NUMAPIN = [sys.executable, "-m", "numapin"]


def run(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*NUMAPIN, *args], env=env, capture_output=True, text=True, timeout=60)


@pytest.fixture
def env(pair_root: Path) -> dict[str, str]:
    return {**without_inputs(dict(os.environ)), "NUMAPIN_FSROOT": str(pair_root)}


def test_a_closed_pipe_ends_the_program_by_sigpipe_as_without_exec(env: dict[str, str]) -> None:
    # Python ignores SIGPIPE at start-up and execve() keeps ignored signals: `yes` would
    # then print "Broken pipe" and exit 1 instead of dying quietly of SIGPIPE (141).
    numapin = " ".join(NUMAPIN)
    line = f"{numapin} exec --cpus 0 -- yes | head -1; echo \"${{PIPESTATUS[0]}}\""
    plain = subprocess.run(["bash", "-c", "yes | head -1; echo \"${PIPESTATUS[0]}\""],
                           capture_output=True, text=True, timeout=60)
    proc = subprocess.run(["bash", "-c", line], env=env, capture_output=True, text=True, timeout=60)
    assert plain.stdout.split() == ["y", str(128 + signal.SIGPIPE)]
    assert (proc.stdout.split(), proc.stderr) == (plain.stdout.split(), "")


def test_the_program_gets_default_signal_dispositions(env: dict[str, str]) -> None:
    # A shell reads the mask it was given (a Python program would change it again at its start).
    proc = run(["exec", "--cpus", "0", "--", "sh", "-c", "grep SigIgn /proc/self/status"], env)
    ignored = int(proc.stdout.split()[1], 16)
    for number in (signal.SIGPIPE, signal.SIGXFSZ):
        assert not ignored & (1 << (number - 1)), f"signal {number} handed on ignored"


def test_the_program_gets_the_callers_locale_not_pythons(env: dict[str, str]) -> None:
    # Under the C locale Python exports LC_CTYPE=C.UTF-8 for itself (PEP 538).
    base = {k: v for k, v in env.items() if not k.startswith("LC_") and k != "LANG"}
    show = ["exec", "--cpus", "0", "--", "sh", "-c", "echo \"ctype=${LC_CTYPE-unset}\""]
    assert run(show, {**base, "LANG": "C"}).stdout.strip() == "ctype=unset"
    assert run(show, {**base, "LANG": "C", "LC_CTYPE": "C"}).stdout.strip() == "ctype=C"
    assert run(show, {**base, "LC_CTYPE": "C.UTF-8"}).stdout.strip() == "ctype=C.UTF-8"
