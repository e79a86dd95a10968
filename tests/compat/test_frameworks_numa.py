"""NUMAPIN_PATCH=vllm / sglang: numapin's numactl on PATH where none is installed, and SGLang's
numa_bind_to_node pinning every thread (the real frameworks' files: tests/integration)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

import live
from conftest import Python, in_child
from numapin.compat.numactl_front import ensure_front, front_folder


def test_without_numactl_the_front_goes_first_on_path(tmp_path: Path) -> None:
    env = {"PATH": str(tmp_path)}  # no numactl here
    folder = ensure_front(env)
    assert folder is not None and folder == front_folder() and env["PATH"] == f"{folder}{os.pathsep}{tmp_path}"
    assert folder.startswith(os.environ["XDG_RUNTIME_DIR"]), "the runtime folder first (the session's, here)"
    assert ensure_front(env) == folder and env["PATH"].count(folder) == 1, "a second call changes nothing"
    show = subprocess.run(["numactl", "--show"], env={**os.environ, "PATH": env["PATH"]}, capture_output=True,
                          text=True, timeout=60)
    assert show.returncode == 0 and show.stdout.startswith("policy: "), show.stderr
    probe = subprocess.run(["numactl", f"--membind={live.MISSING_NODE + 7}", "true"],
                           env={**os.environ, "PATH": env["PATH"]}, capture_output=True, text=True, timeout=60)
    assert probe.returncode != 0, "a probe of a node that does not exist fails, as with numactl"


def test_an_installed_numactl_is_never_shadowed(tmp_path: Path) -> None:
    real = tmp_path / "numactl"
    real.write_text("#!/bin/sh\nexit 0\n")
    real.chmod(0o755)
    env = {"PATH": str(tmp_path)}
    assert ensure_front(env) is None and env["PATH"] == str(tmp_path)


FAKE = '''
import os

def numa_bind_to_node(node):
    """SGLang's shape: the calling thread alone."""
    os.sched_setaffinity(0, {cpus})
