"""A memory policy refused (a seccomp filter as Docker's default profile): the CPUs still placed, the refusal said
exactly, with what holds and what would lift it; ``doctor`` names it. The filter is real (``seccomp_filter.py``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import live
import seccomp_filter
from numapin.base.environment import AUTOPIN, AUTOPIN_OPTIONS, FSROOT
from numapin.cpuset import CpuSet

pytestmark = pytest.mark.skipif(not seccomp_filter.supported(), reason="no syscall table here for the filter")

NUMAPIN = [sys.executable, "-m", "numapin"]
FILTERED = [sys.executable, seccomp_filter.__file__]
CPU = min(live.BASELINE)
NODE = live.TOPOLOGY.nodes_of(CpuSet([CPU]))
#: A program that starts a thread, prints every thread's mask, and exits 7.
PROGRAM = ("import json, os, sys, threading\n"
           "stop = threading.Event(); t = threading.Thread(target=stop.wait); t.start()\n"
           "print(json.dumps([sorted(os.sched_getaffinity(int(n))) for n in os.listdir('/proc/self/task')]))\n"
           "stop.set(); t.join(); sys.exit(7)\n")


def _env(**more: str) -> dict[str, str]:
    return {**live.without_inputs(dict(os.environ)), **more}


def _run(command: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, env=env or _env(), capture_output=True, text=True, timeout=120)


def _said(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("numapin")]


def _exactly(line: str) -> None:
    assert "seccomp filter" in line and "CAP_SYS_NICE" in line, line
    assert f"every thread runs on node {NODE}" in line and "pages touched before stay" in line, line


def test_exec_memory_bind_runs_the_program_pinned_and_says_once_what_holds() -> None:
    done = _run([*FILTERED, *NUMAPIN, "exec", "--cpus", str(CPU), "--memory", "bind", "--",
                 sys.executable, "-c", PROGRAM])
    assert done.returncode == 7, done.stderr
    masks = json.loads(done.stdout)
    assert len(masks) == 2 and all(m == [CPU] for m in masks), masks
    said = _said(done.stderr)
    assert len(said) == 1, done.stderr
    _exactly(said[0])


def test_exec_strict_fails_instead_and_runs_nothing() -> None:
    done = _run([*FILTERED, *NUMAPIN, "exec", "--strict", "--cpus", str(CPU), "--memory", "bind", "--",
                 sys.executable, "-c", PROGRAM])
    assert done.returncode not in (0, 7) and done.stdout == "", done
    assert "seccomp filter" in done.stderr and "CAP_SYS_NICE" in done.stderr


def test_without_the_filter_nothing_is_said() -> None:
    done = _run([*NUMAPIN, "exec", "--cpus", str(CPU), "--memory", "bind", "--", sys.executable, "-c", PROGRAM])
    assert done.returncode == 7 and _said(done.stderr) == [], done.stderr


def test_numactl_keeps_numactls_answer_and_says_why() -> None:
    # vLLM's and SGLang's binders probe `numactl ARGS true` and step down to CPUs only when it fails: numapin's
    # numactl fails where numactl would, naming the filter; the CPUs alone pass.
    refused = _run([*FILTERED, *NUMAPIN, "numactl", f"--membind={NODE}", "--", "true"])
    assert refused.returncode != 0 and "seccomp filter refuses it" in refused.stderr, refused.stderr
    assert "CAP_SYS_NICE" in refused.stderr
    assert _run([*FILTERED, *NUMAPIN, "numactl", f"--physcpubind={CPU}", "--", "true"]).returncode == 0


def test_pin_keeps_the_cpus_records_the_refusal_and_doctor_pid_names_it() -> None:
    script = ("import json, sys\nimport numapin\n"
              f"r = numapin.pin(cpus=[{CPU}], memory='bind')\n"
              "print(json.dumps({'mask': str(r.mask), 'refused': r.memory.refused}), flush=True)\n"
              "sys.stdin.read()\n")
    for filtered, want in ((True, "seccomp"), (False, None)):
        worker = subprocess.Popen([*(FILTERED if filtered else []), sys.executable, "-c", script], env=_env(),
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            assert worker.stdout is not None
            line = worker.stdout.readline()
            assert line, worker.communicate(timeout=60)
            assert json.loads(line) == {"mask": str(CPU), "refused": want}
            doctor = json.loads(_run([*NUMAPIN, "doctor", "--pid", str(worker.pid), "--json"]).stdout)
            found = [f for f in doctor["findings"] if f["id"] == "memory-policy-refused"]
            if filtered:
                assert len(found) == 1 and "seccomp filter" in found[0]["sees"], doctor
                assert "CAP_SYS_NICE" in found[0]["fix"]
            else:
                assert found == [], doctor
        finally:
            _, err = worker.communicate(timeout=60)
        said = _said(err)
        assert len(said) == (1 if filtered else 0), err
        if filtered:
            _exactly(said[0])


def test_doctor_names_a_refusing_environment() -> None:
    def finding(command: list[str]) -> list[dict[str, str]]:
        report = json.loads(_run([*command, *NUMAPIN, "doctor", "--json"]).stdout)
        return [f for f in report["findings"] if f["id"] == "memory-policy-refused"]

    found = finding(FILTERED)
    assert len(found) == 1 and "EPERM" in found[0]["sees"] and "seccomp filter" in found[0]["sees"], found
    assert finding([]) == []


def test_the_start_up_hook_pins_and_says_once(pair_root: Path) -> None:
    # One GPU visible (GPU 0 of the pair machine, on the live node 0): a worker, placed at start-up.
    script = ("from numapin import startup\n"
              "a = startup.activate()\n"
              "print(a.pinned.memory.refused, str(a.pinned.mask))\n")
    env = _env(**{AUTOPIN: "1", AUTOPIN_OPTIONS["memory"]: "bind", FSROOT: str(pair_root),
                  "CUDA_VISIBLE_DEVICES": "0"})
    done = _run([*FILTERED, sys.executable, "-c", script], env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["seccomp", live.cpus(live.NODE0)], done
    said = _said(done.stderr)
    assert len(said) == 1 and "seccomp filter" in said[0] and "What holds" in said[0], done.stderr