'''


@pytest.mark.skipif(not live.NODE0 or not live.NODE1, reason="needs two CPUs (one per pair node)")
def test_sglangs_numa_bind_to_node_pins_every_thread(pair_root: Path, tmp_path: Path) -> None:
    package = tmp_path / "sglang" / "srt" / "utils"
    package.mkdir(parents=True)
    for folder in (tmp_path / "sglang", tmp_path / "sglang" / "srt", package):
        (folder / "__init__.py").write_text("")
    (package / "numa_utils.py").write_text(textwrap.dedent(FAKE.format(cpus=sorted(live.NODE1))))

    def child() -> list[list[int]]:
        import time

        sys.path.insert(0, str(tmp_path))
        from numapin.compat import sglang

        sglang.install()
        from sglang.srt.utils.numa_utils import numa_bind_to_node  # bound by name, as SGLang's callers do

        stop = threading.Event()
        helpers = [threading.Thread(target=stop.wait) for _ in range(3)]
        for helper in helpers:
            helper.start()
        numa_bind_to_node(1)
        time.sleep(0.05)
        masks = [sorted(os.sched_getaffinity(int(t))) for t in os.listdir("/proc/self/task")]
        stop.set()
        for helper in helpers:
            helper.join()
        return masks

    masks = in_child(child)
    assert len(masks) == 4 and all(set(m) == live.NODE1 for m in masks), masks


def test_the_front_is_written_where_a_script_may_run_even_in_a_cache_not_made_yet(private_tmp: Path) -> None:
    # Hardened hosts mount /run (and /tmp) noexec: a numactl written there could not run, and the frameworks'
    # probe would fail. The front then goes to the next candidate, ~/.cache, which a fresh account has not
    # made yet (before, the probe of its parent failed, and the noexec folder was used).
    noexec, home = private_tmp / "runtime", private_tmp / "home"
    noexec.mkdir()
    home.mkdir()
    mount = subprocess.run(["mount", "-t", "tmpfs", "-o", "noexec,mode=0700,size=1m", "tmpfs", str(noexec)],
                           capture_output=True, text=True)
    if mount.returncode != 0:
        pytest.skip(f"cannot mount a noexec tmpfs here (needs root): {mount.stderr.strip()}")
    try:
        code = ("import os\nfrom numapin.compat.numactl_front import ensure_front\n"
                "env = {'PATH': os.environ['EMPTY']}\nprint(ensure_front(env))\n")
        empty = private_tmp / "empty"
        empty.mkdir()
        env = {**os.environ, "XDG_RUNTIME_DIR": str(noexec), "HOME": str(home), "EMPTY": str(empty)}
        env.pop("XDG_CACHE_HOME", None)
        proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
        folder = proc.stdout.strip()
        assert proc.returncode == 0 and folder.startswith(str(home / ".cache" / "numapin")), (proc.stdout, proc.stderr)
        run = subprocess.run([os.path.join(folder, "numactl"), "--show"], capture_output=True, text=True,
                             timeout=60)
        assert run.returncode == 0 and run.stdout.startswith("policy: "), run.stderr
    finally:
        subprocess.run(["umount", str(noexec)], capture_output=True)


def test_the_front_is_removed_with_the_job_that_put_it_there_unless_a_process_still_needs_it(
        tmp_path: Path, private_tmp: Path, python: Python) -> None:
    runtime = private_tmp  # a runtime folder only this user and root may change, as a session's is
    env = {"PATH": str(tmp_path / "empty"), "NUMAPIN_PATCH": "vllm", "XDG_RUNTIME_DIR": str(runtime)}
    # The job's first process puts the front on PATH, runs numactl through it, and exits: the front goes with it.
    alone = python("-c", "import os, subprocess; print(os.environ['PATH'].split(':')[0]); "
                   "subprocess.run(['numactl', '--show'], check=True, stdout=subprocess.DEVNULL)", **env)
    assert alone.returncode == 0, alone.stderr
    folder = Path(alone.stdout.strip())
    assert folder.is_relative_to(runtime) and not folder.exists(), folder
    # A worker it started still has it on PATH when it exits: the front stays for that worker.
    held = python("-c", "import os, subprocess; print(os.environ['PATH'].split(':')[0], flush=True); "
                  "subprocess.Popen(['/bin/sleep', '30'], start_new_session=True, stdout=subprocess.DEVNULL, "
                  "stderr=subprocess.DEVNULL)", **env)
    folder = Path(held.stdout.strip())
    try:
        assert held.returncode == 0 and (folder / "numactl").exists(), held.stderr
    finally:
        subprocess.run(["pkill", "-f", "^/bin/sleep 30$"], check=False)


def test_the_front_stays_while_another_job_of_the_user_holds_it(tmp_path: Path, private_tmp: Path,
                                                                python: Python) -> None:
    # Two jobs of one user under NUMAPIN_PATCH=vllm, neither started with the front on PATH: each of their processes
    # puts it there after starting. The first job's end leaves it to the second, which runs numactl through it;
    # the second's end removes it.
    import live

    env = {"PATH": str(tmp_path / "empty"), "NUMAPIN_PATCH": "vllm", "XDG_RUNTIME_DIR": str(private_tmp)}
    interpreter = python("-c", "import sys; print(sys.executable)", **env).stdout.strip()
    job = ("import os, subprocess, sys; print(os.environ['PATH'].split(':')[0], flush=True); sys.stdin.readline(); "
           "done = subprocess.run(['numactl', '--show'], capture_output=True, text=True); print(done.returncode, "
           "flush=True)")
    started = [subprocess.Popen([interpreter, "-c", job], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                env={**live.without_inputs(dict(os.environ)), **env}) for _ in range(2)]
    try:
        first, second = started
        assert first.stdout is not None and second.stdout is not None
        folder = Path(first.stdout.readline().strip())
        assert Path(second.stdout.readline().strip()) == folder and (folder / "numactl").exists()
        out, _ = first.communicate("\n", timeout=60)  # the first job ends
        assert out.strip() == "0" and (folder / "numactl").exists(), "left to the job that still holds it"
        out, _ = second.communicate("\n", timeout=60)
        assert out.strip() == "0", "the second job ran numactl through the front"
        assert not folder.exists(), "removed with the last job that held it"
    finally:
        for proc in started:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
